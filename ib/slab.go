package ib

import (
	"fmt"
	"syscall"
)

// NewSlab maps size octets of anonymous memory outside the Go heap, so that a
// hardware provider may hand it to the adapter and the garbage collector
// never scans or moves packet buffers. The pages are faulted in at once
// (MAP_POPULATE), as registering them with an adapter pins them anyway:
// left lazy, a software provider's resident memory crept up by a page
// each time a slot was first used (a soak's RSS grew for minutes, #27),
// so that no ceiling showed before the slab was whole.
func NewSlab(size int) (*Slab, error) {
	return newSlab(size, syscall.MAP_POPULATE)
}

// NewSlabOnDemand maps size octets as NewSlab does, but leaves the pages
// to be faulted in when first used: for the small rings of many
// interfaces (pods' P_Key children), most of them quiet, whose memory
// must cost nothing until used. A provider that pins what it registers
// (verbs) faults them in at registration anyway; on softib a ring's
// resident memory grows to its size at most, the pages its traffic
// touched.
func NewSlabOnDemand(size int) (*Slab, error) {
	return newSlab(size, 0)
}

func newSlab(size, flags int) (*Slab, error) {
	if size <= 0 {
		return nil, fmt.Errorf("slab: size %d must be positive", size)
	}
	mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE|flags)
	if err != nil {
		return nil, fmt.Errorf("slab: mmap %d octets: %w", size, err)
	}
	return &Slab{mem: mem}, nil
}

// Close unmaps the slab. Every MR over it must be closed first.
func (s *Slab) Close() error {
	if s.mem == nil {
		return nil
	}
	err := syscall.Munmap(s.mem)
	s.mem = nil
	return err
}
