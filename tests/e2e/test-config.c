/*
 * test-config.c - the configuration file against the real daemon: errors
 * name the file and line, reload applies what can change live and keeps the
 * old configuration on errors, admin operations need an admin, per-user
 * connection limits hold.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static char conf_path[64];

static void write_conf(const char *text)
{
	FILE *f = fopen(conf_path, "w");
	assert_non_null(f);
	assert_true(fputs(text, f) >= 0);
	assert_int_equal(fclose(f), 0);
}

static int setup(void **state)
{
	snprintf(conf_path, sizeof(conf_path), "/tmp/gpb-test-conf-%d", (int)getpid());
	return 0;
}

static int teardown(void **state)
{
	unlink(conf_path);
	return 0;
}

static int try_register(gpb_client *c)
{
	struct gpb_register_opts opts = {.name = "r"};
	uint64_t inst;
	return gpb_register(c, &opts, &inst);
}

/* A bad file stops the daemon before it listens, naming file and line. */
static void test_bad_file_refused(void **state)
{
	write_conf("max_clients = 4\nmax_clients_typo = 5\n");
	char cmd[512], out[4096];
	snprintf(cmd, sizeof(cmd), "%s --config %s --socket /tmp/gpb-test-never.sock 2>&1",
	         th_env("GPB_DAEMON"), conf_path);
	char *argv[] = {"/bin/sh", "-c", cmd, NULL};
	assert_int_equal(th_run(argv, NULL, out, sizeof(out)), 2);
	char want[128];
	snprintf(want, sizeof(want), "%s:2: unknown key 'max_clients_typo'", conf_path);
	assert_non_null(strstr(out, want));
}

static void test_reload(void **state)
{
	write_conf("max_instances = 2\n");
	const char *extra[] = {"--config", conf_path, NULL};
	struct th_daemon d;
	th_daemon_start(&d, extra);
	gpb_client *c = th_client(&d, "reloader");
	assert_int_equal(try_register(c), 0);
	assert_int_equal(try_register(c), 0);
	assert_int_equal(try_register(c), GPB_E_LIMIT);

	/* Live keys apply; restart-only keys are reported and kept. */
	write_conf("max_instances = 3\nsocket_group = nosuchgroup\n");
	char *json = NULL;
	assert_int_equal(gpb_request(c, "reload", NULL, &json), 0);
	assert_non_null(strstr(json, "\"applied\":[\"max_instances\"]"));
	assert_non_null(strstr(json, "\"needs_restart\":[\"socket_group\"]"));
	gpb_string_free(json);
	assert_int_equal(try_register(c), 0);
	assert_int_equal(th_status_field(c, "clients"), 1);

	/* A broken file: an error, and the running configuration stays. */
	write_conf("max_instances = 9\nmax_instances = oops\n");
	assert_int_equal(gpb_request(c, "reload", NULL, &json), GPB_E_INVALID);
	assert_non_null(strstr(gpb_last_error(), "stays in force"));
	assert_int_equal(try_register(c), GPB_E_LIMIT);

	/* SIGHUP does the same. */
	write_conf("max_instances = 4\n");
	assert_int_equal(kill(d.pid, SIGHUP), 0);
	int rc = GPB_E_LIMIT;
	for (int i = 0; i < 200 && rc == GPB_E_LIMIT; i++) {
		usleep(10000);
		rc = try_register(c);
	}
	assert_int_equal(rc, 0);

	/* Policy keys apply live too. */
	write_conf("max_instances = 4\nmode = active\nlimit = 50%\n");
	assert_int_equal(gpb_request(c, "reload", NULL, &json), 0);
	assert_non_null(strstr(json, "\"applied\":[\"mode\",\"limit\"]"));
	gpb_string_free(json);
	assert_int_equal(gpb_request(c, "policy", NULL, &json), 0);
	assert_non_null(strstr(json, "\"mode\":\"active\""));
	gpb_string_free(json);
	gpb_disconnect(c);
	assert_int_equal(th_daemon_stop(&d), 0);
}

/* Runs fn in a child as user nobody; returns its exit status. */
static int as_nobody(int (*fn)(const char *socket), const char *socket)
{
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0)
			_exit(99);
		_exit(fn(socket));
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int nobody_reload(const char *socket)
{
	gpb_client *c = NULL;
	char *json = NULL;
	if (gpb_connect(socket, "nobody", &c) < 0)
		return 10;
	int rc = gpb_request(c, "reload", NULL, &json);
	int ok = rc == GPB_E_PERMISSION && strstr(gpb_last_error(), "permission denied");
	/* Ordinary requests still work for this user. */
	ok = ok && try_register(c) == 0;
	gpb_disconnect(c);
	return ok ? 0 : 11;
}

/* Admin operations are for root and the admin group only. */
static void test_admin_only(void **state)
{
	if (geteuid() != 0)
		skip();
	write_conf("socket_mode = 0666\n");
	const char *extra[] = {"--config", conf_path, NULL};
	struct th_daemon d;
	th_daemon_start(&d, extra);
	assert_int_equal(chmod(d.dir, 0755), 0);
	assert_int_equal(as_nobody(nobody_reload, d.socket), 0);
	gpb_client *root = th_client(&d, "root");
	char *json = NULL;
	assert_int_equal(gpb_request(root, "reload", NULL, &json), 0);
	gpb_string_free(json);
	gpb_disconnect(root);
	assert_int_equal(th_daemon_stop(&d), 0);
}

