/*
 * test-policy-chunk.c - unit tests of the VRAM policy engine
 * (daemon/policy/policy.c): chunking along the run axis, its refusals and its
 * warning, the granule, and the chunk count against a linear search.
 *
 * Chunking is pure arithmetic: these tests need no policy.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "policy.h"

/* ---- chunking -------------------------------------------------------------------- */

static struct policy_array arr2(uint64_t runs, uint64_t width, uint64_t elem, bool unchunkable)
{
	struct policy_array a = {.ndim = 2, .elem_size = elem, .axis = 0};
	a.shape[0] = runs;
	a.shape[1] = width;
	a.unchunkable = unchunkable;
	return a;
}

static void test_chunk_fits(void **state)
{
	struct policy_chunking c;
	struct policy_array a[2] = {arr2(1000, 10, 8, false), arr2(1000, 1, 4, false)};
	(void)state;
	assert_int_equal(policy_chunk_parameters(a, 2, 0, 1 << 20, 256, &c), 0);
	assert_int_equal(c.axis_length, 1000);
	assert_int_equal(c.chunks, 1);
	assert_int_equal(c.chunk_length, 1000);
	/* Each array rounded up to the granule on its own. */
	assert_int_equal(c.request_bytes, 80128 + 4096);
	assert_int_equal(c.chunk_bytes, c.request_bytes);
	assert_int_equal(c.warn, 0);
	/* Exactly available still fits; a byte less does not. */
	assert_int_equal(policy_chunk_parameters(a, 2, 0, 84224, 256, &c), 0);
	assert_int_equal(c.chunks, 1);
	assert_int_equal(policy_chunk_parameters(a, 2, 0, 84223, 256, &c), 0);
	assert_int_equal(c.chunks, 2);
	assert_int_equal(c.chunk_length, 500);
}

static void test_chunk_split(void **state)
{
	struct policy_chunking c;
	uint64_t shape[POLICY_MAX_DIMS];
	/* 1000 runs x 1000 doubles = 8 MB; a 1 MB constant table; 2.5 MB free. */
	struct policy_array a[2] = {arr2(1000, 1000, 8, false), arr2(1000, 125, 8, true)};
	(void)state;
	assert_int_equal(policy_chunk_parameters(a, 2, 0, 2500000, 1, &c), 0);
	assert_int_equal(c.request_bytes, 9000000);
	/* 1.5 MB for the chunkable part: 187 runs per chunk at most. */
	assert_int_equal(c.chunks, 6);
	assert_int_equal(c.chunk_length, 167);
	assert_int_equal(c.chunk_bytes, 167 * 8000 + 1000000);
	assert_true(c.chunk_bytes <= 2500000);
	policy_chunked_shape(&a[0], c.chunk_length, shape);
	assert_int_equal(shape[0], 167);
	assert_int_equal(shape[1], 1000);
	assert_int_equal(shape[2], 0);
	policy_chunked_shape(&a[1], c.chunk_length, shape);
	assert_int_equal(shape[0], 1000);
	assert_int_equal(shape[1], 125);
	/* A shorter run axis than the chunk is not stretched. */
	struct policy_array short_a = arr2(50, 3, 4, false);
	policy_chunked_shape(&short_a, 167, shape);
	assert_int_equal(shape[0], 50);
	/* An explicit axis length, and a run axis that is not the first. */
	struct policy_array b = {.ndim = 3, .elem_size = 4, .axis = 2, .shape = {3, 4, 100}};
	/* 48 bytes a run: 35 runs fit 1700 bytes, so 3 chunks of 34. */
	assert_int_equal(policy_chunk_parameters(&b, 1, 100, 1700, 1, &c), 0);
	assert_int_equal(c.chunks, 3);
	assert_int_equal(c.chunk_length, 34);
	policy_chunked_shape(&b, c.chunk_length, shape);
	assert_int_equal(shape[0], 3);
	assert_int_equal(shape[1], 4);
	assert_int_equal(shape[2], 34);
}

