/*
 * test-layout-errors.c - every refusal of the layout planner, each asserted
 * by its own code, and that a refused call leaves the layout as it was.
 */
#include <stdio.h>
#include <string.h>

#include "layout-helpers.h"

/* A layout with root "c" holding float32 shared "s", local "t" and
 * persistent local "p"; child "kid" holds shared "ks". */
static gpb_layout *base_layout(void)
{
	gpb_layout *l = lt_new();

	assert_int_equal(gpb_layout_add_component(l, "c", NULL), 0);
	assert_int_equal(gpb_layout_add_component(l, "kid", "c"), 0);
	assert_int_equal(lt_add(l, "c", "s", 4, SH, 0, NULL, 4), 0);
	assert_int_equal(lt_add(l, "c", "t", 4, LO, 0, NULL, 4), 0);
	assert_int_equal(lt_add(l, "c", "p", 4, LO, 1, NULL, 4), 0);
	assert_int_equal(lt_add(l, "kid", "ks", 4, SH, 0, NULL, 4), 0);
	return l;
}

/* The buffers the layout lists, after computing it. */
static size_t count_buffers(gpb_layout *l)
{
	size_t n = 0;

	assert_int_equal(gpb_layout_compute(l), 0);
	while (gpb_layout_buffer_at(l, n, NULL, NULL) == 0)
		n++;
	return n;
}

static void test_names(void **state)
{
	char longest[GPB_LAYOUT_MAX_NAME + 2];
	gpb_layout *l = base_layout();
	(void)state;

	memset(longest, 'n', sizeof(longest));
	longest[GPB_LAYOUT_MAX_NAME] = '\0';
	assert_int_equal(gpb_layout_add_component(l, longest, NULL), 0);
	assert_int_equal(lt_add(l, "c", longest, 1, SH, 0, NULL, 4), 0);
	longest[GPB_LAYOUT_MAX_NAME] = 'n';
	longest[GPB_LAYOUT_MAX_NAME + 1] = '\0';
	assert_int_equal(gpb_layout_add_component(l, longest, NULL), GPB_E_LAYOUT_NAME);
	assert_int_equal(gpb_layout_add_component(l, "", NULL), GPB_E_LAYOUT_NAME);
	assert_int_equal(gpb_layout_add_component(l, NULL, NULL), GPB_E_LAYOUT_NAME);
	assert_int_equal(gpb_layout_add_component(l, "two words", NULL), GPB_E_LAYOUT_NAME);
	assert_int_equal(gpb_layout_add_component(l, "tab\t", NULL), GPB_E_LAYOUT_NAME);
	assert_int_equal(gpb_layout_add_component(l, "caf\xc3\xa9", NULL), GPB_E_LAYOUT_NAME);
	assert_int_equal(gpb_layout_add_component(l, "del\x7f", NULL), GPB_E_LAYOUT_NAME);
	assert_int_equal(lt_add(l, "c", longest, 1, SH, 0, NULL, 4), GPB_E_LAYOUT_NAME);
	assert_int_equal(lt_add(l, "c", "", 1, SH, 0, NULL, 4), GPB_E_LAYOUT_NAME);
	assert_int_equal(lt_add(l, "c", NULL, 1, SH, 0, NULL, 4), GPB_E_LAYOUT_NAME);
	assert_int_equal(lt_add(l, "c", "a\nb", 1, SH, 0, NULL, 4), GPB_E_LAYOUT_NAME);
	/* An alias is a name too: "" is not "none". */
	assert_int_equal(lt_add(l, "c", "x", 1, SH, 0, "", 4), GPB_E_LAYOUT_NAME);
	assert_int_equal(lt_add(l, "c", "x", 1, SH, 0, "s s", 4), GPB_E_LAYOUT_NAME);
	assert_non_null(strstr(gpb_last_error(), "buffer 'x' of 'c': alias name"));
	assert_int_equal(count_buffers(l), 5);
	gpb_layout_destroy(l);
}

