/*
 * test-chaos.c - many client processes doing random work through the real
 * library, killed with SIGKILL at random points, against one daemon; then
 * the daemon killed and restarted under load, stopped with requests in
 * flight, and run out of descriptors.
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
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define MAX_WORKERS 64
#define SHARED_IDS  256 /* allocation ids workers publish for others to attach */
#define MAX_HELD    48

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

static struct shared *sh;

static long long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

static uint64_t rng_state;

static uint64_t rnd(void)
{
	uint64_t x = rng_state;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return rng_state = x;
}

static unsigned rnd_below(unsigned n)
{
	return (unsigned)(rnd() % n);
}

static void rnd_seed(uint64_t seed)
{
	rng_state = seed * 0x9e3779b97f4a7c15ull + 1;
	for (int i = 0; i < 4; i++)
		rnd();
}

/* ---- workers ---------------------------------------------------------- */

/* What a worker may be told without anything being wrong: the daemon
 * refusing for memory, quota, limits and policy, ids gone because their
 * owner was killed. exhausting adds what a daemon out of descriptors says. */
static bool expected(int rc, bool exhausting)
{
	switch (rc) {
	case GPB_OK:
	case GPB_E_OUT_OF_MEMORY:
	case GPB_E_QUOTA:
	case GPB_E_LIMIT:
	case GPB_E_NOT_FOUND:
	case GPB_E_INVALID:
	case GPB_E_TIMEOUT:
		return true;
	case GPB_E_BACKEND:
	case GPB_E_DAEMON_GONE:
	case GPB_E_CONNECT:
	case GPB_E_SYSTEM:
		return exhausting;
	default:
		return false;
	}
}

static bool worker_exhausting;
static struct worker *current; /* this worker process's, for check() */
static bool worker_evicted(void);

/* Records the first unexpected result and ends the worker. */
static void check(int rc, const char *what)
{
	if (expected(rc, worker_exhausting) || (rc == GPB_E_DAEMON_GONE && worker_evicted())) {
		if (rc < 0) {
			__atomic_add_fetch(&sh->errors_expected, 1, __ATOMIC_RELAXED);
			__atomic_add_fetch(&sh->by_code[-rc & 31], 1, __ATOMIC_RELAXED);
		}
		return;
	}
	if (__atomic_exchange_n(&sh->error_set, 1, __ATOMIC_ACQ_REL) == 0)
		snprintf(sh->error, sizeof(sh->error), "pid %d: %s: %s: %s", (int)getpid(), what,
		         gpb_strerror(rc), gpb_last_error());
	th_child_exit(3);
}

struct worker {
	gpb_client *c;
	uint64_t inst[4];
	int ninst;
	struct gpb_allocation held[MAX_HELD];
	int nheld;
	uint64_t attached[8];
	int nattached;
	uint64_t ready[16]; /* ids from allocation_ready, to claim */
	int nready;
	/* held and attached before the current step: an invalidate event
	 * delivered after it may have been read before the step's reply,
	 * which then is newer (and kept). */
	int old_held, old_attached;
	bool evicted; /* the evicted event came: the connection closes */
};

/* Keeps entries [old, *n) of list (of element size sz) and drops the rest;
 * returns how many went. */
static int keep_new(void *list, size_t sz, int *n, int old)
{
	int keep = *n > old ? *n - old : 0, gone = *n - keep;
	memmove(list, (char *)list + (size_t)old * sz, (size_t)keep * sz);
	*n = keep;
	return gone;
}

