// SPDX-License-Identifier: GPL-2.0
/*
 * vhost-blk through a userspace virtio-blk driver: every request type with
 * data checked against the backing store, block device and file backends,
 * direct and buffered, read-only backends, malformed requests, all queues on
 * their own workers, backend detach and swap under load, and dirty logging.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <signal.h>
#include <linux/loop.h>

#include "../kselftest_harness.h"
#include "vhost_test.h"
#include "vhost_vmm.h"
#include "vhost_blk_lib.h"

#define NULLB		"/dev/nullb0"
#define IMG		"/tmp/vhost-blk-test.img"
#define IMG_SIZE	(64ULL << 20)
#define QSIZE		128

#define EXT4_DIR	"/tmp/vhost-blk-ext4"
#define EXT4_IMG	EXT4_DIR "/disk.img"

/* null_blk, a tmpfs file, a loop device, a file on ext4 (O_DIRECT works). */
enum backend { BE_NULLB, BE_FILE, BE_LOOP, BE_EXT4_FILE };

static void fill(void *buf, size_t len, uint64_t sector, unsigned int gen)
{
	uint32_t *p = buf;
	size_t i;

	for (i = 0; i < len / 4; i++)
		p[i] = (uint32_t)(sector * 131 + i * 7 + gen * 1000003);
}

static bool is_zero(const void *buf, size_t len)
{
	const unsigned char *p = buf;

	return len == 0 || (p[0] == 0 && !memcmp(p, p + 1, len - 1));
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

/* Attach a loop device to @backing; returns its path in @path. */
static int make_loop(int backing, char *path, size_t len)
{
	int ctl = open("/dev/loop-control", O_RDWR), n, fd;

	if (ctl < 0)
		return -1;
	n = ioctl(ctl, LOOP_CTL_GET_FREE);
	close(ctl);
	if (n < 0)
		return -1;
	snprintf(path, len, "/dev/loop%d", n);
	fd = open(path, O_RDWR);
	if (fd < 0)
		return -1;
	if (ioctl(fd, LOOP_SET_FD, backing)) {
		close(fd);
		return -1;
	}
	close(fd);
	return 0;
}

static void drop_loop(const char *path)
{
	int fd = open(path, O_RDWR);

	if (fd >= 0) {
		ioctl(fd, LOOP_CLR_FD, 0);
		close(fd);
	}
}

/*
 * The file system under BE_EXT4_FILE is scaffolding, not what is tested:
 * under vhost_fault_inject.sh it is mounted and unmounted with fault
 * injection off for this process.  (A failed allocation in jbd2's proc
 * setup at mount is ignored, and its umount then warns, removing a proc
 * entry that was never made: a kernel splat that says nothing of vhost.)
 * Returns what /proc/self/make-it-fail held, 0 where it does not exist.
 */
static int faults_off(void)
{
	char c = '0';
	int fd = open("/proc/self/make-it-fail", O_RDONLY);

	if (fd < 0)
		return 0;
	if (read(fd, &c, 1) != 1)
		c = '0';
	close(fd);
	if (c != '0')
		write_str("/proc/self/make-it-fail", "0");
	return c != '0';
}

static void faults_restore(int was_on)
{
	if (was_on)
		write_str("/proc/self/make-it-fail", "1");
}

FIXTURE(blk) {
	struct vmm_blk b;
	int backing;		/* what vhost-blk serves */
	int check;		/* the same store, for checking behind its back */
	int img;
	char loop[32];
	bool mounted;
	uint64_t sectors;
	void *buf, *buf2;
};

FIXTURE_VARIANT(blk) {
	enum backend backend;
	bool direct;
};

FIXTURE_VARIANT_ADD(blk, nullb_direct) { .backend = BE_NULLB, .direct = true };
FIXTURE_VARIANT_ADD(blk, nullb_buffered) { .backend = BE_NULLB, .direct = false };
FIXTURE_VARIANT_ADD(blk, loop_direct) { .backend = BE_LOOP, .direct = true };
FIXTURE_VARIANT_ADD(blk, file_buffered) { .backend = BE_FILE, .direct = false };
FIXTURE_VARIANT_ADD(blk, ext4_file_direct) { .backend = BE_EXT4_FILE, .direct = true };

FIXTURE_SETUP(blk)
{
	const char *path = NULLB, *why;
	int flags = O_RDWR | (variant->direct ? O_DIRECT : 0), r;

	self->img = -1;
	self->check = -1;
	self->backing = -1;
	self->loop[0] = 0;
	why = vhost_unusable("/dev/vhost-blk", "CONFIG_VHOST_BLK");
	if (!why && variant->backend == BE_NULLB)
		why = vhost_nullb_unusable(true, false);
	/* Loop devices and mounting ext4 are root's. */
	if (!why && (variant->backend == BE_LOOP || variant->backend == BE_EXT4_FILE) &&
	    geteuid())
		why = "needs root (a loop device)";
	if (why)
		SKIP(return, "%s", why);
	if (variant->backend != BE_NULLB) {
		self->img = make_image();
		ASSERT_LE(0, self->img);
		path = IMG;
	}
	if (variant->backend == BE_LOOP || variant->backend == BE_EXT4_FILE) {
		if (make_loop(self->img, self->loop, sizeof(self->loop)))
			SKIP(return, "no loop device (CONFIG_BLK_DEV_LOOP)");
		path = self->loop;
	}
	if (variant->backend == BE_EXT4_FILE) {
		char cmd[128];
		int fd, faults;

		snprintf(cmd, sizeof(cmd), "mkfs.ext4 -q -F %s >/dev/null 2>&1", self->loop);
		if (system(cmd))
			SKIP(return, "mkfs.ext4 failed (e2fsprogs missing?)");
		mkdir(EXT4_DIR, 0755);
		faults = faults_off();
		r = mount(self->loop, EXT4_DIR, "ext4", 0, NULL);
		faults_restore(faults);
		if (r)
			SKIP(return, "cannot mount ext4 (CONFIG_EXT4_FS)");
		self->mounted = true;
		fd = open(EXT4_IMG, O_RDWR | O_CREAT | O_TRUNC, 0600);
		ASSERT_LE(0, fd);
		ASSERT_EQ(0, ftruncate(fd, 32 << 20));
		close(fd);
		path = EXT4_IMG;
	}
	self->backing = open(path, flags);
	ASSERT_LE(0, self->backing) TH_LOG("open %s: %s", path, strerror(errno));
	self->check = open(path, O_RDWR | O_DIRECT);
	if (self->check < 0)
		self->check = open(path, O_RDWR);
	ASSERT_LE(0, self->check);
	self->sectors = lseek(self->backing, 0, SEEK_END) / 512;
	ASSERT_LT(4096, self->sectors);
	r = vmm_blk_open(&self->b, 4, QSIZE, VMM_BLK_FEATURES, 64 << 20);
	ASSERT_EQ(0, r) TH_LOG("vmm_blk_open: %s", strerror(-r));
	ASSERT_EQ(0, vmm_blk_set_backend(&self->b, self->backing));
	self->buf = vmm_alloc(&self->b.vmm, 1 << 20, 4096);
	self->buf2 = vmm_alloc(&self->b.vmm, 1 << 20, 4096);
	ASSERT_NE(NULL, self->buf);
	ASSERT_NE(NULL, self->buf2);
}

FIXTURE_TEARDOWN(blk)
{
	vmm_blk_close(&self->b);
	if (self->backing >= 0)
		close(self->backing);
	if (self->check >= 0)
		close(self->check);
	if (self->mounted) {
		int faults = faults_off();

		umount(EXT4_DIR);
		faults_restore(faults);
	}
	if (self->loop[0])
		drop_loop(self->loop);
	if (self->img >= 0) {
		close(self->img);
		unlink(IMG);
	}
}

/* Read the store directly, bypassing vhost-blk. */
static ssize_t store_read(int fd, void *buf, size_t len, uint64_t sector)
{
	void *tmp;
	ssize_t r;

	if (posix_memalign(&tmp, 4096, len))
		return -1;
	r = pread(fd, tmp, len, sector * 512);
	memcpy(buf, tmp, len);
	free(tmp);
	return r;
}

TEST_F_TIMEOUT(blk, write_read_verify, 30)
{
	static const struct { uint64_t sector; uint32_t len; } io[] = {
		{ 0, 4096 }, { 8, 512 }, { 100, 65536 }, { 4000, 131072 },
	};
	unsigned char *mirror = malloc(131072);
	unsigned int i;

	ASSERT_NE(NULL, mirror);
	for (i = 0; i < ARRAY_SIZE(io); i++) {
		fill(self->buf, io[i].len, io[i].sector, 1);
		ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&self->b, i % 4, VIRTIO_BLK_T_OUT,
						      io[i].sector, self->buf, io[i].len));
	}
	for (i = 0; i < ARRAY_SIZE(io); i++) {
		memset(self->buf2, 0xaa, io[i].len);
		ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&self->b, (i + 1) % 4, VIRTIO_BLK_T_IN,
						      io[i].sector, self->buf2, io[i].len));
		fill(self->buf, io[i].len, io[i].sector, 1);
		EXPECT_EQ(0, memcmp(self->buf, self->buf2, io[i].len))
			TH_LOG("read back of sector %llu differs",
			       (unsigned long long)io[i].sector);
		ASSERT_EQ(io[i].len, store_read(self->check, mirror, io[i].len, io[i].sector));
		EXPECT_EQ(0, memcmp(self->buf, mirror, io[i].len))
			TH_LOG("backing store at sector %llu differs",
			       (unsigned long long)io[i].sector);
	}
	free(mirror);
}

