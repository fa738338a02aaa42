/*
 * server.h - the libuv shell: the listening socket, connections, signals.
 *
 * Everything protocol-shaped happens in dispatch; everything stateful in the
 * broker. The server moves bytes, frames them, and tears a connection down
 * (reclaiming its session) however it ends.
 */
#ifndef GPB_SERVER_H
#define GPB_SERVER_H

#include <stdbool.h>
#include <sys/types.h>
#include <uv.h>

#include "broker.h"
#include "conf.h"

/* Builds the configuration afresh (file, environment, flags) for a reload.
 * 0 or -EINVAL with the error in message (for a bad file "PATH:LINE: ..."
 * naming the key). */
typedef int (*server_reload_fn)(struct conf *out, char *message, size_t size);

struct server;

/* cfg is copied. 0, -ENOMEM. */
int server_create(uv_loop_t *loop, struct broker *broker, const struct conf *cfg,
                  server_reload_fn reload, struct server **out);
/*
 * Binds and listens (refusing a live socket, replacing a stale one) and
 * installs SIGTERM/SIGINT handlers. -EADDRINUSE (a daemon answers there),
 * -ENAMETOOLONG, -ENOTSOCK (path exists and is not a socket), other errnos.
 */
int server_start(struct server *srv);
/*
 * Serves fd, a connected stream socket, as a client with these credentials,
 * as if it had been accepted (the fuzz harness and tests use it with one end
 * of a socketpair; the daemon itself never calls it). On success the server
 * owns fd and closes it with the connection. 0, -ENOMEM, or a libuv error
 * (fd is then still the caller's).
 */
int server_attach_fd(struct server *srv, int fd, uid_t uid, gid_t gid, pid_t pid, bool admin);
/* Frees what the loop no longer references; call after uv_run returns. */
void server_destroy(struct server *srv);

#endif
