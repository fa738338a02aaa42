/*
 * test-proto-messages.c - unit tests of the wire protocol module
 * (proto/proto.c): request and reply decoding: the op table, ids, methods,
 * params, error mapping, and result/error/event replies.
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

/* ---- requests ------------------------------------------------------------- */

static void test_op_table(void **state)
{
	(void)state;
	/* The names themselves, and the admin marks, are checked against
	 * PROTOCOL.md's headings by test-proto-schema: the table is generated
	 * from schema.h's PROTO_OPS, so a name cannot drift from its op. */
	for (int i = 0; i < PROTO_OP_COUNT; i++) {
		assert_non_null(proto_ops[i].name);
		/* Only hello may come before hello. */
		assert_int_equal(!!(proto_ops[i].flags & PROTO_OPF_BEFORE_HELLO),
		                 i == PROTO_OP_HELLO);
	}
	assert_true(proto_ops[PROTO_OP_RELOAD].flags & PROTO_OPF_ADMIN);
	assert_false(proto_ops[PROTO_OP_ALLOC].flags & PROTO_OPF_ADMIN);
	/* The policy's global switches are admin-only; an instance's own
	 * settings are checked per instance by the handlers. */
	assert_true(proto_ops[PROTO_OP_SET_MODE].flags & PROTO_OPF_ADMIN);
	assert_true(proto_ops[PROTO_OP_SET_LIMIT].flags & PROTO_OPF_ADMIN);
	assert_true(proto_ops[PROTO_OP_INVALIDATE_ALL].flags & PROTO_OPF_ADMIN);
	assert_true(proto_ops[PROTO_OP_SET_ALLOCATOR].flags & PROTO_OPF_ADMIN);
	assert_false(proto_ops[PROTO_OP_ALLOCATE_QUEUE].flags & PROTO_OPF_ADMIN);
	assert_true(proto_ops[PROTO_OP_SELFCHECK].flags & PROTO_OPF_ADMIN);
	/* Any client answers the invalidate events it was sent. */
	assert_false(proto_ops[PROTO_OP_INVALIDATE_DONE].flags & PROTO_OPF_ADMIN);
	assert_false(proto_ops[PROTO_OP_SET_PROPORTION].flags & PROTO_OPF_ADMIN);
	assert_false(proto_ops[PROTO_OP_POLICY].flags & PROTO_OPF_ADMIN);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
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
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
