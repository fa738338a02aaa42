/*
 * test-dispatch.c - unit tests of the daemon core without sockets: the
 * request dispatcher driven frame by frame (a session end to end, state and
 * version errors, parameter errors).
 *
 * Every test builds its own broker over a small simulated device (2 MiB
 * slabs), calls broker_check() after each step, frees every reply frame and
 * destroys the broker, so the binary is leak-free under ASan and valgrind.
 * Shared helpers: session-helpers.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "broker.h"
#include "config.h"
#include "dispatch.h"
#include "log.h"
#include "pool.h"
#include "proto.h"

#include "session-helpers.h"

/* ---- dispatch: end to end ------------------------------------------------ */

static void test_dispatch_end_to_end(void **state)
{
	const uint64_t mem = 64 * MiB;
	struct broker *b = broker_new(mem, 5, 1000);
	struct session *s = broker_session_open(b, UID_A, 100, 4242);
	struct reply r = {.fd = -1};
	const cJSON *res, *o, *lim;
	char handle_hex[2 * PROTO_HANDLE_SIZE + 1];
	unsigned char handle[PROTO_HANDLE_SIZE];
	(void)state;

	assert_non_null(s);

	/* hello */
	request(b, s, &r,
	        "{\"id\":\"1\",\"method\":\"hello\",\"params\":{\"versions\":[1],"
	        "\"client\":\"unit-test\"}}");
	res = result_of(&r, "1");
	assert_int_equal(r.fd, -1);
	assert_int_equal(jnum(res, "version"), 1);
	assert_string_equal(jstr(res, "server"), "gpubrokerd");
	assert_string_equal(jstr(res, "server_version"), GPB_VERSION);
	assert_string_equal(jstr(res, "backend"), "sim");
	assert_int_equal(jid(res, "session"), s->id);
	assert_int_equal(jnum(res, "uid"), UID_A);
	lim = jget(res, "limits");
	assert_int_equal(jnum(lim, "max_frame"), PROTO_MAX_FRAME);
	assert_int_equal(jnum(lim, "max_reply"), PROTO_MAX_REPLY);
	assert_int_equal(jnum(lim, "max_depth"), PROTO_MAX_DEPTH);
	assert_int_equal(jnum(lim, "max_members"), PROTO_MAX_KEYS);
	assert_int_equal(jnum(lim, "max_id"), PROTO_MAX_ID);
	assert_int_equal(jnum(lim, "max_name"), PROTO_MAX_NAME);
	assert_int_equal(jnum(lim, "max_instances"), 5);
	assert_int_equal(jnum(lim, "max_allocations"), 1000);
	assert_int_equal(jnum(lim, "write_high_water"), b->limits.write_high_water);
	assert_int_equal(jnum(lim, "hello_timeout_ms"), b->limits.hello_timeout_ms);
	reply_done(&r);
	assert_true(s->hello);
	assert_string_equal(s->name, "unit-test");

	/* register */
	request(b, s, &r,
	        "{\"id\":\"reg-2\",\"method\":\"register\",\"params\":{\"name\":\"solver\","
	        "\"device\":1,\"proportion\":0.25,\"group\":\"g1\"}}");
	res = result_of(&r, "reg-2");
	uint64_t inst = jid(res, "instance");
	assert_int_equal(jnum(res, "device"), 1);
	assert_int_equal(ju64(res, "cap"), mem);
	reply_done(&r);
	struct broker_instance *bi = broker_instance_find(s, inst);
	assert_non_null(bi);
	assert_int_equal(bi->device, 1);
	assert_string_equal(bi->name, "solver");
	assert_string_equal(bi->pol.group, "g1");
	assert_true(bi->pol.proportion == 0.25);
	check(b);

	/* alloc: first in the slab */
	request(b, s, &r,
	        "{\"id\":\"3\",\"method\":\"alloc\",\"params\":{\"instance\":\"%016" PRIx64
	        "\",\"size\":\"1000\"}}",
	        inst);
	res = result_of(&r, "3");
	check_members(res, PROTO_MEMBER_TABLE(PROTO_GRANT_RESULT));
	uint64_t id1 = jid(res, "id");
	assert_int_not_equal(id1, 0);
	assert_int_equal(jnum(res, "device"), 1);
	uint64_t slab = jid(res, "slab");
	assert_int_equal(ju64(res, "slab_size"), SLAB);
	assert_int_equal(ju64(res, "offset"), 0);
	assert_int_equal(ju64(res, "size"), 1024);
	assert_int_equal(strlen(jstr(res, "handle")), 2 * PROTO_HANDLE_SIZE);
	snprintf(handle_hex, sizeof(handle_hex), "%s", jstr(res, "handle"));
	assert_int_equal(proto_hex_decode(handle_hex, handle, sizeof(handle)), 0);
	assert_memory_equal(handle, "GPBSIM01", 8);
	assert_true(cJSON_IsTrue(jget(res, "fd")));
	assert_true(r.fd >= 0);
	int fd = r.fd;
	reply_done(&r);
	struct broker_alloc *ba = idmap_get(&b->allocs, id1);
	assert_non_null(ba);
	assert_ptr_equal(ba->inst, bi);
	assert_int_equal(((struct backend_slab *)pool_slab_backend(pool_block_slab(ba->block)))->fd,
	                 fd);
	check(b);

	/* mem_info: used is the allocation's size */
	request(b, s, &r, "{\"id\":\"4\",\"method\":\"mem_info\"}");
	res = result_of(&r, "4");
	o = cJSON_GetArrayItem(jarr(res, "instances", 1), 0);
	assert_int_equal(jid(o, "instance"), inst);
	assert_string_equal(jstr(o, "name"), "solver");
	assert_int_equal(jnum(o, "device"), 1);
	assert_string_equal(jstr(o, "group"), "g1");
	assert_true(jnum(o, "proportion") == 0.25);
	assert_int_equal(ju64(o, "cap"), mem);
	assert_int_equal(ju64(o, "used"), 1024);
	assert_int_equal(ju64(o, "free"), mem - 1024);
	o = cJSON_GetArrayItem(jarr(res, "devices", 1), 0);
	assert_int_equal(jnum(o, "device"), 1);
	assert_int_equal(ju64(o, "total"), mem);
	assert_int_equal(ju64(o, "free"), mem - 1024);
	reply_done(&r);

	/* alloc: same slab, nothing to send */
	request(b, s, &r,
	        "{\"id\":\"5\",\"method\":\"alloc\",\"params\":{\"instance\":\"%016" PRIx64
	        "\",\"size\":\"5000\",\"alignment\":\"4096\",\"type\":\"device\"}}",
	        inst);
	res = result_of(&r, "5");
	check_members(res, PROTO_MEMBER_TABLE(PROTO_GRANT_RESULT));
	uint64_t id2 = jid(res, "id");
	assert_int_not_equal(id2, id1);
	assert_int_equal(jid(res, "slab"), slab);
	assert_int_equal(ju64(res, "size"), 5120);
	assert_int_equal(ju64(res, "offset") % 4096, 0);
	assert_null(cJSON_GetObjectItemCaseSensitive(res, "handle"));
	assert_null(cJSON_GetObjectItemCaseSensitive(res, "fd"));
	assert_int_equal(r.fd, -1);
	reply_done(&r);

	/* mem_info for one instance; an unregistered second instance shows
	 * only when asked for all. */
	request(b, s, &r, "{\"id\":\"6\",\"method\":\"register\",\"params\":{\"name\":\"idle\"}}");
	uint64_t inst2 = jid(result_of(&r, "6"), "instance");
	reply_done(&r);
	request(b, s, &r,
	        "{\"id\":\"7\",\"method\":\"mem_info\",\"params\":{\"instance\":\"%016" PRIx64
	        "\"}}",
	        inst);
	res = result_of(&r, "7");
	o = cJSON_GetArrayItem(jarr(res, "instances", 1), 0);
	assert_int_equal(ju64(o, "used"), 1024 + 5120);
	jarr(res, "devices", 1);
	reply_done(&r);
	request(b, s, &r, "{\"id\":\"8\",\"method\":\"mem_info\",\"params\":{}}");
	res = result_of(&r, "8");
	jarr(res, "instances", 2);
	jarr(res, "devices", 2);
	o = cJSON_GetArrayItem(jget(res, "instances"), 1);
	assert_int_equal(jid(o, "instance"), inst2);
	assert_int_equal(jnum(o, "device"), 0);
	assert_string_equal(jstr(o, "group"), "default");
	assert_true(cJSON_IsNull(jget(o, "proportion")));
	assert_int_equal(ju64(o, "used"), 0);
	reply_done(&r);

	/* stats */
	request(b, s, &r, "{\"id\":\"9\",\"method\":\"stats\"}");
	res = result_of(&r, "9");
	jarr(res, "devices", 2);
	o = cJSON_GetArrayItem(jget(res, "devices"), 1);
	assert_int_equal(jnum(o, "device"), 1);
	assert_int_equal(ju64(o, "live"), 2);
	assert_int_equal(ju64(o, "used"), 1024 + 5120);
	assert_int_equal(ju64(o, "reserved"), SLAB);
	assert_int_equal(ju64(o, "free"), SLAB - 1024 - 5120);
	assert_int_equal(ju64(o, "slabs"), 1);
	assert_int_equal(ju64(o, "allocs"), 2);
	assert_int_equal(ju64(o, "frees"), 0);
	assert_int_equal(ju64(o, "ooms"), 0);
	assert_int_equal(ju64(o, "peak"), 1024 + 5120);
	assert_true(ju64(o, "free_blocks") >= 1);
	assert_true(ju64(o, "largest_free") <= SLAB - 1024 - 5120);
	o = cJSON_GetArrayItem(jget(res, "devices"), 0);
	assert_int_equal(jnum(o, "device"), 0);
	assert_int_equal(ju64(o, "live"), 0);
	reply_done(&r);
	request(b, s, &r, "{\"id\":\"10\",\"method\":\"stats\",\"params\":{\"device\":1}}");
	res = result_of(&r, "10");
	o = cJSON_GetArrayItem(jarr(res, "devices", 1), 0);
	assert_int_equal(jnum(o, "device"), 1);
	assert_int_equal(ju64(o, "live"), 2);
	reply_done(&r);
	/* A device by UUID, as everywhere a device is named. */
	request(b, s, &r, "{\"id\":\"10u\",\"method\":\"stats\",\"params\":{\"device\":\"%s\"}}",
	        b->dev[1].info.uuid);
	o = cJSON_GetArrayItem(jarr(result_of(&r, "10u"), "devices", 1), 0);
	assert_int_equal(jnum(o, "device"), 1);
	assert_int_equal(ju64(o, "live"), 2);
	reply_done(&r);

	/* status */
	request(b, s, &r, "{\"id\":\"11\",\"method\":\"status\"}");
	res = result_of(&r, "11");
	assert_int_equal(jnum(res, "allocations"), 2);
	assert_int_equal(jnum(res, "clients"), 1);
	assert_int_equal(jnum(res, "instances"), 2);
	assert_string_equal(jstr(res, "backend"), "sim");
	assert_string_equal(jstr(res, "server_version"), GPB_VERSION);
	assert_int_equal(jnum(res, "pid"), getpid());
	assert_true(jnum(res, "uptime_s") >= 0);
	o = jget(res, "totals");
	assert_int_equal(ju64(o, "total"), 2 * mem);
	assert_int_equal(ju64(o, "reserved"), SLAB);
	assert_int_equal(ju64(o, "used"), 1024 + 5120);
	o = cJSON_GetArrayItem(jarr(res, "devices", 2), 1);
	assert_int_equal(jnum(o, "device"), 1);
	assert_int_equal(ju64(o, "total"), mem);
	assert_int_equal(ju64(o, "used"), 1024 + 5120);
	assert_int_equal(ju64(o, "reserved"), SLAB);
	assert_true(strlen(jstr(o, "name")) > 0);
	assert_true(strlen(jstr(o, "uuid")) > 0);
	reply_done(&r);

	/* clients: this session, and a second one of the same user that said
	 * no hello yet; another user's only in the totals of "others" */
	struct session *quiet = open_session(b, UID_A, 77);
	struct session *stranger = open_session(b, UID_B, 78);
	request(b, s, &r, "{\"id\":\"12\",\"method\":\"clients\"}");
	res = result_of(&r, "12");
	o = cJSON_GetArrayItem(jarr(res, "clients", 2), 0);
	assert_int_equal(jid(o, "session"), s->id);
	assert_int_equal(jnum(o, "pid"), 4242);
	assert_int_equal(jnum(o, "uid"), UID_A);
	assert_int_equal(jnum(o, "gid"), 100);
	assert_string_equal(jstr(o, "name"), "unit-test");
	assert_int_equal(jnum(o, "instances"), 2);
	assert_int_equal(jnum(o, "allocations"), 2);
	assert_int_equal(ju64(o, "used"), 1024 + 5120);
	assert_true(jnum(o, "connected_s") >= 0);
	o = cJSON_GetArrayItem(jget(res, "clients"), 1);
	assert_int_equal(jid(o, "session"), quiet->id);
	assert_int_equal(jnum(o, "allocations"), 0);
	o = jget(res, "others");
	assert_int_equal(jnum(o, "clients"), 1);
	assert_int_equal(jnum(o, "instances"), 0);
	assert_int_equal(jnum(o, "allocations"), 0);
	assert_int_equal(ju64(o, "used"), 0);
	reply_done(&r);
	broker_session_close(b, quiet);
	broker_session_close(b, stranger);

	/* devices */
	request(b, s, &r, "{\"id\":\"13\",\"method\":\"devices\"}");
	res = result_of(&r, "13");
	jarr(res, "devices", 2);
	for (int d = 0; d < 2; d++) {
		o = cJSON_GetArrayItem(jget(res, "devices"), d);
		assert_int_equal(jnum(o, "device"), d);
		assert_string_equal(jstr(o, "name"), b->dev[d].info.name);
		assert_string_equal(jstr(o, "uuid"), b->dev[d].info.uuid);
		assert_int_equal(ju64(o, "total"), mem);
		assert_int_equal(ju64(o, "free"), d == 1 ? mem - 1024 - 5120 : mem);
		assert_int_equal(ju64(o, "used"), d == 1 ? 1024 + 5120 : 0);
		assert_int_equal(ju64(o, "reserved"), d == 1 ? SLAB : 0);
		assert_string_equal(jstr(o, "compute_capability"), "0.0");
	}
	reply_done(&r);

	/* attach from a second session of the same uid gets handle and fd */
	struct session *s2 = open_session(b, UID_A, 4343);
	hello(b, s2, "second");
	request(b, s2, &r,
	        "{\"id\":\"a1\",\"method\":\"attach\",\"params\":{\"id\":\"%016" PRIx64 "\"}}",
	        id2);
	res = result_of(&r, "a1");
	assert_int_equal(jid(res, "id"), id2);
	assert_int_equal(jid(res, "slab"), slab);
	assert_string_equal(jstr(res, "handle"), handle_hex);
	assert_true(cJSON_IsTrue(jget(res, "fd")));
	assert_int_equal(r.fd, fd);
	reply_done(&r);
	expect_error_fmt(
	    b, s2, PROTO_E_PARAMS, NULL,
	    "{\"id\":\"e\",\"method\":\"attach\",\"params\":{\"id\":\"%016" PRIx64 "\"}}", id2);
	request(b, s2, &r,
	        "{\"id\":\"d1\",\"method\":\"detach\",\"params\":{\"id\":\"%016" PRIx64 "\"}}",
	        id2);
	res = result_of(&r, "d1");
	assert_null(res->child);
	reply_done(&r);
	expect_error_fmt(
	    b, s2, PROTO_E_NOT_FOUND, NULL,
	    "{\"id\":\"e\",\"method\":\"detach\",\"params\":{\"id\":\"%016" PRIx64 "\"}}", id2);
	/* s2 may not free s1's allocation */
	expect_error_fmt(
	    b, s2, PROTO_E_NOT_FOUND, NULL,
	    "{\"id\":\"e\",\"method\":\"free\",\"params\":{\"id\":\"%016" PRIx64 "\"}}", id2);
	broker_session_close(b, s2);
	check(b);

	/* unregister with live allocations: -32602 */
	expect_error_fmt(b, s, PROTO_E_PARAMS, NULL,
	                 "{\"id\":\"e\",\"method\":\"unregister\",\"params\":{\"instance\":"
	                 "\"%016" PRIx64 "\"}}",
	                 inst);

	/* free */
	request(b, s, &r,
	        "{\"id\":\"14\",\"method\":\"free\",\"params\":{\"id\":\"%016" PRIx64 "\"}}", id1);
	res = result_of(&r, "14");
	assert_null(res->child);
	assert_int_equal(r.fd, -1);
	reply_done(&r);
	check(b);
	request(b, s, &r, "{\"id\":\"15\",\"method\":\"stats\",\"params\":{\"device\":1}}");
	o = cJSON_GetArrayItem(jarr(result_of(&r, "15"), "devices", 1), 0);
	assert_int_equal(ju64(o, "live"), 1);
	assert_int_equal(ju64(o, "used"), 5120);
	assert_int_equal(ju64(o, "frees"), 1);
	reply_done(&r);
	expect_error_fmt(
	    b, s, PROTO_E_NOT_FOUND, NULL,
	    "{\"id\":\"e\",\"method\":\"free\",\"params\":{\"id\":\"%016" PRIx64 "\"}}", id1);
	request(b, s, &r,
	        "{\"id\":\"16\",\"method\":\"free\",\"params\":{\"id\":\"%016" PRIx64 "\"}}", id2);
	result_of(&r, "16");
	reply_done(&r);
	request(b, s, &r, "{\"id\":\"17\",\"method\":\"status\"}");
	assert_int_equal(jnum(result_of(&r, "17"), "allocations"), 0);
	reply_done(&r);

	/* unregister, then it is unknown */
	request(b, s, &r,
	        "{\"id\":\"18\",\"method\":\"unregister\",\"params\":{\"instance\":\"%016" PRIx64
	        "\"}}",
	        inst);
	result_of(&r, "18");
	reply_done(&r);
	expect_error_fmt(b, s, PROTO_E_NOT_FOUND, NULL,
	                 "{\"id\":\"e\",\"method\":\"unregister\",\"params\":{\"instance\":"
	                 "\"%016" PRIx64 "\"}}",
	                 inst);
	expect_error_fmt(b, s, PROTO_E_NOT_FOUND, NULL,
	                 "{\"id\":\"e\",\"method\":\"mem_info\",\"params\":{\"instance\":"
	                 "\"%016" PRIx64 "\"}}",
	                 inst);
	assert_int_equal(b->instance_count, 1);
	check(b);
	broker_done(b);
}

