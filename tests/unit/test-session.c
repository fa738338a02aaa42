/*
 * test-session.c - unit tests of the daemon core without sockets: the broker
 * (sessions, instances, allocations, slab holds, attach/detach, limits) over
 * the sim backend, and the request dispatcher driven frame by frame.
 *
 * Every test builds its own broker over a small simulated device (2 MiB
 * slabs), calls broker_check() after each step, frees every reply frame and
 * destroys the broker, so the binary is leak-free under ASan and valgrind.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "broker.h"
#include "config.h"
#include "dispatch.h"
#include "log.h"
#include "pool.h"
#include "proto.h"

#define KiB  (1ull << 10)
#define MiB  (1ull << 20)
#define SLAB (2 * MiB)

#define UID_A 1000
#define UID_B 2000

/*
 * What a test has not released yet: a failing assertion leaves the test
 * through longjmp, and the teardown releases what it left behind so that
 * a failure does not bury itself under leak reports.
 */
#define MAX_LIVE 8
static struct broker *live_brokers[MAX_LIVE];
static cJSON *live_roots[MAX_LIVE];

static void live_add(void **slots, void *p)
{
	for (int i = 0; i < MAX_LIVE; i++) {
		if (!slots[i]) {
			slots[i] = p;
			return;
		}
	}
	fail_msg("more than %d live objects", MAX_LIVE);
}

static void live_remove(void **slots, void *p)
{
	for (int i = 0; i < MAX_LIVE; i++) {
		if (slots[i] == p)
			slots[i] = NULL;
	}
}

static int teardown(void **state)
{
	(void)state;
	for (int i = 0; i < MAX_LIVE; i++) {
		cJSON_Delete(live_roots[i]);
		live_roots[i] = NULL;
		broker_destroy(live_brokers[i]);
		live_brokers[i] = NULL;
	}
	return 0;
}

/* ---- broker helpers ------------------------------------------------------ */

static struct broker *broker_new(uint64_t sim_memory, unsigned max_instances,
                                 unsigned max_allocations)
{
	struct backend_config cfg = {.sim_devices = 2, .sim_memory = sim_memory};
	struct broker_limits lim;
	struct backend *be = NULL;
	struct broker *b = NULL;

	broker_limits_default(&lim);
	lim.slab_size = SLAB;
	if (max_instances)
		lim.max_instances = max_instances;
	if (max_allocations)
		lim.max_allocations = max_allocations;
	assert_int_equal(backend_create("sim", &cfg, &be), 0);
	assert_non_null(be);
	assert_int_equal(broker_create(be, &lim, &b), 0);
	assert_non_null(b);
	assert_int_equal(b->device_count, 2);
	live_add((void **)live_brokers, b);
	return b;
}

static void broker_done(struct broker *b)
{
	live_remove((void **)live_brokers, b);
	broker_destroy(b);
}

#define check(b) check_at((b), __FILE__, __LINE__)

static void check_at(const struct broker *b, const char *file, int line)
{
	char msg[256] = "";
	int rc = broker_check(b, msg, sizeof(msg));

	if (rc != 0)
		fail_msg("%s:%d: broker_check() = %d: %s", file, line, rc, msg);
}

static struct pool_stats dev_stats(const struct broker *b, int device)
{
	struct pool_stats st;

	memset(&st, 0xa5, sizeof(st));
	pool_get_stats(b->dev[device].pool, &st);
	return st;
}

static struct session *open_session(struct broker *b, uid_t uid, pid_t pid)
{
	struct session *s = broker_session_open(b, uid, uid, pid);

	assert_non_null(s);
	return s;
}

static struct broker_instance *reg(struct broker *b, struct session *s, int device)
{
	struct broker_instance *inst = NULL;

	assert_int_equal(broker_register(b, s, "test", device, 0, NULL, &inst), 0);
	assert_non_null(inst);
	assert_ptr_equal(broker_instance_find(s, inst->id), inst);
	return inst;
}

/* A grant pre-filled with garbage, so a field the broker forgets to set shows. */
static void grant_poison(struct broker_grant *g)
{
	static const unsigned char junk[PROTO_HANDLE_SIZE];

	memset(g, 0x5a, sizeof(*g));
	g->handle = junk;
	g->fd = 12345;
}

static struct broker_grant alloc_ok(struct broker *b, struct session *s,
                                    const struct broker_instance *inst, uint64_t size,
                                    uint64_t align)
{
	struct broker_grant g;
	int rc;

	grant_poison(&g);
	rc = broker_alloc(b, s, inst->id, size, align, &g);
	if (rc != 0)
		fail_msg("broker_alloc(%llu) = %d", (unsigned long long)size, rc);
	assert_int_not_equal(g.id, 0);
	assert_int_equal(g.device, inst->device);
	assert_int_equal(g.slab_size % SLAB, 0);
	assert_true(g.size >= size && g.size % POOL_GRANULE == 0);
	assert_true(g.offset + g.size <= g.slab_size);
	if (g.handle) {
		assert_memory_equal(g.handle, "GPBSIM01", 8);
		assert_true(g.fd >= 0);
	} else {
		assert_int_equal(g.fd, -1);
	}
	return g;
}

static uint64_t slab_count(const struct broker *b, int device)
{
	return dev_stats(b, device).slabs;
}

/* ---- dispatch helpers ---------------------------------------------------- */

struct reply {
	struct proto_reply r;
	int fd;
};

/* Runs one frame through dispatch_frame and parses the reply, which must be
 * exactly one newline-terminated frame. */
static void send_frame(struct broker *b, struct session *s, const char *frame, size_t len,
                       struct reply *out)
{
	struct dispatch_reply dr = {.frame = NULL, .len = 0, .fd = -7};
	int rc;

	dispatch_frame(b, s, frame, len, &dr);
	if (!dr.frame)
		fail_msg("no reply to %.*s", (int)len, frame);
	assert_true(dr.len >= 2);
	assert_int_equal(strlen(dr.frame), dr.len);
	assert_int_equal(dr.frame[dr.len - 1], '\n');
	assert_null(memchr(dr.frame, '\n', dr.len - 1));
	out->fd = dr.fd;
	rc = proto_reply_parse(dr.frame, dr.len - 1, &out->r);
	if (rc != 0) {
		print_error("unparseable reply: %s", dr.frame);
		free(dr.frame);
		fail_msg("proto_reply_parse() = %d", rc);
	}
	free(dr.frame);
	live_add((void **)live_roots, out->r.root);
	assert_null(out->r.event);
}

static void reply_done(struct reply *r)
{
	live_remove((void **)live_roots, r->r.root);
	proto_reply_finish(&r->r);
}

static void vrequest(struct broker *b, struct session *s, struct reply *out, const char *fmt,
                     va_list ap) __attribute__((format(printf, 4, 0)));

static void vrequest(struct broker *b, struct session *s, struct reply *out, const char *fmt,
                     va_list ap)
{
	char frame[8192];
	int n = vsnprintf(frame, sizeof(frame), fmt, ap);

	assert_true(n > 0 && (size_t)n < sizeof(frame));
	send_frame(b, s, frame, (size_t)n, out);
}

static void request(struct broker *b, struct session *s, struct reply *out, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void request(struct broker *b, struct session *s, struct reply *out, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vrequest(b, s, out, fmt, ap);
	va_end(ap);
}

/* A success reply to request id `id`; returns its result object. */
static const cJSON *result_of(struct reply *r, const char *id)
{
	if (r->r.code != 0 || !r->r.result)
		fail_msg("request %s: error %d: %s", id, r->r.code,
		         r->r.message ? r->r.message : "?");
	assert_non_null(r->r.id);
	assert_string_equal(r->r.id, id);
	assert_true(cJSON_IsObject(r->r.result));
	return r->r.result;
}

static const cJSON *jget(const cJSON *obj, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);

	if (!v)
		fail_msg("reply member '%s' missing", key);
	return v;
}

static const char *jstr(const cJSON *obj, const char *key)
{
	const cJSON *v = jget(obj, key);

	if (!cJSON_IsString(v))
		fail_msg("reply member '%s' is not a string", key);
	return v->valuestring;
}

static uint64_t ju64(const cJSON *obj, const char *key)
{
	uint64_t x = 0;

	if (proto_parse_u64(jstr(obj, key), &x) != 0)
		fail_msg("reply member '%s' is not a u64 string", key);
	return x;
}

static uint64_t jid(const cJSON *obj, const char *key)
{
	uint64_t x = 0;

	if (proto_get_id64(obj, key, &x) != 0)
		fail_msg("reply member '%s' is not an id64", key);
	return x;
}

static double jnum(const cJSON *obj, const char *key)
{
	const cJSON *v = jget(obj, key);

	if (!cJSON_IsNumber(v))
		fail_msg("reply member '%s' is not a number", key);
	return v->valuedouble;
}

static const cJSON *jarr(const cJSON *obj, const char *key, int len)
{
	const cJSON *v = jget(obj, key);

	if (!cJSON_IsArray(v))
		fail_msg("reply member '%s' is not an array", key);
	assert_int_equal(cJSON_GetArraySize(v), len);
	return v;
}

/*
 * Sends frame and expects an error reply with `code`, the id `id` (NULL: a
 * JSON null id), no descriptor, and, when field is set, data.field == field.
 */
static void expect_error(struct broker *b, struct session *s, const char *frame, const char *id,
                         int code, const char *field)
{
	struct reply r;
	char why[256] = "";

	send_frame(b, s, frame, strlen(frame), &r);
	if (r.r.result || r.r.code != code) {
		snprintf(why, sizeof(why), "code %d (%s), want %d", r.r.code,
		         r.r.message ? r.r.message : "a result", code);
	} else if (id ? !r.r.id || strcmp(r.r.id, id) != 0 : r.r.id != NULL) {
		snprintf(why, sizeof(why), "id %s, want %s", r.r.id ? r.r.id : "null",
		         id ? id : "null");
	} else if (r.fd != -1) {
		snprintf(why, sizeof(why), "an error reply carries descriptor %d", r.fd);
	} else if (field) {
		const cJSON *f =
		    r.r.data ? cJSON_GetObjectItemCaseSensitive(r.r.data, "field") : NULL;
		if (!cJSON_IsString(f) || strcmp(f->valuestring, field) != 0)
			snprintf(why, sizeof(why), "data.field %s, want %s",
			         cJSON_IsString(f) ? f->valuestring : "missing", field);
	}
	reply_done(&r);
	if (why[0])
		fail_msg("%s -> %s", frame, why);
}

