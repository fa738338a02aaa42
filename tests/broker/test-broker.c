/*
 * test-broker.c - unit tests of the daemon core without sockets: the broker
 * over the sim backend (sessions, slab holds, the sim descriptor, attach and
 * detach).
 *
 * Every test builds its own broker over a small simulated device (2 MiB
 * slabs), calls broker_check() after each step, frees every reply frame and
 * destroys the broker, so the binary is leak-free under ASan and valgrind.
 * Shared helpers: session-helpers.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "broker.h"
#include "broker_internal.h"
#include "config.h"
#include "dispatch.h"
#include "log.h"
#include "pool.h"
#include "proto.h"

#include "session-helpers.h"

/* ---- sessions ------------------------------------------------------------ */

/* alloc and free keep the session, instance, pool and table counters. */
static void test_session_bookkeeping(void **state)
{
	struct broker *b = broker_new(64 * MiB, 0, 0);
	struct session *s = open_session(b, UID_A, 101);
	struct broker_instance *inst = reg(b, s, 0);
	struct pool_stats st;
	(void)state;

	check(b);
	assert_int_equal(s->instance_count, 1);
	assert_int_equal(b->instance_count, 1);
	assert_int_equal(b->session_count, 1);

	struct broker_grant g1 = alloc_ok(b, s, inst, 1000, 0);
	check(b);
	assert_int_equal(g1.size, 1024);
	assert_int_equal(s->alloc_count, 1);
	assert_int_equal(s->used, 1024);
	assert_int_equal(inst->used, 1024);
	assert_int_equal(inst->live, 1);
	assert_int_equal(b->allocs.count, 1);
	st = dev_stats(b, 0);
	assert_int_equal(st.used, 1024);
	assert_int_equal(st.live, 1);
	assert_int_equal(st.slabs, 1);
	assert_int_equal(dev_stats(b, 1).live, 0);

	struct broker_grant g2 = alloc_ok(b, s, inst, 4096, 4096);
	check(b);
	assert_int_equal(g2.offset % 4096, 0);
	assert_int_not_equal(g1.id, g2.id);
	assert_int_equal(s->alloc_count, 2);
	assert_int_equal(s->used, 1024 + 4096);
	assert_int_equal(inst->used, 1024 + 4096);
	assert_int_equal(inst->live, 2);
	assert_int_equal(b->allocs.count, 2);
	st = dev_stats(b, 0);
	assert_int_equal(st.used, 1024 + 4096);
	assert_int_equal(st.live, 2);
	/* Not overlapping. */
	assert_true(g1.offset + g1.size <= g2.offset || g2.offset + g2.size <= g1.offset);

	assert_int_equal(broker_free(b, s, g1.id), 0);
	check(b);
	assert_int_equal(s->alloc_count, 1);
	assert_int_equal(s->used, 4096);
	assert_int_equal(inst->used, 4096);
	assert_int_equal(inst->live, 1);
	assert_int_equal(b->allocs.count, 1);
	st = dev_stats(b, 0);
	assert_int_equal(st.used, 4096);
	assert_int_equal(st.live, 1);
	assert_int_equal(st.frees, 1);

	assert_int_equal(broker_free(b, s, g2.id), 0);
	check(b);
	assert_int_equal(s->alloc_count, 0);
	assert_int_equal(s->used, 0);
	assert_int_equal(inst->used, 0);
	assert_int_equal(inst->live, 0);
	assert_int_equal(b->allocs.count, 0);
	st = dev_stats(b, 0);
	assert_int_equal(st.used, 0);
	assert_int_equal(st.live, 0);
	assert_int_equal(st.allocs, 2);
	assert_int_equal(st.frees, 2);

	/* Freed ids are gone. */
	assert_int_equal(broker_free(b, s, g1.id), -ENOENT);
	assert_int_equal(broker_free(b, s, g2.id), -ENOENT);

	uint64_t inst_id = inst->id;
	assert_int_equal(broker_unregister(b, s, inst_id), 0);
	check(b);
	assert_int_equal(s->instance_count, 0);
	assert_int_equal(b->instance_count, 0);
	assert_null(broker_instance_find(s, inst_id));
	assert_int_equal(broker_unregister(b, s, inst_id), -ENOENT);

	broker_session_close(b, s);
	check(b);
	assert_int_equal(b->session_count, 0);
	broker_done(b);
}

