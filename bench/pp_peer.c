/* SPDX-License-Identifier: MIT */
/*
 * --pingpong's answering side: a thread on the target engine (the one in
 * this process, or --target's) that watches its buffer's control page for
 * an initiator's hand-shake (pingpong.h), then answers every message that
 * lands in its receive area with one of its own, WRITEn into the
 * initiator's.  It busy-polls (spin, then yield) while messages come, and
 * after a second without one looks only every millisecond: an idle
 * --target costs next to nothing.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pingpong.h"

/* Quiet this long: poll every PP_NAP_NS instead of spinning. */
#define PP_QUIET_NS 1000000000ull
#define PP_NAP_NS 1000000L
#define PP_WRITE_MS 10000

struct pp_peer {
	struct bench *b;
	struct ferry_engine *e;
	uint8_t *buf;              /* the target's buffer: control page first */
	uint64_t len;
	pthread_t thread;
	bool running;
	int stop;                  /* atomic: pp_peer_stop */
	struct ferry_port *port;
	struct ferry_batch *batch;
	ferry_seg_t seg;           /* the initiator, when seg_addr is set */
	char seg_addr[64];
	uint64_t gen;              /* the hand-shake answered last */
	bool active;               /* answering messages of that hand-shake */
	uint64_t size;
	uint64_t k;                /* messages answered in this hand-shake */
	struct ferry_req pong;
	uint64_t last_ns;          /* the last message (or hand-shake) */
	uint64_t answered, failed; /* all hand-shakes */
};

int pp_write(struct ferry_batch *batch, const struct ferry_req *r, int64_t timeout_ms)
{
	struct ferry_req_status st;
	int slot, rc;

	slot = ferry_submit(batch, r, 1);
	if (slot < 0)
		return slot;
	rc = ferry_batch_wait(batch, timeout_ms);
	if (rc == -ETIMEDOUT)
		return rc; /* in flight: the batch cannot be reset */
	if (rc && !ferry_req_status(batch, (uint32_t)slot, &st) && st.error)
		rc = st.error;
	ferry_batch_reset(batch);
	return rc;
}

/* The previous answer's request, ended: count it and free the slot. */
static int peer_reap(struct pp_peer *p)
{
	struct ferry_req_status st;
	int rc;

	if (!ferry_batch_size(p->batch))
		return 0;
	rc = ferry_batch_wait(p->batch, PP_WRITE_MS);
	if (rc == -ETIMEDOUT)
		return rc;
	if (ferry_req_status(p->batch, 0, &st) || st.state != FERRY_DONE)
		p->failed++;
	return ferry_batch_reset(p->batch);
}

/* The initiator's address: opened once, again when another one comes. */
static int peer_open(struct pp_peer *p, const char *addr)
{
	int rc;

	if (p->seg_addr[0] && !strcmp(p->seg_addr, addr))
		return 0;
	if (p->seg_addr[0])
		ferry_segment_close(p->e, p->seg);
	p->seg_addr[0] = '\0';
	rc = ferry_segment_open(p->e, addr, &p->seg);
	if (rc)
		return rc;
	snprintf(p->seg_addr, sizeof(p->seg_addr), "%s", addr);
	return 0;
}

/*
 * A new hand-shake gen: check it, reach the initiator, clear the receive
 * area and say so (pingpong.h).  A hello that cannot be answered is
 * reported here; the initiator gives up on its own.
 */
static void peer_hello(struct pp_peer *p, uint64_t gen)
{
	struct pp_hello h;
	uint64_t *ack = (uint64_t *)(p->buf + PP_OUT);
	int rc;

	p->gen = gen;
	p->active = false;
	memcpy(&h, p->buf, sizeof(h)); /* after the acquire load of gen: complete */
	h.addr[sizeof(h.addr) - 1] = '\0';
	if (h.magic != PP_MAGIC || !h.size || !h.buf)
		return; /* not a hand-shake: garbage, or a throughput run's bytes */
	rc = peer_reap(p);
	if (!rc)
		rc = peer_open(p, h.addr);
	if (rc) {
		fprintf(stderr, "ferry_bench: pingpong: cannot reach the initiator at %s: %s\n",
			h.addr, strerror(-rc));
		return;
	}
	*ack = gen;
	if (bench_pp_bytes(h.size) > p->len || bench_pp_bytes(h.size) > h.len) {
		fprintf(stderr,
			"ferry_bench: pingpong: %" PRIu64 "-byte messages need %" PRIu64
			"-byte buffers; this one has %" PRIu64 ", the initiator's %" PRIu64 "\n",
			h.size, bench_pp_bytes(h.size), p->len, h.len);
		*ack |= PP_REFUSED;
	} else {
		p->size = h.size;
		p->k = 0;
		p->pong = (struct ferry_req){ .op = FERRY_OP_WRITE,
					      .local = p->buf + bench_pp_send(h.size), .seg = p->seg,
					      .remote = h.buf + bench_pp_recv(h.size), .len = h.size };
		memset(p->buf + bench_pp_recv(h.size), 0, h.size);
	}
	rc = pp_write(p->batch, &(struct ferry_req){ .op = FERRY_OP_WRITE, .local = ack,
						     .seg = p->seg, .remote = h.buf + PP_ACK,
						     .len = sizeof(*ack) },
		      PP_WRITE_MS);
	if (rc)
		fprintf(stderr, "ferry_bench: pingpong: answering the hand-shake: %s\n",
			strerror(-rc));
	p->active = !rc && !(*ack & PP_REFUSED);
	p->last_ns = now_ns();
}

