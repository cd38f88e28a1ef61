// SPDX-License-Identifier: GPL-2.0-only
/*
 * vhost-blk: an in-kernel virtio-blk backend.
 *
 * What it does for a VMM and a guest (requests, limits, errors, workers,
 * busy polling): Documentation/virt/vhost-blk.rst.  This comment says
 * where things run, what protects what, and what keeps what alive.
 *
 * Where things run.  A ring's kick runs vhost_blk_handle_kick() on the
 * ring's vhost worker (the owner's thread): it takes every available
 * request and submits it, as a kiocb to the backing file or, for a block
 * device opened O_DIRECT, as a bio.  Direct I/O completes asynchronously,
 * in any context (interrupts too): the completion only adds the request to
 * the ring's completed list and queues complete_work, which returns the
 * batch to the guest on the ring's worker.  Page-cache I/O completes
 * within its submission where it needs no waiting (IOCB_NOWAIT).  The rest
 * of it, and FLUSH, DISCARD and WRITE_ZEROES, which may wait for the
 * backend for long, go to the ring's slow_work on vhost_blk_wq, in the
 * owner's credentials and cgroups.
 *
 * Locking.
 *  - dev.mutex (the vhost core's): the backend file, ring start and stop,
 *    quiesces, features, the worker policy; taken by ioctls and the
 *    release, before any ring's mutex.  A quiesce drops it while it waits
 *    (completions may need an IOTLB update, which takes it).
 *  - vq->mutex: everything of one ring the request path uses (slots, free
 *    list, inflight, paused, the used ring); the handler and complete_work
 *    run under it.  Nothing on the request path takes another ring's.
 *  - completed, slow: lock-free lists (llist), added to in any context,
 *    emptied under vq->mutex and in slow_work respectively.
 *  - serial_lock: the serial, read by GET_ID on any ring.
 *  Functions that need a lock say so with lockdep_assert_held().
 *
 * Lifetime.  A request lives in a slot its ring allocated when it started;
 * it holds the slot from submission until complete_work (or a drain)
 * gives it back.  The backing file is used without a reference per
 * request: it is swapped only with every ring paused and drained
 * (vhost_blk_quiesce()), so no request outlives the file it was submitted
 * to.  A completion queues complete_work in an RCU read section, and the
 * release and VHOST_RESET_OWNER wait a grace period after the drain and
 * before the last flush of the workers, so the worker and the device
 * outlive it (vhost_blk_req_done()).  Requests stuck on their backend do
 * not hold the closing task: after VHOST_BLK_RELEASE_WAIT the rest of the
 * release runs on vhost_blk_wq, which module exit destroys, those
 * requests no longer touch the VMM's memory, and those not yet begun never
 * reach the backend (blk->gone).
 */
#include <linux/blkdev.h>
#include <linux/cgroup.h>
#include <linux/compat.h>
#include <linux/cred.h>
#include <linux/debugfs.h>
#include <linux/falloc.h>
#include <linux/file.h>
#include <linux/fs.h>
#include <linux/fsnotify.h>
#include <linux/llist.h>
#include <linux/ioprio.h>
#include <linux/kthread.h>
#include <linux/memcontrol.h>
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/nospec.h>
#include <linux/pagemap.h>
#include <linux/percpu.h>
#include <linux/rcupdate.h>
#include <linux/sched/clock.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/task_io_accounting_ops.h>
#include <linux/uio.h>
#include <linux/vhost.h>
#include <linux/virtio_blk.h>
#include <linux/wait.h>
#include <linux/workqueue.h>

#include "vhost.h"

static unsigned int worker_pool;
module_param(worker_pool, uint, 0644);
MODULE_PARM_DESC(worker_pool,
		 "Workers for rings the VMM did not bind: 0 one per ring, 1 the default one, N a pool of N (default: 0)");

static bool bio_submit = true;
module_param(bio_submit, bool, 0644);
MODULE_PARM_DESC(bio_submit,
		 "Submit I/O to block devices opened O_DIRECT as bios (default: Y)");

static unsigned int busyloop_timeout;
module_param(busyloop_timeout, uint, 0644);
MODULE_PARM_DESC(busyloop_timeout,
		 "Busy-poll time new rings start with, in us, at most 10000 (default: 0, off)");

#define VHOST_BLK_SECTOR_SHIFT	9
#define VHOST_BLK_SECTOR_SIZE	BIT(VHOST_BLK_SECTOR_SHIFT)
/* Requests a ring serves per kick before it yields its worker. */
#define VHOST_BLK_WEIGHT	256
/*
 * Request slots a ring allocates when it starts: one per descriptor of the
 * ring, at most this many (the most requests a ring has in flight).
 */
#define VHOST_BLK_MAX_SLOTS	1024
/*
 * iovecs a slot holds in itself: the header, a few data buffers and the
 * status.  Longer chains (up to VHOST_BLK_SEG_MAX data descriptors, each
 * maybe split at memory-region or IOTLB boundaries) allocate theirs.
 */
#define VHOST_BLK_INLINE_IOVS	8
/*
 * DISCARD and WRITE_ZEROES segments a slot holds in itself (in the room
 * its page-cache iterator takes otherwise); a request with more, up to
 * VHOST_BLK_MAX_DISCARD_SEG, allocates them.
 */
#define VHOST_BLK_INLINE_SEGS	2
/* How often a ring whose filesystem is frozen looks for the thaw. */
#define VHOST_BLK_FROZEN_RETRY	msecs_to_jiffies(10)
/*
 * How long a release waits for requests in flight before it leaves them,
 * and the rest of the teardown, to vhost_blk_wq.
 */
#define VHOST_BLK_RELEASE_WAIT	msecs_to_jiffies(100)

/*
 * Runs the rings' slow_work and the releases that outlive their close.
 * Destroyed, so drained, when the module goes.
 */
static struct workqueue_struct *vhost_blk_wq;

#ifdef CONFIG_DEBUG_FS
/*
 * Requests the bio path took (vhost_blk_bio_rw()), per CPU so that rings
 * share no cache line for it: debugfs vhost-blk/bio_requests shows the sum,
 * for tests that must know which path served them.
 */
static DEFINE_PER_CPU(unsigned long, vhost_blk_bio_requests);
static struct dentry *vhost_blk_debugfs;

static void vhost_blk_count_bio(void)
{
	this_cpu_inc(vhost_blk_bio_requests);
}

static int vhost_blk_bio_requests_get(void *data, u64 *val)
{
	u64 sum = 0;
	int cpu;

	for_each_possible_cpu(cpu)
		sum += per_cpu(vhost_blk_bio_requests, cpu);
	*val = sum;
	return 0;
}
DEFINE_DEBUGFS_ATTRIBUTE(vhost_blk_bio_requests_fops,
			 vhost_blk_bio_requests_get, NULL, "%llu\n");

static void vhost_blk_debugfs_init(void)
{
	vhost_blk_debugfs = debugfs_create_dir("vhost-blk", NULL);
	debugfs_create_file_unsafe("bio_requests", 0400, vhost_blk_debugfs,
				   NULL, &vhost_blk_bio_requests_fops);
}

static void vhost_blk_debugfs_exit(void)
{
	debugfs_remove_recursive(vhost_blk_debugfs);
}
#else
static void vhost_blk_count_bio(void) { }
static void vhost_blk_debugfs_init(void) { }
static void vhost_blk_debugfs_exit(void) { }
#endif

/*
 * The feature bits vhost-blk serves: those that change what it does with a
 * ring or a request.  Bits that only say a config space field is valid
 * (SEG_MAX, BLK_SIZE, MQ, TOPOLOGY, SIZE_MAX, GEOMETRY, RO, CONFIG_WCE) are
 * the VMM's: it owns the config space, offers them itself and never sends
 * them here (VHOST_SET_FEATURES refuses them).
 */
static const int vhost_blk_bits[] = {
	VHOST_FEATURES,
	VIRTIO_F_ACCESS_PLATFORM,
	VIRTIO_BLK_F_FLUSH,
	VIRTIO_BLK_F_DISCARD,
	VIRTIO_BLK_F_WRITE_ZEROES,
};

/* All below bit 64: the array form's later words are zero. */
#define VHOST_BLK_FEATURES VHOST_FEATURES_U64(vhost_blk_bits, 0)
/*
 * The longest VHOST_SET/GET_FEATURES_ARRAY a caller may pass, in 64-bit
 * words: virtio defines 128 feature bits today.  Bounds the time the
 * kernel spends on one call.
 */
#define VHOST_BLK_FEATURES_ARRAY_MAX	32

enum {
	VHOST_BLK_BACKEND_FEATURES = (1ULL << VHOST_BACKEND_F_IOTLB_MSG_V2),
};

struct vhost_blk_vq {
	struct vhost_virtqueue vq;
	/* Requests done and waiting to be returned; any context may add. */
	struct llist_head completed;
	/*
	 * The task submitting this ring's requests, from the handler's plug
	 * to its last submission, or NULL.  A request that completes in that
	 * task meanwhile (the block layer completes inline, in the submitting
	 * context, as null_blk does, or an interrupt arrives on its CPU) is
	 * only put on @completed: the handler returns it itself once its
	 * submissions are out, with no trip through complete_work.  Written
	 * by the handler under vq.mutex; read in any context without it
	 * (READ_ONCE/WRITE_ONCE): only the task it names, or an interrupt
	 * of that task, can see itself in it.  Next to @completed, which
	 * every completion writes anyway.
	 */
	struct task_struct *submitter;
	/* Returns completed requests to the guest, on the ring's worker. */
	struct vhost_work complete_work;
	/*
	 * Requests that may wait for their backend for long: FLUSH, DISCARD
	 * and WRITE_ZEROES.  The handler puts
	 * them here and slow_work serves them in order on vhost_blk_wq,
	 * holding neither vq.mutex nor the ring's worker, so that a stalled
	 * backend keeps no VMM ioctl, and no exit of the owner, waiting.  The
	 * handler adds, slow_work takes; one slow_work per ring bounds the
	 * kworkers a device can keep waiting to its rings.
	 */
	struct llist_head slow;
	struct work_struct slow_work;
	/* The VMM bound this ring to a worker itself.  Under dev.mutex. */
	bool user_bound;
	/* The worker_pool policy was applied.  Under dev.mutex. */
	bool policy_applied;
	/*
	 * The VMM set this ring up (its size, base, addresses or kick) since
	 * the backend was last detached or the owner reset.  Only such a ring
	 * is started: a guest that came back with fewer queues leaves the
	 * others pointing at memory that is no longer theirs.  Under dev.mutex.
	 */
	bool armed;
	/*
	 * Kicks the ring again while the backing file's filesystem is frozen:
	 * the handler never waits for a thaw, it puts the request back and
	 * tries again later.  Cancelled before the ring's worker may go.
	 */
	struct delayed_work frozen_work;
	/*
	 * The rest under vq.mutex.  paused: the handler takes no request (a
	 * quiesce is draining the device).  inflight: requests taken off this
	 * ring and not yet returned; a drain reads it without the mutex
	 * (READ_ONCE/WRITE_ONCE).  full: the handler found no free slot;
	 * returning requests restarts it.
	 */
	bool paused;
	bool full;
	unsigned int inflight;
	/*
	 * Descriptors vhost_get_vq_desc_n() walked for the chain the handler
	 * took last (an indirect table counts one): what
	 * vhost_discard_vq_desc() winds back when the request goes back on
	 * the ring.  Not vq.ndescs, which counts the data descriptors for
	 * seg_max.  Under vq.mutex.
	 */
	unsigned int last_ndesc;
	/*
	 * Request slots: nslots of them, min(vq.num, VHOST_BLK_MAX_SLOTS),
	 * allocated (charged to the owner's memcg) when the ring starts and
	 * reused, so a request costs no allocation.  free: the unused ones.
	 * A ring never has more requests in flight than slots, however often
	 * a guest publishes heads again before they are used.
	 */
	struct vhost_blk_req *slots;
	unsigned int nslots;
	struct vhost_blk_req *free;
	/*
	 * The credentials of the VMM that set the backend (a reference per
	 * ring): the handler and slow_work submit I/O with them, not the
	 * worker's (quota, reserved blocks, setuid stripping, LSM checks).
	 * Set under dev.mutex and vq.mutex while the rings are paused and
	 * drained.
	 */
	const struct cred *cred;
};

struct vhost_blk {
	struct vhost_dev dev;
	struct vhost_blk_vq vqs[VHOST_BLK_MAX_QUEUES];
	/*
	 * Backing file, or NULL.  Under dev.mutex; rings see it as backend.
	 * Requests use it without a reference of their own: it is replaced
	 * or dropped only with every ring paused and drained.
	 */
	struct file *backend;
	/*
	 * Quiesces in progress: rings stay paused while non-zero.  A quiesce
	 * drops dev.mutex while it waits, so that the IOTLB updates that
	 * completions may need can get in.  Under dev.mutex.
	 */
	unsigned int quiesced;
	/*
	 * The device is being released: completions that cannot be returned
	 * (their ring is unreachable through the IOTLB) are dropped, as no
	 * one will answer the miss.  WRITE_ONCE/READ_ONCE.
	 */
	bool dying;
	/*
	 * The release stopped waiting for the requests left and close() has
	 * returned: the VMM may reuse its memory (a new device's rings, say),
	 * so nothing more is written into it, nor read from it, and the disk
	 * may be another device's.  Completions are dropped (no status byte,
	 * used element, log or signal), and slow_work fails every request it
	 * has not started, DISCARD and WRITE_ZEROES included.
	 * Set under dev.mutex, then every ring's mutex is taken once, so a
	 * return in progress ends before close() returns and any later one
	 * sees it (vhost_blk_return() reads it under vq.mutex).  READ_ONCE
	 * elsewhere.
	 */
	bool gone;
	/* A drain waits here; a paused ring's last return wakes it. */
	wait_queue_head_t drain_wq;
	/* Worker ids of the worker_pool policy.  Under dev.mutex. */
	u32 pool[VHOST_BLK_MAX_QUEUES];
	/* Finishes a release that found requests still in flight. */
	struct work_struct release_work;
	/* Protects serial: GET_ID reads it on a worker, SET_SERIAL writes it. */
	spinlock_t serial_lock;
	/* GET_ID answer.  A GET_ID racing with SET_SERIAL sees either one. */
	u8 serial[VHOST_BLK_SERIAL_LEN];
	/*
	 * The guest's write cache mode (VHOST_BLK_SET_WRITEBACK): false makes
	 * every write stable before it completes.  Written under dev.mutex
	 * (WRITE_ONCE), read by the handlers (READ_ONCE): a write submitted
	 * while it changes takes either mode, as on a real disk.
	 */
	bool writeback;
};