static void on_event(gpb_client *c, const char *name, const char *data, void *ud)
{
	struct worker *w = ud;
	if (strcmp(name, "evicted") == 0) {
		w->evicted = true;
	} else if (strcmp(name, "invalidate") == 0) {
		/* The library has dropped every mapping: the allocations,
		 * attachments and unclaimed arrays are gone (a free of one
		 * would be not_found). */
		int gone =
		    keep_new(w->held, sizeof(w->held[0]), &w->nheld, w->old_held) +
		    keep_new(w->attached, sizeof(w->attached[0]), &w->nattached, w->old_attached) +
		    w->nready;
		w->nready = 0;
		w->old_held = w->old_attached = 0;
		__atomic_add_fetch(&sh->invalidate_events, 1, __ATOMIC_RELAXED);
		__atomic_add_fetch(&sh->vanished, (unsigned long)gone, __ATOMIC_RELAXED);
	} else if (strcmp(name, "allocation_ready") == 0) {
		for (const char *p = data; (p = strstr(p, "\"id\":\"")) && w->nready < 16; p += 6)
			w->ready[w->nready++] = strtoull(p + 6, NULL, 16);
	}
}

/* Whether this worker was evicted: the events that came before the close
 * are still delivered by gpb_dispatch. */
static bool worker_evicted(void)
{
	if (current && current->c && !current->evicted)
		gpb_dispatch(current->c);
	return current && current->evicted;
}

static void worker_connect(struct worker *w, const char *socket)
{
	memset(w, 0, sizeof(*w));
	int rc = gpb_connect(socket, "chaos", &w->c);
	if (rc < 0 && worker_exhausting) {
		/* Refused for lack of descriptors: nothing to do. */
		__atomic_add_fetch(&sh->refused, 1, __ATOMIC_RELAXED);
		th_child_exit(0);
	}
	check(rc, "connect");
	gpb_set_event_callback(w->c, on_event, w);
}

static void touch(const struct gpb_allocation *a, unsigned char v)
{
	unsigned char *p = a->ptr;
	p[0] = v;
	p[a->size - 1] = v;
}

static void hold(struct worker *w, const struct gpb_allocation *a)
{
	touch(a, (unsigned char)a->id);
	w->held[w->nheld++] = *a;
	__atomic_store_n(&sh->ids[rnd_below(SHARED_IDS)], a->id, __ATOMIC_RELAXED);
}

static uint64_t rnd_size(void)
{
	/* Log-uniform from 256 bytes to 32 MiB (the larger ones get slabs of
	 * their own). */
	return (uint64_t)256 << rnd_below(18) | rnd_below(4096);
}

/* Evicts a random client of another worker (never the bystander, nor a
 * connection that has not said hello yet: its client would see its
 * connect fail for a reason it cannot know). */
static void worker_evict(gpb_client *c)
{
	char *json = NULL, params[64];
	uint64_t ids[64];
	unsigned n = 0;
	int rc = gpb_request(c, "clients", NULL, &json);
	check(rc, "clients");
	if (rc < 0)
		return;
	for (const char *p = json; (p = strstr(p, "\"session\":\"")) && n < 64;) {
		uint64_t id = strtoull(p + 11, NULL, 16);
		const char *end = strchr(p, '}'), *pid = strstr(p, "\"pid\":");
		const char *name = strstr(p, "\"name\":\"chaos\"");
		p += 11;
		if (!end || !pid || pid > end || !name || name > end)
			continue;
		long v = strtol(pid + 6, NULL, 10);
		if (v != getpid() && v != sh->bystander)
			ids[n++] = id;
	}
	gpb_string_free(json);
	if (!n)
		return;
	snprintf(params, sizeof(params), "{\"session\":\"%016llx\"}",
	         (unsigned long long)ids[rnd_below(n)]);
	rc = gpb_request(c, "evict", params, &json);
	check(rc, "evict");
	gpb_string_free(json);
	if (rc == 0)
		__atomic_add_fetch(&sh->evictions, 1, __ATOMIC_RELAXED);
}

