#!/usr/bin/env bash
# Runs the tests of chosen packages N times and lists what failed, how
# often: for finding flaky tests (#27 item 3). Root for the end-to-end
# tests, as make test.
#
#   scripts/flaky.sh [-n N] [-hog] [-run REGEXP] [PACKAGE...]
#
# -n N         runs (default 5)
# -hog         beside one busy loop per CPU, as on a loaded CI machine
# -run REGEXP  only these tests (go test -run)
# PACKAGE      go test's package patterns (default ./...)
# Each run's output goes to FLAKY_DIR (default /tmp/flaky)/run-K.log; the
# bound per package binary is FLAKY_TIMEOUT (default 30m). The
# exit status is 1 when any run failed.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
runs=5 hog=0 run=""
while [ $# -gt 0 ]; do
	case $1 in
	-n) runs=$2; shift 2 ;;
	-hog) hog=1; shift ;;
	-run) run=$2; shift 2 ;;
	-h | --help) sed -n '2,14p' "$0"; exit 0 ;;
	-*) echo "flaky: unknown option $1" >&2; exit 2 ;;
	*) break ;;
	esac
done
[ $# -gt 0 ] || set -- ./...
dir=${FLAKY_DIR:-/tmp/flaky}
mkdir -p "$dir"
rm -f "$dir"/run-*.log

hogs=()
stop_hogs() {
	local p
	for p in "${hogs[@]}"; do kill "$p" 2>/dev/null || true; done
}
trap stop_hogs EXIT
if [ "$hog" = 1 ]; then
	for _ in $(seq "$(nproc)"); do
		bash -c 'while :; do :; done' &
		hogs+=($!)
	done
fi

# Beside a hog the ipoibd package takes longer than go test's default 10 m.
args=(test -count=1 -timeout "${FLAKY_TIMEOUT:-30m}")
[ -z "$run" ] || args+=(-run "$run")
failed=0
for k in $(seq "$runs"); do
	log=$dir/run-$k.log
	if "$GO" "${args[@]}" "$@" >"$log" 2>&1; then
		echo "run $k: ok"
	else
		failed=$((failed + 1))
		echo "run $k: FAILED: $(grep -E '^\s*--- FAIL|^FAIL\s|^panic:' "$log" | sed -E 's/^\s+//; s/ \(.*\)$//; s/\s+[0-9.]+s$//' | tr -s ' \t' ' ' | paste -sd ';' -)"
	fi
done
echo
echo "$failed of $runs runs failed$([ "$hog" = 1 ] && echo " (beside $(nproc) busy loops)")"
if [ "$failed" -gt 0 ]; then
	# Tests, then packages: a package can fail with no test failing (a
	# build failure, a panic, go test's timeout).
	echo "failures, most frequent first:"
	cat "$dir"/run-*.log | sed -nE 's/^\s*--- FAIL: ([^ ]+).*/\1/p' | sort | uniq -c | sort -rn
	cat "$dir"/run-*.log | sed -nE 's/^FAIL\s+([^ \t]+)(\s+\[.*\])?.*/package \1\2/p' | sort | uniq -c | sort -rn
	exit 1
fi
