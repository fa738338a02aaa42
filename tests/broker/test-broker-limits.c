/*
 * test-broker-limits.c - unit tests of the daemon core without sockets: the
 * broker over the sim backend (limits and their errors, running out of
 * device memory, allocation ids, which operator rule applies).
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

/* ---- limits and errors --------------------------------------------------- */

static void test_limits(void **state)
{
	struct broker *b = broker_new(64 * MiB, 3, 4);
	struct session *s1 = open_session(b, UID_A, 1);
	struct session *s2 = open_session(b, UID_A, 2);
	struct broker_instance *inst = NULL, *extra[3];
	struct broker_grant g, ga[4];
	(void)state;

	/* max_instances, per session. */
	for (int i = 0; i < 3; i++)
		extra[i] = reg(b, s1, i % 2);
	inst = (struct broker_instance *)0x1;
	assert_int_equal(broker_register(b, s1, "x", 0, 0, NULL, &inst), -EMFILE);
	assert_ptr_equal(inst, (struct broker_instance *)0x1);
	assert_int_equal(s1->instance_count, 3);
	assert_int_equal(b->instance_count, 3);
	check(b);
	struct broker_instance *i2 = reg(b, s2, 0); /* another session has its own */
	assert_int_equal(broker_unregister(b, s1, extra[2]->id), 0);
	extra[2] = reg(b, s1, 1);
	check(b);

	/* Devices out of range. */
	assert_int_equal(broker_register(b, s2, "x", 2, 0, NULL, &inst), -ENODEV);
	assert_int_equal(broker_register(b, s2, "x", -1, 0, NULL, &inst), -ENODEV);
	assert_int_equal(broker_register(b, s2, "x", BACKEND_MAX_DEVICES, 0, NULL, &inst), -ENODEV);
	assert_int_equal(s2->instance_count, 1);

	/* Unknown instance, another session's instance. */
	inst = extra[0];
	grant_poison(&g);
	assert_int_equal(broker_alloc(b, s1, 0xdeadbeefull, 256, 0, &g), -ENOENT);
	assert_int_equal(broker_alloc(b, s1, 0, 256, 0, &g), -ENOENT);
	assert_int_equal(broker_alloc(b, s1, i2->id, 256, 0, &g), -ENOENT);
	assert_int_equal(broker_alloc(b, s2, inst->id, 256, 0, &g), -ENOENT);
	/* Bad size or alignment. */
	assert_int_equal(broker_alloc(b, s1, inst->id, 0, 0, &g), -EINVAL);
	assert_int_equal(broker_alloc(b, s1, inst->id, 256, 3, &g), -EINVAL);
	assert_int_equal(broker_alloc(b, s1, inst->id, 256, 4 * MiB, &g), -EINVAL);
	assert_int_equal(broker_alloc(b, s1, inst->id, UINT64_MAX, 0, &g), -EINVAL);
	assert_int_equal(s1->alloc_count, 0);
	assert_int_equal(b->allocs.count, 0);
	check(b);

	/* max_allocations, per session. */
	for (int i = 0; i < 4; i++)
		ga[i] = alloc_ok(b, s1, extra[i % 3], 1024, 0);
	grant_poison(&g);
	assert_int_equal(broker_alloc(b, s1, inst->id, 1024, 0, &g), -EMFILE);
	assert_int_equal(s1->alloc_count, 4);
	assert_int_equal(b->allocs.count, 4);
	assert_int_equal(dev_stats(b, 0).live + dev_stats(b, 1).live, 4);
	check(b);
	struct broker_grant other = alloc_ok(b, s2, i2, 1024, 0);

	/* Freeing another session's allocation (same uid even): -ENOENT, and
	 * it stays live. */
	assert_int_equal(broker_free(b, s2, ga[0].id), -ENOENT);
	assert_int_equal(broker_free(b, s1, other.id), -ENOENT);
	assert_ptr_not_equal(idmap_get(&b->allocs, ga[0].id), NULL);
	assert_ptr_not_equal(idmap_get(&b->allocs, other.id), NULL);
	assert_int_equal(s1->alloc_count, 4);
	assert_int_equal(s2->alloc_count, 1);
	assert_int_equal(broker_free(b, s1, 0), -ENOENT);
	check(b);

	/* Unregister with live allocations: -EBUSY, and the instance stays. */
	assert_int_equal(broker_unregister(b, s1, extra[0]->id), -EBUSY);
	assert_ptr_equal(broker_instance_find(s1, extra[0]->id), extra[0]);
	assert_int_equal(broker_unregister(b, s1, i2->id), -ENOENT);
	assert_int_equal(broker_unregister(b, s2, extra[0]->id), -ENOENT);
	assert_int_equal(broker_unregister(b, s1, 0x7777), -ENOENT);
	assert_int_equal(s1->instance_count, 3);
	check(b);

	/* Freeing makes room again. */
	assert_int_equal(broker_free(b, s1, ga[0].id), 0);
	assert_int_equal(broker_free(b, s1, ga[0].id), -ENOENT);
	ga[0] = alloc_ok(b, s1, inst, 1024, 0);
	check(b);

	/* Stopping: no new allocation, frees still work. */
	b->stopping = true;
	assert_int_equal(broker_free(b, s1, ga[0].id), 0);
	grant_poison(&g);
	assert_int_equal(broker_alloc(b, s1, inst->id, 1024, 0, &g), -ESHUTDOWN);
	assert_int_equal(broker_alloc(b, s2, i2->id, 1024, 0, &g), -ESHUTDOWN);
	assert_int_equal(s1->alloc_count, 3);
	check(b);
	b->stopping = false;

	/* Unregister once empty. */
	for (int i = 1; i < 4; i++)
		assert_int_equal(broker_free(b, s1, ga[i].id), 0);
	uint64_t gone = extra[0]->id;
	assert_int_equal(broker_unregister(b, s1, gone), 0);
	assert_int_equal(broker_unregister(b, s1, gone), -ENOENT);
	check(b);
	broker_done(b);
}

