/*
 * listen.h - the listening socket: bound by the daemon or passed by
 * systemd, polled by the loop and accepted here rather than by libuv.
 *
 * libuv's listener, out of descriptors (EMFILE), closes its reserve
 * descriptor, accepts every pending connection and closes it at once,
 * telling neither the client nor the daemon (uv__emfile_trick, libuv 1.44
 * src/unix/stream.c). This one keeps a spare descriptor of its own to
 * accept such a connection with, answers it "too many open files" (-32006),
 * closes it, logs (at most every 10 s) and counts it. A second spare is
 * the administrators': a connection of root or the admin group accepted
 * with it at the limit is served (gpubrokerctl status works whatever the
 * users hold), and the spare is taken again when a descriptor is free.
 */
#ifndef GPB_LISTEN_H
#define GPB_LISTEN_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/un.h>
#include <uv.h>

#include "conf.h"

/* Takes an accepted connection's descriptor (non-blocking, close-on-exec),
 * which is its own from then on. */
typedef void (*listener_accept_fn)(void *ctx, int fd);

struct listener {
	uv_loop_t *loop;
	uv_poll_t poll;
	uv_timer_t retry; /* resumes accepting after the spare descriptor ran out */
	int fd;           /* -1: not open */
	int spare;        /* /dev/null: given up to accept a connection at EMFILE */
	int admin_spare;  /* /dev/null: given up first at EMFILE; kept by an admin's connection */
	gid_t admin_gid;  /* the admin group; (gid_t)-1: none */
	bool handles;     /* poll and retry initialised (listener_start) */
	bool bound;       /* the daemon bound the socket file and unlinks it */
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	listener_accept_fn on_accept;
	void *ctx;
	uint64_t *refused;  /* counter of connections refused for want of a descriptor */
	uint64_t unlogged;  /* refused since the last log line */
	uint64_t logged_ms; /* loop time of that line; 0: none yet */
	uint64_t paused_ms; /* loop time of the last "accepting again" line */
};

/*
 * Opens the socket: the one systemd passed for cfg->socket, else binds
 * cfg->socket (refusing a path where a daemon answers or that is not a
 * socket, replacing a stale socket) with cfg's mode and group, and listens.
 * *where names it for the log. 0 or -EADDRINUSE, -ENAMETOOLONG, -ENOTSOCK,
 * -errno; on failure nothing is left open or bound.
 */
int listener_open(struct listener *l, uv_loop_t *loop, const struct conf *cfg, const char **where);
/* Starts accepting: on_accept(ctx, fd) for every connection; *refused
 * counts those turned away at the descriptor limit (administrators, root
 * and members of admin_gid, are served there while the admin spare lasts).
 * 0 or a libuv error. */
int listener_start(struct listener *l, listener_accept_fn on_accept, void *ctx, uint64_t *refused,
                   gid_t admin_gid);
/* Stops accepting, closes the socket and removes the file it bound (its
 * handles close with the loop's next turn). Idempotent. */
void listener_close(struct listener *l);

/* A limit_reached (-32006) error frame for a connection refused as it
 * came in, with data {"limit", "value"}; malloc'd, NULL without memory. */
char *listener_refusal(const char *message, const char *limit, uint64_t value, size_t *len);

#endif
