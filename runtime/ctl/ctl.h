/* SPDX-License-Identifier: MIT */
/*
 * The control plane between engines: a TCP server on the engine's control
 * address (server.c, serve.c) that answers GET_DESC with the engine's
 * segment descriptor and serves the endpoint handshake (CONNECT,
 * DISCONNECT) and the initiators' KEEPALIVEs, many connections at once on
 * one event-driven thread; and the client side (client.c, pool.c, and
 * many.c, batch.c for calls to many peers at once) that
 * ferry_segment_open(), the repair thread and the leases use, over
 * connections kept per peer.  With a cluster key (auth.c) every connection
 * starts with a mutual challenge-response before anything is handed out.
 * Every malformed message is refused with a logged reason and the
 * connection closed; every wait has a deadline.
 */
#ifndef FERRY_RUNTIME_CTL_H
#define FERRY_RUNTIME_CTL_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>

#include "qp/auth/auth.h"
#include "ring/base/log.h"
#include "runtime/ctl/wire.h"

#define CTL_IO_TIMEOUT_MS 2000     /* a request, a reply, an authentication */
#define CTL_IDLE_TIMEOUT_MS 60000  /* a server connection without a request this long is closed */
#define CTL_MAX_CONNS 1024         /* connections a server holds; more are refused -EBUSY */
#define CTL_MIN_CONNS 16           /* ... unless half the fds left is less (never below this) */
#define CTL_ERRNO_MAX 4095 /* largest errno a WIRE_ERROR may carry */

/* A control-plane message, prefixed "ctl: ". */
#define ctl_log(fmt, ...) log_err("ctl: " fmt, ##__VA_ARGS__)

/* Build the descriptor to send: fill *out (regions on the heap); 0 or -errno. */
typedef int (*ctl_describe_fn)(void *arg, struct seg_desc *out);
/* Create and connect the target-side QPs of an endpoint; fill rep; 0 or -errno
 * (sent back as WIRE_ERROR).  Runs on the server thread: it may block a
 * little (verbs QP transitions), never on a peer. */
typedef int (*ctl_connect_fn)(void *arg, const struct wire_connect_req *req,
			      struct wire_connect_rep *rep);
/* Tear down the target-side QPs of an endpoint; 0 or -errno (-ENOENT unknown). */
typedef int (*ctl_disconnect_fn)(void *arg, const struct wire_disconnect *d);
/* An initiator says it is alive: renew its lease; 0 or -ENOENT (nothing of it here). */
typedef int (*ctl_keepalive_fn)(void *arg, uint64_t incarnation);
/* A peer's notification: queue it; 0, or -EAGAIN when the queue is full
 * (the sender tries again later).  Runs on the server thread, never blocks. */
typedef int (*ctl_notify_fn)(void *arg, const struct wire_notify *n);

struct ctl_conn;

/* What ctl_start keeps from before it (set with the ctl_set_* calls). */
struct ctl_cfg {
	ctl_connect_fn connect;       /* NULL: CONNECT_REQ answered -EOPNOTSUPP */
	ctl_disconnect_fn disconnect; /* NULL: DISCONNECT answered -EOPNOTSUPP */
	ctl_keepalive_fn keepalive;   /* NULL: KEEPALIVE answered -EOPNOTSUPP */
	ctl_notify_fn notify;         /* NULL: NOTIFY answered -EOPNOTSUPP */
	unsigned max_conns;           /* 0: CTL_MAX_CONNS */
	int idle_ms;                  /* 0: CTL_IDLE_TIMEOUT_MS */
	int has_key;                  /* peers must prove they hold key */
	struct auth_key key;
};

struct ctl {
	struct ctl_cfg cfg;
	int listen_fd;
	int stop_fd;               /* eventfd that wakes the thread to stop */
	int epoll_fd;
	pthread_t thread;
	int running;
	char address[64];          /* "host:port" actually bound */
	ctl_describe_fn describe;
	void *arg;
	struct ctl_conn **conns;   /* the server thread's own */
	unsigned n_conns;          /* written by the server thread; READ_ONCE elsewhere */
	int64_t listen_resume_ms;  /* accept paused (out of fds) until then; 0 = not */
	int64_t cap_log_ms;        /* last "at the cap" message */
	uint64_t cap_unlogged;     /* refusals since */
	uint64_t served;           /* requests answered */
	uint64_t refused;          /* malformed messages, late requests */
	uint64_t denied;           /* peers refused by authentication */
	uint64_t capped;           /* connections refused at the cap */
	uint64_t forged;           /* frames whose tag did not verify (connection closed) */
};

