/* SPDX-License-Identifier: MIT */
/*
 * Device events (a port down or up, a device gone, a QP failed on its own),
 * watched by the repair thread -- never the cores: the thread polls every
 * context's event fd with its wake-up eventfd and handles what comes, under
 * the engine's lock.  Without them a dead port is noticed only through
 * failed completions and timeouts; with them its rails go down at once and
 * their work moves to rails that still reach the peer.
 */
#include <errno.h>
#include <poll.h>

#include "ring/base/log.h"
#include "runtime/ctl/repair.h"
#include "runtime/engine/engine.h"

unsigned events_fds(struct ferry_engine *e, struct pollfd *fds, unsigned max)
{
	unsigned n = 0;

	for (unsigned i = 0; i < e->ncores; i++) {
		for (unsigned t = 0; t < e->cores[i]->ntx && n < max; t++) {
			const struct qctx *q = &e->cores[i]->tx[t];
			int fd = q->prov->event_fd ? q->prov->event_fd(q->nic) : -1;

			if (fd >= 0)
				fds[n++] = (struct pollfd){ .fd = fd, .events = POLLIN };
		}
	}
	return n;
}

/* Every open segment over context t of core i: rail down (port down) or
 * usable again (port up: the repair thread replaces what broke). */
static void events_rails(struct ferry_engine *e, unsigned i, unsigned t, bool down)
{
	for (uint32_t slot = 0; slot < seg_slots(&e->segs); slot++) {
		struct ferry_seg *s = seg_at(&e->segs, slot);

		/* A stale segment's rails stay EP_STALE: a port that comes back
		 * does not bring back the incarnation its QPs led to. */
		if (s->state != SEG_OPEN || s->tx != t || !s->eps[i] || READ_ONCE(s->stale))
			continue;
		if (down)
			rail_unreachable(e, s, i, slot);
		else if (READ_ONCE(s->rail_down[i]))
			seg_rail_set_down(e, s, i, slot, 0);
	}
	if (!down)
		repair_due_now(e, i);
}

/* A QP failed by itself: its core moves it to the error state (its WRs
 * flush and retry) and asks for a new one. */
static void events_qp_fatal(struct ferry_engine *e, unsigned i, unsigned t, uint32_t qp_num)
{
	struct core_cmd cmd = { .type = CMD_QP_FATAL, .index = t, .slot = qp_num };

	core_command(e->cores[i], &cmd);
}

static void events_handle(struct ferry_engine *e, unsigned i, unsigned t,
			  const struct nic_event *ev)
{
	struct ferry_core *c = e->cores[i];

	fetch_add_relaxed(c->nic_events, 1);
	switch (ev->kind) {
	case NIC_EV_PORT_DOWN:
	case NIC_EV_DEVICE_FATAL:
		log_warn("core %u: %s %s: its rails are down, their work moves", i,
			 c->tx[t].prov->name, ev->kind == NIC_EV_PORT_DOWN ? "port down" :
									     "device gone");
		events_rails(e, i, t, true);
		break;
	case NIC_EV_PORT_UP:
		log_info("core %u: %s port up: its rails are probed again", i, c->tx[t].prov->name);
		events_rails(e, i, t, false);
		break;
	case NIC_EV_QP_FATAL:
		events_qp_fatal(e, i, t, ev->qp_num);
		break;
	}
}

unsigned events_run(struct ferry_engine *e)
{
	unsigned n = 0;

	for (unsigned i = 0; i < e->ncores; i++) {
		for (unsigned t = 0; t < e->cores[i]->ntx; t++) {
			struct qctx *q = &e->cores[i]->tx[t];
			struct nic_event ev;

			if (!q->prov->event_next)
				continue;
			while (q->prov->event_next(q->nic, &ev) == 1) {
				pthread_mutex_lock(&e->ctl_lock);
				events_handle(e, i, t, &ev);
				pthread_mutex_unlock(&e->ctl_lock);
				n++;
			}
		}
	}
	return n;
}
