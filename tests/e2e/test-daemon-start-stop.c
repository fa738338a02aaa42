/*
 * test-daemon-start-stop.c - starting and stopping the real daemon: SIGTERM with
 * clients connected, stale and live sockets, bad socket paths, what the
 * library reports when the daemon goes away, and a forked child.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

struct events_seen {
	int shutdown;
};

static void on_event(gpb_client *c, const char *name, const char *data, void *ud)
{
	struct events_seen *seen = ud;
	if (strcmp(name, "shutdown") == 0 && strstr(data, "SIGTERM"))
		seen->shutdown++;
}

/* SIGTERM with clients connected and requests answered: exit 0, socket
 * removed, clients hear "shutdown" and then get GPB_E_DAEMON_GONE. */
static void test_sigterm(void **state)
{
	struct th_daemon d;
	th_daemon_start(&d, NULL);
	gpb_client *c = th_client(&d, "stayer");
	struct gpb_register_opts opts = {.name = "s"};
	uint64_t inst;
	struct gpb_allocation a;
	assert_int_equal(gpb_register(c, &opts, &inst), 0);
	assert_int_equal(gpb_alloc(c, inst, 1 << 20, 0, &a), 0);
	struct events_seen seen = {0};
	gpb_set_event_callback(c, on_event, &seen);

	assert_int_equal(kill(d.pid, SIGTERM), 0);
	struct pollfd pfd = {.fd = gpb_event_fd(c), .events = POLLIN};
	assert_true(pfd.fd >= 0);
	assert_int_equal(poll(&pfd, 1, 5000), 1);
	int n = gpb_dispatch(c);
	assert_true(n == 1 || n == GPB_E_DAEMON_GONE);
	assert_int_equal(seen.shutdown, 1);

	int st;
	assert_int_equal(waitpid(d.pid, &st, 0), d.pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	d.pid = 0;
	struct stat sb;
	assert_int_equal(stat(d.socket, &sb), -1);
	assert_int_equal(gpb_alloc(c, inst, 4096, 0, &a), GPB_E_DAEMON_GONE);
	assert_int_equal(gpb_free(c, a.id), GPB_E_DAEMON_GONE);
	gpb_disconnect(c);
	th_daemon_stop(&d);
}

/* A daemon killed with SIGKILL: the library reports a distinct error and
 * a new daemon on the same (now stale) socket path starts and serves. */
static void test_sigkill_daemon_and_stale_socket(void **state)
{
	struct th_daemon d;
	th_daemon_start(&d, NULL);
	gpb_client *c = th_client(&d, "survivor");
	assert_int_equal(kill(d.pid, SIGKILL), 0);
	assert_int_equal(waitpid(d.pid, NULL, 0), d.pid);
	struct gpb_register_opts opts = {.name = "s"};
	uint64_t inst;
	assert_int_equal(gpb_register(c, &opts, &inst), GPB_E_DAEMON_GONE);
	gpb_disconnect(c);
	/* The socket file is still there, with nobody listening. */
	struct stat sb;
	assert_int_equal(stat(d.socket, &sb), 0);
	assert_true(S_ISSOCK(sb.st_mode));
	gpb_client *nope = NULL;
	assert_int_equal(gpb_connect(d.socket, NULL, &nope), GPB_E_CONNECT);

	/* Restart on the same path, reusing the directory. */
	char argv_sock[128];
	snprintf(argv_sock, sizeof(argv_sock), "%s", d.socket);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		execl(th_env("GPB_DAEMON"), "gpubrokerd", "--socket", argv_sock, "--backend", "sim",
		      "--log-level", "error", (char *)NULL);
		_exit(127);
	}
	d.pid = pid;
	for (int i = 0; i < 500 && gpb_connect(d.socket, NULL, &c) != 0; i++)
		usleep(10000);
	assert_non_null(c);
	assert_int_equal(gpb_register(c, &opts, &inst), 0);
	gpb_disconnect(c);
	assert_int_equal(th_daemon_stop(&d), 0);
}

static int run_daemon(const char *socket_path, char *out, size_t cap)
{
	char *argv[] = {(char *)th_env("GPB_DAEMON"),
	                "--socket",
	                (char *)socket_path,
	                "--backend",
	                "sim",
	                "--log-level",
	                "error",
	                NULL};
	return th_run(argv, NULL, out, cap);
}

/* A second daemon on a live socket refuses to start and leaves the first
 * one serving. */
