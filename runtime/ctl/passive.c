/* SPDX-License-Identifier: MIT */
/*
 * The target side of the endpoint handshake, run by the control thread: for
 * each initiator endpoint, the peer QPs on the requested NIC, connected back
 * to the initiator's QPs.  They never post (one-sided operations need only
 * a responder), so they produce no completions on the owning core's CQ and
 * the core never needs to know about them; the control thread creates them
 * and destroys them on DISCONNECT or when the engine goes.
 */
#include "runtime/ctl/passive.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ring/base/clock.h"
#include "ring/base/log.h"
#include "runtime/engine/engine.h"

#define PASSIVE_MAX 8192 /* responder QPs: bounds what misbehaving initiators can pin */

struct passive_ep {
	struct passive_ep *next;
	uint64_t incarnation;
	uint64_t token;
	uint64_t seen_ns;            /* last CONNECT or KEEPALIVE of its initiator */
	unsigned core;               /* the context the initiator reaches: */
	unsigned tx;                 /* descriptor entry core * ntx + tx */
	unsigned nqps;
	struct nic_qp *qps[WIRE_MAX_EP_QPS];
};

static void passive_free(struct ferry_engine *e, struct passive_ep *p)
{
	const struct nic_provider *prov = e->cores[p->core]->tx[p->tx].prov;

	for (unsigned i = 0; i < p->nqps; i++)
		prov->qp_destroy(p->qps[i]);
	free(p);
}

/* Descriptor entry k: context k % ntx of core k / ntx (see engine/nics.c). */
static struct qctx *passive_ctx(struct ferry_engine *e, unsigned k)
{
	return &e->cores[k / e->ntx]->tx[k % e->ntx];
}

/* Responder QPs held once req is served: the records of its names
 * (incarnation, token + k) it replaces (an initiator that asks again after
 * a lost reply, passive_add) do not count twice. */
static unsigned passive_held_after(struct ferry_engine *e, const struct wire_connect_req *req)
{
	unsigned n = req->n_qps;

	pthread_mutex_lock(&e->passive_lock);
	for (const struct passive_ep *p = e->passive; p; p = p->next)
		n += p->incarnation != req->incarnation || p->token - req->token >= req->n_qps;
	pthread_mutex_unlock(&e->passive_lock);
	return n;
}

static int passive_check(struct ferry_engine *e, const struct wire_connect_req *req)
{
	if (req->target_incarnation != e->incarnation)
		return -ESTALE; /* the initiator's descriptor is from another life of ours */
	if (req->target_nic >= e->ncores * e->ntx || req->n_qps == 0 || req->n_qps > EP_MAX_QPS)
		return -EINVAL;
	if (strcmp(req->nic.provider, passive_ctx(e, req->target_nic)->prov->name) != 0)
		return -EPROTONOSUPPORT;
	return passive_held_after(e, req) > PASSIVE_MAX ? -ENOSPC : 0;
}

/* One responder QP for the initiator's QP k, connected back to it. */
static int passive_build(struct ferry_engine *e, const struct wire_connect_req *req,
			 unsigned k, struct passive_ep *p, struct nic_qp_info *out)
{
	struct qctx *q = &e->cores[p->core]->tx[p->tx];
	const struct nic_provider *prov = q->prov;
	int rc;

	/* A responder QP: its own send queue stays empty. */
	rc = prov->qp_create(q->nic, q->cq, 1, &p->qps[0]);
	if (rc)
		return rc;
	p->nqps = 1;
	rc = prov->qp_connect(p->qps[0], &req->nic.addr, &req->qps[k]);
	if (rc)
		return rc;
	prov->qp_info(p->qps[0], out);
	return 0;
}

