/*
 * test-broker-partition.c - unit tests of partitions (broker_partition.c):
 * names, the guarantee (the partitions and what sessions outside hold never
 * exceed a device; a refusal says by how much), the token (the owner's uid
 * only), the policy inside (the partition is the device), the border
 * (attach across it is unknown), and destroy (reclaims what the sessions
 * held, orphans included, and gives the size back). A randomized sequence
 * (seed printed; GPB_TEST_SEED replays it) checks the sums after each step.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "broker.h"
#include "broker_internal.h"
#include "policy.h"

#include "session-helpers.h"

#define MEM (64 * MiB) /* each of the two simulated devices */

static struct broker_partition *make(struct broker *b, const char *name, uid_t uid, uint64_t s0,
                                     uint64_t s1)
{
	uint64_t size[BACKEND_MAX_DEVICES] = {s0, s1};
	struct broker_partition *p = NULL;
	struct broker_partition_refusal why;
	int rc = broker_partition_create(b, name, uid, size, &p, &why);
	if (rc < 0)
		fail_msg("%s: %d: device %d asked %llu available %llu used %llu partitions %llu",
		         name, rc, why.device, (unsigned long long)why.asked,
		         (unsigned long long)why.available, (unsigned long long)why.used,
		         (unsigned long long)why.partitions);
	assert_non_null(p);
	return p;
}

static void test_names(void **state)
{
	(void)state;
	static const char *const good[] = {"a", "job-42", "slurm.1234_0", "A.b-C_d"};
	static const char *const bad[] = {"", "a b", "a/b", "é", "a\nb", "job:1", "a*"};
	char longest[PROTO_MAX_NAME + 2];
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		assert_true(broker_partition_name_valid(good[i]));
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_false(broker_partition_name_valid(bad[i]));
	assert_false(broker_partition_name_valid(NULL));
	memset(longest, 'x', PROTO_MAX_NAME);
	longest[PROTO_MAX_NAME] = '\0';
	assert_true(broker_partition_name_valid(longest));
	longest[PROTO_MAX_NAME] = 'x';
	longest[PROTO_MAX_NAME + 1] = '\0';
	assert_false(broker_partition_name_valid(longest));
}

/* What can be guaranteed is: the device, less the partitions, less what
 * sessions outside hold; the refusal gives each figure. */
static void test_guarantee(void **state)
{
	(void)state;
	struct broker *b = broker_new(MEM, 0, 0);
	struct broker_partition *p = NULL;
	struct broker_partition_refusal why;
	uint64_t size[BACKEND_MAX_DEVICES] = {40 * MiB, 0};
	make(b, "first", UID_A, 40 * MiB, 0);
	assert_int_equal(b->policy.dev[0].total, MEM - 40 * MiB);
	assert_int_equal(b->policy.dev[1].total, MEM);
	/* Too much, and the figures. */
	size[0] = 30 * MiB;
	assert_int_equal(broker_partition_create(b, "second", UID_A, size, &p, &why), -ENOSPC);
	assert_int_equal(why.device, 0);
	assert_int_equal(why.asked, 30 * MiB);
	assert_int_equal(why.available, 24 * MiB);
	assert_int_equal(why.capacity, MEM);
	assert_int_equal(why.partitions, 40 * MiB);
	assert_int_equal(why.used, 0);
	/* What a session outside holds is not promised away. */
	struct session *s = open_session(b, UID_B, 1);
	struct broker_instance *inst = reg(b, s, 0);
	struct broker_grant g = alloc_ok(b, s, inst, 20 * MiB, 0);
	size[0] = 8 * MiB;
	assert_int_equal(broker_partition_create(b, "second", UID_A, size, &p, &why), -ENOSPC);
	assert_int_equal(why.available, 4 * MiB);
	assert_int_equal(why.used, 20 * MiB);
	size[0] = 4 * MiB;
	assert_int_equal(broker_partition_create(b, "second", UID_A, size, &p, &why), 0);
	/* Outside, the session now has exactly what it holds. */
	assert_int_equal(policy_device_available(&b->policy, 0), 0);
	check(b);
	/* Names are unique; sizes must name a device that exists. */
	assert_int_equal(broker_partition_create(b, "second", UID_A, size, &p, &why), -EEXIST);
	uint64_t none[BACKEND_MAX_DEVICES] = {0};
	assert_int_equal(broker_partition_create(b, "empty", UID_A, none, &p, &why), -EINVAL);
	none[5] = MiB; /* two devices only */
	assert_int_equal(broker_partition_create(b, "far", UID_A, none, &p, &why), -EINVAL);
	assert_int_equal(broker_partition_create(b, "bad name", UID_A, size, &p, &why), -EINVAL);
	assert_int_equal(b->partition_count, 2);
	assert_int_equal(broker_free(b, s, g.id), 0);
	check(b);
	broker_done(b);
}

