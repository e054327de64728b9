#!/usr/bin/env bash
# rdma_cm on the real kernel against ipoibd's CM engine: ucmatose (rdmacm-
# utils) on an rxe device in the initial namespace, sibcm (cm.Engine on
# softib's QP1, internal/testbed/sibcm) in its own namespace across a veth
# pair of this hook's own (vcm0/vcm1, 198.51.100.0/24; va/vb and rxe0/rxe1
# stay untouched). The kernel's ib_cm and rdma_cm judge our CM messages, we
# judge theirs:
#  - active: our REQ -> the kernel's REP -> our RTU -> data both ways ->
#    the kernel's DREQ -> our DREP (small and multi-packet messages), and
#    with both ends sending a DREQ;
#  - passive: the kernel's REQ -> our REP -> its RTU -> data -> our DREQ ->
#    its DREP;
#  - a REQ to a port nobody listens on draws the kernel's REJ 8;
#  - every REJ reason our CM sends reaches rdma_cm (ucmatose prints it) and
#    the kernel's CM counters (sysfs cm_rx_msgs/rej);
#  - our REJ of the kernel's REP, our REJ 4 (Timeout) after it, and the
#    REJ 6 of an engine that restarted between its REQ and the REP;
#  - the RDMA_PS_IB port space as well as RDMA_PS_TCP, IPv6 as well as IPv4.
# Prints one RESULT line per check.
set -uo pipefail

NS=sibcm DEV=rxecm K=198.51.100.1 S=198.51.100.2 K6=2001:db8:51::1 S6=2001:db8:51::2
log=/tmp/rdmacm-hook
rm -rf "$log"
mkdir -p "$log"
pids=()
t0=$EPOCHREALTIME

pass() { echo "RESULT PASS rdmacm/$1"; }
# fail NAME WHY [LOG...]: the logs are shown indented, never as RESULTs.
fail() {
	local n=$1 why=$2 f
	shift 2
	echo "RESULT FAIL rdmacm/$n: $(printf '%s' "$why" | tr -s '\n\t' '  ' | cut -c1-200)"
	for f in "$@"; do [ -f "$f" ] && { echo "--- $f"; tail -n 25 "$f" | sed 's/^/  | /'; }; done
}

cleanup() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
	rdma link del $DEV 2>/dev/null
	ip link del vcm0 2>/dev/null
	ip netns del $NS 2>/dev/null
}
trap cleanup EXIT