/* The message that just landed: answer it with the same last byte. */
static void peer_answer(struct pp_peer *p)
{
	int rc = peer_reap(p);

	p->buf[bench_pp_send(p->size) + p->size - 1] = pp_seq(p->k);
	if (!rc)
		rc = ferry_submit(p->batch, &p->pong, 1);
	if (rc < 0) {
		fprintf(stderr, "ferry_bench: pingpong: answering: %s\n", strerror(-rc));
		p->active = false; /* the initiator times out and says so */
		return;
	}
	p->k++;
	p->answered++;
}

static void *peer_main(void *arg)
{
	struct pp_peer *p = arg;
	unsigned spins = 0;

	while (!__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE)) {
		uint64_t gen = pp_load64(p->buf);
		struct timespec nap = { 0, PP_NAP_NS };

		if (gen != p->gen) {
			peer_hello(p, gen);
			continue;
		}
		if (p->active &&
		    pp_load8(p->buf + bench_pp_recv(p->size) + p->size - 1) == pp_seq(p->k)) {
			peer_answer(p);
			spins = 0;
			continue;
		}
		/* Quiet: spin and yield for a second after the last message, then nap. */
		if (spins < PP_SPINS || (spins & 1023) || now_ns() - p->last_ns < PP_QUIET_NS) {
			pp_pause_on(p->e, &spins);
			continue;
		}
		nanosleep(&nap, NULL);
	}
	return NULL;
}

/*
 * Answer ping-pongs that land in buf (len bytes, registered with e) until
 * pp_peer_stop.  The control page is cleared first: --target's buffer
 * holds its pattern, whose first word would look like a hand-shake.
 */
int pp_peer_start(struct bench *b, struct ferry_engine *e, uint8_t *buf, uint64_t len)
{
	struct pp_peer *p = calloc(1, sizeof(*p));
	int rc;

	if (!p)
		return report("pingpong peer", -ENOMEM);
	b->pp = p;
	*p = (struct pp_peer){ .b = b, .e = e, .buf = buf, .len = len };
	memset(buf, 0, BENCH_PP_CTL);
	rc = ferry_port_create(e, &p->port);
	if (!rc)
		rc = ferry_batch_create(p->port, 1, &p->batch);
	if (rc)
		return report("pingpong peer port", rc);
	/* In one process, beside the port threads: off the engines' cores' CPUs. */
	rc = bench_thread_on(&p->thread, peer_main, p, b->pin ? &b->port_cpus : NULL);
	if (rc)
		return report("pingpong peer thread", rc);
	p->running = true;
	return 0;
}

void pp_peer_stop(struct bench *b)
{
	struct pp_peer *p = b->pp;
	bool busy;

	if (!p)
		return;
	if (p->running) {
		__atomic_store_n(&p->stop, 1, __ATOMIC_RELEASE);
		pthread_join(p->thread, NULL);
	}
	if (p->failed)
		fprintf(stderr, "ferry_bench: pingpong: %" PRIu64 " of %" PRIu64 " answers failed\n",
			p->failed, p->answered);
	/* An answer still in flight: batch and port are left to the engine. */
	busy = p->batch && ferry_batch_wait(p->batch, PP_WRITE_MS) == -ETIMEDOUT;
	if (p->batch && !busy)
		ferry_batch_destroy(p->batch);
	if (p->port && !busy)
		ferry_port_destroy(p->port);
	if (p->seg_addr[0])
		ferry_segment_close(p->e, p->seg);
	free(p);
	b->pp = NULL;
}
