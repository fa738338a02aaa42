/*
 * test-ctl-commands.c - gpubrokerctl against the real daemon: formats, exit codes,
 * top, --help against the CLI's own command table,
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

/* Runs gpubrokerctl --socket socket args... into out. */
static int ctl_at(const char *socket, const char *a1, const char *a2, const char *a3,
                  const char *a4)
{
	char *argv[10] = {(char *)th_env("GPB_CTL"), "--socket", (char *)socket};
	int n = 3;
	const char *args[] = {a1, a2, a3, a4};
	for (int i = 0; i < 4 && args[i]; i++)
		argv[n++] = (char *)args[i];
	argv[n] = NULL;
	return th_run(argv, NULL, out, sizeof(out));
}

/* Runs gpubrokerctl --socket <daemon> args... */
static int ctl(const char *a1, const char *a2, const char *a3, const char *a4)
{
	return ctl_at(daemon_.socket, a1, a2, a3, a4);
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

/* A status device's member key as a string ("" for null), from out. */
static const char *status_dev(cJSON *root, int device, const char *key)
{
	const cJSON *v = cJSON_GetObjectItem(
	    cJSON_GetArrayItem(cJSON_GetObjectItem(root, "devices"), device), key);
	assert_non_null(v);
	static char text[64];
	if (cJSON_IsNumber(v))
		snprintf(text, sizeof(text), "%g", v->valuedouble);
	else
		snprintf(text, sizeof(text), "%s", cJSON_IsNull(v) ? "" : cJSON_GetStringValue(v));
	return text;
}

/* status shows the policy mode, the allocator and each device's limit
 * (bytes or a fraction) in its table, json and csv: what an operator looks
 * at first. */
static void test_status_policy(void **state)
{
	if (geteuid() != 0)
		skip(); /* the setters are for administrators */
	struct th_daemon d;
	th_daemon_start(&d, NULL);
	assert_int_equal(ctl_at(d.socket, "status", NULL, NULL, NULL), 0);
	assert_non_null(strstr(out, "\nmode         passive\n"));
	assert_non_null(strstr(out, "\nallocator    pool\n"));
	assert_non_null(strstr(out, "  LIMIT  RESERVED"));
	assert_non_null(strstr(out, "1.0 GiB      -  "));

	assert_int_equal(ctl_at(d.socket, "set-mode", "active", NULL, NULL), 0);
	assert_int_equal(ctl_at(d.socket, "set-allocator", "direct", NULL, NULL), 0);
	assert_int_equal(ctl_at(d.socket, "set-limit", "--device", "0", "512MiB"), 0);
	assert_int_equal(ctl_at(d.socket, "set-limit", "--device", "1", "25%"), 0);

	assert_int_equal(ctl_at(d.socket, "status", NULL, NULL, NULL), 0);
	assert_non_null(strstr(out, "\nmode         active\n"));
	assert_non_null(strstr(out, "\nallocator    direct\n"));
	assert_non_null(strstr(out, "  512.0 MiB  "));
	assert_non_null(strstr(out, "  25% (256.0 MiB)  "));

	assert_int_equal(ctl_at(d.socket, "--output", "json", "status", NULL), 0);
	cJSON *root = cJSON_Parse(out);
	assert_non_null(root);
	assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(root, "mode")), "active");
	assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(root, "allocator")), "direct");
	assert_string_equal(status_dev(root, 0, "limit"), "536870912");
	assert_string_equal(status_dev(root, 0, "limit_fraction"), "");
	assert_string_equal(status_dev(root, 0, "capacity"), "536870912");
	assert_string_equal(status_dev(root, 1, "limit"), "");
	assert_string_equal(status_dev(root, 1, "limit_fraction"), "0.25");
	assert_string_equal(status_dev(root, 1, "capacity"), "268435456");
	cJSON_Delete(root);

	assert_int_equal(ctl_at(d.socket, "--output", "csv", "status", NULL), 0);
	assert_non_null(strstr(
	    out,
	    "device,name,total,reserved,used,fenced,orphaned,limit,limit_fraction,transport\n"));
	assert_non_null(strstr(out, ",536870912,,memfd\n"));
	assert_non_null(strstr(out, ",,0.25,memfd\n"));

	/* No limit again: "-", and null in json. */
	assert_int_equal(ctl_at(d.socket, "set-limit", "none", NULL, NULL), 0);
	assert_int_equal(ctl_at(d.socket, "status", NULL, NULL, NULL), 0);
	assert_null(strstr(out, "MiB)"));
	assert_null(strstr(out, "512.0 MiB"));
	assert_int_equal(ctl_at(d.socket, "set-allocator", "pool", NULL, NULL), 0);
	assert_int_equal(th_daemon_stop(&d), 0);
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

