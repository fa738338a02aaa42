/*
 * test-lease-arenas.c - the lease allocator's arenas and PyTorch's entry
 * points from many threads (issue 29: threads scale).
 *
 * Each thread allocates in an arena of its own (lease.h, Locks): its own
 * instances and block ids under its own lock. What must hold whatever the
 * interleaving:
 * - a block allocated by one thread and freed by another (gpb_free, and
 *   gpb_free_async on its stream) is freed once, into its own arena; a
 *   second free of it, from any thread, is GPB_E_NOT_FOUND;
 * - blocks live at once never overlap (each is filled with its own byte
 *   and checked whole before it is freed);
 * - two threads' first blocks come from leases of their own (on two CPUs
 *   or more), and everything goes back: no local block, no daemon
 *   allocation but the leases, the daemon's books consistent;
 * - gpb_torch_alloc/free across threads (a free finds a block another
 *   thread allocated), with figures that add up, and a daemon killed and
 *   restarted under them: the calls fail cleanly, then the next ones
 *   connect afresh (the client replaced while other threads call).
 * The threads' draws are seeded (printed; GPB_TEST_SEED replays a run).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpubroker.h"
#include "harness.h"

#define THREADS 4
#define QUEUE   64

static uint64_t seed;

static uint64_t rnd(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t reg(gpb_client *c, const char *name)
{
	struct gpb_register_opts o = {.name = name};
	uint64_t inst;
	assert_int_equal(gpb_register(c, &o, &inst), 0);
	return inst;
}

/* ---- blocks handed between threads ---------------------------------------- */

struct handed {
	struct gpb_allocation a;
	unsigned char fill;
	bool async; /* gpb_alloc_async on the legacy stream: freed with gpb_free_async */
};

struct shared {
	gpb_client *c;
	uint64_t inst;
	pthread_mutex_t lock;
	struct handed q[QUEUE];
	unsigned n;
	unsigned char next_fill; /* under lock: every live block its own byte */
};

struct worker {
	pthread_t th;
	struct shared *sh;
	unsigned index;
	char failed[160]; /* empty: passed */
};

static bool whole(const struct handed *h)
{
	const unsigned char *p = h->a.ptr;
	for (uint64_t i = 0; i < h->a.size; i++)
		if (p[i] != h->fill)
			return false;
	return true;
}

/* Frees @h (any thread's), then frees it again: refused. */
static void release(struct worker *w, struct handed *h)
{
	gpb_client *c = w->sh->c;
	int rc = h->async ? gpb_free_async(c, h->a.id, NULL) : gpb_free(c, h->a.id);
	if (rc != 0) {
		snprintf(w->failed, sizeof(w->failed), "free of %016" PRIx64 ": %d %s", h->a.id, rc,
		         gpb_last_error());
		return;
	}
	rc = h->async ? gpb_free_async(c, h->a.id, NULL) : gpb_free(c, h->a.id);
	if (rc != GPB_E_NOT_FOUND)
		snprintf(w->failed, sizeof(w->failed), "second free of %016" PRIx64 ": %d", h->a.id,
		         rc);
}

static void *handoff_main(void *arg)
{
	struct worker *w = arg;
	struct shared *sh = w->sh;
	uint64_t s = seed + w->index;

	for (int n = 0; n < 2000 && !w->failed[0]; n++) {
		struct handed h = {0}, got;
		bool have = false;

		if (rnd(&s) % 2) {
			uint64_t size = 256u << rnd(&s) % 9; /* 256 B - 64 KiB */
			h.async = rnd(&s) % 2;
			int rc = h.async ? gpb_alloc_async(sh->c, sh->inst, size, 0, NULL, &h.a)
			                 : gpb_alloc(sh->c, sh->inst, size, 0, &h.a);
			if (rc != 0) {
				snprintf(w->failed, sizeof(w->failed), "alloc: %d %s", rc,
				         gpb_last_error());
				break;
			}
			pthread_mutex_lock(&sh->lock);
			h.fill = ++sh->next_fill;
			pthread_mutex_unlock(&sh->lock);
			memset(h.a.ptr, h.fill, h.a.size);
		}
		pthread_mutex_lock(&sh->lock);
		if (h.a.ptr && sh->n < QUEUE) {
			sh->q[sh->n++] = h;
			h.a.ptr = NULL;
		}
		if (sh->n && rnd(&s) % 2) { /* most often another thread's */
			unsigned k = (unsigned)(rnd(&s) % sh->n);
			got = sh->q[k];
			sh->q[k] = sh->q[--sh->n];
			have = true;
		}
		pthread_mutex_unlock(&sh->lock);
		if (h.a.ptr) /* the queue was full: its own, freed at once */
			release(w, &h);
		if (have && !whole(&got))
			snprintf(w->failed, sizeof(w->failed),
			         "block %016" PRIx64 " of fill %u was overwritten", got.a.id,
			         got.fill);
		else if (have)
			release(w, &got);
	}
	return NULL;
}

