/* SPDX-License-Identifier: MIT */
/*
 * Slicing arithmetic, the per-core slice pool and slice lists; the bell
 * that ending requests ring for a waiting notification.
 *
 * The cutting rule is checked against its defining properties rather than
 * a second copy of the formula: every slice but the last is exactly
 * slice_size, the slices tile [0, len), and the last one is never shorter
 * than a quarter slice unless it is the only one (a short tail is merged),
 * so it lies in [ss/4, ss + ss/4 - 1] -- unless the merged slice would be
 * longer than SLICE_MAX_LEN (what every transport takes), then the tail
 * is a slice of its own.  Those properties fix the count uniquely, so a
 * wrong count cannot pass them.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <setjmp.h>
#include <cmocka.h>

#include <sys/eventfd.h>
#include <unistd.h>

#include "slice/cut.h"
#include "slice/request.h"
#include "slice/slice.h"

#define SS 65536u
#define TIB (1ull << 40)

/* splitmix64: deterministic, so a failure reproduces. */
static uint64_t rng_state = 0x5eed5eed12345678ull;

static uint64_t rnd(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Longest slice the merge rule may produce (below 4 bytes nothing merges). */
static uint64_t max_slice(uint32_t ss)
{
	return ss / 4 ? (uint64_t)ss + ss / 4 - 1 : ss;
}

/* Check slice i of n: in range, contiguous with the previous one, right size. */
static void check_slice(uint64_t len, uint32_t ss, uint64_t n, uint64_t i, uint64_t *expect_off)
{
	uint64_t off;
	uint32_t slen;

	slice_bounds(len, ss, n, i, &off, &slen);
	assert_int_equal(off, *expect_off);
	assert_true(slen > 0);
	assert_true(slen <= max_slice(ss));
	assert_true(slen <= SLICE_MAX_LEN); /* ss <= SLICE_MAX_LEN here, as opts allow */
	/* No wrap: the slice ends inside the request. */
	assert_true(off < len);
	assert_true(slen <= len - off);
	if (i + 1 < n) {
		assert_int_equal(slen, ss);
	} else {
		/* Last slice ends exactly at len; short only if it is the only one. */
		assert_int_equal(off + slen, len);
		if (n > 1 && (uint64_t)ss + slen <= SLICE_MAX_LEN)
			assert_true(slen >= ss / 4); /* else merging it was too long */
	}
	*expect_off = off + slen;
}

/* Every slice of a request of moderate size; returns the count. */
static uint64_t check_all_slices(uint64_t len, uint32_t ss)
{
	uint64_t n = slice_count(len, ss), off = 0, sum = 0;

	assert_true(n >= 1);
	for (uint64_t i = 0; i < n; i++) {
		uint64_t before = off;

		check_slice(len, ss, n, i, &off);
		sum += off - before;
	}
	assert_int_equal(sum, len);
	return n;
}

/* Huge requests: only the first two and last two slices, no walk. */
static void check_huge(uint64_t len, uint32_t ss, uint64_t expect_n)
{
	uint64_t n = slice_count(len, ss), off;

	assert_int_equal(n, expect_n);
	off = 0;
	check_slice(len, ss, n, 0, &off);
	check_slice(len, ss, n, 1, &off);
	off = (n - 2) * ss;
	check_slice(len, ss, n, n - 2, &off);
	check_slice(len, ss, n, n - 1, &off);
	assert_int_equal(off, len);
}

static void test_count_edges(void **state)
{
	uint64_t off;
	uint32_t slen;

	(void)state;
	assert_int_equal(check_all_slices(1, SS), 1);
	assert_int_equal(check_all_slices(SS - 1, SS), 1);
	assert_int_equal(check_all_slices(SS, SS), 1);
	/* A 1-byte tail rides on the first slice. */
	assert_int_equal(check_all_slices(SS + 1, SS), 1);
	slice_bounds(SS + 1, SS, 1, 0, &off, &slen);
	assert_int_equal(off, 0);
	assert_int_equal(slen, SS + 1);
	/* Largest merged tail: one slice of ss + ss/4 - 1. */
	assert_int_equal(check_all_slices(SS + SS / 4 - 1, SS), 1);
	slice_bounds(SS + SS / 4 - 1, SS, 1, 0, &off, &slen);
	assert_int_equal(slen, SS + SS / 4 - 1);
	/* A quarter-slice tail is its own WR. */
	assert_int_equal(check_all_slices(SS + SS / 4, SS), 2);
	slice_bounds(SS + SS / 4, SS, 2, 1, &off, &slen);
	assert_int_equal(off, SS);
	assert_int_equal(slen, SS / 4);
	assert_int_equal(check_all_slices(2ull * SS, SS), 2);
	assert_int_equal(check_all_slices(2ull * SS - 1, SS), 2);
	assert_int_equal(check_all_slices(2ull * SS + 1, SS), 2);
	/* 100 bytes past three slices: merged into the third. */
	assert_int_equal(check_all_slices(3ull * SS + 100, SS), 3);
	slice_bounds(3ull * SS + 100, SS, 3, 2, &off, &slen);
	assert_int_equal(off, 2ull * SS);
	assert_int_equal(slen, SS + 100);
	assert_int_equal(check_all_slices(3ull * SS + SS / 4, SS), 4);
	/* 1 GiB slices: a 4 KiB tail is a slice of its own, not a WR of
	 * 1 GiB + 4 KiB (more than tcp takes). */
	assert_int_equal(check_all_slices((1ull << 30) + 4096, 1u << 30), 2);
	slice_bounds((1ull << 30) + 4096, 1u << 30, 2, 1, &off, &slen);
	assert_int_equal(slen, 4096);

	/* Tiny slice sizes: ss/4 == 0 means nothing merges, and nothing breaks. */
	assert_int_equal(check_all_slices(7, 1), 7);
	assert_int_equal(check_all_slices(7, 3), 3);
	assert_int_equal(check_all_slices(9, 4), 3); /* tail 1 < 4/4: merged */
}

static void test_count_huge(void **state)
{
	(void)state;
	/* 1 TiB: exact multiple. */
	check_huge(TIB, SS, TIB / SS);
	check_huge(TIB + 1, SS, TIB / SS);
	check_huge(TIB + SS / 4, SS, TIB / SS + 1);
	/* 2^63 - 1: tail ss - 1 is a slice of its own. */
	check_huge(UINT64_MAX / 2, SS, UINT64_MAX / 2 / SS + 1);
	check_huge(UINT64_MAX / 2, 4096, UINT64_MAX / 2 / 4096 + 1);
	/* The largest length there is: off + slen must not wrap. */
	check_huge(UINT64_MAX, SS, UINT64_MAX / SS + 1);
	check_huge(UINT64_MAX, 1u << 20, UINT64_MAX / (1u << 20) + 1);
	check_huge(UINT64_MAX, 1u << 30, UINT64_MAX / (1u << 30) + 1);
	/* A huge length whose tail is merged. */
	check_huge(UINT64_MAX - (SS - 1) + 5, SS, (UINT64_MAX - (SS - 1) + 5) / SS);
	/* Largest slice size opts allow: a tail never merges (a slice of
	 * 1 GiB + tail is more than tcp takes: FAILED -EIO before). */
	check_huge(5ull << 30, 1u << 30, 5);
	check_huge((5ull << 30) + 4096, 1u << 30, 6);
	check_huge((5ull << 30) + (1ull << 28) - 1, 1u << 30, 6);
	check_huge((5ull << 30) + (1ull << 28), 1u << 30, 6);
	/* The largest that still merges: slice + tail exactly SLICE_MAX_LEN. */
	check_huge(3ull * (SLICE_MAX_LEN - 4096) + 4096, SLICE_MAX_LEN - 4096, 3);
	check_huge(3ull * (SLICE_MAX_LEN - 4096) + 4097, SLICE_MAX_LEN - 4096, 4);
}

/* Lengths that hit the interesting spots around multiples of ss. */
static uint64_t random_len(uint32_t ss)
{
	uint64_t k = rnd() % 48, r = rnd();

	switch (r % 6) {
	case 0:
		return 1 + rnd() % (2ull * ss);
	case 1:
		return k * ss + 1 + rnd() % 4;                 /* just past a multiple */
	case 2:
		return (k + 1) * ss - rnd() % 4;               /* at or just below one */
	case 3:
		return (k + 1) * ss + ss / 4 - 2 + rnd() % 4; /* around the merge edge */
	default:
		return 1 + rnd() % (64ull * ss);
	}
}

static void test_count_random(void **state)
{
	static const uint32_t sizes[] = { 4096, 65536, 1u << 20 };

	(void)state;
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		uint32_t ss = sizes[s];

		for (int i = 0; i < 3000; i++) {
			uint64_t len = random_len(ss);
			uint64_t n = check_all_slices(len, ss);

			/* Never more WRs than a plain ceiling division, never fewer than floor. */
			assert_true(n <= (len + ss - 1) / ss);
			assert_true(n >= (len / ss ? len / ss : 1));
		}
		/* And some huge ones, endpoints only. */
		for (int i = 0; i < 300; i++) {
			uint64_t len = (rnd() >> (rnd() % 20)) | (1ull << 33);
			uint64_t n = slice_count(len, ss);

			check_huge(len, ss, n);
		}
	}
}

