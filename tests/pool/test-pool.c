/*
 * test-pool.c - unit tests of the device memory sub-allocator (pool/pool.c,
 * pool/pool_tlsf.c): pool creation and configuration, rounding and
 * alignment, block split and coalescing, the fit search, stats, huge sizes and
 * many blocks, the check.
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

static void test_create_defaults(void **state)
{
	struct fake f = {0};
	struct pool *pool = pool_create(NULL, &fake_ops, &f);
	struct pool_block *a, *b, *c, *d;

	(void)state;
	assert_non_null(pool);
	a = alloc_ok(pool, 7, 1, 0);
	assert_int_equal(f.last_size, POOL_DEFAULT_SLAB);
	assert_int_equal(f.last_uid, 7);
	assert_int_equal(pool_slab_size(pool_block_slab(a)), POOL_DEFAULT_SLAB);
	/* Half a slab (the threshold before) is a standard request... */
	b = alloc_ok(pool, 7, POOL_DEFAULT_SLAB / 2, 0);
	assert_ptr_equal(pool_block_slab(b), pool_block_slab(a));
	assert_int_equal(f.creates, 1);
	/* ...and so is exactly the threshold (the slab size): a standard slab
	 * of its own when no free range holds it. */
	d = alloc_ok(pool, 7, POOL_DEFAULT_SLAB, 0);
	assert_int_equal(f.creates, 2);
	assert_int_equal(pool_slab_size(pool_block_slab(d)), POOL_DEFAULT_SLAB);
	/* One byte more gets a dedicated slab rounded up to 2 MiB. */
	c = alloc_ok(pool, 7, POOL_DEFAULT_SLAB + 1, 0);
	assert_int_equal(f.creates, 3);
	assert_int_equal(pool_slab_size(pool_block_slab(c)), POOL_DEFAULT_SLAB + 2 * MiB);
	assert_int_equal(pool_block_offset(c), 0);
	free_ok(pool, a);
	free_ok(pool, b);
	free_ok(pool, c);
	free_ok(pool, d);
	/* keep_empty defaults to 1: one standard slab stays, the dedicated and
	 * the other standard one go. */
	assert_int_equal(fake_live(&f), 1);
	assert_int_equal(stats_of(pool).slabs, 1);
	pool_destroy(pool);
	fake_fini(&f);
}

static void test_create_config(void **state)
{
	static const uint64_t bad_size[] = {256, MiB, 3 * MiB, 2 * MiB + 256, 63 * MiB, UINT64_MAX};
	struct pool_config zero = {0}, bad = {0};
	struct pool_slab_ops no_create = {.destroy = fake_destroy};
	struct fake f = {0};
	struct pool *pool;
	struct pool_block *a, *b;

	(void)state;
	/* An all-zero config is the default config, cache included. */
	pool = pool_create(&zero, &fake_ops, &f);
	assert_non_null(pool);
	free_ok(pool, alloc_ok(pool, 1, 1, 0));
	assert_int_equal(f.last_size, POOL_DEFAULT_SLAB);
	assert_int_equal(fake_live(&f), 1);
	pool_destroy(pool);

	/* slab_size 0 is the default; keep_empty is taken as given. */
	pool = pool_new(&f, 0, 0, 2);
	a = alloc_ok(pool, 1, POOL_DEFAULT_SLAB + 1, 0);
	assert_int_equal(f.last_size, POOL_DEFAULT_SLAB + 2 * MiB);
	free_ok(pool, a);
	pool_destroy(pool);

	/* threshold 0 is the slab size; keep_empty 0 caches nothing. */
	pool = pool_new(&f, 8 * MiB, 0, 0);
	a = alloc_ok(pool, 1, 8 * MiB, 0);
	assert_int_equal(f.last_size, 8 * MiB);
	b = alloc_ok(pool, 1, 8 * MiB + 1, 0);
	assert_int_equal(f.last_size, 10 * MiB);
	assert_ptr_not_equal(pool_block_slab(a), pool_block_slab(b));
	free_ok(pool, a);
	free_ok(pool, b);
	assert_int_equal(fake_live(&f), 0);
	pool_destroy(pool);

	/* A threshold above the slab size cannot put a request bigger than a
	 * slab into a standard slab. */
	pool = pool_new(&f, 4 * MiB, 64 * MiB, 1);
	a = alloc_ok(pool, 1, 4 * MiB + 1, 0);
	assert_int_equal(f.last_size, 6 * MiB);
	b = alloc_ok(pool, 1, 4 * MiB, 0);
	assert_int_equal(f.last_size, 4 * MiB);
	pool_destroy(pool);

	for (unsigned i = 0; i < sizeof(bad_size) / sizeof(bad_size[0]); i++) {
		bad.slab_size = bad_size[i];
		assert_null(pool_create(&bad, &fake_ops, &f));
	}
	bad.slab_size = POOL_MAX_SLAB + POOL_SLAB_ALIGN;
	assert_null(pool_create(&bad, &fake_ops, &f));
	assert_null(pool_create(NULL, NULL, &f));
	assert_null(pool_create(NULL, &no_create, &f));
	pool_destroy(NULL);
	fake_fini(&f);
}

