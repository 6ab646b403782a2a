/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the same-host NIC (qp/cma) through the provider interface,
 * in one process (cma to ourselves: two contexts, one pid) and across a
 * fork()ed target: copies of 1 B to 64 MiB with every byte checked, iovec
 * batches and the per-poll bound, selective signalling, RC errors (bad
 * lkey, bad rkey or range, unmapped memory on either side, a deregistered
 * key, a destroyed responder, a peer that exits mid-transfer) each followed
 * by the flush of the rest, and reachable()'s refusals with their reasons
 * (another host, another PID namespace, an exited peer, a real EPERM from a
 * child that dropped to another uid, the explanations for Yama and
 * seccomp from a fake /proc).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "qp/cma/cma.h"
#include "qp/cma/objects.h"
#include "qp/nic.h"
#include "ring/base/log.h"
#include "tests/harness/nic_wr.h"

static const struct nic_provider *P = &nic_cma_provider;

#define CQ_LEN 1024u
#define QP_LEN 256u
#define BUF_LEN (8u << 20)
#define BIG (64u << 20) /* the largest transfer, two processes */
#define PAGE 4096u

/* ------------------------------------------------------------- patterns */

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void fill(uint8_t *p, size_t len, uint64_t seed)
{
	uint64_t s = seed;
	size_t i = 0;

	for (; i + 8 <= len; i += 8) {
		uint64_t v = splitmix(&s);

		memcpy(p + i, &v, 8);
	}
	for (; i < len; i++)
		p[i] = (uint8_t)splitmix(&s);
}

/* Offset of the first byte of p that differs from fill(seed), or len. */
static size_t mismatch(const uint8_t *p, size_t len, uint64_t seed)
{
	uint64_t s = seed;
	size_t i = 0;

	for (; i + 8 <= len; i += 8) {
		uint64_t v = splitmix(&s);
		const uint8_t *w = (const uint8_t *)&v;

		if (memcmp(p + i, w, 8) != 0)
			for (size_t k = 0;; k++)
				if (p[i + k] != w[k])
					return i + k;
	}
	for (; i < len; i++)
		if (p[i] != (uint8_t)splitmix(&s))
			return i;
	return len;
}

/* A length from 1 to max, uniform in its logarithm. */
static uint32_t log_len(uint64_t *s, uint32_t max)
{
	uint32_t bits = 1 + (uint32_t)(splitmix(s) % 27); /* up to 2^27 > 64 MiB */
	uint64_t v = 1 + splitmix(s) % (1ull << bits);

	return (uint32_t)(v > max ? max : v);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint8_t *map(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	assert_true(p != MAP_FAILED);
	return p;
}

/* ------------------------------------------------------------ one process */

/* Context a initiates, context b is the target; lbuf on a, rbuf on b. */
struct env {
	struct nic *a, *b;
	struct nic_cq *cq, *rcq;
	struct nic_qp *qp, *rqp;
	uint8_t *lbuf, *rbuf;
	struct nic_mr lmr, rmr;
};

static void connect_pair(struct nic *a, struct nic_qp *qp, struct nic *b, struct nic_qp *rqp)
{
	struct nic_addr aa, ba;
	struct nic_qp_info qi, ri;

	P->addr(a, &aa);
	P->addr(b, &ba);
	P->qp_info(qp, &qi);
	P->qp_info(rqp, &ri);
	assert_int_equal(P->qp_connect(rqp, &aa, &qi), 0);
	assert_int_equal(P->qp_connect(qp, &ba, &ri), 0);
}

/* A fresh connected QP pair on e's contexts (an error breaks a QP for good). */
static void new_pair(struct env *e, uint32_t max_wr)
{
	if (e->qp)
		P->qp_destroy(e->qp);
	if (e->rqp)
		P->qp_destroy(e->rqp);
	assert_int_equal(P->qp_create(e->a, e->cq, max_wr, &e->qp), 0);
	assert_int_equal(P->qp_create(e->b, e->rcq, 1, &e->rqp), 0);
	connect_pair(e->a, e->qp, e->b, e->rqp);
}

static int env_setup(void **state)
{
	struct env *e = calloc(1, sizeof(*e));

	assert_non_null(e);
	assert_int_equal(P->open("cma", &e->a), 0);
	assert_int_equal(P->open("cma", &e->b), 0);
	assert_int_equal(P->cq_create(e->a, CQ_LEN, &e->cq), 0);
	assert_int_equal(P->cq_create(e->b, 16, &e->rcq), 0);
	new_pair(e, QP_LEN);
	e->lbuf = map(BUF_LEN);
	e->rbuf = map(BUF_LEN);
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

	/* close frees what is left (QPs, CQs, MRs): the tests may have
	 * deregistered or destroyed some already. */
	P->close(e->a);
	P->close(e->b);
	munmap(e->lbuf, BUF_LEN);
	munmap(e->rbuf, BUF_LEN);
	free(e);
	return 0;
}

/* Poll until want CQEs came (or 20 s passed: a hang fails the test). */
static int poll_n(struct nic_cq *cq, struct nic_wc *wc, int want)
{
	double end = now_s() + 20;
	int got = 0;

	while (got < want && now_s() < end) {
		int rc = P->poll(cq, want - got < 64 ? want - got : 64, wc + got);

		assert_true(rc >= 0);
		got += rc;
	}
	assert_int_equal(got, want);
	return got;
}

static void post_ok(struct nic_qp *qp, struct nic_wr *wr)
{
	struct nic_wr *bad = NULL;

	assert_int_equal(P->post(qp, wr, &bad), 0);
}

/* Post one signalled WR and wait for its CQE; returns its status. */
static int run1(struct env *e, struct nic_wr wr)
{
	struct nic_wc wc;

	wr.next = NULL;
	wr.signaled = 1;
	post_ok(e->qp, &wr);
	poll_n(e->cq, &wc, 1);
	assert_int_equal(wc.wr_id, wr.wr_id);
	return wc.status;
}

static void counters(struct nic *n, struct cma_counters *c)
{
	cma_get_counters(n, c);
}

/* ------------------------------------------------------------------ tests */

static void test_basics(void **state)
{
	struct env *e = *state;
	struct nic_caps caps;
	struct nic_addr ba;
	struct cma_id id;
	char d[64], want[64], why[256];

	assert_ptr_equal(nic_provider_for("cma"), &nic_cma_provider);
	assert_ptr_not_equal(nic_provider_for("cma0"), &nic_cma_provider);
	P->caps(e->a, &caps);
	assert_int_equal(caps.flags, NIC_CAP_SAME_HOST); /* not SERVES: no work for the target */
	assert_true(caps.max_qp_wr >= QP_LEN && caps.max_cqe >= CQ_LEN);
	assert_null(P->cq_arm);
	assert_null(P->cq_fd);
	P->describe(e->a, d, sizeof(d));
	snprintf(want, sizeof(want), "cma pid %d", (int)getpid());
	assert_string_equal(d, want);
	assert_int_equal(P->numa_node(e->a), -1);

	P->addr(e->b, &ba);
	assert_memory_equal(ba.bytes, "CMA1", 4);
	assert_int_equal(cma_addr_decode(&ba, &id), 0);
	assert_int_equal(id.pid, (uint32_t)getpid());
	assert_int_equal(id.uid, (uint32_t)getuid());
	assert_int_equal(*(const volatile uint8_t *)(uintptr_t)id.probe, CMA_PROBE_VALUE);
	assert_int_equal(P->reachable(e->a, &ba, why, sizeof(why)), 0);
	assert_true(P->qp_num(e->qp) >> 16 != 0); /* the generation is never 0 */
}

/* Random sizes and offsets, both directions, every byte checked. */
static void test_self_random(void **state)
{
	struct env *e = *state;
	uint64_t s = 42;

	for (int i = 0; i < 60; i++) {
		uint32_t len = log_len(&s, BUF_LEN / 2);
		size_t loff = splitmix(&s) % (BUF_LEN - len + 1);
		size_t roff = splitmix(&s) % (BUF_LEN - len + 1);
		uint64_t seed = splitmix(&s);

		if (i & 1) {
			fill(e->lbuf + loff, len, seed);
			assert_int_equal(run1(e, mkwr(e, NIC_OP_WRITE, i, loff, roff, len, 1)),
					 NIC_WC_SUCCESS);
			assert_int_equal(mismatch(e->rbuf + roff, len, seed), len);
		} else {
			fill(e->rbuf + roff, len, seed);
			assert_int_equal(run1(e, mkwr(e, NIC_OP_READ, i, loff, roff, len, 1)),
					 NIC_WC_SUCCESS);
			assert_int_equal(mismatch(e->lbuf + loff, len, seed), len);
		}
	}
}

/* An 8-byte WRITE is one system call once the key is cached. */
static void test_small_write_one_call(void **state)
{
	struct env *e = *state;
	struct cma_counters c0, c1;
	int n = 200;

	assert_int_equal(run1(e, mkwr(e, NIC_OP_WRITE, 1, 0, 0, 8, 1)), NIC_WC_SUCCESS);
	counters(e->a, &c0);
	for (int i = 0; i < n; i++) {
		uint64_t v = 0x1000 + (uint64_t)i;

		memcpy(e->lbuf + 64, &v, 8);
		assert_int_equal(run1(e, mkwr(e, NIC_OP_WRITE, 2, 64, 128, 8, 1)), NIC_WC_SUCCESS);
		assert_memory_equal(e->rbuf + 128, &v, 8);
	}
	counters(e->a, &c1);
	assert_int_equal(c1.copy_calls - c0.copy_calls, n);
	/* The key's lease (2 ms) may run out once or twice while we loop. */
	print_message("  %d 8-byte WRITEs: %llu copy calls, %llu key fetches\n", n,
		      (unsigned long long)(c1.copy_calls - c0.copy_calls),
		      (unsigned long long)(c1.key_fetches - c0.key_fetches));
	assert_true(c1.key_fetches - c0.key_fetches <= (uint64_t)n / 4);
}

/* 64 WRITEs of 4 KiB in one chain go out in one system call. */
static void test_iovec_batch(void **state)
{
	struct env *e = *state;
	struct nic_wr wrs[64];
	struct nic_wc wc[8];
	struct cma_counters c0, c1;

	assert_int_equal(run1(e, mkwr(e, NIC_OP_WRITE, 0, 0, 0, 1, 1)), NIC_WC_SUCCESS);
	fill(e->lbuf, 64 * PAGE, 7);
	for (int i = 0; i < 64; i++)
		wrs[i] = mkwr(e, NIC_OP_WRITE, 100 + i, (size_t)i * PAGE, (size_t)(63 - i) * PAGE,
			      PAGE, (i + 1) % 16 == 0);
	nic_wr_chain(wrs, 64);
	counters(e->a, &c0);
	post_ok(e->qp, wrs);
	poll_n(e->cq, wc, 4);
	counters(e->a, &c1);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(wc[i].status, NIC_WC_SUCCESS);
		assert_int_equal(wc[i].wr_id, 100 + 16 * i + 15);
	}
	assert_int_equal(c1.copy_calls - c0.copy_calls, 1);
	for (int i = 0; i < 64; i++)
		assert_memory_equal(e->rbuf + (size_t)(63 - i) * PAGE, e->lbuf + (size_t)i * PAGE,
				    PAGE);
}

