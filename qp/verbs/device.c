/* SPDX-License-Identifier: MIT */
/*
 * verbs: the rdma-core NIC provider (RC QPs, one-sided READ/WRITE).
 *
 * One struct fv_nic per open(): device context, protection domain, the
 * port and the GID (RoCE) or LID (InfiniBand) its QPs use.  This file
 * opens, describes and closes it, registers memory on it and finds the
 * host's devices; it also holds the verbs calls tests may stub and the
 * provider's log line.  The GID choice is in gid.c, CQs and QPs in
 * queue.c, post, poll and the provider table in data.c.
 */
#include "qp/verbs/verbs.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "ring/base/atomics.h"
#include "ring/base/log.h"

static const uint8_t fv_magic[4] = { 'V', 'R', 'B', 'S' };

/* ------------------------------------------------------------ stubbable calls */

static int real_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	return ibv_post_send(qp, wr, bad);
}

static struct ibv_mr *real_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access)
{
	return ibv_reg_mr(pd, addr, len, access);
}

static int real_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	return ibv_poll_cq(cq, n, wc);
}

static int real_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	return ibv_modify_qp(qp, attr, mask);
}

static int real_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index,
			     struct ibv_gid_entry *entry, uint32_t flags)
{
	return ibv_query_gid_ex(ctx, port, index, entry, flags);
}

static int real_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *pa)
{
	return ibv_query_port(ctx, port, pa);
}

static int real_get_async_event(struct ibv_context *ctx, struct ibv_async_event *ev)
{
	return ibv_get_async_event(ctx, ev);
}

static void real_ack_async_event(struct ibv_async_event *ev)
{
	ibv_ack_async_event(ev);
}

static const struct fv_ops real_ops = {
	.post_send = real_post_send,
	.reg_mr = real_reg_mr,
	.poll_cq = real_poll_cq,
	.modify_qp = real_modify_qp,
	.query_gid_ex = real_query_gid_ex,
	.query_port = real_query_port,
	.get_async_event = real_get_async_event,
	.ack_async_event = real_ack_async_event,
};

/* A copy, not a pointer: the data path pays one indirect call, as ibv_* would. */
struct fv_ops fv_calls = {
	.post_send = real_post_send,
	.reg_mr = real_reg_mr,
	.poll_cq = real_poll_cq,
	.modify_qp = real_modify_qp,
	.query_gid_ex = real_query_gid_ex,
	.query_port = real_query_port,
	.get_async_event = real_get_async_event,
	.ack_async_event = real_ack_async_event,
};

void fv_set_ops(const struct fv_ops *o)
{
	fv_calls = real_ops;
	if (!o)
		return;
	if (o->post_send)
		fv_calls.post_send = o->post_send;
	if (o->reg_mr)
		fv_calls.reg_mr = o->reg_mr;
	if (o->poll_cq)
		fv_calls.poll_cq = o->poll_cq;
	if (o->modify_qp)
		fv_calls.modify_qp = o->modify_qp;
	if (o->query_gid_ex)
		fv_calls.query_gid_ex = o->query_gid_ex;
	if (o->query_port)
		fv_calls.query_port = o->query_port;
	if (o->get_async_event)
		fv_calls.get_async_event = o->get_async_event;
	if (o->ack_async_event)
		fv_calls.ack_async_event = o->ack_async_event;
}

/* ------------------------------------------------------------ messages */

void fv_log(int level, const struct fv_nic *nic, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (nic->port)
		flog(level, "verbs: %s port %u: %s", nic->name, nic->port, msg);
	else
		flog(level, "verbs: %s: %s", nic->name, msg);
}

/* ------------------------------------------------------------ addresses */

