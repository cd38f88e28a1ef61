#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# vhost_qemu.sh's migrate group: live migration of a vhost-blk-pci guest.
exec "$(dirname "$(readlink -f "$0")")/vhost_qemu.sh" migrate
