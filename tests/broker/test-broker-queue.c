/*
 * test-broker-queue.c - queued requests of a stream group, through the
 * broker and the dispatcher without sockets: queue_request and its
 * refusals, allocate_queue chunking a group's batch across its members,
 * claim, free_label, chunk_parameters, and invalidate_all.
 *
 * Shared helpers: broker-policy-helpers.h (the fake sender records the
 * allocation_ready events) and session-helpers.h.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "broker.h"
#include "broker_internal.h"
#include "dispatch.h"
#include "policy.h"
#include "proto.h"

#include "session-helpers.h"
#include "broker-policy-helpers.h"

/* ---- queued requests --------------------------------------------------------- */

static void queue_ok(struct broker *b, struct session *s, const struct broker_instance *inst,
                     const char *requests, int queued)
{
	struct reply r = {.fd = -1};
	request(b, s, &r,
	        "{\"id\":\"q\",\"method\":\"queue_request\",\"params\":{\"instance\":\"%016" PRIx64
	        "\",\"requests\":%s}}",
	        inst->id, requests);
	assert_int_equal(jnum(result_of(&r, "q"), "queued"), queued);
	reply_done(&r);
	check(b);
}

/* The id of label in the allocation_ready event sent to s. */
static uint64_t ready_id(const struct session *s, const char *label, const cJSON **shape)
{
	for (int i = 0; i < sent_count; i++) {
		const cJSON *ev = cJSON_GetObjectItemCaseSensitive(sent[i].root, "event");
		const cJSON *a;
		if (sent[i].s != s || !cJSON_IsString(ev) ||
		    strcmp(ev->valuestring, "allocation_ready") != 0)
			continue;
		cJSON_ArrayForEach(a, jget(jget(sent[i].root, "data"), "arrays"))
		{
			if (strcmp(jstr(a, "label"), label) == 0) {
				if (shape)
					*shape = jget(a, "shape");
				return jid(a, "id");
			}
		}
	}
	fail_msg("no allocation_ready for %s", label);
	return 0;
}

