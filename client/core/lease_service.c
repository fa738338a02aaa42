/*
 * lease_service.c - the service thread of a client's lease allocator
 * (lease.h): returns the leases that stayed wholly free for
 * GPUBROKER_LEASE_IDLE_MS, and answers what the daemon asks of the
 * connection (recall and reclaim events), with no library call needed.
 *
 * Why a thread: a process that leased memory and then sits in a long
 * kernel (or any code that makes no gpb_* call) would otherwise keep its
 * idle leases charged and away from every other process of the device,
 * and leave the daemon's recalls unanswered until they time out. It starts
 * with the client's first lease (a client that never leases has none, and
 * is never recalled) and sleeps in poll() on its doorbell (an eventfd, rung
 * by stop and by a free that empties a lease due before the thread would
 * wake) and on the connection's socket, with the allocator's timer as its
 * timeout. It shares the connection with the application's threads the
 * way they share it with each other, by the client's lock; but it only
 * ever tries that lock (trylock): a thread in a long call (a wait of
 * gpb_alloc_wait) holds it, and the thread must neither wait behind it nor
 * make the process's own calls wait behind a return. When the lock is busy
 * it tries again shortly: within 1 ms when the socket is readable (the
 * holder, when in an exchange, reads the socket and answers itself), later
 * for idle returns (the call in progress returns the doomed leases itself
 * when it grows). Holding the lock, it reads what the socket has
 * (client_conn_pump): recalls and reclaims are answered there, other
 * events queued for gpb_dispatch as any call queues them.
 *
 * fork: the thread is not copied into a child; a client of the parent is
 * refused there and its state dropped without a join (lease_abandon).
 */
#include "lease.h"
#include "lease_internal.h"
#include "client.h"

#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

/* How soon a return is tried again while the client's lock is busy. */
#define LEASE_BUSY_RETRY_MS 20
/* How soon the socket is read again while the lock is busy: a recall's
 * answer is late by at most this much more than the holder's hold. */
#define LEASE_BUSY_READ_MS 1

uint64_t lease_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void ring(int fd)
{
	uint64_t one = 1;
	/* Fails only when the counter is full: it is rung already. */
	ssize_t unused = write(fd, &one, sizeof(one));

	(void)unused;
}

void lease_service_ring(struct lease_state *ls, uint64_t due)
{
	pthread_mutex_lock(&ls->ring_lock);
	if (ls->wakefd >= 0 && due < ls->wake_at) {
		/* Once for this time: the thread sets its next wake-up as it
		 * goes back to sleep; meanwhile only an earlier one rings. */
		ls->wake_at = due;
		if (due < ls->wake_request)
			ls->wake_request = due;
		ring(ls->wakefd);
	}
	pthread_mutex_unlock(&ls->ring_lock);
}

/*
 * Client lock taken (trylock): what the socket has is read, the recalls
 * and reclaims in it answered, and the doomed leases returned. Whether the
 * socket is worth watching still (a dead connection's polls readable for
 * good). Leaves the lock.
 */
static bool service_pump(gpb_client *c, bool readable)
{
	bool alive;

	/* An invalidate read here is left for the application's next call
	 * to apply (client_enter settles it): applying it would unmap its
	 * memory behind its back, while it may be using it (it has not heard
	 * of the event). Recalls and reclaims give back only what nothing
	 * uses: those are answered now. */
	c->conn.defer_invalidate = true;
	if (readable)
		client_conn_pump(&c->conn);
	c->conn.defer_invalidate = false;
	lease_recall_settle(c);
	lease_return_doomed(c);
	alive = !c->conn.dead;
	client_leave(c);
	return alive;
}

/*
 * fork. A child inherits every lock as it was, the allocator's own (any
 * malloc without fork handlers: ASan's, for one) included; a service
 * thread caught inside malloc at the fork leaves the child's allocator
 * locked for good (seen: a child hanging in calloc under ASan). So a fork
 * first parks every service thread at the top of its loop, where it holds
 * nothing and allocates nothing, and lets it go on after (the parent) or
 * forgets it (the child: it has no such thread).
 */
static pthread_mutex_t svc_lock = PTHREAD_MUTEX_INITIALIZER;
static struct lease_state *svc_list;
static pthread_once_t svc_once = PTHREAD_ONCE_INIT;

static void svc_prepare(void)
{
	pthread_mutex_lock(&svc_lock);
	for (struct lease_state *ls = svc_list; ls; ls = ls->svc_next) {
		pthread_mutex_lock(&ls->lock);
		ls->pause_req = true;
		ring(ls->wakefd);
		while (!ls->paused && !ls->stop)
			pthread_cond_wait(&ls->pause_cond, &ls->lock);
		pthread_mutex_unlock(&ls->lock);
	}
}

static void svc_parent(void)
{
	for (struct lease_state *ls = svc_list; ls; ls = ls->svc_next) {
		pthread_mutex_lock(&ls->lock);
		ls->pause_req = false;
		pthread_cond_broadcast(&ls->pause_cond);
		pthread_mutex_unlock(&ls->lock);
	}
	pthread_mutex_unlock(&svc_lock);
}

static void svc_child(void)
{
	svc_list = NULL; /* the threads were the parent's */
	pthread_mutex_unlock(&svc_lock);
}

static void svc_once_init(void)
{
	/* Registered after slab.c's (a client exists before its thread), so
	 * run before it: no thread is parked holding what it takes. */
	pthread_atfork(svc_prepare, svc_parent, svc_child);
}

