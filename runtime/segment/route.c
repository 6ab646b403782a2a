/* SPDX-License-Identifier: MIT */
/*
 * Routing per peer (ferry's "multi-transport"): the peer's descriptor lists
 * every context its engine offers (entry i * ntx + t: context t of core i,
 * a provider name and an address each).  A segment uses one transport, the
 * first of this order that both engines have and that reaches the peer:
 *
 *   cma    same host: one-sided copies between the two address spaces,
 *          no work for the peer's CPU (the provider probes that the kernel
 *          allows it, and says why not);
 *   verbs  RDMA NICs on both sides;
 *   tcp    anything else;
 *   loop   the software NIC (engines in one process; tests).
 *
 * Core i's endpoint reaches the peer's (i mod n)-th context of that
 * transport.  If connecting fails on the local side of a transport (its
 * provider cannot reach the peer's address), the next one is tried.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ring/base/log.h"
#include "runtime/engine/engine.h"

const char *const route_order[ROUTE_N] = { "cma", "verbs", "tcp", "loop" };

/* The peer's entries of provider prov, into s->peer_nics; how many. */
static unsigned route_peer_nics(struct ferry_seg *s, const struct seg_desc *d, const char *prov)
{
	unsigned n = 0;

	for (unsigned k = 0; k < d->n_nics; k++)
		if (strcmp(d->nics[k].provider, prov) == 0)
			s->peer_nics[n++] = (uint16_t)k;
	return n;
}

/* Can core 0's context tx reach the peer's first entry?  (The same host,
 * kernel and route hold for every core.) */
static bool route_reachable(struct ferry_engine *e, struct ferry_seg *s, int tx,
			    const struct seg_desc *d)
{
	const struct qctx *q = &e->cores[0]->tx[tx];
	char why[256] = "";
	int rc;

	if (!q->prov->reachable)
		return true;
	rc = q->prov->reachable(q->nic, &d->nics[s->peer_nics[0]].addr, why, sizeof(why));
	if (rc == 0)
		return true;
	log_info("segment %s: %s does not reach the peer (%s): %s", s->address, q->prov->name,
		 strerror(-rc), why[0] ? why : "no reason given");
	return false;
}

int seg_route_next(struct ferry_engine *e, struct ferry_seg *s, const struct seg_desc *d,
		   unsigned *next)
{
	while (*next < ROUTE_N) {
		const char *prov = route_order[(*next)++];
		int tx = core_tx_of(e->cores[0], prov);

		if (tx < 0)
			continue;
		s->n_peer_nics = route_peer_nics(s, d, prov);
		if (s->n_peer_nics == 0 || !route_reachable(e, s, tx, d))
			continue;
		s->tx = (uint8_t)tx;
		snprintf(s->transport, sizeof(s->transport), "%s", prov);
		s->cpu_copy = provider_copies(prov); /* before the open publishes s */
		if (e->opts.verbose)
			log_info("segment %s: over %s (%u of the peer's contexts)", s->address, prov,
				 s->n_peer_nics);
		return 0;
	}
	log_err("segment %s: no transport of ours reaches the peer (ours: %s)", s->address,
		e->cores[0]->nic_name);
	return -EPROTONOSUPPORT;
}

