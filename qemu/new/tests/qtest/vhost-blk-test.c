/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * QTest cases of vhost-blk-pci that virtio-blk-test.c's device-neutral
 * cases (which also run on this device, libqos/vhost-blk.c) do not cover:
 * what the kernel does and QEMU must handle.
 *
 * They need /dev/vhost-blk: without it the device's libqos node is not
 * registered and none of them runs.
 */

#include "qemu/osdep.h"
#include <sys/ioctl.h>
#include <linux/loop.h>
#include <linux/vhost.h>
#include "libqtest-single.h"
#include "qemu/bswap.h"
#include "qobject/qdict.h"
#include "qobject/qlist.h"
#include "standard-headers/linux/virtio_blk.h"
#include "standard-headers/linux/virtio_config.h"
#include "standard-headers/linux/virtio_pci.h"
#include "standard-headers/linux/virtio_ring.h"
#include "libqos/qgraph.h"
#include "libqos/virtio-blk.h"
#include "libqos/virtio-pci.h"

#define IMAGE_SIZE (1024 * 1024)
#define TIMEOUT_US (30 * 1000 * 1000)

/* write-cache's loop device (vhost_blk_test_setup_loop()). */
static char *loop_path;

static void image_remove(void *path)
{
    unlink(path);
    g_free(path);
    qos_invalidate_command_line();
}

/* A raw image behind drive0, which the node's device options name. */
static void *vhost_blk_test_setup(GString *cmd_line, void *arg)
{
    char *path = NULL;
    int fd = g_file_open_tmp("vhost-blk-qtest.XXXXXX", &path, NULL);

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(ftruncate(fd, IMAGE_SIZE), ==, 0);
    close(fd);
    g_test_queue_destroy(image_remove, path);
    g_string_append_printf(cmd_line, " -drive if=none,id=drive0,file=%s,"
                           "format=raw,auto-read-only=off ", path);
    return arg;
}

/* Negotiate what the cases need: no indirect descriptors, no event idx. */
static void setup_features(QVirtioDevice *dev)
{
    uint64_t features = qvirtio_get_features(dev);

    features &= ~(QVIRTIO_F_BAD_FEATURE |
                  (1ull << VIRTIO_RING_F_INDIRECT_DESC) |
                  (1ull << VIRTIO_RING_F_EVENT_IDX));
    qvirtio_set_features(dev, features);
}

/* Reset the device, as a guest driver would, and start it with ring 0. */
static QVirtQueue *reset_and_start(QVirtioDevice *dev, QGuestAllocator *alloc,
                                   QVirtQueue *vq)
{
    qvirtqueue_cleanup(dev->bus, vq, alloc);
    qvirtio_reset(dev);
    qvirtio_set_acknowledge(dev);
    qvirtio_set_driver(dev);
    setup_features(dev);
    vq = qvirtqueue_setup(dev, alloc, 0);
    qvirtio_set_driver_ok(dev);
    return vq;
}

/* One request of 512 bytes at @sector on @vq, served: its status. */
static uint8_t do_request(QVirtioDevice *dev, QGuestAllocator *alloc,
                          QVirtQueue *vq, uint32_t type, uint64_t sector,
                          char *data)
{
    struct virtio_blk_outhdr hdr = {
        .type = cpu_to_le32(type),
        .sector = cpu_to_le64(sector),
    };
    uint64_t addr = guest_alloc(alloc, sizeof(hdr) + 512 + 1);
    uint8_t status = 0xff;
    uint32_t head;

    g_assert(!qvirtio_is_big_endian(dev));
    memwrite(addr, &hdr, sizeof(hdr));
    memwrite(addr + sizeof(hdr), data, 512);
    memwrite(addr + sizeof(hdr) + 512, &status, 1);
    head = qvirtqueue_add(global_qtest, vq, addr, sizeof(hdr), false, true);
    qvirtqueue_add(global_qtest, vq, addr + sizeof(hdr), 512,
                   type == VIRTIO_BLK_T_IN, true);
    qvirtqueue_add(global_qtest, vq, addr + sizeof(hdr) + 512, 1, true,
                   false);
    qvirtqueue_kick(global_qtest, dev, vq, head);
    qvirtio_wait_used_elem(global_qtest, dev, vq, head, NULL, TIMEOUT_US);
    status = readb(addr + sizeof(hdr) + 512);
    memread(addr + sizeof(hdr), data, 512);
    guest_free(alloc, addr);
    return status;
}