/* One of the admin releases, each about once in RARE ops (per kind). */
#define RARE 300
static void worker_admin(gpb_client *c, unsigned kind)
{
	int rc;
	if (kind == 0) {
		rc = gpb_invalidate_all(c);
		check(rc, "invalidate_all");
		if (rc == 0)
			__atomic_add_fetch(&sh->invalidates, 1, __ATOMIC_RELAXED);
	} else if (kind == 1) {
		/* Alternating across the workers, so that most calls switch. */
		unsigned long turn = __atomic_fetch_add(&sh->switch_turn, 1, __ATOMIC_RELAXED);
		rc = gpb_set_allocator(c, turn & 1 ? "direct" : "pool");
		check(rc, "set_allocator");
		if (rc == 0)
			__atomic_add_fetch(&sh->switches, 1, __ATOMIC_RELAXED);
	} else {
		worker_evict(c);
	}
}

/* Forgets a freed allocation or a detached id. By id, not by index: an
 * invalidate event read during the call (or by check()) may have emptied
 * the lists already. */
static void drop_held(struct worker *w, uint64_t id)
{
	for (int i = 0; i < w->nheld; i++)
		if (w->held[i].id == id) {
			w->held[i] = w->held[--w->nheld];
			return;
		}
}

static void drop_attached(struct worker *w, uint64_t id)
{
	for (int i = 0; i < w->nattached; i++)
		if (w->attached[i] == id) {
			w->attached[i] = w->attached[--w->nattached];
			return;
		}
}