/* Attachments pin slabs and count against max_allocations (broker.c;
 * gpubroker.h: gpb_attach can fail with GPB_E_LIMIT). */
static void test_attach_limit(void **state)
{
	struct broker *b = broker_new(64 * MiB, 0, 2);
	struct session *s1 = open_session(b, UID_A, 1);
	struct session *s2 = open_session(b, UID_A, 2);
	struct broker_grant g;
	struct reply r = {.fd = -1};
	(void)state;

	struct broker_instance *i1 = reg(b, s1, 0);
	struct broker_instance *i2 = reg(b, s2, 0);
	struct broker_grant a1 = alloc_ok(b, s1, i1, 4096, 0);
	struct broker_grant a2 = alloc_ok(b, s1, i1, 4096, 0);
	alloc_ok(b, s2, i2, 4096, 0);

	grant_poison(&g);
	assert_int_equal(broker_attach(b, s2, a1.id, &g), 0);
	grant_poison(&g);
	assert_int_equal(broker_attach(b, s2, a2.id, &g), -EMFILE);
	assert_int_equal(s2->attached.count, 1);
	check(b);
	/* Through the protocol: -32006 naming max_allocations. */
	hello(b, s2, "attacher");
	request(b, s2, &r,
	        "{\"id\":\"t\",\"method\":\"attach\",\"params\":{\"id\":\"%016" PRIx64 "\"}}",
	        a2.id);
	assert_int_equal(r.r.code, PROTO_E_LIMIT);
	assert_string_equal(r.r.id, "t");
	assert_int_equal(r.fd, -1);
	assert_true(limit_data_is(&r, "max_allocations", 2));
	reply_done(&r);
	/* Detaching makes room. */
	assert_int_equal(broker_detach(b, s2, a1.id), 0);
	grant_poison(&g);
	assert_int_equal(broker_attach(b, s2, a2.id, &g), 0);
	assert_int_equal(s2->attached.count, 1);
	check(b);
	broker_done(b);
}

/*
 * broker.c (broker_attach): "Attachments pin slabs: they count against the
 * same limit" -- one limit for what a connection holds. Attaching checks
 * allocations + attachments; allocating must check the same sum, or the
 * outcome depends on the order (attach first, then allocate past the limit).
 */
static void test_alloc_counts_attachments(void **state)
{
	struct broker *b = broker_new(64 * MiB, 0, 2);
	struct session *s1 = open_session(b, UID_A, 1);
	struct session *s2 = open_session(b, UID_A, 2);
	struct broker_grant g;
	(void)state;

	struct broker_instance *i1 = reg(b, s1, 0);
	struct broker_instance *i2 = reg(b, s2, 0);
	struct broker_grant a1 = alloc_ok(b, s1, i1, 4096, 0);
	struct broker_grant a2 = alloc_ok(b, s1, i1, 4096, 0);
	grant_poison(&g);
	assert_int_equal(broker_attach(b, s2, a1.id, &g), 0);
	grant_poison(&g);
	assert_int_equal(broker_attach(b, s2, a2.id, &g), 0);
	/* s2 holds two things with max_allocations 2. */
	grant_poison(&g);
	int rc = broker_alloc(b, s2, i2->id, 4096, 0, &g);
	if (rc != -EMFILE)
		fail_msg("alloc with %u attachments at max_allocations %u: %d, want -EMFILE",
		         (unsigned)s2->attached.count, b->limits.max_allocations, rc);
	check(b);
	broker_done(b);
}

