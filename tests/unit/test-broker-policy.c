/*
 * test-broker-policy.c - the VRAM policy wired into the broker and the
 * dispatcher, without sockets: caps in register and mem_info, quota errors,
 * cap_changed events to the owners of the instances whose cap moved, the
 * policy requests (policy, set_proportion, set_auto, set_group, group_info,
 * set_mode, set_limit) with their permissions, and allocations that wait:
 * served in arrival order, timed out, cancelled with their session.
 *
 * A fake sender records what the broker pushes (events and deferred
 * replies) per session; a fake timer records what it is asked to arm.
 * Shared helpers: session-helpers.h.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "broker.h"
#include "dispatch.h"
#include "policy.h"
#include "proto.h"

#include "session-helpers.h"

/* ---- what the broker pushes ------------------------------------------------ */

#define MAX_SENT 64

struct sent {
	struct session *s;
	cJSON *root;
	int fd;
};

static struct sent sent[MAX_SENT];
static int sent_count;

static void fake_send(void *ctx, struct session *s, char *frame, size_t len, int fd)
{
	(void)ctx;
	assert_true(len >= 2 && frame[len - 1] == '\n');
	assert_true(sent_count < MAX_SENT);
	sent[sent_count].s = s;
	sent[sent_count].root = cJSON_ParseWithLength(frame, len - 1);
	sent[sent_count].fd = fd;
	assert_non_null(sent[sent_count].root);
	sent_count++;
	free(frame);
}

static void sent_clear(void)
{
	for (int i = 0; i < sent_count; i++)
		cJSON_Delete(sent[i].root);
	sent_count = 0;
}

static int sent_teardown(void **state)
{
	sent_clear();
	return teardown(state);
}

/* How many frames went to s (events named `event`, or replies when NULL). */
static int sent_to(const struct session *s, const char *event)
{
	int n = 0;
	for (int i = 0; i < sent_count; i++) {
		const cJSON *ev = cJSON_GetObjectItemCaseSensitive(sent[i].root, "event");
		if (sent[i].s != s)
			continue;
		if (event ? (cJSON_IsString(ev) && strcmp(ev->valuestring, event) == 0) : !ev)
			n++;
	}
	return n;
}

/* The n-th frame sent to s (0 = oldest). */
static const cJSON *sent_nth(const struct session *s, int n)
{
	for (int i = 0; i < sent_count; i++) {
		if (sent[i].s == s && n-- == 0)
			return sent[i].root;
	}
	fail_msg("fewer frames than expected were sent to session %llu", (unsigned long long)s->id);
	return NULL;
}

/* The cap a cap_changed event to s announced for instance, or -1. */
static int64_t announced_cap(const struct session *s, uint64_t instance)
{
	int64_t cap = -1;
	for (int i = 0; i < sent_count; i++) {
		const cJSON *ev = cJSON_GetObjectItemCaseSensitive(sent[i].root, "event");
		const cJSON *data = cJSON_GetObjectItemCaseSensitive(sent[i].root, "data");
		uint64_t id, c;
		if (sent[i].s != s || !cJSON_IsString(ev) || strcmp(ev->valuestring, "cap_changed"))
			continue;
		assert_int_equal(proto_get_id64(data, "instance", &id), 0);
		assert_int_equal(proto_get_u64(data, "cap", 0, UINT64_MAX, &c), 0);
		if (id == instance)
			cap = (int64_t)c;
	}
	return cap;
}

/* ---- the timer ----------------------------------------------------------- */

static uint64_t timer_delay = 7;
static int timer_calls;

static void fake_timer(void *ctx, uint64_t delay_ms)
{
	(void)ctx;
	timer_delay = delay_ms;
	timer_calls++;
}

/* ---- helpers ------------------------------------------------------------- */

static struct broker *policy_broker(uint64_t mem, enum policy_mode mode, unsigned max_allocs)
{
	struct broker *b = broker_new(mem, 0, max_allocs);
	broker_set_sender(b, fake_send, NULL);
	broker_set_timer(b, fake_timer, NULL);
	timer_calls = 0;
	timer_delay = 7;
	assert_int_equal(broker_set_mode(b, mode), 0);
	sent_clear();
	return b;
}

