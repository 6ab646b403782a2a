/* SPDX-License-Identifier: MIT */
/*
 * Idle policy caller (FERRY_IDLE_CALLER): the application's threads run
 * the cores' passes inside ferry_batch_wait and ferry_progress, the cores'
 * threads nap and take over when nobody drives.  Under adaptive idle a
 * waiter runs the pass of a core whose thread sleeps with nothing in
 * flight.  A thread the application registered with liburcu-qsbr never
 * runs a pass.  Every byte is checked; no test depends on who ran a pass
 * except where the counters say so.
 */
#include <pthread.h>
#include <unistd.h>
#include <urcu/urcu-qsbr.h>

#include "tests/harness/harness.h"

#define LEN (8u << 20)
#define REQS 16

static void caller_opts(struct ferry_opts *o, const char *cores)
{
	pair_opts(o, cores);
	o->idle = FERRY_IDLE_CALLER;
}

static uint64_t caller_passes(struct ferry_engine *e)
{
	return ENGINE_STAT_SUM(e, caller_passes);
}

/* rounds of REQS random WRITEs then READs back within [off, off + span). */
static void write_read_back(struct pair *p, struct ferry_port *port, size_t off, size_t span,
			    unsigned rounds, uint64_t seed)
{
	struct ferry_batch *b;
	uint8_t *back = malloc(span);

	assert_non_null(back);
	assert_int_equal(ferry_batch_create(port, 2 * REQS, &b), 0);
	for (unsigned r = 0; r < rounds; r++) {
		size_t chunk = span / REQS;
		struct ferry_req reqs[REQS];

		fill_pattern(p->lbuf + off, span, seed + r);
		for (unsigned i = 0; i < REQS; i++) {
			uint64_t len = 1 + splitmix(&seed) % chunk;

			reqs[i] = mkreq(FERRY_OP_WRITE, p->lbuf + off + i * chunk, p->seg,
					p->rbuf + off + i * chunk, len);
		}
		assert_int_equal(ferry_submit(b, reqs, REQS), 0);
		assert_int_equal(ferry_batch_wait(b, 10000), 0);
		for (unsigned i = 0; i < REQS; i++)
			assert_memory_equal(p->rbuf + off + i * chunk, p->lbuf + off + i * chunk,
					    reqs[i].len);
		memcpy(back, p->lbuf + off, span);
		poison(p->lbuf + off, back, span);
		for (unsigned i = 0; i < REQS; i++)
			reqs[i].op = FERRY_OP_READ;
		assert_int_equal(ferry_submit(b, reqs, REQS), REQS); /* the first slot's index */
		assert_int_equal(ferry_batch_wait(b, 10000), 0);
		for (unsigned i = 0; i < REQS; i++)
			assert_memory_equal(p->lbuf + off + i * chunk, back + i * chunk, reqs[i].len);
		assert_int_equal(ferry_batch_reset(b), 0);
	}
	assert_int_equal(ferry_batch_destroy(b), 0);
	free(back);
}

static void test_progress_args(void **state)
{
	struct ferry_opts o;
	struct pair p;

	(void)state;
	assert_int_equal(ferry_progress(NULL), -EINVAL);
	pair_opts(&o, "0");
	pair_setup(&p, &o, &o, 1u << 20);
	assert_int_equal(ferry_progress(p.init), 0); /* adaptive: the cores' threads do it */
	assert_int_equal(caller_passes(p.init), 0);
	pair_teardown(&p);
	o.idle = (enum ferry_idle)3;
	assert_int_equal(ferry_engine_create(&o, &p.init), -EINVAL);
}

/* The waiting thread runs the passes: bytes move and the counters say who moved them. */
static void test_wait_drives(void **state)
{
	struct ferry_opts o;
	struct ferry_port *port;
	struct pair p;

	(void)state;
	caller_opts(&o, "0-1");
	pair_setup(&p, &o, &o, LEN);
	assert_int_equal(ferry_port_create(p.init, &port), 0);
	write_read_back(&p, port, 0, LEN, 8, 11);
	assert_true(caller_passes(p.init) > 0);
	assert_int_equal(ferry_port_destroy(port), 0);
	wait_slices_zero(p.init);
	assert_engine_quiet(p.init);
	pair_teardown(&p);
}