static void test_alloc_invalid(void **state)
{
	static const uint64_t bad_align[] = {3, 384, 768, 3 * MiB, 4 * MiB, 1ull << 63, UINT64_MAX};
	struct fake f = {0};
	struct pool *pool = pool_create(NULL, &fake_ops, &f);
	struct pool_block *b = NULL;
	struct pool_stats st;

	(void)state;
	assert_int_equal(pool_alloc(pool, 1, 0, 0, &b), -EINVAL);
	for (unsigned i = 0; i < sizeof(bad_align) / sizeof(bad_align[0]); i++)
		assert_int_equal(pool_alloc(pool, 1, 256, bad_align[i], &b), -EINVAL);
	assert_int_equal(pool_alloc(pool, 1, 256, 0, NULL), -EINVAL);
	assert_int_equal(pool_alloc(NULL, 1, 256, 0, &b), -EINVAL);
	/* Rounding to the granule overflows. */
	assert_int_equal(pool_alloc(pool, 1, UINT64_MAX, 0, &b), -EINVAL);
	assert_int_equal(pool_alloc(pool, 1, UINT64_MAX - 254, 0, &b), -EINVAL);
	/* Rounding the dedicated slab to 2 MiB overflows. */
	assert_int_equal(pool_alloc(pool, 1, UINT64_MAX - 255, 0, &b), -EINVAL);
	/* size + alignment overflows. */
	assert_int_equal(pool_alloc(pool, 1, UINT64_MAX - MiB, 2 * MiB, &b), -EINVAL);
	assert_null(b);
	assert_int_equal(f.calls, 0);
	st = stats_of(pool);
	assert_int_equal(st.allocs + st.ooms + st.slabs, 0);
	/* A dedicated slab above POOL_MAX_SLAB (descriptors hold 48-bit
	 * granule counts) is more than any device has: out of memory, without
	 * asking the backend. */
	assert_int_equal(pool_alloc(pool, 1, POOL_MAX_SLAB + 1, 0, &b), -ENOMEM);
	assert_int_equal(pool_alloc(pool, 1, 1ull << 63, 0, &b), -ENOMEM);
	assert_null(b);
	assert_int_equal(f.calls, 0);
	assert_int_equal(stats_of(pool).ooms, 2);
	/* Alignments below the granule are valid and mean the granule. */
	for (uint64_t a = 1; a <= 256; a *= 2)
		assert_int_equal(pool_block_offset(alloc_ok(pool, 1, 1, a)) % 256, 0);
	check_pool(pool);
	pool_destroy(pool);
	fake_fini(&f);
}

