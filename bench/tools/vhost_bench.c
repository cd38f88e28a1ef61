// SPDX-License-Identifier: GPL-2.0
/*
 * vhost_bench: throughput through vhost devices, driven by the selftests'
 * userspace VMM/driver library.  Not a test: it prints figures.
 *
 *   vhost_bench blk -d DEV [-q QUEUES] [-D DEPTH] [-s SECONDS] [-B BS]
 *                   [-p perqueue|shared] [-b USEC] [-w]
 *	4k (or BS bytes, a multiple of 512) random reads (-w: writes) on DEV
 *	through /dev/vhost-blk, DEPTH requests in flight on each of QUEUES
 *	rings, one driver thread per ring.  perqueue: each ring on its own
 *	worker (the default policy); shared: every ring bound to the device's
 *	default worker.  -b USEC: every ring busy-polls for up to USEC
 *	microseconds before its worker sleeps (VHOST_SET_VRING_BUSYLOOP_TIMEOUT
 *	once the rings are set up; 0 disables; without -b rings keep the
 *	module's default), as vduse_blk_bridge -b does.
 *   vhost_bench blk -d DEV -u SOCKET [...]
 *	The same driver and load against a vhost-user-blk backend on unix
 *	socket SOCKET (qemu-storage-daemon --export type=vhost-user-blk)
 *	serving DEV; DEV only gives the capacity (-b does not apply).
 *   vhost_bench net [-s SECONDS]
 *	frames/s through vhost-net over a tap with the default single worker:
 *	guest TX to the wire and wire to guest RX, 256-byte frames.
 *
 * Prints one JSON object on stdout.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <linux/fs.h>
#include <linux/virtio_net.h>

#include "vhost_vmm.h"
#include "vhost_blk_lib.h"
#include "vhost_net_lib.h"
#include "vhost_user_lib.h"

/* What both sides negotiate: a modern driver that can flush. */
#define BENCH_FEATURES ((1ULL << VIRTIO_F_VERSION_1) | (1ULL << VIRTIO_BLK_F_FLUSH))

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

struct blk_job {
	struct vmm_blk *b;
	unsigned int q, depth, bs;
	uint64_t sectors;
	bool write;
	double end;
	unsigned long long done, errors;
	char *bufs;
	unsigned int seed;
};

static uint64_t pick(struct blk_job *j)
{
	uint64_t blocks = j->sectors / (j->bs / 512);

	return (uint64_t)(rand_r(&j->seed) % blocks) * (j->bs / 512);
}

static void *blk_job_run(void *arg)
{
	struct blk_job *j = arg;
	uint32_t type = j->write ? VIRTIO_BLK_T_OUT : VIRTIO_BLK_T_IN;
	unsigned int i;
	void *tok;

	for (i = 0; i < j->depth; i++)
		if (vmm_blk_post(j->b, j->q, type, pick(j), j->bufs + (size_t)i * j->bs,
				 j->bs, 1, false, j->bufs + (size_t)i * j->bs) < 0)
			return NULL;
	vmm_vq_kick(&j->b->vq[j->q]);
	while (now() < j->end) {
		unsigned int n = 0;
		int st;

		/* Reap what completed, resubmit as many, kick once. */
		do {
			st = vmm_blk_reap(j->b, j->q, &tok, NULL, n ? 0 : 5000);
			if (st < 0)
				break;
			if (st != VIRTIO_BLK_S_OK)
				j->errors++;
			j->done++;
			vmm_blk_post(j->b, j->q, type, pick(j), tok, j->bs, 1, false, tok);
			n++;
		} while (n < j->depth);
		if (!n) {
			fprintf(stderr, "ring %u stalled\n", j->q);
			j->errors++;
			break;
		}
		vmm_vq_kick(&j->b->vq[j->q]);
	}
	/* Drain. */
	while (vmm_vq_in_flight(&j->b->vq[j->q]) &&
	       vmm_blk_reap(j->b, j->q, NULL, NULL, 5000) >= 0)
		;
	return NULL;
}

