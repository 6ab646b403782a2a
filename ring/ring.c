/* SPDX-License-Identifier: MIT */
#include "ring.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int ferry_ring_init(struct ferry_ring *r, uint32_t size)
{
	if (size < 4 || (size & (size - 1)) != 0)
		return -EINVAL;
	memset(r, 0, sizeof(*r));
	r->slots = aligned_alloc(FERRY_CACHE_LINE, (size_t)size * sizeof(*r->slots));
	if (!r->slots)
		return -ENOMEM;
	memset(r->slots, 0, (size_t)size * sizeof(*r->slots));
	ck_ring_init(&r->ring, size);
	r->size = size;
	return 0;
}

void ferry_ring_fini(struct ferry_ring *r)
{
	free(r->slots);
	r->slots = NULL;
}

/* ck's accesses are asm or plain memcpy; TSan sees only our release/acquire. */
ferry_no_tsan bool ferry_ring_put(struct ferry_ring *r, void *obj)
{
	ferry_tsan_release(r);
	return ck_ring_enqueue_spsc(&r->ring, r->slots, obj);
}

ferry_no_tsan void *ferry_ring_get(struct ferry_ring *r)
{
	void *obj;

	if (!ck_ring_dequeue_spsc(&r->ring, r->slots, &obj))
		return NULL;
	ferry_tsan_acquire(r);
	return obj;
}

ferry_no_tsan unsigned ferry_ring_get_burst(struct ferry_ring *r, void **objs, unsigned max)
{
	unsigned n = 0;

	while (n < max && ck_ring_dequeue_spsc(&r->ring, r->slots, &objs[n]))
		n++;
	if (n)
		ferry_tsan_acquire(r);
	return n;
}

ferry_no_tsan unsigned ferry_ring_count(const struct ferry_ring *r)
{
	return ck_ring_size(&r->ring);
}
