// SPDX-License-Identifier: GPL-2.0
/*
 * Regression tests for the vhost-blk and vhost core hardening:
 *
 * - backends: files without iter I/O and O_APPEND files are refused, a
 *   backend made O_APPEND later fails writes, and writes to a frozen
 *   filesystem wait for the thaw;
 * - extra workers count against the caller's RLIMIT_NPROC;
 * - switching VHOST_F_LOG_ALL, VHOST_SET_MEM_TABLE and IOTLB invalidation
 *   wait for the requests in flight (a slow configfs null_blk keeps them in
 *   flight);
 * - the status byte is logged, on errors and for GET_ID too;
 * - DISCARD never writes data to a block device, and the DISCARD and
 *   WRITE_ZEROES maximums hold;
 * - the segment limit counts descriptors, not the iovecs they map to;
 * - workers carry the owner's name whichever process of the VMM starts the
 *   rings, and the cgroups of the thread that made them; long names read
 *   back whole;
 * - GET_ID never returns a serial torn by VHOST_BLK_SET_SERIAL;
 * - writes leave their filesystem freezable (one count of freeze
 *   protection each, dropped on completion), WRITE_ZEROES zeroes files
 *   whose filesystem cannot zero a range, DISCARD honours BLKROSET, and
 *   what SET_OWNER allocates is charged to the owner's memory cgroup.
 *
 * Everything that changes global state (mounts, frozen filesystems,
 * configfs devices, cgroups, sysctls, module parameters) is undone by the
 * fixture teardown, on every path.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <grp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <linux/loop.h>

#include "../kselftest_harness.h"
#include "vhost_test.h"
#include "vhost_vmm.h"
#include "vhost_blk_lib.h"

#ifndef FIFREEZE
#define FIFREEZE	_IOWR('X', 119, int)
#define FITHAW		_IOWR('X', 120, int)
#endif
#ifndef BLKROSET
#define BLKROSET	_IO(0x12, 93)
#endif
#ifndef BLKFLSBUF
#define BLKFLSBUF	_IO(0x12, 97)
#endif
#ifndef TMPFS_MAGIC
#define TMPFS_MAGIC	0x01021994
#endif

/* A modern driver, with the data-path features (DISCARD among them). */
static const uint64_t V1 = VMM_BLK_FEATURES;
static const uint64_t LOG_ALL = 1ULL << VHOST_F_LOG_ALL;
static const uint64_t PLATFORM = 1ULL << VIRTIO_F_ACCESS_PLATFORM;

#define NULLB0		"/dev/nullb0"
/* A tmpfs of our own: the guest's /dev/shm is not one. */
#define TMPFS_DIR	"/tmp/vmq-hardening-tmpfs"
#define TMPFS_FILE	TMPFS_DIR "/disk.img"
#define CONFIGFS	"/sys/kernel/config"
/* 6.1's null_blk names the disk after its configfs directory. */
#define SLOW_NAME	"vmqslow"
#define SLOW_CFG	CONFIGFS "/nullb/" SLOW_NAME
/* How long the slow null_blk takes to complete a request. */
#define SLOW_NSEC	"300000000"
#define EXT4_IMG	"/tmp/vmq-hardening-ext4.img"
#define EXT4_MNT	"/tmp/vmq-hardening-ext4"
#define EXT4_FILE	EXT4_MNT "/disk.img"
#define CGROUP_ROOT	"/sys/fs/cgroup"
#define CGROUP_DIR	CGROUP_ROOT "/vmq-hardening"
#define PID_MAX		"/proc/sys/kernel/pid_max"
#define WORKER_POOL	"/sys/module/vhost_blk/parameters/worker_pool"
#define MAX_WORKERS	"/sys/module/vhost/parameters/max_workers"
/* An otherwise unused user and group. */
#define NOBODY		4242
#define NPROC_LIMIT	4

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

static int read_str(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -errno;
	buf[n] = 0;
	buf[strcspn(buf, "\n")] = 0;
	return 0;
}

/* Everything a test may set up; ctx_cleanup() undoes whatever was. */
struct ctx {
	struct vmm_blk b;
	bool blk_open;
	int be;			/* the backing fd */
	bool tmpfs;		/* TMPFS_DIR is mounted */
	unsigned char *log;	/* dirty log, one bit per guest page */
	size_t log_len;
	/* slow null_blk */
	const char *slow_nsec;	/* its completion time, SLOW_NSEC if NULL */
	bool slow_big;		/* 8 GiB, no memory, no delay instead */
	bool slow_cache;	/* a write cache: FLUSH reaches the device */
	bool slow_nodiscard;	/* no discard (null_blk.discard=1 is the default) */
	bool slow_buffered;	/* the backend through the page cache */
	bool slow_zoned;	/* host-managed, 4 MiB zones */
	bool slow;
	char slow_name[32];	/* its name in /dev and /sys/block */
	/* ext4 on a loop device */
	int img;
	char loop[32];
	bool mounted;
	int dirfd;
	bool frozen;
	bool wedged;		/* a freeze never finished: leave the mount */
	bool bdev_ro;		/* BLKROSET on c->be, to undo */
	/* other global state */
	bool cgroup;
	bool memcg;		/* we enabled +memory in the root cgroup */
	char pid_max[32];
	char worker_pool[32];
	char max_workers[32];
	pid_t child;
	/* fault injection knobs to restore, threads marked make-it-fail */
	struct {
		char path[96];
		char val[32];
	} knob[8];
	int nknobs;
	int marked[8];
	int nmarked;
};

static void ctx_init(struct ctx *c)
{
	memset(c, 0, sizeof(*c));
	c->be = -1;
	c->img = -1;
	c->dirfd = -1;
}

static void drop_loop(const char *path)
{
	int fd = open(path, O_RDWR);

	if (fd >= 0) {
		ioctl(fd, LOOP_CLR_FD, 0);
		close(fd);
	}
}

static void slow_nullb_remove(void)
{
	if (access(SLOW_CFG, F_OK))
		return;
	write_str(SLOW_CFG "/power", "0");
	rmdir(SLOW_CFG);
}

static void ctx_cleanup(struct ctx *c)
{
	int i;

	/* Thaw first: a write waiting for it holds up the device's release. */
	if (c->frozen)
		ioctl(c->dirfd, FITHAW, 0);
	/* And stop injecting failures before anything else runs. */
	for (i = 0; i < c->nmarked; i++) {
		char path[64];

		snprintf(path, sizeof(path), "/proc/%d/make-it-fail", c->marked[i]);
		write_str(path, "0");
	}
	for (i = c->nknobs - 1; i >= 0; i--)
		write_str(c->knob[i].path, c->knob[i].val);
	if (c->child > 0) {
		kill(c->child, SIGKILL);
		waitpid(c->child, NULL, 0);
	}
	if (c->blk_open)
		vmm_blk_close(&c->b);
	if (c->bdev_ro) {
		int ro = 0;

		ioctl(c->be, BLKROSET, &ro);
	}
	if (c->be >= 0)
		close(c->be);
	if (c->dirfd >= 0)
		close(c->dirfd);
	free(c->log);
	if (c->tmpfs) {
		umount(TMPFS_DIR);
		rmdir(TMPFS_DIR);
	}
	/* umount would wait for ever behind the freeze. */
	if (c->mounted && !c->wedged)
		umount(EXT4_MNT);
	if (c->loop[0] && !c->wedged)
		drop_loop(c->loop);
	if (c->img >= 0 && !c->wedged) {
		close(c->img);
		unlink(EXT4_IMG);
		rmdir(EXT4_MNT);
	}
	if (c->slow)
		slow_nullb_remove();
	/* Exiting workers may still be in the cgroup for a moment. */
	for (i = 0; c->cgroup && i < 100 && rmdir(CGROUP_DIR) && errno == EBUSY; i++)
		usleep(20 * 1000);
	if (c->memcg)
		write_str(CGROUP_ROOT "/cgroup.subtree_control", "-memory");
	if (c->pid_max[0])
		write_str(PID_MAX, c->pid_max);
	if (c->worker_pool[0])
		write_str(WORKER_POOL, c->worker_pool);
	if (c->max_workers[0])
		write_str(MAX_WORKERS, c->max_workers);
}

static int blk_open(struct ctx *c, unsigned int nq, unsigned int qsize,
		    uint64_t features, size_t mem)
{
	c->blk_open = true;
	return vmm_blk_open(&c->b, nq, qsize, features, mem);
}

/*
 * A file of @size bytes (sparse) on a tmpfs mounted for the test;
 * -ENOTSUP without tmpfs.
 */
static int tmpfs_file(struct ctx *c, uint64_t size)
{
	struct statfs s;
	int fd;

	mkdir(TMPFS_DIR, 0755);
	if (mount("tmpfs", TMPFS_DIR, "tmpfs", 0, "size=256m"))
		return -ENOTSUP;
	c->tmpfs = true;
	if (statfs(TMPFS_DIR, &s) || s.f_type != TMPFS_MAGIC)
		return -ENOTSUP;
	fd = open(TMPFS_FILE, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, size)) {
		close(fd);
		return -errno;
	}
	return fd;
}

/* A dirty log covering guest memory, handed to the device. */
static int log_setup(struct ctx *c)
{
	uint64_t base;

	c->log_len = (VMM_GPA_BASE + c->b.vmm.size) / 4096 / 8 + 8;
	c->log = calloc(1, c->log_len);
	if (!c->log)
		return -ENOMEM;
	base = (uintptr_t)c->log;
	return ioctl(c->b.fd, VHOST_SET_LOG_BASE, &base) ? -errno : 0;
}

static bool logged(struct ctx *c, const void *p)
{
	uint64_t page = vmm_gpa(&c->b.vmm, p) / 4096;

	return c->log[page / 8] & (1 << (page % 8));
}

/*
 * Post a request of @n data segments with its header at @hdr and its
 * status byte at @status, wherever they are.  Returns the head or -1.
 */
static int post_req(struct vmm_vq *vq, struct virtio_blk_outhdr *hdr, uint32_t type,
		    uint64_t sector, const struct vmm_seg *data, unsigned int n,
		    uint8_t *status)
{
	struct vmm_seg segs[VHOST_BLK_SEG_MAX + 8];

	if (n + 2 > ARRAY_SIZE(segs))
		return -1;
	hdr->type = type;
	hdr->ioprio = 0;
	hdr->sector = sector;
	*status = 0xff;
	segs[0] = (struct vmm_seg){ hdr, sizeof(*hdr), false };
	memcpy(&segs[1], data, n * sizeof(*data));
	segs[n + 1] = (struct vmm_seg){ status, 1, true };
	return vmm_vq_add(vq, segs, n + 2, false, status);
}

/* Kick and wait for the one request post_req() put on @vq: its status. */
static int run_req(struct vmm_vq *vq, uint8_t *status, int timeout_ms)
{
	vmm_vq_kick(vq);
	if (vmm_vq_get_used(vq, NULL, NULL, timeout_ms) < 0)
		return -1;
	return *status;
}

/*
 * The slow device: a configfs null_blk whose requests complete after
 * SLOW_NSEC, opened O_DIRECT (unless slow_buffered) as the backend (c->be).
 */
static int slow_nullb_create(struct ctx *c)
{
	const char * const attrs[][2] = {
		{ "size", c->slow_big ? "8192" : "64" },
		{ "memory_backed", c->slow_big ? "0" : "1" },
		{ "irqmode", c->slow_big ? "0" : "2" },
		{ "completion_nsec", c->slow_nsec ? c->slow_nsec : SLOW_NSEC },
		{ "cache_size", c->slow_cache ? "16" : "0" },
		/* Left alone otherwise: configfs devices take the module's. */
		{ c->slow_nodiscard ? "discard" : NULL, "0" },
		{ c->slow_zoned ? "zoned" : NULL, "1" },
		{ c->slow_zoned ? "zone_size" : NULL, "4" },
		{ "blocksize", "512" }, { "power", "1" },
	};
	char path[128], idx[16];
	unsigned int i;
	int r = 0;

	if (access(CONFIGFS "/nullb", F_OK))
		mount("none", CONFIGFS, "configfs", 0, NULL);
	if (access(CONFIGFS "/nullb", F_OK))
		return -ENOENT;
	slow_nullb_remove();	/* left over by a crashed run */
	if (mkdir(SLOW_CFG, 0755))
		return -errno;
	c->slow = true;
	for (i = 0; i < ARRAY_SIZE(attrs) && !r; i++) {
		if (!attrs[i][0])
			continue;
		snprintf(path, sizeof(path), "%s/%s", SLOW_CFG, attrs[i][0]);
		r = write_str(path, attrs[i][1]);
	}
	if (!r)
		r = read_str(SLOW_CFG "/index", idx, sizeof(idx));
	if (r)
		return r;
	/* Newer kernels call it nullb<index> again. */
	snprintf(c->slow_name, sizeof(c->slow_name), "%s", SLOW_NAME);
	snprintf(path, sizeof(path), "/sys/block/%s", c->slow_name);
	if (access(path, F_OK))
		snprintf(c->slow_name, sizeof(c->slow_name), "nullb%d", atoi(idx));
	snprintf(path, sizeof(path), "/dev/%s", c->slow_name);
	for (i = 0; i < 100 && access(path, F_OK); i++)
		usleep(20 * 1000);
	c->be = open(path, O_RDWR | (c->slow_buffered ? 0 : O_DIRECT));
	return c->be < 0 ? -errno : 0;
}

/*
 * Wait up to @ms for the slow device to have requests in flight (@busy) or
 * none: 0, -ETIMEDOUT or -EIO.
 */
static int slow_wait_inflight_for(struct ctx *c, bool busy, unsigned int ms)
{
	char path[64], buf[64];
	unsigned int r, w, i;

	snprintf(path, sizeof(path), "/sys/block/%s/inflight", c->slow_name);
	for (i = 0; i < ms / 5; i++) {
		if (read_str(path, buf, sizeof(buf)))
			return -EIO;
		if (sscanf(buf, "%u %u", &r, &w) == 2 && (r + w != 0) == busy)
			return 0;
		usleep(5 * 1000);
	}
	return -ETIMEDOUT;
}

static int slow_wait_in_flight(struct ctx *c)
{
	return slow_wait_inflight_for(c, true, 2000);
}

/*
 * Wait up to 2 s for a FLUSH at the slow device, which its in-flight count
 * leaves out: blk-mq's debugfs lists it among the busy requests.  0,
 * -ETIMEDOUT, or -ENOENT without CONFIG_BLK_DEBUG_FS.
 */
static int slow_wait_flush(struct ctx *c)
{
	char pattern[96], buf[4096];
	unsigned int i;
	size_t j;
	glob_t g;

	if (access("/sys/kernel/debug/block", F_OK))
		mount("debugfs", "/sys/kernel/debug", "debugfs", 0, NULL);
	snprintf(pattern, sizeof(pattern), "/sys/kernel/debug/block/%s/hctx*/busy",
		 c->slow_name);
	if (glob(pattern, 0, NULL, &g))
		return -ENOENT;
	for (i = 0; i < 400; i++) {
		for (j = 0; j < g.gl_pathc; j++) {
			if (!read_str(g.gl_pathv[j], buf, sizeof(buf)) &&
			    strstr(buf, ".op=FLUSH")) {
				globfree(&g);
				return 0;
			}
		}
		usleep(5 * 1000);
	}
	globfree(&g);
	return -ETIMEDOUT;
}

static int iotlb_msg(int fd, uint8_t type, uint64_t iova, uint64_t size, void *uaddr)
{
	struct vhost_msg_v2 msg = { .type = VHOST_IOTLB_MSG_V2 };

	msg.iotlb.iova = iova;
	msg.iotlb.size = size;
	msg.iotlb.uaddr = (uintptr_t)uaddr;
	msg.iotlb.perm = VHOST_ACCESS_RW;
	msg.iotlb.type = type;
	return write(fd, &msg, sizeof(msg)) == sizeof(msg) ? 0 : -errno;
}

/*
 * Device IOTLB (VIRTIO_F_ACCESS_PLATFORM): map guest memory one 4 KiB page
 * per entry, IOVA = guest physical address (not the host address), and give
 * ring 0 its addresses as IOVAs.
 */
static int iotlb_map_pages(struct ctx *c)
{
	uint64_t backend_features = 1ULL << VHOST_BACKEND_F_IOTLB_MSG_V2;
	struct vmm_vq *vq = &c->b.vq[0];
	struct vhost_vring_addr a = {
		.index = 0,
		.desc_user_addr = vmm_gpa(&c->b.vmm, vq->vr.desc),
		.avail_user_addr = vmm_gpa(&c->b.vmm, vq->vr.avail),
		.used_user_addr = vmm_gpa(&c->b.vmm, vq->vr.used),
	};
	size_t off;
	int r;

	if (ioctl(c->b.fd, VHOST_SET_BACKEND_FEATURES, &backend_features))
		return -errno;
	for (off = 0; off < c->b.vmm.size; off += 4096) {
		char *p = (char *)c->b.vmm.mem + off;

		r = iotlb_msg(c->b.fd, VHOST_IOTLB_UPDATE, vmm_gpa(&c->b.vmm, p), 4096, p);
		if (r)
			return r;
	}
	return ioctl(c->b.fd, VHOST_SET_VRING_ADDR, &a) ? -errno : 0;
}

static int new_worker(int fd, unsigned int *id)
{
	struct vhost_worker_state s = { .worker_id = 12345 };

	int r = vmm_worker_call(fd, VHOST_NEW_WORKER, &s);

	if (!r)
		*id = s.worker_id;
	return r;
}

static int free_worker(int fd, unsigned int id)
{
	struct vhost_worker_state s = { .worker_id = id };

	return vmm_worker_call(fd, VHOST_FREE_WORKER, &s);
}

static int set_worker(int fd, unsigned int ring, unsigned int *id)
{
	struct vhost_vring_worker w = { .index = ring, .worker_id = *id };

	int r = vmm_worker_call(fd, VHOST_SET_VRING_WORKER, &w);

	if (!r)
		*id = w.worker_id;
	return r;
}

/* The first line of /proc/<pid>/cgroup ("0::/path" with cgroup2 only). */
static int cgroup_of(pid_t pid, char *buf, size_t len)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/cgroup", pid);
	return read_str(path, buf, len);
}

FIXTURE(hard) {
	struct ctx c;
};

FIXTURE_SETUP(hard)
{
	const char *why = vhost_unusable("/dev/vhost-blk", "CONFIG_VHOST_BLK");

	ctx_init(&self->c);
	if (why)
		SKIP(return, "%s", why);
	if (geteuid())
		SKIP(return, "needs root");
}

FIXTURE_TEARDOWN(hard)
{
	ctx_cleanup(&self->c);
}

/* 1a. A regular file with ->read but no ->read_iter is no backend. */
TEST_F_TIMEOUT(hard, backend_without_read_iter_is_refused, 30)
{
	struct ctx *c = &self->c;
	int r;

	ASSERT_EQ(0, blk_open(c, 1, 64, V1, 1 << 20));
	c->be = open("/proc/self/environ", O_RDONLY);
	ASSERT_LE(0, c->be);
	r = vmm_blk_set_backend(&c->b, c->be);
	/* Never post a request to it: a READ would call a NULL ->read_iter. */
	if (!r)
		vmm_blk_set_backend(&c->b, -1);
	EXPECT_EQ(-EINVAL, r)
		TH_LOG("/proc/self/environ (->read, no ->read_iter): %s",
		       r ? strerror(-r) : "accepted as a backend");
}

/* 1b. An O_APPEND file is no backend: guest writes would land at its end. */
TEST_F_TIMEOUT(hard, append_only_backend_is_refused, 30)
{
	struct ctx *c = &self->c;
	int fd = tmpfs_file(c, 1 << 20), r;

	if (fd == -ENOTSUP)
		SKIP(return, "cannot mount tmpfs");
	ASSERT_LE(0, fd);
	close(fd);
	ASSERT_EQ(0, blk_open(c, 1, 64, V1, 1 << 20));
	c->be = open(TMPFS_FILE, O_RDWR | O_APPEND);
	ASSERT_LE(0, c->be);
	r = vmm_blk_set_backend(&c->b, c->be);
	EXPECT_EQ(-EINVAL, r) TH_LOG("O_RDWR|O_APPEND: %s", r ? strerror(-r) : "accepted");
	/* The same file without O_APPEND is fine. */
	close(c->be);
	c->be = open(TMPFS_FILE, O_RDWR);
	ASSERT_LE(0, c->be);
	EXPECT_EQ(0, vmm_blk_set_backend(&c->b, c->be));
}

/*
 * 1e. A zoned block device is no backend: it takes writes only at each
 * zone's write pointer, and the device serves none of virtio-blk's zoned
 * requests, so a guest's first write out of order would fail.
 */
TEST_F_TIMEOUT(hard, zoned_backend_is_refused, 30)
{
	struct ctx *c = &self->c;
	char path[64], model[32];
	int r;

	c->slow_zoned = true;
	r = slow_nullb_create(c);
	if (r)
		SKIP(return, "no zoned configfs null_blk (CONFIG_BLK_DEV_ZONED): %s",
		     strerror(-r));
	/* What makes this test mean anything: the device is zoned. */
	snprintf(path, sizeof(path), "/sys/block/%s/queue/zoned", c->slow_name);
	ASSERT_EQ(0, read_str(path, model, sizeof(model)));
	ASSERT_STREQ("host-managed", model);
	ASSERT_EQ(0, blk_open(c, 1, 64, V1, 1 << 20));
	r = vmm_blk_set_backend(&c->b, c->be);
	if (!r)
		vmm_blk_set_backend(&c->b, -1);
	EXPECT_EQ(-EOPNOTSUPP, r)
		TH_LOG("a host-managed zoned null_blk: %s",
		       r ? strerror(-r) : "accepted as a backend");
}

