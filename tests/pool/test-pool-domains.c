/*
 * test-pool-domains.c - unit tests of the pool's domains and guarantees
 * (pool/pool_domain.c, pool.h "Domains and guarantees"): no slab
 * for anyone eats into another domain's unmet guarantee; a domain's own
 * slabs shrink to what it may still make (tail slabs), and a guaranteed
 * domain's request above half a slab gets a slab of its size; setting a
 * guarantee or the capacity refuses what does not fit (after trimming idle
 * slabs); pool_available says what a heap can really get; and a seeded
 * random run (GPB_TEST_SEED replays) in which, after every step, each
 * guarantee's unmet part can still be had.
 *
 * The fake backend's capacity is the pool's, so the backend never refuses
 * what the pool's own bound allows: every refusal here is the pool's.
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

#include "pool.h"
#include "pool-helpers.h"

#define SLAB (64 * MiB)

static struct pool_block *alloc_in_ok(struct pool *pool, uint32_t uid, uint32_t domain,
                                      uint64_t size)
{
	struct pool_block *b = NULL;
	int rc = pool_alloc_in(pool, uid, domain, size, 0, &b);

	if (rc)
		fail_msg("pool_alloc_in(%u, %u, %" PRIu64 ") = %d", uid, domain, size, rc);
	check_pool(pool);
	return b;
}

/* A 1 GiB device of 64 MiB slabs, the pool bounded by it. */
static struct pool *device_pool(struct fake *f)
{
	*f = (struct fake){.capacity = GiB};
	struct pool *pool = pool_new(f, SLAB, 0, 1);

	assert_int_equal(pool_set_capacity(pool, GiB), 0);
	return pool;
}

/* The first case: a guarantee of 256 MiB; another uid outside takes
 * 33 MiB pieces, a slab each, and is refused at 768 MiB of slabs; the
 * guaranteed domain then gets its 256 MiB. */
static void test_outside_stops_at_guarantee(void **state)
{
	struct fake f;
	struct pool *pool = device_pool(&f);
	struct pool_block *b[16], *a[16], *x = NULL;
	uint64_t total, largest;

	(void)state;
	assert_int_equal(pool_set_guarantee(pool, 7, 256 * MiB), 0);
	assert_int_equal(pool_room(pool, 0), 768 * MiB);
	assert_int_equal(pool_room(pool, 7), GiB);
	for (unsigned i = 0; i < 12; i++)
		b[i] = alloc_in_ok(pool, 2, 0, 33 * MiB);
	assert_int_equal(pool_alloc(pool, 2, 33 * MiB, 0, &x), -ENOMEM);
	assert_null(x);
	assert_int_equal(stats_of(pool).ooms, 1);
	assert_int_equal(pool_room(pool, 0), 0);
	assert_int_equal(pool_room(pool, 7), 256 * MiB);
	/* What uid 2 can have: its slabs' rest, 31 MiB in one piece. */
	pool_available(pool, 2, 0, &total, &largest);
	assert_int_equal(total, 12 * 31 * MiB);
	assert_int_equal(largest, 31 * MiB);
	/* Another uid outside: nothing. */
	pool_available(pool, 3, 0, &total, &largest);
	assert_int_equal(total, 0);
	assert_int_equal(largest, 0);
	assert_int_equal(pool_alloc(pool, 3, 4 * KiB, 0, &x), -ENOMEM);
	/* The domain: its whole guarantee, to any of its uids. */
	pool_available(pool, 1, 7, &total, &largest);
	assert_int_equal(total, 256 * MiB);
	assert_int_equal(largest, 256 * MiB);
	for (unsigned i = 0; i < 16; i++)
		a[i] = alloc_in_ok(pool, 1, 7, 16 * MiB);
	assert_int_equal(pool_domain_reserved(pool, 7), 256 * MiB);
	assert_int_equal(f.in_use, GiB);
	/* Past its guarantee, the device is full. */
	assert_int_equal(pool_alloc_in(pool, 1, 7, 4 * KiB, 0, &x), -ENOMEM);
	for (unsigned i = 0; i < 16; i++)
		free_ok(pool, a[i]);
	/* One empty slab stays cached, and counts: 192 MiB left to make. */
	assert_int_equal(pool_domain_reserved(pool, 7), SLAB);
	assert_int_equal(pool_room(pool, 7), 192 * MiB);
	/* A dedicated slab of all of it: the cached slab goes back for it. */
	a[0] = alloc_in_ok(pool, 1, 7, 256 * MiB);
	assert_true(pool_slab_dedicated(pool_block_slab(a[0])));
	free_ok(pool, a[0]);
	for (unsigned i = 0; i < 12; i++)
		free_ok(pool, b[i]);
	pool_destroy(pool);
	fake_fini(&f);
}

