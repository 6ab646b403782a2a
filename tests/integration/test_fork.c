/* SPDX-License-Identifier: MIT */
/*
 * Engines across fork(): what a forked child (a Python multiprocessing
 * worker, say) does to the parent's engines, and what the child may do
 * with its copies.  Over tcp, where the inherited sockets matter (the
 * control plane is tcp under every transport):
 *  - a close in the parent ends the connection and stops the listeners
 *    while a child lives (the child's copies would keep them open);
 *  - a parent killed while its child lives leaves no listener behind (the
 *    child closed its copies at the fork);
 *  - the control server of the parent closes a connection that the child
 *    also holds without leaving it in its epoll set (a freed connection
 *    would come back as an event).
 * Children here run no cmocka assertion (a failed one would jump back into
 * the test runner's copy): they report through pipes and exit codes.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "qp/tcp/objects.h"
#include "ring/base/log.h"
#include "tests/harness/harness.h"

#define BUF (1u << 20)

/*
 * A child that does nothing but hold what it inherited, until its pipe
 * closes (async-signal-safe only: it was forked from a threaded process).
 * raw: forked by the system call itself, so that no fork handler runs and
 * the child keeps a copy of every fd, as one forked at the instant ferry
 * made an fd would (or one cloned by code that bypasses fork handlers):
 * what the parent does alone must be enough then.
 */
struct kid {
	pid_t pid;
	int hold; /* closing it ends the child */
};

static struct kid kid_idle(bool raw)
{
	struct kid k;
	int p[2];
	char c;

	assert_int_equal(pipe(p), 0);
	k.pid = raw ? (pid_t)syscall(SYS_fork) : fork();
	assert_true(k.pid >= 0);
	if (k.pid == 0) {
		close(p[1]);
		while (read(p[0], &c, 1) < 0 && errno == EINTR)
			;
		_exit(0);
	}
	close(p[0]);
	k.hold = p[1];
	return k;
}

/* End a child; its exit status. */
static int kid_end(struct kid k)
{
	int st;

	close(k.hold);
	assert_int_equal(waitpid(k.pid, &st, 0), k.pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void parse_addr(const char *hostport, struct sockaddr_in *sa)
{
	char host[64];
	unsigned port;

	assert_int_equal(sscanf(hostport, "%63[^:]:%u", host, &port), 2);
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	sa->sin_port = htons((uint16_t)port);
	assert_int_equal(inet_pton(AF_INET, host, &sa->sin_addr), 1);
}

/* A blocking connect to a loopback "ip:port": 0 or -errno (the socket is
 * closed again at once). */
static int try_connect(const char *hostport)
{
	struct sockaddr_in sa;
	int fd, rc = 0;

	parse_addr(hostport, &sa);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)))
		rc = -errno;
	close(fd);
	return rc;
}

static void tcp_opts(struct ferry_opts *o)
{
	ferry_opts_default(o);
	o->cores = "0";
	o->nics = "tcp";
	o->timeout_ms = 2000;
}

/* The tcp data listener of core 0 of e, "ip:port". */
static void data_listener(struct ferry_engine *e, char *out, size_t len)
{
	const struct tcp_ctx *ctx = (const struct tcp_ctx *)(const void *)ferry_engine_nic(e, 0);

	snprintf(out, len, "%s", ctx->name);
}

/* The parent destroys its engine while a child lives: nothing listens at
 * its addresses any more (before: the child's copies kept the control and
 * data listeners accepting, and a peer's open waited for its timeout). */
static void test_listeners_refuse_after_destroy(void **state)
{
	char ctl_addr[64], data_addr[64];
	struct ferry_engine *e;
	struct ferry_opts o;
	struct kid k;

	(void)state;
	tcp_opts(&o);
	assert_int_equal(ferry_engine_create(&o, &e), 0);
	snprintf(ctl_addr, sizeof(ctl_addr), "%s", ferry_engine_address(e));
	data_listener(e, data_addr, sizeof(data_addr));
	assert_int_equal(try_connect(ctl_addr), 0);
	k = kid_idle(true);
	ferry_engine_destroy(e);
	assert_int_equal(try_connect(ctl_addr), -ECONNREFUSED);
	assert_int_equal(try_connect(data_addr), -ECONNREFUSED);
	assert_int_equal(kid_end(k), 0);
}

