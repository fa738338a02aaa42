/*
 * test-alloc-across-processes.c - allocations through the real library against the real
 * daemon: bytes cross processes, counters follow, slabs are mapped once.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "harness.h"

static struct th_daemon daemon_;

static int setup(void **state)
{
	th_daemon_start(&daemon_, NULL);
	return 0;
}

static int teardown(void **state)
{
	assert_int_equal(th_daemon_stop(&daemon_), 0);
	return 0;
}

static uint64_t reg(gpb_client *c, int device)
{
	struct gpb_register_opts opts = {.name = "test", .device = device};
	uint64_t inst = 0;
	assert_int_equal(gpb_register(c, &opts, &inst), 0);
	assert_true(inst != 0);
	return inst;
}

static void fill(unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)(i * 31 + seed);
}

static bool check(const unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++) {
		if (p[i] != (unsigned char)(i * 31 + seed))
			return false;
	}
	return true;
}

/* A pattern written in this process is read by another process through its
 * own connection and mapping, and that process's answer is read back here. */
static void test_pattern_across_processes(void **state)
{
	gpb_client *c = th_client(&daemon_, "writer");
	uint64_t inst = reg(c, 0);
	struct gpb_allocation a;
	const size_t size = 3 * 1024 * 1024 + 17; /* dedicated slab, odd size */
	assert_int_equal(gpb_alloc(c, inst, size, 0, &a), 0);
	assert_non_null(a.ptr);
	assert_true(a.size >= size && a.size % 256 == 0);
	fill(a.ptr, size, 7);

	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* A new process: new connection, new mapping of the slab. */
		gpb_client *r = NULL;
		struct gpb_allocation b;
		int ok = gpb_connect(daemon_.socket, "reader", &r) == 0 &&
		         gpb_attach(r, a.id, &b) == 0 && b.size == a.size && check(b.ptr, size, 7);
		if (ok)
			fill(b.ptr, size, 99);
		if (ok)
			ok = gpb_detach(r, a.id) == 0 && gpb_detach(r, a.id) == GPB_E_NOT_FOUND;
		gpb_disconnect(r);
		_exit(ok ? 0 : 1);
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	assert_true(check(a.ptr, size, 99));
	assert_int_equal(gpb_free(c, a.id), 0);
	gpb_disconnect(c);
}

/* A device named by UUID resolves to its index, as the daemon numbers it. */
static void test_device_index(void **state)
{
	gpb_client *c = th_client(&daemon_, "uuids");
	char *json = NULL;
	assert_int_equal(gpb_request(c, "devices", NULL, &json), 0);
	cJSON *root = cJSON_Parse(json);
	gpb_string_free(json);
	const cJSON *it;
	int n = 0;
	cJSON_ArrayForEach(it, cJSON_GetObjectItem(root, "devices"))
	{
		int index = -1;
		const char *uuid = cJSON_GetStringValue(cJSON_GetObjectItem(it, "uuid"));
		assert_int_equal(gpb_device_index(c, uuid, &index), 0);
		assert_int_equal(index, cJSON_GetObjectItem(it, "device")->valueint);
		n++;
	}
	cJSON_Delete(root);
	assert_int_equal(n, 2);
	int index = 7;
	assert_int_equal(gpb_device_index(c, "GPU-no-such-device", &index), GPB_E_INVALID);
	assert_int_equal(index, 7);
	assert_int_equal(gpb_device_index(c, NULL, &index), GPB_E_INVALID);
	assert_int_equal(gpb_device_index(c, "GPU-x", NULL), GPB_E_INVALID);
	gpb_disconnect(c);
}

/* mem_info and stats follow allocations and frees exactly. */
static void test_counters(void **state)
{
	gpb_client *c = th_client(&daemon_, "counters");
	uint64_t inst = reg(c, 1);
	struct gpb_mem_info mi;
	struct gpb_pool_stats st0, st;
	assert_int_equal(gpb_stats(c, 1, &st0), 0);
	assert_int_equal(gpb_mem_info(c, inst, &mi), 0);
	assert_int_equal(mi.used, 0);
	assert_int_equal(mi.device_total, 1ull << 30);

	struct gpb_allocation a[10];
	uint64_t total = 0;
	for (int i = 0; i < 10; i++) {
		assert_int_equal(gpb_alloc(c, inst, 1000 + (uint64_t)i * 4096, 0, &a[i]), 0);
		assert_int_equal(a[i].device, 1);
		total += a[i].size;
	}
	assert_int_equal(gpb_mem_info(c, inst, &mi), 0);
	assert_int_equal(mi.used, total);
	assert_int_equal(mi.device_free, (1ull << 30) - total);
	assert_int_equal(gpb_stats(c, 1, &st), 0);
	assert_int_equal(st.used, total);
	assert_int_equal(st.live, 10);
	assert_int_equal(st.allocs - st0.allocs, 10);
	assert_true(st.reserved >= total);
	assert_int_equal(st.free, st.reserved - st.used);
	assert_true(st.peak >= total);
	assert_int_equal(th_status_used(c), total);

	/* Two allocations in one slab share one mapping: pointer distance
	 * equals offset distance. */
	assert_int_equal(a[0].slab, a[1].slab);
	assert_int_equal((char *)a[1].ptr - (char *)a[0].ptr, (int64_t)(a[1].offset - a[0].offset));

	for (int i = 0; i < 10; i++)
		assert_int_equal(gpb_free(c, a[i].id), 0);
	assert_int_equal(gpb_free(c, a[0].id), GPB_E_NOT_FOUND);
	assert_int_equal(gpb_stats(c, 1, &st), 0);
	assert_int_equal(st.used, 0);
	assert_int_equal(st.live, 0);
	assert_int_equal(st.frees - st0.frees, 10);
	assert_int_equal(th_status_used(c), 0);
	gpb_disconnect(c);
}