static void test_queue_allocate(void **state)
{
	struct broker *b = policy_broker(64 * MiB, POLICY_ACTIVE, 0);
	struct session *s[3];
	struct broker_instance *in[3];
	struct reply r = {.fd = -1};
	const cJSON *shape;
	(void)state;

	/* Three connections of one user: stream groups are per user. */
	for (int i = 0; i < 3; i++) {
		s[i] = client(b, UID_A, "member");
		in[i] = reg_p(b, s[i], 0, 0, "g");
	}
	struct broker_instance *outsider = reg_p(b, s[0], 1, 0, NULL);
	/* Another user's "g" (on the other device, so that the caps above
	 * stay): another group, whose queue the first one's never takes. */
	struct session *stranger = client(b, UID_B, "stranger");
	struct broker_instance *sg = reg_p(b, stranger, 1, 0, "g");
	sent_clear();
	queue_ok(b, stranger, sg, "[{\"label\":\"mine\",\"shape\":[64],\"elem_size\":8}]", 1);
	/* 10000 runs of 8 KiB each and a small table: 82 MB a member, four
	 * times what each member's cap (a third of 64 MiB) can hold. */
	for (int i = 0; i < 3; i++)
		queue_ok(
		    b, s[i], in[i],
		    "[{\"label\":\"state\",\"shape\":[10000,1024],\"elem_size\":8},"
		    "{\"label\":\"params\",\"shape\":[1024],\"elem_size\":8,\"unchunkable\":true}]",
		    2);
	/* Requeueing a label replaces it. */
	queue_ok(b, s[2], in[2],
	         "[{\"label\":\"params\",\"shape\":[1024],\"elem_size\":8,"
	         "\"unchunkable\":true}]",
	         2);
	assert_int_equal(in[2]->queued_count, 2);
	/* Nothing to allocate outside the group. */
	expect_error_fmt(b, s[0], PROTO_E_PARAMS, "instance",
	                 "{\"id\":\"e\",\"method\":\"allocate_queue\",\"params\":{\"instance\":"
	                 "\"%016" PRIx64 "\"}}",
	                 outsider->id);
	/* Another member's instance: not for a non-admin. Another user's
	 * instance: not there at all, as an unknown one. */
	expect_error_fmt(b, s[1], PROTO_E_PERMISSION, NULL,
	                 "{\"id\":\"e\",\"method\":\"allocate_queue\",\"params\":{\"instance\":"
	                 "\"%016" PRIx64 "\"}}",
	                 in[0]->id);
	expect_error_fmt(b, stranger, PROTO_E_NOT_FOUND, NULL,
	                 "{\"id\":\"e\",\"method\":\"allocate_queue\",\"params\":{\"instance\":"
	                 "\"%016" PRIx64 "\"}}",
	                 in[0]->id);

	request(b, s[1], &r,
	        "{\"id\":\"a\",\"method\":\"allocate_queue\",\"params\":{\"instance\":\"%016" PRIx64
	        "\"}}",
	        in[1]->id);
	const cJSON *res = result_of(&r, "a");
	assert_string_equal(jstr(res, "group"), "g");
	assert_int_equal(jnum(res, "members"), 3);
	assert_int_equal(ju64(res, "axis_length"), 10000);
	assert_int_equal(ju64(res, "chunks"), 4);
	assert_int_equal(ju64(res, "chunk_length"), 2500);
	assert_int_equal(ju64(res, "request_bytes"), 3 * (10000 * 8192 + 8192));
	assert_int_equal(ju64(res, "chunk_bytes"), 3 * (2500 * 8192 + 8192));
	assert_null(cJSON_GetObjectItemCaseSensitive(res, "warnings"));
	reply_done(&r);
	check(b);
	/* Every member heard its part, each charged to its own instance. */
	for (int i = 0; i < 3; i++) {
		assert_int_equal(sent_to(s[i], "allocation_ready"), 1);
		assert_int_equal(in[i]->used, 2500 * 8192 + 8192);
		assert_true(in[i]->used <= in[i]->pol.cap);
		assert_int_equal(in[i]->queued_count, 0);
		ready_id(s[i], "state", &shape);
		assert_int_equal(cJSON_GetArrayItem(shape, 0)->valuedouble, 2500);
		assert_int_equal(cJSON_GetArrayItem(shape, 1)->valuedouble, 1024);
		ready_id(s[i], "params", &shape);
		assert_int_equal(cJSON_GetArrayItem(shape, 0)->valuedouble, 1024);
	}
	/* The other user's "g" was left alone. */
	assert_int_equal(sent_to(stranger, "allocation_ready"), 0);
	assert_int_equal(sg->queued_count, 1);
	assert_int_equal(sg->used, 0);
	request(b, stranger, &r,
	        "{\"id\":\"s\",\"method\":\"allocate_queue\",\"params\":{\"instance\":\"%016" PRIx64
	        "\"}}",
	        sg->id);
	assert_int_equal(jnum(result_of(&r, "s"), "members"), 1);
	reply_done(&r);
	assert_int_equal(sent_to(stranger, "allocation_ready"), 1);
	assert_int_equal(sg->used, 512);
	/* Claims: the first one in a slab carries its handle and descriptor. */
	uint64_t state0 = ready_id(s[0], "state", NULL);
	request(b, s[0], &r,
	        "{\"id\":\"c\",\"method\":\"claim\",\"params\":{\"id\":\"%016" PRIx64 "\"}}",
	        state0);
	res = result_of(&r, "c");
	assert_int_equal(jid(res, "id"), state0);
	assert_int_equal(ju64(res, "size"), 2500 * 8192);
	assert_non_null(cJSON_GetObjectItemCaseSensitive(res, "handle"));
	assert_true(r.fd >= 0);
	reply_done(&r);
	check(b);
	expect_error_fmt(
	    b, s[0], PROTO_E_PARAMS, "id",
	    "{\"id\":\"e\",\"method\":\"claim\",\"params\":{\"id\":\"%016" PRIx64 "\"}}", state0);
	expect_error_fmt(
	    b, s[1], PROTO_E_NOT_FOUND, NULL,
	    "{\"id\":\"e\",\"method\":\"claim\",\"params\":{\"id\":\"%016" PRIx64 "\"}}", state0);
	/* Free by label, claimed or not. */
	request(b, s[1], &r,
	        "{\"id\":\"f\",\"method\":\"free_label\",\"params\":{\"label\":\"state\"}}");
	jarr(result_of(&r, "f"), "freed", 1);
	reply_done(&r);
	check(b);
	broker_done(b);
}