/* Four threads hand blocks to each other; each freed by whoever takes it. */
static void test_cross_thread_frees(void **state)
{
	struct th_daemon d;
	struct shared sh = {.lock = PTHREAD_MUTEX_INITIALIZER};
	struct worker w[THREADS];
	struct gpb_mem_info mi;
	(void)state;
	th_daemon_start(&d, NULL);
	sh.c = th_client(&d, "arenas");
	sh.inst = reg(sh.c, "arenas");
	for (unsigned i = 0; i < THREADS; i++) {
		w[i] = (struct worker){.sh = &sh, .index = i};
		assert_int_equal(pthread_create(&w[i].th, NULL, handoff_main, &w[i]), 0);
	}
	for (unsigned i = 0; i < THREADS; i++) {
		pthread_join(w[i].th, NULL);
		if (w[i].failed[0])
			fail_msg("thread %u: %s (seed %" PRIu64 ")", i, w[i].failed, seed);
	}
	struct worker last = {.sh = &sh};
	for (unsigned k = 0; k < sh.n; k++) {
		assert_true(whole(&sh.q[k]));
		release(&last, &sh.q[k]);
		assert_string_equal(last.failed, "");
	}
	assert_int_equal(gpb_mem_info(sh.c, sh.inst, &mi), 0);
	assert_int_equal(mi.in_use, 0);
	assert_true(mi.leases >= 1);
	/* Nothing but the leases in the daemon's books. */
	assert_int_equal(th_selfcheck(sh.c, NULL), mi.leases);
	gpb_disconnect(sh.c);
	assert_int_equal(th_daemon_stop(&d), 0);
}

/* ---- an arena per thread --------------------------------------------------- */

struct first {
	pthread_t th;
	gpb_client *c;
	uint64_t inst;
	struct gpb_allocation a;
	int rc;
};

static void *first_main(void *arg)
{
	struct first *f = arg;
	f->rc = gpb_alloc(f->c, f->inst, 4096, 0, &f->a);
	return NULL;
}

/* Two new threads' first blocks: from leases of their own, so that the
 * threads never take one lock (one lease where there is one CPU). */
static void test_lease_per_arena(void **state)
{
	struct th_daemon d;
	struct first f[2];
	struct gpb_mem_info mi;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	(void)state;
	th_daemon_start(&d, NULL);
	gpb_client *c = th_client(&d, "per-arena");
	uint64_t inst = reg(c, "per-arena");
	for (int i = 0; i < 2; i++) {
		f[i] = (struct first){.c = c, .inst = inst};
		assert_int_equal(pthread_create(&f[i].th, NULL, first_main, &f[i]), 0);
	}
	for (int i = 0; i < 2; i++) {
		pthread_join(f[i].th, NULL);
		assert_int_equal(f[i].rc, 0);
	}
	assert_int_equal(gpb_mem_info(c, inst, &mi), 0);
	assert_int_equal(mi.leases, cpus >= 2 ? 2 : 1);
	assert_int_equal(mi.in_use, f[0].a.size + f[1].a.size);
	/* Each frees the other's, from this thread: found in its arena. */
	assert_int_equal(gpb_free(c, f[1].a.id), 0);
	assert_int_equal(gpb_free(c, f[0].a.id), 0);
	assert_int_equal(gpb_free(c, f[0].a.id), GPB_E_NOT_FOUND);
	assert_int_equal(gpb_mem_info(c, inst, &mi), 0);
	assert_int_equal(mi.in_use, 0);
	gpb_disconnect(c);
	assert_int_equal(th_daemon_stop(&d), 0);
}

/* ---- PyTorch's entry points ------------------------------------------------ */

struct torch_shared {
	pthread_mutex_t lock;
	void *q[QUEUE];
	size_t size[QUEUE];
	unsigned n;
	int stop;       /* atomic: 1 stop */
	int tolerate;   /* atomic: 1 while the daemon may be gone (refusals expected) */
	unsigned fails; /* atomic: refusals seen */
};

struct torch_worker {
	pthread_t th;
	struct torch_shared *sh;
	unsigned index;
	char failed[160];
};

static void *torch_main(void *arg)
{
	struct torch_worker *w = arg;
	struct torch_shared *sh = w->sh;
	uint64_t s = seed + 100 + w->index;

	while (!__atomic_load_n(&sh->stop, __ATOMIC_ACQUIRE) && !w->failed[0]) {
		size_t size = 256u << rnd(&s) % 9;
		void *p = gpb_torch_alloc((ssize_t)size, 0, NULL), *take = NULL;
		size_t take_size = 0;

		if (!p) {
			if (!__atomic_load_n(&sh->tolerate, __ATOMIC_ACQUIRE))
				snprintf(w->failed, sizeof(w->failed), "gpb_torch_alloc: %s",
				         gpb_last_error());
			__atomic_fetch_add(&sh->fails, 1, __ATOMIC_RELAXED);
			continue;
		}
		pthread_mutex_lock(&sh->lock);
		if (sh->n < QUEUE) {
			sh->q[sh->n] = p;
			sh->size[sh->n++] = size;
			p = NULL;
		}
		if (sh->n && rnd(&s) % 2) {
			unsigned k = (unsigned)(rnd(&s) % sh->n);
			take = sh->q[k];
			take_size = sh->size[k];
			sh->q[k] = sh->q[--sh->n];
			sh->size[k] = sh->size[sh->n];
		}
		pthread_mutex_unlock(&sh->lock);
		if (p)
			gpb_torch_free(p, (ssize_t)size, 0, NULL);
		if (take)
			gpb_torch_free(take, (ssize_t)take_size, 0, NULL);
	}
	return NULL;
}

