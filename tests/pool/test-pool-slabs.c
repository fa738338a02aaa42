/*
 * test-pool-slabs.c - unit tests of the device memory sub-allocator
 * (pool/pool.c, pool/pool_tlsf.c): slabs: exhaustion and the -ENOMEM trim
 * and retry, tail slabs from what a full device has left, backend errors, uid isolation, dedicated
 * slabs, the slab cache, pins, trim, destroy with live blocks.
 *
 * The backend is a fake that hands out bookkeeping records instead of memory,
 * so device capacity is whatever a test says, errors can be injected, and at
 * the end every slab it created must have been destroyed exactly once.
 * Shared helpers: pool-helpers.h.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "pool.h"
#include "pool-helpers.h"

static void test_exhaustion_oom(void **state)
{
	struct fake f = {.capacity = 4 * MiB};
	struct pool *pool = pool_new(&f, 2 * MiB, 2 * MiB, 0);
	struct pool_block *b[8], *x = NULL;
	unsigned calls;

	(void)state;
	/* Eight 512 KiB blocks fill both slabs exactly. */
	for (unsigned i = 0; i < 8; i++)
		b[i] = alloc_ok(pool, 1, 512 * KiB, 0);
	assert_int_equal(f.creates, 2);
	calls = f.calls;
	assert_int_equal(pool_alloc(pool, 1, 256, 0, &x), -ENOMEM);
	assert_null(x);
	assert_int_equal(f.calls, calls + 2); /* tried, trimmed, tried again */
	assert_int_equal(stats_of(pool).ooms, 1);
	assert_int_equal(pool_alloc(pool, 1, 3 * MiB, 0, &x), -ENOMEM);
	assert_int_equal(stats_of(pool).ooms, 2);
	assert_int_equal(stats_of(pool).allocs, 8);
	check_pool(pool);
	free_ok(pool, b[3]);
	x = alloc_ok(pool, 1, 512 * KiB, 0);
	assert_int_equal(f.creates, 2);
	b[3] = x;
	for (unsigned i = 0; i < 8; i++)
		free_ok(pool, b[i]);
	assert_int_equal(stats_of(pool).slabs, 0);
	pool_destroy(pool);
	fake_fini(&f);
}

static void test_enomem_trim_retry(void **state)
{
	struct fake f = {.capacity = 4 * MiB};
	struct pool *pool = pool_new(&f, 2 * MiB, 2 * MiB, 1);
	struct pool_block *a, *b[3], *x = NULL;
	struct fake_slab *cached;
	unsigned calls;

	(void)state;
	a = alloc_ok(pool, 1, MiB, 0);
	cached = fake_of(pool_block_slab(a));
	free_ok(pool, a);
	assert_true(cached->alive); /* uid 1 keeps its empty slab */
	b[0] = alloc_ok(pool, 2, MiB, 0);
	b[1] = alloc_ok(pool, 2, MiB, 0);
	calls = f.calls;
	/* The device is full, but uid 1's cached slab is memory uid 2 can
	 * get once it is released. */
	b[2] = alloc_ok(pool, 2, MiB, 0);
	assert_int_equal(f.calls, calls + 2);
	assert_false(cached->alive);
	assert_int_equal(stats_of(pool).ooms, 0);
	assert_int_equal(stats_of(pool).slabs, 2);
	assert_int_equal(f.last_uid, 2);
	/* uid 2's free MiB is not uid 1's to use. */
	assert_int_equal(pool_alloc(pool, 1, 256, 0, &x), -ENOMEM);
	assert_int_equal(stats_of(pool).ooms, 1);
	check_pool(pool);

	/* A pinned empty slab survives the trim, so the retry fails too. */
	free_ok(pool, b[2]);
	a = alloc_ok(pool, 3, 256, 0);
	assert_int_equal(f.last_uid, 3);
	assert_int_equal(pool_alloc(pool, 3, 2 * MiB, 0, &x), -ENOMEM);
	free_ok(pool, b[0]);
	free_ok(pool, b[1]);
	pool_slab_pin(pool_block_slab(a));
	free_ok(pool, a);
	calls = f.calls;
	assert_int_equal(pool_alloc(pool, 4, 3 * MiB, 0, &x), -ENOMEM);
	assert_int_equal(f.calls, calls + 2);
	assert_int_equal(stats_of(pool).ooms, 3);
	/* uid 2's cached slab went in the trim, uid 3's pinned one stayed. */
	assert_int_equal(stats_of(pool).slabs, 1);
	pool_destroy(pool);
	fake_fini(&f);
}

