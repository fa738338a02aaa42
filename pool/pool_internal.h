/*
 * pool_internal.h - shared by pool.c (heaps, slabs, cache and pins, stats,
 * check), pool_tlsf.c (the segregated-fit index of free ranges and block
 * split/merge) and pool_domain.c (domains and their guarantees). Not part of
 * the pool's interface: see pool.h.
 */
#ifndef GPB_POOL_INTERNAL_H
#define GPB_POOL_INTERNAL_H

#include "arena.h"
#include "pool.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SL_LOG2  4
#define SL_COUNT (1u << SL_LOG2)
/* Granule counts are < 2^48, so fl <= 47 + 1 - SL_LOG2 = 44. */
#define FL_COUNT (48 - SL_LOG2 + 1)

/* Granule counts and slab indices are stored in 48 and 31 bits. */
#define POOL_GRANULE_SHIFT 8
#define SLAB_INDEX_FREE    0x80000000u /* in pool_block.slab: the block is free */

/* uid -> heap table. Fixed: a machine has few users of its GPUs, and even a
 * few thousand uids only make chains of ~10. */
#define HEAP_BUCKET_BITS 8

/*
 * A block descriptor: 32 bytes, from the pool's arena (no malloc header), so
 * a million live blocks take 32 MiB where a malloc'd struct of pointers took
 * 64. Links are 32-bit arena indices (NIL: none); offsets and sizes are
 * 48-bit granule counts (slabs up to POOL_MAX_SLAB); the slab is an index in
 * the pool's slab arena, with the free flag in its top bit.
 */
#define NIL 0u /* index 0 is an arena header slot, never a block */

struct pool_block {
	uint32_t prev_phys, next_phys; /* address-order neighbours in the slab */
	uint32_t prev_free, next_free; /* class list links, meaningful while free */
	uint32_t slab;                 /* slab index | SLAB_INDEX_FREE */
	uint16_t off_hi, size_hi;      /* granule counts, bits 32-47 */
	uint32_t off_lo, size_lo;      /* granule counts, bits 0-31 */
};

_Static_assert(sizeof(struct pool_block) == 32, "pool_block is 32 bytes");
/* blk_at() and blk_index() compute with these constants. */
#define BLK_SHIFT 11
_Static_assert(ARENA_CHUNK / sizeof(struct pool_block) == 1u << BLK_SHIFT,
               "2^BLK_SHIFT blocks to an arena chunk");
_Static_assert(POOL_MAX_SLAB >> POOL_GRANULE_SHIFT < 1ull << 48, "granule counts fit 48 bits");

struct pool_slab {
	void *backend;
	struct pool_heap *heap;
	struct pool_slab *prev; /* the heap's slabs, unordered */
	struct pool_slab *next;
	uint64_t size;
	uint64_t live;  /* live blocks */
	uint32_t first; /* the block at offset 0 */
	uint32_t index; /* in the pool's slab arena */
	uint32_t uid;
	unsigned pins : 31;
	unsigned dedicated : 1;
};

/* slab_at() computes with this constant. */
#define SLAB_SHIFT 10
_Static_assert(ARENA_CHUNK / sizeof(struct pool_slab) == 1u << SLAB_SHIFT,
               "2^SLAB_SHIFT slab records to an arena chunk");

/* A domain other than 0 that has a guarantee or heaps (pool.h, "Domains
 * and guarantees"); domain 0 has no record. */
struct pool_domain {
	struct pool_domain *next; /* pool->domains */
	uint32_t id;
	unsigned heaps;
	uint64_t guarantee;
	uint64_t reserved; /* bytes in its heaps' slabs */
};

