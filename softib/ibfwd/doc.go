// Package ibfwd is the switching of a simulated InfiniBand subnet whose
// ports are softib devices on the InfiniBand link layer: one UDP
// endpoint every port sends its native IB frames to, which forwards each
// one as the subnet's switches would, by the DLID in its LRH.
//
// It holds what the subnet manager programs into switches: a unicast
// forwarding table (LID to port), a multicast forwarding table (MLID to
// ports) and SL-to-VL maps. They come through the Routes interface:
// Static tables given by hand, or Switch, a one-switch subnet's tables as
// OpenSM programmed them, read back with ibroute and smpquery (ReadSwitch)
// on an ibsim fabric or a real one. Like a switch it checks the VCRC, rewrites the
// VL from the SL and recomputes the VCRC, and drops, counting each cause:
// a bad VCRC, DLID 0, a LID with no route, an MLID with no entry, an SL
// that maps to VL15, a packet from an address that is no registered port.
//
// The subnet is collapsed into one switch: a route names the port the
// packet leaves on, not the hops in between.
package ibfwd