/* Closing a session with live allocations, attachments both ways and several
 * instances on both devices returns everything, and touches nobody else. */
static void test_session_close_reclaims(void **state)
{
	struct broker *b = broker_new(64 * MiB, 0, 0);
	struct session *s1 = open_session(b, UID_A, 101);
	struct session *s2 = open_session(b, UID_A, 102);
	struct session *s3 = open_session(b, UID_B, 103);
	struct broker_grant g;
	(void)state;

	struct broker_instance *i20 = reg(b, s2, 0);
	struct broker_instance *i30 = reg(b, s3, 0);
	struct broker_instance *i31 = reg(b, s3, 1);
	uint64_t instances_before = b->instance_count;
	assert_int_equal(instances_before, 3);

	struct broker_grant other2 = alloc_ok(b, s2, i20, 8 * KiB, 0);
	alloc_ok(b, s3, i30, 16 * KiB, 0);
	alloc_ok(b, s3, i31, 3 * MiB, 0); /* dedicated slab (over the 2 MiB slab size) */
	check(b);
	uint64_t used0 = dev_stats(b, 0).used, used1 = dev_stats(b, 1).used;
	uint64_t live0 = dev_stats(b, 0).live, live1 = dev_stats(b, 1).live;
	uint64_t allocs_before = b->allocs.count;

	/* s1: three instances on both devices, allocations in each, a large
	 * one, an attachment to s2's allocation; s2 attaches to one of s1's. */
	struct broker_instance *a = reg(b, s1, 0);
	struct broker_instance *c = reg(b, s1, 1);
	reg(b, s1, 1); /* an instance without allocations */
	uint64_t ids[8];
	unsigned n = 0;
	for (int i = 0; i < 3; i++)
		ids[n++] = alloc_ok(b, s1, a, 3000 + (uint64_t)i * 700, 0).id;
	for (int i = 0; i < 3; i++)
		ids[n++] = alloc_ok(b, s1, c, 5000 + (uint64_t)i * 300, 512).id;
	ids[n++] = alloc_ok(b, s1, a, 3 * MiB, 0).id;
	check(b);
	assert_int_equal(s1->alloc_count, n);
	assert_int_equal(b->instance_count, instances_before + 3);
	assert_int_equal(b->allocs.count, allocs_before + n);

	grant_poison(&g);
	assert_int_equal(broker_attach(b, s1, other2.id, &g), 0);
	grant_poison(&g);
	assert_int_equal(broker_attach(b, s2, ids[0], &g), 0);
	grant_poison(&g);
	assert_int_equal(broker_attach(b, s2, ids[n - 1], &g), 0);
	assert_int_equal(s1->attached.count, 1);
	assert_int_equal(s2->attached.count, 2);
	check(b);

	broker_session_close(b, s1);
	check(b);
	assert_int_equal(b->session_count, 2);
	assert_int_equal(b->instance_count, instances_before);
	assert_int_equal(b->allocs.count, allocs_before);
	for (unsigned i = 0; i < n; i++) {
		grant_poison(&g);
		/* Freed, attached or not. */
		assert_int_equal(broker_attach(b, s2, ids[i], &g), -ENOENT);
	}
	/* What s2 attached lives on (orphans) until s2 detaches it. */
	assert_int_equal(b->orphan_count, 2);
	assert_int_equal(dev_stats(b, 0).live, live0 + 2);
	assert_int_equal(broker_detach(b, s2, ids[0]), 0);
	assert_int_equal(b->orphan_count, 1);
	check(b);
	assert_int_equal(broker_detach(b, s2, ids[n - 1]), 0);
	assert_int_equal(b->orphan_count, 0);
	check(b);
	assert_int_equal(dev_stats(b, 0).used, used0);
	assert_int_equal(dev_stats(b, 1).used, used1);
	assert_int_equal(dev_stats(b, 0).live, live0);
	assert_int_equal(dev_stats(b, 1).live, live1);
	/* s2's allocation and s3's are untouched. */
	assert_int_equal(s2->alloc_count, 1);
	assert_int_equal(s3->alloc_count, 2);
	assert_int_equal(broker_free(b, s2, other2.id), 0);
	check(b);

	/* s2 still holds two attachments into s1's (now freed) slabs. */
	broker_session_close(b, s2);
	check(b);
	broker_session_close(b, s3);
	check(b);
	for (int d = 0; d < 2; d++) {
		struct pool_stats st = dev_stats(b, d);
		assert_int_equal(st.used, 0);
		assert_int_equal(st.live, 0);
		/* No user is connected: no slab is kept, not even as cache. */
		assert_int_equal(st.slabs, 0);
		assert_int_equal(st.reserved, 0);
	}
	assert_int_equal(b->allocs.count, 0);
	assert_int_equal(b->instance_count, 0);
	assert_int_equal(b->session_count, 0);
	broker_done(b);
}

