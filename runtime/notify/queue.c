/* SPDX-License-Identifier: MIT */
/*
 * The receiver's bounded notification queue: Vyukov's bounded queue
 * (every cell carries a turn counter: the producer may fill cell i of turn
 * t when seq == t, a consumer may take it when seq == t + 1).  One
 * producer, the control server thread, so the tail needs no CAS;
 * consumers (ferry_notif_poll, any thread) claim cells with a CAS on the
 * head.  Nobody waits on anybody: a full queue is -EAGAIN to the server
 * (the sender tries again), an empty one is 0 to the poller.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ring/base/atomics.h"
#include "runtime/engine/engine.h"

static struct notif_queue *queue_make(uint32_t size)
{
	struct notif_queue *q = ferry_zalloc_lines(sizeof(*q));

	if (!q)
		return NULL;
	q->cells = ferry_zalloc_lines((size_t)size * sizeof(*q->cells));
	if (!q->cells) {
		free(q);
		return NULL;
	}
	q->mask = size - 1;
	for (uint64_t i = 0; i < size; i++)
		q->cells[i].seq = i; /* before the queue is published */
	return q;
}

/* The producer's side (the control server thread only). */
static int queue_push(struct notif_queue *q, const struct wire_notify *n)
{
	uint64_t pos = READ_ONCE(q->tail);
	struct notif_cell *c = &q->cells[pos & q->mask];

	/* pairs with: store_release in queue_pop (the consumer is done with it) */
	if (load_acquire(c->seq) != pos)
		return -EAGAIN; /* a turn behind: full */
	memcpy(c->n.from, n->from, sizeof(c->n.from));
	c->n.len = n->len;
	memcpy(c->n.msg, n->msg, n->len);
	WRITE_ONCE(q->tail, pos + 1);
	store_release(c->seq, pos + 1); /* pairs with: load_acquire in queue_pop */
	return 0;
}

/* A consumer's side: 1 with *out filled, 0 when empty. */
static int queue_pop(struct notif_queue *q, struct ferry_notif *out)
{
	uint64_t pos = READ_ONCE(q->head);

	for (;;) {
		struct notif_cell *c = &q->cells[pos & q->mask];
		/* pairs with: store_release in queue_push (the cell is filled) */
		uint64_t seq = load_acquire(c->seq);
		int64_t dif = (int64_t)(seq - (pos + 1));

		if (dif < 0)
			return 0;
		if (dif > 0) { /* another consumer took it: look again */
			pos = READ_ONCE(q->head);
			continue;
		}
		/* The claim only (the cell's contents are ordered by seq); pairs with: itself */
		if (!cas_weak_release(q->head, &pos, pos + 1))
			continue;
		memcpy(out->from, c->n.from, sizeof(out->from));
		out->len = c->n.len;
		memcpy(out->msg, c->n.msg, c->n.len);
		store_release(c->seq, pos + q->mask + 1); /* pairs with: load_acquire in queue_push */
		return 1;
	}
}

int notify_receive(void *arg, const struct wire_notify *n)
{
	struct ferry_engine *e = arg;
	struct notify *nt = &e->notify;
	struct notif_queue *q = READ_ONCE(nt->q); /* this thread is its only writer */
	int rc;

	/* For the process that was at our address before us: its sender's
	 * WRITEs went there, not here.  (0: a NOTIFY, which cannot say.) */
	if (n->to_incarnation && n->to_incarnation != e->incarnation) {
		fetch_add_relaxed(nt->refused_stale, 1);
		return -ESTALE;
	}
	if (!q) {
		q = queue_make(nt->q_size);
		if (!q)
			return -ENOMEM;
		store_release(nt->q, q); /* pairs with: load_acquire in ferry_notif_poll */
	}
	rc = queue_push(q, n);
	if (rc)
		fetch_add_relaxed(nt->refused_full, 1);
	else
		fetch_add_relaxed(nt->received, 1);
	return rc;
}

int ferry_notif_poll(struct ferry_engine *e, struct ferry_notif *out, uint32_t max)
{
	struct notif_queue *q;
	uint32_t got = 0;

	if (!e || (!out && max))
		return -EINVAL;
	if (engine_forked(e))
		return -EOWNERDEAD;
	q = load_acquire(e->notify.q); /* pairs with: store_release in notify_receive */
	if (!q)
		return 0;
	while (got < max && queue_pop(q, &out[got]))
		got++;
	return (int)got;
}

void notify_free_queue(struct ferry_engine *e)
{
	struct notif_queue *q = e->notify.q; /* the server thread has stopped */

	if (!q)
		return;
	free(q->cells);
	free(q);
	e->notify.q = NULL;
}
