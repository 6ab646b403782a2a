/* SPDX-License-Identifier: MIT */
/*
 * The client's connections to its peers.  A connection carries one call at
 * a time (its owner sends a request and reads the reply), then goes back to
 * the pool, where the next call to the same peer takes it: one TCP
 * handshake and one authentication per connection instead of per call.
 * At most CTL_POOL_PER_PEER idle connections per peer and CTL_POOL_MAX in
 * all are kept (the oldest go first); one idle for CTL_POOL_IDLE_MS, less
 * than the server's idle timeout, is closed rather than reused.  A kept
 * connection the peer has closed meanwhile is seen before use when it can
 * be (readable: end of stream), else by the call, which redials once.
 */
#include "ring/base/fd.h"
#include "runtime/ctl/pool.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ring/base/atomics.h"
#include "runtime/ctl/sock.h"

static bool same_peer(const struct sockaddr_in *a, const struct sockaddr_in *b)
{
	return a->sin_addr.s_addr == b->sin_addr.s_addr && a->sin_port == b->sin_port;
}

int ctl_dial_begin(const struct sockaddr_in *sin)
{
	int fd = fd_track(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));

	if (fd < 0)
		return -errno;
	sock_set_nodelay(fd);
	/* EINTR: the connect goes on in the background, as for EINPROGRESS. */
	if (connect(fd, (const struct sockaddr *)sin, sizeof(*sin)) && errno != EINPROGRESS &&
	    errno != EINTR) {
		int rc = -errno;

		sock_close(fd);
		return rc;
	}
	return fd;
}

int ctl_dial_end(int fd)
{
	socklen_t elen = sizeof(int);
	int err = 0;

	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen))
		err = errno;
	return -err;
}

static bool fault_armed(struct ctl_client *cl, const struct sockaddr_in *sin)
{
	return cl && READ_ONCE(cl->fault_left) && ntohs(sin->sin_port) == READ_ONCE(cl->fault_port);
}

int ctl_dial_fault(struct ctl_client *cl, const struct sockaddr_in *sin)
{
	uint32_t left = fault_armed(cl, sin) ? READ_ONCE(cl->fault_left) : 0;

	while (left && !cas_relaxed(cl->fault_left, &left, left - 1))
		; /* (another dial took one: left reloaded) */
	if (!left)
		return 0;
	fetch_add_relaxed(cl->fault_hits, 1);
	return READ_ONCE(cl->fault_rc);
}

/* Connect with a deadline.  Returns the fd or -errno. */
static int dial_tcp(const struct sockaddr_in *sin, int64_t deadline, int stop_fd)
{
	int fd = ctl_dial_begin(sin);
	int rc;

	if (fd < 0)
		return fd;
	rc = sock_wait_fd(fd, POLLOUT, stop_fd, deadline);
	if (!rc)
		rc = ctl_dial_end(fd);
	if (rc) {
		sock_close(fd);
		return rc;
	}
	return fd;
}

int ctl_dial(struct ctl_client *cl, const struct sockaddr_in *sin, const char *address,
	     int64_t deadline, struct auth_sess *sess)
{
	int stop_fd = cl ? cl->stop_fd : -1;
	int rc = ctl_dial_fault(cl, sin);
	int fd = rc ? rc : dial_tcp(sin, deadline, stop_fd);

	sess->on = false;
	if ((fd == -EMFILE || fd == -ENFILE) && cl && ctl_pool_shed(cl))
		fd = dial_tcp(sin, deadline, stop_fd); /* idle connections held them */

	if (fd < 0 || !cl)
		return fd;
	fetch_add_relaxed(cl->dials, 1); /* statistics */
	if (!cl->has_key)
		return fd;
	rc = ctl_auth_connect(fd, &cl->key, deadline, stop_fd, address, sess);
	if (rc) {
		sock_close(fd);
		return rc;
	}
	return fd;
}

/* Can fd still carry a call?  Readable means the peer closed it (or sent
 * what nobody asked for): either way it is no good. */
static bool still_good(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, 0) == 0;
}

/* Take idle entry i out: the last one moves into its place (over i's
 * session) and the slot it leaves is wiped -- else a copy of that one's
 * session keys stayed there after its connection was gone, until a later
 * put happened to overwrite it. */
static void pool_remove(struct ctl_client *cl, unsigned i)
{
	cl->idle[i] = cl->idle[--cl->n_idle];
	auth_wipe(&cl->idle[cl->n_idle].sess, sizeof(cl->idle[cl->n_idle].sess));
}