/*
 * A read whose status byte shares the last data descriptor: the guest may
 * put the two in one buffer.  That descriptor is one byte longer than its
 * data, an odd length, and direct I/O checks the alignment of each iovec
 * whole (mainline's iov_iter_extract_bvecs() reads iter_iov_len(), not the
 * count): vhost-blk must leave the status byte out of the data iovecs, or
 * an aligned read fails with IOERR.
 */
TEST_F_TIMEOUT(blk, status_shares_the_last_data_descriptor, 30)
{
	/* Whole 4 KiB blocks: the loop and ext4 backends take no less. */
	static const uint32_t lens[][3] = {
		{ 4096, 0, 0 }, { 4096, 4096, 0 }, { 8192, 4096, 4096 },
	};
	struct vmm_vq *vq = &self->b.vq[1];
	struct vmm_blk_slot *s;
	struct vmm_seg segs[5];
	unsigned int i, k, n;
	uint32_t len, used;
	uint8_t *data;

	s = vmm_alloc(&self->b.vmm, sizeof(*s), 64);
	ASSERT_NE(NULL, s);
	for (i = 0; i < ARRAY_SIZE(lens); i++) {
		len = lens[i][0] + lens[i][1] + lens[i][2];
		fill(self->buf, len, 600 + 32 * i, 5);
		ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&self->b, 0, VIRTIO_BLK_T_OUT,
						      600 + 32 * i, self->buf, len))
			TH_LOG("layout %u: writing %u bytes", i, len);
		/* Data, then the status byte right after it, in buf2. */
		data = self->buf2;
		memset(data, 0xaa, len + 1);
		s->hdr.type = VIRTIO_BLK_T_IN;
		s->hdr.ioprio = 0;
		s->hdr.sector = 600 + 32 * i;
		segs[0] = (struct vmm_seg){ &s->hdr, sizeof(s->hdr), false };
		for (n = 1, k = 0; k < 3 && lens[i][k]; k++) {
			segs[n++] = (struct vmm_seg){ data, lens[i][k], true };
			data += lens[i][k];
		}
		segs[n - 1].len++;	/* the status byte */
		ASSERT_LE(0, vmm_vq_add(vq, segs, n, i & 1, s));
		vmm_vq_kick(vq);
		ASSERT_LE(0, vmm_vq_get_used(vq, &used, NULL, 10000));
		EXPECT_EQ(VIRTIO_BLK_S_OK, ((uint8_t *)self->buf2)[len])
			TH_LOG("layout %u: status %u", i, ((uint8_t *)self->buf2)[len]);
		EXPECT_EQ(len + 1, used);
		EXPECT_EQ(0, memcmp(self->buf, self->buf2, len)) TH_LOG("layout %u", i);
	}
}

TEST_F_TIMEOUT(blk, indirect_and_many_segments, 30)
{
	uint32_t used;
	void *tok;

	fill(self->buf, 32 * 4096, 512, 2);
	ASSERT_LE(0, vmm_blk_post(&self->b, 0, VIRTIO_BLK_T_OUT, 512, self->buf,
				  32 * 4096, 32, true, NULL));
	vmm_vq_kick(&self->b.vq[0]);
	ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_reap(&self->b, 0, &tok, &used, 10000));
	EXPECT_EQ(1, used);
	memset(self->buf2, 0, 32 * 4096);
	ASSERT_LE(0, vmm_blk_post(&self->b, 0, VIRTIO_BLK_T_IN, 512, self->buf2,
				  32 * 4096, 16, true, NULL));
	vmm_vq_kick(&self->b.vq[0]);
	ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_reap(&self->b, 0, &tok, &used, 10000));
	EXPECT_EQ(32 * 4096 + 1, used) TH_LOG("used length must count data and status");
	EXPECT_EQ(0, memcmp(self->buf, self->buf2, 32 * 4096));
}

TEST_F_TIMEOUT(blk, flush_and_get_id, 30)
{
	struct vhost_blk_serial s = { .serial = "vmq-serial-0123" };
	char id[VHOST_BLK_SERIAL_LEN + 4];

	ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&self->b, 1, VIRTIO_BLK_T_FLUSH, 0, NULL, 0));
	memset(self->buf, 0x55, 512);
	ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&self->b, 1, VIRTIO_BLK_T_GET_ID, 0,
					      self->buf, 512));
	memcpy(id, self->buf, VHOST_BLK_SERIAL_LEN);
	id[VHOST_BLK_SERIAL_LEN] = 0;
	EXPECT_STREQ("vhost-blk", id);
	ASSERT_EQ(0, ioctl(self->b.fd, VHOST_BLK_SET_SERIAL, &s));
	ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&self->b, 1, VIRTIO_BLK_T_GET_ID, 0,
					      self->buf, VHOST_BLK_SERIAL_LEN));
	EXPECT_EQ(0, memcmp(self->buf, s.serial, VHOST_BLK_SERIAL_LEN));
	/* Printable ASCII, NUL padded: anything else is refused. */
	s.serial[3] = 0;
	EXPECT_EQ(-1, ioctl(self->b.fd, VHOST_BLK_SET_SERIAL, &s));
	EXPECT_EQ(EINVAL, errno);
	s.serial[3] = '\n';
	EXPECT_EQ(-1, ioctl(self->b.fd, VHOST_BLK_SET_SERIAL, &s));
	EXPECT_EQ(EINVAL, errno);
}

static void check_zeroed(struct __test_metadata *_metadata,
			 FIXTURE_DATA(blk) * self, uint32_t type, uint32_t flags)
{
	uint64_t sector = 2048;

	fill(self->buf, 65536, sector, 3);
	ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&self->b, 2, VIRTIO_BLK_T_OUT, sector,
					      self->buf, 65536));
	ASSERT_LE(0, vmm_blk_post_dwz(&self->b, 2, type, sector + 8, 64, flags, NULL));
	vmm_vq_kick(&self->b.vq[2]);
	ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_reap(&self->b, 2, NULL, NULL, 10000));
	ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&self->b, 2, VIRTIO_BLK_T_IN, sector,
					      self->buf2, 65536));
	/* Sectors 8..71 of the range read as zeroes, the rest is intact. */
	EXPECT_EQ(0, memcmp(self->buf, self->buf2, 8 * 512));
	EXPECT_TRUE(is_zero((char *)self->buf2 + 8 * 512, 64 * 512));
	EXPECT_EQ(0, memcmp((char *)self->buf + 72 * 512, (char *)self->buf2 + 72 * 512,
			    65536 - 72 * 512));
	ASSERT_EQ(64 * 512, store_read(self->check, self->buf2, 64 * 512, sector + 8));
	EXPECT_TRUE(is_zero(self->buf2, 64 * 512));
}

/*
 * DISCARD is a hint: what the range reads back afterwards is unspecified
 * (a block device may keep the data; the page cache of a buffered backend
 * may still hold it).  It completes and leaves the rest alone.
 */
TEST_F_TIMEOUT(blk, discard_spares_neighbours, 30)
{
	const char *why = variant->backend == BE_NULLB ?
			  vhost_nullb_unusable(true, true) : NULL;
	uint64_t sector = 2048;

	if (why)
		SKIP(return, "%s", why);
	fill(self->buf, 65536, sector, 5);
	ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&self->b, 2, VIRTIO_BLK_T_OUT, sector,
					      self->buf, 65536));
	ASSERT_LE(0, vmm_blk_post_dwz(&self->b, 2, VIRTIO_BLK_T_DISCARD,
				      sector + 8, 64, 0, NULL));
	vmm_vq_kick(&self->b.vq[2]);
	ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_reap(&self->b, 2, NULL, NULL, 10000));
	ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&self->b, 2, VIRTIO_BLK_T_IN, sector,
					      self->buf2, 65536));
	EXPECT_EQ(0, memcmp(self->buf, self->buf2, 8 * 512));
	EXPECT_EQ(0, memcmp((char *)self->buf + 72 * 512, (char *)self->buf2 + 72 * 512,
			    65536 - 72 * 512));
}

