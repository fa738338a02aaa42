/*
 * proto-helpers.c - helpers shared by the proto unit tests (test-proto-*.c).
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto-helpers.h"

void sb_add(struct sb *b, const char *s, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->len + n + 1)
			cap *= 2;
		char *p = realloc(b->p, cap);
		assert_non_null(p);
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

void sb_puts(struct sb *b, const char *s)
{
	sb_add(b, s, strlen(s));
}

void sb_rep(struct sb *b, const char *s, size_t times)
{
	for (size_t i = 0; i < times; i++)
		sb_puts(b, s);
}

void sb_printf(struct sb *b, const char *fmt, ...)
{
	char tmp[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	assert_true(n >= 0 && (size_t)n < sizeof(tmp));
	sb_add(b, tmp, (size_t)n);
}

/* Returns the built string (never NULL) and resets the builder. */
char *sb_take(struct sb *b)
{
	if (!b->p)
		sb_add(b, "", 0);
	char *p = b->p;
	memset(b, 0, sizeof(*b));
	return p;
}

/* n copies of c, NUL-terminated. */
char *repeat(char c, size_t n)
{
	char *s = malloc(n + 1);
	assert_non_null(s);
	memset(s, c, n);
	s[n] = '\0';
	return s;
}

/* proto_json_parse's return code for a NUL-terminated frame; frees the tree. */
int json_rc(const char *frame)
{
	cJSON *root = (cJSON *)1;
	int rc = proto_json_parse(frame, strlen(frame), PROTO_MAX_KEYS, &root);
	bool out_ok = rc == 0 ? root != NULL : root == NULL;
	cJSON_Delete(rc == 0 ? root : NULL);
	if (!out_ok)
		fail_msg("%s: *out is %s after rc %d", frame, rc ? "set" : "NULL", rc);
	return rc;
}

int json_rc_len(const char *frame, size_t len)
{
	cJSON *root = (cJSON *)1;
	int rc = proto_json_parse(frame, len, PROTO_MAX_KEYS, &root);
	bool out_ok = rc == 0 ? root != NULL : root == NULL;
	cJSON_Delete(rc == 0 ? root : NULL);
	if (!out_ok)
		fail_msg("*out is %s after rc %d", rc ? "set" : "NULL", rc);
	return rc;
}

/* Parses a known-good object for the field getter tests. */
cJSON *parse_obj(const char *text)
{
	cJSON *root = NULL;
	int rc = proto_json_parse(text, strlen(text), PROTO_MAX_KEYS, &root);
	if (rc != 0)
		fail_msg("fixture %s: rc %d", text, rc);
	assert_true(cJSON_IsObject(root));
	return root;
}

/*
 * A message is usable in a reply when it is set, terminated, non-empty and,
 * once escaped as a JSON string, passes the frame check (valid UTF-8: control
 * characters are escaped by the encoder, invalid bytes are not).
 */
bool valid_message(const char *m, size_t size)
{
	size_t n = strnlen(m, size);
	if (n == 0 || n == size)
		return false;
	cJSON *str = cJSON_CreateString(m);
	char *text = str ? cJSON_PrintUnformatted(str) : NULL;
	bool ok = text && proto_frame_check(text, strlen(text)) == 0;
	cJSON_free(text);
	cJSON_Delete(str);
	return ok;
}

/*
 * Decodes a request that must fail with `code`. want_id NULL: req.id must be
 * NULL; otherwise it must equal want_id. The message must be set, non-empty and
 * valid UTF-8 (it goes into a frame), the field empty (not a params error).
 */
void expect_request_error_len(const char *frame, size_t len, int code, const char *want_id)
{
	struct proto_request req;
	struct proto_error err;
	memset(&err, 0x5a, sizeof(err));
	err.code = 0;
	int rc = proto_request_parse(frame, len, &req, &err);
	char *id = req.id ? strdup(req.id) : NULL;
	bool had_id = req.id != NULL;
	int op = req.op;
	bool msg_ok = valid_message(err.message, sizeof(err.message));
	bool field_empty = strnlen(err.field, sizeof(err.field)) == 0;
	proto_request_finish(&req);

	if (rc >= 0 || err.code != code) {
		free(id);
		fail_msg("%.200s: rc %d code %d, want a failure with code %d", frame, rc, err.code,
		         code);
	}
	if (want_id && (!id || strcmp(id, want_id) != 0)) {
		free(id);
		fail_msg("%.200s: id not set to '%s'", frame, want_id);
	}
	if (!want_id && had_id) {
		free(id);
		fail_msg("%.200s: id set on an unreadable id", frame);
	}
	free(id);
	assert_true(op < 0);
	assert_true(msg_ok);
	assert_true(field_empty);
}

void expect_request_error(const char *frame, int code, const char *want_id)
{
	expect_request_error_len(frame, strlen(frame), code, want_id);
}

char *members(size_t n, bool array)
{
	struct sb b = {0};
	sb_puts(&b, array ? "[" : "{");
	for (size_t i = 0; i < n; i++) {
		if (array)
			sb_printf(&b, "%s%zu", i ? "," : "", i);
		else
			sb_printf(&b, "%s\"k%zu\":%zu", i ? "," : "", i, i);
	}
	sb_puts(&b, array ? "]" : "}");
	return sb_take(&b);
}