static void expect_error_fmt(struct broker *b, struct session *s, int code, const char *field,
                             const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static void expect_error_fmt(struct broker *b, struct session *s, int code, const char *field,
                             const char *fmt, ...)
{
	char frame[8192];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(frame, sizeof(frame), fmt, ap);
	va_end(ap);
	assert_true(n > 0 && (size_t)n < sizeof(frame));
	expect_error(b, s, frame, "e", code, field);
}

/* True when an error reply's data is {"limit": name, "value": value}. */
static bool limit_data_is(const struct reply *r, const char *name, double value)
{
	const cJSON *limit, *v;

	if (!cJSON_IsObject(r->r.data))
		return false;
	limit = cJSON_GetObjectItemCaseSensitive(r->r.data, "limit");
	v = cJSON_GetObjectItemCaseSensitive(r->r.data, "value");
	return cJSON_IsString(limit) && strcmp(limit->valuestring, name) == 0 &&
	       cJSON_IsNumber(v) && v->valuedouble == value;
}

static void hello(struct broker *b, struct session *s, const char *client)
{
	struct reply r;

	request(b, s, &r,
	        "{\"id\":\"h\",\"method\":\"hello\",\"params\":{\"versions\":[1],"
	        "\"client\":\"%s\"}}",
	        client);
	result_of(&r, "h");
	assert_int_equal(r.fd, -1);
	reply_done(&r);
	assert_true(s->hello);
}

/* ---- sessions ------------------------------------------------------------ */

/* alloc and free keep the session, instance, pool and table counters. */
static void test_session_bookkeeping(void **state)
{
	struct broker *b = broker_new(64 * MiB, 0, 0);
	struct session *s = open_session(b, UID_A, 101);
	struct broker_instance *inst = reg(b, s, 0);
	struct pool_stats st;
	(void)state;

	check(b);
	assert_int_equal(s->instance_count, 1);
	assert_int_equal(b->instance_count, 1);
	assert_int_equal(b->session_count, 1);

	struct broker_grant g1 = alloc_ok(b, s, inst, 1000, 0);
	check(b);
	assert_int_equal(g1.size, 1024);
	assert_int_equal(s->alloc_count, 1);
	assert_int_equal(s->used, 1024);
	assert_int_equal(inst->used, 1024);
	assert_int_equal(inst->live, 1);
	assert_int_equal(b->allocs.count, 1);
	st = dev_stats(b, 0);
	assert_int_equal(st.used, 1024);
	assert_int_equal(st.live, 1);
	assert_int_equal(st.slabs, 1);
	assert_int_equal(dev_stats(b, 1).live, 0);

	struct broker_grant g2 = alloc_ok(b, s, inst, 4096, 4096);
	check(b);
	assert_int_equal(g2.offset % 4096, 0);
	assert_int_not_equal(g1.id, g2.id);
	assert_int_equal(s->alloc_count, 2);
	assert_int_equal(s->used, 1024 + 4096);
	assert_int_equal(inst->used, 1024 + 4096);
	assert_int_equal(inst->live, 2);
	assert_int_equal(b->allocs.count, 2);
	st = dev_stats(b, 0);
	assert_int_equal(st.used, 1024 + 4096);
	assert_int_equal(st.live, 2);
	/* Not overlapping. */
	assert_true(g1.offset + g1.size <= g2.offset || g2.offset + g2.size <= g1.offset);

	assert_int_equal(broker_free(b, s, g1.id), 0);
	check(b);
	assert_int_equal(s->alloc_count, 1);
	assert_int_equal(s->used, 4096);
	assert_int_equal(inst->used, 4096);
	assert_int_equal(inst->live, 1);
	assert_int_equal(b->allocs.count, 1);
	st = dev_stats(b, 0);
	assert_int_equal(st.used, 4096);
	assert_int_equal(st.live, 1);
	assert_int_equal(st.frees, 1);

	assert_int_equal(broker_free(b, s, g2.id), 0);
	check(b);
	assert_int_equal(s->alloc_count, 0);
	assert_int_equal(s->used, 0);
	assert_int_equal(inst->used, 0);
	assert_int_equal(inst->live, 0);
	assert_int_equal(b->allocs.count, 0);
	st = dev_stats(b, 0);
	assert_int_equal(st.used, 0);
	assert_int_equal(st.live, 0);
	assert_int_equal(st.allocs, 2);
	assert_int_equal(st.frees, 2);

	/* Freed ids are gone. */
	assert_int_equal(broker_free(b, s, g1.id), -ENOENT);
	assert_int_equal(broker_free(b, s, g2.id), -ENOENT);

	uint64_t inst_id = inst->id;
	assert_int_equal(broker_unregister(b, s, inst_id), 0);
	check(b);
	assert_int_equal(s->instance_count, 0);
	assert_int_equal(b->instance_count, 0);
	assert_null(broker_instance_find(s, inst_id));
	assert_int_equal(broker_unregister(b, s, inst_id), -ENOENT);

	broker_session_close(b, s);
	check(b);
	assert_int_equal(b->session_count, 0);
	broker_done(b);
}

/* Closing a session with live allocations, attachments both ways and several
 * instances on both devices returns everything, and touches nobody else. */
static void test_session_close_reclaims(void **state)
{
	struct broker *b = broker_new(64 * MiB, 0, 0);
	struct session *s1 = open_session(b, UID_A, 101);
	struct session *s2 = open_session(b, UID_A, 102);
	struct session *s3 = open_session(b, UID_B, 103);
	struct broker_grant g;
	(void)state;

	struct broker_instance *i20 = reg(b, s2, 0);
	struct broker_instance *i30 = reg(b, s3, 0);
	struct broker_instance *i31 = reg(b, s3, 1);
	uint64_t instances_before = b->instance_count;
	assert_int_equal(instances_before, 3);

	struct broker_grant other2 = alloc_ok(b, s2, i20, 8 * KiB, 0);
	alloc_ok(b, s3, i30, 16 * KiB, 0);
	alloc_ok(b, s3, i31, 1536 * KiB, 0); /* dedicated slab */
	check(b);
	uint64_t used0 = dev_stats(b, 0).used, used1 = dev_stats(b, 1).used;
	uint64_t live0 = dev_stats(b, 0).live, live1 = dev_stats(b, 1).live;
	uint64_t allocs_before = b->allocs.count;

	/* s1: three instances on both devices, allocations in each, a large
	 * one, an attachment to s2's allocation; s2 attaches to one of s1's. */
	struct broker_instance *a = reg(b, s1, 0);
	struct broker_instance *c = reg(b, s1, 1);
	reg(b, s1, 1); /* an instance without allocations */
	uint64_t ids[8];
	unsigned n = 0;
	for (int i = 0; i < 3; i++)
		ids[n++] = alloc_ok(b, s1, a, 3000 + (uint64_t)i * 700, 0).id;
	for (int i = 0; i < 3; i++)
		ids[n++] = alloc_ok(b, s1, c, 5000 + (uint64_t)i * 300, 512).id;
	ids[n++] = alloc_ok(b, s1, a, 1536 * KiB, 0).id;
	check(b);
	assert_int_equal(s1->alloc_count, n);
	assert_int_equal(b->instance_count, instances_before + 3);
	assert_int_equal(b->allocs.count, allocs_before + n);

	grant_poison(&g);
	assert_int_equal(broker_attach(b, s1, other2.id, &g), 0);
	grant_poison(&g);
	assert_int_equal(broker_attach(b, s2, ids[0], &g), 0);
	grant_poison(&g);
	assert_int_equal(broker_attach(b, s2, ids[n - 1], &g), 0);
	assert_int_equal(s1->attached.count, 1);
	assert_int_equal(s2->attached.count, 2);
	check(b);

	broker_session_close(b, s1);
	check(b);
	assert_int_equal(b->session_count, 2);
	assert_int_equal(b->instance_count, instances_before);
	assert_int_equal(b->allocs.count, allocs_before);
	for (unsigned i = 0; i < n; i++) {
		grant_poison(&g);
		/* Freed, attached or not. */
		assert_int_equal(broker_attach(b, s2, ids[i], &g), -ENOENT);
	}
	assert_int_equal(dev_stats(b, 0).used, used0);
	assert_int_equal(dev_stats(b, 1).used, used1);
	assert_int_equal(dev_stats(b, 0).live, live0);
	assert_int_equal(dev_stats(b, 1).live, live1);
	/* s2's allocation and s3's are untouched. */
	assert_int_equal(s2->alloc_count, 1);
	assert_int_equal(s3->alloc_count, 2);
	assert_int_equal(broker_free(b, s2, other2.id), 0);
	check(b);

	/* s2 still holds two attachments into s1's (now freed) slabs. */
	broker_session_close(b, s2);
	check(b);
	broker_session_close(b, s3);
	check(b);
	for (int d = 0; d < 2; d++) {
		struct pool_stats st = dev_stats(b, d);
		assert_int_equal(st.used, 0);
		assert_int_equal(st.live, 0);
		/* No user is connected: no slab is kept, not even as cache. */
		assert_int_equal(st.slabs, 0);
		assert_int_equal(st.reserved, 0);
	}
	assert_int_equal(b->allocs.count, 0);
	assert_int_equal(b->instance_count, 0);
	assert_int_equal(b->session_count, 0);
	broker_done(b);
}

/* The empty-slab cache of a uid is trimmed only when its last session goes. */
static void test_session_close_trims_last_uid_session(void **state)
{
	struct broker *b = broker_new(64 * MiB, 0, 0);
	struct session *s1 = open_session(b, UID_A, 1);
	struct session *s2 = open_session(b, UID_A, 2);
	(void)state;

	struct broker_instance *inst = reg(b, s1, 0);
	alloc_ok(b, s1, inst, 4096, 0);
	assert_int_equal(slab_count(b, 0), 1);
	broker_session_close(b, s1);
	check(b);
	/* s2 of the same uid is still connected: the emptied slab stays cached. */
	assert_int_equal(slab_count(b, 0), 1);
	assert_int_equal(dev_stats(b, 0).used, 0);
	broker_session_close(b, s2);
	check(b);
	assert_int_equal(slab_count(b, 0), 0);
	assert_int_equal(dev_stats(b, 0).reserved, 0);
	broker_done(b);
}

/* ---- holds --------------------------------------------------------------- */

static void test_holds(void **state)
{
	struct broker *b = broker_new(64 * MiB, 0, 0);
	struct session *s1 = open_session(b, UID_A, 1);
	struct session *s2 = open_session(b, UID_A, 2);
	struct session *s3 = open_session(b, UID_B, 3);
	unsigned char handle[PROTO_HANDLE_SIZE];
	(void)state;

	struct broker_instance *i1 = reg(b, s1, 0);
	struct broker_instance *i2 = reg(b, s2, 0);
	struct broker_instance *i3 = reg(b, s3, 0);

	/* First in the slab: handle and descriptor. */
	struct broker_grant a1 = alloc_ok(b, s1, i1, 4096, 0);
	assert_non_null(a1.handle);
	assert_true(a1.fd >= 0);
	memcpy(handle, a1.handle, sizeof(handle));
	uint64_t slab = a1.slab_id;

	/* Same slab again: nothing to send. */
	struct broker_grant a2 = alloc_ok(b, s1, i1, 4096, 0);
	assert_int_equal(a2.slab_id, slab);
	assert_null(a2.handle);
	assert_int_equal(a2.fd, -1);

	/* Freeing one of two keeps the hold. */
	assert_int_equal(broker_free(b, s1, a1.id), 0);
	check(b);
	struct broker_grant a3 = alloc_ok(b, s1, i1, 4096, 0);
	assert_int_equal(a3.slab_id, slab);
	assert_null(a3.handle);

	/* A dedicated slab (exactly full, so nothing else lands in its
	 * tail) is another slab: handle again. */
	struct broker_grant big = alloc_ok(b, s1, i1, 2 * MiB, 0);
	assert_int_not_equal(big.slab_id, slab);
	assert_non_null(big.handle);
	assert_int_not_equal(big.fd, a1.fd);

	/* A second session of the same uid shares the slab but must be given
	 * it once. */
	struct broker_grant b1 = alloc_ok(b, s2, i2, 4096, 0);
	assert_int_equal(b1.slab_id, slab);
	assert_non_null(b1.handle);
	assert_memory_equal(b1.handle, handle, sizeof(handle));
	assert_int_equal(b1.fd, a1.fd);
	struct broker_grant b2 = alloc_ok(b, s2, i2, 4096, 0);
	assert_int_equal(b2.slab_id, slab);
	assert_null(b2.handle);
	assert_int_equal(b2.fd, -1);

	/* s1 lets go of every allocation in the slab (s2 keeps it alive):
	 * the next one that lands there sends the handle again. */
	assert_int_equal(broker_free(b, s1, a2.id), 0);
	assert_int_equal(broker_free(b, s1, a3.id), 0);
	check(b);
	struct broker_grant a4 = alloc_ok(b, s1, i1, 4096, 0);
	assert_int_equal(a4.slab_id, slab);
	assert_non_null(a4.handle);
	assert_memory_equal(a4.handle, handle, sizeof(handle));
	assert_int_equal(a4.fd, a1.fd);
	struct broker_grant a5 = alloc_ok(b, s1, i1, 4096, 0);
	assert_null(a5.handle);

	/* Another uid never lands in that slab, however much room it has. */
	struct broker_grant c1 = alloc_ok(b, s3, i3, 4096, 0);
	assert_int_not_equal(c1.slab_id, slab);
	assert_int_not_equal(c1.slab_id, big.slab_id);
	assert_non_null(c1.handle);
	assert_memory_not_equal(c1.handle, handle, sizeof(handle));
	assert_int_not_equal(c1.fd, a1.fd);
	for (int i = 0; i < 20; i++) {
		struct broker_grant c = alloc_ok(b, s3, i3, 8192, 0);
		assert_int_not_equal(c.slab_id, slab);
		struct broker_grant a = alloc_ok(b, s1, i1, 8192, 0);
		assert_int_not_equal(a.slab_id, c1.slab_id);
	}
	check(b);

	/* Every allocation of the session gone, slab cached: the next one lands
	 * in the same (cached) slab and is given it again. */
	broker_session_close(b, s2);
	broker_session_close(b, s3);
	struct list *pos, *tmp;
	list_for_each_safe(pos, tmp, &s1->allocs)
	{
		struct broker_alloc *al = list_entry(pos, struct broker_alloc, link);
		assert_int_equal(broker_free(b, s1, al->id), 0);
	}
	check(b);
	assert_int_equal(s1->held.count, 0);
	assert_int_equal(slab_count(b, 0), 1); /* the cached standard slab */
	struct broker_grant a6 = alloc_ok(b, s1, i1, 4096, 0);
	assert_int_equal(a6.slab_id, slab);
	assert_non_null(a6.handle);
	assert_true(a6.fd >= 0);
	assert_int_equal(s1->held.count, 1);
	check(b);
	broker_done(b);
}

/* Two uids never share a slab, on either device, and each uid's first
 * allocation on each device comes with a handle. */
static void test_uids_never_share_slabs(void **state)
{
	struct broker *b = broker_new(64 * MiB, 0, 0);
	struct session *sa = open_session(b, UID_A, 1);
	struct session *sb = open_session(b, UID_B, 2);
	uint64_t slab_a[2], slab_b[2];
	(void)state;

	for (int d = 0; d < 2; d++) {
		struct broker_instance *ia = reg(b, sa, d);
		struct broker_instance *ib = reg(b, sb, d);
		struct broker_grant ga = alloc_ok(b, sa, ia, 256, 0);
		struct broker_grant gb = alloc_ok(b, sb, ib, 256, 0);
		assert_non_null(ga.handle);
		assert_non_null(gb.handle);
		assert_int_equal(ga.device, d);
		assert_int_equal(gb.device, d);
		assert_int_not_equal(ga.slab_id, gb.slab_id);
		assert_int_not_equal(ga.fd, gb.fd);
		slab_a[d] = ga.slab_id;
		slab_b[d] = gb.slab_id;
		struct backend_slab *bs = pool_slab_backend(
		    pool_block_slab(((struct broker_alloc *)idmap_get(&b->allocs, ga.id))->block));
		assert_int_equal(bs->uid, UID_A);
		bs = pool_slab_backend(
		    pool_block_slab(((struct broker_alloc *)idmap_get(&b->allocs, gb.id))->block));
		assert_int_equal(bs->uid, UID_B);
	}
	/* Slab ids are unique across devices too. */
	assert_int_not_equal(slab_a[0], slab_a[1]);
	assert_int_not_equal(slab_b[0], slab_b[1]);
	assert_int_not_equal(slab_a[0], slab_b[1]);
	assert_int_not_equal(slab_a[1], slab_b[0]);
	check(b);
	broker_done(b);
}

/* ---- the sim descriptor -------------------------------------------------- */

static void test_sim_fd_is_sealed_memfd(void **state)
{
	struct broker *b = broker_new(64 * MiB, 0, 0);
	struct session *s = open_session(b, UID_A, 1);
	struct broker_instance *inst = reg(b, s, 1);
	struct stat sta, stb;
	char path[64];
	(void)state;

	alloc_ok(b, s, inst, 12345, 0); /* so the next one is not at offset 0 */
	struct broker_grant g = alloc_ok(b, s, inst, 4000, 0);
	assert_null(g.handle);
	/* The descriptor came with the first grant of the slab. */
	struct broker_alloc *al = idmap_get(&b->allocs, g.id);
	assert_non_null(al);
	int fd = ((struct backend_slab *)pool_slab_backend(pool_block_slab(al->block)))->fd;
	assert_true(fd >= 0);
	assert_int_not_equal(g.offset, 0);

	assert_int_equal(fstat(fd, &sta), 0);
	assert_int_equal(sta.st_size, (off_t)g.slab_size);
	assert_int_equal(g.slab_size, SLAB);

	unsigned char *m1 = mmap(NULL, g.slab_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	assert_true(m1 != MAP_FAILED);
	/* A new slab is zero-filled. */
	for (uint64_t i = 0; i < g.size; i++)
		assert_int_equal(m1[g.offset + i], 0);
	for (uint64_t i = 0; i < g.size; i++)
		m1[g.offset + i] = (unsigned char)(i * 7 + 3);

	/* Second mapping of the same descriptor. */
	unsigned char *m2 = mmap(NULL, g.slab_size, PROT_READ, MAP_SHARED, fd, 0);
	assert_true(m2 != MAP_FAILED);
	assert_ptr_not_equal(m1, m2);
	assert_memory_equal(m2 + g.offset, m1 + g.offset, g.size);

	/* A third through a fresh open of the file (another process would
	 * reach the same file through SCM_RIGHTS). */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	int fd2 = open(path, O_RDWR | O_CLOEXEC);
	assert_true(fd2 >= 0);
	assert_int_equal(fstat(fd2, &stb), 0);
	assert_int_equal(sta.st_ino, stb.st_ino);
	unsigned char *m3 = mmap(NULL, g.slab_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd2, 0);
	assert_true(m3 != MAP_FAILED);
	for (uint64_t i = 0; i < g.size; i++)
		assert_int_equal(m3[g.offset + i], (unsigned char)(i * 7 + 3));
	/* and writes through it show in the first mapping */
	memset(m3 + g.offset, 0xee, 16);
	assert_int_equal(m1[g.offset], 0xee);
	assert_int_equal(m2[g.offset + 15], 0xee);

	/* Sealed: the size cannot change, and no seal can be added. */
	errno = 0;
	assert_int_equal(ftruncate(fd, 0), -1);
	assert_int_equal(errno, EPERM);
	errno = 0;
	assert_int_equal(ftruncate(fd, (off_t)(2 * g.slab_size)), -1);
	assert_int_equal(errno, EPERM);
	errno = 0;
	assert_int_equal(ftruncate(fd2, (off_t)(g.slab_size / 2)), -1);
	assert_int_equal(errno, EPERM);
	int seals = fcntl(fd, F_GET_SEALS);
	assert_true(seals >= 0);
	assert_true(seals & F_SEAL_SHRINK);
	assert_true(seals & F_SEAL_GROW);
	assert_true(seals & F_SEAL_SEAL);
	errno = 0;
	assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE), -1);
	assert_int_equal(errno, EPERM);
	assert_int_equal(fstat(fd, &sta), 0);
	assert_int_equal(sta.st_size, (off_t)g.slab_size);
	/* Close-on-exec: the daemon's descriptors do not leak into children. */
	assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);

	/* Another uid's slab is another file. */
	struct session *s2 = open_session(b, UID_B, 2);
	struct broker_grant o = alloc_ok(b, s2, reg(b, s2, 1), 256, 0);
	assert_true(o.fd >= 0);
	assert_int_equal(fstat(o.fd, &stb), 0);
	assert_int_not_equal(sta.st_ino, stb.st_ino);

	assert_int_equal(munmap(m1, g.slab_size), 0);
	assert_int_equal(munmap(m2, g.slab_size), 0);
	assert_int_equal(munmap(m3, g.slab_size), 0);
	assert_int_equal(close(fd2), 0);
	check(b);
	broker_done(b);
}

