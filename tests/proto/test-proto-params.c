/*
 * test-proto-params.c - every method's params decoded from schema.h's
 * lists (proto/params.c): each required member is required, each member of
 * the wrong JSON type is refused naming it, bounds are held on both paths
 * (the general decoder and the hot path's check), defaults stay unset, and
 * members a list does not name are ignored.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "codec.h"
#include "params.h"
#include "proto.h"

/* A valid value of each kind, as JSON text. */
static const char *valid(enum proto_kind kind)
{
	switch (kind) {
	case PROTO_KIND_ID64:
		return "\"00000000000000ab\"";
	case PROTO_KIND_U64:
	case PROTO_KIND_BYTES:
		return "\"4096\"";
	case PROTO_KIND_ALIGN:
		return "\"4096\"";
	case PROTO_KIND_INT:
		return "1";
	case PROTO_KIND_SHARE:
		return "0.5";
	case PROTO_KIND_STRING:
		return "\"abc\"";
	case PROTO_KIND_PNAME:
		return "\"job-1.a_b\"";
	case PROTO_KIND_BOOL:
		return "true";
	case PROTO_KIND_MEMORY:
		return "\"" PROTO_V_MEM_PINNED "\"";
	case PROTO_KIND_MODE:
		return "\"" PROTO_V_MODE_PASSIVE "\"";
	case PROTO_KIND_ALLOCATOR:
		return "\"" PROTO_V_ALLOC_DIRECT "\"";
	case PROTO_KIND_TOKEN:
		return "\"00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\"";
	case PROTO_KIND_DEVICE:
		return "0";
	case PROTO_KIND_DEVICES:
		return "[0, \"GPU-x\"]";
	case PROTO_KIND_VERSIONS:
		return "[1]";
	case PROTO_KIND_SHAPE:
		return "[4, 8]";
	case PROTO_KIND_QUEUE:
		return "[{\"label\":\"x\",\"shape\":[4],\"elem_size\":8}]";
	default:
		return "null";
	}
}

/* A value of the wrong JSON type for the kind: an object fits none. */
static const char *wrong = "{\"nested\":1}";

/* The params object of op with every member valid, but member `skip`
 * left out and member `bad` (when not NULL) given the text `bad_value`. */
static void params_text(const struct proto_member *m, const char *skip, const char *bad,
                        const char *bad_value, char *out, size_t cap)
{
	size_t n = (size_t)snprintf(out, cap, "{");
	for (; m->name; m++) {
		if (skip && strcmp(m->name, skip) == 0)
			continue;
		const char *v = bad && strcmp(m->name, bad) == 0 ? bad_value : valid(m->kind);
		n +=
		    (size_t)snprintf(out + n, cap - n, "%s\"%s\":%s", n > 1 ? "," : "", m->name, v);
	}
	snprintf(out + n, cap - n, "}");
}

static int decode(int op, const char *text, union proto_params *u, struct proto_error *err)
{
	cJSON *params = cJSON_Parse(text);
	assert_non_null(params);
	memset(err, 0, sizeof(*err));
	int rc = proto_params_decode(op, params, u, err);
	cJSON_Delete(params);
	return rc;
}

static void test_every_method(void **state)
{
	(void)state;
	static union proto_params u;
	char text[4096];
	struct proto_error err;
	unsigned checked = 0;
	for (unsigned i = 0; i < proto_message_count; i++) {
		const struct proto_message_info *msg = &proto_messages[i];
		int op = proto_op_lookup(msg->method);
		if (strcmp(msg->part, PROTO_F_PARAMS) != 0 || msg->members == NULL)
			continue;
		/* The queue item's list is checked through its method's. */
		if (msg != &proto_messages[op])
			continue;
		params_text(msg->members, NULL, NULL, NULL, text, sizeof(text));
		if (decode(op, text, &u, &err) != 0)
			fail_msg("%s: all valid refused: %s (%s)", msg->method, err.message, text);
		/* An unknown member is ignored (a newer client's). */
		text[strlen(text) - 1] = '\0';
		strcat(text, strlen(text) > 1 ? ",\"zz_unknown\":1}" : "\"zz_unknown\":1}");
		assert_int_equal(decode(op, text, &u, &err), 0);
		for (const struct proto_member *m = msg->members; m->name; m++) {
			/* Absent: refused naming it when required, else fine. */
			params_text(msg->members, m->name, NULL, NULL, text, sizeof(text));
			int rc = decode(op, text, &u, &err);
			if (m->presence == PROTO_REQUIRED) {
				assert_int_equal(rc, -EINVAL);
				assert_int_equal(err.code, PROTO_E_PARAMS);
				assert_string_equal(err.field, m->name);
				assert_non_null(strstr(err.message, "is required"));
			} else {
				assert_int_equal(rc, 0);
			}
			/* The wrong JSON type: refused naming it. */
			params_text(msg->members, NULL, m->name, wrong, text, sizeof(text));
			assert_int_equal(decode(op, text, &u, &err), -EINVAL);
			assert_int_equal(err.code, PROTO_E_PARAMS);
			if (strcmp(err.field, m->name) != 0)
				fail_msg("%s.%s: refused on '%s'", msg->method, m->name, err.field);
			checked++;
		}
	}
	print_message("%u members of every method's params checked\n", checked);
	assert_true(checked >= 58); /* every member of every list, as of issue 26 */
}

