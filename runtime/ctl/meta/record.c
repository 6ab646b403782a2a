/* SPDX-License-Identifier: MIT */
/* The published record's line (record.h): a strict parser and its encoder. */
#include "runtime/ctl/meta/record.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* A cursor over the input: every step consumes exactly what it accepts. */
struct cur {
	const char *p, *end;
};

static bool eat(struct cur *c, const char *lit)
{
	size_t n = strlen(lit);

	if ((size_t)(c->end - c->p) < n || memcmp(c->p, lit, n) != 0)
		return false;
	c->p += n;
	return true;
}

/* 1..maxd decimal digits, no leading zero unless the number is 0, <= max. */
static bool dec(struct cur *c, unsigned maxd, unsigned long max, unsigned long *out)
{
	unsigned long v = 0;
	unsigned n = 0;

	while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
		if (++n > maxd || (n == 2 && v == 0))
			return false;
		v = v * 10 + (unsigned long)(*c->p++ - '0');
	}
	if (n == 0 || v > max)
		return false;
	*out = v;
	return true;
}

/* a.b.c.d:port into out; not 0.0.0.0, port not 0. */
static bool addr(struct cur *c, char *out, size_t cap)
{
	const char *start = c->p;
	unsigned long o[4], port;

	for (int i = 0; i < 4; i++)
		if ((i && !eat(c, ".")) || !dec(c, 3, 255, &o[i]))
			return false;
	if (!eat(c, ":") || !dec(c, 5, 65535, &port) || port == 0)
		return false;
	if (o[0] == 0 && o[1] == 0 && o[2] == 0 && o[3] == 0)
		return false;
	if ((size_t)(c->p - start) >= cap)
		return false;
	memcpy(out, start, (size_t)(c->p - start));
	out[c->p - start] = '\0';
	return true;
}

static bool hex16(struct cur *c, uint64_t *out)
{
	uint64_t v = 0;

	if (c->end - c->p < 16)
		return false;
	for (int i = 0; i < 16; i++) {
		char ch = *c->p++;

		if (ch >= '0' && ch <= '9')
			v = v << 4 | (uint64_t)(ch - '0');
		else if (ch >= 'a' && ch <= 'f')
			v = v << 4 | (uint64_t)(ch - 'a' + 10);
		else
			return false;
	}
	*out = v;
	return true;
}

static bool tx_name_ok(const char *s, size_t n)
{
	if (n == 0 || n >= META_REC_TX_LEN)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9')))
			return false;
	return true;
}

/* name{,name} up to the end of the input, distinct, at most META_REC_TX_MAX. */
static bool tx_list(struct cur *c, struct meta_record *r)
{
	for (;;) {
		const char *s = c->p;
		size_t n;

		while (c->p < c->end && *c->p != ',')
			c->p++;
		n = (size_t)(c->p - s);
		if (r->n_tx == META_REC_TX_MAX || !tx_name_ok(s, n))
			return false;
		memcpy(r->tx[r->n_tx], s, n);
		r->tx[r->n_tx][n] = '\0';
		for (unsigned k = 0; k < r->n_tx; k++)
			if (strcmp(r->tx[k], r->tx[r->n_tx]) == 0)
				return false;
		r->n_tx++;
		if (c->p == c->end)
			return true;
		c->p++; /* the comma: a name must follow */
	}
}

int meta_record_decode(const char *buf, size_t len, struct meta_record *r)
{
	struct cur c = { buf, buf + len };

	memset(r, 0, sizeof(*r));
	if (buf && eat(&c, "v1 addr=") && addr(&c, r->addr, sizeof(r->addr)) &&
	    eat(&c, " inc=") && hex16(&c, &r->incarnation) && eat(&c, " tx=") && tx_list(&c, r))
		return 0;
	memset(r, 0, sizeof(*r));
	return -EPROTO;
}

int meta_record_encode(const struct meta_record *r, char *buf, size_t cap)
{
	struct meta_record check;
	size_t o;
	int n;

	n = snprintf(buf, cap, "v1 addr=%s inc=%016llx tx=", r->addr,
		     (unsigned long long)r->incarnation);
	if (n < 0 || (size_t)n >= cap)
		return -ENOSPC;
	o = (size_t)n;
	for (unsigned i = 0; i < r->n_tx && i < META_REC_TX_MAX; i++) {
		n = snprintf(buf + o, cap - o, "%s%.*s", i ? "," : "", META_REC_TX_LEN, r->tx[i]);
		if (n < 0 || (size_t)n >= cap - o)
			return -ENOSPC;
		o += (size_t)n;
	}
	/* what we publish must be what a peer accepts */
	if (meta_record_decode(buf, o, &check) || check.n_tx != r->n_tx) {
		buf[0] = '\0';
		return -EINVAL;
	}
	return 0;
}
