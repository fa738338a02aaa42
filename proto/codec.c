/*
 * codec.c - the hot path's frames without the cJSON tree (codec.h).
 */
#include "codec.h"

#include <errno.h>
#include <string.h>

/* ---- scanning ------------------------------------------------------------ */

enum scan_kind { SCAN_STRING, SCAN_NUMBER, SCAN_TRUE, SCAN_FALSE, SCAN_OBJECT };

struct scan {
	const char *p, *end;
};

/* A string without escapes, of printable ASCII: what cJSON prints verbatim
 * and parses to the same bytes. */
static int scan_string(struct scan *s, const char **str, size_t *len)
{
	const char *q;

	if (s->p >= s->end || *s->p != '"')
		return -EAGAIN;
	q = ++s->p;
	while (q < s->end && *q != '"') {
		if (*q == '\\' || (unsigned char)*q < 0x20 || (unsigned char)*q > 0x7e)
			return -EAGAIN;
		q++;
	}
	if (q >= s->end)
		return -EAGAIN;
	*str = s->p;
	*len = (size_t)(q - s->p);
	s->p = q + 1;
	return 0;
}

static bool scan_lit(struct scan *s, const char *lit, size_t n)
{
	if ((size_t)(s->end - s->p) < n || memcmp(s->p, lit, n) != 0)
		return false;
	s->p += n;
	return true;
}

/* The next value's kind; strings and numbers are read (*v, *vlen), true
 * and false consumed, an object left at its '{'. A number is a plain
 * non-negative integer: 1-16 digits, no leading zero. */
static int scan_value(struct scan *s, enum scan_kind *kind, const char **v, size_t *vlen)
{
	if (s->p >= s->end)
		return -EAGAIN;
	switch (*s->p) {
	case '"':
		*kind = SCAN_STRING;
		return scan_string(s, v, vlen);
	case '{':
		*kind = SCAN_OBJECT;
		return 0;
	case 't':
		*kind = SCAN_TRUE;
		return scan_lit(s, "true", 4) ? 0 : -EAGAIN;
	case 'f':
		*kind = SCAN_FALSE;
		return scan_lit(s, "false", 5) ? 0 : -EAGAIN;
	default:
		break;
	}
	const char *q = s->p;
	while (q < s->end && *q >= '0' && *q <= '9')
		q++;
	size_t n = (size_t)(q - s->p);
	if (n == 0 || n > 16 || (n > 1 && *s->p == '0'))
		return -EAGAIN;
	*kind = SCAN_NUMBER;
	*v = s->p;
	*vlen = n;
	s->p = q;
	return 0;
}

static bool key_is(const char *k, size_t klen, const char *name)
{
	return strlen(name) == klen && memcmp(k, name, klen) == 0;
}

/* Decimal digits of a protocol u64 (proto_parse_u64's rules). */
static int parse_u64(const char *v, size_t n, uint64_t *out)
{
	uint64_t x = 0;

	if (n == 0 || n > 20 || (n > 1 && v[0] == '0'))
		return -EAGAIN;
	for (size_t i = 0; i < n; i++) {
		unsigned d;
		if (v[i] < '0' || v[i] > '9')
			return -EAGAIN;
		d = (unsigned)(v[i] - '0');
		if (x > (UINT64_MAX - d) / 10)
			return -EAGAIN;
		x = x * 10 + d;
	}
	*out = x;
	return 0;
}

