/*
 * test-core-track.c - what a connection of the library holds (track.c) and
 * the process's cache of slab mappings under it (slab.c), without a
 * daemon: the alloc results a daemon would send are built here, and the
 * slabs are memory files mapped by the sim opener, as the sim backend's.
 *
 * - slab cache: a slab is mapped once per process however many times it
 *   is handed over, each descriptor closed; the last reference unmaps;
 *   the opens, closes and open-now counts follow; a size that disagrees,
 *   a missing descriptor, a file shorter than the slab are refused; the
 *   places for slabs kept empty are bounded;
 * - tracking: allocations adopted from results, found by id, in the slab
 *   they were handed (pointer = mapping + offset); the slab let go with
 *   its last hold; thousands of entries (the id maps growing); results
 *   that contradict what the connection holds refused; attachments
 *   counted; slabs the daemon keeps staying mapped until released or
 *   reclaimed.
 *
 * The counts are the process's: each test compares them with what they
 * were at its start.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "error.h"
#include "proto.h"
#include "slab.h"
#include "track.h"

#define SLAB_BYTES (2u << 20)
/* The bound on slabs kept empty, set before the library reads it. */
#define KEEP_MAX "2"

struct counts {
	uint64_t opens, closes, open_now;
};

static struct counts counts_now(void)
{
	struct counts c;

	slab_cache_counts(&c.opens, &c.closes, &c.open_now);
	return c;
}

static void expect_counts(const struct counts *base, uint64_t opens, uint64_t closes)
{
	struct counts c = counts_now();

	assert_int_equal(c.opens - base->opens, opens);
	assert_int_equal(c.closes - base->closes, closes);
	assert_int_equal(c.open_now, base->open_now + opens - closes);
}

/* A memory file of @size bytes, as the sim backend makes a slab. */
static int slab_file(uint64_t size)
{
	int fd = memfd_create("core-track", MFD_CLOEXEC);

	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)size), 0);
	return fd;
}

static bool fd_open(int fd)
{
	return fcntl(fd, F_GETFD) >= 0 || errno != EBADF;
}

/* A slab handle: its bytes all @b. */
static void handle_of(uint8_t *h, uint8_t b)
{
	memset(h, b, PROTO_HANDLE_SIZE);
}

static const struct slab_opener *sim(void)
{
	const struct slab_opener *o = slab_opener_find(PROTO_V_BACKEND_SIM);

	assert_non_null(o);
	return o;
}

/* ---- the slab cache ------------------------------------------------------- */

/* Handed the same slab twice (two connections): one mapping, two
 * references, both descriptors closed; the first put keeps it, the last
 * unmaps it. Bytes written through it reach the file. */
static void test_slab_mapped_once(void **state)
{
	(void)state;
	struct counts base = counts_now();
	struct slab_target where = {.device = 0};
	struct slab_map *a, *b;
	uint8_t h[PROTO_HANDLE_SIZE];
	int fd = slab_file(SLAB_BYTES), keep = dup(fd), fd2 = dup(fd);
	char back[4];

	handle_of(h, 0x11);
	assert_int_equal(slab_cache_get(sim(), h, fd, &where, SLAB_BYTES, &a), 0);
	assert_false(fd_open(fd));
	expect_counts(&base, 1, 0);
	assert_int_equal(slab_cache_get(sim(), h, fd2, &where, SLAB_BYTES, &b), 0);
	assert_false(fd_open(fd2));
	assert_ptr_equal(a, b);
	assert_int_equal(a->refs, 2);
	expect_counts(&base, 1, 0);

	memcpy(a->base, "abc", 4);
	assert_int_equal(pread(keep, back, 4, 0), 4);
	assert_string_equal(back, "abc");

	slab_cache_put(b);
	expect_counts(&base, 1, 0);
	slab_cache_put(a);
	expect_counts(&base, 1, 1);
	close(keep);
}

/* What the cache refuses, each leaving the counts where they were: a slab
 * handed again with another size, a new slab without its descriptor or of
 * size 0, a descriptor shorter than the slab. */