/*
 * The last part of a device, smaller than a standard slab: a 100 MiB device,
 * 64 MiB slabs, one 64 MiB allocation held. A 256-byte request gets a tail
 * slab of all that is left (36 MiB), which later requests share; one that
 * needs more than is left still fails, after asking for just what it needs.
 */
static void test_tail_slab(void **state)
{
	struct fake f = {.capacity = 100 * MiB};
	struct pool *pool = pool_new(&f, 64 * MiB, 0, 1);
	struct pool_block *big, *small, *rest, *other, *x = NULL;
	struct pool_slab *tail;
	unsigned calls;

	(void)state;
	big = alloc_ok(pool, 1, 64 * MiB, 0);
	assert_int_equal(f.last_size, 64 * MiB);
	calls = f.calls;
	/* A standard slab, trim and again, then the tail. */
	small = alloc_ok(pool, 1, 256, 0);
	tail = pool_block_slab(small);
	assert_int_equal(f.calls, calls + 3);
	assert_int_equal(pool_slab_size(tail), 36 * MiB);
	assert_int_equal(fake_of(tail)->size, 36 * MiB);
	assert_int_equal(f.in_use, 100 * MiB);
	assert_int_equal(stats_of(pool).ooms, 0);
	/* More than the tail has free, and nothing left on the device: the
	 * last try was the request rounded up to the slab alignment. */
	calls = f.calls;
	assert_int_equal(pool_alloc(pool, 1, 36 * MiB, 0, &x), -ENOMEM);
	assert_null(x);
	assert_int_equal(f.calls, calls + 3);
	assert_int_equal(f.last_try, 36 * MiB);
	assert_int_equal(stats_of(pool).ooms, 1);
	/* Whatever fits in the tail goes there, at any alignment. */
	rest = alloc_ok(pool, 1, 36 * MiB - 2 * MiB, 2 * MiB);
	assert_ptr_equal(pool_block_slab(rest), tail);
	assert_int_equal(pool_block_offset(rest), 2 * MiB);
	assert_int_equal(f.calls, calls + 3);
	free_ok(pool, rest);
	/* Emptied, the tail is the uid's cached slab, and serves again. */
	free_ok(pool, small);
	assert_true(fake_of(tail)->alive);
	small = alloc_ok(pool, 1, 4 * MiB, 0);
	assert_ptr_equal(pool_block_slab(small), tail);
	free_ok(pool, small);
	/* Another uid: the trim gives it uid 1's cached tail to use. */
	other = alloc_ok(pool, 2, 20 * MiB, 0);
	assert_int_equal(pool_slab_size(pool_block_slab(other)), 36 * MiB);
	assert_int_equal(f.last_uid, 2);
	assert_int_equal(stats_of(pool).slabs, 2);
	/* A dedicated slab does not shrink: nothing smaller serves it. */
	calls = f.calls;
	assert_int_equal(pool_alloc(pool, 3, 70 * MiB, 0, &x), -ENOMEM);
	assert_int_equal(f.calls, calls + 2);
	/* With the room back, slabs are standard again. */
	free_ok(pool, big);
	free_ok(pool, other);
	x = alloc_ok(pool, 3, 256, 0);
	assert_int_equal(pool_slab_size(pool_block_slab(x)), 64 * MiB);
	free_ok(pool, x);
	pool_destroy(pool);
	fake_fini(&f);
}

