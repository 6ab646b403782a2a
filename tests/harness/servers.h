/* SPDX-License-Identifier: MIT */
/*
 * Real store servers for the metadata tests: redis-server and etcd, each in
 * a temporary directory on ephemeral loopback ports, stopped by pid.
 *
 *   struct test_server s;
 *   server_start(&s, SERVER_REDIS);   0; -ENOENT when the binary is missing
 *   s.url                             "redis://127.0.0.1:P" / "etcd://127.0.0.1:P"
 *   server_kill(&s, SIGKILL);         the process goes, ports and directory stay
 *   server_restart(&s);               the same ports and data directory again
 *   server_stop(&s);                  SIGTERM (SIGKILL after 5 s), directory removed
 *
 * Ports: bound to 127.0.0.1:0 to learn a free one, closed, handed to the
 * server; if it exits before answering (someone took the port meanwhile),
 * new ports are picked, up to 5 times.  Ready means answering: redis PING
 * -> +PONG, etcd GET /health -> "health":"true" (a leader is elected), polled
 * every 10 ms up to SERVER_START_MS -- a condition, not a sleep.  The
 * server's output goes to <dir>/log, printed when it fails to start.  The
 * child gets PR_SET_PDEATHSIG, so a test that crashes leaves no server
 * behind.
 *
 * A missing binary: SERVERS_REQUIRE skips the test loudly with the
 * apt-get line, and fails it under CI=true (CI must run these tests).
 * Header-only, like harness.h, so every test binary stays one file.
 */
#ifndef FERRY_TESTS_SERVERS_H
#define FERRY_TESTS_SERVERS_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SERVER_START_MS 30000
#define SERVER_APT "apt-get install -y redis-server etcd-server (or: .ci/install-deps test)"

enum test_server_kind { SERVER_REDIS, SERVER_ETCD };

struct test_server {
	enum test_server_kind kind;
	pid_t pid;                     /* 0: not running */
	uint16_t port, peer_port;      /* client port; etcd's peer port */
	char bin[256];                 /* the binary's path */
	char dir[128];                 /* temporary directory: data, log */
	char url[64];                  /* "redis://127.0.0.1:P", "etcd://127.0.0.1:P" */
};

static inline int64_t server_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The binary's path from $PATH; false if there is none. */
static inline bool server_which(const char *name, char *out, size_t cap)
{
	const char *path = getenv("PATH");
	char dirs[1024];

	snprintf(dirs, sizeof(dirs), "%s", path ? path : "/usr/bin:/bin");
	for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
		snprintf(out, cap, "%s/%s", d, name);
		if (access(out, X_OK) == 0)
			return true;
	}
	return false;
}

/* A port free right now on 127.0.0.1 (the kernel's pick). */
static inline uint16_t server_free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	uint16_t port = 0;

	if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

/* Send req to 127.0.0.1:port and read the answer (100 ms at most); true if
 * it contains want. */
static inline bool server_ask(uint16_t port, const char *req, const char *want)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct timeval tv = { 0, 100000 };
	char buf[1024];
	size_t got = 0;
	bool ok = false;
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0)
		return false;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    send(fd, req, strlen(req), MSG_NOSIGNAL) == (ssize_t)strlen(req)) {
		while (!ok && got < sizeof(buf) - 1) {
			ssize_t n = recv(fd, buf + got, sizeof(buf) - 1 - got, 0);

			if (n <= 0)
				break;
			got += (size_t)n;
			buf[got] = '\0';
			ok = strstr(buf, want) != NULL;
		}
	}
	close(fd);
	return ok;
}

static inline bool server_ready(const struct test_server *s)
{
	if (s->kind == SERVER_REDIS)
		return server_ask(s->port, "PING\r\n", "+PONG");
	return server_ask(s->port, "GET /health HTTP/1.0\r\n\r\n", "\"health\":\"true\"");
}

static inline void server_print_log(const struct test_server *s)
{
	char path[160], line[256];
	long size;
	FILE *f;

	snprintf(path, sizeof(path), "%s/log", s->dir);
	f = fopen(path, "r");
	if (!f)
		return;
	fprintf(stderr, "---- %s (last lines) ----\n", path);
	fseek(f, 0, SEEK_END);
	size = ftell(f);
	fseek(f, size > 2048 ? size - 2048 : 0, SEEK_SET);
	while (fgets(line, sizeof(line), f))
		fputs(line, stderr);
	fclose(f);
}