static int bench_blk(int argc, char **argv)
{
	const char *dev = NULL, *policy = "perqueue", *sock = NULL;
	unsigned int nq = 1, depth = 32, bs = 4096, secs = 5, q;
	long busyloop = -1;
	struct blk_job jobs[VHOST_BLK_MAX_QUEUES];
	pthread_t th[VHOST_BLK_MAX_QUEUES];
	unsigned long long total = 0, errors = 0;
	bool write = false;
	struct vmm_blk b;
	uint64_t bytes;
	struct stat st;
	double t0, t1;
	int opt, fd, r;
	char *end;

	while ((opt = getopt(argc, argv, "d:q:D:s:B:b:p:u:w")) != -1) {
		switch (opt) {
		case 'd':
			dev = optarg;
			break;
		case 'q':
			nq = atoi(optarg);
			break;
		case 'D':
			depth = atoi(optarg);
			break;
		case 's':
			secs = atoi(optarg);
			break;
		case 'B':
			bs = atoi(optarg);
			break;
		case 'b':
			errno = 0;
			busyloop = strtol(optarg, &end, 10);
			if (errno || end == optarg || *end || busyloop < 0 ||
			    busyloop > UINT32_MAX) {
				fprintf(stderr, "vhost_bench: -b %s: not a timeout in us\n",
					optarg);
				return 2;
			}
			break;
		case 'p':
			policy = optarg;
			break;
		case 'u':
			sock = optarg;
			break;
		case 'w':
			write = true;
			break;
		default:
			return 2;
		}
	}
	if (!dev || !nq || nq > VHOST_BLK_MAX_QUEUES || !depth || depth * 2 > 256 ||
	    !bs || bs % 512 || (sock && busyloop >= 0)) {
		fprintf(stderr, "usage: vhost_bench blk -d DEV [-q 1..16] [-D 1..128] %s\n",
			"[-B BS] [-b USEC (not with -u)] ...");
		return 2;
	}
	fd = open(dev, O_RDWR | O_DIRECT);
	if (fd < 0 || fstat(fd, &st)) {
		perror(dev);
		return 1;
	}
	bytes = st.st_size;
	if (S_ISBLK(st.st_mode) && ioctl(fd, BLKGETSIZE64, &bytes)) {
		perror("BLKGETSIZE64");
		return 1;
	}
	/*
	 * FLUSH, as a Linux guest negotiates it: without it both sides must
	 * make every write stable (writethrough).
	 */
	if (sock) {
		r = vmm_blk_open_user(&b, sock, nq, 256, BENCH_FEATURES,
				      (size_t)nq * depth * bs + (8 << 20));
	} else {
		r = vmm_blk_open(&b, nq, 256, BENCH_FEATURES,
				 (size_t)nq * depth * bs + (8 << 20));
	}
	if (r) {
		fprintf(stderr, "%s: %s\n", sock ? sock : "vhost-blk", strerror(-r));
		return 1;
	}
	if (!sock && !strcmp(policy, "shared")) {
		/* Bind every ring to the default worker before it starts. */
		for (q = 0; q < nq; q++) {
			struct vhost_vring_worker w = { .index = q, .worker_id = 0 };

			if (ioctl(b.fd, VHOST_ATTACH_VRING_WORKER, &w)) {
				perror("VHOST_ATTACH_VRING_WORKER");
				return 1;
			}
		}
	}
	/* Every ring is set up: its busy-poll timeout, before requests flow. */
	for (q = 0; busyloop >= 0 && q < nq; q++) {
		struct vhost_vring_state t = { .index = q, .num = busyloop };

		if (ioctl(b.fd, VHOST_SET_VRING_BUSYLOOP_TIMEOUT, &t)) {
			perror("VHOST_SET_VRING_BUSYLOOP_TIMEOUT");
			return 1;
		}
	}
	if (!sock && vmm_blk_set_backend(&b, fd)) {
		perror("VHOST_BLK_SET_BACKEND");
		return 1;
	}
	t0 = now();
	for (q = 0; q < nq; q++) {
		jobs[q] = (struct blk_job){
			.b = &b, .q = q, .depth = depth, .bs = bs,
			.sectors = bytes / 512, .write = write,
			.end = t0 + secs, .seed = q * 7919 + 1,
			.bufs = vmm_alloc(&b.vmm, (size_t)depth * bs, 4096),
		};
		pthread_create(&th[q], NULL, blk_job_run, &jobs[q]);
	}
	for (q = 0; q < nq; q++) {
		pthread_join(th[q], NULL);
		total += jobs[q].done;
		errors += jobs[q].errors;
	}
	t1 = now();
	printf("{\"path\":\"%s\",\"queues\":%u,\"depth\":%u,\"bs\":%u,",
	       sock ? "qsd-vhost-user" : !strcmp(policy, "shared") ?
	       "vhost-blk-shared" : "vhost-blk-perqueue", nq, depth, bs);
	if (busyloop >= 0)
		printf("\"busyloop_us\":%ld,", busyloop);
	printf("\"rw\":\"%s\",\"iops\":%.0f,\"errors\":%llu,\"seconds\":%.2f}\n",
	       write ? "randwrite" : "randread", total / (t1 - t0), errors, t1 - t0);
	vmm_blk_close(&b);
	close(fd);
	return errors ? 1 : 0;
}

