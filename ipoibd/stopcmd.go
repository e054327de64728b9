package main

import (
	"fmt"
	"io"
	"net"
	"time"

	"github.com/ipoibd/ipoibd/control"
)

// stopWait bounds how long `ipoibd stop` waits for the daemon to be gone:
// the unit's TimeoutStopSec.
const stopWait = 10 * time.Second

// stopCommand is `ipoibd stop [IFNAME]`: the daemon of IFNAME stops for
// good, its children (pods' too) and their state go with it, unlike on
// SIGTERM, after which the next daemon takes them back. It returns once
// the daemon's control socket is gone.
func stopCommand(args []string, out io.Writer) error {
	c := newIfCommand("stop")
	if _, done, err := c.parse(args, out); done || err != nil {
		return err
	}
	if _, err := ask(*c.ifname, control.Request{Cmd: control.CmdStop}); err != nil {
		return err
	}
	addr := &net.UnixAddr{Name: control.SocketName(*c.ifname), Net: "unix"}
	for deadline := time.Now().Add(stopWait); ; {
		conn, err := net.DialUnix("unix", nil, addr)
		if err != nil {
			break
		}
		conn.Close()
		if time.Now().After(deadline) {
			return withExit(exitNoDaemon, fmt.Errorf("the daemon of %s still answers %v after it was asked to stop", *c.ifname, stopWait))
		}
		time.Sleep(50 * time.Millisecond) // the socket gives no notice when it closes
	}
	_, err := fmt.Fprintf(out, "%s: stopped for good, its children removed\n", *c.ifname)
	return err
}
