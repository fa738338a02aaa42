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
	if (g >> 48)
		return false;
	class_of(g * POOL_GRANULE, fl, sl);
	return *fl < FL_COUNT;
}

void tlsf_insert(struct pool *pool, struct pool_heap *heap, uint32_t bi, struct pool_block *b,
                 uint64_t size)
{
	unsigned fl, sl;

	class_of(size, &fl, &sl);
	b->prev_free = NIL;
	b->next_free = heap->lists[fl][sl];
	if (b->next_free)
		blk_at(pool, b->next_free)->prev_free = bi;
	heap->lists[fl][sl] = bi;
	heap->sl_map[fl] |= 1u << sl;
	heap->fl_map |= 1ull << fl;
	pool->free_blocks++;
}

void tlsf_remove(struct pool *pool, struct pool_heap *heap, struct pool_block *b, uint64_t size)
{
	unsigned fl, sl;

	class_of(size, &fl, &sl);
	if (b->prev_free)
		blk_at(pool, b->prev_free)->next_free = b->next_free;
	else
		heap->lists[fl][sl] = b->next_free;
	if (b->next_free)
		blk_at(pool, b->next_free)->prev_free = b->prev_free;
	if (!heap->lists[fl][sl]) {
		heap->sl_map[fl] &= ~(1u << sl);
		if (!heap->sl_map[fl])
			heap->fl_map &= ~(1ull << fl);
	}
	b->prev_free = b->next_free = NIL;
	pool->free_blocks--;
}

/* Head of the first non-empty list at or above (*fl, *sl); updates both. */
static uint32_t list_find(const struct pool_heap *heap, unsigned *fl, unsigned *sl)
{
	uint32_t sm = heap->sl_map[*fl] & (~0u << *sl);

	if (!sm) {
		uint64_t fm = *fl + 1 < FL_COUNT ? heap->fl_map & (~0ull << (*fl + 1)) : 0;

		if (!fm)
			return NIL;
		*fl = __builtin_ctzll(fm);
		sm = heap->sl_map[*fl];
	}
	*sl = __builtin_ctz(sm);
	return heap->lists[*fl][*sl];
}

static bool block_fits(const struct pool_block *b, uint64_t size, uint64_t align)
{
	uint64_t off = block_offset(b), front = align_up(off, align) - off;

	return front < block_size(b) && block_size(b) - front >= size;
}

/* The first of at most FIT_SCAN_MAX ranges, walking the lists up from
 * class (fl, sl), that holds size at align and (with pref) lies in a
 * preferred slab; NIL when none does. */
static uint32_t fit_scan(const struct pool *pool, const struct pool_heap *heap, unsigned fl,
                         unsigned sl, uint64_t size, uint64_t align, const struct pool_prefer *pref)
{
	unsigned budget = FIT_SCAN_MAX;
	uint32_t bi;

	while (budget && (bi = list_find(heap, &fl, &sl))) {
		for (; bi && budget; budget--) {
			const struct pool_block *b = blk_at(pool, bi);

			if (block_fits(b, size, align) &&
			    (!pref || pref->prefer(pref->ctx, block_slab(pool, b))))
				return bi;
			bi = b->next_free;
		}
		if (++sl == SL_COUNT) {
			sl = 0;
			if (++fl == FL_COUNT)
				break;
		}
	}
	return NIL;
}

uint32_t tlsf_fit(const struct pool *pool, const struct pool_heap *heap, uint64_t size,
                  uint64_t align, uint64_t need, const struct pool_prefer *pref)
{
	unsigned fl, sl;
	uint32_t bi;

	if (class_round(need, &fl, &sl)) {
		unsigned hfl = fl, hsl = sl;

		bi = list_find(heap, &hfl, &hsl);
		if (bi && pref) {
			/* Every range from here up fits; a few of them are
			 * looked at for one in a slab the caller prefers (for
			 * the daemon: one the client has mapped already). */
			uint32_t pi = fit_scan(pool, heap, fl, sl, size, align, pref);

			return pi ? pi : bi;
		}
		if (bi)
			return bi;
	}
	/* Nothing at or above the rounded class, so whatever fits is in the
	 * few lists below it: look at a bounded number of ranges. */
	class_of(size, &fl, &sl);
	if (fl >= FL_COUNT)
		return NIL;
	return fit_scan(pool, heap, fl, sl, size, align, NULL);
}

/* A zeroed block from the arena, reserved beforehand (pool_alloc). */
static struct pool_block *spare_take(struct pool *pool, uint32_t *bi)
{
	return arena_alloc_sized(&pool->blocks, bi, sizeof(struct pool_block));
}

/* Inserts the fresh block n (index ni) after b (index bi) in address order,
 * as a piece of b's slab. */