/* ---- dispatch: state and version errors ---------------------------------- */

static void test_dispatch_state(void **state)
{
	struct broker *b = broker_new(64 * MiB, 0, 0);
	struct session *s = open_session(b, UID_A, 1);
	struct reply r = {.fd = -1};
	(void)state;

	/* Before hello: everything else is -32000. */
	static const char *const before[] = {
	    "{\"id\":\"e\",\"method\":\"status\"}",
	    "{\"id\":\"e\",\"method\":\"register\",\"params\":{\"name\":\"x\"}}",
	    ("{\"id\":\"e\",\"method\":\"alloc\",\"params\":{\"instance\":\"0000000000000001\","
	     "\"size\":\"1\"}}"),
	    "{\"id\":\"e\",\"method\":\"free\",\"params\":{\"id\":\"0000000000000001\"}}",
	    "{\"id\":\"e\",\"method\":\"clients\"}",
	    "{\"id\":\"e\",\"method\":\"devices\"}",
	    "{\"id\":\"e\",\"method\":\"stats\"}",
	    "{\"id\":\"e\",\"method\":\"mem_info\"}",
	};
	for (size_t i = 0; i < sizeof(before) / sizeof(before[0]); i++)
		expect_error(b, s, before[i], "e", PROTO_E_STATE, NULL);
	assert_int_equal(s->instance_count, 0);

	/* hello's own parameter errors */
	expect_error(b, s, "{\"id\":\"e\",\"method\":\"hello\"}", "e", PROTO_E_PARAMS, "versions");
	expect_error(b, s, "{\"id\":\"e\",\"method\":\"hello\",\"params\":{\"versions\":1}}", "e",
	             PROTO_E_PARAMS, "versions");
	expect_error(b, s, "{\"id\":\"e\",\"method\":\"hello\",\"params\":{\"versions\":[\"1\"]}}",
	             "e", PROTO_E_PARAMS, "versions");
	expect_error(b, s,
	             "{\"id\":\"e\",\"method\":\"hello\",\"params\":{\"versions\":[1],"
	             "\"client\":\"\"}}",
	             "e", PROTO_E_PARAMS, "client");
	expect_error(b, s,
	             "{\"id\":\"e\",\"method\":\"hello\",\"params\":{\"versions\":[1],"
	             "\"client\":7}}",
	             "e", PROTO_E_PARAMS, "client");
	assert_false(s->hello);

	/* Unsupported version: -32001 with data.supported == [1]. */
	request(b, s, &r, "{\"id\":\"v\",\"method\":\"hello\",\"params\":{\"versions\":[2]}}");
	assert_null(r.r.result);
	assert_int_equal(r.r.code, PROTO_E_VERSION);
	assert_string_equal(r.r.id, "v");
	assert_non_null(r.r.data);
	const cJSON *sup = jarr(r.r.data, "supported", 1);
	assert_true(cJSON_IsNumber(cJSON_GetArrayItem(sup, 0)));
	assert_int_equal(cJSON_GetArrayItem(sup, 0)->valuedouble, PROTO_VERSION);
	reply_done(&r);
	expect_error(b, s, "{\"id\":\"v\",\"method\":\"hello\",\"params\":{\"versions\":[]}}", "v",
	             PROTO_E_VERSION, NULL);
	assert_false(s->hello);
	expect_error(b, s, "{\"id\":\"e\",\"method\":\"status\"}", "e", PROTO_E_STATE, NULL);

	/* A list with the supported version among others works. */
	request(b, s, &r, "{\"id\":\"ok\",\"method\":\"hello\",\"params\":{\"versions\":[3,1,2]}}");
	assert_int_equal(jnum(result_of(&r, "ok"), "version"), 1);
	reply_done(&r);
	assert_true(s->hello);
	assert_string_equal(s->name, "");

	/* Second hello: -32000. */
	expect_error(b, s, "{\"id\":\"h2\",\"method\":\"hello\",\"params\":{\"versions\":[1]}}",
	             "h2", PROTO_E_STATE, NULL);

	/* Unknown method: -32601 with data.method (case-sensitive names). */
	static const char *const unknown[] = {"Status", "bogus", "", "hello ", "mem-info"};
	for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
		request(b, s, &r, "{\"id\":\"m%zu\",\"method\":\"%s\"}", i, unknown[i]);
		char id[16];
		snprintf(id, sizeof(id), "m%zu", i);
		assert_null(r.r.result);
		assert_int_equal(r.r.code, PROTO_E_METHOD);
		assert_string_equal(r.r.id, id);
		assert_non_null(r.r.data);
		assert_string_equal(jstr(r.r.data, "method"), unknown[i]);
		reply_done(&r);
	}

	/* The session still works. */
	request(b, s, &r, "{\"id\":\"s\",\"method\":\"status\"}");
	result_of(&r, "s");
	reply_done(&r);
	check(b);
	broker_done(b);
}

