package main

// The connection service: which one runs (--cm, --peers and the host),
// and making it. Every call into the packages that implement one is here.

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/ipoibd/ipoibd/cm"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ipoib"
	"github.com/ipoibd/ipoibd/rdmacm"
	"github.com/ipoibd/ipoibd/verbs"
)

// The connection services: ipoibd's own CM engine on QP1, or the kernel's
// CM through librdmacm (verbs only).
const (
	connServiceOwn    = "own"
	connServiceKernel = "kernel"
)

// connServiceChoice is the connection service the daemon runs and
// whether its link address advertises connected mode, with why; `ipoibd
// show` prints it.
type connServiceChoice struct {
	Service   string `json:"cm_service"` // connServiceOwn, connServiceKernel, or "" (datagram mode)
	Advertise bool   `json:"connected_advertised"`
	// SendOnly: connected mode as a sender only (--peers rfc-send): RC
	// to RFC 4755 peers through rdma_cm's AF_IB, datagram offered.
	SendOnly bool   `json:"connected_send_only"`
	Why      string `json:"cm_why"`
}

// checkConnService checks --cm and --peers against each other and the
// provider, before anything is probed or opened.
func checkConnService(provider, cmFlag, peers string) error {
	switch cmFlag {
	case "auto", connServiceOwn, connServiceKernel:
	default:
		return fmt.Errorf("--cm %q: want own, kernel or auto", cmFlag)
	}
	switch peers {
	case "any", "ipoibd-only", "rfc-send":
	default:
		return fmt.Errorf("--peers %q: want any, ipoibd-only or rfc-send", peers)
	}
	if provider == providerSoftib && cmFlag == connServiceKernel {
		return errors.New("--cm kernel is for --provider verbs: softib has no kernel CM, ipoibd's own runs on its QP1")
	}
	return nil
}

// kernelCMLoaded reports whether the kernel's ib_cm holds QP1's CM class,
// and its users.
func kernelCMLoaded() (bool, []string) { return verbs.CMModuleHolders() }

// chooseConnService reads --cm and --peers. A kernel CM reached through
// librdmacm listens on a mapped service ID, never RFC 4755's (rdma_cm
// cannot bind the IETF prefix), so a kernel ipoib peer that saw RC in our
// link address would draw REJ 8 and lose unicast to us: with that service,
// connected mode is advertised only when the operator says every peer is
// ipoibd. cmLoaded reports whether ib_cm holds QP1's CM class, and its
// users.
func chooseConnService(provider, cmFlag, peers string, mode ipoib.Mode, cmLoaded func() (bool, []string)) (connServiceChoice, error) {
	if err := checkConnService(provider, cmFlag, peers); err != nil {
		return connServiceChoice{}, err
	}
	if mode == ipoib.Datagram {
		return connServiceChoice{Why: "--mode datagram"}, nil
	}
	if provider != providerVerbs {
		return connServiceChoice{Service: connServiceOwn, Advertise: true, Why: "ipoibd's CM engine on the software adapter's QP1"}, nil
	}
	loaded, holders := cmLoaded()
	held := ""
	if len(holders) > 0 {
		held = " (used by " + strings.Join(holders, ", ") + ")"
	}
	const ownCM = "ipoibd's CM on QP1 through ib_umad, RFC 4755 service IDs"
	switch {
	case cmFlag == connServiceOwn && loaded:
		return connServiceChoice{}, verbs.CMLoadedError(holders)
	case cmFlag == connServiceOwn:
		return connServiceChoice{Service: connServiceOwn, Advertise: true, Why: "--cm own: connected mode with kernel ipoib and ipoibd peers (" + ownCM + ")"}, nil
	case cmFlag == "auto" && !loaded:
		return connServiceChoice{Service: connServiceOwn, Advertise: true, Why: "ib_cm is not loaded: connected mode with kernel ipoib and ipoibd peers (" + ownCM + ")"}, nil
	}
	why := "--cm kernel"
	if cmFlag == "auto" {
		why = "ib_cm is loaded" + held
	}
	if peers == "rfc-send" {
		return connServiceChoice{Service: connServiceKernel, SendOnly: true, Why: why + ", --peers rfc-send: connected mode as a sender only: RC to kernel ipoib (and ipoibd --cm own) peers at RFC 4755's service IDs through rdma_cm's AF_IB (InfiniBand ports only; judged on paper, not yet on hardware); datagram offered, so every peer sends to us over UD"}, nil
	}
	if peers == "ipoibd-only" {
		return connServiceChoice{Service: connServiceKernel, Advertise: true, Why: why + ", --peers ipoibd-only: connected mode with ipoibd peers only, through the kernel CM's mapped service IDs; a kernel ipoib peer's REQs would be refused and its unicast to us lost"}, nil
	}
	return connServiceChoice{Service: connServiceKernel, Why: why + ": datagram only, with every peer (the kernel CM cannot take RFC 4755 connections); for connected mode unload ib_cm and use --cm own, or, if every peer is ipoibd, add --peers ipoibd-only"}, nil
}

// ownConnService starts ipoibd's CM engine on the port's QP1: one MAD
// splitter shared by every interface of the daemon, closed with it.
func ownConnService(dev ib.Device) (io.Closer, cm.ServiceMaker, error) {
	mads, err := dev.MADs()
	if err != nil {
		return nil, nil, err
	}
	qp1 := cm.NewSharedQP1(mads)
	return qp1, cm.EngineOnSharedQP1(qp1), nil
}

// kernelConnService is the kernel's CM through librdmacm on a verbs
// device (--cm kernel).
func kernelConnService(dev ib.Device, sendOnly bool) cm.ServiceMaker {
	return func(p cm.ServiceParams) (cm.Service, error) {
		if sendOnly {
			return rdmacm.NewRFCSender(dev, p.Events)
		}
		return rdmacm.New(dev, p.Events)
	}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
