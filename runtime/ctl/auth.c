/* SPDX-License-Identifier: MIT */
/*
 * Authentication on a connected socket, and the key file.  The crypto is
 * qp/auth's; this is its transport for the control plane (and for a
 * provider's data connections, blocking, by deadline).
 *
 * The protocol, byte by byte (frames as in wire.h: 12-byte header, then):
 *   client -> server  AUTH_HELLO  hello_c = 02 00 | 00 00 | 00 00 00 00 | nonce_c (32)
 *   server -> client  AUTH_HELLO  hello_s = 02 00 | 00 00 | 00 00 00 00 | nonce_s (32)
 *                     AUTH_PROOF  mac_s (32) = HMAC-SHA512-256(key,
 *                                 "ferry-auth-2" | 02 | hello_c | hello_s)
 *   client -> server  AUTH_PROOF  mac_c (32) = HMAC-SHA512-256(key,
 *                                 "ferry-auth-2" | 01 | hello_c | hello_s)
 * then the client's requests, and every frame after the proofs both ways
 * sealed: header | payload encrypted | tag (16), ChaCha20-Poly1305 (IETF)
 * with k_dir, nonce seq (u64 LE | 4 zero bytes), the header as associated
 * data; k_c2s | k_s2c = BLAKE2b-512(key; "ferry-session-2" | hello_c |
 * hello_s), seq counting that direction's sealed frames from 0 (qp/auth's
 * auth_sess).  A frame whose tag does not verify closes the connection:
 * the proofs alone authenticate the ends, and a relay that passed them
 * through could speak on the connection after them (and read it).
 * key = BLAKE2b-256("ferry cluster key v1" | the secret file less trailing
 * whitespace).  A side that refuses sends at most a WIRE_ERROR (-EACCES;
 * -EPROTONOSUPPORT to a hello of version 1, which had no seals: a keyed
 * engine talks to version 2 only, so no relay can strip them); a refusal
 * that comes after the server's proof (at the cap -EBUSY, past the
 * deadline -EACCES, both before the client's proof was read) is sealed
 * with the session, as the client reads every frame once its proof is
 * out.  Which side lacks a key shows in what comes:
 * a keyless server answers AUTH_HELLO with EACCES; a keyless client sends
 * a request where AUTH_HELLO belongs and gets EACCES.  The client sends its
 * proof even when the server's failed, so the server can log the reason
 * too; the proof is of no use elsewhere (bound to this connection's nonces).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ring/base/fd.h"
#include "runtime/ctl/ctl.h"
#include "runtime/ctl/sock.h"

#define KEY_FILE_MAX 65536

/* ---- the key file ------------------------------------------------------ */

static int __attribute__((format(printf, 3, 4))) key_err(char *err, size_t errlen,
							  const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return 0;
}

/* The file must be ours alone and a plain file; its size within bounds. */
static int key_stat(int fd, const char *path, char *err, size_t errlen)
{
	struct stat st;
	int rc;

	if (fstat(fd, &st)) {
		rc = -errno; /* before the message's calls may change errno */
		key_err(err, errlen, "secret_file %s: %s", path, strerror(-rc));
		return rc;
	}
	if (!S_ISREG(st.st_mode))
		return key_err(err, errlen, "secret_file %s is not a regular file", path), -EINVAL;
	if (st.st_mode & 077)
		return key_err(err, errlen, "secret_file %s has mode %04o: group or others may "
			       "read it; chmod 600 it", path, (unsigned)(st.st_mode & 07777)), -EPERM;
	if (st.st_size > KEY_FILE_MAX)
		return key_err(err, errlen, "secret_file %s: %lld bytes, more than %d", path,
			       (long long)st.st_size, KEY_FILE_MAX), -EFBIG;
	return 0;
}

