/*
 * pool_tlsf.c - the free-range index of a heap: TLSF-style segregated lists
 * with bitmaps, the fit search, and the block split and merge that keep a
 * slab tiled by blocks.
 *
 * Size classes count granules (g = bytes / 256). Below SL_COUNT granules a
 * class is exact (fl 0, sl g). Above, fl is 1 + log2(g) - SL_LOG2 and each
 * power-of-two range [2^k, 2^(k+1)) is cut into SL_COUNT equal sub-classes,
 * so a class spans at most 1/16 of its lower bound. A request is rounded up
 * to the next class boundary before the search: the head of the first
 * non-empty list at or above that class always fits, which makes the search
 * two bitmap lookups. When that fails a short, bounded scan of the lists
 * between the request's own class and the rounded one catches the ranges
 * that fit exactly (a hole the same size as the request, an aligned start).
 */
#include "pool_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* How many free ranges the fallback scan may look at before giving up and
 * asking for a new slab: keeps the worst case of an alloc constant. */
#define FIT_SCAN_MAX 32

/* Block structs recycled by coalescing are kept for the next split rather
 * than going back to malloc each time; capped so a mass free returns them. */
#define SPARE_MAX 64

static inline unsigned log2_u64(uint64_t v)
{
	return 63 - __builtin_clzll(v);
}

/* The class a free range of `size` bytes is filed under. */
static void class_of(uint64_t size, unsigned *fl, unsigned *sl)
{
	uint64_t g = size / POOL_GRANULE;
	unsigned k;

	if (g < SL_COUNT) {
		*fl = 0;
		*sl = (unsigned)g;
		return;
	}
	k = log2_u64(g);
	*fl = k - SL_LOG2 + 1;
	*sl = (unsigned)(g >> (k - SL_LOG2)) - SL_COUNT;
}

/* The lowest class whose every range holds `size` bytes; false when that
 * would be above the largest class. */
static bool class_round(uint64_t size, unsigned *fl, unsigned *sl)
{
	uint64_t g = size / POOL_GRANULE;

	if (g >= SL_COUNT)
		g += (1ull << (log2_u64(g) - SL_LOG2)) - 1;
	class_of(g * POOL_GRANULE, fl, sl);
	return *fl < FL_COUNT;
}

void tlsf_insert(struct pool *pool, struct pool_heap *heap, struct pool_block *b)
{
	unsigned fl, sl;

	class_of(block_size(b), &fl, &sl);
	b->prev_free = NULL;
	b->next_free = heap->lists[fl][sl];
	if (b->next_free)
		b->next_free->prev_free = b;
	heap->lists[fl][sl] = b;
	heap->sl_map[fl] |= 1u << sl;
	heap->fl_map |= 1ull << fl;
	pool->free_blocks++;
}

void tlsf_remove(struct pool *pool, struct pool_heap *heap, struct pool_block *b)
{
	unsigned fl, sl;

	class_of(block_size(b), &fl, &sl);
	if (b->prev_free)
		b->prev_free->next_free = b->next_free;
	else
		heap->lists[fl][sl] = b->next_free;
	if (b->next_free)
		b->next_free->prev_free = b->prev_free;
	if (!heap->lists[fl][sl]) {
		heap->sl_map[fl] &= ~(1u << sl);
		if (!heap->sl_map[fl])
			heap->fl_map &= ~(1ull << fl);
	}
	b->prev_free = b->next_free = NULL;
	pool->free_blocks--;
}

/* Head of the first non-empty list at or above (*fl, *sl); updates both. */
static struct pool_block *list_find(const struct pool_heap *heap, unsigned *fl, unsigned *sl)
{
	uint32_t sm = heap->sl_map[*fl] & (~0u << *sl);

	if (!sm) {
		uint64_t fm = *fl + 1 < FL_COUNT ? heap->fl_map & (~0ull << (*fl + 1)) : 0;

		if (!fm)
			return NULL;
		*fl = __builtin_ctzll(fm);
		sm = heap->sl_map[*fl];
	}
	*sl = __builtin_ctz(sm);
	return heap->lists[*fl][*sl];
}

static bool block_fits(const struct pool_block *b, uint64_t size, uint64_t align)
{
	uint64_t front = align_up(b->offset, align) - b->offset;

	return front < block_size(b) && block_size(b) - front >= size;
}

struct pool_block *tlsf_fit(const struct pool_heap *heap, uint64_t size, uint64_t align,
                            uint64_t need)
{
	unsigned fl, sl, budget = FIT_SCAN_MAX;
	struct pool_block *b;

	if (class_round(need, &fl, &sl)) {
		b = list_find(heap, &fl, &sl);
		if (b)
			return b;
	}
	/* Nothing at or above the rounded class, so whatever fits is in the
	 * few lists below it: look at a bounded number of ranges. */
	class_of(size, &fl, &sl);
	while (budget && (b = list_find(heap, &fl, &sl))) {
		for (; b && budget; b = b->next_free, budget--) {
			if (block_fits(b, size, align))
				return b;
		}
		if (++sl == SL_COUNT) {
			sl = 0;
			if (++fl == FL_COUNT)
				break;
		}
	}
	return NULL;
}

