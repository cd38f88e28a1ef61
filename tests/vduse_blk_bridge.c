// SPDX-License-Identifier: GPL-2.0
/*
 * vduse_blk_bridge: put the kernel's own virtio_blk driver in front of
 * /dev/vhost-blk, without KVM.
 *
 * It creates a VDUSE virtio-blk device whose config space describes the
 * backing store, binds it with "vdpa dev add" (virtio_vdpa + virtio_blk make
 * it a /dev/vdX), and when the driver sets DRIVER_OK hands every ring to
 * vhost-blk:
 *   - guest memory is VDUSE's IOVA space: every VDUSE_IOTLB_GET_FD range is
 *     mmapped here and becomes a vhost memory region with GPA = IOVA;
 *   - ring addresses come from VDUSE_VQ_GET_INFO, translated the same way;
 *   - the kick eventfd VDUSE signals is vhost's kick eventfd;
 *   - vhost's call eventfds are relayed as VDUSE_VQ_INJECT_IRQ by a thread
 *     (VDUSE takes interrupts only by ioctl).
 * With -b USEC every ring it hands over busy-polls for up to USEC
 * microseconds before its worker sleeps (VHOST_SET_VRING_BUSYLOOP_TIMEOUT,
 * set once the ring is set up; without -b a ring keeps the module's default).
 * On SIGINT/SIGTERM it removes the vdpa device, stops vhost-blk and destroys
 * the VDUSE device.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <linux/fs.h>
#include <linux/vduse.h>
#include <linux/vhost.h>
#include <linux/virtio_blk.h>
#include <linux/virtio_config.h>
#include <linux/virtio_ring.h>

#define MAX_REGIONS	64
#define QSIZE_MAX	256
/* VDUSE's bounce area: IOVA [0, 64M) of the domain file (VDUSE_BOUNCE_SIZE). */
#define BOUNCE_SIZE	(64ULL << 20)

static const char usage[] =
"usage: vduse_blk_bridge -d BACKING [-n NAME] [-q QUEUES] [-p perqueue|shared]\n"
"                        [-b USEC] [-r shared|perqueue]\n"
"  Creates VDUSE virtio-blk device NAME (default vhostblk0) with QUEUES\n"
"  queues (default 1) served by /dev/vhost-blk from BACKING (a block device\n"
"  or file, opened O_DIRECT), binds it with \"vdpa dev add\" and runs until\n"
"  SIGINT or SIGTERM.  -p shared puts every ring on one vhost worker; the\n"
"  default gives each ring its own.  -b USEC: every ring busy-polls for up\n"
"  to USEC microseconds before its worker sleeps\n"
"  (VHOST_SET_VRING_BUSYLOOP_TIMEOUT; 0 disables; default: the module's).\n"
"  -r perqueue: a relay thread per queue for vhost's interrupts (vdb-relayN)\n"
"  instead of one for all (vdb-relay, the default).\n";

struct region {
	uint64_t iova, size;
	void *hva;
};

static struct {
	const char *name, *policy;
	int backing, dev, vhost;
	unsigned int nq;
	long busyloop;		/* -b USEC, or -1: leave the module's default */
	uint64_t bytes;
	struct region reg[MAX_REGIONS];
	unsigned int nreg;
	int kick[VHOST_BLK_MAX_QUEUES], call[VHOST_BLK_MAX_QUEUES];
	int stop_relay;		/* eventfd: tells the relay threads to stop */
	bool relay_stop;	/* set once the relays are to stop (atomics) */
	const char *relays;	/* -r: "shared" or "perqueue" */
	pthread_t relay[VHOST_BLK_MAX_QUEUES];
	unsigned int nrelay;
	bool running;
} br = { .name = "vhostblk0", .policy = "perqueue", .relays = "shared", .vhost = -1, .nq = 1,
	  .busyloop = -1 };

static void die(const char *what)
{
	fprintf(stderr, "vduse_blk_bridge: %s: %s\n", what, strerror(errno));
	exit(1);
}

static int run(const char *cmd)
{
	int r = system(cmd);

	if (r)
		fprintf(stderr, "vduse_blk_bridge: \"%s\" failed (%d)\n", cmd, r);
	return r;
}

