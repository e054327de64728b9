// Package control is ipoibd's control protocol: the requests a client
// sends to a running daemon, the replies it gets, the daemon's refusals as
// typed codes, and the socket both ends speak over. The daemon serves it
// (ipoibd's Handler), and its client commands (ipoibd show, neigh, conn,
// stats, child, mode) and the CNI plugin call it; none of them spells the
// protocol out anew.
//
// One exchange per connection: the client writes one JSON Request and
// closes its writing side; the daemon answers with one JSON value, the
// reply or a refusal, and closes. The socket is the abstract Unix socket
// SocketName(IFNAME) of the network namespace the interface lives in, as
// the interface belongs to its namespace; only root may ask (SO_PEERCRED).
//
// A refusal is {"error": MESSAGE, "code": CODE}: MESSAGE is for people,
// CODE (a Code) for programs, which match it with errors.Is against the
// Err values. Daemons before codes sent {"error": MESSAGE} alone, and
// clients before codes read that field alone, so both keep working across
// an upgrade (see Error).
//
// The replies of show, neigh, conn and stats are the interface's own
// state (package ipoib's Info, NeighInfo, ConnInfo and ib.Counter), which
// this package carries as they are and does not import; Show is the part
// of show's reply the protocol itself defines, what a client that knows
// no more (the CNI plugin) reads.
package control

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
)

// SocketName is the abstract Unix socket of the daemon serving ifname.
func SocketName(ifname string) string { return "@ipoibd/" + ifname }

// Cmd names a request.
type Cmd string

// The requests.
const (
	CmdShow       Cmd = "show"        // the interface: Show (and its ipoib.Info)
	CmdNeigh      Cmd = "neigh"       // its neighbors: []ipoib.NeighInfo
	CmdNeighFlush Cmd = "neigh-flush" // forget Request.IP, or all: FlushReply
	CmdConn       Cmd = "conn"        // its connections: []ipoib.ConnInfo
	CmdStats      Cmd = "stats"       // its counters: []ib.Counter
	CmdChildAdd   Cmd = "child-add"   // make Request.Child: ChildReply
	CmdChildDel   Cmd = "child-del"   // remove the child Request.Name: ChildReply
	CmdMode       Cmd = "mode"        // switch to mode Request.Name: ModeReply
)

// cmds are the requests a daemon knows.
var cmds = []Cmd{CmdShow, CmdNeigh, CmdNeighFlush, CmdConn, CmdStats, CmdChildAdd, CmdChildDel, CmdMode}

// Request is what a client asks.
type Request struct {
	Cmd   Cmd           `json:"cmd"`
	Child *ChildRequest `json:"child,omitempty"` // child-add
	Name  string        `json:"name,omitempty"`  // child-del: a child's name, P_Key or owner; mode: the mode
	IP    string        `json:"ip,omitempty"`    // neigh-flush: the neighbor (empty: all)
}

// MaxRequest bounds what a daemon reads of a request, in octets.
const MaxRequest = 4096

// DecodeRequest reads one request of at most MaxRequest octets from r.
// What is not one, or asks for a command the daemon does not know, is an
// *Error (CodeBadRequest, CodeUnknownCommand).
func DecodeRequest(r io.Reader) (*Request, error) {
	lr := &io.LimitedReader{R: r, N: MaxRequest + 1}
	var req Request
	if err := json.NewDecoder(bufio.NewReader(lr)).Decode(&req); err != nil {
		if lr.N == 0 {
			return nil, Errorf(CodeBadRequest, "bad request: over %d octets", MaxRequest)
		}
		return nil, Errorf(CodeBadRequest, "bad request: %v", err)
	}
	return &req, req.check()
}

// check says what is wrong with a request decoded.
func (r *Request) check() error {
	known := false
	for _, c := range cmds {
		known = known || r.Cmd == c
	}
	switch {
	case !known:
		return Errorf(CodeUnknownCommand, "unknown command %s", r.Cmd)
	case r.Cmd == CmdChildAdd && r.Child == nil:
		return Errorf(CodeBadRequest, "bad request: child-add without a child")
	}
	return nil
}

// ChildRequest asks for a P_Key child of the daemon's first interface.
type ChildRequest struct {
	PKey  string   `json:"pkey"`
	Name  string   `json:"name"`  // default PARENT.PPPP, as the kernel names them
	Addrs []string `json:"addrs"` // with prefix lengths
	Mode  string   `json:"mode"`  // default the parent's
	MTU   int      `json:"mtu"`   // default the mode's
	// Netns puts the child in another network namespace (a path, or a
	// name as ip netns lists it): a pod's interface. Such children may
	// share a P_Key, each with its own UD QP and connections; Owner, which
	// the CNI plugin sets, names one for del and show.
	Netns string `json:"netns,omitempty"`
	Owner string `json:"owner,omitempty"`
}

// ChildReply names the child made or removed; a child made also says its
// link address and MTU (what a CNI result reports).
type ChildReply struct {
	Name     string `json:"name"`
	LinkAddr string `json:"link_addr,omitempty"`
	MTU      int    `json:"mtu,omitempty"`
}

// ChildInfo is one child in Show.
type ChildInfo struct {
	Name  string `json:"name"`
	PKey  uint16 `json:"pkey"`
	Netns string `json:"netns,omitempty"` // a pod's child: its namespace
	Owner string `json:"owner,omitempty"` // a pod's child: who made it
}

// Show is the part of show's reply the protocol defines. The daemon's
// reply has these fields among the interface's others (ipoib.Info).
type Show struct {
	Name     string      `json:"ifname"`
	PKey     uint16      `json:"pkey"`
	Mode     string      `json:"mode"`
	MTU      int         `json:"mtu"`
	Parent   string      `json:"parent"`   // a child's parent, "" for the first interface
	Children []ChildInfo `json:"children"` // the first interface's P_Key children
}

// ModeReply is the interface after a mode switch.
type ModeReply struct {
	Name string `json:"name"`
	Mode string `json:"mode"`
	MTU  int    `json:"mtu"`
}

// FlushReply says how many neighbors a flush forgot.
type FlushReply struct {
	Name    string `json:"name"`
	Flushed int    `json:"flushed"`
}

// errReply is a refusal on the wire.
type errReply struct {
	Error string `json:"error"`
	Code  Code   `json:"code,omitempty"` // absent from daemons before codes
}

// refusal reads raw as a refusal: nil if it is a reply.
func refusal(raw json.RawMessage) error {
	var e errReply
	if json.Unmarshal(raw, &e) != nil || e.Error == "" {
		return nil
	}
	if e.Code == "" {
		e.Code = legacyCode(e.Error)
	}
	return &Error{Code: e.Code, Msg: e.Error}
}

// encodeErr is err as the daemon sends it.
func encodeErr(err error) errReply {
	r := errReply{Error: err.Error(), Code: CodeFailed}
	if e := (*Error)(nil); errors.As(err, &e) {
		r.Code = e.Code
	}
	return r
}
