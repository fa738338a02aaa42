/*
 * server_internal.h - what the files of the server share: the server and
 * its connections (server.c), their output (output.c), the listening socket
 * (listen.c). Nothing outside daemon/server includes it.
 */
#ifndef GPB_SERVER_INTERNAL_H
#define GPB_SERVER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

#include "dispatch.h"
#include "exitwatch.h"
#include "listen.h"
#include "server.h"
#include "systemd.h"

struct server {
	uv_loop_t *loop;
	struct broker *broker;
	struct dispatch dispatch; /* the request layer over broker */
	struct conf cfg;
	server_reload_fn reload;
	gid_t admin_gid; /* (gid_t)-1: no admin group on this machine */
	struct listener listener;
	uv_signal_t sigterm, sigint, sighup;
	uv_timer_t drain;
	uv_timer_t waits; /* the broker's deadline for waiting allocations */
	uv_timer_t trim;  /* gives freed heap back to the system once things calm down */
	bool in_send; /* server_conn_send called from inside a broker operation (an event): do not
	                 close now */
	struct systemd_watchdog watchdog;
	struct exitwatch exits; /* processes of evicted sessions */
	struct list conns;
	unsigned conn_count;
	size_t out_bytes; /* output held for every connection not yet closing (output.c) */
	bool started, stopping;
	char readbuf[PROTO_MAX_FRAME];
};

struct server_conn {
	uv_pipe_t pipe;
	uv_timer_t hello_timer;
	uv_timer_t pause_timer; /* runs while paused: drops a client that stays so */
	uv_shutdown_t shutdown;
	struct server *srv;
	struct session *session;
	struct proto_framer framer;
	struct list link;
	struct list writes; /* struct server_conn_write queued, oldest first */
	size_t out_bytes;   /* what those hold: their frames and requests */
	unsigned out_fds;   /* of those, how many hold a descriptor's duplicate */
	int open_handles;
	bool closing, finishing, paused;
	bool doomed;       /* a frame for it could not be queued: closes on the next loop turn */
	bool out_released; /* out_bytes no longer counts in the server's total */
};

struct server_conn_write {
	uv_write_t req;
	struct list link; /* in server_conn.writes */
	size_t cost;      /* bytes it holds: the frame, this, the descriptor's pipe */
	char *frame;
	uv_pipe_t *fd_pipe; /* wraps a dup of the descriptor being passed */
};

/* server.c */

/* Ends a connection now: pending writes are cancelled, the session's
 * allocations and instances are reclaimed. Idempotent. */
void server_conn_close(struct server_conn *c, const char *why);
/* Closes a connection on the next loop turn: for one the broker may be
 * sending to from inside an operation. */
void server_conn_doom(struct server_conn *c);
/* Answers every complete frame buffered, unless the client is too far
 * behind reading its replies; resumes reading. */
void server_conn_process(struct server_conn *c);
/* Arms the timer that gives freed heap back to the system (malloc_trim),
 * unless it is armed: after a connection goes, or drains its backlog. */
void server_trim_soon(struct server *srv);

/* output.c */

/*
 * Queues a frame (taking ownership) with an optional descriptor to pass.
 * On failure the connection is closed: a client told "fd": true must get
 * the descriptor or nothing. May drop this or other connections that do
 * not read (max_output_per_client, max_output_total). 0 or -errno.
 */
int server_conn_send(struct server_conn *c, char *frame, size_t len, int fd);
/* Stops reading from a client that is too far behind reading its replies
 * (resumed when it catches up), and starts the clock on dropping it. */
void server_conn_pause(struct server_conn *c);
/* Takes a closing connection's output out of the server's total: it is
 * freed with the connection. Idempotent. */
void output_release(struct server_conn *c);

#endif