/* alloc's bounds, on the general path and the hot path's check alike. */
static void test_alloc_bounds(void **state)
{
	(void)state;
	static const struct {
		const char *text, *field;
	} cases[] = {
	    {"{\"instance\":\"0000000000000001\",\"size\":\"0\"}", PROTO_F_SIZE},
	    {"{\"instance\":\"0000000000000001\",\"size\":\"1\",\"alignment\":\"128\"}",
	     PROTO_F_ALIGNMENT},
	    {"{\"instance\":\"0000000000000001\",\"size\":\"1\",\"alignment\":\"768\"}",
	     PROTO_F_ALIGNMENT},
	    {"{\"instance\":\"0000000000000001\",\"size\":\"1\",\"alignment\":\"4194304\"}",
	     PROTO_F_ALIGNMENT},
	    {"{\"instance\":\"0000000000000001\",\"size\":\"1\",\"wait_ms\":86400001}",
	     PROTO_F_WAIT_MS},
	    {"{\"instance\":\"0000000000000001\",\"size\":\"1\",\"wait_ms\":-1}", PROTO_F_WAIT_MS},
	    {"{\"instance\":\"000000000000000G\",\"size\":\"1\"}", PROTO_F_INSTANCE},
	    {"{\"instance\":\"0000000000000001\",\"size\":\"1\",\"type\":\"vram\"}", PROTO_F_TYPE},
	};
	union proto_params u;
	struct proto_error err, ferr;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		assert_int_equal(decode(PROTO_OP_ALLOC, cases[i].text, &u, &err), -EINVAL);
		assert_string_equal(err.field, cases[i].field);
		/* The hot path decodes the canonical frame, then the same check. */
		char frame[512];
		struct proto_fast_req r;
		snprintf(frame, sizeof(frame), "{\"id\":\"1\",\"params\":%s,\"method\":\"alloc\"}",
		         cases[i].text);
		if (proto_fast_request(frame, strlen(frame), &r) == 0) {
			memset(&ferr, 0, sizeof(ferr));
			assert_int_equal(proto_alloc_params_check(&r.alloc, &ferr), -EINVAL);
			assert_string_equal(ferr.message, err.message);
		}
	}
	/* The limits themselves pass, and the defaults stay unset. */
	assert_int_equal(decode(PROTO_OP_ALLOC,
	                        "{\"instance\":\"0000000000000001\",\"size\":\"1\",\"alignment\":"
	                        "\"" PROTO_STR(PROTO_MAX_ALIGNMENT) "\",\"wait_ms\":" PROTO_STR(
	                            PROTO_MAX_WAIT_MS) "}",
	                        &u, &err),
	                 0);
	assert_true(u.alloc.has_alignment && u.alloc.alignment == PROTO_MAX_ALIGNMENT);
	assert_int_equal(
	    decode(PROTO_OP_ALLOC, "{\"instance\":\"0000000000000001\",\"size\":\"1\"}", &u, &err),
	    0);
	assert_false(u.alloc.has_alignment || u.alloc.has_wait_ms || u.alloc.has_type);
}

/* The rules across members and elements: queued labels distinct, an axis
 * inside its shape, a partition name's characters, a token that is no hex
 * (decoded, but invalid: the daemon refuses every wrong token alike). */
static void test_cross_rules(void **state)
{
	(void)state;
	static union proto_params u;
	struct proto_error err;
	assert_int_equal(decode(PROTO_OP_QUEUE_REQUEST,
	                        "{\"instance\":\"0000000000000001\",\"requests\":[{\"label\":\"a\","
	                        "\"shape\":[2],\"elem_size\":4},{\"label\":\"a\",\"shape\":[2],"
	                        "\"elem_size\":4}]}",
	                        &u, &err),
	                 -EINVAL);
	assert_string_equal(err.field, PROTO_F_LABEL);
	assert_int_equal(decode(PROTO_OP_CHUNK_PARAMETERS,
	                        "{\"requests\":[{\"label\":\"a\",\"shape\":[2,3],\"elem_size\":4,"
	                        "\"axis\":2}]}",
	                        &u, &err),
	                 -EINVAL);
	assert_string_equal(err.field, PROTO_F_AXIS);
	assert_int_equal(decode(PROTO_OP_PARTITION_DESTROY, "{\"name\":\"a b\"}", &u, &err),
	                 -EINVAL);
	assert_string_equal(err.field, PROTO_F_NAME);
	assert_int_equal(decode(PROTO_OP_HELLO, "{\"versions\":[1],\"token\":\"zz\"}", &u, &err),
	                 0);
	assert_true(u.hello.has_token && !u.hello.token.valid && u.hello.versions);
	assert_int_equal(decode(PROTO_OP_HELLO, "{\"versions\":[7]}", &u, &err), 0);
	assert_false(u.hello.versions);
	assert_int_equal(decode(PROTO_OP_STATS, "{\"device\":64}", &u, &err), -EINVAL);
	assert_string_equal(err.field, PROTO_F_DEVICE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_every_method),
	    cmocka_unit_test(test_alloc_bounds),
	    cmocka_unit_test(test_cross_rules),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
