package neigh

import (
	"net/netip"
	"time"

	"github.com/ipoibd/ipoibd/ib"
)

// Learning from solicitations, bounded as the kernel bounds it. A host
// that asks for one of our addresses (ARP request, NS) tells us its own;
// remembering it saves a request when we answer its traffic. Anyone can
// send solicitations from any source address, so what they teach is held
// apart from the entries our traffic uses:
//
//   - it becomes a candidate: no path for the datapath, no host route, no
//     log line (like the kernel's STALE entries from neigh_event_ns, which
//     cost nothing until used);
//   - candidates are at most MaxCandidates; a new one evicts the oldest, so
//     a flood can only churn candidates, never the entries in use;
//   - each node on the fabric (the UD source's GID) may teach LearnBurst
//     candidates at once and LearnRate a second after that; the rest are
//     answered but not learned;
//   - a candidate becomes an entry when our traffic goes to its address
//     (Create), Stale at the link address it claimed, and is confirmed by a
//     unicast probe before it is trusted longer; one older than
//     CandidateTTL is ignored.
//
// So the table holds at most MaxEntries entries (each with at most one host
// route) plus MaxCandidates candidates, whatever arrives from the fabric.

// Learning bounds.
const (
	// DefaultMaxCandidates bounds the candidates (the kernel's gc_thresh2).
	DefaultMaxCandidates = 512
	// LearnBurst and LearnRate bound what one node teaches.
	LearnBurst = 16
	LearnRate  = 4 // per second
	// CandidateTTL is how long a candidate is believed.
	CandidateTTL = time.Minute
	// maxSources bounds the per-node learning budgets kept; when more
	// nodes teach at once, the budgets start over (the candidate bound
	// holds regardless).
	maxSources = 1024
)

// Learned is what Learn did.
type Learned uint8

// Learn outcomes.
const (
	LearnedNew       Learned = iota // a new candidate
	LearnedRefreshed                // an existing candidate was updated
	LearnedEvicted                  // a new candidate; the oldest was evicted for it
	LearnedLimited                  // not learned: the node taught too much too fast
)

type candidate struct {
	ip      netip.Addr // zero: a free slot
	link    ib.LinkAddr
	sibling ib.LinkAddr // the node's other port, as it said (Entry.Sibling)
	at      time.Time
}

type budget struct {
	tokens float64
	at     time.Time
}

// Learn records that a solicitation from the node at from says ip is at
// link. The caller has checked that ip has no entry (Get) and that link is
// from's own node.
func (t *Table) Learn(ip netip.Addr, link ib.LinkAddr, from ib.GID, now time.Time) Learned {
	if !t.spend(from, now) {
		return LearnedLimited
	}
	if k, ok := t.candIndex[ip]; ok {
		c := &t.cands[k]
		if !c.link.SameNode(link) {
			c.sibling = ib.LinkAddr{}
		}
		c.link, c.at = link, now
		return LearnedRefreshed
	}
	if len(t.cands) < t.MaxCandidates {
		t.candIndex[ip] = int32(len(t.cands))
		t.cands = append(t.cands, candidate{ip: ip, link: link, at: now})
		return LearnedNew
	}
	// Full: the slot after the newest holds the oldest (or a free one).
	k := t.candNext
	t.candNext = (t.candNext + 1) % len(t.cands)
	r := LearnedNew
	if old := t.cands[k].ip; old.IsValid() {
		delete(t.candIndex, old)
		r = LearnedEvicted
	}
	t.cands[k] = candidate{ip: ip, link: link, at: now}
	t.candIndex[ip] = int32(k)
	return r
}

// spend takes one learning token from the node's budget.
func (t *Table) spend(from ib.GID, now time.Time) bool {
	b, ok := t.budgets[from]
	if !ok {
		if len(t.budgets) >= maxSources {
			clear(t.budgets)
		}
		b = budget{tokens: LearnBurst, at: now}
	}
	if dt := now.Sub(b.at).Seconds(); dt > 0 {
		b.tokens = min(LearnBurst, b.tokens+dt*LearnRate)
	}
	b.at = now
	if b.tokens < 1 {
		t.budgets[from] = b
		return false
	}
	b.tokens--
	t.budgets[from] = b
	return true
}

// NoteSibling records what ip's node at link said of its other port
// (Entry.Sibling), on ip's entry or its candidate, where that is at link:
// a zero sibling says it has none up. The caller has checked that the
// packet came from link itself.
func (t *Table) NoteSibling(ip netip.Addr, link, sibling ib.LinkAddr) {
	if sibling.SameNode(link) {
		return
	}
	if e := t.entries[ip]; e != nil {
		if e.Resolved() && e.Link.SameNode(link) {
			e.Sibling = sibling
		}
		return
	}
	if k, ok := t.candIndex[ip]; ok && t.cands[k].link.SameNode(link) {
		t.cands[k].sibling = sibling
	}
}

// takeCandidate removes ip's candidate and returns it, if there is one
// young enough to believe.
func (t *Table) takeCandidate(ip netip.Addr, now time.Time) (candidate, bool) {
	k, ok := t.candIndex[ip]
	if !ok {
		return candidate{}, false
	}
	c := t.cands[k]
	delete(t.candIndex, ip)
	t.cands[k] = candidate{}
	return c, now.Sub(c.at) < CandidateTTL
}

// CandidateInfo is one candidate, for display.
type CandidateInfo struct {
	IP   netip.Addr
	Link ib.LinkAddr
	At   time.Time
}

// Candidates returns the candidates (control goroutine).
func (t *Table) Candidates() []CandidateInfo {
	out := make([]CandidateInfo, 0, len(t.candIndex))
	for _, c := range t.cands {
		if c.ip.IsValid() {
			out = append(out, CandidateInfo{IP: c.ip, Link: c.link, At: c.at})
		}
	}
	return out
}

// NumCandidates is how many candidates there are.
func (t *Table) NumCandidates() int { return len(t.candIndex) }