/* 1c. O_APPEND set after SET_BACKEND: write-type requests fail, touch nothing. */
TEST_F_TIMEOUT(hard, backend_made_append_only_fails_writes, 30)
{
	const size_t size = 1 << 20;
	struct ctx *c = &self->c;
	unsigned char *want, *got;
	struct stat st;
	void *buf;
	int flags;

	c->be = tmpfs_file(c, size);
	if (c->be == -ENOTSUP)
		SKIP(return, "cannot mount tmpfs");
	ASSERT_LE(0, c->be);
	want = malloc(size);
	got = malloc(size);
	ASSERT_NE(NULL, want);
	ASSERT_NE(NULL, got);
	fill(want, size, 0, 31);
	ASSERT_EQ(size, pwrite(c->be, want, size, 0));
	ASSERT_EQ(0, blk_open(c, 1, 64, V1, 1 << 20));
	ASSERT_EQ(0, vmm_blk_set_backend(&c->b, c->be));
	flags = fcntl(c->be, F_GETFL);
	ASSERT_LE(0, flags);
	ASSERT_EQ(0, fcntl(c->be, F_SETFL, flags | O_APPEND));

	buf = vmm_alloc(&c->b.vmm, 8192, 4096);
	ASSERT_NE(NULL, buf);
	fill(buf, 4096, 16, 32);
	EXPECT_EQ(VIRTIO_BLK_S_IOERR, vmm_blk_do(&c->b, 0, VIRTIO_BLK_T_OUT, 16, buf, 4096))
		TH_LOG("a WRITE to an O_APPEND backend must fail");
	ASSERT_LE(0, vmm_blk_post_dwz(&c->b, 0, VIRTIO_BLK_T_WRITE_ZEROES, 64, 8, 0, NULL));
	vmm_vq_kick(&c->b.vq[0]);
	EXPECT_EQ(VIRTIO_BLK_S_IOERR, vmm_blk_reap(&c->b, 0, NULL, NULL, 10000))
		TH_LOG("a WRITE_ZEROES to an O_APPEND backend must fail");

	/* Nothing moved: same size, same bytes. */
	ASSERT_EQ(0, fstat(c->be, &st));
	EXPECT_EQ(size, st.st_size) TH_LOG("the file grew: the write was appended");
	ASSERT_EQ(size, pread(c->be, got, size, 0));
	EXPECT_EQ(0, memcmp(want, got, size)) TH_LOG("the file's contents changed");
	/* Reads still work. */
	EXPECT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&c->b, 0, VIRTIO_BLK_T_IN, 16, buf, 4096));
	EXPECT_EQ(0, memcmp(buf, want + 16 * 512, 4096));
	free(want);
	free(got);
}

/* Fields of /sys/block/<dev>/stat; returns how many were read. */
static int blk_stat(const char *dev, unsigned long long *v, int max)
{
	char path[64], buf[512], *p = buf, *end;
	int n = 0;

	snprintf(path, sizeof(path), "/sys/block/%s/stat", dev);
	if (read_str(path, buf, sizeof(buf)))
		return -1;
	while (n < max) {
		v[n] = strtoull(p, &end, 10);
		if (end == p)
			break;
		p = end;
		n++;
	}
	return n;
}

/* 6. DISCARD on a block device discards: it never writes. */
TEST_F_TIMEOUT(hard, discard_never_writes_a_block_device, 30)
{
	/* 7th field: sectors written; 14th: sectors discarded. */
	enum { WRITE_SECTORS = 6, DISCARD_SECTORS = 13 };
	unsigned long long before[17], after[17];
	const char *why = vhost_nullb_unusable(false, true);
	struct ctx *c = &self->c;
	int n;

	if (why)
		SKIP(return, "%s", why);
	c->be = open(NULLB0, O_RDWR | O_DIRECT);
	ASSERT_LE(0, c->be);
	ASSERT_EQ(0, blk_open(c, 1, 64, V1, 1 << 20));
	ASSERT_EQ(0, vmm_blk_set_backend(&c->b, c->be));
	n = blk_stat("nullb0", before, 17);
	ASSERT_LE(WRITE_SECTORS + 1, n);
	/* 8 MiB. */
	ASSERT_LE(0, vmm_blk_post_dwz(&c->b, 0, VIRTIO_BLK_T_DISCARD, 0, 16384, 0, NULL));
	vmm_vq_kick(&c->b.vq[0]);
	ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_reap(&c->b, 0, NULL, NULL, 20000));
	ASSERT_EQ(n, blk_stat("nullb0", after, 17));
	EXPECT_EQ(before[WRITE_SECTORS], after[WRITE_SECTORS])
		TH_LOG("DISCARD wrote %llu sectors", after[WRITE_SECTORS] - before[WRITE_SECTORS]);
	if (n > DISCARD_SECTORS)
		EXPECT_LE(before[DISCARD_SECTORS] + 16384, after[DISCARD_SECTORS])
			TH_LOG("%llu sectors discarded, not 16384",
			       after[DISCARD_SECTORS] - before[DISCARD_SECTORS]);
}

/* memory.current of CGROUP_DIR, or -1. */
static long long memcg_current(void)
{
	char buf[32];

	if (read_str(CGROUP_DIR "/memory.current", buf, sizeof(buf)))
		return -1;
	return atoll(buf);
}

/*
 * The child of memcg_charged_for_owners: joins CGROUP_DIR, opens @n
 * devices, and reports to @out what SET_OWNER on each added to the cgroup's
 * memory.current (or -1), keeping the devices until @in closes.
 */
static void memcg_owner_child(int n, int in, int out)
{
	char pid[16];
	long long before, after, delta = -1;
	int fds[16], i;

	snprintf(pid, sizeof(pid), "%d", getpid());
	if (n > 16 || write_str(CGROUP_DIR "/cgroup.procs", pid))
		goto report;
	for (i = 0; i < n; i++) {
		fds[i] = open("/dev/vhost-blk", O_RDWR);
		if (fds[i] < 0)
			goto report;
	}
	before = memcg_current();
	for (i = 0; i < n; i++)
		if (ioctl(fds[i], VHOST_SET_OWNER, NULL))
			goto report;
	after = memcg_current();
	if (before >= 0 && after >= 0)
		delta = after - before;
report:
	if (write(out, &delta, sizeof(delta)) != sizeof(delta))
		_exit(1);
	/* The devices stay until the parent has read it. */
	_exit(read(in, pid, 1) < 0);
}

/*
 * What VHOST_SET_OWNER makes for a device is charged to
 * the owner's memory cgroup, the rings' arrays that chains are walked into
 * (UIO_MAXIOV indirect descriptors, log entries and used elements: about
 * 40 KiB a ring) included: a process in a cgroup of its own sets itself as
 * the owner of DEVS devices, and the cgroup's memory.current grows by at
 * least 32 KiB a ring.  Uncharged, a VMM limited to any amount of memory
 * could pin 650 KiB per fd.
 */
TEST_F_TIMEOUT(hard, memcg_charged_for_owners, 60)
{
	enum { DEVS = 8 };
	const long long want = (long long)DEVS * VHOST_BLK_MAX_QUEUES * (32 << 10);
	struct ctx *c = &self->c;
	int to[2], from[2], status;
	char ctl[256];
	long long delta;
	pid_t pid;

	if (access(CGROUP_ROOT "/cgroup.procs", F_OK))
		SKIP(return, "cgroup2 not mounted at " CGROUP_ROOT);
	ASSERT_EQ(0, read_str(CGROUP_ROOT "/cgroup.controllers", ctl, sizeof(ctl)));
	ASSERT_NE(NULL, strstr(ctl, "memory")) TH_LOG("no memory controller (CONFIG_MEMCG)");
	ASSERT_EQ(0, read_str(CGROUP_ROOT "/cgroup.subtree_control", ctl, sizeof(ctl)));
	if (!strstr(ctl, "memory")) {
		ASSERT_EQ(0, write_str(CGROUP_ROOT "/cgroup.subtree_control", "+memory"));
		c->memcg = true;
	}
	rmdir(CGROUP_DIR);
	ASSERT_EQ(0, mkdir(CGROUP_DIR, 0755));
	c->cgroup = true;
	ASSERT_EQ(0, pipe(to));
	ASSERT_EQ(0, pipe(from));
	pid = vmm_fork_tied();
	ASSERT_LE(0, pid);
	if (!pid) {
		close(to[1]);
		close(from[0]);
		memcg_owner_child(DEVS, to[0], from[1]);
	}
	c->child = pid;
	close(to[0]);
	close(from[1]);
	ASSERT_EQ(sizeof(delta), read(from[0], &delta, sizeof(delta)));
	close(to[1]);
	close(from[0]);
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	c->child = 0;
	ASSERT_LE(0, delta) TH_LOG("the child could not open and own the devices");
	TH_LOG("SET_OWNER on %d devices charged %lld KiB", DEVS, delta >> 10);
	EXPECT_LE(want, delta)
		TH_LOG("less than %lld KiB charged: the rings' arrays are not the owner's",
		       want >> 10);
}

/*
 * The child of memcg_charged_for_ring_slots: joins CGROUP_DIR, opens a
 * device with VHOST_BLK_MAX_QUEUES rings of @qsize, and reports to @out
 * what starting them (SET_BACKEND to @be) added to the cgroup's
 * memory.current (or -1).
 */
static void memcg_slots_child(int be, unsigned int qsize, int out)
{
	long long before, after, delta = -1;
	struct vmm_blk b;
	char pid[16];

	snprintf(pid, sizeof(pid), "%d", getpid());
	if (write_str(CGROUP_DIR "/cgroup.procs", pid) ||
	    vmm_blk_open(&b, VHOST_BLK_MAX_QUEUES, qsize, V1, 8 << 20))
		goto report;
	before = memcg_current();
	if (!vmm_blk_set_backend(&b, be)) {
		after = memcg_current();
		if (before >= 0 && after >= 0)
			delta = after - before;
	}
report:
	if (write(out, &delta, sizeof(delta)) != sizeof(delta))
		_exit(1);
	_exit(0);
}

/*
 * The request slots a ring allocates when it starts
 * (one per descriptor, up to 1024, about 300 bytes each) are charged to
 * the owner's memory cgroup: a process in a cgroup of its own starts 16
 * rings of 1024 entries on one device (all on the default worker, so no
 * thread stacks are counted), and the cgroup's memory.current grows by at
 * least 192 bytes a slot.  Uncharged, a VMM limited to any amount of
 * memory could pin 4.8 MiB per fd.
 */
TEST_F_TIMEOUT(hard, memcg_charged_for_ring_slots, 60)
{
	enum { QSIZE = 1024 };
	const long long want = (long long)VHOST_BLK_MAX_QUEUES * QSIZE * 192;
	struct ctx *c = &self->c;
	int from[2], status;
	char ctl[256];
	long long delta;
	pid_t pid;

	if (access(CGROUP_ROOT "/cgroup.procs", F_OK))
		SKIP(return, "cgroup2 not mounted at " CGROUP_ROOT);
	if (read_str(WORKER_POOL, c->worker_pool, sizeof(c->worker_pool)))
		SKIP(return, "%s missing", WORKER_POOL);
	ASSERT_EQ(0, write_str(WORKER_POOL, "1"));
	ASSERT_EQ(0, read_str(CGROUP_ROOT "/cgroup.controllers", ctl, sizeof(ctl)));
	ASSERT_NE(NULL, strstr(ctl, "memory")) TH_LOG("no memory controller (CONFIG_MEMCG)");
	ASSERT_EQ(0, read_str(CGROUP_ROOT "/cgroup.subtree_control", ctl, sizeof(ctl)));
	if (!strstr(ctl, "memory")) {
		ASSERT_EQ(0, write_str(CGROUP_ROOT "/cgroup.subtree_control", "+memory"));
		c->memcg = true;
	}
	c->be = tmpfs_file(c, 1 << 20);
	if (c->be == -ENOTSUP)
		SKIP(return, "cannot mount tmpfs");
	ASSERT_LE(0, c->be);
	rmdir(CGROUP_DIR);
	ASSERT_EQ(0, mkdir(CGROUP_DIR, 0755));
	c->cgroup = true;
	ASSERT_EQ(0, pipe(from));
	pid = vmm_fork_tied();
	ASSERT_LE(0, pid);
	if (!pid) {
		close(from[0]);
		memcg_slots_child(c->be, QSIZE, from[1]);
	}
	c->child = pid;
	close(from[1]);
	ASSERT_EQ(sizeof(delta), read(from[0], &delta, sizeof(delta)));
	close(from[0]);
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	c->child = 0;
	ASSERT_LE(0, delta) TH_LOG("the child could not set up and start the rings");
	TH_LOG("starting %d rings of %d charged %lld KiB", VHOST_BLK_MAX_QUEUES,
	       QSIZE, delta >> 10);
	EXPECT_LE(want, delta)
		TH_LOG("less than %lld KiB charged: the slots are not the owner's",
		       want >> 10);
}

/*
 * A block device made read-only (BLKROSET) after
 * SET_BACKEND refuses DISCARD as it refuses writes: IOERR, and the data
 * stays.
 */
TEST_F_TIMEOUT(hard, discard_refused_on_a_read_only_block_device, 30)
{
	const char *why = vhost_nullb_unusable(true, true);
	struct ctx *c = &self->c;
	uint64_t sector = 8192;
	unsigned char *buf, *buf2;
	int ro = 1;

	if (why)
		SKIP(return, "%s", why);
	c->be = open(NULLB0, O_RDWR | O_DIRECT);
	ASSERT_LE(0, c->be);
	ASSERT_EQ(0, blk_open(c, 1, 64, V1, 1 << 20));
	ASSERT_EQ(0, vmm_blk_set_backend(&c->b, c->be));
	buf = vmm_alloc(&c->b.vmm, 4096, 4096);
	buf2 = vmm_alloc(&c->b.vmm, 4096, 4096);
	ASSERT_NE(NULL, buf2);
	fill(buf, 4096, sector, 61);
	ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&c->b, 0, VIRTIO_BLK_T_OUT, sector, buf, 4096));

	ASSERT_EQ(0, ioctl(c->be, BLKROSET, &ro)) TH_LOG("BLKROSET: %s", strerror(errno));
	c->bdev_ro = true;
	EXPECT_EQ(VIRTIO_BLK_S_IOERR, vmm_blk_do(&c->b, 0, VIRTIO_BLK_T_OUT, sector, buf2, 4096))
		TH_LOG("a write to the read-only device did not fail");
	ASSERT_LE(0, vmm_blk_post_dwz(&c->b, 0, VIRTIO_BLK_T_DISCARD, sector, 8, 0, NULL));
	vmm_vq_kick(&c->b.vq[0]);
	EXPECT_EQ(VIRTIO_BLK_S_IOERR, vmm_blk_reap(&c->b, 0, NULL, NULL, 10000))
		TH_LOG("a DISCARD of the read-only device did not fail");
	memset(buf2, 0xaa, 4096);
	ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&c->b, 0, VIRTIO_BLK_T_IN, sector, buf2, 4096));
	EXPECT_EQ(0, memcmp(buf, buf2, 4096)) TH_LOG("the data under the DISCARD went");
}

/* 6. WRITE_ZEROES on a block device zeroes, with and without UNMAP. */
TEST_F_TIMEOUT(hard, write_zeroes_zeroes_a_block_device, 30)
{
	static const uint32_t flags[] = { 0, VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP };
	struct ctx *c = &self->c;
	uint64_t sector = 4096;
	unsigned char *buf, *buf2;
	const char *why = vhost_nullb_unusable(true, false);
	unsigned int i;

	if (why)
		SKIP(return, "%s", why);
	c->be = open(NULLB0, O_RDWR | O_DIRECT);
	ASSERT_LE(0, c->be);
	ASSERT_EQ(0, blk_open(c, 1, 64, V1, 1 << 20));
	ASSERT_EQ(0, vmm_blk_set_backend(&c->b, c->be));
	buf = vmm_alloc(&c->b.vmm, 65536, 4096);
	buf2 = vmm_alloc(&c->b.vmm, 65536, 4096);
	ASSERT_NE(NULL, buf2);
	for (i = 0; i < ARRAY_SIZE(flags); i++) {
		fill(buf, 65536, sector, 40 + i);
		ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&c->b, 0, VIRTIO_BLK_T_OUT, sector,
						      buf, 65536));
		ASSERT_LE(0, vmm_blk_post_dwz(&c->b, 0, VIRTIO_BLK_T_WRITE_ZEROES,
					      sector + 8, 64, flags[i], NULL));
		vmm_vq_kick(&c->b.vq[0]);
		ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_reap(&c->b, 0, NULL, NULL, 10000));
		memset(buf2, 0xaa, 65536);
		ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&c->b, 0, VIRTIO_BLK_T_IN, sector,
						      buf2, 65536));
		EXPECT_EQ(0, memcmp(buf, buf2, 8 * 512));
		EXPECT_TRUE(is_zero(buf2 + 8 * 512, 64 * 512))
			TH_LOG("flags %#x: the range does not read back as zeroes", flags[i]);
		EXPECT_EQ(0, memcmp(buf + 72 * 512, buf2 + 72 * 512, 65536 - 72 * 512));
	}
}

/*
 * 6. Longer than VHOST_BLK_MAX_DISCARD_SECTORS or _WRITE_ZEROES_SECTORS is
 * IOERR, at once; exactly the maximum works.  A sparse 4 TiB tmpfs file, so
 * that every range here is inside capacity.  The over-long WRITE_ZEROES
 * without UNMAP is only 512 bytes over: a kernel that zero-fills it anyway
 * stays bounded.
 */
TEST_F_TIMEOUT(hard, discard_and_write_zeroes_maximums, 120)
{
	const uint32_t unmap = VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP;
	static const struct {
		uint32_t type, nsect, flags;
		uint8_t want;
	} cases[] = {
		{ VIRTIO_BLK_T_DISCARD, VHOST_BLK_MAX_DISCARD_SECTORS + 1, 0,
		  VIRTIO_BLK_S_IOERR },
		{ VIRTIO_BLK_T_DISCARD, 0xffffffff, 0, VIRTIO_BLK_S_IOERR },
		{ VIRTIO_BLK_T_WRITE_ZEROES, VHOST_BLK_MAX_WRITE_ZEROES_SECTORS + 1,
		  VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP, VIRTIO_BLK_S_IOERR },
		{ VIRTIO_BLK_T_WRITE_ZEROES, 0xffffffff,
		  VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP, VIRTIO_BLK_S_IOERR },
		{ VIRTIO_BLK_T_WRITE_ZEROES, VHOST_BLK_MAX_WRITE_ZEROES_SECTORS + 1, 0,
		  VIRTIO_BLK_S_IOERR },
		{ VIRTIO_BLK_T_DISCARD, VHOST_BLK_MAX_DISCARD_SECTORS, 0, VIRTIO_BLK_S_OK },
		{ VIRTIO_BLK_T_WRITE_ZEROES, VHOST_BLK_MAX_WRITE_ZEROES_SECTORS,
		  VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP, VIRTIO_BLK_S_OK },
		{ VIRTIO_BLK_T_WRITE_ZEROES, VHOST_BLK_MAX_WRITE_ZEROES_SECTORS, 0,
		  VIRTIO_BLK_S_OK },
	};
	struct ctx *c = &self->c;
	unsigned int i;
	void *buf;

	c->be = tmpfs_file(c, 4ULL << 40);
	if (c->be == -ENOTSUP)
		SKIP(return, "cannot mount tmpfs");
	ASSERT_LE(0, c->be);
	ASSERT_EQ(0, blk_open(c, 1, 64, V1, 1 << 20));
	ASSERT_EQ(0, vmm_blk_set_backend(&c->b, c->be));
	buf = vmm_alloc(&c->b.vmm, 4096, 4096);
	ASSERT_NE(NULL, buf);
	for (i = 0; i < ARRAY_SIZE(cases); i++) {
		bool zeroes = cases[i].type == VIRTIO_BLK_T_WRITE_ZEROES &&
			      cases[i].want == VIRTIO_BLK_S_OK;
		const char *name = "DISCARD", *how = "";
		double t;
		int st, ms;

		if (cases[i].type == VIRTIO_BLK_T_WRITE_ZEROES)
			name = "WRITE_ZEROES";
		if (cases[i].flags & unmap)
			how = " (UNMAP)";

		/* Data the successful WRITE_ZEROES must clear. */
		if (zeroes) {
			fill(buf, 4096, 1000, 50 + i);
			ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&c->b, 0, VIRTIO_BLK_T_OUT,
							      1000, buf, 4096));
		}
		t = now_s();
		ASSERT_LE(0, vmm_blk_post_dwz(&c->b, 0, cases[i].type, 0, cases[i].nsect,
					      cases[i].flags, NULL));
		vmm_vq_kick(&c->b.vq[0]);
		st = vmm_blk_reap(&c->b, 0, NULL, NULL, 60000);
		ms = (now_s() - t) * 1000;
		EXPECT_EQ(cases[i].want, st)
			TH_LOG("%s of %#x sectors%s: status %d", name, cases[i].nsect,
			       how, st);
		ASSERT_LE(0, st) TH_LOG("request %u lost", i);
		if (cases[i].want == VIRTIO_BLK_S_IOERR)
			EXPECT_GT(5000, ms) TH_LOG("%s of %#x sectors%s: refused after %d ms",
						   name, cases[i].nsect, how, ms);
		if (zeroes) {
			memset(buf, 0xaa, 4096);
			ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&c->b, 0, VIRTIO_BLK_T_IN,
							      1000, buf, 4096));
			EXPECT_TRUE(is_zero(buf, 4096));
		}
	}
}

/* A LOG_ALL device on a 1 MiB tmpfs file, for the status byte tests. */
static int logged_dev(struct ctx *c)
{
	int r;

	c->be = tmpfs_file(c, 1 << 20);
	if (c->be < 0)
		return c->be;
	r = blk_open(c, 1, 64, V1 | LOG_ALL, 8 << 20);
	if (!r)
		r = log_setup(c);
	if (!r)
		r = vmm_blk_set_backend(&c->b, c->be);
	return r;
}

