#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# A real VMM on this kernel's vhost: the patched QEMU (qemu/ in vhost-mq)
# boots a guest (under TCG, no KVM needed) whose own virtio_blk drives
# /dev/vhost-blk and whose virtio_net drives /dev/vhost-net on this machine.
#
#   VHOST_QEMU         a qemu-system-x86_64 with -device vhost-blk-pci and
#                      -netdev tap,vhost-workers=
#   VHOST_QEMU_KERNEL  the guest's kernel (virtio_pci, virtio_blk,
#                      virtio_net, devtmpfs, tmpfs built in)
#   VHOST_QEMU_FW      firmware directories for -L, colon separated
#                      (default /usr/share/qemu:/usr/share/seabios)
#   VHOST_QEMU_FIO     the guest's fio (default this machine's)
#
# The guest runs from an initramfs made here: a static busybox (its shell
# runs this script's guest part), fio (with the libraries it loads, unless
# static), and this script.  Static ones keep it small: with Debian's fio
# and its libraries it is 84 MB, which QEMU loads and the guest unpacks at
# every boot under double TCG.  vhost_blk.worker_pool
# is set for each boot (below) and restored at the end.
#
#   vhost_qemu.sh [GROUP...]   GROUP: backends, viommu, mq, migrate, net
#                              (default all five, in that order)
#
# kselftest runs each group on its own (vhost_qemu_GROUP.sh), each within
# the directory's timeout: under double TCG a guest takes minutes, and the
# groups together took from 18 to over 30 minutes.  Cases, by group:
#
# backends: null_blk and files
#   nullb_two_queues_fio_verify  -device vhost-blk-pci,num-queues=2 on a
#       host_device node of /dev/nullb0: the guest sees /dev/vda with 2
#       queues, fio (2 jobs, one per vCPU, random writes with crc32c, read
#       back and verified) passes;
#   nullb_worker_per_queue       meanwhile each ring's vhost worker thread
#       (vhost-<qemu pid>, vhost-<qemu pid>-1) woke for that fio, with
#       worker_pool=1 (the kernel alone would put both rings on one
#       worker: the second comes from QEMU's workers=per-queue);
#   nullb_reboot_then_io         the guest reboots (device reset, rings
#       started again), verifies what it wrote before, writes and verifies
#       again;
#   nullb_rebind_fewer_queues_io then rebinds its driver with
#       virtio_blk.num_request_queues=1: the device starts with ring 1 not
#       set up (QEMU unbinds its kick), the guest sees 1 queue, fio verify
#       passes;
#   file_fio_verify              the same on a regular file, its rings
#       busy-polling (poll-us=1000);
#   file_shrunk_read_eio         a second file shrinks under the running
#       guest: reading past the new end fails with EIO in the guest (the
#       same read succeeded before the shrink), and this kernel's log stays
#       clean;
#   file_query_block_shows_disk  QMP query-block lists that disk on its
#       node;
#   file_block_resize_seen       then QMP block_resize of that disk's node
#       to 48 MiB: the guest sees its new size (a config change interrupt);
#   serial_empty_unless_given    GET_ID: empty without serial= (as QEMU's
#       virtio-blk), the serial= given otherwise;
#   format_node_refused          a raw format node with an offset over
#       the file is refused, the error naming the driver; one that passes
#       the whole file through is served;
#   file_image_locked            while the guest runs, a second QEMU with
#       a node on the first file is refused (writer and read-only=on
#       alike) with the block layer's lock error, and starts with
#       locking=off;
#   file_poll_us_busy_polls      500 reads one at a time: the workers of
#       the poll-us=1000 device take at least twice the CPU time (and 10
#       ticks more) of the other device's for the same reads, or, where
#       the poller is preempted, wake for at most half as many of them;
#   file_4k_direct_blk_size      a third file, cache.direct=on, on ext4
#       over a loop device with 4K sectors: without logical_block_size
#       QEMU refuses the device, naming the 4096 bytes it needs; with
#       logical_block_size=4096 the guest gets 4K blocks, and 4K direct
#       writes read back equal;
#
# viommu: behind an IOMMU
#   viommu_access_platform_fio_verify  the same null_blk behind QEMU's
#       intel-iommu (q35, iommu_platform=on): the guest negotiates
#       VIRTIO_F_ACCESS_PLATFORM, its DMA is translated (an IOMMU group of
#       type DMA), so every address vhost-blk uses comes through the device
#       IOTLB, and the guest's lazy IOTLB flushes (DMA-FQ) must reach
#       it; fio verify passes and this kernel's log stays clean;
#   viommu_workers_shared_one_thread  that device has workers=shared, with
#       worker_pool=0 (the kernel alone would give ring 1 a worker): one
#       worker thread did all the work;
#   viommu_iotlb_overflow_then_stop  then four 4 MiB writes in flight (4096
#       pages, twice vhost's max_iotlb_entries: the rings' translations
#       are evicted and completions miss) with the guest's lazy flushes
#       meanwhile: fio verify passes, QEMU stops on SIGTERM within 20 s
#       and this kernel's log stays clean.  A stress case: the deadlock of
#       a completion and an IOTLB flush also needs a guest flush to arrive while a
#       completion waits for a miss, which this makes possible but does
#       not force (it passed on the kernel before the fix, lazy and
#       strict flushes alike); vhost_blk_hardening_test's
#       iotlb_invalidate_never_waits_for_a_miss forces it;
#   viommu_stop_cont_200_loses_nothing  then 200 QMP stop/cont cycles while
#       the guest repeats those writes (40 s of guest time): every fio run
#       ends and verifies.  At each stop QEMU loads the used rings'
#       translations before it detaches the backend: a completion that
#       missed there would be dropped, its request lost;
#   viommu_rebind_fewer_queues_io  then the guest rebinds its driver with
#       one queue (ring 1's memory unmapped from the vIOMMU): the device
#       starts, and fio verify passes;
#
# mq: the default number of queues
#   default_num_queues_per_vcpu  4 vCPUs, vhost-blk-pci without num-queues:
#       the guest sees 4 queues, fio verify (4 jobs, one per vCPU) passes;
#   default_num_queues_worker_per_queue  with worker_pool=1, 4 worker
#       threads, each woke for that fio;
#   worker_map_pins              QMP x-query-vhost-workers maps the 4
#       queues to 4 distinct worker threads of QEMU; each is pinned with
#       sched_setaffinity (taskset) to a CPU of this machine; then each
#       queue in turn reads alone (fio from a vCPU that queue serves): the
#       worker that woke most is the one the map names for that queue, and
#       it ran on the CPU it was pinned to;
#
# migrate: live migration
#   migrate_reads_survive        a 64 MiB file node on this machine (the
#       storage both QEMUs see), vhost-blk-pci with 2 queues: the guest
#       writes 1 MiB, then reads it back again and again, each time also
#       writing a new 4 KiB block, while the source QEMU migrates it to a
#       destination QEMU (-incoming) on this machine; the migration
#       completes, block_resize on the destination grows the disk to 96
#       MiB, and the guest, now on the destination, sees the new size with
#       every read equal to what it wrote (the pages the kernel wrote
#       reached the destination: vhost's dirty log, whose count of pages
#       the source traces and must be nonzero), every block written
#       before, across and after the switch-over there, and a new write
#       reads back; meanwhile fio writes checksummed blocks (libaio, 4 in
#       flight) from before the migration until after it, then verifies
#       on the destination every block it wrote; the downtime, RAM and
#       device-dirtied page figures are printed;
#   migrate_failed_then_cont     before that, a migration to a destination
#       without the device fails after the source stopped (the device's
#       state has nowhere to go): the source is stopped, QMP cont runs it
#       again, and the guest's reads and writes go on (checked with the
#       others on the final destination);
#
# net: vhost-net
#   tap_per_ring_workers_ping    -netdev tap,vhost=on,vhost-workers=per-ring:
#       the guest and this machine ping each other over the tap (20
#       pings of 1400 bytes), and both
#       of the queue pair's vhost workers (RX on vhost-<pid>, TX on
#       vhost-<pid>-1) woke for the pings (context switches while the
#       guest pinged: CPU ticks are sampled, and an RX ring's few packets
#       may cost none).
# Exit 0 when every case passes, 1 otherwise, 4 when skipped (kselftest).
set -u
me=$(readlink -f "$0")

