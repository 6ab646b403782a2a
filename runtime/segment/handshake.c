/* SPDX-License-Identifier: MIT */
/*
 * The endpoint handshake seen from the initiator.  A round trip, so it
 * never runs under ctl_lock: what a handshake needs of its segment is
 * copied first (struct seg_peer).  The DISCONNECTs that free the peer's
 * halves are disconnect.c's.
 *
 * One CONNECT_REQ carries all the QPs of an endpoint; with token T, the
 * peer names QP k by T + k (wire.h), so the bookkeeping stays per QP:
 * a DISCONNECT frees one responder QP, and the repair thread replaces one
 * QP with a handshake of its own (n = 1, a new token) and frees the old
 * one alone.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ring/base/clock.h"
#include "ring/base/log.h"
#include "runtime/ctl/call.h"
#include "runtime/ctl/ctl.h"
#include "runtime/engine/engine.h"

int seg_hs_timeout_ms(struct ferry_engine *e)
{
	uint32_t t = READ_ONCE(e->hs_timeout_ms);

	return (int)(t ? t : SEG_CTL_TIMEOUT_MS);
}

void seg_peer_of(const struct ferry_seg *s, uint16_t remote_nic, struct seg_peer *out)
{
	memcpy(out->address, s->address, sizeof(out->address));
	out->target_incarnation = s->desc->incarnation;
	out->remote_nic = remote_nic;
	out->raddr = s->desc->nics[remote_nic].addr;
	out->tx = s->tx;
	out->raddr_fresh = false;
}

void seg_handshake_req(struct ferry_engine *e, unsigned i, const struct seg_peer *p,
		       struct qpx *const *qps, unsigned n, uint64_t token,
		       struct wire_connect_req *req)
{
	const struct qctx *q = &e->cores[i]->tx[p->tx];

	memset(req, 0, sizeof(*req));
	req->incarnation = e->incarnation;
	req->token = token;
	req->target_incarnation = p->target_incarnation;
	req->target_nic = p->remote_nic;
	req->n_qps = (uint16_t)n;
	snprintf(req->nic.provider, sizeof(req->nic.provider), "%s", q->prov->name);
	q->prov->addr(q->nic, &req->nic.addr);
	for (unsigned k = 0; k < n; k++)
		q->prov->qp_info(qps[k]->nqp, &req->qps[k]);
}

/* Why handshake k failed, unless the caller says it itself. */
static void handshake_failed(const struct seg_hs *h, int rc, bool quiet)
{
	if (!quiet)
		log_err("segment %s: endpoint handshake for core %u: %s", h->peer->address,
			h->core, strerror(-rc));
}

/* order[] of a pipe's GET_DESC (seg_handshake_start's, behind its CONNECT_REQs). */
#define HS_FETCH UINT_MAX

/* The handshakes' requests and answers, grouped per peer address. */
struct hs_batch {
	struct wire_connect_req *req;
	struct wire_connect_rep *rep;
	void **outs;         /* &rep[order[i]] (a GET_DESC's: &descs[pipe]), in pipe order */
	unsigned *order;     /* handshake index of each frame (or HS_FETCH), grouped per peer */
	int *got;            /* answers in pipe order */
	uint8_t *frames;     /* every CONNECT_REQ (and GET_DESC), in pipe order */
	struct ctl_pipe *pipes;
	unsigned np;
	/* fresh only (a GET_DESC behind each pipe's CONNECT_REQs): */
	const struct ctl_call **calls; /* each answer's call: connect's, or &fetch */
	const struct ctl_call *connect;
	struct ctl_call fetch;
	struct seg_desc *descs;        /* pipe i's GET_DESC answer */
};

static void hs_batch_free(struct hs_batch *b)
{
	free(b->req);
	free(b->rep);
	free(b->outs);
	free(b->order);
	free(b->got);
	free(b->frames);
	free(b->pipes);
	free(b->calls);
	for (unsigned i = 0; b->descs && i < b->np; i++)
		seg_desc_free(&b->descs[i]);
	free(b->descs);
}

/* Room for n handshakes, and with fresh for a GET_DESC per pipe (at most
 * one pipe per handshake). */
