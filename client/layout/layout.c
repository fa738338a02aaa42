/*
 * layout.c - the kernel buffer layout planner (gpb_layout_*): cubie's buffer
 * registry as pure computation. No I/O, no connection; the rules are in
 * gpubroker.h and docs/layout.md.
 *
 * Components and buffers live in two arrays and refer to each other by
 * index, so that growing an array moves nothing a caller holds: the strings
 * handed out are separate allocations, stable until the layout is freed.
 */
#include "error.h"
#include "export.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LAYOUT_NONE   UINT32_MAX
#define LAYOUT_SPACES 3

struct layout_component {
	char *name;
	uint32_t parent; /* LAYOUT_NONE for a root */
	uint32_t first_child, last_child, next_sibling;
	uint32_t first_buffer, last_buffer;
	unsigned depth;
	/* Computed: the region in each space, and the largest alignment in it
	 * (its own buffers' and its descendants'). */
	uint64_t offset[LAYOUT_SPACES], bytes[LAYOUT_SPACES];
	unsigned align[LAYOUT_SPACES];
};

struct layout_buffer {
	char *name;
	char *alias; /* NULL: none */
	uint32_t component;
	uint32_t next; /* the component's next buffer */
	uint64_t size, bytes;
	unsigned precision;
	enum gpb_layout_location location;
	bool persistent;
	/* Computed. */
	uint32_t alias_of; /* the buffer @alias names, or LAYOUT_NONE */
	uint32_t host;     /* the buffer whose storage it was placed in, or LAYOUT_NONE */
	unsigned depth;    /* length of its alias chain: 0 without an alias */
	unsigned align;    /* its storage's alignment: its precision, raised by its riders' */
	uint64_t rel;      /* riders: its offset inside the host's storage */
	uint64_t fill;     /* hosts: bytes of its storage already given to riders */
	uint64_t offset;
};

struct gpb_layout {
	struct layout_component *comps;
	uint32_t ncomps, comps_cap;
	struct layout_buffer *bufs;
	uint32_t nbufs, bufs_cap;
	uint32_t first_root, last_root;
	bool computed;
	/* Layout order, filled by gpb_layout_compute(). */
	uint32_t *comp_order, *buf_order;
};

static enum gpb_layout_space layout_space(const struct layout_buffer *b)
{
	if (b->location == GPB_LAYOUT_SHARED)
		return GPB_LAYOUT_SPACE_SHARED;
	return b->persistent ? GPB_LAYOUT_SPACE_PERSISTENT_LOCAL : GPB_LAYOUT_SPACE_LOCAL;
}

/* Rounds @v up to @align (a power of two); false on overflow. */
static bool layout_align_up(uint64_t v, unsigned align, uint64_t *out)
{
	if (__builtin_add_overflow(v, (uint64_t)align - 1, out))
		return false;
	*out &= ~((uint64_t)align - 1);
	return true;
}

/* Names are printed in tables and JSON and typed on command lines: keep them
 * to one word of printable ASCII. */
static int layout_check_name(const char *what, const char *name)
{
	size_t n;

	if (!name || !*name)
		return error_set(GPB_E_LAYOUT_NAME, "%s name is empty", what);
	n = strnlen(name, GPB_LAYOUT_MAX_NAME + 1);
	if (n > GPB_LAYOUT_MAX_NAME)
		return error_set(GPB_E_LAYOUT_NAME, "%s name '%.16s...' is longer than %d bytes",
		                 what, name, GPB_LAYOUT_MAX_NAME);
	for (size_t i = 0; i < n; i++) {
		if (name[i] <= ' ' || name[i] > '~')
			return error_set(GPB_E_LAYOUT_NAME,
			                 "%s name has a byte 0x%02x that is not printable ASCII "
			                 "(or is a blank)",
			                 what, (unsigned char)name[i]);
	}
	return 0;
}

static uint32_t layout_find_component(const gpb_layout *l, const char *name)
{
	for (uint32_t i = 0; i < l->ncomps; i++) {
		if (strcmp(l->comps[i].name, name) == 0)
			return i;
	}
	return LAYOUT_NONE;
}

static uint32_t layout_find_buffer(const gpb_layout *l, uint32_t comp, const char *name)
{
	for (uint32_t i = l->comps[comp].first_buffer; i != LAYOUT_NONE; i = l->bufs[i].next) {
		if (strcmp(l->bufs[i].name, name) == 0)
			return i;
	}
	return LAYOUT_NONE;
}

