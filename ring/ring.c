/* SPDX-License-Identifier: MIT */
#include "ring/ring.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int ferry_ring_init(struct ferry_ring *r, uint32_t size)
{
	if (size < 4 || (size & (size - 1)) != 0)
		return -EINVAL;
	memset(r, 0, sizeof(*r));
	r->slots = ferry_zalloc_lines((size_t)size * sizeof(*r->slots));
	if (!r->slots)
		return -ENOMEM;
	memset(r->slots, 0, (size_t)size * sizeof(*r->slots));
	ck_ring_init(&r->ring, size);
	r->size = size;
#ifdef FERRY_TSAN
	pthread_mutex_init(&r->tsan_lock, NULL);
#endif
	return 0;
}

void ferry_ring_fini(struct ferry_ring *r)
{
	free(r->slots);
	r->slots = NULL;
}

#ifdef FERRY_TSAN
#define ring_lock(r) pthread_mutex_lock(&(r)->tsan_lock)
#define ring_unlock(r) pthread_mutex_unlock(&(r)->tsan_lock)
#else
#define ring_lock(r) ((void)0)
#define ring_unlock(r) ((void)0)
#endif


bool ferry_ring_room(struct ferry_ring *r, struct ferry_ring_run *run)
{
	ring_lock(r);
	/* The consumer's head: what it has taken, no later than it was copied
	 * out (ck_ring's enqueue reads it the same way). */
	/* pairs with the consumer's store_release of c_head (get_burst, done) */
	run->room = r->size - 1 - (r->ring.p_tail - load_acquire(r->ring.c_head));
	ring_unlock(r);
	return run->n < run->room;
}

#ifdef FERRY_TSAN
/* As the inline ones, under the ring's lock: every stage looks at the
 * consumer's head under it, so TSan sees the slot it reuses freed. */
bool ferry_ring_stage(struct ferry_ring *r, struct ferry_ring_run *run, void *obj)
{
	bool ok = ferry_ring_room(r, run);

	if (ok) {
		ring_lock(r);
		r->slots[(r->ring.p_tail + run->n) & r->ring.mask].value = obj;
		run->n++;
		ring_unlock(r);
	}
	return ok;
}

void ferry_ring_publish(struct ferry_ring *r, struct ferry_ring_run *run)
{
	ring_lock(r);
	ck_pr_fence_store();
	ck_pr_store_uint(&r->ring.p_tail, r->ring.p_tail + run->n);
	run->room -= run->n;
	run->n = 0;
	ring_unlock(r);
}
#endif

void *ferry_ring_get(struct ferry_ring *r)
{
	void *obj = NULL;

	/* Not ck_ring_dequeue_spsc: its store fence does not order the slot's
	 * load before the head's store on arm64 (see get_burst). */
	if (!ferry_ring_get_burst(r, &obj, 1))
		return NULL;
	return obj;
}

/*
 * ck_ring_dequeue_spsc for up to max entries at once: one load of the
 * producer's tail and one store of our head for the whole burst, with the
 * fences ck places around a single entry (_ck_ring_dequeue_sc).
 */
unsigned ferry_ring_get_burst(struct ferry_ring *r, void **objs, unsigned max)
{
	struct ck_ring *ring = &r->ring;
	unsigned int mask = ring->mask, consumer, n;

	ring_lock(r);
	consumer = ring->c_head; /* ours alone */
	n = ck_pr_load_uint(&ring->p_tail) - consumer; /* the producer's; fenced below */
	if (n > max)
		n = max;
	if (n) {
		ck_pr_fence_load(); /* the entries after the tail that covers them */
		for (unsigned i = 0; i < n; i++)
			objs[i] = r->slots[(consumer + i) & mask].value;
		/* Copied before the producer may reuse them: a release, not ck's
		 * store fence, which on arm64 (dmb ishst) leaves the slot loads
		 * free to finish after the head is seen. */
		/* pairs with the load_acquire of c_head in ferry_ring_room */
		store_release(ring->c_head, consumer + n);
	}
	ring_unlock(r);
	return n;
}

#ifdef FERRY_TSAN
/* Under the lock, as get_burst: the producer's publish happened before,
 * and the reads that follow happen before ferry_ring_done's store. */
unsigned ferry_ring_look(struct ferry_ring *r, struct ferry_ring_view *v, unsigned max)
{
	unsigned n;

	ring_lock(r);
	v->head = r->ring.c_head;
	n = ck_pr_load_uint(&r->ring.p_tail) - v->head;
	v->n = n < max ? n : max;
	v->mask = r->ring.mask;
	v->slots = r->slots;
	ring_unlock(r);
	return v->n;
}

void ferry_ring_done(struct ferry_ring *r, const struct ferry_ring_view *v)
{
	ring_lock(r);
	ck_pr_store_uint(&r->ring.c_head, v->head + v->n);
	ring_unlock(r);
}
#endif

unsigned ferry_ring_count(const struct ferry_ring *r)
{
	unsigned n;

	ring_lock((struct ferry_ring *)r);
	n = ck_ring_size(&r->ring);
	ring_unlock((struct ferry_ring *)r);
	return n;
}
