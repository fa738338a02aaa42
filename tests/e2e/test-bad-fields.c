/*
 * test-bad-fields.c - bad field values against the real daemon: NUL bytes,
 * every parameter of every method given each wrong type, malformed and
 * overflowing sizes, bad ids, and frees of allocations that are not the
 * caller's. Like test-bad-connections.c (connection, framing and process faults),
 * each case checks its defined outcome, that the daemon still serves, that
 * a bystander client connected throughout is unaffected, and that nothing
 * leaked (th_assert_unaffected, th_assert_no_leak in harness.c).
 * docs/reliability.md maps the design's 31 bad inputs to the tests.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static struct th_bystander by;

/* The default hello timeout: every case here says hello at once
 * (test-bad-connections.c runs the timeout itself). */
static int setup(void **state)
{
	th_bystander_start(&by, NULL);
	return 0;
}

static int teardown(void **state)
{
	assert_int_equal(th_bystander_stop(&by), 0);
	return 0;
}

/* Case 11: a raw NUL byte inside a frame (and the \u0000 escape, in a
 * key as well as a value): parse errors, connection kept. */
static void test_nul_bytes(void **state)
{
	int fd = th_connect(by.daemon.socket);
	th_hello(fd);
	static const char raw[] = "{\"id\":\"a\",\"method\":\"st\0tus\"}\n";
	assert_int_equal(th_send(fd, raw, sizeof(raw) - 1), 0);
	char reply[4096];
	assert_true(th_read_line(fd, reply, sizeof(reply), 5000) > 0);
	assert_int_equal(th_error_code(reply), -32700);
	th_expect_reply(fd, "{\"id\":\"a\",\"method\":\"status\",\"k\\u0000\":1}", -32700, NULL);
	th_expect_reply(fd, "{\"id\":\"a\\u0000b\",\"method\":\"status\"}", -32700, NULL);
	th_expect_reply(fd, "{\"id\":\"ok\",\"method\":\"status\"}", 0, NULL);
	th_close(fd);
	th_assert_unaffected(&by);
	th_assert_no_leak(&by);
}

/* Copies tmpl into out with %I replaced by inst and %s by value. */
static void expand(char *out, size_t cap, const char *tmpl, const char *inst, const char *value)
{
	size_t n = 0;
	for (const char *p = tmpl; *p; p++) {
		const char *put = NULL;
		if (p[0] == '%' && (p[1] == 'I' || p[1] == 's'))
			put = *++p == 'I' ? inst : value;
		size_t len = put ? strlen(put) : 1;
		assert_true(n + len < cap);
		memcpy(out + n, put ? put : p, len);
		n += len;
	}
	out[n] = '\0';
}

/* Case 14: every parameter of every method given a value of each wrong
 * type: -32602 naming the parameter, connection kept. */
