/* SPDX-License-Identifier: MIT */
/*
 * Slices: a request (or the part of it one core serves) is cut into work
 * requests of slice_size bytes; a tail shorter than a quarter slice is merged
 * into the previous slice, so no WR is tiny unless the whole request is.
 * Slices come from a per-core pool allocated at start-up: the hot path never
 * mallocs, and an empty pool is back-pressure, never failure.
 */
#ifndef FERRY_SLICE_H
#define FERRY_SLICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ferry_rq;
struct ferry_ep;

/*
 * The longest slice (one WR) every transport takes: tcp's frame cap
 * (qp/tcp/frame.h), and the largest slice_size.  A short tail is merged
 * only while the slice it rides on stays within it.
 */
#define SLICE_MAX_LEN (1u << 30)

/* Number of slices len bytes are cut into (len > 0, slice_size > 0). */
uint64_t slice_count_long(uint64_t len, uint32_t slice_size);
static inline uint64_t slice_count(uint64_t len, uint32_t slice_size)
{
	return len <= slice_size ? 1 : slice_count_long(len, slice_size);
}

/* Offset and length of slice i of n for a request of len bytes. */
static inline void slice_bounds(uint64_t len, uint32_t slice_size, uint64_t n, uint64_t i,
				uint64_t *off, uint32_t *slen)
{
	*off = i * slice_size;
	*slen = (i + 1 < n) ? slice_size : (uint32_t)(len - *off);
}

/* First slice index of part p of nparts over n slices (p == nparts gives n). */
static inline uint64_t slice_part_start(uint64_t n, unsigned nparts, unsigned p)
{
	if (nparts == 1)
		return p ? n : 0;
	/* p <= 64: n * p fits 64 bits unless n is huge (a 128-bit division is a call). */
	if (n <= UINT32_MAX)
		return n * p / nparts;
	return (uint64_t)(((unsigned __int128)n * p) / nparts);
}

/* One RDMA work request in the making; lives in a core's pool. */
struct slice {
	struct slice *next;   /* endpoint pending list / pool free list */
	struct ferry_rq *rq;  /* request whose bytes these are */
	struct ferry_ep *ep;  /* endpoint it was cut for (retries go back there) */
	uint64_t post_tsc;    /* when it was posted (latency histogram); a foreign
	                       * slice in xfer_wait: when it came (handover.c) */
	/* local to op: a work request's fields, in its order (qp/post copies
	 * them as one block) */
	uint64_t local;
	uint64_t remote;
	uint32_t len;
	uint32_t lkey;
	uint32_t rkey;
	uint8_t op;           /* enum nic_op */
	uint8_t unsignaled;   /* always 0 (the slab is zeroed, nothing writes
	                       * it): a WR's signaled in the block qp/post copies */
	uint8_t tries;        /* retries so far */
	uint8_t home;         /* index of the core whose pool it belongs to */
};

_Static_assert(sizeof(struct slice) == 64, "a slice is one cache line");

/* Per-core pool: a LIFO free list over one array (warm slices are reused first). */
struct slice_pool {
	struct slice *free;
	struct slice *slab;
	uint32_t size;
	uint32_t avail;
};

/* Allocate the pool's slab (on numa_node when >= 0) and thread the free list. */
int slice_pool_init(struct slice_pool *p, uint32_t size, int numa_node);
void slice_pool_fini(struct slice_pool *p);

static inline struct slice *slice_get(struct slice_pool *p)
{
	struct slice *s = p->free;

	if (s) {
		p->free = s->next;
		p->avail--;
	}
	return s;
}

static inline void slice_put(struct slice_pool *p, struct slice *s)
{
	s->next = p->free;
	p->free = s;
	p->avail++;
}

/* A FIFO of slices linked through ->next (endpoint pending lists). */
struct slice_list {
	struct slice *head;
	struct slice **tailp;
	uint32_t count;
};

static inline void slice_list_init(struct slice_list *l)
{
	l->head = NULL;
	l->tailp = &l->head;
	l->count = 0;
}

static inline void slice_list_push(struct slice_list *l, struct slice *s)
{
	s->next = NULL;
	*l->tailp = s;
	l->tailp = &s->next;
	l->count++;
}

/* Put s first: a retried slice goes before work cut after it. */
static inline void slice_list_push_front(struct slice_list *l, struct slice *s)
{
	s->next = l->head;
	l->head = s;
	if (l->tailp == &l->head)
		l->tailp = &s->next;
	l->count++;
}

/* Drop the first n slices of l (walked by the caller), first the one
 * after them (NULL: none). */
static inline void slice_list_cut(struct slice_list *l, struct slice *first, uint32_t n)
{
	l->head = first;
	if (!first)
		l->tailp = &l->head;
	l->count -= n;
}

static inline struct slice *slice_list_pop(struct slice_list *l)
{
	struct slice *s = l->head;

	if (s) {
		l->head = s->next;
		if (!l->head)
			l->tailp = &l->head;
		l->count--;
	}
	return s;
}

#endif /* FERRY_SLICE_H */