/* 5a. An error status is guest memory the device wrote: it is logged. */
TEST_F_TIMEOUT(hard, status_byte_logged_on_error, 30)
{
	struct ctx *c = &self->c;
	struct virtio_blk_outhdr *hdr;
	uint8_t *data, *status;
	struct vmm_seg seg;
	int r = logged_dev(c);

	if (r == -ENOTSUP)
		SKIP(return, "cannot mount tmpfs");
	ASSERT_EQ(0, r);
	hdr = vmm_alloc(&c->b.vmm, 64, 64);
	data = vmm_alloc(&c->b.vmm, 4096, 4096);
	/* The status byte a good way off, on a page of its own. */
	ASSERT_NE(NULL, vmm_alloc(&c->b.vmm, 65536, 4096));
	status = vmm_alloc(&c->b.vmm, 4096, 4096);
	ASSERT_NE(NULL, status);
	status += 100;

	/* A READ beyond capacity: only the status byte is written. */
	seg = (struct vmm_seg){ data, 512, true };
	memset(c->log, 0, c->log_len);
	ASSERT_LE(0, post_req(&c->b.vq[0], hdr, VIRTIO_BLK_T_IN, (1 << 20) / 512, &seg, 1,
			      status));
	ASSERT_EQ(VIRTIO_BLK_S_IOERR, run_req(&c->b.vq[0], status, 10000));
	EXPECT_TRUE(logged(c, status)) TH_LOG("the status byte's page is not in the log");
}

/* 5b. GET_ID writes 20 bytes and the status byte: both are logged. */
TEST_F_TIMEOUT(hard, status_byte_logged_for_get_id, 30)
{
	struct ctx *c = &self->c;
	struct virtio_blk_outhdr *hdr;
	uint8_t *data, *status;
	struct vmm_seg seg;
	int r = logged_dev(c);

	if (r == -ENOTSUP)
		SKIP(return, "cannot mount tmpfs");
	ASSERT_EQ(0, r);
	hdr = vmm_alloc(&c->b.vmm, 64, 64);
	data = vmm_alloc(&c->b.vmm, 8192, 4096);
	ASSERT_NE(NULL, vmm_alloc(&c->b.vmm, 65536, 4096));
	status = vmm_alloc(&c->b.vmm, 4096, 4096);
	ASSERT_NE(NULL, status);
	status += 100;

	/* A two-page buffer, of which the device fills 20 bytes. */
	seg = (struct vmm_seg){ data, 8192, true };
	memset(data, 0x55, 8192);
	memset(c->log, 0, c->log_len);
	ASSERT_LE(0, post_req(&c->b.vq[0], hdr, VIRTIO_BLK_T_GET_ID, 0, &seg, 1, status));
	ASSERT_EQ(VIRTIO_BLK_S_OK, run_req(&c->b.vq[0], status, 10000));
	EXPECT_EQ(0, memcmp(data, "vhost-blk\0\0\0\0\0\0\0\0\0\0\0", VHOST_BLK_SERIAL_LEN));
	EXPECT_TRUE(logged(c, data)) TH_LOG("the serial's page is not in the log");
	EXPECT_TRUE(logged(c, status)) TH_LOG("the status byte's page is not in the log");
}

/*
 * 8. The segment limit counts descriptors.  Every 4 KiB guest page is its
 * own IOTLB entry and every data segment straddles two of them, so 128
 * segments make 256 data iovecs: still 128 segments, which must work.  129
 * segments are too many and touch nothing.
 */
TEST_F_TIMEOUT(hard, segment_limit_counts_descriptors, 60)
{
	const unsigned int max = VHOST_BLK_SEG_MAX;
	const size_t span = (max + 1) * 4096;
	struct vmm_seg segs[VHOST_BLK_SEG_MAX + 1];
	struct ctx *c = &self->c;
	struct virtio_blk_outhdr *hdr;
	unsigned char *wbuf, *rbuf, *want, *got;
	uint8_t *status;
	unsigned int i;
	int st;

	c->be = tmpfs_file(c, 4 << 20);
	if (c->be == -ENOTSUP)
		SKIP(return, "cannot mount tmpfs");
	ASSERT_LE(0, c->be);
	ASSERT_EQ(0, blk_open(c, 1, 256, V1 | PLATFORM, 2 << 20));
	ASSERT_EQ(0, iotlb_map_pages(c));
	ASSERT_EQ(0, vmm_blk_set_backend(&c->b, c->be));
	hdr = vmm_alloc(&c->b.vmm, 64, 64);
	status = vmm_alloc(&c->b.vmm, 64, 64);
	wbuf = vmm_alloc(&c->b.vmm, span + 4096, 4096);
	rbuf = vmm_alloc(&c->b.vmm, span + 4096, 4096);
	ASSERT_NE(NULL, rbuf);
	want = calloc(1, span);
	got = malloc(span);
	ASSERT_NE(NULL, want);
	ASSERT_NE(NULL, got);

	/* WRITE of 128 segments, each at offset 2048 of a page. */
	fill(wbuf + 2048, max * 4096, 64, 60);
	memcpy(want, wbuf + 2048, max * 4096);
	for (i = 0; i < max; i++)
		segs[i] = (struct vmm_seg){ wbuf + 2048 + i * 4096, 4096, false };
	ASSERT_LE(0, post_req(&c->b.vq[0], hdr, VIRTIO_BLK_T_OUT, 64, segs, max, status));
	st = run_req(&c->b.vq[0], status, 10000);
	EXPECT_EQ(VIRTIO_BLK_S_OK, st) TH_LOG("WRITE of %u segments: status %d", max, st);
	ASSERT_EQ(span, pread(c->be, got, span, 64 * 512));
	EXPECT_EQ(0, memcmp(want, got, span)) TH_LOG("the store does not hold the write");

	/* READ of 128 segments back. */
	memset(rbuf, 0xaa, span + 4096);
	for (i = 0; i < max; i++)
		segs[i] = (struct vmm_seg){ rbuf + 2048 + i * 4096, 4096, true };
	ASSERT_LE(0, post_req(&c->b.vq[0], hdr, VIRTIO_BLK_T_IN, 64, segs, max, status));
	st = run_req(&c->b.vq[0], status, 10000);
	EXPECT_EQ(VIRTIO_BLK_S_OK, st) TH_LOG("READ of %u segments: status %d", max, st);
	EXPECT_EQ(0, memcmp(want, rbuf + 2048, max * 4096));

	/* 129 segments: refused both ways, the store untouched. */
	fill(wbuf + 2048, (max + 1) * 4096, 64, 61);
	for (i = 0; i <= max; i++)
		segs[i] = (struct vmm_seg){ wbuf + 2048 + i * 4096, 4096, false };
	ASSERT_LE(0, post_req(&c->b.vq[0], hdr, VIRTIO_BLK_T_OUT, 64, segs, max + 1, status));
	EXPECT_EQ(VIRTIO_BLK_S_IOERR, run_req(&c->b.vq[0], status, 10000));
	ASSERT_EQ(span, pread(c->be, got, span, 64 * 512));
	EXPECT_EQ(0, memcmp(want, got, span)) TH_LOG("a refused WRITE reached the store");
	for (i = 0; i <= max; i++)
		segs[i] = (struct vmm_seg){ rbuf + 2048 + i * 4096, 4096, true };
	ASSERT_LE(0, post_req(&c->b.vq[0], hdr, VIRTIO_BLK_T_IN, 64, segs, max + 1, status));
	EXPECT_EQ(VIRTIO_BLK_S_IOERR, run_req(&c->b.vq[0], status, 10000));
	free(want);
	free(got);
}

/*
 * 4. Switching VHOST_F_LOG_ALL on waits for the requests in flight: when
 * VHOST_SET_FEATURES returns, a WRITE posted before is complete.
 */
TEST_F_TIMEOUT(hard, log_all_on_waits_for_requests, 60)
{
	struct ctx *c = &self->c;
	uint64_t features = V1 | LOG_ALL;
	void *buf;
	int r = slow_nullb_create(c), st;

	if (r)
		SKIP(return, "no configfs null_blk: %s", strerror(-r));
	ASSERT_EQ(0, blk_open(c, 1, 64, V1, 8 << 20));
	ASSERT_EQ(0, log_setup(c));
	ASSERT_EQ(0, vmm_blk_set_backend(&c->b, c->be));
	buf = vmm_alloc(&c->b.vmm, 4096, 4096);
	ASSERT_NE(NULL, buf);
	fill(buf, 4096, 8, 70);
	ASSERT_LE(0, vmm_blk_post(&c->b, 0, VIRTIO_BLK_T_OUT, 8, buf, 4096, 1, false, NULL));
	vmm_vq_kick(&c->b.vq[0]);
	ASSERT_EQ(0, slow_wait_in_flight(c));
	/* Still in flight when the call is made, or this tests nothing. */
	ASSERT_EQ(-1, vmm_blk_reap(&c->b, 0, NULL, NULL, 0));
	ASSERT_EQ(0, ioctl(c->b.fd, VHOST_SET_FEATURES, &features));
	st = vmm_blk_reap(&c->b, 0, NULL, NULL, 0);
	EXPECT_EQ(VIRTIO_BLK_S_OK, st)
		TH_LOG("the WRITE was still in flight when LOG_ALL was switched on");
	if (st < 0)
		EXPECT_EQ(VIRTIO_BLK_S_OK, vmm_blk_reap(&c->b, 0, NULL, NULL, 10000));
}

/*
 * 4. Switching VHOST_F_LOG_ALL off waits too: a READ submitted with logging
 * is complete when the call returns, and its pages are in the log.
 */
TEST_F_TIMEOUT(hard, log_all_off_waits_and_logs, 60)
{
	struct ctx *c = &self->c;
	uint64_t features = V1;
	unsigned char *buf;
	int r = slow_nullb_create(c), st;

	if (r)
		SKIP(return, "no configfs null_blk: %s", strerror(-r));
	ASSERT_EQ(0, blk_open(c, 1, 64, V1 | LOG_ALL, 8 << 20));
	ASSERT_EQ(0, log_setup(c));
	ASSERT_EQ(0, vmm_blk_set_backend(&c->b, c->be));
	buf = vmm_alloc(&c->b.vmm, 8192, 4096);
	ASSERT_NE(NULL, buf);
	memset(c->log, 0, c->log_len);
	ASSERT_LE(0, vmm_blk_post(&c->b, 0, VIRTIO_BLK_T_IN, 0, buf, 8192, 2, false, NULL));
	vmm_vq_kick(&c->b.vq[0]);
	ASSERT_EQ(0, slow_wait_in_flight(c));
	/* Still in flight when the call is made, or this tests nothing. */
	ASSERT_EQ(-1, vmm_blk_reap(&c->b, 0, NULL, NULL, 0));
	ASSERT_EQ(0, ioctl(c->b.fd, VHOST_SET_FEATURES, &features));
	st = vmm_blk_reap(&c->b, 0, NULL, NULL, 0);
	EXPECT_EQ(VIRTIO_BLK_S_OK, st)
		TH_LOG("the READ was still in flight when LOG_ALL was switched off");
	if (st < 0)
		EXPECT_EQ(VIRTIO_BLK_S_OK, vmm_blk_reap(&c->b, 0, NULL, NULL, 10000));
	EXPECT_TRUE(logged(c, buf));
	EXPECT_TRUE(logged(c, buf + 4096));
}

/* 7. VHOST_SET_MEM_TABLE waits for the requests in flight. */
TEST_F_TIMEOUT(hard, set_mem_table_waits_for_requests, 60)
{
	struct ctx *c = &self->c;
	void *buf;
	int r = slow_nullb_create(c), st;

	if (r)
		SKIP(return, "no configfs null_blk: %s", strerror(-r));
	ASSERT_EQ(0, blk_open(c, 1, 64, V1, 4 << 20));
	ASSERT_EQ(0, vmm_blk_set_backend(&c->b, c->be));
	buf = vmm_alloc(&c->b.vmm, 4096, 4096);
	ASSERT_NE(NULL, buf);
	ASSERT_LE(0, vmm_blk_post(&c->b, 0, VIRTIO_BLK_T_IN, 0, buf, 4096, 1, false, NULL));
	vmm_vq_kick(&c->b.vq[0]);
	ASSERT_EQ(0, slow_wait_in_flight(c));
	/* Still in flight when the call is made, or this tests nothing. */
	ASSERT_EQ(-1, vmm_blk_reap(&c->b, 0, NULL, NULL, 0));
	ASSERT_EQ(0, vmm_set_mem_table(&c->b.vmm, c->b.fd));
	st = vmm_blk_reap(&c->b, 0, NULL, NULL, 0);
	EXPECT_EQ(VIRTIO_BLK_S_OK, st)
		TH_LOG("the READ was still in flight when SET_MEM_TABLE returned");
	if (st < 0)
		EXPECT_EQ(VIRTIO_BLK_S_OK, vmm_blk_reap(&c->b, 0, NULL, NULL, 10000));
	/* The rings resumed. */
	EXPECT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&c->b, 0, VIRTIO_BLK_T_IN, 8, buf, 4096));
}

/*
 * An IOTLB invalidation does not wait for the requests in
 * flight (their buffers were translated at submission): it returns while
 * the READ is still at the device, and the READ completes all the same.
 */
TEST_F_TIMEOUT(hard, iotlb_invalidate_does_not_wait, 60)
{
	struct ctx *c = &self->c;
	void *buf;
	int r = slow_nullb_create(c), st;

	if (r)
		SKIP(return, "no configfs null_blk: %s", strerror(-r));
	ASSERT_EQ(0, blk_open(c, 1, 64, V1 | PLATFORM, 2 << 20));
	ASSERT_EQ(0, iotlb_map_pages(c));
	ASSERT_EQ(0, vmm_blk_set_backend(&c->b, c->be));
	buf = vmm_alloc(&c->b.vmm, 8192, 4096);
	ASSERT_NE(NULL, buf);
	ASSERT_LE(0, vmm_blk_post(&c->b, 0, VIRTIO_BLK_T_IN, 0, buf, 8192, 2, false, NULL));
	vmm_vq_kick(&c->b.vq[0]);
	ASSERT_EQ(0, slow_wait_in_flight(c));
	/* Still in flight when the call is made, or this tests nothing. */
	ASSERT_EQ(-1, vmm_blk_reap(&c->b, 0, NULL, NULL, 0));
	ASSERT_EQ(0, iotlb_msg(c->b.fd, VHOST_IOTLB_INVALIDATE, vmm_gpa(&c->b.vmm, buf),
			       8192, NULL));
	st = vmm_blk_reap(&c->b, 0, NULL, NULL, 0);
	EXPECT_EQ(-1, st)
		TH_LOG("the invalidation waited for the READ (status %d)", st);
	if (st < 0)
		EXPECT_EQ(VIRTIO_BLK_S_OK, vmm_blk_reap(&c->b, 0, NULL, NULL, 10000));
}

struct setter {
	int fd;
	bool stop;		/* atomic accesses */
	unsigned long rounds;
	int err;
};

static void *serial_setter(void *arg)
{
	struct vhost_blk_serial a, b;
	struct setter *s = arg;

	memset(a.serial, 'A', sizeof(a.serial));
	memset(b.serial, 'B', sizeof(b.serial));
	while (!__atomic_load_n(&s->stop, __ATOMIC_RELAXED)) {
		if (ioctl(s->fd, VHOST_BLK_SET_SERIAL, &a) ||
		    ioctl(s->fd, VHOST_BLK_SET_SERIAL, &b)) {
			s->err = errno;
			break;
		}
		s->rounds++;
	}
	return NULL;
}

/*
 * 10. GET_ID while another thread keeps changing the serial: every answer
 * is one serial or the other, never a mix.  Each answer lands in twenty
 * 1-byte segments, so that copying it out takes a while.
 */
TEST_F_TIMEOUT(hard, get_id_never_torn, 60)
{
	enum { BATCH = 32 };
	struct ctx *c = &self->c;
	unsigned long as = 0, bs = 0, torn = 0;
	struct vhost_blk_serial first;
	struct setter s = { 0 };
	unsigned char *ids;
	pthread_t t;
	double end;
	int k;

	c->be = tmpfs_file(c, 1 << 20);
	if (c->be == -ENOTSUP)
		SKIP(return, "cannot mount tmpfs");
	ASSERT_LE(0, c->be);
	ASSERT_EQ(0, blk_open(c, 1, 128, V1 | (1ULL << VIRTIO_RING_F_INDIRECT_DESC),
			      4 << 20));
	ASSERT_EQ(0, vmm_blk_set_backend(&c->b, c->be));
	ids = vmm_alloc(&c->b.vmm, BATCH * 64, 64);
	ASSERT_NE(NULL, ids);
	/* Neither serial is the default: "vhost-blk" would be a wrong answer too. */
	memset(first.serial, 'A', sizeof(first.serial));
	ASSERT_EQ(0, ioctl(c->b.fd, VHOST_BLK_SET_SERIAL, &first));
	s.fd = c->b.fd;
	ASSERT_EQ(0, pthread_create(&t, NULL, serial_setter, &s));
	for (end = now_s() + 2; now_s() < end;) {
		for (k = 0; k < BATCH; k++) {
			memset(ids + k * 64, 0, VHOST_BLK_SERIAL_LEN);
			if (vmm_blk_post(&c->b, 0, VIRTIO_BLK_T_GET_ID, 0, ids + k * 64,
					 VHOST_BLK_SERIAL_LEN, VHOST_BLK_SERIAL_LEN, true,
					 ids + k * 64) < 0)
				break;
		}
		vmm_vq_kick(&c->b.vq[0]);
		while (k--) {
			unsigned char *id;
			int st = vmm_blk_reap(&c->b, 0, (void **)&id, NULL, 10000);

			if (st != VIRTIO_BLK_S_OK) {
				__atomic_store_n(&s.stop, true, __ATOMIC_RELAXED);
				pthread_join(t, NULL);
				ASSERT_EQ(VIRTIO_BLK_S_OK, st);
			}
			if (id[0] == 'A' && !memcmp(id, id + 1, VHOST_BLK_SERIAL_LEN - 1)) {
				as++;
			} else if (id[0] == 'B' && !memcmp(id, id + 1, VHOST_BLK_SERIAL_LEN - 1)) {
				bs++;
			} else {
				if (!torn)
					TH_LOG("torn serial: %.20s", id);
				torn++;
			}
		}
	}
	__atomic_store_n(&s.stop, true, __ATOMIC_RELAXED);
	pthread_join(t, NULL);
	TH_LOG("%lu all-A, %lu all-B, %lu torn; %lu SET_SERIAL pairs", as, bs, torn,
	       s.rounds);
	EXPECT_EQ(0, s.err);
	EXPECT_EQ(0, torn);
	/* Both serials were seen: the race was really run. */
	EXPECT_LT(0, as);
	EXPECT_LT(0, bs);
}

struct starter {
	struct vmm_blk *b;
	unsigned int nq;	/* rings the child sets up, 0 excluded */
	int fd, be;
	int cg_err, setup_err, be_err;
	int done;	/* set last, with a release store */
};

/* A CLONE_VM child of the owner: same mm, another process. */
static int start_rings_elsewhere(void *arg)
{
	struct vhost_blk_backend be = { 0 };
	struct starter *s = arg;
	unsigned int q;
	int fd, r = 0;

	fd = open(CGROUP_DIR "/cgroup.procs", O_WRONLY);
	if (fd < 0 || write(fd, "0", 1) != 1)
		s->cg_err = errno ?: EIO;
	if (fd >= 0)
		close(fd);
	/* Rings 1 and up, set up here too. */
	for (q = 1; q < s->nq && !r; q++)
		r = vmm_blk_add_ring(s->b, q, 64);
	s->setup_err = r < 0 ? -r : r;
	be.fd = s->be;
	if (ioctl(s->fd, VHOST_BLK_SET_BACKEND, &be))
		s->be_err = errno;
	__atomic_store_n(&s->done, 1, __ATOMIC_RELEASE);
	return 0;
}

/*
 * 9. The rings are set up and started (and so get their workers) by
 * another process that shares the owner's mm, in another cgroup, as a
 * VMM's vCPU thread might: every worker still carries the owner's name.
 * Each is in the cgroups of the thread that made it, as a thread it forked
 * would be (what mainline's workers are): the default worker in the
 * owner's, the ring workers in the child's, which holds nothing else once
 * the child is gone.
 *
 * On mainline a worker is a thread of the process that made it: the ring
 * workers are threads of the child, named after it, in its cgroup, and they
 * keep its thread group alive (its exit is a thread's exit) until the
 * device is released, which ends them and lets the child be reaped.
 */
