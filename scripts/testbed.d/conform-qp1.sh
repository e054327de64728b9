#!/usr/bin/env bash
# The provider conformance suite's QP1 rule on verbs (ib/ibconform): the
# verbs tests run it with the kernel's CM loaded, which holds QP1's CM
# class, so there it is skipped. This hook unloads rdma_ucm, rdma_cm and
# ib_cm, runs the suite again (verbs.test, TestConformance), demands that
# the QP1 rule passed, not skipped, and loads rdma_ucm again for the hooks
# after it. Checks: kernel-cm-unloaded, suite, qp1-mads.
set -uo pipefail

pass() { echo "RESULT PASS conform-qp1/$1"; }
fail() { echo "RESULT FAIL conform-qp1/$1: $2"; }
out=/tmp/conform-qp1.out

if [ ! -x ./verbs.test ]; then
	fail suite "no verbs.test in $PWD"
	exit 0
fi
modprobe -r rdma_ucm rdma_cm iw_cm ib_cm 2>/tmp/conform-qp1.modprobe
if [ -e /sys/module/ib_cm ]; then
	fail kernel-cm-unloaded "ib_cm is still loaded: $(cat /tmp/conform-qp1.modprobe)"
	exit 0
fi
pass kernel-cm-unloaded
modprobe ib_umad
IPOIBD_VERBS_DEVICES=${IPOIBD_VERBS_DEVICES:-rxe0,rxe1} timeout 120 ./verbs.test -test.run '^TestConformance$' -test.v -test.timeout 100s >"$out" 2>&1
rc=$?
sed 's/^/  | /' "$out"
if [ $rc = 0 ]; then pass suite; else fail suite "exit status $rc"; fi
if grep -q -- '--- PASS: TestConformance/QP1_carries_MADs' "$out"; then pass qp1-mads; else
	fail qp1-mads "the QP1 rule did not pass: $(grep -m1 -A1 -- 'QP1_carries_MADs' "$out" | tail -n 1)"
fi
modprobe -a rdma_ucm >/dev/null 2>&1
exit 0
