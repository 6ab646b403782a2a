/* SPDX-License-Identifier: MIT */
/*
 * SIEVE eviction (Zhang et al., NSDI '24) over small integer keys: a FIFO
 * list, new keys at the head, and a hand that walks from the tail toward
 * the head giving every key that was used since the hand last passed (or
 * that the caller cannot let go now) a second chance.  No reordering on a
 * hit: a hit only sets the key's visited bit, which may live anywhere (the
 * caller's keep() reads and clears it) -- here a byte in the endpoint that
 * its core sets with a relaxed store.  One writer (the control path).
 */
#ifndef FERRY_EP_SIEVE_H
#define FERRY_EP_SIEVE_H

#include <stdbool.h>
#include <stdint.h>

#define SIEVE_NONE 0xffffu
#define SIEVE_MAX_KEYS 0xfff0u   /* keys are uint16_t, SIEVE_NONE is not one */

/* The arrays are sized by the key space the caller asks for (an endpoint
 * table's: its cache index, 0..ep_cache-1), not by a global maximum. */
struct sieve {
	uint32_t cap;                 /* most keys held */
	uint32_t n;                   /* keys held */
	uint32_t nkeys;               /* keys are 0..nkeys-1 */
	uint16_t head, tail, hand;    /* SIEVE_NONE when empty / at rest */
	uint16_t *prev;               /* [nkeys] toward the tail (older) */
	uint16_t *next;               /* [nkeys] toward the head (newer) */
	uint8_t *in;                  /* [nkeys] */
};

/* Empty cache holding at most cap keys (1..nkeys) out of keys 0..nkeys-1
 * (nkeys <= SIEVE_MAX_KEYS); -EINVAL, -ENOMEM.  Free with sieve_fini. */
int sieve_init(struct sieve *sv, uint32_t cap, uint32_t nkeys);
void sieve_fini(struct sieve *sv);

/* True when no key can be added without an eviction. */
bool sieve_full(const struct sieve *sv);

/* True when key is held. */
bool sieve_has(const struct sieve *sv, uint32_t key);

/* Add key at the head; -EEXIST, -ENOSPC (full), -EINVAL (key out of range). */
int sieve_insert(struct sieve *sv, uint32_t key);

/* Drop key wherever it is (the hand steps over it); -ENOENT if absent. */
int sieve_remove(struct sieve *sv, uint32_t key);

/*
 * keep(arg, key): true when key gets a second chance (it was visited --
 * clear the bit -- or it is busy).  Returns the victim in *key and removes
 * it, or -EBUSY after two full turns of the hand found nothing to evict,
 * -ENOENT when empty.
 */
int sieve_evict(struct sieve *sv, bool (*keep)(void *arg, uint32_t key), void *arg,
		uint32_t *key);

#endif /* FERRY_EP_SIEVE_H */
