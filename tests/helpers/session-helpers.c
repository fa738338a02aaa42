/*
 * session-helpers.c - helpers shared by the broker and dispatch unit tests
 * (test-broker*.c, test-dispatch*.c): brokers over the sim backend, sessions,
 * allocations, and requests run frame by frame through the dispatcher.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "session-helpers.h"

#include "broker_internal.h"

/* What a test has not released yet (see session-helpers.h). */
static struct broker *live_brokers[MAX_LIVE];
/* The request layer over live_brokers[i], as the server keeps one. */
static struct dispatch live_dispatch[MAX_LIVE];
cJSON *live_roots[MAX_LIVE];

void live_add(void **slots, void *p)
{
	for (int i = 0; i < MAX_LIVE; i++) {
		if (!slots[i]) {
			slots[i] = p;
			return;
		}
	}
	fail_msg("more than %d live objects", MAX_LIVE);
}

void live_remove(void **slots, void *p)
{
	for (int i = 0; i < MAX_LIVE; i++) {
		if (slots[i] == p)
			slots[i] = NULL;
	}
}

int teardown(void **state)
{
	(void)state;
	for (int i = 0; i < MAX_LIVE; i++) {
		cJSON_Delete(live_roots[i]);
		live_roots[i] = NULL;
		if (live_brokers[i])
			dispatch_finish(&live_dispatch[i]);
		broker_destroy(live_brokers[i]);
		live_brokers[i] = NULL;
	}
	return 0;
}

/* ---- broker helpers ------------------------------------------------------ */

struct broker *broker_new(uint64_t sim_memory, unsigned max_instances, unsigned max_allocations)
{
	return broker_new_slab(sim_memory, SLAB, max_instances, max_allocations);
}

struct broker *broker_new_slab(uint64_t sim_memory, uint64_t slab_size, unsigned max_instances,
                               unsigned max_allocations)
{
	struct backend_config cfg = {.sim_devices = 2, .sim_memory = sim_memory};
	struct broker_limits lim;
	struct backend *be = NULL;
	struct broker *b = NULL;

	broker_limits_default(&lim);
	lim.slab_size = slab_size;
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
	dispatch_init(broker_dispatch(b), b);
	return b;
}

struct dispatch *broker_dispatch(struct broker *b)
{
	for (int i = 0; i < MAX_LIVE; i++) {
		if (live_brokers[i] == b)
			return &live_dispatch[i];
	}
	fail_msg("broker %p was not made by broker_new", (void *)b);
	return NULL;
}

void broker_done(struct broker *b)
{
	dispatch_finish(broker_dispatch(b));
	live_remove((void **)live_brokers, b);
	broker_destroy(b);
}

void check_at(const struct broker *b, const char *file, int line)
{
	char msg[256] = "";
	int rc = broker_check(b, msg, sizeof(msg));

	if (rc != 0)
		fail_msg("%s:%d: broker_check() = %d: %s", file, line, rc, msg);
}

struct pool_stats dev_stats(const struct broker *b, int device)
{
	struct pool_stats st;

	memset(&st, 0xa5, sizeof(st));
	pool_get_stats(b->dev[device].pool, &st);
	return st;
}

struct session *open_session(struct broker *b, uid_t uid, pid_t pid)
{
	struct session *s = broker_session_open(b, uid, uid, pid);

	assert_non_null(s);
	return s;
}

struct broker_instance *reg(struct broker *b, struct session *s, int device)
{
	struct broker_instance *inst = NULL;

	assert_int_equal(broker_register(b, s, "test", device, 0, NULL, &inst), 0);
	assert_non_null(inst);
	assert_ptr_equal(broker_instance_find(s, inst->id), inst);
	return inst;
}

/* A grant pre-filled with garbage, so a field the broker forgets to set shows. */
void grant_poison(struct broker_grant *g)
{
	static const unsigned char junk[PROTO_HANDLE_SIZE];

	memset(g, 0x5a, sizeof(*g));
	g->handle = junk;
	g->fd = 12345;
}

