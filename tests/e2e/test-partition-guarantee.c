/*
 * test-partition-guarantee.c - a partition's size is available to it
 * whatever anyone else does (issue 24, item 2), against the real daemon:
 * sim, one device of 1 GiB, 64 MiB slabs.
 *
 * The pool reserves whole slabs per uid (and per partition), so what counts
 * against a partition's guarantee is slabs, not use: a client whose
 * allocations each take most of a slab (33 MiB of 64) reserves about twice
 * what it uses. Each test has such a client, outside the partitions or in
 * another one, take what it can, in big pieces, in many small ones that it
 * frees and allocates again (seeded: GPB_TEST_SEED replays), or with
 * dedicated slabs (requests larger than a slab); the partition must then
 * still get its whole size, and the refusals the other client gets must say
 * only what it can have (checked by having it).
 *
 * The first test needs a second uid (a forked child that sets its own):
 * two uids' allocations never share a slab. It is skipped, saying so,
 * when not root.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <grp.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define KiB  (1ull << 10)
#define MiB  (1ull << 20)
#define GiB  (1ull << 30)
#define SLAB (64 * MiB)

#define UID_A   61021 /* the partition's owner in test_outside_spread */
#define MAX_OUT 4096  /* allocations one client holds at once here */

static struct th_daemon daemon_;
static gpb_client *admin; /* root, outside every partition */

static int setup(void **state)
{
	(void)state;
	const char *extra[] = {"--socket-mode", "0666", "--sim-devices", "1", "--slab-size",
	                       "64MiB",         NULL};
	th_daemon_start(&daemon_, extra);
	chmod(daemon_.dir, 0755); /* UID_A's child reaches the socket */
	admin = th_client(&daemon_, "guarantee-test");
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	gpb_disconnect(admin);
	return th_daemon_stop(&daemon_) == 0 ? 0 : -1;
}

static int connect_with(const char *token, gpb_client **out)
{
	setenv("GPUBROKER_TOKEN", token, 1);
	int rc = gpb_connect(daemon_.socket, "in-partition", out);
	unsetenv("GPUBROKER_TOKEN");
	return rc;
}

static uint64_t register_on(gpb_client *c, const char *name)
{
	uint64_t inst;
	assert_int_equal(gpb_register(c, &(struct gpb_register_opts){.name = name}, &inst), 0);
	return inst;
}

/* What the last out-of-memory answer said the client can have: "..., N
 * free" and ", at most M in one allocation" when M < N. */
struct refusal {
	uint64_t free, largest;
};

static struct refusal refusal_read(void)
{
	const char *m = gpb_last_error();
	const char *p = strstr(m, "requested on device ");
	struct refusal r;
	if (!p || sscanf(p, "requested on device %*d, %" SCNu64 " free", &r.free) != 1)
		fail_msg("not an out-of-memory answer: %s", m);
	p = strstr(m, ", at most ");
	r.largest = r.free;
	if (p && sscanf(p, ", at most %" SCNu64 " in one allocation", &r.largest) != 1)
		fail_msg("bad message: %s", m);
	return r;
}

/* n allocations of size; stops at the first refusal, which must be for
 * memory. Returns how many were granted (stored from out[0]). */
static unsigned alloc_n(gpb_client *c, uint64_t inst, uint64_t size, unsigned n,
                        struct gpb_allocation *out)
{
	for (unsigned i = 0; i < n; i++) {
		int rc = gpb_alloc(c, inst, size, 0, &out[i]);
		if (rc == GPB_E_OUT_OF_MEMORY)
			return i;
		if (rc != 0)
			fail_msg("alloc %u of %" PRIu64 ": %d (%s)", i, size, rc, gpb_last_error());
	}
	return n;
}

static void free_all(gpb_client *c, struct gpb_allocation *a, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		if (a[i].id)
			assert_int_equal(gpb_free(c, a[i].id), 0);
	th_settle(c);
}

/*
 * A refusal told the truth: what it called free can be had, all of it, and
 * `largest` in one allocation, but not a byte more in one. Takes it (pieces
 * of at most `largest`, into out[] from *n on) and leaves it taken.
 */
static void refusal_holds(gpb_client *c, uint64_t inst, struct refusal r,
                          struct gpb_allocation *out, unsigned *n)
{
	struct gpb_allocation x;
	assert_true(r.largest <= r.free);
	assert_int_equal(gpb_alloc(c, inst, r.largest + 256, 0, &x), GPB_E_OUT_OF_MEMORY);
	uint64_t left = r.free;
	while (left) {
		uint64_t piece = left < r.largest ? left : r.largest;
		assert_true(*n < MAX_OUT);
		int rc = gpb_alloc(c, inst, piece, 0, &out[*n]);
		if (rc != 0)
			fail_msg("said %" PRIu64 " free (%" PRIu64 " in one piece), but %" PRIu64
			         " of it refused with %" PRIu64 " left: %s",
			         r.free, r.largest, piece, left, gpb_last_error());
		(*n)++;
		left -= piece;
	}
	/* And nothing more: the figure was not short either. */
	assert_int_equal(gpb_alloc(c, inst, 4 * KiB, 0, &x), GPB_E_OUT_OF_MEMORY);
	assert_int_equal(refusal_read().free, 0);
}

