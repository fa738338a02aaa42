/*
 * params.c - requests' params decoded and checked once (params.h), from
 * the member lists of schema.h.
 *
 * Two steps, so that the hot path shares the second: parse_member() reads
 * a member's JSON type and format into its C type (-ENOENT, -EINVAL), and
 * check_value() holds it to the list's bounds (-ERANGE, -EINVAL). A
 * refusal names the member and what it must be, as proto_error_field()
 * words it.
 */
#include "params.h"

#include <errno.h>
#include <float.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "proto.h"

/* "err is set already": a member whose elements name their own fields. */
#define PARAMS_ERR_SET (-EBADMSG)

static const char *const memory_values[] = PROTO_MEMORY_VALUES;
static const char *const mode_values[] = PROTO_MODE_VALUES;
static const char *const allocator_values[] = PROTO_ALLOCATOR_VALUES;

static int param_error(struct proto_error *err, int rc, const char *key, const char *expected)
{
	if (rc != PARAMS_ERR_SET)
		proto_error_field(err, rc, key, expected);
	return -EINVAL;
}

/* A whole JSON number in [lo, hi]. */
static int whole_number(const cJSON *v, double lo, double hi, int64_t *out)
{
	if (!cJSON_IsNumber(v))
		return -EINVAL;
	double d = v->valuedouble;
	if (!(d >= lo && d <= hi) || d != (double)(int64_t)d)
		return -EINVAL;
	*out = (int64_t)d;
	return 0;
}

static int enum_value(const cJSON *v, const char *const *values, size_t n, int *out)
{
	if (!cJSON_IsString(v))
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if (strcmp(v->valuestring, values[i]) == 0) {
			*out = (int)i;
			return 0;
		}
	}
	return -EINVAL;
}

/* A device index (0 to PROTO_MAX_DEVICES - 1) or a UUID string. */
static int parse_device(const cJSON *v, struct proto_device *d)
{
	int64_t index;
	if (cJSON_IsString(v)) {
		d->index = -1;
		d->uuid = v->valuestring;
		return 0;
	}
	if (whole_number(v, -9007199254740992.0, 9007199254740992.0, &index) < 0)
		return -EINVAL;
	if (index < 0 || index >= PROTO_MAX_DEVICES)
		return -ERANGE;
	d->index = (int)index;
	d->uuid = NULL;
	return 0;
}

static int parse_devices(const cJSON *v, struct proto_devices *out)
{
	const cJSON *e;
	if (!cJSON_IsArray(v) || !cJSON_GetArraySize(v))
		return -EINVAL;
	out->count = 0;
	cJSON_ArrayForEach(e, v)
	{
		/* The parser allows PROTO_MAX_KEYS elements: as many as devices. */
		if (out->count == PROTO_MAX_DEVICES ||
		    parse_device(e, &out->dev[out->count]) == -EINVAL)
			return -EINVAL;
		/* An index past the devices is the daemon's "no such device". */
		if (out->dev[out->count].uuid == NULL && out->dev[out->count].index < 0)
			return -EINVAL;
		out->count++;
	}
	return 0;
}

static int parse_versions(const cJSON *v, bool *speaks)
{
	const cJSON *e;
	if (!cJSON_IsArray(v))
		return -EINVAL;
	*speaks = false;
	cJSON_ArrayForEach(e, v)
	{
		if (!cJSON_IsNumber(e))
			return -EINVAL;
		if (e->valuedouble == PROTO_VERSION)
			*speaks = true;
	}
	return 0;
}

static int parse_shape(const cJSON *v, struct proto_shape *s)
{
	const cJSON *e;
	int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 0;
	if (n < 1 || n > PROTO_MAX_DIMS)
		return -EINVAL;
	s->ndim = 0;
	cJSON_ArrayForEach(e, v)
	{
		int64_t d;
		if (whole_number(e, 1, 9007199254740992.0, &d) < 0)
			return -EINVAL;
		s->dim[s->ndim++] = (uint64_t)d;
	}
	return 0;
}

static int parse_queue(const cJSON *v, struct proto_queue *q, struct proto_error *err);

/* One member's type and format into dst (the member's C type). 0,
 * -ENOENT (absent), -EINVAL, -ERANGE, or PARAMS_ERR_SET. */