static void *lease_service_main(void *arg)
{
	gpb_client *c = arg;
	struct lease_state *ls = &c->lease;
	struct pollfd pfd[2] = {{.fd = ls->wakefd, .events = POLLIN},
	                        {.fd = c->conn.sock, .events = POLLIN}};
	bool watch = true, readable = false, scan = true;
	uint64_t due = 0; /* when the next idle lease is due (UINT64_MAX: none) */

	pthread_mutex_lock(&ls->lock);
	while (!ls->stop) {
		uint64_t now, wait;
		bool skip_sock = false;

		while (ls->pause_req && !ls->stop) { /* a fork (svc_prepare) */
			ls->paused = true;
			pthread_cond_broadcast(&ls->pause_cond);
			pthread_cond_wait(&ls->pause_cond, &ls->lock);
		}
		ls->paused = false;
		if (ls->stop)
			break;
		now = lease_now_ms();

		/* Scanned when rung or due only, not for every read of the
		 * socket: a scan flushes the instances' block caches. */
		/* A ring: the time it asked for, if earlier. */
		pthread_mutex_lock(&ls->ring_lock);
		if (ls->wake_request < due)
			due = ls->wake_request;
		ls->wake_request = UINT64_MAX;
		pthread_mutex_unlock(&ls->ring_lock);
		if (scan || now >= due) {
			lease_lock_arenas(ls); /* the allocator's lock, whole */
			wait = lease_idle_scan(ls, now);
			lease_unlock_arenas(ls);
			due = wait == UINT64_MAX ? UINT64_MAX : now + wait;
			scan = false;
		}
		wait = due == UINT64_MAX ? UINT64_MAX : due - now;
		/* Doomed leases that could not go back (a capture): not before
		 * their retry time, or this loop would spin on them. */
		bool doomed = ls->doomed && now >= ls->doomed_retry_at;
		if (ls->doomed && !doomed && ls->doomed_retry_at - now < wait)
			wait = ls->doomed_retry_at - now;
		if (doomed || readable) {
			pthread_mutex_unlock(&ls->lock);
			/* Client lock, then allocator lock (lease.h). */
			if (pthread_mutex_trylock(&c->lock) == 0) {
				watch = service_pump(c, readable) && watch;
				readable = false;
				pthread_mutex_lock(&ls->lock);
				continue;
			}
			pthread_mutex_lock(&ls->lock);
			if (readable) {
				/* Polling the socket again would return at
				 * once, for as long as the holder leaves it
				 * unread: a short sleep instead. */
				skip_sock = true;
				if (wait > LEASE_BUSY_READ_MS)
					wait = LEASE_BUSY_READ_MS;
			} else if (wait > LEASE_BUSY_RETRY_MS) {
				wait = LEASE_BUSY_RETRY_MS;
			}
		}
		if (ls->stop)
			break;
		pthread_mutex_lock(&ls->ring_lock);
		ls->wake_at = due;
		pthread_mutex_unlock(&ls->ring_lock);
		pthread_mutex_unlock(&ls->lock);
		int n = poll(pfd, watch && !skip_sock ? 2 : 1, wait > INT_MAX ? -1 : (int)wait);
		if (n > 0 && pfd[0].revents) {
			uint64_t count;
			ssize_t unused = read(ls->wakefd, &count, sizeof(count));

			(void)unused;
		}
		readable = n > 0 && watch && !skip_sock && pfd[1].revents;
		pthread_mutex_lock(&ls->lock);
	}
	/* A fork waiting for this thread to park: it will not. */
	pthread_cond_broadcast(&ls->pause_cond);
	pthread_mutex_unlock(&ls->lock);
	return NULL;
}

void lease_service_start(struct gpb_client *c)
{
	struct lease_state *ls = &c->lease;
	sigset_t all, old;
	int fd;

	if (ls->thread_on)
		return;
	fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (fd < 0)
		return; /* no thread: leases go back when a call finds them due */
	pthread_mutex_lock(&ls->ring_lock);
	ls->wakefd = fd;
	ls->wake_at = 0;
	pthread_mutex_unlock(&ls->ring_lock);
	/* Signals are the application's threads' business. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_once(&svc_once, svc_once_init);
	pthread_mutex_lock(&svc_lock);
	if (pthread_create(&ls->thread, NULL, lease_service_main, c) == 0) {
		ls->thread_on = true;
		ls->svc_next = svc_list;
		svc_list = ls;
	}
	pthread_mutex_unlock(&svc_lock);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (!ls->thread_on) {
		pthread_mutex_lock(&ls->ring_lock);
		ls->wakefd = -1;
		pthread_mutex_unlock(&ls->ring_lock);
		close(fd);
	}
}

void lease_service_stop(struct gpb_client *c)
{
	struct lease_state *ls = &c->lease;

	if (!ls->thread_on)
		return;
	pthread_mutex_lock(&svc_lock);
	for (struct lease_state **p = &svc_list; *p; p = &(*p)->svc_next) {
		if (*p == ls) {
			*p = ls->svc_next;
			break;
		}
	}
	pthread_mutex_unlock(&svc_lock);
	pthread_mutex_lock(&ls->lock);
	ls->stop = true;
	ring(ls->wakefd);
	pthread_mutex_unlock(&ls->lock);
	pthread_join(ls->thread, NULL);
	ls->thread_on = false;
	close(ls->wakefd);
	ls->wakefd = -1;
}
