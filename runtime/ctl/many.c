/* SPDX-License-Identifier: MIT */
/*
 * Calls in flight side by side (keepalives, DISCONNECTs, repair
 * handshakes): every call's connection goes through its steps (connect,
 * authenticate, then its requests written back to back while their
 * answers are read in order) without waiting, each step taken when poll()
 * says its socket is ready; each call has its timeout from its start.
 * Called one after the other, each peer that did not answer (its host cut
 * off, its process stopped) cost the whole timeout, once per request, and
 * whatever came after waited: other peers' keepalives and leases, an
 * engine's destroy, a segment's close (10 s per QP of a mute peer), the
 * repairs of live peers' QPs.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ring/base/atomics.h"
#include "ring/base/fd.h"
#include "runtime/ctl/call.h"
#include "runtime/ctl/pool.h"
#include "runtime/ctl/sock.h"

#define CTL_FRAME_MS 250 /* a frame begun must be whole within this */

enum call_step {
	STEP_FREE,     /* no call in this slot */
	STEP_CONNECT,  /* connect begun: wait until writable */
	STEP_AUTH,     /* our AUTH_HELLO sent: wait for the server's */
	STEP_EXCHANGE, /* requests going out, answers coming in */
};

struct call_slot {
	enum call_step step;
	unsigned gen;         /* bumped at every start: a slot reused is another call */
	struct ctl_pipe *pipe;
	struct ctl_call call; /* what is asked; its out takes a single answer */
	ctl_done_fn done;
	void *arg;
	struct sockaddr_in sin;
	int fd;
	bool reused;       /* a kept connection: redialled once if it broke unanswered */
	bool said;         /* the log said why it failed */
	int64_t deadline;  /* its timeout from its start */
	size_t sent;       /* bytes of pipe->frames written */
	unsigned answered; /* answers read */
	uint8_t nonce[WIRE_AUTH_NONCE_LEN];
	struct auth_sess sess; /* the connection's, when the client has a key */
	uint8_t *tx;       /* pipe->frames as they go on this connection (sealed) */
	size_t tx_len;
};

struct ctl_calls {
	struct ctl_client *cl;
	unsigned active;
	unsigned limit;    /* CTL_CALLS_MAX, or lower (tests) */
	bool cancelling;   /* ctl_calls_cancel under way: a done() starts nothing */
	struct call_slot slot[CTL_CALLS_MAX];
};

/* The call in slot c is over: its requests not answered end with rc, its
 * connection is kept if the exchange left it in step, the log says why it
 * failed (once per call), and its owner hears of it. */
static void call_end(struct ctl_calls *s, struct call_slot *c, int rc, enum ex_state st)
{
	struct ctl_pipe *p = c->pipe;
	ctl_done_fn done = c->done;
	void *arg = c->arg;

	if (c->fd >= 0 && st == EX_SYNCED)
		ctl_pool_put(s->cl, &c->sin, c->fd, &c->sess);
	else if (c->fd >= 0)
		sock_close(c->fd);
	ctl_sealed_free(p->frames, c->tx);
	c->tx = NULL;
	auth_wipe(&c->sess, sizeof(c->sess));
	for (unsigned k = c->answered; k < p->count; k++)
		p->rcs[k] = rc;
	for (unsigned k = 0; k < p->count && !c->said; k++)
		if (p->rcs[k]) { /* in request k's words (a pipe may mix them) */
			ctl_call_said(s->cl, p->address,
				      p->calls && p->calls[k] ? p->calls[k] : &c->call, p->rcs[k]);
			break;
		}
	c->step = STEP_FREE; /* free before done: it may start another */
	c->fd = -1;
	s->active--;
	if (done)
		done(arg);
}

/* A dial (connect or authentication) failed with rc. */
static void call_dial_failed(struct ctl_calls *s, struct call_slot *c, int rc)
{
	call_end(s, c, ctl_dial_failed(s->cl, c->pipe->address, &c->call, rc, &c->said),
		 EX_BROKEN);
}

/* Begin a new connection for c. */
static void call_dial(struct ctl_calls *s, struct call_slot *c)
{
	c->reused = false;
	ctl_sealed_free(c->pipe->frames, c->tx);
	c->tx = NULL;
	c->sess.on = false;
	c->fd = ctl_dial_fault(s->cl, &c->sin);
	if (!c->fd)
		c->fd = ctl_dial_begin(&c->sin);
	/* Idle connections in the pool (calls that ended well park theirs
	 * there) may hold every descriptor left: they give way. */
	if ((c->fd == -EMFILE || c->fd == -ENFILE) && ctl_pool_shed(s->cl))
		c->fd = ctl_dial_begin(&c->sin);
	c->step = STEP_CONNECT;
	if (c->fd < 0)
		call_dial_failed(s, c, c->fd);
}

