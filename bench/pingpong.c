/*
 * pingpong.c - the bare baseline: a Unix-socket ping-pong with the sizes of
 * the real frames, and a server shaped like the daemon (one thread, one
 * epoll loop, one write per reply) that does nothing but answer.
 */
#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proto.h"

static int unix_connect(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0 || strlen(path) >= sizeof(sa.sun_path))
		bench_die("socket: %s", strerror(errno));
	memcpy(sa.sun_path, path, strlen(path) + 1);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		bench_die("connect %s: %s", path, strerror(errno));
	return fd;
}

/* ---- frame sizes ---------------------------------------------------------- */

/* Reads one line (closing any descriptor that rides along); returns its
 * length with the newline. */
static size_t raw_read_line(int fd, char *buf, size_t cap)
{
	size_t have = 0;

	for (;;) {
		char *nl = have ? memchr(buf, '\n', have) : NULL;
		union {
			struct cmsghdr align;
			char b[CMSG_SPACE(sizeof(int) * 4)];
		} ctl;
		struct iovec iov = {.iov_base = buf + have, .iov_len = 1};
		struct msghdr msg = {.msg_iov = &iov,
		                     .msg_iovlen = 1,
		                     .msg_control = ctl.b,
		                     .msg_controllen = sizeof(ctl.b)};
		ssize_t n;

		if (nl)
			return (size_t)(nl - buf) + 1;
		if (have + 1 >= cap)
			bench_die("reply longer than %zu bytes", cap);
		/* One byte at a time: the reply must not be over-read, and
		 * this runs a handful of times per benchmark. */
		n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
		if (n <= 0)
			bench_die("daemon closed the connection while measuring frames");
		for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
			if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
				int got;

				memcpy(&got, CMSG_DATA(cm), sizeof(got));
				close(got);
			}
		}
		have += (size_t)n;
	}
}

/* Sends a request built exactly as libgpubroker builds it; returns the
 * request's size and stores the reply's. */
static size_t raw_call(int fd, const char *id, const char *method, cJSON *params, char *reply,
                       size_t cap, size_t *reply_len)
{
	size_t len;
	char *frame = proto_encode_request(id, method, params, &len);

	if (!frame || bench_write_all(fd, frame, len) < 0)
		bench_die("cannot send a %s request", method);
	free(frame);
	*reply_len = raw_read_line(fd, reply, cap);
	reply[*reply_len - 1] = '\0';
	if (!strstr(reply, "\"result\""))
		bench_die("%s failed: %s", method, reply);
	return len;
}

static const char *json_field(const char *reply, const char *key, char *out, size_t cap)
{
	char pat[64];
	const char *p;
	size_t n = 0;

	snprintf(pat, sizeof(pat), "\"%s\":\"", key);
	p = strstr(reply, pat);
	if (!p)
		bench_die("no '%s' in %s", key, reply);
	p += strlen(pat);
	while (p[n] && p[n] != '"' && n + 1 < cap) {
		out[n] = p[n];
		n++;
	}
	out[n] = '\0';
	return out;
}

void bench_measure_sizes(const char *socket, struct bench_sizes *out)
{
	char reply[8192], inst[32], id[32];
	int fd = unix_connect(socket);
	size_t rlen;
	cJSON *p;

	p = cJSON_CreateObject();
	cJSON_AddItemToObject(p, "versions", cJSON_CreateIntArray((const int[]){1}, 1));
	cJSON_AddStringToObject(p, "client", "gpb-bench");
	raw_call(fd, "1", "hello", p, reply, sizeof(reply), &rlen);
	p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "name", "sizes");
	cJSON_AddNumberToObject(p, "device", 0);
	raw_call(fd, "2", "register", p, reply, sizeof(reply), &rlen);
	json_field(reply, "instance", inst, sizeof(inst));
	/* The first allocation hands the slab over (handle and descriptor);
	 * the measured one then comes back in the steady-state shape. */
	p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "instance", inst);
	proto_add_u64(p, "size", BENCH_ALLOC_SIZE);
	raw_call(fd, "3", "alloc", p, reply, sizeof(reply), &rlen);
	p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "instance", inst);
	proto_add_u64(p, "size", BENCH_ALLOC_SIZE);
	/* Ids of 4 digits: what a client sends a thousand requests in. */
	out->alloc_req = raw_call(fd, "1000", "alloc", p, reply, sizeof(reply), &out->alloc_rep);
	if (strstr(reply, "\"handle\""))
		bench_die("steady-state alloc reply carries a handle: %s", reply);
	json_field(reply, "id", id, sizeof(id));
	/* The reply's own "id" comes first: skip it to reach the result's. */
	json_field(strstr(reply, "\"result\""), "id", id, sizeof(id));
	p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "id", id);
	out->free_req = raw_call(fd, "1001", "free", p, reply, sizeof(reply), &out->free_rep);
	close(fd);
	if (out->alloc_req == out->free_req)
		bench_die("alloc and free requests have the same size");
}

