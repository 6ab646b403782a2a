/* SPDX-License-Identifier: MIT */
/*
 * ferry_bench's private header: the state of a run (struct bench, and a
 * struct bench_port per submitting thread), the results of one size
 * (struct totals), and the functions the bench's files share, by file.
 * ferry_bench.c's top comment says which file holds what.
 */
#ifndef FERRY_BENCH_H
#define FERRY_BENCH_H

#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "bench_opts.h"
#include "bench_out.h"
#include "bench_util.h"
#include "runtime/ferry.h"

#define PAGE 4096

struct bench;

struct bench_port {
	pthread_t thread;
	unsigned idx;
	struct bench *b;
	struct ferry_port *port;
	struct ferry_batch *batch;
	struct ferry_req *reqs; /* cfg.batch slots; the first b->nreq in use */
	uint8_t *buf;           /* b->local_cap bytes, registered with the initiator */
	/* results of the current size, written by the port's thread, read after join */
	uint64_t batches;
	uint64_t ok;            /* requests DONE with all their bytes */
	uint64_t failures;
	uint64_t lat_ns;        /* sum of submit -> wait returned */
	uint64_t end_ns;
	struct bench_samples lat; /* ns of each request that ended DONE */
	uint32_t *open;         /* batch_poll: requests not yet seen ended */
	uint64_t prog_bytes;    /* atomic, for the progress line: bytes of ended batches */
	uint64_t prog_batches;  /* atomic: batches ended */
	int err;                /* the call that stopped the thread early, if any */
	bool stuck;             /* a batch is still pending: do not free it */
	unsigned reported;
};

struct bench {
	struct bench_cfg cfg;
	struct ferry_opts iopts, topts;
	struct ferry_engine *init, *target;
	struct ferry_engine *self;   /* the engine whose cores are reported */
	ferry_seg_t seg;
	uint8_t *tbuf;               /* one-process mode and --target: the target's buffer */
	uint64_t tbuf_len;           /* bytes allocated or mapped */
	bool tbuf_mapped;            /* --target: mmap()ed */
	uint64_t buffer;             /* each side's buffer */
	uint64_t local_cap;          /* bytes of each port's buffer */
	uint64_t remote_base;        /* target address of buffer offset 0 */
	/* the size being run */
	uint64_t size;
	uint32_t nreq;               /* requests per batch at this size */
	uint64_t per_port;           /* nreq * size */
	unsigned step;               /* index of the size in the sweep */
	struct bench_port *ports;
	pthread_barrier_t start;
	uint64_t start_ns, deadline_ns, end_ns;
	unsigned ncores;
	bool pin;                    /* port threads run on port_cpus */
	cpu_set_t port_cpus;
	char port_cpus_desc[256];
	/* core counters: at the start of everything, before and after one size */
	struct ferry_core_stats *first, *before, *after;
	uint64_t stall_ns;           /* give a batch up after this long without progress */
	uint64_t mismatches;         /* --verify: bytes that differ, this size */
	bool efault_hinted;
	/* output */
	struct bench_row *rows;      /* one per size run so far: the --plot points */
	unsigned nrows, nsizes;
	FILE *csv, *prom;            /* opened before the run: a bad path costs no run */
	uint64_t run_start_ns;
	struct {
		bool tty;            /* stderr is a terminal: one \r-redrawn line */
		bool shown;          /* a redrawn line is on the screen */
		uint64_t next_ns;    /* next update */
		uint64_t last_ns, last_bytes;
	} progress;
};

struct totals {
	uint64_t batches, ok, failures, lat_ns;
	double secs;
	bool early; /* a port stopped on an error */
	struct bench_lat lat;
};

static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline const char *onoff(int v)
{
	return v ? "on" : "off";
}

/* Where request i of port p lands in the target's buffer at this size. */
static inline uint64_t req_offset(const struct bench *b, unsigned p, uint32_t i)
{
	return p * b->per_port + i * b->size;
}

/* ferry_bench.c: the program */
int report(const char *what, int rc);

/* setup.c: set-up and teardown */
int opts_build(struct bench *b);
int engine_open(const struct bench *b, const char *role, const struct ferry_opts *o,
		struct ferry_engine **e);
int bench_setup(struct bench *b);
void bench_teardown(struct bench *b);

/* run.c: a run of the one-process and --connect modes */
int bench_run(struct bench *b);

/* port.c: the port threads */
void ports_place(struct bench *b);
int ports_run(struct bench *b);

/* batch.c: waiting for a port's batch, checking it, stopping the port */
int port_stop(struct bench_port *bp, uint64_t n, const char *call, int rc);
int batch_finish(struct bench_port *bp, uint64_t n, int rc);
int batch_wait(struct bench_port *bp);
bool batch_stalled(struct bench_port *bp, uint64_t now, uint64_t *moved, uint64_t *since);

/* mode_bw.c: throughput, a batch at a time */
int batch_run(struct bench_port *bp, uint64_t n);

/* mode_lat.c: --lat, a request at a time */
int lat_run(struct bench_port *bp, uint64_t n);

/* mode_target.c: --target */
int nics_check_remote(struct ferry_engine *e, const char *role);
int target_main(struct bench *b);

/* verify.c: --verify */
void buffers_fill_once(struct bench *b);
void buffers_prepare(struct bench *b);
void buffers_verify(struct bench *b);

/* counters.c: snapshots of the cores' counters */
void stats_snap(const struct bench *b, struct ferry_core_stats *s);
void stats_settle(const struct bench *b, struct ferry_core_stats *s);
void stats_final(struct bench *b);
int stats_alloc(struct bench *b);

/* progress.c: the progress line */
void progress_start(struct bench *b);
void ports_join(struct bench *b);

/* report.c: the table, the per-core tables and --json, on stdout */
void print_header(const struct bench *b);
void print_row(const struct bench *b, const struct totals *t);
void print_cores(const struct bench *b, const struct ferry_core_stats *before,
		 const struct ferry_core_stats *after);
void json_str(const char *key, const char *s);
void json_cores(const struct bench *b, const struct ferry_core_stats *before,
		const struct ferry_core_stats *after);
void print_json(const struct bench *b, const struct totals *t);

/* outputs.c: --csv, --plot and --prom */
void row_add(struct bench *b, const struct totals *t);
int csv_put(struct bench *b);
int outputs_open(struct bench *b);
int plot_put(struct bench *b);
int prom_put(struct bench *b);

#endif /* FERRY_BENCH_H */
