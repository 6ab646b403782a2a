/* SPDX-License-Identifier: MIT */
/*
 * Engine lifecycle: parse the options, pick a NIC per core, start the cores,
 * the control server and the repair thread; and the reverse.  Control path:
 * it may block, and none of it runs on a core.
 */
#include <errno.h>
#include <numa.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "ring/base/clock.h"
#include "ring/base/log.h"
#include "runtime/ctl/passive.h"
#include "runtime/engine/engine.h"

/* ---- engine ---- */

static int engine_parse(struct ferry_engine *e, const struct ferry_opts *caller, unsigned *cpus)
{
	struct ferry_opts *o = &e->opts;
	char err[256];
	int rc;

	if (ferry_opts_complete(o, caller)) {
		log_err("options not initialised: call ferry_opts_default() first (opts_size %zu)",
			caller->opts_size);
		return -EINVAL;
	}
	if (ferry_opts_check(o, err, sizeof(err)) < 0) {
		log_err("%s", err);
		return -EINVAL;
	}
	rc = ferry_parse_cores(o->cores, cpus, FERRY_MAX_CORES, &e->ncores, 1, err, sizeof(err));
	if (rc < 0) {
		log_err("%s", err);
		return rc;
	}
	if (o->listen && strlen(o->listen) >= sizeof(e->listen_buf)) {
		log_err("listen address too long: '%s'", o->listen);
		return -EINVAL;
	}
	e->nics_buf = strdup(o->nics);
	if (!e->nics_buf) {
		log_err("out of memory for a copy of the nics option");
		return -ENOMEM;
	}
	e->opts.nics = e->nics_buf;
	/* the caller's strings need not outlive this call */
	if (o->metadata && strlen(o->metadata) >= sizeof(e->metadata_buf)) {
		log_err("metadata '%s': too long (at most %zu characters)", o->metadata,
			sizeof(e->metadata_buf) - 1);
		return -EINVAL;
	}
	if (o->name) {
		strcpy(e->name_buf, o->name); /* checked: at most FERRY_NAME_MAX */
		e->opts.name = e->name_buf;
	}
	snprintf(e->metadata_buf, sizeof(e->metadata_buf), "%s", o->metadata ? o->metadata : "p2p");
	e->opts.metadata = e->metadata_buf;
	e->opts.cores = NULL;
	/* The address asked for (the bound one, port and all, is in e->ctl). */
	snprintf(e->listen_buf, sizeof(e->listen_buf), "%s", o->listen ? o->listen : "127.0.0.1:0");
	e->opts.listen = e->listen_buf;
	return 0;
}

static void engine_print_map(const struct ferry_engine *e)
{
	char what[160];

	for (unsigned i = 0; i < e->ncores; i++) {
		const struct ferry_core *c = e->cores[i];

		for (unsigned t = 0; t < c->ntx; t++) {
			c->tx[t].prov->describe(c->tx[t].nic, what, sizeof(what));
			log_info("core %u: cpu %u (NUMA %d) -> %s", i, c->cpu, c->numa, what);
		}
	}
}

/*
 * The cluster key, when secret_file is set: the server demands it of every
 * peer, the client proves it to every peer.  A key that cannot be read, is
 * too short or is readable by others stops the engine here, with the
 * reason.
 */
static int engine_auth(struct ferry_engine *e)
{
	const char *path = e->opts.secret_file;
	struct auth_key key;
	char err[320];
	int rc;

	if (!path)
		return ctl_client_init(&e->client, NULL);
	rc = ctl_auth_load_key(path, &key, err, sizeof(err));
	if (rc) {
		log_err("%s", err);
		return rc;
	}
	ctl_set_auth(&e->ctl, &key);
	rc = ctl_client_init(&e->client, &key);
	/* The data connections a provider makes itself (tcp) prove it too. */
	for (unsigned i = 0; rc == 0 && i < e->ncores; i++)
		for (unsigned t = 0; rc == 0 && t < e->ntx; t++) {
			struct qctx *q = &e->cores[i]->tx[t];

			if (q->prov->set_key)
				rc = q->prov->set_key(q->nic, key.k, sizeof(key.k));
		}
	auth_wipe(&key, sizeof(key));
	if (!rc && e->opts.verbose)
		log_info("control plane: peers must prove they hold the key of %s", path);
	return rc;
}

/*
 * The steps name what else fails; an allocation deep in one (an endpoint
 * table's, a provider's CQ, the repair thread's call slots) returns
 * -ENOMEM without a word, so the create says which step ran out.
 */
static int oom_step(const char *step, int rc)
{
	if (rc == -ENOMEM)
		log_err("out of memory while making %s", step);
	return rc;
}

