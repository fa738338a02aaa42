/*
 * test-broker-lease.c - unit tests of leases in the broker (broker_lease.c
 * and the lease and carve states of broker_alloc.c), over the sim backend:
 * sizes that double and shrink to the caps, max_leases, returns (twice,
 * another session's), carves inside, outside and overlapping, a return
 * refused while a carve or an attachment of one lives, the session's end
 * and invalidate_all taking leases back, and direct/async refusing leases.
 *
 * broker_check() runs after every step: its lease invariants (leases on
 * 2 MiB inside their slabs, adding up to the instances' figures, carves
 * inside and apart) are under test too. Shared helpers: session-helpers.h.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "broker.h"
#include "broker_internal.h"
#include "pool.h"

#include "session-helpers.h"

/* A lease that must be granted: size bytes wanted, granted bytes expected. */
static struct broker_grant lease_ok(struct broker *b, struct session *s,
                                    struct broker_instance *inst, uint64_t size, uint64_t granted)
{
	struct broker_grant g;
	struct broker_refusal why;
	grant_poison(&g);
	assert_int_equal(broker_lease(b, s, inst->id, size, NULL, &g, &why), 0);
	assert_int_equal(g.size, granted);
	assert_int_equal(g.offset % (2 * MiB), 0);
	assert_true(g.offset + g.size <= g.slab_size);
	assert_int_equal(g.device, inst->device);
	check(b);
	return g;
}

/* A lease that must be refused with rc and limit; the refusal's figures. */
static struct broker_refusal lease_refused(struct broker *b, struct session *s, uint64_t instance,
                                           uint64_t size, int rc, enum broker_limit limit)
{
	struct broker_grant g;
	struct broker_refusal why;
	uint64_t live = b->allocs.count;
	assert_int_equal(broker_lease(b, s, instance, size, NULL, &g, &why), rc);
	assert_int_equal(why.rc, rc);
	assert_int_equal(why.limit, limit);
	assert_int_equal(b->allocs.count, live);
	check(b);
	return why;
}

static uint64_t carve_ok(struct broker *b, struct session *s, uint64_t lease, uint64_t offset,
                         uint64_t size, uint64_t rounded)
{
	uint64_t id = 0, got = 0;
	assert_int_equal(broker_lease_carve(b, s, lease, offset, size, &id, &got), 0);
	assert_int_equal(got, rounded);
	assert_non_null(idmap_get(&b->allocs, id));
	check(b);
	return id;
}

static void carve_refused(struct broker *b, struct session *s, uint64_t lease, uint64_t offset,
                          uint64_t size, int rc)
{
	uint64_t id = 0, got = 0, count = s->alloc_count;
	assert_int_equal(broker_lease_carve(b, s, lease, offset, size, &id, &got), rc);
	assert_int_equal(s->alloc_count, count);
	check(b);
}

/* Sizes double with the leases held, stop at the slab, and never fall
 * below the request rounded up to 2 MiB; the instance is charged all. */
static void test_lease_sizes(void **state)
{
	struct broker *b = broker_new_slab(256 * MiB, 16 * MiB, 0, 0);
	struct session *s = open_session(b, UID_A, 1);
	struct broker_instance *inst = reg(b, s, 0), *other = reg(b, s, 0);
	(void)state;

	struct broker_grant g[6];
	const uint64_t sizes[6] = {2, 4, 8, 16, 16, 16};
	uint64_t sum = 0;
	for (int i = 0; i < 6; i++) {
		g[i] = lease_ok(b, s, inst, i == 0 ? 1 : 4096, sizes[i] * MiB);
		sum += g[i].size;
		assert_int_equal(inst->leased, sum);
		assert_int_equal(inst->leases, i + 1);
		assert_int_equal(inst->used, sum);
		assert_int_equal(inst->pol.used, sum);
	}
	/* The first grant hands the slab over; the next in it do not. */
	assert_non_null(g[0].handle);
	assert_int_equal(s->alloc_count, 6);
	assert_int_equal(s->used, sum);
	assert_int_equal(dev_stats(b, 0).used, sum);

	/* The request decides when it is larger: 5 MiB is 6 MiB of lease,
	 * and a whole slab is one lease. */
	lease_ok(b, s, other, 5 * MiB, 6 * MiB);
	lease_ok(b, s, other, 16 * MiB, 16 * MiB);
	struct broker_refusal why =
	    lease_refused(b, s, other->id, 16 * MiB + 1, -EFBIG, BROKER_LIMIT_SLAB);
	assert_int_equal(why.value, 16 * MiB);
	lease_refused(b, s, other->id, UINT64_MAX, -EFBIG, BROKER_LIMIT_SLAB);
	/* in_use is recorded, even with a refusal. */
	uint64_t in_use = 12345;
	struct broker_grant gg;
	assert_int_equal(broker_lease(b, s, other->id, UINT64_MAX, &in_use, &gg, &why), -EFBIG);
	assert_int_equal(other->in_use, 12345);
	in_use = 777;
	assert_int_equal(broker_lease_return(b, s, g[0].id, &in_use), 0);
	assert_int_equal(inst->in_use, 777);
	assert_int_equal(inst->leased, sum - 2 * MiB);
	check(b);
	broker_done(b);
}

