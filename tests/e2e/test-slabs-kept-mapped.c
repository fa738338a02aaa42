/*
 * test-slabs-kept-mapped.c - the hot path (issue 18): slabs kept mapped past their last
 * allocation, the daemon taking them back under memory pressure, and frees
 * that do not wait for their reply.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpubroker.h"
#include "harness.h"

#define MIB (1ull << 20)

static uint64_t reg(gpb_client *c)
{
	struct gpb_register_opts o = {.name = "keep"};
	uint64_t inst;
	assert_int_equal(gpb_register(c, &o, &inst), 0);
	return inst;
}

static uint64_t opens_now(void)
{
	struct gpb_mapping_stats ms;
	assert_int_equal(gpb_mapping_stats(&ms), 0);
	return ms.opens;
}

/* Thousands of alloc+free with nothing else in the slab: one open, and the
 * kept slab is reserved, not used. */
static void test_keep_reuse(void **state)
{
	struct th_daemon d;
	struct gpb_allocation a;
	(void)state;
	th_daemon_start(&d, NULL);
	gpb_client *c = th_client(&d, "reuse");
	uint64_t inst = reg(c);
	uint64_t before = opens_now();
	for (int i = 0; i < 5000; i++) {
		assert_int_equal(gpb_alloc(c, inst, 4096, 0, &a), 0);
		((volatile char *)a.ptr)[0] = (char)i;
		assert_int_equal(gpb_free(c, a.id), 0);
	}
	assert_int_equal(opens_now() - before, 1);
	struct gpb_mapping_stats ms;
	assert_int_equal(gpb_mapping_stats(&ms), 0);
	assert_int_equal(ms.open_now, 1);
	/* Accounting: nothing used, the kept slab reserved. */
	assert_int_equal(th_status_used(c), 0);
	assert_true(th_status_field(c, "reserved") >= 2 * MIB);
	assert_true(th_metric(c, "gpubroker_kept_slabs") == 1);
	assert_true(th_metric(c, "gpubroker_kept_bytes") == 2 * MIB);
	th_selfcheck(c, NULL);
	/* Let go: closed here, then the daemon's. */
	assert_int_equal(gpb_release_kept(c), 1);
	assert_int_equal(gpb_mapping_stats(&ms), 0);
	assert_int_equal(ms.open_now, 0);
	assert_true(th_metric(c, "gpubroker_kept_slabs") == 0);
	gpb_disconnect(c);
	assert_int_equal(th_daemon_stop(&d), 0);
}

struct waiter {
	gpb_client *c;
	uint64_t inst, size;
	uint32_t wait_ms;
	int rc;
	volatile int done;
	struct gpb_allocation a;
};

static void *waiter_run(void *arg)
{
	struct waiter *w = arg;
	w->rc = gpb_alloc_wait(w->c, w->inst, w->size, 0, w->wait_ms, &w->a);
	w->done = 1;
	return NULL;
}

/*
 * A keeps a slab empty; B needs the whole device. The daemon asks A for the
 * slab (reclaim); until A's library answers (it is idle: slow), B waits and
 * the slab stays A's, reserved; B's wait that runs out is a timeout, not
 * another user's memory. Once A makes a call it unmaps and answers, and
 * B's next wait is served.
 */
