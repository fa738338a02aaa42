/*
 * test-broker-queue-host.c - queued array requests of host memory ("pinned"
 * and "mapped"), through the broker and the dispatcher without sockets:
 * host arrays do not count in the chunk count but are cut to the same chunk
 * length, allocate_queue makes them unclaimed host allocations (max_host_memory),
 * allocation_ready names each array's type, claim passes the descriptor,
 * free_label, invalidate_all and session close free them, and a refused
 * host array rolls the whole batch back.
 *
 * Shared helpers: broker-policy-helpers.h and session-helpers.h.
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

static void queue(struct broker *b, struct session *s, const struct broker_instance *inst,
                  const char *requests)
{
	struct reply r = {.fd = -1};
	request(b, s, &r,
	        "{\"id\":\"q\",\"method\":\"queue_request\",\"params\":{\"instance\":\"%016" PRIx64
	        "\",\"requests\":%s}}",
	        inst->id, requests);
	result_of(&r, "q");
	reply_done(&r);
	check(b);
}

/* allocate_queue on inst: its result's figure `key`. */
static uint64_t allocate(struct broker *b, struct session *s, const struct broker_instance *inst,
                         const char *key)
{
	struct reply r = {.fd = -1};
	request(b, s, &r,
	        "{\"id\":\"a\",\"method\":\"allocate_queue\",\"params\":{\"instance\":\"%016" PRIx64
	        "\"}}",
	        inst->id);
	uint64_t v = ju64(result_of(&r, "a"), key);
	reply_done(&r);
	check(b);
	return v;
}

/* The array labelled label in the last allocation_ready event sent to s. */
static const cJSON *ready_array(const struct session *s, const char *label)
{
	const cJSON *found = NULL;
	for (int i = 0; i < sent_count; i++) {
		const cJSON *ev = cJSON_GetObjectItemCaseSensitive(sent[i].root, "event");
		const cJSON *a;
		if (sent[i].s != s || !cJSON_IsString(ev) ||
		    strcmp(ev->valuestring, "allocation_ready") != 0)
			continue;
		cJSON_ArrayForEach(a, jget(jget(sent[i].root, "data"), "arrays"))
		{
			if (strcmp(jstr(a, "label"), label) == 0)
				found = a;
		}
	}
	if (!found)
		fail_msg("no allocation_ready for %s", label);
	return found;
}

static uint64_t shape_at(const cJSON *arr, int i)
{
	return (uint64_t)cJSON_GetArrayItem(jget(arr, "shape"), i)->valuedouble;
}

