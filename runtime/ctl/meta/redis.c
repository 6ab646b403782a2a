/* SPDX-License-Identifier: MIT */
/*
 * The Redis backend (hiredis 0.14, blocking context).
 *
 * A name is a string key with an expiry: "SET key value PX ttl" creates
 * it, PEXPIRE renews it.  Claiming and renewing are one Lua script, so
 * that they are atomic on the server: the key is renewed only while it
 * holds our value, created only while it is absent, and left alone when
 * another engine holds it (create-if-absent: the name is refused, never
 * overwritten).  Removing is a compare-and-delete script for the same
 * reason: an engine never deletes its successor's record.
 *
 * Deadlines: the connect waits at most the time left; a command is
 * written (SO_SNDTIMEO set to the time left) and its one reply read with
 * poll() before each read, to the call's deadline however slowly it comes
 * (hiredis has no deadline of its own), at most REDIS_REPLY_MAX bytes,
 * nothing after it; a kept connection with bytes waiting is not reused
 * (a late reply would answer the next command).  After any failure the
 * context is dropped and the next call connects again.  A command that fails on a connection made by an
 * earlier call (the server restarted meanwhile) is tried once more on a
 * new one, time permitting: every command here is idempotent.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <hiredis/hiredis.h>
#include <hiredis/sds.h>

#include "ring/base/fd.h"
#include "ring/base/log.h"
#include "runtime/ctl/meta/backend.h"
#include "runtime/ctl/sock.h"

/* 1: renewed (it held our value), 2: created (it was absent), 0: another value holds it. */
static const char claim_lua[] =
	"local v = redis.call('GET', KEYS[1]) "
	"if v == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end "
	"if not v then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 2 end "
	"return 0";

/* A failed publish's clean-up: at most this long (engine create waits it). */
#define REDIS_UNDO_MS 500

/* 1: deleted (it held our value), 0: left alone. */
static const char drop_lua[] =
	"if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end "
	"return 0";

struct redis_conn {
	redisContext *ctx;             /* NULL: not connected */
};

static struct timeval ms_tv(int ms)
{
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

	return tv;
}

/* errno of a failed context: hiredis keeps only a string (and errno, mostly). */
static int redis_errno(const redisContext *c, int saved)
{
	static const int known[] = { ECONNREFUSED, EHOSTUNREACH, ENETUNREACH, ETIMEDOUT,
				     ECONNRESET, EPIPE, EAGAIN };

	if (c && c->err == REDIS_ERR_EOF)
		return -ECONNRESET;
	if (c && c->err != REDIS_ERR_IO)
		return -EPROTO;
	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		if (saved == known[i] || (c && strstr(c->errstr, strerror(known[i]))))
			return known[i] == EAGAIN ? -ETIMEDOUT : -known[i]; /* SO_RCVTIMEO ran out */
	return saved > 0 ? -saved : -EIO;
}

static void redis_drop(struct redis_conn *rc)
{
	if (rc->ctx) {
		fd_untrack(rc->ctx->fd); /* marked at connect; redisFree closes it */
		redisFree(rc->ctx);
	}
	rc->ctx = NULL;
}

static int redis_connect(struct meta *m, struct redis_conn *rc, int64_t deadline)
{
	int left = meta_left_ms(deadline), err;

	if (rc->ctx) {
		struct pollfd p = { .fd = rc->ctx->fd, .events = POLLIN };

		/* idle: nothing may be waiting (a late reply, or the server's EOF) */
		if (rc->ctx->reader->len == rc->ctx->reader->pos && poll(&p, 1, 0) == 0)
			return 0;
		redis_drop(rc);
	}
	if (left == 0)
		return -ETIMEDOUT;
	errno = 0;
	rc->ctx = redisConnectWithTimeout(m->host, m->port, ms_tv(left));
	if (!rc->ctx)
		return -ENOMEM;
	if (rc->ctx->err) {
		err = redis_errno(rc->ctx, errno);
		redis_drop(rc);
		return err;
	}
	/* Kept between calls: close-on-exec, as every fd of ferry's, or a
	 * worker the application execs keeps it open at the store after we
	 * closed it.  hiredis 0.14 opens it without and has no socket hook:
	 * set here (a fork and exec in between still inherits this one).
	 * Marked for a forked child to close, as every fd of ferry's (fd.h). */
	(void)fcntl(rc->ctx->fd, F_SETFD, FD_CLOEXEC);
	fd_track(rc->ctx->fd);
	return 0;
}

