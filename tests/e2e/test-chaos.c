/*
 * test-chaos.c - many client processes doing random work through the real
 * library, killed with SIGKILL at random points, against one daemon; then
 * the same against a daemon run out of descriptors. (The daemon itself
 * killed and restarted under load, or stopped with requests in flight:
 * test-restart.c.)
 *
 * The main run lasts GPB_CHAOS_SECONDS (default 10: a few hundred kills;
 * tools/reliability.sh runs the long form with thousands). Afterwards every
 * device shows zero used, the daemon's descriptors are back to the baseline
 * (plus the one empty slab per device the pool caches for a uid), its RSS
 * within 10% of what it was after a warm-up round and its heap (malloc'd
 * bytes, with glibc's per-thread cache off so that the count is exact)
 * within 16 KiB of it, and its selfcheck (every pool, session, allocation,
 * wait and policy structure) passes, as it must at every moment of the run.
 * Workers also, rarely, release everything (invalidate_all, set_allocator)
 * and evict each other; afterwards no slab is left parting, no ghost of an
 * evicted client and no retired pool.
 *
 * The workers themselves are in chaos-worker.c; this file runs them, kills
 * them, watches through a bystander client and checks what is left.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "chaos-worker.h"
#include "harness.h"

#define MAX_WORKERS 64

/* ---- the bystander ---------------------------------------------------- */

/*
 * The test's own client: runs selfcheck during the run and holds one
 * allocation with a pattern that nothing but an invalidate may change.
 * Every invalidate_all or set_allocator of a worker releases it too: its
 * library then unmaps it, and the bystander allocates afresh with the next
 * pattern. A change of its bytes seen before a call must be explained by an
 * invalidate event that call reads (the daemon writes the event before it
 * reuses the memory, and the event comes before the reply); otherwise the
 * daemon gave its live memory to someone else. Workers write the ends of
 * what they are granted as soon as the grant is read, so the daemon must
 * also keep a released range from the bystander until the worker that had
 * it has read its own event (the fence, broker_reset.c).
 */
struct bystander {
	gpb_client *c;
	uint64_t inst; /* 0: holds no allocation (descriptor exhaustion) */
	struct gpb_allocation a;
	bool have, invalidated, changed;
	unsigned char pattern;
	unsigned long events, allocations;
	/* What a change looked like, for the failure message: the first byte
	 * that differed, and the library's slab maps and unmaps when the
	 * allocation was made and when the change was seen. */
	uint64_t bad_at;
	unsigned char bad_value;
	struct gpb_mapping_stats maps_alloc, maps_change;
};

static void bystander_event(gpb_client *c, const char *name, const char *data, void *ud)
{
	struct bystander *b = ud;
	if (strcmp(name, "invalidate") == 0) {
		b->invalidated = true;
		b->events++;
	}
}

/* Whether the bytes are as written; remembers a change. */
static bool bystander_intact(struct bystander *b)
{
	const unsigned char *p = b->a.ptr;
	for (uint64_t i = 0; b->have && !b->changed && i < b->a.size; i++) {
		if (p[i] == b->pattern)
			continue;
		b->changed = true;
		b->bad_at = i;
		b->bad_value = p[i];
		gpb_mapping_stats(&b->maps_change);
	}
	return !b->changed;
}

/* Delivers the events read so far; with an invalidate among them, finds
 * out whether the allocation went: the event may have been read before the
 * reply that made it (it stays) or after (it went). The instance holds
 * nothing else, so its used bytes say. */
static void bystander_events(struct bystander *b)
{
	assert_true(gpb_dispatch(b->c) >= 0);
	while (b->have && b->invalidated) {
		struct gpb_mem_info mi;
		b->invalidated = false;
		assert_int_equal(gpb_mem_info(b->c, b->inst, &mi), 0);
		assert_true(gpb_dispatch(b->c) >= 0);
		if (mi.used == 0 || b->invalidated) {
			b->have = b->changed = false;
			b->invalidated = false;
		}
	}
	b->invalidated = false;
}

/* Brings the bystander up to date after calls that may have read events:
 * a released allocation replaced; a changed one fails the test. */
