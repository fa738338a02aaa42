/*
 * poolbench.c - the daemon's pool (pool/pool.c, linked directly) against a
 * fake backend of fixed capacity: pure and deterministic.
 *
 * Fragmentation: one churn trace (log-uniform sizes from 256 B to 64 MiB;
 * each step allocates with probability 0.6, else frees a uniformly chosen
 * live allocation, so the live set grows until the device is full) run
 * through the pool and through a direct allocator (one backend allocation per
 * request) until each one's first out-of-memory. Both consume the same random
 * sequence, so they see the same requests up to their own failure.
 *
 * Scaling: the mean time of a pool operation in a churn (free one live
 * allocation, allocate a new one) with a given number of live allocations.
 */
#include "bench.h"

#include <errno.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "pool.h"

#define MIN_SIZE 256ull
#define MAX_SIZE (64ull << 20)
#define P_ALLOC  0.6

struct fake_backend {
	uint64_t capacity;
	uint64_t used;
};

struct fake_slab {
	uint64_t size;
};

static int fake_create(void *ctx, uint64_t size, uint32_t uid, void **slab)
{
	struct fake_backend *fb = ctx;
	struct fake_slab *s;

	(void)uid;
	if (size > fb->capacity - fb->used)
		return -ENOMEM;
	s = malloc(sizeof(*s));
	if (!s)
		return -EIO;
	s->size = size;
	fb->used += size;
	*slab = s;
	return 0;
}

static void fake_destroy(void *ctx, void *slab)
{
	struct fake_backend *fb = ctx;
	struct fake_slab *s = slab;

	fb->used -= s->size;
	free(s);
}

/* What the daemon's backends say too: what a create could still get. */
static uint64_t fake_room(void *ctx)
{
	struct fake_backend *fb = ctx;

	return fb->capacity - fb->used;
}

static const struct pool_slab_ops fake_ops = {
    .create = fake_create, .destroy = fake_destroy, .room = fake_room};

/* ---- fragmentation -------------------------------------------------------- */

enum frag_kind { FRAG_POOL, FRAG_DIRECT, FRAG_DIRECT_2M };

struct frag_live {
	uint64_t size;            /* requested */
	uint64_t held;            /* what the allocator holds for it */
	struct pool_block *block; /* FRAG_POOL */
};

struct frag_result {
	uint64_t steps, live_count, live_bytes, held_bytes, failed_size;
};

static void frag_run(enum frag_kind kind, uint64_t capacity, uint64_t seed, uint64_t threshold,
                     struct frag_result *out)
{
	struct fake_backend fb = {.capacity = capacity};
	/* broker_create's configuration, with the large threshold given
	 * (0: the pool's default, the slab size). */
	struct pool_config cfg = {
	    .slab_size = POOL_DEFAULT_SLAB, .large_threshold = threshold, .keep_empty = 1};
	struct pool *pool = kind == FRAG_POOL ? pool_create(&cfg, &fake_ops, &fb) : NULL;
	struct bench_rng rng = {.s = seed};
	size_t cap = 1024, n = 0;
	struct frag_live *live = bench_xmalloc(cap * sizeof(*live));
	uint64_t live_bytes = 0, held_bytes = 0;

