/* SPDX-License-Identifier: MIT */
/*
 * Opening a segment (and refreshing it, and reconnecting its evicted
 * endpoints) without holding ctl_lock across a round trip, so that opens of
 * different peers proceed in parallel and a slow or dead peer delays only
 * its own open:
 *
 *   1. under the lock: wait while another open of the same address is in
 *      progress; an address open already is checked against its peer (one
 *      descriptor fetch, without the lock: the same incarnation keeps its
 *      handle, one more open counted, a restarted peer marks it stale);
 *      else reserve a free slot
 *      (SEG_OPENING: nobody else touches it, its handle is not out yet)
 *   2. without: fetch the descriptor
 *   3. under: choose the transport, create each core's endpoint (making room
 *      in its cache), reserve the tokens
 *   4. without: one CONNECT_REQ per endpoint, then our QPs' half
 *   5. under: have each core attach its endpoint, publish, SEG_OPEN
 *
 * Engine destroy sets e->destroying and cancels the client's calls: an
 * open in progress stops at its next step with -ECANCELED, undoes what it
 * made, and destroy waits for e->opening (opens under way, and those
 * waiting for one of their address) to drop to zero.  DISCONNECTs
 * decided under the lock (evictions, failures) go out after it is released.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ring/base/log.h"
#include "runtime/ctl/ctl.h"
#include "runtime/ctl/sock.h"
#include "runtime/engine/engine.h"

/* An endpoint of core i: made under the lock, connected without it,
 * published under it. */
struct ep_prep {
	struct ferry_ep *ep;  /* NULL: none on this core (no room, or published) */
	bool connected;       /* the peer holds its half */
	uint64_t token;       /* the peer names QP k token + k */
	struct seg_peer peer;
};

enum { OPEN_RESERVED = 0, OPEN_FOUND = 1 };

/* Core i's endpoint to s, not connected yet; ctl_lock held. */
static int ep_prepare(struct ferry_engine *e, struct ferry_seg *s, uint32_t slot, unsigned i,
		      struct ep_prep *p)
{
	struct ferry_ep *ep;
	int rc = seg_make_room(e, i);

	if (rc == 0)
		rc = ep_create(&e->cores[i]->tx[s->tx], e->opts.qps_per_ep, e->opts.wrs_per_qp, &ep);
	if (rc)
		return rc;
	ep->tx = s->tx;
	ep->seg_slot = slot;
	ep->seg_gen = s->gen;
	ep->remote_nic = s->peer_nics[i % s->n_peer_nics];
	ep->lkey_off = region_lkey_off(i, s->tx);
	ep->rail.published = &s->rail_paused[i];
	ep->cut_off = &s->rail_down[i];
	p->token = e->next_token + 1;
	e->next_token += ep->nqps;
	seg_peer_of(s, (uint16_t)ep->remote_nic, &p->peer);
	p->ep = ep;
	p->connected = false;
	return 0;
}

/* Undo ep_prepare (and the peer's half, if it was made). */
static void ep_unprepare(struct ferry_engine *e, unsigned i, struct ep_prep *p)
{
	if (!p->ep)
		return;
	if (p->connected)
		seg_disconnect_later(e, p->peer.address, p->token, p->ep->nqps);
	ep_destroy(&e->cores[i]->tx[p->ep->tx], p->ep);
	p->ep = NULL;
	p->connected = false;
}

static void unprepare_all(struct ferry_engine *e, struct ep_prep *pp)
{
	for (unsigned i = 0; i < e->ncores; i++)
		ep_unprepare(e, i, &pp[i]);
}

/*
 * Release ctl_lock and send the DISCONNECTs this open queued, unless
 * engine destroy began: it cancelled our client, so they would end
 * -ECANCELED unsent and the peer keep those QPs for its lease.  They stay
 * queued then; the destroy sends them (seg_disconnect_all) once its
 * client works again, after this open is out (e->opening).
 */