/* The parent's initiator goes while a child lives: the target sees its
 * control connection close (before: the child's copy kept it open, and
 * the target held it until its 60 s idle timeout). */
static void test_peer_sees_close(void **state)
{
	struct ferry_engine *t, *i;
	struct ferry_opts o;
	ferry_seg_t seg;
	struct kid k;

	(void)state;
	tcp_opts(&o);
	assert_int_equal(ferry_engine_create(&o, &t), 0);
	assert_int_equal(ferry_engine_create(&o, &i), 0);
	assert_int_equal(ferry_segment_open(i, ferry_engine_address(t), &seg), 0);
	WAIT_UNTIL(READ_ONCE(t->ctl.n_conns) >= 1, WAIT_DEADLINE_MS, "the initiator's connection");
	k = kid_idle(true);
	ferry_engine_destroy(i);
	WAIT_UNTIL(READ_ONCE(t->ctl.n_conns) == 0, WAIT_DEADLINE_MS,
		   "the target to see the initiator's connections close (%u open)",
		   READ_ONCE(t->ctl.n_conns));
	assert_int_equal(kid_end(k), 0);
	ferry_engine_destroy(t);
}

/* How many fds the epoll instance epfd of this process watches. */
static int epoll_watches(int epfd)
{
	char path[64], line[256];
	int n = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", epfd);
	f = fopen(path, "re");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		n += !strncmp(line, "tfd:", 4);
	fclose(f);
	return n;
}

/*
 * The control server refuses a connection that a child also holds, and
 * the peer then closes it: the server must not hear of the freed
 * connection again (before: close() left it in the epoll set while the
 * child's copy lived, and the peer's FIN came back as an event on freed
 * memory: ASan's heap-use-after-free).  Then the server still serves.
 */
static void test_server_close_with_kid(void **state)
{
	struct ferry_engine *t, *i;
	struct sockaddr_in sa;
	struct ferry_opts o;
	uint8_t junk[64], sink[256];
	struct pollfd pfd;
	ferry_seg_t seg;
	struct kid k;
	int fd;

	(void)state;
	tcp_opts(&o);
	assert_int_equal(ferry_engine_create(&o, &t), 0);
	parse_addr(ferry_engine_address(t), &sa);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	WAIT_UNTIL(READ_ONCE(t->ctl.n_conns) == 1, WAIT_DEADLINE_MS, "the connection accepted");
	k = kid_idle(true); /* it holds the server's side of fd's connection */
	memset(junk, 0xa5, sizeof(junk));
	assert_int_equal(write(fd, junk, sizeof(junk)), sizeof(junk));
	/* The server refuses it and says it is done (its FIN). */
	pfd = (struct pollfd){ .fd = fd, .events = POLLIN };
	for (;;) {
		ssize_t n;

		assert_int_equal(poll(&pfd, 1, WAIT_DEADLINE_MS), 1);
		n = read(fd, sink, sizeof(sink));
		if (n <= 0)
			break;
	}
	WAIT_UNTIL(READ_ONCE(t->ctl.n_conns) == 0, WAIT_DEADLINE_MS, "the refused connection gone");
	close(fd); /* our FIN: an event, if the server still watched its copy */
	assert_int_equal(epoll_watches(t->ctl.epoll_fd), 2); /* the listener, the stop eventfd */
	assert_int_equal(ferry_engine_create(&o, &i), 0);
	assert_int_equal(ferry_segment_open(i, ferry_engine_address(t), &seg), 0);
	assert_int_equal(ferry_segment_close(i, seg), 0);
	ferry_engine_destroy(i);
	assert_int_equal(kid_end(k), 0);
	ferry_engine_destroy(t);
}

/*
 * A parent with an engine forks a worker and is killed (no destroy): the
 * worker must not keep the engine's listeners (before: they accepted for
 * the worker's whole life, so peers' opens hung instead of failing at
 * once).  The test runner is the peer; the parent is this program run
 * again (fork and exec: the runner has threads, liburcu's at least, and
 * a fresh process may start its own under TSan).
 */
