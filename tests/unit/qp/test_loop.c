/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the software NIC (qp/loop/loop.c) through the provider interface:
 * keys, copies, verbs error/flush semantics, overflow detection, fault
 * injection and deregistration racing a polling core.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "qp/loop/loop.h"
#include "qp/nic.h"
#include "tests/harness/nic_wr.h"
#include "tests/harness/wait.h"

#define BUF_LEN 65536u
#define CQ_LEN 256u
#define QP_LEN 64u

static const struct nic_provider *P = &nic_loop_provider;

/* Context a posts; context b is the remote.  lbuf is registered on a, rbuf on b. */
struct env {
	struct nic *a, *b;
	struct nic_cq *cq;
	struct nic_qp *qp;
	uint8_t *lbuf, *rbuf;
	struct nic_mr lmr, rmr;
};

static struct nic_qp *new_qp(struct env *e, struct nic_cq *cq, uint32_t max_wr)
{
	struct nic_addr ra;
	struct nic_qp *qp;

	assert_int_equal(P->qp_create(e->a, cq, max_wr, &qp), 0);
	P->addr(e->b, &ra);
	assert_int_equal(P->qp_connect(qp, &ra, NULL), 0);
	return qp;
}

static int env_setup(void **state)
{
	struct env *e = calloc(1, sizeof(*e));

	assert_non_null(e);
	assert_int_equal(P->open("loop0", &e->a), 0);
	assert_int_equal(P->open("loop1", &e->b), 0);
	assert_int_equal(P->cq_create(e->a, CQ_LEN, &e->cq), 0);
	e->qp = new_qp(e, e->cq, QP_LEN);
	e->lbuf = malloc(BUF_LEN);
	e->rbuf = malloc(BUF_LEN);
	assert_non_null(e->lbuf);
	assert_non_null(e->rbuf);
	memset(e->lbuf, 0x11, BUF_LEN);
	memset(e->rbuf, 0x22, BUF_LEN);
	assert_int_equal(P->reg_mr(e->a, e->lbuf, BUF_LEN, NIC_ACCESS_ALL, &e->lmr), 0);
	assert_int_equal(P->reg_mr(e->b, e->rbuf, BUF_LEN, NIC_ACCESS_ALL, &e->rmr), 0);
	*state = e;
	return 0;
}

static int env_teardown(void **state)
{
	struct env *e = *state;

	assert_int_equal(P->dereg_mr(e->a, &e->lmr), 0);
	assert_int_equal(P->dereg_mr(e->b, &e->rmr), 0);
	P->qp_destroy(e->qp);
	P->cq_destroy(e->cq);
	P->close(e->a);
	P->close(e->b);
	free(e->lbuf);
	free(e->rbuf);
	free(e);
	return 0;
}

/* Poll until the queue runs dry; returns the CQEs collected (asserts no -errno). */
static int poll_all(struct nic_cq *cq, struct nic_wc *wc, int max)
{
	int got = 0, i, rc;

	for (i = 0; i < 64 && got < max; i++) {
		rc = P->poll(cq, max - got < 64 ? max - got : 64, wc + got);
		assert_true(rc >= 0);
		got += rc;
	}
	return got;
}

static void counters(struct nic *n, struct loop_counters *c)
{
	loop_get_counters(n, c);
}

/* ------------------------------------------------------------------ tests */

static void test_registry(void **state)
{
	(void)state;
	assert_ptr_equal(nic_provider_for("loop"), &nic_loop_provider);
	assert_ptr_equal(nic_provider_for("loop0"), &nic_loop_provider);
	assert_ptr_equal(nic_provider_for("loop17"), &nic_loop_provider);
	/* Every other name is a verbs device (whose open reports a missing one). */
	assert_ptr_equal(nic_provider_for("loopx"), &nic_verbs_provider);
	assert_ptr_equal(nic_provider_for("loop1a"), &nic_verbs_provider);
	assert_ptr_equal(nic_provider_for("Loop"), &nic_verbs_provider);
	assert_ptr_equal(nic_provider_for("mlx5_0"), &nic_verbs_provider);
	assert_null(nic_provider_for(""));
	assert_null(nic_provider_for(NULL));
	assert_string_equal(nic_loop_provider.name, "loop");
}

