/*
 * test-dispatch-lease.c - lease, lease_return and lease_carve through the
 * dispatcher, frame by frame: the replies' shapes (an alloc grant, the
 * carve's {id, size}), the figures mem_info, stats, clients and metrics
 * show, and bad input (a lease of 0, larger than a slab, over the cap,
 * past max_leases, for another's instance, under allocator direct; a
 * return of a lease not the caller's or twice; a carve outside its lease),
 * each a clear error with nothing lost: broker_check() after every step.
 * Shared helpers: session-helpers.h.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "broker.h"
#include "broker_internal.h"
#include "proto.h"

#include "session-helpers.h"

/* Registers an instance (proportion: none when 0) and returns its id. */
static uint64_t register_instance(struct broker *b, struct session *s, double proportion)
{
	struct reply r = {.fd = -1};
	if (proportion > 0)
		request(b, s, &r,
		        "{\"id\":\"r\",\"method\":\"register\",\"params\":{\"name\":\"l\","
		        "\"proportion\":%g}}",
		        proportion);
	else
		request(b, s, &r,
		        "{\"id\":\"r\",\"method\":\"register\",\"params\":{\"name\":\"l\"}}");
	uint64_t inst = jid(result_of(&r, "r"), "instance");
	reply_done(&r);
	return inst;
}

/* A lease granted through the dispatcher: its grant, checked against the
 * alloc grant's member list; *size its bytes. */
static uint64_t lease_req(struct broker *b, struct session *s, uint64_t inst, const char *size,
                          const char *in_use, uint64_t *granted)
{
	struct reply r = {.fd = -1};
	if (in_use)
		request(b, s, &r,
		        "{\"id\":\"l\",\"method\":\"lease\",\"params\":{\"instance\":\"%016" PRIx64
		        "\",\"size\":\"%s\",\"in_use\":\"%s\"}}",
		        inst, size, in_use);
	else
		request(b, s, &r,
		        "{\"id\":\"l\",\"method\":\"lease\",\"params\":{\"instance\":\"%016" PRIx64
		        "\",\"size\":\"%s\"}}",
		        inst, size);
	const cJSON *res = result_of(&r, "l");
	check_members(res, PROTO_MEMBER_TABLE(PROTO_GRANT_RESULT));
	uint64_t id = jid(res, "id");
	*granted = ju64(res, "size");
	assert_int_equal(ju64(res, "offset") % (2 * MiB), 0);
	/* A descriptor with the slab's handle, none without. */
	assert_true(cJSON_GetObjectItemCaseSensitive(res, "handle") ? r.fd >= 0 : r.fd == -1);
	reply_done(&r);
	check(b);
	return id;
}

static uint64_t carve_req(struct broker *b, struct session *s, uint64_t lease, uint64_t offset,
                          uint64_t size, uint64_t rounded)
{
	struct reply r = {.fd = -1};
	request(b, s, &r,
	        "{\"id\":\"c\",\"method\":\"lease_carve\",\"params\":{\"lease\":\"%016" PRIx64
	        "\",\"offset\":\"%" PRIu64 "\",\"size\":\"%" PRIu64 "\"}}",
	        lease, offset, size);
	const cJSON *res = result_of(&r, "c");
	check_members(res, PROTO_MEMBER_TABLE(PROTO_CARVE_RESULT));
	uint64_t id = jid(res, "id");
	assert_int_equal(ju64(res, "size"), rounded);
	reply_done(&r);
	check(b);
	return id;
}

/* An error reply to a formatted frame, then selfcheck. */
#define expect_lease_error(b, s, code, field, ...)                                                 \
	do {                                                                                       \
		expect_error_fmt((b), (s), (code), (field), __VA_ARGS__);                          \
		check(b);                                                                          \
	} while (0)

static void return_req(struct broker *b, struct session *s, uint64_t lease, int code,
                       const char *field)
{
	if (code) {
		expect_lease_error(
		    b, s, code, field,
		    "{\"id\":\"e\",\"method\":\"lease_return\",\"params\":{\"lease\":"
		    "\"%016" PRIx64 "\",\"in_use\":\"0\"}}",
		    lease);
		return;
	}
	struct reply r = {.fd = -1};
	request(b, s, &r,
	        "{\"id\":\"lr\",\"method\":\"lease_return\",\"params\":{\"lease\":\"%016" PRIx64
	        "\",\"in_use\":\"512\"}}",
	        lease);
	assert_int_equal(cJSON_GetArraySize(result_of(&r, "lr")), 0);
	reply_done(&r);
	check(b);
}

