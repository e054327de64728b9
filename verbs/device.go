//go:build rdma

package verbs

/*
#cgo LDFLAGS: -libverbs -lrdmacm
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
*/
import "C"

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ipoibd/ipoibd/ib"
)

// Device is one port of an rdma-core adapter. It implements ib.Device.
type Device struct {
	cfg      Config
	port     ib.PortAttr
	portNum  uint8
	gidIndex uint8
	ifindex  int // RoCE: the GID's network interface (multicast membership)
	ethernet bool
	limits   limits

	list **C.struct_ibv_context // from rdma_get_devices; owns ctx
	own  bool                   // ctx came from ibv_open_device (no rdma_cm): close it ourselves
	ctx  *C.struct_ibv_context
	pd   *C.struct_ibv_pd

	reg registry
	ctr devCounters
	// subnetEvents counts the port's subnet events (async.go).
	subnetEvents atomic.Uint64
	// pkeys is the port's P_Key table as it is now: read again on a
	// P_Key change event, since completions, QPs and MADs name P_Keys by
	// index. pkeyTableLen is its size (ibv_port_attr.pkey_tbl_len).
	pkeys        atomic.Pointer[[]ib.PKey]
	pkeyTableLen int
	async        *fdWatcher
	groups       ipGroups

	// addr is the port's LID, LMC and SM LID as they are now: read again
	// on a LID change, SM change or client reregister (rereadAddr).
	addr atomic.Pointer[portAddr]

	// destroys are QPs closed on an SRQ whose destroy waits for their
	// last WQE (drain.go): the SRQ, CQs and the device wait for them.
	destroys inflight

	mu      sync.Mutex
	closed  atomic.Bool
	qps     map[*qp]struct{}
	qpByNum map[uint32]*qp // async QP events name the QP by number
	srqs    map[*C.struct_ibv_srq]*srq
	cqs     map[*cq]struct{}
	mrs     map[*mr]struct{}
	ahs     map[*ah]struct{}
}

// A Device is an ib.Device with every optional capability (ib.Caps).
var (
	_ ib.Device         = (*Device)(nil)
	_ ib.CQHandlerMaker = (*Device)(nil)
	_ ib.SubnetEventer  = (*Device)(nil)
	_ ib.PortStater     = (*Device)(nil)
	_ ib.QPCounterNamer = (*Device)(nil)
	_ ib.CQHandler      = (*cq)(nil)
)

// CQHandlers reports that every CQ the device makes implements
// ib.CQHandler: its event goroutine runs the consumer.
func (d *Device) CQHandlers() bool { return true }

// limits are the device's capacities; requests are clamped to them.
type limits struct {
	maxQPWR, maxCQE, maxSRQWR, ports int
}

// Open opens port cfg.Port of the rdma-core device cfg.Device.
func Open(cfg Config) (ib.Device, error) {
	d, err := open(cfg)
	if err != nil {
		return nil, err
	}
	return d, nil
}

func open(cfg Config) (*Device, error) {
	if cfg.Port == 0 {
		cfg.Port = 1
	}
	if cfg.Port < 1 || cfg.Port > 255 {
		return nil, fmt.Errorf("verbs: port %d: must be 1-255", cfg.Port)
	}
	if cfg.GIDIndex < -1 || cfg.GIDIndex > 255 {
		return nil, fmt.Errorf("verbs: GID index %d: must be 0-255, or -1 to choose", cfg.GIDIndex)
	}
	d := &Device{
		cfg:     cfg,
		portNum: uint8(cfg.Port),
		groups:  ipGroups{refs: map[ib.GID]*ipGroup{}},
		qps:     map[*qp]struct{}{},
		qpByNum: map[uint32]*qp{},
		srqs:    map[*C.struct_ibv_srq]*srq{},
		cqs:     map[*cq]struct{}{},
		mrs:     map[*mr]struct{}{},
		ahs:     map[*ah]struct{}{},
	}
	if err := d.init(); err != nil {
		d.release()
		return nil, err
	}
	return d, nil
}

// init queries the port, allocates the protection domain and starts the
// async event goroutine.
func (d *Device) init() error {
	if err := d.findContext(); err != nil {
		return err
	}
	if err := d.queryDevice(); err != nil {
		return err
	}
	if err := d.queryPort(); err != nil {
		return err
	}
	d.groups.ifindex = d.ifindex
	pd, err := C.ibv_alloc_pd(d.ctx)
	if pd == nil {
		return verbError("ibv_alloc_pd", cgoErrno(err))
	}
	d.pd = pd
	d.async, err = watchFD(int(d.ctx.async_fd), d.cfg.Device+" async events", d.drainAsync)
	return err
}

