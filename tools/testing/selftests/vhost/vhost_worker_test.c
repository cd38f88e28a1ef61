// SPDX-License-Identifier: GPL-2.0
/*
 * Per-virtqueue worker threads: the worker ioctls, their error codes, the
 * thread each ring's worker is (VHOST_GET_VRING_WORKER_INFO), the
 * threads they create (names, cgroups, lifetime), real traffic on separate
 * workers, rebinding under traffic and killing an owner with I/O in flight.
 * vhost-net over a tap is the device: it opts in to per-ring workers.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <grp.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <linux/virtio_net.h>

#include "../kselftest_harness.h"
#include "vhost_test.h"
#include "vhost_vmm.h"
#include "vhost_net_lib.h"
#include "vhost_blk_lib.h"

#define MAX_WORKERS_PARAM "/sys/module/vhost/parameters/max_workers"
#define WORKER_POOL_PARAM "/sys/module/vhost_blk/parameters/worker_pool"

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

static int attach(int fd, unsigned int ring, unsigned int id)
{
	struct vhost_vring_worker w = { .index = ring, .worker_id = id };

	return ioctl(fd, VHOST_ATTACH_VRING_WORKER, &w) ? -errno : 0;
}

static int get_worker(int fd, unsigned int ring, unsigned int *id)
{
	struct vhost_vring_worker w = { .index = ring, .worker_id = 777 };

	if (ioctl(fd, VHOST_GET_VRING_WORKER, &w))
		return -errno;
	*id = w.worker_id;
	return 0;
}

static int set_worker(int fd, unsigned int ring, unsigned int *id)
{
	struct vhost_vring_worker w = { .index = ring, .worker_id = *id };

	int r = vmm_worker_call(fd, VHOST_SET_VRING_WORKER, &w);

	if (!r)
		*id = w.worker_id;
	return r;
}

/* VHOST_GET_VRING_WORKER_INFO with @flags and reserved word @rsv set to @v. */
static int worker_info(int fd, unsigned int ring, unsigned int *id, int *tid,
		       unsigned int flags, int rsv, __u64 v)
{
	struct vhost_vring_worker_info i = {
		.index = ring, .flags = flags, .worker_id = 777, .worker_tid = -7,
	};

	if (rsv >= 0)
		i.reserved[rsv] = v;
	if (ioctl(fd, VHOST_GET_VRING_WORKER_INFO, &i))
		return -errno;
	/* What was read comes back as it was; reserved comes back zero. */
	if (i.index != ring || i.flags || i.reserved[0] || i.reserved[1])
		return -EPROTO;
	*id = i.worker_id;
	*tid = i.worker_tid;
	return 0;
}

static int read_param(const char *path)
{
	char buf[32] = "";
	int fd = open(path, O_RDONLY);

	if (fd < 0)
		return -1;
	if (read(fd, buf, sizeof(buf) - 1) < 0)
		buf[0] = 0;
	close(fd);
	return atoi(buf);
}

static int write_param(const char *path, int v)
{
	char buf[32];
	int fd = open(path, O_WRONLY), r;

	if (fd < 0)
		return -errno;
	snprintf(buf, sizeof(buf), "%d", v);
	r = write(fd, buf, strlen(buf)) < 0 ? -errno : 0;
	close(fd);
	return r;
}

/* A bare vhost-net device, owned, nothing else. */
FIXTURE(dev) {
	int fd;
};

FIXTURE_SETUP(dev)
{
	const char *why = vhost_unusable("/dev/vhost-net", "CONFIG_VHOST_NET");

	self->fd = -1;
	if (why)
		SKIP(return, "%s", why);
	self->fd = open("/dev/vhost-net", O_RDWR);
	ASSERT_LE(0, self->fd);
}

FIXTURE_TEARDOWN(dev)
{
	if (self->fd >= 0)
		close(self->fd);
}

TEST_F_TIMEOUT(dev, default_is_one_worker_named_like_6_1, 30)
{
	char names[8][32], want[32];
	unsigned int id = ~0U;

	ASSERT_EQ(0, vmm_owner_workers(getpid(), NULL, NULL, 8));
	ASSERT_EQ(0, ioctl(self->fd, VHOST_SET_OWNER, NULL));
	ASSERT_EQ(1, vmm_owner_workers(getpid(), NULL, names, 8));
	snprintf(want, sizeof(want), "vhost-%d", getpid());
	EXPECT_STREQ(want, names[0]);
	ASSERT_EQ(0, get_worker(self->fd, 0, &id));
	EXPECT_EQ(0, id);
	ASSERT_EQ(0, get_worker(self->fd, 1, &id));
	EXPECT_EQ(0, id);
}

