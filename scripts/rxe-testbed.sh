#!/usr/bin/env bash
# The real-kernel RDMA test bed: boots Debian's own kernel under QEMU (TCG) with
# two soft-RoCE devices, rxe0 on va and rxe1 on vb (a veth pair), and runs the
# checks there against the real kernel RDMA stack and rdma-core. Run by
# `make test` (root); see README.md, "The rxe test bed".
#
#   scripts/rxe-testbed.sh          prepare (if needed), boot, run the checks
#   scripts/rxe-testbed.sh prepare  only install packages and build the guest image
#
# The guest image (kernel + base initramfs: debootstrap minbase with rdma-core,
# systemd and a module subset) is cached under $TESTBED_CACHE/KEY, KEY hashing the package
# versions and this script's build recipe. Each run appends a small overlay cpio
# (the kernel unpacks concatenated cpio archives in order) holding /init and the
# binaries under test, so a cached run costs only the boot and the checks.
#
# Every check prints one line `RESULT PASS name` or `RESULT FAIL name: why` on the
# serial console; this script prints one PASS/FAIL line per check and exits
# non-zero if any failed, if none reported, if the guest did not finish or if
# QEMU timed out.
#
# Checks: rxe devices present and ACTIVE; ibv_{rc,uc,ud,srq}_pingpong from rxe1
# to rxe0 (each also requires both devices' hw counters to move); the counter
# totals; then two hooks:
#  - Go tests of verbs/ and rdmacm/: for each that has test files with the
#    `rdma` build tag, the test binary (go test -c -tags rdma) runs in the
#    guest with IPOIBD_VERBS_DEVICES=rxe0,rxe1, before the hooks (rdmacm's need
#    the kernel CM loaded); each top-level test becomes a RESULT PKG/TestX (a
#    SKIP is a FAIL here: the devices exist), plus PKG.test-exit.
#  - scripts/testbed.d/*.sh: every executable one is copied into the guest and
#    run there, in name order, after the checks above, as root with cwd
#    /opt/ipoibd and a 300 s limit. It must print its own RESULT lines (one per
#    check, names without spaces); no RESULT line or a non-zero exit without a
#    FAIL line counts as a FAIL. When hooks exist, bin/ipoibd is built with
#    -tags rdma into /opt/ipoibd/ipoibd, and every command under internal/testbed/
#    into /opt/ipoibd/NAME (NAME: its directory). The hooks' environment: TESTBED_DEV_A/B
#    (rxe0/rxe1), TESTBED_NETDEV_A/B (va/vb), TESTBED_IP_A/B (192.0.2.1/.2, /24),
#    TESTBED_GID_INDEX_A/B (the RoCEv2 IPv4-mapped GID), IPOIBD_VERBS_DEVICES,
#    PATH with /opt/ipoibd. The guest has iproute2, iperf3, ping, rdma-core tools.
#    Hooks of either boot source scripts/testbed-lib.sh (copied beside them).
#
# A second boot of the same image has systemd as PID 1 (rdinit=/lib/systemd/systemd)
# and ipoibd installed as a user would: the unit made by `make unit` (PREFIX=/usr),
# ipoibd@ib0 enabled, its flags in /etc/ipoibd/ib0.env, systemd-networkd enabled
# with a veth underlay (ua 10.0.0.1 and .3, peer end ub) and dist/'s networkd
# recipe for ib0. Once multi-user.target is reached, testbed-hooks.service runs
# every executable scripts/testbed.systemd.d/*.sh there (as root, cwd /opt/ipoibd,
# 300 s each, the same RESULT rules as above). Its drop-ins: WatchdogSec=5s for
# ipoibd@ib0 (the shipped 30 s would cost the run half a minute), and
# dist/ipoibd-netns.conf for ipoibd@ib1 (--netns). NetworkManager is
# installed but not enabled, and dist/'s hand-off files (networkd's and
# NetworkManager's "leave ib0 alone") wait in /opt/ipoibd/dist for the hook
# that installs them.
#
# Environment: TESTBED_CACHE (default /var/cache/ipoibd-testbed), TESTBED_TIMEOUT
# (QEMU bound in seconds, default 600), TESTBED_KEEP=1 (keep the scratch dir with
# the console log), TESTBED_SKIP=1 (skip, loudly), TESTBED_HOOKS (a glob: run only
# the hooks scripts/testbed.d/GLOB.sh and scripts/testbed.systemd.d/GLOB.sh, for
# working on one), TESTBED_BOOTS (which boots: default "rxe systemd"; "systemd"
# alone skips the rxe checks), GO (go binary). For make bench-verbs
# (scripts/bench-verbs.sh), which uses the rxe boot for measures:
# TESTBED_HOOK_DIR (where the rxe boot's hooks come from, default
# scripts/testbed.d), TESTBED_CHECKS=0 (skip the pingpongs and the Go tests:
# setup and the devices' check only), TESTBED_HOOK_TIMEOUT (seconds per
# hook in the guest, default 300), TESTBED_HOOK_ENV (VAR=VALUE words
# exported to the rxe boot's hooks), TESTBED_CONSOLE (a file to copy the
# rxe boot's console log to).
set -Eeuo pipefail

