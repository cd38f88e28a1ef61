// SPDX-License-Identifier: GPL-2.0
/*
 * vhost_insn_mark CODE...: executes, for each CODE (0-255) in turn, the
 * marker instruction that the benchmark's TCG plugin (vmq-insns.c, beside
 * this file) answers by writing down every vCPU's
 * instruction counts: the 8-byte NOP "nopl 0x564d51NN(%rax,%rax,1)",
 * NN = CODE.  On hardware, or in a VM without the plugin, it is a NOP.
 * The benchmark runs it at the edges of a measurement window.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

int main(int argc, char **argv)
{
	static const unsigned char marker[] = {
		0x0f, 0x1f, 0x84, 0x00, 0x00, 0x51, 0x4d, 0x56,
		0xc3,	/* ret */
	};
	unsigned char *code;
	unsigned long n;
	char *end;
	int i;

	if (argc < 2) {
		fprintf(stderr, "usage: %s CODE...\n", argv[0]);
		return 2;
	}
	code = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (code == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	for (i = 1; i < argc; i++) {
		n = strtoul(argv[i], &end, 0);
		if (*end || n > 255) {
			fprintf(stderr, "%s: bad code %s\n", argv[0], argv[i]);
			return 2;
		}
		memcpy(code, marker, sizeof(marker));
		code[4] = n;
		/* A fresh page each time: the new code is translated anew. */
		if (mprotect(code, 4096, PROT_READ | PROT_EXEC)) {
			perror("mprotect");
			return 1;
		}
		((void (*)(void))code)();
		if (mprotect(code, 4096, PROT_READ | PROT_WRITE)) {
			perror("mprotect");
			return 1;
		}
	}
	return 0;
}
