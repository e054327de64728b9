#!/usr/bin/env bash
# The demo: three hosts over softib (two in connected mode, one datagram
# only), pings between every pair over IPv4 and IPv6, iperf3 over RC at
# MTU 65520, and the neighbor and connection tables. Run as root:
# sudo make demo. It removes everything it made, also when a step fails.
#
# IB=1 (sudo make demo IB=1): the same three hosts on an InfiniBand
# subnet. A fourth namespace is the fabric: ibsim simulates a switch and
# the hosts' adapters, OpenSM brings the subnet up, and softib-ibfwd
# switches the hosts' native InfiniBand frames by the tables OpenSM
# programmed. Each ipoibd runs --softib-link ib as its ibsim node (under
# libumad2sim.so): LID, GID and P_Keys from the SM, joins and paths from
# the SA, CM MADs LID-routed.
#
# KEEP=1 (sudo make demo IB=1 KEEP=1): leave the hosts, daemons and, with
# IB=1, the fabric running, and print how to look at them and how to end
# them. The commands after the demo:
#   scripts/demo.sh on K CMD...    run CMD on host K (ipoibd show, ip, ping)
#   scripts/demo.sh ib NODE CMD... (IB=1) run an infiniband-diags or OpenSM
#                                  tool as ibsim node NODE (h1-h3, sm):
#                                  ibstat, saquery, ibroute, smpquery
#   scripts/demo.sh env NODE       (IB=1) print the environment that tool
#                                  needs, to run it by hand
#   scripts/demo.sh down           remove everything the demo left
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# The hosts, their addresses and daemons come from internal/testnet's
# command, which make build puts next to the daemon.
testnet=${TESTNET:-$here/../bin/testnet}
IPOIBD=${IPOIBD:-$here/../bin/ipoibd}
export IPOIBD
name=demo
net=${CLUSTER_NET:-77}
export CLUSTER_NET=$net
# The IB fabric's files while it runs (ibsim's topology, the logs, the
# fabric's pids): in one known place, so that a kept demo can be looked at
# and ended by a later command.
statedir=/run/ipoibd-demo
[ -f "$statedir/cluster-net" ] && [ "${1:-}" != "" ] && net=$(cat "$statedir/cluster-net")

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
ok() { printf '   ok  %s\n' "$*"; }
on() { "$testnet" exec "$name" "$@"; }

