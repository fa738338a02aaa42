/*
 * test-layout-model.c - the layout planner against its documented rules on
 * random layouts (fixed seeds): random component trees, buffers in random
 * order with random locations, persistence, precisions and aliases, some of
 * them invalid. Everything is checked from the placements the public calls
 * report, never from the planner's insides:
 * - a layout is refused exactly when an alias is unknown, persistent, across
 *   locations or part of a cycle, with one of those codes;
 * - every buffer is aligned to its element size and lies in its component's
 *   region and in every ancestor's; sibling regions do not overlap;
 * - no two buffers share bytes unless one declared the other as its alias,
 *   neither being persistent;
 * - aliasers of one target sit inside it, packed in the order they were
 *   added, whenever they fit; those that do not fit, and those whose target
 *   itself sits inside another buffer, have storage of their own;
 * - every component's size is the extent of its subtree's buffers rounded to
 *   their largest element size;
 * - the block size is the largest whole-warp count that fits the budget.
 */
#include <stdio.h>
#include <string.h>

#include "layout-helpers.h"

#define MAX_COMPS 8
#define MAX_BUFS  (MAX_COMPS * 7)

struct mcomp {
	char name[16];
	int parent; /* -1: a root */
};

struct mbuf {
	int comp;
	char name[16];
	char alias[16]; /* "" for none */
	uint64_t size;
	enum gpb_layout_location loc;
	int persistent;
	unsigned prec;
	bool added;
	struct gpb_layout_placement p;
};

struct model {
	struct mcomp comps[MAX_COMPS];
	int ncomps;
	struct mbuf bufs[MAX_BUFS]; /* in the order they are added */
	int nbufs;
	struct gpb_layout_sizes sizes[MAX_COMPS];
};

/* What the whole run saw, so that it can insist on having seen each case. */
static struct {
	unsigned computed, refused[32], riders, not_fitting, hosted_by_rider, no_fit;
} seen;

static uint64_t rng;

static uint64_t rnd(uint64_t n)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng % n;
}

static int find(const struct model *m, int comp, const char *name)
{
	for (int i = 0; i < m->nbufs; i++) {
		if (m->bufs[i].added && m->bufs[i].comp == comp &&
		    strcmp(m->bufs[i].name, name) == 0)
			return i;
	}
	return -1;
}

static void generate(struct model *m)
{
	memset(m, 0, sizeof(*m));
	m->ncomps = 1 + (int)rnd(MAX_COMPS);
	for (int c = 0; c < m->ncomps; c++) {
		snprintf(m->comps[c].name, sizeof(m->comps[c].name), "c%d", c);
		m->comps[c].parent = c == 0 || rnd(5) == 0 ? -1 : (int)rnd((uint64_t)c);
		for (int k = (int)rnd(7); k > 0; k--) {
			struct mbuf *b = &m->bufs[m->nbufs++];

			b->comp = c;
			snprintf(b->name, sizeof(b->name), "b%d", k);
			b->size = rnd(8) == 0 ? 1 + rnd(3000) : 1 + rnd(12);
			b->loc = rnd(2) ? GPB_LAYOUT_SHARED : GPB_LAYOUT_LOCAL;
			b->persistent = rnd(5) == 0;
			b->prec = rnd(2) ? 4 : 8;
		}
	}
	/* Aliases: mostly a valid target; sometimes anything, or nothing. */
	for (int i = 0; i < m->nbufs; i++) {
		struct mbuf *b = &m->bufs[i];
		int cand[MAX_BUFS], n = 0, pick;

		if (rnd(2) || (b->persistent && rnd(10)))
			continue;
		for (int j = 0; j < m->nbufs; j++) {
			const struct mbuf *t = &m->bufs[j];

			/* Mostly earlier ones, so that most layouts have no cycle. */
			if (j != i && t->comp == b->comp && t->loc == b->loc && !t->persistent &&
			    (j < i || rnd(100) == 0))
				cand[n++] = j;
		}
		if (rnd(200) == 0) {
			snprintf(b->alias, sizeof(b->alias), "nope");
			continue;
		}
		if (!n && rnd(10))
			continue;
		pick = n && rnd(50) ? cand[rnd((uint64_t)n)] : (int)rnd((uint64_t)m->nbufs);
		if (m->bufs[pick].comp == b->comp || rnd(4) == 0)
			memcpy(b->alias, m->bufs[pick].name, sizeof(b->alias));
	}
	/* Added in a random order: the order is part of the rules. */
	for (int i = m->nbufs - 1; i > 0; i--) {
		int j = (int)rnd((uint64_t)i + 1);
		struct mbuf tmp = m->bufs[i];

		m->bufs[i] = m->bufs[j];
		m->bufs[j] = tmp;
	}
}