static void check_parts(uint64_t n, unsigned nparts)
{
	uint64_t lo = n / nparts, hi = lo + (n % nparts != 0);
	uint64_t prev = slice_part_start(n, nparts, 0), total = 0;

	assert_int_equal(prev, 0);
	for (unsigned p = 1; p <= nparts; p++) {
		uint64_t cur = slice_part_start(n, nparts, p);

		/* Monotonic, and every part is floor or ceil of n / nparts. */
		assert_true(cur >= prev);
		assert_true(cur - prev == lo || cur - prev == hi);
		total += cur - prev;
		prev = cur;
	}
	assert_int_equal(prev, n);
	assert_int_equal(total, n);
}

static void test_part_start(void **state)
{
	static const uint64_t ns[] = {
		0, 1, 2, 3, 63, 64, 65, 1000, 65535, 1ull << 32, (1ull << 32) + 7,
		1ull << 47, (1ull << 52) + 12345, UINT64_MAX / 3, UINT64_MAX - 1, UINT64_MAX,
	};

	(void)state;
	for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++)
		for (unsigned np = 1; np <= 64; np++)
			check_parts(ns[i], np);
	for (int i = 0; i < 2000; i++) {
		uint64_t n = rnd() >> (rnd() % 64);

		check_parts(n, 1 + (unsigned)(rnd() % 64));
	}
	/* One part is the whole range. */
	assert_int_equal(slice_part_start(UINT64_MAX, 1, 1), UINT64_MAX);
}