static void test_duplicates(void **state)
{
	gpb_layout *l = base_layout();
	(void)state;

	assert_int_equal(gpb_layout_add_component(l, "c", NULL), GPB_E_LAYOUT_DUPLICATE);
	/* Component names are unique in the layout, whatever the parent. */
	assert_int_equal(gpb_layout_add_component(l, "kid", NULL), GPB_E_LAYOUT_DUPLICATE);
	assert_int_equal(gpb_layout_add_component(l, "c", "kid"), GPB_E_LAYOUT_DUPLICATE);
	assert_int_equal(lt_add(l, "c", "s", 1, LO, 0, NULL, 8), GPB_E_LAYOUT_DUPLICATE);
	assert_non_null(strstr(gpb_last_error(), "buffer 's' of 'c' exists already"));
	/* Buffer names are unique within their component only. */
	assert_int_equal(lt_add(l, "kid", "s", 1, SH, 0, NULL, 4), 0);
	assert_int_equal(count_buffers(l), 5);
	gpb_layout_destroy(l);
}

static void test_unknown(void **state)
{
	gpb_layout *l = base_layout();
	(void)state;

	assert_int_equal(gpb_layout_add_component(l, "x", "nope"), GPB_E_NOT_FOUND);
	assert_int_equal(lt_add(l, "nope", "x", 1, SH, 0, NULL, 4), GPB_E_NOT_FOUND);
	assert_int_equal(lt_add(l, NULL, "x", 1, SH, 0, NULL, 4), GPB_E_INVALID);
	assert_int_equal(count_buffers(l), 4);
	gpb_layout_destroy(l);
}

static void test_zero_size(void **state)
{
	gpb_layout *l = base_layout();
	(void)state;

	assert_int_equal(lt_add(l, "c", "z", 0, SH, 0, NULL, 4), GPB_E_LAYOUT_ZERO_SIZE);
	assert_int_equal(count_buffers(l), 4);
	gpb_layout_destroy(l);
}

static void test_overflow(void **state)
{
	gpb_layout *l = base_layout();
	(void)state;

	/* size x precision. */
	assert_int_equal(lt_add(l, "c", "o", UINT64_C(1) << 62, SH, 0, NULL, 4),
	                 GPB_E_LAYOUT_OVERFLOW);
	assert_int_equal(lt_add(l, "c", "o", UINT64_MAX, LO, 0, NULL, 8), GPB_E_LAYOUT_OVERFLOW);
	/* 2^64 - 64 bytes fit beside s and ks; 2^63 more in the child do not. */
	assert_int_equal(lt_add(l, "c", "h1", (UINT64_C(1) << 62) - 16, SH, 0, NULL, 4), 0);
	assert_int_equal(count_buffers(l), 5);
	assert_int_equal(lt_add(l, "kid", "h2", UINT64_C(1) << 60, SH, 0, NULL, 8), 0);
	assert_int_equal(gpb_layout_compute(l), GPB_E_LAYOUT_OVERFLOW);
	gpb_layout_destroy(l);

	/* Rounding a region up to its alignment overflows too. */
	l = lt_new();
	assert_int_equal(gpb_layout_add_component(l, "r", NULL), 0);
	assert_int_equal(lt_add(l, "r", "a", UINT64_MAX >> 3, LO, 0, NULL, 8), 0);
	assert_int_equal(lt_add(l, "r", "b", 1, LO, 0, NULL, 4), 0);
	assert_int_equal(gpb_layout_compute(l), GPB_E_LAYOUT_OVERFLOW);
	gpb_layout_destroy(l);
}

static void test_alias_unknown(void **state)
{
	gpb_layout *l = base_layout();
	(void)state;

	assert_int_equal(lt_add(l, "c", "a", 1, SH, 0, "nope", 4), 0);
	assert_int_equal(gpb_layout_compute(l), GPB_E_LAYOUT_ALIAS_UNKNOWN);
	gpb_layout_destroy(l);
	/* Aliases stay within a component: neither the child's nor the
	 * parent's buffers. */
	l = base_layout();
	assert_int_equal(lt_add(l, "c", "a", 1, SH, 0, "ks", 4), 0);
	assert_int_equal(gpb_layout_compute(l), GPB_E_LAYOUT_ALIAS_UNKNOWN);
	assert_non_null(strstr(gpb_last_error(), "aliases stay within a component"));
	gpb_layout_destroy(l);
	l = base_layout();
	assert_int_equal(lt_add(l, "kid", "a", 1, SH, 0, "s", 4), 0);
	assert_int_equal(gpb_layout_compute(l), GPB_E_LAYOUT_ALIAS_UNKNOWN);
	gpb_layout_destroy(l);
}

