/*
 * pool.c - the device memory sub-allocator: per-uid TLSF-style heaps of slabs.
 *
 * Every (uid, domain) pair owns one heap (found through a small hash table
 * by uid) and every slab belongs to one heap. A slab is tiled, in address order, by blocks that are
 * either live (handed out) or free; two free blocks are never neighbours,
 * because a free coalesces with both sides at once. Free blocks sit in the
 * heap's segregated lists (pool_tlsf.c), so a fit never walks the blocks of a
 * slab. This file keeps the heaps and their slabs, the slab cache and pins,
 * and the counters behind the stats and the check.
 *
 * Nothing here touches device memory: the metadata is in host memory, block
 * descriptors and slab records in two arenas of the pool (arena.h), heaps
 * malloc'd.
 */
#include "pool_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned heap_hash(uint32_t uid)
{
	return (uint32_t)(uid * 0x9e3779b1u) >> (32 - HEAP_BUCKET_BITS);
}

static struct pool_heap *heap_find(const struct pool *pool, uint32_t uid, uint32_t domain)
{
	struct pool_heap *heap = pool->buckets[heap_hash(uid)];

	while (heap && (heap->uid != uid || heap->domain != domain))
		heap = heap->hnext;
	return heap;
}

static struct pool_heap *heap_get(struct pool *pool, uint32_t uid, uint32_t domain)
{
	struct pool_heap *heap = heap_find(pool, uid, domain);
	struct pool_domain *dom = NULL;
	unsigned h;

	if (heap)
		return heap;
	if (domain) {
		dom = domain_get(pool, domain);
		if (!dom)
			return NULL;
	}
	heap = calloc(1, sizeof(*heap));
	if (!heap) {
		if (dom)
			domain_put(pool, dom);
		return NULL;
	}
	heap->uid = uid;
	heap->domain = domain;
	heap->dom = dom;
	if (dom)
		dom->heaps++;
	h = heap_hash(uid);
	heap->hnext = pool->buckets[h];
	pool->buckets[h] = heap;
	pool->nheaps++;
	return heap;
}

/* Frees a heap that has no slab left: it holds nothing worth keeping, and
 * daemons see many short-lived uids. */
static void heap_put(struct pool *pool, struct pool_heap *heap)
{
	struct pool_heap **p = &pool->buckets[heap_hash(heap->uid)];

	if (heap->nslabs)
		return;
	while (*p != heap)
		p = &(*p)->hnext;
	*p = heap->hnext;
	pool->nheaps--;
	if (heap->dom) {
		heap->dom->heaps--;
		domain_put(pool, heap->dom);
	}
	free(heap);
}

/* Hands an empty slab back to the backend. The caller settles the heap's
 * cache count and calls heap_put. */
static void slab_release(struct pool *pool, struct pool_slab *slab)
{
	struct pool_heap *heap = slab->heap;
	struct pool_block *first = blk_at(pool, slab->first);

	tlsf_remove(pool, heap, first, slab->size);
	arena_free_index(&pool->blocks, slab->first, first);
	if (slab->prev)
		slab->prev->next = slab->next;
	else
		heap->slabs = slab->next;
	if (slab->next)
		slab->next->prev = slab->prev;
	heap->nslabs--;
	pool->slabs--;
	domain_reserve(pool, heap, slab->size, false);
	pool->ops.destroy(pool->ctx, slab->backend);
	arena_free_index(&pool->slabs_arena, slab->index, slab);
}

/* A slab has just become empty and unpinned: cache it or give it back. */
static void slab_idle(struct pool *pool, struct pool_slab *slab)
{
	struct pool_heap *heap = slab->heap;

	if (!slab->dedicated && heap->cached < pool->keep_empty) {
		heap->cached++;
		return;
	}
	slab_release(pool, slab);
	heap_put(pool, heap);
}

/* Adds a backend slab to the heap as one free range. Needs a spare block
 * slot (arena_reserve). */