/* Two guarantees of 512 MiB fill the device. A guaranteed domain's 33 MiB
 * request gets a 34 MiB slab (more than half a slab), so 15 of them fit
 * in 510 MiB; the other domain still gets its 512 MiB. Outside, the same
 * request gets a standard slab. */
static void test_two_guarantees(void **state)
{
	struct fake f;
	struct pool *pool = device_pool(&f);
	struct pool_block *a[16], *b[32], *x = NULL;

	(void)state;
	assert_int_equal(pool_set_guarantee(pool, 1, 512 * MiB), 0);
	assert_int_equal(pool_set_guarantee(pool, 2, 512 * MiB), 0);
	assert_int_equal(pool_room(pool, 0), 0);
	assert_int_equal(pool_alloc(pool, 9, 256, 0, &x), -ENOMEM);
	for (unsigned i = 0; i < 15; i++) {
		a[i] = alloc_in_ok(pool, 5, 1, 33 * MiB);
		assert_int_equal(pool_slab_size(pool_block_slab(a[i])), 34 * MiB);
	}
	/* A smaller one fits the 1 MiB ends of those slabs, one each. */
	x = alloc_in_ok(pool, 5, 1, MiB);
	assert_int_equal(pool_domain_reserved(pool, 1), 510 * MiB);
	free_ok(pool, x);
	/* Past its guarantee, domain 1 has 2 MiB: a tail slab. */
	x = alloc_in_ok(pool, 5, 1, 2 * MiB - 256);
	assert_int_equal(pool_slab_size(pool_block_slab(x)), 2 * MiB);
	free_ok(pool, x);
	pool_trim(pool, 5, false);
	/* The same uid in domain 2: slabs of its own. */
	for (unsigned i = 0; i < 32; i++)
		b[i] = alloc_in_ok(pool, 5, 2, 16 * MiB);
	assert_int_equal(pool_domain_reserved(pool, 2), 512 * MiB);
	assert_int_equal(pool_uid_used(pool, 5), 15 * 33 * MiB + 512 * MiB);
	for (unsigned i = 0; i < 32; i++)
		free_ok(pool, b[i]);
	for (unsigned i = 0; i < 15; i++)
		free_ok(pool, a[i]);
	/* Guarantees end; their domains' records go with their last slab. */
	assert_int_equal(pool_set_guarantee(pool, 1, 0), 0);
	assert_int_equal(pool_set_guarantee(pool, 2, 0), 0);
	x = alloc_in_ok(pool, 9, 0, 33 * MiB);
	assert_int_equal(pool_slab_size(pool_block_slab(x)), SLAB);
	free_ok(pool, x);
	assert_int_equal(pool_trim(pool, 0, true), 3);
	assert_int_equal(stats_of(pool).slabs, 0);
	pool_destroy(pool);
	fake_fini(&f);
}

/* A guarantee that is not a whole number of slabs: the outside's last slab
 * is a tail slab that stops at it, and the domain's last one too. */
static void test_tail_slabs(void **state)
{
	struct fake f;
	struct pool *pool = device_pool(&f);
	struct pool_block *b[64], *a[8];
	unsigned n = 0;

	(void)state;
	assert_int_equal(pool_set_guarantee(pool, 3, 100 * MiB), 0);
	/* 924 MiB outside: 14 standard slabs (3 pieces each) and one of
	 * 28 MiB (one piece). */
	for (;;) {
		struct pool_block *x = NULL;
		if (pool_alloc(pool, 2, 20 * MiB, 0, &x) < 0)
			break;
		b[n++] = x;
		check_pool(pool);
		assert_true(n < 64);
	}
	assert_int_equal(stats_of(pool).reserved, 924 * MiB);
	assert_int_equal(pool_slab_size(pool_block_slab(b[n - 1])), 28 * MiB);
	/* The domain: a standard slab, then the 36 MiB left. */
	for (unsigned i = 0; i < 6; i++)
		a[i] = alloc_in_ok(pool, 1, 3, 16 * MiB);
	assert_int_equal(pool_domain_reserved(pool, 3), 100 * MiB);
	assert_int_equal(f.in_use, GiB);
	for (unsigned i = 0; i < 6; i++)
		free_ok(pool, a[i]);
	for (unsigned i = 0; i < n; i++)
		free_ok(pool, b[i]);
	pool_destroy(pool);
	fake_fini(&f);
}

/* Setting a guarantee or the capacity refuses what does not fit, changing
 * nothing; idle slabs do not make a refusal. */
