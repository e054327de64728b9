// The per-destination MTU host routes of a TUN netdev (netdev.Routes):
// the MTU negotiated with each peer, installed through netlink on the
// device's link. Package mtu writes the ICMP errors that go with them.

package tun

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"

	"github.com/ipoibd/ipoibd/mtu"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// RouteProtocol marks the host routes ipoibd installs (rtm_protocol), so only
// ours are ever changed or removed.
//
// 0x69 (105) is free: /etc/iproute2/rt_protos (Debian 12, iproute2 6.1)
// and the kernel's RTPROT_* list (include/uapi/linux/rtnetlink.h) use 0-4,
// 8-16, 18, 42, 99 and 186-192; well-known daemons that pick their own
// number use others (e.g. Calico 80). Values above RTPROT_STATIC (4) are
// not interpreted by the kernel. `ip route` prints it as "proto 105"; an
// operator who wants a name can add the line "105 ipoibd" to a file in
// /etc/iproute2/rt_protos.d/.
const RouteProtocol = netlink.RouteProtocol(0x69)

// Routes installs the per-destination MTU as host routes (/32, /128) in
// the main table through one link, marked with RouteProtocol.
//
// Metric handling: the MTU goes into the route's RTAX_MTU metric and is
// deliberately NOT locked (no RTAX_LOCK, unlike `ip route ... mtu lock N`).
// An unlocked route MTU is already honoured by the kernel as the upper
// bound for everything routed to the destination: local sockets size
// their datagrams and TCP its MSS by it, and forwarded packets larger than
// it get an ICMP error from the kernel itself. ICMP can only lower the
// path MTU below the route's MTU, in a cached exception that expires
// (net.ipv4.route.mtu_expires, 600 s by default); it can never raise it.
// Locking would be wrong for us because:
//   - it makes the kernel ignore every "fragmentation needed"/"packet too
//     big" for the destination, including genuine ones from routers behind
//     the peer and the ones this package synthesises (TooBig) — for IPv6
//     that is a black hole, since nothing fragments on the way;
//   - for IPv4 a locked MTU also stops the kernel from setting DF on
//     sockets in the default IP_PMTUDISC_WANT mode (ip_dont_fragment()),
//     i.e. it turns path MTU discovery off for that destination;
//   - for IPv6 it buys nothing: Linux 6.18 lowers the path MTU on a
//     Packet Too Big even under a locked route (TestRoutesPMTU).
//
// When Set changes the MTU it replaces the route, which drops the
// kernel's PMTU exceptions hanging off the old one, so a raised MTU takes
// effect at once.
//
// Only routes whose protocol is RouteProtocol and whose output link is ours
// count as ours: a route for the same host prefix with any other protocol
// (the operator's) or on another link (another ipoibd interface) is never
// changed or removed. Only the main table is looked at.
//
// A Routes is safe for concurrent use; its methods are serialised.
type Routes struct {
	mu   sync.Mutex
	h    *netlink.Handle
	link int
}

// NewRoutes returns the routes of the link with the given index, managed
// through netlink in the network namespace of the calling thread at the
// time of each call (which, for a daemon that does not switch namespaces,
// is its own).
func NewRoutes(linkIndex int) *Routes {
	return &Routes{h: &netlink.Handle{}, link: linkIndex}
}

// NewRoutesAt is NewRoutes through a given netlink handle, e.g. one from
// netlink.NewHandleAt for another network namespace.
func NewRoutesAt(h *netlink.Handle, linkIndex int) *Routes {
	return &Routes{h: h, link: linkIndex}
}