static int bench_net(int argc, char **argv)
{
	unsigned char frame[VMM_NET_BUF];
	unsigned long long tx = 0, rx = 0;
	unsigned int secs = 5, seq = 0;
	struct vmm_net n;
	double t0, end;
	int opt, r;

	while ((opt = getopt(argc, argv, "s:")) != -1) {
		if (opt != 's')
			return 2;
		secs = atoi(optarg);
	}
	r = vmm_net_open(&n, 256, "vmqbench%d");
	if (r || vmm_net_post_rx(&n, 256)) {
		fprintf(stderr, "vhost-net: %s\n", strerror(-r));
		return 1;
	}
	t0 = now();
	end = t0 + secs;
	while (now() < end) {
		unsigned int i;

		for (i = 0; i < 64; i++) {
			if (vmm_net_tx(&n, seq, 256, false) < 0)
				break;
			vmm_net_make_frame(frame, 256, seq++);
			vmm_net_wire_send(&n, frame, 256);
		}
		vmm_vq_kick(&n.vq[VMM_NET_TX]);
		/* Wire side: take what the guest sent. */
		while (vmm_net_wire_recv(&n, frame, sizeof(frame), tx + 64 > seq ? 0 : 100) > 0)
			if (vmm_net_is_ours(frame, 256))
				tx++;
		/* Guest side: take what arrived, give the buffers back. */
		for (;;) {
			void *buf;

			if (vmm_vq_get_used(&n.vq[VMM_NET_RX], NULL, &buf, 0) < 0)
				break;
			rx++;
			vmm_net_repost_rx(&n, buf);
		}
		vmm_vq_kick(&n.vq[VMM_NET_RX]);
		vmm_net_tx_reap(&n);
	}
	printf("{\"path\":\"vhost-net-default-worker\",\"tx_pps\":%.0f,", tx / (now() - t0));
	printf("\"rx_pps\":%.0f,\"pps\":%.0f}\n", rx / (now() - t0), (tx + rx) / (now() - t0));
	vmm_net_close(&n);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "blk"))
		return bench_blk(argc - 1, argv + 1);
	if (argc > 1 && !strcmp(argv[1], "net"))
		return bench_net(argc - 1, argv + 1);
	fprintf(stderr, "usage: vhost_bench blk|net [options] (see the top of vhost_bench.c)\n");
	return 2;
}
