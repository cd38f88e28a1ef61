// SPDX-License-Identifier: GPL-2.0
/*
 * vhost-blk teardown races, looped: close() of the device, VHOST_RESET_OWNER,
 * VHOST_BLK_SET_BACKEND swaps (to another fd and to -1) and worker rebinding
 * (VHOST_SET_VRING_WORKER, VHOST_NEW_WORKER + VHOST_ATTACH_VRING_WORKER,
 * VHOST_FREE_WORKER of the old worker), each racing a stream of O_DIRECT
 * writes that a second thread keeps in flight on every ring.
 *
 * Two backends: a file on ext4 (on a loop device; direct write completions
 * run from a workqueue) and /dev/nullb0 (completions from interrupts).
 *
 * After every iteration:
 *   - the ioctls returned what they must, and (every few iterations) the
 *     device's worker threads are exactly the ones its ring bindings need,
 *     none after close or reset;
 *   - every write vhost returned with VIRTIO_BLK_S_OK is in the store, read
 *     back through a separate O_DIRECT fd; any other status is IOERR;
 *   - a request vhost did not return (posted after its ring stopped) left
 *     the store untouched, and nothing reaches the used ring after the
 *     stopping call returned;
 *   - across backend swaps and worker rebinding no request is lost.
 *
 * Each test runs for RACE_SECONDS (default 15) seconds: the first half with
 * a fixed seed for its random delays (the same sequence every run), the
 * second with a new one; each test logs both.  RACE_SEED sets both (a
 * replay).  A test that hardly ran (fewer iterations than half its
 * seconds) fails: it tested nothing.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <linux/loop.h>

#include "../kselftest_harness.h"
#include "vhost_test.h"
#include "vhost_vmm.h"
#include "vhost_blk_lib.h"

#define NULLB		"/dev/nullb0"
#define EXT4_IMG	"/tmp/vhost-race.img"
#define EXT4_DIR	"/tmp/vhost-race-ext4"
#define EXT4_FILE	EXT4_DIR "/disk.img"
#define EXT4_IMG_SIZE	(64ULL << 20)
#define EXT4_FILE_SIZE	(16 << 20)

#define NQ		4		/* rings the stream uses */
#define LANES		8		/* writes in flight per ring */
#define QSIZE		32
#define BLOCK		4096
#define NBLOCKS		(NQ * LANES)
#define MEM_SIZE	(1024 * 1024)

#define DEFAULT_SECONDS	15
#define FIXED_SEED	0x76686f7374726163ULL	/* the first half's */
#define MAX_SECONDS	240
#define TEST_TIMEOUT	(MAX_SECONDS + 60)
/* How long a request may take once its ring runs. */
#define REAP_MS		10000
#define PATTERN_MAGIC	0x76726163	/* "vrac" */
/* Counting threads scans /proc, slow under TCG: every few iterations. */
#define COUNT_EVERY	4

static const uint64_t features = 1ULL << VIRTIO_F_VERSION_1;

/* One block of the store, written by one ring, one write at a time. */
struct lane {
	void *buf;		/* guest buffer of the write in flight */
	uint32_t ok_gen;	/* last generation returned OK; 0: zeroes */
	uint32_t post_gen;	/* generation in flight, 0 if none */
	bool unknown;		/* an IOERR write left the block undefined */
};

/* The writer thread's view; main reads it only while the thread is off. */
struct stream {
	struct vmm_blk *b;
	struct lane lane[NQ][LANES];
	uint32_t next_gen;
	int stop;		/* atomic: main asks the thread to stop */
	int started;		/* atomic: the first writes are posted */
	unsigned long posted, ok, ioerr, unreturned;
	unsigned long bad_status, bad_len, bogus, post_fail;
	char err[160];		/* the first anomaly, for the log */
};

FIXTURE(race) {
	struct vmm_blk b;
	bool open;
	const char *path;
	int backing;		/* what vhost-blk serves, O_DIRECT */
	int check;		/* the same store, O_DIRECT, for reading back */
	int img;
	char loop[32];
	bool mounted;
	void *rbuf, *want;
	void *probe;		/* guest buffer of qd1_probe() */
	struct stream st;
	pthread_t thread;
	bool running;
	uint64_t rng;
	uint64_t seed2;			/* the second half's seed */
	struct timespec half;		/* when the second half starts */
	bool reseeded;
	unsigned int seconds, iterations;
	struct timespec deadline;
};