static int parse_member(const cJSON *obj, const char *key, enum proto_kind kind, void *dst,
                        struct proto_error *err)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
	int64_t n;
	if (!v)
		return -ENOENT;
	switch (kind) {
	case PROTO_KIND_ID64:
		return proto_get_id64(obj, key, dst);
	case PROTO_KIND_U64:
	case PROTO_KIND_ALIGN:
		return proto_get_u64(obj, key, 0, UINT64_MAX, dst);
	case PROTO_KIND_BYTES:
		if (cJSON_IsString(v))
			return proto_get_u64(obj, key, 0, UINT64_MAX, dst);
		if (whole_number(v, 0, 9007199254740992.0, &n) < 0)
			return -EINVAL;
		*(uint64_t *)dst = (uint64_t)n;
		return 0;
	case PROTO_KIND_INT:
		return proto_get_int(obj, key, INT64_MIN, INT64_MAX, dst);
	case PROTO_KIND_SHARE:
		return proto_get_double(obj, key, -DBL_MAX, DBL_MAX, dst);
	case PROTO_KIND_STRING:
	case PROTO_KIND_PNAME:
		if (!cJSON_IsString(v))
			return -EINVAL;
		*(const char **)dst = v->valuestring;
		return 0;
	case PROTO_KIND_BOOL:
		return proto_get_bool(obj, key, dst);
	case PROTO_KIND_MEMORY:
		return enum_value(v, memory_values, 4, dst);
	case PROTO_KIND_MODE:
		return enum_value(v, mode_values, 2, dst);
	case PROTO_KIND_ALLOCATOR:
		return enum_value(v, allocator_values, 3, dst);
	case PROTO_KIND_TOKEN: {
		struct proto_token *t = dst;
		if (!cJSON_IsString(v))
			return -EINVAL;
		t->valid = proto_hex_decode(v->valuestring, t->bytes, PROTO_TOKEN_SIZE) == 0;
		return 0;
	}
	case PROTO_KIND_DEVICE:
		return parse_device(v, dst);
	case PROTO_KIND_DEVICES:
		return parse_devices(v, dst);
	case PROTO_KIND_VERSIONS:
		return parse_versions(v, dst);
	case PROTO_KIND_SHAPE:
		return parse_shape(v, dst);
	case PROTO_KIND_QUEUE:
		return parse_queue(v, dst, err);
	default:
		return -EINVAL;
	}
}

static bool pname_char(char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
	       c == '.' || c == '_' || c == '-';
}

/* A decoded value against its bounds: 0, -ERANGE or -EINVAL. */
static int check_value(enum proto_kind kind, const void *v, uint64_t lo, uint64_t hi)
{
	switch (kind) {
	case PROTO_KIND_U64:
	case PROTO_KIND_BYTES: {
		uint64_t x = *(const uint64_t *)v;
		return x < lo || x > hi ? -ERANGE : 0;
	}
	case PROTO_KIND_ALIGN: {
		uint64_t x = *(const uint64_t *)v;
		if (x < lo || x > hi)
			return -ERANGE;
		return x & (x - 1) ? -EINVAL : 0;
	}
	case PROTO_KIND_INT: {
		int64_t x = *(const int64_t *)v;
		return x < (int64_t)lo || (uint64_t)x > hi ? -ERANGE : 0;
	}
	case PROTO_KIND_SHARE: {
		double x = *(const double *)v;
		return x > 0 && x <= 1 ? 0 : -ERANGE;
	}
	case PROTO_KIND_PNAME:
	case PROTO_KIND_STRING: {
		const char *s = *(const char *const *)v;
		size_t n = strlen(s);
		if (n < lo || n > hi)
			return -ERANGE;
		for (size_t i = 0; kind == PROTO_KIND_PNAME && i < n; i++) {
			if (!pname_char(s[i]))
				return -EINVAL;
		}
		return 0;
	}
	case PROTO_KIND_DEVICE: {
		const struct proto_device *d = v;
		size_t n = d->uuid ? strlen(d->uuid) : 1;
		return n < 1 || n > PROTO_MAX_NAME ? -ERANGE : 0;
	}
	default:
		return 0; /* the type was the whole rule */
	}
}

