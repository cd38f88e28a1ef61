/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * vhost-blk: a virtio-blk device served by the kernel's /dev/vhost-blk
 *
 * Design
 * ======
 *
 * The kernel device (drivers/vhost/blk.c, Documentation/virt/vhost-blk.rst)
 * does the data path: it takes requests off the rings, submits them to the
 * backing file and completes them, on worker threads of its own.  QEMU is
 * left with what the kernel does not do:
 *
 * - The image.  drive= names a block node, "file" or "host_device" with
 *   no format or filter above it but a "raw" node that passes the whole
 *   file through (-drive format=raw, libvirt's format node): the kernel
 *   reads and writes the file itself, so there is nothing between the
 *   guest and the file for a format or filter driver to do.  The node's
 *   BlockBackend holds the permissions (so image locking, share-rw,
 *   auto-read-only and fdsets are the block layer's own), query-block
 *   shows the disk, and block_resize resizes it.  The fd the kernel gets
 *   (VHOST_BLK_SET_BACKEND, at every start) is one this device opens on
 *   the node's file with the node's flags: O_RDONLY where the node cannot
 *   be written, O_DIRECT with cache.direct=on.  As that I/O bypasses the
 *   block layer, every block job and graph change on the node (and on the
 *   file node under a raw one) is refused (op blockers) but resize, while
 *   the device is started.
 *
 * - Config space.  capacity from the node's length (at every read, so a
 *   block_resize shows; the guest gets a configuration change interrupt);
 *   blk_size and the topology from logical_block_size and
 *   physical_block_size (virtio-blk's defaults: 512, or the host's with a
 *   host_device node; an error where cache.direct=on cannot serve the
 *   logical block size); seg_max, num_queues and the DISCARD/WRITE_ZEROES
 *   limits (up to 16 segments a request) from VHOST_BLK_GET_LIMITS.
 *
 * - Feature bits.  The kernel serves the bits that change what it does
 *   with a ring or a request (kernel_feature_bits: the ring's, FLUSH,
 *   DISCARD, WRITE_ZEROES): the guest gets those the kernel reports, and
 *   what the guest acks of them is sent to it.  The config space is
 *   QEMU's, and so are the bits that only say a field of it is valid:
 *   SEG_MAX, BLK_SIZE, TOPOLOGY, MQ (num-queues > 1), RO (read-only=on)
 *   and CONFIG_WCE (config-wce=on, the default, where the kernel has
 *   VHOST_BLK_SET_WRITEBACK) are offered by QEMU itself and never reach
 *   the kernel, which refuses any bit it did not report.  DISCARD and
 *   WRITE_ZEROES that the guest did not get are refused by the kernel too
 *   (UNSUPP).
 *
 * - Write cache.  The node's cache.writeback is the device's mode after a
 *   reset; a guest with CONFIG_WCE changes it through the config space.
 *   The mode in force is the BlockBackend's, sent to the kernel at each
 *   start and at each change (VHOST_BLK_SET_WRITEBACK): writethrough makes
 *   the kernel complete a write only once it is stable (FUA or a sync).  A
 *   guest without FLUSH gets writethrough from the kernel itself.  The
 *   mode a guest chose migrates (subsection vhost-blk/wce).
 *
 * - The lifecycle.  Realize opens the files, VHOST_SET_OWNER (in
 *   vhost_dev_init()) and VHOST_BLK_SET_SERIAL (an empty serial without
 *   serial=, as QEMU's virtio-blk answers GET_ID then).  Start (DRIVER_OK
 *   with the VM running, or a kick from a guest that kicks before
 *   DRIVER_OK) sets up the rings with vhost_dev_start(), applies the worker
 *   policy, unbinds the kick of every ring the guest did not set up this
 *   time (it may have used more queues before a reset: the kernel keeps a
 *   stopped ring's kick and addresses), then attaches the backend, so that
 *   every ring has its worker before it serves a request and no stale ring
 *   is served.  A start that fails (a ring size the kernel refuses, a ring
 *   outside the guest's RAM) marks the device as needing a reset
 *   (virtio_error()); QEMU goes on.  Stop (reset, VM
 *   stop, unplug) detaches the backend
 *   first, which waits for the requests in flight, then stops the rings,
 *   whose indexes are then final.  The fd stays open until unrealize, and
 *   with it the kernel's state: owner, serial, workers.
 *
 * - Worker threads.  "per-queue" (the default) gives every ring but ring 0
 *   a worker of its own (vhost_dev_bind_vring_worker():
 *   VHOST_SET_VRING_WORKER where the kernel has it, VHOST_NEW_WORKER and
 *   VHOST_ATTACH_VRING_WORKER otherwise); ring 0 keeps the device's default
 *   worker.  Workers are made at the first start only: later starts bind
 *   the rings to the same workers again, so reboots make no threads.
 *   "shared" binds every ring to ring 0's worker.  A kernel without
 *   per-ring workers gets a warning, and all rings share its one worker.
 *
 * - Busy polling.  poll-us (as for -netdev tap) sets every ring's
 *   VHOST_SET_VRING_BUSYLOOP_TIMEOUT once, in vhost_dev_init(): the value
 *   lives in the kernel until the fd is closed, through resets and restarts.
 *
 * - Migration, with the image on storage both hosts see (the same block
 *   device or file).  The kernel logs the guest memory it writes
 *   (VHOST_F_LOG_ALL, set by the vhost core while RAM migrates).  When the
 *   source stops, stopping the device detaches the backend, which waits
 *   for the requests in flight, syncs the file (so that the destination
 *   reads what the source wrote, page cache and all), and stops the rings,
 *   whose indexes then travel in the virtio state.  The block layer
 *   inactivates the node on the source and activates it on the
 *   destination, locks and all, before the destination runs; the
 *   destination's capacity is read from its node.  Storage that is not
 *   shared would have to be copied by a block job, which sees no write
 *   the kernel makes: the node's op blockers refuse it.
 */

#include "qemu/osdep.h"
#include <sys/ioctl.h>
#include <linux/vhost.h>
#include "qapi/error.h"
#include "qapi/qapi-types-virtio.h"
#include "block/block_int.h"
#include "hw/block/block.h"
#include "qemu/error-report.h"
#include "qemu/host-utils.h"
#include "qemu/module.h"
#include "hw/qdev-properties.h"
#include "hw/qdev-properties-system.h"
#include "hw/virtio/virtio.h"
#include "hw/virtio/virtio-bus.h"
#include "hw/virtio/virtio-access.h"
#include "hw/virtio/virtio-blk-common.h"
#include "hw/virtio/vhost.h"
#include "hw/virtio/vhost-backend.h"
#include "hw/virtio/vhost-blk.h"
#include "migration/vmstate.h"
#include "monitor/monitor.h"
#include "system/block-backend.h"
#include "system/system.h"

#define VHOST_BLK_SECTOR_BITS 9
#define VHOST_BLK_DEV_PATH "/dev/vhost-blk"

/*
 * Bits the guest gets only if the kernel reports them.  Bits not listed
 * (SEG_MAX, BLK_SIZE, TOPOLOGY, MQ, RO: config space only) are QEMU's own
 * and never reach the kernel.
 */
static const int kernel_feature_bits[] = {
    VIRTIO_BLK_F_FLUSH,
    VIRTIO_BLK_F_DISCARD,
    VIRTIO_BLK_F_WRITE_ZEROES,
    VIRTIO_F_VERSION_1,
    VIRTIO_F_ANY_LAYOUT,
    VIRTIO_F_NOTIFY_ON_EMPTY,
    VIRTIO_RING_F_INDIRECT_DESC,
    VIRTIO_RING_F_EVENT_IDX,
    VIRTIO_F_IOMMU_PLATFORM,
    VIRTIO_F_RING_PACKED,
    VIRTIO_F_RING_RESET,
    VHOST_INVALID_FEATURE_BIT
};

static int vhost_blk_set_backend(VHostBlk *s, int fd)
{
    struct vhost_blk_backend backend = { .fd = fd };

    return s->dev.vhost_ops->vhost_blk_set_backend(&s->dev, &backend);
}

/* Rings the guest set up; the others were left alone by vhost_dev_start(). */
static bool vhost_blk_ring_in_use(VHostBlk *s, unsigned int i)
{
    return virtio_queue_get_desc_addr(VIRTIO_DEVICE(s), i) != 0;
}

/*
 * Rings the guest did not set up for this start keep, in the kernel, the
 * kick and addresses of an earlier start (a guest that used more queues
 * before a reset or a driver rebind): the memory they point into may now
 * hold anything.  Unbind their kick before the backend is attached, so
 * that the kernel neither polls nor starts them.
 */
static int vhost_blk_unbind_unused_rings(VHostBlk *s, Error **errp)
{
    const VhostOps *ops = s->dev.vhost_ops;
    struct vhost_vring_file file = { .fd = -1 };
    unsigned int i;
    int ret;

    for (i = 0; i < s->dev.nvqs; i++) {
        if (vhost_blk_ring_in_use(s, i)) {
            continue;
        }
        file.index = ops->vhost_get_vq_index(&s->dev, s->dev.vq_index + i);
        ret = ops->vhost_set_vring_kick(&s->dev, &file);
        if (ret < 0) {
            error_setg_errno(errp, -ret, "cannot unbind unused queue %u", i);
            return ret;
        }
    }
    return 0;
}

/* The kernel has no per-ring workers (ENOTTY), or cannot make one. */
static void vhost_blk_workers_unsupported(VHostBlk *s, int err)
{
    warn_report("vhost-blk: no per-queue workers (%s); all queues share "
                "one worker", err == -ENOTTY ?
                "the kernel has no worker calls" : strerror(-err));
    s->workers_unsupported = true;
}

/*
 * Ring i > 0 on the worker *id: for "per-queue" the one made for it at the
 * first start (VHOST_VRING_NEW_WORKER until then), for "shared" ring 0's.
 */
static void vhost_blk_apply_worker_policy(VHostBlk *s)
{
    const VhostOps *ops = s->dev.vhost_ops;
    struct vhost_vring_worker w0 = { .index = 0 };
    unsigned int i;
    uint32_t id;
    int ret;

    if (s->workers_unsupported || s->dev.nvqs < 2) {
        return;
    }

    if (s->workers == VHOST_BLK_WORKERS_SHARED) {
        ret = ops->vhost_get_vring_worker ?
              ops->vhost_get_vring_worker(&s->dev, &w0) : -ENOTTY;
        if (ret == -ENOTTY) {
            /* One worker for the device: shared already. */
            s->workers_unsupported = true;
            return;
        }
        if (ret < 0) {
            warn_report("vhost-blk: cannot get queue 0's worker: %s",
                        strerror(-ret));
            return;
        }
    }

    for (i = 1; i < s->dev.nvqs; i++) {
        if (!vhost_blk_ring_in_use(s, i)) {
            continue;
        }
        id = s->workers == VHOST_BLK_WORKERS_SHARED ? w0.worker_id :
                                                      s->worker_ids[i];
        ret = vhost_dev_bind_vring_worker(&s->dev, i, &id);
        if (ret == -ENOTTY) {
            vhost_blk_workers_unsupported(s, ret);
            return;
        }
        if (ret < 0) {
            /* E.g. EAGAIN past RLIMIT_NPROC: the ring keeps its worker. */
            warn_report("vhost-blk: queue %u gets no worker of its own: %s",
                        i, strerror(-ret));
            continue;
        }
        if (s->workers == VHOST_BLK_WORKERS_PER_QUEUE) {
            s->worker_ids[i] = id;
        }
    }
}

static bool vhost_blk_is_file_node(BlockDriverState *bs)
{
    const char *drv = bs && bs->drv ? bs->drv->format_name : "";

    return !strcmp(drv, "file") || !strcmp(drv, "host_device");
}

/*
 * The node whose file the kernel serves: the drive's node if it is a
 * "file" or "host_device" node, or the file of a "raw" node that passes
 * all of it through (no offset, no size: -drive format=raw, libvirt's
 * format node).  Such a raw node is as long as its file, which an offset
 * or a smaller size would not leave it.  NULL, with an error naming the
 * node, for anything else.
 */
static BlockDriverState *vhost_blk_file_node(VHostBlk *s, Error **errp)
{
    BlockDriverState *bs = blk_bs(s->conf.blk);
    const char *drv = bs && bs->drv ? bs->drv->format_name : "";
    BlockDriverState *file;

    GRAPH_RDLOCK_GUARD_MAINLOOP();

    if (vhost_blk_is_file_node(bs)) {
        return bs;
    }
    file = bs && bs->file ? bs->file->bs : NULL;
    if (!strcmp(drv, "raw") && vhost_blk_is_file_node(file) &&
        bdrv_getlength(bs) == bdrv_getlength(file)) {
        return file;
    }
    error_setg(errp, "node '%s' is a '%s' node: vhost-blk serves a "
               "'file' or 'host_device' node, or a 'raw' node over one "
               "without offset or size, and no other format or filter "
               "(the kernel does the I/O itself)",
               bs ? bdrv_get_node_name(bs) : "", drv);
    return NULL;
}

/*
 * While the kernel does the I/O (the device started), the node's block
 * jobs and graph changes are refused: a job or a filter inserted above the
 * node would miss every write the kernel makes.  Resizing is the block
 * layer's.  Only while started: QEMU stops the VM, and with it the device,
 * before it deletes its nodes at exit, and a node must have no blocker
 * left then.
 */
static void vhost_blk_block_node_ops(VHostBlk *s)
{
    BlockDriverState *nodes[2] = { blk_bs(s->conf.blk), NULL };
    unsigned int i;

    nodes[1] = vhost_blk_file_node(s, NULL);
    if (nodes[1] == nodes[0]) {
        nodes[1] = NULL;
    }
    for (i = 0; i < ARRAY_SIZE(nodes) && nodes[i]; i++) {
        BlockDriverState *bs = nodes[i];

        if (!bdrv_op_blocker_is_empty(bs)) {
            warn_report("vhost-blk: a block job uses node '%s'; it does not "
                        "see what the guest writes", bdrv_get_node_name(bs));
        }
        bdrv_ref(bs);
        s->blocked_bs[i] = bs;
        bdrv_op_block_all(bs, s->op_blocker);
        bdrv_op_unblock(bs, BLOCK_OP_TYPE_RESIZE, s->op_blocker);
    }
}

static void vhost_blk_unblock_node_ops(VHostBlk *s)
{
    unsigned int i;

    for (i = 0; i < ARRAY_SIZE(s->blocked_bs); i++) {
        if (s->blocked_bs[i]) {
            bdrv_op_unblock_all(s->blocked_bs[i], s->op_blocker);
            bdrv_unref(s->blocked_bs[i]);
            s->blocked_bs[i] = NULL;
        }
    }
}

/*
 * Tell the kernel the write cache mode in force: writethrough makes it
 * complete a write only once it is stable.
 */
static int vhost_blk_push_wce(VHostBlk *s)
{
    uint32_t wb = blk_enable_write_cache(s->conf.blk);

    if (s->wce_unsupported) {
        return 0;
    }
    return ioctl(s->vhost_fd, VHOST_BLK_SET_WRITEBACK, &wb) < 0 ? -errno : 0;
}

static int vhost_blk_start(VirtIODevice *vdev, Error **errp)
{
    VHostBlk *s = VHOST_BLK(vdev);
    BusState *qbus = BUS(qdev_get_parent_bus(DEVICE(vdev)));
    VirtioBusClass *k = VIRTIO_BUS_GET_CLASS(qbus);
    unsigned int i;
    int ret;

    if (!k->set_guest_notifiers) {
        error_setg(errp, "binding does not support guest notifiers");
        return -ENOSYS;
    }

    ret = vhost_dev_enable_notifiers(&s->dev, vdev);
    if (ret < 0) {
        error_setg_errno(errp, -ret, "cannot enable host notifiers");
        return ret;
    }

    ret = k->set_guest_notifiers(qbus->parent, s->dev.nvqs, true);
    if (ret < 0) {
        error_setg_errno(errp, -ret, "cannot bind guest notifiers");
        goto err_host_notifiers;
    }

    /* The kernel refuses bits it did not offer (VIRTIO_BLK_F_RO). */
    s->dev.acked_features = vdev->guest_features & s->dev.features;
    s->dev.vq_index_end = s->dev.nvqs;

    ret = vhost_dev_start(&s->dev, vdev, true);
    if (ret < 0) {
        error_setg_errno(errp, -ret, "cannot start vhost");
        goto err_guest_notifiers;
    }

    /*
     * No guest_notifier_mask callback: leave every ring unmasked and let
     * virtio-pci switch irqfds on and off.
     */
    for (i = 0; i < s->dev.nvqs; i++) {
        vhost_virtqueue_mask(&s->dev, vdev, s->dev.vq_index + i, false);
    }

    vhost_blk_apply_worker_policy(s);

    ret = vhost_blk_unbind_unused_rings(s, errp);
    if (ret < 0) {
        goto err_vhost;
    }

    ret = vhost_blk_push_wce(s);
    if (ret < 0) {
        error_setg_errno(errp, -ret, "VHOST_BLK_SET_WRITEBACK failed");
        goto err_vhost;
    }

    /* Rings start serving, requests queued already included, from here. */
    ret = vhost_blk_set_backend(s, s->backing_fd);
    if (ret < 0) {
        error_setg_errno(errp, -ret, "VHOST_BLK_SET_BACKEND failed");
        goto err_vhost;
    }
    vhost_blk_block_node_ops(s);
    return 0;

err_vhost:
    vhost_dev_stop(&s->dev, vdev, true);
err_guest_notifiers:
    k->set_guest_notifiers(qbus->parent, s->dev.nvqs, false);
err_host_notifiers:
    vhost_dev_disable_notifiers(&s->dev, vdev);
    return ret;
}

/* Send the kernel the translations of [@iova, @iova + @len), page by page. */
static bool vhost_blk_load_range(VHostBlk *s, uint64_t iova, uint64_t len,
                                 bool write)
{
    uint64_t a, end = iova + len;

    for (a = iova; a < end; a = (a | 0xfff) + 1) {
        if (vhost_device_iotlb_miss(&s->dev, a, write) < 0) {
            return false;
        }
    }
    return true;
}

/*
 * Behind a vIOMMU, put every started ring in the kernel's IOTLB before the
 * backend is detached: a request that completes while QEMU waits in
 * VHOST_BLK_SET_BACKEND could not have a miss answered (the main loop is
 * in that ioctl), and the kernel returns requests only once the ring's
 * descriptor table, available and used rings all translate
 * (vq_meta_prefetch()); otherwise it drops them, and the guest would wait
 * for them for ever after a stop/cont.  Nothing evicts the entries during
 * the wait: the kernel adds entries only as QEMU sends them.  A ring no
 * longer mapped (the vIOMMU reset with the machine, before the device) is
 * skipped: the guest is not waiting for it.
 */
static void vhost_blk_load_rings(VHostBlk *s)
{
    unsigned int i;

    if (!vhost_dev_has_iommu(&s->dev)) {
        return;
    }
    for (i = 0; i < s->dev.nvqs; i++) {
        struct vhost_virtqueue *vq = &s->dev.vqs[i];

        if (vhost_blk_ring_in_use(s, i) &&
            vhost_blk_load_range(s, vq->used_phys, vq->used_size, true) &&
            vhost_blk_load_range(s, vq->desc_phys, vq->desc_size, false)) {
            vhost_blk_load_range(s, vq->avail_phys, vq->avail_size, false);
        }
    }
}

static void vhost_blk_stop(VirtIODevice *vdev)
{
    VHostBlk *s = VHOST_BLK(vdev);
    BusState *qbus = BUS(qdev_get_parent_bus(DEVICE(vdev)));
    VirtioBusClass *k = VIRTIO_BUS_GET_CLASS(qbus);
    int ret;

    if (!vhost_dev_is_started(&s->dev)) {
        return;
    }

    /*
     * Detach first: the call returns once the requests in flight have
     * completed, so the ring indexes vhost_dev_stop() reads are final.
     */
    vhost_blk_load_rings(s);
    ret = vhost_blk_set_backend(s, -1);
    if (ret < 0) {
        error_report("vhost-blk: cannot detach the backend: %s",
                     strerror(-ret));
    }
    vhost_blk_unblock_node_ops(s);

    /*
     * What was written through the page cache (cache.direct=off) reaches
     * the storage before the node is inactivated (migration) or another
     * host opens it.
     */
    if (!s->read_only && qemu_fdatasync(s->backing_fd) < 0) {
        error_report("vhost-blk: cannot sync '%s': %s",
                     blk_bs(s->conf.blk)->filename, strerror(errno));
    }

    vhost_dev_stop(&s->dev, vdev, true);

    ret = k->set_guest_notifiers(qbus->parent, s->dev.nvqs, false);
    if (ret < 0) {
        error_report("vhost-blk: cannot unbind guest notifiers: %s",
                     strerror(-ret));
    }

    vhost_dev_disable_notifiers(&s->dev, vdev);
}

/*
 * A start failed: the device needs a reset, unless the guest has reset it
 * since.  From a bottom half, as virtio_set_status() stores the status it
 * was given after set_status returns, NEEDS_RESET included or not.
 */
static void vhost_blk_start_failed_bh(void *opaque)
{
    VirtIODevice *vdev = opaque;
    VHostBlk *s = VHOST_BLK(vdev);
    Error *err = s->start_error;

    s->start_error = NULL;
    if ((vdev->status & VIRTIO_CONFIG_S_DRIVER_OK) &&
        !vhost_dev_is_started(&s->dev)) {
        virtio_error(vdev, "vhost-blk: cannot start: %s",
                     error_get_pretty(err));
    }
    error_free(err);
    object_unref(OBJECT(vdev));
}

/*
 * Start, or tell the guest its device needs a reset: what fails here is
 * mostly the guest's doing (a ring size the kernel refuses, a ring outside
 * its RAM), and ends neither QEMU nor the other devices.  Nothing serves
 * the rings until the guest resets the device and sets it up again.
 */
static bool vhost_blk_start_or_fail(VirtIODevice *vdev)
{
    VHostBlk *s = VHOST_BLK(vdev);
    Error *local_err = NULL;

    if (vhost_blk_start(vdev, &local_err) < 0) {
        if (s->start_error) {
            /* The bottom half is pending: it reports the latest. */
            error_free(s->start_error);
        } else {
            object_ref(OBJECT(vdev));
            aio_bh_schedule_oneshot(qemu_get_aio_context(),
                                    vhost_blk_start_failed_bh, vdev);
        }
        s->start_error = local_err;
        return false;
    }
    return true;
}

static void vhost_blk_set_status(VirtIODevice *vdev, uint8_t status)
{
    VHostBlk *s = VHOST_BLK(vdev);
    bool should_start = virtio_device_should_start(vdev, status);

    if (vhost_dev_is_started(&s->dev) == should_start) {
        return;
    }

    if (should_start) {
        vhost_blk_start_or_fail(vdev);
    } else {
        vhost_blk_stop(vdev);
    }
}

/*
 * The rings are the kernel's once started; QEMU sees a kick only from a
 * guest that kicks before DRIVER_OK (legacy drivers may): start then.
 */
static void vhost_blk_handle_output(VirtIODevice *vdev, VirtQueue *vq)
{
    VHostBlk *s = VHOST_BLK(vdev);
    unsigned int i;

    if (!vdev->start_on_kick || vhost_dev_is_started(&s->dev)) {
        return;
    }

    if (!vhost_blk_start_or_fail(vdev)) {
        return;
    }

    /*
     * The kernel looks at a ring when it attaches it; kick anyway, so that
     * what the guest queued is served whatever the ring's state.
     */
    for (i = 0; i < s->dev.nvqs; i++) {
        if (vhost_blk_ring_in_use(s, i)) {
            event_notifier_set(
                virtio_queue_get_host_notifier(virtio_get_queue(vdev, i)));
        }
    }
}

static uint64_t vhost_blk_get_features(VirtIODevice *vdev, uint64_t features,
                                       Error **errp)
{
    VHostBlk *s = VHOST_BLK(vdev);

    virtio_add_feature(&features, VIRTIO_BLK_F_FLUSH);
    /* Config space only: QEMU's, never sent to the kernel. */
    if (s->wce_unsupported) {
        virtio_clear_feature(&features, VIRTIO_BLK_F_CONFIG_WCE);
    }
    virtio_add_feature(&features, VIRTIO_BLK_F_SEG_MAX);
    virtio_add_feature(&features, VIRTIO_BLK_F_BLK_SIZE);
    virtio_add_feature(&features, VIRTIO_BLK_F_TOPOLOGY);
    if (s->num_queues > 1) {
        virtio_add_feature(&features, VIRTIO_BLK_F_MQ);
    }
    /* DISCARD and WRITE_ZEROES: the properties of the same names. */
    if (s->read_only) {
        virtio_add_feature(&features, VIRTIO_BLK_F_RO);
        virtio_clear_feature(&features, VIRTIO_BLK_F_DISCARD);
        virtio_clear_feature(&features, VIRTIO_BLK_F_WRITE_ZEROES);
    }

    return vhost_get_features(&s->dev, kernel_feature_bits, features);
}

static void vhost_blk_get_config(VirtIODevice *vdev, uint8_t *config)
{
    VHostBlk *s = VHOST_BLK(vdev);
    struct virtio_blk_config blkcfg;
    uint32_t blk_size = s->conf.logical_block_size;
    uint64_t capacity;

    /* The node's length now: block_resize shows at the next read. */
    blk_get_geometry(s->conf.blk, &capacity);
    capacity -= capacity % (blk_size >> VHOST_BLK_SECTOR_BITS);

    memset(&blkcfg, 0, sizeof(blkcfg));
    virtio_stq_p(vdev, &blkcfg.capacity, capacity);
    virtio_stl_p(vdev, &blkcfg.seg_max,
                 MIN(s->limits.seg_max, s->queue_size - 2));
    virtio_stl_p(vdev, &blkcfg.blk_size, blk_size);
    blkcfg.physical_block_exp =
        ctz32(s->conf.physical_block_size / blk_size);
    virtio_stw_p(vdev, &blkcfg.min_io_size, s->conf.min_io_size / blk_size);
    virtio_stl_p(vdev, &blkcfg.opt_io_size, s->conf.opt_io_size / blk_size);
    virtio_stw_p(vdev, &blkcfg.num_queues, s->num_queues);
    virtio_stl_p(vdev, &blkcfg.max_discard_sectors,
                 s->limits.max_discard_sectors);
    virtio_stl_p(vdev, &blkcfg.max_discard_seg, s->limits.max_discard_seg);
    virtio_stl_p(vdev, &blkcfg.discard_sector_alignment,
                 blk_size >> VHOST_BLK_SECTOR_BITS);
    virtio_stl_p(vdev, &blkcfg.max_write_zeroes_sectors,
                 s->limits.max_write_zeroes_sectors);
    virtio_stl_p(vdev, &blkcfg.max_write_zeroes_seg,
                 s->limits.max_write_zeroes_seg);
    blkcfg.write_zeroes_may_unmap = 1;
    blkcfg.wce = blk_enable_write_cache(s->conf.blk);

    memcpy(config, &blkcfg, MIN(vdev->config_len, sizeof(blkcfg)));
}

/*
 * The guest writes the config space's "writeback" (CONFIG_WCE): the new
 * mode takes effect in the kernel at once, for the writes it takes next.
 */
static void vhost_blk_set_config(VirtIODevice *vdev, const uint8_t *config)
{
    VHostBlk *s = VHOST_BLK(vdev);
    struct virtio_blk_config blkcfg;
    int ret;

    memcpy(&blkcfg, config, MIN(vdev->config_len, sizeof(blkcfg)));
    if (!virtio_vdev_has_feature(vdev, VIRTIO_BLK_F_CONFIG_WCE) ||
        !blkcfg.wce == !blk_enable_write_cache(s->conf.blk)) {
        return;
    }
    blk_set_enable_write_cache(s->conf.blk, blkcfg.wce != 0);
    ret = vhost_blk_push_wce(s);
    if (ret < 0) {
        error_report("vhost-blk: VHOST_BLK_SET_WRITEBACK failed: %s",
                     strerror(-ret));
    }
}

/* A device reset: the node's own write cache mode again. */
static void vhost_blk_reset(VirtIODevice *vdev)
{
    VHostBlk *s = VHOST_BLK(vdev);

    blk_set_enable_write_cache(s->conf.blk, s->original_wce);
}

/* block_resize: virtio_notify_config() wants the main loop (and the BQL). */
static void vhost_blk_resize_bh(void *opaque)
{
    virtio_notify_config(VIRTIO_DEVICE(opaque));
}

static void vhost_blk_resize(void *opaque)
{
    aio_bh_schedule_oneshot(qemu_get_aio_context(), vhost_blk_resize_bh,
                            opaque);
}

static const BlockDevOps vhost_blk_block_ops = {
    .resize_cb = vhost_blk_resize,
};

/* Open the served node's file again with its flags, for SET_BACKEND. */
static bool vhost_blk_open_backing(VHostBlk *s, Error **errp)
{
    BlockDriverState *bs = vhost_blk_file_node(s, errp);
    int flags = s->read_only ? O_RDONLY : O_RDWR;
    uint32_t align;
    struct stat st;
    int fd;

    if (!bs) {
        return false;
    }
    if (blk_get_flags(s->conf.blk) & BDRV_O_NOCACHE) {
        flags |= O_DIRECT;
        /* The kernel submits the guest's requests as they are. */
        align = blk_get_request_alignment(s->conf.blk);
        if (align > s->conf.logical_block_size) {
            error_setg(errp, "'%s' takes O_DIRECT requests of %" PRIu32
                       " bytes or more: set logical_block_size=%" PRIu32
                       " or cache.direct=off", bs->filename, align, align);
            return false;
        }
    }

    fd = qemu_open(bs->filename, flags, errp);
    if (fd < 0) {
        return false;
    }
    if (fstat(fd, &st) < 0 || !(S_ISBLK(st.st_mode) || S_ISREG(st.st_mode))) {
        error_setg(errp, "'%s' is neither a block device nor a regular file",
                   bs->filename);
        close(fd);
        return false;
    }
    s->backing_fd = fd;
    return true;
}

/* Check "serial" and lay it out as VHOST_BLK_SET_SERIAL wants it. */
static bool vhost_blk_parse_serial(VHostBlk *s, struct vhost_blk_serial *out,
                                   Error **errp)
{
    size_t i, len = strlen(s->serial);

    if (len > VHOST_BLK_SERIAL_LEN) {
        error_setg(errp, "serial '%s' is longer than %d bytes", s->serial,
                   VHOST_BLK_SERIAL_LEN);
        return false;
    }
    for (i = 0; i < len; i++) {
        if (s->serial[i] < 0x20 || s->serial[i] > 0x7e) {
            error_setg(errp, "serial may hold printable ASCII only");
            return false;
        }
    }
    memset(out, 0, sizeof(*out));
    memcpy(out->serial, s->serial, len);
    return true;
}

/* Undo the virtqueue and vhost_virtqueue set-up of realize. */
static void vhost_blk_free_queues(VHostBlk *s)
{
    unsigned int i;

    g_free(s->vhost_vqs);
    s->vhost_vqs = NULL;
    for (i = 0; i < s->num_queues; i++) {
        virtio_delete_queue(s->virtqs[i]);
    }
    g_free(s->virtqs);
    s->virtqs = NULL;
    g_free(s->worker_ids);
    s->worker_ids = NULL;
    virtio_cleanup(VIRTIO_DEVICE(s));
}

/*
 * Read the limits the kernel enforces into s->limits (a kernel without
 * VHOST_BLK_GET_LIMITS has those of the series' first version: the
 * header's constants, but one DISCARD or WRITE_ZEROES segment) and check
 * the properties they bound.
 */
static bool vhost_blk_get_limits(VHostBlk *s, int vhostfd, Error **errp)
{
    struct vhost_blk_limits *lim = &s->limits;

    *lim = (struct vhost_blk_limits) {
        .size = sizeof(*lim),
        .max_queues = VHOST_BLK_MAX_QUEUES,
        .seg_max = VHOST_BLK_SEG_MAX,
        .max_discard_seg = 1,
        .max_discard_sectors = VHOST_BLK_MAX_DISCARD_SECTORS,
        .max_write_zeroes_seg = 1,
        .max_write_zeroes_sectors = VHOST_BLK_MAX_WRITE_ZEROES_SECTORS,
        .max_busyloop_timeout = VHOST_BLK_MAX_BUSYLOOP_TIMEOUT,
    };
    if (ioctl(vhostfd, VHOST_BLK_GET_LIMITS, lim) < 0 && errno != ENOTTY) {
        error_setg_errno(errp, errno, "VHOST_BLK_GET_LIMITS failed");
        return false;
    }
    if (s->num_queues > lim->max_queues) {
        error_setg(errp, "num-queues must be between 1 and %u",
                   lim->max_queues);
        return false;
    }
    /* The kernel refuses more (EINVAL): say which property it was. */
    if (s->poll_us > lim->max_busyloop_timeout) {
        error_setg(errp, "poll-us must be at most %u",
                   lim->max_busyloop_timeout);
        return false;
    }
    return true;
}

static void vhost_blk_device_realize(DeviceState *dev, Error **errp)
{
    ERRP_GUARD();
    VirtIODevice *vdev = VIRTIO_DEVICE(dev);
    VHostBlk *s = VHOST_BLK(dev);
    struct vhost_blk_serial serial = {};
    size_t config_size;
    int vhostfd = -1;
    unsigned int i;
    int ret;

    if (!s->conf.blk) {
        error_setg(errp, "drive property not set");
        return;
    }
    if (!blk_is_inserted(s->conf.blk)) {
        error_setg(errp, "Device needs media, but drive is empty");
        return;
    }
    if (s->num_queues == VHOST_BLK_AUTO_NUM_QUEUES) {
        s->num_queues = 1;
    }
    if (!s->num_queues) {
        error_setg(errp, "num-queues must be at least 1");
        return;
    }
    if (s->queue_size < 4 || s->queue_size > VIRTQUEUE_MAX_SIZE ||
        !is_power_of_2(s->queue_size)) {
        error_setg(errp, "queue-size must be a power of 2 between 4 and %d",
                   VIRTQUEUE_MAX_SIZE);
        return;
    }
    if (s->serial && !vhost_blk_parse_serial(s, &serial, errp)) {
        return;
    }


    s->read_only = !blk_supports_write_perm(s->conf.blk);
    if (!blkconf_apply_backend_options(&s->conf, s->read_only, true, errp) ||
        !blkconf_blocksizes(&s->conf, errp) ||
        !vhost_blk_open_backing(s, errp)) {
        return;
    }

    if (s->vhostfd_name) {
        vhostfd = monitor_fd_param(monitor_cur(), s->vhostfd_name, errp);
        if (vhostfd < 0) {
            error_prepend(errp, "cannot use vhostfd: ");
            goto err_backing;
        }
    } else {
        vhostfd = qemu_open(VHOST_BLK_DEV_PATH, O_RDWR, errp);
        if (vhostfd < 0) {
            goto err_backing;
        }
    }
    /*
     * Behind a vIOMMU the kernel posts IOTLB misses on this fd, and
     * vhost_kernel_iotlb_read() reads them from the main loop until a read
     * fails: a blocking fd would stop the main loop there for good.
     */
    if (!g_unix_set_fd_nonblocking(vhostfd, true, NULL)) {
        error_setg_errno(errp, errno, "cannot make the vhost fd nonblocking");
        close(vhostfd);
        goto err_backing;
    }
    if (!vhost_blk_get_limits(s, vhostfd, errp)) {
        close(vhostfd);
        goto err_backing;
    }

    config_size = virtio_get_config_size(&virtio_blk_cfg_size_params,
                                         vdev->host_features);
    virtio_init(vdev, VIRTIO_ID_BLOCK, config_size);

    s->virtqs = g_new(VirtQueue *, s->num_queues);
    s->worker_ids = g_new(uint32_t, s->num_queues);
    for (i = 0; i < s->num_queues; i++) {
        s->virtqs[i] = virtio_add_queue(vdev, s->queue_size,
                                        vhost_blk_handle_output);
        s->worker_ids[i] = VHOST_VRING_NEW_WORKER;
    }

    s->vhost_vqs = g_new0(struct vhost_virtqueue, s->num_queues);
    s->dev.nvqs = s->num_queues;
    s->dev.vqs = s->vhost_vqs;
    s->dev.vq_index = 0;
    s->dev.backend_features = 0;

    ret = vhost_dev_init(&s->dev, (void *)(uintptr_t)vhostfd,
                         VHOST_BACKEND_TYPE_KERNEL, s->poll_us, errp);
    if (ret < 0) {
        /* vhost_dev_init() closed vhostfd (vhost_dev_cleanup()). */
        goto err_virtio;
    }
    s->vhost_fd = vhostfd;

    /*
     * Without serial=, an empty one (all NULs): what QEMU's virtio-blk
     * answers then, and no /dev/disk/by-id name that every disk shares.
     */
    if (!s->dev.vhost_ops->vhost_blk_set_backend ||
        !s->dev.vhost_ops->vhost_blk_set_serial) {
        error_setg(errp, "the vhost backend has no vhost-blk calls");
        goto err_vhost;
    }
    ret = s->dev.vhost_ops->vhost_blk_set_serial(&s->dev, &serial);
    if (ret < 0) {
        error_setg_errno(errp, -ret, "VHOST_BLK_SET_SERIAL failed");
        goto err_vhost;
    }
    s->original_wce = blk_enable_write_cache(s->conf.blk);
    ret = vhost_blk_push_wce(s);
    if (ret == -ENOTTY) {
        s->wce_unsupported = true;
    } else if (ret < 0) {
        error_setg_errno(errp, -ret, "VHOST_BLK_SET_WRITEBACK failed");
        goto err_vhost;
    }

    error_setg(&s->op_blocker, "node '%s' is served by vhost-blk, whose "
               "I/O the block layer does not see",
               bdrv_get_node_name(blk_bs(s->conf.blk)));
    blk_set_dev_ops(s->conf.blk, &vhost_blk_block_ops, s);
    return;

err_vhost:
    vhost_dev_cleanup(&s->dev);
    s->vhost_fd = -1;
err_virtio:
    vhost_blk_free_queues(s);
err_backing:
    close(s->backing_fd);
    s->backing_fd = -1;
}

static void vhost_blk_device_unrealize(DeviceState *dev)
{
    VirtIODevice *vdev = VIRTIO_DEVICE(dev);
    VHostBlk *s = VHOST_BLK(dev);

    /* Stops vhost if it runs. */
    virtio_set_status(vdev, 0);

    /* Closes the vhost fd: the kernel frees the workers with it. */
    vhost_dev_cleanup(&s->dev);
    s->vhost_fd = -1;
    vhost_blk_free_queues(s);

    close(s->backing_fd);
    s->backing_fd = -1;

    error_free(s->op_blocker);
    s->op_blocker = NULL;
    blk_set_dev_ops(s->conf.blk, NULL, NULL);
}

static struct vhost_dev *vhost_blk_get_vhost(VirtIODevice *vdev)
{
    VHostBlk *s = VHOST_BLK(vdev);

    return &s->dev;
}

static void vhost_blk_instance_init(Object *obj)
{
    VHostBlk *s = VHOST_BLK(obj);

    s->backing_fd = -1;
    s->vhost_fd = -1;
    device_add_bootindex_property(obj, &s->conf.bootindex, "bootindex",
                                  "/disk@0,0", DEVICE(obj));
}

/* The VM is stopped, and with it the device: the ring indexes are final. */
static int vhost_blk_pre_save(void *opaque)
{
    VHostBlk *s = opaque;

    assert(!vhost_dev_is_started(&s->dev));
    return 0;
}

/*
 * The write cache mode a guest chose (CONFIG_WCE) goes with it; the
 * destination's start sends it to its kernel.
 */
static bool vhost_blk_wce_needed(void *opaque)
{
    VHostBlk *s = opaque;

    return blk_enable_write_cache(s->conf.blk) != s->original_wce;
}

static int vhost_blk_wce_pre_save(void *opaque)
{
    VHostBlk *s = opaque;

    s->migrated_wce = blk_enable_write_cache(s->conf.blk);
    return 0;
}

static int vhost_blk_wce_post_load(void *opaque, int version_id)
{
    VHostBlk *s = opaque;

    blk_set_enable_write_cache(s->conf.blk, s->migrated_wce);
    return 0;
}

static const VMStateDescription vmstate_vhost_blk_wce = {
    .name = "vhost-blk/wce",
    .version_id = 1,
    .minimum_version_id = 1,
    .needed = vhost_blk_wce_needed,
    .pre_save = vhost_blk_wce_pre_save,
    .post_load = vhost_blk_wce_post_load,
    .fields = (const VMStateField[]) {
        VMSTATE_BOOL(migrated_wce, VHostBlk),
        VMSTATE_END_OF_LIST()
    },
};

static const VMStateDescription vmstate_vhost_blk = {
    .name = "vhost-blk",
    .minimum_version_id = 1,
    .version_id = 1,
    .pre_save = vhost_blk_pre_save,
    .fields = (const VMStateField[]) {
        VMSTATE_VIRTIO_DEVICE,
        VMSTATE_END_OF_LIST()
    },
    .subsections = (const VMStateDescription * const []) {
        &vmstate_vhost_blk_wce,
        NULL
    },
};

static const Property vhost_blk_properties[] = {
    DEFINE_BLOCK_PROPERTIES(VHostBlk, conf),
    DEFINE_PROP_STRING("serial", VHostBlk, serial),
    DEFINE_PROP_UINT16("num-queues", VHostBlk, num_queues,
                       VHOST_BLK_AUTO_NUM_QUEUES),
    DEFINE_PROP_UINT16("queue-size", VHostBlk, queue_size, 128),
    DEFINE_PROP_VHOST_BLK_WORKERS("workers", VHostBlk, workers,
                                  VHOST_BLK_WORKERS_PER_QUEUE),
    DEFINE_PROP_UINT32("poll-us", VHostBlk, poll_us, 0),
    DEFINE_PROP_STRING("vhostfd", VHostBlk, vhostfd_name),
    DEFINE_PROP_BIT64("discard", VHostBlk, parent_obj.host_features,
                      VIRTIO_BLK_F_DISCARD, true),
    DEFINE_PROP_BIT64("write-zeroes", VHostBlk, parent_obj.host_features,
                      VIRTIO_BLK_F_WRITE_ZEROES, true),
    DEFINE_PROP_BIT64("config-wce", VHostBlk, parent_obj.host_features,
                      VIRTIO_BLK_F_CONFIG_WCE, true),
};

static void vhost_blk_class_init(ObjectClass *klass, void *data)
{
    DeviceClass *dc = DEVICE_CLASS(klass);
    VirtioDeviceClass *vdc = VIRTIO_DEVICE_CLASS(klass);

    device_class_set_props(dc, vhost_blk_properties);
    dc->vmsd = &vmstate_vhost_blk;
    set_bit(DEVICE_CATEGORY_STORAGE, dc->categories);
    vdc->realize = vhost_blk_device_realize;
    vdc->unrealize = vhost_blk_device_unrealize;
    vdc->get_config = vhost_blk_get_config;
    vdc->set_config = vhost_blk_set_config;
    vdc->reset = vhost_blk_reset;
    vdc->get_features = vhost_blk_get_features;
    vdc->set_status = vhost_blk_set_status;
    vdc->get_vhost = vhost_blk_get_vhost;
}

static const TypeInfo vhost_blk_info = {
    .name = TYPE_VHOST_BLK,
    .parent = TYPE_VIRTIO_DEVICE,
    .instance_size = sizeof(VHostBlk),
    .instance_init = vhost_blk_instance_init,
    .class_init = vhost_blk_class_init,
};

static void vhost_blk_register_types(void)
{
    type_register_static(&vhost_blk_info);
}

type_init(vhost_blk_register_types)
