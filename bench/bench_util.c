/* SPDX-License-Identifier: MIT */
/*
 * ferry_bench helpers without an engine: the --verify pattern and the --lat
 * summary (see bench_util.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

/* Spreads the seed over all 64 bits (an odd constant: a bijection). */
#define SEED_MUL 0xd6e8feb86659fd93ull

uint64_t bench_mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static uint64_t pattern_word(uint64_t word, uint64_t seed)
{
	return bench_mix64(word ^ (seed * SEED_MUL));
}

uint8_t bench_pattern_byte(uint64_t pos, uint64_t seed)
{
	return (uint8_t)(pattern_word(pos >> 3, seed) >> ((pos & 7) * 8));
}

/* The 8 bytes of word w as they lie in memory (byte k = bits 8k..8k+7). */
static void word_bytes(uint64_t w, uint8_t out[8])
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	memcpy(out, &w, 8);
#else
	for (int k = 0; k < 8; k++)
		out[k] = (uint8_t)(w >> (k * 8));
#endif
}

/*
 * Byte by byte up to the next multiple of 8 of the position, then whole
 * words (one mix per 8 bytes: a 256 MiB target buffer fills in well under a
 * second even in the emulated VM), then the tail.
 */
void bench_pattern_fill(uint8_t *buf, uint64_t len, uint64_t pos, uint64_t seed)
{
	uint64_t i = 0;
	uint8_t w[8];

	for (; i < len && ((pos + i) & 7); i++)
		buf[i] = bench_pattern_byte(pos + i, seed);
	for (; i + 8 <= len; i += 8) {
		word_bytes(pattern_word((pos + i) >> 3, seed), w);
		memcpy(buf + i, w, 8);
	}
	for (; i < len; i++)
		buf[i] = bench_pattern_byte(pos + i, seed);
}

static uint64_t check_bytes(const uint8_t *buf, uint64_t from, uint64_t to, uint64_t pos,
			    uint64_t seed, uint64_t *first, uint64_t bad)
{
	for (uint64_t i = from; i < to; i++) {
		if (buf[i] == bench_pattern_byte(pos + i, seed))
			continue;
		if (!bad++)
			*first = i;
	}
	return bad;
}