/* The token opens the partition to its owner's uid only; a session joins
 * before it has instances, once. */
static void test_join(void **state)
{
	(void)state;
	struct broker *b = broker_new(MEM, 0, 0);
	struct broker_partition *p = make(b, "job", UID_A, 16 * MiB, 0);
	unsigned char wrong[BROKER_TOKEN_BYTES];
	memcpy(wrong, p->token, sizeof(wrong));
	wrong[31] ^= 1;
	struct session *other = open_session(b, UID_B, 1);
	struct session *s = open_session(b, UID_A, 2);
	assert_int_equal(broker_partition_join(b, other, p->token), -EPERM);
	assert_int_equal(broker_partition_join(b, s, wrong), -EPERM);
	assert_null(s->part);
	assert_int_equal(broker_partition_join(b, s, p->token), 0);
	assert_ptr_equal(s->part, p);
	assert_int_equal(p->sessions, 1);
	assert_int_equal(broker_partition_join(b, s, p->token), -EPERM); /* once */
	struct session *late = open_session(b, UID_A, 3);
	reg(b, late, 0);
	assert_int_equal(broker_partition_join(b, late, p->token), -EPERM); /* has instances */
	/* Two tokens are never alike (256 random bits). */
	struct broker_partition *q = make(b, "job2", UID_A, 0, 16 * MiB);
	assert_memory_not_equal(p->token, q->token, BROKER_TOKEN_BYTES);
	check(b);
	broker_session_close(b, s);
	assert_int_equal(p->sessions, 0);
	check(b);
	broker_done(b);
}

/* Inside, the partition is the device: a device it does not cover does not
 * exist, caps are shares of its size, and its size bounds allocations. */
static void test_policy_inside(void **state)
{
	(void)state;
	struct broker *b = broker_new(MEM, 0, 0);
	struct broker_partition *p = make(b, "job", UID_A, 0, 32 * MiB);
	struct session *s = open_session(b, UID_A, 1);
	assert_int_equal(broker_partition_join(b, s, p->token), 0);
	struct broker_instance *inst;
	assert_int_equal(broker_register(b, s, "x", 0, 0, NULL, &inst), -ENODEV);
	assert_int_equal(broker_set_mode(b, POLICY_ACTIVE), 0);
	assert_int_equal(p->policy.cfg.mode, POLICY_ACTIVE);
	struct broker_instance *i1 = reg(b, s, 1), *i2 = reg(b, s, 1);
	assert_int_equal(i1->pol.cap, 16 * MiB);
	assert_int_equal(i2->pol.cap, 16 * MiB);
	assert_int_equal(broker_set_proportion(b, i1, 0.75), 0);
	assert_int_equal(i1->pol.cap, 24 * MiB);
	assert_int_equal(i2->pol.cap, 8 * MiB);
	struct broker_grant g;
	assert_int_equal(broker_alloc(b, s, i2->id, 8 * MiB + 2 * MiB, 0, &g), -EDQUOT);
	struct broker_grant inside = alloc_ok(b, s, i1, 24 * MiB, 0);
	alloc_ok(b, s, i2, 8 * MiB, 0);
	assert_int_equal(policy_device_available(&p->policy, 1), 0);
	/* Passive: the partition's size bounds, not the device. */
	assert_int_equal(broker_set_mode(b, POLICY_PASSIVE), 0);
	assert_int_equal(broker_alloc(b, s, i2->id, 2 * MiB, 0, &g), -ENOMEM);
	/* The broker's own policy never saw any of it. */
	assert_int_equal(b->policy.dev[1].used, 0);
	assert_int_equal(b->policy.dev[1].total, MEM - 32 * MiB);
	/* Nor does the memory cross the border, even for the same user. */
	struct session *out = open_session(b, UID_A, 2);
	alloc_ok(b, out, reg(b, out, 1), MiB, 0);
	assert_int_equal(broker_attach(b, out, inside.id, &g), -ENOENT);
	assert_int_equal(broker_export(b, s, inside.id, "w", UID_A), 0);
	assert_int_equal(broker_open(b, out, UID_A, "w", &g), -ENOENT);
	check(b);
	broker_done(b);
}