static void test_pool(void **state)
{
	enum { N = 100 };
	struct slice_pool p;
	struct slice *got[N], *a, *b;
	uint8_t seen[N] = { 0 };

	(void)state;
	assert_int_equal(slice_pool_init(&p, 0, -1), -EINVAL);

	assert_int_equal(slice_pool_init(&p, N, -1), 0);
	assert_int_equal(p.size, N);
	assert_int_equal(p.avail, N);
	for (int i = 0; i < N; i++) {
		got[i] = slice_get(&p);
		assert_non_null(got[i]);
		/* Each from the slab, each once, and handed out in slab order. */
		assert_true(got[i] >= p.slab && got[i] < p.slab + N);
		assert_ptr_equal(got[i], &p.slab[i]);
		assert_int_equal(seen[got[i] - p.slab]++, 0);
		assert_int_equal(p.avail, N - 1 - i);
		/* The memory is really ours: scribble over the whole slice. */
		memset(got[i], 0xab, sizeof(*got[i]));
	}
	/* Empty is back-pressure: NULL, repeatedly, nothing corrupted. */
	assert_null(slice_get(&p));
	assert_null(slice_get(&p));
	assert_int_equal(p.avail, 0);

	/* LIFO: the last slice put back is the first handed out. */
	slice_put(&p, got[10]);
	slice_put(&p, got[20]);
	assert_int_equal(p.avail, 2);
	a = slice_get(&p);
	b = slice_get(&p);
	assert_ptr_equal(a, got[20]);
	assert_ptr_equal(b, got[10]);
	assert_null(slice_get(&p));

	/* Put everything back; the full pool comes out again in reverse. */
	for (int i = 0; i < N; i++)
		slice_put(&p, got[i]);
	assert_int_equal(p.avail, N);
	for (int i = N; i-- > 0;)
		assert_ptr_equal(slice_get(&p), got[i]);
	assert_null(slice_get(&p));
	for (int i = 0; i < N; i++)
		slice_put(&p, got[i]);
	slice_pool_fini(&p);
	assert_null(p.slab);
	assert_int_equal(p.size, 0);
	assert_int_equal(p.avail, 0);

	/* On an explicit node (0 exists wherever libnuma works, else falls back). */
	assert_int_equal(slice_pool_init(&p, 4096, 0), 0);
	for (uint32_t i = 0; i < 4096; i++)
		assert_non_null(slice_get(&p));
	assert_null(slice_get(&p));
	slice_pool_fini(&p);
	/* fini on a finished pool is harmless. */
	slice_pool_fini(&p);
}