void fv_addr_pack(const struct fv_addr *a, struct nic_addr *out)
{
	uint8_t *b = out->bytes;

	memset(out, 0, sizeof(*out));
	memcpy(b, fv_magic, sizeof(fv_magic));
	b[4] = VERBS_ADDR_VERSION;
	b[5] = a->link_layer;
	b[6] = a->port;
	b[7] = a->mtu;
	memcpy(b + 8, a->gid, 16);
	b[24] = (uint8_t)a->lid;
	b[25] = (uint8_t)(a->lid >> 8);
	b[26] = a->gid_index;
	b[27] = a->rd_atomic;
	if (a->has_alt) {
		memcpy(b + 32, a->alt_gid, 16);
		b[48] = 1;
		b[49] = a->alt_gid_index;
	}
}

/* What the layout leaves zero is zero (a peer's address is read strictly):
 * 28..31 and 50..63 always, 32..49 without an alternate GID (byte 48 0),
 * and an alternate GID that is there is not all zero. */
static bool fv_addr_rest_ok(const uint8_t *b, bool alt)
{
	static const uint8_t zero[NIC_ADDR_LEN];

	if (memcmp(b + 28, zero, 4) || memcmp(b + 50, zero, NIC_ADDR_LEN - 50))
		return false;
	if (b[48] > 1)
		return false;
	return alt ? memcmp(b + 32, zero, 16) != 0 : !memcmp(b + 32, zero, 18);
}

/* What a port of ours can say (fv_open): a link layer we know, a port
 * number (from 1), on InfiniBand a unicast LID (the LID routes; 0 is
 * unassigned, 0xc000.. multicast and permissive), on Ethernet a GID (the
 * destination of every packet).  Anything else is no peer to connect to. */
static bool fv_addr_sane(const struct fv_addr *a)
{
	static const uint8_t zero[16];

	if (!a->port)
		return false;
	if (a->link_layer == IBV_LINK_LAYER_INFINIBAND)
		return a->lid && a->lid < 0xc000;
	return a->link_layer == IBV_LINK_LAYER_ETHERNET && memcmp(a->gid, zero, 16) != 0;
}

int fv_addr_unpack(const struct nic_addr *in, struct fv_addr *a)
{
	const uint8_t *b = in->bytes;
	struct fv_addr t;

	/* A refusal leaves *a zeroed: nothing half decoded to use by mistake. */
	memset(a, 0, sizeof(*a));
	if (memcmp(b, fv_magic, sizeof(fv_magic)) != 0 || b[4] != VERBS_ADDR_VERSION)
		return -EINVAL;
	if (!mtu_bytes(b[7]))
		return -EINVAL;
	memset(&t, 0, sizeof(t));
	t.link_layer = b[5];
	t.port = b[6];
	t.mtu = b[7];
	memcpy(t.gid, b + 8, 16);
	t.lid = (uint16_t)(b[24] | b[25] << 8);
	t.gid_index = b[26];
	t.rd_atomic = b[27];
	t.has_alt = b[48] == 1;
	memcpy(t.alt_gid, b + 32, 16);
	t.alt_gid_index = b[49];
	if (!fv_addr_rest_ok(b, t.has_alt) || !fv_addr_sane(&t))
		return -EINVAL;
	*a = t;
	return 0;
}

static void nic_to_addr(const struct fv_nic *nic, struct fv_addr *a)
{
	memset(a, 0, sizeof(*a));
	memcpy(a->gid, nic->gid.raw, 16);
	a->lid = READ_ONCE(nic->lid);
	a->port = nic->port;
	a->mtu = READ_ONCE(nic->active_mtu);
	a->link_layer = nic->link_layer;
	a->gid_index = (uint8_t)nic->gid_index;
	a->rd_atomic = (uint8_t)nic->max_dest_rd_atomic;
	a->has_alt = nic->has_alt && !READ_ONCE(nic->alt_lost); /* its index lost it */
	memcpy(a->alt_gid, nic->alt_gid.raw, 16);
	a->alt_gid_index = (uint8_t)nic->alt_gid_index;
}

void fv_addr(const struct nic *n, struct nic_addr *out)
{
	struct fv_addr a;

	nic_to_addr(cnic_of(n), &a);
	fv_addr_pack(&a, out);
}

/* ------------------------------------------------------------ open */

