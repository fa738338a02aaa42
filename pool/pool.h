/*
 * pool.h - the device memory sub-allocator (pure: no I/O, no locks, no CUDA).
 *
 * A pool serves one device. It carves allocations out of slabs that it gets
 * from the backend through two callbacks. Slabs belong to one uid: a slab's
 * bytes are never handed to two users (a slab's IPC handle is a bearer token
 * for all of it), so each uid has its own heap of slabs.
 *
 * Inside a heap the fit is TLSF-style: free ranges sit in segregated lists
 * indexed by (log2 class, linear sub-class) with bitmaps, so finding a fit is
 * O(1); ranges are coalesced with their address neighbours on free. All sizes
 * and offsets are multiples of the granule (256 bytes). Metadata lives in
 * host memory, never in the device memory it describes: 32 bytes per block
 * (live or free range), from arenas owned by the pool.
 *
 * Requests larger than large_threshold (by default the slab size) get a
 * dedicated slab rounded up to the slab alignment; the others are fitted into
 * the uid's standard slabs, in a new one when none has room. When the device
 * has no room left for a standard slab, the new one is a "tail" slab: the
 * largest multiple of the slab alignment that fits what is left (at least
 * what the request needs), otherwise a standard slab like any other (filled
 * by later requests, cached or returned when empty), so a request fails only
 * when the room it needs really is not there. (Half a slab,
 * the old default, left 5-15% of the device in holes of standard slabs at the
 * first out-of-memory of the benchmark's churn: a request between half a slab
 * and a slab never looked at them. The slab size as the threshold leaves
 * 92.6-95.5% of the device live there over ten seeds, against 84.8-94.9%.)
 * No slab, standard or dedicated, may exceed POOL_MAX_SLAB: block
 * descriptors keep offsets and sizes as 48-bit granule counts.
 *
 * When a slab becomes empty it is returned to the backend,
 * except that each heap keeps up to keep_empty standard slabs as a cache
 * (alloc/free ping-pong must not create and destroy a slab each time).
 * A pinned slab is never returned while pinned.
 *
 * Domains and guarantees. A heap belongs to a (uid, domain) pair: domain 0
 * is the common one, any other a part of the device set aside (the
 * daemon's partitions), so two domains of one uid never share a slab. A
 * domain may be guaranteed bytes of the pool's capacity (what all slabs
 * together may take): the pool then makes no slab, for anyone, that would
 * leave less room than what the guarantees still lack (each guarantee less
 * the bytes of its domain's slabs, its "unmet" part), so that
 *
 *     reserved + unmet <= capacity
 *
 * always holds, and a domain can always make slabs for its own unmet part
 * whatever the others do. What counts is slabs, not use: a partly used
 * slab takes its whole size from the device. Where a standard slab does
 * not fit what a domain may still make, the slab made is smaller (a tail
 * slab, as at the end of the device). A guaranteed domain's new slab for a
 * request above half a slab is the request's size (rounded up to
 * POOL_SLAB_ALIGN): what a standard slab would leave could only hold
 * smaller requests, and its bytes would count against the guarantee.
 */
#ifndef GPB_POOL_H
#define GPB_POOL_H

#include <stdbool.h>
#include <stdint.h>

#include "schema.h"

/* The protocol's granule and alignments are the pool's: what alloc
 * promises, the pool delivers. */
#define POOL_GRANULE       PROTO_GRANULE
#define POOL_SLAB_ALIGN    (2u << 20)  /* 2 MiB: slab sizes are multiples of this */
#define POOL_DEFAULT_SLAB  (64u << 20) /* 64 MiB */
#define POOL_MAX_ALIGNMENT PROTO_MAX_ALIGNMENT
_Static_assert(POOL_MAX_ALIGNMENT == POOL_SLAB_ALIGN, "alignments up to the slab's");
#define POOL_MAX_SLAB (1ull << 55) /* 32 PiB: larger configs and requests are refused */

struct pool;
struct pool_slab;
struct pool_block;

