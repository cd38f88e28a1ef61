/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A virtio-blk "driver" over /dev/vhost-blk, for the selftests: rings,
 * request slots (header + status) and helpers that post and reap requests.
 */
#ifndef VHOST_BLK_LIB_H
#define VHOST_BLK_LIB_H

#include <linux/vhost.h>
#include <linux/virtio_blk.h>
#include <stdalign.h>
#include "vhost_vmm.h"

/*
 * What a modern virtio-blk driver acks of the bits vhost-blk serves: the
 * data-path ones.  DISCARD and WRITE_ZEROES requests are refused (UNSUPP)
 * on a device that did not negotiate them.
 */
#define VMM_BLK_FEATURES						\
	((1ULL << VIRTIO_F_VERSION_1) | (1ULL << VIRTIO_BLK_F_FLUSH) |	\
	 (1ULL << VIRTIO_BLK_F_DISCARD) | (1ULL << VIRTIO_BLK_F_WRITE_ZEROES))

/*
 * 64-byte aligned: alignas on the first member aligns (and pads) the whole
 * struct, as __aligned(64) on it would in the kernel.
 */
struct vmm_blk_slot {
	alignas(64) struct virtio_blk_outhdr hdr;
	struct virtio_blk_discard_write_zeroes dwz;
	uint8_t status;
	void *token;
};

struct vmm_blk {
	struct vmm vmm;
	int fd;
	unsigned int nq;
	struct vmm_vq vq[VHOST_BLK_MAX_QUEUES];
	struct vmm_blk_slot **free[VHOST_BLK_MAX_QUEUES];
	unsigned int nfree[VHOST_BLK_MAX_QUEUES];
};

/* Open, own, negotiate @features, map @mem_size bytes, set up @nq rings. */
int vmm_blk_open(struct vmm_blk *b, unsigned int nq, unsigned int qsize,
		 uint64_t features, size_t mem_size);
/*
 * Set up ring @q of an open device (its memory, NUM, BASE, ADDR, KICK,
 * CALL and request slots), as vmm_blk_open() does for each of its rings;
 * nq grows to take it.
 */
int vmm_blk_add_ring(struct vmm_blk *b, unsigned int q, unsigned int qsize);
/*
 * vmm_blk_open() with VHOST_SET_FORK_FROM_OWNER @fork_owner before
 * VHOST_SET_OWNER (-1: not set).  -ENOTTY where the kernel has no such
 * control (before 6.17, or without CONFIG_VHOST_ENABLE_FORK_OWNER_CONTROL).
 */
int vmm_blk_open_fork(struct vmm_blk *b, unsigned int nq, unsigned int qsize,
		      uint64_t features, size_t mem_size, int fork_owner);
void vmm_blk_close(struct vmm_blk *b);
/*
 * For a driver over another transport: @b emptied for @nq rings (no fd, no
 * eventfds), and ring @q's request slots (a header and a status byte
 * each) carved from b->vmm.
 */
void vmm_blk_reset(struct vmm_blk *b, unsigned int nq);
int vmm_blk_slots_init(struct vmm_blk *b, unsigned int q, unsigned int qsize);
int vmm_blk_set_backend(struct vmm_blk *b, int fd);
/*
 * Set ring @q up again (its kick, as before), as a VMM restarting a device
 * does: after a detach (SET_BACKEND -1) vhost-blk starts only such rings.
 */
int vmm_blk_rearm(struct vmm_blk *b, unsigned int q);

/*
 * Post one request on ring @q: header, @nseg data segments of @len bytes
 * split evenly (device-readable for OUT-like types, writable for IN and
 * GET_ID), status.  Returns the head, or -1 when the ring is full.
 */
int vmm_blk_post(struct vmm_blk *b, unsigned int q, uint32_t type,
		 uint64_t sector, void *data, uint32_t len, unsigned int nseg,
		 bool indirect, void *token);
/* Post a DISCARD or WRITE_ZEROES of one range. */
int vmm_blk_post_dwz(struct vmm_blk *b, unsigned int q, uint32_t type,
		     uint64_t sector, uint32_t nsect, uint32_t flags, void *token);
/*
 * Reap one completion of ring @q: its status, -1 on timeout, or -2 when
 * the device returned a head that was not posted.
 */
int vmm_blk_reap(struct vmm_blk *b, unsigned int q, void **token,
		 uint32_t *used_len, int timeout_ms);
/* Post, kick and wait for one request; returns its status or -1. */
int vmm_blk_do(struct vmm_blk *b, unsigned int q, uint32_t type,
	       uint64_t sector, void *data, uint32_t len);

#endif
