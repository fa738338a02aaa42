/*
 * pool-helpers.h - the fake slab backend and the helpers shared by the pool
 * unit tests (test-pool*.c).
 */
#ifndef GPB_TEST_POOL_HELPERS_H
#define GPB_TEST_POOL_HELPERS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "pool.h"

#define KiB (UINT64_C(1) << 10)
#define MiB (UINT64_C(1) << 20)
#define GiB (UINT64_C(1) << 30)

#define FAKE_MAGIC 0x51ab51ab51ab51abull

struct fake_slab {
	uint64_t magic;
	uint64_t size;
	uint32_t uid;
	bool alive;
};

struct fake {
	uint64_t capacity; /* 0: unlimited */
	uint64_t in_use;
	unsigned calls;    /* create calls, failed ones included */
	unsigned creates;  /* slabs created */
	unsigned destroys; /* slabs destroyed */
	unsigned enomem;   /* -ENOMEM answers for want of capacity */
	int fail_err;      /* the next fail_times calls fail with fail_err */
	unsigned fail_times;
	uint64_t room_over; /* room() overstates by this (a driver's free figure) */
	unsigned rooms;     /* room() calls */
	uint64_t last_try;  /* the size of the last create call, failed or not */
	uint64_t last_size;
	uint32_t last_uid;
	struct fake_slab **all;
	unsigned nall, cap;
};

/* The fake backend; its ctx is a struct fake. Its room() is capacity less
 * in_use (plus room_over), UINT64_MAX without a capacity. */
extern const struct pool_slab_ops fake_ops;
/* The same without room(): a backend that cannot say. */
extern const struct pool_slab_ops fake_ops_blind;
void fake_destroy(void *ctx, void *slab);

unsigned fake_live(const struct fake *f);
/* Every slab ever created has been destroyed exactly once. */
void fake_fini(struct fake *f);
/* The fake slab behind a pool slab, which must be alive. */
struct fake_slab *fake_of(const struct pool_slab *slab);

/* pool_check must pass. */
void check_pool(const struct pool *pool);
struct pool *pool_new(struct fake *f, uint64_t slab, uint64_t thr, unsigned keep);
/* pool_alloc must succeed; checks the pool afterwards. */
struct pool_block *alloc_ok(struct pool *pool, uint32_t uid, uint64_t size, uint64_t align);
void free_ok(struct pool *pool, struct pool_block *b);
struct pool_stats stats_of(const struct pool *pool);

#endif
