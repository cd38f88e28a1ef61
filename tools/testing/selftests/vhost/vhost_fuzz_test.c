// SPDX-License-Identifier: GPL-2.0
/*
 * A seeded fuzzer for /dev/vhost-blk and /dev/vhost-net.
 *
 * Each test drives one device for a bounded time with random but well-typed
 * vhost ioctls (owner, features, memory tables, ring setup, workers,
 * backends, serial, dirty log, IOTLB messages) and random descriptor chains:
 * virtio-blk requests of every type, in range and out of it, direct and
 * indirect, malformed on purpose, or network frames.  A model of the
 * device says what each call must return and what each request must
 * complete with.
 *
 * FUZZ_SECONDS (default 120) is the time of the whole binary, split between
 * its tests (two thirds to vhost-blk).  A seed feeds an xorshift64*
 * generator: the same seed replays the same sequence, as far as timing
 * allows.  Each device runs twice, with a fixed seed (the same sequence on
 * every run) and with one from the clock, both printed; FUZZ_SEED sets
 * both.  A run of the default length must reach FZ_MIN_STEPS.  Every
 * failure names the seed and the step and is followed by the last
 * FZ_TLINES events; FUZZ_TRACE=1 prints every event as it happens (on
 * stderr).
 *
 * Invariants:
 * - a chain comes back at most once, and only a chain that was posted does;
 *   on a ring that is fully set up with a backend, every chain posted before
 *   the first one vhost cannot walk comes back within FZ_TIMEOUT_MS of a
 *   kick, and that first one (which stops the ring) signals the ring's error
 *   eventfd;
 * - statuses are legal, and requests get the status
 *   Documentation/virt/vhost-blk.rst promises (where it promises one), with
 *   the used length it implies;
 * - data read back matches a shadow of what the fuzzer wrote (the first
 *   FZ_SHADOW sectors of each store, written only by its well-formed
 *   requests); GET_ID returns the serial; with VHOST_F_LOG_ALL every status
 *   byte and the pages an IN or GET_ID wrote are in the dirty log; frames
 *   cross vhost-net intact and once;
 * - ioctls return 0 or an errno that fits the call (EFAULT only for bad
 *   pointers and the calls that use it for rejected tables or logs);
 * - the kernel log stays clean (checked every FZ_KMSG_EVERY steps and at
 *   the end).
 *
 * A request that gets a status it should not is sent again on its ring and
 * on a fresh device, and once more from userspace on the backing file: the
 * failure message says which of them fail too.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <net/if.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <linux/fs.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <linux/if_tun.h>
#include <linux/types.h>
#include <linux/vhost.h>
#include <linux/virtio_blk.h>
#include <linux/virtio_config.h>
#include <linux/virtio_net.h>
#include <linux/virtio_ring.h>

#include "../kselftest_harness.h"
#include "vhost_test.h"
#include "vhost_vmm.h"
#include "vhost_net_lib.h"

#define FZ_TEST_TIMEOUT	900		/* harness timeout of each test, s */
#define FZ_DEF_SECONDS	120		/* FUZZ_SECONDS default, whole binary */
#define FZ_TIMEOUT_MS	10000		/* a healthy ring returns chains by then */
#define FZ_KMSG_EVERY	512		/* steps between kernel log checks */
/* Steps a run of FZ_DEF_SECONDS must reach (about 10000 under TCG). */
#define FZ_MIN_STEPS	1000

#define FZ_NDRV		4		/* rings the driver posts on */
#define FZ_MAXQ		256		/* largest ring the driver lays out */
#define FZ_RING_BYTES	(16 << 10)	/* vring_size(FZ_MAXQ, 4096), rounded */
#define FZ_IND		160		/* descriptors in an indirect table */
#define FZ_DATA		16384		/* data bytes each head owns */
#define FZ_SLOT		64		/* header, discard segments, status */
#define FZ_SLOT_DWZ	16
#define FZ_SLOT_STATUS	48
#define FZ_MAXSEG	(FZ_IND - 8)
#define FZ_MEM		(24 << 20)	/* guest RAM */
#define FZ_LOG_BYTES	(64 << 10)	/* dirty log: covers GPAs below 2 GiB */
#define FZ_JUNK		0x100000	/* spare rings' memory */

#define FZ_SHADOW	2048		/* sectors of each store under a shadow */
#define FZ_SPAN		131072		/* sectors random writes may touch */
#define FZ_FILE		"/tmp/vhost-fuzz.img"
#define FZ_FILE_SIZE	(48ULL << 20)
#define FZ_NULLB	"/dev/nullb0"
#define FZ_UNKNOWN	0xffffffffU	/* shadow tag: contents unknown */

#define FZ_MAX_ALIVE	64
#define FZ_WLOG		1024		/* shadow writes remembered */
#define FZ_TLINES	64		/* events printed on failure */
#define FZ_TLEN		160
#define FZ_MAX_MINE	12		/* workers the fuzzer creates itself */

#define BIT_S(s)	(1U << (s))
#define S_OK		BIT_S(VIRTIO_BLK_S_OK)
#define S_IOERR		BIT_S(VIRTIO_BLK_S_IOERR)
#define S_UNSUPP	BIT_S(VIRTIO_BLK_S_UNSUPP)
#define S_ANY		(S_OK | S_IOERR | S_UNSUPP)

/* Features Documentation/virt/vhost-blk.rst says vhost-blk offers. */
#define FZ_BLK_DOC_FEATURES						\
	((1ULL << VIRTIO_F_VERSION_1) | (1ULL << VIRTIO_F_ANY_LAYOUT) |	\
	 (1ULL << VIRTIO_F_NOTIFY_ON_EMPTY) |				\
	 (1ULL << VIRTIO_RING_F_INDIRECT_DESC) |			\
	 (1ULL << VIRTIO_RING_F_EVENT_IDX) |				\
	 (1ULL << VIRTIO_F_ACCESS_PLATFORM) | (1ULL << VHOST_F_LOG_ALL) | \
	 (1ULL << VIRTIO_BLK_F_FLUSH) | (1ULL << VIRTIO_BLK_F_DISCARD) | \
	 (1ULL << VIRTIO_BLK_F_WRITE_ZEROES))

/* vhost-net features that change the header the TX path hands the tap. */
#define FZ_NET_NONSTD							\
	((1ULL << VIRTIO_F_VERSION_1) | (1ULL << VIRTIO_NET_F_MRG_RXBUF) | \
	 (1ULL << VHOST_NET_F_VIRTIO_NET_HDR) |				\
	 (1ULL << VIRTIO_F_ACCESS_PLATFORM))
#define FZ_NET_HDR	((int)sizeof(struct virtio_net_hdr))

enum { FZ_BLK, FZ_NET };
enum { RUN_NO, RUN_YES, RUN_MAYBE };
enum { KICK_NONE, KICK_MINE, KICK_OTHER };
enum { MEM_NULL, MEM_EMPTY, MEM_OK };

/* vhost-blk backends; the first five are stores, the rest bad fds. */
enum {
	BE_NULLB_DIRECT, BE_NULLB, BE_NULLB_RO, BE_FILE, BE_FILE_RO,
	BE_NSTORES,
	BE_DETACH = BE_NSTORES, BE_BADFD, BE_EVENTFD, BE_DIR, BE_CHR,
	BE_WRONLY, BE_FLAGS, BE_RESERVED, BE_NKINDS
};

/* vhost-net backends of one ring. */
enum {
	NB_TAP, NB_PKT, NB_PKT_UNBOUND, NB_DETACH, NB_BADFD, NB_EVENTFD,
	NB_UDP, NB_NKINDS
};

/* How a chain is broken so that vhost cannot walk it. */
enum {
	C_NONE, C_OOB, C_OUT_AFTER_IN, C_BAD_NEXT, C_LOOP, C_IND_LEN,
	C_IND_NESTED, C_IND_OOB, C_IND_LOOP, C_IND_ZERO, C_BAD_HEAD, C_HUGE,
	C_NKINDS
};

struct fz_seg {
	__u64 gpa;
	__u32 len;
	bool write;
};

struct fz_req {
	bool posted;
	bool walkable;		/* else vhost stops the ring on it */
	bool must;		/* comes back when the ring is healthy */
	bool relax;		/* posted without a definite backend */
	bool shadow;		/* counted in the shadow's pending map */
	bool aligned;		/* every data segment 512-aligned */
	bool log;		/* LOG_ALL with our log base at post */
	bool std;		/* net: standard header at post */
	__u8 allowed;		/* statuses the model allows (BIT_S) */
	__u8 store;
	__u16 ndesc;
	__u32 seq, gen, lgen, sgen;
	__u32 type, tag, nsect;
	__u32 in_len, data_len;
	__u64 sector;
	__u8 *status;		/* the byte vhost writes, NULL if none */
	__u8 *data;
	struct fz_seg wsegs[4];	/* first writable segments, for the log */
	unsigned int nwsegs;
	__u32 frame_seq;
	__u16 nseg;		/* the chain, kept in fz_vq.chain */
	bool indirect;
	bool probe;		/* a repeat of a chain that failed */
};

struct fz_vq {
	unsigned int idx;
	unsigned int num;
	struct vring vr;
	void *area;
	__u8 *slots;
	struct vring_desc *ind;
	__u8 *data;
	__u16 avail, used;	/* driver shadows of the ring indexes */
	__u16 owner[FZ_MAXQ];	/* head + 1 holding a descriptor, 0 free */
	unsigned int nfree;
	unsigned int inflight;	/* heads posted, not returned */
	unsigned int phantoms;	/* avail entries naming no head */
	struct fz_req req[FZ_MAXQ];
	struct fz_seg *chain;	/* FZ_IND segments of each head's chain */
	int kick, call, err;	/* our eventfds */
	/* The model of the kernel's side of the ring. */
	bool laid;		/* kernel num, base, addresses are ours */
	bool nb;		/* kernel num and base are */
	int kick_st;
	int run;
	__u32 seq;		/* next chain's */
	__u32 broken;		/* seq of the first unwalkable chain */
	bool err_mine;		/* our error eventfd is the ring's */
	bool err_at_break;	/* it was when the ring stopped */
	bool tainted;		/* net TX: a chain may stall the ring */
	int be;			/* net: backend of this ring, or -1 */
	int worker;		/* worker id it is bound to, -1 unknown */
	bool armed;		/* blk: set up (NUM, BASE, ADDR, KICK) since a detach */
};

struct fz_shadow {
	__u32 tag[FZ_SHADOW];
	__u16 pending[FZ_SHADOW];
};

struct fuzz {
	struct __test_metadata *md;
	int type;
	const char *name;
	__u64 seed, rng;
	unsigned long step;
	struct timespec end;
	int fd;
	unsigned int nvqs;
	bool owner;
	__u64 offered, features;
	bool feat_set;		/* SET_FEATURES since open or reset */
	bool iotlb;
	int mem;
	bool log_valid;		/* every ring logs into f->log */
	bool log_bad;		/* some ring has an inaccessible log base */
	__u32 gen, lgen;
	struct vmm vmm;
	struct fz_vq vq[FZ_NDRV];
	struct fz_vq pq;	/* a ring for replays on a fresh device */
	unsigned int ndrv;
	void *scratch, *junk, *ro;
	__u8 *log;
	int junk_kick, logfd, nullfd, dirfd, udp;
	__u32 alive[FZ_MAX_ALIVE];
	unsigned int nalive, nmine;
	/* vhost-blk */
	int bfd[BE_NSTORES];
	__u64 cap[2];
	int be;
	struct fz_shadow sh[2];
	__u8 serial[VHOST_BLK_SERIAL_LEN], serial_old[VHOST_BLK_SERIAL_LEN];
	__u32 sgen;
	int pool_fd;
	char pool_saved[16];
	/* vhost-net */
	int tap, wire, pkt, pkt_unbound, ifindex;
	char ifname[IFNAMSIZ];
	__u32 tx_seq, rx_seq;
	__u32 txseq[4096];
	__u8 txflag[4096];	/* 1: standard at post, 2: seen on the wire */
	bool probing;
	int probe_st;
	unsigned int mem_pieces;	/* regions of the valid table in use */
	struct fz_wlog {
		__u32 tag, nsect;
		__u64 sector;
		unsigned long step;
		unsigned int ring, head;
		int be;
	} wlog[FZ_WLOG];
	unsigned int nwlog;
	/* kernel log */
	int kmsg;
	bool trace;		/* FUZZ_TRACE: say what each step does */
	char tlog[FZ_TLINES][FZ_TLEN];
	unsigned long ntlog;
	/* statistics */
	unsigned long nreq, nret, nst[3], nbroken, nsettle, nabandon;
	unsigned long nioctl, nbogus_ok, nbogus_err, nrelax, nshadow_chk;
	unsigned long nframes, nlogchk, nmust;
};

static __u64 fz_splitmix(__u64 *x)
{
	__u64 z = (*x += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* xorshift64*: small, fast and the same everywhere. */
static __u64 fz_next(struct fuzz *f)
{
	__u64 x = f->rng;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	f->rng = x;
	return x * 0x2545f4914f6cdd1dULL;
}

static __u32 fz_below(struct fuzz *f, __u32 n)
{
	return n ? (__u32)(((fz_next(f) >> 32) * n) >> 32) : 0;
}

static bool fz_chance(struct fuzz *f, unsigned int pct)
{
	return fz_below(f, 100) < pct;
}

static unsigned int fz_pick(struct fuzz *f, const unsigned int *w,
			    unsigned int n)
{
	unsigned int i, sum = 0, r;

	for (i = 0; i < n; i++)
		sum += w[i];
	r = fz_below(f, sum);
	for (i = 0; i < n; i++) {
		if (r < w[i])
			return i;
		r -= w[i];
	}
	return n - 1;
}

static __u64 fz_now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000ULL + t.tv_nsec / 1000000;
}

static void fz_bail(struct fuzz *f)
{
	fflush(stdout);
	unsigned long i = f->ntlog > FZ_TLINES ? f->ntlog - FZ_TLINES : 0;

	if (!f->trace)
		for (; i < f->ntlog; i++)
			fprintf(stderr, "# trace %s\n", f->tlog[i % FZ_TLINES]);
	VHOST_TEST_FAILED(f->md);
	f->md->trigger = 1;
	__bail(1, f->md);
}

/* Fail the test, naming the seed and the step. */
#define FZ_FAIL(f, fmt, ...) do {					\
		struct fuzz *_f = (f);					\
		struct __test_metadata *_metadata = _f->md;		\
		TH_LOG("seed %llu step %lu: " fmt " (replay: FUZZ_SEED=%llu)", \
		       (unsigned long long)_f->seed, _f->step,		\
		       ##__VA_ARGS__, (unsigned long long)_f->seed);	\
		fz_bail(_f);						\
	} while (0)

/*
 * What each step does: the last FZ_TLINES events are printed when the test
 * fails; with FUZZ_TRACE set, every event as it happens (stderr).
 */
#define FZ_TRACE(f, ...) do {						\
		struct fuzz *_t = (f);					\
		char *_l = _t->tlog[_t->ntlog++ % FZ_TLINES];		\
		int _n = snprintf(_l, FZ_TLEN, "%lu: ", _t->step);	\
									\
		snprintf(_l + _n, FZ_TLEN - _n, __VA_ARGS__);		\
		if (_t->trace)						\
			fprintf(stderr, "# %s\n", _l);			\
	} while (0)

static const struct {
	int err;
	const char *name;
} fz_errnames[] = {
	{ 0, "success" }, { EPERM, "EPERM" }, { ENOENT, "ENOENT" },
	{ EBADF, "EBADF" }, { ENOMEM, "ENOMEM" }, { EFAULT, "EFAULT" },
	{ EBUSY, "EBUSY" }, { EINVAL, "EINVAL" }, { ENOTTY, "ENOTTY" },
	{ ENOSPC, "ENOSPC" }, { E2BIG, "E2BIG" }, { ENODEV, "ENODEV" },
	{ ENOBUFS, "ENOBUFS" }, { ENOTSOCK, "ENOTSOCK" },
	{ EOPNOTSUPP, "EOPNOTSUPP" }, { EAGAIN, "EAGAIN" },
	{ ESOCKTNOSUPPORT, "ESOCKTNOSUPPORT" }, { EPFNOSUPPORT, "EPFNOSUPPORT" },
};

static const char *fz_errname(int err)
{
	static char buf[32];
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(fz_errnames); i++)
		if (fz_errnames[i].err == err)
			return fz_errnames[i].name;
	snprintf(buf, sizeof(buf), "errno %d", err);
	return buf;
}

/* The call @what returned @err: fail unless it is in @ok (ends with -1). */
static void fz_want(struct fuzz *f, const char *what, int err, const int *ok)
{
	char list[160] = "";
	size_t n = 0;

	/* Any allocation may fail; that is no reason to fail the test. */
	if (err == ENOMEM)
		return;
	for (; *ok >= 0; ok++) {
		if (*ok == err)
			return;
		n += snprintf(list + n, sizeof(list) - n, "%s%s", n ? "/" : "",
			      fz_errname(*ok));
		if (n >= sizeof(list))
			n = sizeof(list) - 1;
	}
	FZ_FAIL(f, "%s: %s, expected %s", what, fz_errname(err), list);
}

#define FZ_WANT(f, what, err, ...) \
	fz_want(f, what, err, (const int[]){ __VA_ARGS__, -1 })

static void fz_kick(struct fz_vq *q);

/*
 * Device IOTLB: map guest memory and, identity, the rings, and make sure
 * the device saw every miss answered.  vhost-blk waits for its requests in
 * flight before a new backend, memory table, IOTLB invalidation, LOG_ALL or
 * ACCESS_PLATFORM switch or reset; their completions may wait for a used
 * ring miss that only this (single) thread can answer.
 */
static void fz_iotlb_fill(struct fuzz *f)
{
	struct vhost_msg m;
	unsigned int i, pass;
	__u8 buf[128];

	for (pass = 0; pass < 2; pass++) {
		memset(&m, 0, sizeof(m));
		m.type = VHOST_IOTLB_MSG;
		m.iotlb.type = VHOST_IOTLB_UPDATE;
		m.iotlb.perm = VHOST_ACCESS_RW;
		m.iotlb.iova = f->vmm.gpa_base;
		m.iotlb.size = f->vmm.size;
		m.iotlb.uaddr = (__u64)(unsigned long)f->vmm.mem;
		if (write(f->fd, &m, sizeof(m)) < 0)
			return;
		m.iotlb.iova = m.iotlb.uaddr;
		if (write(f->fd, &m, sizeof(m)) < 0)
			return;
		/* Misses read become pending: the next update wakes them. */
		for (i = 0; !pass && i < 4096; i++)
			if (read(f->fd, buf, sizeof(buf)) < 0)
				break;
	}
	for (i = 0; i < f->ndrv; i++)
		if (f->vq[i].kick_st == KICK_MINE)
			fz_kick(&f->vq[i]);
}

static int fz_ioctl(struct fuzz *f, unsigned long req, void *arg)
{
	if (f->iotlb && f->type == FZ_BLK &&
	    (req == VHOST_BLK_SET_BACKEND || req == VHOST_SET_MEM_TABLE ||
	     req == VHOST_SET_FEATURES || req == VHOST_RESET_OWNER))
		fz_iotlb_fill(f);
	int err;

	f->nioctl++;
	err = ioctl(f->fd, req, arg) ? errno : 0;
	FZ_TRACE(f, "ioctl %#lx (%u %u) -> %s", req, arg ? ((__u32 *)arg)[0] : 0,
		 arg ? ((__u32 *)arg)[1] : 0, fz_errname(err));
	return err;
}