static void worker_step(struct worker *w, const char *socket)
{
	static const char *const groups[] = {"default", "g0", "g1", "g2"};
	struct gpb_allocation a;
	gpb_client *c = w->c;
	unsigned op = rnd_below(100), rare = rnd_below(RARE);
	uint64_t inst = w->ninst ? w->inst[rnd_below((unsigned)w->ninst)] : 0;
	int rc;
	w->old_held = w->nheld;
	w->old_attached = w->nattached;
	if (rare < 3) {
		worker_admin(c, rare);
	} else if (w->ninst == 0 || (op < 4 && w->ninst < 4)) {
		struct gpb_register_opts o = {.name = "chaos",
		                              .device = (int)rnd_below(2),
		                              .proportion =
		                                  rnd_below(3) ? 0 : 0.05 * (1 + rnd_below(6)),
		                              .group = groups[rnd_below(4)]};
		rc = gpb_register(c, &o, &w->inst[w->ninst]);
		check(rc, "register");
		w->ninst += rc == 0;
	} else if (op < 31 && w->nheld < MAX_HELD) {
		uint64_t align = rnd_below(8) ? 0 : (uint64_t)256 << rnd_below(14);
		rc = gpb_alloc(c, inst, rnd_size(), align, &a);
		check(rc, "alloc");
		if (rc == 0)
			hold(w, &a);
	} else if (op < 34 && w->nheld < MAX_HELD) {
		/* Host memory (its own memory file per allocation), freed by
		 * the same gpb_free; attaching its id is a not_found. */
		rc = gpb_alloc_host(c, inst, 1 + rnd_below(1 << 20),
		                    rnd_below(2) ? GPB_HOST_PINNED : GPB_HOST_MAPPED, &a);
		check(rc, "alloc_host");
		if (rc == 0)
			hold(w, &a);
	} else if (op < 37 && w->nheld < MAX_HELD) {
		rc = gpb_alloc_wait(c, inst, rnd_size(), 0, 1 + rnd_below(30), &a);
		check(rc, "alloc_wait");
		if (rc == 0)
			hold(w, &a);
	} else if (op < 60 && w->nheld > 0) {
		uint64_t id = w->held[rnd_below((unsigned)w->nheld)].id;
		check(gpb_free(c, id), "free");
		drop_held(w, id);
	} else if (op < 64 && w->nattached < 8) {
		uint64_t id = __atomic_load_n(&sh->ids[rnd_below(SHARED_IDS)], __ATOMIC_RELAXED);
		if (!id)
			return;
		rc = gpb_attach(c, id, &a);
		check(rc, "attach");
		if (rc == 0) {
			volatile unsigned char *p = a.ptr;
			(void)p[0];
			(void)p[a.size - 1];
			w->attached[w->nattached++] = id;
		}
	} else if (op < 68 && w->nattached > 0) {
		uint64_t id = w->attached[rnd_below((unsigned)w->nattached)];
		check(gpb_detach(c, id), "detach");
		drop_attached(w, id);
	} else if (op < 70) {
		int i = (int)rnd_below((unsigned)w->ninst);
		/* Busy (it holds allocations) is an expected refusal. */
		rc = gpb_unregister(c, w->inst[i]);
		check(rc, "unregister");
		if (rc == 0)
			w->inst[i] = w->inst[--w->ninst];
	} else if (op < 73) {
		check(gpb_set_proportion(c, inst, 0.02 * (1 + rnd_below(25)), NULL),
		      "set_proportion");
	} else if (op < 75) {
		check(gpb_set_auto(c, inst, NULL), "set_auto");
	} else if (op < 77) {
		check(gpb_set_group(c, inst, groups[rnd_below(4)], NULL), "set_group");
	} else if (op < 80) {
		struct gpb_array_request r[2] = {
		    {.label = "state",
		     .shape = {1 + rnd_below(20000), 1 + rnd_below(64)},
		     .ndim = 2,
		     .elem_size = 8},
		    {.label = "params",
		     .shape = {1 + rnd_below(512)},
		     .ndim = 1,
		     .elem_size = 4,
		     .unchunkable = 1},
		};
		rc = gpb_queue_request(c, inst, r, 1 + rnd_below(2));
		check(rc < 0 ? rc : 0, "queue_request");
	} else if (op < 82) {
		rc = gpb_allocate_queue(c, inst, NULL);
		check(rc < 0 ? rc : 0, "allocate_queue");
	} else if (op < 85) {
		rc = gpb_dispatch(c);
		check(rc < 0 ? rc : 0, "dispatch");
		while (w->nready > 0 && w->nheld < MAX_HELD) {
			rc = gpb_claim(c, w->ready[--w->nready], &a);
			check(rc, "claim");
			if (rc == 0)
				hold(w, &a);
		}
	} else if (op < 86) {
		rc = gpb_free_label(c, 0, rnd_below(2) ? "state" : "params");
		/* A later free of one of those answers not_found (expected). */
		check(rc < 0 ? rc : 0, "free_label");
	} else if (op < 91) {
		struct gpb_mem_info mi;
		struct gpb_pool_stats st;
		struct gpb_policy_info pi;
		struct gpb_group_info gi;
		check(gpb_mem_info(c, inst, &mi), "mem_info");
		check(gpb_stats(c, (int)rnd_below(2), &st), "stats");
		check(gpb_policy_info(c, (int)rnd_below(2), &pi), "policy_info");
		check(gpb_group_info(c, groups[rnd_below(4)], &gi), "group_info");
	} else if (op < 92) {
		check(gpb_set_mode(c, rnd_below(2) ? GPB_MODE_ACTIVE : GPB_MODE_PASSIVE),
		      "set_mode");
	} else if (op < 93) {
		if (rnd_below(2))
			check(gpb_set_limit(c, -1, 0, 0), "set_limit");
		else
			check(gpb_set_limit(c, (int)rnd_below(2), 0, 0.5 + 0.1 * rnd_below(6)),
			      "set_limit");
	} else if (op < 94) {
		/* Leave and come back. */
		gpb_disconnect(c);
		worker_connect(w, socket);
	} else if (op < 96 && w->nheld > 0) {
		/* Names from a small set, so that they collide and get opened
		 * while their exporters free them or are killed. */
		char name[8];
		snprintf(name, sizeof(name), "n%u", rnd_below(8));
		check(gpb_export(c, w->held[rnd_below((unsigned)w->nheld)].id, name, -1), "export");
	} else if (op < 98 && w->nattached < 8) {
		char name[8];
		snprintf(name, sizeof(name), "n%u", rnd_below(8));
		rc = gpb_open_shared(c, name, &a);
		check(rc, "open_shared");
		if (rc == 0) {
			volatile unsigned char *p = a.ptr;
			(void)p[0];
			(void)p[a.size - 1];
			w->attached[w->nattached++] = a.id;
		}
	} else {
		/* Pipelined requests from a second thread of work are not in
		 * the library's model; a burst of cheap ones instead. */
		for (int i = 0; i < 4; i++) {
			char *json = NULL;
			check(gpb_request(c, "status", NULL, &json), "status");
			gpb_string_free(json);
		}
	}
}

