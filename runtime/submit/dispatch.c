/* SPDX-License-Identifier: MIT */
/* Dispatch's out-of-line parts (runtime/submit/dispatch.h). */
#include "runtime/submit/dispatch.h"

#include <sched.h>

/* The rings rq's parts would go to (as rq_dispatch deals them: in turn
 * over its rails from d->rr on) have room; only the consumer frees more.
 * A rail that would get no part does not count: rq of one part and two
 * rails fits while one of them is full. */
bool rq_fits(const struct dispatch *d, const struct ferry_rq *rq)
{
	unsigned core = d->rr, k = 0;

	for (unsigned i = 0; k < rq->nparts && i < d->ncores; i++) {
		if (rq->rails & (1ull << core)) {
			if (!ferry_ring_fits(&d->rings[core], &d->runs[core]))
				return false;
			k++;
		}
		if (++core == d->ncores)
			core = 0;
	}
	return true;
}

void port_publish_core(struct ferry_port *p, unsigned core)
{
	ferry_ring_publish(&p->rings[core], &p->runs[core]);
	/* After the tail's store: a Dekker pair with the core's sleep. */
	core_kick(p->e->cores[core]);
}

void port_publish(struct ferry_port *p)
{
	uint64_t m = p->staged;

	p->staged = 0;
	while (m) {
		unsigned core = (unsigned)__builtin_ctzll(m);

		m &= m - 1;
		if (p->runs[core].n)
			port_publish_core(p, core);
	}
}

/* A full ring is back-pressure: publish what is staged (the cores take
 * it, and free room) and wait for room. */
__attribute__((noinline)) bool part_wait(struct ferry_port *p, unsigned core, void *tagged)
{
	struct ferry_core *c = p->e->cores[core];
	unsigned spins = 0;

	port_publish(p);
	while (!ferry_ring_stage(&p->rings[core], &p->runs[core], tagged)) {
		if (c->caller_mode && core_drive(c))
			continue; /* FERRY_IDLE_CALLER: we are the core's progress */
		core_kick(c);
		if (++spins < 64)
			ferry_cpu_relax();
		else
			sched_yield();
	}
	return spins != 0;
}

/* In turn over the rails from core on. */
bool rq_dispatch_parts(const struct dispatch *d, struct ferry_rq *rq, unsigned core)
{
	bool waited = false;
	unsigned k = 0;

	for (unsigned i = 0; k < rq->nparts && i < d->ncores; i++) {
		if (rq->rails & (1ull << core))
			waited |= part_enqueue(d, core, rq, k++);
		if (++core == d->ncores)
			core = 0;
	}
	return waited;
}
