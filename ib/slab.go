package ib

import (
	"fmt"
	"syscall"
)

// NewSlab maps size octets of anonymous memory outside the Go heap, so that a
// hardware provider may hand it to the adapter and the garbage collector
// never scans or moves packet buffers.
func NewSlab(size int) (*Slab, error) {
	if size <= 0 {
		return nil, fmt.Errorf("slab: size %d must be positive", size)
	}
	mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
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