ib=${IB:-}
keep=${KEEP:-}
# teardown: the daemons stop first (their exit tells ibsim), then the
# fabric: its own processes only, by the pids the demo wrote (a pid that
# now names another program is left alone).
teardown() {
	"$testnet" down "$name" 2>/dev/null || true
	local pid pids=()
	if [ -f "$statedir/fabric.pids" ]; then
		while read -r pid; do
			case $(cat "/proc/$pid/comm" 2>/dev/null) in ibsim | opensm | softib-ibfwd) pids+=("$pid") ;; esac
		done <"$statedir/fabric.pids"
	fi
	# SIGKILL: OpenSM's own exit can hang on a simulator already gone.
	if ((${#pids[@]})); then
		kill -KILL "${pids[@]}" 2>/dev/null || true
		wait "${pids[@]}" 2>/dev/null || true # our children are reaped here: bash reports no "Killed"
	fi
	rm -rf "$statedir"
	return 0
}

# The InfiniBand subnet (IB=1): hosts h1-h3 and the fabric host h4
# (ibsim, OpenSM, softib-ibfwd), then one ipoibd per host on
# --softib-link ib. ib_judges, at the end, asks the subnet manager what it
# made of them.
GO=${GO:-go}
root=$(cd "$here/.." && pwd)
umad2sim=/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so
fab=4
fab_addr=10.$net.0.$fab
fwd=$fab_addr:4790

# node NAME CMD...: run CMD as ibsim node NAME, in the fabric host; umad2sim
# makes a fake sysfs in a node's working directory. ibsim's remote mode
# (UDP 7070-7080, IBSIM_SERVER_NAME) is the way umad2sim reaches the
# simulator from another network namespace.
node() {
	local n=$1
	shift
	(cd "$simdir" && SIM_HOST=$n LD_PRELOAD=$umad2sim IBSIM_SERVER_NAME=$fab_addr IBSIM_SERVER_PORT=7070 exec \
		"$testnet" exec "$name" "$fab" "$@")
}

# await WHAT CMD...: wait up to 10 s for CMD to succeed.
await() {
	local what=$1
	shift
	for _ in $(seq 100); do
		"$@" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	echo "demo: $what did not happen within 10 s" >&2
	return 1
}

# ibsim binds its sockets after it says it is ready: wait for its UDP port.
# listening K PORT: host K has a TCP socket listening on PORT (a daemonized
# iperf3 server binds after its parent returned).
listening() { on "$1" ss -Hltn "sport = :$2" | grep -q .; }
ibsim_up() { "$testnet" exec "$name" "$fab" cat /proc/net/udp | grep -q ':1B9E '; }

ib_subnet() {
	step "building ipoibd with libibumad (-tags rdma) and the fabric forwarder"
	(cd "$root" && "$GO" build -tags rdma -o bin/ipoibd-rdma ./ipoibd && "$GO" build -o bin/softib-ibfwd ./softib/ibfwd/cmd/softib-ibfwd)
	IPOIBD=$root/bin/ipoibd-rdma

	step "three hosts and the fabric host h$fab on one bridge (underlay 10.$net.0.0/24)"
	"$testnet" up "$name" 4
	mkdir -p "$statedir"
	simdir=$statedir
	echo "$net" >"$simdir/cluster-net"
	printf '%s\n' 'Switch	8 "sw1"' '[1]	"h1"[1]' '[2]	"h2"[1]' '[3]	"h3"[1]' '[4]	"sm"[1]' '' \
		'Hca	1 "h1"' '[1]	"sw1"[1]' '' 'Hca	1 "h2"' '[1]	"sw1"[2]' '' \
		'Hca	1 "h3"' '[1]	"sw1"[3]' '' 'Hca	1 "sm"' '[1]	"sw1"[4]' >"$simdir/net"
	printf 'force_log_flush TRUE\nsweep_interval 0\n' >"$simdir/opensm.conf"

	step "ibsim and OpenSM on h$fab ($fab_addr)"
	(cd "$simdir" && exec "$testnet" exec "$name" "$fab" ibsim -r -l 7070 -n -s net >ibsim.log 2>&1) &
	echo $! >>"$simdir/fabric.pids"
	await "ibsim listening" ibsim_up
	# Not through node: $! must be OpenSM's pid, not a function's subshell.
	(cd "$simdir" && SIM_HOST=sm LD_PRELOAD=$umad2sim IBSIM_SERVER_NAME=$fab_addr IBSIM_SERVER_PORT=7070 \
		OSM_TMP_DIR=$simdir OSM_CACHE_DIR=$simdir exec "$testnet" exec "$name" "$fab" opensm -F opensm.conf -f stdout >opensm.log 2>&1) &
	echo $! >>"$simdir/fabric.pids"
	await "OpenSM's SUBNET UP" grep -q "SUBNET UP" "$simdir/opensm.log"
	ok "OpenSM: SUBNET UP"

	local k st guid lid mode ports=()
	for k in 1 2 3; do
		st=$(node h$k ibstat)
		guid=$(awk '/Port GUID/ {print $3}' <<<"$st")
		lid=$(awk '/Base lid/ {print $3}' <<<"$st")
		ports+=(-port "$guid,$lid@10.$net.0.$k:4791")
		ok "h$k: port GUID $guid, LID $lid (ibstat, as sysfs shows it on hardware)"
	done

	step "softib-ibfwd on $fwd: switching by the tables OpenSM programmed in sw1"
	(cd "$simdir" && IBSIM_SERVER_NAME=$fab_addr IBSIM_SERVER_PORT=7070 exec "$testnet" exec "$name" "$fab" \
		"$root/bin/softib-ibfwd" -listen "$fwd" -sm-node sm -refresh 300ms "${ports[@]}" >fwd.log 2>&1) &
	echo $! >>"$simdir/fabric.pids"
	await "softib-ibfwd forwarding" grep -q "forwarding on" "$simdir/fwd.log"
	cat "$simdir/fwd.log"

	step "one ipoibd per host on --softib-link ib, each its ibsim node"
	for k in 1 2 3; do
		mode=connected
		[ $k = 3 ] && mode=datagram
		(cd "$simdir" && SIM_HOST=h$k LD_PRELOAD=$umad2sim IBSIM_SERVER_NAME=$fab_addr IBSIM_SERVER_PORT=7070 \
			IPOIBD=$IPOIBD "$testnet" start "$name" $k --softib-link ib --softib-fabric "$fwd" --mode $mode)
	done
	for k in 1 2 3; do
		"$testnet" log "$name" $k | grep "InfiniBand subnet" | sed "s/^/   h$k: /"
	done
}

# ib_judges: what OpenSM says of the hosts after the traffic.
ib_judges() {
	local sw g1 g2
	step "OpenSM's judges: sw1's unicast and multicast forwarding tables (ibroute)"
	sw=$(node sm ibswitches | sed -n 's/.* lid \([0-9]*\) .*/\1/p' | head -1)
	node sm ibroute "$sw"
	node sm ibroute -M "$sw"
	step "the SA's path h1 -> h2 (saquery), the one h1's connection took"
	g1=$(node h1 ibstat | awk '/Port GUID/ {print $3}')
	g2=$(node h2 ibstat | awk '/Port GUID/ {print $3}')
	node sm saquery -p --sgid-to-dgid "$(gid "$g1")-$(gid "$g2")" | grep -E 'dlid|slid|sl\.|mtu' |
		while read -r line; do
			case $line in
			mtu.*) echo "		$line  = $(ib_mtu "${line##*.}")" ;;
			*) echo "		$line" ;;
			esac
		done
}

# fwd_counter NAME: the forwarder's counter NAME, which it logs on SIGUSR1.
fwd_counter() {
	local pid lines
	pid=$(sed -n 3p "$simdir/fabric.pids")
	lines=$(grep -c '^counters:' "$simdir/fwd.log" || true)
	kill -USR1 "$pid"
	await "softib-ibfwd's counters" fwd_logged $((lines + 1))
	grep '^counters:' "$simdir/fwd.log" | tail -1 | tr ' ' '\n' | sed -n "s/^$1=//p"
}
fwd_logged() { [ "$(grep -c '^counters:' "$simdir/fwd.log")" -ge "$1" ]; }

# ib_first_pings says why the first IPv6 ping to a host is slow here.
ib_first_pings() {
	echo "   Why the first IPv6 ping to a host takes hundreds of ms here (and IPv4's does not): the"
	echo "   neighbor solicitation goes to the target's solicited-node group, which gets a"
	echo "   multicast forwarding entry on sw1 only when a second port joins it (the sender's"
	echo "   send-only join). OpenSM then programs sw1, but softib-ibfwd reads sw1's tables"
	echo "   every 300 ms (-refresh, with ibroute), so it drops the solicitations until then"
	echo "   and ipoibd sends them again: softib-ibfwd drop_no_mft_entry=$(fwd_counter drop_no_mft_entry)."
	echo "   ARP goes to the broadcast group, set up at start. A switch the SM programs"
	echo "   directly has no such wait. Pings sent while the first waits (every 0.2 s) wait"
	echo "   with it; later ones show the path itself."
}

# ib_throughput says what the RC figure above measures here.
ib_throughput() {
	echo "   Why these are far below make demo's: on this subnet every IB packet goes from"
	echo "   a host to softib-ibfwd and on to the peer (one user-space process switches all"
	echo "   of them, ACKs too), at the SA's 2048-octet path MTU (saquery below; 32 packets per 65520-octet"
	echo "   datagram), on the same cores as both daemons and iperf3. The figure is the"
	echo "   simulated fabric's; make demo (host to host, 4096-octet IB MTU) and"
	echo "   BENCHMARKS.md show softib's datapath."
}

# ib_mtu CODE: saquery's mtu field (selector << 6 | MTU code) in octets.
ib_mtu() {
	local v=$(($1))
	echo "$1: $((128 << (v & 0x3f))) octets (IB MTU code $((v & 0x3f)), selector $((v >> 6)))"
}

# gid GUID: the link-local GID of a port GUID, as saquery takes it.
gid() {
	local h=${1#0x}
	printf 'fe80::%x:%x:%x:%x' $((16#${h:0:4})) $((16#${h:4:4})) $((16#${h:8:4})) $((16#${h:12:4}))
}

# kept: what a kept demo (KEEP=1) prints instead of tearing down.
kept() {
	local d=$here/demo.sh
	step "kept running (KEEP=1): look at it, then end it"
	echo "   $d on 1 $root/bin/ipoibd show          # any command on host 1-3: ip, ping, ipoibd neigh, conn, stats"
	echo "   $d on 1 ping -c 3 fd00:$net::2"
	if [ "$ib" = 1 ]; then
		echo "   $d ib h1 ibstat                       # an IB tool as ibsim node h1-h3 or sm"
		echo "   $d ib sm saquery -p                   # the SA's path records"
		echo "   $d ib sm ibroute -M 2                 # a switch's multicast table (its LID: ib sm ibswitches)"
		echo "   $d env h1                             # the environment those tools need, to run them by hand"
		echo "   logs: $statedir/{ibsim,opensm,fwd}.log; the daemons': $d log K"
	else
		echo "   $d log 1                              # a daemon's log"
	fi
	echo "   $d down                               # end it: daemons, namespaces${ib:+, the fabric}"
}

# finish: on exit, tear down unless KEEP=1.
finish() {
	if [ "$keep" = 1 ]; then
		kept
	else
		teardown
	fi
}

case ${1:-} in
"") ;;
down)
	teardown
	exit 0
	;;
on)
	shift
	exec "$testnet" exec "$name" "$@"
	;;
log)
	exec "$testnet" log "$name" "$2"
	;;