static void test_rounding(void **state)
{
	static const uint64_t req[] = {1, 255, 256, 257, 511, 512, 4095, 4097, 100000};
	struct fake f = {0};
	struct pool *pool = pool_new(&f, 4 * MiB, 0, 1);
	uint64_t off = 0;
	struct pool_stats st;

	(void)state;
	for (unsigned i = 0; i < sizeof(req) / sizeof(req[0]); i++) {
		struct pool_block *b = alloc_ok(pool, 1, req[i], 0);
		uint64_t want = (req[i] + 255) / 256 * 256;

		assert_int_equal(pool_block_size(b), want);
		assert_int_equal(pool_block_offset(b), off);
		off += want;
	}
	st = stats_of(pool);
	assert_int_equal(st.used, off);
	assert_int_equal(st.live, 9);
	assert_int_equal(st.free_blocks, 1);
	assert_int_equal(st.largest_free, 4 * MiB - off);
	assert_int_equal(pool_uid_used(pool, 1), off);
	pool_destroy(pool);
	fake_fini(&f);
}

static void test_alignment(void **state)
{
	struct fake f = {0};
	struct pool *pool = pool_new(&f, 8 * MiB, 0, 0);
	struct pool_block *live[64];
	unsigned n = 0;

	(void)state;
	for (uint64_t align = 1; align <= POOL_MAX_ALIGNMENT; align *= 2) {
		struct pool_block *p = alloc_ok(pool, 1, 256, 0);
		struct pool_block *a = alloc_ok(pool, 1, 256, align);
		struct pool_block *g;
		uint64_t want = align > 256 ? align : 256;

		assert_int_equal(pool_block_offset(p), 0);
		assert_int_equal(pool_block_offset(a), want);
		/* The front remainder is a free range that the next small
		 * request, the best fit, takes. */
		assert_int_equal(stats_of(pool).free_blocks, want > 256 ? 2 : 1);
		g = alloc_ok(pool, 1, 256, 0);
		assert_int_equal(pool_block_offset(g), want > 256 ? 256 : 512);
		free_ok(pool, p);
		free_ok(pool, a);
		free_ok(pool, g);
		assert_int_equal(fake_live(&f), 0);
	}
	/* Many aligned blocks of odd sizes live together, each aligned. */
	for (uint64_t align = 256; align <= POOL_MAX_ALIGNMENT; align *= 2) {
		static const uint64_t sizes[] = {256, 1000, 70000};

		for (unsigned i = 0; i < 3; i++) {
			struct pool_block *b = alloc_ok(pool, 1, sizes[i], align);

			assert_int_equal(pool_block_offset(b) % align, 0);
			assert_true(pool_block_offset(b) + pool_block_size(b) <=
			            pool_slab_size(pool_block_slab(b)));
			live[n++] = b;
		}
	}
	while (n)
		free_ok(pool, live[--n]);
	assert_int_equal(fake_live(&f), 0);
	pool_destroy(pool);
	fake_fini(&f);
}

static void test_split(void **state)
{
	struct fake f = {0};
	struct pool *pool = pool_new(&f, 4 * MiB, 0, 1);
	struct pool_block *a, *b, *c, *d;
	struct pool_stats st;

	(void)state;
	a = alloc_ok(pool, 1, KiB, 0);
	st = stats_of(pool);
	assert_int_equal(st.free_blocks, 1);
	assert_int_equal(st.largest_free, 4 * MiB - KiB);
	b = alloc_ok(pool, 1, KiB, 0);
	assert_int_equal(pool_block_offset(b), KiB);
	free_ok(pool, a);
	assert_int_equal(stats_of(pool).free_blocks, 2);
	/* The hole is a better fit than the tail; splitting it leaves 512. */
	c = alloc_ok(pool, 1, 512, 0);
	assert_int_equal(pool_block_offset(c), 0);
	st = stats_of(pool);
	assert_int_equal(st.free_blocks, 2);
	assert_int_equal(st.largest_free, 4 * MiB - 2 * KiB);
	d = alloc_ok(pool, 1, 512, 0);
	assert_int_equal(pool_block_offset(d), 512);
	assert_int_equal(stats_of(pool).free_blocks, 1);
	pool_destroy(pool);
	fake_fini(&f);
}