/* Grants, carves and returns, and the figures that show them. */
static void test_dispatch_lease_figures(void **state)
{
	struct broker *b = broker_new_slab(64 * MiB, 8 * MiB, 0, 0);
	struct session *s = open_session(b, UID_A, 1);
	struct reply r = {.fd = -1};
	uint64_t size;
	(void)state;

	hello(b, s, "lease");
	uint64_t inst = register_instance(b, s, 0);
	uint64_t l1 = lease_req(b, s, inst, "4096", "0", &size);
	assert_int_equal(size, 2 * MiB);
	uint64_t l2 = lease_req(b, s, inst, "1", "100", &size);
	assert_int_equal(size, 4 * MiB);

	request(b, s, &r, "{\"id\":\"m\",\"method\":\"mem_info\"}");
	const cJSON *o = cJSON_GetArrayItem(jarr(result_of(&r, "m"), "instances", 1), 0);
	assert_int_equal(ju64(o, "used"), 6 * MiB);
	assert_int_equal(ju64(o, "leased"), 6 * MiB);
	assert_int_equal(jnum(o, "leases"), 2);
	assert_int_equal(ju64(o, "in_use"), 100);
	reply_done(&r);
	request(b, s, &r, "{\"id\":\"s\",\"method\":\"stats\",\"params\":{\"device\":0}}");
	o = cJSON_GetArrayItem(jarr(result_of(&r, "s"), "devices", 1), 0);
	assert_int_equal(ju64(o, "leased"), 6 * MiB);
	assert_int_equal(ju64(o, "in_use"), 100);
	assert_int_equal(ju64(o, "used"), 6 * MiB);
	reply_done(&r);
	request(b, s, &r, "{\"id\":\"c\",\"method\":\"clients\"}");
	o = cJSON_GetArrayItem(jarr(result_of(&r, "c"), "clients", 1), 0);
	assert_int_equal(ju64(o, "leased"), 6 * MiB);
	assert_int_equal(ju64(o, "in_use"), 100);
	assert_int_equal(jnum(o, "allocations"), 2);
	reply_done(&r);
	request(b, s, &r, "{\"id\":\"x\",\"method\":\"metrics\"}");
	const char *text = jstr(result_of(&r, "x"), "text");
	assert_non_null(strstr(text, "gpubroker_device_leased_bytes{device=\"0\","));
	assert_non_null(strstr(text, "\"} 6291456\n"));
	assert_non_null(strstr(text, "gpubroker_leases{device=\"0\","));
	assert_non_null(strstr(text, "gpubroker_instance_lease_in_use_bytes{"));
	reply_done(&r);

	/* A carve: its own id and size; the lease waits for its end. */
	uint64_t c = carve_req(b, s, l2, 65536, 1000, 1024);
	return_req(b, s, l2, PROTO_E_PARAMS, "lease");
	request(b, s, &r,
	        "{\"id\":\"a\",\"method\":\"attach\",\"params\":{\"id\":\"%016" PRIx64 "\"}}", c);
	/* Its own connection attaches it like any allocation... */
	assert_int_equal(ju64(result_of(&r, "a"), "size"), 1024);
	reply_done(&r);
	request(b, s, &r,
	        "{\"id\":\"d\",\"method\":\"detach\",\"params\":{\"id\":\"%016" PRIx64 "\"}}", c);
	result_of(&r, "d");
	reply_done(&r);
	request(b, s, &r,
	        "{\"id\":\"f\",\"method\":\"free\",\"params\":{\"id\":\"%016" PRIx64 "\"}}", c);
	result_of(&r, "f");
	reply_done(&r);
	return_req(b, s, l2, 0, NULL);
	return_req(b, s, l1, 0, NULL);
	assert_int_equal(broker_instance_find(s, inst)->in_use, 512);
	assert_int_equal(dev_stats(b, 0).used, 0);
	broker_done(b);
}