/* The daemon as it was: nothing held, every structure sound. */
static void check_clean(void)
{
	assert_true(th_wait_for(th_only_one_client, admin, 10000));
	struct th_selfcheck sc;
	th_selfcheck(admin, &sc);
	struct gpb_pool_stats st;
	assert_int_equal(gpb_stats(admin, 0, &st), 0);
	assert_int_equal(st.live, 0);
}

/* ---- outside a partition --------------------------------------------------------- */

/* In a child as UID_A, inside the partition: n allocations of size, all
 * granted, then exit 0 (else the exit code names the one refused). */
static void child_takes(const char *token, uint64_t size, unsigned n)
{
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		static struct gpb_allocation a[64];
		gpb_client *c;
		uint64_t inst;
		if (setgroups(0, NULL) < 0 || setgid(UID_A) < 0 || setuid(UID_A) < 0)
			th_child_exit(99);
		if (connect_with(token, &c) != 0 ||
		    gpb_register(c, &(struct gpb_register_opts){.name = "a"}, &inst) != 0)
			th_child_exit(98);
		for (unsigned i = 0; i < n; i++) {
			if (gpb_alloc(c, inst, size, 0, &a[i]) != 0) {
				fprintf(stderr, "partition's allocation %u of %" PRIu64 ": %s\n",
				        i + 1, size, gpb_last_error());
				th_child_exit(10 + (int)i);
			}
		}
		gpb_disconnect(c);
		th_child_exit(0);
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	/* Its connection gone, with what it held. */
	assert_true(th_wait_for(th_only_one_client, admin, 10000));
}

/*
 * The first case: a partition of 256 MiB for uid A; B, outside any
 * partition, allocates 16 x 33 MiB. Each takes a slab of its own (two do not
 * fit in one), so B can have 12 of them (768 MiB of slabs, what the
 * partition leaves) and is refused the 13th, saying what it can have: the
 * rest of its slabs, 31 MiB each. A then gets its whole 256 MiB, in 16 MiB
 * pieces and in one piece larger than a slab (a dedicated slab).
 */
static void test_outside_spread(void **state)
{
	(void)state;
	if (geteuid() != 0)
		skip(); /* a child as another uid */
	char token[65];
	int dev0[] = {0};
	assert_int_equal(gpb_partition_create(admin, "A", UID_A, 256 * MiB, dev0, 1, token), 0);
	uint64_t b = register_on(admin, "B");
	static struct gpb_allocation held[MAX_OUT];
	memset(held, 0, sizeof(held));
	unsigned n = alloc_n(admin, b, 33 * MiB, 16, held);
	struct refusal r = n < 16 ? refusal_read() : (struct refusal){0};

	child_takes(token, 16 * MiB, 16);
	child_takes(token, 256 * MiB, 1);

	assert_int_equal(n, 12);
	assert_int_equal(r.free, 12 * (SLAB - 33 * MiB));
	assert_int_equal(r.largest, SLAB - 33 * MiB);
	/* Still true now that A has come and gone. */
	assert_int_equal(gpb_alloc(admin, b, 33 * MiB, 0, &(struct gpb_allocation){0}),
	                 GPB_E_OUT_OF_MEMORY);
	struct refusal again = refusal_read();
	assert_int_equal(again.free, r.free);
	assert_int_equal(again.largest, r.largest);
	refusal_holds(admin, b, r, held, &n);
	/* Every slab on the device is B's but the partition's room. */
	struct gpb_pool_stats st;
	assert_int_equal(gpb_stats(admin, 0, &st), 0);
	assert_int_equal(st.reserved, 12 * SLAB);

	free_all(admin, held, n);
	assert_int_equal(gpb_unregister(admin, b), 0);
	assert_int_equal(gpb_partition_destroy(admin, "A"), 0);
	check_clean();
}

/* ---- two partitions --------------------------------------------------------------- */

struct two_jobs {
	gpb_client *a, *b;
	uint64_t ia, ib;
};

/* jobA and jobB, 512 MiB each: the whole device. Both are root's, like
 * two jobs of one user: their slabs must not mix either. */
static void two_jobs_start(struct two_jobs *j)
{
	char ta[65], tb[65];
	int dev0[] = {0};
	assert_int_equal(gpb_partition_create(admin, "jobA", 0, 512 * MiB, dev0, 1, ta), 0);
	assert_int_equal(gpb_partition_create(admin, "jobB", 0, 512 * MiB, dev0, 1, tb), 0);
	assert_int_equal(connect_with(ta, &j->a), 0);
	assert_int_equal(connect_with(tb, &j->b), 0);
	j->ia = register_on(j->a, "a");
	j->ib = register_on(j->b, "b");
}