FIXTURE_VARIANT(race) {
	bool ext4;
};

FIXTURE_VARIANT_ADD(race, ext4_file) { .ext4 = true };
FIXTURE_VARIANT_ADD(race, nullb) { .ext4 = false };

static uint64_t rnd(uint64_t *s)
{
	/* xorshift64* */
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545F4914F6CDD1DULL;
}

/* Mostly short random pauses, sometimes none at all. */
static void rnd_delay(uint64_t *s, unsigned int max_us)
{
	uint64_t r = rnd(s);

	if (r % 4 == 0)
		return;
	usleep((r >> 8) % (max_us + 1));
}

static void fill_block(void *buf, unsigned int block, uint32_t gen)
{
	uint32_t *p = buf;
	unsigned int i;

	if (!gen) {
		memset(buf, 0, BLOCK);
		return;
	}
	p[0] = PATTERN_MAGIC;
	p[1] = block;
	p[2] = gen;
	for (i = 3; i < BLOCK / 4; i++)
		p[i] = (gen * 2654435761U) ^ (block << 20) ^ i;
}

static unsigned int lane_block(unsigned int q, unsigned int l)
{
	return q * LANES + l;
}

static void *lane_token(unsigned int q, unsigned int l)
{
	return (void *)(uintptr_t)(lane_block(q, l) + 1);
}

static void note(struct stream *st, const char *fmt, ...)
{
	va_list ap;

	if (st->err[0])
		return;
	va_start(ap, fmt);
	vsnprintf(st->err, sizeof(st->err), fmt, ap);
	va_end(ap);
}

/* Account one request vhost returned on ring @q. */
static void complete(struct stream *st, unsigned int q, void *token,
		     unsigned int status, uint32_t len)
{
	uintptr_t t = (uintptr_t)token;
	struct lane *ln;

	if (!t || t > NBLOCKS || (t - 1) / LANES != q) {
		st->bogus++;
		note(st, "ring %u returned a foreign token %lu", q, (unsigned long)t);
		return;
	}
	ln = &st->lane[q][(t - 1) % LANES];
	if (!ln->post_gen) {
		st->bogus++;
		note(st, "ring %u returned block %lu twice", q, (unsigned long)t - 1);
		return;
	}
	if (status == VIRTIO_BLK_S_OK) {
		st->ok++;
		ln->ok_gen = ln->post_gen;
		ln->unknown = false;
		if (len != 1) {
			st->bad_len++;
			note(st, "ring %u: OK write with used length %u", q, len);
		}
	} else if (status == VIRTIO_BLK_S_IOERR) {
		st->ioerr++;
		ln->unknown = true;
	} else {
		st->bad_status++;
		ln->unknown = true;
		note(st, "ring %u: write completed with status %#x", q, status);
	}
	ln->post_gen = 0;
}

/* Harvest one used element of ring @q; false when there is none. */
static bool reap_one(struct stream *st, unsigned int q, int timeout_ms)
{
	struct vmm_blk *b = st->b;
	struct vmm_blk_slot *s;
	uint32_t len = 0;
	int head;

	head = vmm_vq_get_used(&b->vq[q], &len, (void **)&s, timeout_ms);
	if (head == -1)
		return false;
	if (head < 0) {
		st->bogus++;
		note(st, "ring %u returned a head that was never posted", q);
		return true;
	}
	b->free[q][b->nfree[q]++] = s;
	complete(st, q, s->token, s->status, len);
	return true;
}

/* Post a write on every idle lane, then kick the rings that got one. */
static void post_all(struct stream *st)
{
	unsigned int q, l;

	for (q = 0; q < NQ; q++) {
		bool kick = false;

		for (l = 0; l < LANES; l++) {
			struct lane *ln = &st->lane[q][l];
			unsigned int blk = lane_block(q, l);
			uint32_t gen;

			if (ln->post_gen)
				continue;
			gen = ++st->next_gen;
			if (!gen)
				gen = ++st->next_gen;
			fill_block(ln->buf, blk, gen);
			/* Every other lane posts an indirect chain. */
			if (vmm_blk_post(st->b, q, VIRTIO_BLK_T_OUT,
					 (uint64_t)blk * (BLOCK / 512), ln->buf,
					 BLOCK, 1, l & 1, lane_token(q, l)) < 0) {
				st->post_fail++;
				note(st, "ring %u full with %u lanes", q, LANES);
				continue;
			}
			ln->post_gen = gen;
			st->posted++;
			kick = true;
		}
		if (kick)
			vmm_vq_kick(&st->b->vq[q]);
	}
}

