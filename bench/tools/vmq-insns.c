/*
 * vmq-insns: guest instructions executed per vCPU, between marks the guest
 * makes itself.
 *
 * Copyright (c) 2026 The vhost-mq authors
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 *
 * The benchmark of vhost-mq measures cost in instructions, not time: on a
 * host with two cores the wall clock of an emulated guest swings from one
 * run to the next, while the instructions a guest thread executes for a
 * fixed amount of work do not.  This plugin counts, per vCPU, the guest
 * instructions executed in kernel mode and in user mode.
 *
 * The guest marks its measurement windows by executing a marker, the 8-byte
 * NOP "nopl 0x564d51NN(%rax,%rax,1)" (0f 1f 84 00 NN 51 4d 56: "VMQ" and a
 * code NN).  When a vCPU executes one, the plugin writes a line with the
 * code and every vCPU's counts so far:
 *
 *   mark CODE VCPU NVCPUS KERNEL0 USER0 KERNEL1 USER1 ...
 *
 * The difference between two marks is what each vCPU executed in between;
 * with every thread of interest pinned to a vCPU of its own, it is what
 * each thread executed.  Counts are taken per translation block, at its
 * entry: a block left early (an exception, an interrupt) counts whole.
 * The marking vCPU's own counts are exact at the mark; other vCPUs' are
 * read as they run.
 *
 * With profile=on, the plugin also counts how often each vCPU runs each
 * translation block.  A mark with code 1 sets those counts to zero; a mark
 * with code 2 writes, after its own line, one line per block a vCPU ran
 * since:
 *
 *   prof VCPU VADDR INSNS RUNS
 *
 * (VADDR in hex; INSNS the block's length), which bench/insns-profile turns
 * into instructions per I/O per guest function.  Slower, and the output
 * is large: for a profiling run, not for the benchmark's counts.
 *
 * Arguments: out=PATH (default: QEMU's log, qemu_plugin_outs()),
 * profile=on.
 * Built against the qemu-plugin.h of the QEMU that loads it (API version 1,
 * QEMU 7.2).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <qemu-plugin.h>

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

#define VMQ_MAX_VCPUS 64
/* x86-64 kernel addresses: the upper half. */
#define VMQ_KERNEL_START 0xffff800000000000ULL

static const unsigned char vmq_marker[] = {
    0x0f, 0x1f, 0x84, 0x00, 0x00, 0x51, 0x4d, 0x56
};
/* The byte of the marker that varies. */
#define VMQ_MARKER_CODE 4

/*
 * counts[v][0] kernel, [1] user.  Each vCPU adds to its own (one thread per
 * vCPU under MTTCG); marks read all of them, relaxed: a count read while
 * its vCPU runs is as good as any other instant.
 */
static uint64_t counts[VMQ_MAX_VCPUS][2];
static int nvcpus;
static FILE *out;
/* Serialises the lines of marks made on several vCPUs at once. */
static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

/*
 * What a block's exec callback adds: its length and which count.  With
 * profile=on, also its address and how often each vCPU ran it, on the list
 * of all blocks (vmq_tbs, under out_lock; the runs are each vCPU's own).
 */
struct vmq_tb {
    uint32_t n;
    uint32_t user;
    uint64_t vaddr;
    struct vmq_tb *next;
    uint64_t runs[];
};

static int profile;
static struct vmq_tb *vmq_tbs;

static void vmq_tb_exec(unsigned int vcpu, void *udata)
{
    const struct vmq_tb *tb = udata;
    uint64_t *c;

    if (vcpu < VMQ_MAX_VCPUS) {
        c = &counts[vcpu][tb->user];
        __atomic_store_n(c, *c + tb->n, __ATOMIC_RELAXED);
        if (profile) {
            c = (uint64_t *)&tb->runs[vcpu];
            __atomic_store_n(c, *c + 1, __ATOMIC_RELAXED);
        }
    }
}

/* One line to the output.  Called with out_lock held. */
static void vmq_puts(const char *line)
{
    if (out) {
        fputs(line, out);
    } else {
        qemu_plugin_outs(line);
    }
}

/* Called with out_lock held, at a mark with code 1 (reset) or 2 (write). */
static void vmq_profile(unsigned int code)
{
    struct vmq_tb *t;
    char line[80];
    uint64_t r;
    int v;

    for (t = vmq_tbs; t; t = t->next) {
        for (v = 0; v < nvcpus; v++) {
            if (code == 1) {
                __atomic_store_n(&t->runs[v], 0, __ATOMIC_RELAXED);
                continue;
            }
            r = __atomic_load_n(&t->runs[v], __ATOMIC_RELAXED);
            if (!r) {
                continue;
            }
            snprintf(line, sizeof(line), "prof %d %" PRIx64 " %u %" PRIu64 "\n",
                     v, t->vaddr, t->n, r);
            vmq_puts(line);
        }
    }
}

