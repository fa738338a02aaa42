/*
 * output.c - what the daemon writes to its clients.
 *
 * Replies that carry a slab descriptor go out with uv_write2(), which
 * attaches SCM_RIGHTS to the first byte of that reply, so descriptors stay in
 * order with the frames that announce them. A client that does not read
 * what is queued for it is paused, then dropped.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "server_internal.h"

/* A client paused for not reading its replies (write_high_water) is dropped
 * when it stays paused this long, or at once when the frames queued for it
 * while paused (events, answers to waits) pass this many high-water marks:
 * a client that never reads costs the daemon bounded memory and time. */
#define SERVER_PAUSE_DROP_MS    10000
#define SERVER_PAUSE_DROP_MARKS 4

static void conn_on_pause_timeout(uv_timer_t *t)
{
	struct conn *c = t->data;
	log_warn("session %llu (pid %d uid %u): dropped: still not reading its replies after %d s",
	         (unsigned long long)c->session->id, (int)c->session->pid,
	         (unsigned)c->session->uid, SERVER_PAUSE_DROP_MS / 1000);
	conn_close(c, "not reading its replies");
}

void conn_pause(struct conn *c)
{
	if (c->paused)
		return;
	log_debug("session %llu: paused: not reading its replies",
	          (unsigned long long)c->session->id);
	c->paused = true;
	c->paused_bytes = 0;
	uv_read_stop((uv_stream_t *)&c->pipe);
	uv_timer_start(&c->pause_timer, conn_on_pause_timeout, SERVER_PAUSE_DROP_MS, 0);
}

static void conn_on_write(uv_write_t *req, int status)
{
	struct conn_write *w = req->data;
	struct conn *c = w->req.handle->data;
	free(w->frame);
	if (w->fd_pipe)
		uv_close((uv_handle_t *)w->fd_pipe, (uv_close_cb)free);
	free(w);
	if (status < 0) {
		/* EPIPE/ECONNRESET: the client left before its reply. */
		if (status != UV_ECANCELED)
			conn_close(c, uv_strerror(status));
		return;
	}
	size_t queued = uv_stream_get_write_queue_size((uv_stream_t *)&c->pipe);
	if (c->paused && !c->closing && !c->finishing &&
	    queued <= c->srv->broker->limits.write_high_water / 2) {
		c->paused = false;
		uv_timer_stop(&c->pause_timer);
		conn_process(c);
	}
}

/* After a frame of len bytes is queued: pauses a client over the high-water
 * mark; drops a paused one that has had too much queued meanwhile. */
static void conn_check_queue(struct conn *c, size_t len)
{
	uint64_t mark = c->srv->broker->limits.write_high_water;
	if (c->paused) {
		c->paused_bytes += len;
		if (c->paused_bytes <= SERVER_PAUSE_DROP_MARKS * mark)
			return;
		log_warn("session %llu (pid %d uid %u): dropped: not reading its replies, "
		         "%zu bytes queued",
		         (unsigned long long)c->session->id, (int)c->session->pid,
		         (unsigned)c->session->uid,
		         uv_stream_get_write_queue_size((uv_stream_t *)&c->pipe));
		if (c->srv->in_send)
			conn_doom(c);
		else
			conn_close(c, "not reading its replies");
	} else if (uv_stream_get_write_queue_size((uv_stream_t *)&c->pipe) > mark) {
		conn_pause(c);
	}
}

/*
 * uv_try_write for a frame that carries a descriptor: with nothing queued,
 * one sendmsg() puts the descriptor on the frame's first byte, as
 * uv_write2() would, without the duplicate descriptor uv_write2() needs (at
 * RLIMIT_NOFILE that dup fails and would cost the client its connection).
 * Returns the bytes written (the descriptor went with the first), 0 when
 * nothing was (queue it instead).
 */
static size_t conn_try_write_fd(struct conn *c, const char *frame, size_t len, int fd)
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

int conn_send(struct conn *c, char *frame, size_t len, int fd)
{
	struct conn_write *w = NULL;
	uv_buf_t buf = uv_buf_init(frame, (unsigned)len);
	int rc = -ENOMEM;
	if (frame && fd >= 0) {
		size_t n = conn_try_write_fd(c, frame, len, fd);
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
	if (fd >= 0) {
		int dupfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
		if (dupfd < 0) {
			rc = -errno;
			goto fail;
		}
		w->fd_pipe = malloc(sizeof(*w->fd_pipe));
		if (!w->fd_pipe || uv_pipe_init(c->srv->loop, w->fd_pipe, 0) < 0) {
			close(dupfd);
			free(w->fd_pipe);
			w->fd_pipe = NULL;
			goto fail;
		}
		rc = uv_pipe_open(w->fd_pipe, dupfd);
		if (rc < 0) {
			close(dupfd);
			uv_close((uv_handle_t *)w->fd_pipe, (uv_close_cb)free);
			w->fd_pipe = NULL;
			goto fail;
		}
		rc = uv_write2(&w->req, (uv_stream_t *)&c->pipe, &buf, 1, (uv_stream_t *)w->fd_pipe,
		               conn_on_write);
	} else {
		rc = uv_write(&w->req, (uv_stream_t *)&c->pipe, &buf, 1, conn_on_write);
	}
	if (rc < 0)
		goto fail;
	conn_check_queue(c, len);
	return 0;
fail:
	if (w && w->fd_pipe)
		uv_close((uv_handle_t *)w->fd_pipe, (uv_close_cb)free);
	free(frame);
	free(w);
	if (c->srv->in_send)
		conn_doom(c);
	else
		conn_close(c, "could not queue a reply");
	return rc;
}
