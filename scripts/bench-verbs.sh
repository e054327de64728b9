#!/usr/bin/env bash
# make bench-verbs (root; not part of make test): the verbs provider on the
# real kernel. Boots the rxe test bed's guest (scripts/rxe-testbed.sh: QEMU,
# TCG, Debian's kernel, rxe0 on va and rxe1 on vb, a veth pair at MTU 9000)
# with scripts/bench-verbs.d/ as its only hooks, which measure in one run:
# perftest's ib_send_bw (RC, 64 KiB messages; UD at the IB MTU) and
# ib_send_lat, ipoibd --provider verbs in connected mode over RC (MTU 65520)
# and in datagram mode (UD) with iperf3 and ping, the verbs relay
# (internal/testbed/verbsrelay: ipoibd's tun and verbs packages with no
# IPoIB above them, the ceiling of a TUN driver over the provider) and the
# kernel's own TCP over va/vb (the guest's ceiling); with the daemons' CPU per byte
# (/proc/PID/stat) and the whole guest's (/proc/stat). Reads the guest's
# BENCH lines from the console and writes the section "The verbs provider
# on the real kernel" of BENCHMARKS.md (between its marker lines, replacing
# the last run's; make bench keeps it), and prints the ratios.
#
#   BENCH_VERBS_SECONDS  iperf3 and ib_send_bw duration of each run (default 5)
#   BENCH_VERBS_REPS     runs per measure, the median is reported (default 3)
#   BENCH_VERBS_PROFILE=1  CPU profiles of the daemons (IPOIBD_CPUPROFILE),
#                        decoded into BENCH_VERBS_PROFILE_DIR (default
#                        /tmp/ipoibd-bench-verbs) with a `go tool pprof -top`
#   BENCH_OUT            the report (default BENCHMARKS.md in the repository)
#   BENCH_VERBS_CONSOLE  where the guest's console log is kept (default
#                        /tmp/ipoibd-bench-verbs.console.log)
#   BENCH_VERBS_FROM     a kept console log: no boot, only the report from it
set -Eeuo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
secs=${BENCH_VERBS_SECONDS:-5}
reps=${BENCH_VERBS_REPS:-3}
profile=${BENCH_VERBS_PROFILE:-0}
profdir=${BENCH_VERBS_PROFILE_DIR:-/tmp/ipoibd-bench-verbs}
out=${BENCH_OUT:-$here/BENCHMARKS.md}
keep=${BENCH_VERBS_CONSOLE:-/tmp/ipoibd-bench-verbs.console.log}
envs="BENCH_VERBS_SECONDS=$secs BENCH_VERBS_REPS=$reps"
[ "$profile" = 1 ] && envs+=" BENCH_VERBS_PROFILE=1"
if [ -n "${MAKELEVEL:-}" ]; then cmdline="$envs make bench-verbs"; else cmdline="$envs scripts/bench-verbs.sh"; fi
load_start=$(cut -d' ' -f1-3 /proc/loadavg)

