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
/* Erase a key (sodium_memzero: not optimised away). */
void auth_wipe(void *p, size_t len);

#endif /* FERRY_QP_AUTH_H */
