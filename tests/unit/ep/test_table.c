/* SPDX-License-Identifier: MIT */
/*
 * A core's endpoint table (ep/table.c): sized by the cache (ep_cache), not
 * by the number of segments; an endpoint gets a free index, its segment
 * slot may be anything below FERRY_MAX_SEGMENTS; a full table refuses
 * (-ENOSPC) until one is deleted, whose index the next add reuses; SIEVE's
 * keys are the indices.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <setjmp.h>
#include <cmocka.h>

#include "ep/table.h"

#define CAP 8

static void test_bounds(void **state)
{
	struct ep_table t;

	(void)state;
	assert_int_equal(ep_table_init(&t, 0), -EINVAL);
	assert_int_equal(ep_table_init(&t, SIEVE_MAX_KEYS + 1), -EINVAL);
	assert_int_equal(ep_table_init(&t, 4096), 0);
	assert_int_equal(t.cap, 4096);
	ep_table_fini(&t);
}

static void test_add_del(void **state)
{
	struct ferry_ep *ep = calloc(CAP + 1, sizeof(*ep));
	struct ep_table t;

	(void)state;
	assert_non_null(ep);
	assert_int_equal(ep_table_init(&t, CAP), 0);
	for (uint32_t i = 0; i < CAP; i++) {
		ep[i].seg_slot = 4095 - i * 500; /* any slot: the table does not care */
		assert_int_equal(ep_table_add(&t, &ep[i]), 0);
		assert_int_equal(ep[i].cache_idx, i);
		assert_ptr_equal(ep_table_at(&t, i), &ep[i]);
		assert_true(sieve_has(&t.cache, i));
	}
	assert_int_equal(ep_table_add(&t, &ep[CAP]), -ENOSPC);
	ep_table_del(&t, &ep[3]);
	assert_null(ep_table_at(&t, 3));
	assert_false(sieve_has(&t.cache, 3));
	ep_table_del(&t, &ep[3]); /* twice: nothing */
	assert_int_equal(ep_table_add(&t, &ep[CAP]), 0);
	assert_int_equal(ep[CAP].cache_idx, 3);
	assert_ptr_equal(ep_table_at(&t, 3), &ep[CAP]);
	for (uint32_t i = 0; i < CAP; i++)
		ep_table_del(&t, ep_table_at(&t, i));
	assert_int_equal(t.cache.n, 0);
	ep_table_fini(&t);
	free(ep);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bounds),
		cmocka_unit_test(test_add_del),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