/* A write read back through the device: it serves requests. */
static void check_serves(QVirtioDevice *dev, QGuestAllocator *alloc,
                         QVirtQueue *vq)
{
    char buf[512] = "vhost-blk";

    g_assert_cmpint(do_request(dev, alloc, vq, VIRTIO_BLK_T_OUT, 7, buf), ==,
                    VIRTIO_BLK_S_OK);
    memset(buf, 0, sizeof(buf));
    g_assert_cmpint(do_request(dev, alloc, vq, VIRTIO_BLK_T_IN, 7, buf), ==,
                    VIRTIO_BLK_S_OK);
    g_assert_cmpstr(buf, ==, "vhost-blk");
}

static void common_cfg_writew(QVirtioPCIDevice *pdev, size_t off,
                              uint16_t val)
{
    qpci_io_writew(pdev->pdev, pdev->bar, pdev->common_cfg_offset + off, val);
}

static void common_cfg_writel(QVirtioPCIDevice *pdev, size_t off,
                              uint32_t val)
{
    qpci_io_writel(pdev->pdev, pdev->bar, pdev->common_cfg_offset + off, val);
}

/* The device reports NEEDS_RESET (from a bottom half) within 10 s. */
static bool wait_needs_reset(QVirtioDevice *dev)
{
    gint64 end = g_get_monotonic_time() + 10 * G_USEC_PER_SEC;

    while (!(dev->bus->get_status(dev) & VIRTIO_CONFIG_S_NEEDS_RESET)) {
        if (g_get_monotonic_time() > end) {
            return false;
        }
        g_usleep(1000);
    }
    return true;
}

/*
 * A guest that breaks its ring 0 (@how) before DRIVER_OK: the start fails
 * in the kernel or in vhost, and the device needs a reset (virtio_error());
 * QEMU goes on.  After the reset, a correct set-up is served.
 */
static void broken_ring_needs_reset(QVirtioBlkPCI *blk, QGuestAllocator *alloc,
                                    int how)
{
    QVirtioPCIDevice *pdev = &blk->pci_vdev;
    QVirtioDevice *dev = blk->blk.vdev;
    QVirtQueue *vq;
    QDict *resp;

    if (!(qvirtio_get_features(dev) & (1ull << VIRTIO_F_VERSION_1))) {
        g_test_skip("the guest sets queue sizes and ring addresses with "
                    "VIRTIO_F_VERSION_1 only");
        return;
    }
    setup_features(dev);
    vq = qvirtqueue_setup(dev, alloc, 0);
    common_cfg_writew(pdev, offsetof(struct virtio_pci_common_cfg,
                                     queue_select), 0);
    if (how == 0) {
        /* A split ring's size is a power of 2: the kernel refuses 3. */
        common_cfg_writew(pdev, offsetof(struct virtio_pci_common_cfg,
                                         queue_size), 3);
    } else {
        /* The descriptor table 1 TiB up, far past the guest's RAM. */
        common_cfg_writel(pdev, offsetof(struct virtio_pci_common_cfg,
                                         queue_desc_lo), 0);
        common_cfg_writel(pdev, offsetof(struct virtio_pci_common_cfg,
                                         queue_desc_hi), 1u << 8);
    }
    /* Enabled again (never 0, itself an error): QEMU takes the values. */
    common_cfg_writew(pdev, offsetof(struct virtio_pci_common_cfg,
                                     queue_enable), 1);
    /* Not qvirtio_set_driver_ok(): it wants the status without the error. */
    dev->bus->set_status(dev, dev->bus->get_status(dev) |
                         VIRTIO_CONFIG_S_DRIVER_OK);
    g_assert(wait_needs_reset(dev));

    /* QEMU is still there. */
    resp = qmp("{ 'execute': 'query-status' }");
    g_assert(qdict_haskey(resp, "return"));
    qobject_unref(resp);

    vq = reset_and_start(dev, alloc, vq);
    g_assert_cmphex(dev->bus->get_status(dev) &
                    VIRTIO_CONFIG_S_NEEDS_RESET, ==, 0);
    check_serves(dev, alloc, vq);
    qvirtqueue_cleanup(dev->bus, vq, alloc);
}

