/*
 * test-broker-policy.c - the VRAM policy wired into the broker and the
 * dispatcher, without sockets: caps in register and mem_info, quota errors,
 * cap_changed events to the owners of the instances whose cap moved, and
 * the policy requests (policy, set_proportion, set_auto, set_group,
 * group_info, set_mode, set_limit, set_allocator) with their permissions.
 *
 * Shared helpers: broker-policy-helpers.h (the fake sender and timer) and
 * session-helpers.h.
 */
#include <errno.h>
#include <fcntl.h>
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

/* ---- caps and quotas -------------------------------------------------------- */

static void test_register_caps(void **state)
{
	struct broker *b = policy_broker(100 * MiB, POLICY_ACTIVE, 0);
	struct session *s1 = client(b, UID_A, "one"), *s2 = client(b, UID_B, "two");
	struct reply r = {.fd = -1};
	(void)state;

	request(b, s1, &r, "{\"id\":\"r\",\"method\":\"register\",\"params\":{\"name\":\"a\"}}");
	const cJSON *res = result_of(&r, "r");
	uint64_t a = jid(res, "instance");
	assert_int_equal(ju64(res, "cap"), 100 * MiB);
	assert_true(jnum(res, "share") == 1.0);
	assert_null(cJSON_GetObjectItemCaseSensitive(res, "warnings"));
	reply_done(&r);
	assert_int_equal(sent_count, 0);

	/* A manual instance in another session: a's cap halves, a hears it. */
	request(b, s2, &r,
	        "{\"id\":\"r\",\"method\":\"register\",\"params\":{\"name\":\"b\",\"proportion\":"
	        "0.5}}");
	res = result_of(&r, "r");
	assert_int_equal(ju64(res, "cap"), 50 * MiB);
	reply_done(&r);
	check(b);
	assert_int_equal(sent_to(s1, "cap_changed"), 1);
	assert_int_equal(sent_to(s2, "cap_changed"), 0);
	assert_int_equal(announced_cap(s1, a), 50 * MiB);
	const cJSON *data = jget(sent_nth(s1, 0), "data");
	assert_true(jnum(data, "share") == 0.5);
	assert_string_equal(jstr(data, "mode"), "active");
	sent_clear();

	/* Refusals say why, on the field "proportion". */
	expect_error_fmt(b, s2, PROTO_E_PARAMS, "proportion",
	                 "{\"id\":\"e\",\"method\":\"register\",\"params\":{\"name\":\"c\","
	                 "\"proportion\":0.6}}");
	request(b, s2, &r,
	        "{\"id\":\"e\",\"method\":\"register\",\"params\":{\"name\":\"c\",\"proportion\":"
	        "0.6}}");
	assert_non_null(strstr(r.r.message, "over 1"));
	reply_done(&r);
	/* 0.4995 would leave 0.0005 for the auto instance: under 0.001. */
	request(b, s2, &r,
	        "{\"id\":\"e\",\"method\":\"register\",\"params\":{\"name\":\"c\",\"proportion\":"
	        "0.4995}}");
	assert_int_equal(r.r.code, PROTO_E_PARAMS);
	assert_non_null(strstr(r.r.message, "minimum"));
	reply_done(&r);
	assert_int_equal(sent_count, 0);
	assert_int_equal(b->instance_count, 2);
	/* Under 5% left for the auto pool: a warning in the reply. */
	request(b, s2, &r,
	        "{\"id\":\"w\",\"method\":\"register\",\"params\":{\"name\":\"c\",\"proportion\":"
	        "0.46}}");
	res = result_of(&r, "w");
	const cJSON *warn = jarr(res, "warnings", 1);
	assert_non_null(strstr(cJSON_GetArrayItem(warn, 0)->valuestring, "auto pool"));
	reply_done(&r);
	check(b);
	/* The auto instance on a full manual pool can still be seen. */
	request(b, s1, &r, "{\"id\":\"m\",\"method\":\"mem_info\"}");
	res = result_of(&r, "m");
	const cJSON *o = cJSON_GetArrayItem(jarr(res, "instances", 1), 0);
	assert_int_equal(ju64(o, "cap"), 100 * MiB - 50 * MiB - ((46 * MiB) + 0));
	assert_true(cJSON_IsNull(jget(o, "proportion")));
	reply_done(&r);
	broker_done(b);
}

static void test_quota(void **state)
{
	struct broker *b = policy_broker(64 * MiB, POLICY_ACTIVE, 0);
	struct session *s1 = client(b, UID_A, "one");
	struct broker_instance *a = reg_p(b, s1, 0, 0.25, NULL);
	struct broker_grant g;
	struct reply r = {.fd = -1};
	(void)state;

	assert_int_equal(a->pol.cap, 16 * MiB);
	alloc_ok(b, s1, a, 16 * MiB - 1000, 0);
	check(b);
	assert_int_equal(broker_alloc(b, s1, a->id, 2048, 0, &g), -EDQUOT);
	request(b, s1, &r,
	        "{\"id\":\"q\",\"method\":\"alloc\",\"params\":{\"instance\":\"%016" PRIx64
	        "\",\"size\":\"1025\"}}",
	        a->id);
	assert_int_equal(r.r.code, PROTO_E_QUOTA);
	assert_int_equal(ju64(r.r.data, "cap"), 16 * MiB);
	assert_int_equal(ju64(r.r.data, "used"), 16 * MiB - 768);
	assert_int_equal(ju64(r.r.data, "requested"), 1280);
	reply_done(&r);
	/* Exactly the rest of the cap fits. */
	alloc_ok(b, s1, a, 768, 0);
	check(b);
	/* Passive: the cap is the device. */
	assert_int_equal(broker_set_mode(b, POLICY_PASSIVE), 0);
	assert_int_equal(a->pol.cap, 64 * MiB);
	alloc_ok(b, s1, a, 4096, 0);
	check(b);
	broker_done(b);
}

