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

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
ok() { printf '   ok  %s\n' "$*"; }
on() { "$testnet" exec "$name" "$@"; }

[ "$(id -u)" = 0 ] || { echo "demo: run as root (sudo make demo): it makes network namespaces and TUN devices" >&2; exit 1; }
[ -x "$testnet" ] || { echo "demo: no $testnet (run make build)" >&2; exit 1; }
"$testnet" down "$name" 2>/dev/null || true
ib=${IB:-}
fabric_pids=()
# The daemons stop first (their exit tells ibsim), then the fabric.
cleanup() {
	"$testnet" down "$name"
	((${#fabric_pids[@]})) && kill "${fabric_pids[@]}" 2>/dev/null
	[ -n "${simdir:-}" ] && rm -rf "$simdir"
	return 0
}
trap cleanup EXIT
trap 'echo; echo "demo: FAILED at the step above; daemon logs:" >&2; for k in 1 2 3; do echo "--- h$k" >&2; "$testnet" log "$name" $k >&2 || true; done; [ -n "${simdir:-}" ] && tail -n 5 "$simdir"/*.log >&2' ERR

if [ "$ib" != 1 ]; then
	step "three hosts on one bridge (underlay 10.$net.0.0/24, MTU 9000), one ipoibd each"
	"$testnet" up "$name" 3
	"$testnet" start "$name" 1 --mode connected
	"$testnet" start "$name" 2 --mode connected
	"$testnet" start "$name" 3 --mode datagram
else
	# shellcheck source=scripts/demo-ib.sh
	. "$here/demo-ib.sh"
fi
for k in 1 2 3; do on $k ip -br addr show dev ib0; done

step "routes on h1's ib0"
on 1 ip route show dev ib0
on 1 ip -6 route show dev ib0 | grep -v '^fe80\|^multicast' || true

step "ping every pair over IPv4 and IPv6"
for a in 1 2 3; do
	for b in 1 2 3; do
		[ "$a" = "$b" ] && continue
		for dst in "192.168.$net.$b" "fd00:$net::$b"; do
			rtt=$(on $a ping -c 3 -i 0.2 -W 2 "$dst" | awk -F/ '/^rtt/ {print $5}')
			ok "h$a -> $dst  avg rtt ${rtt} ms"
		done
	done
done

step "iperf3 h1 -> h2 over RC at MTU 65520 (5 s)"
on 2 iperf3 -s -1 -D
sleep 0.2
on 1 iperf3 -c "192.168.$net.2" -t 5 -f g | grep -E 'sender|receiver'

step "iperf3 h1 -> h3, the datagram-only host, over UD (3 s)"
on 3 iperf3 -s -1 -D
sleep 0.2
on 1 iperf3 -c "192.168.$net.3" -t 3 -f g | grep -E 'sender|receiver'

step "h1: ipoibd show"
on 1 "$IPOIBD" show
step "h1: ipoibd neigh (how each peer is reached, and its MTU)"
on 1 "$IPOIBD" neigh
step "h1: ipoibd conn"
on 1 "$IPOIBD" conn

[ "$ib" = 1 ] && ib_judges
step "done: every step passed; tearing down"
