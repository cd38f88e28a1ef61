# SPDX-License-Identifier: GPL-2.0
# Shared settings for the vmq build layer; sourced, never run.
#
# The kernel tree and object files live in a cache outside the clone, keyed
# by the Debian linux-source package version, so every clone on the machine
# reuses the same extraction and the same incremental builds.

VMQ_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VMQ_CACHE_ROOT=${VMQ_CACHE:-/var/cache/vhost-mq}
VMQ_JOBS=${VMQ_JOBS:-$(nproc)}

die() { echo "vmq: error: $*" >&2; exit 1; }
say() { echo "vmq: $*" >&2; }

# The base, BASE: the one setting every target and script reads.
#   7.3  (default) linux-source-7.3 from trixie-backports, fetched by
#        vmq/deps with a private apt configuration and extracted, never
#        installed; the series in patches-7.3/.
#   6.1  linux-source-6.1 installed by apt (make deps) from bookworm, the
#        series in patches/.
#   all  both, for the targets that can do both (make check, series,
#        series-check); a script of one base refuses it.
# Our new files (drivers/vhost/blk.c, docs, selftests) are laid on both
# bases unless VMQ_LAY_NEW=0.  blk.c is written against mainline; on 6.1
# the backport patch patches/0008a adapts it after it is laid.
# vmq_base B selects base B for what follows; sourcing selects $BASE.
vmq_base() {
	case $1 in
	6.1)
		VMQ_SRC_TARBALL=/usr/src/linux-source-6.1.tar.xz
		VMQ_PATCHES=$VMQ_REPO/patches ;;
	7.3)
		VMQ_SRC_TARBALL=
		VMQ_PATCHES=$VMQ_REPO/patches-7.3 ;;
	all) die "BASE=all: this takes one base, 7.3 or 6.1" ;;
	*) die "BASE=$1: known bases are 7.3 and 6.1 (and all, for make check)" ;;
	esac
	BASE=$1
	VMQ_LAY_NEW=${VMQ_LAY_NEW:-1}
	VMQ_SRC_PKG=linux-source-$BASE
	VMQ_EXPECT_VERSION=$BASE
	# 7.3: the version vmq/deps fetched, written once its tree is extracted.
	VMQ_SRC_VERSION_FILE=$VMQ_CACHE_ROOT/$VMQ_SRC_PKG.version
}
BASE=${BASE:-7.3}
[ "$BASE" = all ] && [ -n "${VMQ_ALL_OK:-}" ] || vmq_base "$BASE"

# The package version is the cache key.
vmq_src_version() {
	if [ -n "$VMQ_SRC_TARBALL" ]; then
		dpkg-query -W -f='${Version}' "$VMQ_SRC_PKG" 2>/dev/null
	else
		cat "$VMQ_SRC_VERSION_FILE" 2>/dev/null
	fi
}

