// Package counterdoc is the one table of what the counters of `ipoibd
// stats` mean: for each, its name as the daemon shows it, one sentence,
// and whether a value above 0 is trouble (a packet or message lost, or
// something failing) or normal (what a healthy interface also does). The
// man page's COUNTERS section, the marks of `ipoibd stats`, the SIGHUP
// summary and the Prometheus HELP texts are all made from it; a test in
// ipoibd fails when a counter the daemon has is missing here.
//
// The counters come from several packages (ipoib, ipoib/ipoibcm, cm,
// sapath, softib, verbs, rdmacm), which name them; the daemon prefixes
// the CM's with cm_, the connections' summed QP counters with conn_, the
// SA's with sa_ and the device's with dev_. Counters made per kind, REJ
// reason, event or sysfs file are documented as a family: a name ending
// in '*' stands for every counter with that prefix (an exact entry for a
// member says more).
package counterdoc

import "strings"

// Entry documents one counter, or one family of counters (Name ends in
// '*').
type Entry struct {
	Name string
	// Trouble: a value above 0 means something was lost or failed; a
	// healthy interface keeps it at 0.
	Trouble bool
	// Only says when the counter exists ("" for always), e.g. "verbs".
	Only string
	// Meaning is one sentence.
	Meaning string
}

// Family reports whether e stands for every counter with the prefix
// Name without its '*'.
func (e Entry) Family() bool { return strings.HasSuffix(e.Name, "*") }

// Lookup returns the entry of the counter called name: its own, else the
// family with the longest prefix of it. ok is false for a counter the
// table does not know.
func Lookup(name string) (e Entry, ok bool) {
	if k, ok := exact[name]; ok {
		return table[k], true
	}
	best := -1
	for k, f := range table {
		p := strings.TrimSuffix(f.Name, "*")
		if f.Family() && strings.HasPrefix(name, p) && (best < 0 || len(p) > len(table[best].Name)-1) {
			best = k
		}
	}
	if best < 0 {
		return Entry{}, false
	}
	return table[best], true
}

// IsTrouble reports whether a value above 0 of the counter called name
// means trouble; an unknown counter with "drop" in its name is taken for
// a loss.
func IsTrouble(name string) bool {
	if e, ok := Lookup(name); ok {
		return e.Trouble
	}
	return strings.Contains(name, "drop")
}

// All returns the table in the order `ipoibd stats` shows the counters.
func All() []Entry { return append([]Entry(nil), table...) }

var exact = func() map[string]int {
	m := make(map[string]int, len(table))
	for k, e := range table {
		if !e.Family() {
			m[e.Name] = k
		}
	}
	return m
}()

// The providers' and connection services' conditions, for Only.
const (
	softib   = "softib"
	softibIB = "softib --softib-link ib"
	verbs    = "verbs"
	ownCM    = "softib, verbs --cm own"
	verbsOwn = "verbs --cm own"
	kernelCM = "verbs --cm kernel"
	ib       = "an InfiniBand link layer (softib --softib-link ib, verbs on InfiniBand)"
	bonded   = "an interface over two or more ports (--underlay given more than once)"
)

