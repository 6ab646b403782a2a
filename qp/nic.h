/* SPDX-License-Identifier: MIT */
/*
 * The NIC provider interface: what a worker core needs from a NIC, shaped
 * after verbs so that the rdma-core provider maps one to one and the
 * software NIC ("loop") can stand in for tests and benchmarks.
 *
 * Threading: open/close/reg_mr/dereg_mr/cq_create/qp_create/qp_connect/
 * qp_destroy are control-path calls (any thread, serialised by the caller).
 * post/poll/qp_set_error on a QP or CQ are called only by the core that owns
 * it.
 */
#ifndef FERRY_QP_NIC_H
#define FERRY_QP_NIC_H

#include <stddef.h>
#include <stdint.h>

/* The values of ferry.h's FERRY_OP_READ and FERRY_OP_WRITE: a request's op
 * is stored as it comes (runtime/submit asserts it). */
enum nic_op { NIC_OP_READ = 0, NIC_OP_WRITE = 1 };

/* Completion status; mirrors the ibv_wc_status values ferry cares about. */
enum nic_wc_status {
	NIC_WC_SUCCESS = 0,
	NIC_WC_LOC_PROT_ERR,   /* lkey/local range not registered */
	NIC_WC_REM_ACCESS_ERR, /* rkey/remote range not registered */
	NIC_WC_FLUSH_ERR,      /* QP in error state: WR flushed */
	NIC_WC_RETRY_EXC_ERR,  /* transport retries exhausted */
	NIC_WC_GENERAL_ERR,
	NIC_WC_REM_PERM_ERR,   /* the kernel refused access to the peer (cma: ptrace rules) */
};

/* One work request: a single-SGE RDMA READ or WRITE. */
struct nic_wr {
	struct nic_wr *next;
	uint64_t wr_id;
	uint64_t local;
	uint64_t remote;
	uint32_t len;
	uint32_t lkey;
	uint32_t rkey;
	uint8_t op;       /* enum nic_op */
	uint8_t signaled; /* a CQE on success; errors always produce one */
};

/* One completion.  On error only wr_id, status and qp_num are valid. */
struct nic_wc {
	uint64_t wr_id;
	uint32_t qp_num;
	uint16_t status; /* enum nic_wc_status */
	uint16_t op;
};

/* What a peer may do to a registered region (local use is always allowed). */
#define NIC_ACCESS_REMOTE_READ 0x1u
#define NIC_ACCESS_REMOTE_WRITE 0x2u
#define NIC_ACCESS_ALL (NIC_ACCESS_REMOTE_READ | NIC_ACCESS_REMOTE_WRITE)
/* Not a right: the CPU cannot read the region (a device's memory, not in
 * the process's maps), only the NIC's DMA may: a provider that could copy
 * from it itself must not (verbs: no inline WRITE from it). */
#define NIC_REG_CPU_OPAQUE 0x4u

struct nic_mr {
	uint32_t lkey;
	uint32_t rkey;
	void *priv;
};

/* What a peer needs to reach a NIC: sent in segment descriptors.  Opaque
 * to everyone but its provider, which starts it with a magic of its own. */
#define NIC_ADDR_LEN 64
struct nic_addr {
	uint8_t bytes[NIC_ADDR_LEN];
};

/* One QP's half of the connection handshake (RC: QP number and first PSN).
 * secret: random bytes a provider whose peer connects back on its own
 * (tcp) has it present, so that only the peer that did the (authenticated)
 * control-plane handshake gets in; zero for verbs and loop. */
#define NIC_QP_SECRET_LEN 16
struct nic_qp_info {
	uint32_t qpn;
	uint32_t psn;
	uint8_t secret[NIC_QP_SECRET_LEN];
};

/* A device found by discovery. */
struct nic_dev_info {
	char name[64];     /* "rxe0", "mlx5_0" */
	int numa_node;     /* from sysfs; -1 unknown */
	uint8_t port;      /* first active port */
	uint8_t link_layer; /* IBV_LINK_LAYER_* */
	uint16_t active_mtu; /* bytes */
};

/* The provider does work for peers inside poll (tcp: it receives their
 * frames and answers them), so its owner polls its CQ every pass, even with
 * nothing of its own in flight, and sleeps on cq_fd when idle. */
#define NIC_CAP_SERVES 0x1u
/* Its QPs reach only peers on this host (cma). */
#define NIC_CAP_SAME_HOST 0x2u

struct nic_caps {
	uint32_t max_qp_wr;
	uint32_t max_cqe;
	uint32_t max_inline;
	uint32_t max_rd_atomic;
	uint32_t flags;        /* NIC_CAP_* */
};

/* An asynchronous device event (verbs: ibv_get_async_event). */
enum nic_event_kind {
	NIC_EV_PORT_DOWN = 1,  /* the NIC's port left ACTIVE (link down) */
	NIC_EV_PORT_UP,        /* it is ACTIVE again */
	NIC_EV_DEVICE_FATAL,   /* the device is gone (verbs: or its CQ failed) */
	NIC_EV_QP_FATAL,       /* QP qp_num went to the error state by itself */
};

struct nic_event {
	uint16_t kind;         /* enum nic_event_kind */
	uint32_t qp_num;       /* NIC_EV_QP_FATAL */
};

struct nic;
struct nic_cq;
struct nic_qp;