static void test_open_addr_caps(void **state)
{
	struct env *e = *state;
	struct nic_addr aa, ab;
	struct nic_caps caps;
	struct nic_qp_info qi;
	static const uint8_t zero[NIC_QP_SECRET_LEN];
	struct nic_qp *q2;

	P->addr(e->a, &aa);
	P->addr(e->b, &ab);
	assert_memory_equal(aa.bytes, "LOOP", 4);
	assert_memory_equal(ab.bytes, "LOOP", 4);
	assert_memory_not_equal(aa.bytes, ab.bytes, NIC_ADDR_LEN);

	/* Every field is the provider's: the core reads flags from a struct it
	 * did not clear (core.c: serves), so stale bytes must not show. */
	memset(&caps, 0xff, sizeof(caps));
	P->caps(e->a, &caps);
	assert_int_equal(caps.max_qp_wr, 32768);
	assert_int_equal(caps.max_cqe, 1u << 20);
	assert_int_equal(caps.max_inline, 0);
	assert_int_equal(caps.max_rd_atomic, 16);
	assert_int_equal(caps.flags, 0); /* not NIC_CAP_SERVES: no peer work in its polls */

	q2 = new_qp(e, e->cq, 8);
	assert_int_not_equal(P->qp_num(q2), P->qp_num(e->qp));
	/* Its handshake half is its number, PSN 0 and (nic.h) a zero secret,
	 * whatever the caller's struct held. */
	memset(&qi, 0xff, sizeof(qi));
	P->qp_info(q2, &qi);
	assert_int_equal(qi.qpn, P->qp_num(q2));
	assert_int_equal(qi.psn, 0);
	assert_memory_equal(qi.secret, zero, sizeof(qi.secret));
	P->qp_destroy(q2);

	/* Capacities out of range, and a CQ of another context. */
	assert_int_equal(P->cq_create(e->a, 0, &(struct nic_cq *){ NULL }), -EINVAL);
	assert_int_equal(P->cq_create(e->a, (1u << 20) + 1, &(struct nic_cq *){ NULL }), -EINVAL);
	assert_int_equal(P->qp_create(e->a, e->cq, 0, &q2), -EINVAL);
	assert_int_equal(P->qp_create(e->a, e->cq, 32769, &q2), -EINVAL);
	assert_int_equal(P->qp_create(e->b, e->cq, 8, &q2), -EINVAL);
}

static void test_mr_keys(void **state)
{
	struct env *e = *state;
	struct nic_mr m1, m2;
	struct nic_wr wr;
	struct nic_wc wc[4];
	struct nic_qp *q2;

	assert_int_equal(P->reg_mr(e->a, e->lbuf, 0, NIC_ACCESS_ALL, &m1), -EINVAL);
	assert_int_equal(P->reg_mr(e->a, NULL, 64, NIC_ACCESS_ALL, &m1), -EINVAL);

	assert_int_equal(P->reg_mr(e->a, e->lbuf, BUF_LEN, NIC_ACCESS_ALL, &m1), 0);
	assert_int_equal(m1.lkey, m1.rkey);
	assert_int_not_equal(m1.lkey, 0);
	assert_int_not_equal(m1.lkey, e->lmr.lkey);
	/* Only the owning context may deregister. */
	assert_int_equal(P->dereg_mr(e->b, &m1), -EINVAL);
	assert_int_equal(P->dereg_mr(e->a, &m1), 0);
	assert_int_equal(P->dereg_mr(e->a, &m1), -EINVAL);
	/* A new registration never revives the stale key. */
	assert_int_equal(P->reg_mr(e->a, e->lbuf, BUF_LEN, NIC_ACCESS_ALL, &m2), 0);
	assert_int_not_equal(m2.lkey, m1.lkey);
	assert_int_equal(P->dereg_mr(e->a, &m2), 0);

	/* Stale lkey: LOC_PROT. */
	wr = mkwr(e, NIC_OP_WRITE, 1, 0, 0, 64, 1);
	wr.lkey = m1.lkey;
	assert_int_equal(P->post(e->qp, &wr, NULL), 0);
	assert_int_equal(poll_all(e->cq, wc, 4), 1);
	assert_int_equal(wc[0].status, NIC_WC_LOC_PROT_ERR);

	/* Stale rkey on the remote: REM_ACCESS. */
	assert_int_equal(P->reg_mr(e->b, e->rbuf, BUF_LEN, NIC_ACCESS_ALL, &m1), 0);
	assert_int_equal(P->dereg_mr(e->b, &m1), 0);
	q2 = new_qp(e, e->cq, 8);
	wr = mkwr(e, NIC_OP_READ, 2, 0, 0, 64, 1);
	wr.rkey = m1.rkey;
	assert_int_equal(P->post(q2, &wr, NULL), 0);
	assert_int_equal(poll_all(e->cq, wc, 4), 1);
	assert_int_equal(wc[0].status, NIC_WC_REM_ACCESS_ERR);
	assert_int_equal(wc[0].qp_num, P->qp_num(q2));
	P->qp_destroy(q2);
}

/* A region registered without remote write: the NIC refuses a peer's
 * WRITE into it (and flushes the QP), a READ of it works. */