TEST_F_TIMEOUT(hard, workers_carry_owner_identity, 60)
{
	enum { NQ = 4 };
	struct starter s = { 0 };
	struct ctx *c = &self->c;
	char names[16][32], want[32], cg[256], wcg[256], procs[256];
	const size_t stack_size = 256 << 10;
	int tids[16], n, i, id, status;
	char *stack, *p;
	pid_t pid;

	if (access("/sys/fs/cgroup/cgroup.procs", F_OK))
		SKIP(return, "cgroup2 not mounted at /sys/fs/cgroup");
	if (read_str(WORKER_POOL, c->worker_pool, sizeof(c->worker_pool)))
		SKIP(return, "%s missing", WORKER_POOL);
	if (!atoi(c->worker_pool))
		c->worker_pool[0] = 0;	/* nothing to restore */
	else
		ASSERT_EQ(0, write_str(WORKER_POOL, "0"));
	c->be = tmpfs_file(c, 1 << 20);
	if (c->be == -ENOTSUP)
		SKIP(return, "cannot mount tmpfs");
	ASSERT_LE(0, c->be);
	ASSERT_EQ(0, cgroup_of(getpid(), cg, sizeof(cg)));
	rmdir(CGROUP_DIR);
	ASSERT_EQ(0, mkdir(CGROUP_DIR, 0755));
	c->cgroup = true;
	/* Ring 0 here, on the default worker; the child sets up the others. */
	ASSERT_EQ(0, blk_open(c, 1, 64, V1, 4 << 20));
	ASSERT_EQ(1, vmm_owner_workers(getpid(), NULL, NULL, 16));
	s.b = &c->b;
	s.nq = NQ;

	stack = mmap(NULL, stack_size, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	ASSERT_NE(MAP_FAILED, stack);
	s.fd = c->b.fd;
	s.be = c->be;
	pid = clone(start_rings_elsewhere, stack + stack_size, CLONE_VM | SIGCHLD, &s);
	ASSERT_LT(0, pid);
	if (vmm_workers_are_tasks()) {
		double deadline = now_s() + 10;

		c->child = pid;		/* the teardown kills and reaps it */
		while (!__atomic_load_n(&s.done, __ATOMIC_ACQUIRE) && now_s() < deadline)
			usleep(1000);
		ASSERT_TRUE(__atomic_load_n(&s.done, __ATOMIC_ACQUIRE));
		ASSERT_EQ(0, s.cg_err);
		ASSERT_EQ(0, s.setup_err) TH_LOG("ring set-up in the child: %s",
						 strerror(s.setup_err));
		ASSERT_EQ(0, s.be_err) TH_LOG("SET_BACKEND from the child: %s",
					      strerror(s.be_err));
		n = vmm_owner_workers(getpid(), tids, NULL, 16);
		ASSERT_EQ(1, n) TH_LOG("%d workers named after the owner", n);
		ASSERT_EQ(0, cgroup_of(tids[0], wcg, sizeof(wcg)));
		EXPECT_STREQ(cg, wcg) TH_LOG("default worker (tid %d)", tids[0]);
		n = vmm_owner_workers(pid, tids, names, 16);
		EXPECT_EQ(NQ - 1, n) TH_LOG("%d ring workers of the child %d", n, pid);
		for (i = 0; i < n; i++) {
			ASSERT_EQ(0, cgroup_of(tids[i], wcg, sizeof(wcg)));
			EXPECT_STREQ("0::/vmq-hardening", wcg)
				TH_LOG("worker %s (tid %d)", names[i], tids[i]);
		}
		/* Its workers keep the child's thread group alive... */
		usleep(100 * 1000);
		EXPECT_EQ(0, waitpid(pid, &status, WNOHANG));
		/* ...until the device goes. */
		vmm_blk_close(&c->b);
		c->blk_open = false;
		deadline = now_s() + 10;
		while (waitpid(pid, &status, WNOHANG) != pid) {
			if (now_s() > deadline)
				break;
			usleep(10 * 1000);
		}
		EXPECT_GE(deadline, now_s()) TH_LOG("child not reaped 10 s after the release");
		if (now_s() <= deadline)
			c->child = 0;
		munmap(stack, stack_size);
		return;
	}
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	munmap(stack, stack_size);
	ASSERT_EQ(0, s.cg_err) TH_LOG("moving the child to %s: %s", CGROUP_DIR,
				      strerror(s.cg_err));
	ASSERT_EQ(0, s.setup_err) TH_LOG("ring set-up in the child: %s", strerror(s.setup_err));
	ASSERT_EQ(0, s.be_err) TH_LOG("SET_BACKEND from the child: %s", strerror(s.be_err));

	n = vmm_owner_workers(getpid(), tids, names, 16);
	EXPECT_EQ(NQ, n) TH_LOG("%d workers named after the owner %d", n, getpid());
	for (id = 0; id < NQ; id++) {
		if (id)
			snprintf(want, sizeof(want), "vhost-%d-%d", getpid(), id);
		else
			snprintf(want, sizeof(want), "vhost-%d", getpid());
		EXPECT_LT(0, vmm_worker_tid(getpid(), id)) TH_LOG("no thread %s", want);
	}
	snprintf(want, sizeof(want), "vhost-%d", getpid());
	for (i = 0; i < n; i++) {
		ASSERT_EQ(0, cgroup_of(tids[i], wcg, sizeof(wcg)));
		if (!strcmp(names[i], want)) {
			EXPECT_STREQ(cg, wcg) TH_LOG("default worker %s (tid %d)", names[i],
						     tids[i]);
		} else {
			EXPECT_STREQ("0::/vmq-hardening", wcg)
				TH_LOG("worker %s (tid %d), made by the child", names[i],
				       tids[i]);
		}
	}
	n = vmm_owner_workers(pid, tids, names, 16);
	EXPECT_EQ(0, n) TH_LOG("%d workers named after the child %d, e.g. %s", n, pid,
			       n ? names[0] : "");
	/* The child is gone: only workers are left in its cgroup. */
	n = vmm_owner_workers(getpid(), tids, names, 16);
	ASSERT_EQ(0, read_str(CGROUP_DIR "/cgroup.procs", procs, sizeof(procs)));
	for (p = strtok(procs, "\n"); p; p = strtok(NULL, "\n")) {
		for (i = 0; i < n && tids[i] != atoi(p); i++)
			;
		EXPECT_LT(i, n) TH_LOG("task %s, no worker, left in the child's cgroup", p);
	}
}

/* The fields of struct clone_args up to set_tid_size (CLONE_ARGS_SIZE_VER1). */
struct clone3_args {
	uint64_t flags, pidfd, child_tid, parent_tid, exit_signal;
	uint64_t stack, stack_size, tls, set_tid, set_tid_size;
};

/* The owner with a long pid: @n workers, then wait for the word on @go. */
static void long_names_owner(unsigned int n, int ready, int go)
{
	int fd = open("/dev/vhost-blk", O_RDWR);
	unsigned int i, w = 0;
	char ch;

	if (fd < 0 || ioctl(fd, VHOST_SET_OWNER, NULL))
		_exit(1);
	for (i = 1; i < n; i++)
		if (new_worker(fd, &w) || w != i)
			_exit(2);
	if (write(ready, "R", 1) != 1)
		_exit(3);
	/* Keep the workers until the parent has looked. */
	if (read(go, &ch, 1) < 0)
		_exit(4);
	_exit(0);
}

/*
 * Check the names of the @n workers of owner @pid: "vhost-<pid>" and
 * "vhost-<pid>-<id>" for id 1..n-1, each exactly once.  Returns NULL, or
 * what is wrong (in @why).
 */
static const char *check_worker_names(pid_t pid, unsigned int n, char *why, size_t len)
{
	unsigned int max = 2 * n + 16, found = 0, i, id;
	int *tids = calloc(max, sizeof(*tids));
	unsigned char *seen = calloc(n, 1);
	char base[32], comm[64], again[64];
	size_t blen;
	int end, r;

	why[0] = 0;
	if (!tids || !seen) {
		snprintf(why, len, "out of memory");
		goto out;
	}
	blen = snprintf(base, sizeof(base), "vhost-%d", pid);
	r = vmm_find_threads(base, tids, max);
	for (i = 0; r > 0 && i < (unsigned int)r && !why[0]; i++) {
		if (vmm_thread_comm(tids[i], comm, sizeof(comm)))
			continue;
		if (!strcmp(comm, base)) {
			id = 0;
		} else if (comm[blen] != '-') {
			continue;	/* another owner's: "vhost-<pid>N..." */
		} else if (sscanf(comm + blen, "-%u%n", &id, &end) != 1 ||
			   comm[blen + end] || id >= n) {
			snprintf(why, len, "unexpected name %s (tid %d)", comm, tids[i]);
			break;
		}
		/* A truncated name reads as another id, or does not parse back. */
		if (id)
			snprintf(again, sizeof(again), "%s-%u", base, id);
		else
			snprintf(again, sizeof(again), "%s", base);
		if (strcmp(again, comm) || seen[id]++)
			snprintf(why, len, "%s read twice or garbled (tid %d)", comm, tids[i]);
		found++;
	}
	for (id = 0; !why[0] && id < n; id++)
		if (!seen[id])
			snprintf(why, len, "no thread named %s-%u (%u names found)", base, id,
				 found);
out:
	free(tids);
	free(seen);
	return why[0] ? why : NULL;
}

/*
 * 9. Worker names longer than 15 characters read back whole from
 * /proc/<tid>/comm: an owner with a 7-digit pid and 12 workers,
 * "vhost-2000000" to "vhost-2000000-11".  Where pid_max stops at 32768
 * (CONFIG_BASE_SMALL) the owner gets a 5-digit pid and workers up to id
 * 1000 instead: "vhost-10000-1000".  The pid comes from clone3's set_tid
 * (ns_last_pid needs CONFIG_CHECKPOINT_RESTORE).
 */
TEST_F_TIMEOUT(hard, long_worker_names_read_back_whole, 180)
{
	struct ctx *c = &self->c;
	char why[128], name[32], buf[32], ch = 0;
	int ready[2], go[2], r, status;
	pid_t pid = -1, tid, first;
	unsigned int workers;

	/* "vhost-<pid>", 13 characters at most: nothing to cut. */
	if (vmm_workers_are_tasks())
		SKIP(return, "mainline names every worker vhost-<pid>, no id to cut");
	ASSERT_EQ(0, read_str(PID_MAX, c->pid_max, sizeof(c->pid_max)));
	r = write_str(PID_MAX, "4194304");
	if (r == -EINVAL)
		r = write_str(PID_MAX, "32768");
	ASSERT_EQ(0, r);
	ASSERT_EQ(0, read_str(PID_MAX, buf, sizeof(buf)));
	first = atoi(buf) > 2000100 ? 2000000 : 10000;
	/* Enough workers that the last name has 16 characters or more. */
	for (workers = 1; snprintf(name, sizeof(name), "vhost-%d-%u", first,
				   workers - 1) < 16; workers++)
		;
	ASSERT_EQ(0, read_str(MAX_WORKERS, buf, sizeof(buf)));
	if ((unsigned int)atoi(buf) < workers) {
		snprintf(c->max_workers, sizeof(c->max_workers), "%s", buf);
		snprintf(buf, sizeof(buf), "%u", workers);
		ASSERT_EQ(0, write_str(MAX_WORKERS, buf));
	}
	ASSERT_EQ(0, pipe(ready));
	ASSERT_EQ(0, pipe(go));
	for (tid = first; tid < first + 100; tid++) {
		struct clone3_args args = { .exit_signal = SIGCHLD };

		args.set_tid = (uintptr_t)&tid;
		args.set_tid_size = 1;
		pid = syscall(SYS_clone3, &args, sizeof(args));
		if (pid >= 0 || errno != EEXIST)
			break;
	}
	if (pid < 0 && errno == EPERM)
		SKIP(return, "clone3 with set_tid: %s", strerror(errno));
	ASSERT_LE(0, pid) TH_LOG("clone3: %s", strerror(errno));
	if (!pid) {
		close(ready[0]);
		close(go[1]);
		long_names_owner(workers, ready[1], go[0]);
	}
	c->child = pid;
	close(ready[1]);
	close(go[0]);
	ASSERT_EQ(1, read(ready[0], &ch, 1)) TH_LOG("the owner failed to set up");
	snprintf(name, sizeof(name), "vhost-%d-%u", pid, workers - 1);
	TH_LOG("owner %d, %u workers, up to %s (%zu characters)", pid, workers, name,
	       strlen(name));
	ASSERT_LE(16, strlen(name));

	EXPECT_EQ(NULL, check_worker_names(pid, workers, why, sizeof(why)))
		TH_LOG("%s", why);

	ASSERT_EQ(1, write(go[1], "G", 1));
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	c->child = 0;
	EXPECT_TRUE(WIFEXITED(status) && !WEXITSTATUS(status));
	close(ready[0]);
	close(go[1]);
}

/* ext4 on a loop device, a file on it as the backend, frozen at will. */
FIXTURE(frozen) {
	struct ctx c;
};

FIXTURE_VARIANT(frozen) {
	bool direct;
};

FIXTURE_VARIANT_ADD(frozen, direct) { .direct = true };
FIXTURE_VARIANT_ADD(frozen, buffered) { .direct = false };

FIXTURE_SETUP(frozen)
{
	const char *why = vhost_unusable("/dev/vhost-blk", "CONFIG_VHOST_BLK");

	ctx_init(&self->c);
	if (why)
		SKIP(return, "%s", why);
	if (geteuid())
		SKIP(return, "needs root");
}

FIXTURE_TEARDOWN(frozen)
{
	ctx_cleanup(&self->c);
}

/* ext4 on a loop device, mounted on EXT4_MNT: NULL, or why it cannot be. */
static const char *ext4_mount(struct ctx *c)
{
	char cmd[128];
	int ctl, n, fd;

	c->img = open(EXT4_IMG, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (c->img < 0 || ftruncate(c->img, 64 << 20))
		return "cannot create the image";
	ctl = open("/dev/loop-control", O_RDWR);
	if (ctl < 0)
		return "no /dev/loop-control (CONFIG_BLK_DEV_LOOP)";
	n = ioctl(ctl, LOOP_CTL_GET_FREE);
	close(ctl);
	if (n < 0)
		return "no free loop device";
	snprintf(c->loop, sizeof(c->loop), "/dev/loop%d", n);
	fd = open(c->loop, O_RDWR);
	if (fd < 0)
		return "cannot open the loop device";
	n = ioctl(fd, LOOP_SET_FD, c->img);
	close(fd);
	if (n) {
		c->loop[0] = 0;
		return "LOOP_SET_FD failed";
	}
	snprintf(cmd, sizeof(cmd), "mkfs.ext4 -q -F %s >/dev/null 2>&1", c->loop);
	if (system(cmd))
		return "mkfs.ext4 failed (e2fsprogs missing?)";
	mkdir(EXT4_MNT, 0755);
	if (mount(c->loop, EXT4_MNT, "ext4", 0, NULL))
		return "cannot mount ext4 (CONFIG_EXT4_FS)";
	c->mounted = true;
	return NULL;
}

/* Returns NULL, or why ext4 cannot be set up. */
static const char *ext4_setup(struct ctx *c, bool direct)
{
	const char *why = ext4_mount(c);
	int fd;

	if (why)
		return why;
	fd = open(EXT4_FILE, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0 || ftruncate(fd, 16 << 20))
		return "cannot create the backing file";
	close(fd);
	c->be = open(EXT4_FILE, O_RDWR | (direct ? O_DIRECT : 0));
	c->dirfd = open(EXT4_MNT, O_RDONLY | O_DIRECTORY);
	if (c->be < 0 || c->dirfd < 0)
		return "cannot open the backing file";
	return NULL;
}

/*
 * 1d. A WRITE to a file on a frozen filesystem waits for the thaw, then
 * completes with its data in place.
 */
TEST_F_TIMEOUT(frozen, write_waits_for_thaw, 90)
{
	struct ctx *c = &self->c;
	unsigned char *buf, *buf2, got[4096];
	const char *why = ext4_setup(c, variant->direct);
	int st, fd;

	if (why)
		SKIP(return, "%s", why);
	ASSERT_EQ(0, blk_open(c, 1, 64, V1, 4 << 20));
	ASSERT_EQ(0, vmm_blk_set_backend(&c->b, c->be));
	buf = vmm_alloc(&c->b.vmm, 4096, 4096);
	buf2 = vmm_alloc(&c->b.vmm, 4096, 4096);
	ASSERT_NE(NULL, buf2);
	fill(buf, 4096, 64, 80);

	ASSERT_EQ(0, ioctl(c->dirfd, FIFREEZE, 0)) TH_LOG("FIFREEZE: %s", strerror(errno));
	c->frozen = true;
	ASSERT_LE(0, vmm_blk_post(&c->b, 0, VIRTIO_BLK_T_OUT, 64, buf, 4096, 1, false, NULL));
	vmm_vq_kick(&c->b.vq[0]);
	st = vmm_blk_reap(&c->b, 0, NULL, NULL, 1000);
	EXPECT_EQ(-1, st) TH_LOG("the WRITE completed (status %d) on a frozen filesystem", st);
	ASSERT_EQ(0, ioctl(c->dirfd, FITHAW, 0)) TH_LOG("FITHAW: %s", strerror(errno));
	c->frozen = false;
	if (st < 0)
		st = vmm_blk_reap(&c->b, 0, NULL, NULL, 5000);
	EXPECT_EQ(VIRTIO_BLK_S_OK, st) TH_LOG("the WRITE did not complete after the thaw");

	memset(buf2, 0xaa, 4096);
	ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&c->b, 0, VIRTIO_BLK_T_IN, 64, buf2, 4096));
	EXPECT_EQ(0, memcmp(buf, buf2, 4096));
	fd = open(EXT4_FILE, O_RDONLY);
	ASSERT_LE(0, fd);
	ASSERT_EQ(4096, pread(fd, got, 4096, 64 * 512));
	close(fd);
	EXPECT_EQ(0, memcmp(buf, got, 4096)) TH_LOG("the file does not hold the write");
}

struct thawer {
	int dirfd;
	int delay_ms;
	bool done;		/* atomic accesses */
	bool thawed;
};

/* Thaws the filesystem after delay_ms, unless done is set before. */
static void *thawer(void *arg)
{
	struct thawer *t = arg;
	int i;

	for (i = 0; i < t->delay_ms / 10; i++) {
		if (__atomic_load_n(&t->done, __ATOMIC_ACQUIRE))
			return NULL;
		usleep(10 * 1000);
	}
	t->thawed = !ioctl(t->dirfd, FITHAW, 0);
	return NULL;
}

/*
 * A WRITE waiting for a frozen filesystem holds up nothing:
 * VHOST_SET_MEM_TABLE (which quiesces the rings) returns at once instead of
 * waiting, unkillable, for the thaw (a thread thaws after 5 s, so that a
 * kernel that does wait does not hang the test), and after the thaw the
 * WRITE completes with its data in place.  DISCARD and WRITE_ZEROES wait
 * the same way.
 */
TEST_F_TIMEOUT(frozen, frozen_write_holds_no_ring, 90)
{
	struct ctx *c = &self->c;
	struct thawer t = { .delay_ms = 5000 };
	unsigned char *buf, got[4096];
	const char *why = ext4_setup(c, variant->direct);
	pthread_t th;
	double t0, took;
	int fd;

	if (why)
		SKIP(return, "%s", why);
	ASSERT_EQ(0, blk_open(c, 1, 64, V1, 4 << 20));
	ASSERT_EQ(0, vmm_blk_set_backend(&c->b, c->be));
	buf = vmm_alloc(&c->b.vmm, 4096, 4096);
	ASSERT_NE(NULL, buf);
	fill(buf, 4096, 72, 90);

	ASSERT_EQ(0, ioctl(c->dirfd, FIFREEZE, 0)) TH_LOG("FIFREEZE: %s", strerror(errno));
	c->frozen = true;
	ASSERT_LE(0, vmm_blk_post(&c->b, 0, VIRTIO_BLK_T_OUT, 72, buf, 4096, 1, false, NULL));
	ASSERT_LE(0, vmm_blk_post_dwz(&c->b, 0, VIRTIO_BLK_T_WRITE_ZEROES, 200, 8, 0, NULL));
	vmm_vq_kick(&c->b.vq[0]);
	/* The handler has met the frozen filesystem. */
	EXPECT_EQ(-1, vmm_blk_reap(&c->b, 0, NULL, NULL, 300));

	t.dirfd = c->dirfd;
	ASSERT_EQ(0, pthread_create(&th, NULL, thawer, &t));
	t0 = now_s();
	EXPECT_EQ(0, vmm_set_mem_table(&c->b.vmm, c->b.fd));
	took = now_s() - t0;
	__atomic_store_n(&t.done, true, __ATOMIC_RELEASE);
	pthread_join(th, NULL);
	EXPECT_GT(1.0, took)
		TH_LOG("SET_MEM_TABLE took %.2f s: it waited for the thaw%s", took,
		       t.thawed ? " (the test thawed after 5 s)" : "");
	if (t.thawed)
		c->frozen = false;
	/* Still frozen: nothing was written. */
	if (c->frozen)
		EXPECT_EQ(-1, vmm_blk_reap(&c->b, 0, NULL, NULL, 200));

	if (c->frozen) {
		ASSERT_EQ(0, ioctl(c->dirfd, FITHAW, 0)) TH_LOG("FITHAW: %s", strerror(errno));
		c->frozen = false;
	}
	EXPECT_EQ(VIRTIO_BLK_S_OK, vmm_blk_reap(&c->b, 0, NULL, NULL, 5000))
		TH_LOG("the WRITE did not complete after the thaw");
	EXPECT_EQ(VIRTIO_BLK_S_OK, vmm_blk_reap(&c->b, 0, NULL, NULL, 5000))
		TH_LOG("the WRITE_ZEROES did not complete after the thaw");
	fd = open(EXT4_FILE, O_RDONLY);
	ASSERT_LE(0, fd);
	ASSERT_EQ(4096, pread(fd, got, 4096, 72 * 512));
	close(fd);
	EXPECT_EQ(0, memcmp(buf, got, 4096)) TH_LOG("the file does not hold the write");
}

/*
 * WRITE_ZEROES over 64 sectors of a 128-sector pattern on @fd, the
 * backend, with and without UNMAP: the range reads back as zeroes, the rest
 * as written.
 */
