/*
 * test-core-conn.c - the library's connection (client/core/conn.c,
 * conn_hot.c) without a daemon: the test is the far end of the socket
 * (core-helpers.h) and writes the frames a daemon would, split and
 * grouped as a daemon's writes may reach a reader.
 *
 * - framing: a frame arriving a byte at a time, or cut anywhere, is read
 *   whole; several frames in one read are each handled, in order;
 * - routing: the reply to the request in flight is told from events, from
 *   the refusals of frees sent without waiting (kept for the next call)
 *   and from the answers nobody waits for; a reply to another request, or
 *   to none, kills the connection; error replies map to GPB_E_* codes;
 * - what the replies and events carry: a descriptor, the event queue (its
 *   bound, its event fd), the invalidate read behind a reply (applied
 *   after it), a reclaim (answered with a release), the alloc grant read
 *   by the typed codec.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codec.h"
#include "conn.h"
#include "core-helpers.h"
#include "error.h"
#include "proto.h"

static int setup(void **state)
{
	struct far_end *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	far_open(f);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct far_end *f = *state;

	far_close(f);
	free(f);
	return 0;
}

/* Takes the queued events and checks their names (NULL-terminated list)
 * and, where @data is given, their data text. */
static void expect_events(struct client_conn *c, const char *const *names, const char *const *data)
{
	struct client_conn_event *ev = client_conn_take_events(c), *next;
	size_t i = 0;

	for (; ev; ev = next, i++) {
		next = ev->next;
		assert_non_null(names[i]);
		assert_string_equal(ev->name, names[i]);
		if (data)
			assert_string_equal(ev->data, data[i]);
		client_conn_event_free(ev);
	}
	assert_null(names[i]);
	assert_false(fd_readable(c->evfd));
}

/* The value of result member @key, a string. */
static const char *result_string(const struct proto_reply *rep, const char *key)
{
	return cJSON_GetStringValue(cJSON_GetObjectItem(rep->result, key));
}

/* ---- framing ------------------------------------------------------------- */

/* An event written a byte at a time is queued only once its newline is
 * read, and then exactly once. */
static void test_frame_byte_by_byte(void **state)
{
	struct far_end *f = *state;
	size_t len;
	char *frame = far_event("cap_changed", "{\"cap\":\"5\"}", &len);

	for (size_t i = 0; i + 1 < len; i++) {
		far_write(f, frame + i, 1, -1);
		assert_int_equal(client_conn_pump(&f->conn), 0);
		assert_false(fd_readable(f->conn.evfd));
		assert_int_equal(f->conn.ev_count, 0);
	}
	far_write(f, frame + len - 1, 1, -1);
	assert_int_equal(client_conn_pump(&f->conn), 0);
	assert_true(fd_readable(f->conn.evfd));
	expect_events(&f->conn, (const char *const[]){"cap_changed", NULL},
	              (const char *const[]){"{\"cap\":\"5\"}"});
	free(frame);
}

/* A reply cut anywhere (its first byte, its middle, all but its newline)
 * whose first part was read before the request was even sent: the call
 * reads the rest and returns the whole reply. */
static void test_reply_cut_anywhere(void **state)
{
	struct far_end *f = *state;

	for (int k = 0; k < 3; k++) {
		char id[8];
		size_t len;
		struct proto_reply rep;

		snprintf(id, sizeof(id), "%d", k + 1);
		char *frame = far_result(id, "{\"node\":\"n1\"}", &len);
		size_t cut = k == 0 ? 1 : k == 1 ? len / 2 : len - 1;

		far_write(f, frame, cut, -1);
		assert_int_equal(client_conn_pump(&f->conn), 0);
		far_write(f, frame + cut, len - cut, -1);
		assert_int_equal(client_conn_call(&f->conn, PROTO_M_STATUS, NULL, &rep, NULL), 0);
		assert_string_equal(far_expect(f, PROTO_M_STATUS), id);
		assert_string_equal(result_string(&rep, "node"), "n1");
		proto_reply_finish(&rep);
		free(frame);
	}
	assert_false(f->conn.dead);
}

/* Events before and after a reply, all in one write (one read): the reply
 * is returned, and every event is queued in order, the one behind the
 * reply included (its bytes left the socket with the reply's). */
