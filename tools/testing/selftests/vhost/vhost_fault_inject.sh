#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# vhost_blk_test and vhost_worker_test again, with slab allocation failures
# (failslab) and block I/O errors on /dev/nullb0 (fail_make_request)
# injected at a fixed probability and interval into the test processes and
# into the vhost worker kthreads, which a background loop marks as they
# appear.  6.1's fault injection has no seed: the interval makes it mostly
# repeatable, the probability spreads it.
#
# The tests' own verdicts under injection are informational.  The script
# passes when no binary hangs (timeout), none dies from a signal its harness
# did not send, no test case dies from an unexpected signal, and the kernel
# log gained no oops, BUG, WARNING, KASAN report, lockdep report or hung
# task.  It prints how many faults were injected.  Exit 0 pass, 1 fail,
# 4 skip (kselftest).
#
# Environment: FAULT_SLAB_PROBABILITY, FAULT_SLAB_INTERVAL,
# FAULT_IO_PROBABILITY, FAULT_IO_INTERVAL, FAULT_TIMEOUT (seconds per binary).
set -u

dir=$(dirname "$(readlink -f "$0")")
dbg=/sys/kernel/debug
nullb=/sys/block/nullb0/make-it-fail
bins="vhost_blk_test vhost_worker_test"
slab_prob=${FAULT_SLAB_PROBABILITY:-50}
slab_int=${FAULT_SLAB_INTERVAL:-7}
io_prob=${FAULT_IO_PROBABILITY:-50}
io_int=${FAULT_IO_INTERVAL:-5}
tmo=${FAULT_TIMEOUT:-100}
budget=1000000000	# "times": counts down, so the difference is what was injected
bad='BUG:|kernel BUG|WARNING:|KASAN:|UBSAN:|general protection|possible circular'
bad="$bad|possible recursive|INFO: task|Oops|rcu.*stall"
tmp=$(mktemp -d /tmp/vhost_fault_inject.XXXXXX)
marker="vhost_fault_inject: start $$ $RANDOM"
ntests=4
n=0
fails=0
saved=()
marker_pid=

ok() { n=$((n + 1)); echo "ok $n $*"; }
not_ok() { n=$((n + 1)); fails=$((fails + 1)); echo "not ok $n $*"; }
skip_all() {
	echo "1..0 # SKIP $*"
	exit 4
}

# Remember a knob's value (once) and set it.
knob() {
	local f=$1 v=$2

	[ -e "$f" ] || return 1
	saved+=("$f=$(cat "$f")")
	echo "$v" >"$f"
}

