package ipoib

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ipoib/ipoibcm"
	"github.com/ipoibd/ipoibd/neigh"
)

// What `ipoibd show`, `neigh`, `conn` and `stats` print. Each is taken on
// the control goroutine, so it is a consistent snapshot. The JSON shapes
// are an interface for scripts: every key is present whatever the state
// (zero or "" when it does not apply; -1 for a provider's figure it cannot
// tell), lists are [] and never null, and P_Keys, QPNs and ages are
// numbers.

// Info describes the interface.
type Info struct {
	Name      string `json:"ifname"`
	Device    string `json:"device"`
	LinkLayer string `json:"link_layer"`
	LinkAddr  string `json:"link_addr"`
	GID       string `json:"gid"`
	// PortGUID ("0x" and 16 hex digits, as ibstat prints it) is the GID's
	// low half; the IPv6 link-local address is made from it.
	PortGUID string `json:"port_guid"`
	PKey     uint16 `json:"pkey"`
	Mode     string `json:"mode"`
	CMModes  string `json:"cm_modes"`  // "" in datagram mode
	Policy   string `json:"cm_policy"` // "" in datagram mode
	CM       string `json:"cm"`        // the connection service in use; "" in datagram mode
	MTU      int    `json:"mtu"`
	UDMTU    int    `json:"ud_mtu"`
	IBMTU    int    `json:"ib_mtu"`
	// QKey is the UD QP's; BcastMLID the broadcast group's LID, and
	// Subnet "sa" when the SA's joins and paths are in use (InfiniBand),
	// else 0 and "".
	QKey      uint32 `json:"qkey"`
	BcastMLID uint16 `json:"bcast_mlid"`
	Subnet    string `json:"subnet"`
	// Offloads the TUN uses: "tso,uso,gro", "tso,gro", or "" (off).
	Offloads  string   `json:"offloads"`
	Addrs     []string `json:"addrs"`
	Groups    []string `json:"groups"` // IP multicast groups joined on the fabric (besides broadcast)
	Neighbors int      `json:"neighbors"`
	// Candidates were learned from solicitations and not used yet: they
	// have no path and no route (neigh/learn.go).
	Candidates int `json:"candidates"`
	Conns      int `json:"connections"`
	// AdminState ("up" or "down"), Carrier and OperState (RFC 2863's, as
	// `ip link` shows it, in lower case) are the kernel's, read when asked;
	// "", false and "" when it could not be read.
	AdminState string `json:"admin_state"`
	Carrier    bool   `json:"carrier"`
	OperState  string `json:"operstate"`
	// RingSlots are the interface's own packet buffers (transmit, control,
	// UD receive), RingBytes the octets they take: the first interface's
	// on a port in its shared slab, every other's registered apart.
	// PortRegistered is what the port has registered with the device in
	// all (pinned, on verbs): the shared receive pool, and every
	// interface's rings.
	RingSlots      string `json:"ring_slots"`
	RingBytes      int    `json:"ring_bytes"`
	PortRegistered int64  `json:"port_registered_bytes"`
	// Ports are the ports the interface runs on: its own, or, over
	// several (package bond), each with its state, the active one first
	// named by Active.
	Ports []PortInfo `json:"ports"`
	// Failovers counts the moves from one port to another, and
	// LastFailoverMs how long the last took (announcements sent); 0 on a
	// single port.
	Failovers      uint64  `json:"failovers"`
	LastFailoverMs float64 `json:"last_failover_ms"`
}

// PortInfo is one port of an interface.
type PortInfo struct {
	Device   string `json:"device"`
	LinkAddr string `json:"link_addr"`
	// State is "active", "standby", "rail" (not the active port, it
	// carries flows to peers' second ports), "unreachable" (up, but every
	// connection on it failed lately) or "down" (its port is not active).
	State string `json:"state"`
	// TxPackets and RxPackets are the IP packets the port sent and
	// received.
	TxPackets uint64 `json:"tx_packets"`
	RxPackets uint64 `json:"rx_packets"`
}

// RailState is the state of a Rail entry in NeighInfo: a neighbor's
// other port, which a rail sends to (rail.go).
var RailState = neigh.Rail.String()