/* A lease shrinks to the instance's cap (never below the request), and
 * past it is refused as an alloc would be, with the same figures. */
static void test_lease_cap(void **state)
{
	struct broker *b = broker_new_slab(64 * MiB, 16 * MiB, 0, 0);
	struct session *s = open_session(b, UID_A, 1);
	struct broker_instance *inst = NULL;
	(void)state;

	assert_int_equal(broker_set_mode(b, POLICY_ACTIVE), 0);
	assert_int_equal(broker_register(b, s, "capped", 0, 0.25, NULL, &inst), 0);
	uint64_t cap = inst->pol.cap;
	assert_int_equal(cap, 16 * MiB);
	lease_ok(b, s, inst, 1, 2 * MiB);
	lease_ok(b, s, inst, 1, 4 * MiB);
	lease_ok(b, s, inst, 1, 8 * MiB);
	/* 16 MiB wanted, 2 MiB left under the cap. */
	lease_ok(b, s, inst, 1, 2 * MiB);
	assert_int_equal(inst->used, cap);
	struct broker_refusal why =
	    lease_refused(b, s, inst->id, 1, -EDQUOT, BROKER_LIMIT_INSTANCE);
	assert_int_equal(why.cap, cap);
	assert_int_equal(why.used, cap);
	assert_int_equal(why.requested, 2 * MiB);
	assert_int_equal(why.instance, inst->id);
	broker_done(b);

	/* A device limit shrinks a lease too; a request larger than the room
	 * is refused whole (-ENOMEM: the device's figures). */
	b = broker_new_slab(64 * MiB, 16 * MiB, 0, 0);
	s = open_session(b, UID_A, 1);
	inst = reg(b, s, 0);
	assert_int_equal(broker_set_limit(b, 0, 10 * MiB, 0), 0);
	lease_ok(b, s, inst, 1, 2 * MiB);
	lease_ok(b, s, inst, 1, 4 * MiB);
	lease_ok(b, s, inst, 1, 4 * MiB);
	why = lease_refused(b, s, inst->id, 1, -ENOMEM, BROKER_LIMIT_DEVICE);
	assert_int_equal(why.requested, 2 * MiB);
	assert_int_equal(why.free, 0);
	broker_done(b);
}

/* max_leases per instance; a return makes room for one more. */
static void test_lease_max(void **state)
{
	struct broker *b = broker_new(256 * MiB, 0, 0);
	struct session *s = open_session(b, UID_A, 1);
	struct broker_instance *inst = reg(b, s, 0), *other = reg(b, s, 0);
	struct broker_grant g[PROTO_MAX_LEASES];
	(void)state;

	for (int i = 0; i < PROTO_MAX_LEASES; i++)
		g[i] = lease_ok(b, s, inst, 1, SLAB);
	struct broker_refusal why = lease_refused(b, s, inst->id, 1, -EMLINK, BROKER_LIMIT_LEASES);
	assert_int_equal(why.value, PROTO_MAX_LEASES);
	/* Per instance: another has its own. */
	lease_ok(b, s, other, 1, SLAB);
	assert_int_equal(broker_lease_return(b, s, g[7].id, NULL), 0);
	lease_ok(b, s, inst, 1, SLAB);
	assert_int_equal(inst->leases, PROTO_MAX_LEASES);
	broker_done(b);

	/* A lease is a daemon object: max_allocations counts it. */
	b = broker_new(64 * MiB, 0, 3);
	s = open_session(b, UID_A, 1);
	inst = reg(b, s, 0);
	lease_ok(b, s, inst, 1, SLAB);
	alloc_ok(b, s, inst, 4096, 0);
	lease_ok(b, s, inst, 1, SLAB);
	why = lease_refused(b, s, inst->id, 1, -EMFILE, BROKER_LIMIT_ALLOCATIONS);
	assert_int_equal(why.value, 3);
	broker_done(b);
}

