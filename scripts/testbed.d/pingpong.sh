#!/usr/bin/env bash
# softib <-> rxe on the wire, judged by rdma-core's own programs on the real
# kernel: ibv_{rc,uc,ud,srq}_pingpong on an rxe device against sibpingpong
# (softib) in both roles, over an IPv4 and an IPv6 underlay (both RoCEv2
# GID types), message sizes from 1 octet to 64 KiB (multi-packet RC/UC
# messages at MTU 1024 and 4096). rxe works only in the initial network
# namespace and softib does not care, so the hook makes its own veth pair:
# rxe on the end in the initial namespace, softib on the end in a namespace.
# va/vb/rxe0/rxe1 are left alone (a control pingpong between rxe0 and
# rxe1 only makes QPs of its own). Every run's counters show no ICRC,
# framing, key or RNR error on either side, and a sequence NAK in at most
# one run (one packet the guest lost or reordered); in a run where neither
# side's ACK timer fired and nothing was lost, rxe (which counts a packet
# only after its ICRC check) must have received exactly the packets softib
# sent and sent exactly those softib received (srq, which ends with
# messages in flight to QPs already gone, within one message and ACK per
# QP); and dmesg has no rxe warning.
#
# PINGPONG_QUICK=1 runs one small case per pingpong, role and IP version.
set -uo pipefail

NS=sibpp RXE=rxepp IFA=ppa IFB=ppb
A4=198.51.100.1 B4=198.51.100.2 A6=fd00:5151::1 B6=fd00:5151::2
log=/tmp/pingpong-hook
rm -rf "$log"
mkdir -p "$log"
T0=$EPOCHREALTIME

pass() { echo "RESULT PASS pingpong/$1"; }
fail() { echo "RESULT FAIL pingpong/$1: $(printf '%s' "$2" | tr -s '\n\t' '  ' | cut -c1-220)"; }
# Show a log on the console, indented so it can never look like a RESULT.
show() { sed 's/^/  | /' "$@"; }

cleanup() {
	local p
	for p in $(jobs -p); do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	rdma link del "$RXE" 2>/dev/null
	ip link del "$IFA" 2>/dev/null
	ip netns del "$NS" 2>/dev/null
}
trap cleanup EXIT

# No DAD for the link-local addresses either: they appear at link up, so the
# RoCE GID table is complete before the first run instead of changing under
# it a second or two later.
setup() {
	cleanup
	ip netns add "$NS" &&
		ip link add "$IFA" mtu 9000 type veth peer name "$IFB" mtu 9000 &&
		sysctl -qw "net.ipv6.conf.$IFA.accept_dad=0" &&
		ip link set "$IFB" netns "$NS" &&
		ip netns exec "$NS" sysctl -qw "net.ipv6.conf.$IFB.accept_dad=0" &&
		ip addr add "$A4/24" dev "$IFA" &&
		ip addr add "$A6/64" dev "$IFA" nodad &&
		ip link set "$IFA" up &&
		ip -n "$NS" link set lo up &&
		ip -n "$NS" addr add "$B4/24" dev "$IFB" &&
		ip -n "$NS" addr add "$B6/64" dev "$IFB" nodad &&
		ip -n "$NS" link set "$IFB" up &&
		rdma link add "$RXE" type rxe netdev "$IFA"
}

# gid_index FULL-GID: the index of that RoCE v2 GID on $RXE (sysfs writes
# GIDs as eight groups of four digits).
gid_index() {
	local g v t
	for g in /sys/class/infiniband/$RXE/ports/1/gids/*; do
		read -r v <"$g" 2>/dev/null || continue
		[ "$v" = "$1" ] || continue
		read -r t <"/sys/class/infiniband/$RXE/ports/1/gid_attrs/types/${g##*/}" 2>/dev/null || continue
		[ "$t" = "RoCE v2" ] && {
			echo "${g##*/}"
			return 0
		}
	done
	return 1
}

if ! out=$(setup 2>&1); then
	fail setup "$out"
	exit 0
