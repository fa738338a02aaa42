/*
 * test-broker-host.c - unit tests of host memory (broker_host.c and the
 * alloc types "pinned" and "mapped"): the memfd handed out, the limits, and
 * its release on every path, checked with broker_check().
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "broker.h"
#include "broker_internal.h"
#include "proto.h"

#include "session-helpers.h"

/* Allocation, the memfd and its seals, free, and who may free it. */
static void test_host_alloc_free(void **state)
{
	struct broker *b = broker_new(64 * MiB, 0, 0);
	struct session *s1 = open_session(b, UID_A, 101);
	struct session *s2 = open_session(b, UID_A, 102);
	struct broker_instance *i1 = reg(b, s1, 0);
	struct broker_host *h;
	(void)state;

	assert_int_equal(broker_host_alloc(b, s1, i1->id, 5000, false, &h, NULL), 0);
	long page = sysconf(_SC_PAGESIZE);
	assert_int_equal(h->size, (5000 + page - 1) / page * page);
	struct stat st;
	assert_int_equal(fstat(h->fd, &st), 0);
	assert_int_equal((uint64_t)st.st_size, h->size);
	/* Sealed: a client cannot shrink it under the daemon's accounting. */
	int seals = fcntl(h->fd, F_GET_SEALS);
	assert_true(seals & F_SEAL_SHRINK);
	assert_true(seals & F_SEAL_GROW);
	assert_int_equal(ftruncate(h->fd, 0), -1);
	/* Zero-filled: nothing of anyone else in it. */
	unsigned char *p = mmap(NULL, h->size, PROT_READ, MAP_SHARED, h->fd, 0);
	assert_true(p != MAP_FAILED);
	for (uint64_t i = 0; i < h->size; i++)
		assert_int_equal(p[i], 0);
	munmap(p, h->size);
	assert_int_equal(b->host_used, h->size);
	assert_int_equal(s1->host_count, 1);
	/* Not device memory: no pool, no policy charge. */
	assert_int_equal(dev_stats(b, 0).used, 0);
	assert_int_equal(i1->used, 0);
	check(b);

	uint64_t id = h->id;
	struct broker_grant g;
	grant_poison(&g);
	assert_int_equal(broker_attach(b, s2, id, &g), -ENOENT);
	assert_int_equal(broker_free(b, s2, id), -ENOENT);
	assert_int_equal(broker_free(b, s1, id), 0);
	assert_int_equal(broker_free(b, s1, id), -ENOENT);
	assert_int_equal(b->host_used, 0);
	assert_int_equal(b->hosts.count, 0);
	check(b);
	broker_done(b);
}

/* The errors: instance, size, max_host_memory, max_allocations. */
static void test_host_limits(void **state)
{
	struct broker *b = broker_new(64 * MiB, 0, 3);
	struct session *s1 = open_session(b, UID_A, 101);
	struct session *s2 = open_session(b, UID_B, 201);
	struct broker_instance *i1 = reg(b, s1, 0);
	struct broker_instance *i2 = reg(b, s2, 0);
	struct broker_host *h;
	struct broker_refusal why;
	(void)state;

	b->limits.max_host_memory = 1 * MiB;
	assert_int_equal(broker_host_alloc(b, s1, i2->id, 4096, false, &h, NULL), -ENOENT);
	assert_int_equal(broker_host_alloc(b, s1, i1->id, 0, false, &h, NULL), -EINVAL);
	assert_int_equal(broker_host_alloc(b, s1, i1->id, UINT64_MAX, false, &h, NULL), -EINVAL);
	assert_int_equal(broker_host_alloc(b, s1, i1->id, MiB + 1, false, &h, NULL), -ENOMEM);
	assert_int_equal(broker_host_alloc(b, s1, i1->id, 768 * KiB, true, &h, NULL), 0);
	assert_true(h->mapped);
	/* Every client together: what s1 holds counts for s2. */
	assert_int_equal(broker_host_alloc(b, s2, i2->id, 512 * KiB, false, &h, &why), -ENOMEM);
	/* The refusal names the limit and what it leaves. */
	assert_int_equal(why.rc, -ENOMEM);
	assert_int_equal(why.limit, BROKER_LIMIT_HOST);
	assert_int_equal(why.requested, 512 * KiB);
	assert_int_equal(why.free, 256 * KiB);
	assert_int_equal(broker_host_alloc(b, s2, i2->id, 256 * KiB, false, &h, NULL), 0);
	assert_int_equal(b->host_used, MiB);
	/* max_allocations (3) counts host allocations with the others. */
	b->limits.max_host_memory = 64 * MiB;
	alloc_ok(b, s1, i1, 4096, 0);
	assert_int_equal(broker_host_alloc(b, s1, i1->id, 4096, false, &h, NULL), 0);
	assert_int_equal(broker_host_alloc(b, s1, i1->id, 4096, false, &h, &why), -EMFILE);
	assert_int_equal(why.limit, BROKER_LIMIT_ALLOCATIONS);
	assert_int_equal(why.value, 3);
	check(b);
	broker_done(b);
}