/* The empty-slab cache of a uid is trimmed only when its last session goes. */
static void test_session_close_trims_last_uid_session(void **state)
{
	struct broker *b = broker_new(64 * MiB, 0, 0);
	struct session *s1 = open_session(b, UID_A, 1);
	struct session *s2 = open_session(b, UID_A, 2);
	(void)state;

	struct broker_instance *inst = reg(b, s1, 0);
	alloc_ok(b, s1, inst, 4096, 0);
	assert_int_equal(slab_count(b, 0), 1);
	broker_session_close(b, s1);
	check(b);
	/* s2 of the same uid is still connected: the emptied slab stays cached. */
	assert_int_equal(slab_count(b, 0), 1);
	assert_int_equal(dev_stats(b, 0).used, 0);
	broker_session_close(b, s2);
	check(b);
	assert_int_equal(slab_count(b, 0), 0);
	assert_int_equal(dev_stats(b, 0).reserved, 0);
	broker_done(b);
}

/* ---- holds --------------------------------------------------------------- */

static void test_holds(void **state)
{
	struct broker *b = broker_new(64 * MiB, 0, 0);
	struct session *s1 = open_session(b, UID_A, 1);
	struct session *s2 = open_session(b, UID_A, 2);
	struct session *s3 = open_session(b, UID_B, 3);
	unsigned char handle[PROTO_HANDLE_SIZE];
	(void)state;

	struct broker_instance *i1 = reg(b, s1, 0);
	struct broker_instance *i2 = reg(b, s2, 0);
	struct broker_instance *i3 = reg(b, s3, 0);

	/* First in the slab: handle and descriptor. */
	struct broker_grant a1 = alloc_ok(b, s1, i1, 4096, 0);
	assert_non_null(a1.handle);
	assert_true(a1.fd >= 0);
	memcpy(handle, a1.handle, sizeof(handle));
	uint64_t slab = a1.slab_id;

	/* Same slab again: nothing to send. */
	struct broker_grant a2 = alloc_ok(b, s1, i1, 4096, 0);
	assert_int_equal(a2.slab_id, slab);
	assert_null(a2.handle);
	assert_int_equal(a2.fd, -1);

	/* Freeing one of two keeps the hold. */
	assert_int_equal(broker_free(b, s1, a1.id), 0);
	check(b);
	struct broker_grant a3 = alloc_ok(b, s1, i1, 4096, 0);
	assert_int_equal(a3.slab_id, slab);
	assert_null(a3.handle);

	/* A dedicated slab (exactly full, so nothing else lands in its
	 * tail) is another slab: handle again. */
	struct broker_grant big = alloc_ok(b, s1, i1, 4 * MiB, 0);
	assert_int_not_equal(big.slab_id, slab);
	assert_non_null(big.handle);
	assert_int_not_equal(big.fd, a1.fd);

	/* A second session of the same uid shares the slab but must be given
	 * it once. */
	struct broker_grant b1 = alloc_ok(b, s2, i2, 4096, 0);
	assert_int_equal(b1.slab_id, slab);
	assert_non_null(b1.handle);
	assert_memory_equal(b1.handle, handle, sizeof(handle));
	assert_int_equal(b1.fd, a1.fd);
	struct broker_grant b2 = alloc_ok(b, s2, i2, 4096, 0);
	assert_int_equal(b2.slab_id, slab);
	assert_null(b2.handle);
	assert_int_equal(b2.fd, -1);

	/* s1 lets go of every allocation in the slab (s2 keeps it alive):
	 * the next one that lands there sends the handle again. */
	assert_int_equal(broker_free(b, s1, a2.id), 0);
	assert_int_equal(broker_free(b, s1, a3.id), 0);
	check(b);
	struct broker_grant a4 = alloc_ok(b, s1, i1, 4096, 0);
	assert_int_equal(a4.slab_id, slab);
	assert_non_null(a4.handle);
	assert_memory_equal(a4.handle, handle, sizeof(handle));
	assert_int_equal(a4.fd, a1.fd);
	struct broker_grant a5 = alloc_ok(b, s1, i1, 4096, 0);
	assert_null(a5.handle);

	/* Another uid never lands in that slab, however much room it has. */
	struct broker_grant c1 = alloc_ok(b, s3, i3, 4096, 0);
	assert_int_not_equal(c1.slab_id, slab);
	assert_int_not_equal(c1.slab_id, big.slab_id);
	assert_non_null(c1.handle);
	assert_memory_not_equal(c1.handle, handle, sizeof(handle));
	assert_int_not_equal(c1.fd, a1.fd);
	for (int i = 0; i < 20; i++) {
		struct broker_grant c = alloc_ok(b, s3, i3, 8192, 0);
		assert_int_not_equal(c.slab_id, slab);
		struct broker_grant a = alloc_ok(b, s1, i1, 8192, 0);
		assert_int_not_equal(a.slab_id, c1.slab_id);
	}
	check(b);

	/* Every allocation of the session gone, slab cached: the next one lands
	 * in the same (cached) slab and is given it again. */
	broker_session_close(b, s2);
	broker_session_close(b, s3);
	struct list *pos, *tmp;
	list_for_each_safe(pos, tmp, &s1->allocs) {
		struct broker_alloc *al = list_entry(pos, struct broker_alloc, link);
		assert_int_equal(broker_free(b, s1, al->id), 0);
	}
	check(b);
	assert_int_equal(s1->held.count, 0);
	assert_int_equal(slab_count(b, 0), 1); /* the cached standard slab */
	struct broker_grant a6 = alloc_ok(b, s1, i1, 4096, 0);
	assert_int_equal(a6.slab_id, slab);
	assert_non_null(a6.handle);
	assert_true(a6.fd >= 0);
	assert_int_equal(s1->held.count, 1);
	check(b);
	broker_done(b);
}

