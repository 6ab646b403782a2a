/* SPDX-License-Identifier: MIT */
/*
 * Soak under faults on the software NIC: two engines in one process, three
 * ports on three threads, log-uniform sizes from 1 B to 1 MiB, READ and
 * WRITE at random, with the loop NIC of every initiator core injecting ~1 %
 * error completions, lost completions and QP-fatal events.  Every request
 * must end DONE (every byte checked) or FAILED/TIMEOUT with a transport
 * reason; nothing hangs; afterwards the engine's accounting is back at zero:
 * no slice in flight, CQ quota empty, slice pools full, no provider error.
 *
 * FERRY_SOAK_REQUESTS (default 20000) is the number of requests of the main
 * run; `make soak` runs 10^6.  The run without retries uses a tenth of it.
 */
#include <pthread.h>
#include <time.h>

#include "tests/harness/harness.h"

#define THREADS 3
#define DEPTH 8                       /* requests in flight per thread */
#define MAX_LEN (1u << 20)
#define AREA MAX_LEN                  /* every request slot owns 1 MiB on both sides */
#define BUF ((size_t)THREADS * DEPTH * AREA)
#define DEFAULT_REQUESTS 20000
/* A batch that needs longer has hung: the slice timeout is 100 ms, a slice
 * has 10 tries and a repair costs a handshake on localhost. */
#define WAIT_MS 60000
#define MAX_ERRNO 256

static struct pair P;

struct tally {
	uint64_t requests;
	uint64_t bytes;                   /* bytes of DONE requests */
	uint64_t state[4];                /* by enum ferry_state */
	uint64_t err[MAX_ERRNO];          /* FAILED/TIMEOUT by -error */
	uint64_t bad;                     /* broken promises, see problem */
	char problem[200];                /* the first one, for the failure message */
};

struct worker {
	pthread_t thread;
	unsigned id;
	uint64_t todo;
	uint64_t seed;
	struct tally t;
};

static uint64_t soak_requests(void)
{
	const char *s = getenv("FERRY_SOAK_REQUESTS");
	unsigned long long n = s ? strtoull(s, NULL, 0) : 0;

	return n ? n : DEFAULT_REQUESTS;
}

/* Log-uniform: every power of two from 1 B to 1 MiB is as likely. */
static uint64_t random_len(uint64_t *seed)
{
	unsigned bits = (unsigned)(splitmix(seed) % 21);
	uint64_t len = (splitmix(seed) & ((1ull << bits) - 1)) | (1ull << bits);

	return len > MAX_LEN ? MAX_LEN : len;
}

/* What the fault plan can legitimately make a request end with. */
static int transport_error(int err)
{
	return err == -EHOSTUNREACH || err == -ECANCELED || err == -ENOTCONN ||
	       err == -ETIMEDOUT || err == -EHOSTDOWN;
}