/* Destroying reclaims everything the partition's sessions hold (an orphan
 * kept alive by an attachment inside it too), and its size goes back. */
static void test_destroy(void **state)
{
	(void)state;
	struct broker *b = broker_new(MEM, 0, 0);
	struct broker_partition *p = make(b, "job", UID_A, 32 * MiB, 0);
	/* A pid: with none (another PID namespace) the ended sessions' slabs
	 * would stay until the daemon stops (broker_ghost_make); with one and
	 * no exit watch they go at once. */
	struct session *s1 = open_session(b, UID_A, getpid()),
	               *s2 = open_session(b, UID_A, getpid());
	struct session *out = open_session(b, UID_A, getpid());
	assert_int_equal(broker_partition_join(b, s1, p->token), 0);
	assert_int_equal(broker_partition_join(b, s2, p->token), 0);
	struct broker_instance *i1 = reg(b, s1, 0), *i2 = reg(b, s2, 0);
	struct broker_grant a = alloc_ok(b, s1, i1, 8 * MiB, 0);
	alloc_ok(b, s2, i2, 4 * MiB, 0);
	struct broker_grant att;
	assert_int_equal(broker_attach(b, s2, a.id, &att), 0);
	assert_int_equal(broker_free(b, s1, a.id), 0); /* an orphan, held by s2 */
	assert_int_equal(b->orphan_count, 1);
	alloc_ok(b, s1, i1, 2 * MiB, 0);
	struct broker_instance *io = reg(b, out, 0);
	alloc_ok(b, out, io, 2 * MiB, 0);
	assert_int_equal(io->pol.cap, MEM - 32 * MiB);
	check(b);

	unsigned sessions;
	uint64_t reclaimed;
	broker_partition_destroy(b, p, &sessions, &reclaimed);
	assert_int_equal(sessions, 2);
	assert_int_equal(reclaimed,
	                 6 * MiB); /* s1's 2 MiB and s2's 4 MiB; the orphan is s2's hold */
	assert_int_equal(b->partition_count, 0);
	assert_int_equal(b->orphan_count, 0);
	assert_true(s1->ended && s2->ended && !out->ended);
	assert_null(s1->part);
	assert_int_equal(s1->instance_count + s2->instance_count, 0);
	assert_int_equal(s1->alloc_count + s2->alloc_count + s2->attached.count, 0);
	/* The size is the outside's again, and its cap follows. */
	assert_int_equal(b->policy.dev[0].total, MEM);
	assert_int_equal(io->pol.cap, MEM);
	/* An ended session can do nothing more. */
	struct broker_instance *inst;
	assert_int_equal(broker_register(b, s1, "x", 0, 0, NULL, &inst), -ESHUTDOWN);
	check(b);
	broker_session_close(b, s1);
	broker_session_close(b, s2);
	check(b);
	/* The name is free again. */
	make(b, "job", UID_B, MEM - 2 * MiB, 0);
	check(b);
	broker_done(b);
}

/* A wait inside a partition, short of the partition's memory, does not
 * hold back a wait outside that the device can serve (nor the reverse). */
static void test_waits_apart(void **state)
{
	(void)state;
	struct broker *b = broker_new(MEM, 0, 0);
	struct broker_partition *p = make(b, "job", UID_A, 16 * MiB, 0);
	struct session *in = open_session(b, UID_A, 1), *out = open_session(b, UID_B, 2);
	assert_int_equal(broker_partition_join(b, in, p->token), 0);
	struct broker_instance *ii = reg(b, in, 0), *io = reg(b, out, 0);
	alloc_ok(b, in, ii, 16 * MiB, 0);
	struct broker_grant o = alloc_ok(b, out, io, MEM - 16 * MiB, 0);
	/* Both full: the partition's wait comes first. */
	assert_int_equal(broker_wait_add(b, in, "w1", ii->id, 2 * MiB, 0, 60000), 0);
	assert_int_equal(broker_wait_add(b, out, "w2", io->id, 2 * MiB, 0, 60000), 0);
	broker_waits_run(b);
	assert_int_equal(b->wait_count, 2);
	/* Outside, room again: its wait is served though the partition's,
	 * before it, is still short. */
	assert_int_equal(broker_free(b, out, o.id), 0);
	assert_int_equal(out->wait_count, 0);
	assert_int_equal(in->wait_count, 1);
	assert_int_equal(io->used, 2 * MiB);
	/* An outside request that may wait does not queue behind the
	 * partition's waits. */
	assert_false(broker_waits_on(b, out, 0));
	assert_true(broker_waits_on(b, in, 0));
	check(b);
	broker_done(b);
}