static void test_alias_persistent(void **state)
{
	gpb_layout *l = base_layout();
	(void)state;

	/* To a persistent buffer: found when computing. */
	assert_int_equal(lt_add(l, "c", "a", 1, LO, 0, "p", 4), 0);
	assert_int_equal(gpb_layout_compute(l), GPB_E_LAYOUT_ALIAS_PERSISTENT);
	gpb_layout_destroy(l);
	/* From a persistent buffer: refused at once, shared or local. */
	l = base_layout();
	assert_int_equal(lt_add(l, "c", "a", 1, LO, 1, "t", 4), GPB_E_LAYOUT_ALIAS_PERSISTENT);
	assert_int_equal(lt_add(l, "c", "b", 1, SH, 1, "s", 4), GPB_E_LAYOUT_ALIAS_PERSISTENT);
	assert_int_equal(lt_add(l, "c", "b", 1, SH, 1, NULL, 4), 0);
	assert_int_equal(lt_add(l, "c", "d", 1, SH, 0, "b", 4), 0);
	assert_int_equal(gpb_layout_compute(l), GPB_E_LAYOUT_ALIAS_PERSISTENT);
	gpb_layout_destroy(l);
}

static void test_alias_cycle(void **state)
{
	gpb_layout *l = base_layout();
	(void)state;

	assert_int_equal(lt_add(l, "c", "self", 1, SH, 0, "self", 4), GPB_E_LAYOUT_ALIAS_CYCLE);
	assert_int_equal(lt_add(l, "c", "a", 1, SH, 0, "b", 4), 0);
	assert_int_equal(lt_add(l, "c", "b", 1, SH, 0, "a", 4), 0);
	assert_int_equal(gpb_layout_compute(l), GPB_E_LAYOUT_ALIAS_CYCLE);
	gpb_layout_destroy(l);
	/* A longer one, entered from a chain that leads into it. */
	l = base_layout();
	assert_int_equal(lt_add(l, "c", "in", 1, LO, 0, "x", 4), 0);
	assert_int_equal(lt_add(l, "c", "x", 1, LO, 0, "y", 4), 0);
	assert_int_equal(lt_add(l, "c", "y", 1, LO, 0, "z", 4), 0);
	assert_int_equal(lt_add(l, "c", "z", 1, LO, 0, "x", 4), 0);
	assert_int_equal(gpb_layout_compute(l), GPB_E_LAYOUT_ALIAS_CYCLE);
	assert_non_null(strstr(gpb_last_error(), "its aliases lead back to it"));
	gpb_layout_destroy(l);
	/* A chain is no cycle. */
	l = base_layout();
	assert_int_equal(lt_add(l, "c", "x", 1, LO, 0, "y", 4), 0);
	assert_int_equal(lt_add(l, "c", "y", 1, LO, 0, "t", 4), 0);
	assert_int_equal(gpb_layout_compute(l), 0);
	gpb_layout_destroy(l);
}

static void test_alias_location(void **state)
{
	gpb_layout *l = base_layout();
	(void)state;

	assert_int_equal(lt_add(l, "c", "a", 1, LO, 0, "s", 4), 0);
	assert_int_equal(gpb_layout_compute(l), GPB_E_LAYOUT_ALIAS_LOCATION);
	assert_non_null(
	    strstr(gpb_last_error(), "'a' of 'c' is local but its alias 's' is shared"));
	gpb_layout_destroy(l);
	l = base_layout();
	assert_int_equal(lt_add(l, "c", "a", 1, SH, 0, "t", 4), 0);
	assert_int_equal(gpb_layout_compute(l), GPB_E_LAYOUT_ALIAS_LOCATION);
	gpb_layout_destroy(l);
}

static void test_invalid(void **state)
{
	struct gpb_layout_buffer d = {.component = "c", .name = "x", .size = 1, .precision = 4};
	gpb_layout *l = base_layout();
	(void)state;

	assert_int_equal(gpb_layout_create(NULL), GPB_E_INVALID);
	assert_int_equal(gpb_layout_add_component(NULL, "x", NULL), GPB_E_INVALID);
	assert_int_equal(gpb_layout_add_buffer(NULL, &d), GPB_E_INVALID);
	assert_int_equal(gpb_layout_add_buffer(l, NULL), GPB_E_INVALID);
	assert_int_equal(gpb_layout_compute(NULL), GPB_E_INVALID);
	for (unsigned prec = 0; prec <= 16; prec++) {
		int want = prec == 4 || prec == 8 ? 0 : GPB_E_INVALID;
		char name[16];

		snprintf(name, sizeof(name), "q%u", prec);
		assert_int_equal(lt_add(l, "c", name, 1, SH, 0, NULL, prec), want);
	}
	d.location = (enum gpb_layout_location)2;
	assert_int_equal(gpb_layout_add_buffer(l, &d), GPB_E_INVALID);
	d.location = (enum gpb_layout_location) - 1;
	assert_int_equal(gpb_layout_add_buffer(l, &d), GPB_E_INVALID);
	assert_int_equal(count_buffers(l), 6);
	gpb_layout_destroy(l);
}

