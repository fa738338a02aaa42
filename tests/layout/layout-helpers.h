/*
 * layout-helpers.h - what the layout planner's unit tests (test-layout*.c)
 * share: short forms of the public gpb_layout_* calls that fail the test
 * when a call that must succeed does not.
 */
#ifndef GPB_TEST_LAYOUT_HELPERS_H
#define GPB_TEST_LAYOUT_HELPERS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "gpubroker.h"

#define SH GPB_LAYOUT_SHARED
#define LO GPB_LAYOUT_LOCAL

/* gpb_layout_add_buffer() with the descriptor's fields as arguments. */
int lt_add(gpb_layout *l, const char *comp, const char *name, uint64_t size,
           enum gpb_layout_location loc, int persistent, const char *alias, unsigned prec);
/* A new empty layout. */
gpb_layout *lt_new(void);
/* gpb_layout_buffer_info(), which must succeed. */
struct gpb_layout_placement lt_place(const gpb_layout *l, const char *comp, const char *name);
/* gpb_layout_component_sizes(), which must succeed. */
struct gpb_layout_sizes lt_sizes(const gpb_layout *l, const char *comp);
/* The buffer is at @offset, riding on @target (NULL: in storage of its own). */
void lt_assert_at(const gpb_layout *l, const char *comp, const char *name, uint64_t offset,
                  const char *target);

#endif