ib)
	[ -f "$statedir/cluster-net" ] || { echo "demo: no InfiniBand demo is kept running (sudo make demo IB=1 KEEP=1)" >&2; exit 1; }
	simdir=$statedir
	shift
	node "$@"
	exit
	;;
env)
	[ -f "$statedir/cluster-net" ] || { echo "demo: no InfiniBand demo is kept running (sudo make demo IB=1 KEEP=1)" >&2; exit 1; }
	echo "cd $statedir && SIM_HOST=${2:-h1} LD_PRELOAD=$umad2sim IBSIM_SERVER_NAME=$fab_addr IBSIM_SERVER_PORT=7070 ip netns exec $name-h$fab"
	exit 0
	;;
*)
	echo "usage: $0 [on K CMD... | log K | ib NODE CMD... | env NODE | down]" >&2
	exit 64
	;;
esac

[ "$(id -u)" = 0 ] || { echo "demo: run as root (sudo make demo): it makes network namespaces and TUN devices" >&2; exit 1; }
[ -x "$testnet" ] || { echo "demo: no $testnet (run make build)" >&2; exit 1; }
# A demo kept running before goes first.
teardown
trap finish EXIT
trap 'echo; echo "demo: FAILED at the step above; daemon logs:" >&2; for k in 1 2 3; do echo "--- h$k" >&2; "$testnet" log "$name" $k >&2 || true; done; [ -n "${simdir:-}" ] && tail -n 5 "$simdir"/*.log >&2' ERR

