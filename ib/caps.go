package ib

// Optional capabilities. Beyond Device, a provider may have any of these;
// it declares each one it has with a compile-time assertion in its own
// package (var _ ib.PortStater = (*Device)(nil)), so that the compiler
// says when it lacks one it claims. A consumer looks them up once, with
// CapsOf, when it takes the device, and keeps the Caps: nothing else
// above the provider boundary asks a device what it is. The exported
// conformance suite (ib/ibconform) checks that the ones a device has
// behave.

// CQHandlerMaker is implemented by devices whose every CQ (CreateCQ)
// implements CQHandler.
type CQHandlerMaker interface {
	// CQHandlers reports whether every CQ the device makes implements
	// CQHandler.
	CQHandlers() bool
}

// Caps are the optional capabilities of one device, as CapsOf found them
// when the device was taken: nil (or false) for one it lacks.
type Caps struct {
	// CQHandler: the device's CQs take a handler (CQHandlerMaker).
	CQHandler bool
	// SubnetEvents, PortState and QPCounters are the device itself, as
	// the capability it has.
	SubnetEvents SubnetEventer
	PortState    PortStater
	QPCounters   QPCounterNamer
}

// CapsOf looks up d's optional capabilities, once.
func CapsOf(d Device) Caps {
	var c Caps
	if m, ok := d.(CQHandlerMaker); ok {
		c.CQHandler = m.CQHandlers()
	}
	c.SubnetEvents, _ = d.(SubnetEventer)
	c.PortState, _ = d.(PortStater)
	c.QPCounters, _ = d.(QPCounterNamer)
	return c
}

// Names lists the capabilities held by their interfaces' names, e.g.
// [CQHandler PortStater], for logs and tests.
func (c Caps) Names() []string {
	var names []string
	for _, x := range []struct {
		name string
		has  bool
	}{
		{"CQHandler", c.CQHandler},
		{"SubnetEventer", c.SubnetEvents != nil},
		{"PortStater", c.PortState != nil},
		{"QPCounterNamer", c.QPCounters != nil},
	} {
		if x.has {
			names = append(names, x.name)
		}
	}
	return names
}

// SetCQHandler makes f the handler of cq, a CQ of the device, when the
// device's CQs take one (CQHandler), and reports whether it did.
func (c Caps) SetCQHandler(cq CQ, f func()) bool {
	if !c.CQHandler {
		return false
	}
	h, ok := cq.(CQHandler)
	if ok {
		h.SetHandler(f)
	}
	return ok
}
