/* SPDX-License-Identifier: MIT */
/*
 * Per-thread counters with perf_event_open(2) (see perf.h).
 *
 * Each counter is opened on its own rather than as a group: a group stands
 * or falls as a whole, and on a VM whose PMU lacks one event (cache misses
 * are the usual one) the others are still worth having.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "runtime/metrics/perf.h"
#include "ring/base/atomics.h"
#include "ring/base/fd.h"

static const struct {
	const char *name;
	uint32_t type;
	uint64_t config;
} ctr_def[PERF_CTR_N] = {
	[PERF_CTR_CYCLES] = { "cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES },
	[PERF_CTR_INSTRUCTIONS] = { "instructions", PERF_TYPE_HARDWARE,
				    PERF_COUNT_HW_INSTRUCTIONS },
	[PERF_CTR_CACHE_MISSES] = { "cache-misses", PERF_TYPE_HARDWARE,
				    PERF_COUNT_HW_CACHE_MISSES },
	[PERF_CTR_CTX_SWITCHES] = { "context-switches", PERF_TYPE_SOFTWARE,
				    PERF_COUNT_SW_CONTEXT_SWITCHES },
};

const char *perf_ctr_name(unsigned i)
{
	return i < PERF_CTR_N ? ctr_def[i].name : "?";
}

/* The fd of counter i for the calling thread, or a negative errno. */
static int open_one(unsigned i)
{
	struct perf_event_attr a;
	long fd;

	memset(&a, 0, sizeof(a));
	a.size = sizeof(a);
	a.type = ctr_def[i].type;
	a.config = ctr_def[i].config;
	/*
	 * User mode only for the hardware events: the loop's own code is what
	 * they measure, and it is all that perf_event_paranoid 2 (the default)
	 * lets an unprivileged process count.  Not for context switches: the
	 * kernel counts them in kernel mode, exclude_kernel would read 0.
	 */
	a.exclude_kernel = ctr_def[i].type == PERF_TYPE_HARDWARE;
	a.exclude_hv = 1;
	fd = fd_track((int)syscall(SYS_perf_event_open, &a, 0, -1, -1, PERF_FLAG_FD_CLOEXEC));
	return fd < 0 ? -errno : (int)fd;
}

/* Append to p->why; snprintf truncates safely when it is full. */
static void why_add(struct perf_ctrs *p, size_t *pos, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (*pos >= sizeof(p->why) - 1)
		return;
	va_start(ap, fmt);
	n = vsnprintf(p->why + *pos, sizeof(p->why) - *pos, fmt, ap);
	va_end(ap);
	if (n > 0)
		*pos += (size_t)n;
}

static void paranoid_level(char *buf, size_t len)
{
	int fd = fd_track(open("/proc/sys/kernel/perf_event_paranoid", O_RDONLY | O_CLOEXEC));
	ssize_t n = fd >= 0 ? read(fd, buf, len - 1) : -1;

	if (fd >= 0)
		fd_close(fd);
	if (n <= 0)
		n = snprintf(buf, len, "?");
	buf[n] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
}

/* What the usual errnos of perf_event_open mean in practice. */
static void why_hint(struct perf_ctrs *p, size_t *pos, int err)
{
	char level[16];

	switch (err) {
	case ENOENT:
	case ENODEV:
	case EOPNOTSUPP:
		why_add(p, pos, " (no PMU: VM?)");
		break;
	case EACCES:
	case EPERM:
		paranoid_level(level, sizeof(level));
		why_add(p, pos, " (perf_event_paranoid=%s)", level);
		break;
	case ENOSYS:
		why_add(p, pos, " (no perf events in this kernel, or seccomp)");
		break;
	}
}

/* One clause per distinct errno: "cycles, instructions: <error> (<hint>)". */
static void explain(struct perf_ctrs *p, const int err[PERF_CTR_N])
{
	uint8_t said[PERF_CTR_N] = { 0 };
	size_t pos = 0;
	char msg[64];

	p->why[0] = '\0';
	for (unsigned i = 0; i < PERF_CTR_N; i++) {
		if (!err[i] || said[i])
			continue;
		why_add(p, &pos, "%s%s", pos ? "; " : "", ctr_def[i].name);
		for (unsigned j = i + 1; j < PERF_CTR_N; j++) {
			if (err[j] == err[i]) {
				why_add(p, &pos, ", %s", ctr_def[j].name);
				said[j] = 1;
			}
		}
		why_add(p, &pos, ": %s", strerror_r(err[i], msg, sizeof(msg)));
		why_hint(p, &pos, err[i]);
	}
}

int perf_open_self(struct perf_ctrs *p)
{
	int err[PERF_CTR_N];
	int n = 0;

	WRITE_ONCE(p->ok, 0);
	for (unsigned i = 0; i < PERF_CTR_N; i++) {
		int fd = open_one(i);

		p->fd[i] = fd < 0 ? -1 : fd;
		err[i] = fd < 0 ? -fd : 0;
		n += fd >= 0;
	}
	explain(p, err);
	/* Publish: a reader that sees ok > 0 also sees the fds. */
	store_release(p->ok, n);    /* pairs with: load_acquire in perf_read/perf_close */
	store_release(p->tried, 1); /* pairs with: load_acquire in perf_note */
	return n;
}

void perf_note(const struct perf_ctrs *p, char *buf, size_t len)
{
	if (!len)
		return;
	if (!load_acquire(p->tried)) /* pairs with: store_release in perf_open_self */
		snprintf(buf, len, "not opened yet");
	else
		snprintf(buf, len, "%s", p->why[0] ? p->why : "all counting");
}

void perf_read(const struct perf_ctrs *p, uint64_t out[PERF_CTR_N], uint8_t valid[PERF_CTR_N])
{
	/* ok first: fd[] of a zeroed or half-opened struct is not to be read. */
	int open = load_acquire(p->ok) > 0; /* pairs with: store_release in perf_open_self */

	for (unsigned i = 0; i < PERF_CTR_N; i++) {
		uint64_t v;

		out[i] = 0;
		valid[i] = 0;
		if (!open || p->fd[i] < 0)
			continue;
		if (read(p->fd[i], &v, sizeof(v)) == (ssize_t)sizeof(v)) {
			out[i] = v;
			valid[i] = 1;
		}
	}
}

void perf_close(struct perf_ctrs *p)
{
	int open = load_acquire(p->ok) > 0; /* pairs with: store_release in perf_open_self */

	for (unsigned i = 0; i < PERF_CTR_N; i++) {
		if (open && p->fd[i] >= 0)
			fd_close(p->fd[i]);
		p->fd[i] = -1;
	}
	WRITE_ONCE(p->ok, 0);
}