/* Nobody waits or calls ferry_progress: the cores' threads take over. */
static void test_fallback_without_caller(void **state)
{
	struct ferry_opts o;
	struct ferry_port *port;
	struct ferry_batch *b;
	struct ferry_req r;
	struct ferry_req_status st;
	struct pair p;

	(void)state;
	caller_opts(&o, "0");
	pair_setup(&p, &o, &o, 1u << 20);
	fill_pattern(p.lbuf, 1u << 20, 3);
	assert_int_equal(ferry_port_create(p.init, &port), 0);
	assert_int_equal(ferry_batch_create(port, 1, &b), 0);
	r = mkreq(FERRY_OP_WRITE, p.lbuf, p.seg, p.rbuf, 1u << 20);
	assert_int_equal(ferry_submit(b, &r, 1), 0);
	WAIT_UNTIL(ferry_req_status(b, 0, &st) == 0 && st.state != FERRY_PENDING,
		   WAIT_DEADLINE_MS, "the request to end without a caller");
	assert_int_equal(st.state, FERRY_DONE);
	assert_memory_equal(p.rbuf, p.lbuf, 1u << 20);
	assert_int_equal(ferry_batch_destroy(b), 0);
	assert_int_equal(ferry_port_destroy(port), 0);
	pair_teardown(&p);
}

struct driver_arg {
	struct pair *p;
	size_t off;
	uint64_t seed;
};

static void *driver_main(void *arg)
{
	struct driver_arg *a = arg;
	struct ferry_port *port;

	assert_int_equal(ferry_port_create(a->p->init, &port), 0);
	write_read_back(a->p, port, a->off, LEN / 4, 6, a->seed);
	assert_int_equal(ferry_port_destroy(port), 0);
	return NULL;
}

/* Two application threads drive the same cores at once (one pass at a time each). */
static void test_two_callers(void **state)
{
	struct driver_arg a[2];
	pthread_t t[2];
	struct ferry_opts o;
	struct pair p;

	(void)state;
	caller_opts(&o, "0-1");
	pair_setup(&p, &o, &o, LEN);
	for (int i = 0; i < 2; i++) {
		a[i] = (struct driver_arg){ &p, (size_t)i * (LEN / 2), 100 + (uint64_t)i };
		assert_int_equal(pthread_create(&t[i], NULL, driver_main, &a[i]), 0);
	}
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	wait_slices_zero(p.init);
	assert_engine_quiet(p.init);
	pair_teardown(&p);
}

struct server_arg {
	struct ferry_engine *e;
	int stop;
};

static void *server_main(void *arg)
{
	struct server_arg *s = arg;

	while (!__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
		if (ferry_progress(s->e) < 0)
			abort(); /* not cmocka's assert: this is not the test's thread */
	}
	return NULL;
}

/* A tcp target whose frames are served by an application thread's ferry_progress. */
static void test_progress_serves_tcp(void **state)
{
	struct server_arg s = { 0 };
	struct ferry_opts io, to;
	struct ferry_port *port;
	pthread_t t;
	struct pair p;

	(void)state;
	pair_opts(&io, "0");
	io.nics = "tcp";
	caller_opts(&to, "1");
	to.nics = "tcp";
	pair_setup(&p, &io, &to, LEN);
	s.e = p.target;
	assert_int_equal(pthread_create(&t, NULL, server_main, &s), 0);
	assert_int_equal(ferry_port_create(p.init, &port), 0);
	write_read_back(&p, port, 0, LEN, 4, 7);
	assert_int_equal(ferry_port_destroy(port), 0);
	__atomic_store_n(&s.stop, 1, __ATOMIC_RELEASE);
	pthread_join(t, NULL);
	/* Served frames are not counted as work (they end no request of
	 * ours): the passes are what the counters show. */
	assert_true(caller_passes(p.target) > 0);
	pair_teardown(&p);
}

/* A ring too small for the batch: ferry_submit's wait for room runs the passes. */
static void test_full_ring_drives(void **state)
{
	struct ferry_opts o;
	struct ferry_port *port;
	struct pair p;

	(void)state;
	caller_opts(&o, "0");
	o.ring_size = 4;
	pair_setup(&p, &o, &o, LEN);
	assert_int_equal(ferry_port_create(p.init, &port), 0);
	write_read_back(&p, port, 0, LEN, 4, 21);
	assert_int_equal(ferry_port_destroy(port), 0);
	pair_teardown(&p);
}