/* The room hint wrong or missing: each -ENOMEM steps down twice as far as
 * the one before, never below what the request needs, never above a
 * standard slab less the alignment. */
static void test_tail_slab_search(void **state)
{
	struct pool_config cfg = {.slab_size = 64 * MiB, .keep_empty = 1};
	struct fake f = {.capacity = 100 * MiB};
	struct pool *pool = pool_create(&cfg, &fake_ops_blind, &f);
	struct pool_block *big, *a, *b, *x = NULL;
	unsigned calls;

	(void)state;
	assert_non_null(pool);
	big = alloc_ok(pool, 1, 64 * MiB, 0);
	calls = f.calls;
	/* 64, 64, then 62, 60, 56, 48 refused, 32 made. */
	a = alloc_ok(pool, 1, 256, 0);
	assert_int_equal(f.calls, calls + 7);
	assert_int_equal(pool_slab_size(pool_block_slab(a)), 32 * MiB);
	assert_int_equal(f.rooms, 0);
	/* 4 MiB are left: the search ends at the request's own size. */
	calls = f.calls;
	b = alloc_ok(pool, 2, 3 * MiB, 0);
	assert_int_equal(f.calls, calls + 8);
	assert_int_equal(pool_slab_size(pool_block_slab(b)), 4 * MiB);
	assert_int_equal(f.in_use, 100 * MiB);
	calls = f.calls;
	assert_int_equal(pool_alloc(pool, 2, 2 * MiB, 0, &x), -ENOMEM);
	assert_int_equal(f.last_try, 2 * MiB);
	assert_int_equal(f.calls, calls + 8);
	free_ok(pool, b);
	free_ok(pool, a);
	free_ok(pool, big);
	pool_destroy(pool);
	assert_int_equal(f.enomem, 2 + 4 + 2 + 5 + 2 + 6);

	/* A hint that overstates by 8 MiB: 44, 42, 38 refused, 30 made. */
	f.capacity = 100 * MiB;
	f.room_over = 8 * MiB;
	pool = pool_new(&f, 64 * MiB, 0, 1);
	big = alloc_ok(pool, 1, 64 * MiB, 0);
	calls = f.calls;
	a = alloc_ok(pool, 1, 256, 0);
	assert_int_equal(f.calls, calls + 6);
	assert_int_equal(pool_slab_size(pool_block_slab(a)), 30 * MiB);
	free_ok(pool, a);
	/* One beyond any slab starts just below a standard one. */
	f.room_over = 1ull << 40;
	assert_int_equal(pool_trim(pool, 1, false), 1);
	calls = f.calls;
	a = alloc_ok(pool, 2, 256, 0);
	assert_int_equal(f.calls, calls + 7);
	assert_int_equal(pool_slab_size(pool_block_slab(a)), 32 * MiB);
	free_ok(pool, a);
	free_ok(pool, big);
	pool_destroy(pool);
	fake_fini(&f);
}

static void test_uid_isolation(void **state)
{
	struct fake f = {0};
	struct pool *pool = pool_new(&f, 2 * MiB, 0, 1);
	struct pool_slab *owner_slab[3][8] = {{0}};
	struct pool_block *blk[3 * 300];
	unsigned nslab[3] = {0}, n = 0;

	(void)state;
	for (unsigned i = 0; i < 300; i++) {
		for (uint32_t u = 0; u < 3; u++) {
			struct pool_block *b = alloc_ok(pool, 100 + u, 4 * KiB + 256 * u, 0);
			struct pool_slab *s = pool_block_slab(b);
			bool known = false;

			assert_int_equal(pool_slab_uid(s), 100 + u);
			assert_int_equal(fake_of(s)->uid, 100 + u);
			for (unsigned k = 0; k < nslab[u]; k++)
				known |= owner_slab[u][k] == s;
			if (!known) {
				assert_true(nslab[u] < 8);
				owner_slab[u][nslab[u]++] = s;
			}
			blk[n++] = b;
		}
	}
	/* No slab appears under two uids. */
	for (unsigned u = 0; u < 3; u++)
		for (unsigned v = u + 1; v < 3; v++)
			for (unsigned i = 0; i < nslab[u]; i++)
				for (unsigned k = 0; k < nslab[v]; k++)
					assert_ptr_not_equal(owner_slab[u][i], owner_slab[v][k]);
	for (uint32_t u = 0; u < 3; u++)
		assert_int_equal(pool_uid_used(pool, 100 + u), 300 * (4 * KiB + 256 * u));
	assert_int_equal(pool_uid_used(pool, 99), 0);
	while (n)
		pool_free(pool, blk[--n]);
	check_pool(pool);
	assert_int_equal(stats_of(pool).slabs, 3); /* one cached per uid */
	pool_destroy(pool);
	fake_fini(&f);
}