#define REDIS_REPLY_MAX 4096 /* bytes of a reply: ours are an integer or a value < 256 */

/*
 * A reply starting with an array: none of ours is one (an integer, a bulk
 * string, nil or an error).  Refused before hiredis parses it: hiredis 0.14
 * allocates the elements an array says it has, up to 2^32, and walks them
 * all when the reply is freed -- minutes for 20 bytes from the store.
 */
static bool reply_is_array(const redisReader *r)
{
	/* '*'; hiredis 1.x (newer distributions) also reads RESP3's map,
	 * set and push ('%', '~', '>') as aggregates of the size they say */
	return r->ridx == -1 && r->pos < r->len && strchr("*%~>", r->buf[r->pos]) &&
	       r->buf[r->pos] != '\0';
}

/*
 * Whether raw (n bytes, the whole reply) is the one way RESP writes r.
 * hiredis 0.14 reads loosely: an integer or a length with a sign, leading
 * zeros or digits past 2^63 (wrapped: ":18446744073709551617" is 1), and
 * a bulk string without its closing CRLF.  A store must not be read one
 * way by us and another by redis-cli; what ferry acts on -- the scripts'
 * integers, GET's value or nil -- must be written exactly as Redis does.
 * Errors and status lines are refused by the callers anyway.
 */
static bool reply_canonical(const redisReply *r, const char *raw, size_t n)
{
	char head[32];
	size_t k;

	switch (r->type) {
	case REDIS_REPLY_INTEGER:
		k = (size_t)snprintf(head, sizeof(head), ":%lld\r\n", r->integer);
		return n == k && memcmp(raw, head, k) == 0;
	case REDIS_REPLY_NIL:
		return n == 5 && memcmp(raw, "$-1\r\n", 5) == 0;
	case REDIS_REPLY_STRING:
		k = (size_t)snprintf(head, sizeof(head), "$%zu\r\n", r->len);
		return n == k + r->len + 2 && memcmp(raw, head, k) == 0 &&
		       memcmp(raw + k, r->str, r->len) == 0 && memcmp(raw + n - 2, "\r\n", 2) == 0;
	default:
		return true;
	}
}

/* Read what the socket has (poll said so) into raw and the reader. */
static int redis_read(redisContext *c, char *raw, size_t cap, size_t *got)
{
	ssize_t n = recv(c->fd, raw + *got, cap - *got, 0);

	if (n == 0)
		return -ECONNRESET; /* the server closed: as hiredis's EOF */
	if (n < 0)
		return errno == EINTR || errno == EAGAIN ? 0 : -errno;
	if (redisReaderFeed(c->reader, raw + *got, (size_t)n) != REDIS_OK)
		return -ENOMEM;
	*got += (size_t)n;
	return 0;
}

/*
 * Write the command and read its one reply within the deadline: poll()
 * before each read, so that a server trickling its answer cannot hold us
 * past it (SO_RCVTIMEO bounds each read, not the reply), and no more than
 * REDIS_REPLY_MAX bytes read, kept to check the reply's form
 * (reply_canonical).  A reply followed by more bytes is
 * refused: they would answer our next command.  1: c->err says why;
 * -EMSGSIZE: too long, or more than one reply; -EBADMSG: an array or a
 * reply not in its canonical form; or -errno of the read.
 * The command goes out through sock_send_full (MSG_NOSIGNAL), not
 * hiredis's write(): a store that reset the connection after our idle
 * check would have killed a process that does not ignore SIGPIPE.
 */
