/* SPDX-License-Identifier: MIT */
#include "ring/base/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define LOG_MSG_MAX 512

static void stderr_sink(void *arg, int level, const char *msg)
{
	(void)arg;
	(void)level;
	fprintf(stderr, "ferry: %s\n", msg);
}

/*
 * The sink is called under the read lock, so once log_set_sink returns no
 * thread still calls the old one: its owner may free what it used.  Never
 * on a core's loop (it does not log), so the lock costs the data path
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
		log_emit(LOG_WARN, note);
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
	log_emit(level, msg);
}