// findContext takes the device's context from librdmacm, so that an rdma_cm
// connection service (package rdmacm, which only works on librdmacm's
// contexts) shares it. Without rdma_cm (a host that runs our own CM: ib_cm,
// and so rdma_ucm, unloaded) librdmacm has no devices, and the context is
// opened directly.
func (d *Device) findContext() error {
	var n C.int
	var list **C.struct_ibv_context
	var cmErr error
	if !d.cfg.NoRDMACM {
		list, cmErr = C.rdma_get_devices(&n)
	}
	var names []string
	if list != nil {
		for _, ctx := range unsafe.Slice(list, int(n)) {
			name := C.GoString(C.ibv_get_device_name(ctx.device))
			if name == d.cfg.Device {
				d.list, d.ctx = list, ctx
				return nil
			}
			names = append(names, name)
		}
		C.rdma_free_devices(list)
	}
	ctx, more, err := openDirect(d.cfg.Device)
	if err != nil {
		return err
	}
	if ctx != nil {
		d.ctx, d.own = ctx, true
		return nil
	}
	names = append(names, more...)
	if len(names) == 0 {
		if list == nil && cmErr != nil {
			return fmt.Errorf("verbs: no RDMA device %q: this host has none (%v)", d.cfg.Device, verbError("rdma_get_devices", cgoErrno(cmErr)))
		}
		return fmt.Errorf("verbs: no RDMA device %q: this host has none", d.cfg.Device)
	}
	slices.Sort(names)
	return fmt.Errorf("verbs: no RDMA device %q (have %s)", d.cfg.Device, strings.Join(slices.Compact(names), ", "))
}

// openDirect opens a device through libibverbs alone; a nil context and the
// names it saw when there is no such device.
func openDirect(name string) (*C.struct_ibv_context, []string, error) {
	var n C.int
	list, err := C.ibv_get_device_list(&n)
	if list == nil {
		return nil, nil, verbError("ibv_get_device_list", cgoErrno(err))
	}
	defer C.ibv_free_device_list(list)
	var names []string
	for _, dev := range unsafe.Slice(list, int(n)) {
		got := C.GoString(C.ibv_get_device_name(dev))
		if got != name {
			names = append(names, got)
			continue
		}
		ctx, err := C.ibv_open_device(dev)
		if ctx == nil {
			return nil, nil, verbError("ibv_open_device "+name, cgoErrno(err))
		}
		return ctx, nil, nil
	}
	return nil, names, nil
}

// Name returns the rdma-core device name.
func (d *Device) Name() string { return d.cfg.Device }

// Port returns the port attributes.
func (d *Device) Port() ib.PortAttr {
	p := d.port
	p.PKeys = slices.Clone(d.pkeyTable())
	if a := d.addr.Load(); a != nil {
		p.LID, p.LMC, p.SMLID = a.lid, a.lmc, a.smLID
	}
	return p
}

// MADs opens QP1's CM class through the kernel's user MAD interface
// (ib_umad), for the cm engine: ipoibd's own CM on an rdma-core port. It
// fails with CMLoadedError while the kernel's CM (ib_cm) holds the class.
func (d *Device) MADs() (ib.MADService, error) {
	if d.closed.Load() {
		return nil, ib.ErrClosed
	}
	if loaded, holders := CMModuleHolders(); loaded {
		return nil, CMLoadedError(holders)
	}
	return openUMAD(umadConfig{
		device: d.cfg.Device, port: int(d.portNum),
		gidIndex: d.gidIndex, pkeys: d.pkeyTable, ethernet: d.ethernet,
	})
}

// track records an object so that Close can release it; false after Close.
func (d *Device) track(add func()) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed.Load() {
		return false
	}
	add()
	return true
}

func (d *Device) untrack(remove func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	remove()
}

// Close stops the async event goroutine and releases every object still
// open, dependants first: QPs (their outstanding work completes as
// flushed), SRQs, address handles, CQs, memory regions, then the protection
// domain and librdmacm's device list.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed.Swap(true) {
		d.mu.Unlock()
		return nil
	}
	d.mu.Unlock()
	// QPs closed before still wait for their events, which the async
	// reader below delivers: let them finish first.
	d.destroys.wait()
	d.mu.Lock()
	qps, srqs, ahs, cqs, mrs := keys(d.qps), values(d.srqs), keys(d.ahs), keys(d.cqs), keys(d.mrs)
	d.mu.Unlock()
	if d.async != nil {
		d.async.stop() // before the objects go: it looks them up
		d.async = nil
	}
	var errs []error
	for _, q := range qps {
		errs = append(errs, q.Close())
	}
	for _, s := range srqs {
		errs = append(errs, s.Close())
	}
	for _, a := range ahs {
		errs = append(errs, a.Close())
	}
	for _, c := range cqs {
		errs = append(errs, c.Close())
	}
	for _, m := range mrs {
		errs = append(errs, m.Close())
	}
	errs = append(errs, d.release())
	return errors.Join(errs...)
}

// release frees what Open acquired.
func (d *Device) release() error {
	var errs []error
	if d.async != nil {
		d.async.stop()
		d.async = nil
	}
	d.groups.close()
	if d.pd != nil {
		if rc := C.ibv_dealloc_pd(d.pd); rc != 0 {
			errs = append(errs, verbError("ibv_dealloc_pd", errnoValue(rc)))
		}
		d.pd = nil
	}
	if d.list != nil {
		C.rdma_free_devices(d.list)
		d.list, d.ctx = nil, nil
	}
	if d.own && d.ctx != nil {
		if rc := C.ibv_close_device(d.ctx); rc != 0 {
			errs = append(errs, verbError("ibv_close_device", errnoValue(rc)))
		}
		d.ctx, d.own = nil, false
	}
	return errors.Join(errs...)
}

func keys[K comparable, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func values[K comparable, V any](m map[K]V) []V {
	out := make([]V, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