// Set installs or updates a host route (/32 or /128) to dst via the link
// with the given MTU, or removes ours where none is needed: where mtu is
// not below the link's MTU (the kernel uses the link's anyway, and every
// host route is one more the operator must read past), or where no route
// in the main table sends dst through our link any more (our subnet that
// held it was removed). If a host route for exactly that prefix exists in
// the main table that is not ours (the operator set it, or it belongs to
// another link), it is left alone and Set returns installed=false with a
// nil error; otherwise installed is true. Set is idempotent: if our route
// already has this MTU, gateway and source nothing is written (and the
// kernel's PMTU exceptions are kept). Calling it again after our
// addresses changed corrects the route's source, or removes the route.
//
// The new route is on-link (scope link) unless the kernel currently
// routes dst via a gateway on our link; then the host route keeps that
// gateway, so a next-hop lookup still finds the router.
//
// The route carries the source address (prefsrc) the kernel picks without
// it: the prefsrc of the route that covers dst, else our address in the
// subnet of dst (or of its gateway). Without one the kernel would take the
// link's first address for every host route, and with two subnets on the
// link a peer in the second would get packets from the first's address,
// which it cannot answer.
//
// mtu must be 68..65535. An IPv6 route cannot carry an MTU below IPv6's
// 1280 (the kernel refuses it: no IPv6 link is smaller, RFC 8200 §5), so
// an IPv6 destination whose path is below it (a connected peer reached
// over a small UD MTU while its connection comes back) gets no route of
// ours either: the link's MTU applies, and what is too big for the path
// waits for the connection or draws a packet too big from the datapath.
// An IPv4-mapped IPv6 address is taken as the IPv4 address; a zone is
// ignored.
func (r *Routes) Set(dst netip.Addr, mtu int) (installed bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	dst, family, err := checkSet(dst, mtu)
	if err != nil {
		return false, err
	}
	t, err := r.look(family)
	if err != nil {
		return false, fmt.Errorf("mtu: set route to %s: %w", dst, err)
	}
	return r.set(t, dst, mtu)
}

// SetMany is Set for each destination, with one look at the routing table
// per address family instead of one per destination: re-publishing
// thousands of paths at once (a peer with many addresses left, our
// addresses or the link MTU changed) must not cost a table dump each.
// The destinations must be distinct. errs has one entry per destination.
func (r *Routes) SetMany(dests []mtu.Dest) (installed []bool, errs []error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	installed, errs = make([]bool, len(dests)), make([]error, len(dests))
	tables := map[int]*table{}
	for k, d := range dests {
		dst, family, err := checkSet(d.Addr, d.MTU)
		if err != nil {
			errs[k] = err
			continue
		}
		t, ok := tables[family]
		if !ok {
			if t, err = r.look(family); err != nil {
				errs[k] = fmt.Errorf("mtu: set route to %s: %w", dst, err)
				continue
			}
			tables[family] = t
		}
		installed[k], errs[k] = r.set(t, dst, d.MTU)
	}
	return installed, errs
}

func checkSet(dst netip.Addr, mtu int) (netip.Addr, int, error) {
	dst, family, err := hostAddr(dst)
	if err != nil {
		return dst, 0, fmt.Errorf("mtu: set route: %w", err)
	}
	if mtu < 68 || mtu > 65535 {
		return dst, 0, fmt.Errorf("mtu: set route to %s: mtu %d out of range 68..65535", dst, mtu)
	}
	return dst, family, nil
}

// table is one look at the main routing table of one address family:
// what Set decides from. r.mu is held while it is used, and each
// destination is set at most once per look, so what Set changes never
// makes the look wrong for what comes after.
type table struct {
	family  int
	hosts   map[netip.Addr][]netlink.Route // host routes by destination, any link and protocol
	links   []netlink.Route                // routes out of our link, but our host routes
	linkMTU int
	addrs   []netlink.Addr // our link's addresses, read when first needed
	read    bool
}

func (r *Routes) look(family int) (*table, error) {
	routes, err := r.h.RouteListFiltered(family, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("list routes: %w", err)
	}
	link, err := r.h.LinkByIndex(r.link)
	if err != nil {
		return nil, fmt.Errorf("link %d: %w", r.link, err)
	}
	t := &table{family: family, hosts: map[netip.Addr][]netlink.Route{}, linkMTU: link.Attrs().MTU}
	for _, rt := range routes {
		host := isHost(rt.Dst)
		if host {
			if p, ok := prefixOf(rt.Dst); ok {
				t.hosts[p.Addr()] = append(t.hosts[p.Addr()], rt)
			}
		}
		if rt.LinkIndex == r.link && !(host && r.isOurs(&rt)) {
			t.links = append(t.links, rt)
		}
	}
	return t, nil
}

