#!/usr/bin/env bash
# gofmt, go vet and staticcheck must all be clean.
set -euo pipefail
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:" $unformatted >&2
	exit 1
fi
go vet ./...
"$(go env GOPATH)/bin/staticcheck" ./...
