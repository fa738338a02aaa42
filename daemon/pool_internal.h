/*
 * pool_internal.h - shared by pool.c (heaps, slabs, cache and pins, stats,
 * check) and pool_tlsf.c (the segregated-fit index of free ranges and block
 * split/merge). Not part of the pool's interface: see pool.h.
 */
#ifndef GPB_POOL_INTERNAL_H
#define GPB_POOL_INTERNAL_H

#include "pool.h"

#include <stdbool.h>
#include <stdint.h>

#define SL_LOG2  4
#define SL_COUNT (1u << SL_LOG2)
/* Sizes are < 2^64, so g < 2^56 and fl <= 55 + 1 - SL_LOG2 = 52. */
#define FL_COUNT (64 - 8 - SL_LOG2 + 1)

#define BLOCK_FREE 1u

/* uid -> heap table. Fixed: a machine has few users of its GPUs, and even a
 * few thousand uids only make chains of ~10. */
#define HEAP_BUCKET_BITS 8

/*
 * 7 x 8 = 56 bytes on LP64, which glibc serves from a 64-byte chunk. The free
 * flag lives in bit 0 of size_flags (sizes are granule multiples) because a
 * separate bool would pad the struct to 64 bytes and the chunk to 80.
 */
struct pool_block {
	struct pool_slab *slab;
	struct pool_block *prev_phys; /* address-order neighbours in the slab */
	struct pool_block *next_phys;
	struct pool_block *prev_free; /* class list links, meaningful while free */
	struct pool_block *next_free; /* (also chains the spare list) */
	uint64_t offset;
	uint64_t size_flags; /* size | BLOCK_FREE */
};

_Static_assert(sizeof(struct pool_block) <= 64, "keep pool_block within 64 bytes");

struct pool_slab {
	void *backend;
	struct pool_heap *heap;
	struct pool_slab *prev; /* the heap's slabs, unordered */
	struct pool_slab *next;
	struct pool_block *first; /* the block at offset 0 */
	uint64_t size;
	uint64_t live; /* live blocks */
	uint32_t uid;
	unsigned pins;
	bool dedicated;
};

struct pool_heap {
	uint32_t uid;
	unsigned cached;         /* empty, unpinned standard slabs held */
	struct pool_heap *hnext; /* hash chain */
	struct pool_slab *slabs; /* never empty: a heap goes with its last slab */
	uint64_t nslabs;
	uint64_t used;             /* bytes in live blocks */
	uint64_t fl_map;           /* bit fl: sl_map[fl] != 0 */
	uint32_t sl_map[FL_COUNT]; /* bit sl: lists[fl][sl] != NULL */
	struct pool_block *lists[FL_COUNT][SL_COUNT];
};

struct pool {
	struct pool_slab_ops ops;
	void *ctx;
	uint64_t slab_size;
	uint64_t large_threshold;
	unsigned keep_empty;

	struct pool_heap *buckets[1u << HEAP_BUCKET_BITS];
	unsigned nheaps;

	struct pool_block *spare;
	unsigned nspare;

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

static inline uint64_t block_size(const struct pool_block *b)
{
	return b->size_flags & ~(uint64_t)BLOCK_FREE;
}

static inline bool block_is_free(const struct pool_block *b)
{
	return b->size_flags & BLOCK_FREE;
}

static inline void block_set(struct pool_block *b, uint64_t size, bool free)
{
	b->size_flags = size | (free ? BLOCK_FREE : 0);
}

static inline uint64_t align_up(uint64_t v, uint64_t align)
{
	return (v + align - 1) & ~(align - 1);
}

/* pool_tlsf.c: the free-range index of a heap and the blocks it files. */

/* Files the free range b in its class list (and counts it in free_blocks). */
void tlsf_insert(struct pool *pool, struct pool_heap *heap, struct pool_block *b);
/* Takes the free range b out of its class list. */
void tlsf_remove(struct pool *pool, struct pool_heap *heap, struct pool_block *b);
/* A free range of the heap that holds `size` bytes at `align`, or NULL.
 * `need` is size + align - granule: any range that large fits. */
struct pool_block *tlsf_fit(const struct pool_heap *heap, uint64_t size, uint64_t align,
                            uint64_t need);
/* Carves a live block of `size` bytes at `align` out of the free range b,
 * filing the remainders as free; returns the live block. Needs two spare
 * block structs (tlsf_spare_reserve). Counts nothing but free ranges. */
struct pool_block *tlsf_split(struct pool *pool, struct pool_block *b, uint64_t size,
                              uint64_t align);
/* Marks the live block free, coalesces it with free address neighbours and
 * files the result. Counts nothing but free ranges. */
void tlsf_merge(struct pool *pool, struct pool_heap *heap, struct pool_block *block);
/* The largest free range of the heap (0 when none). */
uint64_t tlsf_largest_free(const struct pool_heap *heap);

/* Makes sure `n` block structs are at hand so that a split cannot fail
 * halfway through changing the lists. */
int tlsf_spare_reserve(struct pool *pool, unsigned n);
/* A zeroed block struct from the spares (reserved beforehand). */
struct pool_block *tlsf_spare_take(struct pool *pool);
/* Keeps b for a later split, or frees it when enough are kept. */
void tlsf_spare_put(struct pool *pool, struct pool_block *b);

/* Checks that every free range of the heap is in exactly the list of its
 * class and that the bitmaps say which lists are non-empty; free_blocks is
 * how many free ranges the heap's slabs hold. Returns 0 or -EFAULT. */
int tlsf_check_lists(const struct pool_heap *heap, uint64_t free_blocks, char *msg,
                     unsigned msg_len);

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
