#!/usr/bin/env bash
# The hand-off recipes under the real tools (the test bed's systemd boot, see
# scripts/rxe-testbed.sh), each first without, then with its file:
# ipoibd@ib0 owns its addresses (--addr, and a P_Key child ib0.8001 with its
# own), and
#  - systemd-networkd runs a catch-all .network (Name=*, DHCP): without
#    dist/networkd/ib0-unmanaged.network it takes ib0; with it, ib0 and
#    ib0.8001 are "unmanaged" and keep ipoibd's addresses and routes across
#    restarts of ipoibd and of networkd;
#  - NetworkManager (installed in the image, not enabled; a conf of the test
#    bed's keeps it off the underlay): without
#    dist/NetworkManager/ipoibd-unmanaged.conf it takes ib0 as "connected
#    (externally)" and changes nothing on its own, but `nmcli device connect
#    ib0` makes ib0 its own; with the conf (added to the test bed's list, not
#    replacing it), ib0 and ib0.8001 are "unmanaged", connect is refused, and
#    restarts of ipoibd and of NetworkManager change no address or route.
# Runs after ipoibd-unit.sh (which stops ipoibd@ib0); prints one RESULT line
# per check.
# No pipefail: a grep -q that matches early would fail its pipeline.
set -u
. "$(dirname "$0")/../testbed-lib.sh"

U=ipoibd@ib0.service
log=/tmp/unmanaged-hook
net=/etc/systemd/network
nmconf=/etc/NetworkManager/conf.d
mkdir -p "$log" "$nmconf"

pass() { echo "RESULT PASS unmanaged/$1"; }
fail() {
	echo "RESULT FAIL unmanaged/$1: $(printf '%s' "$2" | tr -s '\n\t' '  ' | cut -c1-200)"
	snap | sed 's/^/  ib0| /'
}
note() { echo "NOTE $*"; }
cleanup() { systemctl stop NetworkManager.service "$U" 2>/dev/null; }
trap cleanup EXIT

# snap: what ipoibd put on its interfaces: addresses (without lifetimes)
# and the routes of every table.
snap() {
	local d
	for d in ib0 ib0.8001; do
		ip -o addr show dev "$d" 2>&1 | sed 's/\\.*//; s/ *valid_lft.*//; s/^[0-9]*: //'
		ip -4 route show table all dev "$d" 2>&1 | sed "s/^/$d /"
		ip -6 route show table all dev "$d" 2>&1 | sed "s/^/$d /"
	done
}
# sysctls: the IPv6 settings a manager changes, for the notes.
sysctls() { for k in addr_gen_mode accept_ra disable_ipv6; do printf '%s=%s ' "$k" "$(cat /proc/sys/net/ipv6/conf/ib0/$k)"; done; }
# ipoibd's: its addresses on both, and its link-local address the only one.
has_addrs() {
	local a4 a6 c4
	a4=$(ip -o -4 addr show dev ib0) a6=$(ip -o -6 addr show dev ib0) c4=$(ip -o -4 addr show dev ib0.8001) || return 1
	[[ $a4 == *" 192.168.100.1/24 "* && $a6 == *" fd00:100::1/64 "* && $c4 == *" 192.168.101.1/24 "* ]] &&
		[ "$(ip -6 -o addr show dev ib0 scope link | awk '{print $4}')" = fe80::200:ffff:a00:1/64 ]
}
# quiet SECONDS: no address or route event on ib0 or ib0.8001 for SECONDS
# (grep -w: ib0.8001 holds the word ib0).
quiet() {
	timeout "$1" ip -o monitor address route >"$log/monitor" 2>&1
	! grep -qw ib0 "$log/monitor"
}
events() { grep -w ib0 "$log/monitor" | head -n 3; }
nd_setup() { networkctl list --no-legend --no-pager "$1" 2>/dev/null | awk '{ print $5 }'; }
nd_is() { [ "$(nd_setup "$1")" = "$2" ]; }
nd_managed() { local s; s=$(nd_setup "$1") && [ -n "$s" ] && [ "$s" != unmanaged ] && [ "$s" != pending ]; }
nm_state() { nmcli -t -f DEVICE,STATE device 2>/dev/null | awk -F: -v d="$1" '$1 == d { print $2 }'; }
nm_is() { local d s=$1; shift; for d; do [ "$(nm_state "$d")" = "$s" ] || return 1; done; }
# nm_lists: NetworkManager has found both interfaces (an ipoibd restart
# removes them first, a NetworkManager restart forgets them).
nm_lists() { [ -n "$(nm_state ib0)" ] && [ -n "$(nm_state ib0.8001)" ]; }
ll_gone() { ! ip -6 -o addr show dev ib0 | grep -q 'fe80::200:ffff:a00:1/'; }