static void test_wrong_types(void **state)
{
	enum kind { STR, INT, DBL, U64, ID, ARR };
	static const char *const wrong[][10] = {
	    [STR] = {"1", "true", "null", "[]", "{}", "\"\"",
	             "\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"", NULL},
	    [INT] = {"\"1\"", "1.5", "true", "null", "[]", "{}", "-1", "1e300", NULL},
	    [DBL] = {"\"0.5\"", "true", "null", "[]", "{}", "-0.5", "2", NULL},
	    [U64] = {"1", "\"x\"", "true", "null", "[]", "{}", "\"\"", NULL},
	    [ID] = {"1", "\"x\"", "\"000000000000000G\"", "\"00000000000000001\"",
	            "\"0000000000000001 \"", "\"000000000000000A\"", "true", "null", "[]", NULL},
	    [ARR] = {"1", "\"1\"", "{}", "null", "[\"1\"]", "[[1]]", NULL},
	};
	/* %s: the value under test; %I: an instance of this connection. */
	static const struct {
		const char *method, *field;
		enum kind kind;
		const char *params;
	} cases[] = {
	    {"register", "name", STR, "{\"name\":%s}"},
	    {"register", "device", INT, "{\"name\":\"t\",\"device\":%s}"},
	    {"register", "proportion", DBL, "{\"name\":\"t\",\"proportion\":%s}"},
	    {"register", "group", STR, "{\"name\":\"t\",\"group\":%s}"},
	    {"unregister", "instance", ID, "{\"instance\":%s}"},
	    {"alloc", "instance", ID, "{\"instance\":%s,\"size\":\"1\"}"},
	    {"alloc", "size", U64, "{\"instance\":\"%I\",\"size\":%s}"},
	    {"alloc", "alignment", U64, "{\"instance\":\"%I\",\"size\":\"1\",\"alignment\":%s}"},
	    {"alloc", "type", STR, "{\"instance\":\"%I\",\"size\":\"1\",\"type\":%s}"},
	    {"alloc", "wait_ms", INT, "{\"instance\":\"%I\",\"size\":\"1\",\"wait_ms\":%s}"},
	    {"free", "id", ID, "{\"id\":%s}"},
	    {"attach", "id", ID, "{\"id\":%s}"},
	    {"detach", "id", ID, "{\"id\":%s}"},
	    {"mem_info", "instance", ID, "{\"instance\":%s}"},
	    {"stats", "device", INT, "{\"device\":%s}"},
	    {"set_proportion", "instance", ID, "{\"instance\":%s,\"proportion\":0.5}"},
	    {"set_proportion", "proportion", DBL, "{\"instance\":\"%I\",\"proportion\":%s}"},
	    {"set_auto", "instance", ID, "{\"instance\":%s}"},
	    {"set_group", "instance", ID, "{\"instance\":%s,\"group\":\"g\"}"},
	    {"set_group", "group", STR, "{\"instance\":\"%I\",\"group\":%s}"},
	    {"group_info", "group", STR, "{\"group\":%s}"},
	    {"set_mode", "mode", STR, "{\"mode\":%s}"},
	    {"set_limit", "device", INT, "{\"device\":%s,\"size\":\"0\"}"},
	    {"set_limit", "size", U64, "{\"size\":%s}"},
	    {"set_limit", "fraction", DBL, "{\"fraction\":%s}"},
	};
	int fd = th_connect(by.daemon.socket);
	th_hello(fd);
	char inst[17];
	th_raw_register(fd, "types", inst);
	char frame[1024], params[512];
	int checked = 0;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		for (int v = 0; wrong[cases[i].kind][v]; v++) {
			expand(params, sizeof(params), cases[i].params, inst,
			       wrong[cases[i].kind][v]);
			snprintf(frame, sizeof(frame),
			         "{\"id\":\"w\",\"method\":\"%s\",\"params\":%s}", cases[i].method,
			         params);
			th_expect_reply(fd, frame, -32602, cases[i].field);
			checked++;
		}
	}
	/* params itself, and the method, of the wrong type. */
	th_expect_reply(fd, "{\"id\":\"w\",\"method\":\"status\",\"params\":[]}", -32600, NULL);
	th_expect_reply(fd, "{\"id\":\"w\",\"method\":\"status\",\"params\":1}", -32600, NULL);
	th_expect_reply(fd, "{\"id\":\"w\",\"method\":1}", -32600, NULL);
	th_expect_reply(fd, "{\"id\":\"w\",\"method\":null}", -32600, NULL);
	th_expect_reply(fd, "{\"id\":\"w\"}", -32600, NULL);
	th_close(fd);
	/* hello's own parameters, before the handshake. */
	for (int v = 0; wrong[ARR][v]; v++) {
		fd = th_connect(by.daemon.socket);
		snprintf(frame, sizeof(frame),
		         "{\"id\":\"h\",\"method\":\"hello\",\"params\":{\"versions\":%s}}",
		         wrong[ARR][v]);
		th_expect_reply(fd, frame, -32602, "versions");
		snprintf(frame, sizeof(frame),
		         "{\"id\":\"h\",\"method\":\"hello\",\"params\":{\"versions\":[1],"
		         "\"client\":%s}}",
		         wrong[STR][v]);
		th_expect_reply(fd, frame, -32602, "client");
		th_hello(fd);
		th_close(fd);
		checked += 2;
	}
	printf("# %d wrong-typed parameters refused\n", checked);
	th_assert_unaffected(&by);
	th_assert_no_leak(&by);
}

