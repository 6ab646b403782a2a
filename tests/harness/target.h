/* SPDX-License-Identifier: MIT */
/*
 * A target engine in another process, for the tests that cross processes
 * or kill their peer.  The test binary re-executes itself
 * (/proc/self/exe): a fresh process, so no lock of the parent's threads is
 * inherited by a fork() of a multi-threaded test.  The child creates an
 * engine with the nics and control address asked for, registers a buffer
 * filled with fill_pattern(seed) and answers commands on a pipe:
 *
 *   'h'  the FNV-1a hash of its whole buffer (what the bytes are, seen
 *        from inside the target, not through a READ);
 *   'r'  register a second, read-only region (pattern seed + 1) and say
 *        where; 'u' unregister it;
 *   'q'  unregister, destroy the engine, exit 0.
 *
 * Every answer is one fixed-size line.  main() calls target_main_if(argc,
 * argv) first: in the child it never returns.
 */
#ifndef FERRY_TESTS_TARGET_H
#define FERRY_TESTS_TARGET_H

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/harness/harness.h"

#define TARGET_ARG "--ferry-test-target"
#define TARGET_MSG 128
#define TARGET_RO_LEN (256u << 10)

struct target {
	pid_t pid;
	int cmd;             /* commands to the target */
	int rsp;             /* its answers */
	char addr[64];       /* control address, for ferry_segment_open */
	uint64_t buf, len;   /* its registered buffer */
	uint64_t seed;
};

/*
 * The hash of a buffer.  Not instrumented by ThreadSanitizer: in a target,
 * the bytes were written by its core thread (a WRITE received over tcp)
 * and the order that makes reading them safe runs through the other
 * process (its completion, then our 'h' command), which TSan cannot see.
 */
static inline __attribute__((no_sanitize("thread"))) uint64_t fnv1a(const uint8_t *p, size_t len)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < len; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h;
}