/* 16 lowercase hex digits. */
static int parse_id64(const char *v, size_t n, uint64_t *out)
{
	uint64_t x = 0;

	if (n != 16)
		return -EAGAIN;
	for (size_t i = 0; i < n; i++) {
		char c = v[i];
		unsigned d;
		if (c >= '0' && c <= '9')
			d = (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			d = (unsigned)(c - 'a' + 10);
		else
			return -EAGAIN;
		x = x << 4 | d;
	}
	*out = x;
	return 0;
}

/* Members seen, one bit each: a second one is a duplicate key (which the
 * general path refuses: let it). */
static int seen(unsigned *mask, unsigned bit)
{
	if (*mask & bit)
		return -EAGAIN;
	*mask |= bit;
	return 0;
}

/*
 * Walks one flat object (its members' values strings, numbers or booleans)
 * at s->p, calling @member for each. @member returns 0 or -EAGAIN.
 */
typedef int (*member_fn)(void *ctx, const char *k, size_t klen, enum scan_kind kind, const char *v,
                         size_t vlen);

static int scan_flat(struct scan *s, member_fn member, void *ctx)
{
	if (s->p >= s->end || *s->p != '{')
		return -EAGAIN;
	s->p++;
	if (s->p < s->end && *s->p == '}') {
		s->p++;
		return 0;
	}
	for (;;) {
		const char *k, *v = NULL;
		size_t klen, vlen = 0;
		enum scan_kind kind;
		if (scan_string(s, &k, &klen) < 0 || !scan_lit(s, ":", 1) ||
		    scan_value(s, &kind, &v, &vlen) < 0 || kind == SCAN_OBJECT ||
		    member(ctx, k, klen, kind, v, vlen) < 0)
			return -EAGAIN;
		if (scan_lit(s, "}", 1))
			return 0;
		if (!scan_lit(s, ",", 1))
			return -EAGAIN;
	}
}

/*
 * The envelope: an object of string members and one object member (@inner,
 * walked with @member), then the end of the frame. @top is called for the
 * string members; *inner_seen says whether the object came.
 */
static int scan_envelope(struct scan *s, const char *inner, member_fn top, member_fn member,
                         void *ctx)
{
	bool got_inner = false;

	if (!scan_lit(s, "{", 1))
		return -EAGAIN;
	for (;;) {
		const char *k, *v = NULL;
		size_t klen, vlen = 0;
		enum scan_kind kind;
		if (scan_string(s, &k, &klen) < 0 || !scan_lit(s, ":", 1) ||
		    scan_value(s, &kind, &v, &vlen) < 0)
			return -EAGAIN;
		if (kind == SCAN_OBJECT) {
			if (got_inner || !key_is(k, klen, inner) || scan_flat(s, member, ctx) < 0)
				return -EAGAIN;
			got_inner = true;
		} else if (top(ctx, k, klen, kind, v, vlen) < 0) {
			return -EAGAIN;
		}
		if (scan_lit(s, "}", 1))
			break;
		if (!scan_lit(s, ",", 1))
			return -EAGAIN;
	}
	return got_inner && s->p == s->end ? 0 : -EAGAIN;
}

/* ---- requests ------------------------------------------------------------ */

struct req_ctx {
	struct proto_fast_req *r;
	unsigned top, params;
};

enum {
	TOP_ID = 1,
	TOP_METHOD = 2,
	P_INSTANCE = 1,
	P_SIZE = 2,
	P_ALIGN = 4,
	P_WAIT = 8,
	P_TYPE = 16,
	P_ID = 32,
	P_REPLY = 64
};

static int req_top(void *ctx, const char *k, size_t klen, enum scan_kind kind, const char *v,
                   size_t vlen)
{
	struct req_ctx *c = ctx;

	if (kind != SCAN_STRING)
		return -EAGAIN;
	if (key_is(k, klen, PROTO_F_ID)) {
		if (vlen == 0 || vlen > PROTO_MAX_ID || seen(&c->top, TOP_ID) < 0)
			return -EAGAIN;
		memcpy(c->r->id, v, vlen);
		c->r->id[vlen] = '\0';
		return 0;
	}
	if (key_is(k, klen, PROTO_F_METHOD)) {
		if (seen(&c->top, TOP_METHOD) < 0)
			return -EAGAIN;
		if (key_is(v, vlen, PROTO_M_ALLOC))
			c->r->op = PROTO_OP_ALLOC;
		else if (key_is(v, vlen, PROTO_M_FREE))
			c->r->op = PROTO_OP_FREE;
		else
			return -EAGAIN;
		return 0;
	}
	return -EAGAIN;
}

/* A string member seen for the first time: marked present. */
static bool take(struct req_ctx *c, unsigned bit, enum scan_kind kind, bool *has)
{
	if (kind != SCAN_STRING || seen(&c->params, bit) < 0)
		return false;
	*has = true;
	return true;
}

/* Params of either method, into both structs: which ones belong is
 * checked once the method is known (it may come after them). Bounds are
 * not checked here: the caller runs the method's params check, as the
 * general path does after its decode. */
static int req_param(void *ctx, const char *k, size_t klen, enum scan_kind kind, const char *v,
                     size_t vlen)
{
	struct req_ctx *c = ctx;
	struct proto_alloc_params *a = &c->r->alloc;
	struct proto_free_params *f = &c->r->free;

	if (key_is(k, klen, PROTO_F_INSTANCE))
		return take(c, P_INSTANCE, kind, &a->has_instance)
		           ? parse_id64(v, vlen, &a->instance)
		           : -EAGAIN;
	if (key_is(k, klen, PROTO_F_SIZE))
		return take(c, P_SIZE, kind, &a->has_size) ? parse_u64(v, vlen, &a->size) : -EAGAIN;
	if (key_is(k, klen, PROTO_F_ALIGNMENT))
		return take(c, P_ALIGN, kind, &a->has_alignment) ? parse_u64(v, vlen, &a->alignment)
		                                                 : -EAGAIN;
	if (key_is(k, klen, PROTO_F_WAIT_MS)) {
		uint64_t w;
		if (kind != SCAN_NUMBER || seen(&c->params, P_WAIT) < 0 ||
		    parse_u64(v, vlen, &w) < 0)
			return -EAGAIN;
		a->wait_ms = (int64_t)w; /* 16 digits at most: it fits */
		a->has_wait_ms = true;
		return 0;
	}
	if (key_is(k, klen, PROTO_F_TYPE)) {
		/* Only the default: host memory is not the hot path. */
		if (kind != SCAN_STRING || !key_is(v, vlen, PROTO_V_MEM_DEVICE) ||
		    seen(&c->params, P_TYPE) < 0)
			return -EAGAIN;
		a->type = PROTO_MEMORY_DEVICE;
		a->has_type = true;
		return 0;
	}
	if (key_is(k, klen, PROTO_F_ID))
		return take(c, P_ID, kind, &f->has_id) ? parse_id64(v, vlen, &f->id) : -EAGAIN;
	if (key_is(k, klen, PROTO_F_REPLY)) {
		if ((kind != SCAN_TRUE && kind != SCAN_FALSE) || seen(&c->params, P_REPLY) < 0)
			return -EAGAIN;
		f->reply = kind == SCAN_TRUE;
		f->has_reply = true;
		return 0;
	}
	return -EAGAIN;
}

int proto_fast_request(const char *frame, size_t len, struct proto_fast_req *out)
{
	struct scan s = {frame, frame + len};
	struct req_ctx c = {out, 0, 0};

	memset(out, 0, sizeof(*out));
	out->op = -1;
	if (scan_envelope(&s, PROTO_F_PARAMS, req_top, req_param, &c) < 0 ||
	    c.top != (TOP_ID | TOP_METHOD))
		return -EAGAIN;
	if (out->op == PROTO_OP_ALLOC)
		return (c.params & (P_INSTANCE | P_SIZE)) == (P_INSTANCE | P_SIZE) &&
		               !(c.params & (P_ID | P_REPLY))
		           ? 0
		           : -EAGAIN;
	return c.params & P_ID && !(c.params & (P_INSTANCE | P_SIZE | P_ALIGN | P_WAIT | P_TYPE))
	           ? 0
	           : -EAGAIN;
}

/* ---- writing --------------------------------------------------------------- */

struct out {
	char *p, *end;
	bool bad;
};

static void put(struct out *o, const char *s, size_t n)
{
	if (o->bad || (size_t)(o->end - o->p) < n) {
		o->bad = true;
		return;
	}
	memcpy(o->p, s, n);
	o->p += n;
}

#define PUT_LIT(o, lit) put((o), (lit), sizeof(lit) - 1)

static const char hexdig[] = "0123456789abcdef";

/* A JSON string as cJSON_PrintUnformatted() writes it: '"', '\\' and
 * control bytes escaped (the short forms where JSON has them), every other
 * byte as it is. */
static void put_str(struct out *o, const char *s)
{
	static const char short_esc[32] = {
	    ['\b'] = 'b', ['\f'] = 'f', ['\n'] = 'n', ['\r'] = 'r', ['\t'] = 't'};
	const char *run = s;

	PUT_LIT(o, "\"");
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		char esc[6] = {'\\', 'u', '0', '0', hexdig[c >> 4], hexdig[c & 15]};
		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		put(o, run, (size_t)(s - run));
		run = s + 1;
		if (c == '"' || c == '\\' || short_esc[c]) {
			esc[1] = c < 0x20 ? short_esc[c] : (char)c;
			put(o, esc, 2);
		} else {
			put(o, esc, sizeof(esc));
		}
	}
	put(o, run, (size_t)(s - run));
	PUT_LIT(o, "\"");
}