/* ------------------------------------------------------------------ */
/* The kernel log                                                      */
/* ------------------------------------------------------------------ */

static const char * const fz_splats[] = {
	"BUG:", "WARNING:", "KASAN:", "UBSAN:", "general protection",
	"Oops", "kernel BUG", "possible circular locking",
	"possible recursive locking", "inconsistent lock state",
	"suspicious RCU usage", "INFO: task", "INFO: rcu",
	"unreferenced object", "Kernel panic",
};

static void fz_kmsg_open(struct fuzz *f)
{
	f->kmsg = open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (f->kmsg >= 0)
		lseek(f->kmsg, 0, SEEK_END);
	else
		ksft_print_msg("%s: /dev/kmsg unreadable, kernel log not checked\n",
			       f->name);
}

/*
 * Read what the kernel logged since the last call.  Returns true and the
 * first lines of the report in @out when something looks like a splat.
 */
static bool fz_kmsg_scan(int fd, char *out, size_t len)
{
	char rec[2048];
	size_t used = 0;
	int lines = 0;
	bool hit = false;

	if (fd < 0)
		return false;
	out[0] = 0;
	for (;;) {
		ssize_t r = read(fd, rec, sizeof(rec) - 1);
		char *msg, *nl;
		unsigned int i;

		if (r < 0 && errno == EPIPE)
			continue;	/* overwritten records: go on */
		if (r <= 0)
			break;
		rec[r] = 0;
		msg = strchr(rec, ';');
		msg = msg ? msg + 1 : rec;
		nl = strchr(msg, '\n');
		if (nl)
			*nl = 0;
		for (i = 0; !hit && i < ARRAY_SIZE(fz_splats); i++)
			hit = strstr(msg, fz_splats[i]);
		if (hit && lines < 40 && used + strlen(msg) + 2 < len) {
			used += snprintf(out + used, len - used, "# kmsg: %s\n", msg);
			lines++;
		}
	}
	return hit;
}

static void fz_kmsg_check(struct fuzz *f)
{
	char report[4096];

	if (fz_kmsg_scan(f->kmsg, report, sizeof(report))) {
		fprintf(stderr, "%s", report);
		FZ_FAIL(f, "the kernel log has a splat (kmsg lines above)");
	}
}

/* ------------------------------------------------------------------ */
/* Guest memory and rings                                              */
/* ------------------------------------------------------------------ */

static void *fz_host(struct fuzz *f, __u64 gpa)
{
	return (char *)f->vmm.mem + (gpa - f->vmm.gpa_base);
}

static __u64 fz_gpa(struct fuzz *f, const void *p)
{
	return vmm_gpa(&f->vmm, p);
}

static bool fz_vq_alloc(struct fuzz *f, struct fz_vq *q, unsigned int idx)
{
	memset(q, 0, sizeof(*q));
	q->idx = idx;
	q->area = vmm_alloc(&f->vmm, FZ_RING_BYTES, 4096);
	q->slots = vmm_alloc(&f->vmm, FZ_MAXQ * FZ_SLOT, 64);
	q->ind = vmm_alloc(&f->vmm, FZ_MAXQ * FZ_IND * sizeof(*q->ind), 4096);
	q->data = vmm_alloc(&f->vmm, FZ_MAXQ * FZ_DATA, 4096);
	q->chain = calloc(FZ_MAXQ * FZ_IND, sizeof(*q->chain));
	q->kick = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	q->call = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	q->err = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	q->be = -1;
	q->worker = -1;
	q->broken = ~0U;
	q->num = 0;
	return q->area && q->slots && q->ind && q->data && q->chain && q->kick >= 0 &&
	       q->call >= 0 && q->err >= 0;
}

static void fz_vq_free(struct fz_vq *q)
{
	free(q->chain);
	q->chain = NULL;
	if (q->kick >= 0)
		close(q->kick);
	if (q->call >= 0)
		close(q->call);
	if (q->err >= 0)
		close(q->err);
	q->kick = -1;
	q->call = -1;
	q->err = -1;
}

static void fz_kick(struct fz_vq *q)
{
	__u64 one = 1;

	/* The avail index is visible before the device is told to look. */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (write(q->kick, &one, sizeof(one)) != sizeof(one))
		return;		/* counter full: the device is awake anyway */
}

static int fz_store_of(int be)
{
	return be >= BE_FILE ? 1 : 0;
}

static bool fz_be_ro(int be)
{
	return be == BE_NULLB_RO || be == BE_FILE_RO;
}

/* Shadow bookkeeping of a request's range: pending, then what it did. */
static void fz_shadow_range(struct fuzz *f, struct fz_req *r, int delta)
{
	struct fz_shadow *s = &f->sh[r->store];
	__u32 i;

	for (i = 0; i < r->nsect; i++)
		s->pending[r->sector + i] += delta;
}

static void fz_shadow_forget(struct fuzz *f, struct fz_req *r, bool both)
{
	__u32 i;
	int st;

	for (st = 0; st < 2; st++) {
		if (!both && st != r->store)
			continue;
		for (i = 0; i < r->nsect && r->sector + i < FZ_SHADOW; i++)
			f->sh[st].tag[r->sector + i] = FZ_UNKNOWN;
	}
}

static bool fz_writes(__u32 type)
{
	return type == VIRTIO_BLK_T_OUT || type == VIRTIO_BLK_T_DISCARD ||
	       type == VIRTIO_BLK_T_WRITE_ZEROES;
}

/* Release a head the device returned or that is given up. */
static void fz_release(struct fz_vq *q, unsigned int head)
{
	unsigned int d;

	for (d = 0; d < FZ_MAXQ; d++) {
		if (q->owner[d] == head + 1) {
			q->owner[d] = 0;
			q->nfree++;
		}
	}
	q->req[head].posted = false;
	q->inflight--;
}

/* Forget every chain on @q: the device will never return them. */
static void fz_abandon(struct fuzz *f, struct fz_vq *q)
{
	unsigned int h;

	for (h = 0; h < FZ_MAXQ; h++) {
		struct fz_req *r = &q->req[h];

		if (!r->posted)
			continue;
		if (r->shadow) {
			fz_shadow_range(f, r, -1);
			if (fz_writes(r->type))
				fz_shadow_forget(f, r, true);
		}
		fz_release(q, h);
		f->nabandon++;
	}
	q->phantoms = 0;
	q->broken = ~0U;
	q->tainted = false;
}

/* Lay ring @q out for @num entries, both indexes at @base, all free. */
static void fz_layout(struct fuzz *f, struct fz_vq *q, unsigned int num,
		      __u16 base)
{
	fz_abandon(f, q);
	memset(q->area, 0, FZ_RING_BYTES);
	vring_init(&q->vr, num, q->area, 4096);
	q->num = num;
	q->avail = base;
	q->used = base;
	q->vr.avail->idx = base;
	q->vr.used->idx = base;
	memset(q->owner, 0, sizeof(q->owner));
	q->nfree = num;
	q->inflight = 0;
}

static void fz_complete(struct fuzz *f, struct fz_vq *q, unsigned int head,
			__u32 len);

/* Take what the device returned on @q and check each element. */
static void fz_harvest(struct fuzz *f, struct fz_vq *q)
{
	__u16 uidx, n;

	if (!q->num)
		return;
	uidx = __atomic_load_n(&q->vr.used->idx, __ATOMIC_ACQUIRE);
	n = uidx - q->used;
	if (n > q->inflight) {
		char heads[256];
		size_t k = 0;
		__u16 u;

		for (u = q->used; u != uidx && k < sizeof(heads) - 24; u++)
			k += snprintf(heads + k, sizeof(heads) - k, " %u/%u",
				      q->vr.used->ring[u % q->num].id,
				      q->vr.used->ring[u % q->num].len);
		FZ_FAIL(f,
			"ring %u (num %u): used idx moved from %u to %u with %u chains in flight, avail %u; id/len:%s",
			q->idx, q->num, q->used, uidx, q->inflight, q->avail, heads);
	}
	while (q->used != uidx) {
		struct vring_used_elem e = q->vr.used->ring[q->used % q->num];

		q->used++;
		if (e.id >= q->num || !q->req[e.id].posted)
			FZ_FAIL(f,
				"ring %u: device returned head %u (len %u) that is not in flight",
				q->idx, e.id, e.len);
		fz_complete(f, q, e.id, e.len);
	}
}

static void fz_harvest_all(struct fuzz *f)
{
	unsigned int i;

	for (i = 0; i < f->ndrv; i++)
		fz_harvest(f, &f->vq[i]);
}

/*
 * Put a chain on ring @q with head descriptor @head (already picked and
 * free).  @bad breaks it in the way given.  Returns false if the ring has
 * too few free descriptors.
 */
static bool fz_add(struct fuzz *f, struct fz_vq *q, unsigned int head,
		   const struct fz_seg *s, unsigned int n, bool indirect,
		   int bad)
{
	unsigned int i, d, prev = head, need = indirect ? 1 : n;
	struct vring_desc *t;

	/* No more entries outstanding than the ring has slots. */
	if ((__u16)(q->avail - q->used) >= q->num)
		return false;
	if (bad == C_BAD_HEAD) {
		q->vr.avail->ring[q->avail % q->num] = q->num + fz_below(f, 65536 - q->num);
		q->phantoms++;
		goto publish;
	}
	if (q->nfree < need || q->owner[head])
		return false;
	q->owner[head] = head + 1;
	q->nfree--;
	if (indirect) {
		t = q->ind + head * FZ_IND;
		for (i = 0; i < n; i++) {
			t[i].addr = s[i].gpa;
			t[i].len = s[i].len;
			t[i].flags = s[i].write ? VRING_DESC_F_WRITE : 0;
			t[i].next = 0;
			if (i + 1 < n) {
				t[i].flags |= VRING_DESC_F_NEXT;
				t[i].next = i + 1;
			}
		}
		if (bad == C_IND_NESTED)
			t[fz_below(f, n)].flags |= VRING_DESC_F_INDIRECT;
		if (bad == C_IND_LOOP && n > 1) {
			t[n - 1].flags |= VRING_DESC_F_NEXT;
			t[n - 1].next = fz_below(f, n - 1);
		} else if (bad == C_IND_LOOP) {
			t[0].flags |= VRING_DESC_F_NEXT;
			t[0].next = n + fz_below(f, 100);
		}
		q->vr.desc[head].addr = fz_gpa(f, t);
		q->vr.desc[head].len = n * sizeof(*t);
		if (bad == C_IND_LEN)
			q->vr.desc[head].len += 1 + fz_below(f, 15);
		if (bad == C_IND_ZERO)
			q->vr.desc[head].len = 0;
		if (bad == C_IND_OOB)
			q->vr.desc[head].addr = f->vmm.gpa_base + f->vmm.size +
						fz_below(f, 1 << 20);
		q->vr.desc[head].flags = VRING_DESC_F_INDIRECT;
		q->vr.desc[head].next = 0;
	} else {
		d = head;
		for (i = 0; i < n; i++) {
			if (i) {
				/* Any free descriptor: chains need not be ordered. */
				d = fz_below(f, q->num);
				while (q->owner[d])
					d = (d + 1) % q->num;
				q->owner[d] = head + 1;
				q->nfree--;
				q->vr.desc[prev].flags |= VRING_DESC_F_NEXT;
				q->vr.desc[prev].next = d;
			}
			q->vr.desc[d].addr = s[i].gpa;
			q->vr.desc[d].len = s[i].len;
			q->vr.desc[d].flags = s[i].write ? VRING_DESC_F_WRITE : 0;
			q->vr.desc[d].next = 0;
			prev = d;
		}
		if (bad == C_BAD_NEXT) {
			q->vr.desc[prev].flags |= VRING_DESC_F_NEXT;
			q->vr.desc[prev].next = q->num + fz_below(f, 65536 - q->num);
		} else if (bad == C_LOOP) {
			q->vr.desc[prev].flags |= VRING_DESC_F_NEXT;
			q->vr.desc[prev].next = head;
		}
	}
	q->req[head].ndesc = need;
	q->vr.avail->ring[q->avail % q->num] = head;
publish:
	/* The ring entry is visible before the index that publishes it. */
	__atomic_thread_fence(__ATOMIC_RELEASE);
	q->avail++;
	__atomic_store_n(&q->vr.avail->idx, q->avail, __ATOMIC_RELAXED);
	return true;
}

/* A free descriptor to head a chain, or -1. */
static int fz_free_head(struct fuzz *f, struct fz_vq *q)
{
	unsigned int d, i;

	if (!q->nfree)
		return -1;
	d = fz_below(f, q->num);
	for (i = 0; i < q->num; i++, d = (d + 1) % q->num) {
		if (!q->owner[d] && !q->req[d].posted)
			return d;
	}
	return -1;
}

/* Record a posted chain; the caller filled @r. */
static void fz_posted(struct fuzz *f, struct fz_vq *q, unsigned int head,
		      struct fz_req *r, int bad)
{
	r->posted = true;
	r->seq = q->seq++;
	r->walkable = bad == C_NONE;
	if (!r->walkable) {
		r->must = false;
		if (q->broken == ~0U) {
			q->broken = r->seq;
			q->err_at_break = q->err_mine;
		}
	}
	if (bad == C_BAD_HEAD)
		return;
	r->ndesc = q->req[head].ndesc;
	q->req[head] = *r;
	q->inflight++;
	f->nreq++;
}

/* Pieces of the data buffer: @nseg segments, 512-aligned if @align. */
static unsigned int fz_split(struct fuzz *f, __u8 *data, __u32 len,
			     unsigned int nseg, bool align, bool write,
			     struct fz_seg *out)
{
	__u32 unit = align ? 512 : 1, units = len / unit, off = 0;
	unsigned int i;

	if (!len)
		return 0;
	if (nseg > units)
		nseg = units;
	if (!nseg)
		nseg = 1;
	for (i = 0; i < nseg; i++) {
		__u32 left = units - off / unit, rest = nseg - i - 1, take;

		if (!rest)
			take = left;
		else
			take = 1 + fz_below(f, (left - rest) * 2 / (rest + 1) + 1);
		if (take > left - rest)
			take = left - rest;
		out[i].gpa = fz_gpa(f, data + off);
		out[i].len = take * unit;
		out[i].write = write;
		off += take * unit;
	}
	/* Bytes left over when @len is no multiple of the unit. */
	out[nseg - 1].len += len - off;
	return nseg;
}

/* Pattern of sector @sector written with @tag; tag 0 is zeroes. */
static void fz_fill(__u8 *buf, __u64 sector, __u32 tag)
{
	__u32 *p = (__u32 *)buf, i;
	__u64 x = (sector + 1) * 0x9e3779b97f4a7c15ULL ^ tag;

	for (i = 0; i < 128; i++) {
		x ^= x >> 12;
		x ^= x << 25;
		x ^= x >> 27;
		p[i] = tag ? (__u32)(x * 0x2545f4914f6cdd1dULL >> 32) : 0;
	}
}

/* ------------------------------------------------------------------ */
/* Device, memory table, rings: the model shared by both devices       */
/* ------------------------------------------------------------------ */

static bool fz_alive(struct fuzz *f, __u32 id)
{
	unsigned int i;

	for (i = 0; i < f->nalive; i++)
		if (f->alive[i] == id)
			return true;
	return false;
}

static void fz_alive_add(struct fuzz *f, __u32 id)
{
	if (!fz_alive(f, id) && f->nalive < FZ_MAX_ALIVE)
		f->alive[f->nalive++] = id;
}

static void fz_alive_del(struct fuzz *f, __u32 id)
{
	unsigned int i;

	for (i = 0; i < f->nalive; i++) {
		if (f->alive[i] == id) {
			f->alive[i] = f->alive[--f->nalive];
			return;
		}
	}
}

/* What RESET_OWNER leaves, and what a fresh open starts from. */
static void fz_dev_reset_model(struct fuzz *f, int mem)
{
	unsigned int i;

	f->owner = false;
	f->features = 0;
	f->feat_set = false;
	f->iotlb = false;
	f->mem = mem;
	f->log_valid = false;
	f->log_bad = false;
	f->nalive = 0;
	f->nmine = 0;
	f->be = -1;
	f->gen++;
	f->lgen++;
	for (i = 0; i < f->ndrv; i++) {
		struct fz_vq *q = &f->vq[i];

		fz_abandon(f, q);
		q->laid = false;
		q->nb = false;
		q->kick_st = KICK_NONE;
		q->err_mine = false;
		q->err_at_break = false;
		q->run = RUN_NO;
		q->be = -1;
		q->worker = -1;
		q->armed = false;
	}
}

static void fz_open(struct fuzz *f)
{
	f->fd = open(f->type == FZ_BLK ? "/dev/vhost-blk" : "/dev/vhost-net",
		     O_RDWR | O_CLOEXEC | O_NONBLOCK);
	if (f->fd < 0)
		FZ_FAIL(f, "open: %s", strerror(errno));
	fz_dev_reset_model(f, MEM_NULL);
	memset(f->serial, 0, sizeof(f->serial));
	strcpy((char *)f->serial, "vhost-blk");
	memcpy(f->serial_old, f->serial, sizeof(f->serial));
	f->sgen++;
}

/* A write the device took and never returned: the release may have left it. */
static bool fz_write_left(struct fuzz *f)
{
	unsigned int i, h;

	for (i = 0; i < f->ndrv; i++)
		for (h = 0; h < FZ_MAXQ; h++)
			if (f->vq[i].req[h].posted &&
			    fz_writes(f->vq[i].req[h].type))
				return true;
	return false;
}

static void fz_close(struct fuzz *f)
{
	bool left;
	int i;

	if (f->fd < 0)
		return;
	fz_harvest_all(f);
	close(f->fd);
	f->fd = -1;
	/*
	 * What the release drained is back: take it, then forget.  What it
	 * left to its work item (a request stuck at the backend) must never
	 * reach the rings, which the next device reuses: the harvests there
	 * catch a late used element.
	 */
	fz_harvest_all(f);
	left = fz_write_left(f);
	fz_dev_reset_model(f, MEM_NULL);
	if (!left)
		return;
	/*
	 * A write it left that had begun at the backend may still land, on
	 * sectors the next device writes: wait for it as a VMM reusing the
	 * disk would, until the device's workers have exited (its last
	 * request is done then).  What had not begun never runs.
	 */
	for (i = 0; i < 3000 && vmm_owner_workers(getpid(), NULL, NULL, 1); i++)
		usleep(10 * 1000);
	if (i == 3000)
		FZ_FAIL(f, "the device's workers outlived close() by 30 s");
}

/* Rings that may hold a chain the device could still read. */
static bool fz_any_posted(struct fuzz *f)
{
	unsigned int i;

	for (i = 0; i < f->ndrv; i++)
		if (f->vq[i].inflight || f->vq[i].phantoms)
			return true;
	return false;
}

static bool fz_blk_healthy(struct fuzz *f, struct fz_vq *q)
{
	return f->fd >= 0 && f->owner && f->mem == MEM_OK && !f->iotlb &&
	       q->laid && q->kick_st == KICK_MINE && q->run == RUN_YES &&
	       f->be >= 0;
}

static bool fz_net_std(struct fuzz *f)
{
	return f->feat_set && !(f->features & FZ_NET_NONSTD);
}