/* One request of len bytes at off after the engine has idled (its core
 * asleep by then: the linger is 50 us), waited for and checked; false if
 * anything failed (no cmocka assert: other threads call it too). */
static bool cold_request_ok(struct pair *p, struct ferry_batch *b, size_t off, size_t len,
			    uint64_t seed)
{
	struct ferry_req r = mkreq(FERRY_OP_WRITE, p->lbuf + off, p->seg, p->rbuf + off, len);

	usleep(5000);
	fill_pattern(p->lbuf + off, len, seed);
	return ferry_submit(b, &r, 1) == 0 && ferry_batch_wait(b, 10000) == 0 &&
	       memcmp(p->rbuf + off, p->lbuf + off, len) == 0 && ferry_batch_reset(b) == 0;
}

static void cold_request(struct pair *p, struct ferry_batch *b, size_t off, size_t len,
			 uint64_t seed)
{
	assert_true(cold_request_ok(p, b, off, len, seed));
}

/*
 * Adaptive: the waiting thread runs the pass of the core that sleeps, so a
 * request at an idle engine does not wait for the core's wake-up.  The
 * thread may still wake first (a loaded machine, a sanitizer): rounds until
 * a waiter's pass is counted.  Small and multi-slice requests, every byte
 * checked, the engine quiet after.
 */
static void test_adaptive_waiter_runs_cold(void **state)
{
	struct ferry_opts o;
	struct ferry_port *port;
	struct ferry_batch *b;
	struct pair p;
	unsigned round;

	(void)state;
	pair_opts(&o, "0-1");
	assert_int_equal(o.idle, FERRY_IDLE_ADAPTIVE);
	pair_setup(&p, &o, &o, LEN);
	assert_int_equal(ferry_port_create(p.init, &port), 0);
	assert_int_equal(ferry_batch_create(port, 1, &b), 0);
	for (round = 0; round < 200; round++) {
		cold_request(&p, b, (round % 8) * (LEN / 8), round & 1 ? LEN / 8 : 64, round);
		if (round >= 3 && caller_passes(p.init) > 0)
			break;
	}
	print_message("adaptive: %llu waiter passes in %u cold requests\n",
		      (unsigned long long)caller_passes(p.init), round + 1);
	assert_true(caller_passes(p.init) > 0);
	assert_int_equal(ferry_batch_destroy(b), 0);
	assert_int_equal(ferry_port_destroy(port), 0);
	wait_slices_zero(p.init);
	assert_engine_quiet(p.init);
	pair_teardown(&p);
}

struct cold_arg {
	struct pair *p;
	size_t off, span;
	uint64_t seed;
};

/* Requests of random length at random gaps (0-2 ms: the cores fall asleep
 * in some and not in others), each waited for and checked. */
static void *cold_waiter_main(void *arg)
{
	struct cold_arg *a = arg;
	struct ferry_port *port;
	struct ferry_batch *b;

	if (ferry_port_create(a->p->init, &port) || ferry_batch_create(port, 1, &b))
		abort(); /* not cmocka's assert: this is not the test's thread */
	for (unsigned i = 0; i < 40; i++) {
		size_t len = 1 + splitmix(&a->seed) % a->span;
		struct ferry_req r = mkreq(FERRY_OP_WRITE, a->p->lbuf + a->off, a->p->seg,
					   a->p->rbuf + a->off, len);

		usleep((useconds_t)(splitmix(&a->seed) % 2000));
		fill_pattern(a->p->lbuf + a->off, len, a->seed);
		if (ferry_submit(b, &r, 1) || ferry_batch_wait(b, 10000) ||
		    memcmp(a->p->rbuf + a->off, a->p->lbuf + a->off, len) || ferry_batch_reset(b))
			abort();
	}
	if (ferry_batch_destroy(b) || ferry_port_destroy(port))
		abort();
	return NULL;
}

/* Two waiters on two cores under adaptive: each may run a sleeping core's
 * pass, one pass at a time per core, the cores' threads taking them back
 * (the hand-over is what TSan watches in make test-tsan). */
