/*
 * broker_internal.h - what the broker's own files share. Not for the
 * dispatcher or the server.
 *
 * The files call in one direction, each only those listed before it
 * (meson.build lists them so; tests/check-file-order.sh checks it):
 *
 *   broker_base.c       events, ids, instance lookups, queued requests
 *   broker_rules.c      the operator's rules and a session's groups
 *   broker_slabs.c      the pools' slab callbacks, descriptors per user
 *   broker_keep.c       the slabs a session holds or keeps empty
 *   broker_host.c       host memory
 *   broker_alloc.c      an allocation's life: live, orphan, fenced,
 *                       parting, ghost; reclaim; a session's end
 *   broker_share.c      export and open
 *   broker_recall.c     recalls of idle leases: sent, answered, timed out
 *   broker_wait.c       waiting allocations; the tail of a policy change
 *   broker_lease.c      leases: their sizes, their return, carves in them
 *   broker_partition.c  partitions
 *   broker_reset.c      invalidate_all and set_allocator
 *   broker_check.c      selfcheck
 *   broker_view.c       what dispatch and metrics read (snapshots, walks)
 *   broker.c            the broker, sessions, instances, and the public
 *                       operations that free memory and then serve waits
 *
 * A lower file reaches an upper one only through a callback installed
 * from outside (events, timer, exit watch).
 */
#ifndef GPB_BROKER_INTERNAL_H
#define GPB_BROKER_INTERNAL_H

#include <stdlib.h>

#include "broker.h"

struct broker_alloc {
	uint64_t id;
	struct list link; /* session->allocs */
	struct broker_instance *inst;
	struct pool_block *block;
	char *label;            /* made by allocate_queue: the request's label; else NULL */
	uint32_t holders;       /* attachments (attach, open): they keep the block alive */
	bool unclaimed;         /* made by allocate_queue and not claimed yet: the session does
	                           not hold its slab (its client has not been given the handle) */
	bool exported;          /* has a name in broker->exports */
	bool orphan;            /* freed by its owner while attached: out of the table and of
	                           every instance, alive until its last holder detaches */
	uint64_t fence_session; /* an orphan whose owner's process may still write it
	                           (an evicted session's): that session, whose ghost
	                           fences the block when the last holder detaches; 0 */
	/* A lease (broker_lease.c): a block its client sub-allocates in itself,
	 * charged like an allocation. Its carves, orphans included, are listed
	 * in its ext's carves: while one lives the lease cannot be returned, and
	 * a lease whose owner let go of it (its session ended) lives on, an
	 * orphan out of every table, until its last carve goes. */
	bool lease;
	/* A lease's or a carve's own fields, in a record of their own (NULL
	 * for any other allocation): the few leases and carves do not make
	 * every allocation's record larger (bench P7). */
	struct broker_lease_ext *ext;
};

/* What only leases and carves have (struct broker_alloc.ext). A carve: a
 * range of a lease made an allocation (lease_carve), so that it can be
 * exported and attached. Its block is its lease's; it is charged nothing
 * (its lease is) but counts as a daemon object. */
struct broker_lease_ext {
	struct broker_alloc *self;   /* whose record this is */
	struct list carves;          /* a lease's: struct broker_lease_ext.carve_link */
	struct broker_alloc *parent; /* a carve's lease; NULL for a lease */
	uint64_t carve_offset, carve_size;
	struct list carve_link; /* a carve's place in parent->ext->carves */
};

/* A carve's lease, or NULL (a lease, or any other allocation). */
static inline struct broker_alloc *broker_carve_parent(const struct broker_alloc *a)
{
	return a->ext ? a->ext->parent : NULL;
}

/* Gives an allocation's record back (its lease or carve fields with it). */
static inline void broker_alloc_record_free(struct arena *arena, struct broker_alloc *a)
{
	free(a->ext);
	arena_free(arena, a);
}