static void test_slab_refusals(void **state)
{
	(void)state;
	struct counts base = counts_now();
	struct slab_target where = {.device = 0};
	struct slab_map *a, *b = NULL;
	uint8_t h[PROTO_HANDLE_SIZE], other[PROTO_HANDLE_SIZE];

	handle_of(h, 0x21);
	handle_of(other, 0x22);
	assert_int_equal(slab_cache_get(sim(), h, slab_file(SLAB_BYTES), &where, SLAB_BYTES, &a),
	                 0);
	int fd = slab_file(2 * SLAB_BYTES);
	assert_int_equal(slab_cache_get(sim(), h, fd, &where, 2 * SLAB_BYTES, &b), GPB_E_PROTOCOL);
	assert_false(fd_open(fd));
	assert_null(b);
	assert_int_equal(a->refs, 1);

	assert_int_equal(slab_cache_get(sim(), other, -1, &where, SLAB_BYTES, &b), GPB_E_PROTOCOL);
	assert_int_equal(slab_cache_get(sim(), other, slab_file(SLAB_BYTES), &where, 0, &b),
	                 GPB_E_PROTOCOL);
	assert_int_equal(
	    slab_cache_get(sim(), other, slab_file(SLAB_BYTES / 2), &where, SLAB_BYTES, &b),
	    GPB_E_PROTOCOL);
	assert_null(b);
	expect_counts(&base, 1, 0);
	slab_cache_put(a);
	expect_counts(&base, 1, 1);
}

/* gpb_copy_*: within a mapping it copies; a range that leaves every
 * mapping of the process is refused. */
static void test_slab_copy(void **state)
{
	(void)state;
	struct slab_target where = {.device = 0};
	struct slab_map *a;
	uint8_t h[PROTO_HANDLE_SIZE];
	char buf[8] = "xyz";

	handle_of(h, 0x31);
	assert_int_equal(slab_cache_get(sim(), h, slab_file(SLAB_BYTES), &where, SLAB_BYTES, &a),
	                 0);
	char *dev = (char *)a->base + SLAB_BYTES - 4;
	assert_int_equal(slab_cache_copy(dev, buf, 4, true, NULL), 0);
	assert_string_equal(dev, "xyz");
	assert_int_equal(slab_cache_copy(dev, buf, 5, true, NULL), GPB_E_INVALID);
	assert_int_equal(slab_cache_copy(buf, buf + 1, 2, true, NULL), GPB_E_INVALID);
	slab_cache_put(a);
	assert_int_equal(slab_cache_copy(buf, dev, 4, false, NULL), GPB_E_INVALID);
}

/* The places for slabs kept empty: GPUBROKER_KEEP_SLABS of them, given
 * back one at a time. */
static void test_slab_keep_bound(void **state)
{
	(void)state;
	assert_int_equal(slab_keep_max(), 2);
	assert_true(slab_keep_get());
	assert_true(slab_keep_get());
	assert_false(slab_keep_get());
	slab_keep_put();
	assert_true(slab_keep_get());
	slab_keep_put();
	slab_keep_put();
}

/* ---- tracking --------------------------------------------------------------- */

struct grant {
	uint64_t id, slab, offset, size;
	uint8_t handle; /* 0: none (a slab the connection holds) */
	bool keep;
};

/* The result of an alloc as the daemon sends it. */
static cJSON *result_of(const struct grant *g)
{
	cJSON *r = cJSON_CreateObject();
	uint8_t h[PROTO_HANDLE_SIZE];

	assert_non_null(r);
	assert_int_equal(proto_add_id64(r, PROTO_F_ID, g->id), 0);
	assert_non_null(cJSON_AddNumberToObject(r, PROTO_F_DEVICE, 0));
	assert_int_equal(proto_add_id64(r, PROTO_F_SLAB, g->slab), 0);
	assert_int_equal(proto_add_u64(r, PROTO_F_SLAB_SIZE, SLAB_BYTES), 0);
	assert_int_equal(proto_add_u64(r, PROTO_F_OFFSET, g->offset), 0);
	assert_int_equal(proto_add_u64(r, PROTO_F_SIZE, g->size), 0);
	if (g->handle) {
		handle_of(h, g->handle);
		assert_int_equal(proto_add_hex(r, PROTO_F_HANDLE, h, sizeof(h)), 0);
	}
	if (g->keep)
		assert_non_null(cJSON_AddBoolToObject(r, PROTO_F_KEEP, true));
	return r;
}

/* track_adopt() of @g (with a fresh slab file when it hands a slab over):
 * its return code. */
static int adopt(struct track *t, enum track_kind kind, const struct grant *g,
                 struct gpb_allocation *out)
{
	struct track_prep prep;
	cJSON *r = result_of(g);
	uint64_t id;
	int rc;

	assert_int_equal(track_prepare(t, kind, &prep), 0);
	rc = track_adopt(t, kind, &prep, r, g->handle ? slab_file(SLAB_BYTES) : -1, out, &id);
	if (rc == 0)
		assert_int_equal(id, g->id);
	track_prep_release(&prep);
	cJSON_Delete(r);
	return rc;
}

static int track_setup(void **state)
{
	struct track *t = malloc(sizeof(*t));

	assert_non_null(t);
	track_init(t, sim());
	*state = t;
	return 0;
}

static int track_teardown(void **state)
{
	track_finish(*state);
	free(*state);
	return 0;
}

