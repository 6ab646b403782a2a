/* SPDX-License-Identifier: MIT */
/*
 * The worker core: one pinned thread that owns one NIC context, its CQ and
 * its QPs, and runs to completion:
 *
 *   commands -> drain port rings -> cut slices -> post -> poll -> sweeps
 *   -> RCU quiescent state -> (idle back-off)
 *
 * Ownership is what keeps the data plane lock-free: everything under
 * "core-owned" is touched only by the core's thread; what others read or
 * write is on its own cache line and accessed with ring/base/atomics.h.
 */
#ifndef FERRY_RUNTIME_CORE_H
#define FERRY_RUNTIME_CORE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "ep/rail.h"
#include "ep/table.h"
#include "qp/post/post.h"
#include "ring/base/compiler.h"
#include "ring/base/counters.h"
#include "ring/base/log.h"
#include "ring/ring.h"
#include "runtime/metrics/histo.h"
#include "runtime/metrics/perf.h"
#include "runtime/segment/segment.h"
#include "slice/cut.h"

struct ferry_engine;

/* Transports one core can hold: a device (an RDMA NIC, or loop), tcp, cma. */
#define CORE_MAX_TX 3

#define CMD_RING 64
#define REPAIR_RING 256
#define XFER_RING 512
#define PARK_MAX 64

/* The core's own counters (struct qp_counters has the posting ones):
 * single writer, read anywhere (ring/base/counters.h). */
struct core_counters {
	uint64_t bytes;            /* moved successfully */
	uint64_t pool_empty;       /* the slice pool ran dry */
	uint64_t slices_in_flight; /* gauge, refreshed every pass */
	uint64_t retries;
	uint64_t qp_resets;
	uint64_t handovers;
	uint64_t rail_pauses;
	uint64_t reqs_done;        /* request parts finished */
	uint64_t sleeps;
	uint64_t wakeups;          /* futex wakes of sleeping application threads */
	uint64_t busy_ticks;
	uint64_t idle_ticks;
	uint64_t loops;
	uint64_t caller_passes;    /* passes run by application threads */
	uint64_t qp_abandons;      /* broken QPs given up: their WRs never came back */
};

/* Commands from the control path, through the core's command ring. */
enum core_cmd_type { CMD_EP_ADD = 1, CMD_EP_REMOVE, CMD_QP_REPLACE, CMD_EP_DOWN, CMD_QP_FATAL };

/* CMD_EP_DOWN's flag (ep->down): reachable again; unreachable (what waits
 * and what comes fails fast, -EHOSTDOWN); the peer's process is gone (also
 * flush what the QPs hold: it would never complete; the QPs are repaired,
 * should it answer again); or it restarted (flushed too, and never
 * repaired: the segment is stale for good). */
enum ep_down { EP_UP = 0, EP_DOWN = 1, EP_PEER_GONE = 2, EP_STALE = 3 };

/* CMD_EP_REMOVE's flag: tear down whatever it holds (a close); or only an
 * idle endpoint (an eviction: -EADDRINUSE, and nothing done, when work
 * reached it after the control path found its segment unused). */
enum ep_remove { EP_REMOVE = 0, EP_EVICT = 1 };

struct core_cmd {
	int type;
	uint32_t slot;                 /* CMD_QP_FATAL: the QP's number */
	struct ferry_ep *ep;
	struct qpx *qp;                /* CMD_QP_REPLACE: the new QP, for ep->qps[index] */
	uint32_t index;                /* CMD_QP_FATAL: the context */
	int rc;                        /* in: CMD_EP_DOWN's, CMD_EP_REMOVE's flag; out: the result */
	int done;                      /* set by the core (store_release) */
};

/* A broken QP for the repair thread, as the core names it on its repair
 * ring: an integer, not a pointer, so a request for an endpoint that has
 * gone since is simply dropped. */
struct repair_job {
	uint32_t slot, qp, core, gen;
	uint32_t backoff_ms;
	uint64_t due_ms;
};

/* A part waiting for its segment's endpoint to be reconnected (a cache miss). */
struct parked_part {
	struct cut_part pt;
	uint32_t round;                /* the segment's connect_round when parked */
	uint64_t since;                /* clock ticks */
};

