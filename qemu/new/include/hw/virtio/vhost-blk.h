/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * vhost-blk: a virtio-blk device served by the kernel's /dev/vhost-blk
 */

#ifndef HW_VIRTIO_VHOST_BLK_H
#define HW_VIRTIO_VHOST_BLK_H

#include "standard-headers/linux/virtio_blk.h"
#include "hw/block/block.h"
#include "hw/virtio/virtio.h"
#include "hw/virtio/vhost.h"
#include "qom/object.h"
#include "qapi/qapi-types-common.h"
#include "qapi/qapi-types-virtio.h"
#include "standard-headers/linux/vhost_types.h"

#define TYPE_VHOST_BLK "vhost-blk"
OBJECT_DECLARE_SIMPLE_TYPE(VHostBlk, VHOST_BLK)

/*
 * "num-queues" default: one queue per vCPU, at most VHOST_BLK_MAX_QUEUES;
 * set, at most what the kernel's VHOST_BLK_GET_LIMITS says.
 * The transport resolves it (vhost-blk-pci); otherwise it means 1.
 */
#define VHOST_BLK_AUTO_NUM_QUEUES UINT16_MAX

struct VHostBlk {
    VirtIODevice parent_obj;

    /* Properties */
    BlockConf conf;         /* drive=, block sizes, share-rw, bootindex */
    char *serial;           /* what GET_ID returns */
    uint16_t num_queues;
    uint16_t queue_size;
    VhostBlkWorkers workers;
    uint32_t poll_us;       /* rings' busy-poll timeout, 0: the kernel's */
    char *vhostfd_name;     /* a pre-opened /dev/vhost-blk */

    /* The node cannot be written (VIRTIO_BLK_F_RO, an O_RDONLY fd). */
    bool read_only;
    /*
     * The node's file, opened again with the node's flags, passed to
     * VHOST_BLK_SET_BACKEND at every start; -1 while unrealized.
     */
    int backing_fd;
    /* /dev/vhost-blk; owned by dev (vhost_dev_cleanup() closes it). */
    int vhost_fd;
    /* Why the node's block jobs and graph changes are refused. */
    Error *op_blocker;
    /*
     * The nodes op_blocker blocks, referenced, while the device runs: the
     * drive's and, under a raw node, its file (NULL if none).
     */
    BlockDriverState *blocked_bs[2];

    /* Why the last start failed, until a bottom half reports it. */
    Error *start_error;

    /* The kernel has no per-ring workers: do not ask again. */
    bool workers_unsupported;
    /*
     * Per-queue policy: the worker made for each ring (num_queues of
     * them), kept for the lifetime of the device (the kernel keeps it
     * until the fd is closed), VHOST_VRING_NEW_WORKER while none was made.
     * Ring 0 stays on the device's default worker.
     */
    uint32_t *worker_ids;

    /* What the kernel enforces (VHOST_BLK_GET_LIMITS), read at realize. */
    struct vhost_blk_limits limits;

    /*
     * The write cache mode the node was opened with (cache.writeback):
     * the guest's after a reset, until it sets another through the
     * config space's "writeback" (VIRTIO_BLK_F_CONFIG_WCE).  The mode in
     * force is the BlockBackend's (blk_enable_write_cache()), sent to the
     * kernel (VHOST_BLK_SET_WRITEBACK) at each start and each change.
     */
    bool original_wce;
    /* The kernel has no VHOST_BLK_SET_WRITEBACK: no CONFIG_WCE offered. */
    bool wce_unsupported;
    /* The mode in force, as migrated (vmstate_vhost_blk_wce). */
    bool migrated_wce;

    struct vhost_dev dev;
    struct vhost_virtqueue *vhost_vqs;
    VirtQueue **virtqs;
};

#endif