// NeighInfo is one neighbor.
type NeighInfo struct {
	IP       string `json:"ip"`
	LinkAddr string `json:"link_addr"` // "" when unresolved
	State    string `json:"state"`     // neigh's state, or CANDIDATE (learned, unused: no path, no route)
	Via      string `json:"via"`       // RC, UC, UD or "-" when unresolved
	QPN      uint32 `json:"qpn"`       // 0 when unresolved
	MTU      int    `json:"mtu"`       // 0 when unresolved
	Pending  int    `json:"pending"`
	// Sibling is the link address of the neighbor's other port, as it
	// told us (an ipoibd over two ports): where it may fail over to; ""
	// when none is known.
	Sibling string `json:"sibling"`
}

// ConnInfo is one connection.
type ConnInfo struct {
	Peer string `json:"peer"` // the peer's link address
	// PeerIPs are the addresses of the neighbors at the peer's node
	// (IPv4 first, each family in order); PeerGUID ("0x" and 16 hex
	// digits) and PeerUDQPN are the parts of the link address that tell
	// nodes apart, for a short name.
	PeerIPs   []string `json:"peer_ips"`
	PeerGUID  string   `json:"peer_guid"`
	PeerUDQPN uint32   `json:"peer_ud_qpn"`
	Type      string   `json:"type"`
	Direction string   `json:"direction"` // out: we connected; in: the peer did
	State     string   `json:"state"`
	QPState   string   `json:"qp_state"` // the local QP's (an established connection's is RTS)
	Sends     bool     `json:"sends"`    // carries our sends (policy)
	LocalQPN  uint32   `json:"local_qpn"`
	RemoteQPN uint32   `json:"remote_qpn"` // 0 until the CM learned it
	MTU       int      `json:"mtu"`
	PathMTU   int      `json:"path_mtu"` // the IB path MTU of the QP, in octets (0 until agreed)
	Packets   uint64   `json:"packets"`  // both ways
	// What the datapath carried: IP packets and their octets.
	TxPackets uint64 `json:"tx_packets"`
	TxBytes   uint64 `json:"tx_bytes"`
	RxPackets uint64 `json:"rx_packets"`
	RxBytes   uint64 `json:"rx_bytes"`
	// RNRNAKs and Retransmits are the provider's count for the QP (see
	// ib.QPCounterRNRNAKs), -1 when it cannot tell; QPCounters is every
	// counter it has for the QP.
	RNRNAKs     int64             `json:"rnr_naks"`
	Retransmits int64             `json:"retransmits"`
	QPCounters  map[string]uint64 `json:"qp_counters"`
	// UDFallbacks counts the packets sent to the peer's neighbors over UD
	// while no connection to it was up (being set up, refused, failed),
	// summed over the neighbors: it outlives connections.
	UDFallbacks uint64 `json:"ud_fallbacks"`
	AgeSecs     int64  `json:"age_seconds"` // since the connection was asked for
	UpSecs      int64  `json:"up_seconds"`  // since it was established (0 before)
}

// ShortLink names the peer in few characters: QPN@GUID, its UD QPN and
// port GUID in hex, the parts of its link address that differ between
// nodes (the flags and the GID's prefix rarely do).
func (c ConnInfo) ShortLink() string {
	return fmt.Sprintf("%x@%s", c.PeerUDQPN, strings.TrimPrefix(c.PeerGUID, "0x"))
}

