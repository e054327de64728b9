package ipoib

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/ipoibd/ipoibd/encap"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/netdev"
	"github.com/ipoibd/ipoibd/sa"
)

// portID is who the interface is on the fabric: the port it runs on, its
// partition there, its link address and what the subnet answered. New
// settles it (identify) and the interface reads it from Interface.port
// only, so that when the port changes (an interface moved to another
// port, or handed over to a new daemon) one value is replaced whole.
//
// Datapath readers (local, pkey, udMTU) see it fixed once Start runs. The
// control goroutine alone follows what the SM changes in it: the LID
// (followSubnet), pkeyIndex (followPKey) and bcast (followBroadcast,
// under Interface.bcastMu, since the group worker reads it).
type portID struct {
	ib.PortAttr         // the port: GID, LID, P_Key table, active MTU, link layer
	pkey        ib.PKey // our partition, as cfg gave it or the table's first
	pkeyIndex   int     // its index in the port's P_Key table; -1 once the SM removed it
	// local is our link address: the UD QP's number (once New made it),
	// the port GID, and the RC/UC flags we offer in connected mode.
	local     ib.LinkAddr
	linkLocal netip.Prefix // RFC 4391's IPv6 link-local address, from the port GID
	udMTU     int          // the largest IP packet over UD: the port's, at most the broadcast group's
	// bcast is the broadcast group as the SA's join answered (Q_Key,
	// MLID, MTU, path); zero without a Subnet.
	bcast sa.MCMemberRecord
}

// identify reads who the interface will be on cfg.Device's port: its
// partition (which must be in the port's P_Key table), UD MTU and link
// address but for the UD QPN.
func identify(cfg Config) (portID, error) {
	attr := cfg.Device.Port()
	if len(attr.PKeys) == 0 {
		return portID{}, errors.New("ipoib: the port has an empty P_Key table")
	}
	pkey := attr.PKeys[0]
	if cfg.PKey != 0 {
		// Membership type aside, the partition must be in the port's table.
		if !slices.ContainsFunc(attr.PKeys, func(p ib.PKey) bool { return p|0x8000 == cfg.PKey|0x8000 }) {
			return portID{}, fmt.Errorf("ipoib: P_Key %v is not in the port's P_Key table %v", cfg.PKey, attr.PKeys)
		}
		pkey = cfg.PKey
	}
	port := portID{
		PortAttr: attr, pkey: pkey, pkeyIndex: pkeyIndex(attr.PKeys, pkey),
		local:     ib.LinkAddr{GID: attr.GID},
		linkLocal: netdev.LinkLocal(interfaceID(attr.GID)),
		udMTU:     encap.MTUForIB(attr.ActiveMTU),
	}
	if cfg.LinkLocal.IsValid() {
		port.linkLocal = cfg.LinkLocal
	}
	if cfg.Mode == Connected && !cfg.SendOnly {
		if cfg.RC {
			port.local.Flags |= ib.FlagRC
		}
		if cfg.UC {
			port.local.Flags |= ib.FlagUC
		}
	}
	return port, nil
}
