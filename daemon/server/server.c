/*
 * server.c - connections over libuv.
 *
 * A connection's memory is freed only from the close callbacks of both of
 * its handles (the dqlite rule: libuv owns a handle until its close callback
 * runs). What is written to clients, and its bounds, is output.c; the
 * listening socket listen.c.
 */
#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "peer.h"
#include "reload.h"
#include "server_internal.h"

/*
 * The whole exit, SIGTERM to the end of the process, takes at most
 * SERVER_EXIT_MS (the promise of docs/reliability.md). Clients get all of
 * it but SERVER_EXIT_TEARDOWN_MS to read what is queued for them; the rest
 * is for closing those that did not, freeing what they held and the
 * process's own exit (tens of ms measured with a client that never reads;
 * the margin is for a loaded machine).
 */
#define SERVER_EXIT_MS          5000
#define SERVER_EXIT_TEARDOWN_MS 500
/* Freed heap goes back to the system this long after a connection closes
 * (at most this often): glibc keeps it otherwise, and a burst of clients
 * that never read would leave the daemon's RSS at its peak. */
#define SERVER_TRIM_MS 1000

static void server_conn_on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void server_conn_on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf);

static void server_conn_on_handle_closed(uv_handle_t *h)
{
	struct server_conn *c = h->data;
	if (--c->open_handles > 0)
		return;
	struct server *srv = c->srv;
	free(c);
	if (srv->stopping && list_empty(&srv->conns) && !uv_is_closing((uv_handle_t *)&srv->drain))
		uv_close((uv_handle_t *)&srv->drain, NULL);
	server_trim_soon(srv);
}

void server_conn_close(struct server_conn *c, const char *why)
{
	if (c->closing)
		return;
	c->closing = true;
	output_release(c);
	if (c->session) {
		log_debug("session %llu (pid %d uid %u): closed: %s",
		          (unsigned long long)c->session->id, (int)c->session->pid,
		          (unsigned)c->session->uid, why);
		broker_session_close(c->srv->broker, c->session);
		c->session = NULL;
	}
	list_remove(&c->link);
	c->srv->conn_count--;
	proto_framer_finish(&c->framer);
	uv_close((uv_handle_t *)&c->pipe, server_conn_on_handle_closed);
	uv_close((uv_handle_t *)&c->hello_timer, server_conn_on_handle_closed);
	uv_close((uv_handle_t *)&c->pause_timer, server_conn_on_handle_closed);
}

static void server_conn_on_shutdown(uv_shutdown_t *req, int status)
{
	server_conn_close(req->data, "finished");
}

/* Ends a connection after the replies already queued have been written. */
static void server_conn_finish(struct server_conn *c)
{
	if (c->closing || c->finishing)
		return;
	c->finishing = true;
	uv_read_stop((uv_stream_t *)&c->pipe);
	c->shutdown.data = c;
	if (uv_shutdown(&c->shutdown, (uv_stream_t *)&c->pipe, server_conn_on_shutdown) < 0)
		server_conn_close(c, "shutdown failed");
}

static void server_conn_on_doomed(uv_timer_t *t)
{
	server_conn_close(t->data, "could not queue a frame");
}

/*
 * The broker sends events and deferred replies from inside its own
 * operations (a rebalance, a free serving a wait); closing a connection
 * there would free a session under its feet. Such a connection stops
 * reading and is closed from the loop, by its hello timer, which is idle
 * after the handshake (and before it the broker sends nothing that can be
 * doomed but the shutdown event, after which the connection ends anyway).
 */
void server_conn_doom(struct server_conn *c)
{
	if (c->doomed || c->closing)
		return;
	c->doomed = true;
	output_release(c);
	uv_read_stop((uv_stream_t *)&c->pipe);
	uv_timer_start(&c->hello_timer, server_conn_on_doomed, 0, 0);
}