/* Case 15: every malformed size string: -32602 on "size". */
static void test_size_strings(void **state)
{
	static const char *const sizes[] = {
	    "\"0\"",
	    "\"-1\"",
	    "\"+1\"",
	    "\" 1\"",
	    "\"1 \"",
	    "\"1e9\"",
	    "\"0x10\"",
	    "\"01\"",
	    "\"1.0\"",
	    "\"\"",
	    "\"18446744073709551616\"",
	    "\"1234567890123456789012345\"",
	    "\"99999999999999999999\"",
	};
	int fd = th_connect(by.daemon.socket);
	th_hello(fd);
	char inst[17], frame[256];
	th_raw_register(fd, "sizes", inst);
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		snprintf(frame, sizeof(frame),
		         "{\"id\":\"s\",\"method\":\"alloc\",\"params\":{\"instance\":\"%s\","
		         "\"size\":%s}}",
		         inst, sizes[i]);
		th_expect_reply(fd, frame, -32602, "size");
	}
	/* The largest valid one is well-formed, and simply too large. */
	snprintf(frame, sizeof(frame),
	         "{\"id\":\"s\",\"method\":\"alloc\",\"params\":{\"instance\":\"%s\","
	         "\"size\":\"18446744073709551615\"}}",
	         inst);
	char reply[4096];
	assert_true(th_call(fd, frame, reply, sizeof(reply)) > 0);
	assert_true(th_error_code(reply) == -32602 || th_error_code(reply) == -32002);
	th_close(fd);
	th_assert_unaffected(&by);
	th_assert_no_leak(&by);
}

/* Case 16: sizes above the device's memory or the instance's cap, and
 * sizes chosen so that used + size would wrap around 2^64: refused
 * (out_of_memory, quota_exceeded or invalid_params), never granted; the
 * counters stay exact. */
static void test_size_overflow(void **state)
{
	gpb_client *c = th_client(&by.daemon, "overflow");
	struct gpb_register_opts opts = {.name = "overflow"};
	uint64_t inst;
	assert_int_equal(gpb_register(c, &opts, &inst), 0);
	struct gpb_allocation held, a;
	const uint64_t gib = 1ull << 30;
	/* Above the device (1 GiB). */
	assert_int_equal(gpb_alloc(c, inst, gib + 1, 0, &a), GPB_E_OUT_OF_MEMORY);
	assert_int_equal(gpb_alloc(c, inst, 1ull << 63, 0, &a), GPB_E_OUT_OF_MEMORY);
	/* Hold 512 MiB, then ask for what would wrap used + size. */
	assert_int_equal(gpb_alloc(c, inst, gib / 2, 0, &held), 0);
	static const uint64_t wraps[] = {
	    UINT64_MAX,
	    UINT64_MAX - 255,
	    UINT64_MAX - (1ull << 29) + 1,
	    UINT64_MAX - (1ull << 29) - 255,
	    0ull - (1ull << 29),
	    0ull - (1ull << 30),
	    (1ull << 63) + 1,
	    0ull - (1ull << 21),
	};
	for (size_t i = 0; i < sizeof(wraps) / sizeof(wraps[0]); i++) {
		int rc = gpb_alloc(c, inst, wraps[i], 0, &a);
		if (rc != GPB_E_OUT_OF_MEMORY && rc != GPB_E_INVALID)
			fail_msg("alloc of %llu bytes: %s", (unsigned long long)wraps[i],
			         gpb_strerror(rc));
		char params[160], *json = NULL;
		snprintf(params, sizeof(params),
		         "{\"instance\":\"%016llx\",\"size\":\"%llu\",\"wait_ms\":10}",
		         (unsigned long long)inst, (unsigned long long)wraps[i]);
		rc = gpb_request(c, "alloc", params, &json);
		if (rc != GPB_E_OUT_OF_MEMORY && rc != GPB_E_INVALID)
			fail_msg("waiting alloc of %llu bytes: %s", (unsigned long long)wraps[i],
			         gpb_strerror(rc));
	}
	/* Running totals: what is left fits once, then no more. */
	assert_int_equal(gpb_alloc(c, inst, gib / 2 - (4 << 20), 0, &a), 0);
	struct gpb_allocation b;
	assert_int_equal(gpb_alloc(c, inst, 8 << 20, 0, &b), GPB_E_OUT_OF_MEMORY);
	assert_int_equal(gpb_free(c, a.id), 0);
	struct gpb_mem_info mi;
	assert_int_equal(gpb_mem_info(c, inst, &mi), 0);
	assert_int_equal(mi.used, held.size);
	/* Above the cap (active mode, a 10% instance): quota, and no wrap
	 * either. */
	char *json = NULL;
	assert_int_equal(gpb_request(c, "set_mode", "{\"mode\":\"active\"}", &json), 0);
	gpb_string_free(json);
	struct gpb_register_opts small = {.name = "small", .proportion = 0.1};
	uint64_t s;
	assert_int_equal(gpb_register(c, &small, &s), 0);
	assert_int_equal(gpb_alloc(c, s, gib / 5, 0, &a), GPB_E_QUOTA);
	assert_int_equal(gpb_alloc(c, s, gib / 20, 0, &a), 0);
	for (size_t i = 0; i < sizeof(wraps) / sizeof(wraps[0]); i++) {
		int rc = gpb_alloc(c, s, wraps[i], 0, &b);
		if (rc != GPB_E_OUT_OF_MEMORY && rc != GPB_E_INVALID && rc != GPB_E_QUOTA)
			fail_msg("capped alloc of %llu bytes: %s", (unsigned long long)wraps[i],
			         gpb_strerror(rc));
	}
	assert_int_equal(gpb_mem_info(c, s, &mi), 0);
	assert_int_equal(mi.used, a.size);
	assert_int_equal(gpb_request(c, "set_mode", "{\"mode\":\"passive\"}", &json), 0);
	gpb_string_free(json);
	th_selfcheck(c, NULL);
	gpb_disconnect(c);
	th_assert_unaffected(&by);
	th_assert_no_leak(&by);
}

