/*
 * proto.c - framing, validation and field codecs of protocol v1.
 */
#include "proto.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- framing ---------------------------------------------------------- */

void proto_framer_init(struct proto_framer *f, size_t max)
{
	memset(f, 0, sizeof(*f));
	f->max = max;
}

void proto_framer_finish(struct proto_framer *f)
{
	free(f->buf);
	proto_framer_init(f, f->max);
}

size_t proto_framer_pending(const struct proto_framer *f)
{
	return f->len - f->head;
}

int proto_framer_push(struct proto_framer *f, const char *data, size_t n)
{
	/* Reclaim consumed space before growing: frames are small and the
	 * buffer should stay near one frame's size. */
	if (f->head > 0) {
		memmove(f->buf, f->buf + f->head, f->len - f->head);
		f->len -= f->head;
		f->head = 0;
	}
	if (f->len + n + 1 > f->cap) {
		size_t cap = f->cap ? f->cap : 4096;
		while (cap < f->len + n + 1)
			cap *= 2;
		char *buf = realloc(f->buf, cap);
		if (!buf)
			return -ENOMEM;
		f->buf = buf;
		f->cap = cap;
	}
	memcpy(f->buf + f->len, data, n);
	f->len += n;
	return 0;
}

static bool is_blank(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
			return false;
	}
	return true;
}

int proto_framer_next(struct proto_framer *f, char **frame, size_t *len)
{
	if (!f->buf)
		return 0;
	for (;;) {
		char *start = f->buf + f->head;
		size_t avail = f->len - f->head;
		char *nl = avail > f->scan ? memchr(start + f->scan, '\n', avail - f->scan) : NULL;
		if (!nl) {
			f->scan = avail;
			return avail >= f->max ? -E2BIG : 0;
		}
		size_t n = (size_t)(nl - start);
		f->head += n + 1;
		f->scan = 0;
		if (n + 1 > f->max)
			return -E2BIG;
		if (is_blank(start, n))
			continue;
		*nl = '\0';
		*frame = start;
		*len = n;
		return 1;
	}
}

/* ---- byte checks -------------------------------------------------------- */

/* Length of the UTF-8 sequence at s (at most n bytes), or 0 if invalid. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
	unsigned char c = s[0];
	size_t len;
	uint32_t cp;
	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf) {
		len = 2;
		cp = c & 0x1f;
	} else if (c >= 0xe0 && c <= 0xef) {
		len = 3;
		cp = c & 0x0f;
	} else if (c >= 0xf0 && c <= 0xf4) {
		len = 4;
		cp = c & 0x07;
	} else {
		return 0;
	}
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10ffff ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

/* Bytes proto_frame_check has nothing to do for: printable ASCII except
 * the string and nesting delimiters and the backslash, plus tab and CR.
 * Skipping runs of them keeps the check at a few instructions a byte. */
static const unsigned char frame_plain[256] = {
    ['\t'] = 1,          ['\r'] = 1, [0x20 ... 0x21] = 1, [0x23 ... 0x5a] = 1,
    [0x5e ... 0x7a] = 1, [0x7c] = 1, [0x7e ... 0x7f] = 1,
};

int proto_frame_check(const char *frame, size_t len)
{
	const unsigned char *s = (const unsigned char *)frame;
	bool in_string = false;
	int depth = 0;
	for (size_t i = 0; i < len;) {
		while (i < len && frame_plain[s[i]])
			i++;
		if (i == len)
			break;
		unsigned char c = s[i];
		if (c < 0x20 && c != '\t' && c != '\r')
			return -EILSEQ;
		if (c >= 0x80) {
			size_t n = utf8_seq(s + i, len - i);
			if (!n)
				return -EILSEQ;
			i += n;
			continue;
		}
		if (c == '"') {
			in_string = !in_string;
		} else if (!in_string && (c == '[' || c == '{')) {
			/* Counted here, before cJSON recurses: its own limit
			 * (1000) would turn deep input into a parse error. */
			if (++depth > PROTO_MAX_DEPTH)
				return -E2BIG;
		} else if (!in_string && (c == ']' || c == '}')) {
			depth--;
		} else if (in_string && c == '\\' && i + 1 < len) {
			/* An escaped NUL would end cJSON's C string early and
			 * silently shorten a name. */
			if (s[i + 1] == 'u' && i + 5 < len && memcmp(s + i + 2, "0000", 4) == 0)
				return -EILSEQ;
			i += 2;
			continue;
		}
		i++;
	}
	return 0;
}

/* ---- JSON structure ------------------------------------------------------ */