/* Keep every lane busy until told to stop. */
static void *writer(void *arg)
{
	struct stream *st = arg;
	struct pollfd p[NQ];
	unsigned int q;
	uint64_t v;

	for (q = 0; q < NQ; q++)
		p[q] = (struct pollfd){ .fd = st->b->vq[q].call, .events = POLLIN };
	while (!__atomic_load_n(&st->stop, __ATOMIC_ACQUIRE)) {
		post_all(st);
		__atomic_store_n(&st->started, 1, __ATOMIC_RELEASE);
		/* Clear the call eventfds before harvesting, not after. */
		if (poll(p, NQ, 2) > 0)
			for (q = 0; q < NQ; q++)
				if ((p[q].revents & POLLIN) &&
				    read(p[q].fd, &v, sizeof(v)) < 0)
					v = 0;	/* harvested below anyway */
		for (q = 0; q < NQ; q++)
			while (reap_one(st, q, 0))
				;
	}
	return NULL;
}

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

static bool time_left(FIXTURE_DATA(race) * self)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	if (!self->reseeded && now.tv_sec >= self->half.tv_sec) {
		self->rng = self->seed2;
		self->reseeded = true;
	}
	return now.tv_sec < self->deadline.tv_sec ||
	       (now.tv_sec == self->deadline.tv_sec &&
		now.tv_nsec < self->deadline.tv_nsec);
}

FIXTURE_SETUP(race)
{
	const char *env, *why;
	uint64_t seed;
	unsigned int i;

	self->backing = -1;
	self->check = -1;
	self->img = -1;
	self->b.fd = -1;
	why = vhost_unusable("/dev/vhost-blk", "CONFIG_VHOST_BLK");
	if (why)
		SKIP(return, "%s", why);
	if (geteuid())
		SKIP(return, "needs root (block devices, loop, mount)");
	self->path = NULLB;
	/* Every block is checked against what was last written to it. */
	why = variant->ext4 ? NULL : vhost_nullb_unusable(true, false);
	if (why)
		SKIP(return, "%s", why);
	if (variant->ext4) {
		char cmd[128];
		int fd;

		/* Leftovers of an aborted run. */
		umount2(EXT4_DIR, MNT_DETACH);
		self->img = open(EXT4_IMG, O_RDWR | O_CREAT | O_TRUNC, 0600);
		ASSERT_LE(0, self->img);
		ASSERT_EQ(0, ftruncate(self->img, EXT4_IMG_SIZE));
		if (make_loop(self->img, self->loop, sizeof(self->loop)))
			SKIP(return, "no loop device (CONFIG_BLK_DEV_LOOP)");
		snprintf(cmd, sizeof(cmd), "mkfs.ext4 -q -F %s >/dev/null 2>&1",
			 self->loop);
		if (system(cmd))
			SKIP(return, "mkfs.ext4 failed (e2fsprogs missing?)");
		mkdir(EXT4_DIR, 0755);
		if (mount(self->loop, EXT4_DIR, "ext4", 0, NULL))
			SKIP(return, "cannot mount ext4 (CONFIG_EXT4_FS): %s",
			     strerror(errno));
		self->mounted = true;
		/* Sparse: the first write to each block allocates it. */
		fd = open(EXT4_FILE, O_RDWR | O_CREAT | O_TRUNC, 0600);
		ASSERT_LE(0, fd);
		ASSERT_EQ(0, ftruncate(fd, EXT4_FILE_SIZE));
		close(fd);
		self->path = EXT4_FILE;
	}
	self->backing = open(self->path, O_RDWR | O_DIRECT);
	ASSERT_LE(0, self->backing) TH_LOG("open %s: %s", self->path, strerror(errno));
	self->check = open(self->path, O_RDWR | O_DIRECT);
	ASSERT_LE(0, self->check);
	ASSERT_LE(NBLOCKS * BLOCK, lseek(self->check, 0, SEEK_END));
	ASSERT_EQ(0, posix_memalign(&self->rbuf, BLOCK, BLOCK));
	ASSERT_EQ(0, posix_memalign(&self->want, BLOCK, BLOCK));
	/* Every block starts as zeroes (generation 0). */
	if (!variant->ext4) {
		memset(self->rbuf, 0, BLOCK);
		for (i = 0; i < NBLOCKS; i++)
			ASSERT_EQ(BLOCK, pwrite(self->check, self->rbuf, BLOCK,
						(off_t)i * BLOCK));
	}

	env = getenv("RACE_SECONDS");
	self->seconds = env ? strtoul(env, NULL, 0) : DEFAULT_SECONDS;
	if (!self->seconds)
		self->seconds = 1;
	if (self->seconds > MAX_SECONDS)
		self->seconds = MAX_SECONDS;
	env = getenv("RACE_SEED");
	seed = env ? strtoull(env, NULL, 0) : FIXED_SEED;
	self->seed2 = env ? seed : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
	if (!seed)
		seed = 1;
	if (!self->seed2)
		self->seed2 = 1;
	self->rng = seed;
	TH_LOG("%s, %u s: RACE_SEED=%llu, then RACE_SEED=%llu", self->path,
	       self->seconds, (unsigned long long)seed,
	       (unsigned long long)self->seed2);
	clock_gettime(CLOCK_MONOTONIC, &self->deadline);
	self->half = self->deadline;
	self->half.tv_sec += self->seconds / 2;
	self->deadline.tv_sec += self->seconds;
}

