#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# vhost_qemu.sh's backends group: vhost-blk-pci on null_blk and on files.
exec "$(dirname "$(readlink -f "$0")")/vhost_qemu.sh" backends
