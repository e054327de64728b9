package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

var sockets atomic.Int32

// listen opens a fresh abstract socket for the test, closed when it ends,
// and returns the interface name it serves.
func listen(t *testing.T) (string, *net.UnixListener) {
	t.Helper()
	ifname := fmt.Sprintf("ctltest%d.%d", os.Getpid(), sockets.Add(1))
	ln, err := Listen(ifname)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ifname, ln
}

// serve starts a Server of h on a fresh abstract socket, open to any
// user, and returns the interface name it serves.
func serve(t *testing.T, h HandlerFunc) string {
	t.Helper()
	ifname, ln := listen(t)
	s := &Server{Handler: h, Authorize: func(uint32) bool { return true }}
	go s.Serve(ln)
	return ifname
}

// TestRoundTrip: each request reaches the handler as it was sent, and
// its reply comes back as the handler gave it.
func TestRoundTrip(t *testing.T) {
	child := &ChildRequest{PKey: "0x8001", Name: "pod0", Addrs: []string{"10.1.0.2/24"}, Mode: "connected", MTU: 65520, Netns: "/run/netns/p", Owner: "cni/x"}
	for _, c := range []struct {
		req   Request
		reply any // what the handler answers; the client decodes into a new one of its type
	}{
		{Request{Cmd: CmdShow}, &Show{Name: "ib0", PKey: 0xffff, Mode: "connected", MTU: 65520, Children: []ChildInfo{{Name: "pod0", PKey: 0x8001, Netns: "/run/netns/p", Owner: "cni/x"}}}},
		{Request{Cmd: CmdShow}, &Show{Name: "ib0.8001", PKey: 0x8001, Mode: "datagram", MTU: 2044, Parent: "ib0", Children: []ChildInfo{}}},
		{Request{Cmd: CmdChildAdd, Child: child}, &ChildReply{Name: "pod0", LinkAddr: "80:00:00:48:fe:80:00:00:00:00:00:00:00:02:c9:03:00:00:00:01", MTU: 65520}},
		{Request{Cmd: CmdChildDel, Name: "cni/x"}, &ChildReply{Name: "pod0"}},
		{Request{Cmd: CmdMode, Name: "datagram"}, &ModeReply{Name: "ib0", Mode: "datagram", MTU: 2044}},
		{Request{Cmd: CmdNeighFlush, IP: "10.1.0.3"}, &FlushReply{Name: "ib0", Flushed: 1}},
		{Request{Cmd: CmdNeighFlush}, &FlushReply{Name: "ib0", Flushed: 7}},
		{Request{Cmd: CmdNeigh}, &[]map[string]any{{"ip": "10.1.0.3", "state": "REACHABLE"}}},
		{Request{Cmd: CmdConn}, &[]map[string]any{}},
		{Request{Cmd: CmdStats}, &[]map[string]any{{"name": "rx_packets", "value": 3.0}}},
	} {
		t.Run(string(c.req.Cmd), func(t *testing.T) {
			var got *Request
			ifname := serve(t, func(r *Request) (any, error) { got = r; return c.reply, nil })
			reply := reflect.New(reflect.TypeOf(c.reply).Elem())
			if err := Call(context.Background(), ifname, &c.req, reply.Interface()); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, &c.req) {
				t.Errorf("the handler got %+v, want %+v", got, c.req)
			}
			if !reflect.DeepEqual(reply.Interface(), c.reply) {
				t.Errorf("reply %+v, want %+v", reply.Interface(), c.reply)
			}
			var raw json.RawMessage
			if err := Call(context.Background(), ifname, &c.req, &raw); err != nil {
				t.Fatal(err)
			}
			if want, _ := json.Marshal(c.reply); string(raw) != string(want) {
				t.Errorf("raw reply %s, want %s", raw, want)
			}
		})
	}
}

var sentinels = []*Error{ErrNotRoot, ErrBadRequest, ErrUnknownCommand, ErrInvalid, ErrExists, ErrNoChild, ErrNotChild, ErrNotParent, ErrFailed}