static void zeroes_on(struct __test_metadata *_metadata, struct ctx *c, int fd,
		      const char *what)
{
	static const uint32_t flags[] = { 0, VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP };
	unsigned char *buf, *buf2;
	uint64_t sector = 256;
	unsigned int i;

	ASSERT_EQ(0, vmm_blk_set_backend(&c->b, fd));
	buf = vmm_alloc(&c->b.vmm, 65536, 4096);
	buf2 = vmm_alloc(&c->b.vmm, 65536, 4096);
	ASSERT_NE(NULL, buf2);
	for (i = 0; i < ARRAY_SIZE(flags); i++) {
		fill(buf, 65536, sector, 50 + i);
		ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&c->b, 0, VIRTIO_BLK_T_OUT, sector,
						      buf, 65536));
		ASSERT_LE(0, vmm_blk_post_dwz(&c->b, 0, VIRTIO_BLK_T_WRITE_ZEROES,
					      sector + 8, 64, flags[i], NULL));
		vmm_vq_kick(&c->b.vq[0]);
		EXPECT_EQ(VIRTIO_BLK_S_OK, vmm_blk_reap(&c->b, 0, NULL, NULL, 10000))
			TH_LOG("%s, flags %#x: WRITE_ZEROES failed", what, flags[i]);
		memset(buf2, 0xaa, 65536);
		ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&c->b, 0, VIRTIO_BLK_T_IN, sector,
						      buf2, 65536));
		EXPECT_EQ(0, memcmp(buf, buf2, 8 * 512));
		EXPECT_TRUE(is_zero(buf2 + 8 * 512, 64 * 512))
			TH_LOG("%s, flags %#x: the range does not read back as zeroes",
			       what, flags[i]);
		EXPECT_EQ(0, memcmp(buf + 72 * 512, buf2 + 72 * 512, 65536 - 72 * 512));
	}
	ASSERT_EQ(0, vmm_blk_set_backend(&c->b, -1));
	ASSERT_EQ(0, vmm_blk_rearm(&c->b, 0));
}

/*
 * WRITE_ZEROES, offered to every guest, zeroes files
 * whether or not their filesystem has FALLOC_FL_ZERO_RANGE: a tmpfs file
 * (none; opened O_DIRECT where tmpfs allows it, as 7.3's does) and an ext4
 * file (ZERO_RANGE), direct or buffered as the variant says.  A guest
 * takes an I/O error for good: Linux does not fall back to writing zeroes.
 */
TEST_F_TIMEOUT(frozen, write_zeroes_zeroes_a_file, 90)
{
	struct ctx *c = &self->c;
	const char *why = ext4_setup(c, variant->direct);
	int fd, tmp;

	if (why)
		SKIP(return, "%s", why);
	ASSERT_EQ(0, blk_open(c, 1, 64, V1, 1 << 20));
	zeroes_on(_metadata, c, c->be, variant->direct ? "ext4, O_DIRECT" : "ext4");

	tmp = tmpfs_file(c, 1 << 20);
	ASSERT_LE(0, tmp) TH_LOG("tmpfs: %s", strerror(-tmp));
	fd = tmp;
	if (variant->direct) {
		fd = open(TMPFS_FILE, O_RDWR | O_DIRECT);
		/* 6.1's tmpfs has no direct I/O: the buffered file then. */
		if (fd < 0 && errno == EINVAL)
			TH_LOG("tmpfs refuses O_DIRECT: buffered");
		fd = fd < 0 ? tmp : fd;
	}
	zeroes_on(_metadata, c, fd, fd != tmp ? "tmpfs, O_DIRECT" : "tmpfs");
	if (fd != tmp)
		close(fd);
	close(tmp);
}

/*
 * Freeze the filesystem of @dirfd from a child, waiting up to @ms for the
 * FIFREEZE to return: its duration in seconds, or -1 when it did not
 * return (the child is left waiting, and c->wedged set), or -2 when it
 * failed.
 */
static double freeze_within(struct ctx *c, int ms)
{
	double t0 = now_s();
	int status, i;
	pid_t pid;

	pid = vmm_fork_tied();
	if (pid < 0)
		return -2;
	if (!pid)
		_exit(ioctl(c->dirfd, FIFREEZE, 0) ? 1 : 0);
	for (i = 0; i < ms; i++) {
		if (waitpid(pid, &status, WNOHANG) == pid) {
			if (!WIFEXITED(status) || WEXITSTATUS(status))
				return -2;
			c->frozen = true;
			return now_s() - t0;
		}
		usleep(1000);
	}
	c->wedged = true;
	return -1;
}

/* Write a file on the filesystem from this process, and make it stable. */
static int other_writer(void)
{
	char buf[4096];
	int fd, r = 0;

	memset(buf, 0x5a, sizeof(buf));
	fd = open(EXT4_MNT "/other", O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		return -errno;
	if (pwrite(fd, buf, sizeof(buf), 0) != sizeof(buf) || fsync(fd))
		r = -errno;
	close(fd);
	return r;
}

/* Streams writes through ring 0 while a child freezes and thaws. */
#define FREEZE_CYCLES	20

/*
 * Each write through vhost-blk to a file holds exactly one
 * count of the filesystem's freeze protection, and its completion drops
 * it: direct writes (asynchronous; to unwritten extents, completed from a
 * workqueue, and over written ones, completed by the block layer) and
 * page-cache writes (completed on the worker, or in the ring's work item)
 * alike.  A count that leaks makes the next FIFREEZE wait for ever, and
 * every other writer of the filesystem behind it; a second count taken
 * while a freeze waits deadlocks the worker with it, and a write that waits
 * in the work item holding its count deadlocks the WRITE_ZEROES before it
 * there.  So: writes, then FIFREEZE must return within a second, FITHAW,
 * and another process still writes; then writes, one in four a
 * WRITE_ZEROES elsewhere, streaming while the filesystem is frozen and
 * thawed FREEZE_CYCLES times, each freeze within a second; then every
 * write is on the file.
 */
TEST_F_TIMEOUT(frozen, writes_leave_the_filesystem_freezable, 180)
{
	struct ctx *c = &self->c;
	const char *why = ext4_setup(c, variant->direct);
	unsigned char *buf[8], got[4096];
	unsigned int posted = 0, done = 0;
	int i, round, cycle, st, fd;
	double took;

	if (why)
		SKIP(return, "%s", why);
	ASSERT_EQ(0, blk_open(c, 1, 64, V1, 4 << 20));
	ASSERT_EQ(0, vmm_blk_set_backend(&c->b, c->be));
	for (i = 0; i < 8; i++) {
		buf[i] = vmm_alloc(&c->b.vmm, 4096, 4096);
		ASSERT_NE(NULL, buf[i]);
		fill(buf[i], 4096, i, 11);
	}
	/* Round 0 allocates the blocks (unwritten extents), round 1 overwrites. */
	for (round = 0; round < 2; round++) {
		for (i = 0; i < 8; i++)
			ASSERT_LE(0, vmm_blk_post(&c->b, 0, VIRTIO_BLK_T_OUT, i * 64,
						  buf[i], 4096, 1, false, NULL));
		vmm_vq_kick(&c->b.vq[0]);
		for (i = 0; i < 8; i++)
			ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_reap(&c->b, 0, NULL, NULL, 5000));
	}
	ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&c->b, 0, VIRTIO_BLK_T_FLUSH, 0, NULL, 0));

	took = freeze_within(c, 1000);
	ASSERT_LE(0, took)
		TH_LOG("FIFREEZE %s after 16 writes through vhost-blk",
		       took == -1 ? "did not return within 1 s (a leaked freeze count)" :
				    "failed");
	TH_LOG("FIFREEZE took %.3f s", took);
	ASSERT_EQ(0, ioctl(c->dirfd, FITHAW, 0)) TH_LOG("FITHAW: %s", strerror(errno));
	c->frozen = false;
	ASSERT_EQ(0, other_writer()) TH_LOG("another process cannot write after the thaw");

	/* Writes stream while the filesystem is frozen and thawed. */
	for (cycle = 0; cycle < FREEZE_CYCLES; cycle++) {
		/* Keep 8 writes posted: complete ones are posted again. */
		while (vmm_blk_reap(&c->b, 0, NULL, NULL, 0) >= 0)
			done++;
		while (vmm_vq_in_flight(&c->b.vq[0]) < 8) {
			i = posted++ % 8;
			if (i % 4 == 3)
				st = vmm_blk_post_dwz(&c->b, 0, VIRTIO_BLK_T_WRITE_ZEROES,
						      1024 + i * 8, 8, 0, NULL);
			else
				st = vmm_blk_post(&c->b, 0, VIRTIO_BLK_T_OUT, i * 64,
						  buf[i], 4096, 1, false, NULL);
			ASSERT_LE(0, st);
		}
		vmm_vq_kick(&c->b.vq[0]);
		/* Some writes are in flight or waiting when the freeze comes. */
		st = vmm_blk_reap(&c->b, 0, NULL, NULL, 1000);
		if (st >= 0)
			done++;
		took = freeze_within(c, 1000);
		ASSERT_LE(0, took)
			TH_LOG("FIFREEZE %d of %d %s with writes streaming", cycle + 1,
			       FREEZE_CYCLES, took == -1 ? "did not return within 1 s" :
							  "failed");
		ASSERT_EQ(0, ioctl(c->dirfd, FITHAW, 0)) TH_LOG("FITHAW: %s", strerror(errno));
		c->frozen = false;
	}
	while (vmm_vq_in_flight(&c->b.vq[0])) {
		st = vmm_blk_reap(&c->b, 0, NULL, NULL, 5000);
		ASSERT_EQ(VIRTIO_BLK_S_OK, st)
			TH_LOG("a write did not complete after the last thaw");
		done++;
	}
	TH_LOG("%u writes while freezing %d times", done, FREEZE_CYCLES);
	ASSERT_EQ(posted, done);

	took = freeze_within(c, 1000);
	ASSERT_LE(0, took) TH_LOG("the last FIFREEZE did not return within 1 s");
	ASSERT_EQ(0, ioctl(c->dirfd, FITHAW, 0)) TH_LOG("FITHAW: %s", strerror(errno));
	c->frozen = false;
	ASSERT_EQ(0, other_writer()) TH_LOG("another process cannot write after the thaw");
	fd = open(EXT4_FILE, O_RDONLY);
	ASSERT_LE(0, fd);
	for (i = 0; i < 8; i++) {
		ASSERT_EQ(4096, pread(fd, got, 4096, i * 64 * 512));
		EXPECT_EQ(0, memcmp(buf[i], got, 4096)) TH_LOG("write %d is not on the file", i);
	}
	close(fd);
}

/* 3. Extra workers count against the caller's RLIMIT_NPROC. */
FIXTURE(nproc) {
	struct ctx c;
};

FIXTURE_VARIANT(nproc) {
	const char *dev;
};

FIXTURE_VARIANT_ADD(nproc, blk) { .dev = "/dev/vhost-blk" };
FIXTURE_VARIANT_ADD(nproc, net) { .dev = "/dev/vhost-net" };

FIXTURE_SETUP(nproc)
{
	const char *why = vhost_unusable(variant->dev,
					 strcmp(variant->dev, "/dev/vhost-net") ?
					 "CONFIG_VHOST_BLK" : "CONFIG_VHOST_NET");

	ctx_init(&self->c);
	if (why)
		SKIP(return, "%s", why);
	if (geteuid())
		SKIP(return, "needs root (to set up as root, then drop to uid %d)",
		     NOBODY);
}

FIXTURE_TEARDOWN(nproc)
{
	ctx_cleanup(&self->c);
}

/* Report why the unprivileged child failed, and exit. */
static void nproc_fail(int out, const char *fmt, ...)
{
	char msg[256];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (write(out, msg, n < (int)sizeof(msg) ? n : (int)sizeof(msg) - 1) < 0)
		_exit(2);
	_exit(1);
}

static void reap_all(pid_t *kids, int n)
{
	while (n--) {
		kill(kids[n], SIGKILL);
		waitpid(kids[n], NULL, 0);
	}
}

/*
 * Runs as a child of the test: owns a device as root (the default worker
 * is not charged), then becomes user NOBODY, whose only process it is,
 * with RLIMIT_NPROC = NPROC_LIMIT.
 */
static void nproc_child(const char *dev, int out)
{
	struct rlimit rl = { NPROC_LIMIT, NPROC_LIMIT };
	unsigned int ids[NPROC_LIMIT], id;
	pid_t kids[NPROC_LIMIT], pid;
	int fd, r, i, nkids = 0;
	double deadline;

	fd = open(dev, O_RDWR);
	if (fd < 0 || ioctl(fd, VHOST_SET_OWNER, NULL))
		nproc_fail(out, "open/SET_OWNER %s: %s", dev, strerror(errno));
	if (setrlimit(RLIMIT_NPROC, &rl) || setgroups(0, NULL) ||
	    setresgid(NOBODY, NOBODY, NOBODY) || setresuid(NOBODY, NOBODY, NOBODY))
		nproc_fail(out, "dropping to uid %d: %s", NOBODY, strerror(errno));

	/* This process and NPROC_LIMIT - 1 workers fill the limit. */
	for (i = 0; i < NPROC_LIMIT - 1; i++) {
		r = new_worker(fd, &ids[i]);
		if (r)
			nproc_fail(out, "NEW_WORKER %d of %d: %s", i + 1, NPROC_LIMIT - 1,
				   strerror(-r));
	}
	r = new_worker(fd, &id);
	if (r != -VMM_NPROC_ERRNO)
		nproc_fail(out, "NEW_WORKER beyond RLIMIT_NPROC=%d: %s", NPROC_LIMIT,
			   r ? strerror(-r) : "succeeded");
	/* Workers and processes share the count: fork() fails as well. */
	pid = fork();
	if (!pid)
		_exit(0);
	if (pid > 0) {
		waitpid(pid, NULL, 0);
		nproc_fail(out, "fork() succeeded with the limit full of workers");
	}
	if (errno != EAGAIN)
		nproc_fail(out, "fork() at the limit: %s, not EAGAIN", strerror(errno));
	/* Freeing one makes room for one. */
	r = free_worker(fd, ids[0]);
	if (r)
		nproc_fail(out, "FREE_WORKER: %s", strerror(-r));
	r = new_worker(fd, &ids[0]);
	if (r)
		nproc_fail(out, "NEW_WORKER after FREE_WORKER: %s", strerror(-r));
	id = VHOST_VRING_NEW_WORKER;
	r = set_worker(fd, 0, &id);
	if (r != -VMM_NPROC_ERRNO)
		nproc_fail(out, "SET_VRING_WORKER(NEW) beyond RLIMIT_NPROC: %s",
			   r ? strerror(-r) : "succeeded");

	/* Closing the device gives the charge back: NPROC_LIMIT - 1 forks fit. */
	close(fd);
	deadline = now_s() + 3;
	while (nkids < NPROC_LIMIT - 1) {
		pid = fork();
		if (!pid) {
			pause();
			_exit(0);
		}
		if (pid > 0) {
			kids[nkids++] = pid;
			continue;
		}
		if (errno != EAGAIN || now_s() > deadline) {
			r = errno;
			reap_all(kids, nkids);
			nproc_fail(out, "fork() %d of %d after close: %s", nkids + 1,
				   NPROC_LIMIT - 1, strerror(r));
		}
		usleep(20 * 1000);
	}
	/* And the limit still holds. */
	pid = fork();
	if (!pid)
		_exit(0);
	reap_all(kids, nkids);
	if (pid > 0) {
		waitpid(pid, NULL, 0);
		nproc_fail(out, "fork() beyond RLIMIT_NPROC succeeded");
	}
	_exit(0);
}

TEST_F_TIMEOUT(nproc, workers_charged_to_rlimit_nproc, 60)
{
	char msg[256] = "";
	int p[2], status;
	ssize_t n;
	pid_t pid;

	ASSERT_EQ(0, pipe(p));
	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid) {
		close(p[0]);
		nproc_child(variant->dev, p[1]);
	}
	self->c.child = pid;
	close(p[1]);
	n = read(p[0], msg, sizeof(msg) - 1);
	close(p[0]);
	if (n > 0)
		msg[n] = 0;
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	self->c.child = 0;
	EXPECT_TRUE(WIFEXITED(status) && !WEXITSTATUS(status))
		TH_LOG("%s", msg[0] ? msg : "the child died");
}

/* Ring, device and worker lifetimes under hostile VMMs. */

/* Set a fault injection knob, remembering its value for ctx_cleanup(). */
static int knob_set(struct ctx *c, const char *path, const char *val)
{
	if (c->nknobs == ARRAY_SIZE(c->knob))
		return -ENOSPC;
	if (read_str(path, c->knob[c->nknobs].val, sizeof(c->knob[0].val)))
		return -errno;
	snprintf(c->knob[c->nknobs].path, sizeof(c->knob[0].path), "%s", path);
	c->nknobs++;
	return write_str(path, val);
}

/*
 * 2. The bio path never waits for itself.  Every slab allocation of the
 * ring's worker fails (failslab on that thread alone, sleeping allocations
 * included), so each bio comes from fs_bio_set's reserve of two.  Sixteen
 * READs in one kick: the third bio waits for a reserve element, which only
 * a completed bio gives back.  Freed when the request is returned, by that
 * same worker, it never comes; freed at end_io, it does.
 */
TEST_F_TIMEOUT(hard, bio_pool_reserve_never_waits_on_its_worker, 60)
{
	enum { NREQ = 16 };
	const char *fs = "/sys/kernel/debug/failslab";
	const char *why = vhost_nullb_unusable(false, false);
	struct ctx *c = &self->c;
	char path[96], left[32];
	int tids[8], n, i, ok = 0, st;
	unsigned char *buf;

	if (why)
		SKIP(return, "%s", why);
	if (access(fs, F_OK))
		mount("none", "/sys/kernel/debug", "debugfs", 0, NULL);
	if (access(fs, F_OK) || access("/proc/self/make-it-fail", F_OK))
		SKIP(return, "no failslab (CONFIG_FAILSLAB, CONFIG_FAULT_INJECTION_DEBUG_FS)");
	c->be = open(NULLB0, O_RDWR | O_DIRECT);
	ASSERT_LE(0, c->be);
	ASSERT_EQ(0, blk_open(c, 1, 64, V1, 4 << 20));
	ASSERT_EQ(0, vmm_blk_set_backend(&c->b, c->be));
	buf = vmm_alloc(&c->b.vmm, NREQ * 4096, 4096);
	ASSERT_NE(NULL, buf);
	/* Fault the buffers in now: page faults would allocate too. */
	memset(buf, 0x5a, NREQ * 4096);
	/* And let everything the path sets up once be set up. */
	ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&c->b, 0, VIRTIO_BLK_T_IN, 0, buf, 4096));
	n = vmm_owner_workers(getpid(), tids, NULL, ARRAY_SIZE(tids));
	ASSERT_LE(1, n) TH_LOG("no vhost worker of ours");

	snprintf(path, sizeof(path), "%s/task-filter", fs);
	ASSERT_EQ(0, knob_set(c, path, "Y"));
	snprintf(path, sizeof(path), "%s/ignore-gfp-wait", fs);
	ASSERT_EQ(0, knob_set(c, path, "N"));
	snprintf(path, sizeof(path), "%s/verbose", fs);
	ASSERT_EQ(0, knob_set(c, path, "0"));
	snprintf(path, sizeof(path), "%s/interval", fs);
	ASSERT_EQ(0, knob_set(c, path, "1"));
	snprintf(path, sizeof(path), "%s/times", fs);
	ASSERT_EQ(0, knob_set(c, path, "1000000"));
	snprintf(path, sizeof(path), "%s/probability", fs);
	ASSERT_EQ(0, knob_set(c, path, "100"));
	for (i = 0; i < n; i++) {
		snprintf(path, sizeof(path), "/proc/%d/make-it-fail", tids[i]);
		c->marked[c->nmarked++] = tids[i];
		ASSERT_EQ(0, write_str(path, "1"));
	}

	for (i = 0; i < NREQ; i++)
		ASSERT_LE(0, vmm_blk_post(&c->b, 0, VIRTIO_BLK_T_IN, 8 + i * 8,
					  buf + i * 4096, 4096, 1, false, NULL));
	vmm_vq_kick(&c->b.vq[0]);
	for (i = 0; i < NREQ; i++) {
		st = vmm_blk_reap(&c->b, 0, NULL, NULL, i ? 2000 : 10000);
		if (st < 0)
			break;
		ok += st == VIRTIO_BLK_S_OK;
	}
	snprintf(path, sizeof(path), "%s/times", fs);
	ASSERT_EQ(0, read_str(path, left, sizeof(left)));
	EXPECT_GT(1000000, atoi(left)) TH_LOG("no allocation of the worker failed");
	EXPECT_EQ(NREQ, i)
		TH_LOG("%d of %d READs came back: the worker waits for a bio only it frees",
		       i, NREQ);
	EXPECT_EQ(i, ok) TH_LOG("%d READs failed", i - ok);
}

/*
 * 3. The bio path keeps the page cache coherent, as the kiocb path does: a
 * guest WRITE drops what a buffered reader cached of the range, and a guest
 * READ sees what a buffered writer left dirty in the cache.
 */
TEST_F_TIMEOUT(hard, bio_path_page_cache_coherent, 60)
{
	const char *why = vhost_nullb_unusable(true, false);
	struct ctx *c = &self->c;
	unsigned char *buf, old[4096], now[4096];
	int bfd;

	if (why)
		SKIP(return, "%s", why);
	c->be = open(NULLB0, O_RDWR | O_DIRECT);
	ASSERT_LE(0, c->be);
	bfd = open(NULLB0, O_RDWR);
	ASSERT_LE(0, bfd);
	ASSERT_EQ(0, blk_open(c, 1, 64, V1, 4 << 20));
	ASSERT_EQ(0, vmm_blk_set_backend(&c->b, c->be));
	buf = vmm_alloc(&c->b.vmm, 4096, 4096);
	ASSERT_NE(NULL, buf);

	/* Cached by a buffered reader, then written by the guest. */
	ASSERT_EQ(4096, pread(bfd, old, 4096, 20480 * 512ULL));
	fill(buf, 4096, 20480, 101);
	ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&c->b, 0, VIRTIO_BLK_T_OUT, 20480, buf, 4096));
	ASSERT_EQ(4096, pread(bfd, now, 4096, 20480 * 512ULL));
	EXPECT_EQ(0, memcmp(buf, now, 4096))
		TH_LOG("a buffered reader still sees the data from before the guest's WRITE");

	/* Dirty in the cache, then read by the guest. */
	fill(old, 4096, 20488, 102);
	ASSERT_EQ(4096, pwrite(bfd, old, 4096, 20488 * 512ULL));
	memset(buf, 0, 4096);
	ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&c->b, 0, VIRTIO_BLK_T_IN, 20488, buf, 4096));
	EXPECT_EQ(0, memcmp(buf, old, 4096))
		TH_LOG("the guest's READ missed a buffered write still in the cache");
	ioctl(bfd, BLKFLSBUF, 0);
	close(bfd);
}