static struct pool_slab *slab_add(struct pool *pool, struct pool_heap *heap, void *backend,
                                  uint64_t size, bool dedicated)
{
	uint32_t si, bi;
	struct pool_slab *slab = arena_alloc(&pool->slabs_arena, &si);
	struct pool_block *b;

	if (!slab)
		return NULL;
	slab->index = si;
	slab->backend = backend;
	slab->heap = heap;
	slab->size = size;
	slab->uid = heap->uid;
	slab->dedicated = dedicated;
	slab->next = heap->slabs;
	if (heap->slabs)
		heap->slabs->prev = slab;
	heap->slabs = slab;
	heap->nslabs++;
	/* Empty and unpinned: counted as cache until its first block goes
	 * live, which keeps block_take's bookkeeping uniform. */
	if (!dedicated)
		heap->cached++;

	b = arena_alloc(&pool->blocks, &bi);
	b->slab = slab->index;
	block_set(b, size, true);
	slab->first = bi;
	tlsf_insert(pool, heap, bi, b, size);

	pool->slabs++;
	domain_reserve(pool, heap, size, true);
	return slab;
}

/*
 * The device has no room left for a slab of `top` bytes: the largest slab
 * that fits what is left, a multiple of POOL_SLAB_ALIGN below `top`, and at
 * least `min` bytes (what the request needs). ops->room, where the
 * backend has it, says where to start; the backend's create has the last
 * word, so each refusal steps down, twice as far as the step before (a
 * hint that is wrong, or none, costs a bounded number of tries), and the
 * last try is `min` itself: a request fails only when even what it needs is
 * not there. Sets *size to the size made.
 */
static int slab_obtain_tail(struct pool *pool, uint64_t top, uint64_t min, uint32_t uid,
                            uint64_t *size, void **backend)
{
	uint64_t want = top - POOL_SLAB_ALIGN, step = POOL_SLAB_ALIGN;
	int err;

	if (pool->ops.room) {
		uint64_t room = pool->ops.room(pool->ctx) & ~(uint64_t)(POOL_SLAB_ALIGN - 1);

		if (room < want)
			want = room;
	}
	if (want < min)
		want = min;
	for (;;) {
		err = pool->ops.create(pool->ctx, want, uid, backend);
		if (err != -ENOMEM || want == min)
			break;
		want = want - min > step ? want - step : min;
		step *= 2;
	}
	if (!err)
		*size = want;
	return err;
}

/*
 * Asks the backend for a slab of *size bytes for (uid, domain). First what
 * the domain may still make (domain_budget): a slab past it would eat into
 * another domain's guarantee, so it shrinks to the budget (never below
 * `min`, what the request needs), or the request fails. On -ENOMEM, and
 * when the budget falls short, releases every idle slab of every uid and
 * looks once more, since a cached slab of another uid is memory this one
 * cannot use. A standard slab that still does not fit gives way to a
 * smaller one (slab_obtain_tail) when `min` is less: the last part of a
 * device is as usable as the rest. Sets *size to the size made.
 */
static int pool_slab_obtain(struct pool *pool, uint32_t domain, uint64_t *size, uint64_t min,
                            uint32_t uid, void **backend)
{
	uint64_t budget = domain_budget(pool, domain_find(pool, domain));
	int err;

	if (budget < *size) {
		pool_trim(pool, 0, true);
		budget = domain_budget(pool, domain_find(pool, domain));
	}
	if (budget < min)
		return -ENOMEM;
	/* min is a whole number of alignment units, or *size itself (an
	 * exact dedicated slab). */
	if (budget < *size)
		*size = budget & ~(uint64_t)(POOL_SLAB_ALIGN - 1);
	err = pool->ops.create(pool->ctx, *size, uid, backend);
	if (err == -ENOMEM) {
		pool_trim(pool, 0, true);
		err = pool->ops.create(pool->ctx, *size, uid, backend);
	}
	if (err == -ENOMEM && min < *size)
		err = slab_obtain_tail(pool, *size, min, uid, size, backend);
	if (err > 0)
		err = -EIO;
	return err;
}

/* Carves a live block of `size` bytes at `align` out of the free range bi
 * and counts it. Needs two spare block slots. */
