/*
 * test-recall.c - recall (issue 28) across real processes: the daemon takes
 * back idle leases when another instance needs the room, whatever the holder
 * is doing.
 *
 * A holder (a forked child through libgpubroker, GPUBROKER_LEASE_IDLE_MS long
 * enough that its idle timer never returns anything) leases and frees, so
 * that its leases are idle; then another instance's cap grows (its leased
 * bytes come back under its new cap, whether it makes calls or sleeps), a
 * stopped holder makes an allocation wait the recall timeout and then fail
 * as it would have without recall (its data intact when it resumes), a
 * holder killed while its recall is out frees the room for the request
 * held on it, a partition is created beside idle leases, a stream group is
 * chunked as it would be without leases, and eight processes join and leave under random
 * proportions (test-recall-storm.c). Bad recall_done frames get clear errors.
 *
 * Children never call cmocka: they say what they did over a pipe, one byte
 * a step ('x' for a failure, with a line on stderr), and exit 0 when fine.
 * GPB_ONLY=PATTERN runs only the cases it matches (cmocka's test filter:
 * GPB_ONLY=test_storm to replay a storm's seed alone).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "harness.h"
#include "test-recall.h"

#define TIMEOUT_MS 300 /* recall_timeout_ms where a test waits it out */

/* ---- processes ---------------------------------------------------------------- */

struct rchild rc_spawn(const struct th_daemon *d, rchild_fn fn, const void *arg)
{
	struct rchild c;
	int rd, wr;
	c.pid = th_fork_linked(&rd, &wr);
	if (c.pid == 0) {
		/* A test that fails leaves no child behind. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		/* Idle leases stay leased: only a recall brings them back. */
		setenv("GPUBROKER_LEASE_IDLE_MS", "600000", 1);
		int rc = fn(d, rd, wr, arg);
		th_child_exit(rc);
	}
	c.to = wr;
	c.from = rd;
	return c;
}

int rc_say(int fd, char what)
{
	return write(fd, &what, 1) == 1 ? 0 : -1;
}

int rc_hear(int fd, int timeout_ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	char what;
	if (poll(&p, 1, timeout_ms) != 1 || read(fd, &what, 1) != 1)
		return -1;
	return (unsigned char)what;
}

void rc_expect(struct rchild *c, char step)
{
	int got = rc_hear(c->from, 60000);
	if (got != step)
		fail_msg("child %d: expected step '%c', got %d", (int)c->pid, step, got);
}

void rc_tell(struct rchild *c, char cmd)
{
	assert_int_equal(rc_say(c->to, cmd), 0);
}

uint64_t rc_read_u64(struct rchild *c)
{
	uint64_t v;
	struct pollfd p = {.fd = c->from, .events = POLLIN};
	assert_int_equal(poll(&p, 1, 60000), 1);
	assert_int_equal(read(c->from, &v, sizeof(v)), (ssize_t)sizeof(v));
	return v;
}

int rc_write_u64(int fd, uint64_t v)
{
	return write(fd, &v, sizeof(v)) == (ssize_t)sizeof(v) ? 0 : -1;
}

void rc_reap_ok(struct rchild *c)
{
	close(c->to);
	close(c->from);
	th_child_reap_ok(c->pid);
}

int rc_fail(int out, const char *who, const char *what, int rc)
{
	fprintf(stderr, "%s: %s: %d (%s)\n", who, what, rc, gpb_last_error());
	rc_say(out, 'x');
	return 1;
}

void rc_pattern(const struct gpb_allocation *a, unsigned char tag, bool check, bool *bad)
{
	unsigned char *p = a->ptr;
	uint64_t step = a->size > 4096 ? a->size / 16 : 1;
	for (uint64_t i = 0; i < a->size; i += step) {
		unsigned char want = (unsigned char)(tag + i / step);
		if (!check)
			p[i] = want;
		else if (p[i] != want)
			*bad = true;
	}
}

