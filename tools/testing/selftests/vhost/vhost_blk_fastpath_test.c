// SPDX-License-Identifier: GPL-2.0
/*
 * vhost-blk's fast path: busy polling (VHOST_SET/GET_VRING_BUSYLOOP_TIMEOUT
 * and the busyloop_timeout module parameter), the per-ring request slots
 * (more requests than slots, long chains beyond a slot's own iovecs) and
 * the bio path for block devices next to the kiocb path (bio_submit).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/mount.h>

#include "../kselftest_harness.h"
#include "vhost_test.h"
#include "vhost_vmm.h"
#include "vhost_blk_lib.h"

#define IMG		"/tmp/vhost-blk-fastpath.img"
#define IMG_SIZE	(16ULL << 20)
#define PARAM_DIR	"/sys/module/vhost_blk/parameters/"

/* A vhost_blk module parameter as a number; -1 when it cannot be read. */
static long param_read(const char *name)
{
	char path[128], v[32] = "";
	FILE *f;

	snprintf(path, sizeof(path), PARAM_DIR "%s", name);
	f = fopen(path, "r");
	if (!f)
		return -1;
	if (!fgets(v, sizeof(v), f))
		v[0] = 0;
	fclose(f);
	if (v[0] == 'Y')
		return 1;
	if (v[0] == 'N')
		return 0;
	return strtol(v, NULL, 10);
}

static int param_write(const char *name, const char *val)
{
	char path[128];
	FILE *f;
	int r;

	snprintf(path, sizeof(path), PARAM_DIR "%s", name);
	f = fopen(path, "w");
	if (!f)
		return -1;
	r = fputs(val, f) < 0;
	return fclose(f) || r ? -1 : 0;
}

static int make_image(void)
{
	int fd = open(IMG, O_RDWR | O_CREAT | O_TRUNC, 0600);

	if (fd < 0)
		return -1;
	if (ftruncate(fd, IMG_SIZE)) {
		close(fd);
		return -1;
	}
	return fd;
}

static void fill(void *buf, size_t len, unsigned int gen)
{
	unsigned char *p = buf;
	size_t i;

	for (i = 0; i < len; i++)
		p[i] = (unsigned char)(i * 7 + gen * 31 + (i >> 9));
}

static int get_busyloop(int fd, unsigned int ring, unsigned int *us)
{
	struct vhost_vring_state s = { .index = ring };
	int r = ioctl(fd, VHOST_GET_VRING_BUSYLOOP_TIMEOUT, &s);

	*us = s.num;
	return r;
}

static int set_busyloop(int fd, unsigned int ring, unsigned int us)
{
	struct vhost_vring_state s = { .index = ring, .num = us };

	return ioctl(fd, VHOST_SET_VRING_BUSYLOOP_TIMEOUT, &s);
}

/* A device on a tmpfs file: every prerequisite but /dev/vhost-blk is ours. */
FIXTURE(dev) {
	struct vmm_blk b;
	int img;
	void *buf;
	long busyloop_saved;	/* the module parameter, to restore, or -1 */
};

FIXTURE_SETUP(dev)
{
	const char *why = vhost_unusable("/dev/vhost-blk", "CONFIG_VHOST_BLK");

	self->img = -1;
	self->busyloop_saved = -1;
	if (why)
		SKIP(return, "%s", why);
	self->img = make_image();
	ASSERT_LE(0, self->img);
	ASSERT_EQ(0, vmm_blk_open(&self->b, 2, 64, 1ULL << VIRTIO_F_VERSION_1, 8 << 20));
	ASSERT_EQ(0, vmm_blk_set_backend(&self->b, self->img));
	self->buf = vmm_alloc(&self->b.vmm, 65536, 4096);
	ASSERT_NE(NULL, self->buf);
}

FIXTURE_TEARDOWN(dev)
{
	char val[32];

	if (self->busyloop_saved >= 0) {
		snprintf(val, sizeof(val), "%ld", self->busyloop_saved);
		param_write("busyloop_timeout", val);
	}
	if (self->img < 0)
		return;
	vmm_blk_close(&self->b);
	close(self->img);
	unlink(IMG);
}

