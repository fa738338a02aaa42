/*
 * test-caps-across-processes.c - the VRAM policy across real processes: the daemon, forked
 * clients that each connect through libgpubroker, and the CLI.
 *
 * Caps are enforced across processes; a rebalance reaches running clients
 * as cap_changed events; a dead client's share is redistributed; an alloc
 * that waits is served when another process frees, times out otherwise, and
 * is dropped with its client; the CLI shows and changes the policy.
 *
 * Children never call cmocka: they report through their exit status (0 =
 * fine, anything else names the step that failed) and synchronise with the
 * parent over pipes, one byte per step.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "harness.h"

#define MiB (1ull << 20)
#define GiB (1ull << 30)

/* ---- processes ------------------------------------------------------------ */

struct child {
	pid_t pid;
	int to;   /* parent writes here */
	int from; /* parent reads here */
};

typedef int (*child_fn)(const struct th_daemon *d, int in, int out, void *arg);

static struct child spawn(const struct th_daemon *d, child_fn fn, void *arg)
{
	int down[2], up[2];
	struct child c;
	assert_int_equal(pipe(down), 0);
	assert_int_equal(pipe(up), 0);
	c.pid = fork();
	assert_true(c.pid >= 0);
	if (c.pid == 0) {
		close(down[1]);
		close(up[0]);
		_exit(fn(d, down[0], up[1], arg));
	}
	close(down[0]);
	close(up[1]);
	c.to = down[1];
	c.from = up[0];
	return c;
}

/* One byte: a step done (or, from the parent, "go on"). */
static int say(int fd, char what)
{
	return write(fd, &what, 1) == 1 ? 0 : -1;
}

static int hear(int fd, int timeout_ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	char what;
	if (poll(&p, 1, timeout_ms) != 1 || read(fd, &what, 1) != 1)
		return -1;
	return (unsigned char)what;
}

static void expect_step(struct child *c, char step)
{
	int got = hear(c->from, 10000);
	if (got != step)
		fail_msg("child %d: expected step '%c', got %d", (int)c->pid, step, got);
}