/* Fork and exec the server on s->port (and s->peer_port); no waiting. */
static inline pid_t server_spawn(struct test_server *s)
{
	char p[16], url[64], peer[64], cluster[96], data[160], log[160];
	char *argv[24];
	int n = 0;
	pid_t pid;

	snprintf(p, sizeof(p), "%u", s->port);
	snprintf(url, sizeof(url), "http://127.0.0.1:%u", s->port);
	snprintf(peer, sizeof(peer), "http://127.0.0.1:%u", s->peer_port);
	snprintf(cluster, sizeof(cluster), "ferrytest=%s", peer);
	snprintf(data, sizeof(data), "%s/data", s->dir);
	snprintf(log, sizeof(log), "%s/log", s->dir);
	argv[n++] = s->bin;
	if (s->kind == SERVER_REDIS) {
		char *a[] = { "--port", p, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			      "--dir", s->dir, "--daemonize", "no" };

		for (size_t i = 0; i < sizeof(a) / sizeof(a[0]); i++)
			argv[n++] = a[i];
	} else {
		char *a[] = { "--name", "ferrytest", "--data-dir", data,
			      "--listen-client-urls", url, "--advertise-client-urls", url,
			      "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			      "--initial-cluster", cluster };

		for (size_t i = 0; i < sizeof(a) / sizeof(a[0]); i++)
			argv[n++] = a[i];
	}
	argv[n] = NULL;
	pid = fork();
	if (pid == 0) { /* only async-signal-safe calls until exec */
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execv(s->bin, argv);
		_exit(127);
	}
	return pid;
}

/* SIGTERM (or sig), SIGKILL if it is still there after 5 s; reaped. */
static inline void server_kill(struct test_server *s, int sig)
{
	int64_t end = server_now_ms() + 5000;
	int status;

	if (s->pid <= 0)
		return;
	kill(s->pid, sig);
	while (waitpid(s->pid, &status, WNOHANG) == 0) {
		if (server_now_ms() > end) {
			kill(s->pid, SIGKILL);
			waitpid(s->pid, &status, 0);
			break;
		}
		nanosleep(&(struct timespec){ 0, 10000000 }, NULL);
	}
	s->pid = 0;
}

/* Start on s's ports and wait until it answers; -EADDRINUSE if it exited
 * first (a port was taken), -ETIMEDOUT. */
static inline int server_run(struct test_server *s)
{
	int64_t end = server_now_ms() + SERVER_START_MS;
	int status;

	s->pid = server_spawn(s);
	if (s->pid < 0) {
		s->pid = 0;
		return -errno;
	}
	while (!server_ready(s)) {
		if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
			s->pid = 0;
			return -EADDRINUSE;
		}
		if (server_now_ms() > end) {
			server_print_log(s);
			server_kill(s, SIGKILL);
			return -ETIMEDOUT;
		}
		nanosleep(&(struct timespec){ 0, 10000000 }, NULL);
	}
	return 0;
}

static inline int server_rm(const char *path, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	return remove(path);
}

/* 0, or -ENOENT when the binary is missing (see SERVERS_REQUIRE), or why it did not start. */
static inline int server_start(struct test_server *s, enum test_server_kind kind)
{
	const char *name = kind == SERVER_REDIS ? "redis-server" : "etcd";
	int rc = -EADDRINUSE;

	memset(s, 0, sizeof(*s));
	s->kind = kind;
	if (!server_which(name, s->bin, sizeof(s->bin)))
		return -ENOENT;
	snprintf(s->dir, sizeof(s->dir), "/tmp/ferry-%s-XXXXXX", kind == SERVER_REDIS ? "redis" : "etcd");
	if (!mkdtemp(s->dir))
		return -errno;
	for (int tries = 0; tries < 5 && rc == -EADDRINUSE; tries++) {
		s->port = server_free_port();
		s->peer_port = server_free_port();
		if (s->port == 0 || s->peer_port == 0 || s->port == s->peer_port)
			continue;
		rc = server_run(s);
		if (rc == -EADDRINUSE)
			server_print_log(s); /* usually "address in use": try other ports */
	}
	if (rc == 0)
		snprintf(s->url, sizeof(s->url), "%s://127.0.0.1:%u",
			 kind == SERVER_REDIS ? "redis" : "etcd", s->port);
	else
		nftw(s->dir, server_rm, 8, FTW_DEPTH | FTW_PHYS);
	return rc;
}

/* The same ports and data directory again (after server_kill). */
static inline int server_restart(struct test_server *s)
{
	int64_t end = server_now_ms() + SERVER_START_MS;
	int rc;

	/* the old listener's port can take a moment to be free again */
	while ((rc = server_run(s)) == -EADDRINUSE && server_now_ms() < end)
		nanosleep(&(struct timespec){ 0, 50000000 }, NULL);
	return rc;
}

static inline void server_stop(struct test_server *s)
{
	server_kill(s, SIGTERM);
	if (s->dir[0])
		nftw(s->dir, server_rm, 8, FTW_DEPTH | FTW_PHYS);
	s->dir[0] = '\0';
}

static inline bool server_ci(void)
{
	const char *ci = getenv("CI");

	return ci && strcmp(ci, "true") == 0;
}

/*
 * In a test: the server s (started by the group's setup, start_rc its
 * result) must be there.  A missing binary skips the test, loudly, with
 * the line that installs it -- unless CI=true, where it fails.
 */
#define SERVERS_REQUIRE(s, start_rc)                                                           \
	do {                                                                                   \
		if ((start_rc) == -ENOENT) {                                                   \
			print_message("SKIPPED: %s not found: %s\n",                           \
				      (s)->kind == SERVER_REDIS ? "redis-server" : "etcd",     \
				      SERVER_APT);                                             \
			if (server_ci())                                                       \
				fail_msg("CI=true: the metadata store tests must run");        \
			skip();                                                                \
		}                                                                              \
		assert_int_equal((start_rc), 0);                                               \
	} while (0)

#endif /* FERRY_TESTS_SERVERS_H */
