// Package ibconform is the provider contract of package ib as a test
// suite, as golang.org/x/net/nettest's TestConn is for a net.Conn: a
// provider proves itself by running it from its own tests on two of its
// devices that reach each other.
//
//	func TestConformance(t *testing.T) {
//		ibconform.Run(t, func(t *testing.T) (a, b ib.Device) { ... })
//	}
//
// The rules are what ipoib and cm rely on, each a subtest: UD datagrams
// land behind ib.GRHLen octets with the sender's GID, QPN and P_Key, and
// one with another Q_Key does not land; multicast reaches the attached
// QPs only; RC and UC messages arrive whole and in order, and complete on
// both sides; an SRQ feeds RC QPs and signals its limit; RC fails with
// retry exceeded when the peer is gone, and the rest of its sends flush;
// moving to Error flushes posted receives; MaxSend grants at least one;
// QP1 carries MADs with the sender's address; and the optional
// capabilities the device has (ib.CapsOf) behave. softib, ib/ibtest and
// verbs (in the rxe test bed) run it.
//
// Only tests import it.
package ibconform

import (
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
)

// OpenPair opens two devices of the provider under test that reach each
// other (one fabric, link or subnet). It may skip t when the provider
// cannot run here. Run closes both when the suite is done.
type OpenPair func(t *testing.T) (a, b ib.Device)

// Option changes what Run checks, for a provider that cannot do
// everything where it runs.
type Option func(*config)

type config struct {
	timeout time.Duration
	noMADs  string
}

// WithTimeout sets how long the suite waits for a completion, a MAD or a
// handler (default 20 s: a provider may run under emulation, as verbs
// does in the rxe test bed).
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// WithoutMADs leaves out the QP1 rule, saying why: e.g. the kernel's CM
// holds QP1's CM class, so verbs cannot open the MAD service.
func WithoutMADs(reason string) Option { return func(c *config) { c.noMADs = reason } }

// rule is one subtest of the suite.
type rule struct {
	name string
	run  func(t *testing.T, a, b *end)
}

// rules are the suite, in order; the files of this package add theirs.
func rules() []rule {
	var rs []rule
	rs = append(rs, udRules...)
	rs = append(rs, connectedRules...)
	rs = append(rs, madRules...)
	return append(rs, capRules...)
}

// Run runs the suite on the devices open gives, one subtest a rule.
func Run(t *testing.T, open OpenPair, opts ...Option) {
	t.Helper()
	cfg := config{timeout: 20 * time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	a, b := open(t)
	t.Cleanup(func() {
		for _, d := range []ib.Device{a, b} {
			if err := d.Close(); err != nil {
				t.Errorf("%s: Close: %v", d.Name(), err)
			}
		}
	})
	t.Logf("%s and %s; optional capabilities %v", a.Name(), b.Name(), ib.CapsOf(a).Names())
	for _, r := range rules() {
		t.Run(r.name, func(t *testing.T) {
			r.run(t, newEnd(t, a, &cfg), newEnd(t, b, &cfg))
		})
	}
}
