/*
 * test-policy.c - unit tests of the VRAM policy engine (daemon/policy.c):
 * every proportion rule and its refusal, caps in both modes, the auto pool
 * and its minimum, floating-point edges, the change queue, admission and
 * accounting, limits, stream groups, chunking along the run axis, and a
 * randomized sequence checked step by step against a reference model.
 *
 * The policy allocates nothing, so every test keeps its instances in a
 * static array and calls policy_check() after each step.
 */
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "policy.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define GiB           (1ull << 30)
#define MiB           (1ull << 20)

#define MAX_INST 2048
static struct policy_instance inst[MAX_INST];

#define check(p) check_at((p), __FILE__, __LINE__)

static void check_at(const struct policy *p, const char *file, int line)
{
	char msg[256] = "";
	int rc = policy_check(p, msg, sizeof(msg));
	if (rc != 0)
		fail_msg("%s:%d: policy_check() = %d: %s", file, line, rc, msg);
}

/* A policy over ndev devices of `total` bytes each, in `mode`. */
static void policy_new(struct policy *p, int ndev, uint64_t total, enum policy_mode mode,
                       double min_share)
{
	uint64_t totals[POLICY_MAX_DEVICES];
	struct policy_config cfg = {.mode = mode, .min_auto_share = min_share};
	for (int i = 0; i < ndev; i++)
		totals[i] = total;
	assert_int_equal(policy_init(p, &cfg, ndev, totals), 0);
	memset(inst, 0, sizeof(inst));
	check(p);
}

static void add_ok(struct policy *p, int i, int device, double proportion, const char *group)
{
	unsigned warn = 99;
	assert_int_equal(policy_add(p, &inst[i], (uint64_t)i + 1, device, proportion, group, &warn),
	                 0);
	assert_true(warn == 0 || warn == POLICY_WARN_AUTO_LOW);
	check(p);
}

static unsigned drain(struct policy *p)
{
	unsigned n = 0;
	while (policy_take_changed(p))
		n++;
	return n;
}

static uint64_t caps_sum(const struct policy *p, int device)
{
	uint64_t sum = 0;
	const struct list *pos;
	for (pos = p->instances.next; pos != &p->instances; pos = pos->next) {
		const struct policy_instance *pi =
		    list_entry(pos, const struct policy_instance, link);
		if (pi->device == device)
			sum += pi->cap;
	}
	return sum;
}

/* ---- set-up -------------------------------------------------------------- */

static void test_init(void **state)
{
	struct policy p;
	uint64_t totals[POLICY_MAX_DEVICES + 1] = {GiB};
	struct policy_config bad_mode = {.mode = (enum policy_mode)7};
	struct policy_config bad_share = {.min_auto_share = 1.5};
	struct policy_config nan_share = {.min_auto_share = NAN};
	struct policy_config neg_share = {.min_auto_share = -0.1};
	(void)state;
	assert_int_equal(policy_init(&p, NULL, 0, totals), -EINVAL);
	assert_int_equal(policy_init(&p, NULL, POLICY_MAX_DEVICES + 1, totals), -EINVAL);
	assert_int_equal(policy_init(&p, NULL, 1, NULL), -EINVAL);
	assert_int_equal(policy_init(&p, &bad_mode, 1, totals), -EINVAL);
	assert_int_equal(policy_init(&p, &bad_share, 1, totals), -EINVAL);
	assert_int_equal(policy_init(&p, &nan_share, 1, totals), -EINVAL);
	assert_int_equal(policy_init(&p, &neg_share, 1, totals), -EINVAL);
	assert_int_equal(policy_init(&p, NULL, POLICY_MAX_DEVICES, totals), 0);
	assert_int_equal(p.cfg.mode, POLICY_PASSIVE);
	assert_true(p.cfg.min_auto_share == POLICY_MIN_AUTO_SHARE);
	assert_int_equal(p.dev[0].capacity, GiB);
	assert_int_equal(p.dev[1].capacity, 0);
	check(&p);
	policy_finish(&p);
}

static void test_mode_names(void **state)
{
	enum policy_mode m = POLICY_PASSIVE;
	(void)state;
	assert_string_equal(policy_mode_name(POLICY_ACTIVE), "active");
	assert_string_equal(policy_mode_name(POLICY_PASSIVE), "passive");
	assert_int_equal(policy_mode_parse("active", &m), 0);
	assert_int_equal(m, POLICY_ACTIVE);
	assert_int_equal(policy_mode_parse("passive", &m), 0);
	assert_int_equal(m, POLICY_PASSIVE);
	static const char *const bad[] = {"", "Active", "ACTIVE", "activ", "active ", "none"};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
		assert_int_equal(policy_mode_parse(bad[i], &m), -EINVAL);
	assert_int_equal(policy_mode_parse(NULL, &m), -EINVAL);
}

/* ---- proportions and caps -------------------------------------------------- */

static void test_single_auto(void **state)
{
	struct policy p;
	(void)state;
	policy_new(&p, 1, GiB, POLICY_ACTIVE, 0);
	add_ok(&p, 0, 0, 0, NULL);
	assert_int_equal(inst[0].cap, GiB);
	assert_true(inst[0].share == 1.0);
	assert_string_equal(inst[0].group, "default");
	assert_int_equal(p.dev[0].n_auto, 1);
	/* The new instance is the caller's to report: nothing queued. */
	assert_null(policy_take_changed(&p));
	policy_finish(&p);
}

static void test_auto_split(void **state)
{
	struct policy p;
	const uint64_t total = 3 * GiB + 7; /* not divisible by 3 */
	(void)state;
	policy_new(&p, 1, total, POLICY_ACTIVE, 0);
	for (int i = 0; i < 3; i++)
		add_ok(&p, i, 0, 0, NULL);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(inst[i].cap, total / 3);
		assert_true(fabs(inst[i].share - 1.0 / 3) < 1e-15);
	}
	assert_true(caps_sum(&p, 0) <= total);
	/* Adding the second queued the first; the third queued both. */
	assert_int_equal(drain(&p), 2);
	policy_remove(&p, &inst[1]);
	check(&p);
	assert_int_equal(inst[0].cap, total / 2);
	assert_int_equal(inst[2].cap, total / 2);
	assert_ptr_equal(policy_take_changed(&p), &inst[0]);
	assert_ptr_equal(policy_take_changed(&p), &inst[2]);
	assert_null(policy_take_changed(&p));
	policy_finish(&p);
}

static void test_manual_and_auto(void **state)
{
	struct policy p;
	unsigned warn;
	(void)state;
	policy_new(&p, 1, 1000 * MiB, POLICY_ACTIVE, 0);
	add_ok(&p, 0, 0, 0.25, "g");
	assert_int_equal(inst[0].cap, 250 * MiB);
	add_ok(&p, 1, 0, 0, NULL);
	add_ok(&p, 2, 0, 0, NULL);
	assert_int_equal(inst[1].cap, 375 * MiB);
	assert_int_equal(inst[2].cap, 375 * MiB);
	assert_true(inst[1].share == 0.375);
	assert_true(p.dev[0].manual == 0.25);
	assert_int_equal(p.dev[0].n_manual, 1);
	assert_int_equal(p.dev[0].n_auto, 2);
	drain(&p);
	/* A second manual instance takes from the auto pool only. */
	assert_int_equal(policy_add(&p, &inst[3], 4, 0, 0.5, NULL, &warn), 0);
	assert_int_equal(warn, 0);
	check(&p);
	assert_int_equal(inst[0].cap, 250 * MiB);
	assert_int_equal(inst[1].cap, 125 * MiB);
	assert_int_equal(inst[3].cap, 500 * MiB);
	assert_ptr_equal(policy_take_changed(&p), &inst[1]);
	assert_ptr_equal(policy_take_changed(&p), &inst[2]);
	assert_null(policy_take_changed(&p));
	policy_finish(&p);
}

