// Command verbsrelay is the ceiling of a TUN driver over verbs, as
// bench/relay is over UDP: each TUN read (its virtio-net header, as
// offload.Hdr encodes it, and a packet of up to 64 KiB) goes as one RC
// SEND on the verbs provider, and the peer writes what it receives to its
// TUN as it came. No IPoIB: no neighbors, no CM (the two ends swap QPN and GID
// through files), no cutting of super-packets, no checksums computed. It
// uses ipoibd's own tun and verbs packages, so what it leaves out is
// exactly ipoibd's work above them. One goroutine reads the TUN and posts;
// the receive CQ's handler writes to the TUN and posts the buffer again.
//
//	verbsrelay -device rxe0 -tun vr0 -me /tmp/a -peer /tmp/b
package main

import (
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/offload"
	"github.com/ipoibd/ipoibd/tun"
	"github.com/ipoibd/ipoibd/verbs"
)

const (
	slotSize = 72 << 10 // a header and a 64 KiB packet
	numRecv  = 64
	numSend  = 64
)

func main() {
	device := flag.String("device", "", "RDMA device, e.g. rxe0")
	tunName := flag.String("tun", "vr0", "TUN interface to make")
	mtu := flag.Int("mtu", 65520, "TUN MTU")
	me := flag.String("me", "", "file to write this end's QPN and GID to")
	peer := flag.String("peer", "", "file to read the other end's QPN and GID from (waited for)")
	flag.Parse()
	if err := run(*device, *tunName, *mtu, *me, *peer); err != nil {
		fmt.Fprintln(os.Stderr, "verbsrelay:", err)
		os.Exit(1)
	}
}

func run(device, tunName string, mtu int, me, peer string) error {
	if device == "" || me == "" || peer == "" {
		return errors.New("-device, -me and -peer are required")
	}
	d, err := verbs.Open(verbs.Config{Device: device, Port: 1, GIDIndex: -1})
	if err != nil {
		return err
	}
	defer d.Close()
	slab, err := ib.NewSlab(slotSize * (numRecv + numSend))
	if err != nil {
		return err
	}
	mr, err := d.RegisterMemory(slab)
	if err != nil {
		return err
	}
	scq, err := d.CreateCQ(numSend)
	if err != nil {
		return err
	}
	rcq, err := d.CreateCQ(numRecv)
	if err != nil {
		return err
	}
	qp, err := d.CreateQP(ib.QPAttr{Type: ib.RC, SendCQ: scq, RecvCQ: rcq, MaxSend: numSend, MaxRecv: numRecv})
	if err != nil {
		return err
	}
	port := d.Port()
	if err := os.WriteFile(me, fmt.Appendf(nil, "%d %s\n", qp.Num(), hex.EncodeToString(port.GID[:])), 0o644); err != nil {
		return err
	}
	peerQPN, peerGID, err := waitPeer(peer, 60*time.Second)
	if err != nil {
		return err
	}
	for _, m := range []ib.QPModify{
		{State: ib.StateInit, PKey: port.PKeys[0]},
		{State: ib.StateRTR, DestGID: peerGID, DestQPN: peerQPN, PathMTU: port.ActiveMTU, RecvPSN: 1, MinRNRTmr: 12},
		{State: ib.StateRTS, SendPSN: 1, Timeout: 14, RetryCount: 7, RNRRetry: 7},
	} {
		if err := qp.Modify(m); err != nil {
			return err
		}
	}
	t, err := tun.Open(tun.Config{Name: tunName, MTU: mtu, Offload: true})
	if err != nil {
		return err
	}
	defer t.Close()

	sge := func(slot, n int) ib.SGE { return ib.SGE{MR: mr, Offset: slot * slotSize, Length: n} }
	buf := func(slot int) []byte { return slab.Bytes()[slot*slotSize : (slot+1)*slotSize] }
	recvs := make([]ib.RecvWR, numRecv)
	for k := range recvs {
		recvs[k] = ib.RecvWR{ID: uint64(k), SGE: sge(k, slotSize)}
	}
	if _, err := qp.PostRecv(recvs); err != nil {
		return err
	}
	// The receive side: the CQ's handler writes each message to the TUN
	// and posts the batch's slots again. Its buffers are made once: no
	// allocation per packet lowers the ceiling.
	var rxMu sync.Mutex
	var rwc [16]ib.Completion
	var again [16]ib.RecvWR
	var parts [1][]byte
	var rh offload.Hdr
	receive := func() {
		rxMu.Lock()
		defer rxMu.Unlock()
		for n := rcq.Poll(rwc[:]); n > 0; n = rcq.Poll(rwc[:]) {
			for k, c := range rwc[:n] {
				if c.Status == ib.WCSuccess && c.ByteLen >= offload.HdrLen {
					b := buf(int(c.ID))[:c.ByteLen]
					if rh.Decode(b) == nil {
						parts[0] = b[offload.HdrLen:]
						_, _ = t.WriteGSO(rh, parts[:])
					}
				}
				again[k] = ib.RecvWR{ID: c.ID, SGE: sge(int(c.ID), slotSize)}
			}
			_, _ = qp.PostRecv(again[:n])
		}
	}
	if !ib.CapsOf(d).SetCQHandler(rcq, receive) {
		return errors.New("the device runs no completion handlers")
	}
	fmt.Println("verbsrelay: ready")
	// The send side: a TUN read into a free slot, one SEND per read.
	free := make([]int, 0, numSend)
	for k := range numSend {
		free = append(free, numRecv+k)
	}
	var swc [16]ib.Completion
	reap := func() bool {
		n := scq.Poll(swc[:])
		for _, c := range swc[:n] {
			free = append(free, int(c.ID))
		}
		return n > 0
	}
	var send [1]ib.SendWR
	var h offload.Hdr
	for {
		for reap() {
		}
		for len(free) == 0 {
			if !reap() {
				<-scq.Ready()
			}
		}
		slot := free[len(free)-1]
		b := buf(slot)
		n, err := t.Read(0, b[offload.HdrLen:], &h)
		if err != nil {
			return err
		}
		h.Encode(b)
		send[0] = ib.SendWR{ID: uint64(slot), SGE: sge(slot, offload.HdrLen+n)}
		if _, err := qp.PostSend(send[:]); err != nil {
			return err
		}
		free = free[:len(free)-1]
	}
}

// waitPeer reads the other end's "QPN GID" once its file is there.
func waitPeer(path string, limit time.Duration) (ib.QPN, ib.GID, error) {
	end := time.Now().Add(limit)
	for {
		b, err := os.ReadFile(path)
		if err == nil {
			f := strings.Fields(string(b))
			if len(f) == 2 {
				qpn, err1 := strconv.ParseUint(f[0], 10, 32)
				g, err2 := hex.DecodeString(f[1])
				if err1 == nil && err2 == nil && len(g) == len(ib.GID{}) {
					return ib.QPN(qpn), ib.GID(g), nil
				}
			}
		}
		if time.Now().After(end) {
			return 0, ib.GID{}, fmt.Errorf("no peer in %s after %v", path, limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
