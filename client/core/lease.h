/*
 * lease.h - the lease allocator: device memory served from the instance's
 * leases, with no round trip to the daemon (issue 27).
 *
 * A lease is a range of a slab the daemon hands this connection whole
 * (`lease`, PROTOCOL.md) and charges to the instance. The library carves
 * blocks out of it with the pool module (pool/pool.h), one pool per
 * instance, each lease one of the pool's slabs. gpb_alloc of a size up to
 * the daemon's slab size is served from the leases when they have room;
 * otherwise the library asks for one more lease (the size it needs; the
 * daemon doubles) and tries again. Larger requests, and a client whose
 * daemon answers `lease` with not_supported (allocators "direct" and
 * "async"), or one started with GPUBROKER_LEASE=0, use today's
 * per-allocation requests.
 *
 * Ids. A block inside a lease ("local") has an id of this client's own
 * namespace: the top 16 bits LEASE_ID_TAG, the rest counted. The daemon
 * does not know it; gpb_export and gpb_attach of a local block first carve
 * it (`lease_carve`), a daemon allocation at the same bytes, and use the
 * carve's id. A lease with a carve cannot be returned until the carve is
 * freed (with the block).
 *
 * Locks. The client's (client.h: one exchange at a time on the socket)
 * and this allocator's. The order is always client, then allocator; never
 * the other way round. The allocator's lock is split by thread (issue 29:
 * one lock made two threads slower than one): each thread allocates in an
 * arena of its own (one per CPU, at most LEASE_ARENAS_MAX), whose
 * instances (one per instance and stream) and block ids only it serves, so
 * that a local alloc, or a free with nothing to wait for, takes only the
 * lock of the block's arena. Everything else (growing, returns, recalls,
 * fences, figures) takes "the allocator's lock": lease_state.lock, then
 * every arena's (lease_lock). Growing takes the client's lock for the
 * round trip and the allocator's only before and after it, never across
 * it, so other threads keep allocating from the leases meanwhile. The
 * service thread (lease_service.c) takes the client's lock with trylock
 * only: it never waits for a call in progress, which may be long.
 *
 * Recalls. The daemon asks for leases back (a `recall` event) when another
 * instance needs the room, a cap shrinks, a partition is made or an
 * operator trims. Whichever thread reads the event answers it at once
 * (lease_recall): the service thread watches the connection's socket, so a
 * process that makes no call answers too.
 *
 * Returns. A lease wholly free for GPUBROKER_LEASE_IDLE_MS (default 2000)
 * goes back with no call needed, from the service thread; a block that
 * does not fit returns the wholly free leases and leases again before it
 * is refused. Leases end with the connection (kill -9 reclaims them).
 *
 * fork: a forked child's clients of its parent are refused (client.h); the
 * allocator state they carry is dropped with no word to the daemon
 * (lease_abandon), and the child has no service thread of its parent's.
 */
#ifndef GPB_CLIENT_LEASE_H
#define GPB_CLIENT_LEASE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "gpubroker.h"
#include "idmap.h"
#include "thread.h"

#define LEASE_ID_TAG       0x10caull /* the top 16 bits of a local block's id */
#define LEASE_IDLE_DEFAULT 2000      /* ms, GPUBROKER_LEASE_IDLE_MS */
#define LEASE_GRANULARITY  (2ull << 20)
#define LEASE_SLOT_BITS    24 /* a local id: tag, generation, slot (24 bits each) */
/* A slot's top bits name its arena (lease.h, Locks), the rest its index there. */
#define LEASE_ARENA_BITS 3
#define LEASE_ARENAS_MAX (1u << LEASE_ARENA_BITS)
#define LEASE_INDEX_BITS (LEASE_SLOT_BITS - LEASE_ARENA_BITS)
#define LEASE_CACHE      8 /* freed blocks an instance keeps for reuse as they are */
/* How soon the service thread looks again at frees behind queued work. */
#define LEASE_DEFERRED_POLL_MS 100
/* Frees behind fences past which a free looks at the oldest (a query). */
#define LEASE_DEFERRED_POLL_AT 32

struct lease;

/* A live local block: the slot its id names (generation-checked). */
struct lease_slot {
	struct pool_block *b; /* NULL: free */
	struct lease *l;      /* the lease it is in */
	uint64_t size;        /* its bytes (the pool's rounded size) and offset in */
	uint64_t offset;      /* the lease's slab, kept here: free asks the pool nothing */
	uint32_t gen;         /* the generation its id carries */
	uint32_t next_free;   /* free: the next free slot + 1 (0: none) */
	bool carved;          /* a carve of it exists (ls->carves has its daemon id) */
	bool freeing;         /* gpb_free_async took it: freed once its stream has run */
	/* Allocated on a capturing stream (gpb_alloc_async): a capture's
	 * fence (slab.h) that passes once the graph is gone. Whenever the
	 * block is freed, it waits for that fence: a graph's launches use it. */
	void *hold;
};

