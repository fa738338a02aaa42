/*
 * test-broker-waits.c - allocations that wait, through the broker and the
 * dispatcher without sockets: served in arrival order when memory or quota
 * frees, timed out, cancelled with their session or at shutdown.
 *
 * Shared helpers: broker-policy-helpers.h (the fake sender records the
 * deferred replies, the fake timer what it is asked to arm) and
 * session-helpers.h.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
	assert_int_equal(b->stats.waits_started, 2);
	assert_int_equal(b->stats.waits_served, 2);
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

/* An operator's cap on the user (uid.N.cap) is waited for like the
 * instance's; a request above the cap itself is refused at once. */
static void test_wait_user_cap(void **state)
{
	struct broker *b = policy_broker(64 * MiB, POLICY_PASSIVE, 0);
	const struct broker_rule rule = {.uid = UID_A, .cap = 8 * MiB};
	struct session *s1 = client(b, UID_A, "one"), *s2 = client(b, UID_A, "two");
	struct broker_instance *a = reg_p(b, s1, 0, 0, NULL);
	struct broker_instance *c = reg_p(b, s2, 0, 0, NULL);
	struct reply r = {.fd = -1};
	(void)state;

	broker_set_rules(b, &rule, 1);
	struct broker_grant g = alloc_ok(b, s2, c, 6 * MiB, 0);
	request_deferred(b, s1,
	                 "{\"id\":\"u\",\"method\":\"alloc\",\"params\":{\"instance\":\"%016" PRIx64
	                 "\",\"size\":\"%llu\",\"wait_ms\":60000}}",
	                 a->id, (unsigned long long)(4 * MiB));
	assert_int_equal(b->wait_count, 1);
	request(b, s1, &r,
	        "{\"id\":\"x\",\"method\":\"alloc\",\"params\":{\"instance\":\"%016" PRIx64
	        "\",\"size\":\"%llu\",\"wait_ms\":60000}}",
	        a->id, (unsigned long long)(9 * MiB));
	assert_int_equal(r.r.code, PROTO_E_QUOTA);
	reply_done(&r);
	assert_int_equal(b->wait_count, 1);
	/* The other connection of the same user frees: the wait is served. */
	sent_clear();
	assert_int_equal(broker_free(b, s2, g.id), 0);
	check(b);
	assert_int_equal(sent_to(s1, NULL), 1);
	reply_result(sent_nth(s1, 0), "u");
	assert_int_equal(a->used, 4 * MiB);
	assert_int_equal(b->wait_count, 0);
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
	/* The metrics: one of each ending, none served. */
	assert_int_equal(b->stats.waits_started, 2);
	assert_int_equal(b->stats.waits_timed_out, 1);
	assert_int_equal(b->stats.waits_cancelled, 1);
	assert_int_equal(b->stats.waits_served, 0);
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
	struct reply r = {.fd = -1};
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

/* The broker's verdict on an alloc: granted, waiting, or refused with the
 * limit and its figures (what dispatch words the error from, asking
 * nothing more). */
static void test_admit_verdicts(void **state)
{
	struct broker *b = policy_broker(64 * MiB, POLICY_ACTIVE, 0);
	struct session *s1 = client(b, UID_A, "one"), *s2 = client(b, UID_B, "two");
	struct broker_instance *a = reg_p(b, s1, 0, 0, NULL);
	reg_p(b, s2, 0, 0, NULL);
	struct broker_grant g;
	struct broker_refusal why;
	(void)state;

	assert_int_equal(a->pol.cap, 32 * MiB);
	assert_int_equal(broker_alloc_admit(b, s1, "1", a->id, 30 * MiB, 256, 0, &g, &why), 0);
	assert_int_equal(g.size, 30 * MiB);
	/* Over the instance's cap, no wait: refused, with the cap's figures
	 * (the request charged as the granule rounds it). */
	assert_int_equal(broker_alloc_admit(b, s1, "2", a->id, 3 * MiB - 1, 256, 0, &g, &why),
	                 -EDQUOT);
	assert_int_equal(why.rc, -EDQUOT);
	assert_int_equal(why.limit, BROKER_LIMIT_INSTANCE);
	assert_int_equal(why.cap, 32 * MiB);
	assert_int_equal(why.used, 30 * MiB);
	assert_int_equal(why.requested, 3 * MiB);
	assert_true(why.instance == a->id && why.device == 0);
	/* More than the device could ever hold: refused at once, even with
	 * a wait, with what the client can still have. */
	assert_int_equal(broker_alloc_admit(b, s1, "3", a->id, 65 * MiB, 256, 1000, &g, &why),
	                 -EDQUOT);
	assert_int_equal(s1->wait_count, 0);
	/* Room may come: it waits. */
	assert_int_equal(broker_alloc_admit(b, s1, "4", a->id, 4 * MiB, 256, 1000, &g, &why),
	                 BROKER_WAITING);
	assert_int_equal(s1->wait_count, 1);
	/* No second wait past max_inflight: the limit and its value. */
	b->limits.max_inflight = 1;
	assert_int_equal(broker_alloc_admit(b, s1, "5", a->id, 4 * MiB, 256, 1000, &g, &why),
	                 -EBUSY);
	assert_int_equal(why.limit, BROKER_LIMIT_INFLIGHT);
	assert_int_equal(why.value, 1);
	/* The device is full for a passive client: its room, in one piece. */
	assert_int_equal(broker_set_mode(b, POLICY_PASSIVE), 0);
	assert_int_equal(broker_alloc_admit(b, s1, "6", a->id, 40 * MiB, 256, 0, &g, &why),
	                 -ENOMEM);
	assert_int_equal(why.limit, BROKER_LIMIT_DEVICE);
	assert_int_equal(why.requested, 40 * MiB);
	assert_true(why.free >= why.largest && why.free <= 34 * MiB && why.free > 0);
	check(b);
	broker_done(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_teardown(test_wait_served, sent_teardown),
	    cmocka_unit_test_teardown(test_wait_quota, sent_teardown),
	    cmocka_unit_test_teardown(test_wait_user_cap, sent_teardown),
	    cmocka_unit_test_teardown(test_wait_timeout, sent_teardown),
	    cmocka_unit_test_teardown(test_wait_cancelled, sent_teardown),
	    cmocka_unit_test_teardown(test_admit_verdicts, sent_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