/* Random creates and destroys: the partitions never sum above a device,
 * the broker's policy has exactly the rest, and every refusal was needed. */
static void test_random_sums(void **state)
{
	(void)state;
	const char *env = getenv("GPB_TEST_SEED");
	unsigned seed = env ? (unsigned)strtoul(env, NULL, 10) : (unsigned)time(NULL);
	print_message("seed %u (GPB_TEST_SEED=%u replays it)\n", seed, seed);
	srand(seed);
	struct broker *b = broker_new(MEM, 0, 0);
	struct broker_partition *live[32] = {0};
	for (int step = 0; step < 2000; step++) {
		int k = rand() % 32;
		if (live[k]) {
			unsigned n;
			uint64_t r;
			broker_partition_destroy(b, live[k], &n, &r);
			live[k] = NULL;
		} else {
			char name[16];
			uint64_t size[BACKEND_MAX_DEVICES] = {0};
			struct broker_partition_refusal why;
			snprintf(name, sizeof(name), "p%d", k);
			size[0] = (uint64_t)(rand() % 3) * (rand() % (MEM / MiB / 4)) * MiB;
			size[1] = (uint64_t)(rand() % 2) * (rand() % (MEM / MiB / 2) + 1) * MiB;
			uint64_t free0 = MEM - broker_partitions_size(b, 0);
			uint64_t free1 = MEM - broker_partitions_size(b, 1);
			int rc = broker_partition_create(b, name, UID_A, size, &live[k], &why);
			if (!size[0] && !size[1]) {
				assert_int_equal(rc, -EINVAL);
			} else if (size[0] > free0 || size[1] > free1) {
				assert_int_equal(rc, -ENOSPC);
				assert_int_equal(why.available, why.device ? free1 : free0);
				assert_true(why.asked > why.available);
				live[k] = NULL;
			} else {
				assert_int_equal(rc, 0);
			}
		}
		for (int d = 0; d < 2; d++) {
			assert_true(broker_partitions_size(b, d) <= MEM);
			assert_int_equal(b->policy.dev[d].total,
			                 MEM - broker_partitions_size(b, d));
		}
		if (step % 100 == 0)
			check(b);
	}
	check(b);
	broker_done(b);
}

/* The policy's device total moves and every cap with it. */
static void test_policy_set_total(void **state)
{
	(void)state;
	struct policy p;
	uint64_t totals[2] = {100, 200};
	struct policy_instance a, c;
	assert_int_equal(policy_init(&p, &(struct policy_config){.mode = POLICY_ACTIVE}, 2, totals),
	                 0);
	assert_int_equal(policy_add(&p, &a, 1, 0, 0, NULL, NULL), 0);
	assert_int_equal(policy_add(&p, &c, 2, 0, 0.5, NULL, NULL), 0);
	assert_int_equal(a.cap, 50);
	assert_int_equal(policy_set_total(&p, 0, 40), 0);
	assert_int_equal(p.dev[0].capacity, 40);
	assert_int_equal(a.cap, 20);
	assert_int_equal(c.cap, 20);
	assert_ptr_equal(policy_take_changed(&p), &a); /* both heard of it */
	assert_ptr_equal(policy_take_changed(&p), &c);
	/* A fraction limit is of the new total. */
	assert_int_equal(policy_set_limit(&p, 0, 0, 0.5), 0);
	assert_int_equal(p.dev[0].capacity, 20);
	assert_int_equal(policy_set_total(&p, 2, 1), -EINVAL);
	assert_int_equal(policy_set_total(&p, -1, 1), -EINVAL);
	char msg[128];
	assert_int_equal(policy_check(&p, msg, sizeof(msg)), 0);
	policy_finish(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_teardown(test_names, teardown),
	    cmocka_unit_test_teardown(test_guarantee, teardown),
	    cmocka_unit_test_teardown(test_join, teardown),
	    cmocka_unit_test_teardown(test_policy_inside, teardown),
	    cmocka_unit_test_teardown(test_destroy, teardown),
	    cmocka_unit_test_teardown(test_waits_apart, teardown),
	    cmocka_unit_test_teardown(test_random_sums, teardown),
	    cmocka_unit_test_teardown(test_policy_set_total, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
