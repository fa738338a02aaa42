/*
 * test-leases.c - the lease allocator (issue 27) against the real daemon:
 * allocations served inside leases with no daemon message, growth, idle
 * return with the process making no calls, return-and-re-lease on
 * fragmentation, kill -9, fork, threads, carve on export and attach,
 * GPUBROKER_LEASE=0 and the direct allocator's fallback.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpubroker.h"
#include "harness.h"

#define MIB (1ull << 20)

static const char *const big_slabs[] = {"--slab-size", "64MiB", NULL};

static bool is_local(uint64_t id)
{
	return id >> 48 == 0x10ca;
}

static uint64_t reg(gpb_client *c, double proportion)
{
	struct gpb_register_opts o = {.name = "lease", .proportion = proportion};
	uint64_t inst;
	assert_int_equal(gpb_register(c, &o, &inst), 0);
	return inst;
}

/* Requests of @method answered so far (any result); 0 when none. */
static double requests(gpb_client *c, const char *method)
{
	static const char *const results[] = {"ok", "error", "refused", NULL};
	char series[160];
	double n = 0;

	for (int i = 0; results[i]; i++) {
		snprintf(series, sizeof(series),
		         "gpubroker_requests_total{method=\"%s\",result=\"%s\"}", method,
		         results[i]);
		double v = th_metric(c, series);
		if (v > 0)
			n += v;
	}
	return n;
}

static double memory_requests(gpb_client *c)
{
	return requests(c, "alloc") + requests(c, "free") + requests(c, "lease") +
	       requests(c, "lease_return");
}

/* Fills a block with its own pattern, or checks it. */
static void pattern(const struct gpb_allocation *a, unsigned char tag, bool check)
{
	unsigned char *p = a->ptr;
	uint64_t step = a->size > 4096 ? a->size / 64 : 1;
	for (uint64_t i = 0; i < a->size; i += step) {
		if (check)
			assert_int_equal(p[i], (unsigned char)(tag + i / step));
		else
			p[i] = (unsigned char)(tag + i / step);
	}
}

/* 64 live blocks of 256 B-64 KiB reallocated 2,000 times: one lease (the
 * first), no alloc or free reaches the daemon, the ids are local. */
static void test_no_messages(void **state)
{
	struct th_daemon d;
	struct gpb_allocation live[64];
	(void)state;
	th_daemon_start(&d, big_slabs);
	gpb_client *c = th_client(&d, "quiet");
	gpb_client *watch = th_client(&d, "watch");
	uint64_t inst = reg(c, 0);
	uint64_t seed = th_rnd_seed(0);
	for (int i = 0; i < 64; i++) {
		assert_int_equal(gpb_alloc(c, inst, 256, 0, &live[i]), 0);
		assert_true(is_local(live[i].id));
		pattern(&live[i], (unsigned char)i, false);
	}
	th_settle(c);
	double before = memory_requests(watch);
	for (int n = 0; n < 2000; n++) {
		unsigned i = th_rnd_below(64);
		pattern(&live[i], (unsigned char)i, true);
		assert_int_equal(gpb_free(c, live[i].id), 0);
		assert_int_equal(gpb_alloc(c, inst, 256u << th_rnd_below(9), 0, &live[i]), 0);
		pattern(&live[i], (unsigned char)i, false);
	}
	th_settle(c);
	double during = memory_requests(watch) - before;
	/* The pattern may need a lease or two more (64 x 64 KiB > 2 MiB). */
	assert_true(during <= 4);
	printf("seed %llu: %.0f daemon messages for 2000 alloc+free\n", (unsigned long long)seed,
	       during);
	for (int i = 0; i < 64; i++)
		assert_int_equal(gpb_free(c, live[i].id), 0);
	assert_int_equal(gpb_free(c, live[0].id), GPB_E_NOT_FOUND);
	th_selfcheck(watch, NULL);
	gpb_disconnect(c);
	gpb_disconnect(watch);
	assert_int_equal(th_daemon_stop(&d), 0);
}

/* Growth: 200 blocks of 64 KiB (12.5 MiB) in doubling leases, none
 * overlapping another, each charged: used >= what is live. */