static void test_refusals(void **state)
{
	struct policy p;
	char long_group[POLICY_MAX_NAME + 2];
	static const double bad[] = {0.0 - 1e-300, -0.5,     1.0000001, 1 + DBL_EPSILON, 2,
	                             NAN,          INFINITY, -INFINITY};
	(void)state;
	memset(long_group, 'g', sizeof(long_group) - 1);
	long_group[sizeof(long_group) - 1] = '\0';
	policy_new(&p, 2, GiB, POLICY_ACTIVE, 0);
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		assert_int_equal(policy_add(&p, &inst[0], 1, 0, bad[i], NULL, NULL), -EINVAL);
		check(&p);
	}
	assert_int_equal(policy_add(&p, &inst[0], 1, 2, 0.5, NULL, NULL), -EINVAL);
	assert_int_equal(policy_add(&p, &inst[0], 1, -1, 0.5, NULL, NULL), -EINVAL);
	assert_int_equal(policy_add(&p, &inst[0], 1, 0, 0.5, "", NULL), -EINVAL);
	assert_int_equal(policy_add(&p, &inst[0], 1, 0, 0.5, long_group, NULL), -EINVAL);
	long_group[POLICY_MAX_NAME] = '\0'; /* exactly 64 bytes is fine */
	add_ok(&p, 0, 0, 0.5, long_group);
	assert_int_equal(p.count, 1);
	/* set_proportion refuses the same values and leaves the state. */
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
		assert_int_equal(policy_set_proportion(&p, &inst[0], bad[i], NULL), -EINVAL);
	assert_int_equal(policy_set_proportion(&p, &inst[0], 0, NULL), -EINVAL);
	assert_true(inst[0].proportion == 0.5);
	assert_int_equal(policy_set_group(&p, &inst[0], ""), -EINVAL);
	assert_int_equal(policy_set_group(&p, &inst[0], NULL), -EINVAL);
	memset(long_group, 'h', sizeof(long_group) - 1);
	long_group[sizeof(long_group) - 1] = '\0';
	assert_int_equal(policy_set_group(&p, &inst[0], long_group), -EINVAL);
	assert_int_equal(inst[0].group[0], 'g');
	check(&p);
	policy_finish(&p);
}

static void test_manual_sum(void **state)
{
	struct policy p;
	(void)state;
	policy_new(&p, 2, GiB, POLICY_ACTIVE, 0);
	add_ok(&p, 0, 0, 0.6, NULL);
	assert_int_equal(policy_add(&p, &inst[1], 2, 0, 0.5, NULL, NULL), -ENOSPC);
	check(&p);
	/* Other devices have their own pools. */
	add_ok(&p, 1, 1, 0.5, NULL);
	add_ok(&p, 2, 0, 0.4, NULL);
	assert_int_equal(policy_add(&p, &inst[3], 4, 0, 1e-8, NULL, NULL), -ENOSPC);
	assert_int_equal(p.dev[0].n_manual, 2);
	/* Changing a proportion counts everyone but itself. */
	assert_int_equal(policy_set_proportion(&p, &inst[0], 0.6000001, NULL), -ENOSPC);
	assert_true(inst[0].proportion == 0.6);
	assert_int_equal(policy_set_proportion(&p, &inst[0], 0.5, NULL), 0);
	check(&p);
	assert_int_equal(policy_set_proportion(&p, &inst[2], 0.5, NULL), 0);
	check(&p);
	assert_true(p.dev[0].manual == 1.0);
	assert_int_equal(caps_sum(&p, 0), GiB);
	/* Moving an auto instance to manual must fit too. */
	policy_remove(&p, &inst[2]);
	add_ok(&p, 3, 0, 0, NULL);
	assert_int_equal(policy_set_proportion(&p, &inst[3], 0.51, NULL), -ENOSPC);
	assert_true(inst[3].proportion == 0);
	assert_int_equal(policy_set_proportion(&p, &inst[3], 0.5, NULL), 0);
	check(&p);
	assert_int_equal(p.dev[0].n_auto, 0);
	policy_finish(&p);
}

/* Proportions that sum to 1 within the tolerance are accepted and their
 * caps never sum above the capacity, whatever the rounding. */
static void test_float_edges(void **state)
{
	struct policy p;
	static const uint64_t totals[] = {
	    1, 255, 256, 1000, GiB + 1, (1ull << 53) + 1, UINT64_MAX / 3, UINT64_MAX};
	(void)state;
	for (size_t t = 0; t < ARRAY_SIZE(totals); t++) {
		/* 1 + 1e-12: over 1, inside the tolerance. */
		policy_new(&p, 1, totals[t], POLICY_ACTIVE, 0);
		add_ok(&p, 0, 0, 0.5, NULL);
		add_ok(&p, 1, 0, 0.5 + 1e-12, NULL);
		assert_true(p.dev[0].manual > 1.0);
		assert_true(caps_sum(&p, 0) <= totals[t]);
		assert_int_equal(policy_add(&p, &inst[2], 3, 0, 0, NULL, NULL), -EUSERS);
		policy_finish(&p);
		/* 1 - 1e-12 leaves an auto pool far below any minimum. */
		policy_new(&p, 1, totals[t], POLICY_ACTIVE, 0);
		add_ok(&p, 0, 0, 0.5, NULL);
		add_ok(&p, 1, 0, 0.5 - 1e-12, NULL);
		assert_int_equal(policy_add(&p, &inst[2], 3, 0, 0, NULL, NULL), -EUSERS);
		assert_true(caps_sum(&p, 0) <= totals[t]);
		policy_finish(&p);
		/* Ten times 0.1 is 0.9999999999999999 in doubles; a further
		 * 1e-10 is within the tolerance, 2e-9 is not. */
		policy_new(&p, 1, totals[t], POLICY_ACTIVE, 0);
		for (int i = 0; i < 10; i++)
			add_ok(&p, i, 0, 0.1, NULL);
		assert_true(caps_sum(&p, 0) <= totals[t]);
		assert_int_equal(policy_add(&p, &inst[10], 11, 0, 2e-9, NULL, NULL), -ENOSPC);
		add_ok(&p, 10, 0, 1e-10, NULL);
		assert_true(caps_sum(&p, 0) <= totals[t]);
		policy_finish(&p);
		/* Thirds. */
		policy_new(&p, 1, totals[t], POLICY_ACTIVE, 0);
		for (int i = 0; i < 3; i++)
			add_ok(&p, i, 0, 1.0 / 3, NULL);
		assert_true(caps_sum(&p, 0) <= totals[t]);
		/* 1/3 is not exact: the caps lose its representation error. */
		if (totals[t] - caps_sum(&p, 0) > 3 + totals[t] / (1ull << 50))
			fail_msg("thirds of %" PRIu64 ": caps sum to %" PRIu64, totals[t],
			         caps_sum(&p, 0));
		policy_finish(&p);
		/* A whole device for one instance. */
		policy_new(&p, 1, totals[t], POLICY_ACTIVE, 0);
		add_ok(&p, 0, 0, 1.0, NULL);
		assert_int_equal(inst[0].cap, totals[t]);
		policy_finish(&p);
	}
	/* The smallest positive proportion is valid; its cap rounds to 0. */
	policy_new(&p, 1, GiB, POLICY_ACTIVE, 0);
	add_ok(&p, 0, 0, DBL_TRUE_MIN, NULL);
	assert_int_equal(inst[0].cap, 0);
	assert_int_equal(policy_admit(&p, &inst[0], 1, NULL), -EDQUOT);
	policy_finish(&p);
}