/* Two uids never share a slab, on either device, and each uid's first
 * allocation on each device comes with a handle. */
static void test_uids_never_share_slabs(void **state)
{
	struct broker *b = broker_new(64 * MiB, 0, 0);
	struct session *sa = open_session(b, UID_A, 1);
	struct session *sb = open_session(b, UID_B, 2);
	uint64_t slab_a[2], slab_b[2];
	(void)state;

	for (int d = 0; d < 2; d++) {
		struct broker_instance *ia = reg(b, sa, d);
		struct broker_instance *ib = reg(b, sb, d);
		struct broker_grant ga = alloc_ok(b, sa, ia, 256, 0);
		struct broker_grant gb = alloc_ok(b, sb, ib, 256, 0);
		assert_non_null(ga.handle);
		assert_non_null(gb.handle);
		assert_int_equal(ga.device, d);
		assert_int_equal(gb.device, d);
		assert_int_not_equal(ga.slab_id, gb.slab_id);
		assert_int_not_equal(ga.fd, gb.fd);
		slab_a[d] = ga.slab_id;
		slab_b[d] = gb.slab_id;
		struct backend_slab *bs = pool_slab_backend(
		    pool_block_slab(((struct broker_alloc *)idmap_get(&b->allocs, ga.id))->block));
		assert_int_equal(bs->uid, UID_A);
		bs = pool_slab_backend(
		    pool_block_slab(((struct broker_alloc *)idmap_get(&b->allocs, gb.id))->block));
		assert_int_equal(bs->uid, UID_B);
	}
	/* Slab ids are unique across devices too. */
	assert_int_not_equal(slab_a[0], slab_a[1]);
	assert_int_not_equal(slab_b[0], slab_b[1]);
	assert_int_not_equal(slab_a[0], slab_b[1]);
	assert_int_not_equal(slab_a[1], slab_b[0]);
	check(b);
	broker_done(b);
}

/* ---- the sim descriptor -------------------------------------------------- */

