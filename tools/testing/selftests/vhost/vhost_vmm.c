// SPDX-License-Identifier: GPL-2.0
/*
 * A tiny userspace "VMM + guest driver" for vhost selftests; see vhost_vmm.h.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/utsname.h>

#include "vhost_vmm.h"

#define VMM_RING_ALIGN	4096

/* Pairs with the device's read barrier before it reads avail->idx. */
#define vmm_wmb()	__atomic_thread_fence(__ATOMIC_RELEASE)
/* Pairs with the device's write barrier before it publishes used->idx. */
#define vmm_rmb()	__atomic_thread_fence(__ATOMIC_ACQUIRE)

int vmm_init(struct vmm *vmm, size_t size)
{
	memset(vmm, 0, sizeof(*vmm));
	vmm->mem = mmap(NULL, size, PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (vmm->mem == MAP_FAILED)
		return -errno;
	vmm->size = size;
	vmm->gpa_base = VMM_GPA_BASE;
	return 0;
}

int vmm_init_shared(struct vmm *vmm, size_t size)
{
	int fd = memfd_create("vmm-guest-ram", MFD_CLOEXEC);
	int err;

	memset(vmm, 0, sizeof(*vmm));
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, size))
		goto err_close;
	vmm->mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
	if (vmm->mem == MAP_FAILED)
		goto err_close;
	vmm->size = size;
	vmm->gpa_base = VMM_GPA_BASE;
	vmm->memfd = fd;
	vmm->shared = true;
	return 0;

err_close:
	err = -errno;
	close(fd);
	return err;
}

void vmm_free(struct vmm *vmm)
{
	if (vmm->mem && vmm->mem != MAP_FAILED)
		munmap(vmm->mem, vmm->size);
	vmm->mem = NULL;
	if (vmm->shared)
		close(vmm->memfd);
	vmm->shared = false;
}

void *vmm_alloc(struct vmm *vmm, size_t size, size_t align)
{
	size_t off = (vmm->brk + align - 1) & ~(align - 1);

	if (off + size > vmm->size)
		return NULL;
	vmm->brk = off + size;
	return (char *)vmm->mem + off;
}

uint64_t vmm_gpa(const struct vmm *vmm, const void *p)
{
	return vmm->gpa_base + ((const char *)p - (const char *)vmm->mem);
}

int vmm_set_mem_table(struct vmm *vmm, int vhost_fd)
{
	struct {
		struct vhost_memory m;
		struct vhost_memory_region r[1];
	} t;

	memset(&t, 0, sizeof(t));
	t.m.nregions = 1;
	t.r[0].guest_phys_addr = vmm->gpa_base;
	t.r[0].memory_size = vmm->size;
	t.r[0].userspace_addr = (uintptr_t)vmm->mem;
	return ioctl(vhost_fd, VHOST_SET_MEM_TABLE, &t.m) ? -errno : 0;
}

int vmm_vq_init(struct vmm *vmm, struct vmm_vq *vq, unsigned int index,
		unsigned int num)
{
	void *ring;
	unsigned int i;

	memset(vq, 0, sizeof(*vq));
	vq->kick = -1;
	vq->call = -1;
	ring = vmm_alloc(vmm, vring_size(num, VMM_RING_ALIGN), VMM_RING_ALIGN);
	if (!ring)
		return -ENOMEM;
	memset(ring, 0, vring_size(num, VMM_RING_ALIGN));
	vring_init(&vq->vr, num, ring, VMM_RING_ALIGN);
	vq->vmm = vmm;
	vq->index = index;
	vq->num = num;
	vq->num_free = num;
	for (i = 0; i + 1 < num; i++)
		vq->vr.desc[i].next = i + 1;
	vq->chain_len = calloc(num, sizeof(*vq->chain_len));
	vq->indirect = calloc(num, sizeof(*vq->indirect));
	vq->token = calloc(num, sizeof(*vq->token));
	vq->indirect_pool = calloc(num, sizeof(*vq->indirect_pool));
	vq->kick = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	vq->call = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (!vq->chain_len || !vq->indirect || !vq->token || !vq->indirect_pool ||
	    vq->kick < 0 || vq->call < 0) {
		vmm_vq_free(vq);
		return -ENOMEM;
	}
	return 0;
}

