package ipoib

import (
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/sapath"
)

// Who sent an ARP or ND packet, on an InfiniBand subnet.
//
// The kernel's ipoib takes a neighbor's link address from the ARP or ND
// payload as claimed, and reaches it by the SA's PathRecord for the
// claimed GID (neigh_add_path, path_rec_start): the SA says which LID a GID
// is at. Of the datagram itself it reads only what the adapter reports
// from the wire: the work completion's source LID and QPN, and the GRH's
// source GID when one came (ipoib_ib_handle_rx_wc uses them to drop its
// own multicast). The fabric vouches for the source LID (the sending
// adapter writes its own port's LID into the LRH); a GRH's source GID
// comes from the sender's GID table; the payload's claim is the sender's
// word alone. Inside a subnet a unicast datagram usually has no GRH, so
// its source GID is unknown and the old rule here (claim and UD source on
// the same node) had nothing to compare.
//
// So the two sources the kernel trusts are put side by side: a claim is
// believed only when the SA's path for the claimed GID leads to the LID
// the datagram came from, and, when a GRH came, the path for its source
// GID leads there too. A claim that fails is not learned, not answered,
// and counted by cause (learn_lid_mismatch, learn_grh_lid_mismatch).
// The kernel itself checks neither: a false claim there can only send IP
// traffic to the real owner of the claimed GID; here it is refused before
// it costs anything. A claim whose path is not known yet waits for the
// SA's answer (the question goes out at once) and is handled then; the
// path is needed to answer or use the neighbor anyway. Limit: a peer under
// an LMC that sends from another of its LIDs than the one the SA's path
// names is not believed (the SA names its base LID's path first, which is
// what the kernel's ipoib sends by, so this takes a peer that chooses
// otherwise).
//
// On RoCE framing (softib, rxe) there are no LIDs: the GRH's source GID is
// the underlay's IP source, and the claim must be on its node (solicitedBy).

// maxAwaitingPath bounds the ARP/ND packets waiting for a path to check
// them against: a flood of claims for unknown GIDs costs at most these.
const maxAwaitingPath = 32

// vouch reports whether m's claim of link may be believed. false means
// dropped and counted, or parked until the path to check it comes.
func (c *control) vouch(m *neighPacket, link ib.LinkAddr) bool {
	if m.srcLID == 0 || c.subnet == nil {
		return true // RoCE framing, or no SA to ask
	}
	cause := learnLIDMismatch
	if m.grh && m.src.GID == link.GID {
		cause = learnGRHMismatch // the GRH's source GID is the claim
	}
	if !c.pathLeadsTo(m, link.GID, cause, link) {
		return false
	}
	if m.grh && m.src.GID != link.GID {
		return c.pathLeadsTo(m, m.src.GID, learnGRHMismatch, link)
	}
	return true
}

// pathLeadsTo reports whether the SA's path to gid leads to the LID m
// came from; a mismatch is counted under cause, an unknown path parks m.
func (c *control) pathLeadsTo(m *neighPacket, gid ib.GID, cause counter, link ib.LinkAddr) bool {
	p, ok := c.subnet.paths.Lookup(gid, c.now)
	if !ok {
		c.awaitPath(gid, m)
		return false
	}
	if p.AH.DLID != m.srcLID {
		c.i.ctr.inc(cause)
		c.i.log.Warn("an ARP/ND claim that is not its sender's: not learned",
			"claimed", link, "checked_gid", gid, "path_lid", p.AH.DLID, "source_lid", m.srcLID, "grh", m.grh)
		return false
	}
	return true
}

// awaitPath parks m until gid's path is answered, asking for it.
func (c *control) awaitPath(gid ib.GID, m *neighPacket) {
	s := c.subnet
	if s.nawait >= maxAwaitingPath {
		c.i.ctr.inc(learnNoPath)
		return
	}
	p := *m
	p.parked = true
	s.awaiting[gid] = append(s.awaiting[gid], p)
	s.nawait++
	s.pathW.Ask(s.paths.Due(c.now)...)
}

// pathCame handles what waited for gid's path: checked now, or dropped
// when the SA had no path.
func (c *control) pathCame(r sapath.Result) {
	s := c.subnet
	waiting := s.awaiting[r.DGID]
	if len(waiting) == 0 {
		return
	}
	delete(s.awaiting, r.DGID)
	s.nawait -= len(waiting)
	if _, ok := s.paths.Lookup(r.DGID, c.now); !ok {
		c.i.ctr.add(learnNoPath, uint64(len(waiting)))
		return
	}
	for k := range waiting {
		c.handleNeighPacket(&waiting[k])
	}
}
