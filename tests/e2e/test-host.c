/*
 * test-host.c - host memory end to end (alloc types "pinned" and "mapped"):
 * the real daemon and library on the sim backend. The memory is usable and
 * zeroed, counted in status, bounded by max_host_memory for all clients
 * together, freed by gpb_free, by disconnect and by a client's death.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

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

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_host_memory),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
