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
#define HUGE_PAGE (2ull << 20) /* x86-64's transparent huge page */

/*
 * CPU time of the process apart from the thread that measures it (which
 * sleeps): what the engines' threads used between two snapshots (cpu_snap).
 */
struct cpu_use {
	uint64_t wall_ns, user_ns, sys_ns; /* deltas: the others' user and system time */
};

struct bench;
struct flight;
struct pp_peer;

struct bench_port {
	pthread_t thread;
	unsigned idx;
	struct bench *b;
	struct ferry_port *port;
	struct ferry_batch *batch;   /* --sync, --lat, --idle, --verify's read-back */
	struct ferry_req *reqs; /* cfg.batch slots; the first b->nreq in use */
	struct ferry_prep *prep; /* --prep: reqs prepared (this size), else NULL */
	uint32_t *prep_idx;     /* 0, 1, ... cfg.batch - 1: ferry_prep_submit's indices */
	struct flight *flight;  /* the in-flight mode's sub-batches (mode_inflight.c) */
	uint8_t *buf;           /* b->local_cap bytes, registered with the initiator */
	/* results of the current size, written by the port's thread, read after join */
	uint64_t batches;
	uint64_t ok;            /* requests DONE with all their bytes */
	uint64_t failures;
	uint64_t lat_ns;        /* sum of submit -> wait returned */
	uint64_t end_ns;
	struct bench_samples lat; /* ns of each request that ended DONE (--idle: cold) */
	struct bench_samples warm; /* --idle: the same request again at once */
	uint64_t warm_failures; /* --idle: of failures, the warm requests' */
	struct bench_samples floor; /* --idle: the machine's wake-up alone (wakefloor.c) */
	uint64_t first_ns;      /* --idle: the first request, right after the idle window */
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
	/* --notify: its receivers, [0] the target and seg (receivers_open) */
	struct ferry_engine *fan[BENCH_MAX_PEERS];
	ferry_seg_t fan_seg[BENCH_MAX_PEERS];
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
	uint64_t cores_cpu_ns;        /* CPU time of this process's engine cores over the size */
	unsigned core_threads;        /* how many threads that is (every engine's: one-process
	                               * mode counts the target's too) */
	unsigned ncores;
	bool pin;                    /* port threads run on port_cpus */
	cpu_set_t port_cpus;
	char port_cpus_desc[256];
	/* core counters: at the start of everything, before and after one size */
	struct ferry_core_stats *first, *before, *after;
	uint64_t stall_ns;           /* give a batch up after this long without progress */
	struct pp_peer *pp;          /* --pingpong: the answering side in this process */
	struct cpu_use idle_cpu;     /* --idle: CPU of the engines over the idle window */
	uint64_t idle_loops, idle_sleeps; /* --idle: what their cores did meanwhile */
	int floor_cpu, floor_rc;     /* --idle: where the wake-up floor slept, its outcome */
	char listen_buf[128];         /* --connect --pingpong: where the target reaches us */
	uint64_t mismatches;         /* --verify: bytes that differ, this size */
	uint64_t unverified;         /* --verify: bytes that could not be checked, this size */
	bool efault_hinted;
	/* output */
	struct bench_row *rows;      /* one per size run so far: the --plot points */
	unsigned nrows, nsizes;
	unsigned csv_rows;           /* rows written to --csv so far */
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

/* A spin-wait hint: yields the pipeline (and a hyper-thread sibling). */
static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

static inline const char *onoff(int v)
{
	return v ? "on" : "off";
}

/*
 * Requests still pending are looked at again after 1/32 of the time they
 * waited: seen ended at most ~3 % late, without reading lines a core is
 * about to write over and over (--sync's batches, in-flight sub-batches).
 */
static inline uint64_t poll_gap(uint64_t waited)
{
	return waited >> 5;
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
/* --hugepages: len rounded up to what the buffers are aligned and sized to. */
uint64_t buf_round(const struct bench_cfg *cfg, uint64_t len);
/* --hugepages: ask for transparent huge pages on [p, p + len) before its first touch. */
void buf_advise(const struct bench_cfg *cfg, void *p, uint64_t len);
void bench_teardown(struct bench *b);

/* run.c: a run of the one-process and --connect modes */
int bench_run(struct bench *b);

/* port.c: the port threads */
void ports_place(struct bench *b);
int ports_run(struct bench *b);

/* batch.c: submitting, waiting for a port's batch, checking it, stopping the port */
int port_stop(struct bench_port *bp, uint64_t n, const char *call, int rc);
bool req_count(struct bench_port *bp, uint64_t n, uint32_t i, int rc,
	       const struct ferry_req_status *st);
int batch_finish(struct bench_port *bp, uint64_t n, int rc, uint64_t lat_ns);
int batch_wait(struct bench_port *bp);
uint64_t batch_bytes(const struct ferry_batch *b, uint32_t n);
bool bytes_stalled(const struct bench_port *bp, uint64_t m, uint64_t now, uint64_t *moved,
		   uint64_t *since);
bool batch_stalled(struct bench_port *bp, uint64_t now, uint64_t *moved, uint64_t *since);
int port_submit(struct bench_port *bp, struct ferry_batch *batch, uint32_t first, uint32_t n,
		bool try);
const char *port_submit_call(const struct bench_port *bp, bool try);
int ports_prep(struct bench *b);

/* mode_bw.c: --sync, a batch at a time; the pause between two looks */
int batch_run(struct bench_port *bp, uint64_t n);
void pause_ns(uint64_t gap);

/* mode_inflight.c: throughput, --batch requests in flight per port */
int flight_setup(struct bench_port *bp);
void flight_free(struct bench_port *bp);
int flight_run(struct bench_port *bp, uint64_t n);
int flight_drain(struct bench_port *bp, uint64_t n);

/* mode_lat.c: --lat, a request at a time: a chunk of them from turn n (*turns
 * run); --idle's single request */
int lat_chunk(struct bench_port *bp, uint64_t n, uint64_t *turns);
int lat_run(struct bench_port *bp, uint64_t n);
/* mode_notify.c: --notify, one WRITE and its notification, timed to the receiver */
int notify_run(struct bench_port *bp, uint64_t n);

/* mode_pingpong.c: --pingpong (pp_peer.c: the answering side) */
int pingpong_size(struct bench *b);
int pingpong_run(struct bench_port *bp, uint64_t n);
int pingpong_listen(struct bench *b);
int pp_peer_start(struct bench *b, struct ferry_engine *e, uint8_t *buf, uint64_t len);
void pp_peer_stop(struct bench *b);

/* mode_idle.c: --idle */
void cpu_snap(struct cpu_use *c);
void cpu_since(struct cpu_use *c);
double cpu_pct(const struct cpu_use *c);
void cpu_print(const char *what, const struct cpu_use *c);
void idle_window(struct bench *b);
int idle_run(struct bench_port *bp, uint64_t n);
void idle_floor(struct bench *b);
void idle_print(struct bench *b, const struct totals *t);

/* mode_target.c: --target */
int nics_check_remote(struct ferry_engine *e, const char *role);
int target_main(struct bench *b);
/* softnic.c: RDMA device name under sysfs root is a software one (rxe, siw). */
bool nic_is_soft(const char *sysfs, const char *name);
/* Say on stderr, once, when e runs a software RDMA device on fewer cores
 * than the online CPUs (the kernel's work stays on the cores' CPUs). */
void soft_nic_hint(struct ferry_engine *e, const char *sysfs);
/* wakefloor.c: n times, after gap_ms, how long a thread asleep in poll(2)
 * on an eventfd, pinned to sleeper_cpu (-1: any), takes to run once a
 * thread on waker_cpus (NULL: any) writes it; into out.  0, -errno,
 * -ETIMEDOUT (a sleeper that did not run within a second). */
int wake_floor_measure(int sleeper_cpu, const cpu_set_t *waker_cpus, unsigned n, unsigned gap_ms,
		       struct bench_samples *out);
/* mode_opens.c: --opens N (its own engines). */
int opens_main(const struct bench_cfg *cfg);
const char *opens_cores(const struct bench_cfg *cfg, bool target);
int opens_engine(const struct bench_cfg *cfg, const char *cores, const char *listen,
		 const char *secret, struct ferry_engine **out);
/* mode_openers.c: min(--opens, 256) engines open one target at once. */
int openers_run(const struct bench_cfg *cfg, const char *secret);

/* verify.c: --verify */
void buffers_fill_once(struct bench *b);
void buffers_prepare(struct bench *b);
void buffers_verify(struct bench *b);

/* counters.c: snapshots of the cores' counters */
void stats_snap(const struct bench *b, struct ferry_core_stats *s);
void stats_settle(const struct bench *b, struct ferry_core_stats *s);
void stats_final(struct bench *b);
int stats_alloc(struct bench *b);
/* CPU time so far of this process's engine core threads ("ferry-core*", of
 * every engine), in ns; how many threads in *threads. */
uint64_t cores_cpu_ns(unsigned *threads);

/* progress.c: the progress line */
void progress_start(struct bench *b);
void ports_join(struct bench *b);

/* report.c: the table, the per-core tables and --json, on stdout */
void print_header(const struct bench *b);
const char *bench_transport(const struct bench *b);
void print_lat_header(const char *first);
void print_lat_row(const char *label, uint64_t size, const struct bench_lat *l,
		   uint64_t failures);
void print_row(const struct bench *b, const struct totals *t);
void print_cores(const struct bench *b, const struct ferry_core_stats *before,
		 const struct ferry_core_stats *after);
void json_str(const char *key, const char *s);
void json_cores(const struct bench *b, const struct ferry_core_stats *before,
		const struct ferry_core_stats *after);
void json_lat(const char *key, const struct bench_lat *l);
void json_run(const struct bench *b);
void print_json(const struct bench *b, const struct totals *t);

/* outputs.c: --csv, --plot and --prom */
void row_add(struct bench *b, const struct totals *t);
void row_add_lat(struct bench *b, const char *mode, const struct bench_lat *l,
		 uint64_t failures);
int csv_put(struct bench *b);
int outputs_open(struct bench *b);
int plot_put(struct bench *b);
int prom_put(struct bench *b);

#endif /* FERRY_BENCH_H */