static void stream_stop(FIXTURE_DATA(race) * self)
{
	if (!self->running)
		return;
	__atomic_store_n(&self->st.stop, 1, __ATOMIC_RELEASE);
	pthread_join(self->thread, NULL);
	self->running = false;
}

FIXTURE_TEARDOWN(race)
{
	stream_stop(self);
	if (self->open)
		vmm_blk_close(&self->b);
	if (self->backing >= 0)
		close(self->backing);
	if (self->check >= 0)
		close(self->check);
	free(self->rbuf);
	free(self->want);
	if (self->mounted) {
		unlink(EXT4_FILE);
		umount(EXT4_DIR);
	}
	if (self->loop[0])
		drop_loop(self->loop);
	if (self->img >= 0) {
		close(self->img);
		unlink(EXT4_IMG);
	}
}

/* Open and set up a device with every lane idle and a buffer each. */
static int dev_open(FIXTURE_DATA(race) * self)
{
	unsigned int q, l;
	int r;

	r = vmm_blk_open(&self->b, NQ, QSIZE, features, MEM_SIZE);
	self->open = true;
	if (r)
		return r;
	r = vmm_blk_set_backend(&self->b, self->backing);
	if (r)
		return r;
	self->st.b = &self->b;
	self->probe = vmm_alloc(&self->b.vmm, BLOCK, BLOCK);
	if (!self->probe)
		return -ENOMEM;
	memset(self->probe, 0x3c, BLOCK);
	for (q = 0; q < NQ; q++)
		for (l = 0; l < LANES; l++) {
			self->st.lane[q][l].buf = vmm_alloc(&self->b.vmm, BLOCK, BLOCK);
			if (!self->st.lane[q][l].buf)
				return -ENOMEM;
			self->st.lane[q][l].post_gen = 0;
		}
	return 0;
}

/* Start the writer and wait until its first writes are posted. */
static int stream_start(FIXTURE_DATA(race) * self)
{
	int i;

	self->st.stop = 0;
	self->st.started = 0;
	if (pthread_create(&self->thread, NULL, writer, &self->st))
		return -1;
	self->running = true;
	for (i = 0; i < 5000 && !__atomic_load_n(&self->st.started, __ATOMIC_ACQUIRE); i++)
		usleep(1000);
	return 0;
}

static unsigned int in_flight(FIXTURE_DATA(race) * self)
{
	unsigned int q, n = 0;

	for (q = 0; q < NQ; q++)
		n += vmm_vq_in_flight(&self->b.vq[q]);
	return n;
}

/*
 * Stop the writer and harvest.  With @all every request must come back;
 * otherwise the rings were stopped: take what is there, and check that
 * nothing more arrives.  Returns the requests left unreturned.
 */
