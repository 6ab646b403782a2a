/* SPDX-License-Identifier: MIT */
/*
 * Random batches for the integration tests that run against other
 * processes (test_xproc, test_mixed): log-uniform sizes laid out without
 * overlap in one area, submitted and required to end DONE.
 */
#ifndef FERRY_TESTS_HARNESS_PLAN_H
#define FERRY_TESTS_HARNESS_PLAN_H

#include "tests/harness/harness.h"

/* FERRY_TEST_SCALE multiplies the rounds (default 1). */
static inline int test_scale(void)
{
	const char *s = getenv("FERRY_TEST_SCALE");

	return s && atoi(s) > 0 ? atoi(s) : 1;
}

/* Log-uniform sizes, 1 B .. 2^(bits + 1) - 1. */
static inline uint64_t random_len_bits(uint64_t *seed, unsigned bits)
{
	unsigned b = (unsigned)(splitmix(seed) % bits);

	return (splitmix(seed) & ((1ull << b) - 1)) | (1ull << b);
}

struct planned {
	enum ferry_op op;
	uint64_t off, len, seed;
};

/* Up to max requests of random op and size (random_len_bits(bits)) at
 * increasing, non-overlapping offsets of an area of area bytes: how many. */
static inline unsigned plan_batch(uint64_t *seed, struct planned *pl, unsigned max,
				  uint64_t area, unsigned bits)
{
	uint64_t used = 0;
	unsigned n = 0;

	while (n < max) {
		uint64_t len = random_len_bits(seed, bits), gap = splitmix(seed) % 4096;

		if (used + gap + len > area)
			break;
		pl[n] = (struct planned){ splitmix(seed) & 1 ? FERRY_OP_WRITE : FERRY_OP_READ,
					  used + gap, len, splitmix(seed) };
		used += gap + len;
		n++;
	}
	return n;
}

/* Submit n requests, wait, every one DONE with all its bytes; reset. */
static inline void run_all_done(struct ferry_batch *b, const struct ferry_req *r, unsigned n)
{
	assert_int_equal(ferry_submit(b, r, n), 0);
	assert_int_equal(ferry_batch_wait(b, 120000), 0);
	for (unsigned i = 0; i < n; i++) {
		struct ferry_req_status st;

		assert_int_equal(ferry_req_status(b, i, &st), 0);
		assert_int_equal(st.state, FERRY_DONE);
		assert_int_equal(st.bytes, r[i].len);
	}
	assert_int_equal(ferry_batch_reset(b), 0);
}

#endif /* FERRY_TESTS_HARNESS_PLAN_H */
