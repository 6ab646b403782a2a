/* SPDX-License-Identifier: MIT */
/*
 * The per-core endpoint cache (ep_cache, SIEVE eviction) and RCU endpoint
 * teardown, on the software NIC: one initiator with room for two
 * endpoints per core and three peers.
 *
 *  - opening a third segment evicts the endpoint nobody used (SIEVE), the
 *    evicted peer frees its half of the QPs, and a request to the evicted
 *    segment reconnects it (a cache miss) and moves the right bytes;
 *  - threads hammering the three segments through a cache of two: endpoints
 *    are evicted and reconnected all the time, never under a request in
 *    flight; every request ends DONE with its bytes right, or is refused
 *    -EBUSY when every cached endpoint was busy (the documented miss);
 *    evicted endpoints are freed through call_rcu (ASan/LSan, TSan runs);
 *  - a miss on a peer that died meanwhile ends the request FAILED with the
 *    reconnect's error, without blocking the submitter;
 *  - a cache full of busy endpoints refuses an open with -EBUSY and a
 *    clear message; nothing leaks;
 *  - the cache never holds more endpoints than a core's QP table can with
 *    a spare for a repair; an eviction leaves alone an endpoint a request
 *    reached after it looked; a cancel ends a parked request at once; a
 *    rail down by itself beside an evicted one is a miss (reconnect), not
 *    a verdict; a miss on a restarted peer marks the segment stale.
 */
#include <poll.h>
#include <pthread.h>

#include "ring/base/clock.h"
#include "tests/harness/harness.h"

#define NPEERS 3
#define BUF (4u << 20)
#define THREADS 2
#define ROUNDS 150

struct peers {
	struct ferry_engine *init;
	struct ferry_engine *t[NPEERS];
	uint8_t *lbuf;
	uint8_t *rbuf[NPEERS];
	ferry_seg_t seg[NPEERS];
};

static struct peers P;

static void peers_setup(uint32_t ep_cache)
{
	struct ferry_opts o;

	pair_opts(&o, "0-1");
	o.ep_cache = ep_cache;
	memset(&P, 0, sizeof(P));
	assert_int_equal(ferry_engine_create(&o, &P.init), 0);
	P.lbuf = aligned_alloc(4096, BUF);
	assert_non_null(P.lbuf);
	assert_int_equal(ferry_mem_register(P.init, P.lbuf, BUF), 0);
	for (int i = 0; i < NPEERS; i++) {
		pair_opts(&o, "0");
		assert_int_equal(ferry_engine_create(&o, &P.t[i]), 0);
		P.rbuf[i] = aligned_alloc(4096, BUF);
		assert_non_null(P.rbuf[i]);
		memset(P.rbuf[i], 0, BUF);
		assert_int_equal(ferry_mem_register(P.t[i], P.rbuf[i], BUF), 0);
	}
}

static void peers_teardown(void)
{
	for (int i = 0; i < NPEERS; i++)
		if (P.seg[i])
			assert_int_equal(ferry_segment_close(P.init, P.seg[i]), 0);
	assert_engine_quiet(P.init);
	ferry_mem_unregister(P.init, P.lbuf);
	ferry_engine_destroy(P.init);
	for (int i = 0; i < NPEERS; i++) {
		if (P.t[i]) {
			assert_int_equal(passive_count(P.t[i]), 0);
			ferry_engine_destroy(P.t[i]);
		}
		free(P.rbuf[i]);
	}
	free(P.lbuf);
}

static void open_peer(int i)
{
	assert_int_equal(ferry_segment_open(P.init, ferry_engine_address(P.t[i]), &P.seg[i]), 0);
}

static uint64_t evictions_of(struct ferry_engine *e)
{
	uint64_t n = 0;

	for (unsigned c = 0; c < ferry_engine_cores(e); c++) {
		struct ferry_core_stats st;

		ferry_core_stats(e, c, &st);
		n += st.ep_evictions;
	}
	return n;
}

/* WRITE len bytes from local to remote on seg; the state it ended in. */
static int write_seg(struct ferry_batch *b, void *local, ferry_seg_t seg, void *remote,
		     size_t len, int *err)
{
	struct ferry_req r = mkreq(FERRY_OP_WRITE, local, seg, remote, len);
	struct ferry_req_status st;

	assert_int_equal(ferry_submit(b, &r, 1), 0);
	ferry_batch_wait(b, 30000);
	assert_int_equal(ferry_req_status(b, 0, &st), 0);
	assert_int_equal(ferry_batch_reset(b), 0);
	*err = st.error;
	return st.state;
}

static uint64_t evictions(void)
{
	return evictions_of(P.init);
}

/* Cores of the initiator holding an endpoint to peer i. */
static unsigned rails_of(int i)
{
	uint32_t slot = (uint32_t)P.seg[i] - 1;
	unsigned n = 0;

	for (unsigned c = 0; c < ferry_engine_cores(P.init); c++)
		n += seg_at(&P.init->segs, slot)->eps[c] != NULL;
	return n;
}