/* Grows @*array (of @size-byte items) so that one more fits. */
static int layout_reserve(void **array, uint32_t n, uint32_t *cap, size_t size)
{
	uint32_t ncap;
	void *p;

	if (n < *cap)
		return 0;
	ncap = *cap ? *cap * 2 : 16;
	p = realloc(*array, (size_t)ncap * size);
	if (!p)
		return error_set(GPB_E_NOMEM, "out of memory");
	*array = p;
	*cap = ncap;
	return 0;
}

static void layout_uncompute(gpb_layout *l)
{
	l->computed = false;
	free(l->comp_order);
	free(l->buf_order);
	l->comp_order = l->buf_order = NULL;
}

GPB_EXPORT int gpb_layout_create(gpb_layout **out)
{
	gpb_layout *l;

	error_clear();
	if (!out)
		return error_set(GPB_E_INVALID, "gpb_layout_create: out is NULL");
	l = calloc(1, sizeof(*l));
	if (!l)
		return error_set(GPB_E_NOMEM, "out of memory");
	l->first_root = l->last_root = LAYOUT_NONE;
	*out = l;
	return 0;
}

GPB_EXPORT void gpb_layout_destroy(gpb_layout *l)
{
	if (!l)
		return;
	for (uint32_t i = 0; i < l->ncomps; i++)
		free(l->comps[i].name);
	for (uint32_t i = 0; i < l->nbufs; i++) {
		free(l->bufs[i].name);
		free(l->bufs[i].alias);
	}
	layout_uncompute(l);
	free(l->comps);
	free(l->bufs);
	free(l);
}

GPB_EXPORT int gpb_layout_add_component(gpb_layout *l, const char *name, const char *parent)
{
	struct layout_component *c;
	uint32_t p = LAYOUT_NONE, idx;
	char *copy;
	int rc;

	error_clear();
	if (!l)
		return error_set(GPB_E_INVALID, "gpb_layout_add_component: layout is NULL");
	rc = layout_check_name("component", name);
	if (rc < 0)
		return rc;
	if (layout_find_component(l, name) != LAYOUT_NONE)
		return error_set(GPB_E_LAYOUT_DUPLICATE, "component '%s' exists already", name);
	if (parent) {
		p = layout_find_component(l, parent);
		if (p == LAYOUT_NONE)
			return error_set(GPB_E_NOT_FOUND,
			                 "component '%s': no parent component '%.64s' (add parents "
			                 "first)",
			                 name, parent);
	}
	if (l->ncomps >= GPB_LAYOUT_MAX_COMPONENTS)
		return error_set(GPB_E_LIMIT, "a layout holds at most %d components",
		                 GPB_LAYOUT_MAX_COMPONENTS);
	rc = layout_reserve((void **)&l->comps, l->ncomps, &l->comps_cap, sizeof(*l->comps));
	if (rc < 0)
		return rc;
	copy = strdup(name);
	if (!copy)
		return error_set(GPB_E_NOMEM, "out of memory");
	idx = l->ncomps++;
	c = &l->comps[idx];
	*c = (struct layout_component){
	    .name = copy,
	    .parent = p,
	    .first_child = LAYOUT_NONE,
	    .last_child = LAYOUT_NONE,
	    .next_sibling = LAYOUT_NONE,
	    .first_buffer = LAYOUT_NONE,
	    .last_buffer = LAYOUT_NONE,
	    .depth = p == LAYOUT_NONE ? 0 : l->comps[p].depth + 1,
	};
	/* Children are laid out in the order they were added: append. */
	if (p == LAYOUT_NONE) {
		if (l->last_root == LAYOUT_NONE)
			l->first_root = idx;
		else
			l->comps[l->last_root].next_sibling = idx;
		l->last_root = idx;
	} else {
		if (l->comps[p].last_child == LAYOUT_NONE)
			l->comps[p].first_child = idx;
		else
			l->comps[l->comps[p].last_child].next_sibling = idx;
		l->comps[p].last_child = idx;
	}
	layout_uncompute(l);
	return 0;
}

/* The checks gpb_layout_add_buffer() can make on the descriptor alone.
 * Stores the byte size in @bytes. */