/*
 * Runs of WRs contiguous on one side share an iovec there, whatever the
 * other side does: 16 WRITEs from scattered local pages into one remote
 * run, then 16 READs from one remote run with a gap in the middle into
 * scattered local pages, then 8 READs contiguous on both sides.  One call
 * per direction, every byte where its WR says.
 */
static void test_iovec_merge(void **state)
{
	struct env *e = *state;
	struct nic_wr wrs[40];
	struct nic_wc wc[3];
	struct cma_counters c0, c1;
	int n = 0;

	assert_int_equal(run1(e, mkwr(e, NIC_OP_WRITE, 0, 0, 0, 1, 1)), NIC_WC_SUCCESS);
	fill(e->lbuf, 16 * PAGE, 11);
	fill(e->rbuf + 32 * PAGE, 17 * PAGE, 12);
	fill(e->rbuf + 64 * PAGE, 8 * PAGE, 13);
	for (int i = 0; i < 16; i++, n++) /* local pages 15, 14, ... 0 -> remote 0..15 */
		wrs[n] = mkwr(e, NIC_OP_WRITE, 200 + i, (size_t)(15 - i) * PAGE, (size_t)i * PAGE,
			      PAGE, i == 15);
	for (int i = 0; i < 16; i++, n++) /* remote 32..39, 41..48 -> local 16, 18, ... */
		wrs[n] = mkwr(e, NIC_OP_READ, 300 + i, (size_t)(16 + 2 * i) * PAGE,
			      (size_t)(32 + i + (i >= 8)) * PAGE, PAGE, i == 15);
	for (int i = 0; i < 8; i++, n++) /* remote 64..71 -> local 56..63 */
		wrs[n] = mkwr(e, NIC_OP_READ, 400 + i, (size_t)(56 + i) * PAGE,
			      (size_t)(64 + i) * PAGE, PAGE, i == 7);
	nic_wr_chain(wrs, n);
	counters(e->a, &c0);
	post_ok(e->qp, wrs);
	poll_n(e->cq, wc, 3);
	counters(e->a, &c1);
	assert_int_equal(wc[0].wr_id, 215);
	assert_int_equal(wc[1].wr_id, 315);
	assert_int_equal(wc[2].wr_id, 407);
	for (int i = 0; i < 3; i++)
		assert_int_equal(wc[i].status, NIC_WC_SUCCESS);
	assert_int_equal(c1.copy_calls - c0.copy_calls, 2);
	for (int i = 0; i < 16; i++) {
		assert_memory_equal(e->rbuf + (size_t)i * PAGE, e->lbuf + (size_t)(15 - i) * PAGE,
				    PAGE);
		assert_memory_equal(e->lbuf + (size_t)(16 + 2 * i) * PAGE,
				    e->rbuf + (size_t)(32 + i + (i >= 8)) * PAGE, PAGE);
	}
	assert_memory_equal(e->lbuf + 56 * PAGE, e->rbuf + 64 * PAGE, 8 * PAGE);
}

/*
 * A poll copies at most CMA_POLL_BYTES_MAX (its budget is learned within
 * [CMA_POLL_BYTES_MIN, CMA_POLL_BYTES_MAX]); a larger WR goes on across polls.
 */