void vmm_vq_free(struct vmm_vq *vq)
{
	free(vq->chain_len);
	free(vq->indirect);
	free(vq->token);
	free(vq->indirect_pool);
	vq->indirect_pool = NULL;
	if (vq->kick >= 0)
		close(vq->kick);
	if (vq->call >= 0)
		close(vq->call);
	vq->chain_len = NULL;
	vq->indirect = NULL;
	vq->token = NULL;
	vq->kick = -1;
	vq->call = -1;
}

int vmm_vq_setup(struct vmm_vq *vq, int fd)
{
	struct vhost_vring_state s = { .index = vq->index, .num = vq->num };
	struct vhost_vring_file kick = { .index = vq->index, .fd = vq->kick };
	struct vhost_vring_file call = { .index = vq->index, .fd = vq->call };
	struct vhost_vring_addr a = {
		.index = vq->index,
		.desc_user_addr = (uintptr_t)vq->vr.desc,
		.avail_user_addr = (uintptr_t)vq->vr.avail,
		.used_user_addr = (uintptr_t)vq->vr.used,
	};

	if (ioctl(fd, VHOST_SET_VRING_NUM, &s))
		return -errno;
	s.num = 0;
	if (ioctl(fd, VHOST_SET_VRING_BASE, &s))
		return -errno;
	if (ioctl(fd, VHOST_SET_VRING_ADDR, &a))
		return -errno;
	if (ioctl(fd, VHOST_SET_VRING_KICK, &kick))
		return -errno;
	if (ioctl(fd, VHOST_SET_VRING_CALL, &call))
		return -errno;
	return 0;
}

static void vmm_fill_desc(struct vmm *vmm, struct vring_desc *d,
			  const struct vmm_seg *s)
{
	d->addr = vmm_gpa(vmm, s->addr);
	d->len = s->len;
	d->flags = s->write ? VRING_DESC_F_WRITE : 0;
}

int vmm_vq_add(struct vmm_vq *vq, const struct vmm_seg *segs, unsigned int n,
	       bool indirect, void *token)
{
	unsigned int need = indirect ? 1 : n, i;
	uint16_t head, d;

	if (!n || vq->num_free < need)
		return -1;
	head = vq->free_head;
	if (indirect) {
		struct vring_desc *t = vq->indirect_pool[head];

		/* Each head owns a table, so a long test never runs dry. */
		if (n > VMM_MAX_INDIRECT)
			return -1;
		if (!t) {
			t = vmm_alloc(vq->vmm, VMM_MAX_INDIRECT * sizeof(*t), 16);
			if (!t)
				return -1;
			vq->indirect_pool[head] = t;
		}
		for (i = 0; i < n; i++) {
			vmm_fill_desc(vq->vmm, &t[i], &segs[i]);
			if (i + 1 < n) {
				t[i].flags |= VRING_DESC_F_NEXT;
				t[i].next = i + 1;
			}
		}
		vq->vr.desc[head].addr = vmm_gpa(vq->vmm, t);
		vq->vr.desc[head].len = n * sizeof(*t);
		vq->vr.desc[head].flags = VRING_DESC_F_INDIRECT;
		vq->free_head = vq->vr.desc[head].next;
		vq->indirect[head] = t;
	} else {
		d = head;
		for (i = 0; i < n; i++) {
			uint16_t next = vq->vr.desc[d].next;

			vmm_fill_desc(vq->vmm, &vq->vr.desc[d], &segs[i]);
			if (i + 1 < n) {
				vq->vr.desc[d].flags |= VRING_DESC_F_NEXT;
				vq->vr.desc[d].next = next;
			}
			vq->free_head = next;
			d = next;
		}
		vq->indirect[head] = NULL;
	}
	vq->num_free -= need;
	vq->chain_len[head] = need;
	vq->token[head] = token;

	vq->vr.avail->ring[vq->avail_idx % vq->num] = head;
	/* The ring entry must be visible before the index that publishes it. */
	vmm_wmb();
	vq->avail_idx++;
	__atomic_store_n(&vq->vr.avail->idx, vq->avail_idx, __ATOMIC_RELAXED);
	return head;
}

void vmm_vq_kick(struct vmm_vq *vq)
{
	uint64_t one = 1;

	/* Publishing avail->idx happens before the device is told to look. */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (write(vq->kick, &one, sizeof(one)) != sizeof(one))
		abort();
}

