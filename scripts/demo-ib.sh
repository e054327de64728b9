# shellcheck shell=bash disable=SC2154 # here, name, net, testnet: demo.sh's
# The InfiniBand subnet of the demo (IB=1), sourced by demo.sh: hosts h1-h3
# and the fabric host h4 (ibsim, OpenSM, softib-ibfwd), then one ipoibd
# per host on --softib-link ib. ib_judges, at the end, asks the subnet
# manager what it made of them.

GO=${GO:-go}
root=$here/..
umad2sim=/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so
fab=4
fab_addr=10.$net.0.$fab
fwd=$fab_addr:4790

step "building ipoibd with libibumad (-tags rdma) and the fabric forwarder"
(cd "$root" && "$GO" build -tags rdma -o bin/ipoibd-rdma ./ipoibd && "$GO" build -o bin/softib-ibfwd ./softib/ibfwd/cmd/softib-ibfwd)
IPOIBD=$root/bin/ipoibd-rdma
export IPOIBD

step "three hosts and the fabric host h$fab on one bridge (underlay 10.$net.0.0/24)"
"$testnet" up "$name" 4
# umad2sim makes a fake sysfs in each node's working directory.
simdir=$(mktemp -d /tmp/ipoibd-demo-ib.XXXXXX)
cat >"$simdir/net" <<'NET'
Switch	8 "sw1"
[1]	"h1"[1]
[2]	"h2"[1]
[3]	"h3"[1]
[4]	"sm"[1]

Hca	1 "h1"
[1]	"sw1"[1]

Hca	1 "h2"
[1]	"sw1"[2]

Hca	1 "h3"
[1]	"sw1"[3]

Hca	1 "sm"
[1]	"sw1"[4]
NET
printf 'force_log_flush TRUE\nsweep_interval 0\n' >"$simdir/opensm.conf"
# ibsim's remote mode (UDP 7070-7080): the way umad2sim reaches the
# simulator from another network namespace.
export IBSIM_SERVER_NAME=$fab_addr IBSIM_SERVER_PORT=7070
# node NAME CMD...: run CMD as ibsim node NAME, in the fabric host.
node() {
	local n=$1
	shift
	(cd "$simdir" && SIM_HOST=$n LD_PRELOAD=$umad2sim "$testnet" exec "$name" "$fab" "$@")
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

step "ibsim and OpenSM on h$fab ($fab_addr)"
(cd "$simdir" && exec "$testnet" exec "$name" "$fab" ibsim -r -l 7070 -n -s net >ibsim.log 2>&1) &
fabric_pids+=($!)
# It binds its sockets after it says it is ready: wait for its UDP port.
ibsim_up() { "$testnet" exec "$name" "$fab" cat /proc/net/udp | grep -q ':1B9E '; }
await "ibsim listening" ibsim_up
node sm env OSM_TMP_DIR="$simdir" OSM_CACHE_DIR="$simdir" opensm -F opensm.conf -f stdout >"$simdir/opensm.log" 2>&1 &
fabric_pids+=($!)
await "OpenSM's SUBNET UP" grep -q "SUBNET UP" "$simdir/opensm.log"
ok "OpenSM: SUBNET UP"

ports=()
for k in 1 2 3; do
	st=$(node h$k ibstat)
	guid=$(awk '/Port GUID/ {print $3}' <<<"$st")
	lid=$(awk '/Base lid/ {print $3}' <<<"$st")
	ports+=(-port "$guid,$lid@10.$net.0.$k:4791")
	ok "h$k: port GUID $guid, LID $lid (ibstat, as sysfs shows it on hardware)"
done

step "softib-ibfwd on $fwd: switching by the tables OpenSM programmed in sw1"
(cd "$simdir" && exec "$testnet" exec "$name" "$fab" "$root/bin/softib-ibfwd" -listen "$fwd" -sm-node sm -refresh 300ms "${ports[@]}" >fwd.log 2>&1) &
fabric_pids+=($!)
await "softib-ibfwd forwarding" grep -q "forwarding on" "$simdir/fwd.log"
cat "$simdir/fwd.log"

step "one ipoibd per host on --softib-link ib, each its ibsim node"
for k in 1 2 3; do
	mode=connected
	[ $k = 3 ] && mode=datagram
	(cd "$simdir" && SIM_HOST=h$k LD_PRELOAD=$umad2sim "$testnet" start "$name" $k --softib-link ib --softib-fabric "$fwd" --mode $mode)
done
for k in 1 2 3; do
	"$testnet" log "$name" $k | grep "InfiniBand subnet" | sed "s/^/   h$k: /"
done

# ib_judges: what OpenSM says of the hosts after the traffic.
ib_judges() {
	local sw
	step "OpenSM's judges: sw1's unicast and multicast forwarding tables (ibroute)"
	sw=$(node sm ibswitches | sed -n 's/.* lid \([0-9]*\) .*/\1/p' | head -1)
	node sm ibroute "$sw"
	node sm ibroute -M "$sw"
	step "the SA's path h1 -> h2 (saquery), the one h1's connection took"
	local g1 g2
	g1=$(node h1 ibstat | awk '/Port GUID/ {print $3}')
	g2=$(node h2 ibstat | awk '/Port GUID/ {print $3}')
	node sm saquery -p --sgid-to-dgid "$(gid "$g1")-$(gid "$g2")" | grep -E 'dlid|slid|sl\.|mtu'
}

# gid GUID: the link-local GID of a port GUID, as saquery takes it.
gid() {
	local h=${1#0x}
	printf 'fe80::%x:%x:%x:%x' $((16#${h:0:4})) $((16#${h:4:4})) $((16#${h:8:4})) $((16#${h:12:4}))
}
