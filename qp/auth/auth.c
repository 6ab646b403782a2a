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

void auth_wipe(void *p, size_t len)
{
	sodium_memzero(p, len);
}
