/* SPDX-License-Identifier: MIT */
/*
 * What the three files of ferry_bench's command line share (bench_opts.c:
 * the flags and their values; bench_cfg.c: the checks across flags and the
 * buffer layout they imply; bench_usage.c: --help), and nothing else does.
 */
#ifndef FERRY_BENCH_OPTS_INT_H
#define FERRY_BENCH_OPTS_INT_H

#include <stdbool.h>
#include <stddef.h>

#include "bench_opts.h"

/* Long-only options: values past any character getopt could return. */
enum {
	OPT_OP = 256,
	OPT_BATCH,
	OPT_PORTS,
	OPT_CORES,
	OPT_TARGET_CORES,
	OPT_SLICE,
	OPT_NOCOPY,
	OPT_SPIN,
	OPT_CALLER,
	OPT_HUGEPAGES,
	OPT_VERIFY,
	OPT_JSON,
	OPT_NO_PORT_PIN,
	OPT_TARGET,
	OPT_LISTEN,
	OPT_CONNECT,
	OPT_BUFFER,
	OPT_REMOTE_ADDR,
	OPT_SEED,
	OPT_LAT,
	OPT_SWEEP,
	OPT_CSV,
	OPT_PLOT,
	OPT_PROM,
	OPT_COUNTERS,
	OPT_SYNC,
	OPT_REFILL,
	OPT_STATUS_ONCE,
	OPT_PREP,
	OPT_PINGPONG,
	OPT_IDLE,
	OPT_OPENS,
	OPT_SECRET,
	OPT_SAME_ADDR,
	OPT_NOTIFY,
	OPT_NOTIFS,
	OPT_PEERS,
	OPT_END, /* one past the last: size of the seen[] array */
};

/* A refusal: the message into err (when given); returns -EINVAL.  (Short
 * names: every refusal calls it; only these three files see them.) */
__attribute__((format(printf, 3, 4)))
int bad_arg(char *err, size_t errlen, const char *fmt, ...);

/* "--name" of option code c, for messages (a static buffer). */
const char *opt_flag(int c);

/* bench_cfg.c: the checks across flags once all are parsed; fills derived fields. */
int bench_check_cfg(struct bench_cfg *cfg, const bool *seen, char *err, size_t errlen);

#endif /* FERRY_BENCH_OPTS_INT_H */