/* A request slot; owned by its ring, in use from submit to return. */
struct vhost_blk_req {
	struct kiocb iocb;
	struct llist_node node;		/* on the ring's completed list */
	struct vhost_blk_req *next_free; /* on the ring's free list */
	struct vhost_blk_vq *bvq;
	u8 __user *status_ptr;		/* the request's status byte */
	u64 len;			/* bytes a read or write must move */
	u64 data_written;		/* data bytes written into guest buffers */
	u16 head;
	u8 status;
	bool is_read;
	struct vhost_log *log;		/* dirty log entries, LOG_ALL only */
	unsigned int log_num;
	unsigned int out, in;
	/*
	 * A write that went to a block device as a bio: the page cache of
	 * [pos, pos + len) of file is invalidated before it is returned.
	 */
	bool invalidate;
	/*
	 * An OUT or WRITE_ZEROES that must be stable when it completes: the
	 * device is writethrough (vhost_blk_writethrough()).
	 */
	bool fua;
	struct file *file;
	loff_t pos;
	/* For slow_work: what it serves, and how (see vhost_blk_defer()). */
	u32 type;			/* VIRTIO_BLK_T_* */
	/*
	 * DISCARD and WRITE_ZEROES: their nseg segments, inline_segs or an
	 * allocation of their own; NULL for other requests.
	 */
	struct virtio_blk_discard_write_zeroes *segs;
	union {
		struct {		/* DISCARD, WRITE_ZEROES */
			unsigned int nseg;
			struct virtio_blk_discard_write_zeroes
				inline_segs[VHOST_BLK_INLINE_SEGS];
		};
		struct {		/* IN, OUT through the page cache */
			struct iov_iter iter;	/* what is left to move */
			u64 done;		/* bytes the worker moved */
		};
	};
	struct cgroup_subsys_state *blkcg, *memcg; /* the worker's */
#ifdef CONFIG_FAULT_INJECTION
	int make_it_fail;		/* the worker's fault-injection mark */
#endif
	struct iovec *iov;		/* the chain, out then in */
	struct iovec inline_iov[VHOST_BLK_INLINE_IOVS];
};

static struct vhost_blk *vhost_blk_of(struct vhost_virtqueue *vq)
{
	return container_of(vq->dev, struct vhost_blk, dev);
}

/*
 * Take a free slot (the handler made sure there is one) for a request of
 * @niov iovecs and @log_num log entries; NULL when a chain too long for the
 * slot's iovecs, or the log, finds no memory.  Under vq.mutex.
 */
static struct vhost_blk_req *vhost_blk_req_get(struct vhost_blk_vq *bvq,
					       unsigned int niov,
					       unsigned int log_num)
{
	struct vhost_blk_req *req = bvq->free;

	lockdep_assert_held(&bvq->vq.mutex);
	req->iov = req->inline_iov;
	if (unlikely(niov > VHOST_BLK_INLINE_IOVS)) {
		req->iov = kmalloc_array(niov, sizeof(*req->iov),
					 GFP_KERNEL_ACCOUNT);
		if (!req->iov)
			return NULL;
	}
	req->log = NULL;
	req->log_num = 0;
	if (unlikely(log_num)) {
		req->log = kmemdup(bvq->vq.log, log_num * sizeof(*bvq->vq.log),
				   GFP_KERNEL_ACCOUNT);
		if (!req->log) {
			if (req->iov != req->inline_iov)
				kfree(req->iov);
			return NULL;
		}
		req->log_num = log_num;
	}
	bvq->free = req->next_free;
	WRITE_ONCE(bvq->inflight, bvq->inflight + 1);
	req->segs = NULL;
	req->invalidate = false;
	req->fua = false;
	req->data_written = 0;
	req->is_read = false;
	return req;
}

/*
 * Give @req's slot back to its ring.  Under vq.mutex.  The last request of
 * a paused ring wakes the drain: it paused the ring under vq.mutex before it
 * looked at inflight, so either it sees zero or we see it paused.
 */
static void vhost_blk_req_put(struct vhost_blk_req *req)
{
	struct vhost_blk_vq *bvq = req->bvq;

	lockdep_assert_held(&bvq->vq.mutex);
	if (unlikely(req->iov != req->inline_iov))
		kfree(req->iov);
	kfree(req->log);
	if (unlikely(req->segs != req->inline_segs))
		kfree(req->segs);
	req->next_free = bvq->free;
	bvq->free = req;
	WRITE_ONCE(bvq->inflight, bvq->inflight - 1);
	if (unlikely(!bvq->inflight && bvq->paused))
		wake_up(&vhost_blk_of(&bvq->vq)->drain_wq);
}

/* Free @bvq's slots; none is in use.  Under vq.mutex. */
static void vhost_blk_free_slots(struct vhost_blk_vq *bvq)
{
	lockdep_assert_held(&bvq->vq.mutex);
	WARN_ON_ONCE(bvq->inflight);
	kvfree(bvq->slots);
	bvq->slots = NULL;
	bvq->free = NULL;
	bvq->nslots = 0;
}

/*
 * Give @bvq a slot per descriptor of its ring (at most VHOST_BLK_MAX_SLOTS),
 * keeping the slots it has if they are as many.  Under vq.mutex, with no
 * request in flight (the ring is not attached).
 */
static int vhost_blk_alloc_slots(struct vhost_blk_vq *bvq)
{
	unsigned int n = min_t(unsigned int, bvq->vq.num, VHOST_BLK_MAX_SLOTS);
	unsigned int i;

	lockdep_assert_held(&bvq->vq.mutex);
	if (bvq->slots && bvq->nslots == n)
		return 0;
	vhost_blk_free_slots(bvq);
	bvq->slots = kvcalloc(n, sizeof(*bvq->slots), GFP_KERNEL_ACCOUNT);
	if (!bvq->slots)
		return -ENOMEM;
	bvq->nslots = n;
	for (i = 0; i < n; i++) {
		bvq->slots[i].bvq = bvq;
		bvq->slots[i].next_free = i + 1 < n ? &bvq->slots[i + 1] : NULL;
	}
	bvq->free = bvq->slots;
	return 0;
}

/* Finish @req with @status; safe from any context. */
static void vhost_blk_req_done(struct vhost_blk_req *req, u8 status)
{
	struct vhost_blk_vq *bvq = req->bvq;

	req->status = status;
	if (status != VIRTIO_BLK_S_OK)
		req->data_written = 0;	/* only the status byte */
	/*
	 * Completed within the handler's own submissions: it returns the
	 * request after them (vhost_blk_return_inline()), holding vq.mutex
	 * and with its worker, so neither can go meanwhile.
	 */
	if (READ_ONCE(bvq->submitter) == current) {
		llist_add(&req->node, &bvq->completed);
		return;
	}
	/*
	 * Once the request is on the list, the ring's worker (or a drain,
	 * below) may return it, the drain may finish and the device be
	 * released.  The read section keeps the worker and the device valid
	 * until the work is queued: pairs with the synchronize_rcu() that
	 * vhost_blk_release() and vhost_blk_reset_owner() do after the drain
	 * and before their last flush, so that the flush runs the work and
	 * the vhost core, which frees the workers without a grace period of
	 * its own, frees none with work queued.
	 *
	 * The ring has no worker when the owner was killed: its vhost_task
	 * worker took itself off its rings (vhost_worker_killed()) and the
	 * work cannot be queued.  The drain returns such requests instead:
	 * wake it.
	 */
	rcu_read_lock();
	llist_add(&req->node, &bvq->completed);
	if (!vhost_vq_work_queue(&bvq->vq, &bvq->complete_work))
		wake_up(&vhost_blk_of(&bvq->vq)->drain_wq);
	rcu_read_unlock();
}

static void vhost_blk_rw_complete(struct kiocb *iocb, long ret)
{
	struct vhost_blk_req *req = container_of(iocb, struct vhost_blk_req, iocb);

	/* Freeze protection taken in vhost_blk_rw(), handed over to us. */
	if (iocb->ki_flags & IOCB_WRITE)
		kiocb_end_write(iocb);
	/* A short transfer is an error: the guest asked for all of it. */
	if (ret < 0 || (u64)ret != req->len) {
		vhost_blk_req_done(req, VIRTIO_BLK_S_IOERR);
		return;
	}
	if (req->is_read)
		req->data_written = req->len;
	vhost_blk_req_done(req, VIRTIO_BLK_S_OK);
}

/*
 * Log what the device wrote into the guest for a request submitted under
 * LOG_ALL: @data bytes from the start of the in part, and the status byte,
 * which is the last byte of the last non-empty writable descriptor (each has
 * a log entry, in order).
 */
static void vhost_blk_log(struct vhost_virtqueue *vq, struct vhost_log *log,
			  unsigned int log_num, u64 data, struct iovec *in_iov,
			  unsigned int in, u8 __user *status_ptr)
{
	struct iovec status_iov = {
		.iov_base = status_ptr,
		.iov_len = 1,
	};
	struct vhost_log status_log;

	if (data)
		vhost_log_write(vq, log, log_num, data, in_iov, in);
	if (!log_num)
		return;
	status_log.addr = log[log_num - 1].addr + log[log_num - 1].len - 1;
	status_log.len = 1;
	vhost_log_write(vq, &status_log, 1, 1, &status_iov, 1);
}

/*
 * A write that went to a block device as a bio left whatever a buffered
 * reader cached of its range meanwhile stale: drop it, as a direct write
 * through the VFS does.  Pages that cannot be dropped (mapped, dirty) stay,
 * as there.  On the ring's worker.
 */
static void vhost_blk_invalidate(struct vhost_blk_req *req)
{
	struct address_space *mapping = req->file->f_mapping;

	if (READ_ONCE(mapping->nrpages))
		invalidate_inode_pages2_range(mapping, req->pos >> PAGE_SHIFT,
					      (req->pos + req->len - 1) >> PAGE_SHIFT);
}

/*
 * Return the completed requests at @node (taken off bvq->completed) to the
 * guest: status bytes, used ring, one signal.  Under vq.mutex, on the
 * ring's worker.
 */
static void vhost_blk_return(struct vhost_blk_vq *bvq, struct llist_node *node)
{
	struct vhost_virtqueue *vq = &bvq->vq;
	struct vhost_blk *blk = vhost_blk_of(vq);
	/* vhost_dev_init() gave every ring UIO_MAXIOV of them. */
	struct vring_used_elem *used = vq->heads;
	struct vhost_blk_req *req, *tmp;
	unsigned int nused = 0;
	bool drop = false;

	lockdep_assert_held(&vq->mutex);
	BUILD_BUG_ON(VHOST_BLK_MAX_SLOTS > UIO_MAXIOV);
	/* Closed: the VMM's memory may be someone else's now. */
	if (unlikely(READ_ONCE(blk->gone))) {
		drop = true;
	} else if (unlikely(!vq_meta_prefetch(vq))) {
		/*
		 * The used ring may be unreachable through the device IOTLB:
		 * the miss went to the VMM, and the update that answers it
		 * queues the kick handler, which queues us again.  Keep the
		 * requests until then, unless no one may answer: the device is
		 * being released, or the rings are paused, that is a VMM thread
		 * waits for these requests in an ioctl, and that thread may
		 * well be the one that answers misses (QEMU answers them from
		 * its main loop, which is where it stops and resets devices).
		 * Waiting for it would hang the VMM: the requests are dropped
		 * instead, never returned to the guest.
		 */
		if (!READ_ONCE(blk->dying) && !bvq->paused) {
			llist_for_each_entry_safe(req, tmp, node, node)
				llist_add(&req->node, &bvq->completed);
			return;
		}
		if (!READ_ONCE(blk->dying))
			pr_warn_ratelimited("vhost-blk: ring %td stopped with its used ring unmapped: requests dropped\n",
					    bvq - blk->vqs);
		drop = true;
	}
	node = llist_reverse_order(node);
	llist_for_each_entry_safe(req, tmp, node, node) {
		/* The used length is 32 bits; the log gets the whole count. */
		u32 used_len = min_t(u64, req->data_written + 1, U32_MAX);

		/* Before the guest may read the range again through us. */
		if (unlikely(req->invalidate))
			vhost_blk_invalidate(req);
		if (unlikely(drop)) {
			vhost_blk_req_put(req);
			continue;
		}
		if (put_user(req->status, req->status_ptr))
			vq_err(vq, "vhost-blk: cannot write status of request %u\n",
			       req->head);
		/* A read that failed may have written any of its buffer. */
		if (unlikely(req->log_num))
			vhost_blk_log(vq, req->log, req->log_num,
				      req->is_read ? req->len : req->data_written,
				      req->iov + req->out, req->in,
				      req->status_ptr);
		used[nused].id = cpu_to_vhost32(vq, req->head);
		used[nused].len = cpu_to_vhost32(vq, used_len);
		nused++;
		/*
		 * The slot is free again; its entry is published below,
		 * before a drain this may wake can finish: the drain
		 * waits for vq.mutex.
		 */
		vhost_blk_req_put(req);
	}
	if (drop)
		return;
	/*
	 * At most one request per slot is in flight: the list fits.  One
	 * used index update and one signal for the whole batch; the status
	 * bytes written above are visible before the index (the barrier in
	 * vhost_add_used_n()).
	 */
	vhost_add_used_n(vq, used, NULL, nused);
	vhost_signal(&blk->dev, vq);
	/*
	 * Slots came free for a handler that ran out of them; or the ring
	 * busy-polls, and the guest, which has just seen its requests, is
	 * about to send more: let the handler poll for them instead of
	 * sleeping until a kick.
	 */
	if ((bvq->full || vq->busyloop_timeout) && !bvq->paused) {
		bvq->full = false;
		vhost_poll_queue(&vq->poll);
	}
}

