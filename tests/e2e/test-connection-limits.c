/*
 * test-connection-limits.c - bad inputs that need a daemon of their own (docs/reliability.md,
 * "Bad inputs", cases 22, 23, 24 and 28): a client that never reads while
 * spamming, connection floods past max_clients and past a low `ulimit -n`,
 * a user outside the socket's group, and a backend that cannot create a
 * slab in the middle of an allocation.
 *
 * Every test starts its daemon with a bystander: a library client holding
 * an allocation, connected throughout. Afterwards the bystander's bytes and
 * connection are intact and it can still allocate, the daemon's selfcheck
 * passes, its descriptors are back to the baseline, and it exits 0 on
 * SIGTERM (under ASan, LeakSanitizer fails that exit on any leak).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static const char HELLO[] = "{\"id\":\"h\",\"method\":\"hello\",\"params\":{\"versions\":[1]}}\n";

struct env {
	struct th_daemon d;
	gpb_client *by; /* the bystander */
	uint64_t inst;
	struct gpb_allocation a;
	int base_fds;
	char log[64];  /* the daemon's stderr */
	char conf[64]; /* its configuration file, when the test wrote one */
};

static void env_start(struct env *e, const char *conf_text, unsigned nofile,
                      const char *const *extra)
{
	memset(e, 0, sizeof(*e));
	snprintf(e->log, sizeof(e->log), "/tmp/gpb-test-log-%d", (int)getpid());
	unlink(e->log);
	const char *args[16] = {NULL};
	int n = 0;
	if (conf_text) {
		snprintf(e->conf, sizeof(e->conf), "/tmp/gpb-test-conf-%d", (int)getpid());
		th_write_file(e->conf, conf_text);
		args[n++] = "--config";
		args[n++] = e->conf;
	}
	for (int i = 0; extra && extra[i] && n < 14; i++)
		args[n++] = extra[i];
	struct th_daemon_opts o = {.extra = args, .nofile = nofile, .log_path = e->log};
	th_daemon_start_opts(&e->d, &o);
	e->by = th_client(&e->d, "bystander");
	/* Device 1: the tests load device 0, and policy events for device 0
	 * must not reach the bystander. */
	struct gpb_register_opts ro = {.name = "bystander", .device = 1};
	assert_int_equal(gpb_register(e->by, &ro, &e->inst), 0);
	assert_int_equal(gpb_alloc(e->by, e->inst, 4096, 0, &e->a), 0);
	memset(e->a.ptr, 0x5a, 4096);
	e->base_fds = th_daemon_fds(&e->d);
}

/* The daemon serves, the bystander's allocation and connection are
 * intact, and the daemon's own consistency check passes. */
static void env_check(struct env *e)
{
	th_assert_serves(&e->d, e->by, e->inst, &e->a);
	th_selfcheck(e->by, NULL);
}

static struct env *fds_env;
static int fds_slack;

static bool fds_back(void *arg)
{
	return th_daemon_fds(&fds_env->d) <= fds_env->base_fds + fds_slack;
}

/* Nothing held but the bystander's: used bytes, allocations, descriptors
 * (slack: empty slabs the pool keeps cached for a uid, one per device). */
static void env_no_leak(struct env *e, int slack)
{
	fds_env = e;
	fds_slack = slack;
	if (!th_wait_for(fds_back, NULL, 10000))
		fail_msg("daemon holds %d descriptors, %d at the start", th_daemon_fds(&e->d),
		         e->base_fds);
	assert_int_equal(th_status_used(e->by), e->a.size);
	assert_int_equal(th_selfcheck(e->by, NULL), 1);
}

static void env_stop(struct env *e)
{
	gpb_disconnect(e->by);
	assert_int_equal(th_daemon_stop(&e->d), 0);
	unlink(e->log);
	if (e->conf[0])
		unlink(e->conf);
}

/* True when the daemon's log holds text. */
static bool log_has(const struct env *e, const char *text)
{
	return th_file_has(e->log, text, 1);
}

static bool only_bystander(void *arg)
{
	struct env *e = arg;
	return th_status_field(e->by, "clients") == 1;
}

static long long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int error_code(const char *reply)
{
	const char *p = strstr(reply, "\"code\":");
	return p ? atoi(p + 7) : 0;
}