/* The ioctls' semantics: per ring, read back, 0 disables, bad ring, owner. */
TEST_F_TIMEOUT(dev, busyloop_timeout_ioctls, 30)
{
	long def = param_read("busyloop_timeout");
	unsigned int us = 1;
	int other;

	/* A new device's rings start with the module parameter's value. */
	if (def >= 0) {
		ASSERT_EQ(0, get_busyloop(self->b.fd, 0, &us));
		EXPECT_EQ(def, us);
	}
	ASSERT_EQ(0, set_busyloop(self->b.fd, 1, 50));
	ASSERT_EQ(0, get_busyloop(self->b.fd, 1, &us));
	EXPECT_EQ(50, us);
	/* Per ring: ring 0 kept its own value. */
	ASSERT_EQ(0, get_busyloop(self->b.fd, 0, &us));
	EXPECT_EQ(def >= 0 ? def : 0, us);
	ASSERT_EQ(0, set_busyloop(self->b.fd, 1, 0));
	ASSERT_EQ(0, get_busyloop(self->b.fd, 1, &us));
	EXPECT_EQ(0, us);
	/* A ring the device does not have. */
	EXPECT_EQ(-1, set_busyloop(self->b.fd, VHOST_BLK_MAX_QUEUES, 10));
	EXPECT_EQ(ENOBUFS, errno);
	EXPECT_EQ(-1, get_busyloop(self->b.fd, VHOST_BLK_MAX_QUEUES, &us));
	EXPECT_EQ(ENOBUFS, errno);
	EXPECT_EQ(-1, set_busyloop(self->b.fd, ~0U, 10));
	EXPECT_EQ(ENOBUFS, errno);
	/* Only the owner: a device with no owner yet refuses it. */
	other = open("/dev/vhost-blk", O_RDWR);
	ASSERT_LE(0, other);
	EXPECT_EQ(-1, set_busyloop(other, 0, 10));
	EXPECT_EQ(EPERM, errno);
	close(other);
	/* RESET_OWNER gives the rings the module parameter's value again. */
	ASSERT_EQ(0, set_busyloop(self->b.fd, 0, 77));
	ASSERT_EQ(0, ioctl(self->b.fd, VHOST_RESET_OWNER, NULL));
	ASSERT_EQ(0, ioctl(self->b.fd, VHOST_SET_OWNER, NULL));
	ASSERT_EQ(0, get_busyloop(self->b.fd, 0, &us));
	EXPECT_EQ(def >= 0 ? def : 0, us);
	/* At most VHOST_BLK_MAX_BUSYLOOP_TIMEOUT, set or inherited. */
	EXPECT_EQ(-1, set_busyloop(self->b.fd, 0, VHOST_BLK_MAX_BUSYLOOP_TIMEOUT + 1));
	EXPECT_EQ(EINVAL, errno);
	ASSERT_EQ(0, set_busyloop(self->b.fd, 0, VHOST_BLK_MAX_BUSYLOOP_TIMEOUT));
	if (def < 0)
		return;
	/*
	 * A non-zero module parameter is what new and reset devices start
	 * with; one over the maximum gives them the maximum.
	 */
	self->busyloop_saved = def;
	ASSERT_EQ(0, param_write("busyloop_timeout", "30"));
	other = open("/dev/vhost-blk", O_RDWR);
	ASSERT_LE(0, other);
	ASSERT_EQ(0, ioctl(other, VHOST_SET_OWNER, NULL));
	EXPECT_EQ(0, get_busyloop(other, 3, &us));
	EXPECT_EQ(30, us);
	ASSERT_EQ(0, param_write("busyloop_timeout", "20000"));
	ASSERT_EQ(0, ioctl(self->b.fd, VHOST_RESET_OWNER, NULL));
	ASSERT_EQ(0, ioctl(self->b.fd, VHOST_SET_OWNER, NULL));
	EXPECT_EQ(0, get_busyloop(self->b.fd, 0, &us));
	EXPECT_EQ(VHOST_BLK_MAX_BUSYLOOP_TIMEOUT, us);
	/* Rings already open keep theirs. */
	EXPECT_EQ(0, get_busyloop(other, 3, &us));
	EXPECT_EQ(30, us);
	close(other);
}

/* Run @tid on CPU @cpu only (best effort: fewer CPUs, or not allowed). */
static void pin(pid_t tid, int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	sched_setaffinity(tid, sizeof(set), &set);
}

/*
 * Busy polling really polls: once a request has been returned, the worker
 * watches the ring with guest notifications off, so a request the driver
 * publishes without a kick is served within the timeout.  The worker stops
 * polling when the scheduler wants its CPU (the test and the worker are
 * pinned apart to make that rare), so a request that waits is kicked and
 * counted; at least one must be served unkicked.  With 0 nothing polls,
 * and no request is served before its kick.
 */