/* Two allocations in one slab: the first hands the slab over, the second
 * comes in it; each found by id at the mapping plus its offset; the slab
 * unmapped with the last of them, not before. */
static void test_track_adopt_release(void **state)
{
	struct track *t = *state;
	struct counts base = counts_now();
	struct gpb_allocation a, b;
	struct track_entry *e;

	assert_int_equal(adopt(t, TRACK_ALLOC, &(struct grant){1, 0x50, 0, 4096, 0x51, false}, &a),
	                 0);
	assert_int_equal(adopt(t, TRACK_ALLOC, &(struct grant){2, 0x50, 8192, 100, 0, false}, &b),
	                 0);
	expect_counts(&base, 1, 0);
	assert_int_equal(a.slab, 0x50);
	assert_ptr_equal((char *)b.ptr - (char *)a.ptr, 8192);
	e = track_lookup(t, TRACK_ALLOC, 2);
	assert_non_null(e);
	assert_ptr_equal(e->ptr, b.ptr);
	assert_int_equal(e->size, 100);
	assert_int_equal(e->slab->holds, 2);
	assert_null(track_lookup(t, TRACK_ALLOC, 3));
	assert_null(track_lookup(t, TRACK_ATTACH, 1));

	track_release(t, TRACK_ALLOC, 1);
	assert_null(track_lookup(t, TRACK_ALLOC, 1));
	assert_true(track_holds_slab(t, 0x50));
	expect_counts(&base, 1, 0);
	track_release(t, TRACK_ALLOC, 1); /* unknown now: ignored */
	assert_true(track_holds_slab(t, 0x50));
	track_release(t, TRACK_ALLOC, 2);
	assert_false(track_holds_slab(t, 0x50));
	expect_counts(&base, 1, 1);
}

/* Thousands of allocations over a few slabs: every one found by id at its
 * place after the id maps have grown, every slab let go with its last. */
static void test_track_many(void **state)
{
	struct track *t = *state;
	struct counts base = counts_now();
	enum { N = 6000, SLABS = 3, SIZE = 256 };
	struct gpb_allocation out;
	void *first[SLABS];

	for (uint64_t i = 0; i < N; i++) {
		uint64_t s = i % SLABS, k = i / SLABS;
		struct grant g = {.id = 1000 + i,
		                  .slab = 0x60 + s,
		                  .offset = k * SIZE,
		                  .size = SIZE,
		                  .handle = k == 0 ? (uint8_t)(0x61 + s) : 0};

		assert_int_equal(adopt(t, TRACK_ALLOC, &g, &out), 0);
		if (k == 0)
			first[s] = out.ptr;
	}
	expect_counts(&base, SLABS, 0);
	for (uint64_t i = 0; i < N; i++) {
		struct track_entry *e = track_lookup(t, TRACK_ALLOC, 1000 + i);

		assert_non_null(e);
		assert_ptr_equal(e->ptr, (char *)first[i % SLABS] + (i / SLABS) * SIZE);
	}
	for (uint64_t i = 0; i < N; i++)
		track_release(t, TRACK_ALLOC, 1000 + i);
	for (int s = 0; s < SLABS; s++)
		assert_false(track_holds_slab(t, 0x60 + (uint64_t)s));
	expect_counts(&base, SLABS, SLABS);
}

/* Results that contradict what the connection holds: each refused with
 * GPB_E_PROTOCOL, nothing recorded. */
static void test_track_refusals(void **state)
{
	struct track *t = *state;
	struct counts base = counts_now();
	struct gpb_allocation out;

	/* In a slab never handed over. */
	assert_int_equal(adopt(t, TRACK_ALLOC, &(struct grant){1, 0x70, 0, 64, 0, false}, &out),
	                 GPB_E_PROTOCOL);
	assert_null(track_lookup(t, TRACK_ALLOC, 1));
	/* Past the slab's end. */
	assert_int_equal(adopt(t, TRACK_ALLOC,
	                       &(struct grant){2, 0x70, SLAB_BYTES - 64, 128, 0x71, false}, &out),
	                 GPB_E_PROTOCOL);
	expect_counts(&base, 0, 0);
	/* An allocation id given out twice. */
	assert_int_equal(adopt(t, TRACK_ALLOC, &(struct grant){3, 0x70, 0, 64, 0x71, false}, &out),
	                 0);
	assert_int_equal(adopt(t, TRACK_ALLOC, &(struct grant){3, 0x70, 64, 64, 0, false}, &out),
	                 GPB_E_PROTOCOL);
	assert_int_equal(track_lookup(t, TRACK_ALLOC, 3)->slab->holds, 1);
	/* The slab handed over again under another handle. */
	assert_int_equal(
	    adopt(t, TRACK_ALLOC, &(struct grant){4, 0x70, 128, 64, 0x72, false}, &out),
	    GPB_E_PROTOCOL);
	assert_null(track_lookup(t, TRACK_ALLOC, 4));
	/* The daemon asking back a slab with memory in it. */
	assert_int_equal(track_reclaim(t, 0x70), GPB_E_PROTOCOL);
	assert_true(track_holds_slab(t, 0x70));
	expect_counts(&base, 1, 0);
	track_release(t, TRACK_ALLOC, 3);
	expect_counts(&base, 1, 1);
}