/* WRITE len bytes (a fresh pattern) to peer i at off; the state it ended in. */
static int write_to(struct ferry_batch *b, int i, size_t off, size_t len, uint64_t seed,
		    int *err)
{
	struct ferry_req r = mkreq(FERRY_OP_WRITE, P.lbuf + off, P.seg[i], P.rbuf[i] + off, len);
	struct ferry_req_status st;

	fill_pattern(P.lbuf + off, len, seed);
	assert_int_equal(ferry_submit(b, &r, 1), 0);
	ferry_batch_wait(b, 30000);
	assert_int_equal(ferry_req_status(b, 0, &st), 0);
	assert_int_equal(ferry_batch_reset(b), 0);
	*err = st.error;
	if (st.state == FERRY_DONE)
		assert_memory_equal(P.lbuf + off, P.rbuf[i] + off, len);
	return st.state;
}

static void test_evict_and_reconnect(void **state)
{
	struct ferry_port *port;
	struct ferry_batch *b;
	int err;

	(void)state;
	peers_setup(2);
	assert_int_equal(ferry_port_create(P.init, &port), 0);
	assert_int_equal(ferry_batch_create(port, 4, &b), 0);
	open_peer(0);
	open_peer(1);
	assert_int_equal(evictions(), 0);
	/* Peer 0 is used, peer 1 is not: the third open evicts peer 1. */
	assert_int_equal(write_to(b, 0, 0, 1 << 20, 1, &err), FERRY_DONE);
	open_peer(2);
	assert_int_equal(evictions(), 2); /* one per core */
	assert_int_equal(rails_of(0), 2);
	assert_int_equal(rails_of(1), 0);
	assert_int_equal(rails_of(2), 2);
	/* The evicted peer freed its half of our QPs. */
	assert_int_equal(passive_count(P.t[1]), 0);
	assert_true(passive_count(P.t[0]) > 0);

	/* A request to the evicted peer reconnects it (a miss) and is served. */
	assert_int_equal(write_to(b, 1, 1 << 20, 1 << 20, 2, &err), FERRY_DONE);
	assert_int_equal(rails_of(1), 2);
	assert_int_equal(evictions(), 4);
	/* Everyone still reachable, bytes right. */
	for (int i = 0; i < NPEERS; i++)
		assert_int_equal(write_to(b, i, 2u << 20, 300000, 10 + i, &err), FERRY_DONE);

	assert_int_equal(ferry_batch_destroy(b), 0);
	assert_int_equal(ferry_port_destroy(port), 0);
	peers_teardown();
}

/*
 * A miss on a peer that died meanwhile: ferry_submit does not wait for the
 * reconnect (the repair thread does it); the request ends FAILED with the
 * reconnect's error, nothing hangs, nothing is written.
 */
static void test_miss_on_dead_peer(void **state)
{
	struct ferry_req_status st;
	struct ferry_port *port;
	struct ferry_batch *b;
	struct ferry_req r;
	int err;

	(void)state;
	peers_setup(2);
	assert_int_equal(ferry_port_create(P.init, &port), 0);
	assert_int_equal(ferry_batch_create(port, 4, &b), 0);
	open_peer(0);
	open_peer(1);
	assert_int_equal(write_to(b, 0, 0, 1 << 20, 1, &err), FERRY_DONE);
	open_peer(2); /* evicts peer 1 */
	assert_int_equal(rails_of(1), 0);
	ferry_mem_unregister(P.t[1], P.rbuf[1]);
	ferry_engine_destroy(P.t[1]);
	P.t[1] = NULL;
	r = mkreq(FERRY_OP_WRITE, P.lbuf, P.seg[1], P.rbuf[1], 1 << 20);
	assert_int_equal(ferry_submit(b, &r, 1), 0);
	assert_int_equal(ferry_batch_wait(b, 30000), -EIO);
	assert_int_equal(ferry_req_status(b, 0, &st), 0);
	assert_int_equal(st.state, FERRY_FAILED);
	assert_int_equal(st.error, -ECONNREFUSED);
	assert_int_equal(st.bytes, 0);
	assert_int_equal(ferry_batch_reset(b), 0);
	/* The others still work. */
	assert_int_equal(write_to(b, 0, 0, 4096, 2, &err), FERRY_DONE);
	assert_int_equal(write_to(b, 2, 0, 4096, 3, &err), FERRY_DONE);
	assert_int_equal(ferry_batch_destroy(b), 0);
	assert_int_equal(ferry_port_destroy(port), 0);
	wait_slices_zero(P.init);
	peers_teardown();
}

struct worker {
	pthread_t th;
	unsigned id;
	unsigned done, busy;
	int unexpected; /* another error: asserted by the main thread (cmocka's
			 * failures do not work from other threads) */
};