uint64_t bench_pattern_check(const uint8_t *buf, uint64_t len, uint64_t pos, uint64_t seed,
			     uint64_t *first)
{
	uint64_t i = 0, bad = 0;
	uint8_t w[8];

	for (; i < len && ((pos + i) & 7); i++)
		bad = check_bytes(buf, i, i + 1, pos, seed, first, bad);
	for (; i + 8 <= len; i += 8) {
		word_bytes(pattern_word((pos + i) >> 3, seed), w);
		if (memcmp(buf + i, w, 8))
			bad = check_bytes(buf, i, i + 8, pos, seed, first, bad);
	}
	return check_bytes(buf, i, len, pos, seed, first, bad);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

uint64_t bench_percentile(const uint64_t *sorted, uint64_t n, double q)
{
	/* In parts per million, in integers: 0.99 * 100 must be rank 99, not 100. */
	uint64_t ppm = (uint64_t)(q * 1e6 + 0.5), rank;

	if (!n)
		return 0;
	if (ppm > 1000000)
		ppm = 1000000;
	rank = (n * ppm + 999999) / 1000000;
	if (rank < 1)
		rank = 1;
	return sorted[rank - 1];
}

void bench_lat_summary(uint64_t *ns, uint64_t n, struct bench_lat *out)
{
	double sum = 0;

	memset(out, 0, sizeof(*out));
	if (!n)
		return;
	qsort(ns, n, sizeof(*ns), cmp_u64);
	for (uint64_t i = 0; i < n; i++)
		sum += (double)ns[i];
	out->n = n;
	out->min = ns[0];
	out->max = ns[n - 1];
	out->p50 = bench_percentile(ns, n, 0.50);
	out->p99 = bench_percentile(ns, n, 0.99);
	out->p999 = bench_percentile(ns, n, 0.999);
	out->avg = sum / (double)n;
}

static uint64_t samples_rand(struct bench_samples *s)
{
	s->rng += 0x9e3779b97f4a7c15ull;
	return bench_mix64(s->rng);
}

int bench_samples_init(struct bench_samples *s, uint64_t cap, uint64_t seed)
{
	memset(s, 0, sizeof(*s));
	if (cap < 2)
		cap = 2;
	s->v = malloc(cap * sizeof(*s->v));
	if (!s->v)
		return -ENOMEM;
	/* Fault the pages in now, not in the timed loop. */
	memset(s->v, 0, cap * sizeof(*s->v));
	s->cap = cap;
	s->rng = seed;
	bench_samples_reset(s);
	return 0;
}

void bench_samples_free(struct bench_samples *s)
{
	free(s->v);
	s->v = NULL;
	s->cap = s->n = 0;
}

void bench_samples_reset(struct bench_samples *s)
{
	s->n = s->seen = 0;
	s->shift = 0;
	s->min = UINT64_MAX;
	s->max = 0;
	s->sum = 0;
}

/* Keep each kept sample with probability 2^-by, in place. */
static void samples_thin(struct bench_samples *s, unsigned by)
{
	uint64_t mask = (1ull << by) - 1, keep = 0;

	for (uint64_t i = 0; i < s->n; i++)
		if (!(samples_rand(s) & mask))
			s->v[keep++] = s->v[i];
	s->n = keep;
	s->shift += by;
}

void bench_samples_add(struct bench_samples *s, uint64_t ns)
{
	s->seen++;
	s->sum += (double)ns;
	if (ns < s->min)
		s->min = ns;
	if (ns > s->max)
		s->max = ns;
	if (s->shift && (samples_rand(s) & ((1ull << s->shift) - 1)))
		return;
	/* Full: halve what is kept; this sample must pass the new odds too. */
	while (s->n == s->cap) {
		samples_thin(s, 1);
		if (samples_rand(s) & 1)
			return;
	}
	s->v[s->n++] = ns;
}

void bench_samples_add_gaps(struct bench_samples *s, const uint64_t *ts, uint64_t n)
{
	uint64_t j = 0, fit = s->cap - s->n < n ? s->cap - s->n : n;

	/* bench_samples_add's own steps while every sample is kept and fits. */
	for (; !s->shift && j < fit; j++) {
		uint64_t ns = ts[j + 1] - ts[j];

		s->sum += (double)ns;
		if (ns < s->min)
			s->min = ns;
		if (ns > s->max)
			s->max = ns;
		s->v[s->n++] = ns;
	}
	s->seen += j;
	for (; j < n; j++)
		bench_samples_add(s, ts[j + 1] - ts[j]);
}

int bench_samples_summary(struct bench_samples *s, unsigned n, struct bench_lat *out)
{
	uint64_t total = 0, seen = 0, min = UINT64_MAX, max = 0, *all;
	unsigned shift = 0;
	double sum = 0;

	for (unsigned i = 0; i < n; i++)
		shift = s[i].shift > shift ? s[i].shift : shift;
	for (unsigned i = 0; i < n; i++) {
		if (s[i].shift < shift)
			samples_thin(&s[i], shift - s[i].shift);
		total += s[i].n;
		seen += s[i].seen;
		sum += s[i].sum;
		min = s[i].min < min ? s[i].min : min;
		max = s[i].max > max ? s[i].max : max;
	}
	all = malloc((total ? total : 1) * sizeof(*all));
	memset(out, 0, sizeof(*out));
	if (all) {
		total = 0;
		for (unsigned i = 0; i < n; i++) {
			if (!s[i].n)
				continue; /* v may be NULL: memcpy must not see it */
			memcpy(all + total, s[i].v, s[i].n * sizeof(*all));
			total += s[i].n;
		}
		bench_lat_summary(all, total, out);
		free(all);
	}
	if (!seen)
		return all ? 0 : -ENOMEM;
	out->n = seen;
	out->min = min;
	out->max = max;
	out->avg = sum / (double)seen;
	return all ? 0 : -ENOMEM;
}

int bench_thread_on(pthread_t *t, void *(*fn)(void *), void *arg, const cpu_set_t *cpus)
{
	pthread_attr_t attr;
	int rc;

	rc = pthread_attr_init(&attr);
	if (rc)
		return -rc;
	if (cpus)
		rc = pthread_attr_setaffinity_np(&attr, sizeof(*cpus), cpus);
	if (!rc)
		rc = pthread_create(t, &attr, fn, arg);
	pthread_attr_destroy(&attr);
	return -rc;
}
