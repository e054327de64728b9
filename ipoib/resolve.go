package ipoib

import (
	"net/netip"

	"github.com/ipoibd/ipoibd/encap"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/neigh"
)

// Address resolution over UD: ARP for IPv4, neighbor discovery with the
// IPoIB link-layer option for IPv6. The kernel sees neither: a TUN link
// has no link addresses, so the daemon answers for the interface.

var allNodes = netip.MustParseAddr("ff02::1")

// solicit asks for e's link address: broadcast (or the solicited-node
// group) while unresolved, unicast to the known address when confirming.
func (c *control) solicit(e *neigh.Entry) {
	src, ok := c.onLink(e.IP)
	if !ok || c.i.standby.Load() {
		// A port on standby must not tell peers our addresses are at its
		// link address: they are the active port's.
		return
	}
	unicast := e.ProbeUnicast()
	sibling, hasSibling := c.i.Sibling()
	if e.IP.Is4() {
		a := neigh.ARP{Op: neigh.ARPRequest, SenderHW: c.i.port.local, SenderIP: src, TargetIP: e.IP, Sibling: sibling, HasSibling: hasSibling}
		c.sendARP(&a, e.Link, unicast)
		return
	}
	m := neigh.NeighborMessage{Type: neigh.TypeNeighborSolicitation, Target: e.IP, LinkAddr: c.i.port.local, HasLinkAddr: true,
		Sibling: sibling, HasSibling: hasSibling}
	dst := neigh.SolicitedNode(e.IP)
	if unicast {
		dst = e.IP
	}
	c.sendND(&m, src, dst, e.Link, unicast)
}

// announce tells the fabric where one of our addresses is (on start, when
// an address is added and when the interface takes over from its other
// port), so peers holding an old link address for it (we restarted, or
// moved) move to the new one. An interface on standby announces nothing.
func (c *control) announce(ip netip.Addr) {
	if c.i.standby.Load() {
		return
	}
	if ip.Is4() {
		a := neigh.ARP{Op: neigh.ARPRequest, SenderHW: c.i.port.local, SenderIP: ip, TargetIP: ip, TargetHW: c.replaces}
		a.Sibling, a.HasSibling = c.i.Sibling()
		c.sendARP(&a, ib.LinkAddr{}, false)
		return
	}
	// The replaced address travels in an option of our own that other
	// receivers skip (neigh.OptReplacedLinkAddr).
	m := neigh.NeighborMessage{Type: neigh.TypeNeighborAdvertisement, Override: true, Target: ip, LinkAddr: c.i.port.local, HasLinkAddr: true}
	if r := c.replaces; r.GID != (ib.GID{}) {
		m.Replaces, m.HasReplaces = r, true
	}
	m.Sibling, m.HasSibling = c.i.Sibling()
	c.sendND(&m, ip, allNodes, ib.LinkAddr{}, false)
}

// handleNeighPacket processes an ARP or ND packet from the fabric.
func (c *control) handleNeighPacket(m *neighPacket) {
	pkt := m.data[:m.n]
	if m.etherType == encap.EtherTypeARP {
		c.handleARP(pkt, m)
		return
	}
	c.handleND(pkt, m)
}

func (c *control) handleARP(pkt []byte, m *neighPacket) {
	i, from := c.i, m.src
	a, err := neigh.DecodeARP(pkt)
	if err != nil {
		i.ctr.inc(rxDropMalformed)
		return
	}
	if !m.parked {
		i.ctr.inc(arpIn)
	}
	if c.isLocal(a.SenderIP) || a.SenderHW.SameNode(i.port.local) {
		return
	}
	request := a.Op == neigh.ARPRequest
	forUs := c.isLocal(a.TargetIP)
	if request && !forUs {
		i.ctr.inc(solicitNotOurs)
	}
	_, onLink := c.onLink(a.SenderIP)
	// What is learned or answered must be the sender's own (vouch).
	if onLink && (forUs && request || i.neigh.Get(a.SenderIP) != nil) && !c.vouch(m, a.SenderHW) {
		return
	}
	switch {
	case !onLink:
	case forUs && request:
		c.solicitedBy(a.SenderIP, a.SenderHW, from)
	case request && a.SenderIP == a.TargetIP && a.TargetHW != (ib.LinkAddr{}):
		c.heardReplacing(a.SenderIP, a.SenderHW, from, a.TargetHW)
	default:
		c.heard(a.SenderIP, a.SenderHW, from)
	}
	if onLink {
		c.heardSibling(a.SenderIP, a.SenderHW, from, a.Sibling)
	}
	if forUs && request && a.SenderIP != a.TargetIP && !i.standby.Load() {
		r := neigh.ARP{Op: neigh.ARPReply, SenderHW: i.port.local, SenderIP: a.TargetIP, TargetHW: a.SenderHW, TargetIP: a.SenderIP}
		r.Sibling, r.HasSibling = i.Sibling()
		c.sendARP(&r, replyTo(a.SenderHW, from), true)
	}
}

// solicitedBy learns from a solicitation for one of our addresses whose
// sender ip claims link: only when link is the node the packet came from
// (the UD source), so that no one teaches us an address that is not their
// own. An unknown source (a provider that cannot tell) is believed.
func (c *control) solicitedBy(ip netip.Addr, link, from ib.LinkAddr) {
	if from.GID != (ib.GID{}) && !link.SameNode(from) {
		c.i.ctr.inc(learnLinkMismatch)
		return
	}
	// A GRH-less sender (InfiniBand) was vouched for by its LID: its claim
	// is its own, and its learning budget is its node's.
	if from.GID == (ib.GID{}) {
		from = link
	}
	c.learnFrom(ip, link, from)
}

