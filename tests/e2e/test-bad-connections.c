/*
 * test-bad-connections.c - bad clients against the real daemon: connection, framing,
 * handshake and process faults (bad frames, oversized and split frames, the
 * hello timeout, half-close, clients gone or killed before their replies,
 * descriptors passed in, memory flat over many cycles, one thread).
 * test-bad-fields.c has the bad field values. Each case checks its defined
 * outcome, that the daemon still serves, that a second client connected
 * throughout is unaffected, and that nothing leaked: descriptors back to the
 * baseline, used bytes back to the bystander's, the daemon's selfcheck
 * passing (th_assert_unaffected, th_assert_no_leak in harness.c), and (under
 * ASan) LeakSanitizer silent when the daemon exits. docs/reliability.md maps
 * the design's 31 bad inputs to the tests.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static struct th_bystander by;

static int setup(void **state)
{
	static const char *const extra[] = {"--hello-timeout", "300", NULL};
	/* Under valgrind a first hello may take longer than that. */
	static const char *const slow[] = {"--hello-timeout", "3000", NULL};
	th_bystander_start(&by, th_valgrind() ? slow : extra);
	return 0;
}

static int teardown(void **state)
{
	assert_int_equal(th_bystander_stop(&by), 0);
	return 0;
}

/* Bad frames on one connection: each answered with its error, connection
 * kept (cases 6-15, 17-19 of the design's list). */
static void test_bad_frames(void **state)
{
	static const struct {
		const char *frame;
		int code;
	} cases[] = {
	    {"{\"1\":1,", -32700},
	    {"{}x", -32700},
	    {"[1,2]", -32600},
	    {"\"str\"", -32600},
	    {"42", -32600},
	    {"null", -32600},
	    {"{\"id\":\"a\",\"method\":\"status\",\"x\":\"\\u0000\"}", -32700},
	    {"{\"id\":\"a\",\"method\":\"status\",\"x\":\"\xc3\x28\"}", -32700},
	    {"{\"id\":\"a\",\"method\":\"status\",\"x\":\"\\ud800\"}", -32700},
	    {"{\"id\":\"a\",\"method\":\"status\",\"id\":\"b\"}", -32600},
	    {"{\"id\":\"a\",\"Method\":\"status\"}", -32600},
	    {"{\"id\":7,\"method\":\"status\"}", -32600},
	    {"{\"method\":\"status\"}", -32600},
	    {"{\"id\":\"a\",\"method\":\"nosuch\"}", -32601},
	    {"{\"id\":\"a\",\"method\":\"hello\",\"params\":{\"versions\":[1]}}", -32000},
	    {"{\"id\":\"a\",\"method\":\"alloc\",\"params\":{\"instance\":\"0000000000000001\","
	     "\"size\":\"-1\"}}",
	     -32602},
	    {"{\"id\":\"a\",\"method\":\"alloc\",\"params\":{\"instance\":\"0000000000000001\","
	     "\"size\":\"18446744073709551616\"}}",
	     -32602},
	    {"{\"id\":\"a\",\"method\":\"alloc\",\"params\":{\"instance\":\"0000000000000001\","
	     "\"size\":1024}}",
	     -32602},
	    {"{\"id\":\"a\",\"method\":\"free\",\"params\":{\"id\":\"00000000000000ff\"}}", -32004},
	    {"{\"id\":\"a\",\"method\":\"register\",\"params\":{\"name\":\"\"}}", -32602},
	};
	int fd = th_connect(by.daemon.socket);
	th_hello(fd);
	char reply[8192];
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int n = th_call(fd, cases[i].frame, reply, sizeof(reply));
		if (n <= 0)
			fail_msg("case %zu (%s): no reply (%d)", i, cases[i].frame, n);
		if (th_error_code(reply) != cases[i].code)
			fail_msg("case %zu (%s): got %s", i, cases[i].frame, reply);
	}
	/* Nesting 10,000 deep: refused, not a stack overflow. */
	size_t depth = 10000;
	char *deep = malloc(2 * depth + 1);
	assert_non_null(deep);
	memset(deep, '[', depth);
	memset(deep + depth, ']', depth);
	deep[2 * depth] = '\0';
	assert_true(th_call(fd, deep, reply, sizeof(reply)) > 0);
	assert_true(th_error_code(reply) == -32700 || th_error_code(reply) == -32600);
	free(deep);
	/* Still a working connection. */
	assert_true(th_call(fd, "{\"id\":\"ok\",\"method\":\"status\"}", reply, sizeof(reply)) > 0);
	assert_non_null(strstr(reply, "\"result\""));
	th_close(fd);
	th_assert_unaffected(&by);
	th_assert_no_leak(&by);
}

