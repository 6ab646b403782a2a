/* SPDX-License-Identifier: MIT */
/*
 * --verify: the pattern (bench_util.c) put into the sources before each
 * size and checked in the destinations after it.  The pattern is a
 * function of the offset in the target's buffer, so both processes of a
 * two-process run compute it on their own; WRITEs into another process are
 * read back to be checked.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"

/*
 * Once, before the first size.  The target's buffer, when it is in this
 * process, holds the cfg.seed pattern: --verify checks READs against it
 * (and WRITEs use other seeds, bench_write_seed, new in every run, so
 * bytes that never arrived show, even where an earlier run against the
 * same --target wrote), and without --verify a READ source may hold anything.
 * WRITE sources get a constant without --verify (the pattern is filled per
 * size with it).  A --connect READ reads what --target filled.
 */
void buffers_fill_once(struct bench *b)
{
	bool write = b->cfg.op == FERRY_OP_WRITE;

	if (b->tbuf && (b->cfg.verify || !write))
		bench_pattern_fill(b->tbuf, b->buffer, 0, b->cfg.seed);
	for (unsigned p = 0; p < b->cfg.ports && write && !b->cfg.verify; p++)
		memset(b->ports[p].buf, 0xa5, b->local_cap);
}

/* Before each size, under --verify: clear READ destinations, fill WRITE sources. */
void buffers_prepare(struct bench *b)
{
	if (!b->cfg.verify)
		return;
	for (unsigned p = 0; p < b->cfg.ports; p++) {
		struct bench_port *bp = &b->ports[p];

		if (b->cfg.op == FERRY_OP_READ)
			memset(bp->buf, 0, b->per_port);
		else
			bench_pattern_fill(bp->buf, b->per_port, req_offset(b, p, 0),
					   bench_write_seed(&b->cfg, b->step));
	}
}

/*
 * --verify of WRITE in the two-process mode: the written bytes are in the
 * other process; read port p's back into its (cleared) buffer.  0, or the
 * read-back's error.
 */
static int readback(struct bench *b, struct bench_port *bp)
{
	struct ferry_prep *prep = bp->prep; /* prepared as WRITEs: not for this */
	int rc;

	memset(bp->buf, 0, b->per_port);
	for (uint32_t i = 0; i < b->nreq; i++)
		bp->reqs[i].op = FERRY_OP_READ;
	bp->prep = NULL;
	rc = batch_run(bp, UINT64_MAX);
	bp->prep = prep;
	for (uint32_t i = 0; i < b->nreq; i++)
		bp->reqs[i].op = b->cfg.op;
	return rc;
}

/*
 * Port p's bytes cannot be checked: said, and counted.  Before, a port
 * that stopped early was skipped by the read-back and then "checked" in
 * its own buffer, which still held the pattern it wrote: its bytes
 * passed, verified or not.
 */
static void not_verified(struct bench *b, unsigned p, const char *why, int rc)
{
	b->unverified += b->per_port;
	fprintf(stderr,
		"ferry_bench: verify: size %" PRIu64 " port %u: its %" PRIu64 " bytes at offset %"
		PRIu64 " of the target's buffer not verified: %s (%s)\n",
		b->size, p, b->per_port, req_offset(b, p, 0), why, strerror(-rc));
}

/* Whether port p's destination is here to check: read back when it is in
 * the other process (a port that stopped early is not: its batch may be
 * in flight still). */
static bool verify_ready(struct bench *b, unsigned p, bool write)
{
	struct bench_port *bp = &b->ports[p];
	int rc;

	if (!write || b->cfg.mode != BENCH_INITIATOR)
		return true;
	if (bp->err) {
		not_verified(b, p, "the port stopped early", bp->err);
		return false;
	}
	rc = readback(b, bp);
	if (rc)
		not_verified(b, p, "its read-back failed", rc);
	return rc == 0;
}

/*
 * One process: a port that stopped early is checked in place like the
 * others, and the requests it never finished leave bytes wrong.  Said, so
 * they do not read as corruption (before: only "bytes wrong", and the
 * port's stop was in an earlier line, if the reader connected the two).
 */
static void stopped_note(const struct bench *b, unsigned p)
{
	int err = b->ports[p].err;

	if (err)
		fprintf(stderr,
			"ferry_bench: verify: size %" PRIu64 " port %u stopped early (%s): "
			"the bytes of the requests it did not finish are among those wrong\n",
			b->size, p, strerror(-err));
}

/* --verify: the destination of every port must hold the pattern now. */
void buffers_verify(struct bench *b)
{
	bool write = b->cfg.op == FERRY_OP_WRITE;
	uint64_t seed = write ? bench_write_seed(&b->cfg, b->step) : b->cfg.seed;

	for (unsigned p = 0; p < b->cfg.ports; p++) {
		uint64_t pos = req_offset(b, p, 0), first = 0, bad;
		const uint8_t *dst = write && b->tbuf ? b->tbuf + pos : b->ports[p].buf;

		if (!verify_ready(b, p, write))
			continue;
		bad = bench_pattern_check(dst, b->per_port, pos, seed, &first);
		if (!bad)
			continue;
		b->mismatches += bad;
		fprintf(stderr,
			"ferry_bench: verify: size %" PRIu64 " port %u request %" PRIu64
			" byte %" PRIu64 ": expected 0x%02x, got 0x%02x (%" PRIu64
			" bytes wrong on this port)\n",
			b->size, p, first / b->size, first % b->size,
			bench_pattern_byte(pos + first, seed), dst[first], bad);
		stopped_note(b, p);
	}
	if (b->mismatches && !write && b->cfg.mode == BENCH_INITIATOR)
		fprintf(stderr,
			"ferry_bench: verify: hint: the target's buffer holds its --seed pattern only "
			"until something WRITEs to it: give the target's --seed (%" PRIu64
			" here), and restart the target after WRITE runs\n",
			b->cfg.seed);
}
