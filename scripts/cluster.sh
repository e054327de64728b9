#!/usr/bin/env bash
# A cluster of network namespaces on one bridge, each host with an underlay
# address and (when started) one ipoibd over softib. The demo, the
# benchmarks and the end-to-end tests all build their hosts with this.
#
#   cluster.sh up NAME N            make the bridge and N hosts (NAME-h1..hN)
#   cluster.sh start NAME K [FLAG]  start ipoibd on host K; waits until it answers
#   cluster.sh stop NAME K [SIG]    stop host K's daemon (default SIGTERM) and wait
#   cluster.sh exec NAME K CMD...   run a command on host K
#   cluster.sh log NAME K           print host K's daemon log
#   cluster.sh loss NAME K PCT      drop PCT % of fabric datagrams arriving at host K
#   cluster.sh down NAME            stop every daemon, remove every namespace
#
# Host K has underlay 10.N0.0.K/24 on eth0 (MTU 9000) where N0 is the
# cluster's number (CLUSTER_NET, default 77); `start` gives the IPoIB
# interface ib0 the addresses 192.168.N0.K/24 and fd00:N0::K/64 unless
# --addr flags are passed. IPOIBD names the binary (default: bin/ipoibd).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
IPOIBD=${IPOIBD:-$here/bin/ipoibd}
net=${CLUSTER_NET:-77}
rundir=/run/ipoibd-cluster

die() { echo "cluster: $*" >&2; exit 1; }

host() { echo "$1-h$2"; }

up() {
	local name=$1 n=$2 k
	[ -d "$rundir/$name" ] && die "cluster $name exists; run: $0 down $name"
	mkdir -p "$rundir/$name"
	echo "$net" >"$rundir/$name/net"
	ip netns add "$name-br"
	ip -n "$name-br" link add br0 type bridge
	ip -n "$name-br" link set br0 up
	for ((k = 1; k <= n; k++)); do
		local h
		h=$(host "$name" "$k")
		ip netns add "$h"
		ip link add "$name-v$k" type veth peer name eth0 netns "$h"
		ip link set "$name-v$k" netns "$name-br"
		ip -n "$name-br" link set "$name-v$k" master br0 mtu 9000 up
		ip -n "$h" link set lo up
		ip -n "$h" link set eth0 mtu 9000 up
		ip -n "$h" addr add "10.$net.0.$k/24" dev eth0
	done
}

start() {
	local name=$1 k=$2
	shift 2
	[ -x "$IPOIBD" ] || die "no ipoibd binary at $IPOIBD (run make build)"
	net=$(cat "$rundir/$name/net")
	local h addrs=() ifname=ib0 prev="" ifns
	h=$(host "$name" "$k")
	ifns=$h # where the interface (and its control socket) lives
	for a in "$@"; do
		[ "$prev" = --ifname ] && ifname=$a
		[ "$prev" = --netns ] && ifns=$a
		prev=$a
	done
	if [[ " $* " != *" --addr "* ]]; then
		addrs=(--addr "192.168.$net.$k/24" --addr "fd00:$net::$k/64")
	fi
	ip netns exec "$h" "$IPOIBD" --underlay "10.$net.0.$k" "${addrs[@]}" "$@" \
		>>"$rundir/$name/h$k.log" 2>&1 &
	echo $! >"$rundir/$name/h$k.pid"
	# Ready when the control socket answers; give up if the daemon exits.
	local tries
	for ((tries = 0; tries < 200; tries++)); do
		if ip netns exec "$ifns" "$IPOIBD" show --ifname "$ifname" >/dev/null 2>&1; then
			return 0
		fi
		kill -0 "$(cat "$rundir/$name/h$k.pid")" 2>/dev/null || break
		sleep 0.05
	done
	cat "$rundir/$name/h$k.log" >&2
	die "ipoibd on $h did not come up"
}

stop() {
	local name=$1 k=$2 sig=${3:-TERM} pid
	[ -f "$rundir/$name/h$k.pid" ] || return 0
	pid=$(cat "$rundir/$name/h$k.pid")
	rm -f "$rundir/$name/h$k.pid"
	kill -"$sig" "$pid" 2>/dev/null || return 0
	# wait only works for our own children; poll for the others.
	while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
}

# loss drops a share of the UDP datagrams of the fabric arriving at host K,
# with nftables (this kernel has no netem).
loss() {
	local name=$1 k=$2 pct=$3
	ip netns exec "$(host "$name" "$k")" nft -f - <<-EOF
		table inet fabricloss
		delete table inet fabricloss
		table inet fabricloss {
			chain input {
				type filter hook input priority 0;
				udp dport 4791 numgen random mod 1000 < $((pct * 10)) counter drop
			}
		}
	EOF
}

down() {
	local name=$1 f k
	if [ -d "$rundir/$name" ]; then
		for f in "$rundir/$name"/h*.pid; do
			[ -e "$f" ] || continue
			k=${f##*/h}
			stop "$name" "${k%.pid}" TERM
		done
	fi
	for f in $(ip netns list | awk '{print $1}' | grep -E "^$name-(br|h[0-9]+)$" || true); do
		ip netns del "$f"
	done
	rm -rf "${rundir:?}/$name"
}

cmd=${1:-}
[ $# -ge 2 ] || die "usage: $0 up|start|stop|exec|log|down NAME ..."
shift
case $cmd in
up) [ $# -eq 2 ] || die "usage: $0 up NAME N"; up "$@" ;;
start) [ $# -ge 2 ] || die "usage: $0 start NAME K [ipoibd flags]"; start "$@" ;;
stop) [ $# -ge 2 ] || die "usage: $0 stop NAME K [SIGNAL]"; stop "$@" ;;
exec)
	[ $# -ge 3 ] || die "usage: $0 exec NAME K CMD..."
	h=$(host "$1" "$2")
	shift 2
	exec ip netns exec "$h" "$@"
	;;
log) cat "$rundir/$1/h$2.log" ;;
loss) [ $# -eq 3 ] || die "usage: $0 loss NAME K PERCENT"; loss "$@" ;;
down) down "$1" ;;
*) die "unknown command $cmd" ;;
esac
