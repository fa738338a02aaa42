/*
 * test-pool.c - unit tests of the device memory sub-allocator (daemon/pool.c).
 *
 * The backend is a fake that hands out bookkeeping records instead of memory,
 * so device capacity is whatever a test says, errors can be injected, and at
 * the end every slab it created must have been destroyed exactly once.
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

#define KiB (UINT64_C(1) << 10)
#define MiB (UINT64_C(1) << 20)
#define GiB (UINT64_C(1) << 30)

#define FAKE_MAGIC 0x51ab51ab51ab51abull

struct fake_slab {
	uint64_t magic;
	uint64_t size;
	uint32_t uid;
	bool alive;
};

struct fake {
	uint64_t capacity; /* 0: unlimited */
	uint64_t in_use;
	unsigned calls;    /* create calls, failed ones included */
	unsigned creates;  /* slabs created */
	unsigned destroys; /* slabs destroyed */
	unsigned enomem;   /* -ENOMEM answers for want of capacity */
	int fail_err;      /* the next fail_times calls fail with fail_err */
	unsigned fail_times;
	uint64_t last_size;
	uint32_t last_uid;
	struct fake_slab **all;
	unsigned nall, cap;
};

static int fake_create(void *ctx, uint64_t size, uint32_t uid, void **slab)
{
	struct fake *f = ctx;
	struct fake_slab *s;

	f->calls++;
	if (f->fail_times) {
		f->fail_times--;
		return f->fail_err;
	}
	if (f->capacity && f->in_use + size > f->capacity) {
		f->enomem++;
		return -ENOMEM;
	}
	s = calloc(1, sizeof(*s));
	assert_non_null(s);
	if (f->nall == f->cap) {
		f->cap = f->cap ? 2 * f->cap : 64;
		f->all = realloc(f->all, f->cap * sizeof(*f->all));
		assert_non_null(f->all);
	}
	f->all[f->nall++] = s;
	*s = (struct fake_slab){.magic = FAKE_MAGIC, .size = size, .uid = uid, .alive = true};
	f->in_use += size;
	f->creates++;
	f->last_size = size;
	f->last_uid = uid;
	*slab = s;
	return 0;
}

static void fake_destroy(void *ctx, void *slab)
{
	struct fake *f = ctx;
	struct fake_slab *s = slab;

	assert_int_equal(s->magic, FAKE_MAGIC);
	assert_true(s->alive); /* destroyed twice? */
	s->alive = false;
	f->in_use -= s->size;
	f->destroys++;
}

static const struct pool_slab_ops fake_ops = {.create = fake_create, .destroy = fake_destroy};

static unsigned fake_live(const struct fake *f)
{
	return f->creates - f->destroys;
}

/* Every slab ever created has been destroyed exactly once. */
static void fake_fini(struct fake *f)
{
	assert_int_equal(f->creates, f->destroys);
	assert_int_equal(f->in_use, 0);
	for (unsigned i = 0; i < f->nall; i++) {
		assert_false(f->all[i]->alive);
		free(f->all[i]);
	}
	free(f->all);
	memset(f, 0, sizeof(*f));
}

static struct fake_slab *fake_of(const struct pool_slab *slab)
{
	struct fake_slab *s = pool_slab_backend(slab);

	assert_int_equal(s->magic, FAKE_MAGIC);
	assert_true(s->alive);
	return s;
}

static void check_pool(const struct pool *pool)
{
	char msg[256] = "";

	if (pool_check(pool, msg, sizeof(msg)))
		fail_msg("pool_check: %s", msg);
}

static struct pool *pool_new(struct fake *f, uint64_t slab, uint64_t thr, unsigned keep)
{
	struct pool_config cfg = {.slab_size = slab, .large_threshold = thr, .keep_empty = keep};
	struct pool *pool = pool_create(&cfg, &fake_ops, f);

	assert_non_null(pool);
	return pool;
}

static struct pool_block *alloc_ok(struct pool *pool, uint32_t uid, uint64_t size, uint64_t align)
{
	struct pool_block *b = NULL;
	int rc = pool_alloc(pool, uid, size, align, &b);