/* c's connection broke (rc, leaving it as st): a kept one that the peer
 * had closed before answering anything is dialled again, once. */
static void call_broke(struct ctl_calls *s, struct call_slot *c, int rc, enum ex_state st)
{
	if (c->reused && c->answered == 0 && st == EX_NO_REPLY) {
		sock_close(c->fd);
		fetch_add_relaxed(s->cl->redials, 1); /* statistics */
		call_dial(s, c);
		return;
	}
	call_end(s, c, rc, EX_BROKEN);
}

/* What the next answer is (a pipe may mix requests: pipe->calls) and
 * where it goes. */
static void call_for_answer(struct call_slot *c)
{
	const struct ctl_pipe *p = c->pipe;

	if (c->answered >= p->count)
		return;
	if (p->calls && p->calls[c->answered])
		c->call = *p->calls[c->answered];
	if (p->outs)
		c->call.out = p->outs[c->answered];
}

/* Write what the socket takes of c's requests, without waiting. */
static void call_send(struct ctl_calls *s, struct call_slot *c)
{
	ssize_t n = send(c->fd, c->tx + c->sent, c->tx_len - c->sent,
			 MSG_DONTWAIT | MSG_NOSIGNAL);

	if (n >= 0) {
		c->sent += (size_t)n;
		if (c->sent > c->pipe->sent) /* a redial writes from 0 again */
			c->pipe->sent = c->sent;
	} else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
		enum ex_state st;
		int rc = -errno;

		/* A server that refused us (at its cap) said why before it
		 * closed: that, not the reset our send met. */
		call_for_answer(c);
		rc = ctl_send_failed(s->cl, c->fd, &c->sess, &c->call, rc, &st);
		call_broke(s, c, rc, st);
	}
}

/* c's connection carries its requests from now on. */
static void call_exchange(struct ctl_calls *s, struct call_slot *c)
{
	int rc = ctl_seal(&c->sess, c->pipe->frames, c->pipe->len, &c->tx, &c->tx_len);

	c->step = STEP_EXCHANGE;
	c->sent = 0;
	c->pipe->tag_len = c->sess.on ? WIRE_TAG_LEN : 0;
	if (rc)
		call_end(s, c, rc, EX_BROKEN);
	else
		call_send(s, c);
}

/* The deadline of a read that poll() said can begin: a peer sends each
 * frame whole, so the rest of one begun comes at once; one that trickles
 * holds this thread CTL_FRAME_MS at most, not its call's whole timeout. */
static int64_t call_read_deadline(const struct call_slot *c)
{
	int64_t soon = sock_now_ms() + CTL_FRAME_MS;

	return soon < c->deadline ? soon : c->deadline;
}

/* Read one answer. */
static void call_answer(struct ctl_calls *s, struct call_slot *c)
{
	enum ex_state st;
	int rc;

	call_for_answer(c);
	rc = ctl_read_answer(c->fd, &c->sess, call_read_deadline(c), s->cl->stop_fd, &c->call, &st,
			     &s->cl->forged);

	if (st != EX_SYNCED) {
		call_broke(s, c, rc, st);
		return;
	}
	c->pipe->rcs[c->answered++] = rc;
	c->pipe->answered = c->answered;
	/* Kept only with every request out whole: a peer that answered
	 * before it read them all would take the rest of the last one, and
	 * the next call's request after it, for one request. */
	if (c->answered == c->pipe->count)
		call_end(s, c, 0, c->sent == c->tx_len ? EX_SYNCED : EX_BROKEN);
}

/* c's connect finished: authenticate, or send the requests. */
static void call_connected(struct ctl_calls *s, struct call_slot *c)
{
	int rc = ctl_dial_end(c->fd);

	if (!rc)
		fetch_add_relaxed(s->cl->dials, 1); /* statistics */
	if (!rc && s->cl->has_key) {
		rc = ctl_auth_hello(c->fd, c->nonce, c->deadline, s->cl->stop_fd);
		if (!rc)
			c->step = STEP_AUTH;
	} else if (!rc) {
		call_exchange(s, c);
	}
	if (rc)
		call_dial_failed(s, c, rc);
}