static void test_poll_budget(void **state)
{
	struct env *e = *state;
	struct nic_wr wr = mkwr(e, NIC_OP_WRITE, 9, 0, 0, 6u << 20, 1);
	struct cma_counters c0, c1;
	struct nic_wc wc;
	int polls = 0;

	fill(e->lbuf, 6u << 20, 99);
	counters(e->a, &c0);
	post_ok(e->qp, &wr);
	assert_int_equal(P->poll(e->cq, 1, &wc), 0);
	counters(e->a, &c1);
	assert_true(c1.bytes_copied - c0.bytes_copied <= CMA_POLL_BYTES_MAX);
	for (polls = 1; P->poll(e->cq, 1, &wc) == 0; polls++)
		assert_true(polls < 100);
	assert_int_equal(wc.status, NIC_WC_SUCCESS);
	assert_true(polls >= (int)((6u << 20) / CMA_POLL_BYTES_MAX) - 1);
	assert_int_equal(mismatch(e->rbuf, 6u << 20, 99), 6u << 20);
}

/* Only signalled WRs report; every WR ran, in order, READs and WRITEs mixed. */
static void test_selective_signalling(void **state)
{
	struct env *e = *state;
	struct nic_wr wrs[40];
	struct nic_wc wc[8];
	int nsig = 0;

	for (int i = 0; i < 40; i++) {
		size_t off = (size_t)i * 65536;
		int sig = i % 8 == 7 || i == 39;

		if (i % 3 == 0) {
			fill(e->rbuf + off, 65536, 1000 + i);
			wrs[i] = mkwr(e, NIC_OP_READ, i, off, off, 65536, sig);
		} else {
			fill(e->lbuf + off, 65536, 1000 + i);
			wrs[i] = mkwr(e, NIC_OP_WRITE, i, off, off, 65536, sig);
		}
		nsig += sig;
	}
	nic_wr_chain(wrs, 40);
	post_ok(e->qp, wrs);
	poll_n(e->cq, wc, nsig);
	assert_int_equal(nsig, 5);
	for (int k = 0; k < nsig; k++) {
		assert_int_equal(wc[k].status, NIC_WC_SUCCESS);
		assert_int_equal(wc[k].wr_id, 8 * k + 7);
	}
	for (int i = 0; i < 40; i++) {
		size_t off = (size_t)i * 65536;
		const uint8_t *p = i % 3 == 0 ? e->lbuf + off : e->rbuf + off;

		assert_int_equal(mismatch(p, 65536, 1000 + i), 65536);
	}
	assert_int_equal(P->poll(e->cq, 8, wc), 0);
}

/* Expect: wrs [first, n) complete: first with st, the rest FLUSH_ERR. */
static void expect_fail(struct env *e, int first, int n, enum nic_wc_status st)
{
	struct nic_wc wc[64];

	poll_n(e->cq, wc, n - first);
	assert_int_equal(wc[0].wr_id, first);
	assert_int_equal(wc[0].status, st);
	for (int i = 1; i < n - first; i++) {
		assert_int_equal(wc[i].wr_id, first + i);
		assert_int_equal(wc[i].status, NIC_WC_FLUSH_ERR);
	}
	assert_int_equal(P->poll(e->cq, 64, wc), 0);
}

/* One bad WR in an unsignalled chain: it and everything behind it report. */
static void fail_chain(struct env *e, int bad_at, struct nic_wr bad_wr, enum nic_wc_status st)
{
	struct nic_wr wrs[10];

	for (int i = 0; i < 10; i++)
		wrs[i] = mkwr(e, NIC_OP_WRITE, i, (size_t)i * 64, (size_t)i * 64, 64, i == 9);
	bad_wr.wr_id = bad_at;
	bad_wr.signaled = 0;
	wrs[bad_at] = bad_wr;
	nic_wr_chain(wrs, 10);
	post_ok(e->qp, wrs);
	expect_fail(e, bad_at, 10, st);
	/* In error, new WRs flush too. */
	wrs[0] = mkwr(e, NIC_OP_WRITE, 77, 0, 0, 8, 0);
	wrs[0].next = NULL;
	post_ok(e->qp, wrs);
	{
		struct nic_wc wc;

		poll_n(e->cq, &wc, 1);
		assert_int_equal(wc.wr_id, 77);
		assert_int_equal(wc.status, NIC_WC_FLUSH_ERR);
	}
	new_pair(e, QP_LEN);
}

static void test_bad_lkey(void **state)
{
	struct env *e = *state;
	struct nic_wr w = mkwr(e, NIC_OP_WRITE, 0, 0, 0, 64, 0);

	w.lkey = e->lmr.lkey + (1u << 16); /* the right slot, another generation */
	fail_chain(e, 3, w, NIC_WC_LOC_PROT_ERR);
	w = mkwr(e, NIC_OP_READ, 0, BUF_LEN - 8, 0, 16, 0); /* past the local region */
	fail_chain(e, 0, w, NIC_WC_LOC_PROT_ERR);
}

static void test_bad_rkey_range(void **state)
{
	struct env *e = *state;
	struct nic_wr w = mkwr(e, NIC_OP_WRITE, 0, 0, 0, 64, 0);

	w.rkey = e->rmr.rkey + (1u << 16);
	fail_chain(e, 2, w, NIC_WC_REM_ACCESS_ERR);
	w.rkey = 0;
	fail_chain(e, 0, w, NIC_WC_REM_ACCESS_ERR);
	w = mkwr(e, NIC_OP_READ, 0, 0, BUF_LEN - 63, 64, 0); /* one byte past the region */
	fail_chain(e, 9, w, NIC_WC_REM_ACCESS_ERR);
	w = mkwr(e, NIC_OP_WRITE, 0, 0, 0, 64, 0);
	w.remote = (uintptr_t)e->rbuf - 1; /* one byte before */
	fail_chain(e, 4, w, NIC_WC_REM_ACCESS_ERR);
}