/* Operator commands: version, metrics, reload, evict. */
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
	/* This daemon has no uid or group rules: the family, no series. (The
	 * format, the new series and --textfile: test-metrics-exposition.c.) */
	assert_non_null(strstr(out, "# TYPE gpubroker_uid_cap_bytes gauge\n"));
	assert_null(strstr(out, "gpubroker_uid_cap_bytes{"));

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
	/* Its process (this one) lives on with the allocation mapped: the
	 * range stays allocated, fenced, until it exits. */
	assert_int_equal(th_status_used(holder), used);
	assert_int_equal(th_status_field(holder, "fenced"), 1 << 20);
	assert_int_equal(ctl("--output", "csv", "--no-header", "status"), 0);
	/* fenced, orphaned, no limit, transport of device 0 */
	assert_non_null(strstr(out, ",1048576,0,,,memfd\n"));
	gpb_disconnect(victim);
}

/* Runs gpubrokerctl --socket <daemon> args (NULL-terminated) for ms
 * milliseconds, then SIGINT; returns its exit status (-1 when killed), its
 * stdout in out. */
static int ctl_interrupted(int ms, const char *const *args)
{
	char *argv[16] = {(char *)th_env("GPB_CTL"), "--socket", daemon_.socket};
	int n = 3;
	for (int i = 0; args[i]; i++) {
		assert_true(n < 15);
		argv[n++] = (char *)args[i];
	}
	argv[n] = NULL;
	int pipefd[2];
	assert_int_equal(pipe(pipefd), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(pipefd[1], STDOUT_FILENO);
		close(pipefd[0]);
		close(pipefd[1]);
		execv(argv[0], argv);
		_exit(127);
	}
	close(pipefd[1]);
	usleep((useconds_t)ms * 1000);
	kill(pid, SIGINT);
	/* Read to the end before reaping: a full pipe would hold it up. */
	size_t len = 0;
	ssize_t r;
	while ((r = read(pipefd[0], out + len, sizeof(out) - 1 - len)) > 0)
		len += (size_t)r;
	out[len] = '\0';
	close(pipefd[0]);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int count(const char *text, const char *what)
{
	int n = 0;
	for (const char *p = text; (p = strstr(p, what)); p++)
		n++;
	return n;
}

/* -l repeats until interrupted; SIGINT ends it with status 0. */
static void test_repeat(void **state)
{
	const char *args[] = {"--output", "json", "-l", "1", "status", NULL};
	assert_int_equal(ctl_interrupted(2500, args), 0);
	assert_true(count(out, "\"backend\"") >= 2);
}

/* top: status and clients, redrawn in place every -l seconds until
 * interrupted; a table view only. */
static void test_top(void **state)
{
	const char *args[] = {"-l", "0.2", "top", NULL};
	assert_int_equal(ctl_interrupted(1000, args), 0);
	/* Several screens, each cleared first (home, clear) and holding the
	 * daemon summary, the device table and the client table with the
	 * holder connected since setup. The last may have been cut short by
	 * the interrupt; the others are whole. */
	static const char clear[] = "\033[H\033[2J";
	int screens = count(out, clear);
	assert_true(screens >= 2);
	char *p = strstr(out, clear);
	assert_true(p == out);
	for (int i = 0; i < screens - 1; i++) {
		char *next = strstr(p + 1, clear);
		*next = '\0';
		assert_non_null(strstr(p, "backend      sim\n"));
		assert_non_null(strstr(p, "DEVICE"));
		assert_non_null(strstr(p, "SESSION"));
		assert_non_null(strstr(p, "cli-holder"));
		*next = clear[0];
		p = next;
	}
	/* 1 second by default: one screen in 0.8 seconds. */
	const char *plain[] = {"top", NULL};
	assert_int_equal(ctl_interrupted(800, plain), 0);
	assert_int_equal(count(out, "\033[H\033[2J"), 1);
	assert_non_null(strstr(out, "cli-holder"));

	/* --no-header drops the header lines of both tables, not the rows. */
	const char *bare[] = {"--no-header", "-l", "0.2", "top", NULL};
	assert_int_equal(ctl_interrupted(500, bare), 0);
	assert_null(strstr(out, "DEVICE"));
	assert_null(strstr(out, "SESSION"));
	assert_non_null(strstr(out, "cli-holder"));

	/* Table only (gpubrokerctl(1)): json and csv are usage errors. */
	assert_int_equal(ctl("--output", "json", "top", NULL), 2);
	assert_int_equal(ctl("--output", "csv", "top", NULL), 2);
	assert_string_equal(out, "");
	/* top changes nothing, but it takes no argument. */
	assert_int_equal(ctl("top", "extra", NULL, NULL), 2);
}

/* The words of a C source that follow each occurrence of marker, as far as
 * the next '"': the names in gpubrokerctl's tables. */
static int source_names(const char *src, const char *marker, char names[][32], int max)
{
	int n = 0;
	for (const char *p = src; (p = strstr(p, marker)) && n < max; p++) {
		const char *s = p + strlen(marker), *e = strchr(s, '"');
		assert_non_null(e);
		assert_true(e - s > 0 && e - s < 32);
		snprintf(names[n++], 32, "%.*s", (int)(e - s), s);
	}
	return n;
}

/* --help exits 0 and describes every command and long option the CLI has,
 * as its own tables in client/ctl/gpubrokerctl.c list them. */
static void test_help(void **state)
{
	char *argv[] = {(char *)th_env("GPB_CTL"), "--help", NULL};
	assert_int_equal(th_run(argv, NULL, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "Usage: gpubrokerctl [OPTIONS] COMMAND\n"));
	assert_non_null(strstr(out, "Exit status:"));
	char *argv_h[] = {(char *)th_env("GPB_CTL"), "-h", "status", NULL};
	static char short_out[sizeof(out)];
	assert_int_equal(th_run(argv_h, NULL, short_out, sizeof(short_out)), 0);
	assert_string_equal(short_out, out);

	const char *path = getenv("GPB_CTL_SOURCE");
	FILE *f = path ? fopen(path, "r") : NULL;
	if (!f) {
		/* A build tree moved away from its sources. */
		print_message("GPB_CTL_SOURCE '%s' unreadable: commands not compared\n",
		              path ? path : "(unset)");
		return;
	}
	static char src[262144];
	size_t len = fread(src, 1, sizeof(src) - 1, f);
	fclose(f);
	src[len] = '\0';
	char names[64][32];
	/* The command table; `layout`, which needs no daemon, is the one
	 * command main() handles before it. */
	int ncmd = source_names(src, "{.name = \"", names, 64);
	assert_true(ncmd >= 15);
	assert_non_null(strstr(src, "strcmp(o.command, \"layout\")"));
	snprintf(names[ncmd++], 32, "layout");
	for (int i = 0; i < ncmd; i++) {
		/* Listed at the start of a line of its own section. */
		char entry[40];
		snprintf(entry, sizeof(entry), "\n  %.31s ", names[i]);
		if (!strstr(out, entry))
			fail_msg("--help does not describe the command '%s'", names[i]);
	}
	/* Every long option of getopt_long's table. */
	char *opts = strstr(src, "longopts[] = {");
	assert_non_null(opts);
	char *end = strstr(opts, "{NULL, 0, NULL, 0}");
	assert_non_null(end);
	*end = '\0';
	int nopt = source_names(opts, "{\"", names, 64);
	assert_true(nopt >= 7);
	for (int i = 0; i < nopt; i++) {
		char opt[40];
		snprintf(opt, sizeof(opt), "--%.31s", names[i]);
		if (!strstr(out, opt))
			fail_msg("--help does not mention %s", opt);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_status_json),
	    cmocka_unit_test(test_status_table),
	    cmocka_unit_test(test_status_policy),
	    cmocka_unit_test(test_devices_csv),
	    cmocka_unit_test(test_clients_and_stats),
	    cmocka_unit_test(test_exit_codes),
	    cmocka_unit_test(test_operator_commands),
	    cmocka_unit_test(test_evict),
	    cmocka_unit_test(test_repeat),
	    cmocka_unit_test(test_top),
	    cmocka_unit_test(test_help),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