/* Case 22: a client that never reads while spamming is paused (the daemon
 * stops reading it once its unread replies pass write_high_water), costs
 * bounded memory meanwhile, and is dropped when it stays paused. */
static void test_never_reads(void **state)
{
	struct env e;
	env_start(&e, "write_high_water = 4096\npaused_timeout_ms = 3000\n", 0, NULL);
	long rss0 = th_daemon_rss_kib(&e.d);
	int fd = th_connect(e.d.socket);
	th_hello(fd);
	long long t0 = now_ms();
	long sent = th_stall(&fd, 1, 1000);
	printf("# %ld requests written before the daemon stopped reading\n", sent);
	/* Paused: others are served, memory is bounded by the mark (and the
	 * socket buffers), not by what the client sent. */
	env_check(&e);
	long rss = th_daemon_rss_kib(&e.d);
	printf("# daemon RSS %ld KiB at the start, %ld KiB while the client is paused\n", rss0,
	       rss);
	assert_true(rss - rss0 < 8192);
	/* Dropped after paused_timeout_ms (3 s here) paused. */
	assert_true(th_wait_for(only_bystander, &e, 30000));
	long long waited = now_ms() - t0;
	printf("# dropped %lld ms after it started spamming\n", waited);
	assert_true(waited >= 2700);
	assert_true(log_has(&e, "still not reading its replies after 3000 ms"));
	assert_true(th_metric(e.by, "gpubroker_connections_dropped_total{reason=\"paused\"}") == 1);
	assert_true(th_drained_to_eof(fd, 10000));
	th_close(fd);
	env_check(&e);
	env_no_leak(&e, 0);
	env_stop(&e);
}

/* Case 22, hard cap: a paused client whose instance keeps receiving events
 * (cap_changed, as others register in active mode) is dropped as soon as
 * what is queued for it passes max_output_per_client, without waiting for
 * the timer. */
static void test_never_reads_events(void **state)
{
	struct env e;
	env_start(&e, "write_high_water = 4096\nmax_output_per_client = 16KiB\n", 0, NULL);
	char *json = NULL;
	assert_int_equal(gpb_request(e.by, "set_mode", "{\"mode\":\"active\"}", &json), 0);
	gpb_string_free(json);
	int fd = th_connect(e.d.socket);
	th_hello(fd);
	char reply[4096];
	assert_true(th_call(fd,
	                    "{\"id\":\"r\",\"method\":\"register\",\"params\":{\"name\":\"deaf\"}}",
	                    reply, sizeof(reply)) > 0);
	assert_non_null(strstr(reply, "\"result\""));
	th_stall(&fd, 1, 1000);
	long long t0 = now_ms();
	int rounds = 0;
	struct gpb_register_opts ro = {.name = "churn", .device = 0};
	while (!only_bystander(&e) && rounds < 5000) {
		uint64_t inst;
		assert_int_equal(gpb_register(e.by, &ro, &inst), 0);
		assert_int_equal(gpb_unregister(e.by, inst), 0);
		rounds++;
	}
	long long took = now_ms() - t0;
	printf("# dropped after %d register/unregister rounds, %lld ms\n", rounds, took);
	assert_true(only_bystander(&e));
	assert_true(log_has(&e, "dropped: not reading its replies"));
	assert_true(log_has(&e, "(max_output_per_client 16384)"));
	assert_false(log_has(&e, "still not reading its replies after"));
	assert_true(th_metric(e.by, "gpubroker_connections_dropped_total{"
	                            "reason=\"max_output_per_client\"}") == 1);
	assert_true(th_drained_to_eof(fd, 10000));
	th_close(fd);
	env_check(&e);
	env_no_leak(&e, 0);
	env_stop(&e);
}

/* Case 23: a connection flood past max_clients: the excess connections get
 * a limit_reached error and are closed; the ones admitted are served. */