/*
 * 1. DISCARD on a block device a filesystem holds (a mounted loop device)
 * leaves the filesystem's cached buffers alone: its superblock page is in
 * use, so the hint is not taken, the filesystem writes and unmounts, and
 * fsck finds it intact.  Truncating those pages, as BLKDISCARD must not
 * either, leaves ext4 writing unmapped buffer heads (a BUG).
 */
TEST_F_TIMEOUT(hard, discard_spares_a_mounted_filesystem, 60)
{
	const char *why;
	struct ctx *c = &self->c;
	char path[96], val[32], cmd[128];
	int fd;

	why = ext4_mount(c);
	if (why)
		SKIP(return, "%s", why);
	snprintf(path, sizeof(path), "/sys/block/%s/queue/discard_max_bytes", c->loop + 5);
	if (read_str(path, val, sizeof(val)) || !strtoull(val, NULL, 10))
		SKIP(return, "%s cannot discard", c->loop);
	fd = open(EXT4_MNT "/before", O_RDWR | O_CREAT, 0600);
	ASSERT_LE(0, fd);
	ASSERT_EQ(5, write(fd, "hello", 5));
	ASSERT_EQ(0, fsync(fd));
	close(fd);

	c->be = open(c->loop, O_RDWR);
	ASSERT_LE(0, c->be);
	ASSERT_EQ(0, blk_open(c, 1, 64, V1, 1 << 20));
	ASSERT_EQ(0, vmm_blk_set_backend(&c->b, c->be));
	/* The first MiB: superblock, group descriptors, bitmaps. */
	ASSERT_LE(0, vmm_blk_post_dwz(&c->b, 0, VIRTIO_BLK_T_DISCARD, 0, 2048, 0, NULL));
	vmm_vq_kick(&c->b.vq[0]);
	EXPECT_EQ(VIRTIO_BLK_S_OK, vmm_blk_reap(&c->b, 0, NULL, NULL, 10000));
	ASSERT_EQ(0, vmm_blk_set_backend(&c->b, -1));
	close(c->be);
	c->be = -1;

	fd = open(EXT4_MNT "/after", O_RDWR | O_CREAT, 0600);
	ASSERT_LE(0, fd);
	EXPECT_EQ(5, write(fd, "world", 5));
	EXPECT_EQ(0, fsync(fd));
	EXPECT_EQ(0, syncfs(fd));
	close(fd);
	ASSERT_EQ(0, umount(EXT4_MNT)) TH_LOG("umount: %s", strerror(errno));
	c->mounted = false;
	snprintf(cmd, sizeof(cmd), "e2fsck -fn %s >/dev/null 2>&1", c->loop);
	EXPECT_EQ(0, system(cmd)) TH_LOG("e2fsck finds the filesystem damaged");
}

/* 4. The busy-poll timeout is capped. */
TEST_F_TIMEOUT(hard, busyloop_timeout_capped, 30)
{
	struct ctx *c = &self->c;
	struct vhost_vring_state st = { .index = 0 };

	ASSERT_EQ(0, blk_open(c, 1, 64, V1, 1 << 20));
	st.num = VHOST_BLK_MAX_BUSYLOOP_TIMEOUT + 1;
	EXPECT_EQ(-1, ioctl(c->b.fd, VHOST_SET_VRING_BUSYLOOP_TIMEOUT, &st));
	EXPECT_EQ(EINVAL, errno);
	st.num = ~0U;
	EXPECT_EQ(-1, ioctl(c->b.fd, VHOST_SET_VRING_BUSYLOOP_TIMEOUT, &st));
	st.num = VHOST_BLK_MAX_BUSYLOOP_TIMEOUT;
	EXPECT_EQ(0, ioctl(c->b.fd, VHOST_SET_VRING_BUSYLOOP_TIMEOUT, &st));
	st.num = 0;
	EXPECT_EQ(0, ioctl(c->b.fd, VHOST_GET_VRING_BUSYLOOP_TIMEOUT, &st));
	EXPECT_EQ(VHOST_BLK_MAX_BUSYLOOP_TIMEOUT, st.num);
}

/*
 * 6. Only the owner changes features or the IOTLB: both may start rings
 * (memory accesses in the caller's mm, workers charged to the caller).  A
 * forked child holding the fd gets -EPERM from the ioctl; its IOTLB
 * messages fail (the vhost core reports every refused message as -EFAULT).
 */
TEST_F_TIMEOUT(hard, non_owner_cannot_set_features_or_iotlb, 30)
{
	uint64_t bf = 1ULL << VHOST_BACKEND_F_IOTLB_MSG_V2, f = V1 | PLATFORM;
	struct ctx *c = &self->c;
	int status;
	pid_t pid;

	ASSERT_EQ(0, blk_open(c, 1, 64, V1 | PLATFORM, 1 << 20));
	ASSERT_EQ(0, ioctl(c->b.fd, VHOST_SET_BACKEND_FEATURES, &bf));
	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid) {
		int bad = 0, r;

		if (!ioctl(c->b.fd, VHOST_SET_FEATURES, &f) || errno != EPERM)
			bad |= 1;
		r = iotlb_msg(c->b.fd, VHOST_IOTLB_UPDATE, 0x1000, 4096, c->b.vmm.mem);
		if (r != -EFAULT)
			bad |= 2;
		r = iotlb_msg(c->b.fd, VHOST_IOTLB_INVALIDATE, 0x1000, 4096, NULL);
		if (r != -EFAULT)
			bad |= 4;
		_exit(bad);
	}
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ASSERT_TRUE(WIFEXITED(status));
	EXPECT_EQ(0, WEXITSTATUS(status) & 1) TH_LOG("a non-owner set the features");
	EXPECT_EQ(0, WEXITSTATUS(status) & 2) TH_LOG("a non-owner updated the IOTLB");
	EXPECT_EQ(0, WEXITSTATUS(status) & 4) TH_LOG("a non-owner invalidated the IOTLB");
	/* The owner still can. */
	EXPECT_EQ(0, ioctl(c->b.fd, VHOST_SET_FEATURES, &f));
	EXPECT_EQ(0, iotlb_msg(c->b.fd, VHOST_IOTLB_UPDATE, 0x1000, 4096, c->b.vmm.mem));
}

/*
 * Every ioctl but the GET_FEATURES pair (and
 * VHOST_SET_OWNER, EBUSY) is the owner's: another process holding the fd
 * gets EPERM from each, the ring, worker and backend ones included, and
 * changes nothing.
 */
TEST_F_TIMEOUT(hard, non_owner_gets_eperm_from_every_ioctl, 30)
{
	struct vhost_vring_state num = { .index = 0, .num = 64 };
	struct vhost_vring_state base = { .index = 0, .num = 0 };
	struct vhost_vring_state poll = { .index = 0, .num = 5 };
	struct vhost_vring_file file = { .index = 0, .fd = -1 };
	struct vhost_vring_addr addr = { .index = 0 };
	struct vhost_vring_worker vw = { .index = 0 };
	struct vhost_worker_state ws = { .worker_id = 0 };
	struct vhost_blk_backend be = { .fd = -1 };
	struct vhost_blk_serial serial = { .serial = "x" };
	uint64_t features = V1, bf = 1ULL << VHOST_BACKEND_F_IOTLB_MSG_V2, logbase = 0;
	uint64_t farr[2] = { 1, V1 };
	uint32_t wb = 0;
	struct {
		struct vhost_memory m;
		struct vhost_memory_region r;
	} mem = { .m = { .nregions = 1 } };
	const struct {
		const char *name;
		unsigned long req;
		void *arg;
	} calls[] = {
		{ "SET_FEATURES", VHOST_SET_FEATURES, &features },
		{ "SET_BACKEND_FEATURES", VHOST_SET_BACKEND_FEATURES, &bf },
		{ "SET_MEM_TABLE", VHOST_SET_MEM_TABLE, &mem },
		{ "SET_LOG_BASE", VHOST_SET_LOG_BASE, &logbase },
		{ "SET_VRING_NUM", VHOST_SET_VRING_NUM, &num },
		{ "SET_VRING_BASE", VHOST_SET_VRING_BASE, &base },
		{ "SET_VRING_ADDR", VHOST_SET_VRING_ADDR, &addr },
		{ "SET_VRING_KICK", VHOST_SET_VRING_KICK, &file },
		{ "SET_VRING_CALL", VHOST_SET_VRING_CALL, &file },
		{ "SET_VRING_ERR", VHOST_SET_VRING_ERR, &file },
		{ "SET_VRING_BUSYLOOP_TIMEOUT", VHOST_SET_VRING_BUSYLOOP_TIMEOUT, &poll },
		{ "GET_VRING_BASE", VHOST_GET_VRING_BASE, &base },
		{ "NEW_WORKER", VHOST_NEW_WORKER, &ws },
		{ "FREE_WORKER", VHOST_FREE_WORKER, &ws },
		{ "ATTACH_VRING_WORKER", VHOST_ATTACH_VRING_WORKER, &vw },
		{ "GET_VRING_WORKER", VHOST_GET_VRING_WORKER, &vw },
		{ "SET_VRING_WORKER", VHOST_SET_VRING_WORKER, &vw },
		{ "VHOST_BLK_SET_BACKEND", VHOST_BLK_SET_BACKEND, &be },
		{ "VHOST_BLK_SET_SERIAL", VHOST_BLK_SET_SERIAL, &serial },
		{ "VHOST_BLK_SET_WRITEBACK", VHOST_BLK_SET_WRITEBACK, &wb },
		{ "SET_FEATURES_ARRAY", VHOST_SET_FEATURES_ARRAY, farr },
		{ "RESET_OWNER", VHOST_RESET_OWNER, NULL },
	};
	struct ctx *c = &self->c;
	int out[2], status, i;
	char why[256];
	ssize_t n;
	pid_t pid;

	ASSERT_EQ(0, blk_open(c, 1, 64, V1, 1 << 20));
	mem.r.guest_phys_addr = VMM_GPA_BASE;
	mem.r.memory_size = c->b.vmm.size;
	mem.r.userspace_addr = (uintptr_t)c->b.vmm.mem;
	addr.desc_user_addr = (uintptr_t)c->b.vq[0].vr.desc;
	addr.avail_user_addr = (uintptr_t)c->b.vq[0].vr.avail;
	addr.used_user_addr = (uintptr_t)c->b.vq[0].vr.used;
	ASSERT_EQ(0, pipe(out));
	pid = vmm_fork_tied();
	ASSERT_LE(0, pid);
	if (!pid) {
		char buf[256] = "";

		close(out[0]);
		for (i = 0; i < (int)ARRAY_SIZE(calls); i++) {
			int r = ioctl(c->b.fd, calls[i].req, calls[i].arg);

			if (r != -1 || errno != EPERM)
				snprintf(buf + strlen(buf), sizeof(buf) - strlen(buf), " %s=%s",
					 calls[i].name, r == -1 ? strerror(errno) : "0");
		}
		_exit(write(out[1], buf, strlen(buf) + 1) < 0);
	}
	c->child = pid;
	close(out[1]);
	n = read(out[0], why, sizeof(why) - 1);
	close(out[0]);
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	c->child = 0;
	ASSERT_LT(0, n);
	why[n] = 0;
	EXPECT_STREQ("", why) TH_LOG("not EPERM for a non-owner:%s", why);
	/* Nothing changed: the owner's device still serves. */
	c->be = tmpfs_file(c, 1 << 20);
	ASSERT_LE(0, c->be);
	ASSERT_EQ(0, vmm_blk_set_backend(&c->b, c->be));
	EXPECT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&c->b, 0, VIRTIO_BLK_T_FLUSH, 0, NULL, 0));
}

/*
 * The busy-poll cap holds against a VMM that changes the
 * argument while the ioctl reads it: another thread flips the timeout
 * between 0 and ~0 as the main one sets it, and what the ring keeps never
 * exceeds VHOST_BLK_MAX_BUSYLOOP_TIMEOUT.
 */
struct flipper {
	struct vhost_vring_state *st;
	int stop;		/* atomic */
};

static void *flip_timeout(void *arg)
{
	struct flipper *f = arg;

	while (!__atomic_load_n(&f->stop, __ATOMIC_RELAXED))
		__atomic_store_n(&f->st->num, f->st->num ? 0 : ~0U, __ATOMIC_RELAXED);
	return NULL;
}

TEST_F_TIMEOUT(hard, busyloop_timeout_cap_holds_against_a_racing_argument, 60)
{
	enum { ROUNDS = 20000 };
	struct vhost_vring_state st = { .index = 0 }, got = { .index = 0 };
	struct flipper f = { .st = &st };
	struct ctx *c = &self->c;
	unsigned int over = 0, set = 0, i;
	pthread_t th;

	ASSERT_EQ(0, blk_open(c, 1, 64, V1, 1 << 20));
	ASSERT_EQ(0, pthread_create(&th, NULL, flip_timeout, &f));
	for (i = 0; i < ROUNDS; i++) {
		if (!ioctl(c->b.fd, VHOST_SET_VRING_BUSYLOOP_TIMEOUT, &st))
			set++;
		got.num = 0;
		ASSERT_EQ(0, ioctl(c->b.fd, VHOST_GET_VRING_BUSYLOOP_TIMEOUT, &got));
		if (got.num > VHOST_BLK_MAX_BUSYLOOP_TIMEOUT)
			over++;
	}
	__atomic_store_n(&f.stop, 1, __ATOMIC_RELAXED);
	pthread_join(th, NULL);
	TH_LOG("%u of %d SETs accepted", set, ROUNDS);
	EXPECT_EQ(0, over) TH_LOG("the ring kept a timeout over the cap %u times", over);
	st.num = 0;
	EXPECT_EQ(0, ioctl(c->b.fd, VHOST_SET_VRING_BUSYLOOP_TIMEOUT, &st));
}

/*
 * 7. After a detach, a ring starts only once the VMM sets it up again.  A
 * guest back with one queue of two: ring 1 still has its kick and its old
 * addresses, and a request there (memory that is no longer a ring) must not
 * reach the disk.  Set up again, it is served.
 */
TEST_F_TIMEOUT(hard, detached_ring_stays_stopped_until_set_up, 30)
{
	const char *why = vhost_nullb_unusable(true, false);
	struct ctx *c = &self->c;
	unsigned char *buf, *old, *got;
	int check;

	if (why)
		SKIP(return, "%s", why);
	c->be = open(NULLB0, O_RDWR | O_DIRECT);
	ASSERT_LE(0, c->be);
	check = open(NULLB0, O_RDONLY | O_DIRECT);
	ASSERT_LE(0, check);
	ASSERT_EQ(0, blk_open(c, 2, 64, V1, 4 << 20));
	ASSERT_EQ(0, vmm_blk_set_backend(&c->b, c->be));
	buf = vmm_alloc(&c->b.vmm, 4096, 4096);
	old = vmm_alloc(&c->b.vmm, 4096, 4096);
	got = vmm_alloc(&c->b.vmm, 4096, 4096);
	ASSERT_NE(NULL, got);
	fill(old, 4096, 30720, 110);
	ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&c->b, 1, VIRTIO_BLK_T_OUT, 30720, old, 4096));

	ASSERT_EQ(0, vmm_blk_set_backend(&c->b, -1));
	ASSERT_EQ(0, vmm_blk_rearm(&c->b, 0));
	ASSERT_EQ(0, vmm_blk_set_backend(&c->b, c->be));
	fill(buf, 4096, 30720, 111);
	ASSERT_LE(0, vmm_blk_post(&c->b, 1, VIRTIO_BLK_T_OUT, 30720, buf, 4096, 1, false, NULL));
	vmm_vq_kick(&c->b.vq[1]);
	EXPECT_EQ(-1, vmm_blk_reap(&c->b, 1, NULL, NULL, 500))
		TH_LOG("a ring not set up since the detach was served");
	ASSERT_EQ(4096, pread(check, got, 4096, 30720 * 512ULL));
	EXPECT_EQ(0, memcmp(got, old, 4096)) TH_LOG("the disk changed");
	/* Ring 0, set up again, works. */
	EXPECT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&c->b, 0, VIRTIO_BLK_T_IN, 30720, got, 4096));

	/* Set up again, ring 1 serves what waited. */
	ASSERT_EQ(0, vmm_blk_rearm(&c->b, 1));
	EXPECT_EQ(VIRTIO_BLK_S_OK, vmm_blk_reap(&c->b, 1, NULL, NULL, 5000));
	ASSERT_EQ(4096, pread(check, got, 4096, 30720 * 512ULL));
	EXPECT_EQ(0, memcmp(got, buf, 4096));
	close(check);
}

/*
 * 11. Any of VHOST_SET_VRING_NUM, _BASE (the index it had) or _ADDR (the
 * same addresses) sets a detached ring up again, as the KICK does above:
 * each such ring is served after the next SET_BACKEND, the ring left
 * alone is not until its kick is set again.
 */
TEST_F_TIMEOUT(hard, ring_set_up_again_by_num_base_or_addr, 30)
{
	const char *why = vhost_nullb_unusable(false, false);
	struct ctx *c = &self->c;
	struct vhost_vring_state st;
	struct vhost_vring_addr a;
	struct vmm_vq *vq;
	void *buf;
	int q;

	if (why)
		SKIP(return, "%s", why);
	c->be = open(NULLB0, O_RDWR | O_DIRECT);
	ASSERT_LE(0, c->be);
	ASSERT_EQ(0, blk_open(c, 4, 64, V1, 4 << 20));
	ASSERT_EQ(0, vmm_blk_set_backend(&c->b, c->be));
	buf = vmm_alloc(&c->b.vmm, 4096, 4096);
	ASSERT_NE(NULL, buf);
	for (q = 0; q < 4; q++)
		ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&c->b, q, VIRTIO_BLK_T_IN, 0, buf, 4096));
	ASSERT_EQ(0, vmm_blk_set_backend(&c->b, -1));
	st = (struct vhost_vring_state){ .index = 1, .num = c->b.vq[1].num };
	ASSERT_EQ(0, ioctl(c->b.fd, VHOST_SET_VRING_NUM, &st));
	st = (struct vhost_vring_state){ .index = 2 };
	ASSERT_EQ(0, ioctl(c->b.fd, VHOST_GET_VRING_BASE, &st));
	ASSERT_EQ(c->b.vq[2].avail_idx, st.num);
	ASSERT_EQ(0, ioctl(c->b.fd, VHOST_SET_VRING_BASE, &st));
	vq = &c->b.vq[3];
	a = (struct vhost_vring_addr){
		.index = 3,
		.desc_user_addr = (uintptr_t)vq->vr.desc,
		.avail_user_addr = (uintptr_t)vq->vr.avail,
		.used_user_addr = (uintptr_t)vq->vr.used,
	};
	ASSERT_EQ(0, ioctl(c->b.fd, VHOST_SET_VRING_ADDR, &a));
	ASSERT_EQ(0, vmm_blk_set_backend(&c->b, c->be));
	for (q = 1; q < 4; q++)
		EXPECT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&c->b, q, VIRTIO_BLK_T_IN, 0, buf, 4096))
			TH_LOG("ring %d, set up again, is not served", q);
	ASSERT_LE(0, vmm_blk_post(&c->b, 0, VIRTIO_BLK_T_IN, 0, buf, 4096, 1, false, NULL));
	vmm_vq_kick(&c->b.vq[0]);
	EXPECT_EQ(-1, vmm_blk_reap(&c->b, 0, NULL, NULL, 500))
		TH_LOG("a ring not set up since the detach was served");
	ASSERT_EQ(0, vmm_blk_rearm(&c->b, 0));
	EXPECT_EQ(VIRTIO_BLK_S_OK, vmm_blk_reap(&c->b, 0, NULL, NULL, 5000));
}

/*
 * 11. worker_pool=2: four rings on a pool of two workers, round robin
 * (rings 0 and 2 on one, 1 and 3 on the other), each ring serving I/O.
 */
TEST_F_TIMEOUT(hard, worker_pool_of_two_shares_round_robin, 30)
{
	const char *why = vhost_nullb_unusable(false, false);
	struct ctx *c = &self->c;
	unsigned int ids[4];
	void *buf;
	int q;

	if (why)
		SKIP(return, "%s", why);
	if (read_str(WORKER_POOL, c->worker_pool, sizeof(c->worker_pool)))
		SKIP(return, "%s missing", WORKER_POOL);
	ASSERT_EQ(0, write_str(WORKER_POOL, "2"));
	c->be = open(NULLB0, O_RDWR | O_DIRECT);
	ASSERT_LE(0, c->be);
	ASSERT_EQ(0, blk_open(c, 4, 64, V1, 4 << 20));
	ASSERT_EQ(0, vmm_blk_set_backend(&c->b, c->be));
	buf = vmm_alloc(&c->b.vmm, 4096, 4096);
	ASSERT_NE(NULL, buf);
	for (q = 0; q < 4; q++) {
		struct vhost_vring_worker w = { .index = q };

		EXPECT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&c->b, q, VIRTIO_BLK_T_IN, 0, buf, 4096))
			TH_LOG("ring %d is not served", q);
		ASSERT_EQ(0, ioctl(c->b.fd, VHOST_GET_VRING_WORKER, &w));
		ids[q] = w.worker_id;
	}
	EXPECT_EQ(ids[0], ids[2]);
	EXPECT_EQ(ids[1], ids[3]);
	EXPECT_NE(ids[0], ids[1]);
}