/* A registered range that is not mapped any more: the peer's side faults. */
static void test_unmapped_remote(void **state)
{
	struct env *e = *state;
	size_t hole = BUF_LEN - 2 * PAGE;
	struct nic_wr w = mkwr(e, NIC_OP_WRITE, 0, 0, hole - PAGE, 2 * PAGE, 0);

	fill(e->lbuf, 2 * PAGE, 5);
	assert_int_equal(munmap(e->rbuf + hole, PAGE), 0);
	fail_chain(e, 6, w, NIC_WC_REM_ACCESS_ERR);
	/* What the WR copied before the hole is there. */
	assert_int_equal(mismatch(e->rbuf + hole - PAGE, PAGE, 5), PAGE);
	w = mkwr(e, NIC_OP_READ, 0, 0, hole, 8, 0);
	fail_chain(e, 0, w, NIC_WC_REM_ACCESS_ERR);
	assert_true(mmap(e->rbuf + hole, PAGE, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED);
}

/* Our side faults: LOC_PROT_ERR, found by probing after the failed call. */
static void test_unmapped_local(void **state)
{
	struct env *e = *state;
	size_t hole = BUF_LEN - PAGE;
	struct nic_wr w = mkwr(e, NIC_OP_WRITE, 0, hole, 0, 64, 0);

	assert_int_equal(munmap(e->lbuf + hole, PAGE), 0);
	fail_chain(e, 1, w, NIC_WC_LOC_PROT_ERR);
	/* A READ into a page we may only read. */
	assert_true(mmap(e->lbuf + hole, PAGE, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
			 -1, 0) != MAP_FAILED);
	w = mkwr(e, NIC_OP_READ, 0, hole, 0, 64, 0);
	fail_chain(e, 7, w, NIC_WC_LOC_PROT_ERR);
	assert_int_equal(mprotect(e->lbuf + hole, PAGE, PROT_READ | PROT_WRITE), 0);
}

/* What reg_mr allowed: a read-only region refuses WRITEs, a write-only one READs. */
static void test_access(void **state)
{
	struct env *e = *state;
	struct nic_mr ro, wo;
	struct nic_wr w;

	assert_int_equal(P->reg_mr(e->b, e->rbuf, PAGE, NIC_ACCESS_REMOTE_READ, &ro), 0);
	assert_int_equal(P->reg_mr(e->b, e->rbuf + PAGE, PAGE, NIC_ACCESS_REMOTE_WRITE, &wo), 0);
	w = mkwr(e, NIC_OP_READ, 1, 0, 0, 64, 1);
	w.rkey = ro.rkey;
	assert_int_equal(run1(e, w), NIC_WC_SUCCESS);
	w = mkwr(e, NIC_OP_WRITE, 0, 0, 0, 64, 0);
	w.rkey = ro.rkey;
	fail_chain(e, 0, w, NIC_WC_REM_ACCESS_ERR);
	w = mkwr(e, NIC_OP_WRITE, 1, 0, PAGE, 64, 1);
	w.rkey = wo.rkey;
	assert_int_equal(run1(e, w), NIC_WC_SUCCESS);
	w = mkwr(e, NIC_OP_READ, 0, 0, PAGE, 64, 0);
	w.rkey = wo.rkey;
	fail_chain(e, 0, w, NIC_WC_REM_ACCESS_ERR);
	/* Unknown bits are ignored, as loop does. */
	assert_int_equal(P->dereg_mr(e->b, &ro), 0);
	assert_int_equal(P->reg_mr(e->b, e->rbuf, PAGE, 0x80 | NIC_ACCESS_REMOTE_READ, &ro), 0);
	assert_int_equal(cma_ctx_of(e->b)->tab->mr[CMA_IDX(ro.rkey)].access,
			 NIC_ACCESS_REMOTE_READ);
}

/*
 * A key whose slot in the peer's table says what the peer's reg_mr never
 * writes is refused (REM_ACCESS_ERR) and nothing is copied: a region whose
 * length wraps past 2^64 (before, a WRITE below its base passed the range
 * check and landed there, outside the region), an access bit reg_mr
 * masks off, a base of 0.
 */
static void test_peer_slot_strict(void **state)
{
	struct env *e = *state;
	uint64_t at = (uintptr_t)e->rbuf + 2 * PAGE;
	const struct {
		uint64_t base, len;
		uint32_t access;
	} bad[] = {
		{ at, -(uint64_t)PAGE, NIC_ACCESS_ALL },   /* [at, 2^64) and [0, at - PAGE) */
		{ (uintptr_t)e->rbuf, PAGE, NIC_ACCESS_ALL | 0x80 },
		{ 0, (uintptr_t)e->rbuf + PAGE, NIC_ACCESS_ALL },
	};
	struct cma_mr_slot *s;
	struct nic_mr mr;
	struct nic_wr w;

	memset(e->lbuf, 0x5a, 64);
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(P->reg_mr(e->b, e->rbuf + 2 * PAGE, PAGE, NIC_ACCESS_ALL, &mr), 0);
		s = &cma_ctx_of(e->b)->tab->mr[CMA_IDX(mr.rkey)];
		s->base = bad[i].base;
		s->len = bad[i].len;
		s->access = bad[i].access;
		w = mkwr(e, NIC_OP_WRITE, i, 0, 0, 64, 1); /* to rbuf: outside the region */
		w.rkey = mr.rkey;
		assert_int_equal(run1(e, w), NIC_WC_REM_ACCESS_ERR);
		for (unsigned k = 0; k < 64; k++)
			assert_int_equal(e->rbuf[k], 0x22);
		new_pair(e, QP_LEN);
		assert_int_equal(P->dereg_mr(e->b, &mr), 0);
	}
}

static void test_set_error_flushes(void **state)
{
	struct env *e = *state;
	struct nic_wr wrs[21];
	struct nic_wc wc[32];

	for (int i = 0; i < 21; i++)
		wrs[i] = mkwr(e, i % 2 ? NIC_OP_READ : NIC_OP_WRITE, i, (size_t)i * 64,
			      (size_t)i * 64, 64, i == 20);
	nic_wr_chain(wrs, 21);
	post_ok(e->qp, wrs);
	assert_int_equal(P->qp_set_error(e->qp), 0);
	poll_n(e->cq, wc, 21);
	for (int i = 0; i < 21; i++) {
		assert_int_equal(wc[i].wr_id, i);
		assert_int_equal(wc[i].status, NIC_WC_FLUSH_ERR);
	}
	new_pair(e, QP_LEN);
}

/* A key a peer cached: dereg waits out the lease, the old key is refused after. */
static void test_dereg_stale_key(void **state)
{
	struct env *e = *state;
	struct cma_ctx *b = cma_ctx_of(e->b);
	uint32_t old = e->rmr.rkey;
	struct nic_mr unused;
	double t0;
	struct nic_wr w;

	assert_int_equal(run1(e, mkwr(e, NIC_OP_WRITE, 1, 0, 0, 64, 1)), NIC_WC_SUCCESS);
	assert_int_equal(b->tab->mr[CMA_IDX(old)].shared, 1);
	t0 = now_s();
	assert_int_equal(P->dereg_mr(e->b, &e->rmr), 0);
	assert_true(now_s() - t0 >= CMA_GRACE_MS / 1000.0);
	assert_int_equal(P->dereg_mr(e->b, &e->rmr), -EINVAL);
	w = mkwr(e, NIC_OP_WRITE, 0, 0, 0, 64, 0);
	w.rkey = old;
	fail_chain(e, 0, w, NIC_WC_REM_ACCESS_ERR);

	/* A key nobody cached is not shared: its dereg has nothing to wait for. */
	assert_int_equal(P->reg_mr(e->b, e->rbuf, PAGE, NIC_ACCESS_ALL, &unused), 0);
	assert_int_equal(b->tab->mr[CMA_IDX(unused.rkey)].shared, 0);
	assert_int_equal(P->dereg_mr(e->b, &unused), 0);

	assert_int_equal(P->reg_mr(e->b, e->rbuf, BUF_LEN, NIC_ACCESS_ALL, &e->rmr), 0);
	assert_int_not_equal(e->rmr.rkey, old);
	assert_int_equal(run1(e, mkwr(e, NIC_OP_WRITE, 1, 0, 0, 64, 1)), NIC_WC_SUCCESS);
}

static void on_alarm(int sig)
{
	(void)sig;
}

/*
 * A signal during dereg's wait (a SIGALRM, a SIGCHLD handler of the
 * application) does not cut it short: the peer's cached key is refused
 * once dereg returns, so the memory may go.  Before, the wait was one
 * nanosleep that a handler ended: dereg returned after ~0.4 ms and the
 * peer's next WRITE under the old key overwrote memory the application
 * had taken back (found by an audit of qp/cma).
 */
