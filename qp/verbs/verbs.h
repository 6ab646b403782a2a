/* SPDX-License-Identifier: MIT */
/*
 * The verbs (rdma-core) NIC provider: its private header.  The provider's
 * files share it: gid.c (the GID choice), device.c (open and close,
 * memory, discovery, the stubbable calls), queue.c (CQs and QPs) and
 * data.c (post, poll and the provider table).
 *
 * The rest of ferry only needs nic_verbs_provider and nic_verbs_discover
 * (qp/nic.h).  This header adds what tests/unit/qp/test_verbs.c needs to run the
 * provider on a host without an RDMA device: the pure GID choice, the
 * address packing, the provider's objects (built by hand around fake ibv
 * objects) and a table of the verbs calls that can be stubbed
 * (ibv_post_send and ibv_poll_cq are static inline in <infiniband/verbs.h>,
 * so they cannot be interposed at link time).
 *
 * Names: fv_ ("ferry verbs"), never verbs_: that prefix is rdma-core's, and
 * libibverbs exports verbs_set_ops() to its providers; a verbs_set_ops in
 * the executable would be called by the provider instead of its own.
 */
#ifndef FERRY_QP_VERBS_H
#define FERRY_QP_VERBS_H

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#include "qp/nic.h"
#include "ring/base/log.h"

/*
 * Outstanding RDMA READs per QP (initiator depth, max_rd_atomic) and the
 * responder resources a QP grants (max_dest_rd_atomic): at most the
 * device's maxima, clipped to what struct ibv_qp_attr can carry (uint8_t).
 */
#define VERBS_MAX_RD_ATOMIC 255
/*
 * The initiator depth unless FERRY_IB_RD_ATOMIC says otherwise (the
 * device's when lower): what ConnectX devices report themselves.  Each READ
 * in flight is a round trip the responder overlaps, but on a quiet
 * Soft-RoCE VM rxe's 128 per QP (2,048 response packets of 64 KiB READs)
 * overflowed the receiving CPU's backlog: dropped packets, go-back-N
 * retries, ~0.85x of ib_read_bw; 16 ran at 1.15-1.34x with no drop
 * (README, 2026-12-06).  An older run on a loaded host had 16 slower than 128.
 */
#define VERBS_DEFAULT_RD_ATOMIC 16
/* Inline payload requested for each QP; 0 when the device refuses it. */
#define VERBS_INLINE 64
/* WRs translated per ibv_post_send (longer chains take several calls). */
#define VERBS_POST_MAX 256

/* ------------------------------------------------------------ GID choice */

/* One GID table entry, as read from the port. */
struct fv_gid {
	int index;
	uint8_t gid[16];
	int type; /* enum ibv_gid_type */
};

/*
 * Pick the GID a RoCE QP should use, from a port's table.  Entries that are
 * all zero, of type IB, or past index 255 (a QP's sgid_index is 8 bits)
 * are never chosen automatically; a forced index past 255 is -EINVAL.
 * Preference: RoCE v2 IPv4-mapped (::ffff:a.b.c.d), then the same IPv4
 * link-local (::ffff:169.254.0.0/16), RoCE v2 IPv6 global, RoCE v2
 * link-local (fe80::/10), RoCE v1; the lowest index wins a tie.
 * forced_index >= 0 (FERRY_GID_INDEX) must name an entry of tbl whose GID is
 * not zero.  Returns the position in tbl of the chosen entry, or -ENOENT
 * (nothing usable, or no such forced index) / -EINVAL (forced entry is
 * zero); why gets the reason either way (for the log line).
 */
int fv_choose_gid(const struct fv_gid *tbl, int n, int forced_index,
		     char *why, size_t whylen);

/*
 * A second RoCE v2 GID for peers of the other IP family: tbl[chosen] is
 * IPv4-mapped and a peer has IPv6 only (or the reverse), a pair of GIDs of
 * two families cannot carry RoCE v2.  The best RoCE v2 entry of the other
 * family (same ranking); its position in tbl, or -ENOENT.
 */
int fv_choose_alt_gid(const struct fv_gid *tbl, int n, int chosen);

