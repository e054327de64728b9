package ib

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// NewSlab maps size octets of anonymous memory outside the Go heap, so that a
// hardware provider may hand it to the adapter and the garbage collector
// never scans or moves packet buffers. The pages are faulted in at once,
// as registering them with an adapter pins them anyway: left lazy, a
// software provider's resident memory crept up by a page each time a slot
// was first used (a soak's RSS grew for minutes, #27), so that no ceiling
// showed before the slab was whole.
//
// A slab of 2 MiB or more asks for transparent huge pages (where the
// kernel offers them: THP "always" or "madvise"). Its slots rotate through
// tens of MiB, and with 4 KiB pages every copy into or out of a slot,
// ours or the kernel's, missed the TLB on each page it touched.
func NewSlab(size int) (*Slab, error) {
	return newSlab(size, true)
}

// NewSlabOnDemand maps size octets as NewSlab does, but leaves the pages
// to be faulted in when first used: for the small rings of many
// interfaces (pods' P_Key children), most of them quiet, whose memory
// must cost nothing until used. A provider that pins what it registers
// (verbs) faults them in at registration anyway; on softib a ring's
// resident memory grows to its size at most, the pages its traffic
// touched. Its pages are small ones, so that a touch costs 4 KiB.
func NewSlabOnDemand(size int) (*Slab, error) {
	return newSlab(size, false)
}

// hugePage is a transparent huge page (x86-64, and arm64 with 4 KiB pages).
const hugePage = 2 << 20

func newSlab(size int, populate bool) (*Slab, error) {
	if size <= 0 {
		return nil, fmt.Errorf("slab: size %d must be positive", size)
	}
	huge := populate && size >= hugePage
	span := size
	if huge {
		span += hugePage // room to start on a huge page boundary
	}
	base, err := unix.MmapPtr(-1, 0, nil, uintptr(span), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("slab: mmap %d octets: %w", size, err)
	}
	start := base
	if huge {
		skip := int(-uintptr(base) & (hugePage - 1))
		start = unsafe.Add(base, skip)
		trim(base, skip)
		trim(unsafe.Add(start, size), span-skip-size)
	}
	mem := unsafe.Slice((*byte)(start), size)
	if huge {
		_ = unix.Madvise(mem, unix.MADV_HUGEPAGE) // best effort: THP may be off
	}
	if populate && unix.Madvise(mem, unix.MADV_POPULATE_WRITE) != nil {
		// Kernels before 5.14 lack MADV_POPULATE_WRITE.
		for i := 0; i < len(mem); i += unix.Getpagesize() {
			mem[i] = 0
		}
	}
	return &Slab{mem: mem}, nil
}

// trim unmaps n octets at addr, the unused ends of an aligned mapping.
func trim(addr unsafe.Pointer, n int) {
	if n > 0 {
		_ = unix.MunmapPtr(addr, uintptr(n))
	}
}

// Close unmaps the slab. Every MR over it must be closed first.
func (s *Slab) Close() error {
	if s.mem == nil {
		return nil
	}
	err := unix.MunmapPtr(unsafe.Pointer(&s.mem[0]), uintptr(len(s.mem)))
	s.mem = nil
	return err
}