struct lease;
struct lease_inst;

/* Frees waiting for one fence (lease_state.deferred; .held: a capture's
 * fence, listed with next): @id, and @nmore more in @more (a batch). */
struct lease_deferred {
	uint64_t id;
	void *fence;
	const struct slab_opener *opener;
	struct lease_deferred *next;
	uint64_t *more;
	uint32_t nmore;
};

/* gpb_frees not fenced yet (lease_defer.c): a fence recorded later covers
 * more work than one recorded at each free, never less, so one fence is
 * recorded for up to LEASE_BATCH frees on the legacy stream of one
 * context, when the batch is full, another context frees, or room,
 * figures or the service thread look. */
#define LEASE_BATCH 32
struct lease_batch {
	const void *domain;   /* the context (the opener's fence_domain), or the map */
	void *stream;         /* NULL (the legacy stream) but for a free fenced at once */
	struct slab_map *map; /* a reference: the fence is recorded through it */
	uint32_t n;
	uint64_t ids[LEASE_BATCH];
};

/* One arena (Locks, above): the ids of the blocks its threads allocated,
 * guarded by its lock; its instances are those whose arena is its index. */
struct lease_arena {
	pthread_mutex_t lock;
	/* Local id -> block: a table indexed by the id's low bits (not a
	 * hash: alloc and free stay a handful of instructions, P8a), the id
	 * XORed with this client's salt, so that an id of another process's
	 * client names no block here but by a 1 in 2^24 chance. */
	struct lease_slot *slots;
	uint32_t slot_count, slot_cap, slot_free;
} __attribute__((aligned(THREAD_APART)));

struct lease_state {
	/* The allocator's lock, with every arena's (lease_lock); alone, the
	 * service thread's state (pause_req, stop, doomed). */
	pthread_mutex_t lock;
	/* Guards wakefd, wake_at and wake_request: a free that empties a
	 * lease rings under its arena's lock alone. Taken last. */
	pthread_mutex_t ring_lock;
	struct lease_arena arenas[LEASE_ARENAS_MAX];
	unsigned narenas;
	/* The service thread's doorbell (an eventfd, -1 until it starts),
	 * and when it wakes by itself next (lease_now_ms(); UINT64_MAX: not
	 * before it is rung): a free that empties a lease rings only when
	 * the lease is due earlier, so a free costs no system call as a rule. */
	int wakefd;
	uint64_t wake_at;
	/* The earliest wake-up a ring asked for since the thread last looked
	 * (UINT64_MAX: none): a ring moves the thread's next look earlier,
	 * to that time, rather than making it look now (a free behind a fence
	 * asks for a look in LEASE_DEFERRED_POLL_MS, not at once). */
	uint64_t wake_request;
	bool enabled;    /* GPUBROKER_LEASE != 0 and the daemon supports leases */
	bool wanted;     /* GPUBROKER_LEASE != 0 (enabled again at an invalidate) */
	bool abandoning; /* lease_abandon: the pool lets slabs go with no return */
	/* The connection is dead (lease_conn_lost): its leases ended with it,
	 * so no block is served from them. Written under both locks. */
	bool lost;
	unsigned idle_ms; /* GPUBROKER_LEASE_IDLE_MS */
	/* The largest request served from a lease: a quarter of the largest
	 * slab size seen (hello's limits, a lease's grant), 0 while none is
	 * known. Larger ones are daemon allocations: the daemon would lease
	 * them their own size in whole 2 MiB units, more than the
	 * per-allocation path charges, so a cap or a partition would refuse
	 * what that path grants. */
	uint64_t local_max;
	/* Every arena's instances: changed under the allocator's lock only,
	 * so an arena's lock alone may walk it. */
	struct lease_inst *insts;
	uint64_t salt;
	struct idmap carves;  /* local id -> carve (daemon id, as a uintptr) */
	struct lease *doomed; /* let go by the pool: to return (lease_return) */
	/* lease_now_ms() before which the doomed leases are not looked at
	 * again: none of them could go back (a capture in their context). */
	uint64_t doomed_retry_at;
	/* Returned for a recall inside another exchange: let go of here (its
	 * mapping and slab hold) at the next lease_recall_settle, once that
	 * exchange's reply, which may put an allocation in the same slab, has
	 * been applied. */
	struct lease *recalled;
	/* The service thread: started with the first lease. */
	pthread_t thread;
	bool thread_on, stop;
	/* fork: the thread parks at the top of its loop (paused, holding no
	 * lock, in no allocator) while another thread forks (pause_req), and
	 * the services with a thread are listed for that (svc_next;
	 * lease_service.c). */
	bool pause_req, paused;
	pthread_cond_t pause_cond;
	struct lease_state *svc_next;
	/* gpb_free of a block that work may still be queued on (cuda): rather
	 * than a cuCtxSynchronize per free, a fence recorded on the legacy
	 * default stream, and the block served again only once that fence
	 * has passed (lease_deferred_poll; lease_free.c). A ring, oldest
	 * first; its blocks stay live (in use, their leases kept) meanwhile. */
	struct lease_deferred *deferred;
	uint32_t deferred_head, deferred_len, deferred_cap;
	bool free_sync; /* GPUBROKER_FREE_SYNC=1: every such free waits instead */
	/* Frees behind a capture's fence (a graph's life, the end of a
	 * capture): they pass in no order with the ring's, so apart from it,
	 * all looked at by each poll. */
	struct lease_deferred *held;
	/* Written under lock alone (a gpb_free adds to it), read under the
	 * allocator's (which takes lock first). */
	struct lease_batch batch;
	const struct slab_opener *hold_opener; /* of the slots' holds (the backend's) */
	/* Counters (gpb_lease_stats-like figures for tests and the bench). */
	uint64_t leases_taken, leases_returned, idle_returns, recall_returns;
	uint64_t deferred_frees, held_frees;
};