static void call_authenticate(struct ctl_calls *s, struct call_slot *c)
{
	int rc = ctl_auth_finish(c->fd, &s->cl->key, c->nonce, call_read_deadline(c),
				 s->cl->stop_fd, c->pipe->address, &c->sess);

	if (rc)
		call_dial_failed(s, c, rc);
	else
		call_exchange(s, c);
}

/* c's socket is ready (revents): take its step. */
static void call_step(struct ctl_calls *s, struct call_slot *c, short revents)
{
	switch (c->step) {
	case STEP_CONNECT:
		call_connected(s, c);
		break;
	case STEP_AUTH:
		call_authenticate(s, c);
		break;
	case STEP_EXCHANGE: {
		unsigned gen = c->gen;

		if ((revents & POLLOUT) && c->sent < c->tx_len)
			call_send(s, c);
		/* Ended by the send and started again by its done(): these
		 * revents are not the new call's. */
		if (c->gen == gen && c->step == STEP_EXCHANGE && (revents & ~POLLOUT))
			call_answer(s, c);
		break;
	}
	case STEP_FREE:
		break;
	}
}

static short call_events(const struct call_slot *c)
{
	if (c->step == STEP_CONNECT)
		return POLLOUT;
	if (c->step == STEP_EXCHANGE && c->sent < c->tx_len)
		return POLLIN | POLLOUT; /* answers are read while requests still go */
	return POLLIN;
}

struct ctl_calls *ctl_calls_new(struct ctl_client *cl)
{
	struct ctl_calls *s = cl ? calloc(1, sizeof(*s)) : NULL;

	if (s) {
		s->cl = cl;
		s->limit = CTL_CALLS_MAX;
	}
	return s;
}

void ctl_calls_set_limit(struct ctl_calls *s, unsigned limit)
{
	s->limit = limit && limit < CTL_CALLS_MAX ? limit : CTL_CALLS_MAX;
}

unsigned ctl_calls_room(const struct ctl_calls *s)
{
	return s->active < s->limit ? s->limit - s->active : 0;
}

void ctl_calls_free(struct ctl_calls *s)
{
	if (s)
		ctl_calls_cancel(s, -ECANCELED);
	free(s);
}

unsigned ctl_calls_active(const struct ctl_calls *s)
{
	return s->active;
}

int ctl_calls_start(struct ctl_calls *s, struct ctl_pipe *pipe, const struct ctl_call *call,
		    int timeout_ms, ctl_done_fn done, void *arg)
{
	struct call_slot *c = NULL;

	if (!pipe || !call || !pipe->count || !pipe->len || timeout_ms <= 0)
		return -EINVAL;
	if (s->cancelling)
		return -ECANCELED; /* a done() during ctl_calls_cancel: it would outlive it */
	if (!ctl_calls_room(s))
		return -EBUSY;
	for (unsigned i = 0; i < CTL_CALLS_MAX && !c; i++)
		if (s->slot[i].step == STEP_FREE)
			c = &s->slot[i];
	if (!c)
		return -EBUSY;
	*c = (struct call_slot){ .step = STEP_CONNECT, .gen = c->gen + 1, .pipe = pipe,
				 .call = *call, .done = done, .arg = arg, .fd = -1,
				 .deadline = sock_now_ms() + timeout_ms };
	s->active++;
	pipe->sent = 0;
	pipe->answered = 0;
	if (ctl_resolve(pipe->address, call, &c->sin)) {
		c->said = true;
		call_end(s, c, -EINVAL, EX_BROKEN);
		return 0;
	}
	c->fd = ctl_pool_take(s->cl, &c->sin, &c->sess);
	c->reused = c->fd >= 0;
	if (c->reused) {
		fetch_add_relaxed(s->cl->reuses, 1); /* statistics */
		call_exchange(s, c);
	} else {
		call_dial(s, c);
	}
	return 0;
}

unsigned ctl_calls_fds(const struct ctl_calls *s, struct pollfd *p, int *next_ms)
{
	int64_t now = sock_now_ms(), first = INT64_MAX;
	unsigned k = 0;

	for (unsigned i = 0; i < CTL_CALLS_MAX; i++) {
		const struct call_slot *c = &s->slot[i];

		if (c->step == STEP_FREE)
			continue;
		p[k++] = (struct pollfd){ .fd = c->fd, .events = call_events(c) };
		if (c->deadline < first)
			first = c->deadline;
	}
	if (k) /* the client's cancel ends them all */
		p[k++] = (struct pollfd){ .fd = s->cl->stop_fd, .events = POLLIN };
	*next_ms = !k ? -1 : first <= now ? 0 : (int)(first - now);
	return k;
}

