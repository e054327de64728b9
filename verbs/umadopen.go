//go:build linux && rdma

package verbs

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"github.com/ipoibd/ipoibd/ib"
	"golang.org/x/sys/unix"
)

// openUMAD opens the port's umad device and registers an agent for the CM
// class's Send method on QP1.
func openUMAD(fs sysfs, devDir string, cfg umadConfig) (*umadService, error) {
	if len(cfg.pkeys) == 0 {
		return nil, errors.New("verbs: umad: the port has no P_Key table")
	}
	path, err := fs.umadPath(devDir, cfg.device, cfg.port)
	if err != nil {
		return nil, err
	}
	// os.OpenFile makes a character device non-blocking and pollable: Read
	// waits in the runtime's poller, and Close ends it.
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("verbs: %w", err)
	}
	s := &umadService{cfg: cfg, f: f, path: path, recv: make(chan ib.MAD, 256), done: make(chan struct{}), lids: map[ib.GID]uint16{}}
	req := umadRegReq2{QPN: 1, MgmtClass: cmMgmtClass, Version: cmClassVer}
	req.MethodMask[0] = 1 << cmMethodSend
	if err := s.ioctl(umadRegisterAgent2, unsafe.Pointer(&req)); err != nil {
		f.Close()
		if loaded, holders := fs.cmHolders(); loaded && errors.Is(err, unix.EINVAL) {
			return nil, CMLoadedError(holders)
		}
		if errors.Is(err, unix.EINVAL) {
			// The MAD layer refuses a second agent for a class and method
			// another process already receives.
			return nil, fmt.Errorf("verbs: the CM class on QP1 of %s port %d is already taken (%s: %w): is another ipoibd --cm own serving this port? One daemon serves a port; add P_Key children to it with ipoibd child add", cfg.device, cfg.port, path, err)
		}
		return nil, fmt.Errorf("verbs: registering a CM agent on %s: %w", path, err)
	}
	s.agent = req.ID
	go s.readLoop()
	return s, nil
}

// readLoop hands received MADs to Recv until the device is closed.
func (s *umadService) readLoop() {
	defer close(s.recv)
	buf := make([]byte, umadMaxRecvSz)
	for {
		n, err := s.f.Read(buf)
		if err != nil {
			// Closed by us, or the device went away (module unloaded):
			// Recv's close tells the owner either way.
			return
		}
		m, ok := s.parse(buf[:n])
		if !ok {
			continue
		}
		select {
		case s.recv <- m:
		case <-s.done:
			return
		default:
			s.dropQueue.Add(1) // the CM retransmits; a full queue is a burst
		}
	}
}