struct ferry_core {
	/* One posting context per transport (NIC, CQ and its quota, QP table,
	 * posting counters); an endpoint lives on one of them (ep->tx). */
	struct qctx tx[CORE_MAX_TX];
	unsigned ntx;
	struct core_counters ctr ferry_cache_aligned;
	struct histo lat ferry_cache_aligned; /* slice latency, clock ticks */
	struct perf_ctrs perf;         /* opened by the core's thread, read by anyone */
	uint64_t hw_cache[PERF_CTR_N]; /* largest hardware counter read + 1, 0 = none (stats.c) */
	uint64_t hw_cache_ns;          /* when (load_acquire/store_release) */
	/* core-owned */
	struct slice_pool pool ferry_cache_aligned;
	struct ferry_ep *active;       /* eps with pending slices */
	struct cut_fifo cut;
	struct parked_part parked[PARK_MAX];
	uint32_t n_parked;
	uint32_t idle_loops;
	uint64_t last_work;            /* ticks: the last pass that did something */
	uint64_t linger_ticks;         /* opts.idle_linger_us: poll this long before sleeping */
	uint64_t now;                  /* ticks: the clock of this loop pass */
	uint32_t cancel_seen;          /* the engine's cancel_epoch last acted on */
	uint64_t next_sweep;           /* ticks: next timeout/repair/pause sweep */
	uint64_t sweep_ticks;
	uint64_t reask_ticks;
	uint64_t abandon_ticks;        /* a broken QP's WRs out this long: given up */
	uint64_t slices_out;
	struct ferry_rq *acct_rq;      /* bytes of its slices done, not yet accounted: */
	uint64_t acct_len;             /* core_on_slices_ok, core_acct_flush */
	struct rq_ends ends;           /* requests ended, not yet released (core_acct_flush) */
	uint64_t timeout_ticks;
	uint32_t slice_size;
	uint32_t retries;
	struct rail_cfg rail;
	unsigned index;
	/* shared */
	struct ep_table eps;           /* by cache index: RCU-published by the control path */
	const struct seg_table *segs;  /* the engine's segment slots (core_ep) */
	size_t seg_ep_off;             /* offsetof(struct ferry_seg, eps[index]) (core_rq_ep) */
	struct ferry_ring cmds;        /* control path -> core */
	struct ferry_ring repairs;     /* core -> repair thread: QPs to replace */
	struct ferry_ring *xfer_in;    /* [src]: slices handed over by core src (SPSC) */
	struct slice_list xfer_wait;   /* foreign slices waiting for a slice of ours */
	struct slice_list xfer_back;   /* foreign slices to return (their ring was full) */
	uint32_t slices_lent;          /* of our pool, handed over and not back yet */
	uint32_t xfer_rr;
	uint64_t nic_events;           /* device events (the repair thread: fetch_add) */
	/* drive.c: who runs the loop passes -- the core's thread or an
	 * application thread (FERRY_IDLE_CALLER; under adaptive, a waiter while
	 * the thread sleeps with nothing in flight) -- and when an application
	 * thread last did; what the passes touch is handed over with driver. */
	uint32_t driver ferry_cache_aligned; /* DRIVER_*: cas_acquire/xchg_release */
	uint64_t driven_at;            /* ticks: the last application pass (relaxed) */
	bool caller_mode;              /* opts.idle == FERRY_IDLE_CALLER (constant) */
	bool waiters_drive;            /* opts.idle == FERRY_IDLE_ADAPTIVE (constant) */
	bool handed_over;              /* the core's thread: a caller asked, nap */
	uint64_t caller_fallback_ticks; /* CALLER_FALLBACK_MS (constant) */
	uint32_t sleeping ferry_cache_aligned; /* fetch_or_sc/store_sc: see core_kick */
	int wake_fd;                   /* eventfd: submitters wake a sleeping core */
	uint32_t stop;                 /* load_acquire/store_release */
	pthread_t thread;
	int started;
	unsigned cpu;
	int numa;
	char nic_name[CORE_MAX_TX * 64]; /* "rxe0", "rxe0,tcp,cma" */
	struct ferry_engine *e;
	/* What its passes log, whoever runs them (log_defer): the repair
	 * thread hands it to the sink, core_stop the last of it. */
	struct log_box logbox;
};

/* What the core shares with other threads sits on lines of its own. */
_Static_assert(offsetof(struct ferry_core, ctr) % FERRY_CACHE_LINE == 0, "counters line");
_Static_assert(offsetof(struct ferry_core, lat) % FERRY_CACHE_LINE == 0, "histogram line");
_Static_assert(offsetof(struct ferry_core, pool) % FERRY_CACHE_LINE == 0, "core-owned line");
_Static_assert(offsetof(struct ferry_core, sleeping) % FERRY_CACHE_LINE == 0, "wake-up line");
_Static_assert(offsetof(struct qctx, cq_quota) == 0, "the CQ quota leads its own line");
_Static_assert(sizeof(struct qctx) % FERRY_CACHE_LINE == 0, "contexts do not share lines");
_Static_assert(CORE_MAX_TX <= 255, "ep->tx is a byte");

