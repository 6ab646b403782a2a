/* SPDX-License-Identifier: MIT */
#include "ep/sieve.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int sieve_init(struct sieve *sv, uint32_t cap, uint32_t nkeys)
{
	memset(sv, 0, sizeof(*sv));
	if (cap == 0 || cap > nkeys || nkeys > SIEVE_MAX_KEYS)
		return -EINVAL;
	/* One allocation: prev and next, then the membership bytes. */
	sv->prev = calloc(nkeys, 2 * sizeof(uint16_t) + 1);
	if (!sv->prev)
		return -ENOMEM;
	sv->next = sv->prev + nkeys;
	sv->in = (uint8_t *)(sv->next + nkeys);
	sv->cap = cap;
	sv->nkeys = nkeys;
	sv->head = sv->tail = sv->hand = SIEVE_NONE;
	return 0;
}

void sieve_fini(struct sieve *sv)
{
	free(sv->prev);
	memset(sv, 0, sizeof(*sv));
}

bool sieve_full(const struct sieve *sv)
{
	return sv->n >= sv->cap;
}

bool sieve_has(const struct sieve *sv, uint32_t key)
{
	return key < sv->nkeys && sv->in[key];
}

int sieve_insert(struct sieve *sv, uint32_t key)
{
	if (key >= sv->nkeys)
		return -EINVAL;
	if (sv->in[key])
		return -EEXIST;
	if (sieve_full(sv))
		return -ENOSPC;
	sv->prev[key] = sv->head;
	sv->next[key] = SIEVE_NONE;
	if (sv->head != SIEVE_NONE)
		sv->next[sv->head] = (uint16_t)key;
	else
		sv->tail = (uint16_t)key;
	sv->head = (uint16_t)key;
	sv->in[key] = 1;
	sv->n++;
	return 0;
}

int sieve_remove(struct sieve *sv, uint32_t key)
{
	uint16_t p, n;

	if (!sieve_has(sv, key))
		return -ENOENT;
	p = sv->prev[key];
	n = sv->next[key];
	/* The hand moves on toward the head, as after an eviction. */
	if (sv->hand == key)
		sv->hand = n;
	if (p != SIEVE_NONE)
		sv->next[p] = n;
	else
		sv->tail = n;
	if (n != SIEVE_NONE)
		sv->prev[n] = p;
	else
		sv->head = p;
	sv->in[key] = 0;
	sv->n--;
	return 0;
}

int sieve_evict(struct sieve *sv, bool (*keep)(void *arg, uint32_t key), void *arg,
		uint32_t *key)
{
	uint64_t steps = 2ull * sv->n + 1;

	if (sv->n == 0)
		return -ENOENT;
	while (steps--) {
		uint16_t k = sv->hand != SIEVE_NONE ? sv->hand : sv->tail;

		if (!keep(arg, k)) {
			sieve_remove(sv, k);
			*key = k;
			return 0;
		}
		sv->hand = sv->next[k]; /* NONE at the head: wraps to the tail */
	}
	return -EBUSY;
}
