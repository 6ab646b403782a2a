/* SPDX-License-Identifier: MIT */
/*
 * fault_peer: the two processes of the fault tests on real RDMA
 * (tests/tools/fault-vm.sh, Soft-RoCE), written against the public API only.
 *
 *   fault_peer target --nics rxe2,rxe3 --cores 0-1 --listen 127.0.0.1:18600
 *       registers --size bytes at a fixed virtual address (so a restarted
 *       target offers the same remote range under new keys) and serves
 *       until SIGTERM/SIGINT.
 *
 *   fault_peer stream --nics rxe0,rxe1 --cores 0-1 --peer 127.0.0.1:18600
 *                     --duration S --expect all-done|peer-kill
 *       WRITEs a fresh pattern, READs it back into a poisoned buffer and
 *       compares, batch after batch, for S seconds, printing per-core
 *       counters every second.  The script marks its fault with SIGUSR1
 *       (link down / peer killed) and SIGUSR2 (link up), so the program can
 *       time what follows:
 *       all-done   every request must end DONE with its bytes right, and
 *                  the rail of --watch-core must post again after SIGUSR2
 *                  (streams until --after seconds past SIGUSR2, at most
 *                  --duration);
 *       peer-kill  the batch in flight at SIGUSR1 must end (FAILED or
 *                  TIMEOUT, never hang) within timeout_ms + --slack-ms;
 *                  then the program closes the segment, reopens it until
 *                  the restarted target answers, and streams --after
 *                  seconds more, every request DONE and verified (at most
 *                  --duration seconds before the kill).
 *
 * Prints cmocka-like "[ RUN ]/[ OK ]/[ FAILED ]" lines and a final
 * "fault_peer: N passed, M failed" (N, M: verified / failed request pairs).
 * Exit status 0 when every check held, 1 when one did not, 2 on usage or
 * set-up errors, 3 when requests hung (nothing is cleaned up then).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "runtime/ferry.h"

/* Far from the heap, the libraries and the stacks on x86-64 Linux. */
#define FP_BASE 0x600000000000ull
#define MAX_BATCH 64
#define HANG_MS 60000
#define OPEN_RETRY_MS 200
#define WAIT_STEP_MS 500

struct cfg {
	const char *mode;
	const char *nics;
	const char *cores;
	const char *listen;
	const char *peer;
	const char *expect;
	uint64_t size;         /* target: registered bytes; stream: remote bytes used */
	uint64_t req;          /* bytes per request */
	uint64_t remote;
	unsigned batch;
	unsigned watch_core;
	double duration;
	double after;
	uint32_t timeout_ms;
	uint32_t slack_ms;
};

struct tally {
	uint64_t passed;       /* pairs DONE and verified */
	uint64_t failed;       /* pairs where a request did not end DONE */
	uint64_t mismatched;   /* DONE and wrong bytes: always a bug */
	uint64_t err[256];
};

static _Atomic uint64_t event_ns[3]; /* [1]: SIGUSR1, [2]: SIGUSR2; 0 = not yet */

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void on_event(int sig)
{
	/* clock_gettime is async-signal-safe; keep the first mark only. */
	unsigned k = sig == SIGUSR1 ? 1 : 2;

	if (!event_ns[k])
		event_ns[k] = now_ns();
}

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void fill_pattern(uint8_t *p, size_t len, uint64_t seed)
{
	for (size_t i = 0; i < len; i += 8) {
		uint64_t v = splitmix(&seed);

		memcpy(p + i, &v, len - i < 8 ? len - i : 8);
	}
}

/* dst = ~src: a byte the READ did not bring back cannot match. */
static void poison(uint8_t *dst, const uint8_t *src, size_t len)
{
	for (size_t i = 0; i < len; i++)
		dst[i] = (uint8_t)~src[i];
}

static int engine_up(const struct cfg *c, const char *listen, struct ferry_engine **e)
{
	struct ferry_opts o;
	int rc;

	ferry_opts_default(&o);
	rc = ferry_opts_from_env(&o);
	if (rc)
		return rc;
	o.nics = c->nics;
	o.cores = c->cores;
	if (listen)
		o.listen = listen;
	if (c->timeout_ms)
		o.timeout_ms = c->timeout_ms;
	rc = ferry_engine_create(&o, e);
	if (rc)
		fprintf(stderr, "fault_peer: engine on %s: %s\n", c->nics, strerror(-rc));
	return rc;
}

