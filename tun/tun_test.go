package tun

import (
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/internal/testnet"
	"github.com/ipoibd/ipoibd/offload"
	"golang.org/x/sys/unix"
)

// openIn opens a TUN tun0 with cfg in host 0 of a fresh network.
func openIn(t *testing.T, cfg Config) (*Device, *testnet.Net) {
	t.Helper()
	n := testnet.New(t, testnet.Config{Hosts: 1})
	var d *Device
	n.In(0, func() {
		var err error
		cfg.Name, cfg.MTU = "tun0", 65520
		cfg.Addrs = []netip.Prefix{netip.MustParsePrefix("192.168.50.1/24")}
		if d, err = Open(cfg); err != nil {
			t.Fatal(err)
		}
	})
	t.Cleanup(func() { _ = d.Close() })
	return d, n
}

// sendUDP sends one datagram from source port sport into the TUN's subnet,
// from inside the TUN's namespace.
func sendUDP(t *testing.T, n *testnet.Net, sport int, payload []byte) {
	t.Helper()
	n.In(0, func() {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		if err := unix.Bind(fd, &unix.SockaddrInet4{Port: sport}); err != nil {
			t.Fatal(err)
		}
		if err := unix.Sendto(fd, payload, 0, &unix.SockaddrInet4{Port: 9, Addr: [4]byte{192, 168, 50, 2}}); err != nil {
			t.Fatal(err)
		}
	})
}

// With several queues the kernel spreads flows over them: each queue's
// reader sees packets, and each flow stays on one queue.
func TestQueuesSpreadFlows(t *testing.T) {
	d, n := openIn(t, Config{Queues: 2, Offload: true})
	if d.Queues() != 2 {
		t.Fatalf("%d queues, want 2", d.Queues())
	}
	type seen struct{ queue, sport int }
	got := make(chan seen, 256)
	var wg sync.WaitGroup
	for q := range d.Queues() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 65535)
			var h offload.Hdr
			for {
				n, err := d.Read(q, buf, &h)
				if err != nil {
					return // closed
				}
				if n >= 28 && buf[9] == unix.IPPROTO_UDP && buf[23] == 9 {
					got <- seen{q, int(buf[20])<<8 | int(buf[21])}
				}
			}
		}()
	}
	const flows, each = 16, 3
	for f := range flows {
		for range each {
			sendUDP(t, n, 40000+f, []byte("queue test"))
		}
	}
	perQueue := map[int]int{}
	queueOf := map[int]int{}
	timeout := time.After(5 * time.Second)
	for range flows * each {
		select {
		case s := <-got:
			perQueue[s.queue]++
			if q, ok := queueOf[s.sport]; ok && q != s.queue {
				t.Errorf("flow from port %d read on queues %d and %d", s.sport, q, s.queue)
			}
			queueOf[s.sport] = s.queue
		case <-timeout:
			t.Fatalf("only %v packets read", perQueue)
		}
	}
	if perQueue[0] == 0 || perQueue[1] == 0 {
		t.Errorf("packets per queue %v: 16 flows all on one queue", perQueue)
	}
	// Close wakes every blocked reader.
	_ = d.Close()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not wake the readers")
	}
}

// With offloads on, the kernel hands over one UDP_SEGMENT send as one
// super-packet with its virtio-net header; offload.Split gets the
// datagrams back. Without, each arrives whole.
func TestReadSuperPacket(t *testing.T) {
	for _, tc := range []struct {
		name    string
		offload bool
	}{{"offload", true}, {"no offload", false}} {
		t.Run(tc.name, func(t *testing.T) {
			d, n := openIn(t, Config{Offload: tc.offload})
			tso, uso := d.Offloads()
			if tso != tc.offload {
				t.Fatalf("Offloads() tso %v, want %v", tso, tc.offload)
			}
			payload := make([]byte, 5*1000+17)
			n.In(0, func() {
				fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
				if err != nil {
					t.Fatal(err)
				}
				defer unix.Close(fd)
				if err := unix.SetsockoptInt(fd, unix.SOL_UDP, unix.UDP_SEGMENT, 1000); err != nil {
					t.Fatal(err)
				}
				if err := unix.Sendto(fd, payload, 0, &unix.SockaddrInet4{Port: 9, Addr: [4]byte{192, 168, 50, 2}}); err != nil {
					t.Fatal(err)
				}
			})
			buf := make([]byte, 65535)
			var h offload.Hdr
			datagrams := 0
			for datagrams < 6 {
				k, err := d.Read(0, buf, &h)
				if err != nil {
					t.Fatal(err)
				}
				if k < 28 || buf[9] != unix.IPPROTO_UDP {
					continue // the kernel's own (IPv6 router solicitations, ...)
				}
				switch {
				case h.GSOType == offload.GSOUDPL4:
					if !uso {
						t.Fatal("a USO super-packet although USO is off")
					}
					segs, err := offload.Split(h, buf[:k])
					if err != nil {
						t.Fatal(err)
					}
					datagrams += segs.Len()
				case h.GSOType == offload.GSONone:
					if tc.offload && uso {
						t.Fatalf("datagram of %d octets read whole with USO on", k)
					}
					datagrams++
				default:
					t.Fatalf("GSO type %d", h.GSOType)
				}
			}
			if datagrams != 6 {
				t.Errorf("%d datagrams, want 6", datagrams)
			}
		})
	}
}

// Writes the kernel cannot take are errors, never panics: too many parts
// for one writev, a GSO header on a packet too short for it.
func TestWriteErrors(t *testing.T) {
	d, _ := openIn(t, Config{Offload: true})
	if _, err := d.WriteGSO(offload.Hdr{}, make([][]byte, maxParts+1)); err == nil {
		t.Error("WriteGSO took more parts than it has room for")
	}
	_, err := d.WriteGSO(offload.Hdr{Flags: offload.FlagNeedsCsum, GSOType: offload.GSOTCPv4, GSOSize: 100, CsumStart: 20, CsumOffset: 16, HdrLen: 40}, [][]byte{{0x45, 0, 0, 20}})
	if err == nil {
		t.Error("the kernel took a GSO write of 4 octets")
	}
}

// TestNoQueue: the device has the noqueue root qdisc and no other, single
// or multiqueue: the default (mq with a pfifo_fast per transmit queue)
// costs 96 MiB of kernel memory per TUN at our txqueuelen. Packets
// still reach the reader.
func TestNoQueue(t *testing.T) {
	for _, queues := range []int{2, 1} {
		d, n := openIn(t, Config{Queues: queues})
		qs, err := d.Netlink().QdiscList(d.link)
		if err != nil {
			t.Fatal(err)
		}
		var kinds []string
		for _, q := range qs {
			kinds = append(kinds, q.Type())
		}
		if len(kinds) != 1 || kinds[0] != "noqueue" {
			t.Errorf("%d queues: qdiscs %v, want [noqueue]", queues, kinds)
		}
		if queues > 1 {
			continue // which queue a packet takes is the kernel's choice
		}
		sendUDP(t, n, 4000, []byte("through noqueue"))
		buf := make([]byte, 65535)
		var h offload.Hdr
		for {
			got, err := d.Read(0, buf, &h)
			if err != nil {
				t.Fatal(err)
			}
			if got >= 28 && buf[9] == unix.IPPROTO_UDP && buf[23] == 9 {
				break
			}
		}
	}
}