TEST_F_TIMEOUT(blk, write_zeroes, 30)
{
	check_zeroed(_metadata, self, VIRTIO_BLK_T_WRITE_ZEROES, 0);
}

TEST_F_TIMEOUT(blk, write_zeroes_unmap, 30)
{
	check_zeroed(_metadata, self, VIRTIO_BLK_T_WRITE_ZEROES,
		     VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP);
}

/*
 * Post a DISCARD or WRITE_ZEROES of @n segments on ring 2, the segments split
 * over two descriptors, the first alone; its status, or -1.
 */
static int dwz_segs(FIXTURE_DATA(blk) * self, uint32_t type,
		    const struct virtio_blk_discard_write_zeroes *segs,
		    unsigned int n)
{
	struct virtio_blk_discard_write_zeroes *g;
	struct vmm_vq *vq = &self->b.vq[2];
	struct vmm_blk_slot *s;
	struct vmm_seg d[4];
	unsigned int nd = 0;

	s = vmm_alloc(&self->b.vmm, sizeof(*s), 64);
	g = vmm_alloc(&self->b.vmm, n * sizeof(*g), 16);
	if (!s || !g)
		return -1;
	memcpy(g, segs, n * sizeof(*g));
	s->hdr.type = type;
	s->hdr.ioprio = 0;
	s->hdr.sector = 0;
	s->status = 0xff;
	d[nd++] = (struct vmm_seg){ &s->hdr, sizeof(s->hdr), false };
	d[nd++] = (struct vmm_seg){ g, sizeof(*g), false };
	if (n > 1)
		d[nd++] = (struct vmm_seg){ g + 1, (n - 1) * sizeof(*g), false };
	d[nd++] = (struct vmm_seg){ &s->status, 1, true };
	if (vmm_vq_add(vq, d, nd, false, s) < 0)
		return -1;
	vmm_vq_kick(vq);
	if (vmm_vq_get_used(vq, NULL, NULL, 10000) < 0)
		return -1;
	return s->status;
}

#define SEG(s, n, f) ((struct virtio_blk_discard_write_zeroes){ \
	.sector = (s), .num_sectors = (n), .flags = (f) })

/*
 * A DISCARD or WRITE_ZEROES request carries as many segments as GET_LIMITS
 * says, more than a slot holds in itself: a WRITE_ZEROES of three ranges,
 * out of order, zeroes exactly them.  One bad segment among good ones (past
 * the end, an unknown flag), or one segment too many, fails the request with
 * nothing done; a DISCARD of the most segments completes and spares what
 * lies between them.
 */
TEST_F_TIMEOUT(blk, discard_and_zeroes_take_several_segments, 30)
{
	const char *why = variant->backend == BE_NULLB ?
			  vhost_nullb_unusable(true, true) : NULL;
	struct virtio_blk_discard_write_zeroes segs[VHOST_BLK_MAX_DISCARD_SEG + 1];
	struct vhost_blk_limits lim = { .size = sizeof(lim) };
	const uint64_t sector = 2048;
	unsigned int i;
	char *expect;

	if (why)
		SKIP(return, "%s", why);
	ASSERT_EQ(0, ioctl(self->b.fd, VHOST_BLK_GET_LIMITS, &lim));
	ASSERT_LT(2, lim.max_write_zeroes_seg);
	ASSERT_GE(VHOST_BLK_MAX_DISCARD_SEG, lim.max_write_zeroes_seg);
	ASSERT_GE(VHOST_BLK_MAX_DISCARD_SEG, lim.max_discard_seg);
	expect = malloc(65536);
	ASSERT_NE(NULL, expect);
	fill(self->buf, 65536, sector, 7);
	ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&self->b, 2, VIRTIO_BLK_T_OUT, sector,
					      self->buf, 65536));
	memcpy(expect, self->buf, 65536);

	/* Three ranges, the last first. */
	segs[0] = SEG(sector + 100, 8, 0);
	segs[1] = SEG(sector + 8, 16, 0);
	segs[2] = SEG(sector + 40, 8, VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP);
	EXPECT_EQ(VIRTIO_BLK_S_OK, dwz_segs(self, VIRTIO_BLK_T_WRITE_ZEROES, segs, 3));
	memset(expect + 100 * 512, 0, 8 * 512);
	memset(expect + 8 * 512, 0, 16 * 512);
	memset(expect + 40 * 512, 0, 8 * 512);
	ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&self->b, 2, VIRTIO_BLK_T_IN, sector,
					      self->buf2, 65536));
	EXPECT_EQ(0, memcmp(expect, self->buf2, 65536));
	ASSERT_EQ(65536, store_read(self->check, self->buf2, 65536, sector));
	EXPECT_EQ(0, memcmp(expect, self->buf2, 65536));

	/* One bad segment fails them all, before any is carried out. */
	segs[0] = SEG(sector, 8, 0);
	segs[1] = SEG(self->sectors - 4, 8, 0);
	segs[2] = SEG(sector + 64, 8, 0);
	EXPECT_EQ(VIRTIO_BLK_S_IOERR, dwz_segs(self, VIRTIO_BLK_T_WRITE_ZEROES, segs, 3));
	segs[1] = SEG(sector + 72, 8, 0x80);
	EXPECT_EQ(VIRTIO_BLK_S_UNSUPP, dwz_segs(self, VIRTIO_BLK_T_WRITE_ZEROES, segs, 3));
	/* One segment more than the limit. */
	for (i = 0; i <= lim.max_write_zeroes_seg; i++)
		segs[i] = SEG(sector + 4 * i, 4, 0);
	EXPECT_EQ(VIRTIO_BLK_S_IOERR, dwz_segs(self, VIRTIO_BLK_T_WRITE_ZEROES, segs,
					       lim.max_write_zeroes_seg + 1));
	ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&self->b, 2, VIRTIO_BLK_T_IN, sector,
					      self->buf2, 65536));
	EXPECT_EQ(0, memcmp(expect, self->buf2, 65536));

	/* The most DISCARD segments: the first half of every 8 sectors. */
	for (i = 0; i < lim.max_discard_seg; i++)
		segs[i] = SEG(sector + 8 * i, 4, 0);
	EXPECT_EQ(VIRTIO_BLK_S_OK, dwz_segs(self, VIRTIO_BLK_T_DISCARD, segs,
					    lim.max_discard_seg));
	ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&self->b, 2, VIRTIO_BLK_T_IN, sector,
					      self->buf2, 65536));
	for (i = 0; i < lim.max_discard_seg; i++)
		EXPECT_EQ(0, memcmp(expect + (8 * i + 4) * 512,
				    (char *)self->buf2 + (8 * i + 4) * 512, 4 * 512))
			TH_LOG("sectors %u..%u, between two discarded ranges",
			       8 * i + 4, 8 * i + 7);
	free(expect);
}

