#!/usr/bin/env bash
# The shipped unit under a real systemd (the test bed's systemd boot, see
# scripts/rxe-testbed.sh): ipoibd@ib0 enabled at boot over a softib underlay
# networkd configures, ib0's address from dist/networkd/ib0.network, and a peer
# daemon in the namespace "peer" on the underlay's other end. Prints one
# RESULT line per check.
# No pipefail: a grep -q that matches early would fail its pipeline (the
# writer's SIGPIPE).
set -u
. "$(dirname "$0")/../testbed-lib.sh"

U=ipoibd@ib0.service
log=/tmp/systemd-hook
mkdir -p "$log"
peer=""

pass() { echo "RESULT PASS systemd/$1"; }
fail() {
	echo "RESULT FAIL systemd/$1: $(printf '%s' "$2" | tr -s '\n\t' '  ' | cut -c1-200)"
	journalctl -q -b -u "$U" -n 25 --no-pager 2>&1 | sed 's/^/  | /'
	[ -f "$log/peer.log" ] && tail -n 10 "$log/peer.log" | sed 's/^/  peer| /'
}
note() { echo "NOTE $*"; }
prop() { systemctl show --property="$2" --value "$1"; }
# The journal's position now, and what the unit logged after one.
mark() { journalctl -q -n 1 --show-cursor -o cat | sed -n 's/^-- cursor: //p'; }
logged() { journalctl -q -u "$U" --after-cursor="$1" -o cat; }
# restarted PID: another daemon than PID is in the unit's cgroup (read
# without a fork) and answers.
restarted() {
	local procs
	mapfile -t procs 2>/dev/null </sys/fs/cgroup/system.slice/system-ipoibd.slice/$U/cgroup.procs || return 1
	((${#procs[@]})) && [[ " ${procs[*]} " != *" $1 "* ]] && ipoibd show >/dev/null 2>&1
}
established() { ipoibd conn --wide | grep -q established; }
has_addr() { ip -4 -o addr show dev ib0 2>/dev/null | grep -q ' 192\.168\.100\.1/24 '; }
# one_ll: ib0's only link-local address is ipoibd's (made from its GID,
# nodad): networkd made none of its own.
one_ll() { [ "$(ip -6 -o addr show dev ib0 scope link | grep -c 'fe80::200:ffff:a00:1/64')" = 1 ] && [ "$(ip -6 -o addr show dev ib0 scope link | wc -l)" = 1 ]; }
# networkd's own view: the link is configured (its state file, no D-Bus).
networkd_configured() {
	local i l
	read -r i 2>/dev/null </sys/class/net/ib0/ifindex || return 1
	while read -r l; do [ "$l" = ADMIN_STATE=configured ] && return 0; done <"/run/systemd/netif/links/$i"
	return 1
}
peer_counter() { ip netns exec peer ipoibd stats | awk -v n="$1" '$1 == n { print $2 }'; }
# above NAME N: the peer's counter NAME is above N.
above() { local v; v=$(peer_counter "$1") && [ -n "$v" ] && ((v > $2)); }
# logs PATTERN CURSOR: the unit logged a line matching PATTERN after CURSOR.
logs() { logged "$2" | grep -q "$1"; }
cleanup() {
	[ -n "$peer" ] && kill -TERM "$peer" 2>/dev/null && wait "$peer"
	systemctl stop ipoibd@ib1.service 2>/dev/null
	# ub back home: deleting the namespace would delete the veth pair, and
	# the hooks after this one use ua.
	ip -n peer link set ub netns 1 2>/dev/null
	ip netns del peer 2>/dev/null
	ip netns del tb1 2>/dev/null
	ip netns del pod1 2>/dev/null
}
trap cleanup EXIT

# The peer: the underlay's other end in its own namespace, a daemon there.
# It starts first, while the boot checks run (a start costs seconds under
# TCG).
t=$EPOCHREALTIME
ip netns add peer
ip link set ub netns peer
ip -n peer link set lo up
ip -n peer addr add 10.0.0.2/24 dev ub
ip -n peer link set ub up
ip netns exec peer ipoibd --provider softib --underlay 10.0.0.2 --addr 192.168.100.2/24 \
	--mode connected >"$log/peer.log" 2>&1 &
peer=$!

note "failed units: $(systemctl --failed --plain --no-legend | awk '{print $1}' | tr '\n' ' ')"
systemd-analyze | head -n 1 | sed 's/^/NOTE /'

# --- boot: enabled, it started once the underlay was configured (after
# network-online.target, which networkd-wait-online holds until ua has its
# addresses), and first time: no restart, no failed start before.
st="" nr="" t_start="" t_online=""
while IFS='=' read -r k v; do
	case $k in
	ActiveState) st=$v ;;
	NRestarts) nr=$v ;;
	InactiveExitTimestampMonotonic) t_start=$v ;;
	esac
