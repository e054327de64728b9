package control

import (
	"context"
	"errors"
	"testing"
	"time"
)

// undoReply records whether the server undid it.
type undoReply struct {
	ChildReply
	undone chan struct{}
}

func (u undoReply) Undo() { close(u.undone) }

// TestUndo: a reply its client cannot have any more (it gave up before
// the handler was done) is undone; one the client takes is not.
func TestUndo(t *testing.T) {
	proceed := make(chan struct{})
	undone := make(chan struct{})
	ifname := serve(t, func(*Request) (any, error) {
		<-proceed
		return undoReply{ChildReply{Name: "pod0"}, undone}, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := Call(ctx, ifname, &Request{Cmd: CmdChildAdd, Child: &ChildRequest{PKey: "0x8001"}}, nil)
	var ce *CallError
	if !errors.As(err, &ce) || ce.Op != "read" {
		t.Fatalf("a client that gave up: %v", err)
	}
	close(proceed) // the client's socket is closed: the reply cannot go
	select {
	case <-undone:
	case <-time.After(Timeout):
		t.Fatal("the reply nobody took was not undone")
	}

	kept := make(chan struct{})
	ifname = serve(t, func(*Request) (any, error) { return undoReply{ChildReply{Name: "pod1"}, kept}, nil })
	var r ChildReply
	if err := Call(context.Background(), ifname, &Request{Cmd: CmdChildAdd, Child: &ChildRequest{PKey: "0x8001"}}, &r); err != nil || r.Name != "pod1" {
		t.Fatalf("child-add: %v %+v", err, r)
	}
	select {
	case <-kept:
		t.Error("a reply the client took was undone")
	default:
	}
}
