/*
 * test-recall.h - what test-recall.c and test-recall-storm.c share: forked
 * children linked to the test by two pipes, one byte a step.
 */
#ifndef GPB_TEST_RECALL_H
#define GPB_TEST_RECALL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "harness.h"

#define MiB ((uint64_t)1 << 20)
#define GiB ((uint64_t)1 << 30)

struct rchild {
	pid_t pid;
	int to;   /* the test writes here */
	int from; /* the test reads here */
};

/* A child's body: reads commands from in, writes steps to out; its value
 * is the child's exit status. */
typedef int (*rchild_fn)(const struct th_daemon *d, int in, int out, const void *arg);

/* Forks a child that runs fn with GPUBROKER_LEASE_IDLE_MS long (its idle
 * leases come back only when recalled). */
struct rchild rc_spawn(const struct th_daemon *d, rchild_fn fn, const void *arg);
int rc_say(int fd, char what);
/* One byte from fd, or -1 after timeout_ms. */
int rc_hear(int fd, int timeout_ms);
/* In the test: the child's next step must be step (60 s at most). */
void rc_expect(struct rchild *c, char step);
void rc_tell(struct rchild *c, char cmd);
uint64_t rc_read_u64(struct rchild *c);
int rc_write_u64(int fd, uint64_t v);
/* Closes the pipes; the child must exit 0. */
void rc_reap_ok(struct rchild *c);
/* In a child: says what failed on stderr, 'x' to the test; returns 1. */
int rc_fail(int out, const char *who, const char *what, int rc);
/* Writes a's pattern of tag, or checks it (*bad set on a difference). */
void rc_pattern(const struct gpb_allocation *a, unsigned char tag, bool check, bool *bad);

/* A u64 member of the `stats` result's top level; fails the test when it
 * has none. */
uint64_t rc_stat(gpb_client *c, const char *key);

/* d: eight processes joining and leaving under random proportions. */
void test_storm(void **state);

#endif