/* ::ffff:a.b.c.d */
bool fv_gid_is_v4mapped(const uint8_t gid[16]);

/* "RoCE v2, IPv4-mapped", "RoCE v2, link-local", "RoCE v1", ... */
const char *fv_gid_kind(const uint8_t gid[16], int type);
/* inet_ntop of a GID: "::ffff:10.99.0.1", "fe80::1". */
void fv_gid_str(const uint8_t gid[16], char *buf, size_t len);

/* ------------------------------------------------------------ addresses */

/*
 * What a peer needs to connect to one of our QPs, carried in the 64-byte
 * struct nic_addr.  Layout (multi-byte fields little endian):
 *
 *   0..3   magic "VRBS" (loop addresses start "LOOP": never confused)
 *   4      layout version (1)
 *   5      link layer (IBV_LINK_LAYER_*)
 *   6      port number
 *   7      active MTU (enum ibv_mtu)
 *   8..23  GID (RoCE: the chosen one; IB: index 0)
 *   24..25 LID (IB; 0 on RoCE)
 *   26     GID index (informational: the peer uses its own index)
 *   27     responder resources we grant (max_dest_rd_atomic, the device's
 *          max_qp_rd_atom): the peer sets its QP's max_rd_atomic to the
 *          smaller of this and its own max_qp_init_rd_atom
 *   28..31 zero
 *   32..47 alternate GID (RoCE v2, the other IP family than 8..23), when
 *          byte 48 bit 0 is set; 49 its index.  Older peers leave these
 *          zero and ignore them.
 */
struct fv_addr {
	uint8_t gid[16];
	uint16_t lid;
	uint8_t port;
	uint8_t mtu;        /* enum ibv_mtu */
	uint8_t link_layer; /* IBV_LINK_LAYER_* */
	uint8_t gid_index;
	uint8_t rd_atomic;
	bool has_alt;       /* alt_gid is valid */
	uint8_t alt_gid_index;
	uint8_t alt_gid[16];
};

#define VERBS_ADDR_VERSION 1

void fv_addr_pack(const struct fv_addr *a, struct nic_addr *out);
/* 0, or -EINVAL when in is not a verbs address of a layout we know. */
int fv_addr_unpack(const struct nic_addr *in, struct fv_addr *a);

/* ------------------------------------------------------------ objects */

struct fv_cq;
struct fv_qp;

struct fv_nic {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	char name[64];
	uint8_t port;
	uint8_t link_layer;  /* IBV_LINK_LAYER_* */
	uint8_t active_mtu;  /* enum ibv_mtu; the event thread refreshes it: READ_ONCE */
	uint8_t gid_type;    /* enum ibv_gid_type of the chosen GID */
	uint16_t lid;        /* the event thread refreshes it (LID change): READ_ONCE */
	int gid_index;
	union ibv_gid gid;
	bool has_alt;        /* alt_gid: for peers of the other IP family */
	int alt_gid_index;
	union ibv_gid alt_gid;
	int numa_node;
	uint32_t max_qp_wr;
	uint32_t max_cqe;
	uint32_t max_rd_atomic;      /* initiator depth: max_qp_init_rd_atom, capped */
	uint32_t max_dest_rd_atomic; /* responder resources: max_qp_rd_atom, capped */
	uint32_t max_inline;    /* what a QP got when open() probed */
	/* An MR the CPU cannot read was registered (NIC_REG_CPU_OPAQUE): no
	 * WRITE goes inline any more, the provider's copy of its payload
	 * would fault.  Sticky; WRITE_ONCE in reg_mr, READ_ONCE in post: the
	 * MR's lkey reaches a core only after reg_mr returned. */
	uint8_t no_inline;
	/* RoCE, the event thread's view (events.c): the port left ACTIVE;
	 * gid_index no longer holds gid (a GID table change took it).  Either
	 * is the port down to us. */
	bool port_err;
	bool gid_lost;
	/* RoCE: alt_gid_index no longer holds alt_gid; peers of the other IP
	 * family are not reached (nor is alt_gid advertised) until it does.
	 * Written by the event thread, read by connects: READ_ONCE. */
	bool alt_lost;
	/* A PORT_DOWN was reported only so that rails are rebuilt (the LID
	 * changed, the alternate GID went): the PORT_UP that follows is owed. */
	bool up_owed;

