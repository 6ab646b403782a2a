/* SPDX-License-Identifier: MIT */
/*
 * verbs: CQs and QPs.
 *
 * CQs carry a completion channel so an idle core can sleep on them.  QPs
 * are created in INIT and reach RTS in qp_connect, from the peer's
 * nic_addr and qp_info.
 *
 * Teardown.  Like loop, destroying a parent frees what the caller left
 * behind: close() destroys the remaining QPs, CQs and MRs, cq_destroy() the
 * QPs reporting to it (verbs refuses to free a parent with live children,
 * so each object sits on its parent's list; the lists are guarded by the
 * NIC's mutex, taken on the control path only).
 */
#include "qp/verbs/verbs.h"

#include "ring/base/atomics.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "ring/base/compiler.h"

/* ------------------------------------------------------------ teardown */

/* Unlink x from a singly linked list threaded through ->next. */
#define LIST_UNLINK(head, x)						\
	do {								\
		__typeof__(x) *pp_ = &(head);				\
		while (*pp_ && *pp_ != (x))				\
			pp_ = &(*pp_)->next;				\
		if (*pp_)						\
			*pp_ = (x)->next;				\
	} while (0)

static void qp_free_locked(struct fv_qp *qp)
{
	int rc = ibv_destroy_qp(qp->qp);

	if (rc)
		vlog(qp->nic, "ibv_destroy_qp(QP 0x%x) failed: %s", qp->qp->qp_num,
		     strerror(fv_errno(rc)));
	LIST_UNLINK(qp->cq->qps, qp);
	free(qp);
}

/* Events not yet acknowledged would make ibv_destroy_cq wait forever. */
static void cq_drain_events(struct fv_cq *cq)
{
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	unsigned int n = 0;

	while (ibv_get_cq_event(cq->ch, &ev_cq, &ev_ctx) == 0)
		n++;
	if (n)
		ibv_ack_cq_events(cq->cq, n);
}

void fv_cq_free_locked(struct fv_cq *cq)
{
	struct fv_nic *nic = cq->nic;
	int rc;

	while (cq->qps)
		qp_free_locked(cq->qps);
	if (cq->cq) {
		if (cq->ch)
			cq_drain_events(cq);
		rc = ibv_destroy_cq(cq->cq);
		if (rc)
			vlog(nic, "ibv_destroy_cq failed: %s", strerror(fv_errno(rc)));
	}
	if (cq->ch) {
		rc = ibv_destroy_comp_channel(cq->ch);
		if (rc)
			vlog(nic, "ibv_destroy_comp_channel failed: %s", strerror(fv_errno(rc)));
	}
	LIST_UNLINK(nic->cqs, cq);
	free(cq);
}

/* ------------------------------------------------------------ CQs */