static void test_access_rights(void **state)
{
	struct env *e = *state;
	struct nic_mr ro;
	struct nic_wr wr;
	struct nic_wc wc[4];
	struct nic_qp *q2;

	assert_int_equal(P->reg_mr(e->b, e->rbuf, BUF_LEN, NIC_ACCESS_REMOTE_READ, &ro), 0);
	q2 = new_qp(e, e->cq, 8);
	wr = mkwr(e, NIC_OP_READ, 1, 0, 0, 64, 1);
	wr.rkey = ro.rkey;
	assert_int_equal(P->post(q2, &wr, NULL), 0);
	assert_int_equal(poll_all(e->cq, wc, 4), 1);
	assert_int_equal(wc[0].status, NIC_WC_SUCCESS);
	wr = mkwr(e, NIC_OP_WRITE, 2, 0, 0, 64, 1);
	wr.rkey = ro.rkey;
	assert_int_equal(P->post(q2, &wr, NULL), 0);
	assert_int_equal(poll_all(e->cq, wc, 4), 1);
	assert_int_equal(wc[0].status, NIC_WC_REM_ACCESS_ERR);
	P->qp_destroy(q2);
	assert_int_equal(P->dereg_mr(e->b, &ro), 0);
}

static void test_write_read(void **state)
{
	struct env *e = *state;
	struct nic_wr wr;
	struct nic_wc wc[4];
	struct loop_counters c;
	uint8_t expect[4096];
	size_t i;

	for (i = 0; i < 4096; i++)
		e->lbuf[100 + i] = (uint8_t)(i * 7 + 3);
	memset(expect, 0x22, sizeof(expect));

	wr = mkwr(e, NIC_OP_WRITE, 42, 100, 300, 4096, 1);
	assert_int_equal(P->post(e->qp, &wr, NULL), 0);
	/* Asynchronous: nothing moves before the CQ is polled. */
	assert_memory_equal(e->rbuf + 300, expect, 4096);
	counters(e->a, &c);
	assert_int_equal(c.wrs_executed, 0);

	assert_int_equal(P->poll(e->cq, 4, wc), 1);
	assert_int_equal(wc[0].status, NIC_WC_SUCCESS);
	assert_int_equal(wc[0].wr_id, 42);
	assert_int_equal(wc[0].op, NIC_OP_WRITE);
	assert_int_equal(wc[0].qp_num, P->qp_num(e->qp));
	assert_memory_equal(e->rbuf + 300, e->lbuf + 100, 4096);
	assert_int_equal(e->rbuf[299], 0x22);
	assert_int_equal(e->rbuf[300 + 4096], 0x22);

	for (i = 0; i < 1000; i++)
		e->rbuf[BUF_LEN - 1000 + i] = (uint8_t)(i ^ 0x5a);
	wr = mkwr(e, NIC_OP_READ, 43, 0, BUF_LEN - 1000, 1000, 1);
	assert_int_equal(P->post(e->qp, &wr, NULL), 0);
	assert_int_equal(e->lbuf[0], 0x11);
	assert_int_equal(P->poll(e->cq, 4, wc), 1);
	assert_int_equal(wc[0].status, NIC_WC_SUCCESS);
	assert_int_equal(wc[0].wr_id, 43);
	assert_int_equal(wc[0].op, NIC_OP_READ);
	assert_memory_equal(e->lbuf, e->rbuf + BUF_LEN - 1000, 1000);

	counters(e->a, &c);
	assert_int_equal(c.wrs_executed, 2);
	assert_int_equal(c.bytes_copied, 4096 + 1000);
	assert_int_equal(P->poll(e->cq, 4, wc), 0);
	assert_int_equal(P->poll(e->cq, 0, wc), 0);
	assert_int_equal(P->poll(e->cq, -1, wc), -EINVAL);
}

/* One bad WR in a chain: its error, then FLUSH_ERR for every WR behind it. */
static void test_loc_prot_flush(void **state)
{
	struct env *e = *state;
	struct nic_wr wrs[5];
	struct nic_wc wc[8];
	uint8_t before[64];

	wrs[0] = mkwr(e, NIC_OP_WRITE, 10, 0, 0, 64, 1);
	wrs[1] = mkwr(e, NIC_OP_WRITE, 11, BUF_LEN - 32, 64, 64, 0); /* leaves lbuf's MR */
	wrs[2] = mkwr(e, NIC_OP_WRITE, 12, 0, 128, 64, 1);
	wrs[3] = mkwr(e, NIC_OP_WRITE, 13, 0, 192, 64, 0);
	nic_wr_chain(wrs, 4);
	memcpy(before, e->rbuf + 128, 64);
	assert_int_equal(P->post(e->qp, wrs, NULL), 0);
	assert_int_equal(poll_all(e->cq, wc, 8), 4);
	assert_int_equal(wc[0].wr_id, 10);
	assert_int_equal(wc[0].status, NIC_WC_SUCCESS);
	assert_int_equal(wc[1].wr_id, 11);
	assert_int_equal(wc[1].status, NIC_WC_LOC_PROT_ERR);
	assert_int_equal(wc[2].wr_id, 12);
	assert_int_equal(wc[2].status, NIC_WC_FLUSH_ERR);
	assert_int_equal(wc[3].wr_id, 13);
	assert_int_equal(wc[3].status, NIC_WC_FLUSH_ERR);
	assert_memory_equal(e->rbuf, e->lbuf, 64);
	assert_memory_equal(e->rbuf + 128, before, 64); /* flushed: not copied */

	/* Posting in the error state is accepted; the WR flushes. */
	wrs[4] = mkwr(e, NIC_OP_READ, 14, 0, 0, 64, 0);
	wrs[4].next = NULL;
	assert_int_equal(P->post(e->qp, &wrs[4], NULL), 0);
	assert_int_equal(poll_all(e->cq, wc, 8), 1);
	assert_int_equal(wc[0].wr_id, 14);
	assert_int_equal(wc[0].status, NIC_WC_FLUSH_ERR);
	assert_int_equal(wc[0].op, NIC_OP_READ);
}

