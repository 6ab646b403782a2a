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
#define BENCH_MAX_NOTIFS 4096     /* --notifs: notifications per turn */
#define BENCH_MAX_PEERS 16        /* --peers: receiving engines of --notify */
/* A day: anything longer is a typo, and it keeps the ns arithmetic safe. */
#define BENCH_MAX_DURATION 86400.0
/* Buffer of the two-process modes and of a sweep when --buffer is absent. */
#define BENCH_DEFAULT_BUFFER (256ull << 20)
/* --target listens here unless --listen or FERRY_LISTEN say otherwise. */
#define BENCH_DEFAULT_LISTEN "127.0.0.1:18515"
/*
 * --target maps its buffer at this virtual address (mmap with
 * MAP_FIXED_NOREPLACE) so that --connect can find it without being told:
 * the default of --remote-addr.  If the address is taken, the target maps
 * anywhere and prints where; pass that to --remote-addr.
 */
#define BENCH_TARGET_ADDR 0x7e0000000000ull
/* --sweep without --size: perftest -a's sizes. */
#define BENCH_SWEEP_MIN 2ull
#define BENCH_SWEEP_MAX (8ull << 20)
/*
 * Per-request latency samples kept exactly, at most, by all ports together
 * (8 MiB); past that each port keeps a uniform random subset (bench_util.h).
 * --lat --iters N keeps up to BENCH_MAX_LAT_SAMPLES exactly (128 MiB).
 */
#define BENCH_LAT_SAMPLES (1ull << 20)
#define BENCH_MAX_LAT_SAMPLES (1ull << 24)
/*
 * Throughput runs keep --batch requests in flight per port, resubmitted
 * --refill at a time (a sub-batch: ferry_batch_reset needs every request
 * of a batch ended).  The default: the batch in this many sub-batches
 * (README, "In flight": a core fed one request at a time costs twice as
 * much per request).
 */
#define BENCH_DEFAULT_SUBBATCHES 4u
/* --idle: wake-up samples (cold and warm) without --iters, and their size without --size. */
#define BENCH_IDLE_ITERS 100u
#define BENCH_IDLE_SIZE 8u
/* --idle: the idle time before each cold wake-up sample (the cores sleep after a few us). */
#define BENCH_IDLE_GAP_MS 10u
/*
 * --pingpong: each side's buffer holds a control page (the hand-shake,
 * mode_pingpong.c), then the message it receives, then the one it sends,
 * each at a page boundary.
 */
#define BENCH_PP_CTL 4096ull

enum bench_mode {
	BENCH_LOCAL = 0, /* initiator and target engines in this process */
	BENCH_TARGET,    /* --target: only the target, serving its buffer */
	BENCH_INITIATOR, /* --connect: only the initiator, against a --target */
};