/* ---- the echo server ------------------------------------------------------ */

struct echo_conn {
	int fd;
	size_t have;
	char buf[8192];
};

/* A line of exactly @len bytes (newline included) shaped like a reply. */
static char *filler_line(size_t len, char c)
{
	char *s = bench_xmalloc(len + 1);

	memset(s, c, len);
	if (len >= 4) {
		s[0] = '{';
		s[len - 2] = '}';
	}
	s[len - 1] = '\n';
	s[len] = '\0';
	return s;
}

static void __attribute__((noreturn)) echo_serve(int lfd, const struct bench_sizes *sz)
{
	char *alloc_rep = filler_line(sz->alloc_rep, 'a');
	char *free_rep = filler_line(sz->free_rep, 'f');
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL}, evs[64];
	int ep = epoll_create1(EPOLL_CLOEXEC);

	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev) < 0)
		_exit(3);
	for (;;) {
		int n = epoll_wait(ep, evs, 64, -1);

		for (int i = 0; i < n; i++) {
			struct echo_conn *c = evs[i].data.ptr;
			ssize_t r;
			size_t start = 0;

			if (!c) {
				int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

				if (fd < 0)
					continue;
				c = bench_xcalloc(1, sizeof(*c));
				c->fd = fd;
				ev.data.ptr = c;
				epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
				continue;
			}
			r = read(c->fd, c->buf + c->have, sizeof(c->buf) - c->have);
			if (r <= 0) {
				if (r < 0 && errno == EAGAIN)
					continue;
				epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
				close(c->fd);
				free(c);
				continue;
			}
			c->have += (size_t)r;
			for (;;) {
				char *nl = memchr(c->buf + start, '\n', c->have - start);
				size_t len;
				const char *rep;

				if (!nl)
					break;
				len = (size_t)(nl - (c->buf + start)) + 1;
				rep = len == sz->alloc_req ? alloc_rep : free_rep;
				/* Clients wait for each reply: the socket
				 * buffer always has room for one. */
				if (bench_write_all(c->fd, rep, strlen(rep)) < 0)
					break;
				start += len;
			}
			memmove(c->buf, c->buf + start, c->have - start);
			c->have -= start;
		}
	}
}

void bench_echo_start(struct bench_echo *e, const char *dir, const struct bench_sizes *sz)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int lfd;

	snprintf(e->socket, sizeof(e->socket), "%s/echo.sock", dir);
	memcpy(sa.sun_path, e->socket, strlen(e->socket) + 1);
	lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 128) < 0)
		bench_die("echo server on %s: %s", e->socket, strerror(errno));
	e->pid = fork();
	if (e->pid < 0)
		bench_die("fork: %s", strerror(errno));
	if (e->pid == 0)
		echo_serve(lfd, sz);
	close(lfd);
}

void bench_echo_stop(struct bench_echo *e)
{
	if (e->pid > 0) {
		kill(e->pid, SIGTERM);
		waitpid(e->pid, NULL, 0);
		e->pid = 0;
	}
	unlink(e->socket);
}

/* ---- the bare client ------------------------------------------------------ */

void bench_bare_open(struct bench_bare *b, const char *socket, const struct bench_sizes *sz)
{
	memset(b, 0, sizeof(*b));
	b->fd = unix_connect(socket);
	b->sz = sz;
	b->req_alloc = filler_line(sz->alloc_req, 'A');
	b->req_free = filler_line(sz->free_req, 'F');
}

void bench_bare_close(struct bench_bare *b)
{
	close(b->fd);
	free(b->req_alloc);
	free(b->req_free);
	b->fd = -1;
}

static void bare_round_trip(struct bench_bare *b, const char *req, size_t len)
{
	if (bench_write_all(b->fd, req, len) < 0)
		bench_die("echo server: write: %s", strerror(errno));
	for (;;) {
		char *nl = b->have ? memchr(b->buf, '\n', b->have) : NULL;
		ssize_t n;

		if (nl) {
			size_t used = (size_t)(nl - b->buf) + 1;

			memmove(b->buf, b->buf + used, b->have - used);
			b->have -= used;
			return;
		}
		n = read(b->fd, b->buf + b->have, sizeof(b->buf) - b->have);
		if (n <= 0) {
			if (n < 0 && errno == EINTR)
				continue;
			bench_die("echo server closed the connection");
		}
		b->have += (size_t)n;
	}
}

void bench_bare_pair(struct bench_bare *b)
{
	bare_round_trip(b, b->req_alloc, b->sz->alloc_req);
	bare_round_trip(b, b->req_free, b->sz->free_req);
}