	/* Children, freed by close() when the caller left them behind. */
	pthread_mutex_t lock;
	struct fv_cq *cqs;
	struct ibv_mr **mrs;
	uint32_t nmr;
	uint32_t mr_cap;
};

struct fv_cq {
	struct ibv_cq *cq;
	struct ibv_comp_channel *ch;
	struct fv_nic *nic;
	bool err_logged;    /* an error completion was logged ... */
	int64_t err_log_at; /* ... and the next one may be at this second */
	struct fv_cq *next; /* in nic->cqs */
	struct fv_qp *qps;
};

struct fv_qp {
	struct ibv_qp *qp;
	uint32_t max_inline;
	uint32_t psn;
	bool connected;
	struct fv_nic *nic;
	struct fv_cq *cq;
	struct fv_qp *next; /* in cq->qps */
};

/*
 * The device limits a NIC keeps from ibv_query_device: WRs per QP, CQEs,
 * the initiator depth (max_qp_init_rd_atom) and the responder resources
 * (max_qp_rd_atom), the last two clipped to VERBS_MAX_RD_ATOMIC.
 * FERRY_IB_RD_ATOMIC=n (1..255; 0: the device's; unset:
 * VERBS_DEFAULT_RD_ATOMIC) lowers the initiator depth, like
 * UCX_RC_MAX_RD_ATOMIC.
 */
void fv_nic_set_limits(struct fv_nic *nic, const struct ibv_device_attr *da);

/*
 * Outstanding READs for a QP of nic towards a peer that grants
 * peer_grant responder resources: min(nic->max_rd_atomic, peer_grant).
 */
uint32_t fv_qp_rd_atomic(const struct fv_nic *nic, uint32_t peer_grant);

/* RESET -> INIT (qp_create does it; exposed for the attribute tests). */
int fv_qp_to_init(struct fv_qp *qp);

/* An RC QP on cq as ferry wants it; *inl = the inline size it got.  0 or -errno. */
int fv_create_rc_qp(struct fv_nic *nic, struct ibv_cq *cq, uint32_t max_wr,
		    struct ibv_qp **out, uint32_t *inl);

/* Destroy cq and the QPs that report to it (nic->lock held). */
void fv_cq_free_locked(struct fv_cq *cq);

/* A FERRY_IB_* knob: its value in 0..max, else dflt (a bad one is logged once
 * per variable). */
uint8_t fv_ib_env(const struct fv_nic *nic, const char *name, long max, uint8_t dflt);

/*
 * Read the port's GID table (through fv_calls.query_gid_ex), apply
 * FERRY_GID_INDEX, choose, log, and set nic->gid_index/gid/gid_type.
 * 0 or -errno (logged).
 */
int fv_select_gid(struct fv_nic *nic, int tbl_len);

/* ------------------------------------------------------------ operations */

/* The members of nic_verbs_provider (qp/nic.h says what each does). */

/* device.c */
int fv_open(const char *dev, struct nic **out);
void fv_close(struct nic *n);
void fv_caps(const struct nic *n, struct nic_caps *out);
void fv_addr(const struct nic *n, struct nic_addr *out);
int fv_reg_mr(struct nic *n, void *addr, size_t len, unsigned access, struct nic_mr *out);
/* Device events (events.c). */
int fv_event_fd(const struct nic *n);
int fv_event_next(struct nic *n, struct nic_event *out);
/* The event an ibv async event means for this NIC, or 0 (not ours, or of
 * no interest): exposed for the unit tests. */
uint16_t fv_event_kind(const struct fv_nic *nic, const struct ibv_async_event *ev);
int fv_dereg_mr(struct nic *n, struct nic_mr *mr);
void fv_describe(const struct nic *n, char *buf, size_t len);
int fv_numa_node(const struct nic *n);