static void bad_queue_size(void *obj, void *data, QGuestAllocator *alloc)
{
    broken_ring_needs_reset(obj, alloc, 0);
}

static void ring_outside_ram(void *obj, void *data, QGuestAllocator *alloc)
{
    broken_ring_needs_reset(obj, alloc, 1);
}

/*
 * x-query-vhost-workers names the thread that serves queue 0: a vhost
 * worker of this QEMU ("vhost-<QEMU's pid>"), the same after a reset of
 * the device, as the map must stay valid for what was pinned.
 */
static int worker_tid(void)
{
    QDict *resp = qmp("{ 'execute': 'x-query-vhost-workers' }");
    QList *list = qdict_get_qlist(resp, "return");
    QListEntry *e;
    int tid = -1;

    g_assert(list);
    QLIST_FOREACH_ENTRY(list, e) {
        QDict *w = qobject_to(QDict, qlist_entry_obj(e));

        if (!strcmp(qdict_get_str(w, "path"),
                    "/machine/peripheral/drv0/virtio-backend") &&
            qdict_get_int(w, "queue") == 0) {
            g_assert_cmpint(tid, ==, -1);
            tid = qdict_get_int(w, "thread-id");
        }
    }
    qobject_unref(resp);
    return tid;
}

static void worker_map(void *obj, void *data, QGuestAllocator *alloc)
{
    QVirtioBlkPCI *blk = obj;
    QVirtioDevice *dev = blk->blk.vdev;
    g_autofree char *comm_path = NULL, *comm = NULL, *want = NULL;
    QVirtQueue *vq;
    int tid;

    setup_features(dev);
    vq = qvirtqueue_setup(dev, alloc, 0);
    qvirtio_set_driver_ok(dev);
    check_serves(dev, alloc, vq);

    tid = worker_tid();
    g_assert_cmpint(tid, >, 0);
    comm_path = g_strdup_printf("/proc/%d/comm", tid);
    g_assert(g_file_get_contents(comm_path, &comm, NULL, NULL));
    want = g_strdup_printf("vhost-%d", qtest_pid(global_qtest));
    g_assert(g_str_has_prefix(comm, want));

    vq = reset_and_start(dev, alloc, vq);
    check_serves(dev, alloc, vq);
    g_assert_cmpint(worker_tid(), ==, tid);
    qvirtqueue_cleanup(dev->bus, vq, alloc);
}

/*
 * One DISCARD or WRITE_ZEROES request of @n segments, the sectors and
 * flags in @segs, on @vq: its status.
 */
static uint8_t dwz_request(QVirtioDevice *dev, QGuestAllocator *alloc,
                           QVirtQueue *vq, uint32_t type,
                           const struct virtio_blk_discard_write_zeroes *segs,
                           uint32_t n)
{
    struct virtio_blk_outhdr hdr = { .type = cpu_to_le32(type) };
    size_t len = n * sizeof(*segs);
    uint64_t addr = guest_alloc(alloc, sizeof(hdr) + len + 1);
    uint8_t status = 0xff;
    uint32_t head;

    memwrite(addr, &hdr, sizeof(hdr));
    memwrite(addr + sizeof(hdr), segs, len);
    memwrite(addr + sizeof(hdr) + len, &status, 1);
    head = qvirtqueue_add(global_qtest, vq, addr, sizeof(hdr), false, true);
    qvirtqueue_add(global_qtest, vq, addr + sizeof(hdr), len, false, true);
    qvirtqueue_add(global_qtest, vq, addr + sizeof(hdr) + len, 1, true,
                   false);
    qvirtqueue_kick(global_qtest, dev, vq, head);
    qvirtio_wait_used_elem(global_qtest, dev, vq, head, NULL, TIMEOUT_US);
    status = readb(addr + sizeof(hdr) + len);
    guest_free(alloc, addr);
    return status;
}

/*
 * The config space offers the DISCARD and WRITE_ZEROES segments the kernel
 * reports (VHOST_BLK_GET_LIMITS, asked here too), more than one, and the
 * kernel serves a request of that many: a WRITE_ZEROES of every other
 * sector zeroes exactly those, a DISCARD of the others completes.
 */