static bool fz_healthy(struct fuzz *f, struct fz_vq *q)
{
	if (f->type == FZ_BLK)
		return fz_blk_healthy(f, q);
	/* vhost-net: only TX over the tap must drain; RX waits for frames. */
	return f->fd >= 0 && f->owner && f->mem == MEM_OK && !f->iotlb &&
	       q->laid && q->kick_st == KICK_MINE && q->run == RUN_YES &&
	       q->idx == VMM_NET_TX && q->be == NB_TAP && fz_net_std(f) &&
	       !q->tainted;
}

/*
 * vhost-blk starts every ring that is set up, has a kick and no backend
 * after each successful vring ioctl and each SET_BACKEND, when the device
 * has a backend; a ring is set up when SET_VRING_NUM, _BASE, _ADDR or _KICK
 * named it since the backend was last detached or the owner reset.  Model
 * that.
 */
static void fz_blk_trigger(struct fuzz *f)
{
	unsigned int i;

	if (f->type != FZ_BLK || f->be < 0)
		return;
	for (i = 0; i < f->ndrv; i++) {
		struct fz_vq *q = &f->vq[i];

		if (q->run != RUN_NO || !q->laid || q->kick_st == KICK_NONE ||
		    !q->armed || f->mem == MEM_NULL)
			continue;
		q->run = f->iotlb || f->log_bad ? RUN_MAYBE : RUN_YES;
		q->worker = -1;	/* the worker_pool policy may move it */
	}
}

/* Kick every healthy ring and wait until what must come back has. */
static void fz_settle(struct fuzz *f)
{
	__u64 deadline = fz_now_ms() + FZ_TIMEOUT_MS;
	unsigned int i, h, rekick = 0;

	f->nsettle++;
	for (i = 0; i < f->ndrv; i++)
		if (fz_healthy(f, &f->vq[i]))
			fz_kick(&f->vq[i]);
	for (;;) {
		struct fz_vq *late = NULL;
		struct fz_req *lr = NULL;

		fz_harvest_all(f);
		for (i = 0; i < f->ndrv && !late; i++) {
			struct fz_vq *q = &f->vq[i];

			if (!fz_healthy(f, q))
				continue;
			for (h = 0; h < q->num; h++) {
				struct fz_req *r = &q->req[h];

				if (r->posted && r->must && r->seq < q->broken) {
					f->nmust++;
					late = q;
					lr = r;
					break;
				}
			}
		}
		if (!late)
			break;
		if (fz_now_ms() > deadline) {
			struct vhost_vring_state s = { .index = late->idx };
			int err = fz_ioctl(f, VHOST_GET_VRING_BASE, &s);

			FZ_FAIL(f,
				"ring %u: chain head %u (seq %u, type %u, sector %llu) not back after %d ms; %u in flight, avail %u, used %u, device last_avail %u (%s), backend %d",
				late->idx, (unsigned int)(lr - late->req), lr->seq,
				lr->type, (unsigned long long)lr->sector,
				FZ_TIMEOUT_MS, late->inflight, late->avail,
				late->used, s.num, fz_errname(err),
				f->type == FZ_BLK ? f->be : late->be);
		}
		usleep(1000);
		/*
		 * vhost-net drops a TX chain with writable descriptors and
		 * stops until the next kick (upstream behaviour): kick again.
		 * vhost-blk gets one kick, so that a lost wake-up shows.
		 */
		if (f->type == FZ_NET && !(++rekick % 256))
			for (i = 0; i < f->ndrv; i++)
				if (fz_healthy(f, &f->vq[i]))
					fz_kick(&f->vq[i]);
	}
	/* A ring stopped by a chain it cannot walk says so on its eventfd. */
	for (i = 0; i < f->ndrv; i++) {
		struct fz_vq *q = &f->vq[i];
		struct pollfd p = { .fd = q->err, .events = POLLIN };
		__u64 v;
		int left;

		if (!q->err_at_break || !fz_healthy(f, q) || q->broken == ~0U)
			continue;
		left = (int)(deadline - fz_now_ms());
		if (poll(&p, 1, left > 0 ? left : 0) <= 0)
			FZ_FAIL(f,
				"ring %u: stopped at chain seq %u but its error eventfd was not signalled",
				q->idx, q->broken);
		if (read(q->err, &v, sizeof(v)) < 0)
			v = 0;
		q->err_at_break = false;
	}
}

static void fz_op_owner(struct fuzz *f)
{
	unsigned int i;
	int err;

	err = fz_ioctl(f, VHOST_SET_OWNER, NULL);
	FZ_WANT(f, "SET_OWNER", err, f->owner ? EBUSY : 0);
	if (err)
		return;
	f->owner = true;
	f->nalive = 0;
	fz_alive_add(f, 0);
	for (i = 0; i < f->ndrv; i++)
		f->vq[i].worker = f->type == FZ_BLK ? -1 : 0;
}

static void fz_op_reset_owner(struct fuzz *f)
{
	int err;

	fz_harvest_all(f);
	err = fz_ioctl(f, VHOST_RESET_OWNER, NULL);
	FZ_WANT(f, "RESET_OWNER", err, f->owner ? 0 : EPERM);
	if (err)
		return;
	/* Every request the device took was returned before the call ended. */
	fz_harvest_all(f);
	fz_dev_reset_model(f, MEM_EMPTY);
}

static void fz_op_get_features(struct fuzz *f)
{
	__u64 v = 0;
	int err = fz_ioctl(f, VHOST_GET_FEATURES, &v);

	FZ_WANT(f, "GET_FEATURES", err, 0);
	if (!f->offered) {
		f->offered = v;
		if (f->type == FZ_BLK && v != FZ_BLK_DOC_FEATURES)
			FZ_FAIL(f, "vhost-blk offers features %#llx, vhost-blk.rst documents %#llx",
				(unsigned long long)v,
				(unsigned long long)FZ_BLK_DOC_FEATURES);
	} else if (v != f->offered) {
		FZ_FAIL(f, "GET_FEATURES changed from %#llx to %#llx",
			(unsigned long long)f->offered, (unsigned long long)v);
	}
}

static __u64 fz_std_features(struct fuzz *f)
{
	__u64 v = (1ULL << VIRTIO_RING_F_INDIRECT_DESC);

	if (fz_chance(f, 50))
		v |= 1ULL << VIRTIO_RING_F_EVENT_IDX;
	if (f->type == FZ_BLK) {
		v |= (1ULL << VIRTIO_F_VERSION_1) | (1ULL << VIRTIO_BLK_F_FLUSH);
		if (fz_chance(f, 50))
			v |= (1ULL << VIRTIO_BLK_F_DISCARD) |
			     (1ULL << VIRTIO_BLK_F_WRITE_ZEROES) |
			     (1ULL << VIRTIO_BLK_F_MQ);
		if (fz_chance(f, 15) && f->log_valid)
			v |= 1ULL << VHOST_F_LOG_ALL;
	}
	return v & f->offered;
}

static void fz_set_features(struct fuzz *f, __u64 v)
{
	bool unknown = v & ~f->offered;
	__u64 old = f->features;
	unsigned int i;
	int err;

	err = fz_ioctl(f, VHOST_SET_FEATURES, &v);
	if (unknown)
		FZ_WANT(f, "SET_FEATURES (unknown bits)", err, EOPNOTSUPP);
	else if (f->type == FZ_BLK && !f->owner)
		FZ_WANT(f, "SET_FEATURES (no owner)", err, EPERM);
	else if (v & ((1ULL << VHOST_F_LOG_ALL) | (1ULL << VIRTIO_F_ACCESS_PLATFORM)))
		FZ_WANT(f, "SET_FEATURES (LOG_ALL or ACCESS_PLATFORM)", err, 0, EFAULT);
	else
		FZ_WANT(f, "SET_FEATURES", err, 0);
	if (err)
		return;
	f->features = v;
	f->feat_set = true;
	f->lgen++;
	if ((v & (1ULL << VIRTIO_F_ACCESS_PLATFORM)) && !f->iotlb) {
		f->iotlb = true;
		f->gen++;
	}
	/* vhost-net: the TX header changes under chains in flight. */
	if (f->type == FZ_NET && ((old ^ v) & FZ_NET_NONSTD))
		for (i = 0; i < f->ndrv; i++)
			if (f->vq[i].inflight)
				f->vq[i].tainted = true;
}

static void fz_op_set_features(struct fuzz *f)
{
	__u64 v = 0;
	int b;

	if (!f->offered)
		fz_op_get_features(f);
	switch (fz_below(f, 10)) {
	case 0:
		/* A bit nobody offers. */
		do {
			b = fz_below(f, 64);
		} while (f->offered & (1ULL << b));
		v = fz_std_features(f) | (1ULL << b);
		break;
	case 1: case 2: case 3:
		for (b = 0; b < 64; b++) {
			__u64 bit = 1ULL << b;

			if (!(f->offered & bit))
				continue;
			/*
			 * The model tracks each head's own used entry: a device
			 * in order (mainline's vhost-net offers it) may return
			 * a batch under its last head.
			 */
			if (bit == (1ULL << VIRTIO_F_IN_ORDER))
				continue;
			if (bit == (1ULL << VIRTIO_F_ACCESS_PLATFORM) ?
			    fz_chance(f, 4) : fz_chance(f, 50))
				v |= bit;
		}
		break;
	default:
		v = fz_std_features(f);
		break;
	}
	fz_set_features(f, v);
}

/* The memory table: one region, or the same split in many. */
static int fz_mem_valid(struct fuzz *f, unsigned int pieces)
{
	struct vhost_memory *m;
	size_t step = f->vmm.size / pieces;
	unsigned int i;
	int err;

	m = calloc(1, sizeof(*m) + pieces * sizeof(m->regions[0]));
	if (!m)
		FZ_FAIL(f, "out of memory");
	m->nregions = pieces;
	for (i = 0; i < pieces; i++) {
		m->regions[i].guest_phys_addr = f->vmm.gpa_base + i * step;
		m->regions[i].memory_size = i + 1 == pieces ?
					    f->vmm.size - i * step : step;
		m->regions[i].userspace_addr = (__u64)(unsigned long)f->vmm.mem +
					       i * step;
	}
	err = fz_ioctl(f, VHOST_SET_MEM_TABLE, m);
	free(m);
	if (!err)
		f->mem_pieces = pieces;
	return err;
}

enum {
	MT_VALID, MT_SPLIT, MT_WRAP, MT_ZERO, MT_TOO_MANY, MT_HUGE_COUNT,
	MT_PADDING, MT_OVERLAP, MT_UNALIGNED, MT_ZERO_AT_0, MT_HUGE,
	MT_DUP, MT_NONCANON, MT_NKINDS
};

static void fz_op_mem(struct fuzz *f)
{
	static const unsigned int w[MT_NKINDS] = {
		40, 8, 6, 6, 4, 2, 3, 4, 4, 2, 4, 3, 4,
	};
	struct {
		struct vhost_memory m;
		struct vhost_memory_region r[3];
	} t;
	unsigned int kind = fz_pick(f, w, MT_NKINDS);
	int err, expect = 0;
	bool maybe = false;

	if (kind >= MT_OVERLAP && (fz_any_posted(f) || f->log_bad))
		kind = MT_VALID;	/* might take: only with nothing posted */
	if (kind == MT_VALID || kind == MT_SPLIT) {
		err = fz_mem_valid(f, kind == MT_VALID ? 1 : 64);
		/* A running ring logging into a bad log base refuses any table. */
		FZ_WANT(f, "SET_MEM_TABLE (valid)", err, f->owner ? 0 : EPERM,
			f->owner && f->log_bad ? EFAULT : 0);
		if (!err) {
			f->mem = MEM_OK;
			/* vhost-blk resumes, and so starts, rings after it. */
			fz_blk_trigger(f);
		}
		return;
	}
	if (kind == MT_TOO_MANY) {
		err = fz_mem_valid(f, 65);
		FZ_WANT(f, "SET_MEM_TABLE (65 regions)", err, f->owner ? E2BIG : EPERM);
		if (!err)
			FZ_FAIL(f, "SET_MEM_TABLE took 65 regions");
		return;
	}
	memset(&t, 0, sizeof(t));
	t.m.nregions = 1;
	t.r[0].guest_phys_addr = f->vmm.gpa_base;
	t.r[0].memory_size = f->vmm.size;
	t.r[0].userspace_addr = (__u64)(unsigned long)f->vmm.mem;
	switch (kind) {
	case MT_WRAP:
		t.m.nregions = 2;
		t.r[1].guest_phys_addr = ~0ULL - fz_below(f, 1 << 20);
		t.r[1].memory_size = (2 << 20) + fz_below(f, 1 << 20);
		t.r[1].userspace_addr = (__u64)(unsigned long)f->scratch;
		expect = EFAULT;
		break;
	case MT_ZERO:
		t.m.nregions = 2;
		t.r[1].guest_phys_addr = 0x1000 + fz_below(f, 1 << 20) * 4096ULL;
		t.r[1].memory_size = 0;
		t.r[1].userspace_addr = (__u64)(unsigned long)f->scratch;
		expect = EFAULT;
		break;
	case MT_HUGE_COUNT:
		t.m.nregions = 0x10000 + fz_next(f) % 0xffff0000U;
		expect = E2BIG;
		break;
	case MT_PADDING:
		t.m.padding = 1 + fz_below(f, 0xffff);
		expect = EOPNOTSUPP;
		break;
	case MT_OVERLAP:
		/* The same GPAs backed twice, the second time by scratch. */
		t.m.nregions = 2;
		t.r[1].guest_phys_addr = f->vmm.gpa_base + fz_below(f, 64) * 4096;
		t.r[1].memory_size = 1 << 20;
		t.r[1].userspace_addr = (__u64)(unsigned long)f->scratch;
		maybe = true;
		break;
	case MT_UNALIGNED:
		t.m.nregions = 2;
		t.r[1].guest_phys_addr = 0x10000001ULL + fz_below(f, 4095);
		t.r[1].memory_size = 4096 + fz_below(f, 4096);
		t.r[1].userspace_addr = (__u64)(unsigned long)f->scratch + 1 +
					fz_below(f, 4095);
		maybe = true;
		break;
	case MT_ZERO_AT_0:
		t.m.nregions = 2;
		t.r[1].guest_phys_addr = 0;
		t.r[1].memory_size = 0;
		t.r[1].userspace_addr = (__u64)(unsigned long)f->scratch;
		maybe = true;
		break;
	case MT_HUGE:
		t.m.nregions = 2;
		t.r[1].guest_phys_addr = 1ULL << 40;
		t.r[1].memory_size = 1ULL << (40 + fz_below(f, 20));
		t.r[1].userspace_addr = (__u64)(unsigned long)f->scratch;
		maybe = true;
		break;
	case MT_DUP:
		t.m.nregions = 3;
		t.r[1] = t.r[0];
		t.r[2] = t.r[0];
		maybe = true;
		break;
	case MT_NONCANON:
		t.m.nregions = 2;
		t.r[1].guest_phys_addr = 0x20000000ULL;
		t.r[1].memory_size = 1 << 20;
		t.r[1].userspace_addr = 0x8000000000000000ULL | (fz_next(f) & ~0xfffULL);
		maybe = true;
		break;
	}
	err = fz_ioctl(f, VHOST_SET_MEM_TABLE, &t.m);
	if (!f->owner) {
		FZ_WANT(f, "SET_MEM_TABLE (no owner)", err, EPERM);
		return;
	}
	if (!maybe) {
		char what[48];

		snprintf(what, sizeof(what), "SET_MEM_TABLE (bogus kind %u)", kind);
		FZ_WANT(f, what, err, expect);
		f->nbogus_err++;
		return;
	}
	FZ_WANT(f, "SET_MEM_TABLE (odd regions)", err, 0, EFAULT);
	if (err) {
		f->nbogus_err++;
		return;
	}
	f->nbogus_ok++;
	/* Taken: put the real table back before anything is posted. */
	err = fz_mem_valid(f, 1);
	FZ_WANT(f, "SET_MEM_TABLE (restore)", err, 0);
	if (!err)
		f->mem = MEM_OK;
}

static void fz_op_log(struct fuzz *f)
{
	__u64 base;
	int err, fd;

	if (fz_chance(f, 25)) {
		switch (fz_below(f, 3)) {
		case 0:
			fd = f->logfd;
			break;
		case 1:
			fd = -1;
			break;
		default:
			fd = 1000 + fz_below(f, 20);
			break;
		}
		err = fz_ioctl(f, VHOST_SET_LOG_FD, &fd);
		if (!f->owner)
			FZ_WANT(f, "SET_LOG_FD (no owner)", err, EPERM);
		else
			FZ_WANT(f, "SET_LOG_FD", err, fd >= 1000 ? EBADF : 0);
		return;
	}
	switch (fz_below(f, 4)) {
	case 0: case 1:
		base = (__u64)(unsigned long)f->log;
		break;
	case 2:
		base = 0;
		break;
	default:
		base = 0x8000000000000000ULL | (fz_next(f) & ~0xfffULL);
		break;
	}
	err = fz_ioctl(f, VHOST_SET_LOG_BASE, &base);
	if (!f->owner) {
		FZ_WANT(f, "SET_LOG_BASE (no owner)", err, EPERM);
		return;
	}
	FZ_WANT(f, "SET_LOG_BASE", err, 0, EFAULT);
	f->lgen++;
	/* Rings that were not running took it even on EFAULT. */
	f->log_bad = base >> 63;
	f->log_valid = !err && base == (__u64)(unsigned long)f->log;
	if (f->log_valid)
		memset(f->log, 0, FZ_LOG_BYTES);
}

/* Bring ring @q to a fresh layout of @num entries from @base. */
static void fz_relayout(struct fuzz *f, struct fz_vq *q, unsigned int num,
			__u16 base)
{
	struct vhost_vring_state s = { .index = q->idx, .num = num };
	struct vhost_vring_addr a = { .index = q->idx };
	int err;

	fz_harvest(f, q);
	FZ_TRACE(f, "ring %u: relayout num %u base %u", q->idx, num, base);
	fz_layout(f, q, num, base);
	q->laid = false;
	q->nb = false;
	err = fz_ioctl(f, VHOST_SET_VRING_NUM, &s);
	FZ_WANT(f, "SET_VRING_NUM (relayout)", err, f->owner ? 0 : EPERM);
	if (err)
		return;
	q->armed = true;
	s.num = base;
	err = fz_ioctl(f, VHOST_SET_VRING_BASE, &s);
	FZ_WANT(f, "SET_VRING_BASE (relayout)", err, 0);
	q->nb = true;
	a.desc_user_addr = (__u64)(unsigned long)q->vr.desc;
	a.avail_user_addr = (__u64)(unsigned long)q->vr.avail;
	a.used_user_addr = (__u64)(unsigned long)q->vr.used;
	err = fz_ioctl(f, VHOST_SET_VRING_ADDR, &a);
	FZ_WANT(f, "SET_VRING_ADDR (relayout)", err, 0);
	q->laid = true;
	fz_blk_trigger(f);
}

/* The ring is certainly stopped in the kernel: its layout may change. */
static bool fz_quiet(struct fuzz *f, struct fz_vq *q)
{
	return f->type == FZ_BLK ? f->be < 0 : q->be < 0;
}

static unsigned int fz_rand_num(struct fuzz *f)
{
	return 1U << (1 + fz_below(f, 8));	/* 2 .. FZ_MAXQ */
}