t0=$EPOCHREALTIME
# ipoibd owns the addresses from here: --addr, networkd's recipe for ib0
# (the other way) gone, a catch-all .network instead.
systemctl stop "$U"
echo 'IPOIBD_FLAGS="--provider softib --underlay 10.0.0.1 --mode connected --addr 192.168.100.1/24 --addr fd00:100::1/64 --softib-pkeys 0xffff,0x8001 --child 0x8001=192.168.101.1/24"' \
	>/etc/ipoibd/ib0.env
rm -f "$net/50-ipoibd-ib0.network"
printf '[Match]\nName=*\n[Network]\nDHCP=yes\n' >"$net/99-catchall.network"
networkctl reload

# --- networkd, the catch-all alone: it takes ib0 and ib0.8001.
systemctl start "$U"
if within 20 nd_managed ib0 && within 5 nd_managed ib0.8001; then
	pass networkd-catchall-takes-ib0
else
	fail networkd-catchall-takes-ib0 "networkctl: ib0 $(nd_setup ib0), ib0.8001 $(nd_setup ib0.8001)"
fi
note "networkd without ib0-unmanaged.network: ib0 $(nd_setup ib0), ib0.8001 $(nd_setup ib0.8001);" \
	"ib0 has $(ip -o addr show dev ib0 | awk '{print $4}' | tr '\n' ' ')"

# --- with dist/networkd/ib0-unmanaged.network (a restart makes new links):
# unmanaged, ipoibd's addresses and link-local address alone, and a restart
# of networkd changes nothing.
cp dist/networkd/ib0-unmanaged.network "$net/10-ipoibd-ib0.network"
networkctl reload
t=$EPOCHREALTIME
systemctl restart "$U"
if within 20 nd_is ib0 unmanaged && within 5 nd_is ib0.8001 unmanaged && within 10 has_addrs && quiet 3; then
	pass networkd-unmanaged
	note "ipoibd restart to unmanaged with its addresses (and 3 s quiet): $(elapsed "$t")"
else
	fail networkd-unmanaged "networkctl: ib0 $(nd_setup ib0), ib0.8001 $(nd_setup ib0.8001); events: $(events)"
fi
snap >"$log/before"
systemctl restart systemd-networkd.service
if within 10 nd_is ib0 unmanaged && within 5 nd_is ib0.8001 unmanaged && quiet 3 && snap >"$log/after" &&
	cmp -s "$log/before" "$log/after"; then
	pass networkd-unmanaged-restart
else
	fail networkd-unmanaged-restart "networkctl: ib0 $(nd_setup ib0); events: $(events); changed: $(diff "$log/before" "$log/after" | grep '^[<>]' | head -n 3)"
fi

# --- NetworkManager without dist's conf (the test bed's own keeps it off the
# underlay networkd runs): it takes ib0 as connected (externally) and
# changes nothing...
printf '[keyfile]\nunmanaged-devices=interface-name:ua;interface-name:ub\n' >"$nmconf/00-testbed-underlay.conf"
snap >"$log/before"
s0=$(sysctls)
t=$EPOCHREALTIME
systemctl start NetworkManager.service
if within 30 nm_is "connected (externally)" ib0 && quiet 3 && snap >"$log/after" && cmp -s "$log/before" "$log/after"; then
	pass nm-without-conf-changes-nothing
	note "NetworkManager start to ib0 connected (externally), 3 s quiet: $(elapsed "$t")"
