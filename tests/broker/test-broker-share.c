/*
 * test-broker-share.c - unit tests of sharing by name (broker_share.c and
 * the export/unexport/open requests): who may open what, the errors, and the
 * life of what was opened after its exporter freed it or went away
 * (orphans), checked against the pool, the policy and broker_check().
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "broker.h"
#include "broker_internal.h"
#include "policy.h"
#include "pool.h"
#include "proto.h"

#include "session-helpers.h"

/* Writes a byte pattern through the sim descriptor of a grant. */
static void grant_fill(const struct broker_grant *g, unsigned char byte)
{
	assert_true(g->fd >= 0);
	unsigned char *p = mmap(NULL, g->slab_size, PROT_READ | PROT_WRITE, MAP_SHARED, g->fd, 0);
	assert_true(p != MAP_FAILED);
	memset(p + g->offset, byte, g->size);
	munmap(p, g->slab_size);
}

/* True when every byte of the grant's range is byte. */
static bool grant_holds(const struct broker_grant *g, int fd, unsigned char byte)
{
	unsigned char *p = mmap(NULL, g->slab_size, PROT_READ, MAP_SHARED, fd, 0);
	assert_true(p != MAP_FAILED);
	bool ok = true;
	for (uint64_t i = 0; i < g->size && ok; i++)
		ok = p[g->offset + i] == byte;
	munmap(p, g->slab_size);
	return ok;
}

/* Same uid: export, open from another session, the bytes are the same. */
static void test_export_open_same_uid(void **state)
{
	struct broker *b = broker_new(64 * MiB, 0, 0);
	struct session *s1 = open_session(b, UID_A, 101);
	struct session *s2 = open_session(b, UID_A, 102);
	struct broker_instance *i1 = reg(b, s1, 0);
	(void)state;

	struct broker_grant a = alloc_ok(b, s1, i1, 64 * KiB, 0);
	grant_fill(&a, 0x5a);
	assert_int_equal(broker_export(b, s1, a.id, "weights", UID_A), 0);
	assert_int_equal(b->export_count, 1);
	check(b);

	struct broker_grant g;
	grant_poison(&g);
	assert_int_equal(broker_open(b, s2, UID_A, "weights", &g), 0);
	assert_int_equal(g.id, a.id);
	assert_int_equal(g.size, a.size);
	assert_int_equal(g.offset, a.offset);
	assert_int_equal(g.slab_id, a.slab_id);
	assert_non_null(g.handle); /* s2 did not hold the slab yet */
	assert_true(grant_holds(&g, g.fd, 0x5a));
	assert_int_equal(s2->attached.count, 1);
	check(b);
	/* Twice through one session: as attach. */
	struct broker_grant g2;
	grant_poison(&g2);
	assert_int_equal(broker_open(b, s2, UID_A, "weights", &g2), -EEXIST);
	/* Unknown names and wrong uids look alike. */
	assert_int_equal(broker_open(b, s2, UID_A, "nope", &g2), -ENOENT);

	assert_int_equal(broker_detach(b, s2, a.id), 0);
	assert_int_equal(broker_free(b, s1, a.id), 0);
	/* Freed: the name went with it. */
	assert_int_equal(b->export_count, 0);
	assert_int_equal(broker_open(b, s2, UID_A, "weights", &g2), -ENOENT);
	check(b);
	broker_done(b);
}

