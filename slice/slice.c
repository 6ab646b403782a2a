/* SPDX-License-Identifier: MIT */
#include "slice/slice.h"

#include <errno.h>
#include <numa.h>
#include <stdlib.h>
#include <string.h>

uint64_t slice_count_long(uint64_t len, uint32_t slice_size)
{
	uint64_t n = len / slice_size;
	uint64_t tail = len % slice_size;

	if (tail == 0)
		return n;
	/* A short tail rides on the previous slice instead of costing a WR,
	 * unless that slice would be longer than a transport takes (1 GiB
	 * slices: 1 GiB + 4 KiB was one WR, which tcp refuses). */
	if (n > 0 && tail < slice_size / 4 && slice_size + tail <= SLICE_MAX_LEN)
		return n;
	return n + 1;
}

int slice_pool_init(struct slice_pool *p, uint32_t size, int numa_node)
{
	size_t bytes = (size_t)size * sizeof(struct slice);

	memset(p, 0, sizeof(*p));
	if (size == 0)
		return -EINVAL;
	if (numa_node >= 0 && numa_available() >= 0)
		p->slab = numa_alloc_onnode(bytes, numa_node);
	else
		p->slab = numa_alloc_local(bytes);
	if (!p->slab)
		return -ENOMEM;
	/* Touch every slice now, on the owner's node, not on the hot path. */
	memset(p->slab, 0, bytes);
	p->size = size;
	for (uint32_t i = size; i-- > 0;)
		slice_put(p, &p->slab[i]);
	return 0;
}

void slice_pool_fini(struct slice_pool *p)
{
	if (p->slab)
		numa_free(p->slab, (size_t)p->size * sizeof(struct slice));
	memset(p, 0, sizeof(*p));
}