/* ---- attach / detach ----------------------------------------------------- */

static void test_attach_detach(void **state)
{
	struct broker *b = broker_new(64 * MiB, 0, 0);
	struct session *s1 = open_session(b, UID_A, 1);
	struct session *s2 = open_session(b, UID_A, 2);
	struct session *s3 = open_session(b, UID_B, 3);
	struct broker_grant g;
	(void)state;

	struct broker_instance *i1 = reg(b, s1, 0);
	struct broker_grant a = alloc_ok(b, s1, i1, 10000, 0);

	/* Same uid, other session, slab not held: handle and descriptor. */
	grant_poison(&g);
	assert_int_equal(broker_attach(b, s2, a.id, &g), 0);
	check(b);
	assert_int_equal(g.id, a.id);
	assert_int_equal(g.device, a.device);
	assert_int_equal(g.slab_id, a.slab_id);
	assert_int_equal(g.slab_size, a.slab_size);
	assert_int_equal(g.offset, a.offset);
	assert_int_equal(g.size, a.size);
	assert_non_null(g.handle);
	assert_memory_equal(g.handle, a.handle, PROTO_HANDLE_SIZE);
	assert_int_equal(g.fd, a.fd);
	assert_int_equal(s2->attached.count, 1);
	/* The attachment is no allocation of s2's. */
	assert_int_equal(s2->alloc_count, 0);
	assert_int_equal(broker_free(b, s2, a.id), -ENOENT);

	/* Twice: -EEXIST. */
	grant_poison(&g);
	assert_int_equal(broker_attach(b, s2, a.id, &g), -EEXIST);
	assert_int_equal(s2->attached.count, 1);

	/* The attachment is a hold: s2's own allocation in that slab gets no
	 * handle. */
	struct broker_instance *i2 = reg(b, s2, 0);
	struct broker_grant own = alloc_ok(b, s2, i2, 4096, 0);
	assert_int_equal(own.slab_id, a.slab_id);
	assert_null(own.handle);

	/* Another uid: -ENOENT, exactly as an unknown id. */
	grant_poison(&g);
	assert_int_equal(broker_attach(b, s3, a.id, &g), -ENOENT);
	grant_poison(&g);
	assert_int_equal(broker_attach(b, s3, a.id ^ 0x8000000000000001ull, &g), -ENOENT);
	grant_poison(&g);
	assert_int_equal(broker_attach(b, s2, a.id ^ 0x8000000000000001ull, &g), -ENOENT);
	assert_int_equal(broker_detach(b, s3, a.id), -ENOENT);
	assert_int_equal(s3->attached.count, 0);
	assert_int_equal(s3->held.count, 0);
	check(b);

	/* Detach: 0, then -ENOENT. */
	assert_int_equal(broker_detach(b, s2, a.id), 0);
	check(b);
	assert_int_equal(broker_detach(b, s2, a.id), -ENOENT);
	assert_int_equal(s2->attached.count, 0);
	/* s2 still holds the slab through its own allocation: attaching again
	 * sends nothing. */
	grant_poison(&g);
	assert_int_equal(broker_attach(b, s2, a.id, &g), 0);
	assert_null(g.handle);
	assert_int_equal(g.fd, -1);
	assert_int_equal(broker_detach(b, s2, a.id), 0);
	/* ... and once it lets go of everything there, attaching sends the
	 * handle again. */
	assert_int_equal(broker_free(b, s2, own.id), 0);
	assert_int_equal(s2->held.count, 0);
	grant_poison(&g);
	assert_int_equal(broker_attach(b, s2, a.id, &g), 0);
	assert_non_null(g.handle);
	assert_int_equal(g.fd, a.fd);
	/* The owner attaching its own allocation holds the slab already. */
	grant_poison(&g);
	assert_int_equal(broker_attach(b, s1, a.id, &g), 0);
	assert_null(g.handle);
	assert_int_equal(g.fd, -1);
	assert_int_equal(broker_detach(b, s1, a.id), 0);
	check(b);

	/* The attacher's detach does not free the allocation. */
	assert_int_equal(broker_detach(b, s2, a.id), 0);
	assert_non_null(idmap_get(&b->allocs, a.id));
	assert_int_equal(broker_free(b, s1, a.id), 0);
	grant_poison(&g);
	assert_int_equal(broker_attach(b, s2, a.id, &g), -ENOENT);
	check(b);
	broker_done(b);
}

/* A slab stays while attached, even after its owner freed the allocation. */
static void test_attach_pins_slab(void **state)
{
	struct broker *b = broker_new(64 * MiB, 0, 0);
	struct session *s1 = open_session(b, UID_A, 1);
	struct session *s2 = open_session(b, UID_A, 2);
	struct broker_grant g;
	(void)state;

	struct broker_instance *i1 = reg(b, s1, 0);
	alloc_ok(b, s1, i1, 4096, 0); /* a standard slab that stays */
	uint64_t slabs0 = slab_count(b, 0);

	/* Large: a dedicated slab, returned as soon as it is empty and
	 * unpinned. */
	struct broker_grant big = alloc_ok(b, s1, i1, 2 * MiB, 0);
	assert_non_null(big.handle);
	assert_int_equal(slab_count(b, 0), slabs0 + 1);
	uint64_t reserved = dev_stats(b, 0).reserved;
	/* (Without an attachment, freeing it returns the slab at once.) */
	assert_int_equal(broker_free(b, s1, big.id), 0);
	assert_int_equal(slab_count(b, 0), slabs0);
	big = alloc_ok(b, s1, i1, 2 * MiB, 0);
	assert_int_equal(slab_count(b, 0), slabs0 + 1);

	grant_poison(&g);
	assert_int_equal(broker_attach(b, s2, big.id, &g), 0);
	assert_non_null(g.handle);
	int fd = g.fd;
	assert_int_equal(broker_free(b, s1, big.id), 0);
	check(b);
	struct pool_stats st = dev_stats(b, 0);
	assert_int_equal(st.slabs, slabs0 + 1);
	assert_int_equal(st.reserved, reserved);
	assert_int_equal(st.live, 1);
	/* The descriptor is still the slab's. */
	assert_true(fcntl(fd, F_GETFD) >= 0);
	/* Gone for every other purpose. */
	grant_poison(&g);
	assert_int_equal(broker_attach(b, s1, big.id, &g), -ENOENT);
	assert_int_equal(broker_free(b, s1, big.id), -ENOENT);
	/* Trimming does not take a pinned slab either. */
	pool_trim(b->dev[0].pool, UID_A, true);
	assert_int_equal(slab_count(b, 0), slabs0 + 1);

	assert_int_equal(broker_detach(b, s2, big.id), 0);
	check(b);
	assert_int_equal(slab_count(b, 0), slabs0);
	assert_int_equal(dev_stats(b, 0).reserved, reserved - 2 * MiB);
	assert_int_equal(broker_detach(b, s2, big.id), -ENOENT);
	assert_int_equal(s2->held.count, 0);

	/* Closing the attacher unpins too. */
	big = alloc_ok(b, s1, i1, 2 * MiB, 0);
	grant_poison(&g);
	assert_int_equal(broker_attach(b, s2, big.id, &g), 0);
	assert_int_equal(broker_free(b, s1, big.id), 0);
	assert_int_equal(slab_count(b, 0), slabs0 + 1);
	broker_session_close(b, s2);
	check(b);
	assert_int_equal(slab_count(b, 0), slabs0);
	broker_done(b);
}

/* ---- limits and errors --------------------------------------------------- */