static void vmq_mark(unsigned int vcpu, void *udata)
{
    char line[64 + VMQ_MAX_VCPUS * 44];
    uint64_t k, u;
    size_t len;
    int v;

    len = snprintf(line, sizeof(line), "mark %u %u %d",
                   (unsigned int)(uintptr_t)udata, vcpu, nvcpus);
    for (v = 0; v < nvcpus; v++) {
        k = __atomic_load_n(&counts[v][0], __ATOMIC_RELAXED);
        u = __atomic_load_n(&counts[v][1], __ATOMIC_RELAXED);
        len += snprintf(line + len, sizeof(line) - len,
                        " %" PRIu64 " %" PRIu64, k, u);
    }
    snprintf(line + len, sizeof(line) - len, "\n");
    pthread_mutex_lock(&out_lock);
    vmq_puts(line);
    if (profile) {
        vmq_profile((unsigned int)(uintptr_t)udata);
    }
    if (out) {
        fflush(out);
    }
    pthread_mutex_unlock(&out_lock);
}

static int vmq_is_marker(const struct qemu_plugin_insn *insn,
                         unsigned int *code)
{
    const unsigned char *p = qemu_plugin_insn_data(insn);
    size_t tail = sizeof(vmq_marker) - VMQ_MARKER_CODE - 1;

    if (qemu_plugin_insn_size(insn) != sizeof(vmq_marker) ||
        memcmp(p, vmq_marker, VMQ_MARKER_CODE) ||
        memcmp(p + VMQ_MARKER_CODE + 1,
               vmq_marker + VMQ_MARKER_CODE + 1, tail)) {
        return 0;
    }
    *code = p[VMQ_MARKER_CODE];
    return 1;
}

static void vmq_tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    size_t i, n = qemu_plugin_tb_n_insns(tb);
    struct qemu_plugin_insn *insn;
    struct vmq_tb *t;
    unsigned int code;

    /*
     * Blocks are translated once and run many times; their descriptors
     * live as long as QEMU does (a few MB over a benchmark).
     */
    t = calloc(1, sizeof(*t) + (profile ? nvcpus * sizeof(t->runs[0]) : 0));
    if (!t) {
        return;
    }
    t->n = n;
    t->vaddr = qemu_plugin_tb_vaddr(tb);
    t->user = t->vaddr < VMQ_KERNEL_START;
    if (profile) {
        pthread_mutex_lock(&out_lock);
        t->next = vmq_tbs;
        vmq_tbs = t;
        pthread_mutex_unlock(&out_lock);
    }
    qemu_plugin_register_vcpu_tb_exec_cb(tb, vmq_tb_exec,
                                         QEMU_PLUGIN_CB_NO_REGS, t);
    for (i = 0; i < n; i++) {
        insn = qemu_plugin_tb_get_insn(tb, i);
        if (vmq_is_marker(insn, &code)) {
            qemu_plugin_register_vcpu_insn_exec_cb(insn, vmq_mark,
                                                   QEMU_PLUGIN_CB_NO_REGS,
                                                   (void *)(uintptr_t)code);
        }
    }
}

static void vmq_exit(qemu_plugin_id_t id, void *p)
{
    pthread_mutex_lock(&out_lock);
    if (out) {
        fclose(out);
    }
    out = NULL;
    pthread_mutex_unlock(&out_lock);
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id,
                                           const qemu_info_t *info,
                                           int argc, char **argv)
{
    int i;

    if (!info->system_emulation) {
        fprintf(stderr, "vmq-insns: system emulation only\n");
        return -1;
    }
    nvcpus = info->system.max_vcpus;
    if (nvcpus > VMQ_MAX_VCPUS) {
        fprintf(stderr, "vmq-insns: %d vCPUs, at most %d\n",
                nvcpus, VMQ_MAX_VCPUS);
        return -1;
    }
    for (i = 0; i < argc; i++) {
        if (!strncmp(argv[i], "out=", 4)) {
            out = fopen(argv[i] + 4, "w");
            if (!out) {
                perror(argv[i] + 4);
                return -1;
            }
        } else if (!strcmp(argv[i], "profile=on")) {
            profile = 1;
        } else {
            fprintf(stderr, "vmq-insns: unknown argument %s\n", argv[i]);
            return -1;
        }
    }
    qemu_plugin_register_vcpu_tb_trans_cb(id, vmq_tb_trans);
    qemu_plugin_register_atexit_cb(id, vmq_exit, NULL);
    return 0;
}
