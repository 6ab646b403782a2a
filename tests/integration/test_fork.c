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
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "qp/tcp/objects.h"
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

	tcp_opts(&o);
	if (ferry_engine_create(&o, &e))
		return 1;
	snprintf(addrs[0], sizeof(addrs[0]), "%s", ferry_engine_address(e));
	data_listener(e, addrs[1], sizeof(addrs[1]));
	if (fork() == 0) { /* the worker: lives until the runner closes life */
		while (read(life, &c, 1) < 0 && errno == EINTR)
			;
		_exit(0);
	}
	if (write(up, addrs, sizeof(addrs)) != sizeof(addrs))
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

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_listeners_refuse_after_destroy),
		cmocka_unit_test(test_peer_sees_close),
		cmocka_unit_test(test_server_close_with_kid),
		cmocka_unit_test(test_killed_parent_leaves_no_listener),
	};

	if (argc == 4 && !strcmp(argv[1], "--killed-parent"))
		return killed_parent_main(atoi(argv[2]), atoi(argv[3]));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
