# The build and test contract of ipoibd. `sudo make test` is what CI runs.
GO ?= go

.PHONY: build test lint fuzz bench demo deps

build:
	$(GO) build ./...
	$(GO) build -o bin/ipoibd ./ipoibd

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

# The main job: a three-host cluster over softib (needs root).
demo: build
	scripts/deps.sh runtime
	scripts/demo.sh
