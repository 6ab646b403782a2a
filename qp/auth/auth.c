/* SPDX-License-Identifier: MIT */
/*
 * Peer authentication, the pure part (see auth.h).
 *
 * What a proof covers, byte by byte (the input of crypto_auth):
 *   "ferry-auth-1" (12 bytes) | role (1 byte: 1 client, 2 server) |
 *   client nonce (32 bytes) | server nonce (32 bytes)
 * Both nonces, so a proof is good for one connection only (each side picks
 * its own fresh nonce, so neither can replay an old proof to it); the
 * role, so the server's proof is no use as a client's.
 */
#include "qp/auth/auth.h"

#include <errno.h>
#include <string.h>

#include <sodium.h>

#define AUTH_CONTEXT "ferry-auth-1"
#define AUTH_CONTEXT_LEN 12
#define KEY_CONTEXT "ferry cluster key v1"

_Static_assert(AUTH_KEY_LEN == crypto_auth_KEYBYTES, "crypto_auth takes a 32-byte key");
_Static_assert(AUTH_MAC_LEN == crypto_auth_BYTES, "crypto_auth makes a 32-byte tag");
_Static_assert(sizeof(AUTH_CONTEXT) - 1 == AUTH_CONTEXT_LEN, "context length");

int auth_init(void)
{
	/* 0 first time, 1 already done, -1 failure (no entropy source). */
	return sodium_init() < 0 ? -EIO : 0;
}

static bool is_space(uint8_t ch)
{
	return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r';
}

int auth_key_derive(const void *secret, size_t len, struct auth_key *out)
{
	const uint8_t *p = secret;
	crypto_generichash_state st;

	/* A key written by `openssl rand -hex 32 > f` and the same bytes
	 * pasted without the newline must give the same key. */
	while (len && is_space(p[len - 1]))
		len--;
	if (len < AUTH_SECRET_MIN)
		return -EINVAL;
	if (auth_init())
		return -EIO;
	crypto_generichash_init(&st, NULL, 0, AUTH_KEY_LEN);
	crypto_generichash_update(&st, (const uint8_t *)KEY_CONTEXT, sizeof(KEY_CONTEXT) - 1);
	crypto_generichash_update(&st, p, len);
	crypto_generichash_final(&st, out->k, AUTH_KEY_LEN);
	sodium_memzero(&st, sizeof(st));
	return 0;
}

void auth_nonce(uint8_t nonce[AUTH_NONCE_LEN])
{
	randombytes_buf(nonce, AUTH_NONCE_LEN);
}

void auth_proof(const struct auth_key *key, enum auth_role role,
		const uint8_t nonce_c[AUTH_NONCE_LEN], const uint8_t nonce_s[AUTH_NONCE_LEN],
		uint8_t mac[AUTH_MAC_LEN])
{
	uint8_t msg[AUTH_CONTEXT_LEN + 1 + 2 * AUTH_NONCE_LEN];

	memcpy(msg, AUTH_CONTEXT, AUTH_CONTEXT_LEN);
	msg[AUTH_CONTEXT_LEN] = (uint8_t)role;
	memcpy(msg + AUTH_CONTEXT_LEN + 1, nonce_c, AUTH_NONCE_LEN);
	memcpy(msg + AUTH_CONTEXT_LEN + 1 + AUTH_NONCE_LEN, nonce_s, AUTH_NONCE_LEN);
	crypto_auth(mac, msg, sizeof(msg), key->k);
}

bool auth_verify(const struct auth_key *key, enum auth_role role,
		 const uint8_t nonce_c[AUTH_NONCE_LEN], const uint8_t nonce_s[AUTH_NONCE_LEN],
		 const uint8_t mac[AUTH_MAC_LEN])
{
	uint8_t want[AUTH_MAC_LEN];
	bool ok;

	auth_proof(key, role, nonce_c, nonce_s, want);
	ok = crypto_verify_32(want, mac) == 0;
	sodium_memzero(want, sizeof(want));
	return ok;
}

/* ---- version 2: proofs over the hellos, and sessions -------------------- */

#define AUTH2_CONTEXT "ferry-auth-2"
#define SESS_CONTEXT "ferry-session-2"

_Static_assert(sizeof(AUTH2_CONTEXT) - 1 == AUTH_CONTEXT_LEN, "context length");
_Static_assert(2 * AUTH_KEY_LEN <= crypto_generichash_BYTES_MAX, "one hash, both keys");
_Static_assert(AUTH_KEY_LEN >= crypto_generichash_KEYBYTES_MIN, "keyed BLAKE2b");

