/* SPDX-License-Identifier: MIT */
/*
 * cma: the provider's objects, shared by its control path (cma.c), its
 * execution engine (exec.c), its remote-key cache (rkey.c) and its host
 * identity code (host.c).
 *
 * Two kinds of memory live here.  The *published table* (struct cma_table)
 * is read and written by other processes through process_vm_readv/writev:
 * its layout is a wire format (versioned by the "CMA1" magic of the
 * address) and its fields have fixed widths.  Everything else is private to
 * this process; the fields say who owns them: the posting/polling core, or
 * the control path under the context's lock.
 */
#ifndef FERRY_QP_CMA_OBJECTS_H
#define FERRY_QP_CMA_OBJECTS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <urcu/list.h>

#include "qp/cma/cma.h"
#include "qp/nic.h"
#include "qp/soft/soft.h"
#include "ring/base/atomics.h"
#include "ring/base/compiler.h"

/* Keys and QP numbers: generation (16 bits, never 0) << 16 | slot index. */
#define CMA_MR_BITS 16
#define CMA_MR_SLOTS (1u << CMA_MR_BITS) /* one per region a descriptor can carry */
#define CMA_QP_SLOTS (1u << 13)           /* QPs per context, initiators and responders */
#define CMA_IDX(k) ((k) & 0xffffu)

#define CMA_MAX_QP_WR 32768u
#define CMA_MAX_CQE (1u << 20)

/*
 * Work one poll may do (-D overrides them for measurements).  A poll copies
 * for about CMA_POLL_US, the time the core's other transports wait: its
 * byte budget is what the CQ's last polls copied in that time (exec.c),
 * within [CMA_POLL_BYTES_MIN, CMA_POLL_BYTES_MAX].  Bytes per system call
 * are what cost: each call pays ~3 us here (entry, the peer's mm, the
 * pinning set-up; far more in a VM than on bare metal) on top of the copy,
 * so a run of 64 KiB slices goes out as one call, as large as the budget
 * allows.  Measured (ferry_bench, two processes, 1 MiB WRITEs, THP, GB/s
 * per second of the core's CPU): 11.7 at 256 KiB per poll, 12.9 at 1 MiB,
 * 13.6 at 4 MiB; the system call alone 14.4 at 256 KiB per call and 17 at
 * 1 MiB (bench/tools/pvm_bw.c).  With THP a poll of 100 us is ~1.4 MiB,
 * with 4 KiB pages ~1 MiB.
 */
#ifndef CMA_POLL_US
#define CMA_POLL_US 100u
#endif
#ifndef CMA_POLL_BYTES_MIN
#define CMA_POLL_BYTES_MIN (256u << 10)
#endif
/* The cap bounds the slowest poll (first touch of the target's pages in a
 * VM, ~0.1 GB/s: 7.5 ms) inside the invalidation grace (rkey.c); 2 MiB
 * copied ~5 % more per core-second with THP but could outlast it. */
#ifndef CMA_POLL_BYTES_MAX
#define CMA_POLL_BYTES_MAX (768u << 10)
#endif
/* Polls copying less than this teach the budget nothing (the fixed cost
 * of a call would dominate them). */
#define CMA_POLL_LEARN (64u << 10)
#ifndef CMA_POLL_CALLS
#define CMA_POLL_CALLS 16u /* copy system calls per poll */
#endif
#ifndef CMA_IOV
#define CMA_IOV 64u /* WRs per system call (contiguous ones share an iovec) */
#endif

/*
 * Remote keys are cached per QP for CMA_LEASE_MS; a context that
 * invalidates a key some peer cached waits CMA_GRACE_MS before it returns
 * (rkey.c tells why the difference covers a poll).
 */
#define CMA_LEASE_MS 2u
#define CMA_GRACE_MS 10u
#define CMA_RKEY_CACHE 128u /* 2-way: sets of two by key index, power of two */

#define CMA_PROBE_VALUE 0xc3u /* the byte reachable() reads in the peer */

/* ------------------------------------------------------ the published table */

/* One registered region.  key 0: free or invalidated. */
struct cma_mr_slot {
	uint32_t key;    /* gen << 16 | index */
	uint32_t access; /* NIC_ACCESS_REMOTE_* */
	uint64_t base;
	uint64_t len;
	uint32_t shared; /* a peer cached the key: invalidation waits out its lease */
	uint32_t pad;
};

/* One QP: a peer that connected to it presents qpn and secret (from
 * qp_info) on every key fetch; qpn 0: free. */
struct cma_qp_slot {
	uint32_t qpn;
	uint32_t pad;
	uint8_t secret[NIC_QP_SECRET_LEN];
	uint64_t pad2;
};

_Static_assert(sizeof(struct cma_mr_slot) == 32, "the published layout is fixed");
_Static_assert(sizeof(struct cma_qp_slot) == 32, "the published layout is fixed");

struct cma_table {
	struct cma_mr_slot mr[CMA_MR_SLOTS];
	struct cma_qp_slot qp[CMA_QP_SLOTS];
};

/* ------------------------------------------------------------ host identity */

/* Who a context is; what its address carries (host.c encodes it). */
struct cma_id {
	uint32_t pid;
	uint32_t uid;       /* real uid */
	uint64_t ns_ino;    /* /proc/self/ns/pid */
	uint32_t ns_dev;
	uint8_t boot[16];   /* /proc/sys/kernel/random/boot_id */
	uint64_t probe;     /* address of the probe byte */
	uint64_t table;     /* address of the published table */
	uint64_t start;     /* start time, clock ticks since boot (/proc/<pid>/stat) */
};

/* ------------------------------------------------------------ private state */

