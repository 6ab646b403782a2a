/* SPDX-License-Identifier: MIT */
/*
 * Commands from the control path to a core, through the core's command
 * ring: attach a new endpoint's QPs, tear one down (phase one), swap in a
 * repaired QP, mark a rail down.  The control thread waits for each; the
 * core runs them at the top of its next pass.
 */
#include <errno.h>
#include <time.h>

#include "ep/teardown.h"
#include "ring/base/clock.h"
#include "ring/base/counters.h"
#include "runtime/core/core.h"

static void cmd_done(struct core_cmd *cmd, int rc)
{
	cmd->rc = rc;
	store_release(cmd->done, 1); /* pairs with: load_acquire in core_command */
}

/* A new endpoint's QPs join the core's table; the control path publishes
 * the endpoint itself once they have. */
static void cmd_ep_add(struct ferry_core *c, struct core_cmd *cmd)
{
	cmd_done(cmd, ep_attach(&c->tx[cmd->ep->tx], cmd->ep));
}

/* Teardown, phase one (ep/teardown.h): -EBUSY until the QPs are drained and
 * destroyed; the control path asks again.  Normally nothing is in flight
 * (the segment is idle or closing).  An eviction found the segment unused,
 * but a request that took its reference just after and found every rail
 * gone was sent here to wait for a reconnect, and cut on the endpoint
 * while it was still open: evicted, its slices failed -ECANCELED.  Such
 * an endpoint stays (test_epcache's test_evict_races_submit); once closing
 * is set, later parts see it and wait for the reconnect. */
static void cmd_ep_remove(struct ferry_core *c, struct core_cmd *cmd)
{
	struct ferry_ep *ep = cmd->ep;

	if (cmd->rc == EP_EVICT && !ep->closing && (ep->pending.count || ep_depth(ep)))
		return cmd_done(cmd, -EADDRINUSE);
	if (!ep->qps_gone) {
		ep->closing = 1;
		core_fail_pending(c, ep, -ECANCELED);
	}
	cmd_done(cmd, ep_teardown_qps(&c->tx[ep->tx], ep));
}

/* Swap in a QP the repair thread connected for a broken, drained one. */
static void cmd_qp_replace(struct ferry_core *c, struct core_cmd *cmd)
{
	struct ferry_ep *ep = core_ep(c, cmd->slot);
	struct qpx *old;
	int rc;

	if (ep != cmd->ep || !ep || ep->closing || cmd->index >= ep->nqps)
		return cmd_done(cmd, -ENOENT);
	old = ep->qps[cmd->index];
	if (!old->broken) /* replaced already, by an earlier job for the same QP */
		return cmd_done(cmd, -EALREADY);
	if (old->depth.depth)
		return cmd_done(cmd, -EBUSY);
	rc = qctx_attach(&c->tx[ep->tx], cmd->qp);
	if (rc)
		return cmd_done(cmd, rc);
	cmd->qp->owner = ep;
	ep->qps[cmd->index] = cmd->qp;
	qpx_destroy(&c->tx[ep->tx], old);
	ep->down = 0;
	ep->all_broken_since = 0;
	stat_add(&c->ctr, qp_resets, 1);
	cmd_done(cmd, 0);
}

/* The repair thread found the peer unreachable (or reachable again). */
static void cmd_ep_down(struct ferry_core *c, struct core_cmd *cmd)
{
	struct ferry_ep *ep = core_ep(c, cmd->slot);

	if (ep != cmd->ep || !ep || ep->closing)
		return cmd_done(cmd, -ENOENT);
	ep->down = (uint8_t)cmd->rc;
	if (ep->down)
		core_fail_pending(c, ep, -EHOSTDOWN);
	/* The peer's QPs went with its process: what ours hold would wait out
	 * a slice timeout per QP, and again on each QP or rail a retry tried.
	 * Flushed now, it ends -EHOSTDOWN (core_slice_trouble); the QPs are
	 * replaced like any broken one, so a peer that answers again (the same
	 * process) gets its rails back. */
	if (cmd->rc == EP_PEER_GONE || cmd->rc == EP_STALE)
		ep_set_error(&c->tx[ep->tx], ep);
	cmd_done(cmd, 0);
}

/* A device event: a QP failed by itself.  Fail it here, its owner: its WRs
 * flush and retry, and the next sweep asks for a new one. */
static void cmd_qp_fatal(struct ferry_core *c, struct core_cmd *cmd)
{
	struct qctx *q;

	if (cmd->index >= c->ntx)
		return cmd_done(cmd, -EINVAL);
	q = &c->tx[cmd->index];
	for (uint32_t i = 0; i < q->n_qps; i++) {
		struct qpx *qp = q->qps[i];

		if (qp && q->prov->qp_num(qp->nqp) == cmd->slot) {
			qp->broken = 1;
			q->prov->qp_set_error(qp->nqp);
			return cmd_done(cmd, 0);
		}
	}
	cmd_done(cmd, -ENOENT); /* a responder QP, or gone already */
}

uint32_t core_drain_cmds(struct ferry_core *c)
{
	struct core_cmd *cmd;
	uint32_t n = 0;

	if (!ferry_ring_peek(&c->cmds))
		return 0;
	while ((cmd = ferry_ring_get(&c->cmds))) {
		if (cmd->type == CMD_EP_ADD)
			cmd_ep_add(c, cmd);
		else if (cmd->type == CMD_EP_REMOVE)
			cmd_ep_remove(c, cmd);
		else if (cmd->type == CMD_QP_REPLACE)
			cmd_qp_replace(c, cmd);
		else if (cmd->type == CMD_EP_DOWN)
			cmd_ep_down(c, cmd);
		else if (cmd->type == CMD_QP_FATAL)
			cmd_qp_fatal(c, cmd);
		else
			cmd_done(cmd, -EINVAL);
		n++;
	}
	return n;
}

int core_command(struct ferry_core *c, struct core_cmd *cmd)
{
	WRITE_ONCE(cmd->done, 0);
	while (!ferry_ring_put(&c->cmds, cmd))
		ferry_sleep_us(20);
	core_kick(c);
	while (!load_acquire(cmd->done)) /* pairs with: store_release in cmd_done */
		ferry_sleep_us(20);
	return cmd->rc;
}
