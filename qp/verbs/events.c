/* SPDX-License-Identifier: MIT */
/*
 * verbs: the device's asynchronous events -- a port going down or coming
 * back, the device dying (or our CQ failing), a QP failing on its own --
 * read from the context's async fd (made non-blocking at open) by a
 * control thread, never a core.  Only the events of this NIC's port matter.
 * A GID change (RoCE) or LID change (InfiniBand) that takes the address our
 * peers know us by is the port going down.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>

#include "qp/verbs/verbs.h"
#include "ring/base/atomics.h"

int fv_event_fd(const struct nic *n)
{
	const struct fv_nic *nic = cnic_of(n);

	return nic->ctx ? nic->ctx->async_fd : -1;
}

uint16_t fv_event_kind(const struct fv_nic *nic, const struct ibv_async_event *ev)
{
	switch (ev->event_type) {
	case IBV_EVENT_PORT_ERR:
		return ev->element.port_num == nic->port ? NIC_EV_PORT_DOWN : 0;
	case IBV_EVENT_PORT_ACTIVE:
		return ev->element.port_num == nic->port ? NIC_EV_PORT_UP : 0;
	case IBV_EVENT_DEVICE_FATAL:
		return NIC_EV_DEVICE_FATAL;
	case IBV_EVENT_CQ_ERR:
		/* Our context's CQ (each open has its own context) overran or
		 * failed: no completion of its QPs comes any more, and QPs
		 * recreated on it would fail too.  To the engine the device is
		 * gone for this context: its rails go down and their work moves,
		 * instead of each slice waiting out its timeout and abandon. */
		return NIC_EV_DEVICE_FATAL;
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
		return NIC_EV_QP_FATAL;
	default:
		return 0; /* PKey changes, SRQ, path migration: nothing to do; a
			   * GID change is roce_port_verdict's, a LID change
			   * ib_port_verdict's */
	}
}

/* RoCE: whether GID index idx still holds gid (what our address names): 1
 * yes, 0 no (another GID, or none), -1 the query failed (we do not know). */
static int gid_still_ours(const struct fv_nic *nic, int idx, const union ibv_gid *gid)
{
	struct ibv_gid_entry e;
	int rc;

	memset(&e, 0, sizeof(e));
	rc = fv_calls.query_gid_ex(nic->ctx, nic->port, (uint32_t)idx, &e, 0);
	if (rc) /* an empty entry: ENODATA, or older kernels' EINVAL (gid.c) */
		return rc == ENODATA || rc == EINVAL ? 0 : -1;
	return memcmp(e.gid.raw, gid->raw, sizeof(e.gid.raw)) == 0;
}

/* Look at our GID index again; a change of hands is logged, it explains
 * the port's state.  A failed query changes nothing. */
static void gid_note(struct fv_nic *nic)
{
	int ours = gid_still_ours(nic, nic->gid_index, &nic->gid);
	bool lost = ours == 0;

	if (ours < 0 || lost == nic->gid_lost)
		return;
	nic->gid_lost = lost;
	if (lost)
		vlog(nic, "GID index %d no longer holds the GID peers know this port by: "
		     "down until it does (restart to use a new one)", nic->gid_index);
	else
		vinfo(nic, "GID index %d holds our GID again", nic->gid_index);
}

/* The same for the alternate GID (peers of the other IP family): true when
 * alt_lost changed.  Its loss is not the port's: the main GID still serves
 * the peers of its family. */
static bool alt_note(struct fv_nic *nic)
{
	int ours = nic->has_alt ? gid_still_ours(nic, nic->alt_gid_index, &nic->alt_gid) : -1;
	bool lost = ours == 0;

	if (ours < 0 || lost == nic->alt_lost)
		return false;
	WRITE_ONCE(nic->alt_lost, lost);
	if (lost)
		vlog(nic, "GID index %d no longer holds the GID peers of the other IP family "
		     "know this port by: they are not reached until it does", nic->alt_gid_index);
	else
		vinfo(nic, "GID index %d holds our alternate GID again", nic->alt_gid_index);
	return true;
}

/*
 * The alternate GID went or came back while the port stays up.  Went: the
 * rails that send from it are dead, but the engine knows rails by port,
 * so the port goes down and, owed, up again: every rail is rebuilt, from
 * the main GID only (alt_lost: roce_gids skips the alternate, fv_addr no
 * longer offers it), so a peer of the other family is reached only through
 * its own alternate GID.  Came back: the port up, rails down are probed
 * again and new connections use it.
 */
static uint16_t alt_verdict(struct fv_nic *nic)
{
	if (!nic->alt_lost)
		return NIC_EV_PORT_UP;
	nic->up_owed = true;
	return NIC_EV_PORT_DOWN;
}