# --- Inside the guest: vhost_qemu.sh --guest MODE -----------------------
# busybox's sh runs this part (the guest has no bash): POSIX sh and the
# few extensions ash has (local, ${var:offset:length}).
if [ "${1:-}" = --guest ]; then
	mode=$2
	say() { echo "VMQT: $*"; }
	# Whole seconds of guest time, which stands still while stopped.
	uptime_s() { cut -d. -f1 /proc/uptime; }
	say "info up $(cut -d' ' -f1 /proc/uptime) s at the start of $mode"
	vd=/dev/vda
	if [ "$mode" != net ]; then
		for i in $(seq 1 50); do [ -b $vd ] && break; sleep 0.2; done
		[ -b $vd ] || { say "fail no $vd"; say done; exit 1; }
		say "info $vd: $(cat /sys/block/vda/size) sectors," \
			"$(ls /sys/block/vda/mq | wc -l) queue(s)"
		say "ok queues_$(ls /sys/block/vda/mq | wc -l)"
		# GET_ID: empty without serial=, as QEMU's virtio-blk answers.
		ser=$(cat /sys/block/vda/serial 2>/dev/null)
		say "info serial '$ser'"
		case $mode in
		files) [ "$ser" = vmqt-file0 ] && say "ok serial_given" ;;
		*) [ -z "$ser" ] && say "ok serial_empty" ;;
		esac
		# The marker sector, past what fio uses: which boot this is.
		marker_off=$(($(cat /sys/block/vda/size) - 8))
		stage=$(dd if=$vd bs=512 skip=$marker_off count=1 2>/dev/null |
			tr -dc 'A-Z0-9')
	fi
	ncpu=$(nproc)
	# The driver again, with one queue (virtio_blk.num_request_queues=1):
	# the device starts with ring 1 not set up.  Sets nq, the queues the
	# disk has then.
	rebind_one_queue() {
		local vdev drv=/sys/bus/virtio/drivers/virtio_blk i
		vdev=$(basename "$(readlink -f /sys/block/vda/device)")
		echo 1 >/sys/module/virtio_blk/parameters/num_request_queues &&
			echo "$vdev" >$drv/unbind && echo "$vdev" >$drv/bind ||
			say "fail rebind of $vdev"
		for i in $(seq 1 50); do [ -b $vd ] && break; sleep 0.2; done
		nq=$(ls /sys/block/vda/mq 2>/dev/null | wc -l)
		say "info after the rebind: $nq queue(s)"
	}
	# fio verify, one job per vCPU.  The first job of a boot runs
	# between the marks "io" and "iodone": the host counts which
	# workers woke in between.
	fiojob() {	# rw [extra...]
		local rw=$1 rc=0
		shift
		[ -e /tmp/io-marked ] || { say "mark io"; sleep 1; }
		fio --name=v --filename=$vd --direct=1 --ioengine=psync --rw="$rw" \
			--bs=4k --size=1M --numjobs="$ncpu" --offset_increment=2M \
			--cpus_allowed=0-$((ncpu - 1)) --cpus_allowed_policy=split \
			--verify=crc32c --verify_fatal=1 --randseed=1234 \
			--group_reporting "$@" >/tmp/fio.log 2>&1 || rc=$?
		[ -e /tmp/io-marked ] || { say "mark iodone"; sleep 1; : >/tmp/io-marked; }
		return $rc
	}
	case $mode in
	files)
		# vda: fio verify on a file; vdb: a file the host shrinks.
		if fiojob randwrite; then
			say "ok fio_verify"
		else
			say "fail fio_verify"; sed 's/^/VMQT: # /' /tmp/fio.log
		fi
		# vdc: a file on a file system whose disk has 4K sectors,
		# direct=on: the guest must see 4K blocks, and direct I/O of
		# that size must work.
		lbs=$(cat /sys/block/vdc/queue/logical_block_size 2>/dev/null)
		say "info vdc logical block size ${lbs:-none}"
		if [ "$lbs" != 4096 ]; then
			say "fail dio_blk_size: want 4096, got ${lbs:-no vdc}"
		elif ! dd if=/dev/urandom of=/tmp/blk bs=4096 count=16 2>/dev/null ||
		     ! dd if=/tmp/blk of=/dev/vdc bs=4096 count=16 oflag=direct \
				2>/tmp/dd.err ||
		     ! dd if=/dev/vdc of=/tmp/blk2 bs=4096 count=16 iflag=direct \
				2>>/tmp/dd.err || ! cmp -s /tmp/blk /tmp/blk2; then
			say "fail dio_blk_size: 4K direct I/O: $(cat /tmp/dd.err)"
		else
			say "ok dio_blk_size"
		fi
		# poll-us: the same 500 reads one at a time from vCPU 0 (ring
		# 0), first on vda (poll-us=1000), then on vdb (no polling).
		# The host notes the workers' CPU time at each mark: only the
		# device being read works in between.
		for d in vda vdb; do
			say "mark $d"
			sleep 3
			fio --name=p --filename=/dev/$d --direct=1 --ioengine=psync \
				--rw=randread --bs=4k --size=2M --number_ios=500 \
				--cpus_allowed=0 >/tmp/fio.log 2>&1 ||
				say "fail poll_reads on $d"
		done
		say "mark end"
		sleep 3
		# The host checks the image locks, then shrinks vdb's file to
		# half when it sees "hook"; reading its last 1M then fails,
		# well within 180 s.  The same
		# read must succeed before: a disk that always fails proves
		# nothing.
		vd=/dev/vdb
		last=$(($(cat /sys/block/vdb/size) / 2048 - 1))
		before=ok
		dd if=$vd of=/dev/null bs=1M skip=$last count=1 iflag=direct \
			2>/tmp/dd.err || before="fail read before shrinking: $(cat /tmp/dd.err)"
		say hook
		res="fail no EIO within 180 s"
		for i in $(seq 1 360); do
			if ! dd if=$vd of=/dev/null bs=1M skip=$last count=1 iflag=direct \
					2>/tmp/dd.err; then
				grep -qE "Input/output error|I/O error" /tmp/dd.err && res=ok ||
					res="fail $(cat /tmp/dd.err)"
				break
			fi
			sleep 0.5
		done
		[ "$before" = ok ] || res=$before
		say "$res shrunk_read_eio"
		# The host resizes vdb's node to 48 MiB (block_resize): a
		# config change interrupt gives the guest the new size.
		want=$((48 * 2048))
		say "mark resize"
		res="fail vdb still has $(cat /sys/block/vdb/size) sectors, not $want"
		for i in $(seq 1 240); do
			if [ "$(cat /sys/block/vdb/size)" = $want ]; then
				res=ok
				break
			fi
			sleep 0.5
		done
		say "$res resize_seen"
		;;
	io-reboot)
		if [ "$stage" = VMQTBOOT1 ]; then
			# After the reboot: the marker boot 1 wrote was read back
			# (stage), and I/O works again.
			say "ok reboot_verify"
			if fiojob randwrite --offset=8M; then
				say "ok reboot_io"
			else
				say "fail reboot_io"; sed 's/^/VMQT: # /' /tmp/fio.log
			fi
			# The driver again, with one queue: the device starts
			# with ring 1 not set up (QEMU unbinds its kick).
			rebind_one_queue
			if [ "$nq" != 1 ]; then
				say "fail rebind_one_queue: $nq queues"
			elif fiojob randwrite --offset=16M; then
				say "ok rebind_one_queue"
			else
				say "fail rebind_one_queue"; sed 's/^/VMQT: # /' /tmp/fio.log
			fi
			say done
			exit 0
		fi
		if fiojob randwrite; then
			say "ok fio_verify"
		else
			say "fail fio_verify"; sed 's/^/VMQT: # /' /tmp/fio.log
		fi
		printf 'VMQTBOOT1' | dd of=$vd bs=512 seek=$marker_off conv=sync,fsync \
			oflag=direct 2>/dev/null
		sync
		say rebooting
		busybox reboot -f
		sleep 600
		;;
	viommu)
		# Bit 33 of the negotiated features is VIRTIO_F_ACCESS_PLATFORM;
		# the PCI function's IOMMU group says whether DMA is translated.
		feat=$(cat /sys/block/vda/device/features)
		grp=$(readlink -f /sys/block/vda/device/../iommu_group)
		type=$(cat "$grp/type" 2>/dev/null)
		say "info features $feat, iommu group ${grp##*/} type ${type:-none}"
		if [ "${feat:33:1}" = 1 ] && [ "${type#DMA}" != "$type" ]; then
			say "ok translated"
		else
			say "fail ACCESS_PLATFORM not negotiated or DMA not translated"
		fi
		# Half the data of the other cases: every flush of the guest's
		# IOTLB empties the device IOTLB, so I/O here is slow.
		if fiojob randwrite --size=1M; then
			say "ok fio_verify"
		else
			say "fail fio_verify"; sed 's/^/VMQT: # /' /tmp/fio.log
		fi
		# More pages in flight than the device IOTLB holds (vhost's
		# max_iotlb_entries, 2048): four 4 MiB writes, 4096 pages
		# mapped before the first completes, then read back.  The
		# rings' translations are evicted, completions miss, and the
		# guest's lazy flushes (sent by a vCPU under QEMU's big lock)
		# must not wait for misses only QEMU's main loop answers.
		if fio --name=big --filename=$vd --direct=1 --ioengine=libaio \
			--iodepth=4 --rw=write --bs=4M --size=16M --offset=16M \
			--verify=crc32c --verify_fatal=1 >/tmp/fio.log 2>&1; then
			say "ok iotlb_overflow"
		else
			say "fail iotlb_overflow"; sed 's/^/VMQT: # /' /tmp/fio.log
		fi
		# The host stops and continues the VM 200 times meanwhile
		# (on_mark_stopcont): the same 4 MiB writes, so that requests
		# complete at a stop with their used ring's translation
		# evicted.  None may be lost: every fio run ends and verifies.
		say "mark stopcont"
		res=ok runs=0 end=$(($(uptime_s) + 40))
		while [ "$(uptime_s)" -lt $end ]; do
			if ! timeout -s KILL 300 fio --name=sc --filename=$vd --direct=1 \
				--ioengine=libaio --iodepth=4 --rw=write --bs=4M --size=16M \
				--offset=32M --verify=crc32c --verify_fatal=1 >/tmp/fio.log 2>&1; then
				res=fail; sed 's/^/VMQT: # /' /tmp/fio.log; break
			fi
			runs=$((runs + 1))
		done
		say "info $runs fio runs of 16 MiB across the stops"
		say "$res stopcont"
		# The driver again, with one queue: ring 1's memory goes back
		# to the guest and out of the vIOMMU; the device must start
		# without touching ring 1's old used ring.
		rebind_one_queue
		if [ "$nq" != 1 ]; then
			say "fail rebind_one_queue: $nq queues"
		elif timeout -s KILL 300 fio --name=rb --filename=$vd --direct=1 \
			--ioengine=libaio --iodepth=4 --rw=randwrite --bs=4k --size=1M \
			--offset=48M --verify=crc32c --verify_fatal=1 >/tmp/fio.log 2>&1; then
			say "ok rebind_one_queue"
		else
			say "fail rebind_one_queue"; sed 's/^/VMQT: # /' /tmp/fio.log
		fi
		;;
	mq)
		# Default num-queues: one per vCPU.
		if fiojob randwrite --size=1M; then
			say "ok fio_verify"
		else
			say "fail fio_verify"; sed 's/^/VMQT: # /' /tmp/fio.log
		fi
		# The host reads the queue -> thread map (x-query-vhost-workers)
		# and pins each queue's worker at "mark map"; then each queue
		# in turn reads alone, from a vCPU it serves, between "mark qN"
		# and "mark qNdone": the host sees which worker woke.
		say "mark map"
		sleep 10
		for h in /sys/block/vda/mq/*; do
			q=${h##*/}
			cpu=$(cut -d, -f1 "$h/cpu_list" | cut -d- -f1)
			say "info queue $q serves vCPUs $(cat "$h/cpu_list")"
			say "mark q$q"
			sleep 1
			fio --name=q --filename=$vd --direct=1 --ioengine=psync \
				--rw=randread --bs=4k --size=1M --number_ios=200 \
				--cpus_allowed="$cpu" >/tmp/fio.log 2>&1 ||
				say "fail queue_reads q$q"
			say "mark q${q}done"
			sleep 1
		done
		;;
	migrate)
		# 1 MiB of random data, written, then read back again and
		# again while the host migrates the guest: every read's data
		# and used element is written by the kernel into guest
		# memory, which must reach the destination (vhost's dirty
		# log).  The host grows the disk on the destination when the
		# migration is done: the new size ends the loop.
		dd if=/dev/urandom of=/tmp/pat bs=1M count=1 2>/dev/null
		dd if=/tmp/pat of=$vd bs=1M count=1 oflag=direct 2>/dev/null ||
			say "fail migrate_verify: the first write failed"
		size0=$(cat /sys/block/vda/size)
		# Meanwhile fio writes 4 KiB blocks with checksums from 8 MiB
		# on, 16 a second, until told to stop after the switch-over:
		# the blocks it wrote (its saved verify state says which) are
		# verified on the destination.
		across="--name=across --filename=$vd --direct=1 --ioengine=libaio
			--iodepth=4 --rw=write --bs=4k --offset=8M --size=48M
			--rate=64k --verify=crc32c"
		(cd /tmp && exec fio $across --do_verify=0 --verify_state_save=1 \
			>/tmp/across.log 2>&1) &
		fpid=$!
		say "mark migrate"
		res="fail the disk did not grow within 600 s"
		n=0
		for i in $(seq 1 1200); do
			# And a write of 4 KiB, from 2 MiB on, one block further
			# each time: before, across and after the switch-over.
			# Block k holds the pattern's 4 KiB slice k % 256.
			if ! dd if=/tmp/pat of=$vd bs=4k count=1 skip=$((n % 256)) \
			     seek=$((512 + n)) oflag=direct 2>/tmp/dd.err; then
				res="fail write $((n + 1)) failed: $(cat /tmp/dd.err)"
				break
			fi
			if ! dd if=$vd of=/tmp/back bs=1M count=1 iflag=direct 2>/tmp/dd.err ||
			   ! cmp -s /tmp/pat /tmp/back; then
				res="fail read $((n + 1)) differs or failed: $(cat /tmp/dd.err)"
				break
			fi
			n=$((n + 1))
			if [ "$(cat /sys/block/vda/size)" != "$size0" ]; then
				res=ok
				break
			fi
		done
		say "info $n reads of 1 MiB and writes of 4 KiB until the disk grew"
		# fio still writing after the switch-over (it would take 12
		# minutes to finish): stopped, it saves what it wrote, and
		# reads that back.
		if ! kill -INT $fpid 2>/dev/null; then
			[ "$res" = ok ] && res="fail fio's writes ended before the migration did"
		fi
		wait $fpid
		if [ "$res" = ok ] && ! grep -q "err= 0" /tmp/across.log; then
			res="fail fio's writes failed: $(grep -m1 'err=' /tmp/across.log)"
		fi
		if [ "$res" = ok ]; then
			if (cd /tmp && fio $across --verify_only --verify_state_load=1 \
				>/tmp/verify.log 2>&1) &&
			   grep -q "err= 0" /tmp/verify.log; then
				say "info fio wrote $(sed -n 's/.*WRITE:.* io=\([^ ,]*\).*/\1/p' /tmp/across.log) across the switch-over; verified: $(sed -n 's/.*READ:.* io=\([^ ,]*\).*/\1/p' /tmp/verify.log)"
			else
				res="fail fio's blocks do not verify on the destination: $(grep -m1 -iE 'bad|err=' /tmp/verify.log)"
			fi
		fi
		# On the destination: every write of the loop is there.
		if [ "$res" = ok ]; then
			for r in $(seq 0 $((n / 256))); do cat /tmp/pat; done |
				head -c $((n * 4096)) >/tmp/want
			if ! dd if=$vd of=/tmp/got bs=4k count=$n skip=512 iflag=direct 2>/dev/null ||
			   ! cmp -s /tmp/want /tmp/got; then
				res="fail a write of the loop does not read back on the destination"
			fi
		fi
		# And new writes read back.
		if [ "$res" = ok ]; then
			dd if=/dev/urandom of=/tmp/pat2 bs=1M count=1 2>/dev/null
			if ! dd if=/tmp/pat2 of=$vd bs=1M count=1 seek=1 oflag=direct 2>/dev/null ||
			   ! dd if=$vd of=/tmp/back2 bs=1M count=1 skip=1 iflag=direct 2>/dev/null ||
			   ! cmp -s /tmp/pat2 /tmp/back2; then
				res="fail a write after the migration did not read back"
			fi
		fi
		say "$res migrate_verify"
		;;
	net)
		busybox ip addr add 10.99.0.2/24 dev eth0 &&
			busybox ip link set eth0 up || say "fail no eth0"
		# The host sets up its end of the tap when it sees "hook".
		say hook
		res="fail no answer from 10.99.0.1 within 60 s"
		for i in $(seq 1 60); do
			busybox ping -c 1 -W 1 10.99.0.1 >/dev/null 2>&1 || continue
			# The host notes the workers' context switches at
			# each mark (late by a second or two under TCG): 20
			# pings, 1 s apart, wake both rings' workers about
			# 20 times in between.
			say "mark pings"
			sleep 3
			if busybox ping -c 20 -s 1400 -W 5 10.99.0.1 >/tmp/ping.log 2>&1; then
				res=ok
			else
				res="fail $(grep -a transmitted /tmp/ping.log)"
			fi
			say "mark pinged"
			sleep 3
			break
		done
		say "$res ping"
		;;
	esac
	say "info up $(cut -d' ' -f1 /proc/uptime) s at the end"
	say done
	exit 0
