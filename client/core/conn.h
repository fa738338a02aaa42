/*
 * conn.h - one connection to gpubrokerd: socket, framing, received
 * descriptors, request/reply exchange and the queue of events.
 *
 * Not thread-safe by itself: the owning gpb_client holds its mutex around
 * every call. Functions return 0 (or a count) or a GPB_E_* code with the
 * thread's last-error message set.
 *
 * Once the stream is unusable (EOF, reset, a frame this library cannot read,
 * a descriptor missing) the connection is "dead": the socket is shut down,
 * pending descriptors are closed, and every later exchange fails fast with
 * GPB_E_DAEMON_GONE. Events queued before that can still be taken.
 */
#ifndef GPB_CLIENT_CONN_H
#define GPB_CLIENT_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto.h"

struct client_conn_event {
	struct client_conn_event *next;
	char *name;
	char *data; /* JSON text of the data object */
};

struct client_conn {
	int sock;
	int evfd; /* readable while events are queued */
	int epfd; /* sock + evfd: what gpb_event_fd() hands out */
	bool dead;
	int parting; /* GPB_E_* of an error the daemon sent with a null id before closing */
	char dead_reason[160];
	uint64_t next_id;
	struct proto_framer framer;
	/* Descriptors received but not yet claimed by a reply, oldest first. */
	int *fds;
	size_t fd_head, fd_count, fd_cap;
	struct client_conn_event *ev_head, **ev_tail;
	size_t ev_count;
	/* Called when an `invalidate` event is read, before any frame after
	 * it: the daemon released everything this connection held. */
	void (*on_invalidate)(void *ctx);
	void *invalidate_ctx;
	/* The newest invalidate epoch read, and the newest answered with
	 * invalidate_done (sent once the frames at hand are handled). */
	uint64_t invalidate_epoch, invalidate_acked;
	/* An invalidate read behind a reply, in the same read: it came after
	 * the reply, which the caller has yet to apply, so it is applied at
	 * the connection's next use (its epoch answered only then). */
	uint64_t invalidate_deferred;
	bool invalidate_pending, defer_invalidate;
	/* Answers (recalls) sent while a request's reply is still to come, or
	 * read but not yet applied by the caller: that reply, sent before the
	 * daemon read them, may count on what they let go of (lease_recall
	 * defers its local part to the next call's start). */
	bool in_exchange;
	/* Called when a `reclaim` event is read: the daemon wants back a
	 * slab this connection keeps empty. 0, or GPB_E_PROTOCOL. */
	int (*on_reclaim)(void *ctx, uint64_t slab);
	/* Slabs to `release` once the frames at hand are handled. */
	uint64_t *reclaimed;
	size_t nreclaimed, reclaimed_cap;
	uint64_t reclaims; /* reclaim events answered, ever */
	/* Called for a `recall` event once the frames at hand are handled,
	 * the client's lock held: gives back wholly free leases of @instance
	 * until @bytes went back (quiet lease_returns: nothing read, so that
	 * it may run inside another exchange). Returns the bytes given back. */
	uint64_t (*on_recall)(void *ctx, uint64_t instance, uint64_t bytes);
	/* Recalls read and not answered yet, oldest first. */
	struct client_conn_recall {
		uint64_t epoch, instance, bytes;
	} * recalls;
	size_t nrecalls, recalls_cap;
	uint64_t recalls_answered; /* recall events answered (recall_done), ever */
	uint64_t recalled_bytes;   /* bytes they gave back */
	/* A free sent without waiting (client_conn_send_free) that the daemon
	 * refused: its error, returned by the connection's next call. */
	int free_error;
	char free_message[160];
	uint64_t free_errors; /* how many, ever */
	unsigned quiet_sends; /* frees sent since the socket was last read */
};

/* Connects to @path (not NULL). Returns GPB_E_CONNECT, GPB_E_PERMISSION,
 * GPB_E_SYSTEM or GPB_E_NOMEM; on failure nothing needs finishing. */
int client_conn_init(struct client_conn *c, const char *path);
/* Closes every descriptor and frees queued events. */
void client_conn_finish(struct client_conn *c);

/*
 * Sends @method with @params (consumed, NULL = {}) and waits for its reply,
 * queueing events that arrive meanwhile.
 * On 0, *rep holds a success reply (release with proto_reply_finish) and, if
 * @fd is not NULL, *fd the descriptor the reply carried ("fd": true) or -1;
 * the caller owns it. A descriptor arriving where @fd is NULL is closed.
 * An error reply is mapped with client_conn_reply_error() and returned (*rep is
 * then empty). Any failure of the stream kills the connection.
 */
int client_conn_call(struct client_conn *c, const char *method, cJSON *params,
                     struct proto_reply *rep, int *fd);

/*
 * gpb_alloc's exchange without the cJSON tree (proto/codec.h): the request
 * written directly, and a grant in its canonical form read into @fast
 * (returns 1). Any other reply is decoded the general way into *rep
 * (returns 0: a fresh slab's grant, with its descriptor in *fd). Errors as
 * client_conn_call(); an invalidate read meanwhile is answered as client_conn_call does.
 */
struct proto_grant;
int client_conn_call_alloc(struct client_conn *c, uint64_t instance, uint64_t size,
                           uint64_t alignment, uint32_t wait_ms, struct proto_grant *fast,
                           struct proto_reply *rep, int *fd);

/*
 * gpb_free's request: sent, not waited for (the daemon answers only an
 * error, kept for client_conn_take_free_error()). Returns 0 or what killed the
 * connection.
 */
int client_conn_send_free(struct client_conn *c, uint64_t id);
/* Tells the daemon that this connection let go of slab @slab, which it
 * kept empty (its mapping closed already); the reply is dropped. */
int client_conn_send_release(struct client_conn *c, uint64_t slab);
/* lease_return of @lease (@in_use as for `lease`) with "reply": false, for
 * a recall's answer: nothing is read, so it may be sent inside another
 * exchange; a refusal's reply is dropped (the lease is already forgotten
 * here: unknown to the daemon after an invalidate). */
int client_conn_send_lease_return(struct client_conn *c, uint64_t lease, uint64_t in_use);
/* The error of a free sent earlier, as a GPB_E_* with its message set
 * (once), or 0. */
int client_conn_take_free_error(struct client_conn *c);

/* Applies an invalidate event read right behind the previous reply (held
 * back so that the caller could apply that reply first) and answers it.
 * Every API call does this first, before it looks at its bookkeeping: a
 * free of an allocation the event took must find it gone. */
void client_conn_settle(struct client_conn *c);

/* Reads what is available without blocking and queues the events in it.
 * Returns 0, or the error that killed the connection. */
int client_conn_pump(struct client_conn *c);

/* Detaches the queued events (oldest first) and clears the event fd. */
struct client_conn_event *client_conn_take_events(struct client_conn *c);
void client_conn_event_free(struct client_conn_event *ev);

/* Kills the connection (see above) and records @err with a message. */
int client_conn_fail(struct client_conn *c, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prints @json (NULL = {}) compactly into a malloc'd string, or NULL. */
char *client_conn_json_text(const cJSON *json);

/* GPB_E_DAEMON_GONE with the reason the connection died. */
int client_conn_dead_error(const struct client_conn *c);

#endif