# vmq_set_paths [B]: the cache paths of base B (default: the one selected).
vmq_set_paths() {
	local v
	[ $# = 0 ] || vmq_base "$1"
	v=$(vmq_src_version)
	[ -n "$v" ] ||
		die "$VMQ_SRC_PKG is neither installed nor fetched (run: make deps BASE=$BASE)"
	VMQ_KEY=$v
	VMQ_DIR=$VMQ_CACHE_ROOT/$VMQ_KEY
	VMQ_PRISTINE=$VMQ_DIR/pristine
	VMQ_TREE=$VMQ_DIR/tree
	# One lock for all bases.
	VMQ_LOCK=$VMQ_CACHE_ROOT/.lock
}

vmq_build_dir() { echo "$VMQ_DIR/build-$1"; }

# Serialise builds, of any base: two kernel builds on two cores thrash.
vmq_lock() {
	mkdir -p "$VMQ_DIR"
	exec 9>"$VMQ_LOCK"
	flock 9
}

# Kernel arguments that give a TCG guest a usable clock.  The guest cannot
# calibrate its TSC against the PIT under TCG and falls back to jiffies (4 ms
# steps), too coarse for latency figures.  TCG's TSC is the host's, so take
# the host's frequency and trust it.
vmq_clock_args() {
	local khz
	khz=$(awk '/^cpu MHz/ { printf "%d", $4 * 1000; exit }' /proc/cpuinfo)
	[ -n "$khz" ] && echo "tsc=reliable tsc_early_khz=$khz"
}

# The sparse the base needs, for make's CHECK=: bookworm's for 6.1; for 7.3
# one built from Debian testing's source (vmq/sparse-build), since 0.6.4
# fails 7.3's scripts/checker-valid.sh and C=1 would then check nothing.
vmq_sparse() {
	if [ "$BASE" = 6.1 ]; then
		command -v sparse
	else
		"$VMQ_REPO/vmq/sparse-build"
	fi
}

# Fail unless sparse $1 passes the checker-valid.sh of the tree $2 (where
# the tree has one): make would otherwise skip sparse silently.
vmq_sparse_valid() {
	[ ! -f "$2/scripts/checker-valid.sh" ] ||
		[ "$(sh "$2/scripts/checker-valid.sh" "$1")" = 1 ] ||
		die "$1 fails $2/scripts/checker-valid.sh: sparse would not run"
}

# vmq_apt_suite SUITES APTDIR [TYPES]: a private apt configuration in APTDIR
# for the Debian suites SUITES (one entry of TYPES, default "deb", at the
# URI of the machine's own Debian entry; its own lists and cache; /etc/apt
# untouched), its lists fetched when missing or a week old.  Sets VMQ_APT
# to the apt-get options that use it, and holds APTDIR/.lock on fd 8 for
# the caller's lifetime.
vmq_apt_suite() {
	local suite=$1 aptdir=$2 types=${3:-deb} rel uri f

	VMQ_APT=(-o "Dir::Etc::SourceList=$aptdir/sources.list"
		 -o "Dir::Etc::SourceParts=$aptdir/sources.list.d"
		 -o "Dir::State::Lists=$aptdir/lists" -o "Dir::Cache=$aptdir/cache")
	mkdir -p "$aptdir/sources.list.d" "$aptdir/lists/partial" "$aptdir/cache/archives/partial"
	exec 8>"$aptdir/.lock"
	flock 8
	rel=$(. /etc/os-release && echo "$VERSION_CODENAME")
	uri=$({
		for f in /etc/apt/sources.list.d/*.sources; do
			[ -f "$f" ] || continue
			awk -v rel="$rel" 'BEGIN { RS = ""; FS = "\n" }
			     /(^|\n)Types:[^\n]*[ \t]deb([ \t]|\n|$)/ {
				u = ""; s = 0
				for (i = 1; i <= NF; i++) {
					if ($i ~ /^URIs:/) { split($i, a, /[ \t]+/); u = a[2] }
					if ($i ~ /^Suites:/ && $i ~ "[ \t]" rel "([ \t]|$)") s = 1
				}
				if (s && u != "") print u }' "$f"
		done
		for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
			[ -f "$f" ] || continue
			awk -v rel="$rel" '{ sub(/\[[^]]*\][ \t]*/, "") }
				$1 == "deb" && $3 == rel { print $2 }' "$f"
		done
	} | head -1)
	[ -n "$uri" ] || die "no Debian deb entry for $rel in /etc/apt to take the mirror from"
	cat >"$aptdir/sources.list.d/vmq-${suite// /-}.sources" <<-EOF
	Types: $types
	URIs: $uri
	Suites: $suite
	Components: main
	Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
	EOF
	: >"$aptdir/sources.list"
	if [ -z "$(find "$aptdir/lists/.vmq-updated" -mtime -7 2>/dev/null)" ]; then
		say "apt-get update (private $suite lists in $aptdir)"
		apt-get "${VMQ_APT[@]}" update -q >/dev/null || die "apt-get update ($suite) failed"
		touch "$aptdir/lists/.vmq-updated"
	fi
}