static void test_dereg_wait_survives_signal(void **state)
{
	struct env *e = *state;
	struct itimerval it = { { 0, 0 }, { 0, 300 } }; /* one SIGALRM 300 us in */
	struct sigaction sa = { .sa_handler = on_alarm, .sa_flags = SA_RESTART }, old;
	uint32_t key = e->rmr.rkey;
	struct nic_wr w;

	assert_int_equal(sigaction(SIGALRM, &sa, &old), 0);
	assert_int_equal(run1(e, mkwr(e, NIC_OP_WRITE, 1, 0, 0, 64, 1)), NIC_WC_SUCCESS);
	assert_int_equal(setitimer(ITIMER_REAL, &it, NULL), 0);
	assert_int_equal(P->dereg_mr(e->b, &e->rmr), 0);
	memset(e->rbuf, 0x5a, PAGE); /* the application's again */
	w = mkwr(e, NIC_OP_WRITE, 2, 0, 0, 64, 1);
	w.rkey = key;
	assert_int_equal(run1(e, w), NIC_WC_REM_ACCESS_ERR);
	assert_int_equal(e->rbuf[0], 0x5a);
	assert_int_equal(sigaction(SIGALRM, &old, NULL), 0);
	assert_int_equal(P->reg_mr(e->b, e->rbuf, BUF_LEN, NIC_ACCESS_ALL, &e->rmr), 0);
}

/*
 * Key lookups are system calls: one poll makes at most CMA_POLL_CALLS of
 * them, lookups and copies together (before: 256 8-byte WRITEs over 160
 * regions made ~256 lookups in one poll); and two live keys whose slots
 * share the cache's low bits (1 and 65) do not evict each other at every
 * WR (before: a lookup per WR).  Found by an audit of qp/cma.
 */
static void test_key_lookups_bounded(void **state)
{
	enum { NREG = 160, NWR = QP_LEN };
	static struct nic_mr mrs[NREG];
	static struct nic_wr wrs[NWR];
	struct env *e = *state;
	struct cma_counters c0, c1;
	struct nic_wc wc[64];
	int got;

	for (unsigned i = 0; i < NREG; i++)
		assert_int_equal(P->reg_mr(e->b, e->rbuf + (size_t)i * PAGE, PAGE, NIC_ACCESS_ALL,
					   &mrs[i]), 0);
	for (int i = 0; i < NWR; i++)
		wrs[i] = nic_wr_of(NIC_OP_WRITE, (uint64_t)i, e->lbuf + (size_t)i * 8,
				   e->rbuf + (size_t)(i % NREG) * PAGE + 8 * (size_t)(i / NREG), 8,
				   e->lmr.lkey, mrs[i % NREG].rkey, i == NWR - 1);
	nic_wr_chain(wrs, NWR);
	counters(e->a, &c0);
	post_ok(e->qp, wrs);
	got = P->poll(e->cq, 1, wc);
	counters(e->a, &c1);
	print_message("one poll: %llu key lookups, %llu copies\n",
		      (unsigned long long)(c1.key_fetches - c0.key_fetches),
		      (unsigned long long)(c1.copy_calls - c0.copy_calls));
	assert_true(c1.key_fetches - c0.key_fetches + c1.copy_calls - c0.copy_calls <=
		    CMA_POLL_CALLS);
	if (got == 0)
		poll_n(e->cq, wc, 1);
	assert_int_equal(wc[0].status, NIC_WC_SUCCESS);
	for (unsigned i = 0; i < NREG; i++)
		assert_int_equal(P->dereg_mr(e->b, &mrs[i]), 0);

	/* Two live keys in slots 64 apart: the rest registered and let go. */
	for (unsigned i = 0; i < 65; i++)
		assert_int_equal(P->reg_mr(e->b, e->rbuf + (size_t)i * PAGE, PAGE, NIC_ACCESS_ALL,
					   &mrs[i]), 0);
	for (unsigned i = 1; i < 64; i++)
		assert_int_equal(P->dereg_mr(e->b, &mrs[i]), 0); /* never used: no wait */
	assert_int_equal(CMA_IDX(mrs[64].rkey) - CMA_IDX(mrs[0].rkey), 64);
	for (int i = 0; i < NWR; i++) {
		unsigned r = i & 1 ? 64 : 0;

		wrs[i] = nic_wr_of(NIC_OP_WRITE, (uint64_t)i, e->lbuf + (size_t)i * 8,
				   e->rbuf + (size_t)r * PAGE + 8 * (size_t)(i / 2), 8, e->lmr.lkey,
				   mrs[r].rkey, i == NWR - 1);
	}
	nic_wr_chain(wrs, NWR);
	counters(e->a, &c0);
	post_ok(e->qp, wrs);
	poll_n(e->cq, wc, 1);
	assert_int_equal(wc[0].status, NIC_WC_SUCCESS);
	counters(e->a, &c1);
	print_message("two keys sharing a set, %d alternating WRITEs: %llu key lookups\n", NWR,
		      (unsigned long long)(c1.key_fetches - c0.key_fetches));
	assert_true(c1.key_fetches - c0.key_fetches < 32); /* a lease renewal now and then */
	assert_int_equal(P->dereg_mr(e->b, &mrs[0]), 0);
	assert_int_equal(P->dereg_mr(e->b, &mrs[64]), 0);
}

/* The target destroyed our responder QP: the next key fetch says so. */
static void test_responder_gone(void **state)
{
	struct env *e = *state;
	struct nic_wr w = mkwr(e, NIC_OP_WRITE, 0, 0, 0, 64, 0);

	assert_int_equal(run1(e, mkwr(e, NIC_OP_WRITE, 1, 0, 0, 64, 1)), NIC_WC_SUCCESS);
	P->qp_destroy(e->rqp);
	e->rqp = NULL;
	usleep((CMA_LEASE_MS + 1) * 1000); /* measured: the cached key's lease runs out */
	fail_chain(e, 0, w, NIC_WC_RETRY_EXC_ERR);
}

static void test_overflow(void **state)
{
	struct env *e = *state;
	struct nic_wr wrs[8], *bad = NULL;
	struct nic_cq *small;
	struct nic_qp *qp, *rqp;
	struct nic_wc wc[8];
	struct cma_counters c;

	new_pair(e, 4);
	for (int i = 0; i < 5; i++)
		wrs[i] = mkwr(e, NIC_OP_WRITE, i, 0, 0, 8, 1);
	nic_wr_chain(wrs, 5);
	assert_int_equal(P->post(e->qp, wrs, &bad), -ENOMEM);
	assert_ptr_equal(bad, &wrs[4]);
	poll_n(e->cq, wc, 4);
	counters(e->a, &c);
	assert_int_equal(c.sq_overflows, 1);

	/* A CQ of 2 with 4 signalled WRs: the caller broke its quota. */
	assert_int_equal(P->cq_create(e->a, 2, &small), 0);
	assert_int_equal(P->qp_create(e->a, small, 8, &qp), 0);
	assert_int_equal(P->qp_create(e->b, e->rcq, 1, &rqp), 0);
	connect_pair(e->a, qp, e->b, rqp);
	nic_wr_chain(wrs, 4);
	post_ok(qp, wrs);
	assert_int_equal(P->poll(small, 8, wc), -EOVERFLOW);
	assert_int_equal(P->poll(small, 8, wc), 2);
	P->qp_destroy(rqp);
	P->cq_destroy(small); /* frees qp too */
	counters(e->a, &c);
	assert_int_equal(c.cq_overflows, 2);
	new_pair(e, QP_LEN);
}