TEST_F_TIMEOUT(dev, polling_ring_serves_requests_without_kicks, 120)
{
	struct vmm_vq *vq = &self->b.vq[0];
	int i, st, served = 0, tid;

	if (sysconf(_SC_NPROCESSORS_ONLN) > 1 &&
	    vmm_owner_workers(getpid(), &tid, NULL, 1) == 1) {
		pin(tid, 0);
		pin(0, 1);
	}
	/*
	 * The longest a ring takes (10 ms): the next request is posted
	 * right after the last one came back, well within it even for a
	 * debug kernel under TCG.
	 */
	ASSERT_EQ(0, set_busyloop(self->b.fd, 0, VHOST_BLK_MAX_BUSYLOOP_TIMEOUT));
	ASSERT_EQ(VIRTIO_BLK_S_OK,
		  vmm_blk_do(&self->b, 0, VIRTIO_BLK_T_IN, 0, self->buf, 4096));
	for (i = 0; i < 10; i++) {
		ASSERT_LE(0, vmm_blk_post(&self->b, 0, VIRTIO_BLK_T_IN, 8 * i,
					  self->buf, 4096, 1, false, NULL));
		/* No kick. */
		st = vmm_blk_reap(&self->b, 0, NULL, NULL, 2000);
		if (st == VIRTIO_BLK_S_OK) {
			served++;
			continue;
		}
		vmm_vq_kick(vq);
		ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_reap(&self->b, 0, NULL, NULL, 5000));
	}
	TH_LOG("%d of 10 requests served without a kick", served);
	EXPECT_LT(0, served);

	ASSERT_EQ(0, set_busyloop(self->b.fd, 0, 0));
	/* Let the poll started by the last return time out. */
	usleep(1200 * 1000);
	ASSERT_EQ(VIRTIO_BLK_S_OK,
		  vmm_blk_do(&self->b, 0, VIRTIO_BLK_T_IN, 0, self->buf, 4096));
	EXPECT_FALSE(vq->vr.used->flags & VRING_USED_F_NO_NOTIFY);
	for (i = 0; i < 3; i++) {
		ASSERT_LE(0, vmm_blk_post(&self->b, 0, VIRTIO_BLK_T_IN, 0, self->buf,
					  4096, 1, false, NULL));
		EXPECT_EQ(-1, vmm_blk_reap(&self->b, 0, NULL, NULL, 300))
			TH_LOG("served without a kick while polling is off");
		vmm_vq_kick(vq);
		EXPECT_EQ(VIRTIO_BLK_S_OK, vmm_blk_reap(&self->b, 0, NULL, NULL, 5000));
	}
}

/*
 * A ring larger than the slots a ring allocates (1024): the guest may
 * publish every descriptor at once; all complete, each exactly once, as
 * slots come free.
 */
TEST(more_requests_than_slots)
{
	const unsigned int qsize = 2048;
	const char *why = vhost_unusable("/dev/vhost-blk", "CONFIG_VHOST_BLK");
	unsigned char *seen;
	struct vmm_blk b;
	unsigned int i, n = 0;
	void *buf, *tok;
	int img;

	if (why)
		SKIP(return, "%s", why);
	img = make_image();
	ASSERT_LE(0, img);
	ASSERT_EQ(0, vmm_blk_open(&b, 1, qsize, 1ULL << VIRTIO_F_VERSION_1, 16 << 20));
	ASSERT_EQ(0, vmm_blk_set_backend(&b, img));
	buf = vmm_alloc(&b.vmm, 512 * qsize, 4096);
	ASSERT_NE(NULL, buf);
	seen = calloc(qsize, 1);
	ASSERT_NE(NULL, seen);
	for (i = 0; i < qsize; i++)
		/* Indirect: one descriptor of the ring each. */
		ASSERT_LE(0, vmm_blk_post(&b, 0, VIRTIO_BLK_T_IN, i, (char *)buf + 512 * i,
					  512, 1, true, (void *)(uintptr_t)(i + 1)));
	vmm_vq_kick(&b.vq[0]);
	while (n < qsize) {
		int st = vmm_blk_reap(&b, 0, &tok, NULL, 10000);

		ASSERT_EQ(VIRTIO_BLK_S_OK, st) TH_LOG("after %u of %u requests", n, qsize);
		i = (uintptr_t)tok - 1;
		ASSERT_LT(i, qsize);
		EXPECT_EQ(0, seen[i]) TH_LOG("request %u returned twice", i);
		seen[i] = 1;
		n++;
	}
	EXPECT_EQ(-1, vmm_blk_reap(&b, 0, NULL, NULL, 100));
	free(seen);
	vmm_blk_close(&b);
	close(img);
	unlink(IMG);
}