fi
G4="" G6=""
for _ in $(seq 50); do
	G4=$(gid_index 0000:0000:0000:0000:0000:ffff:c633:6401) &&
		G6=$(gid_index fd00:5151:0000:0000:0000:0000:0000:0001) && break
	sleep 0.2
done
if [ -z "$G4" ] || [ -z "$G6" ]; then
	fail setup "no RoCE v2 GID for $A4 or $A6 on $RXE (got '$G4' '$G6')"
	exit 0
fi
# Resolve the peer's addresses once before the runs: rxe resolves the
# destination MAC while the QP goes to RTR, and a first run that waited
# for IPv6 neighbor discovery there failed now and then ("Failed to modify
# QP to RTR", about one run in ten), a test-bed start-up race, not a fault
# of either side's RDMA.
if ! out=$(ping -c 1 -W 2 "$B4" 2>&1 && ping -6 -c 1 -W 2 "$B6" 2>&1); then
	fail setup "the softib side's addresses do not answer ping: $out"
	exit 0
fi
pass setup
echo "NOTE pingpong: $RXE on $IFA, GID index IPv4 $G4, IPv6 $G6; softib on $IFB in netns $NS"

declare -A SIB RXED # softib's counters and rxe's deltas, summed over the passed runs
HW=/sys/class/infiniband/$RXE/ports/1/hw_counters
TIMING="" LOSSES="" COUNTERS_BAD=""
dmesg -c >/dev/null 2>&1
port=18515
NRUN=0 NPASS=0

# listening FILE PID: wait until sibpingpong says it listens (or died).
listening() {
	local _
	for _ in $(seq 200); do
		[[ $(<"$1") == *"listening on"* ]] && return 0
		kill -0 "$2" 2>/dev/null || return 1
		sleep 0.05
	done
	return 1
}

# close_to A B SLACK: A and B differ by at most SLACK. (Not testbed-lib.sh's
# within, a poll with a deadline.)
close_to() { local d=$(($1 - $2)); ((d < 0)) && d=$((-d)); ((d <= $3)); }

