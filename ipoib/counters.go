package ipoib

import (
	"sync/atomic"

	"github.com/ipoibd/ipoibd/ib"
)

// counter names what the interface counts; every drop has its own cause.
type counter int

const (
	txPackets counter = iota
	txBytes
	txUD            // unicast sent over UD
	txConnected     // sent over an RC/UC connection
	txMulticast     // sent to a multicast group or broadcast
	txQueued        // waited for resolution or a connection
	txDropMalformed // TUN gave us something that is not IPv4/IPv6
	txDropNoNeigh   // resolution failed or the table is full
	txDropQueueFull // the pending queue of a neighbor was full
	txDropTooBig    // larger than the path MTU (answered with ICMP when it may be)
	txDropNoRoute   // off-link destination with no route through this interface
	txDropPost      // the provider refused the send
	txDropKernelND  // neighbor discovery from the kernel other than RS: the daemon does ND itself
	txKernelRS      // the kernel's router solicitations: not carried (no router discovery), not a loss
	txErrors        // send completions with an error status
	txICMPTooBig    // ICMP errors written back into the TUN
	rxPackets
	rxBytes
	rxDropMalformed // bad IPoIB header, ARP or ND
	rxMulticastOwn  // our own multicast, which the fabric delivers back to every member: not a loss
	rxDropEtherType // an EtherType IPoIB does not carry
	rxDropTUN       // the TUN write failed
	rxLinkDown      // the TUN refused a packet because the interface is down, as the kernel drops one: not a fault
	rxErrors        // receive completions with an error status
	arpIn
	arpOut
	ndIn
	ndOut
	ctlDropBusy          // the control goroutine's inbox was full
	ctlDropSolicitBusy   // an ARP request or NS found the control goroutine's solicitation inbox full
	impostors            // replies that tried to redirect a live neighbor and were refuted
	solicitNotOurs       // ARP requests and NSs for an address not ours: not answered
	solicitNoSource      // NSs from the unspecified address (DAD) or without a source: not answered
	learnCandidates      // neighbors learned from solicitations, as candidates (neigh/learn.go)
	learnEvicted         // candidates evicted for newer ones (the bound was reached)
	learnLimited         // solicitations answered but not learned: their node taught too fast
	learnLinkMismatch    // solicitations whose link address is not their sender's: not learned
	learnUsed            // candidates our traffic used (they became entries)
	txConnErrors         // connections whose QP could not send: torn down and connected again
	txUnreachable        // ICMP host / ICMPv6 address unreachable written back for packets whose neighbor failed
	txUnreachableLimited // such packets not answered: the rate limit (unreach.go) was reached
	txSuperPackets       // TSO/USO super-packets from the TUN, cut into wire packets
	txDropOffload        // super-packets or checksum requests from the TUN that do not parse
	rxCoalesced          // super-packets written to the TUN, made of received TCP segments (GRO)
	subnetJoins          // multicast joins the SA granted (InfiniBand; the broadcast group's is not counted)
	subnetJoinFailures   // multicast joins the SA refused or did not answer
	txDropJoining        // multicast packets to a group whose send-only join (InfiniBand) is under way
	txDropNoPath         // unicast ARP/ND answers dropped: no path record (InfiniBand) to the node yet
	subnetBcastChanges   // the SA changed the broadcast group's Q_Key, MLID or path: followed (udqp.go)
	udReinits            // the UD QP went through RESET to RTS again (a new Q_Key or P_Key index, or its port back with it in ERROR)
	pkeyIndexChanges     // the port's P_Key table moved our partition: UD QP made ready again, connections torn down
	learnLIDMismatch     // InfiniBand ARP/ND whose claimed GID's path has another LID than the datagram's source: not learned
	learnGRHMismatch     // InfiniBand ARP/ND whose GRH source GID's path has another LID than the datagram's source: not learned
	learnNoPath          // InfiniBand ARP/ND from a GRH-less source whose claim has no path yet to check it against: not learned
	txSlotWaits          // times a TUN reader found all its transmit slots in flight and waited for send completions
	neighMovedToSibling  // neighbors that moved to the other port they had named (a peer's failover), followed at once
	txHandoffs           // packets a rail read and handed to the active port: no Rail entry for their destination (rail.go)
	txDropHandoff        // such packets the active port could not take: it was closing
	numCounters
)