/* The carve of a carves-list link. */
#define BROKER_CARVE_OF(pos) (list_entry(pos, struct broker_lease_ext, carve_link)->self)

/* An allocation's bytes: a carve's range, else its block. */
static inline uint64_t broker_alloc_bytes(const struct broker_alloc *a)
{
	return broker_carve_parent(a) ? a->ext->carve_size : pool_block_size(a->block);
}

/* Where an allocation starts in its slab. */
static inline uint64_t broker_alloc_offset(const struct broker_alloc *a)
{
	return pool_block_offset(a->block) + (broker_carve_parent(a) ? a->ext->carve_offset : 0);
}

/* The bytes an allocation is charged (its instance, session, policy): a
 * carve none, its lease carries them. */
static inline uint64_t broker_alloc_charge(const struct broker_alloc *a)
{
	return broker_carve_parent(a) ? 0 : pool_block_size(a->block);
}

/* A name under which an allocation can be opened (export, open), in the
 * namespace of its exporter's uid (owner->uid). */
struct broker_export {
	struct list link; /* broker->exports */
	struct broker_alloc *alloc;
	struct session *owner;
	uid_t uid; /* who may open it (the grantee), besides owner->uid */
	char name[PROTO_MAX_NAME + 1];
};

struct broker_device {
	struct backend_device_info info;
	struct pool *pool;
	struct backend *backend; /* the pool's callback context needs both */
	int index;
	struct broker *broker; /* and the share of descriptors (broker_files_of) */
	/* Bytes of blocks kept allocated, holding nothing, for a client that
	 * may still write there (broker_parting_add_block): part of the
	 * pool's used, in no instance's; of retired pools too. */
	uint64_t fenced;
};

struct broker {
	struct backend *backend;
	broker_event_fn event;
	void *event_ctx;
	struct broker_limits limits;
	struct broker_device dev[BACKEND_MAX_DEVICES];
	int device_count;
	struct idmap allocs;    /* allocation id -> struct broker_alloc */
	struct list exports;    /* struct broker_export */
	struct idmap hosts;     /* host allocation id -> struct broker_host */
	struct idmap uid_files; /* uid + 1 -> descriptors of that uid's slabs (a uintptr_t) */
	uint64_t host_used;     /* bytes of every struct broker_host */
	unsigned export_count;
	uint64_t orphan_count;    /* allocations freed by their owner, still attached */
	uint64_t orphan_leases;   /* leases whose session ended while carves of them lived */
	struct arena alloc_arena; /* where the struct broker_alloc records live */
	struct list sessions;
	unsigned session_count;
	uint64_t instance_count;
	uint64_t next_session_id;
	uint64_t next_instance_id;
	time_t started;
	bool stopping;
	uint64_t rand[32]; /* buffered getrandom() output for allocation ids */
	unsigned rand_left;
	struct policy policy;
	enum broker_allocator allocator;
	struct broker_stats stats;
	struct broker_rule rules[BROKER_MAX_RULES];
	unsigned nrules;
	struct idmap instances; /* instance id -> struct broker_instance, every session's */
	struct list waits;      /* struct broker_wait: allocations waiting, in arrival order */
	unsigned wait_count;
	broker_timer_fn timer; /* arms the wait deadline timer (the server's) */
	void *timer_ctx;
	uint64_t timer_deadline; /* what the timer is armed for, UINT64_MAX = nothing */
	unsigned wait_pass;
	bool waits_running, waits_again;
	uint64_t invalidate_epoch; /* invalidate events sent so far (their "epoch") */
	uint64_t recall_epoch;     /* recall events sent so far (their "epoch") */
	uint64_t recalls_pending;  /* instances with a recall out */
	struct list retired;       /* struct broker_retired: old pools, slabs still parting */
	struct list ghosts;        /* struct broker_ghost: evicted sessions' slabs */
	broker_exit_fn exit_watch; /* the server's exit watch (NULL: none) */
	void *exit_ctx;
	struct list partitions; /* struct broker_partition, in creation order */
	unsigned partition_count;
	uint32_t last_domain; /* the pool domain of the newest partition */
};