static void test_connect_checks(void **state)
{
	struct env *e = *state;
	struct nic_qp *qp;
	struct nic_addr ba, bad;
	struct nic_qp_info ri;
	struct nic_wr w = mkwr(e, NIC_OP_WRITE, 0, 0, 0, 8, 1), *badwr = NULL;

	assert_int_equal(P->qp_create(e->a, e->cq, 8, &qp), 0);
	assert_int_equal(P->post(qp, &w, &badwr), -ENOTCONN);
	assert_ptr_equal(badwr, &w);
	P->addr(e->b, &ba);
	P->qp_info(e->rqp, &ri);
	memset(&bad, 0, sizeof(bad));
	memcpy(bad.bytes, "LOOP", 4);
	assert_int_equal(P->qp_connect(qp, &bad, &ri), -EINVAL);
	assert_int_equal(P->qp_connect(qp, &ba, NULL), -EINVAL);
	bad = ba;
	bad.bytes[24] ^= 1; /* another boot id: another host */
	assert_int_equal(P->qp_connect(qp, &bad, &ri), -EHOSTUNREACH);
	bad = ba;
	bad.bytes[8] ^= 1; /* another PID namespace */
	assert_int_equal(P->qp_connect(qp, &bad, &ri), -EHOSTUNREACH);
	assert_int_equal(P->qp_connect(qp, &ba, &ri), 0);
	assert_int_equal(P->qp_connect(qp, &ba, &ri), -EISCONN);
	P->qp_destroy(qp);
}

static const uint8_t not_probe = 0x11;

static void test_reachable_refusals(void **state)
{
	struct env *e = *state;
	struct nic_addr ba, a;
	struct cma_id id;
	char why[512];
	uint8_t *gone;
	pid_t pid;
	int st;

	P->addr(e->b, &ba);
	assert_int_equal(cma_addr_decode(&ba, &id), 0);

	a = ba;
	a.bytes[30] ^= 0x80;
	assert_int_equal(P->reachable(e->a, &a, why, sizeof(why)), -EHOSTUNREACH);
	print_message("  boot id: %s\n", why);
	assert_non_null(strstr(why, "another host"));

	a = ba;
	a.bytes[9] ^= 1;
	assert_int_equal(P->reachable(e->a, &a, why, sizeof(why)), -EHOSTUNREACH);
	print_message("  pid ns: %s\n", why);
	assert_non_null(strstr(why, "PID namespace"));

	a = ba;
	a.bytes[0] = 'X';
	assert_int_equal(P->reachable(e->a, &a, why, sizeof(why)), -EINVAL);

	id.probe = (uintptr_t)&not_probe;
	cma_addr_encode(&id, &a);
	assert_int_equal(P->reachable(e->a, &a, why, sizeof(why)), -EPROTO);
	print_message("  wrong byte: %s\n", why);

	gone = map(PAGE);
	munmap(gone, PAGE);
	id.probe = (uintptr_t)gone;
	cma_addr_encode(&id, &a);
	assert_int_equal(P->reachable(e->a, &a, why, sizeof(why)), -EFAULT);
	print_message("  unmapped probe: %s\n", why);
	assert_non_null(strstr(why, "not mapped"));

	/* A peer that exited (and was reaped). */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(0);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_int_equal(cma_addr_decode(&ba, &id), 0);
	id.pid = (uint32_t)pid;
	cma_addr_encode(&id, &a);
	assert_int_equal(P->reachable(e->a, &a, why, sizeof(why)), -ESRCH);
	print_message("  exited: %s\n", why);
	assert_non_null(strstr(why, "exited"));
	/* A live process with another start time under that pid: ourselves. */
	id.pid = (uint32_t)getpid();
	id.start ^= 1;
	cma_addr_encode(&id, &a);
	assert_int_equal(P->reachable(e->a, &a, why, sizeof(why)), -ESRCH);
}

/* ----------------------------------------------------- fake /proc: reasons */