static void test_flood_max_clients(void **state)
{
	enum { FLOOD = 64 };
	struct env e;
	const char *extra[] = {"--max-clients", "16", NULL};
	env_start(&e, NULL, 0, extra);
	int fds[FLOOD], served = 0, refused = 0;
	for (int i = 0; i < FLOOD; i++)
		fds[i] = th_connect(e.d.socket);
	char reply[4096];
	for (int i = 0; i < FLOOD; i++) {
		th_send(fds[i], HELLO, sizeof(HELLO) - 1);
		int n = th_read_line(fds[i], reply, sizeof(reply), 10000);
		if (n > 0 && strstr(reply, "\"result\""))
			served++;
		else if (n > 0 && error_code(reply) == -32006 &&
		         strstr(reply, "too many clients") &&
		         strstr(reply, "\"data\":{\"limit\":\"max_clients\",\"value\":16}"))
			refused++;
		else
			fail_msg("connection %d: %d: %s", i, n, n > 0 ? reply : "");
	}
	printf("# %d served, %d refused (max_clients 16, one is the bystander)\n", served, refused);
	assert_true(served >= 1 && served <= 15);
	assert_int_equal(served + refused, FLOOD);
	assert_true(
	    th_metric(e.by, "gpubroker_connections_refused_total{reason=\"max_clients\"}") ==
	    refused);
	env_check(&e);
	for (int i = 0; i < FLOOD; i++)
		th_close(fds[i]);
	assert_true(th_wait_for(only_bystander, &e, 10000));
	/* The slots are free again. */
	gpb_client *c = th_client(&e.d, "after");
	gpb_disconnect(c);
	env_check(&e);
	env_no_leak(&e, 0);
	env_stop(&e);
}

/* Case 23: a flood past the daemon's `ulimit -n`: connections it cannot
 * accept are told so (a spare descriptor accepts each, it gets a -32006
 * "too many open files" frame, and is closed), which is logged and counted;
 * the others are served, and once they leave the daemon accepts again. */
static void test_flood_low_nofile(void **state)
{
	enum { FLOOD = 200 };
	struct env e;
	env_start(&e, NULL, 64, NULL);
	printf("# daemon holds %d descriptors of 64 before the flood\n", e.base_fds);
	int fds[FLOOD], served = 0, refused = 0;
	for (int i = 0; i < FLOOD; i++)
		fds[i] = th_connect(e.d.socket);
	/* The limit the daemon reports is its getrlimit(): under valgrind,
	 * which emulates the process's own limit, not the one set here. */
	const char *data = th_valgrind() ? "\"data\":{\"limit\":\"open_files\",\"value\":"
	                                 : "\"data\":{\"limit\":\"open_files\",\"value\":64}";
	char reply[4096];
	for (int i = 0; i < FLOOD; i++) {
		th_send(fds[i], HELLO, sizeof(HELLO) - 1);
		int n = th_read_line(fds[i], reply, sizeof(reply), 10000);
		if (n > 0 && strstr(reply, "\"result\""))
			served++;
		else if (n > 0 && error_code(reply) == -32006 &&
		         strstr(reply, "\"message\":\"limit reached: too many open files\"") &&
		         strstr(reply, data) &&
		         th_read_line(fds[i], reply, sizeof(reply), 10000) == 0)
			refused++;
		else
			fail_msg("connection %d: %d: %s", i, n, n > 0 ? reply : "");
	}
	printf("# %d served, %d answered \"too many open files\" and closed (RLIMIT_NOFILE 64)\n",
	       served, refused);
	assert_true(served >= 16);
	assert_true(refused >= FLOOD - 64);
	assert_int_equal(served + refused, FLOOD);
	assert_true(log_has(&e, th_valgrind()
	                            ? "accept: out of file descriptors (RLIMIT_NOFILE "
	                            : "accept: out of file descriptors (RLIMIT_NOFILE 64)"));
	assert_true(th_metric(e.by, "gpubroker_connections_refused_total{reason=\"open_files\"}") ==
	            refused);
	env_check(&e);
	for (int i = 0; i < FLOOD; i++)
		th_close(fds[i]);
	assert_true(th_wait_for(only_bystander, &e, 10000));
	gpb_client *c = th_client(&e.d, "after");
	struct gpb_register_opts ro = {.name = "after"};
	uint64_t inst;
	struct gpb_allocation a;
	assert_int_equal(gpb_register(c, &ro, &inst), 0);
	assert_int_equal(gpb_alloc(c, inst, 1 << 20, 0, &a), 0);
	gpb_disconnect(c);
	env_check(&e);
	env_no_leak(&e, 1);
	env_stop(&e);
}

