package main

import (
	"fmt"
	"net"
	"testing"

	"github.com/ipoibd/ipoibd/internal/testnet"
	"golang.org/x/sys/unix"
)

// TestBadInputIsCountedNotFatal feeds the daemon malformed IP from its own
// kernel (through the TUN) and malformed datagrams from the fabric: each is
// dropped and counted under its cause, and the daemon keeps serving.
func TestBadInputIsCountedNotFatal(t *testing.T) {
	c := newCluster(t, "bad", 2)
	c.start(1)
	c.start(2)
	c.ping(1, c.ip4(2), 1)
	before1, before2 := c.stats(1), c.stats(2)

	// Into h1's TUN: packets the kernel hands over as IP but that are not.
	tunGarbage := [][]byte{
		{0x00, 0x01, 0x02, 0x03},                  // IP version 0
		{0x45, 0x00, 0x00, 0x14, 0x00},            // IPv4 header cut short
		make([]byte, 30),                          // zeros
		append([]byte{0x60}, make([]byte, 20)...), // IPv6 header cut short
	}
	testnet.InNamed(t, c.host(1), func() {
		ifc, err := net.InterfaceByName("ib0")
		if err != nil {
			t.Fatal(err)
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		for _, p := range tunGarbage {
			to := &unix.SockaddrLinklayer{Ifindex: ifc.Index, Protocol: htons(unix.ETH_P_IP)}
			if err := unix.Sendto(fd, p, 0, to); err != nil {
				t.Fatalf("AF_PACKET send into ib0: %v", err)
			}
		}
	})
	// At h2's fabric port: datagrams that are not RoCEv2 packets.
	fabricGarbage := [][]byte{
		{0x01},
		make([]byte, 11),
		append([]byte{0x64, 0x00, 0xff, 0xff, 0, 0, 0, 1, 0, 0, 0, 0}, make([]byte, 30)...), // BTH, bad ICRC
	}
	testnet.InNamed(t, c.host(1), func() {
		conn, err := net.Dial("udp", c.underlay(2)+":4791")
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		for _, p := range fabricGarbage {
			if _, err := conn.Write(p); err != nil {
				t.Fatal(err)
			}
		}
	})
	c.ping(1, c.ip4(2), 2) // still serving, both ways
	c.ping(2, c.ip4(1), 2)

	after1, after2 := c.stats(1), c.stats(2)
	if d := after1["tx_drop_malformed"] - before1["tx_drop_malformed"]; d != uint64(len(tunGarbage)) {
		t.Errorf("h1 tx_drop_malformed grew by %d, want %d", d, len(tunGarbage))
	}
	fabric := after2["dev_rx_drop_malformed"] + after2["dev_rx_drop_bad_icrc"] -
		before2["dev_rx_drop_malformed"] - before2["dev_rx_drop_bad_icrc"]
	if fabric != uint64(len(fabricGarbage)) {
		t.Errorf("h2 fabric drops (malformed + bad ICRC) grew by %d, want %d", fabric, len(fabricGarbage))
	}
	t.Logf("h2 drops: %s", fmt.Sprint(map[string]uint64{
		"malformed": after2["dev_rx_drop_malformed"], "bad_icrc": after2["dev_rx_drop_bad_icrc"]}))
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