// replyTo is where the answer to a solicitation goes: the link address it
// claims, unless that is on another node than the packet came from. Then
// the sender gets it, and we never address a node only a claim named.
func replyTo(claimed, from ib.LinkAddr) ib.LinkAddr {
	if from.GID == (ib.GID{}) || claimed.GID == from.GID {
		return claimed
	}
	return from
}

func (c *control) handleND(pkt []byte, p *neighPacket) {
	i, from := c.i, p.src
	src, _, m, err := neigh.DecodeIPv6ND(pkt)
	if err != nil {
		i.ctr.inc(rxDropMalformed)
		return
	}
	if !p.parked {
		i.ctr.inc(ndIn)
	}
	switch m.Type {
	case neigh.TypeNeighborSolicitation:
		if !c.isLocal(m.Target) {
			i.ctr.inc(solicitNotOurs)
			return
		}
		if !src.IsValid() || src.IsUnspecified() {
			i.ctr.inc(solicitNoSource)
			return
		}
		reply := from
		if m.HasLinkAddr {
			if !c.vouch(p, m.LinkAddr) {
				return
			}
			reply = replyTo(m.LinkAddr, from)
			c.solicitedBy(src, m.LinkAddr, from)
			c.heardSibling(src, m.LinkAddr, from, m.Sibling)
		}
		if i.standby.Load() {
			return
		}
		na := neigh.NeighborMessage{Type: neigh.TypeNeighborAdvertisement, Solicited: true, Override: true,
			Target: m.Target, LinkAddr: i.port.local, HasLinkAddr: true}
		na.Sibling, na.HasSibling = i.Sibling()
		c.sendND(&na, m.Target, src, reply, true)
	case neigh.TypeNeighborAdvertisement:
		if !m.HasLinkAddr || c.isLocal(m.Target) || m.LinkAddr.SameNode(i.port.local) ||
			i.neigh.Get(m.Target) == nil || !c.vouch(p, m.LinkAddr) {
			return
		}
		if m.HasReplaces && !m.Solicited {
			c.heardReplacing(m.Target, m.LinkAddr, from, m.Replaces)
		} else {
			c.heard(m.Target, m.LinkAddr, from)
		}
		c.heardSibling(m.Target, m.LinkAddr, from, m.Sibling)
	}
}

func (c *control) sendARP(a *neigh.ARP, to ib.LinkAddr, unicast bool) {
	slot, buf, ok := c.neighSlot()
	if !ok {
		return
	}
	if err := a.Encode(buf[encap.HeaderLen:]); err != nil {
		c.i.slots.free(slot)
		return
	}
	_ = encap.PutHeader(buf, encap.EtherTypeARP)
	c.i.ctr.inc(arpOut)
	c.sendNeigh(slot, encap.HeaderLen+a.Len(), to, unicast, netip.Addr{})
}

func (c *control) sendND(m *neigh.NeighborMessage, src, dst netip.Addr, to ib.LinkAddr, unicast bool) {
	slot, buf, ok := c.neighSlot()
	if !ok {
		return
	}
	n, err := m.EncodeIPv6(buf[encap.HeaderLen:], src, dst)
	if err != nil {
		c.i.slots.free(slot)
		return
	}
	_ = encap.PutHeader(buf, encap.EtherTypeIPv6)
	c.i.ctr.inc(ndOut)
	c.sendNeigh(slot, encap.HeaderLen+n, to, unicast, dst)
}

// sendNeigh posts an ARP or ND packet: unicast to a link address, to the
// multicast group of group (IPv6), or to the broadcast group.
func (c *control) sendNeigh(slot uint32, n int, to ib.LinkAddr, unicast bool, group netip.Addr) {
	i := c.i
	switch {
	case unicast:
		ah := c.ah(to.GID)
		if ah == nil {
			i.slots.free(slot)
			if c.subnet != nil {
				i.ctr.inc(txDropNoPath) // the solicitor asks again once the path came
			}
			return
		}
		i.sendUD(&c.sends, slot, n, ah, to.QPN)
	case group.IsValid() && group.IsMulticast():
		m, ok := i.multicastDest(group)
		switch {
		case !ok && c.subnet != nil && c.subnet.hold(group, slot, n):
			return // sent once the group's join completes (subnet.go)
		case !ok && c.subnet != nil:
			i.drop(slot, txDropJoining)
			return
		case !ok:
			i.slots.free(slot)
			return
		}
		i.sendUD(&c.sends, slot, n, m.ah, ib.MulticastQPN)
	default:
		i.sendUD(&c.sends, slot, n, *i.bcast.Load(), ib.MulticastQPN)
	}
	i.postBatch(&c.sends)
}

func (c *control) neighSlot() (uint32, []byte, bool) {
	slot, ok := c.i.slots.neigh.tryGet()
	if !ok && c.i.reapSends(&c.wc) {
		slot, ok = c.i.slots.neigh.tryGet()
	}
	if !ok {
		c.i.ctr.inc(ctlDropBusy)
		return 0, nil, false
	}
	return slot, c.i.slots.bytes(slot), true
}