static void vhost_blk_complete_work(struct vhost_work *work)
{
	struct vhost_blk_vq *bvq = container_of(work, struct vhost_blk_vq,
						complete_work);
	struct llist_node *node;

	node = llist_del_all(&bvq->completed);
	if (!node)
		return;
	mutex_lock(&bvq->vq.mutex);
	vhost_blk_return(bvq, node);
	mutex_unlock(&bvq->vq.mutex);
}

/*
 * The handler's submissions are out: stop taking completions inline and
 * return those that came.  Clearing submitter first leaves no gap: a
 * completion in this task (an interrupt of it) before the store is on
 * the list when it is read below, in program order; any after it queues
 * complete_work.  Under vq.mutex.
 */
static void vhost_blk_return_inline(struct vhost_blk_vq *bvq)
{
	struct llist_node *node;

	lockdep_assert_held(&bvq->vq.mutex);
	WRITE_ONCE(bvq->submitter, NULL);
	node = llist_del_all(&bvq->completed);
	if (node)
		vhost_blk_return(bvq, node);
}

/*
 * Give back the slots of the completed requests at @node without returning
 * them to the guest.  Under vq.mutex.
 */
static void vhost_blk_drop_completed(struct llist_node *node)
{
	struct vhost_blk_req *req, *tmp;

	llist_for_each_entry_safe(req, tmp, node, node) {
		if (unlikely(req->invalidate))
			vhost_blk_invalidate(req);
		vhost_blk_req_put(req);
	}
}

/*
 * Whether a ring has completed requests that no worker will return: its
 * worker was killed with the owner (a vhost_task worker dies on SIGKILL and
 * leaves its rings), so vhost_blk_req_done() could not queue complete_work.
 * A hint, without locks: vhost_blk_reap() looks again under the ring's mutex.
 */
static bool vhost_blk_orphaned(struct vhost_blk *blk)
{
	int i;

	for (i = 0; i < VHOST_BLK_MAX_QUEUES; i++)
		if (!llist_empty(&blk->vqs[i].completed) &&
		    !rcu_access_pointer(blk->vqs[i].vq.worker))
			return true;
	return false;
}

/*
 * Drop the completed requests of rings that have no worker, so a drain
 * (the release one above all) ends after the owner was killed with requests
 * in flight.  They are not returned: the guest's VMM is gone, and so may be
 * the mm the used ring lives in.  -EINTR when @killable and a fatal signal
 * ends the wait for a ring's mutex.
 */
static int vhost_blk_reap(struct vhost_blk *blk, bool killable)
{
	int i;

	for (i = 0; i < VHOST_BLK_MAX_QUEUES; i++) {
		struct vhost_blk_vq *bvq = &blk->vqs[i];

		if (llist_empty(&bvq->completed))
			continue;
		if (!killable)
			mutex_lock(&bvq->vq.mutex);
		else if (mutex_lock_killable(&bvq->vq.mutex))
			return -EINTR;
		/* A worker that is still there returns them itself. */
		if (!vhost_vq_work_queue(&bvq->vq, &bvq->complete_work))
			vhost_blk_drop_completed(llist_del_all(&bvq->completed));
		mutex_unlock(&bvq->vq.mutex);
	}
	return 0;
}

/* Pages of zeroes one write of vhost_blk_zero_fill() takes. */
#define VHOST_BLK_ZERO_PAGES	16

/*
 * Write zeroes over [pos, pos + len), for a file that cannot zero a range
 * itself: from the zero page, so direct I/O takes it too (a tmpfs file
 * opened O_DIRECT has no FALLOC_FL_ZERO_RANGE).  vfs_iter_write() takes
 * freeze protection itself.
 */
static int vhost_blk_zero_fill(struct file *file, loff_t pos, u64 len)
{
	struct bio_vec bv[VHOST_BLK_ZERO_PAGES];
	struct iov_iter iter;
	ssize_t r;
	int i;

	for (i = 0; i < ARRAY_SIZE(bv); i++)
		bv[i] = (struct bio_vec){ .bv_page = ZERO_PAGE(0),
					  .bv_len = PAGE_SIZE };
	while (len) {
		size_t n = min_t(u64, len, ARRAY_SIZE(bv) * PAGE_SIZE);

		iov_iter_bvec(&iter, WRITE, bv, DIV_ROUND_UP(n, PAGE_SIZE), n);
		r = vfs_iter_write(file, &iter, &pos, 0);
		if (r < 0)
			return r;
		if (!r)
			return -EIO;
		len -= r;
		/* At most VHOST_BLK_MAX_WRITE_ZEROES_SECTORS: stay polite. */
		cond_resched();
	}
	return 0;
}

/*
 * WRITE_ZEROES: make [pos, pos + len) read as zeroes.  With @unmap the space
 * may be given back (PUNCH_HOLE, which on a block device is a write-zeroes
 * that may unmap); without it, or where that is not supported, zero it:
 * ZERO_RANGE, or zeroes written where the file cannot do that.
 * vfs_fallocate() and vfs_iter_write() take freeze protection themselves.
 */
static int vhost_blk_write_zeroes(struct file *file, loff_t pos, u64 len,
				  bool unmap)
{
	int r;

	if (unmap) {
		r = vfs_fallocate(file, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
				  pos, len);
		if (r != -EOPNOTSUPP)
			return r;
	}
	r = vfs_fallocate(file, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, pos, len);
	if (r != -EOPNOTSUPP)
		return r;
	return vhost_blk_zero_fill(file, pos, len);
}

/*
 * Drop the page cache of [start, end] (inclusive) of the block device
 * behind @file before a discard, as BLKDISCARD does.  Truncating it is only
 * safe when no one else holds the device exclusively: a mounted filesystem
 * or a dm/md device has buffer heads on those pages that it still uses.
 * So claim the device for the truncation (an exclusive open of ours already
 * is a claim), and when someone else holds it only invalidate, which leaves
 * pages in use alone and then fails.  Under the mapping's invalidate lock.
 */
static int vhost_blk_drop_bdev_cache(struct file *file,
				     struct block_device *bdev,
				     loff_t start, loff_t end)
{
	struct address_space *mapping = file->f_mapping;
	/*
	 * An O_EXCL open claimed the device with the file as holder, in
	 * private_data (blkdev_open()); O_EXCL itself is gone from f_flags.
	 */
	bool claim = !file->private_data;

	if (claim && bd_prepare_to_claim(bdev, vhost_blk_drop_bdev_cache, NULL))
		return invalidate_inode_pages2_range(mapping, start >> PAGE_SHIFT,
						     end >> PAGE_SHIFT);
	truncate_inode_pages_range(mapping, start, end);
	if (claim)
		bd_abort_claiming(bdev, vhost_blk_drop_bdev_cache);
	return 0;
}

/*
 * DISCARD: a hint that [pos, pos + len) is unused.  Never writes data: a
 * block device gets REQ_OP_DISCARD (nothing when it cannot discard, or when
 * its cached pages of the range are in use by someone holding it), a file
 * gets a hole punched (nothing when the filesystem cannot punch holes).
 */
static int vhost_blk_discard(struct file *file, loff_t pos, u64 len)
{
	struct address_space *mapping = file->f_mapping;
	struct block_device *bdev;
	u64 mask, start, end;
	int r;

	if (!S_ISBLK(file_inode(file)->i_mode)) {
		r = vfs_fallocate(file, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
				  pos, len);
		return r == -EOPNOTSUPP ? 0 : r;
	}
	bdev = I_BDEV(mapping->host);
	/* As for a write: BLKROSET may have come after SET_BACKEND. */
	if (bdev_read_only(bdev))
		return -EPERM;
	if (!bdev_max_discard_sectors(bdev))
		return 0;
	/* A hint: discard the logical blocks wholly inside the range. */
	mask = bdev_logical_block_size(bdev) - 1;
	start = round_up(pos, mask + 1);
	end = round_down(pos + len, mask + 1);
	if (start >= end)
		return 0;
	/*
	 * Cached pages of the range go first, as for BLKDISCARD: otherwise
	 * reads would see them and writeback would bring them back.  Data the
	 * guest wrote to the range may be dropped: a discard allows it.  When
	 * they cannot go, the hint is not taken.
	 */
	filemap_invalidate_lock(mapping);
	r = vhost_blk_drop_bdev_cache(file, bdev, start, end - 1);
	if (!r)
		r = blkdev_issue_discard(bdev, start >> VHOST_BLK_SECTOR_SHIFT,
					 (end - start) >> VHOST_BLK_SECTOR_SHIFT,
					 GFP_KERNEL);
	else
		r = 0;
	filemap_invalidate_unlock(mapping);
	return r == -EOPNOTSUPP ? 0 : r;
}

static bool vhost_blk_range_ok(struct file *file, u64 sector, u64 len)
{
	u64 capacity = i_size_read(file->f_mapping->host);

	if (len & (VHOST_BLK_SECTOR_SIZE - 1))
		return false;
	if (sector > U64_MAX >> VHOST_BLK_SECTOR_SHIFT)
		return false;
	sector <<= VHOST_BLK_SECTOR_SHIFT;
	return sector <= capacity && len <= capacity - sector;
}

/*
 * Copy the segments of a DISCARD (@discard) or WRITE_ZEROES request from
 * @from into @req and check them: VIRTIO_BLK_S_OK when slow_work may carry
 * them out (vhost_blk_discard_zeroes()), the request's status otherwise.
 * Each segment is checked on its own (its sectors, its flags); they may
 * overlap or come in any order, as the spec does not forbid it.  Under
 * vq.mutex.
 */
static u8 vhost_blk_get_segs(struct vhost_blk_req *req, struct file *file,
			     struct iov_iter *from, bool discard)
{
	struct virtio_blk_discard_write_zeroes *seg;
	size_t n = iov_iter_count(from);
	u32 flags, nsect, max;

	if (!n || n % sizeof(*seg) ||
	    n / sizeof(*seg) > VHOST_BLK_MAX_DISCARD_SEG)
		return VIRTIO_BLK_S_IOERR;
	max = discard ? VHOST_BLK_MAX_DISCARD_SECTORS :
			VHOST_BLK_MAX_WRITE_ZEROES_SECTORS;
	req->nseg = n / sizeof(*seg);
	req->segs = req->inline_segs;
	if (req->nseg > VHOST_BLK_INLINE_SEGS) {
		/* Freed by vhost_blk_req_put(), whatever the status. */
		req->segs = kmalloc_array(req->nseg, sizeof(*seg),
					  GFP_KERNEL_ACCOUNT);
		if (!req->segs)
			return VIRTIO_BLK_S_IOERR;
	}
	for (seg = req->segs; seg < req->segs + req->nseg; seg++) {
		if (copy_from_iter(seg, sizeof(*seg), from) != sizeof(*seg))
			return VIRTIO_BLK_S_IOERR;
		nsect = le32_to_cpu(seg->num_sectors);
		flags = le32_to_cpu(seg->flags);
		if (discard ? flags : flags & ~VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP)
			return VIRTIO_BLK_S_UNSUPP;
		if (nsect > max ||
		    !vhost_blk_range_ok(file, le64_to_cpu(seg->sector),
					(u64)nsect << VHOST_BLK_SECTOR_SHIFT))
			return VIRTIO_BLK_S_IOERR;
	}
	return VIRTIO_BLK_S_OK;
}

/*
 * Carry out the segments vhost_blk_get_segs() checked, in the order the
 * guest gave them; the first that fails ends the request with IOERR (the
 * ones before it are done, as when a guest's own multi-range request fails
 * part way).  On vhost_blk_wq.
 */
static u8 vhost_blk_discard_zeroes(struct vhost_blk_req *req)
{
	struct virtio_blk_discard_write_zeroes *seg;
	loff_t pos;
	u64 len;
	int r;

	for (seg = req->segs; seg < req->segs + req->nseg; seg++) {
		pos = le64_to_cpu(seg->sector) << VHOST_BLK_SECTOR_SHIFT;
		len = (u64)le32_to_cpu(seg->num_sectors) << VHOST_BLK_SECTOR_SHIFT;
		if (req->type == VIRTIO_BLK_T_DISCARD)
			r = vhost_blk_discard(req->file, pos, len);
		else
			r = vhost_blk_write_zeroes(req->file, pos, len,
						   le32_to_cpu(seg->flags) &
						   VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP);
		/* Writethrough: the zeroes are stable before it completes. */
		if (!r && req->fua)
			r = vfs_fsync_range(req->file, pos, pos + len - 1, 1);
		if (r)
			return VIRTIO_BLK_S_IOERR;
	}
	return VIRTIO_BLK_S_OK;
}

/*
 * Whether every page of @bio is dirty.  A guest's memory is read into again
 * and again, so its pages mostly are: the checks below then cost one pass
 * over the bio_vecs, not the page lock of bio_set_pages_dirty() and the
 * extra pass of bio_check_pages_dirty().
 */
static bool vhost_blk_pages_dirty(struct bio *bio)
{
	struct bvec_iter_all iter_all;
	struct bio_vec *bvec;

	bio_for_each_segment_all(bvec, bio, iter_all)
		if (!PageDirty(bvec->bv_page) && !PageCompound(bvec->bv_page))
			return false;
	return true;
}

/*
 * The bio is freed here, not when the request is returned: it comes from
 * fs_bio_set's mempool, which the ring's worker allocates from, and an
 * element only the worker could give back would leave it waiting for
 * itself once the pool is empty.  The pages a read filled were dirtied
 * before it was submitted; bio_check_pages_dirty() dirties again (from a
 * workqueue, as that may sleep) any that were cleaned meanwhile, and
 * releases them and the bio.
 */