struct pool_slab_ops {
	/* Creates a backend slab of exactly `size` bytes for `uid`. Returns 0 and
	 * sets *slab (opaque to the pool), or a negative errno (-ENOMEM when the
	 * device is full). */
	int (*create)(void *ctx, uint64_t size, uint32_t uid, void **slab);
	/* Returns a slab to the backend. Never fails. */
	void (*destroy)(void *ctx, void *slab);
	/* Optional (NULL: not known): the bytes a create could get now. A hint
	 * for sizing a tail slab (pool_alloc): create still has the last word. */
	uint64_t (*room)(void *ctx);
};

struct pool_config {
	uint64_t slab_size;       /* standard slab bytes; 0 = POOL_DEFAULT_SLAB */
	uint64_t large_threshold; /* requests above get a dedicated slab; 0 = slab_size */
	unsigned keep_empty;      /* empty standard slabs kept per uid (default 1 when
	                             the whole config is zero; set explicitly otherwise) */
	bool exact;               /* a dedicated slab is the request rounded to the
	                             granule, not to POOL_SLAB_ALIGN: what it reserves
	                             is what it charges (the direct allocator) */
};

struct pool_stats {
	uint64_t reserved;     /* bytes in slabs */
	uint64_t used;         /* bytes in live blocks (rounded sizes) */
	uint64_t free;         /* reserved - used */
	uint64_t free_blocks;  /* free ranges */
	uint64_t largest_free; /* largest free range */
	uint64_t peak;         /* highest `used` ever */
	uint64_t slabs;        /* slabs held */
	uint64_t live;         /* live blocks */
	uint64_t allocs;       /* successful pool_alloc calls */
	uint64_t frees;        /* pool_free calls */
	uint64_t ooms;         /* pool_alloc calls that failed with -ENOMEM */
};

/* Returns NULL when out of memory. cfg may be NULL for defaults.
 * -EINVAL-worthy configs (slab_size not a multiple of POOL_SLAB_ALIGN, or
 * above POOL_MAX_SLAB) also return NULL. */
struct pool *pool_create(const struct pool_config *cfg, const struct pool_slab_ops *ops, void *ctx);
/* Returns every slab to the backend (live blocks included) and frees the pool. */
void pool_destroy(struct pool *pool);

/*
 * Allocates `size` bytes (rounded up to the granule) aligned to `align`
 * (0 = granule; otherwise a power of two <= POOL_MAX_ALIGNMENT) from uid's
 * heap, creating a slab when no free range fits. If slab creation fails with
 * -ENOMEM the pool releases every unpinned empty slab (all uids) and tries
 * once more; if a standard slab still does not fit, it makes a tail slab
 * (above): from ops->room rounded down to POOL_SLAB_ALIGN, or from just
 * below the standard size when there is no hint, stepping down further on
 * each -ENOMEM, by twice the step before, and last of all the request
 * rounded up to POOL_SLAB_ALIGN.
 * Returns 0 and *out, -EINVAL (size 0, bad alignment, size overflow), -ENOMEM
 * (not even what the request needs fits the device, or a dedicated slab
 * above POOL_MAX_SLAB, which no device has: counted in ooms; also host
 * memory for the metadata), or another error from ops->create.
 */
int pool_alloc(struct pool *pool, uint32_t uid, uint64_t size, uint64_t align,
               struct pool_block **out);
/* pool_alloc in domain (see "Domains and guarantees" above): from the heap
 * of (uid, domain). -ENOMEM also when a new slab would eat into another
 * domain's guarantee. */
int pool_alloc_in(struct pool *pool, uint32_t uid, uint32_t domain, uint64_t size, uint64_t align,
                  struct pool_block **out);
/*
 * A caller's preference among the slabs that can serve a request. The
 * daemon prefers the slabs a client has mapped already: a slab new to a
 * client costs it an IPC open (~1.3 ms with CUDA) and a descriptor.
 */
struct pool_prefer {
	bool (*prefer)(void *ctx, const struct pool_slab *slab);
	void *ctx;
};

/*
 * pool_alloc_in, taking a free range in a slab for which pref->prefer() is true
 * when one is among the first few ranges that fit (a bounded look: the fit
 * stays O(1)), else the range pool_alloc would take. pref may be NULL. A new
 * slab is made only when nothing fits, preferred or not.
 */
int pool_alloc_prefer(struct pool *pool, uint32_t uid, uint32_t domain, uint64_t size,
                      uint64_t align, const struct pool_prefer *pref, struct pool_block **out);