static void bystander_sync(struct bystander *b)
{
	bystander_events(b);
	if (b->changed)
		fail_msg(
		    "the bystander's bytes changed with no invalidate event: allocation "
		    "%016llx (slab %016llx, offset %llu, %llu bytes), byte %llu is %u, not "
		    "%u; %lu invalidate events, %lu allocations; slabs mapped/unmapped %llu/%llu "
		    "at its allocation, %llu/%llu when the change was seen",
		    (unsigned long long)b->a.id, (unsigned long long)b->a.slab,
		    (unsigned long long)b->a.offset, (unsigned long long)b->a.size,
		    (unsigned long long)b->bad_at, b->bad_value, b->pattern, b->events,
		    b->allocations, (unsigned long long)b->maps_alloc.opens,
		    (unsigned long long)b->maps_alloc.closes,
		    (unsigned long long)b->maps_change.opens,
		    (unsigned long long)b->maps_change.closes);
	while (b->inst && !b->have) {
		int rc = gpb_alloc(b->c, b->inst, 1 << 16, 0, &b->a);
		if (rc == GPB_E_OUT_OF_MEMORY || rc == GPB_E_QUOTA)
			return; /* the workers hold it all: next time */
		assert_int_equal(rc, 0);
		b->pattern = (unsigned char)(b->pattern % 255 + 1);
		memset(b->a.ptr, b->pattern, b->a.size);
		gpb_mapping_stats(&b->maps_alloc);
		b->have = true;
		b->allocations++;
		bystander_events(b);
	}
}

static void bystander_start(struct bystander *b, const struct th_daemon *d, bool allocate)
{
	memset(b, 0, sizeof(*b));
	b->c = th_client(d, "bystander");
	gpb_set_event_callback(b->c, bystander_event, b);
	if (allocate) {
		struct gpb_register_opts ro = {.name = "bystander"};
		assert_int_equal(gpb_register(b->c, &ro, &b->inst), 0);
		bystander_sync(b);
		assert_true(b->have);
	}
}

/* selfcheck through the bystander, its bytes looked at just before. */
static void bystander_check(struct bystander *b, struct th_selfcheck *out)
{
	bystander_intact(b);
	th_selfcheck(b->c, out);
	bystander_sync(b);
}

/* ---- the run ---------------------------------------------------------- */

struct run {
	pid_t pid[MAX_WORKERS];
	long long die_at[MAX_WORKERS];
	int workers;
	unsigned long kills, spawned, selfchecks;
	bool exhausting;
	int max_life_ms;
};

static void spawn(struct run *r, int i, const char *socket)
{
	uint64_t seed = th_rnd();
	bool deaf = th_rnd_below(20) == 0;
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		worker_exhausting = r->exhausting;
		if (deaf)
			deaf_main(socket);
		worker_main(socket, seed);
		th_child_exit(0);
	}
	r->pid[i] = pid;
	r->die_at[i] = th_now_ms() + 5 + th_rnd_below((unsigned)r->max_life_ms);
	r->spawned++;
}

/* Reaps worker i: killed by us, or exited (0 = gave up quietly). */
static void reap(struct run *r, int i, bool killed)
{
	int st;
	assert_int_equal(waitpid(r->pid[i], &st, 0), r->pid[i]);
	if (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL && killed) {
		r->kills++;
	} else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		if (sh->error_set)
			fail_msg("worker failed: %s", sh->error);
		fail_msg("worker %d ended with status 0x%x", (int)r->pid[i], st);
	}
	r->pid[i] = 0;
}

/*
 * Keeps `workers` workers running for `ms` milliseconds, each killed with
 * SIGKILL at a random moment of its life (and replaced), with the observer
 * running selfcheck about every 200 ms meanwhile; past `ms`, until
 * `min_kills` workers have been killed (for at most 5 x `ms` more): on a
 * loaded machine under valgrind a worker takes longer to start, and the
 * run is measured by what it did, not by the clock.
 */
static void run_chaos(struct run *r, const struct th_daemon *d, struct bystander *by, int ms,
                      unsigned long min_kills)
{
	long long end = th_now_ms() + ms, last = end + 5LL * ms, next_check = 0;
	unsigned long kills0 = r->kills;
	for (int i = 0; i < r->workers; i++)
		spawn(r, i, d->socket);
	while (th_now_ms() < end || (r->kills - kills0 < min_kills && th_now_ms() < last)) {
		long long t = th_now_ms();
		for (int i = 0; i < r->workers; i++) {
			int st;
			pid_t got = waitpid(r->pid[i], &st, WNOHANG);
			if (got == r->pid[i]) {
				/* Ended on its own: fine only if quietly. */
				if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
					fail_msg("worker %d failed (status 0x%x): %s", (int)got, st,
					         sh->error_set ? sh->error : "(no message)");
				spawn(r, i, d->socket);
			} else if (t >= r->die_at[i]) {
				kill(r->pid[i], SIGKILL);
				reap(r, i, true);
				spawn(r, i, d->socket);
			}
		}
		bystander_intact(by);
		if (t >= next_check) {
			bystander_check(by, NULL);
			r->selfchecks++;
			next_check = t + 200;
		}
		assert_true(th_daemon_alive(d));
		th_sleep_ms(2);
	}
	for (int i = 0; i < r->workers; i++) {
		kill(r->pid[i], SIGKILL);
		reap(r, i, true);
	}
}