/* Bad input: each a clear error, and nothing granted, lost or changed. */
static void test_dispatch_lease_bad_input(void **state)
{
	struct broker *b = broker_new_slab(64 * MiB, 8 * MiB, 0, 0);
	struct session *s = open_session(b, UID_A, 1), *other = open_session(b, UID_A, 2);
	uint64_t size, allocs, attachments;
	(void)state;

	hello(b, s, "lease");
	hello(b, other, "other");
	assert_int_equal(broker_set_mode(b, POLICY_ACTIVE), 0);
	uint64_t inst = register_instance(b, s, 0.125); /* a cap of 8 MiB */
	uint64_t theirs = register_instance(b, other, 0);
	static const char *const bad_sizes[] = {"0", "-1", "1e3", "18446744073709551616"};
	for (size_t i = 0; i < sizeof(bad_sizes) / sizeof(bad_sizes[0]); i++)
		expect_lease_error(b, s, PROTO_E_PARAMS, "size",
		                   "{\"id\":\"e\",\"method\":\"lease\",\"params\":{\"instance\":"
		                   "\"%016" PRIx64 "\",\"size\":\"%s\"}}",
		                   inst, bad_sizes[i]);
	expect_lease_error(b, s, PROTO_E_PARAMS, "size",
	                   "{\"id\":\"e\",\"method\":\"lease\",\"params\":{\"instance\":"
	                   "\"%016" PRIx64 "\"}}",
	                   inst);
	/* Larger than a slab: an alloc, not a lease. */
	expect_lease_error(b, s, PROTO_E_PARAMS, "size",
	                   "{\"id\":\"e\",\"method\":\"lease\",\"params\":{\"instance\":"
	                   "\"%016" PRIx64 "\",\"size\":\"%llu\"}}",
	                   inst, 8 * MiB + 1);
	expect_lease_error(b, s, PROTO_E_PARAMS, "in_use",
	                   "{\"id\":\"e\",\"method\":\"lease\",\"params\":{\"instance\":"
	                   "\"%016" PRIx64 "\",\"size\":\"1\",\"in_use\":1}}",
	                   inst);
	/* Another connection's instance, of the same user too; none at all. */
	expect_lease_error(b, s, PROTO_E_NOT_FOUND, NULL,
	                   "{\"id\":\"e\",\"method\":\"lease\",\"params\":{\"instance\":"
	                   "\"%016" PRIx64 "\",\"size\":\"1\"}}",
	                   theirs);
	expect_lease_error(b, s, PROTO_E_NOT_FOUND, NULL,
	                   "{\"id\":\"e\",\"method\":\"lease\",\"params\":{\"instance\":"
	                   "\"%016" PRIx64 "\",\"size\":\"1\"}}",
	                   (uint64_t)0x4242);
	assert_int_equal(b->allocs.count, 0);

	/* Over the cap: shrunk to it first, then -32003 with alloc's data. */
	uint64_t l1 = lease_req(b, s, inst, "1", NULL, &size);
	lease_req(b, s, inst, "1", NULL, &size);
	lease_req(b, s, inst, "1", NULL, &size);
	assert_int_equal(size, 2 * MiB);
	struct reply r = {.fd = -1};
	request(b, s, &r,
	        "{\"id\":\"q\",\"method\":\"lease\",\"params\":{\"instance\":\"%016" PRIx64
	        "\",\"size\":\"1\"}}",
	        inst);
	assert_int_equal(r.r.code, PROTO_E_QUOTA);
	assert_int_equal(ju64(r.r.data, "cap"), 8 * MiB);
	assert_int_equal(ju64(r.r.data, "used"), 8 * MiB);
	assert_int_equal(ju64(r.r.data, "requested"), 2 * MiB);
	reply_done(&r);
	check(b);

	/* Returns: another connection's lease, an allocation, twice. */
	uint64_t l_other = lease_req(b, other, theirs, "1", NULL, &size);
	return_req(b, s, l_other, PROTO_E_NOT_FOUND, NULL);
	return_req(b, other, l1, PROTO_E_NOT_FOUND, NULL);
	expect_lease_error(b, s, PROTO_E_PARAMS, "lease",
	                   "{\"id\":\"e\",\"method\":\"lease_return\",\"params\":{}}");
	/* A lease is no allocation: free and attach do not know it. */
	expect_lease_error(
	    b, s, PROTO_E_NOT_FOUND, NULL,
	    "{\"id\":\"e\",\"method\":\"free\",\"params\":{\"id\":\"%016" PRIx64 "\"}}", l1);
	expect_lease_error(
	    b, other, PROTO_E_NOT_FOUND, NULL,
	    "{\"id\":\"e\",\"method\":\"attach\",\"params\":{\"id\":\"%016" PRIx64 "\"}}", l1);

	/* Carves outside the lease, overlapping, of another's lease. */
	carve_req(b, s, l1, 0, 4096, 4096);
	static const struct {
		uint64_t offset, size;
		const char *field;
	} outside[] = {
	    {100, 1, "offset"},
	    {2 * MiB, 1, "offset"},
	    {2 * MiB - 256, 257, "size"},
	    {4096, 2 * MiB, "size"},
	    {0, 1, "offset"},
	    {3840, 512, "offset"},
	    {256, 1, "offset"},
	    {UINT64_MAX - 255, 1, "offset"},
	};
	for (size_t i = 0; i < sizeof(outside) / sizeof(outside[0]); i++)
		expect_lease_error(b, s, PROTO_E_PARAMS, outside[i].field,
		                   "{\"id\":\"e\",\"method\":\"lease_carve\",\"params\":{\"lease\":"
		                   "\"%016" PRIx64 "\",\"offset\":\"%" PRIu64
		                   "\",\"size\":\"%" PRIu64 "\"}}",
		                   l1, outside[i].offset, outside[i].size);
	expect_lease_error(b, s, PROTO_E_NOT_FOUND, NULL,
	                   "{\"id\":\"e\",\"method\":\"lease_carve\",\"params\":{\"lease\":"
	                   "\"%016" PRIx64 "\",\"offset\":\"0\",\"size\":\"1\"}}",
	                   l_other);
	expect_lease_error(b, s, PROTO_E_PARAMS, "size",
	                   "{\"id\":\"e\",\"method\":\"lease_carve\",\"params\":{\"lease\":"
	                   "\"%016" PRIx64 "\",\"offset\":\"0\",\"size\":\"0\"}}",
	                   l1);
	assert_int_equal(s->alloc_count, 4);
	assert_int_equal(broker_instance_find(s, inst)->used, 8 * MiB);
	return_req(b, s, l1, PROTO_E_PARAMS, "lease");

	/* Under allocator direct: not supported (which also released all). */
	assert_int_equal(broker_set_allocator(b, BROKER_ALLOCATOR_DIRECT, &allocs, &attachments),
	                 0);
	expect_lease_error(b, s, PROTO_E_NOT_SUPPORTED, NULL,
	                   "{\"id\":\"e\",\"method\":\"lease\",\"params\":{\"instance\":"
	                   "\"%016" PRIx64 "\",\"size\":\"1\"}}",
	                   inst);
	return_req(b, s, l1, PROTO_E_NOT_FOUND, NULL);
	broker_done(b);
}

/* max_leases: -32006 with the limit's name and value. */
static void test_dispatch_lease_max(void **state)
{
	struct broker *b = broker_new(256 * MiB, 0, 0);
	struct session *s = open_session(b, UID_A, 1);
	struct reply r = {.fd = -1};
	uint64_t size;
	(void)state;

	hello(b, s, "lease");
	uint64_t inst = register_instance(b, s, 0);
	for (int i = 0; i < PROTO_MAX_LEASES; i++)
		lease_req(b, s, inst, "1", NULL, &size);
	request(b, s, &r,
	        "{\"id\":\"m\",\"method\":\"lease\",\"params\":{\"instance\":\"%016" PRIx64
	        "\",\"size\":\"1\"}}",
	        inst);
	assert_int_equal(r.r.code, PROTO_E_LIMIT);
	assert_true(limit_data_is(&r, "max_leases", PROTO_MAX_LEASES));
	reply_done(&r);
	assert_int_equal(b->allocs.count, PROTO_MAX_LEASES);
	check(b);
	broker_done(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_teardown(test_dispatch_lease_figures, teardown),
	    cmocka_unit_test_teardown(test_dispatch_lease_bad_input, teardown),
	    cmocka_unit_test_teardown(test_dispatch_lease_max, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