/* Cutting a part: slices in order on the list, tiling the request, the
 * budget and a dry pool stopping it where it can go on later. */
static void test_cut_part(void **state)
{
	struct ferry_rq rq = { .local = 0x100000, .remote = 0x900000, .len = 5ull * SS + SS / 2,
			       .op = 1 };
	struct cut_tmpl t = { .rq = &rq, .ep = (struct ferry_ep *)&rq, .lkey = 7, .rkey = 9,
			      .slice_size = SS };
	struct cut_part pt = { .rq = &rq };
	struct slice_pool p;
	struct slice_list l;
	struct slice *s, extra;
	bool dry = false;
	uint64_t i = 0;

	(void)state;
	rq.nslices = slice_count(rq.len, SS);
	assert_int_equal(rq.nslices, 6);
	pt.end = rq.nslices;
	assert_int_equal(slice_pool_init(&p, 5, -1), 0);
	slice_list_init(&l);
	assert_int_equal(cut_part_slices(&p, &t, &pt, 4, &l, &dry), 4); /* the budget */
	assert_false(dry);
	assert_int_equal(pt.next, 4);
	assert_int_equal(cut_part_slices(&p, &t, &pt, 100, &l, &dry), 1); /* the pool */
	assert_true(dry);
	assert_int_equal(pt.next, 5);
	assert_int_equal(l.count, 5);
	assert_int_equal(p.avail, 0);
	for (s = l.head; s; s = s->next, i++) {
		assert_ptr_equal(s->rq, &rq);
		assert_ptr_equal(s->ep, t.ep);
		assert_int_equal(s->local, rq.local + i * SS);
		assert_int_equal(s->remote, rq.remote + i * SS);
		assert_int_equal(s->len, SS);
		assert_int_equal(s->lkey, 7);
		assert_int_equal(s->rkey, 9);
		assert_int_equal(s->op, 1);
		assert_int_equal(s->tries, 0);
	}
	assert_int_equal(i, 5);
	/* The list's tail is right: a push lands last. */
	slice_list_push(&l, &extra);
	assert_int_equal(l.count, 6);
	assert_ptr_equal(slice_list_pop(&l), &p.slab[0]);
	while ((s = slice_list_pop(&l)) && s != &extra)
		slice_put(&p, s);
	slice_put(&p, &p.slab[0]);
	assert_int_equal(p.avail, 5);
	/* The rest: the tail, the request's last bytes. */
	dry = false;
	assert_int_equal(cut_part_slices(&p, &t, &pt, 100, &l, &dry), 1);
	assert_false(dry);
	assert_int_equal(pt.next, pt.end);
	assert_int_equal(l.count, 1);
	assert_int_equal(l.head->local, rq.local + 5ull * SS);
	assert_int_equal(l.head->len, SS / 2);
	assert_null(l.head->next);
	/* Nothing left to cut: nothing changes. */
	assert_int_equal(cut_part_slices(&p, &t, &pt, 100, &l, &dry), 0);
	assert_int_equal(l.count, 1);
	slice_put(&p, slice_list_pop(&l));
	assert_int_equal(p.avail, 5);
	slice_pool_fini(&p);
}