static void test_grow(void **state)
{
	struct th_daemon d;
	static struct gpb_allocation a[200];
	(void)state;
	th_daemon_start(&d, big_slabs);
	gpb_client *c = th_client(&d, "grow");
	uint64_t inst = reg(c, 0);
	double before = requests(c, "lease");
	for (int i = 0; i < 200; i++) {
		assert_int_equal(gpb_alloc(c, inst, 64 << 10, 0, &a[i]), 0);
		pattern(&a[i], (unsigned char)i, false);
	}
	for (int i = 0; i < 200; i++)
		pattern(&a[i], (unsigned char)i, true);
	/* 2 + 4 + 8 MiB hold 12.5 MiB: three leases (doubling). */
	assert_true(requests(c, "lease") - before <= 4);
	assert_true(th_status_used(c) >= 200 * (64 << 10));
	th_selfcheck(c, NULL);
	for (int i = 0; i < 200; i++)
		assert_int_equal(gpb_free(c, a[i].id), 0);
	/* A block above the slab size is an allocation of its own. */
	struct gpb_allocation big;
	assert_int_equal(gpb_alloc(c, inst, 65 * MIB, 0, &big), 0);
	assert_false(is_local(big.id));
	assert_int_equal(gpb_free(c, big.id), 0);
	gpb_disconnect(c);
	assert_int_equal(th_daemon_stop(&d), 0);
}

struct idle_check {
	gpb_client *watch;
};

static bool nothing_used(void *arg)
{
	struct idle_check *ic = arg;
	return th_status_used(ic->watch) == 0;
}

/* A lease wholly free goes back after GPUBROKER_LEASE_IDLE_MS while the
 * process makes no call on its client. */
static void test_idle_return(void **state)
{
	struct th_daemon d;
	struct gpb_allocation a;
	(void)state;
	setenv("GPUBROKER_LEASE_IDLE_MS", "200", 1);
	th_daemon_start(&d, big_slabs);
	gpb_client *c = th_client(&d, "idle");
	unsetenv("GPUBROKER_LEASE_IDLE_MS");
	gpb_client *watch = th_client(&d, "watch");
	uint64_t inst = reg(c, 0);
	assert_int_equal(gpb_alloc(c, inst, 4096, 0, &a), 0);
	assert_int_equal(gpb_free(c, a.id), 0);
	th_settle(c);
	assert_true(th_status_used(watch) >= 2 * MIB);
	long long t0 = th_now_ms();
	struct idle_check ic = {watch};
	/* No call on c from here on. */
	assert_true(th_wait_for(nothing_used, &ic, 5000));
	printf("returned after %lld ms idle (setting 200)\n", th_now_ms() - t0);
	/* And leased again on demand. */
	assert_int_equal(gpb_alloc(c, inst, 4096, 0, &a), 0);
	assert_true(is_local(a.id));
	assert_int_equal(gpb_free(c, a.id), 0);
	gpb_disconnect(c);
	gpb_disconnect(watch);
	assert_int_equal(th_daemon_stop(&d), 0);
}

/* Fragmentation inside leases is no refusal: under an 8 MiB cap, leases of
 * 2 and 4 MiB wholly free cannot hold 6 MiB, nor can a third lease fit the
 * cap; the free ones go back and the block is leased. */
static void test_fragmentation(void **state)
{
	struct th_daemon d;
	struct gpb_allocation a[48], big;
	(void)state;
	th_daemon_start(&d, big_slabs);
	gpb_client *c = th_client(&d, "frag");
	assert_int_equal(gpb_set_mode(c, GPB_MODE_ACTIVE), 0);
	uint64_t inst = reg(c, 8.0 / 1024);
	for (int i = 0; i < 48; i++)
		assert_int_equal(gpb_alloc(c, inst, 64 << 10, 0, &a[i]), 0);
	for (int i = 0; i < 48; i++)
		assert_int_equal(gpb_free(c, a[i].id), 0);
	assert_int_equal(gpb_alloc(c, inst, 6 * MIB, 0, &big), 0);
	pattern(&big, 7, false);
	pattern(&big, 7, true);
	assert_int_equal(gpb_free(c, big.id), 0);
	/* Past the cap: refused as the per-allocation path refuses it. */
	assert_int_equal(gpb_alloc(c, inst, 9 * MIB, 0, &big), GPB_E_QUOTA);
	th_selfcheck(c, NULL);
	gpb_disconnect(c);
	assert_int_equal(th_daemon_stop(&d), 0);
}

