/*
 * test-invalidate-behind-reply.c - libgpubroker against a scripted daemon: frame orders
 * the real daemon produces only by chance, written here on purpose.
 *
 * An `invalidate` event right behind an alloc reply, in the same read: the
 * library must first hand the caller the allocation (the reply put it in a
 * slab the event then releases), apply the event at the connection's next
 * use (the mapping closed), and only then answer `invalidate_done` with
 * the event's epoch, under an id of its own whose reply it drops.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "gpubroker.h"

#define SLAB (2u << 20)

struct script {
	int listener;
	char path[108];
	char verdict[256]; /* empty: every frame was as expected */
};

/* Reads one line of at most len - 1 bytes (the newline dropped). */
static int read_line(int fd, char *buf, size_t len)
{
	size_t n = 0;
	while (n + 1 < len) {
		ssize_t r = read(fd, buf + n, 1);
		if (r <= 0)
			return -1;
		if (buf[n] == '\n')
			break;
		n++;
	}
	buf[n] = '\0';
	return 0;
}

/* The request's id and method, or -1 (and a verdict). */
static int parse(struct script *s, const char *line, char *id, size_t idlen, const char *want)
{
	cJSON *root = cJSON_Parse(line);
	const char *m = cJSON_GetStringValue(cJSON_GetObjectItem(root, "method"));
	const char *i = cJSON_GetStringValue(cJSON_GetObjectItem(root, "id"));
	int rc = 0;
	if (!m || !i || strcmp(m, want) != 0) {
		snprintf(s->verdict, sizeof(s->verdict), "want %s, got %.200s", want, line);
		rc = -1;
	} else {
		snprintf(id, idlen, "%s", i);
	}
	cJSON_Delete(root);
	return rc;
}

static void send_text(int fd, const char *text)
{
	size_t len = strlen(text);
	assert_int_equal(write(fd, text, len), (ssize_t)len);
}

/* Sends frames in one write, with a descriptor. */
static void send_with_fd(int fd, const char *text, int pass)
{
	struct iovec iov = {.iov_base = (void *)text, .iov_len = strlen(text)};
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	memset(&ctl, 0, sizeof(ctl));
	struct msghdr msg = {.msg_iov = &iov,
	                     .msg_iovlen = 1,
	                     .msg_control = ctl.buf,
	                     .msg_controllen = sizeof(ctl.buf)};
	struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &pass, sizeof(int));
	assert_int_equal(sendmsg(fd, &msg, 0), (ssize_t)iov.iov_len);
}

static void *scripted_daemon(void *arg)
{
	struct script *s = arg;
	char line[4096], id[80], out[2048];
	int fd = accept(s->listener, NULL, NULL);
	if (fd < 0 || read_line(fd, line, sizeof(line)) < 0 ||
	    parse(s, line, id, sizeof(id), "hello") < 0)
		goto out;
	snprintf(out, sizeof(out),
	         "{\"id\":\"%s\",\"result\":{\"version\":1,\"server\":\"scripted\","
	         "\"backend\":\"sim\",\"session\":\"0000000000000007\",\"uid\":0,"
	         "\"limits\":{}}}\n",
	         id);
	send_text(fd, out);
	/* alloc: the reply and, behind it in the same write, the event. */
	if (read_line(fd, line, sizeof(line)) < 0 || parse(s, line, id, sizeof(id), "alloc") < 0)
		goto out;
	int mem = memfd_create("scripted-slab", MFD_CLOEXEC);
	assert_true(mem >= 0 && ftruncate(mem, SLAB) == 0);
	char handle[129];
	memset(handle, '0', 128);
	handle[128] = '\0';
	snprintf(out, sizeof(out),
	         "{\"id\":\"%s\",\"result\":{\"id\":\"00000000000000a1\",\"device\":0,"
	         "\"slab\":\"0000000000000001\",\"slab_size\":\"%u\",\"offset\":\"0\","
	         "\"size\":\"4096\",\"handle\":\"%s\",\"fd\":true}}\n"
	         "{\"event\":\"invalidate\",\"data\":{\"reason\":\"invalidate_all\","
	         "\"epoch\":\"5\"}}\n",
	         id, SLAB, handle);
	send_with_fd(fd, out, mem);
	close(mem);
	/* The caller's next call first answers the event (the library's
	 * reply to that is dropped), then sends its request. */
	if (read_line(fd, line, sizeof(line)) < 0 ||
	    parse(s, line, id, sizeof(id), "invalidate_done") < 0)
		goto out;
	if (strncmp(id, "inv-", 4) != 0 || !strstr(line, "\"epoch\":\"5\"")) {
		snprintf(s->verdict, sizeof(s->verdict), "bad invalidate_done: %.200s", line);
		goto out;
	}
	snprintf(out, sizeof(out), "{\"id\":\"%s\",\"result\":{\"slabs\":\"1\"}}\n", id);
	send_text(fd, out);
	if (read_line(fd, line, sizeof(line)) < 0 || parse(s, line, id, sizeof(id), "status") < 0)
		goto out;
	snprintf(out, sizeof(out), "{\"id\":\"%s\",\"result\":{}}\n", id);
	send_text(fd, out);
	/* One more exchange: the dropped reply must not be taken for it. */
	if (read_line(fd, line, sizeof(line)) < 0 || parse(s, line, id, sizeof(id), "status") < 0)
		goto out;
	snprintf(out, sizeof(out), "{\"id\":\"%s\",\"result\":{\"backend\":\"sim\"}}\n", id);
	send_text(fd, out);
	/* Then the library closes the connection: EOF. */
	if (read_line(fd, line, sizeof(line)) == 0)
		snprintf(s->verdict, sizeof(s->verdict), "unexpected frame: %.200s", line);
out:
	if (fd >= 0)
		close(fd);
	return NULL;
}

static void test_invalidate_behind_reply(void **state)
{
	(void)state;
	struct script s = {.verdict = ""};
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	char dir[] = "/tmp/gpb-libproto-XXXXXX";
	assert_non_null(mkdtemp(dir));
	snprintf(s.path, sizeof(s.path), "%s/sock", dir);
	memcpy(sa.sun_path, s.path, strlen(s.path) + 1);
	s.listener = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(s.listener >= 0);
	assert_int_equal(bind(s.listener, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(s.listener, 1), 0);
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, scripted_daemon, &s), 0);

	gpb_client *c = NULL;
	struct gpb_allocation a;
	struct gpb_mapping_stats ms;
	char *json = NULL;
	assert_int_equal(gpb_connect(s.path, "libproto", &c), 0);
	/* The allocation is the caller's, mapped, though an invalidate for
	 * it has already been read. */
	assert_int_equal(gpb_alloc(c, 1, 4096, 0, &a), 0);
	assert_int_equal(a.size, 4096);
	memset(a.ptr, 0x5a, a.size);
	assert_int_equal(gpb_mapping_stats(&ms), 0);
	assert_int_equal(ms.open_now, 1);
	/* The next use applies the event: nothing is mapped any more. */
	assert_int_equal(gpb_request(c, "status", NULL, &json), 0);
	gpb_string_free(json);
	assert_int_equal(gpb_mapping_stats(&ms), 0);
	assert_int_equal(ms.open_now, 0);
	assert_int_equal(gpb_request(c, "status", NULL, &json), 0);
	assert_non_null(strstr(json, "sim"));
	gpb_string_free(json);
	gpb_disconnect(c);

	pthread_join(t, NULL);
	close(s.listener);
	unlink(s.path);
	rmdir(dir);
	if (s.verdict[0])
		fail_msg("scripted daemon: %s", s.verdict);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_invalidate_behind_reply),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
