/*
 * test-partition-lifecycle.c - partitions against the real daemon: an administrator
 * creates, lists and destroys them (library and CLI); the sum never exceeds
 * a device and a refusal gives the figures; a client with the token (in
 * $GPUBROKER_TOKEN, as the Slurm plugin sets it) lives inside its partition,
 * sees its size as the device and the VRAM policy within it; a wrong token
 * (unknown, or another uid's) gets one answer; clients outside share what is
 * left; destroying one ends its clients with an event and gives everything
 * back; ordinary users neither create nor see others'; bad inputs are each
 * refused and leave the daemon sound.
 *
 * The daemon is the harness's: sim, 2 devices of 1 GiB, 2 MiB slabs. Parts
 * that need other users (a forked child that sets its uid) run as root only
 * and are skipped, saying so, otherwise.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <grp.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "harness.h"

#define MiB (1ull << 20)
#define GiB (1ull << 30)

#define UID_OTHER 61011 /* an ordinary user without an account: the daemon needs none */
#define UID_THIRD 61012

static struct th_daemon daemon_;
static gpb_client *admin; /* the test's own connection: root, an administrator */

/* A daemon of its own for each test: one that fails leaves nothing behind
 * for the next. */
static int setup(void **state)
{
	(void)state;
	/* Other users' children reach the socket. */
	const char *extra[] = {"--socket-mode", "0666", NULL};
	th_daemon_start(&daemon_, extra);
	chmod(daemon_.dir, 0755);
	admin = th_client(&daemon_, "partition-test");
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	gpb_disconnect(admin);
	return th_daemon_stop(&daemon_) == 0 ? 0 : -1;
}

/* Every test leaves the daemon as it found it: no partition, no other client,
 * every structure sound. */
static void check_clean(void)
{
	char *json;
	assert_true(th_wait_for(th_only_one_client, admin, 10000));
	assert_int_equal(gpb_partitions(admin, &json), 0);
	cJSON *root = cJSON_Parse(json);
	gpb_string_free(json);
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(root, "partitions")), 0);
	cJSON_Delete(root);
	th_selfcheck(admin, NULL);
}

/* The result (or, when the call fails, NULL) of a raw request; *rc gets the
 * library's code. */
static cJSON *request(gpb_client *c, const char *method, const char *params, int *rc)
{
	char *text = NULL;
	*rc = gpb_request(c, method, params, &text);
	cJSON *root = text ? cJSON_Parse(text) : NULL;
	gpb_string_free(text);
	return root;
}

static uint64_t u64_member(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItem(o, key);
	assert_true(cJSON_IsString(v));
	return strtoull(v->valuestring, NULL, 10);
}

/* The one partition of `partitions` called name, its devices' figures. */
static const cJSON *find_partition(const cJSON *root, const char *name)
{
	const cJSON *p;
	cJSON_ArrayForEach(p, cJSON_GetObjectItem(root, "partitions"))
	{
		if (strcmp(cJSON_GetObjectItem(p, "name")->valuestring, name) == 0)
			return p;
	}
	return NULL;
}

/* In a forked child: becomes an ordinary user (exit 99 when it cannot). */
static void become(uid_t uid)
{
	if (setgroups(0, NULL) < 0 || setgid(uid) < 0 || setuid(uid) < 0)
		th_child_exit(99);
}

/* Connects with token in $GPUBROKER_TOKEN, as a job's task does. */
static int connect_with(const char *token, gpb_client **out)
{
	setenv("GPUBROKER_TOKEN", token, 1);
	int rc = gpb_connect(daemon_.socket, "in-partition", out);
	unsetenv("GPUBROKER_TOKEN");
	return rc;
}

static uint64_t device_total(gpb_client *c, uint64_t inst)
{
	struct gpb_mem_info mi;
	assert_int_equal(gpb_mem_info(c, inst, &mi), 0);
	return mi.device_total;
}

/* ---- create, list, destroy -------------------------------------------------- */