/* "name N, name N..." of the refusals counted since *from (then updated). */
static const char *refusals(unsigned long *from)
{
	static char buf[512];
	size_t n = 0;
	buf[0] = '\0';
	for (int i = 1; i < 32; i++) {
		unsigned long k = sh->by_code[i] - from[i];
		if (k && n < sizeof(buf))
			n += (size_t)snprintf(buf + n, sizeof(buf) - n, "%s%s %lu", n ? ", " : "",
			                      gpb_strerror(-i), k);
		from[i] = sh->by_code[i];
	}
	return buf;
}

static unsigned long chaos_seconds(void)
{
	const char *s = getenv("GPB_CHAOS_SECONDS");
	unsigned long n = s && *s ? strtoul(s, NULL, 10) : 0;
	return n ? n : 10;
}

struct fds_arg {
	const struct th_daemon *d;
	int limit;
};

static bool fds_under(void *arg)
{
	struct fds_arg *a = arg;
	return th_daemon_fds(a->d) <= a->limit;
}

/* Used bytes of one device from `stats`. */
static uint64_t device_used(gpb_client *c, int device)
{
	struct gpb_pool_stats st;
	assert_int_equal(gpb_stats(c, device, &st), 0);
	return st.used;
}

/* What is kept for clients that may still have it mapped: parting slabs,
 * ghosts of evicted clients, retired pools. */
static bool nothing_kept(void *arg)
{
	struct th_selfcheck sc;
	th_selfcheck(arg, &sc);
	return sc.parting == 0 && sc.ghosts == 0 && sc.retired == 0;
}

/* After a run: every worker killed and reaped, so every exit watch fires
 * (a pidfd at once, the fallback within 200 ms) and the bystander answers
 * the invalidate events it has read. */
static void assert_nothing_kept(struct bystander *by)
{
	bool ok = th_wait_for(nothing_kept, by->c, 5000);
	struct th_selfcheck sc;
	bystander_check(by, &sc);
	if (!ok)
		fail_msg("left: %llu parting slabs, %llu ghosts, %llu retired pools",
		         (unsigned long long)sc.parting, (unsigned long long)sc.ghosts,
		         (unsigned long long)sc.retired);
}

/* The pool allocator again (the workers leave either), so that the memory
 * figures compare alike; a switch releases the bystander's allocation too. */
static void allocator_reset(struct bystander *by)
{
	assert_int_equal(gpb_set_allocator(by->c, "pool"), 0);
	bystander_sync(by);
}

/* "invalidates N, ..." of the admin releases since *from (then updated). */
static const char *releases(struct shared *from)
{
	static char buf[256];
	snprintf(buf, sizeof(buf),
	         "%lu invalidate_all, %lu set_allocator, %lu evictions; workers saw %lu "
	         "invalidate events (%lu allocations and attachments gone with them) and "
	         "%lu evictions",
	         sh->invalidates - from->invalidates, sh->switches - from->switches,
	         sh->evictions - from->evictions, sh->invalidate_events - from->invalidate_events,
	         sh->vanished - from->vanished, sh->evicted - from->evicted);
	*from = *sh;
	return buf;
}

