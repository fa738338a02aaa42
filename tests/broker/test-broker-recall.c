/*
 * test-broker-recall.c - recalls of idle leases (broker_recall.c) and the
 * requests held for them (dispatch_recall.c, broker_wait.c), through the
 * broker and the dispatcher without sockets: a request short of room held
 * and served once the holder returns, answered as without recalls once the
 * recall times out, a shrinking cap, a partition and trim recalling, and
 * recall_done's bad inputs.
 *
 * Shared helpers: broker-policy-helpers.h (the fake sender records events
 * and deferred replies, the fake timer what it is asked to arm).
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

#define MEM   (128 * MiB)
#define RSLAB (64 * MiB)
#define ALLOC_FMT                                                                                  \
	"{\"id\":\"%s\",\"method\":\"alloc\",\"params\":{\"instance\":\"%016" PRIx64               \
	"\",\"size\":\"%llu\"}}"

/* A passive broker of 64 MiB slabs, and two clients of two users with an
 * instance each on device 0: a holds leases, c (sb's) is short of room. */
struct two {
	struct broker *b;
	struct session *sa, *sb;
	struct broker_instance *a, *c;
};

static struct two two_clients(void)
{
	struct two t;
	t.b = policy_broker_slab(MEM, RSLAB, POLICY_PASSIVE, 0);
	t.sa = client(t.b, UID_A, "a");
	t.sb = client(t.b, UID_B, "b");
	t.a = reg_p(t.b, t.sa, 0, 0, NULL);
	t.c = reg_p(t.b, t.sb, 0, 0, NULL);
	return t;
}

static void alloc_held(struct broker *b, struct session *s, const char *id, uint64_t instance,
                       uint64_t size)
{
	request_deferred(b, s, ALLOC_FMT, id, instance, (unsigned long long)size);
}

/* A lease of size bytes for inst that must be granted. */
static uint64_t lease_of(struct broker *b, struct session *s, struct broker_instance *inst,
                         uint64_t size)
{
	struct broker_grant g;
	struct broker_refusal why;
	assert_int_equal(broker_lease(b, s, inst->id, size, NULL, &g, &why), 0);
	assert_int_equal(g.size, size);
	return g.id;
}

/* The data of the newest recall event to s (there must be one). */
static const cJSON *last_recall(const struct session *s)
{
	const cJSON *last = NULL;
	for (int i = 0; i < sent_count; i++) {
		const cJSON *ev = cJSON_GetObjectItemCaseSensitive(sent[i].root, "event");
		if (sent[i].s == s && cJSON_IsString(ev) && strcmp(ev->valuestring, "recall") == 0)
			last = jget(sent[i].root, "data");
	}
	assert_non_null(last);
	return last;
}

/* The reply with id among the frames sent to s: its error code, or 0;
 * *frame (may be NULL) the frame. */
static int deferred_reply(const struct session *s, const char *id, const cJSON **frame)
{
	for (int i = 0; i < sent_count; i++) {
		const cJSON *rid = cJSON_GetObjectItemCaseSensitive(sent[i].root, "id");
		if (sent[i].s != s || !cJSON_IsString(rid) || strcmp(rid->valuestring, id) != 0)
			continue;
		const cJSON *err = cJSON_GetObjectItemCaseSensitive(sent[i].root, "error");
		if (frame)
			*frame = sent[i].root;
		return err ? (int)jnum(err, "code") : 0;
	}
	fail_msg("no reply %s", id);
	return 1;
}

static void recall_done_ok(struct broker *b, struct session *s, uint64_t epoch, uint64_t bytes)
{
	struct reply r;
	request(b, s, &r,
	        "{\"id\":\"d\",\"method\":\"recall_done\",\"params\":{\"epoch\":\"%llu\","
	        "\"bytes\":\"%llu\"}}",
	        (unsigned long long)epoch, (unsigned long long)bytes);
	result_of(&r, "d");
	reply_done(&r);
}