/* proto_<name>_params_check() and the decoders, from the lists. */
#define CHECK_MEMBER_(id, cname, kind, presence, lo, hi, expected)                                 \
	if (p->has_##cname &&                                                                      \
	    (rc = check_value(PROTO_KIND_##kind, &p->cname, (uint64_t)(lo), (uint64_t)(hi))) < 0)  \
		return param_error(err, rc, PROTO_F_##id, expected);

#define DECODE_MEMBER_(id, cname, kind, presence, lo, hi, expected)                                \
	rc = parse_member(params, PROTO_F_##id, PROTO_KIND_##kind, &p->cname, err);                \
	p->has_##cname = rc == 0;                                                                  \
	if (rc < 0 && (rc != -ENOENT || (presence) == PROTO_REQUIRED))                             \
		return param_error(err, rc, PROTO_F_##id, expected);

/* A queued request: its members, then the rule across two of them. */
static int queue_item_check(const struct proto_queue_item *p, struct proto_error *err)
{
	int rc = 0;
	PROTO_QUEUE_ITEM(CHECK_MEMBER_)
	if (p->has_axis && (uint64_t)p->axis >= p->shape.ndim)
		return param_error(err, -ERANGE, PROTO_F_AXIS, "a dimension of the shape");
	return rc;
}

static int queue_item_decode(const cJSON *params, struct proto_queue_item *p,
                             struct proto_error *err)
{
	int rc;
	memset(p, 0, sizeof(*p));
	PROTO_QUEUE_ITEM(DECODE_MEMBER_)
	return queue_item_check(p, err);
}

static int parse_queue(const cJSON *v, struct proto_queue *q, struct proto_error *err)
{
	const cJSON *e;
	int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 0;
	if (n < 1 || n > PROTO_MAX_REQUESTS)
		return -EINVAL;
	q->count = 0;
	cJSON_ArrayForEach(e, v)
	{
		struct proto_queue_item *it = &q->item[q->count];
		if (!cJSON_IsObject(e))
			return -EINVAL;
		if (queue_item_decode(e, it, err) < 0)
			return PARAMS_ERR_SET;
		for (unsigned i = 0; i < q->count; i++) {
			if (strcmp(q->item[i].label, it->label) == 0) {
				param_error(err, -EINVAL, PROTO_F_LABEL,
				            "labels distinct within a request");
				return PARAMS_ERR_SET;
			}
		}
		q->count++;
	}
	return 0;
}

#define PARAMS_CHECK_FN_(id, name, flags)                                                          \
	int proto_##name##_params_check(const struct proto_##name##_params *p,                     \
	                                struct proto_error *err)                                   \
	{                                                                                          \
		int rc = 0;                                                                        \
		(void)p;                                                                           \
		(void)err;                                                                         \
		PROTO_##id##_PARAMS(CHECK_MEMBER_) return rc;                                      \
	}
PROTO_OPS(PARAMS_CHECK_FN_)

#define PARAMS_DECODE_FN_(id, name, flags)                                                         \
	static int decode_##name(const cJSON *params, union proto_params *out,                     \
	                         struct proto_error *err)                                          \
	{                                                                                          \
		struct proto_##name##_params *p = &out->name;                                      \
		int rc = 0;                                                                        \
		memset(p, 0, sizeof(*p));                                                          \
		(void)params;                                                                      \
		(void)rc;                                                                          \
		PROTO_##id##_PARAMS(DECODE_MEMBER_) return proto_##name##_params_check(p, err);    \
	}
PROTO_OPS(PARAMS_DECODE_FN_)

typedef int (*params_decode_fn)(const cJSON *, union proto_params *, struct proto_error *);

static const params_decode_fn decoders[PROTO_OP_COUNT] = {
#define PARAMS_DECODER_(id, name, flags) [PROTO_OP_##id] = decode_##name,
    PROTO_OPS(PARAMS_DECODER_)
#undef PARAMS_DECODER_
};

int proto_params_decode(int op, const struct cJSON *params, union proto_params *out,
                        struct proto_error *err)
{
	if (op < 0 || op >= PROTO_OP_COUNT) {
		proto_error_set(err, PROTO_E_METHOD, "method not found");
		return -EINVAL;
	}
	return decoders[op](params, out, err);
}