/* A daemon on the sim backend with a configuration file of @conf (its
 * path in @path, 64 bytes) and the flags @extra. */
static void daemon_with(struct th_daemon *d, char *path, const char *conf, const char *const *extra)
{
	const char *argv[16];
	int n = 0;
	snprintf(path, 64, "/tmp/gpb-recall-conf-%d", (int)getpid());
	th_write_file(path, conf);
	argv[n++] = "--config";
	argv[n++] = path;
	for (int i = 0; extra && extra[i] && n < 15; i++)
		argv[n++] = extra[i];
	argv[n] = NULL;
	th_daemon_start(d, argv);
}

static void daemon_done(struct th_daemon *d, gpb_client *admin, const char *conf_path)
{
	th_selfcheck(admin, NULL);
	assert_true(th_wait_for(th_only_one_client, admin, 10000));
	assert_int_equal(th_status_used(admin), 0);
	gpb_disconnect(admin);
	assert_int_equal(th_daemon_stop(d), 0);
	unlink(conf_path);
}

static const char *const big_slabs[] = {"--slab-size", "64MiB", NULL};

/* ---- the holder ---------------------------------------------------------------- */

struct holder_arg {
	uint64_t watch_cap; /* 'w': the cap to wait for (active mode) */
	const char *group;  /* stream group, or NULL */
	uint64_t live;      /* bytes of the live block it keeps (default 4 KiB) */
	uint64_t fill;      /* bytes it leases and frees (default: until refused) */
};

/* Leases @fill bytes (or until refused) in 16 MiB blocks and frees them. */
static int holder_fill(gpb_client *c, uint64_t inst, const struct holder_arg *ha, int out)
{
	static struct gpb_allocation a[80];
	int n = 0, rc = 0;
	uint64_t want = ha->fill ? ha->fill / (16 * MiB) : 80;
	while ((uint64_t)n < want && (rc = gpb_alloc(c, inst, 16 * MiB, 0, &a[n])) == 0)
		n++;
	if (!ha->fill && rc != GPB_E_OUT_OF_MEMORY && rc != GPB_E_QUOTA)
		return rc_fail(out, "holder", "fill", rc);
	if (ha->fill && rc != 0)
		return rc_fail(out, "holder", "fill", rc);
	for (int i = 0; i < n; i++)
		if ((rc = gpb_free(c, a[i].id)) != 0)
			return rc_fail(out, "holder", "free", rc);
	return n >= 8 ? 0 : rc_fail(out, "holder", "filled too little", n);
}

/* Waits (making calls: the recall is read by this thread) until its cap is
 * at most watch_cap and its used and leased bytes are within it. */
static int holder_watch(gpb_client *c, uint64_t inst, uint64_t watch_cap)
{
	struct gpb_mem_info mi;
	long long t0 = th_now_ms();
	while (th_now_ms() - t0 < 10000) {
		if (gpb_mem_info(c, inst, &mi) != 0)
			return -1;
		if (mi.cap <= watch_cap && mi.used <= mi.cap && mi.leased <= mi.cap)
			return 0;
	}
	fprintf(stderr, "holder: cap %" PRIu64 " used %" PRIu64 " leased %" PRIu64 "\n", mi.cap,
	        mi.used, mi.leased);
	return -1;
}

/*
 * Registers (auto pool), writes its instance id, keeps one live block with a
 * pattern and leases and frees the rest ('f'). Then, between commands, it
 * sleeps in poll() on the pipe, making no call: 'r' fills again ('f'); 'w'
 * watches its figures until they fit watch_cap ('k'); 'c' checks its live
 * block and that its used and leased bytes fit its cap ('k'); 'q' quits.
 */
