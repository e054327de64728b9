package ib

import (
	"errors"
	"fmt"
)

// This file is the provider boundary: everything above it (cm, ipoib and
// its connection manager) drives an adapter only through these interfaces,
// so the same driver runs on softib and on rdma-core. The shapes follow
// verbs closely so that the verbs provider is a thin wrapper.

// GRHLen is the space in front of every UD receive that the adapter fills
// with the global route header, as verbs does. UD payloads land after it.
const GRHLen = 40

// Errors shared by providers.
var (
	ErrClosed    = errors.New("ib: closed")
	ErrQueueFull = errors.New("ib: work queue full")
	ErrBadState  = errors.New("ib: operation not allowed in this QP state")
	ErrBadLength = errors.New("ib: buffer outside its memory region")
)

// PortAttr describes the one port a Device drives.
type PortAttr struct {
	GID       GID
	PKeys     []PKey // the P_Key table; index 0 is the default
	ActiveMTU MTU    // largest path MTU the port supports
	LinkLayer string // "InfiniBand" or "Ethernet" (RoCE, softib)
	GUID      uint64 // node (CA) GUID, the CM's identity of this adapter
	// LMC is the port's LID mask count (InfiniBand): how many low bits of
	// its LID choose among its paths. ACKDelay is the CA's local ACK delay
	// code, which a REQ's Local ACK Timeout must cover. 0 elsewhere.
	LMC, ACKDelay uint8
	// LID is the port's base LID and SMLID the subnet manager's
	// (InfiniBand; 0 elsewhere).
	LID, SMLID uint16
}

// Device is one adapter port. The interface opens it at start and closes it
// last; every object created from it is owned by the caller until closed.
type Device interface {
	// Name returns the provider's device name, e.g. "softib0" or "mlx5_0".
	Name() string
	// Port returns the port attributes; callers may keep the result.
	Port() PortAttr
	// RegisterMemory registers a slab for work requests; the caller keeps the
	// slab and must close the MR before unmapping it.
	RegisterMemory(s *Slab) (MR, error)
	// CreateCQ makes a completion queue of at least size entries; the caller
	// owns it and closes it after the QPs that use it.
	CreateCQ(size int) (CQ, error)
	// CreateSRQ makes a shared receive queue; the caller owns it.
	CreateSRQ(attr SRQAttr) (SRQ, error)
	// CreateQP makes a queue pair in the Reset state; the caller owns it.
	CreateQP(attr QPAttr) (QP, error)
	// CreateAH makes an address handle for UD sends; the caller owns it.
	CreateAH(attr AHAttr) (AH, error)
	// AttachMulticast makes the UD QP receive datagrams sent to mgid; called
	// by the UD endpoint when the kernel joins a group. mlid is the group's
	// LID on InfiniBand, from the SA's join (0 on RoCE).
	AttachMulticast(qp QP, mgid GID, mlid uint16) error
	// DetachMulticast undoes AttachMulticast.
	DetachMulticast(qp QP, mgid GID) error
	// MADs opens the QP1 management-datagram service the CM engine uses; one
	// caller at a time owns it and closes it.
	MADs() (MADService, error)
	// Counters returns a snapshot of the device-wide counters (drops by cause).
	Counters() []Counter
	// Close releases the device; objects still open are flushed and closed.
	Close() error
}

// Slab is packet memory outside the Go heap, registered once with a provider
// so that work requests can name parts of it without copying.
type Slab struct {
	mem []byte
}

// Bytes returns the slab's memory.
func (s *Slab) Bytes() []byte { return s.mem }

// MR is a registered memory region over a Slab.
type MR interface {
	// Slab returns the registered slab.
	Slab() *Slab
	// LKey returns the key work requests name the region by.
	LKey() uint32
	// Close deregisters the region; the caller keeps the slab.
	Close() error
}

// SGE names the part of a registered region a work request uses.
type SGE struct {
	MR     MR
	Offset int
	Length int
}

// Bytes returns the memory the SGE names, or ErrBadLength if it lies outside
// its region.
func (s SGE) Bytes() ([]byte, error) {
	if s.MR == nil {
		return nil, ErrBadLength
	}
	mem := s.MR.Slab().Bytes()
	if s.Offset < 0 || s.Length < 0 || s.Offset > len(mem) || s.Length > len(mem)-s.Offset {
		return nil, ErrBadLength
	}
	return mem[s.Offset : s.Offset+s.Length], nil
}

