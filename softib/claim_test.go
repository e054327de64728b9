package softib

import (
	"errors"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/internal/testutil"
)

// TestSecondDeviceOnAnAddressIsRefused: a second device on an underlay
// address and port already in use fails with one line naming the address,
// while the first keeps its unicast traffic; other addresses on the port
// still share it (the multicast sockets), and a closed device frees its
// address.
func TestSecondDeviceOnAnAddressIsRefused(t *testing.T) {
	port := testutil.Port(14850)
	a := newHost(t, "127.0.0.1", port)
	b := newHost(t, "127.0.0.2", port)
	qa, qb := connect(t, ib.RC, a, b, 7, 7)

	for _, addr := range []string{"127.0.0.2", "127.0.0.1"} {
		d, err := Open(Config{Addr: netip.MustParseAddr(addr), Port: port})
		if err == nil {
			d.Close()
			t.Fatalf("a second device on %s:%d opened", addr, port)
		}
		if !errors.Is(err, ErrInUse) || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), addr+":"+strconv.Itoa(int(port))) {
			t.Fatalf("second device on %s: %q, want one line naming the address and ErrInUse", addr, err)
		}
	}

	// The first device still gets what is sent to it.
	const n = 64
	for i := range n {
		if _, err := qb.PostRecv([]ib.RecvWR{{ID: uint64(i), SGE: b.slot(i, 4096)}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		s := a.slot(i, 4096)
		testutil.Fill(a.bytes(s), i)
		if _, err := qa.PostSend([]ib.SendWR{{ID: uint64(i), SGE: s}}); err != nil {
			t.Fatal(err)
		}
	}
	for i, wc := range poll(t, b.rcq, n, 10*time.Second) {
		if wc.Status != ib.WCSuccess || wc.ID != uint64(i) {
			t.Fatalf("message %d: %+v", i, wc)
		}
	}

	// A closed device releases its address.
	c, err := Open(Config{Addr: netip.MustParseAddr("127.0.0.3"), Port: port})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	c, err = Open(Config{Addr: netip.MustParseAddr("127.0.0.3"), Port: port})
	if err != nil {
		t.Fatalf("reopening a closed device's address: %v", err)
	}
	c.Close()
}
