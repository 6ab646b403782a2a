/* SPDX-License-Identifier: MIT */
/*
 * What the baseline tools of bench/tools/ share (tool.c, linked into each;
 * they are not linked to ferry): clocks, sizes, pinning, and for the two
 * copy loops (memcpy_bw, pvm_bw) their pools and their common flags.
 */
#ifndef FERRY_BENCH_TOOL_H
#define FERRY_BENCH_TOOL_H

#include <stdint.h>
#include <time.h>

/* The prefix of the tool's messages ("memcpy_bw"): each tool defines it. */
extern const char tool_name[];

/* Clock id in ns. */
uint64_t clock_ns(clockid_t id);

/* CLOCK_MONOTONIC in ns. */
uint64_t now_ns(void);

/* "64K" -> 65536; 0 on a bad number. */
uint64_t parse_size(const char *s);

/* Pin the calling thread to cpu (< 0: leave it); a refusal is reported, not fatal. */
void pin_cpu(int cpu);

/* A 2 MiB-aligned pool of len bytes (so that THP can back all of it; thp:
 * madvise(MADV_HUGEPAGE) first), every byte set to fill; NULL on failure. */
char *pool_map(uint64_t len, int fill, int thp);

/* The flags both copy loops take. */
struct copy_opts {
	uint64_t size;  /* --size: bytes per copy */
	uint64_t pool;  /* --pool: bytes walked on each side */
	double dur;     /* --duration, s */
	int cpu;        /* --cpu, -1: not pinned */
	int thp;        /* --hugepages */
};

/* The defaults: --pool 256M --duration 2, no --size. */
void copy_opts_default(struct copy_opts *o);

/* Parse flag (argv[i]) with val (argv[i + 1], NULL at the end) into o:
 * how many words it took (1 or 2), 0 when it is not a copy flag or lacks
 * its value. */
int copy_opt(struct copy_opts *o, const char *flag, const char *val);

/* 0 when o makes sense (then its pool is a whole number of sizes), -1 if not. */
int copy_opts_check(struct copy_opts *o);

#endif /* FERRY_BENCH_TOOL_H */
