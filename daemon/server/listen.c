/*
 * listen.c - the listening socket, and connections refused at the
 * descriptor limit with a word rather than a reset.
 */
#include "listen.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "peer.h"
#include "proto.h"
#include "systemd.h"

#define LISTEN_BACKLOG  128
#define LISTEN_BATCH    64    /* accepted per wake-up: a flood does not starve the clients */
#define LISTEN_LOG_MS   10000 /* at most one "too many open files" line this often */
#define LISTEN_RETRY_MS 100   /* pause when not even the spare descriptor is left */

char *listener_refusal(const char *message, const char *limit, uint64_t value, size_t *len)
{
	cJSON *data = cJSON_CreateObject();
	if (data && (!cJSON_AddStringToObject(data, PROTO_F_LIMIT, limit) ||
	             !cJSON_AddNumberToObject(data, PROTO_F_VALUE, (double)value))) {
		cJSON_Delete(data);
		data = NULL;
	}
	return proto_encode_error(NULL, PROTO_E_LIMIT, message, data, len);
}

/* Makes room for binding: refuses a path where a daemon answers or that is
 * not a socket, removes a stale socket. */
static int listener_prepare(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct stat st;
	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISSOCK(st.st_mode))
		return -ENOTSOCK;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	int rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	int err = errno;
	close(fd);
	if (rc == 0)
		return -EADDRINUSE;
	if (err != ECONNREFUSED)
		return -err;
	log_info("removing stale socket %s", path);
	return unlink(path) < 0 ? -errno : 0;
}

/* Binds the configured path ourselves: mode under umask so the socket never
 * exists with wider access than asked, then the socket group if it exists. */
static int listener_bind(struct listener *l, const struct conf *cfg)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int rc = listener_prepare(cfg->socket);
	if (rc < 0)
		return rc;
	l->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (l->fd < 0)
		return -errno;
	/* listener_prepare checked that it fits. */
	memcpy(sa.sun_path, cfg->socket, strlen(cfg->socket) + 1);
	memcpy(l->path, sa.sun_path, sizeof(l->path));
	mode_t old = umask(0777 & ~cfg->socket_mode);
	rc = bind(l->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ? -errno : 0;
	umask(old);
	if (rc < 0)
		return rc;
	l->bound = true;
	gid_t gid = peer_group_gid(cfg->socket_group);
	if (gid != (gid_t)-1 && chown(cfg->socket, (uid_t)-1, gid) < 0)
		log_warn("%s: cannot give the socket to group %s: %s", cfg->socket,
		         cfg->socket_group, strerror(errno));
	else if (gid == (gid_t)-1 && (cfg->set & (1ull << CONF_SOCKET_GROUP)))
		log_warn("%s: no group %s: the socket keeps the daemon's group", cfg->socket,
		         cfg->socket_group);
	if (chmod(cfg->socket, cfg->socket_mode) < 0)
		return -errno;
	return listen(l->fd, LISTEN_BACKLOG) < 0 ? -errno : 0;
}

int listener_open(struct listener *l, uv_loop_t *loop, const struct conf *cfg, const char **where)
{
	memset(l, 0, sizeof(*l));
	l->loop = loop;
	l->fd = l->spare = l->admin_spare = -1;
	*where = cfg->socket;
	int fd = systemd_listen_fd(cfg->socket), rc;
	if (fd >= 0) {
		/* Socket activation: systemd owns the socket file and has
		 * set it listening. */
		l->fd = fd;
		*where = "the socket from systemd";
		rc = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0 ? -errno : 0;
	} else {
		rc = fd == -ENOENT ? listener_bind(l, cfg) : fd;
	}
	if (rc < 0)
		listener_close(l);
	return rc;
}

/* Whether a line logged at *stamp (loop time; 0: never) may be followed by
 * another now; if so, *stamp is now. */
static bool listener_log_due(const struct listener *l, uint64_t *stamp)
{
	uint64_t now = uv_now(l->loop);
	if (*stamp && now - *stamp < LISTEN_LOG_MS)
		return false;
	*stamp = now ? now : 1;
	return true;
}

/* Counts a connection refused for want of a descriptor, and logs it: the
 * first at once, then at most one line every LISTEN_LOG_MS with how many
 * since the last (a flood at the limit would otherwise flood the log). */
static void listener_count(struct listener *l)
{
	(*l->refused)++;
	l->unlogged++;
	if (!listener_log_due(l, &l->logged_ms))
		return;
	struct rlimit rl = {0};
	getrlimit(RLIMIT_NOFILE, &rl);
	log_warn("accept: out of file descriptors (RLIMIT_NOFILE %llu): %llu connection%s "
	         "answered \"too many open files\" and closed (this line comes at most every "
	         "%d s)",
	         (unsigned long long)rl.rlim_cur, (unsigned long long)l->unlogged,
	         l->unlogged == 1 ? "" : "s", LISTEN_LOG_MS / 1000);
	l->unlogged = 0;
}

/* Tells a connection accepted with a spare descriptor why it is refused,
 * closes it and counts it. */
