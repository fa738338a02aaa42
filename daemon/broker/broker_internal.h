/*
 * broker_internal.h - what the broker's own files share. Not for the
 * dispatcher or the server.
 *
 * The files call in one direction, each only those listed before it
 * (tests/check-calls.sh checks it with tests/broker-files.table):
 *
 *   broker_base.c       events, ids, instance lookups, queued requests
 *   broker_rules.c      the operator's rules and a session's groups
 *   broker_slabs.c      the pools' slab callbacks, descriptors per user
 *   broker_keep.c       the slabs a session holds or keeps empty
 *   broker_host.c       host memory
 *   broker_alloc.c      an allocation's life: live, orphan, fenced,
 *                       parting, ghost; reclaim; a session's end
 *   broker_share.c      export and open
 *   broker_wait.c       waiting allocations; the tail of a policy change
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

#include "broker.h"

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

/* s's allocation id, or NULL (unknown, freed, another session's). */
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
/* The device is short of memory: every slab a session keeps empty there is
 * asked back (reclaim event), pinned until its client answers. Returns how
 * many were asked for. */
unsigned broker_reclaim_device(struct broker *b, int device);
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

/* ---- broker_wait.c ---- */

/* Sends cap_changed for every cap the policy moved, then serves the waits. */
void broker_policy_changed(struct broker *b);

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

/* ---- broker_check.c ---- */

/* selfcheck of the parting slabs and retired pools: 0 or -EFAULT with msg. */
int broker_parting_check(const struct broker *b, char *msg, unsigned msg_len);

#endif