// QPType is the transport service of a queue pair.
type QPType uint8

// Queue pair types.
const (
	RC QPType = iota + 1
	UC
	UD
)

func (t QPType) String() string {
	switch t {
	case RC:
		return "RC"
	case UC:
		return "UC"
	case UD:
		return "UD"
	}
	return fmt.Sprintf("QPType(%d)", uint8(t))
}

// QPState is the state of a queue pair, as in verbs.
type QPState uint8

// Queue pair states.
const (
	StateReset QPState = iota
	StateInit
	StateRTR
	StateRTS
	StateError
)

func (s QPState) String() string {
	switch s {
	case StateReset:
		return "RESET"
	case StateInit:
		return "INIT"
	case StateRTR:
		return "RTR"
	case StateRTS:
		return "RTS"
	case StateError:
		return "ERROR"
	}
	return fmt.Sprintf("QPState(%d)", uint8(s))
}

// QPAttr are the creation attributes of a queue pair.
type QPAttr struct {
	Type    QPType
	SendCQ  CQ
	RecvCQ  CQ
	SRQ     SRQ // optional: receives come from the SRQ instead of the QP's own queue
	MaxSend int // send queue depth asked for (QP.MaxSend: what was granted)
	MaxRecv int // receive queue depth (ignored with an SRQ)
}

// QPModify moves a queue pair to State with the attributes that transition
// needs: Init takes PKey (and QKey for UD); RTR takes the remote side for
// RC/UC; RTS takes the send PSN and the retry parameters. Fields a
// transition does not use are ignored.
type QPModify struct {
	State QPState

	PKey PKey // Init
	QKey QKey // Init, UD only

	DestGID   GID  // RTR, RC/UC
	DestQPN   QPN  // RTR, RC/UC
	PathMTU   MTU  // RTR, RC/UC
	Path      Path // RTR, RC/UC: InfiniBand addressing (zero: GID only, as on RoCE)
	RecvPSN   uint32
	MinRNRTmr uint8 // RTR, RC: the RNR NAK timer code this QP asks senders to wait

	SendPSN    uint32 // RTS
	Timeout    uint8  // RTS, RC: local ACK timeout code (4.096 µs × 2^Timeout, 0 = infinite)
	RetryCount uint8  // RTS, RC: retransmissions after an ACK timeout (0-7)
	RNRRetry   uint8  // RTS, RC: retries after an RNR NAK (7 = infinite)
}

// QP is a queue pair.
type QP interface {
	// Num returns the QP number.
	Num() QPN
	// Type returns the transport service.
	Type() QPType
	// State returns the current state.
	State() QPState
	// Modify performs a state transition; called by the connection service.
	Modify(m QPModify) error
	// PostSend queues sends; the memory they name belongs to the provider until
	// their completion. It returns how many were queued.
	PostSend(wrs []SendWR) (int, error)
	// MaxSend returns the send queue depth the provider granted: the sends
	// that may be outstanding at once. It may be fewer than QPAttr.MaxSend
	// asked for (a verbs device grants at most its max_qp_wr), or more.
	MaxSend() int
	// PostRecv queues receive buffers (QPs without an SRQ); the memory belongs
	// to the provider until its completion.
	PostRecv(wrs []RecvWR) (int, error)
	// Counters returns a snapshot of this QP's counters.
	Counters() []Counter
	// Close destroys the QP; outstanding work requests complete as flushed.
	Close() error
}

// SendWR is one send work request.
type SendWR struct {
	ID  uint64 // returned in the completion
	SGE SGE
	// UD only:
	AH         AH
	RemoteQPN  QPN
	RemoteQKey QKey
}

// RecvWR is one receive work request. A UD receive needs GRHLen octets in
// front of the largest datagram.
type RecvWR struct {
	ID  uint64
	SGE SGE
}

// SRQAttr are the creation attributes of a shared receive queue.
type SRQAttr struct {
	MaxWR int // depth
	Limit int // low watermark: LimitReached fires when fewer are posted
}