static void test_queue_host(void **state)
{
	struct broker *b = policy_broker(64 * MiB, POLICY_ACTIVE, 0);
	struct session *s = client(b, UID_A, "one"), *other = client(b, UID_A, "two");
	struct broker_instance *in = reg_p(b, s, 0, 0, "g");
	struct reply r = {.fd = -1};
	(void)state;

	/* 10000 runs of 8 KiB on the device: 82 MB for a 64 MiB cap, two
	 * chunks. The pinned array as large again would make it three if it
	 * counted; it is cut to the same 5000 runs all the same. The mapped
	 * table keeps its shape (one page of host memory). */
	queue(b, s, in,
	      "[{\"label\":\"state\",\"shape\":[10000,1024],\"elem_size\":8},"
	      "{\"label\":\"host\",\"shape\":[10000,1024],\"elem_size\":8,\"type\":\"pinned\"},"
	      "{\"label\":\"tab\",\"shape\":[100],\"elem_size\":4,\"type\":\"mapped\","
	      "\"unchunkable\":true}]");
	assert_int_equal(in->queued_count, 3);
	sent_clear();
	request(b, s, &r,
	        "{\"id\":\"a\",\"method\":\"allocate_queue\",\"params\":{\"instance\":\"%016" PRIx64
	        "\"}}",
	        in->id);
	const cJSON *res = result_of(&r, "a");
	assert_int_equal(ju64(res, "chunks"), 2);
	assert_int_equal(ju64(res, "chunk_length"), 5000);
	assert_int_equal(ju64(res, "chunk_bytes"), 5000 * 8192); /* device arrays only */
	reply_done(&r);
	check(b);
	assert_int_equal(in->used, 5000 * 8192);
	assert_int_equal(b->host_used, 5000 * 8192 + 4096);
	assert_int_equal(s->host_count, 2);

	const cJSON *dev = ready_array(s, "state"), *host = ready_array(s, "host"),
	            *tab = ready_array(s, "tab");
	assert_string_equal(jstr(dev, "type"), "device");
	assert_string_equal(jstr(host, "type"), "pinned");
	assert_string_equal(jstr(tab, "type"), "mapped");
	assert_int_equal(shape_at(host, 0), 5000);
	assert_int_equal(shape_at(host, 1), 1024);
	assert_int_equal(ju64(host, "size"), 5000 * 8192);
	assert_int_equal(shape_at(tab, 0), 100);
	assert_int_equal(ju64(tab, "size"), 4096);
	uint64_t host_id = jid(host, "id"), tab_id = jid(tab, "id");

	/* Claimed like a host alloc: the descriptor rides along. */
	request(b, s, &r,
	        "{\"id\":\"c\",\"method\":\"claim\",\"params\":{\"id\":\"%016" PRIx64 "\"}}",
	        host_id);
	res = result_of(&r, "c");
	assert_int_equal(jid(res, "id"), host_id);
	assert_string_equal(jstr(res, "type"), "pinned");
	assert_int_equal(ju64(res, "size"), 5000 * 8192);
	assert_true(cJSON_IsTrue(jget(res, "fd")));
	assert_string_equal(jstr(res, "label"), "host");
	assert_int_equal(jid(res, "instance"), in->id);
	assert_true(r.fd >= 0);
	assert_null(cJSON_GetObjectItemCaseSensitive(res, "handle"));
	reply_done(&r);
	check(b);
	expect_error_fmt(
	    b, s, PROTO_E_PARAMS, "id",
	    "{\"id\":\"e\",\"method\":\"claim\",\"params\":{\"id\":\"%016" PRIx64 "\"}}", host_id);
	/* Another connection of the same user cannot claim it. */
	expect_error_fmt(
	    b, other, PROTO_E_NOT_FOUND, NULL,
	    "{\"id\":\"e\",\"method\":\"claim\",\"params\":{\"id\":\"%016" PRIx64 "\"}}", tab_id);

	/* free_label frees host arrays, claimed or not. */
	request(b, s, &r,
	        "{\"id\":\"f\",\"method\":\"free_label\",\"params\":{\"label\":\"host\"}}");
	jarr(result_of(&r, "f"), "freed", 1);
	reply_done(&r);
	check(b);
	assert_int_equal(b->host_used, 4096);
	request(
	    b, s, &r,
	    "{\"id\":\"f\",\"method\":\"free_label\",\"params\":{\"label\":\"tab\",\"instance\":"
	    "\"%016" PRIx64 "\"}}",
	    in->id);
	jarr(result_of(&r, "f"), "freed", 1);
	reply_done(&r);
	check(b);
	assert_int_equal(b->host_used, 0);
	assert_int_equal(s->host_count, 0);
	assert_int_equal(in->used, 5000 * 8192);

	/* Host arrays only: one chunk, however large. */
	queue(b, s, in,
	      "[{\"label\":\"h\",\"shape\":[100000,1024],\"elem_size\":1,\"type\":"
	      "\"mapped\"}]");
	assert_int_equal(allocate(b, s, in, "chunks"), 1);
	assert_int_equal(b->host_used, 100000 * 1024);
	/* invalidate_all releases unclaimed host arrays too. */
	struct session *admin = client(b, 0, "root");
	request(b, admin, &r, "{\"id\":\"i\",\"method\":\"invalidate_all\"}");
	assert_int_equal(ju64(result_of(&r, "i"), "allocations"), 2);
	reply_done(&r);
	check(b);
	assert_int_equal(b->host_used, 0);
	assert_int_equal(in->used, 0);

	/* So does the session's end. */
	queue(b, s, in, "[{\"label\":\"h\",\"shape\":[10],\"elem_size\":1,\"type\":\"pinned\"}]");
	allocate(b, s, in, "chunks");
	assert_int_equal(b->host_used, 4096);
	broker_session_close(b, s);
	check(b);
	assert_int_equal(b->host_used, 0);
	assert_int_equal(b->hosts.count, 0);
	broker_done(b);
}