# run V KIND ROLE SIZE ITERS MTU: one pingpong; ROLE is which side softib
# plays (sib-server: rdma-core is the client).
run() {
	local v=$1 k=$2 role=$3 size=$4 iters=$5 mtu=$6
	# The TCP exchange goes over IPv4 either way: rdma-core's server listens
	# on the first address getaddrinfo gives, 0.0.0.0.
	local b=$B4 g=$G4 name args sargs spid rc src why="" lim
	[ "$v" = v6 ] && b=$B6 g=$G6
	name=$v/$k/$role/s$size-n$iters
	args=(-d "$RXE" -g "$g" -p "$port" -s "$size" -n "$iters")
	sargs=(-t "$k" -a "$b" -p "$port" -s "$size" -n "$iters")
	if [ "$k" != ud ]; then
		name+=-m$mtu
		args+=(-m "$mtu")
		sargs+=(-m "$mtu")
	fi
	lim=40
	local f=$log/${name//\//_} t=$EPOCHREALTIME
	NRUN=$((NRUN + 1))
	local -A r0 r1 sc
	local x
	for x in "$HW"/*; do read -r "r0[${x##*/}]" <"$x"; done
	# -e: rdma-core sleeps on CQ events instead of spinning on a vCPU that
	# rxe and softib need (the wire is the same).
	args+=(-e)
	if [ "$role" = sib-server ]; then
		timeout $lim ip netns exec "$NS" sibpingpong "${sargs[@]}" --timeout $((lim - 5))s >"$f.sib" 2>&1 &
		spid=$!
		if listening "$f.sib" $spid; then
			timeout $lim "ibv_${k}_pingpong" "${args[@]}" $B4 >"$f.rdma" 2>&1
			rc=$?
		else
			rc=99
			echo "sibpingpong never listened" >"$f.rdma"
		fi
		[ "$rc" = 0 ] || kill $spid 2>/dev/null
		wait $spid
		src=$?
	else
		# sibpingpong retries until the server listens.
		timeout $lim "ibv_${k}_pingpong" "${args[@]}" >"$f.rdma" 2>&1 &
		spid=$!
		timeout $lim ip netns exec "$NS" sibpingpong "${sargs[@]}" --timeout $((lim - 5))s $A4 >"$f.sib" 2>&1
		src=$?
		[ "$src" = 0 ] || kill $spid 2>/dev/null
		wait $spid
		rc=$?
	fi
	port=$((port + 1))
	for x in "$HW"/*; do read -r "r1[${x##*/}]" <"$x"; done
	local c n val
	while read -r c n val; do
		[ "$c" = counter ] && sc[$n]=$val
	done <"$f.sib"
	[ "$src" = 0 ] || why+="sibpingpong exit $src: $(grep -v '^counter ' "$f.sib" | tail -n 1); "
	# Its stdout (the addresses) is flushed at exit, after the error that
	# went to stderr: show every line but the addresses.
	[ "$rc" = 0 ] || why+="ibv_${k}_pingpong exit $rc: $(grep -v ' address: ' "$f.rdma" | tr '\n' ' ' | cut -c1-400); "
	local took
	took=$(awk -v a="$t" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f s", b - a }')
	# The run's counters. rxe counts rcvd_pkts only for packets that passed
	# its header and ICRC checks; softib counts every datagram it got.
	local rd="" sd="" timing=0 bad=""
	for n in "${!r1[@]}"; do
		r1[$n]=$((r1[$n] - ${r0[$n]:-0}))
		((r1[$n] == 0)) || rd+="$n+${r1[$n]} "
	done
	for n in "${!sc[@]}"; do
		((sc[$n] == 0)) || case $n in rx_packets | rx_bytes | tx_packets | tx_bytes | tx_sends | qp.tx_* | qp.rx_* | qp.acks_sent) ;; *) sd+="$n=${sc[$n]} " ;; esac
	done
	# UC cannot recover a lost packet: the message is gone and the
	# pingpong programs wait for it forever. A UC run that hangs so goes
	# once more (and the note says so); a second loss fails.
	if [ -n "$why" ] && [ "$k" = uc ] && [ -z "${UC_RETRY:-}" ]; then
		echo "NOTE $name: UC lost a message ($why); UC does not retransmit, so the run goes once more"
		UC_RETRY=1 run "$v" "$k" "$role" "$size" "$iters" "$mtu"
		return
	fi
	if [ -n "$why" ]; then
		fail "$name" "$why"
		echo "  rxe: $rd"
		echo "  rdma-core:"
		show "$f.rdma"
		echo "  sibpingpong (counters that are not 0):"
		grep -v '^counter .* 0$' "$f.sib" | show
		echo "  drops on the way (veth, backlog):"
		{
			ip -s link show "$IFA"
			ip netns exec "$NS" ip -s link show "$IFB"
			cat /proc/net/softnet_stat
			dmesg | tail -n 5
		} 2>&1 | show
		return
	fi
	NPASS=$((NPASS + 1))
	pass "$name"
	for n in "${!r1[@]}"; do RXED[$n]=$((${RXED[$n]:-0} + r1[$n])); done
	for n in "${!sc[@]}"; do SIB[$n]=$((${SIB[$n]:-0} + sc[$n])); done
	# One sequence NAK in a run is one packet lost or reordered on the
	# way through the guest (once in about 15 make test runs, with go-back-N
	# recovering it): noted, and that run's packet counts need not be
	# exact. More than one such run fails the counters below: a PSN bug
	# would show in run after run.
	local seqok=0
	if ((${sc[qp.seq_naks_sent]:-0} + ${sc[qp.seq_naks_received]:-0} == 1)); then
		seqok=1
		LOSSES+="$name "
	fi
	# Errors whatever the timing: ICRC, framing, keys, sequence, RNR.
	for n in rx_drop_bad_icrc rx_drop_malformed rx_drop_pkey rx_drop_qkey rx_drop_too_long rx_drop_wrong_source \
		rx_drop_no_recv_buffer rx_drop_mad_source_share rx_drop_uc_incomplete cq_overrun tx_error qp.seq_naks_sent qp.seq_naks_received \
		qp.rnr_naks_sent qp.rnr_naks_received; do
		[[ $seqok = 1 && $n == qp.seq_naks_* ]] && continue
		((${sc[$n]:-0} == 0)) || bad+="softib $n ${sc[$n]}; "
	done
	for n in rcvd_seq_err rcvd_rnr_err send_rnr_err retry_exceeded_err retry_rnr_exceeded_err send_err link_downed; do
		[[ $seqok = 1 && $n == rcvd_seq_err ]] && continue
		((${r1[$n]:-0} == 0)) || bad+="rxe $n +${r1[$n]}; "
	done
	# An ACK that came after the timeout (a loaded TCG guest) makes a sender
	# retransmit: duplicates and late packets follow, but nothing was lost.
	timing=$((${sc[qp.ack_timeouts]:-0} + ${r1[completer_retry_err]:-0}))
	# srq ends untidily: a side posts its next send when an earlier one
	# completes while the count is short, so up to one message a QP (and
	# its ACK) is still in flight when the other side has met its count
	# and destroyed its QPs. Those packets may be counted by one side
	# only; no more may differ.
	local slack=0
	[ "$k" = srq ] && slack=$((16 * ((size + mtu - 1) / mtu + 1)))
	if ((timing == 0 && seqok == 0)); then
		close_to "${r1[rcvd_pkts]:-0}" "${sc[tx_packets]:-0}" $slack || bad+="rxe received ${r1[rcvd_pkts]:-0} packets, softib sent ${sc[tx_packets]:-0} (slack $slack); "
		close_to "${r1[sent_pkts]:-0}" "${sc[rx_packets]:-0}" $slack || bad+="rxe sent ${r1[sent_pkts]:-0} packets, softib received ${sc[rx_packets]:-0} (slack $slack); "
		[ -z "$sd" ] || bad+="softib $sd; "
		for n in duplicate_request out_of_seq_request; do
			((${r1[$n]:-0} == 0)) || bad+="rxe $n +${r1[$n]}; "
		done
	elif ((timing > 0)); then
		TIMING+="$name "
	fi
	[ -z "$bad" ] || COUNTERS_BAD+="$name: $bad"
	echo "NOTE $name: $(grep -h 'iters in' "$f.rdma"), run $took; rxe: ${rd}; softib: tx ${sc[tx_packets]:-0} rx ${sc[rx_packets]:-0} ${sd}"
}

