#!/usr/bin/env bash
# One ipoibd over two verbs ports, on the real kernel's RDMA stack: a third
# soft-RoCE device, rxe2, on vc (192.0.2.3), one end of a veth pair whose
# other end vd tc joins to va's wire (vb's frames to vc's MAC and all of its
# multicast go to vd, all of vd's to vb), so that the daemon in namespace
# dpa runs over rxe2 (its primary) and rxe0, and a single-port peer in dpb
# over rxe1 (vb). Not a macvlan or VLAN of va: the RoCE GID table of a port
# also holds the addresses of its netdev's upper devices, so rxe0 would
# carry vc's GID and rdma_cm would bind rxe2's address on rxe0. rxe2 is
# the primary because vc can go down alone: va down would take vb's
# carrier, so the peer's port, with it. Kernel CM, connected mode (RC).
# Failover: vc down makes rxe2 leave ACTIVE; rxe0 must take over while the
# peer's pings and an iperf3 go on; vc up, rxe2 takes over again
# (--primary-reselect always). Checks: setup, up, show-ports, ping4, ping6,
# iperf3, rxe2-down, failover, failover-pings4, failover-pings6,
# failover-iperf3, failback, failback-ping, clean-exit, no-leaks. NOTE
# lines: the failover's time (seen in show, and the daemon's own), pings
# lost in a row, iperf3's Gbit/s.
set -uo pipefail
. "$(dirname "$0")/../testbed-lib.sh"

B=${TESTBED_IP_B:-192.0.2.2} C=192.0.2.3
VA=${TESTBED_NETDEV_A:-va} VB=${TESTBED_NETDEV_B:-vb} VC=vc VD=vd
D0=${TESTBED_DEV_A:-rxe0} D1=${TESTBED_DEV_B:-rxe1} D2=rxe2
ns=dpa peer=dpb log=/tmp/dualport-hook
mkdir -p "$log"
pid="" ppid="" pings=()