// Show returns the interface description.
func (i *Interface) Show() Info {
	var info Info
	i.do(func() {
		info = Info{
			Name: i.Name(), Device: i.dev.Name(), LinkLayer: i.port.LinkLayer,
			LinkAddr: i.port.local.String(), GID: i.port.local.GID.String(),
			PortGUID: fmt.Sprintf("0x%016x", binary.BigEndian.Uint64(i.port.local.GID[8:])), PKey: uint16(i.port.pkey),
			Addrs: []string{}, Groups: []string{},
			Mode: i.Mode().String(), MTU: i.mtu, UDMTU: i.port.udMTU, IBMTU: i.port.ActiveMTU.Bytes(),
			Neighbors: len(i.neigh.All()), Candidates: i.neigh.NumCandidates(),
			Offloads: i.offloads(), QKey: uint32(i.qKey()), BcastMLID: i.port.bcast.MLID,
			RingSlots: i.slots.lay.String(), RingBytes: i.slots.lay.size(), PortRegistered: i.pool.Registered(),
		}
		info.Ports = []PortInfo{{Device: i.dev.Name(), LinkAddr: i.port.local.String(), State: i.portState(),
			TxPackets: i.ctr[txPackets].Load(), RxPackets: i.ctr[rxPackets].Load()}}
		if i.cfg.Subnet != nil {
			info.Subnet = "sa"
		}
		for _, a := range i.ctl.addrs {
			info.Addrs = append(info.Addrs, a.String())
		}
		for _, g := range i.ctl.groups {
			info.Groups = append(info.Groups, g.String())
		}
		slices.Sort(info.Groups)
		if i.mgr != nil {
			var modes []string
			if i.port.local.Flags&ib.FlagRC != 0 {
				modes = append(modes, "rc")
			}
			if i.port.local.Flags&ib.FlagUC != 0 {
				modes = append(modes, "uc")
			}
			info.CMModes, info.Policy = strings.Join(modes, ","), i.cfg.Policy.String()
			if i.cfg.SendOnly {
				info.CMModes = "rc (send only: peers send to us over UD)"
			}
			info.Conns = len(i.mgr.Connections())
			info.CM = fmt.Sprint(i.mgr.Service())
		}
	})
	// Off the control goroutine: a netlink round trip; not once closing,
	// when the device and its netlink handle go.
	select {
	case <-i.done:
		return info
	default:
	}
	if st, err := i.netdev.State(); err == nil {
		info.AdminState, info.Carrier, info.OperState = "down", st.Carrier, st.OperState
		if st.Up {
			info.AdminState = "up"
		}
	}
	return info
}

// portState is the interface's port as PortInfo.State says it. Control
// goroutine only.
func (i *Interface) portState() string {
	switch {
	case !i.ctl.carrier:
		return "down"
	case i.unreachable.Load():
		return "unreachable"
	case i.handoff.Load() != nil:
		return "rail"
	case i.standby.Load():
		return "standby"
	}
	return "active"
}

func (i *Interface) offloads() string {
	tso, uso := i.netdev.Offloads()
	switch {
	case tso && uso:
		return "tso,uso,gro"
	case tso:
		return "tso,gro"
	}
	return ""
}

// Neighbors returns the neighbor table, sorted by address.
func (i *Interface) Neighbors() []NeighInfo {
	out := []NeighInfo{}
	i.do(func() {
		for _, e := range i.neigh.All() {
			n := NeighInfo{IP: e.IP.String(), State: e.State.String(), Via: "-", Pending: len(e.Pending)}
			if e.Sibling != (ib.LinkAddr{}) {
				n.Sibling = e.Sibling.String()
			}
			if p := e.Path(); p != nil {
				n.LinkAddr, n.Via, n.QPN, n.MTU = p.Link.String(), "UD", uint32(p.Link.QPN), p.MTU
				if p.QP != nil {
					n.Via, n.QPN = p.QP.Type().String(), uint32(p.QP.Num())
				}
			}
			out = append(out, n)
		}
		for _, c := range i.neigh.Candidates() {
			out = append(out, NeighInfo{IP: c.IP.String(), LinkAddr: c.Link.String(), State: "CANDIDATE", Via: "-"})
		}
	})
	slices.SortFunc(out, func(a, b NeighInfo) int { return strings.Compare(a.IP, b.IP) })
	return out
}

