// SPDX-License-Identifier: GPL-2.0
/*
 * vhost_worker_start: how long a 16-queue vhost-blk device takes to start
 * with a worker per ring, three ways:
 *   kernel  the kernel's own policy (worker_pool=0): SET_BACKEND makes
 *           a worker for rings 1..15 as they start;
 *   set     VHOST_SET_VRING_WORKER(VHOST_VRING_NEW_WORKER) for rings
 *           1..15, then SET_BACKEND;
 *   attach  VHOST_NEW_WORKER + VHOST_ATTACH_VRING_WORKER for rings 1..15,
 *           then SET_BACKEND.
 * Each is timed from its first worker call (or SET_BACKEND) to SET_BACKEND's
 * return, on a fresh device every round (rings set up beforehand, not
 * timed), the three ways interleaved; ring 0 stays on the default worker in
 * all three.  Prints, per way, the median, min and max in microseconds.
 *
 *   vhost_worker_start BACKEND [ROUNDS]   (default 15 rounds)
 *
 * Run as root with vhost_blk.worker_pool=0 (the default).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include "vhost_blk_lib.h"

#define NQ	16
#define WAYS	3

static const char *const way_name[WAYS] = { "kernel", "set", "attach" };

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* One device started @way's way: the microseconds it took, or -1. */
static double start_once(int way, int backend)
{
	struct vhost_worker_state st;
	struct vhost_vring_worker w;
	struct vmm_blk b;
	double t0, t;
	unsigned int q;

	if (vmm_blk_open(&b, NQ, 64, VMM_BLK_FEATURES, 16 << 20)) {
		perror("vmm_blk_open");
		return -1;
	}
	t0 = now_us();
	for (q = 1; q < NQ && way; q++) {
		if (way == 1) {
			w = (struct vhost_vring_worker){
				.index = q, .worker_id = VHOST_VRING_NEW_WORKER };
			if (ioctl(b.fd, VHOST_SET_VRING_WORKER, &w))
				goto fail;
			continue;
		}
		memset(&st, 0, sizeof(st));
		if (ioctl(b.fd, VHOST_NEW_WORKER, &st))
			goto fail;
		w = (struct vhost_vring_worker){ .index = q,
						 .worker_id = st.worker_id };
		if (ioctl(b.fd, VHOST_ATTACH_VRING_WORKER, &w))
			goto fail;
	}
	if (vmm_blk_set_backend(&b, backend))
		goto fail;
	t = now_us() - t0;
	vmm_blk_close(&b);
	return t;
fail:
	fprintf(stderr, "%s, ring %u: %s\n", way_name[way], q, strerror(errno));
	vmm_blk_close(&b);
	return -1;
}

int main(int argc, char **argv)
{
	int rounds = argc > 2 ? atoi(argv[2]) : 15, backend, i, way;
	double *t[WAYS];

	if (argc < 2 || rounds < 1) {
		fprintf(stderr, "usage: %s BACKEND [ROUNDS]\n", argv[0]);
		return 2;
	}
	backend = open(argv[1], O_RDWR);
	if (backend < 0) {
		perror(argv[1]);
		return 1;
	}
	for (way = 0; way < WAYS; way++) {
		t[way] = calloc(rounds, sizeof(double));
		if (!t[way])
			return 1;
	}
	/* One round of each first, untimed: the caches warm alike. */
	for (way = 0; way < WAYS; way++)
		if (start_once(way, backend) < 0)
			return 1;
	for (i = 0; i < rounds; i++)
		for (way = 0; way < WAYS; way++) {
			t[way][i] = start_once(way, backend);
			if (t[way][i] < 0)
				return 1;
		}
	printf("# start of a %d-queue vhost-blk device, a worker per ring, %d rounds (us)\n",
	       NQ, rounds);
	printf("%-8s %10s %10s %10s\n", "way", "median", "min", "max");
	for (way = 0; way < WAYS; way++) {
		qsort(t[way], rounds, sizeof(double), cmp_double);
		printf("%-8s %10.0f %10.0f %10.0f\n", way_name[way],
		       rounds % 2 ? t[way][rounds / 2] :
		       (t[way][rounds / 2 - 1] + t[way][rounds / 2]) / 2,
		       t[way][0], t[way][rounds - 1]);
	}
	return 0;
}