TEST_F_TIMEOUT(dev, new_attach_get_free, 30)
{
	unsigned int a = 0, b = 0, id = ~0U;

	ASSERT_EQ(0, ioctl(self->fd, VHOST_SET_OWNER, NULL));
	ASSERT_EQ(0, new_worker(self->fd, &a));
	ASSERT_EQ(0, new_worker(self->fd, &b));
	EXPECT_EQ(1, a);
	EXPECT_EQ(2, b);
	ASSERT_EQ(3, vmm_owner_workers(getpid(), NULL, NULL, 8));
	EXPECT_LT(0, vmm_worker_tid(getpid(), a));
	EXPECT_LT(0, vmm_worker_tid(getpid(), b));

	ASSERT_EQ(0, attach(self->fd, 0, a));
	ASSERT_EQ(0, attach(self->fd, 1, b));
	ASSERT_EQ(0, get_worker(self->fd, 0, &id));
	EXPECT_EQ(a, id);
	ASSERT_EQ(0, get_worker(self->fd, 1, &id));
	EXPECT_EQ(b, id);

	/* Bound workers cannot go; unbound ones, the default included, can. */
	EXPECT_EQ(-EBUSY, free_worker(self->fd, a));
	ASSERT_EQ(0, attach(self->fd, 1, a));
	EXPECT_EQ(0, free_worker(self->fd, b));
	EXPECT_EQ(-1, vmm_worker_tid(getpid(), b));
	EXPECT_EQ(0, free_worker(self->fd, 0));
	EXPECT_EQ(1, vmm_owner_workers(getpid(), NULL, NULL, 8));
	EXPECT_EQ(-ENODEV, free_worker(self->fd, b));
	/* Freed ids are reused. */
	ASSERT_EQ(0, new_worker(self->fd, &id));
	EXPECT_EQ(0, id);
}

TEST_F_TIMEOUT(dev, set_vring_worker_creates_or_binds, 30)
{
	unsigned int id = VHOST_VRING_NEW_WORKER, again, got = ~0U;

	ASSERT_EQ(0, ioctl(self->fd, VHOST_SET_OWNER, NULL));
	ASSERT_EQ(0, set_worker(self->fd, 1, &id));
	EXPECT_EQ(1, id);
	EXPECT_LT(0, vmm_worker_tid(getpid(), id));
	ASSERT_EQ(0, get_worker(self->fd, 1, &got));
	EXPECT_EQ(id, got);
	again = id;
	ASSERT_EQ(0, set_worker(self->fd, 0, &again));
	EXPECT_EQ(id, again);
	ASSERT_EQ(0, get_worker(self->fd, 0, &got));
	EXPECT_EQ(id, got);
	EXPECT_EQ(2, vmm_owner_workers(getpid(), NULL, NULL, 8));
	/* Binding to the worker a ring already has changes nothing. */
	ASSERT_EQ(0, set_worker(self->fd, 0, &again));
	EXPECT_EQ(-EBUSY, free_worker(self->fd, id));
}

/*
 * The thread the kernel names for each ring is the worker's own, as the
 * thread that appeared when the worker was made (vhost_task workers) or
 * the kthread named after the worker's id (6.1) shows; and it follows the
 * ring when it is bound elsewhere.
 */
TEST_F_TIMEOUT(dev, worker_info_names_each_ring_thread, 30)
{
	unsigned int a = VHOST_VRING_NEW_WORKER, id = ~0U;
	int t0 = 0, t1 = 0;

	ASSERT_EQ(0, ioctl(self->fd, VHOST_SET_OWNER, NULL));
	ASSERT_EQ(0, worker_info(self->fd, 0, &id, &t0, 0, -1, 0));
	EXPECT_EQ(0, id);
	EXPECT_EQ(vmm_worker_tid(getpid(), 0), t0);
	EXPECT_LT(0, t0);

	ASSERT_EQ(0, set_worker(self->fd, 1, &a));
	ASSERT_EQ(0, worker_info(self->fd, 1, &id, &t1, 0, -1, 0));
	EXPECT_EQ(a, id);
	EXPECT_EQ(vmm_worker_tid(getpid(), a), t1);
	EXPECT_LT(0, t1);
	EXPECT_NE(t0, t1);

	/* Ring 0 moves to ring 1's worker: its thread with it. */
	id = a;
	ASSERT_EQ(0, set_worker(self->fd, 0, &id));
	ASSERT_EQ(0, worker_info(self->fd, 0, &id, &t0, 0, -1, 0));
	EXPECT_EQ(a, id);
	EXPECT_EQ(t1, t0);
}

TEST_F_TIMEOUT(dev, worker_info_errors, 30)
{
	unsigned int id;
	int tid;

	EXPECT_EQ(-EINVAL, worker_info(self->fd, 0, &id, &tid, 0, -1, 0));
	ASSERT_EQ(0, ioctl(self->fd, VHOST_SET_OWNER, NULL));
	EXPECT_EQ(-ENOBUFS, worker_info(self->fd, 2, &id, &tid, 0, -1, 0));
	EXPECT_EQ(-ENOBUFS, worker_info(self->fd, ~0U, &id, &tid, 0, -1, 0));
	EXPECT_EQ(-EINVAL, worker_info(self->fd, 0, &id, &tid, 1, -1, 0));
	EXPECT_EQ(-EINVAL, worker_info(self->fd, 0, &id, &tid, 1U << 31, -1, 0));
	EXPECT_EQ(-EINVAL, worker_info(self->fd, 0, &id, &tid, 0, 0, 1));
	EXPECT_EQ(-EINVAL, worker_info(self->fd, 0, &id, &tid, 0, 1, 1ULL << 63));
	EXPECT_EQ(-1, ioctl(self->fd, VHOST_GET_VRING_WORKER_INFO, (void *)8));
	EXPECT_EQ(EFAULT, errno);
	EXPECT_EQ(0, worker_info(self->fd, 1, &id, &tid, 0, -1, 0));
}

TEST_F_TIMEOUT(dev, errors_before_set_owner, 30)
{
	unsigned int id = 0;

	EXPECT_EQ(-EINVAL, new_worker(self->fd, &id));
	EXPECT_EQ(-EINVAL, free_worker(self->fd, 0));
	EXPECT_EQ(-EINVAL, attach(self->fd, 0, 0));
	EXPECT_EQ(-EINVAL, get_worker(self->fd, 0, &id));
	id = VHOST_VRING_NEW_WORKER;
	EXPECT_EQ(-EINVAL, set_worker(self->fd, 0, &id));
	EXPECT_EQ(0, vmm_owner_workers(getpid(), NULL, NULL, 8));
}