static int layout_check_buffer(const gpb_layout *l, const struct gpb_layout_buffer *d,
                               uint32_t *comp, uint64_t *bytes)
{
	int rc;

	if (!d->component)
		return error_set(GPB_E_INVALID, "gpb_layout_add_buffer: no component");
	*comp = layout_find_component(l, d->component);
	if (*comp == LAYOUT_NONE)
		return error_set(GPB_E_NOT_FOUND, "no component '%.64s'", d->component);
	rc = layout_check_name("buffer", d->name);
	if (rc < 0)
		return rc;
	if (layout_find_buffer(l, *comp, d->name) != LAYOUT_NONE)
		return error_set(GPB_E_LAYOUT_DUPLICATE, "buffer '%s' of '%s' exists already",
		                 d->name, d->component);
	if (d->alias) {
		rc = layout_check_name("alias", d->alias);
		if (rc < 0) {
			char why[160];

			snprintf(why, sizeof(why), "%s", error_message());
			return error_set(rc, "buffer '%s' of '%s': %s", d->name, d->component, why);
		}
		if (strcmp(d->alias, d->name) == 0)
			return error_set(GPB_E_LAYOUT_ALIAS_CYCLE,
			                 "buffer '%s' of '%s' aliases itself", d->name,
			                 d->component);
		if (d->persistent)
			return error_set(GPB_E_LAYOUT_ALIAS_PERSISTENT,
			                 "buffer '%s' of '%s' is persistent and so may not alias "
			                 "'%s'",
			                 d->name, d->component, d->alias);
	}
	if (d->location != GPB_LAYOUT_SHARED && d->location != GPB_LAYOUT_LOCAL)
		return error_set(GPB_E_INVALID,
		                 "buffer '%s' of '%s': location %d is neither shared "
		                 "nor local",
		                 d->name, d->component, (int)d->location);
	if (d->precision != 4 && d->precision != 8)
		return error_set(GPB_E_INVALID,
		                 "buffer '%s' of '%s': precision %u is neither 4 (float32) nor 8 "
		                 "(float64)",
		                 d->name, d->component, d->precision);
	if (d->size == 0)
		return error_set(GPB_E_LAYOUT_ZERO_SIZE, "buffer '%s' of '%s' has 0 elements",
		                 d->name, d->component);
	if (__builtin_mul_overflow(d->size, (uint64_t)d->precision, bytes))
		return error_set(GPB_E_LAYOUT_OVERFLOW,
		                 "buffer '%s' of '%s': %llu elements of %u bytes overflow 64 bits",
		                 d->name, d->component, (unsigned long long)d->size, d->precision);
	return 0;
}

GPB_EXPORT int gpb_layout_add_buffer(gpb_layout *l, const struct gpb_layout_buffer *d)
{
	struct layout_buffer *b;
	uint32_t comp = LAYOUT_NONE, idx;
	uint64_t bytes = 0;
	char *name, *alias = NULL;
	int rc;

	error_clear();
	if (!l || !d)
		return error_set(GPB_E_INVALID, "gpb_layout_add_buffer: NULL argument");
	rc = layout_check_buffer(l, d, &comp, &bytes);
	if (rc < 0)
		return rc;
	if (l->nbufs >= GPB_LAYOUT_MAX_BUFFERS)
		return error_set(GPB_E_LIMIT, "a layout holds at most %d buffers",
		                 GPB_LAYOUT_MAX_BUFFERS);
	rc = layout_reserve((void **)&l->bufs, l->nbufs, &l->bufs_cap, sizeof(*l->bufs));
	if (rc < 0)
		return rc;
	name = strdup(d->name);
	if (d->alias)
		alias = strdup(d->alias);
	if (!name || (d->alias && !alias)) {
		free(name);
		free(alias);
		return error_set(GPB_E_NOMEM, "out of memory");
	}
	idx = l->nbufs++;
	b = &l->bufs[idx];
	*b = (struct layout_buffer){
	    .name = name,
	    .alias = alias,
	    .component = comp,
	    .next = LAYOUT_NONE,
	    .size = d->size,
	    .bytes = bytes,
	    .precision = d->precision,
	    .location = d->location,
	    .persistent = d->persistent != 0,
	};
	if (l->comps[comp].last_buffer == LAYOUT_NONE)
		l->comps[comp].first_buffer = idx;
	else
		l->bufs[l->comps[comp].last_buffer].next = idx;
	l->comps[comp].last_buffer = idx;
	layout_uncompute(l);
	return 0;
}