static void test_sim_fd_is_sealed_memfd(void **state)
{
	struct broker *b = broker_new(64 * MiB, 0, 0);
	struct session *s = open_session(b, UID_A, 1);
	struct broker_instance *inst = reg(b, s, 1);
	struct stat sta, stb;
	char path[64];
	(void)state;

	alloc_ok(b, s, inst, 12345, 0); /* so the next one is not at offset 0 */
	struct broker_grant g = alloc_ok(b, s, inst, 4000, 0);
	assert_null(g.handle);
	/* The descriptor came with the first grant of the slab. */
	struct broker_alloc *al = idmap_get(&b->allocs, g.id);
	assert_non_null(al);
	int fd = ((struct backend_slab *)pool_slab_backend(pool_block_slab(al->block)))->fd;
	assert_true(fd >= 0);
	assert_int_not_equal(g.offset, 0);

	assert_int_equal(fstat(fd, &sta), 0);
	assert_int_equal(sta.st_size, (off_t)g.slab_size);
	assert_int_equal(g.slab_size, SLAB);

	unsigned char *m1 = mmap(NULL, g.slab_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	assert_true(m1 != MAP_FAILED);
	/* A new slab is zero-filled. */
	for (uint64_t i = 0; i < g.size; i++)
		assert_int_equal(m1[g.offset + i], 0);
	for (uint64_t i = 0; i < g.size; i++)
		m1[g.offset + i] = (unsigned char)(i * 7 + 3);

	/* Second mapping of the same descriptor. */
	unsigned char *m2 = mmap(NULL, g.slab_size, PROT_READ, MAP_SHARED, fd, 0);
	assert_true(m2 != MAP_FAILED);
	assert_ptr_not_equal(m1, m2);
	assert_memory_equal(m2 + g.offset, m1 + g.offset, g.size);

	/* A third through a fresh open of the file (another process would
	 * reach the same file through SCM_RIGHTS). */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	int fd2 = open(path, O_RDWR | O_CLOEXEC);
	assert_true(fd2 >= 0);
	assert_int_equal(fstat(fd2, &stb), 0);
	assert_int_equal(sta.st_ino, stb.st_ino);
	unsigned char *m3 = mmap(NULL, g.slab_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd2, 0);
	assert_true(m3 != MAP_FAILED);
	for (uint64_t i = 0; i < g.size; i++)
		assert_int_equal(m3[g.offset + i], (unsigned char)(i * 7 + 3));
	/* and writes through it show in the first mapping */
	memset(m3 + g.offset, 0xee, 16);
	assert_int_equal(m1[g.offset], 0xee);
	assert_int_equal(m2[g.offset + 15], 0xee);

	/* Sealed: the size cannot change, and no seal can be added. */
	errno = 0;
	assert_int_equal(ftruncate(fd, 0), -1);
	assert_int_equal(errno, EPERM);
	errno = 0;
	assert_int_equal(ftruncate(fd, (off_t)(2 * g.slab_size)), -1);
	assert_int_equal(errno, EPERM);
	errno = 0;
	assert_int_equal(ftruncate(fd2, (off_t)(g.slab_size / 2)), -1);
	assert_int_equal(errno, EPERM);
	int seals = fcntl(fd, F_GET_SEALS);
	assert_true(seals >= 0);
	assert_true(seals & F_SEAL_SHRINK);
	assert_true(seals & F_SEAL_GROW);
	assert_true(seals & F_SEAL_SEAL);
	errno = 0;
	assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE), -1);
	assert_int_equal(errno, EPERM);
	assert_int_equal(fstat(fd, &sta), 0);
	assert_int_equal(sta.st_size, (off_t)g.slab_size);
	/* Close-on-exec: the daemon's descriptors do not leak into children. */
	assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);

	/* Another uid's slab is another file. */
	struct session *s2 = open_session(b, UID_B, 2);
	struct broker_grant o = alloc_ok(b, s2, reg(b, s2, 1), 256, 0);
	assert_true(o.fd >= 0);
	assert_int_equal(fstat(o.fd, &stb), 0);
	assert_int_not_equal(sta.st_ino, stb.st_ino);

	assert_int_equal(munmap(m1, g.slab_size), 0);
	assert_int_equal(munmap(m2, g.slab_size), 0);
	assert_int_equal(munmap(m3, g.slab_size), 0);
	assert_int_equal(close(fd2), 0);
	check(b);
	broker_done(b);
}

