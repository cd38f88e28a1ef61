// SPDX-License-Identifier: GPL-2.0
/*
 * vhost-user frontend for the selftests' benchmark; see vhost_user_lib.h.
 * Message layout from QEMU's docs/interop/vhost-user.rst.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "vhost_user_lib.h"

enum {
	VU_GET_FEATURES = 1,
	VU_SET_FEATURES = 2,
	VU_SET_OWNER = 3,
	VU_SET_MEM_TABLE = 5,
	VU_SET_VRING_NUM = 8,
	VU_SET_VRING_ADDR = 9,
	VU_SET_VRING_BASE = 10,
	VU_SET_VRING_KICK = 12,
	VU_SET_VRING_CALL = 13,
};

#define VU_VERSION	0x1
#define VU_REPLY	0x4

struct vu_region {
	uint64_t guest_phys_addr;
	uint64_t memory_size;
	uint64_t userspace_addr;
	uint64_t mmap_offset;
};

/* Every message: this header, then @size bytes of payload. */
struct vu_hdr {
	uint32_t request;
	uint32_t flags;
	uint32_t size;
};

/* VHOST_USER_SET_MEM_TABLE with the one region the tests use. */
struct vu_mem {
	uint32_t nregions;
	uint32_t padding;
	struct vu_region region;
};

/* Send @request with @size bytes of @payload and, when @fd >= 0, one fd. */
static int vu_send(int sock, uint32_t request, const void *payload, uint32_t size,
		   int fd)
{
	struct vu_hdr h = { .request = request, .flags = VU_VERSION, .size = size };
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov[2] = {
		{ .iov_base = &h, .iov_len = sizeof(h) },
		{ .iov_base = (void *)payload, .iov_len = size },
	};
	struct msghdr mh = { .msg_iov = iov, .msg_iovlen = size ? 2 : 1 };

	if (fd >= 0) {
		struct cmsghdr *c;

		memset(cbuf, 0, sizeof(cbuf));
		mh.msg_control = cbuf;
		mh.msg_controllen = sizeof(cbuf);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	if (sendmsg(sock, &mh, 0) != (ssize_t)(sizeof(h) + size))
		return -EIO;
	return 0;
}

static int vu_get_u64(int sock, uint32_t request, uint64_t *v)
{
	struct vu_hdr h;

	if (vu_send(sock, request, NULL, 0, -1))
		return -EIO;
	if (recv(sock, &h, sizeof(h), MSG_WAITALL) != sizeof(h) ||
	    h.request != request || !(h.flags & VU_REPLY) || h.size != sizeof(*v) ||
	    recv(sock, v, sizeof(*v), MSG_WAITALL) != sizeof(*v))
		return -EPROTO;
	return 0;
}

int vu_connect(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int s;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -errno;
	if (connect(s, (struct sockaddr *)&sa, sizeof(sa))) {
		int e = errno;

		close(s);
		return -e;
	}
	return s;
}

int vu_get_features(int sock, uint64_t *features)
{
	return vu_get_u64(sock, VU_GET_FEATURES, features);
}

int vu_set_features(int sock, uint64_t features)
{
	return vu_send(sock, VU_SET_FEATURES, &features, sizeof(features), -1);
}

int vu_set_owner(int sock)
{
	return vu_send(sock, VU_SET_OWNER, NULL, 0, -1);
}

int vu_set_mem_table(int sock, const struct vmm *vmm)
{
	struct vu_mem m = {
		.nregions = 1,
		.region = {
			.guest_phys_addr = vmm->gpa_base,
			.memory_size = vmm->size,
			.userspace_addr = (uintptr_t)vmm->mem,
			.mmap_offset = 0,
		},
	};

	if (!vmm->shared)
		return -EINVAL;
	return vu_send(sock, VU_SET_MEM_TABLE, &m, sizeof(m), vmm->memfd);
}

int vu_vq_setup(int sock, struct vmm_vq *vq)
{
	struct vhost_vring_state num = { .index = vq->index, .num = vq->num };
	struct vhost_vring_state base = { .index = vq->index, .num = 0 };
	struct vhost_vring_addr addr = {
		.index = vq->index,
		.desc_user_addr = (uintptr_t)vq->vr.desc,
		.avail_user_addr = (uintptr_t)vq->vr.avail,
		.used_user_addr = (uintptr_t)vq->vr.used,
	};
	uint64_t index = vq->index;	/* and no "invalid fd" flag */
	int r;

	r = vu_send(sock, VU_SET_VRING_NUM, &num, sizeof(num), -1);
	if (!r)
		r = vu_send(sock, VU_SET_VRING_BASE, &base, sizeof(base), -1);
	if (!r)
		r = vu_send(sock, VU_SET_VRING_ADDR, &addr, sizeof(addr), -1);
	/* Call before kick: the kick fd starts the ring. */
	if (!r)
		r = vu_send(sock, VU_SET_VRING_CALL, &index, sizeof(index), vq->call);
	if (!r)
		r = vu_send(sock, VU_SET_VRING_KICK, &index, sizeof(index), vq->kick);
	return r;
}

int vmm_blk_open_user(struct vmm_blk *b, const char *path, unsigned int nq,
		      unsigned int qsize, uint64_t features, size_t mem_size)
{
	uint64_t offered;
	unsigned int q;
	int r;

	vmm_blk_reset(b, nq);
	b->fd = vu_connect(path);
	if (b->fd < 0)
		return b->fd;
	r = vu_get_features(b->fd, &offered);
	if (r)
		return r;
	if ((features & offered) != features)
		return -EOPNOTSUPP;
	r = vu_set_owner(b->fd);
	if (!r)
		r = vu_set_features(b->fd, features);
	if (!r)
		r = vmm_init_shared(&b->vmm, mem_size);
	if (!r)
		r = vu_set_mem_table(b->fd, &b->vmm);
	for (q = 0; !r && q < nq; q++) {
		r = vmm_vq_init(&b->vmm, &b->vq[q], q, qsize);
		if (!r)
			r = vmm_blk_slots_init(b, q, qsize);
		if (!r)
			r = vu_vq_setup(b->fd, &b->vq[q]);
	}
	return r;
}