static void test_frames_in_one_read(void **state)
{
	struct far_end *f = *state;
	char *parts[4], buf[1024];
	size_t lens[4], n = 0;
	struct proto_reply rep;

	parts[0] = far_event("ev_a", "{\"n\":\"1\"}", &lens[0]);
	parts[1] = far_event("ev_b", NULL, &lens[1]);
	parts[2] = far_result("1", "{\"node\":\"n2\"}", &lens[2]);
	parts[3] = far_event("ev_c", NULL, &lens[3]);
	for (int i = 0; i < 4; i++) {
		assert_true(n + lens[i] <= sizeof(buf));
		memcpy(buf + n, parts[i], lens[i]);
		n += lens[i];
		free(parts[i]);
	}
	far_write(f, buf, n, -1);
	assert_int_equal(client_conn_call(&f->conn, PROTO_M_STATUS, NULL, &rep, NULL), 0);
	assert_string_equal(result_string(&rep, "node"), "n2");
	proto_reply_finish(&rep);
	assert_true(fd_readable(f->conn.evfd));
	expect_events(&f->conn, (const char *const[]){"ev_a", "ev_b", "ev_c", NULL},
	              (const char *const[]){"{\"n\":\"1\"}", "{}", "{}"});
}

/* ---- routing by id --------------------------------------------------------- */

/* Frees sent without waiting, then a call: the refusal of the first free
 * and the answers to an invalidate_done and a release arrive before the
 * call's reply. The call gets its own reply; the refusal is kept for the
 * next call (once), the other answers are dropped. */
static void test_replies_routed_by_id(void **state)
{
	struct far_end *f = *state;
	struct proto_reply rep;
	char *frame;
	size_t len;

	assert_int_equal(client_conn_send_free(&f->conn, 0x10), 0);
	assert_string_equal(far_expect(f, PROTO_M_FREE), "f-1");
	assert_int_equal(client_conn_send_free(&f->conn, 0x11), 0);
	assert_string_equal(far_expect(f, PROTO_M_FREE), "f-2");

	frame = far_error("f-1", PROTO_E_NOT_FOUND, "no allocation 10", &len);
	far_write(f, frame, len, -1);
	free(frame);
	far_send_result(f, "f-2", NULL); /* a daemon that answered it: dropped */
	far_send_result(f, "inv-4", NULL);
	far_send_result(f, "rel-9", NULL);
	far_send_result(f, "3", "{\"node\":\"n3\"}");

	assert_int_equal(client_conn_call(&f->conn, PROTO_M_STATUS, NULL, &rep, NULL), 0);
	assert_string_equal(far_expect(f, PROTO_M_STATUS), "3");
	assert_string_equal(result_string(&rep, "node"), "n3");
	proto_reply_finish(&rep);
	assert_int_equal(f->conn.free_errors, 1);
	assert_int_equal(client_conn_take_free_error(&f->conn), GPB_E_NOT_FOUND);
	assert_non_null(strstr(error_message(), "free (request f-1)"));
	assert_non_null(strstr(error_message(), "no allocation 10"));
	assert_int_equal(client_conn_take_free_error(&f->conn), 0);
	assert_false(f->conn.dead);
	assert_int_equal(f->conn.ev_count, 0);
}

/* A reply to another request than the one in flight: the stream cannot be
 * trusted any more, the connection dies, and later calls fail fast. */
static void test_reply_to_other_request(void **state)
{
	struct far_end *f = *state;
	struct proto_reply rep;

	far_send_result(f, "7", NULL);
	assert_int_equal(client_conn_call(&f->conn, PROTO_M_STATUS, NULL, &rep, NULL),
	                 GPB_E_PROTOCOL);
	assert_non_null(strstr(error_message(), "reply to request 7 while waiting for 1"));
	assert_true(f->conn.dead);
	assert_int_equal(client_conn_call(&f->conn, PROTO_M_STATUS, NULL, &rep, NULL),
	                 GPB_E_DAEMON_GONE);
	assert_non_null(strstr(error_message(), "reply to request 7"));
}

/* A reply read when no request is in flight kills the connection; an
 * error with a null id there is the daemon's parting word, kept as the
 * reason. */
static void test_reply_to_no_request(void **state)
{
	struct far_end *f = *state;

	far_send_result(f, "5", NULL);
	assert_int_equal(client_conn_pump(&f->conn), GPB_E_PROTOCOL);
	assert_true(f->conn.dead);
	assert_int_equal(client_conn_pump(&f->conn), GPB_E_DAEMON_GONE);
}

static void test_parting_error(void **state)
{
	struct far_end *f = *state;
	size_t len;
	char *frame = far_error(NULL, PROTO_E_LIMIT, "too many clients", &len);

	far_write(f, frame, len, -1);
	free(frame);
	assert_int_equal(client_conn_pump(&f->conn), GPB_E_LIMIT);
	assert_true(f->conn.dead);
	assert_int_equal(f->conn.parting, GPB_E_LIMIT);
	assert_non_null(strstr(f->conn.dead_reason, "too many clients"));
}

/* Error replies to the call in flight (by its id, or with a null id: with
 * one request in flight it can only be that one's) map to GPB_E_* codes
 * and leave the connection alive. */
