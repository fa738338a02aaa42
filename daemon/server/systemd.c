/*
 * systemd.c - socket activation, readiness, status and the watchdog.
 */
#include "systemd.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "config.h"
#include "log.h"
#if GPB_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

int systemd_listen_fd(const char *path)
{
#if GPB_HAVE_SYSTEMD
	int n = sd_listen_fds(1);
	if (n <= 0)
		return -ENOENT;
	for (int i = 0; i < n; i++) {
		int fd = SD_LISTEN_FDS_START + i;
		if (sd_is_socket_unix(fd, SOCK_STREAM, 1, path, 0) > 0)
			return fd;
	}
	/* One socket under another path (a unit's ListenStream= wins over
	 * the configured path): use it, but say so. */
	if (n == 1 && sd_is_socket_unix(SD_LISTEN_FDS_START, SOCK_STREAM, 1, NULL, 0) > 0) {
		log_warn("systemd passed a listening socket not at %s; using it", path);
		return SD_LISTEN_FDS_START;
	}
	log_error("systemd passed %d descriptors, none a listening Unix stream socket", n);
	return -EINVAL;
#else
	(void)path;
	return -ENOENT;
#endif
}

void systemd_notify(const char *fmt, ...)
{
#if GPB_HAVE_SYSTEMD
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	sd_notify(0, buf);
#else
	(void)fmt;
#endif
}

static void systemd_on_tick(uv_timer_t *t)
{
	struct systemd_watchdog *w = t->data;
	char status[256];
	w->status_fn(w->ctx, status, sizeof(status));
	systemd_notify("%sSTATUS=%s", w->watchdog ? "WATCHDOG=1\n" : "", status);
}

void systemd_watchdog_start(uv_loop_t *loop, struct systemd_watchdog *w,
                            void (*status_fn)(void *ctx, char *buf, size_t size), void *ctx)
{
	uint64_t interval_ms = 5000;
	memset(w, 0, sizeof(*w));
	w->status_fn = status_fn;
	w->ctx = ctx;
#if GPB_HAVE_SYSTEMD
	uint64_t usec = 0;
	if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0) {
		/* Ping at half the interval: one late tick must not kill us. */
		w->watchdog = true;
		interval_ms = usec / 2000 ? usec / 2000 : 1;
	}
	if (!w->watchdog && !getenv("NOTIFY_SOCKET"))
		return; /* nobody to tell */
#else
	return;
#endif
	uv_timer_init(loop, &w->timer);
	w->timer.data = w;
	w->running = true;
	uv_timer_start(&w->timer, systemd_on_tick, interval_ms, interval_ms);
}

void systemd_watchdog_stop(struct systemd_watchdog *w)
{
	if (w->running)
		uv_close((uv_handle_t *)&w->timer, NULL);
	w->running = false;
}
