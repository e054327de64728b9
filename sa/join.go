package sa

import "github.com/ipoibd/ipoibd/ib"

// The requests ipoibd asks the SA, built here so that every transport
// (libibumad today) and every fake asks the same thing.

// GroupParams are what a join that may create its group offers: the
// kernel's ipoib copies them from the broadcast group for every other
// group (ipoib_mcast_join with create).
type GroupParams struct {
	QKey      ib.QKey
	MTU, Rate Selected
	SL        uint8
	FlowLabel uint32
	HopLimit  uint8
	TClass    uint8
}

// ParamsOf returns a group's parameters with exact selectors, for
// creating another group like it.
func ParamsOf(g MCMemberRecord) *GroupParams {
	return &GroupParams{QKey: g.QKey, MTU: Selected{Selector: Exactly, Value: g.MTU.Value},
		Rate: Selected{Selector: Exactly, Value: g.Rate.Value}, SL: g.SL, FlowLabel: g.FlowLabel,
		HopLimit: g.HopLimit, TClass: g.TClass}
}

// JoinRequest is one join of our port.
type JoinRequest struct {
	MGID  ib.GID
	PKey  ib.PKey
	State JoinState // default FullMember
	// Create, when set, offers the parameters a new group gets; an
	// existing group must match them (else status 0x0200).
	Create *GroupParams
}

// Request is the SA Set of an MCMemberRecord that makes port a member as
// j asks; the TransactionID is the sender's to fill.
func (j JoinRequest) Request(port ib.GID) Request {
	if j.State == 0 {
		j.State = FullMember
	}
	rec := &MCMemberRecord{MGID: j.MGID, PortGID: port, PKey: j.PKey, JoinState: j.State}
	mask := MCMGID | MCMPortGID | MCMPKey | MCMJoinState
	if p := j.Create; p != nil {
		rec.QKey, rec.MTU, rec.Rate, rec.SL = p.QKey, p.MTU, p.Rate, p.SL
		rec.FlowLabel, rec.HopLimit, rec.TClass = p.FlowLabel, p.HopLimit, p.TClass
		mask |= MCMQKey | MCMMTUSelector | MCMMTU | MCMTClass | MCMRateSelector | MCMRate |
			MCMSL | MCMFlowLabel | MCMHopLimit
	}
	return Request{Method: MethodSet, ComponentMask: mask, Record: rec}
}

// LeaveRequest is the SA Delete that ends port's membership in mgid (the
// join states in state, default full).
func LeaveRequest(port, mgid ib.GID, pkey ib.PKey, state JoinState) Request {
	if state == 0 {
		state = FullMember
	}
	return Request{
		Method:        MethodDelete,
		ComponentMask: MCMGID | MCMPortGID | MCMJoinState,
		Record:        &MCMemberRecord{MGID: mgid, PortGID: port, PKey: pkey, JoinState: state},
	}
}

// PathRequest is the SA Get of the path from sgid to dgid in partition
// pkey, asked as the kernel's ipoib asks: one reversible path.
func PathRequest(sgid, dgid ib.GID, pkey ib.PKey) Request {
	return Request{
		Method:        MethodGet,
		ComponentMask: PathDGID | PathSGID | PathReversible | PathNumbPath | PathPKey,
		Record:        &PathRecord{DGID: dgid, SGID: sgid, Reversible: true, NumbPath: 1, PKey: pkey},
	}
}
