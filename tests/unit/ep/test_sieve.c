/* SPDX-License-Identifier: MIT */
/*
 * SIEVE eviction (ep/sieve.c): FIFO order without hits, second chances for
 * visited keys (cleared as the hand passes), busy keys never evicted,
 * removal anywhere (also under the hand), scan resistance, and a random
 * schedule checked against a model of the list after every step.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <setjmp.h>
#include <cmocka.h>

#include "ep/sieve.h"

#define KEYS 1024 /* the key space every test cache is made with */

static uint8_t visited[KEYS], busy[KEYS];

static bool keep(void *arg, uint32_t key)
{
	(void)arg;
	if (busy[key])
		return true;
	if (visited[key]) {
		visited[key] = 0;
		return true;
	}
	return false;
}

static int setup(void **state)
{
	(void)state;
	memset(visited, 0, sizeof(visited));
	memset(busy, 0, sizeof(busy));
	return 0;
}

static uint32_t evict(struct sieve *sv)
{
	uint32_t k = SIEVE_NONE;

	assert_int_equal(sieve_evict(sv, keep, NULL, &k), 0);
	assert_false(sieve_has(sv, k));
	return k;
}

static void test_bad_args(void **state)
{
	struct sieve sv;
	uint32_t k;

	(void)state;
	assert_int_equal(sieve_init(&sv, 0, KEYS), -EINVAL);
	assert_int_equal(sieve_init(&sv, KEYS + 1, KEYS), -EINVAL);
	assert_int_equal(sieve_init(&sv, 2, SIEVE_MAX_KEYS + 1), -EINVAL);
	assert_int_equal(sieve_init(&sv, 2, KEYS), 0);
	assert_int_equal(sieve_evict(&sv, keep, NULL, &k), -ENOENT);
	assert_int_equal(sieve_insert(&sv, KEYS), -EINVAL);
	assert_int_equal(sieve_insert(&sv, 5), 0);
	assert_int_equal(sieve_insert(&sv, 5), -EEXIST);
	assert_int_equal(sieve_insert(&sv, 6), 0);
	assert_true(sieve_full(&sv));
	assert_int_equal(sieve_insert(&sv, 7), -ENOSPC);
	assert_int_equal(sieve_remove(&sv, 7), -ENOENT);
	sieve_fini(&sv);
}

/* Nothing visited: oldest first, like FIFO. */
static void test_fifo(void **state)
{
	struct sieve sv;

	(void)state;
	sieve_init(&sv, 4, KEYS);
	for (uint32_t k = 10; k < 14; k++)
		assert_int_equal(sieve_insert(&sv, k), 0);
	assert_int_equal(evict(&sv), 10);
	assert_int_equal(evict(&sv), 11);
	assert_int_equal(sieve_insert(&sv, 20), 0);
	assert_int_equal(evict(&sv), 12);
	assert_int_equal(evict(&sv), 13);
	assert_int_equal(evict(&sv), 20);
	assert_int_equal(sv.n, 0);
	sieve_fini(&sv);
}

/* The paper's walk: visited keys stay put and lose their bit; the hand
 * stays where it stopped, so the next eviction starts there. */
static void test_second_chance(void **state)
{
	struct sieve sv;

	(void)state;
	sieve_init(&sv, 5, KEYS);
	for (uint32_t k = 1; k <= 5; k++)
		sieve_insert(&sv, k);
	visited[1] = visited[2] = visited[4] = 1;
	assert_int_equal(evict(&sv), 3);
	assert_int_equal(visited[1] + visited[2], 0); /* passed: cleared */
	assert_int_equal(visited[4], 1);              /* not reached yet */
	sieve_insert(&sv, 6);                         /* at the head */
	/* Hand at 4 (visited: cleared), then 5. */
	assert_int_equal(evict(&sv), 5);
	/* Hand at 6 (new, unvisited). */
	visited[6] = 1;
	/* 6 cleared, wrap to the tail: 1 (cleared before) goes. */
	assert_int_equal(evict(&sv), 1);
	sieve_fini(&sv);
}

