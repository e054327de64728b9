#!/usr/bin/env bash
# ipoibd --provider verbs --cm own on both rxe devices: ipoibd's own CM
# engine on QP1 through ib_umad, RFC 4755 service IDs, the data QPs moved
# to RTS by ipoibd itself. ib_umad cannot give the CM class to us while
# the kernel's CM (ib_cm) is loaded, so this hook unloads rdma_ucm, rdma_cm
# and ib_cm first and loads them again at the end for the hooks after it.
# Checks: the refusal while ib_cm is loaded; ARP/ND over UD; RC and UC
# through our CM; ping v4/v6; 65000-octet pings; iperf3; both sides
# pinging at the same instant (crossing REQs); SIGKILL and restart of
# either side; nothing left behind. One RESULT line per check.
set -uo pipefail
. "$(dirname "$0")/../testbed-lib.sh"

A=${TESTBED_DEV_A:-rxe0} B=${TESTBED_DEV_B:-rxe1}
NA=oca NB=ocb NET=192.168.62 NET6=fd00:62
log=/tmp/ipoibd-owncm
mkdir -p "$log"
declare -A pid=()

pass() { echo "RESULT PASS ipoibd-owncm/$1"; }
fail() {
	echo "RESULT FAIL ipoibd-owncm/$1: $2"
	for f in "$log"/*.log; do [ -f "$f" ] && { echo "--- $f"; tail -n 15 "$f"; }; done
}
check() { # check NAME CMD...: PASS if CMD succeeds
	local name=$1 out
	shift
	if out=$("$@" 2>&1); then pass "$name"; else fail "$name" "$(echo "$out" | tail -n 3 | tr '\n' ' ')"; fi
}

# start K DEV NS FLAGS...: daemon K (1 or 2); ready when its control socket answers.
start() {
	local k=$1 dev=$2 ns=$3
	shift 3
	ipoibd --provider verbs --device "$dev" --netns "$ns" --cm own \
		--addr "$NET.$k/24" --addr "$NET6::$k/64" "$@" >>"$log/$ns.log" 2>&1 &
	pid[$k]=$!
	answering "${pid[$k]}" "$ns"
}
stop() { # stop K SIGNAL: end daemon K; status is the daemon's
	local k=$1 st=0
	[ -n "${pid[$k]:-}" ] || return 0
	kill "-$2" "${pid[$k]}" 2>/dev/null
	wait "${pid[$k]}" 2>/dev/null || st=$?
	unset "pid[$k]"
	return $st
}
stop_all() {
	local st=0
	stop 1 TERM || st=1
	stop 2 TERM || st=1
	return $st
}
reload() { modprobe -a rdma_ucm >/dev/null 2>&1; }
trap 'stop_all; reload; for ns in $NA $NB; do ip netns del $ns 2>/dev/null; done' EXIT

for ns in $NA $NB; do ip netns del "$ns" 2>/dev/null; ip netns add "$ns"; done

# --- while ib_cm is loaded: --cm own refuses in one line naming its users
modprobe -a rdma_ucm >/dev/null 2>&1
out=$(timeout 20 ipoibd --provider verbs --device "$A" --netns "$NA" --cm own --addr "$NET.1/24" 2>&1)
st=$?
line=$(echo "$out" | tail -n 1)
if [ $st = 1 ] && [[ $line == "ipoibd: --cm own cannot run: the kernel's CM module ib_cm is loaded"*rdma_cm* ]]; then
	pass ib_cm-loaded-refused
else
	fail ib_cm-loaded-refused "exit $st: $line"
fi

# --- unload the kernel CM: rdma_ucm, rdma_cm, iw_cm, ib_cm
modprobe -r rdma_ucm rdma_cm iw_cm ib_cm 2>"$log/modprobe.err"
if [ -e /sys/module/ib_cm ]; then
	fail ib_cm-unloaded "ib_cm is still loaded (holders: $(ls /sys/module/ib_cm/holders 2>/dev/null | tr '\n' ' ')): $(cat "$log/modprobe.err")"
	exit 0
fi
pass ib_cm-unloaded
modprobe ib_umad
baseline=$(rdma resource show 2>&1)

# --- connected mode over RC, then UC
for cmmode in rc uc; do
	mode=$cmmode
	upper=$(echo "$cmmode" | tr a-z A-Z)
	if ! { start 1 "$A" $NA --cm-modes "$cmmode" && start 2 "$B" $NB --cm-modes "$cmmode"; }; then
		fail "$mode-up" "a daemon did not come up"
		stop_all
		continue
	fi
	pass "$mode-up"
	check "$mode-show" sh -c "ip netns exec $NA ipoibd show | grep -q 'cm .*libibumad' && ip netns exec $NA ipoibd show | grep -q 'connected mode advertised'"
	if [ $cmmode = rc ]; then
		# A second daemon on the same port: refused in one line, before it
		# makes an interface, and the first one does not notice.
		out=$(timeout 20 ipoibd --provider verbs --device "$A" --netns "$NA" --cm own --ifname ib1 --addr "$NET.9/24" 2>&1)
		st=$?
		line=$(echo "$out" | tail -n 1)
		if [ $st = 1 ] && [[ $line == *"QP1 of $A port 1 is already taken"* ]] && ! ip netns exec $NA ip link show ib1 >/dev/null 2>&1; then
			pass "$mode-second-daemon-refused"
		else
			fail "$mode-second-daemon-refused" "exit $st: $line"
		fi
	fi
	# Both sides at the same instant, before either knows the other:
	# ARP over UD both ways, then crossing REQs.
	ip netns exec $NA ping -c 3 -i 0.2 -W 3 "$NET.2" >"$log/cross-a" 2>&1 &
	pa=$!
	ip netns exec $NB ping -c 3 -i 0.2 -W 3 "$NET.1" >"$log/cross-b" 2>&1 &
	pb=$!
	if wait $pa && wait $pb; then pass "$mode-crossing-ping"; else fail "$mode-crossing-ping" "$(tail -n 2 "$log/cross-a" "$log/cross-b" | tr '\n' ' ')"; fi
	check "$mode-ping4" ip netns exec $NA ping -c 3 -i 0.2 -W 3 "$NET.2"
	check "$mode-ping6" ip netns exec $NB ping -c 3 -i 0.2 -W 3 "$NET6::1"
	# 65000 octets only fit a connection (the UD MTU is the path MTU): it is
	# awaited first. After the crossing REQs it was once not up yet when
	# the pings above ended (at a quiet host); a bound, not an expectation.
	t=$SECONDS
	within 15 sh -c "ip netns exec $NA ipoibd conn --wide | grep -w $upper | grep -q established" ||
		echo "NOTE $mode: no established connection 15 s after the pings"
	echo "NOTE $mode: connection established $((SECONDS - t)) s after the pings"
	if out=$(ip netns exec $NA ping -c 5 -i 0.2 -W 3 -M "do" -s 65000 "$NET.2" 2>&1); then
		pass "$mode-ping-65000"
		echo "$out" | tail -n 1
	else
		fail "$mode-ping-65000" "$(echo "$out" | tail -n 2 | tr '\n' ' ')"
	fi
	check "$mode-conn" sh -c "ip netns exec $NA ipoibd conn --wide | grep -w $upper | grep -q established"
	check "$mode-neigh-via" sh -c "ip netns exec $NA ipoibd neigh | grep '$NET.2 ' | grep -qw $upper"
	if out=$(ip netns exec $NA ping -c 20 -i 0.05 -W 3 "$NET.2" 2>&1); then
		echo "$mode ping RTT: $(echo "$out" | tail -n 1)"
	fi
	if [ $cmmode = rc ]; then
		ip netns exec $NB iperf3 -s -D -1 >/dev/null 2>&1
		within 5 sh -c "ip netns exec $NB ss -ltn | grep -q ':5201 '"
		if out=$(ip netns exec $NA iperf3 -c "$NET.2" -t 3 2>&1); then
			pass "$mode-iperf3"
			echo "$out" | grep -E 'sender|receiver'
		else
			fail "$mode-iperf3" "$(echo "$out" | tail -n 2 | tr '\n' ' ')"
		fi
		# Signals interrupt the CM receiver's wait in umad_recv, which
		# libibumad reports as EIO: that once ended a daemon's CM 14 s
		# after start. SIGURG (Go's own preemption signal, harmless) to
		# each thread of both daemons, 100 rounds; kill(2) with a thread's
		# ID hands the signal to that thread when it can take it. Both
		# CMs are then at work in the restarts below.
		for _ in $(seq 100); do
			for k in 1 2; do
				for t in /proc/${pid[$k]}/task/*; do kill -URG "${t##*/}" 2>/dev/null; done
			done
		done
		if grep -h "umad_recv failed" "$log/$NA.log" "$log/$NB.log"; then
			fail "$mode-cm-outlives-signals" "a daemon's CM receiver ended"
		else
			pass "$mode-cm-outlives-signals"
		fi
		# SIGKILL of either side: no DREQ, the peer's connection is stale.
		# The restarted daemon has a new UD QPN; traffic must find it.
		for k in 2 1; do
			if [ $k = 2 ]; then dev=$B ns=$NB other=$NA dst=$NET.2; else dev=$A ns=$NA other=$NB dst=$NET.1; fi
			stop $k KILL
			if ! start $k "$dev" $ns --cm-modes rc; then
				fail "$mode-sigkill-$k-restart" "the daemon did not come up again"
				continue
			fi
			# The survivor reaches the new daemon over UD first (its
			# announcement), then over a new RC connection: both within
			# the bound, then large packets over RC.
			if within 40 ip netns exec $other ping -c 1 -W 1 "$dst" &&
				within 40 sh -c "ip netns exec $other ipoibd conn --wide | grep -w RC | grep -q established" &&
				ip netns exec $other ping -c 3 -i 0.2 -W 3 -s 20000 "$dst" >/dev/null 2>&1; then
				pass "$mode-sigkill-$k-restart"
			else
				fail "$mode-sigkill-$k-restart" "no RC traffic to the restarted daemon within 40 s: $(ip netns exec $other ipoibd conn 2>&1 | tr '\n' ' ')"
			fi
		done
	fi
	echo "--- ipoibd show, conn and stats on $A ($mode):"
	ip netns exec $NA ipoibd show
	ip netns exec $NA ipoibd conn
	ip netns exec $NA ipoibd stats | grep -E '^cm_|umad' | tr '\n' ' '
	echo
	if stop_all; then pass "$mode-clean-exit"; else fail "$mode-clean-exit" "a daemon exited with an error"; fi
	now=$(rdma resource show 2>&1)
	if [ "$now" = "$baseline" ]; then
		pass "$mode-no-leaks"
	else
		fail "$mode-no-leaks" "rdma resource show: before: $(echo $baseline) after: $(echo $now)"
	fi