/*
 * Chains longer than a slot's own iovecs (8): 32 data segments, direct and
 * indirect, data checked; then short ones again on the same slots.
 */
TEST_F_TIMEOUT(dev, long_chains_then_short, 30)
{
	unsigned char *want = malloc(65536);
	int i;

	ASSERT_NE(NULL, want);
	for (i = 0; i < 4; i++) {
		void *tok;

		fill(self->buf, 65536, i);
		memcpy(want, self->buf, 65536);
		ASSERT_LE(0, vmm_blk_post(&self->b, 0, VIRTIO_BLK_T_OUT, 128 * i, self->buf,
					  65536, 32, i & 1, NULL));
		vmm_vq_kick(&self->b.vq[0]);
		ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_reap(&self->b, 0, &tok, NULL, 5000));
		memset(self->buf, 0, 65536);
		ASSERT_LE(0, vmm_blk_post(&self->b, 0, VIRTIO_BLK_T_IN, 128 * i, self->buf,
					  65536, i & 1 ? 32 : 1, !(i & 1), NULL));
		vmm_vq_kick(&self->b.vq[0]);
		ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_reap(&self->b, 0, &tok, NULL, 5000));
		EXPECT_EQ(0, memcmp(want, self->buf, 65536)) TH_LOG("round %d", i);
	}
	free(want);
}

/*
 * Requests the bio path took so far (debugfs vhost-blk/bio_requests), or -1
 * without debugfs.
 */
#define BIO_REQUESTS	"/sys/kernel/debug/vhost-blk/bio_requests"

static long bio_requests(void)
{
	const char *path = BIO_REQUESTS;
	char buf[32];
	FILE *f;
	long n;

	if (access(path, F_OK))
		mount("debugfs", "/sys/kernel/debug", "debugfs", 0, NULL);
	f = fopen(path, "r");
	if (!f)
		return -1;
	n = fgets(buf, sizeof(buf), f) ? strtol(buf, NULL, 10) : -1;
	fclose(f);
	return n;
}

/*
 * The bio path (bio_submit=1, block devices opened O_DIRECT) and the kiocb
 * path serve the same data (each request counted on the path it was meant
 * to take, where debugfs shows the bio path's count): each reads what the other wrote, on the same
 * memory-backed null_blk; a buffer not aligned for the device's DMA fails
 * the same way on both; and a buffered backend of the same device sees
 * what the bio path wrote, and the other way round.
 */