TEST_F_TIMEOUT(dev, errors_bad_index_and_unknown_worker, 30)
{
	unsigned int id = 5;

	ASSERT_EQ(0, ioctl(self->fd, VHOST_SET_OWNER, NULL));
	EXPECT_EQ(-ENOBUFS, attach(self->fd, 2, 0));
	EXPECT_EQ(-ENOBUFS, get_worker(self->fd, 1000, &id));
	id = VHOST_VRING_NEW_WORKER;
	EXPECT_EQ(-ENOBUFS, set_worker(self->fd, 2, &id));
	EXPECT_EQ(1, vmm_owner_workers(getpid(), NULL, NULL, 8))
		TH_LOG("a failed SET_VRING_WORKER left a thread behind");
	EXPECT_EQ(-ENODEV, attach(self->fd, 0, 5));
	EXPECT_EQ(-ENODEV, free_worker(self->fd, 5));
	EXPECT_EQ(-ENODEV, attach(self->fd, 0, VHOST_VRING_NEW_WORKER));
	id = 9;
	EXPECT_EQ(-ENODEV, set_worker(self->fd, 0, &id));
}

TEST_F_TIMEOUT(dev, errors_non_owner, 30)
{
	int status;
	pid_t pid;

	ASSERT_EQ(0, ioctl(self->fd, VHOST_SET_OWNER, NULL));
	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid) {
		unsigned int id = VHOST_VRING_NEW_WORKER;
		int tid;

		if (new_worker(self->fd, &id) != -EPERM ||
		    free_worker(self->fd, 0) != -EPERM ||
		    attach(self->fd, 0, 0) != -EPERM ||
		    get_worker(self->fd, 0, &id) != -EPERM ||
		    set_worker(self->fd, 0, &id) != -EPERM ||
		    worker_info(self->fd, 0, &id, &tid, 0, -1, 0) != -EPERM)
			_exit(1);
		_exit(0);
	}
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ASSERT_TRUE(WIFEXITED(status));
	EXPECT_EQ(0, WEXITSTATUS(status));
	EXPECT_EQ(1, vmm_owner_workers(getpid(), NULL, NULL, 8));
}

TEST_F_TIMEOUT(dev, cap_on_workers_per_device, 30)
{
	unsigned int id, i;
	int old = read_param(MAX_WORKERS_PARAM);

	if (old < 0 && vmm_workers_are_tasks())
		SKIP(return, "no per-device cap on mainline: RLIMIT_NPROC bounds workers");
	if (old < 0)
		SKIP(return, "%s missing", MAX_WORKERS_PARAM);
	if (access(MAX_WORKERS_PARAM, W_OK))
		SKIP(return, "cannot write %s: %s (not root?)", MAX_WORKERS_PARAM,
		     strerror(errno));
	EXPECT_EQ(64, old) TH_LOG("documented default is 64");
	ASSERT_EQ(0, ioctl(self->fd, VHOST_SET_OWNER, NULL));
	ASSERT_EQ(0, write_param(MAX_WORKERS_PARAM, 3));
	for (i = 1; i < 3; i++)
		EXPECT_EQ(0, new_worker(self->fd, &id));
	EXPECT_EQ(-ENOSPC, new_worker(self->fd, &id));
	id = VHOST_VRING_NEW_WORKER;
	EXPECT_EQ(-ENOSPC, set_worker(self->fd, 0, &id));
	EXPECT_EQ(3, vmm_owner_workers(getpid(), NULL, NULL, 8));
	/* Freeing one makes room again. */
	EXPECT_EQ(0, free_worker(self->fd, 2));
	EXPECT_EQ(0, new_worker(self->fd, &id));
	ASSERT_EQ(0, write_param(MAX_WORKERS_PARAM, old));
}

TEST_F_TIMEOUT(dev, drivers_without_support_answer_enotty, 30)
{
	struct vhost_vring_worker w = { .index = 0, .worker_id = 0 };
	struct vhost_vring_worker_info wi = { .index = 0 };
	const char *why = vhost_unusable("/dev/vhost-vsock", "CONFIG_VHOST_VSOCK");
	int fd;

	if (why)
		SKIP(return, "%s", why);
	fd = open("/dev/vhost-vsock", O_RDWR);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, ioctl(fd, VHOST_SET_OWNER, NULL));
	/*
	 * As on mainline, the vring ioctl path sees these first: with a valid
	 * ring index in the first word the answer is -ENOTTY.
	 */
	EXPECT_EQ(-1, ioctl(fd, VHOST_NEW_WORKER, &w));
	EXPECT_EQ(ENOTTY, errno);
	EXPECT_EQ(-1, ioctl(fd, VHOST_ATTACH_VRING_WORKER, &w));
	EXPECT_EQ(ENOTTY, errno);
	EXPECT_EQ(-1, ioctl(fd, VHOST_SET_VRING_WORKER, &w));
	EXPECT_EQ(ENOTTY, errno);
	EXPECT_EQ(-1, ioctl(fd, VHOST_GET_VRING_WORKER_INFO, &wi));
	EXPECT_EQ(ENOTTY, errno);
	EXPECT_EQ(1, vmm_owner_workers(getpid(), NULL, NULL, 8));
	close(fd);
}