unsigned ctl_calls_run(struct ctl_calls *s)
{
	struct pollfd p[CTL_CALLS_MAX + 1];
	struct call_slot *who[CTL_CALLS_MAX];
	unsigned gen[CTL_CALLS_MAX];
	unsigned k = 0, before = s->active;
	int64_t now;
	int rc;

	for (unsigned i = 0; i < CTL_CALLS_MAX; i++)
		if (s->slot[i].step != STEP_FREE) {
			who[k] = &s->slot[i];
			gen[k] = s->slot[i].gen;
			p[k++] = (struct pollfd){ .fd = s->slot[i].fd, .events = call_events(&s->slot[i]) };
		}
	if (!k)
		return 0;
	p[k] = (struct pollfd){ .fd = s->cl->stop_fd, .events = POLLIN };
	rc = poll(p, k + 1, 0);
	if (rc > 0 && p[k].revents) {
		ctl_calls_cancel(s, -ECANCELED);
		return before;
	}
	/* A slot ended and started again by a done() meanwhile holds another
	 * call: these revents are not its.  (A redial keeps the call, and
	 * its new socket is polled next time.) */
	for (unsigned j = 0; rc > 0 && j < k; j++)
		if (p[j].revents && who[j]->gen == gen[j] && who[j]->step != STEP_FREE &&
		    who[j]->fd == p[j].fd)
			call_step(s, who[j], p[j].revents);
	now = sock_now_ms();
	for (unsigned i = 0; i < CTL_CALLS_MAX; i++)
		if (s->slot[i].step != STEP_FREE && s->slot[i].deadline <= now)
			call_end(s, &s->slot[i], -ETIMEDOUT, EX_BROKEN);
	return before > s->active ? before - s->active : 0;
}

bool ctl_pipe_unanswered_sent(const struct ctl_pipe *p, unsigned k)
{
	size_t end = 0;

	/* Nothing went (maybe no frames either: a request that could not be
	 * made, repair_run's without memory): no header to read. */
	if (k < p->answered || k >= p->count || !p->sent)
		return false;
	for (unsigned i = 0; i <= k; i++) { /* frames back to back: their headers say how long */
		struct wire_hdr h;

		if (end + WIRE_HDR_LEN > p->len || wire_hdr_decode(p->frames + end, WIRE_HDR_LEN, &h))
			return end < p->sent; /* (not ours: cannot be) any byte out counts */
		end += WIRE_HDR_LEN + h.payload_len + p->tag_len;
	}
	return end <= p->sent;
}

void ctl_calls_cancel(struct ctl_calls *s, int rc)
{
	bool nested = s->cancelling;

	s->cancelling = true;
	for (unsigned i = 0; i < CTL_CALLS_MAX; i++)
		if (s->slot[i].step != STEP_FREE)
			call_end(s, &s->slot[i], rc, EX_BROKEN);
	s->cancelling = nested;
}

int ctl_call_many(struct ctl_client *cl, struct ctl_pipe *pipes, unsigned n, int timeout_ms,
		  const struct ctl_call *call)
{
	struct pollfd p[CTL_CALLS_MAX + 1];
	struct ctl_calls *s;
	unsigned next = 0;

	if (!cl || !pipes || !n || timeout_ms <= 0)
		return -EINVAL;
	s = ctl_calls_new(cl);
	if (!s)
		return -ENOMEM;
	for (;;) {
		int wait_ms;
		unsigned k;

		while (next < n && ctl_calls_room(s)) {
			unsigned before = ctl_calls_active(s);
			const struct ctl_call *what = pipes[next].call ? pipes[next].call : call;
			int rc = what ? ctl_calls_start(s, &pipes[next], what, timeout_ms, NULL, NULL)
				      : -EINVAL;

			if (rc) /* a pipe the caller got wrong: it alone fails */
				for (unsigned i = 0; i < pipes[next].count; i++)
					pipes[next].rcs[i] = rc;
			/* No file descriptor left while calls hold some: this one
			 * goes again when they give theirs back. */
			if (!rc && before && ctl_calls_active(s) == before &&
			    (pipes[next].rcs[0] == -EMFILE || pipes[next].rcs[0] == -ENFILE))
				break;
			next++;
		}
		k = ctl_calls_fds(s, p, &wait_ms);
		if (!k && next == n)
			break;
		if (k)
			(void)poll(p, k, wait_ms);
		ctl_calls_run(s);
	}
	ctl_calls_free(s);
	return 0;
}