static int child_holder(const struct th_daemon *d, int in, int out, const void *arg)
{
	const struct holder_arg *ha = arg;
	gpb_client *c = NULL;
	struct gpb_register_opts o = {.name = "holder", .group = ha->group};
	struct gpb_allocation live;
	struct gpb_mem_info mi;
	uint64_t inst;
	bool bad = false;
	int rc;
	if ((rc = gpb_connect(d->socket, "holder", &c)) < 0 ||
	    (rc = gpb_register(c, &o, &inst)) < 0)
		return rc_fail(out, "holder", "connect", rc);
	if (rc_write_u64(out, inst) < 0)
		return 1;
	if ((rc = gpb_alloc(c, inst, ha->live ? ha->live : 4096, 0, &live)) != 0)
		return rc_fail(out, "holder", "live block", rc);
	rc_pattern(&live, 0x42, false, NULL);
	if (holder_fill(c, inst, ha, out) != 0)
		return 1;
	rc_say(out, 'f');
	for (;;) {
		switch (rc_hear(in, 120000)) {
		case 'r':
			if (holder_fill(c, inst, ha, out) != 0)
				return 1;
			rc_say(out, 'f');
			break;
		case 'w':
			if (holder_watch(c, inst, ha->watch_cap) != 0)
				return rc_fail(out, "holder", "leases not within the cap", 0);
			rc_say(out, 'k');
			break;
		case 'c':
			rc_pattern(&live, 0x42, true, &bad);
			if (bad)
				return rc_fail(out, "holder", "live block changed", 0);
			if ((rc = gpb_mem_info(c, inst, &mi)) != 0 || mi.used > mi.cap ||
			    mi.leased > mi.cap)
				return rc_fail(out, "holder", "figures", rc);
			rc_say(out, 'k');
			break;
		case 'q':
			gpb_free(c, live.id);
			gpb_disconnect(c);
			return 0;
		default:
			return rc_fail(out, "holder", "no command", 0);
		}
	}
}

/* ---- the grower ------------------------------------------------------------------ */

struct grower_arg {
	double from, to; /* its proportion at registration, and after 'g' */
	uint64_t room;   /* what 'a' allocates, in 1 MiB blocks */
};

/* Registers with a manual proportion, writes its instance id and says 'r';
 * 'g' sets its proportion to `to` ('g'); 'a' allocates `room` in 1 MiB
 * blocks, writes and checks them ('k'); 'q' frees them and quits. */
static int child_grower(const struct th_daemon *d, int in, int out, const void *arg)
{
	const struct grower_arg *ga = arg;
	gpb_client *c = NULL;
	struct gpb_register_opts o = {.name = "grower", .proportion = ga->from};
	static struct gpb_allocation a[1024];
	unsigned n = 0;
	uint64_t inst;
	bool bad = false;
	int rc;
	if ((rc = gpb_connect(d->socket, "grower", &c)) < 0 ||
	    (rc = gpb_register(c, &o, &inst)) < 0)
		return rc_fail(out, "grower", "connect", rc);
	if (rc_write_u64(out, inst) < 0 || rc_say(out, 'r') < 0)
		return 1;
	for (;;) {
		switch (rc_hear(in, 120000)) {
		case 'g':
			if ((rc = gpb_set_proportion(c, inst, ga->to, NULL)) != 0)
				return rc_fail(out, "grower", "set_proportion", rc);
			rc_say(out, 'g');
			break;
		case 'a':
			for (n = 0; n < ga->room / MiB && n < 1024; n++) {
				if ((rc = gpb_alloc(c, inst, MiB, 0, &a[n])) != 0) {
					fprintf(stderr, "grower: block %u of %" PRIu64 "\n", n,
					        ga->room / MiB);
					return rc_fail(out, "grower", "alloc", rc);
				}
				rc_pattern(&a[n], (unsigned char)n, false, NULL);
			}
			for (unsigned i = 0; i < n; i++)
				rc_pattern(&a[i], (unsigned char)i, true, &bad);
			if (bad)
				return rc_fail(out, "grower", "pattern", 0);
			rc_say(out, 'k');
			break;
		case 'q':
			for (unsigned i = 0; i < n; i++)
				gpb_free(c, a[i].id);
			gpb_disconnect(c);
			return 0;
		default:
			return rc_fail(out, "grower", "no command", 0);
		}
	}
}