pass() { echo "RESULT PASS dualport/$1"; }
fail() {
	echo "RESULT FAIL dualport/$1: $(printf '%s' "$2" | tr -s '\n\t' '  ' | cut -c1-200)"
	for f in "$log"/*.log; do [ -f "$f" ] && { echo "--- $f"; tail -n 15 "$f" | sed 's/^/  | /'; }; done
}
check() { # check NAME CMD...: PASS if CMD succeeds
	local name=$1 out
	shift
	if out=$("$@" 2>&1); then pass "$name"; else fail "$name" "$(echo "$out" | tail -n 3)"; fi
}
inns() { ip netns exec "$ns" "$@"; }
inpeer() { ip netns exec "$peer" "$@"; }
portstate() { cat "/sys/class/infiniband/$1/ports/1/state" 2>/dev/null; }
port_active() { [[ $(portstate "$1") == *ACTIVE* ]]; }
port_not_active() { [[ $(portstate "$1") != *ACTIVE* ]]; }
# shows REGEX...: one show of the dual-port daemon matches every REGEX
# (extended). Read whole first: grep -q ending the pipe early would fail
# it under pipefail.
shows() {
	local out r
	out=$(inns ipoibd show 2>/dev/null) || return
	for r; do grep -Eq "$r" <<<"$out" || return; done
}
# ports ACTIVE RAIL N: show names ACTIVE active, RAIL a rail, N failovers.
ports() { shows "port $1(:1)? active" "port $2(:1)? rail" "failovers $3 "; }
# jfield NAME: a number from the dual-port daemon's show -j.
jfield() { inns ipoibd show -j 2>/dev/null | grep -o "\"$1\":[0-9.e+-]*" | head -n1 | cut -d: -f2; }
gid_v2() { # gid_v2 DEV IPV4: DEV has the RoCEv2 GID ::ffff:IPV4
	local a b c d want g i
	IFS=. read -r a b c d <<<"$2"
	want=$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' "$a" "$b" "$c" "$d")
	for g in /sys/class/infiniband/"$1"/ports/1/gids/*; do
		read -r i <"$g" 2>/dev/null || continue
		[ "$i" = "$want" ] || continue
		[ "$(cat "/sys/class/infiniband/$1/ports/1/gid_attrs/types/${g##*/}" 2>/dev/null)" = "RoCE v2" ] && return 0
	done
	return 1
}
# vc_paths: what rxe2 needs to reach vb and back across the veth, as the
# test bed's setup does for va and vb (both ends live in the initial
# namespace): rxe routes with the netdev as the output interface, so vc's
# packets take table 101; the peer's to C take table 100 out of vb. The
# neighbours are static (ARP between two local addresses is not wanted).
# A link going down loses its routes and neighbours: run again after up.
vc_paths() {
	ip route replace "$B" dev "$VC" src "$C" table 101 &&
		ip neigh replace "$B" lladdr "$(cat "/sys/class/net/$VB/address")" dev "$VC" nud permanent &&
		ip neigh replace "$C" lladdr "$(cat "/sys/class/net/$VC/address")" dev "$VB" nud permanent
}
setup() {
	modprobe -a sch_ingress cls_flower act_mirred || return
	ip link add "$VC" mtu 9000 type veth peer name "$VD" mtu 9000 || return
	# B's packets arrive at vc from a local address (as at va and vb).
	echo 1 >"/proc/sys/net/ipv4/conf/$VC/accept_local"
	echo 0 >"/proc/sys/net/ipv4/conf/$VC/rp_filter"
	echo 1 >"/proc/sys/net/ipv6/conf/$VD/disable_ipv6"
	ip link set "$VD" up || return
	# The switch: what vc sends leaves by va (to vb); what arrives at va
	# for vc's MAC goes to vc instead, and multicast to both. (vc's own
	# multicast does not reach va: both are the one daemon's ports.)
	tc qdisc add dev "$VD" ingress || return
	tc filter add dev "$VD" ingress pref 1 flower action mirred egress redirect dev "$VA" || return
	tc qdisc add dev "$VA" ingress || return
	tc filter add dev "$VA" ingress pref 1 flower dst_mac "$(cat "/sys/class/net/$VC/address")" \
		action mirred egress redirect dev "$VD" || return
	tc filter add dev "$VA" ingress pref 2 flower dst_mac 01:00:00:00:00:00/01:00:00:00:00:00 \
		action mirred egress mirror dev "$VD" || return
	ip addr add "$C/32" dev "$VC" || return
	ip link set "$VC" up || return
	ip rule add pref 9 iif lo oif "$VC" lookup 101 || return
	ip rule add pref 12 iif lo to "$C" lookup 100 || return
	ip route replace "$C" dev "$VB" src "$B" table 100 || return
	vc_paths || return
	rdma link add "$D2" type rxe netdev "$VC" || return
	within 10 port_active "$D2" || {
		echo "$D2 not ACTIVE: $(portstate "$D2")"
		return 1
	}
	within 10 gid_v2 "$D2" "$C" || {
		echo "$D2 has no RoCEv2 GID for $C"
		return 1
	}
	# C on rxe2 alone (a macvlan's address would be on rxe0 too).
	if gid_v2 "$D0" "$C"; then
		echo "$D0 has $C's GID too"
		return 1
	fi
}
teardown() {
	rdma link delete "$D2" 2>/dev/null
	ip link del "$VC" 2>/dev/null
	tc qdisc del dev "$VA" ingress 2>/dev/null
	ip rule del pref 9 2>/dev/null
	ip rule del pref 12 2>/dev/null
	ip route del "$C" table 100 2>/dev/null
	ip route flush table 101 2>/dev/null
	ip neigh del "$C" dev "$VB" 2>/dev/null
	for n in "$ns" "$peer"; do
		# an iperf3 -s left waiting by a failed check
		ip netns pids "$n" 2>/dev/null | xargs -r kill 2>/dev/null
		ip netns del "$n" 2>/dev/null
	done
}
stop() { # stop the daemons; fails if one did not exit 0 on SIGTERM
	local p st=0
	for p in "${pings[@]}"; do kill -INT "$p" 2>/dev/null; done
	for p in $pid $ppid; do kill -TERM "$p" 2>/dev/null; done
	for p in $pid $ppid; do
		wait "$p" 2>/dev/null || {
			echo "pid $p exited $?"
			st=1
		}
	done
	pid="" ppid=""
	return $st
}
trap 'stop >/dev/null; teardown' EXIT

# max_lost FILE: the most pings lost in a row in ping's output FILE (seqs
# from 1 to the transmitted count, the leading and trailing gaps too).
max_lost() {
	awk '/packets transmitted/ { tx = $1 }
		/icmp_seq=/ { if (match($0, /icmp_seq=[0-9]+/)) { s = substr($0, RSTART + 9, RLENGTH - 9) + 0; got[s] = 1 } }
		END { if (!tx) { print "?"; exit }
			for (i = 1; i <= tx; i++) { if (got[i]) run = 0; else if (++run > max) max = run }
			print max + 0 " of " tx }' "$1"
}

