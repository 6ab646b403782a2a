/* SPDX-License-Identifier: MIT */
/*
 * verbs: the device's asynchronous events -- a port going down or coming
 * back, the device dying (or our CQ failing), a QP failing on its own --
 * read from the context's async fd (made non-blocking at open) by a
 * control thread, never a core.  Only the events of this NIC's port matter.
 */
#include <errno.h>
#include <fcntl.h>

#include "qp/verbs/verbs.h"

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
		return 0; /* LID/GID/PKey changes, SRQ, path migration: nothing to do */
	}
}

int fv_event_next(struct nic *n, struct nic_event *out)
{
	struct fv_nic *nic = nic_of(n);
	struct ibv_async_event ev;

	for (;;) {
		if (fv_calls.get_async_event(nic->ctx, &ev)) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			return -errno;
		}
		out->kind = fv_event_kind(nic, &ev);
		out->qp_num = out->kind == NIC_EV_QP_FATAL && ev.element.qp ? ev.element.qp->qp_num : 0;
		fv_calls.ack_async_event(&ev);
		if (out->kind) {
			vinfo(nic, "device event: %s", ibv_event_type_str(ev.event_type));
			return 1;
		}
	}
}
