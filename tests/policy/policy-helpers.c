/*
 * policy-helpers.c - helpers shared by the unit tests of the VRAM policy
 * engine (test-policy*.c).
 */
#include <string.h>

#include "policy-helpers.h"

struct policy_instance inst[MAX_INST];

void check_at(const struct policy *p, const char *file, int line)
{
	char msg[256] = "";
	int rc = policy_check(p, msg, sizeof(msg));
	if (rc != 0)
		fail_msg("%s:%d: policy_check() = %d: %s", file, line, rc, msg);
}

/* A policy over ndev devices of `total` bytes each, in `mode`. */
void policy_new(struct policy *p, int ndev, uint64_t total, enum policy_mode mode, double min_share)
{
	uint64_t totals[POLICY_MAX_DEVICES];
	struct policy_config cfg = {.mode = mode, .min_auto_share = min_share};
	for (int i = 0; i < ndev; i++)
		totals[i] = total;
	assert_int_equal(policy_init(p, &cfg, ndev, totals), 0);
	memset(inst, 0, sizeof(inst));
	check(p);
}

void add_ok(struct policy *p, int i, int device, double proportion, const char *group)
{
	unsigned warn = 99;
	assert_int_equal(policy_add(p, &inst[i], (uint64_t)i + 1, device, proportion, group, &warn),
	                 0);
	assert_true(warn == 0 || warn == POLICY_WARN_AUTO_LOW);
	check(p);
}

unsigned drain(struct policy *p)
{
	unsigned n = 0;
	while (policy_take_changed(p))
		n++;
	return n;
}

uint64_t caps_sum(const struct policy *p, int device)
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
