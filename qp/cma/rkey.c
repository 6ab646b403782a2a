/* SPDX-License-Identifier: MIT */
/*
 * cma: remote keys, checked by the initiator against the table the target
 * published.
 *
 * Why check at all.  process_vm_writev reaches every byte of the peer, so
 * key checks cannot stop a hostile initiator: the kernel's ptrace rules
 * (same uid, Yama, seccomp) and the authenticated control plane are the
 * security boundary, and an initiator that passed them could write
 * anywhere with its own system call.  The checks are there for everything
 * else: a stale or wrong key, a range past its region, a WRITE to a
 * read-only region, a region the target deregistered and freed.  Those are
 * bugs and races, and a NIC refuses them (REM_ACCESS_ERR); so does cma.
 *
 * How the initiator knows the mapping.  The target's regions sit in a
 * table in the target's memory (struct cma_table, objects.h), at an address
 * its NIC address carries.  A WR's rkey names a slot (gen << 16 | index);
 * the initiator reads that slot with process_vm_readv (together with the
 * slot of the responder QP it connected to, whose qpn and 16-byte secret
 * it got in the handshake: a QP the target destroyed, a context it closed,
 * a pid now used by another process, all fail there as RETRY_EXC_ERR) and
 * checks the WR's range and access against it.
 *
 * Cost.  Reading the slot for every WR would double the system calls of a
 * small WRITE.  The slot is cached per QP instead, for a lease of
 * CMA_LEASE_MS: an 8-byte WRITE costs one system call, plus one slot read
 * per key every 2 ms.
 *
 * Invalidation (dereg_mr, close).  A cached key would
 * outlive its region on the target; so the first initiator that caches a
 * key marks the slot shared (one process_vm_writev, once per key), and the
 * target, after clearing a shared slot's key, waits CMA_GRACE_MS before it
 * returns and lets the application free the memory.  Accesses under the
 * old key come from polls that started before the lease ran out, i.e. less
 * than CMA_LEASE_MS after the clear (a fetch after the clear sees key 0),
 * and a poll copies for ~CMA_POLL_US, at most CMA_POLL_BYTES_MAX (768 KiB)
 * in CMA_POLL_CALLS calls (~0.1 ms on 4 KiB pages here): the 8 ms left
 * over are for a polling thread that is descheduled inside its poll.  The
 * cap is what keeps the slowest poll inside them: pages the target never
 * touched are slower (a VM's first touch of guest memory ran at ~0.1 GB/s
 * here: 768 KiB in ~7.5 ms; 2 MiB, tried as the cap, would take ~20 ms,
 * past the grace).  One preempted longer
 * than that, between its key check and its copy, could still write to
 * memory the target has freed: the window this scheme leaves.  Closing it
 * would need the target to wait for its initiators' polls, i.e. to read
 * their memory, a permission the kernel often grants one way only (Yama
 * scope 1).
 *
 * Marking and clearing race as a Dekker pair: the initiator stores shared,
 * then loads the key again; the target stores key 0, then loads shared
 * (load_sc/store_sc in cma.c).  The initiator's store and load are two
 * system calls; between them the kernel does value-returning atomic RMWs on
 * the calling CPU (mmget in mm_access, page pinning), which the kernel's
 * memory model orders fully, so one of the two sides sees the other.
 */
#include "qp/cma/objects.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <sys/uio.h>

enum nic_wc_status cma_errno_status(int err)
{
	switch (err) {
	case ESRCH:  /* the peer process is gone */
		return NIC_WC_RETRY_EXC_ERR;
	case EPERM:  /* the kernel's ptrace rules (reachable() says which) */
	case EACCES:
		return NIC_WC_REM_PERM_ERR;
	case EFAULT:
		return NIC_WC_REM_ACCESS_ERR;
	default:     /* ENOMEM, EINVAL: not the peer's doing */
		return NIC_WC_GENERAL_ERR;
	}
}

static uint64_t mr_slot_addr(const struct cma_qp *qp, uint32_t rkey)
{
	return qp->peer_table + offsetof(struct cma_table, mr) +
	       (uint64_t)CMA_IDX(rkey) * sizeof(struct cma_mr_slot);
}

/* The peer's table is where its address said, or the peer is gone. */
static enum nic_wc_status table_errno_status(int err)
{
	return err == EFAULT ? NIC_WC_RETRY_EXC_ERR : cma_errno_status(err);
}

/* Read our responder's slot and the key's slot in one system call. */
static enum nic_wc_status rkey_fetch(struct cma_cq *cq, const struct cma_qp *qp, uint32_t rkey,
				     struct cma_mr_slot *ms)
{
	struct cma_qp_slot qs;
	struct iovec l[2] = { { &qs, sizeof(qs) }, { ms, sizeof(*ms) } };
	struct iovec r[2] = {
		{ (void *)(uintptr_t)(qp->peer_table + offsetof(struct cma_table, qp) +
				      (uint64_t)CMA_IDX(qp->peer_qpn) * sizeof(qs)), sizeof(qs) },
		{ (void *)(uintptr_t)mr_slot_addr(qp, rkey), sizeof(*ms) },
	};
	ssize_t n;

