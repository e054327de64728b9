package ipoib

import (
	"github.com/ipoibd/ipoibd/cm"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ipoib/ipoibcm"
)

// A connection whose QP cannot send (a post refused because the QP is in
// the error state, a send completion with an error status, or the QP found
// in the error state while idle) is reported once, torn down and connected
// again: its neighbors go back to UD at once, and the next packet asks for
// a new connection after the peer's backoff (a second at first). The
// connection table never shows such a connection as established.

// sendFailure is a failed send on a connection's QP.
type sendFailure struct {
	qpn    ib.QPN
	status ib.WCStatus // the completion's; WCSuccess when the post was refused
	posted bool        // false: PostSend refused it
}

// cause says in words what failed.
func (f sendFailure) cause() string {
	if !f.posted {
		return "post refused"
	}
	return "send completed with " + f.status.String()
}

// connSendFailed tells the control goroutine, without blocking, that a
// send on a connection failed. Repeats are dropped when its inbox is full:
// the first report is the one that acts.
func (i *Interface) connSendFailed(qpn ib.QPN, status ib.WCStatus, posted bool) {
	select {
	case i.sendFail <- sendFailure{qpn: qpn, status: status, posted: posted}:
	default:
	}
}

// sendFailed acts on the first failure report of a live connection; the
// rest (it is already going down) are ignored.
func (c *control) sendFailed(f sendFailure) {
	i := c.i
	if i.mgr == nil {
		return
	}
	conn := c.connection(f.qpn)
	if conn == nil || conn.State() != cm.StateEstablished {
		return
	}
	c.connFailed(conn, f.cause(), f.status)
}

// connFailed counts, logs and tears down a connection that cannot send,
// and puts its neighbors back on UD until a new one is up.
func (c *control) connFailed(conn *ipoibcm.Connection, cause string, status ib.WCStatus) {
	i := c.i
	i.ctr.inc(txConnErrors)
	if status == ib.WCRetryExceeded {
		c.reachFailed(conn.Peer.GID) // nothing acknowledged our sends
	}
	// A peer that died or restarted: routine, counted in tx_conn_errors.
	i.log.Info("connection cannot send; reconnecting", "peer", conn.Peer, "peer_ip", i.peerIPs(conn.Peer), "qpn", conn.QP.Num(), "cause", cause)
	i.mgr.SendFailed(c.now, conn.QP.Num(), status)
}

// connection finds the connection whose local QP is qpn.
func (c *control) connection(qpn ib.QPN) *ipoibcm.Connection {
	for _, conn := range c.i.mgr.Connections() {
		if conn.QP.Num() == qpn {
			return conn
		}
	}
	return nil
}

// checkConns looks at up to max established connections (in the map's
// random order, so all are seen over time) and fails those whose QP is in
// the error state: an idle connection posts nothing that could tell.
func (c *control) checkConns(max int) {
	c.connsAt = c.now
	if c.i.mgr == nil {
		return
	}
	for _, conn := range c.i.mgr.Connections() {
		if max == 0 {
			return
		}
		if conn.State() != cm.StateEstablished {
			continue
		}
		max--
		if conn.QP.State() == ib.StateError {
			c.connFailed(conn, "QP in the error state", ib.WCSuccess)
		}
	}
}
