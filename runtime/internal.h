/* SPDX-License-Identifier: MIT */
/*
 * Engine internals shared by the runtime sources and the tests.  Ownership is the
 * rule that keeps the data plane lock-free: everything under "core-owned" is
 * touched only by that core's thread; shared fields are atomics, each group
 * on its own cache line.
 */
#ifndef FERRY_RUNTIME_INTERNAL_H
#define FERRY_RUNTIME_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "ep/ep.h"
#include "ep/sieve.h"
#include "qp/nic.h"
#include "qp/post/post.h"
#include "ring/ring.h"
#include "slice/slice.h"
#include "ring/base/compiler.h"
#include "runtime/ctl/ctl.h"
#include "runtime/ferry.h"
#include "runtime/metrics/histo.h"
#include "runtime/metrics/perf.h"
#include "runtime/engine/opts.h"
#include "runtime/ctl/wire.h"

#define FERRY_MAX_SEGS FERRY_MAX_SEGMENTS
_Static_assert(FERRY_MAX_SEGS <= SIEVE_MAX_KEYS, "a segment slot is a SIEVE key");
#define FERRY_MAX_PORTS 64
#define CUT_FIFO 256      /* request parts a core is cutting (power of 2) */
#define CMD_RING 64
#define REPAIR_RING 256
#define PART_BITS 6       /* request parts ride in the low bits of the rq pointer */
_Static_assert(FERRY_MAX_CORES <= (1 << PART_BITS), "a part index fits the pointer tag");

/* A locally registered region: one MR per core's NIC context. */
struct mem_region {
	uint64_t addr;
	uint64_t len;
	uint64_t refs;                 /* requests using it (atomic) */
	struct nic_mr mr[FERRY_MAX_CORES];
};

/* One submitted request, a slot of a batch. */
struct ferry_rq {
	struct ferry_req req;
	struct ferry_batch *batch;
	struct mem_region *lreg;
	const struct seg_region *rreg;
	struct ferry_seg *seg;
	uint64_t nslices;
	uint32_t nparts;
	uint32_t seg_slot;
	uint32_t seg_gen;
	uint64_t rails;                /* cores the parts go to (bit i: core i) */
	/* Folded by every core that serves a part: own cache line. */
	uint64_t remaining ferry_cache_aligned; /* bytes not yet accounted */
	uint64_t ok_bytes;
	int32_t error;                 /* first error, negative errno */
	int32_t state;                 /* enum ferry_state, release-stored last */
} ferry_cache_aligned;

struct ferry_batch {
	struct ferry_port *port;
	struct ferry_rq *rqs;
	uint32_t capacity;
	uint32_t n;                    /* submitted since creation/reset */
	/*
	 * Requests not yet final, and BATCH_WAITER when the owner sleeps in
	 * ferry_batch_wait: one futex word, so that the core's decrement is
	 * its last access to the batch (the owner may free it right after).
	 */
	uint32_t pending ferry_cache_aligned;
	uint32_t failed;               /* atomic: requests that ended badly */
};

#define BATCH_WAITER 0x80000000u
#define BATCH_COUNT(v) ((v) & ~BATCH_WAITER)

struct ferry_port {
	struct ferry_engine *e;
	unsigned slot;
	uint32_t rr;                   /* next core for a one-part request */
	uint32_t batches;              /* live batches */
	struct ferry_ring *rings;      /* one per core, port -> core */
};

enum seg_state { SEG_FREE = 0, SEG_OPENING, SEG_OPEN, SEG_CLOSING };