static void test_create_list_destroy(void **state)
{
	(void)state;
	char token[65];
	int dev1[] = {1};
	assert_int_equal(gpb_partition_create(admin, "job-1.a_b", 0, 256 * MiB, dev1, 1, token), 0);
	assert_int_equal(strlen(token), 64);
	assert_int_equal(strspn(token, "0123456789abcdef"), 64);
	char *json;
	assert_int_equal(gpb_partitions(admin, &json), 0);
	cJSON *root = cJSON_Parse(json);
	gpb_string_free(json);
	const cJSON *p = find_partition(root, "job-1.a_b");
	assert_non_null(p);
	assert_int_equal(cJSON_GetObjectItem(p, "uid")->valueint, 0);
	assert_int_equal(cJSON_GetObjectItem(p, "sessions")->valueint, 0);
	/* The token is never listed. */
	char *listed = cJSON_PrintUnformatted(root);
	assert_null(strstr(listed, token));
	cJSON_free(listed);
	const cJSON *devs = cJSON_GetObjectItem(p, "devices");
	assert_int_equal(cJSON_GetArraySize(devs), 1);
	const cJSON *d = cJSON_GetArrayItem(devs, 0);
	assert_int_equal(cJSON_GetObjectItem(d, "device")->valueint, 1);
	assert_int_equal(u64_member(d, "size"), 256 * MiB);
	assert_int_equal(u64_member(d, "used"), 0);
	assert_int_equal(u64_member(d, "free"), 256 * MiB);
	cJSON_Delete(root);
	/* Metrics per partition. */
	assert_true(th_metric(admin, "gpubroker_partition_size_bytes{partition=\"job-1.a_b\","
	                             "uid=\"0\",device=\"1\"}") == (double)(256 * MiB));
	assert_true(th_metric(admin, "gpubroker_partitions_bytes{device=\"1\"}") ==
	            (double)(256 * MiB));
	assert_true(th_metric(admin, "gpubroker_partitions_bytes{device=\"0\"}") == 0);

	int rc;
	root = request(admin, "partition_destroy", "{\"name\":\"job-1.a_b\"}", &rc);
	assert_int_equal(rc, 0);
	assert_int_equal(cJSON_GetObjectItem(root, "sessions")->valueint, 0);
	assert_int_equal(u64_member(root, "reclaimed"), 0);
	cJSON_Delete(root);
	assert_int_equal(gpb_partition_destroy(admin, "job-1.a_b"), GPB_E_NOT_FOUND);
	assert_true(th_metric(admin, "gpubroker_partitions_bytes{device=\"1\"}") == 0);
	check_clean();
}

/* The sum of partitions never exceeds a device: refused with the figures. */
static void test_overcommit_refused(void **state)
{
	(void)state;
	char token[65];
	assert_int_equal(gpb_partition_create(admin, "big", 0, 600 * MiB, NULL, 0, token), 0);
	assert_int_equal(gpb_partition_create(admin, "more", 0, 600 * MiB, NULL, 0, token),
	                 GPB_E_OUT_OF_MEMORY);
	assert_non_null(strstr(gpb_last_error(),
	                       "device 0: asked 629145600, available 444596224 (capacity "
	                       "1073741824, partitions 629145600)"));
	int rc;
	cJSON *r =
	    request(admin, "partition_create",
	            "{\"name\":\"more\",\"uid\":0,\"size\":\"629145600\",\"devices\":[1]}", &rc);
	assert_int_equal(rc, GPB_E_OUT_OF_MEMORY);
	assert_null(r);
	/* What fits exactly is granted: the device is then all partitions. */
	assert_int_equal(gpb_partition_create(admin, "rest", 0, 424 * MiB, NULL, 0, token), 0);
	assert_int_equal(gpb_partition_create(admin, "one-more", 0, 2 * MiB, NULL, 0, token),
	                 GPB_E_OUT_OF_MEMORY);
	assert_non_null(strstr(gpb_last_error(), "available 0 (capacity 1073741824, partitions "
	                                         "1073741824)"));
	/* Outside partitions nothing is left. */
	uint64_t inst;
	struct gpb_allocation a;
	assert_int_equal(gpb_register(admin, &(struct gpb_register_opts){.name = "out"}, &inst), 0);
	assert_int_equal(device_total(admin, inst), 0);
	assert_int_equal(gpb_alloc(admin, inst, 2 * MiB, 0, &a), GPB_E_OUT_OF_MEMORY);
	assert_int_equal(gpb_unregister(admin, inst), 0);
	assert_int_equal(gpb_partition_destroy(admin, "big"), 0);
	assert_int_equal(gpb_partition_destroy(admin, "rest"), 0);
	check_clean();
}

/* The error data of an overcommit, field by field, and the figures when
 * clients outside partitions hold memory. */
