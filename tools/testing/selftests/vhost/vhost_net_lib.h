/* SPDX-License-Identifier: GPL-2.0 */
/*
 * vhost-net over a tap device, for selftests: the device, its two rings,
 * buffers for both directions and an AF_PACKET socket on the tap as the wire.
 */
#ifndef VHOST_NET_LIB_H
#define VHOST_NET_LIB_H

#include <net/if.h>
#include <sys/types.h>
#include "vhost_vmm.h"

enum { VMM_NET_RX = 0, VMM_NET_TX = 1 };

#define VMM_NET_BUF	2048
#define VMM_NET_ETHTYPE	0x88b5	/* IEEE local experimental */

struct vmm_net {
	struct vmm vmm;
	int fd;			/* /dev/vhost-net */
	int tap;
	int wire;		/* AF_PACKET socket bound to the tap */
	int ifindex;
	char ifname[IFNAMSIZ];
	struct vmm_vq vq[2];
	void **tx_free;		/* free TX buffers (stack) */
	unsigned int tx_nfree;
};

/* Open vhost-net with a fresh tap as backend of both rings.  -errno. */
int vmm_net_open(struct vmm_net *n, unsigned int qsize, const char *ifname_fmt);
/* Open, own and map memory, set up rings; no backend yet.  -errno. */
int vmm_net_open_rings(struct vmm_net *n, unsigned int qsize, const char *ifname_fmt);
int vmm_net_set_backend(struct vmm_net *n, int ring, int fd);
void vmm_net_close(struct vmm_net *n);

/* Queue one frame (sequence @seq, @len bytes) on the TX ring.  -1 if full. */
int vmm_net_tx(struct vmm_net *n, unsigned int seq, unsigned int len, bool indirect);
/* Harvest TX completions without waiting; returns how many. */
int vmm_net_tx_reap(struct vmm_net *n);
/* Post @count receive buffers on the RX ring. */
int vmm_net_post_rx(struct vmm_net *n, unsigned int count);
int vmm_net_repost_rx(struct vmm_net *n, void *buf);

void vmm_net_make_frame(unsigned char *f, unsigned int len, unsigned int seq);
int vmm_net_check_frame(const unsigned char *f, unsigned int len, unsigned int seq);
/* The sequence number a frame of ours carries. */
unsigned int vmm_net_frame_seq(const unsigned char *f);
bool vmm_net_is_ours(const unsigned char *f, size_t len);
ssize_t vmm_net_wire_send(struct vmm_net *n, const void *f, size_t len);
/* Receive one frame that arrived on the tap (not one sent out of it). */
ssize_t vmm_net_wire_recv(struct vmm_net *n, void *buf, size_t len, int timeout_ms);

#endif
