/* SPDX-License-Identifier: MIT */
/*
 * cma: the same-host NIC.  One-sided READ/WRITE between two processes on
 * one host with process_vm_readv/process_vm_writev, executed by the
 * initiator's polling core; the target's CPU does nothing on the data path.
 * The provider's design (address, keys, what the kernel must allow) is
 * told at the top of cma.c; what is here is what the rest of ferry (and
 * the tests) may call beyond struct nic_provider.
 */
#ifndef FERRY_QP_CMA_H
#define FERRY_QP_CMA_H

#include <stddef.h>
#include <stdint.h>

#include "qp/nic.h"

/* Environment: "1" lets any process of our uid ptrace us (see cma.c). */
#define CMA_ENV_ALLOW_ANY "FERRY_CMA_ALLOW_ANY"

struct cma_counters {
	uint64_t wrs_executed;  /* WRs completed successfully */
	uint64_t bytes_copied;
	uint64_t copy_calls;    /* process_vm_readv/writev that moved data */
	uint64_t key_fetches;   /* system calls reading or marking a peer's key */
	uint64_t wr_errors;     /* WRs that completed in error (not flushes) */
	uint64_t sq_overflows;  /* post on a full send queue: caller bug */
	uint64_t cq_overflows;  /* CQE with no room in the CQ: caller bug */
};

void cma_get_counters(const struct nic *nic, struct cma_counters *out);

/*
 * For tests: read /proc files under root instead of "/proc" (NULL: back to
 * /proc), so that reachable()'s explanations can be exercised on a host
 * without Yama or a second uid.  Not thread-safe; tests only.
 */
void cma_host_set_proc_root(const char *root);

#endif /* FERRY_QP_CMA_H */