static void open_flush_unlock(struct ferry_engine *e)
{
	int destroying = e->destroying;

	pthread_mutex_unlock(&e->ctl_lock);
	if (!destroying)
		seg_disconnect_flush(e);
}

/* Have core i attach the endpoint, then publish it; ctl_lock held. */
static int ep_publish(struct ferry_engine *e, struct ferry_seg *s, uint32_t slot, unsigned i,
		      struct ep_prep *p)
{
	struct ferry_core *c = e->cores[i];
	struct core_cmd cmd = { .type = CMD_EP_ADD, .slot = slot, .ep = p->ep };
	struct ferry_ep *ep = p->ep;
	/* Another open may have filled the cache since ep_prepare made room. */
	int rc = seg_make_room(e, i);

	if (rc == 0)
		rc = core_command(c, &cmd);
	if (rc) {
		ep_unprepare(e, i, p);
		return rc;
	}
	for (unsigned k = 0; k < ep->nqps; k++)
		ep->peer_tokens[k] = p->token + k;
	p->ep = NULL;
	WRITE_ONCE(s->rail_down[i], 0);
	WRITE_ONCE(s->rail_paused[i], 0);
	/* Cannot fail: room was made above, under this same hold of ctl_lock.
	 * The core sees the endpoint whole (RCU publication). */
	(void)ep_table_add(&c->eps, ep);
	seg_ep_set(s, i, ep);
	store_sc(s->rail_gone[i], 0); /* submitters may pick the rail again */
	return 0;
}

/* One endpoint per local core where the cache has room; fails only when
 * no core could take one, or on any other error.  ctl_lock held. */
static int prepare_all(struct ferry_engine *e, struct ferry_seg *s, uint32_t slot,
		       struct ep_prep *pp)
{
	unsigned n = 0;

	for (unsigned i = 0; i < e->ncores; i++) {
		int rc = ep_prepare(e, s, slot, i, &pp[i]);

		if (rc && rc != -EBUSY) {
			unprepare_all(e, pp);
			return rc;
		}
		n += rc == 0;
	}
	if (n == 0) {
		log_err("segment %s: every core's endpoint cache (ep_cache %u) is full of endpoints "
			"in use", s->address, e->cores[0]->eps.cap);
		return -EBUSY;
	}
	return 0;
}

/*
 * The handshakes of every prepared endpoint, side by side (one round trip
 * for all cores; a peer that stops answering costs one timeout, not one
 * per core); each that worked is connected.  0, or the first core's
 * error.  No lock held.
 */
static int connect_all(struct ferry_engine *e, struct ep_prep *pp)
{
	struct seg_hs hs[FERRY_MAX_CORES] = { { 0 } };
	int rcs[FERRY_MAX_CORES], rc = 0;
	unsigned n = 0;

	for (unsigned i = 0; i < e->ncores; i++)
		if (pp[i].ep)
			hs[n++] = (struct seg_hs){ .core = i, .peer = &pp[i].peer,
						   .qps = pp[i].ep->qps, .nqps = pp[i].ep->nqps,
						   .token = pp[i].token };
	seg_handshake_many(e, hs, n, rcs, false);
	for (unsigned k = 0; k < n; k++) {
		pp[hs[k].core].connected = rcs[k] == 0;
		if (rcs[k] && !rc)
			rc = rcs[k];
	}
	return rc;
}

/* Publish every connected endpoint; ctl_lock held. */
static int publish_all(struct ferry_engine *e, struct ferry_seg *s, uint32_t slot,
		       struct ep_prep *pp)
{
	unsigned n = 0;

	for (unsigned i = 0; i < e->ncores; i++) {
		int rc;

		if (!pp[i].ep)
			continue;
		rc = ep_publish(e, s, slot, i, &pp[i]);
		if (rc && rc != -EBUSY)
			return rc;
		n += rc == 0;
	}
	return n ? 0 : -EBUSY;
}

/*
 * Steps 3 and 4 over the first transport that works (route.c): when ours
 * cannot reach the peer's address on one, its endpoints go and the next is
 * tried.  Called and returns without ctl_lock.
 */