/* Bind listen ("ip:port", port 0 = any; NULL = "127.0.0.1:0") and start the thread. */
int ctl_start(struct ctl *c, const char *listen, ctl_describe_fn describe, void *arg);
/* Set the endpoint handlers; call before ctl_start (they share its arg). */
void ctl_set_ep_ops(struct ctl *c, ctl_connect_fn connect, ctl_disconnect_fn disconnect);
/* Set the keepalive handler; call before ctl_start. */
void ctl_set_keepalive(struct ctl *c, ctl_keepalive_fn keepalive);
/* Set the notification handler; call before ctl_start. */
void ctl_set_notify(struct ctl *c, ctl_notify_fn notify);
/* Require every peer to prove it holds key (NULL: no authentication);
 * call before ctl_start. */
void ctl_set_auth(struct ctl *c, const struct auth_key *key);
/* Connection cap and idle timeout (0: the defaults; the cap's is
 * CTL_MAX_CONNS or half of the descriptors left under RLIMIT_NOFILE, the
 * lower); call before ctl_start. */
void ctl_set_limits(struct ctl *c, unsigned max_conns, int idle_ms);
/* Stop the thread and close every socket; safe on a never-started ctl. */
void ctl_stop(struct ctl *c);

/* ---- client ----------------------------------------------------------- */

#define CTL_POOL_MAX 32        /* idle connections kept per client */
#define CTL_POOL_PER_PEER 4    /* ... and per peer */
#define CTL_POOL_IDLE_MS 20000 /* older ones are closed (the server's idle timeout is longer) */

struct ctl_pconn {
	struct sockaddr_in sin;
	int fd;
	int64_t last_ms;
	struct auth_sess sess;     /* its session (sealed frames) when the client has a key */
};

/*
 * An engine's client side: its key, its idle connections (one exchange at a
 * time on each: a connection is the caller's for the whole call, then goes
 * back), and a cancel eventfd that ends every call in progress.
 */
struct ctl_client {
	pthread_mutex_t lock;          /* idle[] */
	int stop_fd;
	int has_key;
	struct auth_key key;
	struct ctl_pconn idle[CTL_POOL_MAX];
	unsigned n_idle;
	uint64_t dials;                /* connections made (relaxed counters, for tests) */
	uint64_t reuses;               /* calls on a kept connection */
	uint64_t redials;              /* kept connections found broken and redialled */
	uint64_t forged;               /* replies whose tag did not verify (connection closed) */
	/* Tests: the next fault_left dials to port fault_port fail with
	 * fault_rc, none reuses a kept connection there (a network that cuts
	 * that peer off, then heals); fault_hits counts them.  Relaxed. */
	uint16_t fault_port;
	int fault_rc;
	uint32_t fault_left;
	uint32_t fault_hits;
};

/* key: prove it to every server (NULL: none).  0 or -errno. */
int ctl_client_init(struct ctl_client *cl, const struct auth_key *key);
/* Calls in progress and later end with -ECANCELED (engine destroy)... */
void ctl_client_cancel(struct ctl_client *cl);
/* ... until this (calls in progress may still see the cancel). */
void ctl_client_resume(struct ctl_client *cl);
/* Close every kept connection. */
void ctl_client_fini(struct ctl_client *cl);

/*
 * The calls.  cl may be NULL: then one connection for this call only and no
 * key.  Each blocks up to timeout_ms.  Errors: the target's negative errno
 * from a WIRE_ERROR, -EACCES when authentication failed either way (the log
 * says which side lacks or has another key), -EBUSY when the server is at its
 * connection cap, -ECONNREFUSED (nobody there), -ECONNRESET (hung up),
 * -ETIMEDOUT, -EPROTO (a malformed reply), -ECANCELED (cl cancelled).
 */
/* Fetch the descriptor of the engine at address. */
int ctl_fetch_desc(struct ctl_client *cl, const char *address, int timeout_ms,
		   struct seg_desc *out);
/* Ask the engine at address to connect an endpoint: 0 with rep filled (token
 * and n_qps checked against req). */
int ctl_connect(struct ctl_client *cl, const char *address, int timeout_ms,
		const struct wire_connect_req *req, struct wire_connect_rep *rep);
/* Ask the engine at address to tear down an endpoint's QP. */
int ctl_disconnect(struct ctl_client *cl, const char *address, int timeout_ms,
		   const struct wire_disconnect *d);
/* Tell the engine at address that the initiator incarnation is alive. */
int ctl_keepalive(struct ctl_client *cl, const char *address, int timeout_ms,
		  uint64_t incarnation);