static void *hammer(void *arg)
{
	struct worker *w = arg;
	struct ferry_port *port;
	struct ferry_batch *b;
	uint64_t seed = 100 + w->id;
	size_t half = BUF / THREADS, off = w->id * half;

	assert_int_equal(ferry_port_create(P.init, &port), 0);
	assert_int_equal(ferry_batch_create(port, 4, &b), 0);
	for (unsigned r = 0; r < ROUNDS; r++) {
		int i = (int)((r + w->id) % NPEERS), err;
		size_t len = 1 + splitmix(&seed) % (half - 1);
		int state = write_to(b, i, off, len, splitmix(&seed), &err);

		if (state == FERRY_DONE) {
			w->done++;
		} else {
			/* Only the documented miss: every cached endpoint busy. */
			if (err != -EBUSY && !w->unexpected)
				w->unexpected = err;
			w->busy++;
		}
	}
	assert_int_equal(ferry_batch_destroy(b), 0);
	assert_int_equal(ferry_port_destroy(port), 0);
	return NULL;
}

static void test_churn(void **state)
{
	struct worker w[THREADS];
	unsigned done = 0, busy = 0;

	(void)state;
	peers_setup(2);
	for (int i = 0; i < NPEERS; i++)
		open_peer(i);
	for (unsigned t = 0; t < THREADS; t++) {
		w[t] = (struct worker){ .id = t };
		assert_int_equal(pthread_create(&w[t].th, NULL, hammer, &w[t]), 0);
	}
	for (unsigned t = 0; t < THREADS; t++) {
		pthread_join(w[t].th, NULL);
		assert_int_equal(w[t].unexpected, 0);
		done += w[t].done;
		busy += w[t].busy;
	}
	print_message("churn: %u requests done, %u refused -EBUSY, %llu evictions\n", done, busy,
		      (unsigned long long)evictions());
	assert_int_equal(done + busy, THREADS * ROUNDS);
	assert_true(done > busy);
	assert_true(evictions() > 0);
	wait_slices_zero(P.init);
	peers_teardown();
}

/* Every cached endpoint busy (completions held back): an open is refused. */
static void test_all_busy(void **state)
{
	struct loop_faults lost = { .lost_ppm = 1000000, .seed = 3 };
	struct ferry_port *port;
	struct ferry_batch *b;
	struct ferry_req r[2];

	(void)state;
	peers_setup(1);
	open_peer(0);
	assert_int_equal(ferry_port_create(P.init, &port), 0);
	assert_int_equal(ferry_batch_create(port, 2, &b), 0);
	for (unsigned c = 0; c < ferry_engine_cores(P.init); c++)
		loop_set_faults(ferry_engine_nic(P.init, c), &lost);
	r[0] = mkreq(FERRY_OP_WRITE, P.lbuf, P.seg[0], P.rbuf[0], 1 << 20);
	assert_int_equal(ferry_submit(b, r, 1), 0);
	assert_int_equal(ferry_segment_open(P.init, ferry_engine_address(P.t[1]), &P.seg[1]),
			 -EBUSY);
	P.seg[1] = 0;
	for (unsigned c = 0; c < ferry_engine_cores(P.init); c++)
		loop_set_faults(ferry_engine_nic(P.init, c), NULL);
	/* The stalled request ends (slice timeout, retries) and the cache frees up. */
	ferry_batch_wait(b, 30000);
	assert_int_equal(ferry_batch_reset(b), 0);
	open_peer(1);
	assert_true(evictions() > 0);
	assert_int_equal(ferry_batch_destroy(b), 0);
	assert_int_equal(ferry_port_destroy(port), 0);
	wait_slices_zero(P.init);
	peers_teardown();
}

/*
 * ep_cache against what a core's context holds: each cached endpoint has
 * qps_per_ep QPs in the context's QP table (QP_MAX_PER_CORE, 1024), and
 * replacing a broken QP attaches the new one before the old goes.  With
 * ep_cache segments open (16 QPs each) every open works (evicting when
 * the table would overflow) and a broken QP of the last one is replaced.
 * (Before: with ep_cache 65 the 65th open failed -ENOSPC; with 64,
 * exactly a full table, no broken QP was ever replaced: the repair's
 * attach failed -ENOSPC, again and again, for as long as it stayed full.)
 */