/* Proportions carved so that they sum to 1 give or take the last bit, on
 * random capacities: the caps (trimmed where rounding overshoots) never sum
 * above the capacity, and lose at most a few bytes of it. */
static void test_caps_never_exceed(void **state)
{
	(void)state;
	srand(77);
	for (int round = 0; round < 20000; round++) {
		struct policy p;
		uint64_t total = (uint64_t)rand() * (uint64_t)rand() + (uint64_t)(rand() % 1000);
		int n = 2 + rand() % 5;
		double left = 1.0;
		policy_new(&p, 1, total, POLICY_ACTIVE, 0);
		for (int i = 0; i < n - 1; i++) {
			double q = left * (rand() % 1000 + 1) / 1001.0;
			assert_int_equal(
			    policy_add(&p, &inst[i], (uint64_t)i + 1, 0, q, NULL, NULL), 0);
			left -= q;
		}
		if (left > 0)
			assert_int_equal(
			    policy_add(&p, &inst[n - 1], (uint64_t)n, 0, left, NULL, NULL), 0);
		check(&p);
		assert_true(caps_sum(&p, 0) <= total);
		assert_true(total - caps_sum(&p, 0) <= (uint64_t)n + total / (1ull << 49));
		policy_finish(&p);
	}
}

static void test_min_auto(void **state)
{
	struct policy p;
	(void)state;
	/* A minimum of 10% per auto instance. */
	policy_new(&p, 1, GiB, POLICY_ACTIVE, 0.1);
	add_ok(&p, 0, 0, 0, NULL);
	add_ok(&p, 1, 0, 0, NULL);
	/* 0.85 would leave 0.15 for two: 0.075 each. */
	assert_int_equal(policy_add(&p, &inst[2], 3, 0, 0.85, NULL, NULL), -EUSERS);
	/* 0.8 leaves exactly the minimum. */
	add_ok(&p, 2, 0, 0.8, NULL);
	assert_true(fabs(inst[0].share - 0.1) < 1e-12);
	/* No third auto instance fits, and no more manual either. */
	assert_int_equal(policy_add(&p, &inst[3], 4, 0, 0, NULL, NULL), -EUSERS);
	assert_int_equal(policy_add(&p, &inst[3], 4, 0, 0.01, NULL, NULL), -EUSERS);
	assert_int_equal(policy_set_proportion(&p, &inst[2], 0.81, NULL), -EUSERS);
	/* An auto instance moving to manual takes its share out of the pool
	 * but also leaves it: 0.1 for the one remaining auto is fine. */
	assert_int_equal(policy_set_proportion(&p, &inst[0], 0.1, NULL), 0);
	check(&p);
	assert_true(fabs(inst[1].share - 0.1) < 1e-12);
	/* Back to auto: 0.2 for two. */
	assert_int_equal(policy_set_auto(&p, &inst[0], NULL), 0);
	check(&p);
	/* Without auto instances the manual pool may take everything. */
	policy_remove(&p, &inst[0]);
	policy_remove(&p, &inst[1]);
	assert_int_equal(policy_set_proportion(&p, &inst[2], 1.0, NULL), 0);
	check(&p);
	/* ... and then no auto instance fits at all. */
	assert_int_equal(policy_add(&p, &inst[0], 1, 0, 0, NULL, NULL), -EUSERS);
	/* set_auto of the last manual instance is fine: the pool is whole. */
	assert_int_equal(policy_set_auto(&p, &inst[2], NULL), 0);
	assert_int_equal(inst[2].cap, GiB);
	check(&p);
	policy_finish(&p);
}

static void test_set_auto_refused(void **state)
{
	struct policy p;
	(void)state;
	policy_new(&p, 1, GiB, POLICY_ACTIVE, 0.1);
	add_ok(&p, 0, 0, 0.85, NULL);
	add_ok(&p, 1, 0, 0.05, NULL);
	add_ok(&p, 2, 0, 0, NULL); /* 0.1 */
	/* Moving the 0.05 instance to auto: 0.15 for two is under 0.1 each. */
	assert_int_equal(policy_set_auto(&p, &inst[1], NULL), -EUSERS);
	assert_true(inst[1].proportion == 0.05);
	check(&p);
	/* Already auto: a no-op. */
	drain(&p);
	assert_int_equal(policy_set_auto(&p, &inst[2], NULL), 0);
	assert_null(policy_take_changed(&p));
	policy_finish(&p);
}

/* Many tiny auto instances: a thousand at the default minimum of 0.1%. */
static void test_many_auto(void **state)
{
	struct policy p;
	const uint64_t total = (16ull << 30) + 12345;
	(void)state;
	policy_new(&p, 1, total, POLICY_ACTIVE, 0);
	for (int i = 0; i < 1000; i++) {
		assert_int_equal(policy_add(&p, &inst[i], (uint64_t)i + 1, 0, 0, NULL, NULL), 0);
		drain(&p);
	}
	check(&p);
	assert_int_equal(policy_add(&p, &inst[1000], 1001, 0, 0, NULL, NULL), -EUSERS);
	assert_int_equal(policy_add(&p, &inst[1000], 1001, 0, 1e-6, NULL, NULL), -EUSERS);
	for (int i = 0; i < 1000; i++)
		assert_int_equal(inst[i].cap, total / 1000);
	assert_true(caps_sum(&p, 0) <= total);
	assert_true(total - caps_sum(&p, 0) < 1000);
	/* One leaving gives each of the others a little more. */
	policy_remove(&p, &inst[500]);
	check(&p);
	assert_int_equal(drain(&p), 999);
	assert_int_equal(inst[0].cap, total / 999);
	/* A smaller minimum lets more in. */
	policy_finish(&p);
	policy_new(&p, 1, 1000, POLICY_ACTIVE, 1e-4);
	for (int i = 0; i < 2000; i++)
		assert_int_equal(policy_add(&p, &inst[i], (uint64_t)i + 1, 0, 0, NULL, NULL), 0);
	check(&p);
	/* 1000 bytes among 2000 instances: every cap rounds to zero. */
	assert_int_equal(inst[7].cap, 0);
	assert_int_equal(policy_admit(&p, &inst[7], 1, NULL), -EDQUOT);
	policy_finish(&p);
}