static void test_overcommit_data(void **state)
{
	(void)state;
	uint64_t inst;
	struct gpb_allocation a;
	assert_int_equal(gpb_register(admin, &(struct gpb_register_opts){.name = "out"}, &inst), 0);
	assert_int_equal(gpb_alloc(admin, inst, 512 * MiB, 0, &a), 0);
	char *text = NULL;
	int rc =
	    gpb_request(admin, "partition_create",
	                "{\"name\":\"x\",\"uid\":0,\"size\":600000000,\"devices\":[0]}", &text);
	assert_int_equal(rc, GPB_E_OUT_OF_MEMORY);
	assert_non_null(strstr(gpb_last_error(),
	                       "device 0: asked 600000000, available 536870912 (capacity "
	                       "1073741824, partitions 0); sessions outside partitions hold "
	                       "536870912"));
	/* What outside clients hold is not taken from them: the partition
	 * gets what is left, and they keep theirs. */
	char token[65];
	int dev0[] = {0};
	assert_int_equal(gpb_partition_create(admin, "x", 0, 512 * MiB, dev0, 1, token), 0);
	assert_int_equal(device_total(admin, inst), 512 * MiB);
	struct gpb_allocation b;
	assert_int_equal(gpb_alloc(admin, inst, 2 * MiB, 0, &b), GPB_E_OUT_OF_MEMORY);
	assert_int_equal(gpb_free(admin, a.id), 0);
	assert_int_equal(gpb_unregister(admin, inst), 0);
	assert_int_equal(gpb_partition_destroy(admin, "x"), 0);
	check_clean();
}

/* ---- inside a partition -------------------------------------------------------- */

/* A client with the token sees the partition as its device, allocates up to
 * its size and no further, and its registrations share the partition by the
 * policy: two auto instances get half of it each. Clients outside see the
 * device less the partition. */
static void test_token_joins(void **state)
{
	(void)state;
	char token[65];
	int dev1[] = {1};
	assert_int_equal(gpb_partition_create(admin, "job", 0, 256 * MiB, dev1, 1, token), 0);
	gpb_client *c;
	assert_int_equal(connect_with(token, &c), 0);

	/* Only the partition's device exists for it. */
	uint64_t i1, i2;
	assert_int_equal(
	    gpb_register(c, &(struct gpb_register_opts){.name = "d0", .device = 0}, &i1),
	    GPB_E_INVALID);
	int rc;
	cJSON *r = request(c, "devices", NULL, &rc);
	assert_int_equal(rc, 0);
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(r, "devices")), 1);
	const cJSON *d = cJSON_GetArrayItem(cJSON_GetObjectItem(r, "devices"), 0);
	assert_int_equal(cJSON_GetObjectItem(d, "device")->valueint, 1);
	assert_int_equal(u64_member(d, "total"), 256 * MiB);
	cJSON_Delete(r);

	assert_int_equal(
	    gpb_register(c, &(struct gpb_register_opts){.name = "a", .device = 1}, &i1), 0);
	assert_int_equal(device_total(c, i1), 256 * MiB);
	/* Up to the size, not a byte further. */
	struct gpb_allocation a, b, x;
	assert_int_equal(gpb_alloc(c, i1, 128 * MiB, 0, &a), 0);
	assert_int_equal(gpb_alloc(c, i1, 128 * MiB, 0, &b), 0);
	assert_int_equal(gpb_alloc(c, i1, 1, 0, &x), GPB_E_OUT_OF_MEMORY);
	assert_non_null(strstr(gpb_last_error(), "on device 1, 0 free"));
	/* The partition's use is listed. */
	char *json;
	assert_int_equal(gpb_partitions(admin, &json), 0);
	r = cJSON_Parse(json);
	gpb_string_free(json);
	const cJSON *p = find_partition(r, "job");
	assert_int_equal(cJSON_GetObjectItem(p, "sessions")->valueint, 1);
	d = cJSON_GetArrayItem(cJSON_GetObjectItem(p, "devices"), 0);
	assert_int_equal(u64_member(d, "used"), 256 * MiB);
	assert_int_equal(u64_member(d, "free"), 0);
	cJSON_Delete(r);
	/* Its client is listed as inside it. */
	r = request(admin, "clients", NULL, &rc);
	const cJSON *cl;
	int inside = 0;
	cJSON_ArrayForEach(cl, cJSON_GetObjectItem(r, "clients"))
	{
		const cJSON *part = cJSON_GetObjectItem(cl, "partition");
		inside += cJSON_IsString(part) && strcmp(part->valuestring, "job") == 0;
	}
	assert_int_equal(inside, 1);
	cJSON_Delete(r);
	assert_true(th_metric(admin, "gpubroker_partition_used_bytes{partition=\"job\",uid=\"0\","
	                             "device=\"1\"}") == (double)(256 * MiB));
	assert_int_equal(gpb_free(c, a.id), 0);
	assert_int_equal(gpb_free(c, b.id), 0);

	/* The policy within: in active mode two auto instances get half of
	 * the partition each, and the cap holds. */
	assert_int_equal(gpb_set_mode(admin, GPB_MODE_ACTIVE), 0);
	assert_int_equal(
	    gpb_register(c, &(struct gpb_register_opts){.name = "b", .device = 1}, &i2), 0);
	struct gpb_mem_info mi;
	assert_int_equal(gpb_mem_info(c, i2, &mi), 0);
	assert_int_equal(mi.cap, 128 * MiB);
	assert_int_equal(gpb_mem_info(c, i1, &mi), 0);
	assert_int_equal(mi.cap, 128 * MiB);
	assert_int_equal(gpb_alloc(c, i2, 128 * MiB, 0, &a), 0);
	assert_int_equal(gpb_alloc(c, i2, 2 * MiB, 0, &x), GPB_E_QUOTA);
	/* A manual proportion is of the partition too. */
	assert_int_equal(gpb_set_proportion(c, i1, 0.25, NULL), 0);
	assert_int_equal(gpb_mem_info(c, i1, &mi), 0);
	assert_int_equal(mi.cap, 64 * MiB);
	assert_int_equal(gpb_mem_info(c, i2, &mi), 0);
	assert_int_equal(mi.cap, 192 * MiB);

	assert_int_equal(gpb_set_mode(admin, GPB_MODE_PASSIVE), 0);

	/* Outside: the device less the partition, the policy of its own. */
	uint64_t out;
	assert_int_equal(
	    gpb_register(admin, &(struct gpb_register_opts){.name = "out", .device = 1}, &out), 0);
	assert_int_equal(device_total(admin, out), GiB - 256 * MiB);
	assert_int_equal(gpb_mem_info(admin, out, &mi), 0);
	assert_int_equal(mi.cap, GiB - 256 * MiB); /* passive: the capacity outside */
	assert_int_equal(gpb_alloc(admin, out, GiB - 256 * MiB + 2 * MiB, 0, &x),
	                 GPB_E_OUT_OF_MEMORY);
	/* Memory does not cross the border: the partition's allocation is
	 * unknown outside, even to the same user. */
	char params[64];
	snprintf(params, sizeof(params), "{\"id\":\"%016" PRIx64 "\"}", a.id);
	assert_null(request(admin, "attach", params, &rc));
	assert_int_equal(rc, GPB_E_NOT_FOUND);
	assert_int_equal(gpb_unregister(admin, out), 0);

	gpb_disconnect(c);
	assert_true(th_wait_for(th_only_one_client, admin, 10000));
	assert_int_equal(gpb_partition_destroy(admin, "job"), 0);
	check_clean();
}