static int open_connect(struct ferry_engine *e, struct ferry_seg *s, uint32_t slot,
			struct ep_prep *pp)
{
	unsigned next = 0;
	int rc;

	for (;;) {
		pthread_mutex_lock(&e->ctl_lock);
		rc = e->destroying ? -ECANCELED : seg_route_next(e, s, s->desc, &next);
		if (!rc)
			rc = prepare_all(e, s, slot, pp);
		pthread_mutex_unlock(&e->ctl_lock);
		if (!rc)
			rc = connect_all(e, pp);
		if (rc != -ENETUNREACH)
			return rc;
		pthread_mutex_lock(&e->ctl_lock);
		unprepare_all(e, pp);
		open_flush_unlock(e);
		log_warn("segment %s: %s does not reach the peer: trying the next transport",
			 s->address, s->transport);
	}
}

static struct ferry_seg *seg_find(struct ferry_engine *e, const char *address, uint32_t state,
				  uint32_t *slot)
{
	for (uint32_t i = 0; i < seg_slots(&e->segs); i++) {
		struct ferry_seg *s = seg_at(&e->segs, i);

		if (s->state == state && !READ_ONCE(s->stale) && strcmp(s->address, address) == 0) {
			*slot = i;
			return s;
		}
	}
	return NULL;
}

/* A descriptor fetched into a new allocation; 0 or -errno (*out NULL). */
static int fetch_desc(struct ferry_engine *e, const char *address, struct seg_desc **out)
{
	struct seg_desc *d = calloc(1, sizeof(*d)), *small;
	int rc = d ? ctl_fetch_desc(&e->client, address, SEG_CTL_TIMEOUT_MS, d) : -ENOMEM;

	if (rc) {
		free(d);
		d = NULL;
	} else {
		/* Kept per open segment (thousands): only the NICs the peer has,
		 * not WIRE_MAX_NICS of them (20 KiB).  Nobody reads past n_nics. */
		small = realloc(d, offsetof(struct seg_desc, nics) + d->n_nics * sizeof(d->nics[0]));
		d = small ? small : d;
	}
	*out = d;
	return rc;
}

static void desc_put(struct seg_desc *d)
{
	if (d)
		seg_desc_free(d);
	free(d);
}

/*
 * An open by name reached the engine at address: it must be the
 * incarnation the store names.  A mismatch means the store's record is
 * stale (a crashed engine whose lease has not run out, and the address
 * reused) or the engine there is not the one that published the name:
 * refused, never a connection to the wrong engine.
 */
static int want_check(const char *address, const struct seg_desc *d, const struct seg_want *want)
{
	if (!want || d->incarnation == want->incarnation)
		return 0;
	log_err("segment '%s': the metadata store says incarnation %016llx at %s, but the engine "
		"there is %016llx: refused (a stale record of an engine that died, or another "
		"engine on that address; try again once the record expires)", want->name,
		(unsigned long long)want->incarnation, address,
		(unsigned long long)d->incarnation);
	return -ESTALE;
}

/* Take a free slot for address: SEG_OPENING, rails healthy, none connected. */
static int slot_reserve(struct ferry_engine *e, const char *address, uint32_t *slot)
{
	struct ferry_seg *s;
	uint32_t i;
	int rc;

	for (i = 0; i < seg_slots(&e->segs) && seg_at(&e->segs, i)->state != SEG_FREE; i++)
		;
	if (i == seg_slots(&e->segs) && (rc = seg_table_grow(&e->segs)))
		return rc;
	s = seg_at(&e->segs, i);
	s->stale = 0;
	s->name[0] = '\0';
	s->name_order = 0;
	s->repairs_failed = 0;
	s->repair_said_ms = 0;
	s->repair_said_all = false;
	memset(s->rail_down, 0, sizeof(s->rail_down));
	memset(s->rail_paused, 0, sizeof(s->rail_paused));
	memset(s->rail_gone, 1, sizeof(s->rail_gone));
	snprintf(s->address, sizeof(s->address), "%s", address);
	store_sc(s->state, SEG_OPENING); /* read by seg_acquire: not open yet */
	e->opening++;
	*slot = i;
	return OPEN_RESERVED;
}