CACHE=${TESTBED_CACHE:-/var/cache/ipoibd-testbed}
TIMEOUT=${TESTBED_TIMEOUT:-600}
KEEP=${TESTBED_KEEP:-0}
BOOTS=${TESTBED_BOOTS:-rxe systemd}
HOOK_DIR=${TESTBED_HOOK_DIR:-scripts/testbed.d}
CHECKS=${TESTBED_CHECKS:-1}
HOOK_TIMEOUT=${TESTBED_HOOK_TIMEOUT:-300}
HOOK_ENV=${TESTBED_HOOK_ENV:-}
CONSOLE=${TESTBED_CONSOLE:-}
GO=${GO:-go}
MODE=${1:-run}

# What the guest rootfs carries. perftest: ib_send_bw and ib_send_lat for
# make bench-verbs (scripts/bench-verbs.sh). libibumad3: the daemon's SA
# client (umadsa) links it. systemd and udev: the second boot, with systemd
# as PID 1 (networkd waits for udev to initialise a link before it
# configures it). network-manager: the systemd boot's NetworkManager check
# (scripts/testbed.systemd.d/unmanaged.sh), installed but not enabled; dbus,
# polkitd and libpam-systemd (with systemd-sysv) are its dependencies that
# only a virtual package names, which debootstrap does not resolve.
GUEST_PKGS=(rdma-core ibverbs-utils rdmacm-utils ibverbs-providers libibumad3 perftest iproute2 kmod procps iputils-ping iperf3 systemd udev
	network-manager dbus polkitd libpam-systemd systemd-sysv)
# Packages whose versions matter beyond the list above: the Go binaries built on
# the host link against these.
KEY_PKGS=("${GUEST_PKGS[@]}" libc6 libibverbs1 librdmacm1 libibumad3)
# Module subset (relative to /lib/modules/KVER/kernel): RDMA plus what rxe and
# rdma_cm pull in (udp tunnels, crc32 crypto, configfs); net/sched: the dualport
# hook joins a third rxe device's veth to va's wire with tc (ingress, flower,
# mirred), as a macvlan or VLAN of va would give rxe0 its addresses too.
MODULE_DIRS=(drivers/infiniband crypto arch/x86/crypto lib net/ipv4 net/ipv6 fs/configfs drivers/net/veth.ko drivers/net/tun.ko drivers/net/bonding net/tls net/sched)

cd "$(dirname "$0")/.."

say() { printf 'testbed: %s\n' "$*"; }
booted() { [[ " $BOOTS " == *" $1 "* ]]; }
die() { printf 'testbed: FAIL: %s\n' "$*" >&2; exit 1; }
now() { printf '%s' "$EPOCHREALTIME"; }
# since START -> seconds with one decimal
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1fs", b - a }'; }

case $MODE in run | prepare) ;; *) die "usage: $0 [prepare]" ;; esac
booted rxe || booted systemd || die "TESTBED_BOOTS=$BOOTS: want rxe, systemd or both"
if [ "${TESTBED_SKIP:-0}" = 1 ]; then
	echo "testbed: ################################################################"
	echo "testbed: SKIPPED (TESTBED_SKIP=1): the real-kernel RDMA checks did NOT run"
	echo "testbed: ################################################################"
	exit 0
fi
[ "$(id -u)" = 0 ] || die "needs root (debootstrap, apt-get); run sudo make test"

