/*
 * chaos-worker.h - the worker processes test-chaos.c forks (chaos-worker.c)
 * and the page they share with the test.
 */
#ifndef GPB_TEST_CHAOS_WORKER_H
#define GPB_TEST_CHAOS_WORKER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define SHARED_IDS 256 /* allocation ids workers publish for others to attach */

/* Shared with every worker (MAP_SHARED): ids to attach, and the first
 * unexpected error a worker met. */
struct shared {
	uint64_t ids[SHARED_IDS];
	char error[512];
	int error_set;
	unsigned long ops, errors_expected;
	unsigned long by_code[32]; /* expected refusals by -GPB_E_* */
	unsigned long refused;     /* connections the daemon could not take */
	pid_t bystander;           /* the test's own process: never evicted */
	/* The admin releases: issued (and succeeded), and what the workers
	 * saw of them. */
	unsigned long invalidates, switches, switch_turn, evictions;
	unsigned long invalidate_events, vanished, evicted;
};

/* Mapped MAP_SHARED by test-chaos.c's group setup, before any fork. */
extern struct shared *sh;

/* Set in a worker before it starts: the daemon is out of descriptors, so
 * refused connections and backend errors are expected too. */
extern bool worker_exhausting;

/* A worker that does random work on the daemon at socket until it is
 * killed; seed seeds its th_rnd. */
void worker_main(const char *socket, uint64_t seed) __attribute__((noreturn));
/* A worker that says hello and then only writes requests, never reading a
 * reply. */
void deaf_main(const char *path) __attribute__((noreturn));

#endif