/* ---- a, b: a cap grows beside idle leases ---------------------------------------- */

struct used_within {
	gpb_client *c;
	uint64_t inst;
};

static bool used_within_cap(void *arg)
{
	struct used_within *u = arg;
	struct gpb_instance_info info;
	assert_int_equal(gpb_instance_info(u->c, u->inst, &info), 0);
	return info.used <= info.cap;
}

/*
 * Active mode. B registers with 0.1 of the device; A (auto) leases up to its
 * cap (0.9) and frees; B's proportion grows to 0.6, so A's cap falls to 0.4:
 * A's leased bytes come back within it (A watching its own figures, or
 * asleep: then its service thread answers), and B gets 560 MiB of its
 * 614 MiB, which A's idle leases held.
 */
static void cap_grows(bool asleep)
{
	struct th_daemon d;
	char conf[64];
	/* 0.4 of the device, give or take the rounding of 1 - 0.6. */
	struct holder_arg ha = {.watch_cap = (uint64_t)(0.41 * GiB)};
	struct grower_arg ga = {.from = 0.1, .to = 0.6, .room = 560 * MiB};
	daemon_with(&d, conf, "mode = active\n", big_slabs);
	gpb_client *admin = th_client(&d, "admin");

	struct rchild b = rc_spawn(&d, child_grower, &ga);
	rc_read_u64(&b);
	rc_expect(&b, 'r');
	struct rchild a = rc_spawn(&d, child_holder, &ha);
	struct used_within aw = {admin, rc_read_u64(&a)};
	rc_expect(&a, 'f');
	struct gpb_instance_info info;
	assert_int_equal(gpb_instance_info(admin, aw.inst, &info), 0);
	printf("A leased up to %" PRIu64 " MiB of its %" PRIu64 " MiB cap\n", info.used / MiB,
	       info.cap / MiB);
	assert_true(info.used > 512 * MiB);

	if (!asleep)
		rc_tell(&a, 'w');
	long long t0 = th_now_ms();
	rc_tell(&b, 'g');
	rc_expect(&b, 'g');
	if (asleep)
		assert_true(th_wait_for(used_within_cap, &aw, 10000));
	else
		rc_expect(&a, 'k');
	assert_int_equal(gpb_instance_info(admin, aw.inst, &info), 0);
	printf("A within its new cap %" PRIu64 " MiB (%" PRIu64 " MiB) %lld ms after the change\n",
	       info.cap / MiB, info.used / MiB, th_now_ms() - t0);
	assert_true(info.used <= info.cap);

	rc_tell(&b, 'a');
	rc_expect(&b, 'k');
	rc_tell(&a, 'c');
	rc_expect(&a, 'k');
	th_selfcheck(admin, NULL);
	rc_tell(&a, 'q');
	rc_tell(&b, 'q');
	rc_reap_ok(&a);
	rc_reap_ok(&b);
	daemon_done(&d, admin, conf);
}

static void test_cap_grows_holder_calls(void **state)
{
	(void)state;
	cap_grows(false);
}

static void test_cap_grows_holder_asleep(void **state)
{
	(void)state;
	cap_grows(true);
}

/* ---- c: a holder that cannot answer ------------------------------------------------ */

uint64_t rc_stat(gpb_client *c, const char *key)
{
	char *json = NULL;
	assert_int_equal(gpb_request(c, "stats", NULL, &json), 0);
	cJSON *root = cJSON_Parse(json);
	gpb_string_free(json);
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
	if (!v)
		fail_msg("stats has no %s", key);
	uint64_t x = cJSON_IsString(v) ? strtoull(v->valuestring, NULL, 10)
	                               : (uint64_t)cJSON_GetNumberValue(v);
	cJSON_Delete(root);
	return x;
}

static void stop_child(struct rchild *c)
{
	int st;
	assert_int_equal(kill(c->pid, SIGSTOP), 0);
	assert_int_equal(waitpid(c->pid, &st, WUNTRACED), c->pid);
	assert_true(WIFSTOPPED(st));
}