static void cache_full_of_qps(uint32_t ep_cache)
{
	struct ferry_engine *t, *in;
	struct ferry_opts o;
	struct ferry_port *p;
	struct ferry_batch *b;
	ferry_seg_t *seg = calloc(ep_cache, sizeof(*seg));
	uint8_t *lbuf = aligned_alloc(4096, 4096), *rbuf = aligned_alloc(4096, 4096);
	struct loop_faults errs = { .err_ppm = 1000000, .seed = 5 };
	struct ferry_core_stats st;
	unsigned port;
	int rc, err;

	assert_non_null(seg);
	pair_opts(&o, "0");
	o.qps_per_ep = 16;
	o.ep_cache = ep_cache;
	assert_int_equal(ferry_engine_create(&o, &in), 0);
	pair_opts(&o, "1");
	o.listen = "0.0.0.0:0"; /* one target under ep_cache loopback addresses */
	assert_int_equal(ferry_engine_create(&o, &t), 0);
	port = (unsigned)atoi(strrchr(ferry_engine_address(t), ':') + 1);
	assert_int_equal(ferry_mem_register(in, lbuf, 4096), 0);
	assert_int_equal(ferry_mem_register(t, rbuf, 4096), 0);
	for (uint32_t i = 0; i < ep_cache; i++) {
		char addr[64];

		snprintf(addr, sizeof(addr), "127.0.1.%u:%u", 1 + i, port);
		rc = ferry_segment_open(in, addr, &seg[i]);
		if (rc)
			fail_msg("ep_cache %u: open %u: %d", ep_cache, i + 1, rc);
	}
	/* Break the QPs a request to the last one tries (it ends as it may),
	 * then let the repairs replace them. */
	assert_int_equal(ferry_port_create(in, &p), 0);
	assert_int_equal(ferry_batch_create(p, 1, &b), 0);
	loop_set_faults(ferry_engine_nic(in, 0), &errs);
	(void)write_seg(b, lbuf, seg[ep_cache - 1], rbuf, 4096, &err);
	loop_set_faults(ferry_engine_nic(in, 0), NULL);
	for (int ms = 0; ms < 5000; ms += 10) {
		ferry_core_stats(in, 0, &st);
		if (st.qp_resets)
			break;
		ferry_sleep_us(10000);
	}
	ferry_core_stats(in, 0, &st);
	if (!st.qp_resets)
		fail_msg("ep_cache %u x 16 QPs: no broken QP replaced in 5 s", ep_cache);
	assert_int_equal(write_seg(b, lbuf, seg[ep_cache - 1], rbuf, 4096, &err), FERRY_DONE);
	assert_int_equal(write_seg(b, lbuf, seg[0], rbuf, 4096, &err), FERRY_DONE);
	assert_int_equal(ferry_batch_destroy(b), 0);
	assert_int_equal(ferry_port_destroy(p), 0);
	for (uint32_t i = 0; i < ep_cache; i++)
		assert_int_equal(ferry_segment_close(in, seg[i]), 0);
	ferry_mem_unregister(in, lbuf);
	ferry_mem_unregister(t, rbuf);
	ferry_engine_destroy(in);
	ferry_engine_destroy(t);
	free(seg);
	free(lbuf);
	free(rbuf);
}

static void test_cache_full_of_qps(void **state)
{
	(void)state;
	cache_full_of_qps(63); /* 63 x 16 and a spare fit the table of 1024 */
	cache_full_of_qps(64); /* the table exactly full: no spare */
	cache_full_of_qps(65); /* more than it holds */
}

/*
 * The eviction tests' shape: an initiator whose cache holds one endpoint
 * per core (one core, 0) and two targets (core 1); lbuf is registered at
 * the initiator, rbuf at t[0].  Segments are the test's own: closed
 * before evict_set_down.
 */
struct evict_set {
	struct ferry_engine *in, *t[2];
	uint8_t *lbuf, *rbuf;
};

static void evict_set_up(struct evict_set *x, size_t len, uint32_t timeout_ms)
{
	struct ferry_opts o;

	x->lbuf = aligned_alloc(4096, len);
	x->rbuf = aligned_alloc(4096, len);
	assert_true(x->lbuf && x->rbuf);
	pair_opts(&o, "0");
	o.ep_cache = 1;
	o.timeout_ms = timeout_ms;
	assert_int_equal(ferry_engine_create(&o, &x->in), 0);
	pair_opts(&o, "1");
	for (int i = 0; i < 2; i++)
		assert_int_equal(ferry_engine_create(&o, &x->t[i]), 0);
	assert_int_equal(ferry_mem_register(x->in, x->lbuf, len), 0);
	assert_int_equal(ferry_mem_register(x->t[0], x->rbuf, len), 0);
}

static void evict_set_down(struct evict_set *x)
{
	wait_slices_zero(x->in);
	ferry_mem_unregister(x->in, x->lbuf);
	ferry_mem_unregister(x->t[0], x->rbuf);
	ferry_engine_destroy(x->in);
	for (int i = 0; i < 2; i++)
		ferry_engine_destroy(x->t[i]);
	free(x->lbuf);
	free(x->rbuf);
}

/*
 * An eviction that races a submission.  ep_keep marks the rail gone, then
 * finds the segment without references; a submitter that takes its
 * reference just after finds every rail gone and sends its part to a core
 * to wait for a reconnect (rq_rails_pick) -- the core whose endpoint is
 * being evicted, which still has it published and not yet closing, so it
 * cuts and posts the part there.  The request must not pay for that: it is
 * served (the eviction leaves an endpoint in use alone, or the part waits
 * for the reconnect).  Before, the eviction failed its slices -ECANCELED.
 * One core (so no other rail), ep_cache 1; the interleaving is made
 * deterministic by hiding the request's reference from ep_keep, as if it
 * had been taken just after ep_keep looked; completions are held back so
 * that the slices are still on the endpoint when the eviction comes.
 */
