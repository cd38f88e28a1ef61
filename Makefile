# SPDX-License-Identifier: GPL-2.0
#
# vhost-mq entry points.  The two a fresh machine needs:
#   make bench   build the release kernel, boot it, run the benchmark
#   make check   build the debug kernels, boot them, run the vhost kselftests
# BASE picks the base for every target: 7.3 (mainline, the default), 6.1
# (the bookworm backport), or all where a target does both (check, the
# default there; series; series-check).  Make passes it on to vmq/.
# Everything else is for developers; see README.md and vmq/README.md.

.PHONY: bench check deps lay kernel-debug kernel-release selftests vm-shell \
	checkpatch sparse series series-check bench-against help

# The bases "all" stands for, for the targets that do one at a time.
bases = $(if $(filter-out all,$(BASE)),$(BASE),7.3 6.1)

# make bench [BASE=6.1]: the base to measure.
bench:
	bench/bench $(BENCH_ARGS)

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
	for b in $(bases); do BASE=$$b vmq/series || exit; done

series-check:
	for b in $(bases); do BASE=$$b vmq/series-check || exit; done

sparse:
	vmq/sparse

# make bench-against REV=67fe24f: this tree's vhost-blk against REV's, one run.
bench-against:
	bench/bench-against $(REV)

help:
	@sed -n 's/^#   //p' Makefile