var counterNames = [numCounters]string{
	txPackets: "tx_packets", txBytes: "tx_bytes", txUD: "tx_ud", txConnected: "tx_connected",
	txMulticast: "tx_multicast", txQueued: "tx_queued",
	txDropMalformed: "tx_drop_malformed", txDropNoNeigh: "tx_drop_no_neighbor",
	txDropQueueFull: "tx_drop_queue_full", txDropTooBig: "tx_drop_too_big",
	txDropNoRoute: "tx_drop_no_route", txDropPost: "tx_drop_post", txDropKernelND: "tx_drop_kernel_nd",
	txKernelRS: "tx_kernel_router_solicits", txErrors: "tx_errors", txICMPTooBig: "tx_icmp_too_big",
	rxPackets: "rx_packets", rxBytes: "rx_bytes", rxDropMalformed: "rx_drop_malformed",
	rxMulticastOwn: "rx_multicast_own", rxDropEtherType: "rx_drop_ethertype", rxDropTUN: "rx_drop_tun",
	rxLinkDown: "rx_link_down",
	rxErrors:   "rx_errors", arpIn: "arp_in", arpOut: "arp_out", ndIn: "nd_in", ndOut: "nd_out",
	ctlDropBusy: "ctl_drop_busy", ctlDropSolicitBusy: "ctl_drop_solicit_busy", impostors: "impostors_refuted",
	solicitNotOurs: "solicit_not_ours", solicitNoSource: "solicit_no_source",
	learnCandidates: "learn_candidates", learnEvicted: "learn_evicted", learnLimited: "learn_rate_limited",
	learnLinkMismatch: "learn_link_mismatch", learnUsed: "learn_used", txConnErrors: "tx_conn_errors",
	txUnreachable: "tx_unreachable_sent", txUnreachableLimited: "tx_unreachable_limited",
	txSuperPackets: "tx_super_packets", txDropOffload: "tx_drop_offload", rxCoalesced: "rx_coalesced",
	subnetJoins: "sa_joins", subnetJoinFailures: "sa_join_failures", txDropJoining: "tx_drop_joining",
	txDropNoPath: "tx_drop_no_path", subnetBcastChanges: "sa_bcast_changes", udReinits: "ud_qp_reinits",
	pkeyIndexChanges: "pkey_index_changes", learnLIDMismatch: "learn_lid_mismatch",
	learnGRHMismatch: "learn_grh_lid_mismatch", learnNoPath: "learn_no_path", txSlotWaits: "tx_slot_waits",
	neighMovedToSibling: "neigh_moved_to_sibling", txHandoffs: "tx_handoffs", txDropHandoff: "tx_drop_handoff",
}

type counters [numCounters]atomic.Uint64

func (c *counters) inc(k counter)           { c[k].Add(1) }
func (c *counters) add(k counter, n uint64) { c[k].Add(n) }

// CounterNames are the names of the interface's own counters, in the
// order Stats lists them (the daemon documents every one).
func CounterNames() []string { return append([]string(nil), counterNames[:]...) }

func (c *counters) list() []ib.Counter {
	out := make([]ib.Counter, numCounters)
	for i := range out {
		out[i] = ib.Counter{Name: counterNames[i], Value: c[i].Load()}
	}
	return out
}

// isDropCounter tells the counters of lost packets from the traffic ones.
func isDropCounter(k counter) bool {
	switch k {
	case txDropMalformed, txDropNoNeigh, txDropQueueFull, txDropTooBig, txDropNoRoute, txDropPost,
		txErrors, rxDropMalformed, rxDropEtherType, rxDropTUN, rxErrors, ctlDropBusy, ctlDropSolicitBusy,
		learnLimited, learnLinkMismatch, txConnErrors, subnetJoinFailures, txDropJoining, txDropNoPath,
		learnLIDMismatch, learnGRHMismatch, learnNoPath:
		return true
	}
	return false
}