static void multi_segment_discard(void *obj, void *data,
                                  QGuestAllocator *alloc)
{
    QVirtioBlkPCI *blk = obj;
    QVirtioDevice *dev = blk->blk.vdev;
    struct vhost_blk_limits lim = { .size = sizeof(lim) };
    g_autofree struct virtio_blk_discard_write_zeroes *segs = NULL;
    uint32_t n, i;
    QVirtQueue *vq;
    char buf[512];
    int fd;

    /* libqos reads the config space after the features are set. */
    setup_features(dev);
    fd = open("/dev/vhost-blk", O_RDWR);
    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(ioctl(fd, VHOST_BLK_GET_LIMITS, &lim), ==, 0);
    close(fd);
    n = qvirtio_config_readl(dev, offsetof(struct virtio_blk_config,
                                           max_discard_seg));
    g_assert_cmpuint(n, ==, lim.max_discard_seg);
    g_assert_cmpuint(n, >, 1);
    g_assert_cmpuint(qvirtio_config_readl(dev,
                         offsetof(struct virtio_blk_config,
                                  max_write_zeroes_seg)),
                     ==, lim.max_write_zeroes_seg);
    n = MIN(n, lim.max_write_zeroes_seg);

    g_assert(qvirtio_get_features(dev) &
             (1ull << VIRTIO_BLK_F_WRITE_ZEROES));
    vq = qvirtqueue_setup(dev, alloc, 0);
    qvirtio_set_driver_ok(dev);
    for (i = 0; i < 2 * n; i++) {
        memset(buf, 'a' + i % 26, sizeof(buf));
        g_assert_cmpint(do_request(dev, alloc, vq, VIRTIO_BLK_T_OUT, i, buf),
                        ==, VIRTIO_BLK_S_OK);
    }
    segs = g_new0(struct virtio_blk_discard_write_zeroes, n);
    for (i = 0; i < n; i++) {
        segs[i].sector = cpu_to_le64(2 * i);
        segs[i].num_sectors = cpu_to_le32(1);
    }
    g_assert_cmpint(dwz_request(dev, alloc, vq, VIRTIO_BLK_T_WRITE_ZEROES,
                                segs, n), ==, VIRTIO_BLK_S_OK);
    for (i = 0; i < 2 * n; i++) {
        g_assert_cmpint(do_request(dev, alloc, vq, VIRTIO_BLK_T_IN, i, buf),
                        ==, VIRTIO_BLK_S_OK);
        g_assert_cmpint(buf[0], ==, i % 2 ? 'a' + i % 26 : 0);
        g_assert_cmpint(buf[511], ==, i % 2 ? 'a' + i % 26 : 0);
    }
    if (qvirtio_get_features(dev) & (1ull << VIRTIO_BLK_F_DISCARD)) {
        for (i = 0; i < n; i++) {
            segs[i].sector = cpu_to_le64(2 * i + 1);
        }
        g_assert_cmpint(dwz_request(dev, alloc, vq, VIRTIO_BLK_T_DISCARD,
                                    segs, n), ==, VIRTIO_BLK_S_OK);
    }
    qvirtqueue_cleanup(dev->bus, vq, alloc);
}

/* Detach write-cache's loop device and remove its image. */
static void loop_remove(void *path)
{
    int fd = open(loop_path, O_RDWR);

    if (fd >= 0) {
        ioctl(fd, LOOP_CLR_FD, 0);
        close(fd);
    }
    g_free(loop_path);
    loop_path = NULL;
    image_remove(path);
}

/* A loop device over a new image, behind drive0: its flushes are counted. */
static void *vhost_blk_test_setup_loop(GString *cmd_line, void *arg)
{
    char *path = NULL;
    int fd = g_file_open_tmp("vhost-blk-qtest.XXXXXX", &path, NULL);
    int ctl, n, lfd;

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(ftruncate(fd, IMAGE_SIZE), ==, 0);
    ctl = open("/dev/loop-control", O_RDWR);
    g_assert_cmpint(ctl, >=, 0);
    n = ioctl(ctl, LOOP_CTL_GET_FREE);
    close(ctl);
    g_assert_cmpint(n, >=, 0);
    loop_path = g_strdup_printf("/dev/loop%d", n);
    lfd = open(loop_path, O_RDWR);
    g_assert_cmpint(lfd, >=, 0);
    g_assert_cmpint(ioctl(lfd, LOOP_SET_FD, fd), ==, 0);
    close(lfd);
    close(fd);
    g_test_queue_destroy(loop_remove, path);
    g_string_append_printf(cmd_line, " -drive if=none,id=drive0,file=%s,"
                           "format=raw,auto-read-only=off ", loop_path);
    return arg;
}

