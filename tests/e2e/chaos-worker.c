/*
 * chaos-worker.c - the worker processes of test-chaos.c: each connects
 * through the real library and does random work (alloc, free, attach,
 * export, queue, the admin releases...) until the test kills it with
 * SIGKILL; one in twenty is instead deaf (writes requests, never reads).
 * A worker that meets anything but an expected refusal records it in the
 * shared page and exits 3; test-chaos.c fails the test on that.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "chaos-worker.h"
#include "harness.h"

#define MAX_HELD 48

struct shared *sh;

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
	case GPB_E_EXISTS: /* export names are drawn from a small set */
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

bool worker_exhausting;
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
	__atomic_store_n(&sh->ids[th_rnd_below(SHARED_IDS)], a->id, __ATOMIC_RELAXED);
}

/* Reads both ends of memory attached or opened (it must be mapped) and
 * remembers it under id. */
static void keep_attached(struct worker *w, const struct gpb_allocation *a, uint64_t id)
{
	volatile unsigned char *p = a->ptr;
	(void)p[0];
	(void)p[a->size - 1];
	w->attached[w->nattached++] = id;
}

static uint64_t rnd_size(void)
{
	/* Log-uniform from 256 bytes to 32 MiB (the larger ones get slabs of
	 * their own). */
	return (uint64_t)256 << th_rnd_below(18) | th_rnd_below(4096);
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
	         (unsigned long long)ids[th_rnd_below(n)]);
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
	unsigned op = th_rnd_below(100), rare = th_rnd_below(RARE);
	uint64_t inst = w->ninst ? w->inst[th_rnd_below((unsigned)w->ninst)] : 0;
	int rc;
	w->old_held = w->nheld;
	w->old_attached = w->nattached;
	if (rare < 3) {
		worker_admin(c, rare);
	} else if (w->ninst == 0 || (op < 4 && w->ninst < 4)) {
		struct gpb_register_opts o = {
		    .name = "chaos",
		    .device = (int)th_rnd_below(2),
		    .proportion = th_rnd_below(3) ? 0 : 0.05 * (1 + th_rnd_below(6)),
		    .group = groups[th_rnd_below(4)]};
		rc = gpb_register(c, &o, &w->inst[w->ninst]);
		check(rc, "register");
		w->ninst += rc == 0;
	} else if (op < 31 && w->nheld < MAX_HELD) {
		uint64_t align = th_rnd_below(8) ? 0 : (uint64_t)256 << th_rnd_below(14);
		rc = gpb_alloc(c, inst, rnd_size(), align, &a);
		check(rc, "alloc");
		if (rc == 0)
			hold(w, &a);
	} else if (op < 34 && w->nheld < MAX_HELD) {
		/* Host memory (its own memory file per allocation), freed by
		 * the same gpb_free; attaching its id is a not_found. */
		rc = gpb_alloc_host(c, inst, 1 + th_rnd_below(1 << 20),
		                    th_rnd_below(2) ? GPB_HOST_PINNED : GPB_HOST_MAPPED, &a);
		check(rc, "alloc_host");
		if (rc == 0)
			hold(w, &a);
	} else if (op < 37 && w->nheld < MAX_HELD) {
		rc = gpb_alloc_wait(c, inst, rnd_size(), 0, 1 + th_rnd_below(30), &a);
		check(rc, "alloc_wait");
		if (rc == 0)
			hold(w, &a);
	} else if (op < 60 && w->nheld > 0) {
		uint64_t id = w->held[th_rnd_below((unsigned)w->nheld)].id;
		check(gpb_free(c, id), "free");
		drop_held(w, id);
	} else if (op < 64 && w->nattached < 8) {
		uint64_t id = __atomic_load_n(&sh->ids[th_rnd_below(SHARED_IDS)], __ATOMIC_RELAXED);
		if (!id)
			return;
		rc = gpb_attach(c, id, &a);
		check(rc, "attach");
		if (rc == 0)
			keep_attached(w, &a, id);
	} else if (op < 68 && w->nattached > 0) {
		uint64_t id = w->attached[th_rnd_below((unsigned)w->nattached)];
		check(gpb_detach(c, id), "detach");
		drop_attached(w, id);
	} else if (op < 70) {
		int i = (int)th_rnd_below((unsigned)w->ninst);
		/* Busy (it holds allocations) is an expected refusal. */
		rc = gpb_unregister(c, w->inst[i]);
		check(rc, "unregister");
		if (rc == 0)
			w->inst[i] = w->inst[--w->ninst];
	} else if (op < 73) {
		check(gpb_set_proportion(c, inst, 0.02 * (1 + th_rnd_below(25)), NULL),
		      "set_proportion");
	} else if (op < 75) {
		check(gpb_set_auto(c, inst, NULL), "set_auto");
	} else if (op < 77) {
		check(gpb_set_group(c, inst, groups[th_rnd_below(4)], NULL), "set_group");
	} else if (op < 80) {
		struct gpb_array_request r[2] = {
		    {.label = "state",
		     .shape = {1 + th_rnd_below(20000), 1 + th_rnd_below(64)},
		     .ndim = 2,
		     .elem_size = 8},
		    {.label = "params",
		     .shape = {1 + th_rnd_below(512)},
		     .ndim = 1,
		     .elem_size = 4,
		     .unchunkable = 1},
		};
		rc = gpb_queue_request(c, inst, r, 1 + th_rnd_below(2));
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
		rc = gpb_free_label(c, 0, th_rnd_below(2) ? "state" : "params");
		/* A later free of one of those answers not_found (expected). */
		check(rc < 0 ? rc : 0, "free_label");
	} else if (op < 91) {
		struct gpb_mem_info mi;
		struct gpb_pool_stats st;
		struct gpb_policy_info pi;
		struct gpb_group_info gi;
		check(gpb_mem_info(c, inst, &mi), "mem_info");
		check(gpb_stats(c, (int)th_rnd_below(2), &st), "stats");
		check(gpb_policy_info(c, (int)th_rnd_below(2), &pi), "policy_info");
		check(gpb_group_info(c, groups[th_rnd_below(4)], &gi), "group_info");
	} else if (op < 92) {
		check(gpb_set_mode(c, th_rnd_below(2) ? GPB_MODE_ACTIVE : GPB_MODE_PASSIVE),
		      "set_mode");
	} else if (op < 93) {
		if (th_rnd_below(2))
			check(gpb_set_limit(c, -1, 0, 0), "set_limit");
		else
			check(
			    gpb_set_limit(c, (int)th_rnd_below(2), 0, 0.5 + 0.1 * th_rnd_below(6)),
			    "set_limit");
	} else if (op < 94) {
		/* Leave and come back. */
		gpb_disconnect(c);
		worker_connect(w, socket);
	} else if (op < 96 && w->nheld > 0) {
		/* Names from a small set, so that they collide and get opened
		 * while their exporters free them or are killed. */
		char name[8];
		snprintf(name, sizeof(name), "n%u", th_rnd_below(8));
		check(gpb_export(c, w->held[th_rnd_below((unsigned)w->nheld)].id, name, -1),
		      "export");
	} else if (op < 98 && w->nattached < 8) {
		char name[8];
		snprintf(name, sizeof(name), "n%u", th_rnd_below(8));
		rc = gpb_open_shared(c, name, &a);
		check(rc, "open_shared");
		if (rc == 0)
			keep_attached(w, &a, a.id);
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
void worker_main(const char *socket, uint64_t seed)
{
	struct worker w;
	th_rnd_seed(seed);
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
void deaf_main(const char *path)
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