static void test_adaptive_two_waiters(void **state)
{
	struct cold_arg a[2];
	struct ferry_opts o;
	pthread_t t[2];
	struct pair p;

	(void)state;
	pair_opts(&o, "0-1");
	pair_setup(&p, &o, &o, LEN);
	for (int i = 0; i < 2; i++) {
		a[i] = (struct cold_arg){ &p, (size_t)i * (LEN / 2), LEN / 2, 300 + (uint64_t)i };
		assert_int_equal(pthread_create(&t[i], NULL, cold_waiter_main, &a[i]), 0);
	}
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	print_message("adaptive, two waiters: %llu waiter passes\n",
		      (unsigned long long)caller_passes(p.init));
	assert_true(caller_passes(p.init) > 0); /* 80 requests, most after the linger */
	wait_slices_zero(p.init);
	assert_engine_quiet(p.init);
	pair_teardown(&p);
}

struct rcu_app_arg {
	struct pair *p;
	unsigned rounds;
	bool app_registers;  /* registered (and offline) in liburcu-qsbr before */
	bool registers_after; /* registers itself after its waits */
};

/* An application thread waiting for cold requests; with app_registers it
 * is liburcu-qsbr's reader of its own and must run no pass; with
 * registers_after it registers itself once done, which liburcu refuses
 * (abort) if ferry left it registered. */
static void *rcu_app_main(void *arg)
{
	struct rcu_app_arg *a = arg;
	struct ferry_port *port;
	struct ferry_batch *b;

	if (a->app_registers) {
		urcu_qsbr_register_thread();
		urcu_qsbr_thread_offline();
	}
	if (ferry_port_create(a->p->init, &port) || ferry_batch_create(port, 1, &b))
		abort(); /* not cmocka's assert: this is not the test's thread */
	for (unsigned i = 0; i < a->rounds; i++)
		if (!cold_request_ok(a->p, b, (i % 64) * 4096, 4096, 50 + i))
			abort();
	if (ferry_batch_destroy(b) || ferry_port_destroy(port))
		abort();
	if (a->registers_after) {
		urcu_qsbr_register_thread();
		urcu_qsbr_thread_offline();
	}
	if (a->app_registers || a->registers_after) {
		urcu_qsbr_thread_online();
		urcu_qsbr_unregister_thread();
	}
	return NULL;
}

static uint64_t rcu_app_run(enum ferry_idle idle, struct rcu_app_arg a)
{
	struct ferry_opts o;
	struct pair p;
	pthread_t t;
	uint64_t passes;

	pair_opts(&o, "0");
	o.idle = idle;
	pair_setup(&p, &o, &o, 1u << 20);
	a.p = &p;
	assert_int_equal(pthread_create(&t, NULL, rcu_app_main, &a), 0);
	pthread_join(t, NULL);
	passes = caller_passes(p.init);
	wait_slices_zero(p.init);
	pair_teardown(&p);
	return passes;
}

/* Registered by the application: under adaptive it only waits; under
 * caller the core's thread takes over after its nap.  The positive
 * control: the same thread unregistered drives under caller. */
static void test_rcu_registered_app_never_drives(void **state)
{
	(void)state;
	assert_int_equal(rcu_app_run(FERRY_IDLE_ADAPTIVE, (struct rcu_app_arg){ .rounds = 8,
				     .app_registers = true }), 0);
	assert_int_equal(rcu_app_run(FERRY_IDLE_CALLER, (struct rcu_app_arg){ .rounds = 8,
				     .app_registers = true }), 0);
	assert_true(rcu_app_run(FERRY_IDLE_CALLER, (struct rcu_app_arg){ .rounds = 8 }) > 0);
}

/* Adaptive: a waiter that ran passes is unregistered again when its wait
 * returns, so the application may register the thread itself afterwards. */
static void test_adaptive_waiter_leaves_rcu_alone(void **state)
{
	uint64_t passes;

	(void)state;
	passes = rcu_app_run(FERRY_IDLE_ADAPTIVE, (struct rcu_app_arg){ .rounds = 40,
			     .registers_after = true });
	print_message("adaptive: %llu waiter passes before the thread registered itself\n",
		      (unsigned long long)passes);
	assert_true(passes > 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_progress_args),
		cmocka_unit_test(test_wait_drives),
		cmocka_unit_test(test_fallback_without_caller),
		cmocka_unit_test(test_two_callers),
		cmocka_unit_test(test_progress_serves_tcp),
		cmocka_unit_test(test_full_ring_drives),
		cmocka_unit_test(test_adaptive_waiter_runs_cold),
		cmocka_unit_test(test_adaptive_two_waiters),
		cmocka_unit_test(test_rcu_registered_app_never_drives),
		cmocka_unit_test(test_adaptive_waiter_leaves_rcu_alone),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