/* Waits for the child and returns its exit status (-1 for a signal). */
static int reap(struct child *c)
{
	int st;
	close(c->to);
	close(c->from);
	assert_int_equal(waitpid(c->pid, &st, 0), c->pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void kill9(struct child *c)
{
	kill(c->pid, SIGKILL);
	assert_int_equal(reap(c), -1);
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ---- events --------------------------------------------------------------- */

struct caps_seen {
	uint64_t instance;
	uint64_t cap; /* the last cap_changed for instance */
	int events;
};

static void on_cap(gpb_client *c, const char *name, const char *data, void *ud)
{
	struct caps_seen *seen = ud;
	char want[64];
	(void)c;
	if (strcmp(name, "cap_changed") != 0)
		return;
	snprintf(want, sizeof(want), "\"instance\":\"%016" PRIx64 "\"", seen->instance);
	if (!strstr(data, want))
		return;
	const char *cap = strstr(data, "\"cap\":\"");
	assert_non_null(cap);
	seen->cap = strtoull(cap + 7, NULL, 10);
	seen->events++;
}

/* Dispatches events until `events` reaches n (or 5 s pass). */
static void wait_events(gpb_client *c, struct caps_seen *seen, int n)
{
	double until = now_ms() + 5000;
	while (seen->events < n && now_ms() < until) {
		struct pollfd p = {.fd = gpb_event_fd(c), .events = POLLIN};
		if (poll(&p, 1, 100) == 1)
			assert_true(gpb_dispatch(c) >= 0);
	}
	assert_int_equal(seen->events, n);
}

static uint64_t reg(gpb_client *c, const char *name, int device, double proportion,
                    const char *group)
{
	struct gpb_register_opts o = {
	    .name = name, .device = device, .proportion = proportion, .group = group};
	uint64_t inst;
	int rc = gpb_register(c, &o, &inst);
	if (rc < 0)
		fail_msg("gpb_register: %s", gpb_last_error());
	return inst;
}

/* ---- children --------------------------------------------------------------- */

/* Registers with a proportion, fills its cap, checks the quota, says 'c',
 * and holds on until told to go. */
static int child_capped(const struct th_daemon *d, int in, int out, void *arg)
{
	double proportion = *(double *)arg;
	gpb_client *c = NULL;
	struct gpb_register_opts o = {.name = "capped", .proportion = proportion};
	struct gpb_allocation a;
	struct gpb_instance_info info;
	uint64_t inst;
	if (gpb_connect(d->socket, "capped", &c) < 0 || gpb_register(c, &o, &inst) < 0)
		return 1;
	if (gpb_instance_info(c, inst, &info) < 0 || info.cap != (uint64_t)(proportion * GiB))
		return 2;
	if (gpb_alloc(c, inst, info.cap, 0, &a) < 0)
		return 3;
	/* Touch it: the memory is real. */
	memset(a.ptr, 0x5a, 4096);
	if (gpb_alloc(c, inst, 256, 0, &a) != GPB_E_QUOTA)
		return 4;
	if (strstr(gpb_last_error(), "quota") == NULL)
		return 5;
	if (say(out, 'c') < 0 || hear(in, 20000) < 0)
		return 6;
	gpb_disconnect(c);
	return 0;
}

/* Holds `size` bytes, says 'h', frees them when told, says 'f', then waits. */
static int child_holder(const struct th_daemon *d, int in, int out, void *arg)
{
	uint64_t size = *(uint64_t *)arg;
	gpb_client *c = NULL;
	struct gpb_allocation a;
	uint64_t inst;
	struct gpb_register_opts o = {.name = "holder"};
	if (gpb_connect(d->socket, "holder", &c) < 0 || gpb_register(c, &o, &inst) < 0 ||
	    gpb_alloc(c, inst, size, 0, &a) < 0)
		return 1;
	if (say(out, 'h') < 0 || hear(in, 20000) < 0)
		return 2;
	if (gpb_free(c, a.id) < 0)
		return 3;
	if (say(out, 'f') < 0 || hear(in, 20000) < 0)
		return 4;
	gpb_disconnect(c);
	return 0;
}

/* Says 'w', then waits (up to 60 s) for `size` bytes; never returns in the
 * tests that kill it. */
static int child_waiter(const struct th_daemon *d, int in, int out, void *arg)
{
	uint64_t size = *(uint64_t *)arg;
	gpb_client *c = NULL;
	struct gpb_allocation a;
	uint64_t inst;
	struct gpb_register_opts o = {.name = "waiter"};
	(void)in;
	if (gpb_connect(d->socket, "waiter", &c) < 0 || gpb_register(c, &o, &inst) < 0)
		return 1;
	if (say(out, 'w') < 0)
		return 2;
	int rc = gpb_alloc_wait(c, inst, size, 0, 60000, &a);
	say(out, rc == 0 ? 'y' : 'n');
	gpb_disconnect(c);
	return rc == 0 ? 0 : 3;
}

/* Registers in group "g" on device `*arg`, says 'g', waits to be told. */
static int child_grouped(const struct th_daemon *d, int in, int out, void *arg)
{
	gpb_client *c = NULL;
	struct gpb_register_opts o = {.name = "member", .device = *(int *)arg, .group = "g"};
	struct gpb_allocation a;
	uint64_t inst;
	if (gpb_connect(d->socket, "member", &c) < 0 || gpb_register(c, &o, &inst) < 0 ||
	    gpb_alloc(c, inst, 100 * MiB, 0, &a) < 0)
		return 1;
	if (say(out, 'g') < 0 || hear(in, 20000) < 0)
		return 2;
	gpb_disconnect(c);
	return 0;
}

/* What a member's allocation_ready told it. */
struct ready {
	int seen;
	uint64_t chunk_length, chunks;
	uint64_t state_id, params_id, state_runs;
};

static uint64_t json_u64(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	return cJSON_IsString(v) ? strtoull(v->valuestring, NULL, 10) : 0;
}

static void on_ready(gpb_client *c, const char *name, const char *data, void *ud)
{
	struct ready *r = ud;
	const cJSON *a;
	(void)c;
	if (strcmp(name, "allocation_ready") != 0)
		return;
	cJSON *root = cJSON_Parse(data);
	if (!root)
		return;
	r->chunk_length = json_u64(root, "chunk_length");
	r->chunks = json_u64(root, "chunks");
	cJSON_ArrayForEach(a, cJSON_GetObjectItemCaseSensitive(root, "arrays"))
	{
		const cJSON *label = cJSON_GetObjectItemCaseSensitive(a, "label");
		const cJSON *id = cJSON_GetObjectItemCaseSensitive(a, "id");
		uint64_t v = cJSON_IsString(id) ? strtoull(id->valuestring, NULL, 16) : 0;
		if (!cJSON_IsString(label))
			continue;
		if (strcmp(label->valuestring, "state") == 0) {
			r->state_id = v;
			r->state_runs = (uint64_t)cJSON_GetArrayItem(
			                    cJSON_GetObjectItemCaseSensitive(a, "shape"), 0)
			                    ->valuedouble;
		} else if (strcmp(label->valuestring, "params") == 0) {
			r->params_id = v;
		}
	}
	r->seen++;
	cJSON_Delete(root);
}

#define RUNS      4096
#define RUN_BYTES (128 * 1024) /* 16384 doubles a run: 512 MiB a member */

/*
 * A member of group "batch": queues 512 MiB of runs and a small table, says
 * 'q'; on 'a' it allocates the whole group's queue itself; then it waits
 * for its allocation_ready, maps its two arrays, writes them, says 'r' and
 * holds them until told to free them by label.
 */
static int child_batch(const struct th_daemon *d, int in, int out, void *arg)
{
	gpb_client *c = NULL;
	struct gpb_register_opts o = {.name = "member", .group = "batch"};
	struct gpb_array_request reqs[2] = {
	    {.label = "state", .shape = {RUNS, RUN_BYTES / 8}, .ndim = 2, .elem_size = 8},
	    {.label = "params", .shape = {1024}, .ndim = 1, .elem_size = 8, .unchunkable = 1},
	};
	struct ready r = {0};
	struct gpb_allocation state, params;
	uint64_t inst;
	(void)arg;
	if (gpb_connect(d->socket, "member", &c) < 0 || gpb_register(c, &o, &inst) < 0)
		return 1;
	gpb_set_event_callback(c, on_ready, &r);
	if (gpb_queue_request(c, inst, reqs, 2) != 2 || say(out, 'q') < 0)
		return 2;
	int cmd = hear(in, 20000);
	if (cmd == 'a') {
		struct gpb_chunking ch;
		if (gpb_allocate_queue(c, inst, &ch) < 0 || ch.chunks != 2 ||
		    ch.chunk_length != RUNS / 2 || ch.axis_length != RUNS)
			return 3;
	} else if (cmd != 'w') {
		return 4;
	}
	for (int i = 0; i < 500 && !r.seen; i++) {
		struct pollfd p = {.fd = gpb_event_fd(c), .events = POLLIN};
		if (poll(&p, 1, 20) == 1 && gpb_dispatch(c) < 0)
			return 5;
	}
	if (r.seen != 1 || r.chunk_length != RUNS / 2 || r.state_runs != RUNS / 2)
		return 6;
	if (gpb_claim(c, r.state_id, &state) < 0 || gpb_claim(c, r.params_id, &params) < 0)
		return 7;
	if (state.size != (uint64_t)RUNS / 2 * RUN_BYTES || params.size != 8192)
		return 8;
	/* The memory is real and this process's to use. */
	memset(state.ptr, 0x11, 4096);
	((char *)state.ptr)[state.size - 1] = 0x22;
	memset(params.ptr, 0x33, params.size);
	if (say(out, 'r') < 0 || hear(in, 20000) < 0)
		return 9;
	if (gpb_free_label(c, 0, "state") != 1 || gpb_free(c, params.id) < 0)
		return 10;
	if (gpb_free(c, state.id) != GPB_E_NOT_FOUND)
		return 11;
	gpb_disconnect(c);
	return 0;
}

static void on_invalidate(gpb_client *c, const char *name, const char *data, void *ud)
{
	(void)c;
	(void)data;
	if (strcmp(name, "invalidate") == 0)
		(*(int *)ud)++;
}

/* Attaches to `*arg`, says 'a', waits for the invalidate event, says 'i'. */
static int child_invalidated(const struct th_daemon *d, int in, int out, void *arg)
{
	gpb_client *c = NULL;
	struct gpb_allocation a;
	int invalidated = 0;
	(void)in;
	if (gpb_connect(d->socket, "attached", &c) < 0 || gpb_attach(c, *(uint64_t *)arg, &a) < 0)
		return 1;
	gpb_set_event_callback(c, on_invalidate, &invalidated);
	if (say(out, 'a') < 0)
		return 2;
	for (int i = 0; i < 500 && !invalidated; i++) {
		struct pollfd p = {.fd = gpb_event_fd(c), .events = POLLIN};
		if (poll(&p, 1, 20) == 1 && gpb_dispatch(c) < 0)
			return 3;
	}
	/* The library forgot the attachment as soon as it read the event:
	 * detaching now is "not found" without asking the daemon. */
	if (invalidated != 1 || gpb_detach(c, a.id) != GPB_E_NOT_FOUND || say(out, 'i') < 0)
		return 4;
	gpb_disconnect(c);
	return 0;
}

/* ---- tests ------------------------------------------------------------------ */

/* Caps hold across processes: a child with 0.25 and one with 0.5 each fill
 * exactly their cap and are refused beyond it; the parent's auto instance
 * gets what is left and is held to it too. */
static void test_caps_across_processes(void **state)
{
	struct th_daemon d;
	double quarter = 0.25, half = 0.5;
	(void)state;
	th_daemon_start(&d, NULL);
	gpb_client *admin = th_client(&d, "admin");
	assert_int_equal(gpb_set_mode(admin, GPB_MODE_ACTIVE), 0);
	uint64_t mine = reg(admin, "parent", 0, 0, NULL);

	struct child a = spawn(&d, child_capped, &quarter);
	struct child b = spawn(&d, child_capped, &half);
	expect_step(&a, 'c');
	expect_step(&b, 'c');

	struct gpb_instance_info info;
	assert_int_equal(gpb_instance_info(admin, mine, &info), 0);
	assert_int_equal(info.cap, GiB / 4);
	assert_true(info.share == 0.25);
	struct gpb_allocation x;
	assert_int_equal(gpb_alloc(admin, mine, GiB / 4, 0, &x), 0);
	assert_int_equal(gpb_alloc(admin, mine, 256, 0, &x), GPB_E_QUOTA);
	/* The device is exactly full. */
	struct gpb_policy_info pi;
	assert_int_equal(gpb_policy_info(admin, 0, &pi), 0);
	assert_int_equal(pi.mode, GPB_MODE_ACTIVE);
	assert_int_equal(pi.used, GiB);
	assert_int_equal(pi.available, 0);
	assert_int_equal(pi.manual_instances, 2);
	assert_int_equal(pi.auto_instances, 1);
	assert_true(pi.manual == 0.75);

	assert_int_equal(say(a.to, 'x'), 0);
	assert_int_equal(say(b.to, 'x'), 0);
	assert_int_equal(reap(&a), 0);
	assert_int_equal(reap(&b), 0);
	gpb_disconnect(admin);
	assert_int_equal(th_daemon_stop(&d), 0);
}

/* A rebalance reaches a running client as an event; a client killed with
 * SIGKILL gives its share back. */
static void test_rebalance_events(void **state)
{
	struct th_daemon d;
	double quarter = 0.25;
	(void)state;
	th_daemon_start(&d, NULL);
	gpb_client *c = th_client(&d, "watcher");
	assert_int_equal(gpb_set_mode(c, GPB_MODE_ACTIVE), 0);
	struct caps_seen seen = {.instance = reg(c, "watched", 0, 0, NULL)};
	gpb_set_event_callback(c, on_cap, &seen);

	struct child a = spawn(&d, child_capped, &quarter);
	expect_step(&a, 'c');
	wait_events(c, &seen, 1);
	assert_int_equal(seen.cap, GiB / 4 * 3);

	/* An admin (the parent is root) moves the child to 0.5: the auto
	 * instance shrinks, and hears it. */
	gpb_client *admin = th_client(&d, "admin");
	struct gpb_instance_info info;
	/* Instance ids are handed out in order from 1: find the child's. */
	uint64_t child_inst = 0;
	for (uint64_t id = 1; id < 16 && !child_inst; id++) {
		if (gpb_instance_info(admin, id, &info) == 0 && strcmp(info.name, "capped") == 0)
			child_inst = id;
	}
	assert_int_not_equal(child_inst, 0);
	assert_int_equal(gpb_set_proportion(admin, child_inst, 0.5, &info), 0);
	assert_int_equal(info.cap, GiB / 2);
	wait_events(c, &seen, 2);
	assert_int_equal(seen.cap, GiB / 2);

	/* The child dies without a word: its share comes back. */
	kill9(&a);
	wait_events(c, &seen, 3);
	assert_int_equal(seen.cap, GiB);
	assert_true(th_daemon_alive(&d));
	gpb_disconnect(admin);
	gpb_disconnect(c);
	assert_int_equal(th_daemon_stop(&d), 0);
}

/* A waiting alloc is served when another process frees; a second one times
 * out. */
static void test_wait_served_and_timeout(void **state)
{
	struct th_daemon d;
	uint64_t big = 900 * MiB;
	(void)state;
	th_daemon_start(&d, NULL);
	gpb_client *c = th_client(&d, "patient");
	uint64_t inst = reg(c, "patient", 0, 0, NULL);
	struct child h = spawn(&d, child_holder, &big);
	expect_step(&h, 'h');

	/* Nothing frees: a short wait times out. */
	struct gpb_allocation a;
	double t0 = now_ms();
	assert_int_equal(gpb_alloc_wait(c, inst, 512 * MiB, 0, 150, &a), GPB_E_TIMEOUT);
	assert_true(now_ms() - t0 >= 140);
	assert_non_null(strstr(gpb_last_error(), "timeout"));
	/* Without waiting: out of memory at once. */
	assert_int_equal(gpb_alloc(c, inst, 512 * MiB, 0, &a), GPB_E_OUT_OF_MEMORY);

	/* The holder frees 300 ms into a long wait. */
	struct child waker = h;
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct timespec ts = {0, 300 * 1000000L};
		nanosleep(&ts, NULL);
		_exit(say(waker.to, 'x') == 0 ? 0 : 1);
	}
	t0 = now_ms();
	assert_int_equal(gpb_alloc_wait(c, inst, 512 * MiB, 0, 20000, &a), 0);
	double waited = now_ms() - t0;
	assert_true(waited >= 250 && waited < 10000);
	memset(a.ptr, 1, 4096);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	expect_step(&h, 'f');
	assert_int_equal(say(h.to, 'x'), 0);
	assert_int_equal(reap(&h), 0);
	assert_int_equal(gpb_free(c, a.id), 0);
	gpb_disconnect(c);
	assert_int_equal(th_daemon_stop(&d), 0);
}

/* Waits across processes in arrival order; a waiter that dies is dropped
 * and does not take memory it can no longer use. */
static void test_wait_order_and_disconnect(void **state)
{
	struct th_daemon d;
	uint64_t want = 600 * MiB;
	(void)state;
	th_daemon_start(&d, NULL);
	gpb_client *c = th_client(&d, "owner");
	uint64_t inst = reg(c, "owner", 0, 0, NULL);
	struct gpb_allocation held;
	assert_int_equal(gpb_alloc(c, inst, 800 * MiB, 0, &held), 0);

	/* First waiter: killed while waiting. */
	struct child w1 = spawn(&d, child_waiter, &want);
	expect_step(&w1, 'w');
	struct timespec ts = {0, 100 * 1000000L};
	nanosleep(&ts, NULL);
	/* Second waiter: queued behind the first. */
	struct child w2 = spawn(&d, child_waiter, &want);
	expect_step(&w2, 'w');
	nanosleep(&ts, NULL);
	kill9(&w1);
	nanosleep(&ts, NULL);
	assert_true(th_daemon_alive(&d));
	/* Freeing serves the second: the dead one took nothing. */
	assert_int_equal(gpb_free(c, held.id), 0);
	expect_step(&w2, 'y');
	assert_int_equal(reap(&w2), 0);
	/* Everything comes back once the daemon has seen w2 go. */
	struct gpb_policy_info pi;
	for (int i = 0; i < 500; i++) {
		assert_int_equal(gpb_policy_info(c, 0, &pi), 0);
		if (pi.used == 0)
			break;
		struct timespec tick = {0, 10 * 1000000L};
		nanosleep(&tick, NULL);
	}
	assert_int_equal(pi.used, 0);
	gpb_disconnect(c);
	assert_int_equal(th_daemon_stop(&d), 0);
}

/* A group of three processes: membership and available memory. */
static void test_group_of_processes(void **state)
{
	struct th_daemon d;
	int dev0 = 0, dev1 = 1;
	(void)state;
	th_daemon_start(&d, NULL);
	gpb_client *c = th_client(&d, "observer");
	struct child m[3] = {spawn(&d, child_grouped, &dev0), spawn(&d, child_grouped, &dev0),
	                     spawn(&d, child_grouped, &dev1)};
	for (int i = 0; i < 3; i++)
		expect_step(&m[i], 'g');
	struct gpb_group_info gi;
	assert_int_equal(gpb_group_info(c, "g", &gi), 0);
	assert_int_equal(gi.members, 3);
	assert_int_equal(gi.used, 300 * MiB);
	/* Passive: both devices' available memory. */
	assert_int_equal(gi.available, (GiB - 200 * MiB) + (GiB - 100 * MiB));
	assert_int_equal(gi.nearly_full, 0);
	assert_int_equal(gpb_group_info(c, "nobody", &gi), GPB_E_NOT_FOUND);
	/* Active: two auto instances on device 0 share it, the third has
	 * device 1 alone. */
	assert_int_equal(gpb_set_mode(c, GPB_MODE_ACTIVE), 0);
	assert_int_equal(gpb_group_info(c, "g", &gi), 0);
	assert_int_equal(gi.available, 2 * (GiB / 2 - 100 * MiB) + (GiB - 100 * MiB));
	for (int i = 0; i < 3; i++) {
		assert_int_equal(say(m[i].to, 'x'), 0);
		assert_int_equal(reap(&m[i]), 0);
	}
	gpb_disconnect(c);
	assert_int_equal(th_daemon_stop(&d), 0);
}

/* The CLI shows the instances and changes the policy. */
static void test_cli(void **state)
{
	struct th_daemon d;
	char out[8192], id[32];
	(void)state;
	th_daemon_start(&d, NULL);
	const char *ctl = th_env("GPB_CTL");
	gpb_client *c = th_client(&d, "cli-target");
	uint64_t inst = reg(c, "target", 0, 0, "grp");
	snprintf(id, sizeof(id), "%016" PRIx64, inst);

	char *instances[] = {(char *)ctl, "-s", d.socket, "instances", NULL};
	assert_int_equal(th_run(instances, NULL, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "PROPORTION"));
	assert_non_null(strstr(out, "target"));
	assert_non_null(strstr(out, "auto"));
	assert_non_null(strstr(out, "passive"));
	assert_non_null(strstr(out, "grp"));

	char *mode[] = {(char *)ctl, "-s", d.socket, "set-mode", "active", NULL};
	assert_int_equal(th_run(mode, NULL, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "mode active (was passive)"));

	char *prop[] = {(char *)ctl, "-s", d.socket, "set-proportion", id, "0.25", NULL};
	assert_int_equal(th_run(prop, NULL, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "256.0 MiB"));
	struct gpb_instance_info info;
	assert_int_equal(gpb_instance_info(c, inst, &info), 0);
	assert_true(info.proportion == 0.25);

	char *autop[] = {(char *)ctl, "-s", d.socket, "set-auto", id, NULL};
	assert_int_equal(th_run(autop, NULL, out, sizeof(out)), 0);
	assert_int_equal(gpb_instance_info(c, inst, &info), 0);
	assert_true(info.proportion == 0);
	assert_int_equal(info.cap, GiB);

	char *limit[] = {(char *)ctl, "-s", d.socket, "-o", "csv", "set-limit", "50%", NULL};
	assert_int_equal(th_run(limit, NULL, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "536870912"));
	assert_int_equal(gpb_instance_info(c, inst, &info), 0);
	assert_int_equal(info.cap, GiB / 2);
	char *nolimit[] = {(char *)ctl, "-s", d.socket, "set-limit", "--device", "0", "none", NULL};
	assert_int_equal(th_run(nolimit, NULL, out, sizeof(out)), 0);
	assert_int_equal(gpb_instance_info(c, inst, &info), 0);
	assert_int_equal(info.cap, GiB);

	/* Usage errors exit 2; the daemon's refusals 1. */
	char *bad[] = {(char *)ctl, "-s", d.socket, "set-proportion", id, "1.5", NULL};
	assert_int_equal(th_run(bad, NULL, out, sizeof(out)), 2);
	char *unknown[] = {(char *)ctl, "-s", d.socket, "set-auto", "ffff", NULL};
	assert_int_equal(th_run(unknown, NULL, out, sizeof(out)), 1);
	char *json[] = {(char *)ctl, "-s", d.socket, "-o", "json", "instances", NULL};
	assert_int_equal(th_run(json, NULL, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "\"mode\":\"active\""));
	gpb_disconnect(c);
	assert_int_equal(th_daemon_stop(&d), 0);
}

/* Library argument checks that never reach the daemon. */
static void test_library_arguments(void **state)
{
	struct th_daemon d;
	struct gpb_allocation a;
	struct gpb_instance_info info;
	(void)state;
	th_daemon_start(&d, NULL);
	gpb_client *c = th_client(&d, "args");
	uint64_t inst = reg(c, "args", 0, 0, NULL);
	assert_int_equal(gpb_alloc_wait(c, inst, 1, 0, 86400001, &a), GPB_E_INVALID);
	assert_int_equal(gpb_set_proportion(c, inst, 0, NULL), GPB_E_INVALID);
	assert_int_equal(gpb_set_proportion(c, inst, 1.5, NULL), GPB_E_INVALID);
	assert_int_equal(gpb_set_group(c, inst, "", NULL), GPB_E_INVALID);
	assert_int_equal(gpb_set_limit(c, 0, 1, 0.5), GPB_E_INVALID);
	assert_int_equal(gpb_set_limit(c, -2, 1, 0), GPB_E_INVALID);
	assert_int_equal(gpb_set_mode(c, (enum gpb_mode)9), GPB_E_INVALID);
	assert_int_equal(gpb_instance_info(c, inst, NULL), GPB_E_INVALID);
	assert_int_equal(gpb_instance_info(c, inst + 100, &info), GPB_E_NOT_FOUND);
	assert_int_equal(gpb_set_group(c, inst, "solo", &info), 0);
	assert_string_equal(info.group, "solo");
	assert_int_equal(info.grouped, 0);
	/* A proportion that leaves the auto pool under 5%: a warning. */
	uint64_t other = reg(c, "other", 0, 0, NULL);
	assert_int_equal(gpb_set_proportion(c, other, 0.97, &info), 0);
	assert_non_null(strstr(info.warning, "auto pool"));
	assert_int_equal(gpb_set_proportion(c, inst, 0.5, &info), GPB_E_INVALID);
	assert_non_null(strstr(gpb_last_error(), "over 1"));
	struct gpb_policy_info pi;
	assert_int_equal(gpb_policy_info(c, 5, &pi), GPB_E_INVALID);
	gpb_disconnect(c);
	assert_int_equal(th_daemon_stop(&d), 0);
}

/* A stream group of three processes allocates a batch that would not fit
 * unchunked (1.5 GiB on a 1 GiB device) in one step: two chunks of 2048
 * runs, and every member maps its part. */
static void test_group_batch(void **state)
{
	struct th_daemon d;
	struct child m[3];
	(void)state;
	th_daemon_start(&d, NULL);
	gpb_client *c = th_client(&d, "observer");
	for (int i = 0; i < 3; i++)
		m[i] = spawn(&d, child_batch, NULL);
	for (int i = 0; i < 3; i++)
		expect_step(&m[i], 'q');
	/* Standalone, the daemon computes the same chunking. */
	struct gpb_array_request reqs[2] = {
	    {.label = "state", .shape = {RUNS, RUN_BYTES / 8}, .ndim = 2, .elem_size = 8},
	    {.label = "params", .shape = {1024}, .ndim = 1, .elem_size = 8, .unchunkable = 1},
	};
	struct gpb_chunking ch;
	uint64_t shapes[2][8];
	assert_int_equal(gpb_chunk_parameters(c, NULL, GiB / 3, 0, reqs, 2, &ch, shapes), 0);
	assert_int_equal(ch.chunks, 2);
	assert_int_equal(shapes[0][0], RUNS / 2);
	assert_int_equal(shapes[0][1], RUN_BYTES / 8);
	assert_int_equal(shapes[1][0], 1024);
	assert_int_equal(gpb_chunk_parameters(c, "batch", 0, 0, reqs, 2, &ch, NULL), 0);
	assert_int_equal(ch.available, GiB);
	/* The second member triggers the whole group's allocation. */
	assert_int_equal(say(m[0].to, 'w'), 0);
	assert_int_equal(say(m[2].to, 'w'), 0);
	assert_int_equal(say(m[1].to, 'a'), 0);
	for (int i = 0; i < 3; i++)
		expect_step(&m[i], 'r');
	struct gpb_group_info gi;
	assert_int_equal(gpb_group_info(c, "batch", &gi), 0);
	assert_int_equal(gi.members, 3);
	assert_int_equal(gi.used, 3 * ((uint64_t)RUNS / 2 * RUN_BYTES + 8192));
	for (int i = 0; i < 3; i++) {
		assert_int_equal(say(m[i].to, 'x'), 0);
		assert_int_equal(reap(&m[i]), 0);
	}
	gpb_disconnect(c);
	assert_int_equal(th_daemon_stop(&d), 0);
}

/* invalidate_all: every client hears it and its library drops what it
 * held; the next allocation maps afresh. */
static void test_invalidate_all(void **state)
{
	struct th_daemon d;
	struct gpb_allocation a, b, own;
	struct gpb_mem_info info;
	(void)state;
	th_daemon_start(&d, NULL);
	gpb_client *c = th_client(&d, "admin");
	uint64_t inst = reg(c, "inv", 0, 0, NULL);
	assert_int_equal(gpb_alloc(c, inst, 1 << 20, 0, &a), 0);
	memset(a.ptr, 7, 1 << 20);
	/* The child attaches a daemon id. A block of this client's leases
	 * has a local one the daemon does not know; attaching it here first
	 * makes it a daemon allocation (a carve, gpubroker.h) whose id the
	 * attachment carries. With GPUBROKER_LEASE=0 that is a's own id. */
	assert_int_equal(gpb_attach(c, a.id, &own), 0);
	struct child w = spawn(&d, child_invalidated, &own.id);
	expect_step(&w, 'a');
	assert_int_equal(gpb_invalidate_all(c), 0);
	expect_step(&w, 'i');
	assert_int_equal(reap(&w), 0);
	assert_int_equal(gpb_free(c, a.id), GPB_E_NOT_FOUND);
	assert_int_equal(gpb_detach(c, own.id), GPB_E_NOT_FOUND);
	assert_int_equal(gpb_alloc(c, inst, 1 << 20, 0, &b), 0);
	memset(b.ptr, 9, 1 << 20);
	/* Only b is charged: with leases, the lease it is in (what this
	 * process holds leased), else b itself. */
	assert_int_equal(gpb_mem_info(c, inst, &info), 0);
	assert_int_equal(info.used, info.leased ? info.leased : 1 << 20);
	assert_true(info.leased == 0 || info.in_use == 1 << 20);
	assert_int_equal(th_status_used(c), info.used);
	assert_int_equal(gpb_free(c, a.id), GPB_E_NOT_FOUND);
	assert_int_equal(gpb_free(c, b.id), 0);
	gpb_disconnect(c);
	assert_int_equal(th_daemon_stop(&d), 0);
}

/* set-allocator from the CLI: the client's mappings go, direct gives each
 * request its own backend allocation, async is refused on sim. */
static void test_set_allocator(void **state)
{
	struct th_daemon d;
	struct gpb_allocation a, b1, b2;
	struct gpb_pool_stats st;
	char out[4096];
	(void)state;
	th_daemon_start(&d, NULL);
	const char *ctl = th_env("GPB_CTL");
	gpb_client *c = th_client(&d, "alloc");
	uint64_t inst = reg(c, "alloc", 0, 0, NULL);
	assert_int_equal(gpb_alloc(c, inst, 4096, 0, &a), 0);
	char *direct[] = {(char *)ctl, "-s", d.socket, "set-allocator", "direct", NULL};
	assert_int_equal(th_run(direct, NULL, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "allocator direct (was pool)"));
	assert_non_null(strstr(out, "released 1 allocations"));
	/* The event reaches the library before its next reply, and only
	 * then: a gpb_alloc served from the leases has none, so one that
	 * came first would be a block of the old lease, invalidated as the
	 * event is read. A reply first (nothing orders the CLI's connection
	 * with this one). */
	th_settle(c);
	assert_int_equal(gpb_alloc(c, inst, 4096, 0, &b1), 0);
	assert_int_equal(gpb_free(c, a.id), GPB_E_NOT_FOUND);
	assert_int_equal(gpb_alloc(c, inst, 4096, 0, &b2), 0);
	memset(b1.ptr, 1, 4096);
	memset(b2.ptr, 2, 4096);
	assert_int_equal(gpb_stats(c, 0, &st), 0);
	assert_int_equal(st.slabs, 2);
	assert_int_equal(gpb_set_allocator(c, "async"), GPB_E_NOT_SUPPORTED);
	assert_int_equal(gpb_set_allocator(c, "bogus"), GPB_E_INVALID);
	char *inval[] = {(char *)ctl, "-s", d.socket, "invalidate", NULL};
	assert_int_equal(th_run(inval, NULL, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "released 2 allocations"));
	assert_int_equal(gpb_set_allocator(c, "pool"), 0);
	assert_int_equal(gpb_free(c, b1.id), GPB_E_NOT_FOUND);
	gpb_disconnect(c);
	assert_int_equal(th_daemon_stop(&d), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_caps_across_processes),
	    cmocka_unit_test(test_rebalance_events),
	    cmocka_unit_test(test_wait_served_and_timeout),
	    cmocka_unit_test(test_wait_order_and_disconnect),
	    cmocka_unit_test(test_group_of_processes),
	    cmocka_unit_test(test_cli),
	    cmocka_unit_test(test_library_arguments),
	    cmocka_unit_test(test_group_batch),
	    cmocka_unit_test(test_invalidate_all),
	    cmocka_unit_test(test_set_allocator),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