static void recall_done_refused(struct broker *b, struct session *s, uint64_t epoch, uint64_t bytes,
                                int code, const char *field)
{
	expect_error_fmt(b, s, code, field,
	                 "{\"id\":\"e\",\"method\":\"recall_done\",\"params\":{\"epoch\":\"%llu\","
	                 "\"bytes\":\"%llu\"}}",
	                 (unsigned long long)epoch, (unsigned long long)bytes);
}

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
	nanosleep(&ts, NULL);
}

/* B's allocation is short of room while A's lease sits idle: A hears a
 * recall, B's request is held, and served as soon as A returns it. */
static void test_held_then_served(void **state)
{
	struct two t = two_clients();
	struct broker *b = t.b;
	struct session *sa = t.sa, *sb = t.sb;
	struct broker_instance *a = t.a, *c = t.c;
	(void)state;

	uint64_t l1 = lease_of(b, sa, a, RSLAB);
	lease_of(b, sa, a, 48 * MiB);
	alloc_held(b, sb, "h1", c->id, 32 * MiB);
	check(b);
	const cJSON *ev = last_recall(sa);
	assert_string_equal(jstr(ev, "reason"), "memory");
	assert_int_equal(jid(ev, "instance"), a->id);
	assert_int_equal(ju64(ev, "bytes"), 32 * MiB);
	uint64_t epoch = ju64(ev, "epoch");
	assert_int_equal(a->recalls_sent, 1);
	assert_int_equal(broker_recalls_pending(b), 1);
	/* The timer covers the recall's deadline. */
	assert_true(timer_delay <= b->limits.recall_timeout_ms);
	assert_int_equal(sent_to(sb, NULL), 0);
	/* A second request short of room does not recall A again. */
	alloc_held(b, sb, "h2", c->id, 8 * MiB);
	assert_int_equal(a->recalls_sent, 1);

	/* A returns its free lease (answering after): B is served at once. */
	assert_int_equal(broker_lease_return(b, sa, l1, NULL), 0);
	check(b);
	assert_int_equal(deferred_reply(sb, "h1", NULL), 0);
	assert_int_equal(deferred_reply(sb, "h2", NULL), 0);
	recall_done_ok(b, sa, epoch, RSLAB / 2);
	assert_int_equal(a->recalls_answered, 1);
	assert_int_equal(broker_recalls_pending(b), 0);
	/* Answered once: a second answer is for no recall. */
	recall_done_refused(b, sa, epoch, 0, PROTO_E_NOT_FOUND, NULL);
	check(b);
	broker_done(b);
}

/* Nobody answers: the held request is answered as without recalls once the
 * recall timeout has passed; the holder keeps its lease; a late answer is
 * for no recall. */
static void test_held_times_out(void **state)
{
	struct two t = two_clients();
	struct broker *b = t.b;
	struct session *sa = t.sa, *sb = t.sb;
	struct broker_instance *a = t.a, *c = t.c;
	(void)state;

	b->limits.recall_timeout_ms = 20;
	lease_of(b, sa, a, RSLAB);
	lease_of(b, sa, a, RSLAB);
	alloc_held(b, sb, "h", c->id, 32 * MiB);
	uint64_t epoch = ju64(last_recall(sa), "epoch");
	broker_waits_expire(b); /* too early: nothing ends */
	assert_int_equal(sent_to(sb, NULL), 0);
	sleep_ms(30);
	int calls = timer_calls;
	broker_waits_expire(b);
	check(b);
	assert_int_equal(deferred_reply(sb, "h", NULL), PROTO_E_NO_MEMORY);
	assert_int_equal(a->recalls_timed_out, 1);
	assert_int_equal(b->stats.recalls_timed_out, 1);
	assert_int_equal(broker_recalls_pending(b), 0);
	assert_int_equal(a->leased, 2 * RSLAB);
	recall_done_refused(b, sa, epoch, 0, PROTO_E_NOT_FOUND, NULL);
	/* Not asked again for a recall timeout: the next request short of
	 * room is answered at once. */
	expect_error_fmt(b, sb, PROTO_E_NO_MEMORY, NULL, ALLOC_FMT, "e", c->id,
	                 (unsigned long long)(32 * MiB));
	assert_int_equal(a->recalls_sent, 1);
	/* Nothing waits, nothing is out: the timer (which fired) is not armed
	 * again. */
	assert_int_equal(timer_calls, calls);
	broker_done(b);
}

