/*
 * core-helpers.c - the far end of a core connection (see core-helpers.h).
 */
#include "core-helpers.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "proto.h"

void far_open(struct far_end *f)
{
	struct sockaddr_un addr = {.sun_family = AF_UNIX};

	memset(f, 0, sizeof(*f));
	snprintf(f->dir, sizeof(f->dir), "/tmp/gpb-core-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(f->path, sizeof(f->path), "%s/sock", f->dir);
	snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", f->path);
	f->listener = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(f->listener >= 0);
	assert_int_equal(bind(f->listener, (struct sockaddr *)&addr, sizeof(addr)), 0);
	assert_int_equal(listen(f->listener, 1), 0);
	assert_int_equal(client_conn_init(&f->conn, f->path), 0);
	f->fd = accept4(f->listener, NULL, NULL, SOCK_CLOEXEC);
	assert_true(f->fd >= 0);
}

void far_close(struct far_end *f)
{
	client_conn_finish(&f->conn);
	close(f->fd);
	close(f->listener);
	unlink(f->path);
	rmdir(f->dir);
}

void far_write(struct far_end *f, const void *buf, size_t len, int pass)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int))];
	} control;
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};

	if (pass >= 0) {
		memset(&control, 0, sizeof(control));
		msg.msg_control = control.buf;
		msg.msg_controllen = sizeof(control.buf);
		struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &pass, sizeof(int));
	}
	ssize_t n = sendmsg(f->fd, &msg, MSG_NOSIGNAL);
	assert_int_equal(n, (ssize_t)len);
}

void far_write_text(struct far_end *f, const char *text)
{
	far_write(f, text, strlen(text), -1);
}

static cJSON *parse_object(const char *json)
{
	cJSON *o = json ? cJSON_Parse(json) : cJSON_CreateObject();

	assert_non_null(o);
	return o;
}

char *far_result(const char *id, const char *json, size_t *len)
{
	char *frame = proto_encode_result(id, parse_object(json), len);

	assert_non_null(frame);
	return frame;
}

char *far_error(const char *id, int code, const char *message, size_t *len)
{
	char *frame = proto_encode_error(id, code, message, NULL, len);

	assert_non_null(frame);
	return frame;
}

char *far_event(const char *name, const char *json, size_t *len)
{
	char *frame = proto_encode_event(name, parse_object(json), len);

	assert_non_null(frame);
	return frame;
}

void far_send_result(struct far_end *f, const char *id, const char *json)
{
	size_t len;
	char *frame = far_result(id, json, &len);

	far_write(f, frame, len, -1);
	free(frame);
}

void far_send_event(struct far_end *f, const char *name, const char *json)
{
	size_t len;
	char *frame = far_event(name, json, &len);

	far_write(f, frame, len, -1);
	free(frame);
}

cJSON *far_read_request(struct far_end *f)
{
	char line[4096];
	size_t n = 0;

	/* A byte at a time: what follows the newline stays for the next. */
	for (;;) {
		assert_true(n + 1 < sizeof(line));
		assert_int_equal(read(f->fd, line + n, 1), 1);
		if (line[n] == '\n')
			break;
		n++;
	}
	line[n] = '\0';
	cJSON *root = cJSON_Parse(line);
	if (!root || !cJSON_IsString(cJSON_GetObjectItem(root, "method")) ||
	    !cJSON_IsString(cJSON_GetObjectItem(root, "id")))
		fail_msg("not a request: %s", line);
	return root;
}

const char *far_expect(struct far_end *f, const char *method)
{
	static char id[64];
	cJSON *root = far_read_request(f);
	const char *m = cJSON_GetStringValue(cJSON_GetObjectItem(root, "method"));

	if (strcmp(m, method) != 0)
		fail_msg("want a '%s' request, got '%s'", method, m);
	snprintf(id, sizeof(id), "%s", cJSON_GetStringValue(cJSON_GetObjectItem(root, "id")));
	cJSON_Delete(root);
	return id;
}

bool fd_readable(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};

	return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

bool far_has_input(struct far_end *f)
{
	return fd_readable(f->fd);
}