static void test_coalesce_orders(void **state)
{
	static const unsigned perm[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2},
	                                    {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
	static const uint64_t size[3] = {KiB, 2 * KiB, 4 * KiB};
	struct fake f = {0};
	struct pool *pool = pool_new(&f, 4 * MiB, 0, 1);

	(void)state;
	for (unsigned p = 0; p < 6; p++) {
		struct pool_block *blk[3], *guard, *all;
		bool gone[3] = {false, false, false};

		for (unsigned i = 0; i < 3; i++)
			blk[i] = alloc_ok(pool, 1, size[i], 0);
		guard = alloc_ok(pool, 1, 256, 0);
		assert_int_equal(pool_block_offset(guard), 7 * KiB);
		for (unsigned k = 0; k < 3; k++) {
			unsigned runs = 0;

			free_ok(pool, blk[perm[p][k]]);
			gone[perm[p][k]] = true;
			for (unsigned i = 0; i < 3; i++)
				runs += gone[i] && (i == 0 || !gone[i - 1]);
			/* One free range per run of freed neighbours, plus the tail. */
			assert_int_equal(stats_of(pool).free_blocks, runs + 1);
		}
		all = alloc_ok(pool, 1, 7 * KiB, 0);
		assert_int_equal(pool_block_offset(all), 0);
		free_ok(pool, all);
		free_ok(pool, guard);
		assert_int_equal(stats_of(pool).free_blocks, 1);
		assert_int_equal(stats_of(pool).largest_free, 4 * MiB);
	}
	assert_int_equal(f.creates, 1);
	pool_destroy(pool);
	fake_fini(&f);
}

/* A range that fits exactly but sits in the request's own class (which the
 * rounded good-fit search skips) is still found before a new slab is made. */
static void test_fit_exact_hole(void **state)
{
	struct fake f = {0};
	struct pool *pool = pool_new(&f, 4 * MiB, 4 * MiB, 0);
	struct pool_block *x, *y, *z, *h;

	(void)state;
	x = alloc_ok(pool, 1, 33 * 256, 0);
	y = alloc_ok(pool, 1, 4 * MiB - 33 * 256, 0);
	free_ok(pool, x);
	x = alloc_ok(pool, 1, 33 * 256, 0);
	assert_int_equal(pool_block_offset(x), 0);
	assert_int_equal(f.creates, 1);
	free_ok(pool, x);
	free_ok(pool, y);

	/* An aligned hole exactly the size of an aligned request. */
	x = alloc_ok(pool, 1, MiB, 0);
	y = alloc_ok(pool, 1, MiB, 0);
	z = alloc_ok(pool, 1, 2 * MiB, 0);
	free_ok(pool, y);
	h = alloc_ok(pool, 1, MiB, MiB);
	assert_int_equal(pool_block_offset(h), MiB);
	assert_int_equal(f.creates, 2);
	free_ok(pool, x);
	free_ok(pool, h);
	free_ok(pool, z);
	pool_destroy(pool);
	fake_fini(&f);
}

/* Two free ranges of one class (32 and 33 granules), the smaller at the
 * head of its list: the search must not hand out the smaller for a request
 * of the larger, and largest_free must look past the head. */
static void test_same_class_ranges(void **state)
{
	struct fake f = {0};
	struct pool *pool = pool_new(&f, 4 * MiB, 4 * MiB, 0);
	struct pool_block *a, *g, *b, *rest;
	struct pool_stats st;

	(void)state;
	a = alloc_ok(pool, 1, 33 * 256, 0);
	g = alloc_ok(pool, 1, 256, 0);
	b = alloc_ok(pool, 1, 32 * 256, 0);
	rest = alloc_ok(pool, 1, 4 * MiB - 66 * 256, 0);
	free_ok(pool, a);
	free_ok(pool, b);
	st = stats_of(pool);
	assert_int_equal(st.free_blocks, 2);
	assert_int_equal(st.largest_free, 33 * 256);
	a = alloc_ok(pool, 1, 33 * 256, 0);
	assert_int_equal(pool_block_offset(a), 0);
	b = alloc_ok(pool, 1, 32 * 256, 0);
	assert_int_equal(pool_block_offset(b), 34 * 256);
	assert_int_equal(f.creates, 1);
	/* 34 granules fit in neither: a new slab, never an overlap. */
	free_ok(pool, a);
	a = alloc_ok(pool, 1, 34 * 256, 0);
	assert_ptr_not_equal(pool_block_slab(a), pool_block_slab(g));
	assert_int_equal(f.creates, 2);
	free_ok(pool, rest);
	free_ok(pool, a);
	pool_destroy(pool);
	fake_fini(&f);
}

static void test_stats_exact(void **state)
{
	struct fake f = {.capacity = 12 * MiB};
	struct pool *pool = pool_new(&f, 4 * MiB, 0, 1);
	struct pool_block *a, *b, *c, *d, *x = NULL;
	struct pool_stats st, zero = {0};
	uint64_t peak;

	(void)state;
	st = stats_of(pool);
	assert_memory_equal(&st, &zero, sizeof(st));
	a = alloc_ok(pool, 1, 1000, 0);
	b = alloc_ok(pool, 1, 3000, 0);
	c = alloc_ok(pool, 2, 5 * MiB, 0);
	d = alloc_ok(pool, 2, 1, 0);
	assert_ptr_equal(pool_block_slab(d), pool_block_slab(c));
	assert_int_equal(pool_alloc(pool, 1, 10 * MiB, 0, &x), -ENOMEM);
	peak = 1024 + 3072 + 5 * MiB + 256;
	st = stats_of(pool);
	assert_int_equal(st.reserved, 10 * MiB);
	assert_int_equal(st.used, peak);
	assert_int_equal(st.free, 10 * MiB - peak);
	assert_int_equal(st.free_blocks, 2);
	assert_int_equal(st.largest_free, 4 * MiB - 4096);
	assert_int_equal(st.peak, peak);
	assert_int_equal(st.slabs, 2);
	assert_int_equal(st.live, 4);
	assert_int_equal(st.allocs, 4);
	assert_int_equal(st.frees, 0);
	assert_int_equal(st.ooms, 1);
	assert_int_equal(pool_uid_used(pool, 1), 4096);
	assert_int_equal(pool_uid_used(pool, 2), 5 * MiB + 256);

	free_ok(pool, b);
	free_ok(pool, a);
	st = stats_of(pool);
	assert_int_equal(st.used, 5 * MiB + 256);
	assert_int_equal(st.free_blocks, 2);
	assert_int_equal(st.largest_free, 4 * MiB);
	assert_int_equal(st.frees, 2);
	assert_int_equal(st.live, 2);
	free_ok(pool, c);
	st = stats_of(pool);
	assert_int_equal(st.free_blocks, 3); /* cached slab, hole before d, tail */
	assert_int_equal(st.largest_free, 5 * MiB);
	free_ok(pool, d);
	st = stats_of(pool);
	assert_int_equal(st.reserved, 4 * MiB);
	assert_int_equal(st.used, 0);
	assert_int_equal(st.free, 4 * MiB);
	assert_int_equal(st.free_blocks, 1);
	assert_int_equal(st.largest_free, 4 * MiB);
	assert_int_equal(st.peak, peak);
	assert_int_equal(st.slabs, 1);
	assert_int_equal(st.live, 0);
	assert_int_equal(st.allocs, 4);
	assert_int_equal(st.frees, 4);
	assert_int_equal(st.ooms, 1);
	assert_int_equal(pool_uid_used(pool, 2), 0);
	pool_destroy(pool);
	fake_fini(&f);
}

static void test_peak(void **state)
{
	struct fake f = {0};
	struct pool *pool = pool_new(&f, 4 * MiB, 0, 1);
	struct pool_block *a, *b, *c, *d;

	(void)state;
	a = alloc_ok(pool, 1, MiB, 0);
	b = alloc_ok(pool, 1, MiB, 0);
	free_ok(pool, a);
	assert_int_equal(stats_of(pool).peak, 2 * MiB);
	c = alloc_ok(pool, 1, 512 * KiB, 0);
	assert_int_equal(stats_of(pool).peak, 2 * MiB);
	d = alloc_ok(pool, 1, MiB, 0);
	assert_int_equal(stats_of(pool).peak, 2 * MiB + 512 * KiB);
	free_ok(pool, b);
	free_ok(pool, c);
	free_ok(pool, d);
	assert_int_equal(stats_of(pool).peak, 2 * MiB + 512 * KiB);
	pool_destroy(pool);
	fake_fini(&f);
}

static void test_huge_sizes(void **state)
{
	struct fake f = {0};
	struct pool *pool = pool_new(&f, 1ull << 40, 0, 1);
	struct pool_block *b[16];

	(void)state;
	b[0] = alloc_ok(pool, 1, 80 * GiB + 1, 0);
	assert_int_equal(pool_block_size(b[0]), 80 * GiB + 256);
	for (unsigned i = 1; i < 16; i++) {
		uint64_t align = 1ull << (8 + i % 14);

		b[i] = alloc_ok(pool, 1, i * 37 * GiB + i * 999, align);
		assert_int_equal(pool_block_offset(b[i]) % align, 0);
	}
	free_ok(pool, b[0]);
	b[0] = alloc_ok(pool, 1, 3ull << 50, 0);
	assert_int_equal(pool_slab_size(pool_block_slab(b[0])), 3ull << 50);
	/* The largest slab there may be, with a free tail of 2 MiB - 256. */
	free_ok(pool, alloc_ok(pool, 1, POOL_MAX_SLAB - 2 * MiB + 1, 0));
	for (unsigned i = 0; i < 16; i += 2)
		free_ok(pool, b[i]);
	for (unsigned i = 1; i < 16; i += 2)
		free_ok(pool, b[i]);
	assert_int_equal(stats_of(pool).largest_free, 1ull << 40);
	pool_destroy(pool);
	fake_fini(&f);
}

/* Many live blocks: the splits and merges stay consistent at scale. */
static void test_many_blocks(void **state)
{
	enum { N = 100000 };
	struct fake f = {0};
	struct pool *pool = pool_new(&f, 16 * MiB, 0, 1);
	struct pool_block **b = calloc(N, sizeof(*b));
	uint64_t x = 88172645463325252ull;

	(void)state;
	assert_non_null(b);
	for (unsigned i = 0; i < N; i++) {
		assert_int_equal(pool_alloc(pool, 1, 256 * (1 + i % 7), 0, &b[i]), 0);
	}
	check_pool(pool);
	for (unsigned i = N - 1; i > 0; i--) { /* free in shuffled order */
		unsigned j;
		struct pool_block *t;

		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		j = x % (i + 1);
		t = b[i], b[i] = b[j], b[j] = t;
	}
	for (unsigned i = 0; i < N; i++)
		pool_free(pool, b[i]);
	check_pool(pool);
	assert_int_equal(stats_of(pool).slabs, 1);
	assert_int_equal(stats_of(pool).free_blocks, 1);
	free(b);
	pool_destroy(pool);
	fake_fini(&f);
}

static void test_check_message(void **state)
{
	char msg[64] = "";

	(void)state;
	assert_int_equal(pool_check(NULL, msg, sizeof(msg)), -EFAULT);
	assert_true(msg[0] != '\0');
	assert_int_equal(pool_check(NULL, NULL, 0), -EFAULT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_create_defaults),
	    cmocka_unit_test(test_create_config),
	    cmocka_unit_test(test_alloc_invalid),
	    cmocka_unit_test(test_rounding),
	    cmocka_unit_test(test_alignment),
	    cmocka_unit_test(test_split),
	    cmocka_unit_test(test_coalesce_orders),
	    cmocka_unit_test(test_fit_exact_hole),
	    cmocka_unit_test(test_same_class_ranges),
	    cmocka_unit_test(test_stats_exact),
	    cmocka_unit_test(test_peak),
	    cmocka_unit_test(test_huge_sizes),
	    cmocka_unit_test(test_many_blocks),
	    cmocka_unit_test(test_check_message),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
