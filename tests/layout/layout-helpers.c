/*
 * layout-helpers.c - see layout-helpers.h.
 */
#include "layout-helpers.h"

int lt_add(gpb_layout *l, const char *comp, const char *name, uint64_t size,
           enum gpb_layout_location loc, int persistent, const char *alias, unsigned prec)
{
	struct gpb_layout_buffer d = {
	    .component = comp,
	    .name = name,
	    .size = size,
	    .location = loc,
	    .persistent = persistent,
	    .alias = alias,
	    .precision = prec,
	};
	return gpb_layout_add_buffer(l, &d);
}

gpb_layout *lt_new(void)
{
	gpb_layout *l = NULL;

	assert_int_equal(gpb_layout_create(&l), 0);
	assert_non_null(l);
	return l;
}

struct gpb_layout_placement lt_place(const gpb_layout *l, const char *comp, const char *name)
{
	struct gpb_layout_placement p;

	assert_int_equal(gpb_layout_buffer_info(l, comp, name, &p), 0);
	return p;
}

struct gpb_layout_sizes lt_sizes(const gpb_layout *l, const char *comp)
{
	struct gpb_layout_sizes s;

	assert_int_equal(gpb_layout_component_sizes(l, comp, &s), 0);
	return s;
}

void lt_assert_at(const gpb_layout *l, const char *comp, const char *name, uint64_t offset,
                  const char *target)
{
	struct gpb_layout_placement p = lt_place(l, comp, name);

	assert_int_equal(p.offset, offset);
	if (target)
		assert_string_equal(p.aliased_with, target);
	else
		assert_null(p.aliased_with);
}