	if (kind == FRAG_POOL && !pool)
		bench_die("pool_create failed");
	for (uint64_t step = 1;; step++) {
		/* Both draws happen every step whatever the branch, so every
		 * allocator consumes the same sequence. */
		double u = bench_rng_unit(&rng);
		uint64_t size = bench_rng_loguniform(&rng, MIN_SIZE, MAX_SIZE);
		uint64_t pick = bench_rng_next(&rng);

		if (u >= P_ALLOC && n > 0) {
			size_t i = (size_t)(((unsigned __int128)pick * n) >> 64);

			if (kind == FRAG_POOL)
				pool_free(pool, live[i].block);
			else
				fb.used -= live[i].held;
			live_bytes -= live[i].size;
			held_bytes -= live[i].held;
			live[i] = live[--n];
			continue;
		}
		struct frag_live a = {.size = size};
		int rc = 0;

		if (kind == FRAG_POOL) {
			rc = pool_alloc(pool, 1000, size, 0, &a.block);
			if (rc == 0)
				a.held = pool_block_size(a.block);
			else if (rc != -ENOMEM)
				bench_die("pool_alloc: %s", strerror(-rc));
		} else {
			a.held = kind == FRAG_DIRECT
			             ? size
			             : (size + (2u << 20) - 1) & ~((2ull << 20) - 1);
			if (a.held > fb.capacity - fb.used)
				rc = -ENOMEM;
			else
				fb.used += a.held;
		}
		if (rc) {
			out->steps = step;
			out->failed_size = size;
			break;
		}
		if (n == cap) {
			cap *= 2;
			live = realloc(live, cap * sizeof(*live));
			if (!live)
				bench_die("out of memory");
		}
		live[n++] = a;
		live_bytes += a.size;
		held_bytes += a.held;
	}
	out->live_count = n;
	out->live_bytes = live_bytes;
	out->held_bytes = held_bytes;
	if (kind == FRAG_POOL) {
		char msg[256];

		if (pool_check(pool, msg, sizeof(msg)) < 0)
			bench_die("pool_check after the churn: %s", msg);
		pool_destroy(pool);
	}
	free(live);
}

void bench_fragmentation(uint64_t capacity, uint64_t seed, struct bench_frag *out)
{
	struct frag_result p, d, d2, w;

	frag_run(FRAG_POOL, capacity, seed, 0, &p);
	frag_run(FRAG_DIRECT, capacity, seed, 0, &d);
	frag_run(FRAG_DIRECT_2M, capacity, seed, 0, &d2);
	/* For comparison, the old rule: dedicated slabs from half a slab up
	 * (requests between half a slab and a slab never used the holes of
	 * standard slabs). */
	frag_run(FRAG_POOL, capacity, seed, POOL_DEFAULT_SLAB / 2, &w);
	out->half_live = (double)w.live_bytes / (double)capacity;
	out->pool_live = (double)p.live_bytes / (double)capacity;
	out->pool_used = (double)p.held_bytes / (double)capacity;
	out->direct_live = (double)d.live_bytes / (double)capacity;
	out->direct2m_live = (double)d2.live_bytes / (double)capacity;
	out->steps = p.steps;
	out->live_count = p.live_count;
	out->failed_size = p.failed_size;
	out->direct_steps = d.steps;
}

/* ---- scaling -------------------------------------------------------------- */

#define RECENT 16

double bench_pool_op_ns(unsigned live, unsigned ops, bool lifo)
{
	struct fake_backend fb = {.capacity = 1ull << 62};
	struct pool *pool = pool_create(NULL, &fake_ops, &fb);
	struct pool_block **blocks = bench_xmalloc(live * sizeof(*blocks));
	uint64_t *sizes = bench_xmalloc(ops * sizeof(*sizes));
	uint32_t *victims = bench_xmalloc(ops * sizeof(*victims));
	uint32_t recent[RECENT];
	struct bench_rng rng = {.s = 42 + live};
	uint64_t t0, t1;
	unsigned warm = ops / 4;

	if (!pool)
		bench_die("pool_create failed");
	for (unsigned i = 0; i < live; i++) {
		if (pool_alloc(pool, 1000, bench_rng_loguniform(&rng, MIN_SIZE, MAX_SIZE), 0,
		               &blocks[i]) < 0)
			bench_die("pool_alloc failed while filling");
	}
	for (unsigned i = 0; i < RECENT; i++)
		recent[i] = (uint32_t)(live - 1 - i % live);
	/* The trace is drawn before the clock starts: only pool calls (and
	 * reading the two arrays in order) are timed. */
	for (unsigned i = 0; i < ops; i++) {
		sizes[i] = bench_rng_loguniform(&rng, MIN_SIZE, MAX_SIZE);
		if (lifo) {
			/* Frees among the RECENT newest allocations, the
			 * temporaries of a real application. */
			unsigned r = (unsigned)bench_rng_below(&rng, RECENT);

			victims[i] = recent[r];
			memmove(&recent[1], &recent[0], r * sizeof(recent[0]));
			recent[0] = victims[i];
		} else {
			victims[i] = (uint32_t)bench_rng_below(&rng, live);
		}
	}
	for (unsigned i = 0; i < warm; i++) {
		uint32_t v = victims[i];

		pool_free(pool, blocks[v]);
		if (pool_alloc(pool, 1000, sizes[i], 0, &blocks[v]) < 0)
			bench_die("pool_alloc failed");
	}
	t0 = bench_now_ns();
	for (unsigned i = warm; i < ops; i++) {
		uint32_t v = victims[i];

		pool_free(pool, blocks[v]);
		if (pool_alloc(pool, 1000, sizes[i], 0, &blocks[v]) < 0)
			bench_die("pool_alloc failed");
	}
	t1 = bench_now_ns();
	pool_destroy(pool);
	free(blocks);
	free(sizes);
	free(victims);
	return (double)(t1 - t0) / (2.0 * (ops - warm));
}