/* "name" or "name:port"; *port = 0 when not given. */
static int parse_dev(const char *dev, char *name, size_t len, int *port)
{
	const char *colon = dev ? strrchr(dev, ':') : NULL;
	size_t n;

	*port = 0;
	if (!dev || !*dev) {
		log_err("verbs: no device name given");
		return -ENODEV;
	}
	n = colon ? (size_t)(colon - dev) : strlen(dev);
	if (colon) {
		char *end;
		long p = strtol(colon + 1, &end, 10);

		/* isdigit first: strtol alone would take " 1" and "+1". */
		if (!isdigit((unsigned char)colon[1]) || *end || p < 1 || p > 255) {
			log_err("verbs: '%s': bad port (want name[:port], port 1..255)", dev);
			return -EINVAL;
		}
		*port = (int)p;
	}
	if (n == 0 || n >= len) {
		log_err("verbs: '%s': bad device name", dev);
		return -EINVAL;
	}
	memcpy(name, dev, n);
	name[n] = '\0';
	return 0;
}

static void device_names(struct ibv_device **list, int n, char *buf, size_t len)
{
	size_t off = 0;

	snprintf(buf, len, "none: this host has no RDMA device");
	for (int i = 0; i < n && off < len; i++)
		off += (size_t)snprintf(buf + off, len - off, "%s%s", i ? " " : "",
					ibv_get_device_name(list[i]));
}

/*
 * fork() and registered memory: before Linux 5.13 a page registered with
 * the NIC becomes copy-on-write at a fork, and the first write by the
 * parent moves the parent to a new page while the NIC keeps the old one
 * (the child's): the parent's later transfers read or write the child's
 * memory.  ibv_fork_init() makes rdma-core mark every registration
 * MADV_DONTFORK (the child gets no mapping there at all: a child touching
 * a registered buffer faults); from 5.13 the kernel copies pinned pages
 * for the child instead (ibv_is_fork_initialized() says
 * IBV_FORK_UNNEEDED) and the call does nothing.  Process-wide, and only good before the
 * process's first registration: so here, once, before ferry lists or
 * opens a device.  An application that registered memory through
 * rdma-core earlier gets EINVAL: said, not fatal.
 */
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void fork_safe_once(void)
{
	/* 0 also when unneeded (the kernel copies pinned pages) or done already
	 * (RDMAV_FORK_SAFE, the application): rdma-core checks both itself. */
	int rc = ibv_fork_init();

	if (rc)
		log_warn("verbs: ibv_fork_init: %s: memory registered before a fork() is "
			 "not fork-safe on this kernel (< 5.13): set RDMAV_FORK_SAFE=1 or "
			 "create the engine before any other RDMA registration", strerror(rc));
}

static void fork_safe(void)
{
	pthread_once(&fork_once, fork_safe_once);
}

static int open_device(struct fv_nic *nic)
{
	struct ibv_device **list;
	char names[512];
	int n = 0, i, err = 0;

	fork_safe();
	list = ibv_get_device_list(&n);
	if (!list) {
		err = null_errno(ENODEV);
		vlog(nic, "cannot list RDMA devices: %s%s", strerror(err),
		     err == ENOSYS ? " (this kernel has no RDMA support)" : "");
		return -ENODEV;
	}
	for (i = 0; i < n; i++)
		if (strcmp(ibv_get_device_name(list[i]), nic->name) == 0)
			break;
	if (i == n) {
		device_names(list, n, names, sizeof(names));
		vlog(nic, "no such RDMA device (available: %s)", names);
		err = ENODEV;
	} else {
		nic->ctx = ibv_open_device(list[i]);
		if (!nic->ctx) {
			err = null_errno(ENODEV);
			vlog(nic, "cannot open the device: %s", strerror(err));
		}
	}
	ibv_free_device_list(list);
	return -err;
}

static uint32_t clip_rd_atomic(int v)
{
	if (v <= 0)
		return 0;
	return v < VERBS_MAX_RD_ATOMIC ? (uint32_t)v : VERBS_MAX_RD_ATOMIC;
}