/* compute_chunked_shapes(requests, chunk_size): a chunk length given. */
static void test_chunk_fixed(void **state)
{
	struct policy_chunking c;
	struct policy_array a[2] = {arr2(1000, 1000, 8, false), arr2(1000, 125, 8, true)};
	(void)state;
	assert_int_equal(policy_chunk_fixed(a, 2, 0, 300, 1, &c), 0);
	assert_int_equal(c.axis_length, 1000);
	assert_int_equal(c.chunk_length, 300);
	assert_int_equal(c.chunks, 4); /* 300, 300, 300, 100 */
	assert_int_equal(c.request_bytes, 9000000);
	assert_int_equal(c.chunk_bytes, 300 * 8000 + 1000000);
	assert_int_equal(c.available, 0);
	assert_int_equal(c.warn, 0);
	/* Longer than the axis: one chunk of the whole axis. */
	assert_int_equal(policy_chunk_fixed(a, 2, 0, 5000, 1, &c), 0);
	assert_int_equal(c.chunk_length, 1000);
	assert_int_equal(c.chunks, 1);
	assert_int_equal(c.chunk_bytes, c.request_bytes);
	/* An explicit axis length; granules round each array. */
	assert_int_equal(policy_chunk_fixed(a, 2, 10, 3, 256, &c), 0);
	assert_int_equal(c.chunks, 4);
	assert_int_equal(c.chunk_bytes, 24064 + 1000192);
	/* Refusals: no length, no arrays, a malformed one. */
	assert_int_equal(policy_chunk_fixed(a, 2, 0, 0, 1, &c), -EINVAL);
	assert_int_equal(policy_chunk_fixed(a, 0, 0, 10, 1, &c), -EINVAL);
	struct policy_array bad = arr2(10, 1, 0, false);
	assert_int_equal(policy_chunk_fixed(&bad, 1, 0, 10, 1, &c), -EINVAL);
}

static void test_chunk_refusals(void **state)
{
	struct policy_chunking c;
	struct policy_array a[2] = {arr2(100, 10, 8, false), arr2(10, 10, 8, true)};
	struct policy_array bad;
	uint64_t bytes;
	(void)state;
	/* The unchunkable array alone exceeds the memory. */
	assert_int_equal(policy_chunk_parameters(a, 2, 0, 799, 1, &c), -ENOMEM);
	/* One run plus the table: 80 + 800. */
	assert_int_equal(policy_chunk_parameters(a, 2, 0, 879, 1, &c), -ENOMEM);
	assert_int_equal(policy_chunk_parameters(a, 2, 0, 880, 1, &c), 0);
	assert_int_equal(c.chunks, 100);
	assert_int_equal(c.chunk_length, 1);
	assert_int_equal(policy_chunk_parameters(a, 2, 0, 0, 1, &c), -ENOMEM);
	assert_true(c.warn & POLICY_WARN_OVERSIZED);
	assert_int_equal(policy_chunk_parameters(a, 0, 0, 1000, 1, &c), -EINVAL);
	assert_int_equal(policy_chunk_parameters(NULL, 1, 0, 1000, 1, &c), -EINVAL);
	bad = arr2(10, 10, 0, false);
	assert_int_equal(policy_chunk_parameters(&bad, 1, 0, 1000, 1, &c), -EINVAL);
	bad = arr2(10, 0, 4, false);
	assert_int_equal(policy_chunk_parameters(&bad, 1, 0, 1000, 1, &c), -EINVAL);
	bad = arr2(10, 10, 4, false);
	bad.axis = 2;
	assert_int_equal(policy_chunk_parameters(&bad, 1, 0, 1000, 1, &c), -EINVAL);
	bad.axis = 0;
	bad.ndim = 0;
	assert_int_equal(policy_chunk_parameters(&bad, 1, 0, 1000, 1, &c), -EINVAL);
	bad.ndim = POLICY_MAX_DIMS + 1;
	assert_int_equal(policy_chunk_parameters(&bad, 1, 0, 1000, 1, &c), -EINVAL);
	assert_int_equal(policy_array_bytes(&bad, 1, &bytes), -EINVAL);
	/* 64-bit overflow in the product, in the sum, and in the rounding. */
	bad = arr2(1ull << 40, 1ull << 30, 8, false);
	assert_int_equal(policy_chunk_parameters(&bad, 1, 0, 1000, 1, &c), -EOVERFLOW);
	assert_int_equal(policy_array_bytes(&bad, 1, &bytes), -EOVERFLOW);
	struct policy_array two[2] = {arr2(1ull << 31, 1ull << 30, 4, false),
	                              arr2(1ull << 31, 1ull << 30, 4, false)};
	assert_int_equal(policy_chunk_parameters(two, 2, 0, 1000, 1, &c), -EOVERFLOW);
	bad = arr2(UINT64_MAX, 1, 1, false);
	assert_int_equal(policy_array_bytes(&bad, 256, &bytes), -EOVERFLOW);
	assert_int_equal(policy_array_bytes(&bad, 1, &bytes), 0);
	assert_int_equal(bytes, UINT64_MAX);
	/* Only unchunkable arrays: they fit or they do not. */
	struct policy_array u = arr2(10, 10, 1, true);
	assert_int_equal(policy_chunk_parameters(&u, 1, 0, 100, 1, &c), 0);
	assert_int_equal(c.chunks, 1);
	assert_int_equal(c.axis_length, 1);
	assert_int_equal(policy_chunk_parameters(&u, 1, 0, 99, 1, &c), -ENOMEM);
}