static unsigned int stream_end(FIXTURE_DATA(race) * self, bool all)
{
	uint16_t used[NQ];
	unsigned int q, n = 0;

	stream_stop(self);
	for (q = 0; q < NQ; q++) {
		while (vmm_vq_in_flight(&self->b.vq[q]) &&
		       reap_one(&self->st, q, all ? REAP_MS : 0))
			;
		used[q] = __atomic_load_n(&self->b.vq[q].vr.used->idx, __ATOMIC_ACQUIRE);
		n += vmm_vq_in_flight(&self->b.vq[q]);
	}
	if (!all && n) {
		usleep(20 * 1000);
		for (q = 0; q < NQ; q++)
			if (used[q] != __atomic_load_n(&self->b.vq[q].vr.used->idx,
						       __ATOMIC_ACQUIRE)) {
				self->st.bogus++;
				note(&self->st, "ring %u: used ring moved after it was stopped",
				     q);
			}
	}
	self->st.unreturned += n;
	return n;
}

/* No anomaly so far; every block holds its last acknowledged write. */
static void check_store(struct __test_metadata *_metadata,
			FIXTURE_DATA(race) * self, const char *what)
{
	struct stream *st = &self->st;
	unsigned int q, l;

	ASSERT_EQ(0, st->bad_status + st->bad_len + st->bogus + st->post_fail)
		TH_LOG("%s, iteration %u: %s", what, self->iterations, st->err);
	for (q = 0; q < NQ; q++)
		for (l = 0; l < LANES; l++) {
			struct lane *ln = &st->lane[q][l];
			unsigned int blk = lane_block(q, l);
			const uint32_t *got = self->rbuf;

			if (ln->unknown)
				continue;
			ASSERT_EQ(BLOCK, pread(self->check, self->rbuf, BLOCK,
					       (off_t)blk * BLOCK));
			fill_block(self->want, blk, ln->ok_gen);
			ASSERT_EQ(0, memcmp(self->want, self->rbuf, BLOCK))
				TH_LOG("%s #%u: block %u not gen %u%s: has %#x block %u gen %u",
				       what, self->iterations, blk, ln->ok_gen,
				       ln->post_gen ? " (a later write was not returned)" : "",
				       got[0], got[1], got[2]);
		}
}

/* Wait up to @ms for this process's vhost workers to number @want. */
static int workers_settle_ms(int want, unsigned int ms)
{
	unsigned int i;
	int n = -1;

	for (i = 0; i < ms / 10; i++) {
		n = vmm_owner_workers(getpid(), NULL, NULL, 64);
		if (n == want)
			break;
		usleep(10 * 1000);
	}
	return n;
}

static int workers_settle(int want)
{
	return workers_settle_ms(want, 2000);
}

/*
 * close() returned with writes in flight: they may land until the device
 * is gone, and then hold the write not returned or the one before it.
 * Wait for the device's workers to exit (its last request is done then),
 * and take what each such block holds as its last write.
 */
static void close_settle(struct __test_metadata *_metadata,
			 FIXTURE_DATA(race) * self)
{
	unsigned int q, l;

	if (!in_flight(self))
		return;
	ASSERT_EQ(0, workers_settle_ms(0, 30000))
		TH_LOG("the device's workers outlived close() by 30 s");
	for (q = 0; q < NQ; q++)
		for (l = 0; l < LANES; l++) {
			struct lane *ln = &self->st.lane[q][l];
			unsigned int blk = lane_block(q, l);

			if (!ln->post_gen || ln->unknown)
				continue;
			ASSERT_EQ(BLOCK, pread(self->check, self->rbuf, BLOCK,
					       (off_t)blk * BLOCK));
			fill_block(self->want, blk, ln->post_gen);
			if (!memcmp(self->want, self->rbuf, BLOCK))
				ln->ok_gen = ln->post_gen;
		}
}

/* Distinct workers among the ring bindings @bind. */
static int distinct(const unsigned int *bind, unsigned int n)
{
	unsigned int i, j;
	int d = 0;

	for (i = 0; i < n; i++) {
		for (j = 0; j < i && bind[j] != bind[i]; j++)
			;
		d += j == i;
	}
	return d;
}

/* The workers the device's ring bindings need, from VHOST_GET_VRING_WORKER. */
static int bound_workers(int fd, unsigned int *bind)
{
	unsigned int q;

	for (q = 0; q < VHOST_BLK_MAX_QUEUES; q++) {
		struct vhost_vring_worker w = { .index = q };

		if (ioctl(fd, VHOST_GET_VRING_WORKER, &w))
			return -errno;
		bind[q] = w.worker_id;
	}
	return distinct(bind, VHOST_BLK_MAX_QUEUES);
}