/* Resident bytes of this process (the pool's arenas are mmap'd, which
 * malloc statistics do not see). */
static uint64_t rss_bytes(void)
{
	unsigned long size = 0, resident = 0;
	FILE *f = fopen("/proc/self/statm", "r");
	if (!f || fscanf(f, "%lu %lu", &size, &resident) != 2)
		bench_die("cannot read /proc/self/statm");
	fclose(f);
	return (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

uint64_t bench_pool_bytes(unsigned live)
{
	struct fake_backend fb = {.capacity = 1ull << 62};
	struct bench_rng rng = {.s = 42 + live};
	uint64_t r0 = rss_bytes(), r1;
	struct pool *pool = pool_create(NULL, &fake_ops, &fb);
	struct pool_block *b;

	if (!pool)
		bench_die("pool_create failed");
	for (unsigned i = 0; i < live; i++) {
		if (pool_alloc(pool, 1000, bench_rng_loguniform(&rng, MIN_SIZE, MAX_SIZE), 0, &b) <
		    0)
			bench_die("pool_alloc failed while filling");
	}
	r1 = rss_bytes();
	pool_destroy(pool);
	return r1 > r0 ? r1 - r0 : 0;
}

#define CHASE_NODE 64 /* a cache line: one load per node */

double bench_chase_ns(uint64_t bytes, unsigned loads)
{
	size_t n = bytes / CHASE_NODE < 2 ? 2 : (size_t)(bytes / CHASE_NODE);
	uint32_t *order = bench_xmalloc(n * sizeof(*order));
	char *mem = bench_xmalloc(n * CHASE_NODE);
	struct bench_rng rng = {.s = 7};
	uint64_t t0, t1;
	size_t at = 0;

	/* One random cycle through every node (Sattolo), so that no load can
	 * be predicted or prefetched and none is skipped. */
	for (size_t i = 0; i < n; i++)
		order[i] = (uint32_t)i;
	for (size_t i = n - 1; i > 0; i--) {
		size_t j = (size_t)bench_rng_below(&rng, i);
		uint32_t t = order[i];
		order[i] = order[j];
		order[j] = t;
	}
	for (size_t i = 0; i < n; i++)
		*(uint64_t *)(mem + (size_t)order[i] * CHASE_NODE) =
		    (uint64_t)order[(i + 1) % n] * CHASE_NODE;
	free(order);
	/* Once round (warm the TLB as a long-lived pool would have it), then
	 * the timed loads. */
	for (size_t i = 0; i < n && i < loads; i++)
		at = *(volatile uint64_t *)(mem + at);
	t0 = bench_now_ns();
	for (unsigned i = 0; i < loads; i++)
		at = *(volatile uint64_t *)(mem + at);
	t1 = bench_now_ns();
	if (at == UINT64_MAX)
		bench_die("unreachable");
	free(mem);
	return (double)(t1 - t0) / loads;
}