/* ---- out of device memory ------------------------------------------------ */

static void test_oom(void **state)
{
	/* 8 MiB per device: four 2 MiB slabs. */
	struct broker *b = broker_new(8 * MiB, 0, 0);
	struct session *sa = open_session(b, UID_A, 1);
	struct session *sb = open_session(b, UID_B, 2);
	struct broker_grant g;
	(void)state;

	struct broker_instance *ia = reg(b, sa, 0);
	struct broker_instance *ib = reg(b, sb, 0);
	struct broker_grant gb = alloc_ok(b, sb, ib, 4096, 0); /* B: one standard slab */
	struct broker_grant ga[3];
	for (int i = 0; i < 3; i++)
		ga[i] = alloc_ok(b, sa, ia, 2 * MiB, 0); /* A: three slabs, each full */
	check(b);
	struct pool_stats st = dev_stats(b, 0);
	assert_int_equal(st.slabs, 4);
	assert_int_equal(st.reserved, 8 * MiB);
	assert_int_equal(st.ooms, 0);
	assert_int_equal(broker_device_free(b, 0), 8 * MiB - 6 * MiB - 4096);

	/* Full: A can get no slab, whatever the size. */
	grant_poison(&g);
	assert_int_equal(broker_alloc(b, sa, ia->id, 2 * MiB, 0, &g), -ENOMEM);
	assert_int_equal(dev_stats(b, 0).ooms, 1);
	assert_int_equal(broker_alloc(b, sa, ia->id, 4096, 0, &g), -ENOMEM);
	assert_int_equal(dev_stats(b, 0).ooms, 2);
	/* Larger than the device: -ENOMEM too. */
	assert_int_equal(broker_alloc(b, sa, ia->id, 64 * MiB, 0, &g), -ENOMEM);
	assert_int_equal(dev_stats(b, 0).ooms, 3);
	assert_int_equal(sa->alloc_count, 3);
	check(b);
	/* The other device is untouched. */
	assert_int_equal(dev_stats(b, 1).ooms, 0);
	alloc_ok(b, sa, reg(b, sa, 1), 2 * MiB, 0);

	/* B frees its allocation: the empty slab stays as B's cache while B
	 * has a session. */
	assert_int_equal(broker_free(b, sb, gb.id), 0);
	check(b);
	st = dev_stats(b, 0);
	assert_int_equal(st.slabs, 4);
	assert_int_equal(st.reserved, 8 * MiB);
	assert_int_equal(st.used, 6 * MiB);

	/* B goes: its cached empty slab is trimmed. */
	broker_session_close(b, sb);
	check(b);
	st = dev_stats(b, 0);
	assert_int_equal(st.slabs, 3);
	assert_int_equal(st.reserved, 6 * MiB);
	assert_int_equal(broker_device_free(b, 0), 2 * MiB);

	/* And A can use the memory. */
	g = alloc_ok(b, sa, ia, 2 * MiB, 0);
	assert_non_null(g.handle);
	assert_int_equal(dev_stats(b, 0).ooms, 3);
	grant_poison(&g);
	assert_int_equal(broker_alloc(b, sa, ia->id, 256, 0, &g), -ENOMEM);
	assert_int_equal(dev_stats(b, 0).ooms, 4);
	check(b);

	/* An empty slab of a connected uid is its cache, and yields to
	 * another uid when the device is full (pool.h: on -ENOMEM every idle
	 * slab is released and the creation retried), which is no OOM: A's
	 * to B here, then B's to A. */
	assert_int_equal(broker_free(b, sa, ga[0].id), 0); /* A's cache now */
	assert_int_equal(dev_stats(b, 0).reserved, 8 * MiB);
	sb = open_session(b, UID_B, 3);
	ib = reg(b, sb, 0);
	gb = alloc_ok(b, sb, ib, 4096, 0);
	assert_int_equal(broker_free(b, sb, gb.id), 0);
	st = dev_stats(b, 0);
	assert_int_equal(st.slabs, 4);
	assert_int_equal(st.reserved, 8 * MiB);
	g = alloc_ok(b, sa, ia, 2 * MiB, 0);
	st = dev_stats(b, 0);
	assert_int_equal(st.ooms, 4);
	assert_int_equal(st.slabs, 4);
	assert_int_equal(st.used, 8 * MiB);
	check(b);
	broker_done(b);
}

