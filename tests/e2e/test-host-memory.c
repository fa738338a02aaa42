/*
 * test-host-memory.c - host memory end to end (alloc types "pinned" and "mapped"):
 * the real daemon and library on the sim backend. The memory is usable and
 * zeroed, counted in status, bounded by max_host_memory for all clients
 * together, freed by gpb_free, by disconnect and by a client's death; and
 * queued arrays of host memory (allocate_queue, claim, free_label).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "harness.h"

static uint64_t reg(gpb_client *c)
{
	struct gpb_register_opts opts = {.name = "host"};
	uint64_t inst;
	assert_int_equal(gpb_register(c, &opts, &inst), 0);
	return inst;
}

static bool host_used_is(void *arg)
{
	void **a = arg;
	return th_status_field(a[0], "host_used") == *(uint64_t *)a[1];
}

static void test_host_memory(void **state)
{
	char conf[128];
	(void)state;
	snprintf(conf, sizeof(conf), "/tmp/gpb-host-%d.conf", (int)getpid());
	FILE *f = fopen(conf, "w");
	assert_non_null(f);
	fputs("max_host_memory = 1MiB\n", f);
	fclose(f);
	const char *extra[] = {"--config", conf, NULL};
	struct th_daemon d;
	th_daemon_start(&d, extra);
	gpb_client *c = th_client(&d, "host");
	uint64_t inst = reg(c);

	struct gpb_allocation p, m;
	assert_int_equal(gpb_alloc_host(c, inst, 100000, GPB_HOST_PINNED, &p), 0);
	assert_true(p.size >= 100000 && p.device == -1 && p.ptr);
	for (uint64_t i = 0; i < p.size; i++)
		assert_int_equal(((unsigned char *)p.ptr)[i], 0);
	memset(p.ptr, 0x3c, p.size);
	assert_int_equal(gpb_alloc_host(c, inst, 4096, GPB_HOST_MAPPED, &m), 0);
	void *dev = NULL;
	assert_int_equal(gpb_host_device_pointer(c, m.id, &dev), 0);
	assert_ptr_equal(dev, m.ptr); /* sim: the device is host memory */
	assert_int_equal(gpb_host_device_pointer(c, p.id, &dev), GPB_E_INVALID);
	assert_int_equal(gpb_host_device_pointer(c, 0x1234, &dev), GPB_E_NOT_FOUND);
	assert_int_equal(th_status_field(c, "host_used"), p.size + m.size);
	assert_int_equal(th_status_field(c, "host_allocations"), 2);
	/* Not device memory. */
	assert_int_equal(th_status_used(c), 0);
	/* Not shareable. */
	gpb_client *o = th_client(&d, "other");
	struct gpb_allocation x;
	assert_int_equal(gpb_attach(o, p.id, &x), GPB_E_NOT_FOUND);
	assert_int_equal(gpb_free(o, p.id), GPB_E_NOT_FOUND);
	/* max_host_memory counts every client. */
	uint64_t o_inst = reg(o);
	assert_int_equal(gpb_alloc_host(o, o_inst, 1 << 20, GPB_HOST_PINNED, &x),
	                 GPB_E_OUT_OF_MEMORY);
	assert_non_null(strstr(gpb_last_error(), "max_host_memory"));
	assert_int_equal(gpb_alloc_host(o, o_inst, 0, GPB_HOST_PINNED, &x), GPB_E_INVALID);
	assert_int_equal(gpb_alloc_host(o, o_inst, 4096, 7, &x), GPB_E_INVALID);
	char *json = NULL;
	char params[160];
	snprintf(params, sizeof(params),
	         "{\"instance\":\"%016llx\",\"size\":\"1\",\"type\":\"managed\"}",
	         (unsigned long long)o_inst);
	assert_int_equal(gpb_request(o, "alloc", params, &json), GPB_E_NOT_SUPPORTED);
	/* Raw requests keep the library's books too. */
	snprintf(params, sizeof(params),
	         "{\"instance\":\"%016llx\",\"size\":\"4096\",\"type\":\"pinned\"}",
	         (unsigned long long)o_inst);
	assert_int_equal(gpb_request(o, "alloc", params, &json), 0);
	assert_non_null(strstr(json, "\"type\":\"pinned\""));
	gpb_string_free(json);

	/* Freed: the bytes are gone from the books, the pattern stays ours
	 * until then. */
	assert_int_equal(((unsigned char *)p.ptr)[p.size - 1], 0x3c);
	assert_int_equal(gpb_free(c, p.id), 0);
	assert_int_equal(gpb_free(c, p.id), GPB_E_NOT_FOUND);
	assert_int_equal(th_status_field(c, "host_used"), m.size + 4096);
	gpb_disconnect(o);
	uint64_t want = m.size;
	void *arg[] = {c, &want};
	assert_true(th_wait_for(host_used_is, arg, 5000));

	/* A client killed while it holds host memory: released. */
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		gpb_client *k = NULL;
		struct gpb_register_opts opts = {.name = "doomed"};
		uint64_t ki;
		struct gpb_allocation ka;
		if (gpb_connect(d.socket, "doomed", &k) || gpb_register(k, &opts, &ki) ||
		    gpb_alloc_host(k, ki, 65536, GPB_HOST_PINNED, &ka))
			th_child_exit(1);
		kill(getpid(), SIGKILL);
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFSIGNALED(st));
	assert_true(th_wait_for(host_used_is, arg, 5000));
	assert_int_equal(gpb_free(c, m.id), 0);
	want = 0;
	assert_true(th_wait_for(host_used_is, arg, 5000));
	th_selfcheck(c, NULL);
	gpb_disconnect(c);
	assert_int_equal(th_daemon_stop(&d), 0);
	unlink(conf);
}