static void expect_one(struct env *e, struct nic_wr *wr, enum nic_wc_status st)
{
	struct nic_qp *qp = new_qp(e, e->cq, 8);
	struct nic_wc wc[4];

	wr->next = NULL;
	assert_int_equal(P->post(qp, wr, NULL), 0);
	assert_int_equal(poll_all(e->cq, wc, 4), 1);
	assert_int_equal(wc[0].status, st);
	assert_int_equal(wc[0].wr_id, wr->wr_id);
	P->qp_destroy(qp);
}

static void test_bounds(void **state)
{
	struct env *e = *state;
	struct nic_wr wr;

	/* Remote range leaves the MR at either end. */
	wr = mkwr(e, NIC_OP_WRITE, 1, 0, BUF_LEN - 8, 16, 0);
	expect_one(e, &wr, NIC_WC_REM_ACCESS_ERR);
	wr = mkwr(e, NIC_OP_READ, 2, 0, 0, 16, 0);
	wr.remote -= 1;
	expect_one(e, &wr, NIC_WC_REM_ACCESS_ERR);
	/* An rkey of the QP's own context is not the remote's memory. */
	wr = mkwr(e, NIC_OP_WRITE, 3, 0, 0, 16, 1);
	wr.rkey = e->lmr.rkey;
	wr.remote = (uintptr_t)e->lbuf + 1024;
	expect_one(e, &wr, NIC_WC_REM_ACCESS_ERR);
	/* An lkey of the remote context is not local memory. */
	wr = mkwr(e, NIC_OP_WRITE, 4, 0, 0, 16, 1);
	wr.lkey = e->rmr.lkey;
	wr.local = (uintptr_t)e->rbuf;
	expect_one(e, &wr, NIC_WC_LOC_PROT_ERR);
	/* Local range one byte too long; key 0. */
	wr = mkwr(e, NIC_OP_READ, 5, 1, 0, BUF_LEN, 0);
	expect_one(e, &wr, NIC_WC_LOC_PROT_ERR);
	wr = mkwr(e, NIC_OP_READ, 6, 0, 0, 16, 0);
	wr.lkey = 0;
	expect_one(e, &wr, NIC_WC_LOC_PROT_ERR);
	/* Both ends exactly at the MR boundaries succeed. */
	wr = mkwr(e, NIC_OP_WRITE, 7, 0, 0, BUF_LEN, 1);
	expect_one(e, &wr, NIC_WC_SUCCESS);
}

/*
 * A zero-length WR names no memory: as on verbs (and cma, tcp) no key is
 * checked, so it completes whatever its keys say -- none at all, or a
 * good lkey beside an rkey that names nothing -- and the WRs around it run.
 */
static void test_zero_length(void **state)
{
	struct env *e = *state;
	struct nic_wr wrs[4];
	struct nic_wc wc[8];

	memset(e->lbuf, 0x5a, 64);
	wrs[0] = nic_wr_of(NIC_OP_WRITE, 1, NULL, NULL, 0, 0, 0, 1);
	wrs[1] = mkwr(e, NIC_OP_WRITE, 2, 0, 0, 64, 1);
	wrs[2] = mkwr(e, NIC_OP_READ, 3, 0, 0, 0, 1);
	wrs[2].rkey = e->rmr.rkey ^ 0x10000u; /* another generation: no live region */
	wrs[3] = mkwr(e, NIC_OP_READ, 4, 64, 0, 64, 1);
	nic_wr_chain(wrs, 4);
	assert_int_equal(P->post(e->qp, wrs, NULL), 0);
	assert_int_equal(poll_all(e->cq, wc, 8), 4);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(wc[i].wr_id, (uint64_t)i + 1);
		assert_int_equal(wc[i].status, NIC_WC_SUCCESS);
	}
	assert_memory_equal(e->rbuf, e->lbuf, 64);
	assert_memory_equal(e->lbuf + 64, e->lbuf, 64);
}