static void vhost_blk_bio_end_io(struct bio *bio)
{
	struct vhost_blk_req *req = bio->bi_private;
	u8 status = bio->bi_status ? VIRTIO_BLK_S_IOERR : VIRTIO_BLK_S_OK;

	if (req->is_read && !vhost_blk_pages_dirty(bio)) {
		bio_check_pages_dirty(bio);
	} else {
		bio_release_pages(bio, false);
		bio_put(bio);
	}
	if (req->is_read && status == VIRTIO_BLK_S_OK)
		req->data_written = req->len;
	vhost_blk_req_done(req, status);
}

/*
 * The bio path: a read or a write of a block device opened O_DIRECT that
 * fits in one bio goes to the device as that bio, pinning the guest's
 * pages.  What the kiocb path (blkdev_direct_IO() under the VFS) does, with
 * the same checks and the same page cache rules, without its layers:
 * the LSM and fsnotify permission hook of rw_verify_area() (the position
 * was checked against the capacity), cached pages of the range written
 * back first and, for a write, dropped before and again after it (see
 * vhost_blk_invalidate()).  Like the async kiocb path, no fsnotify event:
 * the VFS sends none for queued I/O either.  False when the request must
 * take the kiocb path: not aligned to the logical block (that path fails it
 * as it should), larger than a bio, a write the device must refuse, a hook
 * that refuses it, cached pages that cannot be written back or dropped.
 */
static bool vhost_blk_bio_rw(struct vhost_blk_req *req, struct file *file,
			     struct iov_iter *iter, loff_t pos)
{
	struct address_space *mapping = file->f_mapping;
	struct block_device *bdev = I_BDEV(mapping->host);
	unsigned int mask = bdev_logical_block_size(bdev) - 1;
	loff_t end = pos + iov_iter_count(iter) - 1;
	blk_opf_t opf = REQ_OP_READ;
	struct bio *bio;
	int nr_pages;

	/* Memory alignment: bio_iov_iter_get_pages() checks it below. */
	if (!iov_iter_count(iter) ||
	    ((u64)pos | iov_iter_count(iter)) & mask)
		return false;
	if (!req->is_read) {
		if (bdev_read_only(bdev) || IS_SWAPFILE(mapping->host))
			return false;
		opf = REQ_OP_WRITE | REQ_SYNC | REQ_IDLE;
		if (req->fua)
			opf |= REQ_FUA;
	}
	/* The kiocb path's checks: LSM, fanotify permission events. */
	if (rw_verify_area(req->is_read ? READ : WRITE, file, &pos,
			   iov_iter_count(iter)))
		return false;
	nr_pages = iov_iter_npages(iter, BIO_MAX_VECS + 1);
	if (nr_pages > BIO_MAX_VECS)
		return false;
	/*
	 * Someone read or wrote the device through the page cache (udev,
	 * blkid, another fd of the VMM): dirty pages of the range reach the
	 * device before we read it, and a write drops the cached ones.
	 */
	if (READ_ONCE(mapping->nrpages)) {
		if (filemap_write_and_wait_range(mapping, pos, end))
			return false;
		if (!req->is_read &&
		    invalidate_inode_pages2_range(mapping, pos >> PAGE_SHIFT,
						  end >> PAGE_SHIFT))
			return false;
	}
	/*
	 * From fs_bio_set's mempool, with direct reclaim allowed: never fails.
	 * Its elements come back from end_io, never from this worker, so the
	 * wait for one always ends.
	 */
	bio = bio_alloc(bdev, nr_pages, opf, GFP_KERNEL);
	bio->bi_iter.bi_sector = pos >> SECTOR_SHIFT;
	/* As the kiocb path, whose kiocb carries the submitter's. */
	bio->bi_ioprio = get_current_ioprio();
	bio->bi_end_io = vhost_blk_bio_end_io;
	bio->bi_private = req;
	if (bio_iov_iter_get_pages(bio, iter, bdev_dma_alignment(bdev), mask) ||
	    iov_iter_count(iter)) {
		/*
		 * Could not take it all (a bad address, too many segments,
		 * buffers misaligned for the device: -EINVAL with nothing
		 * left in the bio).
		 */
		iov_iter_revert(iter, bio->bi_iter.bi_size);
		bio_release_pages(bio, false);
		bio_put(bio);
		return false;
	}
	if (!req->is_read) {
		req->invalidate = true;
		/* As the kiocb path: submit_bio() accounts only reads. */
		task_io_account_write(bio->bi_iter.bi_size);
	} else if (!vhost_blk_pages_dirty(bio)) {
		/* As bio_set_pages_dirty(), without locking pages already dirty. */
		bio_set_pages_dirty(bio);
	}
	req->file = file;
	req->pos = pos;
	vhost_blk_count_bio();
	submit_bio(bio);
	return true;
}

/*
 * Write @iter through @iocb, which holds the freeze protection that
 * vhost_blk_submit() took without waiting, if the file is a regular one:
 * the only count this write holds, dropped by vhost_blk_rw_complete().
 * vfs_iocb_iter_write() would take a second one, waiting for a freeze, and
 * drop it only for a synchronous completion (its callers' own completions
 * drop it otherwise): so, as io_uring does, the same checks and
 * notifications around ->write_iter().
 */
static ssize_t vhost_blk_write_iter(struct file *file, struct kiocb *iocb,
				    struct iov_iter *iter)
{
	ssize_t ret;

	if (!iov_iter_count(iter))
		return 0;
	ret = rw_verify_area(WRITE, file, &iocb->ki_pos, iov_iter_count(iter));
	if (ret < 0)
		return ret;
	ret = file->f_op->write_iter(iocb, iter);
	if (ret > 0)
		fsnotify_modify(file);
	return ret;
}

/* A read or a write of @req through the VFS, at req->iocb.ki_pos. */
static ssize_t vhost_blk_rw_iter(struct vhost_blk_req *req,
				 struct iov_iter *iter)
{
	struct file *file = req->iocb.ki_filp;

	if (req->is_read)
		return vfs_iocb_iter_read(file, &req->iocb, iter);
	return vhost_blk_write_iter(file, &req->iocb, iter);
}

/*
 * Whether page-cache I/O of @req can be tried without waiting (IOCB_NOWAIT:
 * -EAGAIN where a page must be read in or a lock waited for).  A write only
 * to a regular file whose filesystem says so, as io_uring checks, and not
 * O_DSYNC (it syncs, waiting, after the copy); a block device answers
 * -EOPNOTSUPP to a buffered write without waiting.
 */
static bool vhost_blk_nowait_ok(struct vhost_blk_req *req, struct file *file)
{
	if (!(file->f_mode & FMODE_NOWAIT))
		return false;
	if (req->is_read)
		return true;
	return S_ISREG(file_inode(file)->i_mode) && !iocb_is_dsync(&req->iocb) &&
	       (file->f_op->fop_flags & FOP_BUFFER_WASYNC);
}

/*
 * slow_work's part of a page-cache read or write: the rest, waiting.  A
 * write takes freeze protection again, waiting for a thaw here, off the
 * ring; its completion drops it.
 */
static ssize_t vhost_blk_rw_slow(struct vhost_blk_req *req)
{
	ssize_t ret;

	req->iocb.ki_flags &= ~IOCB_NOWAIT;
	if (!req->is_read && S_ISREG(file_inode(req->iocb.ki_filp)->i_mode)) {
		kiocb_start_write(&req->iocb);
		req->iocb.ki_flags |= IOCB_WRITE;
	}
	ret = vhost_blk_rw_iter(req, &req->iter);
	if (ret < 0)
		return ret;
	return req->done + ret;
}

/*
 * Hand @req, a request that may wait for its backend for long, to the
 * ring's slow_work.  It runs there in the cgroups of the ring's worker,
 * that is of the owner: I/O it issues and pages it dirties are charged
 * there, not to the kworker's root cgroups.  It carries the worker's
 * fault-injection mark (/proc/PID/make-it-fail) too, so that faults
 * injected into the owner's threads reach what they hand off.  On the
 * ring's worker.
 */
static void vhost_blk_defer(struct vhost_blk_vq *bvq, struct vhost_blk_req *req,
			    struct file *file, u32 type)
{
	req->file = file;
	req->type = type;
	req->blkcg = NULL;
	req->memcg = NULL;
#ifdef CONFIG_BLK_CGROUP
	req->blkcg = task_get_css(current, io_cgrp_id);
#endif
#ifdef CONFIG_MEMCG
	req->memcg = task_get_css(current, memory_cgrp_id);
#endif
#ifdef CONFIG_FAULT_INJECTION
	req->make_it_fail = current->make_it_fail;
#endif
	/* Pairs with the llist_del_all() in vhost_blk_slow_work(). */
	if (llist_add(&req->node, &bvq->slow))
		queue_work(vhost_blk_wq, &bvq->slow_work);
}

/* Serve one deferred request in the owner's mm, cgroups and credentials. */
static void vhost_blk_slow_one(struct vhost_blk_req *req, struct mm_struct *mm,
			       const struct cred *cred)
{
	struct mem_cgroup *old_memcg = NULL;
	const struct cred *old_cred;
	u8 status = VIRTIO_BLK_S_OK;
	ssize_t ret = 0;
#ifdef CONFIG_FAULT_INJECTION
	int old_fail = current->make_it_fail;

	/* Ours until this work item returns: no one else runs on the kworker. */
	current->make_it_fail = req->make_it_fail;
#endif

	kthread_use_mm(mm);
	old_cred = override_creds(cred);
	if (req->blkcg)
		kthread_associate_blkcg(req->blkcg);
#ifdef CONFIG_MEMCG
	if (req->memcg)
		old_memcg = set_active_memcg(mem_cgroup_from_css(req->memcg));
#endif
	/*
	 * Closed (vhost_blk_let_go()): what has not begun never does.  The
	 * buffers may be someone else's memory now, and the VMM may have
	 * handed the disk to another device, whose data a late DISCARD or
	 * WRITE_ZEROES would destroy.
	 */
	if (unlikely(READ_ONCE(vhost_blk_of(&req->bvq->vq)->gone))) {
		ret = -ECANCELED;
		status = VIRTIO_BLK_S_IOERR;
		goto restore_context;
	}
	switch (req->type) {
	case VIRTIO_BLK_T_IN:
	case VIRTIO_BLK_T_OUT:
		ret = vhost_blk_rw_slow(req);
		break;
	case VIRTIO_BLK_T_FLUSH:
		if (vfs_fsync(req->file, 0))
			status = VIRTIO_BLK_S_IOERR;
		break;
	default:
		status = vhost_blk_discard_zeroes(req);
		break;
	}
restore_context:
#ifdef CONFIG_MEMCG
	if (req->memcg)
		set_active_memcg(old_memcg);
#endif
	if (req->blkcg)
		kthread_associate_blkcg(NULL);
	revert_creds(old_cred);
	kthread_unuse_mm(mm);
#ifdef CONFIG_FAULT_INJECTION
	current->make_it_fail = old_fail;
#endif
	if (req->memcg)
		css_put(req->memcg);
	if (req->blkcg)
		css_put(req->blkcg);
	/*
	 * Last: once done, the request may be returned and the device, its
	 * mm reference and the ring's credentials go (a drain waits for it).
	 */
	if (req->type == VIRTIO_BLK_T_IN || req->type == VIRTIO_BLK_T_OUT)
		vhost_blk_rw_complete(&req->iocb, ret);
	else
		vhost_blk_req_done(req, status);
}

/*
 * The ring's deferred requests, in the order the handler took them.  Each
 * is in flight until it is done, so the device, its owner's mm and the
 * ring's credentials stay (a drain waits for it); this function touches
 * nothing of them after the last request is done.  On vhost_blk_wq.
 */
static void vhost_blk_slow_work(struct work_struct *work)
{
	struct vhost_blk_vq *bvq = container_of(work, struct vhost_blk_vq,
						slow_work);
	struct mm_struct *mm = bvq->vq.dev->mm;
	const struct cred *cred = bvq->cred;
	struct vhost_blk_req *req, *tmp;
	struct llist_node *node;
	struct blk_plug plug;

	node = llist_reverse_order(llist_del_all(&bvq->slow));
	blk_start_plug(&plug);
	llist_for_each_entry_safe(req, tmp, node, node) {
		vhost_blk_slow_one(req, mm, cred);
		cond_resched();
	}
	blk_finish_plug(&plug);
}

/*
 * A page-cache read or write: the worker moves what it can without waiting
 * and hands the rest to slow_work, so that a backend that stalls (a
 * suspended device, an unreachable NFS server) holds neither the ring's
 * mutex nor its worker, and no ioctl of the VMM waits for it.  A file that
 * cannot answer without waiting goes to slow_work whole.  On the ring's
 * worker.
 */
static void vhost_blk_rw_cached(struct vhost_blk_req *req, struct file *file,
				struct iov_iter *iter, loff_t pos)
{
	struct iov_iter_state state;
	ssize_t ret;

	req->done = 0;
	if (vhost_blk_nowait_ok(req, file)) {
		req->iocb.ki_flags |= IOCB_NOWAIT;
		iov_iter_save_state(iter, &state);
		ret = vhost_blk_rw_iter(req, iter);
		/* Some filesystems answer -EOPNOTSUPP for IOCB_NOWAIT. */
		if ((u64)ret == req->len ||
		    (ret < 0 && ret != -EAGAIN && ret != -EOPNOTSUPP)) {
			vhost_blk_rw_complete(&req->iocb, ret);
			return;
		}
		/* Resume where the part done without waiting ended. */
		iov_iter_restore(iter, &state);
		if (ret > 0) {
			iov_iter_advance(iter, ret);
			req->done = ret;
		}
	}
	req->iter = *iter;
	req->iocb.ki_pos = pos + req->done;
	/*
	 * A write waiting in slow_work holds no freeze protection: a freeze
	 * would wait for it while the DISCARD or WRITE_ZEROES before it on
	 * the ring's list waits for the freeze.  vhost_blk_rw_slow() takes
	 * it again.
	 */
	if (req->iocb.ki_flags & IOCB_WRITE) {
		kiocb_end_write(&req->iocb);
		req->iocb.ki_flags &= ~IOCB_WRITE;
	}
	vhost_blk_defer(req->bvq, req, file,
			req->is_read ? VIRTIO_BLK_T_IN : VIRTIO_BLK_T_OUT);
}

