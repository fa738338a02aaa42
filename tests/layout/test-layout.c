/*
 * test-layout.c - unit tests of the kernel buffer layout planner
 * (client/layout/layout.c) through its public calls: placement and alignment, the
 * three address spaces, component regions, aliasing, the block-size search,
 * the iterators, and every error, each by its own code.
 */
#include <stdio.h>
#include <string.h>

#include "layout-helpers.h"

static void test_alignment(void **state)
{
	gpb_layout *l = lt_new();
	struct gpb_layout_placement p;
	(void)state;

	assert_int_equal(gpb_layout_add_component(l, "step", NULL), 0);
	assert_int_equal(lt_add(l, "step", "x", 3, SH, 0, NULL, 4), 0);
	assert_int_equal(lt_add(l, "step", "y", 2, SH, 0, NULL, 8), 0);
	assert_int_equal(lt_add(l, "step", "z", 1, SH, 0, NULL, 4), 0);
	assert_int_equal(gpb_layout_compute(l), 0);
	p = lt_place(l, "step", "x");
	assert_int_equal(p.space, GPB_LAYOUT_SPACE_SHARED);
	assert_int_equal(p.offset, 0);
	assert_int_equal(p.bytes, 12);
	/* y is float64: 12 rounds up to 16. */
	lt_assert_at(l, "step", "y", 16, NULL);
	assert_int_equal(lt_place(l, "step", "y").bytes, 16);
	lt_assert_at(l, "step", "z", 32, NULL);
	/* 36 bytes, rounded to 40 so that the next thread's slice is 8-aligned. */
	assert_int_equal(lt_sizes(l, "step").shared, 40);
	assert_int_equal(lt_sizes(l, "step").local, 0);
	gpb_layout_destroy(l);
}

static void test_spaces(void **state)
{
	gpb_layout *l = lt_new();
	struct gpb_layout_sizes s;
	(void)state;

	assert_int_equal(gpb_layout_add_component(l, "k", NULL), 0);
	assert_int_equal(lt_add(l, "k", "state", 4, LO, 1, NULL, 8), 0);
	assert_int_equal(lt_add(l, "k", "tmp", 3, LO, 0, NULL, 4), 0);
	assert_int_equal(lt_add(l, "k", "pshared", 2, SH, 1, NULL, 4), 0);
	assert_int_equal(lt_add(l, "k", "sh", 5, SH, 0, NULL, 4), 0);
	assert_int_equal(gpb_layout_compute(l), 0);
	assert_int_equal(lt_place(l, "k", "state").space, GPB_LAYOUT_SPACE_PERSISTENT_LOCAL);
	assert_int_equal(lt_place(l, "k", "tmp").space, GPB_LAYOUT_SPACE_LOCAL);
	assert_int_equal(lt_place(l, "k", "pshared").space, GPB_LAYOUT_SPACE_SHARED);
	/* Each space starts at 0. */
	lt_assert_at(l, "k", "state", 0, NULL);
	lt_assert_at(l, "k", "tmp", 0, NULL);
	lt_assert_at(l, "k", "pshared", 0, NULL);
	lt_assert_at(l, "k", "sh", 8, NULL);
	s = lt_sizes(l, "k");
	assert_int_equal(s.shared, 28);
	assert_int_equal(s.local, 12);
	assert_int_equal(s.persistent_local, 32);
	assert_int_equal(s.shared_offset + s.local_offset + s.persistent_local_offset, 0);
	gpb_layout_destroy(l);
}

