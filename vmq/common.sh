# SPDX-License-Identifier: GPL-2.0
# Shared settings for the vmq build layer; sourced, never run.
#
# The kernel tree and object files live in a cache outside the clone, keyed
# by the Debian linux-source package version, so every clone on the machine
# reuses the same extraction and the same incremental builds.

VMQ_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VMQ_CACHE_ROOT=${VMQ_CACHE:-/var/cache/vhost-mq}
VMQ_SRC_PKG=linux-source-6.1
VMQ_SRC_TARBALL=/usr/src/linux-source-6.1.tar.xz
VMQ_EXPECT_VERSION=6.1
VMQ_JOBS=${VMQ_JOBS:-$(nproc)}

die() { echo "vmq: error: $*" >&2; exit 1; }
say() { echo "vmq: $*" >&2; }

# The package version is the cache key.
vmq_src_version() {
	dpkg-query -W -f='${Version}' "$VMQ_SRC_PKG" 2>/dev/null
}

vmq_set_paths() {
	local v
	v=$(vmq_src_version)
	[ -n "$v" ] || die "$VMQ_SRC_PKG is not installed (run: make deps)"
	VMQ_KEY=$v
	VMQ_DIR=$VMQ_CACHE_ROOT/$VMQ_KEY
	VMQ_PRISTINE=$VMQ_DIR/pristine
	VMQ_TREE=$VMQ_DIR/tree
	VMQ_LOCK=$VMQ_DIR/.lock
}

vmq_build_dir() { echo "$VMQ_DIR/build-$1"; }

# Serialise builds: two kernel builds on two cores thrash.
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
