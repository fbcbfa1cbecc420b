// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Loads one program of floor.bpf.c (bench/floor.py), drains its ring every
 * 100 ms as tcpscope's reader does, and on SIGINT/SIGTERM prints what it saw
 * as one JSON line.
 *
 *   tcpscope-bench-floor dispatch|storage|record|hash|transfers READY_FILE
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <bpf/libbpf.h>

#include "floor.skel.h"

static volatile sig_atomic_t stopping;

static void on_signal(int sig)
{
	(void)sig;
	stopping = 1;
}

/* Flow records (alone or with their open transfers) and transfer records,
 * told apart by size as tcpscope's reader does. */
struct seen {
	unsigned long long records;
	unsigned long long transfers;
};

static int on_record(void *ctx, void *data, size_t size)
{
	struct seen *seen = ctx;

	(void)data;
	if (size == 128)
		++seen->transfers;
	else
		++seen->records;
	return 0;
}

static int print_libbpf(enum libbpf_print_level level, const char *fmt, va_list args)
{
	/* The verifier log comes at WARN; debug chatter is left out. */
	if (level == LIBBPF_DEBUG)
		return 0;
	return vfprintf(stderr, fmt, args);
}

int main(int argc, char **argv)
{
	static const char *const variants[] = {"dispatch", "storage", "record", "hash", "transfers"};
	enum { NVARIANTS = sizeof(variants) / sizeof(variants[0]) };
	struct bpf_program *progs[NVARIANTS];
	struct bpf_program *prog;
	struct ring_buffer *ring = NULL;
	struct seen seen = {0, 0};
	struct floor_bpf *skel;
	int chosen = -1, err, i;
	FILE *ready;

	if (argc != 3) {
		fprintf(stderr, "usage: %s dispatch|storage|record|hash|transfers READY_FILE\n", argv[0]);
		return 2;
	}
	for (i = 0; i < NVARIANTS; i++)
		if (strcmp(argv[1], variants[i]) == 0)
			chosen = i;
	if (chosen < 0) {
		fprintf(stderr, "floor: unknown variant '%s'\n", argv[1]);
		return 2;
	}
	libbpf_set_print(print_libbpf);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);

	skel = floor_bpf__open();
	if (!skel) {
		fprintf(stderr, "floor: opening the BPF object failed: %s\n", strerror(errno));
		return 1;
	}
	progs[0] = skel->progs.floor_dispatch;
	progs[1] = skel->progs.floor_storage;
	progs[2] = skel->progs.floor_record;
	progs[3] = skel->progs.floor_hash;
	progs[4] = skel->progs.floor_transfers;
	for (i = 0; i < NVARIANTS; i++)
		bpf_program__set_autoload(progs[i], i == chosen);
	/* The transfer floor's per-call hooks come with it, and only with it. */
	bpf_object__for_each_program(prog, skel->obj)
		if (prog == skel->progs.floor_sendmsg || prog == skel->progs.floor_data_ready)
			bpf_program__set_autoload(prog, progs[chosen] == skel->progs.floor_transfers);

	err = floor_bpf__load(skel);
	if (err) {
		fprintf(stderr, "floor: loading failed: %s\n", strerror(-err));
		goto out;
	}
	err = floor_bpf__attach(skel);
	if (err) {
		fprintf(stderr, "floor: attaching %s failed: %s\n", argv[1], strerror(-err));
		goto out;
	}
	ring = ring_buffer__new(bpf_map__fd(skel->maps.floor_ring), on_record, &seen, NULL);
	if (!ring) {
		err = -errno;
		fprintf(stderr, "floor: ring buffer reader: %s\n", strerror(errno));
		goto out;
	}
	ready = fopen(argv[2], "w");
	if (!ready) {
		err = -errno;
		fprintf(stderr, "floor: %s: %s\n", argv[2], strerror(errno));
		goto out;
	}
	fclose(ready);

	while (!stopping) {
		err = ring_buffer__poll(ring, 100);
		if (err < 0 && err != -EINTR) {
			fprintf(stderr, "floor: polling the ring failed: %s\n", strerror(-err));
			goto out;
		}
		/* Records are submitted without a wake-up: take them on the timer. */
		ring_buffer__consume(ring);
	}
	ring_buffer__consume(ring);
	printf("{\"variant\": \"%s\", \"records\": %llu, \"transfers\": %llu, \"closed\": %llu, \"lost\": %llu, "
	       "\"untracked\": %llu}\n",
	       argv[1], seen.records, seen.transfers, (unsigned long long)skel->bss->floor_closed,
	       (unsigned long long)skel->bss->floor_lost, (unsigned long long)skel->bss->floor_untracked);
	err = 0;
out:
	ring_buffer__free(ring);
	floor_bpf__destroy(skel);
	return err ? 1 : 0;
}
