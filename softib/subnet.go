package softib

import (
	"errors"
	"fmt"
	"slices"

	"github.com/ipoibd/ipoibd/ib"
)

// The subnet manager's hold on an InfiniBand-link port. A real port's
// LID, LMC, SM LID and P_Key table are set by the SM's SMPs whenever it
// sweeps, and the HCA raises an async event for each change; softib has no
// SMA of its own, so its owner, which reads the port through libibumad as
// the kernel reads its SMA, hands each new assignment to SetSubnet.

// Subnet is an InfiniBand port's assignment by the subnet manager.
type Subnet struct {
	LID   uint16
	LMC   uint8
	SMLID uint16
	PKeys []ib.PKey // the P_Key table, without gaps
	// Reregister is the SM's ClientReregister: it forgot the port's
	// multicast memberships (and subscriptions), which must be made again
	// though nothing else may have changed.
	Reregister bool
}

// SubnetEvent is a set of the port events a change raises, as an HCA
// raises them (IBV_EVENT_*).
type SubnetEvent uint8

// The port events.
const (
	EventLIDChange        SubnetEvent = 1 << iota // LID or LMC
	EventSMChange                                 // another SM LID
	EventPKeyChange                               // the P_Key table
	EventClientReregister                         // Subnet.Reregister
)

var eventNames = [...]string{"lid_change", "sm_change", "pkey_change", "client_reregister"}

// String names the events, e.g. "lid_change+sm_change".
func (e SubnetEvent) String() string {
	s := ""
	for k, n := range eventNames {
		if e&(1<<k) != 0 {
			if s != "" {
				s += "+"
			}
			s += n
		}
	}
	if s == "" {
		return "none"
	}
	return s
}

// ErrNotIB is SetSubnet's error on a RoCE-framed port, which has no
// subnet manager.
var ErrNotIB = errors.New("softib: the port is not on the InfiniBand link layer")

// SetSubnet takes the subnet manager's current assignment of the port and
// returns the events it raised: none when nothing changed. The packets
// sent from then on carry the new SLID, and the port answers to the new
// LIDs only; each event counts in SubnetEvents, which the interface
// follows as it follows a ConnectX port's (paths asked again, groups
// joined again, connections made again when our LID moved).
func (d *Device) SetSubnet(s Subnet) (SubnetEvent, error) {
	p := d.ibp
	if p == nil {
		return 0, ErrNotIB
	}
	if err := checkLIDs(s.LID, s.LMC, s.SMLID); err != nil {
		return 0, err
	}
	if len(s.PKeys) == 0 {
		return 0, errors.New("softib: an empty P_Key table")
	}
	for i, k := range s.PKeys {
		if !k.Valid() {
			return 0, fmt.Errorf("softib: P_Key table entry %d (%v) names no partition", i, k)
		}
	}
	d.mu.Lock() // one change at a time; the datapath only loads
	defer d.mu.Unlock()
	old := p.addr.Load()
	var ev SubnetEvent
	if s.LID != old.lid || s.LMC != old.lmc {
		ev |= EventLIDChange
	}
	if s.SMLID != old.smLID {
		ev |= EventSMChange
	}
	pkeys := old.pkeys
	if !slices.Equal(s.PKeys, old.pkeys) {
		ev |= EventPKeyChange
		pkeys = slices.Clone(s.PKeys)
	}
	if s.Reregister {
		ev |= EventClientReregister
	}
	if ev == 0 {
		return 0, nil
	}
	p.addr.Store(&ibAddr{lid: s.LID, lmc: s.LMC, mask: 1<<s.LMC - 1, smLID: s.SMLID, pkeys: pkeys})
	for k := range eventNames {
		if ev&(1<<k) != 0 {
			p.events.Add(1)
		}
	}
	return ev, nil
}

// SubnetEvents counts the subnet events SetSubnet raised (ib.SubnetEventer);
// always 0 on RoCE framing.
func (d *Device) SubnetEvents() uint64 {
	if d.ibp == nil {
		return 0
	}
	return d.ibp.events.Load()
}