void fv_nic_set_limits(struct fv_nic *nic, const struct ibv_device_attr *da)
{
	uint32_t cap = fv_ib_env(nic, "FERRY_IB_RD_ATOMIC", VERBS_MAX_RD_ATOMIC,
				 VERBS_DEFAULT_RD_ATOMIC);

	nic->max_qp_wr = (uint32_t)da->max_qp_wr;
	nic->max_cqe = (uint32_t)da->max_cqe;
	nic->max_rd_atomic = clip_rd_atomic(da->max_qp_init_rd_atom);
	nic->max_dest_rd_atomic = clip_rd_atomic(da->max_qp_rd_atom);
	/* A lower initiator depth: the default's, or asked for (0: the device's). */
	if (cap && cap < nic->max_rd_atomic)
		nic->max_rd_atomic = cap;
}

uint32_t fv_qp_rd_atomic(const struct fv_nic *nic, uint32_t peer_grant)
{
	/* More outstanding READs than the peer grants would be NAKed. */
	return peer_grant < nic->max_rd_atomic ? peer_grant : nic->max_rd_atomic;
}

static int query_device(struct fv_nic *nic, uint8_t *nports)
{
	struct ibv_device_attr da;
	int rc = ibv_query_device(nic->ctx, &da);

	if (rc) {
		rc = fv_errno(rc);
		vlog(nic, "ibv_query_device failed: %s", strerror(rc));
		return -rc;
	}
	fv_nic_set_limits(nic, &da);
	*nports = da.phys_port_cnt;
	return 0;
}

static int query_port(struct fv_nic *nic, int port, struct ibv_port_attr *pa)
{
	int rc = fv_calls.query_port(nic->ctx, (uint8_t)port, pa);

	if (rc) {
		rc = fv_errno(rc);
		vlog(nic, "ibv_query_port(%d) failed: %s", port, strerror(rc));
		return -rc;
	}
	return 0;
}

/* The requested port, else the first ACTIVE one; it must be ACTIVE. */
static int pick_port(struct fv_nic *nic, int req, uint8_t nports, struct ibv_port_attr *pa)
{
	int p = req ? req : 1, last = req ? req : nports, rc;

	if (req > nports) {
		vlog(nic, "the device has no port %d (ports 1..%u)", req, nports);
		return -ENODEV;
	}
	for (; p <= last; p++) {
		rc = query_port(nic, p, pa);
		if (rc)
			return rc;
		if (pa->state == IBV_PORT_ACTIVE)
			break;
		if (req) {
			vlog(nic, "port %d is %s, not ACTIVE", p, ibv_port_state_str(pa->state));
			return -ENODEV;
		}
	}
	if (p > last) {
		vlog(nic, "no ACTIVE port (%u ports; link down or no subnet manager?)", nports);
		return -ENODEV;
	}
	nic->port = (uint8_t)p;
	/* Old drivers report UNSPECIFIED for InfiniBand. */
	nic->link_layer = pa->link_layer == IBV_LINK_LAYER_ETHERNET ? IBV_LINK_LAYER_ETHERNET :
			  IBV_LINK_LAYER_INFINIBAND;
	nic->active_mtu = (uint8_t)pa->active_mtu;
	nic->lid = pa->lid;
	return 0;
}

/* InfiniBand: the LID routes, GID index 0 is only carried along. */
static int setup_ib(struct fv_nic *nic)
{
	char key[96];

	nic->gid_index = 0;
	nic->gid_type = IBV_GID_TYPE_IB;
	if (ibv_query_gid(nic->ctx, nic->port, 0, &nic->gid))
		memset(&nic->gid, 0, sizeof(nic->gid));
	snprintf(key, sizeof(key), "%s:%u:ib", nic->name, nic->port);
	if (fv_first_time(key))
		vinfo(nic, "InfiniBand: LID 0x%x, GID index 0", nic->lid);
	return 0;
}

