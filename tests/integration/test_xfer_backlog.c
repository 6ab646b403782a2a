/* SPDX-License-Identifier: MIT */
/*
 * White box: handover.c xfer_backlogs takes slices waiting in xfer_wait
 * while the ring back to their owner is full (the originals go to
 * xfer_back): none is lost and their request ends.  Before (found by an
 * audit), the head was still on xfer_wait when xfer_take linked it into
 * xfer_back, and the pop that followed lost every other waiting slice
 * (head NULL, count > 0): their requests never ended and the core never
 * slept again.
 * The engine's cores are stopped first, so this thread plays core 1.
 */
#include <stdlib.h>

#include "tests/harness/harness.h"

static void test_backlog_with_full_return_ring(void **state)
{
	struct ferry_opts o;
	struct ferry_engine *e;
	struct ferry_core *a, *b;
	struct ferry_seg *seg = calloc(1, sizeof(*seg));
	struct rq_batch *bt = aligned_alloc(64, sizeof(*bt) + 64);
	struct ferry_rq *rq = aligned_alloc(64, sizeof(*rq));
	enum { N = 3, L = 4096 };
	unsigned filled = 0;

	(void)state;
	pair_opts(&o, "0-1");
	assert_int_equal(ferry_engine_create(&o, &e), 0);
	a = e->cores[0];
	b = e->cores[1];
	core_stop(a);
	core_stop(b);

	memset(bt, 0, sizeof(*bt));
	bt->pending = 1;
	memset(rq, 0, sizeof(*rq));
	rq->len = N * L;
	rq->nslices = N;
	rq->remaining = N * L;
	rq->batch = bt;
	rq->seg = seg; /* no endpoint on any core: the copies end -EHOSTDOWN */

	/* Core 0's incoming ring from core 1 is full: returns go to xfer_back. */
	while (ferry_ring_put(&a->xfer_in[1], (void *)(uintptr_t)0x1001))
		filled++;
	print_message("return ring full after %u entries\n", filled);

	/* N of core 0's slices handed to core 1, waiting there for its pool. */
	for (unsigned i = 0; i < N; i++) {
		struct slice *f = slice_get(&a->pool);

		assert_non_null(f);
		f->rq = rq;
		f->len = L;
		f->home = 0;
		slice_list_push(&b->xfer_wait, f);
	}
	core_drain_xfer(b);
	print_message("after core_drain_xfer: xfer_wait count %u head %p, xfer_back count %u, "
		      "rq remaining %llu state %d\n",
		      b->xfer_wait.count, (void *)b->xfer_wait.head, b->xfer_back.count,
		      (unsigned long long)rq->remaining, rq->state);
	assert_int_equal(b->xfer_wait.count, 0);
	assert_int_equal(b->xfer_back.count, N);
	assert_int_equal(rq->remaining, 0);
	/* not destroyed: the rings hold dummies and core 0's pool lent slices */
}

/* The engine above is left as the test made it (dummy slices in its rings,
 * core 0's pool lent out): not destroyed, so LeakSanitizer has nothing to
 * say here; ASan still checks every access. */
__attribute__((visibility("default"))) const char *__lsan_default_options(void);
__attribute__((visibility("default"))) const char *__lsan_default_options(void)
{
	return "detect_leaks=0";
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_backlog_with_full_return_ring),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