/* ---- allocation ids ------------------------------------------------------ */

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void test_alloc_ids(void **state)
{
	enum { N = 10000 };
	struct broker *b = broker_new(64 * MiB, 0, 0);
	struct session *s = open_session(b, UID_A, 1);
	struct broker_instance *inst = reg(b, s, 0);
	static uint64_t ids[N], sorted[N];
	(void)state;

	for (int i = 0; i < N; i++) {
		struct broker_grant g;
		grant_poison(&g);
		assert_int_equal(broker_alloc(b, s, inst->id, 256, 0, &g), 0);
		assert_int_not_equal(g.id, 0);
		ids[i] = g.id;
	}
	assert_int_equal(s->alloc_count, N);
	assert_int_equal(b->allocs.count, N);
	check(b);

	memcpy(sorted, ids, N * sizeof(*ids));
	qsort(sorted, N, sizeof(*sorted), cmp_u64);
	for (int i = 1; i < N; i++) {
		if (sorted[i] == sorted[i - 1])
			fail_msg("allocation id %016" PRIx64 " given twice", sorted[i]);
	}
	/* Not a sequence: the differences between consecutive ids vary, the
	 * ids are neither increasing nor decreasing, and they use the high
	 * bits (random 64-bit values, not small counters). */
	bool same_step = true, increasing = true, decreasing = true;
	unsigned high = 0;
	for (int i = 1; i < N; i++) {
		if (ids[i] - ids[i - 1] != ids[1] - ids[0])
			same_step = false;
		if (ids[i] <= ids[i - 1])
			increasing = false;
		if (ids[i] >= ids[i - 1])
			decreasing = false;
	}
	for (int i = 0; i < N; i++)
		high += (ids[i] >> 48) != 0;
	assert_false(same_step);
	assert_false(increasing);
	assert_false(decreasing);
	assert_true(high > N / 2);

	for (int i = 0; i < N; i++)
		assert_int_equal(broker_free(b, s, ids[i]), 0);
	check(b);
	assert_int_equal(b->allocs.count, 0);
	assert_int_equal(dev_stats(b, 0).live, 0);
	broker_done(b);
}

/* ---- operator rules ------------------------------------------------------ */

/* The rule for a session: its uid's first; else the first group rule for its
 * primary group or any supplementary one; else none. */
static void test_rule_for_groups(void **state)
{
	struct broker *b = broker_new(16 * MiB, 0, 0);
	const struct broker_rule rules[] = {
	    {.group = true, .gid = 50, .cap = 1 * MiB},
	    {.group = false, .uid = UID_A, .proportion = 0.5},
	    {.group = true, .gid = 60, .cap = 2 * MiB},
	};
	broker_set_rules(b, rules, 3);
	struct session *a = open_session(b, UID_A, 1);
	struct session *other = open_session(b, UID_B, 2);
	const gid_t both[] = {60, 50}, one[] = {7, 60};
	/* UID_A's own rule beats its groups'. */
	assert_int_equal(broker_session_set_groups(a, both, 2), 0);
	assert_ptr_equal(broker_rule_for(b, a), &b->rules[1]);
	/* Supplementary groups count; of two, the rule first in order wins. */
	assert_null(broker_rule_for(b, other));
	assert_int_equal(broker_session_set_groups(other, one, 2), 0);
	assert_ptr_equal(broker_rule_for(b, other), &b->rules[2]);
	assert_int_equal(broker_session_set_groups(other, both, 2), 0);
	assert_ptr_equal(broker_rule_for(b, other), &b->rules[0]);
	/* The primary group alone counts too. */
	assert_int_equal(broker_session_set_groups(other, NULL, 0), 0);
	other->gid = 60;
	assert_ptr_equal(broker_rule_for(b, other), &b->rules[2]);
	broker_session_close(b, other);
	broker_session_close(b, a);
	broker_done(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_teardown(test_limits, teardown),
	    cmocka_unit_test_teardown(test_attach_limit, teardown),
	    cmocka_unit_test_teardown(test_alloc_counts_attachments, teardown),
	    cmocka_unit_test_teardown(test_oom, teardown),
	    cmocka_unit_test_teardown(test_alloc_ids, teardown),
	    cmocka_unit_test_teardown(test_rule_for_groups, teardown),
	};

	/* Errors only, as in every broker test binary: a warning a test provokes
	 * on purpose is noise. */
	log_init(LOG_LEVEL_ERROR);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
