/*
 * hostmem.h - a connection's host memory ("pinned" and "mapped"): each
 * allocation a memory file of its own, mapped in this process and, with the
 * cuda backend, registered with the driver (hostmem.c says why no ordering
 * against the daemon is needed).
 */
#ifndef GPB_CLIENT_HOSTMEM_H
#define GPB_CLIENT_HOSTMEM_H

#include <stdbool.h>
#include <stdint.h>

#include "client.h"

/* One host allocation, in gpb_client.hosts by its id. */
struct host_entry {
	void *ptr;
	uint64_t size;
	void *device_ptr; /* "mapped": the device's view (on sim the host address) */
	void *priv;       /* the opener's registration state */
	bool registered;
};

/* Lock held for all but init. */
void hostmem_init(gpb_client *c);
/* Unregisters and unmaps every host allocation (disconnect, invalidate). */
void hostmem_finish(gpb_client *c);
/* In a forked child, for a client of its parent: unmaps without a driver
 * call (the registrations are the parent's) and frees. */
void hostmem_abandon(gpb_client *c);
/* Sends an alloc of host memory (@params consumed; NULL when building them
 * ran out of memory) and maps the result; fills @out and/or *result_json
 * when not NULL. */
int hostmem_call(gpb_client *c, cJSON *params, struct gpb_allocation *out, char **result_json);
/* Maps and records the host memory an alloc or claim @result handed over
 * with @fd (consumed); fills @out and/or *result_json when not NULL. On
 * failure the daemon's allocation is given back (free). */
int hostmem_adopt(gpb_client *c, const cJSON *result, int fd, struct gpb_allocation *out,
                  char **result_json);
/* Unmaps host allocation @id that the daemon freed (free_label); false when
 * it is not one of this connection's. */
bool hostmem_forget(gpb_client *c, uint64_t id);
/* The free of @id (@params consumed) when @id is a host allocation of this
 * connection: its result; 1 when it is not one (nothing sent). */
int hostmem_free(gpb_client *c, uint64_t id, cJSON *params, char **result_json);
/* The host allocation @id of this connection, or NULL. */
struct host_entry *hostmem_get(gpb_client *c, uint64_t id);

#endif
