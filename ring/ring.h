/* SPDX-License-Identifier: MIT */
/*
 * SPSC pointer rings (Concurrency Kit ck_ring) between one producer thread
 * and one consumer thread: a submitting port and a core, the control path
 * and a core.  A full ring is back-pressure: enqueue returns false and the
 * producer decides (wait or retry); nothing is dropped.
 *
 * ck facts that bite: the size must be a power of two >= 4 and the capacity
 * is size - 1; enqueue stores the pointer value passed in.  ck orders its
 * slot accesses with inline-assembly fences that ThreadSanitizer cannot see,
 * so in TSan builds (only) each ring also has a mutex around its operations:
 * it gives TSan the same happens-before edges the ring really provides.
 */
#ifndef FERRY_RING_H
#define FERRY_RING_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <ck_ring.h>

#include "ring/base/atomics.h"
#include "ring/base/compiler.h"

struct ferry_ring {
	struct ck_ring ring __attribute__((aligned(FERRY_CACHE_LINE)));
	struct ck_ring_buffer *slots __attribute__((aligned(FERRY_CACHE_LINE)));
	uint32_t size;
#ifdef FERRY_TSAN
	pthread_mutex_t tsan_lock;
#endif
};

/* Allocate slots for a ring of size entries (power of two >= 4); -EINVAL/-ENOMEM. */
int ferry_ring_init(struct ferry_ring *r, uint32_t size);
void ferry_ring_fini(struct ferry_ring *r);

/*
 * A producer's entries written behind the ring's tail and not yet seen by
 * the consumer: ferry_ring_stage writes one (false when the ring, counting
 * those staged, is full), ferry_ring_publish makes them visible together
 * -- one fence and one store of the tail for the lot instead of one per
 * entry, and the consumer's head read only when the free entries last
 * seen run out.  The producer's alone: keep it off the ring's lines.
 * Zeroed: nothing staged, no room known yet.  A ring fed through a run
 * takes no ferry_ring_put (the room it remembers would be wrong).
 */
struct ferry_ring_run {
	uint32_t n;                    /* staged */
	uint32_t room;                 /* free entries at the last look, the staged included */
};

/* The room seen now (a look at the consumer's head); true when one more fits. */
bool ferry_ring_room(struct ferry_ring *r, struct ferry_ring_run *run);
#ifdef FERRY_TSAN
bool ferry_ring_stage(struct ferry_ring *r, struct ferry_ring_run *run, void *obj);
void ferry_ring_publish(struct ferry_ring *r, struct ferry_ring_run *run);
#else
static inline bool ferry_ring_stage(struct ferry_ring *r, struct ferry_ring_run *run, void *obj)
{
	if (unlikely(run->n == run->room) && !ferry_ring_room(r, run))
		return false;
	r->slots[(r->ring.p_tail + run->n) & r->ring.mask].value = obj; /* the tail is ours */
	run->n++;
	return true;
}

static inline void ferry_ring_publish(struct ferry_ring *r, struct ferry_ring_run *run)
{
	ck_pr_fence_store(); /* the entries before the tail that covers them (as ck's enqueue) */
	ck_pr_store_uint(&r->ring.p_tail, r->ring.p_tail + run->n);
	run->room -= run->n;
	run->n = 0;
}
#endif
/*
 * Producer: enqueue one pointer; false when full.  A run of one, not
 * ck_ring_enqueue_spsc: ck's enqueue reads the consumer's head relaxed,
 * with nothing ordering that read before the slot's reuse (x86 and arm64
 * keep it by their load-to-store rules, C11 does not); ferry_ring_room
 * reads it with the acquire that pairs with the consumer's release.
 * Off the one-slice path (commands, repairs, hand-overs).
 */
static inline bool ferry_ring_put(struct ferry_ring *r, void *obj)
{
	struct ferry_ring_run run = { 0, 0 };

	if (!ferry_ring_stage(r, &run, obj))
		return false;
	ferry_ring_publish(r, &run);
	return true;
}

/*
 * Producer: a run staged from locals.  A loop that stores elsewhere
 * between stages would make the compiler read the ring's slots, tail and
 * mask and the run's count again for every entry; a window holds them.
 * ferry_ring_window_open takes them (stop: the staged count from which
 * the window stages no more, at most the room last seen),
 * ferry_ring_window_put stages one below stop (false: the caller stages
 * it with ferry_ring_stage, after ferry_ring_window_close), and
 * ferry_ring_window_close writes the count back to the run.  Under TSan
 * the window is always closed: every stage takes the ring's lock.
 */
