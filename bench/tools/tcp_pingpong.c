/* SPDX-License-Identifier: MIT */
/*
 * tcp_pingpong: the plain TCP baseline of bench/compare-tcp.sh for small
 * messages.  One connection (TCP_NODELAY), the client sends SIZE bytes,
 * the server sends them back, ITERS times; half round trips in us, as
 * ferry_bench --pingpong and ib_write_lat report them.
 *
 *   tcp_pingpong --server [--cpu N] [--busy]        prints "tcp_pingpong: port P"
 *   tcp_pingpong --connect HOST:PORT [--size 8] [--iters 100000] [--cpu N] [--busy]
 *
 * Blocking reads by default (what an application writes without
 * thinking); --busy polls with MSG_DONTWAIT instead, as ferry's cores spin
 * while work is in flight.  The server serves one connection and exits.
 * Client output, one line: "size S iters N min_us X p50_us X avg_us X
 * p99_us X" (half round trips).  Exit status 0 ok, 1 error, 2 usage.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tool.h"

#define MAX_SIZE 65536

const char tool_name[] = "tcp_pingpong";
static bool busy;

static int die(const char *what)
{
	fprintf(stderr, "tcp_pingpong: %s: %s\n", what, strerror(errno));
	return 1;
}

/* All LEN bytes or -1 (EOF counts as an error: the peer never stops early). */
static int xfer(int fd, char *buf, size_t len, bool out)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = out ? send(fd, buf + done, len - done, MSG_NOSIGNAL)
				: recv(fd, buf + done, len - done, busy ? MSG_DONTWAIT : 0);

		if (n > 0) {
			done += (size_t)n;
		} else if (n == 0) {
			errno = ECONNRESET;
			return -1;
		} else if (errno != EINTR && errno != EAGAIN) {
			return -1;
		}
	}
	return 0;
}

static void nodelay(int fd)
{
	int one = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* The server: echo every message back until the client closes. */
static int serve(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof(a);
	uint32_t hdr[2];
	static char buf[MAX_SIZE];
	int lfd, fd;

	lfd = socket(AF_INET, SOCK_STREAM, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) || listen(lfd, 1) ||
	    getsockname(lfd, (struct sockaddr *)&a, &alen))
		return die("listen");
	printf("tcp_pingpong: port %u\n", ntohs(a.sin_port));
	fflush(stdout);
	fd = accept(lfd, NULL, NULL);
	if (fd < 0)
		return die("accept");
	close(lfd);
	nodelay(fd);
	/* The client says the size and the count first (untimed). */
	if (xfer(fd, (char *)hdr, sizeof(hdr), false))
		return die("recv header");
	if (hdr[0] == 0 || hdr[0] > MAX_SIZE) {
		fprintf(stderr, "tcp_pingpong: bad size %u\n", hdr[0]);
		return 1;
	}
	for (uint32_t i = 0; i < hdr[1]; i++)
		if (xfer(fd, buf, hdr[0], false) || xfer(fd, buf, hdr[0], true))
			return die("echo");
	close(fd);
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * Nearest rank: the pct-th percentile of sorted[0, n) is the smallest
 * value with at least pct % of the n at or below it, rank ceil(n * pct /
 * 100), as ferry_bench's bench_percentile.  t[n / 2] and t[n * 99 / 100]
 * were a rank high: of 100 samples the 51st and the 100th (the maximum).
 */
static uint64_t nearest_rank(const uint64_t *sorted, uint32_t n, unsigned pct)
{
	uint64_t rank = ((uint64_t)n * pct + 99) / 100;

	return sorted[rank ? rank - 1 : 0];
}

/* The client's line, from the n sorted half round trips t (ns) and their sum. */
static void print_result(FILE *f, uint32_t size, uint32_t n, const uint64_t *t, uint64_t sum)
{
	fprintf(f, "size %u iters %u min_us %.3f p50_us %.3f avg_us %.3f p99_us %.3f\n", size, n,
		(double)t[0] / 1e3, (double)nearest_rank(t, n, 50) / 1e3, (double)sum / n / 1e3,
		(double)nearest_rank(t, n, 99) / 1e3);
}

static int client(const char *hostport, uint32_t size, uint32_t iters)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	char host[64], *colon;
	static char buf[MAX_SIZE];
	uint64_t *t, sum = 0;
	uint32_t hdr[2] = { size, iters };
	int fd;

	snprintf(host, sizeof(host), "%s", hostport);
	colon = strrchr(host, ':');
	if (colon)
		*colon = 0;
	if (!colon || inet_pton(AF_INET, host, &a.sin_addr) != 1) {
		fprintf(stderr, "tcp_pingpong: --connect wants IPv4:PORT, not %s\n", hostport);
		return 2;
	}
	a.sin_port = htons((uint16_t)atoi(colon + 1));
	t = calloc(iters, sizeof(*t));
	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (!t || fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)))
		return die("connect");
	nodelay(fd);
	if (xfer(fd, (char *)hdr, sizeof(hdr), true))
		return die("send header");
	memset(buf, 0x5a, size);
	for (uint32_t i = 0; i < iters; i++) {
		uint64_t t0 = now_ns();

		if (xfer(fd, buf, size, true) || xfer(fd, buf, size, false))
			return die("ping-pong");
		t[i] = (now_ns() - t0) / 2;
		sum += t[i];
	}
	close(fd);
	qsort(t, iters, sizeof(*t), cmp_u64);
	print_result(stdout, size, iters, t, sum);
	free(t);
	return 0;
}

static int usage(void)
{
	fprintf(stderr, "usage: tcp_pingpong --server [--cpu N] [--busy]\n"
			"       tcp_pingpong --connect IPV4:PORT [--size 8] [--iters 100000] "
			"[--cpu N] [--busy]\n");
	return 2;
}

int main(int argc, char **argv)
{
	const char *connect_to = NULL;
	bool server = false;
	long size = 8, iters = 100000;
	int cpu = -1;

	for (int i = 1; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(argv[i], "--server"))
			server = true;
		else if (!strcmp(argv[i], "--busy"))
			busy = true;
		else if (!strcmp(argv[i], "--connect") && v)
			connect_to = argv[++i];
		else if (!strcmp(argv[i], "--size") && v)
			size = atol(argv[++i]);
		else if (!strcmp(argv[i], "--iters") && v)
			iters = atol(argv[++i]);
		else if (!strcmp(argv[i], "--cpu") && v)
			cpu = atoi(argv[++i]);
		else
			return usage();
	}
	if (server == !!connect_to || size < 1 || size > MAX_SIZE || iters < 1 ||
	    iters > 100000000)
		return usage();
	pin_cpu(cpu);
	return server ? serve() : client(connect_to, (uint32_t)size, (uint32_t)iters);
}
