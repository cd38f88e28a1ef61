# SPDX-License-Identifier: GPL-2.0
#
# vhost-mq entry points.  The two a fresh machine needs:
#   make bench   build the release kernel, boot it, run the benchmark
#                (mainline 7.3; BASE=6.1 for the bookworm backport)
#   make check   build the debug kernels, boot them, run the vhost kselftests
#                (both bases)
# Everything else is for developers; see README.md.

.PHONY: bench check deps lay kernel-debug kernel-release selftests vm-shell \
	checkpatch sparse series series-check bench-against help

# make bench [BASE=6.1]: the base to measure, mainline 7.3 by default.
BASE ?= 7.3
bench:
	VMQ_BASE=$(BASE) vmq/bench $(BENCH_ARGS)

check:
	vmq/check $(TESTS)

deps:
	vmq/deps

lay:
	vmq/lay

kernel-debug:
	vmq/kbuild debug

kernel-release:
	vmq/kbuild release

selftests:
	vmq/selftests-build debug

# make refresh-patch P=0001-foo.patch [FILES="drivers/vhost/x.c"]
refresh-patch:
	vmq/refresh-patch $(P) $(FILES)

checkpatch:
	vmq/checkpatch

# The series as maintainers receive it: mainline's in series-out/, the 6.1
# backport's in series-out-6.1/; and their per-patch checks (git am onto
# the pristine base, W=1 + sparse build, checkpatch --strict, kernel-doc).
series:
	VMQ_BASE=7.3 vmq/series
	VMQ_BASE=6.1 vmq/series

series-check:
	VMQ_BASE=7.3 vmq/series-check
	VMQ_BASE=6.1 vmq/series-check

sparse:
	vmq/sparse

# make bench-against REV=67fe24f: this tree's vhost-blk against REV's, one run.
bench-against:
	vmq/bench-against $(REV)

help:
	@sed -n 's/^#   //p' Makefile
