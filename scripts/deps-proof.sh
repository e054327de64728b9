#!/usr/bin/env bash
# The proof that scripts/deps.sh readies a minimal Debian for make test: in a
# `debootstrap --variant=minbase` chroot of this machine's suite it runs
# `deps.sh apt` twice (the second run must install nothing), then checks that
# every command and cgo header internal/depscheck finds in the host scripts,
# the Makefile and the Go code is there. Run by `make test` (root).
#
# Taken as given, not from deps.sh: Go (go.dev; `deps.sh apt` leaves out
# staticcheck's go install), and make and git, which fetch and run make test.
#
# What the chroot has after deps.sh (its commands on root's PATH and its C
# headers) is kept as $DEPSPROOF_CACHE/KEY.list, KEY hashing deps.sh, this
# script, the suite and the mirror, for a week (the archive moves on). With
# it cached a run only checks the sources against it (seconds); making it
# takes a few minutes, the packages being cached under $DEPSPROOF_CACHE/debs.
#
# Environment: DEPSPROOF_CACHE (default /var/cache/ipoibd-depsproof),
# DEPSPROOF_SKIP=1 (skip, loudly), DEPSPROOF_KEEP=1 (keep the chroot),
# DEPSPROOF_REBUILD=1 (ignore the cached list), GO (go binary).
set -Eeuo pipefail

CACHE=${DEPSPROOF_CACHE:-/var/cache/ipoibd-depsproof}
GO=${GO:-go}
GIVEN=(make git) # commands that run make test at all

cd "$(dirname "$0")/.."
say() { printf 'deps-proof: %s\n' "$*"; }
die() {
	printf 'deps-proof: FAIL: %s\n' "$*" >&2
	exit 1
}
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1fs", b - a }'; }

if [ "${DEPSPROOF_SKIP:-0}" = 1 ]; then
	say "SKIPPED (DEPSPROOF_SKIP=1): deps.sh was NOT proven on a minimal machine"
	exit 0
fi
[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot); run sudo make test"
T0=$EPOCHREALTIME

# What the sources need, before anything slow: a wrapper the scan cannot
# see through fails here.
want=$("$GO" run ./internal/depscheck) || die "internal/depscheck could not list the commands"

# shellcheck disable=SC1091
SUITE=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
[ -n "$SUITE" ] || die "no VERSION_CODENAME in /etc/os-release"
# shellcheck disable=SC2016 # apt's own $(FIELD) syntax
MIRROR=$(apt-get indextargets --format '$(REPO_URI)' "Release: $SUITE" \
	'Identifier: Packages' 'Target-Of: deb' | head -n1)
[ -n "$MIRROR" ] || die "no '$SUITE' Debian mirror in the apt sources"
KEY=$(cat scripts/deps.sh "$0" <(echo "$SUITE $MIRROR") | sha256sum | cut -c1-16)
LIST=$CACHE/$KEY.list