/* Unlink the record of (incarnation, token), if any; passive_lock held. */
static struct passive_ep *passive_unlink(struct ferry_engine *e, uint64_t incarnation,
					 uint64_t token)
{
	for (struct passive_ep **pp = &e->passive; *pp; pp = &(*pp)->next) {
		struct passive_ep *p = *pp;

		if (p->incarnation == incarnation && p->token == token) {
			*pp = p->next;
			return p;
		}
	}
	return NULL;
}

/* Whether a name in token..token + n - 1 of incarnation was freed before
 * we made it; passive_lock held. */
static bool passive_gone_any(const struct passive_gone *g, uint64_t incarnation, uint64_t token,
			     unsigned n)
{
	for (unsigned i = 0; i < g->n; i++)
		if (g->name[i].incarnation == incarnation && g->name[i].token - token < n)
			return true;
	return false;
}

/* A DISCONNECT for a name we do not hold: remembered, once however often
 * it is sent again (its sender retries); passive_lock held. */
static void passive_gone_add(struct passive_gone *g, uint64_t incarnation, uint64_t token)
{
	if (passive_gone_any(g, incarnation, token, 1))
		return;
	g->name[g->next].incarnation = incarnation;
	g->name[g->next].token = token;
	g->next = (g->next + 1) % PASSIVE_GONE_MAX;
	if (g->n < PASSIVE_GONE_MAX)
		g->n++;
}

/* Publish the new records of req; one with the same name (the initiator
 * asked again after a lost reply) is replaced, not doubled.  -ECANCELED,
 * nothing published, for a request the initiator gave up on (it sent a
 * DISCONNECT for one of its names, served first: passive_gone).  Checked
 * here, under the lock that publishes, so no DISCONNECT comes between. */
static int passive_add(struct ferry_engine *e, const struct wire_connect_req *req,
		       struct passive_ep *list)
{
	struct passive_ep *old = NULL, *o, *next;

	pthread_mutex_lock(&e->passive_lock);
	if (passive_gone_any(&e->passive_gone, req->incarnation, req->token, req->n_qps)) {
		pthread_mutex_unlock(&e->passive_lock);
		return -ECANCELED;
	}
	for (struct passive_ep *p = list; p; p = next) {
		next = p->next;
		o = passive_unlink(e, p->incarnation, p->token);
		if (o) {
			o->next = old;
			old = o;
		}
		p->next = e->passive;
		e->passive = p;
	}
	pthread_mutex_unlock(&e->passive_lock);
	for (; old; old = next) {
		next = old->next;
		passive_free(e, old);
	}
	return 0;
}

static void passive_free_list(struct ferry_engine *e, struct passive_ep *p)
{
	struct passive_ep *next;

	for (; p; p = next) {
		next = p->next;
		passive_free(e, p);
	}
}

/*
 * One record per QP: the initiator names QP k by token + k (wire.h), so a
 * DISCONNECT frees one QP and its repair can replace it alone.
 */
int passive_connect(void *arg, const struct wire_connect_req *req, struct wire_connect_rep *rep)
{
	struct ferry_engine *e = arg;
	struct passive_ep *list = NULL, *p;
	int rc = passive_check(e, req);

	if (rc)
		return rc;
	memset(rep, 0, sizeof(*rep));
	for (unsigned k = 0; k < req->n_qps && !rc; k++) {
		p = calloc(1, sizeof(*p));
		if (!p) {
			rc = -ENOMEM;
			break;
		}
		p->incarnation = req->incarnation;
		p->token = req->token + k;
		p->seen_ns = ferry_now_ns();
		p->core = req->target_nic / e->ntx;
		p->tx = req->target_nic % e->ntx;
		p->next = list;
		list = p;
		rc = passive_build(e, req, k, p, &rep->qps[k]);
	}
	if (rc)
		log_err("endpoint from a peer (token %llu, %u QPs) to our NIC %u: %s",
			(unsigned long long)req->token, req->n_qps, req->target_nic, strerror(-rc));
	else /* -ECANCELED when it comes after its DISCONNECT: nobody reads that
	      * answer (the initiator gave up, its connection is gone) */
		rc = passive_add(e, req, list);
	if (rc) {
		passive_free_list(e, list);
		memset(rep, 0, sizeof(*rep));
		return rc;
	}
	rep->token = req->token;
	rep->n_qps = req->n_qps;
	return 0;
}