static int killed_parent_main(int up, int life)
{
	struct ferry_engine *e;
	struct ferry_opts o;
	char addrs[2][64], c;
	int born[2];

	tcp_opts(&o);
	if (ferry_engine_create(&o, &e) || pipe(born))
		return 1;
	snprintf(addrs[0], sizeof(addrs[0]), "%s", ferry_engine_address(e));
	data_listener(e, addrs[1], sizeof(addrs[1]));
	if (fork() == 0) { /* the worker: lives until the runner closes life */
		/* Past its fork handlers: say so (before that, it still held
		 * copies: a parent killed in that instant leaves them to it). */
		if (write(born[1], "k", 1) != 1)
			_exit(1);
		while (read(life, &c, 1) < 0 && errno == EINTR)
			;
		_exit(0);
	}
	if (read(born[0], &c, 1) != 1 || write(up, addrs, sizeof(addrs)) != sizeof(addrs))
		return 2;
	for (;;)
		pause(); /* until killed */
}

static void test_killed_parent_leaves_no_listener(void **state)
{
	char addrs[2][64], a1[16], a2[16];
	int up[2], life[2], st;
	pid_t parent;

	(void)state;
	assert_int_equal(pipe(up), 0);
	assert_int_equal(pipe(life), 0);
	parent = fork();
	assert_true(parent >= 0);
	if (parent == 0) {
		close(up[0]);
		close(life[1]);
		snprintf(a1, sizeof(a1), "%d", up[1]);
		snprintf(a2, sizeof(a2), "%d", life[0]);
		execl("/proc/self/exe", "test_fork", "--killed-parent", a1, a2, (char *)NULL);
		_exit(127);
	}
	close(up[1]);
	close(life[0]);
	assert_int_equal(read(up[0], addrs, sizeof(addrs)), sizeof(addrs));
	close(up[0]);
	assert_int_equal(kill(parent, SIGKILL), 0);
	assert_int_equal(waitpid(parent, &st, 0), parent);
	assert_int_equal(try_connect(addrs[0]), -ECONNREFUSED);
	assert_int_equal(try_connect(addrs[1]), -ECONNREFUSED);
	close(life[1]); /* the worker goes (init reaps it) */
}


/* ---- calls on inherited engines ----------------------------------------- */

enum {
	C_SUBMIT, C_TRY_SUBMIT, C_WAIT, C_CANCEL, C_RESET, C_NOTIFY, C_PREP_SUBMIT,
	C_PREP_CREATE, C_PREP_DESTROY, C_BATCH_CREATE, C_BATCH_DESTROY, C_PORT_CREATE,
	C_PORT_DESTROY, C_REGISTER, C_REGISTER_ACCESS, C_UNREGISTER, C_OPEN, C_REFRESH,
	C_CLOSE, C_REGIONS, C_TRANSPORT, C_PROGRESS, C_STATS, C_NOTE, C_PROM, C_NOTIF_POLL,
	C_N
};

static const char *const call_name[C_N] = {
	"ferry_submit", "ferry_try_submit", "ferry_batch_wait", "ferry_batch_cancel",
	"ferry_batch_reset", "ferry_notify", "ferry_prep_submit", "ferry_prep_create",
	"ferry_prep_destroy", "ferry_batch_create", "ferry_batch_destroy", "ferry_port_create",
	"ferry_port_destroy", "ferry_mem_register", "ferry_mem_register_access",
	"ferry_mem_unregister", "ferry_segment_open", "ferry_segment_refresh",
	"ferry_segment_close", "ferry_segment_regions", "ferry_segment_transport",
	"ferry_progress", "ferry_core_stats", "ferry_core_counters_note",
	"ferry_stats_format_prometheus", "ferry_notif_poll",
};

/* What the child calls its copies with: a pair, a port, a batch, a prep. */
struct world {
	struct pair p;
	struct ferry_batch *b;
	struct ferry_prep *pr;
	uint8_t *spare; /* not registered */
};

/*
 * In the child: every call on the inherited objects, results into rc[]
 * (ferry_segment_transport: -EOWNERDEAD for its NULL).  The requests are
 * valid ones: before the fix they went to the parent's cores' rings and a
 * wait ran a core's pass here.
 */
