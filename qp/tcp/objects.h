/* SPDX-License-Identifier: MIT */
/*
 * tcp: the provider's objects, shared by its control path (tcp.c, qp.c),
 * its connections (conn.c), the initiator's data path (init.c) and the
 * target's (serve.c).  Each field says who owns it: the core that polls
 * the CQ, or the control path under ctx->lock.
 *
 * How the two meet.  The control path publishes QPs (ctx->qps, by qpn),
 * MRs (ctx->mr) and a QP's connection state (qp->state) with release
 * stores; the core reads them with acquire loads and never locks.  The
 * core never keeps a QP pointer from one post/poll call to the next: it
 * finds QPs through epoll data (the qpn) and the table, so a control path
 * that takes a QP or an MR away (qp_destroy, dereg_mr) clears its entry,
 * then waits until the core is not inside a post or poll of that CQ
 * (busy_seq odd: soft_busy_wait), and only then closes or frees.
 */
#ifndef FERRY_QP_TCP_OBJECTS_H
#define FERRY_QP_TCP_OBJECTS_H

#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/uio.h>
#include <urcu/list.h>

#include "qp/auth/auth.h"
#include "ring/base/fd.h"
#include "qp/nic.h"
#include "qp/soft/soft.h"
#include "qp/tcp/frame.h"
#include "qp/tcp/tcp.h"
#include "ring/base/atomics.h"
#include "ring/base/compiler.h"

#define TCP_MAX_QP_WR 16384u
#define TCP_MAX_CQE (1u << 20)

/* QPs per context; qpn = generation (16 bits, never 0) << TCP_QP_BITS | slot. */
#define TCP_QP_BITS 13
#define TCP_QP_SLOTS (1u << TCP_QP_BITS)
#define TCP_QP_MASK (TCP_QP_SLOTS - 1)

/* MRs per context, in chunks allocated as needed; key = generation
 * (16 bits, never 0) << 16 | index. */
#define TCP_MR_CHUNK_BITS 8
#define TCP_MR_CHUNK (1u << TCP_MR_CHUNK_BITS)
#define TCP_MR_CHUNKS 256u
#define TCP_MR_MAX (TCP_MR_CHUNK * TCP_MR_CHUNKS)

/* qp_info's psn: bit 31 says "this QP waits to be dialled" (it is the
 * target's, connected first); the low 24 bits are the first sequence. */
#define TCP_PSN_LISTEN 0x80000000u
#define TCP_PSN_MASK 0x00ffffffu

#define TCP_EVENTS 64        /* epoll events one poll takes */
#define TCP_PENDING 32       /* accepted connections waiting for their HELLO */
#define TCP_HELLO_MS 5000    /* ... at most this long */
#define TCP_CONNECT_MS 5000  /* qp_connect's dial (control path) */
#define TCP_RSP_SLOTS 32     /* target: responses queued per connection */
#define TCP_STAGE 512        /* bytes of small frames read in one recv */
#define TCP_SMALL 256        /* a payload this small: the next header is read in
                              * bulk, so a run of small WRITEs costs one recv each */
#define TCP_IOV 64           /* iovecs per sendmsg */
#define TCP_IO_CALLS 4       /* recv calls (and each send burst) per connection per turn */
#define TCP_IO_BYTES (2u << 20) /* bytes one recvmsg or sendmsg is given at most */

/* epoll data: tag << 32 | id */
enum { TCP_TAG_LISTEN = 1, TCP_TAG_PEND = 2, TCP_TAG_QP = 3 };

static inline uint64_t tcp_tag(uint32_t tag, uint32_t id)
{
	return (uint64_t)tag << 32 | id;
}

/* Counters, each CQ's (the core is the only writer). */
enum {
	TC_FRAMES_TX,
	TC_FRAMES_RX,
	TC_PAYLOAD_TX,
	TC_PAYLOAD_RX,
	TC_ACCEPTED,
	TC_REFUSED,
	TC_VIOLATIONS,
	TC_BROKEN,
	TC_SQ_OVF,
	TC_CQ_OVF,
	TC_NR,
};

/*
 * One MR.  key is 0 while the slot is free or being invalidated;
 * access/base/len are written under ctx->lock before key is published and
 * read by the core only after it loaded a matching key.
 */
struct tcp_mr_slot {
	uint32_t key;
	uint32_t access;   /* TCP_ACCESS_* */
	uint64_t base;
	uint64_t len;
	uint16_t gen;      /* control path */
};

struct tcp_ctx;
struct tcp_cq;

/* A WR the initiator holds until its response: struct nic_wr, and the
 * header its frame starts with. */