/* kill -9 of a process holding leases: the daemon reclaims them. */
static void test_kill(void **state)
{
	struct th_daemon d;
	int rd, wr;
	char b;
	(void)state;
	th_daemon_start(&d, big_slabs);
	gpb_client *watch = th_client(&d, "watch");
	pid_t pid = th_fork_linked(&rd, &wr);
	if (pid == 0) {
		gpb_client *c = th_client(&d, "doomed");
		uint64_t inst = reg(c, 0);
		struct gpb_allocation a;
		for (int i = 0; i < 100; i++)
			if (gpb_alloc(c, inst, 64 << 10, 0, &a) != 0)
				th_child_exit(1);
		th_settle(c);
		if (write(wr, "x", 1) != 1)
			th_child_exit(2);
		pause();
		th_child_exit(3);
	}
	assert_int_equal(read(rd, &b, 1), 1);
	assert_true(th_status_used(watch) >= 100 * (64 << 10));
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	assert_true(th_wait_for(th_only_one_client, watch, 5000));
	assert_int_equal(th_status_used(watch), 0);
	th_selfcheck(watch, NULL);
	close(rd);
	close(wr);
	gpb_disconnect(watch);
	assert_int_equal(th_daemon_stop(&d), 0);
}

/* fork: the child cannot use its parent's client nor its leases; its own
 * client leases anew; the parent's blocks are untouched. */
static void test_fork(void **state)
{
	struct th_daemon d;
	struct gpb_allocation a[8];
	int rd, wr;
	(void)state;
	th_daemon_start(&d, big_slabs);
	gpb_client *c = th_client(&d, "parent");
	uint64_t inst = reg(c, 0);
	for (int i = 0; i < 8; i++) {
		assert_int_equal(gpb_alloc(c, inst, 4096, 0, &a[i]), 0);
		pattern(&a[i], (unsigned char)i, false);
	}
	pid_t pid = th_fork_linked(&rd, &wr);
	if (pid == 0) {
		struct gpb_allocation x;
		if (gpb_alloc(c, inst, 4096, 0, &x) != GPB_E_INVALID)
			th_child_exit(1);
		if (gpb_free(c, a[0].id) != GPB_E_INVALID)
			th_child_exit(2);
		gpb_disconnect(c); /* the parent's: forgotten here */
		gpb_client *own = th_client(&d, "child");
		uint64_t ci = reg(own, 0);
		for (int i = 0; i < 100; i++) {
			if (gpb_alloc(own, ci, 4096, 0, &x) != 0 || !is_local(x.id))
				th_child_exit(3);
			memset(x.ptr, 0xee, 4096);
			if (gpb_free(own, x.id) != 0)
				th_child_exit(4);
		}
		gpb_disconnect(own);
		th_child_exit(0);
	}
	th_child_reap_ok(pid);
	close(rd);
	close(wr);
	for (int i = 0; i < 8; i++) {
		pattern(&a[i], (unsigned char)i, true);
		assert_int_equal(gpb_free(c, a[i].id), 0);
	}
	th_selfcheck(c, NULL);
	gpb_disconnect(c);
	assert_int_equal(th_daemon_stop(&d), 0);
}

struct worker {
	gpb_client *c;
	uint64_t inst;
	unsigned tag;
	int failed;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct gpb_allocation live[16] = {0};
	unsigned x = w->tag * 2654435761u;
	for (int n = 0; n < 3000 && !w->failed; n++) {
		unsigned i = (x = x * 1103515245u + 12345u) >> 16 & 15;
		if (live[i].ptr) {
			unsigned char *p = live[i].ptr;
			if (p[0] != (unsigned char)(w->tag + i) ||
			    p[live[i].size - 1] != (unsigned char)w->tag)
				w->failed = 1;
			if (gpb_free(w->c, live[i].id) != 0)
				w->failed = 2;
			live[i].ptr = NULL;
		} else {
			uint64_t size = 256u << (x >> 8 & 7);
			if (gpb_alloc(w->c, w->inst, size, 0, &live[i]) != 0) {
				w->failed = 3;
				break;
			}
			unsigned char *p = live[i].ptr;
			p[0] = (unsigned char)(w->tag + i);
			p[live[i].size - 1] = (unsigned char)w->tag;
		}
	}
	for (int i = 0; i < 16; i++)
		if (live[i].ptr && gpb_free(w->c, live[i].id) != 0)
			w->failed = 4;
	return NULL;
}