static void test_list(void **state)
{
	enum { N = 64 };
	struct slice s[N];
	struct slice *ref[4096];
	struct slice_list l;
	unsigned rh = 0, rt = 0, next = 0;

	(void)state;
	memset(s, 0, sizeof(s));
	slice_list_init(&l);
	assert_null(slice_list_pop(&l));
	assert_int_equal(l.count, 0);

	/* Plain FIFO. */
	for (int i = 0; i < 5; i++)
		slice_list_push(&l, &s[i]);
	assert_int_equal(l.count, 5);
	for (int i = 0; i < 5; i++) {
		assert_ptr_equal(slice_list_pop(&l), &s[i]);
		assert_int_equal(l.count, 4 - i);
	}
	assert_null(slice_list_pop(&l));
	/* Emptied: the tail pointer must be back on head, or this push is lost. */
	slice_list_push(&l, &s[7]);
	assert_ptr_equal(l.head, &s[7]);
	assert_ptr_equal(slice_list_pop(&l), &s[7]);
	assert_null(slice_list_pop(&l));

	/* Push clears a stale ->next from a previous life. */
	s[8].next = &s[9];
	slice_list_push(&l, &s[8]);
	assert_null(s[8].next);
	assert_ptr_equal(slice_list_pop(&l), &s[8]);
	assert_null(slice_list_pop(&l));

	/* Random interleaving against a reference queue; each slice in it at most once. */
	for (int step = 0; step < 20000; step++) {
		if ((rnd() % 3) != 0 && rt - rh < N) {
			struct slice *x = &s[next++ % N];

			slice_list_push(&l, x);
			ref[rt++ % 4096] = x;
		} else {
			struct slice *x = slice_list_pop(&l);

			if (rt == rh) {
				assert_null(x);
			} else {
				assert_ptr_equal(x, ref[rh++ % 4096]);
			}
		}
		assert_int_equal(l.count, rt - rh);
	}
}

/* What the bell's eventfd holds (0: nothing written since the last read). */
static eventfd_t bell_rings(int fd)
{
	eventfd_t v = 0;

	return eventfd_read(fd, &v) == 0 ? v : 0;
}

/*
 * A request's end rings the batch's bell only under RQ_BATCH_BELL, one
 * write until rung is reset (both end paths: rq_end and a flushed run),
 * and the flag changes neither the count nor the owner's wake-up.
 */
