/*
 * conn.c - socket I/O, framing, descriptor FIFO and event queue of one
 * connection to gpubrokerd.
 */
#include "conn.h"
#include "codec.h"
#include "conn_internal.h"
#include "error.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* Descriptors one recvmsg() can take. The daemon sends at most one per reply
 * and the kernel hands over one message's worth per call, so this is ample;
 * too small a buffer would make the kernel drop (close) the surplus. */
#define CLIENT_CONN_FDS_PER_READ 32
/* Descriptors waiting for their reply. Only a broken daemon gets near this. */
#define CLIENT_CONN_MAX_FDS 4096
/* Events kept for an application that never calls gpb_dispatch(): beyond
 * this the oldest are dropped so that memory stays bounded. */
#define CLIENT_CONN_MAX_EVENTS 1024
/* Reads per client_conn_pump(), so that a chatty daemon cannot keep gpb_dispatch()
 * from returning; what is left keeps the socket readable. */
#define CLIENT_CONN_PUMP_READS 64
#define CLIENT_CONN_READ_SIZE  16384
/* The id prefix of invalidate_done requests; no exchange's id has it. */
#define CLIENT_CONN_ACK_ID "inv-"

static void client_conn_close_fds(struct client_conn *c)
{
	while (c->fd_count) {
		close(c->fds[c->fd_head]);
		c->fd_head = (c->fd_head + 1) % c->fd_cap;
		c->fd_count--;
	}
	c->fd_head = 0;
}

int client_conn_fail(struct client_conn *c, int err, const char *fmt, ...)
{
	char msg[sizeof(c->dead_reason)];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	/* A second failure (while salvaging events, say) keeps the first
	 * reason: that is the one later calls report. */
	if (!c->dead) {
		memcpy(c->dead_reason, msg, sizeof(msg));
		c->dead = true;
		/* Keep the descriptor open until gpb_disconnect(): it stays in
		 * the epoll set and, shut down, polls readable, so a poll loop
		 * wakes up and learns from gpb_dispatch() that it is over. */
		shutdown(c->sock, SHUT_RDWR);
		client_conn_close_fds(c);
	}
	return error_set(err, "%s", msg);
}

int client_conn_dead_error(const struct client_conn *c)
{
	return error_set(GPB_E_DAEMON_GONE, "connection to the daemon is closed: %s",
	                 c->dead_reason);
}

