/*
 * broker_internal.h - what the broker's own files share (broker.c,
 * broker_reset.c). Not for the dispatcher or the server.
 */
#ifndef GPB_BROKER_INTERNAL_H
#define GPB_BROKER_INTERNAL_H

#include "broker.h"

/* Frees one allocation of s: its slab hold, its charge, its pool block. */
void broker_alloc_release(struct broker *b, struct session *s, struct broker_alloc *a);
/* Drops one attachment's slab hold and pin (the map entry is the caller's). */
void broker_unpin(struct broker *b, struct session *s, struct pool_slab *slab);
/* Sends cap_changed for every cap the policy moved, then serves the waits. */
void broker_policy_changed(struct broker *b);
/* The pool configuration of an allocator strategy. */
void broker_pool_config(const struct broker *b, enum broker_allocator kind,
                        struct pool_config *cfg);

#endif