static void test_components(void **state)
{
	gpb_layout *l = lt_new();
	struct gpb_layout_sizes s;
	(void)state;

	assert_int_equal(gpb_layout_add_component(l, "step", NULL), 0);
	assert_int_equal(gpb_layout_add_component(l, "rhs", "step"), 0);
	assert_int_equal(gpb_layout_add_component(l, "newton", "step"), 0);
	assert_int_equal(gpb_layout_add_component(l, "linsolve", "newton"), 0);
	assert_int_equal(gpb_layout_add_component(l, "other", NULL), 0);
	/* Buffers added after the children still come before their regions. */
	assert_int_equal(lt_add(l, "rhs", "a", 3, SH, 0, NULL, 4), 0);
	assert_int_equal(lt_add(l, "newton", "b", 1, SH, 0, NULL, 8), 0);
	assert_int_equal(lt_add(l, "linsolve", "c", 2, SH, 0, NULL, 4), 0);
	assert_int_equal(lt_add(l, "step", "s", 1, SH, 0, NULL, 4), 0);
	/* The same buffer name in another component is another buffer. */
	assert_int_equal(lt_add(l, "other", "s", 1, SH, 0, NULL, 4), 0);
	assert_int_equal(gpb_layout_compute(l), 0);
	lt_assert_at(l, "step", "s", 0, NULL);
	/* rhs holds only float32: its region starts right after s. */
	s = lt_sizes(l, "rhs");
	assert_int_equal(s.shared_offset, 4);
	assert_int_equal(s.shared, 12);
	lt_assert_at(l, "rhs", "a", 4, NULL);
	/* newton's subtree holds a float64: its region starts 8-aligned. */
	s = lt_sizes(l, "newton");
	assert_int_equal(s.shared_offset, 16);
	assert_int_equal(s.shared, 16);
	lt_assert_at(l, "newton", "b", 16, NULL);
	lt_assert_at(l, "linsolve", "c", 24, NULL);
	assert_int_equal(lt_sizes(l, "linsolve").shared_offset, 24);
	assert_int_equal(lt_sizes(l, "linsolve").shared, 8);
	assert_int_equal(lt_sizes(l, "step").shared, 32);
	/* Another root is another kernel: it starts at 0. */
	lt_assert_at(l, "other", "s", 0, NULL);
	assert_int_equal(lt_sizes(l, "other").shared, 4);
	gpb_layout_destroy(l);
}

static void test_alias_fits(void **state)
{
	gpb_layout *l = lt_new();
	(void)state;

	assert_int_equal(gpb_layout_add_component(l, "rk", NULL), 0);
	assert_int_equal(lt_add(l, "rk", "pad", 1, SH, 0, NULL, 4), 0);
	/* The alias may be added after its aliaser. */
	assert_int_equal(lt_add(l, "rk", "k1", 4, SH, 0, "out", 4), 0);
	assert_int_equal(lt_add(l, "rk", "k2", 4, SH, 0, "out", 4), 0);
	assert_int_equal(lt_add(l, "rk", "k3", 4, SH, 0, "out", 4), 0);
	assert_int_equal(lt_add(l, "rk", "out", 10, SH, 0, NULL, 4), 0);
	assert_int_equal(gpb_layout_compute(l), 0);
	/* pad 0, k3 does not fit what k1 and k2 leave of out: own storage
	 * after pad; then out. */
	lt_assert_at(l, "rk", "k3", 4, NULL);
	lt_assert_at(l, "rk", "out", 20, NULL);
	lt_assert_at(l, "rk", "k1", 20, "out");
	lt_assert_at(l, "rk", "k2", 36, "out");
	assert_int_equal(lt_sizes(l, "rk").shared, 60);
	gpb_layout_destroy(l);
}

static void test_alias_too_big(void **state)
{
	gpb_layout *l = lt_new();
	(void)state;

	assert_int_equal(gpb_layout_add_component(l, "c", NULL), 0);
	assert_int_equal(lt_add(l, "c", "t", 2, LO, 0, NULL, 4), 0);
	assert_int_equal(lt_add(l, "c", "big", 3, LO, 0, "t", 4), 0);
	assert_int_equal(lt_add(l, "c", "small", 1, LO, 0, "t", 8), 0);
	assert_int_equal(gpb_layout_compute(l), 0);
	lt_assert_at(l, "c", "t", 0, NULL);
	lt_assert_at(l, "c", "big", 8, NULL);
	/* The float64 rider raised t's alignment (it was at 0 anyway). */
	lt_assert_at(l, "c", "small", 0, "t");
	assert_int_equal(lt_sizes(l, "c").local, 24);
	gpb_layout_destroy(l);
}

/* A float64 rider on a float32 target: the target is placed 8-aligned. */
static void test_alias_raises_alignment(void **state)
{
	gpb_layout *l = lt_new();
	(void)state;

	assert_int_equal(gpb_layout_add_component(l, "c", NULL), 0);
	assert_int_equal(lt_add(l, "c", "p", 1, SH, 0, NULL, 4), 0);
	assert_int_equal(lt_add(l, "c", "t", 4, SH, 0, NULL, 4), 0);
	assert_int_equal(lt_add(l, "c", "r", 2, SH, 0, "t", 8), 0);
	assert_int_equal(gpb_layout_compute(l), 0);
	lt_assert_at(l, "c", "t", 8, NULL);
	lt_assert_at(l, "c", "r", 8, "t");
	assert_int_equal(lt_sizes(l, "c").shared, 24);
	gpb_layout_destroy(l);
}

/* c -> b -> a: b rides on a, so c may not ride on b (it would overlap a,
 * whose lifetime c said nothing about). When b does not fit a, c rides b. */
