/* SPDX-License-Identifier: MIT */
#include "ring/base/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "ring/base/atomics.h"

#define LOG_MSG_MAX 512

struct log_sink {
	log_sink_fn fn;
	void *arg;
};

static void stderr_sink(void *arg, int level, const char *msg)
{
	(void)arg;
	(void)level;
	fprintf(stderr, "ferry: %s\n", msg);
}

static const struct log_sink default_sink = { stderr_sink, NULL };

/*
 * The sink is one immutable pair behind one pointer, so a logger never sees
 * the function of one sink with the argument of another.  A replaced pair
 * is not freed (a logger on another thread may still hold it): a few bytes
 * per ferry_log_set call, which applications make once.
 */
static const struct log_sink *sink = &default_sink;

void log_set_sink(log_sink_fn fn, void *arg)
{
	struct log_sink *s;

	if (!fn) {
		store_release(sink, &default_sink); /* pairs with: load_acquire in flog */
		return;
	}
	s = malloc(sizeof(*s));
	if (!s)
		return; /* keep the old sink rather than lose messages */
	s->fn = fn;
	s->arg = arg;
	store_release(sink, (const struct log_sink *)s); /* pairs with: load_acquire in flog */
}

void flog(int level, const char *fmt, ...)
{
	const struct log_sink *s = load_acquire(sink); /* pairs with: store_release in log_set_sink */
	char msg[LOG_MSG_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	s->fn(s->arg, level, msg);
}