/* The policy whose devices s's instances use: its partition's, or the
 * broker's (what the partitions leave). */
static inline struct policy *broker_policy_of(struct broker *b, const struct session *s)
{
	return s->part ? &s->part->policy : &b->policy;
}

/* The pool domain of s's slabs: its partition's, or 0 outside. */
static inline uint32_t broker_domain_of(const struct session *s)
{
	return s->part ? s->part->domain : 0;
}

/* A slab a session's client may still have mapped after an invalidate. */
struct broker_parting {
	struct broker_parting *next;
	struct pool *pool; /* the slab's: current or retired */
	struct pool_slab *slab;
	uint64_t epoch; /* of the invalidate event that released it */
	bool reclaim;   /* a reclaim event's: let go by release, not by an epoch */
	/* A fence, not counted as a parting slab: a block the release freed,
	 * kept allocated until the client has answered (or its process is
	 * gone), since until it reads the event it may still write there. */
	struct pool_block *block;
};

/* What an evicted session kept from the backend until its process exits. */
struct broker_ghost {
	struct list link; /* broker->ghosts */
	struct broker_parting *parting;
	unsigned count;
	uint64_t session;
	pid_t pid;
};

/* A pool set_allocator replaced while some of its slabs were parting. */
struct broker_retired {
	struct list link; /* broker->retired */
	struct pool *pool;
	uint64_t parting; /* its slabs still parting */
};

/* One slab a session holds (session->held, keyed by the backend slab's id):
 * how many of its allocations and attachments are there. With keep, the
 * session keeps the slab when refs falls to 0 (its client keeps it
 * mapped), pinned in the pool until released or reclaimed. */
struct session_slab {
	uint64_t refs;
	struct pool_slab *slab;
	bool keep;
};

/* ---- broker_base.c ---- */

/* Hands an event to the receiver that dispatch installed, if any. */
void broker_emit(struct broker *b, const struct broker_event *ev);
/* A fresh, unused, non-zero random id (allocations and host allocations). */
int broker_new_id(struct broker *b, uint64_t *out);
/* Arms the broker's timer for deadline (CLOCK_MONOTONIC ms) unless it is
 * armed for earlier: what broker_waits_expire() then does covers it. */
void broker_timer_want(struct broker *b, uint64_t deadline);
/* Takes an instance out of the policy and the instance table and frees it. */
void broker_instance_free(struct broker *b, struct session *s, struct broker_instance *inst);

/* ---- broker_slabs.c ---- */

/* The backend callbacks of an allocator strategy's pools. */
const struct pool_slab_ops *broker_slab_ops(enum broker_allocator kind);

/* ---- broker_keep.c: the slabs sessions hold ---- */

/* Counts one more allocation or attachment of s in slab. Returns 1 when the
 * session did not hold the slab before (the client must be given it), 0, or
 * -ENOMEM. */
int session_hold(struct broker *b, struct session *s, struct pool_slab *slab);
/* One hold fewer; the last keeps the slab (pinned) when the session keeps
 * slabs, else lets go of it. */
void session_release(struct broker *b, struct session *s, uint64_t slab_id);
/* Undoes a session_hold() whose grant never reached the client: a fresh
 * hold (@fresh) goes entirely. */
void session_unhold(struct broker *b, struct session *s, uint64_t slab_id, bool fresh);
/* Lets go of a slab s keeps empty. */
void session_unkeep(struct broker *b, struct session *s, uint64_t slab_id);
/* Lets go of every slab s keeps empty (its session ends, or everything
 * was released). */
void session_unkeep_all(struct broker *b, struct session *s);
/* The ids of the slabs s keeps empty (on device, or any when < 0), in a
 * malloc'd array (*n of them; NULL when none or out of memory). */
uint64_t *session_kept(struct session *s, int device, size_t *n);

