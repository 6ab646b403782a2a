/* SPDX-License-Identifier: MIT */
/*
 * Base64 (RFC 4648, standard alphabet, '=' padding) for etcd's JSON
 * gateway, which carries keys and values as base64 strings.  A dozen lines
 * each way are cheaper than a dependency: libsodium is not one of ferry's,
 * OpenSSL's EVP_DecodeBlock and GLib's g_base64_decode are lax (they skip
 * whitespace and junk, and pad with zero bytes), and libcurl's encoder is
 * not public API.  The decoder is strict: what etcd (Go's StdEncoding)
 * writes is accepted and nothing else -- no whitespace, no missing or
 * extra padding, no non-zero bits in the last character (one encoding per
 * byte string), bounded output.
 */
#ifndef FERRY_RUNTIME_CTL_META_BASE64_H
#define FERRY_RUNTIME_CTL_META_BASE64_H

#include <stddef.h>
#include <stdint.h>

/* Characters (without the NUL) that n bytes encode to. */
#define META_B64_LEN(n) (((n) + 2) / 3 * 4)

/* Encode n bytes into out (cap bytes, NUL-terminated); -ENOSPC if short. */
int meta_b64_encode(const void *in, size_t n, char *out, size_t cap);

/* Decode len characters into out (cap bytes; *outlen bytes written).
 * -EPROTO for anything but canonical padded base64, -ENOSPC if it does
 * not fit. */
int meta_b64_decode(const char *in, size_t len, uint8_t *out, size_t cap, size_t *outlen);

#endif /* FERRY_RUNTIME_CTL_META_BASE64_H */