static void test_auto_warning(void **state)
{
	struct policy p;
	unsigned warn = 0;
	(void)state;
	policy_new(&p, 1, GiB, POLICY_ACTIVE, 0.01);
	assert_int_equal(policy_add(&p, &inst[0], 1, 0, 0.5, NULL, &warn), 0);
	assert_int_equal(warn, 0);
	assert_int_equal(policy_add(&p, &inst[1], 2, 0, 0.45, NULL, &warn), 0);
	assert_int_equal(warn, 0); /* exactly 5% left is not under 5% */
	assert_int_equal(policy_add(&p, &inst[2], 3, 0, 0.01, NULL, &warn), 0);
	assert_int_equal(warn, POLICY_WARN_AUTO_LOW);
	assert_int_equal(policy_add(&p, &inst[3], 4, 0, 0, NULL, &warn), 0);
	assert_int_equal(warn, POLICY_WARN_AUTO_LOW);
	assert_int_equal(policy_set_proportion(&p, &inst[1], 0.4, &warn), 0);
	assert_int_equal(warn, 0);
	assert_int_equal(policy_set_proportion(&p, &inst[0], 0.56, &warn), 0);
	assert_int_equal(warn, POLICY_WARN_AUTO_LOW);
	assert_int_equal(policy_set_auto(&p, &inst[2], &warn), 0);
	assert_int_equal(warn, POLICY_WARN_AUTO_LOW);
	check(&p);
	policy_finish(&p);
}

/* ---- the change queue -------------------------------------------------------- */

static void test_change_queue(void **state)
{
	struct policy p;
	(void)state;
	policy_new(&p, 2, GiB, POLICY_ACTIVE, 0);
	add_ok(&p, 0, 0, 0, NULL);
	add_ok(&p, 1, 0, 0, NULL);
	add_ok(&p, 2, 1, 0, NULL);
	/* Only instance 0 changed (the other device is separate). */
	assert_ptr_equal(policy_take_changed(&p), &inst[0]);
	assert_null(policy_take_changed(&p));
	/* Two changes before a drain queue an instance once. */
	add_ok(&p, 3, 0, 0, NULL);
	add_ok(&p, 4, 0, 0.5, NULL);
	assert_int_equal(drain(&p), 3);
	/* A change to an instance's own proportion is reported to the caller,
	 * not queued; the others are. */
	assert_int_equal(policy_set_proportion(&p, &inst[4], 0.25, NULL), 0);
	assert_int_equal(drain(&p), 3);
	assert_int_equal(policy_set_proportion(&p, &inst[4], 0.25, NULL), 0);
	assert_int_equal(drain(&p), 0);
	/* A removed instance leaves the queue with it. */
	add_ok(&p, 5, 0, 0, NULL);
	policy_remove(&p, &inst[0]);
	check(&p);
	while (true) {
		struct policy_instance *pi = policy_take_changed(&p);
		if (!pi)
			break;
		assert_ptr_not_equal(pi, &inst[0]);
	}
	/* Group changes move no cap. */
	assert_int_equal(policy_set_group(&p, &inst[1], "x"), 0);
	assert_null(policy_take_changed(&p));
	check(&p);
	/* policy_finish empties the queue. */
	add_ok(&p, 6, 0, 0, NULL);
	policy_finish(&p);
	assert_null(policy_take_changed(&p));
}

/* ---- modes, admission and accounting -------------------------------------------- */

static void test_modes(void **state)
{
	struct policy p;
	(void)state;
	policy_new(&p, 1, GiB, POLICY_PASSIVE, 0);
	add_ok(&p, 0, 0, 0.25, NULL);
	add_ok(&p, 1, 0, 0, NULL);
	/* Passive: caps are the capacity, proportions are still reported. */
	assert_int_equal(inst[0].cap, GiB);
	assert_int_equal(inst[1].cap, GiB);
	assert_true(inst[1].share == 0.75);
	assert_null(policy_take_changed(&p));
	assert_int_equal(policy_admit(&p, &inst[0], GiB, NULL), 0);
	assert_int_equal(policy_admit(&p, &inst[0], GiB + 1, NULL), -ENOMEM);
	/* Active at once: both caps change, both are queued. */
	assert_int_equal(policy_set_mode(&p, POLICY_ACTIVE), 0);
	check(&p);
	assert_int_equal(inst[0].cap, GiB / 4);
	assert_int_equal(inst[1].cap, GiB / 4 * 3);
	assert_int_equal(drain(&p), 2);
	assert_int_equal(policy_admit(&p, &inst[0], GiB / 4 + 1, NULL), -EDQUOT);
	assert_int_equal(policy_set_mode(&p, POLICY_ACTIVE), 0);
	assert_int_equal(drain(&p), 0);
	assert_int_equal(policy_set_mode(&p, POLICY_PASSIVE), 0);
	assert_int_equal(drain(&p), 2);
	assert_int_equal(policy_set_mode(&p, (enum policy_mode)3), -EINVAL);
	assert_int_equal(p.cfg.mode, POLICY_PASSIVE);
	check(&p);
	policy_finish(&p);
}

static void test_admit(void **state)
{
	struct policy p;
	struct policy_verdict v;
	(void)state;
	policy_new(&p, 1, 1000, POLICY_ACTIVE, 0);
	add_ok(&p, 0, 0, 0.3, NULL);
	add_ok(&p, 1, 0, 0, NULL);
	assert_int_equal(inst[0].cap, 300);
	assert_int_equal(inst[1].cap, 700);
	assert_int_equal(policy_admit(&p, &inst[0], 300, &v), 0);
	assert_int_equal(policy_admit(&p, &inst[0], 301, &v), -EDQUOT);
	assert_int_equal(v.cap, 300);
	assert_int_equal(v.used, 0);
	assert_int_equal(v.requested, 301);
	assert_int_equal(policy_admit(&p, &inst[0], UINT64_MAX, &v), -EDQUOT);
	policy_charge(&p, &inst[0], 200);
	check(&p);
	assert_int_equal(policy_admit(&p, &inst[0], 101, &v), -EDQUOT);
	assert_int_equal(v.used, 200);
	assert_int_equal(policy_admit(&p, &inst[0], 100, NULL), 0);
	assert_int_equal(policy_headroom(&p, &inst[0]), 100);
	assert_int_equal(policy_device_available(&p, 0), 800);
	/* A new instance halves the auto share; instance 1 is now over its
	 * cap once it holds 600: nothing is revoked, nothing more admitted. */
	policy_charge(&p, &inst[1], 600);
	add_ok(&p, 2, 0, 0, NULL);
	assert_int_equal(inst[1].cap, 350);
	assert_int_equal(policy_admit(&p, &inst[1], 1, &v), -EDQUOT);
	assert_int_equal(v.used, 600);
	assert_int_equal(policy_headroom(&p, &inst[1]), 0);
	/* The device has 200 left; instance 2 may have 350 but gets
	 * -ENOMEM past the device. */
	assert_int_equal(policy_admit(&p, &inst[2], 200, NULL), 0);
	assert_int_equal(policy_admit(&p, &inst[2], 201, &v), -ENOMEM);
	assert_int_equal(v.available, 200);
	assert_int_equal(policy_headroom(&p, &inst[2]), 200);
	policy_uncharge(&p, &inst[1], 600);
	check(&p);
	assert_int_equal(policy_admit(&p, &inst[1], 350, NULL), 0);
	/* Uncharging more than held clamps rather than wraps. */
	policy_uncharge(&p, &inst[1], 5);
	assert_int_equal(inst[1].used, 0);
	check(&p);
	/* Removing an instance that still holds memory drops its charge. */
	policy_remove(&p, &inst[0]);
	check(&p);
	assert_int_equal(p.dev[0].used, 0);
	policy_finish(&p);
}