/* queue.c */
int fv_cq_create(struct nic *n, uint32_t cqe, struct nic_cq **out);
void fv_cq_destroy(struct nic_cq *c);
int fv_cq_arm(struct nic_cq *c);
int fv_cq_fd(const struct nic_cq *c);
void fv_cq_ack(struct nic_cq *c);
int fv_qp_create(struct nic *n, struct nic_cq *c, uint32_t max_wr, struct nic_qp **out);
void fv_qp_destroy(struct nic_qp *q);
void fv_qp_info(const struct nic_qp *q, struct nic_qp_info *out);
uint32_t fv_qp_num(const struct nic_qp *q);
int fv_qp_connect(struct nic_qp *q, const struct nic_addr *remote,
		  const struct nic_qp_info *rqp);
int fv_qp_set_error(struct nic_qp *q);

/* data.c */
int fv_post(struct nic_qp *q, struct nic_wr *wr, struct nic_wr **bad);
int fv_poll(struct nic_cq *c, int n, struct nic_wc *wc);

/* ------------------------------------------------------------ helpers */

static inline struct fv_nic *nic_of(struct nic *n)
{
	return (struct fv_nic *)(void *)n;
}

static inline const struct fv_nic *cnic_of(const struct nic *n)
{
	return (const struct fv_nic *)(const void *)n;
}

static inline struct fv_cq *cq_of(struct nic_cq *c)
{
	return (struct fv_cq *)(void *)c;
}

static inline struct fv_qp *qp_of(struct nic_qp *q)
{
	return (struct fv_qp *)(void *)q;
}

static inline const struct fv_qp *cqp_of(const struct nic_qp *q)
{
	return (const struct fv_qp *)(const void *)q;
}

/*
 * rdma-core documents a positive errno as the return of ibv_post_send and
 * ibv_modify_qp, but some providers return -errno or -1 with errno set:
 * accept all three, always yield a positive errno.
 */
static inline int fv_errno(int rc)
{
	if (rc > 0)
		return rc;
	if (rc == -1 && errno > 0)
		return errno;
	return rc < 0 ? -rc : EIO;
}

/* errno after a verbs call that returned NULL (some leave it 0). */
static inline int null_errno(int fallback)
{
	return errno > 0 ? errno : fallback;
}

static inline unsigned mtu_bytes(unsigned mtu)
{
	return mtu >= IBV_MTU_256 && mtu <= IBV_MTU_4096 ? 128u << mtu : 0;
}

/* One message, prefixed "verbs: <dev> port <p>: ". */
__attribute__((format(printf, 3, 4)))
void fv_log(int level, const struct fv_nic *nic, const char *fmt, ...);

/* Something failed: why, with the device named. */
#define vlog(nic, ...) fv_log(LOG_ERROR, (nic), __VA_ARGS__)
/* A decision worth knowing (the GID chosen). */
#define vinfo(nic, ...) fv_log(LOG_INFO, (nic), __VA_ARGS__)

/* True the first time key is seen: the GID choice is logged once per device. */
bool fv_first_time(const char *key);

/* ------------------------------------------------------------ stubs */

/* The verbs calls tests may replace.  Returns follow rdma-core. */
struct fv_ops {
	int (*post_send)(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
	struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t len, int access);
	int (*poll_cq)(struct ibv_cq *cq, int n, struct ibv_wc *wc);
	int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
	int (*query_gid_ex)(struct ibv_context *ctx, uint32_t port, uint32_t index,
			    struct ibv_gid_entry *entry, uint32_t flags);
	int (*query_port)(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *pa);
	int (*get_async_event)(struct ibv_context *ctx, struct ibv_async_event *ev);
	void (*ack_async_event)(struct ibv_async_event *ev);
};

/* The calls in use: the real ones, or a test's (fv_set_ops). */
extern struct fv_ops fv_calls;

/* Replace the calls (NULL members, or ops NULL: the real ones).  Tests only:
 * not thread safe, call it while no provider object is in use. */
void fv_set_ops(const struct fv_ops *ops);

#endif /* FERRY_QP_VERBS_H */