static void build(gpb_layout *l, struct model *m)
{
	for (int c = 0; c < m->ncomps; c++) {
		int p = m->comps[c].parent;

		assert_int_equal(
		    gpb_layout_add_component(l, m->comps[c].name, p < 0 ? NULL : m->comps[p].name),
		    0);
	}
	for (int i = 0; i < m->nbufs; i++) {
		struct mbuf *b = &m->bufs[i];
		const char *alias = b->alias[0] ? b->alias : NULL;
		int want = 0;

		if (alias && strcmp(alias, b->name) == 0)
			want = GPB_E_LAYOUT_ALIAS_CYCLE;
		else if (alias && b->persistent)
			want = GPB_E_LAYOUT_ALIAS_PERSISTENT;
		assert_int_equal(lt_add(l, m->comps[b->comp].name, b->name, b->size, b->loc,
		                        b->persistent, alias, b->prec),
		                 want);
		b->added = want == 0;
		if (want)
			seen.refused[-want]++;
	}
}

/* The codes gpb_layout_compute() may answer, as a bit set of -code; 0 when
 * it must succeed. Alias errors come first; cycles only without them. */
static unsigned expected_refusals(const struct model *m)
{
	unsigned codes = 0;
	int target[MAX_BUFS];

	for (int i = 0; i < m->nbufs; i++) {
		const struct mbuf *b = &m->bufs[i];

		target[i] = -1;
		if (!b->added || !b->alias[0])
			continue;
		target[i] = find(m, b->comp, b->alias);
		if (target[i] < 0)
			codes |= 1u << -GPB_E_LAYOUT_ALIAS_UNKNOWN;
		else if (m->bufs[target[i]].persistent)
			codes |= 1u << -GPB_E_LAYOUT_ALIAS_PERSISTENT;
		else if (m->bufs[target[i]].loc != b->loc)
			codes |= 1u << -GPB_E_LAYOUT_ALIAS_LOCATION;
	}
	if (codes)
		return codes;
	for (int i = 0; i < m->nbufs; i++) {
		int x = i, steps = 0;

		while (x >= 0 && steps <= m->nbufs) {
			x = target[x];
			steps++;
		}
		if (x >= 0)
			return 1u << -GPB_E_LAYOUT_ALIAS_CYCLE;
	}
	return 0;
}

static enum gpb_layout_space space_of(const struct mbuf *b)
{
	if (b->loc == GPB_LAYOUT_SHARED)
		return GPB_LAYOUT_SPACE_SHARED;
	return b->persistent ? GPB_LAYOUT_SPACE_PERSISTENT_LOCAL : GPB_LAYOUT_SPACE_LOCAL;
}

static void region(const struct gpb_layout_sizes *s, enum gpb_layout_space sp, uint64_t *off,
                   uint64_t *bytes)
{
	*off = sp == GPB_LAYOUT_SPACE_SHARED  ? s->shared_offset
	       : sp == GPB_LAYOUT_SPACE_LOCAL ? s->local_offset
	                                      : s->persistent_local_offset;
	*bytes = sp == GPB_LAYOUT_SPACE_SHARED  ? s->shared
	         : sp == GPB_LAYOUT_SPACE_LOCAL ? s->local
	                                        : s->persistent_local;
}

static int root_of(const struct model *m, int c)
{
	while (m->comps[c].parent >= 0)
		c = m->comps[c].parent;
	return c;
}

static bool is_ancestor(const struct model *m, int a, int c)
{
	for (; c >= 0; c = m->comps[c].parent) {
		if (c == a)
			return true;
	}
	return false;
}

static bool overlap(uint64_t a, uint64_t an, uint64_t b, uint64_t bn)
{
	return an && bn && a < b + bn && b < a + an;
}

/* b declared t as its alias, and neither is persistent. */
static bool may_share(const struct mbuf *b, const struct mbuf *t)
{
	return b->comp == t->comp && !b->persistent && !t->persistent &&
	       strcmp(b->alias, t->name) == 0;
}

