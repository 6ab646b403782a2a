/* SPDX-License-Identifier: MIT */
/*
 * The calls that go to many peers at once (many.c does the going):
 * keepalive rounds (every open segment's peer) and DISCONNECTs (the QPs of
 * closed segments, an engine's whole set at destroy).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/ctl/call.h"

void ctl_keepalive_encode(uint8_t frame[CTL_KEEPALIVE_FRAME], uint64_t incarnation)
{
	struct wire_disconnect d = { .incarnation = incarnation };

	(void)wire_disconnect_encode(&d, frame + WIRE_HDR_LEN, WIRE_KEEPALIVE_LEN);
}

int ctl_keepalive_many(struct ctl_client *cl, const char *const *addresses, unsigned n,
		       int timeout_ms, uint64_t incarnation, int *rcs)
{
	uint8_t frame[CTL_KEEPALIVE_FRAME];
	struct ctl_call call = CTL_KEEPALIVE_CALL(frame);
	struct ctl_pipe *pipes;
	int rc;

	if (!addresses || !rcs || !n)
		return -EINVAL;
	pipes = calloc(n, sizeof(*pipes));
	if (!pipes)
		return -ENOMEM;
	ctl_keepalive_encode(frame, incarnation);
	wire_hdr_encode(frame, WIRE_KEEPALIVE, WIRE_KEEPALIVE_LEN);
	for (unsigned i = 0; i < n; i++)
		pipes[i] = (struct ctl_pipe){ .address = addresses[i], .frames = frame,
					      .len = sizeof(frame), .count = 1, .rcs = &rcs[i] };
	rc = ctl_call_many(cl, pipes, n, timeout_ms, &call);
	free(pipes);
	return rc;
}

/* Item i of a DISCONNECT batch, sorted by address (its pipe's order). */
struct disc_ref {
	const char *address;
	unsigned i;
};

static int disc_ref_cmp(const void *a, const void *b)
{
	const struct disc_ref *x = a, *y = b;
	int c = strcmp(x->address, y->address);

	return c ? c : (x->i > y->i) - (x->i < y->i); /* in their order per peer */
}

/* The pipes of a sorted batch: one per address (each: one per DISCONNECT),
 * its frames and answers contiguous in frames[] and got[].  How many. */
static unsigned disc_pipes(const struct disc_ref *ref, const struct wire_disconnect *d,
			   unsigned n, uint8_t *frames, int *got, struct ctl_pipe *pipes, bool each)
{
	unsigned np = 0;

	for (unsigned k = 0; k < n; k++) {
		uint8_t *f = frames + (size_t)k * CTL_DISCONNECT_FRAME;

		wire_hdr_encode(f, WIRE_DISCONNECT, WIRE_DISCONNECT_LEN);
		(void)wire_disconnect_encode(&d[ref[k].i], f + WIRE_HDR_LEN, WIRE_DISCONNECT_LEN);
		if (k == 0 || each || strcmp(ref[k - 1].address, ref[k].address))
			pipes[np++] = (struct ctl_pipe){ .address = ref[k].address, .frames = f,
							 .rcs = &got[k] };
		pipes[np - 1].len += CTL_DISCONNECT_FRAME;
		pipes[np - 1].count++;
	}
	return np;
}

/* A batch of DISCONNECTs, grouped per peer (one pipe each). */
struct disc_batch {
	struct disc_ref *ref;
	struct ctl_pipe *pipes;
	uint8_t *frames;
	int *got;
	unsigned n, np, most;   /* most: DISCONNECTs to the busiest peer */
	unsigned pending;       /* pipes in flight (ctl_disconnect_start) */
	int *rcs;               /* the caller's, in its order (ctl_disconnect_start) */
	uint8_t *fate;          /* ... likewise (disc_results) */
	uint8_t unused[CTL_DISCONNECT_FRAME];
	struct ctl_call call;
	ctl_done_fn done;
	void *arg;
};

static void disc_batch_free(struct disc_batch *b)
{
	free(b->got);
	free(b->frames);
	free(b->pipes);
	free(b->ref);
	free(b);
}

/* The pipes of d[0..n) to addresses[]; NULL: -EINVAL or -ENOMEM in *rc. */
static struct disc_batch *disc_batch_new(const char *const *addresses,
					 const struct wire_disconnect *d, unsigned n, bool each,
					 int *rc)
{
	struct disc_batch *b = calloc(1, sizeof(*b));

	*rc = b ? 0 : -ENOMEM;
	if (!*rc && (!addresses || !d || !n))
		*rc = -EINVAL;
	if (!*rc) {
		b->ref = calloc(n, sizeof(*b->ref));
		b->pipes = calloc(n, sizeof(*b->pipes));
		b->frames = malloc(n * (size_t)CTL_DISCONNECT_FRAME);
		b->got = calloc(n, sizeof(*b->got));
		*rc = b->ref && b->pipes && b->frames && b->got ? 0 : -ENOMEM;
	}
	for (unsigned k = 0; !*rc && k < n; k++) {
		b->ref[k] = (struct disc_ref){ .address = addresses[k], .i = k };
		if (!addresses[k])
			*rc = -EINVAL;
	}
	if (*rc) {
		if (b)
			disc_batch_free(b);
		return NULL;
	}
	b->n = n;
	b->call = (struct ctl_call)CTL_DISCONNECT_CALL(b->unused);
	qsort(b->ref, n, sizeof(*b->ref), disc_ref_cmp);
	b->np = disc_pipes(b->ref, d, n, b->frames, b->got, b->pipes, each);
	for (unsigned i = 0; i < b->np; i++)
		b->most = b->pipes[i].count > b->most ? b->pipes[i].count : b->most;
	return b;
}