static void test_dedicated_slab(void **state)
{
	struct fake f = {0};
	struct pool *pool = pool_new(&f, 4 * MiB, 0, 5);
	struct pool_block *std, *big, *small, *al;
	struct pool_slab *ded;

	(void)state;
	std = alloc_ok(pool, 1, 2 * MiB, 0); /* below the threshold (the slab size): standard */
	assert_int_equal(f.last_size, 4 * MiB);
	big = alloc_ok(pool, 1, 5 * MiB, 0);
	ded = pool_block_slab(big);
	assert_int_equal(f.last_size, 6 * MiB);
	assert_int_equal(pool_slab_size(ded), 6 * MiB);
	assert_int_equal(pool_block_offset(big), 0);
	assert_int_equal(pool_block_size(big), 5 * MiB);
	assert_int_equal(stats_of(pool).free_blocks, 2);
	/* The dedicated slab's tail is an ordinary free range: the best fit. */
	small = alloc_ok(pool, 1, 512 * KiB, 0);
	assert_ptr_equal(pool_block_slab(small), ded);
	assert_int_equal(pool_block_offset(small), 5 * MiB);
	assert_int_equal(f.creates, 2);
	free_ok(pool, big);
	assert_true(fake_of(ded)->alive);
	free_ok(pool, small);
	/* Empty dedicated slabs go back at once, whatever keep_empty says. */
	assert_int_equal(f.destroys, 1);
	assert_int_equal(stats_of(pool).slabs, 1);
	/* A dedicated slab starts at offset 0, so every alignment holds. */
	al = alloc_ok(pool, 1, 4 * MiB + 1, POOL_MAX_ALIGNMENT);
	assert_int_equal(pool_block_offset(al), 0);
	assert_int_equal(f.last_size, 6 * MiB);
	free_ok(pool, al);
	free_ok(pool, std);
	assert_int_equal(fake_live(&f), 1);
	pool_destroy(pool);
	fake_fini(&f);
}

static void test_cache_keep_empty(void **state)
{
	struct fake f = {0};
	struct pool *pool = pool_new(&f, 2 * MiB, 2 * MiB, 0);
	struct pool_block *b[3];
	struct pool_stats st;

	(void)state;
	for (unsigned i = 0; i < 10; i++)
		free_ok(pool, alloc_ok(pool, 1, KiB, 0));
	assert_int_equal(f.creates, 10);
	assert_int_equal(fake_live(&f), 0);
	pool_destroy(pool);

	pool = pool_new(&f, 2 * MiB, 2 * MiB, 1);
	for (unsigned i = 0; i < 100; i++)
		free_ok(pool, alloc_ok(pool, 1, KiB, 0));
	assert_int_equal(f.creates, 11);
	st = stats_of(pool);
	assert_int_equal(st.slabs, 1);
	assert_int_equal(st.reserved, 2 * MiB);
	assert_int_equal(st.free_blocks, 1);
	assert_int_equal(st.largest_free, 2 * MiB);
	/* Each uid has its own cache. */
	free_ok(pool, alloc_ok(pool, 2, KiB, 0));
	assert_int_equal(stats_of(pool).slabs, 2);
	pool_destroy(pool);

	pool = pool_new(&f, 2 * MiB, 2 * MiB, 2);
	for (unsigned i = 0; i < 3; i++)
		b[i] = alloc_ok(pool, 1, 2 * MiB, 0);
	for (unsigned i = 0; i < 3; i++)
		free_ok(pool, b[i]);
	assert_int_equal(stats_of(pool).slabs, 2);
	assert_int_equal(fake_live(&f), 2);
	/* Cached slabs are reused before new ones are made. */
	b[0] = alloc_ok(pool, 1, 2 * MiB, 0);
	b[1] = alloc_ok(pool, 1, 2 * MiB, 0);
	assert_int_equal(f.creates, 15);
	free_ok(pool, b[0]);
	free_ok(pool, b[1]);
	assert_int_equal(pool_trim(pool, 1, false), 2);
	assert_int_equal(stats_of(pool).slabs, 0);
	check_pool(pool);
	pool_destroy(pool);
	fake_fini(&f);
}

