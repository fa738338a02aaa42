/*
 * test-conf.c - the configuration file parser: every key, every bad line.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conf.h"
#include "log.h"

static int parse(const char *text, struct conf *cfg, struct conf_error *err)
{
	conf_defaults(cfg);
	return conf_parse(text, strlen(text), cfg, err);
}

static void test_defaults(void **state)
{
	struct conf cfg;
	conf_defaults(&cfg);
	assert_string_equal(cfg.backend, "auto");
	assert_string_equal(cfg.socket, "/run/gpubroker/gpubroker.sock");
	assert_int_equal(cfg.socket_mode, 0660);
	assert_string_equal(cfg.socket_group, "gpubroker");
	assert_string_equal(cfg.admin_group, "gpubroker-admin");
	assert_int_equal(cfg.sim_devices, 1);
	assert_int_equal(cfg.sim_memory, 16ull << 30);
	assert_int_equal(cfg.limits.slab_size, 64u << 20);
	assert_int_equal(cfg.limits.max_clients, 1024);
	assert_int_equal(cfg.admin_reserved_connections, 3);
	assert_int_equal(cfg.limits.write_high_water, 256u << 10);
	assert_int_equal(cfg.max_output_per_client, 1u << 20);
	assert_int_equal(cfg.max_output_total, 64u << 20);
	assert_int_equal(cfg.set, 0);
}

/* Every key, set to a non-default value, lands in its field. */
static void test_every_key(void **state)
{
	const char *text = "# a comment\n"
	                   "backend = sim\n"
	                   "cuda_transport = ipc\n"
	                   "socket = /tmp/x.sock   # trailing comment\n"
	                   "socket_mode = 0600\n"
	                   "socket_group = gpu\n"
	                   "admin_group = ops\n"
	                   "\n"
	                   "   sim_devices=3\n"
	                   "sim_memory = 2GiB\n"
	                   "slab_size = 4MiB\n"
	                   "log_level = debug\n"
	                   "max_clients = 10\n"
	                   "max_clients_per_uid = 5\n"
	                   "max_instances = 7\n"
	                   "max_allocations = 100\n"
	                   "hello_timeout_ms = 1500\n"
	                   "paused_timeout_ms = 2500\n"
	                   "recall_timeout_ms = 250\n"
	                   "write_high_water = 1MiB\r\n"
	                   "mode = active\n"
	                   "limit = 90%\n"
	                   "allocator = direct\n"
	                   "min_auto_share = 0.25\n"
	                   "max_inflight = 3\n"
	                   "max_host_memory = 64MiB\n"
	                   "admin_reserved_connections = 0\n"
	                   "max_output_per_client = 8MiB\n"
	                   "max_output_total = 1GiB\n"
	                   "reserve = 512MiB\n";
	struct conf cfg;
	struct conf_error err;
	assert_int_equal(parse(text, &cfg, &err), 0);
	assert_string_equal(cfg.backend, "sim");
	assert_string_equal(cfg.cuda_transport, "ipc");
	assert_string_equal(cfg.socket, "/tmp/x.sock");
	assert_int_equal(cfg.socket_mode, 0600);
	assert_string_equal(cfg.socket_group, "gpu");
	assert_string_equal(cfg.admin_group, "ops");
	assert_int_equal(cfg.sim_devices, 3);
	assert_int_equal(cfg.sim_memory, 2ull << 30);
	assert_int_equal(cfg.limits.slab_size, 4u << 20);
	assert_int_equal(cfg.log_level, LOG_LEVEL_DEBUG);
	assert_int_equal(cfg.limits.max_clients, 10);
	assert_int_equal(cfg.max_clients_per_uid, 5);
	assert_int_equal(cfg.limits.max_instances, 7);
	assert_int_equal(cfg.limits.max_allocations, 100);
	assert_int_equal(cfg.limits.hello_timeout_ms, 1500);
	assert_int_equal(cfg.limits.paused_timeout_ms, 2500);
	assert_int_equal(cfg.limits.recall_timeout_ms, 250);
	assert_int_equal(cfg.limits.write_high_water, 1u << 20);
	assert_int_equal(cfg.limits.mode, POLICY_ACTIVE);
	assert_string_equal(cfg.limit, "90%");
	assert_string_equal(cfg.allocator, "direct");
	assert_true(cfg.limits.min_auto_share == 0.25);
	assert_int_equal(cfg.limits.max_inflight, 3);
	assert_int_equal(cfg.limits.max_host_memory, 64ull << 20);
	assert_int_equal(cfg.admin_reserved_connections, 0);
	assert_int_equal(cfg.max_output_per_client, 8u << 20);
	assert_int_equal(cfg.max_output_total, 1ull << 30);
	assert_int_equal(cfg.reserve, 512ull << 20);
	assert_int_equal(cfg.set, (1ull << CONF_KEY_COUNT) - 1);
	for (int k = 0; k < CONF_KEY_COUNT; k++)
		assert_non_null(strstr(text, conf_key_name(k)));
}