static void test_alias_chain(void **state)
{
	gpb_layout *l = lt_new();
	(void)state;

	assert_int_equal(gpb_layout_add_component(l, "c", NULL), 0);
	assert_int_equal(lt_add(l, "c", "x", 1, SH, 0, "y", 4), 0);
	assert_int_equal(lt_add(l, "c", "y", 2, SH, 0, "z", 4), 0);
	assert_int_equal(lt_add(l, "c", "z", 4, SH, 0, NULL, 4), 0);
	assert_int_equal(lt_add(l, "c", "a", 8, LO, 0, NULL, 4), 0);
	assert_int_equal(lt_add(l, "c", "b", 9, LO, 0, "a", 4), 0);
	assert_int_equal(lt_add(l, "c", "cc", 9, LO, 0, "b", 4), 0);
	assert_int_equal(gpb_layout_compute(l), 0);
	lt_assert_at(l, "c", "x", 0, NULL);
	lt_assert_at(l, "c", "z", 4, NULL);
	lt_assert_at(l, "c", "y", 4, "z");
	lt_assert_at(l, "c", "a", 0, NULL);
	lt_assert_at(l, "c", "b", 32, NULL);
	lt_assert_at(l, "c", "cc", 32, "b");
	gpb_layout_destroy(l);
}

static void test_block_size(void **state)
{
	gpb_layout *l = lt_new();
	uint32_t t = 0;
	(void)state;

	assert_int_equal(gpb_layout_add_component(l, "k", NULL), 0);
	assert_int_equal(gpb_layout_add_component(l, "child", "k"), 0);
	assert_int_equal(gpb_layout_add_component(l, "none", NULL), 0);
	assert_int_equal(lt_add(l, "k", "a", 25, SH, 0, NULL, 4), 0);
	assert_int_equal(lt_add(l, "child", "b", 25, SH, 0, NULL, 4), 0);
	assert_int_equal(lt_add(l, "none", "loc", 1000, LO, 0, NULL, 8), 0);
	assert_int_equal(gpb_layout_compute(l), 0);
	/* 200 bytes a thread: 49152 / 200 = 245.76, so 224 of 256. */
	assert_int_equal(gpb_layout_block_size(l, "k", 0, 0, 256, &t), 0);
	assert_int_equal(t, 224);
	assert_int_equal(gpb_layout_block_size(l, "k", 0, 0, 128, &t), 0);
	assert_int_equal(t, 128);
	/* The child alone: 100 bytes a thread fits 256. */
	assert_int_equal(gpb_layout_block_size(l, "child", 0, 0, 256, &t), 0);
	assert_int_equal(t, 256);
	/* An exact fit: 200 x 96 = 19200. */
	assert_int_equal(gpb_layout_block_size(l, "k", 19200, 0, 1024, &t), 0);
	assert_int_equal(t, 96);
	assert_int_equal(gpb_layout_block_size(l, "k", 19199, 0, 1024, &t), 0);
	assert_int_equal(t, 64);
	/* A larger budget needs the device's opt-in limit. */
	assert_int_equal(gpb_layout_block_size(l, "k", 102400, 232448, 1024, &t), 0);
	assert_int_equal(t, 512);
	assert_int_equal(gpb_layout_block_size(l, "k", 102400, 0, 1024, &t), GPB_E_INVALID);
	assert_int_equal(gpb_layout_block_size(l, "k", 232449, 232448, 1024, &t), GPB_E_INVALID);
	/* No shared memory: the request stands. */
	assert_int_equal(gpb_layout_block_size(l, "none", 0, 0, 1024, &t), 0);
	assert_int_equal(t, 1024);
	/* Whole warps up to 1024 only. */
	assert_int_equal(gpb_layout_block_size(l, "k", 0, 0, 0, &t), GPB_E_INVALID);
	assert_int_equal(gpb_layout_block_size(l, "k", 0, 0, 100, &t), GPB_E_INVALID);
	assert_int_equal(gpb_layout_block_size(l, "k", 0, 0, 1056, &t), GPB_E_INVALID);
	assert_int_equal(gpb_layout_block_size(l, "k", 0, 0, 256, NULL), GPB_E_INVALID);
	assert_int_equal(gpb_layout_block_size(l, "nope", 0, 0, 256, &t), GPB_E_NOT_FOUND);
	/* 200 x 32 = 6400 > 6399: not one warp. */
	t = 7;
	assert_int_equal(gpb_layout_block_size(l, "k", 6399, 0, 256, &t), GPB_E_LAYOUT_NO_FIT);
	assert_int_equal(t, 7);
	assert_non_null(strstr(gpb_last_error(), "'k' needs 200 shared bytes per thread"));
	assert_int_equal(gpb_layout_block_size(l, "k", 6400, 0, 256, &t), 0);
	assert_int_equal(t, 32);
	gpb_layout_destroy(l);
}