ROOT=""
# Never rm -rf through a mount (proc, the package cache).
remove_root() {
	local m
	[ -n "$ROOT" ] && [ -d "$ROOT" ] || return 0
	findmnt -rn -o TARGET | awk -v d="$ROOT/" 'index($0 "/", d) == 1' | sort -r |
		while read -r m; do umount -l "$m" || true; done
	rm -rf --one-file-system "$ROOT"
}
cleanup() {
	local rc=$?
	if [ -n "$ROOT" ] && [ "${DEPSPROOF_KEEP:-0}" = 1 ]; then
		say "kept the chroot $ROOT"
	else
		remove_root
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# build_list: minbase, deps.sh, and what the chroot then has, into $LIST.
build_list() {
	local fs t out
	ROOT=$(mktemp -d /var/tmp/ipoibd-depsproof.XXXXXX)
	fs=$ROOT/fs
	mkdir -p "$CACHE/debs"
	t=$EPOCHREALTIME
	debootstrap --variant=minbase --cache-dir="$CACHE/debs" "$SUITE" "$fs" "$MIRROR" >"$ROOT/debootstrap.log" 2>&1 || {
		tail -n 20 "$ROOT/debootstrap.log" >&2
		die "debootstrap failed"
	}
	say "  minbase $SUITE from $MIRROR in $(since "$t")"
	mount -t proc proc "$fs/proc"
	mount --bind "$CACHE/debs" "$fs/var/cache/apt/archives"
	# No daemons start in the chroot.
	printf '#!/bin/sh\nexit 101\n' >"$fs/usr/sbin/policy-rc.d"
	chmod 755 "$fs/usr/sbin/policy-rc.d"
	cp scripts/deps.sh "$fs/root/deps.sh"
	t=$EPOCHREALTIME
	chroot "$fs" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		bash /root/deps.sh apt >"$ROOT/deps.log" 2>&1 || {
		tail -n 30 "$ROOT/deps.log" >&2
		die "deps.sh apt failed on a minimal $SUITE"
	}
	say "  deps.sh apt in $(since "$t"): $(grep '^deps: installing' "$ROOT/deps.log" || echo 'installed nothing')"
	out=$(chroot "$fs" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin bash /root/deps.sh apt 2>&1) ||
		die "deps.sh apt failed when run again: $out"
	[ -z "$out" ] || die "deps.sh apt is not idempotent; run again it said: $out"
	# The list: every command on root's PATH, as `command -v` finds them,
	# and every header under gcc's include directories.
	# shellcheck disable=SC2016 # expanded in the chroot
	chroot "$fs" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin bash -c '
		IFS=: read -ra dirs <<<"$PATH"
		for d in "${dirs[@]}"; do
			for f in "$d"/*; do [ -f "$f" ] && [ -x "$f" ] && echo "command ${f##*/}"; done
		done
		for d in /usr/local/include "/usr/include/$(gcc -print-multiarch)" /usr/include "$(gcc -print-file-name=include)"; do
			[ -d "$d" ] && (cd "$d" && find . \( -type f -o -type l \) -name "*.h" | sed "s|^\./|header |")
		done
		true' | LC_ALL=C sort -u >"$ROOT/list"
	mv "$ROOT/list" "$LIST"
	remove_root
	ROOT=""
}

mkdir -p "$CACHE"
if [ "${DEPSPROOF_REBUILD:-0}" = 1 ] || ! [ -s "$LIST" ] || [ -n "$(find "$LIST" -mtime +7)" ]; then
	# One builder at a time; a second one waits and then finds the list.
	exec 9>"$CACHE/.lock"
	flock 9
	if [ "${DEPSPROOF_REBUILD:-0}" = 1 ] || ! [ -s "$LIST" ] || [ -n "$(find "$LIST" -mtime +7)" ]; then
		say "proving deps.sh on a minimal $SUITE ($KEY)"
		build_list
		# Keep the five newest lists.
		find "$CACHE" -maxdepth 1 -name '*.list' -printf '%T@ %p\n' | sort -rn | tail -n +6 |
			cut -d' ' -f2- | while read -r f; do rm -f "$f"; done
	fi
	exec 9>&-
else
	say "minimal $SUITE after deps.sh: cached ($LIST)"
fi

missing=$(LC_ALL=C comm -23 <(printf '%s\n' "$want" | grep -vxF -f <(printf 'command %s\n' "${GIVEN[@]}") | LC_ALL=C sort -u) "$LIST")
if [ -n "$missing" ]; then
	say "after scripts/deps.sh a minimal $SUITE lacks what the sources use"
	say "(go run ./internal/depscheck -where says where):"
	printf '%s\n' "$missing" | sed 's/^/deps-proof:   /'
	die "add them to scripts/deps.sh (want PACKAGE COMMAND-OR-FILE)"
fi
say "ok: the $(printf '%s\n' "$want" | grep -c '^command ') commands and $(printf '%s\n' "$want" | grep -c '^header ') headers" \
	"the sources use are all there on a minimal $SUITE after deps.sh ($(since "$T0"))"
