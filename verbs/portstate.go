//go:build rdma

package verbs

// PortActive reports whether the port is ACTIVE (sysfs "4: ACTIVE"),
// read each time: the kernel's port events reach only its own consumers.
func (d *Device) PortActive() bool {
	return hostSysfs.portActive(d.cfg.Device, int(d.portNum))
}
