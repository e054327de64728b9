#!/usr/bin/env bash
# make bench-verbs, in the test bed's guest (scripts/bench-verbs.sh boots it
# through scripts/rxe-testbed.sh with this directory as its hooks): on the
# pair rxe0 (va) / rxe1 (vb), one after the other,
#   - perftest's ib_send_bw (RC, 64 KiB messages; also UD at the IB MTU)
#     and ib_send_lat (RC, 2 octets),
#   - ipoibd --provider verbs, connected mode over RC (MTU 65520) and
#     datagram mode (UD): iperf3 and ping between two namespaces,
#   - the kernel's TCP between va and vb (the link the rxe devices sit on).
# It only measures: every figure goes out as one line
#   BENCH KEY field=value ...
# which scripts/bench-verbs.sh reads from the console and turns into the
# report, and one RESULT line per measure (a FAIL names what broke).
# Diagnosis (counters, the daemons' stats) is printed indented.
#
# Environment (the host's TESTBED_HOOK_ENV): SECS (seconds per iperf3 and
# ib_send_bw run), REPS (runs per measure), PROFILE=1 (CPU profiles of the
# daemons, printed as BENCHFILE lines for the host to decode).
set -uo pipefail

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
# iperf_json FILE: "bytes bits_per_second" of sum_received in iperf3 -J
# output (no jq in the guest; the JSON is iperf3's own pretty print).
iperf_json() {
	awk '/"sum_received"/ { s = 1 } s && /"bytes":/ { gsub(/[^0-9.]/, "", $2); b = $2 }
		s && /"bits_per_second":/ { gsub(/[^0-9.e+]/, "", $2); print b, $2; exit }' "$1"
}