/* What allocation_ready said of each array: id and type by label. */
struct ready {
	int seen;
	uint64_t chunks;
	uint64_t id[3];
	char type[3][8];
};

static const char *const ready_labels[3] = {"dev", "pin", "map"};

static void on_ready(gpb_client *c, const char *name, const char *data, void *ud)
{
	struct ready *r = ud;
	const cJSON *a;
	(void)c;
	cJSON *root = strcmp(name, "allocation_ready") == 0 ? cJSON_Parse(data) : NULL;
	if (!root)
		return;
	r->chunks = strtoull(cJSON_GetStringValue(cJSON_GetObjectItem(root, "chunks")), NULL, 10);
	cJSON_ArrayForEach(a, cJSON_GetObjectItem(root, "arrays"))
	{
		const char *label = cJSON_GetStringValue(cJSON_GetObjectItem(a, "label"));
		for (int i = 0; label && i < 3; i++) {
			if (strcmp(label, ready_labels[i]) != 0)
				continue;
			r->id[i] =
			    strtoull(cJSON_GetStringValue(cJSON_GetObjectItem(a, "id")), NULL, 16);
			snprintf(r->type[i], sizeof(r->type[i]), "%s",
			         cJSON_GetStringValue(cJSON_GetObjectItem(a, "type")));
		}
	}
	r->seen++;
	cJSON_Delete(root);
}