static void test_limits(void **state)
{
	struct broker *b = broker_new(64 * MiB, 3, 4);
	struct session *s1 = open_session(b, UID_A, 1);
	struct session *s2 = open_session(b, UID_A, 2);
	struct broker_instance *inst = NULL, *extra[3];
	struct broker_grant g, ga[4];
	(void)state;

	/* max_instances, per session. */
	for (int i = 0; i < 3; i++)
		extra[i] = reg(b, s1, i % 2);
	inst = (struct broker_instance *)0x1;
	assert_int_equal(broker_register(b, s1, "x", 0, 0, NULL, &inst), -EMFILE);
	assert_ptr_equal(inst, (struct broker_instance *)0x1);
	assert_int_equal(s1->instance_count, 3);
	assert_int_equal(b->instance_count, 3);
	check(b);
	struct broker_instance *i2 = reg(b, s2, 0); /* another session has its own */
	assert_int_equal(broker_unregister(b, s1, extra[2]->id), 0);
	extra[2] = reg(b, s1, 1);
	check(b);

	/* Devices out of range. */
	assert_int_equal(broker_register(b, s2, "x", 2, 0, NULL, &inst), -ENODEV);
	assert_int_equal(broker_register(b, s2, "x", -1, 0, NULL, &inst), -ENODEV);
	assert_int_equal(broker_register(b, s2, "x", BACKEND_MAX_DEVICES, 0, NULL, &inst), -ENODEV);
	assert_int_equal(s2->instance_count, 1);

	/* Unknown instance, another session's instance. */
	inst = extra[0];
	grant_poison(&g);
	assert_int_equal(broker_alloc(b, s1, 0xdeadbeefull, 256, 0, &g), -ENOENT);
	assert_int_equal(broker_alloc(b, s1, 0, 256, 0, &g), -ENOENT);
	assert_int_equal(broker_alloc(b, s1, i2->id, 256, 0, &g), -ENOENT);
	assert_int_equal(broker_alloc(b, s2, inst->id, 256, 0, &g), -ENOENT);
	/* Bad size or alignment. */
	assert_int_equal(broker_alloc(b, s1, inst->id, 0, 0, &g), -EINVAL);
	assert_int_equal(broker_alloc(b, s1, inst->id, 256, 3, &g), -EINVAL);
	assert_int_equal(broker_alloc(b, s1, inst->id, 256, 4 * MiB, &g), -EINVAL);
	assert_int_equal(broker_alloc(b, s1, inst->id, UINT64_MAX, 0, &g), -EINVAL);
	assert_int_equal(s1->alloc_count, 0);
	assert_int_equal(b->allocs.count, 0);
	check(b);

	/* max_allocations, per session. */
	for (int i = 0; i < 4; i++)
		ga[i] = alloc_ok(b, s1, extra[i % 3], 1024, 0);
	grant_poison(&g);
	assert_int_equal(broker_alloc(b, s1, inst->id, 1024, 0, &g), -EMFILE);
	assert_int_equal(s1->alloc_count, 4);
	assert_int_equal(b->allocs.count, 4);
	assert_int_equal(dev_stats(b, 0).live + dev_stats(b, 1).live, 4);
	check(b);
	struct broker_grant other = alloc_ok(b, s2, i2, 1024, 0);

	/* Freeing another session's allocation (same uid even): -ENOENT, and
	 * it stays live. */
	assert_int_equal(broker_free(b, s2, ga[0].id), -ENOENT);
	assert_int_equal(broker_free(b, s1, other.id), -ENOENT);
	assert_ptr_not_equal(idmap_get(&b->allocs, ga[0].id), NULL);
	assert_ptr_not_equal(idmap_get(&b->allocs, other.id), NULL);
	assert_int_equal(s1->alloc_count, 4);
	assert_int_equal(s2->alloc_count, 1);
	assert_int_equal(broker_free(b, s1, 0), -ENOENT);
	check(b);

	/* Unregister with live allocations: -EBUSY, and the instance stays. */
	assert_int_equal(broker_unregister(b, s1, extra[0]->id), -EBUSY);
	assert_ptr_equal(broker_instance_find(s1, extra[0]->id), extra[0]);
	assert_int_equal(broker_unregister(b, s1, i2->id), -ENOENT);
	assert_int_equal(broker_unregister(b, s2, extra[0]->id), -ENOENT);
	assert_int_equal(broker_unregister(b, s1, 0x7777), -ENOENT);
	assert_int_equal(s1->instance_count, 3);
	check(b);

	/* Freeing makes room again. */
	assert_int_equal(broker_free(b, s1, ga[0].id), 0);
	assert_int_equal(broker_free(b, s1, ga[0].id), -ENOENT);
	ga[0] = alloc_ok(b, s1, inst, 1024, 0);
	check(b);

	/* Stopping: no new allocation, frees still work. */
	b->stopping = true;
	assert_int_equal(broker_free(b, s1, ga[0].id), 0);
	grant_poison(&g);
	assert_int_equal(broker_alloc(b, s1, inst->id, 1024, 0, &g), -ESHUTDOWN);
	assert_int_equal(broker_alloc(b, s2, i2->id, 1024, 0, &g), -ESHUTDOWN);
	assert_int_equal(s1->alloc_count, 3);
	check(b);
	b->stopping = false;

	/* Unregister once empty. */
	for (int i = 1; i < 4; i++)
		assert_int_equal(broker_free(b, s1, ga[i].id), 0);
	uint64_t gone = extra[0]->id;
	assert_int_equal(broker_unregister(b, s1, gone), 0);
	assert_int_equal(broker_unregister(b, s1, gone), -ENOENT);
	check(b);
	broker_done(b);
}

/* Attachments pin slabs and count against max_allocations (broker.c;
 * gpubroker.h: gpb_attach can fail with GPB_E_LIMIT). */
static void test_attach_limit(void **state)
{
	struct broker *b = broker_new(64 * MiB, 0, 2);
	struct session *s1 = open_session(b, UID_A, 1);
	struct session *s2 = open_session(b, UID_A, 2);
	struct broker_grant g;
	struct reply r;
	(void)state;

	struct broker_instance *i1 = reg(b, s1, 0);
	struct broker_instance *i2 = reg(b, s2, 0);
	struct broker_grant a1 = alloc_ok(b, s1, i1, 4096, 0);
	struct broker_grant a2 = alloc_ok(b, s1, i1, 4096, 0);
	alloc_ok(b, s2, i2, 4096, 0);

	grant_poison(&g);
	assert_int_equal(broker_attach(b, s2, a1.id, &g), 0);
	grant_poison(&g);
	assert_int_equal(broker_attach(b, s2, a2.id, &g), -EMFILE);
	assert_int_equal(s2->attached.count, 1);
	check(b);
	/* Through the protocol: -32006 naming max_allocations. */
	hello(b, s2, "attacher");
	request(b, s2, &r,
	        "{\"id\":\"t\",\"method\":\"attach\",\"params\":{\"id\":\"%016" PRIx64 "\"}}",
	        a2.id);
	assert_int_equal(r.r.code, PROTO_E_LIMIT);
	assert_string_equal(r.r.id, "t");
	assert_int_equal(r.fd, -1);
	assert_true(limit_data_is(&r, "max_allocations", 2));
	reply_done(&r);
	/* Detaching makes room. */
	assert_int_equal(broker_detach(b, s2, a1.id), 0);
	grant_poison(&g);
	assert_int_equal(broker_attach(b, s2, a2.id, &g), 0);
	assert_int_equal(s2->attached.count, 1);
	check(b);
	broker_done(b);
}

/*
 * broker.c (broker_attach): "Attachments pin slabs: they count against the
 * same limit" -- one limit for what a connection holds. Attaching checks
 * allocations + attachments; allocating must check the same sum, or the
 * outcome depends on the order (attach first, then allocate past the limit).
 */
static void test_alloc_counts_attachments(void **state)
{
	struct broker *b = broker_new(64 * MiB, 0, 2);
	struct session *s1 = open_session(b, UID_A, 1);
	struct session *s2 = open_session(b, UID_A, 2);
	struct broker_grant g;
	(void)state;

	struct broker_instance *i1 = reg(b, s1, 0);
	struct broker_instance *i2 = reg(b, s2, 0);
	struct broker_grant a1 = alloc_ok(b, s1, i1, 4096, 0);
	struct broker_grant a2 = alloc_ok(b, s1, i1, 4096, 0);
	grant_poison(&g);
	assert_int_equal(broker_attach(b, s2, a1.id, &g), 0);
	grant_poison(&g);
	assert_int_equal(broker_attach(b, s2, a2.id, &g), 0);
	/* s2 holds two things with max_allocations 2. */
	grant_poison(&g);
	int rc = broker_alloc(b, s2, i2->id, 4096, 0, &g);
	if (rc != -EMFILE)
		fail_msg("alloc with %u attachments at max_allocations %u: %d, want -EMFILE",
		         (unsigned)s2->attached.count, b->limits.max_allocations, rc);
	check(b);
	broker_done(b);
}

/* ---- out of device memory ------------------------------------------------ */

static void test_oom(void **state)
{
	/* 8 MiB per device: four 2 MiB slabs. */
	struct broker *b = broker_new(8 * MiB, 0, 0);
	struct session *sa = open_session(b, UID_A, 1);
	struct session *sb = open_session(b, UID_B, 2);
	struct broker_grant g;
	(void)state;

	struct broker_instance *ia = reg(b, sa, 0);
	struct broker_instance *ib = reg(b, sb, 0);
	struct broker_grant gb = alloc_ok(b, sb, ib, 4096, 0); /* B: one standard slab */
	struct broker_grant ga[3];
	for (int i = 0; i < 3; i++)
		ga[i] = alloc_ok(b, sa, ia, 2 * MiB, 0); /* A: three dedicated slabs */
	check(b);
	struct pool_stats st = dev_stats(b, 0);
	assert_int_equal(st.slabs, 4);
	assert_int_equal(st.reserved, 8 * MiB);
	assert_int_equal(st.ooms, 0);
	assert_int_equal(broker_device_free(b, 0), 8 * MiB - 6 * MiB - 4096);

	/* Full: A can neither get a dedicated nor a standard slab. */
	grant_poison(&g);
	assert_int_equal(broker_alloc(b, sa, ia->id, 2 * MiB, 0, &g), -ENOMEM);
	assert_int_equal(dev_stats(b, 0).ooms, 1);
	assert_int_equal(broker_alloc(b, sa, ia->id, 4096, 0, &g), -ENOMEM);
	assert_int_equal(dev_stats(b, 0).ooms, 2);
	/* Larger than the device: -ENOMEM too. */
	assert_int_equal(broker_alloc(b, sa, ia->id, 64 * MiB, 0, &g), -ENOMEM);
	assert_int_equal(dev_stats(b, 0).ooms, 3);
	assert_int_equal(sa->alloc_count, 3);
	check(b);
	/* The other device is untouched. */
	assert_int_equal(dev_stats(b, 1).ooms, 0);
	alloc_ok(b, sa, reg(b, sa, 1), 2 * MiB, 0);

	/* B frees its allocation: the empty slab stays as B's cache while B
	 * has a session. */
	assert_int_equal(broker_free(b, sb, gb.id), 0);
	check(b);
	st = dev_stats(b, 0);
	assert_int_equal(st.slabs, 4);
	assert_int_equal(st.reserved, 8 * MiB);
	assert_int_equal(st.used, 6 * MiB);

	/* B goes: its cached empty slab is trimmed. */
	broker_session_close(b, sb);
	check(b);
	st = dev_stats(b, 0);
	assert_int_equal(st.slabs, 3);
	assert_int_equal(st.reserved, 6 * MiB);
	assert_int_equal(broker_device_free(b, 0), 2 * MiB);

	/* And A can use the memory. */
	g = alloc_ok(b, sa, ia, 2 * MiB, 0);
	assert_non_null(g.handle);
	assert_int_equal(dev_stats(b, 0).ooms, 3);
	grant_poison(&g);
	assert_int_equal(broker_alloc(b, sa, ia->id, 256, 0, &g), -ENOMEM);
	assert_int_equal(dev_stats(b, 0).ooms, 4);
	check(b);

	/* With B connected, B's cached empty slab still yields to A when the
	 * device is full (pool.h: on -ENOMEM every idle slab is released and
	 * the creation retried), and that is no OOM. */
	assert_int_equal(broker_free(b, sa, ga[0].id), 0); /* dedicated: returned */
	assert_int_equal(dev_stats(b, 0).reserved, 6 * MiB);
	sb = open_session(b, UID_B, 3);
	ib = reg(b, sb, 0);
	gb = alloc_ok(b, sb, ib, 4096, 0);
	assert_int_equal(broker_free(b, sb, gb.id), 0);
	st = dev_stats(b, 0);
	assert_int_equal(st.slabs, 4);
	assert_int_equal(st.reserved, 8 * MiB);
	g = alloc_ok(b, sa, ia, 2 * MiB, 0);
	st = dev_stats(b, 0);
	assert_int_equal(st.ooms, 4);
	assert_int_equal(st.slabs, 4);
	assert_int_equal(st.used, 8 * MiB);
	check(b);
	broker_done(b);
}

/* ---- allocation ids ------------------------------------------------------ */

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void test_alloc_ids(void **state)
{
	enum { N = 10000 };
	struct broker *b = broker_new(64 * MiB, 0, 0);
	struct session *s = open_session(b, UID_A, 1);
	struct broker_instance *inst = reg(b, s, 0);
	static uint64_t ids[N], sorted[N];
	(void)state;

	for (int i = 0; i < N; i++) {
		struct broker_grant g;
		grant_poison(&g);
		assert_int_equal(broker_alloc(b, s, inst->id, 256, 0, &g), 0);
		assert_int_not_equal(g.id, 0);
		ids[i] = g.id;
	}
	assert_int_equal(s->alloc_count, N);
	assert_int_equal(b->allocs.count, N);
	check(b);

	memcpy(sorted, ids, N * sizeof(*ids));
	qsort(sorted, N, sizeof(*sorted), cmp_u64);
	for (int i = 1; i < N; i++) {
		if (sorted[i] == sorted[i - 1])
			fail_msg("allocation id %016" PRIx64 " given twice", sorted[i]);
	}
	/* Not a sequence: the differences between consecutive ids vary, the
	 * ids are neither increasing nor decreasing, and they use the high
	 * bits (random 64-bit values, not small counters). */
	bool same_step = true, increasing = true, decreasing = true;
	unsigned high = 0;
	for (int i = 1; i < N; i++) {
		if (ids[i] - ids[i - 1] != ids[1] - ids[0])
			same_step = false;
		if (ids[i] <= ids[i - 1])
			increasing = false;
		if (ids[i] >= ids[i - 1])
			decreasing = false;
	}
	for (int i = 0; i < N; i++)
		high += (ids[i] >> 48) != 0;
	assert_false(same_step);
	assert_false(increasing);
	assert_false(decreasing);
	assert_true(high > N / 2);

	for (int i = 0; i < N; i++)
		assert_int_equal(broker_free(b, s, ids[i]), 0);
	check(b);
	assert_int_equal(b->allocs.count, 0);
	assert_int_equal(dev_stats(b, 0).live, 0);
	broker_done(b);
}

/* ---- dispatch: end to end ------------------------------------------------ */