static int read_numa(const char *name)
{
	char path[256];
	FILE *f;
	int v = -1;

	snprintf(path, sizeof(path), "/sys/class/infiniband/%s/device/numa_node", name);
	f = fopen(path, "re");
	if (!f)
		return -1;
	if (fscanf(f, "%d", &v) != 1)
		v = -1;
	fclose(f);
	return v < 0 ? -1 : v;
}

/* caps() reports the inline size of a QP as created: learn it once, here. */
static void probe_inline(struct fv_nic *nic)
{
	struct ibv_cq *cq = ibv_create_cq(nic->ctx, 1, NULL, NULL, 0);
	struct ibv_qp *qp = NULL;

	nic->max_inline = 0;
	if (!cq)
		return;
	if (fv_create_rc_qp(nic, cq, 1, &qp, &nic->max_inline) == 0)
		ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
}

static int open_steps(struct fv_nic *nic, const char *dev)
{
	struct ibv_port_attr pa;
	uint8_t nports = 0;
	int req, rc;

	rc = parse_dev(dev, nic->name, sizeof(nic->name), &req);
	if (!rc)
		rc = open_device(nic);
	if (!rc)
		rc = query_device(nic, &nports);
	if (!rc)
		rc = pick_port(nic, req, nports, &pa);
	if (rc)
		return rc;
	nic->pd = ibv_alloc_pd(nic->ctx);
	if (!nic->pd) {
		rc = -null_errno(ENOMEM);
		vlog(nic, "cannot allocate a protection domain: %s", strerror(-rc));
		return rc;
	}
	if (nic->link_layer == IBV_LINK_LAYER_ETHERNET)
		return fv_select_gid(nic, pa.gid_tbl_len);
	return setup_ib(nic);
}

int fv_open(const char *dev, struct nic **out)
{
	struct fv_nic *nic = calloc(1, sizeof(*nic));
	int rc;

	if (!nic)
		return -ENOMEM;
	pthread_mutex_init(&nic->lock, NULL);
	nic->gid_index = -1;
	nic->numa_node = -1;
	rc = open_steps(nic, dev);
	if (rc) {
		fv_close((struct nic *)(void *)nic);
		return rc;
	}
	nic->numa_node = read_numa(nic->name);
	probe_inline(nic);
	/* Device events are read by a control thread that must never block. */
	(void)fcntl(nic->ctx->async_fd, F_SETFL,
		    fcntl(nic->ctx->async_fd, F_GETFL) | O_NONBLOCK);
	*out = (struct nic *)(void *)nic;
	return 0;
}

/* ------------------------------------------------------------ teardown */

static void mrs_free_locked(struct fv_nic *nic)
{
	for (uint32_t i = 0; i < nic->nmr; i++) {
		int rc = ibv_dereg_mr(nic->mrs[i]);

		if (rc)
			vlog(nic, "ibv_dereg_mr failed: %s", strerror(fv_errno(rc)));
	}
	free(nic->mrs);
	nic->mrs = NULL;
	nic->nmr = nic->mr_cap = 0;
}

/* Children first: QPs, CQs (then their channels), MRs, the PD, the context. */
void fv_close(struct nic *n)
{
	struct fv_nic *nic = nic_of(n);
	int rc;

	if (!nic)
		return;
	pthread_mutex_lock(&nic->lock);
	while (nic->cqs)
		fv_cq_free_locked(nic->cqs);
	mrs_free_locked(nic);
	pthread_mutex_unlock(&nic->lock);
	if (nic->pd) {
		rc = ibv_dealloc_pd(nic->pd);
		if (rc)
			vlog(nic, "ibv_dealloc_pd failed: %s", strerror(fv_errno(rc)));
	}
	if (nic->ctx && ibv_close_device(nic->ctx))
		vlog(nic, "ibv_close_device failed: %s", strerror(null_errno(EIO)));
	pthread_mutex_destroy(&nic->lock);
	free(nic);
}

/* ------------------------------------------------------------ queries */