# Sizes: one octet (a packet with three octets of pad), 64 KiB in 64
# packets at MTU 1024 (UC 62), 64 KiB less three in 16 packets at MTU
# 4096 (the last with pad); UD up to the port MTU; srq 16 KiB on 16 QPs. Iterations: as many as fit the
# hook's time under TCG (rxe moves ~26 MB/s, a round trip costs ~10 ms).
cases() {
	local k=$1
	if [ "${PINGPONG_QUICK:-0}" = 1 ]; then
		[ "$k" = ud ] && echo "1024 50 0" || echo "4096 50 1024"
		return
	fi
	case $k in
	rc) printf '%s\n' "1 500 1024" "65536 20 1024" "65533 20 4096" ;;
	# UC at MTU 1024: 62 packets, what one GSO send of softib carries. A
	# 64-packet message leaves as two sends, and about one UC run in five
	# then lost a whole message in rxe with every packet counted there
	# (two sends from two CPUs can cross on veth's per-CPU backlogs; UC
	# cannot recover, so the pingpong hangs). RC recovers and keeps 64 KiB.
	uc) printf '%s\n' "1 500 1024" "63488 20 1024" "65533 20 4096" ;;
	# 64 KiB messages on all 16 QPs at once overran the TCG guest (ACKs
	# late on both sides, a retransmission collapse); 16 KiB still takes
	# four packets a message.
	srq) printf '%s\n' "1 500 1024" "16384 50 4096" ;;
	ud) printf '%s\n' "1 500 0" "4096 100 0" ;;
	esac
}
# Control: the same small RC pingpong between the test bed's two rxe
# devices, so that rxe's own retransmissions (its completer's timer) can
# be told from softib's doing.
control() {
	local a=${TESTBED_DEV_A:-rxe0} b=${TESTBED_DEV_B:-rxe1} ga=${TESTBED_GID_INDEX_A:-} gb=${TESTBED_GID_INDEX_B:-} p x
	[ -n "$ga" ] && [ -n "$gb" ] && [ -d "/sys/class/infiniband/$a" ] || return 0
	local -A c0 c1
	for x in /sys/class/infiniband/{"$a","$b"}/ports/1/hw_counters/completer_retry_err; do read -r "c0[$x]" <"$x"; done
	p=$port
	port=$((port + 1))
	timeout 40 ibv_rc_pingpong -d "$a" -g "$ga" -p "$p" -s 1 -n 500 -e >"$log/control.srv" 2>&1 &
	local spid=$!
	for x in $(seq 100); do
		[ -n "$(ss -Hltn "sport = :$p")" ] && break
		sleep 0.05
	done
	timeout 40 ibv_rc_pingpong -d "$b" -g "$gb" -p "$p" -s 1 -n 500 -e "${TESTBED_IP_A:-192.0.2.1}" >"$log/control.cli" 2>&1
	wait $spid
	local r=""
	for x in "${!c0[@]}"; do
		read -r "c1[$x]" <"$x"
		r+="${x#/sys/class/infiniband/} +$((c1[$x] - c0[$x])) "
	done
	echo "NOTE pingpong control rxe-rxe rc s1 n500: $(grep -h 'iters in' "$log/control.cli"); ${r//\/ports\/1\/hw_counters\//.}"
}
control

