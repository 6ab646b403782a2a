/* SPDX-License-Identifier: MIT */
/*
 * Leases.  An initiator that dies without DISCONNECT leaves its responder
 * QPs on the target; nothing on the wire says so, since they never send.
 * So live initiators tell every open segment's peer, every keepalive_ms,
 * that they are alive, and a target frees the QPs of initiators silent for
 * longer than lease_ms.  Both run on this thread, and so does the renewal
 * of the engine's name in the metadata store (meta/named.c).
 *
 * They ran on the repair thread before, one peer after the other: each
 * peer that did not answer (cut off, stopped) held that thread for a
 * second, so repairs of other peers' QPs waited, and with enough silent
 * peers the live ones heard from us less often than their lease.  Now a
 * round goes to the peers side by side (ctl_keepalive_many: up to 64 at
 * once, so up to 64 mute ones cost one timeout in all), on a thread of its
 * own.
 */
#include "ring/base/fd.h"
#include "runtime/ctl/lease.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "ring/base/clock.h"
#include "runtime/ctl/passive.h"
#include "runtime/engine/engine.h"

#define KEEPALIVE_TIMEOUT_MS 1000
#define LEASE_WAIT_MAX_MS 1000 /* asleep, it still looks this often (the name's renewal) */

typedef char peer_addr_t[sizeof(((struct ferry_seg *)0)->address)];