static int fz_eventfd_choice(struct fuzz *f, int mine, int *expect, int *st)
{
	switch (fz_below(f, 8)) {
	case 0:
		*expect = 0;
		*st = KICK_NONE;
		return -1;
	case 1:
		*expect = 0;
		*st = KICK_OTHER;
		return f->junk_kick;
	case 2:
		*expect = EBADF;
		return fz_chance(f, 50) ? 1000 + (int)fz_below(f, 20) : -2;
	case 3:
		*expect = EINVAL;	/* not an eventfd */
		return f->nullfd;
	default:
		*expect = 0;
		*st = KICK_MINE;
		return mine;
	}
}

/* A vring ioctl on a ring the driver does not use, or a bad index. */
static void fz_op_vring_junk(struct fuzz *f)
{
	union {
		struct vhost_vring_state s;
		struct vhost_vring_addr a;
		struct vhost_vring_file fl;
	} u;
	__u32 idx;
	bool range;
	unsigned long req;
	__u64 junk = (__u64)(unsigned long)f->junk;
	int err, e2 = 0, st;

	if (f->type == FZ_BLK && fz_chance(f, 75))
		idx = f->ndrv + fz_below(f, f->nvqs - f->ndrv);
	else
		idx = fz_chance(f, 80) ? f->nvqs + fz_below(f, 64) : fz_next(f);
	range = idx < f->nvqs;
	memset(&u, 0, sizeof(u));
	u.s.index = idx;
	switch (fz_below(f, 8)) {
	case 0:
		req = VHOST_SET_VRING_NUM;
		u.s.num = fz_chance(f, 50) ? 1U << fz_below(f, 17) : fz_next(f);
		break;
	case 1:
		req = VHOST_SET_VRING_BASE;
		u.s.num = fz_chance(f, 70) ? 0 : fz_next(f);
		break;
	case 2:
		req = VHOST_SET_VRING_ADDR;
		switch (fz_below(f, 5)) {
		case 0:
			u.a.desc_user_addr = junk;
			u.a.avail_user_addr = junk + 4096;
			u.a.used_user_addr = junk + 8192;
			break;
		case 1:
			u.a.desc_user_addr = junk + 1;
			u.a.avail_user_addr = junk + 4097;
			u.a.used_user_addr = junk + 8194;
			break;
		case 2:
			u.a.desc_user_addr = (__u64)(unsigned long)f->ro;
			u.a.avail_user_addr = (__u64)(unsigned long)f->ro + 2048;
			u.a.used_user_addr = (__u64)(unsigned long)f->ro;
			break;
		case 3:
			u.a.desc_user_addr = 0xffffffff81000000ULL;
			u.a.avail_user_addr = 0x8000000000000000ULL;
			u.a.used_user_addr = 0;
			break;
		default:
			/* A used ring logged into the first bytes of the log. */
			u.a.flags = 1U << fz_below(f, 32);
			u.a.log_guest_addr = fz_below(f, 1 << 20);
			break;
		}
		break;
	case 3:
		req = VHOST_SET_VRING_KICK;
		u.fl.fd = fz_eventfd_choice(f, f->junk_kick, &e2, &st);
		break;
	case 4:
		req = VHOST_SET_VRING_CALL;
		u.fl.fd = fz_eventfd_choice(f, f->junk_kick, &e2, &st);
		break;
	case 5:
		req = VHOST_SET_VRING_ERR;
		u.fl.fd = fz_eventfd_choice(f, f->junk_kick, &e2, &st);
		break;
	case 6:
		req = VHOST_GET_VRING_BASE;
		break;
	default:
		req = fz_chance(f, 50) ? VHOST_SET_VRING_ENDIAN : VHOST_GET_VRING_ENDIAN;
		u.s.num = fz_below(f, 3);
		break;
	}
	err = fz_ioctl(f, req, &u);
	if (!f->owner)
		FZ_WANT(f, "vring ioctl (no owner)", err, EPERM);
	else if (!range)
		FZ_WANT(f, "vring ioctl (bad index)", err, ENOBUFS);
	else if (req == VHOST_SET_VRING_KICK || req == VHOST_SET_VRING_CALL ||
		 req == VHOST_SET_VRING_ERR)
		FZ_WANT(f, "SET_VRING_KICK/CALL/ERR (spare ring)", err, e2);
	else
		FZ_WANT(f, "vring ioctl (spare ring)", err, 0, EINVAL, EBUSY,
			EOPNOTSUPP, ENOTTY);
	if (!err && range)
		fz_blk_trigger(f);
}

/* A vring ioctl on a ring the driver posts on. */
static void fz_op_vring(struct fuzz *f)
{
	struct fz_vq *q = &f->vq[fz_below(f, f->ndrv)];
	struct vhost_vring_state s = { .index = q->idx };
	struct vhost_vring_addr a = { .index = q->idx };
	struct vhost_vring_file fl = { .index = q->idx };
	bool quiet = fz_quiet(f, q), running;
	int err, expect = 0, st = KICK_NONE;
	char what[64];

	if (fz_chance(f, 25) || f->fd < 0) {
		if (f->fd >= 0)
			fz_op_vring_junk(f);
		return;
	}
	running = f->type == FZ_BLK ? q->run == RUN_YES : q->be >= 0;
	switch (fz_below(f, 9)) {
	case 0:		/* SET_VRING_NUM */
		if (!quiet && !running)
			return;		/* might start mid-way: leave it */
		if (!quiet) {
			s.num = q->num ? q->num : 2;
			err = fz_ioctl(f, VHOST_SET_VRING_NUM, &s);
			FZ_WANT(f, "SET_VRING_NUM (running)", err, f->owner ? EBUSY : EPERM);
			return;
		}
		if (fz_chance(f, 25)) {
			static const __u32 bad[] = { 0, 3, 100, 0x10000, 0xffffffff };

			s.num = bad[fz_below(f, 5)];
			err = fz_ioctl(f, VHOST_SET_VRING_NUM, &s);
			FZ_WANT(f, "SET_VRING_NUM (invalid)", err, f->owner ? EINVAL : EPERM);
			return;
		}
		fz_relayout(f, q, fz_rand_num(f), fz_chance(f, 50) ? 0 : fz_below(f, 65536));
		return;
	case 1:		/* SET_VRING_BASE */
		if (!quiet && !running)
			return;
		if (!quiet) {
			s.num = q->avail;
			err = fz_ioctl(f, VHOST_SET_VRING_BASE, &s);
			FZ_WANT(f, "SET_VRING_BASE (running)", err, f->owner ? EBUSY : EPERM);
			return;
		}
		if (fz_chance(f, 20)) {
			s.num = 0x10000 + fz_below(f, 0xffff0000U);
			err = fz_ioctl(f, VHOST_SET_VRING_BASE, &s);
			FZ_WANT(f, "SET_VRING_BASE (> 0xffff)", err, f->owner ? EINVAL : EPERM);
			return;
		}
		if (!q->num)
			return;
		s.num = fz_below(f, 65536);
		fz_harvest(f, q);
		err = fz_ioctl(f, VHOST_SET_VRING_BASE, &s);
		FZ_WANT(f, "SET_VRING_BASE", err, f->owner ? 0 : EPERM);
		if (!err) {
			bool laid = q->laid;

			q->armed = true;
			fz_layout(f, q, q->num, s.num);
			q->laid = laid;
			fz_blk_trigger(f);
		}
		return;
	case 2:		/* SET_VRING_ADDR */
		if (!q->num)
			return;
		a.desc_user_addr = (__u64)(unsigned long)q->vr.desc;
		a.avail_user_addr = (__u64)(unsigned long)q->vr.avail;
		a.used_user_addr = (__u64)(unsigned long)q->vr.used;
		if (f->log_valid && fz_chance(f, 20)) {
			a.flags = 1U << VHOST_VRING_F_LOG;
			a.log_guest_addr = fz_gpa(f, q->vr.used);
		}
		/* Our ring under a num or base that is not ours: no. */
		switch (q->nb ? fz_below(f, 6) : 0) {
		case 0:		/* inaccessible ring */
			a.used_user_addr = 0x8000000000000000ULL;
			if (fz_chance(f, 50))
				a.desc_user_addr = 0xffffffff81000000ULL;
			strcpy(what, "SET_VRING_ADDR (inaccessible)");
			break;
		case 1:
			a.avail_user_addr |= 1;
			expect = EINVAL;
			strcpy(what, "SET_VRING_ADDR (odd avail)");
			break;
		case 2:
			a.used_user_addr |= 2;
			expect = EINVAL;
			strcpy(what, "SET_VRING_ADDR (misaligned used)");
			break;
		case 3:
			a.flags |= 2U << fz_below(f, 31);
			expect = EOPNOTSUPP;
			strcpy(what, "SET_VRING_ADDR (unknown flags)");
			break;
		default:
			strcpy(what, "SET_VRING_ADDR");
			break;
		}
		err = fz_ioctl(f, VHOST_SET_VRING_ADDR, &a);
		if (!f->owner) {
			FZ_WANT(f, what, err, EPERM);
			return;
		}
		if (expect) {
			FZ_WANT(f, what, err, expect);
			return;
		}
		if (a.used_user_addr == (__u64)(unsigned long)q->vr.used) {
			FZ_WANT(f, what, err, 0);
			q->laid = q->nb;
		} else if (running && (f->type == FZ_NET || q->run == RUN_YES) &&
			   !f->iotlb) {
			/* With an IOTLB, ring addresses are checked at use. */
			FZ_WANT(f, what, err, EINVAL);
		} else if (!quiet) {
			FZ_WANT(f, what, err, 0, EINVAL);
		} else {
			FZ_WANT(f, what, err, 0);
		}
		if (!err && a.used_user_addr != (__u64)(unsigned long)q->vr.used)
			q->laid = false;
		if (!err) {
			q->armed = true;
			fz_blk_trigger(f);
		}
		return;
	case 3: case 4:		/* SET_VRING_KICK */
		fl.fd = fz_eventfd_choice(f, q->kick, &expect, &st);
		err = fz_ioctl(f, VHOST_SET_VRING_KICK, &fl);
		FZ_WANT(f, "SET_VRING_KICK", err, f->owner ? expect : EPERM);
		if (!err) {
			q->kick_st = st;
			q->armed = true;
			fz_blk_trigger(f);
		}
		return;
	case 5:		/* SET_VRING_CALL */
		fl.fd = fz_eventfd_choice(f, q->call, &expect, &st);
		err = fz_ioctl(f, VHOST_SET_VRING_CALL, &fl);
		FZ_WANT(f, "SET_VRING_CALL", err, f->owner ? expect : EPERM);
		if (!err)
			fz_blk_trigger(f);
		return;
	case 6:		/* SET_VRING_ERR */
		fl.fd = fz_eventfd_choice(f, q->err, &expect, &st);
		err = fz_ioctl(f, VHOST_SET_VRING_ERR, &fl);
		FZ_WANT(f, "SET_VRING_ERR", err, f->owner ? expect : EPERM);
		if (!err) {
			q->err_mine = st == KICK_MINE;
			if (!q->err_mine)
				q->err_at_break = false;
			fz_blk_trigger(f);
		}
		return;
	case 7:		/* GET_VRING_BASE */
		fz_harvest(f, q);
		err = fz_ioctl(f, VHOST_GET_VRING_BASE, &s);
		FZ_WANT(f, "GET_VRING_BASE", err, f->owner ? 0 : EPERM);
		if (err)
			return;
		fz_blk_trigger(f);
		/* Nothing in flight: the device took exactly what we gave. */
		if (q->laid && !q->inflight && !q->phantoms && !f->iotlb &&
		    s.num != q->avail)
			FZ_FAIL(f,
				"ring %u: GET_VRING_BASE says %u, the driver made %u available and all came back",
				q->idx, s.num, q->avail);
		return;
	default:	/* endianness: little only on a ring in use */
		s.num = VHOST_VRING_LITTLE_ENDIAN;
		err = fz_ioctl(f, fz_chance(f, 50) ? VHOST_SET_VRING_ENDIAN :
				  VHOST_GET_VRING_ENDIAN, &s);
		FZ_WANT(f, "SET/GET_VRING_ENDIAN", err,
			f->owner ? 0 : EPERM, ENOTTY, EBUSY);
		if (!err)
			fz_blk_trigger(f);
		return;
	}
}

/* ------------------------------------------------------------------ */
/* Workers                                                             */
/* ------------------------------------------------------------------ */

static __u32 fz_worker_id(struct fuzz *f, bool *known)
{
	*known = false;
	switch (fz_below(f, 6)) {
	case 0:
		return VHOST_VRING_NEW_WORKER;
	case 1:
		return fz_below(f, 80);
	case 2:
		return fz_next(f);
	default:
		if (!f->nalive)
			return fz_below(f, 4);
		*known = true;
		return f->alive[fz_below(f, f->nalive)];
	}
}

static struct fz_vq *fz_vq_by_idx(struct fuzz *f, __u32 idx)
{
	return idx < f->ndrv ? &f->vq[idx] : NULL;
}

static void fz_op_worker(struct fuzz *f)
{
	struct vhost_worker_state ws;
	struct vhost_vring_worker rw;
	struct fz_vq *q;
	bool known;
	__u32 id;
	int err;

	memset(&ws, 0, sizeof(ws));
	memset(&rw, 0, sizeof(rw));
	rw.index = fz_chance(f, 85) ? fz_below(f, f->nvqs) :
		   fz_chance(f, 50) ? f->nvqs + fz_below(f, 16) : fz_next(f);
	q = fz_vq_by_idx(f, rw.index);
	switch (fz_below(f, 5)) {
	case 0:
		if (f->nmine >= FZ_MAX_MINE)
			return;
		err = fz_ioctl(f, VHOST_NEW_WORKER, &ws);
		if (!f->owner) {
			FZ_WANT(f, "NEW_WORKER (no owner)", err, EINVAL);
			return;
		}
		FZ_WANT(f, "NEW_WORKER", err, 0, ENOSPC, EAGAIN);
		if (err)
			return;
		if (ws.worker_id == VHOST_VRING_NEW_WORKER || fz_alive(f, ws.worker_id))
			FZ_FAIL(f, "NEW_WORKER returned id %u, already in use",
				ws.worker_id);
		fz_alive_add(f, ws.worker_id);
		f->nmine++;
		return;
	case 1:
		ws.worker_id = fz_worker_id(f, &known);
		err = fz_ioctl(f, VHOST_FREE_WORKER, &ws);
		if (!f->owner)
			FZ_WANT(f, "FREE_WORKER (no owner)", err, EINVAL);
		else if (ws.worker_id == VHOST_VRING_NEW_WORKER)
			FZ_WANT(f, "FREE_WORKER (NEW_WORKER id)", err, ENODEV);
		else if (known)
			FZ_WANT(f, "FREE_WORKER (live worker)", err, 0, EBUSY);
		else
			FZ_WANT(f, "FREE_WORKER", err, 0, EBUSY, ENODEV);
		if (err)
			return;
		for (id = 0; id < f->ndrv; id++)
			if (f->vq[id].worker == (int)ws.worker_id)
				FZ_FAIL(f, "FREE_WORKER freed worker %u, ring %u is bound to it",
					ws.worker_id, id);
		fz_alive_del(f, ws.worker_id);
		if (f->nmine)
			f->nmine--;
		return;
	case 2:
		rw.worker_id = fz_worker_id(f, &known);
		err = fz_ioctl(f, VHOST_ATTACH_VRING_WORKER, &rw);
		if (!f->owner)
			FZ_WANT(f, "ATTACH_VRING_WORKER (no owner)", err, EINVAL);
		else if (rw.index >= f->nvqs)
			FZ_WANT(f, "ATTACH_VRING_WORKER (bad index)", err, ENOBUFS);
		else if (rw.worker_id == VHOST_VRING_NEW_WORKER)
			FZ_WANT(f, "ATTACH_VRING_WORKER (NEW_WORKER id)", err, ENODEV);
		else if (known)
			FZ_WANT(f, "ATTACH_VRING_WORKER (live worker)", err, 0);
		else
			FZ_WANT(f, "ATTACH_VRING_WORKER", err, 0, ENODEV);
		if (err)
			return;
		fz_alive_add(f, rw.worker_id);
		if (q)
			q->worker = rw.worker_id;
		return;
	case 3:
		err = fz_ioctl(f, VHOST_GET_VRING_WORKER, &rw);
		if (!f->owner)
			FZ_WANT(f, "GET_VRING_WORKER (no owner)", err, EINVAL);
		else if (rw.index >= f->nvqs)
			FZ_WANT(f, "GET_VRING_WORKER (bad index)", err, ENOBUFS);
		else
			FZ_WANT(f, "GET_VRING_WORKER", err, 0);
		if (err)
			return;
		if (rw.worker_id == VHOST_VRING_NEW_WORKER)
			FZ_FAIL(f, "GET_VRING_WORKER: ring %u on worker id %#x",
				rw.index, rw.worker_id);
		if (q && q->worker >= 0 && q->worker != (int)rw.worker_id)
			FZ_FAIL(f, "GET_VRING_WORKER: ring %u on worker %u, bound to %d",
				rw.index, rw.worker_id, q->worker);
		fz_alive_add(f, rw.worker_id);
		if (q)
			q->worker = rw.worker_id;
		return;
	default:
		id = fz_chance(f, 40) && f->nmine < FZ_MAX_MINE ?
		     VHOST_VRING_NEW_WORKER : fz_worker_id(f, &known);
		if (id == VHOST_VRING_NEW_WORKER && f->nmine >= FZ_MAX_MINE)
			return;
		if (id == VHOST_VRING_NEW_WORKER)
			known = false;
		rw.worker_id = id;
		err = fz_ioctl(f, VHOST_SET_VRING_WORKER, &rw);
		if (!f->owner)
			FZ_WANT(f, "SET_VRING_WORKER (no owner)", err, EINVAL);
		else if (rw.index >= f->nvqs)
			FZ_WANT(f, "SET_VRING_WORKER (bad index)", err, ENOBUFS);
		else if (id == VHOST_VRING_NEW_WORKER)
			FZ_WANT(f, "SET_VRING_WORKER (new)", err, 0, ENOSPC, EAGAIN);
		else if (known)
			FZ_WANT(f, "SET_VRING_WORKER (live worker)", err, 0);
		else
			FZ_WANT(f, "SET_VRING_WORKER", err, 0, ENODEV);
		if (err)
			return;
		if (id == VHOST_VRING_NEW_WORKER) {
			if (rw.worker_id == VHOST_VRING_NEW_WORKER ||
			    fz_alive(f, rw.worker_id))
				FZ_FAIL(f, "SET_VRING_WORKER created worker id %u, already in use",
					rw.worker_id);
			f->nmine++;
		} else if (rw.worker_id != id) {
			FZ_FAIL(f, "SET_VRING_WORKER to worker %u returned %u",
				id, rw.worker_id);
		}
		fz_alive_add(f, rw.worker_id);
		if (q)
			q->worker = rw.worker_id;
		return;
	}
}

/* ------------------------------------------------------------------ */
/* Backend features, IOTLB messages, odd ioctls                        */
/* ------------------------------------------------------------------ */

static void fz_op_backend_features(struct fuzz *f)
{
	__u64 v = 0, offered;
	int err = fz_ioctl(f, VHOST_GET_BACKEND_FEATURES, &v);

	FZ_WANT(f, "GET_BACKEND_FEATURES", err, 0);
	offered = v;
	v = fz_chance(f, 20) ? offered | (1ULL << (8 + fz_below(f, 56))) :
	    offered & fz_next(f);
	err = fz_ioctl(f, VHOST_SET_BACKEND_FEATURES, &v);
	FZ_WANT(f, "SET_BACKEND_FEATURES", err, v & ~offered ? EOPNOTSUPP : 0);
}

