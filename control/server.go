package control

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"syscall"
	"time"
)

// Handler answers a daemon's requests: a reply, marshalled to JSON as it
// is, or a refusal (an *Error, or any error, sent as CodeFailed).
type Handler interface {
	ServeControl(req *Request) (reply any, err error)
}

// HandlerFunc is a function as a Handler.
type HandlerFunc func(req *Request) (any, error)

// ServeControl calls f.
func (f HandlerFunc) ServeControl(req *Request) (any, error) { return f(req) }

// Listen opens the control socket of ifname in the calling thread's
// network namespace. Another daemon serving ifname there makes it fail
// with an error that errors.Is matches with syscall.EADDRINUSE.
func Listen(ifname string) (*net.UnixListener, error) {
	return net.ListenUnix("unix", &net.UnixAddr{Name: SocketName(ifname), Net: "unix"})
}

// Timeout bounds one exchange on the server's side.
const Timeout = 5 * time.Second

// Server answers requests with its Handler.
type Server struct {
	Handler Handler
	// Authorize says whether a peer of user uid may ask; nil lets root
	// alone.
	Authorize func(uid uint32) bool
}

// Serve answers the connections ln accepts, each in its own goroutine,
// until ln is closed.
func (s *Server) Serve(ln *net.UnixListener) error {
	for {
		conn, err := ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		go s.ServeConn(conn)
	}
}

// ServeConn answers the one request of conn and closes it.
func (s *Server) ServeConn(conn *net.UnixConn) {
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(Timeout))
	enc := json.NewEncoder(conn)
	// The request is read before any answer, also a refusal: a client
	// still writing to a closed socket would see EPIPE instead of why.
	req, err := DecodeRequest(conn)
	if !s.authorized(conn) {
		err = ErrNotRoot
	}
	var reply any
	if err == nil {
		reply, err = s.Handler.ServeControl(req)
	}
	if err != nil {
		reply = encodeErr(err)
	}
	_ = enc.Encode(reply)
	// What is left of an oversized request is read and dropped: closing
	// on unread data would reset the connection, and the client lose the
	// answer that says why.
	_ = conn.CloseWrite()
	_, _ = io.Copy(io.Discard, io.LimitReader(conn, maxDrain))
}

// maxDrain bounds what ServeConn drops of a request after answering.
const maxDrain = 1 << 20

// authorized says whether conn's peer may ask.
func (s *Server) authorized(conn *net.UnixConn) bool {
	raw, err := conn.SyscallConn()
	if err != nil {
		return false
	}
	var cred *syscall.Ucred
	cerr := raw.Control(func(fd uintptr) {
		cred, err = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	})
	if cerr != nil || err != nil || cred == nil {
		return false
	}
	if s.Authorize == nil {
		return cred.Uid == 0
	}
	return s.Authorize(cred.Uid)
}
