package softib

import (
	"net"

	"golang.org/x/sys/unix"

	"github.com/ipoibd/ipoibd/ib"
)

var _ ib.PortStater = (*Device)(nil)

// PortActive reports whether the port is up: the underlay interface is up
// and has a carrier, as an InfiniBand port is ACTIVE only with its link.
func (d *Device) PortActive() bool {
	l, err := d.nl.LinkByIndex(d.fab.ifindex)
	if err != nil {
		return false
	}
	a := l.Attrs()
	return a.Flags&net.FlagUp != 0 && a.RawFlags&unix.IFF_LOWER_UP != 0
}
