/*
 * test-dispatch.c - unit tests of the daemon core without sockets: the
 * request dispatcher driven frame by frame (a session end to end, state and
 * version errors; parameter errors: test-dispatch-params.c).
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
#include "broker_internal.h"
#include "config.h"
#include "dispatch.h"
#include "log.h"
#include "pool.h"
#include "proto.h"

#include "session-helpers.h"

/* ---- dispatch: end to end ------------------------------------------------ */

/* One session through every method, a step per function below; each step
 * leaves in struct end_to_end what the later ones need. */
struct end_to_end {
	uint64_t mem;
	struct broker *b;
	struct session *s;
	struct broker_instance *bi;
	uint64_t inst, id1, id2, slab;
	int fd;
	char handle_hex[2 * PROTO_HANDLE_SIZE + 1];
};

/* hello: the server, its version and every limit */
static void end_to_end_hello(struct end_to_end *e)
{
	struct broker *b = e->b;
	struct session *s = e->s;
	struct reply r = {.fd = -1};
	const cJSON *res, *lim;

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
	assert_int_equal(ju64(lim, "slab_size"), b->limits.slab_size);
	reply_done(&r);
	assert_true(s->hello);
	assert_string_equal(s->name, "unit-test");
}

/* register: an instance on device 1, in group g1 */
static void end_to_end_register(struct end_to_end *e)
{
	struct broker *b = e->b;
	struct session *s = e->s;
	struct reply r = {.fd = -1};
	const uint64_t mem = e->mem;
	const cJSON *res;

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
	e->inst = inst;
	e->bi = bi;
}

/* alloc: the first in a slab hands the slab over */
static void end_to_end_alloc_first(struct end_to_end *e)
{
	struct broker *b = e->b;
	struct session *s = e->s;
	struct reply r = {.fd = -1};
	uint64_t inst = e->inst;
	struct broker_instance *bi = e->bi;
	const cJSON *res;
	char handle_hex[2 * PROTO_HANDLE_SIZE + 1];
	unsigned char handle[PROTO_HANDLE_SIZE];

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
	e->id1 = id1;
	e->slab = slab;
	e->fd = fd;
	memcpy(e->handle_hex, handle_hex, sizeof(handle_hex));
}

/* mem_info after one allocation */
static void end_to_end_mem_info(struct end_to_end *e)
{
	struct broker *b = e->b;
	struct session *s = e->s;
	struct reply r = {.fd = -1};
	uint64_t inst = e->inst;
	const uint64_t mem = e->mem;
	const cJSON *res, *o;

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
}

/* alloc: the second in the same slab, nothing to send */
static void end_to_end_alloc_same_slab(struct end_to_end *e)
{
	struct broker *b = e->b;
	struct session *s = e->s;
	struct reply r = {.fd = -1};
	uint64_t inst = e->inst;
	uint64_t id1 = e->id1;
	uint64_t slab = e->slab;
	const cJSON *res;

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
	e->id2 = id2;
}

/* mem_info for one instance, and for all */
static void end_to_end_mem_info_filters(struct end_to_end *e)
{
	struct broker *b = e->b;
	struct session *s = e->s;
	struct reply r = {.fd = -1};
	uint64_t inst = e->inst;
	const cJSON *res, *o;

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
}

/* stats: all devices, one by index and one by UUID */
static void end_to_end_stats(struct end_to_end *e)
{
	struct broker *b = e->b;
	struct session *s = e->s;
	struct reply r = {.fd = -1};
	const cJSON *res, *o;

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
}

/* status: counts and totals */
static void end_to_end_status(struct end_to_end *e)
{
	struct broker *b = e->b;
	struct session *s = e->s;
	struct reply r = {.fd = -1};
	const uint64_t mem = e->mem;
	const cJSON *res, *o;

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
}

/* clients: this user's sessions, other users' as totals */
static void end_to_end_clients(struct end_to_end *e)
{
	struct broker *b = e->b;
	struct session *s = e->s;
	struct reply r = {.fd = -1};
	const cJSON *res, *o;

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
}

/* devices: both, with what they hold */
static void end_to_end_devices(struct end_to_end *e)
{
	struct broker *b = e->b;
	struct session *s = e->s;
	struct reply r = {.fd = -1};
	const uint64_t mem = e->mem;
	const cJSON *res, *o;

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
}

/* attach and detach from a second session of the same uid */
static void end_to_end_attach(struct end_to_end *e)
{
	struct broker *b = e->b;
	struct reply r = {.fd = -1};
	uint64_t id2 = e->id2;
	uint64_t slab = e->slab;
	const char *handle_hex = e->handle_hex;
	int fd = e->fd;
	const cJSON *res;

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
}

/* free, then unregister */
static void end_to_end_free_unregister(struct end_to_end *e)
{
	struct broker *b = e->b;
	struct session *s = e->s;
	struct reply r = {.fd = -1};
	uint64_t inst = e->inst;
	uint64_t id1 = e->id1;
	uint64_t id2 = e->id2;
	const cJSON *res, *o;

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
}

static void test_dispatch_end_to_end(void **state)
{
	struct end_to_end e = {.mem = 64 * MiB, .fd = -1};
	(void)state;

	e.b = broker_new(e.mem, 5, 1000);
	e.s = broker_session_open(e.b, UID_A, 100, 4242);
	assert_non_null(e.s);
	end_to_end_hello(&e);
	end_to_end_register(&e);
	end_to_end_alloc_first(&e);
	end_to_end_mem_info(&e);
	end_to_end_alloc_same_slab(&e);
	end_to_end_mem_info_filters(&e);
	end_to_end_stats(&e);
	end_to_end_status(&e);
	end_to_end_clients(&e);
	end_to_end_devices(&e);
	end_to_end_attach(&e);
	end_to_end_free_unregister(&e);
	broker_done(e.b);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_teardown(test_dispatch_end_to_end, teardown),
	    cmocka_unit_test_teardown(test_dispatch_state, teardown),
	};

	/* Errors only, as in every broker test binary: a warning a test provokes
	 * on purpose is noise. */
	log_init(LOG_LEVEL_ERROR);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
