// Package umadsa is the transport of ipoibd's subnet administrator (SA)
// requests on an InfiniBand port: it sends the requests package sa builds
// (PathRecord queries, MCMemberRecord joins and leaves) and waits for the
// answers, with its own timeouts and retries (one try lasts 1 s by
// default, as the kernel's path query: docs/ipoib-cm.md §7.3).
//
// Seams: the Client is pure Go over a Transport; the transport on a real
// port is libibumad (build tag rdma, umad.go), so that ibsim's
// libumad2sim.so can stand in for the fabric in tests. The protocol
// (records, join parameters, request masks) is package sa's; package ipoib
// takes a *Client through its Subnet interface and never imports this
// package, only the daemon (ipoibd) does.
package umadsa

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/sa"
)

// Transport moves MADs between one registered SA agent and the SA.
type Transport interface {
	// Send writes one 256-octet MAD to QP1 of the port with LID lid.
	// timeout is how long the MAD layer should keep the send outstanding
	// for its answer (the kernel drops an answer that matches no
	// outstanding send).
	Send(mad []byte, lid uint16, timeout time.Duration) error
	// Recv waits up to timeout for one MAD for the agent and copies it to
	// buf. status is non-zero when the MAD layer returns one of our sends
	// (ETIMEDOUT: it gave up waiting for the answer). It returns
	// ErrRecvTimeout when nothing came.
	Recv(buf []byte, timeout time.Duration) (n int, status int, err error)
}

// ErrRecvTimeout is what a Transport's Recv returns when nothing came.
var ErrRecvTimeout = errors.New("umadsa: receive timed out")

// ErrClosed: the client was closed before or while the request ran.
var ErrClosed = errors.New("umadsa: the SA client is closed")

// ErrNoSM: the port knows no subnet manager (SM LID 0), so there is no SA
// to ask.
var ErrNoSM = errors.New("the port has no subnet manager (SM LID 0): is one running on the fabric, and is the port active?")

// TimeoutError: the SA did not answer any try.
type TimeoutError struct {
	Method  sa.Method
	Attr    sa.AttrID
	SMLID   uint16
	Tries   int
	Timeout time.Duration
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("SA %s %s to SM LID %d: no answer after %d tries of %v each: is the subnet manager running?",
		e.Method, e.Attr, e.SMLID, e.Tries, e.Timeout)
}

// Config sets the client's port and retry policy.
type Config struct {
	PortGID ib.GID // the source of every query and the member of every join
	// SMLID reports the SM's LID, read again for every request: the SM
	// may move to another port.
	SMLID func() (uint16, error)
	// Timeout is one try's wait for an answer (default 1 s, as the kernel's
	// ipoib path query); Retries the tries after the first (0: 3, the
	// default; negative: none).
	Timeout time.Duration
	Retries int
}

// pollGap is how long await waits before asking a transport whose Recv
// returned early again.
const pollGap = 5 * time.Millisecond

// closeGap bounds one wait in Recv, so that Close ends a request under
// way within about this long.
const closeGap = 100 * time.Millisecond

// Counters of the client.
type Counters struct {
	Requests, Retries, Timeouts, StatusErrors, Stale atomic.Uint64
}

// Client asks the SA one question at a time.
type Client struct {
	t   Transport
	cfg Config
	mu  sync.Mutex // one outstanding request: answers match by TID alone
	tid uint32
	// closing ends a request under way at its next receive: Close waits
	// for it before the transport goes, whose buffers it still uses.
	closing atomic.Bool
	buf     [sa.MADLen]byte
	C       Counters

	sleep func(time.Duration) // time.Sleep; tests make it free
}

// New makes a client on a transport.
func New(t Transport, cfg Config) *Client {
	if cfg.Timeout <= 0 {
		cfg.Timeout = time.Second
	}
	if cfg.Retries < 0 {
		cfg.Retries = 0
	} else if cfg.Retries == 0 {
		cfg.Retries = 3
	}
	return &Client{t: t, cfg: cfg, tid: uint32(time.Now().UnixNano()), sleep: time.Sleep}
}

// FollowSM has every later request ask smLID for the SM's LID instead
// of Config.SMLID: for a port whose sysfs is not kept current (ibsim's
// libumad2sim.so fills it once, at start), the SM LID its port events
// carry. A request under way finishes with the LID it took.
func (c *Client) FollowSM(smLID func() (uint16, error)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cfg.SMLID = smLID
}