static int redis_roundtrip(redisContext *c, int argc, const char **argv, const size_t *lens,
			   int64_t deadline, redisReply **out)
{
	char raw[REDIS_REPLY_MAX + 1];
	void *r = NULL;
	size_t got = 0;
	int rc;

	*out = NULL;
	if (redisAppendCommandArgv(c, argc, argv, lens) != REDIS_OK)
		return -ENOMEM;
	rc = sock_send_full(c->fd, -1, c->obuf, sdslen(c->obuf), deadline);
	sdsclear(c->obuf);
	if (rc)
		return rc;
	for (;;) {
		struct pollfd p = { .fd = c->fd, .events = POLLIN };
		int left = meta_left_ms(deadline), n;

		if (reply_is_array(c->reader))
			return -EBADMSG;
		if (redisGetReplyFromReader(c, &r) != REDIS_OK)
			return 1;
		if (r)
			break;
		if (left == 0)
			return -ETIMEDOUT;
		n = poll(&p, 1, left);
		if (n == 0)
			return -ETIMEDOUT;
		if (n < 0 && errno != EINTR)
			return -errno;
		if (n > 0 && (rc = redis_read(c, raw, sizeof(raw), &got)))
			return rc;
		if (got > REDIS_REPLY_MAX) /* counted as read: an array's parsed */
			return -EMSGSIZE;  /* elements leave the reader's buffer */
	}
	rc = c->reader->len != c->reader->pos ? -EMSGSIZE
	     : !reply_canonical(r, raw, got)  ? -EBADMSG
					      : 0;
	if (rc)
		freeReplyObject(r);
	else
		*out = r;
	return rc;
}

/*
 * One command (argv), its reply in *out (free with freeReplyObject).  A
 * Redis error reply is refused here, with its text logged: -EACCES for
 * NOAUTH/NOPERM (the store wants credentials ferry does not have), else
 * -EPROTO.
 */
static int redis_cmd(struct meta *m, int argc, const char **argv, const size_t *lens,
		     int64_t deadline, redisReply **out)
{
	struct redis_conn *rc = m->conn;
	redisReply *r = NULL;

	for (int attempt = 0; attempt < 2; attempt++) {
		bool reused = rc->ctx != NULL;
		int left, err = redis_connect(m, rc, deadline);

		if (err)
			return err;
		left = meta_left_ms(deadline);
		if (left == 0 || redisSetTimeout(rc->ctx, ms_tv(left)) != 0) {
			redis_drop(rc);
			return -ETIMEDOUT;
		}
		errno = 0;
		err = redis_roundtrip(rc->ctx, argc, argv, lens, deadline, &r);
		if (err == 0)
			break;
		if (err == 1) {
			err = redis_errno(rc->ctx, errno);
			if (err == -EPROTO) /* hiredis's reader says what it did not take */
				meta_log(m, "%s: %s", argv[0], rc->ctx->errstr);
		} else if (err == -EMSGSIZE) {
			meta_log(m, "%s: a reply that is too long, or more than one reply", argv[0]);
			err = -EPROTO;
		} else if (err == -EBADMSG) {
			meta_log(m, "%s: an array reply, which none of ours is, or a reply not "
				 "in the form Redis writes", argv[0]);
			err = -EPROTO;
		}
		redis_drop(rc);
		if (!reused || err == -ETIMEDOUT || err == -EPROTO || meta_left_ms(deadline) == 0)
			return err;
	}
	if (r->type == REDIS_REPLY_ERROR) {
		int err = strncmp(r->str, "NOAUTH", 6) == 0 || strncmp(r->str, "NOPERM", 6) == 0
				  ? -EACCES
				  : -EPROTO;

		/* the text is the server's: keep it printable for the log */
		for (size_t i = 0; i < r->len; i++)
			if (r->str[i] < 0x20 || r->str[i] > 0x7e)
				r->str[i] = '?';
		meta_log(m, "%s: the server answered: %.160s", argv[0], r->str);
		freeReplyObject(r);
		return err;
	}
	*out = r;
	return 0;
}

