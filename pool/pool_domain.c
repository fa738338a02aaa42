/*
 * pool_domain.c - domains and their guarantees (pool.h, "Domains and
 * guarantees"): what a new slab may take so that every guarantee can still
 * be met, whatever anyone else does.
 *
 * The pool keeps one number for all the guarantees, `unmet` (the sum over
 * the domains of guarantee - reserved where positive), updated wherever a
 * domain's slabs or guarantee change, so that the bound on a new slab is
 * O(1):
 *
 *     new slab of domain d  <=  capacity - reserved - (unmet - unmet(d))
 *
 * A slab within that keeps reserved + unmet <= capacity: a slab of d's own
 * that is smaller than d's unmet part moves bytes from one term to the
 * other, a larger one is bounded by it. A domain's record lives while it
 * has a guarantee or heaps (slabs it made while it had one, which stay
 * until freed, as ordinary slabs); records are few (the daemon's
 * partitions), so they sit in a list.
 */
#include "pool_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

static uint64_t domain_unmet(const struct pool_domain *d)
{
	return d && d->guarantee > d->reserved ? d->guarantee - d->reserved : 0;
}

struct pool_domain *domain_find(const struct pool *pool, uint32_t id)
{
	struct pool_domain *d = id ? pool->domains : NULL;

	while (d && d->id != id)
		d = d->next;
	return d;
}

struct pool_domain *domain_get(struct pool *pool, uint32_t id)
{
	struct pool_domain *d = domain_find(pool, id);

	if (d)
		return d;
	d = calloc(1, sizeof(*d));
	if (!d)
		return NULL;
	d->id = id;
	d->next = pool->domains;
	pool->domains = d;
	return d;
}

void domain_put(struct pool *pool, struct pool_domain *d)
{
	struct pool_domain **p = &pool->domains;

	if (d->heaps || d->guarantee)
		return;
	while (*p != d)
		p = &(*p)->next;
	*p = d->next;
	free(d);
}

void domain_reserve(struct pool *pool, struct pool_heap *heap, uint64_t size, bool grow)
{
	struct pool_domain *d = heap->dom;

	if (grow) {
		heap->reserved += size;
		pool->reserved += size;
	} else {
		heap->reserved -= size;
		pool->reserved -= size;
	}
	if (!d)
		return;
	pool->unmet -= domain_unmet(d);
	d->reserved = grow ? d->reserved + size : d->reserved - size;
	pool->unmet += domain_unmet(d);
}

uint64_t domain_budget(const struct pool *pool, const struct pool_domain *d)
{
	uint64_t taken;

	if (!pool->capacity)
		return UINT64_MAX;
	taken = pool->reserved + (pool->unmet - domain_unmet(d));
	return pool->capacity > taken ? pool->capacity - taken : 0;
}

int pool_set_capacity(struct pool *pool, uint64_t bytes)
{
	if (!pool)
		return -EINVAL;
	if (bytes && pool->reserved + pool->unmet > bytes) {
		pool_trim(pool, 0, true);
		if (pool->reserved + pool->unmet > bytes)
			return -ENOSPC;
	}
	pool->capacity = bytes;
	return 0;
}

/* Whether the capacity holds the slabs and the unmet guarantees with
 * domain's unmet part at `unmet` instead of what it is. */
static bool guarantee_fits(const struct pool *pool, uint32_t domain, uint64_t unmet)
{
	return !pool->capacity ||
	       pool->reserved + pool->unmet - domain_unmet(domain_find(pool, domain)) + unmet <=
	           pool->capacity;
}

int pool_set_guarantee(struct pool *pool, uint32_t domain, uint64_t bytes)
{
	struct pool_domain *d;
	uint64_t have, unmet;

	if (!pool || !domain)
		return -EINVAL;
	d = domain_find(pool, domain);
	if (!d && !bytes)
		return 0;
	have = d ? d->reserved : 0;
	unmet = bytes > have ? bytes - have : 0;
	if (!guarantee_fits(pool, domain, unmet)) {
		/* Idle slabs go back on demand: they are not what makes a
		 * refusal. Trimming may free d (no heaps left, no guarantee)
		 * and changes what the domain has. */
		pool_trim(pool, 0, true);
		d = domain_find(pool, domain);
		have = d ? d->reserved : 0;
		unmet = bytes > have ? bytes - have : 0;
		if (!guarantee_fits(pool, domain, unmet))
			return -ENOSPC;
	}
	d = domain_get(pool, domain);
	if (!d)
		return -ENOMEM;
	pool->unmet -= domain_unmet(d);
	d->guarantee = bytes;
	pool->unmet += domain_unmet(d);
	domain_put(pool, d);
	return 0;
}

uint64_t pool_domain_reserved(const struct pool *pool, uint32_t domain)
{
	const struct pool_domain *d = pool ? domain_find(pool, domain) : NULL;

	return d ? d->reserved : 0;
}

uint64_t pool_room(const struct pool *pool, uint32_t domain)
{
	return pool ? domain_budget(pool, domain_find(pool, domain)) : 0;
}

int domain_check(const struct pool *pool, char *msg, unsigned msg_len)
{
	uint64_t unmet = 0;

	for (const struct pool_domain *d = pool->domains; d; d = d->next) {
		uint64_t reserved = 0;
		unsigned heaps = 0;

		CHECK(d->id && (d->heaps || d->guarantee) && domain_find(pool, d->id) == d,
		      "domain %u: bad record (%u heaps, guarantee %" PRIu64 ")", d->id, d->heaps,
		      d->guarantee);
		for (unsigned i = 0; i < 1u << HEAP_BUCKET_BITS; i++) {
			for (const struct pool_heap *h = pool->buckets[i]; h; h = h->hnext) {
				if (h->dom != d)
					continue;
				heaps++;
				reserved += h->reserved;
			}
		}
		CHECK(heaps == d->heaps && reserved == d->reserved,
		      "domain %u: %u heaps of %" PRIu64 " bytes, counts %u of %" PRIu64, d->id,
		      heaps, reserved, d->heaps, d->reserved);
		unmet += domain_unmet(d);
	}
	CHECK(unmet == pool->unmet, "guarantees lack %" PRIu64 ", counts %" PRIu64, unmet,
	      pool->unmet);
	CHECK(!pool->capacity || pool->reserved + pool->unmet <= pool->capacity,
	      "%" PRIu64 " bytes in slabs and %" PRIu64 " guaranteed over a capacity of %" PRIu64,
	      pool->reserved, pool->unmet, pool->capacity);
	return 0;
}
