/*
 * fuzz-pool.c - the pool engine (pool/pool.h) under fuzzer-chosen
 * operation sequences: alloc, free, pin, unpin and trim with sizes,
 * alignments and uids from the input, over a fake backend whose capacity
 * and failures the input also picks.
 *
 * After every operation pool_check() must pass. A model of the live blocks
 * checks what pool_check cannot: each grant is inside its slab, aligned,
 * rounded as documented, of the uid that asked, and overlaps no other live
 * block; used/live and per-uid usage match the model; a pinned slab
 * survives until unpinned. At the end everything is freed and trimmed and
 * every backend slab must have been destroyed exactly once.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz-input.h"
#include "pool.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_LIVE  256
#define MAX_PINS  32
#define MAX_SLABS 4096
#define NUIDS     4
#define MAGIC     0x51ab51ab51ab51abull

struct fslab {
	uint64_t magic;
	uint64_t size;
	uint32_t uid;
	bool alive;
};

struct fake {
	uint64_t capacity, in_use;
	uint64_t granule; /* every slab size is a multiple of it */
	int fail_err;
	unsigned creates, destroys;
	struct fslab *all[MAX_SLABS];
	unsigned nall;
};

struct live {
	struct pool_block *b;
	uint32_t uid;
	uint64_t size; /* rounded */
};

static int fake_create(void *ctx, uint64_t size, uint32_t uid, void **slab)
{
	struct fake *f = ctx;
	FUZZ_ASSERT(size > 0 && size % f->granule == 0, "slab of %llu bytes",
	            (unsigned long long)size);
	if (f->fail_err) {
		int err = f->fail_err;
		f->fail_err = 0;
		return err;
	}
	if (f->in_use + size > f->capacity || size > f->capacity || f->nall == MAX_SLABS)
		return -ENOMEM;
	struct fslab *s = calloc(1, sizeof(*s));
	FUZZ_ASSERT(s, "out of memory");
	*s = (struct fslab){.magic = MAGIC, .size = size, .uid = uid, .alive = true};
	f->all[f->nall++] = s;
	f->in_use += size;
	f->creates++;
	*slab = s;
	return 0;
}

static void fake_destroy(void *ctx, void *slab)
{
	struct fake *f = ctx;
	struct fslab *s = slab;
	FUZZ_ASSERT(s->magic == MAGIC && s->alive, "slab destroyed twice or never created");
	s->alive = false;
	f->in_use -= s->size;
	f->destroys++;
}

static const struct pool_slab_ops fake_ops = {.create = fake_create, .destroy = fake_destroy};

static struct fslab *fslab_of(const struct pool_slab *slab)
{
	struct fslab *s = pool_slab_backend(slab);
	FUZZ_ASSERT(s->magic == MAGIC && s->alive, "block in a dead slab");
	return s;
}

static void check(const struct pool *pool, const struct live *live, int nlive)
{
	char msg[256] = "";
	if (pool_check(pool, msg, sizeof(msg)) < 0)
		FUZZ_FAIL("pool_check: %s", msg);
	struct pool_stats st;
	uint64_t used = 0, uid_used[NUIDS] = {0};
	for (int i = 0; i < nlive; i++) {
		used += live[i].size;
		uid_used[live[i].uid] += live[i].size;
	}
	pool_get_stats(pool, &st);
	FUZZ_ASSERT(st.used == used && st.live == (uint64_t)nlive,
	            "stats: used %llu/%llu live %llu/%d", (unsigned long long)st.used,
	            (unsigned long long)used, (unsigned long long)st.live, nlive);
	FUZZ_ASSERT(st.free == st.reserved - st.used && st.peak >= st.used, "stats sums");
	for (uint32_t u = 0; u < NUIDS; u++)
		FUZZ_ASSERT(pool_uid_used(pool, u) == uid_used[u], "uid %u used", u);
}