else
	fail nm-without-conf-changes-nothing "nmcli: ib0 $(nm_state ib0), ib0.8001 $(nm_state ib0.8001); events: $(events); changed: $(diff "$log/before" "$log/after" | grep '^[<>]' | head -n 3)"
fi
note "NetworkManager without ipoibd-unmanaged.conf: $(nmcli -t -f DEVICE,STATE,CONNECTION device | tr '\n' ' '); ib0 $s0-> $(sysctls)"
# ... but ib0 is its to take: connect puts its own link-local address in
# place of ipoibd's.
out=$(nmcli device connect ib0 2>&1)
if within 20 nm_is connected ib0 && within 10 ll_gone; then
	pass nm-without-conf-connect-takes-ib0
else
	fail nm-without-conf-connect-takes-ib0 "nmcli device connect ib0: $out; nmcli: ib0 $(nm_state ib0)"
fi
note "after nmcli device connect ib0: ib0 $(nm_state ib0); $(ip -o addr show dev ib0 | sed 's/\\.*//; s/^[0-9]*: //' | tr -s ' ' | tr '\n' ';')"
nmcli device disconnect ib0 >/dev/null 2>&1

# --- with dist/NetworkManager/ipoibd-unmanaged.conf: reload conf, as the
# file says, makes both unmanaged; the underlay stays unmanaged (its list
# and ours add up).
cp dist/NetworkManager/ipoibd-unmanaged.conf "$nmconf/"
systemctl restart "$U"
nmcli general reload conf
if within 15 nm_is unmanaged ib0 ib0.8001 ua ub && within 10 has_addrs; then
	pass nm-unmanaged
else
	fail nm-unmanaged "nmcli: $(nmcli -t -f DEVICE,STATE device | tr '\n' ' ')"
fi
# An ipoibd restart: NetworkManager finds the new interfaces, leaves them
# unmanaged and their addresses and routes alone.
systemctl restart "$U"
if within 10 has_addrs && snap >"$log/before" && within 20 nm_lists && quiet 3 &&
	nm_is unmanaged ib0 ib0.8001 && snap >"$log/after" && cmp -s "$log/before" "$log/after"; then
	pass nm-unmanaged-ipoibd-restart
else
	fail nm-unmanaged-ipoibd-restart "nmcli: ib0 $(nm_state ib0), ib0.8001 $(nm_state ib0.8001); events: $(events); changed: $(diff "$log/before" "$log/after" | grep '^[<>]' | head -n 3)"
fi
# connect is refused, and so is nothing changed.
s0=$(sysctls)
if out=$(nmcli device connect ib0 2>&1); then
	fail nm-connect-refused "nmcli device connect ib0 succeeded: $out"
elif quiet 2 && nm_is unmanaged ib0 && snap >"$log/after" && cmp -s "$log/before" "$log/after"; then
	pass nm-connect-refused
else
	fail nm-connect-refused "nmcli: ib0 $(nm_state ib0); events: $(events); changed: $(diff "$log/before" "$log/after" | grep '^[<>]' | head -n 3)"
fi
note "nmcli device connect ib0 with the conf: $out"
# A NetworkManager restart: the same.
t=$EPOCHREALTIME
systemctl restart NetworkManager.service
if within 30 nm_lists && quiet 3 && nm_is unmanaged ib0 ib0.8001 && snap >"$log/after" && cmp -s "$log/before" "$log/after"; then
	pass nm-unmanaged-nm-restart
	note "NetworkManager restart to both found, 3 s quiet: $(elapsed "$t")"
else
	fail nm-unmanaged-nm-restart "nmcli: ib0 $(nm_state ib0), ib0.8001 $(nm_state ib0.8001); events: $(events); changed: $(diff "$log/before" "$log/after" | grep '^[<>]' | head -n 3)"
fi
note "ib0's IPv6 settings with the conf, before and after the NetworkManager restart: $s0-> $(sysctls)"
note "unmanaged checks took $(elapsed "$t0")"
