/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * vhost-blk: a virtio-blk device served by the kernel's /dev/vhost-blk
 */

#ifndef HW_VIRTIO_VHOST_BLK_H
#define HW_VIRTIO_VHOST_BLK_H

#include "standard-headers/linux/virtio_blk.h"
#include "hw/virtio/virtio.h"
#include "hw/virtio/vhost.h"
#include "qom/object.h"
#include "qapi/qapi-types-common.h"
#include "qapi/qapi-types-virtio.h"
#include "standard-headers/linux/vhost_types.h"

#define TYPE_VHOST_BLK "vhost-blk"
OBJECT_DECLARE_SIMPLE_TYPE(VHostBlk, VHOST_BLK)

/*
 * "num-queues" default: one queue per vCPU, at most VHOST_BLK_MAX_QUEUES.
 * The transport resolves it (vhost-blk-pci); otherwise it means 1.
 */
#define VHOST_BLK_AUTO_NUM_QUEUES UINT16_MAX

struct VHostBlk {
    VirtIODevice parent_obj;

    /* Properties */
    char *path;             /* backing block device or regular file */
    bool read_only;         /* open it O_RDONLY, offer VIRTIO_BLK_F_RO */
    bool direct;            /* open it O_DIRECT */
    OnOffAuto locking;      /* image locks (auto: where OFD locks exist) */
    char *serial;           /* what GET_ID returns */
    uint16_t num_queues;
    uint16_t queue_size;
    VhostBlkWorkers workers;
    uint32_t poll_us;       /* rings' busy-poll timeout, 0: the kernel's */
    char *vhostfd_name;     /* a pre-opened /dev/vhost-blk */
    int32_t bootindex;

    /* The backing file, passed to VHOST_BLK_SET_BACKEND at every start. */
    int backing_fd;
    /* /dev/vhost-blk; owned by dev (vhost_dev_cleanup() closes it). */
    int vhost_fd;
    /* Config space, in host byte order. */
    uint64_t capacity;      /* 512-byte sectors */
    uint32_t blk_size;      /* logical block size */

    /* The kernel has no per-ring workers (ENOTTY): do not ask again. */
    bool workers_unsupported;
    /*
     * Per-queue policy: the worker created for each ring, kept for the
     * lifetime of the device (the kernel keeps it until the fd is closed),
     * VHOST_VRING_NEW_WORKER while none was created.  Ring 0 stays on the
     * device's default worker.
     */
    uint32_t worker_ids[VHOST_BLK_MAX_QUEUES];

    struct vhost_dev dev;
    struct vhost_virtqueue *vhost_vqs;
    VirtQueue **virtqs;
    Error *migration_blocker;
};

#endif
