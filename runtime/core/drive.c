/* SPDX-License-Identifier: MIT */
/*
 * FERRY_IDLE_CALLER: the application's threads run the cores' loop passes
 * while they wait (ferry_batch_wait, ferry_progress), as UCX's
 * ucp_worker_progress does.  A latency-bound caller then needs no second
 * runnable thread per process: on a small machine (or a VM with two
 * vCPUs, where rxe also needs the CPU) the core's thread waking and
 * spinning beside the application costs more than the transfer.
 *
 * Who runs a core's pass is one word, driver: FREE, THREAD (the core's
 * own thread) or CALLER, taken with an acquire CAS and given back with a
 * release, so everything a pass touches moves from one driver to the next
 * as it would between two passes of one thread.  A caller that finds the
 * thread holding the core (asleep, say) marks it WANTED and kicks it; the
 * thread lets go after that pass and naps; asleep in poll(2) it holds
 * nothing, so a cold request is run by its caller at once.  The thread naps while callers
 * drive (it is woken by nothing but its nap's end or a stop) and takes the
 * core back CALLER_FALLBACK_MS after the last caller pass, so a request
 * nobody waits for, a control command or a peer's frame still moves.
 *
 * Under FERRY_IDLE_ADAPTIVE the thread holds the core while awake and lets
 * go only asleep with nothing in flight: a thread waiting in
 * ferry_batch_wait runs the pass of a cold request itself instead of
 * waiting for the sleeper's wake-up (core_drive_asleep), and never asks
 * an awake thread for the core; the woken thread asks for it back and the
 * waiter hands it over after its pass (core_caller_lets_go).
 */
/* Inline urcu fast paths, except under TSan (see core.c). */
#ifndef __SANITIZE_THREAD__
#define _LGPL_SOURCE
#endif
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <urcu/urcu-qsbr.h>
#ifdef __SANITIZE_THREAD__
#include <urcu/static/urcu-qsbr.h> /* the reader's registered flag (caller_rcu_foreign) */
#endif

#include "ring/base/clock.h"
#include "ring/base/counters.h"
#include "ring/base/log.h"
#include "runtime/engine/engine.h"

enum { DRIVER_FREE = 0, DRIVER_THREAD = 1, DRIVER_CALLER = 2, DRIVER_WANTED = 4 };

/* A pass's time, by whoever drove it (the core's thread or a caller). */
void core_account_time(struct ferry_core *c, uint64_t t0, uint64_t t1, uint32_t work)
{
	if (work)
		stat_add(&c->ctr, busy_ticks, t1 - t0);
	else
		stat_add(&c->ctr, idle_ticks, t1 - t0);
	stat_add(&c->ctr, loops, 1);
}

/* ---- the core's thread ---- */

/* Asleep for up to CALLER_FALLBACK_MS, offline for RCU; a stop wakes it. */
static void core_nap(struct ferry_core *c)
{
	struct pollfd pfd = { .fd = c->wake_fd, .events = POLLIN };
	eventfd_t v;

	urcu_qsbr_thread_offline();
	poll(&pfd, 1, CALLER_FALLBACK_MS);
	urcu_qsbr_thread_online();
	eventfd_read(c->wake_fd, &v); /* non-blocking: EAGAIN when nobody wrote */
}

bool core_thread_drives(struct ferry_core *c)
{
	uint32_t v = DRIVER_FREE;

	if (c->handed_over ||
	    ferry_tsc() - READ_ONCE(c->driven_at) < c->caller_fallback_ticks) {
		c->handed_over = false;
		core_nap(c);
		return false;
	}
	/* pairs with: store_release in core_caller_lets_go (a caller's pass ended) */
	if (cas_acquire(c->driver, &v, DRIVER_THREAD))
		return true;
	core_nap(c); /* a caller is running a pass */
	return false;
}

void core_thread_lets_go(struct ferry_core *c)
{
	/* pairs with: cas_acquire in core_drive (the next caller pass) */
	if (xchg_release(c->driver, DRIVER_FREE) & DRIVER_WANTED)
		c->handed_over = true;
}

/*
 * Wait for an application pass to end and keep c.  Under adaptive the
 * woken thread comes first: it marks the caller's word WANTED, and the
 * caller hands c over at the end of its pass (core_caller_lets_go) instead of
 * freeing it -- a waiter that re-took a freed core at once would otherwise
 * run a whole transfer while the thread spins here.
 */
void core_thread_takes_back(struct ferry_core *c)
{
	uint32_t v = DRIVER_FREE;

	/* pairs with: store_release/cas_release in core_caller_lets_go (freed) */
	while (!cas_acquire(c->driver, &v, DRIVER_THREAD)) {
		/* pairs with: store_release of DRIVER_THREAD in core_caller_lets_go (handed to us) */
		if (v == DRIVER_THREAD && load_acquire(c->driver) == DRIVER_THREAD)
			return; /* handed over */
		if (c->waiters_drive && v == DRIVER_CALLER)
			cas_relaxed(c->driver, &v, DRIVER_CALLER | DRIVER_WANTED);
		v = DRIVER_FREE;
		sched_yield(); /* a caller's pass is short */
	}
}

bool core_thread_lets_go_asleep(const struct ferry_core *c, bool idle)
{
	return c->caller_mode || (idle && c->waiters_drive);
}

bool core_thread_sleeps(struct ferry_core *c)
{
	/* pairs with: cas_acquire in core_drive, core_drive_asleep (a pass while we sleep) */
	if (xchg_release(c->driver, DRIVER_FREE) & DRIVER_WANTED) {
		core_thread_takes_back(c);
		c->handed_over = true;
		return false;
	}
	return true;
}