unsigned int vmm_vq_in_flight(const struct vmm_vq *vq)
{
	return (uint16_t)(vq->avail_idx - vq->last_used);
}

static void vmm_vq_free_chain(struct vmm_vq *vq, uint16_t head)
{
	uint16_t d = head, n = vq->chain_len[head];

	while (--n)
		d = vq->vr.desc[d].next;
	vq->vr.desc[d].next = vq->free_head;
	vq->free_head = head;
	vq->num_free += vq->chain_len[head];
	vq->chain_len[head] = 0;
}

int vmm_vq_get_used(struct vmm_vq *vq, uint32_t *len, void **token,
		    int timeout_ms)
{
	struct pollfd p = { .fd = vq->call, .events = POLLIN };
	uint16_t used_idx;
	uint64_t v;
	int head;

	for (;;) {
		used_idx = __atomic_load_n(&vq->vr.used->idx, __ATOMIC_RELAXED);
		if (used_idx != vq->last_used)
			break;
		if (timeout_ms <= 0 || poll(&p, 1, timeout_ms) <= 0)
			return -1;
		if (read(vq->call, &v, sizeof(v)) < 0 && errno != EAGAIN)
			return -1;
	}
	/* Read the used entry only after seeing the index that covers it. */
	vmm_rmb();
	head = vq->vr.used->ring[vq->last_used % vq->num].id;
	if (len)
		*len = vq->vr.used->ring[vq->last_used % vq->num].len;
	vq->last_used++;
	if (head >= (int)vq->num || !vq->chain_len[head])
		return -2;	/* device returned a head we never posted */
	if (token)
		*token = vq->token[head];
	vmm_vq_free_chain(vq, head);
	return head;
}

int vmm_find_threads(const char *prefix, int *tids, int max)
{
	struct dirent *e;
	DIR *d = opendir("/proc");
	char comm[64];
	int n = 0;

	if (!d)
		return -errno;
	while ((e = readdir(d)) && n < max) {
		int pid = atoi(e->d_name);

		if (pid <= 0 || vmm_thread_comm(pid, comm, sizeof(comm)))
			continue;
		if (!strncmp(comm, prefix, strlen(prefix)))
			tids[n++] = pid;
	}
	closedir(d);
	return n;
}

int vmm_thread_comm(int tid, char *buf, size_t len)
{
	char path[64];
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/comm", tid);
	f = fopen(path, "r");
	if (!f)
		return -errno;
	if (!fgets(buf, len, f)) {
		fclose(f);
		return -EIO;
	}
	fclose(f);
	buf[strcspn(buf, "\n")] = 0;
	return 0;
}

/* utime + stime of a thread, in clock ticks. */
unsigned long long vmm_thread_cputime(int tid)
{
	unsigned long long ut = 0, st = 0;
	char path[64], buf[1024], *p;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", tid);
	f = fopen(path, "r");
	if (!f)
		return 0;
	if (!fgets(buf, sizeof(buf), f))
		buf[0] = 0;
	fclose(f);
	p = strrchr(buf, ')');
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
			 &ut, &st) != 2)
		return 0;
	return ut + st;
}

long vmm_thread_wakeups(int tid)
{
	char path[64], line[128];
	long v = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", tid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "voluntary_ctxt_switches: %ld", &v) == 1)
			break;
	fclose(f);
	return v;
}

/* Threads of @pid whose name starts with @prefix, after @n in @tids. */
static int vmm_find_task_threads(pid_t pid, const char *prefix, int *tids,
				 int n, int max)
{
	char path[64], comm[64];
	struct dirent *e;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	d = opendir(path);
	if (!d)
		return n;
	while ((e = readdir(d)) && n < max) {
		int tid = atoi(e->d_name);

		if (tid <= 0 || tid == pid || vmm_thread_comm(tid, comm, sizeof(comm)))
			continue;
		if (!strncmp(comm, prefix, strlen(prefix)))
			tids[n++] = tid;
	}
	closedir(d);
	return n;
}

