/* SPDX-License-Identifier: MIT */
/*
 * The cores' log mailboxes (ring/base/log.c): a thread that defers never
 * calls the sink, what it logged comes out at the next drain with the
 * box's name prefixed and in order, a full box counts what it drops and
 * the drain says how many, and two producers racing a drainer lose
 * nothing they were not told about.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ring/base/log.h"

static unsigned long n_msgs, n_dropped_said, last_index;
static int in_order = 1;
static pthread_t sink_caller;
static int sink_caller_set;

/* Messages "core 3: m <i>" (in order per producer 0), or the dropped note. */
static void sink(void *arg, int level, const char *msg)
{
	unsigned long i, d;
	unsigned p;

	(void)arg;
	(void)level;
	if (!sink_caller_set) {
		sink_caller = pthread_self();
		sink_caller_set = 1;
	}
	if (sscanf(msg, "core 3: %lu message(s) dropped", &d) == 1) {
		n_dropped_said += d;
		return;
	}
	if (sscanf(msg, "core 3: m %u %lu", &p, &i) == 2) {
		if (p == 0) { /* last_index: the last one seen + 1 */
			if (i < last_index)
				in_order = 0;
			last_index = i + 1;
		}
		n_msgs++;
	}
}

static void reset(void)
{
	n_msgs = n_dropped_said = last_index = 0;
	in_order = 1;
	sink_caller_set = 0;
}

static void test_defer_then_drain(void **state)
{
	struct log_box b;

	(void)state;
	reset();
	log_set_sink(sink, NULL);
	log_box_init(&b, "core", 3);
	assert_null(log_defer(&b));
	for (unsigned long i = 0; i < LOG_BOX_SLOTS + 8; i++)
		flog(LOG_WARN, "m 0 %lu", i);
	assert_ptr_equal(log_defer(NULL), &b);
	assert_int_equal(n_msgs, 0); /* nothing reached the sink while deferring */
	assert_true(log_box_pending(&b));
	assert_int_equal(log_box_drain(&b), LOG_BOX_SLOTS);
	assert_int_equal(n_msgs, LOG_BOX_SLOTS);
	assert_int_equal(n_dropped_said, 8);
	assert_true(in_order);
	assert_false(log_box_pending(&b));
	assert_int_equal(log_box_drain(&b), 0);
	/* Not deferring: straight to the sink (no prefix: not counted). */
	flog(LOG_WARN, "m 0 99");
	assert_int_equal(n_msgs, LOG_BOX_SLOTS);
	assert_false(log_box_pending(&b));
	log_box_fini(&b);
	log_set_sink(NULL, NULL);
}

#define PER_PRODUCER 2000

struct producer {
	struct log_box *b;
	unsigned id;
};

static void *produce(void *arg)
{
	struct producer *p = arg;

	log_defer(p->b);
	for (unsigned long i = 0; i < PER_PRODUCER; i++) {
		flog(LOG_INFO, "m %u %lu", p->id, i);
		if (i % 16 == 15)
			sched_yield(); /* let the drainer in: not all of it dropped */
	}
	return NULL;
}

static void test_producers_race_a_drainer(void **state)
{
	struct producer p[2];
	pthread_t t[2];
	struct log_box b;
	int done = 0;

	(void)state;
	reset();
	log_set_sink(sink, NULL);
	log_box_init(&b, "core", 3);
	for (unsigned i = 0; i < 2; i++) {
		p[i] = (struct producer){ .b = &b, .id = i };
		assert_int_equal(pthread_create(&t[i], NULL, produce, &p[i]), 0);
	}
	while (!done) {
		log_box_drain(&b);
		done = pthread_tryjoin_np(t[0], NULL) == 0;
	}
	pthread_join(t[1], NULL);
	log_box_drain(&b);
	assert_true(pthread_equal(sink_caller, pthread_self()));
	assert_int_equal(n_msgs + n_dropped_said, 2 * PER_PRODUCER);
	assert_true(in_order);
	assert_false(log_box_pending(&b));
	print_message("%lu emitted, %lu dropped\n", n_msgs, n_dropped_said);
	log_box_fini(&b);
	log_set_sink(NULL, NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defer_then_drain),
		cmocka_unit_test(test_producers_race_a_drainer),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
