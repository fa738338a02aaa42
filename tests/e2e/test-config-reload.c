/*
 * test-config-reload.c - the configuration file against the real daemon: errors
 * name the file and line, reload applies what can change live and keeps the
 * old configuration on errors, flags beat the file, per-user connection
 * limits hold. Admin operations and group rules: test-access.c.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static char conf_path[64];

static void write_conf(const char *text)
{
	th_write_file(conf_path, text);
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

static char log_path[80];
static char log_want[128];

/* Whether the daemon's log (log_path) names log_want twice. */
static bool log_says_twice(void *arg)
{
	return th_file_has(log_path, log_want, 2);
}

/* `gpubrokerctl reload` with a broken file: it fails, saying which file,
 * line and key; the running configuration stays and clients are served.
 * SIGHUP logs the same. */
static void test_reload_cli_bad_file(void **state)
{
	write_conf("max_instances = 2\n");
	snprintf(log_path, sizeof(log_path), "%s.log", conf_path);
	unlink(log_path);
	const char *extra[] = {"--config", conf_path, NULL};
	struct th_daemon d;
	struct th_daemon_opts o = {.extra = extra, .log_path = log_path};
	th_daemon_start_opts(&d, &o);
	gpb_client *c = th_client(&d, "bystander");
	assert_int_equal(try_register(c), 0);
	assert_int_equal(try_register(c), 0);

	write_conf("max_instances = 5\n\nmax_instanses = 6\n");
	char cmd[512], out[4096], want[128];
	snprintf(cmd, sizeof(cmd), "%s --socket %s reload 2>&1", th_env("GPB_CTL"), d.socket);
	char *argv[] = {"/bin/sh", "-c", cmd, NULL};
	assert_int_equal(th_run(argv, NULL, out, sizeof(out)), 1);
	snprintf(want, sizeof(want), "%s:3: unknown key 'max_instanses'", conf_path);
	if (!strstr(out, want) || !strstr(out, "stays in force"))
		fail_msg("want '%s', got '%s'", want, out);

	/* max_instances is still 2, for the client connected throughout and
	 * for a new one. */
	assert_int_equal(try_register(c), GPB_E_LIMIT);
	gpb_client *late = th_client(&d, "late");
	assert_int_equal(try_register(late), 0);
	assert_int_equal(try_register(late), 0);
	assert_int_equal(try_register(late), GPB_E_LIMIT);
	assert_int_equal(th_status_field(c, "clients"), 2);

	/* The reload request's failure was logged; SIGHUP's is too. */
	snprintf(log_want, sizeof(log_want), "%s:3: unknown key 'max_instanses'; the running",
	         conf_path);
	assert_int_equal(kill(d.pid, SIGHUP), 0);
	assert_true(th_wait_for(log_says_twice, NULL, 5000));
	assert_int_equal(try_register(c), GPB_E_LIMIT);
	gpb_disconnect(late);
	gpb_disconnect(c);
	assert_int_equal(th_daemon_stop(&d), 0);
	unlink(log_path);
}

/* Counts "device": entries in a `devices` result. */
static int device_count(gpb_client *c)
{
	char *json = NULL;
	int n = 0;
	assert_int_equal(gpb_request(c, "devices", NULL, &json), 0);
	for (const char *p = json; (p = strstr(p, "\"device\":")); p++)
		n++;
	gpb_string_free(json);
	return n;
}

/* Registers until refused; returns how many instances one client got. */
static int instances_allowed(const struct th_daemon *d)
{
	gpb_client *c = th_client(d, "counter");
	int n = 0;
	while (n < 10 && try_register(c) == 0)
		n++;
	gpb_disconnect(c);
	return n;
}

/* A command-line flag beats the same key in the file, at start and after a
 * reload (which re-applies the flags on top of the re-read file). */
static void test_flag_beats_file(void **state)
{
	write_conf("sim_devices = 1\nmax_instances = 1\n");
	/* The harness passes --sim-devices 2. */
	const char *extra[] = {"--config", conf_path, "--max-instances", "3", NULL};
	struct th_daemon d;
	th_daemon_start(&d, extra);
	gpb_client *c = th_client(&d, "watcher");
	assert_int_equal(device_count(c), 2);
	assert_int_equal(instances_allowed(&d), 3);

	write_conf("sim_devices = 1\nmax_instances = 2\nmax_allocations = 50\n");
	char *json = NULL;
	assert_int_equal(gpb_request(c, "reload", NULL, &json), 0);
	if (!strstr(json, "\"applied\":[\"max_allocations\"]") ||
	    !strstr(json, "\"needs_restart\":[]"))
		fail_msg("reload: %s", json);
	gpb_string_free(json);
	assert_int_equal(device_count(c), 2);
	assert_int_equal(instances_allowed(&d), 3);
	gpb_disconnect(c);
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
	    cmocka_unit_test(test_bad_file_refused),    cmocka_unit_test(test_reload),
	    cmocka_unit_test(test_reload_cli_bad_file), cmocka_unit_test(test_flag_beats_file),
	    cmocka_unit_test(test_user_rules),          cmocka_unit_test(test_inflight_limit),
	    cmocka_unit_test(test_per_uid_limit),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
