/*
 * output.c - what the daemon queues for its clients, and its bounds.
 *
 * A frame the socket does not take at once is queued with its own write
 * request. What a connection's queue holds (frames and requests) is counted
 * for it and for the server. Three bounds keep a client that does not read
 * from costing the daemon more than a known amount:
 *   - past write_high_water unsent bytes, the client is paused: its
 *     requests are not read, so no more replies are made for it; it is
 *     dropped if it stays paused paused_timeout_ms (10 s by default);
 *   - past max_output_per_client held (events and deferred replies still
 *     come while it is paused), it is dropped; the frame being written is
 *     not counted, so one large reply (a `clients` list, up to 16 MiB) to a
 *     client that reads does not get it dropped;
 *   - past max_output_total held for every client together, the connection
 *     holding the most (the slowest reader) is dropped, then the next, until
 *     the total is under the bound again.
 * A queued frame that passes a descriptor holds a duplicate of it until it
 * is written; past OUTPUT_MAX_FDS of those the client is paused as at the
 * high-water mark, so that what the daemon holds open for the clients that
 * do not read is bounded per connection (docs/design.md, "Descriptors"):
 * only events and deferred replies (at most max_inflight waits) add to it
 * while paused.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "server_internal.h"

#define OUTPUT_MAX_FDS 4

/* Adds delta (may be negative) to the server's total and its metric. */
static void output_add(struct server *srv, ssize_t delta)
{
	srv->out_bytes += (size_t)delta;
	srv->dispatch.metrics.output_bytes = srv->out_bytes;
}

void output_release(struct server_conn *c)
{
	if (c->out_released)
		return;
	c->out_released = true;
	output_add(c->srv, -(ssize_t)c->out_bytes);
}

/* Drops a connection that does not read: at once, or on the next loop turn
 * when a broker operation may be using its session, or when it is not the
 * connection being served (its caller may be iterating the connections). */
static void output_drop(struct server_conn *c, bool now, enum metrics_drop why)
{
	c->srv->dispatch.metrics.dropped[why]++;
	if (now && !c->srv->in_send)
		server_conn_close(c, "not reading its replies");
	else
		server_conn_doom(c);
}

static void server_conn_on_pause_timeout(uv_timer_t *t)
{
	struct server_conn *c = t->data;
	log_warn("session %llu (pid %d uid %u): dropped: still not reading its replies after %u ms",
	         (unsigned long long)c->session->id, (int)c->session->pid,
	         (unsigned)c->session->uid, broker_get_limits(c->srv->broker)->paused_timeout_ms);
	output_drop(c, true, METRICS_DROP_PAUSED);
}

void server_conn_pause(struct server_conn *c)
{
	if (c->paused)
		return;
	log_debug("session %llu: paused: not reading its replies",
	          (unsigned long long)c->session->id);
	c->paused = true;
	uv_read_stop((uv_stream_t *)&c->pipe);
	uv_timer_start(&c->pause_timer, server_conn_on_pause_timeout,
	               broker_get_limits(c->srv->broker)->paused_timeout_ms, 0);
}

static void server_conn_on_write(uv_write_t *req, int status)
{
	struct server_conn_write *w = req->data;
	struct server_conn *c = w->req.handle->data;
	list_remove(&w->link);
	c->out_bytes -= w->cost;
	if (!c->out_released)
		output_add(c->srv, -(ssize_t)w->cost);
	free(w->frame);
	if (w->fd_pipe) {
		uv_close((uv_handle_t *)w->fd_pipe, (uv_close_cb)free);
		c->out_fds--;
	}
	free(w);
	if (status < 0) {
		/* EPIPE/ECONNRESET: the client left before its reply. */
		if (status != UV_ECANCELED)
			server_conn_close(c, uv_strerror(status));
		return;
	}
	size_t queued = uv_stream_get_write_queue_size((uv_stream_t *)&c->pipe);
	if (c->paused && !c->closing && !c->finishing &&
	    queued <= broker_get_limits(c->srv->broker)->write_high_water / 2 &&
	    c->out_fds < OUTPUT_MAX_FDS) {
		c->paused = false;
		uv_timer_stop(&c->pause_timer);
		/* What its backlog held is free: give it back soon. */
		server_trim_soon(c->srv);
		server_conn_process(c);
	}
}

/* Bytes a connection's queue holds beyond the frame being written. */
static size_t output_backlog(const struct server_conn *c)
{
	if (list_empty(&c->writes))
		return 0;
	return c->out_bytes - list_entry(c->writes.next, struct server_conn_write, link)->cost;
}

/* While every connection's output together is over max_output_total, drops
 * the one holding the most: the client furthest behind reading. */
static void output_check_total(struct server *srv, struct server_conn *current)
{
	while (srv->out_bytes > srv->cfg.max_output_total) {
		struct server_conn *worst = NULL;
		struct list *pos;
		list_for_each(pos, &srv->conns) {
			struct server_conn *c = list_entry(pos, struct server_conn, link);
			if (!c->out_released && (!worst || c->out_bytes > worst->out_bytes))
				worst = c;
		}
		if (!worst)
			return;
		log_warn(
		    "session %llu (pid %d uid %u): dropped: not reading its replies, %zu bytes "
		    "queued, the most of any client, while all clients had %zu queued "
		    "(max_output_total %llu)",
		    (unsigned long long)worst->session->id, (int)worst->session->pid,
		    (unsigned)worst->session->uid, worst->out_bytes, srv->out_bytes,
		    (unsigned long long)srv->cfg.max_output_total);
		output_drop(worst, worst == current, METRICS_DROP_TOTAL);
	}
}