static void test_evict_races_submit(void **state)
{
	struct loop_faults lost = { .lost_ppm = 1000000, .seed = 9 };
	struct ferry_engine *in, **t;
	struct ferry_req_status st;
	struct evict_set x;
	struct ferry_port *p;
	struct ferry_batch *b;
	struct ferry_seg *s;
	ferry_seg_t seg[2];
	struct ferry_req r;
	size_t len = 256 << 10;
	uint8_t *lbuf, *rbuf;
	int rc, err;

	(void)state;
	evict_set_up(&x, len, 300); /* 300 ms: the held-back completions' QPs are failed then */
	in = x.in, t = x.t, lbuf = x.lbuf, rbuf = x.rbuf;
	assert_int_equal(ferry_segment_open(in, ferry_engine_address(t[0]), &seg[0]), 0);
	assert_int_equal(ferry_port_create(in, &p), 0);
	assert_int_equal(ferry_batch_create(p, 1, &b), 0);
	assert_int_equal(write_seg(b, lbuf, seg[0], rbuf, 4096, &err), FERRY_DONE);

	loop_set_faults(ferry_engine_nic(in, 0), &lost);
	fill_pattern(lbuf, len, 77);
	r = mkreq(FERRY_OP_WRITE, lbuf, seg[0], rbuf, len);
	assert_int_equal(ferry_submit(b, &r, 1), 0);
	for (int ms = 0; ms < 2000 && slices_in_flight(in, 0) == 0; ms++)
		ferry_sleep_us(1000);
	assert_true(slices_in_flight(in, 0) > 0); /* posted, completions held */

	/* The eviction that looked before the request took its reference. */
	s = seg_at(&in->segs, (uint32_t)seg[0] - 1);
	pthread_mutex_lock(&in->ctl_lock);
	fetch_sub_sc(s->inflight, 1);
	rc = seg_make_room(in, 0);
	fetch_add_sc(s->inflight, 1);
	pthread_mutex_unlock(&in->ctl_lock);
	seg_disconnect_flush(in);
	loop_set_faults(ferry_engine_nic(in, 0), NULL);

	ferry_batch_wait(b, 30000);
	assert_int_equal(ferry_req_status(b, 0, &st), 0);
	if (st.state != FERRY_DONE)
		fail_msg("request beside the eviction (make_room %d): state %d error %d", rc,
			 st.state, st.error);
	assert_memory_equal(lbuf, rbuf, len);
	assert_int_equal(ferry_batch_reset(b), 0);
	/* The cache is whole: another open still finds room (evicting). */
	assert_int_equal(ferry_segment_open(in, ferry_engine_address(t[1]), &seg[1]), 0);
	assert_int_equal(write_seg(b, lbuf, seg[0], rbuf, 4096, &err), FERRY_DONE);

	assert_int_equal(ferry_batch_destroy(b), 0);
	assert_int_equal(ferry_port_destroy(p), 0);
	for (int i = 0; i < 2; i++)
		assert_int_equal(ferry_segment_close(in, seg[i]), 0);
	evict_set_down(&x);
}

/*
 * ferry_batch_cancel of a request parked for a reconnect (a cache miss):
 * it ends FAILED -ECANCELED within a loop pass, like any part not yet cut,
 * without waiting for the reconnect's verdict.  Held back here by holding
 * ctl_lock (the reconnect needs it), as a peer that answers slowly would.
 * Before, the part stayed parked until the reconnect ended or timeout_ms
 * (10 s) ran out: ferry_batch_wait after the cancel timed out.
 */
static void test_cancel_parked(void **state)
{
	struct ferry_engine *in, **t;
	struct ferry_req_status st;
	struct evict_set x;
	struct ferry_port *p;
	struct ferry_batch *b;
	ferry_seg_t seg[2];
	struct ferry_req r;
	uint8_t *lbuf, *rbuf;
	int rc;

	(void)state;
	evict_set_up(&x, 4096, 10000);
	in = x.in, t = x.t, lbuf = x.lbuf, rbuf = x.rbuf;
	for (int i = 0; i < 2; i++) /* the second evicts the first */
		assert_int_equal(ferry_segment_open(in, ferry_engine_address(t[i]), &seg[i]), 0);
	assert_int_equal(ferry_port_create(in, &p), 0);
	assert_int_equal(ferry_batch_create(p, 1, &b), 0);

	pthread_mutex_lock(&in->ctl_lock); /* no reconnect meanwhile */
	r = mkreq(FERRY_OP_WRITE, lbuf, seg[0], rbuf, 4096);
	assert_int_equal(ferry_submit(b, &r, 1), 0);
	assert_int_equal(ferry_batch_wait(b, 50), -ETIMEDOUT); /* parked */
	assert_int_equal(ferry_batch_cancel(b), 0);
	rc = ferry_batch_wait(b, 1000);
	assert_int_equal(ferry_req_status(b, 0, &st), 0);
	pthread_mutex_unlock(&in->ctl_lock);
	if (rc != -EIO || st.state != FERRY_FAILED || st.error != -ECANCELED)
		fail_msg("cancelled while parked: wait %d, state %d error %d", rc, st.state,
			 st.error);
	assert_int_equal(st.bytes, 0);
	assert_int_equal(ferry_batch_reset(b), 0);

	assert_int_equal(ferry_batch_destroy(b), 0);
	assert_int_equal(ferry_port_destroy(p), 0);
	for (int i = 0; i < 2; i++)
		assert_int_equal(ferry_segment_close(in, seg[i]), 0);
	evict_set_down(&x);
}