/* Frees a live block; coalesces; may return an emptied slab to the backend. */
void pool_free(struct pool *pool, struct pool_block *block);

uint64_t pool_block_offset(const struct pool_block *block);
uint64_t pool_block_size(const struct pool_block *block);
struct pool_slab *pool_block_slab(const struct pool_block *block);

void *pool_slab_backend(const struct pool_slab *slab); /* what ops->create returned */
uint64_t pool_slab_size(const struct pool_slab *slab);
uint32_t pool_slab_uid(const struct pool_slab *slab);
/* Whether the slab was made for one request larger than large_threshold. */
bool pool_slab_dedicated(const struct pool_slab *slab);
/* Pins keep a slab from being returned to the backend (e.g. while a client
 * still has it mapped). Unpinning an empty slab may return it. */
void pool_slab_pin(struct pool_slab *slab);
void pool_slab_unpin(struct pool *pool, struct pool_slab *slab);

/* Returns empty, unpinned slabs of `uid` (its heaps of every domain), or of
 * every uid when all is true, to the backend, cache included. Returns the
 * number of slabs released. */
unsigned pool_trim(struct pool *pool, uint32_t uid, bool all);

void pool_get_stats(const struct pool *pool, struct pool_stats *out);
/* Bytes in live blocks of one uid (every domain). */
uint64_t pool_uid_used(const struct pool *pool, uint32_t uid);

/*
 * Bounds what all slabs together may take (0: no bound). -ENOSPC, changing
 * nothing, when the slabs and the unmet guarantees already take more (after
 * returning idle slabs).
 */
int pool_set_capacity(struct pool *pool, uint64_t bytes);
/*
 * Guarantees domain (not 0) bytes of the capacity; 0 ends the guarantee
 * (the domain's slabs stay, as ordinary ones). -EINVAL for domain 0,
 * -ENOSPC (changing nothing) when the capacity cannot hold it on top of the
 * slabs and the other guarantees' unmet parts (after returning idle slabs),
 * -ENOMEM (host memory).
 */
int pool_set_guarantee(struct pool *pool, uint32_t domain, uint64_t bytes);
/* Bytes in the slabs of domain's heaps. */
uint64_t pool_domain_reserved(const struct pool *pool, uint32_t domain);
/*
 * What new slabs of domain may take now by the capacity and the guarantees:
 * capacity - reserved - the other domains' unmet parts (UINT64_MAX without a
 * capacity). Idle slabs count: they go back on demand. For domain 0 (no
 * guarantee) it is what a new guarantee could still be given.
 */
uint64_t pool_room(const struct pool *pool, uint32_t domain);
/*
 * What the heap of (uid, domain) can still get, for a refusal that must not
 * promise more: *total, the free ranges of its slabs plus what new slabs may
 * take (pool_room, bounded by ops->room where the backend says, in whole
 * slab units); *largest, the most one request can get (the largest free
 * range, or a new slab). Idle slabs of others are not counted.
 */
void pool_available(const struct pool *pool, uint32_t uid, uint32_t domain, uint64_t *total,
                    uint64_t *largest);

/*
 * Walks every structure and checks the invariants: blocks tile each slab
 * exactly in address order, no two free neighbours, every free block is in
 * the right list and bitmap bit, counters equal what the walk finds, and
 * reserved + unmet guarantees <= capacity. Returns
 * 0 or -EFAULT (and describes the first violation in msg when msg != NULL).
 */
int pool_check(const struct pool *pool, char *msg, unsigned msg_len);

/* One slab as pool_walk() tells it. */
struct pool_walk_slab {
	uint32_t uid;
	uint32_t domain;
	uint64_t size;
	bool dedicated;
};

/*
 * Tells every slab (@slab_fn; heaps and slabs in no particular order) and,
 * after each, its blocks in address order (@block_fn: offset and size, and
 * the block for a live one, NULL for a free range): what a picture of the
 * device's memory is made of (gpubrokerctl devices --map).
 */
void pool_walk(const struct pool *pool, void (*slab_fn)(void *arg, const struct pool_walk_slab *s),
               void (*block_fn)(void *arg, uint64_t offset, uint64_t size,
                                const struct pool_block *live),
               void *arg);

#endif
