/*
 * lease_internal.h - what lease.c and lease_free.c share of the lease
 * allocator (lease.h): a lease and an instance's leases.
 */
#ifndef GPB_CLIENT_LEASE_INTERNAL_H
#define GPB_CLIENT_LEASE_INTERNAL_H

#include "lease.h"
#include "pool.h"
#include "slab.h"
#include "thread.h"

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
	uint64_t idle_since;  /* lease_now_ms() when live fell to 0, or it was filed ready */
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

/* One instance's leases for one stream (issue 29): the blocks allocated
 * for use on @stream (gpb_alloc_async; NULL: gpb_alloc, the legacy default
 * stream) come from these leases only, so that a block freed on that
 * stream is served again at once, its reuse ordered by the stream itself.
 * An instance has one of these per stream it allocates on. */
struct lease_inst {
	struct lease_inst *next;
	struct lease_state *ls;
	uint64_t instance;
	void *stream;
	unsigned arena; /* the arena whose threads it serves (lease.h, Locks) */
	struct pool *pool;
	struct lease *leases; /* in the pool or ready */
	unsigned count;
	uint64_t leased;
	/* What its arena's allocs and frees write, THREAD_APART from what
	 * every thread reads walking the list (inst_find): shared, those
	 * lines made two threads' allocations wait on each other. */
	uint64_t in_use __attribute__((aligned(THREAD_APART)));
	/* Blocks freed lately, still the pool's (not in use, not in in_use):
	 * an alloc of the same rounded size takes one back without the pool.
	 * Flushed to the pool before leases are judged free. Their figures are
	 * kept beside them, so that a hit asks the pool nothing. */
	struct lease_cached {
		struct pool_block *b;
		struct lease *l;
		uint64_t size, offset;
	} cache[LEASE_CACHE];
	unsigned ncache;
	/* Blocks freed while carved: the carve may be open in another process
	 * (an orphan), whose bytes these are until it lets go, so their range
	 * is served to nobody here; they go back to the pool only as their
	 * lease goes back (lease_unquarantine), an orphan lease then for the
	 * daemon if the carve is still open. */
	struct pool_block **quarantine;
	unsigned nquarantine, quarantine_cap;
};

/* Gives the quarantined blocks of lease @l back to @in's pool, just
 * before the lease goes back. Allocator lock held. */
static inline void lease_unquarantine(struct lease_inst *in, const struct lease *l)
{
	for (unsigned k = 0; k < in->nquarantine;) {
		if (pool_slab_backend(pool_block_slab(in->quarantine[k])) == l) {
			pool_free(in->pool, in->quarantine[k]);
			in->quarantine[k] = in->quarantine[--in->nquarantine];
		} else {
			k++;
		}
	}
}

#define LEASE_SLOT_MASK  ((1u << LEASE_SLOT_BITS) - 1)
#define LEASE_INDEX_MASK ((1u << LEASE_INDEX_BITS) - 1)

/* The allocator's lock: the state's, then every arena's (lease.h). */
static inline void lease_lock_arenas(struct lease_state *ls)
{
	for (unsigned a = 0; a < ls->narenas; a++)
		pthread_mutex_lock(&ls->arenas[a].lock);
}

static inline void lease_unlock_arenas(struct lease_state *ls)
{
	for (unsigned a = ls->narenas; a-- > 0;)
		pthread_mutex_unlock(&ls->arenas[a].lock);
}

static inline void lease_lock(struct lease_state *ls)
{
	pthread_mutex_lock(&ls->lock);
	lease_lock_arenas(ls);
}

static inline void lease_unlock(struct lease_state *ls)
{
	lease_unlock_arenas(ls);
	pthread_mutex_unlock(&ls->lock);
}

/* The calling thread's arena: threads are dealt out in turn, so that as
 * many threads as arenas never share one. */
static inline unsigned lease_thread_arena(const struct lease_state *ls)
{
	return thread_number() % ls->narenas;
}

/* The arena of local id @id (its lock guards the id's slot), or NULL for
 * an id that names none. No lock needed: the arenas are fixed. */
