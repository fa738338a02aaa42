/*
 * test-proto-framing.c - unit tests of the wire protocol module
 * (proto/proto.c): the framer and the byte checks (NUL, control bytes, UTF-8)
 * of a frame.
 *
 * Tests release what they allocated before asserting wherever a failure is
 * plausible, so that a failing test does not also show up as a leak under
 * ASan or valgrind. Shared helpers: proto-helpers.h.
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
#include "proto-helpers.h"

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
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