static void test_reclaim_pressure(void **state)
{
	struct th_daemon d;
	struct gpb_allocation a;
	(void)state;
	static const char *const extra[] = {"--sim-devices", "1", NULL};
	th_daemon_start(&d, extra);
	gpb_client *ca = th_client(&d, "holder");
	gpb_client *cb = th_client(&d, "needy");
	uint64_t ia = reg(ca), ib = reg(cb);
	assert_int_equal(gpb_alloc(ca, ia, 4096, 0, &a), 0);
	assert_int_equal(gpb_free(ca, a.id), 0);
	struct gpb_mem_info mi;
	assert_int_equal(gpb_mem_info(ca, ia, &mi), 0);
	uint64_t reserved = th_status_field(cb, "reserved");
	assert_true(reserved >= 2 * MIB);
	struct gpb_mapping_stats ms0, ms1;
	assert_int_equal(gpb_mapping_stats(&ms0), 0);

	/* The whole device: refused at once without waiting (A has not
	 * answered), then a short wait runs out while A is slow. */
	struct gpb_allocation big;
	assert_int_equal(gpb_alloc(cb, ib, 1024 * MIB, 0, &big), GPB_E_OUT_OF_MEMORY);
	assert_int_equal(gpb_alloc_wait(cb, ib, 1024 * MIB, 0, 300, &big), GPB_E_TIMEOUT);
	/* Still A's: reserved, and still mapped here. */
	assert_int_equal(th_status_field(cb, "reserved"), reserved);
	assert_int_equal(gpb_mapping_stats(&ms1), 0);
	assert_int_equal(ms1.open_now, ms0.open_now);

	/* B waits; A answers on its next call. */
	struct waiter w = {.c = cb, .inst = ib, .size = 1024 * MIB, .wait_ms = 10000};
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, waiter_run, &w), 0);
	usleep(200 * 1000);
	assert_false(w.done);
	assert_int_equal(gpb_mem_info(ca, ia, &mi), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(w.rc, 0);
	assert_int_equal(gpb_mapping_stats(&ms1), 0);
	assert_int_equal(ms1.closes - ms0.closes, 1);
	assert_true(th_metric(cb, "gpubroker_reclaims_total") >= 1);
	assert_int_equal(th_status_used(cb), 1024 * MIB);
	assert_int_equal(gpb_free(cb, w.a.id), 0);
	/* B's free did not wait for its reply: done before A asks for the
	 * room it makes. */
	th_settle(cb);
	/* A allocates again: the slab is handed over afresh. */
	assert_int_equal(gpb_alloc(ca, ia, 4096, 0, &a), 0);
	memset(a.ptr, 1, 4096);
	assert_int_equal(gpb_free(ca, a.id), 0);
	th_selfcheck(cb, NULL);
	gpb_disconnect(ca);
	gpb_disconnect(cb);
	assert_int_equal(th_daemon_stop(&d), 0);
}

/* A client's own kept slab stands in the way of its next, large
 * allocation: the library answers the reclaim as it reads it, and the
 * allocation is served (retried once without waiting; served while it
 * waits). */
static void test_reclaim_self(void **state)
{
	struct th_daemon d;
	struct gpb_allocation a, big;
	(void)state;
	static const char *const extra[] = {"--sim-devices", "1", NULL};
	th_daemon_start(&d, extra);
	gpb_client *c = th_client(&d, "self");
	uint64_t inst = reg(c);
	for (int wait = 0; wait < 2; wait++) {
		assert_int_equal(gpb_alloc(c, inst, 4096, 0, &a), 0);
		assert_int_equal(gpb_free(c, a.id), 0);
		assert_int_equal(gpb_alloc_wait(c, inst, 1024 * MIB, 0, wait ? 5000 : 0, &big), 0);
		assert_int_equal(gpb_free(c, big.id), 0);
	}
	assert_true(th_metric(c, "gpubroker_reclaims_total") == 2);
	gpb_disconnect(c);
	assert_int_equal(th_daemon_stop(&d), 0);
}

/* A free is processed before anything sent after it: an alloc right behind
 * the free of the whole device gets the room, every time. */
static void test_free_order(void **state)
{
	struct th_daemon d;
	struct gpb_allocation a;
	(void)state;
	static const char *const extra[] = {"--sim-devices", "1", NULL};
	th_daemon_start(&d, extra);
	gpb_client *c = th_client(&d, "order");
	uint64_t inst = reg(c);
	for (int i = 0; i < 200; i++) {
		assert_int_equal(gpb_alloc(c, inst, 1000 * MIB, 0, &a), 0);
		assert_int_equal(gpb_free(c, a.id), 0);
	}
	/* A double free is the library's to refuse, at once. */
	assert_int_equal(gpb_free(c, a.id), GPB_E_NOT_FOUND);
	assert_int_equal(gpb_free(c, 0x1234), GPB_E_NOT_FOUND);
	assert_int_equal(th_status_used(c), 0);
	gpb_disconnect(c);
	assert_int_equal(th_daemon_stop(&d), 0);
}