static void test_unsignalled(void **state)
{
	struct env *e = *state;
	struct nic_wr wrs[11];
	struct nic_wc wc[16];
	struct loop_counters c;
	int i;

	for (i = 0; i < 11; i++)
		e->lbuf[i * 100] = (uint8_t)(0x80 + i);
	for (i = 0; i < 11; i++)
		wrs[i] = mkwr(e, NIC_OP_WRITE, 100 + i, i * 100, i * 100, 100, i == 10);
	nic_wr_chain(wrs, 11);
	assert_int_equal(P->post(e->qp, wrs, NULL), 0);
	assert_int_equal(poll_all(e->cq, wc, 16), 1);
	assert_int_equal(wc[0].wr_id, 110);
	assert_int_equal(wc[0].status, NIC_WC_SUCCESS);
	assert_memory_equal(e->rbuf, e->lbuf, 1100);
	counters(e->a, &c);
	assert_int_equal(c.wrs_executed, 11);
}

static void test_sq_overflow(void **state)
{
	struct env *e = *state;
	struct nic_qp *qp = new_qp(e, e->cq, 4);
	struct nic_wr wrs[6], *bad = NULL;
	struct nic_wc wc[8];
	struct loop_counters c;
	int i;

	for (i = 0; i < 6; i++)
		wrs[i] = mkwr(e, NIC_OP_WRITE, i, 0, 0, 8, 1);
	nic_wr_chain(wrs, 6);
	assert_int_equal(P->post(qp, wrs, &bad), -ENOMEM);
	assert_ptr_equal(bad, &wrs[4]);
	counters(e->a, &c);
	assert_int_equal(c.sq_overflows, 1);
	/* The four that fit were queued and run. */
	assert_int_equal(poll_all(e->cq, wc, 8), 4);
	for (i = 0; i < 4; i++) {
		assert_int_equal(wc[i].wr_id, i);
		assert_int_equal(wc[i].status, NIC_WC_SUCCESS);
	}
	/* The ring wraps: the queue is usable to its full depth again. */
	nic_wr_chain(wrs, 4);
	assert_int_equal(P->post(qp, wrs, &bad), 0);
	assert_int_equal(poll_all(e->cq, wc, 8), 4);
	P->qp_destroy(qp);
}

static void test_cq_overflow(void **state)
{
	struct env *e = *state;
	struct nic_cq *cq;
	struct nic_qp *qp;
	struct nic_wr wrs[4];
	struct nic_wc wc[8];
	struct loop_counters c;
	int i;

	assert_int_equal(P->cq_create(e->a, 2, &cq), 0);
	qp = new_qp(e, cq, 8);
	for (i = 0; i < 4; i++)
		wrs[i] = mkwr(e, NIC_OP_WRITE, i, 0, 0, 8, 1);
	nic_wr_chain(wrs, 4);
	assert_int_equal(P->post(qp, wrs, NULL), 0);
	assert_int_equal(P->poll(cq, 8, wc), -EOVERFLOW);
	counters(e->a, &c);
	assert_int_equal(c.cq_overflows, 2);
	assert_int_equal(c.wrs_executed, 4);
	/* Reported once; polling then goes on with the CQEs that fit. */
	assert_int_equal(P->poll(cq, 8, wc), 2);
	assert_int_equal(wc[0].wr_id, 0);
	assert_int_equal(wc[1].wr_id, 1);
	assert_int_equal(P->poll(cq, 8, wc), 0);
	P->qp_destroy(qp);
	P->cq_destroy(cq);
	/* Counters of a destroyed CQ stay in the context's totals. */
	counters(e->a, &c);
	assert_int_equal(c.cq_overflows, 2);
}

static void test_not_connected(void **state)
{
	struct env *e = *state;
	struct nic_qp *qp;
	struct nic_addr ra, junk;
	struct nic_wr wr = mkwr(e, NIC_OP_WRITE, 1, 0, 0, 8, 1), *bad = NULL;
	struct nic_wc wc[2];

	assert_int_equal(P->qp_create(e->a, e->cq, 8, &qp), 0);
	assert_int_equal(P->post(qp, &wr, &bad), -ENOTCONN);
	assert_ptr_equal(bad, &wr);
	assert_int_equal(P->poll(e->cq, 2, wc), 0);

	memset(&junk, 0, sizeof(junk));
	memcpy(junk.bytes, "VERB", 4);
	assert_int_equal(P->qp_connect(qp, &junk, NULL), -EINVAL);
	memcpy(junk.bytes, "LOOP", 4); /* id 0 */
	assert_int_equal(P->qp_connect(qp, &junk, NULL), -EINVAL);

	P->addr(e->b, &ra);
	assert_int_equal(P->qp_connect(qp, &ra, NULL), 0);
	assert_int_equal(P->qp_connect(qp, &ra, NULL), -EISCONN);
	assert_int_equal(P->post(qp, &wr, &bad), 0);
	assert_int_equal(poll_all(e->cq, wc, 2), 1);
	assert_int_equal(wc[0].status, NIC_WC_SUCCESS);
	P->qp_destroy(qp);
}

