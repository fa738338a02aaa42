/*
 * test-proto.c - unit tests of the wire protocol module (proto/proto.c).
 *
 * Covers the framer, the byte and structure checks, request and reply
 * decoding, the encoders and the strict field codecs, against the rules in
 * proto/PROTOCOL.md and proto/proto.h. Tests release what they allocated
 * before asserting wherever a failure is plausible, so that a failing test
 * does not also show up as a leak under ASan or valgrind.
 */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proto.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* ---- helpers -------------------------------------------------------------- */

/* A growable NUL-terminated string. */
struct sb {
	char *p;
	size_t len;
	size_t cap;
};

static void sb_add(struct sb *b, const char *s, size_t n)
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

static void sb_puts(struct sb *b, const char *s)
{
	sb_add(b, s, strlen(s));
}

static void sb_rep(struct sb *b, const char *s, size_t times)
{
	for (size_t i = 0; i < times; i++)
		sb_puts(b, s);
}

static __attribute__((format(printf, 2, 3))) void sb_printf(struct sb *b, const char *fmt, ...)
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
static char *sb_take(struct sb *b)
{
	if (!b->p)
		sb_add(b, "", 0);
	char *p = b->p;
	memset(b, 0, sizeof(*b));
	return p;
}

/* n copies of c, NUL-terminated. */
static char *repeat(char c, size_t n)
{
	char *s = malloc(n + 1);
	assert_non_null(s);
	memset(s, c, n);
	s[n] = '\0';
	return s;
}

/* proto_json_parse's return code for a NUL-terminated frame; frees the tree. */
static int json_rc(const char *frame)
{
	cJSON *root = (cJSON *)1;
	int rc = proto_json_parse(frame, strlen(frame), PROTO_MAX_KEYS, &root);
	bool out_ok = rc == 0 ? root != NULL : root == NULL;
	cJSON_Delete(rc == 0 ? root : NULL);
	if (!out_ok)
		fail_msg("%s: *out is %s after rc %d", frame, rc ? "set" : "NULL", rc);
	return rc;
}

static int json_rc_len(const char *frame, size_t len)
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
static cJSON *parse_obj(const char *text)
{
	cJSON *root = NULL;
	int rc = proto_json_parse(text, strlen(text), PROTO_MAX_KEYS, &root);
	if (rc != 0)
		fail_msg("fixture %s: rc %d", text, rc);
	assert_true(cJSON_IsObject(root));
	return root;
}

/* Nested containers: depth levels, the top level counting as 1. */
static char *nest(size_t depth, bool objects)
{
	struct sb b = {0};
	for (size_t i = 1; i < depth; i++)
		sb_puts(&b, objects ? "{\"a\":" : "[");
	sb_puts(&b, objects ? "{}" : "[]");
	for (size_t i = 1; i < depth; i++)
		sb_puts(&b, objects ? "}" : "]");
	return sb_take(&b);
}

/*
 * A message is usable in a reply when it is set, terminated, non-empty and,
 * once escaped as a JSON string, passes the frame check (valid UTF-8: control
 * characters are escaped by the encoder, invalid bytes are not).
 */
static bool valid_message(const char *m, size_t size)
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
static void expect_request_error_len(const char *frame, size_t len, int code, const char *want_id)
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

static void expect_request_error(const char *frame, int code, const char *want_id)
{
	expect_request_error_len(frame, strlen(frame), code, want_id);
}

/* Collects every complete frame; returns the last proto_framer_next result. */
static int drain(struct proto_framer *f, char **frames, size_t max, size_t *count)
{
	for (;;) {
		char *frame = NULL;
		size_t len = 0;
		int rc = proto_framer_next(f, &frame, &len);
		if (rc <= 0)
			return rc;
		assert_true(*count < max);
		assert_non_null(frame);
		assert_int_equal(frame[len], '\0');
		assert_int_equal(strlen(frame), len);
		frames[(*count)++] = strdup(frame);
	}
}

static void free_frames(char **frames, size_t count)
{
	for (size_t i = 0; i < count; i++)
		free(frames[i]);
}

/* ---- framer --------------------------------------------------------------- */

static void test_framer_empty(void **state)
{
	(void)state;
	struct proto_framer f;
	char *frame = NULL;
	size_t len = 0;
	proto_framer_init(&f, PROTO_MAX_FRAME);
	assert_int_equal(proto_framer_pending(&f), 0);
	assert_int_equal(proto_framer_next(&f, &frame, &len), 0);
	assert_int_equal(proto_framer_push(&f, "", 0), 0);
	assert_int_equal(proto_framer_next(&f, &frame, &len), 0);
	assert_int_equal(proto_framer_pending(&f), 0);
	proto_framer_finish(&f);
	assert_null(f.buf);
	assert_int_equal(f.len, 0);
	assert_int_equal(f.cap, 0);
	/* finish is safe on an unused framer and twice in a row. */
	proto_framer_finish(&f);
}

static void test_framer_many_frames_one_push(void **state)
{
	(void)state;
	static const char stream[] = "{\"id\":\"1\",\"method\":\"status\"}\n"
	                             "{\"id\":\"2\",\"method\":\"stats\"}\n"
	                             "[]\n"
	                             "x\n"
	                             "{\"id\":\"3\"";
	static const char *const want[] = {"{\"id\":\"1\",\"method\":\"status\"}",
	                                   "{\"id\":\"2\",\"method\":\"stats\"}", "[]", "x"};
	struct proto_framer f;
	char *frames[8];
	size_t count = 0;
	proto_framer_init(&f, PROTO_MAX_FRAME);
	assert_int_equal(proto_framer_push(&f, stream, strlen(stream)), 0);
	assert_int_equal(drain(&f, frames, ARRAY_SIZE(frames), &count), 0);
	assert_int_equal(count, ARRAY_SIZE(want));
	for (size_t i = 0; i < count; i++)
		assert_string_equal(frames[i], want[i]);
	free_frames(frames, count);
	count = 0;
	/* The incomplete tail is kept and completed by the next push. */
	assert_int_equal(proto_framer_pending(&f), strlen("{\"id\":\"3\""));
	assert_int_equal(proto_framer_push(&f, "}\n", 2), 0);
	assert_int_equal(drain(&f, frames, ARRAY_SIZE(frames), &count), 0);
	assert_int_equal(count, 1);
	assert_string_equal(frames[0], "{\"id\":\"3\"}");
	free_frames(frames, count);
	assert_int_equal(proto_framer_pending(&f), 0);
	proto_framer_finish(&f);
}

static void test_framer_one_byte_at_a_time(void **state)
{
	(void)state;
	static const char stream[] =
	    "{\"id\":\"1\",\"method\":\"hello\",\"params\":{\"versions\":[1]}}\n"
	    "{\"id\":\"2\",\"method\":\"register\",\"params\":{\"name\":\"s\xc3\xa9\"}}\n";
	const size_t total = strlen(stream);
	struct proto_framer f;
	char *frames[4];
	size_t count = 0;
	proto_framer_init(&f, PROTO_MAX_FRAME);
	size_t consumed = 0;
	for (size_t i = 0; i < total; i++) {
		assert_int_equal(proto_framer_push(&f, stream + i, 1), 0);
		size_t before = count;
		assert_int_equal(drain(&f, frames, ARRAY_SIZE(frames), &count), 0);
		/* A frame appears exactly when its newline arrives. */
		bool at_nl = stream[i] == '\n';
		assert_int_equal(count - before, at_nl ? 1 : 0);
		if (at_nl)
			consumed = i + 1;
		assert_int_equal(proto_framer_pending(&f), i + 1 - consumed);
	}
	assert_int_equal(count, 2);
	assert_string_equal(frames[0],
	                    "{\"id\":\"1\",\"method\":\"hello\",\"params\":{\"versions\":[1]}}");
	assert_string_equal(
	    frames[1],
	    "{\"id\":\"2\",\"method\":\"register\",\"params\":{\"name\":\"s\xc3\xa9\"}}");
	free_frames(frames, count);
	proto_framer_finish(&f);
}

/* Every way of cutting a stream into three pushes yields the same frames. */
static void test_framer_split_everywhere(void **state)
{
	(void)state;
	static const char stream[] = "{\"a\":1}\n\n  \r\n{\"b\":[1,2]}\r\n\t\n[\"\\n\"]\n";
	static const char *const want[] = {"{\"a\":1}", "{\"b\":[1,2]}\r", "[\"\\n\"]"};
	const size_t total = strlen(stream);
	for (size_t i = 0; i <= total; i++) {
		for (size_t j = i; j <= total; j++) {
			struct proto_framer f;
			char *frames[8];
			size_t count = 0;
			proto_framer_init(&f, PROTO_MAX_FRAME);
			assert_int_equal(proto_framer_push(&f, stream, i), 0);
			assert_int_equal(drain(&f, frames, ARRAY_SIZE(frames), &count), 0);
			assert_int_equal(proto_framer_push(&f, stream + i, j - i), 0);
			assert_int_equal(drain(&f, frames, ARRAY_SIZE(frames), &count), 0);
			assert_int_equal(proto_framer_push(&f, stream + j, total - j), 0);
			assert_int_equal(drain(&f, frames, ARRAY_SIZE(frames), &count), 0);
			assert_int_equal(count, ARRAY_SIZE(want));
			for (size_t k = 0; k < count; k++)
				assert_string_equal(frames[k], want[k]);
			free_frames(frames, count);
			assert_int_equal(proto_framer_pending(&f), 0);
			proto_framer_finish(&f);
		}
	}
}

static void test_framer_split_at_newline(void **state)
{
	(void)state;
	struct proto_framer f;
	char *frame = NULL;
	size_t len = 0;
	proto_framer_init(&f, PROTO_MAX_FRAME);
	/* Cut just before the delimiter: nothing until it arrives. */
	assert_int_equal(proto_framer_push(&f, "{\"a\":1}", 7), 0);
	assert_int_equal(proto_framer_next(&f, &frame, &len), 0);
	assert_int_equal(proto_framer_pending(&f), 7);
	assert_int_equal(proto_framer_push(&f, "\n{\"b\":2}", 8), 0);
	assert_int_equal(proto_framer_next(&f, &frame, &len), 1);
	assert_int_equal(len, 7);
	assert_string_equal(frame, "{\"a\":1}");
	assert_int_equal(proto_framer_next(&f, &frame, &len), 0);
	assert_int_equal(proto_framer_pending(&f), 7);
	/* Cut just after the delimiter. */
	assert_int_equal(proto_framer_push(&f, "\n", 1), 0);
	assert_int_equal(proto_framer_next(&f, &frame, &len), 1);
	assert_string_equal(frame, "{\"b\":2}");
	assert_int_equal(proto_framer_next(&f, &frame, &len), 0);
	assert_int_equal(proto_framer_pending(&f), 0);
	assert_int_equal(proto_framer_push(&f, "[]\n", 3), 0);
	assert_int_equal(proto_framer_next(&f, &frame, &len), 1);
	assert_int_equal(len, 2);
	assert_string_equal(frame, "[]");
	assert_int_equal(proto_framer_next(&f, &frame, &len), 0);
	proto_framer_finish(&f);
}

static void test_framer_blank_lines(void **state)
{
	(void)state;
	static const char stream[] = "\n\n   \n\t\r\n\r\n{}\n \t \n[1]\r\n\n \r";
	struct proto_framer f;
	char *frames[8];
	size_t count = 0;
	proto_framer_init(&f, PROTO_MAX_FRAME);
	assert_int_equal(proto_framer_push(&f, stream, strlen(stream)), 0);
	assert_int_equal(drain(&f, frames, ARRAY_SIZE(frames), &count), 0);
	assert_int_equal(count, 2);
	assert_string_equal(frames[0], "{}");
	/* Only the '\n' is removed: a CRLF client's '\r' stays in the frame. */
	assert_string_equal(frames[1], "[1]\r");
	free_frames(frames, count);
	count = 0;
	/* The unterminated blank tail is pending, not a frame. */
	assert_int_equal(proto_framer_pending(&f), 2);
	assert_int_equal(proto_framer_push(&f, "\n", 1), 0);
	assert_int_equal(drain(&f, frames, ARRAY_SIZE(frames), &count), 0);
	assert_int_equal(count, 0);
	assert_int_equal(proto_framer_pending(&f), 0);
	/* Blanks around content are kept: the line is not blank. */
	assert_int_equal(proto_framer_push(&f, " {} \n\v\n", 7), 0);
	assert_int_equal(drain(&f, frames, ARRAY_SIZE(frames), &count), 0);
	assert_int_equal(count, 2);
	assert_string_equal(frames[0], " {} ");
	/* Only space, tab and '\r' are blanks. */
	assert_string_equal(frames[1], "\v");
	free_frames(frames, count);
	proto_framer_finish(&f);
}

static void test_framer_max_frame_exact(void **state)
{
	(void)state;
	char *data = repeat('a', PROTO_MAX_FRAME);
	data[PROTO_MAX_FRAME - 1] = '\n';
	struct proto_framer f;
	char *frame = NULL;
	size_t len = 0;

	/* In one push. */
	proto_framer_init(&f, PROTO_MAX_FRAME);
	assert_int_equal(proto_framer_push(&f, data, PROTO_MAX_FRAME), 0);
	assert_int_equal(proto_framer_next(&f, &frame, &len), 1);
	assert_int_equal(len, PROTO_MAX_FRAME - 1);
	assert_int_equal(frame[0], 'a');
	assert_int_equal(frame[len - 1], 'a');
	assert_int_equal(frame[len], '\0');
	assert_int_equal(proto_framer_next(&f, &frame, &len), 0);
	assert_int_equal(proto_framer_pending(&f), 0);
	proto_framer_finish(&f);

	/* One byte at a time: PROTO_MAX_FRAME - 1 bytes without a newline are
	 * not yet an error. */
	proto_framer_init(&f, PROTO_MAX_FRAME);
	for (size_t i = 0; i < PROTO_MAX_FRAME; i++) {
		assert_int_equal(proto_framer_push(&f, data + i, 1), 0);
		int rc = proto_framer_next(&f, &frame, &len);
		if (rc != (i == PROTO_MAX_FRAME - 1 ? 1 : 0))
			fail_msg("after %zu bytes: rc %d", i + 1, rc);
	}
	assert_int_equal(len, PROTO_MAX_FRAME - 1);
	proto_framer_finish(&f);
	free(data);
}

