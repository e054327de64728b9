#!/usr/bin/env bash
# The soak (make soak; root; not part of make test): three hosts over softib
# in connected mode for SOAK_SECONDS (default 180). h1's underlay drops
# SOAK_LOSS % (default 2) of the fabric datagrams it receives; iperf3 runs
# h1 -> h2 and h2 -> h1 at SOAK_RATE each (default 300M: the machine is
# shared); pings run h1 <-> h2 both ways and h1 -> h3; h3's daemon is
# killed with SIGKILL and restarted every SOAK_RESTART_EVERY s (default 30).
# Half-way, two more hosts without a daemon flood h2 at once: h4 with
# SOAK_FLOOD REQs that never complete (default 20000, at 4000/s;
# internal/reqflood), h5 with SOAK_NS_FLOOD neighbor solicitations from
# random sources (default 40000, at 2000/s from four addresses;
# internal/nsflood).
# Every SOAK_SAMPLE s (default 10) it prints, per host, the daemon's RSS and
# Go heap in use, goroutines, open files, neighbors and connections (from
# --metrics-listen), how much of the packet slab is resident and the RSS
# split into anonymous and file-backed memory; every second it records
# every daemon's counters (and the kernel's UDP receive-buffer drops, and
# on h1 the underlay's loss) in $SOAK_DIR/counters. At the end: each
# host's figures first, lowest, highest and last; the trouble counters
# that grew; every lost ping, either in h3's restart window or with the
# counters of its two ends that grew at that moment (scripts/soak-losses.awk).
# The daemons write heap profiles (IPOIBD_HEAPPROFILE)
# to SOAK_DIR (default /tmp/soak): `go tool pprof -sample_index=inuse_space
# bin/ipoibd $SOAK_DIR/h1.heap` shows what holds memory.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
testnet=${TESTNET:-$here/../bin/testnet}
IPOIBD=${IPOIBD:-$here/../bin/ipoibd}
reqflood=${REQFLOOD:-$here/../bin/reqflood}
nsflood=${NSFLOOD:-$here/../bin/nsflood}
flood=${SOAK_FLOOD:-20000}
ns_flood=${SOAK_NS_FLOOD:-40000}
export IPOIBD
name=${SOAK_NAME:-soak}
net=${CLUSTER_NET:-252}
export CLUSTER_NET=$net
seconds=${SOAK_SECONDS:-180}
loss=${SOAK_LOSS:-2}
rate=${SOAK_RATE:-300M}
restart_every=${SOAK_RESTART_EVERY:-30}
sample=${SOAK_SAMPLE:-10}
counter_every=${SOAK_COUNTERS:-1}
dir=${SOAK_DIR:-/tmp/soak}
metrics=127.0.0.1:9468

[ "$(id -u)" = 0 ] || { echo "soak: run as root (sudo make soak)" >&2; exit 1; }
for b in "$testnet" "$IPOIBD" "$reqflood" "$nsflood"; do
	[ -x "$b" ] || { echo "soak: no $b (run make soak)" >&2; exit 1; }
