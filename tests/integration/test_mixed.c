/* SPDX-License-Identifier: MIT */
/*
 * One engine, three peers, three transports at once: the initiator offers
 * loop, tcp and cma (nics "loop,tcp,cma"); one target process offers only
 * tcp, another only cma (tests/harness/target.h), and an engine in this
 * process only loop.  ferry_segment_open routes each peer over the one
 * transport both sides have, and three threads, a port each, move random
 * sizes (1 B .. 16 MiB, READ and WRITE) to their peer at the same time,
 * over the same two cores.  Every byte is checked: READs against a shadow
 * of what the peer holds, WRITEs by the peer's own hash of its buffer (or
 * memcmp for the loop peer) and by one READ of it all at the end.  Also
 * under ThreadSanitizer (TSAN_TESTS).
 *
 * FERRY_TEST_SCALE multiplies the rounds.
 */
#include <pthread.h>

#include "tests/harness/plan.h"
#include "tests/harness/target.h"

#define MAX_REQ (16ull << 20)
#define AREA (MAX_REQ + MAX_REQ / 8)
#define PER_BATCH 6
#define NPEERS 3

struct peer {
	const char *transport;
	struct target t;            /* tcp, cma: a process */
	struct ferry_engine *loop;  /* loop: an engine here */
	uint8_t *loop_buf;
	uint64_t remote;
	ferry_seg_t seg;
	uint8_t *lbuf, *shadow;     /* the initiator's area and its view of the peer */
	uint64_t seed, bytes;
	pthread_t th;
};

static struct ferry_engine *E;
static struct peer peers[NPEERS] = { { .transport = "tcp" }, { .transport = "cma" },
				     { .transport = "loop" } };

static void peer_up(struct peer *p, uint64_t seed)
{
	p->seed = seed;
	if (!strcmp(p->transport, "loop")) {
		struct ferry_opts o;

		ferry_opts_default(&o);
		o.cores = "1";
		o.nics = "loop";
		assert_int_equal(ferry_engine_create(&o, &p->loop), 0);
		p->loop_buf = aligned_alloc(4096, AREA);
		assert_non_null(p->loop_buf);
		fill_pattern(p->loop_buf, AREA, seed);
		assert_int_equal(ferry_mem_register(p->loop, p->loop_buf, AREA), 0);
		p->remote = (uint64_t)(uintptr_t)p->loop_buf;
		assert_int_equal(ferry_segment_open(E, ferry_engine_address(p->loop), &p->seg), 0);
	} else {
		assert_int_equal(target_start(&p->t, p->transport, "127.0.0.1:0", AREA, seed), 0);
		p->remote = p->t.buf;
		assert_int_equal(ferry_segment_open(E, p->t.addr, &p->seg), 0);
	}
	p->lbuf = aligned_alloc(4096, AREA);
	p->shadow = aligned_alloc(4096, AREA);
	assert_non_null(p->lbuf);
	assert_non_null(p->shadow);
	memset(p->lbuf, 0, AREA);
	fill_pattern(p->shadow, AREA, seed);
	assert_int_equal(ferry_mem_register(E, p->lbuf, AREA), 0);
}

static void peer_down(struct peer *p)
{
	assert_int_equal(ferry_segment_close(E, p->seg), 0);
	assert_int_equal(ferry_mem_unregister(E, p->lbuf), 0);
	if (p->loop) {
		assert_int_equal(ferry_mem_unregister(p->loop, p->loop_buf), 0);
		ferry_engine_destroy(p->loop);
		free(p->loop_buf);
	} else {
		target_stop(&p->t);
	}
	free(p->lbuf);
	free(p->shadow);
}

/* What the peer's buffer holds, seen from its side. */
static uint64_t peer_hash(struct peer *p)
{
	return p->loop ? fnv1a(p->loop_buf, AREA) : target_hash(&p->t);
}

static void *worker(void *arg)
{
	struct peer *p = arg;
	struct planned pl[PER_BATCH];
	struct ferry_req r[PER_BATCH];
	struct ferry_port *port;
	struct ferry_batch *b;
	uint64_t seed = p->seed * 31;

	assert_int_equal(ferry_port_create(E, &port), 0);
	assert_int_equal(ferry_batch_create(port, PER_BATCH, &b), 0);
	for (int round = 0; round < 10 * test_scale(); round++) {
		unsigned n = plan_batch(&seed, pl, PER_BATCH, AREA, 25);

		for (unsigned i = 0; i < n; i++) {
			uint8_t *l = p->lbuf + pl[i].off;

			if (pl[i].op == FERRY_OP_WRITE)
				fill_pattern(l, pl[i].len, pl[i].seed);
			else
				poison(l, p->shadow + pl[i].off, pl[i].len);
			r[i] = mkreq(pl[i].op, l, p->seg, (void *)(uintptr_t)(p->remote + pl[i].off),
				     pl[i].len);
		}
		run_all_done(b, r, n);
		for (unsigned i = 0; i < n; i++) {
			uint8_t *l = p->lbuf + pl[i].off, *s = p->shadow + pl[i].off;

			if (pl[i].op == FERRY_OP_WRITE)
				memcpy(s, l, pl[i].len);
			else if (memcmp(l, s, pl[i].len))
				fail_msg("%s: READ of %llu bytes at %llu differs", p->transport,
					 (unsigned long long)pl[i].len,
					 (unsigned long long)pl[i].off);
			p->bytes += pl[i].len;
		}
	}
	/* The whole area back in one READ. */
	poison(p->lbuf, p->shadow, AREA);
	r[0] = mkreq(FERRY_OP_READ, p->lbuf, p->seg, (void *)(uintptr_t)p->remote, AREA);
	run_all_done(b, r, 1);
	if (memcmp(p->lbuf, p->shadow, AREA))
		fail_msg("%s: the final READ differs from what was written", p->transport);
	assert_int_equal(ferry_batch_destroy(b), 0);
	assert_int_equal(ferry_port_destroy(port), 0);
	return NULL;
}

static void test_three_transports_at_once(void **state)
{
	struct ferry_opts o;

	(void)state;
	ferry_opts_default(&o);
	o.cores = "0-1";
	o.nics = "loop,tcp,cma";
	o.timeout_ms = 60000;
	assert_int_equal(ferry_engine_create(&o, &E), 0);
	for (unsigned i = 0; i < NPEERS; i++) {
		peer_up(&peers[i], 100 + i);
		/* Each peer offers one transport: the open must have picked it. */
		assert_string_equal(ferry_segment_transport(E, peers[i].seg), peers[i].transport);
	}
	for (unsigned i = 0; i < NPEERS; i++)
		assert_int_equal(pthread_create(&peers[i].th, NULL, worker, &peers[i]), 0);
	for (unsigned i = 0; i < NPEERS; i++)
		assert_int_equal(pthread_join(peers[i].th, NULL), 0);
	for (unsigned i = 0; i < NPEERS; i++) {
		struct peer *p = &peers[i];

		assert_true(peer_hash(p) == fnv1a(p->shadow, AREA));
		print_message("%s: moved and verified %llu bytes\n", p->transport,
			      (unsigned long long)p->bytes + AREA);
	}
	assert_engine_quiet(E);
	wait_slices_zero(E);
	for (unsigned i = 0; i < NPEERS; i++)
		peer_down(&peers[i]);
	ferry_engine_destroy(E);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_three_transports_at_once),
	};

	target_main_if(argc, argv);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