static void test_error_replies(void **state)
{
	struct far_end *f = *state;
	static const struct {
		int code, err;
	} map[] = {
	    {PROTO_E_NOT_FOUND, GPB_E_NOT_FOUND},     {PROTO_E_QUOTA, GPB_E_QUOTA},
	    {PROTO_E_NO_MEMORY, GPB_E_OUT_OF_MEMORY}, {PROTO_E_PARAMS, GPB_E_INVALID},
	    {PROTO_E_TIMEOUT, GPB_E_TIMEOUT},         {-32099, GPB_E_PROTOCOL},
	};
	struct proto_reply rep;

	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
		char id[8], want[64];
		size_t len;

		snprintf(id, sizeof(id), "%zu", i + 1);
		char *frame = far_error(i % 2 ? NULL : id, map[i].code, "why", &len);
		far_write(f, frame, len, -1);
		free(frame);
		assert_int_equal(client_conn_call(&f->conn, PROTO_M_STATUS, NULL, &rep, NULL),
		                 map[i].err);
		assert_null(rep.root);
		snprintf(want, sizeof(want), "%d %s: why", map[i].code,
		         proto_code_name(map[i].code));
		assert_string_equal(error_message(), want);
		assert_string_equal(far_expect(f, PROTO_M_STATUS), id);
		assert_false(f->conn.dead);
	}
}

/* ---- what replies and events carry ---------------------------------------- */

/* A reply with "fd": true hands the caller the descriptor that came with
 * it; one announcing a descriptor that did not come kills the connection. */
static void test_reply_descriptor(void **state)
{
	struct far_end *f = *state;
	struct proto_reply rep;
	struct stat sent, got;
	size_t len;
	int fd = memfd_create("core-test", MFD_CLOEXEC);
	char *frame = far_result("1", "{\"fd\":true}", &len);

	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &sent), 0);
	far_write(f, frame, len, fd);
	free(frame);
	close(fd);
	fd = -1;
	assert_int_equal(client_conn_call(&f->conn, PROTO_M_STATUS, NULL, &rep, &fd), 0);
	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &got), 0);
	assert_int_equal(got.st_ino, sent.st_ino);
	assert_int_equal(got.st_dev, sent.st_dev);
	close(fd);
	proto_reply_finish(&rep);

	far_send_result(f, "2", "{\"fd\":true}");
	assert_int_equal(client_conn_call(&f->conn, PROTO_M_STATUS, NULL, &rep, &fd),
	                 GPB_E_PROTOCOL);
	assert_int_equal(fd, -1);
	assert_true(f->conn.dead);
}

/* An application that never takes its events: the queue keeps the newest
 * 1024 (the oldest dropped), so memory stays bounded. */
static void test_event_queue_bound(void **state)
{
	struct far_end *f = *state;
	enum { SENT = 1100, KEPT = 1024 };
	struct client_conn_event *ev, *next;
	char data[32], *all = NULL;
	size_t n = 0, total = 0;

	/* One write: a write per event would fill the socket's buffer with
	 * the kernel's per-write overhead long before its bytes. */
	for (int i = 0; i < SENT; i++) {
		size_t len;
		char *frame;

		snprintf(data, sizeof(data), "{\"n\":\"%d\"}", i);
		frame = far_event("tick", data, &len);
		all = realloc(all, total + len);
		assert_non_null(all);
		memcpy(all + total, frame, len);
		total += len;
		free(frame);
	}
	far_write(f, all, total, -1);
	free(all);
	while (fd_readable(f->conn.sock))
		assert_int_equal(client_conn_pump(&f->conn), 0);
	assert_int_equal(f->conn.ev_count, KEPT);
	ev = client_conn_take_events(&f->conn);
	for (; ev; ev = next, n++) {
		next = ev->next;
		snprintf(data, sizeof(data), "{\"n\":\"%zu\"}", SENT - KEPT + n);
		assert_string_equal(ev->data, data);
		client_conn_event_free(ev);
	}
	assert_int_equal(n, KEPT);
	assert_false(fd_readable(f->conn.evfd));
}

static int invalidations;

static void count_invalidate(void *ctx)
{
	(void)ctx;
	invalidations++;
}

/* An invalidate read in the same read as a reply came after it: the
 * caller applies the reply first, and the invalidation (and its
 * invalidate_done, with the event's epoch) follows at the connection's
 * next use. One read on its own is applied and answered at once. */