static void tally_bad(struct tally *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tally_bad(struct tally *t, const char *fmt, ...)
{
	va_list ap;

	if (t->bad++)
		return;
	va_start(ap, fmt);
	vsnprintf(t->problem, sizeof(t->problem), fmt, ap);
	va_end(ap);
}

static void check_request(struct tally *t, const struct ferry_batch *b, uint32_t i,
			  const struct ferry_req *r)
{
	const void *src = r->op == FERRY_OP_WRITE ? r->local : (void *)(uintptr_t)r->remote;
	const void *dst = r->op == FERRY_OP_WRITE ? (void *)(uintptr_t)r->remote : r->local;
	struct ferry_req_status st;

	if (ferry_req_status(b, i, &st)) {
		tally_bad(t, "ferry_req_status(%u) failed", i);
		return;
	}
	t->requests++;
	t->state[st.state & 3]++;
	switch (st.state) {
	case FERRY_DONE:
		if (st.error || st.bytes != r->len)
			tally_bad(t, "DONE with error %d, %llu of %llu bytes", st.error,
				  (unsigned long long)st.bytes, (unsigned long long)r->len);
		else if (memcmp(src, dst, r->len))
			tally_bad(t, "DONE %s of %llu bytes: data differs",
				  r->op == FERRY_OP_WRITE ? "WRITE" : "READ",
				  (unsigned long long)r->len);
		t->bytes += r->len;
		break;
	case FERRY_FAILED:
	case FERRY_TIMEOUT:
		if (st.error < 0 && -st.error < MAX_ERRNO)
			t->err[-st.error]++;
		if (!transport_error(st.error))
			tally_bad(t, "%s with error %d", ferry_state_name(st.state), st.error);
		/* The state follows the reason: TIMEOUT exactly for -ETIMEDOUT. */
		if ((st.state == FERRY_TIMEOUT) != (st.error == -ETIMEDOUT))
			tally_bad(t, "%s with error %d", ferry_state_name(st.state), st.error);
		if (st.bytes >= r->len)
			tally_bad(t, "%s but %llu of %llu bytes", ferry_state_name(st.state),
				  (unsigned long long)st.bytes, (unsigned long long)r->len);
		break;
	default:
		tally_bad(t, "request still pending after its batch ended");
	}
}

/*
 * A batch that does not end is a bug: print what every core holds, so the
 * report says where the slices are.  Reads core-owned state without
 * synchronisation: only for this post-mortem, once.
 */
static void dump_hang(const struct ferry_batch *b, uint32_t n)
{
	static pthread_mutex_t once = PTHREAD_MUTEX_INITIALIZER;
	static int dumped;
	struct ferry_engine *e = P.init;

	pthread_mutex_lock(&once);
	if (dumped++) {
		pthread_mutex_unlock(&once);
		return;
	}
	for (uint32_t i = 0; i < n; i++) {
		const struct ferry_rq *rq = &b->rqs[i];

		if (__atomic_load_n(&rq->state, __ATOMIC_ACQUIRE) == FERRY_PENDING)
			print_message("hang: request %u: %llu of %llu bytes left, %llu slices in %u "
				      "parts, error %d\n", i, (unsigned long long)rq->remaining,
				      (unsigned long long)rq->len, (unsigned long long)rq->nslices,
				      rq->nparts, rq->error);
	}
	for (unsigned i = 0; i < ferry_engine_cores(e); i++) {
		struct ferry_core *c = e->cores[i];

		print_message("hang: core %u: slices_out %llu, pool %u/%u, cut fifo %u, xfer_wait "
			      "%u, xfer_back %u, cq depth %u, rail down %u paused %u\n", i,
			      (unsigned long long)c->slices_out, c->pool.avail, c->pool.size,
			      cut_fifo_count(&c->cut), c->xfer_wait.count, c->xfer_back.count,
			      (unsigned)c->tx[0].cq_quota.depth, seg_at(&P.init->segs, (uint32_t)P.seg - 1)->rail_down[i],
			      seg_at(&P.init->segs, (uint32_t)P.seg - 1)->rail_paused[i]);
		for (unsigned x = 0; x < c->eps.cap; x++) {
			struct ferry_ep *ep = core_ep_at(c, x);
			unsigned slot = ep ? ep->seg_slot : 0;

			if (!ep)
				continue;
			print_message("hang:   ep %u: pending %u, active %u, closing %u, down %u, "
				      "paused %u, errs %u\n", slot, ep->pending.count, ep->active,
				      ep->closing, ep->down, ep->rail.paused, ep->rail.errs);
			for (unsigned k = 0; k < ep->nqps; k++) {
				const struct qpx *q = ep->qps[k];

				print_message("hang:     qp %u: depth %u, head %u, tail %u, broken %u, "
					      "timed_out %u, repair_asked %u\n", k,
					      (unsigned)q->depth.depth, q->head, q->tail, q->broken,
					      q->timed_out, q->repair_asked);
			}
		}
	}
	print_message("hang: repair thread: %u jobs waiting for their back-off\n",
		      e->repair.n_later);
	pthread_mutex_unlock(&once);
}

/*
 * One port thread: batches of DEPTH requests, each slot in its own 1 MiB of
 * the thread's area on both sides, so no two requests in flight overlap.
 * cmocka's asserts cannot leave a thread: problems are tallied instead.
 */
static void *worker_main(void *arg)
{
	struct worker *w = arg;
	uint8_t *lbase = P.lbuf + (size_t)w->id * DEPTH * AREA;
	uint8_t *rbase = P.rbuf + (size_t)w->id * DEPTH * AREA;
	struct ferry_req reqs[DEPTH];
	struct ferry_port *port;
	struct ferry_batch *b;

	if (ferry_port_create(P.init, &port) || ferry_batch_create(port, DEPTH, &b)) {
		tally_bad(&w->t, "thread %u: no port or batch", w->id);
		return NULL;
	}
	while (w->todo) {
		uint32_t n = w->todo < DEPTH ? (uint32_t)w->todo : DEPTH;
		int rc;

		for (uint32_t i = 0; i < n; i++) {
			uint64_t len = random_len(&w->seed);
			enum ferry_op op = splitmix(&w->seed) & 1 ? FERRY_OP_WRITE : FERRY_OP_READ;
			uint8_t *l = lbase + (size_t)i * AREA, *r = rbase + (size_t)i * AREA;
			uint8_t *src = op == FERRY_OP_WRITE ? l : r;

			fill_pattern(src, len, splitmix(&w->seed));
			poison(op == FERRY_OP_WRITE ? r : l, src, len);
			reqs[i] = mkreq(op, l, P.seg, r, len);
		}
		rc = ferry_submit(b, reqs, n);
		if (rc != 0) {
			tally_bad(&w->t, "thread %u: ferry_submit: %d", w->id, rc);
			break;
		}
		rc = ferry_batch_wait(b, WAIT_MS);
		if (rc != 0 && rc != -EIO) {
			/* Pending requests pin the batch: leave it, report the hang. */
			tally_bad(&w->t, "thread %u: batch not ended after %d ms (%d)", w->id,
				  WAIT_MS, rc);
			dump_hang(b, n);
			return NULL;
		}
		for (uint32_t i = 0; i < n; i++)
			check_request(&w->t, b, i, &reqs[i]);
		ferry_batch_reset(b);
		w->todo -= n;
	}
	if (ferry_batch_destroy(b) || ferry_port_destroy(port))
		tally_bad(&w->t, "thread %u: batch or port destroy refused", w->id);
	return NULL;
}

static void sum_loop(struct ferry_engine *e, struct loop_counters *sum)
{
	memset(sum, 0, sizeof(*sum));
	for (unsigned i = 0; i < ferry_engine_cores(e); i++) {
		struct loop_counters c;

		loop_get_counters(ferry_engine_nic(e, i), &c);
		sum->wrs_executed += c.wrs_executed;
		sum->errs_injected += c.errs_injected;
		sum->lost_injected += c.lost_injected;
		sum->fatal_injected += c.fatal_injected;
		sum->sq_overflows += c.sq_overflows;
		sum->cq_overflows += c.cq_overflows;
	}
}

static void format_errors(const struct tally *t, char *buf, size_t len)
{
	size_t at = 0;

	buf[0] = 0;
	for (int e = 1; e < MAX_ERRNO && at < len; e++) {
		if (t->err[e])
			at += (size_t)snprintf(buf + at, len - at, " %s %llu", strerrorname_np(e),
					       (unsigned long long)t->err[e]);
	}
}

/*
 * The initiator's cores must be quiet: nothing in flight, CQ quota 0, and
 * every slice back in its pool.  The pools are core-owned: read them only
 * after closing the segment, whose command round trip to every core orders
 * the cores' last pool writes before our reads.
 */
static void assert_accounting_zero(void)
{
	wait_slices_zero(P.init);
	assert_engine_quiet(P.init);
	assert_engine_quiet(P.target);
	assert_int_equal(ferry_segment_close(P.init, P.seg), 0);
	P.seg = 0;
	for (unsigned i = 0; i < ferry_engine_cores(P.init); i++) {
		const struct slice_pool *pool = &P.init->cores[i]->pool;

		if (pool->avail != pool->size)
			fail_msg("core %u: slice pool has %u of %u slices", i, pool->avail,
				 pool->size);
	}
}

/* Run nreq requests over THREADS ports with fault plan f; fills total. */
static void soak(const char *name, uint32_t retries, uint64_t nreq, const struct loop_faults *f,
		   struct tally *total)
{
	struct worker w[THREADS];
	struct loop_counters lc;
	struct ferry_core_stats cs;
	struct ferry_opts o;
	struct timespec t0, t1;
	char errs[256];
	double secs;

	pair_opts(&o, "0-1");
	o.retries = retries;
	o.timeout_ms = 100;  /* lost completions resolve fast */
	o.slice_size = 16384; /* several slices, striped over both cores, per request */
	pair_setup(&P, &o, &o, BUF);
	engine_set_faults(P.init, f);
	memset(total, 0, sizeof(*total));
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (unsigned i = 0; i < THREADS; i++) {
		w[i] = (struct worker){ .id = i, .seed = f->seed * 1000 + i,
					.todo = nreq / THREADS + (i < nreq % THREADS) };
		assert_int_equal(pthread_create(&w[i].thread, NULL, worker_main, &w[i]), 0);
	}
	for (unsigned i = 0; i < THREADS; i++) {
		pthread_join(w[i].thread, NULL);
		total->requests += w[i].t.requests;
		total->bytes += w[i].t.bytes;
		for (unsigned s = 0; s < 4; s++)
			total->state[s] += w[i].t.state[s];
		for (unsigned e = 0; e < MAX_ERRNO; e++)
			total->err[e] += w[i].t.err[e];
		if (w[i].t.bad && !total->bad)
			memcpy(total->problem, w[i].t.problem, sizeof(total->problem));
		total->bad += w[i].t.bad;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	engine_set_faults(P.init, NULL);
	sum_loop(P.init, &lc);
	engine_stats_sum(P.init, &cs);
	format_errors(total, errs, sizeof(errs));
	print_message("soak %s: %llu requests (%.2f GiB done) in %.1f s on %u ports; faults "
		      "injected: %llu errors, %llu lost, %llu fatal (%llu WRs executed); outcomes: "
		      "%llu done, %llu failed, %llu timeout [%s ]; %llu retries, %llu qp_resets, "
		      "%llu handovers, %llu rail_pauses\n",
		      name, (unsigned long long)total->requests,
		      (double)total->bytes / (1u << 30), secs, THREADS,
		      (unsigned long long)lc.errs_injected, (unsigned long long)lc.lost_injected,
		      (unsigned long long)lc.fatal_injected, (unsigned long long)lc.wrs_executed,
		      (unsigned long long)total->state[FERRY_DONE],
		      (unsigned long long)total->state[FERRY_FAILED],
		      (unsigned long long)total->state[FERRY_TIMEOUT], errs,
		      (unsigned long long)cs.retries, (unsigned long long)cs.qp_resets,
		      (unsigned long long)cs.handovers, (unsigned long long)cs.rail_pauses);
	if (total->bad)
		fail_msg("%llu broken promises; first: %s", (unsigned long long)total->bad,
			 total->problem);
	assert_int_equal(total->requests, nreq);
	assert_int_equal(total->state[FERRY_PENDING], 0);
	assert_int_equal(lc.sq_overflows + lc.cq_overflows, 0);
	assert_int_equal(cs.provider_errors, 0);
	/* Errors and QP-fatal events did happen (lost completions are rarer:
	 * only signalled WRs can lose theirs). */
	assert_true(lc.errs_injected > 0);
	assert_true(lc.fatal_injected > 0);
	assert_accounting_zero();
	pair_teardown(&P);
}

/* With retries (the default 9) the faults stay almost invisible. */
static void test_soak_retries(void **state)
{
	struct loop_faults f = { .err_ppm = 10000, .lost_ppm = 200, .qp_fatal_ppm = 500, .seed = 42 };
	uint64_t n = soak_requests();
	struct tally t;

	(void)state;
	soak("retries=9", 9, n, &f, &t);
	/* Fewer than 1 % of the requests may end badly. */
	if ((t.state[FERRY_FAILED] + t.state[FERRY_TIMEOUT]) * 100 >= n)
		fail_msg("%llu failed + %llu timed out of %llu requests: 1 %% or more",
			 (unsigned long long)t.state[FERRY_FAILED],
			 (unsigned long long)t.state[FERRY_TIMEOUT], (unsigned long long)n);
}

/* Without retries the injected errors reach the requests' status. */
static void test_soak_no_retries(void **state)
{
	/* More lost completions than above: some requests end TIMEOUT. */
	struct loop_faults f = { .err_ppm = 10000, .lost_ppm = 2000, .qp_fatal_ppm = 500, .seed = 43 };
	uint64_t n = soak_requests() / 10;
	struct tally t;

	(void)state;
	if (n < 300)
		n = 300;
	soak("retries=0", 0, n, &f, &t);
	assert_true(t.state[FERRY_DONE] > 0);
	assert_true(t.state[FERRY_FAILED] > 0);
	assert_true(t.err[EHOSTUNREACH] > 0); /* the injected NIC error itself */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_soak_retries),
		cmocka_unit_test(test_soak_no_retries),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
