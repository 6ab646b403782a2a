/* SPDX-License-Identifier: MIT */
/*
 * --pingpong, latency like perftest's ib_write_lat: the initiator WRITEs
 * a message into the target's buffer and polls its own buffer for the
 * answer, which the target's side (pp_peer.c: a thread in this process, or
 * --target --pingpong) WRITEs back as soon as it sees the message land.
 * A sample is half the round trip, submit to answer seen, as ib_write_lat
 * reports.  Each side frees its request's slot (ferry_batch_wait on a
 * request that has long ended) outside the timed part, before its next
 * message: ib_write_lat reaps its send completions in the same place.
 *
 * The target learns where to answer from a hand-shake at each size
 * (pingpong.h): the initiator's control address and buffer, WRITEn into
 * the first page of the target's buffer.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "pingpong.h"

/* The hand-shake's look at the answer: every 100 us. */
#define HELLO_NAP_NS 100000L

/* Write [off, off + len) of the port's buffer to the same offset of the target's. */
static int hello_write(struct bench *b, struct bench_port *bp, uint64_t off, uint64_t to,
		       uint64_t len)
{
	struct ferry_req r = { .op = FERRY_OP_WRITE, .local = bp->buf + off, .seg = b->seg,
			       .remote = b->remote_base + to, .len = len };
	int rc = pp_write(bp->batch, &r, (int64_t)(b->stall_ns / 1000000));

	if (rc == -ETIMEDOUT)
		bp->stuck = true;
	return rc;
}

/* Wait for the target's answer to gen: 0, -ECONNREFUSED (refused), -ETIMEDOUT. */
static int hello_answer(struct bench *b, const uint8_t *buf, uint64_t gen)
{
	uint64_t t0 = now_ns();
	struct timespec nap = { 0, HELLO_NAP_NS };

	for (;;) {
		uint64_t ack = pp_load64(buf + PP_ACK);

		if (ack == gen)
			return 0;
		if (ack == (gen | PP_REFUSED))
			return -ECONNREFUSED;
		if (now_ns() - t0 > b->stall_ns)
			return -ETIMEDOUT;
		nanosleep(&nap, NULL);
	}
}

/*
 * Before each size, on the main thread (port 0's thread is not running):
 * the ping request, a cleared receive area, and the hand-shake.
 */
int pingpong_size(struct bench *b)
{
	struct bench_port *bp = &b->ports[0];
	struct pp_hello *h = (struct pp_hello *)(bp->buf + PP_OUT);
	uint64_t s = b->size;
	int rc;

	bp->reqs[0] = (struct ferry_req){ .op = FERRY_OP_WRITE, .local = bp->buf + bench_pp_send(s),
					  .seg = b->seg, .remote = b->remote_base + bench_pp_recv(s),
					  .len = s };
	memset(bp->buf + bench_pp_recv(s), 0, s);
	*h = (struct pp_hello){ .gen = (now_ns() | 1) & ~PP_REFUSED, .magic = PP_MAGIC, .size = s,
				.buf = (uint64_t)(uintptr_t)bp->buf, .len = b->local_cap };
	snprintf(h->addr, sizeof(h->addr), "%s", ferry_engine_address(b->init));
	rc = hello_write(b, bp, PP_OUT + 8, 8, sizeof(*h) - 8);
	if (!rc)
		rc = hello_write(b, bp, PP_OUT, 0, 8);
	if (!rc)
		rc = hello_answer(b, bp->buf, h->gen);
	if (rc == -ECONNREFUSED)
		fprintf(stderr, "ferry_bench: pingpong: the target refused %lu-byte messages (its "
				"buffer is too small: see its output)\n", (unsigned long)s);
	else if (rc == -ETIMEDOUT)
		fprintf(stderr, "ferry_bench: pingpong: no answer to the hand-shake in %.0f s: is "
				"the target running with --pingpong, and can it reach %s?\n",
			(double)b->stall_ns / 1e9, h->addr);
	else if (rc)
		report("pingpong: hand-shake", rc);
	if (rc)
		bp->err = rc;
	return rc;
}

/* Poll the answer's last byte until it reads want: 0, or -ETIMEDOUT, or the ping's error. */
static int answer_wait(struct bench_port *bp, uint64_t t0, uint8_t want)
{
	const uint8_t *last = bp->buf + bench_pp_recv(bp->b->size) + bp->b->size - 1;
	unsigned spins = 0;

	while (pp_load8(last) != want) {
		pp_pause_on(bp->b->init, &spins);
		if (spins & 1023)
			continue;
		/* Now and then: did our message fail, or is nobody answering? */
		if (ferry_batch_wait(bp->batch, 0) == -EIO)
			return -EIO;
		if (now_ns() - t0 > bp->b->stall_ns)
			return -ETIMEDOUT;
	}
	return 0;
}

/* Message n of this size: WRITE, wait for the answer; half the round trip is the sample. */
int pingpong_run(struct bench_port *bp, uint64_t n)
{
	uint8_t seq = pp_seq(n);
	uint64_t t0, t1;
	int rc, wrc;

	bp->buf[bench_pp_send(bp->b->size) + bp->b->size - 1] = seq;
	t0 = now_ns();
	rc = port_submit(bp, bp->batch, 0, 1, false);
	if (rc < 0)
		return port_stop(bp, n, port_submit_call(bp, false), rc);
	wrc = answer_wait(bp, t0, seq);
	t1 = now_ns();
	if (!wrc)
		bench_samples_add(&bp->lat, (t1 - t0) / 2);
	bp->lat_ns += t1 - t0;
	bp->batches++;
	rc = batch_finish(bp, n, batch_wait(bp), 0);
	if (!rc && wrc)
		rc = port_stop(bp, n, wrc == -EIO ? "pingpong (the message failed)"
						  : "pingpong (no answer from the target)",
			       wrc);
	return rc;
}

/*
 * --connect --pingpong without --listen: the target must reach this
 * process, so listen on the local address that routes to it (a UDP socket
 * connected to the target sends nothing, but picks that address).
 */
int pingpong_listen(struct bench *b)
{
	struct sockaddr_in to = { .sin_family = AF_INET }, me;
	socklen_t len = sizeof(me);
	char host[INET_ADDRSTRLEN + 64];
	const char *colon = strrchr(b->cfg.connect, ':');
	int fd, rc = 0;

	snprintf(host, sizeof(host), "%.*s", (int)(colon - b->cfg.connect), b->cfg.connect);
	to.sin_port = htons((uint16_t)atoi(colon + 1));
	if (!strcmp(host, "localhost") || inet_pton(AF_INET, host, &to.sin_addr) != 1)
		inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
	fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&to, sizeof(to)) ||
	    getsockname(fd, (struct sockaddr *)&me, &len))
		rc = report("pingpong: the local address towards the target", -errno);
	if (fd >= 0)
		close(fd);
	if (rc)
		return rc;
	inet_ntop(AF_INET, &me.sin_addr, host, INET_ADDRSTRLEN);
	snprintf(b->listen_buf, sizeof(b->listen_buf), "%s:0", host);
	b->iopts.listen = b->listen_buf;
	return 0;
}