/* The open segment a reopen check fetched its descriptor for. */
struct reopen_check {
	uint32_t slot, gen;
	bool marked;                   /* the answer showed it restarted: marked stale */
};

/*
 * The descriptor c fetched still tells something about s, the address's
 * open segment now (NULL: none): it was fetched for s, or it marked the
 * one it was for stale (the newest answer there is: a new slot takes it).
 * Otherwise the segment it was for was closed or marked stale by another
 * open meanwhile, which may have opened s to a newer incarnation than the
 * answer's: taken for news about s, it would mark a live segment stale.
 * ctl_lock held.
 */
static bool check_still_valid(const struct reopen_check *c, const struct ferry_seg *s,
			      uint32_t slot)
{
	return s ? slot == c->slot && s->gen == c->gen : c->marked;
}

/*
 * Step 1, ctl_lock held (dropped around the reopen check's fetch): the
 * handle of the address open already (OPEN_FOUND), or a reserved slot
 * (OPEN_RESERVED; *fresh may hold the descriptor the check fetched).
 */
static int open_reserve(struct ferry_engine *e, const char *address, const struct seg_want *want,
			struct seg_desc **fresh, uint32_t *slot, ferry_seg_t *out)
{
	struct reopen_check chk = { 0 };
	struct ferry_seg *s;
	int rc;

	for (;;) {
		if (e->destroying)
			return -ECANCELED;
		if (seg_find(e, address, SEG_OPENING, slot)) {
			/* One open per address.  Counted: engine destroy frees
			 * the lock and condition variable once no open is under
			 * way, and we have yet to take the lock back. */
			e->opening++;
			pthread_cond_wait(&e->seg_cond, &e->ctl_lock);
			e->opening--;
			if (e->destroying) /* it waits for e->opening to drop */
				pthread_cond_broadcast(&e->seg_cond);
			continue;
		}
		s = seg_find(e, address, SEG_OPEN, slot);
		if (*fresh && !check_still_valid(&chk, s, *slot)) {
			desc_put(*fresh); /* ask again (or let the new slot's open ask) */
			*fresh = NULL;
		}
		if (!s)
			return slot_reserve(e, address, slot);
		if (!*fresh) {
			chk = (struct reopen_check){ .slot = *slot, .gen = s->gen };
			e->opening++; /* engine destroy waits for us */
			pthread_mutex_unlock(&e->ctl_lock);
			rc = fetch_desc(e, address, fresh);
			pthread_mutex_lock(&e->ctl_lock);
			e->opening--;
			pthread_cond_broadcast(&e->seg_cond);
			if (!rc)
				rc = want_check(address, *fresh, want);
			if (rc)
				return rc;
			continue; /* it may have been closed or reopened meanwhile */
		}
		if ((*fresh)->incarnation == s->desc->incarnation) {
			if (s->opens == UINT32_MAX)
				return -EOVERFLOW;
			s->opens++; /* each open is closed once (ferry_segment_close) */
			*out = seg_handle(s->gen, *slot);
			return OPEN_FOUND;
		}
		/* The peer restarted: its keys and QPs belong to a dead process. */
		seg_mark_stale(e, s, *slot);
		chk.marked = true;
	}
}

/* Undo a failed open of slot; ctl_lock held. */
static void open_abort(struct ferry_engine *e, struct ferry_seg *s, uint32_t slot,
		       struct ep_prep *pp)
{
	unprepare_all(e, pp);
	seg_remove_eps(e, s, slot);
	desc_put(s->desc);
	s->desc = NULL;
	s->address[0] = 0;
	store_sc(s->state, SEG_FREE);
}

