/* SPDX-License-Identifier: MIT */
/*
 * Leases.  An initiator that dies without DISCONNECT leaves its responder
 * QPs on the target; nothing on the wire says so, since they never send.
 * So live initiators tell every open segment's peer, every keepalive_ms,
 * that they are alive, and a target frees the QPs of initiators silent for
 * longer than lease_ms.  Both run on the repair thread, and so does the
 * renewal of the engine's name in the metadata store (meta/named.c).
 */
#include <stdlib.h>
#include <string.h>

#include "ring/base/clock.h"
#include "runtime/ctl/passive.h"
#include "runtime/ctl/repair.h"
#include "runtime/engine/engine.h"

#define KEEPALIVE_TIMEOUT_MS 1000

/* Tell every open segment's peer we are alive, so it keeps our QPs.  The
 * calls go without ctl_lock: a dead peer costs a connect timeout. */
static void peers_keepalive(struct ferry_engine *e)
{
	typedef char addr_t[sizeof(((struct ferry_seg *)0)->address)];
	int timeout = e->opts.keepalive_ms < KEEPALIVE_TIMEOUT_MS ? (int)e->opts.keepalive_ms
								   : KEEPALIVE_TIMEOUT_MS;
	addr_t *addr;
	unsigned n = 0;

	/* On the heap: up to FERRY_MAX_SEGMENTS addresses (256 KiB). */
	pthread_mutex_lock(&e->ctl_lock);
	addr = malloc(seg_slots(&e->segs) * sizeof(*addr) + 1);
	for (uint32_t i = 0; addr && i < seg_slots(&e->segs); i++) {
		const struct ferry_seg *s = seg_at(&e->segs, i);

		if (s->state == SEG_OPEN && !READ_ONCE(s->stale))
			memcpy(addr[n++], s->address, sizeof(addr[0]));
	}
	pthread_mutex_unlock(&e->ctl_lock);
	for (unsigned i = 0; i < n; i++)
		(void)ctl_keepalive(&e->client, addr[i], timeout, e->incarnation);
	free(addr); /* no memory: no keepalives this round, the next one tries again */
}

/* Keepalives out, the QPs of initiators that went silent freed, our name's lease renewed. */
void repair_leases(struct ferry_engine *e)
{
	struct repair *r = &e->repair;
	uint64_t now = ferry_now_ms();

	if (e->opts.keepalive_ms && now >= r->next_keepalive_ms) {
		peers_keepalive(e);
		r->next_keepalive_ms = now + e->opts.keepalive_ms;
	}
	if (e->opts.lease_ms && now >= r->next_expire_ms) {
		passive_expire(e, (uint64_t)e->opts.lease_ms * 1000000);
		r->next_expire_ms = now + (e->opts.lease_ms + 3) / 4;
	}
	named_keepalive(e);
}

