#!/usr/bin/env bash
# Installs what the tests and tools need on a fresh Debian machine. Idempotent:
# it only installs what is missing, so `make test` can call it every time.
set -euo pipefail

STATICCHECK_VERSION=${STATICCHECK_VERSION:-v0.8.2}

need_apt=()
command -v tshark >/dev/null || need_apt+=(tshark)
command -v ip >/dev/null || need_apt+=(iproute2)
command -v nft >/dev/null || need_apt+=(nftables)
command -v ping >/dev/null || need_apt+=(iputils-ping)
command -v tracepath >/dev/null || need_apt+=(iputils-tracepath)
command -v iperf3 >/dev/null || need_apt+=(iperf3)
command -v socat >/dev/null || need_apt+=(socat)
command -v jq >/dev/null || need_apt+=(jq) # make bench reads iperf3 -J and show --json
# The service tests: a daemon with only the unit's capabilities, queries as
# nobody, and the unit's systemd-analyze security score.
if [ "${1:-}" != runtime ]; then
	command -v setpriv >/dev/null || need_apt+=(util-linux)
	command -v systemd-analyze >/dev/null || need_apt+=(systemd)
fi
# The rxe test bed (scripts/rxe-testbed.sh) and cgo in verbs/ (go vet -tags rdma);
# not for `deps.sh runtime`, the demo needs none of it.
if [ "${1:-}" != runtime ]; then
	command -v qemu-system-x86_64 >/dev/null || need_apt+=(qemu-system-x86)
	command -v debootstrap >/dev/null || need_apt+=(debootstrap)
	command -v cpio >/dev/null || need_apt+=(cpio)
	command -v depmod >/dev/null || need_apt+=(kmod) # the guest's module index
	[ -e /usr/include/infiniband/verbs.h ] || need_apt+=(libibverbs-dev)
	[ -e /usr/include/rdma/rdma_cma.h ] || need_apt+=(librdmacm-dev)
fi
if ((${#need_apt[@]})); then
	if [ "$(id -u)" != 0 ]; then
		echo "deps: need ${need_apt[*]}; run as root (sudo make test) so they can be installed" >&2
		exit 1
	fi
	echo "deps: installing ${need_apt[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

# `deps.sh runtime` stops here: the demo needs no linters.
[ "${1:-}" = runtime ] && exit 0

gobin=$(go env GOPATH)/bin
if ! "$gobin/staticcheck" -version 2>/dev/null | grep -q "${STATICCHECK_VERSION#v}"; then
	echo "deps: installing staticcheck $STATICCHECK_VERSION"
	GOFLAGS= go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
fi
