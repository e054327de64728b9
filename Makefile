# The build and test contract of ipoibd. `sudo make test` is what CI runs.
GO ?= go

.PHONY: build test lint fuzz bench demo deps

build:
	$(GO) build ./...

deps:
	scripts/deps.sh

lint: deps
	scripts/lint.sh

# Unit tests with the fuzz seed corpora, the tshark wire check and the
# end-to-end tests (root: they make TUN devices and network namespaces).
test: lint
	$(GO) test -count=1 ./...

fuzz:
	scripts/fuzz.sh

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

demo:
	@echo "make demo: not yet. The demo cluster (three hosts over softib: ping, iperf3," >&2
	@echo "neighbor and connection tables) needs the daemon, which does not exist yet." >&2
	@echo "Today only the wire codecs exist; see the status table in README.md." >&2
	@exit 1