/* ---- target ---- */

static int target_main(const struct cfg *c)
{
	struct ferry_engine *e;
	sigset_t set;
	void *buf;
	int sig, rc;

	/* The signals that end us are taken synchronously below, by this
	 * thread only: block them before the engine starts its threads. */
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	buf = mmap((void *)(uintptr_t)c->remote, c->size, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE | MAP_POPULATE, -1, 0);
	if (buf == MAP_FAILED || (uintptr_t)buf != c->remote) {
		fprintf(stderr, "fault_peer: cannot map %" PRIu64 " bytes at 0x%" PRIx64 ": %s\n",
			c->size, c->remote, strerror(errno));
		return 2;
	}
	if (engine_up(c, c->listen, &e))
		return 2;
	rc = ferry_mem_register(e, buf, c->size);
	if (rc) {
		fprintf(stderr, "fault_peer: register: %s\n", strerror(-rc));
		return 2;
	}
	printf("fault_peer: target ready at %s on %s, memory 0x%" PRIx64 " + %" PRIu64 "\n",
	       ferry_engine_address(e), c->nics, c->remote, c->size);
	fflush(stdout);
	sigwait(&set, &sig);
	ferry_mem_unregister(e, buf);
	ferry_engine_destroy(e);
	munmap(buf, c->size);
	return 0;
}

/* ---- stream ---- */

struct stream {
	const struct cfg *c;
	struct ferry_engine *e;
	struct ferry_port *port;
	struct ferry_batch *b;
	ferry_seg_t seg;
	uint8_t *wbuf;         /* written from */
	uint8_t *rbuf;         /* read back into */
	uint64_t seed;
	uint64_t t0;
	uint64_t next_print;
	bool marked[3];        /* the event's snapshot was taken */
	struct ferry_core_stats at_event[3]; /* the watched core at each mark */
};

static double secs(uint64_t ns)
{
	return (double)ns / 1e9;
}

static void print_cores(struct stream *s, const char *what, const struct tally *t)
{
	printf("  t=%5.1fs %-9s %" PRIu64 " passed, %" PRIu64 " failed |", secs(now_ns() - s->t0),
	       what, t->passed, t->failed);
	for (unsigned i = 0; i < ferry_engine_cores(s->e); i++) {
		struct ferry_core_stats st;

		ferry_core_stats(s->e, i, &st);
		printf(" core%u %s: %" PRIu64 " WRs %" PRIu64 " MB, err %" PRIu64 " retries %" PRIu64
		       " resets %" PRIu64 " handovers %" PRIu64 " pauses %" PRIu64 ", loops %" PRIu64
		       " sleeps %" PRIu64 " |", i, ferry_core_nic(s->e, i), st.wrs_posted,
		       st.bytes >> 20, st.wr_errors, st.retries, st.qp_resets, st.handovers,
		       st.rail_pauses, st.loops, st.sleeps);
	}
	printf("\n");
	fflush(stdout);
}

/* After each round: snapshot the watched core once per mark the script set. */
static void take_marks(struct stream *s, const struct tally *t)
{
	static const char *const names[3] = { "", "mark 1", "mark 2" };

	for (unsigned k = 1; k < 3; k++) {
		if (s->marked[k] || !event_ns[k])
			continue;
		s->marked[k] = true;
		ferry_core_stats(s->e, s->c->watch_core, &s->at_event[k]);
		print_cores(s, names[k], t);
	}
}

/*
 * Submit n requests of op over the slots, wait for all to end: 0, or
 * -ETIMEDOUT when they did not end in HANG_MS.  ok[i]: request i ended DONE.
 */
