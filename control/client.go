package control

import (
	"context"
	"encoding/json"
	"net"
	"time"
)

// Call sends req to the daemon serving ifname in the calling thread's
// network namespace and decodes its reply into reply (a pointer, or a
// *json.RawMessage for the reply as it came; nil drops it). The daemon's
// refusal is an *Error; an exchange that got no answer is a *CallError.
// ctx's deadline, or else Timeout, bounds the exchange.
func Call(ctx context.Context, ifname string, req *Request, reply any) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", SocketName(ifname))
	if err != nil {
		return &CallError{Op: "dial", Ifname: ifname, Err: err}
	}
	conn := c.(*net.UnixConn)
	defer conn.Close()
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(Timeout)
	}
	_ = conn.SetDeadline(deadline)
	// A refusal may already be on its way when our write fails: read it.
	werr := json.NewEncoder(conn).Encode(req)
	_ = conn.CloseWrite()
	var raw json.RawMessage
	if err := json.NewDecoder(conn).Decode(&raw); err != nil {
		if werr != nil {
			return &CallError{Op: "write", Ifname: ifname, Err: werr}
		}
		return &CallError{Op: "read", Ifname: ifname, Err: err}
	}
	if err := refusal(raw); err != nil {
		return err
	}
	switch r := reply.(type) {
	case nil:
		return nil
	case *json.RawMessage:
		*r = raw
		return nil
	}
	if err := json.Unmarshal(raw, reply); err != nil {
		return &CallError{Op: "decode", Ifname: ifname, Err: err}
	}
	return nil
}