/* A limit bounds both modes; refusals past it are out_of_memory. */
static void test_limit(void **state)
{
	struct broker *b = policy_broker(64 * MiB, POLICY_PASSIVE, 0);
	struct session *admin = client(b, 0, "root"), *s1 = client(b, UID_A, "one");
	struct broker_instance *a = reg_p(b, s1, 0, 0, NULL);
	struct broker_instance *a1 = reg_p(b, s1, 1, 0, NULL);
	struct broker_grant g;
	struct reply r = {.fd = -1};
	(void)state;

	assert_true(admin->admin);
	assert_false(s1->admin);
	expect_error_fmt(b, s1, PROTO_E_PERMISSION, NULL,
	                 "{\"id\":\"e\",\"method\":\"set_limit\",\"params\":{\"size\":\"1024\"}}");
	expect_error_fmt(b, admin, PROTO_E_PARAMS, "size",
	                 "{\"id\":\"e\",\"method\":\"set_limit\",\"params\":{}}");
	expect_error_fmt(b, admin, PROTO_E_PARAMS, "size",
	                 "{\"id\":\"e\",\"method\":\"set_limit\",\"params\":{\"size\":\"1\","
	                 "\"fraction\":0.5}}");
	expect_error_fmt(b, admin, PROTO_E_PARAMS, "fraction",
	                 "{\"id\":\"e\",\"method\":\"set_limit\",\"params\":{\"fraction\":0}}");
	expect_error_fmt(b, admin, PROTO_E_PARAMS, "fraction",
	                 "{\"id\":\"e\",\"method\":\"set_limit\",\"params\":{\"fraction\":1.5}}");
	expect_error_fmt(b, admin, PROTO_E_PARAMS, "device",
	                 "{\"id\":\"e\",\"method\":\"set_limit\",\"params\":{\"device\":2,"
	                 "\"size\":\"1\"}}");
	expect_error_fmt(b, admin, PROTO_E_PARAMS, "size",
	                 "{\"id\":\"e\",\"method\":\"set_limit\",\"params\":{\"size\":\"-1\"}}");

	request(
	    b, admin, &r,
	    "{\"id\":\"l\",\"method\":\"set_limit\",\"params\":{\"device\":0,\"size\":\"%llu\"}}",
	    (unsigned long long)(8 * MiB));
	const cJSON *devs = jarr(result_of(&r, "l"), "devices", 2);
	assert_int_equal(ju64(cJSON_GetArrayItem(devs, 0), "capacity"), 8 * MiB);
	assert_int_equal(ju64(cJSON_GetArrayItem(devs, 0), "limit"), 8 * MiB);
	assert_int_equal(ju64(cJSON_GetArrayItem(devs, 1), "capacity"), 64 * MiB);
	assert_true(cJSON_IsNull(jget(cJSON_GetArrayItem(devs, 1), "limit")));
	reply_done(&r);
	check(b);
	/* Passive caps follow the capacity: the owner hears it. */
	assert_int_equal(announced_cap(s1, a->id), 8 * MiB);
	assert_int_equal(announced_cap(s1, a1->id), -1);
	sent_clear();
	alloc_ok(b, s1, a, 6 * MiB, 0);
	assert_int_equal(broker_alloc(b, s1, a->id, 4 * MiB, 0, &g), -ENOMEM);
	request(b, s1, &r,
	        "{\"id\":\"o\",\"method\":\"alloc\",\"params\":{\"instance\":\"%016" PRIx64
	        "\",\"size\":\"%llu\"}}",
	        a->id, (unsigned long long)(4 * MiB));
	assert_int_equal(r.r.code, PROTO_E_NO_MEMORY);
	assert_int_equal(ju64(r.r.data, "device_free"), 2 * MiB);
	reply_done(&r);
	/* A fraction on every device. */
	request(b, admin, &r,
	        "{\"id\":\"l\",\"method\":\"set_limit\",\"params\":{\"fraction\":0.25}}");
	devs = jarr(result_of(&r, "l"), "devices", 2);
	assert_int_equal(ju64(cJSON_GetArrayItem(devs, 1), "capacity"), 16 * MiB);
	assert_true(jnum(cJSON_GetArrayItem(devs, 1), "limit_fraction") == 0.25);
	reply_done(&r);
	assert_int_equal(a1->pol.cap, 16 * MiB);
	/* Removed with size "0". */
	request(b, admin, &r,
	        "{\"id\":\"l\",\"method\":\"set_limit\",\"params\":{\"size\":\"0\"}}");
	reply_done(&r);
	assert_int_equal(a->pol.cap, 64 * MiB);
	alloc_ok(b, s1, a, 4 * MiB, 0);
	check(b);
	broker_done(b);
}