static void phys_link_after(struct pool *pool, uint32_t bi, struct pool_block *b, uint32_t ni,
                            struct pool_block *n)
{
	n->slab = b->slab & ~SLAB_INDEX_FREE;
	n->prev_phys = bi;
	n->next_phys = b->next_phys;
	if (b->next_phys)
		blk_at(pool, b->next_phys)->prev_phys = ni;
	b->next_phys = ni;
}

/* Takes b (index bi) out of the address order and gives its descriptor
 * back. */
static void phys_drop(struct pool *pool, uint32_t bi, struct pool_block *b)
{
	if (b->prev_phys)
		blk_at(pool, b->prev_phys)->next_phys = b->next_phys;
	if (b->next_phys)
		blk_at(pool, b->next_phys)->prev_phys = b->prev_phys;
	arena_free_sized(&pool->blocks, bi, b, sizeof(*b));
}

struct pool_block *tlsf_split(struct pool *pool, struct pool_heap *heap, uint32_t bi, uint64_t size,
                              uint64_t align)
{
	struct pool_block *b = blk_at(pool, bi);
	uint64_t off = block_offset(b), front = align_up(off, align) - off, bsize = block_size(b);

	tlsf_remove(pool, heap, b, bsize);
	if (front) {
		/* The front remainder stays free in b; its left neighbour is
		 * live (no two free neighbours), so no coalescing is due. */
		uint32_t ri;
		struct pool_block *rest = spare_take(pool, &ri);

		phys_link_after(pool, bi, b, ri, rest);
		block_set_offset(rest, off + front);
		block_set(b, front, true);
		tlsf_insert(pool, heap, bi, b, front);
		b = rest;
		bi = ri;
		off += front;
		bsize -= front;
	}
	if (bsize > size) {
		uint32_t ti;
		struct pool_block *tail = spare_take(pool, &ti);

		phys_link_after(pool, bi, b, ti, tail);
		block_set_offset(tail, off + size);
		block_set(tail, bsize - size, true);
		tlsf_insert(pool, heap, ti, tail, bsize - size);
	}
	block_set(b, size, false);
	return b;
}

void tlsf_merge(struct pool *pool, struct pool_heap *heap, uint32_t bi, struct pool_block *block,
                uint64_t size)
{
	struct pool_block *n;

	if (block->prev_phys) {
		uint32_t ni = block->prev_phys;

		n = blk_at(pool, ni);
		if (block_is_free(n)) {
			uint64_t nsize = block_size(n);

			tlsf_remove(pool, heap, n, nsize);
			size += nsize;
			phys_drop(pool, bi, block);
			block = n;
			bi = ni;
		}
	}
	if (block->next_phys) {
		uint32_t ni = block->next_phys;

		n = blk_at(pool, ni);
		if (block_is_free(n)) {
			uint64_t nsize = block_size(n);

			tlsf_remove(pool, heap, n, nsize);
			size += nsize;
			phys_drop(pool, ni, n);
		}
	}
	block_set(block, size, true);
	tlsf_insert(pool, heap, bi, block, size);
}

/* Every range in a higher class is larger than every range in a lower one,
 * so the largest is in the highest non-empty list. */
uint64_t tlsf_largest_free(const struct pool *pool, const struct pool_heap *heap)
{
	unsigned fl, sl;
	uint64_t max = 0;

	if (!heap->fl_map)
		return 0;
	fl = log2_u64(heap->fl_map);
	sl = 31 - __builtin_clz(heap->sl_map[fl]);
	for (uint32_t bi = heap->lists[fl][sl]; bi; bi = blk_at(pool, bi)->next_free) {
		if (block_size(blk_at(pool, bi)) > max)
			max = block_size(blk_at(pool, bi));
	}
	return max;
}

int tlsf_check_lists(const struct pool *pool, const struct pool_heap *heap, uint64_t free_blocks,
                     char *msg, unsigned msg_len)
{
	uint64_t seen = 0;
	unsigned bfl, bsl;

	CHECK(!(heap->fl_map >> FL_COUNT), "uid %u: fl bitmap overflows", heap->uid);
	for (unsigned fl = 0; fl < FL_COUNT; fl++) {
		CHECK(!!(heap->fl_map & (1ull << fl)) == !!heap->sl_map[fl] &&
		          !(heap->sl_map[fl] >> SL_COUNT),
		      "uid %u: bitmap of class %u", heap->uid, fl);
		for (unsigned sl = 0; sl < SL_COUNT; sl++) {
			uint32_t bi, prev = NIL;

			CHECK(!!(heap->sl_map[fl] & (1u << sl)) == !!heap->lists[fl][sl],
			      "uid %u: bitmap of class %u/%u", heap->uid, fl, sl);
			for (bi = heap->lists[fl][sl]; bi;
			     prev = bi, bi = blk_at(pool, bi)->next_free) {
				const struct pool_block *b = blk_at(pool, bi);

				CHECK(++seen <= free_blocks && block_is_free(b) &&
				          block_slab(pool, b)->heap == heap && b->prev_free == prev,
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