// TestErrorCodes: each code the handler gives survives the wire, matches
// its Err value with errors.Is and no other, and keeps its message; an
// error with no code arrives as CodeFailed.
func TestErrorCodes(t *testing.T) {
	for _, c := range []struct {
		err  error
		want *Error
	}{
		{Errorf(CodeInvalid, "MTU %d: must be positive", -1), ErrInvalid},
		{Errorf(CodeExists, "%s exists", "ib0.8001"), ErrExists},
		{Errorf(CodeNoChild, "no child %q of %s", "x", "ib0"), ErrNoChild},
		{Errorf(CodeNotChild, "ib0 is not a child: stop the daemon to remove it"), ErrNotChild},
		{Errorf(CodeNotParent, "ib0.8001 is a child: ask its parent ib0"), ErrNotParent},
		{Errorf(CodeUnknownCommand, "unknown command frob"), ErrUnknownCommand},
		{Errorf(CodeBadRequest, "bad request"), ErrBadRequest},
		{Errorf(CodeNotRoot, "%s", ErrNotRoot.Msg), ErrNotRoot},
		{WithCode(CodeInvalid, errors.New("P_Key 0x9 is not in the port's table")), ErrInvalid},
		{fmt.Errorf("opening the child: %w", WithCode(CodeExists, errors.New("taken"))), ErrExists},
		{errors.New("TUN: device busy"), ErrFailed},
	} {
		t.Run(string(c.want.Code), func(t *testing.T) {
			ifname := serve(t, func(*Request) (any, error) { return nil, c.err })
			err := Call(context.Background(), ifname, &Request{Cmd: CmdShow}, nil)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Call: %v (%T), want an *Error", err, err)
			}
			if e.Msg != c.err.Error() || e.Error() != c.err.Error() {
				t.Errorf("message %q, want %q", e.Msg, c.err.Error())
			}
			for _, s := range sentinels {
				if errors.Is(err, s) != (s == c.want) {
					t.Errorf("errors.Is(%v, %s) = %v", err, s.Code, !(s == c.want))
				}
			}
			if !errors.Is(c.err, c.want) && c.want != ErrFailed {
				t.Errorf("the daemon's own error does not match %s", c.want.Code)
			}
		})
	}
}

// exchange writes raw to ifname's socket as a client and returns the
// answer as it came.
func exchange(t *testing.T, ifname string, raw []byte) []byte {
	t.Helper()
	conn, err := net.Dial("unix", SocketName(ifname))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(Timeout))
	_, _ = conn.Write(raw)
	_ = conn.(*net.UnixConn).CloseWrite()
	out, err := io.ReadAll(conn)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestBadRequests: what is not a request, or is too long, or asks what
// the daemon does not know, is refused with a clear message and its code,
// never reaches the handler, and the server goes on answering.
func TestBadRequests(t *testing.T) {
	ifname := serve(t, func(r *Request) (any, error) {
		if r.Cmd != CmdShow {
			t.Errorf("the handler got %+v", r)
		}
		return Show{Name: "ib0"}, nil
	})
	huge := `{"cmd":"show","name":"` + strings.Repeat("x", MaxRequest) + `"}`
	for _, c := range []struct {
		name, raw string
		code      Code
		msg       string
	}{
		{"empty", "", CodeBadRequest, "bad request: EOF"},
		{"not JSON", "show\n", CodeBadRequest, "bad request: invalid character 's' looking for beginning of value"},
		{"truncated", `{"cmd":"sh`, CodeBadRequest, "bad request: unexpected EOF"},
		{"wrong type", `{"cmd":7}`, CodeBadRequest, "bad request: json: cannot unmarshal number into Go struct field Request.cmd of type control.Cmd"},
		{"array", `[]`, CodeBadRequest, "bad request: json: cannot unmarshal array into Go value of type control.Request"},
		{"oversized", huge, CodeBadRequest, fmt.Sprintf("bad request: over %d octets", MaxRequest)},
		{"unknown command", `{"cmd":"frob"}`, CodeUnknownCommand, "unknown command frob"},
		{"no command", `{}`, CodeUnknownCommand, "unknown command "},
		{"child-add without child", `{"cmd":"child-add"}`, CodeBadRequest, "bad request: child-add without a child"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := exchange(t, ifname, []byte(c.raw))
			var e errReply
			if err := json.Unmarshal(out, &e); err != nil {
				t.Fatalf("answer %q: %v", out, err)
			}
			if e.Code != c.code || e.Error != c.msg {
				t.Errorf("answer %+v, want code %s and %q", e, c.code, c.msg)
			}
		})
	}
	var s Show
	if err := Call(context.Background(), ifname, &Request{Cmd: CmdShow}, &s); err != nil || s.Name != "ib0" {
		t.Errorf("after the bad requests: %+v, %v", s, err)
	}
}

