// SPDX-License-Identifier: GPL-2.0
/*
 * vhost-net over a tap device, for selftests; see vhost_net_lib.h.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <linux/if_tun.h>
#include <linux/virtio_net.h>

#include "vhost_net_lib.h"

#define HDR_LEN	sizeof(struct virtio_net_hdr)

/*
 * No IPv6 on the tap: once up, its address configuration (duplicate
 * address detection, router solicitations, MLD reports) sends frames
 * towards the guest for seconds, at times of its own, which wake the RX
 * ring and end a TX busy poll that a test is looking at.  Where sysctl is
 * not in /proc, nothing.
 */
static int tap_quiet(const char *ifname)
{
	char path[96];
	ssize_t r;
	int fd;

	snprintf(path, sizeof(path), "/proc/sys/net/ipv6/conf/%s/disable_ipv6", ifname);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	r = write(fd, "1", 1);
	close(fd);
	return r == 1 ? 0 : -EIO;
}

static int tap_open(struct vmm_net *n, const char *fmt)
{
	struct ifreq ifr;
	int s, r = 0;

	n->tap = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
	if (n->tap < 0)
		return -errno;
	memset(&ifr, 0, sizeof(ifr));
	ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", fmt);
	if (ioctl(n->tap, TUNSETIFF, &ifr))
		return -errno;
	memcpy(n->ifname, ifr.ifr_name, IFNAMSIZ);

	tap_quiet(n->ifname);
	s = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL));
	if (s < 0)
		return -errno;
	if (ioctl(s, SIOCGIFFLAGS, &ifr) == 0) {
		ifr.ifr_flags |= IFF_UP;
		if (ioctl(s, SIOCSIFFLAGS, &ifr))
			r = -errno;
	} else {
		r = -errno;
	}
	if (!r && ioctl(s, SIOCGIFINDEX, &ifr))
		r = -errno;
	if (r) {
		close(s);
		return r;
	}
	n->ifindex = ifr.ifr_ifindex;
	{
		struct sockaddr_ll sll = {
			.sll_family = AF_PACKET,
			.sll_protocol = htons(ETH_P_ALL),
			.sll_ifindex = n->ifindex,
		};
		int big = 4 << 20;

		if (bind(s, (struct sockaddr *)&sll, sizeof(sll))) {
			r = -errno;
			close(s);
			return r;
		}
		setsockopt(s, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big));
	}
	n->wire = s;
	return 0;
}

int vmm_net_open_rings(struct vmm_net *n, unsigned int qsize, const char *fmt)
{
	uint64_t features;
	unsigned int i;
	int r;

	memset(n, 0, sizeof(*n));
	n->fd = -1;
	n->tap = -1;
	n->wire = -1;
	for (i = 0; i < 2; i++) {
		n->vq[i].kick = -1;
		n->vq[i].call = -1;
	}
	n->fd = open("/dev/vhost-net", O_RDWR | O_CLOEXEC);
	if (n->fd < 0)
		return -errno;
	r = tap_open(n, fmt);
	if (r)
		return r;
	if (ioctl(n->fd, VHOST_SET_OWNER, NULL))
		return -errno;
	if (ioctl(n->fd, VHOST_GET_FEATURES, &features))
		return -errno;
	features &= 1ULL << VIRTIO_RING_F_INDIRECT_DESC;
	if (ioctl(n->fd, VHOST_SET_FEATURES, &features))
		return -errno;
	r = vmm_init(&n->vmm, 16 << 20);
	if (r)
		return r;
	r = vmm_set_mem_table(&n->vmm, n->fd);
	if (r)
		return r;
	for (i = 0; i < 2; i++) {
		r = vmm_vq_init(&n->vmm, &n->vq[i], i, qsize);
		if (!r)
			r = vmm_vq_setup(&n->vq[i], n->fd);
		if (r)
			return r;
	}
	n->tx_free = calloc(qsize, sizeof(*n->tx_free));
	if (!n->tx_free)
		return -ENOMEM;
	for (i = 0; i < qsize; i++) {
		n->tx_free[i] = vmm_alloc(&n->vmm, VMM_NET_BUF, 64);
		if (!n->tx_free[i])
			return -ENOMEM;
	}
	n->tx_nfree = qsize;
	return 0;
}

int vmm_net_set_backend(struct vmm_net *n, int ring, int fd)
{
	struct vhost_vring_file f = { .index = ring, .fd = fd };

	return ioctl(n->fd, VHOST_NET_SET_BACKEND, &f) ? -errno : 0;
}

int vmm_net_open(struct vmm_net *n, unsigned int qsize, const char *fmt)
{
	int r = vmm_net_open_rings(n, qsize, fmt);

	if (!r)
		r = vmm_net_set_backend(n, VMM_NET_RX, n->tap);
	if (!r)
		r = vmm_net_set_backend(n, VMM_NET_TX, n->tap);
	if (r)
		vmm_net_close(n);
	return r;
}