void server_conn_process(struct server_conn *c)
{
	const struct broker_limits *limits = broker_get_limits(c->srv->broker);
	while (!c->closing && !c->finishing && !c->doomed) {
		if (c->paused || uv_stream_get_write_queue_size((uv_stream_t *)&c->pipe) >
		                     limits->write_high_water) {
			server_conn_pause(c);
			return;
		}
		char *frame;
		size_t len;
		struct dispatch_reply rep;
		int rc = proto_framer_next(&c->framer, &frame, &len);
		if (rc == 0)
			break;
		if (rc < 0) {
			dispatch_error(
			    PROTO_E_INVALID_REQUEST,
			    "invalid request: frame exceeds " PROTO_STR(PROTO_MAX_FRAME) " bytes",
			    &rep);
			if (server_conn_send(c, rep.frame, rep.len, -1) == 0)
				server_conn_finish(c);
			return;
		}
		dispatch_frame(&c->srv->dispatch, c->session, frame, len, &rep);
		if (c->doomed) {
			/* The request made the broker send it something that
			 * could not be queued: its stream is no longer whole. */
			free(rep.frame);
			if (rep.fd_owned)
				close(rep.fd);
			return;
		}
		if (c->session->hello)
			uv_timer_stop(&c->hello_timer);
		rc = rep.deferred ? 0 : server_conn_send(c, rep.frame, rep.len, rep.fd);
		/* Sent, or queued with a duplicate (server_conn_send): the reply's own
		 * descriptor is not kept. */
		if (rep.fd_owned)
			close(rep.fd);
		if (rc < 0)
			return;
	}
	/* Resumes a connection paused above (UV_EALREADY when reading). */
	if (!c->closing && !c->finishing && !c->doomed && !c->paused)
		uv_read_start((uv_stream_t *)&c->pipe, server_conn_on_alloc, server_conn_on_read);
}

static void server_conn_on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	/* One loop thread, and read_cb copies the bytes into the framer
	 * before returning: a single server-wide buffer suffices. */
	struct server_conn *c = h->data;
	*buf = uv_buf_init(c->srv->readbuf, sizeof(c->srv->readbuf));
}

static void server_conn_on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
	struct server_conn *c = stream->data;
	if (nread == UV_EOF) {
		/* Half-close: answer what was read, then close. */
		server_conn_process(c);
		server_conn_finish(c);
		return;
	}
	if (nread < 0) {
		server_conn_close(c, uv_strerror((int)nread));
		return;
	}
	if (uv_pipe_pending_count(&c->pipe) > 0) {
		server_conn_close(c, "client sent file descriptors");
		return;
	}
	if (proto_framer_push(&c->framer, buf->base, (size_t)nread) < 0) {
		server_conn_close(c, "out of memory");
		return;
	}
	server_conn_process(c);
}

static void server_conn_on_hello_timeout(uv_timer_t *t)
{
	struct server_conn *c = t->data;
	struct dispatch_reply rep;
	dispatch_error(PROTO_E_STATE, "bad state: no hello within the hello timeout", &rep);
	if (server_conn_send(c, rep.frame, rep.len, -1) == 0)
		server_conn_finish(c);
}

/* Connections of one uid that are still being served. */
static unsigned server_uid_connections(struct server *srv, uid_t uid)
{
	unsigned n = 0;
	struct list *pos, *tmp;
	list_for_each_safe(pos, tmp, &srv->conns) {
		struct server_conn *c = list_entry(pos, struct server_conn, link);
		n += c->session && !c->closing && !c->finishing && c->session->uid == uid;
	}
	return n;
}

/* A connection with its handles initialised, counted, not yet open. */
static struct server_conn *server_conn_create(struct server *srv)
{
	struct server_conn *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->srv = srv;
	proto_framer_init(&c->framer, PROTO_MAX_FRAME);
	list_init(&c->link);
	list_init(&c->writes);
	/* ipc = 1 lets uv_write2 pass descriptors to the client. */
	uv_pipe_init(srv->loop, &c->pipe, 1);
	uv_timer_init(srv->loop, &c->hello_timer);
	uv_timer_init(srv->loop, &c->pause_timer);
	c->pipe.data = c->hello_timer.data = c->pause_timer.data = c;
	c->open_handles = 3;
	list_insert_tail(&srv->conns, &c->link);
	srv->conn_count++;
	return c;
}

/* Opens the session of a connected client and starts reading (or refuses
 * it over a limit). */