/*
 * Submit a read or a write; completes through vhost_blk_rw_complete().
 * Direct I/O is asynchronous: the worker does not wait for it.  Page-cache
 * I/O completes on the worker where it needs no waiting, otherwise in
 * slow_work (vhost_blk_rw_cached()).
 */
static void vhost_blk_rw(struct vhost_blk_req *req, struct file *file,
			 struct iov_iter *iter, loff_t pos)
{
	ssize_t ret;

	req->len = iov_iter_count(iter);
	if (READ_ONCE(bio_submit) && S_ISBLK(file_inode(file)->i_mode) &&
	    (READ_ONCE(file->f_flags) & O_DIRECT) &&
	    vhost_blk_bio_rw(req, file, iter, pos))
		return;
	init_sync_kiocb(&req->iocb, file);
	req->iocb.ki_pos = pos;
	if (req->iocb.ki_flags & IOCB_DIRECT)
		req->iocb.ki_complete = vhost_blk_rw_complete;
	/*
	 * Writethrough: direct I/O goes out with FUA (or a flush after it),
	 * page-cache I/O is synced before it completes (generic_write_sync()),
	 * in slow_work: vhost_blk_nowait_ok() refuses a dsync write.
	 */
	if (req->fua)
		req->iocb.ki_flags |= IOCB_DSYNC;
	if (!req->is_read) {
		/*
		 * vhost_blk_submit() took freeze protection; the completion,
		 * maybe in another context, drops it (kiocb_end_write()).
		 * Tell lockdep it is no longer ours, as kiocb_start_write().
		 */
		if (S_ISREG(file_inode(file)->i_mode)) {
			__sb_writers_release(file_inode(file)->i_sb,
					     SB_FREEZE_WRITE);
			req->iocb.ki_flags |= IOCB_WRITE;
		}
		if (req->iocb.ki_flags & IOCB_APPEND) {
			/* O_APPEND set with fcntl() after SET_BACKEND. */
			vhost_blk_rw_complete(&req->iocb, -EINVAL);
			return;
		}
	}
	if (!(req->iocb.ki_flags & IOCB_DIRECT)) {
		vhost_blk_rw_cached(req, file, iter, pos);
		return;
	}
	ret = vhost_blk_rw_iter(req, iter);
	if (ret != -EIOCBQUEUED)
		vhost_blk_rw_complete(&req->iocb, ret);
}

/*
 * The last byte of the in part of the chain is the status byte: the index
 * of the in iovec that holds it, or -1 when the in part is empty.
 */
static int vhost_blk_status_iov(const struct iovec *iov, unsigned int in)
{
	while (in--) {
		if (iov[in].iov_len)
			return in;
	}
	return -1;
}

/*
 * Fail a request that has no request structure (too many segments, no
 * memory): write its status and return it at once, logging the status byte.
 */
static void vhost_blk_fail_now(struct vhost_virtqueue *vq, int head,
			       unsigned int out, unsigned int in,
			       unsigned int log_num, u8 __user *status_ptr)
{
	if (put_user((u8)VIRTIO_BLK_S_IOERR, status_ptr))
		vq_err(vq, "vhost-blk: cannot write status\n");
	if (unlikely(log_num))
		vhost_blk_log(vq, vq->log, log_num, 0, vq->iov + out, in,
			      status_ptr);
	vhost_add_used_and_signal(vq->dev, vq, head, 1);
}

/*
 * Freeze protection for a request that writes to a regular file, without
 * waiting: false while its filesystem is frozen.  Block devices need none.
 */
static bool vhost_blk_write_trylock(struct file *file)
{
	struct inode *inode = file_inode(file);

	return !S_ISREG(inode->i_mode) || sb_start_write_trylock(inode->i_sb);
}

static void vhost_blk_write_unlock(struct file *file)
{
	struct inode *inode = file_inode(file);

	if (S_ISREG(inode->i_mode))
		sb_end_write(inode->i_sb);
}

/*
 * Take one request off the ring; its completion returns it to the guest.
 * False when the request writes to a frozen filesystem: it is put back on
 * the ring, for later.
 */
/*
 * Whether @bvq's writes must be stable when they complete: the VMM set the
 * device writethrough (the guest cleared virtio-blk's "writeback"), or the
 * guest did not negotiate FLUSH, so has no way to make a write stable but
 * this (virtio-blk's rule, as QEMU's virtio-blk applies it).  Under
 * vq.mutex.
 */
static bool vhost_blk_writethrough(struct vhost_blk_vq *bvq)
{
	return !vhost_has_feature(&bvq->vq, VIRTIO_BLK_F_FLUSH) ||
	       !READ_ONCE(vhost_blk_of(&bvq->vq)->writeback);
}

static bool vhost_blk_submit(struct vhost_blk_vq *bvq, struct file *file,
			     int head, unsigned int out, unsigned int in,
			     unsigned int log_num)
{
	struct vhost_virtqueue *vq = &bvq->vq;
	struct vhost_blk *blk = vhost_blk_of(vq);
	u8 id[VHOST_BLK_SERIAL_LEN];
	struct virtio_blk_outhdr hdr;
	struct vhost_blk_req *req;
	struct iov_iter from, to;
	u8 __user *status_ptr;
	size_t in_len, n;
	int status_iov;
	u64 sector;
	u32 type;
	u8 status;

	in_len = iov_length(vq->iov + out, in);
	status_iov = vhost_blk_status_iov(vq->iov + out, in);
	if (status_iov < 0) {
		/* Nowhere to report anything: give the buffer back, empty. */
		vq_err(vq, "vhost-blk: request %d has no status byte\n", head);
		vhost_add_used_and_signal(&blk->dev, vq, head, 0);
		return true;
	}
	status_ptr = (u8 __user *)vq->iov[out + status_iov].iov_base +
		     vq->iov[out + status_iov].iov_len - 1;
	/*
	 * seg_max counts data descriptors (header and status are one each at
	 * least); a descriptor may be several iovecs where it crosses memory
	 * regions or IOTLB entries.  Checked before anything is allocated.
	 */
	if (vq->ndescs > VHOST_BLK_SEG_MAX + 2) {
		vhost_blk_fail_now(vq, head, out, in, log_num, status_ptr);
		return true;
	}

	req = vhost_blk_req_get(bvq, out + in, log_num);
	if (!req) {
		vhost_blk_fail_now(vq, head, out, in, log_num, status_ptr);
		return true;
	}
	req->head = head;
	req->out = out;
	req->in = in;
	req->status_ptr = status_ptr;
	/* Only the iovecs this request uses. */
	memcpy(req->iov, vq->iov, (out + in) * sizeof(*req->iov));

	iov_iter_init(&from, WRITE, req->iov, out, iov_length(req->iov, out));
	/*
	 * The header nearly always has the first descriptor to itself: one
	 * copy_from_user() then, not the iterator's walk over the segments.
	 */
	if (likely(out && req->iov[0].iov_len >= sizeof(hdr))) {
		if (copy_from_user(&hdr, req->iov[0].iov_base, sizeof(hdr)))
			goto err;
		iov_iter_advance(&from, sizeof(hdr));
	} else if (copy_from_iter(&hdr, sizeof(hdr), &from) != sizeof(hdr)) {
		goto err;
	}
	/*
	 * The data the device may write: the in part without the status
	 * byte, taken out of the iovec that holds it (the request's own copy)
	 * too, so that no data iovec reaches past the data.  Direct I/O checks
	 * the alignment of each iovec whole (iov_iter_extract_bvecs() looks at
	 * iter_iov_len(), not at the count), and a status byte that shares the
	 * last data descriptor would give it an odd length.
	 */
	req->iov[out + status_iov].iov_len--;
	iov_iter_init(&to, READ, req->iov + out, in, in_len - 1);

	type = vhost32_to_cpu(vq, hdr.type);
	sector = vhost64_to_cpu(vq, hdr.sector);
	switch (type) {
	case VIRTIO_BLK_T_IN:
		if (iov_iter_count(&from) ||
		    !vhost_blk_range_ok(file, sector, iov_iter_count(&to)))
			goto err;
		req->is_read = true;
		vhost_blk_rw(req, file, &to, sector << VHOST_BLK_SECTOR_SHIFT);
		return true;
	case VIRTIO_BLK_T_OUT:
		if (iov_iter_count(&to) || !(file->f_mode & FMODE_WRITE) ||
		    (file->f_flags & O_APPEND) ||
		    !vhost_blk_range_ok(file, sector, iov_iter_count(&from)))
			goto err;
		if (!vhost_blk_write_trylock(file))
			goto frozen;
		req->fua = vhost_blk_writethrough(bvq);
		vhost_blk_rw(req, file, &from, sector << VHOST_BLK_SECTOR_SHIFT);
		return true;
	case VIRTIO_BLK_T_FLUSH:
		vhost_blk_defer(bvq, req, file, type);
		return true;
	case VIRTIO_BLK_T_GET_ID:
		n = min_t(size_t, iov_iter_count(&to), VHOST_BLK_SERIAL_LEN);
		spin_lock(&blk->serial_lock);
		memcpy(id, blk->serial, sizeof(id));
		spin_unlock(&blk->serial_lock);
		if (copy_to_iter(id, n, &to) != n)
			goto err;
		req->data_written = n;
		status = VIRTIO_BLK_S_OK;
		break;
	case VIRTIO_BLK_T_DISCARD:
	case VIRTIO_BLK_T_WRITE_ZEROES:
		/*
		 * Only when negotiated: a VMM that did not offer them (QEMU's
		 * discard=off) does not want a guest's request carried out.
		 */
		if (!vhost_has_feature(vq, type == VIRTIO_BLK_T_DISCARD ?
				       VIRTIO_BLK_F_DISCARD :
				       VIRTIO_BLK_F_WRITE_ZEROES)) {
			status = VIRTIO_BLK_S_UNSUPP;
			break;
		}
		if (!(file->f_mode & FMODE_WRITE) || (file->f_flags & O_APPEND))
			goto err;
		/*
		 * vfs_fallocate() and vfs_iter_write() take freeze
		 * protection themselves, and taking it twice could deadlock
		 * with a freeze that starts in between: only look.  A freeze
		 * that starts right after this is waited for by slow_work,
		 * off the ring.
		 */
		if (!vhost_blk_write_trylock(file))
			goto frozen;
		vhost_blk_write_unlock(file);
		status = vhost_blk_get_segs(req, file, &from,
					    type == VIRTIO_BLK_T_DISCARD);
		if (status != VIRTIO_BLK_S_OK)
			break;
		req->fua = type == VIRTIO_BLK_T_WRITE_ZEROES &&
			   vhost_blk_writethrough(bvq);
		vhost_blk_defer(bvq, req, file, type);
		return true;
	default:
		status = VIRTIO_BLK_S_UNSUPP;
		break;
	}
	vhost_blk_req_done(req, status);
	return true;
err:
	vhost_blk_req_done(req, VIRTIO_BLK_S_IOERR);
	return true;
frozen:
	vhost_blk_req_put(req);
	vhost_discard_vq_desc(vq, 1, bvq->last_ndesc);
	return false;
}

/*
 * Busy-poll an empty ring for up to its busyloop_timeout (microseconds),
 * with guest notifications still disabled: true when a request came.
 * Gives up at once when other work waits on the ring's worker (this ring's
 * completions among it), when the scheduler wants the CPU, a signal is
 * pending or a quiesce wants the ring.  Under vq.mutex.
 */
static bool vhost_blk_busy_poll(struct vhost_blk_vq *bvq)
{
	struct vhost_virtqueue *vq = &bvq->vq;
	u64 end = local_clock() + (u64)vq->busyloop_timeout * NSEC_PER_USEC;

	lockdep_assert_held(&vq->mutex);
	while (!need_resched() && !signal_pending(current) &&
	       !vhost_vq_has_work(vq) && llist_empty(&bvq->completed) &&
	       !READ_ONCE(vhost_blk_of(vq)->quiesced)) {
		if (!vhost_vq_avail_empty(vq->dev, vq))
			return true;
		if (local_clock() > end)
			break;
		cpu_relax();
	}
	return false;
}

static void vhost_blk_frozen_retry(struct work_struct *work)
{
	struct vhost_blk_vq *bvq = container_of(to_delayed_work(work),
						struct vhost_blk_vq, frozen_work);

	vhost_poll_queue(&bvq->vq.poll);
}

