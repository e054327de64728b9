#!/usr/bin/env bash
# The namespace cluster of the demo, the bench and the end-to-end tests is
# made by internal/testnet; this runs its command, bin/testnet (make build
# makes it), with the same verbs:
#
#   cluster.sh up NAME N            make the bridge and N hosts (NAME-h1..hN)
#   cluster.sh start NAME K [FLAG]  start ipoibd on host K; waits until it answers
#   cluster.sh stop NAME K [SIG]    stop host K's daemon (default SIGTERM) and wait
#   cluster.sh exec NAME K CMD...   run a command on host K
#   cluster.sh log NAME K           print host K's daemon log
#   cluster.sh pid NAME K           print host K's daemon's process ID
#   cluster.sh loss NAME K PCT      drop PCT % of fabric datagrams arriving at host K
#   cluster.sh down NAME            stop every daemon, remove every namespace
#
# CLUSTER_NET (default 77) numbers the cluster that `up` makes; IPOIBD names
# the daemon (default bin/ipoibd); TESTNET the command (default bin/testnet).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
testnet=${TESTNET:-$here/bin/testnet}
export IPOIBD=${IPOIBD:-$here/bin/ipoibd}
[ -x "$testnet" ] || { echo "cluster: no $testnet (run make build)" >&2; exit 1; }
exec "$testnet" "$@"