/* Steps 2 to 5 for a reserved slot; returns with ctl_lock held. */
static int open_slot(struct ferry_engine *e, uint32_t slot, const struct seg_want *want,
		     struct seg_desc *fresh, struct ep_prep *pp, ferry_seg_t *out)
{
	struct ferry_seg *s = seg_at(&e->segs, slot);
	int rc = fresh ? 0 : fetch_desc(e, s->address, &fresh);

	if (!rc)
		rc = want_check(s->address, fresh, want); /* a fresh one passed it already */

	pthread_mutex_lock(&e->ctl_lock);
	if (!rc && e->destroying)
		rc = -ECANCELED;
	if (!rc) {
		s->desc = fresh;
		fresh = NULL;
		store_sc(s->gen, s->gen + 1); /* read by seg_lookup/seg_acquire */
	}
	pthread_mutex_unlock(&e->ctl_lock);
	desc_put(fresh);
	if (!rc)
		rc = open_connect(e, s, slot, pp);
	pthread_mutex_lock(&e->ctl_lock);
	if (!rc && e->destroying)
		rc = -ECANCELED;
	if (!rc)
		rc = publish_all(e, s, slot, pp);
	if (rc) {
		open_abort(e, s, slot, pp);
		return rc;
	}
	s->opens = 1;
	store_sc(s->state, SEG_OPEN); /* pairs with: seg_acquire, core_park */
	*out = seg_handle(s->gen, slot);
	return 0;
}

/*
 * The address as the segment table keys it, "a.b.c.d:port", however it
 * was spelt ("localhost:7000"): an address open already is found under
 * any spelling and gives its handle (ferry.h), where a second spelling
 * opened a second segment to the same engine.  -EINVAL for one that
 * connect would refuse.
 */
static int address_key(const char *address, char *key, size_t len)
{
	struct sockaddr_in sin;
	char ip[INET_ADDRSTRLEN];
	int rc = sock_resolve_peer(address, &sin);

	if (rc)
		return rc;
	if (!inet_ntop(AF_INET, &sin.sin_addr, ip, sizeof(ip)))
		return -EINVAL;
	snprintf(key, len, "%s:%u", ip, ntohs(sin.sin_port));
	return 0;
}

int seg_open_address(struct ferry_engine *e, const char *spelt, const struct seg_want *want,
		     ferry_seg_t *out)
{
	char address[sizeof(((struct ferry_seg *)0)->address)];
	struct seg_desc *fresh = NULL;
	struct ep_prep *pp;
	uint32_t slot;
	int rc = address_key(spelt, address, sizeof(address));

	if (rc) {
		log_err("segment %s: not an address (a.b.c.d:port or localhost:port)", spelt);
		return rc;
	}
	pp = calloc(FERRY_MAX_CORES, sizeof(*pp));
	if (!pp)
		return -ENOMEM;
	pthread_mutex_lock(&e->ctl_lock);
	rc = open_reserve(e, address, want, &fresh, &slot, out);
	pthread_mutex_unlock(&e->ctl_lock);
	if (rc == OPEN_RESERVED) {
		rc = open_slot(e, slot, want, fresh, pp, out); /* takes fresh */
		fresh = NULL;
		open_flush_unlock(e);
		/* The last touch of e: engine destroy may go on once we are out. */
		pthread_mutex_lock(&e->ctl_lock);
		e->opening--;
		pthread_cond_broadcast(&e->seg_cond);
		pthread_mutex_unlock(&e->ctl_lock);
	}
	desc_put(fresh);
	free(pp);
	return rc < 0 ? rc : 0;
}

int ferry_segment_open(struct ferry_engine *e, const char *address, ferry_seg_t *out)
{
	if (!e || !address || !out)
		return -EINVAL;
	if (engine_forked(e))
		return -EOWNERDEAD;
	if (strlen(address) >= sizeof(((struct ferry_seg *)0)->address))
		return -EINVAL;
	/* "host:port" is an address; anything else a name (names have no colon). */
	if (!strchr(address, ':'))
		return seg_open_named(e, address, out);
	return seg_open_address(e, address, NULL, out);
}

