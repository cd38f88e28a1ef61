#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# QEMU's own libqos cases on vhost-blk-pci, under -accel qtest: no guest
# CPU, the test itself drives the device's registers and rings, and this
# kernel's /dev/vhost-blk serves them.
#   virtio-blk-test.c, unchanged: the device-neutral cases (indirect,
#       config, basic, resize) through vhost-blk-pci's libqos node
#       (qemu/new/tests/qtest/libqos/vhost-blk.c).  virtio-blk-test.c's
#       msix, idx, nxvirtq and hotplug cases are written for the
#       virtio-blk-pci node by name and do not apply.
#   vhost-blk-test.c, ours: bad-queue-size and ring-outside-ram (a start
#       the guest broke marks the device as needing a reset, QEMU goes on,
#       a reset and a good set-up are served), worker-map
#       (x-query-vhost-workers names a vhost thread of this QEMU for queue
#       0, the same after a device reset), multi-segment-discard (the
#       config space offers the DISCARD and WRITE_ZEROES segments
#       VHOST_BLK_GET_LIMITS reports, and a request of that many is
#       served: exactly its sectors read back as zeroes), write-cache (on
#       a loop device: writes bring no flush while the config space's
#       "writeback" is 1; after the driver writes 0 every write is
#       followed by one, the kernel completing it only once stable; a
#       reset gives writeback back).
#
#   VHOST_QEMU     the patched qemu-system-x86_64; qos-test is in its
#                  build directory (tests/qtest/qos-test, built by
#                  vmq/qemu-build)
#   VHOST_QEMU_FW  firmware directories for -L, colon separated
#                  (default /usr/share/qemu:/usr/share/seabios)
set -u

cases=(indirect config basic resize bad-queue-size ring-outside-ram worker-map
	multi-segment-discard write-cache)
qemu=${VHOST_QEMU:-}
qos=${qemu:+$(dirname "$qemu")/tests/qtest/qos-test}

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
[ -x "$qos" ] || skipall "no $qos (vmq/qemu-build builds it)"
[ "$(id -u)" = 0 ] || skipall "needs root (/dev/vhost-blk)"
[ -e /dev/vhost-blk ] || skipall "/dev/vhost-blk missing (CONFIG_VHOST_BLK)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The machine's firmware (Debian's QEMU source carries no blobs), by a
# wrapper of the binary's name, which qos-test reads the target from.
fw=()
IFS=: read -ra dirs <<<"${VHOST_QEMU_FW:-/usr/share/qemu:/usr/share/seabios}"
for d in "${dirs[@]}"; do
	fw+=(-L "$d")
done
# No default NIC: its option ROM is not in Debian's QEMU either.
printf '#!/bin/sh\nexec %q %s -net none "$@"\n' "$qemu" "${fw[*]}" \
	>"$work/qemu-system-x86_64"
chmod +x "$work/qemu-system-x86_64"
export QTEST_QEMU_BINARY=$work/qemu-system-x86_64
# The graph's paths through vhost-blk-pci, one per case and machine.
"$qos" -l >"$work/list" 2>&1
grep -E '/vhost-blk-pci/' "$work/list" | sed 's/^ *//' >"$work/paths"
[ -s "$work/paths" ] || { echo "# qos-test -l:"; head -20 "$work/list" | sed 's/^/# /'; }

i=0 pass=0 fail=0
for c in "${cases[@]}"; do
	i=$((i + 1))
	paths=$(grep -E "/$c\$" "$work/paths")
	if [ -z "$paths" ]; then
		echo "not ok $i $c # not in qos-test's graph (no vhost-blk-pci node?)"
		fail=$((fail + 1))
		continue
	fi
	ok=1
	for p in $paths; do
		echo "# $p"
		# One QEMU per case; a test that hangs is failed, not waited for.
		timeout 300 "$qos" --tap -k -p "$p" >"$work/out" 2>&1
		rc=$?
		sed 's/^/# /' "$work/out"
		# A skipped case is not a passed one.
		if [ $rc != 0 ] || ! grep -q "^ok " "$work/out" ||
		   grep -qE "^not ok|# SKIP" "$work/out"; then
			ok=0
		fi
	done
	if [ $ok = 1 ]; then
		echo "ok $i $c"
		pass=$((pass + 1))
	else
		echo "not ok $i $c"
		fail=$((fail + 1))
	fi
done
echo "# Totals: pass:$pass fail:$fail xfail:0 xpass:0 skip:0 error:0"
[ $fail = 0 ]
