/*
 * test-fence.c - memory a process may still write is not handed on (issue
 * 24, item 4). A forked child holds an allocation and keeps it mapped;
 * its partition is destroyed, or an administrator evicts it. Until the
 * child's process exits, the range stays allocated ("fenced"): another
 * process of the same uid allocating is given other bytes, and the
 * child's later writes do not show up in them. The fenced figure is the
 * same in status (device and totals), devices, stats and the metrics, and
 * goes to 0 once the child has exited.
 *
 * The daemon is the harness's: sim, 2 devices of 1 GiB, 2 MiB slabs. The
 * child is of the test's own uid (a partition for that uid), and the test
 * needs to be an administrator: root (skipped otherwise).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "harness.h"

#define KiB       (1ull << 10)
#define MiB       (1ull << 20)
#define SIZE      (64 * KiB)
#define OLD_BYTE  0x11
#define LATE_BYTE 0x77
#define NEW_BYTE  0x22

/* What the child tells the parent of its allocation. */
struct held {
	uint64_t session, slab, offset, size;
};

static uint64_t u64_of(const cJSON *v)
{
	assert_true(cJSON_IsString(v));
	return strtoull(v->valuestring, NULL, 10);
}

static cJSON *request(gpb_client *c, const char *method, const char *params)
{
	char *text = NULL;
	assert_int_equal(gpb_request(c, method, params, &text), 0);
	cJSON *root = cJSON_Parse(text);
	gpb_string_free(text);
	assert_non_null(root);
	return root;
}

/* "fenced" of device 0 in the devices array of method's result. */
static uint64_t device0_fenced(gpb_client *c, const char *method)
{
	cJSON *root = request(c, method, NULL);
	const cJSON *dev = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "devices"), 0);
	assert_non_null(dev);
	uint64_t v = u64_of(cJSON_GetObjectItem(dev, "fenced"));
	cJSON_Delete(root);
	return v;
}

/* gpubroker_device_fenced_bytes of device 0, from the metrics text. */
static uint64_t metric_fenced(gpb_client *c)
{
	static const char series[] = "gpubroker_device_fenced_bytes{device=\"0\",";
	cJSON *root = request(c, "metrics", NULL);
	const char *text = cJSON_GetStringValue(cJSON_GetObjectItem(root, "text"));
	assert_non_null(text);
	const char *p = strstr(text, series);
	assert_non_null(p);
	p = strchr(p, ' ');
	assert_non_null(p);
	uint64_t v = strtoull(p + 1, NULL, 10);
	cJSON_Delete(root);
	return v;
}

/* The fenced bytes of device 0 (device 1 has none), the same wherever an
 * operator looks. */
static uint64_t fenced(gpb_client *admin)
{
	struct gpb_pool_stats st;
	uint64_t v = th_status_field(admin, "fenced"); /* totals */
	assert_int_equal(device0_fenced(admin, "status"), v);
	assert_int_equal(device0_fenced(admin, "devices"), v);
	assert_int_equal(device0_fenced(admin, "stats"), v);
	assert_int_equal(gpb_stats(admin, 0, &st), 0);
	assert_int_equal(st.fenced, v);
	assert_true(st.used >= v);
	assert_int_equal(metric_fenced(admin), v);
	return v;
}

/* One look: the exit watch may let go between two. */
static bool no_fence(void *admin)
{
	return th_status_field(admin, "fenced") == 0;
}

/* The child: connects (with token, inside that partition), allocates SIZE
 * on device 0, fills it with OLD_BYTE and reports it; then, on 'w', writes
 * LATE_BYTE over it (its mapping outlives the end of its connection) and
 * answers 'k'; on 'q' (or EOF) it exits, never unmapping. */
static void child_run(const char *socket, const char *token, int up, int down)
{
	gpb_client *c;
	uint64_t inst;
	struct gpb_allocation a;
	struct gpb_instance_info info;
	if (token)
		setenv("GPUBROKER_TOKEN", token, 1);
	if (gpb_connect(socket, "old-owner", &c) != 0)
		th_child_exit(80);
	if (gpb_register(c, &(struct gpb_register_opts){.name = "old", .device = 0}, &inst) != 0 ||
	    gpb_alloc(c, inst, SIZE, 0, &a) != 0 || gpb_instance_info(c, inst, &info) != 0)
		th_child_exit(81);
	memset(a.ptr, OLD_BYTE, a.size);
	struct held h = {info.session, a.slab, a.offset, a.size};
	if (write(up, &h, sizeof(h)) != (ssize_t)sizeof(h))
		th_child_exit(82);
	char cmd;
	while (read(down, &cmd, 1) == 1 && cmd == 'w') {
		memset(a.ptr, LATE_BYTE, a.size);
		if (write(up, "k", 1) != 1)
			th_child_exit(83);
	}
	th_child_exit(0);
}