static void cont_child(struct rchild *c)
{
	int st;
	assert_int_equal(kill(c->pid, SIGCONT), 0);
	assert_int_equal(waitpid(c->pid, &st, WCONTINUED), c->pid);
}

/*
 * A fills the device with idle leases (one live block of its own kept) and
 * is stopped: its service thread cannot answer. An allocation of another
 * process, without wait_ms, is held the recall timeout, then refused as it
 * would be without recall; A resumed finds its block intact, and answers
 * the next recall.
 */
static void test_holder_stopped(void **state)
{
	struct th_daemon d;
	char conf[64], text[64];
	struct holder_arg ha = {0};
	struct gpb_allocation x;
	struct gpb_register_opts o = {.name = "B"};
	uint64_t bi;
	(void)state;
	snprintf(text, sizeof(text), "recall_timeout_ms = %d\n", TIMEOUT_MS);
	daemon_with(&d, conf, text, big_slabs);
	gpb_client *admin = th_client(&d, "admin");
	gpb_client *b = th_client(&d, "B");
	assert_int_equal(gpb_register(b, &o, &bi), 0);

	struct rchild a = rc_spawn(&d, child_holder, &ha);
	rc_read_u64(&a);
	rc_expect(&a, 'f');
	stop_child(&a);
	long long t0 = th_now_ms();
	int rc = gpb_alloc(b, bi, 32 * MiB, 0, &x);
	long long took = th_now_ms() - t0;
	printf("refused after %lld ms (recall_timeout_ms %d): %s\n", took, TIMEOUT_MS,
	       gpb_last_error());
	assert_int_equal(rc, GPB_E_OUT_OF_MEMORY);
	assert_true(took >= TIMEOUT_MS);
	assert_true(took < TIMEOUT_MS + 2000);
	assert_true(rc_stat(admin, "recalls_timed_out") >= 1);
	th_selfcheck(admin, NULL);

	cont_child(&a);
	rc_tell(&a, 'c');
	rc_expect(&a, 'k');
	/* Resumed, A answers: the room its idle leases held is B's. */
	assert_int_equal(gpb_alloc(b, bi, 16 * MiB, 0, &x), 0);
	memset(x.ptr, 0x17, 4096);
	assert_int_equal(gpb_free(b, x.id), 0);
	th_selfcheck(admin, NULL);
	rc_tell(&a, 'q');
	rc_reap_ok(&a);
	gpb_disconnect(b);
	daemon_done(&d, admin, conf);
}

/* Registers and says 'r'; on 'a' allocates 32 MiB (no wait_ms) and writes
 * the result and how long it took (ms); 'q' quits. */
static int child_asker(const struct th_daemon *d, int in, int out, const void *arg)
{
	gpb_client *c = NULL;
	struct gpb_register_opts o = {.name = "asker"};
	struct gpb_allocation x;
	uint64_t inst;
	int rc;
	(void)arg;
	if ((rc = gpb_connect(d->socket, "asker", &c)) < 0 || (rc = gpb_register(c, &o, &inst)) < 0)
		return rc_fail(out, "asker", "connect", rc);
	rc_say(out, 'r');
	if (rc_hear(in, 120000) != 'a')
		return rc_fail(out, "asker", "no command", 0);
	long long t0 = th_now_ms();
	rc = gpb_alloc(c, inst, 32 * MiB, 0, &x);
	long long took = th_now_ms() - t0;
	if (rc == 0)
		memset(x.ptr, 0x33, 4096);
	if (rc_write_u64(out, (uint64_t)(int64_t)rc) < 0 || rc_write_u64(out, (uint64_t)took) < 0)
		return 1;
	if (rc_hear(in, 120000) != 'q')
		return rc_fail(out, "asker", "no command", 0);
	gpb_disconnect(c);
	return 0;
}

static bool recall_out(void *admin)
{
	return rc_stat(admin, "recalls_pending") >= 1;
}

