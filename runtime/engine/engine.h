/* SPDX-License-Identifier: MIT */
/*
 * The engine: the root object every part of the runtime hangs from -- its
 * options, cores, registered memory, segments, ports, control server and
 * repair thread.  Control-path calls serialise on ctl_lock, which is never
 * held across a round trip to a peer (runtime/segment/open.c); the cores read only what is published to them (ports, endpoint tables)
 * and the immutable options.
 */
#ifndef FERRY_RUNTIME_ENGINE_H
#define FERRY_RUNTIME_ENGINE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/queue.h>

#include "ep/teardown.h"
#include "qp/nic.h"
#include "runtime/core/core.h"
#include "runtime/ctl/ctl.h"
#include "runtime/ctl/lease.h"
#include "runtime/ctl/meta/named.h"
#include "runtime/ctl/passive.h"
#include "runtime/ctl/repair.h"
#include "runtime/engine/knobs.h"
#include "runtime/engine/opts.h"
#include "runtime/ferry.h"
#include "runtime/notify/notify.h"

_Static_assert(FERRY_ACCESS_REMOTE_READ == NIC_ACCESS_REMOTE_READ &&
	       FERRY_ACCESS_REMOTE_WRITE == NIC_ACCESS_REMOTE_WRITE, "one set of access bits");
#include "runtime/segment/segment.h"
#include "runtime/submit/submit.h"

_Static_assert(FERRY_MAX_CORES <= 64, "rails are bits of a uint64_t");

_Static_assert(FERRY_MAX_CORES <= (1 << RQ_PART_BITS), "a part index fits the pointer tag");

/*
 * A locally registered region: one MR per core's NIC context.  The struct
 * is type-stable: unregistered ones go to a pool for the next registration
 * and are freed only with the engine, because a port's cache (submit.c)
 * may still look at one it saw before (it finds out with regions_gen).
 */
struct mem_region {
	uint64_t addr;                 /* READ_ONCE/WRITE_ONCE: see the port cache */
	uint64_t len;
	uint64_t refs;                 /* requests using it: fetch_add/fetch_sub, see mem.c */
	uint32_t access;               /* NIC_ACCESS_*: what peers may do */
	bool local_ro;                 /* not writable here: READs into it are refused -EFAULT */
	bool cpu_opaque;               /* not all readable in the maps (a device's memory, on an
	                                * engine with verbs): only a NIC may reach it, requests
	                                * over loop, tcp or cma are refused -EFAULT */
	struct mem_region *next_free;  /* in the pool (ctl_lock) */
	struct nic_mr mr[FERRY_MAX_CORES][CORE_MAX_TX]; /* per core, per context */
};

/* Whether provider prov moves bytes with the CPU (every one but verbs):
 * a device's memory is out of its reach. */
static inline bool provider_copies(const char *prov)
{
	return strcmp(prov, "verbs") != 0;
}

/* A request of op (enum nic_op) over a segment whose transport copies
 * with the CPU (cpu_copy) may not use local region r: a READ into memory
 * this process may not write, or a device's memory a CPU copy would fault
 * in.  Its requests are refused -EFAULT (ferry_submit, ferry_prep_create). */
static inline bool region_refuses(const struct mem_region *r, unsigned op, bool cpu_copy)
{
	return (op == NIC_OP_READ && r->local_ro) || (cpu_copy && r->cpu_opaque);
}

/* Where core `core`'s lkey for context tx lies in a struct mem_region (an
 * endpoint keeps it: one load for the cutting core instead of the index
 * arithmetic). */
static inline uint32_t region_lkey_off(unsigned core, unsigned tx)
{
	return (uint32_t)(offsetof(struct mem_region, mr) +
			  (core * CORE_MAX_TX + tx) * sizeof(struct nic_mr) +
			  offsetof(struct nic_mr, lkey));
}

/* Region r's lkey for ep's core and context. */
static inline uint32_t region_lkey(const struct mem_region *r, const struct ferry_ep *ep)
{
	return *(const uint32_t *)((const char *)r + ep->lkey_off);
}