done < <(systemctl show --property=ActiveState,NRestarts,InactiveExitTimestampMonotonic "$U")
t_online=$(prop network-online.target ActiveEnterTimestampMonotonic)
note "boot: $U $st, NRestarts=$nr, started at ${t_start}us, network-online.target at ${t_online}us"
if [ "$st" = active ] && [ "$nr" = 0 ] && ((t_online > 0 && t_start >= t_online)); then
	pass boot-after-underlay
else
	fail boot-after-underlay "$U is $st with NRestarts=$nr, started at ${t_start}us, network-online.target reached at ${t_online}us"
	systemd-analyze critical-chain "$U" | tail -n +3 | sed 's/^/  chain| /'
fi

# --- networkd gave ib0 its address (dist/networkd/ib0.network) and the
# daemon sees it.
# Each awaited: the daemon follows networkd's address through netlink. ib0
# once came up without its link-local address (no IPv6 address at all,
# already at the daemon's first read, after networkd had configured ib0;
# what removed it is not known): the daemon now puts its own addresses
# back when it begins to watch the link (a NOTE says when it did).
if within 10 has_addr && within 10 networkd_configured && within 10 sh -c "ipoibd show | grep -q 'inet 192\.168\.100\.1/24'" && within 10 one_ll; then
	pass networkd-address
else
	fail networkd-address "ib0: $(ip -o addr show dev ib0 2>&1 | awk '{print $4}' | tr '\n' ' '); networkd: $(cat /run/systemd/netif/links/"$(cat /sys/class/net/ib0/ifindex 2>/dev/null)" 2>&1 | grep STATE)"
	journalctl -q -b -o short-monotonic -u "$U" -u systemd-networkd | grep -iE 'ib0|addr|link' | tail -n 25 | sed 's/^/  journal| /'
fi
note "ipoibd on its addresses: $(journalctl -q -b -u "$U" -o cat | grep -i 'restored' | tr '\n' ' ')"

# --- the peer answers over networkd's address, through a connection.
if within 20 ip netns exec peer ipoibd show && note "the peer answered after $(elapsed "$t")" && out=$(ping -c 3 -i 0.2 -w 20 192.168.100.2 2>&1) &&
	within 10 established; then
	pass ping-peer
else
	fail ping-peer "${out:-the peer daemon did not answer}"
fi

# --- reload: SIGHUP's state line reaches the journal, with its priority and
# the unit's fields.
c=$(mark)
if systemctl reload "$U" && within 10 logs SIGHUP "$c"; then
	pass reload-logs-state
else
	fail reload-logs-state "no SIGHUP line in the journal: $(logged "$c" | tail -n 3)"
fi
j=$(journalctl -q -u "$U" --after-cursor="$c" -o json | grep 'SIGHUP')
why=""
# Native entries: every attribute a field of its own (IPOIBD_IF), the text
# line without its priority prefix as MESSAGE.
for f in '"PRIORITY":"6"' '"SYSLOG_IDENTIFIER":"ipoibd"' '"_SYSTEMD_UNIT":"ipoibd@ib0.service"' '"IPOIBD_IF":"ib0"' \
	'"IPOIBD_MODE":"connected"' '"MESSAGE":"level=INFO msg=\"state (SIGHUP'; do
	grep -qF "$f" <<<"$j" || why+="no $f; "