/* connect() interrupted by a signal completes in the background: wait for it. */
static int client_conn_connect(int sock, const struct sockaddr_un *addr)
{
	struct pollfd pfd = {.fd = sock, .events = POLLOUT};
	socklen_t len = sizeof(int);
	int err = 0;

	if (connect(sock, (const struct sockaddr *)addr, sizeof(*addr)) == 0)
		return 0;
	if (errno != EINTR && errno != EINPROGRESS)
		return -errno;
	while (poll(&pfd, 1, -1) < 0) {
		if (errno != EINTR)
			return -errno;
	}
	if (getsockopt(sock, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		return -errno;
	return -err;
}

int client_conn_init(struct client_conn *c, const char *path)
{
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	struct epoll_event ev = {.events = EPOLLIN};
	size_t len = strlen(path);
	int rc;

	memset(c, 0, sizeof(*c));
	c->sock = c->evfd = c->epfd = -1;
	c->next_id = 1;
	c->ev_tail = &c->ev_head;
	proto_framer_init(&c->framer, PROTO_MAX_REPLY);

	if (len == 0)
		return error_set(GPB_E_CONNECT, "empty socket path");
	if (len >= sizeof(addr.sun_path))
		return error_set(GPB_E_CONNECT, "socket path is %zu bytes long, at most %zu fit",
		                 len, sizeof(addr.sun_path) - 1);
	memcpy(addr.sun_path, path, len);

	c->sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->sock < 0) {
		rc = error_set_errno(GPB_E_SYSTEM, errno, "socket");
		goto fail;
	}
	rc = client_conn_connect(c->sock, &addr);
	if (rc < 0) {
		int err = (rc == -EACCES || rc == -EPERM) ? GPB_E_PERMISSION : GPB_E_CONNECT;

		rc = error_set_errno(err, -rc, "cannot connect to %s", path);
		goto fail;
	}
	c->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	c->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (c->evfd < 0 || c->epfd < 0) {
		rc = error_set_errno(GPB_E_SYSTEM, errno, "event descriptors");
		goto fail;
	}
	ev.data.fd = c->sock;
	if (epoll_ctl(c->epfd, EPOLL_CTL_ADD, c->sock, &ev) < 0) {
		rc = error_set_errno(GPB_E_SYSTEM, errno, "epoll_ctl");
		goto fail;
	}
	ev.data.fd = c->evfd;
	if (epoll_ctl(c->epfd, EPOLL_CTL_ADD, c->evfd, &ev) < 0) {
		rc = error_set_errno(GPB_E_SYSTEM, errno, "epoll_ctl");
		goto fail;
	}
	return 0;
fail:
	client_conn_finish(c);
	return rc;
}

void client_conn_finish(struct client_conn *c)
{
	struct client_conn_event *ev = c->ev_head;

	if (c->sock >= 0)
		close(c->sock);
	if (c->evfd >= 0)
		close(c->evfd);
	if (c->epfd >= 0)
		close(c->epfd);
	c->sock = c->evfd = c->epfd = -1;
	client_conn_close_fds(c);
	free(c->fds);
	free(c->reclaimed);
	c->reclaimed = NULL;
	c->nreclaimed = c->reclaimed_cap = 0;
	free(c->recalls);
	c->recalls = NULL;
	c->nrecalls = c->recalls_cap = 0;
	c->fds = NULL;
	c->fd_cap = 0;
	proto_framer_finish(&c->framer);
	while (ev) {
		struct client_conn_event *next = ev->next;

		client_conn_event_free(ev);
		ev = next;
	}
	c->ev_head = NULL;
	c->ev_tail = &c->ev_head;
	c->ev_count = 0;
}

/* Maps a daemon error reply (-32xxx) to GPB_E_* and records
 * "code name: message" as the last error. */
static int client_conn_reply_error(int code, const char *message)
{
	int err;

	switch (code) {
	case PROTO_E_PARSE:
	case PROTO_E_INVALID_REQUEST:
	case PROTO_E_METHOD:
	case PROTO_E_PARAMS:
		err = GPB_E_INVALID;
		break;
	case PROTO_E_VERSION:
		err = GPB_E_VERSION;
		break;
	case PROTO_E_NO_MEMORY:
		err = GPB_E_OUT_OF_MEMORY;
		break;
	case PROTO_E_QUOTA:
		err = GPB_E_QUOTA;
		break;
	case PROTO_E_NOT_FOUND:
		err = GPB_E_NOT_FOUND;
		break;
	case PROTO_E_PERMISSION:
		err = GPB_E_PERMISSION;
		break;
	case PROTO_E_LIMIT:
		err = GPB_E_LIMIT;
		break;
	case PROTO_E_SHUTTING_DOWN:
		err = GPB_E_SHUTTING_DOWN;
		break;
	case PROTO_E_TIMEOUT:
		err = GPB_E_TIMEOUT;
		break;
	case PROTO_E_NOT_SUPPORTED:
		err = GPB_E_NOT_SUPPORTED;
		break;
	case PROTO_E_BACKEND:
		err = GPB_E_BACKEND;
		break;
	case PROTO_E_EXISTS:
		err = GPB_E_EXISTS;
		break;
	case PROTO_E_STATE:
	default:
		/* -32000 (bad_state), -32603 (internal_error) and codes this
		 * version does not know: nothing the caller can fix by
		 * changing an argument. */
		err = GPB_E_PROTOCOL;
		break;
	}
	return error_set(err, "%d %s: %s", code, proto_code_name(code), message ? message : "");
}

/* ---- received descriptors ---------------------------------------------- */

static int client_conn_fd_push(struct client_conn *c, int fd)
{
	if (c->fd_count == c->fd_cap) {
		size_t cap = c->fd_cap ? c->fd_cap * 2 : 8;
		int *fds;

		if (cap > CLIENT_CONN_MAX_FDS)
			return -E2BIG;
		fds = malloc(cap * sizeof(*fds));
		if (!fds)
			return -ENOMEM;
		/* Unwrap the ring into the new array, oldest first. */
		for (size_t i = 0; i < c->fd_count; i++)
			fds[i] = c->fds[(c->fd_head + i) % c->fd_cap];
		free(c->fds);
		c->fds = fds;
		c->fd_cap = cap;
		c->fd_head = 0;
	}
	c->fds[(c->fd_head + c->fd_count) % c->fd_cap] = fd;
	c->fd_count++;
	return 0;
}

static int client_conn_fd_pop(struct client_conn *c)
{
	int fd;

	if (!c->fd_count)
		return -1;
	fd = c->fds[c->fd_head];
	c->fd_head = (c->fd_head + 1) % c->fd_cap;
	c->fd_count--;
	return fd;
}

/* ---- events ---------------------------------------------------------------- */

void client_conn_event_free(struct client_conn_event *ev)
{
	if (!ev)
		return;
	free(ev->name);
	free(ev->data);
	free(ev);
}

char *client_conn_json_text(const cJSON *json)
{
	char *text = json ? cJSON_PrintUnformatted(json) : NULL;
	char *copy;

	if (!json)
		return strdup("{}");
	if (!text)
		return NULL;
	/* Strings leave the library as malloc'd memory whatever allocator
	 * hooks cJSON was given. */
	copy = strdup(text);
	cJSON_free(text);
	return copy;
}

static int client_conn_queue_event(struct client_conn *c, const struct proto_reply *r)
{
	struct client_conn_event *ev = calloc(1, sizeof(*ev));

	if (ev) {
		ev->name = strdup(r->event);
		ev->data = client_conn_json_text(r->data);
	}
	if (!ev || !ev->name || !ev->data) {
		client_conn_event_free(ev);
		/* Dropping it silently could hide a "shutdown". */
		return client_conn_fail(c, GPB_E_NOMEM, "out of memory queueing an event");
	}
	if (c->ev_count == CLIENT_CONN_MAX_EVENTS) {
		struct client_conn_event *old = c->ev_head;

		c->ev_head = old->next;
		if (!c->ev_head)
			c->ev_tail = &c->ev_head;
		client_conn_event_free(old);
		c->ev_count--;
	}
	*c->ev_tail = ev;
	c->ev_tail = &ev->next;
	if (c->ev_count++ == 0) {
		uint64_t one = 1;

		/* Cannot fail short of a counter overflow, which one write per
		 * empty-to-non-empty transition never reaches. */
		ssize_t unused = write(c->evfd, &one, sizeof(one));

		(void)unused;
	}
	return 0;
}

struct client_conn_event *client_conn_take_events(struct client_conn *c)
{
	struct client_conn_event *head = c->ev_head;
	uint64_t count;

	c->ev_head = NULL;
	c->ev_tail = &c->ev_head;
	c->ev_count = 0;
	/* Non-blocking: fails with EAGAIN when nothing was signalled. */
	ssize_t unused = read(c->evfd, &count, sizeof(count));

	(void)unused;
	return head;
}

/* ---- reading ------------------------------------------------------------- */

/*
 * One recvmsg(). Returns 1 when bytes were read, 0 when none were available
 * (@flags with MSG_DONTWAIT), or the error that killed the connection.
 */
static int client_conn_read(struct client_conn *c, int flags)
{
	char buf[CLIENT_CONN_READ_SIZE];
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * CLIENT_CONN_FDS_PER_READ)];
	} control;
	struct iovec iov = {.iov_base = buf, .iov_len = sizeof(buf)};
	struct msghdr msg = {
	    .msg_iov = &iov,
	    .msg_iovlen = 1,
	    .msg_control = control.buf,
	    .msg_controllen = sizeof(control.buf),
	};
	int push_rc = 0;
	ssize_t n;

	for (;;) {
		n = recvmsg(c->sock, &msg, flags | MSG_CMSG_CLOEXEC);
		if (n >= 0)
			break;
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return 0;
		if (errno == ECONNRESET)
			return client_conn_fail(c, GPB_E_DAEMON_GONE,
			                        "the daemon reset the connection");
		return client_conn_fail(c, GPB_E_SYSTEM, "reading from the daemon: %s",
		                        strerror(errno));
	}
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
		size_t nfds;

		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		nfds = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < nfds; i++) {
			int fd;

			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
			/* Queue every descriptor even after a failure, so that
			 * client_conn_fail() below closes them all. */
			if (push_rc == 0)
				push_rc = client_conn_fd_push(c, fd);
			if (push_rc < 0)
				close(fd);
		}
	}
	if (push_rc == -ENOMEM)
		return client_conn_fail(c, GPB_E_NOMEM, "out of memory receiving a descriptor");
	if (push_rc < 0)
		return client_conn_fail(c, GPB_E_PROTOCOL,
		                        "too many unclaimed descriptors from the daemon");
	if (msg.msg_flags & MSG_CTRUNC)
		return client_conn_fail(
		    c, GPB_E_PROTOCOL,
		    "descriptors from the daemon were dropped (descriptor limit?)");
	if (n == 0)
		return client_conn_fail(c, GPB_E_DAEMON_GONE, "the daemon closed the connection");
	if (proto_framer_push(&c->framer, buf, (size_t)n) < 0)
		return client_conn_fail(c, GPB_E_NOMEM, "out of memory reading from the daemon");
	return 1;
}

