package cni

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/ipoibd/ipoibd/control"
)

// fakeDaemon serves master's control socket in this namespace, answering
// child-del as del says.
func fakeDaemon(t *testing.T, master string, del func(owner string) error) {
	t.Helper()
	ln, err := control.Listen(master)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	s := &control.Server{Handler: control.HandlerFunc(func(r *control.Request) (any, error) {
		if err := del(r.Name); err != nil {
			return nil, err
		}
		return control.ChildReply{Name: "net1"}, nil
	}), Authorize: func(uint32) bool { return true }}
	go s.Serve(ln)
}

// TestDelChild: a DEL whose child or daemon is gone already succeeds, by
// the daemon's code (or, from a daemon before codes, its no-child
// refusal); any other refusal fails it with the daemon's reason.
func TestDelChild(t *testing.T) {
	for k, c := range []struct {
		name string
		del  func(string) error // nil: no daemon
		want string             // "": no error
	}{
		{"removed", func(string) error { return nil }, ""},
		{"no daemon", nil, ""},
		{"no child", func(o string) error { return control.Errorf(control.CodeNoChild, "no child %q of ib0", o) }, ""},
		{"no child, in other words", func(o string) error { return control.Errorf(control.CodeNoChild, "nothing owned by %s", o) }, ""},
		{"not parent", func(string) error {
			return control.Errorf(control.CodeNotParent, "ib0.8001 is a child: ask its parent ib0")
		}, "ib0.8001 is a child: ask its parent ib0"},
		{"failed", func(string) error { return errors.New("no child-like failure") }, "no child-like failure"},
	} {
		t.Run(c.name, func(t *testing.T) {
			master := fmt.Sprintf("cnitest%d.%d", os.Getpid(), k)
			if c.del != nil {
				fakeDaemon(t, master, c.del)
			}
			err := delChild(master, "cni/net/c1/net1")
			switch {
			case c.want == "" && err != nil:
				t.Errorf("delChild: %v, want none", err)
			case c.want != "" && (err == nil || err.Error() != "ipoibd of "+master+": "+c.want):
				t.Errorf("delChild: %v, want %q", err, c.want)
			}
		})
	}
}

// TestDelChildOldDaemon: a daemon from before codes, which refuses with
// its message alone, still lets DEL of a child it lost succeed.
func TestDelChildOldDaemon(t *testing.T) {
	master := fmt.Sprintf("cnitest%d.old", os.Getpid())
	ln, err := control.Listen(master)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = io.ReadAll(conn)
			_ = json.NewEncoder(conn).Encode(map[string]string{"error": `no child "cni/net/c1/net1" of ib0`})
			conn.Close()
		}
	}()
	if err := delChild(master, "cni/net/c1/net1"); err != nil {
		t.Errorf("delChild: %v, want none", err)
	}
	if _, err := show(master); err == nil || !strings.Contains(err.Error(), "no child") {
		t.Errorf("show: %v, want the daemon's refusal", err)
	}
}