void vmm_net_close(struct vmm_net *n)
{
	if (n->fd >= 0)
		close(n->fd);
	if (n->wire >= 0)
		close(n->wire);
	if (n->tap >= 0)
		close(n->tap);
	vmm_vq_free(&n->vq[0]);
	vmm_vq_free(&n->vq[1]);
	vmm_free(&n->vmm);
	free(n->tx_free);
	n->tx_free = NULL;
	n->fd = -1;
	n->wire = -1;
	n->tap = -1;
}

void vmm_net_make_frame(unsigned char *f, unsigned int len, unsigned int seq)
{
	static const unsigned char dst[6] = { 2, 0, 0, 0, 0, 1 };
	static const unsigned char src[6] = { 2, 0, 0, 0, 0, 2 };
	uint16_t type = htons(VMM_NET_ETHTYPE);
	unsigned int i;

	memcpy(f, dst, 6);
	memcpy(f + 6, src, 6);
	memcpy(f + 12, &type, 2);
	memcpy(f + ETH_HLEN, &seq, 4);
	for (i = ETH_HLEN + 4; i < len; i++)
		f[i] = (unsigned char)(seq * 7 + i);
}

unsigned int vmm_net_frame_seq(const unsigned char *f)
{
	unsigned int seq;

	memcpy(&seq, f + ETH_HLEN, 4);
	return seq;
}

int vmm_net_check_frame(const unsigned char *f, unsigned int len, unsigned int seq)
{
	unsigned char want[VMM_NET_BUF];

	if (len > sizeof(want))
		return -1;
	vmm_net_make_frame(want, len, seq);
	return memcmp(f, want, len) ? -1 : 0;
}

bool vmm_net_is_ours(const unsigned char *f, size_t len)
{
	uint16_t type;

	if (len < ETH_HLEN + 4)
		return false;
	memcpy(&type, f + 12, 2);
	return type == htons(VMM_NET_ETHTYPE);
}

int vmm_net_tx(struct vmm_net *n, unsigned int seq, unsigned int len, bool indirect)
{
	struct vmm_seg segs[2];
	unsigned char *buf;
	int head;

	if (!n->tx_nfree || len + HDR_LEN > VMM_NET_BUF)
		return -1;
	buf = n->tx_free[--n->tx_nfree];
	memset(buf, 0, HDR_LEN);
	vmm_net_make_frame(buf + HDR_LEN, len, seq);
	/* Header and frame in separate descriptors, as virtio-net drivers do. */
	segs[0] = (struct vmm_seg){ buf, HDR_LEN, false };
	segs[1] = (struct vmm_seg){ buf + HDR_LEN, len, false };
	head = vmm_vq_add(&n->vq[VMM_NET_TX], segs, 2, indirect, buf);
	if (head < 0)
		n->tx_nfree++;
	return head;
}

int vmm_net_tx_reap(struct vmm_net *n)
{
	void *buf;
	int got = 0;

	while (vmm_vq_get_used(&n->vq[VMM_NET_TX], NULL, &buf, 0) >= 0) {
		n->tx_free[n->tx_nfree++] = buf;
		got++;
	}
	return got;
}

int vmm_net_repost_rx(struct vmm_net *n, void *buf)
{
	struct vmm_seg seg = { buf, VMM_NET_BUF, true };

	return vmm_vq_add(&n->vq[VMM_NET_RX], &seg, 1, false, buf) < 0 ? -ENOSPC : 0;
}

int vmm_net_post_rx(struct vmm_net *n, unsigned int count)
{
	unsigned int i;

	for (i = 0; i < count; i++) {
		void *buf = vmm_alloc(&n->vmm, VMM_NET_BUF, 64);

		if (!buf)
			return -ENOMEM;
		if (vmm_net_repost_rx(n, buf))
			return -ENOSPC;
	}
	vmm_vq_kick(&n->vq[VMM_NET_RX]);
	return 0;
}

ssize_t vmm_net_wire_send(struct vmm_net *n, const void *f, size_t len)
{
	struct sockaddr_ll sll = {
		.sll_family = AF_PACKET,
		.sll_ifindex = n->ifindex,
		.sll_halen = 6,
	};

	return sendto(n->wire, f, len, 0, (struct sockaddr *)&sll, sizeof(sll));
}

ssize_t vmm_net_wire_recv(struct vmm_net *n, void *buf, size_t len, int timeout_ms)
{
	struct pollfd p = { .fd = n->wire, .events = POLLIN };

	for (;;) {
		struct sockaddr_ll sll;
		socklen_t sl = sizeof(sll);
		ssize_t r;

		if (poll(&p, 1, timeout_ms) <= 0)
			return -1;
		r = recvfrom(n->wire, buf, len, MSG_DONTWAIT, (struct sockaddr *)&sll, &sl);
		if (r < 0) {
			if (errno == EAGAIN)
				continue;
			return -1;
		}
		if (sll.sll_pkttype != PACKET_OUTGOING)
			return r;
	}
}