say() { printf '[bench-verbs %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { echo "bench-verbs: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "run as root (sudo make bench-verbs): the test bed builds its guest with debootstrap"

tmp=$(mktemp -d /tmp/ipoibd-bench-verbs.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
console=$tmp/console.log

# The guest's share: three ib_send_bw modes and three iperf3 paths of
# reps × secs each, ib_send_lat, the daemons' start and stop in each
# round; under TCG on a loaded host a round took 2.5 minutes.
hook_timeout=$((8 * reps * (secs + 15) + 300))
say "booting the test bed's guest (${secs}s × $reps runs per measure; the guest's limit ${hook_timeout}s)"
st=0
if [ -n "${BENCH_VERBS_FROM:-}" ]; then
	# Only the report, from a kept console log (working on this script).
	cp "$BENCH_VERBS_FROM" "$console"
else
	TESTBED_BOOTS=rxe TESTBED_HOOK_DIR=scripts/bench-verbs.d TESTBED_HOOKS='*' TESTBED_CHECKS=0 \
		TESTBED_HOOK_TIMEOUT=$hook_timeout TESTBED_TIMEOUT=$((hook_timeout + 180)) \
		TESTBED_HOOK_ENV="SECS=$secs REPS=$reps PROFILE=$profile" TESTBED_CONSOLE="$console" \
		scripts/rxe-testbed.sh || st=$?
fi
[ -s "$console" ] || die "no console log from the guest (scripts/rxe-testbed.sh exit $st)"
[ "$console" -ef "$keep" ] || cp "$console" "$keep"
say "the guest's console: $keep"
finished=1
if ! grep -q '^BENCH done' "$console"; then
	# A broken run does not replace the last good section: its report goes
	# beside the console log.
	finished=0 out=$keep.md
	say "the guest did not finish its measures (exit $st): the report of what it got goes to $out, not BENCHMARKS.md"
fi

# --- the guest's figures ---------------------------------------------------------

# get KEY FIELD: FIELD of every "BENCH KEY ..." line, one a line.
get() { awk -v k="$1" -v f="$2" '$1 == "BENCH" && $2 == k { for (i = 3; i <= NF; i++) if (index($i, f "=") == 1) print substr($i, length(f) + 2) }' "$console"; }
one() { get "$1" "$2" | head -n 1; }
median() { awk '/^[0-9.e+-]+$/' | sort -g | awk '{v[NR]=$1} END {if (NR==0) {print "n/a"} else if (NR%2) {print v[(NR+1)/2]} else {print (v[NR/2]+v[NR/2+1])/2}}'; }
med() { get "$1" "$2" | median; }
runs() { get "$1" "$2" | tr '\n' ' ' | sed 's/ $//'; }
# ratio A B: A / B, n/a unless both are finite numbers above 0 (perftest
# prints inf when its TSC clock fails it).
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { n = "^[0-9]+([.][0-9]+)?(e[+-]?[0-9]+)?$"; if (a ~ n && b ~ n && a+0 > 0 && b+0 > 0) printf "%.2f", a/b; else print "n/a" }'; }
r2() { awk -v a="$1" 'BEGIN { if (a ~ /^[0-9.e+-]+$/) printf "%.3f", a; else print "n/a" }'; }

declare -A label mtu tput truns dcpu dcpuruns bcpu bcpuruns ping
order=(tcp sendbw-RC sendbw-RC-events sendbw-UD relay relay-ud ipoibd-rc ipoibd-ud)
label[tcp]="kernel TCP over the veth va → vb (the guest's ceiling)"
label[sendbw-RC]="perftest ib_send_bw, RC, 64 KiB messages"
label[sendbw-UD]="perftest ib_send_bw, UD, IB-MTU messages"
label[sendbw-RC-events]="perftest ib_send_bw, RC, 64 KiB messages, sleeping on completion events (-e)"
label[relay]="the verbs relay limit: TUN reads as RC SENDs, no IPoIB (internal/testbed/verbsrelay)"
label[relay-ud]="the verbs relay limit in datagram mode: IP packets as UD SENDs, cut and merged, no IPoIB (verbsrelay -ud)"
label[ipoibd-rc]="ipoibd --provider verbs, connected mode, RC"
label[ipoibd-ud]="ipoibd --provider verbs, datagram mode (UD)"
ibmtu=$(one guest ibmtu)
mtu[tcp]=$(one guest mtu_va)
mtu[sendbw-RC]="IB MTU ${ibmtu:-?}"
mtu[sendbw-UD]="IB MTU ${ibmtu:-?}"
mtu[sendbw-RC-events]="IB MTU ${ibmtu:-?}"
mtu[relay]=65520
mtu[relay-ud]=4092
mtu[ipoibd-rc]=$(one ipoibd-rc-link mtu)
mtu[ipoibd-ud]=$(one ipoibd-ud-link mtu)
for k in "${order[@]}"; do
	tput[$k]=$(r2 "$(med "$k" gbit)")
	truns[$k]=$(get "$k" gbit | awk '{ printf "%s%.3f", (NR > 1 ? " " : ""), $1 }')
	[ -n "${truns[$k]}" ] || truns[$k]="no run"
	dcpu[$k]=$(med "$k" daemon_s_per_gb)
	dcpuruns[$k]=$(runs "$k" daemon_s_per_gb)
	[ -n "${dcpuruns[$k]}" ] || dcpuruns[$k]=n/a
	bcpu[$k]=$(med "$k" busy_s_per_gb)
	bcpuruns[$k]=$(runs "$k" busy_s_per_gb)
	[ -n "${bcpuruns[$k]}" ] || bcpuruns[$k]=n/a
	ping[$k]=n/a
done
for k in tcp relay relay-ud ipoibd-rc ipoibd-ud; do
	a=$(one "$k-ping" avg)
	[ -z "$a" ] || ping[$k]="$a / $(one "$k-ping" mdev) (loss $(one "$k-ping" loss))"
done
# perftest's latency is half the round trip: twice it is ping's figure.
rtt_of() { awk -v t="$(one "$1" t_avg)" 'BEGIN { if (t ~ /^[0-9]+([.][0-9]+)?$/ && t+0 > 0) printf "%.3f", 2 * t / 1000; else print "n/a" }'; }
lat_text() { echo "ib_send_lat RC 2 octets$2: 2 × t_avg = **$(rtt_of "$1")** (t_min $(one "$1" t_min), t_typical $(one "$1" t_typical), t_avg $(one "$1" t_avg), 99 % $(one "$1" p99) µs; $(one "$1" iters) iterations, client ran $(one "$1" wall_s) s)"; }
lat_rtt=$(rtt_of sendlat)
lat_rtt_ev=$(rtt_of sendlat-events)
ping[sendbw-RC]=$(lat_text sendlat "")
ping[sendbw-RC-events]=$(lat_text sendlat-events ", -e")
ping_ms() { one "$1-ping" avg; }

# The daemons' CPU profiles (BENCH_VERBS_PROFILE=1): decoded, and the
# shares of the calls that carry the datapath.
declare -A prof=([none]="")
prof_items=('verbs\._Cfunc_ipoibd_post_send$|ibv_post_send' 'tun\.\(\*Device\)\.Read$|TUN reads'
	'tun\.\(\*Device\)\.write$|TUN writes' 'verbs\._Cfunc_ipoibd_cq_events$|CQ events'
	'verbs\._Cfunc_ibv_poll_cq$|ibv_poll_cq' 'linux\.EpollWait$|epoll_wait'
	'runtime\.findRunnable$|the Go scheduler' 'runtime\.gcBgMarkWorker$|GC')
if [ "$profile" = 1 ]; then
	mkdir -p "$profdir"
	for m in rc-1 rc-2 ud-1 ud-2; do
		f=$profdir/$m.prof
		rm -f "$f"
		awk -v f="$m.prof" '$1 == "BENCHFILE" && $2 == f { printf "%s", $3 }' "$console" | base64 -d >"$f" 2>/dev/null || true
		[ -s "$f" ] || continue
		go tool pprof -top -cum -nodecount 400 "$f" >"$profdir/$m.top" 2>/dev/null || continue
		line="$(awk '/Total samples/ { sub(/.*Total samples = /, ""); print; exit }' "$profdir/$m.top") of CPU samples:"
		for it in "${prof_items[@]}"; do
			pct=$(awk -v re="${it%%|*}" '$6 ~ re { print $5; exit }' "$profdir/$m.top")
			line+=" ${it#*|} ${pct:-0%},"
		done
		prof[$m]=${line%,}
		say "profile of daemon $m: $f (${prof[$m]})"
	done
fi

# --- report ------------------------------------------------------------------

kernel=$(one guest kernel) cpus=$(one guest cpus) model=$(one guest model | tr '_' ' ')
section=$tmp/section.md
{
	echo "<!-- bench-verbs: written by scripts/bench-verbs.sh; make bench keeps it -->"
	echo "## The verbs provider on the real kernel"
	echo
	echo "Written by \`make bench-verbs\` (scripts/bench-verbs.sh) on $(date -u '+%Y-%m-%d %H:%M UTC'), in one boot"
	echo "of the rxe test bed's guest (scripts/rxe-testbed.sh): Debian's kernel $kernel under QEMU"
	echo "with **TCG** (software emulation: no KVM here), $cpus vCPUs ($model), two soft-RoCE"
	echo "devices rxe0 on va and rxe1 on vb, the two ends of a veth pair at MTU ${mtu[tcp]} (IB MTU $ibmtu), both in the"
	echo "guest's initial namespace with the test bed's policy routing, so all traffic crosses the"
	echo "veth. The two ipoibd daemons (\`--provider verbs\`, one per device, \`--cm kernel --peers"
	echo "ipoibd-only --cm-modes rc\` for RC, \`--mode datagram\` for UD) put their interfaces in two"
	echo "namespaces; one pair at a time, started for its own measure in each round and stopped after"
	echo "it (idle pairs left running beside perftest took most of the guest, see the idle row)."
	echo "${reps} rounds, each running every path once in the table's order, so that the host's changing"
	echo "load spreads over all paths: iperf3 TCP, 1 stream, ${secs} s per run; ib_send_bw (RC and UD"
	echo "for $((secs + 2)) s, -D; on events 300 messages, or 3000 when 300 fit between two reads: perftest"
	echo "has no duration mode with events): the"
	echo "messages completed on rxe0's receive queue (its \`rdma_recvs\` counter, read every 0.2 s)"
	echo "from the first read that saw them move to the last, over the guest-clock time between those"
	echo "reads, so the set-up, seconds under this load, is left out (perftest's own figure converts"
	echo "TSC cycles with a CPU frequency TCG does not keep, and in duration mode printed 0 for runs"
	echo "of 900 messages; it is in the console log); the median of the ${reps} runs (all runs in"
	echo "brackets). Ping: 50 × 0.05 s after three warm-up pings, avg / mdev in ms. Everything is"
	echo "emulated instruction by instruction, on a host busy with other work, so the absolute"
	echo "figures are small and only the ratios within this one run mean anything."
	echo
	echo "CPU per byte: *daemons*, the two ipoibd processes' utime + stime (/proc/PID/stat, every"
	echo "thread) per GB iperf3 received; rxe does its sending work in the system call that rings"
	echo "its doorbell, so that part of the kernel's work is in it. *guest*: the vCPUs' busy time"
	echo "(/proc/uptime: 2 × uptime less idle) per GB, whoever spent it: the only figure for paths"
	echo "without a daemon (perftest polls its completion queue, so its figure counts the polling"
	echo "too). Under TCG on a loaded host a vCPU's time runs on while the host has its thread"
	echo "descheduled, so every CPU figure here is time on a vCPU, not work done."
	echo
	echo "| path | MTU | throughput, Gbit/s | ÷ ib_send_bw RC | ÷ kernel TCP | ping avg / mdev, ms | CPU per byte, s/GB: daemons (runs) | guest (runs) |"
	echo "|---|---|---|---|---|---|---|---|"
	for k in "${order[@]}"; do
		echo "| ${label[$k]} | ${mtu[$k]} | **${tput[$k]}** (${truns[$k]}) | $(ratio "${tput[$k]}" "${tput[sendbw-RC]}") | $(ratio "${tput[$k]}" "${tput[tcp]}") | ${ping[$k]} | ${dcpu[$k]} (${dcpuruns[$k]}) | ${bcpu[$k]} (${bcpuruns[$k]}) |"
	done
	echo
	echo "How the rows differ: ib_send_bw moves messages between two QPs in one process each and,"
	echo "by default, polls its completion queue, so its vCPU never sleeps; ipoibd carries TCP"
	echo "through two TUN devices and sleeps on completion events, so each round trip wakes a"
	echo "sleeping thread at least four times (TUN read and CQ event on each side) where ib_send_lat"
	echo "-e wakes two; under TCG each wake-up of an idle vCPU waits for the host to run its thread."
	echo "The -e rows price that for perftest; the kernel TCP row prices the same bytes with no RDMA"
	echo "stack at all (rxe computes its ICRC in software, emulated here). The verbs relay is what"
	echo "ipoibd's own tun and verbs packages cost without IPoIB above them (TUN reads with their"
	echo "offload headers as RC SENDs, written to the peer's TUN as they came, no checksums, no"
	echo "neighbors, no CM): the ceiling of a TUN driver over this provider, as bench/relay is over UDP;"
	echo "its daemons' CPU is the two relay processes'. In datagram mode (-ud) it sends standard IP"
	echo "packets of up to 4092 octets, one UD SEND each: it completes partial checksums and cuts"
	echo "super-packets into segments, and the peer merges them again after verifying their checksums,"
	echo "with ipoibd's own code: the ceiling of datagram mode over this provider."
	echo
	echo "Ratios (issue #39's targets: ipoibd RC ≥ 0.8 × ib_send_bw RC, UD ≥ 0.6 × ib_send_bw UD, on the same devices):"
	echo
	echo "- ipoibd RC ÷ ib_send_bw RC: **$(ratio "${tput[ipoibd-rc]}" "${tput[sendbw-RC]}")**;"
	echo "  ipoibd UD ÷ ib_send_bw UD: **$(ratio "${tput[ipoibd-ud]}" "${tput[sendbw-UD]}")**;"
	echo "  ipoibd RC ÷ kernel TCP: $(ratio "${tput[ipoibd-rc]}" "${tput[tcp]}"); ib_send_bw RC ÷ kernel TCP: $(ratio "${tput[sendbw-RC]}" "${tput[tcp]}")"
	echo "- ipoibd RC ÷ the verbs relay: **$(ratio "${tput[ipoibd-rc]}" "${tput[relay]}")**; the verbs relay ÷ ib_send_bw RC:"
	echo "  **$(ratio "${tput[relay]}" "${tput[sendbw-RC]}")**, ÷ ib_send_bw RC sleeping on events: $(ratio "${tput[relay]}" "${tput[sendbw-RC-events]}");"
	echo "  ping through ipoibd RC ÷ the relay's: $(ratio "$(ping_ms ipoibd-rc)" "$(ping_ms relay)")"
	echo "- ipoibd UD ÷ the verbs relay in datagram mode: **$(ratio "${tput[ipoibd-ud]}" "${tput[relay-ud]}")**; that relay ÷ ib_send_bw UD:"
	echo "  **$(ratio "${tput[relay-ud]}" "${tput[sendbw-UD]}")**; ping through ipoibd UD ÷ that relay's: $(ratio "$(ping_ms ipoibd-ud)" "$(ping_ms relay-ud)")"
	echo "- ipoibd RC ÷ ib_send_bw RC sleeping on events: **$(ratio "${tput[ipoibd-rc]}" "${tput[sendbw-RC-events]}")**;"
	echo "  ib_send_bw RC on events ÷ polling: $(ratio "${tput[sendbw-RC-events]}" "${tput[sendbw-RC]}")"
	echo "- ping through ipoibd RC ÷ ib_send_lat's round trip: $(ratio "$(ping_ms ipoibd-rc)" "$lat_rtt"), ÷ ib_send_lat -e's:"
	echo "  $(ratio "$(ping_ms ipoibd-rc)" "$lat_rtt_ev"); UD ÷ ib_send_lat's: $(ratio "$(ping_ms ipoibd-ud)" "$lat_rtt");"
	echo "  ping over the veth ÷ ib_send_lat's: $(ratio "$(ping_ms tcp)" "$lat_rtt")"
	echo "- guest CPU per byte, ipoibd RC ÷ ib_send_bw RC: $(ratio "${bcpu[ipoibd-rc]}" "${bcpu[sendbw-RC]}");"
	echo "  ipoibd RC ÷ kernel TCP: $(ratio "${bcpu[ipoibd-rc]}" "${bcpu[tcp]}"); the daemons' share of the guest's CPU in RC:"
	echo "  $(ratio "${dcpu[ipoibd-rc]}" "${bcpu[ipoibd-rc]}"), in UD: $(ratio "${dcpu[ipoibd-ud]}" "${bcpu[ipoibd-ud]}")"
	echo
	echo "Where the guest's CPU went (round 1, from 1 s into each iperf3 run to 1 s before its end,"
	echo "ib_send_bw's from its first messages for $((secs - 1)) s: each command's utime + stime, both ends"
	echo "summed, as a share of the guest's busy time, 200 % for both vCPUs; kernel threads by name):"
	echo
	for k in "${order[@]}"; do
		t=$(awk -v k="$k-top" '$1 == "BENCH" && $2 == k { $1 = ""; $2 = ""; sub(/^ +/, ""); print; exit }' "$console")
		echo "- ${label[$k]}: ${t:-n/a}"
	done
	echo
	echo "An idle pair (3 s after it came up, before the first ping): the two ipoibd processes' utime +"
	echo "stime over wall time, RC **$(one ipoibd-rc-idle cpu_pct) %**, UD **$(one ipoibd-ud-idle cpu_pct) %** of one vCPU."
	echo
	txb=$(one ipoibd-rc-sends tx_bytes) txp=$(one ipoibd-rc-sends tx_packets)
	echo "What one send carried on the sending side (pings and iperf3 runs together): ib_send_bw"
	echo "RC 65536 octets a message; ipoibd RC $(awk -v b="$txb" -v p="$txp" 'BEGIN { if (p > 0) printf "%.0f", b / p; else print "n/a" }') octets a packet ($txp packets, one RC send each);"
	txb=$(one ipoibd-ud-sends tx_bytes) txp=$(one ipoibd-ud-sends tx_packets) txs=$(one ipoibd-ud-sends tx_super_packets)
	echo "ipoibd UD $(awk -v b="$txb" -v p="$txp" 'BEGIN { if (p > 0) printf "%.0f", b / p; else print "n/a" }') octets a packet, $(awk -v p="$txp" -v s="$txs" 'BEGIN { if (s > 0) printf "%.1f", p / s; else print "n/a" }') packets per TUN super-packet ($txp packets)."
	echo
	echo "TCP retransmits per iperf3 run (runs): kernel TCP $(runs tcp retransmits); ipoibd RC $(runs ipoibd-rc retransmits);"
	echo "ipoibd UD $(runs ipoibd-ud retransmits)."
	if ((${#prof[@]} > 1)); then
		echo
		echo "CPU profiles of the last round's daemons (IPOIBD_CPUPROFILE, over each one's life; cum shares:"
		echo "a cgo call's share holds the kernel's work in its system call, which for rxe's"
		echo "ibv_post_send is the whole transmit, and, as the two devices share the guest, the"
		echo "receive that runs in the same softirq):"
		echo
		for m in rc-1 rc-2 ud-1 ud-2; do
			[ -n "${prof[$m]:-}" ] || continue
			echo "- ${m%-*} daemon ${m#*-} ($([ "${m#*-}" = 1 ] && echo "rxe0, the iperf3 client: data out" || echo "rxe1, the iperf3 server: data in")): ${prof[$m]}"
		done
	fi
	echo
	echo "Conditions: host $(nproc) CPUs ($(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)), kernel $(uname -r),"
	echo "$(qemu-system-x86_64 --version | head -n 1), \`-accel tcg -smp 2 -m 2G\`; host load average (1, 5,"
	echo "15 min) at the start: $load_start, at the end: $(cut -d' ' -f1-3 /proc/loadavg); in the guest: perftest"
	echo "$(one guest perftest), rdma-core $(one guest rdmacore), iperf3 $(one guest iperf3). Guest results:"
	echo "$(grep -c '^RESULT PASS' "$console" || true) passed, $(grep -c '^RESULT FAIL' "$console" || true) failed$(grep '^RESULT FAIL' "$console" | sed 's/^RESULT FAIL /; /' | tr -d '\n' || true)."
	echo "Command: \`$cmdline\`"
	echo "<!-- bench-verbs end -->"
} >"$section"

# Splice: replace the last run's section, or append one.
if [ -f "$out" ] && grep -q '^<!-- bench-verbs: ' "$out"; then
	awk -v f="$section" '/^<!-- bench-verbs: / { while ((getline l < f) > 0) print l; skip = 1; next }
		skip && /^<!-- bench-verbs end -->/ { skip = 0; next } !skip' "$out" >"$tmp/out.md"
else
	{ [ ! -f "$out" ] || { cat "$out"; echo; }; cat "$section"; } >"$tmp/out.md"
fi
mv "$tmp/out.md" "$out"


say "ipoibd RC ${tput[ipoibd-rc]} Gbit/s, UD ${tput[ipoibd-ud]}, ib_send_bw RC ${tput[sendbw-RC]}, UD ${tput[sendbw-UD]}, kernel TCP ${tput[tcp]}"
say "ipoibd RC ÷ ib_send_bw RC $(ratio "${tput[ipoibd-rc]}" "${tput[sendbw-RC]}") (target ≥ 0.8); ipoibd UD ÷ ib_send_bw UD $(ratio "${tput[ipoibd-ud]}" "${tput[sendbw-UD]}"); ipoibd RC ÷ kernel TCP $(ratio "${tput[ipoibd-rc]}" "${tput[tcp]}")"
say "wrote the section to $out"
[ "$finished" = 1 ] || die "the guest did not finish (test bed exit $st); nothing written to BENCHMARKS.md"
[ "$st" = 0 ] || die "the test bed reported failures (exit $st); see the section's guest results"