TEST(bio_and_kiocb_paths_agree)
{
	const char *why = vhost_unusable("/dev/vhost-blk", "CONFIG_VHOST_BLK");
	long saved = param_read("bio_submit"), bios;
	unsigned char *want;
	struct vmm_blk b;
	int dev, buffered, i;
	char *buf;

	if (!why)
		why = vhost_nullb_unusable(true, false);
	if (why)
		SKIP(return, "%s", why);
	if (saved < 0)
		SKIP(return, "no vhost_blk.bio_submit parameter (kernel without the bio path)");
	if (geteuid())
		SKIP(return, "needs root (writes /sys/module/vhost_blk/parameters/bio_submit)");
	dev = open("/dev/nullb0", O_RDWR | O_DIRECT);
	ASSERT_LE(0, dev);
	ASSERT_EQ(0, vmm_blk_open(&b, 1, 64, 1ULL << VIRTIO_F_VERSION_1, 8 << 20));
	ASSERT_EQ(0, vmm_blk_set_backend(&b, dev));
	buf = vmm_alloc(&b.vmm, 2 << 20, 4096);
	want = malloc(65536);
	ASSERT_NE(NULL, buf);
	ASSERT_NE(NULL, want);
	for (i = 0; i < 4; i++) {
		/* Write on one path, read back on the other. */
		ASSERT_EQ(0, param_write("bio_submit", i & 1 ? "0" : "1"));
		fill(buf, 65536, 10 + i);
		memcpy(want, buf, 65536);
		bios = bio_requests();
		ASSERT_EQ(VIRTIO_BLK_S_OK,
			  vmm_blk_do(&b, 0, VIRTIO_BLK_T_OUT, 2048 + 128 * i, buf, 65536));
		/* Each went the path it was meant to (the counter, if any). */
		if (bios >= 0)
			EXPECT_EQ(bios + !(i & 1), bio_requests()) TH_LOG("write, round %d", i);
		ASSERT_EQ(0, param_write("bio_submit", i & 1 ? "1" : "0"));
		memset(buf, 0, 65536);
		bios = bio_requests();
		ASSERT_EQ(VIRTIO_BLK_S_OK,
			  vmm_blk_do(&b, 0, VIRTIO_BLK_T_IN, 2048 + 128 * i, buf, 65536));
		if (bios >= 0)
			EXPECT_EQ(bios + (i & 1), bio_requests()) TH_LOG("read, round %d", i);
		EXPECT_EQ(0, memcmp(want, buf, 65536)) TH_LOG("round %d", i);
		/*
		 * Memory not aligned for the device's DMA: an error either
		 * way.  An odd address, since the alignment differs (6.1's
		 * null_blk: 512 bytes, mainline's: 2).
		 */
		EXPECT_EQ(VIRTIO_BLK_S_IOERR,
			  vmm_blk_do(&b, 0, VIRTIO_BLK_T_IN, 2048, buf + 1, 4096));
		EXPECT_EQ(VIRTIO_BLK_S_IOERR,
			  vmm_blk_do(&b, 0, VIRTIO_BLK_T_OUT, 2048, buf + 1, 4096));
	}
	/*
	 * The page cache stays coherent: a buffered backend caches a range,
	 * the bio path writes it, the buffered backend reads the new data
	 * (and the other way round).
	 */
	ASSERT_EQ(0, param_write("bio_submit", "1"));
	buffered = open("/dev/nullb0", O_RDWR);
	ASSERT_LE(0, buffered);
	for (i = 0; i < 2; i++) {
		ASSERT_EQ(0, vmm_blk_set_backend(&b, buffered));
		ASSERT_EQ(VIRTIO_BLK_S_OK,
			  vmm_blk_do(&b, 0, VIRTIO_BLK_T_IN, 4096, buf, 65536));
		ASSERT_EQ(0, vmm_blk_set_backend(&b, dev));
		fill(buf, 65536, 20 + i);
		memcpy(want, buf, 65536);
		ASSERT_EQ(VIRTIO_BLK_S_OK,
			  vmm_blk_do(&b, 0, VIRTIO_BLK_T_OUT, 4096, buf, 65536));
		ASSERT_EQ(0, vmm_blk_set_backend(&b, buffered));
		memset(buf, 0, 65536);
		ASSERT_EQ(VIRTIO_BLK_S_OK,
			  vmm_blk_do(&b, 0, VIRTIO_BLK_T_IN, 4096, buf, 65536));
		EXPECT_EQ(0, memcmp(want, buf, 65536))
			TH_LOG("buffered read after a direct write: stale page cache");
		/* And a direct read after a buffered write. */
		fill(buf, 65536, 30 + i);
		memcpy(want, buf, 65536);
		ASSERT_EQ(VIRTIO_BLK_S_OK,
			  vmm_blk_do(&b, 0, VIRTIO_BLK_T_OUT, 4096, buf, 65536));
		ASSERT_EQ(0, vmm_blk_set_backend(&b, dev));
		memset(buf, 0, 65536);
		ASSERT_EQ(VIRTIO_BLK_S_OK,
			  vmm_blk_do(&b, 0, VIRTIO_BLK_T_IN, 4096, buf, 65536));
		EXPECT_EQ(0, memcmp(want, buf, 65536))
			TH_LOG("direct read after a buffered write: data still in the page cache");
	}
	close(buffered);

	/* More than one bio's worth of pages (1 MiB + 64 KiB) still works. */
	ASSERT_EQ(0, param_write("bio_submit", "1"));
	EXPECT_EQ(VIRTIO_BLK_S_OK,
		  vmm_blk_do(&b, 0, VIRTIO_BLK_T_IN, 0, buf, (1 << 20) + 65536));
	param_write("bio_submit", saved ? "1" : "0");
	free(want);
	vmm_blk_close(&b);
	close(dev);
}

TEST_HARNESS_MAIN