static void test_refusals(void **state)
{
	struct fake f;
	struct pool *pool = device_pool(&f);
	struct pool_block *b;

	(void)state;
	assert_int_equal(pool_set_guarantee(pool, 0, MiB), -EINVAL);
	assert_int_equal(pool_set_guarantee(NULL, 1, MiB), -EINVAL);
	assert_int_equal(pool_set_guarantee(pool, 4, 0), 0); /* none to end */
	check_pool(pool);
	b = alloc_in_ok(pool, 2, 0, 600 * MiB);
	assert_int_equal(pool_set_guarantee(pool, 1, 500 * MiB), -ENOSPC);
	assert_int_equal(pool_room(pool, 0), 424 * MiB);
	assert_int_equal(pool_set_guarantee(pool, 1, 424 * MiB), 0);
	assert_int_equal(pool_set_capacity(pool, GiB - MiB), -ENOSPC);
	assert_int_equal(pool_set_guarantee(pool, 1, 425 * MiB), -ENOSPC);
	free_ok(pool, b);
	/* A small allocation leaves a cached 64 MiB slab when freed: it
	 * counts, but goes back when a guarantee needs the room. */
	b = alloc_in_ok(pool, 2, 0, MiB);
	free_ok(pool, b);
	assert_int_equal(stats_of(pool).reserved, SLAB);
	assert_int_equal(pool_set_guarantee(pool, 1, GiB), 0);
	assert_int_equal(stats_of(pool).reserved, 0);
	assert_int_equal(pool_set_capacity(pool, GiB - MiB), -ENOSPC);
	/* A domain's slabs stay after its guarantee ends, as ordinary ones. */
	b = alloc_in_ok(pool, 2, 1, MiB);
	assert_int_equal(pool_set_guarantee(pool, 1, 0), 0);
	check_pool(pool);
	assert_int_equal(pool_domain_reserved(pool, 1), SLAB);
	assert_int_equal(pool_room(pool, 0), GiB - SLAB);
	assert_int_equal(pool_set_capacity(pool, 0), 0);
	assert_int_equal(pool_room(pool, 0), UINT64_MAX);
	free_ok(pool, b);
	pool_destroy(pool);
	fake_fini(&f);
}

/* Random allocations and frees by uids outside and in three guaranteed
 * domains, sizes from 4 KiB to twice a slab; after each step the pool is
 * sound and each guarantee's unmet part can be had, in one slab. */
static void test_random_guarantees(void **state)
{
	enum { NB = 600, NDOM = 4 };
	static const uint64_t guarantee[NDOM] = {0, 160 * MiB, 300 * MiB, 70 * MiB + 4 * KiB};
	struct fake f;
	struct pool *pool = device_pool(&f);
	struct pool_block *live[NB] = {0};
	const char *env = getenv("GPB_TEST_SEED");
	unsigned seed = env ? (unsigned)strtoul(env, NULL, 10) : (unsigned)time(NULL) ^ getpid();
	unsigned refused = 0;

	(void)state;
	print_message("seed %u (GPB_TEST_SEED=%u replays it)\n", seed, seed);
	srandom(seed);
	for (uint32_t d = 1; d < NDOM; d++)
		assert_int_equal(pool_set_guarantee(pool, d, guarantee[d]), 0);
	for (unsigned step = 0; step < 4000; step++) {
		unsigned i = (unsigned)random() % NB;
		if (live[i]) {
			free_ok(pool, live[i]);
			live[i] = NULL;
			continue;
		}
		uint32_t d = (uint32_t)random() % NDOM;
		uint64_t size = random() % 4 == 0 ? (uint64_t)random() % (2 * SLAB) + 1
		                                  : 4 * KiB + (uint64_t)random() % MiB;
		int rc = pool_alloc_in(pool, 100 + (uint32_t)random() % 3, d, size, 0, &live[i]);
		assert_true(rc == 0 || rc == -ENOMEM);
		refused += rc != 0;
		check_pool(pool);
		/* Every unmet guarantee can be had whatever was done: a slab
		 * of it (whole 2 MiB units) for a uid new to the domain. */
		for (uint32_t g = 1; g < NDOM; g++) {
			uint64_t have = pool_domain_reserved(pool, g);
			uint64_t unmet = guarantee[g] > have ? guarantee[g] - have : 0;
			struct pool_block *probe = NULL;
			unmet &= ~(2 * MiB - 1);
			if (!unmet)
				continue;
			rc = pool_alloc_in(pool, 999, g, unmet, 0, &probe);
			if (rc)
				fail_msg("step %u: domain %u lacks %" PRIu64
				         " of its guarantee and "
				         "cannot have it: %d",
				         step, g, unmet, rc);
			pool_free(pool, probe);
			pool_trim(pool, 999, false);
		}
	}
	print_message("%u requests refused\n", refused);
	for (unsigned i = 0; i < NB; i++)
		if (live[i])
			free_ok(pool, live[i]);
	pool_destroy(pool);
	fake_fini(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_outside_stops_at_guarantee),
	    cmocka_unit_test(test_two_guarantees),
	    cmocka_unit_test(test_tail_slabs),
	    cmocka_unit_test(test_refusals),
	    cmocka_unit_test(test_random_guarantees),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
