// SPDX-License-Identifier: GPL-2.0
/*
 * Per-virtqueue worker threads: the worker ioctls, their error codes, the
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
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <linux/virtio_net.h>

#include "../kselftest_harness.h"
#include "vhost_test.h"
#include "vhost_vmm.h"
#include "vhost_net_lib.h"

#define MAX_WORKERS_PARAM "/sys/module/vhost/parameters/max_workers"

static int new_worker(int fd, unsigned int *id)
{
	struct vhost_worker_state s = { .worker_id = 12345 };

	if (ioctl(fd, VHOST_NEW_WORKER, &s))
		return -errno;
	*id = s.worker_id;
	return 0;
}

static int free_worker(int fd, unsigned int id)
{
	struct vhost_worker_state s = { .worker_id = id };

	return ioctl(fd, VHOST_FREE_WORKER, &s) ? -errno : 0;
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

	if (ioctl(fd, VHOST_SET_VRING_WORKER, &w))
		return -errno;
	*id = w.worker_id;
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
	bool skipped;
	int fd;
};

FIXTURE_SETUP(dev)
{
	const char *why = vhost_unusable("/dev/vhost-net", "CONFIG_VHOST_NET");

	self->fd = -1;
	if (why)
		VHOST_SKIP(return, "%s", why);
	self->fd = open("/dev/vhost-net", O_RDWR);
	ASSERT_LE(0, self->fd);
}

FIXTURE_TEARDOWN(dev)
{
	if (self->fd >= 0)
		close(self->fd);
}

VHOST_TEST_F(dev, default_is_one_worker_named_like_6_1, 30)
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

VHOST_TEST_F(dev, new_attach_get_free, 30)
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

VHOST_TEST_F(dev, set_vring_worker_creates_or_binds, 30)
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

VHOST_TEST_F(dev, errors_before_set_owner, 30)
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

VHOST_TEST_F(dev, errors_bad_index_and_unknown_worker, 30)
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

VHOST_TEST_F(dev, errors_non_owner, 30)
{
	int status;
	pid_t pid;

	ASSERT_EQ(0, ioctl(self->fd, VHOST_SET_OWNER, NULL));
	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid) {
		unsigned int id = VHOST_VRING_NEW_WORKER;

		if (new_worker(self->fd, &id) != -EPERM ||
		    free_worker(self->fd, 0) != -EPERM ||
		    attach(self->fd, 0, 0) != -EPERM ||
		    get_worker(self->fd, 0, &id) != -EPERM ||
		    set_worker(self->fd, 0, &id) != -EPERM)
			_exit(1);
		_exit(0);
	}
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ASSERT_TRUE(WIFEXITED(status));
	EXPECT_EQ(0, WEXITSTATUS(status));
	EXPECT_EQ(1, vmm_owner_workers(getpid(), NULL, NULL, 8));
}

VHOST_TEST_F(dev, cap_on_workers_per_device, 30)
{
	unsigned int id, i;
	int old = read_param(MAX_WORKERS_PARAM);

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

VHOST_TEST_F(dev, drivers_without_support_answer_enotty, 30)
{
	struct vhost_vring_worker w = { .index = 0, .worker_id = 0 };
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
	EXPECT_EQ(1, vmm_owner_workers(getpid(), NULL, NULL, 8));
	close(fd);
}

VHOST_TEST_F(dev, workers_gone_after_close_and_reset, 30)
{
	unsigned int id;
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

VHOST_TEST_F(dev, workers_join_owner_cgroup, 30)
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

/* vhost-net with traffic. */
FIXTURE(traffic) {
	bool skipped;
	struct vmm_net n;
	unsigned int rx_seq, tx_seq;	/* next sequence numbers to expect */
};

FIXTURE_SETUP(traffic)
{
	const char *why = vhost_net_unusable();
	int r;

	if (why)
		VHOST_SKIP(return, "%s", why);
	r = vmm_net_open(&self->n, 256, "vmqwt%d");
	ASSERT_EQ(0, r) TH_LOG("vmm_net_open: %s", strerror(-r));
	ASSERT_EQ(0, vmm_net_post_rx(&self->n, 256));
}

FIXTURE_TEARDOWN(traffic)
{
	if (!self->skipped)
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

VHOST_TEST_F(traffic, rx_and_tx_on_separate_workers, 600)
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

VHOST_TEST_F(traffic, rebind_while_traffic_flows, 600)
{
	pump(_metadata, self, 4000, 32, self->n.fd);
	/* And the device still works on whatever it ended on. */
	pump(_metadata, self, 64, 64, -1);
}

VHOST_TEST_F(traffic, kill_owner_with_io_in_flight, 300)
{
	int p[2], status, tries;
	char c;
	pid_t pid;

	ASSERT_EQ(0, pipe(p));
	pid = fork();
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
	ASSERT_EQ(3, vmm_owner_workers(pid, NULL, NULL, 8));
	usleep(300 * 1000);
	ASSERT_EQ(0, kill(pid, SIGKILL));
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ASSERT_TRUE(WIFSIGNALED(status));
	for (tries = 0; tries < 100 && vmm_owner_workers(pid, NULL, NULL, 8); tries++)
		usleep(100 * 1000);
	EXPECT_EQ(0, vmm_owner_workers(pid, NULL, NULL, 8))
		TH_LOG("worker threads outlived their owner");
	/* The fixture's own device, opened before, still carries traffic. */
	pump(_metadata, self, 64, 32, -1);
}

TEST_HARNESS_MAIN
