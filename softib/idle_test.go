package softib

import (
	"net"
	"net/netip"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib/ibqueue"
	"github.com/ipoibd/ipoibd/internal/testutil"
)

// inSyscalls returns how many goroutines are in a system call (or cgo).
func inSyscalls() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines/not-in-go:goroutines"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestIdleDeviceHoldsNoThread: an idle device's receive goroutine waits
// in the Go runtime's poller, not in a blocking epoll_wait. A goroutine in
// a system call keeps its P, and while one does the runtime's sysmon
// thread naps only 20 µs at a time: with a ping every 10 ms that was half
// of the daemon's CPU (BENCHMARKS.md, "CPU and wake-ups per ping").
func TestIdleDeviceHoldsNoThread(t *testing.T) {
	before := inSyscalls()
	addr := netip.AddrPortFrom(netip.MustParseAddr("127.88.96.1"), testutil.Port(14795))
	d, err := Open(Config{Addr: addr.Addr(), Port: addr.Port()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	// A datagram the device drops as malformed: once it is counted, the
	// receive goroutine runs and has gone back to its wait.
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for CounterValue(d.Counters(), ibqueue.DropMalformed.Name()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the device never received the datagram")
		}
		time.Sleep(time.Millisecond)
	}
	// The fewest of many samples leaves out another goroutine's passing
	// system call.
	least := ^uint64(0)
	for range 100 {
		least = min(least, inSyscalls())
		time.Sleep(time.Millisecond)
	}
	if least > before {
		t.Fatalf("%d goroutines in system calls with an idle device open, %d before it", least, before)
	}
}