/* The errors of broker_export and broker_unexport, each distinct. */
static void test_export_errors(void **state)
{
	struct broker *b = broker_new(64 * MiB, 0, 0);
	struct session *s1 = open_session(b, UID_A, 101);
	struct session *s2 = open_session(b, UID_A, 102);
	struct broker_instance *i1 = reg(b, s1, 0);
	struct broker_instance *i2 = reg(b, s2, 0);
	(void)state;

	struct broker_grant a = alloc_ok(b, s1, i1, 4 * KiB, 0);
	struct broker_grant c = alloc_ok(b, s1, i1, 4 * KiB, 0);
	struct broker_grant other = alloc_ok(b, s2, i2, 4 * KiB, 0);
	/* Not this session's allocation (same uid or not): not found. */
	assert_int_equal(broker_export(b, s1, other.id, "x", UID_A), -ENOENT);
	assert_int_equal(broker_export(b, s1, 0x1234, "x", UID_A), -ENOENT);
	/* A pooled allocation cannot go to another uid: the opener would
	 * map its slab whole. */
	assert_int_equal(broker_export(b, s1, a.id, "x", UID_B), -EPERM);
	assert_int_equal(b->export_count, 0);

	assert_int_equal(broker_export(b, s1, a.id, "x", UID_A), 0);
	/* One name per allocation. */
	assert_int_equal(broker_export(b, s1, a.id, "y", UID_A), -EALREADY);
	/* The name is taken in this user's namespace, by any of its
	 * connections, whoever it is granted to. */
	assert_int_equal(broker_export(b, s1, c.id, "x", UID_A), -EEXIST);
	assert_int_equal(broker_export(b, s2, other.id, "x", UID_A), -EEXIST);
	assert_int_equal(broker_export(b, s2, other.id, "x", UID_B), -EEXIST);
	check(b);

	/* Only the exporter withdraws its names. */
	assert_int_equal(broker_unexport(b, s2, "x"), -ENOENT);
	assert_int_equal(broker_unexport(b, s1, "nope"), -ENOENT);
	assert_int_equal(broker_unexport(b, s1, "x"), 0);
	assert_int_equal(broker_unexport(b, s1, "x"), -ENOENT);
	/* Withdrawn: the allocation may be exported again, the name reused. */
	assert_int_equal(broker_export(b, s1, a.id, "y", UID_A), 0);
	assert_int_equal(broker_export(b, s2, other.id, "x", UID_A), 0);
	assert_int_equal(b->export_count, 2);
	check(b);
	broker_done(b);
}

/* Names live in the namespace of the user who exported them: a bare name
 * (the caller's own uid as owner) finds only its own user's exports; another
 * user's is opened by naming its exporter, and only by the user it was
 * granted to. A dedicated allocation may go to another uid. */
static void test_export_other_uid(void **state)
{
	struct broker *b = broker_new(64 * MiB, 0, 0);
	struct session *sa = open_session(b, UID_A, 101);
	struct session *sb = open_session(b, UID_B, 201);
	struct session *sa2 = open_session(b, UID_A, 102);
	struct session *sc = open_session(b, UID_B + 1, 301);
	struct broker_instance *ia = reg(b, sa, 0);
	struct broker_instance *ib = reg(b, sb, 0);
	(void)state;

	/* Filling a slab of its own (4 MiB: above the 2 MiB slab size). */
	struct broker_grant big = alloc_ok(b, sa, ia, 4 * MiB, 0);
	grant_fill(&big, 0xc3);
	assert_int_equal(broker_export(b, sa, big.id, "result", UID_B), 0);
	/* B granting its own "result" to A plants nothing among A's names. */
	struct broker_grant mine = alloc_ok(b, sb, ib, 2 * MiB, 0);
	grant_fill(&mine, 0x3c);
	assert_int_equal(broker_export(b, sb, mine.id, "result", UID_A), 0);

	struct broker_grant g;
	grant_poison(&g);
	/* A's bare "result" is A's own, granted to B or not. */
	assert_int_equal(broker_open(b, sa2, UID_A, "result", &g), 0);
	assert_int_equal(g.id, big.id);
	/* B's, opened by A naming B. */
	grant_poison(&g);
	assert_int_equal(broker_open(b, sa2, UID_B, "result", &g), 0);
	assert_int_equal(g.id, mine.id);
	assert_true(grant_holds(&g, g.fd, 0x3c));
	/* And A's, opened by B naming A. */
	grant_poison(&g);
	assert_int_equal(broker_open(b, sb, UID_A, "result", &g), 0);
	assert_int_equal(g.id, big.id);
	assert_true(grant_holds(&g, g.fd, 0xc3));
	/* A third user, granted neither: exactly as a name that is not there. */
	assert_int_equal(broker_open(b, sc, UID_A, "result", &g), -ENOENT);
	assert_int_equal(broker_open(b, sc, UID_B, "result", &g), -ENOENT);
	assert_int_equal(broker_open(b, sc, UID_A, "nope", &g), -ENOENT);
	assert_int_equal(broker_open(b, sc, UID_B + 1, "result", &g), -ENOENT);
	/* The opener's slab is the allocation's alone. */
	assert_int_equal(big.size, big.slab_size);
	/* A dedicated slab with room left is not: the pool puts a small
	 * allocation of the same user into its tail. */
	struct broker_grant odd = alloc_ok(b, sa, ia, 3 * MiB, 0);
	struct broker_grant tail = alloc_ok(b, sa, ia, 4 * KiB, 0);
	assert_int_equal(tail.slab_id, odd.slab_id);
	assert_int_equal(broker_export(b, sa, odd.id, "odd", UID_B), -EPERM);
	assert_int_equal(broker_export(b, sa, tail.id, "tail", UID_B), -EPERM);
	check(b);
	broker_done(b);
}