/* Case 18: ids: a 1 MB id (the frame is over the cap: error, closed), one
 * byte over the id limit, empty, non-string, missing (errors, kept). */
static void test_bad_ids(void **state)
{
	int fd = th_connect(by.daemon.socket);
	th_hello(fd);
	char id65[80];
	memset(id65, 'i', 65);
	id65[65] = '\0';
	char frame[256];
	snprintf(frame, sizeof(frame), "{\"id\":\"%s\",\"method\":\"status\"}", id65);
	th_expect_reply(fd, frame, -32600, NULL);
	th_expect_reply(fd, "{\"id\":\"\",\"method\":\"status\"}", -32600, NULL);
	th_expect_reply(fd, "{\"id\":{},\"method\":\"status\"}", -32600, NULL);
	th_expect_reply(fd, "{\"id\":null,\"method\":\"status\"}", -32600, NULL);
	th_expect_reply(fd, "{\"id\":[\"a\"],\"method\":\"status\"}", -32600, NULL);
	id65[64] = '\0';
	snprintf(frame, sizeof(frame), "{\"id\":\"%s\",\"method\":\"status\"}", id65);
	th_expect_reply(fd, frame, 0, NULL);
	size_t big = 1 << 20;
	char *mb = malloc(big + 64);
	assert_non_null(mb);
	int n = sprintf(mb, "{\"method\":\"status\",\"id\":\"");
	memset(mb + n, 'x', big);
	n += (int)big;
	n += sprintf(mb + n, "\"}\n");
	/* The daemon answers after the first 64 KiB and closes: the rest of
	 * the write may fail. */
	th_send(fd, mb, (size_t)n);
	free(mb);
	char reply[4096];
	assert_true(th_read_line(fd, reply, sizeof(reply), 5000) > 0);
	assert_int_equal(th_error_code(reply), -32600);
	assert_non_null(strstr(reply, "\"id\":null"));
	int eof = th_read_line(fd, reply, sizeof(reply), 5000);
	assert_true(eof == 0 || eof == -ECONNRESET);
	th_close(fd);
	th_assert_unaffected(&by);
	th_assert_no_leak(&by);
}

/* An allocation made by user nobody (socket opened to all for this). */
static int nobody_alloc(int out)
{
	gpb_client *c = NULL;
	struct gpb_register_opts opts = {.name = "nobody"};
	uint64_t inst;
	struct gpb_allocation a;
	if (gpb_connect(by.daemon.socket, "nobody", &c) || gpb_register(c, &opts, &inst) ||
	    gpb_alloc(c, inst, 4096, 0, &a))
		return 1;
	memset(a.ptr, 0x77, 4096);
	char id[32];
	int n = snprintf(id, sizeof(id), "%016llx\n", (unsigned long long)a.id);
	if (write(out, id, (size_t)n) != n)
		return 2;
	/* Root's allocation is not ours either. */
	if (gpb_free(c, by.alloc.id) != GPB_E_NOT_FOUND)
		return 3;
	if (gpb_attach(c, by.alloc.id, &a) != GPB_E_NOT_FOUND)
		return 4;
	char b;
	if (read(out, &b, 1) != 0) /* until the parent closes its end */
		return 5;
	gpb_disconnect(c);
	return 0;
}

static void assert_chmod_back(void)
{
	assert_int_equal(chmod(by.daemon.socket, 0660), 0);
	assert_int_equal(chmod(by.daemon.dir, 0700), 0);
}

/* The daemon's answer to free and attach of id on a raw connection must be
 * exactly its answer for an id that never existed. */