struct tcp_wqe {
	uint64_t wr_id;
	uint64_t local;
	uint32_t len;
	uint32_t lkey;
	uint8_t op;
	uint8_t signaled;
	uint8_t bad;       /* refused at post: this status, in its turn */
	uint8_t hdr[TCP_HDR_LEN];
};

/* A response the target has queued: its header, then len bytes at data
 * (READ_RESP: the region, named by key and checked again before each
 * send; HELLO: the QP's own buffer, key 0). */
struct tcp_rsp {
	uint8_t hdr[TCP_HDR_LEN];
	uint32_t len;
	uint32_t key;
	const uint8_t *data;
};

enum tcp_qp_state {
	TCP_QS_NEW = 0,     /* created, not connected */
	TCP_QS_EXPECT = 1,  /* target: waits for the initiator's dial */
	TCP_QS_DIALED = 2,  /* initiator: connected, HELLO sent */
};

enum tcp_rx_phase {
	RX_HDR,       /* reading a header */
	RX_PAYLOAD,   /* reading len bytes into dst */
	RX_FENCE,     /* target: a WRITE waits for the READ_RESPs before it */
	RX_DRAIN,     /* target: after an error response, until the peer closes */
};

struct tcp_qp {
	/* Immutable after qp_create. */
	struct tcp_ctx *ctx;
	struct tcp_cq *cq;
	uint32_t qpn;
	uint32_t psn;              /* initiator: the first request's seq */
	uint32_t max_wr;
	uint8_t secret[TCP_SECRET_LEN];

	/* Written by qp_connect before it publishes state (release). */
	uint32_t state;            /* enum tcp_qp_state */
	bool passive;              /* connected first: the peer dials us */
	uint32_t peer_qpn;
	uint32_t peer_psn;         /* target: the first seq expected */
	uint8_t hello_tx[TCP_HELLO_LEN]; /* target: the HELLO body we answer with */
	uint8_t mac_expect[TCP_MAC_LEN]; /* what the peer's HELLO must prove (zero: no key) */
	bool offered;              /* qp_info handed our info out while new: we may be the
	                            * initiator (control path, see tcp_qp_connect) */

	/* The connection: the owning core's once state is published. */
	int fd;
	uint32_t events;           /* epoll interest now */
	bool hello_ok;             /* the peer's HELLO is verified */
	uint32_t peer_max;         /* the largest frame the peer takes (its HELLO) */
	bool error;                /* the error state: initiator, all flushed; target,
	                            * no connection binds (qp_set_error) */
	bool draining;             /* target: an error response queued; then drain */
	bool bulk;                 /* last frame had no payload, or a small one: read
	                            * headers in bulk */
	bool rx_small;             /* the payload being received is <= TCP_SMALL */
	bool rx_dry;               /* a read this turn came back short: the socket had
	                            * no more, do not ask again until epoll says so */
	uint8_t rx_phase;          /* enum tcp_rx_phase */

	/* Receiving: a header, then a payload straight into place. */
	uint32_t hdr_got;
	uint8_t hdr[TCP_HDR_LEN];
	struct tcp_frame cur;      /* the frame being received */
	uint8_t *dst;
	uint32_t left;
	uint32_t dst_key;          /* 0: our own buffer; else checked before each recv */
	uint32_t dst_access;
	uint32_t st_off, st_len;   /* bytes of stage not yet parsed */
	uint8_t stage[TCP_STAGE];
	uint8_t hello_rx[TCP_HELLO_LEN];

	/* Initiator: the send queue, sequences counted from 0. */
	struct tcp_wqe *sq;
	uint32_t sq_mask;
	uint32_t head;             /* oldest not completed */
	uint32_t sent;             /* next frame to send (tx_off bytes of it are out) */
	uint32_t tail;             /* next free */
	uint32_t tx_off;

	/* Target: responses, in request order. */
	uint32_t expect;           /* seq of the next request */
	uint32_t rsp_head, rsp_tail, rsp_off;
	uint32_t reads_queued;     /* READ_RESPs not yet fully sent: a WRITE waits */
	uint32_t ack_seq;
	bool ack_pending;
	struct tcp_rsp rsp[TCP_RSP_SLOTS];

	struct cds_list_head link; /* in cq->qps (ctx->lock) */
};

/* An accepted connection that has not yet presented its HELLO. */
struct tcp_pending {
	int fd;                    /* -1: free */
	uint32_t got;
	uint64_t deadline_ns;
	uint8_t buf[TCP_HDR_LEN + TCP_HELLO_LEN];
};