static int json_check(const cJSON *node, int depth, int max_members)
{
	if (!cJSON_IsObject(node) && !cJSON_IsArray(node))
		return 0;
	if (depth > PROTO_MAX_DEPTH)
		return -E2BIG;
	int count = 0;
	for (const cJSON *c = node->child; c; c = c->next) {
		if (++count > max_members)
			return -E2BIG;
		if (cJSON_IsObject(node)) {
			/* Request objects are bounded by PROTO_MAX_KEYS and
			 * reply objects are the daemon's own, so the
			 * quadratic duplicate check stays small. */
			for (const cJSON *p = node->child; p != c; p = p->next) {
				if (strcmp(p->string, c->string) == 0)
					return -EEXIST;
			}
		}
		int rc = json_check(c, depth + 1, max_members);
		if (rc < 0)
			return rc;
	}
	return 0;
}

int proto_json_parse(const char *frame, size_t len, int max_members, cJSON **out)
{
	*out = NULL;
	int rc = proto_frame_check(frame, len);
	if (rc < 0)
		return rc;
	/* cJSON over-reads unterminated input: always hand it a
	 * NUL-terminated copy and require that the NUL ends the value.
	 * Frames are small: most copies fit on the stack. */
	char small[1024];
	char *copy = len < sizeof(small) ? small : malloc(len + 1);
	if (!copy)
		return -ENOMEM;
	memcpy(copy, frame, len);
	copy[len] = '\0';
	cJSON *root = cJSON_ParseWithLengthOpts(copy, len + 1, NULL, 1);
	if (copy != small)
		free(copy);
	if (!root)
		return -EBADMSG;
	rc = json_check(root, 1, max_members);
	if (rc < 0) {
		cJSON_Delete(root);
		return rc;
	}
	*out = root;
	return 0;
}

void proto_error_set(struct proto_error *err, int code, const char *fmt, ...)
{
	va_list ap;
	err->code = code;
	err->field[0] = '\0';
	va_start(ap, fmt);
	vsnprintf(err->message, sizeof(err->message), fmt, ap);
	va_end(ap);
}

static void parse_error(struct proto_error *err, int rc)
{
	switch (rc) {
	case -EILSEQ:
		proto_error_set(err, PROTO_E_PARSE,
		                "parse error: invalid UTF-8, control byte or \\u0000");
		break;
	case -EBADMSG:
		proto_error_set(err, PROTO_E_PARSE, "parse error: not a JSON value");
		break;
	case -E2BIG:
		proto_error_set(err, PROTO_E_INVALID_REQUEST,
		                "invalid request: nesting deeper than %d or more than %d members",
		                PROTO_MAX_DEPTH, PROTO_MAX_KEYS);
		break;
	case -EEXIST:
		proto_error_set(err, PROTO_E_INVALID_REQUEST, "invalid request: duplicate key");
		break;
	default:
		proto_error_set(err, PROTO_E_INTERNAL, "internal error: out of memory");
		break;
	}
}

static cJSON empty_params = {.type = cJSON_Object};

int proto_request_parse(const char *frame, size_t len, struct proto_request *req,
                        struct proto_error *err)
{
	memset(req, 0, sizeof(*req));
	req->op = -1;
	req->params = &empty_params;
	int rc = proto_json_parse(frame, len, PROTO_MAX_KEYS, &req->root);
	if (rc < 0) {
		parse_error(err, rc);
		return rc;
	}
	if (!cJSON_IsObject(req->root)) {
		proto_error_set(err, PROTO_E_INVALID_REQUEST,
		                "invalid request: a request must be a JSON object");
		return -EINVAL;
	}
	const cJSON *id = cJSON_GetObjectItemCaseSensitive(req->root, PROTO_F_ID);
	if (!cJSON_IsString(id) || id->valuestring[0] == '\0' ||
	    strlen(id->valuestring) > PROTO_MAX_ID) {
		proto_error_set(err, PROTO_E_INVALID_REQUEST,
		                "invalid request: 'id' must be a string of 1-%d bytes",
		                PROTO_MAX_ID);
		return -EINVAL;
	}
	req->id = id->valuestring;
	const cJSON *method = cJSON_GetObjectItemCaseSensitive(req->root, PROTO_F_METHOD);
	if (!cJSON_IsString(method)) {
		proto_error_set(err, PROTO_E_INVALID_REQUEST,
		                "invalid request: 'method' must be a string");
		return -EINVAL;
	}
	req->method = method->valuestring;
	const cJSON *params = cJSON_GetObjectItemCaseSensitive(req->root, PROTO_F_PARAMS);
	if (params && !cJSON_IsObject(params)) {
		proto_error_set(err, PROTO_E_INVALID_REQUEST,
		                "invalid request: 'params' must be an object");
		return -EINVAL;
	}
	if (params)
		req->params = params;
	int op = proto_op_lookup(req->method);
	if (op < 0) {
		/* Cut at a character boundary: the message must stay UTF-8. */
		int n = 0;
		while (req->method[n] && n < PROTO_MAX_NAME)
			n++;
		while (n > 0 && req->method[n] && ((unsigned char)req->method[n] & 0xc0) == 0x80)
			n--;
		proto_error_set(err, PROTO_E_METHOD, "unknown method '%.*s'", n, req->method);
		return -ENOENT;
	}
	req->op = op;
	return 0;
}