TEST_F_TIMEOUT(blk, unsupported_and_malformed_requests, 30)
{
	struct vmm_vq *vq = &self->b.vq[3];
	struct vmm_blk_slot *s;
	struct vmm_seg segs[4];
	uint32_t used;

	/* Unknown types and flags. */
	EXPECT_EQ(VIRTIO_BLK_S_UNSUPP, vmm_blk_do(&self->b, 3, 99, 0, NULL, 0));
	ASSERT_LE(0, vmm_blk_post_dwz(&self->b, 3, VIRTIO_BLK_T_DISCARD, 0, 8,
				      VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP, NULL));
	vmm_vq_kick(vq);
	EXPECT_EQ(VIRTIO_BLK_S_UNSUPP, vmm_blk_reap(&self->b, 3, NULL, NULL, 10000));
	/* Beyond capacity, straddling it, unaligned length. */
	EXPECT_EQ(VIRTIO_BLK_S_IOERR, vmm_blk_do(&self->b, 3, VIRTIO_BLK_T_IN,
						 self->sectors, self->buf, 512));
	EXPECT_EQ(VIRTIO_BLK_S_IOERR, vmm_blk_do(&self->b, 3, VIRTIO_BLK_T_OUT,
						 self->sectors - 1, self->buf, 1024));
	EXPECT_EQ(VIRTIO_BLK_S_IOERR, vmm_blk_do(&self->b, 3, VIRTIO_BLK_T_IN,
						 ~0ULL >> 1, self->buf, 512));
	EXPECT_EQ(VIRTIO_BLK_S_IOERR, vmm_blk_do(&self->b, 3, VIRTIO_BLK_T_IN, 0,
						 self->buf, 100));
	ASSERT_LE(0, vmm_blk_post_dwz(&self->b, 3, VIRTIO_BLK_T_WRITE_ZEROES,
				      self->sectors - 4, 8, 0, NULL));
	vmm_vq_kick(vq);
	EXPECT_EQ(VIRTIO_BLK_S_IOERR, vmm_blk_reap(&self->b, 3, NULL, NULL, 10000));

	/* Header too short. */
	s = vmm_alloc(&self->b.vmm, sizeof(*s), 64);
	ASSERT_NE(NULL, s);
	s->hdr.type = VIRTIO_BLK_T_IN;
	s->status = 0xff;
	segs[0] = (struct vmm_seg){ &s->hdr, 8, false };
	segs[1] = (struct vmm_seg){ &s->status, 1, true };
	ASSERT_LE(0, vmm_vq_add(vq, segs, 2, false, s));
	vmm_vq_kick(vq);
	ASSERT_LE(0, vmm_vq_get_used(vq, &used, NULL, 10000));
	EXPECT_EQ(VIRTIO_BLK_S_IOERR, s->status);
	EXPECT_EQ(1, used);

	/* A read whose data buffer is device-readable: wrong direction. */
	s->hdr.type = VIRTIO_BLK_T_IN;
	s->status = 0xff;
	segs[0] = (struct vmm_seg){ &s->hdr, sizeof(s->hdr), false };
	segs[1] = (struct vmm_seg){ self->buf, 512, false };
	segs[2] = (struct vmm_seg){ &s->status, 1, true };
	ASSERT_LE(0, vmm_vq_add(vq, segs, 3, false, s));
	vmm_vq_kick(vq);
	ASSERT_LE(0, vmm_vq_get_used(vq, NULL, NULL, 10000));
	EXPECT_EQ(VIRTIO_BLK_S_IOERR, s->status);

	/* A write with device-writable data: nothing may reach the disk. */
	fill(self->buf, 512, 77, 9);
	ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&self->b, 3, VIRTIO_BLK_T_OUT, 77,
					      self->buf, 512));
	s->hdr.type = VIRTIO_BLK_T_OUT;
	s->hdr.sector = 77;
	s->status = 0xff;
	memset(self->buf2, 0xee, 512);
	segs[1] = (struct vmm_seg){ self->buf2, 512, true };
	ASSERT_LE(0, vmm_vq_add(vq, segs, 3, false, s));
	vmm_vq_kick(vq);
	ASSERT_LE(0, vmm_vq_get_used(vq, NULL, NULL, 10000));
	EXPECT_EQ(VIRTIO_BLK_S_IOERR, s->status);
	ASSERT_EQ(512, store_read(self->check, self->buf2, 512, 77));
	EXPECT_EQ(0, memcmp(self->buf, self->buf2, 512));

	/* Too many segments. */
	EXPECT_EQ(-1, vmm_blk_post(&self->b, 3, VIRTIO_BLK_T_IN, 0, self->buf,
				   (VHOST_BLK_SEG_MAX + 1) * 512,
				   VHOST_BLK_SEG_MAX + 1, true, NULL))
		TH_LOG("library limit changed: raise VMM_MAX_INDIRECT");

	/* No status byte at all: the buffer comes back empty, the ring lives. */
	segs[0] = (struct vmm_seg){ &s->hdr, sizeof(s->hdr), false };
	ASSERT_LE(0, vmm_vq_add(vq, segs, 1, false, s));
	vmm_vq_kick(vq);
	ASSERT_LE(0, vmm_vq_get_used(vq, &used, NULL, 10000));
	EXPECT_EQ(0, used);
	EXPECT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&self->b, 3, VIRTIO_BLK_T_IN, 77,
					      self->buf2, 512));
}

TEST_F_TIMEOUT(blk, address_outside_memory_stops_the_ring, 30)
{
	struct vhost_vring_file err = { .index = 0 };
	struct vmm_vq *vq = &self->b.vq[0];
	struct vmm_blk_slot *s = vmm_alloc(&self->b.vmm, sizeof(*s), 64);
	struct vring_desc *d;
	uint64_t v;
	int head;

	ASSERT_NE(NULL, s);
	err.fd = eventfd(0, EFD_NONBLOCK);
	ASSERT_LE(0, err.fd);
	ASSERT_EQ(0, ioctl(self->b.fd, VHOST_SET_VRING_ERR, &err));
	s->hdr.type = VIRTIO_BLK_T_IN;
	s->status = 0xff;
	{
		struct vmm_seg segs[3] = {
			{ &s->hdr, sizeof(s->hdr), false },
			{ self->buf, 512, true },
			{ &s->status, 1, true },
		};

		head = vmm_vq_add(vq, segs, 3, false, s);
	}
	ASSERT_LE(0, head);
	/* Point the data descriptor far outside guest memory. */
	d = &vq->vr.desc[vq->vr.desc[head].next];
	d->addr = 0x7000000000ULL;
	vmm_vq_kick(vq);
	EXPECT_EQ(-1, vmm_vq_get_used(vq, NULL, NULL, 2000));
	EXPECT_EQ(0xff, s->status);
	usleep(100 * 1000);
	EXPECT_EQ(8, read(err.fd, &v, sizeof(v))) TH_LOG("error eventfd not signalled");
	/* The other rings keep working. */
	EXPECT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&self->b, 1, VIRTIO_BLK_T_IN, 0,
					      self->buf, 512));
	close(err.fd);
}

TEST_F_TIMEOUT(blk, all_queues_busy_each_on_its_worker, 300)
{
	unsigned int q, i, ids[4];
	int tids[4], all[8], n;
	bool named = true;
	long before[4];

	for (q = 0; q < 4; q++) {
		struct vhost_vring_worker w = { .index = q };

		ASSERT_EQ(0, ioctl(self->b.fd, VHOST_GET_VRING_WORKER, &w));
		ids[q] = w.worker_id;
		for (i = 0; i < q; i++)
			EXPECT_NE(ids[i], ids[q]) TH_LOG("rings %u and %u share a worker", i, q);
		tids[q] = vmm_worker_tid(getpid(), ids[q]);
		if (tids[q] < 0)
			named = false;
	}
	if (!named) {
		/*
		 * Mainline names every worker "vhost-<pid>": no thread tells
		 * its id.  The owner then has one worker thread per ring, and
		 * each of them must do work, whichever ring it serves.
		 */
		n = vmm_owner_workers(getpid(), all, NULL, 8);
		ASSERT_EQ(4, n) TH_LOG("%d worker threads for 4 rings", n);
		for (q = 0; q < 4; q++)
			tids[q] = all[q];
	}
	for (q = 0; q < 4; q++)
		before[q] = vmm_thread_cputime(tids[q]);
	{
		unsigned long long ticks;
		long cs[4], cs2[4];

		for (q = 0; q < 4; q++) {
			cs[q] = vmm_thread_wakeups(tids[q]);
			ASSERT_LE(0, cs[q]);
		}
		for (i = 0; i < 20; i++) {
			for (q = 0; q < 4; q++) {
				unsigned int k;

				for (k = 0; k < 32; k++)
					ASSERT_LE(0, vmm_blk_post(&self->b, q, VIRTIO_BLK_T_IN,
								  (q * 32 + k) * 8,
								  (char *)self->buf +
								  (q * 32 + k) % 256 * 4096,
								  4096, 1, false, NULL));
			}
			for (q = 0; q < 4; q++)
				vmm_vq_kick(&self->b.vq[q]);
			for (q = 0; q < 4; q++) {
				unsigned int k;

				for (k = 0; k < 32; k++)
					ASSERT_EQ(VIRTIO_BLK_S_OK,
						  vmm_blk_reap(&self->b, q, NULL, NULL, 10000));
			}
		}
		for (q = 0; q < 4; q++) {
			cs2[q] = vmm_thread_wakeups(tids[q]);
			ASSERT_LE(0, cs2[q]);
			ticks = vmm_thread_cputime(tids[q]) - before[q];
			TH_LOG("ring %u: worker %u (tid %d) woke %ld times, %llu ticks", q,
			       ids[q], tids[q], cs2[q] - cs[q], ticks);
			/*
			 * A worker that did the ring's work either went idle
			 * and woke again between rounds, or never went idle
			 * and was charged CPU time; an idle one does neither.
			 */
			EXPECT_TRUE(cs2[q] - cs[q] >= 5 || ticks >= 1)
				TH_LOG("ring %u's worker did no work", q);
		}
	}
}