static void test_limits(void **state)
{
	gpb_layout *l = lt_new();
	char name[16];
	(void)state;

	for (int i = 0; i < GPB_LAYOUT_MAX_COMPONENTS; i++) {
		snprintf(name, sizeof(name), "c%d", i);
		assert_int_equal(gpb_layout_add_component(l, name, i ? "c0" : NULL), 0);
	}
	assert_int_equal(gpb_layout_add_component(l, "more", NULL), GPB_E_LIMIT);
	for (int i = 0; i < GPB_LAYOUT_MAX_BUFFERS; i++) {
		snprintf(name, sizeof(name), "b%d", i);
		assert_int_equal(lt_add(l, i % 2 ? "c1" : "c1023", name, 1, LO, 0, NULL, 4), 0);
	}
	assert_int_equal(lt_add(l, "c5", "more", 1, LO, 0, NULL, 4), GPB_E_LIMIT);
	assert_int_equal(gpb_layout_compute(l), 0);
	assert_int_equal(lt_sizes(l, "c0").local, 4 * GPB_LAYOUT_MAX_BUFFERS);
	gpb_layout_destroy(l);
}

/* A deep tree: the layout recurses once per level. */
static void test_deep_tree(void **state)
{
	gpb_layout *l = lt_new();
	char name[16], parent[16];
	(void)state;

	for (int i = 0; i < GPB_LAYOUT_MAX_COMPONENTS; i++) {
		snprintf(name, sizeof(name), "d%d", i);
		assert_int_equal(gpb_layout_add_component(l, name, i ? parent : NULL), 0);
		assert_int_equal(lt_add(l, name, "b", 1, SH, 0, NULL, i % 2 ? 8 : 4), 0);
		memcpy(parent, name, sizeof(name));
	}
	assert_int_equal(gpb_layout_compute(l), 0);
	/* Alternating 4 and 8 bytes, each 8 aligned. */
	assert_int_equal(lt_sizes(l, "d0").shared, 8 * GPB_LAYOUT_MAX_COMPONENTS);
	lt_assert_at(l, "d1023", "b", 8 * (GPB_LAYOUT_MAX_COMPONENTS - 1), NULL);
	gpb_layout_destroy(l);
}

static void test_strerror(void **state)
{
	const char *seen[32] = {0};
	(void)state;

	for (int err = GPB_E_LAYOUT_NAME; err >= GPB_E_LAYOUT_NO_FIT; err--) {
		const char *s = gpb_strerror(err);

		assert_string_not_equal(s, "unknown error");
		for (int i = 0; i < 32; i++)
			assert_false(seen[i] && strcmp(seen[i], s) == 0);
		seen[-err] = s;
	}
	/* The next codes are not the planner's; the one after them is no code. */
	assert_string_not_equal(gpb_strerror(GPB_E_CONTEXT_RESET), "unknown error");
	assert_string_not_equal(gpb_strerror(GPB_E_EXISTS), "unknown error");
	assert_string_equal(gpb_strerror(GPB_E_EXISTS - 1), "unknown error");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_names),
	    cmocka_unit_test(test_duplicates),
	    cmocka_unit_test(test_unknown),
	    cmocka_unit_test(test_zero_size),
	    cmocka_unit_test(test_overflow),
	    cmocka_unit_test(test_alias_unknown),
	    cmocka_unit_test(test_alias_persistent),
	    cmocka_unit_test(test_alias_cycle),
	    cmocka_unit_test(test_alias_location),
	    cmocka_unit_test(test_invalid),
	    cmocka_unit_test(test_limits),
	    cmocka_unit_test(test_deep_tree),
	    cmocka_unit_test(test_strerror),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