static void fz_op_iotlb(struct fuzz *f)
{
	struct vhost_msg_v2 m;
	ssize_t r;
	int i;

	/* Misses the device asked for: each one a well-formed message. */
	for (i = 0; i < 16; i++) {
		r = read(f->fd, &m, sizeof(m));
		if (r < 0) {
			if (errno != EAGAIN)
				FZ_FAIL(f, "read of IOTLB messages: %s", strerror(errno));
			break;
		}
		if ((r != sizeof(struct vhost_msg) && r != sizeof(struct vhost_msg_v2)) ||
		    (m.type != VHOST_IOTLB_MSG && m.type != VHOST_IOTLB_MSG_V2) ||
		    m.iotlb.type != VHOST_IOTLB_MISS)
			FZ_FAIL(f, "IOTLB message of %zd bytes, type %u, iotlb type %u",
				r, m.type, m.iotlb.type);
	}
	memset(&m, 0, sizeof(m));
	m.type = fz_chance(f, 50) ? VHOST_IOTLB_MSG_V2 : VHOST_IOTLB_MSG;
	switch (fz_below(f, 7)) {
	case 0:		/* guest physical memory */
		m.iotlb.iova = f->vmm.gpa_base;
		m.iotlb.size = f->vmm.size;
		m.iotlb.uaddr = (__u64)(unsigned long)f->vmm.mem;
		m.iotlb.perm = VHOST_ACCESS_RW;
		m.iotlb.type = VHOST_IOTLB_UPDATE;
		break;
	case 1:		/* the rings, identity mapped */
		m.iotlb.iova = (__u64)(unsigned long)f->vmm.mem;
		m.iotlb.size = f->vmm.size;
		m.iotlb.uaddr = m.iotlb.iova;
		m.iotlb.perm = VHOST_ACCESS_RW;
		m.iotlb.type = VHOST_IOTLB_UPDATE;
		break;
	case 2:
		m.iotlb.iova = fz_chance(f, 50) ? f->vmm.gpa_base : fz_next(f);
		m.iotlb.size = fz_chance(f, 50) ? ~0ULL : fz_below(f, 1 << 24);
		m.iotlb.type = VHOST_IOTLB_INVALIDATE;
		break;
	case 3:		/* somewhere nobody looks (16 TiB), anything goes */
		m.iotlb.iova = (1ULL << 44) + fz_below(f, 1 << 20) * 4096ULL;
		m.iotlb.size = fz_chance(f, 20) ? 0 : fz_next(f) >> (32 + fz_below(f, 32));
		m.iotlb.uaddr = fz_next(f);
		m.iotlb.perm = fz_below(f, 256);
		m.iotlb.type = VHOST_IOTLB_UPDATE;
		break;
	case 4:
		m.iotlb.type = fz_chance(f, 50) ? VHOST_IOTLB_BATCH_BEGIN :
			       VHOST_IOTLB_BATCH_END;
		break;
	case 5:
		m.iotlb.type = fz_below(f, 256);
		m.iotlb.iova = 0x2000;
		m.iotlb.size = 4096;
		m.iotlb.uaddr = (__u64)(unsigned long)f->scratch;
		break;
	default:
		m.type = fz_below(f, 16);
		m.iotlb.type = VHOST_IOTLB_INVALIDATE;
		m.iotlb.iova = 0x3000;
		m.iotlb.size = 4096;
		break;
	}
	if (m.iotlb.type == VHOST_IOTLB_INVALIDATE && f->type == FZ_BLK)
		fz_iotlb_fill(f);
	r = write(f->fd, &m, m.type == VHOST_IOTLB_MSG ? sizeof(struct vhost_msg) :
		  sizeof(m));
	if (r < 0)
		FZ_WANT(f, "IOTLB message write", errno, EINVAL, EFAULT);
}

/* An ioctl number no vhost device knows, on a valid buffer. */
static void fz_op_unknown_ioctl(struct fuzz *f)
{
	static const __u8 known[] = {
		0x00, 0x01, 0x02, 0x03, 0x04, 0x07, 0x08, 0x09, 0x10, 0x11,
		0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x1e, 0x1f, 0x20, 0x21,
		0x22, 0x23, 0x24, 0x25, 0x26, 0x30, 0x31, 0x32, 0x33, 0x34,
		0x40, 0x41, 0x42, 0x43, 0x44, 0x50, 0x51, 0x52, 0x60, 0x61,
	};
	__u32 buf[256];
	unsigned int nr, i;
	unsigned long req;
	int err;

again:
	nr = fz_below(f, 256);
	for (i = 0; i < sizeof(known); i++)
		if (nr == known[i] || nr >= 0x70)
			goto again;
	memset(buf, 0, sizeof(buf));
	buf[0] = fz_chance(f, 50) ? fz_below(f, f->nvqs) : fz_next(f);
	req = _IOC(fz_below(f, 4), VHOST_VIRTIO, nr, fz_below(f, 64));
	err = fz_ioctl(f, req, buf);
	FZ_WANT(f, "unknown ioctl", err, ENOTTY, ENOBUFS, EPERM, EINVAL);
}

/* A good ioctl with a bad pointer. */
static void fz_op_bad_pointer(struct fuzz *f)
{
	static const unsigned long reqs[] = {
		VHOST_SET_FEATURES, VHOST_GET_FEATURES, VHOST_SET_MEM_TABLE,
		VHOST_SET_VRING_NUM, VHOST_SET_VRING_ADDR, VHOST_SET_VRING_KICK,
		VHOST_GET_VRING_BASE, VHOST_NEW_WORKER, VHOST_ATTACH_VRING_WORKER,
		VHOST_GET_VRING_WORKER, VHOST_SET_VRING_WORKER, VHOST_SET_LOG_BASE,
		VHOST_GET_BACKEND_FEATURES, VHOST_BLK_SET_BACKEND,
		VHOST_BLK_SET_SERIAL, VHOST_BLK_GET_LIMITS, VHOST_NET_SET_BACKEND,
		VHOST_BLK_SET_WRITEBACK, VHOST_GET_FEATURES_ARRAY,
		VHOST_SET_FEATURES_ARRAY,
	};
	unsigned long req = reqs[fz_below(f, ARRAY_SIZE(reqs))];
	void *p;
	int err;

	switch (fz_below(f, 4)) {
	case 0:
		p = NULL;
		break;
	case 1:
		p = (void *)0xffffffff81000000UL;
		break;
	case 2:
		p = (void *)0x8000000000000000UL;
		break;
	default:
		/* Read-only memory: only for calls that write their result. */
		if (req != VHOST_GET_FEATURES && req != VHOST_GET_VRING_BASE &&
		    req != VHOST_GET_BACKEND_FEATURES && req != VHOST_GET_VRING_WORKER)
			return;
		p = f->ro;
		break;
	}
	if (req == VHOST_NEW_WORKER && f->nmine >= FZ_MAX_MINE)
		return;
	if (req == VHOST_NEW_WORKER)
		f->nmine++;	/* may exist without our knowing its id */
	f->nioctl++;
	err = ioctl(f->fd, req, p) ? errno : 0;
	FZ_WANT(f, "ioctl with a bad pointer", err, EFAULT, EPERM, EINVAL,
		f->type == FZ_NET ? ENOTTY : EFAULT);
}

/* ------------------------------------------------------------------ */
/* vhost-blk                                                           */
/* ------------------------------------------------------------------ */

static void fz_blk_set_backend(struct fuzz *f, int kind)
{
	struct vhost_blk_backend b;
	unsigned int i;
	int err, expect;

	memset(&b, 0, sizeof(b));
	switch (kind) {
	case BE_DETACH:
		b.fd = -1;
		expect = 0;
		break;
	case BE_BADFD:
		b.fd = fz_chance(f, 50) ? 1000 + (int)fz_below(f, 20) : -2;
		expect = EBADF;
		break;
	case BE_EVENTFD:
		b.fd = f->junk_kick;
		expect = EINVAL;
		break;
	case BE_DIR:
		b.fd = f->dirfd;
		expect = EINVAL;
		break;
	case BE_CHR:
		b.fd = f->nullfd;
		expect = EINVAL;
		break;
	case BE_WRONLY:
		b.fd = open(FZ_FILE, O_WRONLY | O_CLOEXEC);
		expect = EBADF;
		break;
	case BE_FLAGS:
		b.fd = f->bfd[BE_FILE];
		b.flags = 1U << fz_below(f, 32);
		expect = EINVAL;
		break;
	case BE_RESERVED:
		b.fd = f->bfd[BE_FILE];
		b.reserved[fz_below(f, 2)] = 1ULL << fz_below(f, 64);
		expect = EINVAL;
		break;
	default:
		b.fd = f->bfd[kind];
		if (b.fd < 0)
			return;
		expect = 0;
		break;
	}
	fz_harvest_all(f);
	err = fz_ioctl(f, VHOST_BLK_SET_BACKEND, &b);
	if (kind == BE_WRONLY && b.fd >= 0)
		close(b.fd);
	if (kind == BE_FLAGS || kind == BE_RESERVED)
		FZ_WANT(f, "BLK_SET_BACKEND (flags/reserved)", err, EINVAL);
	else if (!f->owner)
		FZ_WANT(f, "BLK_SET_BACKEND (no owner)", err, EPERM);
	else
		FZ_WANT(f, "BLK_SET_BACKEND", err, expect);
	if (err)
		return;
	FZ_TRACE(f, "backend %d -> %d", f->be, kind == BE_DETACH ? -1 : kind);
	f->be = kind == BE_DETACH ? -1 : kind;
	f->gen++;
	/*
	 * What it had taken went back before the call returned; what it had
	 * not is served by the new backend, maybe already: relaxed.
	 */
	fz_harvest_all(f);
	/*
	 * Attached rings take the new file; detaching stops them all, and
	 * they start again only once set up again.
	 */
	for (i = 0; i < f->ndrv && f->be < 0; i++) {
		f->vq[i].run = RUN_NO;
		f->vq[i].armed = false;
	}
	fz_blk_trigger(f);
}

static void fz_op_blk_backend(struct fuzz *f)
{
	static const unsigned int w[BE_NKINDS] = {
		12, 10, 3, 10, 3,
		5, 2, 1, 1, 1, 1, 1, 1,
	};

	fz_blk_set_backend(f, fz_pick(f, w, BE_NKINDS));
}

static void fz_op_blk_serial(struct fuzz *f)
{
	struct vhost_blk_serial s;
	unsigned int n = fz_below(f, VHOST_BLK_SERIAL_LEN + 1), i;
	bool bad = fz_chance(f, 25);
	int err;

	memset(&s, 0, sizeof(s));
	for (i = 0; i < n; i++)
		s.serial[i] = 0x20 + fz_below(f, 0x5f);
	if (bad) {
		i = fz_below(f, VHOST_BLK_SERIAL_LEN);
		if (i >= n && n < VHOST_BLK_SERIAL_LEN - 1)
			s.serial[n + 1 + fz_below(f, VHOST_BLK_SERIAL_LEN - n - 1)] = 'x';
		else
			s.serial[i] = fz_chance(f, 50) ? 1 + fz_below(f, 0x1f) :
				      0x7f + fz_below(f, 0x81);
	}
	err = fz_ioctl(f, VHOST_BLK_SET_SERIAL, &s);
	if (bad)
		FZ_WANT(f, "BLK_SET_SERIAL (invalid)", err, EINVAL);
	else
		FZ_WANT(f, "BLK_SET_SERIAL", err, f->owner ? 0 : EPERM);
	if (err)
		return;
	memcpy(f->serial_old, f->serial, sizeof(f->serial));
	memcpy(f->serial, s.serial, sizeof(f->serial));
	f->sgen++;
	/*
	 * The write cache mode too, now and then: writethrough changes no
	 * status and no data, only when a write is stable.
	 */
	if (fz_chance(f, 50)) {
		__u32 wb = fz_chance(f, 10) ? 2 + fz_below(f, 100) : fz_below(f, 2);

		err = fz_ioctl(f, VHOST_BLK_SET_WRITEBACK, &wb);
		FZ_WANT(f, "BLK_SET_WRITEBACK", err, wb > 1 ? EINVAL : 0);
	}
}

static void fz_op_blk_pool(struct fuzz *f)
{
	char v[8];
	int n;

	if (f->pool_fd < 0)
		return;
	n = snprintf(v, sizeof(v), "%u", fz_chance(f, 50) ? 0 : fz_below(f, 5));
	if (pwrite(f->pool_fd, v, n, 0) != n)
		FZ_FAIL(f, "writing vhost_blk.worker_pool: %s", strerror(errno));
}

/* Sector range [first, first + n) of the shadow with nothing in flight. */
static bool fz_shadow_free(struct fuzz *f, int store, __u32 first, __u32 n)
{
	__u32 i;

	for (i = 0; i < n; i++)
		if (f->sh[store].pending[first + i])
			return false;
	return true;
}

enum {
	R_NONE, R_SHORT_HDR, R_DIR_FLIP, R_NO_STATUS, R_BIG_STATUS,
	R_MANY_SEGS, R_BAD_LEN, R_RANGE, R_DWZ_SEGS, R_DWZ_FLAGS,
	R_DWZ_LIMIT, R_NODATA, R_NKINDS
};

/*
 * Post one virtio-blk request on @q.  Returns false when the ring has no
 * room.  The model's expectation goes with the request.
 */
