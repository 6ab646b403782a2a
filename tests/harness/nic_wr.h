/* SPDX-License-Identifier: MIT */
/*
 * Work requests for the provider unit tests (tests/unit/qp): one WR from
 * its fields, one between a test's two registered buffers, and a chain of
 * them as post takes it.
 */
#ifndef FERRY_TESTS_NIC_WR_H
#define FERRY_TESTS_NIC_WR_H

#include <stdint.h>

#include "qp/nic.h"

static inline struct nic_wr nic_wr_of(enum nic_op op, uint64_t id, const void *local,
				      const void *remote, uint32_t len, uint32_t lkey,
				      uint32_t rkey, int signaled)
{
	struct nic_wr wr = {
		.wr_id = id,
		.local = (uintptr_t)local,
		.remote = (uintptr_t)remote,
		.len = len,
		.lkey = lkey,
		.rkey = rkey,
		.op = (uint8_t)op,
		.signaled = (uint8_t)signaled,
	};
	return wr;
}

/* A WR from e->lbuf + loff (registered as e->lmr) to e->rbuf + roff (as
 * e->rmr): a macro, since each test has its own struct env. */
#define mkwr(e, op, id, loff, roff, len, signaled)                                     \
	nic_wr_of(op, id, (e)->lbuf + (loff), (e)->rbuf + (roff), len, (e)->lmr.lkey, \
		  (e)->rmr.rkey, signaled)

/* Link wrs[0..n) into a chain. */
static inline void nic_wr_chain(struct nic_wr *wrs, int n)
{
	for (int i = 0; i < n; i++)
		wrs[i].next = i + 1 < n ? &wrs[i + 1] : NULL;
}

#endif /* FERRY_TESTS_NIC_WR_H */