/* Each bad line: -EINVAL, the line number and key in the error, the
 * configuration untouched. */
static void test_bad_lines(void **state)
{
	static const struct {
		const char *text;
		unsigned line;
		const char *key;
		const char *says;
	} cases[] = {
	    {"backend = gpu\n", 1, "backend", "auto, sim or cuda"},
	    {"\n\nnosuch = 1\n", 3, "nosuch", "unknown key"},
	    {"max_clients\n", 1, "", "key = value"},
	    {"= 5\n", 1, "", "missing key"},
	    {"max_clients = 0\n", 1, "max_clients", "from 1"},
	    {"max_clients = -1\n", 1, "max_clients", "integer"},
	    {"max_clients = 1x\n", 1, "max_clients", "integer"},
	    {"max_clients = \n", 1, "max_clients", "integer"},
	    {"max_clients = 99999999999999999999\n", 1, "max_clients", "integer"},
	    {"sim_devices = 65\n", 1, "sim_devices", "from 1 to 64"},
	    {"sim_memory = lots\n", 1, "sim_memory", "size"},
	    {"sim_memory = 100\n", 1, "sim_memory", "size"},
	    {"slab_size = 3MiB\n", 1, "slab_size", "multiple of 2MiB"},
	    {"socket_mode = 0999\n", 1, "socket_mode", "octal"},
	    {"socket_mode = 01777\n", 1, "socket_mode", "octal"},
	    {"log_level = loud\n", 1, "log_level", "error, warn"},
	    {"socket = \n", 1, "socket", "bytes long"},
	    {"max_clients = 5\nmax_clients = 6\n", 2, "max_clients", "twice"},
	    {"uid.7.cap = 1GiB\nuid.7.cap = 1GiB\n", 2, "uid.7.cap", "twice"},
	    {"Max_Clients = 5\n", 1, "Max_Clients", "unknown key"},
	    {"mode = strict\n", 1, "mode", "active or passive"},
	    {"limit = 0\n", 1, "limit", "percentage"},
	    {"limit = 150%\n", 1, "limit", "percentage"},
	    {"limit = lots\n", 1, "limit", "percentage"},
	    {"allocator = async2\n", 1, "allocator", "pool, direct or async"},
	    {"admin_reserved_connections = -1\n", 1, "admin_reserved_connections", "integer"},
	    {"max_output_per_client = 1KiB\n", 1, "max_output_per_client", "size from 4096"},
	    {"max_output_total = 2TiB\n", 1, "max_output_total", "size from 4096"},
	    {"min_auto_share = 0\n", 1, "min_auto_share", "(0, 1]"},
	    {"min_auto_share = 1.5\n", 1, "min_auto_share", "(0, 1]"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct conf cfg, before;
		struct conf_error err;
		conf_defaults(&cfg);
		before = cfg;
		int rc = conf_parse(cases[i].text, strlen(cases[i].text), &cfg, &err);
		if (rc != -EINVAL || err.line != cases[i].line ||
		    strcmp(err.key, cases[i].key) != 0 || !strstr(err.message, cases[i].says))
			fail_msg("case %zu (%s): rc %d line %u key '%s' message '%s'", i,
			         cases[i].text, rc, err.line, err.key, err.message);
		assert_memory_equal(&cfg, &before, sizeof(cfg));
	}
}

static void test_long_line_and_nul(void **state)
{
	char text[1200];
	struct conf cfg;
	struct conf_error err;
	memset(text, 'a', sizeof(text) - 2);
	text[sizeof(text) - 2] = '\n';
	text[sizeof(text) - 1] = '\0';
	assert_int_equal(parse(text, &cfg, &err), -EINVAL);
	assert_non_null(strstr(err.message, "longer"));
	const char nul[] = "max_clients = 5\0\n";
	conf_defaults(&cfg);
	assert_int_equal(conf_parse(nul, sizeof(nul) - 1, &cfg, &err), -EINVAL);
	assert_non_null(strstr(err.message, "NUL"));
}

static void test_empty_and_comments_only(void **state)
{
	struct conf cfg;
	struct conf_error err;
	assert_int_equal(parse("", &cfg, &err), 0);
	assert_int_equal(parse("# nothing\n   \n\t# more\n", &cfg, &err), 0);
	assert_int_equal(cfg.set, 0);
	/* No newline at the end of the last line. */
	assert_int_equal(parse("max_clients = 9", &cfg, &err), 0);
	assert_int_equal(cfg.limits.max_clients, 9);
}

static void test_set_and_diff(void **state)
{
	struct conf a, b;
	struct conf_error err;
	conf_defaults(&a);
	conf_defaults(&b);
	assert_int_equal(conf_diff(&a, &b), 0);
	assert_int_equal(conf_set(&b, "max_clients", "5", &err), 0);
	assert_int_equal(conf_set(&b, "socket", "/tmp/y", &err), 0);
	assert_int_equal(conf_diff(&a, &b), (1ull << CONF_MAX_CLIENTS) | (1ull << CONF_SOCKET));
	assert_int_equal(conf_set(&b, "nosuch", "1", &err), -ENOENT);
	assert_int_equal(conf_set(&b, "max_clients", "zero", &err), -EINVAL);
	assert_int_equal(b.limits.max_clients, 5);
	conf_copy_key(&a, &b, CONF_MAX_CLIENTS);
	assert_int_equal(conf_diff(&a, &b), 1ull << CONF_SOCKET);
	assert_true(conf_key_needs_restart(CONF_SOCKET));
	assert_true(conf_key_needs_restart(CONF_BACKEND));
	assert_false(conf_key_needs_restart(CONF_MAX_CLIENTS));
	assert_false(conf_key_needs_restart(CONF_LOG_LEVEL));
}

static void test_limit_parse(void **state)
{
	uint64_t bytes;
	double fraction;
	assert_int_equal(conf_limit_parse("none", &bytes, &fraction), 0);
	assert_true(bytes == 0 && fraction == 0);
	assert_int_equal(conf_limit_parse("12GiB", &bytes, &fraction), 0);
	assert_true(bytes == 12ull << 30 && fraction == 0);
	assert_int_equal(conf_limit_parse("50%", &bytes, &fraction), 0);
	assert_true(bytes == 0 && fraction == 0.5);
	assert_int_equal(conf_limit_parse("%", &bytes, &fraction), -EINVAL);
	assert_int_equal(conf_limit_parse("0%", &bytes, &fraction), -EINVAL);
	assert_int_equal(conf_limit_parse("", &bytes, &fraction), -EINVAL);
}

static gid_t fake_group(const char *name)
{
	return strcmp(name, "render") == 0 ? 44 : (gid_t)-1;
}

static void test_rules(void **state)
{
	struct conf cfg, before;
	struct conf_error err;
	assert_int_equal(parse("uid.1000.proportion = 0.25\n"
	                       "uid.1000.cap = 8GiB\n"
	                       "group.render.cap = 1GiB\n"
	                       "group.nosuch.proportion = 0.5\n",
	                       &cfg, &err),
	                 0);
	assert_int_equal(cfg.nrules, 3);
	struct broker_rule rules[BROKER_MAX_RULES];
	const char *unknown = NULL;
	unsigned n = conf_rules_resolve(&cfg, fake_group, rules, &unknown);
	assert_int_equal(n, 2);
	assert_string_equal(unknown, "nosuch");
	assert_false(rules[0].group);
	assert_int_equal(rules[0].uid, 1000);
	assert_true(rules[0].proportion == 0.25);
	assert_int_equal(rules[0].cap, 8ull << 30);
	assert_true(rules[1].group);
	assert_int_equal(rules[1].gid, 44);
	assert_int_equal(rules[1].cap, 1ull << 30);
	/* A changed rule shows in the diff (and only as "rules"). */
	before = cfg;
	assert_int_equal(conf_set(&cfg, "uid.1000.cap", "9GiB", &err), 0);
	assert_int_equal(conf_diff(&before, &cfg), 1ull << CONF_RULES);
	assert_string_equal(conf_key_name(CONF_RULES), "rules");
	static const char *const bad[] = {
	    "uid.x.cap = 1GiB\n",        "uid.1000.size = 1\n",
	    "uid..cap = 1GiB\n",         "uid.1000 = 1\n",
	    "uid.1000.cap = 0\n",        "uid.1000.proportion = 2\n",
	    "group.render.cap = none\n",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (parse(bad[i], &cfg, &err) != -EINVAL)
			fail_msg("accepted: %s", bad[i]);
		assert_int_equal(err.line, 1);
	}
}

/* Writes text (len bytes) to a temporary file and loads it; the file is
 * removed again. Returns conf_load's value, with the error as the daemon
 * reports it in report. */
static int load_text(const char *text, size_t len, struct conf *cfg, char *path, char *report,
                     size_t size)
{
	strcpy(path, "/tmp/gpb-conf-XXXXXX");
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, len), (ssize_t)len);
	close(fd);
	struct conf_error err;
	conf_defaults(cfg);
	int rc = conf_load(path, false, cfg, &err);
	unlink(path);
	conf_error_format(path, &err, report, size);
	return rc;
}