void auth_proof2(const struct auth_key *key, enum auth_role role, const uint8_t *hello_c,
		 const uint8_t *hello_s, size_t len, uint8_t mac[AUTH_MAC_LEN])
{
	crypto_auth_hmacsha512256_state st;
	uint8_t r = (uint8_t)role;

	crypto_auth_hmacsha512256_init(&st, key->k, AUTH_KEY_LEN);
	crypto_auth_hmacsha512256_update(&st, (const uint8_t *)AUTH2_CONTEXT, AUTH_CONTEXT_LEN);
	crypto_auth_hmacsha512256_update(&st, &r, 1);
	crypto_auth_hmacsha512256_update(&st, hello_c, len);
	crypto_auth_hmacsha512256_update(&st, hello_s, len);
	crypto_auth_hmacsha512256_final(&st, mac);
	sodium_memzero(&st, sizeof(st));
}

bool auth_verify2(const struct auth_key *key, enum auth_role role, const uint8_t *hello_c,
		  const uint8_t *hello_s, size_t len, const uint8_t mac[AUTH_MAC_LEN])
{
	uint8_t want[AUTH_MAC_LEN];
	bool ok;

	auth_proof2(key, role, hello_c, hello_s, len, want);
	ok = crypto_verify_32(want, mac) == 0;
	sodium_memzero(want, sizeof(want));
	return ok;
}

void auth_sess_init(struct auth_sess *s, const struct auth_key *key, enum auth_role me,
		    const uint8_t *hello_c, const uint8_t *hello_s, size_t len)
{
	uint8_t both[2 * AUTH_KEY_LEN];
	crypto_generichash_state st;
	bool client = me == AUTH_CLIENT;

	crypto_generichash_init(&st, key->k, AUTH_KEY_LEN, sizeof(both));
	crypto_generichash_update(&st, (const uint8_t *)SESS_CONTEXT, sizeof(SESS_CONTEXT) - 1);
	crypto_generichash_update(&st, hello_c, len);
	crypto_generichash_update(&st, hello_s, len);
	crypto_generichash_final(&st, both, sizeof(both));
	memcpy(s->tx, both + (client ? 0 : AUTH_KEY_LEN), AUTH_KEY_LEN);
	memcpy(s->rx, both + (client ? AUTH_KEY_LEN : 0), AUTH_KEY_LEN);
	s->tx_seq = 0;
	s->rx_seq = 0;
	s->on = true;
	sodium_memzero(both, sizeof(both));
	sodium_memzero(&st, sizeof(st));
}

_Static_assert(AUTH_KEY_LEN == crypto_aead_chacha20poly1305_ietf_KEYBYTES, "one key size");
_Static_assert(AUTH_TAG_LEN == crypto_aead_chacha20poly1305_ietf_ABYTES, "one tag size");

/* The AEAD nonce of frame seq: unique per key, as each direction has its
 * own key and counts its frames once. */
static void seq_nonce(uint64_t seq, uint8_t n[crypto_aead_chacha20poly1305_ietf_NPUBBYTES])
{
	memset(n, 0, crypto_aead_chacha20poly1305_ietf_NPUBBYTES);
	for (unsigned i = 0; i < 8; i++)
		n[i] = (uint8_t)(seq >> (8 * i));
}

void auth_seal(struct auth_sess *s, const void *hdr, size_t hlen, uint8_t *payload, size_t plen,
	       uint8_t tag[AUTH_TAG_LEN])
{
	uint8_t n[crypto_aead_chacha20poly1305_ietf_NPUBBYTES];

	seq_nonce(s->tx_seq++, n);
	crypto_aead_chacha20poly1305_ietf_encrypt_detached(payload, tag, NULL, payload, plen, hdr,
							   hlen, NULL, n, s->tx);
}

bool auth_open(struct auth_sess *s, const void *hdr, size_t hlen, uint8_t *payload, size_t plen,
	       const uint8_t tag[AUTH_TAG_LEN])
{
	uint8_t n[crypto_aead_chacha20poly1305_ietf_NPUBBYTES];

	seq_nonce(s->rx_seq, n);
	/* Verifies before it decrypts: a forged frame is never decrypted (its
	 * payload is zeroed: the connection closes anyway). */
	if (crypto_aead_chacha20poly1305_ietf_decrypt_detached(payload, NULL, payload, plen, tag,
							       hdr, hlen, n, s->rx))
		return false;
	s->rx_seq++;
	return true;
}

void auth_wipe(void *p, size_t len)
{
	sodium_memzero(p, len);
}