TEST_F_TIMEOUT(dev, workers_gone_after_close_and_reset, 30)
{
	unsigned int id = 0;
	int i;

	ASSERT_EQ(0, ioctl(self->fd, VHOST_SET_OWNER, NULL));
	for (i = 0; i < 3; i++)
		ASSERT_EQ(0, new_worker(self->fd, &id));
	ASSERT_EQ(0, attach(self->fd, 1, 2));
	ASSERT_EQ(4, vmm_owner_workers(getpid(), NULL, NULL, 8));
	ASSERT_EQ(0, ioctl(self->fd, VHOST_RESET_OWNER, NULL));
	EXPECT_EQ(0, vmm_owner_workers(getpid(), NULL, NULL, 8));
	ASSERT_EQ(0, ioctl(self->fd, VHOST_SET_OWNER, NULL));
	EXPECT_EQ(1, vmm_owner_workers(getpid(), NULL, NULL, 8));
	ASSERT_EQ(0, new_worker(self->fd, &id));
	EXPECT_EQ(1, id);
	close(self->fd);
	self->fd = -1;
	EXPECT_EQ(0, vmm_owner_workers(getpid(), NULL, NULL, 8));
}

TEST_F_TIMEOUT(dev, workers_join_owner_cgroup, 30)
{
	const char *cg = "/sys/fs/cgroup/vmq-worker-test";
	char path[64], line[256], want[64];
	int tids[8], n, i, fd;
	unsigned int id;
	FILE *f;

	if (access("/sys/fs/cgroup/cgroup.procs", F_OK))
		SKIP(return, "cgroup2 not mounted at /sys/fs/cgroup");
	if (access("/sys/fs/cgroup", W_OK))
		SKIP(return, "cannot create a cgroup: %s (not root?)", strerror(errno));
	rmdir(cg);
	ASSERT_EQ(0, mkdir(cg, 0755));
	snprintf(path, sizeof(path), "%s/cgroup.procs", cg);
	fd = open(path, O_WRONLY);
	ASSERT_LE(0, fd);
	snprintf(line, sizeof(line), "%d", getpid());
	ASSERT_LT(0, write(fd, line, strlen(line)));
	close(fd);

	ASSERT_EQ(0, ioctl(self->fd, VHOST_SET_OWNER, NULL));
	ASSERT_EQ(0, new_worker(self->fd, &id));
	n = vmm_owner_workers(getpid(), tids, NULL, 8);
	ASSERT_EQ(2, n);
	snprintf(want, sizeof(want), "0::/vmq-worker-test\n");
	for (i = 0; i < n; i++) {
		snprintf(path, sizeof(path), "/proc/%d/cgroup", tids[i]);
		f = fopen(path, "r");
		ASSERT_NE(NULL, f);
		ASSERT_NE(NULL, fgets(line, sizeof(line), f));
		fclose(f);
		EXPECT_STREQ(want, line);
	}
	close(self->fd);
	self->fd = -1;
	fd = open("/sys/fs/cgroup/cgroup.procs", O_WRONLY);
	ASSERT_LE(0, fd);
	snprintf(line, sizeof(line), "%d", getpid());
	ASSERT_LT(0, write(fd, line, strlen(line)));
	close(fd);
	EXPECT_EQ(0, rmdir(cg));
}

/*
 * SET_VRING_WORKER is all or nothing: when the result cannot be copied back,
 * the ring stays on its worker and a worker made for it is gone, so a
 * caller that sees -EFAULT has nothing to undo, and a driver that marks the
 * rings a VMM placed (vhost-blk) never misses one.
 */
TEST_F_TIMEOUT(dev, set_vring_worker_efault_binds_nothing, 30)
{
	long page = sysconf(_SC_PAGESIZE);
	struct vhost_vring_worker *w;
	unsigned int id = ~0U, a = 0;

	ASSERT_EQ(0, ioctl(self->fd, VHOST_SET_OWNER, NULL));
	w = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		 -1, 0);
	ASSERT_NE(MAP_FAILED, w);
	/* Readable, so the argument is read; not writable, so no answer. */
	w->index = 1;
	w->worker_id = VHOST_VRING_NEW_WORKER;
	ASSERT_EQ(0, mprotect(w, page, PROT_READ));
	EXPECT_EQ(-1, ioctl(self->fd, VHOST_SET_VRING_WORKER, w));
	EXPECT_EQ(EFAULT, errno);
	ASSERT_EQ(0, get_worker(self->fd, 1, &id));
	EXPECT_EQ(0, id) TH_LOG("ring 1 was bound to a worker the caller never learnt");
	EXPECT_EQ(1, vmm_owner_workers(getpid(), NULL, NULL, 8))
		TH_LOG("a worker was left behind");

	/* An existing worker: not bound either, and not freed. */
	ASSERT_EQ(0, new_worker(self->fd, &a));
	ASSERT_EQ(0, mprotect(w, page, PROT_READ | PROT_WRITE));
	w->worker_id = a;
	ASSERT_EQ(0, mprotect(w, page, PROT_READ));
	EXPECT_EQ(-1, ioctl(self->fd, VHOST_SET_VRING_WORKER, w));
	EXPECT_EQ(EFAULT, errno);
	ASSERT_EQ(0, get_worker(self->fd, 1, &id));
	EXPECT_EQ(0, id);
	EXPECT_EQ(0, attach(self->fd, 1, a)) TH_LOG("worker %u is gone", a);
	munmap(w, page);
}