void fv_caps(const struct nic *n, struct nic_caps *out)
{
	const struct fv_nic *nic = cnic_of(n);

	out->max_qp_wr = nic->max_qp_wr;
	out->max_cqe = nic->max_cqe;
	out->max_inline = nic->max_inline;
	out->max_rd_atomic = nic->max_rd_atomic;
	/* The NIC does the work, none in our polls (not NIC_CAP_SERVES).
	 * Every field is set: the caps contract (nic.h) is the provider's. */
	out->flags = 0;
}

void fv_describe(const struct nic *n, char *buf, size_t len)
{
	const struct fv_nic *nic = cnic_of(n);
	char a[INET6_ADDRSTRLEN];

	if (nic->link_layer != IBV_LINK_LAYER_ETHERNET) {
		snprintf(buf, len, "%s port %u, InfiniBand, LID 0x%x, MTU %u, NUMA %d", nic->name,
			 nic->port, READ_ONCE(nic->lid), mtu_bytes(READ_ONCE(nic->active_mtu)),
			 nic->numa_node);
		return;
	}
	fv_gid_str(nic->gid.raw, a, sizeof(a));
	snprintf(buf, len, "%s port %u, %s, GID[%d] %s, MTU %u, NUMA %d", nic->name, nic->port,
		 nic->gid_type == IBV_GID_TYPE_ROCE_V1 ? "RoCE v1" : "RoCE v2", nic->gid_index, a,
		 mtu_bytes(READ_ONCE(nic->active_mtu)), nic->numa_node);
}

int fv_numa_node(const struct nic *n)
{
	return cnic_of(n)->numa_node;
}

/* ------------------------------------------------------------ memory */

static void fmt_limit(rlim_t v, char *buf, size_t len)
{
	if (v == RLIM_INFINITY)
		snprintf(buf, len, "unlimited");
	else
		snprintf(buf, len, "%llu KiB", (unsigned long long)v / 1024);
}

static void log_reg_failure(const struct fv_nic *nic, void *addr, size_t len, int err)
{
	struct rlimit rl;
	char lim[32];

	/* Pinning is what fails first for an unprivileged process. */
	if ((err == ENOMEM || err == EPERM) && getrlimit(RLIMIT_MEMLOCK, &rl) == 0 &&
	    rl.rlim_cur != RLIM_INFINITY && geteuid() != 0) {
		fmt_limit(rl.rlim_cur, lim, sizeof(lim));
		vlog(nic, "cannot register %zu bytes: RLIMIT_MEMLOCK is %s (ulimit -l); "
		     "raise it or run as root", len, lim);
		return;
	}
	vlog(nic, "cannot register %zu bytes at %p: %s", len, addr, strerror(err));
}

static int mr_track_locked(struct fv_nic *nic, struct ibv_mr *mr)
{
	if (nic->nmr == nic->mr_cap) {
		uint32_t cap = nic->mr_cap ? 2 * nic->mr_cap : 16;
		struct ibv_mr **m = realloc(nic->mrs, cap * sizeof(*m));

		if (!m)
			return -ENOMEM;
		nic->mrs = m;
		nic->mr_cap = cap;
	}
	nic->mrs[nic->nmr++] = mr;
	return 0;
}

/* Without REMOTE_WRITE the responder NIC itself refuses a peer's WRITE. */
static int mr_flags(unsigned access, bool local_write)
{
	return (local_write ? IBV_ACCESS_LOCAL_WRITE : 0) |
	       (access & NIC_ACCESS_REMOTE_READ ? IBV_ACCESS_REMOTE_READ : 0) |
	       (access & NIC_ACCESS_REMOTE_WRITE ? IBV_ACCESS_REMOTE_WRITE : 0);
}

