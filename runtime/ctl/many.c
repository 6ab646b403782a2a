/* SPDX-License-Identifier: MIT */
/*
 * One call to many peers at once (keepalives): every peer's connection
 * goes through its steps (connect, authenticate, request, answer) side by
 * side, driven by one poll() over all of them, so the whole round ends by
 * one deadline.  Called one after the other, each peer that does not
 * answer (its host cut off, its process stopped) cost the whole timeout
 * and the round lasted that many timeouts: peers that answer waited
 * behind it, and so could their leases on our QPs.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ring/base/atomics.h"
#include "runtime/ctl/call.h"
#include "runtime/ctl/pool.h"
#include "runtime/ctl/sock.h"

enum many_step {
	STEP_CONNECT, /* connect begun: wait until writable */
	STEP_AUTH,    /* our AUTH_HELLO sent: wait for the server's */
	STEP_ANSWER,  /* request sent: wait for the reply */
	STEP_DONE,
};

struct many_peer {
	const char *address;
	struct sockaddr_in sin;
	int fd;
	enum many_step step;
	bool reused;  /* a kept connection: may be redialled once if found broken */
	bool said;    /* the log said why it failed */
	uint8_t nonce[WIRE_AUTH_NONCE_LEN];
};

struct many {
	struct ctl_client *cl;
	const struct ctl_call *call;
	int64_t deadline;
	struct many_peer *p;
	int *rcs;
};

/* Peer i is done with rc; its connection kept if the exchange left it in step. */
static void many_end(struct many *m, unsigned i, int rc, enum ex_state st)
{
	struct many_peer *p = &m->p[i];

	if (p->fd >= 0 && st == EX_SYNCED)
		ctl_pool_put(m->cl, &p->sin, p->fd);
	else if (p->fd >= 0)
		close(p->fd);
	p->fd = -1;
	p->step = STEP_DONE;
	m->rcs[i] = rc;
}

/* A dial of peer i (connect or authentication) failed with rc. */
static void many_dial_failed(struct many *m, unsigned i, int rc)
{
	struct many_peer *p = &m->p[i];

	many_end(m, i, ctl_dial_failed(m->cl, p->address, m->call, rc, &p->said), EX_BROKEN);
}

/* Begin a new connection to peer i. */
static void many_dial(struct many *m, unsigned i)
{
	struct many_peer *p = &m->p[i];

	p->reused = false;
	p->fd = ctl_dial_begin(&p->sin);
	p->step = STEP_CONNECT;
	if (p->fd < 0)
		many_dial_failed(m, i, p->fd);
}

/* Send the request on peer i's connection (a few bytes into an empty
 * socket buffer: it does not wait). */
static void many_send(struct many *m, unsigned i)
{
	struct many_peer *p = &m->p[i];
	int rc = sock_send_full(p->fd, m->cl->stop_fd, m->call->frame,
				WIRE_HDR_LEN + m->call->req_len, m->deadline);

	if (!rc) {
		p->step = STEP_ANSWER;
	} else if (p->reused && ex_unanswered(rc) == EX_NO_REPLY) {
		close(p->fd); /* a kept connection the peer had closed: once more, new */
		fetch_add_relaxed(m->cl->redials, 1); /* statistics */
		many_dial(m, i);
	} else {
		many_end(m, i, ctl_io_error(rc), EX_BROKEN);
	}
}

/* Peer i's connect finished: authenticate, or send the request. */
static void many_connected(struct many *m, unsigned i)
{
	struct many_peer *p = &m->p[i];
	int rc = ctl_dial_end(p->fd);

	if (!rc)
		fetch_add_relaxed(m->cl->dials, 1); /* statistics */
	if (!rc && m->cl->has_key) {
		rc = ctl_auth_hello(p->fd, p->nonce, m->deadline, m->cl->stop_fd);
		if (!rc)
			p->step = STEP_AUTH;
	} else if (!rc) {
		many_send(m, i);
	}
	if (rc)
		many_dial_failed(m, i, rc);
}

static void many_authenticate(struct many *m, unsigned i)
{
	struct many_peer *p = &m->p[i];
	int rc = ctl_auth_finish(p->fd, &m->cl->key, p->nonce, m->deadline, m->cl->stop_fd,
				 p->address);

	if (rc)
		many_dial_failed(m, i, rc);
	else
		many_send(m, i);
}

