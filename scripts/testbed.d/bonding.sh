#!/usr/bin/env bash
# The kernel's bonding driver given ipoibd's TUN as a slave (what sites
# that bond ib0 and ib1 would try first): an active-backup bond with
# fail_over_mac=active, as IPoIB bonding needs, in a namespace of its own.
# It prints what the kernel did at each step; README's "Two ports" tells
# why ipoibd bonds its ports itself instead.
set -uo pipefail
. "$(dirname "$0")/../testbed-lib.sh"

ns=bnd log=/tmp/bonding-hook.log
pass() { echo "RESULT PASS bonding/$1"; }
fail() { echo "RESULT FAIL bonding/$1: $2"; tail -n 15 "$log"; }
ip netns del "$ns" 2>/dev/null
ip netns add "$ns"
if ! modprobe bonding 2>/tmp/bonding-modprobe; then
	fail module "modprobe bonding: $(cat /tmp/bonding-modprobe)"
	exit 0
fi
pass module
ipoibd --provider verbs --device "${TESTBED_DEV_A:-rxe0}" --netns "$ns" --cm kernel \
	--addr 192.168.61.1/24 >"$log" 2>&1 &
pid=$!
if ! answering "$pid" "$ns"; then
	fail up "ipoibd did not come up"
	exit 0
fi
pass up
inns() { ip netns exec "$ns" "$@"; }
inns ip link add bond0 type bond mode active-backup fail_over_mac active miimon 100
inns ip link set ib0 down
if out=$(inns ip link set ib0 master bond0 2>&1); then
	echo "bonding: the TUN was taken as a slave"
	inns ip -d link show bond0
	inns ip link set bond0 up
	inns ip link set ib0 up
	inns ip addr add 192.168.61.11/24 dev bond0
	cat "/proc/net/bonding/bond0" 2>/dev/null
	echo "bonding: ipoibd's addresses now: $(inns ipoibd show --json | grep -o '"addrs":[^]]*]')"
	pass enslave-accepted
else
	echo "bonding: the TUN was refused as a slave: $out"
	dmesg | grep -i bond | tail -n 5
	pass enslave-refused
fi
kill -TERM "$pid"
wait "$pid"
inns ip link del bond0 2>/dev/null
ip netns del "$ns"
