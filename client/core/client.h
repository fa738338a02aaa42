/*
 * client.h - the gpb_client object behind the public API, and the exchange
 * of requests and replies that the gpb_* entry points call down into.
 *
 * Thread-safety: one mutex per client serialises whole request/reply
 * exchanges together with the bookkeeping they imply, so requests from
 * several threads never interleave on the socket and a free cannot race the
 * alloc it undoes. Event callbacks run from gpb_dispatch() without the mutex
 * held, so a callback may call gpb_* on the same client (except
 * gpb_disconnect()). The process-wide slab cache has its own mutex
 * (slab.c), always taken inside the client's, never the other way round;
 * so has the lease allocator (lease.h: client, then allocator), whose local
 * allocs and frees take its lock alone.
 */
#ifndef GPB_CLIENT_CLIENT_H
#define GPB_CLIENT_CLIENT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "conn.h"
#include "gpubroker.h"
#include "lease.h"
#include "track.h"

/* What hello's result said about the daemon. */
struct client_limits {
	uint64_t max_frame;
	uint64_t max_instances;
	uint64_t max_allocations;
	uint64_t write_high_water;
	uint64_t slab_size; /* 0 from a daemon that does not say */
};

/* An allocation gpb_free_async() queued: freed once its fence has passed. */
struct client_pending {
	struct client_pending *next;
	uint64_t id;
	void *fence; /* the opener's (track.opener) */
};

struct gpb_client {
	pthread_mutex_t lock;
	struct client_conn conn;
	struct track track;
	struct idmap hosts; /* host allocation id -> struct host_entry (hostmem.c) */
	char backend[16];
	uint64_t session;
	int64_t uid;
	struct client_limits limits;
	gpb_event_fn event_fn;
	void *event_data;
	/* gpb_free_async's queue, oldest first, under the lock, and how an
	 * entry whose fence passed is freed (memory.c sets it with the first;
	 * a hook, as the core calls nothing above it). */
	struct client_pending *pending, **pending_tail;
	void (*release_pending)(gpb_client *c, uint64_t id);
	unsigned generation; /* client_generation when made: another one in a forked child */
	/* The lease allocator (lease.h): its own lock, taken after this
	 * client's, never before. */
	struct lease_state lease;
};

/* client.c: its life. */

/* A client connected to @path (not NULL), before hello. Returns 0, or
 * GPB_E_CONNECT, GPB_E_PERMISSION, GPB_E_SYSTEM or GPB_E_NOMEM (nothing to
 * destroy then). */
int client_create(const char *path, gpb_client **out);
/* Unmaps everything, closes the connection and frees @c. In a forked
 * child, for a client of its parent: frees it with no word to the daemon
 * or the driver. */
void client_destroy(gpb_client *c);
/* Counts this process's forks (client.c's atfork handler; a client made
 * before one carries an older count). */
extern unsigned client_generation;
/* Whether @c was made before this process was forked (its parent's): every
 * call on it is refused. Inline: every gpb_alloc and gpb_free asks. */
static inline bool client_forked(const gpb_client *c)
{
	return c->generation != client_generation;
}

/* call.c: calls on it. */

/* Validates @c and takes its lock; clears the thread's last error. Frees
 * the queued gpb_free_async() allocations whose fences have passed. The
 * refusal of a free that did not wait (client_conn_take_free_error) is returned
 * instead, the lock not taken. */
int client_enter(gpb_client *c);
/* client_enter() that leaves such a refusal for the next call: for
 * gpb_dispatch(), which must deliver the events (an eviction) all the same. */
int client_enter_events(gpb_client *c);

/* Queues @id to be freed once @fence passes (consumed). Lock held. */
void client_pending_add(gpb_client *c, struct client_pending *p);
/* Waits for every queued fence and forgets the queue (the daemon lets the
 * allocations go with the connection, or has already). Lock held. */
void client_pending_drop(gpb_client *c);
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
/* Sends a `release` for each kept slab the track let go of (its mapping is
 * closed already: track_take_released), before any request that could be
 * granted memory in it. Called with the lock held. */
int client_send_released(gpb_client *c);
/* A client_parse_fn: *(char **)@result_json = @result as compact JSON text
 * (free with free()); nothing when @result_json is NULL. */
int client_result_json(const cJSON *result, void *result_json);

#endif
