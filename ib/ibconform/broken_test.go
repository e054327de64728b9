package ibconform

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ib/ibtest"
)

// breakEnv names the rule the wrapped provider of TestWrapped breaks.
const breakEnv = "IBCONFORM_BREAK"

// The suite fails a provider that breaks one rule, in the rule that says
// so, and passes the same provider wrapped faithfully. Each run is a
// child process running TestWrapped, so that its failures are captured,
// not this test's.
func TestSuiteFailsBrokenProviders(t *testing.T) {
	for _, c := range []struct {
		breaks   string
		failRule string // "": the suite passes
	}{
		{"nothing", ""},
		{"bytelen", "UD_lands_behind_a_GRH"},                                // receive completions report one octet more
		{"drop", "UD_lands_behind_a_GRH"},                                   // a CQ loses its first receive completion
		{"reorder", "RC_and_UC_messages_arrive_whole_and_in_order"},         // several sends posted at once go out last first
		{"falsecap", "the_optional_capabilities_declared_behave/CQHandler"}, // claims CQ handlers, never runs them
	} {
		t.Run(c.breaks, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestWrapped$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), breakEnv+"="+c.breaks)
			out, err := cmd.CombinedOutput()
			switch {
			case c.failRule == "" && err != nil:
				t.Errorf("the faithful wrapper fails the suite (%v):\n%s", err, out)
			case c.failRule != "" && err == nil:
				t.Errorf("the suite passes a provider that breaks %s:\n%s", c.breaks, out)
			case c.failRule != "" && !strings.Contains(string(out), "--- FAIL: TestWrapped/"+c.failRule+" "):
				t.Errorf("the suite fails, but not in %s:\n%s", c.failRule, out)
			}
		})
	}
}

// TestWrapped runs the suite on ib/ibtest devices wrapped to break the
// rule breakEnv names; TestSuiteFailsBrokenProviders runs it.
func TestWrapped(t *testing.T) {
	breaks := os.Getenv(breakEnv)
	if breaks == "" {
		t.Skip("run by TestSuiteFailsBrokenProviders")
	}
	Run(t, func(t *testing.T) (a, b ib.Device) {
		f := ibtest.NewFabric()
		var ds [2]ib.Device
		for k := range ds {
			d, err := f.Open(ibtest.Config{})
			if err != nil {
				t.Fatal(err)
			}
			ds[k] = &brokenDev{Device: d, breaks: breaks}
		}
		return ds[0], ds[1]
	}, WithTimeout(time.Second))
}

// brokenDev wraps a good device to break one rule.
type brokenDev struct {
	ib.Device
	breaks string
}

func (d *brokenDev) CQHandlers() bool { return d.breaks == "falsecap" }

func (d *brokenDev) CreateCQ(n int) (ib.CQ, error) {
	c, err := d.Device.CreateCQ(n)
	if err != nil {
		return nil, err
	}
	return &brokenCQ{CQ: c, breaks: d.breaks}, nil
}

func (d *brokenDev) CreateQP(attr ib.QPAttr) (ib.QP, error) {
	attr.SendCQ, attr.RecvCQ = attr.SendCQ.(*brokenCQ).CQ, attr.RecvCQ.(*brokenCQ).CQ
	q, err := d.Device.CreateQP(attr)
	if err != nil {
		return nil, err
	}
	return &brokenQP{QP: q, breaks: d.breaks}, nil
}

func (d *brokenDev) AttachMulticast(q ib.QP, mgid ib.GID, mlid uint16) error {
	return d.Device.AttachMulticast(q.(*brokenQP).QP, mgid, mlid)
}

func (d *brokenDev) DetachMulticast(q ib.QP, mgid ib.GID) error {
	return d.Device.DetachMulticast(q.(*brokenQP).QP, mgid)
}

type brokenCQ struct {
	ib.CQ
	breaks  string
	dropped bool
}

// SetHandler drops the handler: only a device that claims CQ handlers
// (falsecap) has it called.
func (c *brokenCQ) SetHandler(func()) {}

func (c *brokenCQ) Poll(wc []ib.Completion) int {
	n := c.CQ.Poll(wc)
	k := 0
	for _, w := range wc[:n] {
		if w.Opcode == ib.WCRecv && w.Status == ib.WCSuccess {
			switch {
			case c.breaks == "bytelen":
				w.ByteLen++
			case c.breaks == "drop" && !c.dropped:
				c.dropped = true
				continue
			}
		}
		wc[k] = w
		k++
	}
	return k
}

type brokenQP struct {
	ib.QP
	breaks string
}

func (q *brokenQP) PostSend(wrs []ib.SendWR) (int, error) {
	if q.breaks == "reorder" && len(wrs) > 1 {
		wrs = slices.Clone(wrs)
		slices.Reverse(wrs)
	}
	return q.QP.PostSend(wrs)
}