/* Finds every alias's target and checks the rules that involve both ends. */
static int layout_resolve_aliases(gpb_layout *l)
{
	for (uint32_t i = 0; i < l->nbufs; i++) {
		struct layout_buffer *b = &l->bufs[i];
		const char *comp = l->comps[b->component].name;
		const struct layout_buffer *t;

		b->alias_of = b->host = LAYOUT_NONE;
		b->depth = 0;
		b->align = b->precision;
		b->rel = b->fill = b->offset = 0;
		if (!b->alias)
			continue;
		b->alias_of = layout_find_buffer(l, b->component, b->alias);
		if (b->alias_of == LAYOUT_NONE)
			return error_set(GPB_E_LAYOUT_ALIAS_UNKNOWN,
			                 "buffer '%s' of '%s' aliases '%s', which is no buffer of "
			                 "'%s' (aliases stay within a component)",
			                 b->name, comp, b->alias, comp);
		t = &l->bufs[b->alias_of];
		if (t->persistent)
			return error_set(GPB_E_LAYOUT_ALIAS_PERSISTENT,
			                 "buffer '%s' of '%s' aliases '%s', which is persistent",
			                 b->name, comp, t->name);
		if (t->location != b->location)
			return error_set(
			    GPB_E_LAYOUT_ALIAS_LOCATION,
			    "buffer '%s' of '%s' is %s but its alias '%s' is %s", b->name, comp,
			    b->location == GPB_LAYOUT_SHARED ? "shared" : "local", t->name,
			    t->location == GPB_LAYOUT_SHARED ? "shared" : "local");
	}
	return 0;
}

/*
 * The length of every alias chain, refusing cycles. Each buffer has at most
 * one alias, so a chain is a path: walk it until a buffer whose depth is
 * known (or the end), then walk it again setting depths. @mark: 0 unseen,
 * 1 on the current path, 2 done.
 */
static int layout_alias_depths(gpb_layout *l, unsigned char *mark, unsigned *maxdepth)
{
	*maxdepth = 0;
	for (uint32_t i = 0; i < l->nbufs; i++) {
		uint32_t x = i, len = 0;
		unsigned depth;

		while (x != LAYOUT_NONE && mark[x] == 0) {
			mark[x] = 1;
			len++;
			x = l->bufs[x].alias_of;
		}
		if (x != LAYOUT_NONE && mark[x] == 1) {
			const struct layout_buffer *b = &l->bufs[x];

			return error_set(GPB_E_LAYOUT_ALIAS_CYCLE,
			                 "buffer '%s' of '%s': its aliases lead back to it",
			                 b->name, l->comps[b->component].name);
		}
		if (len == 0)
			continue;
		/* The last buffer of the path has depth d(end) + 1, or 0 when the
		 * path ends without a target. */
		depth = (x == LAYOUT_NONE ? 0 : l->bufs[x].depth + 1) + len - 1;
		for (uint32_t y = i; y != x; y = l->bufs[y].alias_of) {
			l->bufs[y].depth = depth--;
			mark[y] = 2;
		}
		if (l->bufs[i].depth > *maxdepth)
			*maxdepth = l->bufs[i].depth;
	}
	return 0;
}

/*
 * Decides which aliasing buffers ride on their target's storage. Targets are
 * decided before their aliasers (by chain depth), and one target's aliasers
 * in the order they were added: each takes the next aligned bytes of the
 * target that fit, so riders never overlap each other. A target that rides
 * hosts nobody: a rider on it would overlap the storage under it, whose
 * lifetime nobody vouched for.
 */
static void layout_place_riders(gpb_layout *l, unsigned maxdepth)
{
	for (unsigned d = 1; d <= maxdepth; d++) {
		for (uint32_t i = 0; i < l->nbufs; i++) {
			struct layout_buffer *b = &l->bufs[i], *t;
			uint64_t at;

			if (b->depth != d)
				continue;
			t = &l->bufs[b->alias_of];
			if (t->host != LAYOUT_NONE)
				continue;
			if (!layout_align_up(t->fill, b->precision, &at) || at > t->bytes ||
			    b->bytes > t->bytes - at)
				continue;
			b->host = b->alias_of;
			b->rel = at;
			t->fill = at + b->bytes;
			if (b->precision > t->align)
				t->align = b->precision;
		}
	}
}

/* Each component's alignment per space: the largest among its own storage
 * and its descendants'. comp_order is depth first, so walking it backwards
 * sees every child before its parent. */