static int hs_batch_alloc(struct hs_batch *b, unsigned n, bool fresh)
{
	static const struct wire_connect_req full = { .n_qps = WIRE_MAX_EP_QPS };
	size_t most = WIRE_HDR_LEN + wire_connect_req_size(&full);
	unsigned answers = fresh ? 2 * n : n;

	b->req = calloc(n, sizeof(*b->req));
	b->rep = calloc(n, sizeof(*b->rep));
	b->outs = calloc(answers, sizeof(*b->outs));
	b->order = calloc(answers, sizeof(*b->order));
	b->got = calloc(answers, sizeof(*b->got));
	b->frames = malloc(n * most + (fresh ? n * WIRE_HDR_LEN : 0));
	b->pipes = calloc(n, sizeof(*b->pipes));
	if (fresh) {
		b->calls = calloc(answers, sizeof(*b->calls));
		b->descs = calloc(n, sizeof(*b->descs));
		ctl_fetch_call_init(&b->fetch, NULL, 1); /* (the answers go to outs) */
	}
	return b->req && b->rep && b->outs && b->order && b->got && b->frames && b->pipes &&
		       (!fresh || (b->calls && b->descs)) ? 0 : -ENOMEM;
}

/* A GET_DESC behind pipe p's CONNECT_REQs (its frames end at off, its
 * answers at m; pipe index np): the round trip that makes the peer's
 * QPs also says its NIC addresses now (seg_fresh_ask's reason).  Bytes
 * of frame added. */
static size_t hs_pipe_fetch(struct hs_batch *b, struct ctl_pipe *p, size_t off, unsigned m,
			    unsigned np)
{
	if (!b->calls || !p->count)
		return 0;
	wire_hdr_encode(b->frames + off, WIRE_GET_DESC, 0);
	b->order[m] = HS_FETCH;
	b->outs[m] = &b->descs[np];
	b->calls[m] = &b->fetch;
	for (unsigned k = m - p->count; k < m; k++)
		b->calls[k] = b->connect;
	p->calls = &b->calls[m - p->count];
	p->len += WIRE_HDR_LEN;
	p->count++;
	return WIRE_HDR_LEN;
}

/* The pipes: one per peer address, its CONNECT_REQs back to back (the
 * peer answers a connection's requests in their order).  How many; rcs[k]
 * set for the handshakes refused before they went. */
static unsigned hs_batch_pipes(struct ferry_engine *e, const struct seg_hs *hs, unsigned n,
			       struct hs_batch *b, int *rcs)
{
	bool *taken = calloc(n, sizeof(*taken));
	size_t off = 0;
	unsigned np = 0, m = 0;

	for (unsigned k = 0; taken && k < n; k++) {
		struct ctl_pipe *p = &b->pipes[np];

		if (taken[k])
			continue;
		*p = (struct ctl_pipe){ .address = hs[k].peer->address, .frames = b->frames + off,
					.rcs = &b->got[m], .outs = &b->outs[m] };
		for (unsigned j = k; j < n; j++) {
			const struct seg_hs *h = &hs[j];
			size_t len;

			if (taken[j] || strcmp(h->peer->address, p->address))
				continue;
			taken[j] = true;
			seg_handshake_req(e, h->core, h->peer, h->qps, h->nqps, h->token, &b->req[j]);
			len = wire_connect_req_size(&b->req[j]);
			rcs[j] = wire_connect_req_encode(&b->req[j], b->frames + off + WIRE_HDR_LEN,
							 len);
			if (rcs[j])
				continue; /* what the peer would refuse: not sent */
			wire_hdr_encode(b->frames + off, WIRE_CONNECT_REQ, (uint32_t)len);
			off += WIRE_HDR_LEN + len;
			p->len += WIRE_HDR_LEN + len;
			b->order[m] = j;
			b->outs[m++] = &b->rep[j];
			p->count++;
		}
		off += hs_pipe_fetch(b, p, off, m, np);
		m += p->count && b->calls;
		np += p->count > 0;
	}
	if (!taken)
		for (unsigned k = 0; k < n; k++)
			rcs[k] = -ENOMEM;
	free(taken);
	return np;
}

/*
 * Connect each hs[k]'s QPs of its core to new responder QPs on the peer's
 * NIC: one CONNECT_REQ (QP j named token + j), then ours here.  All of a
 * peer's go back to back on one connection (one round trip for all the
 * cores, no extra connection), peers side by side: a peer that does not
 * answer costs one timeout, not one per core.  -ENETUNREACH when our
 * provider could not reach the peer's address (the control plane worked:
 * another transport may); the peer's halves are then queued for
 * DISCONNECT.  quiet: the caller logs failures in its own words.  No lock
 * held.
 */
/* Build the pipes and the call's shape (no frame: the pipes carry the
 * requests, the answers go to outs).  How many pipes; rcs[k] set for
 * the handshakes that do not go, *sent: the answers expected. */
