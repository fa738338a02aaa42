/*
 * test-arena.c - unit tests of the fixed-size object arena (pool/arena.c):
 * objects and their indices, zeroing, chunk reuse and release, reserve, the
 * index limit, and the inline forms against the functions.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "arena.h"

struct obj32 {
	uint64_t a, b, c, d;
};

static void check_arena(const struct arena *a)
{
	assert_int_equal(arena_check(a), 0);
}

static bool all_zero(const void *p, size_t n)
{
	const unsigned char *c = p;

	for (size_t i = 0; i < n; i++) {
		if (c[i])
			return false;
	}
	return true;
}

/* Objects, their indices and their arena agree, across several chunks. */
static void test_objects_and_indices(void **state)
{
	static const size_t sizes[] = {8, 32, 56, 64, 100, 4096};
	enum { N = 5000 };
	void **p = calloc(N, sizeof(*p));
	uint32_t *idx = calloc(N, sizeof(*idx));

	(void)state;
	assert_true(p && idx);
	for (unsigned k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		struct arena a;
		size_t size = (sizes[k] + 7) & ~(size_t)7;

		arena_init(&a, sizes[k], 32);
		for (unsigned i = 0; i < N; i++) {
			p[i] = arena_alloc(&a, &idx[i]);
			assert_non_null(p[i]);
			assert_true(idx[i] != 0);
			assert_true(all_zero(p[i], size));
			assert_ptr_equal(arena_at(&a, idx[i]), p[i]);
			assert_int_equal(arena_index(&a, p[i]), idx[i]);
			assert_ptr_equal(arena_of(p[i]), &a);
			memset(p[i], 0xa5, size);
		}
		assert_int_equal(a.live, N);
		assert_true(a.nchunks >= (uint64_t)N * size / ARENA_CHUNK);
		check_arena(&a);
		/* No two objects overlap: each still holds its own pattern
		 * after its neighbours were written. */
		for (unsigned i = 0; i < N; i++) {
			assert_int_equal(((unsigned char *)p[i])[0], 0xa5);
			assert_int_equal(((unsigned char *)p[i])[size - 1], 0xa5);
		}
		for (unsigned i = 0; i < N; i++)
			arena_free(&a, p[i]);
		assert_int_equal(a.live, 0);
		/* Only the one empty chunk kept. */
		assert_int_equal(a.nchunks, 1);
		check_arena(&a);
		arena_finish(&a);
		assert_int_equal(a.nchunks, 0);
	}
	free(p);
	free(idx);
}

/* A freed slot is the next one handed out, zeroed again. */
static void test_reuse(void **state)
{
	struct arena a;
	struct obj32 *x, *y, *z;
	uint32_t ix, iy, iz;

	(void)state;
	arena_init(&a, sizeof(struct obj32), 32);
	x = arena_alloc(&a, &ix);
	y = arena_alloc(&a, &iy);
	assert_true(x && y && ix != iy);
	y->a = 42;
	arena_free_index(&a, iy, y);
	check_arena(&a);
	z = arena_alloc(&a, &iz);
	assert_ptr_equal(z, y);
	assert_int_equal(iz, iy);
	assert_int_equal(z->a, 0);
	arena_free(&a, NULL);
	arena_free(&a, x);
	arena_free(&a, z);
	check_arena(&a);
	arena_finish(&a);
}

/* Chunks go back as they empty, except one; survivors keep theirs. */
static void test_release(void **state)
{
	struct arena a;
	enum { N = 20000 };
	void **p = calloc(N, sizeof(*p));
	uint32_t chunks;

	(void)state;
	assert_non_null(p);
	arena_init(&a, 32, 32);
	for (unsigned i = 0; i < N; i++)
		p[i] = arena_alloc(&a, NULL);
	chunks = a.nchunks;
	assert_true(chunks >= N * 32 / ARENA_CHUNK);
	/* Keep every 4096th: the chunks that hold one stay. */
	for (unsigned i = 0; i < N; i++) {
		if (i % 4096) {
			arena_free(&a, p[i]);
			p[i] = NULL;
		}
	}
	check_arena(&a);
	assert_int_equal(a.live, (N + 4095) / 4096);
	assert_true(a.nchunks <= a.live + 1);
	assert_true(a.nchunks < chunks);
	/* Numbers of released chunks are used again. */
	for (unsigned i = 0; i < N; i++) {
		if (!p[i])
			p[i] = arena_alloc(&a, NULL);
	}
	assert_int_equal(a.nchunks, chunks);
	check_arena(&a);
	arena_finish(&a);
	free(p);
}