BUILD="" SCRATCH="" QPID=""
# Never rm -rf through a mount debootstrap may have left (proc, sys, a /dev bind).
remove_tree() {
	local d=$1 m
	[ -n "$d" ] && [ -d "$d" ] || return 0
	findmnt -rn -o TARGET | awk -v d="$d/" 'index($0 "/", d) == 1' | sort -r |
		while read -r m; do umount -l "$m" || true; done
	rm -rf --one-file-system "$d"
}
cleanup() {
	local rc=$?
	# timeout(1) passes the signal on to QEMU.
	[ -n "$QPID" ] && kill "$QPID" 2>/dev/null
	[ -n "$BUILD" ] && remove_tree "$BUILD"
	if [ -n "$SCRATCH" ]; then
		if [ "$KEEP" = 1 ]; then say "kept scratch dir $SCRATCH"; else remove_tree "$SCRATCH"; fi
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

T0=$(now)

# --- host preparation ---------------------------------------------------------

ensure_host() {
	local need=()
	command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
	command -v debootstrap >/dev/null || need+=(debootstrap)
	command -v cpio >/dev/null || need+=(cpio)
	command -v depmod >/dev/null || need+=(kmod) # the guest's module index
	[ -e /usr/include/infiniband/verbs.h ] || need+=(libibverbs-dev)
	[ -e /usr/include/rdma/rdma_cma.h ] || need+=(librdmacm-dev)
	[ -e /usr/include/infiniband/umad.h ] || need+=(libibumad-dev)
	if ((${#need[@]})); then
		say "installing ${need[*]}"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq
		apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
	fi
	command -v qemu-system-x86_64 >/dev/null ||
		die "qemu-system-x86_64 is missing after installing qemu-system-x86: QEMU cannot run here"
}

# Suite, mirror and the versions debootstrap will install (from the main suite).
resolve() {
	# shellcheck disable=SC1091
	SUITE=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
	[ -n "$SUITE" ] || die "no VERSION_CODENAME in /etc/os-release"
	# The kernel linux-image-amd64 depends on, and its version, from one query.
	local dep kv pv
	dep=$(apt-cache show --no-all-versions linux-image-amd64 2>/dev/null) || {
		apt-get update -qq
		dep=$(apt-cache show --no-all-versions linux-image-amd64)
	}
	dep=$(sed -n 's/^Depends:.*\(linux-image-[0-9][^ ,]* (= [^)]*)\).*/\1/p' <<<"$dep" | head -n1)
	KPKG=${dep%% *} kv=${dep##*= } kv=${kv%)}
	if [ -z "$KPKG" ] || [ -z "$kv" ]; then die "cannot tell which kernel linux-image-amd64 depends on"; fi
	KVER=${KPKG#linux-image-}
	# shellcheck disable=SC2016 # apt's own $(FIELD) syntax
	MIRROR=$(apt-get indextargets --format '$(REPO_URI)' "Release: $SUITE" \
		'Identifier: Packages' 'Target-Of: deb' | head -n1)
	[ -n "$MIRROR" ] || die "no '$SUITE' Debian mirror in the apt sources"
	pv=$(apt-cache madison "${KEY_PKGS[@]}" |
		awk -F' *[|] *' -v s="$SUITE/main" 'index($3, " " s " ") && !seen[$1]++ { gsub(/ /, "", $1); print $1 "=" $2 }' |
		sort)
	KEYTEXT=$(printf '%s\n' "suite=$SUITE" "kernel=$KPKG=$kv" "$pv" \
		"debootstrap=$(dpkg-query -W -f '${Version}' debootstrap)" \
		"recipe=$(declare -f build_image pack | sha256sum | cut -c1-16)" \
		"pkgs=${GUEST_PKGS[*]}" "modules=${MODULE_DIRS[*]}")
	KEY=$(printf '%s' "$KEYTEXT" | sha256sum | cut -c1-16)
}

# pack DIR OUT: an uncompressed newc cpio (the fastest to boot), owned by root.
pack() {
	(cd "$1" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc -R 0:0 --quiet) >"$2"
}

# build_image OUT: the kernel and base initramfs for the current KEY.
build_image() {
	local out=$1 root="$BUILD/rootfs" k="$BUILD/kernel" kmod d
	mkdir -p "$root" "$k" "$out"
	# Kernel: the versioned package linux-image-amd64 points at.
	(cd "$BUILD" && apt-get download -q -o APT::Sandbox::User=root "$KPKG" >/dev/null)
	dpkg-deb -x "$BUILD/$KPKG"_*.deb "$k"
	cp "$k/boot/vmlinuz-$KVER" "$out/vmlinuz"
	say "  kernel $KPKG unpacked ($(since "$T0"))"
	# Rootfs.
	debootstrap --variant=minbase --include="$(
		IFS=,
		echo "${GUEST_PKGS[*]}"
	)" "$SUITE" "$root" "$MIRROR" >"$BUILD/debootstrap.log" 2>&1 || {
		tail -n 20 "$BUILD/debootstrap.log" >&2
		die "debootstrap failed"
	}
	say "  debootstrap done ($(since "$T0"))"
	# Installed, not started at boot: the checks start NetworkManager when they
	# need it, beside networkd, which owns the boot's links.
	systemctl --root="$root" --quiet disable NetworkManager.service NetworkManager-wait-online.service \
		NetworkManager-dispatcher.service
	# Modules: the subset, with the index files modprobe needs, then depmod.
	kmod="$k/lib/modules/$KVER"
	mkdir -p "$root/lib/modules/$KVER/kernel"
	for d in "${MODULE_DIRS[@]}"; do
		mkdir -p "$root/lib/modules/$KVER/kernel/$(dirname "$d")"
		cp -a "$kmod/kernel/$d" "$root/lib/modules/$KVER/kernel/$d"
	done
	cp -a "$kmod"/modules.order "$kmod"/modules.builtin* "$root/lib/modules/$KVER/"
	# No -F System.map: the package's is a stub.
	depmod -b "$root" "$KVER"
	modprobe -d "$root" -S "$KVER" -n -a veth tun sch_ingress cls_flower act_mirred rdma_rxe ib_uverbs rdma_ucm ib_umad crc32_generic configfs ||
		die "module subset is incomplete"
	# Prune what a test VM never reads.
	rm -rf "${root:?}"/usr/share/{doc,man,info,locale,lintian,linda,bug} \
		"$root"/var/cache/apt/* "$root"/var/lib/apt/lists/* "$root"/var/log/* \
		"$root"/var/cache/debconf/*-old "$root"/usr/share/zoneinfo \
		"$root"/usr/lib/udev/hwdb.bin "$root"/usr/lib/udev/hwdb.d
	[ -e "$root/dev/console" ] || mknod -m 600 "$root/dev/console" c 5 1
	pack "$root" "$out/base.cpio"
	printf '%s\n' "$KEYTEXT" >"$out/manifest"
}

ensure_image() {
	IMAGE="$CACHE/$KEY"
	if [ -s "$IMAGE/base.cpio" ] && [ -s "$IMAGE/vmlinuz" ]; then
		touch "$IMAGE"
		say "guest image cached ($IMAGE, $(du -sm "$IMAGE" | cut -f1) MB)"
		return
	fi
	mkdir -p "$CACHE"
	# One builder at a time; a second one waits and then finds the cache.
	exec 9>"$CACHE/.lock"
	flock 9
	if ! [ -s "$IMAGE/base.cpio" ]; then
		local t
		t=$(now)
		say "building guest image $KEY ($KPKG, $SUITE from $MIRROR)"
		BUILD=$(mktemp -d "$CACHE/.build.XXXXXX")
		build_image "$BUILD/out"
		rm -rf "$IMAGE"
		mv "$BUILD/out" "$IMAGE"
		remove_tree "$BUILD"
		BUILD=""
		# Keep the three most recently used images.
		find "$CACHE" -mindepth 1 -maxdepth 1 -type d ! -name '.*' -printf '%T@ %p\n' |
			sort -rn | tail -n +4 | cut -d' ' -f2- | while read -r d; do rm -rf "$d"; done
		say "guest image built in $(since "$t") ($(du -sm "$IMAGE" | cut -f1) MB)"
	fi
	exec 9>&-
}

ensure_host
resolve
ensure_image
say "prepare done ($(since "$T0"))"
[ "$MODE" = prepare ] && exit 0

# --- per-run overlay ----------------------------------------------------------

SCRATCH=$(mktemp -d "${TMPDIR:-/var/tmp}/ipoibd-testbed.XXXXXX")
OV="$SCRATCH/overlay"
mkdir -p "$OV/opt/ipoibd"
HOSTFAIL=0
hostfail() {
	echo "testbed: FAIL $1: $2"
	HOSTFAIL=$((HOSTFAIL + 1))
}

# The packages whose rdma-tagged Go tests run in the guest, in this order
# (the guest's step (c) lists them too).
booted rxe || say "note: TESTBED_BOOTS=$BOOTS: no rxe boot"
for p in verbs rdmacm; do
	booted rxe && [ "$CHECKS" != 0 ] || break
	if [ -d "$p" ] && grep -lqE '^//go:build.*\brdma\b' "$p"/*_test.go 2>/dev/null; then
		t=$(now)
		if "$GO" test -c -tags rdma -o "$OV/opt/ipoibd/$p.test" "./$p" >"$SCRATCH/$p-build.log" 2>&1; then
			say "built $p.test ($(since "$t"))"
		else
			cat "$SCRATCH/$p-build.log" >&2
			hostfail "$p-build" "go test -c -tags rdma ./$p failed"
		fi
	else
		say "note: no rdma-tagged tests in $p/; the $p.test hook is skipped"
	fi
done

hooks=() sdhooks=()
for h in "$HOOK_DIR"/${TESTBED_HOOKS:-*}.sh; do
	booted rxe && [ -f "$h" ] && [ -x "$h" ] && hooks+=("$h")
done
for h in scripts/testbed.systemd.d/${TESTBED_HOOKS:-*}.sh; do
	booted systemd && [ -f "$h" ] && [ -x "$h" ] && sdhooks+=("$h")
done
if ((${#hooks[@]} + ${#sdhooks[@]})); then
	mkdir -p "$OV/opt/ipoibd"
	cp scripts/testbed-lib.sh "$OV/opt/ipoibd/" # what the hooks source
fi
if ((${#hooks[@]})); then
	mkdir -p "$OV/opt/ipoibd/testbed.d"
	cp "${hooks[@]}" "$OV/opt/ipoibd/testbed.d/"
fi
if ((${#sdhooks[@]})); then
	mkdir -p "$OV/opt/ipoibd/testbed.systemd.d"
	cp "${sdhooks[@]}" "$OV/opt/ipoibd/testbed.systemd.d/"
fi
if ((${#hooks[@]} + ${#sdhooks[@]})); then
	t=$(now)
	if "$GO" build -tags rdma -o "$OV/opt/ipoibd/ipoibd" ./ipoibd 2>"$SCRATCH/ipoibd-build.log"; then
		say "hooks: ${hooks[*]} ${sdhooks[*]}; built ipoibd ($(since "$t"))"
	else
		cat "$SCRATCH/ipoibd-build.log" >&2
		hostfail ipoibd-build "go build -tags rdma ./ipoibd failed"
	fi
	# The rxe hooks' own programs: every command under internal/testbed/
	# lands in /opt/ipoibd under its directory's name.
	for d in internal/testbed/*/; do
		((${#hooks[@]})) && [ -d "$d" ] || continue
		n=$(basename "$d")
		if "$GO" build -tags rdma -o "$OV/opt/ipoibd/$n" "./$d" 2>"$SCRATCH/$n-build.log"; then
			say "built $n"
		else
			cat "$SCRATCH/$n-build.log" >&2
			hostfail "$n-build" "go build -tags rdma ./$d failed"
		fi
	done
fi

# What the guest's /init takes from the host's environment (see the header).
{
	printf 'CHECKS=%q HOOK_TIMEOUT=%q\n' "$CHECKS" "$HOOK_TIMEOUT"
	for w in $HOOK_ENV; do
		[[ $w == [A-Za-z_]*=* ]] || die "TESTBED_HOOK_ENV: $w is not VAR=VALUE"
		printf 'export %q\n' "$w"
	done
} >"$OV/opt/ipoibd/testbed.conf"

# The guest's /init. Quoted heredoc: nothing here is expanded on the host.
cat >"$OV/init" <<'GUEST'
#!/bin/bash
# /init of the ipoibd rxe test bed (written by scripts/rxe-testbed.sh).
export PATH=/opt/ipoibd:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C
A=192.0.2.1 B=192.0.2.2
CHECKS=1 HOOK_TIMEOUT=300
# shellcheck disable=SC1091 # written by the host
. /opt/ipoibd/testbed.conf
# shellcheck disable=SC2317 # run by the EXIT trap
poweroff_now() {
	echo "TESTBED DONE"
	echo o >/proc/sysrq-trigger
	sleep 60
}
trap poweroff_now EXIT

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
echo "TESTBED INIT"
ulimit -l unlimited

pass() { echo "RESULT PASS $1"; }
fail() {
	local n=$1
	shift
	echo "RESULT FAIL $n: $(printf '%s' "$*" | tr -s '\n\t' '  ' | cut -c1-200)"
}
# Show a log on the console, indented so it can never look like a RESULT.
show() { sed 's/^/  | /' "$@"; }
lastline() { grep -v '^[[:space:]]*$' "$1" | tail -n1; }

# run CMD...: run, and on failure say which command and why.
run() {
	local out
	out=$("$@" 2>&1) || {
		echo "$*: $out"
		return 1
	}
}

setup() {
	local s
	run modprobe -a veth tun rdma_rxe ib_uverbs rdma_ucm ib_umad crc32_generic || return
	run ip link set lo up || return
	# MTU 9000: rxe's active MTU is the largest IB MTU that fits the netdev
	# (1024 at 1500), and 4096 gives IPoIB a UD MTU above IPv6's 1280.
	run ip link add va mtu 9000 type veth peer name vb mtu 9000 || return
	run ip addr add $A/24 dev va || return
	run ip addr add $B/24 dev vb || return
	run ip link set va up || return
	run ip link set vb up || return
	# Both ends live in the initial namespace (rxe's UDP socket is only there), so
	# make A->B really cross the veth: local table after our rules, a route per
	# peer out of the own end, static neighbours, accept our own source address.
	for s in all default va vb; do
		echo 1 >/proc/sys/net/ipv4/conf/$s/accept_local
		echo 0 >/proc/sys/net/ipv4/conf/$s/rp_filter
	done
	run ip rule add pref 100 lookup local || return
	run ip rule del pref 0 lookup local || return
	run ip rule add pref 10 iif lo to $B lookup 100 || return
	run ip rule add pref 11 iif lo to $A lookup 100 || return
	run ip route add $B dev va src $A table 100 || return
	run ip route add $A dev vb src $B table 100 || return
	run ip neigh replace $B lladdr "$(cat /sys/class/net/vb/address)" dev va nud permanent || return
	run ip neigh replace $A lladdr "$(cat /sys/class/net/va/address)" dev vb nud permanent || return
	run rdma link add rxe0 type rxe netdev va || return
	run rdma link add rxe1 type rxe netdev vb || return
}

# gid_index DEV IPV4: index of the RoCE v2 GID ::ffff:IPV4 (builtins only: the
# table has 1024 entries and forks are slow under TCG).
gid_index() {
	local dev=$1 want g i t a b c d
	IFS=. read -r a b c d <<<"$2"
	want=$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' "$a" "$b" "$c" "$d")
	for g in /sys/class/infiniband/"$dev"/ports/1/gids/*; do
		read -r i <"$g" 2>/dev/null || continue
		[ "$i" = "$want" ] || continue
		read -r t <"/sys/class/infiniband/$dev/ports/1/gid_attrs/types/${g##*/}" 2>/dev/null || continue
		[ "$t" = "RoCE v2" ] && {
			echo "${g##*/}"
			return 0
		}
	done
	return 1
}

ctr() { cat "/sys/class/infiniband/$1/ports/1/hw_counters/$2" 2>/dev/null || echo 0; }
counters() { echo "$(ctr rxe0 sent_pkts) $(ctr rxe0 rcvd_pkts) $(ctr rxe1 sent_pkts) $(ctr rxe1 rcvd_pkts)"; }

if ! why=$(setup); then
	fail setup "$why"
	exit 0
fi
GA="" GB=""
for _ in $(seq 1 50); do
	GA=$(gid_index rxe0 $A) && GB=$(gid_index rxe1 $B) && break
	sleep 0.2
done
if [ -z "$GA" ] || [ -z "$GB" ]; then
	echo "devices:" /sys/class/infiniband/*
	fail setup "no RoCEv2 GID for $A on rxe0 or $B on rxe1 (got '$GA' '$GB')"
	exit 0
fi
pass setup
echo "NOTE gid index rxe0=$GA rxe1=$GB"

# (a) both devices exist and their ports are ACTIVE.
why=""
for d in rxe0 rxe1; do
	if ! ibv_devinfo -d $d >/tmp/devinfo.$d 2>&1; then
		why+="ibv_devinfo -d $d: $(lastline /tmp/devinfo.$d); "
	elif ! grep -q 'state:[[:space:]]*PORT_ACTIVE' /tmp/devinfo.$d; then
		why+="$d port not ACTIVE: $(grep 'state:' /tmp/devinfo.$d); "
	fi
done
ibv_devices >/tmp/devices 2>&1
for d in rxe0 rxe1; do grep -qw $d /tmp/devices || why+="$d not in ibv_devices; "; done
if [ -z "$why" ]; then pass rxe-devices; else
	show /tmp/devices /tmp/devinfo.*
	fail rxe-devices "$why"
fi

# (b) pingpong NAME TOOL PORT ARGS...: server on rxe0, client on rxe1 to A.
pingpong() {
	local name=$1 tool=$2 port=$3 spid src crc c0 c1 why="" i
	shift 3
	read -ra c0 <<<"$(counters)"
	timeout 90 "$tool" -d rxe0 -g "$GA" -p "$port" "$@" >"/tmp/$name.srv" 2>&1 &
	spid=$!
	for i in $(seq 1 100); do
		[ -n "$(ss -Hltn "sport = :$port")" ] && break
		kill -0 $spid 2>/dev/null || break
		sleep 0.1
	done
	timeout 90 "$tool" -d rxe1 -g "$GB" -p "$port" "$@" $A >"/tmp/$name.cli" 2>&1
	crc=$?
	wait $spid
	src=$?
	read -ra c1 <<<"$(counters)"
	[ $src = 0 ] || why+="server exit $src: $(lastline "/tmp/$name.srv"); "
	[ $crc = 0 ] || why+="client exit $crc: $(lastline "/tmp/$name.cli"); "
	local k names=(rxe0.sent_pkts rxe0.rcvd_pkts rxe1.sent_pkts rxe1.rcvd_pkts)
	for k in 0 1 2 3; do
		((c1[k] > c0[k])) || why+="${names[k]} did not move; "
	done
	echo "NOTE $name: $(grep -h 'bytes in' "/tmp/$name.cli" | head -n1)" \
		"counters rxe0 sent+$((c1[0] - c0[0])) rcvd+$((c1[1] - c0[1]))" \
		"rxe1 sent+$((c1[2] - c0[2])) rcvd+$((c1[3] - c0[3]))"
	if [ -z "$why" ]; then pass "$name"; else
		show "/tmp/$name.srv" "/tmp/$name.cli"
		fail "$name" "$why"
	fi
}
if [ "$CHECKS" != 0 ]; then
	pingpong rc-pingpong ibv_rc_pingpong 18515
	pingpong uc-pingpong ibv_uc_pingpong 18516
	pingpong ud-pingpong ibv_ud_pingpong 18517 -s 1024
	pingpong srq-pingpong ibv_srq_pingpong 18518

	read -ra c <<<"$(counters)"
	echo "NOTE counters rxe0 sent=${c[0]} rcvd=${c[1]} rxe1 sent=${c[2]} rcvd=${c[3]}"
	if ((c[0] > 0 && c[1] > 0 && c[2] > 0 && c[3] > 0)); then pass rxe-counters; else
		fail rxe-counters "a device carried no traffic: rxe0 sent=${c[0]} rcvd=${c[1]} rxe1 sent=${c[2]} rcvd=${c[3]}"
	fi
fi

# (c) the Go tests of verbs/ and rdmacm/ (rdmacm's need the kernel CM, which
# a hook may unload: they run first). The ibsim judges run on the host, in
# make test's rdma line: the guest has no ibsim.
for p in verbs rdmacm; do
	[ -x "/opt/ipoibd/$p.test" ] || continue
	cd /opt/ipoibd || exit 0
	IPOIBD_VERBS_DEVICES=rxe0,rxe1 timeout 360 "./$p.test" -test.v -test.timeout 300s -test.skip 'IBSim|OpenSM' >"/tmp/$p.out" 2>&1
	rc=$?
	show "/tmp/$p.out"
	# Top-level results only (subtests are indented); the reason is the last
	# "file.go:N:" log line of the test.
	awk -v pkg="$p" '
		/^=== RUN   [^\/]*$/ { last = "" }
		/^ +[^ ]+\.go:[0-9]+: / { last = $0; sub(/^ +/, "", last) }
		/^--- (PASS|FAIL|SKIP): / {
			st = $2; sub(/:$/, "", st); n = pkg "/" $3
			if (st == "PASS") print "RESULT PASS " n
			else if (st == "SKIP") print "RESULT FAIL " n ": skipped (the rxe devices are there): " last
			else print "RESULT FAIL " n ": " (last == "" ? "see log" : last)
			got++
		}
		END { if (!got) print "RESULT FAIL " pkg ".test-tests: no top-level test reported a result" }
	' "/tmp/$p.out" | cut -c1-240
	if [ $rc = 0 ]; then pass "$p.test-exit"; else
		# A panic or timeout has no --- FAIL line: name the test that was running.
		fail "$p.test-exit" "exit status $rc$([ $rc = 124 ] && echo ' (timeout)')," \
			"in $(awk '/^=== (RUN|CONT) / { t = $3 } END { print t }' "/tmp/$p.out"):" \
			"$(grep -m1 -E '^(panic|fatal error|SIG[A-Z]+:)' "/tmp/$p.out")"
	fi
	cd / || exit 0
done

# (d) hooks from scripts/testbed.d.
export TESTBED_DEV_A=rxe0 TESTBED_DEV_B=rxe1 TESTBED_NETDEV_A=va TESTBED_NETDEV_B=vb
export TESTBED_IP_A=$A TESTBED_IP_B=$B TESTBED_GID_INDEX_A=$GA TESTBED_GID_INDEX_B=$GB
export IPOIBD_VERBS_DEVICES=rxe0,rxe1
for h in /opt/ipoibd/testbed.d/*.sh; do
	[ -x "$h" ] || continue
	n=testbed.d/$(basename "$h" .sh)
	(cd /opt/ipoibd && timeout "$HOOK_TIMEOUT" "$h") 2>&1 | tee /tmp/hook.out
	rc=${PIPESTATUS[0]}
	if ! grep -q '^RESULT ' /tmp/hook.out; then
		fail "$n" "printed no RESULT line (exit $rc)"
	elif [ "$rc" != 0 ] && ! grep -q '^RESULT FAIL ' /tmp/hook.out; then
		fail "$n" "exit status $rc$([ "$rc" = 124 ] && echo " (timeout ${HOOK_TIMEOUT}s)")"
	fi
done
exit 0
GUEST
chmod 755 "$OV/init"

# The systemd boot's files (see the header): only what `make install`, an
# operator and dist/ provide, plus the underlay and the hooks' service.
systemd_overlay() {
	local sys="$OV/etc/systemd/system" net="$OV/etc/systemd/network" lib=/lib/systemd/system u
	mkdir -p "$sys"/{multi-user.target.wants,sockets.target.wants,network-online.target.wants} \
		"$sys/ipoibd@ib0.service.d" "$sys/ipoibd@ib1.service.d" "$net" "$OV/etc/ipoibd" "$OV/usr/sbin"
	make -s unit UNIT="$sys/ipoibd@.service" PREFIX=/usr
	ln -s /opt/ipoibd/ipoibd "$OV/usr/sbin/ipoibd"
	ln -s ../ipoibd@.service "$sys/multi-user.target.wants/ipoibd@ib0.service"
	# networkd, enabled as `systemctl enable systemd-networkd` does.
	ln -s $lib/systemd-networkd.service "$sys/multi-user.target.wants/"
	ln -s $lib/systemd-networkd.socket "$sys/sockets.target.wants/"
	ln -s $lib/systemd-networkd-wait-online.service "$sys/network-online.target.wants/"
	# Nothing logs in (logind needs D-Bus, which the guest lacks), and a VM
	# that lives a minute needs no timers, no coldplug of its devices (udevd
	# still initialises the links networkd waits for), no utmp, no
	# persistent journal or random seed: each costs seconds under TCG.
	for u in getty.target serial-getty@ttyS0.service systemd-logind.service systemd-user-sessions.service \
		timers.target systemd-udev-trigger.service systemd-update-utmp.service systemd-update-utmp-runlevel.service \
		systemd-journal-flush.service systemd-random-seed.service systemd-pstore.service e2scrub_reap.service \
		systemd-binfmt.service proc-sys-fs-binfmt_misc.automount dev-hugepages.mount sys-kernel-debug.mount \
		sys-kernel-tracing.mount sys-fs-fuse-connections.mount systemd-ask-password-console.path \
		systemd-ask-password-wall.path remote-fs.target modprobe@.service sys-kernel-config.mount \
		dev-mqueue.mount systemd-remount-fs.service systemd-sysusers.service systemd-modules-load.service \
		systemd-sysctl.service systemd-machine-id-commit.service systemd-firstboot.service; do
		ln -s /dev/null "$sys/$u"
	done
	# ipoibd@ib0: networkd gives ib0 its address (dist/'s recipe), so no --addr.
	echo 'IPOIBD_FLAGS="--provider softib --underlay 10.0.0.1 --mode connected"' \
		>"$OV/etc/ipoibd/ib0.env"
	printf '[Service]\nWatchdogSec=5s\n' >"$sys/ipoibd@ib0.service.d/testbed-watchdog.conf"
	cp dist/networkd/ib0.network "$net/50-ipoibd-ib0.network"
	# ipoibd@ib1: its interface in the namespace tb1 (the hook makes it).
	echo 'IPOIBD_FLAGS="--provider softib --underlay 10.0.0.3 --netns tb1 --addr 192.168.100.3/24"' \
		>"$OV/etc/ipoibd/ib1.env"
	cp dist/ipoibd-netns.conf "$sys/ipoibd@ib1.service.d/netns.conf"
	# The hand-off recipes, not installed: the unmanaged hook installs them
	# as an operator would, once it has seen the tools without them.
	mkdir -p "$OV/opt/ipoibd/dist/NetworkManager" "$OV/opt/ipoibd/dist/networkd"
	cp dist/ipoibd-netns.conf "$OV/opt/ipoibd/dist/"
	cp dist/NetworkManager/ipoibd-unmanaged.conf "$OV/opt/ipoibd/dist/NetworkManager/"
	cp dist/networkd/ib0-unmanaged.network "$OV/opt/ipoibd/dist/networkd/"
	# The underlay: a veth pair networkd makes at boot. ua keeps its
	# addresses when the hook moves ub (the peer's end) into a namespace.
	printf '[NetDev]\nName=ua\nKind=veth\n[Peer]\nName=ub\n' >"$net/10-testbed-ua.netdev"
	cat >"$net/10-testbed-ua.network" <<-'NET'
		[Match]
		Name=ua
		[Network]
		Address=10.0.0.1/24
		Address=10.0.0.3/24
		LinkLocalAddressing=no
		IPv6AcceptRA=no
		ConfigureWithoutCarrier=yes
		IgnoreCarrierLoss=yes
	NET
	# ub only comes up (ua's carrier); online does not wait for it.
	printf '[Match]\nName=ub\n[Link]\nRequiredForOnline=no\n[Network]\nLinkLocalAddressing=no\nIPv6AcceptRA=no\n' \
		>"$net/10-testbed-ub.network"
	cat >"$sys/testbed-hooks.service" <<-'UNIT'
		[Unit]
		Description=ipoibd test bed: the checks under systemd as PID 1
		After=multi-user.target
		[Service]
		Type=simple
		ExecStart=/opt/ipoibd/testbed-systemd
		StandardOutput=tty
		StandardError=inherit
		TTYPath=/dev/ttyS0
		TTYReset=no
		TTYVHangup=no
	UNIT
	ln -s ../testbed-hooks.service "$sys/multi-user.target.wants/"
	# The hooks' runner: the same rules as /init's step (d).
	cat >"$OV/opt/ipoibd/testbed-systemd" <<-'GUEST'
		#!/bin/bash
		# Run by testbed-hooks.service in the test bed's systemd boot.
		export PATH=/opt/ipoibd:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C
		# shellcheck disable=SC2317 # run by the EXIT trap
		poweroff_now() {
			echo "TESTBED DONE"
			echo o >/proc/sysrq-trigger
			sleep 60
		}
		trap poweroff_now EXIT
		echo "TESTBED INIT"
		echo "NOTE systemd $(systemctl --version | head -n1); $(systemctl is-system-running) after $(awk '{print $1}' /proc/uptime)s"
		for h in /opt/ipoibd/testbed.systemd.d/*.sh; do
			[ -x "$h" ] || continue
			n=testbed.systemd.d/$(basename "$h" .sh)
			(cd /opt/ipoibd && timeout 300 "$h") 2>&1 | tee /tmp/hook.out
			rc=${PIPESTATUS[0]}
			if ! grep -q '^RESULT ' /tmp/hook.out; then
				echo "RESULT FAIL $n: printed no RESULT line (exit $rc)"
			elif [ "$rc" != 0 ] && ! grep -q '^RESULT FAIL ' /tmp/hook.out; then
				echo "RESULT FAIL $n: exit status $rc"
			fi
		done
	GUEST
	chmod 755 "$OV/opt/ipoibd/testbed-systemd"
}
if ((${#sdhooks[@]})); then systemd_overlay; fi
pack "$OV" "$SCRATCH/overlay.cpio"
cat "$IMAGE/base.cpio" "$SCRATCH/overlay.cpio" >"$SCRATCH/initrd.cpio"
say "overlay ready ($(since "$T0"))"

# --- boot ---------------------------------------------------------------------

command -v timeout >/dev/null || die "no timeout(1)"
BAD=""
# boot NAME ARGS: one QEMU run with kernel arguments ARGS; its console goes to
# $SCRATCH/console-NAME.log, and what went wrong with the run itself to BAD.
boot() {
	local name=$1 args=$2 log="$SCRATCH/console-$1.log" tb last line qrc=0
	tb=$(now)
	say "[$name] booting $KVER under QEMU (TCG, timeout ${TIMEOUT}s)"
	# Not no_timer_check (a guest at host load 30 once panicked in the
	# kernel's early timer check, "IO-APIC + timer doesn't work!"): it was
	# suspected of the systemd boot's failing first checks, whose cause was
	# the daemon missing networkd's address; it is not needed on a quiet host.
	timeout -k 10 "$TIMEOUT" qemu-system-x86_64 -accel tcg -m 2G -smp 2 -nographic -no-reboot \
		-nic none -kernel "$IMAGE/vmlinuz" -initrd "$SCRATCH/initrd.cpio" \
		-append "console=ttyS0 $args panic=-1 quiet loglevel=3" </dev/null >"$log" 2>&1 &
	QPID=$!
	# Follow the console: report each RESULT as it arrives with the time it took.
	last=$tb
	while IFS= read -r line; do
		line=${line%$'\r'}
		case $line in
		*"TESTBED INIT") # the firmware's escape noise precedes it
			say "[$name] guest reached its checks, boot took $(since "$tb")"
			last=$EPOCHREALTIME
			;;
		"RESULT PASS "* | "RESULT FAIL "*)
			say "  ${line#RESULT } ($(since "$last"))"
			last=$EPOCHREALTIME
			;;
		esac
	done < <(tail -s 0.2 -n +1 -f --pid="$QPID" "$log")
	wait "$QPID" || qrc=$?
	QPID=""
	say "[$name] guest ran $(since "$tb")"
	sed -i 's/\r$//' "$log"
	[ "$name" = rxe ] && [ -n "$CONSOLE" ] && cp "$log" "$CONSOLE"
	[ "$qrc" = 124 ] && BAD+="$name: QEMU timed out after ${TIMEOUT}s; "
	[ "$qrc" != 0 ] && [ "$qrc" != 124 ] && BAD+="$name: QEMU exit status $qrc; "
	grep -q '^RESULT \(PASS\|FAIL\) ' "$log" || BAD+="$name: no RESULT lines from the guest; "
	grep -q 'TESTBED DONE' "$log" || BAD+="$name: the guest did not finish; "
	return 0
}
booted rxe && boot rxe "rdinit=/init"
# systemd.show_status=0: its status lines would interleave with the RESULTs.
((${#sdhooks[@]})) && boot systemd "rdinit=/lib/systemd/systemd systemd.show_status=0"

# --- verdict (from the logs, not the stream) ----------------------------------

npass=$(cat "$SCRATCH"/console-*.log | grep -c '^RESULT PASS ' || true)
nfail=$(cat "$SCRATCH"/console-*.log | grep -c '^RESULT FAIL ' || true)
if [ -n "$BAD" ] || ((nfail + HOSTFAIL > 0)); then
	for log in "$SCRATCH"/console-*.log; do
		echo "testbed: ---- last console lines of $(basename "$log") ----"
		grep -av '^RESULT ' "$log" | tail -n 40 | sed 's/^/testbed: | /'
	done
	BAD=${BAD%; }
	say "FAILED: $npass passed, $((nfail + HOSTFAIL)) failed${BAD:+ ($BAD)}, total $(since "$T0")"
	exit 1
fi
say "ok: $npass passed, total $(since "$T0")"