# --- CM counters of the kernel (ib_cm's sysfs groups on the port) -----------
cmdir=/sys/class/infiniband/$DEV/ports/1
declare -A before
# snap: remember every CM counter.
snap() {
	local f
	before=()
	for f in "$cmdir"/cm_*/*; do before[${f#"$cmdir"/}]=$(<"$f"); done
}
# delta GROUP/NAME: how much a counter grew since snap.
delta() { echo $(($(<"$cmdir/$1") - ${before[$1]:-0})); }
# moved: every counter that grew since snap, as "group/name+N".
moved() {
	local f k out=""
	for f in "$cmdir"/cm_*/*; do
		k=${f#"$cmdir"/}
		(($(<"$f") > ${before[$k]:-0})) && out+="$k+$(($(<"$f") - ${before[$k]:-0})) "
	done
	echo "${out:-none}"
}
# want_delta NAME GROUP/NAME:N...: PASS when each counter grew by at least N.
want_delta() {
	local name=$1 w k n why=""
	shift
	for w in "$@"; do
		k=${w%:*} n=${w##*:}
		(($(delta "$k") >= n)) || why+="$k +$(delta "$k") (want +$n); "
	done
	if [ -z "$why" ]; then pass "$name"; else fail "$name" "kernel CM counters: $why"; fi
}

# --- the network ------------------------------------------------------------
setup() {
	# The kernel CM: another hook may have unloaded it (ipoibd --cm own
	# needs ib_cm gone).
	modprobe -a ib_cm rdma_cm rdma_ucm || return 1
	ip netns del $NS 2>/dev/null
	ip link del vcm0 2>/dev/null
	ip netns add $NS &&
		ip link add vcm0 type veth peer name vcm1 &&
		ip link set vcm1 netns $NS &&
		ip addr add $K/24 dev vcm0 &&
		ip link set vcm0 up &&
		ip -n $NS addr add $S/24 dev vcm1 &&
		ip addr add $K6/64 dev vcm0 nodad &&
		ip -n $NS addr add $S6/64 dev vcm1 nodad &&
		ip -n $NS link set vcm1 up &&
		ip -n $NS link set lo up || return 1
	# Static neighbours: rdma_cm resolves softib's MAC on the first REQ or
	# REP, and an ARP exchange under emulation only adds delay.
	local m0 m1 g g6 _
	m0=$(cat /sys/class/net/vcm0/address) m1=$(ip -n $NS -br link show vcm1 | awk '{print $3}')
	ip neigh replace $S lladdr "$m1" dev vcm0 nud permanent &&
		ip -n $NS neigh replace $K lladdr "$m0" dev vcm1 nud permanent &&
		ip neigh replace $S6 lladdr "$m1" dev vcm0 nud permanent &&
		ip -n $NS neigh replace $K6 lladdr "$m0" dev vcm1 nud permanent &&
		rdma link add $DEV type rxe netdev vcm0 || return 1
	g=$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' ${K//./ })
	g6=2001:0db8:0051:0000:0000:0000:0000:0001
	for _ in $(seq 50); do
		grep -qx "$g" "$cmdir"/gids/* 2>/dev/null && grep -qx "$g6" "$cmdir"/gids/* &&
			[ -d "$cmdir/cm_rx_msgs" ] && return 0
		sleep 0.2
	done
	echo "no GID ::ffff:$K or $K6, or no CM counters on $DEV"
	return 1
}
if ! command -v sibcm >/dev/null || ! command -v ucmatose >/dev/null; then
	fail programs "sibcm or ucmatose is not in PATH ($PATH)"
	exit 0
fi
if ! why=$(setup 2>&1); then
	fail setup "$why"
	exit 0
fi
pass setup
# The route to softib must leave through vcm0, the rxe device's netdev.
if ip route get $S | grep -q "dev vcm0" && ip route get $S6 | grep -q "dev vcm0"; then pass route; else
	fail route "$(ip route get $S; ip route get $S6)"
fi

# sibcm_ns ARGS: sibcm on softib at $s (default S, the IPv4 address).
sibcm_ns() { ip netns exec $NS sibcm -a "${s:-$S}" "$@"; }

# wait_listen ADDR PORT: until rdma_cm has a listener on ADDR:PORT.
wait_listen() {
	local _
	for _ in $(seq 100); do
		rdma resource show cm_id 2>/dev/null | grep -qE "state LISTEN.*src-addr \[?$1\]?:$2( |$)" && return 0
		sleep 0.1
	done
	return 1
}
# wait_log FILE TEXT: until a background program says it is ready.
wait_log() {
	local _
	for _ in $(seq 100); do
		grep -q "$2" "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	return 1
}
# show LOG: what sibcm saw of the kernel's CM messages and its counters.
show() { grep -E 'REQ received|REP received|primary path|rdma_cm header|REJ received|engine:|softib:|QP ' "$1" | sed 's/^/  | /'; }
# sibcm_ok NAME LOG RC: sibcm exited 0 and said PASS.
sibcm_ok() {
	if [ "$3" = 0 ] && grep -q '^sibcm: PASS' "$2"; then pass "$1"; else
		fail "$1" "sibcm exit $3: $(grep -m1 '^sibcm: FAIL' "$2")" "$2"
	fi
}

# --- active: sibcm connects to a ucmatose server ------------------------------
# active NAME PORT SIZE PORTSPACE [KADDR SADDR [dreq]]: with dreq, sibcm
# sends a DREQ too once its data is done (it may cross ucmatose's).
active() {
	local name=$1 port=$2 size=$3 ps=$4 k=${5:-$K} s=${6:-$S} dreq=${7:-} spid src rc
	local want=(cm_rx_msgs/req:1 cm_tx_msgs/rep:1 cm_rx_msgs/rtu:1 cm_tx_msgs/dreq:1 cm_rx_msgs/drep:1)
	[ "$dreq" ] && want=(cm_rx_msgs/req:1 cm_tx_msgs/rep:1 cm_rx_msgs/rtu:1 cm_rx_msgs/dreq:1)
	timeout 60 ucmatose -b "$k" -p "$port" -P "$ps" -C 10 -S "$size" >"$log/$name.ucmatose" 2>&1 &
	spid=$!
	pids+=("$spid")
	if ! wait_listen "$k" "$port"; then
		fail "$name" "ucmatose did not listen on $k:$port" "$log/$name.ucmatose"
		return
	fi
	snap
	sibcm_ns -p "$port" -P "$ps" -C 10 -S "$size" ${dreq:+--dreq} connect "$k" >"$log/$name.sibcm" 2>&1
	rc=$?
	show "$log/$name.sibcm"
	wait $spid
	src=$?
	sibcm_ok "$name-sibcm" "$log/$name.sibcm" $rc
	if [ $src = 0 ] && grep -q 'return status 0' "$log/$name.ucmatose"; then pass "$name-ucmatose"; else
		fail "$name-ucmatose" "ucmatose server exit $src" "$log/$name.ucmatose"
	fi
	echo "NOTE $name: kernel CM counters moved: $(moved)"
	want_delta "$name-kernel-cm" "${want[@]}"
}
active active 7471 100 tcp
# 3000 octets: three packets per message at the rxe port's 1024-octet MTU.
active active-multipacket 7475 3000 tcp
# RDMA_PS_IB: service ID 0x00000000013f0000|port, the same header.
active active-ps-ib 7478 100 ib
# IPv6: RoCEv2 GIDs that are the addresses themselves, an IPv6 rdma_cm header.
active active-ipv6 7480 100 tcp $K6 $S6
# Both ends disconnect as soon as their data is done: DREQs may cross.
active active-both-dreq 7482 100 tcp $K $S dreq

# --- passive: a ucmatose client connects to sibcm ----------------------------
passive() { # passive NAME PORT [KADDR SADDR]
	local name=$1 port=$2 k=${3:-$K} s=${4:-$S} lpid lrc crc
	sibcm_ns -p $port -C 10 -S 100 --dreq listen >"$log/$name.sibcm" 2>&1 &
	lpid=$!
	pids+=("$lpid")
	if ! wait_log "$log/$name.sibcm" "listening on"; then
		fail "$name" "sibcm did not listen" "$log/$name.sibcm"
		return
	fi
	snap
	timeout 60 ucmatose -s "$s" -b "$k" -p $port -C 10 -S 100 >"$log/$name.ucmatose" 2>&1
	crc=$?
	wait $lpid
	lrc=$?
	show "$log/$name.sibcm"
	sibcm_ok "$name-sibcm" "$log/$name.sibcm" $lrc
	if [ $crc = 0 ] && grep -q 'return status 0' "$log/$name.ucmatose"; then pass "$name-ucmatose"; else
		fail "$name-ucmatose" "ucmatose client exit $crc" "$log/$name.ucmatose"
	fi
	echo "NOTE $name: kernel CM counters moved: $(moved)"
	want_delta "$name-kernel-cm" cm_tx_msgs/req:1 cm_rx_msgs/rep:1 cm_tx_msgs/rtu:1 cm_rx_msgs/dreq:1 cm_tx_msgs/drep:1
}
passive passive 7472
passive passive-ipv6 7481 $K6 $S6

# --- the kernel's REJ 8 for a service ID nobody listens on --------------------
snap
sibcm_ns -p 7999 --expect-reject 8 connect $K >"$log/rej8-kernel.sibcm" 2>&1
rc=$?
show "$log/rej8-kernel.sibcm"
sibcm_ok kernel-rej8-sibcm "$log/rej8-kernel.sibcm" $rc
want_delta kernel-rej8-counted cm_rx_msgs/req:1 cm_tx_msgs/rej:1

# --- our REJs, read by rdma_cm -------------------------------------------------
# The engine's own REJ 8 (a port sibcm does not listen on), then each reason
# our CM sends, given by sibcm to successive REQs: NoQP, NoResources,
# InvalidCommID, InvalidTransportType, StaleConnection, InvalidGID,
# ConsumerReject.
reasons=(1 3 6 9 10 12 28)
ourrej() { # ourrej NAME PORT REASON: one ucmatose client must be refused with REASON
	local name=$1 port=$2 r=$3 out rc
	snap
	out="$log/$name.ucmatose"
	timeout 30 ucmatose -s $S -b $K -p "$port" -C 1 >"$out" 2>&1
	rc=$?
	if grep -q "RDMA_CM_EVENT_REJECTED, error: $r\$" "$out" && (($(delta cm_rx_msgs/rej) == 1)); then
		pass "$name"
	else
		fail "$name" "ucmatose exit $rc: $(grep -m1 'event:' "$out"); kernel cm_rx_msgs/rej +$(delta cm_rx_msgs/rej)" "$out"
	fi
}
sibcm_ns -p 7473 --reject "$(
	IFS=,
	echo "${reasons[*]}"
)" listen >"$log/rej.sibcm" 2>&1 &
lpid=$!
pids+=("$lpid")
if wait_log "$log/rej.sibcm" "listening on"; then
	ourrej our-rej8-unlistened 7474 8
	for r in "${reasons[@]}"; do ourrej "our-rej$r" 7473 "$r"; done
	wait $lpid
	sibcm_ok our-rej-sibcm "$log/rej.sibcm" $?
else
	fail our-rej "sibcm did not listen" "$log/rej.sibcm"
fi

# --- our REJ of the kernel's REP (28), giving up on it (REJ 4), and the REJ 6
# of an engine that restarted after its REQ -------------------------------------
abandon() { # abandon NAME PORT MODE REASON
	local name=$1 port=$2 mode=$3 r=$4 spid src
	timeout 60 ucmatose -b $K -p "$port" -C 1 >"$log/$name.ucmatose" 2>&1 &
	spid=$!
	pids+=("$spid")
	if ! wait_listen $K "$port"; then
		fail "$name" "ucmatose did not listen on $K:$port" "$log/$name.ucmatose"
		return
	fi
	snap
	sibcm_ns -p "$port" -C 1 --abandon "$mode" connect $K >"$log/$name.sibcm" 2>&1
	sibcm_ok "$name-sibcm" "$log/$name.sibcm" $?
	wait $spid
	src=$?
	if grep -q "RDMA_CM_EVENT_REJECTED, error: $r\$" "$log/$name.ucmatose" && (($(delta cm_rx_msgs/rej) >= 1)); then
		pass "$name-ucmatose"
	else
		fail "$name-ucmatose" "ucmatose server exit $src: $(grep -m1 'event:' "$log/$name.ucmatose"); kernel cm_rx_msgs/rej +$(delta cm_rx_msgs/rej)" "$log/$name.ucmatose"
	fi
	echo "NOTE $name: kernel CM counters moved: $(moved)"
}
abandon rej-of-rep 7476 reply 28
abandon rej4-after-rep 7477 timeout 4
abandon rej6-after-restart 7479 restart 6

# --- both devices carried the traffic -------------------------------------------
hw() { cat "/sys/class/infiniband/$DEV/ports/1/hw_counters/$1" 2>/dev/null || echo 0; }
echo "NOTE $DEV hw counters: sent_pkts $(hw sent_pkts) rcvd_pkts $(hw rcvd_pkts)" \
	"$(for c in duplicate_request out_of_seq_request rcvd_seq_err ack_deferred retry_exceeded_err send_err rcvd_rnr_err completer_retry_err; do printf '%s %s ' $c "$(hw $c)"; done)"
if (($(hw sent_pkts) > 0 && $(hw rcvd_pkts) > 0)); then pass rxe-carried; else
	fail rxe-carried "$DEV sent $(hw sent_pkts) and received $(hw rcvd_pkts) packets: the traffic went elsewhere"
fi
if (($(hw rcvd_seq_err) == 0 && $(hw retry_exceeded_err) == 0 && $(hw send_err) == 0)); then
	pass rxe-no-errors
else
	fail rxe-no-errors "rxe saw sequence errors, exceeded retries or send errors (see NOTE)"
fi
echo "NOTE rdmacm hook took $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f s", b - a }')"