/*
 * Workers the kernel makes for rings the VMM did not bind (worker_pool=0)
 * are the VMM's like its own: VHOST_GET_VRING_WORKER and
 * VHOST_GET_VRING_WORKER_INFO name them (a thread of this process),
 * VHOST_FREE_WORKER refuses one in use (EBUSY) and frees it once its ring
 * is rebound, after which its id is gone (ENODEV).  A ring the VMM bound
 * before the start keeps the worker it was given: the kernel makes none
 * for it.
 */
TEST_F_TIMEOUT(hard, kernel_made_workers_are_found_rebound_and_freed, 30)
{
	const char *why = vhost_nullb_unusable(false, false);
	struct vhost_vring_worker_info info;
	struct ctx *c = &self->c;
	unsigned int ids[3], mine = VHOST_VRING_NEW_WORKER, q;
	struct vhost_vring_worker w;
	char comm[64], path[64];
	void *buf;

	if (why)
		SKIP(return, "%s", why);
	if (read_str(WORKER_POOL, c->worker_pool, sizeof(c->worker_pool)))
		SKIP(return, "%s missing", WORKER_POOL);
	ASSERT_EQ(0, write_str(WORKER_POOL, "0"));
	c->be = open(NULLB0, O_RDWR | O_DIRECT);
	ASSERT_LE(0, c->be);
	ASSERT_EQ(0, blk_open(c, 3, 64, V1, 4 << 20));
	/* Ring 2 bound by the VMM before any ring starts. */
	ASSERT_EQ(0, set_worker(c->b.fd, 2, &mine));
	ASSERT_EQ(0, vmm_blk_set_backend(&c->b, c->be));
	buf = vmm_alloc(&c->b.vmm, 4096, 4096);
	ASSERT_NE(NULL, buf);
	for (q = 0; q < 3; q++) {
		ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&c->b, q, VIRTIO_BLK_T_IN, 0, buf, 4096))
			TH_LOG("ring %u is not served", q);
		w = (struct vhost_vring_worker){ .index = q };
		ASSERT_EQ(0, ioctl(c->b.fd, VHOST_GET_VRING_WORKER, &w));
		ids[q] = w.worker_id;
	}
	EXPECT_EQ(mine, ids[2]) TH_LOG("the kernel moved a ring the VMM bound");
	ASSERT_NE(ids[0], ids[1]) TH_LOG("the kernel made no worker for ring 1");
	EXPECT_NE(ids[2], ids[1]);
	/* Its thread, as for a worker the VMM made: one of ours, "vhost-". */
	info = (struct vhost_vring_worker_info){ .index = 1 };
	ASSERT_EQ(0, ioctl(c->b.fd, VHOST_GET_VRING_WORKER_INFO, &info));
	EXPECT_EQ(ids[1], info.worker_id);
	ASSERT_LT(0, info.worker_tid);
	snprintf(path, sizeof(path), "/proc/%d/task/%d/comm", getpid(), info.worker_tid);
	if (read_str(path, comm, sizeof(comm))) {
		/* 6.1: a kthread of the owner's, not a thread of this process. */
		snprintf(path, sizeof(path), "/proc/%d/comm", info.worker_tid);
		ASSERT_EQ(0, read_str(path, comm, sizeof(comm)))
			TH_LOG("no thread %d for ring 1's worker", info.worker_tid);
	}
	EXPECT_EQ(0, strncmp(comm, "vhost-", 6)) TH_LOG("ring 1's worker is '%s'", comm);

	EXPECT_EQ(-EBUSY, free_worker(c->b.fd, ids[1]));
	w = (struct vhost_vring_worker){ .index = 1, .worker_id = ids[0] };
	ASSERT_EQ(0, vmm_worker_call(c->b.fd, VHOST_ATTACH_VRING_WORKER, &w));
	EXPECT_EQ(0, free_worker(c->b.fd, ids[1]));
	EXPECT_EQ(-ENODEV, free_worker(c->b.fd, ids[1]));
	EXPECT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&c->b, 1, VIRTIO_BLK_T_IN, 8, buf, 4096));
	w = (struct vhost_vring_worker){ .index = 1 };
	ASSERT_EQ(0, ioctl(c->b.fd, VHOST_GET_VRING_WORKER, &w));
	EXPECT_EQ(ids[0], w.worker_id);
}

/*
 * 10. Faults injected into a ring's worker reach the requests it hands off:
 * a DISCARD, which the worker hands to the ring's work item, fails with
 * VIRTIO_BLK_S_IOERR when the worker is marked for fail_make_request
 * (task-filter, every request of /dev/nullb0), as the work item carries
 * the mark.  A fault-injection run would otherwise never reach that path.
 */
#define FMR	"/sys/kernel/debug/fail_make_request"
TEST_F_TIMEOUT(hard, injected_faults_follow_requests_off_the_worker, 60)
{
	static const char * const knobs[] = { "probability", "interval", "times",
					       "task-filter", "verbose" };
	static const char * const set[] = { "100", "1", "-1", "Y", "0" };
	const char *why = vhost_nullb_unusable(true, true);
	char saved[5][32], path[96], mark[96];
	struct ctx *c = &self->c;
	int tids[8], n, i, r, st_before, st_faulted;

	if (why)
		SKIP(return, "%s", why);
	if (access(FMR, F_OK))
		mount("debugfs", "/sys/kernel/debug", "debugfs", 0, NULL);
	if (access(FMR "/probability", F_OK) ||
	    access("/sys/block/nullb0/make-it-fail", F_OK))
		SKIP(return, "no fail_make_request (CONFIG_FAIL_MAKE_REQUEST, DEBUG_FS)");
	c->be = open(NULLB0, O_RDWR | O_DIRECT);
	ASSERT_LE(0, c->be);
	ASSERT_EQ(0, blk_open(c, 1, 64, V1, 4 << 20));
	ASSERT_EQ(0, vmm_blk_set_backend(&c->b, c->be));
	ASSERT_LE(0, vmm_blk_post_dwz(&c->b, 0, VIRTIO_BLK_T_DISCARD, 0, 8, 0, NULL));
	vmm_vq_kick(&c->b.vq[0]);
	st_before = vmm_blk_reap(&c->b, 0, NULL, NULL, 10000);
	ASSERT_EQ(VIRTIO_BLK_S_OK, st_before) TH_LOG("DISCARD fails without faults");
	n = vmm_owner_workers(getpid(), tids, NULL, 8);
	ASSERT_LT(0, n) TH_LOG("no worker thread found");

	for (i = 0; i < 5; i++) {
		snprintf(path, sizeof(path), FMR "/%s", knobs[i]);
		ASSERT_EQ(0, read_str(path, saved[i], sizeof(saved[i])));
	}
	for (i = 0, r = 0; i < n && !r; i++) {
		snprintf(mark, sizeof(mark), "/proc/%d/make-it-fail", tids[i]);
		r = write_str(mark, "1");
	}
	for (i = 0; i < 5 && !r; i++) {
		snprintf(path, sizeof(path), FMR "/%s", knobs[i]);
		r = write_str(path, set[i]);
	}
	if (!r)
		r = write_str("/sys/block/nullb0/make-it-fail", "1");
	st_faulted = -1;
	if (!r) {
		ASSERT_LE(0, vmm_blk_post_dwz(&c->b, 0, VIRTIO_BLK_T_DISCARD, 0, 8, 0, NULL));
		vmm_vq_kick(&c->b.vq[0]);
		st_faulted = vmm_blk_reap(&c->b, 0, NULL, NULL, 10000);
	}
	/* Put everything back before judging. */
	write_str("/sys/block/nullb0/make-it-fail", "0");
	for (i = 0; i < 5; i++) {
		snprintf(path, sizeof(path), FMR "/%s", knobs[i]);
		write_str(path, saved[i]);
	}
	for (i = 0; i < n; i++) {
		snprintf(mark, sizeof(mark), "/proc/%d/make-it-fail", tids[i]);
		write_str(mark, "0");
	}
	ASSERT_EQ(0, r) TH_LOG("could not set up fail_make_request: %s", strerror(-r));
	EXPECT_EQ(VIRTIO_BLK_S_IOERR, st_faulted)
		TH_LOG("a DISCARD off a marked worker escaped the injected faults (%d)",
		       st_faulted);
}

/*
 * 11. DISCARD on a block device that cannot discard (a configfs null_blk
 * without discard) is a hint not taken: VIRTIO_BLK_S_OK, data unchanged.
 */
TEST_F_TIMEOUT(hard, discard_on_a_device_that_cannot_discard, 30)
{
	struct ctx *c = &self->c;
	unsigned char *buf, *got;
	char path[96], val[16];
	int r;

	c->slow_nsec = "1000";
	c->slow_nodiscard = true;
	r = slow_nullb_create(c);
	if (r)
		SKIP(return, "no configfs null_blk: %s", strerror(-r));
	snprintf(path, sizeof(path), "/sys/block/%s/queue/discard_max_bytes", c->slow_name);
	ASSERT_EQ(0, read_str(path, val, sizeof(val)));
	ASSERT_STREQ("0", val) TH_LOG("the device can discard");
	ASSERT_EQ(0, blk_open(c, 1, 64, V1, 4 << 20));
	ASSERT_EQ(0, vmm_blk_set_backend(&c->b, c->be));
	buf = vmm_alloc(&c->b.vmm, 8192, 4096);
	got = vmm_alloc(&c->b.vmm, 8192, 4096);
	ASSERT_NE(NULL, got);
	fill(buf, 8192, 64, 120);
	ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&c->b, 0, VIRTIO_BLK_T_OUT, 64, buf, 8192));
	ASSERT_LE(0, vmm_blk_post_dwz(&c->b, 0, VIRTIO_BLK_T_DISCARD, 64, 16, 0, NULL));
	vmm_vq_kick(&c->b.vq[0]);
	EXPECT_EQ(VIRTIO_BLK_S_OK, vmm_blk_reap(&c->b, 0, NULL, NULL, 5000));
	ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&c->b, 0, VIRTIO_BLK_T_IN, 64, got, 8192));
	EXPECT_EQ(0, memcmp(buf, got, 8192)) TH_LOG("the DISCARD changed the data");
}

/*
 * Answer the device's IOTLB misses for up to @ms (with @until_used, only
 * until ring 0 has a used entry): the number answered.
 */
static int answer_misses(struct ctx *c, int ms, bool until_used)
{
	struct vhost_msg_v2 msg;
	struct pollfd p = { .fd = c->b.fd, .events = POLLIN };
	double end = now_s() + ms / 1000.0;
	int answered = 0;

	while (now_s() < end) {
		uint64_t page;

		if (until_used && vmm_vq_in_flight(&c->b.vq[0]) &&
		    c->b.vq[0].vr.used->idx != c->b.vq[0].last_used)
			break;
		if (poll(&p, 1, 20) <= 0)
			continue;
		if (read(c->b.fd, &msg, sizeof(msg)) != sizeof(msg))
			continue;
		if (msg.type != VHOST_IOTLB_MSG_V2 || msg.iotlb.type != VHOST_IOTLB_MISS)
			continue;
		page = msg.iotlb.iova & ~4095ULL;
		if (page < c->b.vmm.gpa_base || page >= c->b.vmm.gpa_base + c->b.vmm.size)
			continue;
		iotlb_msg(c->b.fd, VHOST_IOTLB_UPDATE, page, 4096,
			  (char *)c->b.vmm.mem + (page - c->b.vmm.gpa_base));
		answered++;
	}
	return answered;
}

struct rescuer {
	struct ctx *c;
	bool done;		/* atomic accesses */
	int answered;
};

/* Answers misses after 5 s, should the test's own thread be stuck. */
static void *rescuer(void *arg)
{
	struct rescuer *r = arg;
	int i;

	for (i = 0; i < 500; i++) {
		if (__atomic_load_n(&r->done, __ATOMIC_ACQUIRE))
			return NULL;
		usleep(10 * 1000);
	}
	while (!__atomic_load_n(&r->done, __ATOMIC_ACQUIRE))
		r->answered += answer_misses(r->c, 200, false);
	return NULL;
}

/*
 * A READ in flight on the slow device while every IOTLB entry the rings
 * use is evicted (2048 unrelated updates: vhost keeps max_iotlb_entries,
 * 2048 by default, and drops the oldest), then completed at the device:
 * returning it needs the used ring, whose miss went to the VMM.
 *
 * The device takes 3 s, so that the evictions (a few hundred ms on the
 * debug kernel under TCG) are over before it completes: with 300 ms, a
 * slow run evicted the used ring only after the completion had used it,
 * and the case failed for want of a miss (7.3, a cold make check).  The
 * evictions are timed and must end first.
 */
static int evicted_completion(struct __test_metadata *_metadata, struct ctx *c)
{
	double t0, took;
	void *buf;
	int i, r;

	c->slow_nsec = "3000000000";
	r = slow_nullb_create(c);
	if (r)
		return r;
	ASSERT_EQ(0, blk_open(c, 1, 64, V1 | PLATFORM, 2 << 20));
	ASSERT_EQ(0, iotlb_map_pages(c));
	ASSERT_EQ(0, vmm_blk_set_backend(&c->b, c->be));
	buf = vmm_alloc(&c->b.vmm, 4096, 4096);
	ASSERT_NE(NULL, buf);
	ASSERT_LE(0, vmm_blk_post(&c->b, 0, VIRTIO_BLK_T_IN, 0, buf, 4096, 1, false, NULL));
	vmm_vq_kick(&c->b.vq[0]);
	t0 = now_s();
	ASSERT_EQ(0, slow_wait_in_flight(c));
	for (i = 0; i < 2048; i++)
		ASSERT_EQ(0, iotlb_msg(c->b.fd, VHOST_IOTLB_UPDATE, (1ULL << 40) + i * 4096ULL,
				       4096, c->b.vmm.mem));
	took = now_s() - t0;
	TH_LOG("in flight and 2048 IOTLB updates in %.2f s", took);
	ASSERT_GT(2.5, took) TH_LOG("the device takes 3 s: judged too late");
	/* Completed at the device, then stuck on the miss. */
	ASSERT_EQ(0, slow_wait_inflight_for(c, false, 10000));
	usleep(300 * 1000);
	ASSERT_EQ(-1, vmm_blk_reap(&c->b, 0, NULL, NULL, 0));
	return 0;
}

/*
 * Time @op, which must not wait for the VMM to answer a miss: a rescuer
 * thread answers after 5 s should it hang.  @answered: what the rescuer
 * had to answer (0 when @op returned in time).
 */
static double time_without_answers(struct __test_metadata *_metadata, struct ctx *c,
				   int (*op)(struct ctx *c), int *answered)
{
	struct rescuer res = { .c = c };
	pthread_t th;
	double t0, took;

	ASSERT_EQ(0, pthread_create(&th, NULL, rescuer, &res));
	t0 = now_s();
	EXPECT_EQ(0, op(c));
	took = now_s() - t0;
	__atomic_store_n(&res.done, true, __ATOMIC_RELEASE);
	pthread_join(th, NULL);
	*answered = res.answered;
	return took;
}

static int invalidate_elsewhere(struct ctx *c)
{
	return iotlb_msg(c->b.fd, VHOST_IOTLB_INVALIDATE, 1ULL << 40, 4096, NULL);
}

static int detach(struct ctx *c)
{
	return vmm_blk_set_backend(&c->b, -1);
}

/*
 * 5. A VMM that answers IOTLB misses from the thread that sends
 * invalidations (QEMU's main loop) is not hung by an invalidation while a
 * completion waits for a miss: the write returns at once, then the VMM
 * answers and the READ completes.  A thread answers after 5 s, should the
 * write hang.
 */
TEST_F_TIMEOUT(hard, iotlb_invalidate_never_waits_for_a_miss, 60)
{
	struct ctx *c = &self->c;
	int r = evicted_completion(_metadata, c), answered;
	double took;

	if (r)
		SKIP(return, "no configfs null_blk: %s", strerror(-r));
	took = time_without_answers(_metadata, c, invalidate_elsewhere, &answered);
	EXPECT_GT(1.0, took) TH_LOG("the invalidation took %.2f s", took);
	EXPECT_EQ(0, answered) TH_LOG("the VMM would have hung: another thread answered");
	answer_misses(c, 10000, true);
	EXPECT_EQ(VIRTIO_BLK_S_OK, vmm_blk_reap(&c->b, 0, NULL, NULL, 1000));
}

/*
 * 5. The same with the device stopped (SET_BACKEND -1, as QEMU stops it
 * from its main loop): the detach returns at once, dropping the request
 * whose used ring it cannot reach, instead of waiting for the VMM.
 */
TEST_F_TIMEOUT(hard, detach_never_waits_for_a_miss, 60)
{
	struct ctx *c = &self->c;
	int r = evicted_completion(_metadata, c), answered;
	double took;

	if (r)
		SKIP(return, "no configfs null_blk: %s", strerror(-r));
	took = time_without_answers(_metadata, c, detach, &answered);
	EXPECT_GT(1.0, took) TH_LOG("the detach took %.2f s", took);
	EXPECT_EQ(0, answered) TH_LOG("the VMM would have hung: another thread answered");
}

/*
 * 5. A restart begins with an empty IOTLB.  A VMM forwards the guest's
 * IOMMU invalidations only while it runs the device (QEMU stops in
 * vhost_dev_stop()), and a guest driver rebound meanwhile reuses the IOVAs
 * of its old rings: entries from before the detach may be stale.  Here the
 * VMM maps every page, serves a READ, detaches, sets the features again
 * and maps only the used ring (what QEMU sends before it attaches): the
 * READ after the reattach must make the device ask for its other pages.
 * Before the fix it was served through the entries of the first start
 * (a nested guest's rebind behind intel-iommu hung on it).
 */
TEST_F_TIMEOUT(hard, restart_forgets_stale_translations, 60)
{
	struct ctx *c = &self->c;
	uint64_t features = V1 | PLATFORM;
	struct vmm_vq *vq;
	uint64_t used, end;
	void *buf;
	int answered;

	c->be = tmpfs_file(c, 1 << 20);
	if (c->be == -ENOTSUP)
		SKIP(return, "cannot mount tmpfs");
	ASSERT_LE(0, c->be);
	ASSERT_EQ(0, blk_open(c, 1, 64, features, 2 << 20));
	ASSERT_EQ(0, iotlb_map_pages(c));
	ASSERT_EQ(0, vmm_blk_set_backend(&c->b, c->be));
	buf = vmm_alloc(&c->b.vmm, 4096, 4096);
	ASSERT_NE(NULL, buf);
	ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&c->b, 0, VIRTIO_BLK_T_IN, 0, buf, 4096));

	ASSERT_EQ(0, vmm_blk_set_backend(&c->b, -1));
	ASSERT_EQ(0, ioctl(c->b.fd, VHOST_SET_FEATURES, &features));
	vq = &c->b.vq[0];
	used = vmm_gpa(&c->b.vmm, vq->vr.used) & ~4095ULL;
	end = vmm_gpa(&c->b.vmm, &vq->vr.used->ring[vq->vr.num]) + 2;
	for (; used < end; used += 4096)
		ASSERT_EQ(0, iotlb_msg(c->b.fd, VHOST_IOTLB_UPDATE, used, 4096,
				       (char *)c->b.vmm.mem + (used - c->b.vmm.gpa_base)));
	ASSERT_EQ(0, vmm_blk_rearm(&c->b, 0));
	ASSERT_EQ(0, vmm_blk_set_backend(&c->b, c->be));
	ASSERT_LE(0, vmm_blk_post(&c->b, 0, VIRTIO_BLK_T_IN, 0, buf, 4096, 1, false, NULL));
	vmm_vq_kick(vq);
	answered = answer_misses(c, 10000, true);
	EXPECT_LT(0, answered)
		TH_LOG("the READ was served through the translations of the first start");
	EXPECT_EQ(VIRTIO_BLK_S_OK, vmm_blk_reap(&c->b, 0, NULL, NULL, 1000));
}

/* What the owner waits in for a READ in flight, in killed_in_drain(). */
enum drain_op { IN_SET_MEM_TABLE, IN_SET_BACKEND, IN_RESET_OWNER, IN_LOG_ALL };

static void drain_op_run(struct ctx *c, enum drain_op op)
{
	uint64_t features = V1 | LOG_ALL;

	switch (op) {
	case IN_SET_MEM_TABLE:
		vmm_set_mem_table(&c->b.vmm, c->b.fd);
		break;
	case IN_SET_BACKEND:
		vmm_blk_set_backend(&c->b, c->be);
		break;
	case IN_RESET_OWNER:
		ioctl(c->b.fd, VHOST_RESET_OWNER, NULL);
		break;
	case IN_LOG_ALL:
		ioctl(c->b.fd, VHOST_SET_FEATURES, &features);
		break;
	}
}

/* Whether @pid sleeps uninterruptibly (or killably) in ioctl(2). */
static bool in_ioctl_asleep(pid_t pid)
{
	char path[64], buf[512], *p;
	long nr;

	snprintf(path, sizeof(path), "/proc/%d/syscall", pid);
	if (read_str(path, buf, sizeof(buf)))
		return false;
	nr = strtol(buf, &p, 10);
	if (p == buf || nr != SYS_ioctl)
		return false;
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	if (read_str(path, buf, sizeof(buf)))
		return false;
	p = strrchr(buf, ')');
	return p && p[1] == ' ' && p[2] == 'D';
}

/*
 * 11. A fatal signal ends a wait for requests in flight: the owner, in
 * @op while a READ takes 5 s at the device, dies at once when killed.  The
 * test keeps a reference to the device (passed over a socket), so the
 * owner's exit does not have to wait for the release.  The owner is killed
 * once it is seen asleep in the ioctl with the READ still at the device.
 */