static void test_pins(void **state)
{
	struct fake f = {0};
	struct pool *pool = pool_new(&f, 2 * MiB, 2 * MiB, 0);
	struct pool_block *a, *b;
	struct pool_slab *s, *t;

	(void)state;
	a = alloc_ok(pool, 1, KiB, 0);
	s = pool_block_slab(a);
	pool_slab_pin(s);
	pool_slab_pin(s);
	free_ok(pool, a);
	assert_int_equal(fake_live(&f), 1);
	assert_int_equal(pool_trim(pool, 0, true), 0);
	/* A pinned empty slab still serves allocations. */
	a = alloc_ok(pool, 1, KiB, 0);
	assert_ptr_equal(pool_block_slab(a), s);
	free_ok(pool, a);
	pool_slab_unpin(pool, s);
	check_pool(pool);
	assert_int_equal(fake_live(&f), 1);
	pool_slab_unpin(pool, s);
	check_pool(pool);
	assert_int_equal(fake_live(&f), 0);
	/* Unpinning a live slab releases nothing, and neither does an
	 * unbalanced unpin. */
	a = alloc_ok(pool, 1, KiB, 0);
	pool_slab_pin(pool_block_slab(a));
	pool_slab_unpin(pool, pool_block_slab(a));
	pool_slab_unpin(pool, pool_block_slab(a));
	check_pool(pool);
	free_ok(pool, a);
	assert_int_equal(fake_live(&f), 0);
	pool_destroy(pool);

	/* With keep_empty 1 a pinned empty slab is not cache: another empty
	 * slab is cached beside it, and the unpinned one then goes. */
	pool = pool_new(&f, 2 * MiB, 2 * MiB, 1);
	a = alloc_ok(pool, 1, 2 * MiB, 0);
	b = alloc_ok(pool, 1, 2 * MiB, 0);
	s = pool_block_slab(a);
	t = pool_block_slab(b);
	pool_slab_pin(s);
	free_ok(pool, a);
	free_ok(pool, b);
	assert_int_equal(fake_live(&f), 2);
	pool_slab_unpin(pool, s);
	check_pool(pool);
	assert_int_equal(fake_live(&f), 1);
	assert_true(fake_of(t)->alive);
	/* Pinning the cached slab takes it out of the cache, which then has
	 * room for another. */
	pool_slab_pin(t);
	check_pool(pool);
	a = alloc_ok(pool, 1, 2 * MiB, 0);
	assert_ptr_equal(pool_block_slab(a), t);
	b = alloc_ok(pool, 1, 2 * MiB, 0);
	free_ok(pool, b);
	free_ok(pool, a);
	assert_int_equal(fake_live(&f), 2);
	pool_slab_unpin(pool, t);
	check_pool(pool);
	assert_int_equal(fake_live(&f), 1);

	/* A pinned dedicated slab stays while pinned, and only then. */
	a = alloc_ok(pool, 1, 3 * MiB, 0);
	s = pool_block_slab(a);
	pool_slab_pin(s);
	free_ok(pool, a);
	assert_true(fake_of(s)->alive);
	pool_slab_unpin(pool, s);
	check_pool(pool);
	assert_int_equal(fake_live(&f), 1);
	pool_destroy(pool);
	fake_fini(&f);
}