/*
 * A free the daemon refuses (invalidate_all took the allocation before the
 * library read the event): gpb_free returned 0, and the refusal is the
 * error of a later call, once; the daemon counts it.
 */
static void test_free_error_next_call(void **state)
{
	struct th_daemon d;
	struct gpb_allocation a;
	struct gpb_mem_info mi;
	(void)state;
	th_daemon_start(&d, NULL);
	gpb_client *c = th_client(&d, "victim");
	gpb_client *admin = th_client(&d, "admin");
	uint64_t inst = reg(c);
	assert_int_equal(gpb_alloc(c, inst, 4096, 0, &a), 0);
	double before =
	    th_metric(admin, "gpubroker_requests_total{method=\"free\",result=\"not_found\"}");
	assert_int_equal(gpb_invalidate_all(admin), 0);
	assert_int_equal(gpb_free(c, a.id), 0);
	/* This call reads the refusal (and the event) with its reply. */
	assert_int_equal(gpb_mem_info(c, inst, &mi), 0);
	assert_int_equal(gpb_mem_info(c, inst, &mi), GPB_E_NOT_FOUND);
	assert_non_null(strstr(gpb_last_error(), "free"));
	assert_int_equal(gpb_mem_info(c, inst, &mi), 0);
	double after =
	    th_metric(admin, "gpubroker_requests_total{method=\"free\",result=\"not_found\"}");
	assert_true(after == (before < 0 ? 0 : before) + 1);
	gpb_disconnect(c);
	gpb_disconnect(admin);
	assert_int_equal(th_daemon_stop(&d), 0);
}

/* invalidate_all frees everything at once, yet each range stays fenced
 * until its owner's client has answered the event: until it reads the
 * event it may still write there (or have kernels queued on it), so no
 * other allocation may be put there before. */
static void test_invalidate_fence(void **state)
{
	struct th_daemon d;
	struct gpb_allocation x, y;
	struct gpb_mem_info mi;
	(void)state;
	th_daemon_start(&d, NULL);
	gpb_client *a = th_client(&d, "owner");
	gpb_client *b = th_client(&d, "other");
	gpb_client *admin = th_client(&d, "admin");
	uint64_t ia = reg(a), ib = reg(b);
	assert_int_equal(gpb_alloc(a, ia, 64 << 10, 0, &x), 0);
	memset(x.ptr, 7, x.size);
	assert_int_equal(gpb_invalidate_all(admin), 0);
	/* The owner has read nothing yet: its range is fenced, not free. */
	assert_int_equal(th_status_used(admin), 64 << 10);
	assert_int_equal(gpb_alloc(b, ib, 64 << 10, 0, &y), 0);
	assert_false(y.slab == x.slab && y.offset < x.offset + x.size &&
	             x.offset < y.offset + y.size);
	memset(y.ptr, 9, y.size);
	for (uint64_t i = 0; i < x.size; i++)
		assert_int_equal(((const unsigned char *)x.ptr)[i], 7);
	assert_int_equal(th_status_used(admin), 128 << 10);
	/* Its next call reads the event and answers it before its own
	 * request: the range goes back. */
	assert_int_equal(gpb_mem_info(a, ia, &mi), 0);
	assert_int_equal(mi.used, 0);
	assert_int_equal(th_status_used(admin), 64 << 10);
	assert_int_equal(gpb_free(b, y.id), 0);
	th_settle(b);
	assert_int_equal(th_status_used(admin), 0);
	gpb_disconnect(admin);
	gpb_disconnect(b);
	gpb_disconnect(a);
	assert_int_equal(th_daemon_stop(&d), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_keep_reuse),           cmocka_unit_test(test_reclaim_pressure),
	    cmocka_unit_test(test_reclaim_self),         cmocka_unit_test(test_free_order),
	    cmocka_unit_test(test_free_error_next_call), cmocka_unit_test(test_invalidate_fence),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