struct ferry_seg {
	uint32_t gen;
	uint32_t state;                /* atomic enum seg_state */
	uint64_t inflight;             /* atomic: requests using the segment */
	uint32_t stale;                /* atomic: the peer restarted; refuse with -ESTALE */
	char address[64];
	struct seg_desc *desc;         /* current descriptor */
	struct seg_desc *old_descs[8]; /* replaced by refresh, kept until close */
	unsigned n_old;
	struct ferry_ep *eps[FERRY_MAX_CORES];
	uint64_t qp_tokens[FERRY_MAX_CORES][EP_MAX_QPS]; /* the peer's half of each QP */
	uint8_t rail_down[FERRY_MAX_CORES]; /* atomic: the core's rail cannot reach the peer */
	uint8_t rail_paused[FERRY_MAX_CORES]; /* atomic, written by the core: rail health */
	uint8_t rail_gone[FERRY_MAX_CORES]; /* atomic (seq_cst): no endpoint (evicted, no room) */
	uint32_t want_eps;             /* atomic: a request waits for evicted endpoints */
	uint32_t connect_round;        /* atomic: reconnects the repair thread finished */
	int32_t connect_err;           /* atomic: the last one's result (0 or -errno) */
};

enum core_cmd_type { CMD_EP_ADD = 1, CMD_EP_REMOVE, CMD_QP_REPLACE, CMD_EP_DOWN };

struct core_cmd {
	int type;
	uint32_t slot;
	struct ferry_ep *ep;
	struct qpx *qp;                /* CMD_QP_REPLACE: the new QP, for ep->qps[index] */
	uint32_t index;
	int rc;                        /* in: CMD_EP_DOWN's flag; out: the result */
	int done;                      /* atomic: set by the core */
};

/* A QP to replace, decoded from a core's repair ring. */
struct repair_job {
	uint32_t slot, qp, core, gen;
	uint32_t backoff_ms;
	uint64_t due_ms;
};

#define REPAIR_LATER_MAX 256

struct repair {
	pthread_t thread;
	int started;
	int stop;                      /* atomic */
	struct repair_job later[REPAIR_LATER_MAX]; /* failed: try again after a back-off */
	unsigned n_later;
	uint64_t next_keepalive_ms;    /* peers told we are alive */
	uint64_t next_expire_ms;       /* silent initiators' QPs freed */
};

/* A request part being cut: slices [next, end) of rq. */
struct cut_part {
	struct ferry_rq *rq;
	uint64_t next;
	uint64_t end;
};

#define PARK_MAX 64

/* A part waiting for its segment's endpoint to be reconnected (a cache miss). */
struct parked_part {
	struct cut_part pt;
	uint32_t round;                /* the segment's connect_round when parked */
	uint64_t since;                /* TSC */
};

struct ferry_core {
	struct qctx q;                 /* NIC, CQ quota, QP table */
	struct ferry_core_stats stats ferry_cache_aligned;
	struct histo lat ferry_cache_aligned; /* slice latency, TSC ticks */
	struct perf_ctrs perf;         /* opened by the core's thread, read by anyone */
	uint64_t hw_cache[4];          /* last hardware counter read (any reader) */
	uint64_t hw_cache_ns;          /* when (atomic) */
	/* core-owned */
	struct slice_pool pool ferry_cache_aligned;
	struct ferry_ep *active;       /* eps with pending slices */
	struct cut_part cut[CUT_FIFO];
	uint32_t cut_head, cut_tail;
	struct parked_part parked[PARK_MAX];
	uint32_t n_parked;
	uint32_t idle_loops;
	uint64_t next_sweep;           /* TSC: next timeout/repair/pause sweep */
	uint64_t sweep_tsc;
	uint64_t slices_out;
	uint64_t timeout_tsc;
	uint32_t slice_size;
	unsigned index;
	/* shared */
	struct ferry_ep *eps[FERRY_MAX_SEGS]; /* RCU-published by the control path, by segment slot */
	struct sieve ep_cache;         /* control path (ctl_lock): which slots hold an endpoint */
	uint64_t ep_evictions;         /* atomic, control path */
	struct ferry_ring cmds;        /* control path -> core */
	struct ferry_ring repairs;     /* core -> repair thread: QPs to replace */
	struct ferry_ring *xfer_in;    /* [src]: slices handed over by core src (SPSC) */
	struct slice_list xfer_wait;   /* foreign slices waiting for a slice of ours */
	struct slice_list xfer_back;   /* foreign slices to return (their ring was full) */
	uint64_t rail_window_tsc, rail_backoff_min_tsc, rail_backoff_max_tsc;
	uint32_t rail_errs;
	uint32_t xfer_rr;
	uint32_t sleeping ferry_cache_aligned; /* atomic */
	int wake_fd;                   /* eventfd: submitters wake a sleeping core */
	uint32_t stop;                 /* atomic */
	pthread_t thread;
	int started;
	unsigned cpu;
	int numa;
	char nic_name[64];
	struct ferry_engine *e;
};

