/*
 * lease_service.c - the service thread of a client's lease allocator
 * (lease.h): returns the leases that stayed wholly free for
 * GPUBROKER_LEASE_IDLE_MS, with no library call needed.
 *
 * Why a thread: a process that leased memory and then sits in a long
 * kernel (or any code that makes no gpb_* call) would otherwise keep its
 * idle leases charged and away from every other process of the device. It
 * starts with the client's first lease (a client that never leases has
 * none), sleeps on a condition variable with the allocator's timer as its
 * timeout, and is woken early by a free that empties a lease. It shares
 * the connection with the application's threads the way they share it
 * with each other, by the client's lock; but it only ever tries that lock
 * (trylock): a thread in a long call (a wait of gpb_alloc_wait) holds it,
 * and the thread must neither wait behind it nor make the process's own
 * calls wait behind a return. When the lock is busy it tries again shortly;
 * the call in progress returns the doomed leases itself when it grows.
 *
 * fork: the thread is not copied into a child; a client of the parent is
 * refused there and its state dropped without a join (lease_abandon).
 */
#include "lease.h"
#include "client.h"

#include <signal.h>
#include <stdlib.h>
#include <time.h>

/* How soon a return is tried again while the client's lock is busy. */
#define LEASE_BUSY_RETRY_MS 20

uint64_t lease_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void wait_ms(struct lease_state *ls, uint64_t ms)
{
	struct timespec ts;

	if (ms == UINT64_MAX) {
		pthread_cond_wait(&ls->wake, &ls->lock);
		return;
	}
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += (time_t)(ms / 1000);
	ts.tv_nsec += (long)(ms % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	pthread_cond_timedwait(&ls->wake, &ls->lock, &ts);
}

static void *lease_service_main(void *arg)
{
	gpb_client *c = arg;
	struct lease_state *ls = &c->lease;

	pthread_mutex_lock(&ls->lock);
	while (!ls->stop) {
		uint64_t wait = lease_idle_scan(ls, lease_now_ms());

		if (ls->doomed) {
			pthread_mutex_unlock(&ls->lock);
			/* Client lock, then allocator lock (lease.h). */
			if (pthread_mutex_trylock(&c->lock) == 0) {
				lease_return_doomed(c);
				client_leave(c);
				pthread_mutex_lock(&ls->lock);
				continue;
			}
			pthread_mutex_lock(&ls->lock);
			if (wait > LEASE_BUSY_RETRY_MS)
				wait = LEASE_BUSY_RETRY_MS;
		}
		if (!ls->stop)
			wait_ms(ls, wait);
	}
	pthread_mutex_unlock(&ls->lock);
	return NULL;
}

void lease_service_start(struct gpb_client *c)
{
	struct lease_state *ls = &c->lease;
	sigset_t all, old;

	if (ls->thread_on)
		return;
	/* Signals are the application's threads' business. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	if (pthread_create(&ls->thread, NULL, lease_service_main, c) == 0)
		ls->thread_on = true;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

void lease_service_stop(struct gpb_client *c)
{
	struct lease_state *ls = &c->lease;

	if (!ls->thread_on)
		return;
	pthread_mutex_lock(&ls->lock);
	ls->stop = true;
	pthread_cond_signal(&ls->wake);
	pthread_mutex_unlock(&ls->lock);
	pthread_join(ls->thread, NULL);
	ls->thread_on = false;
}