fi

# --- On this machine ---------------------------------------------------------
qemu=${VHOST_QEMU:-}
kernel=${VHOST_QEMU_KERNEL:-}
fw=${VHOST_QEMU_FW:-/usr/share/qemu:/usr/share/seabios}
# The groups of cases, each on guests of its own: vhost_qemu.sh GROUP...
# runs those named, in this order, all five without arguments.
all_groups=(backends viommu mq migrate net)
declare -A group_cases=(
	[backends]="nullb_two_queues_fio_verify nullb_worker_per_queue
		nullb_reboot_then_io nullb_rebind_fewer_queues_io
		file_fio_verify file_shrunk_read_eio file_query_block_shows_disk
		file_block_resize_seen
		serial_empty_unless_given format_node_refused file_image_locked
		file_poll_us_busy_polls file_4k_direct_blk_size"
	[viommu]="viommu_access_platform_fio_verify
		viommu_workers_shared_one_thread viommu_iotlb_overflow_then_stop
		viommu_stop_cont_200_loses_nothing viommu_rebind_fewer_queues_io"
	[mq]="default_num_queues_per_vcpu default_num_queues_worker_per_queue"
	[migrate]="migrate_failed_then_cont migrate_reads_survive"
	[net]="tap_per_ring_workers_ping"
)
for g in "$@"; do
	[ -n "${group_cases[$g]:-}" ] && continue
	echo "usage: $0 [${all_groups[*]}]...: no group '$g'" >&2
	exit 1