static unsigned hs_batch_build(struct ferry_engine *e, const struct seg_hs *hs, unsigned n,
			       bool quiet, bool fresh, struct hs_batch *b, struct ctl_call *call,
			       int *rcs, unsigned *sent)
{
	int rc = n ? hs_batch_alloc(b, n, fresh) : 0;
	unsigned np = 0;

	*sent = 0;
	b->connect = call;
	for (unsigned k = 0; k < n; k++)
		rcs[k] = rc;
	if (!rc)
		np = hs_batch_pipes(e, hs, n, b, rcs);
	b->np = np;
	for (unsigned i = 0; i < np; i++)
		*sent += b->pipes[i].count;
	ctl_connect_call_init(call, NULL, quiet); /* the answers go to the pipes' outs */
	return np;
}

/* The peer's halves of handshake hs[k], which it may have made though we
 * cannot use them, go back (a peer that never made them answers -ENOENT). */
static void hs_peer_may_hold(struct ferry_engine *e, const struct seg_hs *h, int why)
{
	seg_disconnect_background(e, h->peer->address, h->token, h->nqps, why);
}

/* The handshakes whose CONNECT_REQ went out whole and got no answer (timed
 * out, cancelled at destroy, the connection broke): a slow peer may still
 * make their QPs, and keep them for as long as our keepalives renew our
 * lease. */
static void hs_unanswered_back(struct ferry_engine *e, const struct seg_hs *hs,
			       const struct hs_batch *b)
{
	for (unsigned i = 0; i < b->np; i++) {
		const struct ctl_pipe *p = &b->pipes[i];
		unsigned m0 = (unsigned)(p->rcs - b->got);

		for (unsigned k = 0; k < p->count; k++)
			if (b->order[m0 + k] != HS_FETCH && ctl_pipe_unanswered_sent(p, k))
				hs_peer_may_hold(e, &hs[b->order[m0 + k]], p->rcs[k]);
	}
}

/* p->raddr from d, the peer's descriptor now (rc: its fetch's), if it is
 * p's incarnation's: another incarnation's NICs are not p's (its
 * CONNECT_REQ was refused -ESTALE anyway).  Else the cached one stays. */
static void fresh_addr(const struct seg_desc *d, int rc, struct seg_peer *p)
{
	if (!rc && d->incarnation == p->target_incarnation && p->remote_nic < d->n_nics) {
		p->raddr = d->nics[p->remote_nic].addr;
		p->raddr_fresh = true;
	}
}

/* Each pipe's GET_DESC answer gives its handshakes' peers their address now. */
static void hs_fresh_take(const struct seg_hs *hs, const struct hs_batch *b)
{
	for (unsigned i = 0; b->calls && i < b->np; i++) {
		const struct ctl_pipe *p = &b->pipes[i];
		unsigned m0 = (unsigned)(p->rcs - b->got), last = m0 + p->count - 1;

		for (unsigned m = m0; m < last; m++)
			fresh_addr(&b->descs[i], b->got[last], hs[b->order[m]].peer);
	}
}

/* The answers in: each handshake's reply checked and our QPs connected;
 * rcs[k] what seg_handshake_many documents. */
static void hs_batch_finish(struct ferry_engine *e, const struct seg_hs *hs, unsigned n,
			    struct hs_batch *b, unsigned sent, int *rcs, bool quiet)
{
	for (unsigned m = 0; m < sent; m++)
		if (b->order[m] != HS_FETCH)
			rcs[b->order[m]] = b->got[m];
	hs_unanswered_back(e, hs, b);
	hs_fresh_take(hs, b);
	for (unsigned k = 0; k < n; k++) {
		const struct seg_hs *h = &hs[k];

		if (!rcs[k]) {
			rcs[k] = ctl_check_rep(&b->req[k], &b->rep[k]);
			if (rcs[k]) /* made, but the answer is not for these QPs */
				hs_peer_may_hold(e, h, rcs[k]);
		}
		if (!rcs[k]) /* (it says why itself when it fails) */
			rcs[k] = seg_handshake_apply(e, h->core, h->peer, h->qps, h->nqps, h->token,
						     &b->rep[k], quiet);
		else
			handshake_failed(h, rcs[k], quiet);
	}
	hs_batch_free(b);
}

void seg_handshake_many(struct ferry_engine *e, const struct seg_hs *hs, unsigned n, int *rcs,
			bool quiet)
{
	struct hs_batch b = { 0 };
	struct ctl_call call;
	unsigned sent;
	unsigned np = hs_batch_build(e, hs, n, quiet, false, &b, &call, rcs, &sent);
	int rc = np ? ctl_call_many(&e->client, b.pipes, np, seg_hs_timeout_ms(e), &call) : 0;

	for (unsigned m = 0; rc && m < sent; m++)
		b.got[m] = rc;
	hs_batch_finish(e, hs, n, &b, sent, rcs, quiet);
}