/* Attaching one id twice is two holds on one entry and one mapping; each
 * detach drops one. */
static void test_track_attach_refs(void **state)
{
	struct track *t = *state;
	struct counts base = counts_now();
	struct gpb_allocation a, b;
	struct grant g = {9, 0x80, 4096, 64, 0x81, false};

	assert_int_equal(adopt(t, TRACK_ATTACH, &g, &a), 0);
	g.handle = 0;
	assert_int_equal(adopt(t, TRACK_ATTACH, &g, &b), 0);
	assert_ptr_equal(a.ptr, b.ptr);
	assert_int_equal(track_lookup(t, TRACK_ATTACH, 9)->refs, 2);
	assert_int_equal(track_lookup(t, TRACK_ATTACH, 9)->slab->holds, 2);
	track_release(t, TRACK_ATTACH, 9);
	assert_non_null(track_lookup(t, TRACK_ATTACH, 9));
	track_release(t, TRACK_ATTACH, 9);
	assert_null(track_lookup(t, TRACK_ATTACH, 9));
	expect_counts(&base, 1, 1);
}

/* Slabs the daemon keeps ("keep"): empty, one stays mapped (idle) in each
 * of the process's places; past the bound, one is let go with a release
 * to send. Idle slabs are given back by track_release_idle() or a
 * reclaim, each with its release; a new allocation takes an idle slab
 * back without mapping it again. */
static void test_track_keep(void **state)
{
	struct track *t = *state;
	struct counts base = counts_now();
	struct gpb_allocation out;
	const uint64_t *ids;
	size_t n;

	for (uint64_t s = 0; s < 3; s++) {
		struct grant g = {0x100 + s, 0x90 + s, 0, 64, (uint8_t)(0x91 + s), true};

		assert_int_equal(adopt(t, TRACK_ALLOC, &g, &out), 0);
	}
	for (uint64_t s = 0; s < 3; s++)
		track_release(t, TRACK_ALLOC, 0x100 + s);
	/* Two places (KEEP_MAX): the third slab is let go. */
	ids = track_take_released(t, &n);
	assert_int_equal(n, 1);
	assert_int_equal(ids[0], 0x92);
	assert_true(track_holds_slab(t, 0x90));
	assert_true(track_holds_slab(t, 0x91));
	assert_false(track_holds_slab(t, 0x92));
	expect_counts(&base, 3, 1);
	assert_false(slab_keep_get()); /* both places taken */

	/* Back into an idle slab: no new mapping, its place given back. */
	assert_int_equal(adopt(t, TRACK_ALLOC, &(struct grant){0x200, 0x90, 64, 64, 0, true}, &out),
	                 0);
	expect_counts(&base, 3, 1);
	assert_true(slab_keep_get());
	slab_keep_put();

	assert_int_equal(track_reclaim(t, 0x91), 0);
	assert_false(track_holds_slab(t, 0x91));
	expect_counts(&base, 3, 2);
	track_release(t, TRACK_ALLOC, 0x200);
	assert_int_equal(track_release_idle(t), 1);
	ids = track_take_released(t, &n);
	assert_int_equal(n, 1);
	assert_int_equal(ids[0], 0x90);
	assert_false(track_holds_slab(t, 0x90));
	expect_counts(&base, 3, 3);
	assert_true(slab_keep_get());
	assert_true(slab_keep_get());
	slab_keep_put();
	slab_keep_put();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_slab_mapped_once),
	    cmocka_unit_test(test_slab_refusals),
	    cmocka_unit_test(test_slab_copy),
	    cmocka_unit_test(test_slab_keep_bound),
	    cmocka_unit_test_setup_teardown(test_track_adopt_release, track_setup, track_teardown),
	    cmocka_unit_test_setup_teardown(test_track_many, track_setup, track_teardown),
	    cmocka_unit_test_setup_teardown(test_track_refusals, track_setup, track_teardown),
	    cmocka_unit_test_setup_teardown(test_track_attach_refs, track_setup, track_teardown),
	    cmocka_unit_test_setup_teardown(test_track_keep, track_setup, track_teardown),
	};

	/* Read once per process, at the first keep place asked for. */
	setenv("GPUBROKER_KEEP_SLABS", KEEP_MAX, 1);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
