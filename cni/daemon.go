package cni

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ipoibd/ipoibd/control"
)

// The plugin speaks ipoibd's control protocol (package control): one
// request and one answer on the control socket of the master interface,
// in the namespace the master lives in. It tells the daemon's refusals
// apart by their codes, never by their text.

// errNoDaemon: nothing answers on the master's control socket, so no
// ipoibd serves it here (and no pod child of it exists: they go with
// their daemon).
var errNoDaemon = errors.New("no ipoibd serves the master interface")

// askTimeout bounds one exchange; a child add opens QPs and a TUN.
const askTimeout = 10 * time.Second

// ask sends req to the daemon of master and decodes its answer into
// reply; the daemon's refusals come back as errors that wrap its
// *control.Error.
func ask(master string, req control.Request, reply any) error {
	ctx, cancel := context.WithTimeout(context.Background(), askTimeout)
	defer cancel()
	err := control.Call(ctx, master, &req, reply)
	var ce *control.CallError
	switch {
	case err == nil:
		return nil
	case !errors.As(err, &ce):
		return fmt.Errorf("ipoibd of %s: %w", master, err)
	case ce.Op == "dial":
		return fmt.Errorf("%w %s in this network namespace (%v)", errNoDaemon, master, ce.Err)
	case ce.Op == "write":
		return fmt.Errorf("asking ipoibd of %s: %w", master, ce.Err)
	case ce.Op == "read":
		return fmt.Errorf("ipoibd of %s did not answer: %w", master, ce.Err)
	}
	return fmt.Errorf("ipoibd of %s: its answer: %w", master, ce.Err)
}

// show asks for the master's state and its children.
func show(master string) (control.Show, error) {
	var r control.Show
	err := ask(master, control.Request{Cmd: control.CmdShow}, &r)
	return r, err
}

// addChild asks for a pod's child.
func addChild(master string, c control.ChildRequest) (control.ChildReply, error) {
	var r control.ChildReply
	err := ask(master, control.Request{Cmd: control.CmdChildAdd, Child: &c}, &r)
	return r, err
}

// delChild removes the child of owner; a child or daemon that is gone
// already is no error, as DEL must be idempotent.
func delChild(master, owner string) error {
	err := ask(master, control.Request{Cmd: control.CmdChildDel, Name: owner}, nil)
	if errors.Is(err, control.ErrNoChild) || errors.Is(err, errNoDaemon) {
		return nil
	}
	return err
}
