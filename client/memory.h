/*
 * memory.h - what api.c takes from memory.c: the raw requests that change
 * what the connection holds. Among the entry points only, never below them.
 */
#ifndef GPB_CLIENT_MEMORY_H
#define GPB_CLIENT_MEMORY_H

#include "client.h"

/* gpb_request() for alloc, attach, open, claim, free, detach and
 * free_label, which must update the connection's bookkeeping. Consumes
 * @params; lock held. */
int memory_request(gpb_client *c, const char *method, cJSON *params, char **result_json);

#endif
