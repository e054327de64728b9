package ib

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// resident counts the slab's pages in memory (mincore).
func resident(t *testing.T, b []byte) int {
	t.Helper()
	page := unix.Getpagesize()
	vec := make([]byte, (len(b)+page-1)/page)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatalf("mincore: %v", errno)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

// hugeKiB is the AnonHugePages of the mapping holding b, from
// /proc/self/smaps.
func hugeKiB(t *testing.T, b []byte) int {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	addr := uintptr(unsafe.Pointer(&b[0]))
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		var lo, hi uintptr
		if n, _ := fmt.Sscanf(line, "%x-%x", &lo, &hi); n == 2 && strings.Contains(line, " ") {
			in = lo <= addr && addr < hi
			continue
		}
		var kib int
		if n, _ := fmt.Sscanf(line, "AnonHugePages: %d kB", &kib); n == 1 && in {
			return kib
		}
	}
	t.Fatalf("no mapping holds %#x in /proc/self/smaps", addr)
	return 0
}

// thpOffered: the kernel backs madvised memory with huge pages.
func thpOffered() bool {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	return err == nil && (strings.Contains(string(b), "[always]") || strings.Contains(string(b), "[madvise]"))
}

func TestSlabLayout(t *testing.T) {
	page := unix.Getpagesize()
	for _, tc := range []struct {
		name      string
		size      int
		onDemand  bool
		aligned   bool // starts on a huge page boundary
		populated bool // every page resident before first use
	}{
		{"the port's slab, huge pages", 52 << 20, false, true, true},
		{"a slab smaller than a huge page", 1 << 20, false, false, true},
		{"a size that is no multiple of a huge page", 2<<20 + 3*4096 + 5, false, true, true},
		{"a child's rings, on demand", 3 << 20, true, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			newSlab := NewSlab
			if tc.onDemand {
				newSlab = NewSlabOnDemand
			}
			s, err := newSlab(tc.size)
			if err != nil {
				t.Fatal(err)
			}
			b := s.Bytes()
			if len(b) != tc.size {
				t.Fatalf("%d octets, want %d", len(b), tc.size)
			}
			if aligned := uintptr(unsafe.Pointer(&b[0]))%hugePage == 0; tc.aligned && !aligned {
				t.Errorf("starts at %p, not on a huge page boundary", &b[0])
			}
			pages := (tc.size + page - 1) / page
			switch n := resident(t, b); {
			case tc.populated && n != pages:
				t.Errorf("%d of %d pages resident before use, want all", n, pages)
			case !tc.populated && n != 0:
				t.Errorf("%d pages resident before use, want none", n)
			}
			switch huge := hugeKiB(t, b); {
			case tc.aligned && thpOffered() && huge == 0:
				t.Error("no huge pages, though the kernel offers them")
			case !tc.aligned && huge != 0:
				t.Errorf("%d KiB in huge pages, want small pages", huge)
			}
			b[0], b[len(b)-1] = 1, 2 // both ends are mapped
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if s.Bytes() != nil {
				t.Error("Bytes after Close")
			}
		})
	}
}