struct pool_heap {
	uint32_t uid;
	uint32_t domain;
	struct pool_domain *dom; /* NULL for domain 0 */
	unsigned cached;         /* empty, unpinned standard slabs held */
	struct pool_heap *hnext; /* hash chain (by uid: every domain of a uid in one) */
	struct pool_slab *slabs; /* never empty: a heap goes with its last slab */
	uint64_t nslabs;
	uint64_t reserved;         /* bytes in its slabs */
	uint64_t used;             /* bytes in live blocks */
	uint64_t fl_map;           /* bit fl: sl_map[fl] != 0 */
	uint32_t sl_map[FL_COUNT]; /* bit sl: lists[fl][sl] != NIL */
	uint32_t lists[FL_COUNT][SL_COUNT];
};

struct pool {
	struct pool_slab_ops ops;
	void *ctx;
	uint64_t slab_size;
	uint64_t large_threshold;
	unsigned keep_empty;
	bool exact;

	struct pool_heap *buckets[1u << HEAP_BUCKET_BITS];
	unsigned nheaps;

	struct arena blocks;      /* struct pool_block */
	struct arena slabs_arena; /* struct pool_slab */

	struct pool_domain *domains;
	uint64_t capacity; /* 0: no bound */
	uint64_t unmet;    /* sum of the domains' guarantee - reserved, where positive */

	uint64_t reserved;
	uint64_t used;
	uint64_t peak;
	uint64_t slabs;
	uint64_t live;
	uint64_t free_blocks;
	uint64_t allocs;
	uint64_t frees;
	uint64_t ooms;
};

static inline struct pool_block *blk_at(const struct pool *pool, uint32_t i)
{
	return (struct pool_block *)pool->blocks.chunks[i >> BLK_SHIFT] +
	       (i & ((1u << BLK_SHIFT) - 1));
}

/* The index of a block, from the chunk's first slot: see block_index(). */
static inline uint32_t blk_index(const struct pool_block *b)
{
	uint32_t off = (uint32_t)((uintptr_t)b & (ARENA_CHUNK - 1));

	return arena_chunk_of(b)->no << BLK_SHIFT | off / (uint32_t)sizeof(*b);
}

static inline struct pool *pool_of_block(const struct pool_block *b)
{
	return (struct pool *)((char *)arena_of(b) - offsetof(struct pool, blocks));
}

static inline struct pool_slab *slab_at(const struct pool *pool, uint32_t i)
{
	return (struct pool_slab *)pool->slabs_arena.chunks[i >> SLAB_SHIFT] +
	       (i & ((1u << SLAB_SHIFT) - 1));
}

static inline struct pool_slab *block_slab(const struct pool *pool, const struct pool_block *b)
{
	return slab_at(pool, b->slab & ~SLAB_INDEX_FREE);
}

/* The index of a block of the slab, from a neighbour's link: the free that
 * needs it reads the neighbours next anyway, where the chunk's first slot
 * would be one more cache line (and one that chunks' alignment keeps
 * evicting). */
static inline uint32_t block_index(const struct pool *pool, const struct pool_slab *slab,
                                   const struct pool_block *b)
{
	if (b->prev_phys)
		return blk_at(pool, b->prev_phys)->next_phys;
	if (b->next_phys)
		return blk_at(pool, b->next_phys)->prev_phys;
	return slab->first;
}

static inline uint64_t block_size(const struct pool_block *b)
{
	return ((uint64_t)b->size_hi << 32 | b->size_lo) << POOL_GRANULE_SHIFT;
}

static inline uint64_t block_offset(const struct pool_block *b)
{
	return ((uint64_t)b->off_hi << 32 | b->off_lo) << POOL_GRANULE_SHIFT;
}

static inline bool block_is_free(const struct pool_block *b)
{
	return b->slab & SLAB_INDEX_FREE;
}

static inline void block_set(struct pool_block *b, uint64_t size, bool free)
{
	uint64_t g = size >> POOL_GRANULE_SHIFT;

	b->size_lo = (uint32_t)g;
	b->size_hi = (uint16_t)(g >> 32);
	b->slab = (b->slab & ~SLAB_INDEX_FREE) | (free ? SLAB_INDEX_FREE : 0);
}

