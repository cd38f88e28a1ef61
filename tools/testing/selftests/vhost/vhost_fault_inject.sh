#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# vhost_blk_test and vhost_worker_test again, with slab allocation failures
# (failslab) and block I/O errors on /dev/nullb0 (fail_make_request)
# injected at a fixed probability and interval into the test processes and
# into the vhost worker kthreads.  A background loop marks both
# (/proc/<pid>/make-it-fail, task-filter=Y) as they appear; a test's forked
# cases inherit the mark, and vhost-blk's work items that serve a ring's
# requests off its worker (page-cache I/O that would wait, FLUSH, DISCARD,
# WRITE_ZEROES) carry the worker's.  6.1's fault injection has no seed: the interval
# makes it mostly repeatable, the probability spreads it.
#
# The marked processes run chrooted in a tmpfs holding copies of the test
# binaries, sh and mkfs.ext4 with their libraries, with /dev, /proc and /sys
# bound in (a mount namespace of their own): an injected failure then never
# lands in the filesystem the system runs from (a VM's 9p root does not
# survive one), only in what the tests do.
#
# The tests' own verdicts under injection are informational.  The script
# passes when no binary hangs (timeout), none dies from a signal its harness
# did not send, no test case dies from an unexpected signal, faults were
# injected, and the kernel log gained no oops, BUG, WARNING, KASAN report,
# lockdep report or hung task.  Every knob is restored at the end.
# Exit 0 pass, 1 fail, 4 skip (kselftest).
#
# Environment: FAULT_SLAB_PROBABILITY, FAULT_SLAB_INTERVAL,
# FAULT_IO_PROBABILITY, FAULT_IO_INTERVAL (percent, every Nth call),
# FAULT_TIMEOUT (seconds per binary).
set -u

dir=$(dirname "$(readlink -f "$0")")
# "make run_tests" with a separate output directory runs this script from
# the source tree; the binaries are in lib.mk's OUTPUT, which the Makefile
# exports.
[ -x "$dir/vhost_blk_test" ] || [ -z "${OUTPUT:-}" ] || dir=$OUTPUT
dbg=/sys/kernel/debug
nullb=/sys/block/nullb0/make-it-fail
bins="vhost_blk_test vhost_worker_test"
slab_prob=${FAULT_SLAB_PROBABILITY:-20}
slab_int=${FAULT_SLAB_INTERVAL:-10}
io_prob=${FAULT_IO_PROBABILITY:-50}
io_int=${FAULT_IO_INTERVAL:-5}
tmo=${FAULT_TIMEOUT:-180}
# "times" counts down from here: the difference is what was injected.
budget=1000000000
# What the marker loop marks, by comm: vhost workers, the test binaries.
marked='^(vhost-[0-9]|vhost_blk_test|vhost_worker_te)'
bad='BUG:|kernel BUG|WARNING:|KASAN:|UBSAN:|general protection|possible circular'
bad="$bad|possible recursive|INFO: task|Oops|rcu.*stall"
marker="vhost_fault_inject: start $$ $RANDOM"
tmp=
root=
marker_pid=
saved=()
n=0
fails=0

ok() { n=$((n + 1)); echo "ok $n $*"; }
not_ok() { n=$((n + 1)); fails=$((fails + 1)); echo "not ok $n $*"; }
skip_all() {
	echo "1..0 # SKIP $*"
	exit 4
}

# Remember a knob's value, then set it.
knob() {
	[ -e "$1" ] || return 1
	saved+=("$1=$(cat "$1")")
	echo "$2" >"$1"
}