/* Memory survives a free/alloc cycle that drops and re-sends the slab. */
static void test_slab_reopen(void **state)
{
	gpb_client *c = th_client(&daemon_, "reopen");
	uint64_t inst = reg(c, 0);
	for (int round = 0; round < 50; round++) {
		struct gpb_allocation a;
		assert_int_equal(gpb_alloc(c, inst, 4096, 0, &a), 0);
		fill(a.ptr, 4096, (unsigned)round);
		assert_true(check(a.ptr, 4096, (unsigned)round));
		assert_int_equal(gpb_free(c, a.id), 0);
	}
	gpb_disconnect(c);
}

/* Bytes of memory behind the daemon's slab memfds, and how many it has open
 * (/proc/PID/fd: "/memfd:gpubroker-slab (deleted)"). */
static uint64_t slab_blocks(pid_t pid, unsigned *count)
{
	char dir[64], path[320], link[256];
	uint64_t bytes = 0;
	struct dirent *e;
	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
	DIR *d = opendir(dir);
	assert_non_null(d);
	*count = 0;
	while ((e = readdir(d))) {
		struct stat st;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		ssize_t n = readlink(path, link, sizeof(link) - 1);
		if (n < 0)
			continue;
		link[n] = '\0';
		if (!strstr(link, "memfd:gpubroker-slab") || stat(path, &st) < 0)
			continue;
		bytes += (uint64_t)st.st_blocks * 512;
		(*count)++;
	}
	closedir(d);
	return bytes;
}

/* A slab is sparse: memory only where bytes were written, however large. */
static void test_slabs_sparse(void **state)
{
	gpb_client *c = th_client(&daemon_, "sparse");
	uint64_t inst = reg(c, 1);
	unsigned before_count, count;
	uint64_t before = slab_blocks(daemon_.pid, &before_count);
	struct gpb_allocation a;
	/* Larger than a slab: a dedicated slab of its own, new. */
	assert_int_equal(gpb_alloc(c, inst, 100 << 20, 0, &a), 0);
	uint64_t empty = slab_blocks(daemon_.pid, &count);
	assert_int_equal(count, before_count + 1);
	assert_true(empty - before < (1 << 20));
	memset((char *)a.ptr + (32 << 20), 0x5a, 4 << 20); /* 4 MiB touched of 100 */
	uint64_t used = slab_blocks(daemon_.pid, &count);
	assert_true(used - before >= (4 << 20));
	assert_true(used - before < (6 << 20));
	assert_int_equal(gpb_free(c, a.id), 0);
	gpb_disconnect(c);
}

/* The daemon puts an allocation in a slab the connection holds already (no
 * handle to send, nothing to open) over a better fit in another slab of the
 * same user. */