static struct pool_block *block_take(struct pool *pool, uint32_t bi, uint64_t size, uint64_t align)
{
	struct pool_slab *slab = block_slab(pool, blk_at(pool, bi));
	struct pool_heap *heap = slab->heap;
	struct pool_block *b = tlsf_split(pool, heap, bi, size, align);

	if (slab->live++ == 0 && !slab->pins && !slab->dedicated)
		heap->cached--;
	heap->used += size;
	pool->used += size;
	pool->live++;
	pool->allocs++;
	if (pool->used > pool->peak)
		pool->peak = pool->used;
	return b;
}

struct pool *pool_create(const struct pool_config *cfg, const struct pool_slab_ops *ops, void *ctx)
{
	uint64_t slab_size = POOL_DEFAULT_SLAB, threshold = 0;
	unsigned keep_empty = 1;
	bool exact = false;
	struct pool *pool;

	if (!ops || !ops->create || !ops->destroy)
		return NULL;
	/* An all-zero config means "defaults", like NULL (see pool.h). */
	if (cfg && (cfg->slab_size || cfg->large_threshold || cfg->keep_empty || cfg->exact)) {
		if (cfg->slab_size)
			slab_size = cfg->slab_size;
		threshold = cfg->large_threshold;
		keep_empty = cfg->keep_empty;
		exact = cfg->exact;
	}
	if (slab_size % POOL_SLAB_ALIGN || slab_size > POOL_MAX_SLAB)
		return NULL;
	/* By default a request gets a dedicated slab only when no standard
	 * slab could hold it (pool.h says why). */
	if (!threshold)
		threshold = slab_size;
	/* A request bigger than a standard slab cannot come from one. */
	if (threshold > slab_size)
		threshold = slab_size;

	pool = calloc(1, sizeof(*pool));
	if (!pool)
		return NULL;
	pool->ops = *ops;
	pool->ctx = ctx;
	pool->slab_size = slab_size;
	pool->large_threshold = threshold;
	pool->keep_empty = keep_empty;
	pool->exact = exact;
	arena_init(&pool->blocks, sizeof(struct pool_block), 32);
	/* Slab indices leave the top bit of pool_block.slab to the free flag. */
	arena_init(&pool->slabs_arena, sizeof(struct pool_slab), 31);
	return pool;
}

void pool_destroy(struct pool *pool)
{
	if (!pool)
		return;
	for (unsigned i = 0; i < 1u << HEAP_BUCKET_BITS; i++) {
		struct pool_heap *heap, *hnext;

		for (heap = pool->buckets[i]; heap; heap = hnext) {
			hnext = heap->hnext;
			for (struct pool_slab *slab = heap->slabs; slab; slab = slab->next)
				pool->ops.destroy(pool->ctx, slab->backend);
			free(heap);
		}
	}
	while (pool->domains) {
		struct pool_domain *d = pool->domains;

		pool->domains = d->next;
		free(d);
	}
	/* Every block and slab record goes with its arena. */
	arena_finish(&pool->blocks);
	arena_finish(&pool->slabs_arena);
	free(pool);
}

int pool_alloc(struct pool *pool, uint32_t uid, uint64_t size, uint64_t align,
               struct pool_block **out)
{
	return pool_alloc_prefer(pool, uid, 0, size, align, NULL, out);
}

int pool_alloc_in(struct pool *pool, uint32_t uid, uint32_t domain, uint64_t size, uint64_t align,
                  struct pool_block **out)
{
	return pool_alloc_prefer(pool, uid, domain, size, align, NULL, out);
}