static void put(const char *dir, const char *rel, const char *text)
{
	char path[512], cmd[600];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	snprintf(cmd, sizeof(cmd), "mkdir -p \"$(dirname '%s')\"", path);
	assert_int_equal(system(cmd), 0);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static const char *status_of(unsigned uid, int seccomp, const char *capeff, char *buf, size_t len)
{
	snprintf(buf, len,
		 "Name:\tx\nUid:\t%u\t%u\t%u\t%u\nGid:\t%u\t%u\t%u\t%u\nCapEff:\t%s\nSeccomp:\t%d\n",
		 uid, uid, uid, uid, uid, uid, uid, uid, capeff, seccomp);
	return buf;
}

static void test_explanations(void **state)
{
	char dir[] = "/tmp/ferry-cma-proc-XXXXXX", why[1024], st[256], cmd[600];
	struct cma_id peer = { .pid = 4242, .probe = 0x1000 };

	(void)state;
	assert_non_null(mkdtemp(dir));
	cma_host_set_proc_root(dir);

	/* Yama scope 1, same user. */
	put(dir, "sys/kernel/yama/ptrace_scope", "1\n");
	put(dir, "self/status", status_of(1000, 0, "0000000000000000", st, sizeof(st)));
	put(dir, "4242/status", status_of(1000, 0, "0000000000000000", st, sizeof(st)));
	cma_explain(EPERM, &peer, why, sizeof(why));
	print_message("  scope 1: %s\n", why);
	assert_non_null(strstr(why, "ptrace_scope is 1"));
	assert_non_null(strstr(why, "FERRY_CMA_ALLOW_ANY=1"));
	assert_null(strstr(why, "different users"));

	/* Another user, no CAP_SYS_PTRACE, scope 0. */
	put(dir, "sys/kernel/yama/ptrace_scope", "0\n");
	put(dir, "4242/status", status_of(1001, 0, "0000000000000000", st, sizeof(st)));
	cma_explain(EPERM, &peer, why, sizeof(why));
	print_message("  uid: %s\n", why);
	assert_non_null(strstr(why, "different users"));
	assert_non_null(strstr(why, "uid 1001/1001/1001"));

	/* Another user, but we have CAP_SYS_PTRACE: not the uid then; seccomp. */
	put(dir, "self/status", status_of(1000, 2, "0000000000080000", st, sizeof(st)));
	cma_explain(EPERM, &peer, why, sizeof(why));
	print_message("  seccomp: %s\n", why);
	assert_null(strstr(why, "different users"));
	assert_non_null(strstr(why, "seccomp"));

	/* Scope 3. */
	put(dir, "sys/kernel/yama/ptrace_scope", "3\n");
	put(dir, "self/status", status_of(1000, 0, "0000000000000000", st, sizeof(st)));
	put(dir, "4242/status", status_of(1000, 0, "0000000000000000", st, sizeof(st)));
	cma_explain(EPERM, &peer, why, sizeof(why));
	assert_non_null(strstr(why, "until reboot"));

	/* No Yama, same user, nothing found: the remaining suspects. */
	snprintf(cmd, sizeof(cmd), "rm -f %s/sys/kernel/yama/ptrace_scope", dir);
	assert_int_equal(system(cmd), 0);
	cma_explain(EPERM, &peer, why, sizeof(why));
	print_message("  other: %s\n", why);
	assert_non_null(strstr(why, "non-dumpable"));

	cma_host_set_proc_root(NULL);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

/* ---------------------------------------------------------- two processes */

enum { C_FILL = 1, C_VERIFY, C_UNMAP, C_EXIT };

struct cmd {
	uint32_t op;
	uint64_t a, b, c;
};

struct hello {
	struct nic_addr addr;
	struct nic_qp_info qi;
	uint32_t rkey;
	uint64_t buf;
};

struct child {
	pid_t pid;
	int to, from;
	struct hello h;
};

static int xread(int fd, void *p, size_t n)
{
	return read(fd, p, n) == (ssize_t)n ? 0 : -1;
}

static int xwrite(int fd, const void *p, size_t n)
{
	return write(fd, p, n) == (ssize_t)n ? 0 : -1;
}

/* The target: a context, a responder QP connected to the parent's, a buffer. */
static int child_main(int in, int out, size_t len)
{
	struct nic *b;
	struct nic_cq *cq;
	struct nic_qp *rqp;
	struct nic_mr mr;
	struct hello peer, me;
	struct cmd c;
	uint8_t *buf;

	if (xread(in, &peer, sizeof(peer)))
		return 1;
	if (P->open("cma", &b) || P->cq_create(b, 4, &cq) || P->qp_create(b, cq, 1, &rqp))
		return 2;
	if (P->qp_connect(rqp, &peer.addr, &peer.qi))
		return 3;
	buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED || P->reg_mr(b, buf, len, NIC_ACCESS_ALL, &mr))
		return 4;
	memset(buf, 0, len); /* faulted in: copies run at their steady speed */
	memset(&me, 0, sizeof(me));
	P->addr(b, &me.addr);
	P->qp_info(rqp, &me.qi);
	me.rkey = mr.rkey;
	me.buf = (uintptr_t)buf;
	if (xwrite(out, &me, sizeof(me)))
		return 5;
	while (xread(in, &c, sizeof(c)) == 0) {
		int64_t rc = 0;

		switch (c.op) {
		case C_FILL:
			fill(buf + c.b, c.c, c.a);
			break;
		case C_VERIFY:
			rc = (int64_t)mismatch(buf + c.b, c.c, c.a);
			break;
		case C_UNMAP:
			rc = munmap(buf + c.a, c.b);
			break;
		case C_EXIT:
			P->dereg_mr(b, &mr);
			P->close(b);
			xwrite(out, &rc, sizeof(rc));
			return 0;
		}
		if (xwrite(out, &rc, sizeof(rc)))
			return 6;
	}
	return 7;
}

static void child_start(struct child *ch, struct nic *a, struct nic_qp *qp, size_t len)
{
	int down[2], up[2];
	struct hello me;

	assert_int_equal(pipe(down), 0);
	assert_int_equal(pipe(up), 0);
	ch->pid = fork();
	assert_true(ch->pid >= 0);
	if (ch->pid == 0) {
		close(down[1]);
		close(up[0]);
		_exit(child_main(down[0], up[1], len));
	}
	close(down[0]);
	close(up[1]);
	ch->to = down[1];
	ch->from = up[0];
	memset(&me, 0, sizeof(me));
	P->addr(a, &me.addr);
	P->qp_info(qp, &me.qi);
	assert_int_equal(xwrite(ch->to, &me, sizeof(me)), 0);
	assert_int_equal(xread(ch->from, &ch->h, sizeof(ch->h)), 0);
	assert_int_equal(P->qp_connect(qp, &ch->h.addr, &ch->h.qi), 0);
}

static int64_t child_cmd(struct child *ch, uint32_t op, uint64_t a, uint64_t b, uint64_t c)
{
	struct cmd m = { op, a, b, c };
	int64_t rc;

	assert_int_equal(xwrite(ch->to, &m, sizeof(m)), 0);
	assert_int_equal(xread(ch->from, &rc, sizeof(rc)), 0);
	return rc;
}

static void child_stop(struct child *ch)
{
	int st;

	child_cmd(ch, C_EXIT, 0, 0, 0);
	close(ch->to);
	close(ch->from);
	assert_int_equal(waitpid(ch->pid, &st, 0), ch->pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

/* The initiator's side of a two-process test. */
struct side {
	struct nic *a;
	struct nic_cq *cq;
	struct nic_qp *qp;
	uint8_t *buf;
	size_t len;
	struct nic_mr mr;
	struct child ch;
};

static void side_open(struct side *s, size_t len)
{
	memset(s, 0, sizeof(*s));
	assert_int_equal(P->open("cma", &s->a), 0);
	assert_int_equal(P->cq_create(s->a, CQ_LEN, &s->cq), 0);
	assert_int_equal(P->qp_create(s->a, s->cq, QP_LEN, &s->qp), 0);
	s->len = len;
	s->buf = map(len);
	memset(s->buf, 0, len);
	assert_int_equal(P->reg_mr(s->a, s->buf, len, NIC_ACCESS_ALL, &s->mr), 0);
	child_start(&s->ch, s->a, s->qp, len);
}

static void side_close(struct side *s)
{
	P->close(s->a);
	munmap(s->buf, s->len);
}

static struct nic_wr side_wr(const struct side *s, enum nic_op op, uint64_t id, size_t loff,
			     size_t roff, uint32_t len, int sig)
{
	return nic_wr_of(op, id, s->buf + loff, (void *)(uintptr_t)(s->ch.h.buf + roff), len,
			 s->mr.lkey, s->ch.h.rkey, sig);
}

static int side_run1(struct side *s, struct nic_wr w)
{
	struct nic_wc wc;

	w.next = NULL;
	w.signaled = 1;
	post_ok(s->qp, &w);
	poll_n(s->cq, &wc, 1);
	assert_int_equal(wc.wr_id, w.wr_id);
	return wc.status;
}

static void test_twoproc_random(void **state)
{
	size_t len = BIG + PAGE;
	struct side s;
	uint64_t r = 2024;
	double t0 = now_s(), bytes = 0;

	(void)state;
	side_open(&s, len);
	for (int i = 0; i < 24; i++) {
		uint32_t n = i < 2 ? 1 : i < 4 ? BIG : log_len(&r, BIG);
		size_t loff = splitmix(&r) % (len - n + 1);
		size_t roff = splitmix(&r) % (len - n + 1);
		uint64_t seed = splitmix(&r);

		if (i & 1) {
			fill(s.buf + loff, n, seed);
			assert_int_equal(side_run1(&s, side_wr(&s, NIC_OP_WRITE, i, loff, roff, n, 1)),
					 NIC_WC_SUCCESS);
			assert_int_equal(child_cmd(&s.ch, C_VERIFY, seed, roff, n), n);
		} else {
			assert_int_equal(child_cmd(&s.ch, C_FILL, seed, roff, n), 0);
			assert_int_equal(side_run1(&s, side_wr(&s, NIC_OP_READ, i, loff, roff, n, 1)),
					 NIC_WC_SUCCESS);
			assert_int_equal(mismatch(s.buf + loff, n, seed), n);
		}
		bytes += n;
	}
	print_message("  24 transfers, %.0f MiB checked, %.2f s\n", bytes / (1 << 20), now_s() - t0);
	child_stop(&s.ch);
	side_close(&s);
}

static void test_twoproc_unmapped(void **state)
{
	size_t len = 1u << 20;
	struct side s;
	struct nic_wr wrs[6];
	struct nic_wc wc[8];

	(void)state;
	side_open(&s, len);
	assert_int_equal(child_cmd(&s.ch, C_UNMAP, 8 * PAGE, PAGE, 0), 0);
	for (int i = 0; i < 6; i++)
		wrs[i] = side_wr(&s, NIC_OP_WRITE, i, (size_t)i * 4 * PAGE, (size_t)i * 4 * PAGE,
				 4 * PAGE, i == 5);
	nic_wr_chain(wrs, 6);
	post_ok(s.qp, wrs);
	poll_n(s.cq, wc, 4); /* 0 and 1 are unsignalled */
	assert_int_equal(wc[0].wr_id, 2); /* [8, 12) pages: the hole */
	assert_int_equal(wc[0].status, NIC_WC_REM_ACCESS_ERR);
	for (int i = 1; i < 4; i++)
		assert_int_equal(wc[i].status, NIC_WC_FLUSH_ERR);
	assert_int_equal(child_cmd(&s.ch, C_VERIFY, 31, 0, 0), 0); /* the child is fine */
	child_stop(&s.ch);
	side_close(&s);
}

/*
 * The target dies while 256 MiB of WRITEs are in flight: errors, never a
 * hang.  It is killed (and reaped) once the first WR is done, so the
 * others meet a dead peer whatever the copy rate (a kill 10 ms after the
 * post came too late on a host that copied all 256 MiB in 18 ms).
 */
static void test_twoproc_peer_exits(void **state)
{
	size_t len = 16u << 20;
	struct side s;
	struct nic_wr wrs[32];
	struct nic_wc wc[32];
	double t0;
	int st, ok = 0;

	(void)state;
	side_open(&s, len);
	for (int i = 0; i < 32; i++)
		wrs[i] = side_wr(&s, NIC_OP_WRITE, i, 0, 0, 8u << 20, 1);
	nic_wr_chain(wrs, 32);
	t0 = now_s();
	post_ok(s.qp, wrs);
	poll_n(s.cq, wc, 1); /* a poll copies at most CMA_POLL_BYTES_MAX (768 KiB) */
	assert_int_equal(kill(s.ch.pid, SIGKILL), 0);
	assert_int_equal(waitpid(s.ch.pid, &st, 0), s.ch.pid);
	assert_true(WIFSIGNALED(st));
	poll_n(s.cq, wc + 1, 31);
	while (ok < 32 && wc[ok].status == NIC_WC_SUCCESS)
		ok++;
	print_message("  %d WRs done before the peer died, then %s; %.3f s\n", ok,
		      ok < 32 ? (wc[ok].status == NIC_WC_RETRY_EXC_ERR ? "RETRY_EXC_ERR" : "?")
			      : "nothing", now_s() - t0);
	assert_int_equal(ok, 1);
	assert_int_equal(wc[ok].status, NIC_WC_RETRY_EXC_ERR);
	for (int i = ok + 1; i < 32; i++)
		assert_int_equal(wc[i].status, NIC_WC_FLUSH_ERR);
	close(s.ch.to);
	close(s.ch.from);
	/* And a new WR to the dead peer fails at once too. */
	P->qp_destroy(s.qp);
	side_close(&s);
}

/*
 * A real EPERM: a child that drops to uid/gid 65534 initiates to us (root):
 * the kernel refuses, reachable() says the users differ, a WRITE completes
 * REM_PERM_ERR.  Needs root (to change uid).
 */
static void test_eperm_other_uid(void **state)
{
	struct env *e = *state;
	int up[2], st;
	char why[512] = "";
	pid_t pid;

	if (geteuid() != 0) {
		print_message("  not root: cannot make a process of another uid; skipped\n");
		skip();
	}
	assert_int_equal(pipe(up), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct nic *a;
		struct nic_cq *cq;
		struct nic_qp *qp;
		struct nic_mr mr;
		struct nic_addr ba;
		struct nic_qp_info ri;
		struct nic_wc wc;
		struct nic_wr w;
		char msg[512] = "";
		int rc, code = 0;

		close(up[0]);
		if (setgid(65534) || setuid(65534))
			_exit(10);
		if (P->open("cma", &a) || P->cq_create(a, 4, &cq) || P->qp_create(a, cq, 4, &qp))
			_exit(11);
		P->addr(e->b, &ba);
		P->qp_info(e->rqp, &ri);
		rc = P->reachable(a, &ba, msg, sizeof(msg));
		if (rc != -EPERM)
			code = 12;
		if (write(up[1], msg, sizeof(msg)) != (ssize_t)sizeof(msg))
			_exit(13);
		if (P->qp_connect(qp, &ba, &ri) || P->reg_mr(a, msg, sizeof(msg), NIC_ACCESS_ALL, &mr))
			_exit(14);
		w = nic_wr_of(NIC_OP_WRITE, 5, msg, e->rbuf, 8, mr.lkey, e->rmr.rkey, 1);
		if (P->post(qp, &w, NULL))
			_exit(15);
		while ((rc = P->poll(cq, 1, &wc)) == 0)
			;
		if (rc != 1 || wc.status != NIC_WC_REM_PERM_ERR)
			code = 16;
		_exit(code);
	}
	close(up[1]);
	assert_int_equal(read(up[0], why, sizeof(why)), (ssize_t)sizeof(why));
	close(up[0]);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	print_message("  uid 65534 -> uid 0: %s\n", why);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	assert_non_null(strstr(why, "EPERM"));
	assert_non_null(strstr(why, "different users"));
}

static char logged[1024];

static void sink(void *arg, int level, const char *msg)
{
	(void)arg;
	(void)level;
	snprintf(logged + strlen(logged), sizeof(logged) - strlen(logged), "%s\n", msg);
}

/* FERRY_CMA_ALLOW_ANY=1: the process allows any ptracer of its uid, loudly. */
static void test_allow_any(void **state)
{
	pid_t pid;
	int st;

	(void)state;
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct nic *n;

		log_set_sink(sink, NULL);
		setenv(CMA_ENV_ALLOW_ANY, "1", 1);
		if (P->open("cma", &n))
			_exit(1);
		P->close(n);
		fprintf(stderr, "  logged: %s", logged);
		_exit(strstr(logged, CMA_ENV_ALLOW_ANY "=1") ? 0 : 2);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, env_setup, env_teardown)
	const struct CMUnitTest tests[] = {
		T(test_basics),
		T(test_self_random),
		T(test_small_write_one_call),
		T(test_iovec_batch),
		T(test_iovec_merge),
		T(test_poll_budget),
		T(test_selective_signalling),
		T(test_bad_lkey),
		T(test_bad_rkey_range),
		T(test_unmapped_remote),
		T(test_unmapped_local),
		T(test_access),
		T(test_peer_slot_strict),
		T(test_set_error_flushes),
		T(test_dereg_stale_key),
		T(test_dereg_wait_survives_signal),
		T(test_key_lookups_bounded),
		T(test_responder_gone),
		T(test_overflow),
		T(test_connect_checks),
		T(test_reachable_refusals),
		cmocka_unit_test(test_explanations),
		cmocka_unit_test(test_twoproc_random),
		cmocka_unit_test(test_twoproc_unmapped),
		cmocka_unit_test(test_twoproc_peer_exits),
		T(test_eperm_other_uid),
		cmocka_unit_test(test_allow_any),
	};
#undef T

	if (getenv("FERRY_TEST_ONLY")) /* one test (or a glob) */
		cmocka_set_test_filter(getenv("FERRY_TEST_ONLY"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
