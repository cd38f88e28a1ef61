#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The real guest path: the kernel's virtio_blk on a VDUSE device whose two
# rings vduse_blk_bridge hands to vhost-blk (one worker per queue), backed by
# a memory-backed null_blk.  fio writes with crc32c checksums, then reads
# everything back and verifies it; the device must have its two queues, and
# two vhost workers must have served them (their CPU time grew).  Exit 0
# pass, 4 skip (kselftest).
set -u
# Installed beside vduse_blk_bridge (tests/Makefile).
dir=$(dirname "$(readlink -f "$0")")
dev=/dev/nullb0
skip() { echo "ok 1 vduse_fio_verify # SKIP $*"; exit 4; }

echo "TAP version 13"
echo "1..1"
[ -e /dev/vhost-blk ] || skip "/dev/vhost-blk missing (CONFIG_VHOST_BLK)"
[ -e /dev/vduse/control ] || skip "/dev/vduse/control missing (CONFIG_VDPA_USER)"
[ -b $dev ] || skip "$dev missing (null_blk.nr_devices=1 null_blk.memory_backed=1)"
# fio verifies what it reads back: null_blk must keep what is written.
[ "$(cat /sys/module/null_blk/parameters/memory_backed 2>/dev/null)" != N ] ||
	skip "$dev is not memory-backed (null_blk.memory_backed=1)"
[ "$(id -u)" = 0 ] || skip "needs root (VDUSE, vdpa, $dev)"
command -v fio >/dev/null || skip "fio not installed"
command -v vdpa >/dev/null || skip "vdpa (iproute2) not installed"
[ -x "$dir/vduse_blk_bridge" ] || skip "$dir/vduse_blk_bridge not built"

# The vhost workers of process $1, "tid cputime" each: mainline's are its
# threads named vhost-*; 6.1's are kthreads named vhost-T and vhost-T-N,
# T the thread that set the owner (the bridge's message thread).
workers() {
	local pid=$1 t tid comm stat tids=" "
	for t in /proc/"$pid"/task/*; do
		tids+="${t##*/} "
	done
	for t in /proc/"$pid"/task/* /proc/[0-9]*; do
		read -r comm 2>/dev/null <"$t/comm" || continue
		case "$comm" in
		vhost-*) ;;
		*) continue ;;
		esac
		tid=${comm#vhost-}
		tid=${tid%%-*}
		case "$t$tids" in
		/proc/"$pid"/task/*|*" $tid "*) ;;
		*) continue ;;
		esac
		read -r stat 2>/dev/null <"$t/stat" || continue
		# shellcheck disable=SC2086
		set -- $stat
		echo "${t##*/} $((${14} + ${15}))"
	done | sort -u
}

"$dir/vduse_blk_bridge" -d $dev -n vmqverify -q 2 -p perqueue 2>&1 | sed 's/^/# /' &
vd=
for i in $(seq 1 100); do
	vd=$(ls /sys/bus/vdpa/devices/vmqverify/virtio*/block 2>/dev/null | head -1)
	[ -n "$vd" ] && [ -b "/dev/$vd" ] && break
	sleep 0.2
done
rc=1
if [ -z "$vd" ]; then
	echo "# no /dev/vdX appeared"
else
	queues=$(ls /sys/block/$vd/mq | wc -l)
	echo "# /dev/$vd: $(cat /sys/block/$vd/size) sectors, $queues queue(s)"
	bridge=$(pgrep -o -f "vduse_blk_bridge -d $dev -n vmqverify")
	before=$(workers "$bridge")
	echo "# vhost workers of the bridge ($bridge), tid and CPU ticks:" $before
	fio --name=verify --filename=/dev/$vd --direct=1 --ioengine=io_uring \
		--rw=randwrite --bs=4k --size=16M --iodepth=16 --numjobs=2 \
		--offset_increment=16M --verify=crc32c --verify_fatal=1 \
		--group_reporting 2>&1 | sed 's/^/# /'
	rc=${PIPESTATUS[0]}
	after=$(workers "$bridge")
	# A worker whose CPU time grew served a queue.
	busy=$(join <(echo "$before") <(echo "$after") | awk '$3 > $2' | wc -l)
	echo "# after fio:" $after "; $busy busy"
	if [ "$rc" = 0 ] && [ "$queues" != 2 ]; then
		echo "# $queues queues, not the 2 the bridge was asked for"
		rc=1
	fi
	if [ "$rc" = 0 ] && [ "$busy" != 2 ]; then
		echo "# $busy workers served the queues, not one per queue (2)"
		rc=1
	fi
fi
pkill -TERM -f "vduse_blk_bridge -d $dev -n vmqverify"
wait
if [ "$rc" = 0 ]; then
	echo "ok 1 vduse_fio_verify"
	exit 0
fi
echo "not ok 1 vduse_fio_verify # exit $rc"
exit 1