static void killed_in_drain(struct __test_metadata *_metadata, struct ctx *c,
			    enum drain_op op)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
			     .msg_control = cbuf, .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *cm;
	int sv[2], devfd = -1, status, r, i;
	double t0, took;
	char byte = 0;
	pid_t pid;

	c->slow_nsec = "5000000000";
	r = slow_nullb_create(c);
	if (r)
		SKIP(return, "no configfs null_blk: %s", strerror(-r));
	ASSERT_EQ(0, socketpair(AF_UNIX, SOCK_STREAM, 0, sv));
	pid = vmm_fork_tied();
	ASSERT_LE(0, pid);
	if (!pid) {
		void *buf;

		close(sv[0]);
		if (blk_open(c, 1, 64, V1, 4 << 20) || vmm_blk_set_backend(&c->b, c->be))
			_exit(1);
		if (op == IN_LOG_ALL && log_setup(c))
			_exit(1);
		buf = vmm_alloc(&c->b.vmm, 4096, 4096);
		if (!buf || vmm_blk_post(&c->b, 0, VIRTIO_BLK_T_IN, 0, buf, 4096, 1, false,
					 NULL) < 0)
			_exit(1);
		vmm_vq_kick(&c->b.vq[0]);
		if (slow_wait_in_flight(c))
			_exit(1);
		/* Hand the device over, then wait for the READ in an ioctl. */
		iov = (struct iovec){ &byte, 1 };
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &c->b.fd, sizeof(int));
		if (sendmsg(sv[1], &mh, 0) != 1)
			_exit(1);
		drain_op_run(c, op);
		_exit(2);
	}
	c->child = pid;		/* the teardown kills and reaps it */
	close(sv[1]);
	iov = (struct iovec){ &byte, 1 };
	r = recvmsg(sv[0], &mh, 0);
	close(sv[0]);
	if (r == 1) {
		cm = CMSG_FIRSTHDR(&mh);
		if (cm && cm->cmsg_type == SCM_RIGHTS)
			memcpy(&devfd, CMSG_DATA(cm), sizeof(int));
	}
	ASSERT_LE(0, devfd) TH_LOG("the owner could not set up and hand over the device");
	for (i = 0; i < 400 && !in_ioctl_asleep(pid); i++)
		usleep(5 * 1000);
	ASSERT_TRUE(in_ioctl_asleep(pid)) TH_LOG("the owner never slept in the ioctl");
	ASSERT_EQ(0, slow_wait_in_flight(c)) TH_LOG("the READ is no longer at the device");
	t0 = now_s();
	kill(pid, SIGKILL);
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	c->child = 0;
	took = now_s() - t0;
	EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
		TH_LOG("the owner was not in the ioctl when killed (status %#x)", status);
	EXPECT_GT(1.0, took) TH_LOG("the killed owner took %.2f s to die", took);
	close(devfd);
}

TEST_F_TIMEOUT(hard, fatal_signal_ends_set_mem_table, 60)
{
	killed_in_drain(_metadata, &self->c, IN_SET_MEM_TABLE);
}

TEST_F_TIMEOUT(hard, fatal_signal_ends_set_backend, 60)
{
	killed_in_drain(_metadata, &self->c, IN_SET_BACKEND);
}

TEST_F_TIMEOUT(hard, fatal_signal_ends_reset_owner, 60)
{
	killed_in_drain(_metadata, &self->c, IN_RESET_OWNER);
}

TEST_F_TIMEOUT(hard, fatal_signal_ends_a_log_all_switch, 60)
{
	killed_in_drain(_metadata, &self->c, IN_LOG_ALL);
}

/*
 * 4. A request stalled at its backend (a configfs null_blk whose requests
 * take 5 s) keeps the VMM neither waiting nor unkillable: a FLUSH (the
 * device with a write cache), or a READ through the page cache of a page
 * not cached.  VHOST_SET_VRING_CALL on its ring, from the VMM's main
 * thread, returns at once, and the VMM, killed, dies at once, its last
 * close of the device included.  The request then completes at the device
 * and the device's release, left to a work item, ends: the kernel log
 * stays clean.
 */
static void stalled_request_leaves_the_vmm_killable(struct __test_metadata *_metadata,
						    struct ctx *c, uint32_t type)
{
	double t0, took = -1, died;
	int p[2], status, r;
	struct pollfd pfd;
	bool returned;
	pid_t pid;

	c->slow_nsec = "5000000000";
	c->slow_cache = type == VIRTIO_BLK_T_FLUSH;
	c->slow_buffered = type == VIRTIO_BLK_T_IN;
	r = slow_nullb_create(c);
	if (r)
		SKIP(return, "no configfs null_blk: %s", strerror(-r));
	ASSERT_EQ(0, pipe(p));
	pid = vmm_fork_tied();
	ASSERT_LE(0, pid);
	if (!pid) {
		struct vhost_vring_file call;
		void *buf = NULL;

		close(p[0]);
		if (blk_open(c, 1, 64, V1, 4 << 20) || vmm_blk_set_backend(&c->b, c->be))
			_exit(1);
		if (type == VIRTIO_BLK_T_IN) {
			buf = vmm_alloc(&c->b.vmm, 4096, 4096);
			if (!buf)
				_exit(1);
		}
		if (vmm_blk_post(&c->b, 0, type, 0, buf, buf ? 4096 : 0, buf ? 1 : 0,
				 false, NULL) < 0)
			_exit(1);
		vmm_vq_kick(&c->b.vq[0]);
		/* The request is at the device. */
		if (type == VIRTIO_BLK_T_FLUSH)
			r = slow_wait_flush(c);
		else
			r = slow_wait_in_flight(c);
		if (r)
			_exit(r == -ENOENT ? 6 : 3);
		call = (struct vhost_vring_file){ .index = 0, .fd = c->b.vq[0].call };
		t0 = now_s();
		if (ioctl(c->b.fd, VHOST_SET_VRING_CALL, &call))
			_exit(4);
		took = now_s() - t0;
		if (write(p[1], &took, sizeof(took)) != sizeof(took))
			_exit(5);
		for (;;)
			pause();
	}
	c->child = pid;		/* killed by the teardown on a failure */
	close(p[1]);
	pfd = (struct pollfd){ .fd = p[0], .events = POLLIN };
	/* Up to 4 s: the FLUSH is still at the device then. */
	returned = poll(&pfd, 1, 4000) == 1 &&
		   read(p[0], &took, sizeof(took)) == sizeof(took);
	close(p[0]);
	t0 = now_s();
	kill(pid, SIGKILL);
	/* Bounded: a VMM in D state would hold up the whole suite. */
	while ((r = waitpid(pid, &status, WNOHANG)) == 0 && now_s() - t0 < 15)
		usleep(5 * 1000);
	died = now_s() - t0;
	ASSERT_EQ(pid, r);
	c->child = 0;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 6)
		SKIP(return, "no blk-mq debugfs (CONFIG_BLK_DEBUG_FS) to see the FLUSH");
	ASSERT_FALSE(WIFEXITED(status))
		TH_LOG("the VMM failed to set up (%d)", WEXITSTATUS(status));
	ASSERT_TRUE(returned) TH_LOG("VHOST_SET_VRING_CALL waited for the request");
	TH_LOG("SET_VRING_CALL with the request in flight took %.3f s", took);
	EXPECT_GT(1.0, took);
	TH_LOG("the killed VMM died in %.3f s", died);
	EXPECT_GT(1.0, died);
	/* The request completes at the device; the release then ends. */
	ASSERT_EQ(0, slow_wait_inflight_for(c, false, 10000));
}

TEST_F_TIMEOUT(hard, stalled_flush_leaves_the_vmm_killable, 60)
{
	stalled_request_leaves_the_vmm_killable(_metadata, &self->c, VIRTIO_BLK_T_FLUSH);
}

TEST_F_TIMEOUT(hard, stalled_page_cache_read_leaves_the_vmm_killable, 60)
{
	stalled_request_leaves_the_vmm_killable(_metadata, &self->c, VIRTIO_BLK_T_IN);
}

/*
 * Wait up to 10 s for this process's vhost workers to exit, that is for a
 * closed device's teardown to end: the workers left (0 when done).
 */
static int workers_gone_within_10s(void)
{
	int i;

	for (i = 0; i < 2000 && vmm_owner_workers(getpid(), NULL, NULL, 16); i++)
		usleep(5 * 1000);
	return vmm_owner_workers(getpid(), NULL, NULL, 16);
}

/*
 * 4b. Once close() has returned, the device writes nothing more into the
 * VMM, whose memory may already hold something else (the fuzzer's next
 * device had its rings there, and got a used element of this one).  A FLUSH
 * takes 2 s at the device; the fd is closed meanwhile: close() returns
 * after the release's short wait, leaving the FLUSH to a work item.  The
 * VMM then zeroes the used ring and puts 0xff in the status byte, as a
 * reuse would.  Once the device is gone (its worker thread has exited,
 * after the FLUSH completed), neither has changed.
 */
TEST_F_TIMEOUT(hard, nothing_written_after_close, 60)
{
	struct ctx *c = &self->c;
	struct virtio_blk_outhdr *hdr;
	struct vring_used *used;
	uint8_t *status;
	double t0, took;
	int r;

	c->slow_nsec = "2000000000";
	c->slow_cache = true;
	r = slow_nullb_create(c);
	if (r)
		SKIP(return, "no configfs null_blk: %s", strerror(-r));
	ASSERT_EQ(0, blk_open(c, 1, 64, V1, 4 << 20));
	ASSERT_EQ(0, vmm_blk_set_backend(&c->b, c->be));
	hdr = vmm_alloc(&c->b.vmm, 64, 64);
	status = vmm_alloc(&c->b.vmm, 64, 64);
	ASSERT_NE(NULL, status);
	ASSERT_LE(0, post_req(&c->b.vq[0], hdr, VIRTIO_BLK_T_FLUSH, 0, NULL, 0, status));
	vmm_vq_kick(&c->b.vq[0]);
	r = slow_wait_flush(c);
	if (r == -ENOENT)
		SKIP(return, "no blk-mq debugfs (CONFIG_BLK_DEBUG_FS) to see the FLUSH");
	ASSERT_EQ(0, r);
	used = c->b.vq[0].vr.used;
	ASSERT_EQ(0, used->idx);

	t0 = now_s();
	close(c->b.fd);
	c->b.fd = -1;
	took = now_s() - t0;
	TH_LOG("close() with the FLUSH at the device took %.3f s", took);
	/* Still at the device, or this tests nothing. */
	ASSERT_EQ(0, slow_wait_flush(c));
	memset(used, 0, sizeof(*used) + 64 * sizeof(used->ring[0]));
	*status = 0xff;

	ASSERT_EQ(0, workers_gone_within_10s())
		TH_LOG("the device was not torn down 10 s after close()");
	EXPECT_EQ(0, used->idx) TH_LOG("the device wrote the used ring after close()");
	EXPECT_EQ(0, used->ring[0].id | used->ring[0].len);
	EXPECT_EQ(0xff, *status) TH_LOG("the device wrote a status byte after close()");
}

/*
 * 4c. Nor does what the device has not begun reach the disk, which the VMM
 * may have handed to another device (the fuzzer's next device had written
 * a sector that a DISCARD of the closed one then zeroed).  A FLUSH takes
 * 2 s at the device, a DISCARD of written data waits behind it in the
 * ring's work item (both taken in one kick, so the worker holds the ring
 * until it has both); the fd is closed meanwhile.  Once the device is gone
 * (its worker thread has exited, so nothing of it is left to run), the
 * data is still there.
 */
TEST_F_TIMEOUT(hard, nothing_begun_after_close, 60)
{
	const uint64_t sector = 64;
	struct ctx *c = &self->c;
	struct virtio_blk_outhdr *hdr;
	unsigned char *buf, *back;
	uint8_t *status;
	int r;

	c->slow_nsec = "2000000000";
	c->slow_cache = true;
	r = slow_nullb_create(c);
	if (r)
		SKIP(return, "no configfs null_blk: %s", strerror(-r));
	ASSERT_EQ(0, blk_open(c, 1, 64, V1, 4 << 20));
	ASSERT_EQ(0, vmm_blk_set_backend(&c->b, c->be));
	hdr = vmm_alloc(&c->b.vmm, 64, 64);
	status = vmm_alloc(&c->b.vmm, 64, 64);
	buf = vmm_alloc(&c->b.vmm, 4096, 4096);
	ASSERT_NE(NULL, buf);
	fill(buf, 4096, sector, 43);
	ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&c->b, 0, VIRTIO_BLK_T_OUT, sector, buf, 4096));

	ASSERT_LE(0, post_req(&c->b.vq[0], hdr, VIRTIO_BLK_T_FLUSH, 0, NULL, 0, status));
	ASSERT_LE(0, vmm_blk_post_dwz(&c->b, 0, VIRTIO_BLK_T_DISCARD, sector, 8, 0, NULL));
	vmm_vq_kick(&c->b.vq[0]);
	r = slow_wait_flush(c);
	if (r == -ENOENT)
		SKIP(return, "no blk-mq debugfs (CONFIG_BLK_DEBUG_FS) to see the FLUSH");
	ASSERT_EQ(0, r);
	close(c->b.fd);
	c->b.fd = -1;
	/* Still at the device, or the release waited for both: nothing tested. */
	ASSERT_EQ(0, slow_wait_flush(c));

	ASSERT_EQ(0, workers_gone_within_10s())
		TH_LOG("the device was not torn down 10 s after close()");
	back = aligned_alloc(4096, 4096);
	ASSERT_NE(NULL, back);
	ASSERT_EQ(4096, pread(c->be, back, 4096, sector * 512));
	EXPECT_EQ(0, memcmp(buf, back, 4096))
		TH_LOG("the DISCARD queued behind the FLUSH ran after close()%s",
		       is_zero(back, 4096) ? ": the data is zeroes" : "");
	free(back);
}

/*
 * 11. A request of more than 4 GiB: a WRITE of three 1.5 GiB descriptors
 * (one guest buffer, never touched, so only the zero page backs it; a
 * second memory region of the table) to an 8 GiB configfs null_blk that
 * keeps no data.  It completes, all of it: no length is cut to 32 bits on
 * the way.
 */
TEST_F_TIMEOUT(hard, request_over_4_gib, 120)
{
	const size_t big_len = 3ULL << 29;	/* 1.5 GiB */
	struct ctx *c = &self->c;
	struct vhost_memory *mem;
	struct vmm_seg data[3];
	struct virtio_blk_outhdr *hdr;
	uint8_t *status;
	char *big;
	int r, i, st;

	c->slow_big = true;
	c->slow_nsec = "0";
	r = slow_nullb_create(c);
	if (r)
		SKIP(return, "no configfs null_blk: %s", strerror(-r));
	ASSERT_EQ(0, blk_open(c, 1, 64, V1, 1 << 20));
	/*
	 * Above the first region, so that its guest address stays simple:
	 * the highest free spot of 64, 32 ... 2 GiB past it.  ASLR puts the
	 * first region up to 1 TiB below the stack; a plain hint at 64 GiB
	 * past it landed below it once in a CI run.
	 */
	big = MAP_FAILED;
	for (i = 36; i >= 31 && big == MAP_FAILED; i--)
		big = mmap((char *)c->b.vmm.mem + (1ULL << i), big_len,
			   PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE,
			   -1, 0);
	if (big == MAP_FAILED)
		SKIP(return, "no 1.5 GiB free within 64 GiB above guest memory (ASLR)");
	ASSERT_LT((char *)c->b.vmm.mem, big);
	mem = calloc(1, sizeof(*mem) + 2 * sizeof(mem->regions[0]));
	ASSERT_NE(NULL, mem);
	mem->nregions = 2;
	mem->regions[0].guest_phys_addr = c->b.vmm.gpa_base;
	mem->regions[0].memory_size = c->b.vmm.size;
	mem->regions[0].userspace_addr = (uintptr_t)c->b.vmm.mem;
	mem->regions[1].guest_phys_addr = vmm_gpa(&c->b.vmm, big);
	mem->regions[1].memory_size = big_len;
	mem->regions[1].userspace_addr = (uintptr_t)big;
	ASSERT_EQ(0, ioctl(c->b.fd, VHOST_SET_MEM_TABLE, mem)) TH_LOG("%s", strerror(errno));
	free(mem);
	ASSERT_EQ(0, vmm_blk_set_backend(&c->b, c->be));
	hdr = vmm_alloc(&c->b.vmm, sizeof(*hdr), 16);
	status = vmm_alloc(&c->b.vmm, 1, 1);
	ASSERT_NE(NULL, status);
	for (i = 0; i < 3; i++)
		data[i] = (struct vmm_seg){ big, big_len, false };
	ASSERT_LE(0, post_req(&c->b.vq[0], hdr, VIRTIO_BLK_T_OUT, 8, data, 3, status));
	st = run_req(&c->b.vq[0], status, 100000);
	EXPECT_EQ(VIRTIO_BLK_S_OK, st) TH_LOG("a 4.5 GiB WRITE: status %d", st);
	/* A 4.5 GiB READ would need as much memory: past the end, it fails. */
	for (i = 0; i < 3; i++)
		data[i].write = true;
	ASSERT_LE(0, post_req(&c->b.vq[0], hdr, VIRTIO_BLK_T_IN, (8ULL << 21) - 8, data, 3,
			      status));
	EXPECT_EQ(VIRTIO_BLK_S_IOERR, run_req(&c->b.vq[0], status, 10000));
	munmap(big, big_len);
}

/* Voluntary context switches of the calling thread so far. */
static long thread_nvcsw(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_THREAD, &ru))
		return -1;
	return ru.ru_nvcsw;
}

/*
 * SET_BACKEND on @b (its rings armed): the calling thread's voluntary
 * context switches during the call, and its time in *@secs.
 */
static long blocking_start(struct vmm_blk *b, int back, double *secs)
{
	struct timespec t0, t1;
	long before, n;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	before = thread_nvcsw();
	if (vmm_blk_set_backend(b, back))
		return -1;
	n = thread_nvcsw() - before;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	*secs = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
	return n;
}

/* The calling thread's voluntary context switches making @n workers on @fd. */
static long blocking_new_workers(int fd, int n)
{
	long before = thread_nvcsw();
	int i;

	for (i = 0; i < n; i++) {
		struct vhost_worker_state w = {};

		if (ioctl(fd, VHOST_NEW_WORKER, &w))
			return -1;
	}
	return thread_nvcsw() - before;
}

/*
 * 5. A 16-queue device starts with one grace period.  SET_BACKEND with 16
 * armed rings moves rings to new workers while they are serving, which
 * needs a grace period and a flush of the worker they leave: once for all
 * of them (once per round of vhost_blk_apply_worker_policy()), not once
 * per ring.  Each wait for a grace period or a flush blocks the caller at
 * least once, so the test counts the caller's voluntary context switches
 * during SET_BACKEND, less those of making its workers, measured the same
 * way (VHOST_NEW_WORKER on another device, which waits for no grace
 * period).
 *
 * worker_pool=0 (a worker per ring, 15 made): the count is exact where
 * making a worker does not block (mainline's vhost_task); a kthread worker
 * (6.1) blocks its maker a varying number of times, so there the check is
 * worker_pool=2's alone: one worker made, 8 rings moved to it in two
 * rounds (its first ring makes it), two grace periods.
 */
TEST_F_TIMEOUT(hard, sixteen_rings_start_with_one_grace_period, 60)
{
	struct ctx *c = &self->c;
	long make, start;
	struct vmm_blk cal;
	double secs;
	int back, n;

	if (read_str(WORKER_POOL, c->worker_pool, sizeof(c->worker_pool)))
		SKIP(return, "%s missing", WORKER_POOL);
	back = memfd_create("vmq-backing", MFD_CLOEXEC);
	ASSERT_LE(0, back);
	ASSERT_EQ(0, ftruncate(back, 1 << 20));

	/* worker_pool=0 */
	ASSERT_EQ(0, write_str(WORKER_POOL, "0"));
	ASSERT_EQ(0, blk_open(c, 16, 64, V1, 8 << 20));
	start = blocking_start(&c->b, back, &secs);
	ASSERT_LE(0, start);
	n = vmm_owner_workers(getpid(), NULL, NULL, 32);
	EXPECT_EQ(16, n) TH_LOG("want a worker per ring, saw %d", n);
	vmm_blk_close(&c->b);
	c->blk_open = false;
	ASSERT_EQ(0, vmm_blk_open(&cal, 1, 64, V1, 1 << 20));
	make = blocking_new_workers(cal.fd, 15);
	vmm_blk_close(&cal);
	ASSERT_LE(0, make);
	TH_LOG("worker_pool=0: SET_BACKEND %ld waits in %.3f s; 15 workers made: %ld",
	       start, secs, make);
	if (!make)
		EXPECT_GE(4, start)
			TH_LOG("%ld waits: a grace period per ring", start);

	/* worker_pool=2 */
	ASSERT_EQ(0, write_str(WORKER_POOL, "2"));
	ASSERT_EQ(0, blk_open(c, 16, 64, V1, 8 << 20));
	start = blocking_start(&c->b, back, &secs);
	ASSERT_LE(0, start);
	ASSERT_EQ(0, vmm_blk_open(&cal, 1, 64, V1, 1 << 20));
	make = blocking_new_workers(cal.fd, 1);
	vmm_blk_close(&cal);
	ASSERT_LE(0, make);
	close(back);
	TH_LOG("worker_pool=2: SET_BACKEND %ld waits in %.3f s; 1 worker made: %ld",
	       start, secs, make);
	/* 4 waits, or 16 or more when every ring moved waits for itself. */
	EXPECT_GE(7, start - make)
		TH_LOG("%ld waits beyond making a worker: a grace period per ring",
		       start - make);
}

TEST_HARNESS_MAIN