/* Freed by its exporter while opened: the memory stays, charged to the
 * device and to no instance, until the last opener detaches. */
static void test_orphan_lifetime(void **state)
{
	struct broker *b = broker_new(16 * MiB, 0, 0);
	struct session *s1 = open_session(b, UID_A, 101);
	struct session *s2 = open_session(b, UID_A, 102);
	struct session *s3 = open_session(b, UID_A, 103);
	struct broker_instance *i1 = reg(b, s1, 0);
	(void)state;

	uint64_t free0 = broker_device_free(b, 0);
	struct broker_grant a = alloc_ok(b, s1, i1, 1 * MiB, 0);
	grant_fill(&a, 0x77);
	assert_int_equal(broker_export(b, s1, a.id, "frame", UID_A), 0);
	struct broker_grant g2, g3;
	grant_poison(&g2);
	grant_poison(&g3);
	assert_int_equal(broker_open(b, s2, UID_A, "frame", &g2), 0);
	assert_int_equal(broker_open(b, s3, UID_A, "frame", &g3), 0);
	assert_int_equal(broker_device_free(b, 0), free0 - MiB);

	assert_int_equal(broker_free(b, s1, a.id), 0);
	check(b);
	assert_int_equal(b->orphan_count, 1);
	assert_int_equal(b->allocs.count, 0);
	assert_int_equal(i1->used, 0);
	assert_int_equal(i1->pol.used, 0);
	assert_int_equal(b->policy.dev[0].orphaned, MiB);
	/* Still charged to the device: nobody else gets those bytes. */
	assert_int_equal(broker_device_free(b, 0), free0 - MiB);
	assert_int_equal(dev_stats(b, 0).used, MiB);
	/* What operators see. */
	hello(b, s2, "op");
	struct reply r = {.fd = -1};
	request(b, s2, &r, "{\"id\":\"st\",\"method\":\"status\"}");
	const cJSON *st = result_of(&r, "st");
	assert_int_equal(jnum(st, "orphans"), 1);
	assert_int_equal(jnum(st, "exports"), 0);
	const cJSON *dev0 = cJSON_GetArrayItem(jarr(st, "devices", 2), 0);
	assert_int_equal(ju64(dev0, "orphaned"), MiB);
	assert_int_equal(ju64(dev0, "used"), MiB);
	reply_done(&r);
	/* Withdrawn for new openers; the bytes are intact for the old. */
	struct broker_grant g;
	grant_poison(&g);
	assert_int_equal(broker_open(b, s1, UID_A, "frame", &g), -ENOENT);
	assert_int_equal(broker_attach(b, s1, a.id, &g), -ENOENT);
	assert_true(grant_holds(&g2, g2.fd, 0x77));
	/* A new allocation of the same size does not land on them. */
	struct broker_grant n = alloc_ok(b, s1, i1, 1 * MiB, 0);
	assert_false(n.slab_id == a.slab_id && n.offset == a.offset);
	assert_int_equal(broker_free(b, s1, n.id), 0);

	assert_int_equal(broker_detach(b, s2, a.id), 0);
	assert_int_equal(b->orphan_count, 1);
	check(b);
	/* The last holder goes (here by closing): the memory goes back. */
	broker_session_close(b, s3);
	check(b);
	assert_int_equal(b->orphan_count, 0);
	assert_int_equal(b->policy.dev[0].orphaned, 0);
	assert_int_equal(dev_stats(b, 0).used, 0);
	assert_int_equal(broker_device_free(b, 0), free0);
	broker_done(b);
}