static bool fz_blk_post(struct fuzz *f, struct fz_vq *q)
{
	static const unsigned int tw[] = { 30, 30, 6, 6, 8, 8, 4 };
	static const __u32 types[] = {
		VIRTIO_BLK_T_IN, VIRTIO_BLK_T_OUT, VIRTIO_BLK_T_FLUSH,
		VIRTIO_BLK_T_GET_ID, VIRTIO_BLK_T_DISCARD,
		VIRTIO_BLK_T_WRITE_ZEROES, 0,
	};
	static const unsigned int rw[R_NKINDS] = {
		70, 3, 3, 3, 3, 2, 3, 4, 2, 2, 1, 1,
	};
	static const unsigned int cw[C_NKINDS] = {
		0, 3, 3, 2, 2, 2, 2, 2, 2, 1, 1, 1,
	};
	struct fz_seg segs[FZ_IND], dsegs[FZ_IND];
	struct virtio_blk_outhdr *hdr;
	struct virtio_blk_discard_write_zeroes *dwz;
	struct fz_req r;
	unsigned int n = 0, nd = 0, i, rk, ck = C_NONE, data_segs;
	bool in, indirect, ro, direct;
	__u8 allowed = 0, *slot, *data, *status = NULL;
	__u32 out_b = 0, in_b = 0, len = 0, maxseg;
	__u64 cap;
	int head, store;

	head = fz_free_head(f, q);
	if (head < 0)
		return false;
	memset(&r, 0, sizeof(r));
	slot = q->slots + head * FZ_SLOT;
	data = q->data + (size_t)head * FZ_DATA;
	hdr = (void *)slot;
	dwz = (void *)(slot + FZ_SLOT_DWZ);

	i = fz_pick(f, tw, 7);
	r.type = types[i];
	if (i == 6) {
		/* A type vhost-blk does not know. */
		static const __u32 odd[] = { 2, 3, 5, 6, 7, 9, 10, 12, 14, 15, 16, 17,
					     18, 19, 0x80000000, 0x80000001 };

		r.type = fz_chance(f, 70) ? odd[fz_below(f, 16)] : fz_next(f);
		if (r.type <= 1 || r.type == 4 || r.type == 8 || r.type == 11 ||
		    r.type == 13)
			r.type = 0x7fffffff;
	}
	rk = fz_pick(f, rw, R_NKINDS);
	if (fz_chance(f, 6))
		ck = fz_pick(f, cw, C_NKINDS);
	r.relax = f->be < 0 || f->iotlb;
	store = f->be >= 0 ? fz_store_of(f->be) : f->cap[0] ? (int)fz_below(f, 2) : 1;
	cap = f->cap[store];
	ro = f->be >= 0 && fz_be_ro(f->be);
	direct = f->be == BE_NULLB_DIRECT;
	in = r.type == VIRTIO_BLK_T_IN || r.type == VIRTIO_BLK_T_GET_ID;
	r.store = store;
	r.aligned = direct ? fz_chance(f, 85) : fz_chance(f, 50);
	indirect = fz_chance(f, 35);
	maxseg = indirect ? FZ_MAXSEG : q->num > 4 ? q->num - 3 : 1;
	if (maxseg > FZ_MAXSEG)
		maxseg = FZ_MAXSEG;

	/* Where: the shadow, somewhere in range, or off the end. */
	r.nsect = 1 + fz_below(f, FZ_DATA / 512 - 1);	/* room for a status */
	if (r.type == VIRTIO_BLK_T_DISCARD || r.type == VIRTIO_BLK_T_WRITE_ZEROES)
		r.nsect = fz_chance(f, 90) ? 1 + fz_below(f, 64) : 1 + fz_below(f, 4096);
	if (rk == R_NONE && ck == C_NONE && !r.relax && cap > 2 * FZ_SHADOW &&
	    (r.type == VIRTIO_BLK_T_IN || (fz_writes(r.type) && !ro)) &&
	    fz_chance(f, 60)) {
		if (r.nsect > 64)
			r.nsect = 64;
		for (i = 0; i < 4 && !r.shadow; i++) {
			r.sector = fz_below(f, FZ_SHADOW - r.nsect + 1);
			r.shadow = fz_shadow_free(f, store, r.sector, r.nsect);
		}
	}
	if (!r.shadow) {
		__u64 span = cap < FZ_SPAN ? cap : FZ_SPAN;

		if (r.nsect > span - FZ_SHADOW)
			r.nsect = span - FZ_SHADOW;
		r.sector = FZ_SHADOW + fz_below(f, span - FZ_SHADOW - r.nsect + 1);
	}
	if (rk == R_RANGE) {
		switch (fz_below(f, 4)) {
		case 0:		/* across the end */
			r.sector = cap - r.nsect + 1 + fz_below(f, r.nsect);
			break;
		case 1:
			r.sector = cap + fz_below(f, 1 << 20);
			break;
		case 2:
			r.sector = (~0ULL >> 9) - fz_below(f, 4);
			break;
		default:
			r.sector = ~0ULL - fz_below(f, 1024);
			break;
		}
	}
	if (rk == R_DWZ_LIMIT) {
		/* Longer than the uapi maximum, inside a file store. */
		r.type = fz_chance(f, 50) ? VIRTIO_BLK_T_WRITE_ZEROES : VIRTIO_BLK_T_DISCARD;
		r.nsect = (r.type == VIRTIO_BLK_T_WRITE_ZEROES ?
			   VHOST_BLK_MAX_WRITE_ZEROES_SECTORS :
			   VHOST_BLK_MAX_DISCARD_SECTORS) + 1 + fz_below(f, 64);
		r.sector = FZ_SHADOW;
		if (f->be != BE_FILE)
			rk = R_RANGE;	/* nullb: only as an out-of-range request */
		if (f->be != BE_FILE)
			r.sector = cap;
	}

	/* Header. */
	hdr->type = r.type;
	hdr->ioprio = fz_chance(f, 90) ? 0 : fz_next(f);
	hdr->sector = r.sector;
	if (rk == R_SHORT_HDR && (r.type == VIRTIO_BLK_T_OUT ||
				  r.type == VIRTIO_BLK_T_DISCARD ||
				  r.type == VIRTIO_BLK_T_WRITE_ZEROES))
		rk = R_NONE;	/* payload would fill the header in */
	if (rk == R_SHORT_HDR) {
		segs[n++] = (struct fz_seg){ fz_gpa(f, hdr), 1 + fz_below(f, 15), false };
	} else if (fz_chance(f, 10)) {
		__u32 cut = 1 + fz_below(f, 15);

		segs[n++] = (struct fz_seg){ fz_gpa(f, hdr), cut, false };
		segs[n++] = (struct fz_seg){ fz_gpa(f, slot + cut), 16 - cut, false };
	} else {
		segs[n++] = (struct fz_seg){ fz_gpa(f, hdr), 16, false };
	}

	/* Payload. */
	switch (r.type) {
	case VIRTIO_BLK_T_IN:
	case VIRTIO_BLK_T_OUT:
		len = r.nsect * 512;
		if (rk == R_BAD_LEN)
			len = 1 + fz_below(f, FZ_DATA - 1);
		if (rk == R_BAD_LEN && !(len % 512))
			len--;
		if (rk == R_NODATA)
			len = 0;
		if (len >= FZ_DATA)
			len = FZ_DATA - 512;	/* room for a merged status */
		nd = rk == R_MANY_SEGS ? VHOST_BLK_SEG_MAX + 1 + fz_below(f, 12) :
		     1 + fz_below(f, r.aligned ? 32 : 48);
		if (nd > maxseg)
			nd = maxseg;
		if (rk == R_MANY_SEGS) {
			len = FZ_DATA - 512;
			r.aligned = false;
		}
		r.data_len = len;
		if (r.type == VIRTIO_BLK_T_OUT) {
			r.tag = 1 + fz_below(f, 0xfffffffd);
			for (i = 0; i < len / 512; i++)
				fz_fill(data + i * 512, r.sector + i, r.tag);
		} else {
			memset(data, 0x5a, len + 1);
		}
		nd = fz_split(f, data, len, nd, r.aligned, in != (rk == R_DIR_FLIP), dsegs);
		break;
	case VIRTIO_BLK_T_GET_ID:
		len = fz_chance(f, 50) ? VHOST_BLK_SERIAL_LEN : 1 + fz_below(f, 64);
		memset(data, 0x5a, len + 1);
		r.data_len = len;
		nd = fz_split(f, data, len, 1 + fz_below(f, 3), false,
			      rk != R_DIR_FLIP, dsegs);
		break;
	case VIRTIO_BLK_T_DISCARD:
	case VIRTIO_BLK_T_WRITE_ZEROES:
		dwz[0].sector = r.sector;
		dwz[0].num_sectors = r.nsect;
		dwz[0].flags = 0;
		if (r.type == VIRTIO_BLK_T_WRITE_ZEROES && fz_chance(f, 40))
			dwz[0].flags = VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP;
		if (rk == R_DWZ_FLAGS)
			dwz[0].flags |= 2U << fz_below(f, 31);
		if (rk == R_DWZ_FLAGS && r.type == VIRTIO_BLK_T_DISCARD &&
		    fz_chance(f, 50))
			dwz[0].flags = VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP;
		hdr->sector = 0;
		len = 16;
		if (rk == R_DWZ_SEGS) {
			/* 32: two segments, the same one (the slot has room
			 * for two); the others are no whole segments.
			 */
			static const __u32 odd[] = { 0, 8, 15, 17, 32, 40 };

			len = odd[fz_below(f, 6)];
			dwz[1] = dwz[0];
		}
		if (len)
			dsegs[nd++] = (struct fz_seg){ fz_gpa(f, dwz), len,
						       rk == R_DIR_FLIP };
		break;
	default:
		if (fz_chance(f, 30)) {
			len = 512 * (1 + fz_below(f, 4));
			nd = fz_split(f, data, len, 1 + fz_below(f, 4), true,
				      fz_chance(f, 50), dsegs);
		}
		break;
	}
	/* Zero-length descriptors here and there are no data at all. */
	if (nd && nd < maxseg && fz_chance(f, 5)) {
		struct fz_seg z;

		i = fz_below(f, nd + 1);
		z = dsegs[i < nd ? i : i - 1];
		z.len = 0;
		memmove(&dsegs[i + 1], &dsegs[i], (nd - i) * sizeof(dsegs[0]));
		dsegs[i] = z;
		nd++;
	}
	/* Readable before writable, as a chain must be. */
	for (i = 0; i < nd; i++)
		if (!dsegs[i].write)
			segs[n++] = dsegs[i];
	for (i = 0; i < nd; i++)
		if (dsegs[i].write)
			segs[n++] = dsegs[i];
	/* Status byte: its own descriptor, merged into the data, or none. */
	if (rk == R_NO_STATUS) {
		/* nothing */
	} else if (r.type == VIRTIO_BLK_T_IN && rk == R_NONE && n > 1 &&
		   segs[n - 1].write && segs[n - 1].len && fz_chance(f, 10)) {
		segs[n - 1].len++;
	} else if (rk == R_BIG_STATUS) {
		segs[n++] = (struct fz_seg){ fz_gpa(f, slot + FZ_SLOT_STATUS), 16, true };
	} else {
		segs[n++] = (struct fz_seg){ fz_gpa(f, slot + FZ_SLOT_STATUS), 1, true };
	}
	if (n > (indirect ? FZ_IND - 1 : q->num))
		return false;

	/* Chains vhost cannot walk. */
	switch (ck) {
	case C_OOB:
		i = fz_below(f, n);
		segs[i].gpa = fz_chance(f, 50) ? 0x1000 + fz_below(f, 1 << 20) :
			      f->vmm.gpa_base + f->vmm.size - fz_below(f, 8);
		segs[i].len = 16 + fz_below(f, 4096);
		break;
	case C_OUT_AFTER_IN:
		if (n < 2)
			segs[n++] = (struct fz_seg){ fz_gpa(f, slot + FZ_SLOT_STATUS), 1, true };
		segs[n++] = (struct fz_seg){ fz_gpa(f, data), 512, false };
		break;
	case C_HUGE:
		segs[fz_below(f, n)].len = 0x80000000U | fz_next(f);
		break;
	case C_IND_LEN: case C_IND_NESTED: case C_IND_OOB: case C_IND_LOOP:
	case C_IND_ZERO:
		indirect = true;
		break;
	case C_BAD_NEXT: case C_LOOP:
		indirect = false;
		break;
	}
	if (indirect ? n > FZ_IND - 1 : n > q->nfree)
		return false;
	if (ck == C_BAD_NEXT || ck == C_LOOP) {
		if (n > q->nfree)
			return false;
	}

	/* What the device sees: iovecs, bytes each way, the status byte. */
	for (i = 0; i < n; i++) {
		if (!segs[i].len)
			continue;
		if (segs[i].write) {
			in_b += segs[i].len;
			if (ck == C_NONE)
				status = fz_host(f, segs[i].gpa + segs[i].len - 1);
			if (r.nwsegs < 4)
				r.wsegs[r.nwsegs++] = segs[i];
		} else {
			out_b += segs[i].len;
		}
	}
	data_segs = 0;
	for (i = 0; i < nd; i++)
		data_segs += dsegs[i].len != 0;
	r.in_len = in_b;
	r.status = status;
	if (status)
		*status = 0xff;

	/* The model: statuses Documentation/virt/vhost-blk.rst allows. */
	if (ck != C_NONE || !status) {
		allowed = 0;
	} else if (out_b < 16) {
		allowed = S_IOERR;
	} else {
		__u32 extra = out_b - 16, dlen = in_b - 1;
		/* Header or status split: over seg_max + 2 descriptors. */
		bool ambiguous = n > VHOST_BLK_SEG_MAX + 2;

		if (data_segs > VHOST_BLK_SEG_MAX)
			allowed |= S_IOERR;
		switch (r.type) {
		case VIRTIO_BLK_T_IN:
			if (extra || dlen % 512)
				allowed |= S_IOERR;
			else if (r.sector > (~0ULL >> 9) || r.sector > cap ||
				 dlen / 512 > cap - r.sector)
				allowed |= S_IOERR;
			else if (!dlen || (direct && !r.aligned))
				allowed |= S_OK | S_IOERR;
			else if (!allowed)
				allowed = S_OK;
			break;
		case VIRTIO_BLK_T_OUT:
			if (dlen || ro || extra % 512)
				allowed |= S_IOERR;
			else if (r.sector > (~0ULL >> 9) || r.sector > cap ||
				 extra / 512 > cap - r.sector)
				allowed |= S_IOERR;
			else if (!extra || (direct && !r.aligned))
				allowed |= S_OK | S_IOERR;
			else if (!allowed)
				allowed = S_OK;
			break;
		case VIRTIO_BLK_T_FLUSH:
			allowed |= extra || dlen ? S_ANY : S_OK;
			break;
		case VIRTIO_BLK_T_GET_ID:
			allowed |= extra ? S_ANY : S_OK;
			break;
		case VIRTIO_BLK_T_DISCARD:
		case VIRTIO_BLK_T_WRITE_ZEROES: {
			bool wz = r.type == VIRTIO_BLK_T_WRITE_ZEROES;
			__u32 limit = wz ? VHOST_BLK_MAX_WRITE_ZEROES_SECTORS :
				      VHOST_BLK_MAX_DISCARD_SECTORS;
			__u64 bit = 1ULL << (wz ? VIRTIO_BLK_F_WRITE_ZEROES :
					     VIRTIO_BLK_F_DISCARD);

			/* Refused unless negotiated. */
			if (!(f->features & bit)) {
				allowed |= S_UNSUPP;
				break;
			}
			/* Whole segments, all alike (above), up to the limit. */
			if (ro || !extra || extra % 16 ||
			    extra / 16 > VHOST_BLK_MAX_DISCARD_SEG) {
				allowed |= S_IOERR;
				break;
			}
			if (wz ? dwz->flags & ~VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP :
			    dwz->flags)
				allowed |= S_UNSUPP;
			if (r.nsect > limit || r.sector > cap ||
			    r.nsect > cap - r.sector)
				allowed |= S_IOERR;
			if (dlen)
				allowed |= S_OK | S_IOERR;
			if (!allowed)
				allowed = S_OK;
			break;
		}
		default:
			allowed |= S_UNSUPP;
			break;
		}
		if (ambiguous)
			allowed |= S_IOERR;
	}
	r.allowed = allowed;
	r.walkable = ck == C_NONE;
	r.must = r.walkable;
	r.data = data;
	r.gen = f->gen;
	r.lgen = f->lgen;
	r.sgen = f->sgen;
	r.log = f->log_valid && (f->features & (1ULL << VHOST_F_LOG_ALL));
	if (ck == C_BAD_HEAD) {
		if (!fz_add(f, q, head, segs, n, indirect, ck))
			return false;
		fz_posted(f, q, head, &r, ck);
		return true;
	}
	if (!fz_add(f, q, head, segs, n, indirect, ck))
		return false;
	if (r.shadow)
		fz_shadow_range(f, &r, 1);
	memcpy(q->chain + head * FZ_IND, segs, n * sizeof(segs[0]));
	r.nseg = n;
	r.indirect = indirect;
	fz_posted(f, q, head, &r, ck);
	FZ_TRACE(f,
		 "ring %u head %d: type %u sector %llu nsect %u data %u in %u rk %u ck %u allowed %#x shadow %d relax %d aligned %d indirect %d",
		 q->idx, head, r.type, (unsigned long long)r.sector, r.nsect,
		 r.data_len, r.in_len, rk, ck, allowed, r.shadow, r.relax,
		 r.aligned, indirect);
	for (i = 0; i < n && f->trace; i++)
		FZ_TRACE(f, "  seg %u: gpa %#llx len %u%s", i,
			 (unsigned long long)segs[i].gpa, segs[i].len,
			 segs[i].write ? " w" : "");
	if (ck != C_NONE)
		f->nbroken++;
	return true;
}

/*
 * The chain of @r (head @head of @q) on a device of its own, set up from
 * scratch on the same memory and backing file: its status there, or -1.
 */
static int fz_probe_fresh(struct fuzz *f, struct fz_vq *q, unsigned int head,
			  const struct fz_req *r)
{
	struct vhost_vring_state s = { .index = 0, .num = FZ_MAXQ };
	struct vhost_vring_addr a = { .index = 0 };
	struct vhost_vring_file fl = { .index = 0 };
	struct vhost_blk_backend b = { .fd = f->bfd[f->be] };
	__u64 feat = 1ULL << VIRTIO_F_VERSION_1;
	struct fz_vq *pq = &f->pq;
	int fd, st = -1, i, saved = f->fd;
	bool ok;

	fd = open("/dev/vhost-blk", O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return -1;
	f->fd = fd;
	fz_layout(f, pq, FZ_MAXQ, 0);
	ok = !ioctl(fd, VHOST_SET_OWNER, NULL) &&
	     !ioctl(fd, VHOST_SET_FEATURES, &feat) && !fz_mem_valid(f, 1) &&
	     !ioctl(fd, VHOST_SET_VRING_NUM, &s);
	s.num = 0;
	a.desc_user_addr = (__u64)(unsigned long)pq->vr.desc;
	a.avail_user_addr = (__u64)(unsigned long)pq->vr.avail;
	a.used_user_addr = (__u64)(unsigned long)pq->vr.used;
	fl.fd = pq->kick;
	ok = ok && !ioctl(fd, VHOST_SET_VRING_BASE, &s) &&
	     !ioctl(fd, VHOST_SET_VRING_ADDR, &a) &&
	     !ioctl(fd, VHOST_SET_VRING_KICK, &fl) &&
	     !ioctl(fd, VHOST_BLK_SET_BACKEND, &b);
	f->fd = saved;
	if (ok && fz_add(f, pq, 0, q->chain + head * FZ_IND, r->nseg,
			 r->indirect, C_NONE)) {
		*r->status = 0xff;
		fz_kick(pq);
		for (i = 0; i < FZ_TIMEOUT_MS && pq->vr.used->idx == pq->used; i++)
			usleep(1000);
		if (pq->vr.used->idx != pq->used)
			st = *r->status;
	}
	close(fd);
	memset(pq->owner, 0, sizeof(pq->owner));
	pq->inflight = 0;
	return st;
}

/*
 * Post the chain of @r, which came back with a status it should not have,
 * once more on @q and return the status it gets then, or -1.  Tells a
 * transient failure from one that sticks.
 */
static int fz_probe(struct fuzz *f, struct fz_vq *q, unsigned int head,
		    const struct fz_req *r)
{
	__u64 deadline = fz_now_ms() + FZ_TIMEOUT_MS;
	struct fz_req p = *r;

	if (f->probing)
		return -1;
	f->probing = true;
	f->probe_st = -1;
	if (fz_blk_healthy(f, q) && q->broken == ~0U &&
	    fz_add(f, q, head, q->chain + head * FZ_IND, r->nseg, r->indirect,
		   C_NONE)) {
		p.probe = true;
		p.shadow = false;
		*p.status = 0xff;
		fz_posted(f, q, head, &p, C_NONE);
		fz_kick(q);
		while (f->probe_st < 0 && fz_now_ms() < deadline) {
			fz_harvest(f, q);
			usleep(1000);
		}
	}
	f->probing = false;
	/* What the backing file says to the same transfer from userspace. */
	if ((r->type == VIRTIO_BLK_T_OUT || r->type == VIRTIO_BLK_T_IN) && f->be >= 0) {
		const struct fz_seg *c = q->chain + head * FZ_IND;
		struct iovec iov[FZ_IND];
		unsigned int i, k = 0;
		__u32 skip = 16;
		ssize_t got;

		for (i = 0; i < r->nseg; i++) {
			__u32 l = c[i].len, off = 0;
			bool in = r->type == VIRTIO_BLK_T_IN;

			if (skip) {
				off = l < skip ? l : skip;
				skip -= off;
			}
			if (l <= off || c[i].write != in)
				continue;
			/* The last byte of a read's last segment is the status. */
			if (i + 1 == r->nseg && !--l)
				continue;
			if (l > off) {
				iov[k].iov_base = fz_host(f, c[i].gpa + off);
				iov[k++].iov_len = l - off;
			}
		}
		got = r->type == VIRTIO_BLK_T_OUT ?
		      pwritev(f->bfd[f->be], iov, k, r->sector * 512) :
		      preadv(f->bfd[f->be], iov, k, r->sector * 512);
		ksft_print_msg("the same %s from userspace: %zd of %u bytes, %s\n",
			       r->type == VIRTIO_BLK_T_OUT ? "pwritev" : "preadv", got,
			       r->data_len, got < 0 ? strerror(errno) : "ok");
	}
	/* What the backing file says to the same zeroing from userspace. */
	if (r->type == VIRTIO_BLK_T_WRITE_ZEROES && f->be >= 0) {
		__u64 pos = r->sector * 512, len = (__u64)r->nsect * 512;
		int pe = fallocate(f->bfd[f->be], FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
				   pos, len) ? errno : 0;
		int ze = fallocate(f->bfd[f->be], FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE,
				   pos, len) ? errno : 0;

		FZ_TRACE(f, "probe: fallocate punch %s, zero range %s",
			 fz_errname(pe), fz_errname(ze));
		ksft_print_msg("fallocate from userspace: punch hole %s, zero range %s\n",
			       fz_errname(pe), fz_errname(ze));
	}
	return f->probe_st;
}

/* Dirty log: the page of GPA @gpa is marked. */
static bool fz_logged(struct fuzz *f, __u64 gpa)
{
	__u64 page = gpa / 4096;

	return page / 8 < FZ_LOG_BYTES && (f->log[page / 8] & (1U << (page % 8)));
}

/* Remember what wrote with which pattern, to tell where stray data came from. */
static void fz_wlog_add(struct fuzz *f, struct fz_vq *q, unsigned int head,
			const struct fz_req *r)
{
	struct fz_wlog *w = &f->wlog[f->nwlog++ % FZ_WLOG];

	w->tag = r->tag;
	w->sector = r->sector;
	w->nsect = r->nsect;
	w->step = f->step;
	w->ring = q->idx;
	w->head = head;
	w->be = f->be;
}

/* A sector read back wrong: which write had its contents, which store has. */
static void fz_whence(struct fuzz *f, const __u8 *data, __u64 sector)
{
	__u8 want[512], buf[512];
	unsigned int i, n = f->nwlog < FZ_WLOG ? f->nwlog : FZ_WLOG;
	int st;

	for (i = 0; i < n; i++) {
		struct fz_wlog *w = &f->wlog[i];

		if (sector < w->sector || sector >= w->sector + w->nsect)
			continue;
		fz_fill(want, sector, w->tag);
		if (!memcmp(want, data, 512))
			ksft_print_msg("sector %llu: ring %u head %u wrote it (step %lu, be %d)\n",
				       (unsigned long long)sector, w->ring, w->head,
				       w->step, w->be);
	}
	for (st = 0; st < 2; st++) {
		int fd = f->bfd[st ? BE_FILE : BE_NULLB];

		if (fd >= 0 && pread(fd, buf, 512, sector * 512) == 512)
			ksft_print_msg("store %d from userspace: %s what was read\n", st,
				       memcmp(buf, data, 512) ? "differs from" : "holds");
	}
}

static void fz_blk_check(struct fuzz *f, struct fz_vq *q, unsigned int head,
			 struct fz_req *r, __u32 len)
{
	bool relax = r->relax || r->gen != f->gen;
	__u8 st = r->status ? *r->status : 0xff;
	struct fz_shadow *sh = &f->sh[r->store];
	__u32 i;

	if (r->probe) {
		f->probe_st = st;
		return;
	}
	f->nret++;
	if (relax)
		f->nrelax++;
	if (!r->walkable)
		goto done;	/* it came back after all: nothing to check */
	if (!r->status) {
		if (len)
			FZ_FAIL(f,
				"ring %u head %u: chain without a writable byte came back with length %u",
				q->idx, head, len);
		goto done;
	}
	if (st <= VIRTIO_BLK_S_UNSUPP)
		f->nst[st]++;
	if (st > VIRTIO_BLK_S_UNSUPP && !(relax && f->iotlb && st == 0xff))
		FZ_FAIL(f,
			"ring %u head %u: type %u sector %llu: status %u is no virtio-blk status",
			q->idx, head, r->type, (unsigned long long)r->sector, st);
	if (len < 1 || len > r->in_len)
		FZ_FAIL(f, "ring %u head %u: type %u: used length %u, chain has %u writable bytes",
			q->idx, head, r->type, len, r->in_len);
	if (relax)
		goto done;
	/*
	 * The features changed since it was posted (the worker may have
	 * taken it before or after): whether DISCARD or WRITE_ZEROES was
	 * negotiated is not known.
	 */
	if ((r->type == VIRTIO_BLK_T_DISCARD ||
	     r->type == VIRTIO_BLK_T_WRITE_ZEROES) && r->lgen != f->lgen)
		r->allowed |= S_ANY;
	if (!(r->allowed & BIT_S(st))) {
		int again = fz_probe(f, q, head, r);
		int fresh = fz_probe_fresh(f, q, head, r);

		FZ_FAIL(f,
			"ring %u head %u: type %u sector %llu nsect %u data %u in %u backend %d: status %u, expected mask %#x; the same chain again: %d, on a fresh device: %d (features %#llx, %u memory regions, log %d/%d, %u descriptors%s)",
			q->idx, head, r->type, (unsigned long long)r->sector,
			r->nsect, r->data_len, r->in_len, f->be, st, r->allowed, again,
			fresh, (unsigned long long)f->features, f->mem_pieces,
			f->log_valid, f->log_bad, r->nseg, r->indirect ? " indirect" : "");
	}
	/* Dirty log: the status byte of every request, errors too. */
	if (r->log && r->lgen == f->lgen)
		f->nlogchk++;
	if (r->log && r->lgen == f->lgen && !fz_logged(f, fz_gpa(f, r->status)))
		FZ_FAIL(f,
			"ring %u head %u: LOG_ALL, status byte of type %u (status %u) not in the dirty log",
			q->idx, head, r->type, st);
	if (st != VIRTIO_BLK_S_OK)
		goto done;
	if (r->type == VIRTIO_BLK_T_IN && len != r->in_len)
		FZ_FAIL(f,
			"ring %u head %u: IN of %u bytes came back OK with used length %u, expected %u",
			q->idx, head, r->data_len, len, r->in_len);
	if (r->type == VIRTIO_BLK_T_GET_ID && r->sgen + 1 >= f->sgen) {
		__u32 n = r->in_len - 1 < VHOST_BLK_SERIAL_LEN ? r->in_len - 1 :
			  VHOST_BLK_SERIAL_LEN;

		if (len != n + 1)
			FZ_FAIL(f, "GET_ID into %u bytes: used length %u", r->in_len - 1, len);
		if (n > r->data_len)
			n = r->data_len;	/* the rest went past the data buffer */
		if (memcmp(r->data, f->serial, n) &&
		    (r->sgen == f->sgen || memcmp(r->data, f->serial_old, n)))
			FZ_FAIL(f, "GET_ID returned \"%.*s\", serial is \"%.20s\"",
				(int)n, (char *)r->data, (char *)f->serial);
	}
	/* Dirty log: every page an IN or GET_ID wrote is marked. */
	if (r->log && r->lgen == f->lgen && (r->type == VIRTIO_BLK_T_IN ||
					     r->type == VIRTIO_BLK_T_GET_ID)) {
		__u32 left = len;

		for (i = 0; i < r->nwsegs && left; i++) {
			__u64 a = r->wsegs[i].gpa, e;
			__u32 l = r->wsegs[i].len < left ? r->wsegs[i].len : left;

			/* vhost logs the bytes the used length covers. */
			left -= l;
			for (e = a + l; a < e; a = (a | 4095) + 1)
				if (!fz_logged(f, a))
					FZ_FAIL(f,
						"ring %u head %u: LOG_ALL, page of GPA %#llx written by type %u not in the dirty log",
						q->idx, head, (unsigned long long)a, r->type);
		}
	}
	if (!r->shadow || r->type != VIRTIO_BLK_T_IN)
		goto done;
	for (i = 0; i < r->nsect; i++) {
		__u8 want[512];
		__u32 t = sh->tag[r->sector + i];

		if (t == FZ_UNKNOWN)
			continue;
		fz_fill(want, r->sector + i, t);
		f->nshadow_chk++;
		if (memcmp(want, r->data + i * 512, 512)) {
			__u32 *got = (__u32 *)(r->data + i * 512), *w = (__u32 *)want;

			fz_whence(f, r->data + i * 512, r->sector + i);
			FZ_FAIL(f,
				"ring %u head %u: sector %llu of store %u reads %08x %08x.., last written with tag %#x (%08x %08x..), backend %d",
				q->idx, head, (unsigned long long)r->sector + i,
				r->store, got[0], got[1], t, w[0], w[1], f->be);
		}
	}
done:
	if (r->shadow) {
		fz_shadow_range(f, r, -1);
		if (r->type == VIRTIO_BLK_T_OUT)
			fz_wlog_add(f, q, head, r);
		if (fz_writes(r->type)) {
			if (relax || st != VIRTIO_BLK_S_OK) {
				fz_shadow_forget(f, r, relax);
			} else {
				/* What a discard leaves is unspecified. */
				for (i = 0; i < r->nsect; i++)
					sh->tag[r->sector + i] =
						r->type == VIRTIO_BLK_T_OUT ? r->tag :
						r->type == VIRTIO_BLK_T_DISCARD ?
						FZ_UNKNOWN : 0;
			}
		}
	}
}

/* ------------------------------------------------------------------ */
/* vhost-net                                                           */
/* ------------------------------------------------------------------ */

static int fz_tap_open(struct fuzz *f)
{
	struct sockaddr_ll sll = { .sll_family = AF_PACKET };
	struct ifreq ifr;
	int s, big = 4 << 20;

	f->tap = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
	if (f->tap < 0)
		return -errno;
	memset(&ifr, 0, sizeof(ifr));
	ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "vfuzz%%d");
	if (ioctl(f->tap, TUNSETIFF, &ifr))
		return -errno;
	memcpy(f->ifname, ifr.ifr_name, IFNAMSIZ);
	s = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL));
	if (s < 0)
		return -errno;
	f->wire = s;
	if (ioctl(s, SIOCGIFFLAGS, &ifr))
		return -errno;
	ifr.ifr_flags |= IFF_UP;
	if (ioctl(s, SIOCSIFFLAGS, &ifr) || ioctl(s, SIOCGIFINDEX, &ifr))
		return -errno;
	f->ifindex = ifr.ifr_ifindex;
	sll.sll_protocol = htons(ETH_P_ALL);
	sll.sll_ifindex = f->ifindex;
	if (bind(s, (struct sockaddr *)&sll, sizeof(sll)))
		return -errno;
	setsockopt(s, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big));
	/* Backends: a packet socket on the tap, and one bound to nothing. */
	f->pkt = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL));
	f->pkt_unbound = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
	if (f->pkt < 0 || f->pkt_unbound < 0)
		return -errno;
	if (bind(f->pkt, (struct sockaddr *)&sll, sizeof(sll)))
		return -errno;
	return 0;
}