/* Returns: once, by its session only; free, attach and claim know no
 * lease; unknown instances are refused. */
static void test_lease_return(void **state)
{
	struct broker *b = broker_new(64 * MiB, 0, 0);
	struct session *s1 = open_session(b, UID_A, 1), *s2 = open_session(b, UID_A, 2);
	struct broker_instance *i1 = reg(b, s1, 0), *i2 = reg(b, s2, 0);
	struct broker_grant g, att;
	(void)state;

	struct broker_grant l1 = lease_ok(b, s1, i1, 1, SLAB);
	struct broker_grant l2 = lease_ok(b, s2, i2, 1, SLAB);
	/* Another session's instance, an unknown one. */
	lease_refused(b, s1, i2->id, 1, -ENOENT, BROKER_LIMIT_NONE);
	lease_refused(b, s1, 0x1234, 1, -ENOENT, BROKER_LIMIT_NONE);
	/* Another session's lease, even of the same user: unknown. */
	assert_int_equal(broker_lease_return(b, s1, l2.id, NULL), -ENOENT);
	assert_int_equal(broker_lease_return(b, s2, l1.id, NULL), -ENOENT);
	assert_int_equal(broker_lease_return(b, s1, 0, NULL), -ENOENT);
	/* Not an allocation to free, attach or claim. */
	assert_int_equal(broker_free(b, s1, l1.id), -ENOENT);
	assert_int_equal(broker_attach(b, s2, l1.id, &att), -ENOENT);
	assert_int_equal(broker_claim(b, s1, l1.id, &g), -ENOENT);
	assert_int_equal(broker_export(b, s1, l1.id, "lease", UID_A), -ENOENT);
	assert_int_equal(i1->leases, 1);
	assert_int_equal(i2->leases, 1);
	check(b);
	/* Once. */
	assert_int_equal(broker_lease_return(b, s1, l1.id, NULL), 0);
	assert_int_equal(broker_lease_return(b, s1, l1.id, NULL), -ENOENT);
	assert_int_equal(i1->used, 0);
	assert_int_equal(i1->leased, 0);
	assert_int_equal(i1->leases, 0);
	assert_int_equal(s1->alloc_count, 0);
	/* And an allocation id is no lease. */
	struct broker_grant a = alloc_ok(b, s1, i1, 4096, 0);
	assert_int_equal(broker_lease_return(b, s1, a.id, NULL), -ENOENT);
	check(b);
	assert_int_equal(broker_unregister(b, s2, i2->id), -EBUSY);
	assert_int_equal(broker_lease_return(b, s2, l2.id, NULL), 0);
	assert_int_equal(broker_unregister(b, s2, i2->id), 0);
	assert_int_equal(dev_stats(b, 0).used, 4096);
	check(b);
	broker_done(b);
}

/* Carves: inside the lease, on granules, apart; an allocation for free,
 * attach and export, charged nothing more. */