/* Flush requests the loop device completed (field 16 of its stat). */
static long loop_flushes(void)
{
    g_autofree char *stat = g_strdup_printf("/sys/block/%s/stat",
                                            loop_path + strlen("/dev/"));
    g_autofree char *text = NULL;
    char *p, *end;
    long v = -1;
    int i;

    g_assert(g_file_get_contents(stat, &text, NULL, NULL));
    for (i = 0, p = text; i < 16; i++, p = end) {
        v = strtol(p, &end, 10);
        g_assert(end != p);
    }
    return v;
}

/*
 * The guest's write cache mode reaches the kernel: the config space's
 * "writeback" reads 1 (the node's cache.writeback), and writes then reach
 * the loop device with no flush; the guest writes 0 (CONFIG_WCE), and
 * each write is then followed by a flush (the kernel completes it only
 * once stable); a reset gives the node's mode back.
 */
static void write_cache(void *obj, void *data, QGuestAllocator *alloc)
{
    QVirtioBlkPCI *blk = obj;
    QVirtioPCIDevice *pdev = &blk->pci_vdev;
    QVirtioDevice *dev = blk->blk.vdev;
    size_t wce = offsetof(struct virtio_blk_config, wce);
    char buf[512] = "vhost-blk";
    QVirtQueue *vq;
    long f0;
    int i;

    setup_features(dev);
    g_assert(qvirtio_get_features(dev) & (1ull << VIRTIO_BLK_F_CONFIG_WCE));
    g_assert_cmpint(qvirtio_config_readb(dev, wce), ==, 1);
    vq = qvirtqueue_setup(dev, alloc, 0);
    qvirtio_set_driver_ok(dev);

    f0 = loop_flushes();
    for (i = 0; i < 4; i++) {
        g_assert_cmpint(do_request(dev, alloc, vq, VIRTIO_BLK_T_OUT, i, buf),
                        ==, VIRTIO_BLK_S_OK);
    }
    g_assert_cmpint(loop_flushes(), ==, f0);

    qpci_io_writeb(pdev->pdev, pdev->bar, pdev->device_cfg_offset + wce, 0);
    g_assert_cmpint(qvirtio_config_readb(dev, wce), ==, 0);
    f0 = loop_flushes();
    for (i = 0; i < 4; i++) {
        g_assert_cmpint(do_request(dev, alloc, vq, VIRTIO_BLK_T_OUT, i, buf),
                        ==, VIRTIO_BLK_S_OK);
    }
    g_assert_cmpint(loop_flushes(), >=, f0 + 4);

    vq = reset_and_start(dev, alloc, vq);
    g_assert_cmpint(qvirtio_config_readb(dev, wce), ==, 1);
    f0 = loop_flushes();
    g_assert_cmpint(do_request(dev, alloc, vq, VIRTIO_BLK_T_OUT, 0, buf),
                    ==, VIRTIO_BLK_S_OK);
    g_assert_cmpint(loop_flushes(), ==, f0);
    qvirtqueue_cleanup(dev->bus, vq, alloc);
}

static void register_vhost_blk_test(void)
{
    QOSGraphTestOptions loop_opts = {
        .before = vhost_blk_test_setup_loop,
    };
    QOSGraphTestOptions opts = {
        .before = vhost_blk_test_setup,
    };

    qos_add_test("bad-queue-size", "vhost-blk-pci", bad_queue_size, &opts);
    qos_add_test("ring-outside-ram", "vhost-blk-pci", ring_outside_ram,
                 &opts);
    qos_add_test("worker-map", "vhost-blk-pci", worker_map, &opts);
    qos_add_test("multi-segment-discard", "vhost-blk-pci",
                 multi_segment_discard, &opts);
    qos_add_test("write-cache", "vhost-blk-pci", write_cache, &loop_opts);
}

libqos_init(register_vhost_blk_test);