static bool counting(FIXTURE_DATA(race) * self)
{
	return self->iterations % COUNT_EVERY == 0;
}

static void summary(struct __test_metadata *_metadata,
		    FIXTURE_DATA(race) * self)
{
	struct stream *st = &self->st;

	TH_LOG("%u iterations: %lu writes posted, %lu OK, %lu IOERR, %lu not returned",
	       self->iterations, st->posted, st->ok, st->ioerr, st->unreturned);
	EXPECT_LE(self->seconds / 2, self->iterations)
		TH_LOG("%u iterations in %u s: the test hardly ran", self->iterations,
		       self->seconds);
}

/* Forget requests that will never come back: the rings were reset. */
static void lanes_forget(FIXTURE_DATA(race) * self)
{
	unsigned int q, l;

	for (q = 0; q < NQ; q++)
		for (l = 0; l < LANES; l++)
			self->st.lane[q][l].post_gen = 0;
}

TEST_F_TIMEOUT(race, close_fd, TEST_TIMEOUT)
{
	unsigned int bind[VHOST_BLK_MAX_QUEUES];
	int n;

	while (!self->iterations || time_left(self)) {
		int r = dev_open(self);

		ASSERT_EQ(0, r) TH_LOG("device setup: %s", strerror(-r));
		n = bound_workers(self->b.fd, bind);
		ASSERT_LT(0, n);
		if (counting(self))
			ASSERT_EQ(n, workers_settle(n));
		ASSERT_EQ(0, stream_start(self));
		rnd_delay(&self->rng, 20000);
		ASSERT_EQ(0, close(self->b.fd));
		self->b.fd = -1;
		rnd_delay(&self->rng, 1000);
		stream_end(self, false);
		close_settle(_metadata, self);
		check_store(_metadata, self, "close");
		if (counting(self))
			EXPECT_EQ(0, workers_settle(0)) TH_LOG("workers outlived close()");
		vmm_blk_close(&self->b);
		self->open = false;
		lanes_forget(self);
		self->iterations++;
	}
	summary(_metadata, self);
	EXPECT_LT(0, self->st.ok) TH_LOG("no write ever completed");
}

/* Blocks past the lanes' that qd1_probe() writes, one per iteration. */
#define PROBE_BLOCKS	2048

/*
 * One write on ring 0, alone and kicked once, to a block not written
 * before (on ext4 an unwritten extent: its completion runs from a
 * workqueue): its status, or -1 when it did not come back.  A reset that
 * left the ring's completion work queued on the worker it freed made
 * completions come back only with a later kick.
 */
static int qd1_probe(FIXTURE_DATA(race) * self)
{
	uint64_t block = NBLOCKS + self->iterations % PROBE_BLOCKS;

	if (vmm_blk_post(&self->b, 0, VIRTIO_BLK_T_OUT, block * (BLOCK / 512),
			 self->probe, BLOCK, 1, false, NULL) < 0)
		return -1;
	vmm_vq_kick(&self->b.vq[0]);
	return vmm_blk_reap(&self->b, 0, NULL, NULL, REAP_MS);
}

/* Back to a working device after VHOST_RESET_OWNER, on the same fd. */
static int dev_resetup(FIXTURE_DATA(race) * self)
{
	struct vmm_blk *b = &self->b;
	uint64_t f = features, v;
	unsigned int q, i;
	int r;

	if (ioctl(b->fd, VHOST_SET_OWNER, NULL) ||
	    ioctl(b->fd, VHOST_SET_FEATURES, &f))
		return -errno;
	r = vmm_set_mem_table(&b->vmm, b->fd);
	if (r)
		return r;
	for (q = 0; q < NQ; q++) {
		struct vmm_vq *vq = &b->vq[q];

		/* The driver side of the ring starts over too. */
		for (i = 0; i < vq->num; i++) {
			if (vq->chain_len[i])
				b->free[q][b->nfree[q]++] = vq->token[i];
			vq->chain_len[i] = 0;
			vq->token[i] = NULL;
			vq->indirect[i] = NULL;
		}
		memset(vq->vr.desc, 0, vq->num * sizeof(*vq->vr.desc));
		memset(vq->vr.avail, 0, sizeof(*vq->vr.avail) +
		       (vq->num + 1) * sizeof(vq->vr.avail->ring[0]));
		memset(vq->vr.used, 0, sizeof(*vq->vr.used) +
		       vq->num * sizeof(vq->vr.used->ring[0]) + sizeof(uint16_t));
		for (i = 0; i + 1 < vq->num; i++)
			vq->vr.desc[i].next = i + 1;
		vq->free_head = 0;
		vq->num_free = vq->num;
		vq->avail_idx = 0;
		vq->last_used = 0;
		if (read(vq->call, &v, sizeof(v)) < 0 && errno != EAGAIN)
			return -errno;
		r = vmm_vq_setup(vq, b->fd);
		if (r)
			return r;
	}
	return vmm_blk_set_backend(b, self->backing);
}

