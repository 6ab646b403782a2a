/* SPDX-License-Identifier: MIT */
#include "ring/base/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

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

void flog(int level, const char *fmt, ...)
{
	char msg[LOG_MSG_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	pthread_rwlock_rdlock(&sink_lock);
	sink_fn(sink_arg, level, msg);
	pthread_rwlock_unlock(&sink_lock);
}