/* recall_done: unknown epochs, another session's, more bytes than asked. */
static void test_recall_done_bad(void **state)
{
	struct broker *b = policy_broker_slab(MEM, RSLAB, POLICY_PASSIVE, 0);
	struct session *sa = client(b, UID_A, "a"), *sb = client(b, UID_B, "b");
	struct broker_instance *a = reg_p(b, sa, 0, 0, NULL);
	(void)state;

	lease_of(b, sa, a, 8 * MiB);
	recall_done_refused(b, sa, 1, 0, PROTO_E_NOT_FOUND, NULL);
	/* trim is an administrator's. */
	expect_error_fmt(b, sb, PROTO_E_PERMISSION, NULL,
	                 "{\"id\":\"e\",\"method\":\"trim\",\"params\":{}}");
	sb->admin = true;
	struct reply r;
	request(b, sb, &r, "{\"id\":\"t\",\"method\":\"trim\",\"params\":{}}");
	assert_int_equal(ju64(result_of(&r, "t"), "recalls"), 1);
	assert_int_equal(ju64(result_of(&r, "t"), "bytes"), 8 * MiB);
	reply_done(&r);
	const cJSON *ev = last_recall(sa);
	assert_string_equal(jstr(ev, "reason"), "operator");
	uint64_t epoch = ju64(ev, "epoch");
	/* Another session's epoch is no recall of its own. */
	recall_done_refused(b, sb, epoch, 0, PROTO_E_NOT_FOUND, NULL);
	recall_done_refused(b, sa, epoch, 8 * MiB + 1, PROTO_E_PARAMS, "bytes");
	recall_done_refused(b, sa, epoch + 1, 0, PROTO_E_NOT_FOUND, NULL);
	expect_error_fmt(b, sa, PROTO_E_PARAMS, "epoch",
	                 "{\"id\":\"e\",\"method\":\"recall_done\",\"params\":{\"epoch\":\"0\","
	                 "\"bytes\":\"0\"}}");
	/* Still out after the bad answers. */
	assert_int_equal(broker_recalls_pending(b), 1);
	recall_done_ok(b, sa, epoch, 0);
	assert_int_equal(broker_recalls_pending(b), 0);
	expect_error_fmt(b, sb, PROTO_E_NOT_FOUND, NULL,
	                 "{\"id\":\"e\",\"method\":\"trim\",\"params\":{\"session\":\"%016llx\"}}",
	                 0x123456789ull);
	check(b);
	broker_done(b);
}

/* Kept slabs asked back (reclaim) hold a request as recalls do: it is
 * served once the slab is released. */
static void test_reclaim_holds(void **state)
{
	struct two t = two_clients();
	struct broker *b = t.b;
	struct session *sa = t.sa, *sb = t.sb;
	struct broker_instance *a = t.a, *c = t.c;
	(void)state;

	sa->keep_slabs = true;
	struct broker_grant g1 = alloc_ok(b, sa, a, RSLAB, 0);
	struct broker_grant g2 = alloc_ok(b, sa, a, RSLAB, 0);
	assert_int_equal(broker_free(b, sa, g1.id), 0);
	assert_int_equal(broker_free(b, sa, g2.id), 0);
	/* Both slabs are kept empty by a's client: b's allocation is short. */
	alloc_held(b, sb, "k", c->id, RSLAB);
	assert_int_equal(sent_to(sa, "reclaim"), 2);
	assert_int_equal(sent_to(sb, NULL), 0);
	struct reply r;
	request(b, sa, &r,
	        "{\"id\":\"r\",\"method\":\"release\",\"params\":{\"slab\":\"%016" PRIx64 "\"}}",
	        g1.slab_id);
	result_of(&r, "r");
	reply_done(&r);
	assert_int_equal(deferred_reply(sb, "k", NULL), 0);
	check(b);
	broker_done(b);
}