struct bench_cfg {
	enum bench_mode mode;
	enum ferry_op op;
	uint64_t size;            /* bytes per request; the smallest of a sweep */
	uint64_t size_max;        /* the largest of a sweep; == size without one */
	uint32_t batch;           /* requests in flight per port (--sync: per batch) */
	uint32_t ports;           /* submitting threads */
	const char *cores;        /* initiator cores; NULL = FERRY_CORES or "0" */
	const char *target_cores; /* NULL = the initiator's list */
	const char *nics;         /* NULL = FERRY_NICS or "loop" */
	double duration;          /* seconds; used when iters == 0 */
	bool duration_set;        /* --duration given (--target runs forever without) */
	uint64_t iters;           /* batches per port; 0 = run for duration */
	uint32_t slice;           /* 0 = keep the engine's (env/default) */
	uint32_t qps;             /* 0 = keep */
	uint32_t depth;           /* 0 = keep */
	bool nocopy;
	bool spin;
	bool caller;              /* FERRY_IDLE_CALLER: our threads run the passes */
	bool hugepages;          /* buffers madvise(MADV_HUGEPAGE)d before first touch */
	bool verify;
	bool json;
	bool no_port_pin;         /* leave port threads to the scheduler */
	bool same_addr;           /* every request of a port at one address, like perftest */
	bool help;
	/* two-process modes */
	const char *listen;       /* --target: NULL = FERRY_LISTEN or BENCH_DEFAULT_LISTEN */
	const char *connect;      /* --connect HOST:PORT of a --target */
	uint64_t buffer;          /* each side's buffer; 0 = derived (bench_buffer_bytes) */
	uint64_t remote_addr;     /* --connect: the target's buffer; 0 = BENCH_TARGET_ADDR */
	uint64_t seed;            /* pattern seed of the target's buffer (default 1) */
	uint64_t write_nonce;     /* this run's, in its WRITE patterns (bench_setup; 0 here) */
	bool lat;                 /* latency rows: --lat (one request at a time), --pingpong */
	bool sweep;               /* sizes size, 2 size, ... size_max (one row each) */
	/* how a port submits and what it measures */
	bool sync;                /* --sync: submit the batch, wait for all of it, repeat */
	uint32_t refill;          /* in flight: requests resubmitted together (<= batch) */
	bool status_once;         /* --sync: each request's status read once, after the wait */
	bool prep;                /* --prep: ferry_prep_create once, ferry_prep_submit by index */
	bool pingpong;            /* --pingpong: WRITE ping-pong, half round trips (sets lat) */
	bool notify;              /* --notify: a WRITE and its notification, timed to the
	                           * target's ferry_notif_poll (sets lat) */
	uint32_t notifs;          /* --notifs K: notifications per --notify turn (default 1) */
	uint32_t peers;           /* --peers P: --notify's receivers, turn's notification i
	                           * to receiver i % P (default 1: the target alone) */
	double idle;              /* --idle SECONDS: idle CPU and wake-up latency; 0 = off */
	uint32_t opens;           /* --opens N: time N segment opens (mode_opens.c); 0 = off */
	const char *secret;       /* --secret FILE: --opens also with this cluster key */
	/* output */
	const char *csv;          /* --csv FILE: one row per size; NULL = none */
	const char *plot;         /* --plot FILE.png: GB/s and p99 against size */
	const char *prom;         /* --prom FILE, "-" = stdout: Prometheus text at the end */
	int counters;             /* --counters: 1 on, 0 off, -1 = keep (env/default) */
};

/* --refill's default for batch N: N / BENCH_DEFAULT_SUBBATCHES, rounded up. */
static inline uint32_t bench_default_refill(uint32_t batch)
{
	return (batch + BENCH_DEFAULT_SUBBATCHES - 1) / BENCH_DEFAULT_SUBBATCHES;
}

/* Throughput with requests in flight, the default (mode_inflight.c). */
static inline bool bench_in_flight(const struct bench_cfg *c)
{
	return !c->sync && !c->lat && !c->idle;
}

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

/*
 * Bytes of each side's buffer (checked by the parser): --buffer if given;
 * else ports * batch * size in the one-process mode without a sweep (the
 * historical layout: every request its own bytes; --pingpong:
 * bench_pp_bytes(size)), else BENCH_DEFAULT_BUFFER (at least ports *
 * size_max in the one-process mode).
 * Request i of port p of a run of size s sits at offset
 * (p * bench_batch_for(cfg, s) + i) * s on both sides.
 */
uint64_t bench_buffer_bytes(const struct bench_cfg *cfg);

/* The same, kept under its old name. */
uint64_t bench_total_bytes(const struct bench_cfg *cfg);

/*
 * Requests per batch for size s: --batch, lowered so that every port's
 * requests fit the buffer side by side (at least 1: the parser checked
 * ports * size_max <= buffer).
 */
uint32_t bench_batch_for(const struct bench_cfg *cfg, uint64_t s);

/* --pingpong's buffer offsets of a size-s message: received, sent; bytes of each side's buffer. */
uint64_t bench_pp_recv(uint64_t s);
uint64_t bench_pp_send(uint64_t s);
uint64_t bench_pp_bytes(uint64_t s);

/* "bw" (in flight), "bw_sync", "lat", "pingpong" or "idle": the kind of rows a run makes. */
const char *bench_run_name(const struct bench_cfg *cfg);

/* The size after s in the run (doubling), or 0 after the last. */
uint64_t bench_next_size(const struct bench_cfg *cfg, uint64_t s);

/*
 * The pattern seed of the data written at sweep step k: differs from
 * cfg->seed, and with cfg->write_nonce from one run to the next, so that
 * what an earlier run left in a long-lived --target does not pass --verify.
 */
uint64_t bench_write_seed(const struct bench_cfg *cfg, unsigned k);

const char *bench_mode_name(enum bench_mode m);

const char *bench_op_name(enum ferry_op op);

void bench_usage(FILE *f, const char *prog);

#endif /* FERRY_BENCH_OPTS_H */