static void *hva(uint64_t iova)
{
	unsigned int i;

	for (i = 0; i < br.nreg; i++)
		if (iova >= br.reg[i].iova && iova - br.reg[i].iova < br.reg[i].size)
			return (char *)br.reg[i].hva + (iova - br.reg[i].iova);
	return NULL;
}

/*
 * Relay vhost's "used buffers" signals to the guest as VDUSE interrupts.
 * By default one thread for all rings: on a 2-vCPU VM a thread per ring
 * measured slower, with either worker policy (more threads to wake on the
 * same vCPUs).  With -r perqueue, ring q has thread q (the benchmark's
 * instruction counts give every thread a vCPU of its own).  @arg is the
 * first ring, as an integer; the thread takes it alone, or all rings from
 * 0 when it is the only relay.
 *
 * This thread stands in for KVM's irqfd, which VDUSE lacks, and its cost
 * counts as the backend's, so it does as little as it can per interrupt: a
 * thread with one ring sleeps in read() on the eventfd (no poll table to
 * set up and tear down each time), one with several in epoll_wait(), whose
 * registrations outlive the call.  stop_vhost() sets br.relay_stop, then
 * writes the call eventfds and br.stop_relay.
 */
static void *relay(void *arg)
{
	unsigned int first = (uintptr_t)arg, n = br.nrelay == 1 ? br.nq : 1;
	struct epoll_event ev[VHOST_BLK_MAX_QUEUES + 1];
	unsigned int i, q;
	int ep, k;
	uint64_t v;

	if (n == 1) {
		for (;;) {
			if (read(br.call[first], &v, sizeof(v)) != sizeof(v)) {
				if (errno == EINTR)
					continue;
				break;
			}
			/* Pairs with the release in stop_vhost(). */
			if (__atomic_load_n(&br.relay_stop, __ATOMIC_ACQUIRE))
				break;
			if (ioctl(br.dev, VDUSE_VQ_INJECT_IRQ, &first))
				perror("VDUSE_VQ_INJECT_IRQ");
		}
		return NULL;
	}
	ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep < 0) {
		perror("epoll_create1");
		return NULL;
	}
	for (i = 0; i <= n; i++) {
		/* The stop eventfd is UINT32_MAX, a ring its index. */
		struct epoll_event e = { .events = EPOLLIN,
					 .data.u32 = i < n ? first + i : UINT32_MAX };
		int fd = i < n ? br.call[first + i] : br.stop_relay;

		if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e)) {
			perror("epoll_ctl");
			goto out;
		}
	}
	for (;;) {
		k = epoll_wait(ep, ev, n + 1, -1);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		for (i = 0; i < (unsigned int)k; i++) {
			q = ev[i].data.u32;
			if (q == UINT32_MAX)
				goto out;
			if (read(br.call[q], &v, sizeof(v)) != sizeof(v))
				continue;
			if (ioctl(br.dev, VDUSE_VQ_INJECT_IRQ, &q))
				perror("VDUSE_VQ_INJECT_IRQ");
		}
	}
out:
	close(ep);
	return NULL;
}

/*
 * Map every IOVA range VDUSE has that we have not mapped yet.  Ranges
 * already mapped stay where they are: vhost holds ring pointers into them.
 */
static void map_iova_space(void)
{
	struct vduse_iotlb_entry e;
	uint64_t start = 0;
	unsigned int i;

	while (br.nreg < MAX_REGIONS) {
		bool have = false;
		int fd;
		void *p;

		memset(&e, 0, sizeof(e));
		e.start = start;
		e.last = UINT64_MAX;
		fd = ioctl(br.dev, VDUSE_IOTLB_GET_FD, &e);
		if (fd < 0)
			break;
		for (i = 0; i < br.nreg; i++)
			have |= br.reg[i].iova == e.start &&
				br.reg[i].size == e.last - e.start + 1;
		if (have) {
			close(fd);
			if (e.last == UINT64_MAX)
				break;
			start = e.last + 1;
			continue;
		}
		p = mmap(NULL, e.last - e.start + 1,
			 (e.perm & VDUSE_ACCESS_RO ? PROT_READ : 0) |
			 (e.perm & VDUSE_ACCESS_WO ? PROT_WRITE : 0),
			 MAP_SHARED, fd, e.offset);
		close(fd);
		if (p == MAP_FAILED)
			die("mmap IOTLB range");
		br.reg[br.nreg++] = (struct region){ e.start, e.last - e.start + 1, p };
		if (e.last == UINT64_MAX)
			break;
		start = e.last + 1;
	}
}