static void vhost_blk_handle_kick(struct vhost_work *work)
{
	struct vhost_virtqueue *vq = container_of(work, struct vhost_virtqueue,
						  poll.work);
	struct vhost_blk_vq *bvq = container_of(vq, struct vhost_blk_vq, vq);
	struct vhost_blk *blk = vhost_blk_of(vq);
	unsigned int out, in, log_num;
	const struct cred *old_cred;
	struct vhost_log *log;
	struct blk_plug plug;
	struct file *file;
	int head, reqs = 0;

	mutex_lock(&vq->mutex);
	file = vhost_vq_get_backend(vq);
	if (!file)
		goto out;
	/*
	 * Ring addresses translated once per kick (device IOTLB).  On a miss
	 * the IOTLB update queues us again.
	 */
	if (!vq_meta_prefetch(vq))
		goto out;
	/* Completions may have been waiting for that update too. */
	if (unlikely(!llist_empty(&bvq->completed)))
		vhost_vq_work_queue(vq, &bvq->complete_work);
	if (bvq->paused)
		goto out;
	log = unlikely(vhost_has_feature(vq, VHOST_F_LOG_ALL)) ? vq->log : NULL;

	old_cred = override_creds(bvq->cred);
	/* Paired with vhost_blk_return_inline(), which clears it. */
	WRITE_ONCE(bvq->submitter, current);
	/* The batch reaches a block device's queue in one go. */
	blk_start_plug(&plug);
	vhost_disable_notify(&blk->dev, vq);
	for (;;) {
		if (unlikely(!bvq->free)) {
			/* Returning some restarts us (vhost_blk_return()). */
			bvq->full = true;
			break;
		}
		head = vhost_get_vq_desc_n(vq, vq->iov, ARRAY_SIZE(vq->iov),
					   &out, &in, log, &log_num,
					   &bvq->last_ndesc);
		/* A chain vhost cannot walk stops the ring; vq_err said why. */
		if (unlikely(head < 0))
			break;
		if (head == vq->num) {
			if (vq->busyloop_timeout) {
				/* Requests already taken go out first. */
				blk_finish_plug(&plug);
				blk_start_plug(&plug);
				if (vhost_blk_busy_poll(bvq))
					continue;
			}
			if (unlikely(vhost_enable_notify(&blk->dev, vq))) {
				vhost_disable_notify(&blk->dev, vq);
				continue;
			}
			break;
		}
		if (unlikely(!vhost_blk_submit(bvq, file, head, out, in,
					       log ? log_num : 0))) {
			/*
			 * Frozen filesystem: never wait for the thaw holding
			 * the ring (a VMM ioctl may be waiting for it); look
			 * again in a while.
			 */
			schedule_delayed_work(&bvq->frozen_work,
					      VHOST_BLK_FROZEN_RETRY);
			break;
		}
		if (vhost_exceeds_weight(vq, ++reqs, 0))
			break;
	}
	blk_finish_plug(&plug);
	revert_creds(old_cred);
	vhost_blk_return_inline(bvq);
out:
	mutex_unlock(&vq->mutex);
}

/*
 * Give the rings in @rings that have none yet their worker according to
 * worker_pool, with one grace period for all of them (vhost_vqs_set_workers()):
 * they are serving already.  A pool worker made in this call is named by the
 * pool's other rings in a second call.  Under dev.mutex.
 */
static void vhost_blk_apply_worker_policy(struct vhost_blk *blk,
					  unsigned long rings)
{
	unsigned int pool = min_t(unsigned int, READ_ONCE(worker_pool),
				  VHOST_BLK_MAX_QUEUES);
	struct vhost_virtqueue *vqs[VHOST_BLK_MAX_QUEUES];
	unsigned int idx[VHOST_BLK_MAX_QUEUES];
	u32 ids[VHOST_BLK_MAX_QUEUES];
	int rets[VHOST_BLK_MAX_QUEUES];
	unsigned long making;
	unsigned int i, n, slot;
	int ret;

	lockdep_assert_held(&blk->dev.mutex);
	for_each_set_bit(i, &rings, VHOST_BLK_MAX_QUEUES) {
		struct vhost_blk_vq *bvq = &blk->vqs[i];

		/*
		 * worker_pool=1 leaves every ring on the default worker;
		 * worker_pool=0 leaves ring 0 there and makes the others one.
		 */
		if (bvq->user_bound || bvq->policy_applied ||
		    pool == 1 || (!pool && !i))
			__clear_bit(i, &rings);
		bvq->policy_applied = true;
	}

	while (rings) {
		making = 0;
		n = 0;
		for_each_set_bit(i, &rings, VHOST_BLK_MAX_QUEUES) {
			slot = pool ? i % pool : i;
			ids[n] = pool ? blk->pool[slot] : VHOST_VRING_NEW_WORKER;
			if (ids[n] == VHOST_VRING_NEW_WORKER &&
			    __test_and_set_bit(slot, &making))
				continue;	/* named once it is made */
			vqs[n] = &blk->vqs[i].vq;
			idx[n++] = i;
		}
		ret = vhost_vqs_set_workers(vqs, ids, rets, n);
		for (i = 0; i < n; i++) {
			slot = pool ? idx[i] % pool : idx[i];
			if (ret)
				rets[i] = ret;
			if (rets[i] == -ENODEV) {
				/* The VMM freed a pool worker: replace it. */
				blk->pool[slot] = VHOST_VRING_NEW_WORKER;
				continue;
			}
			__clear_bit(idx[i], &rings);
			/*
			 * Kthread mode (VHOST_SET_FORK_FROM_OWNER off) makes no
			 * new workers: the ring stays on the default worker,
			 * as with worker_pool=1, and there is nothing to warn
			 * about.
			 */
			if (!rets[i] && pool)
				blk->pool[slot] = ids[i];
			else if (rets[i] && rets[i] != -EOPNOTSUPP)
				pr_warn_ratelimited("vhost-blk: ring %u stays on its worker: %d\n",
						    idx[i], rets[i]);
		}
	}
}

/*
 * Attach ring @i to the backend if it is set up (since the last detach),
 * has a kick and is not attached yet, and the device has a backend.
 * Return whether it did.  Under dev.mutex.
 */
static bool vhost_blk_start_ring(struct vhost_blk *blk, int i)
{
	struct vhost_blk_vq *bvq = &blk->vqs[i];
	struct vhost_virtqueue *vq = &bvq->vq;
	bool start = false;

	lockdep_assert_held(&blk->dev.mutex);
	mutex_lock(&vq->mutex);
	if (!vhost_vq_get_backend(vq) && bvq->armed && vq->kick &&
	    vhost_vq_is_setup(vq)) {
		if (vhost_blk_alloc_slots(bvq)) {
			vq_err(vq, "vhost-blk: no memory for ring %d\n", i);
			goto out_unlock;
		}
		vhost_vq_set_backend(vq, blk->backend);
		if (vhost_vq_init_access(vq)) {
			vhost_vq_set_backend(vq, NULL);
			vq_err(vq, "vhost-blk: ring %d inaccessible\n", i);
		} else {
			start = true;
		}
	}
out_unlock:
	mutex_unlock(&vq->mutex);
	return start;
}

/*
 * Attach every ring that can start.  Called under dev.mutex after anything
 * that may complete a ring's setup or end a quiesce.  Only for the owner:
 * starting a ring touches its memory in the caller's mm and may create a
 * worker charged to the caller.
 */
static void vhost_blk_start_rings(struct vhost_blk *blk)
{
	unsigned long started = 0;
	int i;

	lockdep_assert_held(&blk->dev.mutex);
	if (!blk->backend || blk->quiesced || vhost_dev_check_owner(&blk->dev))
		return;
	for (i = 0; i < VHOST_BLK_MAX_QUEUES; i++)
		if (vhost_blk_start_ring(blk, i))
			__set_bit(i, &started);
	vhost_blk_apply_worker_policy(blk, started);
	/* Serve what the guest queued before we started. */
	for_each_set_bit(i, &started, VHOST_BLK_MAX_QUEUES)
		vhost_poll_queue(&blk->vqs[i].vq.poll);
}

/*
 * Quiescing: pause every ring (its handler takes no new request; a handler
 * running now finishes first, as it holds the ring's mutex), then drain
 * (wait until every request taken has been returned), act, and resume.
 * Rings stay attached: nothing has to be translated again to restart them.
 * Under dev.mutex.
 */

/*
 * End a quiesce for rings [0, @n): the others were never paused by it.
 * The last quiesce to end lets the rings go again.
 */
static void vhost_blk_unpause(struct vhost_blk *blk, int n)
{
	int i;

	lockdep_assert_held(&blk->dev.mutex);
	/* Busy-polling handlers read it: see vhost_blk_busy_poll(). */
	WRITE_ONCE(blk->quiesced, blk->quiesced - 1);
	if (blk->quiesced)
		return;
	for (i = 0; i < n; i++) {
		struct vhost_virtqueue *vq = &blk->vqs[i].vq;
		bool attached;

		mutex_lock(&vq->mutex);
		blk->vqs[i].paused = false;
		attached = vhost_vq_get_backend(vq);
		mutex_unlock(&vq->mutex);
		/* Serve what the guest queued meanwhile. */
		if (attached)
			vhost_poll_queue(&vq->poll);
	}
	vhost_blk_start_rings(blk);
}

static void vhost_blk_resume(struct vhost_blk *blk)
{
	vhost_blk_unpause(blk, VHOST_BLK_MAX_QUEUES);
}

/*
 * Pause every ring.  A busy-polling handler lets go of its ring as soon as
 * blk->quiesced is set; other handlers finish what they are doing.  With
 * @killable (ioctl paths) a fatal signal ends the wait for a ring's mutex
 * with -EINTR, and the rings paused so far are let go again.  Completions
 * that wait for an IOTLB update are looked at again: a paused ring drops
 * them (see vhost_blk_return()).
 */
static int vhost_blk_pause(struct vhost_blk *blk, bool killable)
{
	int i;

	WRITE_ONCE(blk->quiesced, blk->quiesced + 1);
	for (i = 0; i < VHOST_BLK_MAX_QUEUES; i++) {
		struct vhost_blk_vq *bvq = &blk->vqs[i];

		if (!killable) {
			mutex_lock(&bvq->vq.mutex);
		} else if (mutex_lock_killable(&bvq->vq.mutex)) {
			vhost_blk_unpause(blk, i);
			return -EINTR;
		}
		bvq->paused = true;
		if (!llist_empty(&bvq->completed))
			vhost_vq_work_queue(&bvq->vq, &bvq->complete_work);
		mutex_unlock(&bvq->vq.mutex);
	}
	return 0;
}

static bool vhost_blk_idle(struct vhost_blk *blk)
{
	int i;

	for (i = 0; i < VHOST_BLK_MAX_QUEUES; i++)
		if (READ_ONCE(blk->vqs[i].inflight))
			return false;
	return true;
}

/*
 * Wait until every request in flight has been returned to the guest, with
 * the rings paused.  Entered and left under dev.mutex, which is dropped
 * while waiting: completions may need an IOTLB update to reach the used
 * ring, and applying it takes dev.mutex.  blk->quiesced keeps the rings
 * paused meanwhile.  With @killable (ioctl paths) a fatal signal ends the
 * wait with -EINTR; the release path waits for good.
 */
static int vhost_blk_drain(struct vhost_blk *blk, bool killable)
{
	int i, ret = 0;

	lockdep_assert_held(&blk->dev.mutex);
	while (!vhost_blk_idle(blk)) {
		mutex_unlock(&blk->dev.mutex);
		/*
		 * Pairs with the wake_up() in vhost_blk_req_put(), and with
		 * the one in vhost_blk_req_done() for a ring whose worker was
		 * killed: those requests are dropped here.
		 */
		if (killable)
			ret = wait_event_killable(blk->drain_wq,
						  vhost_blk_idle(blk) ||
						  vhost_blk_orphaned(blk));
		else
			wait_event(blk->drain_wq, vhost_blk_idle(blk) ||
				   vhost_blk_orphaned(blk));
		if (!ret)
			ret = vhost_blk_reap(blk, killable);
		mutex_lock(&blk->dev.mutex);
		if (ret)
			return -EINTR;
	}
	/*
	 * The completion work that returned the last request of a ring may
	 * still be publishing it: it holds the ring's mutex until it is done.
	 * Waiting for the mutex, not flushing the worker, keeps the wait
	 * killable and clear of whatever else the worker does.
	 */
	for (i = 0; i < VHOST_BLK_MAX_QUEUES; i++) {
		struct mutex *m = &blk->vqs[i].vq.mutex;

		if (!killable)
			mutex_lock(m);
		else if (mutex_lock_killable(m))
			return -EINTR;
		mutex_unlock(m);
	}
	return 0;
}

/*
 * Pause and drain; on an error the rings are resumed.  -EINTR: a fatal
 * signal.  -EPERM: the device changed hands (VHOST_RESET_OWNER) while
 * dev.mutex was dropped.  Under dev.mutex, as the owner.
 */
static int vhost_blk_quiesce(struct vhost_blk *blk)
{
	int ret;

	lockdep_assert_held(&blk->dev.mutex);
	ret = vhost_blk_pause(blk, true);
	if (ret)
		return ret;
	ret = vhost_blk_drain(blk, true);
	if (!ret)
		ret = vhost_dev_check_owner(&blk->dev);
	if (ret)
		vhost_blk_resume(blk);
	return ret;
}

/*
 * Whether @file can back a device: a block device or a regular file, open
 * for reading, with iter I/O in each direction it is open for, O_DIRECT
 * only where supported, not O_APPEND; -EOPNOTSUPP for a zoned block
 * device, which takes writes only at each zone's write pointer while the
 * device serves none of virtio-blk's zoned requests.
 */
static int vhost_blk_check_backend(struct file *file)
{
	umode_t mode = file_inode(file)->i_mode;

	if (!S_ISBLK(mode) && !S_ISREG(mode))
		return -EINVAL;
	if (S_ISBLK(mode) && bdev_is_zoned(I_BDEV(file->f_mapping->host)))
		return -EOPNOTSUPP;
	if (!(file->f_mode & FMODE_READ))
		return -EBADF;
	if (!(file->f_mode & FMODE_CAN_READ) || !file->f_op->read_iter)
		return -EINVAL;
	if ((file->f_mode & FMODE_WRITE) &&
	    (!(file->f_mode & FMODE_CAN_WRITE) || !file->f_op->write_iter))
		return -EINVAL;
	if ((file->f_flags & O_DIRECT) && !(file->f_mode & FMODE_CAN_ODIRECT))
		return -EINVAL;
	if (file->f_flags & O_APPEND)
		return -EINVAL;
	return 0;
}

/*
 * The caller's credentials for every ring: one copy, a reference each
 * (override_creds() takes none, so the rings' workers share it without
 * touching its count); -ENOMEM.
 */
static int vhost_blk_creds_get(const struct cred **creds)
{
	int i;

	creds[0] = prepare_creds();
	if (!creds[0])
		return -ENOMEM;
	for (i = 1; i < VHOST_BLK_MAX_QUEUES; i++)
		creds[i] = get_cred(creds[0]);
	return 0;
}

/*
 * Replace the backend of every attached ring with @file (NULL detaches
 * them) and the device's with @file, and the rings' credentials with
 * @creds (one per ring, or NULL), whose references the device takes over.
 * The rings are paused and drained.  Under dev.mutex.
 */