	if (rc)
		fail_msg("pool_alloc(%u, %" PRIu64 ", %" PRIu64 ") = %d", uid, size, align, rc);
	assert_non_null(b);
	check_pool(pool);
	return b;
}

static void free_ok(struct pool *pool, struct pool_block *b)
{
	pool_free(pool, b);
	check_pool(pool);
}

static struct pool_stats stats_of(const struct pool *pool)
{
	struct pool_stats st;

	pool_get_stats(pool, &st);
	return st;
}

static void test_create_defaults(void **state)
{
	struct fake f = {0};
	struct pool *pool = pool_create(NULL, &fake_ops, &f);
	struct pool_block *a, *b, *c;

	(void)state;
	assert_non_null(pool);
	a = alloc_ok(pool, 7, 1, 0);
	assert_int_equal(f.last_size, POOL_DEFAULT_SLAB);
	assert_int_equal(f.last_uid, 7);
	assert_int_equal(pool_slab_size(pool_block_slab(a)), POOL_DEFAULT_SLAB);
	/* Exactly the threshold (slab / 2) is still a standard request. */
	b = alloc_ok(pool, 7, POOL_DEFAULT_SLAB / 2, 0);
	assert_ptr_equal(pool_block_slab(b), pool_block_slab(a));
	assert_int_equal(f.creates, 1);
	/* One byte more gets a dedicated slab rounded up to 2 MiB. */
	c = alloc_ok(pool, 7, POOL_DEFAULT_SLAB / 2 + 1, 0);
	assert_int_equal(f.creates, 2);
	assert_int_equal(pool_slab_size(pool_block_slab(c)), POOL_DEFAULT_SLAB / 2 + 2 * MiB);
	assert_int_equal(pool_block_offset(c), 0);
	free_ok(pool, a);
	free_ok(pool, b);
	free_ok(pool, c);
	/* keep_empty defaults to 1: the standard slab stays, the dedicated goes. */
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
	a = alloc_ok(pool, 1, POOL_DEFAULT_SLAB / 2 + 1, 0);
	assert_int_equal(f.last_size, POOL_DEFAULT_SLAB / 2 + 2 * MiB);
	free_ok(pool, a);
	pool_destroy(pool);

	/* threshold 0 is slab / 2; keep_empty 0 caches nothing. */
	pool = pool_new(&f, 8 * MiB, 0, 0);
	a = alloc_ok(pool, 1, 4 * MiB, 0);
	assert_int_equal(f.last_size, 8 * MiB);
	b = alloc_ok(pool, 1, 4 * MiB + 1, 0);
	assert_int_equal(f.last_size, 6 * MiB);
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
	std = alloc_ok(pool, 1, 2 * MiB, 0); /* == threshold: standard */
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
	al = alloc_ok(pool, 1, 3 * MiB, POOL_MAX_ALIGNMENT);
	assert_int_equal(pool_block_offset(al), 0);
	assert_int_equal(f.last_size, 4 * MiB);
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

/*
 * Randomized test against a reference model: the model is the list of live
 * blocks (and pins) the test believes in; after every operation the pool must
 * agree with it, and every few operations the free ranges the pool reports
 * must be exactly the gaps between the model's blocks.
 */
#define NUIDS 4

struct mblock {
	struct pool_block *b;
	struct pool_slab *slab;
	uint64_t off, size;
	unsigned u;
};

struct model {
	const struct pool_config *cfg;
	uint64_t capacity, threshold;
	struct mblock *v, *sorted; /* sorted: scratch, so that v's order (and
	                            * thus a seed's run) never depends on addresses */
	unsigned n;
	struct pool_slab **pinned;
	unsigned npinned;
	uint64_t used, uid_used[NUIDS], ooms, eio;
	uint64_t rng;
};

static uint64_t rng_next(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545f4914f6cdd1dull;
}

static int mblock_cmp(const void *pa, const void *pb)
{
	const struct mblock *a = pa, *b = pb;

	if (a->slab != b->slab)
		return (uintptr_t)a->slab < (uintptr_t)b->slab ? -1 : 1;
	return a->off < b->off ? -1 : a->off > b->off;
}

static bool model_has_slab(const struct model *m, const struct pool_slab *slab)
{
	struct mblock key = {.slab = (struct pool_slab *)slab};
	unsigned lo = 0, hi = m->n;

	while (lo < hi) { /* find the first >= key */
		unsigned mid = (lo + hi) / 2;

		if (mblock_cmp(&m->sorted[mid], &key) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < m->n && m->sorted[lo].slab == slab;
}

/* The slow, exact comparison. `no_idle`: an -ENOMEM or a full trim has just
 * released every empty unpinned slab, so no cache may be left. */
static void model_verify(const struct pool *pool, struct model *m, bool no_idle)
{
	uint64_t reserved = 0, gaps = 0, largest = 0, known = 0, cached;
	struct pool_stats st = stats_of(pool);
	const struct mblock *v = m->sorted;

	memcpy(m->sorted, m->v, m->n * sizeof(*v));
	qsort(m->sorted, m->n, sizeof(*v), mblock_cmp);
	for (unsigned i = 0; i < m->n;) {
		struct pool_slab *slab = v[i].slab;
		uint64_t end = 0, size = pool_slab_size(slab);

		for (; i < m->n && v[i].slab == slab; i++) {
			if (v[i].off < end)
				fail_msg("blocks overlap at %" PRIu64 " in a slab", v[i].off);
			if (v[i].off > end) {
				gaps++;
				largest = v[i].off - end > largest ? v[i].off - end : largest;
			}
			end = v[i].off + v[i].size;
		}
		if (end < size) {
			gaps++;
			largest = size - end > largest ? size - end : largest;
		}
		reserved += size;
		known++;
	}
	/* Pinned slabs without live blocks are one free range each. */
	for (unsigned i = 0; i < m->npinned; i++) {
		struct pool_slab *s = m->pinned[i];
		bool dup = false;

		for (unsigned k = 0; k < i; k++)
			dup |= m->pinned[k] == s;
		if (dup || model_has_slab(m, s))
			continue;
		reserved += pool_slab_size(s);
		gaps++;
		largest = pool_slab_size(s) > largest ? pool_slab_size(s) : largest;
		known++;
	}
	/* Whatever else the pool holds is cache: empty standard slabs. */
	assert_true(st.slabs >= known);
	cached = st.slabs - known;
	assert_true(cached <= (uint64_t)m->cfg->keep_empty * NUIDS);
	if (no_idle)
		assert_int_equal(cached, 0);
	if (cached && m->cfg->slab_size > largest)
		largest = m->cfg->slab_size;
	assert_int_equal(st.reserved, reserved + cached * m->cfg->slab_size);
	assert_int_equal(st.free_blocks, gaps + cached);
	assert_int_equal(st.largest_free, largest);
}

/* The cheap comparison, after every operation. */
static void model_check(const struct pool *pool, const struct fake *f, const struct model *m)
{
	struct pool_stats st = stats_of(pool);

	check_pool(pool);
	assert_int_equal(st.used, m->used);
	assert_int_equal(st.live, m->n);
	assert_int_equal(st.free, st.reserved - st.used);
	assert_int_equal(st.reserved, f->in_use);
	assert_int_equal(st.slabs, fake_live(f));
	assert_int_equal(st.ooms, m->ooms);
	assert_int_equal(st.allocs - st.frees, st.live);
	assert_true(st.peak >= st.used);
	for (unsigned u = 0; u < NUIDS; u++)
		assert_int_equal(pool_uid_used(pool, 1000 + u), m->uid_used[u]);
}

static void model_alloc(struct pool *pool, struct fake *f, struct model *m)
{
	unsigned u = rng_next(&m->rng) % NUIDS, k = rng_next(&m->rng) % 23;
	uint64_t size = (1ull << k) + rng_next(&m->rng) % (1ull << k); /* 1 B .. 8 MiB */
	uint64_t align = rng_next(&m->rng) % 2 ? 0 : 1ull << (rng_next(&m->rng) % 22);
	uint64_t rsize = (size + 255) / 256 * 256, a = align > 256 ? align : 256;
	bool armed = rng_next(&m->rng) % 100 == 0;
	struct pool_block *b = NULL;
	struct mblock *nb;
	unsigned calls = f->calls;
	int rc;

	if (armed) {
		f->fail_err = -EIO;
		f->fail_times = 1;
	}
	rc = pool_alloc(pool, 1000 + u, size, align, &b);
	/* The injected error surfaces exactly when a slab was asked for. */
	assert_int_equal(rc == -EIO, armed && !f->fail_times);
	f->fail_times = 0;
	if (rc == -EIO) {
		m->eio++;
		return;
	}
	if (rc == -ENOMEM) {
		uint64_t need = size > m->threshold ? (rsize + 2 * MiB - 1) / (2 * MiB) * (2 * MiB)
		                                    : m->cfg->slab_size;

		m->ooms++;
		assert_int_equal(f->calls, calls + 2);
		assert_true(f->in_use + need > m->capacity);
		model_check(pool, f, m);
		model_verify(pool, m, true);
		return;
	}
	assert_int_equal(rc, 0);
	assert_int_equal(pool_block_size(b), rsize);
	assert_int_equal(pool_block_offset(b) % a, 0);
	assert_true(pool_block_offset(b) + rsize <= pool_slab_size(pool_block_slab(b)));
	assert_int_equal(pool_slab_uid(pool_block_slab(b)), 1000 + u);
	assert_int_equal(fake_of(pool_block_slab(b))->uid, 1000 + u);
	assert_int_equal(fake_of(pool_block_slab(b))->size, pool_slab_size(pool_block_slab(b)));
	for (unsigned i = 0; i < m->n; i++) {
		const struct mblock *o = &m->v[i];

		if (o->slab == pool_block_slab(b) && o->off < pool_block_offset(b) + rsize &&
		    pool_block_offset(b) < o->off + o->size)
			fail_msg("new block [%" PRIu64 ", +%" PRIu64 ") overlaps a live one",
			         pool_block_offset(b), rsize);
	}
	nb = &m->v[m->n++];
	*nb = (struct mblock){
	    .b = b, .slab = pool_block_slab(b), .off = pool_block_offset(b), .size = rsize, .u = u};
	m->used += rsize;
	m->uid_used[u] += rsize;
}

static void model_free(struct pool *pool, struct model *m, unsigned i)
{
	m->used -= m->v[i].size;
	m->uid_used[m->v[i].u] -= m->v[i].size;
	pool_free(pool, m->v[i].b);
	m->v[i] = m->v[--m->n];
}

static void model_unpin(struct pool *pool, struct model *m, unsigned i)
{
	pool_slab_unpin(pool, m->pinned[i]);
	m->pinned[i] = m->pinned[--m->npinned];
}

static void model_run(const struct pool_config *cfg, uint64_t capacity, unsigned ops, uint64_t seed)
{
	struct fake f = {.capacity = capacity};
	struct pool *pool = pool_create(cfg, &fake_ops, &f);
	struct model m = {.cfg = cfg, .capacity = capacity, .rng = seed};
	struct pool_stats st;
	unsigned trims = 0;

	assert_non_null(pool);
	m.threshold = cfg->large_threshold ? cfg->large_threshold : cfg->slab_size / 2;
	m.v = calloc(ops, sizeof(*m.v));
	m.sorted = calloc(ops, sizeof(*m.sorted));
	m.pinned = calloc(ops, sizeof(*m.pinned));
	assert_true(m.v && m.sorted && m.pinned);
	for (unsigned op = 0; op < ops; op++) {
		/* Phases of growth (into -ENOMEM) and of draining, so that
		 * slabs keep emptying, going back and being made again. */
		unsigned r = rng_next(&m.rng) % 100, grow = (op / 1000) % 2 ? 25 : 55;
		bool no_idle = false;

		if (r < grow) {
			model_alloc(pool, &f, &m);
		} else if (r < 90) {
			if (m.n)
				model_free(pool, &m, rng_next(&m.rng) % m.n);
		} else if (r < 94) {
			if (m.n) {
				struct pool_slab *s = m.v[rng_next(&m.rng) % m.n].slab;

				pool_slab_pin(s);
				m.pinned[m.npinned++] = s;
			}
		} else if (r < 98) {
			if (m.npinned)
				model_unpin(pool, &m, rng_next(&m.rng) % m.npinned);
		} else {
			uint64_t before = fake_live(&f);
			bool all = rng_next(&m.rng) % 2;
			unsigned n = pool_trim(pool, 1000 + rng_next(&m.rng) % NUIDS, all);

			assert_int_equal(fake_live(&f), before - n);
			no_idle = all;
			trims += n;
		}
		model_check(pool, &f, &m);
		if (no_idle || op % 16 == 0)
			model_verify(pool, &m, no_idle);
	}
	while (m.npinned)
		model_unpin(pool, &m, m.npinned - 1);
	while (m.n)
		model_free(pool, &m, rng_next(&m.rng) % m.n);
	model_check(pool, &f, &m);
	model_verify(pool, &m, false);
	st = stats_of(pool);
	print_message("  slab %" PRIu64 " MiB, keep %u: %" PRIu64 " allocs, %" PRIu64
	              " ooms, %" PRIu64
	              " injected errors, %u slabs created, %u trimmed, peak %" PRIu64 " MiB\n",
	              cfg->slab_size / MiB, cfg->keep_empty, st.allocs, st.ooms, m.eio, f.creates,
	              trims, st.peak / MiB);
	/* Pressure was real, and everything but the cache went back. */
	assert_true(st.ooms > 0 && m.eio > 0 && st.allocs > ops / 4);
	assert_true(st.slabs <= (uint64_t)cfg->keep_empty * NUIDS);
	assert_int_equal(st.reserved, st.slabs * cfg->slab_size);
	assert_int_equal(st.free_blocks, st.slabs);
	assert_int_equal(pool_trim(pool, 0, true), st.slabs);
	assert_int_equal(fake_live(&f), 0);
	/* And destroy returns what is live at the time. */
	for (unsigned i = 0; i < 50; i++)
		model_alloc(pool, &f, &m);
	pool_destroy(pool);
	free(m.v);
	free(m.sorted);
	free(m.pinned);
	fake_fini(&f);
}

static void test_random_model(void **state)
{
	static const struct {
		struct pool_config cfg;
		uint64_t capacity;
		unsigned ops;
	} runs[] = {
	    {{4 * MiB, 0, 1}, 40 * MiB, 20000},
	    {{2 * MiB, 2 * MiB, 0}, 24 * MiB, 15000},
	    {{8 * MiB, 1 * MiB, 2}, 64 * MiB, 15000},
	};
	const char *env = getenv("GPB_TEST_SEED");
	uint64_t seed = env ? strtoull(env, NULL, 0) : 0x9e3779b97f4a7c15ull;

	(void)state;
	print_message("test_random_model: seed %#" PRIx64 " (set GPB_TEST_SEED to change)\n", seed);
	for (unsigned i = 0; i < sizeof(runs) / sizeof(runs[0]); i++)
		model_run(&runs[i].cfg, runs[i].capacity, runs[i].ops, seed + i);
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
	    cmocka_unit_test(test_exhaustion_oom),
	    cmocka_unit_test(test_enomem_trim_retry),
	    cmocka_unit_test(test_uid_isolation),
	    cmocka_unit_test(test_dedicated_slab),
	    cmocka_unit_test(test_cache_keep_empty),
	    cmocka_unit_test(test_pins),
	    cmocka_unit_test(test_trim),
	    cmocka_unit_test(test_stats_exact),
	    cmocka_unit_test(test_peak),
	    cmocka_unit_test(test_create_errors),
	    cmocka_unit_test(test_destroy_with_live),
	    cmocka_unit_test(test_huge_sizes),
	    cmocka_unit_test(test_many_blocks),
	    cmocka_unit_test(test_check_message),
	    cmocka_unit_test(test_random_model),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