static void test_limits(void **state)
{
	struct policy p;
	(void)state;
	policy_new(&p, 2, 1000, POLICY_ACTIVE, 0);
	add_ok(&p, 0, 0, 0.5, NULL);
	add_ok(&p, 1, 1, 0, NULL);
	assert_int_equal(policy_set_limit(&p, 0, 400, 0), 0);
	check(&p);
	assert_int_equal(p.dev[0].capacity, 400);
	assert_int_equal(p.dev[1].capacity, 1000);
	assert_int_equal(inst[0].cap, 200);
	assert_ptr_equal(policy_take_changed(&p), &inst[0]);
	assert_null(policy_take_changed(&p));
	/* A limit above the device changes nothing. */
	assert_int_equal(policy_set_limit(&p, 0, 5000, 0), 0);
	assert_int_equal(p.dev[0].capacity, 1000);
	/* Fractions, on every device. */
	assert_int_equal(policy_set_limit(&p, -1, 0, 0.25), 0);
	check(&p);
	assert_int_equal(p.dev[0].capacity, 250);
	assert_int_equal(p.dev[1].capacity, 250);
	assert_int_equal(inst[0].cap, 125);
	assert_int_equal(inst[1].cap, 250);
	assert_int_equal(policy_admit(&p, &inst[1], 251, NULL), -EDQUOT);
	/* Passive mode: the limit still bounds everything. */
	assert_int_equal(policy_set_mode(&p, POLICY_PASSIVE), 0);
	assert_int_equal(inst[0].cap, 250);
	assert_int_equal(policy_admit(&p, &inst[0], 251, NULL), -ENOMEM);
	assert_int_equal(policy_set_mode(&p, POLICY_ACTIVE), 0);
	/* Refusals leave the limit. */
	assert_int_equal(policy_set_limit(&p, 0, 100, 0.5), -EINVAL);
	assert_int_equal(policy_set_limit(&p, 0, 0, 1.5), -EINVAL);
	assert_int_equal(policy_set_limit(&p, 0, 0, -0.5), -EINVAL);
	assert_int_equal(policy_set_limit(&p, 0, 0, NAN), -EINVAL);
	assert_int_equal(policy_set_limit(&p, 2, 100, 0), -EINVAL);
	assert_int_equal(p.dev[0].capacity, 250);
	/* Lowered below what is held: nothing more is admitted. */
	policy_charge(&p, &inst[1], 200);
	assert_int_equal(policy_set_limit(&p, 1, 100, 0), 0);
	check(&p);
	assert_int_equal(policy_device_available(&p, 1), 0);
	assert_int_equal(policy_admit(&p, &inst[1], 1, NULL), -EDQUOT);
	assert_int_equal(policy_set_mode(&p, POLICY_PASSIVE), 0);
	assert_int_equal(policy_admit(&p, &inst[1], 1, NULL), -ENOMEM);
	/* Both zero: no limit. */
	assert_int_equal(policy_set_limit(&p, -1, 0, 0), 0);
	check(&p);
	assert_int_equal(p.dev[0].capacity, 1000);
	assert_int_equal(policy_admit(&p, &inst[1], 800, NULL), 0);
	policy_finish(&p);
}

/* ---- stream groups -------------------------------------------------------------- */

static void test_groups(void **state)
{
	struct policy p;
	struct policy_group_info gi;
	(void)state;
	policy_new(&p, 2, 1000, POLICY_ACTIVE, 0);
	add_ok(&p, 0, 0, 0.2, "solver");
	add_ok(&p, 1, 0, 0.3, NULL);
	add_ok(&p, 2, 1, 0.5, "solver");
	add_ok(&p, 3, 0, 0, "lonely");
	assert_true(policy_is_grouped(&p, &inst[0]));
	assert_true(policy_is_grouped(&p, &inst[2]));
	assert_false(policy_is_grouped(&p, &inst[1]));
	assert_false(policy_is_grouped(&p, &inst[3]));
	/* "default" never counts as a group, however many share it. */
	add_ok(&p, 4, 0, 0, NULL);
	assert_false(policy_is_grouped(&p, &inst[1]));

	assert_int_equal(policy_group_info(&p, "solver", &gi), 0);
	assert_int_equal(gi.members, 2);
	assert_int_equal(gi.available, 200 + 500);
	assert_int_equal(gi.used, 0);
	assert_int_equal(gi.warn, 0);
	assert_int_equal(policy_group_info(&p, "nobody", &gi), -ENOENT);
	assert_int_equal(policy_group_info(&p, NULL, &gi), -ENOENT);

	policy_charge(&p, &inst[0], 195);
	policy_charge(&p, &inst[2], 480);
	assert_int_equal(policy_group_info(&p, "solver", &gi), 0);
	assert_int_equal(gi.used, 675);
	assert_int_equal(gi.available, 25);
	assert_int_equal(gi.warn, POLICY_WARN_GROUP_FULL);
	/* Passive: the devices' available capacity. */
	assert_int_equal(policy_set_mode(&p, POLICY_PASSIVE), 0);
	assert_int_equal(policy_group_info(&p, "solver", &gi), 0);
	assert_int_equal(gi.available, (1000 - 195) + (1000 - 480));
	assert_int_equal(gi.warn, 0);
	/* Active again: headroom is bounded by the device. */
	assert_int_equal(policy_set_mode(&p, POLICY_ACTIVE), 0);
	policy_uncharge(&p, &inst[0], 195);
	policy_charge(&p, &inst[1], 300);
	policy_charge(&p, &inst[3], 450); /* auto cap 250: over by 200 */
	assert_int_equal(policy_device_available(&p, 0), 250);
	assert_int_equal(policy_group_info(&p, "solver", &gi), 0);
	assert_int_equal(gi.available, 200 + 20);
	/* Moving members. */
	assert_int_equal(policy_set_group(&p, &inst[2], "other"), 0);
	assert_false(policy_is_grouped(&p, &inst[0]));
	assert_int_equal(policy_set_group(&p, &inst[1], "solver"), 0);
	assert_true(policy_is_grouped(&p, &inst[0]));
	assert_int_equal(policy_group_info(&p, "solver", &gi), 0);
	assert_int_equal(gi.members, 2);
	/* Instances 0 and 1: headroom 200 + 0, but the device has 250 - 0. */
	assert_int_equal(gi.available, 200);
	assert_int_equal(gi.used, 300);
	check(&p);
	policy_finish(&p);
}

/* ---- chunking -------------------------------------------------------------------- */

static struct policy_array arr2(uint64_t runs, uint64_t width, uint64_t elem, bool unchunkable)
{
	struct policy_array a = {.ndim = 2, .elem_size = elem, .axis = 0};
	a.shape[0] = runs;
	a.shape[1] = width;
	a.unchunkable = unchunkable;
	return a;
}