/* The exporter's session ends: its names go, what was opened stays. */
static void test_exporter_death(void **state)
{
	struct broker *b = broker_new(16 * MiB, 0, 0);
	struct session *s1 = open_session(b, UID_A, 101);
	struct session *s2 = open_session(b, UID_A, 102);
	struct broker_instance *i1 = reg(b, s1, 0);
	(void)state;

	struct broker_grant a = alloc_ok(b, s1, i1, 8 * KiB, 0);
	struct broker_grant c = alloc_ok(b, s1, i1, 8 * KiB, 0);
	grant_fill(&a, 0x11);
	assert_int_equal(broker_export(b, s1, a.id, "a", UID_A), 0);
	assert_int_equal(broker_export(b, s1, c.id, "c", UID_A), 0);
	struct broker_grant g;
	grant_poison(&g);
	assert_int_equal(broker_open(b, s2, UID_A, "a", &g), 0);

	broker_session_close(b, s1);
	check(b);
	assert_int_equal(b->export_count, 0);
	assert_int_equal(b->orphan_count, 1);
	assert_true(grant_holds(&g, g.fd, 0x11));
	struct broker_grant g2;
	grant_poison(&g2);
	assert_int_equal(broker_open(b, s2, UID_A, "c", &g2), -ENOENT);
	assert_int_equal(broker_detach(b, s2, a.id), 0);
	check(b);
	assert_int_equal(b->orphan_count, 0);
	assert_int_equal(dev_stats(b, 0).used, 0);
	broker_done(b);
}

/* invalidate_all and set_allocator release orphans too. */
static void test_orphans_released_by_reset(void **state)
{
	struct broker *b = broker_new(16 * MiB, 0, 0);
	struct session *s1 = open_session(b, UID_A, 101);
	struct session *s2 = open_session(b, UID_A, 102);
	struct broker_instance *i1 = reg(b, s1, 0);
	(void)state;

	for (int round = 0; round < 2; round++) {
		struct broker_grant a = alloc_ok(b, s1, i1, 8 * KiB, 0);
		assert_int_equal(broker_export(b, s1, a.id, "a", UID_A), 0);
		struct broker_grant g;
		grant_poison(&g);
		assert_int_equal(broker_open(b, s2, UID_A, "a", &g), 0);
		assert_int_equal(broker_free(b, s1, a.id), 0);
		assert_int_equal(b->orphan_count, 1);
		uint64_t allocs, attachments;
		if (round == 0)
			broker_invalidate_all(b, &allocs, &attachments);
		else
			assert_int_equal(
			    broker_set_allocator(b, BROKER_ALLOCATOR_DIRECT, &allocs, &attachments),
			    0);
		check(b);
		assert_int_equal(allocs, 0);
		assert_int_equal(attachments, 1);
		assert_int_equal(b->orphan_count, 0);
		assert_int_equal(b->policy.dev[0].orphaned, 0);
		/* The block stays fenced for s2, whose client may still write
		 * there, until it answers the event (set_allocator: in the
		 * retired pool, not the device's current one). */
		assert_int_equal(dev_stats(b, 0).used, round == 0 ? 8 * KiB : 0);
		unsigned released;
		assert_int_equal(broker_invalidate_done(b, s2, b->invalidate_epoch, &released), 0);
		check(b);
		assert_int_equal(dev_stats(b, 0).used, 0);
	}
	broker_done(b);
}

static struct broker_ghost *watched;

/* broker_exit_fn: the process lives on until the test lets its ghost go. */
static int watch_exit(void *ctx, pid_t pid, int pidfd, struct broker_ghost *ghost)
{
	(void)ctx;
	(void)pid;
	(void)pidfd;
	watched = ghost;
	return 0;
}

/* An evicted exporter's process may still write what it allocated: what it
 * held alone is fenced at once, what others have open when the last of
 * them lets go, until its process exits (issue 24). */
