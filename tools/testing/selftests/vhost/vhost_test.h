/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Glue between the kselftest harness and the vhost tests.  Include after
 * ../kselftest_harness.h.
 */
#ifndef VHOST_TEST_H
#define VHOST_TEST_H

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Mark the running test failed without an assertion's message. */
#define VHOST_TEST_FAILED(md)	((md)->exit_code = KSFT_FAIL)

/*
 * A missing prerequisite is a SKIP, never a FAIL.  These return why a test
 * cannot run (a string for SKIP(), valid until the next call), or NULL.
 */
static char vhost_skip_why[192];

/*
 * @path must open read-write: a missing node means the driver is not built
 * (@missing says which option or parameter gives it), a node the caller may
 * not open means the test is not running as root.  Any other error is left
 * for the test to trip over.
 */
static inline const char *vhost_unusable(const char *path, const char *missing)
{
	int fd = open(path, O_RDWR | O_CLOEXEC);

	if (fd >= 0) {
		close(fd);
		return NULL;
	}
	if (errno == ENOENT || errno == ENODEV || errno == ENXIO)
		snprintf(vhost_skip_why, sizeof(vhost_skip_why), "%s missing (%s)",
			 path, missing);
	else if (errno == EACCES || errno == EPERM)
		snprintf(vhost_skip_why, sizeof(vhost_skip_why),
			 "cannot open %s: %s (not root?)", path, strerror(errno));
	else
		return NULL;
	return vhost_skip_why;
}

/* A bool module parameter of null_blk; -1 where it cannot be read. */
static inline int vhost_nullb_param(const char *name)
{
	char path[96], v[8] = "";
	FILE *f;

	snprintf(path, sizeof(path), "/sys/module/null_blk/parameters/%s", name);
	f = fopen(path, "r");
	if (!f)
		return -1;
	if (!fgets(v, sizeof(v), f))
		v[0] = 0;
	fclose(f);
	return v[0] == 'Y' || v[0] == '1';
}

/*
 * /dev/nullb0 as a backend: it must exist and open read-write; @data: it
 * keeps what is written (null_blk.memory_backed=1), without which nothing
 * reads back; @discard: it takes discards (null_blk.discard=1, which needs
 * memory_backed).  nullb0 is the device null_blk's module parameters make.
 */
static inline const char *vhost_nullb_unusable(bool data, bool discard)
{
	const char *why = vhost_unusable("/dev/nullb0", "null_blk.nr_devices=1");
	char v[32] = "";
	FILE *f;

	if (why)
		return why;
	if (data && vhost_nullb_param("memory_backed") == 0) {
		snprintf(vhost_skip_why, sizeof(vhost_skip_why),
			 "/dev/nullb0 is not memory-backed (null_blk.memory_backed=1)");
		return vhost_skip_why;
	}
	if (!discard)
		return NULL;
	f = fopen("/sys/block/nullb0/queue/discard_max_bytes", "r");
	if (f) {
		if (!fgets(v, sizeof(v), f))
			v[0] = 0;
		fclose(f);
	}
	if (!f || strtoull(v, NULL, 10) == 0) {
		snprintf(vhost_skip_why, sizeof(vhost_skip_why),
			 "/dev/nullb0 takes no discards (null_blk.discard=1 memory_backed=1)");
		return vhost_skip_why;
	}
	return NULL;
}

/*
 * vhost-net with a tap backend and a packet socket on the tap as the wire:
 * the two device nodes, and root for the tap (CAP_NET_ADMIN) and the packet
 * socket (CAP_NET_RAW).
 */
static inline const char *vhost_net_unusable(void)
{
	const char *why = vhost_unusable("/dev/vhost-net", "CONFIG_VHOST_NET");

	if (!why)
		why = vhost_unusable("/dev/net/tun", "CONFIG_TUN");
	if (!why && geteuid()) {
		snprintf(vhost_skip_why, sizeof(vhost_skip_why),
			 "needs root (a tap device and a packet socket)");
		why = vhost_skip_why;
	}
	return why;
}

/* Write @s to the sysfs, procfs or debugfs file @path: 0 or -errno. */
static inline int write_str(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY), r;

	if (fd < 0)
		return -errno;
	r = write(fd, s, strlen(s)) < 0 ? -errno : 0;
	close(fd);
	return r;
}

/* CLOCK_MONOTONIC in seconds. */
static inline double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

#endif