static void test_trim(void **state)
{
	struct fake f = {0};
	struct pool *pool = pool_new(&f, 2 * MiB, 2 * MiB, 1);
	struct pool_block *keep, *pinned;

	(void)state;
	for (uint32_t u = 1; u <= 3; u++)
		free_ok(pool, alloc_ok(pool, u, KiB, 0));
	keep = alloc_ok(pool, 3, 2 * MiB, 0);
	pinned = alloc_ok(pool, 4, 2 * MiB, 0);
	pool_slab_pin(pool_block_slab(pinned));
	free_ok(pool, pinned);
	assert_int_equal(stats_of(pool).slabs, 4); /* uid 3 reused its cache */
	assert_int_equal(pool_trim(pool, 1, false), 1);
	assert_int_equal(pool_trim(pool, 1, false), 0);
	assert_int_equal(pool_trim(pool, 99, false), 0);
	assert_int_equal(pool_trim(pool, 0, true), 1); /* uid 2's; 3 is busy, 4 pinned */
	check_pool(pool);
	free_ok(pool, keep);
	assert_int_equal(pool_trim(pool, 0, true), 1);
	assert_int_equal(stats_of(pool).slabs, 1);
	pool_slab_unpin(pool, pool_block_slab(pinned)); /* cached again */
	assert_int_equal(pool_trim(pool, 4, false), 1);
	assert_int_equal(stats_of(pool).slabs, 0);
	check_pool(pool);
	pool_destroy(pool);
	fake_fini(&f);
}

static void test_create_errors(void **state)
{
	struct fake f = {0};
	struct pool *pool = pool_new(&f, 2 * MiB, 0, 1);
	static const int errs[] = {-EIO, -EPERM, -ENODEV, -EINVAL, -EAGAIN};
	struct pool_block *b = NULL;
	struct fake_slab *other;
	unsigned calls;

	(void)state;
	b = alloc_ok(pool, 2, KiB, 0);
	other = fake_of(pool_block_slab(b));
	free_ok(pool, b);
	b = NULL;
	/* Other errors are passed on: no trim, no retry, not an oom. */
	for (unsigned i = 0; i < sizeof(errs) / sizeof(errs[0]); i++) {
		int err = errs[i];

		f.fail_err = err;
		f.fail_times = 1;
		calls = f.calls;
		assert_int_equal(pool_alloc(pool, 1, KiB, 0, &b), err);
		assert_int_equal(f.calls, calls + 1);
		assert_null(b);
		assert_true(other->alive);
		check_pool(pool);
	}
	f.fail_err = -EPERM;
	f.fail_times = 1;
	assert_int_equal(pool_alloc(pool, 1, 5 * MiB, 0, &b), -EPERM);
	assert_int_equal(stats_of(pool).ooms, 0);
	/* One -ENOMEM: trim (uid 2's cache goes), retry, success. */
	f.fail_err = -ENOMEM;
	f.fail_times = 1;
	calls = f.calls;
	b = alloc_ok(pool, 1, KiB, 0);
	assert_int_equal(f.calls, calls + 2);
	assert_false(other->alive);
	assert_int_equal(stats_of(pool).ooms, 0);
	free_ok(pool, b);
	/* -ENOMEM twice: an oom, even if the device answer came from the
	 * backend rather than from capacity. */
	f.fail_times = 2;
	assert_int_equal(pool_alloc(pool, 1, 5 * MiB, 0, &b), -ENOMEM);
	assert_int_equal(stats_of(pool).ooms, 1);
	/* The retry after the first -ENOMEM trimmed uid 1's cached slab. */
	assert_int_equal(stats_of(pool).slabs, 0);
	check_pool(pool);
	pool_destroy(pool);
	fake_fini(&f);
}