stop_all() {
	local p
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
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

# perf NAME TOOL ARGS...: server on A, client on B (to IPA), the client's
# output in $log/NAME.cli; also prints the busy CPU seconds per GB of the
# run on the BENCH line the caller writes (busy_s set).
perf() {
	local name=$1 tool=$2 spid port=$((18600 + RANDOM % 100)) b0 b1 rc
	shift 2
	timeout $((SECS * 3 + 60)) "$tool" -d "$A" -x "$GA" -p $port -F "$@" >"$log/$name.srv" 2>&1 &
	spid=$!
	for _ in $(seq 100); do
		[ -n "$(ss -Hltn "sport = :$port")" ] && break
		kill -0 $spid 2>/dev/null || break
		sleep 0.1
	done
	cpu_snap "$log/snap0"
	b0=$(busy)
	timeout $((SECS * 3 + 60)) "$tool" -d "$B" -x "$GB" -p $port -F "$@" "$IPA" >"$log/$name.cli" 2>&1
	rc=$?
	b1=$(busy)
	cpu_snap "$log/snap1"
	top_line=$(cpu_top "$log/snap0" "$log/snap1" $((b1 - b0)))
	wait $spid
	busy_s=$(awk -v t=$((b1 - b0)) -v hz="$hz" 'BEGIN { printf "%.2f", t / hz }')
	return $rc
}
# The result row of ib_send_bw and ib_send_lat: the line after the header
# (the first field is the message size).
perf_row() { awk '/^ *#bytes/ { h = 1; next } h && $1 ~ /^[0-9]+$/ { print; exit }' "$1"; }

# ib_send_bw: RC, 64 KiB messages, SECS seconds (-D), REPS runs.
for mode in RC UD; do
	size=65536
	[ $mode = UD ] && size=$(ibv_devinfo -d "$A" | awk '/active_mtu/ { print $2; exit }')
	ok=0
	rx0=$(rxe_counters)
	for r in $(seq "$REPS"); do
		c0=$(ctr "$A" rcvd_pkts)
		if perf "sendbw-$mode-$r" ib_send_bw -c $mode -s "$size" -D "$SECS"; then
			row=$(perf_row "$log/sendbw-$mode-$r.cli")
			# #bytes #iterations BW-peak BW-average MsgRate (MB/s = 2^20 octets/s)
			read -r sz it peak avg mpps <<<"$row"
			if [ -n "${avg:-}" ]; then
				bytes=$(awk -v a="$avg" -v s="$SECS" 'BEGIN { printf "%.0f", a * 1048576 * s }')
				echo "BENCH sendbw-$mode run=$r size=$sz iters=$it mbs=$avg peak=$peak mpps=$mpps" \
					"gbit=$(awk -v a="$avg" 'BEGIN { printf "%.4f", a * 1048576 * 8 / 1e9 }')" \
					"busy_s_per_gb=$(awk -v s="$busy_s" -v b="$bytes" 'BEGIN { if (b > 0) printf "%.1f", s / (b / 1e9); else print "n/a" }')" \
					"rxe0_rcvd=$(($(ctr "$A" rcvd_pkts) - c0))"
				[ "$r" = 1 ] && echo "BENCH sendbw-$mode-top $top_line"
				ok=$((ok + 1))
				continue
			fi
		fi
		show "$log/sendbw-$mode-$r.srv" "$log/sendbw-$mode-$r.cli"
	done
	echo "  | rxe counters before ib_send_bw $mode: $rx0"
	echo "  | rxe counters after:  $(rxe_counters)"
	if [ $ok = "$REPS" ]; then pass "ib_send_bw-$mode"; else fail "ib_send_bw-$mode" "$ok of $REPS runs gave a figure"; fi
done

# ib_send_lat: RC, 2 octets, 1000 iterations (half the round trip, as
# perftest reports it).
if perf sendlat ib_send_lat -c RC -s 2 -n 1000; then
	read -r sz it tmin tmax ttyp tavg tstd p99 p999 <<<"$(perf_row "$log/sendlat.cli")"
	echo "BENCH sendlat size=$sz iters=$it t_min=$tmin t_max=$tmax t_typical=$ttyp t_avg=$tavg t_stdev=$tstd p99=$p99 p999=$p999"
	pass ib_send_lat
else
	show "$log/sendlat.srv" "$log/sendlat.cli"
	fail ib_send_lat "ib_send_lat failed: $(tail -n 1 "$log/sendlat.cli")"
fi

# --- iperf3 and ping ------------------------------------------------------------

# measure KEY NSA NSB DST: ping, then REPS iperf3 runs of SECS seconds from
# NSA to DST in NSB ("" is the initial namespace), with the CPU of the
# processes in cpu_pids and of the whole guest per GB received.
cpu_pids=()
measure() {
	local key=$1 nsa=$2 nsb=$3 dst=$4 ea=() eb=() r t0 t1 b0 b1 c0 bytes bps spid ok=0
	[ -n "$nsa" ] && ea=(ip netns exec "$nsa")
	[ -n "$nsb" ] && eb=(ip netns exec "$nsb")
	"${ea[@]}" ping -c 3 -i 0.2 -W 3 "$dst" >/dev/null 2>&1
	"${ea[@]}" ping -q -c 50 -i 0.05 -W 2 "$dst" >"$log/$key.ping" 2>&1
	echo "BENCH $key-ping $(awk -F'[ /]+' '/^rtt/ { printf "min=%s avg=%s max=%s mdev=%s ", $7, $8, $9, $10 }
		/packet loss/ { for (i = 1; i <= NF; i++) if ($i ~ /%$/) printf "loss=%s ", $i }' "$log/$key.ping")"
	"${eb[@]}" iperf3 -s -D -B "$dst" -I "$log/iperf3.pid" >/dev/null 2>&1
	for _ in $(seq 50); do [ -s "$log/iperf3.pid" ] && break; sleep 0.1; done
	spid=$(cat "$log/iperf3.pid" 2>/dev/null)
	sleep 0.3
	for r in $(seq "$REPS"); do
		c0=$(ctr "$A" rcvd_pkts)
		[ "$r" = 1 ] && cpu_snap "$log/snap0"
		t0=$(ticks "${cpu_pids[@]}") b0=$(busy)
		"${ea[@]}" timeout $((SECS + 30)) iperf3 -c "$dst" -t "$SECS" -J --connect-timeout 5000 "${iperf_args[@]}" >"$log/$key-$r.json" 2>&1
		t1=$(ticks "${cpu_pids[@]}") b1=$(busy)
		if [ "$r" = 1 ]; then
			cpu_snap "$log/snap1"
			echo "BENCH $key-top $(cpu_top "$log/snap0" "$log/snap1" $((b1 - b0)))"
		fi
		read -r bytes bps <<<"$(iperf_json "$log/$key-$r.json")"
		if [ -z "${bps:-}" ]; then
			show "$log/$key-$r.json" | tail -n 5
			continue
		fi
		ok=$((ok + 1))
		echo "BENCH $key run=$r bytes=$bytes gbit=$(awk -v b="$bps" 'BEGIN { printf "%.4f", b / 1e9 }')" \
			"daemon_s_per_gb=$(awk -v t=$((t1 - t0)) -v b="$bytes" -v n=${#cpu_pids[@]} -v hz="$hz" 'BEGIN { if (n && b > 0) printf "%.1f", t / hz / (b / 1e9); else print "n/a" }')" \
			"busy_s_per_gb=$(awk -v t=$((b1 - b0)) -v b="$bytes" -v hz="$hz" 'BEGIN { if (b > 0) printf "%.1f", t / hz / (b / 1e9); else print "n/a" }')" \
			"rxe0_rcvd=$(($(ctr "$A" rcvd_pkts) - c0))"
	done
	[ -n "$spid" ] && kill "$spid" 2>/dev/null
	rm -f "$log/iperf3.pid"
	sleep 0.3
	if [ $ok = "$REPS" ]; then pass "$key"; else fail "$key" "$ok of $REPS iperf3 runs gave a figure"; fi
}

# The kernel's TCP over va/vb (the policy routing of the test bed makes
# B -> A cross the veth): the ceiling of this guest.
iperf_args=(-B "$IPB")
cpu_pids=()
measure tcp "" "" "$IPA"
iperf_args=()

# start K DEV NS FLAGS...: one daemon; ready when its control socket answers.
start() {
	local k=$1 dev=$2 ns=$3
	shift 3
	"${prof_env[@]}" ipoibd --provider verbs --device "$dev" --netns "$ns" \
		--addr "192.168.61.$k/24" "$@" >"$log/$ns.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 300); do
		ip netns exec "$ns" ipoibd show >/dev/null 2>&1 && return 0
		kill -0 "${pids[-1]}" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}
for ns in vba vbb; do ip netns del "$ns" 2>/dev/null; ip netns add "$ns"; done
for mode in rc ud; do
	case $mode in
	rc) flags=(--cm kernel --peers ipoibd-only --cm-modes rc) ;;
	ud) flags=(--mode datagram) ;;
	esac
	ok=1
	for k in 1 2; do
		prof_env=(env)
		[ "$PROFILE" = 1 ] && prof_env=(env "IPOIBD_CPUPROFILE=$log/$mode-$k.prof")
		dev=$A ns=vba
		[ $k = 2 ] && dev=$B ns=vbb
		start $k "$dev" $ns "${flags[@]}" || { ok=0; break; }
	done
	if [ $ok = 0 ]; then
		fail "ipoibd-$mode" "a daemon did not come up: $(tail -n 2 "$log"/vb?.log | tr '\n' ' ')"
		stop_all
		continue
	fi
	cpu_pids=("${pids[@]}")
	echo "BENCH ipoibd-$mode-link mtu=$(ip netns exec vba cat /sys/class/net/ib0/mtu)" \
		"mode=$(ip netns exec vba ipoibd show | awk '/mode/ { print; exit }' | tr -s ' ' '_')"
	rx0=$(rxe_counters)
	measure "ipoibd-$mode" vba vbb 192.168.61.2
	echo "  | rxe counters before ipoibd-$mode: $rx0"
	echo "  | rxe counters after:  $(rxe_counters)"
	ip netns exec vba ipoibd conn --wide 2>&1 | show
	ip netns exec vba ipoibd stats 2>&1 | show
	ip netns exec vbb ipoibd stats 2>&1 | show
	# Octets per send on the sender's connection or UD QP: what each
	# ibv_post_send carried (ib_send_bw's is its message size).
	echo "BENCH ipoibd-$mode-sends $(ip netns exec vba ipoibd stats --json | tr ',{}' '\n' |
		awk -F: '{ gsub(/[" ]/, "", $1); v[$1] = $2 } END { printf "tx_bytes=%d tx_packets=%d tx_connected=%d tx_ud=%d", v["tx_bytes"], v["tx_packets"], v["tx_connected"], v["tx_ud"] }')"
	stop_all
	for k in 1 2; do
		[ "$PROFILE" = 1 ] && [ -s "$log/$mode-$k.prof" ] || continue # nothing to send
		# The host turns these back into the file (base64 in lines).
		{ base64 -w 0 "$log/$mode-$k.prof"; echo; } | fold -w 200 | sed "s/^/BENCHFILE $mode-$k.prof /"
	done
done
for ns in vba vbb; do ip netns del "$ns" 2>/dev/null; done
echo "BENCH done"
