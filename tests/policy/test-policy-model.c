/*
 * test-policy-model.c - unit tests of the VRAM policy engine
 * (daemon/policy/policy.c): a randomized sequence of registrations, proportion and
 * mode changes, limits, allocations and frees, checked step by step against
 * a reference model.
 *
 * Shared helpers: policy-helpers.h.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "policy.h"
#include "policy-helpers.h"

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

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_random_sequence),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
