#!/usr/bin/env bash
# The soak (make soak; root; not part of make test): three hosts over softib
# in connected mode for SOAK_SECONDS (default 180). h1's underlay drops
# SOAK_LOSS % (default 2) of the fabric datagrams it receives; iperf3 runs
# h1 -> h2 and h2 -> h1 at SOAK_RATE each (default 300M: the machine is
# shared); pings run h1 <-> h2 both ways and h1 -> h3; h3's daemon is
# killed with SIGKILL and restarted every SOAK_RESTART_EVERY s (default 30).
# Half-way, a fourth host without a daemon floods h2 with SOAK_FLOOD REQs
# that never complete (default 20000, at 4000/s; internal/reqflood).
# Every SOAK_SAMPLE s (default 10) it prints, per host, the daemon's RSS and
# Go heap in use, goroutines, open files, neighbors and connections (from
# --metrics-listen), how much of the packet slab is resident and the RSS
# split into anonymous and file-backed memory, and at the end every lost ping with whether it fell in
# a restart window. The daemons write heap profiles (IPOIBD_HEAPPROFILE)
# to SOAK_DIR (default /tmp/soak): `go tool pprof -sample_index=inuse_space
# bin/ipoibd $SOAK_DIR/h1.heap` shows what holds memory.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
testnet=${TESTNET:-$here/../bin/testnet}
IPOIBD=${IPOIBD:-$here/../bin/ipoibd}
reqflood=${REQFLOOD:-$here/../bin/reqflood}
flood=${SOAK_FLOOD:-20000}
export IPOIBD
name=soak
net=${CLUSTER_NET:-78}
export CLUSTER_NET=$net
seconds=${SOAK_SECONDS:-180}
loss=${SOAK_LOSS:-2}
rate=${SOAK_RATE:-300M}
restart_every=${SOAK_RESTART_EVERY:-30}
sample=${SOAK_SAMPLE:-10}
dir=${SOAK_DIR:-/tmp/soak}
metrics=127.0.0.1:9468

[ "$(id -u)" = 0 ] || { echo "soak: run as root (sudo make soak)" >&2; exit 1; }
[ -x "$testnet" ] || { echo "soak: no $testnet (run make build)" >&2; exit 1; }
on() { "$testnet" exec "$name" "$@"; }
mkdir -p "$dir"
rm -f "$dir"/*.heap "$dir"/*.ping "$dir"/restarts "$dir"/samples

bg=()
cleanup() {
	local p
	for p in "${bg[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	"$testnet" down "$name" || true
}
"$testnet" down "$name" 2>/dev/null || true
trap cleanup EXIT

start() {
	IPOIBD_HEAPPROFILE=$dir/h$1.heap "$testnet" start "$name" "$1" --mode connected --metrics-listen "$metrics"
}

"$testnet" up "$name" 4
for k in 1 2 3; do start $k; done
"$testnet" loss "$name" 1 "$loss"

# One scrape of host k's metrics, summed per name (labels dropped).
scrape() {
	on "$1" curl -sf --max-time 5 "http://$metrics/metrics" | awk '
		/^#/ { next }
		{ n = $1; sub(/\{.*/, "", n); v[n] += $NF }
		END {
			printf "%7.1f %7.1f %5d %4d %4d %4d\n",
				v["process_resident_memory_bytes"] / 1048576, v["go_memstats_heap_inuse_bytes"] / 1048576,
				v["go_goroutines"], v["process_open_fds"], v["ipoibd_neighbors"], v["ipoibd_connections"]
		}'
}