struct ferry_engine {
	struct ferry_opts opts;
	char nics_buf[256];
	unsigned ncores;
	struct ferry_core *cores[FERRY_MAX_CORES];
	const struct nic_provider *prov[FERRY_MAX_CORES];
	uint64_t incarnation;
	struct ctl ctl;
	pthread_mutex_t ctl_lock;      /* control-path calls */
	pthread_rwlock_t regions_lock; /* submitters read, register/unregister write */
	struct mem_region **regions;   /* sorted by addr */
	unsigned n_regions, cap_regions;
	struct ferry_seg segs[FERRY_MAX_SEGS];
	struct ferry_port *ports[FERRY_MAX_PORTS]; /* RCU-published */
	unsigned n_ports_hw;           /* high-water mark of ports[] (atomic) */
	uint64_t next_token;           /* endpoint ids for handshakes (ctl_lock) */
	pthread_mutex_t passive_lock;  /* the control thread vs engine destroy */
	struct passive_ep *passive;    /* peer QPs we serve as a target */
	struct repair repair;
	struct ferry_ep *retired;      /* unpublished endpoints for call_rcu (runtime/reap.c) */
	uint64_t rcu_pending;          /* endpoints queued for call_rcu, not yet freed (atomic) */
	int tsan_gp;                   /* TSan model of the RCU grace period */
};

/* runtime/clock.c: a cheap monotonic clock for the cores. */
uint64_t ferry_tsc(void);
uint64_t ferry_tsc_hz(void);
uint64_t ferry_tsc_to_ns(uint64_t ticks);
uint64_t ferry_now_ns(void);

/* runtime/core.c */
int core_create(struct ferry_engine *e, unsigned index, unsigned cpu, const char *nic,
		struct ferry_core **out);
int core_start(struct ferry_core *c);
void core_stop(struct ferry_core *c);
void core_destroy(struct ferry_core *c);
/* Hand a command to the core and wait until it is done; control path. */
int core_command(struct ferry_core *c, struct core_cmd *cmd);
/* Wake the core if it sleeps (after enqueuing work for it). */
void core_kick(struct ferry_core *c);

/* runtime/request.c: account len bytes of rq as done (err == 0) or failed;
 * returns 1 when ending the request woke a sleeping waiter (a futex call). */
int rq_account(struct ferry_rq *rq, uint64_t len, int err);
/* Bytes covered by slices [a, b) of rq. */
uint64_t rq_range_bytes(const struct ferry_rq *rq, uint32_t slice_size, uint64_t a, uint64_t b);

/* Futex helpers (runtime/request.c). */
void ferry_futex_wake(uint32_t *word);
int ferry_futex_wait(uint32_t *word, uint32_t val, int64_t timeout_ns);

/* runtime/engine.c: the local region containing [addr, addr+len); regions_lock held. */
struct mem_region *ferry_region_find(struct ferry_engine *e, uint64_t addr, uint64_t len);

/* runtime/segment.c: take a reference on an open segment for a request, or NULL. */
struct ferry_seg *seg_acquire(struct ferry_engine *e, ferry_seg_t h, uint32_t *slot);
void seg_release_ref(struct ferry_seg *s);
/* Mark core i's rail to s down (or up) and tell its core (fail fast); ctl_lock held. */
void seg_rail_set_down(struct ferry_engine *e, struct ferry_seg *s, unsigned i, uint32_t slot,
		       int down);
