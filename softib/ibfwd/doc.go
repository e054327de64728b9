// Package ibfwd is the switching of a simulated InfiniBand subnet whose
// ports are softib devices on the InfiniBand link layer: one UDP
// endpoint every port sends its native IB frames to, which forwards each
// one as the subnet's switches would, by the DLID in its LRH.
//
// It holds what the subnet manager programs into switches: unicast
// forwarding tables (LID to port), multicast forwarding tables (MLID to
// ports) and SL-to-VL maps. They come through the Routes interface:
// Static tables given by hand; Switch, a one-switch subnet's tables as
// OpenSM programmed them, read back with ibroute and smpquery
// (ReadSwitch); or Subnet, a subnet of any number of switches, its links
// from ibnetdiscover and every switch's tables (ReadSubnet, Refresh),
// through which a packet is walked hop by hop. Like a switch it checks the
// VCRC, rewrites the VL from the SL and recomputes the VCRC, and drops,
// counting each cause: a bad VCRC, DLID 0, a LID with no route (a loop
// or a dead end included), an MLID with no entry, an SL that maps to
// VL15 on a hop, a packet from an address that is no registered port.
//
// The whole subnet is one UDP endpoint: the hops are walked when the
// tables are read, not taken one by one per packet.
//
// For tests it can also hold a CM REQ until the REQ back comes, so that
// two peers' REQs cross for certain (CrossREQs), and note the way each
// (SLID, DLID) pair's packets went, to compare with ibtracert
// (RecordPaths, ParseTracert).
package ibfwd