int vmm_owner_workers(pid_t pid, int *tids, char names[][32], int max)
{
	char prefix[32], comm[32];
	int all[256], n, i, found = 0;
	size_t len;

	len = snprintf(prefix, sizeof(prefix), "vhost-%d", pid);
	n = vmm_find_threads(prefix, all, 256);
	if (n < 0)
		n = 0;
	n = vmm_find_task_threads(pid, prefix, all, n, 256);
	for (i = 0; i < n && found < max; i++) {
		if (vmm_thread_comm(all[i], comm, sizeof(comm)))
			continue;
		/* "vhost-12" must not match "vhost-123". */
		if (comm[len] && comm[len] != '-')
			continue;
		if (tids)
			tids[found] = all[i];
		if (names)
			snprintf(names[found], 32, "%s", comm);
		found++;
	}
	return found;
}

bool vmm_workers_are_tasks(void)
{
	static int tasks = -1;
	struct utsname u;
	int major = 0, minor = 0;

	if (tasks < 0) {
		if (uname(&u) || sscanf(u.release, "%d.%d", &major, &minor) != 2)
			major = 0;
		tasks = major > 6 || (major == 6 && minor >= 4);
	}
	return tasks;
}

/*
 * What vmm_worker_call() saw: the thread of each worker this process made
 * with VHOST_NEW_WORKER or VHOST_SET_VRING_WORKER, newest last.
 */
static struct {
	unsigned int id;
	int tid;
} vmm_seen[256];
static int vmm_nseen;

/* This process's threads named "vhost-...", in @tids (at most 256). */
static int vmm_my_workers(int *tids)
{
	return vmm_find_task_threads(getpid(), "vhost-", tids, 0, 256);
}

static bool vmm_has(const int *tids, int n, int tid)
{
	while (n--)
		if (tids[n] == tid)
			return true;
	return false;
}

int vmm_worker_call(int fd, unsigned long req, void *arg)
{
	int before[256], after[256], nb = 0, na, i, r, tries;
	struct vhost_vring_worker *w = arg;
	struct vhost_worker_state *s = arg;

	if (vmm_workers_are_tasks())
		nb = vmm_my_workers(before);
	r = ioctl(fd, req, arg) ? -errno : 0;
	if (r || !vmm_workers_are_tasks())
		return r;
	/* A freed worker's thread may linger in /proc for a moment. */
	for (tries = 0; req == VHOST_FREE_WORKER && tries < 1000; tries++) {
		na = vmm_my_workers(after);
		for (i = 0; i < nb && vmm_has(after, na, before[i]); i++)
			;
		if (i < nb)
			break;
		usleep(1000);
	}
	if (req != VHOST_NEW_WORKER && req != VHOST_SET_VRING_WORKER)
		return 0;
	na = vmm_my_workers(after);
	for (i = 0; i < na; i++) {
		if (vmm_has(before, nb, after[i]) || vmm_nseen == 256)
			continue;
		vmm_seen[vmm_nseen].id = req == VHOST_NEW_WORKER ? s->worker_id :
								  w->worker_id;
		vmm_seen[vmm_nseen++].tid = after[i];
	}
	return 0;
}

int vmm_worker_tid(pid_t pid, unsigned int id)
{
	char want[32], names[64][32], comm[32];
	int tids[64], n, i, j;

	if (vmm_workers_are_tasks()) {
		/* The newest worker seen with that id, if its thread lives. */
		for (i = vmm_nseen - 1; i >= 0; i--)
			if (vmm_seen[i].id == id &&
			    !vmm_thread_comm(vmm_seen[i].tid, comm, sizeof(comm)) &&
			    !strncmp(comm, "vhost-", 6))
				return vmm_seen[i].tid;
		if (id)
			return -1;
		/* The default worker: the one that vmm_worker_call() did not make. */
		n = vmm_owner_workers(pid, tids, NULL, 64);
		for (i = 0; i < n; i++) {
			for (j = 0; j < vmm_nseen && vmm_seen[j].tid != tids[i]; j++)
				;
			if (j == vmm_nseen)
				return tids[i];
		}
		return -1;
	}
	if (id)
		snprintf(want, sizeof(want), "vhost-%d-%u", pid, id);
	else
		snprintf(want, sizeof(want), "vhost-%d", pid);
	n = vmm_owner_workers(pid, tids, names, 64);
	for (i = 0; i < n; i++)
		if (!strcmp(names[i], want))
			return tids[i];
	return -1;
}

pid_t vmm_fork_tied(void)
{
	pid_t parent = getpid(), pid;

	pid = fork();
	if (pid)
		return pid;
	/* The parent may have gone before the request: then go too. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() != parent)
		_exit(1);
	return 0;
}