int fv_reg_mr(struct nic *n, void *addr, size_t len, unsigned access, struct nic_mr *out)
{
	struct fv_nic *nic = nic_of(n);
	struct ibv_mr *mr;
	int err;

	if (!addr || !len)
		return -EINVAL;
	pthread_mutex_lock(&nic->lock);
	mr = fv_calls.reg_mr(nic->pd, addr, len, mr_flags(access, true));
	/*
	 * Read-only memory (a file mapped PROT_READ) cannot be pinned for
	 * writing: EFAULT.  Peers may only read it and here it can only be a
	 * WRITE's source, neither needs LOCAL_WRITE (a READ into it completes
	 * LOC_PROT_ERR, as it should).  REMOTE_WRITE requires LOCAL_WRITE.
	 */
	if (!mr && errno == EFAULT && !(access & NIC_ACCESS_REMOTE_WRITE))
		mr = fv_calls.reg_mr(nic->pd, addr, len, mr_flags(access, false));
	if (!mr) {
		err = null_errno(ENOMEM);
		pthread_mutex_unlock(&nic->lock);
		log_reg_failure(nic, addr, len, err);
		return -err;
	}
	if (mr_track_locked(nic, mr)) {
		ibv_dereg_mr(mr);
		pthread_mutex_unlock(&nic->lock);
		return -ENOMEM;
	}
	/* Before the lkey is out: no post can use it inline (see no_inline). */
	if (access & NIC_REG_CPU_OPAQUE)
		WRITE_ONCE(nic->no_inline, 1);
	pthread_mutex_unlock(&nic->lock);
	out->lkey = mr->lkey;
	out->rkey = mr->rkey;
	out->priv = mr;
	return 0;
}

int fv_dereg_mr(struct nic *n, struct nic_mr *mr)
{
	struct fv_nic *nic = nic_of(n);
	uint32_t i;
	int rc;

	pthread_mutex_lock(&nic->lock);
	for (i = 0; i < nic->nmr && nic->mrs[i] != mr->priv; i++)
		;
	if (!mr->priv || i == nic->nmr) {
		pthread_mutex_unlock(&nic->lock);
		return -EINVAL;
	}
	rc = ibv_dereg_mr(nic->mrs[i]);
	if (rc) {
		/* Still registered: close() tries again. */
		rc = fv_errno(rc);
		pthread_mutex_unlock(&nic->lock);
		vlog(nic, "ibv_dereg_mr failed: %s", strerror(rc));
		return -rc;
	}
	nic->mrs[i] = nic->mrs[--nic->nmr];
	pthread_mutex_unlock(&nic->lock);
	mr->priv = NULL;
	mr->lkey = 0;
	mr->rkey = 0;
	return 0;
}

/* ------------------------------------------------------------ discovery */

static bool first_active_port(struct ibv_context *ctx, struct nic_dev_info *d)
{
	struct ibv_device_attr da;
	struct ibv_port_attr pa;

	if (ibv_query_device(ctx, &da))
		return false;
	for (int p = 1; p <= da.phys_port_cnt; p++) {
		if (ibv_query_port(ctx, (uint8_t)p, &pa) || pa.state != IBV_PORT_ACTIVE)
			continue;
		d->port = (uint8_t)p;
		d->link_layer = pa.link_layer == IBV_LINK_LAYER_ETHERNET ?
				IBV_LINK_LAYER_ETHERNET : IBV_LINK_LAYER_INFINIBAND;
		d->active_mtu = (uint16_t)mtu_bytes(pa.active_mtu);
		return true;
	}
	return false;
}

int nic_verbs_discover(struct nic_dev_info *out, int max)
{
	struct ibv_device **list;
	int n = 0, count = 0;

	if (max <= 0)
		return 0;
	if (!out)
		return -EINVAL;
	/* No device, no driver, no kernel support: quietly none. */
	fork_safe();
	list = ibv_get_device_list(&n);
	if (!list)
		return 0;
	for (int i = 0; i < n && count < max; i++) {
		struct ibv_context *ctx = ibv_open_device(list[i]);
		struct nic_dev_info *d = &out[count];

		if (!ctx)
			continue;
		memset(d, 0, sizeof(*d));
		snprintf(d->name, sizeof(d->name), "%s", ibv_get_device_name(list[i]));
		if (first_active_port(ctx, d)) {
			d->numa_node = read_numa(d->name);
			count++;
		}
		ibv_close_device(ctx);
	}
	ibv_free_device_list(list);
	return count;
}