int pool_alloc_prefer(struct pool *pool, uint32_t uid, uint32_t domain, uint64_t size,
                      uint64_t align, const struct pool_prefer *pref, struct pool_block **out)
{
	struct pool_heap *heap;
	struct pool_slab *slab;
	uint32_t bi = NIL;
	uint64_t rsize, need, slab_bytes;
	bool dedicated;
	void *backend;
	int err;

	if (!pool || !out || !size)
		return -EINVAL;
	if ((align & (align - 1)) || align > POOL_MAX_ALIGNMENT)
		return -EINVAL;
	if (align < POOL_GRANULE)
		align = POOL_GRANULE;
	if (size > UINT64_MAX - (POOL_GRANULE - 1))
		return -EINVAL;
	rsize = align_up(size, POOL_GRANULE);
	if (rsize > UINT64_MAX - (align - POOL_GRANULE))
		return -EINVAL;
	need = rsize + (align - POOL_GRANULE);
	dedicated = size > pool->large_threshold;
	slab_bytes = pool->slab_size;
	if (dedicated) {
		if (rsize > UINT64_MAX - (POOL_SLAB_ALIGN - 1))
			return -EINVAL;
		/* The block sits at offset 0, aligned however the slab is: an
		 * exact slab needs no room for alignment. */
		slab_bytes = pool->exact ? rsize : align_up(rsize, POOL_SLAB_ALIGN);
		/* No device has that much: out of memory, as the backend
		 * would have said, without asking it. */
		if (slab_bytes > POOL_MAX_SLAB) {
			err = -ENOMEM;
			goto fail;
		}
	}

	/* A split takes up to two descriptors (a new slab's whole range and
	 * its tail, or an aligned front and a tail): reserved first, so that
	 * nothing can fail halfway through changing the lists. */
	if (pool->blocks.nfree < 2) {
		err = arena_reserve(&pool->blocks, 2);
		if (err)
			goto fail;
	}

	heap = heap_find(pool, uid, domain);
	if (heap && !dedicated)
		bi = tlsf_fit(pool, heap, rsize, align, need, pref);
	if (!bi) {
		/* A standard slab may shrink to what the device has left,
		 * never below what this request needs (offset 0 of a slab
		 * suits every alignment); a dedicated one is that already.
		 * May trim, which may free the heap we just found. */
		uint64_t min = dedicated ? slab_bytes : align_up(rsize, POOL_SLAB_ALIGN);

		/* Under a guarantee, a slab's every byte counts: the rest
		 * of a standard slab after more than half of it would only
		 * serve smaller requests (pool.h). */
		if (!dedicated && rsize > pool->slab_size / 2 &&
		    domain_guaranteed(domain_find(pool, domain)))
			slab_bytes = min;
		err = pool_slab_obtain(pool, domain, &slab_bytes, min, uid, &backend);
		if (err)
			goto fail;
		heap = heap_get(pool, uid, domain);
		slab = heap ? slab_add(pool, heap, backend, slab_bytes, dedicated) : NULL;
		if (!slab) {
			pool->ops.destroy(pool->ctx, backend);
			if (heap)
				heap_put(pool, heap);
			err = -ENOMEM;
			goto fail;
		}
		/* Offset 0 of a fresh slab suits every alignment. */
		bi = slab->first;
	}
	*out = block_take(pool, bi, rsize, align);
	return 0;
fail:
	if (err == -ENOMEM)
		pool->ooms++;
	return err;
}

void pool_free(struct pool *pool, struct pool_block *block)
{
	struct pool_slab *slab;
	struct pool_heap *heap;
	uint64_t size;

	if (!pool || !block)
		return;
	slab = block_slab(pool, block);
	heap = slab->heap;
	size = block_size(block);

	heap->used -= size;
	pool->used -= size;
	pool->live--;
	pool->frees++;
	slab->live--;
	tlsf_merge(pool, heap, block_index(pool, slab, block), block, size);

	if (!slab->live && !slab->pins)
		slab_idle(pool, slab);
}

uint64_t pool_block_offset(const struct pool_block *block)
{
	return block_offset(block);
}

uint64_t pool_block_size(const struct pool_block *block)
{
	return block_size(block);
}

struct pool_slab *pool_block_slab(const struct pool_block *block)
{
	return block_slab(pool_of_block(block), block);
}

void *pool_slab_backend(const struct pool_slab *slab)
{
	return slab->backend;
}

uint64_t pool_slab_size(const struct pool_slab *slab)
{
	return slab->size;
}