/* What a 4 KiB block that should hold fill(@sector, @gen) holds instead. */
static const char *what_is(const void *got, uint64_t sector, unsigned int gen)
{
	static char what[96];
	uint32_t want[1024];
	unsigned int g, i;

	for (g = 0; g <= gen; g++) {
		fill(want, sizeof(want), sector, gen - g);
		if (!memcmp(want, got, sizeof(want))) {
			snprintf(what, sizeof(what), "holds generation %u", gen - g);
			return what;
		}
	}
	if (is_zero(got, sizeof(want)))
		return "zeroes";
	fill(want, sizeof(want), sector, gen);
	for (i = 0; i < 1024 && want[i] == ((const uint32_t *)got)[i]; i++)
		;
	snprintf(what, sizeof(what), "first difference at byte %u", i * 4);
	return what;
}

TEST_F_TIMEOUT(blk, detach_and_swap_backend_under_load, 300)
{
	unsigned int round, k, q;
	int fd2;

	for (round = 0; round < 6; round++) {
		for (q = 0; q < 4; q++)
			for (k = 0; k < 32; k++) {
				uint64_t sector = (q * 32 + k) * 8;
				void *p = (char *)self->buf + (q * 32 + k) % 256 * 4096;

				fill(p, 4096, sector, round);
				ASSERT_LE(0, vmm_blk_post(&self->b, q, VIRTIO_BLK_T_OUT, sector,
							  p, 4096, 1, false, NULL));
			}
		for (q = 0; q < 4; q++)
			vmm_vq_kick(&self->b.vq[q]);
		/* Detach while those are in flight, or swap to a new fd. */
		if (round & 1) {
			ASSERT_EQ(0, vmm_blk_set_backend(&self->b, -1));
			usleep(50 * 1000);
			/* A detached ring starts again once set up again. */
			for (q = 0; q < 4; q++)
				ASSERT_EQ(0, vmm_blk_rearm(&self->b, q));
			ASSERT_EQ(0, vmm_blk_set_backend(&self->b, self->backing));
		} else {
			fd2 = dup(self->backing);
			ASSERT_LE(0, fd2);
			ASSERT_EQ(0, vmm_blk_set_backend(&self->b, fd2));
			close(fd2);
		}
		for (q = 0; q < 4; q++)
			for (k = 0; k < 32; k++)
				ASSERT_EQ(VIRTIO_BLK_S_OK,
					  vmm_blk_reap(&self->b, q, NULL, NULL, 10000))
					TH_LOG("round %u ring %u: request lost or failed",
					       round, q);
		/* Every acknowledged write is in the store. */
		for (k = 0; k < 128; k++) {
			fill(self->buf, 4096, k * 8, round);
			ASSERT_EQ(4096, store_read(self->check, self->buf2, 4096, k * 8));
			ASSERT_EQ(0, memcmp(self->buf, self->buf2, 4096))
				TH_LOG("round %u: write to sector %u lost (%s)", round, k * 8,
				       what_is(self->buf2, k * 8, round));
		}
	}
}

/* A read-only backend: writes fail, nothing reaches the store. */
TEST(read_only_backend)
{
	struct vmm_blk b;
	void *buf, *before, *after;
	const char *why = vhost_unusable("/dev/vhost-blk", "CONFIG_VHOST_BLK");
	int img, ro;

	if (why)
		SKIP(return, "%s", why);
	img = make_image();
	ASSERT_LE(0, img);
	before = malloc(8192);
	after = malloc(8192);
	fill(before, 8192, 0, 5);
	ASSERT_EQ(8192, pwrite(img, before, 8192, 0));
	ro = open(IMG, O_RDONLY);
	ASSERT_LE(0, ro);
	ASSERT_EQ(0, vmm_blk_open(&b, 1, 64, VMM_BLK_FEATURES, 4 << 20));
	ASSERT_EQ(0, vmm_blk_set_backend(&b, ro));
	buf = vmm_alloc(&b.vmm, 8192, 4096);
	memset(buf, 0x11, 8192);
	EXPECT_EQ(VIRTIO_BLK_S_IOERR, vmm_blk_do(&b, 0, VIRTIO_BLK_T_OUT, 0, buf, 8192));
	ASSERT_LE(0, vmm_blk_post_dwz(&b, 0, VIRTIO_BLK_T_DISCARD, 0, 16, 0, NULL));
	vmm_vq_kick(&b.vq[0]);
	EXPECT_EQ(VIRTIO_BLK_S_IOERR, vmm_blk_reap(&b, 0, NULL, NULL, 10000));
	ASSERT_LE(0, vmm_blk_post_dwz(&b, 0, VIRTIO_BLK_T_WRITE_ZEROES, 0, 16, 0, NULL));
	vmm_vq_kick(&b.vq[0]);
	EXPECT_EQ(VIRTIO_BLK_S_IOERR, vmm_blk_reap(&b, 0, NULL, NULL, 10000));
	EXPECT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&b, 0, VIRTIO_BLK_T_IN, 0, buf, 8192));
	EXPECT_EQ(0, memcmp(buf, before, 8192));
	ASSERT_EQ(8192, pread(img, after, 8192, 0));
	EXPECT_EQ(0, memcmp(before, after, 8192));
	vmm_blk_close(&b);
	close(ro);
	close(img);
	unlink(IMG);
	free(before);
	free(after);
}

TEST(set_backend_errors)
{
	struct vhost_blk_backend be = { .fd = -1 };
	const char *why = vhost_unusable("/dev/vhost-blk", "CONFIG_VHOST_BLK");
	int fd, img;

	if (why)
		SKIP(return, "%s", why);
	fd = open("/dev/vhost-blk", O_RDWR);
	ASSERT_LE(0, fd);
	/* Before VHOST_SET_OWNER. */
	EXPECT_EQ(-1, ioctl(fd, VHOST_BLK_SET_BACKEND, &be));
	EXPECT_EQ(EPERM, errno);
	ASSERT_EQ(0, ioctl(fd, VHOST_SET_OWNER, NULL));
	be.flags = 1;
	EXPECT_EQ(-1, ioctl(fd, VHOST_BLK_SET_BACKEND, &be));
	EXPECT_EQ(EINVAL, errno);
	be.flags = 0;
	be.reserved[1] = 1;
	EXPECT_EQ(-1, ioctl(fd, VHOST_BLK_SET_BACKEND, &be));
	EXPECT_EQ(EINVAL, errno);
	be.reserved[1] = 0;
	be.fd = 1000;
	EXPECT_EQ(-1, ioctl(fd, VHOST_BLK_SET_BACKEND, &be));
	EXPECT_EQ(EBADF, errno);
	be.fd = open("/dev/null", O_RDWR);	/* a character device */
	EXPECT_EQ(-1, ioctl(fd, VHOST_BLK_SET_BACKEND, &be));
	EXPECT_EQ(EINVAL, errno);
	close(be.fd);
	img = make_image();
	be.fd = img;
	EXPECT_EQ(0, ioctl(fd, VHOST_BLK_SET_BACKEND, &be));
	be.fd = -1;
	EXPECT_EQ(0, ioctl(fd, VHOST_BLK_SET_BACKEND, &be));
	close(img);
	unlink(IMG);
	close(fd);
}

/*
 * The feature bits vhost-blk serves are the data path's; those that only
 * say a config field is valid are the VMM's and refused.  The array form
 * (VHOST_GET/SET_FEATURES_ARRAY) gives the same bits in word 0, zeroes in
 * the words after it, refuses a bit set past word 0 and a count past its
 * bound.  DISCARD and WRITE_ZEROES are refused (UNSUPP, nothing written)
 * until negotiated, then served.
 */