static void expect_unknown(int fd, uint64_t id)
{
	static const char unknown[] = "{\"id\":\"f\",\"error\":{\"code\":-32004,"
	                              "\"message\":\"no such allocation\"}}";
	char frame[128], reply[4096];
	for (int attach = 0; attach < 2; attach++) {
		snprintf(frame, sizeof(frame),
		         "{\"id\":\"f\",\"method\":\"%s\",\"params\":{\"id\":\"%016llx\"}}",
		         attach ? "attach" : "free", (unsigned long long)id);
		assert_true(th_call(fd, frame, reply, sizeof(reply)) > 0);
		if (strcmp(reply, unknown) != 0)
			fail_msg("%s: %s", frame, reply);
	}
}

/* How many clients `status` counted before test_free_not_yours's stale
 * connection came. */
static uint64_t clients_before_stale;

static bool stale_gone(void *client)
{
	return th_status_field(client, "clients") == clients_before_stale;
}

/* Case 19: free of an unknown id, of another user's allocation, twice, and
 * of a stale id (its connection gone): not_found every time, answered
 * exactly as for an id that never existed, and nothing freed that should
 * not be. */
static void test_free_not_yours(void **state)
{
	int fd = th_connect(by.daemon.socket);
	th_hello(fd);
	expect_unknown(fd, 0x00000000000000ffull);
	gpb_client *c = th_client(&by.daemon, "freer");
	struct gpb_register_opts opts = {.name = "freer"};
	uint64_t inst;
	struct gpb_allocation a, stale;
	assert_int_equal(gpb_register(c, &opts, &inst), 0);
	/* Double free (the library refuses the second itself; the daemon
	 * answers the raw one). */
	assert_int_equal(gpb_alloc(c, inst, 4096, 0, &a), 0);
	assert_int_equal(gpb_free(c, a.id), 0);
	assert_int_equal(gpb_free(c, a.id), GPB_E_NOT_FOUND);
	/* The free did not wait for its reply (the second never left the
	 * library): until the daemon has read it, the raw connection (same
	 * user) could still attach the id. */
	th_settle(c);
	expect_unknown(fd, a.id);
	/* Stale: made by a connection that has closed. */
	clients_before_stale = th_status_field(by.client, "clients");
	gpb_client *gone = th_client(&by.daemon, "gone");
	uint64_t ginst;
	assert_int_equal(gpb_register(gone, &opts, &ginst), 0);
	assert_int_equal(gpb_alloc(gone, ginst, 4096, 0, &stale), 0);
	gpb_disconnect(gone);
	/* The daemon ends the closed connection, and releases what it held,
	 * in its own time: until then the raw connection (same user) could
	 * still attach its allocation. */
	assert_true(th_wait_for(stale_gone, by.client, 10000));
	expect_unknown(fd, stale.id);
	assert_int_equal(gpb_attach(c, stale.id, &a), GPB_E_NOT_FOUND);
	/* Another user's (root only: a child runs as nobody). */
	if (geteuid() == 0) {
		assert_int_equal(chmod(by.daemon.dir, 0755), 0);
		assert_int_equal(chmod(by.daemon.socket, 0666), 0);
		int sv[2];
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
		pid_t pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			close(sv[0]);
			if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0)
				th_child_exit(99);
			th_child_exit(nobody_alloc(sv[1]));
		}
		close(sv[1]);
		char line[64];
		assert_true(th_read_line(sv[0], line, sizeof(line), 10000) == 16);
		uint64_t theirs = strtoull(line, NULL, 16);
		expect_unknown(fd, theirs);
		assert_int_equal(gpb_attach(c, theirs, &a), GPB_E_NOT_FOUND);
		/* Still theirs: the daemon holds it. */
		assert_int_equal(th_status_used(by.client), by.alloc.size + 4096);
		th_close(sv[0]);
		int st;
		assert_int_equal(waitpid(pid, &st, 0), pid);
		assert_chmod_back();
		assert_true(WIFEXITED(st));
		assert_int_equal(WEXITSTATUS(st), 0);
	} else {
		printf("# not root: another user's allocation is not tried\n");
	}
	th_close(fd);
	gpb_disconnect(c);
	th_assert_unaffected(&by);
	/* nobody's uid keeps its cached slab: one more descriptor. */
	by.baseline_fds++;
	th_assert_no_leak(&by);
	by.baseline_fds--;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_nul_bytes),    cmocka_unit_test(test_wrong_types),
	    cmocka_unit_test(test_size_strings), cmocka_unit_test(test_size_overflow),
	    cmocka_unit_test(test_bad_ids),      cmocka_unit_test(test_free_not_yours),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