static void test_dispatch_end_to_end(void **state)
{
	const uint64_t mem = 64 * MiB;
	struct broker *b = broker_new(mem, 5, 1000);
	struct session *s = broker_session_open(b, UID_A, 100, 4242);
	struct reply r;
	const cJSON *res, *o, *lim;
	char handle_hex[2 * PROTO_HANDLE_SIZE + 1];
	unsigned char handle[PROTO_HANDLE_SIZE];
	(void)state;

	assert_non_null(s);

	/* hello */
	request(b, s, &r,
	        "{\"id\":\"1\",\"method\":\"hello\",\"params\":{\"versions\":[1],"
	        "\"client\":\"unit-test\"}}");
	res = result_of(&r, "1");
	assert_int_equal(r.fd, -1);
	assert_int_equal(jnum(res, "version"), 1);
	assert_string_equal(jstr(res, "server"), "gpubrokerd");
	assert_string_equal(jstr(res, "server_version"), GPB_VERSION);
	assert_string_equal(jstr(res, "backend"), "sim");
	assert_int_equal(jid(res, "session"), s->id);
	assert_int_equal(jnum(res, "uid"), UID_A);
	lim = jget(res, "limits");
	assert_int_equal(jnum(lim, "max_frame"), PROTO_MAX_FRAME);
	assert_int_equal(jnum(lim, "max_reply"), PROTO_MAX_REPLY);
	assert_int_equal(jnum(lim, "max_depth"), PROTO_MAX_DEPTH);
	assert_int_equal(jnum(lim, "max_members"), PROTO_MAX_KEYS);
	assert_int_equal(jnum(lim, "max_id"), PROTO_MAX_ID);
	assert_int_equal(jnum(lim, "max_name"), PROTO_MAX_NAME);
	assert_int_equal(jnum(lim, "max_instances"), 5);
	assert_int_equal(jnum(lim, "max_allocations"), 1000);
	assert_int_equal(jnum(lim, "write_high_water"), b->limits.write_high_water);
	assert_int_equal(jnum(lim, "hello_timeout_ms"), b->limits.hello_timeout_ms);
	reply_done(&r);
	assert_true(s->hello);
	assert_string_equal(s->name, "unit-test");

	/* register */
	request(b, s, &r,
	        "{\"id\":\"reg-2\",\"method\":\"register\",\"params\":{\"name\":\"solver\","
	        "\"device\":1,\"proportion\":0.25,\"group\":\"g1\"}}");
	res = result_of(&r, "reg-2");
	uint64_t inst = jid(res, "instance");
	assert_int_equal(jnum(res, "device"), 1);
	assert_int_equal(ju64(res, "cap"), mem);
	reply_done(&r);
	struct broker_instance *bi = broker_instance_find(s, inst);
	assert_non_null(bi);
	assert_int_equal(bi->device, 1);
	assert_string_equal(bi->name, "solver");
	assert_string_equal(bi->group, "g1");
	assert_true(bi->proportion == 0.25);
	check(b);

	/* alloc: first in the slab */
	request(b, s, &r,
	        "{\"id\":\"3\",\"method\":\"alloc\",\"params\":{\"instance\":\"%016" PRIx64
	        "\",\"size\":\"1000\"}}",
	        inst);
	res = result_of(&r, "3");
	uint64_t id1 = jid(res, "id");
	assert_int_not_equal(id1, 0);
	assert_int_equal(jnum(res, "device"), 1);
	uint64_t slab = jid(res, "slab");
	assert_int_equal(ju64(res, "slab_size"), SLAB);
	assert_int_equal(ju64(res, "offset"), 0);
	assert_int_equal(ju64(res, "size"), 1024);
	assert_int_equal(strlen(jstr(res, "handle")), 2 * PROTO_HANDLE_SIZE);
	snprintf(handle_hex, sizeof(handle_hex), "%s", jstr(res, "handle"));
	assert_int_equal(proto_hex_decode(handle_hex, handle, sizeof(handle)), 0);
	assert_memory_equal(handle, "GPBSIM01", 8);
	assert_true(cJSON_IsTrue(jget(res, "fd")));
	assert_true(r.fd >= 0);
	int fd = r.fd;
	reply_done(&r);
	struct broker_alloc *ba = idmap_get(&b->allocs, id1);
	assert_non_null(ba);
	assert_ptr_equal(ba->inst, bi);
	assert_int_equal(((struct backend_slab *)pool_slab_backend(pool_block_slab(ba->block)))->fd,
	                 fd);
	check(b);

	/* mem_info: used is the allocation's size */
	request(b, s, &r, "{\"id\":\"4\",\"method\":\"mem_info\"}");
	res = result_of(&r, "4");
	o = cJSON_GetArrayItem(jarr(res, "instances", 1), 0);
	assert_int_equal(jid(o, "instance"), inst);
	assert_string_equal(jstr(o, "name"), "solver");
	assert_int_equal(jnum(o, "device"), 1);
	assert_string_equal(jstr(o, "group"), "g1");
	assert_true(jnum(o, "proportion") == 0.25);
	assert_int_equal(ju64(o, "cap"), mem);
	assert_int_equal(ju64(o, "used"), 1024);
	assert_int_equal(ju64(o, "free"), mem - 1024);
	o = cJSON_GetArrayItem(jarr(res, "devices", 1), 0);
	assert_int_equal(jnum(o, "device"), 1);
	assert_int_equal(ju64(o, "total"), mem);
	assert_int_equal(ju64(o, "free"), mem - 1024);
	reply_done(&r);

	/* alloc: same slab, nothing to send */
	request(b, s, &r,
	        "{\"id\":\"5\",\"method\":\"alloc\",\"params\":{\"instance\":\"%016" PRIx64
	        "\",\"size\":\"5000\",\"alignment\":\"4096\",\"type\":\"device\"}}",
	        inst);
	res = result_of(&r, "5");
	uint64_t id2 = jid(res, "id");
	assert_int_not_equal(id2, id1);
	assert_int_equal(jid(res, "slab"), slab);
	assert_int_equal(ju64(res, "size"), 5120);
	assert_int_equal(ju64(res, "offset") % 4096, 0);
	assert_null(cJSON_GetObjectItemCaseSensitive(res, "handle"));
	assert_null(cJSON_GetObjectItemCaseSensitive(res, "fd"));
	assert_int_equal(r.fd, -1);
	reply_done(&r);

	/* mem_info for one instance; an unregistered second instance shows
	 * only when asked for all. */
	request(b, s, &r, "{\"id\":\"6\",\"method\":\"register\",\"params\":{\"name\":\"idle\"}}");
	uint64_t inst2 = jid(result_of(&r, "6"), "instance");
	reply_done(&r);
	request(b, s, &r,
	        "{\"id\":\"7\",\"method\":\"mem_info\",\"params\":{\"instance\":\"%016" PRIx64
	        "\"}}",
	        inst);
	res = result_of(&r, "7");
	o = cJSON_GetArrayItem(jarr(res, "instances", 1), 0);
	assert_int_equal(ju64(o, "used"), 1024 + 5120);
	jarr(res, "devices", 1);
	reply_done(&r);
	request(b, s, &r, "{\"id\":\"8\",\"method\":\"mem_info\",\"params\":{}}");
	res = result_of(&r, "8");
	jarr(res, "instances", 2);
	jarr(res, "devices", 2);
	o = cJSON_GetArrayItem(jget(res, "instances"), 1);
	assert_int_equal(jid(o, "instance"), inst2);
	assert_int_equal(jnum(o, "device"), 0);
	assert_string_equal(jstr(o, "group"), "default");
	assert_true(cJSON_IsNull(jget(o, "proportion")));
	assert_int_equal(ju64(o, "used"), 0);
	reply_done(&r);

	/* stats */
	request(b, s, &r, "{\"id\":\"9\",\"method\":\"stats\"}");
	res = result_of(&r, "9");
	jarr(res, "devices", 2);
	o = cJSON_GetArrayItem(jget(res, "devices"), 1);
	assert_int_equal(jnum(o, "device"), 1);
	assert_int_equal(ju64(o, "live"), 2);
	assert_int_equal(ju64(o, "used"), 1024 + 5120);
	assert_int_equal(ju64(o, "reserved"), SLAB);
	assert_int_equal(ju64(o, "free"), SLAB - 1024 - 5120);
	assert_int_equal(ju64(o, "slabs"), 1);
	assert_int_equal(ju64(o, "allocs"), 2);
	assert_int_equal(ju64(o, "frees"), 0);
	assert_int_equal(ju64(o, "ooms"), 0);
	assert_int_equal(ju64(o, "peak"), 1024 + 5120);
	assert_true(ju64(o, "free_blocks") >= 1);
	assert_true(ju64(o, "largest_free") <= SLAB - 1024 - 5120);
	o = cJSON_GetArrayItem(jget(res, "devices"), 0);
	assert_int_equal(jnum(o, "device"), 0);
	assert_int_equal(ju64(o, "live"), 0);
	reply_done(&r);
	request(b, s, &r, "{\"id\":\"10\",\"method\":\"stats\",\"params\":{\"device\":1}}");
	res = result_of(&r, "10");
	o = cJSON_GetArrayItem(jarr(res, "devices", 1), 0);
	assert_int_equal(jnum(o, "device"), 1);
	assert_int_equal(ju64(o, "live"), 2);
	reply_done(&r);

	/* status */
	request(b, s, &r, "{\"id\":\"11\",\"method\":\"status\"}");
	res = result_of(&r, "11");
	assert_int_equal(jnum(res, "allocations"), 2);
	assert_int_equal(jnum(res, "clients"), 1);
	assert_int_equal(jnum(res, "instances"), 2);
	assert_string_equal(jstr(res, "backend"), "sim");
	assert_string_equal(jstr(res, "server_version"), GPB_VERSION);
	assert_int_equal(jnum(res, "pid"), getpid());
	assert_true(jnum(res, "uptime_s") >= 0);
	o = jget(res, "totals");
	assert_int_equal(ju64(o, "total"), 2 * mem);
	assert_int_equal(ju64(o, "reserved"), SLAB);
	assert_int_equal(ju64(o, "used"), 1024 + 5120);
	o = cJSON_GetArrayItem(jarr(res, "devices", 2), 1);
	assert_int_equal(jnum(o, "device"), 1);
	assert_int_equal(ju64(o, "total"), mem);
	assert_int_equal(ju64(o, "used"), 1024 + 5120);
	assert_int_equal(ju64(o, "reserved"), SLAB);
	assert_true(strlen(jstr(o, "name")) > 0);
	assert_true(strlen(jstr(o, "uuid")) > 0);
	reply_done(&r);

	/* clients: this session, and a second one that said no hello yet */
	struct session *quiet = open_session(b, UID_B, 77);
	request(b, s, &r, "{\"id\":\"12\",\"method\":\"clients\"}");
	res = result_of(&r, "12");
	o = cJSON_GetArrayItem(jarr(res, "clients", 2), 0);
	assert_int_equal(jid(o, "session"), s->id);
	assert_int_equal(jnum(o, "pid"), 4242);
	assert_int_equal(jnum(o, "uid"), UID_A);
	assert_int_equal(jnum(o, "gid"), 100);
	assert_string_equal(jstr(o, "name"), "unit-test");
	assert_int_equal(jnum(o, "instances"), 2);
	assert_int_equal(jnum(o, "allocations"), 2);
	assert_int_equal(ju64(o, "used"), 1024 + 5120);
	assert_true(jnum(o, "connected_s") >= 0);
	o = cJSON_GetArrayItem(jget(res, "clients"), 1);
	assert_int_equal(jid(o, "session"), quiet->id);
	assert_int_equal(jnum(o, "allocations"), 0);
	reply_done(&r);
	broker_session_close(b, quiet);

	/* devices */
	request(b, s, &r, "{\"id\":\"13\",\"method\":\"devices\"}");
	res = result_of(&r, "13");
	jarr(res, "devices", 2);
	for (int d = 0; d < 2; d++) {
		o = cJSON_GetArrayItem(jget(res, "devices"), d);
		assert_int_equal(jnum(o, "device"), d);
		assert_string_equal(jstr(o, "name"), b->dev[d].info.name);
		assert_string_equal(jstr(o, "uuid"), b->dev[d].info.uuid);
		assert_int_equal(ju64(o, "total"), mem);
		assert_int_equal(ju64(o, "free"), d == 1 ? mem - 1024 - 5120 : mem);
		assert_int_equal(ju64(o, "used"), d == 1 ? 1024 + 5120 : 0);
		assert_int_equal(ju64(o, "reserved"), d == 1 ? SLAB : 0);
		assert_string_equal(jstr(o, "compute_capability"), "0.0");
	}
	reply_done(&r);

	/* attach from a second session of the same uid gets handle and fd */
	struct session *s2 = open_session(b, UID_A, 4343);
	hello(b, s2, "second");
	request(b, s2, &r,
	        "{\"id\":\"a1\",\"method\":\"attach\",\"params\":{\"id\":\"%016" PRIx64 "\"}}",
	        id2);
	res = result_of(&r, "a1");
	assert_int_equal(jid(res, "id"), id2);
	assert_int_equal(jid(res, "slab"), slab);
	assert_string_equal(jstr(res, "handle"), handle_hex);
	assert_true(cJSON_IsTrue(jget(res, "fd")));
	assert_int_equal(r.fd, fd);
	reply_done(&r);
	expect_error_fmt(
	    b, s2, PROTO_E_PARAMS, NULL,
	    "{\"id\":\"e\",\"method\":\"attach\",\"params\":{\"id\":\"%016" PRIx64 "\"}}", id2);
	request(b, s2, &r,
	        "{\"id\":\"d1\",\"method\":\"detach\",\"params\":{\"id\":\"%016" PRIx64 "\"}}",
	        id2);
	res = result_of(&r, "d1");
	assert_null(res->child);
	reply_done(&r);
	expect_error_fmt(
	    b, s2, PROTO_E_NOT_FOUND, NULL,
	    "{\"id\":\"e\",\"method\":\"detach\",\"params\":{\"id\":\"%016" PRIx64 "\"}}", id2);
	/* s2 may not free s1's allocation */
	expect_error_fmt(
	    b, s2, PROTO_E_NOT_FOUND, NULL,
	    "{\"id\":\"e\",\"method\":\"free\",\"params\":{\"id\":\"%016" PRIx64 "\"}}", id2);
	broker_session_close(b, s2);
	check(b);

	/* unregister with live allocations: -32602 */
	expect_error_fmt(b, s, PROTO_E_PARAMS, NULL,
	                 "{\"id\":\"e\",\"method\":\"unregister\",\"params\":{\"instance\":"
	                 "\"%016" PRIx64 "\"}}",
	                 inst);

	/* free */
	request(b, s, &r,
	        "{\"id\":\"14\",\"method\":\"free\",\"params\":{\"id\":\"%016" PRIx64 "\"}}", id1);
	res = result_of(&r, "14");
	assert_null(res->child);
	assert_int_equal(r.fd, -1);
	reply_done(&r);
	check(b);
	request(b, s, &r, "{\"id\":\"15\",\"method\":\"stats\",\"params\":{\"device\":1}}");
	o = cJSON_GetArrayItem(jarr(result_of(&r, "15"), "devices", 1), 0);
	assert_int_equal(ju64(o, "live"), 1);
	assert_int_equal(ju64(o, "used"), 5120);
	assert_int_equal(ju64(o, "frees"), 1);
	reply_done(&r);
	expect_error_fmt(
	    b, s, PROTO_E_NOT_FOUND, NULL,
	    "{\"id\":\"e\",\"method\":\"free\",\"params\":{\"id\":\"%016" PRIx64 "\"}}", id1);
	request(b, s, &r,
	        "{\"id\":\"16\",\"method\":\"free\",\"params\":{\"id\":\"%016" PRIx64 "\"}}", id2);
	result_of(&r, "16");
	reply_done(&r);
	request(b, s, &r, "{\"id\":\"17\",\"method\":\"status\"}");
	assert_int_equal(jnum(result_of(&r, "17"), "allocations"), 0);
	reply_done(&r);

	/* unregister, then it is unknown */
	request(b, s, &r,
	        "{\"id\":\"18\",\"method\":\"unregister\",\"params\":{\"instance\":\"%016" PRIx64
	        "\"}}",
	        inst);
	result_of(&r, "18");
	reply_done(&r);
	expect_error_fmt(b, s, PROTO_E_NOT_FOUND, NULL,
	                 "{\"id\":\"e\",\"method\":\"unregister\",\"params\":{\"instance\":"
	                 "\"%016" PRIx64 "\"}}",
	                 inst);
	expect_error_fmt(b, s, PROTO_E_NOT_FOUND, NULL,
	                 "{\"id\":\"e\",\"method\":\"mem_info\",\"params\":{\"instance\":"
	                 "\"%016" PRIx64 "\"}}",
	                 inst);
	assert_int_equal(b->instance_count, 1);
	check(b);
	broker_done(b);
}