/* Loads text, expecting an error that names the file, the line and the key
 * as "PATH:LINE: 'KEY' ...", and says says. */
static void expect_load_error(const char *text, unsigned line, const char *key, const char *says)
{
	struct conf cfg;
	char path[32], report[256], want[200];
	assert_int_equal(load_text(text, strlen(text), &cfg, path, report, sizeof(report)),
	                 -EINVAL);
	snprintf(want, sizeof(want), "%s:%u: '%s'", path, line, key);
	if (strncmp(report, want, strlen(want)) != 0 || !strstr(report, says))
		fail_msg("want '%s...%s', got '%s'", want, says, report);
	assert_int_equal(cfg.nrules, 0);
}

/* Rule keys are checked like the others: given twice, too many rules, a name
 * too long. */
static void test_rule_limits(void **state)
{
	expect_load_error("uid.1000.cap = 1GiB\nuid.1000.proportion = 0.5\n"
	                  "uid.1000.cap = 2GiB\n",
	                  3, "uid.1000.cap", "given twice");
	expect_load_error("group.render.proportion = 0.5\n# comment\n"
	                  "group.render.proportion = 0.5\n",
	                  3, "group.render.proportion", "given twice");
	/* The same name as a uid and as a group is two rules. */
	struct conf cfg;
	struct conf_error err;
	assert_int_equal(parse("uid.44.cap = 1GiB\ngroup.44.cap = 1GiB\n", &cfg, &err), 0);
	assert_int_equal(cfg.nrules, 2);

	/* BROKER_MAX_RULES rules are fine; one more names its line. */
	static char text[BROKER_MAX_RULES * 32 + 64];
	size_t n = 0;
	for (int i = 0; i <= BROKER_MAX_RULES; i++)
		n += (size_t)snprintf(text + n, sizeof(text) - n, "uid.%d.cap = 1MiB\n", 1000 + i);
	expect_load_error(text, BROKER_MAX_RULES + 1, "uid.1064.cap", "more than 64");
	text[strstr(text, "uid.1064") - text] = '\0';
	assert_int_equal(parse(text, &cfg, &err), 0);
	assert_int_equal(cfg.nrules, BROKER_MAX_RULES);

	/* A group name of 63 bytes is fine, 64 is too long. */
	char name[65], line[128];
	memset(name, 'g', 64);
	name[64] = '\0';
	snprintf(line, sizeof(line), "group.%s.proportion = 0.5\n", name);
	char key[100];
	snprintf(key, sizeof(key), "group.%s.proportion", name);
	expect_load_error(line, 1, key, "at most 63 bytes");
	snprintf(line, sizeof(line), "group.%s.proportion = 0.5\n", name + 1);
	assert_int_equal(parse(line, &cfg, &err), 0);
	assert_string_equal(cfg.rules[0].name, name + 1);
}