/* ---- lifecycle (control path): core.c ---- */
/* A core on cpu with one context per NIC name in nics[0..n) (n <= CORE_MAX_TX). */
int core_create(struct ferry_engine *e, unsigned index, unsigned cpu, const char *const *nics,
		unsigned n, struct ferry_core **out);
/* The context of c whose provider is named prov ("verbs", "tcp", ...), or -1. */
int core_tx_of(const struct ferry_core *c, const char *prov);
int core_start(struct ferry_core *c);
void core_stop_begin(struct ferry_core *c);
void core_stop(struct ferry_core *c);
void core_destroy(struct ferry_core *c);

/* ---- commands: cmd.c ---- */
/* Hand a command to the core and wait until it is done; control path. */
int core_command(struct ferry_core *c, struct core_cmd *cmd);
/* The core's side: run what the control path queued; how many. */
uint32_t core_drain_cmds(struct ferry_core *c);

/* ---- idle: idle.c ---- */
/* Wake the core if it sleeps (after enqueuing work for it).  Any thread. */
void core_kick(struct ferry_core *c);
/* Nothing done this pass: spin, yield or sleep by the idle policy. */
void core_idle(struct ferry_core *c);

/* ---- the loop: core.c ---- */
/* One loop pass at clock t0 by whoever drives c; the work it did. */
uint32_t core_run_pass(struct ferry_core *c, uint64_t t0);
void core_account_time(struct ferry_core *c, uint64_t t0, uint64_t t1, uint32_t work);

/* ---- passes run by application threads (FERRY_IDLE_CALLER, and under
 * adaptive a waiter's pass of a core asleep with nothing in flight): drive.c ---- */
/* An application thread takes the core after its thread naps this long. */
#define CALLER_FALLBACK_MS 1
/* The core's thread: true when it holds c for a pass; false after a nap
 * (an application thread drove c within CALLER_FALLBACK_MS, or holds it). */
bool core_thread_drives(struct ferry_core *c);
/* The core's thread, after its pass and idle back-off: let go of c. */
void core_thread_lets_go(struct ferry_core *c);
/* The core's thread, about to sleep in poll(2): let go of c meanwhile, so
 * that an application thread need not wake it to run a pass; false (and c
 * kept) when one asked for c already: do not sleep.  Then core_thread_wakes
 * takes c back.  Only where core_thread_lets_go_asleep says so. */
bool core_thread_sleeps(struct ferry_core *c);
void core_thread_wakes(struct ferry_core *c);
/* Whether the thread lets go of c for this sleep: always under idle
 * caller; under adaptive when nothing is in flight (idle). */
bool core_thread_lets_go_asleep(const struct ferry_core *c, bool idle);
/* The core's thread (waking, starting under adaptive, stopping under
 * caller): wait for an application pass to end, keep c. */
void core_thread_takes_back(struct ferry_core *c);
/* An application thread: run one pass of c if nobody else is; its work. */
uint32_t core_drive(struct ferry_core *c);
/* A waiter under adaptive idle: run one pass of c if its thread sleeps
 * having let go of it (nothing was in flight); its work, 0 otherwise. */
uint32_t core_drive_asleep(struct ferry_core *c);
/* A waiter under adaptive idle, leaving ferry_batch_wait: unregister from
 * liburcu-qsbr if its passes registered it, so that outside a wait the
 * thread is the application's alone. */
void core_waiter_done(void);

/* ---- repair requests: core.c ---- */
/* The repair ring's entry for QP qp of the endpoint at slot (generation gen)
 * of core `core`, and back (never 0: a ring entry is a non-NULL pointer). */
uintptr_t core_repair_encode(uint32_t slot, uint32_t qp, uint32_t core, uint32_t gen);
void core_repair_decode(uintptr_t v, struct repair_job *j);

/* ---- slices and parts: core.c ---- */
/* The slice's last outcome: account its bytes to the request and free it. */
static inline void core_slice_finish(struct ferry_core *c, struct slice *s, int err)
{
	if (likely(!err))
		stat_add(&c->ctr, bytes, s->len);
	if (rq_account(s->rq, s->len, err))
		stat_add(&c->ctr, wakeups, 1);
	slice_put(&c->pool, s);
	c->slices_out--;
}
/* acct.c: what core_on_slices_ok set aside, accounted and released: at the
 * end of every qctx_poll burst (qp_events.burst_done), so before the core
 * may sleep whoever polled (a request ends no later). */