static int engine_start(struct ferry_engine *e, const unsigned *cpus, const char *listen)
{
	char names[FERRY_MAX_CORES][CORE_MAX_TX][64];
	const char *mine[CORE_MAX_TX];
	int rc;

	rc = engine_pick_nics(e->opts.nics, cpus, e->ncores, names, &e->ntx);
	for (unsigned i = 0; rc == 0 && i < e->ncores; i++) {
		for (unsigned t = 0; t < e->ntx; t++)
			mine[t] = names[i][t];
		rc = core_create(e, i, cpus[i], mine, e->ntx, &e->cores[i]);
		oom_step("a core", rc);
	}
	if (rc)
		return rc;
	rc = handover_init(e);
	if (rc)
		return rc;
	if (e->opts.verbose)
		engine_print_map(e);
	ctl_set_ep_ops(&e->ctl, passive_connect, passive_disconnect);
	ctl_set_keepalive(&e->ctl, passive_keepalive);
	notify_init(e, e->knobs.notif_queue);
	rc = engine_auth(e);
	if (rc)
		return rc;
	rc = ctl_start(&e->ctl, listen, engine_describe, e);
	if (rc) {
		/* Not "cannot listen": an epoll or thread that failed ends here too. */
		log_err("control server on %s not started: %s", listen ? listen : "(default)",
			strerror(-rc));
		return rc;
	}
	for (unsigned i = 0; i < e->ncores; i++) {
		rc = core_start(e->cores[i]);
		if (rc)
			return rc;
	}
	rc = notify_start(e);
	if (rc)
		return rc;
	/* Ready to serve: now peers may find us by name. */
	rc = named_start(e, e->knobs.meta_ttl_ms);
	if (rc)
		return rc;
	rc = repair_start(e);
	if (rc)
		return oom_step("the repair thread", rc);
	return lease_start(e);
}

int ferry_engine_create_knobs(const struct ferry_opts *o, const struct ferry_knobs *k,
			      struct ferry_engine **out)
{
	unsigned cpus[FERRY_MAX_CORES];
	struct ferry_engine *e;
	int rc;

	if (!o || !out)
		return -EINVAL;
	e = calloc(1, sizeof(*e));
	if (!e) {
		log_err("out of memory for the engine (%zu bytes)", sizeof(*e));
		return -ENOMEM;
	}
	rc = engine_fork_add(e); /* before it opens an fd or starts a thread */
	if (rc) {
		free(e);
		return rc;
	}
	if (k)
		e->knobs = *k;
	e->reaper.grace = &e->tsan_gp;
	pthread_mutex_init(&e->ctl_lock, NULL);
	pthread_cond_init(&e->seg_cond, NULL);
	pthread_mutex_init(&e->disc_lock, NULL);
	TAILQ_INIT(&e->disc_items);
	pthread_mutex_init(&e->passive_lock, NULL);
	e->client.stop_fd = -1; /* ctl_client_fini is a no-op until engine_auth */
	e->notify.wake_fd = -1; /* notify_close_bell is a no-op until notify_start */
	pthread_rwlock_init(&e->regions_lock, NULL);
	/* A new incarnation per engine: peers can tell a restarted process. */
	if (getrandom(&e->incarnation, sizeof(e->incarnation), 0) != sizeof(e->incarnation))
		e->incarnation = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)e;
	if (!e->incarnation) /* 0 stands for "any" in a NOTIFY (wire.h) */
		e->incarnation = 1;
	ferry_tsc_hz();
	rc = seg_table_init(&e->segs);
	if (rc == 0)
		rc = engine_parse(e, o, cpus);
	if (rc == 0)
		rc = engine_start(e, cpus, o->listen);
	if (rc) {
		ferry_engine_destroy(e);
		return rc;
	}
	*out = e;
	return 0;
}

int ferry_engine_create(const struct ferry_opts *o, struct ferry_engine **out)
{
	return ferry_engine_create_knobs(o, NULL, out);
}

/*
 * Opens in progress on other threads stop at their next step: their round
 * trips are cancelled, and we wait until each has undone what it made.
 * The repair thread and the notifier's threads stop too (their calls
 * cancelled likewise); then the client works again for the DISCONNECTs of
 * what is still open.
 */
static void engine_stop_opens(struct ferry_engine *e)
{
	pthread_mutex_lock(&e->ctl_lock);
	e->destroying = 1;
	ctl_client_cancel(&e->client);
	while (e->opening)
		pthread_cond_wait(&e->seg_cond, &e->ctl_lock);
	pthread_mutex_unlock(&e->ctl_lock);
	repair_stop(e);
	lease_stop(e); /* a keepalive round under way ends at once: the client is cancelled */
	/* While the client stays cancelled: a notification send that began
	 * after the cancel ends at once instead of waiting out a mute peer. */
	notify_stop_end(e);
	ctl_client_resume(&e->client);
}