int ctl_pool_take(struct ctl_client *cl, const struct sockaddr_in *sin, struct auth_sess *sess)
{
	int64_t now = sock_now_ms();
	int fd = -1;

	sess->on = false;
	if (fault_armed(cl, sin))
		return -1; /* the dial meets the fault */
	pthread_mutex_lock(&cl->lock);
	for (unsigned i = cl->n_idle; i-- > 0 && fd < 0;) {
		struct ctl_pconn *p = &cl->idle[i];
		bool fresh;

		if (!same_peer(&p->sin, sin))
			continue;
		fd = p->fd;
		fresh = now - p->last_ms < CTL_POOL_IDLE_MS;
		*sess = p->sess;
		pool_remove(cl, i);
		if (!fresh || !still_good(fd)) {
			sock_close(fd);
			fd = -1;
			auth_wipe(sess, sizeof(*sess));
		}
	}
	pthread_mutex_unlock(&cl->lock);
	return fd;
}

int ctl_pool_get(struct ctl_client *cl, const struct sockaddr_in *sin, const char *address,
		 int64_t deadline, bool *reused, struct auth_sess *sess)
{
	int fd = ctl_pool_take(cl, sin, sess);

	*reused = fd >= 0;
	if (fd >= 0) {
		fetch_add_relaxed(cl->reuses, 1); /* statistics */
		return fd;
	}
	return ctl_dial(cl, sin, address, deadline, sess);
}

/* Remove idle entry i (closing it). */
static void pool_drop(struct ctl_client *cl, unsigned i)
{
	sock_close(cl->idle[i].fd);
	pool_remove(cl, i);
}

/* The oldest idle entry, of sin's peer only if mine; -1 if none. */
static int pool_oldest(const struct ctl_client *cl, const struct sockaddr_in *sin, bool mine)
{
	int oldest = -1;

	for (unsigned i = 0; i < cl->n_idle; i++) {
		if (mine && !same_peer(&cl->idle[i].sin, sin))
			continue;
		if (oldest < 0 || cl->idle[i].last_ms < cl->idle[oldest].last_ms)
			oldest = (int)i;
	}
	return oldest;
}

void ctl_pool_put(struct ctl_client *cl, const struct sockaddr_in *sin, int fd,
		  const struct auth_sess *sess)
{
	unsigned n = 0;
	int victim;

	pthread_mutex_lock(&cl->lock);
	for (unsigned i = 0; i < cl->n_idle; i++)
		n += same_peer(&cl->idle[i].sin, sin);
	victim = n >= CTL_POOL_PER_PEER ? pool_oldest(cl, sin, true) :
		 cl->n_idle == CTL_POOL_MAX ? pool_oldest(cl, sin, false) : -1;
	if (victim >= 0)
		pool_drop(cl, (unsigned)victim);
	cl->idle[cl->n_idle++] = (struct ctl_pconn){ .sin = *sin, .fd = fd,
						     .last_ms = sock_now_ms(), .sess = *sess };
	pthread_mutex_unlock(&cl->lock);
}

unsigned ctl_pool_shed(struct ctl_client *cl)
{
	unsigned n;

	pthread_mutex_lock(&cl->lock);
	n = cl->n_idle;
	while (cl->n_idle)
		pool_drop(cl, cl->n_idle - 1);
	pthread_mutex_unlock(&cl->lock);
	return n;
}

int ctl_client_init(struct ctl_client *cl, const struct auth_key *key)
{
	memset(cl, 0, sizeof(*cl));
	cl->stop_fd = -1;
	if (key) {
		if (auth_init())
			return -EIO;
		cl->key = *key;
		cl->has_key = 1;
	}
	cl->stop_fd = fd_track(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
	if (cl->stop_fd < 0) {
		int rc = -errno;

		log_err("control client: cannot make its eventfd: %s", strerror(-rc));
		return rc;
	}
	return -pthread_mutex_init(&cl->lock, NULL);
}

void ctl_client_cancel(struct ctl_client *cl)
{
	uint64_t one = 1;

	if (cl->stop_fd < 0)
		return;
	/* Stays readable: every wait on it, now or later, ends -ECANCELED. */
	while (write(cl->stop_fd, &one, sizeof(one)) < 0 && errno == EINTR)
		;
}

void ctl_client_resume(struct ctl_client *cl)
{
	uint64_t v;

	/* Reading an eventfd zeroes it: it is no longer readable. */
	if (cl->stop_fd >= 0)
		while (read(cl->stop_fd, &v, sizeof(v)) < 0 && errno == EINTR)
			;
}

void ctl_client_fini(struct ctl_client *cl)
{
	if (cl->stop_fd < 0)
		return;
	pthread_mutex_lock(&cl->lock);
	while (cl->n_idle)
		pool_drop(cl, cl->n_idle - 1);
	pthread_mutex_unlock(&cl->lock);
	pthread_mutex_destroy(&cl->lock);
	fd_close(cl->stop_fd);
	cl->stop_fd = -1;
	auth_wipe(&cl->key, sizeof(cl->key));
}