static void test_lease_carve(void **state)
{
	struct broker *b = broker_new(64 * MiB, 0, 0);
	struct session *s1 = open_session(b, UID_A, 1), *s2 = open_session(b, UID_A, 2);
	struct broker_instance *i1 = reg(b, s1, 0), *i2 = reg(b, s2, 0);
	struct broker_grant att;
	(void)state;

	struct broker_grant l = lease_ok(b, s1, i1, 1, SLAB);
	struct broker_grant other = lease_ok(b, s2, i2, 1, SLAB);
	uint64_t c1 = carve_ok(b, s1, l.id, 0, 1000, 1024);
	uint64_t c2 = carve_ok(b, s1, l.id, 1024, 4096, 4096);
	uint64_t tail = carve_ok(b, s1, l.id, SLAB - 256, 256, 256);
	assert_int_equal(i1->used, SLAB);
	assert_int_equal(s1->used, SLAB);
	assert_int_equal(s1->alloc_count, 4);
	/* Outside: not on a granule, at or past the end, running past it. */
	carve_refused(b, s1, l.id, 100, 10, -EINVAL);
	carve_refused(b, s1, l.id, SLAB, 1, -EINVAL);
	carve_refused(b, s1, l.id, UINT64_MAX & ~255ull, 1, -EINVAL);
	carve_refused(b, s1, l.id, SLAB - 512, 513, -ERANGE);
	carve_refused(b, s1, l.id, 8192, UINT64_MAX, -ERANGE);
	/* Overlapping a carve, at either end. */
	carve_refused(b, s1, l.id, 512, 10, -EADDRINUSE);
	carve_refused(b, s1, l.id, 4096, 2048, -EADDRINUSE);
	carve_refused(b, s1, l.id, SLAB - 1024, 1024, -EADDRINUSE);
	/* Another session's lease, no lease, an allocation. */
	carve_refused(b, s1, other.id, 0, 256, -ENOENT);
	carve_refused(b, s2, l.id, 8192, 256, -ENOENT);
	carve_refused(b, s1, c1, 0, 256, -ENOENT);
	/* Whole or not at all. */
	assert_int_equal(broker_lease_return(b, s1, l.id, NULL), -EBUSY);

	/* Attached by another session: the lease's slab, at the carve. */
	assert_int_equal(broker_attach(b, s2, c2, &att), 0);
	assert_int_equal(att.slab_id, l.slab_id);
	assert_int_equal(att.offset, l.offset + 1024);
	assert_int_equal(att.size, 4096);
	assert_int_equal(broker_export(b, s1, c1, "carved", UID_A), 0);
	check(b);
	/* Freed while attached: an orphan; its range stays taken. */
	assert_int_equal(broker_free(b, s1, c2), 0);
	assert_int_equal(broker_free(b, s1, c1), 0);
	assert_int_equal(broker_free(b, s1, tail), 0);
	assert_int_equal(b->orphan_count, 1);
	carve_refused(b, s1, l.id, 2048, 256, -EADDRINUSE);
	/* The lease goes back all the same (its client reuses none of it):
	 * out of the instance, an orphan lease charged to the device until
	 * the holder lets go. */
	uint64_t used = i1->used;
	assert_int_equal(broker_lease_return(b, s1, l.id, NULL), 0);
	assert_int_equal(b->orphan_leases, 1);
	assert_true(i1->used < used);
	carve_refused(b, s1, l.id, 2048, 256, -ENOENT);
	assert_int_equal(broker_lease_return(b, s1, l.id, NULL), -ENOENT);
	check(b);
	assert_int_equal(broker_detach(b, s2, c2), 0);
	assert_int_equal(b->orphan_count, 0);
	assert_int_equal(b->orphan_leases, 0);
	assert_int_equal(broker_free(b, s1, c2), -ENOENT);
	check(b);
	broker_done(b);
}

/* The session's end takes its leases back; one whose carve another holds
 * lives on, an orphan charged to the device, until that one lets go. */
