/*
 * pool-helpers.c - the fake slab backend and the helpers shared by the pool
 * unit tests (test-pool*.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "pool-helpers.h"

static int fake_create(void *ctx, uint64_t size, uint32_t uid, void **slab)
{
	struct fake *f = ctx;
	struct fake_slab *s;

	f->calls++;
	f->last_try = size;
	if (f->fail_times) {
		f->fail_times--;
		return f->fail_err;
	}
	if (f->capacity && f->in_use + size > f->capacity) {
		f->enomem++;
		return -ENOMEM;
	}
	s = calloc(1, sizeof(*s));
	assert_non_null(s);
	if (f->nall == f->cap) {
		f->cap = f->cap ? 2 * f->cap : 64;
		f->all = realloc(f->all, f->cap * sizeof(*f->all));
		assert_non_null(f->all);
	}
	f->all[f->nall++] = s;
	*s = (struct fake_slab){.magic = FAKE_MAGIC, .size = size, .uid = uid, .alive = true};
	f->in_use += size;
	f->creates++;
	f->last_size = size;
	f->last_uid = uid;
	*slab = s;
	return 0;
}

void fake_destroy(void *ctx, void *slab)
{
	struct fake *f = ctx;
	struct fake_slab *s = slab;

	assert_int_equal(s->magic, FAKE_MAGIC);
	assert_true(s->alive); /* destroyed twice? */
	s->alive = false;
	f->in_use -= s->size;
	f->destroys++;
}

static uint64_t fake_room(void *ctx)
{
	struct fake *f = ctx;

	f->rooms++;
	return f->capacity ? f->capacity - f->in_use + f->room_over : UINT64_MAX;
}

const struct pool_slab_ops fake_ops = {
    .create = fake_create, .destroy = fake_destroy, .room = fake_room};
const struct pool_slab_ops fake_ops_blind = {.create = fake_create, .destroy = fake_destroy};

unsigned fake_live(const struct fake *f)
{
	return f->creates - f->destroys;
}

/* Every slab ever created has been destroyed exactly once. */
void fake_fini(struct fake *f)
{
	assert_int_equal(f->creates, f->destroys);
	assert_int_equal(f->in_use, 0);
	for (unsigned i = 0; i < f->nall; i++) {
		assert_false(f->all[i]->alive);
		free(f->all[i]);
	}
	free(f->all);
	memset(f, 0, sizeof(*f));
}

struct fake_slab *fake_of(const struct pool_slab *slab)
{
	struct fake_slab *s = pool_slab_backend(slab);

	assert_int_equal(s->magic, FAKE_MAGIC);
	assert_true(s->alive);
	return s;
}

void check_pool(const struct pool *pool)
{
	char msg[256] = "";

	if (pool_check(pool, msg, sizeof(msg)))
		fail_msg("pool_check: %s", msg);
}

struct pool *pool_new(struct fake *f, uint64_t slab, uint64_t thr, unsigned keep)
{
	struct pool_config cfg = {.slab_size = slab, .large_threshold = thr, .keep_empty = keep};
	struct pool *pool = pool_create(&cfg, &fake_ops, f);

	assert_non_null(pool);
	return pool;
}

struct pool_block *alloc_ok(struct pool *pool, uint32_t uid, uint64_t size, uint64_t align)
{
	struct pool_block *b = NULL;
	int rc = pool_alloc(pool, uid, size, align, &b);

	if (rc)
		fail_msg("pool_alloc(%u, %" PRIu64 ", %" PRIu64 ") = %d", uid, size, align, rc);
	assert_non_null(b);
	check_pool(pool);
	return b;
}

void free_ok(struct pool *pool, struct pool_block *b)
{
	pool_free(pool, b);
	check_pool(pool);
}

struct pool_stats stats_of(const struct pool *pool)
{
	struct pool_stats st;

	pool_get_stats(pool, &st);
	return st;
}
