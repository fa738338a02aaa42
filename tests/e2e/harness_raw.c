/*
 * harness_raw.c - end-to-end test helpers that speak the protocol on a bare
 * socket, without the library: connect, send, read a line, call, hello.
 * Apart from harness.c to keep each file short.
 */
#include "harness.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

int th_connect(const char *path)
{
	struct sockaddr_un sa;
	assert_true(th_sockaddr(path, &sa));
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

int th_send(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len > 0) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Bytes read past the last line, per descriptor (tests use few). */
#define TH_MAX_FD 1024
static struct {
	char *buf;
	size_t len;
} th_pending[TH_MAX_FD];

int th_read_line(int fd, char *buf, size_t cap, int timeout_ms)
{
	assert_true(fd >= 0 && fd < TH_MAX_FD);
	for (;;) {
		char *p = th_pending[fd].buf;
		char *nl = p ? memchr(p, '\n', th_pending[fd].len) : NULL;
		if (nl) {
			size_t n = (size_t)(nl - p);
			size_t copy = n < cap - 1 ? n : cap - 1;
			memcpy(buf, p, copy);
			buf[copy] = '\0';
			th_pending[fd].len -= n + 1;
			memmove(p, nl + 1, th_pending[fd].len);
			return (int)copy;
		}
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		int rc = poll(&pfd, 1, timeout_ms);
		if (rc == 0)
			return -ETIMEDOUT;
		if (rc < 0)
			return -errno;
		char chunk[65536];
		ssize_t got = recv(fd, chunk, sizeof(chunk), 0);
		if (got < 0)
			return errno == ECONNRESET ? 0 : -errno;
		if (got == 0)
			return 0;
		th_pending[fd].buf = realloc(th_pending[fd].buf, th_pending[fd].len + (size_t)got);
		assert_non_null(th_pending[fd].buf);
		memcpy(th_pending[fd].buf + th_pending[fd].len, chunk, (size_t)got);
		th_pending[fd].len += (size_t)got;
	}
}

bool th_drained_to_eof(int fd, int timeout_ms)
{
	char buf[65536];
	long long deadline = th_now_ms() + timeout_ms;
	for (;;) {
		int left = (int)(deadline - th_now_ms());
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		if (left <= 0 || poll(&pfd, 1, left) <= 0)
			return false;
		ssize_t n = recv(fd, buf, sizeof(buf), 0);
		if (n == 0 || (n < 0 && errno == ECONNRESET))
			return true;
		if (n < 0 && errno != EINTR)
			return false;
	}
}

void th_close(int fd)
{
	if (fd >= 0 && fd < TH_MAX_FD) {
		free(th_pending[fd].buf);
		th_pending[fd].buf = NULL;
		th_pending[fd].len = 0;
	}
	close(fd);
}

long th_stall(const int *fds, int n, int idle_ms)
{
	static const char req[] = "{\"id\":\"s\",\"method\":\"status\"}\n";
	char batch[64 * (sizeof(req) - 1)];
	for (size_t i = 0; i < 64; i++)
		memcpy(batch + i * (sizeof(req) - 1), req, sizeof(req) - 1);
	long sent = 0;
	long long idle_since = th_now_ms(), deadline = idle_since + 60000;
	while (th_now_ms() - idle_since < idle_ms) {
		assert_true(th_now_ms() < deadline);
		bool progress = false;
		for (int i = 0; i < n; i++) {
			ssize_t k = send(fds[i], batch, sizeof(batch), MSG_DONTWAIT | MSG_NOSIGNAL);
			if (k > 0) {
				sent += k;
				progress = true;
				continue;
			}
			/* Full, or closed by the daemon (a client it dropped). */
			assert_true(k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK ||
			                      errno == EPIPE || errno == ECONNRESET));
		}
		if (progress)
			idle_since = th_now_ms();
		else
			th_sleep_ms(10);
	}
	return sent / (long)(sizeof(req) - 1);
}

int th_call(int fd, const char *line, char *reply, size_t cap)
{
	size_t n = strlen(line);
	char *msg = malloc(n + 1);
	assert_non_null(msg);
	memcpy(msg, line, n);
	msg[n] = '\n';
	int rc = th_send(fd, msg, n + 1);
	free(msg);
	if (rc < 0)
		return rc;
	return th_read_line(fd, reply, cap, 5000);
}

void th_hello(int fd)
{
	char reply[4096];
	assert_true(th_call(fd, "{\"id\":\"h\",\"method\":\"hello\",\"params\":{\"versions\":[1]}}",
	                    reply, sizeof(reply)) > 0);
	assert_non_null(strstr(reply, "\"result\""));
}

int th_error_code(const char *reply)
{
	const char *p = strstr(reply, "\"code\":");
	return p ? atoi(p + 7) : 0;
}

void th_raw_register(int fd, const char *name, char *inst)
{
	char req[256], reply[4096];
	snprintf(req, sizeof(req),
	         "{\"id\":\"r\",\"method\":\"register\",\"params\":{\"name\":\"%s\"}}", name);
	assert_true(th_call(fd, req, reply, sizeof(reply)) > 0);
	const char *p = strstr(reply, "\"instance\":\"");
	assert_non_null(p);
	memcpy(inst, p + 12, 16);
	inst[16] = '\0';
}

void th_expect_reply(int fd, const char *frame, int code, const char *field)
{
	char reply[8192];
	int n = th_call(fd, frame, reply, sizeof(reply));
	if (n <= 0)
		fail_msg("%s: no reply (%d)", frame, n);
	if (code == 0 ? !strstr(reply, "\"result\"") : th_error_code(reply) != code)
		fail_msg("%s: expected %d, got %s", frame, code, reply);
	if (field) {
		char want[64];
		snprintf(want, sizeof(want), "\"field\":\"%s\"", field);
		if (!strstr(reply, want))
			fail_msg("%s: expected field %s, got %s", frame, field, reply);
	}
}

int th_connect_hello(const char *path, char *refused, size_t size)
{
	struct sockaddr_un sa;
	if (!th_sockaddr(path, &sa))
		return -2;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		if (fd >= 0)
			close(fd);
		return -2;
	}
	/* A refused connection may be closed before the hello is sent (its
	 * send then fails): what it was told is still there to read. */
	static const char hello[] =
	    "{\"id\":\"h\",\"method\":\"hello\",\"params\":{\"versions\":[1]}}\n";
	th_send(fd, hello, sizeof(hello) - 1);
	char reply[4096];
	int n = th_read_line(fd, reply, sizeof(reply), 5000);
	if (n > 0 && strstr(reply, "\"result\""))
		return fd;
	th_close(fd);
	if (n <= 0)
		return -2;
	size_t len = strlen(reply) < size ? strlen(reply) : size - 1;
	memcpy(refused, reply, len);
	refused[len] = '\0';
	return -1;
}