done

# --- ipoibd --cm own on an rxe device <-> ipoibd --provider softib: rxe
# works only in the initial namespace and softib does not care, so a veth
# pair of its own: rxe on owa here, softib on owb in namespace owsib (its
# interface there too); the rxe daemon's interface in namespace owv.
SNS=owsib VNS=owv RXE=rxeow U1=203.0.113.1 U2=203.0.113.2 N3=192.168.63 N6=fd00:63
sib_cleanup() {
	stop 1 TERM
	stop 2 TERM
	rdma link del $RXE 2>/dev/null
	ip link del owa 2>/dev/null
	ip netns del $SNS 2>/dev/null
	ip netns del $VNS 2>/dev/null
}
sib_cleanup
if ip netns add $SNS && ip netns add $VNS &&
	ip link add owa mtu 9000 type veth peer name owb mtu 9000 && ip link set owb netns $SNS &&
	ip addr add $U1/24 dev owa && ip link set owa up &&
	ip -n $SNS link set lo up && ip -n $SNS addr add $U2/24 dev owb && ip -n $SNS link set owb up &&
	ip -n $SNS route add 224.0.0.0/4 dev owb && rdma link add $RXE type rxe netdev owa; then
	ipoibd --provider verbs --device $RXE --netns $VNS --cm own --addr "$N3.1/24" --addr "$N6::1/64" >>"$log/$VNS.log" 2>&1 &
	pid[1]=$!
	ip netns exec $SNS ipoibd --provider softib --underlay $U2 --addr "$N3.2/24" --addr "$N6::2/64" >>"$log/$SNS.log" 2>&1 &
	pid[2]=$!
	if within 20 ip netns exec $VNS ipoibd show && within 20 ip netns exec $SNS ipoibd show; then
		pass softib-up
		ip netns exec $VNS ping -c 3 -i 0.2 -W 3 "$N3.2" >"$log/x-a" 2>&1 &
		pa=$!
		ip netns exec $SNS ping -c 3 -i 0.2 -W 3 "$N3.1" >"$log/x-b" 2>&1 &
		pb=$!
		if wait $pa && wait $pb; then pass softib-crossing-ping; else fail softib-crossing-ping "$(tail -n 2 "$log/x-a" "$log/x-b" | tr '\n' ' ')"; fi
		check softib-ping4 ip netns exec $VNS ping -c 3 -i 0.2 -W 3 "$N3.2"
		check softib-ping6 ip netns exec $SNS ping -c 3 -i 0.2 -W 3 "$N6::1"
		check softib-ping-65000 ip netns exec $VNS ping -c 3 -i 0.2 -W 3 -M "do" -s 65000 "$N3.2"
		check softib-conn sh -c "ip netns exec $VNS ipoibd conn --wide | grep -w RC | grep -q established"
		ip netns exec $SNS iperf3 -s -D -1 >/dev/null 2>&1
		within 5 sh -c "ip netns exec $SNS ss -ltn | grep -q ':5201 '"
		if out=$(ip netns exec $VNS iperf3 -c "$N3.2" -t 3 2>&1); then
			pass softib-iperf3
			echo "$out" | grep -E 'sender|receiver'
		else
			fail softib-iperf3 "$(echo "$out" | tail -n 2 | tr '\n' ' ')"
		fi
		ip netns exec $VNS ipoibd conn
		echo "rxe $RXE: $(rdma statistic show link $RXE/1 2>&1 | tr '\n' ' ')"
		ip netns exec $SNS ipoibd stats | grep -E 'drop|error' | tr '\n' ' '
		echo
	else
		fail softib-up "a daemon did not come up"
	fi
	if stop_all; then pass softib-clean-exit; else fail softib-clean-exit "a daemon exited with an error"; fi
else
	fail softib-up "could not make the veth pair, namespaces or $RXE"
fi
sib_cleanup

# --- the kernel CM back for the hooks after this one
reload
if [ -e /sys/module/ib_cm ] && [ -e /dev/infiniband/rdma_cm ]; then pass kernel-cm-reloaded; else fail kernel-cm-reloaded "rdma_ucm did not load again"; fi
