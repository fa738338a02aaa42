/*
 * test-proto-codecs.c - unit tests of the wire protocol module
 * (proto/proto.c): the reply and request encoders and the strict field codecs
 * (u64/id64/int/double/string/bool, hex, error fields, code names).
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
	    PROTO_E_BACKEND,       PROTO_E_EXISTS,
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
	    {PROTO_E_EXISTS, "exists"},
	};
	/* The wire values of PROTOCOL.md's table. */
	assert_int_equal(PROTO_E_PARSE, -32700);
	assert_int_equal(PROTO_E_INVALID_REQUEST, -32600);
	assert_int_equal(PROTO_E_METHOD, -32601);
	assert_int_equal(PROTO_E_PARAMS, -32602);
	assert_int_equal(PROTO_E_INTERNAL, -32603);
	assert_int_equal(PROTO_E_STATE, -32000);
	assert_int_equal(PROTO_E_BACKEND, -32010);
	assert_int_equal(PROTO_E_EXISTS, -32011);
	for (size_t i = 0; i < ARRAY_SIZE(table); i++) {
		assert_string_equal(proto_code_name(table[i].code), table[i].name);
		assert_int_equal(table[i].code, i < 5 ? table[i].code : -32000 - (int)(i - 5));
	}
	static const int unknown[] = {0, 1, -1, -32099, -32012, -32604, -32701, -32599, 32700};
	for (size_t i = 0; i < ARRAY_SIZE(unknown); i++)
		assert_string_equal(proto_code_name(unknown[i]), "unknown_error");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
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
