package main

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/ipoibd/ipoibd/ib"
)

// The out-of-band exchange of rdma-core's libibverbs/examples pingpongs: over
// one TCP connection each side sends, per QP, a NUL-terminated line
// "LID:QPN:PSN:GID" (hex; LID 4 digits, QPN and PSN 6, GID 32: its 16 octets
// in order) in a fixed 52-octet record. The client sends first; the server
// answers after it has moved its QPs to RTR and RTS (so the client may send
// as soon as it has the answer); the client closes with "done" and its NUL.
// ibv_srq_pingpong always sends 256 records (its MAX_QP), zero beyond the QPs
// it uses.

const (
	recordLen  = len("0000:000000:000000:00000000000000000000000000000000") + 1
	srqRecords = 256
)

var doneMsg = []byte("done\x00")

// dest is one side's QP as the exchange names it.
type dest struct {
	LID uint16
	QPN ib.QPN
	PSN uint32
	GID ib.GID
}

// appendRecord appends d's 52-octet record.
func appendRecord(b []byte, d dest) []byte {
	n := len(b)
	b = fmt.Appendf(b, "%04x:%06x:%06x:", d.LID, uint32(d.QPN), d.PSN&0xffffff)
	b = hex.AppendEncode(b, d.GID[:])
	b = append(b, 0)
	if len(b)-n != recordLen {
		panic(fmt.Sprintf("pingpong record of %d octets", len(b)-n)) // QPN or PSN wider than 24 bits
	}
	return b
}

// parseRecord reads a record as the pingpongs' sscanf("%x:%x:%x:%s") would,
// but strictly: three hex fields and 32 hex digits, then NUL.
func parseRecord(r []byte) (dest, error) {
	if i := bytes.IndexByte(r, 0); i >= 0 {
		r = r[:i]
	}
	f := bytes.Split(r, []byte(":"))
	if len(f) != 4 {
		return dest{}, fmt.Errorf("pingpong record %q: want LID:QPN:PSN:GID", r)
	}
	var v [3]uint64
	for i, bits := range []int{16, 24, 24} {
		x, err := strconv.ParseUint(string(f[i]), 16, bits)
		if err != nil {
			return dest{}, fmt.Errorf("pingpong record %q: field %d: %w", r, i+1, err)
		}
		v[i] = x
	}
	var d dest
	if len(f[3]) != 2*len(d.GID) {
		return dest{}, fmt.Errorf("pingpong record %q: GID of %d digits, want 32", r, len(f[3]))
	}
	if _, err := hex.Decode(d.GID[:], f[3]); err != nil {
		return dest{}, fmt.Errorf("pingpong record %q: GID: %w", r, err)
	}
	d.LID, d.QPN, d.PSN = uint16(v[0]), ib.QPN(v[1]), uint32(v[2])
	return d, nil
}

// records is how many records each side sends: one, or 256 for srq.
func records(t kind) int {
	if t == kindSRQ {
		return srqRecords
	}
	return 1
}

// encodeDests writes mine padded with zero records to n.
func encodeDests(mine []dest, n int) []byte {
	b := make([]byte, 0, n*recordLen)
	for i := range n {
		var d dest
		if i < len(mine) {
			d = mine[i]
		}
		b = appendRecord(b, d)
	}
	return b
}

// readDests reads n records and returns the first want of them.
func readDests(r io.Reader, n, want int) ([]dest, error) {
	buf := make([]byte, n*recordLen)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, fmt.Errorf("read the peer's %d address records: %w", n, err)
	}
	out := make([]dest, want)
	for i := range want {
		d, err := parseRecord(buf[i*recordLen : (i+1)*recordLen])
		if err != nil {
			return nil, err
		}
		out[i] = d
	}
	return out, nil
}

// clientExchange is the client's half: send ours, read theirs, say done.
func clientExchange(rw io.ReadWriter, t kind, mine []dest) ([]dest, error) {
	n := records(t)
	if _, err := rw.Write(encodeDests(mine, n)); err != nil {
		return nil, fmt.Errorf("send our address: %w", err)
	}
	theirs, err := readDests(rw, n, len(mine))
	if err != nil {
		return nil, err
	}
	if _, err := rw.Write(doneMsg); err != nil {
		return nil, fmt.Errorf("send done: %w", err)
	}
	return theirs, nil
}

// serverExchange is the server's half: read theirs, connect (the QPs must be
// ready before the client learns our address), send ours, await done.
func serverExchange(rw io.ReadWriter, t kind, mine []dest, connect func([]dest) error) ([]dest, error) {
	n := records(t)
	theirs, err := readDests(rw, n, len(mine))
	if err != nil {
		return nil, err
	}
	if err := connect(theirs); err != nil {
		return nil, err
	}
	if _, err := rw.Write(encodeDests(mine, n)); err != nil {
		return nil, fmt.Errorf("send our address: %w", err)
	}
	var done [5]byte
	if _, err := io.ReadFull(rw, done[:]); err != nil {
		return nil, fmt.Errorf("read done: %w", err)
	}
	if !bytes.Equal(done[:], doneMsg) {
		return nil, errors.New("the client did not end the exchange with done")
	}
	return theirs, nil
}
