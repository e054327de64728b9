package verbs

// Config names the adapter port Open drives.
type Config struct {
	Device   string // rdma-core device name, e.g. "mlx5_0" or "rxe0"
	Port     int    // port number, 1-based (0 means 1)
	GIDIndex int    // GID table index; -1: choose (RoCE: the RoCEv2 IPv4-mapped GID, InfiniBand: 0)
}
