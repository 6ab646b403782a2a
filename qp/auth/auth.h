/* SPDX-License-Identifier: MIT */
/*
 * Peer authentication, the pure part: the cluster key derived from a
 * secret, nonces, and the proofs each side sends over both nonces and its
 * role.  Byte buffers in, byte buffers out: no sockets, no files, no
 * framing.  The control plane (runtime/ctl/auth.c) and the tcp data
 * provider (qp/, which cannot call runtime/) both build their handshakes
 * on it, so it lives here, below both.  libsodium does the cryptography:
 * BLAKE2b (crypto_generichash) turns any secret of at least
 * AUTH_SECRET_MIN bytes into the key, HMAC-SHA512-256 (crypto_auth) makes
 * the proofs, crypto_verify_32 compares them in constant time.
 */
#ifndef FERRY_QP_AUTH_H
#define FERRY_QP_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AUTH_KEY_LEN 32
#define AUTH_NONCE_LEN 32
#define AUTH_MAC_LEN 32
#define AUTH_SECRET_MIN 32 /* bytes of secret, after trailing whitespace */

/* Who proves: a proof made for one role never verifies for the other, so a
 * peer cannot reflect our own proof back at us. */
enum auth_role { AUTH_CLIENT = 1, AUTH_SERVER = 2 };

struct auth_key {
	uint8_t k[AUTH_KEY_LEN];
};

/* Initialise libsodium (idempotent, thread-safe); 0 or -EIO. */
int auth_init(void);
/*
 * The key of a secret: trailing whitespace (a file's newline) is dropped,
 * then BLAKE2b-256 over a fixed context string and the rest.  -EINVAL
 * when fewer than AUTH_SECRET_MIN bytes are left.
 */
int auth_key_derive(const void *secret, size_t len, struct auth_key *out);
/* A fresh random nonce. */
void auth_nonce(uint8_t nonce[AUTH_NONCE_LEN]);
/* role's proof: crypto_auth(key, context | role | client nonce | server nonce). */
void auth_proof(const struct auth_key *key, enum auth_role role,
		const uint8_t nonce_c[AUTH_NONCE_LEN], const uint8_t nonce_s[AUTH_NONCE_LEN],
		uint8_t mac[AUTH_MAC_LEN]);
/* Does mac prove that role holds key?  Constant time. */
bool auth_verify(const struct auth_key *key, enum auth_role role,
		 const uint8_t nonce_c[AUTH_NONCE_LEN], const uint8_t nonce_s[AUTH_NONCE_LEN],
		 const uint8_t mac[AUTH_MAC_LEN]);
/*
 * Version 2: the proofs cover both hellos whole (their algorithm field
 * too, so a relay cannot strip the version), and the connection gets a
 * session: a key per direction, derived from the cluster key and both
 * hellos, and a sequence number per direction.  Every frame after the
 * proofs is sealed: its payload encrypted, and a tag over its sequence
 * number (the AEAD nonce), header and payload, so a frame nobody with the
 * key made, one replayed, reordered, or sent the other way, does not
 * verify: authenticating the ends only would let a relay that passed the
 * handshake through speak on the authenticated connection, and encrypting
 * keeps it from reading what it passes on (descriptors, QP secrets).
 * ChaCha20-Poly1305 (IETF, libsodium's crypto_aead_chacha20poly1305_ietf).
 */
#define AUTH_HELLO_MAX 64
#define AUTH_TAG_LEN 16

struct auth_sess {
	uint8_t tx[AUTH_KEY_LEN], rx[AUTH_KEY_LEN]; /* this side's sending key, the peer's */
	uint64_t tx_seq, rx_seq;                    /* the next frame's, each way, from 0 */
	bool on;                                    /* false: no key, frames go bare */
};

/* role's proof: crypto_auth(key, "ferry-auth-2" | role | hello_c | hello_s),
 * both hellos len (<= AUTH_HELLO_MAX) bytes as sent. */
void auth_proof2(const struct auth_key *key, enum auth_role role, const uint8_t *hello_c,
		 const uint8_t *hello_s, size_t len, uint8_t mac[AUTH_MAC_LEN]);
bool auth_verify2(const struct auth_key *key, enum auth_role role, const uint8_t *hello_c,
		  const uint8_t *hello_s, size_t len, const uint8_t mac[AUTH_MAC_LEN]);
/* The session of the connection whose hellos these are, for the side me:
 * keyed BLAKE2b-512(key, "ferry-session-2" | hello_c | hello_s), the first
 * half the client's sending key, the second the server's. */
void auth_sess_init(struct auth_sess *s, const struct auth_key *key, enum auth_role me,
		    const uint8_t *hello_c, const uint8_t *hello_s, size_t len);
/* Seal the next frame sent: payload (plen bytes) encrypted in place, tag
 * over hdr (hlen bytes, in clear) and the payload, nonce tx_seq (u64 LE,
 * then 4 zero bytes); tx_seq advances. */
void auth_seal(struct auth_sess *s, const void *hdr, size_t hlen, uint8_t *payload, size_t plen,
	       uint8_t tag[AUTH_TAG_LEN]);
/* Is this the peer's next frame?  If so its payload is decrypted in place
 * and rx_seq advances; if not rx_seq stays and the payload is zeroed, never
 * decrypted (a connection whose frame failed is closed anyway). */
bool auth_open(struct auth_sess *s, const void *hdr, size_t hlen, uint8_t *payload, size_t plen,
	       const uint8_t tag[AUTH_TAG_LEN]);
/* Erase a key (sodium_memzero: not optimised away). */
void auth_wipe(void *p, size_t len);

#endif /* FERRY_QP_AUTH_H */