/* ---- dispatch: state and version errors ---------------------------------- */

static void test_dispatch_state(void **state)
{
	struct broker *b = broker_new(64 * MiB, 0, 0);
	struct session *s = open_session(b, UID_A, 1);
	struct reply r;
	(void)state;

	/* Before hello: everything else is -32000. */
	static const char *const before[] = {
	    "{\"id\":\"e\",\"method\":\"status\"}",
	    "{\"id\":\"e\",\"method\":\"register\",\"params\":{\"name\":\"x\"}}",
	    ("{\"id\":\"e\",\"method\":\"alloc\",\"params\":{\"instance\":\"0000000000000001\","
	     "\"size\":\"1\"}}"),
	    "{\"id\":\"e\",\"method\":\"free\",\"params\":{\"id\":\"0000000000000001\"}}",
	    "{\"id\":\"e\",\"method\":\"clients\"}",
	    "{\"id\":\"e\",\"method\":\"devices\"}",
	    "{\"id\":\"e\",\"method\":\"stats\"}",
	    "{\"id\":\"e\",\"method\":\"mem_info\"}",
	};
	for (size_t i = 0; i < sizeof(before) / sizeof(before[0]); i++)
		expect_error(b, s, before[i], "e", PROTO_E_STATE, NULL);
	assert_int_equal(s->instance_count, 0);

	/* hello's own parameter errors */
	expect_error(b, s, "{\"id\":\"e\",\"method\":\"hello\"}", "e", PROTO_E_PARAMS, "versions");
	expect_error(b, s, "{\"id\":\"e\",\"method\":\"hello\",\"params\":{\"versions\":1}}", "e",
	             PROTO_E_PARAMS, "versions");
	expect_error(b, s, "{\"id\":\"e\",\"method\":\"hello\",\"params\":{\"versions\":[\"1\"]}}",
	             "e", PROTO_E_PARAMS, "versions");
	expect_error(b, s,
	             "{\"id\":\"e\",\"method\":\"hello\",\"params\":{\"versions\":[1],"
	             "\"client\":\"\"}}",
	             "e", PROTO_E_PARAMS, "client");
	expect_error(b, s,
	             "{\"id\":\"e\",\"method\":\"hello\",\"params\":{\"versions\":[1],"
	             "\"client\":7}}",
	             "e", PROTO_E_PARAMS, "client");
	assert_false(s->hello);

	/* Unsupported version: -32001 with data.supported == [1]. */
	request(b, s, &r, "{\"id\":\"v\",\"method\":\"hello\",\"params\":{\"versions\":[2]}}");
	assert_null(r.r.result);
	assert_int_equal(r.r.code, PROTO_E_VERSION);
	assert_string_equal(r.r.id, "v");
	assert_non_null(r.r.data);
	const cJSON *sup = jarr(r.r.data, "supported", 1);
	assert_true(cJSON_IsNumber(cJSON_GetArrayItem(sup, 0)));
	assert_int_equal(cJSON_GetArrayItem(sup, 0)->valuedouble, PROTO_VERSION);
	reply_done(&r);
	expect_error(b, s, "{\"id\":\"v\",\"method\":\"hello\",\"params\":{\"versions\":[]}}", "v",
	             PROTO_E_VERSION, NULL);
	assert_false(s->hello);
	expect_error(b, s, "{\"id\":\"e\",\"method\":\"status\"}", "e", PROTO_E_STATE, NULL);

	/* A list with the supported version among others works. */
	request(b, s, &r, "{\"id\":\"ok\",\"method\":\"hello\",\"params\":{\"versions\":[3,1,2]}}");
	assert_int_equal(jnum(result_of(&r, "ok"), "version"), 1);
	reply_done(&r);
	assert_true(s->hello);
	assert_string_equal(s->name, "");

	/* Second hello: -32000. */
	expect_error(b, s, "{\"id\":\"h2\",\"method\":\"hello\",\"params\":{\"versions\":[1]}}",
	             "h2", PROTO_E_STATE, NULL);

	/* Unknown method: -32601 with data.method (case-sensitive names). */
	static const char *const unknown[] = {"Status", "bogus", "", "hello ", "mem-info"};
	for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
		request(b, s, &r, "{\"id\":\"m%zu\",\"method\":\"%s\"}", i, unknown[i]);
		char id[16];
		snprintf(id, sizeof(id), "m%zu", i);
		assert_null(r.r.result);
		assert_int_equal(r.r.code, PROTO_E_METHOD);
		assert_string_equal(r.r.id, id);
		assert_non_null(r.r.data);
		assert_string_equal(jstr(r.r.data, "method"), unknown[i]);
		reply_done(&r);
	}

	/* The session still works. */
	request(b, s, &r, "{\"id\":\"s\",\"method\":\"status\"}");
	result_of(&r, "s");
	reply_done(&r);
	check(b);
	broker_done(b);
}

/* ---- dispatch: parameter errors ------------------------------------------ */

struct bad_param {
	const char *params; /* members after "instance" (alloc) or the whole object */
	const char *field;
};

static void test_dispatch_params(void **state)
{
	struct broker *b = broker_new(64 * MiB, 0, 0);
	struct session *s = open_session(b, UID_A, 1);
	struct reply r;
	(void)state;

	hello(b, s, "params");
	request(b, s, &r, "{\"id\":\"r\",\"method\":\"register\",\"params\":{\"name\":\"x\"}}");
	uint64_t inst = jid(result_of(&r, "r"), "instance");
	reply_done(&r);

	/* alloc, with a valid instance */
	static const struct bad_param alloc_bad[] = {
	    {"\"size\":1000", "size"},
	    {"\"size\":\"-1\"", "size"},
	    {"\"size\":\"0\"", "size"},
	    {"\"size\":\"1e9\"", "size"},
	    {"\"size\":\"0x10\"", "size"},
	    {"\"size\":\"1234567890123456789012345\"", "size"},
	    {"\"size\":\"18446744073709551616\"", "size"},
	    {"\"size\":\"18446744073709551615\"", "size"}, /* cannot be rounded up */
	    {"\"size\":\"01\"", "size"},
	    {"\"size\":\"+1\"", "size"},
	    {"\"size\":\" 1\"", "size"},
	    {"\"size\":\"1 \"", "size"},
	    {"\"size\":\"\"", "size"},
	    {"\"size\":null", "size"},
	    {"\"size\":true", "size"},
	    {"\"size\":[\"1\"]", "size"},
	    {"\"sizes\":\"1\"", "size"},
	    {"\"size\":\"1\",\"alignment\":\"3\"", "alignment"},
	    {"\"size\":\"1\",\"alignment\":\"4\"", "alignment"},
	    {"\"size\":\"1\",\"alignment\":\"0\"", "alignment"},
	    {"\"size\":\"1\",\"alignment\":\"768\"", "alignment"},
	    {"\"size\":\"1\",\"alignment\":\"8388608\"", "alignment"},
	    {"\"size\":\"1\",\"alignment\":\"4194304\"", "alignment"},
	    {"\"size\":\"1\",\"alignment\":4096", "alignment"},
	    {"\"size\":\"1\",\"alignment\":\"0x100\"", "alignment"},
	    {"\"size\":\"1\",\"type\":\"bogus\"", "type"},
	    {"\"size\":\"1\",\"type\":\"\"", "type"},
	    {"\"size\":\"1\",\"type\":\"Device\"", "type"},
	    {"\"size\":\"1\",\"type\":1", "type"},
	};
	for (size_t i = 0; i < sizeof(alloc_bad) / sizeof(alloc_bad[0]); i++)
		expect_error_fmt(b, s, PROTO_E_PARAMS, alloc_bad[i].field,
		                 "{\"id\":\"e\",\"method\":\"alloc\",\"params\":{\"instance\":"
		                 "\"%016" PRIx64 "\",%s}}",
		                 inst, alloc_bad[i].params);

	/* alloc: the instance field */
	static const struct bad_param inst_bad[] = {
	    {"{\"size\":\"1\"}", "instance"},
	    {"{\"instance\":\"zzzzzzzzzzzzzzzz\",\"size\":\"1\"}", "instance"},
	    {"{\"instance\":\"000000000000000G\",\"size\":\"1\"}", "instance"},
	    {"{\"instance\":\"00000000000000AB\",\"size\":\"1\"}", "instance"},
	    {"{\"instance\":\"000000000000001\",\"size\":\"1\"}", "instance"},
	    {"{\"instance\":\"00000000000000001\",\"size\":\"1\"}", "instance"},
	    {"{\"instance\":1,\"size\":\"1\"}", "instance"},
	    {"{\"instance\":\"-000000000000001\",\"size\":\"1\"}", "instance"},
	};
	for (size_t i = 0; i < sizeof(inst_bad) / sizeof(inst_bad[0]); i++)
		expect_error_fmt(b, s, PROTO_E_PARAMS, inst_bad[i].field,
		                 "{\"id\":\"e\",\"method\":\"alloc\",\"params\":%s}",
		                 inst_bad[i].params);

	/* alloc: types this version cannot serve */
	static const char *const unsupported[] = {"managed", "pinned", "mapped"};
	for (size_t i = 0; i < sizeof(unsupported) / sizeof(unsupported[0]); i++)
		expect_error_fmt(b, s, PROTO_E_NOT_SUPPORTED, NULL,
		                 "{\"id\":\"e\",\"method\":\"alloc\",\"params\":{\"instance\":"
		                 "\"%016" PRIx64 "\",\"size\":\"4096\",\"type\":\"%s\"}}",
		                 inst, unsupported[i]);
	/* alloc: an unknown instance */
	expect_error_fmt(b, s, PROTO_E_NOT_FOUND, NULL,
	                 "{\"id\":\"e\",\"method\":\"alloc\",\"params\":{\"instance\":"
	                 "\"%016" PRIx64 "\",\"size\":\"4096\"}}",
	                 inst + 100);
	assert_int_equal(s->alloc_count, 0);
	assert_int_equal(b->allocs.count, 0);
	assert_int_equal(dev_stats(b, 0).allocs, 0);
	check(b);

	/* The boundaries that are fine. */
	static const char *const good[] = {
	    "\"size\":\"1\"",
	    "\"size\":\"4096\",\"alignment\":\"256\"",
	    "\"size\":\"4096\",\"alignment\":\"2097152\"",
	    "\"size\":\"65536\",\"type\":\"device\",\"unknown_member\":1",
	};
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		request(b, s, &r,
		        "{\"id\":\"g\",\"method\":\"alloc\",\"params\":{\"instance\":\"%016" PRIx64
		        "\",%s}}",
		        inst, good[i]);
		const cJSON *res = result_of(&r, "g");
		if (i == 2)
			assert_int_equal(ju64(res, "offset") % (2 * MiB), 0);
		reply_done(&r);
	}
	assert_int_equal(s->alloc_count, 4);

	/* register */
	char name65[66], name64[65];
	memset(name65, 'n', 65);
	name65[65] = '\0';
	memset(name64, 'n', 64);
	name64[64] = '\0';
	static const struct bad_param reg_bad[] = {
	    {"{}", "name"},
	    {"{\"name\":\"\"}", "name"},
	    {"{\"name\":7}", "name"},
	    {"{\"name\":null}", "name"},
	    {"{\"name\":\"x\",\"proportion\":0}", "proportion"},
	    {"{\"name\":\"x\",\"proportion\":1.5}", "proportion"},
	    {"{\"name\":\"x\",\"proportion\":\"0.5\"}", "proportion"},
	    {"{\"name\":\"x\",\"proportion\":-0.5}", "proportion"},
	    {"{\"name\":\"x\",\"proportion\":1.0000001}", "proportion"},
	    {"{\"name\":\"x\",\"device\":-1}", "device"},
	    {"{\"name\":\"x\",\"device\":99}", "device"},
	    {"{\"name\":\"x\",\"device\":\"0\"}", "device"},
	    {"{\"name\":\"x\",\"device\":2}", "device"},
	    {"{\"name\":\"x\",\"device\":0.5}", "device"},
	    {"{\"name\":\"x\",\"group\":\"\"}", "group"},
	    {"{\"name\":\"x\",\"group\":5}", "group"},
	};
	for (size_t i = 0; i < sizeof(reg_bad) / sizeof(reg_bad[0]); i++)
		expect_error_fmt(b, s, PROTO_E_PARAMS, reg_bad[i].field,
		                 "{\"id\":\"e\",\"method\":\"register\",\"params\":%s}",
		                 reg_bad[i].params);
	expect_error_fmt(b, s, PROTO_E_PARAMS, "name",
	                 "{\"id\":\"e\",\"method\":\"register\",\"params\":{\"name\":\"%s\"}}",
	                 name65);
	expect_error_fmt(b, s, PROTO_E_PARAMS, "group",
	                 "{\"id\":\"e\",\"method\":\"register\",\"params\":{\"name\":\"x\","
	                 "\"group\":\"%s\"}}",
	                 name65);
	assert_int_equal(s->instance_count, 1);
	/* Boundaries that are fine: 64-byte name and group, proportion 1. */
	request(b, s, &r,
	        "{\"id\":\"g\",\"method\":\"register\",\"params\":{\"name\":\"%s\",\"group\":"
	        "\"%s\",\"proportion\":1,\"device\":1}}",
	        name64, name64);
	struct broker_instance *bi = broker_instance_find(s, jid(result_of(&r, "g"), "instance"));
	reply_done(&r);
	assert_non_null(bi);
	assert_string_equal(bi->name, name64);
	assert_string_equal(bi->group, name64);
	assert_int_equal(bi->device, 1);
	assert_int_equal(s->instance_count, 2);

	/* free, unregister, attach, detach: the id fields */
	static const char *const id_bad[] = {
	    "{}",
	    "{\"id\":\"xyz\"}",
	    "{\"id\":12}",
	    "{\"id\":\"ABCDEF0123456789\"}",
	    "{\"id\":\"0123456789abcdef0\"}",
	};
	static const char *const id_methods[] = {"free", "attach", "detach"};
	for (size_t m = 0; m < sizeof(id_methods) / sizeof(id_methods[0]); m++)
		for (size_t i = 0; i < sizeof(id_bad) / sizeof(id_bad[0]); i++)
			expect_error_fmt(b, s, PROTO_E_PARAMS, "id",
			                 "{\"id\":\"e\",\"method\":\"%s\",\"params\":%s}",
			                 id_methods[m], id_bad[i]);
	expect_error(b, s, "{\"id\":\"e\",\"method\":\"unregister\",\"params\":{}}", "e",
	             PROTO_E_PARAMS, "instance");
	expect_error(b, s,
	             "{\"id\":\"e\",\"method\":\"unregister\",\"params\":{\"instance\":\"1\"}}",
	             "e", PROTO_E_PARAMS, "instance");
	expect_error(b, s, "{\"id\":\"e\",\"method\":\"mem_info\",\"params\":{\"instance\":\"1\"}}",
	             "e", PROTO_E_PARAMS, "instance");
	expect_error(b, s, "{\"id\":\"e\",\"method\":\"stats\",\"params\":{\"device\":2}}", "e",
	             PROTO_E_PARAMS, "device");
	expect_error(b, s, "{\"id\":\"e\",\"method\":\"stats\",\"params\":{\"device\":\"0\"}}", "e",
	             PROTO_E_PARAMS, "device");

	/* free of unknown ids: -32004 */
	expect_error(b, s,
	             "{\"id\":\"e\",\"method\":\"free\",\"params\":{\"id\":\"0123456789abcdef\"}}",
	             "e", PROTO_E_NOT_FOUND, NULL);
	expect_error(b, s,
	             "{\"id\":\"e\",\"method\":\"free\",\"params\":{\"id\":\"0000000000000000\"}}",
	             "e", PROTO_E_NOT_FOUND, NULL);
	expect_error(
	    b, s, "{\"id\":\"e\",\"method\":\"attach\",\"params\":{\"id\":\"0123456789abcdef\"}}",
	    "e", PROTO_E_NOT_FOUND, NULL);
	assert_int_equal(s->alloc_count, 4);
	check(b);
	broker_done(b);
}