struct close_arg {
	struct ferry_engine *e;
	ferry_seg_t seg;
	int rc;
};

static void *close_main(void *arg)
{
	struct close_arg *a = arg;

	a->rc = ferry_segment_close(a->e, a->seg);
	return NULL;
}

/*
 * A part parked for a reconnect when its segment is closed: ferry.h says
 * the close ends the requests in flight on it DONE or FAILED -ECANCELED
 * (later submissions fail -EBADF).  The parked part ended -EBADF, as if
 * it had been submitted after the close.  The reconnect is held back by
 * the target's passive_lock (its CONNECT handler needs it), as a peer that
 * answers slowly would hold it; the close runs on another thread (its
 * DISCONNECT waits for the same lock).
 */
static void test_close_parked(void **state)
{
	struct ferry_engine *in, **t;
	struct ferry_req_status st;
	struct close_arg ca;
	struct evict_set x;
	struct ferry_port *p;
	struct ferry_batch *b;
	ferry_seg_t seg[2];
	struct ferry_req r;
	pthread_t th;
	int rc;

	(void)state;
	evict_set_up(&x, 4096, 10000);
	in = x.in, t = x.t;
	for (int i = 0; i < 2; i++) /* the second evicts the first */
		assert_int_equal(ferry_segment_open(in, ferry_engine_address(t[i]), &seg[i]), 0);
	assert_int_equal(ferry_port_create(in, &p), 0);
	assert_int_equal(ferry_batch_create(p, 1, &b), 0);

	pthread_mutex_lock(&t[0]->passive_lock); /* the reconnect does not land */
	r = mkreq(FERRY_OP_WRITE, x.lbuf, seg[0], x.rbuf, 4096);
	assert_int_equal(ferry_submit(b, &r, 1), 0);
	assert_int_equal(ferry_batch_wait(b, 50), -ETIMEDOUT); /* parked */
	ca = (struct close_arg){ .e = in, .seg = seg[0] };
	assert_int_equal(pthread_create(&th, NULL, close_main, &ca), 0);
	rc = ferry_batch_wait(b, 5000);
	assert_int_equal(ferry_req_status(b, 0, &st), 0);
	pthread_mutex_unlock(&t[0]->passive_lock);
	pthread_join(th, NULL);
	assert_int_equal(ca.rc, 0);
	if (rc != -EIO || st.state != FERRY_FAILED || st.error != -ECANCELED)
		fail_msg("parked, then its segment closed: wait %d, state %d error %d", rc,
			 st.state, st.error);
	assert_int_equal(st.bytes, 0);

	assert_int_equal(ferry_batch_destroy(b), 0);
	assert_int_equal(ferry_port_destroy(p), 0);
	assert_int_equal(ferry_segment_close(in, seg[1]), 0);
	evict_set_down(&x);
}

/*
 * A rail whose device died beside one that was evicted: core 0's NIC can
 * make no QP any more (its rail goes down, by itself), core 1's endpoint
 * to the segment was evicted (its cache needed the room).  The peer is
 * not unreachable: core 1's rail, reconnected, reaches it, and new
 * requests are served there.  Before, the segment looked down on every
 * rail (only rails with an endpoint were counted) and every request
 * failed -EHOSTDOWN for as long as core 0's device stayed dead.
 */
