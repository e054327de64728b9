// Command ipoibd is the IP-over-InfiniBand connected-mode daemon: it brings
// up a TUN interface and carries its packets over InfiniBand queue pairs
// (softib, or rdma-core adapters with the verbs provider).
//
//	ipoibd --underlay 10.0.0.1 --addr 192.168.77.1/24     run the daemon
//	ipoibd show|neigh|conn|stats [--ifname ib0] [--json]  ask a running one
package main

import (
	"fmt"
	"os"
)

func main() {
	args := os.Args[1:]
	cmd := "run"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "run":
		err = run(args)
	case "show", "neigh", "conn", "stats":
		err = query(cmd, args)
	case "help":
		usage()
	default:
		err = fmt.Errorf("unknown command %q (want run, show, neigh, conn or stats)", cmd)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ipoibd:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Print(`usage:
  ipoibd [run] [flags]                     run the daemon for one interface
  ipoibd show|neigh|conn|stats [--ifname IF] [--json]
                                           ask the daemon of IF (default ib0)
run "ipoibd run --help" for the daemon's flags
`)
}
