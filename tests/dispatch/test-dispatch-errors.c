/*
 * test-dispatch-errors.c - unit tests of the daemon core without sockets: the
 * request dispatcher driven frame by frame (ids and malformed frames, broker
 * errors through the protocol).
 *
 * Every test builds its own broker over a small simulated device (2 MiB
 * slabs), calls broker_check() after each step, frees every reply frame and
 * destroys the broker, so the binary is leak-free under ASan and valgrind.
 * Shared helpers: session-helpers.h.
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
#include "broker_internal.h"
#include "config.h"
#include "dispatch.h"
#include "jsonmem.h"
#include "log.h"
#include "pool.h"
#include "proto.h"

#include "session-helpers.h"

/* ---- dispatch: ids and malformed frames ---------------------------------- */

static void test_dispatch_ids_and_malformed(void **state)
{
	struct broker *b = broker_new(64 * MiB, 0, 0);
	struct session *s = open_session(b, UID_A, 1);
	struct reply r = {.fd = -1};
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
	struct reply r = {.fd = -1};
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
	struct reply r = {.fd = -1};
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
	struct reply r = {.fd = -1};
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

	dispatch_frame(broker_dispatch(b), s, frame, len, &dr);
	if (!dr.frame)
		fail_msg("no reply to a %zu-byte frame", len);
	rlen = dr.len;
	if (rlen >= 2 && rlen <= PROTO_MAX_REPLY && dr.frame[rlen - 1] == '\n')
		rc = proto_reply_parse(dr.frame, rlen - 1, &out->r);
	out->fd = dr.fd;
	out->fd_owned = dr.fd_owned;
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
	struct reply r = {.fd = -1};
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
	/* An administrator: the only one who is shown every user's clients. */
	struct session *s = open_session(b, 0, 1);
	const char *req = "{\"id\":\"c\",\"method\":\"clients\"}";
	struct reply r = {.fd = -1};
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
	struct reply r = {.fd = -1};
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
	dispatch_frame(broker_dispatch(b), s, frame, strlen(frame), &dr);
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

/*
 * Runs frame with cJSON's (n+1)th allocation failing; returns the
 * reply's code (0 for a result), or 1 when no reply could be encoded at all
 * (the server then closes the connection, which reclaims everything).
 */
static int oom_request(struct broker *b, struct session *s, long n, const char *frame)
{
	struct dispatch_reply dr = {.frame = NULL, .len = 0, .fd = -7};
	struct proto_reply r;
	jsonmem_fail_once(n);
	dispatch_frame(broker_dispatch(b), s, frame, strlen(frame), &dr);
	jsonmem_fail_once(-1);
	if (!dr.frame)
		return 1;
	assert_int_equal(proto_reply_parse(dr.frame, dr.len - 1, &r), 0);
	int code = r.code;
	cJSON_Delete(r.root);
	free(dr.frame);
	return code;
}

/*
 * An alloc or attach whose reply cannot be built for a moment's lack of
 * host memory is answered with an error and leaves nothing behind: no allocation or
 * attachment the client was never told of, no slab held without its
 * handle having been sent. Every point at which cJSON can fail is tried,
 * until the request succeeds.
 */
/* hello, asking the daemon to keep emptied slabs for the session. */
static void hello_keep(struct broker *b, struct session *s)
{
	struct reply r = {.fd = -1};
	request(b, s, &r,
	        "{\"id\":\"h\",\"method\":\"hello\",\"params\":{\"versions\":[1],"
	        "\"keep_slabs\":true}}");
	result_of(&r, "h");
	reply_done(&r);
	assert_true(s->hello && s->keep_slabs);
}

/* hello (keeping emptied slabs with keep), then an instance "x"; its id. */
static uint64_t hello_register(struct broker *b, struct session *s, bool keep, const char *client)
{
	struct reply r = {.fd = -1};
	if (keep)
		hello_keep(b, s);
	else
		hello(b, s, client);
	request(b, s, &r, "{\"id\":\"r\",\"method\":\"register\",\"params\":{\"name\":\"x\"}}");
	uint64_t inst = jid(result_of(&r, "r"), "instance");
	reply_done(&r);
	return inst;
}

static void grant_out_of_memory(bool keep)
{
	char frame[256];
	bool alloc_done = false, attach_done = false;
	for (long n = 0; n < 1000 && !(alloc_done && attach_done); n++) {
		struct broker *b = broker_new(64 * MiB, 0, 0);
		struct session *s = open_session(b, UID_A, 1);
		struct session *t = open_session(b, UID_A, 2);
		struct reply r = {.fd = -1};
		/* With keep: given back, a slab the grant handed over is not
		 * kept either: the client never took it. */
		uint64_t inst = hello_register(b, s, keep, "owner");
		if (keep)
			hello_keep(b, t);
		else
			hello(b, t, "attacher");
		snprintf(frame, sizeof(frame),
		         "{\"id\":\"a\",\"method\":\"alloc\",\"params\":{\"instance\":\"%016" PRIx64
		         "\",\"size\":\"4096\"}}",
		         inst);
		int code = oom_request(b, s, n, frame);
		/* 1: no reply at all, so the server would close the connection
		 * (broker_done does the same). */
		if (code < 0) {
			assert_int_equal(s->alloc_count, 0);
			assert_int_equal(s->held.count, 0);
		}
		alloc_done |= code == 0;
		check(b);
		if (!attach_done && code != 1) {
			request(b, s, &r, "%s", frame);
			uint64_t id = jid(result_of(&r, "a"), "id");
			reply_done(&r);
			snprintf(
			    frame, sizeof(frame),
			    "{\"id\":\"t\",\"method\":\"attach\",\"params\":{\"id\":\"%016" PRIx64
			    "\"}}",
			    id);
			code = oom_request(b, t, n, frame);
			if (code < 0) {
				assert_int_equal(t->attached.count, 0);
				assert_int_equal(t->held.count, 0);
			}
			attach_done |= code == 0;
			check(b);
		}
		broker_done(b);
	}
	assert_true(alloc_done && attach_done);
}

static void test_dispatch_grant_out_of_memory(void **state)
{
	(void)state;
	grant_out_of_memory(false);
	grant_out_of_memory(true);
}

/*
 * A claim whose reply cannot be built leaves the allocation unclaimed, the
 * session holding no slab it was not told of, so the claim can be asked
 * again and then succeeds; for device and host arrays alike, at every
 * point at which cJSON can fail. With keep, the device array lands in a
 * slab the session keeps empty (mapped, no handle to send), which the
 * undone claim leaves kept again.
 */
static void claim_out_of_memory(bool keep)
{
	bool dev_done = false, host_done = false;
	for (long n = 0; n < 1000 && !(dev_done && host_done); n++) {
		struct broker *b = broker_new(64 * MiB, 0, 0);
		struct session *s = open_session(b, UID_A, 1);
		struct reply r = {.fd = -1};
		char frame[256];
		uint64_t inst = hello_register(b, s, keep, "claimer");
		if (keep) {
			request(b, s, &r,
			        "{\"id\":\"a\",\"method\":\"alloc\",\"params\":{\"instance\":"
			        "\"%016" PRIx64 "\",\"size\":\"4096\"}}",
			        inst);
			uint64_t id = jid(result_of(&r, "a"), "id");
			reply_done(&r);
			request(b, s, &r,
			        "{\"id\":\"f\",\"method\":\"free\",\"params\":{\"id\":"
			        "\"%016" PRIx64 "\"}}",
			        id);
			result_of(&r, "f");
			reply_done(&r);
		}
		const size_t held0 = keep ? 1 : 0;
		assert_int_equal(s->held.count, held0);
		request(b, s, &r,
		        "{\"id\":\"q\",\"method\":\"queue_request\",\"params\":{\"instance\":"
		        "\"%016" PRIx64 "\",\"requests\":[{\"label\":\"d\",\"shape\":[1024],"
		        "\"elem_size\":8},{\"label\":\"h\",\"shape\":[1024],\"elem_size\":8,"
		        "\"type\":\"pinned\"}]}}",
		        inst);
		result_of(&r, "q");
		reply_done(&r);
		request(b, s, &r,
		        "{\"id\":\"a\",\"method\":\"allocate_queue\",\"params\":{\"instance\":"
		        "\"%016" PRIx64 "\"}}",
		        inst);
		result_of(&r, "a");
		reply_done(&r);
		check(b);
		struct broker_alloc *a = list_entry(s->allocs.next, struct broker_alloc, link);
		struct broker_host *h = list_entry(s->hosts.next, struct broker_host, link);
		assert_true(a->unclaimed && h->unclaimed);
		assert_int_equal(s->held.count, held0);
		const uint64_t ids[2] = {a->id, h->id};
		for (int i = 0; i < 2; i++) {
			snprintf(frame, sizeof(frame),
			         "{\"id\":\"c\",\"method\":\"claim\",\"params\":{\"id\":"
			         "\"%016" PRIx64 "\"}}",
			         ids[i]);
			int code = oom_request(b, s, n, frame);
			/* No reply at all: the server closes the connection,
			 * which reclaims everything (broker_done does too). */
			if (code == 1)
				break;
			if (code != 0) {
				/* Told of an error: as before the claim, and the
				 * claim works when asked again. */
				assert_true(i == 0 ? a->unclaimed : h->unclaimed);
				assert_int_equal(s->held.count, i == 0 ? held0 : 1);
				check(b);
				request(b, s, &r, "%s", frame);
				const cJSON *res = result_of(&r, "c");
				assert_int_equal(jid(res, "id"), ids[i]);
				/* A kept slab is mapped already: no handle, no
				 * descriptor. */
				bool kept = keep && i == 0;
				assert_true(kept ? r.fd < 0 : r.fd >= 0);
				if (i == 0)
					assert_true(kept == !cJSON_GetObjectItemCaseSensitive(
					                        res, "handle"));
				reply_done(&r);
			}
			assert_false(i == 0 ? a->unclaimed : h->unclaimed);
			assert_int_equal(s->held.count, 1);
			if (code == 0)
				*(i == 0 ? &dev_done : &host_done) = true;
			check(b);
		}
		broker_done(b);
	}
	assert_true(dev_done && host_done);
}

static void test_dispatch_claim_out_of_memory(void **state)
{
	(void)state;
	claim_out_of_memory(false);
	claim_out_of_memory(true);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_teardown(test_dispatch_ids_and_malformed, teardown),
	    cmocka_unit_test_teardown(test_dispatch_broker_errors, teardown),
	    cmocka_unit_test_teardown(test_dispatch_limit_error_data, teardown),
	    cmocka_unit_test_teardown(test_dispatch_unregister_busy_field, teardown),
	    cmocka_unit_test_teardown(test_dispatch_long_unknown_method, teardown),
	    cmocka_unit_test_teardown(test_dispatch_clients_at_max_clients, teardown),
	    cmocka_unit_test_teardown(test_backend_fd_exhaustion, teardown),
	    cmocka_unit_test_teardown(test_dispatch_grant_out_of_memory, teardown),
	    cmocka_unit_test_teardown(test_dispatch_claim_out_of_memory, teardown),
	};

	/* The fd-exhaustion test makes the sim backend warn, as it should. */
	log_init(LOG_LEVEL_ERROR);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