int tlsf_spare_reserve(struct pool *pool, unsigned n)
{
	while (pool->nspare < n) {
		struct pool_block *b = malloc(sizeof(*b));

		if (!b)
			return -ENOMEM;
		b->next_free = pool->spare;
		pool->spare = b;
		pool->nspare++;
	}
	return 0;
}

struct pool_block *tlsf_spare_take(struct pool *pool)
{
	struct pool_block *b = pool->spare;

	pool->spare = b->next_free;
	pool->nspare--;
	memset(b, 0, sizeof(*b));
	return b;
}

void tlsf_spare_put(struct pool *pool, struct pool_block *b)
{
	if (pool->nspare >= SPARE_MAX) {
		free(b);
		return;
	}
	b->next_free = pool->spare;
	pool->spare = b;
	pool->nspare++;
}

/* Inserts n after b in address order, as a piece of b's slab. */
static void phys_link_after(struct pool_block *b, struct pool_block *n)
{
	n->slab = b->slab;
	n->prev_phys = b;
	n->next_phys = b->next_phys;
	if (b->next_phys)
		b->next_phys->prev_phys = n;
	b->next_phys = n;
}

static void phys_unlink(struct pool_block *b)
{
	if (b->prev_phys)
		b->prev_phys->next_phys = b->next_phys;
	if (b->next_phys)
		b->next_phys->prev_phys = b->prev_phys;
}

struct pool_block *tlsf_split(struct pool *pool, struct pool_block *b, uint64_t size,
                              uint64_t align)
{
	struct pool_heap *heap = b->slab->heap;
	uint64_t front = align_up(b->offset, align) - b->offset;

	tlsf_remove(pool, heap, b);
	if (front) {
		/* The front remainder stays free in b; its left neighbour is
		 * live (no two free neighbours), so no coalescing is due. */
		struct pool_block *rest = tlsf_spare_take(pool);

		phys_link_after(b, rest);
		rest->offset = b->offset + front;
		block_set(rest, block_size(b) - front, false);
		block_set(b, front, true);
		tlsf_insert(pool, heap, b);
		b = rest;
	}
	if (block_size(b) > size) {
		struct pool_block *tail = tlsf_spare_take(pool);

		phys_link_after(b, tail);
		tail->offset = b->offset + size;
		block_set(tail, block_size(b) - size, true);
		tlsf_insert(pool, heap, tail);
	}
	block_set(b, size, false);
	return b;
}

void tlsf_merge(struct pool *pool, struct pool_heap *heap, struct pool_block *block)
{
	struct pool_block *n;

	block_set(block, block_size(block), true);

	n = block->prev_phys;
	if (n && block_is_free(n)) {
		tlsf_remove(pool, heap, n);
		block_set(n, block_size(n) + block_size(block), true);
		phys_unlink(block);
		tlsf_spare_put(pool, block);
		block = n;
	}
	n = block->next_phys;
	if (n && block_is_free(n)) {
		tlsf_remove(pool, heap, n);
		block_set(block, block_size(block) + block_size(n), true);
		phys_unlink(n);
		tlsf_spare_put(pool, n);
	}
	tlsf_insert(pool, heap, block);
}

/* Every range in a higher class is larger than every range in a lower one,
 * so the largest is in the highest non-empty list. */
uint64_t tlsf_largest_free(const struct pool_heap *heap)
{
	const struct pool_block *b;
	unsigned fl, sl;
	uint64_t max = 0;

	if (!heap->fl_map)
		return 0;
	fl = log2_u64(heap->fl_map);
	sl = 31 - __builtin_clz(heap->sl_map[fl]);
	for (b = heap->lists[fl][sl]; b; b = b->next_free) {
		if (block_size(b) > max)
			max = block_size(b);
	}
	return max;
}

int tlsf_check_lists(const struct pool_heap *heap, uint64_t free_blocks, char *msg,
                     unsigned msg_len)
{
	uint64_t seen = 0;
	unsigned bfl, bsl;

	CHECK(!(heap->fl_map >> FL_COUNT), "uid %u: fl bitmap overflows", heap->uid);
	for (unsigned fl = 0; fl < FL_COUNT; fl++) {
		CHECK(!!(heap->fl_map & (1ull << fl)) == !!heap->sl_map[fl] &&
		          !(heap->sl_map[fl] >> SL_COUNT),
		      "uid %u: bitmap of class %u", heap->uid, fl);
		for (unsigned sl = 0; sl < SL_COUNT; sl++) {
			const struct pool_block *b, *prev = NULL;

			CHECK(!!(heap->sl_map[fl] & (1u << sl)) == !!heap->lists[fl][sl],
			      "uid %u: bitmap of class %u/%u", heap->uid, fl, sl);
			for (b = heap->lists[fl][sl]; b; prev = b, b = b->next_free) {
				CHECK(++seen <= free_blocks && block_is_free(b) &&
				          b->slab->heap == heap && b->prev_free == prev,
				      "uid %u: bad entry in list %u/%u", heap->uid, fl, sl);
				class_of(block_size(b), &bfl, &bsl);
				CHECK(bfl == fl && bsl == sl,
				      "uid %u: %" PRIu64 " bytes filed in %u/%u", heap->uid,
				      block_size(b), fl, sl);
			}
		}
	}
	CHECK(seen == free_blocks, "uid %u: %" PRIu64 " free blocks, %" PRIu64 " listed", heap->uid,
	      free_blocks, seen);
	return 0;
}