static void test_live_socket_refused(void **state)
{
	struct th_daemon d;
	char out[256];
	th_daemon_start(&d, NULL);
	assert_int_equal(run_daemon(d.socket, out, sizeof(out)), 1);
	gpb_client *c = th_client(&d, "still");
	gpb_disconnect(c);
	assert_int_equal(th_daemon_stop(&d), 0);
}

static void test_bad_socket_paths(void **state)
{
	char out[256], path[300];
	memset(path, 'x', sizeof(path));
	memcpy(path, "/tmp/", 5);
	path[200] = '\0';
	assert_int_equal(run_daemon(path, out, sizeof(out)), 1);
	gpb_client *c = NULL;
	assert_int_equal(gpb_connect(path, NULL, &c), GPB_E_CONNECT);

	char file[] = "/tmp/gpb-test-notsock-XXXXXX";
	int fd = mkstemp(file);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(run_daemon(file, out, sizeof(out)), 1);
	struct stat sb;
	assert_int_equal(stat(file, &sb), 0); /* not removed */
	unlink(file);
}

/* GPUBROKER_SOCKET is honoured by the library when no path is given. */
static void test_env_socket(void **state)
{
	struct th_daemon d;
	th_daemon_start(&d, NULL);
	setenv("GPUBROKER_SOCKET", d.socket, 1);
	gpb_client *c = NULL;
	assert_int_equal(gpb_connect(NULL, "env", &c), 0);
	gpb_disconnect(c);
	unsetenv("GPUBROKER_SOCKET");
	assert_int_equal(th_daemon_stop(&d), 0);
}

/*
 * fork (issue 25, item 7): a child starts afresh for the whole library.
 * The parent maps a slab and forks; in the child the mapping counters are
 * zero, the parent's client refuses every call (its socket is the
 * parent's connection), a new connection maps the slab itself (with the
 * cuda backend the parent's mapping is not valid there), and disconnecting
 * the parent's client leaves the parent's connection and bytes alone.
 * Before the fix the child inherited the cache: its new connection was
 * handed the parent's mapping, and the parent's client sent requests on
 * the parent's socket.
 */
static void test_fork(void **state)
{
	(void)state;
	struct th_daemon d;
	th_daemon_start(&d, NULL);
	gpb_client *c = th_client(&d, "fork-parent");
	uint64_t inst;
	struct gpb_allocation a;
	assert_int_equal(gpb_register(c, &(struct gpb_register_opts){.name = "parent"}, &inst), 0);
	assert_int_equal(gpb_alloc(c, inst, 4096, 0, &a), 0);
	memset(a.ptr, 0x5a, 4096);

	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct gpb_mapping_stats ms;
		struct gpb_allocation x, b;
		gpb_client *c2 = NULL;
		uint64_t inst2;
		if (gpb_mapping_stats(&ms) != 0 || ms.opens || ms.open_now)
			th_child_exit(91);
		if (gpb_alloc(c, inst, 4096, 0, &x) != GPB_E_INVALID ||
		    !strstr(gpb_last_error(), "forked"))
			th_child_exit(92);
		if (gpb_connect(d.socket, "fork-child", &c2) != 0 ||
		    gpb_register(c2, &(struct gpb_register_opts){.name = "child"}, &inst2) != 0 ||
		    gpb_alloc(c2, inst2, 4096, 0, &b) != 0)
			th_child_exit(93);
		/* Mapped by the child, not found in the parent's cache. */
		if (gpb_mapping_stats(&ms) != 0 || ms.opens != 1 || ms.open_now != 1)
			th_child_exit(94);
		memset(b.ptr, 0x22, 4096);
		gpb_disconnect(c); /* the parent's: nothing said, nothing unmapped there */
		if (gpb_free(c2, b.id) != 0)
			th_child_exit(95);
		gpb_disconnect(c2);
		th_child_exit(0);
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	/* The parent's connection and bytes are intact. */
	th_assert_serves(&d, c, inst, &a);
	assert_int_equal(gpb_free(c, a.id), 0);
	gpb_disconnect(c);
	assert_int_equal(th_daemon_stop(&d), 0);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_sigterm),
	    cmocka_unit_test(test_sigkill_daemon_and_stale_socket),
	    cmocka_unit_test(test_live_socket_refused),
	    cmocka_unit_test(test_bad_socket_paths),
	    cmocka_unit_test(test_env_socket),
	    cmocka_unit_test(test_fork),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
