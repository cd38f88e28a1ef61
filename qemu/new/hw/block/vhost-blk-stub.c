/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * vhost-blk's QMP command where the device is not built
 */

#include "qemu/osdep.h"
#include "qapi/error.h"
#include "qapi/qapi-commands-virtio.h"

void qmp_vhost_blk_refresh_size(const char *id, Error **errp)
{
    error_setg(errp, "this QEMU has no vhost-blk device");
}