void proto_request_finish(struct proto_request *req)
{
	cJSON_Delete(req->root);
	memset(req, 0, sizeof(*req));
	req->op = -1;
}

int proto_reply_parse(const char *frame, size_t len, struct proto_reply *rep)
{
	memset(rep, 0, sizeof(*rep));
	/* Replies list every client or device: no member limit there. */
	int rc = proto_json_parse(frame, len, INT_MAX, &rep->root);
	if (rc < 0)
		return rc;
	const cJSON *root = rep->root;
	if (!cJSON_IsObject(root))
		goto bad;
	const cJSON *event = cJSON_GetObjectItemCaseSensitive(root, PROTO_F_EVENT);
	if (event) {
		if (!cJSON_IsString(event))
			goto bad;
		rep->event = event->valuestring;
		rep->data = cJSON_GetObjectItemCaseSensitive(root, PROTO_F_DATA);
		if (rep->data && !cJSON_IsObject(rep->data))
			goto bad;
		return 0;
	}
	const cJSON *id = cJSON_GetObjectItemCaseSensitive(root, PROTO_F_ID);
	if (cJSON_IsString(id))
		rep->id = id->valuestring;
	else if (!cJSON_IsNull(id))
		goto bad;
	rep->result = cJSON_GetObjectItemCaseSensitive(root, PROTO_F_RESULT);
	const cJSON *error = cJSON_GetObjectItemCaseSensitive(root, PROTO_F_ERROR);
	if (rep->result && !error && cJSON_IsObject(rep->result))
		return 0;
	if (!rep->result && cJSON_IsObject(error)) {
		const cJSON *code = cJSON_GetObjectItemCaseSensitive(error, PROTO_F_CODE);
		const cJSON *msg = cJSON_GetObjectItemCaseSensitive(error, PROTO_F_MESSAGE);
		if (!cJSON_IsNumber(code) || !cJSON_IsString(msg) || code->valueint == 0 ||
		    code->valuedouble != (double)code->valueint)
			goto bad;
		rep->data = cJSON_GetObjectItemCaseSensitive(error, PROTO_F_DATA);
		if (rep->data && !cJSON_IsObject(rep->data))
			goto bad;
		rep->code = code->valueint;
		rep->message = msg->valuestring;
		return 0;
	}
bad:
	proto_reply_finish(rep);
	return -EBADMSG;
}

void proto_reply_finish(struct proto_reply *rep)
{
	cJSON_Delete(rep->root);
	memset(rep, 0, sizeof(*rep));
}

/* ---- encoders ------------------------------------------------------------ */

/* Serialises and frames `root`, which it consumes. */
static char *encode(cJSON *root, size_t max, size_t *len)
{
	/* Printed on the stack when it fits (every frame of the alloc path
	 * does): cJSON's own buffer costs a malloc, a realloc and a free. */
	char small[1024];
	char *text = NULL;
	if (root && cJSON_PrintPreallocated(root, small, sizeof(small), 0))
		text = small;
	else if (root)
		text = cJSON_PrintUnformatted(root);
	cJSON_Delete(root);
	if (!text)
		return NULL;
	size_t n = strlen(text);
	if (n + 1 > max) {
		if (text != small)
			cJSON_free(text);
		return NULL;
	}
	/* cJSON may use its own allocator hooks: copy into a malloc'd frame
	 * so callers always release with free(). */
	char *frame = malloc(n + 2);
	if (frame) {
		memcpy(frame, text, n);
		frame[n] = '\n';
		frame[n + 1] = '\0';
		*len = n + 1;
	}
	if (text != small)
		cJSON_free(text);
	return frame;
}