static void test_chunk_fits(void **state)
{
	struct policy_chunking c;
	struct policy_array a[2] = {arr2(1000, 10, 8, false), arr2(1000, 1, 4, false)};
	(void)state;
	assert_int_equal(policy_chunk_parameters(a, 2, 0, 1 << 20, 256, &c), 0);
	assert_int_equal(c.axis_length, 1000);
	assert_int_equal(c.chunks, 1);
	assert_int_equal(c.chunk_length, 1000);
	/* Each array rounded up to the granule on its own. */
	assert_int_equal(c.request_bytes, 80128 + 4096);
	assert_int_equal(c.chunk_bytes, c.request_bytes);
	assert_int_equal(c.warn, 0);
	/* Exactly available still fits; a byte less does not. */
	assert_int_equal(policy_chunk_parameters(a, 2, 0, 84224, 256, &c), 0);
	assert_int_equal(c.chunks, 1);
	assert_int_equal(policy_chunk_parameters(a, 2, 0, 84223, 256, &c), 0);
	assert_int_equal(c.chunks, 2);
	assert_int_equal(c.chunk_length, 500);
}

static void test_chunk_split(void **state)
{
	struct policy_chunking c;
	uint64_t shape[POLICY_MAX_DIMS];
	/* 1000 runs x 1000 doubles = 8 MB; a 1 MB constant table; 2.5 MB free. */
	struct policy_array a[2] = {arr2(1000, 1000, 8, false), arr2(1000, 125, 8, true)};
	(void)state;
	assert_int_equal(policy_chunk_parameters(a, 2, 0, 2500000, 1, &c), 0);
	assert_int_equal(c.request_bytes, 9000000);
	/* 1.5 MB for the chunkable part: 187 runs per chunk at most. */
	assert_int_equal(c.chunks, 6);
	assert_int_equal(c.chunk_length, 167);
	assert_int_equal(c.chunk_bytes, 167 * 8000 + 1000000);
	assert_true(c.chunk_bytes <= 2500000);
	policy_chunked_shape(&a[0], c.chunk_length, shape);
	assert_int_equal(shape[0], 167);
	assert_int_equal(shape[1], 1000);
	assert_int_equal(shape[2], 0);
	policy_chunked_shape(&a[1], c.chunk_length, shape);
	assert_int_equal(shape[0], 1000);
	assert_int_equal(shape[1], 125);
	/* A shorter run axis than the chunk is not stretched. */
	struct policy_array short_a = arr2(50, 3, 4, false);
	policy_chunked_shape(&short_a, 167, shape);
	assert_int_equal(shape[0], 50);
	/* An explicit axis length, and a run axis that is not the first. */
	struct policy_array b = {.ndim = 3, .elem_size = 4, .axis = 2, .shape = {3, 4, 100}};
	/* 48 bytes a run: 35 runs fit 1700 bytes, so 3 chunks of 34. */
	assert_int_equal(policy_chunk_parameters(&b, 1, 100, 1700, 1, &c), 0);
	assert_int_equal(c.chunks, 3);
	assert_int_equal(c.chunk_length, 34);
	policy_chunked_shape(&b, c.chunk_length, shape);
	assert_int_equal(shape[0], 3);
	assert_int_equal(shape[1], 4);
	assert_int_equal(shape[2], 34);
}

static void test_chunk_refusals(void **state)
{
	struct policy_chunking c;
	struct policy_array a[2] = {arr2(100, 10, 8, false), arr2(10, 10, 8, true)};
	struct policy_array bad;
	uint64_t bytes;
	(void)state;
	/* The unchunkable array alone exceeds the memory. */
	assert_int_equal(policy_chunk_parameters(a, 2, 0, 799, 1, &c), -ENOMEM);
	/* One run plus the table: 80 + 800. */
	assert_int_equal(policy_chunk_parameters(a, 2, 0, 879, 1, &c), -ENOMEM);
	assert_int_equal(policy_chunk_parameters(a, 2, 0, 880, 1, &c), 0);
	assert_int_equal(c.chunks, 100);
	assert_int_equal(c.chunk_length, 1);
	assert_int_equal(policy_chunk_parameters(a, 2, 0, 0, 1, &c), -ENOMEM);
	assert_true(c.warn & POLICY_WARN_OVERSIZED);
	assert_int_equal(policy_chunk_parameters(a, 0, 0, 1000, 1, &c), -EINVAL);
	assert_int_equal(policy_chunk_parameters(NULL, 1, 0, 1000, 1, &c), -EINVAL);
	bad = arr2(10, 10, 0, false);
	assert_int_equal(policy_chunk_parameters(&bad, 1, 0, 1000, 1, &c), -EINVAL);
	bad = arr2(10, 0, 4, false);
	assert_int_equal(policy_chunk_parameters(&bad, 1, 0, 1000, 1, &c), -EINVAL);
	bad = arr2(10, 10, 4, false);
	bad.axis = 2;
	assert_int_equal(policy_chunk_parameters(&bad, 1, 0, 1000, 1, &c), -EINVAL);
	bad.axis = 0;
	bad.ndim = 0;
	assert_int_equal(policy_chunk_parameters(&bad, 1, 0, 1000, 1, &c), -EINVAL);
	bad.ndim = POLICY_MAX_DIMS + 1;
	assert_int_equal(policy_chunk_parameters(&bad, 1, 0, 1000, 1, &c), -EINVAL);
	assert_int_equal(policy_array_bytes(&bad, 1, &bytes), -EINVAL);
	/* 64-bit overflow in the product, in the sum, and in the rounding. */
	bad = arr2(1ull << 40, 1ull << 30, 8, false);
	assert_int_equal(policy_chunk_parameters(&bad, 1, 0, 1000, 1, &c), -EOVERFLOW);
	assert_int_equal(policy_array_bytes(&bad, 1, &bytes), -EOVERFLOW);
	struct policy_array two[2] = {arr2(1ull << 31, 1ull << 30, 4, false),
	                              arr2(1ull << 31, 1ull << 30, 4, false)};
	assert_int_equal(policy_chunk_parameters(two, 2, 0, 1000, 1, &c), -EOVERFLOW);
	bad = arr2(UINT64_MAX, 1, 1, false);
	assert_int_equal(policy_array_bytes(&bad, 256, &bytes), -EOVERFLOW);
	assert_int_equal(policy_array_bytes(&bad, 1, &bytes), 0);
	assert_int_equal(bytes, UINT64_MAX);
	/* Only unchunkable arrays: they fit or they do not. */
	struct policy_array u = arr2(10, 10, 1, true);
	assert_int_equal(policy_chunk_parameters(&u, 1, 0, 100, 1, &c), 0);
	assert_int_equal(c.chunks, 1);
	assert_int_equal(c.axis_length, 1);
	assert_int_equal(policy_chunk_parameters(&u, 1, 0, 99, 1, &c), -ENOMEM);
}

static void test_chunk_warning(void **state)
{
	struct policy_chunking c;
	struct policy_array a = arr2(10000, 1, 1, false);
	(void)state;
	/* 20x is fine; more than 20x warns (and still chunks). */
	assert_int_equal(policy_chunk_parameters(&a, 1, 0, 500, 1, &c), 0);
	assert_int_equal(c.warn, 0);
	assert_int_equal(c.chunks, 20);
	assert_int_equal(policy_chunk_parameters(&a, 1, 0, 476, 1, &c), 0);
	assert_int_equal(c.warn, POLICY_WARN_OVERSIZED);
	assert_int_equal(c.chunks, 22);
	assert_int_equal(c.chunk_length, 455);
}

