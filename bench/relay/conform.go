package main

// The conforming relay (-conform): the ceiling of a driver that carries
// IPoIB's wire in software, as ipoibd on softib does. Between the same
// TUNs and UDP sockets as the plain relay, it does exactly the passes over
// the data such a driver cannot leave out, with ipoibd's own code for
// them, and nothing of a protocol (no headers, no acknowledgements):
//
//   - the wire carries standard IP packets (peers such as Linux's ipoib
//     take no virtio-net header and no partial checksum): a packet read
//     with a partial checksum is completed (offload.Complete), a TSO/USO
//     super-packet is cut into its segments (offload.Split), each a
//     datagram of a GSO train;
//   - every datagram's CRC-32 (the ICRC's polynomial, as softib hashes
//     it) is taken when it is sent and again when it is received;
//   - the receiver merges trains of TCP segments again (offload.Coalescer,
//     which verifies each one's checksum) and writes a lone packet with its
//     checksum complete, which the kernel verifies.
//
// A packet of up to 64 KiB (MTU 65520) goes as a train of 4096-octet
// datagrams, as in the plain relay; the receiver joins them by the IP
// length.

import (
	"hash/crc32"
	"runtime"
	"sync/atomic"
	"unsafe"

	"github.com/ipoibd/ipoibd/offload"
	"golang.org/x/sys/unix"
)

// crcSink keeps the CRCs, so that the compiler cannot leave them out. (A
// driver would carry them on the wire; the cost is the pass that takes
// them.)
var crcSink atomic.Uint32

// crc takes the CRC-32 of one datagram.
func crc(d []byte) { crcSink.Add(crc32.Update(0, crc32.IEEETable, d)) }

// crcEach takes the CRC of every seg-octet datagram of a train.
func crcEach(b []byte, seg int) {
	for len(b) > 0 {
		d := b[:min(seg, len(b))]
		crc(d)
		b = b[len(d):]
	}
}

// conformTUNToUDP reads the TUN and sends standard IP packets.
func conformTUNToUDP(tun, sock int) {
	runtime.LockOSThread()
	buf := make([]byte, bufSize)
	out := make([]byte, bufSize)
	s := newGSOSender(sock)
	for {
		n, err := unix.Read(tun, buf)
		if err != nil {
			transient(err, "TUN read")
			continue
		}
		var h offload.Hdr
		if err := h.Decode(buf[:n]); err != nil {
			dropped(err.Error())
			continue
		}
		pkt := buf[vnetHdrLen:n]
		if h.GSOType == offload.GSONone {
			if err := offload.Complete(h, pkt); err != nil {
				dropped(err.Error())
				continue
			}
			crcEach(pkt, segment)
			if len(pkt) > maxTrain {
				s.send(pkt[:maxTrain], segment)
				s.send(pkt[maxTrain:], segment)
			} else {
				s.send(pkt, segment)
			}
			continue
		}
		segs, err := offload.Split(h, pkt)
		if err != nil {
			dropped(err.Error())
			continue
		}
		// Trains of whole segments, each train within maxTrain and
		// maxSegments.
		size := segs.MaxLen()
		per := min(maxTrain/size, maxSegments)
		for k := 0; k < segs.Len(); k += per {
			off := 0
			for j := k; j < min(k+per, segs.Len()); j++ {
				l := segs.Put(j, out[off:])
				crc(out[off : off+l])
				off += l
			}
			s.send(out[:off], size)
		}
	}
}

// maxSegments is the kernel's UDP_MAX_SEGMENTS (64 since Linux 5.1).
const maxSegments = 64

// udpMsg is one sendmsg or recvmsg on sock: a header with one buffer and
// room for control messages.
type udpMsg struct {
	sock int
	msg  unix.Msghdr
	iov  unix.Iovec
	cmsg [64]byte
}

func (m *udpMsg) init(sock int) {
	m.sock = sock
	m.msg.Iov = &m.iov
	m.msg.SetIovlen(1)
}

// gsoSender sends GSO trains with their segment size in a control message.
type gsoSender struct{ udpMsg }

func newGSOSender(sock int) *gsoSender {
	s := &gsoSender{}
	s.init(sock)
	h := (*unix.Cmsghdr)(unsafe.Pointer(&s.cmsg[0]))
	h.Level = unix.SOL_UDP
	h.Type = unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	s.msg.Control = &s.cmsg[0]
	s.msg.SetControllen(unix.CmsgSpace(2))
	return s
}

