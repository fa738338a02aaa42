/*
 * test-cli.c - gpubrokerctl against the real daemon: formats, exit codes,
 * repetition, socket selection.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "harness.h"

static struct th_daemon daemon_;
static gpb_client *holder;
static char out[65536];

static int setup(void **state)
{
	th_daemon_start(&daemon_, NULL);
	holder = th_client(&daemon_, "cli-holder");
	struct gpb_register_opts opts = {.name = "held", .device = 1};
	uint64_t inst;
	struct gpb_allocation a;
	assert_int_equal(gpb_register(holder, &opts, &inst), 0);
	assert_int_equal(gpb_alloc(holder, inst, 3 << 20, 0, &a), 0);
	return 0;
}

static int teardown(void **state)
{
	gpb_disconnect(holder);
	assert_int_equal(th_daemon_stop(&daemon_), 0);
	return 0;
}

/* Runs gpubrokerctl --socket <daemon> args... */
static int ctl(const char *a1, const char *a2, const char *a3, const char *a4)
{
	char *argv[10] = {(char *)th_env("GPB_CTL"), "--socket", daemon_.socket};
	int n = 3;
	const char *args[] = {a1, a2, a3, a4};
	for (int i = 0; i < 4 && args[i]; i++)
		argv[n++] = (char *)args[i];
	argv[n] = NULL;
	return th_run(argv, NULL, out, sizeof(out));
}

static void test_status_json(void **state)
{
	assert_int_equal(ctl("--output", "json", "status", NULL), 0);
	cJSON *root = cJSON_Parse(out);
	assert_non_null(root);
	assert_string_equal(cJSON_GetObjectItem(root, "backend")->valuestring, "sim");
	const cJSON *totals = cJSON_GetObjectItem(root, "totals");
	assert_string_equal(cJSON_GetObjectItem(totals, "used")->valuestring, "3145728");
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(root, "devices")), 2);
	/* The CLI's own connection is counted with the holder. */
	assert_int_equal(cJSON_GetObjectItem(root, "clients")->valueint, 2);
	cJSON_Delete(root);
}

static void test_status_table(void **state)
{
	assert_int_equal(ctl("status", NULL, NULL, NULL), 0);
	assert_non_null(strstr(out, "sim"));
	assert_non_null(strstr(out, "1.0 GiB"));
	assert_non_null(strstr(out, "3.0 MiB"));
}

static void test_devices_csv(void **state)
{
	assert_int_equal(ctl("--output", "csv", "devices", NULL), 0);
	char *line2 = strchr(out, '\n');
	assert_non_null(line2);
	assert_non_null(strstr(out, "device"));       /* header */
	assert_non_null(strstr(line2, "1073741824")); /* exact bytes */
	assert_non_null(strstr(out, "GPU-5117d000")); /* uuid */
	assert_int_equal(ctl("--output", "csv", "--no-header", "devices"), 0);
	assert_null(strstr(out, "device,"));
	int lines = 0;
	for (char *p = out; *p; p++)
		lines += *p == '\n';
	assert_int_equal(lines, 2);
}

static void test_clients_and_stats(void **state)
{
	assert_int_equal(ctl("clients", NULL, NULL, NULL), 0);
	assert_non_null(strstr(out, "cli-holder"));
	assert_int_equal(ctl("--output", "json", "stats", NULL), 0);
	cJSON *root = cJSON_Parse(out);
	assert_non_null(root);
	const cJSON *dev1 = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "devices"), 1);
	assert_string_equal(cJSON_GetObjectItem(dev1, "used")->valuestring, "3145728");
	assert_string_equal(cJSON_GetObjectItem(dev1, "live")->valuestring, "1");
	cJSON_Delete(root);
	assert_int_equal(ctl("--output", "csv", "stats", NULL), 0);
	assert_non_null(strstr(out, "3145728"));

	/* --device takes an index or a UUID (from `devices`). */
	assert_int_equal(ctl("--output", "json", "devices", NULL), 0);
	root = cJSON_Parse(out);
	assert_non_null(root);
	char uuid[80];
	snprintf(uuid, sizeof(uuid), "%s",
	         cJSON_GetStringValue(cJSON_GetObjectItem(
	             cJSON_GetArrayItem(cJSON_GetObjectItem(root, "devices"), 1), "uuid")));
	cJSON_Delete(root);
	const char *by[] = {"1", uuid};
	for (int i = 0; i < 2; i++) {
		assert_int_equal(ctl("--output", "json", "--device", by[i]), 2); /* no command */
		char *argv[] = {(char *)th_env("GPB_CTL"),
		                "--socket",
		                daemon_.socket,
		                "--output",
		                "json",
		                "--device",
		                (char *)by[i],
		                "stats",
		                NULL};
		assert_int_equal(th_run(argv, NULL, out, sizeof(out)), 0);
		root = cJSON_Parse(out);
		assert_non_null(root);
		const cJSON *devs = cJSON_GetObjectItem(root, "devices");
		assert_int_equal(cJSON_GetArraySize(devs), 1);
		assert_int_equal(
		    cJSON_GetObjectItem(cJSON_GetArrayItem(devs, 0), "device")->valueint, 1);
		cJSON_Delete(root);
	}
	assert_int_equal(ctl("--device", "GPU-no-such-device", "stats", NULL), 1);
}