/* The granule: every array of a chunk is rounded up on its own. */
static void test_chunk_granule(void **state)
{
	struct policy_chunking c;
	struct policy_array a[3] = {arr2(100, 1, 1, false), arr2(100, 1, 1, false),
	                            arr2(100, 1, 1, false)};
	uint64_t bytes;
	(void)state;
	assert_int_equal(policy_array_bytes(&a[0], 256, &bytes), 0);
	assert_int_equal(bytes, 256);
	assert_int_equal(policy_chunk_parameters(a, 3, 0, 768, 256, &c), 0);
	assert_int_equal(c.request_bytes, 768);
	assert_int_equal(c.chunks, 1);
	assert_int_equal(policy_chunk_parameters(a, 3, 0, 767, 256, &c), -ENOMEM);
}

/* Against a linear search: the count is the smallest that fits, for many
 * random request sets. */
static uint64_t brute_total(const struct policy_array *a, size_t n, uint64_t len, uint64_t granule)
{
	uint64_t total = 0;
	for (size_t i = 0; i < n; i++) {
		uint64_t b = a[i].elem_size;
		for (unsigned d = 0; d < a[i].ndim; d++) {
			uint64_t dim = a[i].shape[d];
			if (d == a[i].axis && !a[i].unchunkable && len < dim)
				dim = len;
			b *= dim;
		}
		b = (b + granule - 1) / granule * granule;
		total += b;
	}
	return total;
}

static void test_chunk_exhaustive(void **state)
{
	(void)state;
	srand(4242);
	for (int round = 0; round < 3000; round++) {
		struct policy_array a[4];
		size_t n = 1 + (size_t)(rand() % 4);
		uint64_t granule = (rand() % 2) ? 256 : 1;
		uint64_t runs = 1 + (uint64_t)(rand() % 300);
		for (size_t i = 0; i < n; i++) {
			memset(&a[i], 0, sizeof(a[i]));
			a[i].ndim = 1 + (unsigned)(rand() % 3);
			a[i].axis = (unsigned)rand() % a[i].ndim;
			a[i].elem_size = 1u << (rand() % 4);
			for (unsigned d = 0; d < a[i].ndim; d++)
				a[i].shape[d] = 1 + (uint64_t)(rand() % 20);
			a[i].shape[a[i].axis] = (rand() % 4) ? runs : 1 + (uint64_t)(rand() % 300);
			a[i].unchunkable = rand() % 5 == 0;
		}
		uint64_t full = brute_total(a, n, UINT64_MAX, granule);
		uint64_t avail = (uint64_t)rand() % (full + full / 4 + 2);
		struct policy_chunking c;
		int rc = policy_chunk_parameters(a, n, 0, avail, granule, &c);
		uint64_t axis = 0;
		for (size_t i = 0; i < n; i++) {
			if (!a[i].unchunkable && a[i].shape[a[i].axis] > axis)
				axis = a[i].shape[a[i].axis];
		}
		if (!axis)
			axis = 1;
		assert_int_equal(c.request_bytes, full);
		/* Linear search over counts. */
		uint64_t want = 0;
		for (uint64_t k = 1; k <= axis; k++) {
			if (brute_total(a, n, (axis + k - 1) / k, granule) <= avail) {
				want = k;
				break;
			}
		}
		if (!want) {
			assert_int_equal(rc, -ENOMEM);
			continue;
		}
		assert_int_equal(rc, 0);
		assert_int_equal(c.chunks, want);
		assert_int_equal(c.chunk_length, (axis + want - 1) / want);
		assert_int_equal(c.chunk_bytes, brute_total(a, n, c.chunk_length, granule));
		assert_true(c.chunk_bytes <= avail);
		assert_true(c.chunks * c.chunk_length >= axis);
		assert_true((c.chunks - 1) * c.chunk_length < axis);
		assert_int_equal(!!(c.warn & POLICY_WARN_OVERSIZED), full / 20 > avail);
	}
}

/* ---- randomized sequence against a reference model --------------------------------- */

/* The model: what each instance is, recomputed from scratch each time. */
struct model_inst {
	bool live;
	int device;
	double proportion;
	uint64_t used;
};

struct model {
	int ndev;
	uint64_t total[4], capacity[4];
	enum policy_mode mode;
	double min_share;
	struct model_inst in[64];
};

static int model_rules(const struct model *m, int device, int skip, double extra_manual,
                       int extra_auto)
{
	double manual = 0;
	unsigned n_auto = 0;
	/* Registration order, like the policy: the same double sum. */
	for (int i = 0; i < 64; i++) {
		if (!m->in[i].live || m->in[i].device != device || i == skip)
			continue;
		if (m->in[i].proportion > 0)
			manual += m->in[i].proportion;
		else
			n_auto++;
	}
	manual += extra_manual;
	n_auto += (unsigned)extra_auto;
	if (manual > 1 + POLICY_SUM_TOLERANCE)
		return -ENOSPC;
	if (n_auto && 1 - manual + POLICY_SUM_TOLERANCE < n_auto * m->min_share)
		return -EUSERS;
	return 0;
}

static double random_proportion(void)
{
	switch (rand() % 6) {
	case 0:
		return 0.05 * (1 + rand() % 20);
	case 1:
		return 1.0 / (1 + rand() % 7);
	case 2:
		return (double)rand() / RAND_MAX * 0.3 + 1e-9;
	case 3:
		return 1e-12 * (1 + rand() % 3);
	default:
		return (double)(1 + rand() % 1000) / 1000;
	}
}

static void model_compare(const struct policy *p, const struct model *m)
{
	check(p);
	for (int d = 0; d < m->ndev; d++) {
		uint64_t used = 0, sum = 0;
		assert_int_equal(p->dev[d].capacity, m->capacity[d]);
		for (int i = 0; i < 64; i++) {
			if (!m->in[i].live || m->in[i].device != d)
				continue;
			assert_int_equal(inst[i].used, m->in[i].used);
			assert_true(inst[i].proportion == m->in[i].proportion);
			used += m->in[i].used;
			sum += inst[i].cap;
			if (m->mode == POLICY_PASSIVE)
				assert_int_equal(inst[i].cap, m->capacity[d]);
			else if (m->in[i].proportion > 0)
				/* floor(p * C), or the integer just above when
				 * the product is a rounding error under it. */
				assert_true(inst[i].cap <=
				            1 + (uint64_t)((long double)m->in[i].proportion *
				                           m->capacity[d]));
		}
		assert_int_equal(p->dev[d].used, used);
		if (m->mode == POLICY_ACTIVE)
			assert_true(sum <= m->capacity[d]);
	}
}