// SRQ is a shared receive queue used by many connected QPs.
type SRQ interface {
	// PostRecv queues receive buffers, owned by the provider until completion.
	PostRecv(wrs []RecvWR) (int, error)
	// LimitReached is signalled once when the posted count falls below the
	// limit; call Arm to be told again.
	LimitReached() <-chan struct{}
	// Arm re-enables the limit signal with a new limit.
	Arm(limit int)
	// Posted returns how many receives are posted.
	Posted() int
	// Close destroys the SRQ; posted buffers complete as flushed.
	Close() error
}

// CQ is a completion queue. Consumers drain it with Poll and wait on Ready
// between batches: one channel operation per batch, none per packet.
type CQ interface {
	// Poll moves up to len(wc) completions into wc and returns how many.
	Poll(wc []Completion) int
	// Ready is signalled (capacity one) after completions were added.
	// Call it again before each wait: a provider may raise a CQ's events
	// only while a consumer waits (verbs, for a CQ without a handler),
	// and then signals at once so that completions added before are
	// polled.
	Ready() <-chan struct{}
	// Close destroys the CQ.
	Close() error
}

// CQHandler is a capability (see Caps) of CQs whose provider can run the consumer on
// its own receive goroutine right after adding completions, instead of
// waking the consumer's goroutine through Ready: one thread wake-up less
// per packet, which costs 100-250 µs on a virtual machine. f drains the CQ
// and must not block for long; Ready still fires for completions added
// elsewhere (flushes), so a consumer keeps waiting on it too.
type CQHandler interface {
	SetHandler(f func())
}

// WCOpcode says what a completion completes.
type WCOpcode uint8

// Completion opcodes.
const (
	WCSend WCOpcode = iota + 1
	WCRecv
)

// WCStatus is the status of a completion.
type WCStatus uint8

// Completion statuses (a subset of the verbs ones that IPoIB cares about).
const (
	WCSuccess WCStatus = iota
	WCLocalLengthError
	WCLocalQPError
	WCLocalProtectionError
	WCFlushError
	WCRetryExceeded
	WCRNRRetryExceeded
	WCRemoteInvalidRequest
	WCRemoteAccessError
	WCRemoteOperationalError
)

var wcStatusNames = [...]string{
	WCSuccess:                "success",
	WCLocalLengthError:       "local length error",
	WCLocalQPError:           "local QP operation error",
	WCLocalProtectionError:   "local protection error",
	WCFlushError:             "work request flushed",
	WCRetryExceeded:          "transport retry counter exceeded",
	WCRNRRetryExceeded:       "RNR retry counter exceeded",
	WCRemoteInvalidRequest:   "remote invalid request",
	WCRemoteAccessError:      "remote access error",
	WCRemoteOperationalError: "remote operational error",
}

func (s WCStatus) String() string {
	if int(s) < len(wcStatusNames) {
		return wcStatusNames[s]
	}
	return fmt.Sprintf("WCStatus(%d)", uint8(s))
}

// Completion reports one finished work request.
type Completion struct {
	ID      uint64
	Status  WCStatus
	Opcode  WCOpcode
	QPN     QPN    // the local QP (tells SRQ receives apart)
	ByteLen uint32 // received bytes (UD: including the GRH)
	// UD receives only:
	SrcQPN QPN
	SrcGID GID // zero when the datagram carried no GRH
	PKey   PKey
	// InfiniBand UD receives: the sender's LID and the packet's SL from
	// its LRH, and whether a GRH came with it (only then is SrcGID the
	// sender's). Without a GRH the LID is the only source the fabric
	// vouches for. 0 and false on RoCE.
	SrcLID uint16
	SL     uint8
	GRH    bool
}

// AHAttr describes a UD destination.
type AHAttr struct {
	DestGID GID
	Path    Path // InfiniBand addressing (zero: GID only, as on RoCE)
}