void core_acct_flush(struct ferry_core *c);
/* core_acct_flush when something waits for it: at a pass's end it mostly
 * does not (each poll's burst flushed its own), so the pass saves the call. */
static inline void core_acct_settle(struct ferry_core *c)
{
	if (c->acct_rq || c->ends.n)
		core_acct_flush(c);
}
/* acct.c: core_on_slices_ok's rare turns: the ended list is full; a slice of
 * another multi-slice request than the one being summed. */
void core_ends_full(struct ferry_core *c);
void core_acct_switch(struct ferry_core *c, struct ferry_rq *rq, uint64_t len);
/* core.c: a slice that failed, or succeeded on a rail that had trouble. */
void core_slice_trouble(struct ferry_core *c, struct slice *s, int err);
/*
 * acct.c: qp_events.slices_ok (c is the owner): slices done without
 * error.  A burst of completions retires runs of one request's slices:
 * their bytes are summed and accounted once per run (two atomics per run
 * instead of per slice; a one-slice request has nothing to sum), and the
 * requests that end are released together at the end of the burst
 * (core_acct_flush).
 */
void core_on_slices_ok(void *c, struct slice *const *fifo, uint32_t mask, uint32_t from,
		       uint32_t n);
/* Fail slices [a, b) of rq that this core will not serve. */
void core_part_fail(struct ferry_core *c, struct ferry_rq *rq, uint64_t a, uint64_t b, int err);
/* Fail every slice waiting on ep with err. */
void core_fail_pending(struct ferry_core *c, struct ferry_ep *ep, int err);
/* Put ep on the core's list of endpoints with pending slices. */
static inline void core_ep_activate(struct ferry_core *c, struct ferry_ep *ep)
{
	if (!ep->active) {
		ep->active = 1;
		ep->next_active = c->active;
		c->active = ep;
	}
}
/* The core's endpoint for segment slot (NULL if none); the core's thread.
 * Through the segment (its slot is allocated: a request or command names
 * it), so the core's own table is sized by ep_cache, not by the number of
 * segments. */
static inline struct ferry_ep *core_ep(const struct ferry_core *c, uint32_t slot)
{
	const struct ferry_seg *s = seg_at(c->segs, slot);

	return likely(s) ? rcu_dereference(s->eps[c->index]) /* pairs with: rcu_assign_pointer in seg_ep_set */
			 : NULL;
}
/* rq's endpoint on the core whose seg_ep_off is ep_off (a loop over
 * requests keeps it in a local: the stores into slices would reload it). */
static inline struct ferry_ep *rq_ep_at(const struct ferry_rq *rq, size_t ep_off)
{
	/* &seg->eps[c->index], the offset computed once (core_create) */
	struct ferry_ep *const *p = (struct ferry_ep *const *)((const char *)rq->seg + ep_off);

	return rcu_dereference(*p); /* pairs with: rcu_assign_pointer in seg_ep_set */
}
/* The core's endpoint for request rq's segment (NULL if none): the core's
 * thread.  The request holds its segment (a reference), one load away. */
static inline struct ferry_ep *core_rq_ep(const struct ferry_core *c, const struct ferry_rq *rq)
{
	return rq_ep_at(rq, c->seg_ep_off);
}
/* Every endpoint of the core, by cache index: for (i = 0; i < c->eps.cap; i++). */
static inline struct ferry_ep *core_ep_at(const struct ferry_core *c, uint32_t i)
{
	return ep_table_at(&c->eps, i);
}

/* ---- intake: cut.c ---- */
/* Take the parts the ports queued for c; how many. */
uint32_t core_drain_ports(struct ferry_core *c);
/* Cut queued parts into slices on their endpoints; how many slices. */
uint32_t core_cut(struct ferry_core *c);

/* ---- parked parts (cache misses): park.c ---- */
bool core_park(struct ferry_core *c, const struct cut_part *pt);
void core_sweep_parked(struct ferry_core *c);

/* ---- hand-over of slices between cores: handover.c ---- */
int handover_init(struct ferry_engine *e);
void handover_fini(struct ferry_core *c);
bool slice_handover(struct ferry_core *c, struct slice *s);
/* A slice that waited the slice timeout on a stuck rail: handed over as a
 * retry, or ended (-ETIMEDOUT out of tries or rails, or its request's error). */
void slice_stuck_move(struct ferry_core *c, struct slice *s);
uint32_t core_drain_xfer(struct ferry_core *c);
void core_drain_xfer_at_stop(struct ferry_core *c);
/* The sweep: foreign slices that waited the slice timeout for our pool end. */
void core_sweep_xfer_wait(struct ferry_core *c);

#endif /* FERRY_RUNTIME_CORE_H */