/* jobB gets its whole 512 MiB, in 16 MiB pieces or in one (a dedicated
 * slab), and not a byte more; then both jobs end. */
static void two_jobs_finish(struct two_jobs *j, bool one_piece)
{
	static struct gpb_allocation got[64];
	memset(got, 0, sizeof(got));
	unsigned n = one_piece ? alloc_n(j->b, j->ib, 512 * MiB, 1, got)
	                       : alloc_n(j->b, j->ib, 16 * MiB, 32, got);
	if (n != (one_piece ? 1u : 32u))
		fail_msg("jobB got %u pieces of its 512 MiB: %s", n, gpb_last_error());
	assert_int_equal(gpb_alloc(j->b, j->ib, 256, 0, &(struct gpb_allocation){0}),
	                 GPB_E_OUT_OF_MEMORY);
	assert_int_equal(refusal_read().free, 0);
	free_all(j->b, got, n);
	gpb_disconnect(j->a);
	gpb_disconnect(j->b);
	assert_true(th_wait_for(th_only_one_client, admin, 10000));
	assert_int_equal(gpb_partition_destroy(admin, "jobA"), 0);
	assert_int_equal(gpb_partition_destroy(admin, "jobB"), 0);
	check_clean();
}

/* The second case: jobA allocates 495 MiB in 15 pieces of 33 MiB,
 * each more than half a slab: all granted (its slabs are the pieces' size,
 * not 64 MiB, so 495 MiB takes 510 of its 512), and jobB can still get
 * its whole 512 MiB. */
static void test_partitions_spread(void **state)
{
	(void)state;
	struct two_jobs j;
	two_jobs_start(&j);
	static struct gpb_allocation a[16];
	assert_int_equal(alloc_n(j.a, j.ia, 33 * MiB, 15, a), 15);
	two_jobs_finish(&j, false);
}

/* The same with many small allocations, 4 KiB to 1 MiB: jobA fills 495 MiB,
 * frees every other one (holes of one allocation each, between live ones)
 * and allocates again up to 495 MiB. Bigger requests than the holes take
 * new slabs, which jobA may make only within its own 512 MiB: it may be
 * refused short of it (its own fragmentation), but then with what it can
 * really have. jobB still gets its whole 512 MiB. */
static void test_partitions_small(void **state)
{
	(void)state;
	const char *env = getenv("GPB_TEST_SEED");
	uint64_t seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL) ^ (uint64_t)getpid();
	print_message("seed %" PRIu64 " (GPB_TEST_SEED=%" PRIu64 " replays it)\n", seed, seed);
	th_rnd_seed(seed);
	struct two_jobs j;
	two_jobs_start(&j);
	static struct gpb_allocation a[MAX_OUT];
	memset(a, 0, sizeof(a));
	const uint64_t target = 495 * MiB;
	uint64_t used = 0;
	unsigned n = 0;
	for (int round = 0; round < 2; round++) {
		for (;;) {
			uint64_t size = (4 * KiB + th_rnd() % (MiB - 4 * KiB + 1) + 255) & ~255ull;
			if (used + size > target)
				break;
			assert_true(n < MAX_OUT);
			int rc = gpb_alloc(j.a, j.ia, size, 0, &a[n]);
			if (rc == GPB_E_OUT_OF_MEMORY) {
				/* Only past what the answer says can be had in one. */
				struct refusal r = refusal_read();
				print_message("jobA refused %" PRIu64 " at %" PRIu64 " used: %s\n",
				              size, used, gpb_last_error());
				assert_true(size > r.largest);
				struct gpb_allocation x;
				if (r.largest) {
					assert_int_equal(gpb_alloc(j.a, j.ia, r.largest, 0, &x), 0);
					assert_int_equal(gpb_free(j.a, x.id), 0);
				}
				break;
			}
			assert_int_equal(rc, 0);
			used += a[n++].size;
		}
		if (round == 0) {
			for (unsigned i = 0; i < n; i += 2) {
				used -= a[i].size;
				assert_int_equal(gpb_free(j.a, a[i].id), 0);
				a[i].id = 0;
			}
		}
		th_settle(j.a);
	}
	two_jobs_finish(&j, false);
}

/* The same with dedicated slabs (requests larger than a slab): jobA takes 3
 * x 99 MiB and 6 x 33 MiB (495 MiB), and jobB its 512 MiB in one piece,
 * which needs one slab of all of it. */
static void test_partitions_dedicated(void **state)
{
	(void)state;
	struct two_jobs j;
	two_jobs_start(&j);
	static struct gpb_allocation a[16];
	assert_int_equal(alloc_n(j.a, j.ia, 99 * MiB, 3, a), 3);
	assert_int_equal(alloc_n(j.a, j.ia, 33 * MiB, 6, a + 3), 6);
	two_jobs_finish(&j, true);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_outside_spread, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_partitions_spread, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_partitions_small, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_partitions_dedicated, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