restore() {
	local i f

	[ -n "$marker_pid" ] && kill "$marker_pid" 2>/dev/null && wait "$marker_pid" 2>/dev/null
	marker_pid=
	# Probabilities first, so nothing fails while the rest is restored.
	for f in "$dbg/failslab/probability" "$dbg/fail_make_request/probability"; do
		for i in "${saved[@]}"; do
			[ "${i%%=*}" = "$f" ] && echo "${i#*=}" >"$f"
		done
	done
	for ((i = ${#saved[@]} - 1; i >= 0; i--)); do
		echo "${saved[i]#*=}" >"${saved[i]%%=*}" 2>/dev/null
	done
	saved=()
	rm -rf "$tmp"
}
trap restore EXIT

# Mark every vhost worker kthread (vhost-<pid>[-<id>]) as it appears.
mark_workers() {
	local c p

	while :; do
		for c in $(grep -l '^vhost-' /proc/[0-9]*/comm 2>/dev/null); do
			p=${c#/proc/}
			p=${p%/comm}
			[ "$(cat "/proc/$p/make-it-fail" 2>/dev/null)" = 0 ] &&
				echo 1 >"/proc/$p/make-it-fail" 2>/dev/null
		done
		sleep 0.05
	done
}

injected() {
	echo $((budget - $(cat "$dbg/$1/times")))
}

echo "TAP version 13"
[ "$(id -u)" = 0 ] || skip_all "needs root"
mountpoint -q $dbg || mount -t debugfs none $dbg 2>/dev/null
[ -d $dbg/failslab ] || skip_all "no $dbg/failslab (CONFIG_FAILSLAB, CONFIG_FAULT_INJECTION_DEBUG_FS)"
[ -d $dbg/fail_make_request ] || skip_all "no $dbg/fail_make_request (CONFIG_FAIL_MAKE_REQUEST)"
[ -e /proc/self/make-it-fail ] || skip_all "no /proc/<pid>/make-it-fail (CONFIG_FAULT_INJECTION)"
for b in $bins; do
	[ -x "$dir/$b" ] || skip_all "$dir/$b not built"
done
echo "1..$ntests"

for t in failslab fail_make_request; do
	knob $dbg/$t/probability 0
	knob $dbg/$t/task-filter Y
	knob $dbg/$t/times $budget
	knob $dbg/$t/space 0
	knob $dbg/$t/verbose 1
done
knob $dbg/failslab/interval "$slab_int"
# GFP_KERNEL allocations too: that is what vhost makes.
knob $dbg/failslab/ignore-gfp-wait N
knob $dbg/fail_make_request/interval "$io_int"
if [ -e $nullb ]; then
	knob $nullb 1
	echo "# fail_make_request on nullb0: probability $io_prob%, interval $io_int"
else
	echo "# no nullb0: no I/O errors injected"
fi
echo "# failslab: probability $slab_prob%, interval $slab_int, GFP_KERNEL included"
echo "$marker" >/dev/kmsg
mark_workers &
marker_pid=$!
echo "$slab_prob" >$dbg/failslab/probability
[ -e $nullb ] && echo "$io_prob" >$dbg/fail_make_request/probability

for b in $bins; do
	log=$tmp/$b.log
	start=$SECONDS
	s0=$(injected failslab)
	i0=$(injected fail_make_request)
	# A session of its own: whatever is left of it after a timeout is
	# found and killed.  The binary and its test cases inherit make-it-fail.
	setsid -w bash -c 'echo $$ >"$0"; echo 1 >/proc/self/make-it-fail &&
		exec timeout -k 10 "$1" "$2"' "$tmp/sid" "$tmo" "$dir/$b" >"$log" 2>&1 &
	wait $!
	rc=$?
	sid=$(cat "$tmp/sid" 2>/dev/null)
	left=
	[ -n "$sid" ] && left=$(ps -o pid= -s "$sid" 2>/dev/null)
	for p in $left; do
		kill -9 "$p" 2>/dev/null
	done
	sed 's/^/# /' "$log" | grep -E '^# (ok|not ok|#.*(terminated|timeout|signal))' | head -200
	pass=$(grep -c '^ok ' "$log")
	failed=$(grep -c '^not ok ' "$log")
	sigs=$(grep 'terminated unexpectedly by signal' "$log")
	what="$b under fault injection: exit $rc after $((SECONDS - start)) s,"
	what="$what $pass ok / $failed not ok (informational),"
	what="$what $(($(injected failslab) - s0)) slab, $(($(injected fail_make_request) - i0)) I/O faults"
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
if [ "$slab" -gt 0 ] || [ "$io" -gt 0 ]; then
	ok "faults were injected ($slab slab, $io I/O)"
else
	not_ok "faults were injected # none: the marking did not take"
fi

if dmesg | grep -qF "$marker"; then
	log=$(dmesg | sed -n "\\|$marker|,\$p")
else
	echo "# the start marker left the kernel log: checking all of it"
	log=$(dmesg)
fi
hits=$(echo "$log" | grep -E "$bad")
if [ -z "$hits" ]; then
	ok "kernel log clean during the run"
else
	echo "$hits" | head -30 | sed 's/^/# /'
	not_ok "kernel log clean during the run # $(echo "$hits" | wc -l) bad line(s)"
fi

[ "$fails" = 0 ] && exit 0
exit 1