/* An unknown token and another uid's get the same answer. */
static void test_wrong_token(void **state)
{
	(void)state;
	char token[65], unknown[65], msg_unknown[256];
	assert_int_equal(gpb_partition_create(admin, "mine", 0, 64 * MiB, NULL, 0, token), 0);
	/* The same length and alphabet, one digit off. */
	memcpy(unknown, token, sizeof(unknown));
	unknown[10] = unknown[10] == '0' ? '1' : '0';
	gpb_client *c;
	assert_int_equal(connect_with(unknown, &c), GPB_E_PERMISSION);
	snprintf(msg_unknown, sizeof(msg_unknown), "%s", gpb_last_error());
	assert_non_null(strstr(msg_unknown, "invalid partition token"));
	assert_int_equal(connect_with("not hex at all", &c), GPB_E_PERMISSION);
	assert_string_equal(gpb_last_error(), msg_unknown);
	if (geteuid() != 0) {
		print_message("skipped: the wrong-uid case needs root (a child that setuid()s)\n");
	} else {
		/* The right token from another uid: a child as UID_OTHER. */
		pid_t pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			if (setgroups(0, NULL) < 0 || setgid(UID_OTHER) < 0 ||
			    setuid(UID_OTHER) < 0)
				th_child_exit(90);
			int rc = connect_with(token, &c);
			if (rc != GPB_E_PERMISSION)
				th_child_exit(91);
			if (strcmp(gpb_last_error(), msg_unknown) != 0)
				th_child_exit(92);
			/* Without the token it is an ordinary client. */
			if (gpb_connect(daemon_.socket, "other", &c) != 0)
				th_child_exit(93);
			gpb_disconnect(c);
			th_child_exit(0);
		}
		th_child_reap_ok(pid);
	}
	/* The right token and uid still join. */
	assert_int_equal(connect_with(token, &c), 0);
	gpb_disconnect(c);
	assert_true(th_wait_for(th_only_one_client, admin, 10000));
	assert_int_equal(gpb_partition_destroy(admin, "mine"), 0);
	check_clean();
}

