/* SPDX-License-Identifier: MIT */
/* Strict base64 (see base64.h). */
#include "runtime/ctl/meta/base64.h"

#include <errno.h>

static const char b64_chars[] =
	"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int meta_b64_encode(const void *in, size_t n, char *out, size_t cap)
{
	const uint8_t *p = in;
	size_t o = 0;

	if (cap < META_B64_LEN(n) + 1)
		return -ENOSPC;
	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)p[i] << 16;

		if (i + 1 < n)
			v |= (uint32_t)p[i + 1] << 8;
		if (i + 2 < n)
			v |= p[i + 2];
		out[o++] = b64_chars[v >> 18 & 63];
		out[o++] = b64_chars[v >> 12 & 63];
		out[o++] = i + 1 < n ? b64_chars[v >> 6 & 63] : '=';
		out[o++] = i + 2 < n ? b64_chars[v & 63] : '=';
	}
	out[o] = '\0';
	return 0;
}

/* The 6-bit value of c, or -1. */
static int b64_val(char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

int meta_b64_decode(const char *in, size_t len, uint8_t *out, size_t cap, size_t *outlen)
{
	size_t o = 0;

	*outlen = 0;
	if (len % 4)
		return -EPROTO;
	for (size_t i = 0; i < len; i += 4) {
		int a = b64_val(in[i]), b = b64_val(in[i + 1]);
		int c = b64_val(in[i + 2]), d = b64_val(in[i + 3]);
		int pad = 0;
		uint32_t v;

		if (i + 4 == len) { /* only the last quantum may be padded: "xx==" or "xxx=" */
			if (in[i + 3] == '=' && in[i + 2] == '=')
				pad = 2;
			else if (in[i + 3] == '=')
				pad = 1;
		}
		if (a < 0 || b < 0 || (pad < 2 && c < 0) || (pad < 1 && d < 0))
			return -EPROTO;
		/* canonical: the bits a padded quantum drops must be zero */
		if ((pad == 2 && (b & 15)) || (pad == 1 && (c & 3)))
			return -EPROTO;
		if (o + 3 - (size_t)pad > cap)
			return -ENOSPC;
		v = (uint32_t)a << 18 | (uint32_t)b << 12 | (uint32_t)(pad < 2 ? c : 0) << 6 |
		    (uint32_t)(pad < 1 ? d : 0);
		out[o++] = (uint8_t)(v >> 16);
		if (pad < 2)
			out[o++] = (uint8_t)(v >> 8);
		if (pad < 1)
			out[o++] = (uint8_t)v;
	}
	*outlen = o;
	return 0;
}