/* A worker that does random work until it is killed. */
static void worker_main(const char *socket, uint64_t seed)
{
	struct worker w;
	rnd_seed(seed);
	current = &w;
	worker_connect(&w, socket);
	for (;;) {
		worker_step(&w, socket);
		__atomic_add_fetch(&sh->ops, 1, __ATOMIC_RELAXED);
		/* Events now, so that an invalidate's losses are known before
		 * the next step picks an id. */
		if (!w.evicted) {
			int rc = gpb_dispatch(w.c);
			check(rc < 0 ? rc : 0, "dispatch");
		}
		if (w.evicted) {
			/* Every call since said daemon gone; start over. */
			__atomic_add_fetch(&sh->evicted, 1, __ATOMIC_RELAXED);
			gpb_disconnect(w.c);
			worker_connect(&w, socket);
		}
	}
}

/* A worker that says hello and then only writes requests, never reading
 * a reply: paused by the daemon, dropped by it or killed here. */
static void deaf_main(const char *path)
{
	/* No cmocka here: an assertion in a forked worker would run the rest
	 * of the test in it. */
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	memcpy(sa.sun_path, path, strlen(path) + 1);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		th_child_exit(worker_exhausting ? 0 : 4);
	static const char hello[] =
	    "{\"id\":\"h\",\"method\":\"hello\",\"params\":{\"versions\":[1]}}\n";
	static const char req[] = "{\"id\":\"d\",\"method\":\"status\"}\n";
	if (send(fd, hello, sizeof(hello) - 1, MSG_NOSIGNAL) < 0)
		th_child_exit(worker_exhausting ? 0 : 4);
	for (;;) {
		if (send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL) < 0)
			th_child_exit(0); /* dropped */
	}
}

/* ---- the bystander ---------------------------------------------------- */

/*
 * The test's own client: runs selfcheck during the run and holds one
 * allocation with a pattern that nothing but an invalidate may change.
 * Every invalidate_all or set_allocator of a worker releases it too: its
 * library then unmaps it, and the bystander allocates afresh with the next
 * pattern. A change of its bytes seen before a call must be explained by an
 * invalidate event that call reads (the daemon writes the event before it
 * reuses the memory, and the event comes before the reply); otherwise the
 * daemon gave its live memory to someone else.
 */