uint32_t pool_slab_uid(const struct pool_slab *slab)
{
	return slab->uid;
}

bool pool_slab_dedicated(const struct pool_slab *slab)
{
	return slab->dedicated;
}

void pool_slab_pin(struct pool_slab *slab)
{
	/* A pinned empty slab is held for its pin, not as cache. */
	if (slab->pins++ == 0 && !slab->live && !slab->dedicated)
		slab->heap->cached--;
}

void pool_slab_unpin(struct pool *pool, struct pool_slab *slab)
{
	if (!slab->pins)
		return;
	if (--slab->pins == 0 && !slab->live)
		slab_idle(pool, slab);
}

static unsigned heap_trim(struct pool *pool, struct pool_heap *heap)
{
	struct pool_slab *slab, *next;
	unsigned n = 0;

	for (slab = heap->slabs; slab; slab = next) {
		next = slab->next;
		if (slab->live || slab->pins)
			continue;
		if (!slab->dedicated)
			heap->cached--;
		slab_release(pool, slab);
		n++;
	}
	heap_put(pool, heap);
	return n;
}

unsigned pool_trim(struct pool *pool, uint32_t uid, bool all)
{
	struct pool_heap *heap, *next;
	unsigned n = 0;

	if (!pool)
		return 0;
	for (unsigned i = 0; i < 1u << HEAP_BUCKET_BITS; i++) {
		if (!all && i != heap_hash(uid))
			continue;
		for (heap = pool->buckets[i]; heap; heap = next) {
			next = heap->hnext;
			if (all || heap->uid == uid)
				n += heap_trim(pool, heap);
		}
	}
	return n;
}
void pool_get_stats(const struct pool *pool, struct pool_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!pool)
		return;
	out->reserved = pool->reserved;
	out->used = pool->used;
	out->free = pool->reserved - pool->used;
	out->free_blocks = pool->free_blocks;
	out->peak = pool->peak;
	out->slabs = pool->slabs;
	out->live = pool->live;
	out->allocs = pool->allocs;
	out->frees = pool->frees;
	out->ooms = pool->ooms;
	for (unsigned i = 0; i < 1u << HEAP_BUCKET_BITS; i++) {
		for (const struct pool_heap *heap = pool->buckets[i]; heap; heap = heap->hnext) {
			uint64_t l = tlsf_largest_free(pool, heap);

			if (l > out->largest_free)
				out->largest_free = l;
		}
	}
}

uint64_t pool_uid_used(const struct pool *pool, uint32_t uid)
{
	uint64_t used = 0;

	if (!pool)
		return 0;
	for (const struct pool_heap *heap = pool->buckets[heap_hash(uid)]; heap; heap = heap->hnext)
		used += heap->uid == uid ? heap->used : 0;
	return used;
}

void pool_available(const struct pool *pool, uint32_t uid, uint32_t domain, uint64_t *total,
                    uint64_t *largest)
{
	const struct pool_heap *heap = pool ? heap_find(pool, uid, domain) : NULL;
	uint64_t fresh, unit;

	*total = *largest = 0;
	if (!pool)
		return;
	if (heap) {
		*total = heap->reserved - heap->used;
		*largest = tlsf_largest_free(pool, heap);
	}
	fresh = domain_budget(pool, heap ? heap->dom : domain_find(pool, domain));
	if (pool->ops.room) {
		uint64_t room = pool->ops.room(pool->ctx);

		if (room < fresh)
			fresh = room;
	}
	/* New slabs come in alignment units, but an exact one (the direct
	 * allocator's) is the request's size. */
	unit = pool->exact ? POOL_GRANULE : POOL_SLAB_ALIGN;
	fresh &= ~(unit - 1);
	*total = fresh > UINT64_MAX - *total ? UINT64_MAX : *total + fresh;
	if (fresh > *largest)
		*largest = fresh;
}

/* What a check walk adds up, to compare with the running counters. */
struct check_sum {
	uint64_t reserved, used, slabs, live, free_blocks;
};

