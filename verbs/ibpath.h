// InfiniBand path addressing for the cgo helpers of ah.go and modify.go.
#ifndef IPOIBD_IBPATH_H
#define IPOIBD_IBPATH_H

#include <stdint.h>
#include <string.h>
#include <infiniband/verbs.h>

// What ib.Path carries, in plain values: Go fills it, never a struct with
// unions.
struct ipoibd_ib_path {
	uint16_t dlid;
	uint8_t sl, static_rate, src_path_bits;
	uint8_t grh, hop_limit, traffic_class;
	uint32_t flow_label;
};

// Fills an address vector (zeroed by the caller) for an InfiniBand path
// as the kernel's ib_init_ah_attr_from_path does: LRH fields always, a GRH
// only when the path asks for one.
static inline void ipoibd_ib_av(struct ibv_ah_attr *a, const uint8_t *dgid, uint8_t sgid_index, uint8_t port,
		const struct ipoibd_ib_path *p) {
	a->dlid = p->dlid;
	a->sl = p->sl;
	a->static_rate = p->static_rate;
	a->src_path_bits = p->src_path_bits;
	a->port_num = port;
	if (p->grh) {
		a->is_global = 1;
		memcpy(a->grh.dgid.raw, dgid, 16);
		a->grh.sgid_index = sgid_index;
		a->grh.hop_limit = p->hop_limit;
		a->grh.traffic_class = p->traffic_class;
		a->grh.flow_label = p->flow_label;
	}
}

#endif