static void server_conn_serve(struct server_conn *c, const struct peer *peer)
{
	struct server *srv = c->srv;
	unsigned same_uid = server_uid_connections(srv, peer->uid);
	c->session = broker_session_open(srv->broker, peer->uid, peer->gid, peer->pid);
	if (!c->session) {
		if (peer->pidfd >= 0)
			close(peer->pidfd);
		server_conn_close(c, "out of memory");
		return;
	}
	c->session->pidfd = peer->pidfd; /* the session's to close */
	c->session->conn = c;
	c->session->admin = peer->admin;
	if (broker_session_set_groups(c->session, peer->groups, peer->ngroups) < 0) {
		server_conn_close(c, "out of memory");
		return;
	}
	log_debug("session %llu: connected: pid %d uid %u gid %u%s",
	          (unsigned long long)c->session->id, (int)peer->pid, (unsigned)peer->uid,
	          (unsigned)peer->gid, peer->admin ? " (admin)" : "");
	/* The first limit that refuses it, if any. The last
	 * admin_reserved_connections of max_clients are kept for root and the
	 * admin group, who would otherwise be locked out by the users they
	 * have to deal with. */
	unsigned max = broker_get_limits(srv->broker)->max_clients;
	unsigned reserved = srv->cfg.admin_reserved_connections;
	char message[160];
	enum metrics_refusal why = METRICS_REFUSALS;
	if (srv->conn_count > max) {
		why = METRICS_REFUSED_MAX_CLIENTS;
		snprintf(message, sizeof(message), "limit reached: too many clients");
	} else if (!peer->admin && (uint64_t)srv->conn_count + reserved > max) {
		why = METRICS_REFUSED_RESERVED;
		snprintf(message, sizeof(message),
		         "limit reached: too many clients (the last %u of %u connections are kept "
		         "for administrators)",
		         reserved, max);
	} else if (same_uid >= srv->cfg.max_clients_per_uid) {
		why = METRICS_REFUSED_PER_UID;
		snprintf(message, sizeof(message), "limit reached: too many clients of this user");
	} else if (!peer->admin && broker_files_of(srv->broker, peer->uid) > broker_files_share()) {
		/* Its session counts itself already. */
		why = METRICS_REFUSED_FILES_PER_UID;
		snprintf(message, sizeof(message),
		         "limit reached: too many open files for this user (%s %u)",
		         PROTO_V_LIMIT_FILES_PER_UID, broker_files_share());
	}
	if (why != METRICS_REFUSALS) {
		bool per_uid = why == METRICS_REFUSED_PER_UID;
		bool files = why == METRICS_REFUSED_FILES_PER_UID;
		size_t len;
		char *frame = listener_refusal(message,
		                               files     ? PROTO_V_LIMIT_FILES_PER_UID
		                               : per_uid ? PROTO_V_LIMIT_PER_UID
		                                         : PROTO_V_LIMIT_CLIENTS,
		                               files     ? broker_files_share()
		                               : per_uid ? srv->cfg.max_clients_per_uid
		                                         : max,
		                               &len);
		srv->dispatch.metrics.refused[why]++;
		if (server_conn_send(c, frame, len, -1) == 0)
			server_conn_finish(c);
		return;
	}
	uv_timer_start(&c->hello_timer, server_conn_on_hello_timeout,
	               broker_get_limits(srv->broker)->hello_timeout_ms, 0);
	uv_read_start((uv_stream_t *)&c->pipe, server_conn_on_alloc, server_conn_on_read);
}

/* Serves fd as a client with these credentials; on failure fd is still
 * the caller's. */
static int server_serve_fd(struct server *srv, int fd, const struct peer *peer)
{
	struct server_conn *c = server_conn_create(srv);
	if (!c)
		return -ENOMEM;
	int rc = uv_pipe_open(&c->pipe, fd);
	if (rc < 0) {
		server_conn_close(c, "cannot open the descriptor");
		return rc;
	}
	server_conn_serve(c, peer);
	return 0;
}

/* listener_accept_fn: a client connected. */
static void server_on_accept(void *ctx, int fd)
{
	struct server *srv = ctx;
	struct peer peer;
	int rc = peer_read(fd, srv->admin_gid, &peer);
	if (rc == 0) {
		rc = server_serve_fd(srv, fd, &peer);
		if (rc < 0 && peer.pidfd >= 0)
			close(peer.pidfd);
	}
	if (rc < 0) {
		log_warn("accept: %s: %s", rc == -ENOMEM ? "no memory" : "no peer credentials",
		         strerror(-rc));
		close(fd);
	}
}

int server_attach_fd(struct server *srv, int fd, uid_t uid, gid_t gid, pid_t pid, bool admin)
{
	struct peer peer = {.pid = pid, .pidfd = -1, .uid = uid, .gid = gid, .admin = admin};
	return server_serve_fd(srv, fd, &peer); /* no supplementary groups */
}