static void test_down_rail_beside_evicted(void **state)
{
	struct loop_faults dead = { .err_ppm = 1000000, .no_new_qps = 1, .seed = 3 };
	struct loop_faults still_dead = { .no_new_qps = 1, .seed = 3 };
	struct ferry_engine *in, *t;
	struct ferry_req_status st;
	struct ferry_opts o;
	struct ferry_port *p;
	struct ferry_seg *s;
	ferry_seg_t seg;
	struct ferry_req r;
	size_t len = 1 << 20;
	uint8_t *lbuf = aligned_alloc(4096, len), *rbuf = aligned_alloc(4096, len);

	(void)state;
	pair_opts(&o, "0-1");
	o.ep_cache = 1;
	o.timeout_ms = 500;
	assert_int_equal(ferry_engine_create(&o, &in), 0);
	pair_opts(&o, "1");
	assert_int_equal(ferry_engine_create(&o, &t), 0);
	assert_int_equal(ferry_mem_register(in, lbuf, len), 0);
	assert_int_equal(ferry_mem_register(t, rbuf, len), 0);
	assert_int_equal(ferry_segment_open(in, ferry_engine_address(t), &seg), 0);
	s = seg_at(&in->segs, (uint32_t)seg - 1);
	assert_int_equal(ferry_port_create(in, &p), 0);
	r = mkreq(FERRY_OP_WRITE, lbuf, seg, rbuf, len);
	assert_int_equal(run_one_on(p, r, 10000).state, FERRY_DONE);

	/* Core 1's endpoint evicted, as an open that needed its room does. */
	pthread_mutex_lock(&in->ctl_lock);
	assert_int_equal(seg_make_room(in, 1), 0);
	pthread_mutex_unlock(&in->ctl_lock);
	seg_disconnect_flush(in);
	assert_null(s->eps[1]);

	/* Core 0's device dies: the request on it ends as it may. */
	loop_set_faults(ferry_engine_nic(in, 0), &dead);
	(void)run_one_on(p, r, 20000);
	loop_set_faults(ferry_engine_nic(in, 0), &still_dead);
	for (int ms = 0; ms < 5000 && READ_ONCE(s->rail_down[0]) != EP_DOWN; ms += 10)
		ferry_sleep_us(10000);
	assert_int_equal(READ_ONCE(s->rail_down[0]), EP_DOWN);

	for (int i = 0; i < 3; i++) {
		fill_pattern(lbuf, len, 100 + i);
		st = run_one_on(p, r, 20000);
		if (st.state != FERRY_DONE)
			fail_msg("request %d with core 0's rail down: state %d error %d (rail_down "
				 "%u %u, rail_gone %u %u, eps %d %d)", i, st.state, st.error,
				 s->rail_down[0], s->rail_down[1], s->rail_gone[0], s->rail_gone[1],
				 !!s->eps[0], !!s->eps[1]);
		assert_memory_equal(lbuf, rbuf, len);
	}
	assert_non_null(s->eps[1]); /* reconnected */

	loop_set_faults(ferry_engine_nic(in, 0), NULL);
	assert_int_equal(ferry_port_destroy(p), 0);
	assert_int_equal(ferry_segment_close(in, seg), 0);
	wait_slices_zero(in);
	ferry_mem_unregister(in, lbuf);
	ferry_mem_unregister(t, rbuf);
	ferry_engine_destroy(in);
	ferry_engine_destroy(t);
	free(lbuf);
	free(rbuf);
}

/*
 * A miss on a peer that restarted meanwhile (a new incarnation on the same
 * address): the reconnect's handshake is refused -ESTALE, and the segment
 * is marked stale as when a repair's handshake is: its requests end
 * -ESTALE from then on without another reconnect, and opening the address
 * again gives a new handle.  Before, the segment stayed unmarked: every
 * request parked and made a handshake of its own to learn it again.
 */
static void test_miss_on_restarted_peer(void **state)
{
	struct ferry_engine *in, **t;
	struct ferry_req_status st;
	struct evict_set x;
	struct ferry_opts o;
	struct ferry_port *p;
	struct ferry_seg *s;
	ferry_seg_t seg[2], again;
	struct ferry_req r;
	uint8_t *lbuf, *rbuf;
	char addr[64];

	(void)state;
	evict_set_up(&x, 4096, 2000); /* pair_opts' timeout_ms, as before */
	in = x.in, t = x.t, lbuf = x.lbuf, rbuf = x.rbuf;
	snprintf(addr, sizeof(addr), "%s", ferry_engine_address(t[0]));
	for (int i = 0; i < 2; i++) /* the second evicts the first */
		assert_int_equal(ferry_segment_open(in, ferry_engine_address(t[i]), &seg[i]), 0);
	s = seg_at(&in->segs, (uint32_t)seg[0] - 1);
	assert_null(s->eps[0]);

	/* The peer restarts on its address. */
	ferry_mem_unregister(t[0], rbuf);
	ferry_engine_destroy(t[0]);
	pair_opts(&o, "1");
	o.listen = addr;
	assert_int_equal(ferry_engine_create(&o, &t[0]), 0);
	assert_int_equal(ferry_mem_register(t[0], rbuf, 4096), 0);

	assert_int_equal(ferry_port_create(in, &p), 0);
	r = mkreq(FERRY_OP_WRITE, lbuf, seg[0], rbuf, 4096);
	st = run_one_on(p, r, 20000);
	assert_int_equal(st.state, FERRY_FAILED);
	assert_int_equal(st.error, -ESTALE);
	if (!READ_ONCE(s->stale))
		fail_msg("a reconnect refused -ESTALE left the segment unmarked");
	st = run_one_on(p, r, 20000); /* refused at submit now */
	assert_int_equal(st.state, FERRY_FAILED);
	assert_int_equal(st.error, -ESTALE);
	assert_int_equal(ferry_segment_open(in, addr, &again), 0);
	assert_true(again != seg[0]);
	r.seg = again;
	assert_int_equal(run_one_on(p, r, 20000).state, FERRY_DONE);

	assert_int_equal(ferry_port_destroy(p), 0);
	assert_int_equal(ferry_segment_close(in, again), 0);
	for (int i = 0; i < 2; i++)
		assert_int_equal(ferry_segment_close(in, seg[i]), 0);
	evict_set_down(&x);
}

