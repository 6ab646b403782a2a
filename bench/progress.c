/* SPDX-License-Identifier: MIT */
/*
 * The progress line on stderr, for runs longer than a few seconds: drawn
 * by the main thread while it joins the port threads, from what the ports
 * publish after each batch.  A terminal gets one line redrawn in place, a
 * log a plain line every few seconds.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

/* Progress line: only runs this long get one; tty redraw and plain-line periods. */
#define PROGRESS_AFTER_NS 3000000000ull
#define PROGRESS_TTY_NS 500000000ull
#define PROGRESS_PLAIN_NS 5000000000ull

/* Before the first size: where the line goes (a terminal or not), and when it is first due. */
void progress_start(struct bench *b)
{
	b->progress.tty = isatty(STDERR_FILENO);
	b->run_start_ns = now_ns();
	b->progress.next_ns = b->run_start_ns + (b->progress.tty ? PROGRESS_TTY_NS : PROGRESS_PLAIN_NS);
}

/*
 * Due now?  Only runs longer than PROGRESS_AFTER_NS get a line: on a
 * terminal once the run is planned (or turns out) to be that long, a line
 * redrawn every half second; elsewhere (a log) a plain line every 5 s.
 */
static bool progress_due(struct bench *b, uint64_t now)
{
	uint64_t planned = 0;

	if (!b->cfg.iters)
		planned = (uint64_t)(b->cfg.duration * 1e9) * b->nsizes;
	if (planned < PROGRESS_AFTER_NS && now - b->run_start_ns < PROGRESS_AFTER_NS)
		return false;
	if (now < b->progress.next_ns)
		return false;
	b->progress.next_ns = now + (b->progress.tty ? PROGRESS_TTY_NS : PROGRESS_PLAIN_NS);
	return true;
}

static void progress_tick(struct bench *b)
{
	struct bench_progress p = { .size = b->size, .step = b->step, .steps = b->nsizes };
	uint64_t now = now_ns(), bytes = 0, batches = UINT64_MAX;
	char line[160];

	if (!progress_due(b, now))
		return;
	for (unsigned i = 0; i < b->cfg.ports; i++) {
		uint64_t n = __atomic_load_n(&b->ports[i].prog_batches, __ATOMIC_RELAXED);

		bytes += __atomic_load_n(&b->ports[i].prog_bytes, __ATOMIC_RELAXED);
		batches = n < batches ? n : batches; /* the slowest port says how far */
	}
	p.elapsed = (double)(now - b->start_ns) / 1e9;
	p.total = b->cfg.iters ? 0 : b->cfg.duration;
	p.done = batches;
	p.todo = b->cfg.iters;
	if (now > b->progress.last_ns && bytes >= b->progress.last_bytes)
		p.gbps = (double)(bytes - b->progress.last_bytes) / (double)(now - b->progress.last_ns);
	b->progress.last_ns = now;
	b->progress.last_bytes = bytes;
	bench_progress_fmt(line, sizeof(line), &p);
	/* "progress:", not "ferry_bench:": scripts collect those lines as errors. */
	if (b->progress.tty)
		fprintf(stderr, "\r\033[Kprogress: %s", line);
	else
		fprintf(stderr, "progress: %s\n", line);
	b->progress.shown = b->progress.tty;
}

/* Wipe the redrawn line before a row goes to the same terminal. */
static void progress_clear(struct bench *b)
{
	if (!b->progress.shown)
		return;
	fputs("\r\033[K", stderr);
	b->progress.shown = false;
}

/* Join the port threads, updating the progress line while they run. */
void ports_join(struct bench *b)
{
	b->progress.last_ns = b->start_ns;
	b->progress.last_bytes = 0;
	for (unsigned p = 0; p < b->cfg.ports; p++) {
		struct timespec ts;

		for (;;) {
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += 100000000; /* a tenth: a tick is 0.5 s at the least */
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			if (pthread_timedjoin_np(b->ports[p].thread, NULL, &ts) != ETIMEDOUT)
				break;
			progress_tick(b);
		}
	}
	progress_clear(b);
}