static void test_batch_bell(void **state)
{
	int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	struct rq_bell bell = { .fd = fd };
	struct rq_batch b = { .pending = 5, .bell = &bell };
	struct ferry_rq rq[5];
	struct rq_ends x = { 0 };

	(void)state;
	assert_true(fd >= 0);
	memset(rq, 0, sizeof(rq));
	for (unsigned i = 0; i < 5; i++) {
		rq[i].batch = &b;
		rq[i].nslices = 1;
	}
	assert_int_equal(rq_end(&rq[0], 0), 0); /* no flag: no ring */
	assert_int_equal(bell_rings(fd), 0);
	assert_int_equal(bell.rung, 0);

	b.pending |= RQ_BATCH_BELL;
	assert_int_equal(rq_end(&rq[1], 0), 0);
	assert_int_equal(bell_rings(fd), 1);
	assert_int_equal(bell.rung, 1);
	assert_int_equal(RQ_BATCH_COUNT(b.pending), 3);
	assert_int_equal(rq_end(&rq[2], 0), 0); /* rung: the sleeper is awake already */
	assert_int_equal(bell_rings(fd), 0);

	bell.rung = 0; /* the sleeper looked again */
	assert_int_equal(rq_account_defer(&x, &rq[3], 0, 0), 0);
	assert_int_equal(rq_ends_flush(&x), 0);
	assert_int_equal(bell_rings(fd), 1);

	/* The last request wakes a sleeping owner, flag or not. */
	b.pending |= RQ_BATCH_WAITER;
	bell.rung = 0;
	assert_int_equal(rq_end(&rq[4], 0), 1);
	assert_int_equal(RQ_BATCH_COUNT(b.pending), 0);
	assert_int_equal(bell_rings(fd), 1);
	for (unsigned i = 0; i < 5; i++)
		assert_int_equal(rq[i].state, RQ_DONE);
	close(fd);
}

/*
 * An ended list of one request (a latency loop's burst) is released like a
 * run of one: its references dropped, its outcome (a cancel that came after
 * every byte moved is DONE, an error FAILED and counted), the batch's count
 * and the owner's wake-up.
 */
static void test_ends_flush_lone(void **state)
{
	struct rq_batch b = { .pending = 3 | RQ_BATCH_WAITER };
	uint64_t lrefs = 3, srefs = 3;
	struct ferry_rq rq[3];
	struct rq_ends x = { 0 };

	(void)state;
	memset(rq, 0, sizeof(rq));
	for (unsigned i = 0; i < 3; i++) {
		rq[i].batch = &b;
		rq[i].nslices = 1;
		rq[i].len = 8;
		rq[i].lreg_refs = &lrefs;
		rq[i].seg_refs = &srefs;
	}
	assert_int_equal(rq_account_defer(&x, &rq[0], 8, 0), 0);
	assert_int_equal(rq_ends_flush(&x), 0);
	assert_int_equal(x.n, 0);
	assert_int_equal(rq[0].state, RQ_DONE);
	assert_int_equal(rq[0].ok_bytes, 8);
	rq[1].error = -ECANCELED; /* cancelled with its one slice posted */
	assert_int_equal(rq_account_defer(&x, &rq[1], 8, 0), 0);
	assert_int_equal(rq_ends_flush(&x), 0);
	assert_int_equal(rq[1].state, RQ_DONE);
	assert_int_equal(b.failed, 0);
	assert_int_equal(lrefs, 1);
	assert_int_equal(srefs, 1);
	assert_int_equal(rq_account_defer(&x, &rq[2], 8, -EIO), 0);
	assert_int_equal(rq_ends_flush(&x), 1); /* the last: wakes the sleeping owner */
	assert_int_equal(rq[2].state, RQ_FAILED);
	assert_int_equal(rq[2].error, -EIO);
	assert_int_equal(b.failed, 1);
	assert_int_equal(RQ_BATCH_COUNT(b.pending), 0);
	assert_int_equal(lrefs, 0);
	assert_int_equal(srefs, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_count_edges),
		cmocka_unit_test(test_count_huge),
		cmocka_unit_test(test_count_random),
		cmocka_unit_test(test_part_start),
		cmocka_unit_test(test_pool),
		cmocka_unit_test(test_cut_part),
		cmocka_unit_test(test_list),
		cmocka_unit_test(test_batch_bell),
		cmocka_unit_test(test_ends_flush_lone),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