TEST_F_TIMEOUT(race, reset_owner, TEST_TIMEOUT)
{
	struct vhost_vring_worker w = { .index = 0 };
	unsigned int bind[VHOST_BLK_MAX_QUEUES];
	int r = dev_open(self), n;

	ASSERT_EQ(0, r) TH_LOG("device setup: %s", strerror(-r));
	while (!self->iterations || time_left(self)) {
		n = bound_workers(self->b.fd, bind);
		ASSERT_LT(0, n);
		if (counting(self))
			ASSERT_EQ(n, workers_settle(n));
		ASSERT_EQ(0, stream_start(self));
		rnd_delay(&self->rng, 20000);
		ASSERT_EQ(0, ioctl(self->b.fd, VHOST_RESET_OWNER, NULL))
			TH_LOG("VHOST_RESET_OWNER: %s", strerror(errno));
		rnd_delay(&self->rng, 1000);
		stream_end(self, false);
		check_store(_metadata, self, "reset");
		/* No owner now: no backend, no workers. */
		EXPECT_EQ(-EPERM, vmm_blk_set_backend(&self->b, self->backing));
		EXPECT_EQ(-1, ioctl(self->b.fd, VHOST_GET_VRING_WORKER, &w));
		EXPECT_EQ(EINVAL, errno);
		if (counting(self))
			EXPECT_EQ(0, workers_settle(0)) TH_LOG("workers outlived the reset");
		lanes_forget(self);
		r = dev_resetup(self);
		ASSERT_EQ(0, r) TH_LOG("setup after reset: %s", strerror(-r));
		ASSERT_EQ(VIRTIO_BLK_S_OK, qd1_probe(self))
			TH_LOG("a write alone after reset %u did not come back",
			       self->iterations + 1);
		self->iterations++;
	}
	/* The device still serves: one last full round comes back. */
	ASSERT_EQ(0, stream_start(self));
	usleep(20 * 1000);
	stream_end(self, true);
	EXPECT_EQ(0, in_flight(self));
	check_store(_metadata, self, "after the last reset");
	summary(_metadata, self);
	EXPECT_LT(0, self->st.ok) TH_LOG("no write ever completed");
}

TEST_F_TIMEOUT(race, set_backend_swap, TEST_TIMEOUT)
{
	int r = dev_open(self);
	unsigned int q;

	ASSERT_EQ(0, r) TH_LOG("device setup: %s", strerror(-r));
	while (!self->iterations || time_left(self)) {
		unsigned int mode = rnd(&self->rng) % 3;

		ASSERT_EQ(0, stream_start(self));
		rnd_delay(&self->rng, 20000);
		if (mode != 1) {
			/* Another fd for the same store; the old one goes. */
			int fd = open(self->path, O_RDWR | O_DIRECT);

			ASSERT_LE(0, fd);
			ASSERT_EQ(0, vmm_blk_set_backend(&self->b, fd));
			close(self->backing);
			self->backing = fd;
		}
		if (mode != 0) {
			/* Detached: requests wait in the rings meanwhile. */
			ASSERT_EQ(0, vmm_blk_set_backend(&self->b, -1));
			rnd_delay(&self->rng, 3000);
			/* A detached ring starts again once set up again. */
			for (q = 0; q < self->b.nq; q++)
				ASSERT_EQ(0, vmm_blk_rearm(&self->b, q));
			ASSERT_EQ(0, vmm_blk_set_backend(&self->b, self->backing));
		}
		rnd_delay(&self->rng, 3000);
		ASSERT_EQ(0, stream_end(self, true))
			TH_LOG("iteration %u (mode %u): requests lost", self->iterations, mode);
		check_store(_metadata, self, "swap");
		self->iterations++;
	}
	summary(_metadata, self);
	EXPECT_LT(0, self->st.ok) TH_LOG("no write ever completed");
}

