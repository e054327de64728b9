package verbs

import "time"

// Config names the adapter port Open drives.
type Config struct {
	Device   string // rdma-core device name, e.g. "mlx5_0" or "rxe0"
	Port     int    // port number, 1-based (0 means 1)
	GIDIndex int    // GID table index; -1: choose (RoCE: the RoCEv2 IPv4-mapped GID, InfiniBand: 0)
	// NoRDMACM opens the device through libibverbs alone, for ipoibd's own
	// CM: librdmacm opens /dev/infiniband/rdma_cm, which makes the kernel
	// load rdma_ucm and with it ib_cm, the module that must stay unloaded.
	// The kernel CM service (package rdmacm) then cannot run on it.
	NoRDMACM bool
	// BusyPoll, when positive, is how long a receive CQ's consumer goes on
	// polling after the last completion it found before it sleeps until
	// the next completion event: fewer events and wake-ups under load and
	// a shorter wait for a burst's next packet, for the CPU it spins.
	BusyPoll time.Duration
}
