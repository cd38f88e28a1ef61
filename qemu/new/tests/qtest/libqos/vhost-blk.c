/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * libqos node of vhost-blk-pci: a virtio-blk device whose requests the
 * kernel's /dev/vhost-blk serves.  It produces the "virtio-blk" interface,
 * so virtio-blk-test.c's device-neutral cases run against it unchanged;
 * its own cases consume "vhost-blk-pci" (vhost-blk-test.c).
 *
 * The node exists only where this process can open /dev/vhost-blk for
 * reading and writing: elsewhere QEMU could not realize the device, and
 * its paths are left out of the graph, not failed.
 */

#include "qemu/osdep.h"
#include "../libqtest.h"
#include "qemu/module.h"
#include "standard-headers/linux/virtio_ids.h"
#include "qgraph.h"
#include "virtio-blk.h"

/* Where virtio-blk-pci sits: only one of the two is in a test's graph. */
#define VHOST_BLK_PCI_SLOT 0x04
#define VHOST_BLK_PCI_FN   0x00

static void *vhost_blk_pci_get_driver(void *object, const char *interface)
{
    QVirtioBlkPCI *dev = object;

    if (!g_strcmp0(interface, "pci-device")) {
        return dev->pci_vdev.pdev;
    }
    if (!g_strcmp0(interface, "virtio-blk")) {
        return &dev->blk;
    }
    if (!g_strcmp0(interface, "virtio")) {
        return dev->blk.vdev;
    }
    fprintf(stderr, "%s not present in vhost-blk-pci\n", interface);
    g_assert_not_reached();
}

static void *vhost_blk_pci_create(void *pci_bus, QGuestAllocator *alloc,
                                  void *addr)
{
    QVirtioBlkPCI *dev = g_new0(QVirtioBlkPCI, 1);

    virtio_pci_init(&dev->pci_vdev, pci_bus, addr);
    dev->blk.vdev = &dev->pci_vdev.vdev;
    g_assert_cmphex(dev->blk.vdev->device_type, ==, VIRTIO_ID_BLOCK);
    dev->pci_vdev.obj.get_driver = vhost_blk_pci_get_driver;
    return &dev->pci_vdev.obj;
}

static void vhost_blk_register_nodes(void)
{
    QPCIAddress addr = {
        .devfn = QPCI_DEVFN(VHOST_BLK_PCI_SLOT, VHOST_BLK_PCI_FN),
    };
    QOSGraphEdgeOptions opts = { };
    g_autofree char *arg = NULL;

    if (access("/dev/vhost-blk", R_OK | W_OK)) {
        return;
    }
    /*
     * As virtio-blk-pci's: every test on this node sets up -drive
     * id=drive0 (a raw image, which vhost-blk serves).  One queue: the
     * cases use queue 0.
     */
    arg = g_strdup_printf("id=drv0,drive=drive0,num-queues=1,addr=%x.%x",
                          VHOST_BLK_PCI_SLOT, VHOST_BLK_PCI_FN);
    opts.extra_device_opts = arg;
    add_qpci_address(&opts, &addr);
    qos_node_create_driver("vhost-blk-pci", vhost_blk_pci_create);
    qos_node_consumes("vhost-blk-pci", "pci-bus", &opts);
    qos_node_produces("vhost-blk-pci", "virtio-blk");
}

libqos_init(vhost_blk_register_nodes);