for k in rc uc ud srq; do
	while read -r size iters mtu; do
		for v in v4 v6; do
			for role in sib-server sib-client; do
				run $v $k $role "$size" "$iters" "$mtu"
			done
		done
	done <<<"$(cases $k)"
done

# --- counters: every packet arrived, nothing was dropped or repeated --------
rxe_line="" sib_line=""
for n in $(printf "%s\n" "${!RXED[@]}" | sort); do rxe_line+="$n+${RXED[$n]} "; done
for n in $(printf '%s\n' "${!SIB[@]}" | sort); do sib_line+="$n=${SIB[$n]} "; done
echo "NOTE pingpong rxe counter deltas (passed runs): $rxe_line"
echo "NOTE pingpong softib counters (sum of the passed runs): $sib_line"
echo "NOTE pingpong runs with an ACK timeout (retransmissions, exact packet counts not required): ${TIMING:-none}"
echo "NOTE pingpong runs with one sequence NAK (a packet lost or reordered in the guest, recovered): ${LOSSES:-none}"
(($(wc -w <<<"$LOSSES") <= 1)) || COUNTERS_BAD+="sequence NAKs in more than one run: $LOSSES; "
warn=$(dmesg 2>/dev/null | grep -iE 'rxe|rdma|icrc' | grep -v -iE 'loaded|registered|added|link|set active|ignoring netdev|changed mtu' | head -n 5)
[ -z "$warn" ] || COUNTERS_BAD+="dmesg: $warn; "
((${RXED[sent_pkts]:-0} > 0 && ${SIB[tx_packets]:-0} > 0)) || COUNTERS_BAD+="nothing was sent; "
if [ -z "$COUNTERS_BAD" ]; then pass counters; else
	echo "NOTE pingpong counters: $COUNTERS_BAD"
	fail counters "$COUNTERS_BAD"
fi
echo "NOTE pingpong: $NPASS of $NRUN runs passed in $(awk -v a="$T0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f s", b - a }')"