static void layout_component_aligns(gpb_layout *l)
{
	for (uint32_t i = 0; i < l->ncomps; i++) {
		for (int s = 0; s < LAYOUT_SPACES; s++)
			l->comps[i].align[s] = 1;
	}
	for (uint32_t k = l->ncomps; k-- > 0;) {
		struct layout_component *c = &l->comps[l->comp_order[k]];

		for (uint32_t i = c->first_buffer; i != LAYOUT_NONE; i = l->bufs[i].next) {
			const struct layout_buffer *b = &l->bufs[i];
			int s = layout_space(b);

			if (b->host == LAYOUT_NONE && b->align > c->align[s])
				c->align[s] = b->align;
		}
		if (c->parent != LAYOUT_NONE) {
			struct layout_component *p = &l->comps[c->parent];

			for (int s = 0; s < LAYOUT_SPACES; s++) {
				if (c->align[s] > p->align[s])
					p->align[s] = c->align[s];
			}
		}
	}
}

static int layout_overflow(const gpb_layout *l, uint32_t comp)
{
	return error_set(GPB_E_LAYOUT_OVERFLOW, "component '%s': its region overflows 64 bits",
	                 l->comps[comp].name);
}

/*
 * Lays out component @ci with its region starting at @base (aligned to the
 * component's alignment by the caller): its own buffers, then each child's
 * region, then the riders on its buffers' storage. Recursion depth is the
 * tree's, bounded by GPB_LAYOUT_MAX_COMPONENTS.
 */
static int layout_place(gpb_layout *l, uint32_t ci, const uint64_t base[LAYOUT_SPACES])
{
	struct layout_component *c = &l->comps[ci];
	uint64_t cursor[LAYOUT_SPACES], end;
	int rc;

	for (int s = 0; s < LAYOUT_SPACES; s++)
		c->offset[s] = cursor[s] = base[s];
	for (uint32_t i = c->first_buffer; i != LAYOUT_NONE; i = l->bufs[i].next) {
		struct layout_buffer *b = &l->bufs[i];
		int s = layout_space(b);

		if (b->host != LAYOUT_NONE)
			continue;
		if (!layout_align_up(cursor[s], b->align, &b->offset) ||
		    __builtin_add_overflow(b->offset, b->bytes, &cursor[s]))
			return layout_overflow(l, ci);
	}
	for (uint32_t k = c->first_child; k != LAYOUT_NONE; k = l->comps[k].next_sibling) {
		uint64_t child[LAYOUT_SPACES];

		for (int s = 0; s < LAYOUT_SPACES; s++) {
			if (!layout_align_up(cursor[s], l->comps[k].align[s], &child[s]))
				return layout_overflow(l, ci);
		}
		rc = layout_place(l, k, child);
		if (rc < 0)
			return rc;
		for (int s = 0; s < LAYOUT_SPACES; s++) {
			if (__builtin_add_overflow(child[s], l->comps[k].bytes[s], &cursor[s]))
				return layout_overflow(l, ci);
		}
	}
	/* Rounded to the alignment so that the next thread's slice (for a
	 * root) or the next sibling's region starts aligned. */
	for (int s = 0; s < LAYOUT_SPACES; s++) {
		if (!layout_align_up(cursor[s], c->align[s], &end))
			return layout_overflow(l, ci);
		c->bytes[s] = end - base[s];
	}
	for (uint32_t i = c->first_buffer; i != LAYOUT_NONE; i = l->bufs[i].next) {
		struct layout_buffer *b = &l->bufs[i];

		if (b->host != LAYOUT_NONE)
			b->offset = l->bufs[b->host].offset + b->rel;
	}
	return 0;
}

/* Depth-first component order and the buffer order that follows it. */
static int layout_orders(gpb_layout *l)
{
	uint32_t nc = 0, nb = 0, c = l->first_root;

	l->comp_order = malloc(((size_t)l->ncomps + 1) * sizeof(*l->comp_order));
	l->buf_order = malloc(((size_t)l->nbufs + 1) * sizeof(*l->buf_order));
	if (!l->comp_order || !l->buf_order)
		return error_set(GPB_E_NOMEM, "out of memory");
	/* Iterative preorder: after a component, its first child; else its
	 * next sibling, or its nearest ancestor's. */
	while (c != LAYOUT_NONE) {
		l->comp_order[nc++] = c;
		for (uint32_t i = l->comps[c].first_buffer; i != LAYOUT_NONE; i = l->bufs[i].next)
			l->buf_order[nb++] = i;
		if (l->comps[c].first_child != LAYOUT_NONE) {
			c = l->comps[c].first_child;
			continue;
		}
		while (c != LAYOUT_NONE && l->comps[c].next_sibling == LAYOUT_NONE)
			c = l->comps[c].parent;
		if (c != LAYOUT_NONE)
			c = l->comps[c].next_sibling;
	}
	return 0;
}