var table = []Entry{
	// The interface (package ipoib).
	{"tx_packets", false, "", "IP packets from the TUN sent to the fabric."},
	{"tx_bytes", false, "", "Octets of the IP packets in tx_packets."},
	{"tx_ud", false, "", "Unicast packets sent over the UD queue pair (datagram mode, or a peer without connected mode)."},
	{"tx_connected", false, "", "Packets sent over an RC or UC connection."},
	{"tx_multicast", false, "", "Packets sent to a multicast group or the broadcast group."},
	{"tx_queued", false, "", "Packets that waited for their neighbor's resolution or connection before going out."},
	{"tx_drop_malformed", true, "", "Packets from the TUN that are not IPv4 or IPv6, dropped."},
	{"tx_drop_no_neighbor", true, "", "Packets dropped because their neighbor could not be resolved or the neighbor table was full."},
	{"tx_drop_queue_full", true, "", "Packets dropped because their neighbor's queue of packets waiting for resolution was full."},
	{"tx_drop_too_big", true, "", "Packets larger than the path MTU, dropped (answered with ICMP too-big where allowed, so the sender shrinks them)."},
	{"tx_drop_no_route", true, "", "Packets to an off-link destination with no route through this interface, dropped."},
	{"tx_drop_post", true, "", "Packets the provider refused to send (send queue full or QP in error), dropped."},
	{"tx_drop_kernel_nd", true, "", "Neighbor discovery the kernel sent other than router solicitations (advertisements, redirects), not carried: the daemon does ND itself."},
	{"tx_kernel_router_solicits", false, "", "Router solicitations the kernel sends when the link comes up, not carried: ipoibd answers neighbor discovery itself and does no router discovery."},
	{"tx_errors", true, "", "Send completions with an error status: the packet may not have arrived."},
	{"tx_icmp_too_big", false, "", "ICMP too-big errors written back into the TUN for packets over the path MTU (counted in tx_drop_too_big)."},
	{"rx_packets", false, "", "IP packets from the fabric written to the TUN."},
	{"rx_bytes", false, "", "Octets of the IP packets in rx_packets."},
	{"rx_drop_malformed", true, "", "Received messages with a bad IPoIB header, ARP or ND, dropped."},
	{"rx_link_down", false, "", "Received packets the TUN refused because the interface was administratively down (ip link set down): dropped, as the kernel drops what a down interface receives."},
	{"rx_multicast_own", false, "", "Our own multicast and broadcast packets, which the fabric delivers back to every member of the group including us: ignored."},
	{"rx_drop_ethertype", true, "", "Received messages of an EtherType IPoIB does not carry, dropped."},
	{"rx_drop_tun", true, "", "Received packets the TUN refused to take for a reason other than the interface being down (the kernel out of memory, a malformed super-packet), dropped."},
	{"rx_errors", true, "", "Receive completions with an error status."},
	{"arp_in", false, "", "ARP packets received."},
	{"arp_out", false, "", "ARP packets sent (requests and replies the daemon makes)."},
	{"nd_in", false, "", "IPv6 neighbor discovery packets received."},
	{"nd_out", false, "", "IPv6 neighbor discovery packets sent (solicitations and advertisements the daemon makes)."},
	{"ctl_drop_busy", true, "", "Packets or events dropped because the control goroutine's inbox was full: the daemon ran short."},
	{"ctl_drop_solicit_busy", true, "", "ARP requests and neighbor solicitations dropped because the control goroutine's solicitation inbox was full."},
	{"impostors_refuted", true, "", "ARP or ND replies that tried to move a live neighbor to another link address and were refuted."},
	{"solicit_not_ours", false, "", "ARP requests and neighbor solicitations for an address that is not ours (broadcast to every host): not answered."},
	{"solicit_no_source", false, "", "Neighbor solicitations from the unspecified address (duplicate address detection) or without a source: not answered."},
	{"learn_candidates", false, "", "Neighbors learned from their solicitations, kept as candidates until our traffic uses them."},
	{"learn_evicted", false, "", "Candidate neighbors evicted for newer ones because the bound on candidates was reached."},
	{"learn_rate_limited", true, "", "Solicitations answered but not learned from, because their node taught us addresses too fast."},
	{"learn_link_mismatch", true, "", "Solicitations whose link address is not their sender's: not learned from."},
	{"learn_used", false, "", "Candidate neighbors our traffic used, which became neighbor entries."},
	{"tx_conn_errors", true, "", "Connections whose queue pair could not send: torn down and connected again."},
	{"tx_unreachable_sent", true, "", "ICMP host unreachable and ICMPv6 address unreachable written back into the TUN for packets whose neighbor failed."},
	{"tx_unreachable_limited", true, "", "Packets whose neighbor failed that got no ICMP unreachable because of its rate limit."},
	{"tx_super_packets", false, "", "TSO/USO super-packets from the TUN, cut into standard IPoIB packets."},
	{"tx_drop_offload", true, "", "Super-packets or checksum requests from the TUN that do not parse, dropped."},
	{"tx_slot_waits", false, "", "Times a TUN reader found all its transmit slots in flight and waited for send completions before reading on (RC holds a slot until the peer acknowledges)."},
	{"neigh_moved_to_sibling", false, "", "Neighbors that announced a move to the other port they had named before (an interface over two ports failing over), followed at once."},
	{"tx_handoffs", false, "", "Packets a port that is not the active one read from the TUN while flows were spread over both rails, and handed to the active port: their destination has no second port it knows (a peer with one port, a kernel peer, multicast)."},
	{"tx_drop_handoff", true, "", "Packets handed to the active port that it could not take: it was closing."},
	{"rx_coalesced", false, "", "Super-packets written to the TUN, each made of several received TCP segments (receive coalescing)."},
	{"sa_joins", false, ib, "Multicast joins the subnet administrator granted (the broadcast group's not counted)."},
	{"sa_join_failures", true, ib, "Multicast joins the subnet administrator refused or did not answer."},
	{"tx_drop_joining", true, "", "Multicast packets dropped because the group's send-only join was still under way."},
	{"tx_drop_no_path", true, "", "Unicast ARP or ND answers dropped because there was no path record to their node yet (the node asks again)."},
	{"sa_bcast_changes", false, ib, "Changes of the broadcast group's Q_Key, MLID or path that the subnet administrator made, followed."},
	{"ud_qp_reinits", false, "", "Times the UD queue pair was made ready again: for a new Q_Key or P_Key index, or when its port came back with it in error."},
	{"pkey_index_changes", false, ib, "Times the port's P_Key table moved our partition: the UD queue pair was made ready again and the connections torn down."},
	{"learn_lid_mismatch", true, ib, "ARP or ND whose claimed GID's path has another LID than the datagram's source: not learned from."},
	{"learn_grh_lid_mismatch", true, ib, "ARP or ND whose GRH source GID's path has another LID than the datagram's source: not learned from."},
	{"learn_no_path", true, ib, "ARP or ND from a source without a GRH whose claim had no path yet to check it against: not learned from."},

	// An interface over several ports (package bond).
	{"failovers", false, bonded, "Times the interface moved from one port to another (the log has a line for each, with the reason)."},
	{"failover_time_us", false, bonded, "Microseconds the failovers took in all, from the choice of the new port to its announcements sent (divide by failovers for the mean)."},

	// The connection manager (ipoib/ipoibcm's Manager).
	{"cm_connects", false, "", "Connections we asked for (REQs sent)."},
	{"cm_accepted", false, "", "Connection requests from peers we accepted (REPs sent)."},
	{"cm_established", false, "", "Connections that became established, in either direction."},
	{"cm_crossing_accepted", false, "", "Crossing REQs (both sides asked at once) we accepted: we have the smaller link address (--cm-policy rfc)."},
	{"cm_crossing_rejected", false, "", "Crossing REQs we rejected because the peer has the smaller link address and accepts ours (--cm-policy rfc)."},
	{"cm_rejected", false, "", "REJs received for our REQs and REPs: a crossing REQ in rfc policy, or a peer that does not take connections (then UD carries the traffic); the log says why."},
	{"cm_timed_out", true, "", "Connection setups or teardowns the peer did not answer in time."},
	{"cm_disconnected", false, "", "Connections ended by a DREQ, ours or the peer's."},
	{"cm_peer_restarts", false, "", "Peers found restarted (a new UD QPN at a known GID): their old connections were torn down."},
	{"cm_idle_reaped", false, "", "Connections torn down after --idle-timeout without traffic."},
	{"cm_send_failures", true, "", "Connections whose queue pair reported a failed send, torn down."},
	{"cm_rnr_failovers", false, "", "Connections to a kernel ipoib peer whose receive queue ran dry (RNR retries exceeded), made again at once."},
	{"cm_qp_errors", true, "", "Connections whose queue pair could not be brought up or went into error."},

	// The CM engine (package cm), with --cm own.
	{"cm_mads_in", false, ownCM, "CM MADs received."},
	{"cm_mads_out", false, ownCM, "CM MADs sent, retransmissions included."},
	{"cm_retransmits", false, ownCM, "CM MADs sent again because the peer did not answer in time (the losses show in cm_timed_out)."},
	{"cm_malformed", true, ownCM, "CM MADs that do not parse, dropped."},
	{"cm_duplicates", false, ownCM, "CM MADs received again (a peer's retransmission of what we already answered): answered again or ignored."},
	{"cm_reqs_refused", true, ownCM, "REQs refused without asking the connection manager (bad attributes, limits)."},
	{"cm_stale", false, ownCM, "Connections ended by the stale-connection rule: a peer reused a QP we still thought connected (usually a peer restart)."},
	{"cm_stale_foreign", true, ownCM, "REQs and REPs naming the remote QP of a connection whose peer is at another address: the stale rule is not applied."},
	{"cm_req_source_mismatch", true, ownCM, "REQs whose claimed port GID or CA GUID is not the MAD's source, rejected."},
	{"cm_req_busy_source", true, ownCM, "REQs refused because their source already has its share of connections in setup."},
	{"cm_req_refused_full", true, ownCM, "REQs refused because --max-conns or the bound on connections in setup was reached."},
	{"cm_send_errors", true, ownCM, "CM MADs the transport could not send."},
	{"cm_unknown_*", false, ownCM, "CM MADs naming no connection we know, by kind (req, rep, rtu, dreq, drep, rej, mra, ...): late retransmissions after a connection ended."},
	{"cm_unsupported_*", true, ownCM, "CM MADs of kinds IPoIB does not use (SIDR, LAP, APR), by kind: ignored."},
	{"cm_rej_sent_*", false, ownCM, "REJs we sent, by reason (the IBA REJ reason: consumer, no_resources, stale_conn, ...); the log line of the refusal says more."},
	{"cm_rej_sent_no_resources", true, ownCM, "REJs we sent because we were out of resources (--max-conns or the bound on connections in setup)."},
	{"cm_mad_drop_queue_full", true, ownCM, "CM MADs dropped because the connection service's queue was full."},
	{"cm_mad_drop_source_share", true, ownCM, "CM MADs dropped because the connection service's queue was over half full and their source had already had its share of it (a flooding host)."},
	{"cm_mad_drop_split_full", true, ownCM, "CM MADs dropped because this interface's share of the port's QP1 was full."},
	{"cm_umad_sent", false, verbsOwn, "MADs sent through ib_umad."},
	{"cm_umad_received", false, verbsOwn, "MADs received through ib_umad."},
	{"cm_umad_send_errors", true, verbsOwn, "MADs ib_umad refused to send."},
	{"cm_umad_send_no_lid", true, verbsOwn, "MADs not sent because the destination's LID was not known."},
	{"cm_umad_rx_drop_bad_pkey_index", true, verbsOwn, "MADs received with a P_Key index the port does not have, dropped."},
	{"cm_umad_rx_drop_status", true, verbsOwn, "MADs received with an error status from ib_umad, dropped."},
	{"cm_umad_rx_drop_short", true, verbsOwn, "MADs received shorter than a MAD, dropped."},
	{"cm_umad_rx_drop_queue_full", true, verbsOwn, "MADs dropped because the receive queue to the CM was full."},
	{"cm_umad_rx_drop_source_share", true, verbsOwn, "MADs dropped because the receive queue to the CM was over half full and their source had already had its share of it (a flooding host)."},

	// The kernel CM through librdmacm (package rdmacm).
	{"cm_ev_*", false, kernelCM, "librdmacm events by type (RDMA_CM_EVENT_...): the connections' life as the kernel CM reports it."},
	{"cm_ev_addr_error", true, kernelCM, "librdmacm address resolutions that failed."},
	{"cm_ev_route_error", true, kernelCM, "librdmacm route resolutions that failed."},
	{"cm_ev_connect_error", true, kernelCM, "librdmacm connections that failed while being set up."},
	{"cm_ev_unreachable", true, kernelCM, "librdmacm connection attempts whose peer was unreachable."},
	{"cm_ev_device_removal", true, kernelCM, "The RDMA device was removed under the kernel CM."},
	{"cm_ev_multicast_error", true, kernelCM, "librdmacm multicast errors."},
	{"cm_ev_unknown", true, kernelCM, "librdmacm events of a type this build does not know."},
	{"cm_err_*", true, kernelCM, "librdmacm calls that failed, by call (rdma_connect, rdma_accept, ...)."},
	{"cm_events_stale", false, kernelCM, "librdmacm events for connections the service no longer has: ignored."},
	{"cm_requests_refused", true, kernelCM, "Connection requests refused because the bound on connections in setup or in total was reached."},
	{"cm_requests_unusable", true, kernelCM, "Connection requests refused before the connection manager saw them (transport or attributes unusable)."},
	{"cm_conns", false, kernelCM, "Connections the kernel CM holds now, in any state (a gauge: it goes down too)."},
	{"cm_conns_half_open", false, kernelCM, "Of cm_conns, those still being set up (a gauge)."},

	// The connections' queue pairs, summed over every connection, gone
	// ones included (softib's QP counters).
	{"conn_tx_packets", false, softib, "Transport packets the connections' QPs sent."},
	{"conn_tx_bytes", false, softib, "Octets the connections' QPs sent."},
	{"conn_tx_messages", false, softib, "Messages (IPoIB packets) the connections' QPs sent."},
	{"conn_rx_packets", false, softib, "Transport packets the connections' QPs received."},
	{"conn_rx_bytes", false, softib, "Octets the connections' QPs received."},
	{"conn_rx_messages", false, softib, "Messages the connections' QPs received."},
	{"conn_retransmits", false, softib, "RC packets sent again after a NAK or a timeout (recovered losses of the underlay)."},
	{"conn_ack_timeouts", false, softib, "RC acknowledgements that did not come in time, followed by a retransmission."},
	{"conn_rnr_naks_sent", false, softib, "Receiver-not-ready NAKs sent: a message came before a receive buffer was posted (the sender retries)."},
	{"conn_rnr_naks_received", false, softib, "Receiver-not-ready NAKs received from peers (we retry)."},
	{"conn_seq_naks_sent", false, softib, "Sequence-error NAKs sent for a packet out of order (the sender goes back)."},
	{"conn_seq_naks_received", false, softib, "Sequence-error NAKs received (we go back and send again)."},
	{"conn_acks_sent", false, softib, "RC acknowledgements sent."},
	{"conn_duplicates", false, softib, "RC packets received twice (a retransmission of what had arrived): acknowledged again."},
	// verbs' QP counters.
	{"conn_send_posted", false, verbs, "Send work requests posted on the connections' QPs."},
	{"conn_send_completed", false, verbs, "Send completions of the connections' QPs."},
	{"conn_send_errors", true, verbs, "Send completions in error (not flushes)."},
	{"conn_send_flushed", false, verbs, "Sends flushed because their QP was closed or moved to error."},
	{"conn_recv_posted", false, verbs, "Receive work requests posted on the connections' QPs."},
	{"conn_recv_completed", false, verbs, "Receive completions of the connections' QPs."},
	{"conn_recv_errors", true, verbs, "Receive completions in error (not flushes)."},
	{"conn_recv_flushed", false, verbs, "Receives flushed because their QP was closed or moved to error."},
	{"conn_async_errors", true, verbs, "Asynchronous error events (QP fatal, access errors) of the connections' QPs."},

	// The subnet administrator's path cache (package sapath).
	{"sa_path_hits", false, ib, "Path lookups answered from the cache."},
	{"sa_path_misses", false, ib, "Path lookups the cache could not answer yet (asked, or being asked)."},
	{"sa_path_queries", false, ib, "Path record queries sent to the subnet administrator."},
	{"sa_path_query_failures", true, ib, "Path record queries that failed: no answer, an error status, or an unusable record."},
	{"sa_path_refreshes", false, ib, "Answers that replaced a path already held."},
	{"sa_path_expired", false, ib, "Destinations dropped from the cache for being idle."},
	{"sa_path_cache_full", true, ib, "New destinations not kept because the path cache was full."},

	// The device: softib.
	{"dev_rx_packets", false, softib, "Packets the software adapter received from the underlay."},
	{"dev_rx_bytes", false, softib, "Octets the software adapter received."},
	{"dev_tx_packets", false, softib, "Packets the software adapter sent to the underlay."},
	{"dev_tx_bytes", false, softib, "Octets the software adapter sent."},
	{"dev_tx_sends", false, softib, "Send calls to the underlay socket (a train of packets sent at once is one)."},
	{"dev_rx_drop_malformed", true, softib, "Underlay datagrams whose headers do not parse, dropped."},
	{"dev_rx_drop_bad_icrc", true, softib, "Packets whose invariant CRC does not match, dropped."},
	{"dev_rx_drop_pkey", true, softib, "Packets whose P_Key is not in the port's table, dropped."},
	{"dev_rx_drop_qkey", true, softib, "UD packets with the wrong Q_Key, dropped."},
	{"dev_rx_drop_unknown_qp", true, softib, "Packets for a queue pair that does not exist (a connection already torn down), dropped."},
	{"dev_rx_drop_qp_state", true, softib, "Packets for a queue pair not ready to receive, dropped."},
	{"dev_rx_drop_no_recv_buffer", true, softib, "UD packets that found no receive buffer posted, dropped."},
	{"dev_rx_drop_mad_source_share", true, softib, "MADs dropped because the queue to the CM was over half full and their source had already had its share of it (a flooding host)."},
	{"dev_rx_drop_too_long", true, softib, "Messages larger than the posted receive buffer, dropped."},
	{"dev_rx_drop_psn", true, softib, "RC or UC packets out of the sequence window or order, dropped (RC sends them again)."},
	{"dev_rx_drop_uc_incomplete", true, softib, "UC messages with a packet missing, dropped."},
	{"dev_rx_drop_not_member", true, softib, "Multicast packets for a group nobody here joined, dropped."},
	{"dev_cq_overrun", true, softib, "Completions lost because a completion queue was full."},
	{"dev_tx_error", true, softib, "Packets the underlay refused to send."},
	{"dev_rx_drop_wrong_source", true, softib, "RC or UC packets not from the queue pair's peer address, dropped."},
	{"dev_rx_stale_acks", false, softib, "RC ACKs and NAKs for a sequence number not outstanding, ignored: the echo of a retransmission the peer had already received (IBA's duplicate responses), or forged."},
	{"dev_rx_drop_bad_vcrc", true, softibIB, "Packets whose variant CRC does not match, dropped."},
	{"dev_rx_drop_dlid_zero", true, softibIB, "Packets with destination LID 0, which names no port, dropped."},
	{"dev_rx_drop_wrong_dlid", true, softibIB, "Unicast packets for a LID that is not ours under our LMC, dropped."},

	// The device: verbs.
	{"dev_completions_bad", true, verbs, "Completions with an error other than a flush."},
	{"dev_completions_flushed", false, verbs, "Completions flushed because their queue pair was closed or moved to error."},
	{"dev_completions_stale", false, verbs, "Completions of a queue pair already closed or reset: ignored."},
	{"dev_poll_errors", true, verbs, "ibv_poll_cq calls that failed."},
	{"dev_cq_notify_errors", true, verbs, "Completion queues that could not be re-armed or whose events could not be read."},
	{"dev_sends_inline", false, verbs, "UD sends of at most 128 octets the adapter took inline, with the work request (where it offers inline data)."},
	{"dev_busy_poll_hits", false, verbs, "With --busy-poll: polls of a receive completion queue after it was drained that found completions (each saved an event and a wake-up)."},
	{"dev_cq_events", false, verbs, "Completion events taken: each woke the goroutine of a receive CQ, or of a send CQ someone waited on."},
	{"dev_srq_arm_errors", true, verbs, "ibv_modify_srq calls that refused a shared receive queue limit."},
	{"dev_qp_last_wqe_timeouts", true, verbs, "Closed queue pairs on the shared receive queue destroyed after 1 s without their LAST_WQE_REACHED event (rxe never sends it: one per connection closed there)."},
	{"dev_ip_join_errors", true, verbs, "RoCE: multicast groups of IP the interface could not join."},
	{"dev_async_unknown", true, verbs, "Asynchronous events of a type this build does not know."},
	{"dev_async_*", true, verbs, "The adapter's asynchronous events by type (IBV_EVENT_...): errors of a queue pair, completion queue or device."},
	{"dev_async_comm_est", false, verbs, "Communication-established events (a message came before the RTU)."},
	{"dev_async_sq_drained", false, verbs, "Send-queue-drained events."},
	{"dev_async_port_active", false, verbs, "The port became active."},
	{"dev_async_port_err", true, verbs, "The port went down (IBV_EVENT_PORT_ERR)."},
	{"dev_async_lid_change", false, verbs, "The port's LID changed (the subnet manager)."},
	{"dev_async_pkey_change", false, verbs, "The port's P_Key table changed (the subnet manager)."},
	{"dev_async_sm_change", false, verbs, "The subnet manager changed."},
	{"dev_async_srq_limit_reached", false, verbs, "A shared receive queue fell below its limit: more buffers are posted."},
	{"dev_async_qp_last_wqe_reached", false, verbs, "A queue pair on a shared receive queue has no more work (it is being torn down)."},
	{"dev_async_client_reregister", false, verbs, "The subnet manager asked for multicast joins again."},
	{"dev_async_gid_change", false, verbs, "The port's GID table changed."},
	{"dev_hw_*", false, verbs, "The adapter's own port counters from sysfs (hw_counters), under the kernel driver's names; see the adapter's documentation."},
}