static void child_calls(struct world *w, int *rc)
{
	struct ferry_req r = mkreq(FERRY_OP_WRITE, w->p.lbuf, w->p.seg, w->p.rbuf, 4096);
	struct ferry_region_info regs[4];
	struct ferry_core_stats st;
	struct ferry_notif nf;
	struct ferry_prep *pr2;
	struct ferry_batch *b2;
	struct ferry_port *p2;
	ferry_seg_t s2;
	uint32_t idx = 0;
	char buf[256];

	rc[C_SUBMIT] = ferry_submit(w->b, &r, 1);
	rc[C_TRY_SUBMIT] = ferry_try_submit(w->b, &r, 1);
	rc[C_WAIT] = ferry_batch_wait(w->b, 1000);
	rc[C_CANCEL] = ferry_batch_cancel(w->b);
	rc[C_RESET] = ferry_batch_reset(w->b);
	rc[C_NOTIFY] = ferry_notify(w->b, w->p.seg, "x", 1);
	rc[C_PREP_SUBMIT] = ferry_prep_submit(w->b, w->pr, &idx, 1);
	rc[C_PREP_CREATE] = ferry_prep_create(w->p.port, w->p.seg, &r, 1, &pr2);
	rc[C_PREP_DESTROY] = ferry_prep_destroy(w->pr);
	rc[C_BATCH_CREATE] = ferry_batch_create(w->p.port, 4, &b2);
	rc[C_BATCH_DESTROY] = ferry_batch_destroy(w->b);
	rc[C_PORT_CREATE] = ferry_port_create(w->p.init, &p2);
	rc[C_PORT_DESTROY] = ferry_port_destroy(w->p.port);
	rc[C_REGISTER] = ferry_mem_register(w->p.init, w->spare, 4096);
	rc[C_REGISTER_ACCESS] = ferry_mem_register_access(w->p.init, w->spare, 4096, 0);
	rc[C_UNREGISTER] = ferry_mem_unregister(w->p.init, w->p.lbuf);
	rc[C_OPEN] = ferry_segment_open(w->p.init, ferry_engine_address(w->p.target), &s2);
	rc[C_REFRESH] = ferry_segment_refresh(w->p.init, w->p.seg);
	rc[C_CLOSE] = ferry_segment_close(w->p.init, w->p.seg);
	rc[C_REGIONS] = ferry_segment_regions(w->p.init, w->p.seg, regs, 4);
	rc[C_TRANSPORT] = ferry_segment_transport(w->p.init, w->p.seg) ? 0 : -EOWNERDEAD;
	rc[C_PROGRESS] = ferry_progress(w->p.init);
	rc[C_STATS] = ferry_core_stats(w->p.init, 0, &st);
	rc[C_NOTE] = ferry_core_counters_note(w->p.init, 0, buf, sizeof(buf));
	rc[C_PROM] = ferry_stats_format_prometheus(w->p.init, buf, sizeof(buf));
	rc[C_NOTIF_POLL] = ferry_notif_poll(w->p.target, &nf, 1);
}

/* A WRITE then a READ back of a fresh pattern over w's segment: both DONE,
 * every byte where it belongs. */
static void parent_transfers(struct world *w, uint64_t seed)
{
	struct ferry_req wr = mkreq(FERRY_OP_WRITE, w->p.lbuf, w->p.seg, w->p.rbuf, BUF / 2);
	struct ferry_req rd = mkreq(FERRY_OP_READ, w->p.lbuf + BUF / 2, w->p.seg, w->p.rbuf,
				    BUF / 2);

	fill_pattern(w->p.lbuf, BUF / 2, seed);
	poison(w->p.rbuf, w->p.lbuf, BUF / 2);
	assert_int_equal(run_one_on(w->p.port, wr, 30000).state, FERRY_DONE);
	assert_int_equal(run_one_on(w->p.port, rd, 30000).state, FERRY_DONE);
	assert_memory_equal(w->p.rbuf, w->p.lbuf, BUF / 2);
	assert_memory_equal(w->p.lbuf + BUF / 2, w->p.lbuf, BUF / 2);
}

