package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// awaitUnderlay returns once softib's underlay address a is on an
// interface of the daemon's namespace and usable (IPv6: past duplicate
// address detection), waiting at most bound for it: a unit started at boot
// before DHCP or networkd has put it there comes up with the network
// instead of failing at once and running into systemd's start limit. It
// watches the kernel's address events (no polling) and logs once when it
// has to wait. bound 0 waits not at all: softib then refuses the address
// itself.
func awaitUnderlay(a netip.Addr, bound time.Duration, log *slog.Logger, status func(string)) error {
	if bound <= 0 || a.IsLoopback() { // all of 127/8 and ::1 are lo's
		return nil
	}
	updates := make(chan netlink.AddrUpdate, 64)
	done := make(chan struct{})
	defer func() {
		close(done)
		go func() { // until the watch's goroutine, which sends here, ends
			for range updates {
			}
		}()
	}()
	watchErr := make(chan error, 1)
	// Subscribed before the addresses are listed: one that appears
	// between the two is not missed.
	err := netlink.AddrSubscribeWithOptions(updates, done, netlink.AddrSubscribeOptions{
		ErrorCallback: func(err error) {
			select {
			case watchErr <- err:
			default:
			}
		},
	})
	if err != nil {
		return fmt.Errorf("--underlay %s: watching the addresses: %w", a, err)
	}
	have, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("--underlay %s: listing the addresses: %w", a, err)
	}
	for _, ad := range have {
		if usable(ad.IPNet, ad.Flags, a) {
			return nil
		}
	}
	log.Info("waiting for the underlay address to appear on an interface", "underlay", a, "at_most", bound)
	status(fmt.Sprintf("waiting up to %v for the underlay address %s", bound, a))
	deadline := time.NewTimer(bound)
	defer deadline.Stop()
	start := time.Now()
	for {
		select {
		case u, ok := <-updates:
			if !ok {
				why := errors.New("netlink ended the subscription")
				select {
				case why = <-watchErr:
				default:
				}
				return fmt.Errorf("--underlay %s: watching the addresses: %w", a, why)
			}
			if u.NewAddr && usable(&u.LinkAddress, u.Flags, a) {
				log.Info("underlay address is here", "underlay", a, "waited", time.Since(start).Round(time.Millisecond))
				return nil
			}
		case <-deadline.C:
			return fmt.Errorf("underlay address %s did not appear on any interface within %v (--underlay-wait): is the network that gives it up?", a, bound)
		}
	}
}

// usable tells whether the address ipn with flags (IFA_F_*) is a and can
// be bound: not an IPv6 address still in, or failed by, duplicate address
// detection.
func usable(ipn *net.IPNet, flags int, a netip.Addr) bool {
	if ipn == nil {
		return false
	}
	ip, ok := netip.AddrFromSlice(ipn.IP)
	if !ok || ip.Unmap() != a {
		return false
	}
	return flags&(unix.IFA_F_TENTATIVE|unix.IFA_F_DADFAILED) == 0
}