TEST(features_served_and_dwz_refused_unless_negotiated)
{
	const uint64_t vmm_bits = (1ULL << VIRTIO_BLK_F_SIZE_MAX) |
				  (1ULL << VIRTIO_BLK_F_SEG_MAX) |
				  (1ULL << VIRTIO_BLK_F_GEOMETRY) |
				  (1ULL << VIRTIO_BLK_F_RO) |
				  (1ULL << VIRTIO_BLK_F_BLK_SIZE) |
				  (1ULL << VIRTIO_BLK_F_TOPOLOGY) |
				  (1ULL << VIRTIO_BLK_F_MQ) |
				  (1ULL << VIRTIO_BLK_F_CONFIG_WCE);
	const uint64_t dwz = (1ULL << VIRTIO_BLK_F_DISCARD) |
			     (1ULL << VIRTIO_BLK_F_WRITE_ZEROES);
	const char *why = vhost_unusable("/dev/vhost-blk", "CONFIG_VHOST_BLK");
	uint64_t feat, v, arr[6];
	struct vmm_blk b;
	char *buf;
	int img, i;

	if (why)
		SKIP(return, "%s", why);
	img = make_image();
	ASSERT_LE(0, img);
	ASSERT_EQ(0, vmm_blk_open(&b, 1, 64, 1ULL << VIRTIO_F_VERSION_1, 4 << 20));
	ASSERT_EQ(0, ioctl(b.fd, VHOST_GET_FEATURES, &feat));
	EXPECT_EQ(0, feat & vmm_bits) TH_LOG("config-only bits offered: %#llx",
					     (unsigned long long)(feat & vmm_bits));
	EXPECT_EQ(dwz | (1ULL << VIRTIO_BLK_F_FLUSH),
		  feat & (dwz | (1ULL << VIRTIO_BLK_F_FLUSH)));
	v = (1ULL << VIRTIO_F_VERSION_1) | (1ULL << VIRTIO_BLK_F_SEG_MAX);
	EXPECT_EQ(-1, ioctl(b.fd, VHOST_SET_FEATURES, &v));
	EXPECT_EQ(EOPNOTSUPP, errno);

	/* The array form: three words asked for, a fourth left alone. */
	memset(arr, 0xa5, sizeof(arr));
	arr[0] = 3;
	ASSERT_EQ(0, ioctl(b.fd, VHOST_GET_FEATURES_ARRAY, arr));
	EXPECT_EQ(feat, arr[1]);
	EXPECT_EQ(0, arr[2]);
	EXPECT_EQ(0, arr[3]);
	EXPECT_EQ(0xa5a5a5a5a5a5a5a5ULL, arr[4]);
	memset(arr, 0xa5, sizeof(arr));
	arr[0] = 0;
	EXPECT_EQ(0, ioctl(b.fd, VHOST_GET_FEATURES_ARRAY, arr));
	EXPECT_EQ(0xa5a5a5a5a5a5a5a5ULL, arr[1]) TH_LOG("a count of 0 wrote a word");
	arr[0] = 33;
	EXPECT_EQ(-1, ioctl(b.fd, VHOST_GET_FEATURES_ARRAY, arr));
	EXPECT_EQ(EINVAL, errno);
	arr[0] = 2;
	arr[1] = 1ULL << VIRTIO_F_VERSION_1;
	arr[2] = 1;		/* bit 64 */
	EXPECT_EQ(-1, ioctl(b.fd, VHOST_SET_FEATURES_ARRAY, arr));
	EXPECT_EQ(EOPNOTSUPP, errno);
	arr[0] = 1;
	arr[1] = (1ULL << VIRTIO_F_VERSION_1) | (1ULL << VIRTIO_BLK_F_MQ);
	EXPECT_EQ(-1, ioctl(b.fd, VHOST_SET_FEATURES_ARRAY, arr));
	EXPECT_EQ(EOPNOTSUPP, errno);

	/* Without DISCARD and WRITE_ZEROES: refused, nothing zeroed. */
	arr[0] = 2;
	arr[1] = 1ULL << VIRTIO_F_VERSION_1;
	arr[2] = 0;
	ASSERT_EQ(0, ioctl(b.fd, VHOST_SET_FEATURES_ARRAY, arr));
	ASSERT_EQ(0, vmm_blk_set_backend(&b, img));
	buf = vmm_alloc(&b.vmm, 4096, 4096);
	ASSERT_NE(NULL, buf);
	fill(buf, 4096, 0, 11);
	ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&b, 0, VIRTIO_BLK_T_OUT, 0, buf, 4096));
	for (i = 0; i < 2; i++) {
		ASSERT_LE(0, vmm_blk_post_dwz(&b, 0, i ? VIRTIO_BLK_T_WRITE_ZEROES :
					      VIRTIO_BLK_T_DISCARD, 0, 8, 0, NULL));
		vmm_vq_kick(&b.vq[0]);
		EXPECT_EQ(VIRTIO_BLK_S_UNSUPP, vmm_blk_reap(&b, 0, NULL, NULL, 10000))
			TH_LOG("%s served without being negotiated",
			       i ? "WRITE_ZEROES" : "DISCARD");
	}
	ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&b, 0, VIRTIO_BLK_T_IN, 0, buf, 4096));
	EXPECT_FALSE(is_zero(buf, 4096));
	/* Negotiated (the array form again): served. */
	arr[1] |= dwz;
	ASSERT_EQ(0, ioctl(b.fd, VHOST_SET_FEATURES_ARRAY, arr));
	ASSERT_LE(0, vmm_blk_post_dwz(&b, 0, VIRTIO_BLK_T_WRITE_ZEROES, 0, 8, 0, NULL));
	vmm_vq_kick(&b.vq[0]);
	EXPECT_EQ(VIRTIO_BLK_S_OK, vmm_blk_reap(&b, 0, NULL, NULL, 10000));
	ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&b, 0, VIRTIO_BLK_T_IN, 0, buf, 4096));
	EXPECT_TRUE(is_zero(buf, 4096));
	vmm_blk_close(&b);
	close(img);
	unlink(IMG);
}

/* Flush requests block device @path completed (field 16 of its stat). */
static long flushes_of(const char *path)
{
	char stat[64], buf[512], *p = buf, *end;
	long v = -1;
	FILE *f;
	int i;

	snprintf(stat, sizeof(stat), "/sys/block/%s/stat", strrchr(path, '/') + 1);
	f = fopen(stat, "r");
	if (!f)
		return -1;
	if (!fgets(buf, sizeof(buf), f))
		buf[0] = 0;
	fclose(f);
	for (i = 0; i < 16; i++, p = end) {
		v = strtol(p, &end, 10);
		if (end == p)
			return -1;
	}
	return v;
}

/* @n 4 KiB writes (or one WRITE_ZEROES of @n * 8 sectors) on ring 0. */
static int writes(struct vmm_blk *b, void *buf, int n, bool zeroes)
{
	int i, st;

	if (zeroes) {
		if (vmm_blk_post_dwz(b, 0, VIRTIO_BLK_T_WRITE_ZEROES, 0, n * 8, 0, NULL) < 0)
			return -1;
		vmm_vq_kick(&b->vq[0]);
		return vmm_blk_reap(b, 0, NULL, NULL, 10000);
	}
	for (i = 0; i < n; i++) {
		st = vmm_blk_do(b, 0, VIRTIO_BLK_T_OUT, i * 8, buf, 4096);
		if (st)
			return st;
	}
	return 0;
}

/*
 * Writethrough (VHOST_BLK_SET_WRITEBACK 0, or a guest that did not
 * negotiate FLUSH): a write is stable before it completes; writeback (the
 * default) leaves that to FLUSH.  Seen on a loop device, which has a
 * volatile cache and no FUA: each stable write is followed by a flush
 * request, which it counts (/sys/block/loopN/stat).  Through the bio path
 * (O_DIRECT) and the page cache's (buffered) alike, and for WRITE_ZEROES.
 */
TEST(writethrough_makes_every_write_stable)
{
	const char *why = vhost_unusable("/dev/vhost-blk", "CONFIG_VHOST_BLK");
	uint32_t wb;
	struct vmm_blk b;
	char loop[32];
	int img, fd, direct, z;
	long f0;
	void *buf;

	if (why)
		SKIP(return, "%s", why);
	img = make_image();
	ASSERT_LE(0, img);
	if (make_loop(img, loop, sizeof(loop))) {
		close(img);
		unlink(IMG);
		SKIP(return, "no loop device (CONFIG_BLK_DEV_LOOP)");
	}
	ASSERT_LE(0, flushes_of(loop)) TH_LOG("no flush count in %s's stat", loop);
	for (direct = 0; direct < 2; direct++) {
		fd = open(loop, O_RDWR | (direct ? O_DIRECT : 0));
		ASSERT_LE(0, fd);
		ASSERT_EQ(0, vmm_blk_open(&b, 1, 64, VMM_BLK_FEATURES, 4 << 20));
		ASSERT_EQ(0, vmm_blk_set_backend(&b, fd));
		buf = vmm_alloc(&b.vmm, 4096, 4096);
		ASSERT_NE(NULL, buf);
		fill(buf, 4096, 0, 13);
		wb = 2;
		EXPECT_EQ(-1, ioctl(b.fd, VHOST_BLK_SET_WRITEBACK, &wb));
		EXPECT_EQ(EINVAL, errno);
		for (z = 0; z < 2; z++) {
			/* Writeback: no flush until the guest asks. */
			f0 = flushes_of(loop);
			ASSERT_EQ(0, writes(&b, buf, 4, z));
			EXPECT_EQ(f0, flushes_of(loop))
				TH_LOG("%s, writeback: %s flushed", direct ? "direct" : "buffered",
				       z ? "WRITE_ZEROES" : "writes");
			ASSERT_EQ(VIRTIO_BLK_S_OK,
				  vmm_blk_do(&b, 0, VIRTIO_BLK_T_FLUSH, 0, NULL, 0));
			EXPECT_LT(f0, flushes_of(loop))
				TH_LOG("FLUSH did not reach the loop device");
			/* Writethrough: every one stable. */
			wb = 0;
			ASSERT_EQ(0, ioctl(b.fd, VHOST_BLK_SET_WRITEBACK, &wb));
			f0 = flushes_of(loop);
			ASSERT_EQ(0, writes(&b, buf, 4, z));
			EXPECT_LE(f0 + (z ? 1 : 4), flushes_of(loop))
				TH_LOG("%s, writethrough: %ld flushes for %s",
				       direct ? "direct" : "buffered", flushes_of(loop) - f0,
				       z ? "a WRITE_ZEROES" : "4 writes");
			wb = 1;
			ASSERT_EQ(0, ioctl(b.fd, VHOST_BLK_SET_WRITEBACK, &wb));
		}
		vmm_blk_close(&b);
		/* A guest without FLUSH: writethrough, whatever the VMM set. */
		ASSERT_EQ(0, vmm_blk_open(&b, 1, 64, 1ULL << VIRTIO_F_VERSION_1, 4 << 20));
		ASSERT_EQ(0, vmm_blk_set_backend(&b, fd));
		buf = vmm_alloc(&b.vmm, 4096, 4096);
		ASSERT_NE(NULL, buf);
		fill(buf, 4096, 0, 14);
		f0 = flushes_of(loop);
		ASSERT_EQ(0, writes(&b, buf, 4, false));
		EXPECT_LE(f0 + 4, flushes_of(loop))
			TH_LOG("%s, no FLUSH negotiated: %ld flushes for 4 writes",
			       direct ? "direct" : "buffered", flushes_of(loop) - f0);
		vmm_blk_close(&b);
		close(fd);
	}
	drop_loop(loop);
	close(img);
	unlink(IMG);
}