struct ferry_ring_window {
	struct ck_ring_buffer *slots;
	unsigned mask;
	unsigned pos;                  /* the tail plus run->n, while open */
	unsigned stop;                 /* pos from which it stages no more */
};

static inline void ferry_ring_window_open(const struct ferry_ring *r,
					  const struct ferry_ring_run *run,
					  struct ferry_ring_window *w, unsigned stop)
{
	w->slots = r->slots;
	w->mask = r->ring.mask;
	w->pos = r->ring.p_tail + run->n; /* the tail is ours */
#ifdef FERRY_TSAN
	(void)stop;
	w->stop = w->pos;
#else
	if (stop > run->room)
		stop = run->room;
	w->stop = stop > run->n ? r->ring.p_tail + stop : w->pos; /* never below pos */
#endif
}

static inline bool ferry_ring_window_put(struct ferry_ring_window *w, void *obj)
{
	if (unlikely(w->pos == w->stop))
		return false;
	w->slots[w->pos++ & w->mask].value = obj;
	return true;
}

static inline void ferry_ring_window_close(const struct ferry_ring *r, struct ferry_ring_run *run,
					   const struct ferry_ring_window *w)
{
	run->n = w->pos - r->ring.p_tail;
}

/* One more fits, by the room last seen or a new look. */
static inline bool ferry_ring_fits(struct ferry_ring *r, struct ferry_ring_run *run)
{
	return run->n < run->room || ferry_ring_room(r, run);
}

/* Consumer: dequeue up to max pointers into objs; returns the count. */
unsigned ferry_ring_get_burst(struct ferry_ring *r, void **objs, unsigned max);

/*
 * Consumer: a burst read in place, not copied out.  ferry_ring_look
 * finds up to max entries (the count), ferry_ring_at reads the k-th of
 * them, ferry_ring_done gives their slots back to the producer -- once,
 * after the last read.
 */
struct ferry_ring_view {
	unsigned head;                 /* the consumer's head when looked */
	unsigned n;
	unsigned mask;                 /* the ring's, and its slots: in the view, so */
	struct ck_ring_buffer *slots;  /* a loop storing elsewhere does not reload them */
};
#ifdef FERRY_TSAN
unsigned ferry_ring_look(struct ferry_ring *r, struct ferry_ring_view *v, unsigned max);
void ferry_ring_done(struct ferry_ring *r, const struct ferry_ring_view *v);
#else
static inline unsigned ferry_ring_look(struct ferry_ring *r, struct ferry_ring_view *v,
				       unsigned max)
{
	unsigned n = ck_pr_load_uint(&r->ring.p_tail) - r->ring.c_head; /* the head is ours */

	v->head = r->ring.c_head;
	v->n = n < max ? n : max;
	v->mask = r->ring.mask;
	v->slots = r->slots;
	ck_pr_fence_load(); /* the entries after the tail that covers them */
	return v->n;
}

static inline void ferry_ring_done(struct ferry_ring *r, const struct ferry_ring_view *v)
{
	/* Read before the producer may reuse them (a release: see get_burst).
	 * pairs with the producer's read of c_head in ferry_ring_room */
	store_release(r->ring.c_head, v->head + v->n);
}
#endif
static inline void *ferry_ring_at(const struct ferry_ring_view *v, unsigned k)
{
	return v->slots[(v->head + k) & v->mask].value;
}
/* Consumer: dequeue one pointer; NULL when empty. */
void *ferry_ring_get(struct ferry_ring *r);
/* Entries queued now (approximate from a third thread). */
unsigned ferry_ring_count(const struct ferry_ring *r);
/* Consumer's cheap look before a dequeue: false means surely empty (one
 * load each of the two indices, no call).  Under TSan, the locked count. */
static inline bool ferry_ring_peek(const struct ferry_ring *r)
{
#ifdef FERRY_TSAN
	return ferry_ring_count(r) != 0;
#else
	return ck_ring_size(&r->ring) != 0;
#endif
}

/* Usable capacity (size - 1). */
static inline unsigned ferry_ring_capacity(const struct ferry_ring *r) { return r->size - 1; }

#endif /* FERRY_RING_H */
