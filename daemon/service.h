/*
 * service.h - what the daemon needs from its surroundings: systemd
 * (socket activation, readiness, status, watchdog) and the identity of the
 * process at the other end of a connection.
 *
 * Without libsystemd the systemd calls are no-ops, so the daemon runs the
 * same way by hand and under a service manager.
 */
#ifndef GPB_SERVICE_H
#define GPB_SERVICE_H

#include <stdbool.h>
#include <sys/types.h>
#include <uv.h>

/* A listening socket systemd passed for path (or the only one passed), or
 * -ENOENT when there is none (the daemon binds its own), or -EINVAL when
 * systemd passed something unusable. */
int service_listen_fd(const char *path);

/* sd_notify with printf formatting; a no-op when not under systemd. */
void service_notify(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Pings the watchdog from the event loop (so a blocked loop is noticed) and
 * refreshes STATUS= with status_fn's text. */
struct service_watchdog {
	uv_timer_t timer;
	void (*status_fn)(void *ctx, char *buf, size_t size);
	void *ctx;
	bool watchdog;
	bool running;
};

void service_watchdog_start(uv_loop_t *loop, struct service_watchdog *w,
                            void (*status_fn)(void *ctx, char *buf, size_t size), void *ctx);
void service_watchdog_stop(struct service_watchdog *w);

/* Supplementary groups kept per peer (for group rules); the admin check sees
 * them all. */
#define SERVICE_MAX_GROUPS 256

struct service_peer {
	pid_t pid;
	uid_t uid;
	gid_t gid;
	bool admin; /* root, or admin_gid among its groups */
	unsigned ngroups;
	gid_t groups[SERVICE_MAX_GROUPS]; /* the first ngroups supplementary groups */
};

/* Peer credentials and group membership of a connected Unix socket, as the
 * peer had them at connect(). admin_gid is (gid_t)-1 when no admin group
 * exists. 0 or -errno. */
int service_peer(int fd, gid_t admin_gid, struct service_peer *out);

/* The gid of a group name, or (gid_t)-1 when there is no such group. */
gid_t service_group(const char *name);

#endif
