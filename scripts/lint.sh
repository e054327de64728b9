#!/usr/bin/env bash
# gofmt, go vet and staticcheck must all be clean, in the default (pure Go)
# build and in the rdma build of the verbs provider (cgo; deps.sh installs
# libibverbs-dev and librdmacm-dev).
set -euo pipefail
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:" $unformatted >&2
	exit 1
fi
go vet ./...
go vet -tags rdma ./...
"$(go env GOPATH)/bin/staticcheck" ./...
"$(go env GOPATH)/bin/staticcheck" -tags rdma ./...