/* A cap that shrinks below what an instance with leases is charged. */
static void test_cap_shrinks(void **state)
{
	struct broker *b = policy_broker_slab(MEM, RSLAB, POLICY_ACTIVE, 0);
	struct session *sa = client(b, UID_A, "a"), *sb = client(b, UID_B, "b");
	struct broker_instance *a = reg_p(b, sa, 0, 0, NULL);
	(void)state;

	lease_of(b, sa, a, RSLAB);
	lease_of(b, sa, a, 32 * MiB);
	assert_int_equal(a->used, 96 * MiB);
	reg_p(b, sb, 0, 0, NULL); /* the auto pool is shared: a's cap halves */
	assert_true(a->pol.cap < a->used);
	const cJSON *ev = last_recall(sa);
	assert_string_equal(jstr(ev, "reason"), "cap");
	assert_int_equal(ju64(ev, "bytes"), a->used - a->pol.cap);
	check(b);
	broker_done(b);
}

/* partition_create beside idle leases: held, then made once they are
 * returned; refused with what was recallable when nobody answers. */
static void test_partition(void **state)
{
	struct broker *b = policy_broker_slab(MEM, RSLAB, POLICY_PASSIVE, 0);
	struct session *sa = client(b, UID_A, "a"), *adm = client(b, 0, "admin");
	struct broker_instance *a = reg_p(b, sa, 0, 0, NULL);
	(void)state;

	adm->admin = true;
	b->limits.recall_timeout_ms = 20;
	uint64_t l1 = lease_of(b, sa, a, RSLAB);
	lease_of(b, sa, a, RSLAB);
	request_deferred(
	    b, adm, "%s",
	    "{\"id\":\"p1\",\"method\":\"partition_create\",\"params\":{\"name\":\"j1\","
	    "\"uid\":1000,\"size\":\"67108864\",\"devices\":[0]}}");
	assert_string_equal(jstr(last_recall(sa), "reason"), "partition");
	assert_int_equal(broker_lease_return(b, sa, l1, NULL), 0);
	assert_int_equal(deferred_reply(adm, "p1", NULL), 0);
	check(b);

	/* Nobody answers the next one. */
	request_deferred(
	    b, adm, "%s",
	    "{\"id\":\"p2\",\"method\":\"partition_create\",\"params\":{\"name\":\"j2\","
	    "\"uid\":1000,\"size\":\"67108864\",\"devices\":[0]}}");
	sleep_ms(30);
	broker_waits_expire(b);
	const cJSON *last = NULL;
	assert_int_equal(deferred_reply(adm, "p2", &last), PROTO_E_NO_MEMORY);
	const cJSON *data = jget(jget(last, "error"), "data");
	assert_int_equal(ju64(data, "recallable"), RSLAB);
	assert_int_equal(ju64(data, "in_use"), 0);
	check(b);
	broker_done(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_teardown(test_held_then_served, sent_teardown),
	    cmocka_unit_test_teardown(test_held_times_out, sent_teardown),
	    cmocka_unit_test_teardown(test_recall_done_bad, sent_teardown),
	    cmocka_unit_test_teardown(test_reclaim_holds, sent_teardown),
	    cmocka_unit_test_teardown(test_cap_shrinks, sent_teardown),
	    cmocka_unit_test_teardown(test_partition, sent_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