static void test_invalidate_behind_reply(void **state)
{
	struct far_end *f = *state;
	struct proto_reply rep;
	char *a, *b, buf[512];
	size_t la, lb;
	cJSON *req;

	invalidations = 0;
	f->conn.on_invalidate = count_invalidate;
	a = far_result("1", NULL, &la);
	b = far_event(PROTO_EV_INVALIDATE, "{\"epoch\":\"3\"}", &lb);
	memcpy(buf, a, la);
	memcpy(buf + la, b, lb);
	far_write(f, buf, la + lb, -1);
	free(a);
	free(b);
	assert_int_equal(client_conn_call(&f->conn, PROTO_M_STATUS, NULL, &rep, NULL), 0);
	proto_reply_finish(&rep);
	assert_string_equal(far_expect(f, PROTO_M_STATUS), "1");
	assert_int_equal(invalidations, 0);
	assert_false(far_has_input(f));

	client_conn_settle(&f->conn);
	assert_int_equal(invalidations, 1);
	req = far_read_request(f);
	assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(req, "method")),
	                    PROTO_M_INVALIDATE_DONE);
	assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(req, "id")), "inv-3");
	assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(
	                        cJSON_GetObjectItem(req, "params"), PROTO_F_EPOCH)),
	                    "3");
	cJSON_Delete(req);

	far_send_event(f, PROTO_EV_INVALIDATE, "{\"epoch\":\"5\"}");
	assert_int_equal(client_conn_pump(&f->conn), 0);
	assert_int_equal(invalidations, 2);
	assert_string_equal(far_expect(f, PROTO_M_INVALIDATE_DONE), "inv-5");
	expect_events(&f->conn,
	              (const char *const[]){PROTO_EV_INVALIDATE, PROTO_EV_INVALIDATE, NULL}, NULL);
}

static uint64_t reclaimed_slab;

static int record_reclaim(void *ctx, uint64_t slab)
{
	(void)ctx;
	reclaimed_slab = slab;
	return 0;
}

/* A reclaim event: the hook unmaps the slab, and a release of it goes to
 * the daemon under an id whose reply nobody waits for. */
static void test_reclaim_answered(void **state)
{
	struct far_end *f = *state;
	char id[32];
	cJSON *req;

	reclaimed_slab = 0;
	f->conn.on_reclaim = record_reclaim;
	far_send_event(f, PROTO_EV_RECLAIM, "{\"slab\":\"00000000000000ab\"}");
	assert_int_equal(client_conn_pump(&f->conn), 0);
	assert_int_equal(reclaimed_slab, 0xab);
	assert_int_equal(f->conn.reclaims, 1);
	req = far_read_request(f);
	assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(req, "method")),
	                    PROTO_M_RELEASE);
	snprintf(id, sizeof(id), "%s", cJSON_GetStringValue(cJSON_GetObjectItem(req, "id")));
	assert_memory_equal(id, "rel-", 4);
	assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(
	                        cJSON_GetObjectItem(req, "params"), PROTO_F_SLAB)),
	                    "00000000000000ab");
	cJSON_Delete(req);
	/* Its answer is dropped, whatever it says. */
	far_send_result(f, id, NULL);
	assert_int_equal(client_conn_pump(&f->conn), 0);
	assert_false(f->conn.dead);
}

/* gpb_alloc's exchange: a grant in its canonical form is read by the typed
 * codec (1, no tree); an event before it is still queued; a refusal comes
 * back as its GPB_E_* code. */
static void test_alloc_grant(void **state)
{
	struct far_end *f = *state;
	struct proto_grant g = {.id = 0x42,
	                        .device = 1,
	                        .slab = 0x7,
	                        .slab_size = 1 << 21,
	                        .offset = 4096,
	                        .size = 512},
	                   got;
	struct proto_reply rep;
	char frame[512];
	size_t len;
	int fd;

	far_send_event(f, "cap_changed", NULL);
	len = proto_grant_reply(frame, sizeof(frame), "1", &g);
	assert_true(len > 0);
	far_write(f, frame, len, -1);
	memset(&got, 0, sizeof(got));
	assert_int_equal(client_conn_call_alloc(&f->conn, 1, 512, 256, 0, &got, &rep, &fd), 1);
	assert_int_equal(got.id, 0x42);
	assert_int_equal(got.slab, 0x7);
	assert_int_equal(got.offset, 4096);
	assert_int_equal(got.size, 512);
	assert_int_equal(got.device, 1);
	assert_null(rep.root);
	assert_string_equal(far_expect(f, PROTO_M_ALLOC), "1");
	expect_events(&f->conn, (const char *const[]){"cap_changed", NULL}, NULL);

	char *err = far_error("2", PROTO_E_QUOTA, "over the cap", &len);
	far_write(f, err, len, -1);
	free(err);
	assert_int_equal(client_conn_call_alloc(&f->conn, 1, 512, 256, 0, &got, &rep, &fd),
	                 GPB_E_QUOTA);
	assert_string_equal(far_expect(f, PROTO_M_ALLOC), "2");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_frame_byte_by_byte, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_reply_cut_anywhere, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_frames_in_one_read, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_replies_routed_by_id, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_reply_to_other_request, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_reply_to_no_request, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_parting_error, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_error_replies, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_reply_descriptor, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_event_queue_bound, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_invalidate_behind_reply, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_reclaim_answered, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_alloc_grant, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
