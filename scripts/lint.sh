#!/usr/bin/env bash
# gofmt, go vet and staticcheck must all be clean, in the default (pure Go)
# build and in the rdma build of the verbs provider (cgo; deps.sh installs
# libibverbs-dev and librdmacm-dev); shellcheck finds no warning in the
# shell scripts.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t gofiles < <(git ls-files '*.go' 2>/dev/null || find . -name '*.go')
unformatted=$(gofmt -l "${gofiles[@]}")
if [ -n "$unformatted" ]; then
	echo "gofmt would change:" "$unformatted" >&2
	exit 1
fi
shellcheck -S warning scripts/*.sh scripts/testbed.d/*.sh scripts/testbed.systemd.d/*.sh scripts/bench-verbs.d/*.sh .ci/run
go vet ./...
go vet -tags rdma ./...
"$(go env GOPATH)/bin/staticcheck" ./...
"$(go env GOPATH)/bin/staticcheck" -tags rdma ./...