static void check_grant(const struct live *live, int nlive, const struct live *g, uint64_t asked,
                        uint64_t align)
{
	struct pool_slab *slab = pool_block_slab(g->b);
	struct fslab *fs = fslab_of(slab);
	uint64_t off = pool_block_offset(g->b), size = pool_block_size(g->b);
	FUZZ_ASSERT(size >= asked && size - asked < POOL_GRANULE && size % POOL_GRANULE == 0,
	            "size %llu for %llu", (unsigned long long)size, (unsigned long long)asked);
	FUZZ_ASSERT(off % (align ? align : POOL_GRANULE) == 0, "offset %llu, align %llu",
	            (unsigned long long)off, (unsigned long long)align);
	FUZZ_ASSERT(off + size <= pool_slab_size(slab) && pool_slab_size(slab) == fs->size,
	            "block outside its slab");
	FUZZ_ASSERT(pool_slab_uid(slab) == g->uid && fs->uid == g->uid, "uid %u in a slab of %u",
	            g->uid, fs->uid);
	for (int i = 0; i < nlive; i++) {
		if (live[i].b == g->b || pool_block_slab(live[i].b) != slab)
			continue;
		uint64_t o = pool_block_offset(live[i].b), s = pool_block_size(live[i].b);
		FUZZ_ASSERT(off + size <= o || o + s <= off, "blocks overlap");
	}
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_input in = {data, size};
	static struct fake f;
	static struct live live[MAX_LIVE];
	static struct pool_slab *pins[MAX_PINS];
	int nlive = 0, npins = 0;
	memset(&f, 0, sizeof(f));

	struct pool_config cfg = {.slab_size = POOL_SLAB_ALIGN * (1 + fuzz_u8(&in) % 4)};
	uint8_t keep = fuzz_u8(&in);
	cfg.keep_empty = keep % 3;
	/* The direct allocator's exact dedicated slabs. */
	cfg.exact = keep & 0x80;
	f.granule = cfg.exact ? POOL_GRANULE : POOL_SLAB_ALIGN;
	uint8_t thr = fuzz_u8(&in);
	cfg.large_threshold = thr < 128 ? 0 : (uint64_t)(thr - 127) << 14;
	f.capacity = POOL_SLAB_ALIGN * (1 + fuzz_u8(&in) % 64);
	struct pool *pool = pool_create(&cfg, &fake_ops, &f);
	FUZZ_ASSERT(pool, "pool_create");

	while (fuzz_more(&in)) {
		uint8_t op = fuzz_u8(&in);
		switch (op % 8) {
		case 0:
		case 1: { /* alloc */
			uint32_t uid = fuzz_u8(&in) % NUIDS;
			uint64_t sz = fuzz_size(&in);
			uint8_t a = fuzz_u8(&in);
			uint64_t align = a < 128 ? 0 : a < 250 ? 1ull << (8 + a % 14) : (uint64_t)a;
			if (nlive == MAX_LIVE)
				break;
			struct pool_stats before;
			pool_get_stats(pool, &before);
			struct pool_block *b = NULL;
			int rc = pool_alloc(pool, uid, sz, align, &b);
			bool bad = sz == 0 ||
			           (align && ((align & (align - 1)) || align > POOL_MAX_ALIGNMENT ||
			                      align < POOL_GRANULE));
			if (rc == 0) {
				FUZZ_ASSERT(!bad, "bad request size %llu align %llu granted",
				            (unsigned long long)sz, (unsigned long long)align);
				live[nlive] = (struct live){b, uid, pool_block_size(b)};
				check_grant(live, nlive, &live[nlive], sz, align);
				nlive++;
			} else {
				FUZZ_ASSERT(rc == -EINVAL || rc == -ENOMEM || rc == -EIO, "rc %d",
				            rc);
				FUZZ_ASSERT(!bad || rc == -EINVAL, "bad request answered %d", rc);
			}
			break;
		}
		case 2:
		case 3: /* free */
			if (nlive) {
				int i = fuzz_u8(&in) % nlive;
				pool_free(pool, live[i].b);
				live[i] = live[--nlive];
			}
			break;
		case 4: /* pin the slab of a live block */
			if (nlive && npins < MAX_PINS) {
				struct pool_slab *s = pool_block_slab(live[fuzz_u8(&in) % nlive].b);
				pool_slab_pin(s);
				pins[npins++] = s;
			}
			break;
		case 5: /* unpin */
			if (npins) {
				int i = fuzz_u8(&in) % npins;
				fslab_of(pins[i]); /* pinned slabs stay alive */
				pool_slab_unpin(pool, pins[i]);
				pins[i] = pins[--npins];
			}
			break;
		case 6: { /* trim */
			uint8_t t = fuzz_u8(&in);
			pool_trim(pool, t % NUIDS, t & 0x80);
			break;
		}
		case 7: /* the next slab creation fails */
			f.fail_err = fuzz_u8(&in) & 1 ? -EIO : -ENOMEM;
			break;
		}
		for (int i = 0; i < npins; i++)
			fslab_of(pins[i]);
		check(pool, live, nlive);
	}

	while (npins)
		pool_slab_unpin(pool, pins[--npins]);
	while (nlive)
		pool_free(pool, live[--nlive].b);
	check(pool, live, 0);
	pool_trim(pool, 0, true);
	struct pool_stats st;
	pool_get_stats(pool, &st);
	FUZZ_ASSERT(st.slabs == 0 && st.reserved == 0, "%llu slabs kept after trimming all",
	            (unsigned long long)st.slabs);
	FUZZ_ASSERT(f.creates == f.destroys, "%u slabs created, %u destroyed", f.creates,
	            f.destroys);
	pool_destroy(pool);
	for (unsigned i = 0; i < f.nall; i++)
		free(f.all[i]);
	return 0;
}
