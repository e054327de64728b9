#!/usr/bin/env bash
# Installs every host command the scripts and tests call (and the C headers
# of cgo) on a fresh Debian machine, even a minimal one. Idempotent: it only
# installs what is missing, so `make test` can call it every time.
#
#   deps.sh [all]      what make test needs, and staticcheck
#   deps.sh runtime    what make demo and make bench need (IB=1: and
#                      make demo IB=1, the demo on an ibsim subnet)
#   deps.sh apt        all the apt packages, without the Go tools
#                      (scripts/deps-proof.sh, in a chroot without Go)
#   deps.sh MODE --list  print the packages MODE is responsible for
#
# Go itself, make and git (what runs make test at all) are not installed here.
# internal/depscheck (go test) fails when a command called by a script or a
# test comes from a package that is neither here nor on a fresh machine
# (scripts/fresh-machine-packages.txt); scripts/deps-proof.sh runs this in a
# debootstrap minbase chroot and checks that every such command is there.
set -euo pipefail

STATICCHECK_VERSION=${STATICCHECK_VERSION:-v0.8.2}
mode=${1:-all}
list=${2:-}
case $mode in all | apt | runtime) ;; *)
	echo "usage: $0 [all|apt|runtime] [--list]" >&2
	exit 2
	;;
esac

need=()
# want PKG THING...: install PKG unless every THING is there (a command, or
# a file when it starts with /). With --list, just print PKG.
want() {
	local pkg=$1 thing
	shift
	if [ "$list" = --list ]; then
		echo "$pkg"
		return
	fi
	for thing; do
		if [[ $thing == /* ]]; then [ -e "$thing" ]; else command -v "$thing" >/dev/null; fi || {
			need+=("$pkg")
			return
		}
	done
}

# The demo, the benchmarks (deps.sh runtime) and the tests.
want iproute2 ip
want iputils-ping ping
want iperf3 iperf3
want nftables nft # internal/testnet's loss (demo, bench, tests)
want socat socat  # the bench baseline, the multicast test
want jq jq        # make bench reads iperf3 -J and show --json
want curl curl    # scrapes --metrics-listen (make soak, ipoibd/metrics_test.go)
want wireguard-go wireguard-go # the bench baseline
want wireguard-tools wg
if [ "$mode" != runtime ]; then
	want iputils-tracepath tracepath
	# The wire checks: dumpcap captures, tshark decodes.
	want tshark tshark
	want wireshark-common dumpcap
	# The service tests: a daemon with only the unit's capabilities, and the
	# unit's systemd-analyze security score.
	want util-linux setpriv
	want systemd systemd-analyze
	want netplan.io netplan # dist/recipes_test.go: the netplan recipe
	want shellcheck shellcheck # make lint checks the shell scripts
	# cni/cnitool_test.go runs the README's configuration with Debian's
	# own host-local (1.1.1, CNI up to 1.0.0), as a Debian node has it.
	want containernetworking-plugins /usr/lib/cni/host-local
	# The rxe test bed (scripts/rxe-testbed.sh).
	want qemu-system-x86 qemu-system-x86_64
	want debootstrap debootstrap
	want cpio cpio
	want kmod depmod modprobe # the guest's module index
	# cgo in verbs/ (go vet -tags rdma, the test bed's builds).
	want libibverbs-dev /usr/include/infiniband/verbs.h
	want librdmacm-dev /usr/include/rdma/rdma_cma.h
fi
if [ "$mode" != runtime ] || [ "${IB:-}" = 1 ]; then
	# The SA client's judge (umadsa/opensm_test.go) and the demo on an
	# InfiniBand subnet (make demo IB=1): OpenSM on a fabric simulated by
	# ibsim (ibsim-utils brings libumad2sim.so), read with
	# infiniband-diags; umadsa's cgo (ipoibd -tags rdma) needs gcc and
	# libibumad's header.
	want gcc gcc
	want libc6-dev /usr/include/stdlib.h
	want libibumad-dev /usr/include/infiniband/umad.h
	want ibsim-utils ibsim /usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so
	want opensm opensm
	want infiniband-diags saquery ibroute ibswitches ibstat smpquery
fi
[ "$list" = --list ] && exit 0

if ((${#need[@]})); then
	if [ "$(id -u)" != 0 ]; then
		echo "deps: need ${need[*]}; run as root (sudo make test) so they can be installed" >&2
		exit 1
	fi
	echo "deps: installing ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# The linters, for make test only.
[ "$mode" = all ] || exit 0
command -v go >/dev/null || {
	echo "deps: no go: install Go (https://go.dev/dl/), see go.mod for the version" >&2
	exit 1
}
gobin=$(go env GOPATH)/bin
if ! "$gobin/staticcheck" -version 2>/dev/null | grep -q "${STATICCHECK_VERSION#v}"; then
	echo "deps: installing staticcheck $STATICCHECK_VERSION"
	GOFLAGS='' go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
fi