int passive_disconnect(void *arg, const struct wire_disconnect *d)
{
	struct ferry_engine *e = arg;
	struct passive_ep *p;

	pthread_mutex_lock(&e->passive_lock);
	p = passive_unlink(e, d->incarnation, d->token);
	if (!p) /* its CONNECT_REQ may be on its way still (passive_gone) */
		passive_gone_add(&e->passive_gone, d->incarnation, d->token);
	pthread_mutex_unlock(&e->passive_lock);
	if (!p)
		return -ENOENT;
	passive_free(e, p);
	return 0;
}

int passive_keepalive(void *arg, uint64_t incarnation)
{
	struct ferry_engine *e = arg;
	uint64_t now = ferry_now_ns();
	int rc = -ENOENT;

	pthread_mutex_lock(&e->passive_lock);
	for (struct passive_ep *p = e->passive; p; p = p->next) {
		if (p->incarnation == incarnation) {
			p->seen_ns = now;
			rc = 0;
		}
	}
	pthread_mutex_unlock(&e->passive_lock);
	return rc;
}

/*
 * An initiator that died without DISCONNECT (killed, crashed, its host
 * gone) leaves its responder QPs here; nothing on the wire says so, since
 * they never send.  Live initiators renew a lease with KEEPALIVE; QPs whose
 * initiator was silent longer than the lease are freed.
 *
 * The clock is read under passive_lock: read before, while the lock was
 * held (the control thread in a slow CONNECT), a KEEPALIVE or CONNECT
 * served meanwhile left seen_ns later than that "now", now - seen_ns
 * wrapped around, and the QPs just renewed were freed as silent for ages
 * (test_lease_race's test_expire_beside_renewal).  Every seen_ns in the
 * list was read before its writer took the lock, so none is later than a
 * now read under it; the comparison does not wrap all the same.
 */
unsigned passive_expire(struct ferry_engine *e, uint64_t lease_ns)
{
	struct passive_ep **pp, *gone = NULL;
	unsigned n = 0;
	uint64_t now;

	pthread_mutex_lock(&e->passive_lock);
	now = ferry_now_ns();
	for (pp = &e->passive; *pp;) {
		struct passive_ep *p = *pp;

		if (now > p->seen_ns && now - p->seen_ns > lease_ns) {
			*pp = p->next;
			p->next = gone;
			gone = p;
			n++;
		} else {
			pp = &p->next;
		}
	}
	pthread_mutex_unlock(&e->passive_lock);
	while (gone) {
		struct passive_ep *next = gone->next;

		passive_free(e, gone);
		gone = next;
	}
	return n;
}

unsigned passive_count_of(struct ferry_engine *e, uint64_t incarnation)
{
	unsigned n = 0;

	pthread_mutex_lock(&e->passive_lock);
	for (struct passive_ep *p = e->passive; p; p = p->next)
		n += p->incarnation == incarnation;
	pthread_mutex_unlock(&e->passive_lock);
	return n;
}

unsigned passive_count(struct ferry_engine *e)
{
	unsigned n = 0;

	pthread_mutex_lock(&e->passive_lock);
	for (struct passive_ep *p = e->passive; p; p = p->next)
		n++;
	pthread_mutex_unlock(&e->passive_lock);
	return n;
}

void passive_destroy_all(struct ferry_engine *e)
{
	struct passive_ep *p, *next;

	pthread_mutex_lock(&e->passive_lock);
	p = e->passive;
	e->passive = NULL;
	pthread_mutex_unlock(&e->passive_lock);
	for (; p; p = next) {
		next = p->next;
		passive_free(e, p);
	}
}