static int addr_cmp(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* The peers of the open segments and of those closing, each once (several
 * segments may share one: one keepalive serves them all, it names our
 * incarnation, not a segment), into *out (malloc'd; NULL without memory).
 * How many.  A closing segment waits for its requests in flight (retries
 * x timeout_ms, or for good with timeout_ms 0), which outlasts the peer's
 * lease: without keepalives the peer freed our QPs under them
 * (test_teardown's test_lease_kept_while_closing).  Its address stays
 * until the closer frees the slot, under ctl_lock, after its DISCONNECTs
 * are queued. */
static unsigned peers_of_open_segments(struct ferry_engine *e, peer_addr_t **out)
{
	peer_addr_t *addr;
	unsigned n = 0, u = 0;

	pthread_mutex_lock(&e->ctl_lock);
	/* Sized under the lock: an open may add slots until we hold it.  On
	 * the heap: up to FERRY_MAX_SEGMENTS addresses (256 KiB). */
	addr = malloc(seg_slots(&e->segs) * sizeof(*addr) + 1);
	for (uint32_t i = 0; addr && i < seg_slots(&e->segs); i++) {
		const struct ferry_seg *s = seg_at(&e->segs, i);

		if ((s->state == SEG_OPEN || s->state == SEG_CLOSING) && !READ_ONCE(s->stale))
			memcpy(addr[n++], s->address, sizeof(addr[0]));
	}
	pthread_mutex_unlock(&e->ctl_lock);
	*out = addr;
	if (!addr)
		return 0;
	qsort(addr, n, sizeof(addr[0]), addr_cmp);
	for (unsigned i = 0; i < n; i++)
		if (!u || strcmp(addr[u - 1], addr[i]))
			memmove(addr[u++], addr[i], sizeof(addr[0]));
	return u;
}

/* Tell every open segment's peer we are alive, so it keeps our QPs: side
 * by side, each bounded by the timeout. */
static void peers_keepalive(struct ferry_engine *e)
{
	int timeout = e->opts.keepalive_ms < KEEPALIVE_TIMEOUT_MS ? (int)e->opts.keepalive_ms
								   : KEEPALIVE_TIMEOUT_MS;
	peer_addr_t *addr;
	const char **ptrs = NULL;
	int *rcs = NULL;
	unsigned n = peers_of_open_segments(e, &addr);

	if (n) {
		ptrs = malloc(n * sizeof(*ptrs));
		rcs = malloc(n * sizeof(*rcs));
	}
	if (ptrs && rcs) {
		unsigned mute = 0;
		bool store_ok = true; /* a store that does not answer holds up no more keepalives */
		uint64_t recheck_until;

		for (unsigned i = 0; i < n; i++)
			ptrs[i] = addr[i];
		if (ctl_keepalive_many(&e->client, ptrs, n, timeout, e->incarnation, rcs) == 0) {
			/* A slow store (answers near its 2 s) over many dead
			 * peers must not hold up the next round, whose
			 * keepalives keep our QPs at live peers: the rest wait
			 * for a later round (still refused then). */
			recheck_until = ferry_now_ms() + (uint64_t)timeout;
			for (unsigned k = 0; k < n; k++)
				mute += rcs[k] == -ETIMEDOUT;
			/* From where the last round stopped, so that the same
			 * first few cannot take every round's time. */
			for (unsigned k = 0, i; k < n && store_ok; k++) {
				i = (e->lease.recheck_from + k) % n;
				if (ferry_now_ms() >= recheck_until) {
					e->lease.recheck_from = i;
					break;
				}
				/* The engine there is gone: did its name move? */
				if (rcs[i] == -ECONNREFUSED)
					store_ok = seg_names_recheck(e, addr[i]) == 0;
			}
		}
		fetch_add_relaxed(e->lease.rounds, 1);
		fetch_add_relaxed(e->lease.unanswered, mute);
	}
	/* No memory: no keepalives this round, the next one tries again. */
	free(rcs);
	free(ptrs);
	free(addr);
}

/* Keepalives out, the QPs of initiators that went silent freed, our name's lease renewed. */
static void lease_run(struct ferry_engine *e)
{
	struct lease *l = &e->lease;
	uint64_t now = ferry_now_ms();

	if (e->opts.keepalive_ms && now >= l->next_keepalive_ms) {
		peers_keepalive(e);
		l->next_keepalive_ms = now + e->opts.keepalive_ms;
	}
	if (e->opts.lease_ms && now >= l->next_expire_ms) {
		passive_expire(e, (uint64_t)e->opts.lease_ms * 1000000);
		/* In 64 bits: lease_ms + 3 wrapped to 0..2 at the top of its
		 * range, and the thread expired in a loop with no wait. */
		l->next_expire_ms = now + ((uint64_t)e->opts.lease_ms + 3) / 4;
	}
	named_keepalive(e);
}

/* ms until the next keepalive round or expiry, at most LEASE_WAIT_MAX_MS. */
static int lease_next_ms(struct ferry_engine *e)
{
	const struct lease *l = &e->lease;
	uint64_t now = ferry_now_ms(), next = now + LEASE_WAIT_MAX_MS;

	if (e->opts.keepalive_ms && l->next_keepalive_ms < next)
		next = l->next_keepalive_ms;
	if (e->opts.lease_ms && l->next_expire_ms < next)
		next = l->next_expire_ms;
	/* The name's renewal or its retry; none while frozen (a test's crash:
	 * named_keepalive moves next_ms no more, and a past one would spin). */
	if (e->named.published && !READ_ONCE(e->named.frozen) && e->named.next_ms < next)
		next = e->named.next_ms;
	return next > now ? (int)(next - now) : 0;
}

static void *lease_main(void *arg)
{
	struct ferry_engine *e = arg;
	struct lease *l = &e->lease;

	while (!load_acquire(l->stop)) { /* pairs with: store_release in lease_stop */
		struct pollfd p = { .fd = l->wake_fd, .events = POLLIN };

		lease_run(e);
		(void)poll(&p, 1, lease_next_ms(e));
	}
	return NULL;
}

int lease_start(struct ferry_engine *e)
{
	struct lease *l = &e->lease;
	int rc;

	l->wake_fd = fd_track(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
	if (l->wake_fd < 0) {
		rc = -errno;
		log_err("cannot make the lease thread's eventfd: %s", strerror(-rc));
		return rc;
	}
	rc = -pthread_create(&l->thread, NULL, lease_main, e);
	if (rc) {
		log_err("cannot start the lease thread: %s", strerror(-rc));
		fd_close(l->wake_fd);
		l->wake_fd = -1;
		return rc;
	}
	(void)pthread_setname_np(l->thread, "ferry-lease");
	l->started = 1;
	return 0;
}

void lease_stop(struct ferry_engine *e)
{
	struct lease *l = &e->lease;

	if (!l->started)
		return;
	store_release(l->stop, 1); /* pairs with: load_acquire in lease_main */
	eventfd_write(l->wake_fd, 1);
	pthread_join(l->thread, NULL);
	l->started = 0;
	fd_close(l->wake_fd);
	l->wake_fd = -1;
}