# The resident part of host k's packet slab (ipoib/slots.go): the one
# anonymous mapping of slab_bytes, which pages fault into as slots are
# first used; bounded by its size, unlike a leak (since #27 all at once).
slab_bytes=$(((256 + 32 + 256) * 68 * 1024 + 2048 * 8 * 1024))
slab_mib() {
	local pid range rest cur=0 kb=0 seen=0
	pid=$("$testnet" pid "$name" "$1") || { echo -; return; }
	while read -r range rest; do
		case $range in
		*-*)
			cur=$(((16#${range#*-}) - (16#${range%-*}) == slab_bytes))
			seen=$((seen | cur))
			;;
		Rss:) [ "$cur" = 0 ] || kb=$((kb + ${rest%% *})) ;;
		esac
	done <"/proc/$pid/smaps" 2>/dev/null || true
	# No mapping of that size: the kernel merged the slab with a
	# neighbouring one.
	if [ "$seen" = 1 ]; then echo $((kb / 1024)); else echo -; fi
}

# Host k's RSS split: anonymous (heap, stacks, the slab) and file-backed
# (the daemon's own code and data, paged in as its code paths first run).
rss_parts() {
	local pid
	pid=$("$testnet" pid "$name" "$1") || { echo "0 0"; return; }
	awk '/^RssAnon:/ { a = $2 } /^RssFile:/ { f = $2 } END { printf "%7.1f %7.1f", a / 1024, f / 1024 }' "/proc/$pid/status" 2>/dev/null || echo "0 0"
}

# Pings with timestamps (-D) and a line for each unanswered one (-O).
ping_bg() { # from to label
	# Not through on(): $! must be ping itself (testnet exec becomes it),
	# to be stopped with SIGINT, which makes it print its summary.
	"$testnet" exec "$name" "$1" ping -D -O -i 0.2 -W 1 "192.168.$net.$2" >"$dir/$3.ping" 2>&1 &
	bg+=($!)
}
ping_bg 1 2 h1-h2
ping_bg 2 1 h2-h1
ping_bg 1 3 h1-h3

on 2 iperf3 -s -p 5201 -D
on 1 iperf3 -s -p 5202 -D
for kp in 2:5201 1:5202; do
	for _ in $(seq 50); do on "${kp%:*}" ss -Hltn "sport = :${kp#*:}" | grep -q . && break; sleep 0.1; done
done
on 1 iperf3 -c "192.168.$net.2" -p 5201 -t "$seconds" -b "$rate" -i 0 >"$dir/iperf-h1-h2" 2>&1 &
bg+=($!)
on 2 iperf3 -c "192.168.$net.1" -p 5202 -t "$seconds" -b "$rate" -i 0 >"$dir/iperf-h2-h1" 2>&1 &
bg+=($!)

printf '%6s %4s %7s %7s %5s %4s %4s %4s %7s %7s %7s\n' t host rss_MiB heap_MiB gorout fds neigh conns slab_MiB anon_MiB file_MiB | tee "$dir/samples"
t0=$(date +%s)
next_restart=$restart_every
next_sample=0
flooded=0
while :; do
	t=$(($(date +%s) - t0))
	[ "$t" -le "$seconds" ] || break
	if [ "$t" -ge "$next_sample" ]; then
		for k in 1 2 3; do
			printf '%6d %4s %s %7s %s\n' "$t" "h$k" "$(scrape $k || echo '   (no answer)')" "$(slab_mib $k)" "$(rss_parts $k)"
			# Kept per sample for go tool pprof -diff_base.
			cp "$dir/h$k.heap" "$dir/h$k-$t.heap" 2>/dev/null || true
		done | tee -a "$dir/samples"
		next_sample=$((next_sample + sample))
	fi
	if [ "$flooded" = 0 ] && [ "$t" -ge $((seconds / 2)) ] && [ "$flood" -gt 0 ]; then
		flooded=1
		link=$(on 2 "$IPOIBD" show --json | jq -r .link_addr)
		echo "   $t s: h4 floods h2 with $flood REQs"
		on 4 "$reqflood" -from "10.$net.0.4" -to "10.$net.0.2" -link "$link" -n "$flood" >"$dir/reqflood" 2>&1 &
		bg+=($!)
	fi
	if [ "$t" -ge "$next_restart" ] && [ $((t + 5)) -lt "$seconds" ]; then
		a=$(date +%s.%N)
		"$testnet" stop "$name" 3 KILL
		start 3
		echo "$a $(date +%s.%N)" >>"$dir/restarts"
		next_restart=$((next_restart + restart_every))
	fi
	sleep 1
done
for p in "${bg[@]}"; do kill -INT "$p" 2>/dev/null || true; done
wait 2>/dev/null || true

echo
echo "== iperf3"
for f in "$dir"/iperf-*; do grep -E 'sender|receiver' "$f" | sed "s|^\[ *[0-9]*\] *|${f##*/}: |"; done
echo "== pings (lost: never answered; h3's restart window: from its SIGKILL to 5 s after its daemon answers again)"
for f in "$dir"/*.ping; do
	awk -v restarts="$dir/restarts" -v label="${f##*/}" '
		BEGIN { while ((getline l < restarts) > 0) { split(l, r, " "); n++; from[n] = r[1] + 0; to[n] = r[2] + 5 } }
		/bytes from/ { seq = $0; sub(/.*icmp_seq=/, "", seq); sub(/ .*/, "", seq); answered[seq] = 1 }
		/no answer yet/ { seq = $0; sub(/.*icmp_seq=/, "", seq); ts = $1; gsub(/[][]/, "", ts); late[seq] = ts + 0 }
		/transmitted/ { summary = $0 }
		END {
			for (seq in late) {
				if (seq in answered) continue
				inwin = 0
				for (i = 1; i <= n; i++) if (late[seq] >= from[i] && late[seq] <= to[i]) inwin = 1
				if (label ~ /h3/ && inwin) win++
				else { out++; printf "   %s: seq %s lost at %.3f\n", label, seq, late[seq] }
			}
			printf "%s: %s; lost in restart windows %d, outside them %d\n", label, summary, win, out
		}' "$f"
done
echo "== samples in $dir/samples, heap profiles in $dir/h*.heap"
