#!/usr/bin/env bash
# The kernel's bonding driver given ipoibd's TUN as a slave (what sites
# that bond ib0 and ib1 would try first): an active-backup bond with
# fail_over_mac=active, as IPoIB bonding needs, in a namespace of its own,
# and a peer ipoibd on the other device. It prints what the kernel did at
# each step and checks what README's "Two ports" says of it: the TUN is
# taken as a slave, but the address is the bond's, which ipoibd does not
# answer ARP for, so a ping through the bond gets no answer. Checks:
# module, up, enslave, ping-through-bond-unanswered, arp-not-ours.
set -uo pipefail
. "$(dirname "$0")/../testbed-lib.sh"

ns=bnd peer=bndp log=/tmp/bonding-hook.log
pass() { echo "RESULT PASS bonding/$1"; }
fail() { echo "RESULT FAIL bonding/$1: $2"; tail -n 15 "$log"; }
for n in "$ns" "$peer"; do
	ip netns del "$n" 2>/dev/null
	ip netns add "$n"
done
if ! modprobe bonding 2>/tmp/bonding-modprobe; then
	fail module "modprobe bonding: $(cat /tmp/bonding-modprobe)"
	exit 0
fi
pass module
ipoibd --provider verbs --device "${TESTBED_DEV_A:-rxe0}" --netns "$ns" --cm kernel \
	--addr 192.168.61.1/24 >"$log" 2>&1 &
pid=$!
ipoibd --provider verbs --device "${TESTBED_DEV_B:-rxe1}" --netns "$peer" --cm kernel \
	--addr 192.168.61.2/24 >"$log.peer" 2>&1 &
ppid=$!
if ! answering "$pid" "$ns" || ! answering "$ppid" "$peer"; then
	fail up "ipoibd did not come up"
	exit 0
fi
pass up
ip netns exec "$peer" ping -c 2 -i 0.2 -W 3 192.168.61.1 >/dev/null 2>&1 || echo "bonding: the peers did not ping each other before the bond"
inns() { ip netns exec "$ns" "$@"; }
inns ip link add bond0 type bond mode active-backup fail_over_mac active miimon 100
inns ip link set ib0 down
if out=$(inns ip link set ib0 master bond0 2>&1); then
	echo "bonding: the TUN was taken as a slave"
	inns ip link set bond0 up
	inns ip link set ib0 up
	inns ip addr add 192.168.61.11/24 dev bond0
	inns ip -d link show bond0
	inns ip addr
	cat /proc/net/bonding/bond0 2>/dev/null
	pass enslave
	before=$(inns ipoibd stats -j | grep -o '"solicit_not_ours":[0-9]*' | cut -d: -f2)
	if ip netns exec "$peer" ping -c 3 -i 0.2 -W 2 192.168.61.11; then
		fail ping-through-bond-unanswered "the bond's address answered: README's note is wrong"
	else
		pass ping-through-bond-unanswered
	fi
	after=$(inns ipoibd stats -j | grep -o '"solicit_not_ours":[0-9]*' | cut -d: -f2)
	if ((${after:-0} > ${before:-0})); then pass arp-not-ours; else
		fail arp-not-ours "solicit_not_ours ${before:-?} -> ${after:-?}: the peer's ARP for the bond's address did not reach ipoibd as one not ours"
	fi
else
	echo "bonding: the TUN was refused as a slave: $out"
	dmesg | grep -i bond | tail -n 5
	fail enslave "refused: $out"
fi
kill -TERM "$pid" "$ppid"
wait "$pid" "$ppid"
inns ip link del bond0 2>/dev/null
ip netns del "$ns"
ip netns del "$peer"