static inline void block_set_offset(struct pool_block *b, uint64_t offset)
{
	uint64_t g = offset >> POOL_GRANULE_SHIFT;

	b->off_lo = (uint32_t)g;
	b->off_hi = (uint16_t)(g >> 32);
}

static inline uint64_t align_up(uint64_t v, uint64_t align)
{
	return (v + align - 1) & ~(align - 1);
}

/* pool_tlsf.c: the free-range index of a heap and the blocks it files.
 * Blocks go by index (bi) and, where the caller has it at hand, pointer (b). */

/* Files the free range bi of `size` bytes in its class list (and counts it
 * in free_blocks). */
void tlsf_insert(struct pool *pool, struct pool_heap *heap, uint32_t bi, struct pool_block *b,
                 uint64_t size);
/* Takes the free range b (of `size` bytes) out of its class list. */
void tlsf_remove(struct pool *pool, struct pool_heap *heap, struct pool_block *b, uint64_t size);
/* A free range of the heap that holds `size` bytes at `align`, or NIL.
 * `need` is size + align - granule: any range that large fits. With pref,
 * a range in a preferred slab when one is among the first few that fit. */
uint32_t tlsf_fit(const struct pool *pool, const struct pool_heap *heap, uint64_t size,
                  uint64_t align, uint64_t need, const struct pool_prefer *pref);
/* Carves a live block of `size` bytes at `align` out of the free range bi of
 * the heap, filing the remainders as free; returns the live block. Needs two
 * spare block slots (arena_reserve). Counts nothing but free ranges. */
struct pool_block *tlsf_split(struct pool *pool, struct pool_heap *heap, uint32_t bi, uint64_t size,
                              uint64_t align);
/* Marks the live block bi (of `size` bytes) free, coalesces it with free
 * address neighbours and files the result. Counts nothing but free ranges. */
void tlsf_merge(struct pool *pool, struct pool_heap *heap, uint32_t bi, struct pool_block *block,
                uint64_t size);
/* The largest free range of the heap (0 when none). */
uint64_t tlsf_largest_free(const struct pool *pool, const struct pool_heap *heap);

/* Checks that every free range of the heap is in exactly the list of its
 * class and that the bitmaps say which lists are non-empty; free_blocks is
 * how many free ranges the heap's slabs hold. Returns 0 or -EFAULT. */
int tlsf_check_lists(const struct pool *pool, const struct pool_heap *heap, uint64_t free_blocks,
                     char *msg, unsigned msg_len);

/* pool_domain.c: domains, guarantees, and what a new slab may take. */

/* The domain's record, or NULL (domain 0, or none yet). */
struct pool_domain *domain_find(const struct pool *pool, uint32_t id);
/* The record of domain id (not 0), made when missing; NULL: out of memory. */
struct pool_domain *domain_get(struct pool *pool, uint32_t id);
/* Frees the record when it has neither heaps nor a guarantee. */
void domain_put(struct pool *pool, struct pool_domain *d);
/* Counts size bytes more (grow) or less in a heap's slabs. */
void domain_reserve(struct pool *pool, struct pool_heap *heap, uint64_t size, bool grow);
/* What new slabs of the domain (NULL: domain 0) may take now. */
uint64_t domain_budget(const struct pool *pool, const struct pool_domain *d);
/* Whether the domain has a guarantee. */
static inline bool domain_guaranteed(const struct pool_domain *d)
{
	return d && d->guarantee;
}
/* pool_check's part: domain records and counters against the heaps. */
int domain_check(const struct pool *pool, char *msg, unsigned msg_len);

/* pool.c: pool_check's reporting, shared with tlsf_check_lists. */

/* Writes the message (when msg != NULL) and returns -EFAULT. */
__attribute__((format(printf, 3, 4))) int pool_check_fail(char *msg, unsigned msg_len,
                                                          const char *fmt, ...);

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond))                                                                       \
			return pool_check_fail(msg, msg_len, __VA_ARGS__);                         \
	} while (0)

#endif