/* ---- attach / detach ----------------------------------------------------- */

static void test_attach_detach(void **state)
{
	struct broker *b = broker_new(64 * MiB, 0, 0);
	struct session *s1 = open_session(b, UID_A, 1);
	struct session *s2 = open_session(b, UID_A, 2);
	struct session *s3 = open_session(b, UID_B, 3);
	struct broker_grant g;
	(void)state;

	struct broker_instance *i1 = reg(b, s1, 0);
	struct broker_grant a = alloc_ok(b, s1, i1, 10000, 0);

	/* Same uid, other session, slab not held: handle and descriptor. */
	grant_poison(&g);
	assert_int_equal(broker_attach(b, s2, a.id, &g), 0);
	check(b);
	assert_int_equal(g.id, a.id);
	assert_int_equal(g.device, a.device);
	assert_int_equal(g.slab_id, a.slab_id);
	assert_int_equal(g.slab_size, a.slab_size);
	assert_int_equal(g.offset, a.offset);
	assert_int_equal(g.size, a.size);
	assert_non_null(g.handle);
	assert_memory_equal(g.handle, a.handle, PROTO_HANDLE_SIZE);
	assert_int_equal(g.fd, a.fd);
	assert_int_equal(s2->attached.count, 1);
	/* The attachment is no allocation of s2's. */
	assert_int_equal(s2->alloc_count, 0);
	assert_int_equal(broker_free(b, s2, a.id), -ENOENT);

	/* Twice: -EEXIST. */
	grant_poison(&g);
	assert_int_equal(broker_attach(b, s2, a.id, &g), -EEXIST);
	assert_int_equal(s2->attached.count, 1);

	/* The attachment is a hold: s2's own allocation in that slab gets no
	 * handle. */
	struct broker_instance *i2 = reg(b, s2, 0);
	struct broker_grant own = alloc_ok(b, s2, i2, 4096, 0);
	assert_int_equal(own.slab_id, a.slab_id);
	assert_null(own.handle);

	/* Another uid: -ENOENT, exactly as an unknown id. */
	grant_poison(&g);
	assert_int_equal(broker_attach(b, s3, a.id, &g), -ENOENT);
	grant_poison(&g);
	assert_int_equal(broker_attach(b, s3, a.id ^ 0x8000000000000001ull, &g), -ENOENT);
	grant_poison(&g);
	assert_int_equal(broker_attach(b, s2, a.id ^ 0x8000000000000001ull, &g), -ENOENT);
	assert_int_equal(broker_detach(b, s3, a.id), -ENOENT);
	assert_int_equal(s3->attached.count, 0);
	assert_int_equal(s3->held.count, 0);
	check(b);

	/* Detach: 0, then -ENOENT. */
	assert_int_equal(broker_detach(b, s2, a.id), 0);
	check(b);
	assert_int_equal(broker_detach(b, s2, a.id), -ENOENT);
	assert_int_equal(s2->attached.count, 0);
	/* s2 still holds the slab through its own allocation: attaching again
	 * sends nothing. */
	grant_poison(&g);
	assert_int_equal(broker_attach(b, s2, a.id, &g), 0);
	assert_null(g.handle);
	assert_int_equal(g.fd, -1);
	assert_int_equal(broker_detach(b, s2, a.id), 0);
	/* ... and once it lets go of everything there, attaching sends the
	 * handle again. */
	assert_int_equal(broker_free(b, s2, own.id), 0);
	assert_int_equal(s2->held.count, 0);
	grant_poison(&g);
	assert_int_equal(broker_attach(b, s2, a.id, &g), 0);
	assert_non_null(g.handle);
	assert_int_equal(g.fd, a.fd);
	/* The owner attaching its own allocation holds the slab already. */
	grant_poison(&g);
	assert_int_equal(broker_attach(b, s1, a.id, &g), 0);
	assert_null(g.handle);
	assert_int_equal(g.fd, -1);
	assert_int_equal(broker_detach(b, s1, a.id), 0);
	check(b);

	/* The attacher's detach does not free the allocation. */
	assert_int_equal(broker_detach(b, s2, a.id), 0);
	assert_non_null(idmap_get(&b->allocs, a.id));
	assert_int_equal(broker_free(b, s1, a.id), 0);
	grant_poison(&g);
	assert_int_equal(broker_attach(b, s2, a.id, &g), -ENOENT);
	check(b);
	broker_done(b);
}

