/*
 * test-pool-model.c - unit tests of the device memory sub-allocator
 * (pool/pool.c, pool/pool_tlsf.c): a randomized test against a reference
 * model.
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
	uint64_t used, uid_used[NUIDS], ooms, eio, tails;
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

/* Whether the fake slab s is behind one of the n pool slabs in known. */
static bool slab_known(const struct fake_slab *s, struct pool_slab *const *known, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		if (fake_of(known[i]) == s)
			return true;
	}
	return false;
}

/* The slow, exact comparison. `no_idle`: an -ENOMEM or a full trim has just
 * released every empty unpinned slab, so no cache may be left. */
static void model_verify(const struct pool *pool, const struct fake *f, struct model *m,
                         bool no_idle)
{
	uint64_t reserved = 0, gaps = 0, largest = 0, known = 0, cached = 0, cached_bytes = 0;
	struct pool_stats st = stats_of(pool);
	const struct mblock *v = m->sorted;
	struct pool_slab **slabs = calloc(m->n + m->npinned + 1, sizeof(*slabs));

	assert_non_null(slabs);

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
		slabs[known++] = slab;
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
		slabs[known++] = s;
	}
	/* Whatever else the backend holds for the pool is cache: empty
	 * standard slabs, some of them tails (smaller, as the device had
	 * room for), each one free range. */
	for (unsigned i = 0; i < f->nall; i++) {
		const struct fake_slab *s = f->all[i];

		if (!s->alive || slab_known(s, slabs, (unsigned)known))
			continue;
		assert_true(s->size <= m->cfg->slab_size && s->size % (2 * MiB) == 0);
		cached++;
		cached_bytes += s->size;
		largest = s->size > largest ? s->size : largest;
	}
	free(slabs);
	assert_int_equal(st.slabs, known + cached);
	assert_true(cached <= (uint64_t)m->cfg->keep_empty * NUIDS);
	if (no_idle)
		assert_int_equal(cached, 0);
	assert_int_equal(st.reserved, reserved + cached_bytes);
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
	unsigned calls = f->calls, creates = f->creates;
	/* The smallest slab that serves the request: a standard one may
	 * shrink to that (a tail slab) when the device has no more. */
	uint64_t min = size > m->threshold ? 0 : (rsize + 2 * MiB - 1) / (2 * MiB) * (2 * MiB);
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
		bool tail = min && min < m->cfg->slab_size;
		uint64_t need = tail                   ? min
		                : size <= m->threshold ? m->cfg->slab_size
		                : m->cfg->exact        ? rsize
		                                : (rsize + 2 * MiB - 1) / (2 * MiB) * (2 * MiB);

		m->ooms++;
		/* Standard, trim and again; then the tail the room hint
		 * says, which is the request's own size when it fails. */
		assert_int_equal(f->calls, calls + 2 + tail);
		assert_true(!tail || f->last_try == min);
		assert_true(f->in_use + need > m->capacity);
		model_check(pool, f, m);
		model_verify(pool, f, m, true);
		return;
	}
	assert_int_equal(rc, 0);
	assert_int_equal(pool_block_size(b), rsize);
	assert_int_equal(pool_block_offset(b) % a, 0);
	assert_true(pool_block_offset(b) + rsize <= pool_slab_size(pool_block_slab(b)));
	assert_int_equal(pool_slab_uid(pool_block_slab(b)), 1000 + u);
	assert_int_equal(fake_of(pool_block_slab(b))->uid, 1000 + u);
	assert_int_equal(fake_of(pool_block_slab(b))->size, pool_slab_size(pool_block_slab(b)));
	/* An exact dedicated slab is the block and nothing else. */
	if (m->cfg->exact && size > m->threshold)
		assert_int_equal(pool_slab_size(pool_block_slab(b)), rsize);
	/* A new standard slab is a standard one, or a tail: all that was
	 * left of the device when a standard one did not fit, rounded down
	 * to 2 MiB, and enough for the request. */
	if (f->creates != creates && min &&
	    pool_slab_size(pool_block_slab(b)) != m->cfg->slab_size) {
		uint64_t tail = pool_slab_size(pool_block_slab(b));

		assert_true(tail < m->cfg->slab_size && tail >= min && tail % (2 * MiB) == 0);
		assert_true(f->in_use - tail + m->cfg->slab_size > m->capacity);
		assert_true(m->capacity - f->in_use < 2 * MiB);
		m->tails++;
	}
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

/* Returns how many tail slabs the run saw made. */
static uint64_t model_run(const struct pool_config *cfg, uint64_t capacity, unsigned ops,
                          uint64_t seed)
{
	struct fake f = {.capacity = capacity};
	struct pool *pool = pool_create(cfg, &fake_ops, &f);
	struct model m = {.cfg = cfg, .capacity = capacity, .rng = seed};
	struct pool_stats st;
	unsigned trims = 0;

	assert_non_null(pool);
	m.threshold = cfg->large_threshold ? cfg->large_threshold : cfg->slab_size;
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
			model_verify(pool, &f, &m, no_idle);
	}
	while (m.npinned)
		model_unpin(pool, &m, m.npinned - 1);
	while (m.n)
		model_free(pool, &m, rng_next(&m.rng) % m.n);
	model_check(pool, &f, &m);
	model_verify(pool, &f, &m, false);
	st = stats_of(pool);
	print_message("  slab %" PRIu64 " MiB, keep %u: %" PRIu64 " allocs, %" PRIu64
	              " ooms, %" PRIu64 " injected errors, %u slabs created (%" PRIu64
	              " tails), %u trimmed, peak %" PRIu64 " MiB\n",
	              cfg->slab_size / MiB, cfg->keep_empty, st.allocs, st.ooms, m.eio, f.creates,
	              m.tails, trims, st.peak / MiB);
	/* Pressure was real, and everything but the cache went back: standard
	 * slabs, or tails (model_verify knows each one's size). */
	assert_true(st.ooms > 0 && m.eio > 0 && st.allocs > ops / 4);
	assert_true(st.slabs <= (uint64_t)cfg->keep_empty * NUIDS);
	assert_true(st.reserved <= st.slabs * cfg->slab_size);
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
	return m.tails;
}

static void test_random_model(void **state)
{
	static const struct {
		struct pool_config cfg;
		uint64_t capacity;
		unsigned ops;
	} runs[] = {
	    {{4 * MiB, 0, 1, false}, 40 * MiB, 20000},
	    {{2 * MiB, 2 * MiB, 0, false}, 24 * MiB, 15000},
	    {{8 * MiB, 1 * MiB, 2, false}, 64 * MiB, 15000},
	    /* The direct allocator's: every request its own exact slab. */
	    {{2 * MiB, 1, 0, true}, 24 * MiB, 15000},
	};
	const char *env = getenv("GPB_TEST_SEED");
	uint64_t seed = env ? strtoull(env, NULL, 0) : 0x9e3779b97f4a7c15ull, tails = 0;

	(void)state;
	print_message("test_random_model: seed %#" PRIx64 " (set GPB_TEST_SEED to change)\n", seed);
	for (unsigned i = 0; i < sizeof(runs) / sizeof(runs[0]); i++)
		tails += model_run(&runs[i].cfg, runs[i].capacity, runs[i].ops, seed + i);
	/* The last part of the device was used: a run whose slabs are above
	 * the 2 MiB minimum makes tails whenever it fills the device. */
	assert_true(tails > 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_random_model),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
