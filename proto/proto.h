/*
 * proto.h - gpubroker wire protocol v1, shared by gpubrokerd and libgpubroker.
 *
 * One JSON object per line ('\n'), at most PROTO_MAX_FRAME bytes including the
 * newline. See proto/PROTOCOL.md for the messages themselves. This module is
 * pure: no I/O, no global state; every function either returns 0 / a positive
 * count or a negative errno.
 */
#ifndef GPB_PROTO_H
#define GPB_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

/* The names, limits, error codes and the op table: no JSON there. */
#include "schema.h"

/*
 * Line framer: accumulates stream bytes and yields complete frames.
 * Empty and whitespace-only lines are skipped (keep-alives are harmless).
 */
struct proto_framer {
	char *buf;
	size_t max;  /* largest frame accepted, newline included */
	size_t len;  /* bytes held */
	size_t cap;  /* bytes allocated */
	size_t head; /* start of the first unconsumed byte */
	size_t scan; /* bytes after head already known to hold no '\n' */
};

/* max: PROTO_MAX_FRAME for requests (the daemon), PROTO_MAX_REPLY for
 * replies (the client). */
void proto_framer_init(struct proto_framer *f, size_t max);
void proto_framer_finish(struct proto_framer *f);
/* Appends bytes. -ENOMEM. */
int proto_framer_push(struct proto_framer *f, const char *data, size_t n);
/*
 * Yields the next frame (without its '\n', NUL-terminated in place, valid until
 * the next push). Returns 1 and sets *frame and *len, 0 when no complete frame is
 * buffered, -E2BIG when the pending bytes exceed the framer's max without a
 * newline (the stream cannot be resynchronised: close it).
 */
int proto_framer_next(struct proto_framer *f, char **frame, size_t *len);
/* Bytes buffered that do not yet form a frame. */
size_t proto_framer_pending(const struct proto_framer *f);

/*
 * Checks a frame's bytes before JSON parsing: valid UTF-8 (no overlongs, no
 * surrogates), no raw control bytes other than \t \r, and no "\u0000" escape
 * inside a string (cJSON would silently truncate the string there), and
 * nesting no deeper than PROTO_MAX_DEPTH. Returns 0, -EILSEQ or -E2BIG.
 */
int proto_frame_check(const char *frame, size_t len);

/*
 * Parses one frame into a JSON object tree with the structural limits applied
 * (depth, at most max_members per object or array, no duplicate keys). On
 * success *out owns the tree. -EILSEQ (bytes), -EBADMSG (not JSON), -E2BIG
 * (limits), -EEXIST (duplicate key), -ENOMEM.
 */
int proto_json_parse(const char *frame, size_t len, int max_members, cJSON **out);

/* Fixed-size description of a failure to build an error reply from. */
struct proto_error {
	int code;
	char message[160];
	char field[32]; /* the offending parameter for -32602, else empty */
};

/* A decoded request. root owns everything the pointers point into. */
struct proto_request {
	cJSON *root;
	const char *id;      /* NULL when the frame had no usable id */
	int op;              /* enum proto_op, or -1 */
	const char *method;  /* as sent, NULL if absent */
	const cJSON *params; /* an object; an empty one stands in when absent */
};

/*
 * Decodes a request frame. Returns 0, or a negative errno with *err filled
 * (req->id is set if the id could be read, so the reply can carry it).
 * Always call proto_request_finish afterwards.
 */
int proto_request_parse(const char *frame, size_t len, struct proto_request *req,
                        struct proto_error *err);
void proto_request_finish(struct proto_request *req);

/* A decoded reply or event, as the client sees it. */
struct proto_reply {
	cJSON *root;
	const char *id;      /* replies */
	const char *event;   /* events: the event name; id is NULL */
	const cJSON *result; /* success */
	const cJSON *data;   /* event data, or error.data (may be NULL) */
	int code;            /* 0 on success, else error.code */
	const char *message; /* error.message */
};

/* Returns 0 or -EBADMSG / -EILSEQ / -E2BIG / -EEXIST / -ENOMEM. */
int proto_reply_parse(const char *frame, size_t len, struct proto_reply *rep);
void proto_reply_finish(struct proto_reply *rep);

/*
 * Encoders. Each consumes the cJSON object passed in (even on failure) and
 * returns a malloc'd, newline-terminated frame with its length, or NULL when
 * out of memory or when the frame would exceed PROTO_MAX_FRAME (requests) or
 * PROTO_MAX_REPLY (results, errors, events).
 */
char *proto_encode_request(const char *id, const char *method, cJSON *params, size_t *len);
char *proto_encode_result(const char *id, cJSON *result, size_t *len);
char *proto_encode_error(const char *id, int code, const char *message, cJSON *data, size_t *len);
char *proto_encode_event(const char *name, cJSON *data, size_t *len);

/*
 * Field access with the protocol's strict rules. Each returns 0, -ENOENT when
 * the key is absent, -EINVAL when the value has the wrong type or format, or
 * -ERANGE when it is outside [min, max].
 *
 * u64: a decimal string of 1-20 digits, no sign, no blanks, no leading zeros.
 * id64: 16 lowercase hex digits.
 */
int proto_parse_u64(const char *s, uint64_t *out);
int proto_get_u64(const cJSON *obj, const char *key, uint64_t min, uint64_t max, uint64_t *out);
int proto_get_id64(const cJSON *obj, const char *key, uint64_t *out);
int proto_get_int(const cJSON *obj, const char *key, int64_t min, int64_t max, int64_t *out);
int proto_get_double(const cJSON *obj, const char *key, double min, double max, double *out);
int proto_get_string(const cJSON *obj, const char *key, size_t max_len, const char **out);
int proto_get_bool(const cJSON *obj, const char *key, bool *out);

/* Adders: -ENOMEM on failure (-EINVAL from add_hex past PROTO_HANDLE_SIZE). */
int proto_add_u64(cJSON *obj, const char *key, uint64_t v);
int proto_add_id64(cJSON *obj, const char *key, uint64_t v);
int proto_add_hex(cJSON *obj, const char *key, const void *bytes, size_t n);
/* Decodes exactly n bytes of lowercase/uppercase hex. 0 or -EINVAL. */
int proto_hex_decode(const char *s, void *bytes, size_t n);

/* Describes a proto_get_* failure as an error message for field `key`. */
void proto_error_field(struct proto_error *err, int rc, const char *key, const char *expected);
void proto_error_set(struct proto_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