/* ---- destroy ------------------------------------------------------------------- */

static int destroyed_events;

static void on_event(gpb_client *c, const char *name, const char *data, void *arg)
{
	(void)c;
	(void)arg;
	if (strcmp(name, "partition_destroyed") == 0 && strstr(data, "\"name\":\"doomed\""))
		destroyed_events++;
}

/* A child in the partition holds memory; destroying the partition sends it
 * the event, ends its connection and reclaims what it held, and the room
 * goes back to the clients outside. */
static void test_destroy_reclaims(void **state)
{
	(void)state;
	char token[65];
	int dev0[] = {0};
	assert_int_equal(gpb_partition_create(admin, "doomed", 0, 512 * MiB, dev0, 1, token), 0);
	int up[2], down[2];
	assert_int_equal(pipe(up), 0);
	assert_int_equal(pipe(down), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		gpb_client *c;
		uint64_t inst;
		struct gpb_allocation a;
		char go;
		close(up[0]);
		close(down[1]);
		if (connect_with(token, &c) != 0)
			th_child_exit(80);
		gpb_set_event_callback(c, on_event, NULL);
		if (gpb_register(c, &(struct gpb_register_opts){.name = "j"}, &inst) != 0 ||
		    gpb_alloc(c, inst, 300 * MiB, 0, &a) != 0)
			th_child_exit(81);
		memset(a.ptr, 0x5a, 4096);
		if (write(up[1], "r", 1) != 1 || read(down[0], &go, 1) != 1)
			th_child_exit(82);
		/* The event, then the end of the connection. */
		for (int i = 0; i < 500; i++) {
			struct pollfd p = {.fd = gpb_event_fd(c), .events = POLLIN};
			poll(&p, 1, 20);
			if (gpb_dispatch(c) == GPB_E_DAEMON_GONE)
				break;
		}
		if (destroyed_events != 1)
			th_child_exit(83);
		if (gpb_mem_info(c, inst, &(struct gpb_mem_info){0}) != GPB_E_DAEMON_GONE)
			th_child_exit(84);
		gpb_disconnect(c);
		th_child_exit(0);
	}
	close(up[1]);
	close(down[0]);
	char got;
	assert_int_equal(read(up[0], &got, 1), 1);

	uint64_t out;
	struct gpb_allocation x;
	assert_int_equal(gpb_register(admin, &(struct gpb_register_opts){.name = "out"}, &out), 0);
	assert_int_equal(device_total(admin, out), 512 * MiB);
	int rc;
	cJSON *r = request(admin, "partition_destroy", "{\"name\":\"doomed\"}", &rc);
	assert_int_equal(rc, 0);
	assert_string_equal(cJSON_GetObjectItem(r, "name")->valuestring, "doomed");
	assert_int_equal(cJSON_GetObjectItem(r, "sessions")->valueint, 1);
	assert_int_equal(u64_member(r, "reclaimed"), 300 * MiB);
	cJSON_Delete(r);
	/* At once, outside: the whole device again. */
	assert_int_equal(device_total(admin, out), GiB);
	assert_int_equal(write(down[1], "g", 1), 1);
	th_child_reap_ok(pid);
	close(up[0]);
	close(down[1]);
	/* Its process gone, its slabs go too: the whole device can be had. */
	struct th_selfcheck sc;
	for (int i = 0; i < 500; i++) {
		th_selfcheck(admin, &sc);
		if (!sc.ghosts && !sc.parting)
			break;
		usleep(10000);
	}
	assert_int_equal(sc.ghosts, 0);
	assert_int_equal(gpb_alloc(admin, out, GiB, 0, &x), 0);
	assert_int_equal(gpb_free(admin, x.id), 0);
	assert_int_equal(gpb_unregister(admin, out), 0);
	check_clean();
}

/* ---- users --------------------------------------------------------------------- */

/* An ordinary user may neither create nor destroy a partition, and sees
 * only its own uid's (the others as a count). */