struct gpb_client;

/* Reads GPUBROKER_LEASE, GPUBROKER_LEASE_IDLE_MS and GPUBROKER_FREE_SYNC. */
void lease_init(struct lease_state *ls);
/* Stops the service thread (client lock NOT held), then forgets everything
 * (the connection is closing: the daemon ends the leases with it). */
void lease_finish(struct gpb_client *c);
/* A forked child's client of its parent: frees the state, no lock taken,
 * no thread joined, nothing said. */
void lease_abandon(struct lease_state *ls);
/* The daemon released everything the connection held (invalidate): the
 * leases are gone; forget them, keeping the dropped blocks' ids unknown,
 * and ask for leases again (client lock held). */
void lease_forget(struct gpb_client *c);

/* Client lock held, the connection dead: the fast path serves no more
 * blocks (the daemon ended the leases with the connection; gpb_alloc
 * reports GPB_E_DAEMON_GONE as the per-allocation path does). */
void lease_conn_lost(struct gpb_client *c);

/* The key of the leases that serve gpb_alloc_async(@stream): the stream
 * itself, the legacy default stream (NULL there) as LEASE_STREAM_LEGACY,
 * since NULL keys gpb_alloc's leases, which serve no stream in particular
 * (a free of theirs always waits for a fence). */
#define LEASE_STREAM_LEGACY ((void *)1) /* CU_STREAM_LEGACY's value */
static inline void *lease_stream_key(void *stream)
{
	return stream ? stream : LEASE_STREAM_LEGACY;
}
/* The stream to record a fence of a block of the leases of @key on (NULL:
 * the legacy default stream, as the openers take it). */
static inline void *lease_stream_of(void *key)
{
	return key == LEASE_STREAM_LEGACY ? NULL : key;
}

/* Whether @id is of the local namespace. */
static inline bool lease_id_local(uint64_t id)
{
	return id >> 48 == LEASE_ID_TAG;
}

/*
 * The fast path: a block from the leases of @instance for use on @stream
 * (NULL: the legacy default stream, gpb_alloc's), allocator lock only
 * (client lock not held). 0 with @out filled, or 1 when the leases have no
 * room (or leases are off): the caller goes the slow way.
 */
int lease_alloc_local(struct gpb_client *c, uint64_t instance, uint64_t size, uint64_t alignment,
                      void *stream, struct gpb_allocation *out);
/*
 * The slow path, client lock held: leases more (or returns wholly free
 * leases and leases again) and serves from the leases. 0 with @out filled,
 * 1 when the request is not for leases (too large, not supported, leases
 * off, the daemon's lease limit, or a refusal while @may_wait: the caller
 * sends an alloc), or a GPB_E_* error.
 */
int lease_alloc(struct gpb_client *c, uint64_t instance, uint64_t size, uint64_t alignment,
                bool may_wait, void *stream, struct gpb_allocation *out);
/* gpb_free of a local block, allocator lock only. 0, or 1 when @id is not
 * a local block of this client or is carved (then lease_free_carved under
 * the client lock). */
