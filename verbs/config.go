package verbs

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
}