/* A per-thread size so large that size x threads overflows 64 bits is
 * "does not fit", not a wrapped small product. */
static void test_block_size_overflow(void **state)
{
	gpb_layout *l = lt_new();
	uint32_t t;
	(void)state;

	assert_int_equal(gpb_layout_add_component(l, "k", NULL), 0);
	assert_int_equal(lt_add(l, "k", "huge", UINT64_C(1) << 59, SH, 0, NULL, 8), 0);
	assert_int_equal(gpb_layout_compute(l), 0);
	assert_int_equal(lt_sizes(l, "k").shared, UINT64_C(1) << 62);
	assert_int_equal(gpb_layout_block_size(l, "k", 0, 0, 1024, &t), GPB_E_LAYOUT_NO_FIT);
	gpb_layout_destroy(l);
}

static void test_iterators(void **state)
{
	static const char *const order[][2] = {
	    {"a", "a1"}, {"a", "a2"}, {"b", "b1"}, {"d", "d1"}, {"c", "c1"}, {"r2", "x"},
	};
	static const char *const comps[] = {"a", "b", "d", "c", "r2"};
	struct gpb_layout_component_info ci;
	struct gpb_layout_buffer d;
	struct gpb_layout_placement p;
	gpb_layout *l = lt_new();
	(void)state;

	assert_int_equal(gpb_layout_add_component(l, "a", NULL), 0);
	assert_int_equal(gpb_layout_add_component(l, "b", "a"), 0);
	assert_int_equal(gpb_layout_add_component(l, "r2", NULL), 0);
	assert_int_equal(gpb_layout_add_component(l, "c", "a"), 0);
	assert_int_equal(gpb_layout_add_component(l, "d", "b"), 0);
	assert_int_equal(lt_add(l, "r2", "x", 1, LO, 0, NULL, 4), 0);
	assert_int_equal(lt_add(l, "c", "c1", 1, LO, 0, NULL, 4), 0);
	assert_int_equal(lt_add(l, "d", "d1", 1, LO, 0, NULL, 4), 0);
	assert_int_equal(lt_add(l, "a", "a1", 1, LO, 0, NULL, 4), 0);
	assert_int_equal(lt_add(l, "b", "b1", 1, LO, 0, NULL, 4), 0);
	assert_int_equal(lt_add(l, "a", "a2", 2, SH, 1, NULL, 8), 0);
	assert_int_equal(gpb_layout_buffer_at(l, 0, &d, &p), GPB_E_INVALID);
	assert_int_equal(gpb_layout_component_at(l, 0, &ci), GPB_E_INVALID);
	assert_int_equal(gpb_layout_compute(l), 0);
	for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++) {
		assert_int_equal(gpb_layout_buffer_at(l, i, &d, &p), 0);
		assert_string_equal(d.component, order[i][0]);
		assert_string_equal(d.name, order[i][1]);
	}
	assert_int_equal(gpb_layout_buffer_at(l, 1, &d, NULL), 0);
	assert_int_equal(d.size, 2);
	assert_int_equal(d.precision, 8);
	assert_int_equal(d.location, SH);
	assert_int_equal(d.persistent, 1);
	assert_null(d.alias);
	assert_int_equal(gpb_layout_buffer_at(l, 1, NULL, &p), 0);
	assert_int_equal(p.bytes, 16);
	assert_int_equal(gpb_layout_buffer_at(l, 6, &d, &p), GPB_E_NOT_FOUND);
	for (size_t i = 0; i < sizeof(comps) / sizeof(comps[0]); i++) {
		assert_int_equal(gpb_layout_component_at(l, i, &ci), 0);
		assert_string_equal(ci.name, comps[i]);
	}
	assert_int_equal(gpb_layout_component_at(l, 2, &ci), 0);
	assert_string_equal(ci.parent, "b");
	assert_int_equal(ci.depth, 2);
	assert_int_equal(ci.sizes.local_offset, 8);
	assert_int_equal(ci.sizes.local, 4);
	assert_int_equal(gpb_layout_component_at(l, 0, &ci), 0);
	assert_null(ci.parent);
	assert_int_equal(ci.sizes.local, 16);
	assert_int_equal(ci.sizes.shared, 16);
	assert_int_equal(gpb_layout_component_at(l, 5, &ci), GPB_E_NOT_FOUND);
	assert_int_equal(gpb_layout_component_at(l, 0, NULL), GPB_E_INVALID);
	gpb_layout_destroy(l);
}