static int cq_open_channel(struct fv_cq *cq)
{
	struct fv_nic *nic = cq->nic;
	int fl, err;

	cq->ch = ibv_create_comp_channel(nic->ctx);
	if (!cq->ch) {
		err = null_errno(ENOMEM);
		vlog(nic, "cannot create a completion channel: %s", strerror(err));
		return -err;
	}
	/* cq_ack drains events without blocking the core. */
	fl = fcntl(cq->ch->fd, F_GETFL);
	if (fl < 0 || fcntl(cq->ch->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
		err = errno;
		vlog(nic, "cannot make the completion channel non-blocking: %s", strerror(err));
		return -err;
	}
	return 0;
}

int fv_cq_create(struct nic *n, uint32_t cqe, struct nic_cq **out)
{
	struct fv_nic *nic = nic_of(n);
	struct fv_cq *cq;
	int rc;

	if (!cqe || cqe > nic->max_cqe || cqe > INT_MAX) {
		vlog(nic, "a CQ of %u entries: the device allows 1..%u", cqe, nic->max_cqe);
		return -EINVAL;
	}
	cq = calloc(1, sizeof(*cq));
	if (!cq)
		return -ENOMEM;
	cq->nic = nic;
	pthread_mutex_lock(&nic->lock);
	cq->next = nic->cqs;
	nic->cqs = cq;
	rc = cq_open_channel(cq);
	if (!rc) {
		cq->cq = ibv_create_cq(nic->ctx, (int)cqe, cq, cq->ch, 0);
		if (!cq->cq) {
			rc = -null_errno(ENOMEM);
			vlog(nic, "cannot create a CQ of %u entries: %s", cqe, strerror(-rc));
		}
	}
	if (rc)
		fv_cq_free_locked(cq);
	pthread_mutex_unlock(&nic->lock);
	if (!rc)
		*out = (struct nic_cq *)(void *)cq;
	return rc;
}

void fv_cq_destroy(struct nic_cq *c)
{
	struct fv_cq *cq = cq_of(c);
	struct fv_nic *nic;

	if (!cq)
		return;
	nic = cq->nic;
	pthread_mutex_lock(&nic->lock);
	fv_cq_free_locked(cq);
	pthread_mutex_unlock(&nic->lock);
}

int fv_cq_arm(struct nic_cq *c)
{
	int rc = ibv_req_notify_cq(cq_of(c)->cq, 0);

	return rc ? -fv_errno(rc) : 0;
}

int fv_cq_fd(const struct nic_cq *c)
{
	return ((const struct fv_cq *)(const void *)c)->ch->fd;
}

void fv_cq_ack(struct nic_cq *c)
{
	cq_drain_events(cq_of(c));
}

/* ------------------------------------------------------------ QPs */

static uint32_t random_psn(void)
{
	uint32_t v;

	if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != (ssize_t)sizeof(v)) {
		struct timespec ts;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		v = (uint32_t)ts.tv_nsec * 2654435761u ^ (uint32_t)getpid();
	}
	return v & 0xffffff; /* PSNs are 24 bits */
}

