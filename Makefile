# The build and test contract of ipoibd. `sudo make test` is what CI runs.
GO ?= go

# Where make install puts things, each under $(DESTDIR) (a staging root for
# packages). The system prefixes keep configuration in /etc and the unit
# where systemd reads it: /usr (a distribution's package) in the vendor
# directory /usr/lib/systemd/system, which /etc/systemd/system overrides;
# /usr/local (the administrator's own install) in /etc/systemd/system. Any
# other prefix (PREFIX=$$HOME/opt) holds all of it: $(PREFIX)/etc and
# $(PREFIX)/lib/systemd/system (link or copy the unit from there).
PREFIX ?= /usr/local
ifeq ($(PREFIX),/usr)
SYSCONFDIR ?= /etc
SYSTEMD_DIR ?= /usr/lib/systemd/system
else ifeq ($(PREFIX),/usr/local)
SYSCONFDIR ?= /etc
SYSTEMD_DIR ?= /etc/systemd/system
else
SYSCONFDIR ?= $(PREFIX)/etc
SYSTEMD_DIR ?= $(PREFIX)/lib/systemd/system
endif
SBINDIR ?= $(PREFIX)/sbin
MANDIR ?= $(PREFIX)/share/man
# The configuration tools' recipes (README's "Configuration tools") are
# examples to copy, not configuration: they go under DOCDIR.
DOCDIR ?= $(PREFIX)/share/doc/ipoibd
EXAMPLES = networkd/ib0.network networkd/ib0-unmanaged.network netplan/60-ipoibd-ib0.yaml \
	NetworkManager/ipoibd-unmanaged.conf ipoibd-netns.conf
# The CNI plugin goes where kubelet's runtimes look for plugins, /opt/cni/bin,
# for the system prefixes; under any other prefix to its libexec.
ifneq ($(filter /usr /usr/local,$(PREFIX)),)
CNI_BIN_DIR ?= /opt/cni/bin
else
CNI_BIN_DIR ?= $(PREFIX)/libexec/cni
endif

.PHONY: bench-rails build test testbed testbed-systemd lint fuzz bench bench-verbs bench-ab demo deps deps-proof install uninstall unit man soak

build:
	$(GO) build ./...
	$(GO) build -buildvcs=auto -o bin/ipoibd ./ipoibd
	$(GO) build -o bin/testnet ./internal/testnet/cmd/testnet
	$(GO) build -o bin/ipoibd-cni ./cni/cmd/ipoibd-cni

# The systemd unit with ExecStart in SBINDIR and its flags in SYSCONFDIR,
# made from its template.
UNIT ?= bin/ipoibd@.service
unit:
	mkdir -p $(dir $(UNIT))
	sed -e 's|@SBINDIR@|$(SBINDIR)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' dist/ipoibd@.service.in >$(UNIT)

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
# -timeout: the ipoibd package's end-to-end tests take about 4 minutes on a
# quiet 2-core machine and over 10 (go test's default bound) on a loaded one.
test: lint deps-proof
	$(GO) test -count=1 -timeout 25m ./...
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

# The verbs provider on the real kernel: in the rxe test bed's guest (QEMU,
# TCG), ipoibd --provider verbs (RC and UD) beside perftest's ib_send_bw and
# ib_send_lat and the kernel's TCP on the same devices (root; not part of
# test; about 10 minutes); writes its section of BENCHMARKS.md.
bench-verbs:
	GO=$(GO) scripts/bench-verbs.sh

# Both rails: 4 TCP streams between two hosts with two ports each, spreading
# flows and in active-backup, beside one rail's bare underlay (root; not
# part of test; RAILS_REPS runs of each, default 3).
bench-rails:
	scripts/deps.sh runtime
	cd ipoibd && IPOIBD_BENCH_RAILS=$${RAILS_REPS:-3} $(GO) test -run TestTwoRailsBench -v -timeout 30m . | grep -E '^\s+tworails_test.go:[0-9]+: [|a-z]'

# Did a change make the datapath slower? The daemon of revision OLD against
# the working tree's, runs interleaved (root; not part of test).
bench-ab:
	scripts/deps.sh runtime
	AB_OLD=$(OLD) scripts/bench-ab.sh

# Memory and connections over a long run with loss, iperf3, pings and
# SIGKILL restarts (root; not part of test; SOAK_SECONDS, default 180).
soak: build
	$(GO) build -o bin/reqflood ./internal/reqflood
	$(GO) build -o bin/nsflood ./internal/nsflood
	scripts/deps.sh runtime
	scripts/soak.sh

# The main job: a three-host cluster over softib (needs root). IB=1: the
# same on an InfiniBand subnet that OpenSM runs under ibsim. KEEP=1: leave
# it running and print how to look at it and end it (scripts/demo.sh down).
demo: build
	IB=$(IB) scripts/deps.sh runtime
	IB=$(IB) KEEP=$(KEEP) GO=$(GO) scripts/demo.sh

# Installs the daemon and the systemd template unit ipoibd@IFNAME.service;
# flags per interface go in $(SYSCONFDIR)/ipoibd/IFNAME.env (see
# dist/ib0.env.example). Nothing is written outside $(DESTDIR) and the
# directories above; systemd is told only of a unit where it looks.
install: build unit
	install -D -m 0755 bin/ipoibd $(DESTDIR)$(SBINDIR)/ipoibd
	install -D -m 0644 $(UNIT) $(DESTDIR)$(SYSTEMD_DIR)/ipoibd@.service
	mkdir -p $(DESTDIR)$(MANDIR)/man8
	bin/ipoibd man >$(DESTDIR)$(MANDIR)/man8/ipoibd.8
	install -D -m 0644 dist/ib0.env.example $(DESTDIR)$(SYSCONFDIR)/ipoibd/ib0.env.example
	install -D -m 0755 bin/ipoibd-cni $(DESTDIR)$(CNI_BIN_DIR)/ipoibd-cni
	for f in $(EXAMPLES); do install -D -m 0644 dist/$$f $(DESTDIR)$(DOCDIR)/examples/$$f || exit 1; done
	@case "$(DESTDIR)$(SYSTEMD_DIR)" in /etc/systemd/system|/usr/lib/systemd/system|/lib/systemd/system) \
		if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then systemctl daemon-reload; fi;; esac

uninstall:
	rm -f $(DESTDIR)$(SBINDIR)/ipoibd $(DESTDIR)$(SYSTEMD_DIR)/ipoibd@.service $(DESTDIR)$(SYSCONFDIR)/ipoibd/ib0.env.example $(DESTDIR)$(MANDIR)/man8/ipoibd.8
	rm -f $(DESTDIR)$(CNI_BIN_DIR)/ipoibd-cni $(addprefix $(DESTDIR)$(DOCDIR)/examples/,$(EXAMPLES))
	rmdir $(DESTDIR)$(SYSCONFDIR)/ipoibd 2>/dev/null || true
	rmdir $(addprefix $(DESTDIR)$(DOCDIR)/examples/,networkd netplan NetworkManager) $(DESTDIR)$(DOCDIR)/examples $(DESTDIR)$(DOCDIR) 2>/dev/null || true
