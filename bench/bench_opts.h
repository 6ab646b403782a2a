/* SPDX-License-Identifier: MIT */
/*
 * ferry_bench command line: the configuration it produces and the parser.
 * Kept apart from the bench's main so that tests can exercise every
 * refusal without creating an engine.
 */
#ifndef FERRY_BENCH_OPTS_H
#define FERRY_BENCH_OPTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "runtime/ferry.h"

/* Both sides' buffers are capped at this many bytes each. */
#define BENCH_MAX_BUFFER (1ull << 30)
#define BENCH_MAX_PORTS 1024u
#define BENCH_MAX_BATCH (1u << 20)
/* A day: anything longer is a typo, and it keeps the ns arithmetic safe. */
#define BENCH_MAX_DURATION 86400.0

struct bench_cfg {
	enum ferry_op op;
	uint64_t size;            /* bytes per request */
	uint32_t batch;           /* requests per batch */
	uint32_t ports;           /* submitting threads */
	const char *cores;        /* initiator cores; NULL = FERRY_CORES or "0" */
	const char *target_cores; /* NULL = the initiator's list */
	const char *nics;         /* NULL = FERRY_NICS or "loop" */
	double duration;          /* seconds; used when iters == 0 */
	uint64_t iters;           /* batches per port; 0 = run for duration */
	uint32_t slice;           /* 0 = keep the engine's (env/default) */
	uint32_t qps;             /* 0 = keep */
	uint32_t depth;           /* 0 = keep */
	bool nocopy;
	bool spin;
	bool verify;
	bool json;
	bool no_port_pin;         /* leave port threads to the scheduler */
	bool help;
};

/* The defaults, before any flag. */
void bench_cfg_default(struct bench_cfg *cfg);

/*
 * Parse argv into cfg (which it first resets to the defaults).  Returns 0,
 * or -EINVAL with a message naming the flag in err.  Resets getopt's state,
 * so it may be called more than once in a process.  String fields point
 * into argv.
 */
int bench_parse_args(int argc, char **argv, struct bench_cfg *cfg, char *err, size_t errlen);

/*
 * A positive byte count with an optional binary K/M/G suffix ("64K" =
 * 65536), at most max.  NULL on success, else why it is not one.
 */
const char *bench_parse_size(const char *s, uint64_t max, uint64_t *out);

/* Apply the flags that were given to engine options o (after env). */
void bench_apply_opts(const struct bench_cfg *cfg, struct ferry_opts *o);

/* Bytes of each side's buffer: ports * batch * size (checked by the parser). */
uint64_t bench_total_bytes(const struct bench_cfg *cfg);

const char *bench_op_name(enum ferry_op op);

void bench_usage(FILE *f, const char *prog);

#endif /* FERRY_BENCH_OPTS_H */