/*
 * A holder that dies while its recall is out: A fills the device with idle
 * leases and is stopped; B's allocation is held for the recall; A is killed
 * meanwhile. Its session's end frees its leases: B is served then, well
 * before the recall timeout (5 s here), not refused.
 */
static void test_holder_killed(void **state)
{
	struct th_daemon d;
	char conf[64];
	struct holder_arg ha = {0};
	(void)state;
	daemon_with(&d, conf, "recall_timeout_ms = 5000\n", big_slabs);
	gpb_client *admin = th_client(&d, "admin");
	struct rchild b = rc_spawn(&d, child_asker, NULL);
	rc_expect(&b, 'r');
	struct rchild a = rc_spawn(&d, child_holder, &ha);
	rc_read_u64(&a);
	rc_expect(&a, 'f');
	stop_child(&a);
	rc_tell(&b, 'a');
	assert_true(th_wait_for(recall_out, admin, 10000));
	long long t0 = th_now_ms();
	assert_int_equal(kill(a.pid, SIGKILL), 0);
	int st;
	assert_int_equal(waitpid(a.pid, &st, 0), a.pid);
	close(a.to);
	close(a.from);
	int rc = (int)(int64_t)rc_read_u64(&b);
	long long took = (long long)rc_read_u64(&b), after = th_now_ms() - t0;
	printf("B: %d after %lld ms, %lld ms after the holder's kill\n", rc, took, after);
	assert_int_equal(rc, 0);
	assert_true(took < 5000);
	rc_tell(&b, 'q');
	rc_reap_ok(&b);
	daemon_done(&d, admin, conf);
}

/* ---- e: a partition beside idle leases ------------------------------------------- */

static void test_partition_beside_leases(void **state)
{
	struct th_daemon d;
	char conf[64], text[64], token[65], req[256], reply[4096];
	struct holder_arg ha = {0};
	int dev0[] = {0};
	(void)state;
	snprintf(text, sizeof(text), "recall_timeout_ms = %d\n", TIMEOUT_MS);
	daemon_with(&d, conf, text, big_slabs);
	gpb_client *admin = th_client(&d, "admin");
	struct rchild a = rc_spawn(&d, child_holder, &ha);
	rc_read_u64(&a);
	rc_expect(&a, 'f');
	assert_true(th_status_used(admin) > 900 * MiB);
	/* A answers: the partition gets its size. */
	int rc = gpb_partition_create(admin, "p", getuid(), 512 * MiB, dev0, 1, token);
	if (rc != 0)
		fail_msg("partition_create beside idle leases: %s", gpb_last_error());
	assert_int_equal(gpb_partition_destroy(admin, "p"), 0);

	/* A stopped: refused within the recall timeout, saying why. */
	rc_tell(&a, 'r');
	rc_expect(&a, 'f');
	assert_true(th_status_used(admin) > 900 * MiB);
	stop_child(&a);
	int fd = th_connect(d.socket);
	th_hello(fd);
	snprintf(req, sizeof(req),
	         "{\"id\":\"p\",\"method\":\"partition_create\",\"params\":{\"name\":\"q\","
	         "\"uid\":%u,\"size\":\"%llu\",\"devices\":[0]}}",
	         (unsigned)getuid(), (unsigned long long)(512 * MiB));
	long long t0 = th_now_ms();
	assert_true(th_call(fd, req, reply, sizeof(reply)) > 0);
	long long took = th_now_ms() - t0;
	printf("refused after %lld ms: %s\n", took, reply);
	assert_int_equal(th_error_code(reply), -32002);
	assert_true(took < TIMEOUT_MS + 2000);
	cJSON *root = cJSON_Parse(reply);
	const cJSON *data = cJSON_GetObjectItemCaseSensitive(
	    cJSON_GetObjectItemCaseSensitive(root, "error"), "data");
	const cJSON *recallable = cJSON_GetObjectItemCaseSensitive(data, "recallable");
	const cJSON *in_use = cJSON_GetObjectItemCaseSensitive(data, "in_use");
	assert_true(cJSON_IsString(recallable) || cJSON_IsNumber(recallable));
	assert_true(cJSON_IsString(in_use) || cJSON_IsNumber(in_use));
	/* Between them, A's leases: nearly the whole device. */
	uint64_t r = cJSON_IsString(recallable) ? strtoull(recallable->valuestring, NULL, 10)
	                                        : (uint64_t)recallable->valuedouble;
	uint64_t u = cJSON_IsString(in_use) ? strtoull(in_use->valuestring, NULL, 10)
	                                    : (uint64_t)in_use->valuedouble;
	assert_true(r + u > 512 * MiB);
	cJSON_Delete(root);
	th_close(fd);

	cont_child(&a);
	rc_tell(&a, 'c');
	rc_expect(&a, 'k');
	th_selfcheck(admin, NULL);
	rc_tell(&a, 'q');
	rc_reap_ok(&a);
	daemon_done(&d, admin, conf);
}