static void test_prefers_held_slab(void **state)
{
	gpb_client *c1 = th_client(&daemon_, "prefer-1");
	gpb_client *c2 = th_client(&daemon_, "prefer-2");
	uint64_t i1 = reg(c1, 0), i2 = reg(c2, 0);
	struct gpb_allocation a1, a2, b1, b2, c1x;
	const uint64_t KiB = 1 << 10;

	/* The harness's slabs are 2 MiB. Slab A: 1920 KiB live, a 128 KiB
	 * hole. Slab B: 256 + 1280 KiB live, a 512 KiB hole; only connection
	 * 2 holds B (and only B). */
	assert_int_equal(gpb_alloc(c1, i1, 1920 * KiB, 0, &a1), 0);
	assert_int_equal(gpb_alloc(c1, i1, 256 * KiB, 0, &a2), 0);
	assert_true(a2.slab != a1.slab);
	assert_int_equal(gpb_alloc(c2, i2, 1280 * KiB, 0, &b1), 0);
	assert_int_equal(b1.slab, a2.slab);
	/* Good fit would take A's hole; connection 2 gets B, which it has. */
	assert_int_equal(gpb_alloc(c2, i2, 64 * KiB, 0, &b2), 0);
	assert_int_equal(b2.slab, b1.slab);
	/* Connection 1 holds both: good fit, A's smaller hole. */
	assert_int_equal(gpb_alloc(c1, i1, 64 * KiB, 0, &c1x), 0);
	assert_int_equal(c1x.slab, a1.slab);
	fill(b2.ptr, 4096, 7);
	assert_true(check((unsigned char *)b1.ptr + (b2.offset - b1.offset), 4096, 7));
	assert_int_equal(gpb_free(c1, c1x.id), 0);
	assert_int_equal(gpb_free(c2, b2.id), 0);
	assert_int_equal(gpb_free(c2, b1.id), 0);
	assert_int_equal(gpb_free(c1, a2.id), 0);
	assert_int_equal(gpb_free(c1, a1.id), 0);
	gpb_disconnect(c2);
	gpb_disconnect(c1);
}

static void test_alignment_and_errors(void **state)
{
	gpb_client *c = th_client(&daemon_, "align");
	uint64_t inst = reg(c, 0);
	for (uint64_t align = 256; align <= (2u << 20); align *= 2) {
		struct gpb_allocation a;
		assert_int_equal(gpb_alloc(c, inst, 300, align, &a), 0);
		assert_int_equal(a.offset % align, 0);
		assert_int_equal(gpb_free(c, a.id), 0);
	}
	struct gpb_allocation a;
	assert_int_equal(gpb_alloc(c, inst, 0, 0, &a), GPB_E_INVALID);
	assert_int_equal(gpb_alloc(c, inst, 100, 300, &a), GPB_E_INVALID);
	assert_int_equal(gpb_alloc(c, inst + 1000, 100, 0, &a), GPB_E_NOT_FOUND);
	assert_int_equal(gpb_alloc(c, inst, 2ull << 30, 0, &a), GPB_E_OUT_OF_MEMORY);
	assert_non_null(strstr(gpb_last_error(), "out of memory"));
	assert_int_equal(gpb_free(c, 0x1234), GPB_E_NOT_FOUND);
	struct gpb_register_opts bad = {.name = "x", .device = 5};
	uint64_t id;
	assert_int_equal(gpb_register(c, &bad, &id), GPB_E_INVALID);
	bad.device = 0;
	bad.proportion = 1.5;
	assert_int_equal(gpb_register(c, &bad, &id), GPB_E_INVALID);
	gpb_disconnect(c);
}

/* Another uid's allocations are invisible; same answer as an unknown id. */
/* Whether the n bytes at p all hold byte v. */
static bool all_bytes(const unsigned char *p, size_t n, unsigned char v)
{
	for (size_t i = 0; i < n; i++) {
		if (p[i] != v)
			return false;
	}
	return true;
}

/*
 * The last part of a device, smaller than a standard slab, serves requests:
 * a 100 MiB device, 64 MiB slabs, one 64 MiB allocation held, and a 256-byte
 * request gets memory (a slab of the 36 MiB left); a request for more than
 * is left fails, with what it asked and what is free; all the rest can be
 * had. The direct allocator (one exact backend allocation a request) fills
 * the device the same way.
 */