/* Case 2: bytes with no newline past the cap: error, then closed. */
static void test_oversized_frame(void **state)
{
	int fd = th_connect(by.daemon.socket);
	th_hello(fd);
	size_t n = 70000;
	char *big = malloc(n);
	assert_non_null(big);
	memset(big, 'a', n);
	assert_int_equal(th_send(fd, big, n), 0);
	free(big);
	char reply[4096];
	assert_true(th_read_line(fd, reply, sizeof(reply), 5000) > 0);
	assert_int_equal(th_error_code(reply), -32600);
	assert_int_equal(th_read_line(fd, reply, sizeof(reply), 5000), 0); /* EOF */
	th_close(fd);
	th_assert_unaffected(&by);
	th_assert_no_leak(&by);
}

/* Cases 3-6: one byte at a time, many frames per write, splits at the
 * delimiter, blank lines. */
static void test_framing(void **state)
{
	int fd = th_connect(by.daemon.socket);
	const char *hello = "{\"id\":\"h\",\"method\":\"hello\",\"params\":{\"versions\":[1]}}\n";
	for (const char *p = hello; *p; p++)
		assert_int_equal(th_send(fd, p, 1), 0);
	char reply[4096];
	assert_true(th_read_line(fd, reply, sizeof(reply), 5000) > 0);
	assert_non_null(strstr(reply, "\"id\":\"h\",\"result\""));
	char many[8192] = "";
	for (int i = 0; i < 50; i++) {
		char one[64];
		snprintf(one, sizeof(one), "{\"id\":\"%d\",\"method\":\"status\"}\n \n\r\n", i);
		strcat(many, one);
	}
	assert_int_equal(th_send(fd, many, strlen(many)), 0);
	for (int i = 0; i < 50; i++) {
		char want[32];
		assert_true(th_read_line(fd, reply, sizeof(reply), 5000) > 0);
		snprintf(want, sizeof(want), "{\"id\":\"%d\",\"result\"", i);
		assert_non_null(strstr(reply, want));
	}
	const char *split = "{\"id\":\"s\",\"method\":\"status\"}";
	assert_int_equal(th_send(fd, split, strlen(split)), 0);
	usleep(50000);
	assert_int_equal(th_send(fd, "\n", 1), 0);
	assert_true(th_read_line(fd, reply, sizeof(reply), 5000) > 0);
	assert_non_null(strstr(reply, "\"id\":\"s\""));
	th_close(fd);
	th_assert_unaffected(&by);
	th_assert_no_leak(&by);
}

/* Case 1: connect and never hello: closed after the hello timeout. */
static void test_hello_timeout(void **state)
{
	int fd = th_connect(by.daemon.socket);
	char reply[4096];
	assert_true(th_read_line(fd, reply, sizeof(reply), 5000) > 0);
	assert_int_equal(th_error_code(reply), -32000);
	assert_int_equal(th_read_line(fd, reply, sizeof(reply), 5000), 0);
	th_close(fd);
	th_assert_unaffected(&by);
	th_assert_no_leak(&by);
}

/* Case 21: half-close after requests: they are answered, then EOF. */
static void test_half_close(void **state)
{
	int fd = th_connect(by.daemon.socket);
	const char *reqs = "{\"id\":\"h\",\"method\":\"hello\",\"params\":{\"versions\":[1]}}\n"
	                   "{\"id\":\"r\",\"method\":\"register\",\"params\":{\"name\":\"hc\"}}\n";
	assert_int_equal(th_send(fd, reqs, strlen(reqs)), 0);
	assert_int_equal(shutdown(fd, SHUT_WR), 0);
	char reply[4096];
	assert_true(th_read_line(fd, reply, sizeof(reply), 5000) > 0);
	assert_true(th_read_line(fd, reply, sizeof(reply), 5000) > 0);
	assert_non_null(strstr(reply, "\"id\":\"r\",\"result\""));
	assert_int_equal(th_read_line(fd, reply, sizeof(reply), 5000), 0);
	th_close(fd);
	th_assert_unaffected(&by);
	th_assert_no_leak(&by);
}

/* Case 30 and 20: a client that sends requests and leaves before reading
 * (including an alloc it never learns about); nothing is lost or leaked. */
static void test_gone_before_reply(void **state)
{
	for (int round = 0; round < 20; round++) {
		int fd = th_connect(by.daemon.socket);
		char buf[8192];
		int n = snprintf(
		    buf, sizeof(buf),
		    "{\"id\":\"h\",\"method\":\"hello\",\"params\":{\"versions\":[1]}}\n"
		    "{\"id\":\"r\",\"method\":\"register\",\"params\":{\"name\":\"g\"}}\n");
		for (int i = 0; i < 100; i++)
			n += snprintf(buf + n, sizeof(buf) - (size_t)n,
			              "{\"id\":\"%d\",\"method\":\"status\"}\n", i);
		assert_int_equal(th_send(fd, buf, (size_t)n), 0);
		th_close(fd);
	}
	th_assert_unaffected(&by);
	th_assert_no_leak(&by);
}