// TestNotAuthorized: a peer the server does not let ask is refused with
// ErrNotRoot, its request read first, and the handler never called.
func TestNotAuthorized(t *testing.T) {
	ifname := fmt.Sprintf("ctltest%d.noauth", os.Getpid())
	ln, err := Listen(ifname)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s := &Server{Handler: HandlerFunc(func(*Request) (any, error) {
		t.Error("handler called")
		return nil, nil
	}), Authorize: func(uint32) bool { return false }}
	go s.Serve(ln)
	err = Call(context.Background(), ifname, &Request{Cmd: CmdStats}, nil)
	if !errors.Is(err, ErrNotRoot) || err.Error() != ErrNotRoot.Msg {
		t.Errorf("Call: %v, want %v", err, ErrNotRoot)
	}
}

// TestNoDaemon: nothing listening is ErrNoDaemon, a *CallError of Op dial.
func TestNoDaemon(t *testing.T) {
	err := Call(context.Background(), fmt.Sprintf("ctltest%d.none", os.Getpid()), &Request{Cmd: CmdShow}, nil)
	var ce *CallError
	if !errors.Is(err, ErrNoDaemon) || !errors.As(err, &ce) || ce.Op != "dial" {
		t.Errorf("Call: %v, want ErrNoDaemon", err)
	}
	if errors.Is(&CallError{Op: "read", Err: io.EOF}, ErrNoDaemon) {
		t.Error("a read error is ErrNoDaemon")
	}
}

// TestDecodeError: a reply that is not the one asked for is a CallError
// of Op decode, not a refusal.
func TestDecodeError(t *testing.T) {
	ifname := serve(t, func(*Request) (any, error) { return []int{1}, nil })
	var s Show
	err := Call(context.Background(), ifname, &Request{Cmd: CmdShow}, &s)
	var ce *CallError
	if !errors.As(err, &ce) || ce.Op != "decode" {
		t.Errorf("Call: %v, want a decode CallError", err)
	}
}

// TestUpgrade: across an upgrade, a daemon before codes (a refusal with
// its message alone) still gives the new client its code where the CNI
// plugin needs it, and a new daemon's refusal reads as before to an old
// client, which knew the message field alone.
func TestUpgrade(t *testing.T) {
	for _, c := range []struct {
		msg  string
		want *Error
	}{
		{`no child "cni/x" of ib0`, ErrNoChild},
		{ErrNotRoot.Msg, ErrNotRoot},
		{"unknown command frob", ErrUnknownCommand},
		{"bad request", ErrBadRequest},
		{"P_Key 0x8009 is not in the port's P_Key table", ErrFailed},
	} {
		old := serveRaw(t, map[string]string{"error": c.msg})
		err := Call(context.Background(), old, &Request{Cmd: CmdChildDel, Name: "cni/x"}, nil)
		if !errors.Is(err, c.want) || err.Error() != c.msg {
			t.Errorf("old daemon's %q: %v, want %s", c.msg, err, c.want.Code)
		}
	}
	ifname := serve(t, func(*Request) (any, error) { return nil, Errorf(CodeNoChild, "no child %q of ib0", "cni/x") })
	var old struct {
		Error string `json:"error"`
	}
	out := exchange(t, ifname, []byte(`{"cmd":"child-del","name":"cni/x"}`))
	if err := json.Unmarshal(out, &old); err != nil || old.Error != `no child "cni/x" of ib0` {
		t.Errorf("an old client reads %s as %+v, %v", out, old, err)
	}
}

// serveRaw answers every connection with v, whatever it asks, as a
// daemon of another version might.
func serveRaw(t *testing.T, v any) string {
	t.Helper()
	ifname, ln := listen(t)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = io.ReadAll(conn)
			_ = json.NewEncoder(conn).Encode(v)
			conn.Close()
		}
	}()
	return ifname
}
