/*
 * memory.h - what api.c and share.c take from memory.c: the raw requests
 * that change what the connection holds. Among the entry points only, never below them.
 */
#ifndef GPB_CLIENT_MEMORY_H
#define GPB_CLIENT_MEMORY_H

#include "client.h"

/* gpb_request() for alloc, attach, open, claim, free, detach and
 * free_label, which must update the connection's bookkeeping. Consumes
 * @params; lock held. */
int memory_request(gpb_client *c, const char *method, cJSON *params, char **result_json);

/* Sends an alloc, attach or open (@params consumed; NULL when building
 * them ran out of memory) and records its result in the track of @kind;
 * fills @out and/or *result_json (the raw result) when not NULL. Lock
 * held. (share.c's opens by name.) */
int memory_call(gpb_client *c, enum track_kind kind, const char *method, cJSON *params,
                struct gpb_allocation *out, char **result_json);

#endif