static void test_exit_codes(void **state)
{
	assert_int_equal(ctl("nosuchcommand", NULL, NULL, NULL), 2);
	assert_int_equal(ctl("--output", "yaml", "status", NULL), 2);
	char *argv[] = {(char *)th_env("GPB_CTL"), "--socket", "/tmp/gpb-test-nothing-here.sock",
	                "status", NULL};
	assert_int_equal(th_run(argv, NULL, out, sizeof(out)), 3);
	/* GPUBROKER_SOCKET picks the daemon when --socket is absent. */
	char env[200];
	snprintf(env, sizeof(env), "GPUBROKER_SOCKET=%s", daemon_.socket);
	char *argv2[] = {(char *)th_env("GPB_CTL"), "--output", "json", "status", NULL};
	char *envv[] = {env, NULL};
	assert_int_equal(th_run(argv2, envv, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "\"backend\":\"sim\""));
}

/* Operator commands: version, metrics (stdout and an atomic textfile),
 * reload, evict. */
static void test_operator_commands(void **state)
{
	assert_int_equal(ctl("version", NULL, NULL, NULL), 0);
	assert_non_null(strstr(out, "gpubrokerd   0.1.0 (backend sim)"));

	assert_int_equal(ctl("metrics", NULL, NULL, NULL), 0);
	assert_non_null(strstr(out, "# TYPE gpubroker_device_used_bytes gauge"));
	assert_non_null(strstr(out, "gpubroker_device_used_bytes{device=\"1\""));
	assert_non_null(strstr(out, "gpubroker_device_orphaned_bytes{device=\"1\""));
	assert_non_null(strstr(out, "} 3145728\n"));
	assert_non_null(strstr(out, "gpubroker_requests_total{method=\"alloc\",result=\"ok\"}"));
	assert_non_null(strstr(out, "gpubroker_request_duration_seconds_count"));
	char path[64];
	snprintf(path, sizeof(path), "/tmp/gpb-test-metrics-%d.prom", (int)getpid());
	assert_int_equal(ctl("metrics", "--textfile", path, NULL), 0);
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	char line[256];
	bool found = false;
	while (fgets(line, sizeof(line), f))
		found |= strncmp(line, "gpubroker_build_info{", 21) == 0;
	fclose(f);
	unlink(path);
	assert_true(found);
	/* promtool, when installed, validates the exposition format. */
	if (access("/usr/bin/promtool", X_OK) == 0) {
		char cmd[512];
		snprintf(cmd, sizeof(cmd),
		         "%s --socket %s metrics | /usr/bin/promtool check metrics",
		         th_env("GPB_CTL"), daemon_.socket);
		char *argv[] = {"/bin/sh", "-c", cmd, NULL};
		assert_int_equal(th_run(argv, NULL, out, sizeof(out)), 0);
	}

	/* The test runs as the daemon's uid: root is an admin. */
	if (geteuid() == 0) {
		assert_int_equal(ctl("reload", NULL, NULL, NULL), 0);
		assert_non_null(strstr(out, "applied:"));
	}
	assert_int_equal(ctl("evict", "nothex", NULL, NULL), 2);
	assert_int_equal(ctl("--textfile", "/tmp/x", "status", NULL), 2);
}

/* An administrator evicts a client: it hears why, its memory is reclaimed. */
static void test_evict(void **state)
{
	if (geteuid() != 0)
		skip();
	gpb_client *victim = th_client(&daemon_, "victim");
	struct gpb_register_opts opts = {.name = "v"};
	uint64_t inst;
	struct gpb_allocation a;
	assert_int_equal(gpb_register(victim, &opts, &inst), 0);
	assert_int_equal(gpb_alloc(victim, inst, 1 << 20, 0, &a), 0);
	uint64_t used = th_status_used(holder);
	char *json = NULL, session[17] = "";
	assert_int_equal(gpb_request(victim, "status", NULL, &json), 0);
	gpb_string_free(json);
	assert_int_equal(ctl("--output", "csv", "--no-header", "clients"), 0);
	for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
		if (strstr(line, ",victim,"))
			memcpy(session, line, 16);
	}
	assert_int_equal(strlen(session), 16);
	assert_int_equal(ctl("evict", session, NULL, NULL), 0);
	assert_int_equal(ctl("evict", session, NULL, NULL), 1); /* gone: not found */
	int rc = 0;
	for (int i = 0; i < 200 && rc != GPB_E_DAEMON_GONE; i++) {
		usleep(10000);
		rc = gpb_alloc(victim, inst, 4096, 0, &a);
	}
	assert_int_equal(rc, GPB_E_DAEMON_GONE);
	gpb_disconnect(victim);
	assert_int_equal(th_status_used(holder), used - (1 << 20));
}

/* -l repeats until interrupted; SIGINT ends it with status 0. */
static void test_repeat(void **state)
{
	int pipefd[2];
	assert_int_equal(pipe(pipefd), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(pipefd[1], STDOUT_FILENO);
		close(pipefd[0]);
		execl(th_env("GPB_CTL"), "gpubrokerctl", "--socket", daemon_.socket, "--output",
		      "json", "-l", "1", "status", (char *)NULL);
		_exit(127);
	}
	close(pipefd[1]);
	sleep(2);
	usleep(500000);
	kill(pid, SIGINT);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	ssize_t n = read(pipefd[0], out, sizeof(out) - 1);
	close(pipefd[0]);
	assert_true(n > 0);
	out[n] = '\0';
	int reports = 0;
	for (char *p = out; (p = strstr(p, "\"backend\"")); p++)
		reports++;
	assert_true(reports >= 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_status_json), cmocka_unit_test(test_status_table),
	    cmocka_unit_test(test_devices_csv), cmocka_unit_test(test_clients_and_stats),
	    cmocka_unit_test(test_exit_codes),  cmocka_unit_test(test_operator_commands),
	    cmocka_unit_test(test_evict),       cmocka_unit_test(test_repeat),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