static void test_framer_max_frame_plus_one(void **state)
{
	(void)state;
	char *data = repeat('a', PROTO_MAX_FRAME + 1);
	data[PROTO_MAX_FRAME] = '\n';
	struct proto_framer f;
	char *frame = NULL;
	size_t len = 0;

	/* Newline present but one byte too far. */
	proto_framer_init(&f, PROTO_MAX_FRAME);
	assert_int_equal(proto_framer_push(&f, data, PROTO_MAX_FRAME + 1), 0);
	assert_int_equal(proto_framer_next(&f, &frame, &len), -E2BIG);
	proto_framer_finish(&f);

	/* Without the newline, PROTO_MAX_FRAME bytes already cannot become a
	 * frame: refused before the newline arrives. */
	proto_framer_init(&f, PROTO_MAX_FRAME);
	assert_int_equal(proto_framer_push(&f, data, PROTO_MAX_FRAME - 1), 0);
	assert_int_equal(proto_framer_next(&f, &frame, &len), 0);
	assert_int_equal(proto_framer_push(&f, data, 1), 0);
	assert_int_equal(proto_framer_next(&f, &frame, &len), -E2BIG);
	proto_framer_finish(&f);

	/* A good frame before the oversized one is still delivered first. */
	proto_framer_init(&f, PROTO_MAX_FRAME);
	assert_int_equal(proto_framer_push(&f, "{}\n", 3), 0);
	assert_int_equal(proto_framer_push(&f, data, PROTO_MAX_FRAME + 1), 0);
	assert_int_equal(proto_framer_next(&f, &frame, &len), 1);
	assert_string_equal(frame, "{}");
	assert_int_equal(proto_framer_next(&f, &frame, &len), -E2BIG);
	proto_framer_finish(&f);
	free(data);
}

static void test_framer_no_newline_past_cap(void **state)
{
	(void)state;
	char *data = repeat('x', 100000);
	struct proto_framer f;
	char *frame = NULL;
	size_t len = 0;
	proto_framer_init(&f, PROTO_MAX_FRAME);
	assert_int_equal(proto_framer_push(&f, data, 40000), 0);
	assert_int_equal(proto_framer_next(&f, &frame, &len), 0);
	assert_int_equal(proto_framer_pending(&f), 40000);
	assert_int_equal(proto_framer_push(&f, data, 40000), 0);
	assert_int_equal(proto_framer_next(&f, &frame, &len), -E2BIG);
	/* It stays an error: the stream cannot be resynchronised. */
	assert_int_equal(proto_framer_push(&f, data, 100000), 0);
	assert_int_equal(proto_framer_next(&f, &frame, &len), -E2BIG);
	assert_int_equal(proto_framer_next(&f, &frame, &len), -E2BIG);
	assert_true(proto_framer_pending(&f) >= PROTO_MAX_FRAME);
	proto_framer_finish(&f);

	/* Blanks count too: a huge blank line is not silently skipped. */
	memset(data, ' ', PROTO_MAX_FRAME);
	proto_framer_init(&f, PROTO_MAX_FRAME);
	assert_int_equal(proto_framer_push(&f, data, PROTO_MAX_FRAME), 0);
	assert_int_equal(proto_framer_next(&f, &frame, &len), -E2BIG);
	proto_framer_finish(&f);
	free(data);
}

static void test_framer_pending(void **state)
{
	(void)state;
	struct proto_framer f;
	char *frame = NULL;
	size_t len = 0;
	proto_framer_init(&f, PROTO_MAX_FRAME);
	assert_int_equal(proto_framer_push(&f, "abc", 3), 0);
	assert_int_equal(proto_framer_pending(&f), 3);
	assert_int_equal(proto_framer_next(&f, &frame, &len), 0);
	assert_int_equal(proto_framer_pending(&f), 3);
	assert_int_equal(proto_framer_push(&f, "d\nef", 4), 0);
	assert_int_equal(proto_framer_pending(&f), 7);
	assert_int_equal(proto_framer_next(&f, &frame, &len), 1);
	assert_string_equal(frame, "abcd");
	assert_int_equal(proto_framer_pending(&f), 2);
	assert_int_equal(proto_framer_push(&f, "\n\n\n", 3), 0);
	assert_int_equal(proto_framer_next(&f, &frame, &len), 1);
	assert_string_equal(frame, "ef");
	assert_int_equal(proto_framer_pending(&f), 2);
	assert_int_equal(proto_framer_next(&f, &frame, &len), 0);
	assert_int_equal(proto_framer_pending(&f), 0);
	proto_framer_finish(&f);
}

static void test_framer_reuse(void **state)
{
	(void)state;
	enum { FRAMES = 100000 };
	struct proto_framer f;
	char *frame = NULL;
	size_t len = 0, max_cap = 0;
	char want[64];

	/* One frame per push, consumed at once. */
	proto_framer_init(&f, PROTO_MAX_FRAME);
	for (int i = 0; i < FRAMES; i++) {
		int n = snprintf(want, sizeof(want), "{\"id\":\"%d\",\"method\":\"free\"}\n", i);
		assert_int_equal(proto_framer_push(&f, want, (size_t)n), 0);
		assert_int_equal(proto_framer_next(&f, &frame, &len), 1);
		assert_int_equal(len, (size_t)n - 1);
		assert_memory_equal(frame, want, len);
		assert_int_equal(proto_framer_next(&f, &frame, &len), 0);
		if (f.cap > max_cap)
			max_cap = f.cap;
	}
	assert_int_equal(proto_framer_pending(&f), 0);
	assert_true(max_cap <= 8192);
	proto_framer_finish(&f);

	/* A continuous stream in 7-byte reads: frames straddle pushes. */
	proto_framer_init(&f, PROTO_MAX_FRAME);
	max_cap = 0;
	int next_want = 0;
	char buf[128];
	size_t have = 0;
	for (int i = 0; i < FRAMES; i++) {
		have += (size_t)snprintf(buf + have, sizeof(buf) - have, "{\"id\":\"%d\"}\n", i);
		size_t off = 0;
		while (have - off >= 7 || (i == FRAMES - 1 && off < have)) {
			size_t n = have - off < 7 ? have - off : 7;
			assert_int_equal(proto_framer_push(&f, buf + off, n), 0);
			off += n;
			int rc;
			while ((rc = proto_framer_next(&f, &frame, &len)) == 1) {
				int m =
				    snprintf(want, sizeof(want), "{\"id\":\"%d\"}", next_want++);
				assert_int_equal(len, (size_t)m);
				assert_string_equal(frame, want);
			}
			assert_int_equal(rc, 0);
			if (f.cap > max_cap)
				max_cap = f.cap;
		}
		memmove(buf, buf + off, have - off);
		have -= off;
	}
	assert_int_equal(next_want, FRAMES);
	assert_int_equal(proto_framer_pending(&f), 0);
	assert_true(max_cap <= 8192);
	proto_framer_finish(&f);
}

/* ---- byte checks ---------------------------------------------------------- */

static void test_check_raw_nul(void **state)
{
	(void)state;
	static const char mid[] = "{\"a\":\"x\0y\"}";
	static const char key[] = "{\"a\0b\":1}";
	static const char between[] = "{\"a\":1,\0\"b\":2}";
	static const char end[] = "{}\0";
	assert_int_equal(proto_frame_check(mid, sizeof(mid) - 1), -EILSEQ);
	assert_int_equal(json_rc_len(mid, sizeof(mid) - 1), -EILSEQ);
	assert_int_equal(json_rc_len(key, sizeof(key) - 1), -EILSEQ);
	assert_int_equal(json_rc_len(between, sizeof(between) - 1), -EILSEQ);
	assert_int_equal(json_rc_len(end, sizeof(end) - 1), -EILSEQ);
	assert_int_equal(json_rc_len("\0{}", 3), -EILSEQ);
	expect_request_error_len(mid, sizeof(mid) - 1, PROTO_E_PARSE, NULL);
	/* The same frames without the NUL are fine: the NUL is what fails. */
	assert_int_equal(json_rc("{\"a\":\"xy\"}"), 0);
	assert_int_equal(json_rc("{}"), 0);
}

static void test_check_control_bytes(void **state)
{
	(void)state;
	static const char bad[] = {0x01, 0x08, '\n', 0x0b, 0x0c, 0x1b, 0x1f};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		char frame[] = "{\"a\":\"x?y\"}";
		*strchr(frame, '?') = bad[i];
		assert_int_equal(proto_frame_check(frame, strlen(frame)), -EILSEQ);
		assert_int_equal(json_rc(frame), -EILSEQ);
		char between[] = "{\"a\":1,?\"b\":2}";
		*strchr(between, '?') = bad[i];
		assert_int_equal(json_rc(between), -EILSEQ);
	}
	/* Tab and '\r' are allowed as blanks. */
	assert_int_equal(proto_frame_check("{\t\"a\":\r1}", 9), 0);
	assert_int_equal(json_rc("{\t\"a\":\r1}\r"), 0);
	assert_int_equal(json_rc("{} \t\r"), 0);
	/* DEL is not a control byte for JSON. */
	assert_int_equal(json_rc("{\"a\":\"\x7f\"}"), 0);
}

static void test_check_escaped_nul(void **state)
{
	(void)state;
	static const char *const bad[] = {
	    "{\"a\":\"\\u0000\"}",
	    "{\"a\":\"x\\u0000\"}",
	    "{\"a\":\"\\u0000x\"}",
	    "{\"a\\u0000\":1}",
	    "{\"a\":\"\\u00000\"}",
	    "{\"a\":\"\\\\\\u0000\"}",            /* escaped backslash, then the escape */
	    "{\"a\":\"\\\"\\u0000\"}",            /* escaped quote does not end the string */
	    "{\"a\":\"\\\\\",\"b\":\"\\u0000\"}", /* string ending in a backslash */
	    "{\"a\":[\"\\u0000\"]}",
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		assert_int_equal(proto_frame_check(bad[i], strlen(bad[i])), -EILSEQ);
		assert_int_equal(json_rc(bad[i]), -EILSEQ);
		expect_request_error(bad[i], PROTO_E_PARSE, NULL);
	}

	/* "\\u0000" is a backslash followed by the text u0000: fine. */
	cJSON *root = parse_obj("{\"a\":\"\\\\u0000\",\"b\":\"\\\\\\\\u0000\"}");
	assert_string_equal(cJSON_GetObjectItemCaseSensitive(root, "a")->valuestring, "\\u0000");
	assert_string_equal(cJSON_GetObjectItemCaseSensitive(root, "b")->valuestring, "\\\\u0000");
	cJSON_Delete(root);

	/* Other escapes, including other control characters, are fine. */
	root = parse_obj("{\"a\":\"\\u0001\\u001f\\u0041\\n\"}");
	assert_string_equal(cJSON_GetObjectItemCaseSensitive(root, "a")->valuestring, "\x01\x1f"
	                                                                              "A\n");
	cJSON_Delete(root);
	assert_int_equal(json_rc("{\"a\":\"\\u0100\"}"), 0);

	/* The check looks at the frame's bytes only: no over-read at the end. */
	char *tail = malloc(5);
	assert_non_null(tail);
	memcpy(tail, "\"\\u00", 5);
	assert_int_equal(proto_frame_check(tail, 5), 0);
	free(tail);
}

struct bytes {
	const char *s;
	size_t n;
	const char *what;
};

#define B(lit, what)                                                                               \
	{                                                                                          \
		lit, sizeof(lit) - 1, what                                                         \
	}

static const struct bytes bad_utf8[] = {
    B("\x80", "lone continuation 0x80"),
    B("\xbf", "lone continuation 0xbf"),
    B("a\x80z", "continuation after ASCII"),
    B("\xc3", "truncated 2-byte"),
    B("\xc3z", "2-byte with ASCII second"),
    B("\xe2\x82", "truncated 3-byte"),
    B("\xf0\x9f\x98", "truncated 4-byte"),
    B("\xc0\x80", "overlong NUL"),
    B("\xc1\xbf", "overlong 2-byte"),
    B("\xe0\x80\x80", "overlong 3-byte"),
    B("\xe0\x9f\xbf", "overlong U+07FF"),
    B("\xf0\x80\x80\x80", "overlong 4-byte"),
    B("\xf0\x8f\xbf\xbf", "overlong U+FFFF"),
    B("\xed\xa0\x80", "surrogate U+D800"),
    B("\xed\xb0\x80", "surrogate U+DC00"),
    B("\xed\xbf\xbf", "surrogate U+DFFF"),
    B("\xed\xa0\xbd\xed\xb8\x80", "CESU-8 surrogate pair"),
    B("\xf4\x90\x80\x80", "U+110000"),
    B("\xf5\x80\x80\x80", "0xF5 lead"),
    B("\xf7\xbf\xbf\xbf", "0xF7 lead"),
    B("\xf8\x88\x80\x80\x80", "5-byte form"),
    B("\xfc\x84\x80\x80\x80\x80", "6-byte form"),
    B("\xfe", "0xFE"),
    B("\xff", "0xFF"),
    B("\xc3\xa9\xff", "0xFF after a valid character"),
};