/* ---- the policy requests ---------------------------------------------------- */

static void test_set_mode(void **state)
{
	struct broker *b = policy_broker(64 * MiB, POLICY_PASSIVE, 0);
	struct session *admin = client(b, 0, "root"), *s1 = client(b, UID_A, "one");
	struct session *s2 = client(b, UID_B, "two");
	struct broker_instance *a = reg_p(b, s1, 0, 0, NULL);
	struct broker_instance *c = reg_p(b, s2, 0, 0.25, NULL);
	struct reply r = {.fd = -1};
	(void)state;

	assert_int_equal(sent_count, 0); /* passive: caps did not move */
	expect_error_fmt(b, s1, PROTO_E_PERMISSION, NULL,
	                 "{\"id\":\"e\",\"method\":\"set_mode\",\"params\":{\"mode\":\"active\"}}");
	expect_error_fmt(b, admin, PROTO_E_PARAMS, "mode",
	                 "{\"id\":\"e\",\"method\":\"set_mode\",\"params\":{\"mode\":\"Active\"}}");
	expect_error_fmt(b, admin, PROTO_E_PARAMS, "mode",
	                 "{\"id\":\"e\",\"method\":\"set_mode\",\"params\":{}}");
	request(b, admin, &r,
	        "{\"id\":\"m\",\"method\":\"set_mode\",\"params\":{\"mode\":\"active\"}}");
	assert_string_equal(jstr(result_of(&r, "m"), "mode"), "active");
	assert_string_equal(jstr(result_of(&r, "m"), "previous"), "passive");
	reply_done(&r);
	check(b);
	/* Every running client hears its new cap at once. */
	assert_int_equal(announced_cap(s1, a->id), 48 * MiB);
	assert_int_equal(announced_cap(s2, c->id), 16 * MiB);
	assert_int_equal(sent_to(admin, NULL), 0);
	sent_clear();
	request(b, admin, &r,
	        "{\"id\":\"m\",\"method\":\"set_mode\",\"params\":{\"mode\":\"active\"}}");
	reply_done(&r);
	assert_int_equal(sent_count, 0);
	broker_done(b);
}

