/* SPDX-License-Identifier: MIT */
/*
 * --pingpong's wire between the two sides, in their buffers (offsets from
 * bench_opts.h: a control page, the message received, the message sent).
 *
 * The hand-shake, once per size, so that a target in another process can
 * reach the initiator (it only knows its own buffer):
 *  1. the initiator WRITEs struct pp_hello without its first word (gen)
 *     into the start of the target's control page, waits for it to end,
 *     then WRITEs gen alone (8 aligned bytes): a target that sees a new gen
 *     finds the rest in place;
 *  2. the target opens the initiator's control address (hello.addr) as a
 *     segment unless it has it open, clears its receive area, and WRITEs
 *     gen back into the initiator's control page at PP_ACK (with
 *     PP_REFUSED set when the message does not fit its buffer);
 *  3. the initiator, seeing its gen there, starts: message k (1, 2, ...)
 *     carries pp_seq(k) in its last byte, which the receiver polls for
 *     (ib_write_lat polls the last byte too); the target answers each
 *     with the same byte.
 */
#ifndef FERRY_BENCH_PINGPONG_H
#define FERRY_BENCH_PINGPONG_H

#include <stdint.h>

#include "bench.h"

#define PP_MAGIC 0x676e6f70676e6970ull /* "pingpong" */
#define PP_ACK 512u                    /* control page: where the target's answer lands */
#define PP_OUT 1024u                   /* control page: what this side WRITEs from */
#define PP_REFUSED (1ull << 63)
/* Looks at a polled byte that only spin; after them each look yields the CPU too. */
#define PP_SPINS 256u

/* At the start of the target's control page. */
struct pp_hello {
	uint64_t gen;     /* written last, alone: this hand-shake (not 0, < PP_REFUSED) */
	uint64_t magic;   /* PP_MAGIC */
	uint64_t size;    /* message bytes */
	uint64_t buf;     /* the initiator's buffer (its layout is the target's) */
	uint64_t len;     /* and its length */
	char addr[64];    /* the initiator's control address */
};

/* The byte message k ends with: 1..255, never the 0 of a cleared area. */
static inline uint8_t pp_seq(uint64_t k)
{
	return (uint8_t)(1 + k % 255);
}

/* Poll-side loads of memory the peer WRITEs. */
static inline uint8_t pp_load8(const uint8_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static inline uint64_t pp_load64(const void *p)
{
	return __atomic_load_n((const uint64_t *)p, __ATOMIC_ACQUIRE);
}

/*
 * WRITE one request through batch (capacity 1 will do) and wait for it:
 * 0, or -errno (the request's error, or -ETIMEDOUT after timeout_ms).
 * The batch is reset after.
 */
int pp_write(struct ferry_batch *batch, const struct ferry_req *r, int64_t timeout_ms);

/*
 * Between two looks: spin, then yield.  In one process on 2 CPUs both
 * sides' threads and both engines' cores want a CPU; a side that only
 * spun would keep the other from answering.
 */
static inline void pp_pause(unsigned *spins)
{
	if (++*spins < PP_SPINS)
		cpu_relax();
	else
		sched_yield();
}

/*
 * The same, for a thread that also runs e's passes (--caller: it posts our
 * message and serves the peer's frames; otherwise ferry_progress returns
 * 0 at once).  A pass that did work is the pause.
 */
static inline void pp_pause_on(struct ferry_engine *e, unsigned *spins)
{
	if (ferry_progress(e) <= 0)
		pp_pause(spins);
}

#endif /* FERRY_BENCH_PINGPONG_H */