/* ---- broker_host.c ---- */

/* s's host allocation id freed: 0 or -ENOENT. */
int broker_host_free(struct broker *b, struct session *s, uint64_t id);
/* Frees every host allocation of s; returns how many. */
uint64_t broker_hosts_release(struct broker *b, struct session *s);

/* ---- broker_alloc.c: an allocation's life ---- */

/* What broker_alloc_in makes: a live allocation, an unclaimed one (the
 * session does not hold its slab until it is claimed), or a lease. */
enum broker_alloc_kind {
	BROKER_ALLOC_LIVE,
	BROKER_ALLOC_UNCLAIMED,
	BROKER_ALLOC_LEASE,
};
/* The allocation path of alloc, allocate_queue and lease: size bytes
 * aligned to align for inst, charged to it; *out (may be NULL) its grant,
 * *made (may be NULL) the record. Errors as broker_alloc(). */
int broker_alloc_in(struct broker *b, struct session *s, struct broker_instance *inst,
                    uint64_t size, uint64_t align, enum broker_alloc_kind kind,
                    struct broker_grant *out, struct broker_alloc **made);
/* s's allocation id (a carve included, never a lease), or NULL (unknown,
 * freed, another session's). */
struct broker_alloc *broker_alloc_owned(struct broker *b, struct session *s, uint64_t id);
/* Attaches a to s (the checks are the caller's): as broker_attach(). */
int broker_hold(struct broker *b, struct session *s, struct broker_alloc *a,
                struct broker_grant *out);
/* Frees one allocation of s: its slab hold, its charge, its pool block;
 * with fence (a release s's client hears of only by an event), the block
 * stays allocated until it has answered (broker_parting_add_block). */
void broker_alloc_release(struct broker *b, struct session *s, struct broker_alloc *a, bool fence);
/* Drops one attachment: its slab hold, its pin, and the allocation when it
 * was the last holder of an orphan (the map entry is the caller's); fence
 * as for broker_alloc_release. */
void broker_unpin(struct broker *b, struct session *s, struct broker_alloc *a, bool fence);
/* The device is short of memory (reason "memory"), or a partition is being
 * made there (reason "partition", outside: only sessions outside
 * partitions): every slab a session keeps empty there is asked back
 * (reclaim event), pinned until its client answers. Returns how many
 * were asked for. */
unsigned broker_reclaim_device(struct broker *b, int device, bool outside, const char *reason);
/* A slab s's client is asked to unmap, pinned ("parting") until it answers
 * release. 0 or -ENOMEM. */
int broker_parting_add_slab(struct broker *b, struct session *s, struct pool_slab *slab);
/* Keeps block (of device's pool) allocated, fenced for s, until s's
 * client answers the current invalidate epoch or its process is gone: a
 * client that has not read the event yet may still write there, so the
 * range must not go to another allocation before. 0 or -ENOMEM. */
int broker_parting_add_block(struct broker *b, struct session *s, int device,
                             struct pool_block *block);
/* Keeps block (of device's current pool) allocated, fenced, with the ghost
 * of the evicted session session_id until its process exits: 0, or -ENOENT
 * (no such ghost: the process is gone) or -ENOMEM. */
int broker_ghost_fence(struct broker *b, uint64_t session_id, int device, struct pool_block *block);
/* Lets go of the reclaimed slab_id of s: true when there was one. */
bool broker_parting_release_slab(struct broker *b, struct session *s, uint64_t slab_id);
/* Lets go of s's parting slabs and fences released at or before epoch;
 * returns the slabs, and in *fences (may be NULL) the fences. */
unsigned broker_parting_release(struct broker *b, struct session *s, uint64_t epoch,
                                unsigned *fences);
/* Pins every slab s holds, as parting under epoch. */
void broker_parting_add(struct broker *b, struct session *s, uint64_t epoch);
/* The retired pool pool, or NULL (a current one). */
struct broker_retired *broker_retired_find(const struct broker *b, const struct pool *pool);
/* Whether s's slabs must outlive it until its process exits (a ghost):
 * evicted, or ending without goodbye while it holds or has parting a slab
 * whose memory a process can keep mapped past the daemon's release (VMM). */