/* ---- f: chunking with and without leases ----------------------------------------- */

#define RUNS      4096
#define RUN_BYTES (256 * 1024) /* 32768 doubles a run: 1 GiB in all */

/* A member of group "g" that queues 1 GiB of runs and allocates the
 * group's queue: writes its chunk count and chunk length. */
static int child_chunker(const struct th_daemon *d, int in, int out, const void *arg)
{
	gpb_client *c = NULL;
	struct gpb_register_opts o = {.name = "chunker", .group = "g"};
	struct gpb_array_request req = {
	    .label = "state", .shape = {RUNS, RUN_BYTES / 8}, .ndim = 2, .elem_size = 8};
	struct gpb_chunking ch;
	uint64_t inst;
	int rc;
	(void)in;
	(void)arg;
	if ((rc = gpb_connect(d->socket, "chunker", &c)) < 0 ||
	    (rc = gpb_register(c, &o, &inst)) < 0)
		return rc_fail(out, "chunker", "connect", rc);
	if ((rc = gpb_queue_request(c, inst, &req, 1)) != 1)
		return rc_fail(out, "chunker", "queue_request", rc);
	if ((rc = gpb_allocate_queue(c, inst, &ch)) != 0)
		return rc_fail(out, "chunker", "allocate_queue", rc);
	if (rc_write_u64(out, ch.chunks) < 0 || rc_write_u64(out, ch.chunk_length) < 0 ||
	    rc_write_u64(out, ch.available) < 0)
		return 1;
	gpb_disconnect(c);
	return 0;
}

/* A member of "g" keeps 16 MiB live and leaves 704 MiB freed (idle leases
 * with leases on); another member chunks 1 GiB. Returns the chunk count. */
static uint64_t chunks_after_member(bool lease, uint64_t *available)
{
	struct th_daemon d;
	char conf[64];
	struct holder_arg ha = {.group = "g", .live = 16 * MiB, .fill = 704 * MiB};
	if (lease)
		unsetenv("GPUBROKER_LEASE");
	else
		setenv("GPUBROKER_LEASE", "0", 1);
	daemon_with(&d, conf, "", big_slabs);
	gpb_client *admin = th_client(&d, "admin");
	struct rchild m = rc_spawn(&d, child_holder, &ha);
	rc_read_u64(&m);
	rc_expect(&m, 'f');
	struct rchild q = rc_spawn(&d, child_chunker, NULL);
	uint64_t chunks = rc_read_u64(&q), length = rc_read_u64(&q);
	*available = rc_read_u64(&q);
	rc_reap_ok(&q);
	printf("leases %s: %" PRIu64 " chunks of %" PRIu64 " runs (available %" PRIu64 " MiB)\n",
	       lease ? "on" : "off", chunks, length, *available / MiB);
	rc_tell(&m, 'c');
	rc_expect(&m, 'k');
	rc_tell(&m, 'q');
	rc_reap_ok(&m);
	unsetenv("GPUBROKER_LEASE");
	daemon_done(&d, admin, conf);
	return chunks;
}

