#!/usr/bin/env bash
# Runs every fuzz target of the module for FUZZTIME each (default 30s).
# The seed corpora already run in `make test`; this explores beyond them.
set -euo pipefail
fuzztime=${FUZZTIME:-30s}
for pkg in $(go list ./...); do
	for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
		echo "== $pkg $target ($fuzztime)"
		go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg"
	done
done