# vmq_apt_src APTDIR: a private apt configuration in APTDIR with a deb-src
# entry for every "Types: deb" stanza of the machine's deb822 sources (and
# every "deb" line of a one-line sources.list) that points at a Debian
# archive; its own lists (fetched when missing or a week old) and cache;
# /etc/apt untouched.  Sets VMQ_APT to the apt-get options that use it.
vmq_apt_src() {
	local aptdir=$1 f

	VMQ_APT=(-o "Dir::Etc::SourceList=$aptdir/sources.list"
		 -o "Dir::Etc::SourceParts=$aptdir/sources.list.d"
		 -o "Dir::State::Lists=$aptdir/lists" -o "Dir::Cache=$aptdir/cache")
	mkdir -p "$aptdir/sources.list.d" "$aptdir/lists/partial" "$aptdir/cache/archives/partial"
	# fd 7: APTDIR/.lock, held while the lists are written.
	exec 7>"$aptdir/.lock"
	flock 7
	{
		for f in /etc/apt/sources.list.d/*.sources; do
			[ -f "$f" ] || continue
			awk 'BEGIN { RS = ""; FS = "\n" }
			     /(^|\n)Types:[^\n]*(^|[ \t])deb([ \t]|\n|$)/ && /debian/ {
				s = $0; sub(/Types:[^\n]*/, "Types: deb-src", s); print s "\n" }' "$f"
		done
	} >"$aptdir/sources.list.d/vmq-deb-src.sources"
	{
		for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
			[ -f "$f" ] || continue
			sed -n 's/^[[:space:]]*deb\([[:space:]].*debian.*\)$/deb-src\1/p' "$f"
		done
	} >"$aptdir/sources.list"
	[ -s "$aptdir/sources.list" ] || [ -s "$aptdir/sources.list.d/vmq-deb-src.sources" ] ||
		die "no Debian deb entry in /etc/apt to mirror as deb-src"
	if [ -z "$(ls "$aptdir/lists" | grep -i sources)" ] ||
	   [ -n "$(find "$aptdir/lists" -maxdepth 1 -name '*Sources*' -mtime +7)" ]; then
		say "apt-get update (private deb-src lists in $aptdir)"
		apt-get "${VMQ_APT[@]}" update -q >/dev/null || die "apt-get update (deb-src) failed"
	fi
	exec 7>&-
}

# vmq_nested_initrd DIR SCRIPT CMD: DIR/initrd.cpio, the initramfs of a
# nested guest (programs started from the vmq guest's root over nested 9p
# load slowly, so it is self-contained): busybox, bash and fio with the
# libraries they load, SCRIPT as /SCRIPT's-name, and an init that mounts
# the pseudo file systems, takes the serial console as its terminal and
# runs CMD, then sleeps.
vmq_nested_initrd() {
	local dir=$1 script=$2 cmd=$3 ird=$1/initrd prog p lib
	mkdir -p "$ird/bin" "$ird/"{dev,proc,sys,tmp}
	cp "$(command -v busybox)" "$ird/bin/busybox"
	ln -s busybox "$ird/bin/sh"
	for prog in bash fio; do
		p=$(command -v $prog)
		cp "$p" "$ird/bin/$prog"
		ldd "$p" | awk '/=> \// { print $3 } /^\t\// { print $1 }' |
			while read -r lib; do
				mkdir -p "$ird$(dirname "$lib")"
				[ -e "$ird$lib" ] || cp -L "$lib" "$ird$lib"
			done
	done
	cp "$script" "$ird/${script##*/}"
	cat >"$ird/init" <<-EOI
	#!/bin/sh
	/bin/busybox --install -s /bin
	export PATH=/bin
	mount -t proc none /proc
	mount -t devtmpfs none /dev
	mount -t sysfs none /sys
	mount -t tmpfs none /tmp
	exec </dev/ttyS0 >/dev/ttyS0 2>&1
	$cmd
	exec sleep 3600
	EOI
	chmod 755 "$ird/init"
	(cd "$ird" && find . | cpio -o -H newc --quiet) >"$dir/initrd.cpio"
}
