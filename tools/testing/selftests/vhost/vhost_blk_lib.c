// SPDX-License-Identifier: GPL-2.0
/*
 * A virtio-blk "driver" over /dev/vhost-blk; see vhost_blk_lib.h.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/ioctl.h>

#include "vhost_blk_lib.h"

void vmm_blk_reset(struct vmm_blk *b, unsigned int nq)
{
	unsigned int q;

	memset(b, 0, sizeof(*b));
	for (q = 0; q < VHOST_BLK_MAX_QUEUES; q++) {
		b->vq[q].kick = -1;
		b->vq[q].call = -1;
	}
	b->nq = nq;
}

int vmm_blk_slots_init(struct vmm_blk *b, unsigned int q, unsigned int qsize)
{
	unsigned int i;

	b->free[q] = calloc(qsize, sizeof(*b->free[q]));
	if (!b->free[q])
		return -ENOMEM;
	for (i = 0; i < qsize; i++) {
		b->free[q][i] = vmm_alloc(&b->vmm, sizeof(struct vmm_blk_slot), 64);
		if (!b->free[q][i])
			return -ENOMEM;
		b->free[q][i]->status = 0xff;
	}
	b->nfree[q] = qsize;
	return 0;
}

int vmm_blk_open(struct vmm_blk *b, unsigned int nq, unsigned int qsize,
		 uint64_t features, size_t mem_size)
{
	return vmm_blk_open_fork(b, nq, qsize, features, mem_size, -1);
}

int vmm_blk_open_fork(struct vmm_blk *b, unsigned int nq, unsigned int qsize,
		      uint64_t features, size_t mem_size, int fork_owner)
{
	uint64_t offered;
	unsigned int q;
	int r;

	vmm_blk_reset(b, nq);
	b->fd = open("/dev/vhost-blk", O_RDWR | O_CLOEXEC);
	if (b->fd < 0)
		return -errno;
	if (fork_owner >= 0) {
#ifdef VHOST_SET_FORK_FROM_OWNER
		uint8_t v = fork_owner;

		if (ioctl(b->fd, VHOST_SET_FORK_FROM_OWNER, &v))
			return -errno;
#else
		return -ENOTTY;
#endif
	}
	if (ioctl(b->fd, VHOST_SET_OWNER, NULL))
		return -errno;
	if (ioctl(b->fd, VHOST_GET_FEATURES, &offered))
		return -errno;
	if ((features & offered) != features)
		return -EOPNOTSUPP;
	if (ioctl(b->fd, VHOST_SET_FEATURES, &features))
		return -errno;
	r = vmm_init(&b->vmm, mem_size);
	if (r)
		return r;
	r = vmm_set_mem_table(&b->vmm, b->fd);
	if (r)
		return r;
	for (q = 0; q < nq; q++) {
		r = vmm_blk_add_ring(b, q, qsize);
		if (r)
			return r;
	}
	return 0;
}

int vmm_blk_add_ring(struct vmm_blk *b, unsigned int q, unsigned int qsize)
{
	int r;

	if (q >= VHOST_BLK_MAX_QUEUES)
		return -EINVAL;
	r = vmm_vq_init(&b->vmm, &b->vq[q], q, qsize);
	if (!r)
		r = vmm_vq_setup(&b->vq[q], b->fd);
	if (!r)
		r = vmm_blk_slots_init(b, q, qsize);
	if (!r && q >= b->nq)
		b->nq = q + 1;
	return r;
}

void vmm_blk_close(struct vmm_blk *b)
{
	unsigned int q;

	if (b->fd >= 0)
		close(b->fd);
	b->fd = -1;
	for (q = 0; q < VHOST_BLK_MAX_QUEUES; q++) {
		vmm_vq_free(&b->vq[q]);
		free(b->free[q]);
		b->free[q] = NULL;
	}
	vmm_free(&b->vmm);
}

int vmm_blk_set_backend(struct vmm_blk *b, int fd)
{
	struct vhost_blk_backend be = { .fd = fd };

	return ioctl(b->fd, VHOST_BLK_SET_BACKEND, &be) ? -errno : 0;
}

int vmm_blk_rearm(struct vmm_blk *b, unsigned int q)
{
	struct vhost_vring_file f = { .index = q, .fd = b->vq[q].kick };

	return ioctl(b->fd, VHOST_SET_VRING_KICK, &f) ? -errno : 0;
}

static struct vmm_blk_slot *slot_get(struct vmm_blk *b, unsigned int q)
{
	return b->nfree[q] ? b->free[q][--b->nfree[q]] : NULL;
}

int vmm_blk_post(struct vmm_blk *b, unsigned int q, uint32_t type,
		 uint64_t sector, void *data, uint32_t len, unsigned int nseg,
		 bool indirect, void *token)
{
	struct vmm_seg segs[VMM_MAX_INDIRECT];
	bool in = type == VIRTIO_BLK_T_IN || type == VIRTIO_BLK_T_GET_ID;
	struct vmm_blk_slot *s;
	unsigned int n = 0, i;
	int head;

	if (nseg + 2 > VMM_MAX_INDIRECT || (len && !nseg) || (!len && nseg))
		return -1;
	s = slot_get(b, q);
	if (!s)
		return -1;
	s->hdr.type = type;
	s->hdr.ioprio = 0;
	s->hdr.sector = sector;
	s->status = 0xff;
	s->token = token;
	segs[n++] = (struct vmm_seg){ &s->hdr, sizeof(s->hdr), false };
	for (i = 0; i < nseg; i++) {
		uint32_t chunk = len / nseg + (i == nseg - 1 ? len % nseg : 0);

		segs[n++] = (struct vmm_seg){ (char *)data + i * (len / nseg), chunk, in };
	}
	segs[n++] = (struct vmm_seg){ &s->status, 1, true };
	head = vmm_vq_add(&b->vq[q], segs, n, indirect, s);
	if (head < 0)
		b->free[q][b->nfree[q]++] = s;
	return head;
}

int vmm_blk_post_dwz(struct vmm_blk *b, unsigned int q, uint32_t type,
		     uint64_t sector, uint32_t nsect, uint32_t flags, void *token)
{
	struct vmm_blk_slot *s = slot_get(b, q);
	struct vmm_seg segs[3];
	int head;

	if (!s)
		return -1;
	s->hdr.type = type;
	s->hdr.ioprio = 0;
	s->hdr.sector = 0;
	s->dwz.sector = sector;
	s->dwz.num_sectors = nsect;
	s->dwz.flags = flags;
	s->status = 0xff;
	s->token = token;
	segs[0] = (struct vmm_seg){ &s->hdr, sizeof(s->hdr), false };
	segs[1] = (struct vmm_seg){ &s->dwz, sizeof(s->dwz), false };
	segs[2] = (struct vmm_seg){ &s->status, 1, true };
	head = vmm_vq_add(&b->vq[q], segs, 3, false, s);
	if (head < 0)
		b->free[q][b->nfree[q]++] = s;
	return head;
}

int vmm_blk_reap(struct vmm_blk *b, unsigned int q, void **token,
		 uint32_t *used_len, int timeout_ms)
{
	struct vmm_blk_slot *s;
	int head;

	head = vmm_vq_get_used(&b->vq[q], used_len, (void **)&s, timeout_ms);
	/* A head never posted is not "nothing returned". */
	if (head < 0)
		return head == -2 ? -2 : -1;
	b->free[q][b->nfree[q]++] = s;
	if (token)
		*token = s->token;
	return s->status;
}

int vmm_blk_do(struct vmm_blk *b, unsigned int q, uint32_t type,
	       uint64_t sector, void *data, uint32_t len)
{
	unsigned int nseg = len ? (len + 4095) / 4096 : 0;

	if (nseg > 8)
		nseg = 8;
	if (vmm_blk_post(b, q, type, sector, data, len, nseg, false, NULL) < 0)
		return -1;
	vmm_vq_kick(&b->vq[q]);
	return vmm_blk_reap(b, q, NULL, NULL, 10000);
}
