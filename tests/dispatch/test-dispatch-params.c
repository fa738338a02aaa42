/*
 * test-dispatch-params.c - the dispatcher's parameter errors, without
 * sockets: every bad member of alloc, register and the id-taking methods
 * answered -32602 naming the member (or -32004 / -32009 where the request
 * is well-formed), the boundaries that are fine granted. Split from
 * test-dispatch.c; the cases share one session, in order.
 *
 * Shared helpers: session-helpers.h.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "broker.h"
#include "broker_internal.h"
#include "dispatch.h"
#include "log.h"
#include "pool.h"
#include "proto.h"

#include "session-helpers.h"

struct bad_param {
	const char *params; /* members after "instance" (alloc) or the whole object */
	const char *field;
};

/* One session for the whole group, as when this was one function: a hello,
 * one instance registered; the cases run in order on it (the last one
 * counts the allocations the second made). */
struct params {
	struct broker *b;
	struct session *s;
	uint64_t inst;
};

static int params_setup(void **state)
{
	struct params *p = calloc(1, sizeof(*p));
	struct reply r = {.fd = -1};

	assert_non_null(p);
	p->b = broker_new(64 * MiB, 0, 0);
	p->s = open_session(p->b, UID_A, 1);
	struct broker *b = p->b;
	struct session *s = p->s;
	hello(b, s, "params");
	request(b, s, &r, "{\"id\":\"r\",\"method\":\"register\",\"params\":{\"name\":\"x\"}}");
	uint64_t inst = jid(result_of(&r, "r"), "instance");
	reply_done(&r);
	p->inst = inst;
	*state = p;
	return 0;
}

static int params_teardown(void **state)
{
	struct params *p = *state;

	check(p->b);
	broker_done(p->b);
	free(p);
	return 0;
}

/* alloc: every bad size, alignment, type and instance; managed memory; an unknown instance */
static void test_params_alloc(void **state)
{
	struct params *p = *state;
	struct broker *b = p->b;
	struct session *s = p->s;
	uint64_t inst = p->inst;

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
}

/* alloc: the boundaries that are fine */
static void test_params_alloc_good(void **state)
{
	struct params *p = *state;
	struct broker *b = p->b;
	struct session *s = p->s;
	struct reply r = {.fd = -1};
	uint64_t inst = p->inst;

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
}

/* register: bad names, proportions, devices and groups; the boundaries that are fine */
static void test_params_register(void **state)
{
	struct params *p = *state;
	struct broker *b = p->b;
	struct session *s = p->s;
	struct reply r = {.fd = -1};

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
}

/* the id fields of free, attach, detach, unregister; devices by index and UUID; unknown ids */
static void test_params_ids(void **state)
{
	struct params *p = *state;
	struct broker *b = p->b;
	struct session *s = p->s;
	struct reply r = {.fd = -1};

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
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_params_alloc),
	    cmocka_unit_test(test_params_alloc_good),
	    cmocka_unit_test(test_params_register),
	    cmocka_unit_test(test_params_ids),
	};

	/* Errors only, as in every broker test binary. */
	log_init(LOG_LEVEL_ERROR);
	return cmocka_run_group_tests(tests, params_setup, params_teardown);
}
