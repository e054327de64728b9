package main

import (
	be "encoding/binary"
	"fmt"
	"log/slog"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ipoib"
	"github.com/ipoibd/ipoibd/softib"
	"github.com/ipoibd/ipoibd/umadsa"
)

// softibIBPKeyHint says where a P_Key missing from an InfiniBand-link
// softib port's table comes from: the subnet manager, as on hardware.
const softibIBPKeyHint = "the subnet manager sets it (OpenSM's partitions.conf)"

// openSoftibIB opens a softib port on the InfiniBand link layer as the
// port of the subnet node this process is: its LID, LMC, SM LID, GID and
// P_Key table come from the subnet manager through libibumad (under
// ibsim's libumad2sim.so), as verbs reads them from sysfs, and the SA
// client is opened as on a verbs InfiniBand port. On error nothing stays
// open.
func openSoftibIB(sc softib.Config, cfg *ipoib.Config) (ib.Device, error) {
	pi, err := umadsa.QueryPort("", 0)
	if err != nil {
		return nil, fmt.Errorf("softib --softib-link ib: reading the port from the subnet: %w", err)
	}
	if err := ibPlace(pi, &sc); err != nil {
		return nil, err
	}
	dev, err := softib.Open(sc)
	if err != nil {
		return nil, err
	}
	sub, err := umadsa.OpenPortClient("", 0)
	if err != nil {
		_ = dev.Close()
		return nil, fmt.Errorf("softib --softib-link ib: the subnet administrator's client: %w", err)
	}
	sma, err := umadsa.OpenSMAPort("", 0)
	if err != nil {
		_ = sub.Close()
		_ = dev.Close()
		return nil, fmt.Errorf("softib --softib-link ib: the port's SMA, to follow the subnet manager: %w", err)
	}
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	w := watchSubnet(dev, sma, subnetPollInterval, log)
	sub.FollowSM(portSMLID(dev))
	cfg.Device, cfg.Subnet = w, sub
	log.Info("softib port on the InfiniBand subnet", "lid", pi.LID, "lmc", pi.LMC, "sm_lid", pi.SMLID,
		"gid", pi.GID, "pkeys", sc.PKeys, "forwarder", sc.IB.Forwarder, "sma_poll", subnetPollInterval)
	return w, nil
}

// ibPlace puts what the subnet manager assigned the port (pi) in sc: a
// port that is not active, or has no LID or SM yet, is refused, as is a
// P_Key table softib cannot hold.
func ibPlace(pi umadsa.PortInfo, sc *softib.Config) error {
	switch {
	case !pi.Active:
		return fmt.Errorf("softib --softib-link ib: the port is not active (state %d): is OpenSM running on the fabric?", pi.State)
	case pi.LID == 0 || pi.SMLID == 0:
		return fmt.Errorf("softib --softib-link ib: the port has LID %d and SM LID %d: the subnet manager has not swept it", pi.LID, pi.SMLID)
	case len(pi.PKeys) == 0:
		return fmt.Errorf("softib --softib-link ib: the port's P_Key table is empty")
	}
	for i, p := range pi.PKeys {
		if !p.Valid() {
			return fmt.Errorf("softib --softib-link ib: the SM's P_Key table has no partition at index %d: softib holds only tables without gaps", i)
		}
	}
	sc.PKeys = pi.PKeys
	sc.IB.LID, sc.IB.LMC, sc.IB.SMLID = pi.LID, pi.LMC, pi.SMLID
	sc.IB.GIDPrefix = be.BigEndian.Uint64(pi.GID[:8])
	sc.IB.GUID = be.BigEndian.Uint64(pi.GID[8:])
	return nil
}

// portSMLID is the SM's LID as the port holds it, for the SA client:
// softib's, which follows the port's SMA (watchSubnet), where the sysfs
// libibumad reads under umad2sim keeps the SM LID of the start, so that
// after OpenSM moved the SA's requests would go to its old LID.
func portSMLID(dev ib.Device) func() (uint16, error) {
	return func() (uint16, error) { return dev.Port().SMLID, nil }
}