GPB_EXPORT int gpb_layout_compute(gpb_layout *l)
{
	static const uint64_t zero[LAYOUT_SPACES];
	unsigned char *mark;
	unsigned maxdepth;
	int rc;

	error_clear();
	if (!l)
		return error_set(GPB_E_INVALID, "gpb_layout_compute: layout is NULL");
	layout_uncompute(l);
	rc = layout_resolve_aliases(l);
	if (rc < 0)
		return rc;
	mark = calloc((size_t)l->nbufs + 1, 1);
	if (!mark)
		return error_set(GPB_E_NOMEM, "out of memory");
	rc = layout_alias_depths(l, mark, &maxdepth);
	free(mark);
	if (rc < 0)
		return rc;
	layout_place_riders(l, maxdepth);
	rc = layout_orders(l);
	if (rc < 0)
		goto fail;
	layout_component_aligns(l);
	/* Each root is a kernel of its own: its slice starts at 0. */
	for (uint32_t r = l->first_root; r != LAYOUT_NONE; r = l->comps[r].next_sibling) {
		rc = layout_place(l, r, zero);
		if (rc < 0)
			goto fail;
	}
	l->computed = true;
	return 0;
fail:
	layout_uncompute(l);
	return rc;
}

static int layout_check_computed(const gpb_layout *l, const char *fn)
{
	if (!l)
		return error_set(GPB_E_INVALID, "%s: layout is NULL", fn);
	if (!l->computed)
		return error_set(GPB_E_INVALID,
		                 "%s: the layout changed or was never computed; call "
		                 "gpb_layout_compute() first",
		                 fn);
	return 0;
}

/* The computed component @name, for the queries, which also need somewhere
 * to put their answer (@dest). */
static int layout_lookup_component(const gpb_layout *l, const char *name, const void *dest,
                                   const char *fn, uint32_t *out)
{
	int rc = layout_check_computed(l, fn);

	if (rc < 0)
		return rc;
	if (!name || !dest)
		return error_set(GPB_E_INVALID, "%s: NULL argument", fn);
	*out = layout_find_component(l, name);
	if (*out == LAYOUT_NONE)
		return error_set(GPB_E_NOT_FOUND, "no component '%.64s'", name);
	return 0;
}

static void layout_fill_placement(const gpb_layout *l, const struct layout_buffer *b,
                                  struct gpb_layout_placement *out)
{
	*out = (struct gpb_layout_placement){
	    .space = layout_space(b),
	    .offset = b->offset,
	    .bytes = b->bytes,
	    .aliased_with = b->host == LAYOUT_NONE ? NULL : l->bufs[b->host].name,
	};
}

GPB_EXPORT int gpb_layout_buffer_info(const gpb_layout *l, const char *component, const char *name,
                                      struct gpb_layout_placement *out)
{
	uint32_t c, b;
	int rc;

	error_clear();
	rc = layout_lookup_component(l, component, out, "gpb_layout_buffer_info", &c);
	if (rc < 0)
		return rc;
	if (!name)
		return error_set(GPB_E_INVALID, "gpb_layout_buffer_info: name is NULL");
	b = layout_find_buffer(l, c, name);
	if (b == LAYOUT_NONE)
		return error_set(GPB_E_NOT_FOUND, "no buffer '%.64s' in '%s'", name, component);
	layout_fill_placement(l, &l->bufs[b], out);
	return 0;
}

static void layout_fill_sizes(const struct layout_component *c, struct gpb_layout_sizes *out)
{
	*out = (struct gpb_layout_sizes){
	    .shared = c->bytes[GPB_LAYOUT_SPACE_SHARED],
	    .local = c->bytes[GPB_LAYOUT_SPACE_LOCAL],
	    .persistent_local = c->bytes[GPB_LAYOUT_SPACE_PERSISTENT_LOCAL],
	    .shared_offset = c->offset[GPB_LAYOUT_SPACE_SHARED],
	    .local_offset = c->offset[GPB_LAYOUT_SPACE_LOCAL],
	    .persistent_local_offset = c->offset[GPB_LAYOUT_SPACE_PERSISTENT_LOCAL],
	};
}