/* A reconnect between its two halves (seg_reconnect_begin/_end). */
struct seg_reconn {
	struct ferry_seg *s;
	uint32_t slot, gen;
	int rc;                        /* ep_prepare's, when nothing is connected */
	uint64_t cores;                /* the cores it tried (no endpoint at begin) */
	int err[FERRY_MAX_CORES];      /* each one's result (seg_reconnect_end) */
	unsigned n;                    /* handshakes in hs */
	struct seg_hs hs[FERRY_MAX_CORES];
	struct ep_prep pp[FERRY_MAX_CORES];
};

struct seg_reconn *seg_reconnect_begin(struct ferry_engine *e, struct ferry_seg *s,
				       uint32_t slot, uint32_t gen)
{
	struct seg_reconn *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	*r = (struct seg_reconn){ .s = s, .slot = slot, .gen = gen, .rc = -EHOSTDOWN };
	for (unsigned i = 0; i < e->ncores; i++)
		r->err[i] = -EHOSTDOWN;
	pthread_mutex_lock(&e->ctl_lock);
	if (s->state != SEG_OPEN || s->gen != gen || e->destroying) {
		r->cores = ~0ull; /* the verdict (-EHOSTDOWN) is every core's */
	} else if (READ_ONCE(s->stale)) {
		/* Its rails stay EP_STALE: an endpoint to the engine at its
		 * address (alive, if the name moved) would take one out. */
		r->cores = ~0ull;
		r->rc = -ESTALE;
		for (unsigned i = 0; i < e->ncores; i++)
			r->err[i] = -ESTALE;
	} else {
		for (unsigned i = 0; i < e->ncores; i++)
			if (!s->eps[i]) {
				r->cores |= 1ull << i;
				r->rc = ep_prepare(e, s, slot, i, &r->pp[i]);
				r->err[i] = r->rc;
			}
	}
	pthread_mutex_unlock(&e->ctl_lock);
	for (unsigned i = 0; i < e->ncores; i++)
		if (r->pp[i].ep)
			r->hs[r->n++] = (struct seg_hs){ .core = i, .peer = &r->pp[i].peer,
							 .qps = r->pp[i].ep->qps,
							 .nqps = r->pp[i].ep->nqps,
							 .token = r->pp[i].token };
	return r;
}

const struct seg_hs *seg_reconnect_hs(const struct seg_reconn *r, unsigned *n)
{
	*n = r->n;
	return r->hs;
}

uint64_t seg_reconnect_cores(const struct seg_reconn *r)
{
	return r->cores;
}

int seg_reconnect_end(struct ferry_engine *e, struct seg_reconn *r, const int *rcs, int *errs)
{
	struct ferry_seg *s = r->s;
	int rc = r->rc, added = 0;
	bool live, stale = false;

	if (r->n) /* the handshakes say how it went: 0, or the first error */
		rc = 0;
	for (unsigned k = 0; k < r->n; k++) {
		r->pp[r->hs[k].core].connected = rcs[k] == 0;
		r->err[r->hs[k].core] = rcs[k];
		if (rcs[k] && !rc)
			rc = rcs[k];
		stale |= rcs[k] == -ESTALE;
	}
	pthread_mutex_lock(&e->ctl_lock);
	/* Closed, reopened or destroyed meanwhile: what we made goes. */
	live = s->state == SEG_OPEN && s->gen == r->gen && !e->destroying;
	/* Gone stale meanwhile (another open, or a repair, saw why): what
	 * connected is not published, as if the handshake had said so. */
	stale |= live && READ_ONCE(s->stale);
	/* The peer restarted (its keys are gone): marked as a repair's refusal
	 * marks it, so its requests end -ESTALE at once instead of each
	 * parking for a handshake of its own (test_miss_on_restarted_peer). */
	if (live && stale)
		seg_mark_stale(e, s, r->slot);
	for (unsigned i = 0; i < e->ncores; i++) {
		if (!r->pp[i].ep)
			continue;
		if (live && !stale && r->pp[i].connected && !s->eps[i]) {
			rc = ep_publish(e, s, r->slot, i, &r->pp[i]);
			added += rc == 0;
			r->err[i] = rc;
		} else if (r->pp[i].connected) {
			/* Not ours to publish: stale, closed, or made meanwhile. */
			r->err[i] = stale ? -ESTALE : live ? 0 : -EHOSTDOWN;
		}
		ep_unprepare(e, i, &r->pp[i]);
	}
	pthread_mutex_unlock(&e->ctl_lock);
	if (stale)
		rc = -ESTALE; /* nothing was published */
	if (errs)
		memcpy(errs, r->err, e->ncores * sizeof(*errs));
	free(r);
	return added ? added : rc;
}