static void test_chunking_equal(void **state)
{
	uint64_t avail_on, avail_off;
	(void)state;
	uint64_t off = chunks_after_member(false, &avail_off);
	uint64_t on = chunks_after_member(true, &avail_on);
	assert_int_equal(on, off);
	assert_int_equal(off, 2); /* 1 GiB beside 16 MiB live: two halves */
}

/* ---- g: bad recall_done ------------------------------------------------------------ */

static void test_bad_recall_done(void **state)
{
	struct th_daemon d;
	char conf[64], inst[17], req[256], line[4096];
	(void)state;
	daemon_with(&d, conf, "recall_timeout_ms = 30000\n", NULL);
	gpb_client *admin = th_client(&d, "admin");
	int fd = th_connect(d.socket);
	th_hello(fd);
	th_raw_register(fd, "raw", inst);
	snprintf(req, sizeof(req),
	         "{\"id\":\"l\",\"method\":\"lease\",\"params\":{\"instance\":\"%s\","
	         "\"size\":\"4096\"}}",
	         inst);
	th_expect_reply(fd, req, 0, NULL);
	th_expect_reply(fd,
	                "{\"id\":\"1\",\"method\":\"recall_done\",\"params\":{\"epoch\":\"77\","
	                "\"bytes\":\"0\"}}",
	                -32004, NULL);

	/* A real recall: trim, which the raw connection never answers. */
	char *json = NULL;
	if (gpb_request(admin, "trim", NULL, &json) != 0)
		fail_msg("trim: %s", gpb_last_error());
	gpb_string_free(json);
	assert_true(th_read_line(fd, line, sizeof(line), 5000) > 0);
	cJSON *ev = cJSON_Parse(line);
	assert_non_null(ev);
	assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ev, "event")),
	                    "recall");
	const cJSON *data = cJSON_GetObjectItemCaseSensitive(ev, "data");
	const char *epoch = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(data, "epoch"));
	const char *bytes = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(data, "bytes"));
	assert_non_null(epoch);
	assert_non_null(bytes);
	assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(data, "reason")),
	                    "operator");
	unsigned long long e = strtoull(epoch, NULL, 10), b = strtoull(bytes, NULL, 10);
	assert_true(e >= 1 && b >= 2 * MiB);

	snprintf(req, sizeof(req),
	         "{\"id\":\"2\",\"method\":\"recall_done\",\"params\":{\"epoch\":\"%llu\","
	         "\"bytes\":\"%llu\"}}",
	         e, b + 1);
	th_expect_reply(fd, req, -32602, "bytes");
	/* Another connection's recall is none of this one's. */
	int other = th_connect(d.socket);
	th_hello(other);
	snprintf(req, sizeof(req),
	         "{\"id\":\"3\",\"method\":\"recall_done\",\"params\":{\"epoch\":\"%llu\","
	         "\"bytes\":\"0\"}}",
	         e);
	th_expect_reply(other, req, -32004, NULL);
	/* Its own connection's answer is taken once. */
	th_expect_reply(fd, req, 0, NULL);
	th_expect_reply(fd, req, -32004, NULL);
	cJSON_Delete(ev);

	th_close(other);
	th_close(fd);
	th_selfcheck(admin, NULL);
	daemon_done(&d, admin, conf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_cap_grows_holder_calls),
	    cmocka_unit_test(test_cap_grows_holder_asleep),
	    cmocka_unit_test(test_holder_stopped),
	    cmocka_unit_test(test_holder_killed),
	    cmocka_unit_test(test_storm),
	    cmocka_unit_test(test_partition_beside_leases),
	    cmocka_unit_test(test_chunking_equal),
	    cmocka_unit_test(test_bad_recall_done),
	};
	if (getenv("GPB_ONLY"))
		cmocka_set_test_filter(getenv("GPB_ONLY"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