/* ---- dispatch: ids and malformed frames ---------------------------------- */

static void test_dispatch_ids_and_malformed(void **state)
{
	struct broker *b = broker_new(64 * MiB, 0, 0);
	struct session *s = open_session(b, UID_A, 1);
	struct reply r;
	char id64[65], id65[66], frame[256];
	(void)state;

	/* Malformed frames are answered with id null, before and after hello. */
	static const struct {
		const char *frame;
		int code;
	} bad[] = {
	    {"{\"1\":1,", PROTO_E_PARSE},
	    {"", PROTO_E_PARSE},
	    {"not json", PROTO_E_PARSE},
	    {"{\"id\":\"x\",\"method\":\"status\"} trailing", PROTO_E_PARSE},
	    {"{\"id\":\"x\",\"method\":\"st\\u0000atus\"}", PROTO_E_PARSE},
	    {"[]", PROTO_E_INVALID_REQUEST},
	    {"null", PROTO_E_INVALID_REQUEST},
	    {"\"id\"", PROTO_E_INVALID_REQUEST},
	    {"42", PROTO_E_INVALID_REQUEST},
	    {"{\"id\":1,\"method\":\"status\"}", PROTO_E_INVALID_REQUEST},
	    {"{\"id\":null,\"method\":\"status\"}", PROTO_E_INVALID_REQUEST},
	    {"{\"id\":\"\",\"method\":\"status\"}", PROTO_E_INVALID_REQUEST},
	    {"{\"method\":\"status\"}", PROTO_E_INVALID_REQUEST},
	    {"{\"ID\":\"1\",\"method\":\"status\"}", PROTO_E_INVALID_REQUEST},
	    {"{\"id\":\"1\",\"id\":\"2\",\"method\":\"status\"}", PROTO_E_INVALID_REQUEST},
	    {"{\"id\":\"1\",\"method\":\"status\",\"params\":{\"a\":[[[[[[[[1]]]]]]]]}}",
	     PROTO_E_INVALID_REQUEST},
	};
	for (int round = 0; round < 2; round++) {
		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
			expect_error(b, s, bad[i].frame, NULL, bad[i].code, NULL);
		if (round == 0)
			hello(b, s, "ids");
	}

	/* Ids of 65 bytes are refused, 64 are echoed. */
	memset(id65, 'i', 65);
	id65[65] = '\0';
	memset(id64, 'j', 64);
	id64[64] = '\0';
	snprintf(frame, sizeof(frame), "{\"id\":\"%s\",\"method\":\"status\"}", id65);
	expect_error(b, s, frame, NULL, PROTO_E_INVALID_REQUEST, NULL);
	request(b, s, &r, "{\"id\":\"%s\",\"method\":\"status\"}", id64);
	result_of(&r, id64);
	reply_done(&r);

	/* With a readable id, a later problem echoes it. */
	expect_error(b, s, "{\"id\":\"x1\"}", "x1", PROTO_E_INVALID_REQUEST, NULL);
	expect_error(b, s, "{\"id\":\"x2\",\"method\":7}", "x2", PROTO_E_INVALID_REQUEST, NULL);
	expect_error(b, s, "{\"id\":\"x3\",\"method\":\"status\",\"params\":[]}", "x3",
	             PROTO_E_INVALID_REQUEST, NULL);
	expect_error(b, s, "{\"id\":\"x4\",\"method\":\"nope\"}", "x4", PROTO_E_METHOD, NULL);

	/* Reply ids echo request ids exactly, escapes and all. */
	static const char *const ids[] = {"0",       "abc", "7 7", "\\\"q\\\"", "\\u00e9t\\u00e9",
	                                  "\xc3\xa9"};
	static const char *const echoed[] = {"0",       "abc", "7 7", "\"q\"", "\xc3\xa9t\xc3\xa9",
	                                     "\xc3\xa9"};
	for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
		request(b, s, &r, "{\"method\":\"devices\",\"id\":\"%s\",\"params\":{}}", ids[i]);
		result_of(&r, echoed[i]);
		reply_done(&r);
	}
	/* The server's own errors (frame too large, too many clients). */
	struct dispatch_reply dr = {.frame = NULL, .fd = -7};
	dispatch_error(PROTO_E_INVALID_REQUEST, "invalid request: frame too large", &dr);
	assert_non_null(dr.frame);
	assert_int_equal(dr.fd, -1);
	assert_int_equal(strlen(dr.frame), dr.len);
	assert_int_equal(dr.frame[dr.len - 1], '\n');
	int rc = proto_reply_parse(dr.frame, dr.len - 1, &r.r);
	free(dr.frame);
	assert_int_equal(rc, 0);
	live_add((void **)live_roots, r.r.root);
	assert_null(r.r.id);
	assert_null(r.r.result);
	assert_int_equal(r.r.code, PROTO_E_INVALID_REQUEST);
	assert_string_equal(r.r.message, "invalid request: frame too large");
	reply_done(&r);

	/* Frames with a trailing '\r' or blanks are fine. */
	request(b, s, &r, "  {\"id\":\"cr\",\"method\":\"status\"}\r");
	result_of(&r, "cr");
	reply_done(&r);
	check(b);
	broker_done(b);
}

/* ---- dispatch: broker errors through the protocol ------------------------ */

static void test_dispatch_broker_errors(void **state)
{
	struct broker *b = broker_new(8 * MiB, 2, 3);
	struct session *s = open_session(b, UID_A, 1);
	struct session *other = open_session(b, UID_B, 2);
	struct reply r;
	(void)state;

	hello(b, s, "errors");
	hello(b, other, "other");
	request(b, s, &r, "{\"id\":\"r\",\"method\":\"register\",\"params\":{\"name\":\"x\"}}");
	uint64_t inst = jid(result_of(&r, "r"), "instance");
	reply_done(&r);

	/* Another uid's allocation looks exactly like an unknown one. */
	request(b, s, &r,
	        "{\"id\":\"a\",\"method\":\"alloc\",\"params\":{\"instance\":\"%016" PRIx64
	        "\",\"size\":\"4096\"}}",
	        inst);
	uint64_t id = jid(result_of(&r, "a"), "id");
	reply_done(&r);
	char frame[256], frame2[256];
	snprintf(frame, sizeof(frame),
	         "{\"id\":\"e\",\"method\":\"attach\",\"params\":{\"id\":\"%016" PRIx64 "\"}}", id);
	snprintf(frame2, sizeof(frame2),
	         "{\"id\":\"e\",\"method\":\"attach\",\"params\":{\"id\":\"%016" PRIx64 "\"}}",
	         id ^ 1);
	struct reply r1, r2;
	send_frame(b, other, frame, strlen(frame), &r1);
	send_frame(b, other, frame2, strlen(frame2), &r2);
	assert_int_equal(r1.r.code, PROTO_E_NOT_FOUND);
	assert_int_equal(r2.r.code, PROTO_E_NOT_FOUND);
	assert_string_equal(r1.r.message, r2.r.message);
	assert_true((r1.r.data == NULL) == (r2.r.data == NULL));
	reply_done(&r1);
	reply_done(&r2);
	snprintf(frame, sizeof(frame),
	         "{\"id\":\"e\",\"method\":\"free\",\"params\":{\"id\":\"%016" PRIx64 "\"}}", id);
	expect_error(b, other, frame, "e", PROTO_E_NOT_FOUND, NULL);
	assert_non_null(idmap_get(&b->allocs, id));
	/* Another session's instance is unknown too. */
	expect_error_fmt(b, other, PROTO_E_NOT_FOUND, NULL,
	                 "{\"id\":\"e\",\"method\":\"mem_info\",\"params\":{\"instance\":"
	                 "\"%016" PRIx64 "\"}}",
	                 inst);
	expect_error_fmt(b, other, PROTO_E_NOT_FOUND, NULL,
	                 "{\"id\":\"e\",\"method\":\"unregister\",\"params\":{\"instance\":"
	                 "\"%016" PRIx64 "\"}}",
	                 inst);
	expect_error_fmt(b, other, PROTO_E_NOT_FOUND, NULL,
	                 "{\"id\":\"e\",\"method\":\"alloc\",\"params\":{\"instance\":"
	                 "\"%016" PRIx64 "\",\"size\":\"1\"}}",
	                 inst);
	assert_int_equal(other->alloc_count, 0);
	assert_int_equal(s->instance_count, 1);

	/* Out of device memory: -32002 with requested and device_free. */
	request(b, s, &r,
	        "{\"id\":\"o\",\"method\":\"alloc\",\"params\":{\"instance\":\"%016" PRIx64
	        "\",\"size\":\"16777216\"}}",
	        inst);
	assert_null(r.r.result);
	assert_int_equal(r.r.code, PROTO_E_NO_MEMORY);
	assert_string_equal(r.r.id, "o");
	assert_int_equal(r.fd, -1);
	assert_non_null(r.r.data);
	assert_int_equal(ju64(r.r.data, "requested"), 16 * MiB);
	assert_int_equal(ju64(r.r.data, "device_free"), 8 * MiB - 4096);
	reply_done(&r);
	assert_int_equal(dev_stats(b, 0).ooms, 1);

	/* max_allocations: -32006 */
	for (int i = 0; i < 2; i++) {
		request(b, s, &r,
		        "{\"id\":\"a\",\"method\":\"alloc\",\"params\":{\"instance\":\"%016" PRIx64
		        "\",\"size\":\"4096\"}}",
		        inst);
		result_of(&r, "a");
		reply_done(&r);
	}
	expect_error_fmt(b, s, PROTO_E_LIMIT, NULL,
	                 "{\"id\":\"e\",\"method\":\"alloc\",\"params\":{\"instance\":\"%016" PRIx64
	                 "\",\"size\":\"4096\"}}",
	                 inst);
	/* max_instances: -32006 */
	request(b, s, &r, "{\"id\":\"r\",\"method\":\"register\",\"params\":{\"name\":\"y\"}}");
	result_of(&r, "r");
	reply_done(&r);
	expect_error(b, s, "{\"id\":\"e\",\"method\":\"register\",\"params\":{\"name\":\"z\"}}",
	             "e", PROTO_E_LIMIT, NULL);

	/* Stopping: -32007 */
	b->stopping = true;
	expect_error_fmt(b, s, PROTO_E_SHUTTING_DOWN, NULL,
	                 "{\"id\":\"e\",\"method\":\"alloc\",\"params\":{\"instance\":\"%016" PRIx64
	                 "\",\"size\":\"4096\"}}",
	                 inst);
	b->stopping = false;
	check(b);
	broker_done(b);
}

