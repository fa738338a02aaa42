/*
 * broker-policy-helpers.h - helpers shared by the unit tests of the VRAM
 * policy wired into the broker (test-broker-policy.c, test-broker-waits.c,
 * test-broker-queue.c): a fake sender that records what the broker pushes
 * (events and deferred replies) per session, a fake timer that records what
 * it is asked to arm, and brokers, clients and instances set up for them.
 * Builds on session-helpers.h.
 */
#ifndef GPB_TEST_BROKER_POLICY_HELPERS_H
#define GPB_TEST_BROKER_POLICY_HELPERS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <cmocka.h>

#include "broker.h"
#include "policy.h"

#include "session-helpers.h"

/* ---- what the broker pushes ---------------------------------------------- */

#define MAX_SENT 64

struct sent {
	struct session *s;
	cJSON *root;
	int fd;
};

extern struct sent sent[MAX_SENT];
extern int sent_count;

void sent_clear(void);
/* The teardown of every test: sent_clear(), then teardown(). */
int sent_teardown(void **state);
/* How many frames went to s (events named `event`, or replies when NULL). */
int sent_to(const struct session *s, const char *event);
/* The n-th frame sent to s (0 = oldest). */
const cJSON *sent_nth(const struct session *s, int n);
/* The cap a cap_changed event to s announced for instance, or -1. */
int64_t announced_cap(const struct session *s, uint64_t instance);

/* Sends a request (formatted) that must be deferred: no reply now. */
void request_deferred(struct broker *b, struct session *s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- the timer ----------------------------------------------------------- */

/* The last delay the broker asked for, and how many times it asked. */
extern uint64_t timer_delay;
extern int timer_calls;

/* ---- set-up -------------------------------------------------------------- */

/* broker_new with the fake sender and timer, in `mode`. */
struct broker *policy_broker(uint64_t mem, enum policy_mode mode, unsigned max_allocs);
/* The same with slabs of slab bytes. */
struct broker *policy_broker_slab(uint64_t mem, uint64_t slab, enum policy_mode mode,
                                  unsigned max_allocs);
/* A session of uid that has said hello as `name`. */
struct session *client(struct broker *b, uid_t uid, const char *name);
/* Registers an instance on device with proportion and group; must succeed. */
struct broker_instance *reg_p(struct broker *b, struct session *s, int device, double proportion,
                              const char *group);

#endif