/* The same regions, rights and keys in both (of the same incarnation). */
static bool desc_same(const struct seg_desc *a, const struct seg_desc *b)
{
	if (a->n_regions != b->n_regions)
		return false;
	for (uint32_t i = 0; i < a->n_regions; i++) {
		const struct seg_region *x = &a->regions[i], *y = &b->regions[i];

		if (x->addr != y->addr || x->len != y->len || x->access != y->access ||
		    memcmp(x->rkey, y->rkey, a->n_nics * sizeof(x->rkey[0])))
			return false;
	}
	return true;
}

/* The refreshed descriptor d of s (generation gen), if still wanted: 0
 * installed, 1 nothing new (d not kept); ctl_lock held. */
static int refresh_install(struct ferry_engine *e, struct ferry_seg *s, uint32_t slot,
			   uint32_t gen, struct seg_desc *d)
{
	if (s->state != SEG_OPEN || s->gen != gen)
		return -ENOENT;
	/* Stale for good (its name may have moved while the engine at its
	 * address lives on, answering with the same incarnation): a new
	 * descriptor would not bring it back, and 0 would say it did. */
	if (READ_ONCE(s->stale))
		return -ESTALE;
	/* A restarted peer (new incarnation) needs new endpoints: open it again. */
	if (d->incarnation != s->desc->incarnation || d->n_nics != s->desc->n_nics) {
		seg_mark_stale(e, s, slot);
		return -ESTALE;
	}
	/* Nothing to swap: kept, it would take one of the few places for
	 * replaced descriptors, and a caller refreshing until the peer
	 * registers its memory would run out of them (-ENOSPC for good). */
	if (desc_same(d, s->desc))
		return 1;
	if (s->n_old == ARRAY_SIZE(s->old_descs))
		return -ENOSPC;
	/* Requests in flight may still point into the old regions. */
	s->old_descs[s->n_old++] = s->desc;
	store_release(s->desc, d); /* pairs with: load_acquire in rq_prepare */
	return 0;
}

int ferry_segment_refresh(struct ferry_engine *e, ferry_seg_t seg)
{
	char address[sizeof(((struct ferry_seg *)0)->address)];
	struct seg_desc *d = NULL;
	struct ferry_seg *s;
	uint32_t slot, gen = 0;
	int rc = -ENOENT;

	if (!e)
		return -EINVAL;
	if (engine_forked(e))
		return -EOWNERDEAD;
	pthread_mutex_lock(&e->ctl_lock);
	s = seg_lookup(e, seg, &slot);
	if (s && s->state == SEG_OPEN) {
		rc = 0;
		gen = s->gen;
		memcpy(address, s->address, sizeof(address));
	}
	pthread_mutex_unlock(&e->ctl_lock);
	if (!rc)
		rc = fetch_desc(e, address, &d);
	if (!rc) {
		pthread_mutex_lock(&e->ctl_lock);
		rc = refresh_install(e, s, slot, gen, d);
		pthread_mutex_unlock(&e->ctl_lock);
	}
	if (rc)
		desc_put(d);
	return rc < 0 ? rc : 0;
}