static struct session *client(struct broker *b, uid_t uid, const char *name)
{
	struct session *s = open_session(b, uid, 4000 + (pid_t)uid);
	hello(b, s, name);
	return s;
}

static struct broker_instance *reg_p(struct broker *b, struct session *s, int device,
                                     double proportion, const char *group)
{
	struct broker_instance *inst = NULL;
	assert_int_equal(broker_register(b, s, "p", device, proportion, group, &inst), 0);
	check(b);
	return inst;
}

/* Sends a request that must be deferred (no reply now). */
static void request_deferred(struct broker *b, struct session *s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void request_deferred(struct broker *b, struct session *s, const char *fmt, ...)
{
	char frame[1024];
	struct dispatch_reply dr = {.fd = -7};
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(frame, sizeof(frame), fmt, ap);
	va_end(ap);
	dispatch_frame(b, s, frame, strlen(frame), &dr);
	if (dr.frame) {
		print_error("reply: %s", dr.frame);
		free(dr.frame);
		fail_msg("expected a deferred reply");
	}
	assert_true(dr.deferred);
}

static const cJSON *reply_result(const cJSON *root, const char *id)
{
	const cJSON *rid = cJSON_GetObjectItemCaseSensitive(root, "id");
	const cJSON *res = cJSON_GetObjectItemCaseSensitive(root, "result");
	assert_true(cJSON_IsString(rid));
	assert_string_equal(rid->valuestring, id);
	if (!res)
		fail_msg("not a result: %s", cJSON_PrintUnformatted(root));
	return res;
}

static int reply_code(const cJSON *root, const char *id)
{
	const cJSON *rid = cJSON_GetObjectItemCaseSensitive(root, "id");
	const cJSON *err = cJSON_GetObjectItemCaseSensitive(root, "error");
	assert_true(cJSON_IsString(rid));
	assert_string_equal(rid->valuestring, id);
	assert_non_null(err);
	return (int)jnum(err, "code");
}

static const cJSON *reply_data(const cJSON *root)
{
	return jget(jget(root, "error"), "data");
}

/* ---- caps and quotas -------------------------------------------------------- */

static void test_register_caps(void **state)
{
	struct broker *b = policy_broker(100 * MiB, POLICY_ACTIVE, 0);
	struct session *s1 = client(b, UID_A, "one"), *s2 = client(b, UID_B, "two");
	struct reply r;
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
	struct reply r;
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
	struct reply r;
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
	struct reply r;
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
	struct reply r;
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
	/* Someone else's instance: permission denied; unknown: not found. */
	expect_error_fmt(b, s2, PROTO_E_PERMISSION, NULL,
	                 "{\"id\":\"e\",\"method\":\"set_proportion\",\"params\":{\"instance\":"
	                 "\"%016" PRIx64 "\",\"proportion\":0.5}}",
	                 a->id);
	expect_error_fmt(b, s2, PROTO_E_PERMISSION, NULL,
	                 "{\"id\":\"e\",\"method\":\"set_auto\",\"params\":{\"instance\":"
	                 "\"%016" PRIx64 "\"}}",
	                 a->id);
	expect_error_fmt(b, s2, PROTO_E_PERMISSION, NULL,
	                 "{\"id\":\"e\",\"method\":\"set_group\",\"params\":{\"instance\":"
	                 "\"%016" PRIx64 "\",\"group\":\"x\"}}",
	                 a->id);
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
	struct session *s1 = client(b, UID_A, "one"), *s2 = client(b, UID_B, "two");
	struct broker_instance *a = reg_p(b, s1, 0, 0.5, "solver");
	reg_p(b, s2, 0, 0, "solver");
	reg_p(b, s2, 1, 0, NULL);
	struct reply r;
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
	/* Every instance of every client, in registration order. */
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
	reply_done(&r);
	broker_done(b);
}

static void test_groups(void **state)
{
	struct broker *b = policy_broker(100 * MiB, POLICY_ACTIVE, 0);
	struct session *s1 = client(b, UID_A, "one"), *s2 = client(b, UID_B, "two");
	struct broker_instance *a = reg_p(b, s1, 0, 0.2, NULL);
	struct broker_instance *c = reg_p(b, s2, 0, 0.3, NULL);
	struct reply r;
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
	reply_done(&r);
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

/* ---- waiting allocations ----------------------------------------------------- */

static void test_wait_served(void **state)
{
	struct broker *b = policy_broker(16 * MiB, POLICY_PASSIVE, 0);
	struct session *s1 = client(b, UID_A, "one"), *s2 = client(b, UID_B, "two");
	struct broker_instance *a = reg_p(b, s1, 0, 0, NULL);
	struct broker_instance *c = reg_p(b, s2, 0, 0, NULL);
	(void)state;

	struct broker_grant big = alloc_ok(b, s1, a, 12 * MiB, 0);
	/* Two waits of s2 in a row: 8 MiB, then 1 MiB. The small one would
	 * fit now, but it came later on the same device: it waits too. */
	request_deferred(
	    b, s2,
	    "{\"id\":\"w1\",\"method\":\"alloc\",\"params\":{\"instance\":\"%016" PRIx64
	    "\",\"size\":\"%llu\",\"wait_ms\":60000}}",
	    c->id, (unsigned long long)(8 * MiB));
	assert_int_equal(timer_calls, 1);
	assert_true(timer_delay > 59000 && timer_delay <= 60000);
	request_deferred(
	    b, s2,
	    "{\"id\":\"w2\",\"method\":\"alloc\",\"params\":{\"instance\":\"%016" PRIx64
	    "\",\"size\":\"%llu\",\"wait_ms\":1000}}",
	    c->id, (unsigned long long)MiB);
	/* The earlier deadline re-arms the timer. */
	assert_int_equal(timer_calls, 2);
	assert_true(timer_delay <= 1000);
	assert_int_equal(s2->wait_count, 2);
	assert_int_equal(b->wait_count, 2);
	check(b);
	/* Nothing frees, nothing is served. */
	broker_waits_run(b);
	assert_int_equal(sent_count, 0);
	/* s1 frees: both waits are served, in order, with grants. */
	assert_int_equal(broker_free(b, s1, big.id), 0);
	check(b);
	assert_int_equal(sent_to(s2, NULL), 2);
	const cJSON *r1 = reply_result(sent_nth(s2, 0), "w1");
	const cJSON *r2 = reply_result(sent_nth(s2, 1), "w2");
	assert_int_equal(ju64(r1, "size"), 8 * MiB);
	assert_int_equal(ju64(r2, "size"), MiB);
	assert_int_equal(c->live, 2);
	assert_int_equal(s2->wait_count, 0);
	/* The first grant in a new slab carries its handle and descriptor. */
	assert_non_null(cJSON_GetObjectItemCaseSensitive(r1, "handle"));
	assert_true(sent[0].fd >= 0);
	/* Nothing left to wait for: the timer is disarmed. */
	assert_int_equal(timer_delay, UINT64_MAX);
	broker_done(b);
}

static void test_wait_quota(void **state)
{
	struct broker *b = policy_broker(64 * MiB, POLICY_ACTIVE, 0);
	struct session *s1 = client(b, UID_A, "one"), *s2 = client(b, UID_B, "two");
	struct broker_instance *a = reg_p(b, s1, 0, 0, NULL);
	struct broker_instance *c = reg_p(b, s2, 0, 0, NULL);
	struct broker_instance *c2 = reg_p(b, s2, 1, 0, NULL);
	(void)state;

	assert_int_equal(a->pol.cap, 32 * MiB);
	alloc_ok(b, s1, a, 30 * MiB, 0);
	/* a needs more than its cap: it waits for c to leave. */
	request_deferred(b, s1,
	                 "{\"id\":\"q\",\"method\":\"alloc\",\"params\":{\"instance\":\"%016" PRIx64
	                 "\",\"size\":\"%llu\",\"wait_ms\":60000}}",
	                 a->id, (unsigned long long)(10 * MiB));
	/* A wait short of quota does not hold back another instance's. */
	alloc_ok(b, s2, c, MiB, 0);
	alloc_ok(b, s2, c2, MiB, 0);
	assert_int_equal(sent_to(s1, NULL), 0);
	/* c leaves (with its memory): a's cap grows and the wait is served;
	 * the event comes before the reply. */
	sent_clear();
	broker_session_close(b, s2);
	check(b);
	assert_int_equal(sent_to(s1, "cap_changed"), 1);
	assert_int_equal(sent_to(s1, NULL), 1);
	assert_non_null(cJSON_GetObjectItemCaseSensitive(sent_nth(s1, 0), "event"));
	reply_result(sent_nth(s1, 1), "q");
	assert_int_equal(a->used, 40 * MiB);
	broker_done(b);
}

static void test_wait_timeout(void **state)
{
	struct broker *b = policy_broker(8 * MiB, POLICY_PASSIVE, 0);
	struct session *s1 = client(b, UID_A, "one");
	struct broker_instance *a = reg_p(b, s1, 0, 0, NULL);
	struct timespec ts = {0, 30 * 1000000L};
	(void)state;

	alloc_ok(b, s1, a, 6 * MiB, 0);
	request_deferred(b, s1,
	                 "{\"id\":\"t\",\"method\":\"alloc\",\"params\":{\"instance\":\"%016" PRIx64
	                 "\",\"size\":\"%llu\",\"wait_ms\":20}}",
	                 a->id, (unsigned long long)(4 * MiB));
	request_deferred(b, s1,
	                 "{\"id\":\"u\",\"method\":\"alloc\",\"params\":{\"instance\":\"%016" PRIx64
	                 "\",\"size\":\"%llu\",\"wait_ms\":60000}}",
	                 a->id, (unsigned long long)(4 * MiB));
	/* Early: nothing expires. */
	broker_waits_expire(b);
	assert_int_equal(sent_count, 0);
	nanosleep(&ts, NULL);
	broker_waits_expire(b);
	check(b);
	assert_int_equal(sent_count, 1);
	assert_int_equal(reply_code(sent_nth(s1, 0), "t"), PROTO_E_TIMEOUT);
	assert_int_equal(ju64(reply_data(sent_nth(s1, 0)), "requested"), 4 * MiB);
	assert_true(jnum(reply_data(sent_nth(s1, 0)), "waited_ms") >= 20);
	assert_int_equal(s1->wait_count, 1);
	/* The other is re-armed for. */
	assert_true(timer_delay > 50000 && timer_delay < UINT64_MAX);
	/* Shutdown answers the rest with shutting_down. */
	sent_clear();
	broker_waits_cancel(b, -ESHUTDOWN);
	assert_int_equal(reply_code(sent_nth(s1, 0), "u"), PROTO_E_SHUTTING_DOWN);
	assert_int_equal(s1->wait_count, 0);
	assert_int_equal(timer_delay, UINT64_MAX);
	check(b);
	broker_done(b);
}

static void test_wait_cancelled(void **state)
{
	struct broker *b = policy_broker(8 * MiB, POLICY_PASSIVE, 3);
	struct session *s1 = client(b, UID_A, "one"), *s2 = client(b, UID_B, "two");
	struct broker_instance *a = reg_p(b, s1, 0, 0, NULL);
	struct broker_instance *c = reg_p(b, s2, 0, 0, NULL);
	struct reply r;
	(void)state;

	struct broker_grant g = alloc_ok(b, s1, a, 6 * MiB, 0);
	for (int i = 0; i < 3; i++)
		request_deferred(b, s2,
		                 "{\"id\":\"c%d\",\"method\":\"alloc\",\"params\":{\"instance\":"
		                 "\"%016" PRIx64 "\",\"size\":\"%llu\",\"wait_ms\":60000}}",
		                 i, c->id, (unsigned long long)(4 * MiB));
	/* Waits count against max_allocations. */
	request(b, s2, &r,
	        "{\"id\":\"x\",\"method\":\"alloc\",\"params\":{\"instance\":\"%016" PRIx64
	        "\",\"size\":\"%llu\",\"wait_ms\":60000}}",
	        c->id, (unsigned long long)(4 * MiB));
	assert_int_equal(r.r.code, PROTO_E_LIMIT);
	reply_done(&r);
	/* Larger than the device: refused at once, not after the wait. */
	request(b, s2, &r,
	        "{\"id\":\"x\",\"method\":\"alloc\",\"params\":{\"instance\":\"%016" PRIx64
	        "\",\"size\":\"%llu\",\"wait_ms\":60000}}",
	        c->id, (unsigned long long)(9 * MiB));
	assert_int_equal(r.r.code, PROTO_E_NO_MEMORY);
	reply_done(&r);
	expect_error_fmt(b, s2, PROTO_E_PARAMS, "wait_ms",
	                 "{\"id\":\"e\",\"method\":\"alloc\",\"params\":{\"instance\":\"%016" PRIx64
	                 "\",\"size\":\"1\",\"wait_ms\":-1}}",
	                 c->id);
	expect_error_fmt(b, s2, PROTO_E_PARAMS, "wait_ms",
	                 "{\"id\":\"e\",\"method\":\"alloc\",\"params\":{\"instance\":\"%016" PRIx64
	                 "\",\"size\":\"1\",\"wait_ms\":\"10\"}}",
	                 c->id);
	expect_error_fmt(b, s2, PROTO_E_PARAMS, "wait_ms",
	                 "{\"id\":\"e\",\"method\":\"alloc\",\"params\":{\"instance\":\"%016" PRIx64
	                 "\",\"size\":\"1\",\"wait_ms\":86400001}}",
	                 c->id);
	check(b);
	/* s2 leaves: its waits go with it, unanswered. */
	broker_session_close(b, s2);
	check(b);
	assert_int_equal(b->wait_count, 0);
	assert_int_equal(timer_delay, UINT64_MAX);
	/* The free has nobody to serve. */
	assert_int_equal(broker_free(b, s1, g.id), 0);
	assert_int_equal(sent_count, 0);
	/* An instance unregistered under its wait: not_found. */
	struct broker_instance *a2 = reg_p(b, s1, 0, 0, NULL);
	g = alloc_ok(b, s1, a, 6 * MiB, 0);
	request_deferred(b, s1,
	                 "{\"id\":\"n\",\"method\":\"alloc\",\"params\":{\"instance\":\"%016" PRIx64
	                 "\",\"size\":\"%llu\",\"wait_ms\":60000}}",
	                 a2->id, (unsigned long long)(4 * MiB));
	assert_int_equal(broker_unregister(b, s1, a2->id), 0);
	assert_int_equal(broker_free(b, s1, g.id), 0);
	assert_int_equal(reply_code(sent_nth(s1, 0), "n"), PROTO_E_NOT_FOUND);
	check(b);
	/* Destroying the broker with waits queued leaks nothing. */
	g = alloc_ok(b, s1, a, 6 * MiB, 0);
	request_deferred(b, s1,
	                 "{\"id\":\"d\",\"method\":\"alloc\",\"params\":{\"instance\":\"%016" PRIx64
	                 "\",\"size\":\"%llu\",\"wait_ms\":60000}}",
	                 a->id, (unsigned long long)(4 * MiB));
	broker_done(b);
}

/* ---- queued requests --------------------------------------------------------- */

static void queue_ok(struct broker *b, struct session *s, const struct broker_instance *inst,
                     const char *requests, int queued)
{
	struct reply r;
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
	struct reply r;
	const cJSON *shape;
	(void)state;

	for (int i = 0; i < 3; i++) {
		s[i] = client(b, UID_A + (uid_t)i, "member");
		in[i] = reg_p(b, s[i], 0, 0, "g");
	}
	struct broker_instance *outsider = reg_p(b, s[0], 1, 0, NULL);
	sent_clear();
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
	/* Another member's instance: not for a non-admin. */
	expect_error_fmt(b, s[1], PROTO_E_PERMISSION, NULL,
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
	struct reply r;
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

static void test_set_allocator(void **state)
{
	struct broker *b = policy_broker(64 * MiB, POLICY_PASSIVE, 0);
	struct session *admin = client(b, 0, "root"), *s1 = client(b, UID_A, "one");
	struct broker_instance *a = reg_p(b, s1, 0, 0, NULL);
	struct reply r;
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
	    cmocka_unit_test_teardown(test_wait_served, sent_teardown),
	    cmocka_unit_test_teardown(test_wait_quota, sent_teardown),
	    cmocka_unit_test_teardown(test_wait_timeout, sent_teardown),
	    cmocka_unit_test_teardown(test_wait_cancelled, sent_teardown),
	    cmocka_unit_test_teardown(test_queue_allocate, sent_teardown),
	    cmocka_unit_test_teardown(test_queue_more, sent_teardown),
	    cmocka_unit_test_teardown(test_set_allocator, sent_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