static inline struct lease_arena *lease_id_arena(struct lease_state *ls, uint64_t id)
{
	uint64_t x = (id ^ ls->salt) & ((1ull << 48) - 1);
	uint32_t a = (uint32_t)((x & LEASE_SLOT_MASK) >> LEASE_INDEX_BITS);
	return lease_id_local(id) && a < ls->narenas ? &ls->arenas[a] : NULL;
}

/* The slot of live block @id, or NULL (not local, freed, a stale id or
 * another client's). Its arena's lock held (lease_id_arena), or the
 * allocator's. */
static inline struct lease_slot *lease_slot_get(struct lease_state *ls, uint64_t id)
{
	uint64_t x = (id ^ ls->salt) & ((1ull << 48) - 1);
	uint32_t i = (uint32_t)(x & LEASE_INDEX_MASK);
	struct lease_arena *ar = lease_id_arena(ls, id);
	if (!ar || i >= ar->slot_count)
		return NULL;
	struct lease_slot *sl = &ar->slots[i];
	return sl->b && sl->gen == ((x >> LEASE_SLOT_BITS) & LEASE_SLOT_MASK) ? sl : NULL;
}

/* Gives the cached blocks of @in back to its pool. */
static inline void lease_inst_flush(struct lease_inst *in)
{
	while (in->ncache)
		pool_free(in->pool, in->cache[--in->ncache].b);
}

/* Whether wholly free lease @l may go back now: not while a blocking
 * stream of its context captures, since its return waits for the
 * context's work (cuCtxSynchronize), which would break the capture; it
 * goes at a later look. Allocator lock held (a driver query under it). */
static inline bool lease_may_go(const struct lease *l)
{
	const struct slab_map *m = l->map;
	return !m || !m->opener->capturing || !m->opener->capturing(m->priv, NULL);
}

/* Allocator lock held: lets wholly free lease @l of @in go onto the doomed
 * list, unpinned from the pool (its quarantined blocks back first) or, a
 * ready one never taken in, as the pool would have let it go. */
void lease_let_go(struct lease_inst *in, struct lease *l);

/* Allocator lock held: unpins every wholly free lease of @in, which the
 * pool then lets go (doomed). Returns how many. The caller polls the
 * deferred frees first, once for all the instances it looks at
 * (lease_return.c). */
unsigned lease_inst_drop_free(struct lease_inst *in);

/* Allocator lock held: what the library uses of @instance's leases, every
 * stream's (what lease and lease_return tell the daemon). */
uint64_t lease_instance_in_use(struct lease_state *ls, uint64_t instance);

/* Allocator lock held: frees the block of slot @sl (lease_free.c);
 * @carved: it was carved, and its range is quarantined rather than freed. */
void lease_block_free(struct lease_state *ls, struct lease_slot *sl, bool carved);

/*
 * gpb_free's promise (gpubroker.h): the work queued on the memory has run
 * before the range can be anyone's again, here the next block served from
 * the lease. Waits (cuda: the mapping's context), neither lock held, so
 * other threads keep allocating meanwhile; puts the caller's reference.
 */
static inline void lease_map_finish(struct slab_map *map)
{
	slab_cache_finish(map);
	slab_cache_put(map);
}

/* lease_defer.c. gpb_free of local block @id (taken: `freeing`), whose
 * mapping @map (a reference, put here) may have work queued: behind a
 * fence on @stream (NULL: the legacy default stream). Neither lock held. */
int lease_free_deferred(struct lease_state *ls, uint64_t id, struct slab_map *map, void *stream);
/* Allocator lock held: a free of @sl's block, held for a graph since its
 * allocation (lease_slot.hold): behind that fence, whatever the free. */
void lease_held_take(struct lease_state *ls, struct lease_slot *sl, uint64_t id);
/* Allocator lock held: whether frees wait behind fences (or a batch). */
static inline bool lease_deferred_any(const struct lease_state *ls)
{
	return ls->deferred_len || ls->held || ls->batch.n;
}

#endif