struct broker_grant alloc_ok(struct broker *b, struct session *s,
                             const struct broker_instance *inst, uint64_t size, uint64_t align)
{
	struct broker_grant g;
	int rc;

	grant_poison(&g);
	rc = broker_alloc(b, s, inst->id, size, align, &g);
	if (rc != 0)
		fail_msg("broker_alloc(%llu) = %d", (unsigned long long)size, rc);
	assert_int_not_equal(g.id, 0);
	assert_int_equal(g.device, inst->device);
	assert_int_equal(g.slab_size % POOL_GRANULE, 0); /* exact slabs (direct) too */
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

uint64_t slab_count(const struct broker *b, int device)
{
	return dev_stats(b, device).slabs;
}

/* ---- dispatch helpers ---------------------------------------------------- */

/* Runs one frame through dispatch_frame and parses the reply, which must be
 * exactly one newline-terminated frame. */
void send_frame(struct broker *b, struct session *s, const char *frame, size_t len,
                struct reply *out)
{
	struct dispatch_reply dr = {.frame = NULL, .len = 0, .fd = -7};
	int rc;

	dispatch_frame(broker_dispatch(b), s, frame, len, &dr);
	if (!dr.frame)
		fail_msg("no reply to %.*s", (int)len, frame);
	assert_true(dr.len >= 2);
	assert_int_equal(strlen(dr.frame), dr.len);
	assert_int_equal(dr.frame[dr.len - 1], '\n');
	assert_null(memchr(dr.frame, '\n', dr.len - 1));
	out->fd = dr.fd;
	out->fd_owned = dr.fd_owned;
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

void reply_done(struct reply *r)
{
	if (r->fd_owned && r->fd >= 0)
		close(r->fd);
	r->fd_owned = false;
	live_remove((void **)live_roots, r->r.root);
	proto_reply_finish(&r->r);
}

void vrequest(struct broker *b, struct session *s, struct reply *out, const char *fmt, va_list ap)
{
	char frame[8192];
	int n = vsnprintf(frame, sizeof(frame), fmt, ap);

	assert_true(n > 0 && (size_t)n < sizeof(frame));
	send_frame(b, s, frame, (size_t)n, out);
}

void request(struct broker *b, struct session *s, struct reply *out, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vrequest(b, s, out, fmt, ap);
	va_end(ap);
}

/* A success reply to request id `id`; returns its result object. */
const cJSON *result_of(struct reply *r, const char *id)
{
	if (r->r.code != 0 || !r->r.result)
		fail_msg("request %s: error %d: %s", id, r->r.code,
		         r->r.message ? r->r.message : "?");
	assert_non_null(r->r.id);
	assert_string_equal(r->r.id, id);
	assert_true(cJSON_IsObject(r->r.result));
	return r->r.result;
}

const cJSON *jget(const cJSON *obj, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);

	if (!v)
		fail_msg("reply member '%s' missing", key);
	return v;
}

const char *jstr(const cJSON *obj, const char *key)
{
	const cJSON *v = jget(obj, key);

	if (!cJSON_IsString(v))
		fail_msg("reply member '%s' is not a string", key);
	return v->valuestring;
}

uint64_t ju64(const cJSON *obj, const char *key)
{
	uint64_t x = 0;

	if (proto_parse_u64(jstr(obj, key), &x) != 0)
		fail_msg("reply member '%s' is not a u64 string", key);
	return x;
}

uint64_t jid(const cJSON *obj, const char *key)
{
	uint64_t x = 0;

	if (proto_get_id64(obj, key, &x) != 0)
		fail_msg("reply member '%s' is not an id64", key);
	return x;
}

double jnum(const cJSON *obj, const char *key)
{
	const cJSON *v = jget(obj, key);

	if (!cJSON_IsNumber(v))
		fail_msg("reply member '%s' is not a number", key);
	return v->valuedouble;
}

const cJSON *jarr(const cJSON *obj, const char *key, int len)
{
	const cJSON *v = jget(obj, key);

	if (!cJSON_IsArray(v))
		fail_msg("reply member '%s' is not an array", key);
	assert_int_equal(cJSON_GetArraySize(v), len);
	return v;
}

void check_members(const cJSON *obj, const struct proto_member *list)
{
	const struct proto_member *m = list;
	const cJSON *v;
	cJSON_ArrayForEach(v, obj)
	{
		while (m->name && strcmp(m->name, v->string) != 0) {
			if (m->presence == PROTO_REQUIRED)
				fail_msg("reply member '%s' missing before '%s'", m->name,
				         v->string);
			m++;
		}
		if (!m->name)
			fail_msg(
			    "reply member '%s' is not in the message list, or out of its order",
			    v->string);
		m++;
	}
	for (; m->name; m++) {
		if (m->presence == PROTO_REQUIRED)
			fail_msg("reply member '%s' missing", m->name);
	}
}

/*
 * Sends frame and expects an error reply with `code`, the id `id` (NULL: a
 * JSON null id), no descriptor, and, when field is set, data.field == field.
 */
void expect_error(struct broker *b, struct session *s, const char *frame, const char *id, int code,
                  const char *field)
{
	struct reply r = {.fd = -1};
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

void expect_error_fmt(struct broker *b, struct session *s, int code, const char *field,
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
bool limit_data_is(const struct reply *r, const char *name, double value)
{
	const cJSON *limit, *v;

	if (!cJSON_IsObject(r->r.data))
		return false;
	limit = cJSON_GetObjectItemCaseSensitive(r->r.data, "limit");
	v = cJSON_GetObjectItemCaseSensitive(r->r.data, "value");
	return cJSON_IsString(limit) && strcmp(limit->valuestring, name) == 0 &&
	       cJSON_IsNumber(v) && v->valuedouble == value;
}

void hello(struct broker *b, struct session *s, const char *client)
{
	struct reply r = {.fd = -1};

	request(b, s, &r,
	        "{\"id\":\"h\",\"method\":\"hello\",\"params\":{\"versions\":[1],"
	        "\"client\":\"%s\"}}",
	        client);
	result_of(&r, "h");
	assert_int_equal(r.fd, -1);
	reply_done(&r);
	assert_true(s->hello);
}