struct bystander {
	gpb_client *c;
	uint64_t inst; /* 0: holds no allocation (descriptor exhaustion) */
	struct gpb_allocation a;
	bool have, invalidated, changed;
	unsigned char pattern;
	unsigned long events, allocations;
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
	for (uint64_t i = 0; b->have && !b->changed && i < b->a.size; i++)
		b->changed = p[i] != b->pattern;
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
		fail_msg("the bystander's bytes changed with no invalidate event");
	while (b->inst && !b->have) {
		int rc = gpb_alloc(b->c, b->inst, 1 << 16, 0, &b->a);
		if (rc == GPB_E_OUT_OF_MEMORY || rc == GPB_E_QUOTA)
			return; /* the workers hold it all: next time */
		assert_int_equal(rc, 0);
		b->pattern = (unsigned char)(b->pattern % 255 + 1);
		memset(b->a.ptr, b->pattern, b->a.size);
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
	uint64_t seed = rnd();
	bool deaf = rnd_below(20) == 0;
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
	r->die_at[i] = now_ms() + 5 + rnd_below((unsigned)r->max_life_ms);
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
 * running selfcheck about every 200 ms meanwhile.
 */
static void run_chaos(struct run *r, const struct th_daemon *d, struct bystander *by, int ms)
{
	long long end = now_ms() + ms, next_check = 0;
	for (int i = 0; i < r->workers; i++)
		spawn(r, i, d->socket);
	while (now_ms() < end) {
		long long t = now_ms();
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
		sleep_ms(2);
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

static gpb_client *waiting_client;

static bool only_one_client(void *arg)
{
	return th_status_field(waiting_client, "clients") == 1;
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
	rnd_seed((uint64_t)time(NULL) ^ (uint64_t)getpid());
	printf("# seed %llu\n", (unsigned long long)rng_state);

	/* Warm-up round: the daemon's tables and allocator arenas reach their
	 * working size; its memory then is the baseline. */
	run_chaos(&r, &d, &by, 3000);
	waiting_client = by.c;
	assert_true(th_wait_for(only_one_client, NULL, 30000));
	allocator_reset(&by);
	assert_nothing_kept(&by);
	struct th_selfcheck s0, s1;
	bystander_check(&by, &s0);
	long rss0 = th_daemon_rss_kib(&d);

	unsigned long secs = chaos_seconds();
	long long t0 = now_ms();
	unsigned long kills0 = r.kills, spawned0 = r.spawned, ops0 = sh->ops;
	unsigned long codes[32], by_allocs0 = by.allocations, by_events0 = by.events;
	memcpy(codes, sh->by_code, sizeof(codes));
	struct shared rel0 = *sh;
	run_chaos(&r, &d, &by, (int)(secs * 1000));
	long long took = now_ms() - t0;
	assert_true(th_wait_for(only_one_client, NULL, 30000));
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
	assert_int_equal(device_used(by.c, 0), by.a.size);
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
	 * freed blocks and checks for leaks itself. */
#ifndef __SANITIZE_ADDRESS__
	assert_true(rss1 <= rss0 + rss0 / 10 || th_valgrind());
	if (s0.heap_bytes >= 0)
		assert_true(s1.heap_bytes - s0.heap_bytes <= 16384);
#endif
	/* Every device at zero once the bystander leaves too. */
	gpb_disconnect(by.c);
	gpb_client *c = th_client(&d, "after");
	waiting_client = c;
	assert_true(th_wait_for(only_one_client, NULL, 10000));
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
	rnd_seed((uint64_t)time(NULL) ^ (uint64_t)getpid() ^ 1);
	unsigned long ops0 = sh->ops, codes[32];
	memcpy(codes, sh->by_code, sizeof(codes));
	unsigned long refused0 = sh->refused;
	struct shared rel0 = *sh;
	run_chaos(&r, &d, &by, 4000);
	for (int i = 0; i < nhogs; i++)
		th_close(hogs[i]);
	waiting_client = by.c;
	assert_true(th_wait_for(only_one_client, NULL, 30000));
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

/* ---- daemon killed and restarted under load (case 26) ------------------ */

/* Reports one byte to the parent. */
static void report(int fd, char what)
{
	if (write(fd, &what, 1) != 1)
		th_child_exit(9);
}

/* Allocates and frees until the daemon dies: every call then says
 * GPB_E_DAEMON_GONE; reconnects to the new daemon and works there. */
static int restart_worker(const char *socket, int out)
{
	gpb_client *c = NULL;
	struct gpb_register_opts ro = {.name = "loader"};
	uint64_t inst;
	struct gpb_allocation a;
	if (gpb_connect(socket, "loader", &c) || gpb_register(c, &ro, &inst))
		return 1;
	report(out, 'S');
	int rc;
	for (;;) {
		rc = gpb_alloc(c, inst, 1 << (10 + rnd_below(10)), 0, &a);
		if (rc == 0)
			rc = gpb_free(c, a.id);
		if (rc == GPB_E_DAEMON_GONE)
			break;
		if (rc != 0)
			return 2;
	}
	/* Distinct and sticky: every later call says the same. */
	if (gpb_alloc(c, inst, 4096, 0, &a) != GPB_E_DAEMON_GONE ||
	    gpb_free(c, a.id) != GPB_E_DAEMON_GONE)
		return 3;
	gpb_disconnect(c);
	report(out, 'G');
	long long give_up = now_ms() + 60000;
	while ((rc = gpb_connect(socket, "loader", &c)) != 0) {
		if (rc != GPB_E_CONNECT && rc != GPB_E_DAEMON_GONE)
			return 4;
		if (now_ms() > give_up)
			return 5;
		sleep_ms(5);
	}
	if (gpb_register(c, &ro, &inst))
		return 6;
	for (int i = 0; i < 200; i++) {
		if (gpb_alloc(c, inst, 1 << (10 + rnd_below(10)), 0, &a) || gpb_free(c, a.id))
			return 7;
	}
	report(out, 'R');
	gpb_disconnect(c);
	return 0;
}

/* Reads n reports of kind what from fd (other kinds fail the test). */
static void await_reports(int fd, char what, int n)
{
	for (int got = 0; got < n;) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		assert_int_equal(poll(&pfd, 1, 60000), 1);
		char c;
		assert_int_equal(read(fd, &c, 1), 1);
		if (c != what)
			fail_msg("expected report '%c', got '%c'", what, c);
		got++;
	}
}

static void test_daemon_sigkill_restart(void **state)
{
	enum { N = 8 };
	const char *extra[] = {"--log-level", "error", NULL};
	struct th_daemon d;
	struct th_daemon_opts o = {.extra = extra};
	th_daemon_start_opts(&d, &o);
	int pfd[2];
	assert_int_equal(pipe(pfd), 0);
	pid_t pids[N];
	for (int i = 0; i < N; i++) {
		pids[i] = fork();
		assert_true(pids[i] >= 0);
		if (pids[i] == 0) {
			close(pfd[0]);
			rnd_seed((uint64_t)getpid());
			th_child_exit(restart_worker(d.socket, pfd[1]));
		}
	}
	close(pfd[1]);
	await_reports(pfd[0], 'S', N);
	sleep_ms(300); /* under load */
	th_daemon_kill(&d);
	await_reports(pfd[0], 'G', N);
	/* The socket file is stale; a new daemon replaces it and serves. */
	o.restart = true;
	th_daemon_start_opts(&d, &o);
	await_reports(pfd[0], 'R', N);
	for (int i = 0; i < N; i++) {
		int st;
		assert_int_equal(waitpid(pids[i], &st, 0), pids[i]);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			fail_msg("worker %d: status 0x%x", i, st);
	}
	close(pfd[0]);
	gpb_client *c = th_client(&d, "after");
	waiting_client = c;
	assert_true(th_wait_for(only_one_client, NULL, 10000));
	assert_int_equal(th_selfcheck(c, NULL), 0);
	gpb_disconnect(c);
	printf("# daemon killed under load by %d clients: all saw GPB_E_DAEMON_GONE, "
	       "reconnected to its successor and worked there\n",
	       N);
	assert_int_equal(th_daemon_stop(&d), 0);
}

/* ---- SIGTERM with requests in flight (case 27) ------------------------ */

/* Works until the daemon goes; every call is answered: a result, or
 * shutting_down, or daemon gone. Reports 'W' when a waiting alloc was
 * answered shutting_down. */
static int sigterm_worker(const char *socket, int out, bool waiter)
{
	gpb_client *c = NULL;
	struct gpb_register_opts ro = {.name = "inflight"};
	uint64_t inst;
	struct gpb_allocation a;
	if (gpb_connect(socket, "inflight", &c) || gpb_register(c, &ro, &inst))
		return 1;
	report(out, 'S');
	for (;;) {
		int rc;
		if (waiter) {
			/* The device is full (the filler holds it): waits. */
			rc = gpb_alloc_wait(c, inst, 64 << 20, 0, 60000, &a);
			if (rc == GPB_E_SHUTTING_DOWN) {
				report(out, 'W');
				waiter = false;
				continue;
			}
		} else {
			rc = gpb_alloc(c, inst, 1 << (10 + rnd_below(10)), 0, &a);
			if (rc == 0)
				rc = gpb_free(c, a.id);
		}
		if (rc == GPB_E_DAEMON_GONE)
			break;
		if (rc != 0 && rc != GPB_E_SHUTTING_DOWN && rc != GPB_E_OUT_OF_MEMORY)
			return 2;
	}
	gpb_disconnect(c);
	report(out, 'E');
	return 0;
}

static void test_sigterm_in_flight(void **state)
{
	enum { N = 6, WAITERS = 2 };
	const char *extra[] = {"--log-level", "error", NULL};
	struct th_daemon d;
	struct th_daemon_opts o = {.extra = extra};
	th_daemon_start_opts(&d, &o);
	/* Fill device 0 except for a little, so the waiters wait. */
	gpb_client *filler = th_client(&d, "filler");
	struct gpb_register_opts ro = {.name = "filler"};
	uint64_t inst;
	struct gpb_allocation big;
	assert_int_equal(gpb_register(filler, &ro, &inst), 0);
	assert_int_equal(gpb_alloc(filler, inst, (1ull << 30) - (32 << 20), 0, &big), 0);
	int pfd[2];
	assert_int_equal(pipe(pfd), 0);
	pid_t pids[N];
	for (int i = 0; i < N; i++) {
		pids[i] = fork();
		assert_true(pids[i] >= 0);
		if (pids[i] == 0) {
			close(pfd[0]);
			rnd_seed((uint64_t)getpid());
			th_child_exit(sigterm_worker(d.socket, pfd[1], i < WAITERS));
		}
	}
	close(pfd[1]);
	await_reports(pfd[0], 'S', N);
	/* Both waiters' allocs are queued in the daemon. */
	struct th_selfcheck sc = {0};
	for (int i = 0; i < 3000 && sc.waits < WAITERS; i++) {
		th_selfcheck(filler, &sc);
		sleep_ms(10);
	}
	assert_int_equal(sc.waits, WAITERS);
	sleep_ms(100); /* and the others busy */
	long long t0 = now_ms();
	assert_int_equal(kill(d.pid, SIGTERM), 0);
	int st;
	assert_int_equal(waitpid(d.pid, &st, 0), d.pid);
	long long took = now_ms() - t0;
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	d.pid = 0;
	struct stat sb;
	assert_int_equal(stat(d.socket, &sb), -1);
	int waits = 0, ends = 0;
	for (;;) {
		char c;
		ssize_t n = read(pfd[0], &c, 1);
		if (n <= 0)
			break;
		waits += c == 'W';
		ends += c == 'E';
	}
	for (int i = 0; i < N; i++) {
		assert_int_equal(waitpid(pids[i], &st, 0), pids[i]);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			fail_msg("worker %d: status 0x%x", i, st);
	}
	close(pfd[0]);
	printf("# SIGTERM with %d clients busy: exit 0 after %lld ms, %d waiting allocs "
	       "answered shutting_down, every client then saw GPB_E_DAEMON_GONE\n",
	       N, took, waits);
	assert_int_equal(waits, WAITERS);
	assert_int_equal(ends, N);
	assert_int_equal(gpb_alloc(filler, inst, 4096, 0, &big), GPB_E_DAEMON_GONE);
	gpb_disconnect(filler);
	th_daemon_stop(&d);
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
	    cmocka_unit_test(test_daemon_sigkill_restart),
	    cmocka_unit_test(test_sigterm_in_flight),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