if [ "$ib" != 1 ]; then
	step "three hosts on one bridge (underlay 10.$net.0.0/24, MTU 9000), one ipoibd each"
	"$testnet" up "$name" 3
	"$testnet" start "$name" 1 --mode connected
	"$testnet" start "$name" 2 --mode connected
	"$testnet" start "$name" 3 --mode datagram
else
	ib_subnet
fi
for k in 1 2 3; do on $k ip -br addr show dev ib0; done

step "routes on h1's ib0"
on 1 ip route show dev ib0
on 1 ip -6 route show dev ib0 | grep -v '^fe80\|^multicast' || true

step "ping every pair over IPv4 and IPv6: the first (address resolution in it), then the mean of 3 more"
for a in 1 2 3; do
	for b in 1 2 3; do
		[ "$a" = "$b" ] && continue
		for dst in "192.168.$net.$b" "fd00:$net::$b"; do
			out=$(on $a ping -c 4 -i 0.2 -W 2 "$dst")
			first=$(awk -F'time=' '/time=/ {split($2, t, " "); print t[1]; exit}' <<<"$out")
			rest=$(awk -F'time=' '/time=/ && ++n > 1 {split($2, t, " "); s += t[1]; k++} END {if (k) printf "%.3f", s / k}' <<<"$out")
			ok "h$a -> $dst  first ${first} ms, then ${rest} ms"
		done
	done
done
[ "$ib" = 1 ] && ib_first_pings

step "iperf3 h1 -> h2 over RC at MTU 65520 (5 s)"
on 2 iperf3 -s -1 -D
await "h2's iperf3 server listening" listening 2 5201
on 1 iperf3 -c "192.168.$net.2" -t 5 -f g | grep -E 'sender|receiver'

step "iperf3 h1 -> h3, the datagram-only host, over UD (3 s)"
on 3 iperf3 -s -1 -D
await "h3's iperf3 server listening" listening 3 5201
on 1 iperf3 -c "192.168.$net.3" -t 3 -f g | grep -E 'sender|receiver'

step "h1: ipoibd show"
on 1 "$IPOIBD" show
step "h1: ipoibd neigh (how each peer is reached, and its MTU)"
on 1 "$IPOIBD" neigh
step "h1: ipoibd conn"
on 1 "$IPOIBD" conn

[ "$ib" = 1 ] && ib_throughput
[ "$ib" = 1 ] && ib_judges
if [ "$keep" = 1 ]; then
	step "done: every step passed"
else
	step "done: every step passed; tearing down"
fi