static void test_set_proportion(void **state)
{
	struct broker *b = policy_broker(100 * MiB, POLICY_ACTIVE, 0);
	struct session *admin = client(b, 0, "root"), *s1 = client(b, UID_A, "one");
	struct session *s2 = client(b, UID_B, "two");
	struct broker_instance *a = reg_p(b, s1, 0, 0, NULL);
	struct broker_instance *c = reg_p(b, s2, 0, 0, NULL);
	struct reply r = {.fd = -1};
	(void)state;

	sent_clear();
	/* The owner moves its instance to the manual pool. */
	request(b, s1, &r,
	        "{\"id\":\"p\",\"method\":\"set_proportion\",\"params\":{\"instance\":\"%016" PRIx64
	        "\",\"proportion\":0.75}}",
	        a->id);
	const cJSON *res = result_of(&r, "p");
	assert_true(jnum(res, "proportion") == 0.75);
	assert_int_equal(ju64(res, "cap"), 75 * MiB);
	assert_string_equal(jstr(res, "group"), "default");
	reply_done(&r);
	check(b);
	/* Only the other instance is told (the caller has the reply). */
	assert_int_equal(sent_to(s1, "cap_changed"), 0);
	assert_int_equal(announced_cap(s2, c->id), 25 * MiB);
	sent_clear();
	/* Another connection's instance of the same user (which `policy` shows
	 * it): permission denied. Another user's: not found, as an unknown one. */
	struct session *s1b = client(b, UID_A, "one-b");
	static const struct {
		const char *method, *more;
	} setters[] = {
	    {"set_proportion", ",\"proportion\":0.5"},
	    {"set_auto", ""},
	    {"set_group", ",\"group\":\"x\""},
	};
	for (size_t i = 0; i < sizeof(setters) / sizeof(setters[0]); i++) {
		expect_error_fmt(b, s1b, PROTO_E_PERMISSION, NULL,
		                 "{\"id\":\"e\",\"method\":\"%s\",\"params\":{\"instance\":"
		                 "\"%016" PRIx64 "\"%s}}",
		                 setters[i].method, a->id, setters[i].more);
		expect_error_fmt(b, s2, PROTO_E_NOT_FOUND, NULL,
		                 "{\"id\":\"e\",\"method\":\"%s\",\"params\":{\"instance\":"
		                 "\"%016" PRIx64 "\"%s}}",
		                 setters[i].method, a->id, setters[i].more);
	}
	expect_error_fmt(b, s2, PROTO_E_NOT_FOUND, NULL,
	                 "{\"id\":\"e\",\"method\":\"set_proportion\",\"params\":{\"instance\":"
	                 "\"00000000000000ff\",\"proportion\":0.5}}");
	/* Bad values. */
	static const char *const bad[] = {"0", "1.5", "-0.1", "\"0.5\"", "null", "true"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		expect_error_fmt(b, s1, PROTO_E_PARAMS, "proportion",
		                 "{\"id\":\"e\",\"method\":\"set_proportion\",\"params\":{"
		                 "\"instance\":\"%016" PRIx64 "\",\"proportion\":%s}}",
		                 a->id, bad[i]);
	expect_error_fmt(b, s1, PROTO_E_PARAMS, "instance",
	                 "{\"id\":\"e\",\"method\":\"set_proportion\",\"params\":{"
	                 "\"proportion\":0.5}}");
	/* The rules: over 1, and the auto pool's minimum. */
	request(b, s1, &r,
	        "{\"id\":\"e\",\"method\":\"set_proportion\",\"params\":{\"instance\":\"%016" PRIx64
	        "\",\"proportion\":1}}",
	        a->id);
	assert_int_equal(r.r.code, PROTO_E_PARAMS);
	assert_non_null(strstr(r.r.message, "minimum"));
	reply_done(&r);
	/* An admin may change anyone's instance. */
	request(b, admin, &r,
	        "{\"id\":\"p\",\"method\":\"set_proportion\",\"params\":{\"instance\":\"%016" PRIx64
	        "\",\"proportion\":0.2}}",
	        c->id);
	reply_done(&r);
	check(b);
	assert_int_equal(c->pol.cap, 20 * MiB);
	/* Both caps are manual now; nothing else moved. */
	assert_int_equal(announced_cap(s2, c->id), -1);
	request(b, s2, &r,
	        "{\"id\":\"e\",\"method\":\"set_proportion\",\"params\":{\"instance\":\"%016" PRIx64
	        "\",\"proportion\":0.3}}",
	        c->id);
	assert_int_equal(r.r.code, PROTO_E_PARAMS);
	assert_non_null(strstr(r.r.message, "over 1"));
	reply_done(&r);
	/* Back to auto. */
	request(b, s2, &r,
	        "{\"id\":\"a\",\"method\":\"set_auto\",\"params\":{\"instance\":\"%016" PRIx64
	        "\"}}",
	        c->id);
	res = result_of(&r, "a");
	assert_true(cJSON_IsNull(jget(res, "proportion")));
	assert_int_equal(ju64(res, "cap"), 25 * MiB);
	reply_done(&r);
	check(b);
	broker_done(b);
}

static void test_policy_query(void **state)
{
	struct broker *b = policy_broker(100 * MiB, POLICY_ACTIVE, 0);
	struct session *s1 = client(b, UID_A, "one"), *s2 = client(b, UID_A, "two");
	struct broker_instance *a = reg_p(b, s1, 0, 0.5, "solver");
	reg_p(b, s2, 0, 0, "solver");
	reg_p(b, s2, 1, 0, NULL);
	struct reply r = {.fd = -1};
	(void)state;

	alloc_ok(b, s1, a, 10 * MiB, 0);
	request(b, s2, &r, "{\"id\":\"p\",\"method\":\"policy\"}");
	const cJSON *res = result_of(&r, "p");
	assert_string_equal(jstr(res, "mode"), "active");
	assert_true(jnum(res, "min_auto_share") == POLICY_MIN_AUTO_SHARE);
	const cJSON *d0 = cJSON_GetArrayItem(jarr(res, "devices", 2), 0);
	assert_int_equal(ju64(d0, "total"), 100 * MiB);
	assert_int_equal(ju64(d0, "capacity"), 100 * MiB);
	assert_int_equal(ju64(d0, "used"), 10 * MiB);
	assert_int_equal(ju64(d0, "available"), 90 * MiB);
	assert_true(jnum(d0, "manual") == 0.5);
	assert_true(jnum(d0, "auto") == 0.5);
	assert_int_equal(jnum(d0, "manual_instances"), 1);
	assert_int_equal(jnum(d0, "auto_instances"), 1);
	assert_int_equal(ju64(d0, "auto_cap"), 50 * MiB);
	/* Every instance of every client of this user, in registration order. */
	const cJSON *insts = jarr(res, "instances", 3);
	const cJSON *o = cJSON_GetArrayItem(insts, 0);
	assert_int_equal(jid(o, "instance"), a->id);
	assert_int_equal(jid(o, "session"), s1->id);
	assert_int_equal(jnum(o, "uid"), UID_A);
	assert_string_equal(jstr(o, "group"), "solver");
	assert_true(cJSON_IsTrue(jget(o, "grouped")));
	assert_int_equal(ju64(o, "used"), 10 * MiB);
	assert_int_equal(ju64(o, "free"), 40 * MiB);
	o = cJSON_GetArrayItem(insts, 2);
	assert_false(cJSON_IsTrue(jget(o, "grouped")));
	assert_int_equal(ju64(o, "cap"), 100 * MiB);
	assert_int_equal(jnum(jget(res, "others"), "instances"), 0);
	assert_int_equal(ju64(jget(res, "others"), "used"), 0);
	reply_done(&r);

	/* Another user: its own instance in full (a group of the same name is
	 * its own, with no one else in it), the others as totals only. */
	struct session *s3 = client(b, UID_B, "three"), *admin = client(b, 0, "root");
	struct broker_instance *c = reg_p(b, s3, 1, 0, "solver");
	alloc_ok(b, s3, c, 1 * MiB, 0);
	request(b, s3, &r, "{\"id\":\"p\",\"method\":\"policy\"}");
	res = result_of(&r, "p");
	o = cJSON_GetArrayItem(jarr(res, "instances", 1), 0);
	assert_int_equal(jid(o, "instance"), c->id);
	assert_int_equal(jnum(o, "uid"), UID_B);
	assert_false(cJSON_IsTrue(jget(o, "grouped")));
	assert_int_equal(jnum(jget(res, "others"), "instances"), 3);
	assert_int_equal(ju64(jget(res, "others"), "used"), 10 * MiB);
	d0 = cJSON_GetArrayItem(jarr(res, "devices", 2), 0);
	assert_int_equal(ju64(d0, "used"), 10 * MiB);
	assert_int_equal(jnum(d0, "manual_instances"), 1);
	reply_done(&r);
	/* An administrator sees everyone. */
	request(b, admin, &r, "{\"id\":\"p\",\"method\":\"policy\"}");
	res = result_of(&r, "p");
	jarr(res, "instances", 4);
	assert_int_equal(jnum(jget(res, "others"), "instances"), 0);
	reply_done(&r);
	broker_done(b);
}

static void test_groups(void **state)
{
	struct broker *b = policy_broker(100 * MiB, POLICY_ACTIVE, 0);
	struct session *s1 = client(b, UID_A, "one"), *s2 = client(b, UID_A, "two");
	struct session *s3 = client(b, UID_B, "three");
	struct broker_instance *a = reg_p(b, s1, 0, 0.2, NULL);
	struct broker_instance *c = reg_p(b, s2, 0, 0.3, NULL);
	struct reply r = {.fd = -1};
	(void)state;

	expect_error_fmt(b, s1, PROTO_E_NOT_FOUND, NULL,
	                 "{\"id\":\"e\",\"method\":\"group_info\",\"params\":{\"group\":\"g\"}}");
	expect_error_fmt(b, s1, PROTO_E_PARAMS, "group",
	                 "{\"id\":\"e\",\"method\":\"group_info\",\"params\":{}}");
	expect_error_fmt(
	    b, s1, PROTO_E_PARAMS, "group",
	    "{\"id\":\"e\",\"method\":\"set_group\",\"params\":{\"instance\":\"%016" PRIx64
	    "\",\"group\":\"\"}}",
	    a->id);
	request(b, s1, &r,
	        "{\"id\":\"g\",\"method\":\"set_group\",\"params\":{\"instance\":\"%016" PRIx64
	        "\",\"group\":\"g\"}}",
	        a->id);
	assert_string_equal(jstr(result_of(&r, "g"), "group"), "g");
	assert_false(cJSON_IsTrue(jget(result_of(&r, "g"), "grouped")));
	reply_done(&r);
	request(b, s2, &r,
	        "{\"id\":\"g\",\"method\":\"set_group\",\"params\":{\"instance\":\"%016" PRIx64
	        "\",\"group\":\"g\"}}",
	        c->id);
	assert_true(cJSON_IsTrue(jget(result_of(&r, "g"), "grouped")));
	reply_done(&r);
	alloc_ok(b, s1, a, 19 * MiB, 0);
	alloc_ok(b, s2, c, 29 * MiB, 0);
	request(b, s2, &r, "{\"id\":\"i\",\"method\":\"group_info\",\"params\":{\"group\":\"g\"}}");
	const cJSON *res = result_of(&r, "i");
	jarr(res, "members", 2);
	assert_int_equal(ju64(res, "used"), 48 * MiB);
	assert_int_equal(ju64(res, "available"), 2 * MiB);
	assert_non_null(strstr(cJSON_GetArrayItem(jarr(res, "warnings", 1), 0)->valuestring, "95"));
	assert_int_equal(jnum(res, "uid"), UID_A);
	reply_done(&r);
	/* Groups are per user: another user's "g" is another group; this
	 * user's is not found for it, by name or by naming the user. */
	struct broker_instance *e = reg_p(b, s3, 0, 0.1, "g");
	expect_error_fmt(b, s3, PROTO_E_NOT_FOUND, NULL,
	                 "{\"id\":\"e\",\"method\":\"group_info\",\"params\":{\"group\":\"h\"}}");
	expect_error_fmt(b, s3, PROTO_E_NOT_FOUND, NULL,
	                 "{\"id\":\"e\",\"method\":\"group_info\",\"params\":{\"group\":\"g\","
	                 "\"uid\":%d}}",
	                 UID_A);
	alloc_ok(b, s3, e, 1 * MiB, 0);
	request(b, s3, &r, "{\"id\":\"i\",\"method\":\"group_info\",\"params\":{\"group\":\"g\"}}");
	res = result_of(&r, "i");
	char want[17];
	snprintf(want, sizeof(want), "%016" PRIx64, e->id);
	assert_string_equal(cJSON_GetArrayItem(jarr(res, "members", 1), 0)->valuestring, want);
	assert_int_equal(ju64(res, "used"), 1 * MiB);
	reply_done(&r);
	request(b, s1, &r, "{\"id\":\"i\",\"method\":\"group_info\",\"params\":{\"group\":\"g\"}}");
	jarr(result_of(&r, "i"), "members", 2);
	assert_int_equal(ju64(result_of(&r, "i"), "used"), 48 * MiB);
	reply_done(&r);
	/* An administrator names the user (its own by default). */
	struct session *admin = client(b, 0, "root");
	expect_error_fmt(b, admin, PROTO_E_NOT_FOUND, NULL,
	                 "{\"id\":\"e\",\"method\":\"group_info\",\"params\":{\"group\":\"g\"}}");
	request(b, admin, &r,
	        "{\"id\":\"i\",\"method\":\"group_info\",\"params\":{\"group\":\"g\",\"uid\":%d}}",
	        UID_B);
	jarr(result_of(&r, "i"), "members", 1);
	reply_done(&r);
	expect_error_fmt(b, admin, PROTO_E_PARAMS, "uid",
	                 "{\"id\":\"e\",\"method\":\"group_info\",\"params\":{\"group\":\"g\","
	                 "\"uid\":-1}}");
	check(b);
	broker_done(b);
}

/* A client that goes away gives its share to the others. */
static void test_departure(void **state)
{
	struct broker *b = policy_broker(90 * MiB, POLICY_ACTIVE, 0);
	struct session *s1 = client(b, UID_A, "one"), *s2 = client(b, UID_B, "two");
	struct session *s3 = client(b, UID_B, "three");
	struct broker_instance *a = reg_p(b, s1, 0, 0, NULL);
	struct broker_instance *c = reg_p(b, s2, 0, 0, NULL);
	struct broker_instance *d = reg_p(b, s3, 0, 0, NULL);
	(void)state;

	assert_int_equal(a->pol.cap, 30 * MiB);
	alloc_ok(b, s3, d, 20 * MiB, 0);
	sent_clear();
	broker_session_close(b, s3);
	check(b);
	assert_int_equal(announced_cap(s1, a->id), 45 * MiB);
	assert_int_equal(announced_cap(s2, c->id), 45 * MiB);
	sent_clear();
	/* Unregistering does the same. */
	assert_int_equal(broker_unregister(b, s2, c->id), 0);
	check(b);
	assert_int_equal(announced_cap(s1, a->id), 90 * MiB);
	broker_done(b);
}

/* Answers the invalidate event of epoch (0: the newest s was sent);
 * returns the slabs let go. */
static uint64_t invalidate_done(struct broker *b, struct session *s, uint64_t epoch)
{
	struct reply r = {.fd = -1};
	if (!epoch)
		epoch = ju64(jget(sent_nth(s, sent_to(s, "invalidate") - 1), "data"), "epoch");
	request(b, s, &r,
	        "{\"id\":\"d\",\"method\":\"invalidate_done\",\"params\":{\"epoch\":\"%" PRIu64
	        "\"}}",
	        epoch);
	uint64_t n = ju64(result_of(&r, "d"), "slabs");
	reply_done(&r);
	check(b);
	return n;
}

/* After an invalidate the slabs a client held stay until it says it has
 * closed them (with cuda, memory another process has open must not go
 * back to the driver), or its session ends. */
static void test_invalidate_parting(void **state)
{
	struct broker *b = policy_broker(64 * MiB, POLICY_PASSIVE, 0);
	struct session *s1 = client(b, UID_A, "one"), *idle = client(b, UID_B, "idle");
	struct broker_instance *a = reg_p(b, s1, 0, 0, NULL);
	uint64_t allocs, attachments;
	(void)state;

	/* direct keeps no empty slab: a slab let go is gone at once. */
	assert_int_equal(broker_set_allocator(b, BROKER_ALLOCATOR_DIRECT, &allocs, &attachments),
	                 0);
	alloc_ok(b, s1, a, 4096, 0);
	sent_clear();
	broker_invalidate_all(b, &allocs, &attachments);
	check(b);
	assert_int_equal(allocs, 1);
	assert_int_equal(b->allocs.count, 0);
	assert_int_equal(slab_count(b, 0), 1);
	assert_int_equal(s1->parting_count, 1);
	assert_int_equal(idle->parting_count, 0);
	const cJSON *ev = jget(sent_nth(s1, 0), "data");
	assert_int_equal(ju64(ev, "epoch"), b->invalidate_epoch);
	/* An epoch not sent yet, or none, is refused and lets nothing go. */
	expect_error_fmt(
	    b, s1, PROTO_E_PARAMS, "epoch",
	    "{\"id\":\"e\",\"method\":\"invalidate_done\",\"params\":{\"epoch\":\"%" PRIu64 "\"}}",
	    b->invalidate_epoch + 1);
	expect_error_fmt(b, s1, PROTO_E_PARAMS, "epoch",
	                 "{\"id\":\"e\",\"method\":\"invalidate_done\",\"params\":{}}");
	assert_int_equal(slab_count(b, 0), 1);
	assert_int_equal(invalidate_done(b, idle, 0), 0);
	assert_int_equal(slab_count(b, 0), 1);
	assert_int_equal(invalidate_done(b, s1, 0), 1);
	assert_int_equal(slab_count(b, 0), 0);
	assert_int_equal(s1->parting_count, 0);

	/* Two invalidates before the client reads either: answering the
	 * first lets go of its slab only. */
	alloc_ok(b, s1, a, 4096, 0);
	broker_invalidate_all(b, &allocs, &attachments);
	uint64_t first = b->invalidate_epoch;
	alloc_ok(b, s1, a, 4096, 0);
	broker_invalidate_all(b, &allocs, &attachments);
	assert_int_equal(slab_count(b, 0), 2);
	assert_int_equal(invalidate_done(b, s1, first), 1);
	assert_int_equal(slab_count(b, 0), 1);
	assert_int_equal(invalidate_done(b, s1, 0), 1);
	assert_int_equal(slab_count(b, 0), 0);

	/* A pool replaced while a slab is parting lives on, retired, until
	 * that slab is let go; here the session's end does it. */
	struct session *s2 = client(b, UID_A, "two");
	struct broker_instance *a2 = reg_p(b, s2, 0, 0, NULL);
	alloc_ok(b, s2, a2, 4096, 0);
	assert_int_equal(broker_set_allocator(b, BROKER_ALLOCATOR_POOL, &allocs, &attachments), 0);
	check(b);
	assert_false(list_empty(&b->retired));
	assert_int_equal(slab_count(b, 0), 0); /* the new pool's */
	assert_int_equal(s2->parting_count, 1);
	broker_session_close(b, s2);
	check(b);
	assert_true(list_empty(&b->retired));
	broker_done(b);
}

static struct broker_ghost *watched;
static pid_t watched_pid;
static int watched_pidfd;

/* broker_exit_fn of the test: remembers the ghost and what names it. */
static int watch_exit(void *ctx, pid_t pid, int pidfd, struct broker_ghost *ghost)
{
	(void)ctx;
	/* The broker never asks for a process it cannot name. */
	assert_true(pid > 0 || pidfd >= 0);
	watched = ghost;
	watched_pid = pid;
	watched_pidfd = pidfd;
	return 0;
}

static unsigned ghost_count(const struct broker *b)
{
	struct broker_parting_counts pc;
	broker_parting_counts(b, &pc);
	return pc.ghosts;
}

/* An evicted session's slabs (held and parting) stay until its process
 * has exited; without a pid to watch they go at once. */
static void test_evicted_ghost(void **state)
{
	struct broker *b = policy_broker(64 * MiB, POLICY_PASSIVE, 0);
	uint64_t allocs, attachments;
	(void)state;

	assert_int_equal(broker_set_allocator(b, BROKER_ALLOCATOR_DIRECT, &allocs, &attachments),
	                 0);
	broker_set_exit_watch(b, watch_exit, NULL);
	struct session *s1 = client(b, UID_A, "one");
	s1->pid = 4242;
	struct broker_instance *a = reg_p(b, s1, 0, 0, NULL);
	alloc_ok(b, s1, a, 4096, 0);
	broker_invalidate_all(b, &allocs, &attachments); /* one slab parting */
	alloc_ok(b, s1, a, 4096, 0);                     /* one held */
	assert_int_equal(slab_count(b, 0), 2);
	s1->evicted = true;
	broker_session_close(b, s1);
	check(b);
	assert_non_null(watched);
	assert_int_equal(watched_pid, 4242);
	assert_int_equal(ghost_count(b), 1);
	assert_int_equal(slab_count(b, 0), 2);
	/* A pool replaced meanwhile waits for the ghost too. */
	assert_int_equal(broker_set_allocator(b, BROKER_ALLOCATOR_POOL, &allocs, &attachments), 0);
	assert_false(list_empty(&b->retired));
	check(b);
	broker_ghost_release(b, watched);
	watched = NULL;
	check(b);
	assert_int_equal(ghost_count(b), 0);
	assert_true(list_empty(&b->retired));

	/* No pid (another PID namespace), and no pidfd: nothing to watch,
	 * and pid 0 is no sign that the process exited: the slab stays. */
	struct session *s2 = client(b, UID_A, "two");
	s2->pid = 0;
	struct broker_instance *a2 = reg_p(b, s2, 0, 0, NULL);
	alloc_ok(b, s2, a2, 4096, 0);
	s2->evicted = true;
	broker_session_close(b, s2);
	check(b);
	assert_null(watched);
	assert_int_equal(ghost_count(b), 1);

	/* No pid, but the peer's pidfd: watched through it. */
	struct session *s4 = client(b, UID_A, "four");
	s4->pid = 0;
	s4->pidfd = open("/dev/null", O_RDONLY | O_CLOEXEC); /* any: the broker only passes it on */
	assert_true(s4->pidfd >= 0);
	int fd4 = s4->pidfd;
	struct broker_instance *a4 = reg_p(b, s4, 0, 0, NULL);
	alloc_ok(b, s4, a4, 4096, 0);
	s4->evicted = true;
	broker_session_close(b, s4); /* closes its pidfd */
	check(b);
	assert_non_null(watched);
	assert_int_equal(watched_pid, 0);
	assert_int_equal(watched_pidfd, fd4);
	assert_int_equal(ghost_count(b), 2);
	broker_ghost_release(b, watched);
	watched = NULL;
	assert_int_equal(ghost_count(b), 1);

	/* A ghost still watched when the broker goes is let go with it. */
	struct session *s3 = client(b, UID_A, "three");
	s3->pid = 4343;
	struct broker_instance *a3 = reg_p(b, s3, 0, 0, NULL);
	alloc_ok(b, s3, a3, 4096, 0);
	s3->evicted = true;
	broker_session_close(b, s3);
	assert_int_equal(ghost_count(b), 2); /* s2's too */
	watched = NULL;
	broker_done(b);
}

static void test_set_allocator(void **state)
{
	struct broker *b = policy_broker(64 * MiB, POLICY_PASSIVE, 0);
	struct session *admin = client(b, 0, "root"), *s1 = client(b, UID_A, "one");
	struct broker_instance *a = reg_p(b, s1, 0, 0, NULL);
	struct reply r = {.fd = -1};
	(void)state;

	alloc_ok(b, s1, a, 4096, 0);
	alloc_ok(b, s1, a, 4096, 0);
	assert_int_equal(slab_count(b, 0), 1);
	expect_error_fmt(b, s1, PROTO_E_PERMISSION, NULL,
	                 "{\"id\":\"e\",\"method\":\"set_allocator\",\"params\":{\"allocator\":"
	                 "\"direct\"}}");
	expect_error_fmt(b, admin, PROTO_E_PARAMS, "allocator",
	                 "{\"id\":\"e\",\"method\":\"set_allocator\",\"params\":{\"allocator\":"
	                 "\"cupy\"}}");
	expect_error_fmt(b, admin, PROTO_E_NOT_SUPPORTED, NULL,
	                 "{\"id\":\"e\",\"method\":\"set_allocator\",\"params\":{\"allocator\":"
	                 "\"async\"}}");
	/* The same allocator: nothing happens. */
	request(b, admin, &r,
	        "{\"id\":\"s\",\"method\":\"set_allocator\",\"params\":{\"allocator\":\"pool\"}}");
	assert_int_equal(ju64(result_of(&r, "s"), "allocations"), 0);
	reply_done(&r);
	assert_int_equal(sent_count, 0);
	assert_int_equal(a->live, 2);
	/* direct: everything is released, everyone hears it. */
	request(
	    b, admin, &r,
	    "{\"id\":\"s\",\"method\":\"set_allocator\",\"params\":{\"allocator\":\"direct\"}}");
	const cJSON *res = result_of(&r, "s");
	assert_string_equal(jstr(res, "allocator"), "direct");
	assert_string_equal(jstr(res, "previous"), "pool");
	assert_int_equal(ju64(res, "allocations"), 2);
	reply_done(&r);
	check(b);
	assert_int_equal(sent_to(s1, "invalidate"), 1);
	assert_string_equal(jstr(jget(sent_nth(s1, 0), "data"), "reason"), "set_allocator");
	assert_int_equal(a->live, 0);
	assert_int_equal(slab_count(b, 0), 0);
	/* One backend allocation per request, none kept once freed. */
	struct broker_grant g1 = alloc_ok(b, s1, a, 4096, 0);
	alloc_ok(b, s1, a, 4096, 0);
	assert_int_equal(slab_count(b, 0), 2);
	assert_int_equal(broker_free(b, s1, g1.id), 0);
	assert_int_equal(slab_count(b, 0), 1);
	check(b);
	/* Exact accounting: each backend allocation is the request rounded
	 * to the 256-byte granule, whatever its alignment, and holds only it;
	 * what the device reserves is what the instance is charged. */
	struct broker_grant g3 = alloc_ok(b, s1, a, 1000, 0);
	assert_int_equal(g3.size, 1024);
	assert_int_equal(g3.slab_size, 1024);
	struct broker_grant g4 = alloc_ok(b, s1, a, 5 * MiB + 1, 1 << 20);
	assert_int_equal(g4.slab_size, 5 * MiB + 256);
	assert_int_equal(g4.offset, 0);
	struct pool_stats ps = dev_stats(b, 0);
	assert_int_equal(ps.reserved, ps.used);
	assert_int_equal(ps.reserved, 4096 + 1024 + 5 * MiB + 256);
	assert_int_equal(a->used, ps.used);
	assert_int_equal(broker_free(b, s1, g3.id), 0);
	assert_int_equal(broker_free(b, s1, g4.id), 0);
	ps = dev_stats(b, 0);
	assert_int_equal(ps.reserved, 4096);
	check(b);
	request(b, s1, &r, "{\"id\":\"p\",\"method\":\"policy\"}");
	assert_string_equal(jstr(result_of(&r, "p"), "allocator"), "direct");
	reply_done(&r);
	/* And back. */
	request(b, admin, &r,
	        "{\"id\":\"s\",\"method\":\"set_allocator\",\"params\":{\"allocator\":\"pool\"}}");
	assert_int_equal(ju64(result_of(&r, "s"), "allocations"), 1);
	reply_done(&r);
	alloc_ok(b, s1, a, 4096, 0);
	alloc_ok(b, s1, a, 4096, 0);
	assert_int_equal(slab_count(b, 0), 1);
	check(b);
	broker_done(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_teardown(test_register_caps, sent_teardown),
	    cmocka_unit_test_teardown(test_quota, sent_teardown),
	    cmocka_unit_test_teardown(test_limit, sent_teardown),
	    cmocka_unit_test_teardown(test_set_mode, sent_teardown),
	    cmocka_unit_test_teardown(test_set_proportion, sent_teardown),
	    cmocka_unit_test_teardown(test_policy_query, sent_teardown),
	    cmocka_unit_test_teardown(test_groups, sent_teardown),
	    cmocka_unit_test_teardown(test_departure, sent_teardown),
	    cmocka_unit_test_teardown(test_set_allocator, sent_teardown),
	    cmocka_unit_test_teardown(test_invalidate_parting, sent_teardown),
	    cmocka_unit_test_teardown(test_evicted_ghost, sent_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