/* Slots handed out first in, first out: a freed key stays stale as long as possible. */
struct cma_slots {
	uint16_t *fifo;
	uint16_t *gen;
	uint32_t size;
	uint32_t head;
	uint32_t count;
};

/* Counter indices; the polling core is the only writer of a CQ's counters. */
enum {
	CMA_CNT_WRS,
	CMA_CNT_BYTES,
	CMA_CNT_CALLS,
	CMA_CNT_FETCHES,
	CMA_CNT_ERRS,
	CMA_CNT_SQ_OVF,
	CMA_CNT_CQ_OVF,
	CMA_CNT_NR,
};

struct cma_ctx {
	pthread_mutex_t lock;
	struct cma_table *tab;   /* mmap'd; peers read and write it */
	struct cma_id self;
	struct cma_slots mrs;    /* lock */
	struct cma_slots qps;    /* lock */
	struct cds_list_head cqs; /* struct cma_cq.link (lock) */
	uint32_t nmr;            /* lock */
	uint64_t lease_ticks;    /* CMA_LEASE_MS in TSC ticks */
	uint64_t poll_ticks;     /* CMA_POLL_US in TSC ticks */
	uint64_t retired[CMA_CNT_NR]; /* counters of destroyed CQs (lock) */
};

/* A queued WR and its progress. */
struct cma_wqe {
	struct soft_wqe wr;
	uint32_t done; /* bytes already copied (a WR may take several polls) */
};

struct cma_cq {
	/* Owned by the polling core. */
	struct cma_ctx *ctx;
	struct soft_cq wcq;
	struct cds_list_head active; /* QPs with a non-empty send queue */
	uint32_t poll_bytes;     /* a poll's byte budget, learned (exec.c) */
	uint64_t cnt[CMA_CNT_NR];

	/* Control path, under ctx->lock. */
	struct cds_list_head link; /* in ctx->cqs */
	struct cds_list_head qps;  /* struct cma_qp.link */

	/* Written by the core, read by dereg_mr and cma_get_counters. */
	uint64_t poll_seq ferry_cache_aligned; /* odd while executing (soft.h) */
	uint64_t pub[CMA_CNT_NR];
};

/* A cached remote key: valid until expiry (TSC) unless the key differs. */
struct cma_rkey {
	uint32_t key;
	uint32_t access;
	uint64_t base;
	uint64_t len;
	uint64_t expiry;
};

struct cma_qp {
	/* Owned by the posting/polling core. */
	struct cds_list_head act; /* in cq->active while the send queue is not empty */
	struct cma_wqe *sq;
	uint32_t sq_size;
	uint32_t sq_head;
	uint32_t sq_tail;
	uint32_t sq_count;
	bool error;
	struct cma_cq *cq;
	struct cma_ctx *ctx;
	uint32_t qp_num;
	struct cma_rkey rkeys[CMA_RKEY_CACHE];

	/* The peer: written once by qp_connect before it publishes connected. */
	uint32_t peer_pid;
	uint32_t peer_qpn;
	uint64_t peer_table;
	uint8_t peer_secret[NIC_QP_SECRET_LEN];
	uint32_t connected;

	struct cds_list_head link; /* in cq->qps (ctx->lock) */
};

/* The poll path (exec.c): members of nic_cma_provider (see qp/nic.h). */
int cma_post(struct nic_qp *nqp, struct nic_wr *wr, struct nic_wr **bad);
int cma_poll(struct nic_cq *ncq, int n, struct nic_wc *wc);
int cma_qp_set_error(struct nic_qp *nqp);
uint32_t cma_qp_num(const struct nic_qp *nqp);

/* Is rkey cached on qp, its lease running at now (no system call needed)? */
static inline bool cma_rkey_cached(const struct cma_qp *qp, uint32_t rkey, uint64_t now)
{
	const struct cma_rkey *set = &qp->rkeys[(CMA_IDX(rkey) * 2) & (CMA_RKEY_CACHE - 1)];

	return rkey && ((set[0].key == rkey && now < set[0].expiry) ||
			(set[1].key == rkey && now < set[1].expiry));
}
#define CMA_KEY_CALLS_MAX 3u /* a key's first use: fetch, mark, read again */

/* Remote keys (rkey.c): the status a WR on qp with rkey gets, the cache
 * entry filled on success.  now: the poll's TSC. */
enum nic_wc_status cma_rkey_get(struct cma_cq *cq, struct cma_qp *qp, uint32_t rkey, uint64_t now,
				const struct cma_rkey **out);
/* The status for a failed system call on the peer pid (errno err). */
enum nic_wc_status cma_errno_status(int err);

/* Host identity and reachability (host.c). */
int cma_id_self(struct cma_id *out, uint64_t table);
void cma_addr_encode(const struct cma_id *id, struct nic_addr *out);
int cma_addr_decode(const struct nic_addr *a, struct cma_id *out);
int cma_same_host(const struct cma_id *self, const struct cma_id *peer, char *why, size_t len);
int cma_reachable(const struct nic *nic, const struct nic_addr *peer, char *why, size_t len);
/* Why process_vm_readv of peer failed with errno err, into why. */
void cma_explain(int err, const struct cma_id *peer, char *why, size_t len);
void cma_allow_any(void);

static inline struct cma_ctx *cma_ctx_of(struct nic *n)
{
	return (struct cma_ctx *)(void *)n;
}

static inline const struct cma_ctx *cma_cctx_of(const struct nic *n)
{
	return (const struct cma_ctx *)(const void *)n;
}

static inline struct cma_cq *cma_cq_of(struct nic_cq *c)
{
	return (struct cma_cq *)(void *)c;
}

static inline struct cma_qp *cma_qp_of(struct nic_qp *q)
{
	return (struct cma_qp *)(void *)q;
}

#endif /* FERRY_QP_CMA_OBJECTS_H */