/* After a frame is queued: pauses a client over the high-water mark, drops
 * one over max_output_per_client, then holds the total. */
static void server_conn_check_queue(struct server_conn *c)
{
	struct server *srv = c->srv;
	size_t backlog = output_backlog(c);
	if (backlog > srv->cfg.max_output_per_client) {
		log_warn(
		    "session %llu (pid %d uid %u): dropped: not reading its replies, %zu bytes "
		    "queued behind the frame being written (max_output_per_client %llu)",
		    (unsigned long long)c->session->id, (int)c->session->pid,
		    (unsigned)c->session->uid, backlog,
		    (unsigned long long)srv->cfg.max_output_per_client);
		output_drop(c, true, METRICS_DROP_CLIENT);
	} else if (!c->paused && (uv_stream_get_write_queue_size((uv_stream_t *)&c->pipe) >
	                              broker_get_limits(srv->broker)->write_high_water ||
	                          c->out_fds >= OUTPUT_MAX_FDS)) {
		server_conn_pause(c);
	}
	output_check_total(srv, c);
}

/*
 * uv_try_write for a frame that carries a descriptor: with nothing queued,
 * one sendmsg() puts the descriptor on the frame's first byte, as
 * uv_write2() would, without the duplicate descriptor uv_write2() needs (at
 * RLIMIT_NOFILE that dup fails and would cost the client its connection).
 * Returns the bytes written (the descriptor went with the first), 0 when
 * nothing was (queue it instead).
 */
static size_t server_conn_try_write_fd(struct server_conn *c, const char *frame, size_t len, int fd)
{
	uv_os_fd_t sock;
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int))];
	} cbuf;
	if (uv_stream_get_write_queue_size((uv_stream_t *)&c->pipe) > 0 ||
	    uv_fileno((uv_handle_t *)&c->pipe, &sock) < 0)
		return 0;
	memset(&cbuf, 0, sizeof(cbuf));
	struct iovec iov = {.iov_base = (void *)frame, .iov_len = len};
	struct msghdr msg = {.msg_iov = &iov,
	                     .msg_iovlen = 1,
	                     .msg_control = cbuf.buf,
	                     .msg_controllen = sizeof(cbuf)};
	struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	ssize_t n;
	do
		n = sendmsg(sock, &msg, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	return n > 0 ? (size_t)n : 0;
}

/* Wraps a duplicate of fd in a pipe handle for uv_write2. 0 or -errno. */
static int server_conn_wrap_fd(struct server_conn *c, struct server_conn_write *w, int fd)
{
	int dupfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (dupfd < 0)
		return -errno;
	w->fd_pipe = malloc(sizeof(*w->fd_pipe));
	if (!w->fd_pipe || uv_pipe_init(c->srv->loop, w->fd_pipe, 0) < 0) {
		close(dupfd);
		free(w->fd_pipe);
		w->fd_pipe = NULL;
		return -ENOMEM;
	}
	int rc = uv_pipe_open(w->fd_pipe, dupfd);
	if (rc < 0)
		close(dupfd);
	return rc;
}

int server_conn_send(struct server_conn *c, char *frame, size_t len, int fd)
{
	struct server_conn_write *w = NULL;
	uv_buf_t buf = uv_buf_init(frame, (unsigned)len);
	int rc = -ENOMEM;
	if (frame && fd >= 0) {
		size_t n = server_conn_try_write_fd(c, frame, len, fd);
		if (n == len) {
			free(frame);
			return 0;
		}
		if (n > 0) {
			/* The descriptor is on its way: the rest goes as text. */
			buf = uv_buf_init(frame + n, (unsigned)(len - n));
			fd = -1;
		}
	} else if (frame) {
		/* Nothing queued: write now. A write request would cost a loop
		 * turn for its callback and an epoll_ctl on every reply. What
		 * the socket does not take (or all of it) is queued below. */
		int n = uv_try_write((uv_stream_t *)&c->pipe, &buf, 1);
		if (n == (int)len) {
			free(frame);
			return 0;
		}
		if (n > 0)
			buf = uv_buf_init(frame + n, (unsigned)(len - (size_t)n));
	}
	w = calloc(1, sizeof(*w));
	if (!w || !frame)
		goto fail;
	w->frame = frame;
	w->req.data = w;
	list_init(&w->link);
	if (fd >= 0) {
		rc = server_conn_wrap_fd(c, w, fd);
		if (rc < 0)
			goto fail;
		rc = uv_write2(&w->req, (uv_stream_t *)&c->pipe, &buf, 1, (uv_stream_t *)w->fd_pipe,
		               server_conn_on_write);
	} else {
		rc = uv_write(&w->req, (uv_stream_t *)&c->pipe, &buf, 1, server_conn_on_write);
	}
	if (rc < 0)
		goto fail;
	/* The whole frame stays allocated until its request completes. */
	w->cost = len + sizeof(*w) + (w->fd_pipe ? sizeof(*w->fd_pipe) : 0);
	list_insert_tail(&c->writes, &w->link);
	c->out_bytes += w->cost;
	c->out_fds += w->fd_pipe != NULL;
	if (!c->out_released)
		output_add(c->srv, (ssize_t)w->cost);
	server_conn_check_queue(c);
	return 0;
fail:
	if (w && w->fd_pipe)
		uv_close((uv_handle_t *)w->fd_pipe, (uv_close_cb)free);
	free(frame);
	free(w);
	if (c->srv->in_send)
		server_conn_doom(c);
	else
		server_conn_close(c, "could not queue a reply");
	return rc;
}