static void test_set_error(void **state)
{
	struct env *e = *state;
	struct nic_wr wrs[3];
	struct nic_wc wc[4];
	int i;

	for (i = 0; i < 3; i++)
		wrs[i] = mkwr(e, NIC_OP_WRITE, i, 0, 0, 64, i == 1);
	nic_wr_chain(wrs, 3);
	assert_int_equal(P->post(e->qp, wrs, NULL), 0);
	assert_int_equal(P->qp_set_error(e->qp), 0);
	assert_int_equal(poll_all(e->cq, wc, 4), 3);
	for (i = 0; i < 3; i++) {
		assert_int_equal(wc[i].wr_id, i);
		assert_int_equal(wc[i].status, NIC_WC_FLUSH_ERR);
	}
	assert_int_equal(e->rbuf[0], 0x22); /* nothing copied */
	wrs[0].next = NULL;
	assert_int_equal(P->post(e->qp, wrs, NULL), 0);
	assert_int_equal(poll_all(e->cq, wc, 4), 1);
	assert_int_equal(wc[0].status, NIC_WC_FLUSH_ERR);
}

static void test_nocopy(void **state)
{
	struct env *e = *state;
	struct nic_wr wr = mkwr(e, NIC_OP_WRITE, 5, 0, 0, 512, 1);
	struct nic_wc wc[2];
	struct loop_counters c;

	loop_set_nocopy(e->a, 1);
	assert_int_equal(P->post(e->qp, &wr, NULL), 0);
	assert_int_equal(poll_all(e->cq, wc, 2), 1);
	assert_int_equal(wc[0].status, NIC_WC_SUCCESS);
	assert_int_equal(e->rbuf[0], 0x22);
	counters(e->a, &c);
	assert_int_equal(c.wrs_executed, 1);
	assert_int_equal(c.bytes_copied, 512);
	/* Bounds are still checked. */
	wr = mkwr(e, NIC_OP_WRITE, 6, 0, BUF_LEN - 1, 2, 1);
	assert_int_equal(P->post(e->qp, &wr, NULL), 0);
	assert_int_equal(poll_all(e->cq, wc, 2), 1);
	assert_int_equal(wc[0].status, NIC_WC_REM_ACCESS_ERR);
	loop_set_nocopy(e->a, 0);
}

/* poll(n) runs about n WRs, alternating QPs, in order within each QP. */
static void test_round_robin(void **state)
{
	struct env *e = *state;
	struct nic_qp *q2 = new_qp(e, e->cq, QP_LEN);
	struct nic_wr w1[QP_LEN], w2[QP_LEN];
	struct nic_wc wc[CQ_LEN];
	struct loop_counters c;
	uint64_t next1 = 0, next2 = 1000;
	int i, n, got1 = 0, got2 = 0;

	for (i = 0; i < (int)QP_LEN; i++) {
		w1[i] = mkwr(e, NIC_OP_WRITE, (uint64_t)i, 0, 0, 8, 1);
		w2[i] = mkwr(e, NIC_OP_WRITE, 1000 + (uint64_t)i, 8, 8, 8, 1);
	}
	nic_wr_chain(w1, QP_LEN);
	nic_wr_chain(w2, QP_LEN);
	assert_int_equal(P->post(e->qp, w1, NULL), 0);
	assert_int_equal(P->post(q2, w2, NULL), 0);

	n = P->poll(e->cq, 32, wc);
	assert_int_equal(n, 32);
	counters(e->a, &c);
	assert_int_equal(c.wrs_executed, 32);
	n += poll_all(e->cq, wc + n, CQ_LEN - n);
	assert_int_equal(n, 2 * QP_LEN);
	for (i = 0; i < n; i++) {
		if (wc[i].qp_num == P->qp_num(e->qp)) {
			assert_int_equal(wc[i].wr_id, next1++);
			got1 += i < 32;
		} else {
			assert_int_equal(wc[i].qp_num, P->qp_num(q2));
			assert_int_equal(wc[i].wr_id, next2++);
			got2 += i < 32;
		}
	}
	/* Both QPs made progress in the first poll. */
	assert_true(got1 > 0 && got2 > 0);
	P->qp_destroy(q2);
}

/* Destroying a QP with queued WRs unlinks it from its CQ. */
static void test_destroy_queued(void **state)
{
	struct env *e = *state;
	struct nic_qp *q2 = new_qp(e, e->cq, 8);
	struct nic_wr wr = mkwr(e, NIC_OP_WRITE, 1, 0, 0, 8, 1);
	struct nic_wc wc[2];

	assert_int_equal(P->post(q2, &wr, NULL), 0);
	P->qp_destroy(q2);
	assert_int_equal(P->poll(e->cq, 2, wc), 0);
}