static inline int target_say(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline int target_say(int fd, const char *fmt, ...)
{
	char msg[TARGET_MSG] = { 0 };
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return write(fd, msg, sizeof(msg)) == (ssize_t)sizeof(msg) ? 0 : -EIO;
}

/* The child: argv = exe TARGET_ARG nics listen len seed cmd_fd rsp_fd */
static inline int target_child(char **argv)
{
	size_t len = strtoull(argv[4], NULL, 0);
	uint64_t seed = strtoull(argv[5], NULL, 0);
	int in = atoi(argv[6]), out = atoi(argv[7]);
	uint8_t *buf = aligned_alloc(4096, len), *ro = NULL;
	struct ferry_engine *e;
	struct ferry_opts o;
	char c;

	ferry_opts_default(&o);
	o.cores = "0";
	o.nics = argv[2];
	o.listen = argv[3];
	if (!buf || ferry_engine_create(&o, &e))
		return 2;
	fill_pattern(buf, len, seed);
	if (ferry_mem_register(e, buf, len))
		return 3;
	if (target_say(out, "%s %llu", ferry_engine_address(e), (unsigned long long)(uintptr_t)buf))
		return 4;
	while (read(in, &c, 1) == 1) {
		if (c == 'h') {
			target_say(out, "%llu", (unsigned long long)fnv1a(buf, len));
		} else if (c == 'r') {
			ro = aligned_alloc(4096, TARGET_RO_LEN);
			fill_pattern(ro, TARGET_RO_LEN, seed + 1);
			target_say(out, "%d %llu",
				   ferry_mem_register_access(e, ro, TARGET_RO_LEN, FERRY_ACCESS_REMOTE_READ),
				   (unsigned long long)(uintptr_t)ro);
		} else if (c == 'u') {
			target_say(out, "%d", ferry_mem_unregister(e, ro));
			free(ro);
			ro = NULL;
		} else if (c == 'q') {
			break;
		}
	}
	ferry_mem_unregister(e, buf);
	ferry_engine_destroy(e);
	free(buf);
	return 0;
}

static inline void target_main_if(int argc, char **argv)
{
	if (argc == 8 && strcmp(argv[1], TARGET_ARG) == 0)
		_exit(target_child(argv));
}

/* Read one answer; false if the target is gone. */
static inline bool target_read(struct target *t, char *msg)
{
	size_t got = 0;

	while (got < TARGET_MSG) {
		ssize_t n = read(t->rsp, msg + got, TARGET_MSG - got);

		if (n <= 0)
			return false;
		got += (size_t)n;
	}
	msg[TARGET_MSG - 1] = 0;
	return true;
}

/*
 * Start a target: nics ("tcp", "cma", ...), listen ("127.0.0.1:0", or the
 * address of a target that went away, to restart it there), a buffer of
 * len bytes filled with fill_pattern(seed).  Returns 0, or -1 if the child
 * did not come up (e.g. its address is still taken).
 */
static inline int target_start(struct target *t, const char *nics, const char *listen,
			       size_t len, uint64_t seed)
{
	int down[2], up[2];
	char a[6][32], msg[TARGET_MSG];
	unsigned long long buf;

	memset(t, 0, sizeof(*t));
	assert_int_equal(pipe2(down, O_CLOEXEC), 0);
	assert_int_equal(pipe2(up, O_CLOEXEC), 0);
	snprintf(a[0], sizeof(a[0]), "%zu", len);
	snprintf(a[1], sizeof(a[1]), "%llu", (unsigned long long)seed);
	snprintf(a[2], sizeof(a[2]), "%d", down[0]);
	snprintf(a[3], sizeof(a[3]), "%d", up[1]);
	t->pid = fork();
	assert_true(t->pid >= 0);
	if (t->pid == 0) {
		/* Only the two ends the child uses survive the exec. */
		fcntl(down[0], F_SETFD, 0);
		fcntl(up[1], F_SETFD, 0);
		/* A test that fails with its target stopped (SIGSTOP) leaves no
		 * orphan holding its pipes: the exec keeps this. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		execl("/proc/self/exe", "ferry-test-target", TARGET_ARG, nics, listen, a[0], a[1],
		      a[2], a[3], (char *)NULL);
		_exit(127);
	}
	close(down[0]);
	close(up[1]);
	t->cmd = down[1];
	t->rsp = up[0];
	t->len = len;
	t->seed = seed;
	if (!target_read(t, msg)) {
		close(t->cmd);
		close(t->rsp);
		waitpid(t->pid, NULL, 0);
		t->pid = 0;
		return -1;
	}
	assert_int_equal(sscanf(msg, "%63s %llu", t->addr, &buf), 2);
	t->buf = buf;
	return 0;
}

/* Send a command; read its answer into msg (if msg). */
static inline void target_cmd(struct target *t, char c, char *msg)
{
	char m[TARGET_MSG];

	assert_int_equal(write(t->cmd, &c, 1), 1);
	if (msg || c != 'q')
		assert_true(target_read(t, msg ? msg : m));
}

static inline uint64_t target_hash(struct target *t)
{
	char msg[TARGET_MSG];

	target_cmd(t, 'h', msg);
	return strtoull(msg, NULL, 10);
}

/* Ask it to exit; it must exit 0. */
static inline void target_stop(struct target *t)
{
	int status;

	target_cmd(t, 'q', NULL);
	assert_int_equal(waitpid(t->pid, &status, 0), t->pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	close(t->cmd);
	close(t->rsp);
	t->pid = 0;
}

/* Kill it (SIGKILL: no chance to clean up) and reap it. */
static inline void target_kill(struct target *t)
{
	assert_int_equal(kill(t->pid, SIGKILL), 0);
	assert_int_equal(waitpid(t->pid, NULL, 0), t->pid);
	close(t->cmd);
	close(t->rsp);
	t->pid = 0;
}

#endif /* FERRY_TESTS_TARGET_H */