static void test_queued_host(void **state)
{
	(void)state;
	struct th_daemon d;
	th_daemon_start(&d, NULL);
	gpb_client *c = th_client(&d, "queued");
	struct gpb_register_opts opts = {.name = "q", .group = "hq"};
	uint64_t inst;
	assert_int_equal(gpb_register(c, &opts, &inst), 0);
	/* 64 runs of 4 KiB on the device, 64 runs of 1 KiB pinned, and a
	 * mapped table. */
	struct gpb_array_request reqs[3] = {
	    {.label = "dev", .shape = {64, 1024}, .ndim = 2, .elem_size = 4},
	    {.label = "pin",
	     .shape = {64, 256},
	     .ndim = 2,
	     .elem_size = 4,
	     .type = GPB_HOST_PINNED},
	    {.label = "map",
	     .shape = {16},
	     .ndim = 1,
	     .elem_size = 4,
	     .unchunkable = 1,
	     .type = GPB_HOST_MAPPED},
	};
	/* The chunking sends the types: the pinned array does not count in
	 * 128 KiB (two chunks of 32 runs) but is cut to 32 runs. */
	struct gpb_chunking ch;
	uint64_t shapes[3][8];
	assert_int_equal(gpb_chunk_parameters(c, NULL, 128 << 10, 0, reqs, 3, &ch, shapes), 0);
	assert_int_equal(ch.chunks, 2);
	assert_int_equal(shapes[1][0], 32);
	assert_int_equal(shapes[2][0], 16);
	reqs[2].type = 7;
	assert_int_equal(gpb_queue_request(c, inst, reqs, 3), GPB_E_INVALID);
	reqs[2].type = GPB_HOST_MAPPED;

	struct ready r = {0};
	gpb_set_event_callback(c, on_ready, &r);
	assert_int_equal(gpb_queue_request(c, inst, reqs, 3), 3);
	assert_int_equal(gpb_allocate_queue(c, inst, &ch), 0);
	assert_int_equal(ch.chunks, 1);
	for (int i = 0; i < 500 && !r.seen; i++) {
		struct pollfd p = {.fd = gpb_event_fd(c), .events = POLLIN};
		if (poll(&p, 1, 20) == 1)
			assert_true(gpb_dispatch(c) >= 0);
	}
	assert_int_equal(r.seen, 1);
	assert_string_equal(r.type[0], "device");
	assert_string_equal(r.type[1], "pinned");
	assert_string_equal(r.type[2], "mapped");
	/* Unclaimed host arrays count already. */
	assert_int_equal(th_status_field(c, "host_used"), 65536 + 4096);

	struct gpb_allocation dev, pin, map;
	assert_int_equal(gpb_claim(c, r.id[0], &dev), 0);
	assert_int_equal(gpb_claim(c, r.id[1], &pin), 0);
	assert_int_equal(gpb_claim(c, r.id[2], &map), 0);
	assert_int_equal(gpb_claim(c, r.id[1], &pin), GPB_E_INVALID);
	assert_true(dev.device == 0 && dev.size == 256 << 10);
	assert_true(pin.device == -1 && pin.size == 65536 && pin.ptr);
	assert_true(map.device == -1 && map.size == 4096);
	/* The pinned memory is real, zeroed, and this process's. */
	for (uint64_t i = 0; i < pin.size; i++)
		assert_int_equal(((unsigned char *)pin.ptr)[i], 0);
	memset(pin.ptr, 0x5a, pin.size);
	assert_int_equal(((unsigned char *)pin.ptr)[pin.size - 1], 0x5a);
	void *devp = NULL;
	assert_int_equal(gpb_host_device_pointer(c, map.id, &devp), 0);
	assert_ptr_equal(devp, map.ptr);
	assert_int_equal(gpb_host_device_pointer(c, pin.id, &devp), GPB_E_INVALID);

	/* free_label frees (and unmaps) host arrays; the library forgets them. */
	assert_int_equal(gpb_free_label(c, 0, "pin"), 1);
	assert_int_equal(gpb_free(c, pin.id), GPB_E_NOT_FOUND);
	assert_int_equal(gpb_host_device_pointer(c, pin.id, &devp), GPB_E_NOT_FOUND);
	assert_int_equal(th_status_field(c, "host_used"), 4096);
	assert_int_equal(gpb_free_label(c, inst, "map"), 1);
	assert_int_equal(gpb_host_device_pointer(c, map.id, &devp), GPB_E_NOT_FOUND);
	assert_int_equal(gpb_free_label(c, inst, "dev"), 1);
	assert_int_equal(th_status_field(c, "host_used"), 0);
	assert_int_equal(th_status_used(c), 0);
	th_selfcheck(c, NULL);
	gpb_disconnect(c);
	assert_int_equal(th_daemon_stop(&d), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_host_memory),
	    cmocka_unit_test(test_queued_host),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