/* Seconds that @n round trips of ring @ring between workers 0 and @a take. */
static double rebind_time(int fd, unsigned int ring, unsigned int a, int n)
{
	double t = now_s();
	int i;

	for (i = 0; i < n; i++)
		if (attach(fd, ring, a) || attach(fd, ring, 0))
			return -1;
	return now_s() - t;
}

/*
 * Rebinding a ring that has neither a backend nor a kick needs no grace
 * period and no flush (nothing can be queued for it): a VMM binds every ring
 * before it starts it, and a grace period each made VM start slow.  A ring
 * with a kick still gets both; it is the yardstick here, since the absolute
 * cost of a grace period depends on the machine.
 */
TEST_F_TIMEOUT(dev, rebinding_an_idle_ring_waits_for_nothing, 60)
{
	struct vhost_vring_file kick = { .index = 1 };
	double idle, kicked;
	unsigned int a = 0;

	ASSERT_EQ(0, ioctl(self->fd, VHOST_SET_OWNER, NULL));
	ASSERT_EQ(0, new_worker(self->fd, &a));
	kick.fd = eventfd(0, EFD_CLOEXEC);
	ASSERT_LE(0, kick.fd);
	ASSERT_EQ(0, ioctl(self->fd, VHOST_SET_VRING_KICK, &kick));

	idle = rebind_time(self->fd, 0, a, 20);
	kicked = rebind_time(self->fd, 1, a, 20);
	ASSERT_LE(0, idle);
	ASSERT_LE(0, kicked);
	TH_LOG("40 rebinds: idle ring %.1f ms, ring with a kick %.1f ms",
	       idle * 1e3, kicked * 1e3);
	EXPECT_TRUE(idle * 4 < kicked)
		TH_LOG("rebinding an idle ring waits as long as a live one");
	close(kick.fd);
}

struct owner_thread {
	int fd;
	pid_t tid;
	int ret;
};

static void *set_owner_and_exit(void *arg)
{
	struct owner_thread *o = arg;

	o->tid = syscall(SYS_gettid);
	o->ret = ioctl(o->fd, VHOST_SET_OWNER, NULL) ? -errno : 0;
	return NULL;
}

static int read_line(const char *path, char *buf, int len)
{
	FILE *f = fopen(path, "r");
	char *r;

	if (!f)
		return -1;
	r = fgets(buf, len, f);
	fclose(f);
	return r ? 0 : -1;
}

/*
 * A worker joins the cgroup of the thread that creates it, where the VMM is
 * now: not the one the thread that called SET_OWNER was in when it exited.
 */
TEST_F_TIMEOUT(dev, new_worker_joins_the_caller_cgroup_after_owner_thread_exits, 30)
{
	const char *cg = "/sys/fs/cgroup/vmq-worker-test2";
	struct owner_thread o = { .fd = self->fd };
	char path[320], line[256], me[32], orig[256];
	pthread_t t;
	unsigned int id = 0;
	int tid;

	if (access("/sys/fs/cgroup/cgroup.procs", F_OK))
		SKIP(return, "cgroup2 not mounted at /sys/fs/cgroup");
	if (access("/sys/fs/cgroup", W_OK))
		SKIP(return, "cannot create a cgroup: %s (not root?)", strerror(errno));
	ASSERT_EQ(0, read_line("/proc/self/cgroup", orig, sizeof(orig)));
	ASSERT_EQ(0, strncmp(orig, "0::", 3));
	ASSERT_EQ(0, pthread_create(&t, NULL, set_owner_and_exit, &o));
	ASSERT_EQ(0, pthread_join(t, NULL));
	ASSERT_EQ(0, o.ret);

	rmdir(cg);
	ASSERT_EQ(0, mkdir(cg, 0755));
	snprintf(path, sizeof(path), "%s/cgroup.procs", cg);
	snprintf(me, sizeof(me), "%d", getpid());
	ASSERT_EQ(0, write_str(path, me));
	ASSERT_EQ(0, new_worker(self->fd, &id));
	tid = vmm_worker_tid(o.tid, id);
	ASSERT_LT(0, tid);
	snprintf(path, sizeof(path), "/proc/%d/cgroup", tid);
	ASSERT_EQ(0, read_line(path, line, sizeof(line)));
	EXPECT_STREQ("0::/vmq-worker-test2\n", line);

	close(self->fd);
	self->fd = -1;
	/* Back where the test started (it may be another cgroup than "/"). */
	orig[strcspn(orig, "\n")] = 0;
	snprintf(path, sizeof(path), "/sys/fs/cgroup%s/cgroup.procs", orig + 3);
	ASSERT_EQ(0, write_str(path, me));
	EXPECT_EQ(0, rmdir(cg));
}

#define NOBODY 65534

/*
 * Runs in a child: opens vhost-net as root, then becomes NOBODY (no other
 * process of its) with RLIMIT_NPROC soft 1, hard 2.  Returns what failed,
 * or NULL.
 */
