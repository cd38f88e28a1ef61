/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A tiny userspace "VMM + guest driver" for vhost selftests.
 *
 * The test's own memory plays guest RAM: one anonymous mapping is handed to
 * vhost as a single memory region at a guest-physical base that differs from
 * the host virtual address, so every descriptor address really is
 * translated.  Split virtqueues are laid out with <linux/virtio_ring.h>, kicks
 * and calls are eventfds, and the "driver" half posts direct or indirect
 * descriptor chains and harvests the used ring with a timeout.
 */
#ifndef VHOST_VMM_H
#define VHOST_VMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <linux/vhost.h>
#include <linux/virtio_ring.h>

#define VMM_GPA_BASE	0x40000000ULL
#define VMM_MAX_INDIRECT	64

struct vmm {
	void *mem;		/* host view of guest RAM */
	size_t size;
	size_t brk;		/* bump allocator offset */
	uint64_t gpa_base;
	bool shared;		/* mem is memfd's (vmm_init_shared) */
	int memfd;
};

/* One element of a descriptor chain, as the driver sees it. */
struct vmm_seg {
	void *addr;		/* host pointer inside vmm memory */
	uint32_t len;
	bool write;		/* device writes (VRING_DESC_F_WRITE) */
};

struct vmm_vq {
	struct vmm *vmm;
	unsigned int index;
	unsigned int num;
	struct vring vr;
	int kick;		/* eventfd: driver -> device */
	int call;		/* eventfd: device -> driver */
	uint16_t avail_idx;	/* next avail slot (driver shadow) */
	uint16_t last_used;	/* next used entry to harvest */
	uint16_t free_head;
	unsigned int num_free;
	uint16_t *chain_len;	/* descriptors held by each head */
	void **indirect;	/* indirect table held by each head, or NULL */
	void **token;		/* caller cookie for each head */
	void **indirect_pool;	/* indirect table owned by each head */
};

int vmm_init(struct vmm *vmm, size_t size);
/* The same, in a memfd, for a backend in another process (vhost-user). */
int vmm_init_shared(struct vmm *vmm, size_t size);
void vmm_free(struct vmm *vmm);
void *vmm_alloc(struct vmm *vmm, size_t size, size_t align);
uint64_t vmm_gpa(const struct vmm *vmm, const void *p);
/* VHOST_SET_MEM_TABLE with the single region covering vmm memory. */
int vmm_set_mem_table(struct vmm *vmm, int vhost_fd);

int vmm_vq_init(struct vmm *vmm, struct vmm_vq *vq, unsigned int index,
		unsigned int num);
void vmm_vq_free(struct vmm_vq *vq);
/* SET_VRING_NUM, _BASE, _ADDR, _KICK and _CALL for this ring. */
int vmm_vq_setup(struct vmm_vq *vq, int vhost_fd);

/*
 * Post a chain of @n segments (readable ones first, as virtio requires of a
 * well-formed driver; tests that want a malformed order just pass one).
 * With @indirect the chain lives in an indirect table.  Returns the head
 * descriptor id, or -1 when the ring is full.
 */
int vmm_vq_add(struct vmm_vq *vq, const struct vmm_seg *segs, unsigned int n,
	       bool indirect, void *token);
void vmm_vq_kick(struct vmm_vq *vq);
/*
 * Harvest one used element, waiting up to @timeout_ms for the call eventfd.
 * Returns the head id and stores the written length and the token, or -1 on
 * timeout.
 */
int vmm_vq_get_used(struct vmm_vq *vq, uint32_t *len, void **token,
		    int timeout_ms);
/* Number of chains posted and not yet harvested. */
unsigned int vmm_vq_in_flight(const struct vmm_vq *vq);

/* Kernel threads, from /proc/<tid>/{comm,stat,status}. */
int vmm_find_threads(const char *prefix, int *tids, int max);
unsigned long long vmm_thread_cputime(int tid);
int vmm_thread_comm(int tid, char *buf, size_t len);
/* Voluntary context switches (wake-ups after sleeping), or -1. */
long vmm_thread_wakeups(int tid);
/*
 * vhost worker threads of owner @pid: "vhost-<pid>" and "vhost-<pid>-<id>".
 * Fills up to @max tids and names (either may be NULL); returns the count.
 * 6.1's workers are kthreads, listed in /proc; mainline's are vhost_tasks,
 * threads of the owner in /proc/<pid>/task, all named "vhost-<pid of the
 * thread that created them>" (so only those the owner's main thread
 * created are found).
 */
int vmm_owner_workers(pid_t pid, int *tids, char names[][32], int max);
/*
 * The tid of worker @id of owner @pid, or -1.  6.1 names worker @id
 * "vhost-<owner>-<id>".  On mainline no name tells an id: there it is the
 * thread vmm_worker_call() saw appear when the worker was made, or for id 0
 * the owner's worker it did not see made (the default one).
 */
int vmm_worker_tid(pid_t pid, unsigned int id);
/* Whether workers are vhost_tasks (Linux 6.4 on), not 6.1's kthreads. */
bool vmm_workers_are_tasks(void);
/*
 * The errno of a worker that RLIMIT_NPROC does not let the owner make:
 * EAGAIN, fork's, on 6.1; mainline's vhost_worker_create() answers ENOMEM
 * whatever vhost_task_create() failed with.
 */
#define VMM_NPROC_ERRNO	(vmm_workers_are_tasks() ? ENOMEM : EAGAIN)
/*
 * ioctl(@fd, @req, @arg) for the worker ioctls, returning 0 or -errno.
 * On mainline it notes the thread a VHOST_NEW_WORKER or
 * VHOST_SET_VRING_WORKER made (for vmm_worker_tid()), and after
 * VHOST_FREE_WORKER waits (up to 1 s) for the freed thread to leave /proc.
 */
int vmm_worker_call(int fd, unsigned long req, void *arg);
/*
 * fork() for a child that must not outlive the test case: it gets SIGKILL
 * when its parent exits, an assertion that ends the case early included.
 * Returns what fork() does.
 */
pid_t vmm_fork_tied(void);

#endif