static void test_non_admin(void **state)
{
	(void)state;
	if (geteuid() != 0)
		skip(); /* needs a child as another uid */
	char token[65];
	assert_int_equal(gpb_partition_create(admin, "theirs", UID_OTHER, 64 * MiB, NULL, 0, token),
	                 0);
	assert_int_equal(gpb_partition_create(admin, "hidden", UID_THIRD, 32 * MiB, NULL, 0, token),
	                 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		gpb_client *c;
		char t[65], *json;
		become(UID_OTHER);
		if (gpb_connect(daemon_.socket, "user", &c) != 0)
			th_child_exit(71);
		if (gpb_partition_create(c, "mine", UID_OTHER, MiB, NULL, 0, t) != GPB_E_PERMISSION)
			th_child_exit(72);
		if (gpb_partition_destroy(c, "theirs") != GPB_E_PERMISSION ||
		    gpb_partition_destroy(c, "hidden") != GPB_E_PERMISSION)
			th_child_exit(73);
		if (gpb_partitions(c, &json) != 0)
			th_child_exit(74);
		cJSON *r = cJSON_Parse(json);
		gpb_string_free(json);
		const cJSON *list = cJSON_GetObjectItem(r, "partitions");
		const cJSON *others = cJSON_GetObjectItem(r, "others");
		if (cJSON_GetArraySize(list) != 1 || !find_partition(r, "theirs") ||
		    cJSON_GetObjectItem(others, "partitions")->valueint != 1 ||
		    strcmp(cJSON_GetObjectItem(others, "size")->valuestring, "67108864") != 0)
			th_child_exit(75);
		cJSON_Delete(r);
		/* Metrics: its own partition, not the other's. */
		if (th_metric(c,
		              "gpubroker_partition_sessions{partition=\"theirs\",uid=\"61011\"}") !=
		        0 ||
		    th_metric(c,
		              "gpubroker_partition_sessions{partition=\"hidden\",uid=\"61012\"}") !=
		        -1)
			th_child_exit(76);
		gpb_disconnect(c);
		th_child_exit(0);
	}
	th_child_reap_ok(pid);
	assert_int_equal(gpb_partition_destroy(admin, "theirs"), 0);
	assert_int_equal(gpb_partition_destroy(admin, "hidden"), 0);
	check_clean();
}

/* ---- bad inputs ---------------------------------------------------------------- */

static void expect_refused(const char *params, int code, const char *words)
{
	int rc;
	cJSON *r = request(admin, "partition_create", params, &rc);
	if (rc != code)
		fail_msg("partition_create %s: %d, expected %d (%s)", params, rc, code,
		         gpb_last_error());
	assert_null(r);
	if (!strstr(gpb_last_error(), words))
		fail_msg("partition_create %s: '%s' does not say '%s'", params, gpb_last_error(),
		         words);
}

