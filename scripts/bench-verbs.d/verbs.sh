#!/usr/bin/env bash
# make bench-verbs, in the test bed's guest (scripts/bench-verbs.sh boots it
# through scripts/rxe-testbed.sh with this directory as its hooks), on the
# pair rxe0 (va) / rxe1 (vb): first latency (ping over the veth, perftest's
# ib_send_lat with RC and 2 octets, polling and on events), then REPS
# rounds, each running every path once so that the host's changing load
# spreads over all of them:
#   - perftest's ib_send_bw: RC with 64 KiB messages, UD with IB-MTU ones,
#     RC sleeping on completion events (-e);
#   - the kernel's TCP between va and vb (the link the rxe devices sit on);
#   - ipoibd --provider verbs, a pair in connected mode over RC (MTU 65520),
#     then one in datagram mode (UD), each started for its iperf3 run and
#     stopped after it (in round 1 also its idle CPU and its ping).
# It only measures: every figure goes out as one line
#   BENCH KEY field=value ...
# which scripts/bench-verbs.sh reads from the console and turns into the
# report, and one RESULT line per measure (a FAIL names what broke).
# Diagnosis (counters, the daemons' stats) is printed indented.
#
# Environment (the host's TESTBED_HOOK_ENV): SECS (seconds per iperf3 and
# ib_send_bw run), REPS (rounds), PROFILE=1 (CPU profiles of the last
# round's daemons, printed as BENCHFILE lines for the host to decode).
set -uo pipefail
. "$(dirname "$0")/../testbed-lib.sh"

SECS=${SECS:-5} REPS=${REPS:-3} PROFILE=${PROFILE:-0}
A=${TESTBED_DEV_A:-rxe0} B=${TESTBED_DEV_B:-rxe1}
IPA=${TESTBED_IP_A:-192.0.2.1} IPB=${TESTBED_IP_B:-192.0.2.2}
GA=${TESTBED_GID_INDEX_A:-1} GB=${TESTBED_GID_INDEX_B:-1}
log=/tmp/bench-verbs
mkdir -p "$log"
pids=()
hz=$(getconf CLK_TCK)