static void test_evicted_exporter_fence(void **state)
{
	struct broker *b = broker_new(16 * MiB, 0, 0);
	broker_set_exit_watch(b, watch_exit, NULL);
	struct session *s1 = open_session(b, UID_A, 101);
	struct session *s2 = open_session(b, UID_A, 102);
	struct broker_instance *i1 = reg(b, s1, 0);
	(void)state;

	struct broker_grant a = alloc_ok(b, s1, i1, 8 * KiB, 0);
	struct broker_grant c = alloc_ok(b, s1, i1, 8 * KiB, 0);
	assert_int_equal(broker_export(b, s1, a.id, "a", UID_A), 0);
	struct broker_grant g;
	grant_poison(&g);
	assert_int_equal(broker_open(b, s2, UID_A, "a", &g), 0);
	s1->evicted = true;
	broker_session_close(b, s1);
	check(b);
	assert_non_null(watched);
	assert_int_equal(b->orphan_count, 1);
	assert_int_equal(b->dev[0].fenced, 8 * KiB); /* c */
	assert_int_equal(dev_stats(b, 0).used, 16 * KiB);
	assert_int_equal(broker_detach(b, s2, a.id), 0);
	check(b);
	assert_int_equal(b->orphan_count, 0);
	assert_int_equal(b->dev[0].fenced, 16 * KiB); /* a too */
	assert_int_equal(dev_stats(b, 0).used, 16 * KiB);
	/* Another session of the uid lands elsewhere. */
	struct broker_instance *i2 = reg(b, s2, 0);
	struct broker_grant n = alloc_ok(b, s2, i2, 8 * KiB, 0);
	assert_false(n.slab_id == a.slab_id && n.offset == a.offset);
	assert_false(n.slab_id == c.slab_id && n.offset == c.offset);
	assert_int_equal(broker_free(b, s2, n.id), 0);
	/* The process exits: everything goes. */
	broker_ghost_release(b, watched);
	watched = NULL;
	check(b);
	assert_int_equal(b->dev[0].fenced, 0);
	assert_int_equal(dev_stats(b, 0).used, 0);
	broker_done(b);
}

/* An allocation its own session attached, then freed: the session's close
 * releases the orphan it holds itself. */
static void test_self_attached_orphan(void **state)
{
	struct broker *b = broker_new(16 * MiB, 0, 0);
	struct session *s1 = open_session(b, UID_A, 101);
	struct broker_instance *i1 = reg(b, s1, 0);
	(void)state;

	struct broker_grant a = alloc_ok(b, s1, i1, 8 * KiB, 0);
	assert_int_equal(broker_export(b, s1, a.id, "a", UID_A), 0);
	struct broker_grant g;
	grant_poison(&g);
	assert_int_equal(broker_open(b, s1, UID_A, "a", &g), 0);
	assert_null(g.handle); /* the session holds the slab already */
	broker_session_close(b, s1);
	check(b);
	assert_int_equal(b->orphan_count, 0);
	assert_int_equal(dev_stats(b, 0).used, 0);
	broker_done(b);
}

