#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# vhost_qemu.sh's mq group: default queues, one per vCPU, each on its worker.
exec "$(dirname "$(readlink -f "$0")")/vhost_qemu.sh" mq