int ctl_auth_load_key(const char *path, struct auth_key *key, char *err, size_t errlen)
{
	uint8_t buf[KEY_FILE_MAX + 1];
	size_t len = 0;
	ssize_t n;
	int fd, rc;

	fd = fd_track(open(path, O_RDONLY | O_CLOEXEC));
	if (fd < 0) {
		rc = -errno;
		key_err(err, errlen, "secret_file %s: %s", path, strerror(errno));
		return rc;
	}
	rc = key_stat(fd, path, err, errlen);
	while (!rc && len < sizeof(buf) && (n = read(fd, buf + len, sizeof(buf) - len)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			key_err(err, errlen, "secret_file %s: %s", path, strerror(errno));
		} else {
			len += (size_t)n;
		}
	}
	fd_close(fd);
	if (!rc) {
		rc = auth_key_derive(buf, len, key);
		if (rc == -EINVAL)
			key_err(err, errlen, "secret_file %s: %zu bytes, want at least %d (not "
				"counting trailing whitespace)", path, len, AUTH_SECRET_MIN);
		else if (rc)
			key_err(err, errlen, "secret_file %s: libsodium did not start: %s", path,
				strerror(-rc));
	}
	auth_wipe(buf, sizeof(buf));
	return rc;
}

/* ---- frames ----------------------------------------------------------- */

struct auth_io {
	int fd;
	int64_t deadline;
	int stop_fd;
	const char *peer;
	const char *side; /* "server" / "client": who we talk to, for the logs */
};

static int auth_send(const struct auth_io *io, uint16_t type, const uint8_t *payload,
		     size_t len)
{
	uint8_t f[WIRE_HDR_LEN + WIRE_AUTH_HELLO_LEN];

	wire_hdr_encode(f, type, (uint32_t)len);
	memcpy(f + WIRE_HDR_LEN, payload, len);
	return sock_send_full(io->fd, io->stop_fd, f, WIRE_HDR_LEN + len, io->deadline);
}

static int auth_send_error(const struct auth_io *io, int err)
{
	uint8_t b[4];

	sock_put_le32(b, (uint32_t)(int32_t)err);
	return auth_send(io, WIRE_ERROR, b, sizeof(b));
}

/*
 * Read one frame of type want with exactly len payload bytes into buf.  A
 * WIRE_ERROR comes back as its errno (in *peer_err too); anything else is
 * -EPROTO.
 */
static int auth_recv(const struct auth_io *io, uint16_t want, uint8_t *buf, size_t len,
		     int *peer_err)
{
	uint8_t h[WIRE_HDR_LEN], e[4];
	struct wire_hdr hd;
	int32_t err;
	int rc;

	*peer_err = 0;
	rc = sock_recv_full(io->fd, io->stop_fd, h, sizeof(h), io->deadline, NULL);
	if (!rc)
		rc = wire_hdr_decode(h, sizeof(h), &hd);
	if (rc)
		return rc;
	if (hd.type == WIRE_ERROR && hd.payload_len == 4) {
		rc = sock_recv_full(io->fd, io->stop_fd, e, sizeof(e), io->deadline, NULL);
		if (rc) /* e is not (all) there: nothing of it to read */
			return rc;
		err = (int32_t)sock_get_le32(e);
		if (err >= 0 || err < -CTL_ERRNO_MAX)
			return -EPROTO;
		*peer_err = err;
		return err;
	}
	if (hd.type != want || hd.payload_len != len) {
		ctl_log("authentication with %s %s: a frame of type %u (%u bytes) where %s "
			"belongs", io->side, io->peer, hd.type, hd.payload_len,
			want == WIRE_AUTH_HELLO ? "AUTH_HELLO" : "AUTH_PROOF");
		return -EPROTO;
	}
	return sock_recv_full(io->fd, io->stop_fd, buf, len, io->deadline, NULL);
}

/* ---- the client's side ------------------------------------------------- */