static int run_batch(struct stream *s, enum ferry_op op, unsigned n, bool *ok, struct tally *t)
{
	const struct cfg *c = s->c;
	struct ferry_req reqs[MAX_BATCH];
	int rc;

	for (unsigned i = 0; i < n; i++) {
		uint8_t *local = (op == FERRY_OP_WRITE ? s->wbuf : s->rbuf) + i * c->req;

		reqs[i] = (struct ferry_req){ op, local, s->seg, c->remote + i * c->req, c->req };
	}
	ferry_batch_reset(s->b);
	rc = ferry_submit(s->b, reqs, n);
	if (rc < 0) {
		fprintf(stderr, "fault_peer: submit: %s\n", strerror(-rc));
		return rc;
	}
	/* Wait in steps: after a mark, a batch that takes long shows how the
	 * cores get there, every half second. */
	for (uint64_t waited = 0;; waited += WAIT_STEP_MS) {
		if (ferry_batch_wait(s->b, WAIT_STEP_MS) != -ETIMEDOUT)
			break;
		if (waited >= HANG_MS)
			return -ETIMEDOUT;
		if (event_ns[1])
			print_cores(s, "waiting", t);
	}
	for (unsigned i = 0; i < n; i++) {
		struct ferry_req_status st;

		ferry_req_status(s->b, i, &st);
		ok[i] = st.state == FERRY_DONE;
		if (!ok[i] && st.error < 0 && -st.error < 256)
			t->err[-st.error]++;
	}
	return 0;
}

/* One round: WRITE a batch of fresh patterns, READ them back, compare.
 * *bad: pairs of this round that did not end DONE. */
static int round_trip(struct stream *s, struct tally *t, unsigned *bad)
{
	const struct cfg *c = s->c;
	bool wok[MAX_BATCH], rok[MAX_BATCH];
	int rc;

	*bad = 0;
	for (unsigned i = 0; i < c->batch; i++) {
		uint8_t *w = s->wbuf + i * c->req;

		fill_pattern(w, c->req, splitmix(&s->seed));
		poison(s->rbuf + i * c->req, w, c->req);
	}
	rc = run_batch(s, FERRY_OP_WRITE, c->batch, wok, t);
	if (rc == 0)
		rc = run_batch(s, FERRY_OP_READ, c->batch, rok, t);
	if (rc)
		return rc;
	for (unsigned i = 0; i < c->batch; i++) {
		if (!wok[i] || !rok[i]) {
			t->failed++;
			(*bad)++;
		} else if (memcmp(s->wbuf + i * c->req, s->rbuf + i * c->req, c->req)) {
			t->mismatched++;
			fprintf(stderr, "fault_peer: request %u of %" PRIu64 " B: DONE but the bytes "
				"read back differ\n", i, c->req);
		} else {
			t->passed++;
		}
	}
	return 0;
}

/*
 * Stream until deadline_ns, or until after_mark2_ns past mark 2 (when not 0),
 * or (stop_on_failure) the end of the first round with failures (returns 1
 * then).  -ETIMEDOUT: requests hung.
 */
static int stream_until(struct stream *s, uint64_t deadline_ns, uint64_t after_mark2_ns,
			bool stop_on_failure, struct tally *t)
{
	while (now_ns() < deadline_ns) {
		if (after_mark2_ns && event_ns[2] && now_ns() >= event_ns[2] + after_mark2_ns)
			break;
		unsigned bad;
		int rc = round_trip(s, t, &bad);

		if (rc == -ETIMEDOUT)
			printf("  t=%5.1fs HANG: requests did not end in %d ms\n",
			       secs(now_ns() - s->t0), HANG_MS);
		if (rc)
			return rc;
		take_marks(s, t);
		if (now_ns() >= s->next_print) {
			print_cores(s, "", t);
			s->next_print += 1000000000ull;
		}
		if (bad && stop_on_failure)
			return 1;
	}
	return 0;
}

static void print_errors(const char *what, const struct tally *t)
{
	bool any = false;

	for (int e = 1; e < 256; e++) {
		if (t->err[e]) {
			printf("%s %s %" PRIu64, any ? "," : what, strerrorname_np(e), t->err[e]);
			any = true;
		}
	}
	if (any)
		printf("\n");
}