int fv_qp_to_init(struct fv_qp *qp)
{
	struct ibv_qp_attr a;
	int rc;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = qp->nic->port;
	a.qp_access_flags = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE |
			    IBV_ACCESS_LOCAL_WRITE;
	rc = fv_calls.modify_qp(qp->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
				IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	if (rc) {
		rc = fv_errno(rc);
		vlog(qp->nic, "QP 0x%x RESET->INIT failed: %s", qp->qp->qp_num, strerror(rc));
		return -rc;
	}
	return 0;
}

/* An RC QP as ferry wants it; *inl = the inline size it got. */
int fv_create_rc_qp(struct fv_nic *nic, struct ibv_cq *cq, uint32_t max_wr,
		    struct ibv_qp **out, uint32_t *inl)
{
	struct ibv_qp_init_attr ia;

	for (uint32_t want = VERBS_INLINE;; want = 0) {
		memset(&ia, 0, sizeof(ia));
		ia.send_cq = cq;
		ia.recv_cq = cq;
		ia.qp_type = IBV_QPT_RC;
		ia.sq_sig_all = 0; /* selective signalling */
		ia.cap.max_send_wr = max_wr;
		ia.cap.max_recv_wr = 1; /* one-sided only: the RQ stays empty */
		ia.cap.max_send_sge = 1;
		ia.cap.max_recv_sge = 1;
		ia.cap.max_inline_data = want;
		*out = ibv_create_qp(nic->pd, &ia);
		/* Some devices refuse any inline data: try again without. */
		if (*out || !want)
			break;
	}
	if (!*out)
		return -null_errno(ENOMEM);
	*inl = ia.cap.max_inline_data;
	return 0;
}

int fv_qp_create(struct nic *n, struct nic_cq *c, uint32_t max_wr, struct nic_qp **out)
{
	struct fv_nic *nic = nic_of(n);
	struct fv_cq *cq = cq_of(c);
	struct fv_qp *qp;
	int rc;

	if (!cq || cq->nic != nic || !max_wr || max_wr > nic->max_qp_wr) {
		vlog(nic, "a QP of %u WRs: the device allows 1..%u (and the CQ must be this NIC's)",
		     max_wr, nic->max_qp_wr);
		return -EINVAL;
	}
	qp = calloc(1, sizeof(*qp));
	if (!qp)
		return -ENOMEM;
	qp->nic = nic;
	qp->cq = cq;
	qp->psn = random_psn();
	rc = fv_create_rc_qp(nic, cq->cq, max_wr, &qp->qp, &qp->max_inline);
	if (rc) {
		vlog(nic, "cannot create an RC QP of %u WRs: %s", max_wr, strerror(-rc));
		free(qp);
		return rc;
	}
	pthread_mutex_lock(&nic->lock);
	qp->next = cq->qps;
	cq->qps = qp;
	rc = fv_qp_to_init(qp);
	if (rc)
		qp_free_locked(qp);
	pthread_mutex_unlock(&nic->lock);
	if (!rc)
		*out = (struct nic_qp *)(void *)qp;
	return rc;
}

void fv_qp_destroy(struct nic_qp *q)
{
	struct fv_qp *qp = qp_of(q);
	struct fv_nic *nic;

	if (!qp)
		return;
	nic = qp->nic;
	pthread_mutex_lock(&nic->lock);
	qp_free_locked(qp);
	pthread_mutex_unlock(&nic->lock);
}

void fv_qp_info(const struct nic_qp *q, struct nic_qp_info *out)
{
	const struct fv_qp *qp = cqp_of(q);

	/* The secret too (zero for verbs, nic.h): it goes on the wire as is. */
	memset(out, 0, sizeof(*out));
	out->qpn = qp->qp->qp_num;
	out->psn = qp->psn;
}

uint32_t fv_qp_num(const struct nic_qp *q)
{
	return cqp_of(q)->qp->qp_num;
}

/*
 * The GIDs a RoCE v2 QP pair uses: both of one IP family.  Each side picks
 * IPv4-mapped first, so a host with both families meeting a peer with IPv6
 * only would pair an IPv4 source with an IPv6 destination, which no packet
 * can carry (rxe refuses the RTR, a NIC retries until RETRY_EXC).  Then the
 * host with both uses its IPv6 GID (its alternate), and so does the peer
 * when it talks back: both sides reach the same pair.
 */
static void roce_gids(const struct fv_nic *nic, const struct fv_addr *ra, int *sgid_index,
		      const uint8_t **dgid)
{
	bool v4 = fv_gid_is_v4mapped(nic->gid.raw), rv4 = fv_gid_is_v4mapped(ra->gid);

	*sgid_index = nic->gid_index;
	*dgid = ra->gid;
	if (v4 == rv4 || nic->gid_type != IBV_GID_TYPE_ROCE_V2)
		return;
	if (nic->has_alt && !READ_ONCE(nic->alt_lost) && fv_gid_is_v4mapped(nic->alt_gid.raw) == rv4)
		*sgid_index = nic->alt_gid_index;
	else if (ra->has_alt && fv_gid_is_v4mapped(ra->alt_gid) == v4)
		*dgid = ra->alt_gid;
}

static void rtr_attr(const struct fv_qp *qp, const struct fv_addr *ra,
		     const struct nic_qp_info *rqp, struct ibv_qp_attr *a, int *mask)
{
	const struct fv_nic *nic = qp->nic;
	uint8_t mtu = READ_ONCE(nic->active_mtu); /* a LID change refreshes it */

	memset(a, 0, sizeof(*a));
	a->qp_state = IBV_QPS_RTR;
	/* enum ibv_mtu grows with the size: the smaller end limits the path. */
	a->path_mtu = mtu < ra->mtu ? mtu : ra->mtu;
	a->dest_qp_num = rqp->qpn;
	a->rq_psn = rqp->psn & 0xffffff;
	a->max_dest_rd_atomic = (uint8_t)nic->max_dest_rd_atomic;
	a->min_rnr_timer = 12;
	a->ah_attr.port_num = nic->port;
	/* IB: the virtual lane's service level; RoCE: the 802.1p priority
	 * some NICs derive from it (NCCL_IB_SL). */
	a->ah_attr.sl = fv_ib_env(nic, "FERRY_IB_SL", 15, 0);
	if (nic->link_layer == IBV_LINK_LAYER_ETHERNET) {
		const uint8_t *dgid;
		int sgid_index;

		/* RoCE has no LIDs: every packet carries a GRH. */
		roce_gids(nic, ra, &sgid_index, &dgid);
		a->ah_attr.is_global = 1;
		memcpy(a->ah_attr.grh.dgid.raw, dgid, 16);
		a->ah_attr.grh.sgid_index = (uint8_t)sgid_index;
		a->ah_attr.grh.hop_limit = 64;
		/* The DSCP/ECN byte of every packet: a lossless (PFC) class is
		 * the fabric's choice, as NCCL_IB_TC leaves it to the user. */
		a->ah_attr.grh.traffic_class = fv_ib_env(nic, "FERRY_IB_TC", 255, 0);
	} else {
		a->ah_attr.dlid = ra->lid;
	}
	*mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
		IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
}

/*
 * The transport's retry knobs, like NCCL's NCCL_IB_TIMEOUT/_RETRY_CNT:
 * FERRY_IB_TIMEOUT, the local ACK timeout 4.096 us * 2^v (0..31, 0 = wait
 * for ever; default 14 = 67 ms per try), and FERRY_IB_RETRY_CNT (0..7,
 * default 6).  Soft-RoCE wants them: on a busy (or emulated) host its ACKs
 * can take longer than 67 ms, and each spurious go-back-N retry risks rxe
 * NAKing a valid request ("remote invalid request"); and rxe counts
 * retry_cnt 7 as "retry for ever" (rxe_comp.c), so there only timeout_ms
 * would notice a dead peer: hence 6, one try less than the usual 7
 * elsewhere.  A bad value is reported once per variable and ignored.
 */
uint8_t fv_ib_env(const struct fv_nic *nic, const char *name, long max, uint8_t dflt)
{
	const char *s = getenv(name);
	char *end;
	long v;

	if (!s || !*s)
		return dflt;
	errno = 0;
	v = strtol(s, &end, 10);
	/* isdigit first: strtol alone would take " 1", "+1" and "-0". */
	if (!isdigit((unsigned char)*s) || errno || *end || v > max) {
		/* Once per variable and process, any thread: one flag for all
		 * of them kept a bad FERRY_IB_TC quiet after a bad FERRY_IB_SL. */
		if (fv_first_time(name))
			vlog(nic, "%s='%s' is not a number in 0..%ld: using %u", name, s, max,
			     dflt);
		return dflt;
	}
	return (uint8_t)v;
}

static void rts_attr(const struct fv_qp *qp, const struct fv_addr *ra,
		     struct ibv_qp_attr *a, int *mask)
{
	uint32_t rd = fv_qp_rd_atomic(qp->nic, ra->rd_atomic);

	memset(a, 0, sizeof(*a));
	a->qp_state = IBV_QPS_RTS;
	a->timeout = fv_ib_env(qp->nic, "FERRY_IB_TIMEOUT", 31, 14);
	a->retry_cnt = fv_ib_env(qp->nic, "FERRY_IB_RETRY_CNT", 7, 6);
	a->rnr_retry = 7; /* 7 = retry forever; no RNR with one-sided ops anyway */
	a->sq_psn = qp->psn;
	a->max_rd_atomic = (uint8_t)rd;
	*mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
		IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
}

/* A failed transition: say which addresses were used, and what to check. */
static void log_connect_failure(const struct fv_qp *qp, const char *step, int err,
				const struct fv_addr *ra, const struct nic_qp_info *rqp)
{
	const struct fv_nic *nic = qp->nic;
	char lg[INET6_ADDRSTRLEN], rg[INET6_ADDRSTRLEN];
	const uint8_t *sgid, *dgid;
	int sgid_index;

	if (nic->link_layer != IBV_LINK_LAYER_ETHERNET) {
		vlog(nic, "QP 0x%x %s failed: %s (errno %d); local LID 0x%x MTU %u; "
		     "peer QPN 0x%x LID 0x%x MTU %u port %u: check the peer's LID and the "
		     "subnet manager", qp->qp->qp_num, step, strerror(err), err,
		     READ_ONCE(nic->lid), mtu_bytes(READ_ONCE(nic->active_mtu)), rqp->qpn, ra->lid,
		     mtu_bytes(ra->mtu), ra->port);
		return;
	}
	roce_gids(nic, ra, &sgid_index, &dgid);
	sgid = sgid_index == nic->gid_index ? nic->gid.raw : nic->alt_gid.raw;
	fv_gid_str(sgid, lg, sizeof(lg));
	fv_gid_str(dgid, rg, sizeof(rg));
	vlog(nic, "QP 0x%x %s failed: %s (errno %d); local GID[%d] %s (%s) MTU %u; "
	     "peer QPN 0x%x GID %s (its index %u) LID 0x%x MTU %u: a wrong GID is the most "
	     "common cause: both GIDs must be RoCE v2 addresses that reach each other "
	     "(same subnet/VLAN or routed); set FERRY_GID_INDEX on either side to override",
	     qp->qp->qp_num, step, strerror(err), err, sgid_index, lg,
	     fv_gid_kind(sgid, nic->gid_type), mtu_bytes(READ_ONCE(nic->active_mtu)), rqp->qpn,
	     rg, dgid == ra->gid ? ra->gid_index : ra->alt_gid_index, ra->lid,
	     mtu_bytes(ra->mtu));
}

/*
 * Whether an address fv_addr_unpack refused carries the verbs magic (as
 * fv_addr_pack writes it): then it is a verbs address that is invalid (a
 * layout version we do not know, or a bad link layer, port, MTU, LID or
 * GID), not another provider's; the log says which.
 */
static bool verbs_magic(const struct nic_addr *remote)
{
	static const struct fv_addr none;
	struct nic_addr ours;

	fv_addr_pack(&none, &ours);
	return memcmp(remote->bytes, ours.bytes, 4) == 0;
}

static void log_refused_addr(const struct fv_qp *qp, const struct nic_addr *remote)
{
	const uint8_t *b = remote->bytes;

	if (!verbs_magic(remote))
		vlog(qp->nic, "QP 0x%x: the peer's address is not a verbs address (starts "
		     "'%.4s'): does the peer use another NIC provider (loop)?", qp->qp->qp_num,
		     (const char *)b);
	else if (b[4] != VERBS_ADDR_VERSION)
		vlog(qp->nic, "QP 0x%x: the peer's verbs address has layout version %u, this "
		     "build knows %u: refused", qp->qp->qp_num, b[4], VERBS_ADDR_VERSION);
	else
		vlog(qp->nic, "QP 0x%x: the peer's verbs address is invalid: refused (one of "
		     "link layer %u, port %u, MTU %u, LID 0x%x, its GIDs)", qp->qp->qp_num, b[5],
		     b[6], b[7], (unsigned)(b[24] | b[25] << 8));
}

static int check_remote(const struct fv_qp *qp, const struct nic_addr *remote,
			const struct nic_qp_info *rqp, struct fv_addr *ra)
{
	const struct fv_nic *nic = qp->nic;

	if (!remote || !rqp)
		return -EINVAL;
	if (fv_addr_unpack(remote, ra)) {
		log_refused_addr(qp, remote);
		return -EINVAL;
	}
	if (ra->link_layer != nic->link_layer) {
		vlog(nic, "QP 0x%x: link layer mismatch: this port is %s, the peer's is %s",
		     qp->qp->qp_num, nic->link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "IB",
		     ra->link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "IB");
		return -EINVAL;
	}
	return qp->connected ? -EISCONN : 0;
}

int fv_qp_connect(struct nic_qp *q, const struct nic_addr *remote,
		  const struct nic_qp_info *rqp)
{
	struct fv_qp *qp = qp_of(q);
	struct fv_addr ra;
	struct ibv_qp_attr a;
	int mask, rc;

	rc = check_remote(qp, remote, rqp, &ra);
	if (rc)
		return rc;
	rtr_attr(qp, &ra, rqp, &a, &mask);
	rc = fv_calls.modify_qp(qp->qp, &a, mask);
	if (rc) {
		rc = fv_errno(rc);
		log_connect_failure(qp, "INIT->RTR", rc, &ra, rqp);
		return -rc;
	}
	rts_attr(qp, &ra, &a, &mask);
	rc = fv_calls.modify_qp(qp->qp, &a, mask);
	if (rc) {
		rc = fv_errno(rc);
		log_connect_failure(qp, "RTR->RTS", rc, &ra, rqp);
		return -rc;
	}
	qp->connected = true;
	return 0;
}

int fv_qp_set_error(struct nic_qp *q)
{
	struct fv_qp *qp = qp_of(q);
	struct ibv_qp_attr a;
	int rc;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_ERR;
	rc = fv_calls.modify_qp(qp->qp, &a, IBV_QP_STATE);
	if (unlikely(rc)) {
		rc = fv_errno(rc);
		vlog(qp->nic, "QP 0x%x ->ERR failed: %s", qp->qp->qp_num, log_errstr(rc));
		return -rc;
	}
	return 0;
}