static void listener_turn_away(struct listener *l, int fd)
{
	struct rlimit rl = {0};
	getrlimit(RLIMIT_NOFILE, &rl);
	size_t len;
	char *frame = listener_refusal("limit reached: too many open files", PROTO_V_LIMIT_FILES,
	                               rl.rlim_cur, &len);
	/* A new socket's buffer takes a frame this small whole. */
	if (frame && send(fd, frame, len, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
		log_debug("accept: could not tell a client of the descriptor limit: %s",
		          strerror(errno));
	free(frame);
	close(fd);
	listener_count(l);
}

/*
 * accept() said EMFILE or ENFILE: a spare descriptor makes room for one
 * pending connection (the admin spare first, then the other). An
 * administrator's is served, keeping the admin spare's place; anyone
 * else's is told why and closed, and the spare is taken again. 0 when one
 * was served, refused or gone meanwhile (more may wait), -EAGAIN when none
 * was waiting, another -errno when that could not be done.
 */
static int listener_refuse(struct listener *l)
{
	int *spare = l->admin_spare >= 0 ? &l->admin_spare : &l->spare;
	if (*spare < 0)
		return -EMFILE;
	close(*spare);
	*spare = -1;
	int fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
	int err = errno;
	struct peer peer;
	if (fd >= 0 && spare == &l->admin_spare && peer_read(fd, l->admin_gid, &peer) == 0 &&
	    peer.admin) {
		log_info("accept: at the descriptor limit, an administrator's connection (uid %u) "
		         "is served with the spare kept for it",
		         (unsigned)peer.uid);
		l->on_accept(l->ctx, fd);
		return 0;
	}
	if (fd >= 0)
		listener_turn_away(l, fd);
	*spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (fd >= 0 || err == EINTR || err == ECONNABORTED || err == EPROTO)
		return 0;
	return err == EWOULDBLOCK ? -EAGAIN : -err;
}

static void listener_on_readable(uv_poll_t *p, int status, int events);

static void listener_on_retry(uv_timer_t *t)
{
	struct listener *l = t->data;
	if (l->spare < 0)
		l->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (l->admin_spare < 0)
		l->admin_spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
	uv_poll_start(&l->poll, UV_READABLE, listener_on_readable);
}

/* Stops accepting for a moment: the listener stays readable, and polling
 * it now would spin. */
static void listener_pause(struct listener *l, const char *why)
{
	if (listener_log_due(l, &l->paused_ms))
		log_warn(
		    "accept: %s; accepting again in %d ms (this line comes at most every %d s)",
		    why, LISTEN_RETRY_MS, LISTEN_LOG_MS / 1000);
	uv_poll_stop(&l->poll);
	uv_timer_start(&l->retry, listener_on_retry, LISTEN_RETRY_MS, 0);
}

static void listener_on_readable(uv_poll_t *p, int status, int events)
{
	struct listener *l = p->data;
	if (status < 0) {
		listener_pause(l, uv_strerror(status));
		return;
	}
	/* The admin spare an administrator's connection took, back once a
	 * descriptor is free (the refusal spare first: it is taken again at
	 * once after each use). */
	if (l->admin_spare < 0 && l->spare >= 0)
		l->admin_spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
	for (int i = 0; i < LISTEN_BATCH && l->fd >= 0; i++) {
		int fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd >= 0) {
			l->on_accept(l->ctx, fd);
			continue;
		}
		switch (errno) {
		case EAGAIN:
#if EWOULDBLOCK != EAGAIN
		case EWOULDBLOCK:
#endif
			return;
		case EINTR:
		case ECONNABORTED:
		case EPROTO:
			continue; /* that connection is gone; the next may be fine */
		case EMFILE:
		case ENFILE: {
			int rc = listener_refuse(l);
			if (rc == 0)
				continue;
			if (rc != -EAGAIN)
				listener_pause(l, "out of file descriptors, the spare one too");
			return;
		}
		default:
			listener_pause(l, strerror(errno));
			return;
		}
	}
}

int listener_start(struct listener *l, listener_accept_fn on_accept, void *ctx, uint64_t *refused,
                   gid_t admin_gid)
{
	l->on_accept = on_accept;
	l->ctx = ctx;
	l->refused = refused;
	l->admin_gid = admin_gid;
	/* Taken before the first client, so that the limit is never met
	 * without them. */
	l->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (l->spare < 0)
		return -errno;
	l->admin_spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (l->admin_spare < 0)
		return -errno;
	int rc = uv_poll_init(l->loop, &l->poll, l->fd);
	if (rc < 0)
		return rc;
	uv_timer_init(l->loop, &l->retry);
	l->poll.data = l->retry.data = l;
	l->handles = true;
	return uv_poll_start(&l->poll, UV_READABLE, listener_on_readable);
}

void listener_close(struct listener *l)
{
	if (l->handles) {
		uv_close((uv_handle_t *)&l->poll, NULL);
		uv_close((uv_handle_t *)&l->retry, NULL);
		l->handles = false;
	}
	if (l->fd >= 0)
		close(l->fd);
	if (l->spare >= 0)
		close(l->spare);
	if (l->admin_spare >= 0)
		close(l->admin_spare);
	l->fd = l->spare = l->admin_spare = -1;
	if (l->bound)
		unlink(l->path);
	l->bound = false;
}
