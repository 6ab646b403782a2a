/* SPDX-License-Identifier: MIT */
/*
 * The control server's connection cap (server.c accepts): its default,
 * what a connection past it gets, and, with a key, which connection not
 * yet authenticated makes room for a new one.  Server thread only, but
 * ctl_cap_default (ctl_start).
 */
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ring/base/fd.h"
#include "runtime/ctl/conn.h"
#include "runtime/ctl/sock.h"

#define CTL_LOW_CONNS 64 /* a default cap under this is logged */

/* Descriptors this process has open, or -1 (no /proc). */
static long fds_open(void)
{
	DIR *d = opendir("/proc/self/fd");
	long n = -1; /* the directory's own descriptor is listed too */

	if (!d)
		return -1;
	while (readdir(d))
		n++;
	closedir(d);
	return n - 2; /* "." and ".." */
}

/*
 * The default cap: CTL_MAX_CONNS, or half of the descriptors the process
 * may still open if that is less.  Peers that hold connections (an idle
 * one stays idle_ms) must leave the engine descriptors for its own dials,
 * data connections and eventfds: with the common soft limit of 1024 they
 * could take them all, and the engine's own socket() calls fail -EMFILE.
 */
unsigned ctl_cap_default(void)
{
	struct rlimit rl;
	long used = fds_open();
	rlim_t half;

	if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur == RLIM_INFINITY)
		return CTL_MAX_CONNS;
	half = (used >= 0 && (rlim_t)used < rl.rlim_cur ? rl.rlim_cur - (rlim_t)used :
							   rl.rlim_cur) / 2;
	if (half >= CTL_MAX_CONNS)
		return CTL_MAX_CONNS;
	if (half < CTL_MIN_CONNS)
		half = CTL_MIN_CONNS;
	/* Said only when it is low: with the common ulimit -n of 1024 the cap
	 * is ~500 on every start, which needs no line. */
	if (half < CTL_LOW_CONNS)
		log_warn("ctl: at most %u connections: half of the descriptors left under "
			 "the limit of %llu (ulimit -n)", (unsigned)half,
			 (unsigned long long)rl.rlim_cur);
	return (unsigned)half;
}

/* The cap is reached: say so in a frame the client can parse, then close.
 * Logged at most once a second, with how many were refused since. */
void ctl_cap_refuse(struct ctl *c, int fd)
{
	uint8_t f[WIRE_HDR_LEN + 4], sink[512];
	int64_t now = sock_now_ms();

	ctl_count(&c->capped);
	c->cap_unlogged++;
	if (now - c->cap_log_ms >= 1000) {
		ctl_log("refused %llu connection(s): %u open, the cap (answered EBUSY)",
			(unsigned long long)c->cap_unlogged, c->n_conns);
		c->cap_log_ms = now;
		c->cap_unlogged = 0;
	}
	wire_hdr_encode(f, WIRE_ERROR, 4);
	sock_put_le32(f + WIRE_HDR_LEN, (uint32_t)(int32_t)-EBUSY);
	/* Its first request may be in already: read it so the close is no reset. */
	(void)recv(fd, sink, sizeof(sink), MSG_DONTWAIT);
	(void)send(fd, f, sizeof(f), MSG_DONTWAIT | MSG_NOSIGNAL); /* fits any socket buffer */
	(void)shutdown(fd, SHUT_WR);
	sock_close(fd);
}

/* The oldest connection still to prove the key (none closing), or NULL. */
static struct ctl_conn *oldest_unproven(struct ctl *c)
{
	struct ctl_conn *old = NULL;

	for (unsigned i = 0; i < c->n_conns; i++) {
		struct ctl_conn *cn = c->conns[i];

		if (cn->auth != CONN_OPEN && !cn->closing &&
		    (!old || cn->auth_deadline < old->auth_deadline))
			old = cn;
	}
	return old;
}

/*
 * At the cap with a key: the oldest connection not yet authenticated gives
 * way (-EBUSY, unless a frame of ours is queued on it), so peers without
 * the key cannot hold every place and lock keyed peers out.  Runs after
 * the pass's connection events (ctl_pass), so no event of this pass names
 * the connection it frees.
 */
bool ctl_cap_make_room(struct ctl *c)
{
	struct ctl_conn *cn = c->cfg.has_key ? oldest_unproven(c) : NULL;
	uint8_t f[WIRE_HDR_LEN + 4 + WIRE_TAG_LEN];
	size_t len = WIRE_HDR_LEN + 4;

	if (!cn)
		return false;
	ctl_count(&c->capped);
	ctl_log("at the cap (%u connections): %s, not authenticated yet, makes room",
		c->n_conns, cn->peer);
	if (!cn->tx) {
		wire_hdr_encode(f, WIRE_ERROR, 4);
		sock_put_le32(f + WIRE_HDR_LEN, (uint32_t)(int32_t)-EBUSY);
		/* One that holds our proof reads it sealed (ctl_conn_seal_early). */
		ctl_conn_seal_early(c, cn);
		if (cn->sealed) {
			auth_seal(&cn->sess, f, WIRE_HDR_LEN, f + WIRE_HDR_LEN, 4, f + len);
			len += WIRE_TAG_LEN;
		}
		(void)send(cn->fd, f, len, MSG_DONTWAIT | MSG_NOSIGNAL);
	}
	ctl_conn_close(c, cn, true);
	return true;
}