/* The peer restarted: fail the segment's requests fast (-ESTALE); ctl_lock held. */
void seg_mark_stale(struct ferry_engine *e, struct ferry_seg *s, uint32_t slot);
/* Connect the rails of segment slot (generation gen) that have no endpoint
 * (evicted); takes ctl_lock, does nothing unless the segment is still open
 * in that generation (the repair thread, for parked requests).  Rails
 * added, or -errno. */
int seg_reconnect(struct ferry_engine *e, struct ferry_seg *s, uint32_t slot, uint32_t gen);
/* Engine destroy: tell every peer to free its half of our endpoints (best effort). */
void seg_disconnect_all(struct ferry_engine *e);
/* Connect q (of core i) to a new responder QP on the peer; ctl_lock held. */
int seg_qp_handshake(struct ferry_engine *e, unsigned i, struct ferry_seg *s,
		     uint32_t remote_nic, struct qpx *q, uint64_t *token);
/* Tell the peer to free the responder QP named by token (0: nothing). */
void seg_disconnect_token(struct ferry_engine *e, struct ferry_seg *s, uint64_t token);

/* runtime/core.c, for runtime/handover.c */
void core_slice_finish(struct ferry_core *c, struct slice *s, int err);
void core_ep_activate(struct ferry_core *c, struct ferry_ep *ep);

/* runtime/handover.c: retried slices move to another core's rail. */
#define XFER_RING 512
int handover_init(struct ferry_engine *e);
void handover_fini(struct ferry_core *c);
bool slice_handover(struct ferry_core *c, struct slice *s);
uint32_t core_drain_xfer(struct ferry_core *c);
void core_drain_xfer_at_stop(struct ferry_core *c);
/* The core has no endpoint to the segment (see seg_drop_ep's Dekker pair). */
static inline bool rail_gone(const struct ferry_seg *s, unsigned core)
{
	return __atomic_load_n(&s->rail_gone[core], __ATOMIC_SEQ_CST);
}

/* A rail (core's endpoint to a segment) new work should avoid. */
static inline bool rail_unusable(const struct ferry_seg *s, unsigned core)
{
	return rail_gone(s, core) || __atomic_load_n(&s->rail_down[core], __ATOMIC_RELAXED) ||
	       __atomic_load_n(&s->rail_paused[core], __ATOMIC_RELAXED);
}

/* runtime/reap.c: free unpublished endpoints after a grace period. */
void ep_retire(struct ferry_engine *e, struct ferry_ep *ep);   /* ctl_lock held */
unsigned reap_run(struct ferry_engine *e);                       /* the repair thread */
void reap_wait(struct ferry_engine *e);                          /* engine destroy */

/* The core's endpoint for segment slot (rcu_dereference; NULL if none). */
static inline struct ferry_ep *core_ep(const struct ferry_core *c, uint32_t slot)
{
	return __atomic_load_n(&c->eps[slot], __ATOMIC_ACQUIRE);
}

/* runtime/repair.c */
uintptr_t repair_encode(uint32_t slot, uint32_t qp, uint32_t core, uint32_t gen);
int repair_start(struct ferry_engine *e);
void repair_stop(struct ferry_engine *e);

/* runtime/passive.c: the target side of the endpoint handshake. */
int passive_connect(void *arg, const struct wire_connect_req *req, struct wire_connect_rep *rep);
int passive_disconnect(void *arg, const struct wire_disconnect *d);
void passive_destroy_all(struct ferry_engine *e);
unsigned passive_count(struct ferry_engine *e);
int passive_keepalive(void *arg, uint64_t incarnation);
/* Free responder QPs whose initiator was silent for lease_ns; how many. */
unsigned passive_expire(struct ferry_engine *e, uint64_t lease_ns);
unsigned passive_count_of(struct ferry_engine *e, uint64_t incarnation);

/* Test hook: the NIC context of core i. */
struct nic *ferry_engine_nic(struct ferry_engine *e, unsigned core);

#endif /* FERRY_RUNTIME_INTERNAL_H */