/* Wait (bounded) for pid to exit; its status, or fail after killing it. */
static int reap_bounded(pid_t pid, const char *what)
{
	int64_t end = wait_now_ms() + 30000;
	int st;

	for (;;) {
		pid_t r = waitpid(pid, &st, WNOHANG);

		if (r == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		assert_int_equal(r, 0);
		if (wait_now_ms() >= end) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			fail_msg("%s: still running after 30 s (killed)", what);
		}
		nanosleep(&(struct timespec){ 0, WAIT_POLL_NS }, NULL);
	}
}

/*
 * Over nics: a pair with a segment, a port, a batch and a prepared set that
 * moved data; a child forked from it (a plain fork: the handlers run)
 * calls everything on its copies, then destroys both engines; the parent
 * moves data while the child lives (the child waits with its results
 * sent) and after.  Before: the child's submit was taken (0) and queued
 * on the parent's cores' rings, its wait drove a core's pass in the child
 * (adaptive idle), its segment close and engine destroy told the target
 * (the parent's QPs gone) or hung joining threads that are not there.
 */
static void calls_in_child(const char *nics)
{
	struct ferry_req r;
	struct world w;
	struct ferry_opts o;
	int rc[C_N], up[2], hold[2];
	pid_t pid;
	char c;

	pair_opts(&o, "0-1");
	o.nics = nics;
	pair_setup(&w.p, &o, &o, BUF);
	pair_open_port(&w.p);
	w.spare = aligned_alloc(4096, 4096);
	assert_non_null(w.spare);
	assert_int_equal(ferry_batch_create(w.p.port, 8, &w.b), 0);
	r = mkreq(FERRY_OP_WRITE, w.p.lbuf, w.p.seg, w.p.rbuf, 4096);
	assert_int_equal(ferry_prep_create(w.p.port, w.p.seg, &r, 1, &w.pr), 0);
	parent_transfers(&w, 1);
	assert_int_equal(pipe(up), 0);
	assert_int_equal(pipe(hold), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(up[0]);
		close(hold[1]);
		for (unsigned k = 0; k < C_N; k++)
			rc[k] = 1; /* "not called" */
		child_calls(&w, rc);
		if (write(up[1], rc, sizeof(rc)) != sizeof(rc))
			_exit(2);
		while (read(hold[0], &c, 1) < 0 && errno == EINTR)
			;
		ferry_engine_destroy(w.p.init); /* must neither hang nor tell the target */
		ferry_engine_destroy(w.p.target);
		_exit(0);
	}
	close(up[1]);
	close(hold[0]);
	if (poll(&(struct pollfd){ .fd = up[0], .events = POLLIN }, 1, 30000) != 1) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		fail_msg("over %s, the child's calls still running after 30 s (killed)", nics);
	}
	assert_int_equal(read(up[0], rc, sizeof(rc)), sizeof(rc));
	close(up[0]);
	for (unsigned k = 0; k < C_N; k++)
		if (rc[k] != -EOWNERDEAD)
			fail_msg("over %s, in the child, %s returned %d, not -EOWNERDEAD", nics,
				 call_name[k], rc[k]);
	parent_transfers(&w, 2); /* while the child lives */
	close(hold[1]);
	assert_int_equal(reap_bounded(pid, "the child destroying its copies"), 0);
	parent_transfers(&w, 3); /* after: the child told nobody anything */
	assert_int_equal(ferry_prep_destroy(w.pr), 0);
	assert_int_equal(ferry_batch_destroy(w.b), 0);
	assert_engine_quiet(w.p.init);
	pair_teardown(&w.p);
	free(w.spare);
}

static void test_calls_in_child_loop(void **state)
{
	(void)state;
	calls_in_child("loop");
}

static void test_calls_in_child_tcp(void **state)
{
	(void)state;
	calls_in_child("tcp");
}

static void test_calls_in_child_cma(void **state)
{
	(void)state;
	calls_in_child("cma");
}