struct nic_provider {
	const char *name;
	/* dev: the NIC's name in the nics list; "tcp@a.b.c.d" for tcp (the
	 * engine adds the address of its control listener). */
	int (*open)(const char *dev, struct nic **out);
	void (*close)(struct nic *nic);
	/* Fills every field of out (the core clears it too: core_open_nic). */
	void (*caps)(const struct nic *nic, struct nic_caps *out);
	/* The cluster key (len bytes) that the provider's own connections
	 * prove (tcp: each data connection's HELLO); NULL for providers whose
	 * peers meet only through the control plane.  Control path, before
	 * any QP. */
	int (*set_key)(struct nic *nic, const uint8_t *key, size_t len);
	void (*addr)(const struct nic *nic, struct nic_addr *out);
	/* Register [addr, addr+len) for local use and the remote accesses in
	 * access (NIC_ACCESS_*, and NIC_REG_CPU_OPAQUE): a peer's WR that the
	 * region does not allow completes NIC_WC_REM_ACCESS_ERR at the peer. */
	int (*reg_mr)(struct nic *nic, void *addr, size_t len, unsigned access,
		      struct nic_mr *out);
	int (*dereg_mr)(struct nic *nic, struct nic_mr *mr);
	/* Optional (NULL: dereg_mr alone): dereg_mr in two halves, so that a
	 * caller with many contexts or regions waits once.  begin makes mr
	 * unusable to peers and says until when (*until_ns, ferry_now_ns's
	 * clock; 0: no wait) its memory may still be touched by them; end,
	 * called after that time, frees mr's slot. */
	int (*dereg_mr_begin)(struct nic *nic, struct nic_mr *mr, uint64_t *until_ns);
	void (*dereg_mr_end)(struct nic *nic, struct nic_mr *mr);
	int (*cq_create)(struct nic *nic, uint32_t cqe, struct nic_cq **out);
	void (*cq_destroy)(struct nic_cq *cq);
	int (*qp_create)(struct nic *nic, struct nic_cq *cq, uint32_t max_wr, struct nic_qp **out);
	/* This QP's half of the handshake (valid after qp_create). */
	void (*qp_info)(const struct nic_qp *qp, struct nic_qp_info *out);
	/* Connect to QP rqp of the NIC at remote: RESET -> INIT -> RTR -> RTS.
	 * loop needs no remote QP (rqp may be NULL).  On failure the provider
	 * logs which local and remote addresses (GIDs) were used. */
	int (*qp_connect)(struct nic_qp *qp, const struct nic_addr *remote,
			  const struct nic_qp_info *rqp);
	uint32_t (*qp_num)(const struct nic_qp *qp);
	/* Move the QP to the error state: outstanding WRs complete FLUSH_ERR. */
	int (*qp_set_error)(struct nic_qp *qp);
	void (*qp_destroy)(struct nic_qp *qp);
	/* Post a chain; 0, or -errno with *bad at the first WR not posted.
	 * The WRs before *bad count as posted: each completes once (a flush
	 * after qp_set_error at least), even those the provider could not
	 * vouch for -- librxe queues a chain, then fails its doorbell naming
	 * none: they may still run, so *bad is past them (NULL: the chain's
	 * end) and the caller waits for them. */
	int (*post)(struct nic_qp *qp, struct nic_wr *wr, struct nic_wr **bad);
	/* Poll up to n completions; count (>= 0) or -errno. */
	int (*poll)(struct nic_cq *cq, int n, struct nic_wc *wc);
	/* Completion channel, for sleeping while work is in flight; NULL when
	 * the provider has none (loop: its work happens inside poll). */
	int (*cq_arm)(struct nic_cq *cq);       /* notify on the next CQE: 0 or -errno */
	int (*cq_fd)(const struct nic_cq *cq);  /* readable after an armed CQE */
	void (*cq_ack)(struct nic_cq *cq);      /* consume and ack channel events */
	/* One line for logs and errors: device, port, GID index and address, MTU. */
	void (*describe)(const struct nic *nic, char *buf, size_t len);
	/* NUMA node of the device, -1 unknown. */
	int (*numa_node)(const struct nic *nic);
	/* Can this NIC reach the peer NIC at peer (same host for cma, a route
	 * for verbs)?  0, or -errno with the reason in why (len bytes).  NULL:
	 * always.  Control path; may probe (a system call, not a round trip). */
	int (*reachable)(const struct nic *nic, const struct nic_addr *peer, char *why, size_t len);
	/* Device events: a non-blocking fd readable when one waits (-1: the
	 * provider has none; NULL too), and the next one: 1, 0 when none is
	 * waiting, or -errno.  Control path, one thread at a time per NIC --
	 * never a core: an event is not data. */
	int (*event_fd)(const struct nic *nic);
	int (*event_next)(struct nic *nic, struct nic_event *out);
};

/* Find a provider by NIC name: "loop" (or "loop<N>") is the software NIC,
 * "cma" the same-host NIC, "tcp" (or "tcp@a.b.c.d[:port]") one-sided
 * operations over TCP, anything else a verbs device name ("rxe0",
 * "mlx5_0"). */
const struct nic_provider *nic_provider_for(const char *nic_name);

/* Active verbs devices (a port in state ACTIVE), at most max; count or -errno. */
int nic_verbs_discover(struct nic_dev_info *out, int max);

extern const struct nic_provider nic_loop_provider;
extern const struct nic_provider nic_verbs_provider;
extern const struct nic_provider nic_cma_provider;
extern const struct nic_provider nic_tcp_provider;

#endif /* FERRY_QP_NIC_H */