static void put_dec(struct out *o, uint64_t v)
{
	char tmp[20], *p = tmp + sizeof(tmp);
	do {
		*--p = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	put(o, p, (size_t)(tmp + sizeof(tmp) - p));
}

static void put_u64(struct out *o, uint64_t v)
{
	PUT_LIT(o, "\"");
	put_dec(o, v);
	PUT_LIT(o, "\"");
}

static void put_id64(struct out *o, uint64_t v)
{
	char buf[18];
	buf[0] = buf[17] = '"';
	for (int i = 15; i >= 0; i--, v >>= 4)
		buf[1 + i] = hexdig[v & 15];
	put(o, buf, sizeof(buf));
}

/* Ends the frame with its newline and a NUL (not counted), as the cJSON
 * encoders do. */
static size_t done(struct out *o, char *buf)
{
	PUT_LIT(o, "\n");
	put(o, "", 1);
	return o->bad ? 0 : (size_t)(o->p - buf) - 1;
}

size_t proto_grant_reply_room(const char *id, const struct proto_grant *g)
{
	size_t n = strlen(id);
	if (g->handle && g->device_uuid)
		n += strlen(g->device_uuid);
	if (g->label)
		n += strlen(g->label);
	return 512 + 6 * n;
}

size_t proto_grant_reply(char *buf, size_t cap, const char *id, const struct proto_grant *g)
{
	struct out o = {buf, buf + cap, false};

	if (g->device < 0)
		return 0;
	PUT_LIT(&o, "{\"" PROTO_F_ID "\":");
	put_str(&o, id);
	PUT_LIT(&o, ",\"" PROTO_F_RESULT "\":{\"" PROTO_F_ID "\":");
	put_id64(&o, g->id);
	PUT_LIT(&o, ",\"" PROTO_F_DEVICE "\":");
	put_dec(&o, (uint64_t)g->device);
	PUT_LIT(&o, ",\"" PROTO_F_SLAB "\":");
	put_id64(&o, g->slab);
	PUT_LIT(&o, ",\"" PROTO_F_SLAB_SIZE "\":");
	put_u64(&o, g->slab_size);
	PUT_LIT(&o, ",\"" PROTO_F_OFFSET "\":");
	put_u64(&o, g->offset);
	PUT_LIT(&o, ",\"" PROTO_F_SIZE "\":");
	put_u64(&o, g->size);
	if (g->handle) {
		char hex[2 * PROTO_HANDLE_SIZE + 2];
		hex[0] = hex[sizeof(hex) - 1] = '"';
		for (size_t i = 0; i < PROTO_HANDLE_SIZE; i++) {
			hex[1 + 2 * i] = hexdig[g->handle[i] >> 4];
			hex[2 + 2 * i] = hexdig[g->handle[i] & 15];
		}
		PUT_LIT(&o, ",\"" PROTO_F_HANDLE "\":");
		put(&o, hex, sizeof(hex));
		PUT_LIT(&o, ",\"" PROTO_F_DEVICE_UUID "\":");
		put_str(&o, g->device_uuid ? g->device_uuid : "");
		if (g->fd) {
			PUT_LIT(&o, ",\"" PROTO_F_FD "\":true");
			if (g->pool) {
				PUT_LIT(&o, ",\"" PROTO_F_POOL "\":true,\"" PROTO_F_POOL_ID "\":");
				put_id64(&o, g->pool_id);
			}
			if (g->vmm)
				PUT_LIT(&o, ",\"" PROTO_F_VMM "\":true");
		}
		if (g->keep)
			PUT_LIT(&o, ",\"" PROTO_F_KEEP "\":true");
	}
	if (g->label) {
		PUT_LIT(&o, ",\"" PROTO_F_LABEL "\":");
		put_str(&o, g->label);
		PUT_LIT(&o, ",\"" PROTO_F_INSTANCE "\":");
		put_id64(&o, g->instance);
	}
	PUT_LIT(&o, "}}");
	return done(&o, buf);
}

size_t proto_fast_alloc_request(char *buf, size_t cap, const char *id, uint64_t instance,
                                uint64_t size, uint64_t alignment, uint32_t wait_ms)
{
	struct out o = {buf, buf + cap, false};

	/* The order cJSON's envelope gives: id, params, method. */
	PUT_LIT(&o, "{\"" PROTO_F_ID "\":");
	put_str(&o, id);
	PUT_LIT(&o, ",\"" PROTO_F_PARAMS "\":{\"" PROTO_F_INSTANCE "\":");
	put_id64(&o, instance);
	PUT_LIT(&o, ",\"" PROTO_F_SIZE "\":");
	put_u64(&o, size);
	if (alignment) {
		PUT_LIT(&o, ",\"" PROTO_F_ALIGNMENT "\":");
		put_u64(&o, alignment);
	}
	if (wait_ms) {
		PUT_LIT(&o, ",\"" PROTO_F_WAIT_MS "\":");
		put_dec(&o, wait_ms);
	}
	PUT_LIT(&o, "},\"" PROTO_F_METHOD "\":\"" PROTO_M_ALLOC "\"}");
	return done(&o, buf);
}

size_t proto_fast_free_request(char *buf, size_t cap, const char *id, uint64_t alloc_id, bool reply)
{
	struct out o = {buf, buf + cap, false};

	PUT_LIT(&o, "{\"" PROTO_F_ID "\":");
	put_str(&o, id);
	PUT_LIT(&o, ",\"" PROTO_F_PARAMS "\":{\"" PROTO_F_ID "\":");
	put_id64(&o, alloc_id);
	if (!reply)
		PUT_LIT(&o, ",\"" PROTO_F_REPLY "\":false");
	PUT_LIT(&o, "},\"" PROTO_F_METHOD "\":\"" PROTO_M_FREE "\"}");
	return done(&o, buf);
}

/* ---- reading a grant ------------------------------------------------------- */

struct grant_ctx {
	struct proto_grant *g;
	const char *want_id;
	unsigned top, seen;
};

enum {
	G_ID = 1,
	G_DEVICE = 2,
	G_SLAB = 4,
	G_SLAB_SIZE = 8,
	G_OFFSET = 16,
	G_SIZE = 32,
	G_HANDLE = 64,
	G_UUID = 128,
	G_FD = 256,
	G_POOL = 512,
	G_VMM = 1024,
	G_KEEP = 2048,
	G_REQUIRED = 63
};

static int grant_top(void *ctx, const char *k, size_t klen, enum scan_kind kind, const char *v,
                     size_t vlen)
{
	struct grant_ctx *c = ctx;

	if (kind != SCAN_STRING || !key_is(k, klen, PROTO_F_ID) || c->top ||
	    !key_is(v, vlen, c->want_id))
		return -EAGAIN;
	c->top = 1;
	return 0;
}

static int grant_member(void *ctx, const char *k, size_t klen, enum scan_kind kind, const char *v,
                        size_t vlen)
{
	struct grant_ctx *c = ctx;
	struct proto_grant *g = c->g;
	uint64_t dev;

	if (key_is(k, klen, PROTO_F_ID))
		return kind == SCAN_STRING && seen(&c->seen, G_ID) == 0
		           ? parse_id64(v, vlen, &g->id)
		           : -EAGAIN;
	if (key_is(k, klen, PROTO_F_DEVICE)) {
		if (kind != SCAN_NUMBER || seen(&c->seen, G_DEVICE) < 0 ||
		    parse_u64(v, vlen, &dev) < 0 || dev > INT32_MAX)
			return -EAGAIN;
		g->device = (int)dev;
		return 0;
	}
	if (key_is(k, klen, PROTO_F_SLAB))
		return kind == SCAN_STRING && seen(&c->seen, G_SLAB) == 0
		           ? parse_id64(v, vlen, &g->slab)
		           : -EAGAIN;
	if (key_is(k, klen, PROTO_F_SLAB_SIZE))
		return kind == SCAN_STRING && seen(&c->seen, G_SLAB_SIZE) == 0
		           ? parse_u64(v, vlen, &g->slab_size)
		           : -EAGAIN;
	if (key_is(k, klen, PROTO_F_OFFSET))
		return kind == SCAN_STRING && seen(&c->seen, G_OFFSET) == 0
		           ? parse_u64(v, vlen, &g->offset)
		           : -EAGAIN;
	if (key_is(k, klen, PROTO_F_SIZE))
		return kind == SCAN_STRING && seen(&c->seen, G_SIZE) == 0
		           ? parse_u64(v, vlen, &g->size)
		           : -EAGAIN;
	/* A grant that hands a slab over (its handle, device_uuid and
	 * descriptor flags) is read the general way: it is not the steady
	 * state, and the caller must take the descriptor with it. */
	/* Anything else (a claim's label, a host allocation's type): the
	 * general path. */
	return -EAGAIN;
}

int proto_grant_parse(const char *frame, size_t len, const char *want_id, struct proto_grant *out)
{
	struct scan s = {frame, frame + len};
	struct grant_ctx c = {out, want_id, 0, 0};

	memset(out, 0, sizeof(*out));
	if (scan_envelope(&s, PROTO_F_RESULT, grant_top, grant_member, &c) < 0 || !c.top ||
	    (c.seen & G_REQUIRED) != G_REQUIRED)
		return -EAGAIN;
	return 0;
}