# logged_after T0 REASON: when the dual-port daemon logged its failover
# for REASON, in ms after T0 (an $EPOCHREALTIME; the log's times are UTC):
# what the daemon took, without the slow polls of show under TCG.
logged_after() {
	awk -v t0="$1" -v why="reason=\"$2\"" 'index($0, "msg=failover") && index($0, why) &&
		match($0, /T[0-9][0-9]:[0-9][0-9]:[0-9.]+Z/) {
			split(substr($0, RSTART + 1, RLENGTH - 2), f, ":")
			d = f[1] * 3600 + f[2] * 60 + f[3] - (t0 % 86400)
		} END { if (d == "") print "?"; else printf "%.0f ms\n", d * 1000 }' "$log/$ns.log"
}

teardown
for n in "$ns" "$peer"; do ip netns add "$n"; done
if ! why=$(setup 2>&1); then
	echo "setup failed; what the guest has:"
	ip -d link show "$VC" 2>&1 | sed 's/^/  | /'
	rdma link 2>&1 | sed 's/^/  | /'
	dmesg | tail -n 10 | sed 's/^/  | /'
	fail setup "$why"
	exit 0
fi
pass setup
echo "NOTE $D2 on $VC ($C, joined to $VA's wire by tc): $(portstate "$D2"); rdma link: $(rdma link | tr '\n' ';')"
baseline=$(rdma resource show 2>&1)
echo "rdma resource show before the daemons: $baseline"

# --- 1. up: both ports listed, one active, the other a rail.
ipoibd --provider verbs --device "$D2" --device "$D0" --netns "$ns" --cm kernel --peers ipoibd-only \
	--addr 192.168.62.1/24 --addr fd00:62::1/64 >"$log/$ns.log" 2>&1 &
pid=$!
ipoibd --provider verbs --device "$D1" --netns "$peer" --cm kernel --peers ipoibd-only \
	--addr 192.168.62.2/24 --addr fd00:62::2/64 >"$log/$peer.log" 2>&1 &
ppid=$!
if ! answering "$pid" "$ns" || ! answering "$ppid" "$peer"; then
	fail up "a daemon did not come up"
	exit 0
fi
pass up
inns ipoibd show
if ports "$D2" "$D0" 0; then pass show-ports; else
	fail show-ports "want $D2 active, $D0 rail, failovers 0: $(inns ipoibd show | grep -E 'port |failovers')"
fi

# --- 2. both ways, both families; a short iperf3.
check ping4 sh -c "ip netns exec $ns ping -c 3 -i 0.2 -W 3 192.168.62.2 && ip netns exec $peer ping -c 3 -i 0.2 -W 3 192.168.62.1"
check ping6 sh -c "ip netns exec $ns ping -c 3 -i 0.2 -W 3 fd00:62::2 && ip netns exec $peer ping -c 3 -i 0.2 -W 3 fd00:62::1"
listening() { [ -n "$(inns ss -Hltn 'sport = :5201')" ]; }
inns iperf3 -s -D -1 >/dev/null 2>&1
if ! within 10 listening; then
	fail iperf3 "iperf3 -s did not listen"
elif out=$(inpeer timeout -k 5 40 iperf3 -c 192.168.62.1 -t 3 -f g 2>&1); then
	pass iperf3
	echo "NOTE iperf3 peer->dual $(echo "$out" | awk '/receiver/ { print $7, $8 }')"
	echo "$out" | grep -E 'sec.*bits/sec' | sed 's/^/  | /'
else
	fail iperf3 "$(echo "$out" | tail -n 2)"
fi

# --- 3. failover under pings (both families, 0.1 s) and an iperf3 (the
# dual-port daemon sending, -R).
inns iperf3 -s -D -1 >/dev/null 2>&1
within 10 listening || echo "iperf3 -s did not listen (the failover-iperf3 check will say)"
ip netns exec "$peer" timeout -k 5 40 iperf3 -c 192.168.62.1 -R -t 10 -f g --forceflush >"$log/iperf3-failover.out" 2>&1 &
ipid=$!
# Not through inpeer: $! must be ping's own pid, for its SIGINT.
ip netns exec "$peer" ping -i 0.1 192.168.62.1 >"$log/ping4.out" 2>&1 &
pings+=($!)
ip netns exec "$peer" ping -i 0.1 fd00:62::1 >"$log/ping6.out" 2>&1 &
pings+=($!)
# Under way: two of iperf3's one-second reports, and replies to both pingers.
running() { [ "$(grep -c 'sec.*bits/sec' "$log/iperf3-failover.out")" -ge 2 ] && grep -q icmp_seq "$log/ping4.out" && grep -q icmp_seq "$log/ping6.out"; }
within 15 running || echo "the failover's traffic did not start (iperf3: $(tail -n 1 "$log/iperf3-failover.out"))"
t0=$EPOCHREALTIME
ip link set "$VC" down
if within 10 port_not_active "$D2"; then pass rxe2-down; else fail rxe2-down "$D2 still $(portstate "$D2") with $VC down"; fi
echo "NOTE $D2 after $VC down: $(portstate "$D2") ($(elapsed "$t0"))"
# The rail is down with vc: show says only that rxe0 is active.
failed_over() { shows "port $D0(:1)? active" "port $D2(:1)? down" "failovers 1 "; }
if within 10 failed_over; then
	pass failover
	echo "NOTE failover: logged $(logged_after "$t0" "active port down") after $VC down, seen in show after $(elapsed "$t0"); the switch itself (last_failover_ms) $(jfield last_failover_ms) ms"