void core_thread_wakes(struct ferry_core *c)
{
	core_thread_takes_back(c);
}

/* ---- application threads ---- */

/*
 * A thread that runs passes reads endpoints under RCU: it registers with
 * liburcu-qsbr on its first pass (a lock) and is online only during a
 * pass, so it never holds up a grace period while it does something else.
 * Under caller mode it stays registered until it exits; under adaptive
 * only until its ferry_batch_wait returns (core_waiter_done: a cold wait
 * pays the registry lock twice, and outside ferry the thread is the
 * application's alone).  A thread the application registered with
 * liburcu-qsbr itself never drives: registered twice it would corrupt
 * liburcu's list, and our online/offline would end the application's
 * read-side sections.
 */
static pthread_key_t caller_key;
static pthread_once_t caller_once = PTHREAD_ONCE_INIT;
static __thread bool caller_registered;
static __thread bool caller_stays; /* registered for the thread's life (caller mode) */

static void caller_exit(void *arg)
{
	(void)arg;
	urcu_qsbr_unregister_thread();
}

static void caller_key_create(void)
{
	(void)pthread_key_create(&caller_key, caller_exit);
}

/* Online for a pass: registered once per thread under caller mode (stays),
 * for the rest of one ferry_batch_wait under adaptive (core_waiter_done). */
static void caller_online(bool stays)
{
	if (likely(caller_registered))
		urcu_qsbr_thread_online();
	else
		urcu_qsbr_register_thread(); /* leaves the thread online */
	caller_registered = true;
	if (unlikely(stays && !caller_stays)) {
		pthread_once(&caller_once, caller_key_create);
		(void)pthread_setspecific(caller_key, (void *)1);
		caller_stays = true;
	}
}

void core_waiter_done(void)
{
	if (likely(!caller_registered) || caller_stays)
		return;
	urcu_qsbr_unregister_thread(); /* offline already: after its last pass */
	caller_registered = false;
}

/* Registered with liburcu-qsbr, and not by us (its reader's own flag). */
static bool caller_rcu_foreign(void)
{
	return !caller_registered && URCU_TLS(urcu_qsbr_reader).registered;
}

/* The end of a caller's pass: c is free again, or the thread's when it
 * asked for it back (adaptive: DRIVER_WANTED on our word). */
static void core_caller_lets_go(struct ferry_core *c)
{
	uint32_t held = DRIVER_CALLER;

	if (!c->waiters_drive) {
		/* pairs with: cas_acquire in core_drive, core_thread_drives/_takes_back */
		store_release(c->driver, DRIVER_FREE);
		return;
	}
	/* pairs with: cas_acquire in core_drive_asleep, core_thread_takes_back */
	if (cas_release(c->driver, &held, DRIVER_FREE))
		return;
	/* The thread asked for c back (DRIVER_CALLER | DRIVER_WANTED): hand it over.
	 * pairs with: load_acquire in core_thread_takes_back */
	store_release(c->driver, DRIVER_THREAD);
}

/* A caller's pass of c, which it holds (cas_acquire in its callers). */
static uint32_t core_caller_pass(struct ferry_core *c)
{
	struct log_box *own;
	uint32_t work;
	uint64_t t0;

	caller_online(c->caller_mode);
	t0 = ferry_tsc();
	own = log_defer(&c->logbox); /* the pass logs as the core's thread would */
	work = core_run_pass(c, t0);
	log_defer(own);
	if (unlikely(log_box_pending(&c->logbox)))
		repair_kick(c->e); /* it logged: out now, not at the repair thread's next round */
	stat_add(&c->ctr, caller_passes, 1);
	WRITE_ONCE(c->driven_at, t0);
	core_account_time(c, t0, ferry_tsc(), work);
	core_caller_lets_go(c);
	urcu_qsbr_thread_offline();
	return work;
}

uint32_t core_drive(struct ferry_core *c)
{
	uint32_t v = DRIVER_FREE;

	/* pairs with: xchg_release in core_thread_lets_go, store_release in core_caller_lets_go */
	if (caller_rcu_foreign() || !cas_acquire(c->driver, &v, DRIVER_CALLER)) {
		if (v == DRIVER_THREAD)
			cas_relaxed(c->driver, &v, DRIVER_THREAD | DRIVER_WANTED);
		core_kick(c); /* it may sleep holding the core */
		return 0;
	}
	return core_caller_pass(c);
}

uint32_t core_drive_asleep(struct ferry_core *c)
{
	uint32_t v = DRIVER_FREE;

	/* Plain reads first: an awake core's line stays shared, not bounced; and
	 * a sleeper nobody kicked (core_kick clears sleeping) has nothing for us. */
	if (READ_ONCE(c->driver) != DRIVER_FREE || READ_ONCE(c->sleeping) || caller_rcu_foreign())
		return 0;
	/* pairs with: xchg_release in core_thread_sleeps, cas_release in core_caller_lets_go */
	if (!cas_acquire(c->driver, &v, DRIVER_CALLER))
		return 0;
	/* The core may have woken and slept again between the reads and the CAS:
	 * after the acquire, sleeping is this sleep's, set when nobody kicked. */
	if (READ_ONCE(c->sleeping)) {
		core_caller_lets_go(c);
		return 0;
	}
	return core_caller_pass(c);
}

int ferry_progress(struct ferry_engine *e)
{
	uint64_t work = 0;

	if (!e)
		return -EINVAL;
	if (engine_forked(e))
		return -EOWNERDEAD;
	if (e->opts.idle != FERRY_IDLE_CALLER)
		return 0;
	for (unsigned i = 0; i < e->ncores; i++)
		work += core_drive(e->cores[i]);
	return work > INT_MAX ? INT_MAX : (int)work;
}
