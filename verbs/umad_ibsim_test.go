//go:build linux && rdma

package verbs

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/ipoibd/ipoibd/cm"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/internal/ibsim"
	"github.com/ipoibd/ipoibd/umadsa"
)

// The MAD service's libibumad path on a fabric ibsim simulates, with
// OpenSM assigning the LIDs: a CM REQ goes out by LID alone, without a
// GRH, as the kernel's CM sends inside a subnet. Each end is this test
// binary run again as a node (ibsim.Main).
//
// What ibsim cannot judge: it hands an unsolicited MAD on QP1 only to a
// port's SM client (find_client: issm), and libumad2sim.so as an SM
// client crashes on the first MAD of a class it has no agent for
// (__receiver), so no simulated port receives another's CM MADs. The
// receive side is judged by the header vectors (umad_test.go) instead.

func TestMain(m *testing.M) { ibsim.Main(m, umadChild, umadsa.Exit) }

// umadChild runs as a simulated node: "port" prints its LID; "send:LID"
// sends a REQ to LID over SL 0 without a GRH, and one to LID 0, which
// must be refused before it leaves.
func umadChild(arg string) error {
	verb, rest, _ := strings.Cut(arg, ":")
	if verb == "port" {
		pi, err := umadsa.QueryPort("", 0)
		if err != nil {
			return err
		}
		fmt.Println(pi.LID)
		return nil
	}
	if verb != "send" {
		return fmt.Errorf("child %q?", arg)
	}
	lid, err := strconv.ParseUint(rest, 0, 16)
	if err != nil {
		return err
	}
	s, err := openUMAD(umadConfig{pkeys: func() []ib.PKey { return []ib.PKey{ib.DefaultPKey, 0x8001} }})
	if err != nil {
		return err
	}
	defer s.Close()
	req := cm.REQ{LocalCommID: 1, ServiceID: cm.IPoIBServiceID(0x48), LocalCAGUID: 2, LocalQPN: 0x42,
		PathMTU: ib.MTU2048, PKey: ib.DefaultPKey, Primary: cm.Path{LocalLID: 1, RemoteLID: uint16(lid), SubnetLocal: true}}
	var mad [256]byte
	if err := req.MarshalMAD(mad[:], 7); err != nil {
		return err
	}
	to := ib.MADAddr{QPN: ib.QP1, PKey: ib.DefaultPKey, Path: ib.Path{DLID: uint16(lid)}}
	if err := s.Send(to, mad[:]); err != nil {
		return err
	}
	to.Path.DLID = 0
	if err := s.Send(to, mad[:]); !errors.Is(err, errNoLID) {
		return fmt.Errorf("a MAD to LID 0: %v, want errNoLID", err)
	}
	if c := s.Counters(); c[0].Value != 1 || c[2].Value != 1 {
		return fmt.Errorf("counters %v: want one sent, one send error", c)
	}
	return nil
}

func TestUMADOnIBSim(t *testing.T) {
	ibsim.Need(t, "/usr/include/infiniband/umad.h")
	f := ibsim.Up(t)
	out := strings.TrimSpace(f.Output(t, "h2", ibsim.Child("port")))
	lid, err := strconv.ParseUint(out, 10, 16)
	if err != nil || lid == 0 {
		t.Fatalf("h2's LID %q", out)
	}
	f.Output(t, "h3", ibsim.Child(fmt.Sprintf("send:%d", lid)))
}