done
# A warning carries 4: the underlay loses its carrier while the peer's end
# is down.
c=$(mark)
ip -n peer link set ub down
within 10 logs 'port down' "$c" || why+="no 'port down' line while ua had no carrier; "
ip -n peer link set ub up
within 10 logs 'port active' "$c" || why+="no 'port active' line once ua had its carrier back; "
w=$(journalctl -q -u "$U" --after-cursor="$c" -o json | grep 'port down')
grep -qF '"PRIORITY":"4"' <<<"$w" || why+="the carrier-off warning is not PRIORITY 4 ($(cut -c1-200 <<<"$w")); "
# No message kept a "<N>" prefix: journald read them all.
nraw=$(journalctl -q -b -u "$U" -o cat | grep -c '^<[0-7]>')
((nraw == 0)) || why+="$nraw lines kept their <N> prefix; "
note "journal: SIGHUP entry: $(cut -c1-600 <<<"$j")"
if [ -z "$why" ]; then pass journal-fields; else fail journal-fields "$why"; fi

# --- SIGKILL: Restart=on-failure brings it back; networkd configures the new
# ib0 and the peer is reached again.
pid=$(prop "$U" MainPID) n0=$(prop "$U" NRestarts) t=$EPOCHREALTIME
kill -KILL "$pid"
if within 30 restarted "$pid" && systemctl is-active --quiet "$U" && [ "$(prop "$U" NRestarts)" = $((n0 + 1)) ]; then
	pass sigkill-restarted
	note "SIGKILL to active again: $(elapsed "$t")"
else
	fail sigkill-restarted "MainPID $(prop "$U" MainPID) (was $pid), $(prop "$U" ActiveState), NRestarts $(prop "$U" NRestarts) (was $n0)"
fi
if within 10 has_addr && within 10 networkd_configured && out=$(ping -c 1 -w 20 192.168.100.2 2>&1); then
	pass networkd-address-after-restart
	note "SIGKILL to the peer answering over networkd's address: $(elapsed "$t")"
else
	fail networkd-address-after-restart "${out:-ib0: $(ip -o addr show dev ib0 2>&1 | tr '\n' ' ')}"
fi

# --- the watchdog: a stopped daemon stops pinging; systemd kills it (SIGABRT,
# then SIGKILL) and Restart= starts it again. WatchdogSec=5s (the test bed's
# drop-in), RestartSec=2s: bound 5 + 2 + start + slack.
pid=$(prop "$U" MainPID) c=$(mark) t=$EPOCHREALTIME
note "watchdog: WatchdogUSec=$(prop "$U" WatchdogUSec)"
kill -STOP "$pid"

# While the watchdog counts: --netns: ipoibd@ib1 with dist/ipoibd-netns.conf
# puts ib1 in tb1 (its own underlay address, so ib0's state does not
# matter); and Type=notify: the interface answers the moment start returns.
ip netns add tb1
if systemctl start ipoibd@ib1.service && out=$(ip netns exec tb1 ipoibd show ib1 2>&1); then
	pass ready-when-started
else
	fail ready-when-started "ipoibd show right after systemctl start: $out"
fi
if grep -q 'inet 192\.168\.100\.3/24' <<<"$out" && out=$(ip netns exec tb1 ping -c 1 -w 20 192.168.100.2 2>&1); then
	pass netns-dropin
else
	fail netns-dropin "ipoibd@ib1: $(prop ipoibd@ib1.service ActiveState); $(journalctl -q -b -u ipoibd@ib1.service -n 5 -o cat | tr '\n' ' ') ${out:-}"
fi
systemctl stop ipoibd@ib1.service

if within 30 restarted "$pid" && systemctl is-active --quiet "$U" && ! kill -0 "$pid" 2>/dev/null &&
	journalctl -q -u "$U" --after-cursor="$c" | grep -q 'Watchdog timeout'; then
	pass watchdog-restarted
	note "SIGSTOP to active again: $(elapsed "$t")"
else
	kill -CONT "$pid" 2>/dev/null
	fail watchdog-restarted "MainPID $(prop "$U" MainPID) (was $pid), $(prop "$U" ActiveState); journal: $(journalctl -q -u "$U" --after-cursor="$c" | grep -i watchdog | tail -n 2)"
fi

# --- networkd and ipoibd do not fight: after the restarts, ib0's addresses stay put
# (3 s of address events on ib0: none), the peer answers over them.
if within 10 has_addr && out=$(ping -c 1 -w 20 192.168.100.2 2>&1); then
	timeout 3 ip -o monitor address >"$log/monitor" 2>&1
	if grep -q ' ib0 ' "$log/monitor" || ! has_addr || ! one_ll; then
		fail networkd-no-flapping "address events on ib0: $(grep ' ib0 ' "$log/monitor" | head -n 3)"
	else
		pass networkd-no-flapping
	fi