// send sends b as datagrams of seg octets (the last may be shorter).
func (s *gsoSender) send(b []byte, seg int) {
	*(*uint16)(unsafe.Pointer(&s.cmsg[unix.CmsgLen(0)])) = uint16(seg)
	s.iov.Base = &b[0]
	s.iov.SetLen(len(b))
	for {
		_, _, errno := unix.Syscall(unix.SYS_SENDMSG, uintptr(s.sock), uintptr(unsafe.Pointer(&s.msg)), 0)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			transient(errno, "UDP send")
		}
		return
	}
}

// conformUDPToTUN receives trains and writes packets to the TUN: a train
// that is one packet (or its first part) as it is, a train of segments
// merged where they may be.
func conformUDPToTUN(sock, tun int) {
	runtime.LockOSThread()
	r := newGROReceiver(sock)
	w := newTUNWriter(tun)
	var gro offload.Coalescer
	data := make([]byte, bufSize)
	have := 0 // the first train of a packet, held until its end arrives
	for {
		n, seg := r.recv(data[have:])
		if n == 0 {
			continue
		}
		crcEach(data[have:have+n], seg)
		if have > 0 {
			if have+n == ipLen(data[:have]) {
				w.writePacket(data[:have+n])
				have = 0
				continue
			}
			copy(data, data[have:have+n]) // the end was lost
			have = 0
			dropped("packet without its end")
		}
		switch want := ipLen(data[:n]); {
		case want == n:
			w.writePacket(data[:n])
		case want > n && n == maxTrain && seg == segment:
			have = n
		case want == min(seg, n):
			// A train of segments, each a whole packet.
			for b := data[:n]; len(b) > 0; {
				p := b[:min(seg, len(b))]
				b = b[len(p):]
				if ipLen(p) != len(p) {
					dropped("segment that is not one packet")
					continue
				}
				if !gro.Add(p) {
					w.flush(&gro)
					if !gro.Add(p) {
						w.writePacket(p)
					}
				}
			}
			w.flush(&gro)
		default:
			dropped("train that starts no packet (its first part was lost?)")
		}
	}
}

// groReceiver reads GRO trains and their segment size.
type groReceiver struct{ udpMsg }

func newGROReceiver(sock int) *groReceiver {
	r := &groReceiver{}
	r.init(sock)
	return r
}

// recv reads one train into b: its length and segment size (its length
// when it is one datagram), or 0 after an error.
func (r *groReceiver) recv(b []byte) (n, seg int) {
	r.iov.Base = &b[0]
	r.iov.SetLen(len(b))
	r.msg.Control = &r.cmsg[0]
	r.msg.SetControllen(len(r.cmsg))
	got, _, errno := unix.Syscall(unix.SYS_RECVMSG, uintptr(r.sock), uintptr(unsafe.Pointer(&r.msg)), 0)
	if errno != 0 {
		transient(errno, "UDP receive")
		return 0, 0
	}
	n, seg = int(got), int(got)
	c := r.cmsg[:r.msg.Controllen]
	for len(c) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
		l := int(h.Len)
		if l < unix.SizeofCmsghdr || l > len(c) {
			break
		}
		if h.Level == unix.SOL_UDP && h.Type == unix.UDP_GRO && l >= unix.CmsgLen(4) {
			seg = int(*(*int32)(unsafe.Pointer(&c[unix.CmsgLen(0)])))
		}
		c = c[min(unix.CmsgSpace(l-unix.CmsgLen(0)), len(c)):]
	}
	return n, seg
}

// tunWriter writes a virtio-net header and the parts of a packet with
// one writev.
type tunWriter struct {
	tun int
	hdr [vnetHdrLen]byte
	iov [1 + offload.MaxParts]unix.Iovec
}

func newTUNWriter(tun int) *tunWriter { return &tunWriter{tun: tun} }

// writePacket writes one packet, its checksum complete (a zero header:
// no offload asked of the kernel).
func (w *tunWriter) writePacket(p []byte) {
	w.hdr = [vnetHdrLen]byte{}
	w.writev(p)
}

// flush writes what gro holds, merged.
func (w *tunWriter) flush(gro *offload.Coalescer) {
	h, parts := gro.Flush()
	if len(parts) == 0 {
		return
	}
	h.Encode(w.hdr[:])
	w.writev(parts...)
}

func (w *tunWriter) writev(parts ...[]byte) {
	w.iov[0].Base = &w.hdr[0]
	w.iov[0].SetLen(vnetHdrLen)
	for i, p := range parts {
		w.iov[1+i].Base = &p[0]
		w.iov[1+i].SetLen(len(p))
	}
	for {
		_, _, errno := unix.Syscall(unix.SYS_WRITEV, uintptr(w.tun), uintptr(unsafe.Pointer(&w.iov[0])), uintptr(1+len(parts)))
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			transient(errno, "TUN write")
		}
		return
	}
}