// set is Set on a look at the table; r.mu is held.
func (r *Routes) set(t *table, dst netip.Addr, mtu int) (installed bool, err error) {
	existing := t.hosts[dst]
	var ours *netlink.Route
	for i := range existing {
		if !r.isOurs(&existing[i]) {
			return false, nil // the operator's (or another link's): hands off
		}
		ours = &existing[i]
	}
	src, covered, err := r.source(t, dst)
	if err != nil {
		return false, fmt.Errorf("mtu: set route to %s: %w", dst, err)
	}
	if mtu >= t.linkMTU || !covered || t.family == netlink.FAMILY_V6 && mtu < IPv6MinMTU {
		if ours != nil {
			if err := r.del(ours); err != nil {
				return false, fmt.Errorf("mtu: remove route to %s: %w", dst, err)
			}
		}
		return true, nil
	}
	gw, err := r.gateway(dst)
	if err != nil {
		return false, fmt.Errorf("mtu: set route to %s: %w", dst, err)
	}
	if ours != nil && ours.MTU == mtu && !ours.MTULock && ours.Gw.Equal(gw) && ours.Src.Equal(src) {
		return true, nil
	}
	route := r.route(dst, t.family)
	route.MTU = mtu
	route.Src = src
	if gw != nil {
		route.Gw = gw
		route.Scope = netlink.SCOPE_UNIVERSE
	}
	if ours != nil {
		route.Priority = ours.Priority
		if err := r.h.RouteReplace(route); err != nil {
			return false, fmt.Errorf("mtu: update route to %s mtu %d: %w", dst, mtu, err)
		}
		return true, nil
	}
	// Create exclusively: if someone added a route for the prefix since
	// we looked, the kernel refuses instead of us overwriting it.
	if err := r.h.RouteAdd(route); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return false, nil
		}
		return false, fmt.Errorf("mtu: add route to %s mtu %d: %w", dst, mtu, err)
	}
	return true, nil
}

// Remove deletes our host route to dst, never someone else's. Removing a
// route that does not exist is not an error.
func (r *Routes) Remove(dst netip.Addr) error {
	dst, family, err := hostAddr(dst)
	if err != nil {
		return fmt.Errorf("mtu: remove route: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	existing, err := r.hostRoutes(dst, family)
	if err != nil {
		return fmt.Errorf("mtu: remove route to %s: %w", dst, err)
	}
	for i := range existing {
		if r.isOurs(&existing[i]) {
			if err := r.del(&existing[i]); err != nil {
				return fmt.Errorf("mtu: remove route to %s: %w", dst, err)
			}
		}
	}
	return nil
}

// Flush removes every route of ours on the link, IPv4 and IPv6 (at daemon
// start, for what a previous run left, and at exit).
func (r *Routes) Flush() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	filter := &netlink.Route{LinkIndex: r.link, Protocol: RouteProtocol, Table: unix.RT_TABLE_MAIN}
	mask := netlink.RT_FILTER_OIF | netlink.RT_FILTER_PROTOCOL | netlink.RT_FILTER_TABLE
	var errs []error
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		routes, err := r.h.RouteListFiltered(family, filter, mask)
		if err != nil {
			errs = append(errs, fmt.Errorf("mtu: flush routes of link %d: list: %w", r.link, err))
			continue
		}
		for i := range routes {
			if !r.isOurs(&routes[i]) || !isHost(routes[i].Dst) {
				continue
			}
			if err := r.del(&routes[i]); err != nil {
				errs = append(errs, fmt.Errorf("mtu: flush routes of link %d: %s: %w", r.link, routes[i].Dst, err))
			}
		}
	}
	return errors.Join(errs...)
}

// hostRoutes lists the main-table routes for exactly the host prefix of
// dst, on any link, with any protocol and priority.
func (r *Routes) hostRoutes(dst netip.Addr, family int) ([]netlink.Route, error) {
	filter := &netlink.Route{Dst: hostPrefix(dst), Table: unix.RT_TABLE_MAIN}
	routes, err := r.h.RouteListFiltered(family, filter, netlink.RT_FILTER_DST|netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("list routes: %w", err)
	}
	return routes, nil
}

// gateway returns the gateway via which the kernel routes dst now if that
// route goes out of our link, else nil. Our own host route, if any, is
// what the lookup finds, so its gateway is kept.
func (r *Routes) gateway(dst netip.Addr) (net.IP, error) {
	got, err := r.h.RouteGetWithOptions(dst.AsSlice(), &netlink.RouteGetOptions{OifIndex: r.link})
	if err != nil {
		// No route at all via our link (e.g. the link is down): on-link.
		if errors.Is(err, unix.ENETUNREACH) || errors.Is(err, unix.EHOSTUNREACH) || errors.Is(err, unix.ENETDOWN) {
			return nil, nil
		}
		return nil, fmt.Errorf("route lookup: %w", err)
	}
	for _, g := range got {
		if g.LinkIndex == r.link && g.Gw != nil && !g.Gw.IsUnspecified() {
			return g.Gw, nil
		}
	}
	return nil, nil
}