	cq->cnt[CMA_CNT_FETCHES]++;
	n = process_vm_readv((pid_t)qp->peer_pid, l, 2, r, 2, 0);
	if (unlikely(n != (ssize_t)(sizeof(qs) + sizeof(*ms))))
		return table_errno_status(n < 0 ? errno : EFAULT);
	/* Our responder QP was destroyed (disconnect, lease, close): like a
	 * peer that stopped answering. */
	if (unlikely(qs.qpn != qp->peer_qpn ||
		     memcmp(qs.secret, qp->peer_secret, sizeof(qs.secret)) != 0))
		return NIC_WC_RETRY_EXC_ERR;
	return NIC_WC_SUCCESS;
}

/* The slot holds rkey as the target's reg_mr writes one: access within
 * NIC_ACCESS_ALL, a region that starts above 0, is not empty and does
 * not wrap.  A slot that says otherwise was not written by a ferry that
 * registered it: the WR's range checks (exec.c) assume a region that does
 * not wrap, so such a key is refused rather than believed. */
static bool mr_slot_ok(const struct cma_mr_slot *ms, uint32_t rkey)
{
	return ms->key == rkey && !(ms->access & ~NIC_ACCESS_ALL) && ms->base && ms->len &&
	       ms->len <= UINT64_MAX - ms->base;
}

/* Mark the key's slot shared, then read the slot again (the Dekker pair). */
static enum nic_wc_status rkey_mark(struct cma_cq *cq, const struct cma_qp *qp, uint32_t rkey,
				    struct cma_mr_slot *ms)
{
	uint32_t one = 1;
	uint64_t at = mr_slot_addr(qp, rkey);
	struct iovec l = { &one, sizeof(one) };
	struct iovec r = { (void *)(uintptr_t)(at + offsetof(struct cma_mr_slot, shared)),
			   sizeof(one) };
	struct iovec l2 = { ms, sizeof(*ms) }, r2 = { (void *)(uintptr_t)at, sizeof(*ms) };

	cq->cnt[CMA_CNT_FETCHES] += 2;
	if (process_vm_writev((pid_t)qp->peer_pid, &l, 1, &r, 1, 0) != sizeof(one))
		return table_errno_status(errno);
	if (process_vm_readv((pid_t)qp->peer_pid, &l2, 1, &r2, 1, 0) != sizeof(*ms))
		return table_errno_status(errno);
	return mr_slot_ok(ms, rkey) ? NIC_WC_SUCCESS : NIC_WC_REM_ACCESS_ERR;
}

enum nic_wc_status cma_rkey_get(struct cma_cq *cq, struct cma_qp *qp, uint32_t rkey, uint64_t now,
				const struct cma_rkey **out)
{
	/* Two ways per set: two live keys whose indexes share the low bits
	 * (slots 1 and 65) no longer evict each other at every WR, a system
	 * call or three each time. */
	struct cma_rkey *set = &qp->rkeys[(CMA_IDX(rkey) * 2) & (CMA_RKEY_CACHE - 1)];
	struct cma_rkey *e = set;
	struct cma_mr_slot ms;
	enum nic_wc_status st;

	/* 0 names no key (a way a failed refill left with its old expiry) */
	if (unlikely(!rkey))
		return NIC_WC_REM_ACCESS_ERR;
	if (likely(set[0].key == rkey && now < set[0].expiry)) {
		*out = &set[0];
		return NIC_WC_SUCCESS;
	}
	if (set[1].key == rkey && now < set[1].expiry) {
		*out = &set[1];
		return NIC_WC_SUCCESS;
	}
	/* The way to refill: this key's own (expired), else the one that
	 * expires first. */
	if (set[1].key == rkey || (set[0].key != rkey && set[1].expiry < set[0].expiry))
		e = &set[1];
	e->key = 0;
	st = rkey_fetch(cq, qp, rkey, &ms);
	if (unlikely(st != NIC_WC_SUCCESS))
		return st;
	if (unlikely(!mr_slot_ok(&ms, rkey)))
		return NIC_WC_REM_ACCESS_ERR;
	if (!ms.shared) {
		st = rkey_mark(cq, qp, rkey, &ms);
		if (unlikely(st != NIC_WC_SUCCESS))
			return st;
	}
	e->key = rkey;
	e->access = ms.access;
	e->base = ms.base;
	e->len = ms.len;
	e->expiry = now + qp->ctx->lease_ticks; /* now: the poll's start, before the fetch */
	*out = e;
	return NIC_WC_SUCCESS;
}