static void fz_net_set_backend(struct fuzz *f, __u32 idx, int kind)
{
	struct vhost_vring_file b = { .index = idx };
	struct fz_vq *q = fz_vq_by_idx(f, idx);
	int err, expect = 0;

	switch (kind) {
	case NB_TAP:
		b.fd = f->tap;
		break;
	case NB_PKT:
		b.fd = f->pkt;
		break;
	case NB_PKT_UNBOUND:
		b.fd = f->pkt_unbound;
		break;
	case NB_DETACH:
		b.fd = -1;
		break;
	case NB_BADFD:
		/* vhost-net says ENOTSOCK for whatever is not its socket. */
		b.fd = 1000 + fz_below(f, 20);
		expect = ENOTSOCK;
		break;
	case NB_EVENTFD:
		b.fd = fz_chance(f, 50) ? f->junk_kick : f->nullfd;
		expect = ENOTSOCK;
		break;
	default:
		b.fd = f->udp;
		expect = ENOTSOCK;
		break;
	}
	fz_harvest_all(f);
	err = fz_ioctl(f, VHOST_NET_SET_BACKEND, &b);
	if (!f->owner)
		FZ_WANT(f, "NET_SET_BACKEND (no owner)", err, EPERM);
	else if (!q)
		FZ_WANT(f, "NET_SET_BACKEND (bad index)", err, ENOBUFS);
	else if (!q->laid || f->mem != MEM_OK || f->iotlb || f->log_bad)
		FZ_WANT(f, "NET_SET_BACKEND (ring not set up)", err, 0, EFAULT, expect);
	else
		FZ_WANT(f, "NET_SET_BACKEND", err, expect);
	if (err || !q)
		return;
	FZ_TRACE(f, "ring %u: backend %d -> %d", idx, q->be, kind == NB_DETACH ? -1 : kind);
	q->be = kind == NB_DETACH ? -1 : kind;
	q->run = q->be >= 0 ? RUN_YES : RUN_NO;
	f->gen++;
}

static void fz_op_net_backend(struct fuzz *f)
{
	static const unsigned int w[NB_NKINDS] = { 14, 3, 2, 4, 1, 1, 1 };
	__u32 idx = fz_chance(f, 95) ? fz_below(f, 2) : 2 + fz_below(f, 100);

	fz_net_set_backend(f, idx, fz_pick(f, w, NB_NKINDS));
}

static bool fz_net_post(struct fuzz *f, struct fz_vq *q)
{
	static const unsigned int cw[C_NKINDS] = {
		0, 3, 3, 2, 2, 2, 2, 2, 2, 1, 1, 1,
	};
	struct fz_seg segs[8];
	struct fz_req r;
	unsigned int n = 0, ck = C_NONE, i;
	bool indirect = fz_chance(f, 30);
	int head = fz_free_head(f, q);
	__u8 *buf;

	if (head < 0)
		return false;
	memset(&r, 0, sizeof(r));
	buf = q->data + (size_t)head * FZ_DATA;
	r.data = buf;
	r.std = fz_net_std(f);
	r.gen = f->gen;
	r.must = true;
	if (fz_chance(f, 8))
		ck = fz_pick(f, cw, C_NKINDS);
	if (q->idx == VMM_NET_TX) {
		__u32 flen = 60 + fz_below(f, 1455), hlen = FZ_NET_HDR;

		r.frame_seq = f->tx_seq++ & 0x7fffffff;
		if (fz_chance(f, 5))
			flen = fz_chance(f, 50) ? fz_below(f, 14) : 1515 + fz_below(f, 14000);
		if (flen < 60 || flen > 1514)
			r.must = false;
		memset(buf, 0, hlen);
		if (fz_chance(f, 3)) {
			for (i = 0; i < (__u32)hlen; i++)
				buf[i] = fz_next(f);
			q->tainted = true;	/* any header: may stall TX */
			r.must = false;
		}
		if (flen >= ETH_HLEN + 4)
			vmm_net_make_frame(buf + hlen, flen, r.frame_seq);
		segs[n++] = (struct fz_seg){ fz_gpa(f, buf), hlen, false };
		if (flen) {
			__u32 cut = fz_chance(f, 30) ? fz_below(f, flen) : 0;

			if (cut)
				segs[n++] = (struct fz_seg){ fz_gpa(f, buf + hlen), cut, false };
			segs[n++] = (struct fz_seg){ fz_gpa(f, buf + hlen + cut),
						     flen - cut, false };
		}
		if (fz_chance(f, 3)) {
			/* Writable data in TX: vhost drops the chain. */
			segs[n++] = (struct fz_seg){ fz_gpa(f, buf + 15000), 64, true };
			r.must = false;
		}
		if (!r.std)
			r.must = false;
		i = r.frame_seq % 4096;
		f->txseq[i] = r.frame_seq;
		f->txflag[i] = r.std && r.must && !q->tainted;
	} else {
		__u32 total = 1600 + fz_below(f, 2000), cut;

		memset(buf, 0x5a, 64);
		cut = fz_chance(f, 30) ? 1 + fz_below(f, total - 1) : 0;
		if (fz_chance(f, 3))
			total = 1 + fz_below(f, 100);	/* too small: frames dropped */
		if (cut && cut < total)
			segs[n++] = (struct fz_seg){ fz_gpa(f, buf), cut, true };
		else
			cut = 0;
		segs[n++] = (struct fz_seg){ fz_gpa(f, buf + cut), total - cut, true };
		r.in_len = total;
		r.must = false;
		if (fz_chance(f, 2)) {
			/* A readable buffer on RX: vhost cannot use it, stops there. */
			segs[0].write = false;
			ck = C_OUT_AFTER_IN;
			if (n == 1)
				ck = C_OOB;
		}
	}
	switch (ck) {
	case C_OOB:
		segs[fz_below(f, n)].gpa = 0x1000 + fz_below(f, 1 << 20);
		break;
	case C_OUT_AFTER_IN:
		if (q->idx == VMM_NET_TX) {
			segs[n++] = (struct fz_seg){ fz_gpa(f, buf + 15000), 64, true };
			segs[n++] = (struct fz_seg){ fz_gpa(f, buf + 15100), 64, false };
		}
		break;
	case C_HUGE:
		segs[fz_below(f, n)].len = 0x80000000U | fz_next(f);
		break;
	case C_IND_LEN: case C_IND_NESTED: case C_IND_OOB: case C_IND_LOOP:
	case C_IND_ZERO:
		indirect = true;
		break;
	case C_BAD_NEXT: case C_LOOP:
		indirect = false;
		break;
	}
	if (!indirect && n > q->nfree)
		return false;
	if (ck != C_NONE)
		r.must = false;
	if (ck == C_BAD_HEAD) {
		if (!fz_add(f, q, head, segs, n, indirect, ck))
			return false;
		fz_posted(f, q, head, &r, ck);
		return true;
	}
	if (!fz_add(f, q, head, segs, n, indirect, ck))
		return false;
	fz_posted(f, q, head, &r, ck);
	FZ_TRACE(f, "ring %u head %d: frame %#x must %d std %d ck %u indirect %d tainted %d",
		 q->idx, head, r.frame_seq, r.must, r.std, ck, indirect, q->tainted);
	for (i = 0; i < n; i++)
		FZ_TRACE(f, "  seg %u: gpa %#llx len %u%s", i,
			 (unsigned long long)segs[i].gpa, segs[i].len,
			 segs[i].write ? " w" : "");
	if (ck != C_NONE)
		f->nbroken++;
	return true;
}

static void fz_net_check(struct fuzz *f, struct fz_vq *q, unsigned int head,
			 struct fz_req *r, __u32 len)
{
	const __u8 *frame = r->data + FZ_NET_HDR;

	f->nret++;
	if (q->idx == VMM_NET_TX || !r->walkable)
		return;
	if (len > r->in_len)
		FZ_FAIL(f, "RX head %u: used length %u, buffer has %u bytes",
			head, len, r->in_len);
	/* A frame we sent down the tap arrives whole. */
	if (r->std && r->gen == f->gen && fz_net_std(f) && q->be == NB_TAP &&
	    len >= FZ_NET_HDR + ETH_HLEN + 4 && len <= FZ_DATA &&
	    vmm_net_is_ours(frame, len - FZ_NET_HDR) &&
	    (vmm_net_frame_seq(frame) & 0x80000000U)) {
		f->nframes++;
		if (vmm_net_check_frame(frame, len - FZ_NET_HDR, vmm_net_frame_seq(frame)))
			FZ_FAIL(f, "RX head %u: frame seq %#x of %u bytes corrupted",
				head, vmm_net_frame_seq(frame), len - FZ_NET_HDR);
	}
}

/* Frames on the wire: ours from TX arrive whole and once. */
static void fz_net_wire(struct fuzz *f)
{
	__u8 buf[2048];
	int i;

	for (i = 0; i < 256; i++) {
		struct sockaddr_ll sll;
		socklen_t sl = sizeof(sll);
		ssize_t r = recvfrom(f->wire, buf, sizeof(buf), MSG_DONTWAIT,
				     (struct sockaddr *)&sll, &sl);
		__u32 seq, k;

		if (r < 0)
			break;
		if (sll.sll_pkttype == PACKET_OUTGOING || !vmm_net_is_ours(buf, r))
			continue;
		seq = vmm_net_frame_seq(buf);
		k = seq % 4096;
		if ((seq & 0x80000000U) || f->txseq[k] != seq || !(f->txflag[k] & 1))
			continue;
		if (f->txflag[k] & 2)
			FZ_FAIL(f, "TX frame seq %u seen twice on the wire", seq);
		f->txflag[k] |= 2;
		f->nframes++;
		if (vmm_net_check_frame(buf, r, seq))
			FZ_FAIL(f, "TX frame seq %u of %zd bytes corrupted on the wire",
				seq, r);
	}
}

/* Send frames into the tap, for the RX ring. */
static void fz_net_inject(struct fuzz *f)
{
	struct sockaddr_ll sll = {
		.sll_family = AF_PACKET,
		.sll_ifindex = f->ifindex,
		.sll_halen = 6,
	};
	__u8 frame[1514];
	unsigned int i, n = 1 + fz_below(f, 8);

	for (i = 0; i < n; i++) {
		__u32 len = 60 + fz_below(f, 1455);

		vmm_net_make_frame(frame, len, f->rx_seq++ | 0x80000000U);
		if (sendto(f->wire, frame, len, MSG_DONTWAIT, (struct sockaddr *)&sll,
			   sizeof(sll)) < 0)
			break;
	}
}

/* ------------------------------------------------------------------ */
/* Completion, posting, repair                                         */
/* ------------------------------------------------------------------ */

static void fz_complete(struct fuzz *f, struct fz_vq *q, unsigned int head,
			__u32 len)
{
	struct fz_req r = q->req[head];

	FZ_TRACE(f, "ring %u head %u back: len %u status %d", q->idx, head, len,
		 r.status ? *r.status : -1);
	fz_release(q, head);
	if (f->type == FZ_BLK)
		fz_blk_check(f, q, head, &r, len);
	else
		fz_net_check(f, q, head, &r, len);
}

static void fz_op_post(struct fuzz *f)
{
	struct fz_vq *q = &f->vq[fz_below(f, f->ndrv)];
	unsigned int i, n = 1 + fz_below(f, 8);

	if (!q->num || (!q->laid && fz_chance(f, 90)))
		return;
	fz_harvest(f, q);
	for (i = 0; i < n; i++) {
		if (f->type == FZ_BLK ? !fz_blk_post(f, q) : !fz_net_post(f, q))
			break;
	}
	if (fz_chance(f, 90))
		fz_kick(q);
	if (f->iotlb)
		fz_op_iotlb(f);
}