pass() { echo "RESULT PASS bench-verbs/$1"; }
fail() { echo "RESULT FAIL bench-verbs/$1: $(printf '%s' "$2" | tr -s '\n\t' '  ' | cut -c1-200)"; }
show() { sed 's/^/  | /' "$@"; }
ctr() { cat "/sys/class/infiniband/$1/ports/1/hw_counters/$2" 2>/dev/null || echo 0; }
# rxe_counters: every non-zero hw counter of both devices, one line
rxe_counters() {
	local d f v out=""
	for d in $A $B; do
		for f in /sys/class/infiniband/"$d"/ports/1/hw_counters/*; do
			read -r v <"$f" 2>/dev/null || continue
			[ "$v" = 0 ] || out+="$d.${f##*/}=$v "
		done
	done
	echo "$out"
}
# busy: the guest's busy CPU time so far, in clock ticks: the vCPUs' time
# since boot less their idle time (/proc/uptime, both precise, as the
# processes' own figures are; /proc/stat's tick samples lose ticks under
# TCG), so that a path with no daemon has a cost too.
ncpu=$(nproc)
busy() { awk -v n="$ncpu" -v hz="$hz" '{ printf "%.0f\n", (n * $1 - $2) * hz }' /proc/uptime; }
# busy_now: the same into BUSY, with builtins only (/proc/uptime has two
# decimals: centiseconds).
busy_now() {
	local u i
	read -r u i </proc/uptime
	u=${u/./} i=${i/./}
	BUSY=$(((ncpu * 10#$u - 10#$i) * hz / 100))
}
# cpu_snap FILE: pid, command and utime + stime of every process.
cpu_snap() {
	local f l c v
	for f in /proc/[0-9]*/stat; do
		read -r l 2>/dev/null <"$f" || continue
		c=${l#*(} c=${c%)*}
		read -ra v <<<"${l##*) }"
		echo "${f//[^0-9]/} ${c// /_} $((v[11] + v[12]))"
	done >"$1"
}
# cpu_top BEFORE AFTER TICKS: the guest's busiest commands between two
# snapshots (by pid; a kworker's +/- state suffix dropped), as shares of
# TICKS busy ticks.
cpu_top() {
	awk -v t="$3" 'NR == FNR { a[$1] = $3; next } { d = $3 - a[$1]; c = $2; sub(/[+-].*/, "", c); if (d > 0) s[c] += d }
		END { for (c in s) printf "%d %s\n", s[c], c }' "$1" "$2" | sort -rn | head -n 8 |
		awk -v t="$3" '{ printf "%s%s=%.0f%%", (NR > 1 ? " " : ""), $2, (t > 0 ? 100 * $1 / t : 0) }'
}
# ticks PID...: utime + stime of the processes, every thread.
ticks() {
	local p t=0 v
	for p in "$@"; do
		v=$(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$p/stat" 2>/dev/null) || v=0
		t=$((t + v))
	done
	echo $t
}
# iperf_json FILE: "bytes bits_per_second retransmits" of sum_received
# (retransmits: sum_sent's) in iperf3 -J
# output (no jq in the guest; the JSON is iperf3's own pretty print).
iperf_json() {
	awk '/"sum_sent"/ { t = 1 } t && /"retransmits":/ { gsub(/[^0-9]/, "", $2); rt = $2; t = 0 }
		/"sum_received"/ { s = 1 } s && /"bytes":/ { gsub(/[^0-9.]/, "", $2); b = $2 }
		s && /"bits_per_second":/ { gsub(/[^0-9.e+]/, "", $2); print b, $2, (rt == "" ? "n/a" : rt); exit }' "$1"
}

# stop_all: SIGTERM to the daemons, and SIGKILL to one still there 30 s
# later (one run hung the guest here until QEMU's limit): that one is a
# FAIL line, the run goes on.
stop_all() {
	local p
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
	for p in "${pids[@]}"; do
		for _ in $(seq 300); do
			kill -0 "$p" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$p" 2>/dev/null; then
			fail ipoibd-stop "pid $p ($(tr '\0' ' ' </proc/"$p"/cmdline | cut -c1-80)) still there 30 s after SIGTERM; killed"
			show "/proc/$p/status" | grep -E 'State|Threads'
			kill -KILL "$p" 2>/dev/null
		fi
		wait "$p" 2>/dev/null
	done
	pids=()
}
trap stop_all EXIT

echo "BENCH guest kernel=$(uname -r) cpus=$(nproc) mem_kib=$(awk '/^MemTotal/ {print $2}' /proc/meminfo) hz=$hz" \
	"perftest=$(dpkg-query -W -f '${Version}' perftest 2>/dev/null || echo n/a)" \
	"rdmacore=$(dpkg-query -W -f '${Version}' rdma-core 2>/dev/null || echo n/a)" \
	"iperf3=$(iperf3 --version | awk 'NR == 1 { print $2 }')" \
	"mtu_va=$(cat /sys/class/net/va/mtu)" \
	"ibmtu=$(ibv_devinfo -d "$A" | awk '/active_mtu/ { print $2; exit }')" \
	"model=$(awk -F': ' '/^model name/ { gsub(/ /, "_", $2); print $2; exit }' /proc/cpuinfo)"

# --- perftest ----------------------------------------------------------------

# perf NAME TOOL WINDOW ARGS...: server on A, client on B (to IPA), the
# client's output in $log/NAME.cli. WINDOW > 0: while the client runs, the
# script reads the messages completed on A's receive queue (rxe0's
# rdma_recvs) every 0.2 s: the figure is the messages from the first read
# that saw them move to the last one, over the guest-clock time between
# those reads (win_msgs, win_s), with the guest's busy time over the same
# reads (busy_s) and its busiest commands over the first WINDOW - 1 s
# (top_line). So the client's set-up, which takes seconds under load, is
# left out. perftest's own bandwidth figure converts TSC cycles with a
# CPU frequency that TCG does not keep (-F: go on despite the mismatch),
# and in duration mode (-D) it printed 0 for runs of 900 messages.
# WINDOW 0: only the client's wall time (wall_s).
perf() {
	local name=$1 tool=$2 win=$3 spid cpid port=$((18600 + RANDOM % 100)) t0 rc m mp t b
	local m0="" t0w="" b0="" m1="" t1w="" b1="" snapped=0
	shift 3
	timeout $((SECS * 4 + 60)) "$tool" -d "$A" -x "$GA" -p $port -F "$@" >"$log/$name.srv" 2>&1 &
	spid=$!
	for _ in $(seq 100); do
		[ -n "$(ss -Hltn "sport = :$port")" ] && break
		kill -0 $spid 2>/dev/null || break
		sleep 0.1
	done
	t0=$EPOCHREALTIME
	timeout $((SECS * 4 + 60)) "$tool" -d "$B" -x "$GB" -p $port -F "$@" "$IPA" >"$log/$name.cli" 2>&1 &
	cpid=$!
	win_msgs=0 win_s=0 busy_s=0 top_line=""
	if [ "$win" -gt 0 ]; then
		# Builtins only in this loop (no forks: a loop that forks took
		# seconds a turn at host load 30 and missed a whole short run).
		local cf=/sys/class/infiniband/$A/ports/1/hw_counters/rdma_recvs slp
		# A FIFO nobody writes to: read -t on it is a sleep without a
		# fork (the guest has no /dev/fd for a process substitution).
		[ -p "$log/sleep.fifo" ] || mkfifo "$log/sleep.fifo"
		exec {slp}<>"$log/sleep.fifo"
		read -r mp <"$cf"
		while [ -e "/proc/$cpid" ]; do
			read -r m <"$cf"
			t=${EPOCHREALTIME/./}
			busy_now
			b=$BUSY
			if [ -z "$m0" ] && ((m > mp)); then
				m0=$m t0w=$t b0=$b m1=$m t1w=$t b1=$b
				cpu_snap "$log/snap0"
			elif [ -n "$m0" ] && ((m > m1)); then
				m1=$m t1w=$t b1=$b
				if [ $snapped = 0 ] && ((t - t0w >= (win - 1) * 1000000)); then
					cpu_snap "$log/snap1"
					top_line=$(cpu_top "$log/snap0" "$log/snap1" $((b - b0)))
					snapped=1
				fi
			fi
			read -rt 0.2 -u "$slp" || true
		done
		exec {slp}>&-
		if [ -n "$m0" ]; then
			win_msgs=$((m1 - m0))
			win_s=$(awk -v a="$t0w" -v b="$t1w" 'BEGIN { printf "%.3f", (b - a) / 1e6 }')
			busy_s=$(awk -v t=$((b1 - b0)) -v hz="$hz" 'BEGIN { printf "%.2f", t / hz }')
		fi
	fi
	wait $cpid
	rc=$?
	wall_s=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.3f", b - a }')
	wait $spid
	return $rc
}
# The result row of ib_send_bw and ib_send_lat: the line after the header
# (the first field is the message size).
perf_row() { awk '/^ *#bytes/ { h = 1; next } h && $1 ~ /^[0-9]+$/ { print; exit }' "$1"; }

# --- the daemons ------------------------------------------------------------------

# start NAME DEV NS NET FLAGS...: one daemon, NAME for its log and profile,
# address 192.168.NET.(1 on rxe0, 2 on rxe1); ready when its control socket
# answers. Its pid goes to started.
start() {
	local name=$1 dev=$2 ns=$3 net=$4 k=1 penv=(env)
	shift 4
	[ "$dev" = "$B" ] && k=2
	[ "$PROFILE" = 1 ] && penv=(env "IPOIBD_CPUPROFILE=$log/$name.prof")
	ip netns del "$ns" 2>/dev/null
	ip netns add "$ns"
	"${penv[@]}" ipoibd --provider verbs --device "$dev" --netns "$ns" \
		--addr "192.168.$net.$k/24" "$@" >>"$log/$name.log" 2>&1 &
	started=$!
	pids+=("$started")
	answering "$started" "$ns" 30
}
# pair MODE: the two daemons of MODE (rc: connected mode over RC through
# the kernel CM; ud: datagram mode), one per device, interfaces in the
# namespaces vMODE1 and vMODE2; their pids in dpids. Only one pair runs at
# a time, and only for its own measures: a run with both pairs up beside
# the perftest runs found the idle daemons taking most of the guest.
declare -A okn
pair() {
	local mode=$1 k dev flags net
	case $mode in
	rc) flags=(--cm kernel --peers ipoibd-only --cm-modes rc) net=61 ;;
	ud) flags=(--mode datagram) net=62 ;;
	esac
	dpids=()
	for k in 1 2; do
		dev=$A
		[ $k = 2 ] && dev=$B
		if ! start "$mode-$k" "$dev" "v$mode$k" $net "${flags[@]}"; then
			echo "  | daemon $mode-$k did not come up: $(tail -n 2 "$log/$mode-$k.log" | tr '\n' ' ')"
			stop_all
			return 1
		fi
		dpids+=("$started")
	done
	okn[ipoibd-$mode-up]=$((${okn[ipoibd-$mode-up]:-0} + 1))
}
# relay_pair KIND: the verbs relay (internal/testbed/verbsrelay), one end
# per device in the namespaces vrl1 and vrl2, through ipoibd's own tun and
# verbs packages with no IPoIB above them. KIND relay: each TUN read goes as
# one RC SEND, the ceiling of a TUN driver over this provider; relay-ud:
# standard IP packets of up to 4092 octets, one UD SEND each (checksums
# completed, super-packets cut and merged again), datagram mode's ceiling.
# Pids in dpids.
relay_pair() {
	local kind=$1 k dev me peer args=()
	[ "$kind" = relay-ud ] && args=(-ud)
	rm -f "$log"/relay-[ab] "$log"/relay-[ab].rts
	dpids=()
	for k in 1 2; do
		dev=$A me=a peer=b
		[ $k = 2 ] && dev=$B me=b peer=a
		ip netns del "vrl$k" 2>/dev/null
		ip netns add "vrl$k"
		ip netns exec "vrl$k" /opt/ipoibd/verbsrelay -device "$dev" -tun vr0 -me "$log/relay-$me" -peer "$log/relay-$peer" "${args[@]}" >"$log/$kind-$k.log" 2>&1 &
		dpids+=($!)
		pids+=($!)
	done
	for k in 1 2; do
		for _ in $(seq 300); do
			grep -q '^verbsrelay: ready' "$log/$kind-$k.log" && break
			sleep 0.1
		done
		if ! grep -q '^verbsrelay: ready' "$log/$kind-$k.log"; then
			echo "  | verbs relay $kind $k did not come up: $(tail -n 2 "$log/$kind-$k.log" | tr '\n' ' ')"
			stop_all
			return 1
		fi
		ip -n "vrl$k" addr add "192.168.60.$k/24" dev vr0
	done
	okn[$kind-up]=$((${okn[$kind-up]:-0} + 1))
}
# idle MODE: the pair's CPU while nothing crosses it, over 3 s.
idle() {
	local t0 t1 w0 w1
	t0=$(ticks "${dpids[@]}") w0=$EPOCHREALTIME
	sleep 3
	t1=$(ticks "${dpids[@]}") w1=$EPOCHREALTIME
	echo "BENCH ipoibd-$1-idle cpu_pct=$(awk -v t=$((t1 - t0)) -v hz="$hz" -v a="$w0" -v b="$w1" 'BEGIN { printf "%.0f", 100 * t / hz / (b - a) }')"
}
# diagnose MODE: the pair's counters and what one send carried.
diagnose() {
	local mode=$1
	echo "  | rxe counters: $(rxe_counters)"
	ip netns exec "v${mode}1" ipoibd conn --wide 2>&1 | show
	ip netns exec "v${mode}1" ipoibd stats 2>&1 | show
	ip netns exec "v${mode}2" ipoibd stats 2>&1 | show
	# Octets per send on the sender's side: what each ibv_post_send
	# carried (ib_send_bw's is its message size).
	echo "BENCH ipoibd-$mode-sends $(ip netns exec "v${mode}1" ipoibd stats --json | tr ',{}' '\n' |
		awk -F: '{ gsub(/[" ]/, "", $1); v[$1] = $2 } END { printf "tx_bytes=%d tx_packets=%d tx_connected=%d tx_ud=%d tx_super_packets=%d", v["tx_bytes"], v["tx_packets"], v["tx_connected"], v["tx_ud"], v["tx_super_packets"] }')"
}

# --- latency: ping on each path, ib_send_lat ----------------------------------------

# ping_of KEY NS DST: three warm-up pings (ARP, the connection), then 50.
ping_of() {
	local key=$1 ns=$2 dst=$3 e=()
	[ -n "$ns" ] && e=(ip netns exec "$ns")
	"${e[@]}" ping -c 3 -i 0.2 -W 3 "$dst" >/dev/null 2>&1
	"${e[@]}" ping -q -c 50 -i 0.05 -W 2 "$dst" >"$log/$key.ping" 2>&1
	echo "BENCH $key-ping $(awk -F'[ /]+' '/^rtt/ { printf "min=%s avg=%s max=%s mdev=%s ", $7, $8, $9, $10 }
		/packet loss/ { for (i = 1; i <= NF; i++) if ($i ~ /%$/) printf "loss=%s ", $i }' "$log/$key.ping")"
}
ping_of tcp "" "$IPA"

# ib_send_lat: RC, 2 octets (half the round trip, as perftest reports
# it): polling, 1000 iterations; sleeping on events (-e), 200.
for mode in poll events; do
	key=sendlat args=(-n 1000)
	[ $mode = events ] && key=sendlat-events args=(-n 200 -e)
	if perf $key ib_send_lat 0 -c RC -s 2 "${args[@]}"; then
		read -r sz it tmin tmax ttyp tavg tstd p99 p999 <<<"$(perf_row "$log/$key.cli")"
		# wall_s: the whole client run (set-up included), a check on
		# perftest's clock: iterations × 2 × t_avg must fit in it.
		echo "BENCH $key size=$sz iters=$it t_min=$tmin t_max=$tmax t_typical=$ttyp t_avg=$tavg t_stdev=$tstd p99=$p99 p999=$p999 wall_s=$wall_s"
		pass "ib_send_lat-$mode"
	else
		show "$log/$key.srv" "$log/$key.cli"
		fail "ib_send_lat-$mode" "ib_send_lat failed: $(tail -n 1 "$log/$key.cli")"
	fi
done

# --- throughput: REPS rounds, each path once per round ------------------------------

# sendbw MODE R: ib_send_bw, RC with 64 KiB messages, UD with IB-MTU
# ones (both for SECS + 2 s, -D), or RC-events (RC sleeping on completion
# events, -e, as ipoibd does, instead of polling; perftest has no duration
# mode with events: 300 messages).
ibmtu=$(ibv_devinfo -d "$A" | awk '/active_mtu/ { print $2; exit }')
sendbw() {
	local mode=$1 r=$2 size=65536 run=(-D $((SECS + 2))) c0 bytes sz it peak avg st
	[ "$mode" = UD ] && size=$ibmtu
	[ "$mode" = RC-events ] && run=(-e -n 300)
	c0=$(ctr "$A" rcvd_pkts)
	perf "sendbw-$mode-$r" ib_send_bw "$SECS" -c "${mode%-events}" -s "$size" "${run[@]}"
	st=$?
	# On a quiet host 300 messages on events can all land between two
	# 0.2 s samples, which leaves no window: once more with ten times as
	# many (under load they take seconds, so 300 is the first try).
	if [ $st = 0 ] && ((win_msgs == 0)) && [ "$mode" = RC-events ]; then
		echo "  sendbw-$mode-$r: no window in 300 messages; 3000"
		c0=$(ctr "$A" rcvd_pkts)
		perf "sendbw-$mode-$r" ib_send_bw "$SECS" -c RC -s "$size" -e -n 3000
		st=$?
	fi
	if [ $st = 0 ] && ((win_msgs > 0)); then
		# perftest's own row: #bytes #iterations BW-peak BW-average MsgRate
		read -r sz it peak avg _ <<<"$(perf_row "$log/sendbw-$mode-$r.cli")"
		bytes=$((win_msgs * size))
		echo "BENCH sendbw-$mode run=$r size=$size msgs=$win_msgs window_s=$win_s" \
			"gbit=$(awk -v b="$bytes" -v s="$win_s" 'BEGIN { printf "%.4f", b * 8 / s / 1e9 }')" \
			"busy_s_per_gb=$(awk -v t="$busy_s" -v b="$bytes" 'BEGIN { if (b > 0) printf "%.1f", t / (b / 1e9); else print "n/a" }')" \
			"rxe0_rcvd=$(($(ctr "$A" rcvd_pkts) - c0)) perftest_iters=${it:-n/a} perftest_mbs=${avg:-n/a} perftest_peak=${peak:-n/a} perftest_size=${sz:-n/a}"
		[ "$r" = 1 ] && echo "BENCH sendbw-$mode-top $top_line"
		okn[sendbw-$mode]=$((${okn[sendbw-$mode]:-0} + 1))
	else
		show "$log/sendbw-$mode-$r.srv" "$log/sendbw-$mode-$r.cli"
	fi
}

# iperf_run KEY NSA NSB DST R PID...: one iperf3 run of SECS seconds from
# NSA to DST in NSB ("" is the initial namespace, where the client binds
# to IPB), with the CPU time of the PIDs (the daemons) and of the whole
# guest per GB received; in round 1 also the busiest commands, sampled
# from 1 s into the run until 1 s before its end.
iperf_run() {
	local key=$1 nsa=$2 nsb=$3 dst=$4 r=$5 ea=() eb=() ba=() t0 t1 b0 b1 c0 bytes bps retx cpid w0 w1
	shift 5
	[ -n "$nsa" ] && ea=(ip netns exec "$nsa")
	[ -n "$nsb" ] && eb=(ip netns exec "$nsb")
	[ -z "$nsa" ] && ba=(-B "$IPB")
	rm -f "$log/iperf3.pid"
	"${eb[@]}" iperf3 -s -1 -D -B "$dst" -I "$log/iperf3.pid" >/dev/null 2>&1
	for _ in $(seq 50); do [ -s "$log/iperf3.pid" ] && break; sleep 0.1; done
	sleep 0.3
	c0=$(ctr "$A" rcvd_pkts)
	t0=$(ticks "$@") b0=$(busy)
	"${ea[@]}" timeout $((SECS + 30)) iperf3 -c "$dst" -t "$SECS" -J --connect-timeout 5000 "${ba[@]}" >"$log/$key-$r.json" 2>&1 &
	cpid=$!
	if [ "$r" = 1 ] && ((SECS > 2)); then
		sleep 1
		cpu_snap "$log/snap0"
		w0=$(busy)
		sleep $((SECS - 2))
		w1=$(busy)
		cpu_snap "$log/snap1"
		echo "BENCH $key-top $(cpu_top "$log/snap0" "$log/snap1" $((w1 - w0)))"
	fi
	wait $cpid
	t1=$(ticks "$@") b1=$(busy)
	read -r bytes bps retx <<<"$(iperf_json "$log/$key-$r.json")"
	if [ -z "${bps:-}" ]; then
		show "$log/$key-$r.json" | tail -n 5
		return
	fi
	okn[$key]=$((${okn[$key]:-0} + 1))
	echo "BENCH $key run=$r bytes=$bytes gbit=$(awk -v b="$bps" 'BEGIN { printf "%.4f", b / 1e9 }')" \
		"daemon_s_per_gb=$(awk -v t=$((t1 - t0)) -v b="$bytes" -v n=$# -v hz="$hz" 'BEGIN { if (n && b > 0) printf "%.1f", t / hz / (b / 1e9); else print "n/a" }')" \
		"busy_s_per_gb=$(awk -v t=$((b1 - b0)) -v b="$bytes" -v hz="$hz" 'BEGIN { if (b > 0) printf "%.1f", t / hz / (b / 1e9); else print "n/a" }')" \
		"rxe0_rcvd=$(($(ctr "$A" rcvd_pkts) - c0)) retransmits=$retx"
}

for r in $(seq "$REPS"); do
	for mode in RC UD RC-events; do sendbw $mode "$r"; done
	# The kernel's TCP over va/vb (the policy routing of the test bed makes
	# B -> A cross the veth): the ceiling of this guest.
	iperf_run tcp "" "" "$IPA" "$r"
	for kind in relay relay-ud; do
		relay_pair $kind || continue
		if [ "$r" = 1 ]; then
			ping_of $kind vrl1 192.168.60.2
		else
			ip netns exec vrl1 ping -c 3 -i 0.2 -W 3 192.168.60.2 >/dev/null 2>&1
		fi
		iperf_run $kind vrl1 vrl2 192.168.60.2 "$r" "${dpids[@]}"
		stop_all
	done
	for mode in rc ud; do
		pair $mode || continue
		if [ "$r" = 1 ]; then
			echo "BENCH ipoibd-$mode-link mtu=$(ip netns exec "v${mode}1" cat /sys/class/net/ib0/mtu)" \
				"mode=$(ip netns exec "v${mode}1" ipoibd show | awk '/mode/ { print; exit }' | tr -s ' ' '_')"
			idle $mode
			ping_of "ipoibd-$mode" "v${mode}1" "192.168.6$([ $mode = rc ] && echo 1 || echo 2).2"
		else
			ip netns exec "v${mode}1" ping -c 3 -i 0.2 -W 3 "192.168.6$([ $mode = rc ] && echo 1 || echo 2).2" >/dev/null 2>&1
		fi
		iperf_run "ipoibd-$mode" "v${mode}1" "v${mode}2" "192.168.6$([ $mode = rc ] && echo 1 || echo 2).2" "$r" "${dpids[@]}"
		[ "$r" = "$REPS" ] && diagnose $mode
		stop_all
	done
done
for k in sendbw-RC sendbw-UD sendbw-RC-events tcp relay-up relay relay-ud-up relay-ud ipoibd-rc-up ipoibd-rc ipoibd-ud-up ipoibd-ud; do
	if [ "${okn[$k]:-0}" = "$REPS" ]; then pass "$k"; else fail "$k" "${okn[$k]:-0} of $REPS runs gave a figure"; fi
done
for m in rc-1 rc-2 ud-1 ud-2; do
	[ "$PROFILE" = 1 ] && [ -s "$log/$m.prof" ] || continue # nothing to send
	# The host turns these back into the file (base64 in lines; the
	# last round's daemons).
	{ base64 -w 0 "$log/$m.prof"; echo; } | fold -w 200 | sed "s/^/BENCHFILE $m.prof /"
done
for ns in vrc1 vrc2 vud1 vud2 vrl1 vrl2; do ip netns del "$ns" 2>/dev/null; done
echo "BENCH done"