static void check_buffers(const gpb_layout *l, struct model *m)
{
	for (int i = 0; i < m->nbufs; i++) {
		struct mbuf *b = &m->bufs[i];

		if (!b->added)
			continue;
		b->p = lt_place(l, m->comps[b->comp].name, b->name);
		assert_int_equal(b->p.space, space_of(b));
		assert_int_equal(b->p.bytes, b->size * b->prec);
		assert_int_equal(b->p.offset % b->prec, 0);
		if (b->p.aliased_with)
			assert_string_equal(b->p.aliased_with, b->alias);
		for (int a = b->comp; a >= 0; a = m->comps[a].parent) {
			uint64_t off, bytes;

			region(&m->sizes[a], b->p.space, &off, &bytes);
			assert_true(b->p.offset >= off);
			assert_true(b->p.offset + b->p.bytes <= off + bytes);
		}
	}
	for (int i = 0; i < m->nbufs; i++) {
		for (int j = i + 1; j < m->nbufs; j++) {
			const struct mbuf *a = &m->bufs[i], *b = &m->bufs[j];

			if (!a->added || !b->added || a->p.space != b->p.space ||
			    root_of(m, a->comp) != root_of(m, b->comp) ||
			    !overlap(a->p.offset, a->p.bytes, b->p.offset, b->p.bytes))
				continue;
			assert_true(may_share(a, b) || may_share(b, a));
		}
	}
}

/* The packing rule, target by target, in the order the aliasers were added. */
static void check_packing(const struct model *m)
{
	for (int t = 0; t < m->nbufs; t++) {
		const struct mbuf *tb = &m->bufs[t];
		uint64_t fill = 0;

		if (!tb->added || tb->persistent)
			continue;
		for (int i = 0; i < m->nbufs; i++) {
			const struct mbuf *b = &m->bufs[i];
			uint64_t at = (fill + b->prec - 1) / b->prec * b->prec;

			if (!b->added || b->comp != tb->comp || strcmp(b->alias, tb->name) != 0)
				continue;
			if (tb->p.aliased_with) {
				assert_null(b->p.aliased_with);
				seen.hosted_by_rider++;
			} else if (at + b->p.bytes <= tb->p.bytes) {
				assert_non_null(b->p.aliased_with);
				assert_int_equal(b->p.offset, tb->p.offset + at);
				fill = at + b->p.bytes;
				seen.riders++;
			} else {
				assert_null(b->p.aliased_with);
				seen.not_fitting++;
			}
		}
	}
}

static void check_regions(const struct model *m)
{
	for (int c = 0; c < m->ncomps; c++) {
		for (int sp = 0; sp < 3; sp++) {
			uint64_t off, bytes, end = 0, align = 1;
			bool any = false;

			region(&m->sizes[c], (enum gpb_layout_space)sp, &off, &bytes);
			if (m->comps[c].parent < 0)
				assert_int_equal(off, 0);
			for (int i = 0; i < m->nbufs; i++) {
				const struct mbuf *b = &m->bufs[i];

				if (!b->added || (int)b->p.space != sp ||
				    !is_ancestor(m, c, b->comp))
					continue;
				any = true;
				if (b->p.offset + b->p.bytes > end)
					end = b->p.offset + b->p.bytes;
				if (b->prec > align)
					align = b->prec;
			}
			if (!any) {
				assert_int_equal(bytes, 0);
				continue;
			}
			assert_int_equal(off % align, 0);
			assert_int_equal(off + bytes, (end + align - 1) / align * align);
			/* Siblings: disjoint regions. */
			for (int d = c + 1; d < m->ncomps; d++) {
				uint64_t doff, dbytes;

				if (m->comps[d].parent != m->comps[c].parent ||
				    m->comps[c].parent < 0)
					continue;
				region(&m->sizes[d], (enum gpb_layout_space)sp, &doff, &dbytes);
				assert_false(overlap(off, bytes, doff, dbytes));
			}
		}
	}
}