/* A client that passes descriptors to the daemon is disconnected. */
static void test_client_sends_fd(void **state)
{
	int fd = th_connect(by.daemon.socket);
	th_hello(fd);
	char data[] = "{\"id\":\"x\",\"method\":\"status\"}\n";
	int passed = STDIN_FILENO;
	char cbuf[CMSG_SPACE(sizeof(int))] = {0};
	struct iovec iov = {.iov_base = data, .iov_len = strlen(data)};
	struct msghdr msg = {
	    .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
	struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &passed, sizeof(int));
	assert_true(sendmsg(fd, &msg, MSG_NOSIGNAL) > 0);
	char reply[4096];
	assert_int_equal(th_read_line(fd, reply, sizeof(reply), 5000), 0);
	th_close(fd);
	th_assert_unaffected(&by);
	th_assert_no_leak(&by);
}

/* A client killed with SIGKILL while holding allocations: everything it
 * held is reclaimed. */
static void test_sigkill_reclaims(void **state)
{
	int ready[2];
	assert_int_equal(pipe(ready), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		gpb_client *c = NULL;
		uint64_t inst;
		struct gpb_register_opts opts = {.name = "victim"};
		struct gpb_allocation a;
		if (gpb_connect(by.daemon.socket, "victim", &c) || gpb_register(c, &opts, &inst))
			th_child_exit(1);
		for (int i = 0; i < 64; i++) {
			if (gpb_alloc(c, inst, 100000, 0, &a))
				th_child_exit(1);
			memset(a.ptr, 1, 100000);
		}
		if (write(ready[1], "r", 1) != 1)
			th_child_exit(1);
		pause();
		th_child_exit(0);
	}
	char r;
	assert_int_equal(read(ready[0], &r, 1), 1);
	assert_true(th_status_used(by.client) > by.alloc.size);
	assert_int_equal(kill(pid, SIGKILL), 0);
	assert_int_equal(waitpid(pid, NULL, 0), pid);
	close(ready[0]);
	close(ready[1]);
	th_assert_no_leak(&by);
	assert_int_equal(th_status_field(by.client, "clients"), 1);
	th_assert_unaffected(&by);
}

/* Case 31: 10,000 alloc/free cycles leave the daemon's memory flat. RSS
 * alone would not show a small leak: memory freed by earlier tests stays
 * resident and absorbs it. So the daemon's own count of malloc'd bytes
 * (selfcheck's heap_bytes) must come back to within 4 KiB, a planted leak of
 * one 8-byte malloc per request grows it by 320 KB, and RSS must stay
 * within 160 KiB (16 bytes a cycle). */
static void test_rss_flat(void **state)
{
	enum { CYCLES = 10000, RSS_BOUND_KIB = 160, HEAP_BOUND = 4096 };
	gpb_client *c = th_client(&by.daemon, "cycles");
	uint64_t inst;
	struct gpb_register_opts opts = {.name = "cycles"};
	assert_int_equal(gpb_register(c, &opts, &inst), 0);
	struct gpb_allocation a;
	/* Warm up: the pool's slab, the allocator's arenas, the metrics. */
	for (int i = 0; i < 2000; i++) {
		assert_int_equal(gpb_alloc(c, inst, 4096 + (uint64_t)(i % 7) * 256, 0, &a), 0);
		assert_int_equal(gpb_free(c, a.id), 0);
	}
	struct th_selfcheck s0, s1;
	th_selfcheck(c, &s0);
	long before = th_daemon_rss_kib(&by.daemon);
	for (int i = 0; i < CYCLES; i++) {
		assert_int_equal(gpb_alloc(c, inst, 4096 + (uint64_t)(i % 7) * 256, 0, &a), 0);
		assert_int_equal(gpb_free(c, a.id), 0);
	}
	th_selfcheck(c, &s1);
	long after = th_daemon_rss_kib(&by.daemon);
	printf("# %d alloc/free cycles: daemon heap %lld -> %lld bytes, RSS %ld -> %ld KiB\n",
	       CYCLES, s0.heap_bytes, s1.heap_bytes, before, after);
	gpb_disconnect(c);
	/* ASan's quarantine holds freed memory on purpose, and its allocator
	 * is not glibc's: neither figure means anything there (LeakSanitizer
	 * checks the daemon's exit instead). Nor under valgrind (th_valgrind),
	 * which checks for leaks itself. */
#ifndef __SANITIZE_ADDRESS__
	if (!th_valgrind()) {
		assert_true(after - before < RSS_BOUND_KIB);
		if (s0.heap_bytes >= 0)
			assert_true(s1.heap_bytes - s0.heap_bytes < HEAP_BOUND);
	}
#endif
	th_assert_no_leak(&by);
}