/* A file over CONF_MAX_FILE is refused, naming the file; one of exactly
 * that size is read. */
static void test_file_size_limit(void **state)
{
	char *text = malloc(CONF_MAX_FILE + 1);
	assert_non_null(text);
	/* Comment lines of 64 bytes. */
	for (size_t i = 0; i <= CONF_MAX_FILE; i++)
		text[i] = i % 64 == 63 ? '\n' : '#';
	struct conf cfg;
	char path[32], report[256], want[128];
	assert_int_equal(load_text(text, CONF_MAX_FILE, &cfg, path, report, sizeof(report)), 0);
	assert_int_equal(load_text(text, CONF_MAX_FILE + 1, &cfg, path, report, sizeof(report)),
	                 -EINVAL);
	snprintf(want, sizeof(want), "%s: file larger than %u bytes", path, CONF_MAX_FILE);
	assert_string_equal(report, want);
	free(text);
}

static void test_load(void **state)
{
	char path[] = "/tmp/gpb-conf-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	const char *text = "max_instances = 3\nbogus line\n";
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	struct conf cfg;
	struct conf_error err;
	conf_defaults(&cfg);
	assert_int_equal(conf_load(path, false, &cfg, &err), -EINVAL);
	assert_int_equal(err.line, 2);
	assert_int_equal(cfg.limits.max_instances, 64);
	unlink(path);
	/* Missing: fine when optional, an error naming the cause otherwise. */
	assert_int_equal(conf_load(path, true, &cfg, &err), 0);
	assert_int_equal(conf_load(path, false, &cfg, &err), -ENOENT);
	assert_non_null(strstr(err.message, "No such file"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_defaults),
	    cmocka_unit_test(test_every_key),
	    cmocka_unit_test(test_bad_lines),
	    cmocka_unit_test(test_long_line_and_nul),
	    cmocka_unit_test(test_empty_and_comments_only),
	    cmocka_unit_test(test_set_and_diff),
	    cmocka_unit_test(test_limit_parse),
	    cmocka_unit_test(test_rules),
	    cmocka_unit_test(test_rule_limits),
	    cmocka_unit_test(test_file_size_limit),
	    cmocka_unit_test(test_load),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
