/*
 * lease_internal.h - what lease.c and lease_free.c share of the lease
 * allocator (lease.h): a lease and an instance's leases.
 */
#ifndef GPB_CLIENT_LEASE_INTERNAL_H
#define GPB_CLIENT_LEASE_INTERNAL_H

#include "lease.h"
#include "pool.h"
#include "slab.h"

struct lease {
	struct lease *next; /* the instance's leases, or the doomed list */
	struct lease_inst *inst;
	uint64_t id;     /* the daemon's lease id (a track entry of TRACK_ALLOC) */
	char *base;      /* where it is mapped */
	uint64_t size;   /* bytes granted */
	uint64_t offset; /* in its slab */
	uint64_t slab;
	int device;
	struct pool_slab *ps; /* NULL while ready (not in the pool yet) */
	uint64_t live;        /* local blocks in it */
	uint64_t carves;      /* carved blocks in it: it cannot go back */
	uint64_t idle_since;  /* lease_now_ms() when live fell to 0 */
	/* Its mapping (a reference of its own, NULL where none was had):
	 * what a free waits on (cuda: the work queued in its context) and
	 * whether its context died under it (then it is mapped anew before
	 * a block is served from it, lease_renew). */
	struct slab_map *map;
};

static inline void lease_map_put(struct lease *l)
{
	if (l->map)
		slab_cache_put(l->map);
	l->map = NULL;
}

struct lease_inst {
	struct lease_inst *next;
	struct lease_state *ls;
	uint64_t instance;
	struct pool *pool;
	struct lease *leases; /* in the pool or ready */
	unsigned count;
	uint64_t leased, in_use;
	uint64_t max_lease; /* the largest slab_size seen: larger requests are allocs */
};

/* Allocator lock held: frees block @b of @id (lease_free.c). */
void lease_block_free(struct lease_state *ls, uint64_t id, struct pool_block *b);

#endif
