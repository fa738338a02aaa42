/*
 * arena.h - fixed-size objects carved from 64 KiB chunks: a slab-of-structs
 * allocator for the daemon's per-allocation records (pool blocks, broker
 * allocations), which malloc would round up to 16 bytes and give a header
 * each.
 *
 * A chunk is 64 KiB, aligned to 64 KiB, from mmap; its first slot(s) say
 * which arena and chunk number it is, so an object's chunk is its address
 * with the low 16 bits cleared. The bookkeeping of each chunk (its free
 * list, counts) lives in a dense array of the arena instead: chunk starts
 * all fall in the same few cache sets, so a header there would be evicted
 * by its peers over and over. Chunks with free slots are on a list; a chunk
 * whose last object goes is unmapped (one empty chunk is kept against
 * thrashing at a boundary), so memory goes back after a burst as far as the
 * survivors allow.
 *
 * Objects also have 32-bit indices (chunk number << shift | slot), for
 * structures that link objects compactly: index 0 is a header slot, never
 * an object, so 0 can mean "none". Objects never move.
 *
 * Under AddressSanitizer free slots are poisoned, so a use after
 * arena_free is reported as it would be after free(). Not thread-safe.
 */
#ifndef GPB_ARENA_H
#define GPB_ARENA_H

#include <stddef.h>
#include <stdint.h>

#define ARENA_CHUNK_SHIFT 16
#define ARENA_CHUNK       (1u << ARENA_CHUNK_SHIFT)

/* In the first slot(s) of every chunk. */
struct arena_chunk {
	struct arena *arena;
	uint32_t no; /* chunk number */
};

/* A chunk's bookkeeping, in arena->meta[no]. */
struct arena_meta {
	uint32_t prev, next; /* the avail list, by chunk number (ARENA_NONE ends it) */
	uint32_t used;       /* objects handed out */
	uint32_t free;       /* first free slot, 0 = none */
	uint32_t bump;       /* first never-used slot */
	uint32_t listed;     /* on the avail list */
};

#define ARENA_NONE UINT32_MAX

struct arena {
	uint32_t size;       /* object bytes, a multiple of 8 */
	uint32_t first;      /* first object slot (the ones before hold the chunk's head) */
	uint32_t end;        /* slots in a chunk */
	uint32_t recip;      /* ceil(2^32 / size): byte offset to slot without dividing */
	unsigned shift;      /* index = chunk number << shift | slot */
	unsigned index_bits; /* indices stay below 2^index_bits */
	uint32_t max_no;     /* chunk numbers stay below this */
	uint32_t cap;        /* entries in chunks[] and meta[] */
	uint32_t nchunks;    /* chunks mapped */
	uint32_t avail;      /* first chunk with a free slot, ARENA_NONE: none */
	unsigned empty;      /* mapped chunks without objects */
	char **chunks;       /* by number; NULL: a free number */
	struct arena_meta *meta;
	uint64_t live;  /* objects handed out */
	uint64_t nfree; /* free slots in mapped chunks */
};

#include <string.h>

/* size: object bytes (8 to 4096; rounded up to a multiple of 8). Indices
 * stay below 2^index_bits (at most 32): arena_alloc fails beyond. */
void arena_init(struct arena *a, size_t size, unsigned index_bits);
/* Unmaps every chunk, live objects included. */
void arena_finish(struct arena *a);
/* Makes sure n more arena_alloc calls cannot fail. 0 or -ENOMEM. */
int arena_reserve(struct arena *a, unsigned n);
/* A zeroed object, or NULL when out of memory (or of indices); with its
 * index in *index when index is not NULL. */
void *arena_alloc(struct arena *a, uint32_t *index);
/* Gives an object of this arena back. NULL is ignored. */
void arena_free(struct arena *a, void *p);
/* The same for a caller that knows the object's index: touches nothing in
 * the chunk but the object. */
void arena_free_index(struct arena *a, uint32_t index, void *p);
/* Walks every chunk and checks the counts and free lists. 0 or -EFAULT. */
int arena_check(const struct arena *a);
/* Takes a full chunk off the avail list (for arena_alloc_sized). */
void arena_unlist(struct arena *a, uint32_t no);

/* Whether free slots are poisoned (AddressSanitizer builds): the inline
 * forms below then leave everything to the functions. */
#if defined(__SANITIZE_ADDRESS__)
#define ARENA_POISONS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ARENA_POISONS 1
#endif
#endif
#ifndef ARENA_POISONS
#define ARENA_POISONS 0
#endif

static inline const struct arena_chunk *arena_chunk_of(const void *p)
{
	return (const struct arena_chunk *)((uintptr_t)p & ~(uintptr_t)(ARENA_CHUNK - 1));
}

/* The arena an object belongs to. */
static inline struct arena *arena_of(const void *p)
{
	return arena_chunk_of(p)->arena;
}

/* The object with index i (a live one: nothing is checked). */
static inline void *arena_at(const struct arena *a, uint32_t i)
{
	return a->chunks[i >> a->shift] + (size_t)(i & ((1u << a->shift) - 1)) * a->size;
}

/* The index of a live object. Reads the chunk's first slot: callers that
 * can should keep indices at hand. */
static inline uint32_t arena_index(const struct arena *a, const void *p)
{
	uint64_t off = (uintptr_t)p & (ARENA_CHUNK - 1);

	/* Exact: off is a multiple of size below 2^16. */
	return arena_chunk_of(p)->no << a->shift | (uint32_t)(off * a->recip >> 32);
}

/*
 * Inline forms of arena_alloc and arena_free_index for the hot paths of a
 * caller whose object size is a constant (`size` must equal a->size): the
 * multiplications and the zeroing fold into a few instructions. They fall
 * back to the functions for whatever is not the common case.
 */
static inline void *arena_alloc_sized(struct arena *a, uint32_t *index, uint32_t size)
{
	struct arena_meta *m;
	uint32_t no = a->avail, slot;
	char *p;

	if (no == ARENA_NONE)
		return arena_alloc(a, index);
	m = &a->meta[no];
	slot = m->free;
	if (!slot || !m->used || ARENA_POISONS)
		return arena_alloc(a, index);
	/* The most common case: a free slot in a chunk in use. */
	p = a->chunks[no] + (size_t)slot * size;
	memcpy(&m->free, p, sizeof(m->free));
	m->used++;
	if (!m->free && m->bump == a->end)
		arena_unlist(a, no);
	a->live++;
	a->nfree--;
	memset(p, 0, size);
	*index = no << a->shift | slot;
	return p;
}

static inline void arena_free_sized(struct arena *a, uint32_t index, void *p, uint32_t size)
{
	struct arena_meta *m = &a->meta[index >> a->shift];

	if (!m->listed || m->used == 1 || ARENA_POISONS) {
		arena_free_index(a, index, p);
		return;
	}
	(void)size;
	memcpy(p, &m->free, sizeof(m->free));
	m->free = index & ((1u << a->shift) - 1);
	m->used--;
	a->live--;
	a->nfree++;
}

#endif