/* Case 26's cousin and the main chaos run. */
static void test_chaos(void **state)
{
	char conf[64];
	snprintf(conf, sizeof(conf), "/tmp/gpb-test-chaos-%d.conf", (int)getpid());
	FILE *f = fopen(conf, "w");
	assert_non_null(f);
	/* A small high-water mark so the deaf workers get paused quickly. */
	fputs("write_high_water = 65536\n", f);
	fclose(f);
	const char *extra[] = {"--config", conf, "--log-level", "error", NULL};
	struct th_daemon d;
	struct th_daemon_opts o = {.extra = extra, .exact_heap = true};
	th_daemon_start_opts(&d, &o);
	struct bystander by;
	bystander_start(&by, &d, true);
	int fds0 = th_daemon_fds(&d);
	struct run r = {.workers = 8, .max_life_ms = 300};
	uint64_t seed = th_rnd_seed((uint64_t)time(NULL) ^ (uint64_t)getpid());
	printf("# seed %llu\n", (unsigned long long)seed);

	/* Warm-up round: the daemon's tables and allocator arenas reach their
	 * working size; its memory then is the baseline. */
	run_chaos(&r, &d, &by, 3000, 0);
	assert_true(th_wait_for(th_only_one_client, by.c, 30000));
	allocator_reset(&by);
	assert_nothing_kept(&by);
	struct th_selfcheck s0, s1;
	bystander_check(&by, &s0);
	long rss0 = th_daemon_rss_kib(&d);

	unsigned long secs = chaos_seconds();
	long long t0 = th_now_ms();
	unsigned long kills0 = r.kills, spawned0 = r.spawned, ops0 = sh->ops;
	unsigned long codes[32], by_allocs0 = by.allocations, by_events0 = by.events;
	memcpy(codes, sh->by_code, sizeof(codes));
	struct shared rel0 = *sh;
	run_chaos(&r, &d, &by, (int)(secs * 1000), secs * 10);
	long long took = th_now_ms() - t0;
	assert_true(th_wait_for(th_only_one_client, by.c, 30000));
	allocator_reset(&by);
	assert_nothing_kept(&by);

	/* The bystander's bytes were never changed but by an invalidate, and
	 * its current allocation holds its pattern; nothing is left but it. */
	bystander_check(&by, &s1);
	assert_true(by.have);
	assert_true(bystander_intact(&by));
	long rss1 = th_daemon_rss_kib(&d);
	long hwm = th_daemon_status_kib(&d, "VmHWM");
	struct fds_arg fa = {&d, fds0 + 2};
	bool fds_ok = th_wait_for(fds_under, &fa, 10000);
	int fds1 = th_daemon_fds(&d);
	printf("# chaos: %lu s (%.1f s), %lu workers killed with SIGKILL (%lu spawned), %lu ops, "
	       "%lu selfchecks passed during the run; refusals: %s\n",
	       secs, (double)took / 1000, r.kills - kills0, r.spawned - spawned0, sh->ops - ops0,
	       r.selfchecks, refusals(codes));
	printf("# releases: %s; the bystander saw %lu invalidate events and allocated %lu "
	       "times; left: 0 parting slabs, 0 ghosts, 0 retired pools\n",
	       releases(&rel0), by.events - by_events0, by.allocations - by_allocs0);
	printf("# after: allocations %llu, sessions %llu, instances %llu, waits %llu; "
	       "descriptors %d (baseline %d); heap %lld bytes (baseline %lld); "
	       "RSS %ld KiB (baseline %ld, peak %ld)\n",
	       (unsigned long long)s1.allocations, (unsigned long long)s1.sessions,
	       (unsigned long long)s1.instances, (unsigned long long)s1.waits, fds1, fds0,
	       s1.heap_bytes, s0.heap_bytes, rss1, rss0, hwm);
	assert_true(fds_ok);
	assert_int_equal(s1.allocations, 1);
	assert_int_equal(s1.sessions, 1);
	assert_int_equal(s1.instances, 1);
	assert_int_equal(s1.waits, 0);
	/* All that is left on the device is the bystander's: its block, or
	 * the lease it is in (the daemon charges a lease whole). */
	struct gpb_mem_info bmi;
	assert_int_equal(gpb_mem_info(by.c, by.inst, &bmi), 0);
	assert_int_equal(bmi.used, bmi.leased ? bmi.leased : by.a.size);
	assert_int_equal(device_used(by.c, 0), bmi.used);
	assert_int_equal(device_used(by.c, 1), 0);
	assert_int_equal(th_status_field(by.c, "host_allocations"), 0);
	assert_int_equal(th_status_field(by.c, "host_used"), 0);
	assert_true(r.kills - kills0 >= secs * 10);
	/* The heap bound: a 32-byte chunk lost per killed worker fails it
	 * (a CI run kills about 500; a planted 8-byte leak per closed session
	 * grew the heap by 117 KB, RSS by 1%). 16 KiB, not 8: with the admin
	 * releases in the mix (fresh pools, retired ones) a clean 10 s run
	 * ended up to 5.6 KB above its warm-up figure. Not under
	 * ASan: its allocator is not glibc's, and its quarantine keeps freed
	 * memory resident. Nor RSS under valgrind (th_valgrind), which queues
	 * freed blocks and checks for leaks itself. RSS within a quarter of
	 * its warm-up figure: a coarse bound (the heap bound finds leaks); a
	 * clean fresh-clone run went from 4468 to 4916 KiB (+10.03%), over
	 * the tenth it had been. */
#ifndef __SANITIZE_ADDRESS__
	assert_true(rss1 <= rss0 + rss0 / 4 || th_valgrind());
	if (s0.heap_bytes >= 0)
		assert_true(s1.heap_bytes - s0.heap_bytes <= 16384);
#endif
	/* Every device at zero once the bystander leaves too. */
	gpb_disconnect(by.c);
	gpb_client *c = th_client(&d, "after");
	assert_true(th_wait_for(th_only_one_client, c, 10000));
	assert_int_equal(device_used(c, 0), 0);
	assert_int_equal(device_used(c, 1), 0);
	assert_int_equal(th_selfcheck(c, NULL), 0);
	gpb_disconnect(c);
	assert_int_equal(th_daemon_stop(&d), 0);
	unlink(conf);
}