/*
 * Over nics: a child forked while engines run asks for engines of its
 * own: refused -EOWNERDEAD at once, clearly, where it used to hang in
 * urcu_qsbr_synchronize_rcu at its first ferry_port_destroy (the child's
 * liburcu-qsbr still lists the parent's threads, which do not exist
 * there; 30 s and killed in every run).  Under TSan too: the child starts
 * no thread.  A grandchild of a process with no engine may create them
 * (the refusal is only for a fork with engines running).
 */
static int child_own_engines(const char *nics)
{
	struct ferry_engine *e = NULL;
	struct ferry_opts o;

	pair_opts(&o, "0");
	o.nics = nics;
	if (ferry_engine_create(&o, &e) != -EOWNERDEAD || e)
		return 10;
	return 0;
}

static void own_engines_in_child(const char *nics)
{
	struct ferry_opts o;
	struct pair p;
	pid_t pid;

	pair_opts(&o, "0-1");
	o.nics = nics;
	pair_setup(&p, &o, &o, BUF);
	pair_open_port(&p);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(child_own_engines(nics));
	assert_int_equal(reap_bounded(pid, "the child asking for engines of its own"), 0);
	pair_teardown(&p);
}

static void test_own_engines_in_child_loop(void **state)
{
	(void)state;
	own_engines_in_child("loop");
}

static void test_own_engines_in_child_tcp(void **state)
{
	(void)state;
	own_engines_in_child("tcp");
}

/*
 * ferry_log_set is no engine's call: a child may set its own sink.  A
 * child forked while a ferry thread was inside the sink (where it holds
 * the sink's lock for reading) got the lock held by a thread it does not
 * have, and its ferry_log_set waited for it for good.
 */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int inside, release;
} held_sink = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0 };

static void holding_sink(void *arg, enum ferry_log_level level, const char *msg)
{
	(void)arg;
	(void)level;
	(void)msg;
	pthread_mutex_lock(&held_sink.lock);
	held_sink.inside = 1;
	pthread_cond_broadcast(&held_sink.cond);
	while (!held_sink.release)
		pthread_cond_wait(&held_sink.cond, &held_sink.lock);
	pthread_mutex_unlock(&held_sink.lock);
}

static void *log_one_line(void *arg)
{
	(void)arg;
	log_warn("test_fork: a line its sink holds on to");
	return NULL;
}

static void test_log_set_in_child(void **state)
{
	struct ferry_opts o;
	struct pair p;
	pthread_t th;
	pid_t pid;

	(void)state;
	pair_opts(&o, "0");
	o.nics = "loop";
	pair_setup(&p, &o, &o, BUF); /* engines: the fork handlers are in */
	ferry_log_set(holding_sink, NULL);
	assert_int_equal(pthread_create(&th, NULL, log_one_line, NULL), 0);
	pthread_mutex_lock(&held_sink.lock);
	while (!held_sink.inside)
		pthread_cond_wait(&held_sink.cond, &held_sink.lock);
	pthread_mutex_unlock(&held_sink.lock);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		alarm(5); /* a hang ends the child: 128 + SIGALRM */
		ferry_log_set(NULL, NULL);
		_exit(0);
	}
	assert_int_equal(reap_bounded(pid, "the child setting its sink"), 0);
	pthread_mutex_lock(&held_sink.lock);
	held_sink.release = 1;
	pthread_cond_broadcast(&held_sink.cond);
	pthread_mutex_unlock(&held_sink.lock);
	pthread_join(th, NULL);
	ferry_log_set(NULL, NULL);
	pair_teardown(&p);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_listeners_refuse_after_destroy),
		cmocka_unit_test(test_peer_sees_close),
		cmocka_unit_test(test_server_close_with_kid),
		cmocka_unit_test(test_killed_parent_leaves_no_listener),
		cmocka_unit_test(test_calls_in_child_loop),
		cmocka_unit_test(test_calls_in_child_tcp),
		cmocka_unit_test(test_calls_in_child_cma),
		cmocka_unit_test(test_own_engines_in_child_loop),
		cmocka_unit_test(test_own_engines_in_child_tcp),
		cmocka_unit_test(test_log_set_in_child),
	};

	if (argc == 4 && !strcmp(argv[1], "--killed-parent"))
		return killed_parent_main(atoi(argv[2]), atoi(argv[3]));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