/* Operator rules for a user: a default proportion for instances that ask
 * for none, and a cap on what the user holds per device. */
static void test_user_rules(void **state)
{
	char text[128];
	snprintf(text, sizeof(text), "uid.%u.proportion = 0.25\nuid.%u.cap = 1MiB\n",
	         (unsigned)getuid(), (unsigned)getuid());
	write_conf(text);
	const char *extra[] = {"--config", conf_path, NULL};
	struct th_daemon d;
	th_daemon_start(&d, extra);
	gpb_client *c = th_client(&d, "ruled");
	struct gpb_register_opts opts = {.name = "r"};
	uint64_t inst;
	struct gpb_allocation a, b;
	assert_int_equal(gpb_register(c, &opts, &inst), 0);
	char *json = NULL;
	assert_int_equal(gpb_request(c, "policy", NULL, &json), 0);
	assert_non_null(strstr(json, "\"proportion\":0.25"));
	gpb_string_free(json);
	assert_int_equal(gpb_alloc(c, inst, 768 << 10, 0, &a), 0);
	assert_int_equal(gpb_alloc(c, inst, 512 << 10, 0, &b), GPB_E_QUOTA);
	assert_non_null(strstr(gpb_last_error(), "may hold 1048576 bytes per device"));
	/* Lifting the cap by reload lets it through. */
	write_conf("");
	assert_int_equal(gpb_request(c, "reload", NULL, &json), 0);
	assert_non_null(strstr(json, "\"rules\""));
	gpb_string_free(json);
	assert_int_equal(gpb_alloc(c, inst, 512 << 10, 0, &b), 0);
	gpb_disconnect(c);
	assert_int_equal(th_daemon_stop(&d), 0);
}

/* max_inflight bounds the requests of one connection waiting at once. */
static void test_inflight_limit(void **state)
{
	write_conf("max_inflight = 1\nlimit = 1MiB\n");
	const char *extra[] = {"--config", conf_path, NULL};
	struct th_daemon d;
	th_daemon_start(&d, extra);
	int fd = th_connect(d.socket);
	th_hello(fd);
	char reply[4096], req[256];
	assert_true(th_call(fd,
	                    "{\"id\":\"r\",\"method\":\"register\",\"params\":{\"name\":\"w\"}}",
	                    reply, sizeof(reply)) > 0);
	char *p = strstr(reply, "\"instance\":\"");
	assert_non_null(p);
	char inst[17];
	memcpy(inst, p + 12, 16);
	inst[16] = '\0';
	/* Over the 1 MiB limit: the first waits, the second is refused. */
	for (int i = 0; i < 2; i++) {
		int n = snprintf(req, sizeof(req),
		                 "{\"id\":\"w%d\",\"method\":\"alloc\",\"params\":{\"instance\":"
		                 "\"%s\",\"size\":\"2097152\",\"wait_ms\":5000}}\n",
		                 i, inst);
		assert_int_equal(th_send(fd, req, (size_t)n), 0);
	}
	assert_true(th_read_line(fd, reply, sizeof(reply), 5000) > 0);
	assert_non_null(strstr(reply, "\"id\":\"w1\""));
	assert_non_null(strstr(reply, "\"limit\":\"max_inflight\""));
	th_close(fd);
	assert_int_equal(th_daemon_stop(&d), 0);
}

static void test_per_uid_limit(void **state)
{
	write_conf("max_clients_per_uid = 2\n");
	const char *extra[] = {"--config", conf_path, NULL};
	struct th_daemon d;
	th_daemon_start(&d, extra);
	gpb_client *a = th_client(&d, "a"), *b = th_client(&d, "b"), *c = NULL;
	/* Refused every time, whether the refusal arrives before or after the
	 * library's hello is written. */
	for (int i = 0; i < 20; i++) {
		assert_int_equal(gpb_connect(d.socket, "c", &c), GPB_E_LIMIT);
		assert_null(c);
		assert_non_null(strstr(gpb_last_error(), "too many clients of this user"));
	}
	gpb_disconnect(b);
	/* The slot frees when a connection ends. */
	int rc = GPB_E_LIMIT;
	for (int i = 0; i < 200 && rc == GPB_E_LIMIT; i++) {
		rc = gpb_connect(d.socket, "c", &c);
		if (rc == GPB_E_LIMIT)
			usleep(10000);
	}
	assert_int_equal(rc, 0);
	gpb_disconnect(c);
	gpb_disconnect(a);
	assert_int_equal(th_daemon_stop(&d), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_bad_file_refused), cmocka_unit_test(test_reload),
	    cmocka_unit_test(test_admin_only),       cmocka_unit_test(test_user_rules),
	    cmocka_unit_test(test_inflight_limit),   cmocka_unit_test(test_per_uid_limit),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
