/* SPDX-License-Identifier: MIT */
/*
 * Calls to many peers at once (keepalives, DISCONNECTs): every peer's
 * connection goes through its steps (connect, authenticate, then its
 * requests written back to back while their answers are read in order)
 * side by side, up to MANY_AT_ONCE of them, driven by one poll(); each
 * peer has its timeout from its start, so up to MANY_AT_ONCE peers that
 * do not answer cost one timeout in all.  Called one after the other, each peer that did
 * not answer (its host cut off, its process stopped) cost the whole
 * timeout, once per request: peers that answer waited behind it, and so
 * could their leases on our QPs, an engine's destroy or a segment's close
 * (10 s per QP of a mute peer before).
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ring/base/atomics.h"
#include "runtime/ctl/call.h"
#include "runtime/ctl/pool.h"
#include "runtime/ctl/sock.h"

/* Connections under way at once: peers beyond wait for a slot (a peer
 * with 4096 segments open, one target under 4096 addresses, would
 * otherwise meet its connection cap, or ours of file descriptors). */
#define MANY_AT_ONCE 64

enum many_step {
	STEP_CONNECT,  /* connect begun: wait until writable */
	STEP_AUTH,     /* our AUTH_HELLO sent: wait for the server's */
	STEP_EXCHANGE, /* requests going out, answers coming in */
	STEP_DONE,
};

struct many_peer {
	struct ctl_pipe *pipe;
	struct sockaddr_in sin;
	int fd;
	enum many_step step;
	bool reused;       /* a kept connection: redialled once if it broke unanswered */
	bool said;         /* the log said why it failed */
	int64_t deadline;  /* its timeout from its start */
	size_t sent;       /* bytes of pipe->frames written */
	unsigned answered; /* answers read */
	uint8_t nonce[WIRE_AUTH_NONCE_LEN];
};

struct many {
	struct ctl_client *cl;
	const struct ctl_call *call;
	int timeout_ms;
	unsigned next;   /* the next peer to start */
	unsigned active; /* started, not done */
	struct many_peer *p;
};

/* Peer i is done: its requests not answered end with rc; its connection
 * is kept if the exchange left it in step. */
static void many_end(struct many *m, unsigned i, int rc, enum ex_state st)
{
	struct many_peer *p = &m->p[i];

	if (p->fd >= 0 && st == EX_SYNCED)
		ctl_pool_put(m->cl, &p->sin, p->fd);
	else if (p->fd >= 0)
		close(p->fd);
	p->fd = -1;
	p->step = STEP_DONE;
	m->active--;
	for (unsigned k = p->answered; k < p->pipe->count; k++)
		p->pipe->rcs[k] = rc;
}

