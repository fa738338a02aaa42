/*
 * broker_internal.h - what the broker's own files share (broker.c,
 * broker_reset.c). Not for the dispatcher or the server.
 */
#ifndef GPB_BROKER_INTERNAL_H
#define GPB_BROKER_INTERNAL_H

#include "broker.h"

/* One slab a session holds (session->held, keyed by the backend slab's id):
 * how many of its allocations and attachments are there. */
struct session_slab {
	uint64_t refs;
	struct pool_slab *slab;
};

/* s's allocation id, or NULL (unknown, freed, another session's). */
struct broker_alloc *broker_alloc_owned(struct broker *b, struct session *s, uint64_t id);
/* Frees one allocation of s: its slab hold, its charge, its pool block. */
void broker_alloc_release(struct broker *b, struct session *s, struct broker_alloc *a);
/* Drops one attachment: its slab hold, its pin, and the allocation when it
 * was the last holder of an orphan (the map entry is the caller's). */
void broker_unpin(struct broker *b, struct session *s, struct broker_alloc *a);
/* Attaches a to s (the checks are the caller's): as broker_attach(). */
int broker_hold(struct broker *b, struct session *s, struct broker_alloc *a,
                struct broker_grant *out);
/* s's host allocation id freed: 0 or -ENOENT. */
int broker_host_free(struct broker *b, struct session *s, uint64_t id);
/* Frees every host allocation of s; returns how many. */
uint64_t broker_hosts_release(struct broker *b, struct session *s);
/* A fresh, unused, non-zero random id (allocations and host allocations). */
int broker_new_id(struct broker *b, uint64_t *out);

/* Drops the names of an allocation that is being freed. */
void broker_exports_drop_alloc(struct broker *b, struct broker_alloc *a);
/* Sends cap_changed for every cap the policy moved, then serves the waits. */
void broker_policy_changed(struct broker *b);
/* Lets go of every ghost, watched or not (the broker goes). */
void broker_ghosts_drop(struct broker *b);
/* Pins every slab s holds, as parting under epoch. */
void broker_parting_add(struct broker *b, struct session *s, uint64_t epoch);
/* Whether s's slabs must outlive it until its process exits (a ghost):
 * evicted, or ending without goodbye while it holds or has parting a slab
 * whose memory a process can keep mapped past the daemon's release (VMM). */
bool broker_session_lingers(const struct session *s);
/* selfcheck of the parting slabs and retired pools: 0 or -EFAULT with msg. */
int broker_parting_check(const struct broker *b, char *msg, unsigned msg_len);
/* The backend callbacks of an allocator strategy's pools. */
const struct pool_slab_ops *broker_slab_ops(enum broker_allocator kind);
/* The pool configuration of an allocator strategy. */
void broker_pool_config(const struct broker *b, enum broker_allocator kind,
                        struct pool_config *cfg);

/* Releases everything s holds and its instances (broker_session_close
 * without forgetting the session). */
void broker_session_strip(struct broker *b, struct session *s);
/* selfcheck of the partitions: their policies, session counts, and sizes
 * that add up with the broker's policy to each device. 0 or -EFAULT. */
int broker_partitions_check(const struct broker *b, char *msg, unsigned msg_len);
/* Frees every partition (the broker goes; their sessions are closed). */
void broker_partitions_drop(struct broker *b);

/* Hands an event to the receiver that dispatch installed, if any. */
void broker_emit(struct broker *b, const struct broker_event *ev);

#endif