static void test_destroy_with_live(void **state)
{
	struct fake f = {0};
	struct pool *pool = pool_new(&f, 2 * MiB, 0, 1);
	struct pool_block *b;

	(void)state;
	for (uint32_t u = 0; u < 40; u++) {
		for (unsigned i = 0; i < 20; i++)
			alloc_ok(pool, u * 7919, (i + 1) * 77 * KiB, 0);
		b = alloc_ok(pool, u * 7919, 3 * MiB, 0);
		pool_slab_pin(pool_block_slab(b));
	}
	assert_true(f.creates > 40);
	pool_destroy(pool);
	fake_fini(&f);
}

/* prefer(): the slab the test names. */
static bool prefer_slab(void *ctx, const struct pool_slab *slab)
{
	return slab == ctx;
}

/* pool_alloc_prefer takes a fitting range in a preferred slab over the
 * good fit elsewhere, falls back to the good fit when the preferred slab has
 * no room, and never makes a slab while another one has room. */
static void test_prefer(void **state)
{
	struct fake f = {0};
	struct pool *pool = pool_new(&f, 4 * MiB, 4 * MiB, 1);
	struct pool_block *a1, *b1, *x, *y, *z;
	struct pool_slab *sa, *sb;

	(void)state;
	/* Slab A keeps 512 KiB free, slab B 2 MiB. */
	a1 = alloc_ok(pool, 1, 3 * MiB + 512 * KiB, 0);
	b1 = alloc_ok(pool, 1, 2 * MiB, 0);
	sa = pool_block_slab(a1);
	sb = pool_block_slab(b1);
	assert_ptr_not_equal(sa, sb);
	/* Good fit: the smaller hole, in A. */
	x = alloc_ok(pool, 1, 64 * KiB, 0);
	assert_ptr_equal(pool_block_slab(x), sa);
	/* Preferring B: B, although A's hole is the better fit. */
	const struct pool_prefer pref_b = {prefer_slab, sb};
	assert_int_equal(pool_alloc_prefer(pool, 1, 0, 64 * KiB, 0, &pref_b, &y), 0);
	assert_ptr_equal(pool_block_slab(y), sb);
	check_pool(pool);
	/* Preferring A for more than A has: B, and no new slab. */
	const struct pool_prefer pref_a = {prefer_slab, sa};
	assert_int_equal(pool_alloc_prefer(pool, 1, 0, MiB, 0, &pref_a, &z), 0);
	assert_ptr_equal(pool_block_slab(z), sb);
	assert_int_equal(f.creates, 2);
	/* With an alignment, a preferred range still has to fit it. */
	free_ok(pool, z);
	assert_int_equal(pool_alloc_prefer(pool, 1, 0, 256 * KiB, 128 * KiB, &pref_a, &z), 0);
	assert_ptr_equal(pool_block_slab(z), sa);
	assert_int_equal(pool_block_offset(z) % (128 * KiB), 0);
	check_pool(pool);
	/* No preference (NULL) is pool_alloc. */
	free_ok(pool, z);
	assert_int_equal(pool_alloc_prefer(pool, 1, 0, 64 * KiB, 0, NULL, &z), 0);
	assert_ptr_equal(pool_block_slab(z), sa);
	free_ok(pool, z);
	free_ok(pool, y);
	free_ok(pool, x);
	free_ok(pool, b1);
	free_ok(pool, a1);
	pool_destroy(pool);
	fake_fini(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_exhaustion_oom),
	    cmocka_unit_test(test_enomem_trim_retry),
	    cmocka_unit_test(test_tail_slab),
	    cmocka_unit_test(test_tail_slab_search),
	    cmocka_unit_test(test_uid_isolation),
	    cmocka_unit_test(test_dedicated_slab),
	    cmocka_unit_test(test_cache_keep_empty),
	    cmocka_unit_test(test_pins),
	    cmocka_unit_test(test_trim),
	    cmocka_unit_test(test_create_errors),
	    cmocka_unit_test(test_destroy_with_live),
	    cmocka_unit_test(test_prefer),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