/* Bring the device to a state where requests flow. */
static void fz_op_repair(struct fuzz *f)
{
	unsigned int i;
	bool need = false;
	int err, fd;

	if (f->fd < 0)
		fz_open(f);
	if (f->iotlb && fz_chance(f, 70))
		fz_op_reset_owner(f);
	if (!f->owner)
		fz_op_owner(f);
	if (!f->offered)
		fz_op_get_features(f);
	if (f->log_bad || (fz_chance(f, 30) && f->type == FZ_BLK)) {
		__u64 base = (__u64)(unsigned long)f->log;

		err = fz_ioctl(f, VHOST_SET_LOG_BASE, &base);
		FZ_WANT(f, "SET_LOG_BASE (repair)", err, 0);
		f->log_valid = true;
		f->log_bad = false;
		f->lgen++;
		memset(f->log, 0, FZ_LOG_BYTES);
	}
	if (!f->feat_set || f->iotlb || (f->type == FZ_NET && !fz_net_std(f)) ||
	    fz_chance(f, 20))
		fz_set_features(f, fz_std_features(f));
	if (f->mem != MEM_OK) {
		err = fz_mem_valid(f, 1);
		FZ_WANT(f, "SET_MEM_TABLE (repair)", err, 0);
		f->mem = MEM_OK;
	}
	for (i = 0; i < f->ndrv; i++) {
		struct fz_vq *q = &f->vq[i];

		if (!q->laid || q->broken != ~0U || q->tainted || !q->num)
			need = true;
	}
	if (need && f->type == FZ_BLK && f->be >= 0)
		fz_blk_set_backend(f, BE_DETACH);
	for (i = 0; i < f->ndrv; i++) {
		struct fz_vq *q = &f->vq[i];
		struct vhost_vring_file fl = { .index = q->idx };

		if (q->laid && q->broken == ~0U && !q->tainted && q->num &&
		    q->kick_st == KICK_MINE)
			continue;
		if (f->type == FZ_NET && q->be >= 0)
			fz_net_set_backend(f, q->idx, NB_DETACH);
		if (!q->laid || q->broken != ~0U || q->tainted || !q->num)
			fz_relayout(f, q, fz_rand_num(f),
				    fz_chance(f, 50) ? 0 : fz_below(f, 65536));
		fl.fd = q->kick;
		err = fz_ioctl(f, VHOST_SET_VRING_KICK, &fl);
		FZ_WANT(f, "SET_VRING_KICK (repair)", err, 0);
		q->kick_st = KICK_MINE;
		q->armed = true;
		fl.fd = q->call;
		err = fz_ioctl(f, VHOST_SET_VRING_CALL, &fl);
		FZ_WANT(f, "SET_VRING_CALL (repair)", err, 0);
		fl.fd = q->err;
		err = fz_ioctl(f, VHOST_SET_VRING_ERR, &fl);
		FZ_WANT(f, "SET_VRING_ERR (repair)", err, 0);
		q->err_mine = true;
		fz_blk_trigger(f);
	}
	if (f->type == FZ_BLK) {
		if (f->be < 0) {
			static const int good[] = {
				BE_NULLB_DIRECT, BE_NULLB, BE_FILE, BE_NULLB_RO,
			};

			do {
				fd = good[fz_below(f, 4)];
			} while (f->bfd[fd] < 0);
			fz_blk_set_backend(f, fd);
		}
	} else {
		for (i = 0; i < f->ndrv; i++)
			if (f->vq[i].be != NB_TAP)
				fz_net_set_backend(f, i, NB_TAP);
	}
}

/* ------------------------------------------------------------------ */
/* The run                                                             */
/* ------------------------------------------------------------------ */

enum {
	OP_POST, OP_REAP, OP_SETTLE, OP_REPAIR, OP_CLOSE, OP_OWNER,
	OP_RESET_OWNER, OP_GET_FEATURES, OP_SET_FEATURES, OP_MEM, OP_VRING,
	OP_WORKER, OP_BACKEND, OP_SERIAL, OP_LOG, OP_BACKEND_FEATURES,
	OP_IOTLB, OP_UNKNOWN, OP_BAD_POINTER, OP_POOL, OP_INJECT, OP_NOPS
};

static void fz_step(struct fuzz *f)
{
	static const unsigned int wblk[OP_NOPS] = {
		36, 8, 2, 5, 1, 1, 1, 1, 3, 3, 8, 7, 4, 1, 1, 1, 1, 1, 1, 1, 0,
	};
	static const unsigned int wnet[OP_NOPS] = {
		30, 8, 2, 5, 1, 1, 1, 1, 3, 3, 8, 7, 4, 0, 1, 1, 1, 1, 1, 0, 6,
	};
	unsigned int op = fz_pick(f, f->type == FZ_BLK ? wblk : wnet, OP_NOPS);

	if (f->fd < 0 && op != OP_REPAIR)
		op = fz_chance(f, 80) ? OP_REPAIR : OP_SETTLE;
	FZ_TRACE(f, "op %u", op);
	switch (op) {
	case OP_POST:
		fz_op_post(f);
		break;
	case OP_REAP:
		fz_harvest_all(f);
		if (f->type == FZ_NET)
			fz_net_wire(f);
		break;
	case OP_SETTLE:
		fz_settle(f);
		break;
	case OP_REPAIR:
		fz_op_repair(f);
		break;
	case OP_CLOSE:
		fz_close(f);
		break;
	case OP_OWNER:
		fz_op_owner(f);
		break;
	case OP_RESET_OWNER:
		fz_op_reset_owner(f);
		break;
	case OP_GET_FEATURES:
		fz_op_get_features(f);
		break;
	case OP_SET_FEATURES:
		fz_op_set_features(f);
		break;
	case OP_MEM:
		fz_op_mem(f);
		break;
	case OP_VRING:
		fz_op_vring(f);
		break;
	case OP_WORKER:
		fz_op_worker(f);
		break;
	case OP_BACKEND:
		if (f->type == FZ_BLK)
			fz_op_blk_backend(f);
		else
			fz_op_net_backend(f);
		break;
	case OP_SERIAL:
		fz_op_blk_serial(f);
		break;
	case OP_LOG:
		fz_op_log(f);
		break;
	case OP_BACKEND_FEATURES:
		fz_op_backend_features(f);
		break;
	case OP_IOTLB:
		fz_op_iotlb(f);
		break;
	case OP_UNKNOWN:
		fz_op_unknown_ioctl(f);
		break;
	case OP_BAD_POINTER:
		fz_op_bad_pointer(f);
		break;
	case OP_POOL:
		fz_op_blk_pool(f);
		break;
	case OP_INJECT:
		fz_net_inject(f);
		break;
	}
}

/*
 * FUZZ_SEED if set (a replay), else @fixed if not 0, else one from the
 * clock.
 */
static __u64 fz_seed(__u64 fixed)
{
	const char *s = getenv("FUZZ_SEED");
	struct timespec t;

	if (s && *s)
		return strtoull(s, NULL, 0);
	if (fixed)
		return fixed;
	clock_gettime(CLOCK_REALTIME, &t);
	return (__u64)t.tv_sec * 1000000007ULL ^ t.tv_nsec ^ ((__u64)getpid() << 32);
}

/* Seconds this test runs: its @share (of @total) of FUZZ_SECONDS. */
static unsigned int fz_seconds(unsigned int share, unsigned int total)
{
	const char *s = getenv("FUZZ_SECONDS");
	unsigned long all = s && *s ? strtoul(s, NULL, 0) : FZ_DEF_SECONDS;
	unsigned long mine = all * share / total;

	if (mine > FZ_TEST_TIMEOUT - 120)
		mine = FZ_TEST_TIMEOUT - 120;
	return mine ? mine : 1;
}

FIXTURE(fuzz) {
	struct fuzz *f;
};

FIXTURE_VARIANT(fuzz) {
	int type;
	unsigned int share;	/* of FZ_SHARES */
	__u64 seed;		/* 0: a new one each run, printed */
};

/*
 * vhost-blk gets two thirds of the time, vhost-net one; each half of it
 * with a fixed seed, the same sequence every run, and half with a new one.
 */
#define FZ_SHARES	6
FIXTURE_VARIANT_ADD(fuzz, blk_fixed) { .type = FZ_BLK, .share = 2,
				       .seed = 0x766d712d626c6bULL };
FIXTURE_VARIANT_ADD(fuzz, blk) { .type = FZ_BLK, .share = 2 };
FIXTURE_VARIANT_ADD(fuzz, net_fixed) { .type = FZ_NET, .share = 1,
				       .seed = 0x766d712d6e6574ULL };
FIXTURE_VARIANT_ADD(fuzz, net) { .type = FZ_NET, .share = 1 };

static int fz_blk_stores(struct fuzz *f)
{
	static const char zero[4096];
	const char *why;
	__u64 size;
	int fd, i;

	fd = open(FZ_FILE, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || ftruncate(fd, FZ_FILE_SIZE))
		return -errno;
	close(fd);
	f->bfd[BE_FILE] = open(FZ_FILE, O_RDWR | O_CLOEXEC);
	f->bfd[BE_FILE_RO] = open(FZ_FILE, O_RDONLY | O_CLOEXEC);
	f->cap[1] = FZ_FILE_SIZE / 512;
	/* The shadow checks what reads return: only a memory-backed one. */
	why = vhost_nullb_unusable(true, false);
	if (!why) {
		f->bfd[BE_NULLB_DIRECT] = open(FZ_NULLB, O_RDWR | O_DIRECT | O_CLOEXEC);
		f->bfd[BE_NULLB] = open(FZ_NULLB, O_RDWR | O_CLOEXEC);
		f->bfd[BE_NULLB_RO] = open(FZ_NULLB, O_RDONLY | O_CLOEXEC);
	}
	if (f->bfd[BE_NULLB] >= 0 && !ioctl(f->bfd[BE_NULLB], BLKGETSIZE64, &size)) {
		f->cap[0] = size / 512;
		/* The shadowed sectors start out as zeroes. */
		for (i = 0; i < FZ_SHADOW * 512 / 4096; i++)
			if (pwrite(f->bfd[BE_NULLB], zero, 4096, i * 4096) != 4096)
				return -errno;
		fsync(f->bfd[BE_NULLB]);
	} else {
		ksft_print_msg("%s: vhost-blk fuzzed over a file only\n",
			       why ? why : FZ_NULLB " unusable");
		for (i = BE_NULLB_DIRECT; i <= BE_NULLB_RO; i++) {
			if (f->bfd[i] >= 0)
				close(f->bfd[i]);
			f->bfd[i] = -1;
		}
	}
	if (f->bfd[BE_NULLB] >= 0 && f->cap[0] <= FZ_SPAN + FZ_SHADOW)
		return -ENOSPC;	/* null_blk.gb=1 gives plenty */
	for (i = 0; i < 2; i++)
		memset(f->sh[i].tag, 0, sizeof(f->sh[i].tag));
	if (f->bfd[BE_NULLB] < 0)
		for (i = 0; i < FZ_SHADOW; i++)
			f->sh[0].tag[i] = FZ_UNKNOWN;
	return f->bfd[BE_FILE] >= 0 && f->bfd[BE_FILE_RO] >= 0 ? 0 : -errno;
}

FIXTURE_SETUP(fuzz)
{
	const char *why = variant->type == FZ_BLK ?
			  vhost_unusable("/dev/vhost-blk", "CONFIG_VHOST_BLK") :
			  vhost_net_unusable();
	struct fuzz *f;
	unsigned int i;
	int r;

	if (why)
		SKIP(return, "%s", why);
	f = calloc(1, sizeof(*f));
	ASSERT_NE(NULL, f);
	self->f = f;
	f->md = _metadata;
	f->type = variant->type;
	f->name = variant->type == FZ_BLK ? "vhost-blk" : "vhost-net";
	f->fd = -1;
	f->kmsg = -1;
	f->tap = -1;
	f->wire = -1;
	f->pkt = -1;
	f->pkt_unbound = -1;
	f->pool_fd = -1;
	for (i = 0; i < BE_NSTORES; i++)
		f->bfd[i] = -1;
	f->nvqs = f->type == FZ_BLK ? VHOST_BLK_MAX_QUEUES : 2;
	f->ndrv = f->type == FZ_BLK ? FZ_NDRV : 2;
	f->seed = fz_seed(variant->seed);
	f->trace = getenv("FUZZ_TRACE") && *getenv("FUZZ_TRACE");
	f->rng = f->seed ^ (f->type == FZ_BLK ? 0x626c6bULL : 0x6e6574ULL);
	f->rng = fz_splitmix(&f->rng) | 1;
	clock_gettime(CLOCK_MONOTONIC, &f->end);
	f->end.tv_sec += fz_seconds(variant->share, FZ_SHARES);
	ksft_print_msg("seed %llu (replay: FUZZ_SEED=%llu)\n",
		       (unsigned long long)f->seed, (unsigned long long)f->seed);
	ksft_print_msg("%s: fuzzing for %u s\n", f->name,
		       fz_seconds(variant->share, FZ_SHARES));
	/* The harness ends the test child with _exit(): flush as we go. */
	fflush(stdout);
	fz_kmsg_open(f);

	r = vmm_init(&f->vmm, FZ_MEM);
	ASSERT_EQ(0, r) TH_LOG("guest memory: %s", strerror(-r));
	f->scratch = mmap(NULL, 2 << 20, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	/* Spare rings of up to 32768 entries stay inside these. */
	f->junk = mmap(NULL, FZ_JUNK, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	f->ro = mmap(NULL, FZ_JUNK, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	f->log = mmap(NULL, FZ_LOG_BYTES, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	ASSERT_NE(MAP_FAILED, f->scratch);
	ASSERT_NE(MAP_FAILED, f->junk);
	ASSERT_NE(MAP_FAILED, f->ro);
	ASSERT_NE(MAP_FAILED, (void *)f->log);
	for (i = 0; i < f->ndrv; i++)
		ASSERT_TRUE(fz_vq_alloc(f, &f->vq[i], i));
	ASSERT_TRUE(fz_vq_alloc(f, &f->pq, 0));
	f->junk_kick = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	f->logfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	f->nullfd = open("/dev/null", O_RDWR | O_CLOEXEC);
	f->dirfd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	f->udp = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	ASSERT_LE(0, f->junk_kick);
	ASSERT_LE(0, f->logfd);
	ASSERT_LE(0, f->nullfd);
	ASSERT_LE(0, f->dirfd);
	ASSERT_LE(0, f->udp);
	if (f->type == FZ_BLK) {
		r = fz_blk_stores(f);
		ASSERT_EQ(0, r) TH_LOG("backing stores: %s", strerror(-r));
		f->pool_fd = open("/sys/module/vhost_blk/parameters/worker_pool",
				  O_RDWR | O_CLOEXEC);
		if (f->pool_fd >= 0) {
			ssize_t n = pread(f->pool_fd, f->pool_saved,
					  sizeof(f->pool_saved) - 1, 0);

			f->pool_saved[n > 0 ? n : 0] = 0;
			if (n <= 0) {
				close(f->pool_fd);
				f->pool_fd = -1;
			}
		}
	} else {
		r = fz_tap_open(f);
		if (r == -ENOENT || r == -ENODEV)
			SKIP(return, "no tap device (CONFIG_TUN): %s", strerror(-r));
		ASSERT_EQ(0, r) TH_LOG("tap: %s", strerror(-r));
	}
}

FIXTURE_TEARDOWN(fuzz)
{
	struct fuzz *f = self->f;
	char report[4096];
	unsigned int i;

	if (!f)
		return;
	if (f->fd >= 0) {
		close(f->fd);
		f->fd = -1;
	}
	if (f->pool_fd >= 0) {
		if (pwrite(f->pool_fd, f->pool_saved, strlen(f->pool_saved), 0) < 0)
			TH_LOG("cannot restore vhost_blk.worker_pool to %s", f->pool_saved);
		close(f->pool_fd);
	}
	/* Whatever the outcome, a splat fails the test. */
	if (fz_kmsg_scan(f->kmsg, report, sizeof(report))) {
		fprintf(stderr, "%s", report);
		TH_LOG("seed %llu: the kernel log has a splat (kmsg lines above)",
		       (unsigned long long)f->seed);
		VHOST_TEST_FAILED(_metadata);
	}
	if (f->kmsg >= 0)
		close(f->kmsg);
	for (i = 0; i < f->ndrv; i++)
		fz_vq_free(&f->vq[i]);
	fz_vq_free(&f->pq);
	for (i = 0; i < BE_NSTORES; i++)
		if (f->bfd[i] >= 0)
			close(f->bfd[i]);
	if (f->type == FZ_BLK)
		unlink(FZ_FILE);
	if (f->tap >= 0)
		close(f->tap);
	if (f->wire >= 0)
		close(f->wire);
	if (f->pkt >= 0)
		close(f->pkt);
	if (f->pkt_unbound >= 0)
		close(f->pkt_unbound);
	if (f->junk_kick >= 0)
		close(f->junk_kick);
	if (f->logfd >= 0)
		close(f->logfd);
	if (f->nullfd >= 0)
		close(f->nullfd);
	if (f->dirfd >= 0)
		close(f->dirfd);
	if (f->udp >= 0)
		close(f->udp);
	if (f->scratch && f->scratch != MAP_FAILED)
		munmap(f->scratch, 2 << 20);
	if (f->junk && f->junk != MAP_FAILED)
		munmap(f->junk, FZ_JUNK);
	if (f->ro && f->ro != MAP_FAILED)
		munmap(f->ro, FZ_JUNK);
	if (f->log && (void *)f->log != MAP_FAILED)
		munmap(f->log, FZ_LOG_BYTES);
	vmm_free(&f->vmm);
	free(f);
	self->f = NULL;
}

TEST_F_TIMEOUT(fuzz, run, FZ_TEST_TIMEOUT)
{
	struct fuzz *f = self->f;
	struct timespec now;

	for (f->step = 0;; f->step++) {
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec > f->end.tv_sec ||
		    (now.tv_sec == f->end.tv_sec && now.tv_nsec >= f->end.tv_nsec))
			break;
		fz_step(f);
		if (!(f->step % FZ_KMSG_EVERY))
			fz_kmsg_check(f);
	}
	/* The end: everything healthy drains, then the device goes away. */
	if (f->fd >= 0)
		fz_settle(f);
	if (f->type == FZ_NET && f->wire >= 0)
		fz_net_wire(f);
	fz_close(f);
	fz_kmsg_check(f);
	ksft_print_msg("%s: %lu steps, %lu ioctls, %lu requests, %lu back\n",
		       f->name, f->step, f->nioctl, f->nreq, f->nret);
	ksft_print_msg("%s: status OK %lu, IOERR %lu, UNSUPP %lu, relaxed %lu\n",
		       f->name, f->nst[0], f->nst[1], f->nst[2], f->nrelax);
	ksft_print_msg("%s: %lu unwalkable chains, %lu abandoned, %lu settles\n",
		       f->name, f->nbroken, f->nabandon, f->nsettle);
	ksft_print_msg("%s: checked %lu shadow sectors, %lu frames, %lu dirty logs\n",
		       f->name, f->nshadow_chk, f->nframes, f->nlogchk);
	ksft_print_msg("%s: %lu ms waiting for chains that must come back\n",
		       f->name, f->nmust);
	ksft_print_msg("%s: odd memory tables %lu taken, %lu refused\n",
		       f->name, f->nbogus_ok, f->nbogus_err);
	/*
	 * A run that hardly ran tested nothing: a floor, a tenth of usual,
	 * in proportion to the seconds the run was given.
	 */
	EXPECT_LE(FZ_MIN_STEPS * fz_seconds(1, 1) / FZ_DEF_SECONDS, f->step)
		TH_LOG("%s: only %lu steps", f->name, f->step);
	fflush(stdout);
}

TEST_HARNESS_MAIN
