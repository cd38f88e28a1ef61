#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# vhost_qemu.sh's viommu group: vhost-blk-pci behind QEMU's intel-iommu.
exec "$(dirname "$(readlink -f "$0")")/vhost_qemu.sh" viommu
