/*
 * test-policy.c - unit tests of the VRAM policy engine (daemon/policy/policy.c):
 * set-up, every proportion rule and its refusal, caps, floating-point edges,
 * and the auto pool and its minimum.
 *
 * Shared helpers: policy-helpers.h.
 */
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "policy.h"
#include "policy-helpers.h"

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
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