/* close frees what the context still holds; the remote's keys die with it. */
static void test_close_with_children(void **state)
{
	struct env *e = *state;
	struct nic *c;
	struct nic_cq *cq;
	struct nic_qp *qp;
	struct nic_mr mr;
	struct nic_addr ra;
	struct nic_wr wr = mkwr(e, NIC_OP_WRITE, 9, 0, 0, 8, 1);
	struct nic_wc wc[2];
	uint8_t *buf = malloc(4096);

	assert_non_null(buf);
	assert_int_equal(P->open("loop2", &c), 0);
	assert_int_equal(P->reg_mr(c, buf, 4096, NIC_ACCESS_ALL, &mr), 0);
	assert_int_equal(P->cq_create(c, 16, &cq), 0);
	assert_int_equal(P->qp_create(c, cq, 8, &qp), 0);
	P->addr(c, &ra);
	assert_int_equal(P->qp_connect(qp, &ra, NULL), 0);
	assert_int_equal(P->post(qp, &(struct nic_wr){ .len = 1, .signaled = 1 }, NULL), 0);

	/* A QP of a connected to c. */
	assert_int_equal(P->qp_create(e->a, e->cq, 8, &qp), 0);
	assert_int_equal(P->qp_connect(qp, &ra, NULL), 0);
	P->close(c);
	free(buf);

	wr.rkey = mr.rkey;
	wr.remote = (uintptr_t)buf;
	assert_int_equal(P->post(qp, &wr, NULL), 0);
	assert_int_equal(poll_all(e->cq, wc, 2), 1);
	assert_int_equal(wc[0].status, NIC_WC_REM_ACCESS_ERR);
	P->qp_destroy(qp);
}

/* ---------------------------------------------------------------- faults */

struct fault_run {
	uint64_t ok, retry, flush, lost;
	uint64_t hash;
	struct loop_counters c;
};

/* n single signalled WRITEs, one per poll; a QP that fails is replaced. */
static void run_faults(const struct loop_faults *f, int n, struct fault_run *r)
{
	struct env *e;
	struct nic_wc wc[4];
	int i, got;

	memset(r, 0, sizeof(*r));
	env_setup((void **)&e);
	loop_set_faults(e->a, f);
	for (i = 0; i < n; i++) {
		struct nic_wr wr = mkwr(e, NIC_OP_WRITE, (uint64_t)i, 0, 0, 64, 1);

		assert_int_equal(P->post(e->qp, &wr, NULL), 0);
		got = P->poll(e->cq, 4, wc);
		assert_true(got == 0 || got == 1);
		if (!got) {
			/* Lost: the QP stalls on that WR until it is failed,
			 * then the WR comes back flushed. */
			r->lost++;
			r->hash = r->hash * 31 + 7;
			assert_int_equal(P->poll(e->cq, 4, wc), 0);
			assert_int_equal(P->qp_set_error(e->qp), 0);
			assert_int_equal(P->poll(e->cq, 4, wc), 1);
			assert_int_equal(wc[0].status, NIC_WC_FLUSH_ERR);
			assert_int_equal(wc[0].wr_id, (uint64_t)i);
			P->qp_destroy(e->qp);
			e->qp = new_qp(e, e->cq, QP_LEN);
			continue;
		}
		r->hash = r->hash * 31 + wc[0].status;
		if (wc[0].status == NIC_WC_SUCCESS) {
			r->ok++;
			continue;
		}
		if (wc[0].status == NIC_WC_RETRY_EXC_ERR)
			r->retry++;
		else if (wc[0].status == NIC_WC_FLUSH_ERR)
			r->flush++;
		else
			fail_msg("unexpected status %d", wc[0].status);
		/* The QP is in the error state now: replace it. */
		P->qp_destroy(e->qp);
		e->qp = new_qp(e, e->cq, QP_LEN);
	}
	loop_get_counters(e->a, &r->c);
	env_teardown((void **)&e);
}

static void expect_rate(uint64_t got, double expect)
{
	/* 20000 draws: sd <= sqrt(expect); 30 % is more than 5 sd here. */
	assert_true((double)got > expect * 0.7 && (double)got < expect * 1.3);
}

static void test_faults(void **state)
{
	struct loop_faults f = {
		.err_ppm = 20000, .lost_ppm = 50000, .qp_fatal_ppm = 10000, .seed = 1234,
	};
	struct fault_run r1, r2, r3;
	const int n = 20000;

	(void)state;
	run_faults(&f, n, &r1);
	run_faults(&f, n, &r2);
	assert_memory_equal(&r1, &r2, sizeof(r1));
	f.seed = 99;
	run_faults(&f, n, &r3);
	assert_int_not_equal(r1.hash, r3.hash);

	assert_int_equal(r1.ok + r1.retry + r1.flush + r1.lost, n);
	assert_int_equal(r1.c.errs_injected, r1.retry);
	assert_int_equal(r1.c.fatal_injected, r1.flush);
	assert_int_equal(r1.c.lost_injected, r1.lost);
	assert_int_equal(r1.c.wrs_executed, r1.ok + r1.lost);
	expect_rate(r1.flush, n * 0.01);
	expect_rate(r1.retry, n * 0.99 * 0.02);
	expect_rate(r1.lost, n * 0.99 * 0.98 * 0.05);

	/* No faults: everything succeeds. */
	memset(&f, 0, sizeof(f));
	run_faults(&f, 1000, &r1);
	assert_int_equal(r1.ok, 1000);
}