/* Builds {"id": id, key: value}; consumes value. */
static cJSON *envelope(const char *id, const char *key, cJSON *value)
{
	cJSON *root = cJSON_CreateObject();
	cJSON *idv = id ? cJSON_CreateString(id) : cJSON_CreateNull();
	if (!root || !idv || !value || !cJSON_AddItemToObject(root, PROTO_F_ID, idv)) {
		cJSON_Delete(root);
		cJSON_Delete(idv);
		cJSON_Delete(value);
		return NULL;
	}
	if (!cJSON_AddItemToObject(root, key, value)) {
		cJSON_Delete(root);
		cJSON_Delete(value);
		return NULL;
	}
	return root;
}

char *proto_encode_request(const char *id, const char *method, cJSON *params, size_t *len)
{
	if (!params)
		params = cJSON_CreateObject();
	cJSON *root = envelope(id, PROTO_F_PARAMS, params);
	if (root && !cJSON_AddStringToObject(root, PROTO_F_METHOD, method)) {
		cJSON_Delete(root);
		root = NULL;
	}
	return encode(root, PROTO_MAX_FRAME, len);
}

char *proto_encode_result(const char *id, cJSON *result, size_t *len)
{
	if (!result)
		result = cJSON_CreateObject();
	return encode(envelope(id, PROTO_F_RESULT, result), PROTO_MAX_REPLY, len);
}

char *proto_encode_error(const char *id, int code, const char *message, cJSON *data, size_t *len)
{
	cJSON *error = cJSON_CreateObject();
	if (!error || !cJSON_AddNumberToObject(error, PROTO_F_CODE, code) ||
	    !cJSON_AddStringToObject(error, PROTO_F_MESSAGE, message) ||
	    (data && !cJSON_AddItemToObject(error, PROTO_F_DATA, data))) {
		if (error && data && !cJSON_GetObjectItemCaseSensitive(error, PROTO_F_DATA))
			cJSON_Delete(data);
		cJSON_Delete(error);
		return NULL;
	}
	return encode(envelope(id, PROTO_F_ERROR, error), PROTO_MAX_REPLY, len);
}

char *proto_encode_event(const char *name, cJSON *data, size_t *len)
{
	cJSON *root = cJSON_CreateObject();
	if (!data)
		data = cJSON_CreateObject();
	if (!root || !data || !cJSON_AddStringToObject(root, PROTO_F_EVENT, name) ||
	    !cJSON_AddItemToObject(root, PROTO_F_DATA, data)) {
		if (data && (!root || !cJSON_GetObjectItemCaseSensitive(root, PROTO_F_DATA)))
			cJSON_Delete(data);
		cJSON_Delete(root);
		return NULL;
	}
	return encode(root, PROTO_MAX_REPLY, len);
}

/* ---- fields -------------------------------------------------------------- */

int proto_parse_u64(const char *s, uint64_t *out)
{
	size_t n = strlen(s);
	if (n == 0 || n > 20 || (n > 1 && s[0] == '0'))
		return -EINVAL;
	uint64_t v = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EINVAL;
		unsigned d = (unsigned)(s[i] - '0');
		if (v > (UINT64_MAX - d) / 10)
			return -ERANGE;
		v = v * 10 + d;
	}
	*out = v;
	return 0;
}

int proto_get_u64(const cJSON *obj, const char *key, uint64_t min, uint64_t max, uint64_t *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
	uint64_t x;
	if (!v)
		return -ENOENT;
	if (!cJSON_IsString(v))
		return -EINVAL;
	int rc = proto_parse_u64(v->valuestring, &x);
	if (rc < 0)
		return rc;
	if (x < min || x > max)
		return -ERANGE;
	*out = x;
	return 0;
}

static int hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int proto_get_id64(const cJSON *obj, const char *key, uint64_t *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
	if (!v)
		return -ENOENT;
	if (!cJSON_IsString(v) || strlen(v->valuestring) != 16)
		return -EINVAL;
	uint64_t x = 0;
	for (int i = 0; i < 16; i++) {
		char c = v->valuestring[i];
		/* One spelling per id: lowercase only. */
		if (c >= 'A' && c <= 'F')
			return -EINVAL;
		int d = hex_value(c);
		if (d < 0)
			return -EINVAL;
		x = (x << 4) | (uint64_t)d;
	}
	*out = x;
	return 0;
}

int proto_get_int(const cJSON *obj, const char *key, int64_t min, int64_t max, int64_t *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
	if (!v)
		return -ENOENT;
	if (!cJSON_IsNumber(v))
		return -EINVAL;
	double d = v->valuedouble;
	/* Integral and exactly representable. */
	if (d != d || d < -9007199254740992.0 || d > 9007199254740992.0 || d != (double)(int64_t)d)
		return -EINVAL;
	int64_t x = (int64_t)d;
	if (x < min || x > max)
		return -ERANGE;
	*out = x;
	return 0;
}