struct tcp_cq {
	/* Owned by the polling core. */
	struct tcp_ctx *ctx;
	int epfd;
	uint32_t npend;
	struct soft_cq wcq;
	struct tcp_pending pend[TCP_PENDING];
	uint64_t cnt[TC_NR];
	struct epoll_event ev[TCP_EVENTS];

	/* Control path, under ctx->lock. */
	struct cds_list_head link; /* in ctx->cqs */
	struct cds_list_head qps;  /* struct tcp_qp.link */

	/* Written by the core, read by control paths. */
	uint64_t busy_seq ferry_cache_aligned; /* odd inside post or poll (soft.h) */
	uint64_t pub[TC_NR];
};

/* The spare fd a target holds for an accept out of fds (serve.c), marked
 * ferry's; -1 when none could be opened (tried again when needed). */
static inline int tcp_spare_open(void)
{
	return fd_track(open("/dev/null", O_RDONLY | O_CLOEXEC));
}

struct tcp_ctx {
	pthread_mutex_t lock;      /* the control path */
	int lfd;                   /* the data listener */
	int spare_fd;              /* /dev/null, held for an accept out of fds (serve.c) */
	struct sockaddr_in sa;     /* its address */
	char name[32];             /* "127.0.0.1:port" */
	struct tcp_cq *serving;    /* the CQ whose epoll has the listener (ctx->lock) */
	struct cds_list_head cqs;  /* struct tcp_cq.link (ctx->lock) */
	uint64_t retired[TC_NR];   /* counters of destroyed CQs (ctx->lock) */
	uint32_t nmr;              /* live MRs (ctx->lock) */
	uint32_t mr_cursor;        /* where reg_mr looks for a free slot (ctx->lock) */
	uint32_t qp_cursor;        /* where qp_create looks (ctx->lock) */
	bool has_key;              /* set_key: before any QP, then read-only */
	uint32_t hello_ms;         /* TCP_HELLO_MS; tests shorten it (tcp_set_hello_ms) */
	struct auth_key key;       /* the cluster key every HELLO proves */

	/* Rate limit of the connection-level messages (any thread, relaxed). */
	uint64_t log_window_ms;
	uint32_t log_count;
	uint32_t log_dropped;

	struct tcp_mr_slot *mr[TCP_MR_CHUNKS];  /* published by reg_mr */
	struct tcp_qp *qps[TCP_QP_SLOTS];       /* published by qp_create */
	uint16_t qp_gen[TCP_QP_SLOTS];          /* ctx->lock */
};

/*
 * Gather what is left of one outgoing frame past off (its header, then len
 * payload bytes at data) into iov[n..], within TCP_IO_BYTES in all (*bytes
 * so far); the rest of a long payload goes with the next call.  Returns the
 * new count (at most n + 2): requests (init.c) and READ responses (serve.c)
 * go out the same way.
 */
static inline int tcp_frame_iov(struct iovec *iov, int n, uint32_t *bytes, uint8_t *hdr,
				uint32_t off, uintptr_t data, uint32_t len)
{
	if (off < TCP_HDR_LEN) {
		iov[n++] = (struct iovec){ hdr + off, TCP_HDR_LEN - off };
		*bytes += TCP_HDR_LEN - off;
		off = TCP_HDR_LEN;
	}
	if (off < TCP_HDR_LEN + len && *bytes < TCP_IO_BYTES) {
		uint32_t done = off - TCP_HDR_LEN, take = len - done;

		if (take > TCP_IO_BYTES - *bytes)
			take = TCP_IO_BYTES - *bytes;
		iov[n++] = (struct iovec){ (void *)(data + done), take };
		*bytes += take;
	}
	return n;
}

static inline struct tcp_ctx *tcp_ctx_of(struct nic *n)
{
	return (struct tcp_ctx *)(void *)n;
}

static inline struct tcp_cq *tcp_cq_of(struct nic_cq *c)
{
	return (struct tcp_cq *)(void *)c;
}

static inline struct tcp_qp *tcp_qp_of(struct nic_qp *q)
{
	return (struct tcp_qp *)(void *)q;
}

/* ---- the core's side of publication ---------------------------------- */

/* The QP with this qpn, or NULL; the core, inside busy. */
static inline struct tcp_qp *tcp_qp_lookup(struct tcp_ctx *ctx, uint32_t qpn)
{
	/* seq_cst: the other side of qp_destroy's store_sc (see soft_busy_enter);
	 * pairs with: store_release in tcp_qp_create (publication). */
	struct tcp_qp *qp = load_sc(ctx->qps[qpn & TCP_QP_MASK]);

	return qp && qp->qpn == qpn ? qp : NULL;
}

