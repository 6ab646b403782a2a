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

/* The pipes of a sorted batch: one per address, its frames and answers
 * contiguous in frames[] and got[].  How many. */
static unsigned disc_pipes(const struct disc_ref *ref, const struct wire_disconnect *d,
			   unsigned n, uint8_t *frames, int *got, struct ctl_pipe *pipes)
{
	unsigned np = 0;

	for (unsigned k = 0; k < n; k++) {
		uint8_t *f = frames + (size_t)k * CTL_DISCONNECT_FRAME;

		wire_hdr_encode(f, WIRE_DISCONNECT, WIRE_DISCONNECT_LEN);
		(void)wire_disconnect_encode(&d[ref[k].i], f + WIRE_HDR_LEN, WIRE_DISCONNECT_LEN);
		if (k == 0 || strcmp(ref[k - 1].address, ref[k].address))
			pipes[np++] = (struct ctl_pipe){ .address = ref[k].address, .frames = f,
							 .rcs = &got[k] };
		pipes[np - 1].len += CTL_DISCONNECT_FRAME;
		pipes[np - 1].count++;
	}
	return np;
}

int ctl_disconnect_many(struct ctl_client *cl, const char *const *addresses,
			const struct wire_disconnect *d, unsigned n, int timeout_ms, int *rcs)
{
	uint8_t unused[CTL_DISCONNECT_FRAME];
	struct ctl_call call = CTL_DISCONNECT_CALL(unused);
	struct disc_ref *ref = calloc(n ? n : 1, sizeof(*ref));
	struct ctl_pipe *pipes = calloc(n ? n : 1, sizeof(*pipes));
	uint8_t *frames = malloc((n ? n : 1) * (size_t)CTL_DISCONNECT_FRAME);
	int *got = calloc(n ? n : 1, sizeof(*got));
	int rc = ref && pipes && frames && got ? 0 : -ENOMEM;

	if (!addresses || !d || !rcs || !n)
		rc = -EINVAL;
	for (unsigned k = 0; !rc && k < n; k++) {
		ref[k] = (struct disc_ref){ .address = addresses[k], .i = k };
		if (!addresses[k])
			rc = -EINVAL;
	}
	if (!rc) {
		qsort(ref, n, sizeof(*ref), disc_ref_cmp);
		rc = ctl_call_many(cl, pipes, disc_pipes(ref, d, n, frames, got, pipes), timeout_ms,
				   &call);
	}
	for (unsigned k = 0; !rc && k < n; k++)
		rcs[ref[k].i] = got[k];
	free(got);
	free(frames);
	free(pipes);
	free(ref);
	return rc;
}