restore() {
	local i f

	if [ -n "$marker_pid" ]; then
		# utime + stime, fields 14 and 15 of its stat, in clock ticks.
		read -ra st 2>/dev/null </proc/$marker_pid/stat &&
			echo "# marker loop CPU: $(( (st[13] + st[14]) / $(getconf CLK_TCK) )) s"
		kill "$marker_pid" 2>/dev/null
		wait "$marker_pid" 2>/dev/null
	fi
	marker_pid=
	# Probabilities first, so that nothing fails while the rest goes back.
	for f in "$dbg/failslab/probability" "$dbg/fail_make_request/probability"; do
		for i in "${saved[@]}"; do
			[ "${i%%=*}" = "$f" ] && echo "${i#*=}" >"$f"
		done
	done
	for ((i = ${#saved[@]} - 1; i >= 0; i--)); do
		echo "${saved[i]#*=}" >"${saved[i]%%=*}" 2>/dev/null
	done
	saved=()
	[ -n "$root" ] && umount "$root" 2>/dev/null
	[ -n "$tmp" ] && rm -rf "$tmp"
}
trap restore EXIT

# Mark the vhost worker kthreads and the test processes as they appear.
# Builtins only (a scan of /proc per fork is slow in an emulated guest),
# reading the comm of new pids only, those above the highest seen before,
# once.  A test binary's own process (timeout's child) stays unmarked and
# its forked cases are marked: marked, the binary passed the mark to
# every case from its fork on, and nearly all failed in their set-up.
# A pid at or below the highest seen that was not there in the pass
# before (their count grew) means the pid counter wrapped (a debug VM's
# pid_max is 32768, and QEMU's qtests before this script took the rest):
# all pids are read again.  A pass whose /proc/loadavg names the same
# last pid as the pass before (read before that pass's walk) has nothing
# new to read and skips the walk: the walk is what costs.  A FIFO nobody
# writes to paces the loop, ten passes a second: at fifty, it took half a
# vCPU of the debug VM (73 of 144 s on 6.1).
mark_loop() {
	local d p c st pc sfd last=0 top low prev=0 all lp seen=
	local -a f

	mkfifo "$tmp/pace" && exec {sfd}<>"$tmp/pace" || return
	while :; do
		read -r _ _ _ _ lp </proc/loadavg
		if [ "$lp" = "$seen" ]; then
			read -r -t 0.1 -u "$sfd"
			continue
		fi
		seen=$lp
		top=0 low=0 all=0
		for d in /proc/[0-9]*; do
			p=${d#/proc/}
			all=$((all + 1))
			((p > top)) && top=$p
			((p > last)) || { low=$((low + 1)); continue; }
			c=
			read -r c 2>/dev/null <"$d/comm"
			[[ $c =~ $marked ]] || continue
			if [[ $c != vhost-* ]]; then
				# Field 4, the parent: 2nd after the comm.
				read -r st 2>/dev/null <"$d/stat" || continue
				read -ra f <<<"${st##*) }"
				pc=
				read -r pc 2>/dev/null <"/proc/${f[1]}/comm"
				[ "$pc" = timeout ] && continue
			fi
			echo 1 2>/dev/null >"$d/make-it-fail"
		done
		if ((low > prev)); then
			last=0 prev=0
		else
			((top > last)) && last=$top
			prev=$all
		fi
		read -r -t 0.1 -u "$sfd"
	done
}

injected() {
	echo $((budget - $(cat "$dbg/$1/times")))
}

# An executable and the libraries it loads, into the chroot.
copy_elf() {
	local lib

	cp -L "$1" "$root/bin/${2:-$(basename "$1")}" || return 1
	for lib in $(ldd "$1" | grep -o '/[^ ]*'); do
		cp -L --parents "$lib" "$root" || return 1
	done
}

make_root() {
	local b

	mkdir "$root" && mount -t tmpfs -o mode=755 vhost_fault_inject "$root" || return 1
	mkdir -p "$root"/{bin,etc,tmp,dev,proc,sys,usr} || return 1
	chmod 1777 "$root/tmp"
	ln -s bin "$root/sbin"
	ln -s ../bin "$root/usr/bin"
	ln -s ../bin "$root/usr/sbin"
	ln -s /proc/self/mounts "$root/etc/mtab"
	[ -e /etc/mke2fs.conf ] && cp /etc/mke2fs.conf "$root/etc/"
	copy_elf "$(readlink -f /bin/sh)" sh || return 1
	copy_elf "$(command -v mkfs.ext4)" mkfs.ext4 ||
		echo "# no mkfs.ext4: its variants will skip"
	for b in $bins; do
		copy_elf "$dir/$b" || return 1
	done
	# Entered by unshare -m: the binds stay in that namespace.
	cat >"$tmp/enter" <<-'EOF'
	#!/bin/bash
	mount --rbind /dev "$1/dev" && mount --rbind /proc "$1/proc" &&
		mount --rbind /sys "$1/sys" && exec chroot "$1" "/bin/$2"
	exit 125
	EOF
	chmod 755 "$tmp/enter"
}

echo "TAP version 13"
[ "$(id -u)" = 0 ] || skip_all "needs root"
mountpoint -q $dbg || mount -t debugfs none $dbg 2>/dev/null
[ -d $dbg/failslab ] ||
	skip_all "no $dbg/failslab (CONFIG_FAILSLAB, CONFIG_FAULT_INJECTION_DEBUG_FS)"
[ -d $dbg/fail_make_request ] || skip_all "no $dbg/fail_make_request (CONFIG_FAIL_MAKE_REQUEST)"
[ -e /proc/self/make-it-fail ] || skip_all "no /proc/<pid>/make-it-fail (CONFIG_FAULT_INJECTION)"
for b in $bins; do
	[ -x "$dir/$b" ] || skip_all "$dir/$b not built"
done
for b in unshare chroot setsid timeout ldd; do
	command -v $b >/dev/null || skip_all "$b not installed"
done
tmp=$(mktemp -d /tmp/vhost_fault_inject.XXXXXX) || skip_all "mktemp failed"
root=$tmp/root
make_root || skip_all "cannot build the chroot in $root"
echo "1..4"

for t in failslab fail_make_request; do
	knob $dbg/$t/probability 0
	knob $dbg/$t/task-filter Y
	knob $dbg/$t/times $budget
	knob $dbg/$t/space 0
	knob $dbg/$t/verbose 1
done
knob $dbg/failslab/interval "$slab_int"
# GFP_KERNEL allocations too: those are what vhost makes.
knob $dbg/failslab/ignore-gfp-wait N
knob $dbg/fail_make_request/interval "$io_int"
echo "# failslab: probability $slab_prob%, interval $slab_int, GFP_KERNEL included"
if [ -e $nullb ]; then
	knob $nullb 1
	echo "# fail_make_request on nullb0: probability $io_prob%, interval $io_int"
else
	echo "# no nullb0: no I/O errors injected"
fi
echo "$marker" >/dev/kmsg
mark_loop &
marker_pid=$!
echo "$slab_prob" >$dbg/failslab/probability
[ -e $nullb ] && echo "$io_prob" >$dbg/fail_make_request/probability

for b in $bins; do
	log=$tmp/$b.log
	start=$SECONDS
	s0=$(injected failslab)
	i0=$(injected fail_make_request)
	# A session of its own: whatever is left of it after a timeout is
	# found and killed.
	setsid -w bash -c 'echo $$ >"$0"; exec timeout -k 10 "$1" unshare -m "$2" "$3" "$4"' \
		"$tmp/sid" "$tmo" "$tmp/enter" "$root" "$b" >"$log" 2>&1 &
	wait $!
	rc=$?
	sid=$(cat "$tmp/sid" 2>/dev/null)
	# A test case's child killed with I/O in flight may still be
	# exiting (closing its vhost fd waits for that I/O): give it time,
	# and call it left behind only if it stays.
	left=
	for ((w = 0; w < 30; w++)); do
		[ -n "$sid" ] && left=$(ps -o pid= -s "$sid" 2>/dev/null)
		[ -z "$left" ] && break
		sleep 1
	done
	for p in $left; do
		ps -o pid=,stat=,wchan:32=,comm= -p "$p" | sed 's/^/# left: /'
		sed 's/^/# stack: /' "/proc/$p/stack" 2>/dev/null
		kill -9 "$p" 2>/dev/null
	done
	grep -E '^(ok|not ok|#.*(terminated|timeout|signal))' "$log" | sed 's/^/# /'
	pass=$(grep -c '^ok ' "$log")
	failed=$(grep -c '^not ok ' "$log")
	sigs=$(grep 'terminated unexpectedly by signal' "$log")
	what="$b under fault injection: exit $rc after $((SECONDS - start)) s,"
	what="$what $pass ok / $failed not ok (informational),"
	what="$what $(($(injected failslab) - s0)) slab,"
	what="$what $(($(injected fail_make_request) - i0)) I/O faults"
	if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
		not_ok "$what # hung: killed after ${tmo}s"
	elif [ "$rc" -ge 128 ]; then
		not_ok "$what # died from signal $((rc - 128))"
	elif [ -n "$sigs" ]; then
		echo "$sigs" | sed 's/^/# /'
		not_ok "$what # a test case died from an unexpected signal"
	elif [ -n "$left" ]; then
		not_ok "$what # processes left behind: ${left//$'\n'/ }"
	else
		ok "$what"
	fi
done

echo 0 >$dbg/failslab/probability
echo 0 >$dbg/fail_make_request/probability
slab=$(injected failslab)
io=$(injected fail_make_request)
echo "# injected in all: $slab slab allocation failures, $io I/O errors"
# I/O errors on nullb0 land only in marked tasks' submissions, and only the
# vhost workers and their work items submit to it (the tests never read or
# write it themselves): with none, no fault reached the workers' I/O path.
if [ "$slab" = 0 ]; then
	not_ok "faults were injected # no slab failure: the marking did not take"
elif [ -e $nullb ] && [ "$io" = 0 ]; then
	not_ok "faults were injected # no I/O error: none reached the workers' bios"
else
	ok "faults were injected ($slab slab, $io I/O in the workers' submissions)"
fi

if dmesg | grep -qF "$marker"; then
	klog=$(dmesg | sed -n "\\|$marker|,\$p")
else
	echo "# the start marker left the kernel log: checking all of it"
	klog=$(dmesg)
fi
hits=$(echo "$klog" | grep -E "$bad")
if [ -z "$hits" ]; then
	ok "kernel log clean during the run"
else
	echo "$hits" | head -30 | sed 's/^/# /'
	not_ok "kernel log clean during the run # $(echo "$hits" | wc -l) bad line(s)"
fi

[ "$fails" = 0 ] && exit 0
exit 1