else
	fail failover "10 s after $VC down: $(inns ipoibd show | grep -E 'port |failovers' | tr '\n' ';')"
fi
inns ipoibd show | grep -E 'port |failovers'
# The iperf3 (10 s) is the window the pings run through after the failover.
echo "dualport: waiting for the iperf3 across the failover"
wait "$ipid"
irc=$?
echo "dualport: iperf3 exited $irc; stopping the pings"
for p in "${pings[@]}"; do kill -INT "$p" 2>/dev/null; done
for p in "${pings[@]}"; do wait "$p"; done
pings=()
echo "dualport: pings stopped"
for f in 4 6; do
	lost=$(max_lost "$log/ping$f.out")
	echo "NOTE failover: pings$f lost in a row: $lost ($(grep 'packets transmitted' "$log/ping$f.out"))"
	if [[ $lost =~ ^[0-9]+\  ]] && ((${lost%% *} <= 10)); then pass "failover-pings$f"; else
		fail "failover-pings$f" "lost in a row: $lost (at most 10); $(tail -n 2 "$log/ping$f.out")"
	fi
done
if [ "$irc" = 0 ]; then
	pass failover-iperf3
	echo "NOTE iperf3 dual->peer across the failover: $(awk '/receiver/ { print $7, $8 }' "$log/iperf3-failover.out")"
else
	fail failover-iperf3 "exit $irc: $(tail -n 3 "$log/iperf3-failover.out")"
fi
grep -E 'sec.*bits/sec' "$log/iperf3-failover.out" | sed 's/^/  | /'

# --- 4. vc back: the primary takes over again.
t0=$EPOCHREALTIME
ip link set "$VC" up
vc_paths || echo "vc_paths failed after up"
if within 10 port_active "$D2" && within 10 ports "$D2" "$D0" 2; then
	pass failback
	echo "NOTE failback: logged $(logged_after "$t0" "primary port back") after $VC up, seen in show after $(elapsed "$t0"); the switch itself $(jfield last_failover_ms) ms"
else
	fail failback "10 s after $VC up ($D2 $(portstate "$D2")): $(inns ipoibd show | grep -E 'port |failovers' | tr '\n' ';')"
fi
# The peer reaches us at the primary's link address again (both families).
answers() { inpeer ping -c 1 -W 1 192.168.62.1 && inpeer ping -c 1 -W 1 fd00:62::1; }
if within 10 answers; then
	pass failback-ping
	echo "NOTE failback: the peer's pings answered $(elapsed "$t0") after $VC up"
else
	fail failback-ping "10 s after $VC up, no answer from 192.168.62.1 or fd00:62::1"
	echo "the QPs (rdma resource show qp), the dual-port daemon's stats, neigh:"
	rdma resource show qp 2>&1 | sed 's/^/  | /'
	inns ipoibd stats 2>&1 | grep -vw 0 | sed 's/^/  | /'
	inns ipoibd neigh 2>&1 | sed 's/^/  | /'
	inpeer ipoibd neigh 2>&1 | sed 's/^/  | /'
fi
inns ipoibd show | grep -E 'port |failovers'

# --- 5. SIGTERM: both exit 0; nothing left in the kernel.
if stop >"$log/stop.out"; then pass clean-exit; else fail clean-exit "$(cat "$log/stop.out")"; fi
now=$(rdma resource show 2>&1)
if [ "$now" = "$baseline" ]; then pass no-leaks; else
	fail no-leaks "rdma resource show: before: $(echo "$baseline" | tr '\n' ' ') after: $(echo "$now" | tr '\n' ' ')"
fi