// Connections returns the connection table.
func (i *Interface) Connections() []ConnInfo {
	out := []ConnInfo{}
	i.do(func() {
		if i.mgr == nil {
			return
		}
		// What cannot send is not shown as established: look first.
		i.ctl.checkConns(-1)
		nodes := map[ib.LinkAddr][]*neigh.Entry{} // the neighbors by node (flags zeroed)
		for _, e := range i.neigh.All() {
			if e.State == neigh.Reachable || e.State == neigh.Stale || e.State == neigh.Probing {
				k := ib.LinkAddr{QPN: e.Link.QPN, GID: e.Link.GID}
				nodes[k] = append(nodes[k], e)
			}
		}
		for _, c := range i.mgr.Connections() {
			out = append(out, i.connInfo(c, nodes[ib.LinkAddr{QPN: c.Peer.QPN, GID: c.Peer.GID}]))
		}
	})
	slices.SortFunc(out, func(a, b ConnInfo) int { return strings.Compare(a.Peer+a.Direction, b.Peer+b.Direction) })
	return out
}

// connInfo describes c, whose peer's node has the neighbors es. Control
// goroutine only.
func (i *Interface) connInfo(c *ipoibcm.Connection, es []*neigh.Entry) ConnInfo {
	dir := "in"
	if c.Outgoing {
		dir = "out"
	}
	t := &c.Traffic
	n := ConnInfo{
		Peer: c.Peer.String(), PeerIPs: []string{}, PeerGUID: fmt.Sprintf("0x%016x", binary.BigEndian.Uint64(c.Peer.GID[8:])), PeerUDQPN: uint32(c.Peer.QPN),
		Type: c.QP.Type().String(), Direction: dir, State: c.State().String(), QPState: c.QP.State().String(),
		Sends: c.Sendable(), LocalQPN: uint32(c.QP.Num()), RemoteQPN: uint32(c.RemoteQPN()), MTU: c.MTU, PathMTU: c.PathMTU.Bytes(),
		TxPackets: t.TxPackets.Load(), TxBytes: t.TxBytes.Load(), RxPackets: t.RxPackets.Load(), RxBytes: t.RxBytes.Load(),
		RNRNAKs: -1, Retransmits: -1, QPCounters: map[string]uint64{},
		AgeSecs: int64(i.ctl.now.Sub(c.Since) / time.Second),
	}
	n.Packets = n.TxPackets + n.RxPackets
	if !c.Established.IsZero() {
		n.UpSecs = int64(i.ctl.now.Sub(c.Established) / time.Second)
	}
	for _, x := range c.QP.Counters() {
		n.QPCounters[x.Name] = x.Value
		switch x.Name {
		case ib.QPCounterRNRNAKs:
			n.RNRNAKs = int64(x.Value)
		case ib.QPCounterRetransmits:
			n.Retransmits = int64(x.Value)
		}
	}
	ips := make([]netip.Addr, len(es))
	for k, e := range es {
		ips[k] = e.IP
		n.UDFallbacks += e.UDFallbacks.Load()
	}
	slices.SortFunc(ips, netip.Addr.Compare) // IPv4 first
	for _, ip := range ips {
		n.PeerIPs = append(n.PeerIPs, ip.String())
	}
	return n
}

// Stats returns every counter: the interface's, the CM's and the device's.
func (i *Interface) Stats() []ib.Counter {
	out := i.ctr.list()
	i.do(func() {
		if i.mgr != nil {
			out = prefixed(out, "cm_", i.mgr.Counters())
			// Transport counters summed over every connection's QP,
			// gone ones included: a peer leaving takes nothing off a
			// total.
			out = prefixed(out, "conn_", i.mgr.ConnCounters())
		}
		out = prefixed(out, "sa_", i.ctl.pathCounters())
	})
	return prefixed(out, "dev_", i.dev.Counters())
}

// prefixed appends cs to out with prefix before each name.
func prefixed(out []ib.Counter, prefix string, cs []ib.Counter) []ib.Counter {
	for _, c := range cs {
		c.Name = prefix + c.Name
		out = append(out, c)
	}
	return out
}

// peerIPs names a peer by its IP addresses for log lines (operators know
// hosts by IP, not by link address); "" when none is known. Control
// goroutine only.
func (i *Interface) peerIPs(link ib.LinkAddr) string {
	return ipList(i.neigh.ByLink(link))
}

// ipList is the entries' addresses, sorted, for a peer_ip key.
func ipList(es []*neigh.Entry) string {
	ips := make([]string, len(es))
	for k, e := range es {
		ips[k] = e.IP.String()
	}
	slices.Sort(ips)
	return strings.Join(ips, ",")
}