/* The whole case: partition destroyed (true) or evicted (false). */
static void fence_case(bool partition)
{
	if (geteuid() != 0)
		skip(); /* an administrator's requests */
	struct th_daemon d;
	th_daemon_start(&d, NULL);
	gpb_client *admin = th_client(&d, "admin");
	char token[65];
	int dev0[] = {0};
	if (partition)
		assert_int_equal(
		    gpb_partition_create(admin, "fence", geteuid(), 64 * MiB, dev0, 1, token), 0);
	int rd, wr;
	pid_t pid = th_fork_linked(&rd, &wr);
	if (pid == 0)
		child_run(d.socket, partition ? token : NULL, wr, rd);
	struct held h;
	assert_int_equal(read(rd, &h, sizeof(h)), sizeof(h));
	assert_int_equal(h.size, SIZE);
	assert_int_equal(fenced(admin), 0);

	if (partition) {
		assert_int_equal(gpb_partition_destroy(admin, "fence"), 0);
	} else {
		char params[64];
		snprintf(params, sizeof(params), "{\"session\":\"%016" PRIx64 "\"}", h.session);
		cJSON_Delete(request(admin, "evict", params));
	}
	/* Its connection has ended (and with it the session): what it held
	 * has been released. */
	assert_true(th_wait_for(th_only_one_client, admin, 10000));

	/* Another process of the same uid (this one) is given other bytes. */
	uint64_t inst;
	struct gpb_allocation y;
	assert_int_equal(
	    gpb_register(admin, &(struct gpb_register_opts){.name = "new", .device = 0}, &inst), 0);
	assert_int_equal(gpb_alloc(admin, inst, SIZE, 0, &y), 0);
	printf("old: slab %" PRIu64 " [%" PRIu64 ", +%" PRIu64 "); new: slab %" PRIu64 " [%" PRIu64
	       ", +%" PRIu64 ")\n",
	       h.slab, h.offset, h.size, y.slab, y.offset, y.size);
	assert_false(y.slab == h.slab && y.offset < h.offset + h.size &&
	             h.offset < y.offset + y.size);
	memset(y.ptr, NEW_BYTE, y.size);
	/* The old process writes where it still can: not into the new bytes. */
	char ack;
	assert_int_equal(write(wr, "w", 1), 1);
	assert_int_equal(read(rd, &ack, 1), 1);
	for (uint64_t i = 0; i < y.size; i++)
		assert_int_equal(((const unsigned char *)y.ptr)[i], NEW_BYTE);
	/* Where it is: fenced, in used, until that process exits. */
	assert_int_equal(fenced(admin), SIZE);
	assert_int_equal(th_status_used(admin), SIZE + y.size);
	th_selfcheck(admin, NULL);

	assert_int_equal(write(wr, "q", 1), 1);
	th_child_reap_ok(pid);
	close(rd);
	close(wr);
	/* The exit watch sees it go (a pidfd in the daemon's loop). */
	assert_true(th_wait_for(no_fence, admin, 10000));
	assert_int_equal(fenced(admin), 0);
	assert_int_equal(th_status_used(admin), y.size);
	struct th_selfcheck sc;
	th_selfcheck(admin, &sc);
	assert_int_equal(sc.ghosts, 0);
	assert_int_equal(sc.parting, 0);
	assert_int_equal(gpb_free(admin, y.id), 0);
	th_settle(admin);
	assert_int_equal(th_status_used(admin), 0);
	gpb_disconnect(admin);
	assert_int_equal(th_daemon_stop(&d), 0);
}

static void test_partition_destroy_fences(void **state)
{
	(void)state;
	fence_case(true);
}

static void test_evict_fences(void **state)
{
	(void)state;
	fence_case(false);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_partition_destroy_fences),
	    cmocka_unit_test(test_evict_fences),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
