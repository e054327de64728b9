package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/ipoibd/ipoibd/softib/wire"
)

// linkTypeInfiniBand is pcap's LINKTYPE_INFINIBAND: records from the LRH
// through the VCRC.
const linkTypeInfiniBand = 247

// capture writes QP1 frames to a pcap file, one write per record, so
// that a reader sees whole records while the forwarder runs.
type capture struct {
	mu  sync.Mutex
	f   *os.File
	rec []byte
	fr  wire.IBFrame
	err error
}

func newCapture(path string) (*capture, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("-capture: %w", err)
	}
	var h [24]byte
	binary.LittleEndian.PutUint32(h[0:], 0xa1b2c3d4)
	binary.LittleEndian.PutUint16(h[4:], 2)
	binary.LittleEndian.PutUint16(h[6:], 4)
	binary.LittleEndian.PutUint32(h[16:], 65535)
	binary.LittleEndian.PutUint32(h[20:], linkTypeInfiniBand)
	if _, err := f.Write(h[:]); err != nil {
		f.Close()
		return nil, fmt.Errorf("-capture: %w", err)
	}
	return &capture{f: f, rec: make([]byte, 0, 16+8192)}, nil
}

// tap is the forwarder's tap: it keeps the frames to QP1 (MADs).
func (c *capture) tap(b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil || wire.ParseIBFrame(b, &c.fr) != nil || c.fr.Packet.BTH.DestQP != 1 {
		return
	}
	now := time.Now()
	r := c.rec[:16]
	binary.LittleEndian.PutUint32(r[0:], uint32(now.Unix()))
	binary.LittleEndian.PutUint32(r[4:], uint32(now.Nanosecond()/1000))
	binary.LittleEndian.PutUint32(r[8:], uint32(len(b)))
	binary.LittleEndian.PutUint32(r[12:], uint32(len(b)))
	r = append(r, b...)
	_, c.err = c.f.Write(r)
	c.rec = r[:0]
}

func (c *capture) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.f.Close()
}