static const char *nproc_default_worker(void)
{
	struct rlimit rl = { 1, 2 };
	unsigned int id;
	int fd, r;
	pid_t pid;

	fd = open("/dev/vhost-net", O_RDWR);
	if (fd < 0)
		return "open /dev/vhost-net";
	if (setrlimit(RLIMIT_NPROC, &rl) || setgroups(0, NULL) ||
	    setresgid(NOBODY, NOBODY, NOBODY) || setresuid(NOBODY, NOBODY, NOBODY))
		return "dropping to nobody";
	/* The process fills the limit: its default worker does not fit. */
	r = ioctl(fd, VHOST_SET_OWNER, NULL) ? -errno : 0;
	if (r != -VMM_NPROC_ERRNO)
		return r ? "SET_OWNER at the limit failed, but not with VMM_NPROC_ERRNO" :
			   "SET_OWNER at RLIMIT_NPROC made an uncharged worker";
	rl.rlim_cur = 2;
	if (setrlimit(RLIMIT_NPROC, &rl))
		return "raising the soft limit";
	if (ioctl(fd, VHOST_SET_OWNER, NULL))
		return "SET_OWNER with room for its worker";
	/* The process and its default worker fill the limit now. */
	if (new_worker(fd, &id) != -VMM_NPROC_ERRNO)
		return "NEW_WORKER beyond the limit";
	pid = fork();
	if (!pid)
		_exit(0);
	if (pid > 0) {
		waitpid(pid, NULL, 0);
		return "fork() beyond the limit";
	}
	/* RESET_OWNER returns the charge: a fork fits again. */
	if (ioctl(fd, VHOST_RESET_OWNER, NULL))
		return "RESET_OWNER";
	pid = fork();
	if (pid < 0)
		return "fork() after RESET_OWNER gave the charge back";
	if (!pid)
		_exit(0);
	waitpid(pid, NULL, 0);
	close(fd);
	return NULL;
}

/*
 * Runs in a child: vhost-blk opened and owned as root, with ring 0, then
 * NOBODY with RLIMIT_NPROC 1, which the process fills, sets up ring 1 and
 * starts the rings.  The start (worker_pool 0: a worker per ring) would
 * give ring 1 a worker of its own: it is charged to the caller too, does
 * not fit, and ring 1 stays on the default worker and serves I/O there.
 */
static const char *nproc_pool_worker(void)
{
	struct rlimit rl = { 1, 1 };
	struct vmm_blk b;
	unsigned int id = ~0U;
	void *buf;
	int back;

	back = memfd_create("vmq-backing", MFD_CLOEXEC);
	if (back < 0 || ftruncate(back, 1 << 20))
		return "memfd for the backend";
	if (vmm_blk_open(&b, 1, 64, 1ULL << VIRTIO_F_VERSION_1, 4 << 20))
		return "vmm_blk_open";
	if (setrlimit(RLIMIT_NPROC, &rl) || setgroups(0, NULL) ||
	    setresgid(NOBODY, NOBODY, NOBODY) || setresuid(NOBODY, NOBODY, NOBODY))
		return "dropping to nobody";
	if (vmm_blk_add_ring(&b, 1, 64))
		return "setting up ring 1";
	if (vmm_blk_set_backend(&b, back))
		return "SET_BACKEND";
	buf = vmm_alloc(&b.vmm, 4096, 4096);
	if (!buf)
		return "vmm_alloc";
	if (vmm_blk_do(&b, 1, VIRTIO_BLK_T_IN, 0, buf, 4096) != VIRTIO_BLK_S_OK)
		return "a read on ring 1";
	if (get_worker(b.fd, 1, &id))
		return "GET_VRING_WORKER";
	if (id != 0)
		return "ring 1 got a worker beyond RLIMIT_NPROC";
	if (vmm_owner_workers(getpid(), NULL, NULL, 8) != 1)
		return "a worker was made beyond RLIMIT_NPROC";
	vmm_blk_close(&b);
	return NULL;
}

static void run_as_child(struct __test_metadata *_metadata,
			 const char *(*fn)(void))
{
	int p[2], status;
	char msg[128] = "";
	pid_t pid;

	ASSERT_EQ(0, pipe(p));
	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid) {
		const char *why = fn();

		if (why && write(p[1], why, strlen(why)) < 0)
			_exit(2);
		_exit(why ? 1 : 0);
	}
	close(p[1]);
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	if (read(p[0], msg, sizeof(msg) - 1) < 0)
		msg[0] = 0;
	close(p[0]);
	ASSERT_TRUE(WIFEXITED(status));
	EXPECT_EQ(0, WEXITSTATUS(status)) TH_LOG("%s", msg);
}

/*
 * Every worker a device makes counts against the RLIMIT_NPROC of the caller,
 * the default one of VHOST_SET_OWNER included: N devices are N threads.
 */
TEST_F_TIMEOUT(dev, default_worker_counts_against_nproc, 30)
{
	if (geteuid())
		SKIP(return, "needs root (to drop to uid %d)", NOBODY);
	run_as_child(_metadata, nproc_default_worker);
}

/* So do the workers a driver makes by its own policy. */
TEST_F_TIMEOUT(dev, pool_worker_counts_against_nproc, 30)
{
	const char *why = vhost_unusable("/dev/vhost-blk", "CONFIG_VHOST_BLK");

	if (why)
		SKIP(return, "%s", why);
	if (geteuid())
		SKIP(return, "needs root (to drop to uid %d)", NOBODY);
	if (read_param(WORKER_POOL_PARAM) != 0)
		SKIP(return, "%s is not 0 (a worker per ring)", WORKER_POOL_PARAM);
	run_as_child(_metadata, nproc_pool_worker);
}

/*
 * The workers vhost-blk makes by its own policy (worker_pool 0: one per
 * ring) are named too: each ring's thread is a distinct worker thread of
 * this owner.  Nothing else tells them apart: on mainline every one is
 * "vhost-<pid>", and this process never saw them being made.
 */