/* Drops this connection's mappings for an invalidate event; the daemon may
 * let the slabs go once it hears so (client_conn_send_acks). */
static void client_conn_invalidate(struct client_conn *c, uint64_t epoch)
{
	c->on_invalidate(c->invalidate_ctx);
	if (epoch > c->invalidate_epoch)
		c->invalidate_epoch = epoch;
}

/* Applies an invalidate read behind the previous reply (client_conn_exchange). */
static void client_conn_invalidate_deferred(struct client_conn *c)
{
	if (!c->invalidate_pending)
		return;
	c->invalidate_pending = false;
	client_conn_invalidate(c, c->invalidate_deferred);
	c->invalidate_deferred = 0;
}

/*
 * Handles one frame. Returns 1 when it is the reply to @want_id (moved into
 * *rep), 0 when it was an event, or the error that killed the connection.
 * With @want_id NULL no request is outstanding, so a reply is a protocol error.
 */
static int client_conn_handle_frame(struct client_conn *c, const char *frame, size_t len,
                                    const char *want_id, struct proto_reply *rep)
{
	struct proto_reply r;
	int rc = proto_reply_parse(frame, len, &r);

	if (rc == -ENOMEM)
		return client_conn_fail(c, GPB_E_NOMEM, "out of memory reading a reply");
	if (rc < 0)
		return client_conn_fail(c, GPB_E_PROTOCOL,
		                        "the daemon sent a frame that is not a reply");
	if (r.event) {
		/* Dropped here, not in gpb_dispatch(): a reply behind this event
		 * may put the connection back in a slab, and must find the
		 * bookkeeping already empty, as the daemon's is. */
		if (strcmp(r.event, PROTO_EV_INVALIDATE) == 0 && c->on_invalidate) {
			uint64_t epoch = 0;
			if (proto_get_u64(r.data, PROTO_F_EPOCH, 1, UINT64_MAX, &epoch) < 0)
				epoch = 0;
			if (c->defer_invalidate) {
				c->invalidate_pending = true;
				if (epoch > c->invalidate_deferred)
					c->invalidate_deferred = epoch;
			} else {
				client_conn_invalidate(c, epoch);
			}
		}
		if (strcmp(r.event, PROTO_EV_RECLAIM) == 0 && c->on_reclaim) {
			rc = client_conn_reclaim(c, r.data);
			if (rc < 0) {
				proto_reply_finish(&r);
				return rc;
			}
		}
		if (strcmp(r.event, PROTO_EV_RECALL) == 0) {
			rc = client_conn_recall(c, r.data);
			if (rc < 0) {
				proto_reply_finish(&r);
				return rc;
			}
		}
		rc = client_conn_queue_event(c, &r);
		proto_reply_finish(&r);
		return rc;
	}
	if (r.id && strncmp(r.id, CLIENT_CONN_FREE_ID, sizeof(CLIENT_CONN_FREE_ID) - 1) == 0) {
		/* A free that did not wait: only its failure is answered. */
		if (r.code && !c->free_error) {
			c->free_error = client_conn_reply_error(r.code, r.message);
			snprintf(c->free_message, sizeof(c->free_message),
			         "free (request %.16s): %s", r.id, error_message());
		}
		c->free_errors += r.code != 0;
		proto_reply_finish(&r);
		return 0;
	}
	if (r.id &&
	    (strncmp(r.id, CLIENT_CONN_ACK_ID, sizeof(CLIENT_CONN_ACK_ID) - 1) == 0 ||
	     strncmp(r.id, CLIENT_CONN_RELEASE_ID, sizeof(CLIENT_CONN_RELEASE_ID) - 1) == 0 ||
	     strncmp(r.id, CLIENT_CONN_RETURN_ID, sizeof(CLIENT_CONN_RETURN_ID) - 1) == 0 ||
	     strncmp(r.id, CLIENT_CONN_RECALL_DONE_ID, sizeof(CLIENT_CONN_RECALL_DONE_ID) - 1) ==
	         0)) {
		/* The answer to an invalidate_done, a release or a recall's
		 * answer: nothing waits for it (an older daemon's "method not
		 * found" included, and the "no such recall" of a recall that
		 * timed out before its answer came). */
		proto_reply_finish(&r);
		return 0;
	}
	if (!want_id) {
		/* An error with a null id outside an exchange is the daemon's
		 * parting word before it closes (too many clients, no hello
		 * in time): keep it as the reason. */
		if (!r.id && r.code) {
			c->parting = client_conn_reply_error(r.code, r.message);
			rc = client_conn_fail(c, c->parting, "%s", error_message());
		} else {
			rc = client_conn_fail(c, GPB_E_PROTOCOL,
			                      "the daemon sent a reply to no request");
		}
		proto_reply_finish(&r);
		return rc;
	}
	/* A null id is the daemon's answer to a request whose id it could not
	 * read; with one request in flight it can only be ours. */
	if (r.id && strcmp(r.id, want_id) != 0) {
		rc = client_conn_fail(c, GPB_E_PROTOCOL,
		                      "reply to request %.64s while waiting for %s", r.id, want_id);
		proto_reply_finish(&r);
		return rc;
	}
	*rep = r;
	return 1;
}