/*
 * VHOST_BLK_GET_LIMITS: size-prefixed, no owner needed, and the limits it
 * reports are those the device enforces: its last ring takes a busy-poll
 * timeout of the reported maximum, the ring past it and a timeout past
 * the maximum are refused.
 */
TEST(limits_are_queried_and_enforced)
{
	const char *why = vhost_unusable("/dev/vhost-blk", "CONFIG_VHOST_BLK");
	struct vhost_blk_limits lim;
	struct vhost_vring_state t;
	unsigned char big[2 * sizeof(lim)];
	int fd, i;

	if (why)
		SKIP(return, "%s", why);
	fd = open("/dev/vhost-blk", O_RDWR);
	ASSERT_LE(0, fd);
	/* A struct shorter than the first version's is refused. */
	memset(&lim, 0, sizeof(lim));
	lim.size = VHOST_BLK_LIMITS_SIZE_VER0 - 4;
	EXPECT_EQ(-1, ioctl(fd, VHOST_BLK_GET_LIMITS, &lim));
	EXPECT_EQ(EINVAL, errno);
	EXPECT_EQ(-1, ioctl(fd, VHOST_BLK_GET_LIMITS, NULL));
	EXPECT_EQ(EFAULT, errno);
	/* The first version, before any owner: today's values. */
	lim.size = VHOST_BLK_LIMITS_SIZE_VER0;
	ASSERT_EQ(0, ioctl(fd, VHOST_BLK_GET_LIMITS, &lim));
	EXPECT_EQ(VHOST_BLK_LIMITS_SIZE_VER0, lim.size);
	EXPECT_EQ(VHOST_BLK_MAX_QUEUES, lim.max_queues);
	EXPECT_EQ(VHOST_BLK_SEG_MAX, lim.seg_max);
	EXPECT_EQ(VHOST_BLK_MAX_DISCARD_SEG, lim.max_discard_seg);
	EXPECT_EQ(VHOST_BLK_MAX_DISCARD_SECTORS, lim.max_discard_sectors);
	EXPECT_EQ(VHOST_BLK_MAX_DISCARD_SEG, lim.max_write_zeroes_seg);
	EXPECT_EQ(VHOST_BLK_MAX_WRITE_ZEROES_SECTORS, lim.max_write_zeroes_sectors);
	EXPECT_EQ(VHOST_BLK_MAX_BUSYLOOP_TIMEOUT, lim.max_busyloop_timeout);
	/* A caller from a later header: only the kernel's part is written. */
	memset(big, 0xa5, sizeof(big));
	((struct vhost_blk_limits *)big)->size = sizeof(big);
	ASSERT_EQ(0, ioctl(fd, VHOST_BLK_GET_LIMITS, big));
	EXPECT_EQ(sizeof(lim), ((struct vhost_blk_limits *)big)->size);
	EXPECT_EQ(0, memcmp(big + sizeof(__u32), (char *)&lim + sizeof(__u32),
			    sizeof(lim) - sizeof(__u32)));
	for (i = sizeof(lim); i < (int)sizeof(big); i++)
		ASSERT_EQ(0xa5, big[i]) TH_LOG("byte %d past the kernel's struct written", i);
	/* Enforced as reported. */
	ASSERT_EQ(0, ioctl(fd, VHOST_SET_OWNER, NULL));
	t = (struct vhost_vring_state){ .index = lim.max_queues - 1,
					.num = lim.max_busyloop_timeout };
	EXPECT_EQ(0, ioctl(fd, VHOST_SET_VRING_BUSYLOOP_TIMEOUT, &t));
	t.num++;
	EXPECT_EQ(-1, ioctl(fd, VHOST_SET_VRING_BUSYLOOP_TIMEOUT, &t));
	EXPECT_EQ(EINVAL, errno);
	t = (struct vhost_vring_state){ .index = lim.max_queues };
	EXPECT_EQ(-1, ioctl(fd, VHOST_SET_VRING_BUSYLOOP_TIMEOUT, &t));
	EXPECT_EQ(ENOBUFS, errno);
	close(fd);
}

TEST(dirty_log_marks_exactly_the_pages_in_requests_wrote)
{
	uint64_t features = (1ULL << VIRTIO_F_VERSION_1) | (1ULL << VHOST_F_LOG_ALL);
	const size_t mem = 8 << 20;
	uint64_t base_page, log_base, i, nbits;
	unsigned char *log, *data, *wbuf;
	struct vmm_blk b;
	unsigned long expect[8];
	unsigned int nexp = 0, k;
	const char *why = vhost_unusable("/dev/vhost-blk", "CONFIG_VHOST_BLK");
	int img;

	if (why)
		SKIP(return, "%s", why);
	img = make_image();
	ASSERT_LE(0, img);
	ASSERT_EQ(0, vmm_blk_open(&b, 1, 64, features, mem));
	/* One bit per 4K guest page, from guest address 0. */
	nbits = (VMM_GPA_BASE + mem) / 4096;
	log = calloc(1, nbits / 8 + 8);
	ASSERT_NE(NULL, log);
	log_base = (uintptr_t)log;
	ASSERT_EQ(0, ioctl(b.fd, VHOST_SET_LOG_BASE, &log_base));
	ASSERT_EQ(0, vmm_blk_set_backend(&b, img));

	data = vmm_alloc(&b.vmm, 4 * 4096, 4096);
	wbuf = vmm_alloc(&b.vmm, 2 * 4096, 4096);
	fill(wbuf, 8192, 0, 6);
	/* An OUT request reads guest memory: it must not dirty anything. */
	ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&b, 0, VIRTIO_BLK_T_OUT, 0, wbuf, 8192));
	memset(log, 0, nbits / 8 + 8);
	/* An IN request into the 2nd and 3rd page of @data. */
	ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&b, 0, VIRTIO_BLK_T_IN, 0,
					      data + 4096, 8192));
	EXPECT_EQ(0, memcmp(data + 4096, wbuf, 8192));
	base_page = VMM_GPA_BASE / 4096;
	expect[nexp++] = vmm_gpa(&b.vmm, data + 4096) / 4096;
	expect[nexp++] = vmm_gpa(&b.vmm, data + 8192) / 4096;
	/* The status byte is guest memory the request wrote too. */
	for (i = 0; i < 64; i++) {
		struct vmm_blk_slot *s = b.free[0][i];

		if (s->status == VIRTIO_BLK_S_OK)
			expect[nexp++] = vmm_gpa(&b.vmm, &s->status) / 4096;
	}
	for (i = base_page; i < nbits; i++) {
		bool set = log[i / 8] & (1 << (i % 8)), want = false;

		for (k = 0; k < nexp; k++)
			want |= expect[k] == i;
		EXPECT_EQ(want, set) TH_LOG("page %#llx: logged %d, written %d",
					    (unsigned long long)i, set, want);
	}
	vmm_blk_close(&b);
	free(log);
	close(img);
	unlink(IMG);
}

