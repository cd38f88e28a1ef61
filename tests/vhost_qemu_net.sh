#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# vhost_qemu.sh's net group: vhost-net's per-ring workers under a tap.
exec "$(dirname "$(readlink -f "$0")")/vhost_qemu.sh" net