// source returns the source address the kernel gives packets to dst
// through our link when no host route of ours is in the way, and whether
// any main-table route sends dst through our link at all. The covering
// route is the longest prefix on our link that is not a host route of
// ours; its prefsrc if it has one (IPv4 subnet routes do), else our
// address with the longest prefix holding dst or, for a route via a
// gateway, the gateway (as IPv4 picks for a route without prefsrc, and
// IPv6's longest-match rule does). nil: none fits; the kernel chooses.
func (r *Routes) source(t *table, dst netip.Addr) (net.IP, bool, error) {
	var best *netlink.Route
	bestBits := -1
	for i := range t.links {
		rt := &t.links[i]
		if rt.Type != unix.RTN_UNICAST {
			continue
		}
		bits := 0
		if rt.Dst != nil {
			p, ok := prefixOf(rt.Dst)
			if !ok || !p.Contains(dst) {
				continue
			}
			bits = p.Bits()
		}
		if bits > bestBits {
			best, bestBits = rt, bits
		}
	}
	if best == nil {
		return nil, false, nil
	}
	if best.Src != nil && !best.Src.IsUnspecified() {
		return best.Src, true, nil
	}
	target := dst
	if gw, ok := netip.AddrFromSlice(best.Gw); ok && !gw.IsUnspecified() {
		target = gw.Unmap()
	}
	if !t.read {
		addrs, err := r.h.AddrList(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: r.link}}, t.family)
		if err != nil {
			return nil, true, fmt.Errorf("list addresses: %w", err)
		}
		t.addrs, t.read = addrs, true
	}
	var src net.IP
	srcBits := -1
	for _, a := range t.addrs {
		if a.IPNet == nil || a.Flags&(unix.IFA_F_TENTATIVE|unix.IFA_F_DADFAILED) != 0 {
			continue
		}
		p, ok := prefixOf(a.IPNet)
		if !ok || !p.Contains(target) || p.Bits() <= srcBits {
			continue
		}
		src, srcBits = a.IP, p.Bits()
	}
	return src, true, nil
}

// prefixOf converts a route's or address's network (IPv4 possibly in
// 16-octet form) to a prefix.
func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	a = a.Unmap()
	ones, bits := n.Mask.Size()
	if bits == 128 && a.Is4() {
		ones -= 96
	}
	if bits == 0 || ones < 0 {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(a, ones).Masked(), true
}

func (r *Routes) isOurs(rt *netlink.Route) bool {
	return rt.Protocol == RouteProtocol && rt.LinkIndex == r.link && len(rt.MultiPath) == 0
}

func (r *Routes) route(dst netip.Addr, family int) *netlink.Route {
	return &netlink.Route{
		LinkIndex: r.link,
		Dst:       hostPrefix(dst),
		Protocol:  RouteProtocol,
		Table:     unix.RT_TABLE_MAIN,
		Type:      unix.RTN_UNICAST,
		Scope:     netlink.SCOPE_LINK,
		Family:    family,
	}
}

// del deletes exactly the listed route: protocol, link, scope, priority
// and gateway are all part of the match, so a concurrently added route of
// someone else's is not hit. A route already gone (ESRCH) is no error.
func (r *Routes) del(rt *netlink.Route) error {
	d := &netlink.Route{
		LinkIndex: rt.LinkIndex,
		Scope:     rt.Scope,
		Dst:       rt.Dst,
		Gw:        rt.Gw,
		Protocol:  rt.Protocol,
		Priority:  rt.Priority,
		Table:     rt.Table,
		Type:      rt.Type,
		Family:    rt.Family,
	}
	if err := r.h.RouteDel(d); err != nil && !errors.Is(err, unix.ESRCH) {
		return err
	}
	return nil
}

// hostAddr normalises dst and reports its route family.
func hostAddr(dst netip.Addr) (netip.Addr, int, error) {
	dst = dst.Unmap().WithZone("")
	switch {
	case !dst.IsValid():
		return dst, 0, errors.New("invalid destination address")
	case dst.IsUnspecified() || dst.IsMulticast():
		return dst, 0, fmt.Errorf("destination %s is not a unicast host", dst)
	case dst.Is4():
		return dst, netlink.FAMILY_V4, nil
	default:
		return dst, netlink.FAMILY_V6, nil
	}
}

func hostPrefix(a netip.Addr) *net.IPNet {
	ip := net.IP(a.AsSlice())
	return &net.IPNet{IP: ip, Mask: net.CIDRMask(a.BitLen(), a.BitLen())}
}

func isHost(n *net.IPNet) bool {
	if n == nil {
		return false
	}
	ones, bits := n.Mask.Size()
	return ones == bits && bits != 0
}