static void test_bad_inputs(void **state)
{
	(void)state;
	char token[65];
	assert_int_equal(gpb_partition_create(admin, "taken", 0, 64 * MiB, NULL, 0, token), 0);
	char long_name[80];
	memset(long_name, 'n', 65);
	long_name[65] = '\0';
	char params[256];
	snprintf(params, sizeof(params), "{\"name\":\"%s\",\"uid\":0,\"size\":\"1\"}", long_name);
	expect_refused(params, GPB_E_INVALID, "'name'");
	expect_refused("{\"name\":\"\",\"uid\":0,\"size\":\"1\"}", GPB_E_INVALID, "'name'");
	expect_refused("{\"name\":\"a b\",\"uid\":0,\"size\":\"1\"}", GPB_E_INVALID, "'name'");
	expect_refused("{\"name\":\"a/b\",\"uid\":0,\"size\":\"1\"}", GPB_E_INVALID, "'name'");
	expect_refused("{\"name\":\"taken\",\"uid\":0,\"size\":\"1\"}", GPB_E_EXISTS,
	               "a partition named taken exists");
	expect_refused("{\"name\":\"n\",\"size\":\"1\"}", GPB_E_INVALID, "'uid'");
	expect_refused("{\"name\":\"n\",\"uid\":-1,\"size\":\"1\"}", GPB_E_INVALID, "'uid'");
	expect_refused("{\"name\":\"n\",\"uid\":0,\"size\":\"0\"}", GPB_E_INVALID, "'size'");
	expect_refused("{\"name\":\"n\",\"uid\":0,\"size\":0}", GPB_E_INVALID, "'size'");
	expect_refused("{\"name\":\"n\",\"uid\":0}", GPB_E_INVALID, "'size'");
	expect_refused("{\"name\":\"n\",\"uid\":0,\"size\":\"12x\"}", GPB_E_INVALID, "'size'");
	expect_refused("{\"name\":\"n\",\"uid\":0,\"size\":\"2147483648\"}", GPB_E_OUT_OF_MEMORY,
	               "device 0: asked 2147483648");
	expect_refused("{\"name\":\"n\",\"uid\":0,\"size\":\"1\",\"devices\":[2]}", GPB_E_INVALID,
	               "no such device");
	expect_refused("{\"name\":\"n\",\"uid\":0,\"size\":\"1\",\"devices\":[\"GPU-nope\"]}",
	               GPB_E_INVALID, "no such device");
	expect_refused("{\"name\":\"n\",\"uid\":0,\"size\":\"1\",\"devices\":[0,0]}", GPB_E_INVALID,
	               "named twice");
	expect_refused("{\"name\":\"n\",\"uid\":0,\"size\":\"1\",\"devices\":[]}", GPB_E_INVALID,
	               "'devices'");
	expect_refused("{\"name\":\"n\",\"uid\":0,\"size\":\"1\",\"devices\":0}", GPB_E_INVALID,
	               "'devices'");
	/* The library refuses what it can see is wrong. */
	assert_int_equal(gpb_partition_create(admin, "n", 0, 0, NULL, 0, token), GPB_E_INVALID);
	assert_int_equal(gpb_partition_create(admin, NULL, 0, 1, NULL, 0, token), GPB_E_INVALID);
	int rc;
	assert_null(request(admin, "partition_destroy", "{\"name\":\"a b\"}", &rc));
	assert_int_equal(rc, GPB_E_INVALID);
	assert_null(request(admin, "partition_destroy", "{}", &rc));
	assert_int_equal(rc, GPB_E_INVALID);
	/* A UUID names a device as well as an index. */
	cJSON *made = request(admin, "partition_create",
	                      "{\"name\":\"by-uuid\",\"uid\":0,\"size\":1048576,\"devices\":"
	                      "[\"GPU-5117d000-0000-4000-8000-000000000001\"]}",
	                      &rc);
	assert_int_equal(rc, 0);
	assert_non_null(made);
	cJSON_Delete(made);
	/* A bad token in hello: refused, and a string is required. */
	gpb_client *c;
	assert_int_equal(connect_with("0123", &c), GPB_E_PERMISSION);
	/* Nothing was lost and the daemon is sound: only the two exist. */
	char *json;
	assert_int_equal(gpb_partitions(admin, &json), 0);
	cJSON *r = cJSON_Parse(json);
	gpb_string_free(json);
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(r, "partitions")), 2);
	const cJSON *p = find_partition(r, "by-uuid");
	assert_int_equal(
	    cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(p, "devices"), 0), "device")
	        ->valueint,
	    1);
	cJSON_Delete(r);
	th_selfcheck(admin, NULL);
	assert_int_equal(gpb_partition_destroy(admin, "taken"), 0);
	assert_int_equal(gpb_partition_destroy(admin, "by-uuid"), 0);
	check_clean();
}

/* ---- the CLI ------------------------------------------------------------------- */

static char out[65536];

static int ctl(const char *a1, const char *a2, const char *a3, const char *a4, const char *a5,
               const char *a6, const char *a7, const char *a8)
{
	char *argv[14] = {(char *)th_env("GPB_CTL"), "--socket", daemon_.socket};
	int n = 3;
	const char *args[] = {a1, a2, a3, a4, a5, a6, a7, a8};
	for (int i = 0; i < 8 && args[i]; i++)
		argv[n++] = (char *)args[i];
	argv[n] = NULL;
	return th_run(argv, NULL, out, sizeof(out));
}