bool broker_session_lingers(const struct session *s);
/* Lets go of one ghost's slabs and fences (its process is gone). */
void broker_ghost_free(struct broker *b, struct broker_ghost *g);
/* Lets go of every parting slab of s (its session ends). */
void broker_parting_drop(struct broker *b, struct session *s);
/*
 * An evicted session ends: every slab it held or had parting stays pinned,
 * as a "ghost" of the session, until its process has exited (the exit
 * watch, by pidfd or pid; at once without an exit watch). A process that
 * can be watched by neither (pid 0: another PID namespace, and no pidfd)
 * keeps its ghost until the broker is destroyed: pid 0 says nothing about
 * whether it exited.
 */
void broker_ghost_make(struct broker *b, struct session *s);
/* Lets go of every ghost, watched or not (the broker goes). */
void broker_ghosts_drop(struct broker *b);
/* Releases everything s holds and its instances (broker_session_close
 * without forgetting the session). Its waits are the caller's to drop
 * first (broker_waits_drop). */
void broker_session_strip(struct broker *b, struct session *s);
/* Withdraws one name (unexport, or its allocation is freed). */
void broker_export_free(struct broker *b, struct broker_export *e);
/* Drops the names of an allocation that is being freed. */
void broker_exports_drop_alloc(struct broker *b, struct broker_alloc *a);

/* ---- broker_recall.c ---- */

/* Ends s's recall epoch, answered with bytes returned: 0, -ENOENT,
 * -ERANGE (as broker_recall_done, which serves the waits after). */
int broker_recall_answer(struct broker *b, struct session *s, uint64_t epoch, uint64_t bytes);
/* Ends the recalls whose deadline is at or before now (timed out);
 * returns the earliest deadline left (UINT64_MAX: none). */
uint64_t broker_recalls_expire(struct broker *b, uint64_t now);
/* Recalls what inst is charged above its cap (it shrank), if anything. */
void broker_recall_cap(struct broker *b, struct broker_instance *inst);

/* ---- broker_wait.c ---- */

/* Drops a session's waits without answering (it is going away). */
void broker_waits_drop(struct broker *b, struct session *s);
/* Sends cap_changed for every cap the policy moved, then serves the waits. */
void broker_policy_changed(struct broker *b);
/* Which limit answered an allocation of size on s's instance with rc, and
 * its figures as they stand now (after a wait of waited_ms, 0 for none). */
void broker_refusal_explain(const struct broker *b, const struct session *s, uint64_t instance,
                            uint64_t size, int rc, uint64_t waited_ms, struct broker_refusal *why);

/* ---- broker_partition.c ---- */

/* Bounds a device's (new) pool by what the broker may hand out there and
 * gives it every partition's guarantee. 0, -ENOSPC, -ENOMEM. */
int broker_pool_guard(struct broker *b, int device, struct pool *pool);
/* selfcheck of the partitions: their policies, session counts, and sizes
 * that add up with the broker's policy to each device. 0 or -EFAULT. */
int broker_partitions_check(const struct broker *b, char *msg, unsigned msg_len);
/* Frees every partition (the broker goes; their sessions are closed). */
void broker_partitions_drop(struct broker *b);

/* ---- broker_reset.c ---- */

/* The pool configuration of an allocator strategy. */
void broker_pool_config(const struct broker *b, enum broker_allocator kind,
                        struct pool_config *cfg);

/* ---- broker.c ---- */

/* Bytes the broker may still hand out on a device outside partitions: its
 * capacity (the memory partitions leave, bounded by the policy's limit)
 * minus live allocations. For a session in a partition, policy_device_available
 * on broker_policy_const(). */
uint64_t broker_device_free(const struct broker *b, int device);

#endif