static const struct bytes good_utf8[] = {
    B("\xc2\x80", "U+0080"),           B("\xc3\xa9", "U+00E9"),
    B("\xdf\xbf", "U+07FF"),           B("\xe0\xa0\x80", "U+0800"),
    B("\xe2\x82\xac", "U+20AC"),       B("\xed\x9f\xbf", "U+D7FF"),
    B("\xee\x80\x80", "U+E000"),       B("\xef\xbf\xbf", "U+FFFF"),
    B("\xf0\x90\x80\x80", "U+10000"),  B("\xf0\x9f\x98\x80", "U+1F600"),
    B("\xf4\x8f\xbf\xbf", "U+10FFFF"), B("caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac", "mixed"),
};

static void test_check_invalid_utf8(void **state)
{
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(bad_utf8); i++) {
		const struct bytes *t = &bad_utf8[i];
		/* Bare, in a string value, and in a key. */
		struct sb b = {0};
		sb_add(&b, t->s, t->n);
		char *bare = sb_take(&b);
		sb_puts(&b, "{\"id\":\"1\",\"method\":\"hello\",\"x\":\"");
		sb_add(&b, t->s, t->n);
		sb_puts(&b, "\"}");
		char *value = sb_take(&b);
		sb_puts(&b, "{\"");
		sb_add(&b, t->s, t->n);
		sb_puts(&b, "\":1}");
		char *key = sb_take(&b);

		int rc_bare = proto_frame_check(bare, t->n);
		int rc_value = proto_frame_check(value, strlen(value));
		int rc_json = json_rc(value);
		int rc_key = json_rc(key);
		free(bare);
		free(key);
		if (rc_bare != -EILSEQ || rc_value != -EILSEQ || rc_json != -EILSEQ ||
		    rc_key != -EILSEQ) {
			free(value);
			fail_msg("%s accepted: %d %d %d %d", t->what, rc_bare, rc_value, rc_json,
			         rc_key);
		}
		expect_request_error(value, PROTO_E_PARSE, NULL);
		free(value);
	}

	/* A truncated sequence at the very end of an exactly sized buffer:
	 * rejected without reading past it (ASan checks the bound). */
	char *tail = malloc(3);
	assert_non_null(tail);
	memcpy(tail, "a\xe2\x82", 3);
	assert_int_equal(proto_frame_check(tail, 3), -EILSEQ);
	assert_int_equal(proto_frame_check(tail, 2), -EILSEQ);
	assert_int_equal(proto_frame_check(tail, 1), 0);
	free(tail);
}

static void test_check_valid_utf8(void **state)
{
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(good_utf8); i++) {
		const struct bytes *t = &good_utf8[i];
		struct sb b = {0};
		sb_puts(&b, "{\"");
		sb_add(&b, t->s, t->n);
		sb_puts(&b, "\":\"");
		sb_add(&b, t->s, t->n);
		sb_puts(&b, "\"}");
		char *frame = sb_take(&b);
		char *exact = malloc(t->n);
		assert_non_null(exact);
		memcpy(exact, t->s, t->n);
		int rc_exact = proto_frame_check(exact, t->n);
		free(exact);
		cJSON *root = NULL;
		int rc = proto_json_parse(frame, strlen(frame), PROTO_MAX_KEYS, &root);
		free(frame);
		if (rc_exact != 0 || rc != 0) {
			cJSON_Delete(root);
			fail_msg("%s rejected: %d %d", t->what, rc_exact, rc);
		}
		/* Keys and values come through byte for byte. */
		const cJSON *item = root->child;
		bool same = item && strlen(item->string) == t->n &&
		            memcmp(item->string, t->s, t->n) == 0 && cJSON_IsString(item) &&
		            strlen(item->valuestring) == t->n &&
		            memcmp(item->valuestring, t->s, t->n) == 0;
		cJSON_Delete(root);
		if (!same)
			fail_msg("%s not preserved", t->what);
	}
}

static void test_json_lone_surrogate_escapes(void **state)
{
	(void)state;
	static const char *const bad[] = {
	    "{\"a\":\"\\ud800\"}",
	    "{\"a\":\"\\udc00\"}",
	    "{\"a\":\"\\udbff\"}",
	    "{\"a\":\"\\udfff\"}",
	    "{\"a\":\"\\ud800x\"}",
	    "{\"a\":\"\\ud800\\u0041\"}",
	    "{\"a\":\"\\ud800\\ud800\"}",
	    "{\"a\":\"\\udc00\\ud800\"}",
	    "{\"\\ud800\":1}",
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		/* Plain ASCII bytes: the byte check passes them, cJSON does not. */
		assert_int_equal(proto_frame_check(bad[i], strlen(bad[i])), 0);
		assert_int_equal(json_rc(bad[i]), -EBADMSG);
	}
	expect_request_error("{\"id\":\"1\",\"method\":\"hello\",\"x\":\"\\ud800\"}", PROTO_E_PARSE,
	                     NULL);
	/* A proper pair decodes to the 4-byte form. */
	cJSON *root = parse_obj("{\"a\":\"\\ud83d\\ude00\"}");
	assert_string_equal(root->child->valuestring, "\xf0\x9f\x98\x80");
	cJSON_Delete(root);
}

/* ---- JSON structure ------------------------------------------------------- */

static void test_json_truncated(void **state)
{
	(void)state;
	static const char *const bad[] = {
	    "{\"1\":1,", "{",          "{\"a\"",   "{\"a\":", "{\"a\":\"x", "[1,2",
	    "\"abc",     "{\"a\":tru", "{\"a\":1", "",        " ",          "\r\t",
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		assert_int_equal(json_rc(bad[i]), -EBADMSG);
		expect_request_error(bad[i], PROTO_E_PARSE, NULL);
	}
	/* Exactly sized, unterminated buffer: cJSON must not read past it. */
	static const char trunc[] = "{\"1\":1,";
	char *exact = malloc(sizeof(trunc) - 1);
	assert_non_null(exact);
	memcpy(exact, trunc, sizeof(trunc) - 1);
	int rc = json_rc_len(exact, sizeof(trunc) - 1);
	free(exact);
	assert_int_equal(rc, -EBADMSG);
	/* Only len bytes are parsed, whatever follows them. */
	assert_int_equal(json_rc_len("{\"a\":1}garbage", 7), 0);
	assert_int_equal(json_rc_len("{\"a\":1}", 6), -EBADMSG);
}

static void test_json_trailing_garbage(void **state)
{
	(void)state;
	static const char *const bad[] = {
	    "{}x", "{} x", "{}{}", "{}]", "{\"a\":1}}", "1 2", "{},", "[] []", "{}\"",
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		assert_int_equal(json_rc(bad[i]), -EBADMSG);
		expect_request_error(bad[i], PROTO_E_PARSE, NULL);
	}
	/* Trailing blanks are not garbage. */
	assert_int_equal(json_rc("{} "), 0);
	assert_int_equal(json_rc(" {}\r"), 0);
}

static void test_json_top_level_values(void **state)
{
	(void)state;
	/* The structure layer accepts any JSON value; requests need objects. */
	static const char *const values[] = {"[]",   "[1,\"a\"]", "\"s\"", "1",
	                                     "-1.5", "null",      "true"};
	for (size_t i = 0; i < ARRAY_SIZE(values); i++)
		assert_int_equal(json_rc(values[i]), 0);
	/* Not JSON at all, including lenient spellings. */
	static const char *const bad[] = {"NaN",         "nan",      "Infinity", "-Infinity",
	                                  "{\"a\":NaN}", "{'a':1}",  "{a:1}",    "{\"a\":1,}",
	                                  "[1,]",        "undefined"};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
		assert_int_equal(json_rc(bad[i]), -EBADMSG);
}

static void test_json_depth_limit(void **state)
{
	(void)state;
	for (size_t depth = 1; depth <= PROTO_MAX_DEPTH + 2; depth++) {
		int want = depth <= PROTO_MAX_DEPTH ? 0 : -E2BIG;
		char *o = nest(depth, true);
		char *a = nest(depth, false);
		int rc_o = json_rc(o);
		int rc_a = json_rc(a);
		free(o);
		free(a);
		if (rc_o != want || rc_a != want)
			fail_msg("depth %zu: objects %d arrays %d, want %d", depth, rc_o, rc_a,
			         want);
	}
	/* Mixed containers count alike. */
	assert_int_equal(json_rc("{\"a\":[{\"b\":[{\"c\":[{\"d\":[]}]}]}]}"), 0);
	assert_int_equal(json_rc("{\"a\":[{\"b\":[{\"c\":[{\"d\":[[]]}]}]}]}"), -E2BIG);
	/* Scalars inside the deepest allowed container are not a level. */
	assert_int_equal(json_rc("[[[[[[[[1,\"s\",null,true]]]]]]]]"), 0);
	assert_int_equal(json_rc("[[[[[[[{\"k\":1}]]]]]]]"), 0);
	/* An empty container at depth 9 is still too deep. */
	assert_int_equal(json_rc("[[[[[[[[{}]]]]]]]]"), -E2BIG);
	/* The whole tree is checked, not only first children. */
	assert_int_equal(json_rc("[1,[],{},[[[[[[[[]]]]]]]]]"), -E2BIG);
	assert_int_equal(json_rc("{\"a\":1,\"b\":{},\"c\":[[[[[[[{}]]]]]]]}"), -E2BIG);

	/* In a request: params is depth 2. */
	struct sb b = {0};
	char *inner = nest(PROTO_MAX_DEPTH - 1, true);
	sb_printf(&b, "{\"id\":\"1\",\"method\":\"hello\",\"params\":%s}", inner);
	free(inner);
	char *ok = sb_take(&b);
	struct proto_request req;
	struct proto_error err;
	int rc = proto_request_parse(ok, strlen(ok), &req, &err);
	proto_request_finish(&req);
	free(ok);
	assert_int_equal(rc, 0);
	inner = nest(PROTO_MAX_DEPTH, true);
	sb_printf(&b, "{\"id\":\"1\",\"method\":\"hello\",\"params\":%s}", inner);
	free(inner);
	char *deep = sb_take(&b);
	expect_request_error(deep, PROTO_E_INVALID_REQUEST, NULL);
	free(deep);
}

static char *deep_array(size_t depth, bool closed)
{
	struct sb b = {0};
	sb_rep(&b, "[", depth);
	if (closed)
		sb_rep(&b, "]", depth);
	return sb_take(&b);
}

/* Far too deep: must fail cleanly, without a crash or a stack overflow. */
static void test_json_deep_nesting_no_crash(void **state)
{
	(void)state;
	static const size_t depths[] = {1000, 1001, 10000, 100000};
	for (size_t i = 0; i < ARRAY_SIZE(depths); i++) {
		for (int closed = 0; closed < 2; closed++) {
			char *doc = deep_array(depths[i], closed);
			assert_true(json_rc(doc) < 0);
			free(doc);
		}
	}
	/* 10,000 nested objects fit in one frame. */
	struct sb b = {0};
	sb_rep(&b, "{\"a\":", 10000);
	sb_puts(&b, "1");
	sb_rep(&b, "}", 10000);
	char *objs = sb_take(&b);
	assert_true(strlen(objs) < PROTO_MAX_FRAME);
	assert_true(json_rc(objs) < 0);
	free(objs);
	/* As a request: an error reply can be built. */
	sb_puts(&b, "{\"id\":\"1\",\"method\":\"hello\",\"params\":{\"x\":");
	sb_rep(&b, "[", 10000);
	sb_rep(&b, "]", 10000);
	sb_puts(&b, "}}");
	char *frame = sb_take(&b);
	struct proto_request req;
	struct proto_error err;
	memset(&err, 0, sizeof(err));
	int rc = proto_request_parse(frame, strlen(frame), &req, &err);
	bool id_null = req.id == NULL;
	proto_request_finish(&req);
	free(frame);
	assert_true(rc < 0);
	assert_true(err.code == PROTO_E_PARSE || err.code == PROTO_E_INVALID_REQUEST);
	assert_true(valid_message(err.message, sizeof(err.message)));
	assert_true(id_null);
}

/*
 * PROTOCOL.md: nesting deeper than 8 is a structure limit, answered -32600;
 * proto.h: proto_json_parse returns -E2BIG for limits. That must hold however
 * deep the (well-formed) document is, not only up to cJSON's own limit.
 */
static void test_json_deep_nesting_is_limit_error(void **state)
{
	(void)state;
	static const size_t depths[] = {PROTO_MAX_DEPTH + 1, 1000, 1001, 10000};
	for (size_t i = 0; i < ARRAY_SIZE(depths); i++) {
		char *doc = deep_array(depths[i], true);
		int rc = json_rc(doc);
		free(doc);
		struct sb b = {0};
		sb_puts(&b, "{\"id\":\"1\",\"method\":\"hello\",\"params\":{\"x\":");
		sb_rep(&b, "[", depths[i]);
		sb_rep(&b, "]", depths[i]);
		sb_puts(&b, "}}");
		char *frame = sb_take(&b);
		struct proto_request req;
		struct proto_error err;
		memset(&err, 0, sizeof(err));
		proto_request_parse(frame, strlen(frame), &req, &err);
		proto_request_finish(&req);
		free(frame);
		if (rc != -E2BIG || err.code != PROTO_E_INVALID_REQUEST)
			fail_msg("depth %zu: proto_json_parse %d (want -E2BIG = %d); as params of "
			         "a request: code %d (want %d)",
			         depths[i], rc, -E2BIG, err.code, PROTO_E_INVALID_REQUEST);
	}
}