/* Is [addr, addr + len) inside the live MR named by key, allowing access?
 * The core, inside busy (see tcp_qp_lookup for the orders). */
static inline bool tcp_mr_ok(struct tcp_ctx *ctx, uint32_t key, uint64_t addr, uint64_t len,
			     uint32_t access)
{
	uint32_t idx = key & (TCP_MR_MAX - 1);
	/* pairs with: store_release of the chunk in tcp_reg_mr */
	const struct tcp_mr_slot *chunk = load_acquire(ctx->mr[idx >> TCP_MR_CHUNK_BITS]);
	const struct tcp_mr_slot *s;
	uint64_t off;

	if (unlikely(!chunk || !key))
		return false;
	s = &chunk[idx & (TCP_MR_CHUNK - 1)];
	/* pairs with: store_release of the key in tcp_reg_mr; store_sc in dereg */
	if (unlikely(load_sc(s->key) != key))
		return false;
	if (unlikely((READ_ONCE(s->access) & access) != access))
		return false;
	off = addr - s->base; /* wraps to huge when addr < base */
	return off <= s->len && len <= s->len - off;
}

/*
 * ThreadSanitizer cannot see that bytes arrive after they were sent (both
 * ends are in one process in the tests): a send releases one object that
 * stands for the wire, before the system call, and a receive acquires it.
 * The kernel's read of the user buffer inside sendmsg is not recorded (it
 * would be recorded after the call, after the release, where nothing pairs
 * with it).  No-ops outside TSan builds.
 */
extern char tcp_tsan_wire;
#ifdef FERRY_TSAN
void AnnotateIgnoreReadsBegin(char *file, int line);
void AnnotateIgnoreReadsEnd(char *file, int line);
#define tcp_tsan_send_begin()                                            \
	do {                                                             \
		ferry_tsan_release(&tcp_tsan_wire);                      \
		AnnotateIgnoreReadsBegin((char *)__FILE__, __LINE__);    \
	} while (0)
#define tcp_tsan_send_end() AnnotateIgnoreReadsEnd((char *)__FILE__, __LINE__)
#else
#define tcp_tsan_send_begin() ((void)0)
#define tcp_tsan_send_end() ((void)0)
#endif
#define tcp_tsan_received() ferry_tsan_acquire(&tcp_tsan_wire)

/* ---- between the files ----------------------------------------------- */

/* tcp.c */
void tcp_log(struct tcp_ctx *ctx, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
int tcp_sock_opts(int fd);

/* qp.c: the provider's QP control path. */
int tcp_qp_create(struct nic *n, struct nic_cq *ncq, uint32_t max_wr, struct nic_qp **out);
void tcp_qp_destroy(struct nic_qp *nqp);
void tcp_qp_free(struct tcp_qp *qp);
void tcp_qp_info(const struct nic_qp *nqp, struct nic_qp_info *out);
int tcp_qp_connect(struct nic_qp *nqp, const struct nic_addr *remote,
		   const struct nic_qp_info *rqp);
uint32_t tcp_qp_num(const struct nic_qp *nqp);
int tcp_addr_decode(const struct nic_addr *a, struct sockaddr_in *out);

/* conn.c: a connection's I/O, shared by both sides; the poll loop. */
int tcp_poll(struct nic_cq *ncq, int n, struct nic_wc *wc);
void tcp_cqe(struct tcp_cq *cq, const struct tcp_qp *qp, uint64_t wr_id, uint8_t op,
	     enum nic_wc_status st);
void tcp_want(struct tcp_qp *qp, uint32_t events);
void tcp_conn_close(struct tcp_qp *qp);
int tcp_rx_hdr(struct tcp_qp *qp, unsigned *calls);
int tcp_rx_payload(struct tcp_qp *qp, unsigned *calls);
void tcp_rx_expect(struct tcp_qp *qp, uint8_t *dst, uint32_t len, uint32_t key, uint32_t access);

/* init.c: the initiator. */
int tcp_post(struct nic_qp *nqp, struct nic_wr *wr, struct nic_wr **bad);
int tcp_qp_set_error(struct nic_qp *nqp);
void tcp_init_io(struct tcp_qp *qp, uint32_t events);

/* serve.c: the target. */
void tcp_accept(struct tcp_cq *cq);
void tcp_pending_io(struct tcp_cq *cq, uint32_t slot);
void tcp_pending_sweep(struct tcp_cq *cq);
void tcp_pending_close(struct tcp_cq *cq, uint32_t slot);
void tcp_serve_io(struct tcp_qp *qp, uint32_t events);

#endif /* FERRY_QP_TCP_OBJECTS_H */