// Path is how packets reach a destination on an InfiniBand subnet, as the
// subnet administrator's PathRecord (or, for a multicast group, its
// MCMemberRecord) says: the local route header's fields and whether a
// global route header goes with them. The zero value (DLID 0, which is no
// valid LID) means GID addressing alone with a GRH on every packet: what
// RoCE and softib use, where there are no LIDs. Providers on an Ethernet
// link layer ignore it.
type Path struct {
	// DLID is the destination's LID (a multicast group's MLID for a
	// multicast AH): the LRH's DLID, what switches forward by.
	DLID uint16
	// SL is the service level (4 bits): the LRH's SL, which the fabric
	// maps to a virtual lane.
	SL uint8
	// StaticRate is the IBA rate code (6 bits: 2 = 2.5 Gb/s, 3 = 10, 4 =
	// 30, 5 = 5, 6 = 20, 7 = 40, ...) the sender paces this destination's
	// packets to; 0 sends at the port's rate.
	StaticRate uint8
	// SrcPathBits are the low bits of our LID (under the port's LMC, 7
	// bits at most) that make the LRH's SLID, choosing one of our paths.
	SrcPathBits uint8
	// GRH says whether packets carry a global route header, needed to
	// leave the subnet and for multicast; HopLimit, TrafficClass and
	// FlowLabel (20 bits) are its fields.
	GRH          bool
	HopLimit     uint8
	TrafficClass uint8
	FlowLabel    uint32
}

// LIDRouted reports whether p names a LID, i.e. is not the GID-only zero
// value.
func (p Path) LIDRouted() bool { return p.DLID != 0 }

// AH is an address handle.
type AH interface {
	Attr() AHAttr
	Close() error
}

// MADAddr is where a management datagram comes from or goes to, as the
// kernel's user MAD interface reports and takes it (struct
// ib_user_mad_hdr). On receive it is the way back to the sender, as the
// kernel builds a response's address from a work completion
// (ib_init_ah_attr_from_wc): Path.DLID is the sender's LID, Path.SL the
// SL it came on, Path.SrcPathBits the bits of our LID it was sent to, and
// Path.GRH whether it carried a global route header (then GID is its
// source GID and HopLimit, TrafficClass and FlowLabel its fields; without
// one GID is zero). On send the same fields say where the MAD goes: LID,
// SL, our source path bits, and a GRH only when Path.GRH asks for one.
// A zero Path.DLID is GID addressing, a GRH on every MAD, as on RoCE and
// softib where ports have no LIDs.
type MADAddr struct {
	GID GID
	QPN QPN // 1 for the GSI
	// PKey is the partition by value; providers translate it to and from
	// the index into their port's current P_Key table.
	PKey PKey
	Path Path
}

// LIDRouted reports whether a is addressed by LID (an InfiniBand port),
// not by GID alone.
func (a MADAddr) LIDRouted() bool { return a.Path.LIDRouted() }

// MAD is one received management datagram (always 256 octets).
type MAD struct {
	From MADAddr
	Data [256]byte
}

// MADService is QP1's management-datagram service for the CM engine.
type MADService interface {
	// Send transmits one 256-octet MAD; the data is copied before it returns.
	Send(to MADAddr, mad []byte) error
	// Recv returns received MADs; it is closed when the service closes.
	Recv() <-chan MAD
	// Close stops the service.
	Close() error
}

// Counter is one named counter value.
type Counter struct {
	Name  string
	Value uint64
}

// Per-QP counters (QP.Counters) that mean the same whatever the provider:
// one that counts the thing reports it under this name, one that cannot
// leaves the name out (ipoibd conn then says "n/a").
const (
	// QPCounterRetransmits: RC packets sent again (go-back-N after an ACK
	// timeout or a sequence NAK).
	QPCounterRetransmits = "retransmits"
	// QPCounterRNRNAKs: RNR NAKs the QP received as requester (the
	// responder had no receive buffer posted).
	QPCounterRNRNAKs = "rnr_naks_received"
)

// QPCounterNamer is a capability (see Caps) of devices that can name the counters
// their QPs report (QP.Counters, in that order) before any QP exists, so
// that totals over connections show every name from the start instead of
// keys appearing with the first connection.
type QPCounterNamer interface {
	QPCounterNames() []string
}

// PortStater is a capability (see Caps) of devices that can tell whether their port is
// up (an InfiniBand port ACTIVE, softib's underlay interface up with a
// carrier). The interface's carrier follows it.
type PortStater interface {
	PortActive() bool
}

// SubnetEventer is a capability (see Caps) of devices that see their subnet's events
// (verbs on InfiniBand): SubnetEvents counts, from 0, the SM changes,
// client reregistrations, LID and P_Key changes on the port. After one the
// SA's paths may be stale and its multicast memberships gone, so the
// interface asks again and joins again, as the kernel's ipoib does.
type SubnetEventer interface {
	SubnetEvents() uint64
}