/* ---- dispatch: parameter errors ------------------------------------------ */

struct bad_param {
	const char *params; /* members after "instance" (alloc) or the whole object */
	const char *field;
};

static void test_dispatch_params(void **state)
{
	struct broker *b = broker_new(64 * MiB, 0, 0);
	struct session *s = open_session(b, UID_A, 1);
	struct reply r = {.fd = -1};
	(void)state;

	hello(b, s, "params");
	request(b, s, &r, "{\"id\":\"r\",\"method\":\"register\",\"params\":{\"name\":\"x\"}}");
	uint64_t inst = jid(result_of(&r, "r"), "instance");
	reply_done(&r);

	/* alloc, with a valid instance */
	static const struct bad_param alloc_bad[] = {
	    {"\"size\":1000", "size"},
	    {"\"size\":\"-1\"", "size"},
	    {"\"size\":\"0\"", "size"},
	    {"\"size\":\"1e9\"", "size"},
	    {"\"size\":\"0x10\"", "size"},
	    {"\"size\":\"1234567890123456789012345\"", "size"},
	    {"\"size\":\"18446744073709551616\"", "size"},
	    {"\"size\":\"18446744073709551615\"", "size"}, /* cannot be rounded up */
	    {"\"size\":\"01\"", "size"},
	    {"\"size\":\"+1\"", "size"},
	    {"\"size\":\" 1\"", "size"},
	    {"\"size\":\"1 \"", "size"},
	    {"\"size\":\"\"", "size"},
	    {"\"size\":null", "size"},
	    {"\"size\":true", "size"},
	    {"\"size\":[\"1\"]", "size"},
	    {"\"sizes\":\"1\"", "size"},
	    {"\"size\":\"1\",\"alignment\":\"3\"", "alignment"},
	    {"\"size\":\"1\",\"alignment\":\"4\"", "alignment"},
	    {"\"size\":\"1\",\"alignment\":\"0\"", "alignment"},
	    {"\"size\":\"1\",\"alignment\":\"768\"", "alignment"},
	    {"\"size\":\"1\",\"alignment\":\"8388608\"", "alignment"},
	    {"\"size\":\"1\",\"alignment\":\"4194304\"", "alignment"},
	    {"\"size\":\"1\",\"alignment\":4096", "alignment"},
	    {"\"size\":\"1\",\"alignment\":\"0x100\"", "alignment"},
	    {"\"size\":\"1\",\"type\":\"bogus\"", "type"},
	    {"\"size\":\"1\",\"type\":\"\"", "type"},
	    {"\"size\":\"1\",\"type\":\"Device\"", "type"},
	    {"\"size\":\"1\",\"type\":1", "type"},
	};
	for (size_t i = 0; i < sizeof(alloc_bad) / sizeof(alloc_bad[0]); i++)
		expect_error_fmt(b, s, PROTO_E_PARAMS, alloc_bad[i].field,
		                 "{\"id\":\"e\",\"method\":\"alloc\",\"params\":{\"instance\":"
		                 "\"%016" PRIx64 "\",%s}}",
		                 inst, alloc_bad[i].params);

	/* alloc: the instance field */
	static const struct bad_param inst_bad[] = {
	    {"{\"size\":\"1\"}", "instance"},
	    {"{\"instance\":\"zzzzzzzzzzzzzzzz\",\"size\":\"1\"}", "instance"},
	    {"{\"instance\":\"000000000000000G\",\"size\":\"1\"}", "instance"},
	    {"{\"instance\":\"00000000000000AB\",\"size\":\"1\"}", "instance"},
	    {"{\"instance\":\"000000000000001\",\"size\":\"1\"}", "instance"},
	    {"{\"instance\":\"00000000000000001\",\"size\":\"1\"}", "instance"},
	    {"{\"instance\":1,\"size\":\"1\"}", "instance"},
	    {"{\"instance\":\"-000000000000001\",\"size\":\"1\"}", "instance"},
	};
	for (size_t i = 0; i < sizeof(inst_bad) / sizeof(inst_bad[0]); i++)
		expect_error_fmt(b, s, PROTO_E_PARAMS, inst_bad[i].field,
		                 "{\"id\":\"e\",\"method\":\"alloc\",\"params\":%s}",
		                 inst_bad[i].params);

	/* alloc: managed memory cannot be shared between processes */
	expect_error_fmt(b, s, PROTO_E_NOT_SUPPORTED, NULL,
	                 "{\"id\":\"e\",\"method\":\"alloc\",\"params\":{\"instance\":"
	                 "\"%016" PRIx64 "\",\"size\":\"4096\",\"type\":\"managed\"}}",
	                 inst);
	/* alloc: an unknown instance */
	expect_error_fmt(b, s, PROTO_E_NOT_FOUND, NULL,
	                 "{\"id\":\"e\",\"method\":\"alloc\",\"params\":{\"instance\":"
	                 "\"%016" PRIx64 "\",\"size\":\"4096\"}}",
	                 inst + 100);
	assert_int_equal(s->alloc_count, 0);
	assert_int_equal(b->allocs.count, 0);
	assert_int_equal(dev_stats(b, 0).allocs, 0);
	check(b);

	/* The boundaries that are fine. */
	static const char *const good[] = {
	    "\"size\":\"1\"",
	    "\"size\":\"4096\",\"alignment\":\"256\"",
	    "\"size\":\"4096\",\"alignment\":\"2097152\"",
	    "\"size\":\"65536\",\"type\":\"device\",\"unknown_member\":1",
	};
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		request(b, s, &r,
		        "{\"id\":\"g\",\"method\":\"alloc\",\"params\":{\"instance\":\"%016" PRIx64
		        "\",%s}}",
		        inst, good[i]);
		const cJSON *res = result_of(&r, "g");
		if (i == 2)
			assert_int_equal(ju64(res, "offset") % (2 * MiB), 0);
		reply_done(&r);
	}
	assert_int_equal(s->alloc_count, 4);

	/* register */
	char name65[66], name64[65];
	memset(name65, 'n', 65);
	name65[65] = '\0';
	memset(name64, 'n', 64);
	name64[64] = '\0';
	static const struct bad_param reg_bad[] = {
	    {"{}", "name"},
	    {"{\"name\":\"\"}", "name"},
	    {"{\"name\":7}", "name"},
	    {"{\"name\":null}", "name"},
	    {"{\"name\":\"x\",\"proportion\":0}", "proportion"},
	    {"{\"name\":\"x\",\"proportion\":1.5}", "proportion"},
	    {"{\"name\":\"x\",\"proportion\":\"0.5\"}", "proportion"},
	    {"{\"name\":\"x\",\"proportion\":-0.5}", "proportion"},
	    {"{\"name\":\"x\",\"proportion\":1.0000001}", "proportion"},
	    {"{\"name\":\"x\",\"device\":-1}", "device"},
	    {"{\"name\":\"x\",\"device\":99}", "device"},
	    {"{\"name\":\"x\",\"device\":\"0\"}", "device"},
	    {"{\"name\":\"x\",\"device\":2}", "device"},
	    {"{\"name\":\"x\",\"device\":0.5}", "device"},
	    {"{\"name\":\"x\",\"group\":\"\"}", "group"},
	    {"{\"name\":\"x\",\"group\":5}", "group"},
	};
	for (size_t i = 0; i < sizeof(reg_bad) / sizeof(reg_bad[0]); i++)
		expect_error_fmt(b, s, PROTO_E_PARAMS, reg_bad[i].field,
		                 "{\"id\":\"e\",\"method\":\"register\",\"params\":%s}",
		                 reg_bad[i].params);
	expect_error_fmt(b, s, PROTO_E_PARAMS, "name",
	                 "{\"id\":\"e\",\"method\":\"register\",\"params\":{\"name\":\"%s\"}}",
	                 name65);
	expect_error_fmt(b, s, PROTO_E_PARAMS, "group",
	                 "{\"id\":\"e\",\"method\":\"register\",\"params\":{\"name\":\"x\","
	                 "\"group\":\"%s\"}}",
	                 name65);
	assert_int_equal(s->instance_count, 1);
	/* Boundaries that are fine: 64-byte name and group, proportion 1. */
	request(b, s, &r,
	        "{\"id\":\"g\",\"method\":\"register\",\"params\":{\"name\":\"%s\",\"group\":"
	        "\"%s\",\"proportion\":1,\"device\":1}}",
	        name64, name64);
	struct broker_instance *bi = broker_instance_find(s, jid(result_of(&r, "g"), "instance"));
	reply_done(&r);
	assert_non_null(bi);
	assert_string_equal(bi->name, name64);
	assert_string_equal(bi->pol.group, name64);
	assert_int_equal(bi->device, 1);
	assert_int_equal(s->instance_count, 2);

	/* free, unregister, attach, detach: the id fields */
	static const char *const id_bad[] = {
	    "{}",
	    "{\"id\":\"xyz\"}",
	    "{\"id\":12}",
	    "{\"id\":\"ABCDEF0123456789\"}",
	    "{\"id\":\"0123456789abcdef0\"}",
	};
	static const char *const id_methods[] = {"free", "attach", "detach"};
	for (size_t m = 0; m < sizeof(id_methods) / sizeof(id_methods[0]); m++)
		for (size_t i = 0; i < sizeof(id_bad) / sizeof(id_bad[0]); i++)
			expect_error_fmt(b, s, PROTO_E_PARAMS, "id",
			                 "{\"id\":\"e\",\"method\":\"%s\",\"params\":%s}",
			                 id_methods[m], id_bad[i]);
	expect_error(b, s, "{\"id\":\"e\",\"method\":\"unregister\",\"params\":{}}", "e",
	             PROTO_E_PARAMS, "instance");
	expect_error(b, s,
	             "{\"id\":\"e\",\"method\":\"unregister\",\"params\":{\"instance\":\"1\"}}",
	             "e", PROTO_E_PARAMS, "instance");
	expect_error(b, s, "{\"id\":\"e\",\"method\":\"mem_info\",\"params\":{\"instance\":\"1\"}}",
	             "e", PROTO_E_PARAMS, "instance");
	expect_error(b, s, "{\"id\":\"e\",\"method\":\"stats\",\"params\":{\"device\":2}}", "e",
	             PROTO_E_PARAMS, "device");
	expect_error(b, s, "{\"id\":\"e\",\"method\":\"stats\",\"params\":{\"device\":\"0\"}}", "e",
	             PROTO_E_PARAMS, "device");
	bool was_admin = s->admin;
	s->admin = true;
	expect_error(b, s,
	             "{\"id\":\"e\",\"method\":\"set_limit\",\"params\":{\"device\":\"GPU-nope\","
	             "\"size\":\"0\"}}",
	             "e", PROTO_E_PARAMS, "device");
	request(b, s, &r,
	        "{\"id\":\"lu\",\"method\":\"set_limit\",\"params\":{\"device\":\"%s\","
	        "\"size\":\"0\"}}",
	        b->dev[1].info.uuid);
	result_of(&r, "lu");
	reply_done(&r);
	s->admin = was_admin;

	/* free of unknown ids: -32004 */
	expect_error(b, s,
	             "{\"id\":\"e\",\"method\":\"free\",\"params\":{\"id\":\"0123456789abcdef\"}}",
	             "e", PROTO_E_NOT_FOUND, NULL);
	expect_error(b, s,
	             "{\"id\":\"e\",\"method\":\"free\",\"params\":{\"id\":\"0000000000000000\"}}",
	             "e", PROTO_E_NOT_FOUND, NULL);
	expect_error(
	    b, s, "{\"id\":\"e\",\"method\":\"attach\",\"params\":{\"id\":\"0123456789abcdef\"}}",
	    "e", PROTO_E_NOT_FOUND, NULL);
	assert_int_equal(s->alloc_count, 4);
	check(b);
	broker_done(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_teardown(test_dispatch_end_to_end, teardown),
	    cmocka_unit_test_teardown(test_dispatch_state, teardown),
	    cmocka_unit_test_teardown(test_dispatch_params, teardown),
	};

	/* Errors only, as in every broker test binary: a warning a test provokes
	 * on purpose is noise. */
	log_init(LOG_LEVEL_ERROR);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