/* dispatch_close_fn: an administrator's evict. */
static void server_close(void *ctx, struct session *s, const char *why)
{
	struct server_conn *c = s->conn;
	if (c && !c->closing) {
		log_info("session %llu (pid %d uid %u): %s", (unsigned long long)s->id, (int)s->pid,
		         (unsigned)s->uid, why);
		server_conn_finish(c);
	}
}

/* dispatch_send_fn: frames for a session outside its current reply. */
static void server_send(void *ctx, struct session *s, char *frame, size_t len, int fd)
{
	struct server_conn *c = s->conn;
	if (!c || c->closing || c->finishing || c->doomed) {
		free(frame);
		return;
	}
	struct server *srv = c->srv;
	bool nested = srv->in_send;
	srv->in_send = true;
	server_conn_send(c, frame, len, fd);
	srv->in_send = nested;
}

static void server_on_waits_timer(uv_timer_t *t)
{
	struct server *srv = t->data;
	broker_waits_expire(srv->broker);
}

/* broker_timer_fn: one timer for the earliest deadline of every wait. */
static void server_arm_waits(void *ctx, uint64_t delay_ms)
{
	struct server *srv = ctx;
	if (delay_ms == UINT64_MAX)
		uv_timer_stop(&srv->waits);
	else
		uv_timer_start(&srv->waits, server_on_waits_timer, delay_ms, 0);
}

static void server_on_trim(uv_timer_t *t)
{
#ifdef __GLIBC__
	/* Releases the free pages of every arena, not only the top of the
	 * heap: what a burst of stalled clients freed lies anywhere. */
	malloc_trim(0);
#endif
}

void server_trim_soon(struct server *srv)
{
	/* Not before server_start (the fuzz harness never starts it), nor
	 * while stopping (the timer is closed). */
	if (srv->started && !srv->stopping && !uv_is_active((uv_handle_t *)&srv->trim))
		uv_timer_start(&srv->trim, server_on_trim, SERVER_TRIM_MS, 0);
}

static void server_on_drain_timeout(uv_timer_t *t)
{
	struct server *srv = t->data;
	struct list *pos, *tmp;
	log_warn("shutdown: closing %u clients that did not finish in time", srv->conn_count);
	list_for_each_safe(pos, tmp, &srv->conns) {
		server_conn_close(list_entry(pos, struct server_conn, link), "shutdown");
	}
}

static void server_stop(struct server *srv, const char *reason)
{
	if (srv->stopping)
		return;
	srv->stopping = true;
	broker_stop(srv->broker);
	log_info("%s: stopping; %u clients connected", reason, srv->conn_count);
	systemd_notify("STOPPING=1\nSTATUS=stopping (%s)", reason);
	systemd_watchdog_stop(&srv->watchdog);
	exitwatch_finish(&srv->exits);
	uv_close((uv_handle_t *)&srv->sigterm, NULL);
	uv_close((uv_handle_t *)&srv->sigint, NULL);
	uv_close((uv_handle_t *)&srv->sighup, NULL);
	/* Waiting allocations are answered (shutting_down) before the event
	 * that says why; nothing may wait or arm the timer any more. */
	broker_waits_cancel(srv->broker, -ESHUTDOWN);
	broker_set_timer(srv->broker, NULL, NULL);
	uv_close((uv_handle_t *)&srv->waits, NULL);
	listener_close(&srv->listener);
	uv_close((uv_handle_t *)&srv->trim, NULL);
	/* Every client hears why, gets the replies to what it sent, and is
	 * closed once they are written (or when the drain timer runs out). */
	struct list *pos, *tmp;
	list_for_each_safe(pos, tmp, &srv->conns) {
		struct server_conn *c = list_entry(pos, struct server_conn, link);
		if (c->closing || c->finishing)
			continue;
		cJSON *data = cJSON_CreateObject();
		if (data)
			cJSON_AddStringToObject(data, PROTO_F_REASON, reason);
		dispatch_send_event(&srv->dispatch, c->session, PROTO_EV_SHUTDOWN, data);
		server_conn_finish(c);
	}
	/* A timer is due relative to the loop's time, which was taken when
	 * the loop woke for the signal: the time spent since (the events
	 * above, other callbacks of this turn) counts against the deadline. */
	if (list_empty(&srv->conns))
		uv_close((uv_handle_t *)&srv->drain, NULL);
	else
		uv_timer_start(&srv->drain, server_on_drain_timeout,
		               SERVER_EXIT_MS - SERVER_EXIT_TEARDOWN_MS, 0);
}