int pool_check_fail(char *msg, unsigned msg_len, const char *fmt, ...)
{
	va_list ap;

	if (msg && msg_len) {
		va_start(ap, fmt);
		vsnprintf(msg, msg_len, fmt, ap);
		va_end(ap);
	}
	return -EFAULT;
}

static int slab_check(const struct pool *pool, const struct pool_slab *slab, struct check_sum *sum,
                      uint64_t *used, char *msg, unsigned msg_len)
{
	const struct pool_block *b = NULL, *prev = NULL;
	uint64_t off = 0, live = 0;
	uint32_t uid = slab->uid, bi, prev_i = NIL;

	CHECK(slab->size % (slab->dedicated && pool->exact ? POOL_GRANULE : POOL_SLAB_ALIGN) == 0 &&
	          slab->size && slab->size <= POOL_MAX_SLAB && slab->first &&
	          (slab->dedicated || slab->size <= pool->slab_size) &&
	          slab_at(pool, slab->index) == slab,
	      "uid %u: bad slab of %" PRIu64 " bytes", uid, slab->size);
	for (bi = slab->first; bi; prev = b, prev_i = bi, bi = b->next_phys) {
		uint64_t size;

		b = blk_at(pool, bi);
		size = block_size(b);
		CHECK(block_slab(pool, b) == slab && b->prev_phys == prev_i && blk_index(b) == bi &&
		          (block_is_free(b) || !b->prev_free),
		      "uid %u: bad links at %" PRIu64, uid, off);
		CHECK(block_offset(b) == off, "uid %u: block at %" PRIu64 ", expected %" PRIu64,
		      uid, block_offset(b), off);
		CHECK(size && size % POOL_GRANULE == 0 && size <= slab->size - off,
		      "uid %u: block at %" PRIu64 " of %" PRIu64 " bytes", uid, off, size);
		if (block_is_free(b)) {
			CHECK(!prev || !block_is_free(prev), "uid %u: free neighbours at %" PRIu64,
			      uid, off);
			sum->free_blocks++;
		} else {
			live++;
			*used += size;
		}
		off += size;
	}
	CHECK(off == slab->size, "uid %u: blocks cover %" PRIu64 " of %" PRIu64 " bytes", uid, off,
	      slab->size);
	CHECK(live == slab->live, "uid %u: slab has %" PRIu64 " live, counts %" PRIu64, uid, live,
	      slab->live);
	CHECK(live || slab->pins || !slab->dedicated, "uid %u: idle dedicated slab held", uid);
	sum->live += live;
	sum->reserved += slab->size;
	sum->slabs++;
	return 0;
}

static int heap_check(const struct pool *pool, const struct pool_heap *heap, struct check_sum *sum,
                      char *msg, unsigned msg_len)
{
	const struct pool_slab *slab, *prev = NULL;
	uint64_t nslabs = 0, used = 0, free_before = sum->free_blocks,
	         reserved_before = sum->reserved;
	unsigned cached = 0;
	int err;

	CHECK(heap->slabs, "uid %u: heap without slabs", heap->uid);
	for (slab = heap->slabs; slab; prev = slab, slab = slab->next) {
		CHECK(++nslabs <= heap->nslabs && slab->prev == prev && slab->heap == heap &&
		          slab->uid == heap->uid,
		      "uid %u: bad slab list", heap->uid);
		err = slab_check(pool, slab, sum, &used, msg, msg_len);
		if (err)
			return err;
		if (!slab->live && !slab->pins && !slab->dedicated)
			cached++;
	}
	CHECK(nslabs == heap->nslabs, "uid %u: %" PRIu64 " slabs, counts %" PRIu64, heap->uid,
	      nslabs, heap->nslabs);
	CHECK(used == heap->used, "uid %u: %" PRIu64 " used, counts %" PRIu64, heap->uid, used,
	      heap->used);
	CHECK(sum->reserved - reserved_before == heap->reserved,
	      "uid %u: %" PRIu64 " bytes in slabs, counts %" PRIu64, heap->uid,
	      sum->reserved - reserved_before, heap->reserved);
	CHECK(heap->domain ? heap->dom && heap->dom->id == heap->domain &&
	                         domain_find(pool, heap->domain) == heap->dom
	                   : !heap->dom,
	      "uid %u: bad domain %u", heap->uid, heap->domain);
	CHECK(cached == heap->cached && cached <= pool->keep_empty,
	      "uid %u: %u cached slabs, counts %u, keeps %u", heap->uid, cached, heap->cached,
	      pool->keep_empty);
	sum->used += used;
	return tlsf_check_lists(pool, heap, sum->free_blocks - free_before, msg, msg_len);
}