/* seg_handshake_start's handshakes in flight. */
struct hs_flight {
	struct ferry_engine *e;
	const struct seg_hs *hs;
	unsigned n, sent;
	unsigned pending;            /* pipes not landed, + 1 while starting */
	bool quiet;
	struct hs_batch b;
	struct ctl_call call;
	seg_hs_done_fn done;
	void *arg;
	int rcs[];
};

/* One pipe landed; the last one ends the flight. */
static void hs_pipe_landed(void *arg)
{
	struct hs_flight *f = arg;

	if (--f->pending)
		return;
	hs_batch_finish(f->e, f->hs, f->n, &f->b, f->sent, f->rcs, f->quiet);
	f->done(f->arg, f->rcs);
	free(f);
}

int seg_handshake_start(struct ferry_engine *e, struct ctl_calls *calls, const struct seg_hs *hs,
			unsigned n, bool quiet, seg_hs_done_fn done, void *arg)
{
	struct hs_flight *f = calloc(1, sizeof(*f) + (n ? n : 1) * sizeof(int));
	unsigned np;

	if (!f)
		return -ENOMEM;
	*f = (struct hs_flight){ .e = e, .hs = hs, .n = n, .quiet = quiet, .done = done,
				 .arg = arg };
	np = hs_batch_build(e, hs, n, quiet, true, &f->b, &f->call, f->rcs, &f->sent);
	if (np > ctl_calls_room(calls)) {
		hs_batch_free(&f->b);
		free(f);
		return -EBUSY;
	}
	f->pending = np + 1; /* a pipe that lands at once does not end it early */
	for (unsigned i = 0; i < np; i++) {
		int rc = ctl_calls_start(calls, &f->b.pipes[i], &f->call, seg_hs_timeout_ms(e),
					 hs_pipe_landed, f);

		if (rc) { /* (cannot be: room was checked) its handshakes fail */
			for (unsigned m = 0; m < f->b.pipes[i].count; m++)
				f->b.pipes[i].rcs[m] = rc;
			f->pending--;
		}
	}
	hs_pipe_landed(f);
	return 0;
}

struct seg_fresh {
	struct ctl_call fetch;
	const struct ctl_call *calls[2]; /* the pipe's: the CONNECT_REQ's, fetch */
	struct seg_desc desc;            /* fetch's answer */
};

struct seg_fresh *seg_fresh_ask(struct ctl_call *connect, struct ctl_pipe *pipe)
{
	uint8_t *frames = realloc(connect->frame, pipe->len + WIRE_HDR_LEN);
	struct seg_fresh *f;

	if (!frames)
		return NULL;
	connect->frame = frames; /* (the caller frees it, as it would have) */
	pipe->frames = frames;
	f = calloc(1, sizeof(*f));
	if (!f)
		return NULL;
	wire_hdr_encode(frames + pipe->len, WIRE_GET_DESC, 0);
	ctl_fetch_call_init(&f->fetch, &f->desc, 1);
	f->calls[0] = connect;
	f->calls[1] = &f->fetch;
	pipe->len += WIRE_HDR_LEN;
	pipe->count = 2;
	pipe->calls = f->calls;
	return f;
}

void seg_fresh_take(struct seg_fresh *f, int rc, struct seg_peer *p)
{
	if (!f)
		return;
	fresh_addr(&f->desc, rc, p);
	seg_desc_free(&f->desc);
	free(f);
}

/*
 * Whether a QP's connect failed for want of something here (descriptors,
 * memory), not because our provider cannot reach the peer's NIC: then no
 * other transport is the answer, and the caller must hear the reason.
 * Taken for unreachable, an open out of file descriptors (tcp dials one
 * per QP) ended -EPROTONOSUPPORT, "no transport of ours reaches the peer".
 */
static bool connect_out_of_resources(int rc)
{
	return rc == -EMFILE || rc == -ENFILE || rc == -ENOMEM || rc == -ENOBUFS;
}

int seg_handshake_apply(struct ferry_engine *e, unsigned i, const struct seg_peer *p,
			struct qpx *const *qps, unsigned n, uint64_t token,
			const struct wire_connect_rep *rep, bool quiet)
{
	const struct qctx *q = &e->cores[i]->tx[p->tx];
	char here[160];
	int rc = 0;

	for (unsigned k = 0; k < n && !rc; k++)
		rc = q->prov->qp_connect(qps[k]->nqp, &p->raddr, &rep->qps[k]);
	if (rc) {
		seg_disconnect_later(e, p->address, token, n);
		if (!quiet) {
			q->prov->describe(q->nic, here, sizeof(here));
			log_err("segment %s: a QP of core %u (%s) cannot reach the peer's NIC %u: %s",
				p->address, i, here, p->remote_nic, strerror(-rc));
		}
		if (!connect_out_of_resources(rc))
			rc = -ENETUNREACH;
	}
	return rc;
}