/* The server said no to our hello: why, as far as we can tell. */
static int auth_refused(const struct auth_io *io, int err)
{
	if (err == -EACCES)
		ctl_log("authentication with server %s refused: it has no key (secret_file) and "
			"this side has one, or it is a ferry before sealed frames (upgrade it)",
			io->peer);
	else if (err == -EPROTONOSUPPORT)
		ctl_log("authentication with server %s refused: it wants version %d; upgrade "
			"this side", io->peer, WIRE_AUTH_ALG);
	return err;
}

/* A hello's bytes as sent: the encoding is canonical (the decoder refuses
 * anything else), so a decoded hello encodes back to them. */
static void hello_bytes(const uint8_t nonce[WIRE_AUTH_NONCE_LEN], uint8_t b[WIRE_AUTH_HELLO_LEN])
{
	struct wire_auth_hello h = { .alg = WIRE_AUTH_ALG };

	memcpy(h.nonce, nonce, WIRE_AUTH_NONCE_LEN);
	(void)wire_auth_hello_encode(&h, b, WIRE_AUTH_HELLO_LEN);
}

/* A keyed side speaks version 2 only: one of version 1 cannot tag frames. */
static bool auth_old(const struct auth_io *io, const struct wire_auth_hello *h)
{
	if (h->alg == WIRE_AUTH_ALG)
		return false;
	ctl_log("authentication with %s %s refused: it speaks version %u, without sealed "
		"frames; with a key (secret_file) this side talks to version %d only: upgrade "
		"the peer", io->side, io->peer, h->alg, WIRE_AUTH_ALG);
	return true;
}

int ctl_auth_hello(int fd, uint8_t nonce[WIRE_AUTH_NONCE_LEN], int64_t deadline, int stop_fd)
{
	struct auth_io io = { fd, deadline, stop_fd, "", "server" };
	struct wire_auth_hello mine = { .alg = WIRE_AUTH_ALG };
	uint8_t b[WIRE_AUTH_HELLO_LEN];

	auth_nonce(mine.nonce);
	memcpy(nonce, mine.nonce, WIRE_AUTH_NONCE_LEN);
	(void)wire_auth_hello_encode(&mine, b, sizeof(b));
	return auth_send(&io, WIRE_AUTH_HELLO, b, WIRE_AUTH_HELLO_LEN);
}

int ctl_auth_finish(int fd, const struct auth_key *key, const uint8_t nonce[WIRE_AUTH_NONCE_LEN],
		    int64_t deadline, int stop_fd, const char *peer, struct auth_sess *sess)
{
	struct auth_io io = { fd, deadline, stop_fd, peer, "server" };
	uint8_t b[WIRE_AUTH_HELLO_LEN], hc[WIRE_AUTH_HELLO_LEN], hs[WIRE_AUTH_HELLO_LEN];
	struct wire_auth_hello theirs;
	struct wire_auth_proof proof;
	bool ok;
	int rc, perr;

	sess->on = false;
	rc = auth_recv(&io, WIRE_AUTH_HELLO, hs, WIRE_AUTH_HELLO_LEN, &perr);
	if (rc)
		return perr ? auth_refused(&io, perr) : rc;
	if (wire_auth_hello_decode(hs, WIRE_AUTH_HELLO_LEN, &theirs))
		return -EPROTO;
	if (auth_old(&io, &theirs))
		return -EPROTONOSUPPORT;
	rc = auth_recv(&io, WIRE_AUTH_PROOF, b, WIRE_AUTH_PROOF_LEN, &perr);
	if (rc)
		return perr ? auth_refused(&io, perr) : rc;
	hello_bytes(nonce, hc);
	ok = auth_verify2(key, AUTH_SERVER, hc, hs, WIRE_AUTH_HELLO_LEN, b);
	auth_proof2(key, AUTH_CLIENT, hc, hs, WIRE_AUTH_HELLO_LEN, proof.mac);
	(void)wire_auth_proof_encode(&proof, b, WIRE_AUTH_PROOF_LEN);
	rc = auth_send(&io, WIRE_AUTH_PROOF, b, WIRE_AUTH_PROOF_LEN);
	if (!ok) {
		ctl_log("authentication with server %s failed: its proof does not verify (its "
			"key differs from ours)", peer);
		return -EACCES;
	}
	if (!rc)
		auth_sess_init(sess, key, AUTH_CLIENT, hc, hs, WIRE_AUTH_HELLO_LEN);
	return rc;
}

