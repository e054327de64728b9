// Command testnet offers internal/testnet's clusters to the scripts (the
// demo, the bench, scripts/cluster.sh): the same hosts, addresses, daemons
// and loss that the ipoibd end-to-end tests make in Go. Run as root.
//
//	testnet up NAME N            make the bridge and N hosts (NAME-h1..hN)
//	testnet start NAME K [FLAG]  start ipoibd on host K; returns once it answers
//	testnet stop NAME K [SIG]    signal host K's daemon (default TERM), wait for its exit
//	testnet exec NAME K CMD...   run a command on host K
//	testnet log NAME K           print host K's daemon log
//	testnet pid NAME K           print host K's daemon's process ID
//	testnet loss NAME K PCT      drop PCT % of fabric datagrams arriving at host K
//	testnet down NAME            stop every daemon, remove every namespace
//
// Host K has underlay 10.N0.0.K/24 on eth0 (MTU 9000), where N0 is the
// cluster's number (CLUSTER_NET when it was made, default 77); start gives
// the IPoIB interface ib0 the addresses 192.168.N0.K/24 and fd00:N0::K/64
// unless --addr flags are passed. IPOIBD names the daemon (default: the
// ipoibd next to this command, as make build puts both in bin/).
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/ipoibd/ipoibd/internal/testnet"
	"golang.org/x/sys/unix"
)

const usage = `usage:
  testnet up NAME N            make the bridge and N hosts (NAME-h1..hN)
  testnet start NAME K [FLAG]  start ipoibd on host K; returns once it answers
  testnet stop NAME K [SIG]    signal host K's daemon (default TERM), wait for its exit
  testnet exec NAME K CMD...   run a command on host K
  testnet log NAME K           print host K's daemon log
  testnet pid NAME K           print host K's daemon's process ID
  testnet loss NAME K PCT      drop PCT % of fabric datagrams arriving at host K
  testnet down NAME            stop every daemon, remove every namespace
environment: CLUSTER_NET (up: the cluster number, default 77),
  IPOIBD (start: the daemon, default the ipoibd next to this command)
`

// errUsage: the command line is wrong (exit status 2).
type errUsage string

func (e errUsage) Error() string { return string(e) }

func main() {
	err := run(os.Args[1:], os.Stdout)
	if err == nil {
		return
	}
	fmt.Fprintln(os.Stderr, "testnet:", err)
	if _, ok := err.(errUsage); ok {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	os.Exit(1)
}

// arity: how many words after the verb each verb takes, at least and at
// most (-1: no limit).
var arity = map[string][2]int{
	"up": {2, 2}, "start": {2, -1}, "stop": {2, 3}, "exec": {3, -1},
	"log": {2, 2}, "pid": {2, 2}, "loss": {3, 3}, "down": {1, 1},
}

func run(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return errUsage("no command")
	}
	verb, args := args[0], args[1:]
	a, ok := arity[verb]
	if !ok {
		return errUsage(fmt.Sprintf("unknown command %q", verb))
	}
	if len(args) < a[0] || a[1] >= 0 && len(args) > a[1] {
		return errUsage(fmt.Sprintf("%s: wrong number of arguments", verb))
	}
	name := args[0]
	switch verb {
	case "up":
		return up(name, args[1])
	case "down":
		return testnet.Down(name)
	}
	k, err := number("K", args[1])
	if err != nil {
		return err
	}
	c, err := testnet.Open(name)
	if err != nil {
		return err
	}
	return onHost(c, verb, k, args[2:], stdout)
}

// up makes cluster name with n (a word of the command line) hosts.
func up(name, n string) error {
	hosts, err := number("N", n)
	if err != nil {
		return err
	}
	net := testnet.DefaultNet
	if s := os.Getenv("CLUSTER_NET"); s != "" {
		if net, err = number("CLUSTER_NET", s); err != nil {
			return err
		}
	}
	_, err = testnet.Up(name, hosts, net)
	return err
}

// onHost runs a verb that acts on host k of cluster c, with the words of
// the command line after K.
func onHost(c *testnet.Cluster, verb string, k int, rest []string, stdout io.Writer) error {
	switch verb {
	case "start":
		c.Daemon = daemon()
		return c.Start(k, rest...)
	case "stop":
		sig := unix.SIGTERM
		if len(rest) == 1 {
			var err error
			if sig, err = testnet.ParseSignal(rest[0]); err != nil {
				return errUsage(err.Error())
			}
		}
		return c.Stop(k, sig)
	case "exec":
		// Replaced, not run: the caller's pid, signals, streams and exit
		// status are the command's, as with `ip netns exec`.
		cmd := c.Command(k, rest[0], rest[1:]...)
		if cmd.Err != nil {
			return cmd.Err
		}
		return unix.Exec(cmd.Path, cmd.Args, os.Environ())
	case "log":
		return printLog(c, k, stdout)
	case "pid":
		pid, err := c.Pid(k)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(stdout, pid)
		return err
	case "loss":
		pct, err := strconv.Atoi(rest[0])
		if err != nil {
			return errUsage(fmt.Sprintf("loss: percent %q: %v", rest[0], err))
		}
		return c.Loss(k, pct)
	}
	return errUsage(fmt.Sprintf("unknown command %q", verb))
}

// printLog copies host k's daemon log to stdout.
func printLog(c *testnet.Cluster, k int, stdout io.Writer) error {
	f, err := os.Open(c.LogPath(k))
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(stdout, f)
	return err
}

// number reads a positive count or index.
func number(what, s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, errUsage(fmt.Sprintf("%s %q: want a number from 1", what, s))
	}
	return n, nil
}

// daemon: IPOIBD, or the ipoibd next to this command.
func daemon() string {
	if d := os.Getenv("IPOIBD"); d != "" {
		return d
	}
	self, err := os.Executable()
	if err != nil {
		return "bin/ipoibd"
	}
	return filepath.Join(filepath.Dir(self), "ipoibd")
}