/* Strings are copied in; strings handed out outlive later additions. */
static void test_ownership(void **state)
{
	char comp[8] = "comp", name[8] = "buf", alias[8] = "buf";
	struct gpb_layout_buffer d;
	struct gpb_layout_placement p;
	gpb_layout *l = lt_new();
	(void)state;

	assert_int_equal(gpb_layout_add_component(l, comp, NULL), 0);
	assert_int_equal(lt_add(l, comp, name, 4, SH, 0, NULL, 4), 0);
	strcpy(name, "rider");
	assert_int_equal(lt_add(l, comp, name, 2, SH, 0, alias, 4), 0);
	memset(comp, 'x', sizeof(comp) - 1);
	memset(name, 'x', sizeof(name) - 1);
	memset(alias, 'x', sizeof(alias) - 1);
	assert_int_equal(gpb_layout_compute(l), 0);
	assert_int_equal(gpb_layout_buffer_at(l, 1, &d, &p), 0);
	assert_string_equal(d.component, "comp");
	assert_string_equal(d.name, "rider");
	assert_string_equal(d.alias, "buf");
	assert_string_equal(p.aliased_with, "buf");
	for (int i = 0; i < 100; i++) {
		char n[16];

		snprintf(n, sizeof(n), "more%d", i);
		assert_int_equal(lt_add(l, "comp", n, 1, LO, 0, NULL, 4), 0);
	}
	assert_string_equal(d.component, "comp");
	assert_string_equal(d.name, "rider");
	assert_string_equal(p.aliased_with, "buf");
	gpb_layout_destroy(l);
	gpb_layout_destroy(NULL);
}

/* A change uncomputes; a failed compute leaves the layout uncomputed and a
 * fixed one computes. */
static void test_recompute(void **state)
{
	struct gpb_layout_placement p;
	struct gpb_layout_sizes s;
	gpb_layout *l = lt_new();
	(void)state;

	assert_int_equal(gpb_layout_add_component(l, "c", NULL), 0);
	assert_int_equal(lt_add(l, "c", "a", 1, SH, 0, "later", 4), 0);
	assert_int_equal(gpb_layout_buffer_info(l, "c", "a", &p), GPB_E_INVALID);
	assert_int_equal(gpb_layout_compute(l), GPB_E_LAYOUT_ALIAS_UNKNOWN);
	assert_int_equal(gpb_layout_buffer_info(l, "c", "a", &p), GPB_E_INVALID);
	assert_non_null(strstr(gpb_last_error(), "gpb_layout_compute() first"));
	assert_int_equal(lt_add(l, "c", "later", 1, SH, 0, NULL, 4), 0);
	assert_int_equal(gpb_layout_compute(l), 0);
	lt_assert_at(l, "c", "a", 0, "later");
	assert_int_equal(gpb_layout_add_component(l, "d", "c"), 0);
	assert_int_equal(gpb_layout_buffer_info(l, "c", "a", &p), GPB_E_INVALID);
	assert_int_equal(gpb_layout_compute(l), 0);
	assert_int_equal(gpb_layout_buffer_info(l, "c", "nope", &p), GPB_E_NOT_FOUND);
	assert_int_equal(gpb_layout_buffer_info(l, "nope", "a", &p), GPB_E_NOT_FOUND);
	assert_int_equal(gpb_layout_buffer_info(l, "c", "a", NULL), GPB_E_INVALID);
	assert_int_equal(gpb_layout_buffer_info(l, NULL, "a", &p), GPB_E_INVALID);
	assert_int_equal(gpb_layout_component_sizes(l, "nope", &s), GPB_E_NOT_FOUND);
	assert_int_equal(gpb_layout_component_sizes(l, "c", NULL), GPB_E_INVALID);
	gpb_layout_destroy(l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_alignment),
	    cmocka_unit_test(test_spaces),
	    cmocka_unit_test(test_components),
	    cmocka_unit_test(test_alias_fits),
	    cmocka_unit_test(test_alias_too_big),
	    cmocka_unit_test(test_alias_raises_alignment),
	    cmocka_unit_test(test_alias_chain),
	    cmocka_unit_test(test_block_size),
	    cmocka_unit_test(test_block_size_overflow),
	    cmocka_unit_test(test_iterators),
	    cmocka_unit_test(test_ownership),
	    cmocka_unit_test(test_recompute),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
