#!/usr/bin/env bash
# A/B throughput of two ipoibd revisions (make bench-ab OLD=REV; root): the
# daemon built from git revision OLD against the one built from the working
# tree, on the same two namespaces, runs interleaved (old, new, old, new,
# ...) so that a machine that slows down during the run slows both alike.
# Per path (RC, UC, UD at its MTU, UD at 2044, and RC and UD with 1460-octet
# TCP segments, iperf3 -M 1460) it prints the median of each
# side's iperf3 runs (1 stream) and new ÷ old. make bench answers "how far
# from the ceiling"; this answers "did a change make it slower".
#
#   AB_OLD      the revision to compare with (required; e.g. HEAD~5, a hash)
#   AB_SECONDS  iperf3 duration of each run (default 5)
#   AB_REPS     runs per side and path (default 5)
#   AB_NET      cluster number: underlay 10.N.0.0/24 (default 251)
#   AB_PATHS    the paths to run (default "rc uc ud ud2044 rc1460"; also ud1460,
#               and rc4: RC with 4 streams)
set -Eeuo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
old=${AB_OLD:?set AB_OLD (make bench-ab OLD=REV) to the revision to compare with}
secs=${AB_SECONDS:-5}
reps=${AB_REPS:-5}
net=${AB_NET:-251}
read -r -a paths <<<"${AB_PATHS:-rc uc ud ud2044 rc1460}"
export CLUSTER_NET=$net
# The namespaces' names carry the cluster number: two runs on other
# AB_NETs do not take each other's hosts down.
name=benchab$net

say() { printf '[bench-ab %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { echo "bench-ab: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root: it makes network namespaces and TUN devices"
for c in iperf3 jq git; do command -v $c >/dev/null || die "$c is missing (run scripts/deps.sh runtime)"; done
rev=$(git rev-parse --verify "$old^{commit}") || die "no revision $old"

tmp=$(mktemp -d /tmp/ipoibd-bench-ab.XXXXXX)
testnet=$tmp/testnet
cleanup() {
	"$testnet" down "$name" >/dev/null 2>&1 || true
	git worktree remove --force "$tmp/old-src" >/dev/null 2>&1 || true
	rm -rf "$tmp"
}
trap cleanup EXIT

say "building ipoibd at $old (${rev:0:12}) and from the working tree"
git worktree add --detach -q "$tmp/old-src" "$rev"
go build -C "$tmp/old-src" -o "$tmp/ipoibd-old" ./ipoibd
go build -o "$tmp/ipoibd-new" ./ipoibd
go build -o "$testnet" ./internal/testnet/cmd/testnet
"$testnet" down "$name"

median() { sort -g | awk '{v[NR]=$1} END {if (NR==0) {print "n/a"} else if (NR%2) {print v[(NR+1)/2]} else {print (v[NR/2]+v[NR/2+1])/2}}'; }

# run SIDE FLAGS...: fresh hosts with that side's daemon, one iperf3 run
# from h1 to h2 (with the path's iperf3 arguments, iperf_args); prints
# Gbit/s.
iperf_args=()
run() {
	local side=$1 pidfile=$tmp/iperf3.pid srv gbps
	shift
	"$testnet" down "$name"
	"$testnet" up "$name" 2 >/dev/null
	for k in 1 2; do IPOIBD=$tmp/ipoibd-$side "$testnet" start "$name" $k "$@" >/dev/null; done
	"$testnet" exec "$name" 1 ping -c 3 -i 0.2 -W 3 "192.168.$net.2" >/dev/null || die "$side $*: h2 does not answer ping"
	rm -f "$pidfile"
	"$testnet" exec "$name" 2 iperf3 -s -D -I "$pidfile"
	for _ in $(seq 50); do [ -s "$pidfile" ] && break; sleep 0.05; done
	srv=$(cat "$pidfile")
	gbps=$("$testnet" exec "$name" 1 iperf3 -c "192.168.$net.2" -t "$secs" -J --connect-timeout 3000 "${iperf_args[@]}" |
		jq -r '.end.sum_received.bits_per_second / 1e9 * 100 | round / 100')
	kill "$srv" 2>/dev/null || true
	echo "$gbps"
}

printf '| path | old %s, Gbit/s | new, Gbit/s | new ÷ old |\n|---|---|---|---|\n' "${rev:0:12}" >"$tmp/table"
for p in "${paths[@]}"; do
	iperf_args=()
	case $p in
	rc) flags=() ;;
	rc4) flags=() iperf_args=(-P 4) ;; # 4 streams: what the TUN's queues share
	uc) flags=(--cm-modes uc) ;;
	ud) flags=(--mode datagram) ;;
	ud2044) flags=(--mode datagram --mtu 2044) ;;
	# TCP segments of a 1500-octet Ethernet packet: TSO super-packets cut
	# into 1460-octet segments, what make bench's 1460 rows send.
	rc1460) flags=() iperf_args=(-M 1460) ;;
	ud1460) flags=(--mode datagram) iperf_args=(-M 1460) ;;
	*) die "unknown path $p (rc, rc4, uc, ud, ud2044, rc1460, ud1460)" ;;
	esac
	a=() b=()
	for ((r = 1; r <= reps; r++)); do
		a+=("$(run old "${flags[@]}")")
		b+=("$(run new "${flags[@]}")")
	done
	ma=$(printf '%s\n' "${a[@]}" | median)
	mb=$(printf '%s\n' "${b[@]}" | median)
	q=$(awk -v a="$ma" -v b="$mb" 'BEGIN { if (a+0 > 0) printf "%.2f", b/a; else print "n/a" }')
	say "$p: old $ma (${a[*]}), new $mb (${b[*]}), new ÷ old $q"
	printf '| %s | %s (%s) | %s (%s) | %s |\n' "$p" "$ma" "${a[*]}" "$mb" "${b[*]}" "$q" >>"$tmp/table"
done
cat "$tmp/table"