/* Four threads allocating and freeing on one client, in leases. */
static void test_threads(void **state)
{
	struct th_daemon d;
	struct worker w[4];
	pthread_t t[4];
	(void)state;
	setenv("GPUBROKER_LEASE_IDLE_MS", "1", 1); /* the service thread busy too */
	th_daemon_start(&d, big_slabs);
	gpb_client *c = th_client(&d, "threads");
	unsetenv("GPUBROKER_LEASE_IDLE_MS");
	uint64_t inst = reg(c, 0);
	for (unsigned i = 0; i < 4; i++) {
		w[i] = (struct worker){.c = c, .inst = inst, .tag = i * 40 + 1};
		assert_int_equal(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(w[i].failed, 0);
	}
	th_selfcheck(c, NULL);
	gpb_disconnect(c);
	assert_int_equal(th_daemon_stop(&d), 0);
}

/* A local block exported is carved first: another process opens it by
 * name and sees its bytes; attached through its own client it yields the
 * carve's daemon id, which another process attaches; the local id itself
 * is no daemon id. */
static void test_carve(void **state)
{
	struct th_daemon d;
	struct gpb_allocation a, att;
	int rd, wr;
	(void)state;
	th_daemon_start(&d, big_slabs);
	gpb_client *c = th_client(&d, "owner");
	uint64_t inst = reg(c, 0);
	assert_int_equal(gpb_alloc(c, inst, 8192, 0, &a), 0);
	assert_true(is_local(a.id));
	memset(a.ptr, 0x5c, 8192);
	assert_int_equal(gpb_export(c, a.id, "carved", -1), 0);
	assert_int_equal(gpb_attach(c, a.id, &att), 0);
	assert_false(is_local(att.id));
	uint64_t daemon_id = att.id, local_id = a.id;
	pid_t pid = th_fork_linked(&rd, &wr);
	if (pid == 0) {
		gpb_client *o = th_client(&d, "other");
		struct gpb_allocation s, t;
		if (gpb_attach(o, local_id, &t) != GPB_E_NOT_FOUND)
			th_child_exit(1);
		if (gpb_open_shared(o, "carved", &s) != 0 || s.size < 8192 ||
		    ((unsigned char *)s.ptr)[8191] != 0x5c)
			th_child_exit(2);
		/* By id, through a client that has not opened it by name. */
		gpb_client *o2 = th_client(&d, "other2");
		if (gpb_attach(o2, daemon_id, &t) != 0 || ((unsigned char *)t.ptr)[0] != 0x5c)
			th_child_exit(3);
		gpb_disconnect(o2);
		gpb_disconnect(o);
		th_child_exit(0);
	}
	th_child_reap_ok(pid);
	close(rd);
	close(wr);
	assert_int_equal(gpb_detach(c, att.id), 0);
	assert_int_equal(gpb_free(c, a.id), 0);
	th_selfcheck(c, NULL);
	gpb_disconnect(c);
	assert_int_equal(th_daemon_stop(&d), 0);
}

/* GPUBROKER_LEASE=0: one request per allocation, daemon ids. */
static void test_lease_off(void **state)
{
	struct th_daemon d;
	struct gpb_allocation a;
	(void)state;
	setenv("GPUBROKER_LEASE", "0", 1);
	th_daemon_start(&d, big_slabs);
	gpb_client *c = th_client(&d, "off");
	unsetenv("GPUBROKER_LEASE");
	uint64_t inst = reg(c, 0);
	double before = requests(c, "alloc");
	for (int i = 0; i < 10; i++) {
		assert_int_equal(gpb_alloc(c, inst, 4096, 0, &a), 0);
		assert_false(is_local(a.id));
		assert_int_equal(gpb_free(c, a.id), 0);
	}
	assert_true(requests(c, "alloc") - before == 10);
	assert_true(requests(c, "lease") == 0);
	gpb_disconnect(c);
	assert_int_equal(th_daemon_stop(&d), 0);
}

/* Under the direct allocator `lease` is not supported: per allocation. */
static void test_direct_fallback(void **state)
{
	struct th_daemon d;
	struct gpb_allocation a;
	(void)state;
	th_daemon_start(&d, big_slabs);
	gpb_client *c = th_client(&d, "direct");
	assert_int_equal(gpb_set_allocator(c, "direct"), 0);
	uint64_t inst = reg(c, 0);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(gpb_alloc(c, inst, 4096, 0, &a), 0);
		assert_false(is_local(a.id));
		assert_int_equal(gpb_free(c, a.id), 0);
	}
	assert_true(requests(c, "lease") <= 1);
	gpb_disconnect(c);
	assert_int_equal(th_daemon_stop(&d), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_no_messages), cmocka_unit_test(test_grow),
	    cmocka_unit_test(test_idle_return), cmocka_unit_test(test_fragmentation),
	    cmocka_unit_test(test_kill),        cmocka_unit_test(test_fork),
	    cmocka_unit_test(test_threads),     cmocka_unit_test(test_carve),
	    cmocka_unit_test(test_lease_off),   cmocka_unit_test(test_direct_fallback),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