/* Queues the events among the complete frames already buffered. */
static int client_conn_process_buffered(struct client_conn *c)
{
	for (;;) {
		char *frame;
		size_t len;
		int rc = proto_framer_next(&c->framer, &frame, &len);

		if (rc == 0)
			return 0;
		if (rc < 0)
			return client_conn_fail(c, GPB_E_PROTOCOL,
			                        "frame from the daemon exceeds %u bytes",
			                        PROTO_MAX_REPLY);
		rc = client_conn_handle_frame(c, frame, len, NULL, NULL);
		if (rc < 0)
			return rc;
	}
}

void client_conn_settle(struct client_conn *c)
{
	client_conn_invalidate_deferred(c);
	client_conn_send_acks(c);
}

int client_conn_pump(struct client_conn *c)
{
	int rc;

	if (c->dead)
		return client_conn_dead_error(c);
	c->quiet_sends = 0;
	rc = client_conn_process_buffered(c);
	for (int i = 0; rc == 0 && i < CLIENT_CONN_PUMP_READS; i++) {
		rc = client_conn_read(c, MSG_DONTWAIT);
		if (rc <= 0)
			break;
		rc = client_conn_process_buffered(c);
	}
	client_conn_send_acks(c);
	return rc < 0 ? rc : 0;
}