struct ferry_engine {
	/* A forked child's copy (fork.c): set in the child only, before
	 * fork() returns there; every public call refuses it. */
	bool forked;
	struct ferry_opts opts;        /* checked, complete (whatever size the caller had) */
	struct ferry_knobs knobs;
	char *nics_buf;                /* the caller's nics, copied: no bound (blanks
	                                * around names are free, nics.c) */
	char listen_buf[64];
	char name_buf[FERRY_NAME_MAX + 1];
	char metadata_buf[META_URL_MAX];
	unsigned ncores;
	unsigned ntx;                  /* contexts (transports) per core, the same on all */
	struct ferry_core *cores[FERRY_MAX_CORES];
	uint64_t incarnation;
	struct ctl ctl;
	struct ctl_client client;      /* our calls to peers: kept connections, the key */
	pthread_mutex_t ctl_lock;      /* control-path calls */
	pthread_cond_t seg_cond;       /* a segment left SEG_OPENING (with ctl_lock) */
	unsigned opening;              /* opens between their steps (ctl_lock) */
	int destroying;                /* engine destroy began: opens stop (ctl_lock) */
	pthread_mutex_t disc_lock;     /* disc_items */
	TAILQ_HEAD(disc_list, disc_item) disc_items; /* peers' QPs to free, oldest first
						      * (segment/disconnect.c) */
	unsigned disc_n;               /* items in disc_items (disc_lock) */
	uint64_t disc_dropped;         /* DISCONNECTs dropped: queue full, or past what destroy
	                                * sends again (relaxed; ferry_engine_stats) */
	uint64_t disc_given_up;        /* DISCONNECTs never delivered whose tries ended
	                                * (relaxed; ferry_engine_stats) */
	pthread_rwlock_t regions_lock; /* submitters read, register/unregister write */
	struct mem_region **regions;   /* sorted by addr */
	unsigned n_regions, cap_regions;
	uint64_t regions_gen;          /* bumped by every unregister (store_sc): ports' caches */
	struct mem_region *region_pool; /* unregistered, for reuse (ctl_lock) */
	uint64_t mem_dereg_waits;       /* waits for peers to drop cached keys (mem.c; tests) */
	struct seg_table segs;         /* slots, allocated in chunks (segment.h) */
	struct ferry_port *ports[FERRY_MAX_PORTS]; /* RCU-published */
	unsigned n_ports_hw;           /* high-water mark of ports[] (store_release) */
	uint64_t next_token;           /* endpoint ids for handshakes (ctl_lock) */
	uint32_t disc_timeout_ms;      /* DISCONNECTs' bound; 0 = SEG_CTL_TIMEOUT_MS (tests lower it) */
	uint32_t hs_timeout_ms;        /* handshakes' bound; 0 = SEG_CTL_TIMEOUT_MS (tests lower it) */
	pthread_mutex_t passive_lock;  /* the control thread vs engine destroy */
	struct passive_ep *passive;    /* peer QPs we serve as a target */
	struct passive_gone passive_gone; /* names freed before made (passive_lock) */
	struct repair repair;
	struct lease lease;            /* keepalives, expiries, the name's renewal (lease.h) */
	struct named named;            /* our name in the metadata store */
	struct ep_reaper reaper;       /* unpublished endpoints, freed after a grace period */
	struct notify notify;          /* notifications sent and received (runtime/notify) */
	uint32_t cancel_epoch;         /* bumped by ferry_batch_cancel (release; the cores acquire) */
	int tsan_gp;                   /* TSan's model of the RCU grace period */
	struct ferry_engine *fork_next; /* in fork.c's list of live engines (its lock) */
};

/*
 * The engine was inherited through fork(): its threads stayed in the
 * parent, which still owns its connections and QPs.  The calls answer
 * -EOWNERDEAD (the state's owner is not this process) and touch nothing.
 * One byte compare per call.
 */
static inline bool engine_forked(const struct ferry_engine *e)
{
	return unlikely(e->forked);
}

/* nics.c: the NIC names of each core's contexts from the nics option. */
int engine_pick_nics(const char *list, const unsigned *cpus, unsigned ncores,
		     char names[][CORE_MAX_TX][64], unsigned *ntx);

/* mem.c: the local region containing [addr, addr+len); regions_lock held. */
struct mem_region *ferry_region_find(struct ferry_engine *e, uint64_t addr, uint64_t len);
/* mem.c: free every region (engine destroy). */
void mem_release_all(struct ferry_engine *e);
/* mem.c: the control thread's descriptor of our NICs and regions. */
int engine_describe(void *arg, struct seg_desc *d);

/* fork.c: install the fork handlers (once per process) and list e among
 * the live engines, before it opens an fd; 0, -ENOMEM, or -EOWNERDEAD in a
 * child forked while engines ran (an engine of its own would hang). */
int engine_fork_add(struct ferry_engine *e);
/* fork.c: e leaves the list (engine destroy, in the process that made it). */
void engine_fork_del(struct ferry_engine *e);

/* engine.c: the forked child, alone: the log locks a parent thread may
 * have held at the fork start afresh, so that ferry_log_set (no engine's
 * call) works there.  Async-signal-safe. */
void engine_log_fork_child(void);

/* Test hook: the NIC context of core i. */
struct nic *ferry_engine_nic(struct ferry_engine *e, unsigned core);

#endif /* FERRY_RUNTIME_ENGINE_H */