TEST_F_TIMEOUT(dev, worker_info_names_blk_pool_workers, 30)
{
	const char *why = vhost_unusable("/dev/vhost-blk", "CONFIG_VHOST_BLK");
	unsigned int id0 = ~0U, id1 = ~0U;
	int tids[8], t0 = 0, t1 = 0, n, i, back;
	bool seen0 = false, seen1 = false;
	struct vmm_blk b;
	void *buf;

	if (why)
		SKIP(return, "%s", why);
	if (read_param(WORKER_POOL_PARAM) != 0)
		SKIP(return, "%s is not 0 (a worker per ring)", WORKER_POOL_PARAM);
	back = memfd_create("vmq-backing", MFD_CLOEXEC);
	ASSERT_LE(0, back);
	ASSERT_EQ(0, ftruncate(back, 1 << 20));
	ASSERT_EQ(0, vmm_blk_open(&b, 2, 64, 1ULL << VIRTIO_F_VERSION_1, 4 << 20));
	ASSERT_EQ(0, vmm_blk_set_backend(&b, back));
	buf = vmm_alloc(&b.vmm, 4096, 4096);
	ASSERT_NE(NULL, buf);
	/* Both rings started and served a request. */
	ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&b, 0, VIRTIO_BLK_T_IN, 0, buf, 4096));
	ASSERT_EQ(VIRTIO_BLK_S_OK, vmm_blk_do(&b, 1, VIRTIO_BLK_T_IN, 0, buf, 4096));

	ASSERT_EQ(0, worker_info(b.fd, 0, &id0, &t0, 0, -1, 0));
	ASSERT_EQ(0, worker_info(b.fd, 1, &id1, &t1, 0, -1, 0));
	EXPECT_NE(id0, id1);
	EXPECT_NE(t0, t1);
	n = vmm_owner_workers(getpid(), tids, NULL, 8);
	EXPECT_EQ(2, n);
	for (i = 0; i < n; i++) {
		seen0 |= tids[i] == t0;
		seen1 |= tids[i] == t1;
	}
	EXPECT_TRUE(seen0) TH_LOG("ring 0's thread %d is not a worker of ours", t0);
	EXPECT_TRUE(seen1) TH_LOG("ring 1's thread %d is not a worker of ours", t1);
	vmm_blk_close(&b);
	close(back);
}

/* vhost-net with traffic. */
FIXTURE(traffic) {
	struct vmm_net n;
	unsigned int rx_seq, tx_seq;	/* next sequence numbers to expect */
};

FIXTURE_SETUP(traffic)
{
	const char *why = vhost_net_unusable();
	int r;

	if (why)
		SKIP(return, "%s", why);
	r = vmm_net_open(&self->n, 256, "vmqwt%d");
	ASSERT_EQ(0, r) TH_LOG("vmm_net_open: %s", strerror(-r));
	ASSERT_EQ(0, vmm_net_post_rx(&self->n, 256));
}

FIXTURE_TEARDOWN(traffic)
{
	vmm_net_close(&self->n);
}

/*
 * Push @count frames each way through the device and check every one, in
 * order.  Frames leave through the TX ring and must show up on the wire;
 * frames sent on the wire must land in RX buffers.
 */
static void pump(struct __test_metadata *_metadata, struct _test_data_traffic *self,
		 unsigned int count, unsigned int batch, int rebind_fd)
{
	unsigned char frame[VMM_NET_BUF];
	struct vmm_net *n = &self->n;
	unsigned int sent = 0, i;
	unsigned int workers[3] = { 0, 0, 0 };

	if (rebind_fd >= 0) {
		ASSERT_EQ(0, new_worker(rebind_fd, &workers[1]));
		ASSERT_EQ(0, new_worker(rebind_fd, &workers[2]));
	}
	while (sent < count) {
		unsigned int want = sent + batch > count ? count - sent : batch;

		for (i = 0; i < want; i++) {
			ASSERT_LE(0, vmm_net_tx(n, self->tx_seq + sent + i, 300, i & 1));
			vmm_net_make_frame(frame, 300, self->rx_seq + sent + i);
			ASSERT_EQ(300, vmm_net_wire_send(n, frame, 300));
		}
		vmm_vq_kick(&n->vq[VMM_NET_TX]);
		if (rebind_fd >= 0) {
			/* Move both rings while their work is in flight. */
			unsigned int k = sent / batch;

			ASSERT_EQ(0, attach(rebind_fd, VMM_NET_TX, workers[k % 3]));
			ASSERT_EQ(0, attach(rebind_fd, VMM_NET_RX, workers[(k + 1) % 3]));
		}
		/* Collect this batch both ways. */
		for (i = 0; i < want;) {
			ssize_t len = vmm_net_wire_recv(n, frame, sizeof(frame), 10000);

			ASSERT_LT(0, len) TH_LOG("TX frame %u lost", self->tx_seq + sent + i);
			if (!vmm_net_is_ours(frame, len))
				continue;
			ASSERT_EQ(0, vmm_net_check_frame(frame, len, self->tx_seq + sent + i))
				TH_LOG("TX frame %u corrupt or out of order (got %u)",
				       self->tx_seq + sent + i, vmm_net_frame_seq(frame));
			i++;
		}
		for (i = 0; i < want;) {
			unsigned char *buf;
			uint32_t len;

			ASSERT_LE(0, vmm_vq_get_used(&n->vq[VMM_NET_RX], &len,
						     (void **)&buf, 10000))
				TH_LOG("RX frame %u lost", self->rx_seq + sent + i);
			ASSERT_EQ(0, vmm_net_repost_rx(n, buf));
			len -= sizeof(struct virtio_net_hdr);
			buf += sizeof(struct virtio_net_hdr);
			if (!vmm_net_is_ours(buf, len))
				continue;
			ASSERT_EQ(0, vmm_net_check_frame(buf, len, self->rx_seq + sent + i))
				TH_LOG("RX frame %u corrupt or out of order (got %u)",
				       self->rx_seq + sent + i, vmm_net_frame_seq(buf));
			i++;
		}
		vmm_vq_kick(&n->vq[VMM_NET_RX]);
		/* TX completions: every buffer comes back exactly once. */
		while (vmm_vq_in_flight(&n->vq[VMM_NET_TX]) > 0) {
			void *buf;

			ASSERT_LE(0, vmm_vq_get_used(&n->vq[VMM_NET_TX], NULL, &buf, 10000));
			n->tx_free[n->tx_nfree++] = buf;
		}
		sent += want;
	}
	self->tx_seq += count;
	self->rx_seq += count;
}