static void vhost_blk_swap_backend(struct vhost_blk *blk, struct file *file,
				   const struct cred **creds)
{
	struct file *old = blk->backend;
	int i;

	for (i = 0; i < VHOST_BLK_MAX_QUEUES; i++) {
		struct vhost_blk_vq *bvq = &blk->vqs[i];
		const struct cred *old_cred;

		mutex_lock(&bvq->vq.mutex);
		if (vhost_vq_get_backend(&bvq->vq))
			vhost_vq_set_backend(&bvq->vq, file);
		/* Detached rings start again only once set up again. */
		if (!file)
			bvq->armed = false;
		old_cred = bvq->cred;
		bvq->cred = creds ? creds[i] : NULL;
		mutex_unlock(&bvq->vq.mutex);
		if (old_cred)
			put_cred(old_cred);
	}
	blk->backend = file;
	if (old)
		fput(old);
}

static long vhost_blk_set_backend(struct vhost_blk *blk,
				  struct vhost_blk_backend __user *argp)
{
	const struct cred *creds[VHOST_BLK_MAX_QUEUES];
	struct vhost_blk_backend b;
	struct file *file = NULL;
	long ret;

	if (copy_from_user(&b, argp, sizeof(b)))
		return -EFAULT;
	if (b.flags || b.reserved[0] || b.reserved[1])
		return -EINVAL;

	mutex_lock(&blk->dev.mutex);
	ret = vhost_dev_check_owner(&blk->dev);
	if (ret)
		goto out_unlock;
	if (b.fd != -1) {
		file = fget(b.fd);
		if (!file) {
			ret = -EBADF;
			goto out_unlock;
		}
		ret = vhost_blk_check_backend(file);
		if (ret)
			goto out_fput;
		ret = vhost_blk_creds_get(creds);
		if (ret)
			goto out_fput;
	}

	ret = vhost_blk_quiesce(blk);
	if (ret)
		goto out_put_creds;
	/*
	 * Detached, a ring has no backend: once its kick goes too, the core
	 * rebinds it without a grace period or a flush, and the VMM may then
	 * free the old worker at once.  Completions of the drain's last
	 * requests finish queueing their work first (see
	 * vhost_blk_req_done()), and the flush runs it.
	 */
	if (!file)
		synchronize_rcu();
	vhost_blk_swap_backend(blk, file, file ? creds : NULL);
	if (!file)
		vhost_dev_flush(&blk->dev);
	vhost_blk_resume(blk);
	mutex_unlock(&blk->dev.mutex);
	return 0;

out_put_creds:
	if (file) {
		int i;

		for (i = 0; i < VHOST_BLK_MAX_QUEUES; i++)
			put_cred(creds[i]);
	}
out_fput:
	if (file)
		fput(file);
out_unlock:
	mutex_unlock(&blk->dev.mutex);
	return ret;
}

static long vhost_blk_set_serial(struct vhost_blk *blk,
				 struct vhost_blk_serial __user *argp)
{
	struct vhost_blk_serial s;
	bool nul = false;
	long ret;
	int i;

	if (copy_from_user(&s, argp, sizeof(s)))
		return -EFAULT;
	for (i = 0; i < VHOST_BLK_SERIAL_LEN; i++) {
		if (!s.serial[i])
			nul = true;
		else if (nul || s.serial[i] < 0x20 || s.serial[i] > 0x7e)
			return -EINVAL;
	}
	mutex_lock(&blk->dev.mutex);
	ret = vhost_dev_check_owner(&blk->dev);
	if (!ret) {
		spin_lock(&blk->serial_lock);
		memcpy(blk->serial, s.serial, sizeof(blk->serial));
		spin_unlock(&blk->serial_lock);
	}
	mutex_unlock(&blk->dev.mutex);
	return ret;
}

/* VHOST_BLK_SET_WRITEBACK: the guest's write cache mode, 1 or 0. */
static long vhost_blk_set_writeback(struct vhost_blk *blk, u32 __user *argp)
{
	u32 v;
	long ret;

	if (get_user(v, argp))
		return -EFAULT;
	if (v > 1)
		return -EINVAL;
	mutex_lock(&blk->dev.mutex);
	ret = vhost_dev_check_owner(&blk->dev);
	if (!ret)
		WRITE_ONCE(blk->writeback, v);
	mutex_unlock(&blk->dev.mutex);
	return ret;
}

static int vhost_blk_set_features(struct vhost_blk *blk, u64 features)
{
	const u64 quiesce_bits = (1ULL << VHOST_F_LOG_ALL) |
				 (1ULL << VIRTIO_F_ACCESS_PLATFORM);
	bool quiesce;
	int i, ret = 0;

	if (features & ~VHOST_BLK_FEATURES)
		return -EOPNOTSUPP;

	mutex_lock(&blk->dev.mutex);
	/* Resuming the rings may start them: the owner's business. */
	ret = vhost_dev_check_owner(&blk->dev);
	if (ret)
		goto out;
	if ((features & (1ULL << VHOST_F_LOG_ALL)) &&
	    !vhost_log_access_ok(&blk->dev)) {
		ret = -EFAULT;
		goto out;
	}
	/*
	 * Requests in flight were submitted with logging and translation as
	 * they were: those from before LOG_ALL would complete unlogged, those
	 * from before it was cleared would write a log the VMM may have
	 * freed, and their addresses were translated through the IOTLB or not.
	 */
	quiesce = (features ^ blk->vqs[0].vq.acked_features) & quiesce_bits;
	if (quiesce) {
		ret = vhost_blk_quiesce(blk);
		if (ret)
			goto out;
	}
	/*
	 * A detached device is being started (again), or translation is
	 * switched on: begin with an empty IOTLB, as vhost-net does at every
	 * SET_FEATURES.  A VMM forwards the guest's IOMMU invalidations only
	 * while it runs the device (QEMU stops in vhost_dev_stop()), so
	 * entries from an earlier start may be stale, and a guest driver
	 * rebound since reuses the IOVAs of its old rings and buffers.  A
	 * device with a backend keeps its IOTLB over renegotiation (dirty
	 * logging switched for migration): the VMM has kept it up to date.
	 */
	if ((features & (1ULL << VIRTIO_F_ACCESS_PLATFORM)) &&
	    (!blk->dev.iotlb || !blk->backend ||
	     !vhost_has_feature(&blk->vqs[0].vq, VIRTIO_F_ACCESS_PLATFORM)) &&
	    vhost_init_device_iotlb(&blk->dev)) {
		ret = -EFAULT;
		goto out_resume;
	}
	for (i = 0; i < VHOST_BLK_MAX_QUEUES; i++) {
		struct vhost_virtqueue *vq = &blk->vqs[i].vq;

		mutex_lock(&vq->mutex);
		vq->acked_features = features;
		mutex_unlock(&vq->mutex);
	}
out_resume:
	if (quiesce)
		vhost_blk_resume(blk);
out:
	mutex_unlock(&blk->dev.mutex);
	return ret;
}

static void vhost_blk_reset_policy(struct vhost_blk *blk)
{
	int i;

	for (i = 0; i < VHOST_BLK_MAX_QUEUES; i++) {
		blk->vqs[i].user_bound = false;
		blk->vqs[i].policy_applied = false;
		blk->pool[i] = i ? VHOST_VRING_NEW_WORKER : 0;
	}
}

/*
 * Rings of a new or reset device: no slots (the owner's memcg pays for the
 * next ones), busy polling as the module parameter says.  Under dev.mutex,
 * with every ring detached.
 */
static void vhost_blk_reset_rings(struct vhost_blk *blk)
{
	unsigned int timeout = min(READ_ONCE(busyloop_timeout),
				   VHOST_BLK_MAX_BUSYLOOP_TIMEOUT);
	int i;

	for (i = 0; i < VHOST_BLK_MAX_QUEUES; i++) {
		struct vhost_virtqueue *vq = &blk->vqs[i].vq;

		mutex_lock(&vq->mutex);
		vhost_blk_free_slots(&blk->vqs[i]);
		vq->busyloop_timeout = timeout;
		mutex_unlock(&vq->mutex);
	}
}

static long vhost_blk_reset_owner(struct vhost_blk *blk)
{
	struct vhost_iotlb *umem;
	long ret;
	int i;

	mutex_lock(&blk->dev.mutex);
	ret = vhost_dev_check_owner(&blk->dev);
	if (ret)
		goto out;
	umem = vhost_dev_reset_owner_prepare();
	if (!umem) {
		ret = -ENOMEM;
		goto out;
	}
	ret = vhost_blk_quiesce(blk);
	if (ret) {
		vhost_iotlb_free(umem);
		goto out;
	}
	/* Paused rings schedule no more of it. */
	for (i = 0; i < VHOST_BLK_MAX_QUEUES; i++)
		cancel_delayed_work_sync(&blk->vqs[i].frozen_work);
	/*
	 * Completions that returned the last requests finish queueing their
	 * work before the flush in vhost_dev_stop() runs it, and before the
	 * core frees the workers: see vhost_blk_req_done().
	 */
	synchronize_rcu();
	vhost_dev_stop(&blk->dev);
	vhost_dev_reset_owner(&blk->dev, umem);
	vhost_blk_swap_backend(blk, NULL, NULL);
	vhost_blk_reset_policy(blk);
	vhost_blk_reset_rings(blk);
	WRITE_ONCE(blk->writeback, true);
	vhost_blk_resume(blk);
out:
	mutex_unlock(&blk->dev.mutex);
	return ret;
}

/*
 * VHOST_SET_MEM_TABLE: requests in flight hold guest addresses translated
 * with the old table; let them finish before it goes.  Under dev.mutex.
 */
static long vhost_blk_set_mem_table(struct vhost_blk *blk, void __user *argp)
{
	long r;

	lockdep_assert_held(&blk->dev.mutex);
	r = vhost_dev_check_owner(&blk->dev);
	if (r)
		return r;
	r = vhost_blk_quiesce(blk);
	if (r)
		return r;
	r = vhost_dev_ioctl(&blk->dev, VHOST_SET_MEM_TABLE, argp);
	vhost_blk_resume(blk);
	return r;
}

/*
 * IOTLB messages, from the owner only (checked under dev.mutex, held until
 * the message is applied): an update restarts rings that waited for it, in
 * the owner's mm.
 *
 * An invalidation does not wait for the requests in flight.  Their
 * buffers and status bytes were translated when they were submitted, and
 * the guest unmapping them before it has seen them complete is a guest
 * bug, as with any DMA.  Waiting would hang the VMM: a completion may
 * need the used ring translated, and the VMM answers that miss, often from
 * the very thread that sends invalidations (QEMU's main loop).
 */
static int vhost_blk_iotlb_msg(struct vhost_dev *dev, u32 asid,
			       struct vhost_iotlb_msg *msg)
{
	int ret;

	mutex_lock(&dev->mutex);
	ret = vhost_dev_check_owner(dev);
	if (!ret)
		ret = vhost_process_iotlb_msg(dev, asid, msg);
	mutex_unlock(&dev->mutex);
	return ret;
}

/*
 * VHOST_SET_VRING_BUSYLOOP_TIMEOUT, capped: checked and set from one copy
 * of the argument, which the core would read again.  Under dev.mutex, as
 * the owner.
 */
static long vhost_blk_set_busyloop(struct vhost_blk *blk, void __user *argp)
{
	struct vhost_virtqueue *vq;
	struct vhost_vring_state s;

	lockdep_assert_held(&blk->dev.mutex);
	if (copy_from_user(&s, argp, sizeof(s)))
		return -EFAULT;
	if (s.num > VHOST_BLK_MAX_BUSYLOOP_TIMEOUT)
		return -EINVAL;
	if (s.index >= VHOST_BLK_MAX_QUEUES)
		return -ENOBUFS;
	vq = &blk->vqs[array_index_nospec(s.index, VHOST_BLK_MAX_QUEUES)].vq;
	/* The handler reads it under the ring's mutex. */
	mutex_lock(&vq->mutex);
	vq->busyloop_timeout = s.num;
	mutex_unlock(&vq->mutex);
	return 0;
}

/*
 * Ring ioctls.  A ring is armed (may start) once the VMM sets it up; the
 * busy-poll timeout is capped.  Under dev.mutex, as the owner.
 */
static long vhost_blk_vring_ioctl(struct vhost_blk *blk, unsigned int ioctl,
				  void __user *argp)
{
	long r;
	u32 idx;

	lockdep_assert_held(&blk->dev.mutex);
	if (ioctl == VHOST_SET_VRING_BUSYLOOP_TIMEOUT)
		return vhost_blk_set_busyloop(blk, argp);
	/*
	 * Every ring ioctl's argument starts with the ring's index.  Read it
	 * once, before the core does: a VMM that changes it meanwhile arms
	 * a ring of its own that it did not set up, nothing more.
	 */
	if (get_user(idx, (u32 __user *)argp))
		return -EFAULT;
	r = vhost_vring_ioctl(&blk->dev, ioctl, argp);
	if (r)
		return r;
	switch (ioctl) {
	case VHOST_SET_VRING_NUM:
	case VHOST_SET_VRING_BASE:
	case VHOST_SET_VRING_ADDR:
	case VHOST_SET_VRING_KICK:
		if (idx < VHOST_BLK_MAX_QUEUES)
			blk->vqs[idx].armed = true;
		break;
	}
	vhost_blk_start_rings(blk);
	return 0;
}

/*
 * VHOST_SET_BACKEND_FEATURES: what vhost_set_backend_features() does, in
 * the same critical section as the owner check (it takes dev.mutex itself):
 * the IOTLB message format of an owned device is its owner's choice alone.
 * Before VHOST_SET_OWNER anyone may set it, as on every vhost device.
 */
static long vhost_blk_set_backend_features(struct vhost_blk *blk, u64 features)
{
	long r = 0;
	int i;

	mutex_lock(&blk->dev.mutex);
	if (vhost_dev_has_owner(&blk->dev))
		r = vhost_dev_check_owner(&blk->dev);
	for (i = 0; !r && i < VHOST_BLK_MAX_QUEUES; i++) {
		struct vhost_virtqueue *vq = &blk->vqs[i].vq;

		/* Handlers and IOTLB updates read it under the ring's mutex. */
		mutex_lock(&vq->mutex);
		vq->acked_backend_features = features;
		mutex_unlock(&vq->mutex);
	}
	mutex_unlock(&blk->dev.mutex);
	return r;
}