/* Runs fn(path) in a child as user nobody; returns its exit status. */
static int as_nobody(int (*fn)(const char *path), const char *path)
{
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0)
			th_child_exit(99);
		th_child_exit(fn(path));
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int nobody_connect(const char *path)
{
	gpb_client *c = NULL;
	int rc = gpb_connect(path, "outsider", &c);
	if (rc != GPB_E_PERMISSION || c)
		return 10;
	/* The raw socket says the same: the kernel refuses, not the daemon. */
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof(sa.sun_path))
		return 13;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return 11;
	rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	int err = errno;
	close(fd);
	return rc < 0 && err == EACCES ? 0 : 12;
}

/* Case 24: a user outside the socket's group (mode 0660) cannot connect:
 * the library says permission denied; the daemon never sees it. */
static void test_uid_outside_group(void **state)
{
	if (geteuid() != 0) {
		printf("# not root: cannot run a client as another user\n");
		skip();
	}
	struct env e;
	env_start(&e, NULL, 0, NULL);
	/* The directory is open to all: only the socket's mode decides. */
	assert_int_equal(chmod(e.d.dir, 0755), 0);
	struct stat sb;
	assert_int_equal(stat(e.d.socket, &sb), 0);
	assert_int_equal(sb.st_mode & 0777, 0660);
	assert_true(sb.st_gid != 65534);
	assert_int_equal(as_nobody(nobody_connect, e.d.socket), 0);
	env_check(&e);
	env_no_leak(&e, 0);
	env_stop(&e);
}

/* Case 28: the backend fails in the middle of an allocation (the sim
 * backend cannot create a slab's memory file once the daemon is out of
 * descriptors: the stand-in for a CUDA error). The client gets a
 * backend_error reply, keeps its connection and everything it holds, and
 * allocates again once descriptors are back. */
static void test_backend_error(void **state)
{
	enum { MAXA = 256 };
	struct env e;
	env_start(&e, NULL, 40, NULL);
	gpb_client *c = th_client(&e.d, "victim");
	struct gpb_register_opts ro = {.name = "victim"};
	uint64_t inst;
	assert_int_equal(gpb_register(c, &ro, &inst), 0);
	/* 2 MiB each: a slab of its own each, a descriptor each. */
	static struct gpb_allocation a[MAXA];
	int n = 0, rc = 0;
	while (n < MAXA && (rc = gpb_alloc(c, inst, 2 << 20, 0, &a[n])) == 0) {
		memset(a[n].ptr, n, 4096);
		n++;
	}
	printf("# %d slabs allocated, then: %s: %s\n", n, gpb_strerror(rc), gpb_last_error());
	assert_true(n > 4 && n < MAXA);
	assert_int_equal(rc, GPB_E_BACKEND);
	assert_non_null(strstr(gpb_last_error(), "-32010"));
	assert_true(log_has(&e, "cannot create a slab"));
	assert_non_null(strstr(gpb_last_error(), "EMFILE"));
	/* Again: the same answer, the connection kept; host memory (a memory
	 * file of its own) is refused the same way. */
	struct gpb_allocation x;
	assert_int_equal(gpb_alloc(c, inst, 2 << 20, 0, &x), GPB_E_BACKEND);
	assert_int_equal(gpb_alloc_host(c, inst, 4096, GPB_HOST_PINNED, &x), GPB_E_BACKEND);
	assert_non_null(strstr(gpb_last_error(), "EMFILE"));
	env_check(&e);
	/* What it holds is intact; freeing makes room. */
	for (int i = 0; i < n; i++)
		assert_int_equal(((unsigned char *)a[i].ptr)[4095], (unsigned char)i);
	assert_int_equal(gpb_free(c, a[n - 1].id), 0);
	assert_int_equal(gpb_free(c, a[n - 2].id), 0);
	assert_int_equal(gpb_alloc(c, inst, 2 << 20, 0, &a[n - 2]), 0);
	for (int i = 0; i < n - 1; i++)
		assert_int_equal(gpb_free(c, a[i].id), 0);
	gpb_disconnect(c);
	env_check(&e);
	env_no_leak(&e, 1);
	env_stop(&e);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_never_reads),       cmocka_unit_test(test_never_reads_events),
	    cmocka_unit_test(test_flood_max_clients), cmocka_unit_test(test_flood_low_nofile),
	    cmocka_unit_test(test_uid_outside_group), cmocka_unit_test(test_backend_error),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