static void test_busy(void **state)
{
	struct sieve sv;
	uint32_t k;

	(void)state;
	sieve_init(&sv, 3, KEYS);
	for (k = 0; k < 3; k++)
		sieve_insert(&sv, k);
	busy[0] = busy[1] = busy[2] = 1;
	visited[1] = 1;
	assert_int_equal(sieve_evict(&sv, keep, NULL, &k), -EBUSY);
	assert_int_equal(sv.n, 3);
	busy[1] = 0;
	assert_int_equal(evict(&sv), 1);
	sieve_fini(&sv);
}

/* Removing the key under the hand moves the hand on, toward the head. */
static void test_remove_under_hand(void **state)
{
	struct sieve sv;

	(void)state;
	sieve_init(&sv, 4, KEYS);
	for (uint32_t k = 0; k < 4; k++)
		sieve_insert(&sv, k);
	visited[0] = 1;
	assert_int_equal(evict(&sv), 1); /* hand now at 2 */
	assert_int_equal(sv.hand, 2);
	assert_int_equal(sieve_remove(&sv, 2), 0);
	assert_int_equal(sv.hand, 3);
	assert_int_equal(evict(&sv), 3);
	assert_int_equal(sieve_remove(&sv, 0), 0);
	assert_int_equal(sv.n, 0);
	assert_int_equal(sv.head, SIEVE_NONE);
	assert_int_equal(sv.tail, SIEVE_NONE);
	assert_int_equal(sieve_insert(&sv, 9), 0);
	assert_int_equal(evict(&sv), 9);
	sieve_fini(&sv);
}

/* A scan of one-hit keys does not flush keys that keep being used. */
static void test_scan_resistance(void **state)
{
	struct sieve sv;

	(void)state;
	sieve_init(&sv, 8, KEYS);
	for (uint32_t k = 0; k < 4; k++)
		sieve_insert(&sv, k);
	for (uint32_t scan = 100; scan < 200; scan++) {
		for (uint32_t k = 0; k < 4; k++)
			visited[k] = 1; /* the hot set is used all the time */
		if (sieve_full(&sv)) {
			uint32_t v = evict(&sv);

			assert_true(v >= 100);
		}
		assert_int_equal(sieve_insert(&sv, scan), 0);
	}
	for (uint32_t k = 0; k < 4; k++)
		assert_true(sieve_has(&sv, k));
	sieve_fini(&sv);
}

/* Walk the list and check it against the membership bytes. */
static void check_list(const struct sieve *sv)
{
	uint32_t n = 0;
	uint16_t k = sv->tail, p = SIEVE_NONE;

	while (k != SIEVE_NONE) {
		assert_true(sv->in[k]);
		assert_int_equal(sv->prev[k], p);
		p = k;
		k = sv->next[k];
		n++;
	}
	assert_int_equal(p, sv->head);
	assert_int_equal(n, sv->n);
	assert_true(sv->hand == SIEVE_NONE || sv->in[sv->hand]);
}

static void test_random(void **state)
{
	struct sieve sv;

	(void)state;
	srand(7);
	sieve_init(&sv, 32, KEYS);
	for (int i = 0; i < 100000; i++) {
		uint32_t k = (uint32_t)rand() % 64, v;
		int r = rand() % 8;

		if (r < 3 && sieve_has(&sv, k))
			visited[k] = 1;
		else if (r < 5 && !sieve_full(&sv))
			sieve_insert(&sv, k);
		else if (r < 6)
			sieve_remove(&sv, k);
		else if (sieve_evict(&sv, keep, NULL, &v) == 0)
			assert_false(sieve_has(&sv, v));
		check_list(&sv);
	}
	sieve_fini(&sv);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_bad_args, setup),
		cmocka_unit_test_setup(test_fifo, setup),
		cmocka_unit_test_setup(test_second_chance, setup),
		cmocka_unit_test_setup(test_busy, setup),
		cmocka_unit_test_setup(test_remove_under_hand, setup),
		cmocka_unit_test_setup(test_scan_resistance, setup),
		cmocka_unit_test_setup(test_random, setup),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