done
groups=()
cases=()
for g in "${all_groups[@]}"; do
	[ $# = 0 ] || [[ " $* " == *" $g "* ]] || continue
	groups+=("$g")
	cases+=(${group_cases[$g]})
done
want() { [[ " ${groups[*]} " == *" $1 "* ]]; }
echo "TAP version 13"
echo "1..${#cases[@]}"
skipall() {
	local i=1 c
	for c in "${cases[@]}"; do
		echo "ok $i $c # SKIP $*"
		i=$((i + 1))
	done
	echo "# Totals: pass:0 fail:0 xfail:0 xpass:0 skip:${#cases[@]} error:0"
	exit 4
}
[ -n "$qemu" ] || skipall "VHOST_QEMU not set (the patched qemu-system-x86_64)"
[ -x "$qemu" ] || skipall "$qemu is not executable"
[ -n "$kernel" ] && [ -r "$kernel" ] ||
	skipall "VHOST_QEMU_KERNEL not set or unreadable (the guest's bzImage)"
[ "$(id -u)" = 0 ] || skipall "needs root (/dev/nullb0, vhost threads of another uid)"
[ -e /dev/vhost-blk ] || skipall "/dev/vhost-blk missing (CONFIG_VHOST_BLK)"
if want backends || want viommu || want mq; then
	[ -b /dev/nullb0 ] ||
		skipall "/dev/nullb0 missing (null_blk.nr_devices=1 memory_backed=1)"
	[ "$(cat /sys/module/null_blk/parameters/memory_backed 2>/dev/null)" != N ] ||
		skipall "/dev/nullb0 is not memory-backed (null_blk.memory_backed=1)"
fi
bb=$(command -v busybox) || skipall "busybox not installed (the guest's init)"
gfio=${VHOST_QEMU_FIO:-$(command -v fio)} || skipall "fio not installed"
[ -x "$gfio" ] || skipall "no fio ($gfio) for the guest"
if want net; then
	[ -e /dev/vhost-net ] || skipall "/dev/vhost-net missing (CONFIG_VHOST_NET)"
	[ -e /dev/net/tun ] || skipall "/dev/net/tun missing (CONFIG_TUN)"
fi
"$qemu" -device help 2>/dev/null | grep -q '"vhost-blk-pci"' ||
	skipall "$qemu has no vhost-blk-pci device"

work=$(mktemp -d /tmp/vhost_qemu.XXXXXX)
# vhost_blk.worker_pool (workers for rings QEMU did not bind: 0 one per
# ring, 1 all on the device's default one), restored on exit; a loop
# device and its mount for the 4K-sector case, undone on exit.
pool=/sys/module/vhost_blk/parameters/worker_pool
pool_saved=$(cat $pool 2>/dev/null)
loopdev=
cleanup() {
	pkill -KILL -P $$ 2>/dev/null
	[ -n "$pool_saved" ] && echo "$pool_saved" >$pool
	umount "$work/mnt4k" 2>/dev/null
	[ -n "$loopdev" ] && losetup -d "$loopdev" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT
# set_pool N: returns non-zero when the kernel has no such parameter.
set_pool() { [ -n "$pool_saved" ] && echo "$1" >$pool; }
# The guests' consoles (NAME.log), QEMU's output (NAME.qemu) and the vhost
# workers seen (NAME.workers): kept in VHOST_QEMU_LOGDIR if set.
logs=${VHOST_QEMU_LOGDIR:-$work}

# The guest's initramfs, self-contained (this machine's root over nested
# 9p made every program start take minutes): busybox with a link for each
# of its applets, fio with the libraries it loads, this script, and an
# init that runs "sh vhost_qemu.sh --guest MODE", MODE from vmqt.mode= on
# its command line.  The guest part is busybox's sh, not bash: bash took
# about 5 s to start in the nested guest, the links made at every boot
# (busybox --install) 1.5 s.
# One for every group a machine runs (kselftest runs each group on its
# own): kept in /run under the names of its inputs, and made again when
# one of them is newer than it.
initrd=/run/vhost_qemu.initrd.cpio
ikey="$bb $gfio $me"
read -r key 2>/dev/null <"$initrd.key" || key=
if [ -s "$initrd" ] && [ "$key" = "$ikey" ] && ! [ "$bb" -nt "$initrd" ] &&
   ! [ "$gfio" -nt "$initrd" ] && ! [ "$me" -nt "$initrd" ]; then
	echo "# the guest's initramfs from an earlier group: $initrd"
else
rm -f "$initrd" "$initrd.key"
ird=$work/initrd
mkdir -p "$ird/bin" "$ird/"{dev,proc,sys,tmp}
cp "$bb" "$ird/bin/busybox" && cp "$gfio" "$ird/bin/fio" ||
	skipall "cannot copy busybox and fio"
# It runs alone in the guest: ldd fails on a static program.
! ldd "$bb" >/dev/null 2>&1 || skipall "$bb is not static (busybox-static)"
mapfile -t applets < <("$bb" --list)
[ ${#applets[@]} -gt 100 ] || skipall "$bb --list names no applets"
# A link for each in one process, not an ln each: about 270 of them.
python3 -c 'import os, sys
for a in sys.argv[2:]:
    if a != "busybox":
        os.symlink("busybox", os.path.join(sys.argv[1], a))' "$ird/bin" "${applets[@]}" ||
	skipall "cannot link busybox's applets"
# fio's libraries in one cp: a process costs up to a second in a debug
# kernel under TCG, and one per library (Debian's fio has 64) took a
# minute.
mapfile -t libs < <(ldd "$gfio" 2>/dev/null |
		    awk '/=> \// { print $3 } /^\t\// { print $1 }' | sort -u)
[ ${#libs[@]} = 0 ] || cp -L --parents "${libs[@]}" "$ird" ||
	skipall "cannot copy the libraries of fio"
cp "$me" "$ird/vhost_qemu.sh"
cat >"$ird/init" <<'EOF'
#!/bin/sh
export PATH=/bin
mount -t proc none /proc
mount -t devtmpfs none /dev
mount -t sysfs none /sys
mount -t tmpfs none /tmp
for a in $(cat /proc/cmdline); do
	case "$a" in vmqt.mode=*) mode=${a#vmqt.mode=} ;; esac
done
sh /vhost_qemu.sh --guest "$mode"
echo "VMQT: done"
exec sleep 3600
EOF
chmod 755 "$ird/init"
(cd "$ird" && find . | cpio -o -H newc --quiet) >"$initrd" ||
	skipall "cpio failed"
echo "$ikey" >"$initrd.key"
fi

fwargs=()
IFS=: read -ra fwdirs <<<"$fw"
for d in "${fwdirs[@]}"; do fwargs+=(-L "$d"); done

# The guest kernel's own arguments besides console and mode: no ACPI (and
# so no IOMMU) unless a case says otherwise; 2 vCPUs unless a case says
# otherwise.
kargs="acpi=off"
smp=2

# The vhost workers of the qemu $qpid: "NAME:TID TICKS SWITCHES" for each
# (utime + stime in clock ticks; voluntary + involuntary context switches).
# 6.1's are kthreads named after QEMU ("vhost-$qpid", "vhost-$qpid-<id>");
# mainline's are QEMU's own threads, each named "vhost-<tid>" after the
# QEMU thread that made it (a vCPU thread starting the device, say).
workers_cpu() {
	local t c st f k v sw
	# Shell builtins only: a fork per process of the (debug, emulated)
	# machine made a snapshot take seconds, and the guest's reads moved
	# between the marks' windows.
	for t in /proc/[0-9]* /proc/"$qpid"/task/[0-9]*; do
		read -r c 2>/dev/null <"$t/comm" || continue
		case $t:$c in
		/proc/"$qpid"/task/*:vhost-*) ;;
		/proc/"$qpid"/task/*) continue ;;
		*:vhost-"$qpid"|*:vhost-"$qpid"-*) ;;
		*) continue ;;
		esac
		read -r st 2>/dev/null <"$t/stat" || continue
		# Fields 14 and 15 (utime, stime): 12th and 13th after comm.
		read -ra f <<<"${st##*) }"
		sw=0
		while read -r k v; do
			case $k in
			voluntary_ctxt_switches:|nonvoluntary_ctxt_switches:) sw=$((sw + v)) ;;
			esac
		done 2>/dev/null <"$t/status"
		echo "$c:${t##*/} $((f[11] + f[12])) $sw"
	done
}
# Ticks (column 2; 3: wake-ups) all workers spent between the marks $2
# and $3 of the boot $1.
mark_ticks() {
	local a b col=${4:-2}
	a=$(awk -v c="$col" '{ s += $c } END { print s + 0 }' "$logs/$1.mark-$2" 2>/dev/null)
	b=$(awk -v c="$col" '{ s += $c } END { print s + 0 }' "$logs/$1.mark-$3" 2>/dev/null)
	[ -e "$logs/$1.mark-$2" ] && [ -e "$logs/$1.mark-$3" ] || { echo -1; return; }
	echo $((b - a))
}

# boot NAME MODE HOOK QEMU-ARGS...: run the guest until it prints
# "VMQT: done" (at most 1200 s), its console in $logs/NAME.log; HOOK (a
# command, or "") runs once the guest prints "VMQT: hook"; at each
# "VMQT: mark M" the workers' CPU times go to $logs/NAME.mark-M (and the
# function on_mark_M runs, if there is one).  Leaves the
# qemu pid in $qpid and the guest's vhost worker CPU times in
# $logs/NAME.workers.
# start_qemu NAME MODE QEMU-ARGS...: a guest in MODE, its console in
# $logs/NAME.log, QEMU's output in $logs/NAME.qemu, the pid in $qpid.
start_qemu() {
	local name=$1 mode=$2
	shift 2
	: >"$logs/$name.log"
	"$qemu" -accel tcg,tb-size=64 -smp "$smp,sockets=$smp,cores=1,threads=1" -m 512M \
		-nographic -nodefaults \
		-serial "file:$logs/$name.log" "${fwargs[@]}" \
		-kernel "$kernel" -initrd "$initrd" \
		-append "console=ttyS0 panic=-1 $kargs quiet vmqt.mode=$mode" \
		"$@" >"$logs/$name.qemu" 2>&1 &
	qpid=$!
	echo "# $name: qemu started at $(date +%T)"
}
# Polling a guest's console forks nothing: a fork costs this debug,
# emulated machine a large part of a second, taken from the nested guest's
# vCPUs.  nap SECONDS: a sleep (a read that times out on a FIFO nobody
# writes); console NAME: the console of NAME in $lines, CRs dropped.
mkfifo "$work/nap" && exec 9<>"$work/nap"
nap() { read -r -t "$1" -u 9 _ || :; }
console() {
	mapfile -t lines <"$logs/$1.log"
	lines=("${lines[@]%$'\r'}")
}
# wait_console NAME LINE SECONDS: until the console of NAME has LINE,
# or SECONDS pass (then non-zero).
wait_console() {
	local end=$((SECONDS + $3)) l
	while [ $SECONDS -lt $end ]; do
		console "$1"
		for l in "${lines[@]}"; do
			[ "$l" = "$2" ] && return 0
		done
		nap 0.5
	done
	return 1
}

# A guest that never finished: where each of QEMU's threads (its vhost
# workers among them, on 7.3) waits in this kernel, and this kernel's
# last words.  Read only after the guest's time is up.
hang_report() {
	local t c
	for t in /proc/"$qpid"/task/[0-9]*; do
		read -r c 2>/dev/null <"$t/comm" || continue
		echo "# hang: thread ${t##*/} $c, state $(grep -m1 '^State:' "$t/status" 2>/dev/null)"
		sed 's/^/# hang:   /' "$t/stack" 2>/dev/null
	done
	for t in /proc/[0-9]*; do
		read -r c 2>/dev/null <"$t/comm" || continue
		case $c in
		vhost-"$qpid"*)
			echo "# hang: kthread ${t##*/} $c"
			sed 's/^/# hang:   /' "$t/stack" 2>/dev/null
			;;
		esac
	done
	dmesg | tail -n 20 | sed 's/^/# hang: dmesg: /'
}

boot() {
	local name=$1 mode=$2 hook=$3 log=$logs/$1.log hooked=0 i m l
	local end=$((SECONDS + 1200)) done hook_seen
	shift 3
	start_qemu "$name" "$mode" "$@"
	while [ $SECONDS -lt $end ]; do
		console "$name"
		done=0 hook_seen=0
		for l in "${lines[@]}"; do
			case $l in
			"VMQT: mark "*)
				# Marks first: the last may come just before "done".
				m=${l#VMQT: mark }
				[[ $m =~ ^[a-z0-9]+$ ]] || continue
				[ -e "$logs/$name.mark-$m" ] && continue
				workers_cpu >"$logs/$name.mark-$m"
				! declare -F "on_mark_$m" >/dev/null || "on_mark_$m"
				;;
			"VMQT: done"*) done=1 ;;
			"VMQT: hook"*) hook_seen=1 ;;
			esac
		done
		[ $done = 1 ] && break
		kill -0 $qpid 2>/dev/null || break
		if [ -n "$hook" ] && [ $hooked = 0 ] && [ $hook_seen = 1 ]; then
			$hook
			hooked=1
		fi
		nap 0.5
	done
	echo "# $name: guest done at $(date +%T)"
	grep -q "^VMQT: done" "$log" || {
		echo "# $name: the guest did not finish; the end of its console:"
		tail -n 25 "$log" | tr -d '\r' | sed 's/^/# console: /'
		hang_report
	}
	# QEMU gone before it was told to go: say how (128 + a signal).
	if ! kill -0 $qpid 2>/dev/null; then
		wait $qpid
		echo "# $name: qemu exited by itself with status $?"
	fi
	# Every vhost worker of this qemu, with its CPU time, while the
	# device still exists.
	workers_cpu >"$logs/$name.workers"
	# QEMU stops the device on SIGTERM (SET_BACKEND -1, rings
	# stopped): NAME.killed says it needed SIGKILL.
	kill -TERM $qpid 2>/dev/null
	for i in $(seq 1 40); do kill -0 $qpid 2>/dev/null || break; nap 0.5; done
	kill -0 $qpid 2>/dev/null && : >"$logs/$name.killed"
	kill -KILL $qpid 2>/dev/null
	wait $qpid 2>/dev/null
	sed 's/^/# qemu: /' "$logs/$name.qemu"
	grep -a "^VMQT: " "$log" | sed 's/^/# guest: /'
}

n=0 pass=0 fail=0
result() {	# ok|fail CASE [why...]
	local why="${*:3}"
	n=$((n + 1))
	if [ "$1" = ok ]; then
		echo "ok $n $2"
		pass=$((pass + 1))
	else
		echo "not ok $n $2${why:+ # $why}"
		fail=$((fail + 1))
	fi
}

# CASE: boot BOOT's worker log lists exactly WANT threads, and each woke
# at least 5 times between its marks M1 and M2 (default "io" and "iodone",
# around the guest's first fio job).  Context switches, not CPU ticks: a
# tick is sampled, and a worker's share of a short job may cost none.
workers_busy() {	# CASE BOOT WANT [M1 M2]
	local log=$logs/$2.workers m1=$logs/$2.mark-${4:-io} m2=$logs/$2.mark-${5:-iodone}
	local threads busy

	sed 's/^/# worker: /' "$log"
	threads=$(wc -l <"$log")
	cat "$m1" "$m2" 2>/dev/null | awk '{ d[$1] = $3 - d[$1] } END {
		for (w in d) print w, d[w] }' >"$log.woke"
	sed 's/^/# woke between the marks: /' "$log.woke"
	busy=$(awk '$2 >= 5' "$log.woke" | wc -l)
	if [ "$threads" = "$3" ] && [ "$busy" = "$3" ]; then
		result ok "$1"
	else
		result fail "$1" \
			"want $3 worker thread(s) that woke for I/O, saw $threads ($busy woke)"
	fi
}
# worker_map_pins: boot mq4's queue -> thread map (mq4.map) names four
# distinct worker threads of that QEMU; each was pinned (mq4.pinned); while
# queue N alone read, the worker that woke most was the one the map names
# for queue N, and it ran on the CPU it was pinned to.
worker_map_pins() {
	local q tid cpu busiest ran why=
	sed 's/^/# x-query-vhost-workers: /' "$logs/mq4.map.json" 2>/dev/null
	if [ "$(awk '{ print $2 }' "$logs/mq4.map" 2>/dev/null | sort -u | grep -c '^[1-9]')" != 4 ]; then
		result fail worker_map_pins "want 4 queues on 4 distinct threads in the map"
		return
	fi
	[ "$(wc -l <"$logs/mq4.pinned")" = 4 ] || why="not every worker could be pinned"
	while read -r q tid cpu; do
		busiest=$(cat "$logs/mq4.mark-q$q" "$logs/mq4.mark-q${q}done" 2>/dev/null |
			awk '{ d[$1] = $3 - d[$1] } END { for (w in d) print d[w], w }' |
			sort -n | tail -n 1)
		ran=$(cat "$logs/mq4.ran-$q" 2>/dev/null)
		echo "# queue $q: map says thread $tid, pinned to CPU $cpu; woke most: ${busiest:-none}; last ran on CPU ${ran:-?}"
		[ "${busiest##*:}" = "$tid" ] || why="${why:+$why; }queue $q's reads woke ${busiest##*:}, not $tid"
		[ "$ran" = "$cpu" ] || why="${why:+$why; }queue $q's worker ran on CPU ${ran:-?}, not $cpu"
	done <"$logs/mq4.pinned"
	if [ -z "$why" ]; then
		result ok worker_map_pins
	else
		result fail worker_map_pins "$why"
	fi
}
# The console ends its lines with CR LF.
guest_ok() { tr -d '\r' <"$logs/$1.log" | grep -aq "^VMQT: ok $2\$"; }
# A splat in this kernel's log after its first $1 lines.
splat_since() { dmesg | tail -n +$(($1 + 1)) | grep -qE "BUG|WARNING|Oops|KASAN"; }

# qmp SOCKET COMMAND ARGS-JSON: one QMP command; prints the answer.
# Other scripts in $work import it for connect() and cmd().
cat >"$work/qmp.py" <<'PY'
import json, socket, sys
def connect(path):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    f = s.makefile('rw')
    f.readline()
    cmd(f, 'qmp_capabilities')
    return f
def cmd(f, name, args=None):
    c = {'execute': name}
    if args:
        c['arguments'] = args
    f.write(json.dumps(c) + '\n')
    f.flush()
    while True:
        r = json.loads(f.readline())
        if 'return' in r or 'error' in r:
            return r
if __name__ == '__main__':
    f = connect(sys.argv[1])
    print(json.dumps(cmd(f, sys.argv[2], json.loads(sys.argv[3]))))
PY
qmp() { timeout 60 python3 "$work/qmp.py" "$@" 2>&1; }

dmesg_before=$(dmesg | wc -l)
# nullb_node NAME: the -blockdev arguments of a node NAME on /dev/nullb0.
nullb_node() {
	echo "-blockdev driver=host_device,node-name=$1,filename=/dev/nullb0,cache.direct=on"
}

if want backends; then
	# No marker from an earlier run: the guest's first boot must see none.
	sectors=$(blockdev --getsz /dev/nullb0)
	dd if=/dev/zero of=/dev/nullb0 bs=512 seek=$((sectors - 8)) count=8 \
		oflag=direct 2>/dev/null
	echo "# null_blk, 2 queues, per-queue workers (the default), worker_pool=1"
	# With worker_pool=1 the kernel puts every ring QEMU did not bind on the
	# device's one worker: a second busy worker can only come from QEMU's
	# workers=per-queue.
	set_pool 1 ||
		echo "# no vhost_blk.worker_pool here: per-queue workers are the kernel's default"
	boot nullb io-reboot "" $(nullb_node nb) -device vhost-blk-pci,drive=nb,num-queues=2
	if guest_ok nullb queues_2 && guest_ok nullb fio_verify; then
		result ok nullb_two_queues_fio_verify
	else
		result fail nullb_two_queues_fio_verify "no /dev/vda with 2 queues, or fio failed"
	fi
	workers_busy nullb_worker_per_queue nullb 2
	if guest_ok nullb reboot_verify && guest_ok nullb reboot_io; then
		result ok nullb_reboot_then_io
	else
		result fail nullb_reboot_then_io "no I/O after the guest's reboot"
	fi
	if guest_ok nullb rebind_one_queue; then
		result ok nullb_rebind_fewer_queues_io
	else
		result fail nullb_rebind_fewer_queues_io \
			"no I/O after the driver came back with 1 queue of 2"
	fi

	# Files through the page cache: this machine's /tmp (tmpfs or an overlay
	# on it) has no O_DIRECT.
	echo "# 64 MiB files, 2 queues: fio on one, the other shrinks under the guest"
	echo "# a third on ext4 over a loop device with 4K sectors, direct=on"
	truncate -s 64M "$work/disk.img" "$work/disk2.img" "$work/4k.fs"
	mkdir -p "$work/mnt4k"
	dev4k=()
	if loopdev=$(losetup -f --show -b 4096 "$work/4k.fs") &&
	   mkfs.ext4 -q -b 4096 "$loopdev" && mount "$loopdev" "$work/mnt4k" &&
	   truncate -s 16M "$work/mnt4k/disk3.img"; then
		dev4k=(-blockdev "driver=file,node-name=d3,filename=$work/mnt4k/disk3.img,cache.direct=on"
		       -device "vhost-blk-pci,drive=d3,num-queues=1,logical_block_size=4096,physical_block_size=4096")
	else
		echo "# cannot make ext4 on a 4K-sector loop device here"
	fi
	# lockrun NAME BLOCKDEV-ARGS [DEVICE-ARGS]: a second QEMU with the node
	# and the device on it, stopped (-S), told to quit at once: exits 0 once
	# the device is realized.
	lockrun() {
		echo quit | timeout 120 "$qemu" -accel tcg,tb-size=64 -M pc -nodefaults \
			-display none -S -monitor stdio "${fwargs[@]}" \
			-blockdev "node-name=n,$2" -device "vhost-blk-pci,drive=n${3:+,$3}" \
			>"$logs/lock-$1.qemu" 2>&1
	}
	# While the guest writes disk.img: another writer and a reader are refused
	# with the block layer's lock error, locking=off lets a third start.
	lockcheck() {
		local f=driver=file,filename=$work/disk.img,cache.direct=off
		lock_rw=0 lock_ro=0 lock_off=0
		if ! lockrun rw "$f"; then
			grep -q 'Failed to get .*lock' "$logs/lock-rw.qemu" && lock_rw=1
		fi
		if ! lockrun ro "$f,read-only=on"; then
			grep -q 'Failed to get .*lock' "$logs/lock-ro.qemu" && lock_ro=1
		fi
		lockrun off "$f,locking=off" && lock_off=1
		for f in rw ro off; do
			sed -e 's/\x1b\[[0-9;]*[A-Za-z]//g' -e "s/^/# lock-$f: /" \
				"$logs/lock-$f.qemu"
		done
	}
	files_hook() {
		lockcheck
		truncate -s 32M "$work/disk2.img"
	}
	# block_resize to 48 MiB: the node's file grows, the guest is told.
	# query-block first: the disk is the block layer's.
	on_mark_resize() {
		qmp "$work/file.qmp" query-block '{}' >"$logs/file.query-block"
		qmp "$work/file.qmp" block_resize '{"node-name": "d2", "size": 50331648}' |
			sed 's/^/# qmp: /'
	}
	# Without logical_block_size=4096 QEMU refuses the O_DIRECT file on
	# 4K sectors, naming the size it needs.
	lbs_refused=0
	if [ ${#dev4k[@]} != 0 ]; then
		! lockrun lbs "driver=file,filename=$work/mnt4k/disk3.img,cache.direct=on" &&
			grep -q "O_DIRECT requests of 4096 bytes" "$logs/lock-lbs.qemu" &&
			lbs_refused=1
		sed -e 's/\x1b\[[0-9;]*[A-Za-z]//g' -e "s/^/# lbs: /" "$logs/lock-lbs.qemu"
	fi
	# A format node that maps the file (raw with an offset) is refused,
	# naming its driver: the kernel would bypass it.  A raw node passing
	# the whole file through (-drive format=raw) is served.
	fmt_refused=0
	! lockrun fmt "driver=raw,offset=4096,file.driver=file,file.filename=$work/disk.img" &&
		grep -q "node 'n' is a 'raw' node" "$logs/lock-fmt.qemu" &&
		lockrun raw "driver=raw,file.driver=file,file.filename=$work/disk.img" &&
		fmt_refused=1
	sed -e 's/\x1b\[[0-9;]*[A-Za-z]//g' -e "s/^/# fmt: /" "$logs/lock-fmt.qemu" \
		"$logs/lock-raw.qemu"
	lock_rw=0 lock_ro=0 lock_off=0
	disk1="vhost-blk-pci,drive=d1,num-queues=2,poll-us=1000,serial=vmqt-file0"
	boot file files files_hook \
		-blockdev "driver=file,node-name=d1,filename=$work/disk.img,cache.direct=off" \
		-device "$disk1" \
		-blockdev "driver=file,node-name=d2,filename=$work/disk2.img,cache.direct=off" \
		-device "vhost-blk-pci,drive=d2,num-queues=2,id=disk2" \
		"${dev4k[@]}" -qmp "unix:$work/file.qmp,server=on,wait=off"
	if guest_ok file fio_verify; then
		result ok file_fio_verify
	else
		result fail file_fio_verify "fio failed on the file"
	fi
	if guest_ok file shrunk_read_eio && ! splat_since "$dmesg_before"; then
		result ok file_shrunk_read_eio
	else
		result fail file_shrunk_read_eio \
			"no EIO in the guest, a failed read before the shrink, or a splat here"
	fi
	# disk2's BlockBackend, on node d2, attached to the device.
	if python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))["return"]
sys.exit(not any(b.get("qdev", "").startswith("/machine/peripheral/disk2/") and
                 b.get("inserted", {}).get("node-name") == "d2" for b in r))
' "$logs/file.query-block" 2>/dev/null; then
		result ok file_query_block_shows_disk
	else
		result fail file_query_block_shows_disk \
			"query-block has no disk2 on node d2: $(head -c 300 "$logs/file.query-block" 2>/dev/null)"
	fi
	if guest_ok file resize_seen; then
		result ok file_block_resize_seen
	else
		result fail file_block_resize_seen \
			"the guest did not see 48 MiB after block_resize"
	fi
	if guest_ok nullb serial_empty && guest_ok file serial_given; then
		result ok serial_empty_unless_given
	else
		result fail serial_empty_unless_given \
			"GET_ID not empty without serial=, or not the serial= given"
	fi
	if [ $fmt_refused = 1 ]; then
		result ok format_node_refused
	else
		result fail format_node_refused \
			"a raw node with an offset was not refused by name, or a plain one was"
	fi
	if [ $lock_rw = 1 ] && [ $lock_ro = 1 ] && [ $lock_off = 1 ]; then
		result ok file_image_locked
	else
		result fail file_image_locked \
			"second writer refused: $lock_rw, reader refused: $lock_ro," \
			"locking=off started: $lock_off (want 1 1 1)"
	fi
	# 500 reads with busy polling cost the worker about 1 ms each (it polls
	# after every completion); without it, a small part of that.
	# Or, where the poller is preempted (mainline's PREEMPT_LAZY: the nested
	# guest's vCPU threads are always runnable beside it) and so burns less,
	# it shows in wake-ups: a worker that finds the next request while it
	# polls does not sleep for it, so the polling device's workers wake for
	# at most half of the reads, the other's for every one.
	polled=$(mark_ticks file vda vdb) unpolled=$(mark_ticks file vdb end)
	pwoke=$(mark_ticks file vda vdb 3) uwoke=$(mark_ticks file vdb end 3)
	echo "# worker ticks for 500 QD1 reads: poll-us=1000 $polled, none $unpolled;" \
		"wake-ups: $pwoke, $uwoke"
	if [ "$polled" -lt 0 ] || [ "$unpolled" -lt 0 ]; then
		result fail file_poll_us_busy_polls "no CPU times at the guest's marks"
	elif [ "$polled" -ge $((2 * unpolled)) ] && [ $((polled - unpolled)) -ge 10 ]; then
		result ok file_poll_us_busy_polls
	elif [ "$uwoke" -ge 500 ] && [ $((2 * pwoke)) -le "$uwoke" ]; then
		result ok file_poll_us_busy_polls
	else
		result fail file_poll_us_busy_polls \
			"the polling device's workers took $polled ticks and woke $pwoke times," \
			"the other's $unpolled and $uwoke"
	fi
	if [ ${#dev4k[@]} = 0 ]; then
		result fail file_4k_direct_blk_size "no 4K-sector ext4 to put the file on"
	elif [ $lbs_refused = 0 ]; then
		result fail file_4k_direct_blk_size \
			"QEMU took the O_DIRECT file on 4K sectors with 512-byte blocks"
	elif guest_ok file dio_blk_size; then
		result ok file_4k_direct_blk_size
	else
		result fail file_4k_direct_blk_size \
			"the guest did not get 4K blocks, or 4K direct I/O failed"
	fi
	umount "$work/mnt4k" 2>/dev/null
	[ -n "$loopdev" ] && losetup -d "$loopdev" 2>/dev/null
	loopdev=
fi

if want viommu; then
	echo "# null_blk behind intel-iommu: VIRTIO_F_ACCESS_PLATFORM, the device IOTLB"
	echo "# workers=shared, worker_pool=0: one worker only if QEMU asks for it"
	dmesg_before=$(dmesg | wc -l)
	vtd_dev=disable-legacy=on,iommu_platform=on,workers=shared
	kargs="intel_iommu=on"
	set_pool 0
	# At "mark stopcont": 200 stops and continues, the guest running
	# 50 ms between them, from one Python process (a fork costs seconds).
	cat >"$work/stopcont.py" <<'PY'
import sys, time
from qmp import connect, cmd
f = connect(sys.argv[1])
t0 = time.monotonic()
for i in range(200):
    for c in ('stop', 'cont'):
        r = cmd(f, c)
        if 'return' not in r:
            print('cycle %d: %s: %s' % (i, c, r))
            sys.exit(1)
    time.sleep(0.05)
print('200 stop/cont cycles in %.1f s' % (time.monotonic() - t0))
PY
	on_mark_stopcont() {
		timeout 900 python3 "$work/stopcont.py" "$work/vtd.qmp" >"$logs/vtd.stopcont" 2>&1
		sed 's/^/# stopcont: /' "$logs/vtd.stopcont"
	}
	boot vtd viommu "" -M q35 -device intel-iommu,intremap=off \
		$(nullb_node nb) -device vhost-blk-pci,drive=nb,num-queues=2,$vtd_dev \
		-qmp "unix:$work/vtd.qmp,server=on,wait=off"
	kargs="acpi=off"
	if ! guest_ok vtd translated; then
		result fail viommu_access_platform_fio_verify \
			"ACCESS_PLATFORM not negotiated, or the guest's DMA not translated"
	elif ! guest_ok vtd fio_verify; then
		result fail viommu_access_platform_fio_verify "fio failed behind the vIOMMU"
	elif splat_since "$dmesg_before"; then
		result fail viommu_access_platform_fio_verify "a splat in this kernel's log"
	else
		result ok viommu_access_platform_fio_verify
	fi
	workers_busy viommu_workers_shared_one_thread vtd 1
	if ! guest_ok vtd iotlb_overflow; then
		result fail viommu_iotlb_overflow_then_stop \
			"fio of 4096 pages in flight failed behind the vIOMMU"
	elif [ -e "$logs/vtd.killed" ]; then
		result fail viommu_iotlb_overflow_then_stop \
			"QEMU did not stop within 20 s of SIGTERM" \
			"(a ring waiting on an IOTLB miss?)"
	elif splat_since "$dmesg_before"; then
		result fail viommu_iotlb_overflow_then_stop "a splat in this kernel's log"
	else
		result ok viommu_iotlb_overflow_then_stop
	fi
	if ! grep -q "^200 stop/cont cycles" "$logs/vtd.stopcont" 2>/dev/null; then
		result fail viommu_stop_cont_200_loses_nothing \
			"the 200 stop/cont cycles did not all run: $(tail -n 2 "$logs/vtd.stopcont" 2>/dev/null)"
	elif ! guest_ok vtd stopcont; then
		result fail viommu_stop_cont_200_loses_nothing \
			"a fio run across the stops failed or never ended (a request lost)"
	else
		result ok viommu_stop_cont_200_loses_nothing
	fi
	if guest_ok vtd rebind_one_queue; then
		result ok viommu_rebind_fewer_queues_io
	else
		result fail viommu_rebind_fewer_queues_io \
			"after a rebind with one queue the device did not serve fio"
	fi
fi

if want mq; then
	echo "# 4 vCPUs, the default num-queues, worker_pool=1"
	set_pool 1
	smp=4
	# At "mark map": the map from QMP, "QUEUE TID" in mq4.map, and each
	# queue's worker pinned to CPU QUEUE % CPUs of this machine.  At
	# "mark qNdone": the CPU queue N's worker last ran on (field 39 of
	# its stat) in mq4.ran-N.
	# One Python process for all of it: a fork costs this machine
	# seconds, and the guest waits only 10 s before its reads.
	cat >"$work/pin.py" <<'PY'
import json, os, sys
from qmp import connect, cmd
r = cmd(connect(sys.argv[1]), 'x-query-vhost-workers')
logs = sys.argv[2]
with open(logs + '/mq4.map.json', 'w') as out:
    out.write(json.dumps(r) + '\n')
ncpu = os.cpu_count()
with open(logs + '/mq4.map', 'w') as m, open(logs + '/mq4.pinned', 'w') as p:
    for w in r.get('return', []):
        m.write('%d %d\n' % (w['queue'], w['thread-id']))
        cpu = w['queue'] % ncpu
        try:
            os.sched_setaffinity(w['thread-id'], {cpu})
        except OSError as e:
            print('pin %s: %s' % (w, e), file=sys.stderr)
            continue
        p.write('%d %d %d\n' % (w['queue'], w['thread-id'], cpu))
PY
	on_mark_map() {
		timeout 60 python3 "$work/pin.py" "$work/mq.qmp" "$logs" 2>&1 |
			sed 's/^/# pin: /'
	}
	for q in 0 1 2 3; do
		eval "on_mark_q${q}done() { local st tid; read -r _ tid <<<\"\$(grep '^$q ' \"\$logs/mq4.map\")\";
			read -r st 2>/dev/null <\"/proc/\$qpid/task/\$tid/stat\" &&
			read -ra st <<<\"\${st##*) }\" && echo \"\${st[36]}\" >\"\$logs/mq4.ran-$q\"; }"
	done
	boot mq4 mq "" $(nullb_node nb) -device vhost-blk-pci,drive=nb \
		-qmp "unix:$work/mq.qmp,server=on,wait=off"
	smp=2
	if guest_ok mq4 queues_4 && guest_ok mq4 fio_verify; then
		result ok default_num_queues_per_vcpu
	else
		result fail default_num_queues_per_vcpu "no /dev/vda with 4 queues, or fio failed"
	fi
	workers_busy default_num_queues_worker_per_queue mq4 4
	worker_map_pins
fi

if want migrate; then
	echo "# live migration: a file node shared by two QEMUs on this machine"
	truncate -s 64M "$work/mig.img"
	mig=(-blockdev "driver=file,node-name=m0,filename=$work/mig.img,cache.direct=off"
	     -device vhost-blk-pci,drive=m0,num-queues=2)
	start_qemu mdst migrate "${mig[@]}" -incoming "unix:$work/mig.sock" \
		-qmp "unix:$work/mdst.qmp,server=on,wait=off"
	dpid=$qpid
	# A destination that cannot take the guest: no vhost-blk-pci, so the
	# device's state has nowhere to go and its load fails, after the
	# source has stopped and inactivated the node.
	start_qemu mbad migrate -incoming "unix:$work/bad.sock"
	bpid=$qpid
	# The source traces the pages its vhost devices' dirty logs marked
	# (QEMU patch 0012): what the device wrote into guest memory.
	start_qemu msrc migrate "${mig[@]}" -qmp "unix:$work/msrc.qmp,server=on,wait=off" \
		-trace vhost_dev_sync_region
	spid=$qpid
	# dev_pages FROM: the pages those lines of msrc.qemu from line FROM on
	# count.
	dev_pages() {
		tail -n +"$1" "$logs/msrc.qemu" |
			sed -n 's/.*vhost_dev_sync_region .*: \([0-9]*\) pages dirtied.*/\1/p' |
			awk '{ s += $1 } END { print s + 0 }'
	}
	# migrate_to SOCKET: migrate the source there; its final status.
	migrate_to() {
		local st=none end=$((SECONDS + 1200))
		qmp "$work/msrc.qmp" migrate "{\"uri\": \"unix:$1\"}" | sed 's/^/# qmp: /' >&2
		# Every 3 s: a QMP client is a Python process, costly here.
		while [ $SECONDS -lt $end ]; do
			nap 3
			st=$(qmp "$work/msrc.qmp" query-migrate '{}' |
				python3 -c 'import json, sys; print(json.load(sys.stdin)["return"].get("status", "none"))' 2>/dev/null)
			case $st in completed|failed|cancelled) break ;; esac
		done
		echo "$st"
	}
	runstate() {
		qmp "$work/msrc.qmp" query-status '{}' |
			python3 -c 'import json, sys; print(json.load(sys.stdin)["return"]["status"])' 2>/dev/null
	}
	mig_status=none bad_cont=0 dev_dirtied=0
	if wait_console msrc "VMQT: mark migrate" 1200; then
		# TCG dirties memory slowly but copies it slowly too.
		qmp "$work/msrc.qmp" migrate-set-parameters '{"downtime-limit": 2000}' >/dev/null
		# First to the destination that fails: the source stops
		# (postmigrate), then goes on with cont, the guest's loop with
		# it, its node active again and the device started.
		bad_status=$(migrate_to "$work/bad.sock")
		before=$(runstate)
		qmp "$work/msrc.qmp" cont '{}' | sed 's/^/# qmp: /'
		after=$(runstate)
		echo "# failed migration: $bad_status, the source $before, after cont $after"
		[ "$before" != running ] && [ "$after" = running ] && bad_cont=1
		from=$(($(wc -l <"$logs/msrc.qemu") + 1))
		mig_status=$(migrate_to "$work/mig.sock")
		echo "# migration: $mig_status at $(date +%T)"
		dev_dirtied=$(dev_pages "$from")
		echo "# pages the device dirtied during the migration (vhost's log): $dev_dirtied"
		# The figures: downtime, and the RAM sent again because it was
		# dirtied meanwhile, the device's writes into guest memory among it.
		qmp "$work/msrc.qmp" query-migrate '{}' | python3 -c '
import json, sys
r = json.load(sys.stdin)["return"]
ram = r.get("ram", {})
print("# migration figures: downtime %s ms, total %s ms, setup %s ms; RAM: %s pages sent, "
      "%s dirty syncs, %s MiB transferred, dirty rate %s pages/s" % (
      r.get("downtime"), r.get("total-time"), r.get("setup-time"), ram.get("normal"),
      ram.get("dirty-sync-count"), ram.get("transferred", 0) >> 20,
      ram.get("dirty-pages-rate")))' 2>/dev/null
		[ "$mig_status" = completed ] &&
			qmp "$work/mdst.qmp" block_resize '{"node-name": "m0", "size": 100663296}' |
				sed 's/^/# qmp: /'
		wait_console mdst "VMQT: done" 1200
	fi
	for p in $spid $dpid $bpid; do kill -TERM "$p" 2>/dev/null; done
	for i in $(seq 1 40); do
		kill -0 $spid 2>/dev/null || kill -0 $dpid 2>/dev/null || break
		nap 0.5
	done
	kill -KILL $spid $dpid $bpid 2>/dev/null
	wait $spid $dpid $bpid 2>/dev/null
	sed "s/^/# mbad qemu: /" "$logs/mbad.qemu"
	for q in msrc mdst; do
		grep -v "vhost_dev_sync_region " "$logs/$q.qemu" | sed "s/^/# $q qemu: /"
		tr -d '\r' <"$logs/$q.log" | grep -a "^VMQT: " | sed "s/^/# $q guest: /"
	done
	if [ $bad_cont = 1 ]; then
		result ok migrate_failed_then_cont
	else
		result fail migrate_failed_then_cont \
			"the source did not stop for the failed migration or run after cont"
	fi
	if [ "$mig_status" != completed ]; then
		result fail migrate_reads_survive "the migration ended $mig_status"
	elif [ "$dev_dirtied" = 0 ]; then
		result fail migrate_reads_survive \
			"the device's dirty log marked no page while the guest read"
	elif guest_ok mdst migrate_verify; then
		result ok migrate_reads_survive
	else
		result fail migrate_reads_survive \
			"the guest's reads or writes on the destination failed, or it never saw the new size"
	fi
fi

if want net; then
	echo "# tap with vhost=on, vhost-workers=per-ring"
	tap=vmqtap$$
	tapup() { busybox ip addr add 10.99.0.1/24 dev $tap && busybox ip link set $tap up; }
	netdev=tap,id=n0,ifname=$tap,script=no,downscript=no
	boot tap net tapup -netdev "$netdev,vhost=on,vhost-workers=per-ring" \
		-device virtio-net-pci,netdev=n0,romfile=
	if guest_ok tap ping; then
		workers_busy tap_per_ring_workers_ping tap 2 pings pinged
	else
		result fail tap_per_ring_workers_ping "no ping over the tap"
	fi
fi

echo "# Totals: pass:$pass fail:$fail xfail:0 xpass:0 skip:0 error:0"
[ $fail = 0 ]