/* A slab stays while attached, even after its owner freed the allocation. */
static void test_attach_pins_slab(void **state)
{
	struct broker *b = broker_new(64 * MiB, 0, 0);
	struct session *s1 = open_session(b, UID_A, 1);
	struct session *s2 = open_session(b, UID_A, 2);
	struct broker_grant g;
	(void)state;

	struct broker_instance *i1 = reg(b, s1, 0);
	alloc_ok(b, s1, i1, 4096, 0); /* a standard slab that stays */
	uint64_t slabs0 = slab_count(b, 0);

	/* Large: a dedicated slab, returned as soon as it is empty and
	 * unpinned. */
	struct broker_grant big = alloc_ok(b, s1, i1, 4 * MiB, 0);
	assert_non_null(big.handle);
	assert_int_equal(slab_count(b, 0), slabs0 + 1);
	uint64_t reserved = dev_stats(b, 0).reserved;
	/* (Without an attachment, freeing it returns the slab at once.) */
	assert_int_equal(broker_free(b, s1, big.id), 0);
	assert_int_equal(slab_count(b, 0), slabs0);
	big = alloc_ok(b, s1, i1, 4 * MiB, 0);
	assert_int_equal(slab_count(b, 0), slabs0 + 1);

	grant_poison(&g);
	assert_int_equal(broker_attach(b, s2, big.id, &g), 0);
	assert_non_null(g.handle);
	int fd = g.fd;
	assert_int_equal(broker_free(b, s1, big.id), 0);
	check(b);
	struct pool_stats st = dev_stats(b, 0);
	assert_int_equal(st.slabs, slabs0 + 1);
	assert_int_equal(st.reserved, reserved);
	/* The block too: the attacher's bytes stay as they were. */
	assert_int_equal(st.live, 2);
	assert_int_equal(b->orphan_count, 1);
	/* The descriptor is still the slab's. */
	assert_true(fcntl(fd, F_GETFD) >= 0);
	/* Gone for every other purpose. */
	grant_poison(&g);
	assert_int_equal(broker_attach(b, s1, big.id, &g), -ENOENT);
	assert_int_equal(broker_free(b, s1, big.id), -ENOENT);
	/* Trimming does not take a pinned slab either. */
	pool_trim(b->dev[0].pool, UID_A, true);
	assert_int_equal(slab_count(b, 0), slabs0 + 1);

	assert_int_equal(broker_detach(b, s2, big.id), 0);
	check(b);
	assert_int_equal(slab_count(b, 0), slabs0);
	assert_int_equal(dev_stats(b, 0).reserved, reserved - 4 * MiB);
	assert_int_equal(broker_detach(b, s2, big.id), -ENOENT);
	assert_int_equal(s2->held.count, 0);

	/* Closing the attacher unpins too. */
	big = alloc_ok(b, s1, i1, 4 * MiB, 0);
	grant_poison(&g);
	assert_int_equal(broker_attach(b, s2, big.id, &g), 0);
	assert_int_equal(broker_free(b, s1, big.id), 0);
	assert_int_equal(slab_count(b, 0), slabs0 + 1);
	broker_session_close(b, s2);
	check(b);
	assert_int_equal(slab_count(b, 0), slabs0);
	broker_done(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_teardown(test_session_bookkeeping, teardown),
	    cmocka_unit_test_teardown(test_session_close_reclaims, teardown),
	    cmocka_unit_test_teardown(test_session_close_trims_last_uid_session, teardown),
	    cmocka_unit_test_teardown(test_holds, teardown),
	    cmocka_unit_test_teardown(test_uids_never_share_slabs, teardown),
	    cmocka_unit_test_teardown(test_sim_fd_is_sealed_memfd, teardown),
	    cmocka_unit_test_teardown(test_attach_detach, teardown),
	    cmocka_unit_test_teardown(test_attach_pins_slab, teardown),
	};

	/* Errors only, as in every broker test binary: a warning a test provokes
	 * on purpose is noise. */
	log_init(LOG_LEVEL_ERROR);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