void ferry_engine_destroy(struct ferry_engine *e)
{
	if (!e)
		return;
	/* A forked child's copy: its threads are not here to join and its
	 * peers belong to the parent, so it is left as it is -- its pages
	 * stay shared with the parent's (copy-on-write) until written, and
	 * freeing would walk lists and locks a parent thread may have held
	 * mid-change at the fork.  Its fds were closed at the fork. */
	if (engine_forked(e))
		return;
	notify_stop_begin(e); /* notifications not yet sent end -ECANCELED */
	engine_stop_opens(e); /* stops the repair and notifier threads too (sends cancelled) */
	named_stop(e); /* peers stop finding us by name first */
	seg_disconnect_all(e);
	ctl_stop(&e->ctl);
	notify_free_queue(e);
	/* Cores fail what is queued, flush what is posted, free their eps:
	 * all at once (each may wait up to 2 s on a dead device). */
	for (unsigned i = 0; i < e->ncores; i++)
		if (e->cores[i])
			core_stop_begin(e->cores[i]);
	for (unsigned i = 0; i < e->ncores; i++)
		if (e->cores[i])
			core_stop(e->cores[i]);
	/* A core still running handed slices to one stopped before it (after
	 * its drain): all threads are gone now, end them here. */
	for (unsigned i = 0; i < e->ncores; i++)
		if (e->cores[i] && e->cores[i]->xfer_in)
			core_drain_xfer_at_stop(e->cores[i]);
	notify_close_bell(e); /* no core rings it any more */
	passive_destroy_all(e);
	for (uint32_t s = 0; s < seg_slots(&e->segs); s++)
		seg_release(seg_at(&e->segs, s));
	mem_release_all(e);
	for (unsigned i = 0; i < e->ncores; i++)
		core_destroy(e->cores[i]);
	for (unsigned i = 0; i < FERRY_MAX_PORTS; i++)
		if (e->ports[i]) /* its thread never destroyed it: no core reads it now */
			port_free(e->ports[i]);
	reap_wait(&e->reaper); /* endpoints queued for call_rcu are freed */
	seg_disconnect_flush_all(e);
	ctl_client_fini(&e->client);
	ctl_set_auth(&e->ctl, NULL); /* wipes the server's copy of the key */
	pthread_rwlock_destroy(&e->regions_lock);
	pthread_mutex_destroy(&e->passive_lock);
	pthread_mutex_destroy(&e->disc_lock);
	pthread_cond_destroy(&e->seg_cond);
	pthread_mutex_destroy(&e->ctl_lock);
	seg_table_free(&e->segs);
	engine_fork_del(e);
	free(e->nics_buf);
	free(e);
}

const char *ferry_engine_address(const struct ferry_engine *e)
{
	return e ? e->ctl.address : NULL;
}

unsigned ferry_engine_cores(const struct ferry_engine *e)
{
	return e ? e->ncores : 0;
}

const char *ferry_core_nic(const struct ferry_engine *e, unsigned core)
{
	return e && core < e->ncores ? e->cores[core]->nic_name : NULL;
}

struct nic *ferry_engine_nic(struct ferry_engine *e, unsigned core)
{
	return core < e->ncores ? e->cores[core]->tx[0].nic : NULL;
}


/*
 * The application's sink, called through the base logger's signature.  Two
 * slots, used in turn: log_set_sink returns only once nobody calls the
 * slot it replaced, so that slot is free for the next ferry_log_set.
 */
struct user_sink {
	ferry_log_fn fn;
	void *arg;
};

static struct user_sink user_sinks[2];
static unsigned user_next;
static pthread_mutex_t user_lock = PTHREAD_MUTEX_INITIALIZER;

static void user_sink_call(void *p, int level, const char *msg)
{
	const struct user_sink *u = p;

	u->fn(u->arg, (enum ferry_log_level)level, msg);
}

void engine_log_fork_child(void)
{
	static const pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;

	/* A parent thread inside ferry_log_set at the fork held it; no thread
	 * of the child does.  A plain copy: async-signal-safe. */
	memcpy(&user_lock, &fresh, sizeof(user_lock));
	log_fork_child();
}

void ferry_log_set(ferry_log_fn fn, void *arg)
{
	struct user_sink *u;

	_Static_assert((int)FERRY_LOG_ERROR == LOG_ERROR && (int)FERRY_LOG_WARN == LOG_WARN &&
		       (int)FERRY_LOG_INFO == LOG_INFO && (int)FERRY_LOG_DEBUG == LOG_DEBUG,
		       "one set of levels");
	pthread_mutex_lock(&user_lock);
	if (!fn) {
		log_set_sink(NULL, NULL);
	} else {
		u = &user_sinks[user_next];
		u->fn = fn;
		u->arg = arg;
		log_set_sink(user_sink_call, u);
		user_next ^= 1;
	}
	pthread_mutex_unlock(&user_lock);
}
