/*
 * systemd.h - what the daemon needs from systemd: socket activation,
 * readiness, status and the watchdog.
 *
 * Without libsystemd these calls are no-ops, so the daemon runs the same
 * way by hand and under a service manager.
 */
#ifndef GPB_SYSTEMD_H
#define GPB_SYSTEMD_H

#include <stdbool.h>
#include <uv.h>

/* A listening socket systemd passed for path (or the only one passed), or
 * -ENOENT when there is none (the daemon binds its own), or -EINVAL when
 * systemd passed something unusable. */
int systemd_listen_fd(const char *path);

/* sd_notify with printf formatting; a no-op when not under systemd. */
void systemd_notify(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Pings the watchdog from the event loop (so a blocked loop is noticed) and
 * refreshes STATUS= with status_fn's text. */
struct systemd_watchdog {
	uv_timer_t timer;
	void (*status_fn)(void *ctx, char *buf, size_t size);
	void *ctx;
	bool watchdog;
	bool running;
};

void systemd_watchdog_start(uv_loop_t *loop, struct systemd_watchdog *w,
                            void (*status_fn)(void *ctx, char *buf, size_t size), void *ctx);
void systemd_watchdog_stop(struct systemd_watchdog *w);

#endif