/*
 * Re-reads the configuration and applies what can change live; keys that
 * need a restart keep their running value and are reported. On a bad file
 * the running configuration stays in force.
 */
static int server_reload(struct server *srv, cJSON *result, char *message, size_t size)
{
	struct conf next;
	char why[256];
	if (srv->reload(&next, why, sizeof(why)) < 0) {
		/* The cause first: a long path may cut the end short. */
		snprintf(message, size, "%s; the running configuration stays in force", why);
		log_error("reload: %s; the running configuration stays in force", why);
		return -EINVAL;
	}
	reload_apply(&srv->cfg, &next, srv->broker, result);
	srv->admin_gid = peer_group_gid(srv->cfg.admin_group);
	return 0;
}

/* dispatch_reload_fn: the `reload` request. */
static int server_reload_op(void *ctx, cJSON *result, char *message, size_t size)
{
	return server_reload(ctx, result, message, size);
}

static void server_on_sighup(uv_signal_t *sig, int signum)
{
	char message[256];
	systemd_notify("RELOADING=1");
	log_info("SIGHUP: reloading the configuration");
	server_reload(sig->data, NULL, message, sizeof(message)); /* logs what failed */
	systemd_notify("READY=1");
}

static void server_on_signal(uv_signal_t *sig, int signum)
{
	server_stop(sig->data, signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

int server_create(uv_loop_t *loop, struct broker *broker, const struct conf *cfg,
                  server_reload_fn reload, struct server **out)
{
	struct server *srv = calloc(1, sizeof(*srv));
	if (!srv)
		return -ENOMEM;
	srv->loop = loop;
	srv->broker = broker;
	srv->cfg = *cfg;
	srv->reload = reload;
	srv->admin_gid = peer_group_gid(cfg->admin_group);
	list_init(&srv->conns);
	dispatch_init(&srv->dispatch, broker);
	dispatch_set_sender(&srv->dispatch, server_send, server_close, srv);
	dispatch_set_reload(&srv->dispatch, server_reload_op, srv);
	exitwatch_init(&srv->exits, loop, broker);
	*out = srv;
	return 0;
}

static void server_status(void *ctx, char *buf, size_t size)
{
	struct server *srv = ctx;
	struct broker_summary sum;
	broker_summary(srv->broker, &sum);
	snprintf(buf, size, "serving %d %s devices; %u clients, %llu allocations",
	         broker_device_count(srv->broker), broker_backend_name(srv->broker),
	         srv->conn_count, (unsigned long long)sum.allocations);
}

int server_start(struct server *srv)
{
	const char *path;
	int rc = listener_open(&srv->listener, srv->loop, &srv->cfg, &path);
	if (rc == 0)
		rc = listener_start(&srv->listener, server_on_accept, srv,
		                    &srv->dispatch.metrics.refused[METRICS_REFUSED_FILES],
		                    srv->admin_gid);
	if (rc < 0) {
		/* The caller runs the loop once more to complete the close. */
		listener_close(&srv->listener);
		return rc;
	}
	uv_signal_init(srv->loop, &srv->sigterm);
	uv_signal_init(srv->loop, &srv->sigint);
	uv_signal_init(srv->loop, &srv->sighup);
	uv_timer_init(srv->loop, &srv->drain);
	uv_timer_init(srv->loop, &srv->waits);
	uv_timer_init(srv->loop, &srv->trim);
	srv->sigterm.data = srv->sigint.data = srv->sighup.data = srv->drain.data = srv;
	srv->waits.data = srv->trim.data = srv;
	srv->started = true;
	broker_set_timer(srv->broker, server_arm_waits, srv);
	uv_signal_start(&srv->sigterm, server_on_signal, SIGTERM);
	uv_signal_start(&srv->sigint, server_on_signal, SIGINT);
	uv_signal_start(&srv->sighup, server_on_sighup, SIGHUP);
	log_info("listening on %s (backend %s, devices: %d)", path,
	         broker_backend_name(srv->broker), broker_device_count(srv->broker));
	/* Devices are initialised (the broker exists) and the socket listens. */
	char status[256];
	server_status(srv, status, sizeof(status));
	systemd_notify("READY=1\nSTATUS=%s", status);
	systemd_watchdog_start(srv->loop, &srv->watchdog, server_status, srv);
	return 0;
}

void server_destroy(struct server *srv)
{
	if (!srv)
		return;
	dispatch_finish(&srv->dispatch);
	free(srv);
}