static char *members(size_t n, bool array)
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

static void test_json_member_limit(void **state)
{
	(void)state;
	for (size_t n = PROTO_MAX_KEYS - 1; n <= PROTO_MAX_KEYS + 1; n++) {
		int want = n <= PROTO_MAX_KEYS ? 0 : -E2BIG;
		char *o = members(n, false);
		char *a = members(n, true);
		int rc_o = json_rc(o);
		int rc_a = json_rc(a);
		/* Nested inside a request's params. */
		struct sb b = {0};
		sb_puts(&b, "{\"p\":{\"o\":");
		sb_puts(&b, o);
		sb_puts(&b, ",\"a\":");
		sb_puts(&b, a);
		sb_puts(&b, "}}");
		char *nested = sb_take(&b);
		int rc_n = json_rc(nested);
		free(nested);
		free(o);
		free(a);
		if (rc_o != want || rc_a != want || rc_n != want)
			fail_msg("%zu members: object %d array %d nested %d, want %d", n, rc_o,
			         rc_a, rc_n, want);
	}
	/* The limit is per container: many full containers are fine. */
	struct sb b = {0};
	sb_puts(&b, "[");
	for (int i = 0; i < PROTO_MAX_KEYS; i++) {
		char *a = members(PROTO_MAX_KEYS, true);
		sb_printf(&b, "%s", i ? "," : "");
		sb_puts(&b, a);
		free(a);
	}
	sb_puts(&b, "]");
	char *grid = sb_take(&b);
	assert_int_equal(json_rc(grid), 0);
	free(grid);

	/* A request with 65 top-level members is a limit error. */
	sb_puts(&b, "{\"id\":\"1\",\"method\":\"status\"");
	for (int i = 3; i <= PROTO_MAX_KEYS; i++)
		sb_printf(&b, ",\"x%d\":0", i);
	sb_puts(&b, "}");
	char *full = sb_take(&b);
	struct proto_request req;
	struct proto_error err;
	int rc = proto_request_parse(full, strlen(full), &req, &err);
	proto_request_finish(&req);
	free(full);
	assert_int_equal(rc, 0);
	sb_puts(&b, "{\"id\":\"1\",\"method\":\"status\"");
	for (int i = 3; i <= PROTO_MAX_KEYS + 1; i++)
		sb_printf(&b, ",\"x%d\":0", i);
	sb_puts(&b, "}");
	char *over = sb_take(&b);
	expect_request_error(over, PROTO_E_INVALID_REQUEST, NULL);
	free(over);
}

static void test_json_duplicate_keys(void **state)
{
	(void)state;
	static const char *const dups[] = {
	    "{\"a\":1,\"a\":2}",
	    "{\"a\":1,\"a\":1}",
	    "{\"a\":1,\"b\":2,\"a\":{}}",
	    "{\"p\":{\"x\":1,\"x\":2}}",
	    "{\"l\":[{\"k\":1},{\"k\":1,\"k\":2}]}",
	    "[{\"k\":1,\"k\":2}]",
	    "{\"a\":1,\"\\u0061\":2}", /* same key after unescaping */
	    "{\"\xc3\xa9\":1,\"\\u00e9\":2}",
	    "{\"\":1,\"\":2}",
	    "{\"a\":{\"b\":{\"c\":{\"d\":1,\"e\":2,\"d\":3}}}}",
	};
	for (size_t i = 0; i < ARRAY_SIZE(dups); i++) {
		if (json_rc(dups[i]) != -EEXIST)
			fail_msg("%s: duplicate not refused", dups[i]);
	}
	/* Different case, or the same key in different objects, is fine. */
	assert_int_equal(json_rc("{\"a\":1,\"A\":2}"), 0);
	assert_int_equal(json_rc("{\"a\":{\"a\":{\"a\":1}}}"), 0);
	assert_int_equal(json_rc("[{\"k\":1},{\"k\":1}]"), 0);
	assert_int_equal(json_rc("{\"ab\":1,\"a\":2,\"b\":3}"), 0);

	/* Last member duplicating the first of 64. */
	struct sb b = {0};
	sb_puts(&b, "{\"k0\":0");
	for (int i = 1; i < PROTO_MAX_KEYS - 1; i++)
		sb_printf(&b, ",\"k%d\":%d", i, i);
	sb_puts(&b, ",\"k0\":1}");
	char *last = sb_take(&b);
	assert_int_equal(json_rc(last), -EEXIST);
	free(last);

	/* In requests: a duplicate id, method or params member. */
	expect_request_error("{\"id\":\"1\",\"id\":\"2\",\"method\":\"hello\"}",
	                     PROTO_E_INVALID_REQUEST, NULL);
	expect_request_error("{\"id\":\"1\",\"method\":\"free\",\"method\":\"alloc\"}",
	                     PROTO_E_INVALID_REQUEST, NULL);
	expect_request_error(
	    "{\"id\":\"1\",\"method\":\"free\",\"params\":{\"id\":\"a\",\"id\":\"b\"}}",
	    PROTO_E_INVALID_REQUEST, NULL);
}

/* ---- requests ------------------------------------------------------------- */

static void test_op_table(void **state)
{
	(void)state;
	/* The wire-visible order of PROTOCOL.md. */
	static const char *const names[PROTO_OP_COUNT] = {
	    "hello",  "register", "unregister", "alloc",  "free",    "attach",
	    "detach", "mem_info", "stats",      "status", "clients", "devices",
	};
	for (int i = 0; i < PROTO_OP_COUNT; i++) {
		assert_non_null(proto_ops[i].name);
		assert_string_equal(proto_ops[i].name, names[i]);
		/* Only hello may come before hello. */
		assert_int_equal(!!(proto_ops[i].flags & PROTO_OPF_BEFORE_HELLO),
		                 i == PROTO_OP_HELLO);
	}
}

static void test_op_lookup(void **state)
{
	(void)state;
	for (int i = 0; i < PROTO_OP_COUNT; i++)
		assert_int_equal(proto_op_lookup(proto_ops[i].name), i);
	assert_int_equal(proto_op_lookup("alloc"), PROTO_OP_ALLOC);
	assert_int_equal(proto_op_lookup("mem_info"), PROTO_OP_MEM_INFO);
	static const char *const unknown[] = {
	    "",       "nope", "Hello",  "HELLO",    "Alloc",   "alloc ",
	    " alloc", "allo", "allocx", "mem-info", "memInfo", "hello\n",
	};
	for (size_t i = 0; i < ARRAY_SIZE(unknown); i++)
		assert_int_equal(proto_op_lookup(unknown[i]), -ENOENT);
}

static void test_request_every_op_round_trip(void **state)
{
	(void)state;
	struct sb stream = {0};
	for (int i = 0; i < PROTO_OP_COUNT; i++) {
		cJSON *params = cJSON_CreateObject();
		assert_non_null(params);
		assert_int_equal(proto_add_u64(params, "n", ((uint64_t)i + 1) << 40), 0);
		assert_int_equal(proto_add_id64(params, "instance", UINT64_C(0xabc) + (uint64_t)i),
		                 0);
		assert_non_null(cJSON_AddStringToObject(params, "tag", proto_ops[i].name));
		char id[16];
		snprintf(id, sizeof(id), "req-%d", i);
		size_t len = 0;
		char *frame = proto_encode_request(id, proto_ops[i].name, params, &len);
		assert_non_null(frame);
		assert_int_equal(len, strlen(frame));
		assert_int_equal(frame[len - 1], '\n');
		assert_null(memchr(frame, '\n', len - 1));
		sb_add(&stream, frame, len);

		struct proto_request req;
		struct proto_error err;
		assert_int_equal(proto_request_parse(frame, len - 1, &req, &err), 0);
		free(frame);
		assert_int_equal(req.op, i);
		assert_string_equal(req.id, id);
		assert_string_equal(req.method, proto_ops[i].name);
		assert_true(cJSON_IsObject(req.params));
		uint64_t n = 0, inst = 0;
		const char *tag = NULL;
		assert_int_equal(proto_get_u64(req.params, "n", 0, UINT64_MAX, &n), 0);
		assert_true(n == (((uint64_t)i + 1) << 40));
		assert_int_equal(proto_get_id64(req.params, "instance", &inst), 0);
		assert_true(inst == UINT64_C(0xabc) + (uint64_t)i);
		assert_int_equal(proto_get_string(req.params, "tag", PROTO_MAX_NAME, &tag), 0);
		assert_string_equal(tag, proto_ops[i].name);
		assert_int_equal(cJSON_GetArraySize(req.params), 3);
		proto_request_finish(&req);
		assert_null(req.root);
		assert_null(req.id);

		/* No params: encoded as {} and decoded as an empty object. */
		frame = proto_encode_request(id, proto_ops[i].name, NULL, &len);
		assert_non_null(frame);
		assert_int_equal(proto_request_parse(frame, len - 1, &req, &err), 0);
		free(frame);
		assert_int_equal(req.op, i);
		assert_true(cJSON_IsObject(req.params));
		assert_int_equal(cJSON_GetArraySize(req.params), 0);
		proto_request_finish(&req);
	}

	/* All of them pipelined through the framer in one push. */
	char *all = sb_take(&stream);
	struct proto_framer f;
	proto_framer_init(&f, PROTO_MAX_FRAME);
	assert_int_equal(proto_framer_push(&f, all, strlen(all)), 0);
	free(all);
	for (int i = 0; i < PROTO_OP_COUNT; i++) {
		char *frame = NULL;
		size_t len = 0;
		struct proto_request req;
		struct proto_error err;
		assert_int_equal(proto_framer_next(&f, &frame, &len), 1);
		assert_int_equal(proto_request_parse(frame, len, &req, &err), 0);
		assert_int_equal(req.op, i);
		proto_request_finish(&req);
	}
	char *frame = NULL;
	size_t len = 0;
	assert_int_equal(proto_framer_next(&f, &frame, &len), 0);
	proto_framer_finish(&f);
}

static void test_request_not_object(void **state)
{
	(void)state;
	static const char *const frames[] = {
	    "[]",        "[{\"id\":\"1\",\"method\":\"hello\"}]",
	    "\"hello\"", "1",
	    "0",         "-3.5",
	    "null",      "true",
	    "false",     "\"{\\\"id\\\":\\\"1\\\"}\"",
	};
	for (size_t i = 0; i < ARRAY_SIZE(frames); i++)
		expect_request_error(frames[i], PROTO_E_INVALID_REQUEST, NULL);
}

static void test_request_bad_id(void **state)
{
	(void)state;
	static const char *const frames[] = {
	    "{\"method\":\"hello\"}",
	    "{\"id\":1,\"method\":\"hello\"}",
	    "{\"id\":0,\"method\":\"hello\"}",
	    "{\"id\":null,\"method\":\"hello\"}",
	    "{\"id\":{},\"method\":\"hello\"}",
	    "{\"id\":{\"id\":\"1\"},\"method\":\"hello\"}",
	    "{\"id\":[],\"method\":\"hello\"}",
	    "{\"id\":[\"1\"],\"method\":\"hello\"}",
	    "{\"id\":true,\"method\":\"hello\"}",
	    "{\"id\":\"\",\"method\":\"hello\"}",
	    "{\"ID\":\"1\",\"method\":\"hello\"}",
	    "{\"Id\":\"1\",\"method\":\"hello\"}",
	    "{}",
	};
	for (size_t i = 0; i < ARRAY_SIZE(frames); i++)
		expect_request_error(frames[i], PROTO_E_INVALID_REQUEST, NULL);

	/* Length: 64 bytes is the most; bytes, not characters. */
	struct sb b = {0};
	char *id = repeat('x', PROTO_MAX_ID + 1);
	sb_printf(&b, "{\"id\":\"%s\",\"method\":\"hello\"}", id);
	char *frame = sb_take(&b);
	expect_request_error(frame, PROTO_E_INVALID_REQUEST, NULL);
	free(frame);
	id[PROTO_MAX_ID] = '\0';
	sb_printf(&b, "{\"id\":\"%s\",\"method\":\"hello\"}", id);
	frame = sb_take(&b);
	struct proto_request req;
	struct proto_error err;
	assert_int_equal(proto_request_parse(frame, strlen(frame), &req, &err), 0);
	assert_string_equal(req.id, id);
	assert_int_equal(req.op, PROTO_OP_HELLO);
	proto_request_finish(&req);
	free(frame);
	free(id);

	/* 32 two-byte characters = 64 bytes: fine; one more byte: too long. */
	sb_puts(&b, "{\"id\":\"");
	sb_rep(&b, "\xc3\xa9", 32);
	sb_puts(&b, "\",\"method\":\"hello\"}");
	frame = sb_take(&b);
	assert_int_equal(proto_request_parse(frame, strlen(frame), &req, &err), 0);
	assert_int_equal(strlen(req.id), 64);
	proto_request_finish(&req);
	free(frame);
	sb_puts(&b, "{\"id\":\"a");
	sb_rep(&b, "\xc3\xa9", 32);
	sb_puts(&b, "\",\"method\":\"hello\"}");
	frame = sb_take(&b);
	expect_request_error(frame, PROTO_E_INVALID_REQUEST, NULL);
	free(frame);

	/* The limit is on the decoded id: 64 escapes are 64 bytes. */
	sb_puts(&b, "{\"id\":\"");
	sb_rep(&b, "\\u0041", 64);
	sb_puts(&b, "\",\"method\":\"hello\"}");
	frame = sb_take(&b);
	assert_int_equal(proto_request_parse(frame, strlen(frame), &req, &err), 0);
	char *want = repeat('A', 64);
	assert_string_equal(req.id, want);
	free(want);
	proto_request_finish(&req);
	free(frame);

	/* A one-byte id is fine. */
	static const char one[] = "{\"id\":\"7\",\"method\":\"status\"}";
	assert_int_equal(proto_request_parse(one, strlen(one), &req, &err), 0);
	assert_string_equal(req.id, "7");
	proto_request_finish(&req);
}