/*
 * PROTOCOL.md's error table gives -32006 (limit_reached) the data
 * {"limit", "value"}; the alloc and register sections name the limits
 * (max_allocations, max_instances).
 */
static void test_dispatch_limit_error_data(void **state)
{
	struct broker *b = broker_new(64 * MiB, 1, 1);
	struct session *s = open_session(b, UID_A, 1);
	struct reply r;
	bool ok;
	(void)state;

	hello(b, s, "limits");
	request(b, s, &r, "{\"id\":\"r\",\"method\":\"register\",\"params\":{\"name\":\"x\"}}");
	uint64_t inst = jid(result_of(&r, "r"), "instance");
	reply_done(&r);
	request(b, s, &r,
	        "{\"id\":\"a\",\"method\":\"alloc\",\"params\":{\"instance\":\"%016" PRIx64
	        "\",\"size\":\"4096\"}}",
	        inst);
	result_of(&r, "a");
	reply_done(&r);

	request(b, s, &r,
	        "{\"id\":\"e\",\"method\":\"alloc\",\"params\":{\"instance\":\"%016" PRIx64
	        "\",\"size\":\"4096\"}}",
	        inst);
	assert_int_equal(r.r.code, PROTO_E_LIMIT);
	ok = limit_data_is(&r, "max_allocations", 1);
	reply_done(&r);
	if (!ok)
		fail_msg("-32006 for max_allocations lacks data {\"limit\":\"max_allocations\","
		         "\"value\":1} (PROTOCOL.md, error table)");

	request(b, s, &r, "{\"id\":\"e\",\"method\":\"register\",\"params\":{\"name\":\"y\"}}");
	assert_int_equal(r.r.code, PROTO_E_LIMIT);
	ok = limit_data_is(&r, "max_instances", 1);
	reply_done(&r);
	if (!ok)
		fail_msg("-32006 for max_instances lacks data {\"limit\":\"max_instances\","
		         "\"value\":1} (PROTOCOL.md, error table)");
	broker_done(b);
}

/*
 * PROTOCOL.md: unregister answers -32602 while the instance holds
 * allocations, and the error table gives every -32602 the data {"field"}.
 */
static void test_dispatch_unregister_busy_field(void **state)
{
	struct broker *b = broker_new(64 * MiB, 0, 0);
	struct session *s = open_session(b, UID_A, 1);
	struct reply r;
	(void)state;

	hello(b, s, "busy");
	request(b, s, &r, "{\"id\":\"r\",\"method\":\"register\",\"params\":{\"name\":\"x\"}}");
	uint64_t inst = jid(result_of(&r, "r"), "instance");
	reply_done(&r);
	request(b, s, &r,
	        "{\"id\":\"a\",\"method\":\"alloc\",\"params\":{\"instance\":\"%016" PRIx64
	        "\",\"size\":\"4096\"}}",
	        inst);
	result_of(&r, "a");
	reply_done(&r);
	expect_error_fmt(b, s, PROTO_E_PARAMS, "instance",
	                 "{\"id\":\"e\",\"method\":\"unregister\",\"params\":{\"instance\":"
	                 "\"%016" PRIx64 "\"}}",
	                 inst);
	assert_non_null(broker_instance_find(s, inst));
	broker_done(b);
}

/* Runs one frame (of any size) and parses the reply, which may be up to
 * max_reply bytes. */
static void send_big(struct broker *b, struct session *s, const char *frame, size_t len,
                     struct reply *out)
{
	struct dispatch_reply dr = {.frame = NULL, .len = 0, .fd = -7};
	int rc = -1;
	size_t rlen;

	dispatch_frame(b, s, frame, len, &dr);
	if (!dr.frame)
		fail_msg("no reply to a %zu-byte frame", len);
	rlen = dr.len;
	if (rlen >= 2 && rlen <= PROTO_MAX_REPLY && dr.frame[rlen - 1] == '\n')
		rc = proto_reply_parse(dr.frame, rlen - 1, &out->r);
	out->fd = dr.fd;
	free(dr.frame);
	if (rc != 0)
		fail_msg("reply of %zu bytes: not a parseable frame within max_reply (%d)", rlen,
		         rc);
	live_add((void **)live_roots, out->r.root);
}

/*
 * PROTOCOL.md: an unknown method is -32601 with data.method "when at most 64
 * bytes"; a longer one (up to a whole request frame) is still answered, and
 * the connection kept.
 */
static void test_dispatch_long_unknown_method(void **state)
{
	static char frame[PROTO_MAX_FRAME];
	static const size_t lens[] = {PROTO_MAX_NAME, PROTO_MAX_NAME + 1, 1000, 0};
	const char *head = "{\"id\":\"L\",\"method\":\"";
	size_t hl = strlen(head);
	struct broker *b = broker_new(64 * MiB, 0, 0);
	struct session *s = open_session(b, UID_A, 1);
	struct reply r;
	(void)state;

	hello(b, s, "long");
	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		/* 0: the largest legal frame, 65535 bytes plus the newline. */
		size_t mlen = lens[i] ? lens[i] : PROTO_MAX_FRAME - 1 - hl - 2;
		size_t len = hl + mlen + 2;
		memcpy(frame, head, hl);
		memset(frame + hl, 'm', mlen);
		memcpy(frame + hl + mlen, "\"}", 2);
		send_big(b, s, frame, len, &r);
		assert_null(r.r.result);
		assert_int_equal(r.r.code, PROTO_E_METHOD);
		assert_string_equal(r.r.id, "L");
		const cJSON *m =
		    r.r.data ? cJSON_GetObjectItemCaseSensitive(r.r.data, "method") : NULL;
		if (mlen <= PROTO_MAX_NAME) {
			assert_true(cJSON_IsString(m));
			assert_int_equal(strlen(m->valuestring), mlen);
			assert_memory_equal(m->valuestring, frame + hl, mlen);
		} else {
			assert_null(m);
		}
		reply_done(&r);
	}
	/* Still connected and answered. */
	request(b, s, &r, "{\"id\":\"s\",\"method\":\"status\"}");
	result_of(&r, "s");
	reply_done(&r);
	broker_done(b);
}

/*
 * The daemon admits limits.max_clients connections and `clients` lists them
 * all: replies may exceed max_frame, up to max_reply (PROTOCOL.md), so the
 * list of max_clients sessions with 64-byte names comes back whole.
 */
static void test_dispatch_clients_at_max_clients(void **state)
{
	struct broker *b = broker_new(64 * MiB, 0, 0);
	struct session *s = open_session(b, UID_A, 1);
	const char *req = "{\"id\":\"c\",\"method\":\"clients\"}";
	struct reply r;
	char name[PROTO_MAX_NAME + 1];
	(void)state;

	memset(name, 'c', PROTO_MAX_NAME);
	name[PROTO_MAX_NAME] = '\0';
	hello(b, s, name);
	while (b->session_count < b->limits.max_clients) {
		struct session *o = open_session(b, UID_A + b->session_count, 1000);
		hello(b, o, name);
	}
	send_big(b, s, req, strlen(req), &r);
	const cJSON *res = result_of(&r, "c");
	const cJSON *list = jarr(res, "clients", (int)b->session_count);
	const cJSON *o;
	unsigned n = 0;
	cJSON_ArrayForEach(o, list)
	{
		assert_string_equal(jstr(o, "name"), name);
		n++;
	}
	assert_int_equal(n, b->limits.max_clients);
	reply_done(&r);
	check(b);
	broker_done(b);
}

/*
 * The sim backend cannot create a memfd when the daemon is out of
 * descriptors. backend_sim.c: "Host memory or descriptor exhaustion: report
 * it as a backend failure, not as a full device"; broker.h: broker_alloc
 * returns -EIO on backend failure; PROTOCOL.md: -32010 backend_error. It
 * must not pass for the client's max_allocations limit (-32006).
 */
static void test_backend_fd_exhaustion(void **state)
{
	struct broker *b = broker_new(64 * MiB, 0, 0);
	struct session *s = open_session(b, UID_A, 1);
	struct broker_instance *inst = reg(b, s, 0);
	struct rlimit saved, lim;
	struct broker_grant g;
	struct reply r;
	char frame[256];
	(void)state;

	hello(b, s, "fds");
	snprintf(frame, sizeof(frame),
	         "{\"id\":\"x\",\"method\":\"alloc\",\"params\":{\"instance\":\"%016" PRIx64
	         "\",\"size\":\"4096\"}}",
	         inst->id);
	/* No descriptor can be opened while the soft limit is the lowest free
	 * one. */
	int lowest = dup(0);
	assert_true(lowest >= 0);
	close(lowest);
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &saved), 0);
	lim = saved;
	lim.rlim_cur = (rlim_t)lowest;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &lim), 0);
	grant_poison(&g);
	int rc = broker_alloc(b, s, inst->id, 4096, 0, &g);
	struct dispatch_reply dr = {.frame = NULL, .fd = -7};
	dispatch_frame(b, s, frame, strlen(frame), &dr);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &saved), 0);

	assert_non_null(dr.frame);
	int prc = proto_reply_parse(dr.frame, dr.len - 1, &r.r);
	free(dr.frame);
	assert_int_equal(prc, 0);
	live_add((void **)live_roots, r.r.root);
	int code = r.r.code;
	reply_done(&r);
	assert_int_equal(s->alloc_count, 0);
	assert_int_equal(dev_stats(b, 0).slabs, 0);
	check(b);
	if (rc != -EIO || code != PROTO_E_BACKEND)
		fail_msg("descriptor exhaustion: broker_alloc() = %d (want -EIO), reply code %d "
		         "(want %d backend_error)",
		         rc, code, PROTO_E_BACKEND);
	/* Descriptors back: allocation works again. */
	alloc_ok(b, s, inst, 4096, 0);
	check(b);
	broker_done(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_teardown(test_session_bookkeeping, teardown),
	    cmocka_unit_test_teardown(test_session_close_reclaims, teardown),
	    cmocka_unit_test_teardown(test_session_close_trims_last_uid_session, teardown),
	    cmocka_unit_test_teardown(test_holds, teardown),
	    cmocka_unit_test_teardown(test_uids_never_share_slabs, teardown),
	    cmocka_unit_test_teardown(test_sim_fd_is_sealed_memfd, teardown),
	    cmocka_unit_test_teardown(test_attach_detach, teardown),
	    cmocka_unit_test_teardown(test_attach_pins_slab, teardown),
	    cmocka_unit_test_teardown(test_limits, teardown),
	    cmocka_unit_test_teardown(test_attach_limit, teardown),
	    cmocka_unit_test_teardown(test_alloc_counts_attachments, teardown),
	    cmocka_unit_test_teardown(test_oom, teardown),
	    cmocka_unit_test_teardown(test_alloc_ids, teardown),
	    cmocka_unit_test_teardown(test_dispatch_end_to_end, teardown),
	    cmocka_unit_test_teardown(test_dispatch_state, teardown),
	    cmocka_unit_test_teardown(test_dispatch_params, teardown),
	    cmocka_unit_test_teardown(test_dispatch_ids_and_malformed, teardown),
	    cmocka_unit_test_teardown(test_dispatch_broker_errors, teardown),
	    cmocka_unit_test_teardown(test_dispatch_limit_error_data, teardown),
	    cmocka_unit_test_teardown(test_dispatch_unregister_busy_field, teardown),
	    cmocka_unit_test_teardown(test_dispatch_long_unknown_method, teardown),
	    cmocka_unit_test_teardown(test_dispatch_clients_at_max_clients, teardown),
	    cmocka_unit_test_teardown(test_backend_fd_exhaustion, teardown),
	};

	/* The fd-exhaustion test makes the sim backend warn, as it should. */
	log_init(LOG_LEVEL_ERROR);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
