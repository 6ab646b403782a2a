/* SPDX-License-Identifier: MIT */
/*
 * Ports and batches: their creation and destruction (submission is
 * submit.c's).  A port is one application thread's set of rings, one per
 * core; a batch, a port's array of request slots.
 */
#include "runtime/submit/submit.h"

#include <errno.h>
#include <stdlib.h>
#include <urcu/urcu-qsbr.h>

#include "runtime/engine/engine.h"

#define MAX_BATCH (1u << 24)

/* ---- ports ---- */

static struct ferry_port *port_alloc(struct ferry_engine *e)
{
	struct ferry_port *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->e = e;
	p->rings = ferry_zalloc_lines(e->ncores * sizeof(*p->rings));
	p->runs = calloc(e->ncores, sizeof(*p->runs));
	if (!p->rings || !p->runs) {
		free(p->rings);
		free(p->runs);
		free(p);
		return NULL;
	}
	for (unsigned i = 0; i < e->ncores; i++) {
		if (ferry_ring_init(&p->rings[i], e->opts.ring_size)) {
			while (i--)
				ferry_ring_fini(&p->rings[i]);
			free(p->rings);
			free(p->runs);
			free(p);
			return NULL;
		}
	}
	return p;
}

void port_free(struct ferry_port *p)
{
	for (unsigned i = 0; i < p->e->ncores; i++)
		ferry_ring_fini(&p->rings[i]);
	free(p->rings);
	free(p->runs);
	free(p);
}

int ferry_port_create(struct ferry_engine *e, struct ferry_port **out)
{
	struct ferry_port *p;
	unsigned slot;
	int rc = -ENOSPC;

	if (!e || !out)
		return -EINVAL;
	if (engine_forked(e))
		return -EOWNERDEAD;
	p = port_alloc(e);
	if (!p)
		return -ENOMEM;
	pthread_mutex_lock(&e->ctl_lock);
	for (slot = 0; slot < FERRY_MAX_PORTS; slot++) {
		if (!e->ports[slot]) {
			p->slot = slot;
			p->rr = slot % e->ncores; /* spread single-part requests of ports */
			rcu_assign_pointer(e->ports[slot], p); /* pairs with: rcu_dereference in the cores */
			if (slot >= e->n_ports_hw) /* pairs with: load_acquire in the cores */
				store_release(e->n_ports_hw, slot + 1);
			rc = 0;
			break;
		}
	}
	pthread_mutex_unlock(&e->ctl_lock);
	if (rc) {
		port_free(p);
		return rc;
	}
	*out = p;
	return 0;
}

int ferry_port_destroy(struct ferry_port *p)
{
	struct ferry_engine *e;

	if (!p)
		return -EINVAL;
	if (engine_forked(p->e))
		return -EOWNERDEAD;
	/* A prepared set reads its port (ferry_prep_destroy, _submit) and
	 * holds its regions: freeing the port under it left those regions
	 * for ever -EBUSY, or a use after free to release them. */
	if (p->batches || p->preps)
		return -EBUSY;
	e = p->e;
	pthread_mutex_lock(&e->ctl_lock);
	rcu_assign_pointer(e->ports[p->slot], NULL); /* pairs with: rcu_dereference in the cores */
	pthread_mutex_unlock(&e->ctl_lock);
	/* Every core passes a quiescent state: none still reads p's rings. */
	urcu_qsbr_synchronize_rcu();
	ferry_tsan_acquire(&e->tsan_gp);
	port_free(p);
	return 0;
}

/* ---- batches ---- */

int ferry_batch_create(struct ferry_port *p, uint32_t capacity, struct ferry_batch **out)
{
	struct ferry_batch *b;

	if (!p || !out || capacity == 0 || capacity > MAX_BATCH)
		return -EINVAL;
	if (engine_forked(p->e))
		return -EOWNERDEAD;
	b = ferry_zalloc_lines(sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->rqs = ferry_zalloc_lines((size_t)capacity * sizeof(*b->rqs));
	if (!b->rqs) {
		free(b);
		return -ENOMEM;
	}
	b->port = p;
	b->capacity = capacity;
	b->acct.bell = &p->e->notify.bell; /* the engine's notifier: rung for ferry_notify */
	p->batches++;
	*out = b;
	return 0;
}

/* Requests of b still pending. */
static uint32_t batch_pending(const struct ferry_batch *b)
{
	/* pairs with: fetch_sub_acq_rel in batch_requests_ended */
	return RQ_BATCH_COUNT(load_acquire(b->acct.pending));
}

int ferry_batch_destroy(struct ferry_batch *b)
{
	if (!b)
		return -EINVAL;
	if (engine_forked(b->port->e))
		return -EOWNERDEAD;
	if (batch_pending(b))
		return -EBUSY;
	b->port->batches--;
	free(b->rqs);
	free(b);
	return 0;
}

int ferry_batch_reset(struct ferry_batch *b)
{
	if (!b)
		return -EINVAL;
	if (engine_forked(b->port->e))
		return -EOWNERDEAD;
	if (batch_pending(b))
		return -EBUSY;
	WRITE_ONCE(b->n, 0); /* ferry_req_status (any thread) may read it */
	WRITE_ONCE(b->acct.failed, 0);
	return 0;
}

uint32_t ferry_batch_size(const struct ferry_batch *b)
{
	return b ? READ_ONCE(b->n) : 0;
}