static void test_request_huge_id(void **state)
{
	(void)state;
	enum { MB = 1024 * 1024 };
	char *id = repeat('7', MB);
	struct sb b = {0};
	sb_printf(&b, "{\"method\":\"hello\",\"id\":\"");
	sb_puts(&b, id);
	sb_puts(&b, "\"}\n");
	free(id);
	char *frame = sb_take(&b);
	size_t len = strlen(frame);

	/* The framer refuses it as a frame... */
	struct proto_framer f;
	char *out = NULL;
	size_t out_len = 0;
	proto_framer_init(&f, PROTO_MAX_FRAME);
	assert_int_equal(proto_framer_push(&f, frame, len), 0);
	assert_int_equal(proto_framer_next(&f, &out, &out_len), -E2BIG);
	proto_framer_finish(&f);

	/* ...and the parser, handed it directly, refuses the id. */
	expect_request_error_len(frame, len - 1, PROTO_E_INVALID_REQUEST, NULL);
	free(frame);
}

static void test_request_method_key(void **state)
{
	(void)state;
	/* Keys are case-sensitive: "Method" is not "method". */
	expect_request_error("{\"id\":\"1\",\"Method\":\"hello\"}", PROTO_E_INVALID_REQUEST, "1");
	expect_request_error("{\"id\":\"1\",\"METHOD\":\"hello\"}", PROTO_E_INVALID_REQUEST, "1");
	expect_request_error("{\"id\":\"1\"}", PROTO_E_INVALID_REQUEST, "1");
	expect_request_error("{\"id\":\"1\",\"method\":1}", PROTO_E_INVALID_REQUEST, "1");
	expect_request_error("{\"id\":\"1\",\"method\":null}", PROTO_E_INVALID_REQUEST, "1");
	expect_request_error("{\"id\":\"1\",\"method\":[\"hello\"]}", PROTO_E_INVALID_REQUEST, "1");
	expect_request_error("{\"id\":\"1\",\"method\":{}}", PROTO_E_INVALID_REQUEST, "1");
	expect_request_error("{\"id\":\"1\",\"method\":true}", PROTO_E_INVALID_REQUEST, "1");
	/* Method names are case-sensitive too. */
	expect_request_error("{\"id\":\"1\",\"method\":\"Hello\"}", PROTO_E_METHOD, "1");
}

static void test_request_unknown_method(void **state)
{
	(void)state;
	static const char *const methods[] = {"nope",     "",         "ALLOC",  "alloc ",
	                                      "hello\\n", "mem-info", "\\u00e9"};
	for (size_t i = 0; i < ARRAY_SIZE(methods); i++) {
		struct sb b = {0};
		sb_printf(&b, "{\"id\":\"abc\",\"method\":\"%s\",\"params\":{}}", methods[i]);
		char *frame = sb_take(&b);
		expect_request_error(frame, PROTO_E_METHOD, "abc");
		free(frame);
	}
	struct proto_request req;
	struct proto_error err;
	static const char frame[] = "{\"id\":\"9\",\"method\":\"nope\"}";
	int rc = proto_request_parse(frame, strlen(frame), &req, &err);
	assert_true(rc < 0);
	/* The method is kept for the reply's data.method, and quoted. */
	assert_non_null(req.method);
	assert_string_equal(req.method, "nope");
	assert_non_null(strstr(err.message, "nope"));
	proto_request_finish(&req);
}

/* proto.h: "int op; enum proto_op, or -1". */
static void test_request_unknown_method_op(void **state)
{
	(void)state;
	struct proto_request req;
	struct proto_error err;
	static const char frame[] = "{\"id\":\"9\",\"method\":\"nope\"}";
	int rc = proto_request_parse(frame, strlen(frame), &req, &err);
	int op = req.op;
	proto_request_finish(&req);
	assert_true(rc < 0);
	assert_int_equal(err.code, PROTO_E_METHOD);
	assert_int_equal(op, -1);
}

/*
 * The error message quotes the unknown method, cut to 64 bytes. The message
 * becomes error.message in a reply frame, so it must stay valid UTF-8
 * whatever the method: a reply the client cannot parse is worse than none.
 */
static void test_request_unknown_method_message_utf8(void **state)
{
	(void)state;
	static const char *const chars[] = {"\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80"};
	for (size_t c = 0; c < ARRAY_SIZE(chars); c++) {
		for (size_t prefix = 60; prefix < 64; prefix++) {
			struct sb b = {0};
			char *pad = repeat('m', prefix);
			sb_printf(&b, "{\"id\":\"1\",\"method\":\"%s%s%s\"}", pad, chars[c],
			          chars[c]);
			free(pad);
			char *frame = sb_take(&b);
			struct proto_request req;
			struct proto_error err;
			int rc = proto_request_parse(frame, strlen(frame), &req, &err);
			free(frame);
			bool msg_ok = valid_message(err.message, sizeof(err.message));
			size_t len = 0;
			char *reply = proto_encode_error(req.id, err.code, err.message, NULL, &len);
			proto_request_finish(&req);
			struct proto_reply rep;
			int rrc = reply ? proto_reply_parse(reply, len - 1, &rep) : -ENOMEM;
			if (rrc == 0)
				proto_reply_finish(&rep);
			free(reply);
			assert_true(rc < 0);
			assert_int_equal(err.code, PROTO_E_METHOD);
			if (!msg_ok || rrc != 0)
				fail_msg("method of %zu ASCII bytes + %zu-byte characters: message "
				         "%s, reply parse %d",
				         prefix, strlen(chars[c]),
				         msg_ok ? "valid" : "invalid UTF-8", rrc);
		}
	}
}

static void test_request_params(void **state)
{
	(void)state;
	static const char *const bad[] = {"[]", "[1]", "\"x\"", "1", "null", "true", "false"};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		struct sb b = {0};
		sb_printf(&b, "{\"id\":\"p\",\"method\":\"alloc\",\"params\":%s}", bad[i]);
		char *frame = sb_take(&b);
		expect_request_error(frame, PROTO_E_INVALID_REQUEST, "p");
		free(frame);
	}
	/* Absent: an empty object stands in, usable with the cJSON getters. */
	struct proto_request req;
	struct proto_error err;
	static const char none[] = "{\"id\":\"1\",\"method\":\"status\"}";
	assert_int_equal(proto_request_parse(none, strlen(none), &req, &err), 0);
	assert_int_equal(req.op, PROTO_OP_STATUS);
	assert_non_null(req.params);
	assert_true(cJSON_IsObject(req.params));
	assert_null(cJSON_GetObjectItemCaseSensitive(req.params, "x"));
	assert_int_equal(cJSON_GetArraySize(req.params), 0);
	uint64_t u = 0;
	bool flag = false;
	assert_int_equal(proto_get_u64(req.params, "size", 0, UINT64_MAX, &u), -ENOENT);
	assert_int_equal(proto_get_bool(req.params, "x", &flag), -ENOENT);
	proto_request_finish(&req);

	/* Unknown members of the request and of params are ignored. */
	static const char extra[] = "{\"jsonrpc\":\"2.0\",\"id\":\"1\",\"method\":\"free\","
	                            "\"params\":{\"id\":\"00000000000000aa\",\"junk\":[1,{}]},"
	                            "\"zzz\":null}";
	assert_int_equal(proto_request_parse(extra, strlen(extra), &req, &err), 0);
	assert_int_equal(req.op, PROTO_OP_FREE);
	assert_int_equal(proto_get_id64(req.params, "id", &u), 0);
	assert_true(u == 0xaa);
	proto_request_finish(&req);
	/* Finishing twice is harmless. */
	proto_request_finish(&req);
	assert_null(req.root);
	assert_int_equal(req.op, -1);
}

/* Each parse-layer failure maps to its documented code, and rc is kept. */
static void test_request_error_mapping(void **state)
{
	(void)state;
	static const struct {
		const char *frame;
		int rc;
		int code;
	} cases[] = {
	    {"{\"id\":\"1\",\"method\":\"hello\",\"x\":\"\xff\"}", -EILSEQ, PROTO_E_PARSE},
	    {"{\"id\":\"1\",\"method\":\"hello\",\"x\":\"\\u0000\"}", -EILSEQ, PROTO_E_PARSE},
	    {"{\"id\":\"1\",\"method\":\"hello\"", -EBADMSG, PROTO_E_PARSE},
	    {"{\"id\":\"1\",\"method\":\"hello\"}x", -EBADMSG, PROTO_E_PARSE},
	    {"{\"id\":\"1\",\"method\":\"hello\",\"x\":[[[[[[[[]]]]]]]]}", -E2BIG,
	     PROTO_E_INVALID_REQUEST},
	    {"{\"id\":\"1\",\"method\":\"hello\",\"id\":\"2\"}", -EEXIST, PROTO_E_INVALID_REQUEST},
	};
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct proto_request req;
		struct proto_error err;
		memset(&err, 0x5a, sizeof(err));
		int rc = proto_request_parse(cases[i].frame, strlen(cases[i].frame), &req, &err);
		bool root_null = req.root == NULL, id_null = req.id == NULL;
		proto_request_finish(&req);
		assert_int_equal(rc, cases[i].rc);
		assert_int_equal(err.code, cases[i].code);
		assert_true(valid_message(err.message, sizeof(err.message)));
		assert_string_equal(err.field, "");
		assert_true(root_null);
		assert_true(id_null);
	}
}

/* ---- replies -------------------------------------------------------------- */

static void test_reply_result(void **state)
{
	(void)state;
	struct proto_reply rep;
	static const char ok[] = "{\"id\":\"7\",\"result\":{\"a\":\"1\"}}";
	assert_int_equal(proto_reply_parse(ok, strlen(ok), &rep), 0);
	assert_string_equal(rep.id, "7");
	assert_true(cJSON_IsObject(rep.result));
	assert_string_equal(cJSON_GetObjectItemCaseSensitive(rep.result, "a")->valuestring, "1");
	assert_int_equal(rep.code, 0);
	assert_null(rep.event);
	assert_null(rep.message);
	assert_null(rep.data);
	proto_reply_finish(&rep);
	assert_null(rep.root);
	assert_null(rep.id);

	static const char null_id[] = "{\"id\":null,\"result\":{}}";
	assert_int_equal(proto_reply_parse(null_id, strlen(null_id), &rep), 0);
	assert_null(rep.id);
	assert_true(cJSON_IsObject(rep.result));
	assert_int_equal(rep.code, 0);
	proto_reply_finish(&rep);
}

static void test_reply_error(void **state)
{
	(void)state;
	struct proto_reply rep;
	static const char full[] = "{\"id\":\"4\",\"error\":{\"code\":-32602,\"message\":\"bad "
	                           "size\",\"data\":{\"field\":\"size\"}}}";
	assert_int_equal(proto_reply_parse(full, strlen(full), &rep), 0);
	assert_string_equal(rep.id, "4");
	assert_null(rep.result);
	assert_null(rep.event);
	assert_int_equal(rep.code, PROTO_E_PARAMS);
	assert_string_equal(rep.message, "bad size");
	assert_non_null(rep.data);
	assert_string_equal(cJSON_GetObjectItemCaseSensitive(rep.data, "field")->valuestring,
	                    "size");
	proto_reply_finish(&rep);

	static const char bare[] = "{\"id\":null,\"error\":{\"code\":-32700,\"message\":\"\"}}";
	assert_int_equal(proto_reply_parse(bare, strlen(bare), &rep), 0);
	assert_null(rep.id);
	assert_int_equal(rep.code, PROTO_E_PARSE);
	assert_string_equal(rep.message, "");
	assert_null(rep.data);
	proto_reply_finish(&rep);

	/* A positive code is still an error code. */
	static const char pos[] = "{\"id\":\"1\",\"error\":{\"code\":5,\"message\":\"m\"}}";
	assert_int_equal(proto_reply_parse(pos, strlen(pos), &rep), 0);
	assert_int_equal(rep.code, 5);
	proto_reply_finish(&rep);
}

static void test_reply_event(void **state)
{
	(void)state;
	struct proto_reply rep;
	static const char ev[] = "{\"event\":\"shutdown\",\"data\":{\"reason\":\"SIGTERM\"}}";
	assert_int_equal(proto_reply_parse(ev, strlen(ev), &rep), 0);
	assert_string_equal(rep.event, "shutdown");
	assert_null(rep.id);
	assert_null(rep.result);
	assert_int_equal(rep.code, 0);
	assert_non_null(rep.data);
	assert_string_equal(cJSON_GetObjectItemCaseSensitive(rep.data, "reason")->valuestring,
	                    "SIGTERM");
	proto_reply_finish(&rep);

	static const char no_data[] = "{\"event\":\"invalidate\"}";
	assert_int_equal(proto_reply_parse(no_data, strlen(no_data), &rep), 0);
	assert_string_equal(rep.event, "invalidate");
	assert_null(rep.data);
	proto_reply_finish(&rep);
}

