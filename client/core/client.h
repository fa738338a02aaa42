/*
 * client.h - the gpb_client object behind the public API.
 *
 * Thread-safety: one mutex per client serialises whole request/reply
 * exchanges together with the bookkeeping they imply, so requests from
 * several threads never interleave on the socket and a free cannot race the
 * alloc it undoes. Event callbacks run from gpb_dispatch() without the mutex
 * held, so a callback may call gpb_* on the same client (except
 * gpb_disconnect()). The process-wide slab cache has its own mutex
 * (slab.c), always taken inside the client's, never the other way round.
 */
#ifndef GPB_CLIENT_CLIENT_H
#define GPB_CLIENT_CLIENT_H

#include <pthread.h>
#include <stdint.h>

#include "conn.h"
#include "gpubroker.h"
#include "track.h"

/* What hello's result said about the daemon. */
struct client_limits {
	uint64_t max_frame;
	uint64_t max_instances;
	uint64_t max_allocations;
	uint64_t write_high_water;
};

struct gpb_client {
	pthread_mutex_t lock;
	struct conn conn;
	struct track track;
	struct idmap hosts; /* host allocation id -> struct host_entry (hostmem.c) */
	char backend[16];
	uint64_t session;
	int64_t uid;
	struct client_limits limits;
	gpb_event_fn event_fn;
	void *event_data;
};

/* Validates @c and takes its lock; clears the thread's last error. */
int client_enter(gpb_client *c);
void client_leave(gpb_client *c);

/* Reads a success reply's result (@arg: what to fill); returns 0 or a GPB_E_*
 * error it recorded. */
typedef int (*client_parse_fn)(const cJSON *result, void *arg);

/*
 * Sends @method with @params (consumed; NULL when building them ran out of
 * memory, which is reported as such) and, when @parse is set, hands it the
 * reply's result. Returns the error of the exchange or of @parse, or 0.
 * Called with the lock held (or before the client is shared).
 */
int client_call(gpb_client *c, const char *method, cJSON *params, client_parse_fn parse, void *arg);
/* The parameters {@key: @id as id64}, or NULL when out of memory. */
cJSON *client_params_id(const char *key, uint64_t id);
/* Sends a request whose only parameter is the id64 @key and ignores its
 * result. Called with the lock held. */
int client_call_id(gpb_client *c, const char *method, const char *key, uint64_t id);
/* A client_parse_fn: *(char **)@result_json = @result as compact JSON text
 * (free with free()); nothing when @result_json is NULL. */
int client_result_json(const cJSON *result, void *result_json);

/* memory.c: gpb_request() for alloc, attach, free and detach, which must
 * update the connection's bookkeeping. Consumes @params; lock held. */
int memory_request(gpb_client *c, const char *method, cJSON *params, char **result_json);
/* conn's on_invalidate hook: the daemon released everything the connection
 * held; forget it all and unmap. Lock held. */
void memory_invalidate(void *client);

/* hostmem.c: host memory (pinned, mapped). Lock held for all but init. */
void hostmem_init(gpb_client *c);
/* Unregisters and unmaps every host allocation (disconnect, invalidate). */
void hostmem_finish(gpb_client *c);
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

#endif