int ctl_auth_connect(int fd, const struct auth_key *key, int64_t deadline, int stop_fd,
		     const char *peer, struct auth_sess *sess)
{
	uint8_t nonce[WIRE_AUTH_NONCE_LEN];
	int rc = ctl_auth_hello(fd, nonce, deadline, stop_fd);

	sess->on = false;
	if (!rc)
		rc = ctl_auth_finish(fd, key, nonce, deadline, stop_fd, peer, sess);
	return rc;
}

/* ---- the server's side, blocking ---------------------------------------- */

static int auth_deny(const struct auth_io *io, const char *why)
{
	ctl_log("authentication refused to %s %s: %s", io->side, io->peer, why);
	(void)auth_send_error(io, -EACCES);
	return -EACCES;
}

int ctl_auth_accept(int fd, const struct auth_key *key, int64_t deadline, int stop_fd,
		    const char *peer, struct auth_sess *sess)
{
	struct auth_io io = { fd, deadline, stop_fd, peer, "client" };
	uint8_t b[2 * WIRE_HDR_LEN + WIRE_AUTH_HELLO_LEN + WIRE_AUTH_PROOF_LEN];
	uint8_t hc[WIRE_AUTH_HELLO_LEN], nonce[WIRE_AUTH_NONCE_LEN];
	uint8_t *hs = b + WIRE_HDR_LEN, *mac = hs + WIRE_AUTH_HELLO_LEN + WIRE_HDR_LEN;
	struct wire_auth_hello theirs;
	int rc, perr;

	sess->on = false;
	/* A client never sends a WIRE_ERROR: one here is a frame out of
	 * place like any other, not an errno of ours (perr). */
	rc = auth_recv(&io, WIRE_AUTH_HELLO, hc, WIRE_AUTH_HELLO_LEN, &perr);
	if (rc == -EPROTO || perr)
		return auth_deny(&io, "it did not start with AUTH_HELLO (no key?)");
	if (rc)
		return rc;
	if (wire_auth_hello_decode(hc, WIRE_AUTH_HELLO_LEN, &theirs))
		return auth_deny(&io, "malformed AUTH_HELLO");
	if (auth_old(&io, &theirs)) {
		(void)auth_send_error(&io, -EPROTONOSUPPORT);
		return -EPROTONOSUPPORT;
	}
	auth_nonce(nonce);
	wire_hdr_encode(b, WIRE_AUTH_HELLO, WIRE_AUTH_HELLO_LEN);
	hello_bytes(nonce, hs);
	wire_hdr_encode(hs + WIRE_AUTH_HELLO_LEN, WIRE_AUTH_PROOF, WIRE_AUTH_PROOF_LEN);
	auth_proof2(key, AUTH_SERVER, hc, hs, WIRE_AUTH_HELLO_LEN, mac);
	rc = sock_send_full(fd, stop_fd, b, sizeof(b), deadline);
	if (!rc)
		rc = auth_recv(&io, WIRE_AUTH_PROOF, mac, WIRE_AUTH_PROOF_LEN, &perr);
	if (rc)
		return rc == -EPROTO || perr ? auth_deny(&io, "no AUTH_PROOF") : rc;
	if (!auth_verify2(key, AUTH_CLIENT, hc, hs, WIRE_AUTH_HELLO_LEN, mac))
		return auth_deny(&io, "its proof does not verify: its key differs from ours");
	auth_sess_init(sess, key, AUTH_SERVER, hc, hs, WIRE_AUTH_HELLO_LEN);
	return 0;
}