static void test_random_sequence(void **state)
{
	(void)state;
	for (int seed = 1; seed <= 40; seed++) {
		struct policy p;
		struct model m = {.ndev = 1 + seed % 3, .min_share = seed % 2 ? 0.01 : 0.001};
		srand((unsigned)seed * 7919u);
		m.mode = seed % 4 ? POLICY_ACTIVE : POLICY_PASSIVE;
		for (int d = 0; d < m.ndev; d++)
			m.total[d] = m.capacity[d] =
			    (1ull << (20 + rand() % 20)) + (uint64_t)rand();
		struct policy_config cfg = {.mode = m.mode, .min_auto_share = m.min_share};
		memset(inst, 0, sizeof(inst));
		assert_int_equal(policy_init(&p, &cfg, m.ndev, m.total), 0);
		for (int step = 0; step < 3000; step++) {
			int i = rand() % 64, d = rand() % m.ndev, rc, want;
			struct model_inst *mi = &m.in[i];
			double prop;
			uint64_t bytes;
			switch (rand() % 10) {
			case 0:
			case 1: /* register */
				if (mi->live)
					break;
				prop = rand() % 2 ? random_proportion() : 0;
				want = model_rules(&m, d, -1, prop, prop > 0 ? 0 : 1);
				rc = policy_add(&p, &inst[i], (uint64_t)i + 1, d, prop, NULL, NULL);
				assert_int_equal(rc, want);
				if (rc == 0)
					*mi = (struct model_inst){true, d, prop, 0};
				break;
			case 2: /* unregister */
				if (!mi->live)
					break;
				policy_remove(&p, &inst[i]);
				mi->live = false;
				break;
			case 3: /* set a proportion */
				if (!mi->live)
					break;
				prop = random_proportion();
				want = model_rules(&m, mi->device, i, prop, 0);
				assert_int_equal(policy_set_proportion(&p, &inst[i], prop, NULL),
				                 want);
				if (want == 0)
					mi->proportion = prop;
				break;
			case 4: /* auto */
				if (!mi->live)
					break;
				want =
				    mi->proportion > 0 ? model_rules(&m, mi->device, i, 0, 1) : 0;
				assert_int_equal(policy_set_auto(&p, &inst[i], NULL), want);
				if (want == 0)
					mi->proportion = 0;
				break;
			case 5:
			case 6: { /* allocate what the policy admits */
				if (!mi->live)
					break;
				bytes = (uint64_t)rand() % (m.capacity[mi->device] / 4 + 1);
				rc = policy_admit(&p, &inst[i], bytes, NULL);
				uint64_t dev_used = 0;
				for (int j = 0; j < 64; j++) {
					if (m.in[j].live && m.in[j].device == mi->device)
						dev_used += m.in[j].used;
				}
				bool quota =
				    m.mode == POLICY_ACTIVE &&
				    (mi->used > inst[i].cap || bytes > inst[i].cap - mi->used);
				bool mem = dev_used > m.capacity[mi->device] ||
				           bytes > m.capacity[mi->device] - dev_used;
				assert_int_equal(rc, quota ? -EDQUOT : mem ? -ENOMEM : 0);
				if (rc == 0) {
					policy_charge(&p, &inst[i], bytes);
					mi->used += bytes;
					/* No instance above its cap in active mode
					 * through an admitted allocation. */
					if (m.mode == POLICY_ACTIVE)
						assert_true(inst[i].used <= inst[i].cap);
				}
				break;
			}
			case 7: /* free some */
				if (!mi->live || !mi->used)
					break;
				bytes = (uint64_t)rand() % (mi->used + 1);
				policy_uncharge(&p, &inst[i], bytes);
				mi->used -= bytes;
				break;
			case 8: /* mode */
				if (rand() % 8)
					break;
				m.mode = m.mode == POLICY_ACTIVE ? POLICY_PASSIVE : POLICY_ACTIVE;
				assert_int_equal(policy_set_mode(&p, m.mode), 0);
				break;
			case 9: /* limit */
				if (rand() % 8)
					break;
				if (rand() % 3 == 0) {
					assert_int_equal(policy_set_limit(&p, d, 0, 0), 0);
					m.capacity[d] = m.total[d];
				} else if (rand() % 2) {
					bytes = (uint64_t)rand() % (m.total[d] + m.total[d] / 2);
					assert_int_equal(policy_set_limit(&p, d, bytes, 0), 0);
					m.capacity[d] =
					    bytes && bytes < m.total[d] ? bytes : m.total[d];
				} else {
					double f = (double)(1 + rand() % 100) / 100;
					assert_int_equal(policy_set_limit(&p, d, 0, f), 0);
					/* floor(f * total), or one more when the
					 * product is a rounding error under it. */
					uint64_t fl = (uint64_t)((long double)f * m.total[d]);
					assert_true(p.dev[d].capacity - fl <= 1);
					m.capacity[d] = p.dev[d].capacity;
				}
				break;
			}
			drain(&p);
			model_compare(&p, &m);
		}
		policy_finish(&p);
	}
}

/* ---- the check itself ------------------------------------------------------------ */

static void test_check_detects(void **state)
{
	struct policy p;
	char msg[256];
	(void)state;
	policy_new(&p, 1, 1000, POLICY_ACTIVE, 0);
	add_ok(&p, 0, 0, 0.5, NULL);
	add_ok(&p, 1, 0, 0, NULL);
	inst[0].cap++;
	assert_int_equal(policy_check(&p, msg, sizeof(msg)), -EFAULT);
	assert_non_null(strstr(msg, "cap"));
	inst[0].cap--;
	check(&p);
	p.dev[0].used = 5;
	assert_int_equal(policy_check(&p, msg, sizeof(msg)), -EFAULT);
	assert_non_null(strstr(msg, "used"));
	p.dev[0].used = 0;
	inst[1].queued = true;
	assert_int_equal(policy_check(&p, msg, sizeof(msg)), -EFAULT);
	inst[1].queued = false;
	p.count++;
	assert_int_equal(policy_check(&p, NULL, 0), -EFAULT);
	p.count--;
	inst[0].proportion = 0.9;
	assert_int_equal(policy_check(&p, msg, sizeof(msg)), -EFAULT);
	inst[0].proportion = 0.5;
	p.dev[0].capacity = 999;
	assert_int_equal(policy_check(&p, msg, sizeof(msg)), -EFAULT);
	p.dev[0].capacity = 1000;
	check(&p);
	policy_finish(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_init),
	    cmocka_unit_test(test_mode_names),
	    cmocka_unit_test(test_single_auto),
	    cmocka_unit_test(test_auto_split),
	    cmocka_unit_test(test_manual_and_auto),
	    cmocka_unit_test(test_refusals),
	    cmocka_unit_test(test_manual_sum),
	    cmocka_unit_test(test_float_edges),
	    cmocka_unit_test(test_caps_never_exceed),
	    cmocka_unit_test(test_min_auto),
	    cmocka_unit_test(test_set_auto_refused),
	    cmocka_unit_test(test_many_auto),
	    cmocka_unit_test(test_auto_warning),
	    cmocka_unit_test(test_change_queue),
	    cmocka_unit_test(test_modes),
	    cmocka_unit_test(test_admit),
	    cmocka_unit_test(test_limits),
	    cmocka_unit_test(test_groups),
	    cmocka_unit_test(test_chunk_fits),
	    cmocka_unit_test(test_chunk_split),
	    cmocka_unit_test(test_chunk_refusals),
	    cmocka_unit_test(test_chunk_warning),
	    cmocka_unit_test(test_chunk_granule),
	    cmocka_unit_test(test_chunk_exhaustive),
	    cmocka_unit_test(test_random_sequence),
	    cmocka_unit_test(test_check_detects),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
