/*
 * service.c - systemd integration and peer identity.
 */
#include "service.h"

#include <errno.h>
#include <grp.h>
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

int service_listen_fd(const char *path)
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

void service_notify(const char *fmt, ...)
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

static void service_on_tick(uv_timer_t *t)
{
	struct service_watchdog *w = t->data;
	char status[256];
	w->status_fn(w->ctx, status, sizeof(status));
	service_notify("%sSTATUS=%s", w->watchdog ? "WATCHDOG=1\n" : "", status);
}

void service_watchdog_start(uv_loop_t *loop, struct service_watchdog *w,
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
	uv_timer_start(&w->timer, service_on_tick, interval_ms, interval_ms);
}

void service_watchdog_stop(struct service_watchdog *w)
{
	if (w->running)
		uv_close((uv_handle_t *)&w->timer, NULL);
	w->running = false;
}

gid_t service_group(const char *name)
{
	struct group grp, *result = NULL;
	char buf[4096];
	if (!name[0] || getgrnam_r(name, &grp, buf, sizeof(buf), &result) != 0 || !result)
		return (gid_t)-1;
	return result->gr_gid;
}

/* Whether gid is among n groups. */
static bool service_has_group(const gid_t *groups, size_t n, gid_t gid)
{
	for (size_t i = 0; i < n; i++) {
		if (groups[i] == gid)
			return true;
	}
	return false;
}

int service_peer(int fd, gid_t admin_gid, struct service_peer *out)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
		return -errno;
	out->pid = cred.pid;
	out->uid = cred.uid;
	out->gid = cred.gid;
	out->ngroups = 0;
	out->admin = cred.uid == 0 || (admin_gid != (gid_t)-1 && cred.gid == admin_gid);
	len = sizeof(out->groups);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, out->groups, &len) == 0) {
		out->ngroups = len / sizeof(gid_t);
		if (admin_gid != (gid_t)-1 &&
		    service_has_group(out->groups, out->ngroups, admin_gid))
			out->admin = true;
	} else if (errno == ERANGE) {
		/* More groups than we keep (len now says how many): the admin
		 * check sees them all, the session keeps the first ones. */
		gid_t *all = malloc(len);
		if (!all)
			return -ENOMEM;
		if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, all, &len) < 0) {
			int e = errno;
			free(all);
			return -e;
		}
		out->ngroups = SERVICE_MAX_GROUPS;
		memcpy(out->groups, all, sizeof(out->groups));
		if (admin_gid != (gid_t)-1 &&
		    service_has_group(all, len / sizeof(gid_t), admin_gid))
			out->admin = true;
		free(all);
	} else if (!out->admin && admin_gid != (gid_t)-1) {
		/* No supplementary groups to tell an admin by (a kernel before
		 * 4.13): refused rather than guessed. */
		return -errno;
	}
	return 0;
}