/* ---- writing and exchanges ------------------------------------------------ */

int client_conn_write_frame(struct client_conn *c, const char *buf, size_t len)
{
	while (len) {
		/* MSG_NOSIGNAL: a daemon that went away must not kill the
		 * application with SIGPIPE. */
		ssize_t n = send(c->sock, buf, len, MSG_NOSIGNAL);

		if (n >= 0) {
			buf += n;
			len -= (size_t)n;
			continue;
		}
		if (errno == EINTR)
			continue;
		if (errno == EPIPE || errno == ECONNRESET) {
			/* What the daemon said before closing (a "shutdown"
			 * event) is still readable: keep it for dispatch. */
			if (client_conn_pump(c) == 0)
				client_conn_fail(c, GPB_E_DAEMON_GONE,
				                 "the daemon closed the connection");
			if (c->parting)
				return error_set(c->parting, "%s", c->dead_reason);
			return client_conn_dead_error(c);
		}
		return client_conn_fail(c, GPB_E_SYSTEM, "writing to the daemon: %s",
		                        strerror(errno));
	}
	return 0;
}

/* A request id in decimal, without snprintf: that costs about 700
 * instructions, and runs twice per alloc+free. @buf holds 21 bytes. */
void client_conn_format_id(char *buf, uint64_t v)
{
	char tmp[20], *p = tmp + sizeof(tmp);
	size_t n;

	do {
		*--p = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	n = (size_t)(tmp + sizeof(tmp) - p);
	memcpy(buf, p, n);
	buf[n] = '\0';
}

/* Tells the daemon that the slabs of the invalidate events read so far are
 * closed, under an id no exchange uses: its reply is dropped as it comes. A
 * failure kills the connection, which lets the slabs go as well. */
void client_conn_send_acks(struct client_conn *c)
{
	char id[sizeof(CLIENT_CONN_ACK_ID) + 20];
	cJSON *params;
	size_t len;
	char *frame;

	client_conn_send_answers(c);
	if (c->dead || c->invalidate_acked >= c->invalidate_epoch)
		return;
	/* First: client_conn_write_frame() may pump, and so come back here. */
	c->invalidate_acked = c->invalidate_epoch;
	memcpy(id, CLIENT_CONN_ACK_ID, sizeof(CLIENT_CONN_ACK_ID) - 1);
	client_conn_format_id(id + sizeof(CLIENT_CONN_ACK_ID) - 1, c->invalidate_acked);
	params = cJSON_CreateObject();
	if (!params || proto_add_u64(params, PROTO_F_EPOCH, c->invalidate_acked) < 0) {
		cJSON_Delete(params);
		client_conn_fail(c, GPB_E_NOMEM, "out of memory answering an invalidate event");
		return;
	}
	frame = proto_encode_request(id, PROTO_M_INVALIDATE_DONE, params, &len);
	if (!frame) {
		client_conn_fail(c, GPB_E_NOMEM, "out of memory answering an invalidate event");
		return;
	}
	client_conn_write_frame(c, frame, len);
	free(frame);
}

/*
 * Sends @frame (@len bytes, the request @id) and reads until its reply.
 * With @fast, a success reply that proto_grant_parse() takes fills
 * it and 1 is returned (no tree built); any other reply is decoded the
 * general way into *rep (0). Errors as client_conn_call().
 */
int client_conn_exchange_frame(struct client_conn *c, const char *frame, size_t len, const char *id,
                               struct proto_reply *rep, int *fd, struct proto_grant *fast)
{
	struct proto_reply r;
	bool has_fd = false, got_fast = false;
	int rc;

	rc = client_conn_write_frame(c, frame, len);
	if (rc < 0)
		return rc;

	for (;;) {
		char *f;
		size_t flen;

		rc = proto_framer_next(&c->framer, &f, &flen);
		if (rc < 0)
			return client_conn_fail(c, GPB_E_PROTOCOL,
			                        "frame from the daemon exceeds %u bytes",
			                        PROTO_MAX_REPLY);
		if (rc == 1) {
			/* A grant in its canonical form carries no handle, so
			 * no descriptor either. */
			if (fast && proto_grant_parse(f, flen, id, fast) == 0) {
				got_fast = true;
				break;
			}
			rc = client_conn_handle_frame(c, f, flen, id, &r);
			if (rc < 0)
				return rc;
			if (rc == 1)
				break;
			/* Answered at once: the reply waited for may be an
			 * allocation waiting for this very slab, or held by
			 * the daemon until this recall is answered. */
			c->in_exchange = true;
			client_conn_send_answers(c);
			c->in_exchange = false;
			continue;
		}
		rc = client_conn_read(c, 0);
		if (rc < 0)
			return rc;
	}

	if (!got_fast && r.result) {
		rc = proto_get_bool(r.result, PROTO_F_FD, &has_fd);
		if (rc < 0 && rc != -ENOENT) {
			proto_reply_finish(&r);
			return client_conn_fail(c, GPB_E_PROTOCOL,
			                        "'fd' in a reply is not a boolean");
		}
	}
	if (has_fd) {
		int got = client_conn_fd_pop(c);

		if (got < 0) {
			proto_reply_finish(&r);
			return client_conn_fail(
			    c, GPB_E_PROTOCOL,
			    "a reply announced a descriptor that did not arrive");
		}
		if (fd)
			*fd = got;
		else
			close(got);
	}
	/*
	 * Frames behind the reply in the same read are events: queue them now,
	 * or poll() on the event fd would not report them (their bytes have
	 * already left the socket). A failure here kills the connection for
	 * the next call but does not undo this reply. An invalidate among
	 * them came after this reply: the caller applies the reply first.
	 */
	c->defer_invalidate = true;
	client_conn_process_buffered(c);
	c->defer_invalidate = false;

	if (got_fast)
		return 1;
	if (r.code) {
		rc = client_conn_reply_error(r.code, r.message);
		proto_reply_finish(&r);
		if (fd && *fd >= 0) {
			close(*fd);
			*fd = -1;
		}
		return rc;
	}
	*rep = r;
	return 0;
}

/* What every exchange does first: the connection settled and alive. */
int client_conn_exchange_start(struct client_conn *c, struct proto_reply *rep, int *fd)
{
	memset(rep, 0, sizeof(*rep));
	if (fd)
		*fd = -1;
	client_conn_invalidate_deferred(c);
	if (c->dead)
		return client_conn_dead_error(c);
	c->quiet_sends = 0;
	return 0;
}

static int client_conn_exchange(struct client_conn *c, const char *method, cJSON *params,
                                struct proto_reply *rep, int *fd)
{
	char id[24];
	size_t len;
	char *frame;
	int rc = client_conn_exchange_start(c, rep, fd);

	if (rc < 0) {
		cJSON_Delete(params);
		return rc;
	}
	client_conn_format_id(id, c->next_id++);
	frame = proto_encode_request(id, method, params, &len);
	if (!frame)
		return error_set(GPB_E_NOMEM, "cannot encode a '%s' request", method);
	rc = client_conn_exchange_frame(c, frame, len, id, rep, fd, NULL);
	free(frame);
	return rc;
}

int client_conn_call(struct client_conn *c, const char *method, cJSON *params,
                     struct proto_reply *rep, int *fd)
{
	int rc = client_conn_exchange(c, method, params, rep, fd);

	/* An invalidate read during the exchange is answered now; a failure
	 * there does not undo the reply. The caller has yet to apply it: a
	 * recall's returns let go of nothing here before it has. */
	c->in_exchange = true;
	client_conn_send_acks(c);
	c->in_exchange = false;
	return rc;
}