/*
 * The same calls to many engines at once (batch.c): each peer's requests
 * on one connection, up to 64 peers side by side, each within timeout_ms
 * of its start: up to 64 that do not answer cost one timeout in all.  rcs[i] is what ctl_keepalive or
 * ctl_disconnect would have returned for item i.  0 once every rcs[i] is
 * set; -EINVAL (no client, nothing to send), -ENOMEM (none sent).
 */
int ctl_keepalive_many(struct ctl_client *cl, const char *const *addresses, unsigned n,
		       int timeout_ms, uint64_t incarnation, int *rcs);
/* What became of a DISCONNECT (ctl_disconnect_many's fate[]).  A peer
 * that reads a connection's requests only after we closed it serves the
 * first unanswered one alone: its answer meets our closed socket, and the
 * reset drops the rest. */
enum disc_fate {
	DISC_ANSWERED,     /* rcs[i] is the peer's word (or it was never tried) */
	DISC_UNREAD_FIRST, /* written whole, first unanswered: served when read */
	DISC_UNREAD_BEHIND, /* written whole behind it: not served if read late */
	DISC_NOT_SENT,     /* not delivered: not written whole (connect, authentication,
			    * send), or the peer ended the connection unanswered
			    * (hung up, or refused us at its cap) */
};
/* DISCONNECT d[i] to the engine at addresses[i] (items to one address go
 * on one connection, in their order; each peer gets timeout_ms plus 1 ms
 * per DISCONNECT to the busiest peer); fate[i] (fate may be NULL): an
 * enum disc_fate. */
int ctl_disconnect_many(struct ctl_client *cl, const char *const *addresses,
			const struct wire_disconnect *d, unsigned n, int timeout_ms, int *rcs,
			uint8_t *fate);
/* The same, each DISCONNECT on a connection of its own: for a peer that
 * may read them only after we gave up (timeout_ms short).  A connection
 * we closed with requests unread loses all but the first: the peer's
 * answer to it meets our closed socket, and the reset drops the rest. */
int ctl_disconnect_each(struct ctl_client *cl, const char *const *addresses,
			const struct wire_disconnect *d, unsigned n, int timeout_ms, int *rcs);

/* Hand a notification to the engine at address: 0 once it is queued there;
 * -EAGAIN when its queue is full (nothing queued: try again later).  A
 * cancel (cl) that cuts the wait for the answer of a request written
 * whole is -ETIMEDOUT, as an answer that never came: it may be queued
 * there; -ECANCELED says it did not go. */
int ctl_notify(struct ctl_client *cl, const char *address, int timeout_ms,
	       const struct wire_notify *n);

/* Up to CTL_NOTIFY_MANY notifications to the engine at address, written on
 * one connection back to back, their answers read in order: rcs[i] is what
 * ctl_notify would have returned for n[i].  0 once every rcs[i] is set;
 * -EINVAL (a bad argument or message: none sent), -ENOMEM. */
#define CTL_NOTIFY_MANY 32
int ctl_notify_many(struct ctl_client *cl, const char *address, int timeout_ms,
		    const struct wire_notify *const *n, unsigned count, int *rcs);

/* ---- authentication on a connected socket (auth.c) -------------------- */

/*
 * Read a secret file into a key: it must be a regular file of mode 0600 or
 * stricter (no group/other bits), of at least AUTH_SECRET_MIN bytes (any
 * content: hex, base64, raw).  0, or -errno with err saying why.
 */
int ctl_auth_load_key(const char *path, struct auth_key *key, char *err, size_t errlen);
/* The client's side of the handshake on fd, by deadline (stop_fd may be -1);
 * peer names the server in the logs.  0 with *sess the connection's session
 * (every later frame sealed with it), -EACCES, -EPROTONOSUPPORT (a peer of
 * version 1), or a transport error. */
int ctl_auth_connect(int fd, const struct auth_key *key, int64_t deadline, int stop_fd,
		     const char *peer, struct auth_sess *sess);
/* The same in two steps, for calls to many peers at once: send our hello
 * (its nonce kept for the second step), then, once fd is readable, read the
 * server's hello and proof and send ours.  0, -EACCES, or a transport error. */
int ctl_auth_hello(int fd, uint8_t nonce[WIRE_AUTH_NONCE_LEN], int64_t deadline, int stop_fd);
int ctl_auth_finish(int fd, const struct auth_key *key, const uint8_t nonce[WIRE_AUTH_NONCE_LEN],
		    int64_t deadline, int stop_fd, const char *peer, struct auth_sess *sess);
/* The server's side, blocking (for a provider's data connections; the
 * control server runs the same steps in its event loop). */
int ctl_auth_accept(int fd, const struct auth_key *key, int64_t deadline, int stop_fd,
		    const char *peer, struct auth_sess *sess);

#endif /* FERRY_RUNTIME_CTL_H */