/*
 * To us a RoCE port is up while it is ACTIVE and its GID index still holds
 * the GID our address names: peers reach us only there (the address went
 * out at open) and our QPs send from that index, so a GID table change
 * that took it (the IP address removed or moved, a link flap) is the port
 * going down, and an ACTIVE port whose GID is not back is not up yet.
 * The alternate GID is checked too (alt_verdict).  Returns the change of
 * that state (PORT_DOWN/PORT_UP, 0 none), or kind for events that do not
 * bear on it.
 */
static uint16_t roce_port_verdict(struct fv_nic *nic, const struct ibv_async_event *ev,
				  uint16_t kind)
{
	bool was_up = !nic->port_err && !nic->gid_lost, up, alt_changed = false;

	if (nic->link_layer != IBV_LINK_LAYER_ETHERNET)
		return kind;
	if (ev->event_type == IBV_EVENT_GID_CHANGE && ev->element.port_num == nic->port) {
		gid_note(nic);
		alt_changed = alt_note(nic);
	} else if (kind == NIC_EV_PORT_DOWN || kind == NIC_EV_PORT_UP) {
		nic->port_err = kind == NIC_EV_PORT_DOWN;
		if (!nic->port_err && nic->gid_lost)
			gid_note(nic); /* the GID may be back with the link */
		if (!nic->port_err && nic->alt_lost)
			alt_note(nic);
	} else {
		return kind;
	}
	up = !nic->port_err && !nic->gid_lost;
	if (up != was_up)
		return up ? NIC_EV_PORT_UP : NIC_EV_PORT_DOWN;
	return up && alt_changed ? alt_verdict(nic) : 0;
}

/*
 * InfiniBand routes by LID, and our address carries the one read at open.
 * A LID change (the subnet manager reassigned it) leaves peers sending to
 * the old LID and new connections advertising it, so the port's attributes
 * are read again and the port goes down -- its rails stop -- and up when
 * ACTIVE, so that they are rebuilt with the new LID.  The port coming back
 * ACTIVE re-reads them too (the LID or MTU may have changed meanwhile).
 * Returns the event to report, or kind for events that do not bear on it.
 */
static uint16_t ib_port_verdict(struct fv_nic *nic, const struct ibv_async_event *ev,
				uint16_t kind)
{
	struct ibv_port_attr pa;
	bool lid_change;
	int rc;

	if (nic->link_layer != IBV_LINK_LAYER_INFINIBAND)
		return kind;
	lid_change = ev->event_type == IBV_EVENT_LID_CHANGE && ev->element.port_num == nic->port;
	if (!lid_change && kind != NIC_EV_PORT_UP)
		return kind;
	memset(&pa, 0, sizeof(pa));
	rc = fv_calls.query_port(nic->ctx, nic->port, &pa);
	if (rc) {
		vlog(nic, "cannot read the port after %s: %s (LID 0x%x kept)",
		     ibv_event_type_str(ev->event_type), strerror(fv_errno(rc)), nic->lid);
		return kind;
	}
	WRITE_ONCE(nic->active_mtu, (uint8_t)pa.active_mtu);
	if (pa.lid == nic->lid)
		return kind;
	vinfo(nic, "LID 0x%x is now 0x%x: rails are rebuilt with it", nic->lid, pa.lid);
	WRITE_ONCE(nic->lid, pa.lid);
	if (!lid_change)
		return kind; /* the port up: rails are rebuilt anyway */
	nic->up_owed = pa.state == IBV_PORT_ACTIVE; /* else PORT_ACTIVE brings it */
	return NIC_EV_PORT_DOWN;
}

int fv_event_next(struct nic *n, struct nic_event *out)
{
	struct fv_nic *nic = nic_of(n);
	struct ibv_async_event ev;

	if (nic->up_owed) {
		nic->up_owed = false;
		out->kind = NIC_EV_PORT_UP;
		out->qp_num = 0;
		return 1;
	}
	for (;;) {
		if (fv_calls.get_async_event(nic->ctx, &ev)) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			return -errno;
		}
		out->kind = fv_event_kind(nic, &ev);
		out->kind = roce_port_verdict(nic, &ev, ib_port_verdict(nic, &ev, out->kind));
		out->qp_num = out->kind == NIC_EV_QP_FATAL && ev.element.qp ? ev.element.qp->qp_num : 0;
		fv_calls.ack_async_event(&ev);
		if (out->kind) {
			vinfo(nic, "device event: %s", ibv_event_type_str(ev.event_type));
			return 1;
		}
	}
}