static void test_queue_more(void **state)
{
	struct broker *b = policy_broker(64 * MiB, POLICY_PASSIVE, 0);
	struct session *admin = client(b, 0, "root"), *s1 = client(b, UID_A, "one");
	struct broker_instance *a = reg_p(b, s1, 0, 0, "g");
	struct reply r = {.fd = -1};
	(void)state;

	/* Malformed requests, each on its field. */
	static const struct {
		const char *requests, *field;
	} bad[] = {
	    {"[]", "requests"},
	    {"{}", "requests"},
	    {"[5]", "requests"},
	    {"[{\"shape\":[1],\"elem_size\":1}]", "label"},
	    {"[{\"label\":\"\",\"shape\":[1],\"elem_size\":1}]", "label"},
	    {"[{\"label\":\"x\",\"elem_size\":1}]", "shape"},
	    {"[{\"label\":\"x\",\"shape\":[],\"elem_size\":1}]", "shape"},
	    {"[{\"label\":\"x\",\"shape\":[0],\"elem_size\":1}]", "shape"},
	    {"[{\"label\":\"x\",\"shape\":[1.5],\"elem_size\":1}]", "shape"},
	    {"[{\"label\":\"x\",\"shape\":[\"1\"],\"elem_size\":1}]", "shape"},
	    {"[{\"label\":\"x\",\"shape\":[1,1,1,1,1,1,1,1,1],\"elem_size\":1}]", "shape"},
	    {"[{\"label\":\"x\",\"shape\":[1]}]", "elem_size"},
	    {"[{\"label\":\"x\",\"shape\":[1],\"elem_size\":0}]", "elem_size"},
	    {"[{\"label\":\"x\",\"shape\":[1],\"elem_size\":1,\"axis\":1}]", "axis"},
	    {"[{\"label\":\"x\",\"shape\":[1],\"elem_size\":1,\"unchunkable\":1}]", "unchunkable"},
	    {"[{\"label\":\"x\",\"shape\":[1],\"elem_size\":1,\"type\":\"host\"}]", "type"},
	    {"[{\"label\":\"x\",\"shape\":[4294967296,4294967296],\"elem_size\":8}]", "shape"},
	    {"[{\"label\":\"x\",\"shape\":[1],\"elem_size\":1},{\"label\":\"x\",\"shape\":[1],"
	     "\"elem_size\":1}]",
	     "label"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		expect_error_fmt(
		    b, s1, PROTO_E_PARAMS, bad[i].field,
		    "{\"id\":\"e\",\"method\":\"queue_request\",\"params\":{\"instance\":"
		    "\"%016" PRIx64 "\",\"requests\":%s}}",
		    a->id, bad[i].requests);
	expect_error_fmt(b, s1, PROTO_E_NOT_SUPPORTED, NULL,
	                 "{\"id\":\"e\",\"method\":\"queue_request\",\"params\":{\"instance\":"
	                 "\"%016" PRIx64 "\",\"requests\":[{\"label\":\"x\",\"shape\":[1],"
	                 "\"elem_size\":1,\"type\":\"managed\"}]}}",
	                 a->id);
	assert_int_equal(a->queued_count, 0);
	/* Standalone chunking: explicit memory, or a group's. */
	request(b, s1, &r,
	        "{\"id\":\"p\",\"method\":\"chunk_parameters\",\"params\":{\"available\":\"1000\","
	        "\"requests\":[{\"label\":\"r\",\"shape\":[3,100],\"elem_size\":4,\"axis\":1},"
	        "{\"label\":\"t\",\"shape\":[10],\"elem_size\":1,\"unchunkable\":true}]}}");
	const cJSON *res = result_of(&r, "p");
	/* 100 runs of 12 bytes, each array rounded up to 256: the table takes
	 * 256, the rest 512 at most (42 runs), so 3 chunks of 34. */
	assert_int_equal(ju64(res, "chunks"), 3);
	assert_int_equal(ju64(res, "chunk_length"), 34);
	const cJSON *arrs = jarr(res, "arrays", 2);
	assert_string_equal(jstr(cJSON_GetArrayItem(arrs, 0), "label"), "r");
	const cJSON *sh = jarr(cJSON_GetArrayItem(arrs, 0), "shape", 2);
	assert_int_equal(cJSON_GetArrayItem(sh, 0)->valuedouble, 3);
	assert_int_equal(cJSON_GetArrayItem(sh, 1)->valuedouble, 34);
	jarr(cJSON_GetArrayItem(arrs, 1), "shape", 1);
	reply_done(&r);
	request(b, s1, &r,
	        "{\"id\":\"p\",\"method\":\"chunk_parameters\",\"params\":{\"group\":\"g\","
	        "\"requests\":[{\"label\":\"r\",\"shape\":[100],\"elem_size\":4}]}}");
	assert_int_equal(ju64(result_of(&r, "p"), "available"), 64 * MiB);
	reply_done(&r);
	expect_error_fmt(
	    b, s1, PROTO_E_NOT_FOUND, NULL,
	    "{\"id\":\"e\",\"method\":\"chunk_parameters\",\"params\":{\"group\":\"x\","
	    "\"requests\":[{\"label\":\"r\",\"shape\":[100],\"elem_size\":4}]}}");
	expect_error_fmt(b, s1, PROTO_E_PARAMS, "group",
	                 "{\"id\":\"e\",\"method\":\"chunk_parameters\",\"params\":{\"requests\":"
	                 "[{\"label\":\"r\",\"shape\":[100],\"elem_size\":4}]}}");
	/* compute_chunked_shapes: a chunk length instead of memory to fit. */
	request(b, s1, &r,
	        "{\"id\":\"p\",\"method\":\"chunk_parameters\",\"params\":{\"chunk_length\":30,"
	        "\"requests\":[{\"label\":\"r\",\"shape\":[3,100],\"elem_size\":4,\"axis\":1},"
	        "{\"label\":\"t\",\"shape\":[10],\"elem_size\":1,\"unchunkable\":true}]}}");
	res = result_of(&r, "p");
	assert_int_equal(ju64(res, "chunks"), 4);
	assert_int_equal(ju64(res, "chunk_length"), 30);
	sh = jarr(cJSON_GetArrayItem(jarr(res, "arrays", 2), 0), "shape", 2);
	assert_int_equal(cJSON_GetArrayItem(sh, 1)->valuedouble, 30);
	sh = jarr(cJSON_GetArrayItem(jarr(res, "arrays", 2), 1), "shape", 1);
	assert_int_equal(cJSON_GetArrayItem(sh, 0)->valuedouble, 10);
	reply_done(&r);
	/* Exactly one of the three. */
	expect_error_fmt(
	    b, s1, PROTO_E_PARAMS, "group",
	    "{\"id\":\"e\",\"method\":\"chunk_parameters\",\"params\":{\"chunk_length\":3,"
	    "\"available\":\"100\",\"requests\":[{\"label\":\"r\",\"shape\":[100],"
	    "\"elem_size\":4}]}}");
	expect_error_fmt(
	    b, s1, PROTO_E_PARAMS, "chunk_length",
	    "{\"id\":\"e\",\"method\":\"chunk_parameters\",\"params\":{\"chunk_length\":0,"
	    "\"requests\":[{\"label\":\"r\",\"shape\":[100],\"elem_size\":4}]}}");
	request(b, s1, &r,
	        "{\"id\":\"e\",\"method\":\"chunk_parameters\",\"params\":{\"available\":\"100\","
	        "\"requests\":[{\"label\":\"r\",\"shape\":[100],\"elem_size\":4096}]}}");
	assert_int_equal(r.r.code, PROTO_E_NO_MEMORY);
	assert_int_equal(ju64(r.r.data, "requested"), 4096);
	reply_done(&r);
	/* A batch that cannot fit even one run: nothing allocated, queue kept. */
	queue_ok(b, s1, a, "[{\"label\":\"big\",\"shape\":[4,16777216],\"elem_size\":8}]", 1);
	request(b, s1, &r,
	        "{\"id\":\"e\",\"method\":\"allocate_queue\",\"params\":{\"instance\":\"%016" PRIx64
	        "\"}}",
	        a->id);
	assert_int_equal(r.r.code, PROTO_E_NO_MEMORY);
	reply_done(&r);
	assert_int_equal(a->queued_count, 1);
	assert_int_equal(a->used, 0);
	/* A request far beyond the memory warns (and chunks). */
	queue_ok(b, s1, a, "[{\"label\":\"big\",\"shape\":[2000,1048576],\"elem_size\":1}]", 1);
	request(b, s1, &r,
	        "{\"id\":\"w\",\"method\":\"allocate_queue\",\"params\":{\"instance\":\"%016" PRIx64
	        "\"}}",
	        a->id);
	res = result_of(&r, "w");
	jarr(res, "warnings", 1);
	assert_int_equal(ju64(res, "chunk_length"), 63); /* 32 chunks */
	reply_done(&r);
	check(b);
	/* free_label: unknown label. */
	expect_error_fmt(
	    b, s1, PROTO_E_NOT_FOUND, NULL,
	    "{\"id\":\"e\",\"method\":\"free_label\",\"params\":{\"label\":\"nope\"}}");
	/* invalidate_all: for admins; everything goes, everyone hears. */
	struct broker_grant g = alloc_ok(b, s1, a, 4096, 0);
	struct session *s2 = client(b, UID_A, "two");
	struct broker_grant att;
	assert_int_equal(broker_attach(b, s2, g.id, &att), 0);
	queue_ok(b, s1, a, "[{\"label\":\"x\",\"shape\":[1],\"elem_size\":1}]", 1);
	expect_error_fmt(b, s1, PROTO_E_PERMISSION, NULL,
	                 "{\"id\":\"e\",\"method\":\"invalidate_all\"}");
	sent_clear();
	request(b, admin, &r, "{\"id\":\"i\",\"method\":\"invalidate_all\"}");
	res = result_of(&r, "i");
	assert_int_equal(ju64(res, "allocations"), 2);
	assert_int_equal(ju64(res, "attachments"), 1);
	reply_done(&r);
	check(b);
	assert_int_equal(sent_to(s1, "invalidate"), 1);
	assert_int_equal(sent_to(s2, "invalidate"), 1);
	assert_int_equal(sent_to(admin, "invalidate"), 1);
	assert_int_equal(a->used, 0);
	assert_int_equal(a->queued_count, 0);
	assert_int_equal(s2->attached.count, 0);
	assert_int_equal(b->allocs.count, 0);
	/* Both sides start afresh: the next grant carries its handle again. */
	g = alloc_ok(b, s1, a, 4096, 0);
	assert_non_null(g.handle);
	broker_done(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_teardown(test_queue_allocate, sent_teardown),
	    cmocka_unit_test_teardown(test_queue_more, sent_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