/*
 * VHOST_BLK_GET_LIMITS: what this kernel enforces, as much of it as the
 * caller's struct holds.  The struct only grows at its end, so an older
 * caller gets the fields it knows and a newer one learns from @size
 * which it got.
 */
static long vhost_blk_get_limits(struct vhost_blk_limits __user *argp)
{
	struct vhost_blk_limits lim = {
		.max_queues = VHOST_BLK_MAX_QUEUES,
		.seg_max = VHOST_BLK_SEG_MAX,
		.max_discard_seg = VHOST_BLK_MAX_DISCARD_SEG,
		.max_discard_sectors = VHOST_BLK_MAX_DISCARD_SECTORS,
		.max_write_zeroes_seg = VHOST_BLK_MAX_DISCARD_SEG,
		.max_write_zeroes_sectors = VHOST_BLK_MAX_WRITE_ZEROES_SECTORS,
		.max_busyloop_timeout = VHOST_BLK_MAX_BUSYLOOP_TIMEOUT,
	};
	u32 size;

	BUILD_BUG_ON(sizeof(lim) < VHOST_BLK_LIMITS_SIZE_VER0);
	if (get_user(size, &argp->size))
		return -EFAULT;
	if (size < VHOST_BLK_LIMITS_SIZE_VER0)
		return -EINVAL;
	lim.size = min_t(u32, size, sizeof(lim));
	return copy_to_user(argp, &lim, lim.size) ? -EFAULT : 0;
}

/*
 * VHOST_GET_FEATURES_ARRAY: @argp's count words of features, the first ours,
 * the others zeroes.
 */
static long vhost_blk_get_features_array(void __user *argp)
{
	u64 __user *words = (u64 __user *)argp + 1;
	u64 count;

	if (get_user(count, (u64 __user *)argp))
		return -EFAULT;
	if (count > VHOST_BLK_FEATURES_ARRAY_MAX)
		return -EINVAL;
	if (count && put_user(VHOST_BLK_FEATURES, words))
		return -EFAULT;
	if (count > 1 && clear_user(words + 1, (count - 1) * sizeof(u64)))
		return -EFAULT;
	return 0;
}

/*
 * VHOST_SET_FEATURES_ARRAY: as VHOST_SET_FEATURES with the first of @argp's
 * count words; a bit set in a later word is one vhost-blk does not offer.
 */
static long vhost_blk_set_features_array(struct vhost_blk *blk,
					 void __user *argp)
{
	u64 __user *words = (u64 __user *)argp + 1;
	u64 count, features = 0, word;
	unsigned int i;

	if (get_user(count, (u64 __user *)argp))
		return -EFAULT;
	if (count > VHOST_BLK_FEATURES_ARRAY_MAX)
		return -EINVAL;
	if (count && get_user(features, words))
		return -EFAULT;
	for (i = 1; i < count; i++) {
		if (get_user(word, words + i))
			return -EFAULT;
		if (word)
			return -EOPNOTSUPP;
	}
	return vhost_blk_set_features(blk, features);
}

static long vhost_blk_ioctl(struct file *f, unsigned int ioctl,
			    unsigned long arg)
{
	struct vhost_blk *blk = f->private_data;
	void __user *argp = (void __user *)arg;
	u64 __user *featurep = argp;
	struct vhost_virtqueue *bound;
	u64 features;
	long r;

	switch (ioctl) {
	case VHOST_BLK_SET_BACKEND:
		return vhost_blk_set_backend(blk, argp);
	case VHOST_BLK_SET_SERIAL:
		return vhost_blk_set_serial(blk, argp);
	case VHOST_BLK_GET_LIMITS:
		return vhost_blk_get_limits(argp);
	case VHOST_BLK_SET_WRITEBACK:
		return vhost_blk_set_writeback(blk, argp);
	case VHOST_GET_FEATURES:
		features = VHOST_BLK_FEATURES;
		return copy_to_user(featurep, &features, sizeof(features)) ?
		       -EFAULT : 0;
	case VHOST_SET_FEATURES:
		if (copy_from_user(&features, featurep, sizeof(features)))
			return -EFAULT;
		return vhost_blk_set_features(blk, features);
	case VHOST_GET_FEATURES_ARRAY:
		return vhost_blk_get_features_array(argp);
	case VHOST_SET_FEATURES_ARRAY:
		return vhost_blk_set_features_array(blk, argp);
	case VHOST_GET_BACKEND_FEATURES:
		features = VHOST_BLK_BACKEND_FEATURES;
		return copy_to_user(featurep, &features, sizeof(features)) ?
		       -EFAULT : 0;
	case VHOST_SET_BACKEND_FEATURES:
		if (copy_from_user(&features, featurep, sizeof(features)))
			return -EFAULT;
		if (features & ~VHOST_BLK_BACKEND_FEATURES)
			return -EOPNOTSUPP;
		return vhost_blk_set_backend_features(blk, features);
	case VHOST_RESET_OWNER:
		return vhost_blk_reset_owner(blk);
	}

	mutex_lock(&blk->dev.mutex);
	r = vhost_worker_ioctl(&blk->dev, ioctl, argp, &bound);
	if (r != -ENOIOCTLCMD) {
		/* A ring the VMM placed keeps its place. */
		if (!r && bound)
			container_of(bound, struct vhost_blk_vq, vq)->user_bound = true;
		goto out;
	}
	if (ioctl == VHOST_SET_MEM_TABLE) {
		r = vhost_blk_set_mem_table(blk, argp);
		goto out;
	}
	r = vhost_dev_ioctl(&blk->dev, ioctl, argp);
	if (r == -ENOIOCTLCMD)
		r = vhost_blk_vring_ioctl(blk, ioctl, argp);
	else if (!r)
		/* A refused ioctl changed nothing handlers must see. */
		vhost_dev_flush(&blk->dev);
out:
	mutex_unlock(&blk->dev.mutex);
	return r;
}

static int vhost_blk_open(struct inode *inode, struct file *f)
{
	struct vhost_virtqueue **vqs;
	struct vhost_blk *blk;
	int i;

	blk = kvzalloc_obj(*blk, GFP_KERNEL_ACCOUNT);
	if (!blk)
		return -ENOMEM;
	vqs = kcalloc(VHOST_BLK_MAX_QUEUES, sizeof(*vqs), GFP_KERNEL);
	if (!vqs) {
		kvfree(blk);
		return -ENOMEM;
	}
	for (i = 0; i < VHOST_BLK_MAX_QUEUES; i++) {
		vqs[i] = &blk->vqs[i].vq;
		blk->vqs[i].vq.handle_kick = vhost_blk_handle_kick;
		init_llist_head(&blk->vqs[i].completed);
		vhost_work_init(&blk->vqs[i].complete_work, vhost_blk_complete_work);
		INIT_DELAYED_WORK(&blk->vqs[i].frozen_work, vhost_blk_frozen_retry);
		init_llist_head(&blk->vqs[i].slow);
		INIT_WORK(&blk->vqs[i].slow_work, vhost_blk_slow_work);
	}
	init_waitqueue_head(&blk->drain_wq);
	spin_lock_init(&blk->serial_lock);
	strscpy(blk->serial, "vhost-blk", sizeof(blk->serial));
	blk->writeback = true;
	vhost_blk_reset_policy(blk);
	vhost_dev_init(&blk->dev, vqs, VHOST_BLK_MAX_QUEUES, UIO_MAXIOV,
		       VHOST_BLK_WEIGHT, 0, true, vhost_blk_iotlb_msg);
	vhost_blk_reset_rings(blk);
	f->private_data = blk;
	return 0;
}

/*
 * Drain a released device, its rings paused, and tear it down.  In the
 * closing task, or on vhost_blk_wq for a release that found requests stuck
 * on their backend.
 */
static void vhost_blk_destroy(struct vhost_blk *blk)
{
	int i;

	mutex_lock(&blk->dev.mutex);
	vhost_blk_drain(blk, false);
	mutex_unlock(&blk->dev.mutex);
	/*
	 * Paused rings schedule no more of either; slow_work may still be
	 * returning from the request it finished last.
	 */
	for (i = 0; i < VHOST_BLK_MAX_QUEUES; i++) {
		cancel_delayed_work_sync(&blk->vqs[i].frozen_work);
		flush_work(&blk->vqs[i].slow_work);
	}
	/*
	 * Completions that returned the last requests may still be queueing
	 * work: let them finish before the flush in vhost_dev_stop(), which
	 * must be the last, and before the core frees the workers without a
	 * grace period: see vhost_blk_req_done().
	 */
	synchronize_rcu();
	vhost_dev_stop(&blk->dev);
	vhost_dev_cleanup(&blk->dev);
	vhost_blk_swap_backend(blk, NULL, NULL);
	vhost_blk_reset_rings(blk);
	kfree(blk->dev.vqs);
	kvfree(blk);
}

static void vhost_blk_release_work(struct work_struct *work)
{
	vhost_blk_destroy(container_of(work, struct vhost_blk, release_work));
}

/*
 * Wait up to @timeout for the paused rings to drain, dropping what rings
 * without a worker completed: false when requests are still in flight.
 */
static bool vhost_blk_drain_within(struct vhost_blk *blk, unsigned long timeout)
{
	unsigned long end = jiffies + timeout;

	for (;;) {
		vhost_blk_reap(blk, false);
		if (vhost_blk_idle(blk))
			return true;
		if (time_after_eq(jiffies, end))
			return false;
		/* Pairs with the wake_up()s that vhost_blk_drain() names. */
		wait_event_timeout(blk->drain_wq, vhost_blk_idle(blk) ||
				   vhost_blk_orphaned(blk), end - jiffies);
	}
}

/*
 * close() returns with requests still in flight: from here on none of them
 * touches the VMM's memory (see blk->gone).  A return that is publishing
 * now holds its ring's mutex: wait for it.
 */
static void vhost_blk_let_go(struct vhost_blk *blk)
{
	int i;

	mutex_lock(&blk->dev.mutex);
	WRITE_ONCE(blk->gone, true);
	mutex_unlock(&blk->dev.mutex);
	for (i = 0; i < VHOST_BLK_MAX_QUEUES; i++) {
		mutex_lock(&blk->vqs[i].vq.mutex);
		mutex_unlock(&blk->vqs[i].vq.mutex);
	}
}

static int vhost_blk_release(struct inode *inode, struct file *f)
{
	struct vhost_blk *blk = f->private_data;

	mutex_lock(&blk->dev.mutex);
	/*
	 * No one will answer an IOTLB miss any more: completions waiting for
	 * one are dropped.  Run those that already wait, so they see it.
	 */
	WRITE_ONCE(blk->dying, true);
	vhost_blk_pause(blk, false);
	mutex_unlock(&blk->dev.mutex);
	/*
	 * The closing task is often a VMM being killed.  Requests stuck on
	 * their backend (a suspended device mapper table, a dead NFS server)
	 * must not keep it in D state: after a short wait, the device goes
	 * on draining on vhost_blk_wq and is torn down there, as io_uring
	 * does.  The backing file stays open until then.
	 */
	if (!vhost_blk_drain_within(blk, VHOST_BLK_RELEASE_WAIT)) {
		vhost_blk_let_go(blk);
		INIT_WORK(&blk->release_work, vhost_blk_release_work);
		queue_work(vhost_blk_wq, &blk->release_work);
		return 0;
	}
	vhost_blk_destroy(blk);
	return 0;
}

static ssize_t vhost_blk_chr_read_iter(struct kiocb *iocb, struct iov_iter *to)
{
	struct vhost_blk *blk = iocb->ki_filp->private_data;

	return vhost_chr_read_iter(&blk->dev, to, iocb->ki_filp->f_flags & O_NONBLOCK);
}

static ssize_t vhost_blk_chr_write_iter(struct kiocb *iocb, struct iov_iter *from)
{
	struct vhost_blk *blk = iocb->ki_filp->private_data;

	return vhost_chr_write_iter(&blk->dev, from);
}

static __poll_t vhost_blk_chr_poll(struct file *file, poll_table *wait)
{
	struct vhost_blk *blk = file->private_data;

	return vhost_chr_poll(file, &blk->dev, wait);
}

static const struct file_operations vhost_blk_fops = {
	.owner		= THIS_MODULE,
	.open		= vhost_blk_open,
	.release	= vhost_blk_release,
	.llseek		= noop_llseek,
	.read_iter	= vhost_blk_chr_read_iter,
	.write_iter	= vhost_blk_chr_write_iter,
	.poll		= vhost_blk_chr_poll,
	.unlocked_ioctl	= vhost_blk_ioctl,
	.compat_ioctl	= compat_ptr_ioctl,
};

static struct miscdevice vhost_blk_misc = {
	.minor	= MISC_DYNAMIC_MINOR,
	.name	= "vhost-blk",
	.fops	= &vhost_blk_fops,
};

static int __init vhost_blk_init(void)
{
	int ret;

	vhost_blk_wq = alloc_workqueue("vhost-blk", WQ_UNBOUND, 0);
	if (!vhost_blk_wq)
		return -ENOMEM;
	ret = misc_register(&vhost_blk_misc);
	if (ret)
		goto err_destroy_wq;
	vhost_blk_debugfs_init();
	return 0;

err_destroy_wq:
	destroy_workqueue(vhost_blk_wq);
	return ret;
}
module_init(vhost_blk_init);

static void __exit vhost_blk_exit(void)
{
	vhost_blk_debugfs_exit();
	misc_deregister(&vhost_blk_misc);
	/* Waits for releases still draining: see vhost_blk_release(). */
	destroy_workqueue(vhost_blk_wq);
}
module_exit(vhost_blk_exit);

MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("vhost-blk: in-kernel virtio-blk backend");