/* The requests: parameters, the error codes and fields, the results. */
static void test_share_requests(void **state)
{
	struct broker *b = broker_new(64 * MiB, 0, 0);
	struct session *s1 = open_session(b, UID_A, 101);
	struct session *s2 = open_session(b, UID_A, 102);
	struct reply r = {.fd = -1};
	(void)state;

	hello(b, s1, "a");
	hello(b, s2, "b");
	struct broker_instance *i1 = reg(b, s1, 0);
	struct broker_grant a = alloc_ok(b, s1, i1, 4 * KiB, 0);
	char id[17];
	snprintf(id, sizeof(id), "%016llx", (unsigned long long)a.id);

	expect_error_fmt(b, s1, PROTO_E_PARAMS, "id",
	                 "{\"id\":\"e\",\"method\":\"export\",\"params\":{\"name\":\"n\"}}");
	expect_error_fmt(b, s1, PROTO_E_PARAMS, "name",
	                 "{\"id\":\"e\",\"method\":\"export\",\"params\":{\"id\":\"%s\"}}", id);
	expect_error_fmt(b, s1, PROTO_E_PARAMS, "name",
	                 "{\"id\":\"e\",\"method\":\"export\",\"params\":{\"id\":\"%s\","
	                 "\"name\":\"\"}}",
	                 id);
	expect_error_fmt(b, s1, PROTO_E_PARAMS, "uid",
	                 "{\"id\":\"e\",\"method\":\"export\",\"params\":{\"id\":\"%s\","
	                 "\"name\":\"n\",\"uid\":-1}}",
	                 id);
	expect_error_fmt(b, s1, PROTO_E_PARAMS, "uid",
	                 "{\"id\":\"e\",\"method\":\"export\",\"params\":{\"id\":\"%s\","
	                 "\"name\":\"n\",\"uid\":2000}}",
	                 id);
	expect_error_fmt(b, s2, PROTO_E_NOT_FOUND, NULL,
	                 "{\"id\":\"e\",\"method\":\"export\",\"params\":{\"id\":\"%s\","
	                 "\"name\":\"n\"}}",
	                 id);

	request(b, s1, &r,
	        "{\"id\":\"x\",\"method\":\"export\",\"params\":{\"id\":\"%s\",\"name\":\"n\"}}",
	        id);
	const cJSON *res = result_of(&r, "x");
	assert_string_equal(jstr(res, "name"), "n");
	assert_int_equal(jid(res, "id"), a.id);
	assert_int_equal(jnum(res, "uid"), UID_A);
	reply_done(&r);
	expect_error_fmt(b, s1, PROTO_E_PARAMS, "id",
	                 "{\"id\":\"e\",\"method\":\"export\",\"params\":{\"id\":\"%s\","
	                 "\"name\":\"m\"}}",
	                 id);

	request(b, s2, &r, "{\"id\":\"o\",\"method\":\"open\",\"params\":{\"name\":\"n\"}}");
	res = result_of(&r, "o");
	assert_int_equal(jid(res, "id"), a.id);
	assert_int_equal(ju64(res, "size"), a.size);
	assert_true(r.fd >= 0); /* the slab's descriptor: s2 had not seen it */
	reply_done(&r);
	expect_error_fmt(b, s2, PROTO_E_NOT_FOUND, NULL,
	                 "{\"id\":\"e\",\"method\":\"open\",\"params\":{\"name\":\"zz\"}}");
	expect_error_fmt(b, s2, PROTO_E_PARAMS, "name",
	                 "{\"id\":\"e\",\"method\":\"open\",\"params\":{\"name\":7}}");
	/* The owner: a uid, whose names are its own. Another user, not granted
	 * the name, is told what an unknown name gets. */
	static const char *const bad_owner[] = {"-1", "4294967295", "\"1000\"", "1.5", "null"};
	for (size_t i = 0; i < sizeof(bad_owner) / sizeof(bad_owner[0]); i++)
		expect_error_fmt(b, s2, PROTO_E_PARAMS, "owner",
		                 "{\"id\":\"e\",\"method\":\"open\",\"params\":{\"name\":\"n\","
		                 "\"owner\":%s}}",
		                 bad_owner[i]);
	struct session *s3 = open_session(b, UID_B, 103);
	hello(b, s3, "c");
	expect_error_fmt(b, s3, PROTO_E_NOT_FOUND, NULL,
	                 "{\"id\":\"e\",\"method\":\"open\",\"params\":{\"name\":\"n\","
	                 "\"owner\":%d}}",
	                 UID_A);
	expect_error_fmt(b, s3, PROTO_E_NOT_FOUND, NULL,
	                 "{\"id\":\"e\",\"method\":\"open\",\"params\":{\"name\":\"n\"}}");
	expect_error_fmt(b, s2, PROTO_E_NOT_FOUND, NULL,
	                 "{\"id\":\"e\",\"method\":\"unexport\",\"params\":{\"name\":\"n\"}}");
	request(b, s1, &r, "{\"id\":\"u\",\"method\":\"unexport\",\"params\":{\"name\":\"n\"}}");
	result_of(&r, "u");
	reply_done(&r);
	expect_error_fmt(b, s1, PROTO_E_NOT_FOUND, NULL,
	                 "{\"id\":\"e\",\"method\":\"unexport\",\"params\":{\"name\":\"n\"}}");
	check(b);
	broker_done(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_teardown(test_export_open_same_uid, teardown),
	    cmocka_unit_test_teardown(test_export_errors, teardown),
	    cmocka_unit_test_teardown(test_export_other_uid, teardown),
	    cmocka_unit_test_teardown(test_orphan_lifetime, teardown),
	    cmocka_unit_test_teardown(test_exporter_death, teardown),
	    cmocka_unit_test_teardown(test_orphans_released_by_reset, teardown),
	    cmocka_unit_test_teardown(test_evicted_exporter_fence, teardown),
	    cmocka_unit_test_teardown(test_self_attached_orphan, teardown),
	    cmocka_unit_test_teardown(test_share_requests, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