/* A session's end and invalidate_all release host memory too. */
static void test_host_release(void **state)
{
	struct broker *b = broker_new(64 * MiB, 0, 0);
	struct session *s1 = open_session(b, UID_A, 101);
	struct session *s2 = open_session(b, UID_A, 102);
	struct broker_instance *i1 = reg(b, s1, 0);
	struct broker_instance *i2 = reg(b, s2, 0);
	struct broker_host *h;
	(void)state;

	for (int i = 0; i < 3; i++)
		assert_int_equal(broker_host_alloc(b, s1, i1->id, 4096, i & 1, &h, NULL), 0);
	assert_int_equal(broker_host_alloc(b, s2, i2->id, 4096, false, &h, NULL), 0);
	broker_session_close(b, s1);
	check(b);
	assert_int_equal(b->hosts.count, 1);
	assert_int_equal(b->host_used, 4096);

	uint64_t allocs, attachments;
	broker_invalidate_all(b, &allocs, &attachments);
	check(b);
	assert_int_equal(allocs, 1);
	assert_int_equal(b->hosts.count, 0);
	assert_int_equal(b->host_used, 0);
	assert_int_equal(s2->host_count, 0);
	broker_done(b);
}

/* The requests: the result, the descriptor, the errors; managed refused. */
static void test_host_requests(void **state)
{
	struct broker *b = broker_new(64 * MiB, 0, 0);
	struct session *s = open_session(b, UID_A, 101);
	struct reply r = {.fd = -1};
	(void)state;

	hello(b, s, "host");
	struct broker_instance *inst = reg(b, s, 0);
	request(b, s, &r,
	        "{\"id\":\"h\",\"method\":\"alloc\",\"params\":{\"instance\":\"%016" PRIx64
	        "\",\"size\":\"100\",\"type\":\"mapped\"}}",
	        inst->id);
	const cJSON *res = result_of(&r, "h");
	check_members(res, PROTO_MEMBER_TABLE(PROTO_HOST_RESULT));
	assert_string_equal(jstr(res, "type"), "mapped");
	assert_int_equal(ju64(res, "size"), (uint64_t)sysconf(_SC_PAGESIZE));
	assert_true(cJSON_IsTrue(jget(res, "fd")));
	assert_true(r.fd >= 0);
	uint64_t id = jid(res, "id");
	reply_done(&r);

	request(b, s, &r, "{\"id\":\"s\",\"method\":\"status\"}");
	assert_int_equal(jnum(result_of(&r, "s"), "host_allocations"), 1);
	assert_int_equal(ju64(result_of(&r, "s"), "host_used"), (uint64_t)sysconf(_SC_PAGESIZE));
	reply_done(&r);

	expect_error_fmt(b, s, PROTO_E_NOT_SUPPORTED, NULL,
	                 "{\"id\":\"e\",\"method\":\"alloc\",\"params\":{\"instance\":\"%016" PRIx64
	                 "\",\"size\":\"100\",\"type\":\"managed\"}}",
	                 inst->id);
	expect_error_fmt(b, s, PROTO_E_PARAMS, "size",
	                 "{\"id\":\"e\",\"method\":\"alloc\",\"params\":{\"instance\":\"%016" PRIx64
	                 "\",\"size\":\"18446744073709551615\",\"type\":\"pinned\"}}",
	                 inst->id);
	expect_error_fmt(b, s, PROTO_E_NOT_FOUND, NULL,
	                 "{\"id\":\"e\",\"method\":\"alloc\",\"params\":{\"instance\":\"%016" PRIx64
	                 "\",\"size\":\"1\",\"type\":\"pinned\"}}",
	                 inst->id + 1);
	b->limits.max_host_memory = 4096;
	expect_error_fmt(b, s, PROTO_E_NO_MEMORY, NULL,
	                 "{\"id\":\"e\",\"method\":\"alloc\",\"params\":{\"instance\":\"%016" PRIx64
	                 "\",\"size\":\"100\",\"type\":\"pinned\"}}",
	                 inst->id);
	request(b, s, &r,
	        "{\"id\":\"f\",\"method\":\"free\",\"params\":{\"id\":\"%016" PRIx64 "\"}}", id);
	result_of(&r, "f");
	reply_done(&r);
	assert_int_equal(b->host_used, 0);
	check(b);
	broker_done(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_teardown(test_host_alloc_free, teardown),
	    cmocka_unit_test_teardown(test_host_limits, teardown),
	    cmocka_unit_test_teardown(test_host_release, teardown),
	    cmocka_unit_test_teardown(test_host_requests, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