static bool check(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool check(bool ok, const char *fmt, ...)
{
	va_list ap;

	printf("  %s: ", ok ? "ok" : "NOT OK");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	return ok;
}

/*
 * Link down (mark 1), link up (mark 2): every request ends DONE with its
 * bytes right, and the watched core's rail moves data again after mark 2.
 */
static bool expect_all_done(struct stream *s, struct tally *t, bool *hung)
{
	const struct cfg *c = s->c;
	struct ferry_core_stats end;
	bool good = true;
	int rc;

	rc = stream_until(s, s->t0 + (uint64_t)(c->duration * 1e9), (uint64_t)(c->after * 1e9),
			  false, t);
	*hung = rc == -ETIMEDOUT;
	if (rc)
		return false;
	print_cores(s, "end", t);
	ferry_core_stats(s->e, c->watch_core, &end);
	good &= check(s->marked[1] && s->marked[2], "the script marked link down and link up");
	good &= check(t->failed == 0 && t->mismatched == 0 && t->passed > 0,
		      "%" PRIu64 " request pairs, every one DONE with its bytes right",
		      t->passed + t->failed + t->mismatched);
	if (!s->marked[1] || !s->marked[2])
		return false;
	printf("  core %u (%s): posted %" PRIu64 " / moved %" PRIu64 " MB at link down, %" PRIu64
	       " / %" PRIu64 " MB at link up, %" PRIu64 " / %" PRIu64 " MB at the end\n",
	       c->watch_core, ferry_core_nic(s->e, c->watch_core), s->at_event[1].wrs_posted,
	       s->at_event[1].bytes >> 20, s->at_event[2].wrs_posted, s->at_event[2].bytes >> 20,
	       end.wrs_posted, end.bytes >> 20);
	good &= check(end.wrs_posted > s->at_event[2].wrs_posted &&
		      end.bytes > s->at_event[2].bytes,
		      "core %u's rail posts and moves data again after the link came back",
		      c->watch_core);
	return good;
}

static int open_segment(struct stream *s, uint64_t deadline_ns, unsigned *attempts)
{
	int rc;

	*attempts = 0;
	for (;;) {
		++*attempts;
		rc = ferry_segment_open(s->e, s->c->peer, &s->seg);
		if (rc == 0 || now_ns() >= deadline_ns)
			return rc;
		usleep(OPEN_RETRY_MS * 1000);
	}
}

/*
 * A restarted target listens before it registers its memory, so a segment
 * opened in between offers no region yet and requests to it are refused
 * with -EFAULT.  Like an application would, read the whole range and
 * refresh the descriptor (ferry_segment_refresh) until the peer offers it.
 * -ETIMEDOUT: the probe hung.
 */
static int wait_remote_range(struct stream *s, uint64_t deadline_ns, unsigned *refreshes)
{
	const struct cfg *c = s->c;
	struct ferry_req r = { FERRY_OP_READ, s->rbuf, s->seg, c->remote, (uint64_t)c->batch * c->req };
	struct ferry_req_status st;
	int rc;

	for (*refreshes = 0;; ++*refreshes) {
		ferry_batch_reset(s->b);
		rc = ferry_submit(s->b, &r, 1);
		if (rc < 0)
			return rc;
		if (ferry_batch_wait(s->b, HANG_MS) == -ETIMEDOUT)
			return -ETIMEDOUT;
		ferry_req_status(s->b, 0, &st);
		if (st.state == FERRY_DONE)
			return 0;
		if (st.error != -EFAULT || now_ns() >= deadline_ns)
			return st.error ? st.error : -EIO;
		usleep(OPEN_RETRY_MS * 1000);
		rc = ferry_segment_refresh(s->e, s->seg);
		if (rc)
			return rc;
	}
}

/*
 * Peer killed (mark 1): the requests in flight end FAILED/TIMEOUT within
 * timeout_ms + slack, new ones fail fast; close returns; the restarted
 * target is reached by reopening and every byte is right again.
 * *expected: failed pairs that the kill explains.
 */
static bool expect_peer_kill(struct stream *s, struct tally *t, uint64_t *expected, bool *hung)
{
	const struct cfg *c = s->c;
	uint64_t bound_ns = (uint64_t)(c->timeout_ms + c->slack_ms) * 1000000ull;
	uint64_t kill_ns, end_ns, t1;
	struct tally dead = { 0 }, after = { 0 };
	unsigned attempts, bad;
	bool good = true;
	int rc;

	*expected = 0;
	rc = stream_until(s, s->t0 + (uint64_t)(c->duration * 1e9), 0, true, t);
	*hung = rc == -ETIMEDOUT;
	if (rc < 0)
		return false;
	end_ns = now_ns();
	kill_ns = event_ns[1];
	if (!check(rc == 1 && kill_ns && kill_ns < end_ns,
		   "requests failed after the script killed the peer"))
		return false;
	/* Streaming stopped at the first round with failures: the kill's. */
	*expected = t->failed;
	print_errors("  in flight at the kill:", t);
	good &= check(end_ns - kill_ns <= bound_ns,
		      "the requests in flight ended %.2f s after the kill (bound: timeout_ms %u + "
		      "slack %u ms)", secs(end_ns - kill_ns), c->timeout_ms, c->slack_ms);

	/* The peer is known dead by now, or soon: new requests fail fast. */
	t1 = now_ns();
	rc = round_trip(s, &dead, &bad);
	*hung = rc == -ETIMEDOUT;
	if (rc)
		return false;
	*expected += dead.failed;
	print_errors("  to the dead peer:", &dead);
	good &= check(dead.passed == 0 && now_ns() - t1 <= bound_ns,
		      "%u new requests to the dead peer ended, none DONE, in %.2f s",
		      2 * c->batch, secs(now_ns() - t1));

	printf("  waiting for the restarted target\n");
	fflush(stdout);
	t1 = now_ns();
	rc = ferry_segment_close(s->e, s->seg);
	s->seg = 0;
	good &= check(rc == 0, "ferry_segment_close returned %d in %.2f s", rc, secs(now_ns() - t1));
	t1 = now_ns();
	rc = open_segment(s, t1 + 60000000000ull, &attempts);
	if (!check(rc == 0, "ferry_segment_open reached the restarted target: %d after %.1f s, "
		   "%u attempts", rc, secs(now_ns() - t1), attempts))
		return false;
	t1 = now_ns();
	rc = wait_remote_range(s, t1 + 60000000000ull, &attempts);
	*hung = rc == -ETIMEDOUT;
	if (!check(rc == 0, "the restarted target offers the remote range: %d after %.1f s, "
		   "%u refreshes", rc, secs(now_ns() - t1), attempts))
		return false;
	rc = stream_until(s, now_ns() + (uint64_t)(c->after * 1e9), 0, false, &after);
	*hung = rc == -ETIMEDOUT;
	if (rc)
		return false;
	print_cores(s, "end", &after);
	print_errors("  after the restart:", &after);
	good &= check(after.failed == 0 && after.mismatched == 0 && after.passed > 0,
		      "after the restart: %" PRIu64 " request pairs, every one DONE with its "
		      "bytes right", after.passed + after.failed + after.mismatched);
	t->passed += after.passed;
	t->failed += dead.failed + after.failed;
	t->mismatched += dead.mismatched + after.mismatched;
	return good;
}

static int stream_main(const struct cfg *c)
{
	struct stream s = { .c = c, .seed = 1 };
	struct tally t = { 0 };
	struct sigaction sa = { .sa_handler = on_event, .sa_flags = SA_RESTART };
	uint64_t expected = 0;
	unsigned attempts;
	sigset_t set;
	bool good, hung = false;
	size_t half = (size_t)c->batch * c->req;
	int rc;

	/* Only this thread takes the script's marks: the engine's threads
	 * start with them blocked. */
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigaddset(&set, SIGUSR2);
	sigaction(SIGUSR1, &sa, NULL);
	sigaction(SIGUSR2, &sa, NULL);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	rc = engine_up(c, NULL, &s.e);
	pthread_sigmask(SIG_UNBLOCK, &set, NULL);
	if (rc)
		return 2;
	s.wbuf = aligned_alloc(4096, 2 * half);
	if (!s.wbuf)
		return 2;
	s.rbuf = s.wbuf + half;
	memset(s.wbuf, 0, 2 * half);
	rc = ferry_mem_register(s.e, s.wbuf, 2 * half);
	if (rc == 0)
		rc = open_segment(&s, now_ns() + 30000000000ull, &attempts);
	if (rc == 0)
		rc = ferry_port_create(s.e, &s.port);
	if (rc == 0)
		rc = ferry_batch_create(s.port, c->batch, &s.b);
	if (rc) {
		fprintf(stderr, "fault_peer: set-up against %s: %s\n", c->peer, strerror(-rc));
		return 2;
	}
	printf("[ RUN      ] fault_peer %s: %s -> %s, %u x %" PRIu64 " B per batch, timeout_ms %u\n",
	       c->expect, c->nics, c->peer, c->batch, c->req, c->timeout_ms);
	s.t0 = now_ns();
	s.next_print = s.t0 + 1000000000ull;
	if (strcmp(c->expect, "all-done") == 0)
		good = expect_all_done(&s, &t, &hung);
	else
		good = expect_peer_kill(&s, &t, &expected, &hung);
	good &= t.mismatched == 0;
	print_errors("  errors:", &t);
	printf("fault_peer: %" PRIu64 " passed, %" PRIu64 " failed", t.passed,
	       t.failed - expected + t.mismatched);
	if (expected)
		printf(" (and %" PRIu64 " failed as expected when the peer died)", expected);
	printf("\n[ %s ] fault_peer %s\n", good ? "      OK" : " FAILED ", c->expect);
	fflush(stdout);
	if (hung)
		_exit(3); /* pending requests pin everything: no clean-up */
	ferry_batch_destroy(s.b);
	ferry_port_destroy(s.port);
	if (s.seg)
		ferry_segment_close(s.e, s.seg);
	ferry_mem_unregister(s.e, s.wbuf);
	ferry_engine_destroy(s.e);
	free(s.wbuf);
	return good ? 0 : 1;
}

/* ---- options ---- */

static uint64_t parse_size(const char *v)
{
	char *end;
	uint64_t n = strtoull(v, &end, 0);

	switch (*end) {
	case 'G': case 'g': n <<= 10; /* fall through */
	case 'M': case 'm': n <<= 10; /* fall through */
	case 'K': case 'k': n <<= 10; end++; break;
	default: break;
	}
	if (*end || n == 0) {
		fprintf(stderr, "fault_peer: bad size '%s'\n", v);
		exit(2);
	}
	return n;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: fault_peer target --nics L [--cores L] --listen IP:PORT [--size B]\n"
		"       fault_peer stream --nics L [--cores L] --peer IP:PORT --duration S\n"
		"                  --expect all-done|peer-kill [--timeout-ms N] [--req B]\n"
		"                  [--batch N] [--watch-core K] [--after S] [--slack-ms N]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "nics", required_argument, NULL, 'n' },
		{ "cores", required_argument, NULL, 'c' },
		{ "listen", required_argument, NULL, 'l' },
		{ "peer", required_argument, NULL, 'p' },
		{ "expect", required_argument, NULL, 'x' },
		{ "size", required_argument, NULL, 's' },
		{ "req", required_argument, NULL, 'r' },
		{ "batch", required_argument, NULL, 'b' },
		{ "watch-core", required_argument, NULL, 'w' },
		{ "duration", required_argument, NULL, 'd' },
		{ "after", required_argument, NULL, 'a' },
		{ "timeout-ms", required_argument, NULL, 't' },
		{ "slack-ms", required_argument, NULL, 'k' },
		{ NULL, 0, NULL, 0 },
	};
	struct cfg c = { .cores = "0", .expect = "all-done", .size = 16u << 20, .req = 256u << 10,
			 .remote = FP_BASE, .batch = 8, .watch_core = 1, .duration = 10,
			 .after = 3, .timeout_ms = 2000, .slack_ms = 3000 };
	int o;

	if (argc < 2)
		usage();
	c.mode = argv[1];
	optind = 2;
	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'n': c.nics = optarg; break;
		case 'c': c.cores = optarg; break;
		case 'l': c.listen = optarg; break;
		case 'p': c.peer = optarg; break;
		case 'x': c.expect = optarg; break;
		case 's': c.size = parse_size(optarg); break;
		case 'r': c.req = parse_size(optarg); break;
		case 'b': c.batch = (unsigned)atoi(optarg); break;
		case 'w': c.watch_core = (unsigned)atoi(optarg); break;
		case 'd': c.duration = atof(optarg); break;
		case 'a': c.after = atof(optarg); break;
		case 't': c.timeout_ms = (uint32_t)atoi(optarg); break;
		case 'k': c.slack_ms = (uint32_t)atoi(optarg); break;
		default: usage();
		}
	}
	if (!c.nics)
		usage();
	if (strcmp(c.mode, "target") == 0 && c.listen)
		return target_main(&c);
	if (strcmp(c.mode, "stream") != 0 || !c.peer || c.batch == 0 || c.batch > MAX_BATCH ||
	    (uint64_t)c.batch * c.req > c.size ||
	    (strcmp(c.expect, "all-done") && strcmp(c.expect, "peer-kill")))
		usage();
	return stream_main(&c);
}