/* After arena_reserve(n), n allocations succeed without a new chunk. */
static void test_reserve(void **state)
{
	struct arena a;
	uint32_t chunks;

	(void)state;
	arena_init(&a, 64, 32);
	assert_int_equal(arena_reserve(&a, 0), 0);
	assert_int_equal(a.nchunks, 0);
	assert_int_equal(arena_reserve(&a, 3000), 0);
	assert_true(a.nfree >= 3000);
	chunks = a.nchunks;
	for (unsigned i = 0; i < 3000; i++)
		assert_non_null(arena_alloc(&a, NULL));
	assert_int_equal(a.nchunks, chunks);
	check_arena(&a);
	arena_finish(&a);
}

/* Indices stay below 2^index_bits: beyond, allocation fails cleanly. */
static void test_index_limit(void **state)
{
	struct arena a;
	unsigned n = 0;
	uint32_t i;

	(void)state;
	/* 4096-byte objects: 16 slots a chunk, the first for the head, so
	 * 5 bits of index are two chunks of 15 objects. */
	arena_init(&a, 4096, 5);
	while (arena_alloc(&a, &i)) {
		assert_true(i < 32);
		n++;
	}
	assert_int_equal(n, 30);
	assert_int_equal(arena_reserve(&a, 1), -ENOMEM);
	check_arena(&a);
	arena_finish(&a);
}

/* The inline forms do what the functions do. */
static void test_sized(void **state)
{
	enum { N = 10000 };
	struct arena a, b;
	struct obj32 **pa = calloc(N, sizeof(*pa)), **pb = calloc(N, sizeof(*pb));
	uint32_t *ia = calloc(N, sizeof(*ia)), *ib = calloc(N, sizeof(*ib));
	uint64_t x = 88172645463325252ull;

	(void)state;
	assert_true(pa && pb && ia && ib);
	arena_init(&a, sizeof(struct obj32), 32);
	arena_init(&b, sizeof(struct obj32), 32);
	for (unsigned round = 0; round < 20; round++) {
		for (unsigned i = 0; i < N; i++) {
			if (pa[i])
				continue;
			pa[i] = arena_alloc_sized(&a, &ia[i], sizeof(struct obj32));
			pb[i] = arena_alloc(&b, &ib[i]);
			assert_true(pa[i] && pb[i]);
			assert_int_equal(ia[i], ib[i]);
			assert_true(all_zero(pa[i], sizeof(struct obj32)));
			pa[i]->a = pb[i]->a = i;
		}
		for (unsigned i = 0; i < N; i++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			if (x % 3 == 0) {
				arena_free_sized(&a, ia[i], pa[i], sizeof(struct obj32));
				arena_free_index(&b, ib[i], pb[i]);
				pa[i] = pb[i] = NULL;
			}
		}
		check_arena(&a);
		check_arena(&b);
		assert_int_equal(a.live, b.live);
		assert_int_equal(a.nchunks, b.nchunks);
	}
	for (unsigned i = 0; i < N; i++)
		assert_true(!pa[i] || pa[i]->a == i);
	arena_finish(&a);
	arena_finish(&b);
	free(pa);
	free(pb);
	free(ia);
	free(ib);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_objects_and_indices),
	    cmocka_unit_test(test_reuse),
	    cmocka_unit_test(test_release),
	    cmocka_unit_test(test_reserve),
	    cmocka_unit_test(test_index_limit),
	    cmocka_unit_test(test_sized),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