else
	fail networkd-no-flapping "after the restart: ${out:-no 192.168.100.1 on ib0}"
fi
ip -d addr show dev ib0 | sed 's/^/  ib0| /'

# --- a pod's child across `systemctl restart`: the unit's ExecStop sees the
# restart job and does not stop for good, so the child stays in its
# namespace (the same link, its address) and the new daemon serves it again
# from the state file in the preserved RuntimeDirectory. The unit's sandbox
# keeps it out of other namespaces until the operator installs the netns
# drop-in, which the refusal names.
ip netns add pod1
pod() { ip netns exec pod1 "$@"; }
pod_reaches() { pod ping -c 1 -w 2 192.168.100.2; }
link_of() { pod ip -o link show net1 | cut -d: -f1; }
add_pod() { ipoibd child add 0xffff --name net1 --netns /run/netns/pod1 --owner testbed/pod1 --addr 192.168.100.9/24; }
if ! out=$(add_pod 2>&1) && grep -q 'dist/ipoibd-netns.conf' <<<"$out"; then
	pass pod-refusal-names-dropin
else
	fail pod-refusal-names-dropin "child add without the drop-in: $out"
fi
mkdir -p /etc/systemd/system/ipoibd@ib0.service.d
cp /opt/ipoibd/dist/ipoibd-netns.conf /etc/systemd/system/ipoibd@ib0.service.d/netns.conf
systemctl daemon-reload
systemctl restart "$U"
why=""
if add_pod >"$log/child" 2>&1 && within 30 pod_reaches; then
	idx=$(link_of) pid=$(prop "$U" MainPID) t=$EPOCHREALTIME
	systemctl restart "$U" || why+="systemctl restart failed; "
	restarted "$pid" || why+="no new daemon after the restart; "
	[ "$(link_of)" = "$idx" ] || why+="net1 is another link now ($(link_of), was $idx); "
	pod ip -o addr show dev net1 | grep -q ' 192\.168\.100\.9/24 ' || why+="net1 lost its address; "
	within 30 pod_reaches || why+="the pod does not reach the peer after the restart; "
	ipoibd show | grep -q 'child net1 .*owner testbed/pod1' || why+="the new daemon does not list net1 as its child; "
	note "systemctl restart to the pod answering again: $(elapsed "$t")"
else
	why+="child add or first ping: $(tr '\n' ' ' <"$log/child")"
fi
if [ -z "$why" ]; then pass restart-keeps-pod; else fail restart-keeps-pod "$why"; fi

# --- stop: SIGTERM sends DREQs (the peer counts the disconnect), the daemon
# exits cleanly within TimeoutStopSec, ib0 and every route on it are gone.
ping -c 1 -w 10 192.168.100.2 >/dev/null 2>&1
nconn=$(ipoibd conn --wide | grep -c established)
d0=$(peer_counter cm_disconnected)
t=$EPOCHREALTIME
systemctl stop "$U"
note "stop took $(elapsed "$t") with $nconn established connections; the peer's cm_disconnected was $d0"
why=""
[ "$(prop "$U" Result)" = success ] || why+="Result=$(prop "$U" Result); "
((nconn > 0)) || why+="no connection to end; "
within 10 above cm_disconnected "${d0:-0}" ||
	why+="the peer's cm_disconnected stayed at $d0; "
if [ -z "$why" ]; then pass stop-dreq; else fail stop-dreq "$why"; fi
routes=$(ip route show table all | grep -E ' dev ib0( |$)|proto 105')
if ! ip link show ib0 >/dev/null 2>&1 && [ -z "$routes" ] && ! pod ip link show net1 >/dev/null 2>&1 &&
	[ -z "$(ls /run/ipoibd/ib0 2>/dev/null)" ]; then
	pass stop-no-leftovers
else
	fail stop-no-leftovers "ib0: $(ip -o link show ib0 2>&1 | cut -c1-60); pod1's net1: $(pod ip -o link show net1 2>&1 | cut -c1-60); routes: $routes; state: $(ls /run/ipoibd/ib0 2>&1)"
fi
# Where a start's time goes (TCG is slow): systemd's, then the daemon's.
journalctl -q -b -u "$U" -o short-monotonic | grep -E 'Starting|msg=up|Started' | sed 's/^/  starts| /'