static bool bound(const unsigned int *bind, unsigned int id)
{
	unsigned int i;

	for (i = 0; i < VHOST_BLK_MAX_QUEUES; i++)
		if (bind[i] == id)
			return true;
	return false;
}

TEST_F_TIMEOUT(race, worker_rebind, TEST_TIMEOUT)
{
	unsigned int bind[VHOST_BLK_MAX_QUEUES], q;
	int r = dev_open(self), n;

	ASSERT_EQ(0, r) TH_LOG("device setup: %s", strerror(-r));
	/* Every ring, used or not, is bound to some worker. */
	n = bound_workers(self->b.fd, bind);
	ASSERT_LT(0, n);
	ASSERT_EQ(n, workers_settle(n));
	while (!self->iterations || time_left(self)) {
		unsigned int ops = 1 + rnd(&self->rng) % 3, k;

		ASSERT_EQ(0, stream_start(self));
		for (k = 0; k < ops; k++) {
			struct vhost_vring_worker w;
			struct vhost_worker_state s;
			unsigned int old, kind = rnd(&self->rng) % 3;

			rnd_delay(&self->rng, k ? 3000 : 20000);
			q = rnd(&self->rng) % NQ;
			old = bind[q];
			w.index = q;
			if (kind == 0) {
				w.worker_id = VHOST_VRING_NEW_WORKER;
				ASSERT_EQ(0, ioctl(self->b.fd, VHOST_SET_VRING_WORKER, &w))
					TH_LOG("SET_VRING_WORKER new: %s", strerror(errno));
				ASSERT_NE(VHOST_VRING_NEW_WORKER, w.worker_id);
				ASSERT_FALSE(bound(bind, w.worker_id))
					TH_LOG("new worker %u already in use", w.worker_id);
			} else if (kind == 1) {
				/* Any ring's worker, the unused rings' default one included. */
				unsigned int id = bind[rnd(&self->rng) % (NQ + 1)];

				w.worker_id = id;
				ASSERT_EQ(0, ioctl(self->b.fd, VHOST_SET_VRING_WORKER, &w))
					TH_LOG("SET_VRING_WORKER %u: %s", id, strerror(errno));
				ASSERT_EQ(id, w.worker_id);
			} else {
				s.worker_id = VHOST_VRING_NEW_WORKER;
				ASSERT_EQ(0, ioctl(self->b.fd, VHOST_NEW_WORKER, &s))
					TH_LOG("NEW_WORKER: %s", strerror(errno));
				ASSERT_FALSE(bound(bind, s.worker_id));
				w.worker_id = s.worker_id;
				ASSERT_EQ(0, ioctl(self->b.fd, VHOST_ATTACH_VRING_WORKER, &w))
					TH_LOG("ATTACH_VRING_WORKER %u: %s", w.worker_id,
					       strerror(errno));
			}
			bind[q] = w.worker_id;
			w.worker_id = ~0U;
			ASSERT_EQ(0, ioctl(self->b.fd, VHOST_GET_VRING_WORKER, &w));
			ASSERT_EQ(bind[q], w.worker_id);
			/* The old worker goes if no ring uses it any more. */
			s.worker_id = old;
			if (bound(bind, old)) {
				EXPECT_EQ(-1, ioctl(self->b.fd, VHOST_FREE_WORKER, &s));
				EXPECT_EQ(EBUSY, errno);
			} else {
				ASSERT_EQ(0, ioctl(self->b.fd, VHOST_FREE_WORKER, &s))
					TH_LOG("FREE_WORKER %u: %s", old, strerror(errno));
				EXPECT_EQ(-1, ioctl(self->b.fd, VHOST_FREE_WORKER, &s));
				EXPECT_EQ(ENODEV, errno);
			}
		}
		rnd_delay(&self->rng, 3000);
		ASSERT_EQ(0, stream_end(self, true))
			TH_LOG("iteration %u: requests lost across rebinding", self->iterations);
		check_store(_metadata, self, "rebind");
		n = distinct(bind, VHOST_BLK_MAX_QUEUES);
		if (counting(self))
			ASSERT_EQ(n, workers_settle(n))
				TH_LOG("iteration %u: threads do not match the bindings",
				       self->iterations);
		self->iterations++;
	}
	summary(_metadata, self);
	EXPECT_LT(0, self->st.ok) TH_LOG("no write ever completed");
}

TEST_HARNESS_MAIN