GPB_EXPORT int gpb_layout_component_sizes(const gpb_layout *l, const char *component,
                                          struct gpb_layout_sizes *out)
{
	uint32_t c;
	int rc;

	error_clear();
	rc = layout_lookup_component(l, component, out, "gpb_layout_component_sizes", &c);
	if (rc < 0)
		return rc;
	layout_fill_sizes(&l->comps[c], out);
	return 0;
}

GPB_EXPORT int gpb_layout_block_size(const gpb_layout *l, const char *component, uint32_t budget,
                                     uint32_t max_budget, uint32_t requested, uint32_t *threads)
{
	uint64_t per_thread, need;
	uint32_t c;
	int rc;

	error_clear();
	rc = layout_lookup_component(l, component, threads, "gpb_layout_block_size", &c);
	if (rc < 0)
		return rc;
	if (!budget)
		budget = GPB_LAYOUT_DEFAULT_BUDGET;
	if (!max_budget)
		max_budget = GPB_LAYOUT_DEFAULT_BUDGET;
	if (budget > max_budget)
		return error_set(GPB_E_INVALID,
		                 "a budget of %u bytes is above the device's limit of %u bytes",
		                 budget, max_budget);
	if (requested < GPB_LAYOUT_WARP || requested > GPB_LAYOUT_MAX_THREADS ||
	    requested % GPB_LAYOUT_WARP)
		return error_set(GPB_E_INVALID,
		                 "a block of %u threads is not a whole number of warps (%u) up to "
		                 "%u",
		                 requested, GPB_LAYOUT_WARP, GPB_LAYOUT_MAX_THREADS);
	per_thread = l->comps[c].bytes[GPB_LAYOUT_SPACE_SHARED];
	/* Fewer threads per block is the only knob: a warp at a time. */
	for (uint32_t t = requested; t >= GPB_LAYOUT_WARP; t -= GPB_LAYOUT_WARP) {
		if (!__builtin_mul_overflow(per_thread, (uint64_t)t, &need) && need <= budget) {
			*threads = t;
			return 0;
		}
	}
	return error_set(GPB_E_LAYOUT_NO_FIT,
	                 "'%s' needs %llu shared bytes per thread: one warp of %u threads needs "
	                 "more than the budget of %u bytes",
	                 component, (unsigned long long)per_thread, GPB_LAYOUT_WARP, budget);
}

GPB_EXPORT int gpb_layout_buffer_at(const gpb_layout *l, size_t index,
                                    struct gpb_layout_buffer *desc,
                                    struct gpb_layout_placement *out)
{
	const struct layout_buffer *b;
	int rc;

	error_clear();
	rc = layout_check_computed(l, "gpb_layout_buffer_at");
	if (rc < 0)
		return rc;
	if (index >= l->nbufs)
		return error_set(GPB_E_NOT_FOUND, "no buffer %zu: the layout has %u", index,
		                 l->nbufs);
	b = &l->bufs[l->buf_order[index]];
	if (desc)
		*desc = (struct gpb_layout_buffer){
		    .component = l->comps[b->component].name,
		    .name = b->name,
		    .size = b->size,
		    .location = b->location,
		    .persistent = b->persistent,
		    .alias = b->alias,
		    .precision = b->precision,
		};
	if (out)
		layout_fill_placement(l, b, out);
	return 0;
}

GPB_EXPORT int gpb_layout_component_at(const gpb_layout *l, size_t index,
                                       struct gpb_layout_component_info *out)
{
	const struct layout_component *c;
	int rc;

	error_clear();
	rc = layout_check_computed(l, "gpb_layout_component_at");
	if (rc < 0)
		return rc;
	if (!out)
		return error_set(GPB_E_INVALID, "gpb_layout_component_at: out is NULL");
	if (index >= l->ncomps)
		return error_set(GPB_E_NOT_FOUND, "no component %zu: the layout has %u", index,
		                 l->ncomps);
	c = &l->comps[l->comp_order[index]];
	out->name = c->name;
	out->parent = c->parent == LAYOUT_NONE ? NULL : l->comps[c->parent].name;
	out->depth = c->depth;
	layout_fill_sizes(c, &out->sizes);
	return 0;
}
