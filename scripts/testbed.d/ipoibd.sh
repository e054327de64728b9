#!/usr/bin/env bash
# ipoibd over the verbs provider on the test bed's two rxe devices: one
# daemon per device, each interface in its own network namespace (the rxe
# devices themselves must stay in the initial one), first in datagram mode,
# then in connected mode over RC and UC. Prints one RESULT line per check.
set -uo pipefail
. "$(dirname "$0")/../testbed-lib.sh"

A=${TESTBED_DEV_A:-rxe0} B=${TESTBED_DEV_B:-rxe1}
log=/tmp/ipoibd-hook
mkdir -p "$log"
pids=()

pass() { echo "RESULT PASS ipoibd/$1"; }
fail() {
	echo "RESULT FAIL ipoibd/$1: $2"
	for f in "$log"/*.log; do [ -f "$f" ] && { echo "--- $f"; tail -n 15 "$f"; }; done
}
check() { # check NAME CMD...: PASS if CMD succeeds
	local name=$1 out
	shift
	if out=$("$@" 2>&1); then pass "$name"; else fail "$name" "$(echo "$out" | tail -n 3 | tr '\n' ' ')"; fi
}
counter() { cat "/sys/class/infiniband/$1/ports/1/hw_counters/$2" 2>/dev/null || echo 0; }

# start K DEV NS FLAGS...: one daemon; ready when its control socket answers.
start() {
	local k=$1 dev=$2 ns=$3
	shift 3
	ipoibd --provider verbs --device "$dev" --netns "$ns" \
		--addr "192.168.60.$k/24" --addr "fd00:60::$k/64" "$@" >"$log/$ns.log" 2>&1 &
	pids+=($!)
	answering "${pids[-1]}" "$ns"
}
# stop_all ends the daemons (SIGTERM: DREQs, groups left, interface removed)
# and fails if one did not exit cleanly.
stop_all() {
	local p st=0
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || st=1; done
	pids=()
	return $st
}
trap stop_all EXIT
# stopped MODE: the daemons' exit, and nothing left behind in the kernel:
# the rdma resource counts (PDs, CQs, QPs, MRs, cm_ids, contexts) are back
# where they were before any daemon ran.
stopped() {
	if stop_all; then pass "$1-clean-exit"; else fail "$1-clean-exit" "a daemon exited with an error"; fi
	local now
	now=$(rdma resource show 2>&1)
	if [ "$now" = "$baseline" ]; then
		pass "$1-no-leaks"
	else
		fail "$1-no-leaks" "rdma resource show: before: $(echo $baseline) after: $(echo $now)"
	fi
}

for ns in ipa ipb; do ip netns del "$ns" 2>/dev/null; ip netns add "$ns"; done
baseline=$(rdma resource show 2>&1)
echo "rdma resource show before the daemons: $baseline"

# --- --peers rfc-send (connected mode as a sender through rdma_cm's AF_IB)
# needs an InfiniBand port: on rxe it is refused at start, saying so, and
# leaves nothing behind (the datagram section's no-leaks check follows).
if out=$(timeout 60 ipoibd --provider verbs --device "$A" --netns ipa --cm kernel --peers rfc-send --addr 192.168.60.1/24 2>&1); then
	fail rfc-send-refused-on-roce "it started on RoCE"
elif echo "$out" | grep -q "need an InfiniBand port"; then
	pass rfc-send-refused-on-roce
else
	fail rfc-send-refused-on-roce "$(echo "$out" | tail -n 2 | tr '\n' ' ')"
fi

# --- datagram mode: UD only (ARP/ND over the broadcast and solicited-node groups).
# Daemon 1 asks for the kernel CM without saying its peers are all ipoibd:
# it must not advertise connected mode (a kernel ipoib peer's REQ would be
# refused by the mapped service ID), so it runs datagram.
mode=datagram
if start 1 "$A" ipa --cm kernel && start 2 "$B" ipb --mode datagram; then
	pass "$mode-up"
	check "$mode-kernel-cm-not-advertised" sh -c 'ip netns exec ipa ipoibd show | grep -q "datagram mode" && ip netns exec ipa ipoibd show | grep -q "connected mode not advertised: --cm kernel" && ip netns exec ipa ipoibd show --json | grep -q "\"link_addr\":\"00:"'
	ip netns exec ipa ipoibd show
	check "$mode-ping4" ip netns exec ipa ping -c 3 -i 0.2 -W 3 192.168.60.2
	check "$mode-ping6" ip netns exec ipa ping -c 3 -i 0.2 -W 3 fd00:60::2
	check "$mode-neigh-UD" sh -c 'ip netns exec ipa ipoibd neigh | grep 192.168.60.2 | grep -w UD'
	stopped "$mode"
else
	fail "$mode-up" "a daemon did not come up"
	stop_all
fi

# --- connected mode: RC, then UC, through the kernel CM (librdmacm), which
# advertises connected mode only with --peers ipoibd-only
for cmmode in rc uc; do
	mode=connected-$cmmode
	sent_a=$(counter "$A" sent_pkts) sent_b=$(counter "$B" sent_pkts)
	if ! { start 1 "$A" ipa --cm kernel --peers ipoibd-only --cm-modes "$cmmode" && start 2 "$B" ipb --cm kernel --peers ipoibd-only --cm-modes "$cmmode"; }; then
		fail "$mode-up" "a daemon did not come up"
		stop_all
		continue
	fi
	pass "$mode-up"
	check "$mode-show" sh -c 'ip netns exec ipa ipoibd show | grep -i librdmacm'
	check "$mode-ping4" ip netns exec ipa ping -c 3 -i 0.2 -W 3 192.168.60.2
	# 30000-octet pings only fit a connection (the UD MTU is the path MTU).
	check "$mode-ping-large" ip netns exec ipa ping -c 3 -i 0.2 -W 3 -M "do" -s 30000 192.168.60.2
	check "$mode-ping6" ip netns exec ipb ping -c 2 -i 0.2 -W 3 fd00:60::1
	upper=$(echo "$cmmode" | tr a-z A-Z)
	check "$mode-conn" sh -c "ip netns exec ipa ipoibd conn --wide | grep -w $upper | grep -q established"
	check "$mode-neigh-via" sh -c "ip netns exec ipa ipoibd neigh | grep 192.168.60.2 | grep -qw $upper"
	if [ $cmmode = rc ]; then
		ip netns exec ipb iperf3 -s -D -1 >/dev/null 2>&1
		for _ in $(seq 50); do ip netns exec ipb ss -ltn | grep -q ':5201 ' && break; sleep 0.1; done
		if out=$(ip netns exec ipa iperf3 -c 192.168.60.2 -t 3 2>&1); then
			pass "$mode-iperf3"
			echo "$out" | grep -E 'sender|receiver'
		else
			fail "$mode-iperf3" "$(echo "$out" | tail -n 2 | tr '\n' ' ')"
		fi
	fi
	if (($(counter "$A" sent_pkts) > sent_a && $(counter "$B" sent_pkts) > sent_b)); then
		pass "$mode-both-devices-sent"
	else
		fail "$mode-both-devices-sent" "sent_pkts $A $sent_a→$(counter "$A" sent_pkts), $B $sent_b→$(counter "$B" sent_pkts)"
	fi
	echo "--- ipoibd show, neigh and conn on $A:"
	ip netns exec ipa ipoibd show
	ip netns exec ipa ipoibd neigh
	ip netns exec ipa ipoibd conn
	stopped "$mode"
done
for ns in ipa ipb; do ip netns del "$ns" 2>/dev/null; done