int lease_free_local(struct gpb_client *c, uint64_t id);
/* Client lock held: frees a local block that was carved (its carve first).
 * 0, 1 (not local), or a GPB_E_* error. */
int lease_free_carved(struct gpb_client *c, uint64_t id);
/*
 * gpb_free_async of local block @id, client lock held, after
 * lease_free_stream() found it no block of @stream's own leases: the block stays
 * this process's (in use, not served again) until the work queued on
 * @stream so far has run; *fence is then the opener's fence to put on the
 * client's pending queue (its entry freed with lease_release_pending), or
 * NULL when the block was freed at once (nothing can be queued: no
 * streams, or a dead context). 0, 1 (not a local block of this client),
 * or a GPB_E_* error.
 */
int lease_free_async(struct gpb_client *c, uint64_t id, void *stream, void **fence);
/* gpb_free_async of local block @id on the stream its leases serve
 * (gpb_alloc_async's), allocator lock only: freed at once, 0. 1 for any
 * other block or stream (then lease_free_async under the client lock). */
int lease_free_stream(struct gpb_client *c, uint64_t id, void *stream);
/* gpb_alloc_async of local block @id on @stream: when the stream is
 * capturing, the block is held for the graph (lease_slot.hold). Neither
 * lock held. */
void lease_capture_hold(struct gpb_client *c, uint64_t id, void *stream);
/* Client lock held: frees the block lease_free_async() left pending. */
void lease_release_pending(struct gpb_client *c, uint64_t id);
/* Allocator lock held: frees the blocks of gpb_free whose fences have
 * passed, oldest first, stopping at the first that has not (a query, never
 * a wait). Called where room or figures are wanted: an alloc the pool
 * cannot serve, a judging of leases as free, the service thread. */
void lease_deferred_poll(struct lease_state *ls);
/* Allocator lock held: forgets the deferred frees (their blocks went with
 * the leases); @driver: their fences are freed (not in a forked child,
 * whose fences are its parent's). */
void lease_deferred_drop(struct lease_state *ls, bool driver);
/* Client lock held: the daemon id of local block @id, carving it the first
 * time. 0 with *daemon_id, 1 when @id is not a local block (then it is
 * used as it is), or a GPB_E_* error. */
int lease_carve(struct gpb_client *c, uint64_t id, uint64_t *daemon_id);
/* Client lock held: returns every wholly free lease now (gpb_release_kept:
 * a lease with nothing in it is memory kept as an emptied slab is).
 * Returns how many. */
unsigned lease_release_free(struct gpb_client *c);
/* Client lock held: returns the wholly free leases of @instance (before
 * gpb_unregister: an instance whose blocks are all freed holds nothing the
 * daemon would call busy), and forgets the instance when nothing is left. */
void lease_release_instance(struct gpb_client *c, uint64_t instance);
/* Client lock held: returns the leases the pool let go of (lease_return). */
void lease_return_doomed(struct gpb_client *c);
/*
 * lease_recall.c: a `recall` event's answer, client lock held (conn's
 * on_recall): flushes @instance's cache and returns its wholly free leases
 * (no live block, no carve), whole, until at least @bytes went back, with
 * quiet lease_returns (nothing read: it may run inside another exchange).
 * Returns the bytes given back (0: nothing was wholly free).
 */
uint64_t lease_recall(struct gpb_client *c, uint64_t instance, uint64_t bytes);
/* Client lock held, no exchange in flight: lets go locally of the leases a
 * recall returned inside another exchange (lease_state.recalled). */
void lease_recall_settle(struct gpb_client *c);
/* The same for those of them in slab @slab only (a reclaim of it). */
void lease_recall_settle_slab(struct gpb_client *c, uint64_t slab);

/* Figures: bytes leased and in use inside the leases of @instance (every
 * instance when 0). */
void lease_figures(struct gpb_client *c, uint64_t instance, uint64_t *leased, uint64_t *in_use,
                   uint64_t *leases);

/* lease_service.c: the service thread. */
/* Starts it once (client lock held, allocator lock not). */
void lease_service_start(struct gpb_client *c);
/* Stops and joins it (neither lock held). */
void lease_service_stop(struct gpb_client *c);
/* Allocator lock held: a lease of @ls fell idle at @due - idle_ms; rings
 * the service thread when it would sleep past @due. */
void lease_service_ring(struct lease_state *ls, uint64_t due);
/* lease.c. Allocator lock held: which leases are due now (unpins them: the pool lets
 * them go onto the doomed list); returns the ms until the next is due, or
 * UINT64_MAX. */
uint64_t lease_idle_scan(struct lease_state *ls, uint64_t now_ms);
uint64_t lease_now_ms(void);

#endif