static void torch_run(struct torch_shared *sh, struct torch_worker *w, unsigned ms)
{
	__atomic_store_n(&sh->stop, 0, __ATOMIC_RELEASE);
	for (unsigned i = 0; i < THREADS; i++) {
		w[i] = (struct torch_worker){.sh = sh, .index = i};
		assert_int_equal(pthread_create(&w[i].th, NULL, torch_main, &w[i]), 0);
	}
	struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&t, NULL);
}

static void torch_join(struct torch_shared *sh, struct torch_worker *w)
{
	__atomic_store_n(&sh->stop, 1, __ATOMIC_RELEASE);
	for (unsigned i = 0; i < THREADS; i++) {
		pthread_join(w[i].th, NULL);
		if (w[i].failed[0])
			fail_msg("thread %u: %s (seed %" PRIu64 ")", i, w[i].failed, seed);
	}
}

static void torch_drain(struct torch_shared *sh)
{
	for (unsigned k = 0; k < sh->n; k++)
		gpb_torch_free(sh->q[k], (ssize_t)sh->size[k], 0, NULL);
	sh->n = 0;
}

static void test_torch_threads(void **state)
{
	struct th_daemon d;
	struct th_daemon_opts o = {0};
	struct torch_shared sh = {.lock = PTHREAD_MUTEX_INITIALIZER};
	struct torch_worker w[THREADS];
	struct gpb_framework_stats st;
	(void)state;
	th_daemon_start_opts(&d, &o);
	setenv("GPUBROKER_SOCKET", d.socket, 1);
	setenv("GPUBROKER_TORCH_NAME", "torch-arenas", 1);

	/* Blocks freed by threads other than their allocator's. */
	torch_run(&sh, w, 300);
	torch_join(&sh, w);
	assert_int_equal(gpb_torch_stats(0, &st), 0);
	assert_int_equal(st.live, sh.n);
	assert_true(st.allocs > 100 && st.allocs == st.frees + st.live);
	assert_true(st.peak >= st.allocated);
	torch_drain(&sh);
	assert_int_equal(gpb_torch_stats(0, &st), 0);
	assert_int_equal(st.live, 0);
	assert_int_equal(st.allocated, 0);
	assert_int_equal(st.refused, 0);
	/* An unknown pointer, freed twice from another thread's table. */
	void *p = gpb_torch_alloc(4096, 0, NULL);
	assert_non_null(p);
	gpb_torch_free(p, 4096, 0, NULL);
	assert_string_equal(gpb_last_error(), "");
	gpb_torch_free(p, 4096, 0, NULL);
	assert_non_null(strstr(gpb_last_error(), "not from gpb_torch_alloc"));

	/* The daemon killed under the threads, then back: every call fails
	 * cleanly meanwhile, and the next ones connect afresh. */
	__atomic_store_n(&sh.tolerate, 1, __ATOMIC_RELEASE);
	torch_run(&sh, w, 100);
	th_daemon_kill(&d);
	struct timespec t = {0, 200 * 1000000L};
	nanosleep(&t, NULL);
	o.restart = true;
	th_daemon_start_opts(&d, &o);
	unsigned before = __atomic_load_n(&sh.fails, __ATOMIC_RELAXED);
	nanosleep(&t, NULL);
	__atomic_store_n(&sh.tolerate, 0, __ATOMIC_RELEASE);
	nanosleep(&t, NULL);
	torch_join(&sh, w);
	assert_true(before > 0); /* the threads did see it gone */
	/* The blocks of the daemon that died went with it (their frees are
	 * refused as not from gpb_torch_alloc); the new daemon's go back. */
	torch_drain(&sh);
	assert_int_equal(gpb_torch_stats(0, &st), 0);
	assert_true(st.allocs > 0);
	gpb_client *q = th_client(&d, "observer");
	struct th_selfcheck sc;
	th_selfcheck(q, &sc);
	gpb_disconnect(q);
	assert_int_equal(th_daemon_stop(&d), 0);
}

int main(void)
{
	const char *env = getenv("GPB_TEST_SEED");
	seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) ^ (uint64_t)getpid() << 16;
	printf("# seed %" PRIu64 " (GPB_TEST_SEED=%" PRIu64 " replays it)\n", seed, seed);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_cross_thread_frees),
	    cmocka_unit_test(test_lease_per_arena),
	    cmocka_unit_test(test_torch_threads),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
