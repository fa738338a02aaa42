/*
 * test-proto-json.c - unit tests of the wire protocol module (proto/proto.c):
 * the JSON structure checks (truncation, trailing bytes, top-level values,
 * depth and member limits, duplicate keys).
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

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_json_truncated),
	    cmocka_unit_test(test_json_trailing_garbage),
	    cmocka_unit_test(test_json_top_level_values),
	    cmocka_unit_test(test_json_depth_limit),
	    cmocka_unit_test(test_json_deep_nesting_no_crash),
	    cmocka_unit_test(test_json_deep_nesting_is_limit_error),
	    cmocka_unit_test(test_json_member_limit),
	    cmocka_unit_test(test_json_duplicate_keys),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