static void test_device_tail(void **state)
{
	const char *extra[] = {"--sim-devices", "1", "--sim-memory", "100MiB", "--slab-size",
	                       "64MiB",         NULL};
	struct gpb_allocation big, small, rest, x;
	struct gpb_pool_stats st;
	struct th_daemon d;
	(void)state;
	th_daemon_start(&d, extra);
	gpb_client *c = th_client(&d, "tail");
	uint64_t inst = reg(c, 0);
	assert_int_equal(gpb_alloc(c, inst, 64ull << 20, 0, &big), 0);
	assert_int_equal(gpb_alloc(c, inst, 256, 0, &small), 0);
	assert_true(small.slab != big.slab);
	memset(small.ptr, 0x5a, 256);
	assert_int_equal(gpb_stats(c, 0, &st), 0);
	assert_int_equal(st.slabs, 2);
	assert_int_equal(st.reserved, 100ull << 20);
	assert_int_equal(st.ooms, 0);

	assert_int_equal(gpb_alloc(c, inst, 36ull << 20, 0, &x), GPB_E_OUT_OF_MEMORY);
	assert_non_null(
	    strstr(gpb_last_error(), "37748736 bytes requested on device 0, 37748480 free"));
	assert_int_equal(gpb_alloc(c, inst, (36ull << 20) - 256, 0, &rest), 0);
	assert_true(rest.slab == small.slab);
	memset(rest.ptr, 0xa5, rest.size);
	assert_true(all_bytes(small.ptr, 256, 0x5a));
	assert_int_equal(th_status_used(c), 100ull << 20);
	assert_int_equal(gpb_alloc(c, inst, 256, 0, &x), GPB_E_OUT_OF_MEMORY);
	assert_non_null(strstr(gpb_last_error(), "256 bytes requested on device 0, 0 free"));
	assert_int_equal(gpb_free(c, rest.id), 0);
	assert_int_equal(gpb_free(c, small.id), 0);

	assert_int_equal(gpb_set_allocator(c, "direct"), 0);
	assert_int_equal(gpb_free(c, big.id), GPB_E_NOT_FOUND); /* released by the switch */
	assert_int_equal(gpb_alloc(c, inst, 64ull << 20, 0, &big), 0);
	assert_int_equal(gpb_alloc(c, inst, 36ull << 20, 0, &rest), 0);
	assert_int_equal(gpb_alloc(c, inst, 256, 0, &x), GPB_E_OUT_OF_MEMORY);
	assert_non_null(strstr(gpb_last_error(), "256 bytes requested on device 0, 0 free"));
	assert_int_equal(gpb_free(c, rest.id), 0);
	assert_int_equal(gpb_alloc(c, inst, 256, 0, &small), 0);
	assert_int_equal(gpb_stats(c, 0, &st), 0);
	assert_int_equal(st.slabs, 2);
	assert_int_equal(st.reserved, (64ull << 20) + 256);
	gpb_disconnect(c);
	assert_int_equal(th_daemon_stop(&d), 0);
}

static void test_other_connection_cannot_free(void **state)
{
	gpb_client *a = th_client(&daemon_, "owner");
	gpb_client *b = th_client(&daemon_, "other");
	uint64_t inst = reg(a, 0);
	struct gpb_allocation x;
	assert_int_equal(gpb_alloc(a, inst, 1024, 0, &x), 0);
	assert_int_equal(gpb_free(b, x.id), GPB_E_NOT_FOUND);
	assert_int_equal(gpb_free(a, x.id), 0);
	gpb_disconnect(b);
	gpb_disconnect(a);
}

struct worker {
	gpb_client *c;
	uint64_t inst;
	unsigned seed;
	int failures;
};

static void *worker_run(void *arg)
{
	struct worker *w = arg;
	for (int i = 0; i < 200; i++) {
		struct gpb_allocation a;
		size_t size = 256 + (size_t)((w->seed * 7919u + (unsigned)i * 104729u) % 65536);
		if (gpb_alloc(w->c, w->inst, size, 0, &a) < 0) {
			w->failures++;
			continue;
		}
		fill(a.ptr, size, w->seed + (unsigned)i);
		if (!check(a.ptr, size, w->seed + (unsigned)i))
			w->failures++;
		if (gpb_free(w->c, a.id) < 0)
			w->failures++;
	}
	return NULL;
}

/* One client shared by eight threads: requests are serialised, every
 * thread sees its own bytes, nothing is left over. */
static void test_threads_share_a_client(void **state)
{
	gpb_client *c = th_client(&daemon_, "threads");
	uint64_t inst = reg(c, 0);
	struct worker w[8];
	pthread_t t[8];
	for (int i = 0; i < 8; i++) {
		w[i] = (struct worker){.c = c, .inst = inst, .seed = (unsigned)i * 31 + 1};
		assert_int_equal(pthread_create(&t[i], NULL, worker_run, &w[i]), 0);
	}
	for (int i = 0; i < 8; i++) {
		assert_int_equal(pthread_join(t[i], NULL), 0);
		assert_int_equal(w[i].failures, 0);
	}
	struct gpb_mem_info mi;
	assert_int_equal(gpb_mem_info(c, inst, &mi), 0);
	assert_int_equal(mi.used, 0);
	gpb_disconnect(c);
}

/* The example program works against the daemon. */
static void test_example(void **state)
{
	char out[4096];
	char *argv[] = {(char *)th_env("GPB_EXAMPLE"), "--socket", daemon_.socket, NULL};
	assert_int_equal(th_run(argv, NULL, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "ok"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_pattern_across_processes),
	    cmocka_unit_test(test_device_index),
	    cmocka_unit_test(test_counters),
	    cmocka_unit_test(test_slab_reopen),
	    cmocka_unit_test(test_slabs_sparse),
	    cmocka_unit_test(test_prefers_held_slab),
	    cmocka_unit_test(test_alignment_and_errors),
	    cmocka_unit_test(test_device_tail),
	    cmocka_unit_test(test_other_connection_cannot_free),
	    cmocka_unit_test(test_threads_share_a_client),
	    cmocka_unit_test(test_example),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
