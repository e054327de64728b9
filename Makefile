# The build and test contract of ipoibd. `sudo make test` is what CI runs.
GO ?= go

PREFIX ?= /usr/local
SYSTEMD_DIR ?= /etc/systemd/system

.PHONY: build test testbed testbed-systemd lint fuzz bench demo deps deps-proof install uninstall unit man soak

build:
	$(GO) build ./...
	$(GO) build -buildvcs=auto -o bin/ipoibd ./ipoibd
	$(GO) build -o bin/testnet ./internal/testnet/cmd/testnet

# The systemd unit with ExecStart under PREFIX, made from its template.
UNIT ?= bin/ipoibd@.service
unit:
	mkdir -p $(dir $(UNIT))
	sed 's|@SBINDIR@|$(PREFIX)/sbin|g' dist/ipoibd@.service.in >$(UNIT)

# The man page, generated from the daemon's own flag set (ipoibd man).
man:
	$(GO) run ./ipoibd man >dist/ipoibd.8

deps:
	scripts/deps.sh

lint: deps
	scripts/lint.sh

# deps.sh proven on a minimal Debian (debootstrap minbase): afterwards every
# command the scripts and tests call must be there (root; seconds when cached).
deps-proof:
	GO=$(GO) scripts/deps-proof.sh

# Unit tests with the fuzz seed corpora (internal/depscheck among them: every
# command called comes from a fresh machine or deps.sh), the tshark wire check
# and the end-to-end tests (root: they make TUN devices and network
# namespaces); the OpenSM judges of the SA client's users, which link
# libibumad (tag rdma); then the real-kernel RDMA test bed.
test: lint deps-proof
	$(GO) test -count=1 ./...
	$(GO) test -count=1 -tags rdma -run 'OpenSM|IBSim' ./sapath/ ./ipoib/ ./verbs/
	GO=$(GO) scripts/rxe-testbed.sh

# Debian's kernel under QEMU with two soft-RoCE devices (root; TESTBED_SKIP=1 skips).
testbed:
	GO=$(GO) scripts/rxe-testbed.sh

# Only the test bed's second boot: the shipped unit under systemd as PID 1,
# with systemd-networkd (root).
testbed-systemd:
	TESTBED_BOOTS=systemd GO=$(GO) scripts/rxe-testbed.sh

fuzz:
	scripts/fuzz.sh

# Throughput, latency, connection setup and memory against socat, wireguard-go
# and the bare veth (root; not part of test); writes BENCHMARKS.md.
bench: build
	scripts/deps.sh runtime
	scripts/bench.sh

# Memory and connections over a long run with loss, iperf3, pings and
# SIGKILL restarts (root; not part of test; SOAK_SECONDS, default 180).
soak: build
	$(GO) build -o bin/reqflood ./internal/reqflood
	scripts/deps.sh runtime
	scripts/soak.sh

# The main job: a three-host cluster over softib (needs root). IB=1: the
# same on an InfiniBand subnet that OpenSM runs under ibsim.
demo: build
	IB=$(IB) scripts/deps.sh runtime
	IB=$(IB) GO=$(GO) scripts/demo.sh

# Installs the daemon and the systemd template unit ipoibd@IFNAME.service;
# flags per interface go in /etc/ipoibd/IFNAME.env (see dist/ib0.env.example).
install: build unit
	install -D -m 0755 bin/ipoibd $(DESTDIR)$(PREFIX)/sbin/ipoibd
	install -D -m 0644 $(UNIT) $(DESTDIR)$(SYSTEMD_DIR)/ipoibd@.service
	mkdir -p $(DESTDIR)$(PREFIX)/share/man/man8
	bin/ipoibd man >$(DESTDIR)$(PREFIX)/share/man/man8/ipoibd.8
	install -D -m 0644 dist/ib0.env.example $(DESTDIR)/etc/ipoibd/ib0.env.example
	@if [ -z "$(DESTDIR)" ] && command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then systemctl daemon-reload; fi

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/sbin/ipoibd $(DESTDIR)$(SYSTEMD_DIR)/ipoibd@.service $(DESTDIR)/etc/ipoibd/ib0.env.example $(DESTDIR)$(PREFIX)/share/man/man8/ipoibd.8