/* Guest memory for vhost: every IOVA range, GPA = IOVA. */
static void set_mem_table(void)
{
	struct {
		struct vhost_memory m;
		struct vhost_memory_region r[MAX_REGIONS];
	} mt;
	unsigned int i;

	memset(&mt, 0, sizeof(mt));
	mt.m.nregions = br.nreg;
	for (i = 0; i < br.nreg; i++) {
		mt.r[i].guest_phys_addr = br.reg[i].iova;
		mt.r[i].memory_size = br.reg[i].size;
		mt.r[i].userspace_addr = (uintptr_t)br.reg[i].hva;
	}
	if (ioctl(br.vhost, VHOST_SET_MEM_TABLE, &mt.m))
		die("VHOST_SET_MEM_TABLE");
}

/*
 * The bounce area enters VDUSE's IOTLB only with the first DMA mapping, and
 * userspace is not told.  It is the first BOUNCE_SIZE bytes of the domain
 * file every IOTLB fd refers to, and faults serve pages only once mapped
 * for DMA: map it now, so the memory table covers it before any request.
 */
static void map_bounce_area(void)
{
	struct vduse_iotlb_entry e = { .start = 0, .last = UINT64_MAX };
	int fd = ioctl(br.dev, VDUSE_IOTLB_GET_FD, &e);
	void *p;

	if (fd < 0)
		die("VDUSE_IOTLB_GET_FD");
	p = mmap(NULL, BOUNCE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		die("mmap bounce area");
	br.reg[br.nreg++] = (struct region){ 0, BOUNCE_SIZE, p };
}

static void start_vhost(void)
{
	struct vhost_blk_backend be = { .fd = br.backing };
	uint64_t features, want, offered;
	unsigned int q;

	map_bounce_area();
	map_iova_space();
	if (!br.nreg) {
		fprintf(stderr, "vduse_blk_bridge: no IOVA mappings\n");
		return;
	}
	br.vhost = open("/dev/vhost-blk", O_RDWR);
	if (br.vhost < 0)
		die("/dev/vhost-blk");
	if (ioctl(br.vhost, VHOST_SET_OWNER, NULL))
		die("VHOST_SET_OWNER");
	if (ioctl(br.dev, VDUSE_DEV_GET_FEATURES, &features))
		die("VDUSE_DEV_GET_FEATURES");
	/*
	 * Addresses are IOVAs, and our memory table maps IOVA 1:1.  The bits
	 * that only say a config field is valid (SEG_MAX, BLK_SIZE, MQ) are
	 * ours, as a VMM's: the kernel serves the rest.
	 */
	if (ioctl(br.vhost, VHOST_GET_FEATURES, &offered))
		die("VHOST_GET_FEATURES");
	want = features & offered & ~(1ULL << VIRTIO_F_ACCESS_PLATFORM);
	if (ioctl(br.vhost, VHOST_SET_FEATURES, &want))
		die("VHOST_SET_FEATURES");
	set_mem_table();

	for (q = 0; q < br.nq; q++) {
		struct vduse_vq_info info = { .index = q };
		struct vhost_vring_state s = { .index = q };
		struct vhost_vring_addr a = { .index = q };
		struct vhost_vring_file f = { .index = q };
		struct vduse_vq_eventfd kick = { .index = q };

		if (ioctl(br.dev, VDUSE_VQ_GET_INFO, &info))
			die("VDUSE_VQ_GET_INFO");
		if (!info.ready)
			continue;
		s.num = info.num;
		if (ioctl(br.vhost, VHOST_SET_VRING_NUM, &s))
			die("VHOST_SET_VRING_NUM");
		s.num = info.split.avail_index;
		if (ioctl(br.vhost, VHOST_SET_VRING_BASE, &s))
			die("VHOST_SET_VRING_BASE");
		a.desc_user_addr = (uintptr_t)hva(info.desc_addr);
		a.avail_user_addr = (uintptr_t)hva(info.driver_addr);
		a.used_user_addr = (uintptr_t)hva(info.device_addr);
		if (!a.desc_user_addr || !a.avail_user_addr || !a.used_user_addr) {
			fprintf(stderr, "vduse_blk_bridge: ring %u outside IOVA mappings\n", q);
			exit(1);
		}
		if (ioctl(br.vhost, VHOST_SET_VRING_ADDR, &a))
			die("VHOST_SET_VRING_ADDR");
		br.kick[q] = eventfd(0, EFD_CLOEXEC);
		/* Blocking: a relay of one ring sleeps in read() on it. */
		br.call[q] = eventfd(0, EFD_CLOEXEC);
		kick.fd = br.kick[q];
		if (ioctl(br.dev, VDUSE_VQ_SETUP_KICKFD, &kick))
			die("VDUSE_VQ_SETUP_KICKFD");
		f.fd = br.kick[q];
		if (ioctl(br.vhost, VHOST_SET_VRING_KICK, &f))
			die("VHOST_SET_VRING_KICK");
		f.fd = br.call[q];
		if (ioctl(br.vhost, VHOST_SET_VRING_CALL, &f))
			die("VHOST_SET_VRING_CALL");
		if (!strcmp(br.policy, "shared")) {
			struct vhost_vring_worker w = { .index = q, .worker_id = 0 };

			if (ioctl(br.vhost, VHOST_ATTACH_VRING_WORKER, &w))
				die("VHOST_ATTACH_VRING_WORKER");
		}
		if (br.busyloop >= 0) {
			struct vhost_vring_state t = { .index = q, .num = br.busyloop };

			if (ioctl(br.vhost, VHOST_SET_VRING_BUSYLOOP_TIMEOUT, &t))
				die("VHOST_SET_VRING_BUSYLOOP_TIMEOUT");
		}
	}
	/* A semaphore-less eventfd: once written, every relay sees it. */
	br.stop_relay = eventfd(0, EFD_CLOEXEC);
	if (br.stop_relay < 0)
		die("relay eventfd");
	br.nrelay = strcmp(br.relays, "perqueue") ? 1 : br.nq;
	for (q = 0; q < br.nrelay; q++) {
		char name[16];

		if (pthread_create(&br.relay[q], NULL, relay, (void *)(uintptr_t)q))
			die("relay thread");
		/* Named, so that the benchmark finds and pins them. */
		if (br.nrelay == 1)
			snprintf(name, sizeof(name), "vdb-relay");
		else
			snprintf(name, sizeof(name), "vdb-relay%u", q);
		pthread_setname_np(br.relay[q], name);
	}
	if (ioctl(br.vhost, VHOST_BLK_SET_BACKEND, &be))
		die("VHOST_BLK_SET_BACKEND");
	br.running = true;
	fprintf(stderr, "vduse_blk_bridge: %s: %u queue(s) on vhost-blk (%s workers)",
		br.name, br.nq, br.policy);
	if (br.busyloop >= 0)
		fprintf(stderr, ", busy polling %ld us", br.busyloop);
	fprintf(stderr, ", %u IOVA region(s)\n", br.nreg);
}

static void stop_vhost(void)
{
	uint64_t one = 1;
	unsigned int q, i;

	if (!br.running)
		return;
	br.running = false;
	/* Closing the device drains every request in flight. */
	close(br.vhost);
	br.vhost = -1;
	/* Pairs with the acquire in relay(): a woken relay sees it set. */
	__atomic_store_n(&br.relay_stop, true, __ATOMIC_RELEASE);
	if (write(br.stop_relay, &one, sizeof(one)) != sizeof(one))
		perror("stop relay");
	/* The relays of one ring each sleep in read() on their eventfd. */
	for (q = 0; q < br.nq; q++)
		if (br.call[q] >= 0 && write(br.call[q], &one, sizeof(one)) != sizeof(one))
			perror("stop relay");
	for (i = 0; i < br.nrelay; i++)
		pthread_join(br.relay[i], NULL);
	close(br.stop_relay);
	for (q = 0; q < br.nq; q++) {
		struct vduse_vq_eventfd kick = { .index = q, .fd = VDUSE_EVENTFD_DEASSIGN };

		if (br.kick[q] < 0)
			continue;
		ioctl(br.dev, VDUSE_VQ_SETUP_KICKFD, &kick);
		close(br.kick[q]);
		close(br.call[q]);
		br.kick[q] = -1;
		br.call[q] = -1;
	}
	for (i = 0; i < br.nreg; i++)
		munmap(br.reg[i].hva, br.reg[i].size);
	br.nreg = 0;
}

/* Answer VDUSE's requests: status changes start and stop vhost-blk. */
static void *messages(void *arg)
{
	struct vduse_dev_request req;
	struct vduse_dev_response resp;

	while (read(br.dev, &req, sizeof(req)) == sizeof(req)) {
		memset(&resp, 0, sizeof(resp));
		resp.request_id = req.request_id;
		resp.result = VDUSE_REQ_RESULT_OK;
		switch (req.type) {
		case VDUSE_SET_STATUS:
			if (req.s.status & VIRTIO_CONFIG_S_DRIVER_OK)
				start_vhost();
			else if (!req.s.status)
				stop_vhost();
			break;
		case VDUSE_GET_VQ_STATE: {
			struct vhost_vring_state s = { .index = req.vq_state.index };

			resp.vq_state.index = s.index;
			if (br.running && !ioctl(br.vhost, VHOST_GET_VRING_BASE, &s))
				resp.vq_state.split.avail_index = s.num;
			break;
		}
		case VDUSE_UPDATE_IOTLB:
			/*
			 * The bounce area appears with the first DMA mapping,
			 * after DRIVER_OK: map it before the request using it
			 * can reach the ring (the driver waits for this reply).
			 */
			if (br.running) {
				unsigned int n = br.nreg;

				map_iova_space();
				if (br.nreg != n)
					set_mem_table();
			}
			break;
		default:
			resp.result = VDUSE_REQ_RESULT_FAILED;
			break;
		}
		if (write(br.dev, &resp, sizeof(resp)) != sizeof(resp))
			perror("VDUSE response");
	}
	return NULL;
}

int main(int argc, char **argv)
{
	struct vduse_dev_config *cfg;
	struct virtio_blk_config bc;
	const char *path = NULL;
	uint64_t version = 0;
	char cmd[512], devpath[300];
	pthread_t msg;
	struct stat st;
	unsigned int q;
	int ctl, opt, sig;
	sigset_t sigs;
	char *end;

	while ((opt = getopt(argc, argv, "d:n:q:p:b:r:h")) != -1) {
		switch (opt) {
		case 'd':
			path = optarg;
			break;
		case 'n':
			br.name = optarg;
			break;
		case 'q':
			br.nq = atoi(optarg);
			break;
		case 'p':
			br.policy = optarg;
			break;
		case 'r':
			br.relays = optarg;
			break;
		case 'b':
			errno = 0;
			br.busyloop = strtol(optarg, &end, 10);
			if (errno || end == optarg || *end || br.busyloop < 0 ||
			    br.busyloop > UINT32_MAX) {
				fprintf(stderr, "vduse_blk_bridge: -b %s: not a timeout in us\n",
					optarg);
				return 2;
			}
			break;
		default:
			fputs(usage, opt == 'h' ? stdout : stderr);
			return opt == 'h' ? 0 : 2;
		}
	}
	if (!path || !br.nq || br.nq > VHOST_BLK_MAX_QUEUES ||
	    (strcmp(br.policy, "perqueue") && strcmp(br.policy, "shared")) ||
	    (strcmp(br.relays, "perqueue") && strcmp(br.relays, "shared"))) {
		fputs(usage, stderr);
		return 2;
	}
	for (q = 0; q < VHOST_BLK_MAX_QUEUES; q++) {
		br.kick[q] = -1;
		br.call[q] = -1;
	}
	br.backing = open(path, O_RDWR | O_DIRECT);
	if (br.backing < 0 || fstat(br.backing, &st))
		die(path);
	if (S_ISBLK(st.st_mode)) {
		if (ioctl(br.backing, BLKGETSIZE64, &br.bytes))
			die("BLKGETSIZE64");
	} else {
		br.bytes = st.st_size;
	}

	memset(&bc, 0, sizeof(bc));
	bc.capacity = br.bytes / 512;
	bc.seg_max = VHOST_BLK_SEG_MAX;
	bc.blk_size = 512;
	bc.num_queues = br.nq;
	bc.max_discard_sectors = 0xffffffff;
	bc.max_discard_seg = VHOST_BLK_MAX_DISCARD_SEG;
	bc.discard_sector_alignment = 1;
	bc.max_write_zeroes_sectors = 0xffffffff;
	bc.max_write_zeroes_seg = VHOST_BLK_MAX_DISCARD_SEG;
	bc.write_zeroes_may_unmap = 1;

	cfg = calloc(1, sizeof(*cfg) + sizeof(bc));
	if (!cfg)
		die("calloc");
	snprintf(cfg->name, sizeof(cfg->name), "%s", br.name);
	cfg->device_id = VIRTIO_ID_BLOCK;
	cfg->features = (1ULL << VIRTIO_F_VERSION_1) | (1ULL << VIRTIO_F_ACCESS_PLATFORM) |
			(1ULL << VIRTIO_RING_F_INDIRECT_DESC) | (1ULL << VIRTIO_RING_F_EVENT_IDX) |
			(1ULL << VIRTIO_BLK_F_SEG_MAX) | (1ULL << VIRTIO_BLK_F_BLK_SIZE) |
			(1ULL << VIRTIO_BLK_F_FLUSH) | (1ULL << VIRTIO_BLK_F_DISCARD) |
			(1ULL << VIRTIO_BLK_F_WRITE_ZEROES) |
			(br.nq > 1 ? 1ULL << VIRTIO_BLK_F_MQ : 0);
	cfg->vq_num = br.nq;
	cfg->vq_align = 4096;
	cfg->config_size = sizeof(bc);
	memcpy(cfg->config, &bc, sizeof(bc));

	ctl = open("/dev/vduse/control", O_RDWR);
	if (ctl < 0)
		die("/dev/vduse/control (CONFIG_VDPA_USER)");
	if (ioctl(ctl, VDUSE_SET_API_VERSION, &version))
		die("VDUSE_SET_API_VERSION");
	if (ioctl(ctl, VDUSE_CREATE_DEV, cfg))
		die("VDUSE_CREATE_DEV");
	snprintf(devpath, sizeof(devpath), "/dev/vduse/%s", br.name);
	br.dev = open(devpath, O_RDWR);
	if (br.dev < 0)
		die(devpath);
	for (q = 0; q < br.nq; q++) {
		struct vduse_vq_config vc = { .index = q, .max_size = QSIZE_MAX };

		if (ioctl(br.dev, VDUSE_VQ_SETUP, &vc))
			die("VDUSE_VQ_SETUP");
	}
	/* SIGINT and SIGTERM end the run; threads inherit the mask. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	pthread_create(&msg, NULL, messages, NULL);
	pthread_setname_np(msg, "vdb-messages");

	snprintf(cmd, sizeof(cmd), "vdpa dev add name %s mgmtdev vduse", br.name);
	if (!run(cmd)) {
		fprintf(stderr, "vduse_blk_bridge: ready\n");
		sigwait(&sigs, &sig);
	}

	snprintf(cmd, sizeof(cmd), "vdpa dev del %s", br.name);
	run(cmd);
	stop_vhost();
	/* A read() in progress holds the device: stop the reader first. */
	pthread_cancel(msg);
	pthread_join(msg, NULL);
	close(br.dev);
	if (ioctl(ctl, VDUSE_DESTROY_DEV, cfg->name))
		perror("VDUSE_DESTROY_DEV");
	close(ctl);
	close(br.backing);
	free(cfg);
	return 0;
}