static void check_block_sizes(const gpb_layout *l, const struct model *m)
{
	for (int c = 0; c < m->ncomps; c++) {
		uint32_t budget = rnd(3) ? (uint32_t)rnd(120000) : 0, got = 0, want = 0;
		uint32_t requested = GPB_LAYOUT_WARP * (1 + (uint32_t)rnd(32));
		uint64_t eff = budget ? budget : GPB_LAYOUT_DEFAULT_BUDGET;
		int rc;

		if (m->comps[c].parent >= 0)
			continue;
		for (uint32_t t = GPB_LAYOUT_WARP; t <= requested; t += GPB_LAYOUT_WARP) {
			if (m->sizes[c].shared * t <= eff)
				want = t;
		}
		rc = gpb_layout_block_size(l, m->comps[c].name, budget, 232448, requested, &got);
		if (want) {
			assert_int_equal(rc, 0);
			assert_int_equal(got, want);
		} else {
			assert_int_equal(rc, GPB_E_LAYOUT_NO_FIT);
			seen.no_fit++;
		}
	}
}

static void check_iterators(const gpb_layout *l, const struct model *m)
{
	struct gpb_layout_component_info ci;
	struct gpb_layout_buffer d;
	struct gpb_layout_placement p;
	int added = 0;
	size_t n = 0;

	for (int i = 0; i < m->nbufs; i++)
		added += m->bufs[i].added;
	for (; gpb_layout_buffer_at(l, n, &d, &p) == 0; n++) {
		struct gpb_layout_placement q = lt_place(l, d.component, d.name);

		assert_int_equal(p.offset, q.offset);
		assert_int_equal(p.bytes, q.bytes);
	}
	assert_int_equal(n, added);
	for (n = 0; gpb_layout_component_at(l, n, &ci) == 0; n++)
		;
	assert_int_equal(n, m->ncomps);
}

static void one_layout(void)
{
	struct model m;
	gpb_layout *l = lt_new();
	unsigned want;
	int rc;

	generate(&m);
	build(l, &m);
	want = expected_refusals(&m);
	rc = gpb_layout_compute(l);
	if (want) {
		assert_true(rc < 0 && rc >= -31);
		if (!(want & (1u << -rc)))
			fail_msg("compute: %s (%s); expected one of 0x%x", gpb_strerror(rc),
			         gpb_last_error(), want);
		seen.refused[-rc]++;
		gpb_layout_destroy(l);
		return;
	}
	if (rc != 0)
		fail_msg("compute: %s (%s)", gpb_strerror(rc), gpb_last_error());
	seen.computed++;
	for (int c = 0; c < m.ncomps; c++)
		m.sizes[c] = lt_sizes(l, m.comps[c].name);
	check_buffers(l, &m);
	check_packing(&m);
	check_regions(&m);
	check_block_sizes(l, &m);
	check_iterators(l, &m);
	gpb_layout_destroy(l);
}

static void test_random_layouts(void **state)
{
	static const uint64_t seeds[] = {1, 2, 0x9e3779b97f4a7c15ull, 0xdeadbeefull};
	(void)state;

	for (size_t s = 0; s < sizeof(seeds) / sizeof(seeds[0]); s++) {
		rng = seeds[s];
		for (int i = 0; i < 500; i++)
			one_layout();
	}
	printf("# 2000 layouts: %u computed, refused: %u unknown, %u persistent, %u location, "
	       "%u cycle; %u riders, %u aliasers too big, %u on a rider; %u without a warp\n",
	       seen.computed, seen.refused[-GPB_E_LAYOUT_ALIAS_UNKNOWN],
	       seen.refused[-GPB_E_LAYOUT_ALIAS_PERSISTENT],
	       seen.refused[-GPB_E_LAYOUT_ALIAS_LOCATION], seen.refused[-GPB_E_LAYOUT_ALIAS_CYCLE],
	       seen.riders, seen.not_fitting, seen.hosted_by_rider, seen.no_fit);
	/* The generator must reach every case, or the checks prove little. */
	assert_true(seen.computed >= 1000);
	assert_true(seen.riders > 0 && seen.not_fitting > 0 && seen.hosted_by_rider > 0);
	assert_true(seen.no_fit > 0);
	assert_true(seen.refused[-GPB_E_LAYOUT_ALIAS_UNKNOWN] > 0);
	assert_true(seen.refused[-GPB_E_LAYOUT_ALIAS_PERSISTENT] > 0);
	assert_true(seen.refused[-GPB_E_LAYOUT_ALIAS_LOCATION] > 0);
	assert_true(seen.refused[-GPB_E_LAYOUT_ALIAS_CYCLE] > 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_random_layouts),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