static void test_lease_session_end(void **state)
{
	struct broker *b = broker_new(64 * MiB, 0, 0);
	struct session *s1 = open_session(b, UID_A, 1), *s2 = open_session(b, UID_A, 2);
	struct broker_instance *i1 = reg(b, s1, 0), *i2 = reg(b, s2, 0);
	struct broker_grant att;
	(void)state;

	for (int i = 0; i < 3; i++)
		lease_ok(b, s1, i1, 1, SLAB);
	struct broker_grant l = lease_ok(b, s2, i2, 1, SLAB);
	uint64_t c = carve_ok(b, s2, l.id, 4096, 4096, 4096);
	carve_ok(b, s2, l.id, 0, 256, 256);
	assert_int_equal(broker_attach(b, s1, c, &att), 0);
	assert_int_equal(dev_stats(b, 0).used, 4 * SLAB);
	broker_session_close(b, s2);
	check(b);
	assert_int_equal(b->orphan_leases, 1);
	assert_int_equal(b->orphan_count, 1);
	assert_int_equal(dev_stats(b, 0).used, 4 * SLAB);
	assert_int_equal(b->policy.dev[0].orphaned, SLAB);
	assert_int_equal(broker_detach(b, s1, c), 0);
	assert_int_equal(b->orphan_leases, 0);
	assert_int_equal(b->policy.dev[0].orphaned, 0);
	assert_int_equal(dev_stats(b, 0).used, 3 * SLAB);
	check(b);
	broker_session_close(b, s1);
	assert_int_equal(dev_stats(b, 0).used, 0);
	assert_int_equal(b->allocs.count, 0);
	check(b);

	/* The holder goes first: nothing is left either. */
	s1 = open_session(b, UID_A, 3);
	s2 = open_session(b, UID_A, 4);
	i1 = reg(b, s1, 1);
	l = lease_ok(b, s1, i1, 1, SLAB);
	c = carve_ok(b, s1, l.id, 0, 4096, 4096);
	assert_int_equal(broker_attach(b, s2, c, &att), 0);
	broker_session_close(b, s2);
	check(b);
	broker_session_close(b, s1);
	assert_int_equal(dev_stats(b, 1).used, 0);
	assert_int_equal(b->orphan_leases + b->orphan_count, 0);
	check(b);
	broker_done(b);
}

/* invalidate_all releases leases and carves with everything else. */
static void test_lease_invalidate(void **state)
{
	struct broker *b = broker_new(64 * MiB, 0, 0);
	struct session *s1 = open_session(b, UID_A, 1), *s2 = open_session(b, UID_A, 2);
	struct broker_instance *i1 = reg(b, s1, 0);
	struct broker_grant att;
	uint64_t allocs, attachments;
	unsigned released;
	(void)state;

	s1->hello = s2->hello = true;
	struct broker_grant l = lease_ok(b, s1, i1, 1, SLAB);
	uint64_t c = carve_ok(b, s1, l.id, 0, 4096, 4096);
	assert_int_equal(broker_attach(b, s2, c, &att), 0);
	broker_invalidate_all(b, &allocs, &attachments);
	assert_int_equal(allocs, 2);
	assert_int_equal(attachments, 1);
	assert_int_equal(i1->leases, 0);
	assert_int_equal(i1->used, 0);
	check(b);
	assert_int_equal(broker_invalidate_done(b, s1, b->invalidate_epoch, &released), 0);
	assert_int_equal(broker_invalidate_done(b, s2, b->invalidate_epoch, &released), 0);
	assert_int_equal(dev_stats(b, 0).used, 0);
	check(b);
	broker_done(b);
}

/* Under direct (and async, where the backend has it) leases are refused:
 * each allocation is a backend allocation there. */
static void test_lease_allocators(void **state)
{
	struct broker *b = broker_new(64 * MiB, 0, 0);
	struct session *s = open_session(b, UID_A, 1);
	struct broker_instance *inst = reg(b, s, 0);
	uint64_t allocs, attachments;
	(void)state;

	assert_int_equal(broker_set_allocator(b, BROKER_ALLOCATOR_DIRECT, &allocs, &attachments),
	                 0);
	struct broker_refusal why =
	    lease_refused(b, s, inst->id, 1, -EOPNOTSUPP, BROKER_LIMIT_ALLOCATOR);
	assert_int_equal(why.value, BROKER_ALLOCATOR_DIRECT);
	if (broker_set_allocator(b, BROKER_ALLOCATOR_ASYNC, &allocs, &attachments) == 0)
		lease_refused(b, s, inst->id, 1, -EOPNOTSUPP, BROKER_LIMIT_ALLOCATOR);
	assert_int_equal(broker_set_allocator(b, BROKER_ALLOCATOR_POOL, &allocs, &attachments), 0);
	lease_ok(b, s, inst, 1, SLAB);
	broker_done(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_teardown(test_lease_sizes, teardown),
	    cmocka_unit_test_teardown(test_lease_cap, teardown),
	    cmocka_unit_test_teardown(test_lease_max, teardown),
	    cmocka_unit_test_teardown(test_lease_return, teardown),
	    cmocka_unit_test_teardown(test_lease_carve, teardown),
	    cmocka_unit_test_teardown(test_lease_session_end, teardown),
	    cmocka_unit_test_teardown(test_lease_invalidate, teardown),
	    cmocka_unit_test_teardown(test_lease_allocators, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