/* Whether the peer ended a call (rc) before it answered: it hung up
 * (closed or reset) or refused us and closed.  Ours end -ETIMEDOUT or
 * -ECANCELED: a slow peer may still read the first request left.  What
 * the peer left unanswered it did not serve -- or it served and then went
 * before answering: a DISCONNECT again is answered -ENOENT, harmless. */
static bool disc_peer_hung_up(int rc)
{
	return rc == -ECONNRESET || ctl_closing_errno(rc);
}

/* Each item's result in the caller's order: rcs[i], and fate[i] (if not
 * NULL, an enum disc_fate). */
static void disc_results(const struct disc_batch *b, int *rcs, uint8_t *fate)
{
	for (unsigned i = 0; i < b->np; i++) {
		const struct ctl_pipe *p = &b->pipes[i];
		unsigned m0 = (unsigned)(p->rcs - b->got);

		for (unsigned k = 0; k < p->count; k++) {
			unsigned item = b->ref[m0 + k].i;

			rcs[item] = b->got[m0 + k];
			if (!fate)
				continue;
			if (k < p->answered || !rcs[item])
				fate[item] = DISC_ANSWERED;
			else if (!ctl_pipe_unanswered_sent(p, k) || disc_peer_hung_up(rcs[item]))
				fate[item] = DISC_NOT_SENT; /* not delivered */
			else
				fate[item] = k == p->answered ? DISC_UNREAD_FIRST : DISC_UNREAD_BEHIND;
		}
	}
}

static int disconnect_many(struct ctl_client *cl, const char *const *addresses,
			   const struct wire_disconnect *d, unsigned n, int timeout_ms, int *rcs,
			   uint8_t *fate, bool each)
{
	int rc;
	struct disc_batch *b = rcs ? disc_batch_new(addresses, d, n, each, &rc) : NULL;

	if (!rcs)
		return -EINVAL;
	if (!b)
		return rc;
	/* 1 ms more per DISCONNECT to the busiest peer: its work. */
	rc = ctl_call_many(cl, b->pipes, b->np, timeout_ms + (int)b->most, &b->call);
	if (!rc)
		disc_results(b, rcs, fate);
	disc_batch_free(b);
	return rc;
}

int ctl_disconnect_many(struct ctl_client *cl, const char *const *addresses,
			const struct wire_disconnect *d, unsigned n, int timeout_ms, int *rcs,
			uint8_t *fate)
{
	return disconnect_many(cl, addresses, d, n, timeout_ms, rcs, fate, false);
}

int ctl_disconnect_each(struct ctl_client *cl, const char *const *addresses,
			const struct wire_disconnect *d, unsigned n, int timeout_ms, int *rcs)
{
	return disconnect_many(cl, addresses, d, n, timeout_ms, rcs, NULL, true);
}

/* One peer's DISCONNECTs landed; the last ends the batch. */
static void disc_pipe_landed(void *arg)
{
	struct disc_batch *b = arg;

	if (--b->pending)
		return;
	if (b->rcs)
		disc_results(b, b->rcs, b->fate);
	if (b->done)
		b->done(b->arg);
	disc_batch_free(b);
}

int ctl_disconnect_start(struct ctl_calls *calls, const char *const *addresses,
			 const struct wire_disconnect *d, unsigned n, int timeout_ms, bool each,
			 int *rcs, uint8_t *fate, ctl_done_fn done, void *arg)
{
	int rc;
	struct disc_batch *b = disc_batch_new(addresses, d, n, each, &rc);

	if (!b)
		return rc;
	if (b->np > ctl_calls_room(calls)) {
		disc_batch_free(b);
		return -EBUSY;
	}
	b->done = done;
	b->arg = arg;
	b->rcs = rcs;
	b->fate = rcs ? fate : NULL;
	b->pending = b->np + 1; /* a pipe that lands at once does not end it early */
	for (unsigned i = 0; i < b->np; i++)
		if (ctl_calls_start(calls, &b->pipes[i], &b->call, timeout_ms + (int)b->most,
				    disc_pipe_landed, b))
			b->pending--; /* (cannot be: room was checked) best effort */
	disc_pipe_landed(b);
	return 0;
}