int pool_check(const struct pool *pool, char *msg, unsigned msg_len)
{
	struct check_sum sum = {0};
	unsigned nheaps = 0;
	int err;

	CHECK(pool, "no pool");
	for (unsigned i = 0; i < 1u << HEAP_BUCKET_BITS; i++) {
		for (const struct pool_heap *heap = pool->buckets[i]; heap; heap = heap->hnext) {
			CHECK(++nheaps <= pool->nheaps && heap_hash(heap->uid) == i &&
			          heap_find(pool, heap->uid, heap->domain) == heap,
			      "uid %u: bad heap table", heap->uid);
			err = heap_check(pool, heap, &sum, msg, msg_len);
			if (err)
				return err;
		}
	}
	CHECK(nheaps == pool->nheaps, "%u heaps, counts %u", nheaps, pool->nheaps);
	/* Every descriptor is a block or a free range of some slab, and
	 * every slab record a slab. */
	CHECK(arena_check(&pool->blocks) == 0 && arena_check(&pool->slabs_arena) == 0, "bad arena");
	CHECK(pool->blocks.live == sum.live + sum.free_blocks &&
	          pool->slabs_arena.live == sum.slabs,
	      "%" PRIu64 " block and %" PRIu64 " slab records for %" PRIu64 " blocks in %" PRIu64
	      " slabs",
	      pool->blocks.live, pool->slabs_arena.live, sum.live + sum.free_blocks, sum.slabs);
	CHECK(sum.reserved == pool->reserved && sum.slabs == pool->slabs,
	      "%" PRIu64 " bytes in %" PRIu64 " slabs, counts %" PRIu64 " in %" PRIu64,
	      sum.reserved, sum.slabs, pool->reserved, pool->slabs);
	CHECK(sum.used == pool->used && sum.live == pool->live,
	      "%" PRIu64 " bytes in %" PRIu64 " live blocks, counts %" PRIu64 " in %" PRIu64,
	      sum.used, sum.live, pool->used, pool->live);
	CHECK(sum.free_blocks == pool->free_blocks, "%" PRIu64 " free blocks, counts %" PRIu64,
	      sum.free_blocks, pool->free_blocks);
	CHECK(pool->peak >= pool->used && pool->allocs - pool->frees == pool->live,
	      "peak %" PRIu64 ", %" PRIu64 " allocs, %" PRIu64 " frees", pool->peak, pool->allocs,
	      pool->frees);
	return domain_check(pool, msg, msg_len);
}

void pool_walk(const struct pool *pool, void (*slab_fn)(void *arg, const struct pool_walk_slab *s),
               void (*block_fn)(void *arg, uint64_t offset, uint64_t size,
                                const struct pool_block *live),
               void *arg)
{
	for (unsigned i = 0; i < sizeof(pool->buckets) / sizeof(pool->buckets[0]); i++) {
		for (const struct pool_heap *h = pool->buckets[i]; h; h = h->hnext) {
			for (const struct pool_slab *sl = h->slabs; sl; sl = sl->next) {
				struct pool_walk_slab ws = {h->uid, h->domain, sl->size,
				                            sl->dedicated};
				slab_fn(arg, &ws);
				uint64_t off = 0;
				for (uint32_t bi = sl->first; bi != NIL;) {
					const struct pool_block *b = blk_at(pool, bi);
					block_fn(arg, off, block_size(b),
					         block_is_free(b) ? NULL : b);
					off += block_size(b);
					bi = b->next_phys;
				}
			}
		}
	}
}
