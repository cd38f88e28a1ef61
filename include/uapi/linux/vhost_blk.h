/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * vhost-blk: an in-kernel virtio-blk device backend.
 *
 * A VMM opens /dev/vhost-blk, does the usual vhost setup (VHOST_SET_OWNER,
 * VHOST_SET_FEATURES, VHOST_SET_MEM_TABLE, VHOST_SET_VRING_*), then hands the
 * device its backing store with VHOST_BLK_SET_BACKEND.  Each of up to
 * VHOST_BLK_MAX_QUEUES rings is a virtio-blk request queue.  The VMM owns the
 * virtio-blk config space; Documentation/virt/vhost-blk.rst says what to put
 * there.
 */
#ifndef _UAPI_LINUX_VHOST_BLK_H
#define _UAPI_LINUX_VHOST_BLK_H

#include <linux/types.h>
#include <linux/vhost.h>

/* Rings (request queues) a vhost-blk device has. */
#define VHOST_BLK_MAX_QUEUES	16
/* Data segments one request may carry (virtio-blk seg_max). */
#define VHOST_BLK_SEG_MAX	128
/* Segments of one DISCARD or WRITE_ZEROES request. */
#define VHOST_BLK_MAX_DISCARD_SEG	1
/*
 * Sectors one DISCARD segment may cover (virtio-blk max_discard_sectors):
 * 1 GiB.  A longer segment fails with VIRTIO_BLK_S_IOERR.
 */
#define VHOST_BLK_MAX_DISCARD_SECTORS	0x200000U
/*
 * Sectors one WRITE_ZEROES segment may cover (virtio-blk
 * max_write_zeroes_sectors): 32 MiB, so that a worker zeroing a backend
 * without a zeroing offload is busy for a bounded time.  A longer segment
 * fails with VIRTIO_BLK_S_IOERR.
 */
#define VHOST_BLK_MAX_WRITE_ZEROES_SECTORS	0x10000U
/* Bytes of the serial GET_ID returns (VIRTIO_BLK_ID_BYTES). */
#define VHOST_BLK_SERIAL_LEN	20
/*
 * The largest VHOST_SET_VRING_BUSYLOOP_TIMEOUT a vhost-blk ring takes, in
 * microseconds (10 ms); a larger one fails with -EINVAL.  Polling longer
 * than a guest's round trip only burns the owner's CPU.
 */
#define VHOST_BLK_MAX_BUSYLOOP_TIMEOUT	10000U

/**
 * struct vhost_blk_backend - VHOST_BLK_SET_BACKEND argument
 * @fd: a block device or a regular file, or -1 to detach.  Opened
 *	O_DIRECT, requests are submitted as asynchronous direct I/O; otherwise
 *	they go through the page cache.  Opened read-only, every write-type
 *	request fails with VIRTIO_BLK_S_IOERR.  The file must support iter I/O
 *	in each direction it is open for, and O_DIRECT if opened with it; it
 *	must not be O_APPEND (write-type requests fail if O_APPEND is set
 *	later).
 * @flags: must be 0.
 * @reserved: must be 0.
 */
struct vhost_blk_backend {
	__s32 fd;
	__u32 flags;
	__u64 reserved[2];
};

/**
 * struct vhost_blk_serial - VHOST_BLK_SET_SERIAL argument
 * @serial: what GET_ID returns; NUL padded, not necessarily terminated.
 */
struct vhost_blk_serial {
	__u8 serial[VHOST_BLK_SERIAL_LEN];
};

/*
 * Set or replace the backing store; fd -1 detaches it.  In-flight requests
 * complete against the old backend before the call returns; requests the
 * guest queues meanwhile wait in their rings and are served by the new one.
 * A request whose used ring the device IOTLB cannot translate then is
 * dropped, not returned: the VMM is the one that would answer the miss.
 * After a detach (and after VHOST_RESET_OWNER) a ring starts again only
 * once the VMM has set it up again with VHOST_SET_VRING_NUM, _BASE, _ADDR
 * or _KICK: rings of a guest that came back with fewer queues stay stopped.
 * -EBADF for a bad fd or one not open for reading, -EINVAL for an fd that is
 * neither a block device nor a regular file, that lacks iter I/O for a
 * direction it is open for, that is O_DIRECT without support or O_APPEND,
 * for non-zero flags or reserved fields, -EPERM from a process that is not
 * the owner (or before VHOST_SET_OWNER), -EINTR when a fatal signal ends the
 * wait for requests in flight.
 */
#define VHOST_BLK_SET_BACKEND	_IOW(VHOST_VIRTIO, 0x50, struct vhost_blk_backend)
/*
 * Set the serial GET_ID returns.  Default: "vhost-blk" followed by NULs.
 * Bytes after the first NUL must be NUL and the rest printable ASCII
 * (-EINVAL otherwise).
 */
#define VHOST_BLK_SET_SERIAL	_IOW(VHOST_VIRTIO, 0x51, struct vhost_blk_serial)

#endif