static void test_reply_malformed(void **state)
{
	(void)state;
	static const char *const bad[] = {
	    "{\"id\":\"1\",\"result\":{},\"error\":{\"code\":-32000,\"message\":\"x\"}}",
	    "{\"id\":\"1\",\"result\":{},\"error\":null}",
	    "{\"id\":\"1\",\"error\":{\"message\":\"x\"}}",
	    "{\"id\":\"1\",\"error\":{\"code\":\"-32000\",\"message\":\"x\"}}",
	    "{\"id\":\"1\",\"error\":{\"code\":null,\"message\":\"x\"}}",
	    "{\"id\":\"1\",\"error\":{\"code\":true,\"message\":\"x\"}}",
	    "{\"id\":\"1\",\"error\":{\"code\":0,\"message\":\"x\"}}",
	    "{\"id\":\"1\",\"error\":{\"code\":-32000}}",
	    "{\"id\":\"1\",\"error\":{\"code\":-32000,\"message\":1}}",
	    "{\"id\":\"1\",\"error\":{\"code\":-32000,\"message\":null}}",
	    "{\"id\":\"1\",\"error\":{}}",
	    "{\"id\":\"1\",\"error\":\"boom\"}",
	    "{\"id\":\"1\",\"error\":-32000}",
	    "{\"id\":\"1\",\"error\":null}",
	    "{\"id\":\"1\",\"error\":[]}",
	    "{\"id\":\"1\",\"result\":[]}",
	    "{\"id\":\"1\",\"result\":\"ok\"}",
	    "{\"id\":\"1\",\"result\":1}",
	    "{\"id\":\"1\",\"result\":null}",
	    "{\"id\":\"1\",\"result\":true}",
	    "{\"id\":\"1\"}",
	    "{\"id\":1,\"result\":{}}",
	    "{\"id\":{},\"result\":{}}",
	    "{\"id\":[\"1\"],\"result\":{}}",
	    "{\"result\":{}}",
	    "{\"event\":1}",
	    "{\"event\":null}",
	    "{\"event\":\"x\",\"data\":[]}",
	    "{\"event\":\"x\",\"data\":\"s\"}",
	    "{\"event\":\"x\",\"data\":null}",
	    "{}",
	    "[]",
	    "\"x\"",
	    "1",
	    "null",
	    "{",
	    "{}x",
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		struct proto_reply rep;
		memset(&rep, 0x5a, sizeof(rep));
		int rc = proto_reply_parse(bad[i], strlen(bad[i]), &rep);
		bool cleared = rep.root == NULL && rep.id == NULL && rep.result == NULL &&
		               rep.message == NULL && rep.event == NULL;
		if (rc == 0)
			proto_reply_finish(&rep);
		if (rc != -EBADMSG)
			fail_msg("%s: rc %d, want -EBADMSG", bad[i], rc);
		assert_true(cleared);
	}

	struct proto_reply rep;
	static const char overlong[] = "{\"id\":\"\xc0\x80\",\"result\":{}}";
	assert_int_equal(proto_reply_parse(overlong, strlen(overlong), &rep), -EILSEQ);
	assert_null(rep.root);
	static const char deep[] = "{\"id\":\"1\",\"result\":{\"a\":[[[[[[[[]]]]]]]]}}";
	assert_int_equal(proto_reply_parse(deep, strlen(deep), &rep), -E2BIG);
	assert_null(rep.root);
	/* A duplicate key fails (proto.h lists no -EEXIST here; any failure). */
	static const char dup[] = "{\"id\":\"1\",\"result\":{},\"result\":{}}";
	int rc = proto_reply_parse(dup, strlen(dup), &rep);
	assert_true(rc == -EEXIST || rc == -EBADMSG);
	assert_null(rep.root);
	/* Finish after a failure is harmless. */
	proto_reply_finish(&rep);
}

/*
 * rep.code is "0 on success, else error.code": an error whose code truncates to
 * 0 would look like a success without a result. JSON-RPC codes are integers.
 */
static void test_reply_error_code_not_integer(void **state)
{
	(void)state;
	static const char *const bad[] = {
	    "{\"id\":\"1\",\"error\":{\"code\":0.5,\"message\":\"x\"}}",
	    "{\"id\":\"1\",\"error\":{\"code\":-0.5,\"message\":\"x\"}}",
	    "{\"id\":\"1\",\"error\":{\"code\":1e-9,\"message\":\"x\"}}",
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		struct proto_reply rep;
		int rc = proto_reply_parse(bad[i], strlen(bad[i]), &rep);
		int code = rep.code;
		bool has_result = rep.result != NULL;
		if (rc == 0)
			proto_reply_finish(&rep);
		if (rc != -EBADMSG)
			fail_msg("%s: rc %d code %d result %s, want -EBADMSG", bad[i], rc, code,
			         has_result ? "set" : "NULL");
	}
}

/* ---- encoders ------------------------------------------------------------- */

/* Checks the frame's shape and decodes it (without its newline). */
static void decode_reply(char *frame, size_t len, struct proto_reply *rep)
{
	assert_non_null(frame);
	assert_int_equal(len, strlen(frame));
	assert_true(len >= 2 && len <= PROTO_MAX_FRAME);
	assert_int_equal(frame[len - 1], '\n');
	/* The newline is the frame's only one: embedded ones are escaped. */
	assert_null(memchr(frame, '\n', len - 1));
	assert_int_equal(proto_frame_check(frame, len - 1), 0);
	assert_int_equal(proto_reply_parse(frame, len - 1, rep), 0);
}

static void test_encode_result_round_trip(void **state)
{
	(void)state;
	static const unsigned char handle[PROTO_HANDLE_SIZE] = {0x00, 0x01, 0x7f, 0x80, 0xfe, 0xff};
	cJSON *result = cJSON_CreateObject();
	assert_non_null(result);
	assert_int_equal(proto_add_u64(result, "size", UINT64_MAX), 0);
	assert_int_equal(proto_add_id64(result, "id", UINT64_C(0x9a41c07be2d35f18)), 0);
	assert_int_equal(proto_add_hex(result, "handle", handle, sizeof(handle)), 0);
	assert_non_null(cJSON_AddStringToObject(result, "text", "a\"b\\c\nd\te\x01f\xc3\xa9"));
	assert_non_null(cJSON_AddNumberToObject(result, "device", 3));
	size_t len = 0;
	char *frame = proto_encode_result("id-1", result, &len);
	struct proto_reply rep;
	decode_reply(frame, len, &rep);
	free(frame);
	assert_string_equal(rep.id, "id-1");
	assert_int_equal(rep.code, 0);
	uint64_t u = 0, id = 0;
	int64_t dev = 0;
	const char *text = NULL, *hex = NULL;
	unsigned char back[PROTO_HANDLE_SIZE];
	assert_int_equal(proto_get_u64(rep.result, "size", 0, UINT64_MAX, &u), 0);
	assert_true(u == UINT64_MAX);
	assert_int_equal(proto_get_id64(rep.result, "id", &id), 0);
	assert_true(id == UINT64_C(0x9a41c07be2d35f18));
	assert_int_equal(proto_get_string(rep.result, "handle", 2 * PROTO_HANDLE_SIZE, &hex), 0);
	assert_int_equal(proto_hex_decode(hex, back, sizeof(back)), 0);
	assert_memory_equal(back, handle, sizeof(handle));
	assert_int_equal(proto_get_string(rep.result, "text", 64, &text), 0);
	assert_string_equal(text, "a\"b\\c\nd\te\x01f\xc3\xa9");
	assert_int_equal(proto_get_int(rep.result, "device", 0, 15, &dev), 0);
	assert_int_equal(dev, 3);
	proto_reply_finish(&rep);

	/* NULL result: {}. NULL id: null. */
	frame = proto_encode_result(NULL, NULL, &len);
	decode_reply(frame, len, &rep);
	assert_string_equal(frame, "{\"id\":null,\"result\":{}}\n");
	free(frame);
	assert_null(rep.id);
	assert_true(cJSON_IsObject(rep.result));
	assert_int_equal(cJSON_GetArraySize(rep.result), 0);
	proto_reply_finish(&rep);
}

static void test_encode_error_round_trip(void **state)
{
	(void)state;
	static const int codes[] = {
	    PROTO_E_PARSE,         PROTO_E_INVALID_REQUEST, PROTO_E_METHOD,
	    PROTO_E_PARAMS,        PROTO_E_INTERNAL,        PROTO_E_STATE,
	    PROTO_E_VERSION,       PROTO_E_NO_MEMORY,       PROTO_E_QUOTA,
	    PROTO_E_NOT_FOUND,     PROTO_E_PERMISSION,      PROTO_E_LIMIT,
	    PROTO_E_SHUTTING_DOWN, PROTO_E_TIMEOUT,         PROTO_E_NOT_SUPPORTED,
	    PROTO_E_BACKEND,
	};
	for (size_t i = 0; i < ARRAY_SIZE(codes); i++) {
		cJSON *data = cJSON_CreateObject();
		assert_non_null(data);
		assert_non_null(cJSON_AddStringToObject(data, "field", "size"));
		size_t len = 0;
		char *frame =
		    proto_encode_error("e", codes[i], proto_code_name(codes[i]), data, &len);
		struct proto_reply rep;
		decode_reply(frame, len, &rep);
		free(frame);
		assert_string_equal(rep.id, "e");
		assert_null(rep.result);
		assert_int_equal(rep.code, codes[i]);
		assert_string_equal(rep.message, proto_code_name(codes[i]));
		assert_non_null(rep.data);
		assert_string_equal(
		    cJSON_GetObjectItemCaseSensitive(rep.data, "field")->valuestring, "size");
		proto_reply_finish(&rep);
	}
	/* Without data and without id. */
	size_t len = 0;
	char *frame =
	    proto_encode_error(NULL, PROTO_E_INVALID_REQUEST, "line\none \"q\"", NULL, &len);
	struct proto_reply rep;
	decode_reply(frame, len, &rep);
	free(frame);
	assert_null(rep.id);
	assert_int_equal(rep.code, PROTO_E_INVALID_REQUEST);
	assert_string_equal(rep.message, "line\none \"q\"");
	assert_null(rep.data);
	proto_reply_finish(&rep);
}

static void test_encode_event_round_trip(void **state)
{
	(void)state;
	cJSON *data = cJSON_CreateObject();
	assert_non_null(data);
	assert_non_null(cJSON_AddStringToObject(data, "reason", "SIGTERM"));
	size_t len = 0;
	char *frame = proto_encode_event("shutdown", data, &len);
	struct proto_reply rep;
	decode_reply(frame, len, &rep);
	/* Events never carry an id. */
	assert_null(strstr(frame, "\"id\""));
	free(frame);
	assert_string_equal(rep.event, "shutdown");
	assert_null(rep.id);
	assert_string_equal(cJSON_GetObjectItemCaseSensitive(rep.data, "reason")->valuestring,
	                    "SIGTERM");
	proto_reply_finish(&rep);

	frame = proto_encode_event("cap_changed", NULL, &len);
	decode_reply(frame, len, &rep);
	free(frame);
	assert_string_equal(rep.event, "cap_changed");
	assert_true(cJSON_IsObject(rep.data));
	assert_int_equal(cJSON_GetArraySize(rep.data), 0);
	proto_reply_finish(&rep);
}

/* An object {"s": <n bytes>}. */
static cJSON *padded(size_t n)
{
	char *s = repeat('p', n);
	cJSON *o = cJSON_CreateObject();
	assert_non_null(o);
	assert_non_null(cJSON_AddStringToObject(o, "s", s));
	free(s);
	return o;
}

enum enc_kind { ENC_RESULT, ENC_ERROR, ENC_EVENT, ENC_REQUEST };

static char *encode_kind(enum enc_kind kind, cJSON *obj, size_t *len)
{
	switch (kind) {
	case ENC_RESULT:
		return proto_encode_result("1", obj, len);
	case ENC_ERROR:
		return proto_encode_error("1", PROTO_E_PARAMS, "m", obj, len);
	case ENC_EVENT:
		return proto_encode_event("e", obj, len);
	default:
		return proto_encode_request("1", "alloc", obj, len);
	}
}

/* Frames up to PROTO_MAX_FRAME bytes are produced, larger ones are not;
 * the object is consumed either way (leaks show under ASan / valgrind). */
static void test_encode_too_big(void **state)
{
	(void)state;
	for (int kind = ENC_RESULT; kind <= ENC_REQUEST; kind++) {
		size_t base = 0;
		char *frame = encode_kind(kind, padded(0), &base);
		assert_non_null(frame);
		free(frame);
		/* Requests are capped at PROTO_MAX_FRAME, what the daemon
		 * sends at PROTO_MAX_REPLY. */
		size_t max = kind == ENC_REQUEST ? PROTO_MAX_FRAME : PROTO_MAX_REPLY;
		size_t fill = max - base;

		size_t len = 0;
		frame = encode_kind(kind, padded(fill), &len);
		assert_non_null(frame);
		assert_int_equal(len, max);
		assert_int_equal(strlen(frame), max);
		/* The largest frame goes through the framer and decoder. */
		struct proto_framer f;
		char *out = NULL;
		size_t out_len = 0;
		proto_framer_init(&f, max);
		assert_int_equal(proto_framer_push(&f, frame, len), 0);
		assert_int_equal(proto_framer_next(&f, &out, &out_len), 1);
		assert_int_equal(out_len, max - 1);
		cJSON *root = NULL;
		assert_int_equal(proto_json_parse(out, out_len, PROTO_MAX_KEYS, &root), 0);
		cJSON_Delete(root);
		proto_framer_finish(&f);
		free(frame);

		len = 12345;
		assert_null(encode_kind(kind, padded(fill + 1), &len));
		assert_null(encode_kind(kind, padded(max * 2), &len));
	}
	/* Consumed on other failures too. */
	size_t len = 0;
	assert_null(proto_encode_request("1", NULL, padded(1), &len));
	assert_null(proto_encode_error("1", PROTO_E_PARAMS, NULL, padded(1), &len));
	assert_null(proto_encode_event(NULL, padded(1), &len));
}