static void test_chunk_warning(void **state)
{
	struct policy_chunking c;
	struct policy_array a = arr2(10000, 1, 1, false);
	(void)state;
	/* 20x is fine; more than 20x warns (and still chunks). */
	assert_int_equal(policy_chunk_parameters(&a, 1, 0, 500, 1, &c), 0);
	assert_int_equal(c.warn, 0);
	assert_int_equal(c.chunks, 20);
	assert_int_equal(policy_chunk_parameters(&a, 1, 0, 476, 1, &c), 0);
	assert_int_equal(c.warn, POLICY_WARN_OVERSIZED);
	assert_int_equal(c.chunks, 22);
	assert_int_equal(c.chunk_length, 455);
}

/* The granule: every array of a chunk is rounded up on its own. */
static void test_chunk_granule(void **state)
{
	struct policy_chunking c;
	struct policy_array a[3] = {arr2(100, 1, 1, false), arr2(100, 1, 1, false),
	                            arr2(100, 1, 1, false)};
	uint64_t bytes;
	(void)state;
	assert_int_equal(policy_array_bytes(&a[0], 256, &bytes), 0);
	assert_int_equal(bytes, 256);
	assert_int_equal(policy_chunk_parameters(a, 3, 0, 768, 256, &c), 0);
	assert_int_equal(c.request_bytes, 768);
	assert_int_equal(c.chunks, 1);
	assert_int_equal(policy_chunk_parameters(a, 3, 0, 767, 256, &c), -ENOMEM);
}

/* Against a linear search: the count is the smallest that fits, for many
 * random request sets. */
static uint64_t brute_total(const struct policy_array *a, size_t n, uint64_t len, uint64_t granule)
{
	uint64_t total = 0;
	for (size_t i = 0; i < n; i++) {
		uint64_t b = a[i].elem_size;
		for (unsigned d = 0; d < a[i].ndim; d++) {
			uint64_t dim = a[i].shape[d];
			if (d == a[i].axis && !a[i].unchunkable && len < dim)
				dim = len;
			b *= dim;
		}
		b = (b + granule - 1) / granule * granule;
		total += b;
	}
	return total;
}

static void test_chunk_exhaustive(void **state)
{
	(void)state;
	srand(4242);
	for (int round = 0; round < 3000; round++) {
		struct policy_array a[4];
		size_t n = 1 + (size_t)(rand() % 4);
		uint64_t granule = (rand() % 2) ? 256 : 1;
		uint64_t runs = 1 + (uint64_t)(rand() % 300);
		for (size_t i = 0; i < n; i++) {
			memset(&a[i], 0, sizeof(a[i]));
			a[i].ndim = 1 + (unsigned)(rand() % 3);
			a[i].axis = (unsigned)rand() % a[i].ndim;
			a[i].elem_size = 1u << (rand() % 4);
			for (unsigned d = 0; d < a[i].ndim; d++)
				a[i].shape[d] = 1 + (uint64_t)(rand() % 20);
			a[i].shape[a[i].axis] = (rand() % 4) ? runs : 1 + (uint64_t)(rand() % 300);
			a[i].unchunkable = rand() % 5 == 0;
		}
		uint64_t full = brute_total(a, n, UINT64_MAX, granule);
		uint64_t avail = (uint64_t)rand() % (full + full / 4 + 2);
		struct policy_chunking c;
		int rc = policy_chunk_parameters(a, n, 0, avail, granule, &c);
		uint64_t axis = 0;
		for (size_t i = 0; i < n; i++) {
			if (!a[i].unchunkable && a[i].shape[a[i].axis] > axis)
				axis = a[i].shape[a[i].axis];
		}
		if (!axis)
			axis = 1;
		assert_int_equal(c.request_bytes, full);
		/* Linear search over counts. */
		uint64_t want = 0;
		for (uint64_t k = 1; k <= axis; k++) {
			if (brute_total(a, n, (axis + k - 1) / k, granule) <= avail) {
				want = k;
				break;
			}
		}
		if (!want) {
			assert_int_equal(rc, -ENOMEM);
			continue;
		}
		assert_int_equal(rc, 0);
		assert_int_equal(c.chunks, want);
		assert_int_equal(c.chunk_length, (axis + want - 1) / want);
		assert_int_equal(c.chunk_bytes, brute_total(a, n, c.chunk_length, granule));
		assert_true(c.chunk_bytes <= avail);
		assert_true(c.chunks * c.chunk_length >= axis);
		assert_true((c.chunks - 1) * c.chunk_length < axis);
		assert_int_equal(!!(c.warn & POLICY_WARN_OVERSIZED), full / 20 > avail);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_chunk_fits),       cmocka_unit_test(test_chunk_split),
	    cmocka_unit_test(test_chunk_fixed),      cmocka_unit_test(test_chunk_refusals),
	    cmocka_unit_test(test_chunk_warning),    cmocka_unit_test(test_chunk_granule),
	    cmocka_unit_test(test_chunk_exhaustive),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