done
on() { "$testnet" exec "$name" "$@"; }
mkdir -p "$dir"
rm -f "$dir"/*.heap "$dir"/*.ping "$dir"/restarts "$dir"/samples "$dir"/counters "$dir"/floods "$dir"/losses

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

"$testnet" up "$name" 5
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
	# Through grep, which reads smaps in large blocks: bash's read takes a
	# byte at a time, and each read makes the kernel walk the slab's pages
	# again (20 s per host on a busy machine).
	while read -r range rest; do
		case $range in
		*-*)
			cur=$(((16#${range#*-}) - (16#${range%-*}) == slab_bytes))
			seen=$((seen | cur))
			;;
		Rss:) [ "$cur" = 0 ] || kb=$((kb + ${rest%% *})) ;;
		esac
	done < <(grep -E '^[0-9a-f]+-[0-9a-f]+ |^Rss:' "/proc/$pid/smaps" 2>/dev/null) || true
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

# Every counter_every s, each daemon's counters (its metrics' ipoibd_*_total,
# summed over labels), the kernel's UDP receive-buffer drops in its
# namespace (softib's socket) and on h1 the drops of the underlay loss
# (testnet's nft counter): "epoch host name value" lines, for the lost
# pings' explanations.
counters_bg() {
	local k pid now
	while :; do
		now=$(date +%s.%N)
		for k in 1 2 3; do
			on "$k" curl -sf --max-time 2 "http://$metrics/metrics" 2>/dev/null | awk -v t="$now" -v h="h$k" '
				/^ipoibd_[a-z0-9_]*_total[{ ]/ { n = $1; sub(/\{.*/, "", n); sub(/^ipoibd_/, "", n); sub(/_total$/, "", n); v[n] += $NF }
				END { for (n in v) print t, h, n, v[n] }' || true
			pid=$("$testnet" pid "$name" "$k" 2>/dev/null) || continue
			awk -v t="$now" -v h="h$k" '/^Udp:/ {
				if (!hdr) { for (i = 2; i <= NF; i++) col[$i] = i; hdr = 1 } else print t, h, "kernel_udp_rcvbuf_errors", $col["RcvbufErrors"]
			}' "/proc/$pid/net/snmp" 2>/dev/null || true
		done
		on 1 nft list table inet fabricloss 2>/dev/null | awk -v t="$now" '
			/counter packets/ { for (i = 1; i < NF; i++) if ($i == "packets") print t, "h1", "underlay_loss_drops", $(i + 1) }' || true
		sleep "$counter_every"
	done >>"$dir/counters"
}
counters_bg &
sampler=$!
bg+=("$sampler")

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
floods=()
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
	if [ "$flooded" = 0 ] && [ "$t" -ge $((seconds / 2)) ]; then
		flooded=1
		link=$(on 2 "$IPOIBD" show --json | jq -r .link_addr)
		if [ "$flood" -gt 0 ]; then
			echo "   $t s: h4 floods h2 with $flood REQs (4000/s)"
			echo "$(date +%s.%N) reqflood $flood" >>"$dir/floods"
			on 4 "$reqflood" -from "10.$net.0.4" -to "10.$net.0.2" -link "$link" -n "$flood" >"$dir/reqflood" 2>&1 &
			floods+=($!)
		fi
		if [ "$ns_flood" -gt 0 ]; then
			# From a fifth host: softib's socket takes the fabric port on
			# every address, which reqflood's holds on h4's. Four
			# sending nodes there, so that per-node limits alone do not
			# stop the flood.
			from=10.$net.0.5
			for a in 105 106 107; do
				on 5 ip addr add "10.$net.0.$a/24" dev eth0
				from=$from,10.$net.0.$a
			done
			echo "   $t s: h5 floods h2 with $ns_flood neighbor solicitations (2000/s)"
			echo "$(date +%s.%N) nsflood $ns_flood" >>"$dir/floods"
			on 5 "$nsflood" -from "$from" -link "$link" -target "fd00:$net::2" -n "$ns_flood" -rate 2000 >"$dir/nsflood" 2>&1 &
			floods+=($!)
		fi
		bg+=("${floods[@]}")
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
# Pings end with SIGINT (their summary); the sampler and floods, started
# in the background of a script, ignore it.
kill "$sampler" "${floods[@]}" 2>/dev/null || true
for p in "${bg[@]}"; do kill -INT "$p" 2>/dev/null || true; done
wait 2>/dev/null || true

echo
echo "== iperf3"
for f in "$dir"/iperf-*; do grep -E 'sender|receiver' "$f" | sed "s|^\[ *[0-9]*\] *|${f##*/}: |"; done
echo "== floods"
[ ! -s "$dir/floods" ] || awk -v t0="$t0" '{ printf "%s from %+.1f s: %s\n", $2, $1 - t0, $3 }' "$dir/floods"
for f in reqflood nsflood; do [ ! -s "$dir/$f" ] || cat "$dir/$f"; done
echo "== per host over the run: first, lowest, highest, last sample"
awk 'NR > 1 && $3 != "(no" {
	h = $2
	n[h]++
	for (c = 3; c <= 8; c++) {
		v = $c + 0
		if (n[h] == 1) { first[h, c] = v; lo[h, c] = v; hi[h, c] = v }
		if (v < lo[h, c]) lo[h, c] = v
		if (v > hi[h, c]) hi[h, c] = v
		lastv[h, c] = v
	}
}
END {
	split("rss_MiB heap_MiB goroutines open_files neighbors connections", title, " ")
	for (h = 1; h <= 3; h++) {
		k = "h" h
		if (!(k in n)) continue
		printf "%s (%d samples):", k, n[k]
		for (c = 3; c <= 8; c++) printf "  %s %g/%g/%g/%g", title[c - 2], first[k, c], lo[k, c], hi[k, c], lastv[k, c]
		printf "\n"
	}
}' "$dir/samples"
echo "== trouble counters that grew (a restarted daemon's count again from 0)"
awk -v trouble="drop|error|fail|timeout|timed_out|retransmit|nak|overrun|_full|busy|stale|rejected|refused|rej_sent|disconnect|restart|reinit|unreachable|evicted|rate_limited|mismatch|malformed|unknown|duplicate|expired|loss" '
	$3 ~ trouble {
		k = $2 " " $3
		if (k in prev) g[k] += $4 >= prev[k] ? $4 - prev[k] : $4
		prev[k] = $4
	}
	END { for (k in g) if (g[k] > 0) printf "%s %d\n", k, g[k] }' "$dir/counters" | sort -k1,1 -k3,3nr | awk '{ printf "   %s %s +%s\n", $1, $2, $3 }'
echo "== pings (lost: never answered; h3's restart window: from its SIGKILL to 5 s after its daemon answers again)"
awk -v restarts="$dir/restarts" -v counters="$dir/counters" -v t0="$t0" -f "$here/soak-losses.awk" "$dir"/*.ping >"$dir/losses"
grep '^   ' "$dir/losses" | sort -k1,1 -k3,3n || true
grep -v '^   ' "$dir/losses"
echo "== samples in $dir/samples, counters in $dir/counters, heap profiles in $dir/h*.heap"