// do sends req and returns the answer's header and record area. Each try
// waits cfg.Timeout; a busy SA or silence is retried, any other status
// ends the request with a *sa.StatusError. Each try has a TID of its own:
// ib_umad refuses a send (EINVAL) whose TID is still outstanding from an
// earlier one, which the kernel's own timeout, a little longer than
// ours, keeps for a while. An answer to any try of the request is taken.
func (c *Client) do(req sa.Request) (sa.Header, []byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing.Load() {
		return sa.Header{}, nil, ErrClosed
	}
	c.C.Requests.Add(1)
	lid, err := c.cfg.SMLID()
	if err != nil {
		return sa.Header{}, nil, err
	}
	if lid == 0 {
		return sa.Header{}, nil, ErrNoSM
	}
	tries := 1 + c.cfg.Retries
	tids := make([]uint32, 0, tries)
	busy := false
	for try := 0; try < tries; try++ {
		if try > 0 {
			c.C.Retries.Add(1)
		}
		c.tid++
		tids = append(tids, c.tid)
		// The kernel puts its agent's ID in the TID's high 32 bits: ours
		// are the low 32, and answers are matched on them.
		req.TransactionID = uint64(c.tid)
		var out [sa.MADLen]byte
		if err := req.MarshalMAD(out[:]); err != nil {
			return sa.Header{}, nil, err
		}
		if err := c.t.Send(out[:], lid, c.cfg.Timeout); err != nil {
			return sa.Header{}, nil, fmt.Errorf("SA %s %s to SM LID %d: %w", req.Method, req.Record.AttrID(), lid, err)
		}
		h, data, st, err := c.await(req, tids)
		switch {
		case err != nil:
			return h, nil, err
		case data == nil: // this try timed out
			continue
		case st&sa.StatusBusy != 0:
			busy = true
			c.sleep(c.cfg.Timeout)
			continue
		case st != 0:
			c.C.StatusErrors.Add(1)
			return h, data, &sa.StatusError{Method: req.Method, Attr: req.Record.AttrID(), Status: st}
		}
		return h, data, nil
	}
	c.C.Timeouts.Add(1)
	if busy {
		return sa.Header{}, nil, &sa.StatusError{Method: req.Method, Attr: req.Record.AttrID(), Status: sa.StatusBusy}
	}
	return sa.Header{}, nil, &TimeoutError{Method: req.Method, Attr: req.Record.AttrID(), SMLID: lid, Tries: tries, Timeout: c.cfg.Timeout}
}

// await reads until the answer to one of req's tries (their TIDs, tids)
// comes or this try's time is up (nil data, nil error). A try lasts its
// whole timeout whatever the transport says: ibsim's umad_recv returns at
// once when nothing is there, and the MAD layer's own timeout report of
// our send means no more than ours.
func (c *Client) await(req sa.Request, tids []uint32) (sa.Header, []byte, sa.Status, error) {
	deadline := time.Now().Add(c.cfg.Timeout)
	for {
		if c.closing.Load() {
			return sa.Header{}, nil, 0, ErrClosed
		}
		left := time.Until(deadline)
		if left <= 0 {
			return sa.Header{}, nil, 0, nil
		}
		n, status, err := c.t.Recv(c.buf[:], min(left, closeGap))
		if errors.Is(err, ErrRecvTimeout) {
			c.sleep(min(left, pollGap))
			continue
		}
		if err != nil {
			return sa.Header{}, nil, 0, fmt.Errorf("SA %s %s: %w", req.Method, req.Record.AttrID(), err)
		}
		h, data, err := sa.DecodeMAD(c.buf[:n])
		if err != nil || !slices.Contains(tids, uint32(h.TransactionID)) || h.AttributeID != req.Record.AttrID() {
			c.C.Stale.Add(1) // an answer to an earlier request, or noise
			continue
		}
		if status != 0 {
			continue // the MAD layer gave up on this try's send
		}
		if !h.Method.IsResponse() {
			c.C.Stale.Add(1)
			continue
		}
		return h, data, h.Status, nil
	}
}

// PathRecord asks for the path from our port to dgid in partition pkey
// (sa.PathRequest).
func (c *Client) PathRecord(dgid ib.GID, pkey ib.PKey) (sa.PathRecord, error) {
	_, data, err := c.do(sa.PathRequest(c.cfg.PortGID, dgid, pkey))
	if err != nil {
		return sa.PathRecord{}, err
	}
	p, err := sa.DecodePathRecord(data)
	if err == nil && p.DGID != dgid {
		err = fmt.Errorf("SA PathRecord for %v answered for %v", dgid, p.DGID)
	}
	return p, err
}

// Join sets our membership in a group and returns the group as the SA
// has it: its Q_Key, MLID, MTU and rate are what the interface must use.
func (c *Client) Join(j sa.JoinRequest) (sa.MCMemberRecord, error) {
	_, data, err := c.do(j.Request(c.cfg.PortGID))
	if err != nil {
		return sa.MCMemberRecord{}, err
	}
	g, err := sa.DecodeMCMemberRecord(data)
	if err == nil && g.MGID != j.MGID {
		err = fmt.Errorf("SA join of %v answered for %v", j.MGID, g.MGID)
	}
	return g, err
}

// Leave ends our membership (the join states in state, default full).
func (c *Client) Leave(mgid ib.GID, pkey ib.PKey, state sa.JoinState) error {
	_, _, err := c.do(sa.LeaveRequest(c.cfg.PortGID, mgid, pkey, state))
	return err
}

// Close ends the client: a request under way ends (ErrClosed) at its
// next look, at most closeGap later, later ones fail at once; then the
// transport, if it is an io.Closer, is closed. Closing the transport
// under a request would free what its receive is writing to.
func (c *Client) Close() error {
	c.closing.Store(true)
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl, ok := c.t.(io.Closer); ok {
		return cl.Close()
	}
	return nil
}
