# Helpers the test bed's hooks share (scripts/testbed.d, testbed.systemd.d,
# bench-verbs.d). Sourced, not run: scripts/rxe-testbed.sh copies it into
# the guest beside the hook directories, as /opt/ipoibd/testbed-lib.sh.
# shellcheck shell=bash

# within SECONDS CMD...: CMD until it succeeds, polled every 0.2 s (under
# TCG a poll's own processes slow what it waits for); fails after SECONDS.
within() {
	local end=$((SECONDS + $1))
	shift
	until "$@" >/dev/null 2>&1; do
		((SECONDS < end)) || return 1
		sleep 0.2
	done
}

# elapsed START: the time since START (an $EPOCHREALTIME), as "1.2s".
elapsed() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1fs", b - a }'; }

# answering PID NS [SECONDS]: wait until the ipoibd started as PID answers
# on its control socket in namespace NS; fails at once if PID exits, or
# after SECONDS (default 20).
answering() {
	local pid=$1 ns=$2 end=$((SECONDS + ${3:-20}))
	until ip netns exec "$ns" ipoibd show >/dev/null 2>&1; do
		kill -0 "$pid" 2>/dev/null || return 1
		((SECONDS < end)) || return 1
		sleep 0.1
	done
}