static void test_queue_host_refused(void **state)
{
	struct broker *b = policy_broker(64 * MiB, POLICY_PASSIVE, 0);
	struct session *s = client(b, UID_A, "one");
	struct broker_instance *in = reg_p(b, s, 0, 0, "g");
	struct reply r = {.fd = -1};
	(void)state;

	/* Over max_host_memory: the device array made first goes back, the
	 * queue stays. */
	b->limits.max_host_memory = 1 * MiB;
	queue(b, s, in,
	      "[{\"label\":\"d\",\"shape\":[100],\"elem_size\":8},"
	      "{\"label\":\"p\",\"shape\":[1024,1024],\"elem_size\":8,\"type\":\"pinned\"}]");
	request(b, s, &r,
	        "{\"id\":\"e\",\"method\":\"allocate_queue\",\"params\":{\"instance\":\"%016" PRIx64
	        "\"}}",
	        in->id);
	assert_int_equal(r.r.code, PROTO_E_NO_MEMORY);
	assert_non_null(strstr(r.r.message, "max_host_memory"));
	reply_done(&r);
	check(b);
	assert_int_equal(in->used, 0);
	assert_int_equal(b->allocs.count, 0);
	assert_int_equal(b->host_used, 0);
	assert_int_equal(in->queued_count, 2);

	/* A host array made before a refused device one goes back too. */
	queue(b, s, in,
	      "[{\"label\":\"p\",\"shape\":[1024],\"elem_size\":8,\"type\":\"pinned\"},"
	      "{\"label\":\"d\",\"shape\":[100],\"elem_size\":8,\"unchunkable\":true},"
	      "{\"label\":\"e\",\"shape\":[65536,1024],\"elem_size\":1,\"unchunkable\":true}]");
	request(b, s, &r,
	        "{\"id\":\"e\",\"method\":\"allocate_queue\",\"params\":{\"instance\":\"%016" PRIx64
	        "\"}}",
	        in->id);
	assert_int_equal(r.r.code, PROTO_E_NO_MEMORY);
	reply_done(&r);
	check(b);
	assert_int_equal(b->host_used, 0);
	assert_int_equal(b->hosts.count, 0);
	assert_int_equal(in->used, 0);

	/* managed stays refused; an unknown type is a parameter error. */
	expect_error_fmt(b, s, PROTO_E_NOT_SUPPORTED, NULL,
	                 "{\"id\":\"e\",\"method\":\"queue_request\",\"params\":{\"instance\":"
	                 "\"%016" PRIx64 "\",\"requests\":[{\"label\":\"x\",\"shape\":[1],"
	                 "\"elem_size\":1,\"type\":\"managed\"}]}}",
	                 in->id);
	expect_error_fmt(b, s, PROTO_E_PARAMS, "type",
	                 "{\"id\":\"e\",\"method\":\"queue_request\",\"params\":{\"instance\":"
	                 "\"%016" PRIx64 "\",\"requests\":[{\"label\":\"x\",\"shape\":[1],"
	                 "\"elem_size\":1,\"type\":\"host\"}]}}",
	                 in->id);

	/* chunk_parameters: the same rule. A pinned array does not change the
	 * count (100 runs of 12 bytes, rounded to 256, in 1000 bytes: 2 chunks
	 * of 50), but it is cut to 50 runs; alone it is one chunk. */
	request(b, s, &r,
	        "{\"id\":\"p\",\"method\":\"chunk_parameters\",\"params\":{\"available\":\"1000\","
	        "\"requests\":[{\"label\":\"r\",\"shape\":[3,100],\"elem_size\":4,\"axis\":1},"
	        "{\"label\":\"h\",\"shape\":[100,4096],\"elem_size\":8,\"type\":\"pinned\"}]}}");
	const cJSON *res = result_of(&r, "p");
	assert_int_equal(ju64(res, "chunks"), 2);
	assert_int_equal(ju64(res, "chunk_length"), 50);
	assert_int_equal(shape_at(cJSON_GetArrayItem(jarr(res, "arrays", 2), 1), 0), 50);
	reply_done(&r);
	request(b, s, &r,
	        "{\"id\":\"p\",\"method\":\"chunk_parameters\",\"params\":{\"available\":\"1000\","
	        "\"requests\":[{\"label\":\"h\",\"shape\":[100,4096],\"elem_size\":8,\"type\":"
	        "\"mapped\"}]}}");
	res = result_of(&r, "p");
	assert_int_equal(ju64(res, "chunks"), 1);
	assert_int_equal(ju64(res, "chunk_length"), 100);
	assert_int_equal(ju64(res, "available"), 1000);
	reply_done(&r);
	request(b, s, &r,
	        "{\"id\":\"p\",\"method\":\"chunk_parameters\",\"params\":{\"chunk_length\":30,"
	        "\"requests\":[{\"label\":\"h\",\"shape\":[100],\"elem_size\":8,\"type\":"
	        "\"mapped\"}]}}");
	res = result_of(&r, "p");
	assert_int_equal(ju64(res, "chunks"), 4);
	assert_int_equal(ju64(res, "chunk_length"), 30);
	reply_done(&r);
	broker_done(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_teardown(test_queue_host, sent_teardown),
	    cmocka_unit_test_teardown(test_queue_host_refused, sent_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
