/*
 * setsl2vl: Set one SLtoVLMappingTable of a switch by a LID-routed SMP
 * (IBA Vol 1 14.2.5.8), what OpenSM's QoS configuration cannot do for a
 * single link: it maps SLs by port kind, all switch ports alike.
 *
 *	setsl2vl SWITCH-LID IN-PORT OUT-PORT VL0,VL1,...,VL15
 *
 * Run as a node of an ibsim fabric (LD_PRELOAD=libumad2sim.so); it
 * leaves through exit, which frees the simulator's slot.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/umad.h>

#define SMP_LEN 256

int main(int argc, char **argv)
{
	int lid, in, out, vl[16], i, port, agent, len;
	char *s;
	if (argc != 5) {
		fprintf(stderr, "usage: setsl2vl SWITCH-LID IN-PORT OUT-PORT VL0,...,VL15\n");
		return 2;
	}
	lid = atoi(argv[1]);
	in = atoi(argv[2]);
	out = atoi(argv[3]);
	s = argv[4];
	for (i = 0; i < 16; i++) {
		vl[i] = (int)strtol(s, &s, 10);
		if (vl[i] < 0 || vl[i] > 15 || (i < 15 && *s++ != ',')) {
			fprintf(stderr, "setsl2vl: bad VL list %s\n", argv[4]);
			return 2;
		}
	}
	if (umad_init() < 0 || (port = umad_open_port(NULL, 0)) < 0) {
		fprintf(stderr, "setsl2vl: no port\n");
		return 1;
	}
	/* The subnet management class, LID routed. */
	if ((agent = umad_register(port, 0x01, 1, 0, NULL)) < 0) {
		fprintf(stderr, "setsl2vl: umad_register: %d\n", agent);
		return 1;
	}
	void *umad = calloc(1, umad_size() + SMP_LEN);
	unsigned char *m = umad_get_mad(umad);
	m[0] = 1;		/* base version */
	m[1] = 0x01;		/* class: SM LID routed */
	m[2] = 1;		/* class version */
	m[3] = 0x02;		/* method: Set */
	m[15] = 0x5e;		/* transaction ID */
	m[16] = 0x00, m[17] = 0x17;	/* attribute: SLtoVLMappingTable */
	m[22] = in, m[23] = out;	/* modifier: input port 15:8, output port 7:0 */
	for (i = 0; i < 16; i += 2)	/* data at 64: SL 2n high nibble, 2n+1 low */
		m[64 + i / 2] = vl[i] << 4 | vl[i + 1];
	umad_set_addr(umad, lid, 0, 0, 0);
	if (umad_send(port, agent, umad, SMP_LEN, 1000, 2) < 0) {
		fprintf(stderr, "setsl2vl: umad_send failed\n");
		return 1;
	}
	len = SMP_LEN;
	if (umad_recv(port, umad, &len, 2000) < 0 || umad_status(umad)) {
		fprintf(stderr, "setsl2vl: no answer (status %d)\n", umad_status(umad));
		return 1;
	}
	if (m[3] != 0x81 || m[4] || m[5]) {
		fprintf(stderr, "setsl2vl: answer method %#x status %#x\n", m[3], m[4] << 8 | m[5]);
		return 1;
	}
	return 0;
}