static void test_cli(void **state)
{
	(void)state;
	/* The token alone on stdout, for TOKEN=$(...). */
	assert_int_equal(
	    ctl("partition-create", "cli-job", "--uid", "0", "--size", "64M", NULL, NULL), 0);
	assert_int_equal(strlen(out), 65);
	assert_int_equal(strspn(out, "0123456789abcdef"), 64);
	assert_int_equal(out[64], '\n');
	char token[65];
	memcpy(token, out, 64);
	token[64] = '\0';
	assert_int_equal(
	    ctl("partition-create", "cli-two", "--uid", "61011", "--size", "512M", "--device", "1"),
	    0);

	assert_int_equal(ctl("partitions", NULL, NULL, NULL, NULL, NULL, NULL, NULL), 0);
	assert_string_equal(out, "NAME       UID  SESSIONS  DEVICE       SIZE  USED       FREE\n"
	                         "cli-job      0         0       0   64.0 MiB   0 B   64.0 MiB\n"
	                         "cli-job      0         0       1   64.0 MiB   0 B   64.0 MiB\n"
	                         "cli-two  61011         0       1  512.0 MiB   0 B  512.0 MiB\n");
	assert_int_equal(ctl("--output", "csv", "partitions", NULL, NULL, NULL, NULL, NULL), 0);
	assert_non_null(strstr(out, "name,uid,sessions,device,size,used,free\n"
	                            "cli-job,0,0,0,67108864,0,67108864\n"
	                            "cli-job,0,0,1,67108864,0,67108864\n"
	                            "cli-two,61011,0,1,536870912,0,536870912\n"));
	assert_int_equal(ctl("--output", "json", "partitions", NULL, NULL, NULL, NULL, NULL), 0);
	cJSON *r = cJSON_Parse(out);
	assert_non_null(r);
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(r, "partitions")), 2);
	cJSON_Delete(r);

	/* A client with the token: the partition's devices only. */
	char env[96];
	snprintf(env, sizeof(env), "GPUBROKER_TOKEN=%s", token);
	char *argv[] = {
	    (char *)th_env("GPB_CTL"), "--socket", daemon_.socket, "-o", "csv", "devices", NULL};
	char *envp[] = {env, NULL};
	assert_int_equal(th_run(argv, envp, out, sizeof(out)), 0);
	assert_non_null(strstr(out, ",67108864,67108864,0,0,memfd\n"));

	/* clients names each client's partition, and "-" (CSV: nothing)
	 * outside. */
	assert_int_equal(setenv("GPUBROKER_TOKEN", token, 1), 0);
	gpb_client *inside = th_client(&daemon_, "cli-inside");
	assert_int_equal(unsetenv("GPUBROKER_TOKEN"), 0);
	assert_int_equal(ctl("clients", NULL, NULL, NULL, NULL, NULL, NULL, NULL), 0);
	assert_non_null(strstr(out, "CAP  PARTITION\n"));
	bool seen_in = false, seen_out = false;
	for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
		seen_in |= strstr(line, " cli-inside ") &&
		           strcmp(line + strlen(line) - 8, " cli-job") == 0;
		seen_out |= strstr(line, " partition-test ") && line[strlen(line) - 1] == '-';
	}
	assert_true(seen_in && seen_out);
	assert_int_equal(ctl("-o", "csv", "--no-header", "clients", NULL, NULL, NULL, NULL), 0);
	assert_non_null(strstr(out, ",cli-inside,"));
	for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
		size_t len = strlen(line);
		if (strstr(line, ",cli-inside,"))
			assert_string_equal(line + len - 8, ",cli-job");
		else
			assert_int_equal(line[len - 1], ',');
	}
	gpb_disconnect(inside);

	/* Errors: the daemon's (1), usage (2). */
	assert_int_equal(
	    ctl("partition-create", "cli-job", "--uid", "0", "--size", "1M", NULL, NULL), 1);
	assert_int_equal(ctl("partition-create", "x", "--uid", "0", "--size", "2G", NULL, NULL), 1);
	assert_int_equal(ctl("partition-create", "x", "--size", "1M", NULL, NULL, NULL, NULL), 2);
	assert_int_equal(ctl("partition-create", "x", "--uid", "0", "--size", "1Q", NULL, NULL), 2);
	assert_int_equal(ctl("partition-create", "x", "--uid", "-3", "--size", "1M", NULL, NULL),
	                 2);
	assert_int_equal(ctl("partitions", "--uid", "0", NULL, NULL, NULL, NULL, NULL), 2);
	assert_int_equal(ctl("partition-destroy", "nope", NULL, NULL, NULL, NULL, NULL, NULL), 1);

	assert_int_equal(ctl("partition-destroy", "cli-job", NULL, NULL, NULL, NULL, NULL, NULL),
	                 0);
	assert_string_equal(out, "partition cli-job destroyed: 0 sessions ended, 0 B reclaimed\n");
	assert_int_equal(ctl("-o", "csv", "partition-destroy", "cli-two", NULL, NULL, NULL, NULL),
	                 0);
	assert_string_equal(out, "name,sessions,reclaimed\ncli-two,0,0\n");
	check_clean();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_create_list_destroy, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_overcommit_refused, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_overcommit_data, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_token_joins, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_wrong_token, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_destroy_reclaims, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_non_admin, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_bad_inputs, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_cli, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
