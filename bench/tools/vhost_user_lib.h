/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The frontend ("master") side of the vhost-user protocol, just enough to
 * hand the selftests' rings and memory to a vhost-user backend such as
 * qemu-storage-daemon's vhost-user-blk export, so that the benchmark can
 * drive a userspace backend and vhost-blk with the very same driver.
 *
 * Protocol features are not negotiated: rings are enabled as soon as their
 * kick eventfd arrives, and no request asks for a reply except GET_*.
 */
#ifndef VHOST_USER_LIB_H
#define VHOST_USER_LIB_H

#include <stdint.h>
#include "vhost_blk_lib.h"

/* Connect to the backend listening on unix socket @path; a fd or -errno. */
int vu_connect(const char *path);
int vu_get_features(int sock, uint64_t *features);
int vu_set_features(int sock, uint64_t features);
int vu_set_owner(int sock);
/* The single region of @vmm, which must come from vmm_init_shared(). */
int vu_set_mem_table(int sock, const struct vmm *vmm);
/* SET_VRING_NUM, _BASE, _ADDR, _CALL and _KICK (which starts the ring). */
int vu_vq_setup(int sock, struct vmm_vq *vq);

/*
 * vmm_blk_open() against a vhost-user-blk backend listening on unix socket
 * @path instead of /dev/vhost-blk (b->fd is then the socket): the benchmark
 * drives a userspace backend with the very same driver.
 */
int vmm_blk_open_user(struct vmm_blk *b, const char *path, unsigned int nq,
		      unsigned int qsize, uint64_t features, size_t mem_size);

#endif