/* A script with one key and args; its integer result in *res. */
static int redis_eval(struct meta *m, const char *lua, const char *key, const char *a1,
		      const char *a2, int64_t deadline, long long *res)
{
	const char *argv[] = { "EVAL", lua, "1", key, a1, a2 };
	size_t lens[6];
	int argc = a2 ? 6 : 5, err;
	redisReply *r;

	for (int i = 0; i < argc; i++)
		lens[i] = strlen(argv[i]);
	err = redis_cmd(m, argc, argv, lens, deadline, &r);
	if (err)
		return err;
	if (r->type != REDIS_REPLY_INTEGER) {
		meta_log(m, "EVAL: want an integer reply, got type %d", r->type);
		err = -EPROTO;
	} else {
		*res = r->integer;
	}
	freeReplyObject(r);
	return err;
}

static int redis_claim(struct meta *m, int64_t deadline, long long *res)
{
	char ttl[24];

	snprintf(ttl, sizeof(ttl), "%u", m->pub.ttl_ms);
	return redis_eval(m, claim_lua, m->pub.key, m->pub.value, ttl, deadline, res);
}

/*
 * A claim that failed after it was sent may have been executed (its reply
 * lost or late): the record would name an engine whose create failed, and
 * refuse the next one under the name (-EEXIST) until its lease ran out.
 * Take it back if it holds our value; a store that just refused us does
 * nothing (the compare-and-delete finds another value, or none).
 */
static void redis_undo_claim(struct meta *m)
{
	long long res = -1;

	(void)redis_eval(m, drop_lua, m->pub.key, m->pub.value, NULL,
			 sock_now_ms() + REDIS_UNDO_MS, &res);
}

static int redis_publish(struct meta *m, int64_t deadline)
{
	long long res = -1;
	int err = redis_claim(m, deadline, &res);

	if (err && err != -ECONNREFUSED)
		redis_undo_claim(m);
	if (err)
		return err;
	if (res == 1 || res == 2)
		return 0;
	return res == 0 ? -EEXIST : -EPROTO;
}

static int redis_keepalive(struct meta *m, int64_t deadline)
{
	long long res = -1;
	int err = redis_claim(m, deadline, &res);

	if (err)
		return err;
	switch (res) {
	case 1:
		return 0;
	case 2:
		return 1;
	case 0:
		return -EEXIST;
	default:
		return -EPROTO;
	}
}

static int redis_resolve(struct meta *m, const char *key, char *value, size_t cap,
			 int64_t deadline)
{
	const char *argv[] = { "GET", key };
	size_t lens[] = { 3, strlen(key) };
	redisReply *r;
	int err = redis_cmd(m, 2, argv, lens, deadline, &r);

	if (err)
		return err;
	if (r->type == REDIS_REPLY_NIL) {
		err = -ENOENT;
	} else if (r->type != REDIS_REPLY_STRING) {
		meta_log(m, "GET %s: want a string, got reply type %d", key, r->type);
		err = -EPROTO;
	} else if ((size_t)r->len >= cap || !meta_value_ok(r->str, (size_t)r->len)) {
		meta_log(m, "GET %s: a value of %zu bytes that is not 1..%d printable bytes", key,
			 (size_t)r->len, META_VALUE_MAX - 1);
		err = -EPROTO;
	} else {
		memcpy(value, r->str, (size_t)r->len);
		value[r->len] = '\0';
	}
	freeReplyObject(r);
	return err;
}

static int redis_remove(struct meta *m, int64_t deadline)
{
	long long res = -1;
	int err = redis_eval(m, drop_lua, m->pub.key, m->pub.value, NULL, deadline, &res);

	if (err)
		return err;
	if (res == 1)
		return 0;
	return res == 0 ? -ENOENT : -EPROTO;
}

static int redis_init(struct meta *m)
{
	m->conn = calloc(1, sizeof(struct redis_conn));
	return m->conn ? 0 : -ENOMEM;
}

static void redis_fini(struct meta *m)
{
	if (m->conn)
		redis_drop(m->conn);
	free(m->conn);
	m->conn = NULL;
}

const struct meta_ops meta_redis_ops = {
	.scheme = "redis",
	.init = redis_init,
	.fini = redis_fini,
	.publish = redis_publish,
	.keepalive = redis_keepalive,
	.resolve = redis_resolve,
	.remove = redis_remove,
};