/* ---------------------------------------------------- dereg vs a polling core */

#define RACE_BUF (256u * 1024)

struct race {
	struct env *e;
	_Atomic int stop;
	_Atomic uint32_t key;
	_Atomic uintptr_t addr;
	_Atomic uint64_t ended; /* WRs completed, for the main thread to watch */
	uint64_t ok, err, regs;
};

/* The core: WRITE and READ against whatever buffer b currently exports. */
static void *race_core(void *arg)
{
	struct race *r = arg;
	struct env *e = r->e;
	struct nic_wc wc[4];
	uint64_t i = 0;

	while (!atomic_load(&r->stop)) {
		struct nic_wr wr = mkwr(e, (i & 1) ? NIC_OP_READ : NIC_OP_WRITE, i, 0, 0, RACE_BUF, 1);
		int got;

		wr.rkey = atomic_load_explicit(&r->key, memory_order_acquire);
		wr.remote = atomic_load_explicit(&r->addr, memory_order_acquire);
		i++;
		assert_int_equal(P->post(e->qp, &wr, NULL), 0);
		do
			got = P->poll(e->cq, 4, wc);
		while (got == 0);
		assert_int_equal(got, 1);
		atomic_fetch_add(&r->ended, 1);
		if (wc[0].status == NIC_WC_SUCCESS) {
			r->ok++;
			continue;
		}
		r->err++;
		P->qp_destroy(e->qp);
		e->qp = new_qp(e, e->cq, QP_LEN);
	}
	return NULL;
}

static void test_dereg_while_polling(void **state)
{
	struct env *e = *state;
	struct race r = { .e = e };
	struct loop_counters c;
	struct timespec t0, t;
	pthread_t th;
	uint8_t *big = malloc(RACE_BUF);

	/* lbuf is too small: give the core a RACE_BUF-sized local MR. */
	assert_non_null(big);
	assert_int_equal(P->dereg_mr(e->a, &e->lmr), 0);
	free(e->lbuf);
	e->lbuf = big;
	memset(big, 0x33, RACE_BUF);
	assert_int_equal(P->reg_mr(e->a, e->lbuf, RACE_BUF, NIC_ACCESS_ALL, &e->lmr), 0);

	assert_int_equal(pthread_create(&th, NULL, race_core, &r), 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		uint8_t *buf = malloc(RACE_BUF);
		struct nic_mr mr;
		uint64_t ended;

		assert_non_null(buf);
		assert_int_equal(P->reg_mr(e->b, buf, RACE_BUF, NIC_ACCESS_ALL, &mr), 0);
		atomic_store_explicit(&r.addr, (uintptr_t)buf, memory_order_release);
		atomic_store_explicit(&r.key, mr.rkey, memory_order_release);
		/*
		 * The core has used buf: the WR that completes first from now
		 * may have read the old key, the next one was posted after it
		 * completed and so read the new one.
		 */
		ended = atomic_load(&r.ended);
		WAIT_UNTIL(atomic_load(&r.ended) >= ended + 2, WAIT_DEADLINE_MS,
			   "the core to complete a WR against the new buffer");
		/* The core may be copying into buf right now: dereg must wait. */
		assert_int_equal(P->dereg_mr(e->b, &mr), 0);
		free(buf);
		r.regs++;
		/* Other control-path calls the core reads from: must be race free. */
		loop_set_nocopy(e->a, (int)(r.regs & 1));
		loop_set_faults(e->a, NULL);
		loop_get_counters(e->a, &c);
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < 300);
	atomic_store(&r.stop, 1);
	pthread_join(th, NULL);
	print_message("dereg race: %llu regs, %llu ok, %llu errors\n",
		      (unsigned long long)r.regs, (unsigned long long)r.ok,
		      (unsigned long long)r.err);
	assert_true(r.ok + r.err > 0);
	loop_get_counters(e->a, &c);
	assert_int_equal(c.wrs_executed, r.ok);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_registry),
#define T(f) cmocka_unit_test_setup_teardown(f, env_setup, env_teardown)
		T(test_open_addr_caps),
		T(test_mr_keys),
		T(test_write_read),
		T(test_access_rights),
		T(test_loc_prot_flush),
		T(test_bounds),
		T(test_zero_length),
		T(test_unsignalled),
		T(test_sq_overflow),
		T(test_cq_overflow),
		T(test_not_connected),
		T(test_set_error),
		T(test_nocopy),
		T(test_round_robin),
		T(test_destroy_queued),
		T(test_close_with_children),
		cmocka_unit_test(test_faults),
		T(test_dereg_while_polling),
#undef T
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