/* ---- field codecs --------------------------------------------------------- */

static void test_parse_u64_ok(void **state)
{
	(void)state;
	static const struct {
		const char *s;
		uint64_t v;
	} ok[] = {
	    {"0", 0},
	    {"1", 1},
	    {"9", 9},
	    {"10", 10},
	    {"1000", 1000},
	    {"9007199254740993", UINT64_C(9007199254740993)},
	    {"10000000000000000000", UINT64_C(10000000000000000000)},
	    {"18446744073709551614", UINT64_MAX - 1},
	    {"18446744073709551615", UINT64_MAX},
	};
	for (size_t i = 0; i < ARRAY_SIZE(ok); i++) {
		uint64_t v = 42;
		assert_int_equal(proto_parse_u64(ok[i].s, &v), 0);
		assert_true(v == ok[i].v);
	}
}

static void test_parse_u64_bad(void **state)
{
	(void)state;
	static const struct {
		const char *s;
		int rc;
	} bad[] = {
	    {"-1", -EINVAL},
	    {"+1", -EINVAL},
	    {" 1", -EINVAL},
	    {"1 ", -EINVAL},
	    {"\t1", -EINVAL},
	    {"1e9", -EINVAL},
	    {"0x10", -EINVAL},
	    {"01", -EINVAL},
	    {"00", -EINVAL},
	    {"-0", -EINVAL},
	    {"", -EINVAL},
	    {"1.0", -EINVAL},
	    {"1,000", -EINVAL},
	    {"abc", -EINVAL},
	    {"12a", -EINVAL},
	    {"\xd9\xa1", -EINVAL}, /* ARABIC-INDIC DIGIT ONE */
	    {"18446744073709551616", -ERANGE},
	    {"18446744073709551620", -ERANGE},
	    {"99999999999999999999", -ERANGE},
	    {"1234567890123456789012345", -EINVAL},
	    {"000000000000000000001", -EINVAL},
	    {"184467440737095516150", -EINVAL},
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		uint64_t v = 42;
		int rc = proto_parse_u64(bad[i].s, &v);
		if (rc != bad[i].rc)
			fail_msg("\"%s\": rc %d, want %d", bad[i].s, rc, bad[i].rc);
		assert_true(v == 42);
	}
}

static void test_get_u64(void **state)
{
	(void)state;
	cJSON *o =
	    parse_obj("{\"s\":\"123\",\"n\":123,\"z\":\"0\",\"max\":\"18446744073709551615\","
	              "\"neg\":\"-1\",\"b\":true,\"nul\":null,\"obj\":{},\"arr\":[\"1\"],"
	              "\"big\":\"18446744073709551616\",\"sp\":\" 1\"}");
	uint64_t v = 42;
	assert_int_equal(proto_get_u64(o, "s", 0, UINT64_MAX, &v), 0);
	assert_true(v == 123);
	assert_int_equal(proto_get_u64(o, "s", 123, 123, &v), 0);
	assert_int_equal(proto_get_u64(o, "z", 0, 10, &v), 0);
	assert_true(v == 0);
	assert_int_equal(proto_get_u64(o, "max", 0, UINT64_MAX, &v), 0);
	assert_true(v == UINT64_MAX);
	v = 42;
	/* Range: min and max are inclusive bounds. */
	assert_int_equal(proto_get_u64(o, "s", 124, UINT64_MAX, &v), -ERANGE);
	assert_int_equal(proto_get_u64(o, "s", 0, 122, &v), -ERANGE);
	assert_int_equal(proto_get_u64(o, "z", 1, UINT64_MAX, &v), -ERANGE);
	assert_int_equal(proto_get_u64(o, "max", 0, UINT64_MAX - 1, &v), -ERANGE);
	assert_int_equal(proto_get_u64(o, "big", 0, UINT64_MAX, &v), -ERANGE);
	/* Type and format. */
	assert_int_equal(proto_get_u64(o, "n", 0, UINT64_MAX, &v), -EINVAL);
	assert_int_equal(proto_get_u64(o, "neg", 0, UINT64_MAX, &v), -EINVAL);
	assert_int_equal(proto_get_u64(o, "sp", 0, UINT64_MAX, &v), -EINVAL);
	assert_int_equal(proto_get_u64(o, "b", 0, UINT64_MAX, &v), -EINVAL);
	assert_int_equal(proto_get_u64(o, "nul", 0, UINT64_MAX, &v), -EINVAL);
	assert_int_equal(proto_get_u64(o, "obj", 0, UINT64_MAX, &v), -EINVAL);
	assert_int_equal(proto_get_u64(o, "arr", 0, UINT64_MAX, &v), -EINVAL);
	/* Absent, and keys are case-sensitive. */
	assert_int_equal(proto_get_u64(o, "missing", 0, UINT64_MAX, &v), -ENOENT);
	assert_int_equal(proto_get_u64(o, "S", 0, UINT64_MAX, &v), -ENOENT);
	assert_true(v == 42);
	cJSON_Delete(o);
}

static void test_get_id64(void **state)
{
	(void)state;
	cJSON *o = parse_obj(
	    "{\"a\":\"00000000000000ff\",\"b\":\"0123456789abcdef\",\"c\":\"ffffffffffffffff\","
	    "\"d\":\"0000000000000000\",\"up\":\"0123456789ABCDEF\",\"mix\":\"0123456789abcdeF\","
	    "\"short\":\"0123456789abcde\",\"long\":\"0123456789abcdef0\","
	    "\"g\":\"0123456789abcdeg\",\"x\":\"0x23456789abcdef\",\"sp\":\" 123456789abcdef\","
	    "\"n\":1,\"e\":\"\",\"nul\":null}");
	uint64_t v = 42;
	assert_int_equal(proto_get_id64(o, "a", &v), 0);
	assert_true(v == 0xff);
	assert_int_equal(proto_get_id64(o, "b", &v), 0);
	assert_true(v == UINT64_C(0x0123456789abcdef));
	assert_int_equal(proto_get_id64(o, "c", &v), 0);
	assert_true(v == UINT64_MAX);
	assert_int_equal(proto_get_id64(o, "d", &v), 0);
	assert_true(v == 0);
	v = 42;
	static const char *const bad[] = {"up", "mix", "short", "long", "g",
	                                  "x",  "sp",  "n",     "e",    "nul"};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		int rc = proto_get_id64(o, bad[i], &v);
		if (rc != -EINVAL)
			fail_msg("%s: rc %d, want -EINVAL", bad[i], rc);
	}
	assert_int_equal(proto_get_id64(o, "missing", &v), -ENOENT);
	assert_true(v == 42);
	cJSON_Delete(o);

	/* proto_add_id64 writes the one accepted spelling. */
	static const uint64_t values[] = {0, 1, 0xa, UINT64_C(0xdeadbeefcafef00d), UINT64_MAX};
	for (size_t i = 0; i < ARRAY_SIZE(values); i++) {
		o = cJSON_CreateObject();
		assert_non_null(o);
		assert_int_equal(proto_add_id64(o, "id", values[i]), 0);
		const char *s = cJSON_GetObjectItemCaseSensitive(o, "id")->valuestring;
		assert_int_equal(strlen(s), 16);
		assert_int_equal(strspn(s, "0123456789abcdef"), 16);
		assert_int_equal(proto_get_id64(o, "id", &v), 0);
		assert_true(v == values[i]);
		cJSON_Delete(o);
	}
}