/* A command that changes nothing (a QP that does not exist) through core
 * i, ctl_lock held: it returns once the core began a pass after the call. */
static void core_barrier(struct ferry_engine *e, unsigned i)
{
	struct core_cmd cmd = { .type = CMD_QP_FATAL, .index = 0, .slot = UINT32_MAX };

	assert_int_equal(core_command(e->cores[i], &cmd), -ENOENT);
}

/* Take ctl_lock once the repair thread took a device event (of a QP that
 * does not exist: nothing to do) that it handles under ctl_lock: it waits
 * there until the caller lets go.  Sent while the thread sleeps with
 * nothing to do, so that it is not waiting for the lock elsewhere: the
 * event is the first thing it looks at when it wakes. */
static void hold_repair_thread(struct ferry_engine *e)
{
	struct nic *nic = ferry_engine_nic(e, 0);
	struct pollfd pfd = { .fd = e->cores[0]->tx[0].prov->event_fd(nic), .events = POLLIN };

	WAIT_UNTIL(load_sc(e->repair.sleeping), WAIT_DEADLINE_MS, "the repair thread idle");
	pthread_mutex_lock(&e->ctl_lock);
	assert_int_equal(loop_inject_event(nic, &(struct nic_event){ .kind = NIC_EV_QP_FATAL,
								     .qp_num = UINT32_MAX }), 0);
	WAIT_UNTIL(poll(&pfd, 1, 0) == 0, WAIT_DEADLINE_MS, "the repair thread taking the event");
}

/*
 * A miss whose reconnect works on one core and fails on another for a
 * reason other than room (that core's NIC makes no QP: a dead device):
 * a request waiting on the failed core ends with that core's error, as
 * README says of a failed reconnect -- -EBUSY is "this core still has no
 * room", which it had.  Before, the reconnect's verdict was the working
 * core's (0) and the waiting request ended -EBUSY.
 */
static void test_miss_one_core_fails(void **state)
{
	struct ferry_req_status st;
	struct ferry_req r;
	struct ferry_port *port;
	struct ferry_batch *b;
	unsigned miss;
	int err;

	(void)state;
	peers_setup(1);
	assert_int_equal(ferry_port_create(P.init, &port), 0);
	assert_int_equal(ferry_batch_create(port, 4, &b), 0);
	open_peer(0);
	open_peer(1); /* evicts peer 0's endpoints on both cores */
	assert_int_equal(rails_of(0), 0);
	/* Every rail gone: the request waits on the first core from its slot's. */
	miss = ((uint32_t)P.seg[0] - 1) % ferry_engine_cores(P.init);
	loop_set_faults(ferry_engine_nic(P.init, miss), &(struct loop_faults){ .no_new_qps = 1 });
	/* The repair thread waits for ctl_lock, before it looks for segments
	 * to reconnect, until the request waits on its core: one reconnect,
	 * whose verdict is the request's (a second, for the core that failed
	 * alone, would say -EIO by chance).  Held by a device event that
	 * changes nothing (a QP that does not exist), taken off the NIC. */
	hold_repair_thread(P.init);
	r = mkreq(FERRY_OP_WRITE, P.lbuf, P.seg[0], P.rbuf[0], 4096);
	assert_int_equal(ferry_submit(b, &r, 1), 0);
	/* Parked once two commands went through its core: a pass runs the
	 * commands, then takes the ports' requests and parks them. */
	for (int k = 0; k < 2; k++)
		core_barrier(P.init, miss);
	pthread_mutex_unlock(&P.init->ctl_lock);
	ferry_batch_wait(b, 30000);
	assert_int_equal(ferry_req_status(b, 0, &st), 0);
	assert_int_equal(ferry_batch_reset(b), 0);
	err = st.error;
	print_message("the request on core %u, whose NIC makes no QP: %d\n", miss, err);
	assert_int_equal(st.state, FERRY_FAILED);
	assert_int_equal(rails_of(0), 1); /* the other core's reconnect worked */
	assert_int_equal(err, -EIO);      /* the loop NIC's qp_create error */
	loop_set_faults(ferry_engine_nic(P.init, miss), NULL);

	assert_int_equal(ferry_batch_destroy(b), 0);
	assert_int_equal(ferry_port_destroy(port), 0);
	peers_teardown();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_evict_and_reconnect),
		cmocka_unit_test(test_miss_on_dead_peer),
		cmocka_unit_test(test_churn),
		cmocka_unit_test(test_all_busy),
		cmocka_unit_test(test_cache_full_of_qps),
		cmocka_unit_test(test_evict_races_submit),
		cmocka_unit_test(test_cancel_parked),
		cmocka_unit_test(test_close_parked),
		cmocka_unit_test(test_down_rail_beside_evicted),
		cmocka_unit_test(test_miss_on_restarted_peer),
		cmocka_unit_test(test_miss_one_core_fails),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
