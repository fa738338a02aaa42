/*
 * test-policy-accounting.c - unit tests of the VRAM policy engine
 * (daemon/policy/policy.c): the change queue, caps in both modes, admission and
 * accounting, limits, stream groups, and policy_check() itself.
 *
 * Shared helpers: policy-helpers.h.
 */
#include <errno.h>
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

	assert_int_equal(policy_group_info(&p, 0, "solver", &gi), 0);
	assert_int_equal(gi.members, 2);
	assert_int_equal(gi.available, 200 + 500);
	assert_int_equal(gi.used, 0);
	assert_int_equal(gi.warn, 0);
	assert_int_equal(policy_group_info(&p, 0, "nobody", &gi), -ENOENT);
	assert_int_equal(policy_group_info(&p, 0, NULL, &gi), -ENOENT);

	policy_charge(&p, &inst[0], 195);
	policy_charge(&p, &inst[2], 480);
	assert_int_equal(policy_group_info(&p, 0, "solver", &gi), 0);
	assert_int_equal(gi.used, 675);
	assert_int_equal(gi.available, 25);
	assert_int_equal(gi.warn, POLICY_WARN_GROUP_FULL);
	/* Passive: the devices' available capacity. */
	assert_int_equal(policy_set_mode(&p, POLICY_PASSIVE), 0);
	assert_int_equal(policy_group_info(&p, 0, "solver", &gi), 0);
	assert_int_equal(gi.available, (1000 - 195) + (1000 - 480));
	assert_int_equal(gi.warn, 0);
	/* Active again: headroom is bounded by the device. */
	assert_int_equal(policy_set_mode(&p, POLICY_ACTIVE), 0);
	policy_uncharge(&p, &inst[0], 195);
	policy_charge(&p, &inst[1], 300);
	policy_charge(&p, &inst[3], 450); /* auto cap 250: over by 200 */
	assert_int_equal(policy_device_available(&p, 0), 250);
	assert_int_equal(policy_group_info(&p, 0, "solver", &gi), 0);
	assert_int_equal(gi.available, 200 + 20);
	/* Moving members. */
	assert_int_equal(policy_set_group(&p, &inst[2], "other"), 0);
	assert_false(policy_is_grouped(&p, &inst[0]));
	assert_int_equal(policy_set_group(&p, &inst[1], "solver"), 0);
	assert_true(policy_is_grouped(&p, &inst[0]));
	assert_int_equal(policy_group_info(&p, 0, "solver", &gi), 0);
	assert_int_equal(gi.members, 2);
	/* Instances 0 and 1: headroom 200 + 0, but the device has 250 - 0. */
	assert_int_equal(gi.available, 200);
	assert_int_equal(gi.used, 300);
	check(&p);
	policy_finish(&p);
}

/* A group name lives in its space: the same name in two spaces is two
 * groups, neither grouped with nor counted in the other. */
static void test_group_spaces(void **state)
{
	struct policy p;
	struct policy_group_info gi;
	(void)state;
	policy_new(&p, 1, 1000, POLICY_ACTIVE, 0);
	add_ok(&p, 0, 0, 0.2, "solver");
	add_ok(&p, 1, 0, 0.3, "solver");
	policy_set_space(&inst[1], 7);
	assert_false(policy_is_grouped(&p, &inst[0]));
	assert_false(policy_is_grouped(&p, &inst[1]));
	assert_true(policy_in_group(&inst[1], 7, "solver"));
	assert_false(policy_in_group(&inst[1], 0, "solver"));
	policy_charge(&p, &inst[1], 100);
	assert_int_equal(policy_group_info(&p, 0, "solver", &gi), 0);
	assert_int_equal(gi.members, 1);
	assert_int_equal(gi.used, 0);
	assert_int_equal(gi.available, 200);
	assert_int_equal(policy_group_info(&p, 7, "solver", &gi), 0);
	assert_int_equal(gi.members, 1);
	assert_int_equal(gi.used, 100);
	assert_int_equal(gi.available, 200);
	assert_int_equal(policy_group_info(&p, 8, "solver", &gi), -ENOENT);
	/* Back in one space: one group of two. */
	add_ok(&p, 2, 0, 0, "solver");
	policy_set_space(&inst[2], 7);
	assert_true(policy_is_grouped(&p, &inst[1]));
	assert_false(policy_is_grouped(&p, &inst[0]));
	assert_int_equal(policy_group_info(&p, 7, "solver", &gi), 0);
	assert_int_equal(gi.members, 2);
	check(&p);
	policy_finish(&p);
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

/* Orphaned bytes: off the instance, still on the device, until released;
 * neither step takes more than is there. */
static void test_orphans(void **state)
{
	struct policy p;
	(void)state;
	policy_new(&p, 1, 1000, POLICY_ACTIVE, 0);
	add_ok(&p, 0, 0, 0.5, NULL);
	policy_charge(&p, &inst[0], 400);
	policy_orphan(&p, &inst[0], 300);
	check(&p);
	assert_int_equal(inst[0].used, 100);
	assert_int_equal(p.dev[0].orphaned, 300);
	assert_int_equal(p.dev[0].used, 400);
	/* The instance may use its cap again, the device has 600 left. */
	assert_int_equal(policy_headroom(&p, &inst[0]), 400);
	assert_int_equal(policy_device_available(&p, 0), 600);
	assert_int_equal(policy_admit(&p, &inst[0], 401, NULL), -EDQUOT);
	/* More than the instance holds: only what it holds moves. */
	policy_orphan(&p, &inst[0], 500);
	check(&p);
	assert_int_equal(inst[0].used, 0);
	assert_int_equal(p.dev[0].orphaned, 400);
	/* The instance goes; its orphaned bytes stay charged. */
	policy_remove(&p, &inst[0]);
	assert_int_equal(p.dev[0].used, 400);
	policy_orphan_release(&p, 0, 300);
	assert_int_equal(p.dev[0].orphaned, 100);
	assert_int_equal(p.dev[0].used, 100);
	policy_orphan_release(&p, 0, 1000);
	assert_int_equal(p.dev[0].orphaned, 0);
	assert_int_equal(p.dev[0].used, 0);
	assert_int_equal(policy_device_available(&p, 0), 1000);
	check(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_change_queue),  cmocka_unit_test(test_modes),
	    cmocka_unit_test(test_admit),         cmocka_unit_test(test_limits),
	    cmocka_unit_test(test_groups),        cmocka_unit_test(test_group_spaces),
	    cmocka_unit_test(test_check_detects), cmocka_unit_test(test_orphans),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