static void many_answered(struct many *m, unsigned i)
{
	struct many_peer *p = &m->p[i];
	enum ex_state st;
	int rc = ctl_read_answer(p->fd, m->deadline, m->cl->stop_fd, m->call, &st);

	if (rc && st == EX_NO_REPLY && p->reused) {
		close(p->fd);
		fetch_add_relaxed(m->cl->redials, 1); /* statistics */
		many_dial(m, i);
		return;
	}
	many_end(m, i, rc, st);
}

/* Peer i's connection is ready for its step: take it. */
static void many_step(struct many *m, unsigned i)
{
	switch (m->p[i].step) {
	case STEP_CONNECT:
		many_connected(m, i);
		break;
	case STEP_AUTH:
		many_authenticate(m, i);
		break;
	case STEP_ANSWER:
		many_answered(m, i);
		break;
	case STEP_DONE:
		break;
	}
}

/* Wait for the connections still under way (their index in idx) and take
 * the steps of those ready.  The number still under way, or -ETIMEDOUT /
 * -ECANCELED (the client's stop fd) when the wait ended without any. */
static int many_round(struct many *m, unsigned n, struct pollfd *pf, unsigned *idx)
{
	unsigned k = 0;
	int64_t left = m->deadline - sock_now_ms();
	int rc;

	for (unsigned i = 0; i < n; i++) {
		if (m->p[i].step == STEP_DONE)
			continue;
		pf[k] = (struct pollfd){ .fd = m->p[i].fd,
					 .events = m->p[i].step == STEP_CONNECT ? POLLOUT : POLLIN };
		idx[k++] = i;
	}
	if (!k)
		return 0;
	if (left <= 0)
		return -ETIMEDOUT;
	pf[k] = (struct pollfd){ .fd = m->cl->stop_fd, .events = POLLIN };
	rc = poll(pf, k + 1, (int)left);
	if (rc < 0 && errno != EINTR)
		return -errno;
	if (rc > 0 && pf[k].revents)
		return -ECANCELED;
	for (unsigned j = 0; rc > 0 && j < k; j++)
		if (pf[j].revents)
			many_step(m, idx[j]);
	return (int)k;
}

/* Every peer's call as far as it goes by the deadline; rcs[i] set for each. */
static void many_run(struct many *m, unsigned n)
{
	struct pollfd *pf = malloc((n + 1) * sizeof(*pf));
	unsigned *idx = malloc(n * sizeof(*idx));
	int rc = pf && idx ? 1 : -ENOMEM;

	while (rc > 0)
		rc = many_round(m, n, pf, idx);
	for (unsigned i = 0; i < n; i++)
		if (m->p[i].step != STEP_DONE)
			many_end(m, i, rc, EX_BROKEN); /* rc < 0: why the wait ended */
	free(pf);
	free(idx);
}

/* Resolve peer i and take a kept connection or begin a new one. */
static void many_start(struct many *m, unsigned i, const char *address)
{
	struct many_peer *p = &m->p[i];

	p->address = address;
	p->fd = -1;
	if (ctl_resolve(address, m->call, &p->sin)) {
		many_end(m, i, -EINVAL, EX_BROKEN);
		return;
	}
	p->fd = ctl_pool_take(m->cl, &p->sin);
	p->reused = p->fd >= 0;
	if (p->reused) {
		fetch_add_relaxed(m->cl->reuses, 1); /* statistics */
		many_send(m, i);
	} else {
		many_dial(m, i);
	}
}

static int ctl_call_many(struct ctl_client *cl, const char *const *addresses, unsigned n,
		  int timeout_ms, const struct ctl_call *call, int *rcs)
{
	struct many m = { .cl = cl, .call = call, .rcs = rcs };

	if (!cl || !addresses || !rcs || !n || timeout_ms <= 0)
		return -EINVAL;
	m.p = calloc(n, sizeof(*m.p));
	if (!m.p)
		return -ENOMEM;
	m.deadline = sock_now_ms() + timeout_ms;
	wire_hdr_encode(call->frame, call->req_type, (uint32_t)call->req_len);
	for (unsigned i = 0; i < n; i++)
		many_start(&m, i, addresses[i]);
	many_run(&m, n);
	for (unsigned i = 0; i < n; i++)
		if (!m.p[i].said)
			ctl_call_said(cl, addresses[i], call, rcs[i]);
	free(m.p);
	return 0;
}

int ctl_keepalive_many(struct ctl_client *cl, const char *const *addresses, unsigned n,
		       int timeout_ms, uint64_t incarnation, int *rcs)
{
	uint8_t frame[CTL_KEEPALIVE_FRAME];
	struct ctl_call call;

	ctl_keepalive_call(&call, frame, incarnation);
	return ctl_call_many(cl, addresses, n, timeout_ms, &call, rcs);
}
