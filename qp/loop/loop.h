/* SPDX-License-Identifier: MIT */
/*
 * loop: the software NIC.  Same interface as the verbs provider (qp/nic.h).
 * Each opened context is one "device" with a process-unique id; memory
 * registered on it gets rkeys that any loop QP in the process can target
 * (two engines in one process reach each other).  Work is asynchronous: post
 * only queues WRs on the QP's send queue; the copy happens when the CQ the QP
 * reports to is polled.  Send queues and CQs have exactly the configured
 * capacities; overflowing either is a bug in the caller and is detected,
 * counted and reported (post: -ENOMEM; CQ: the CQE is kept in an overflow
 * count and poll returns -EOVERFLOW once).
 *
 * Fault injection is deterministic (a seeded PRNG per context).
 */
#ifndef FERRY_QP_LOOP_H
#define FERRY_QP_LOOP_H

#include "qp/nic.h"

struct loop_faults {
	uint32_t err_ppm;      /* WRs completing with NIC_WC_RETRY_EXC_ERR, per million */
	uint32_t lost_ppm;     /* signalled WRs whose completion never comes, per million:
				* the QP stalls there (a peer that stopped acking)
				* until it is moved to the error state, then that WR
				* and all behind it flush */
	uint32_t qp_fatal_ppm; /* WRs that move their QP to the error state, per million */
	uint32_t no_new_qps;   /* qp_create fails (-EIO): a device that died */
	uint32_t silent_peer;  /* a WR the peer refuses (its region is gone: it died)
				* stalls its QP, no completion, as a dead RDMA peer
				* answers nothing, instead of REM_ACCESS_ERR */
	uint32_t dead;         /* the device died under its WRs: polls return
				* nothing, not even the flushes of a QP set to
				* error (a NIC unplugged, a fatal device error) */
	uint64_t seed;         /* PRNG seed (0 = fixed default) */
};

/* Set the fault plan of a loop context (control path; takes effect on next poll). */
void loop_set_faults(struct nic *nic, const struct loop_faults *f);

/* Skip the memcpy (bounds are still checked): measures the data plane's own cost. */
void loop_set_nocopy(struct nic *nic, int nocopy);

struct loop_counters {
	uint64_t wrs_executed;
	uint64_t bytes_copied;
	uint64_t errs_injected;
	uint64_t lost_injected;
	uint64_t fatal_injected;
	uint64_t sq_overflows; /* post on a full send queue: caller bug */
	uint64_t cq_overflows; /* CQE with no room in the CQ: caller bug */
};

void loop_get_counters(const struct nic *nic, struct loop_counters *out);

/* Queue a device event (as the hardware would send one): its event_fd
 * becomes readable.  -ENOSPC when 16 wait already.  Tests. */
int loop_inject_event(struct nic *nic, const struct nic_event *ev);

/* Tests: the context takes a new process-unique id, as a port whose
 * address changed (an IB LID, a RoCE GID) while its memory stayed: its
 * address says the new id, its MRs and QPs follow it, and a QP that peers
 * connected to the old id finds none of its keys there
 * (NIC_WC_REM_ACCESS_ERR).  Only while nothing is in flight to it. */
void loop_readdress(struct nic *nic);
/* Tests: how many of nic's QPs are connected to the context of id (its
 * address's bytes 4..7, little endian).  Any thread. */
unsigned loop_qps_connected_to(struct nic *nic, uint32_t id);

#endif /* FERRY_QP_LOOP_H */