/* A dial of peer i (connect or authentication) failed with rc. */
static void many_dial_failed(struct many *m, unsigned i, int rc)
{
	struct many_peer *p = &m->p[i];

	many_end(m, i, ctl_dial_failed(m->cl, p->pipe->address, m->call, rc, &p->said),
		 EX_BROKEN);
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

/* Peer i's connection broke (rc, leaving it as st): a kept one that the
 * peer had closed before answering anything is dialled again, once. */
static void many_broke(struct many *m, unsigned i, int rc, enum ex_state st)
{
	struct many_peer *p = &m->p[i];

	if (p->reused && p->answered == 0 && st == EX_NO_REPLY) {
		close(p->fd);
		fetch_add_relaxed(m->cl->redials, 1); /* statistics */
		many_dial(m, i);
		return;
	}
	many_end(m, i, rc, EX_BROKEN);
}

/* Write what the socket takes of peer i's requests, without waiting. */
static void many_send(struct many *m, unsigned i)
{
	struct many_peer *p = &m->p[i];
	ssize_t n = send(p->fd, p->pipe->frames + p->sent, p->pipe->len - p->sent,
			 MSG_DONTWAIT | MSG_NOSIGNAL);

	if (n >= 0)
		p->sent += (size_t)n;
	else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
		many_broke(m, i, ctl_io_error(-errno), ex_unanswered(-errno));
}

/* Peer i's connection carries requests from now on. */
static void many_exchange(struct many *m, unsigned i)
{
	struct many_peer *p = &m->p[i];

	p->step = STEP_EXCHANGE;
	p->sent = 0;
	many_send(m, i);
}

/* Read one answer of peer i (its first bytes are there: whole, a frame
 * this small, but the read is bounded by the deadline all the same). */
static void many_answer(struct many *m, unsigned i)
{
	struct many_peer *p = &m->p[i];
	enum ex_state st;
	int rc = ctl_read_answer(p->fd, p->deadline, m->cl->stop_fd, m->call, &st);

	if (st != EX_SYNCED) {
		many_broke(m, i, rc, st);
		return;
	}
	p->pipe->rcs[p->answered++] = rc;
	if (p->answered == p->pipe->count)
		many_end(m, i, 0, EX_SYNCED);
}

/* Peer i's connect finished: authenticate, or send the requests. */
static void many_connected(struct many *m, unsigned i)
{
	struct many_peer *p = &m->p[i];
	int rc = ctl_dial_end(p->fd);

	if (!rc)
		fetch_add_relaxed(m->cl->dials, 1); /* statistics */
	if (!rc && m->cl->has_key) {
		rc = ctl_auth_hello(p->fd, p->nonce, p->deadline, m->cl->stop_fd);
		if (!rc)
			p->step = STEP_AUTH;
	} else if (!rc) {
		many_exchange(m, i);
	}
	if (rc)
		many_dial_failed(m, i, rc);
}

static void many_authenticate(struct many *m, unsigned i)
{
	struct many_peer *p = &m->p[i];
	int rc = ctl_auth_finish(p->fd, &m->cl->key, p->nonce, p->deadline, m->cl->stop_fd,
				 p->pipe->address);

	if (rc)
		many_dial_failed(m, i, rc);
	else
		many_exchange(m, i);
}

/* Peer i's connection is ready (revents): take its step. */
static void many_step(struct many *m, unsigned i, short revents)
{
	struct many_peer *p = &m->p[i];

	switch (p->step) {
	case STEP_CONNECT:
		many_connected(m, i);
		break;
	case STEP_AUTH:
		many_authenticate(m, i);
		break;
	case STEP_EXCHANGE:
		if ((revents & POLLOUT) && p->sent < p->pipe->len)
			many_send(m, i);
		if (p->step == STEP_EXCHANGE && (revents & ~POLLOUT))
			many_answer(m, i);
		break;
	case STEP_DONE:
		break;
	}
}

static short many_events(const struct many_peer *p)
{
	if (p->step == STEP_CONNECT)
		return POLLOUT;
	if (p->step == STEP_EXCHANGE && p->sent < p->pipe->len)
		return POLLIN | POLLOUT; /* answers are read while requests still go */
	return POLLIN;
}

/* Resolve peer i and take a kept connection or begin a new one. */
static void many_start(struct many *m, unsigned i)
{
	struct many_peer *p = &m->p[i];

	p->fd = -1;
	p->deadline = sock_now_ms() + m->timeout_ms;
	m->active++;
	if (ctl_resolve(p->pipe->address, m->call, &p->sin)) {
		many_end(m, i, -EINVAL, EX_BROKEN);
		return;
	}
	p->fd = ctl_pool_take(m->cl, &p->sin);
	p->reused = p->fd >= 0;
	if (p->reused) {
		fetch_add_relaxed(m->cl->reuses, 1); /* statistics */
		many_exchange(m, i);
	} else {
		many_dial(m, i);
	}
}

/* Start peers while fewer than MANY_AT_ONCE are under way; end those whose
 * time is up.  The earliest deadline of those still under way. */
static int64_t many_refill(struct many *m, unsigned n, int64_t now)
{
	int64_t first = INT64_MAX;

	while (m->active < MANY_AT_ONCE && m->next < n)
		many_start(m, m->next++);
	for (unsigned i = 0; i < m->next; i++) {
		if (m->p[i].step == STEP_DONE)
			continue;
		if (m->p[i].deadline <= now)
			many_end(m, i, -ETIMEDOUT, EX_BROKEN);
		else if (m->p[i].deadline < first)
			first = m->p[i].deadline;
	}
	return first;
}

/* Wait for the connections under way (their index in idx) and take the
 * steps of those ready.  0 when every peer is done, 1 to go on, or
 * -ECANCELED (the client's stop fd), -errno of poll. */
static int many_round(struct many *m, unsigned n, struct pollfd *pf, unsigned *idx)
{
	int64_t now = sock_now_ms(), first = many_refill(m, n, now);
	unsigned k = 0;
	int rc;

	/* Ended at once (refused, bad address) while more wait: start them. */
	if (m->active == 0)
		return m->next < n;
	for (unsigned i = 0; i < m->next; i++) {
		if (m->p[i].step == STEP_DONE)
			continue;
		pf[k] = (struct pollfd){ .fd = m->p[i].fd, .events = many_events(&m->p[i]) };
		idx[k++] = i;
	}
	pf[k] = (struct pollfd){ .fd = m->cl->stop_fd, .events = POLLIN };
	rc = poll(pf, k + 1, (int)(first - now));
	if (rc < 0 && errno != EINTR)
		return -errno;
	if (rc > 0 && pf[k].revents)
		return -ECANCELED;
	for (unsigned j = 0; rc > 0 && j < k; j++)
		if (pf[j].revents)
			many_step(m, idx[j], pf[j].revents);
	return 1;
}

/* Every peer's call as far as it goes in its time; every rcs set. */
static void many_run(struct many *m, unsigned n)
{
	unsigned room = n < MANY_AT_ONCE ? n : MANY_AT_ONCE;
	struct pollfd *pf = malloc((room + 1) * sizeof(*pf));
	unsigned *idx = malloc(room * sizeof(*idx));
	int rc = pf && idx ? 1 : -ENOMEM;

	while (rc > 0)
		rc = many_round(m, n, pf, idx);
	/* rc < 0: why the calls stopped, for those under way or never started. */
	for (unsigned i = 0; i < m->next; i++)
		if (m->p[i].step != STEP_DONE)
			many_end(m, i, rc, EX_BROKEN);
	for (unsigned i = m->next; i < n; i++)
		for (unsigned k = 0; k < m->p[i].pipe->count; k++)
			m->p[i].pipe->rcs[k] = rc;
	free(pf);
	free(idx);
}

int ctl_call_many(struct ctl_client *cl, struct ctl_pipe *pipes, unsigned n, int timeout_ms,
		  const struct ctl_call *call)
{
	struct many m = { .cl = cl, .call = call, .timeout_ms = timeout_ms };

	if (!cl || !pipes || !n || timeout_ms <= 0)
		return -EINVAL;
	m.p = calloc(n, sizeof(*m.p));
	if (!m.p)
		return -ENOMEM;
	for (unsigned i = 0; i < n; i++)
		m.p[i].pipe = &pipes[i];
	many_run(&m, n);
	for (unsigned i = 0; i < n; i++)
		for (unsigned k = 0; k < pipes[i].count && !m.p[i].said; k++)
			if (pipes[i].rcs[k]) {
				ctl_call_said(cl, pipes[i].address, call, pipes[i].rcs[k]);
				break; /* once per peer */
			}
	free(m.p);
	return 0;
}