int proto_get_double(const cJSON *obj, const char *key, double min, double max, double *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
	if (!v)
		return -ENOENT;
	if (!cJSON_IsNumber(v))
		return -EINVAL;
	double d = v->valuedouble;
	if (!(d >= min && d <= max))
		return -ERANGE;
	*out = d;
	return 0;
}

int proto_get_string(const cJSON *obj, const char *key, size_t max_len, const char **out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
	if (!v)
		return -ENOENT;
	if (!cJSON_IsString(v))
		return -EINVAL;
	size_t n = strlen(v->valuestring);
	if (n == 0 || n > max_len)
		return -ERANGE;
	*out = v->valuestring;
	return 0;
}

int proto_get_bool(const cJSON *obj, const char *key, bool *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
	if (!v)
		return -ENOENT;
	if (!cJSON_IsBool(v))
		return -EINVAL;
	*out = cJSON_IsTrue(v);
	return 0;
}

/* Both adders format by hand: they run several times per request, and
 * snprintf costs about a thousand instructions a call. */
int proto_add_u64(cJSON *obj, const char *key, uint64_t v)
{
	char buf[24], *p = buf + sizeof(buf) - 1;
	*p = '\0';
	do {
		*--p = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	return cJSON_AddStringToObject(obj, key, p) ? 0 : -ENOMEM;
}

int proto_add_id64(cJSON *obj, const char *key, uint64_t v)
{
	static const char digits[] = "0123456789abcdef";
	char buf[17];
	for (int i = 15; i >= 0; i--, v >>= 4)
		buf[i] = digits[v & 15];
	buf[16] = '\0';
	return cJSON_AddStringToObject(obj, key, buf) ? 0 : -ENOMEM;
}

/* Whole numbers go out as raw JSON text: cJSON 1.7.15 prints every number
 * with sprintf("%1.15g") and reads it back with sscanf, about 3,000
 * instructions, and "device" is in every alloc reply. The text is the same
 * either way. */
int proto_add_number(cJSON *obj, const char *key, double v)
{
	if (v >= 0 && v < 9007199254740992.0 && v == (double)(uint64_t)v) {
		char buf[24], *p = buf + sizeof(buf) - 1;
		uint64_t u = (uint64_t)v;
		*p = '\0';
		do {
			*--p = (char)('0' + u % 10);
			u /= 10;
		} while (u);
		return cJSON_AddRawToObject(obj, key, p) ? 0 : -ENOMEM;
	}
	return cJSON_AddNumberToObject(obj, key, v) ? 0 : -ENOMEM;
}

int proto_add_string(cJSON *obj, const char *key, const char *v)
{
	return cJSON_AddStringToObject(obj, key, v) ? 0 : -ENOMEM;
}

cJSON *proto_array_add_object(cJSON *array)
{
	cJSON *o = cJSON_CreateObject();
	if (o && !cJSON_AddItemToArray(array, o)) {
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}

int proto_add_hex(cJSON *obj, const char *key, const void *bytes, size_t n)
{
	static const char digits[] = "0123456789abcdef";
	const unsigned char *b = bytes;
	char buf[2 * PROTO_HANDLE_SIZE + 1];
	if (n > PROTO_HANDLE_SIZE)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		buf[2 * i] = digits[b[i] >> 4];
		buf[2 * i + 1] = digits[b[i] & 15];
	}
	buf[2 * n] = '\0';
	return cJSON_AddStringToObject(obj, key, buf) ? 0 : -ENOMEM;
}

int proto_hex_decode(const char *s, void *bytes, size_t n)
{
	unsigned char *b = bytes;
	if (strlen(s) != 2 * n)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		int hi = hex_value(s[2 * i]), lo = hex_value(s[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return -EINVAL;
		b[i] = (unsigned char)(hi << 4 | lo);
	}
	return 0;
}

void proto_error_field(struct proto_error *err, int rc, const char *key, const char *expected)
{
	if (rc == -ENOENT)
		proto_error_set(err, PROTO_E_PARAMS, "invalid params: '%s' is required", key);
	else if (rc == -ERANGE)
		proto_error_set(err, PROTO_E_PARAMS, "invalid params: '%s' is out of range (%s)",
		                key, expected);
	else
		proto_error_set(err, PROTO_E_PARAMS, "invalid params: '%s' must be %s", key,
		                expected);
	snprintf(err->field, sizeof(err->field), "%s", key);
}