/* Case 17: calls before hello, an unsupported version (the connection
 * may try again), a second hello, an unknown method. */
static void test_handshake_errors(void **state)
{
	int fd = th_connect(by.daemon.socket);
	th_expect_reply(fd, "{\"id\":\"a\",\"method\":\"status\"}", -32000, NULL);
	th_expect_reply(fd, "{\"id\":\"a\",\"method\":\"alloc\",\"params\":{}}", -32000, NULL);
	th_expect_reply(fd, "{\"id\":\"a\",\"method\":\"nosuch\"}", -32601, NULL);
	char reply[4096];
	assert_true(th_call(fd,
	                    "{\"id\":\"v\",\"method\":\"hello\",\"params\":{\"versions\":[2,3]}}",
	                    reply, sizeof(reply)) > 0);
	assert_int_equal(th_error_code(reply), -32001);
	assert_non_null(strstr(reply, "\"supported\":[1]"));
	th_expect_reply(fd, "{\"id\":\"v\",\"method\":\"hello\",\"params\":{\"versions\":[]}}",
	                -32001, NULL);
	th_hello(fd);
	th_expect_reply(fd, "{\"id\":\"v\",\"method\":\"hello\",\"params\":{\"versions\":[1]}}",
	                -32000, NULL);
	th_expect_reply(fd, "{\"id\":\"a\",\"method\":\"nosuch\"}", -32601, NULL);
	th_expect_reply(fd, "{\"id\":\"a\",\"method\":\"status\"}", 0, NULL);
	th_close(fd);
	th_assert_unaffected(&by);
	th_assert_no_leak(&by);
}

/* Case 20: a client killed with SIGKILL after sending an alloc and before
 * reading the reply (the daemon has granted it, the client never learns
 * the id): reclaimed with the connection. */
static void test_killed_before_alloc_reply(void **state)
{
	for (int round = 0; round < 20; round++) {
		/* Set up here (cmocka's checks belong to this process); the
		 * child inherits the connection, it alone holds it open. */
		int fd = th_connect(by.daemon.socket);
		th_hello(fd);
		char inst[17], buf[2048];
		th_raw_register(fd, "killed", inst);
		size_t n = 0;
		for (int i = 0; i < 8; i++)
			n += (size_t)snprintf(buf + n, sizeof(buf) - n,
			                      "{\"id\":\"%d\",\"method\":\"alloc\",\"params\":{"
			                      "\"instance\":\"%s\",\"size\":\"%d\"}}\n",
			                      i, inst, 4096 << (i + round) % 10);
		assert_true(n < sizeof(buf));
		pid_t pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			if (send(fd, buf, n, MSG_NOSIGNAL) != (ssize_t)n)
				th_child_exit(1);
			if (round % 2) {
				/* Sure the daemon answered: its reply is waiting. */
				struct pollfd pfd = {.fd = fd, .events = POLLIN};
				poll(&pfd, 1, 5000);
			}
			raise(SIGKILL);
			th_child_exit(2);
		}
		th_close(fd);
		int st;
		assert_int_equal(waitpid(pid, &st, 0), pid);
		assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	}
	th_assert_unaffected(&by);
	th_assert_no_leak(&by);
}

/* Case 29: a blocked loop. The daemon's event loop is its only thread, and
 * its systemd watchdog ping is a timer on that loop (daemon/server/systemd.c), so a
 * loop that blocks stops the pings and systemd kills and restarts the
 * daemon (WatchdogSec= in gpubroker.service). tests/systemd/test-notify.c
 * checks the pings (every WATCHDOG_USEC/2, none after STOPPING=1); this
 * checks that, after all the work above, no other thread exists that could
 * ping for a stuck loop. */
static void test_one_thread(void **state)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/task", (int)by.daemon.pid);
	DIR *dir = opendir(path);
	assert_non_null(dir);
	int threads = 0;
	for (struct dirent *e; (e = readdir(dir));)
		threads += e->d_name[0] != '.';
	closedir(dir);
	assert_int_equal(threads, 1);
	th_assert_unaffected(&by);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_bad_frames),
	    cmocka_unit_test(test_oversized_frame),
	    cmocka_unit_test(test_framing),
	    cmocka_unit_test(test_hello_timeout),
	    cmocka_unit_test(test_half_close),
	    cmocka_unit_test(test_gone_before_reply),
	    cmocka_unit_test(test_client_sends_fd),
	    cmocka_unit_test(test_sigkill_reclaims),
	    cmocka_unit_test(test_rss_flat),
	    cmocka_unit_test(test_handshake_errors),
	    cmocka_unit_test(test_killed_before_alloc_reply),
	    cmocka_unit_test(test_one_thread),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