static void test_get_int(void **state)
{
	(void)state;
	cJSON *o = parse_obj("{\"i\":42,\"neg\":-7,\"zero\":0,\"e\":1e3,\"f\":1.5,\"tiny\":1e-300,"
	                     "\"huge\":1e300,\"inf\":1e999,\"b\":true,\"s\":\"1\",\"nul\":null,"
	                     "\"arr\":[1],\"p53\":9007199254740992,\"n53\":-9007199254740992,"
	                     "\"over53\":9007199254740994}");
	int64_t v = 99;
	assert_int_equal(proto_get_int(o, "i", INT64_MIN, INT64_MAX, &v), 0);
	assert_int_equal(v, 42);
	assert_int_equal(proto_get_int(o, "neg", -7, -7, &v), 0);
	assert_int_equal(v, -7);
	assert_int_equal(proto_get_int(o, "zero", 0, 0, &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(proto_get_int(o, "e", 0, 1000, &v), 0);
	assert_int_equal(v, 1000);
	assert_int_equal(proto_get_int(o, "p53", INT64_MIN, INT64_MAX, &v), 0);
	assert_true(v == INT64_C(9007199254740992));
	assert_int_equal(proto_get_int(o, "n53", INT64_MIN, INT64_MAX, &v), 0);
	assert_true(v == -INT64_C(9007199254740992));
	v = 99;
	/* Range. */
	assert_int_equal(proto_get_int(o, "i", 43, 100, &v), -ERANGE);
	assert_int_equal(proto_get_int(o, "i", 0, 41, &v), -ERANGE);
	assert_int_equal(proto_get_int(o, "neg", 0, 10, &v), -ERANGE);
	/* Not integral, or not an exactly representable integer. */
	assert_int_equal(proto_get_int(o, "f", INT64_MIN, INT64_MAX, &v), -EINVAL);
	assert_int_equal(proto_get_int(o, "tiny", INT64_MIN, INT64_MAX, &v), -EINVAL);
	int rc = proto_get_int(o, "huge", INT64_MIN, INT64_MAX, &v);
	assert_true(rc == -EINVAL || rc == -ERANGE);
	rc = proto_get_int(o, "inf", INT64_MIN, INT64_MAX, &v);
	assert_true(rc == -EINVAL || rc == -ERANGE);
	rc = proto_get_int(o, "over53", INT64_MIN, INT64_MAX, &v);
	assert_true(rc == -EINVAL || rc == -ERANGE);
	/* Wrong types. */
	assert_int_equal(proto_get_int(o, "b", INT64_MIN, INT64_MAX, &v), -EINVAL);
	assert_int_equal(proto_get_int(o, "s", INT64_MIN, INT64_MAX, &v), -EINVAL);
	assert_int_equal(proto_get_int(o, "nul", INT64_MIN, INT64_MAX, &v), -EINVAL);
	assert_int_equal(proto_get_int(o, "arr", INT64_MIN, INT64_MAX, &v), -EINVAL);
	assert_int_equal(proto_get_int(o, "missing", INT64_MIN, INT64_MAX, &v), -ENOENT);
	assert_int_equal(v, 99);
	cJSON_Delete(o);
	/* NaN cannot arrive: JSON has no spelling for it. */
	assert_int_equal(json_rc("{\"x\":NaN}"), -EBADMSG);
	assert_int_equal(json_rc("{\"x\":-nan}"), -EBADMSG);
}

static void test_get_double(void **state)
{
	(void)state;
	cJSON *o = parse_obj("{\"half\":0.5,\"one\":1,\"zero\":0,\"neg\":-0.1,\"big\":1.5,"
	                     "\"inf\":1e999,\"s\":\"0.5\",\"b\":false,\"nul\":null}");
	double v = 7;
	assert_int_equal(proto_get_double(o, "half", 0, 1, &v), 0);
	assert_true(v == 0.5);
	assert_int_equal(proto_get_double(o, "one", 0, 1, &v), 0);
	assert_true(v == 1.0);
	assert_int_equal(proto_get_double(o, "zero", 0, 1, &v), 0);
	assert_true(v == 0.0);
	v = 7;
	assert_int_equal(proto_get_double(o, "half", 0.6, 1, &v), -ERANGE);
	assert_int_equal(proto_get_double(o, "big", 0, 1, &v), -ERANGE);
	assert_int_equal(proto_get_double(o, "neg", 0, 1, &v), -ERANGE);
	assert_int_equal(proto_get_double(o, "inf", -1e308, 1e308, &v), -ERANGE);
	assert_int_equal(proto_get_double(o, "s", 0, 1, &v), -EINVAL);
	assert_int_equal(proto_get_double(o, "b", 0, 1, &v), -EINVAL);
	assert_int_equal(proto_get_double(o, "nul", 0, 1, &v), -EINVAL);
	assert_int_equal(proto_get_double(o, "missing", 0, 1, &v), -ENOENT);
	assert_true(v == 7);
	cJSON_Delete(o);
}

static void test_get_string(void **state)
{
	(void)state;
	cJSON *o = parse_obj("{\"s\":\"abc\",\"e\":\"\",\"n\":1,\"nul\":null,\"arr\":[\"a\"],"
	                     "\"b\":true,\"u\":\"\xc3\xa9\xc3\xa9\"}");
	const char *v = "unset";
	assert_int_equal(proto_get_string(o, "s", 3, &v), 0);
	assert_string_equal(v, "abc");
	assert_int_equal(proto_get_string(o, "u", 4, &v), 0);
	assert_string_equal(v, "\xc3\xa9\xc3\xa9");
	v = "unset";
	assert_int_equal(proto_get_string(o, "s", 2, &v), -ERANGE);
	/* The limit is in bytes. */
	assert_int_equal(proto_get_string(o, "u", 3, &v), -ERANGE);
	assert_int_equal(proto_get_string(o, "e", 64, &v), -ERANGE);
	assert_int_equal(proto_get_string(o, "n", 64, &v), -EINVAL);
	assert_int_equal(proto_get_string(o, "nul", 64, &v), -EINVAL);
	assert_int_equal(proto_get_string(o, "arr", 64, &v), -EINVAL);
	assert_int_equal(proto_get_string(o, "b", 64, &v), -EINVAL);
	assert_int_equal(proto_get_string(o, "missing", 64, &v), -ENOENT);
	assert_string_equal(v, "unset");
	cJSON_Delete(o);

	/* PROTO_MAX_NAME bytes fit, one more does not. */
	char *name = repeat('n', PROTO_MAX_NAME + 1);
	o = cJSON_CreateObject();
	assert_non_null(o);
	assert_non_null(cJSON_AddStringToObject(o, "long", name));
	name[PROTO_MAX_NAME] = '\0';
	assert_non_null(cJSON_AddStringToObject(o, "max", name));
	free(name);
	assert_int_equal(proto_get_string(o, "max", PROTO_MAX_NAME, &v), 0);
	assert_int_equal(strlen(v), PROTO_MAX_NAME);
	assert_int_equal(proto_get_string(o, "long", PROTO_MAX_NAME, &v), -ERANGE);
	cJSON_Delete(o);
}

static void test_get_bool(void **state)
{
	(void)state;
	cJSON *o = parse_obj("{\"t\":true,\"f\":false,\"one\":1,\"zero\":0,\"s\":\"true\","
	                     "\"nul\":null}");
	bool v = false;
	assert_int_equal(proto_get_bool(o, "t", &v), 0);
	assert_true(v);
	assert_int_equal(proto_get_bool(o, "f", &v), 0);
	assert_false(v);
	v = true;
	assert_int_equal(proto_get_bool(o, "one", &v), -EINVAL);
	assert_int_equal(proto_get_bool(o, "zero", &v), -EINVAL);
	assert_int_equal(proto_get_bool(o, "s", &v), -EINVAL);
	assert_int_equal(proto_get_bool(o, "nul", &v), -EINVAL);
	assert_int_equal(proto_get_bool(o, "missing", &v), -ENOENT);
	assert_int_equal(proto_get_bool(o, "T", &v), -ENOENT);
	assert_true(v);
	cJSON_Delete(o);
}

static void test_add_u64_round_trip(void **state)
{
	(void)state;
	static const uint64_t values[] = {0,
	                                  1,
	                                  9,
	                                  10,
	                                  UINT64_C(9007199254740993),
	                                  UINT64_C(10000000000000000000),
	                                  UINT64_MAX - 1,
	                                  UINT64_MAX};
	for (size_t i = 0; i < ARRAY_SIZE(values); i++) {
		cJSON *o = cJSON_CreateObject();
		assert_non_null(o);
		assert_int_equal(proto_add_u64(o, "v", values[i]), 0);
		const cJSON *item = cJSON_GetObjectItemCaseSensitive(o, "v");
		/* A decimal string, never a JSON number. */
		assert_true(cJSON_IsString(item));
		char want[24];
		snprintf(want, sizeof(want), "%" PRIu64, values[i]);
		assert_string_equal(item->valuestring, want);
		uint64_t v = 42;
		assert_int_equal(proto_parse_u64(item->valuestring, &v), 0);
		assert_true(v == values[i]);
		/* Through a frame and back. */
		size_t len = 0;
		char *frame = proto_encode_result("1", o, &len);
		struct proto_reply rep;
		decode_reply(frame, len, &rep);
		free(frame);
		v = 42;
		assert_int_equal(proto_get_u64(rep.result, "v", 0, UINT64_MAX, &v), 0);
		assert_true(v == values[i]);
		proto_reply_finish(&rep);
	}
}

static void test_add_hex_round_trip(void **state)
{
	(void)state;
	unsigned char bytes[PROTO_HANDLE_SIZE + 1];
	for (size_t i = 0; i < sizeof(bytes); i++)
		bytes[i] = (unsigned char)(i * 37 + 0xf0);
	static const size_t sizes[] = {0, 1, 2, 16, PROTO_HANDLE_SIZE};
	for (size_t k = 0; k < ARRAY_SIZE(sizes); k++) {
		size_t n = sizes[k];
		cJSON *o = cJSON_CreateObject();
		assert_non_null(o);
		assert_int_equal(proto_add_hex(o, "h", bytes, n), 0);
		const char *s = cJSON_GetObjectItemCaseSensitive(o, "h")->valuestring;
		assert_int_equal(strlen(s), 2 * n);
		assert_int_equal(strspn(s, "0123456789abcdef"), 2 * n);
		unsigned char back[PROTO_HANDLE_SIZE + 1];
		memset(back, 0, sizeof(back));
		assert_int_equal(proto_hex_decode(s, back, n), 0);
		if (n > 0)
			assert_memory_equal(back, bytes, n);
		/* Wrong lengths are refused. */
		if (n > 0)
			assert_int_equal(proto_hex_decode(s, back, n - 1), -EINVAL);
		assert_int_equal(proto_hex_decode(s, back, n + 1), -EINVAL);
		cJSON_Delete(o);
	}
	/* Known spelling. */
	static const unsigned char fixed[] = {0x00, 0x0f, 0xa5, 0xff};
	cJSON *o = cJSON_CreateObject();
	assert_non_null(o);
	assert_int_equal(proto_add_hex(o, "h", fixed, sizeof(fixed)), 0);
	assert_string_equal(cJSON_GetObjectItemCaseSensitive(o, "h")->valuestring, "000fa5ff");
	/* More than a handle is refused and adds nothing. */
	assert_true(proto_add_hex(o, "big", bytes, PROTO_HANDLE_SIZE + 1) < 0);
	assert_null(cJSON_GetObjectItemCaseSensitive(o, "big"));
	cJSON_Delete(o);

	/* Decoding: both cases, exact length, hex digits only. */
	unsigned char out[4];
	assert_int_equal(proto_hex_decode("000FA5fF", out, 4), 0);
	assert_memory_equal(out, fixed, 4);
	static const char *const bad[] = {"000fa5f",  "000fa5fff", "000fa5fg", "0x0fa5ff",
	                                  " 00fa5ff", "000fa5f ",  "",         "000f-5ff"};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		if (proto_hex_decode(bad[i], out, 4) != -EINVAL)
			fail_msg("\"%s\" decoded", bad[i]);
	}
	assert_int_equal(proto_hex_decode("", out, 0), 0);
}

static void test_error_field(void **state)
{
	(void)state;
	static const int rcs[] = {-ENOENT, -EINVAL, -ERANGE};
	char messages[3][sizeof(((struct proto_error *)0)->message)];
	for (size_t i = 0; i < ARRAY_SIZE(rcs); i++) {
		struct proto_error err;
		memset(&err, 0x5a, sizeof(err));
		proto_error_field(&err, rcs[i], "size", "a decimal string");
		assert_int_equal(err.code, PROTO_E_PARAMS);
		assert_string_equal(err.field, "size");
		assert_true(valid_message(err.message, sizeof(err.message)));
		assert_non_null(strstr(err.message, "size"));
		if (rcs[i] != -ENOENT)
			assert_non_null(strstr(err.message, "a decimal string"));
		memcpy(messages[i], err.message, sizeof(err.message));
	}
	/* Missing, malformed and out of range read differently. */
	assert_string_not_equal(messages[0], messages[1]);
	assert_string_not_equal(messages[1], messages[2]);
	assert_string_not_equal(messages[0], messages[2]);

	/* A long key is cut to fit, still terminated. */
	struct proto_error err;
	memset(&err, 0x5a, sizeof(err));
	char *key = repeat('k', 100);
	proto_error_field(&err, -EINVAL, key, "x");
	free(key);
	assert_int_equal(strnlen(err.field, sizeof(err.field)), sizeof(err.field) - 1);
	assert_true(valid_message(err.message, sizeof(err.message)));

	/* proto_error_set replaces code and message and clears the field. */
	proto_error_field(&err, -ENOENT, "instance", "an id64");
	proto_error_set(&err, PROTO_E_NOT_FOUND, "no such %s %d", "allocation", 7);
	assert_int_equal(err.code, PROTO_E_NOT_FOUND);
	assert_string_equal(err.message, "no such allocation 7");
	assert_string_equal(err.field, "");
	/* Long messages are truncated, not overflowed. */
	char *longmsg = repeat('m', 500);
	proto_error_set(&err, PROTO_E_INTERNAL, "%s", longmsg);
	free(longmsg);
	assert_int_equal(strlen(err.message), sizeof(err.message) - 1);
}

static void test_code_name(void **state)
{
	(void)state;
	static const struct {
		int code;
		const char *name;
	} table[] = {
	    {PROTO_E_PARSE, "parse_error"},
	    {PROTO_E_INVALID_REQUEST, "invalid_request"},
	    {PROTO_E_METHOD, "method_not_found"},
	    {PROTO_E_PARAMS, "invalid_params"},
	    {PROTO_E_INTERNAL, "internal_error"},
	    {PROTO_E_STATE, "bad_state"},
	    {PROTO_E_VERSION, "version_unsupported"},
	    {PROTO_E_NO_MEMORY, "out_of_memory"},
	    {PROTO_E_QUOTA, "quota_exceeded"},
	    {PROTO_E_NOT_FOUND, "not_found"},
	    {PROTO_E_PERMISSION, "permission_denied"},
	    {PROTO_E_LIMIT, "limit_reached"},
	    {PROTO_E_SHUTTING_DOWN, "shutting_down"},
	    {PROTO_E_TIMEOUT, "timeout"},
	    {PROTO_E_NOT_SUPPORTED, "not_supported"},
	    {PROTO_E_BACKEND, "backend_error"},
	};
	/* The wire values of PROTOCOL.md's table. */
	assert_int_equal(PROTO_E_PARSE, -32700);
	assert_int_equal(PROTO_E_INVALID_REQUEST, -32600);
	assert_int_equal(PROTO_E_METHOD, -32601);
	assert_int_equal(PROTO_E_PARAMS, -32602);
	assert_int_equal(PROTO_E_INTERNAL, -32603);
	assert_int_equal(PROTO_E_STATE, -32000);
	assert_int_equal(PROTO_E_BACKEND, -32010);
	for (size_t i = 0; i < ARRAY_SIZE(table); i++) {
		assert_string_equal(proto_code_name(table[i].code), table[i].name);
		assert_int_equal(table[i].code, i < 5 ? table[i].code : -32000 - (int)(i - 5));
	}
	static const int unknown[] = {0, 1, -1, -32099, -32011, -32604, -32701, -32599, 32700};
	for (size_t i = 0; i < ARRAY_SIZE(unknown); i++)
		assert_string_equal(proto_code_name(unknown[i]), "unknown_error");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_framer_empty),
	    cmocka_unit_test(test_framer_many_frames_one_push),
	    cmocka_unit_test(test_framer_one_byte_at_a_time),
	    cmocka_unit_test(test_framer_split_everywhere),
	    cmocka_unit_test(test_framer_split_at_newline),
	    cmocka_unit_test(test_framer_blank_lines),
	    cmocka_unit_test(test_framer_max_frame_exact),
	    cmocka_unit_test(test_framer_max_frame_plus_one),
	    cmocka_unit_test(test_framer_no_newline_past_cap),
	    cmocka_unit_test(test_framer_pending),
	    cmocka_unit_test(test_framer_reuse),
	    cmocka_unit_test(test_check_raw_nul),
	    cmocka_unit_test(test_check_control_bytes),
	    cmocka_unit_test(test_check_escaped_nul),
	    cmocka_unit_test(test_check_invalid_utf8),
	    cmocka_unit_test(test_check_valid_utf8),
	    cmocka_unit_test(test_json_lone_surrogate_escapes),
	    cmocka_unit_test(test_json_truncated),
	    cmocka_unit_test(test_json_trailing_garbage),
	    cmocka_unit_test(test_json_top_level_values),
	    cmocka_unit_test(test_json_depth_limit),
	    cmocka_unit_test(test_json_deep_nesting_no_crash),
	    cmocka_unit_test(test_json_deep_nesting_is_limit_error),
	    cmocka_unit_test(test_json_member_limit),
	    cmocka_unit_test(test_json_duplicate_keys),
	    cmocka_unit_test(test_op_table),
	    cmocka_unit_test(test_op_lookup),
	    cmocka_unit_test(test_request_every_op_round_trip),
	    cmocka_unit_test(test_request_not_object),
	    cmocka_unit_test(test_request_bad_id),
	    cmocka_unit_test(test_request_huge_id),
	    cmocka_unit_test(test_request_method_key),
	    cmocka_unit_test(test_request_unknown_method),
	    cmocka_unit_test(test_request_unknown_method_op),
	    cmocka_unit_test(test_request_unknown_method_message_utf8),
	    cmocka_unit_test(test_request_params),
	    cmocka_unit_test(test_request_error_mapping),
	    cmocka_unit_test(test_reply_result),
	    cmocka_unit_test(test_reply_error),
	    cmocka_unit_test(test_reply_event),
	    cmocka_unit_test(test_reply_malformed),
	    cmocka_unit_test(test_reply_error_code_not_integer),
	    cmocka_unit_test(test_encode_result_round_trip),
	    cmocka_unit_test(test_encode_error_round_trip),
	    cmocka_unit_test(test_encode_event_round_trip),
	    cmocka_unit_test(test_encode_too_big),
	    cmocka_unit_test(test_parse_u64_ok),
	    cmocka_unit_test(test_parse_u64_bad),
	    cmocka_unit_test(test_get_u64),
	    cmocka_unit_test(test_get_id64),
	    cmocka_unit_test(test_get_int),
	    cmocka_unit_test(test_get_double),
	    cmocka_unit_test(test_get_string),
	    cmocka_unit_test(test_get_bool),
	    cmocka_unit_test(test_add_u64_round_trip),
	    cmocka_unit_test(test_add_hex_round_trip),
	    cmocka_unit_test(test_error_field),
	    cmocka_unit_test(test_code_name),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
