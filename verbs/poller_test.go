package verbs

import (
	"encoding/binary"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The watcher wakes drain through the runtime poller, each time the fd
// becomes readable, and stop ends it; the fd itself stays open.
func TestWatchFD(t *testing.T) {
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		t.Skipf("eventfd: %v", err)
	}
	defer unix.Close(efd)
	got := make(chan uint64, 16)
	drain := func() bool {
		var b [8]byte
		for {
			if _, err := unix.Read(efd, b[:]); err != nil {
				return err != unix.EAGAIN
			}
			got <- binary.NativeEndian.Uint64(b[:])
		}
	}
	w, err := watchFD(efd, "test eventfd", drain)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []uint64{3, 5} {
		var b [8]byte
		binary.NativeEndian.PutUint64(b[:], n)
		if _, err := unix.Write(efd, b[:]); err != nil {
			t.Fatal(err)
		}
		select {
		case v := <-got:
			if v != n {
				t.Fatalf("drain read %d, want %d", v, n)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no wakeup after writing %d", n)
		}
	}
	w.stop()
	if _, err := unix.FcntlInt(uintptr(efd), unix.F_GETFD, 0); err != nil {
		t.Fatalf("stop closed the caller's fd: %v", err)
	}
	if fl, _ := unix.FcntlInt(uintptr(efd), unix.F_GETFL, 0); fl&unix.O_NONBLOCK == 0 {
		t.Fatal("the fd was not made non-blocking")
	}
}
