/* SPDX-License-Identifier: MIT */
#include "ring/base/log.h"

#include "ring/base/atomics.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

_Static_assert((LOG_BOX_SLOTS & (LOG_BOX_SLOTS - 1)) == 0, "index wraps with a mask");

static void stderr_sink(void *arg, int level, const char *msg)
{
	(void)arg;
	(void)level;
	fprintf(stderr, "ferry: %s\n", msg);
}

/*
 * The sink is called under the read lock, so once log_set_sink returns no
 * thread still calls the old one: its owner may free what it used.  Never
 * on a core's loop (it defers: log_defer), so the lock costs the data path
 * nothing.
 */
static pthread_rwlock_t sink_lock = PTHREAD_RWLOCK_INITIALIZER;
static log_sink_fn sink_fn = stderr_sink;
static void *sink_arg;

void log_set_sink(log_sink_fn fn, void *arg)
{
	pthread_rwlock_wrlock(&sink_lock);
	sink_fn = fn ? fn : stderr_sink;
	sink_arg = fn ? arg : NULL;
	pthread_rwlock_unlock(&sink_lock);
}

void log_fork_child(void)
{
	static const pthread_rwlock_t fresh = PTHREAD_RWLOCK_INITIALIZER;

	/* A plain copy, no call: async-signal-safe, as a fork handler must be. */
	memcpy(&sink_lock, &fresh, sizeof(sink_lock));
}

/* The calling thread's limit (log_thread_limit): a window of one second. */
static __thread struct {
	unsigned per_sec, used;
	uint64_t window_ms;
	unsigned long dropped;
} lim;

/* CLOCK_MONOTONIC in ms, here: the fuzz targets link this file alone. */
static uint64_t log_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void log_thread_limit(unsigned per_sec)
{
	lim.per_sec = per_sec;
	lim.used = 0;
	lim.window_ms = log_now_ms();
	lim.dropped = 0;
}

static void log_emit(int level, const char *msg)
{
	pthread_rwlock_rdlock(&sink_lock);
	sink_fn(sink_arg, level, msg);
	pthread_rwlock_unlock(&sink_lock);
}

/* ---- the cores' mailboxes ---- */

/* The box the calling thread defers to; NULL: it calls the sink itself. */
static __thread struct log_box *defer_box;

void log_box_init(struct log_box *b, const char *name, unsigned index)
{
	memset(b, 0, sizeof(*b));
	pthread_mutex_init(&b->drain_lock, NULL);
	snprintf(b->name, sizeof(b->name), "%s %u", name, index);
}

void log_box_fini(struct log_box *b)
{
	pthread_mutex_destroy(&b->drain_lock);
}

struct log_box *log_defer(struct log_box *b)
{
	struct log_box *prev = defer_box;

	defer_box = b;
	return prev;
}

/* Claim the next index of b; false when b is full (the drainer
 * LOG_BOX_SLOTS behind).  A stale h (the drainer passed it meanwhile) is
 * read again, not taken for a full box. */
static bool log_box_claim(struct log_box *b, uint32_t *out)
{
	uint32_t h = READ_ONCE(b->head);

	for (;;) {
		/* pairs with: store_release of tail in log_box_take (its slot emptied) */
		uint32_t t = load_acquire(b->tail);

		if (h - t < LOG_BOX_SLOTS) {
			if (cas_relaxed(b->head, &h, h + 1)) /* else h is the head now */
				break;
		} else if (h == READ_ONCE(b->head)) {
			return false;
		} else {
			h = READ_ONCE(b->head);
		}
	}
	*out = h;
	return true;
}

/* Leave msg in b: claim an index, fill its slot, publish it.  A full box
 * drops the message and counts it. */
static void log_box_put(struct log_box *b, int level, const char *msg)
{
	struct log_slot *s;
	uint32_t h;
	size_t len;

	if (!log_box_claim(b, &h)) {
		fetch_add_relaxed(b->dropped, 1);
		return;
	}
	s = &b->slot[h & (LOG_BOX_SLOTS - 1)];
	len = strnlen(msg, LOG_MSG_MAX - 1);
	memcpy(s->msg, msg, len);
	s->msg[len] = '\0';
	s->level = level;
	store_release(s->full, 1); /* pairs with: load_acquire in log_box_take */
}

int log_box_pending(const struct log_box *b)
{
	const struct log_slot *s = &b->slot[READ_ONCE(b->tail) & (LOG_BOX_SLOTS - 1)];

	return READ_ONCE(s->full) != 0 || READ_ONCE(b->dropped) != 0;
}

/* The drainer's: the next message of b into line, or false (none ready;
 * one claimed but not yet filled waits for the next drain). */
static bool log_box_take(struct log_box *b, int *level, char *line, size_t len)
{
	uint32_t t = READ_ONCE(b->tail); /* written by drainers only, under drain_lock */
	struct log_slot *s = &b->slot[t & (LOG_BOX_SLOTS - 1)];

	if (!load_acquire(s->full)) /* pairs with: store_release in log_box_put */
		return false;
	snprintf(line, len, "%s: %s", b->name, s->msg);
	*level = s->level;
	WRITE_ONCE(s->full, 0);
	store_release(b->tail, t + 1); /* pairs with: load_acquire in log_box_put */
	return true;
}

unsigned log_box_drain(struct log_box *b)
{
	char line[LOG_MSG_MAX + sizeof(b->name) + 2];
	unsigned long long dropped;
	unsigned n = 0;
	int level;

	pthread_mutex_lock(&b->drain_lock);
	while (log_box_take(b, &level, line, sizeof(line))) {
		log_emit(level, line);
		n++;
	}
	dropped = xchg_relaxed(b->dropped, 0);
	if (dropped) {
		snprintf(line, sizeof(line), "%s: %llu message(s) dropped: its log mailbox was full",
			 b->name, dropped);
		log_emit(LOG_WARN, line);
	}
	pthread_mutex_unlock(&b->drain_lock);
	return n;
}

/* Where this thread's messages go: its core's box, or the sink. */
static void log_deliver(int level, const char *msg)
{
	if (defer_box)
		log_box_put(defer_box, level, msg);
	else
		log_emit(level, msg);
}

/* May this thread log now?  Says first how many it dropped before. */
static bool log_admit(void)
{
	char note[96];
	uint64_t now;

	if (!lim.per_sec)
		return true;
	now = log_now_ms();
	if (now - lim.window_ms >= 1000) {
		lim.window_ms = now;
		lim.used = 0;
	}
	if (lim.used >= lim.per_sec) {
		lim.dropped++;
		return false;
	}
	lim.used++;
	if (lim.dropped) {
		snprintf(note, sizeof(note), "(%lu message(s) of this thread dropped before: "
			 "over %u a second)", lim.dropped, lim.per_sec);
		log_deliver(LOG_WARN, note);
		lim.dropped = 0;
	}
	return true;
}

void flog(int level, const char *fmt, ...)
{
	char msg[LOG_MSG_MAX];
	va_list ap;

	if (!log_admit())
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	log_deliver(level, msg);
}

const char *log_errstr(int err)
{
	const char *d = strerrordesc_np(err);

	return d ? d : "unknown error";
}
