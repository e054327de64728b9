package bond

import (
	"net/netip"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ipoib"
)

// What the daemon asks of an interface, answered for all ports: the
// active port's view where a port has its own (the link address, the
// neighbors it sends to), every port's where each has some (connections,
// counters).

// Name is the interface's name now.
func (b *Bond) Name() string { return b.Active().Name() }

// PKey is the interface's partition, the same on every port.
func (b *Bond) PKey() ib.PKey { return b.legs[0].iface.PKey() }

// LinkAddr is the active port's link address.
func (b *Bond) LinkAddr() ib.LinkAddr { return b.Active().LinkAddr() }

// InNetns runs f in the interface's network namespace.
func (b *Bond) InNetns(f func() error) error { return b.nd.InNetns(f) }

// Closing is closed when Close begins.
func (b *Bond) Closing() <-chan struct{} { return b.done }

// Show is the active port's description, with every port and the
// failovers.
func (b *Bond) Show() ipoib.Info {
	active := b.Active()
	var info ipoib.Info
	var ports []ipoib.PortInfo
	for _, i := range b.Legs() {
		li := i.Show()
		if i == active {
			info = li
		}
		ports = append(ports, li.Ports...)
	}
	info.Ports = ports
	n, took := b.Failovers()
	info.Failovers, info.LastFailoverMs = n, float64(took.Microseconds())/1000
	return info
}

// Neighbors are the active port's neighbors, then the rails' Rail entries
// (state RAIL: the same addresses at their other port).
func (b *Bond) Neighbors() []ipoib.NeighInfo {
	active := b.Active()
	out := active.Neighbors()
	for _, i := range b.Legs() {
		if i == active || !i.Rail() {
			continue
		}
		for _, n := range i.Neighbors() {
			if n.State == ipoib.RailState {
				out = append(out, n)
			}
		}
	}
	return out
}

// Connections are every port's connections.
func (b *Bond) Connections() []ipoib.ConnInfo {
	var out []ipoib.ConnInfo
	for _, i := range b.Legs() {
		out = append(out, i.Connections()...)
	}
	return out
}

// Stats are every port's counters summed, then the failovers: how many,
// and the time they took in all (µs).
func (b *Bond) Stats() []ib.Counter {
	var out []ib.Counter
	index := map[string]int{}
	for _, i := range b.Legs() {
		for _, c := range i.Stats() {
			if k, ok := index[c.Name]; ok {
				out[k].Value += c.Value
				continue
			}
			index[c.Name] = len(out)
			out = append(out, c)
		}
	}
	n := b.failovers.Load()
	took := uint64(b.tookSumNs.Load() / 1000)
	names := CounterNames()
	return append(out, ib.Counter{Name: names[0], Value: n}, ib.Counter{Name: names[1], Value: took})
}

// CounterNames are the bond's own counters, after its ports' in Stats.
func CounterNames() []string { return []string{"failovers", "failover_time_us"} }

// SetMode switches every port's interface.
func (b *Bond) SetMode(m ipoib.Mode) error {
	for _, i := range b.Legs() {
		if err := i.SetMode(m); err != nil {
			return err
		}
	}
	return nil
}

// FlushNeighbors forgets ip (every neighbor if invalid) on every port.
func (b *Bond) FlushNeighbors(ip netip.Addr) int {
	n := 0
	for _, i := range b.Legs() {
		n += i.FlushNeighbors(ip)
	}
	return n
}
