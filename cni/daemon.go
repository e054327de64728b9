package cni

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
)

// The plugin speaks ipoibd's control protocol: one JSON request and one
// JSON answer on the abstract Unix socket @ipoibd/IFNAME of the namespace
// the master interface lives in (ipoibd/socket.go serves it). These types
// are the fields of it the plugin uses.

type request struct {
	Cmd   string        `json:"cmd"`
	Child *childRequest `json:"child,omitempty"`
	Name  string        `json:"name,omitempty"`
}

type childRequest struct {
	PKey  string   `json:"pkey"`
	Name  string   `json:"name"`
	Addrs []string `json:"addrs"`
	Mode  string   `json:"mode,omitempty"`
	MTU   int      `json:"mtu,omitempty"`
	Netns string   `json:"netns"`
	Owner string   `json:"owner"`
}

type childReply struct {
	Name     string `json:"name"`
	LinkAddr string `json:"link_addr"`
	MTU      int    `json:"mtu"`
}

// showReply is the part of the master's `show` the plugin reads.
type showReply struct {
	Name     string      `json:"ifname"`
	PKey     uint16      `json:"pkey"`
	Mode     string      `json:"mode"`
	MTU      int         `json:"mtu"`
	Children []childInfo `json:"children"`
}

type childInfo struct {
	Name  string `json:"name"`
	PKey  uint16 `json:"pkey"`
	Netns string `json:"netns"`
	Owner string `json:"owner"`
}

// errNoDaemon: nothing answers on the master's control socket, so no
// ipoibd serves it here (and no pod child of it exists: they go with
// their daemon).
var errNoDaemon = errors.New("no ipoibd serves the master interface")

// errNoChild is the daemon's answer to child-del for an owner it does not
// know (ipoibd's delChild: "no child ...").
var errNoChild = errors.New("the daemon has no such child")

// askTimeout bounds one exchange; a child add opens QPs and a TUN.
const askTimeout = 10 * time.Second

// ask sends req to the daemon of master and decodes its answer into
// reply; the daemon's refusals come back as errors.
func ask(master string, req request, reply any) error {
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: "@ipoibd/" + master, Net: "unix"})
	if err != nil {
		return fmt.Errorf("%w %s in this network namespace (%v)", errNoDaemon, master, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(askTimeout))
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return fmt.Errorf("asking ipoibd of %s: %w", master, err)
	}
	_ = conn.CloseWrite()
	var raw json.RawMessage
	if err := json.NewDecoder(conn).Decode(&raw); err != nil {
		return fmt.Errorf("ipoibd of %s did not answer: %w", master, err)
	}
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(raw, &e) == nil && e.Error != "" {
		if strings.HasPrefix(e.Error, "no child ") {
			return fmt.Errorf("%w: %s", errNoChild, e.Error)
		}
		return fmt.Errorf("ipoibd of %s: %s", master, e.Error)
	}
	if err := json.Unmarshal(raw, reply); err != nil {
		return fmt.Errorf("ipoibd of %s: its answer: %w", master, err)
	}
	return nil
}

// show asks for the master's state and its children.
func show(master string) (showReply, error) {
	var r showReply
	err := ask(master, request{Cmd: "show"}, &r)
	return r, err
}

// addChild asks for a pod's child.
func addChild(master string, c childRequest) (childReply, error) {
	var r childReply
	err := ask(master, request{Cmd: "child-add", Child: &c}, &r)
	return r, err
}

// delChild removes the child of owner; a child or daemon that is gone
// already is no error, as DEL must be idempotent.
func delChild(master, owner string) error {
	var r childReply
	err := ask(master, request{Cmd: "child-del", Name: owner}, &r)
	if errors.Is(err, errNoChild) || errors.Is(err, errNoDaemon) {
		return nil
	}
	return err
}