/* VIRTIO_F_ACCESS_PLATFORM: rings and buffers addressed through the IOTLB. */
TEST(device_iotlb)
{
	uint64_t features = (1ULL << VIRTIO_F_VERSION_1) | (1ULL << VIRTIO_F_ACCESS_PLATFORM);
	uint64_t backend_features = 1ULL << VHOST_BACKEND_F_IOTLB_MSG_V2;
	struct vhost_msg_v2 msg = { .type = VHOST_IOTLB_MSG_V2 };
	struct vhost_vring_addr a = { .index = 0 };
	struct vmm_blk b;
	void *buf, *buf2;
	const char *why = vhost_unusable("/dev/vhost-blk", "CONFIG_VHOST_BLK");
	int img;

	if (why)
		SKIP(return, "%s", why);
	img = make_image();
	ASSERT_LE(0, img);
	ASSERT_EQ(0, vmm_blk_open(&b, 1, 64, features, 4 << 20));
	ASSERT_EQ(0, ioctl(b.fd, VHOST_SET_BACKEND_FEATURES, &backend_features));
	/* Map all of guest memory at its IOVA (= guest physical address). */
	msg.iotlb.iova = VMM_GPA_BASE;
	msg.iotlb.size = b.vmm.size;
	msg.iotlb.uaddr = (uintptr_t)b.vmm.mem;
	msg.iotlb.perm = VHOST_ACCESS_RW;
	msg.iotlb.type = VHOST_IOTLB_UPDATE;
	ASSERT_EQ(sizeof(msg), write(b.fd, &msg, sizeof(msg)));
	/* Ring addresses are IOVAs now. */
	a.desc_user_addr = vmm_gpa(&b.vmm, b.vq[0].vr.desc);
	a.avail_user_addr = vmm_gpa(&b.vmm, b.vq[0].vr.avail);
	a.used_user_addr = vmm_gpa(&b.vmm, b.vq[0].vr.used);
	ASSERT_EQ(0, ioctl(b.fd, VHOST_SET_VRING_ADDR, &a));
	ASSERT_EQ(0, vmm_blk_set_backend(&b, img));
	buf = vmm_alloc(&b.vmm, 8192, 4096);
	buf2 = vmm_alloc(&b.vmm, 8192, 4096);
	fill(buf, 8192, 16, 7);
	EXPECT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&b, 0, VIRTIO_BLK_T_OUT, 16, buf, 8192));
	EXPECT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&b, 0, VIRTIO_BLK_T_IN, 16, buf2, 8192));
	EXPECT_EQ(0, memcmp(buf, buf2, 8192));
	ASSERT_EQ(8192, pread(img, buf2, 8192, 16 * 512));
	EXPECT_EQ(0, memcmp(buf, buf2, 8192));
	vmm_blk_close(&b);
	close(img);
	unlink(IMG);
}

TEST(kill_owner_with_io_in_flight)
{
	int p[2], status, tries, fd, workers;
	struct vmm_blk b;
	void *buf;
	pid_t pid;
	char c;

	const char *why = vhost_unusable("/dev/vhost-blk", "CONFIG_VHOST_BLK");

	if (!why)
		why = vhost_nullb_unusable(false, false);
	if (why)
		SKIP(return, "%s", why);
	ASSERT_EQ(0, pipe(p));
	pid = vmm_fork_tied();
	ASSERT_LE(0, pid);
	if (!pid) {
		unsigned int q, k = 0;
		char *data;

		fd = open(NULLB, O_RDWR | O_DIRECT);
		if (fd < 0 || vmm_blk_open(&b, 2, 128, 1ULL << VIRTIO_F_VERSION_1, 16 << 20) ||
		    vmm_blk_set_backend(&b, fd))
			_exit(1);
		data = vmm_alloc(&b.vmm, 128 * 4096, 4096);
		if (!data || write(p[1], "x", 1) != 1)
			_exit(1);
		/* Keep both rings full of reads and writes until killed. */
		for (;;) {
			for (q = 0; q < 2; q++) {
				while (vmm_blk_post(&b, q,
						    k & 1 ? VIRTIO_BLK_T_OUT : VIRTIO_BLK_T_IN,
						    (k % 1024) * 8, data + (k % 128) * 4096,
						    4096, 1, false, NULL) >= 0)
					k++;
				vmm_vq_kick(&b.vq[q]);
				while (vmm_blk_reap(&b, q, NULL, NULL, 0) >= 0)
					;
			}
		}
	}
	close(p[1]);
	ASSERT_EQ(1, read(p[0], &c, 1)) TH_LOG("child failed to set up");
	close(p[0]);
	workers = vmm_owner_workers(pid, NULL, NULL, 64);
	usleep(300 * 1000);
	/* Before any assertion: a child left running would hang the runner. */
	ASSERT_EQ(0, kill(pid, SIGKILL));
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ASSERT_TRUE(WIFSIGNALED(status));
	EXPECT_EQ(2, workers);
	for (tries = 0; tries < 100 && vmm_owner_workers(pid, NULL, NULL, 64); tries++)
		usleep(100 * 1000);
	EXPECT_EQ(0, vmm_owner_workers(pid, NULL, NULL, 64))
		TH_LOG("worker threads outlived their owner");

	/* The device opens again and serves I/O. */
	fd = open(NULLB, O_RDWR | O_DIRECT);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, vmm_blk_open(&b, 1, 64, 1ULL << VIRTIO_F_VERSION_1, 4 << 20));
	ASSERT_EQ(0, vmm_blk_set_backend(&b, fd));
	buf = vmm_alloc(&b.vmm, 4096, 4096);
	EXPECT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&b, 0, VIRTIO_BLK_T_IN, 0, buf, 4096));
	vmm_blk_close(&b);
	close(fd);
}

/*
 * Kthread mode (VHOST_SET_FORK_FROM_OWNER off): the core makes no new
 * workers there, so vhost-blk leaves every ring on the device's one worker
 * (as worker_pool=1) and serves them all; a VMM asking for a new worker
 * itself gets EOPNOTSUPP, from VHOST_SET_VRING_WORKER and VHOST_NEW_WORKER
 * alike; binding to the existing one works.
 */
TEST(kthread_mode_rings_share_the_default_worker)
{
	struct vhost_worker_state st = {};
	struct vhost_vring_worker w;
	unsigned int q, ids[2];
	struct vmm_blk b;
	void *buf;
	int fd, r;

	const char *why = vhost_unusable("/dev/vhost-blk", "CONFIG_VHOST_BLK");

	if (!why)
		why = vhost_nullb_unusable(false, false);
	if (why)
		SKIP(return, "%s", why);
	fd = open(NULLB, O_RDWR | O_DIRECT);
	ASSERT_LE(0, fd);
	/* VHOST_FORK_OWNER_KTHREAD */
	r = vmm_blk_open_fork(&b, 2, 64, 1ULL << VIRTIO_F_VERSION_1, 4 << 20, 0);
	if (r == -ENOTTY) {
		vmm_blk_close(&b);
		close(fd);
		SKIP(return, "no VHOST_SET_FORK_FROM_OWNER %s",
		     "(CONFIG_VHOST_ENABLE_FORK_OWNER_CONTROL)");
	}
	ASSERT_EQ(0, r);
	ASSERT_EQ(0, vmm_blk_set_backend(&b, fd));
	buf = vmm_alloc(&b.vmm, 4096, 4096);
	ASSERT_NE(NULL, buf);
	for (q = 0; q < 2; q++) {
		EXPECT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&b, q, VIRTIO_BLK_T_IN, q * 8, buf, 4096))
			TH_LOG("ring %u does not serve I/O", q);
		w = (struct vhost_vring_worker){ .index = q };
		ASSERT_EQ(0, ioctl(b.fd, VHOST_GET_VRING_WORKER, &w));
		ids[q] = w.worker_id;
	}
	EXPECT_EQ(ids[0], ids[1]) TH_LOG("kthread mode made a worker for ring 1");
	w = (struct vhost_vring_worker){ .index = 1, .worker_id = VHOST_VRING_NEW_WORKER };
	EXPECT_EQ(-1, ioctl(b.fd, VHOST_SET_VRING_WORKER, &w));
	EXPECT_EQ(EOPNOTSUPP, errno);
	/* Mainline's call gives the same answer (it was EFAULT). */
	EXPECT_EQ(-1, ioctl(b.fd, VHOST_NEW_WORKER, &st));
	EXPECT_EQ(EOPNOTSUPP, errno);
	w = (struct vhost_vring_worker){ .index = 1, .worker_id = ids[0] };
	EXPECT_EQ(0, ioctl(b.fd, VHOST_SET_VRING_WORKER, &w));
	EXPECT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&b, 1, VIRTIO_BLK_T_IN, 8, buf, 4096));
	vmm_blk_close(&b);
	close(fd);
}

TEST_HARNESS_MAIN
