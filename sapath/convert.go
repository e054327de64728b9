package sapath

import (
	"fmt"

	"github.com/ipoibd/ipoibd/cm"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/sa"
)

// Path is one destination's path in every form its users need.
type Path struct {
	Record sa.PathRecord // as the SA answered
	AH     ib.Path       // for address handles and the RC/UC RTR transition
	MTU    ib.MTU        // the path MTU, for RTR and the REQ
	CM     cm.Path       // the primary path of our REQs
}

// permissiveLID names no port: a REQ's LIDs for a path that leaves the
// subnet, where the receiver routes by the GRH.
const permissiveLID = 0xffff

// FromRecord converts a PathRecord for a port whose LMC is lmc and whose
// CA's local ACK delay (ibv_device_attr.local_ca_ack_delay) is ackDelay.
// A record without a unicast DLID or a valid MTU is an error: nothing
// could be sent by it.
func FromRecord(rec sa.PathRecord, lmc, ackDelay uint8) (Path, error) {
	if rec.DLID == 0 || rec.DLID >= 0xc000 {
		return Path{}, fmt.Errorf("sapath: PathRecord for %v: DLID %#04x is not a unicast LID", rec.DGID, rec.DLID)
	}
	if mtu := rec.MTU.MTU(); !mtu.Valid() {
		return Path{}, fmt.Errorf("sapath: PathRecord for %v: MTU code %d is not an IB MTU", rec.DGID, rec.MTU.Value)
	}
	return Path{Record: rec, AH: AHPath(rec, lmc), MTU: rec.MTU.MTU(), CM: CMPath(rec, ackDelay)}, nil
}

// AHPath is the address of rec as the kernel's ib_init_ah_attr_from_path
// makes it for an InfiniBand port: DLID, SL and the record's rate; our
// SLID's bits under the LMC as source path bits; a GRH when the hop limit
// is above 0 (the older ib_init_ah_from_path wanted it above 1; SMs give
// 0 for a path within the subnet, so both agree there).
func AHPath(rec sa.PathRecord, lmc uint8) ib.Path {
	return ib.Path{
		DLID:         rec.DLID,
		SL:           rec.SL,
		StaticRate:   rec.Rate.Value,
		SrcPathBits:  uint8(rec.SLID & (1<<min(lmc, 7) - 1)),
		GRH:          rec.HopLimit > 0,
		HopLimit:     rec.HopLimit,
		TrafficClass: rec.TClass,
		FlowLabel:    rec.FlowLabel,
	}
}

// CMPath is the REQ's primary path for rec as the kernel's cm_format_req
// fills it: Subnet Local when the hop limit is at most 1, and then the
// LIDs, else the permissive LID (the receiver takes the route from the
// packet); the Local ACK Timeout from the packet lifetime and our CA's ACK
// delay.
func CMPath(rec sa.PathRecord, ackDelay uint8) cm.Path {
	p := cm.Path{
		LocalLID: permissiveLID, RemoteLID: permissiveLID,
		LocalGID: rec.SGID, RemoteGID: rec.DGID,
		FlowLabel: rec.FlowLabel, PacketRate: rec.Rate.Value,
		TrafficClass: rec.TClass, HopLimit: rec.HopLimit, SL: rec.SL,
		SubnetLocal:     rec.HopLimit <= 1,
		LocalACKTimeout: ACKTimeout(ackDelay, rec.Lifetime.Value),
	}
	if p.SubnetLocal {
		p.LocalLID, p.RemoteLID = rec.SLID, rec.DLID
	}
	return p
}

// ACKTimeout is the kernel's cm_ack_timeout: the local ACK timeout code
// for a round trip of two packet lifetimes plus the CA's ACK delay (all
// 4.096 µs × 2^code). It takes the larger of ackDelay and lifetime + 1 and
// adds one only when the other is within a factor of two, capped at 31.
// The REQ carries ACKTimeout(our CA's delay, lifetime); the requester's QP
// uses ACKTimeout(the REP's Target ACK Delay, lifetime) once the REP is in.
func ACKTimeout(ackDelay, lifetime uint8) uint8 {
	t, d := int(lifetime)+1, int(ackDelay)
	if t >= d {
		if d >= t-1 {
			t++
		}
	} else {
		t = d
		if int(lifetime)+1 >= d-1 {
			t++
		}
	}
	return uint8(min(t, cm.MaxTimerCode))
}