TEST_F_TIMEOUT(traffic, rx_and_tx_on_separate_workers, 600)
{
	unsigned int rx_id = VHOST_VRING_NEW_WORKER, tx_id = VHOST_VRING_NEW_WORKER;
	long rx_cs, tx_cs, rx_cs2, tx_cs2;
	unsigned long long rx_t, tx_t;
	int rx_tid, tx_tid;

	ASSERT_EQ(0, set_worker(self->n.fd, VMM_NET_RX, &rx_id));
	ASSERT_EQ(0, set_worker(self->n.fd, VMM_NET_TX, &tx_id));
	ASSERT_NE(rx_id, tx_id);
	rx_tid = vmm_worker_tid(getpid(), rx_id);
	tx_tid = vmm_worker_tid(getpid(), tx_id);
	ASSERT_LT(0, rx_tid);
	ASSERT_LT(0, tx_tid);
	rx_cs = vmm_thread_wakeups(rx_tid);
	tx_cs = vmm_thread_wakeups(tx_tid);
	rx_t = vmm_thread_cputime(rx_tid);
	tx_t = vmm_thread_cputime(tx_tid);

	pump(_metadata, self, 2000, 64, -1);

	rx_cs2 = vmm_thread_wakeups(rx_tid);
	tx_cs2 = vmm_thread_wakeups(tx_tid);
	TH_LOG("RX worker %d: %ld wakeups, %llu ticks; TX worker %d: %ld wakeups, %llu ticks",
	       rx_tid, rx_cs2 - rx_cs, vmm_thread_cputime(rx_tid) - rx_t,
	       tx_tid, tx_cs2 - tx_cs, vmm_thread_cputime(tx_tid) - tx_t);
	/*
	 * A worker that carried its ring's frames either went idle and woke
	 * between batches or was charged CPU time; an idle one does neither.
	 */
	EXPECT_TRUE(rx_cs2 - rx_cs >= 8 || vmm_thread_cputime(rx_tid) > rx_t)
		TH_LOG("the RX worker did no work");
	EXPECT_TRUE(tx_cs2 - tx_cs >= 8 || vmm_thread_cputime(tx_tid) > tx_t)
		TH_LOG("the TX worker did no work");
}

TEST_F_TIMEOUT(traffic, rebind_while_traffic_flows, 600)
{
	pump(_metadata, self, 4000, 32, self->n.fd);
	/* And the device still works on whatever it ended on. */
	pump(_metadata, self, 64, 64, -1);
}

TEST_F_TIMEOUT(traffic, kill_owner_with_io_in_flight, 300)
{
	int p[2], status, tries, workers;
	char c;
	pid_t pid;

	ASSERT_EQ(0, pipe(p));
	pid = vmm_fork_tied();
	ASSERT_LE(0, pid);
	if (!pid) {
		struct vmm_net n;
		unsigned int id = VHOST_VRING_NEW_WORKER, seq = 0;

		if (vmm_net_open(&n, 256, "vmqkill%d") ||
		    set_worker(n.fd, VMM_NET_TX, &id))
			_exit(1);
		id = VHOST_VRING_NEW_WORKER;
		if (set_worker(n.fd, VMM_NET_RX, &id) || vmm_net_post_rx(&n, 256))
			_exit(1);
		if (write(p[1], "x", 1) != 1)
			_exit(1);
		for (;;) {
			unsigned char frame[300];

			while (vmm_net_tx(&n, seq++, 300, false) >= 0)
				;
			vmm_vq_kick(&n.vq[VMM_NET_TX]);
			vmm_net_make_frame(frame, 300, seq);
			vmm_net_wire_send(&n, frame, 300);
			vmm_net_tx_reap(&n);
		}
	}
	close(p[1]);
	ASSERT_EQ(1, read(p[0], &c, 1)) TH_LOG("child failed to set up");
	close(p[0]);
	workers = vmm_owner_workers(pid, NULL, NULL, 8);
	usleep(300 * 1000);
	/* Before any assertion: the child loops until it is killed. */
	ASSERT_EQ(0, kill(pid, SIGKILL));
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ASSERT_TRUE(WIFSIGNALED(status));
	EXPECT_EQ(3, workers);
	for (tries = 0; tries < 100 && vmm_owner_workers(pid, NULL, NULL, 8); tries++)
		usleep(100 * 1000);
	EXPECT_EQ(0, vmm_owner_workers(pid, NULL, NULL, 8))
		TH_LOG("worker threads outlived their owner");
	/* The fixture's own device, opened before, still carries traffic. */
	pump(_metadata, self, 64, 32, -1);
}

TEST_HARNESS_MAIN
