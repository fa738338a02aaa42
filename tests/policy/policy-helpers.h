/*
 * policy-helpers.h - helpers shared by the unit tests of the VRAM policy
 * engine (test-policy*.c).
 *
 * The policy allocates nothing, so every test keeps its instances in the
 * static array `inst` and calls policy_check() after each step.
 */
#ifndef GPB_TEST_POLICY_HELPERS_H
#define GPB_TEST_POLICY_HELPERS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "policy.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define GiB           (1ull << 30)
#define MiB           (1ull << 20)

#define MAX_INST 2048
extern struct policy_instance inst[MAX_INST];

#define check(p) check_at((p), __FILE__, __LINE__)

void check_at(const struct policy *p, const char *file, int line);
/* A policy over ndev devices of `total` bytes each, in `mode`; clears inst. */
void policy_new(struct policy *p, int ndev, uint64_t total, enum policy_mode mode,
                double min_share);
/* policy_add of inst[i] (id i + 1) must succeed, with no warning but
 * POLICY_WARN_AUTO_LOW. */
void add_ok(struct policy *p, int i, int device, double proportion, const char *group);
/* Empties the change queue; returns how many instances it held. */
unsigned drain(struct policy *p);
/* The sum of the caps of the instances on device. */
uint64_t caps_sum(const struct policy *p, int device);

#endif