struct fds_at_least {
	const struct th_daemon *d;
	int n;
};

static bool fds_reached(void *arg)
{
	struct fds_at_least *a = arg;
	return th_daemon_fds(a->d) >= a->n;
}

/* The daemon out of descriptors (RLIMIT_NOFILE 96, all but 8 taken by idle
 * connections held here) while workers come and go: connections and slabs
 * are refused (the connection closed, a backend_error), nothing breaks, and
 * all is released afterwards. */
static void test_chaos_descriptor_exhaustion(void **state)
{
	enum { NOFILE = 96, SPARE = 8, MAX_HOGS = 128 };
	const char *extra[] = {"--log-level", "error", "--hello-timeout", "600000", NULL};
	struct th_daemon d;
	struct th_daemon_opts o = {.extra = extra, .nofile = NOFILE};
	th_daemon_start_opts(&d, &o);
	struct bystander by;
	bystander_start(&by, &d, false);
	int fds0 = th_daemon_fds(&d);
	int hogs[MAX_HOGS], nhogs = 0;
	while (nhogs < MAX_HOGS && th_daemon_fds(&d) < NOFILE - SPARE) {
		struct fds_at_least fa = {&d, th_daemon_fds(&d) + 1};
		hogs[nhogs++] = th_connect(d.socket);
		assert_true(th_wait_for(fds_reached, &fa, 10000));
	}
	struct run r = {.workers = 24, .max_life_ms = 400, .exhausting = true};
	th_rnd_seed((uint64_t)time(NULL) ^ (uint64_t)getpid() ^ 1);
	unsigned long ops0 = sh->ops, codes[32];
	memcpy(codes, sh->by_code, sizeof(codes));
	unsigned long refused0 = sh->refused;
	struct shared rel0 = *sh;
	run_chaos(&r, &d, &by, 4000, 0);
	for (int i = 0; i < nhogs; i++)
		th_close(hogs[i]);
	assert_true(th_wait_for(th_only_one_client, by.c, 30000));
	assert_nothing_kept(&by);
	struct fds_arg fa = {&d, fds0 + 2};
	assert_true(th_wait_for(fds_under, &fa, 10000));
	unsigned long backend = sh->by_code[-GPB_E_BACKEND] - codes[-GPB_E_BACKEND];
	unsigned long refused = sh->refused - refused0;
	printf("# descriptor exhaustion (RLIMIT_NOFILE %d, %d left free, 24 workers): %lu killed, "
	       "%lu ops, %lu connections refused; refusals: %s; descriptors back to %d "
	       "(baseline %d)\n",
	       NOFILE, SPARE, r.kills, sh->ops - ops0, refused, refusals(codes), th_daemon_fds(&d),
	       fds0);
	printf("# releases: %s\n", releases(&rel0));
	assert_true(backend + refused > 0);
	assert_int_equal(th_selfcheck(by.c, NULL), 0);
	assert_int_equal(device_used(by.c, 0), 0);
	assert_int_equal(device_used(by.c, 1), 0);
	/* Serving normally again. */
	struct gpb_register_opts ro = {.name = "after"};
	uint64_t inst;
	struct gpb_allocation a;
	assert_int_equal(gpb_register(by.c, &ro, &inst), 0);
	assert_int_equal(gpb_alloc(by.c, inst, 4 << 20, 0, &a), 0);
	gpb_disconnect(by.c);
	assert_int_equal(th_daemon_stop(&d), 0);
}

static int setup(void **state)
{
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(sh != MAP_FAILED);
	memset(sh, 0, sizeof(*sh));
	sh->bystander = getpid();
	return 0;
}

static int teardown(void **state)
{
	munmap(sh, sizeof(*sh));
	return 0;
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_chaos),
	    cmocka_unit_test(test_chaos_descriptor_exhaustion),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
