#!/usr/bin/env bash
# The SA client's retries on the kernel's ib_umad (issue 38 item 1). ibsim's
# libumad2sim.so does not model ib_umad's refusal of a request whose TID is
# still pending, so it is judged here: RoCE has no SA, so a silent agent on
# rxe1 stands in for one that never answers (saclient silent: it takes the
# SA class's Get requests and answers none), and saclient on rxe0 asks it
# by GID. Checks:
#   kernel-refuses-duplicate-tid  two writes of one TID: the second is EINVAL
#                                 (what the client's retries hit when they
#                                 reused the TID)
#   retries-not-refused           a path query to the silent agent ends as a
#                                 timeout after its 3 tries, no write refused
#   each-try-own-tid              the agent saw 3 requests with 3 TIDs
set -uo pipefail

A=${TESTBED_DEV_A:-rxe0} B=${TESTBED_DEV_B:-rxe1}
pass() { echo "RESULT PASS sa-retry/$1"; }
fail() { echo "RESULT FAIL sa-retry/$1: $2"; }
gid() { cat "/sys/class/infiniband/$1/ports/1/gids/$2"; }
out=/tmp/sa-retry
mkdir -p "$out"
GB=$(gid "$B" "${TESTBED_GID_INDEX_B:-1}")
target=$(gid "$A" "${TESTBED_GID_INDEX_A:-1}") # any GID: nobody answers for it

# silent FILE: the agent on B for 20 s, ready once it says it listens.
silent() {
	./saclient -ca "$B" -port 1 silent 20s >"$1" 2>&1 &
	for _ in $(seq 50); do grep -q listening "$1" && return 0; sleep 0.1; done
	return 1
}

if ! silent "$out/dup.agent"; then
	fail kernel-refuses-duplicate-tid "the silent agent did not start: $(cat "$out/dup.agent")"
	exit 0
fi
./saclient -ca "$A" -port 1 -dgid "$GB" -gid-index "${TESTBED_GID_INDEX_A:-1}" dupsend "$target" >"$out/dup" 2>&1
cat "$out/dup"
if grep -q '"einval":true' "$out/dup"; then pass kernel-refuses-duplicate-tid; else
	fail kernel-refuses-duplicate-tid "$(tr '\n' ' ' <"$out/dup")"
fi
kill %1 2>/dev/null
wait

if ! silent "$out/path.agent"; then
	fail retries-not-refused "the silent agent did not start: $(cat "$out/path.agent")"
	exit 0
fi
./saclient -ca "$A" -port 1 -dgid "$GB" -gid-index "${TESTBED_GID_INDEX_A:-1}" -timeout 300ms -retries 2 path "$target" >"$out/path" 2>&1
cat "$out/path"
if grep -q '"timed_out":true' "$out/path" && grep -q '"einval":false' "$out/path" && grep -q '"retries":2' "$out/path"; then
	pass retries-not-refused
else
	fail retries-not-refused "$(tr '\n' ' ' <"$out/path")"
fi
kill -INT %1 2>/dev/null
wait
cat "$out/path.agent"
tids=$(grep -o '"tid":[0-9]*' "$out/path.agent" | sort -u | wc -l)
if [ "$tids" = 3 ]; then pass each-try-own-tid; else
	fail each-try-own-tid "the agent saw $(grep -c '"tid"' "$out/path.agent") requests with $tids TIDs, want 3 and 3"
fi
