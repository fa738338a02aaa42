/*
 * test-proto-fast.c - the typed codecs of the hot path (proto/codec.c)
 * against the general ones: the frames they write are the bytes cJSON
 * writes for the same objects, and every frame they read means what the
 * general decoder makes of it (over hand-made frames and every line of
 * the protocol fuzz corpus, whose directory is the first argument).
 */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "codec.h"
#include "params.h"
#include "proto.h"

static const char *corpus_dir;

/* What cJSON writes for the same grant: proto_encode_result() of the object. */
static char *general_grant(const char *id, const struct proto_grant *g, size_t *len)
{
	cJSON *r = cJSON_CreateObject();
	assert_non_null(r);
	assert_int_equal(proto_add_id64(r, PROTO_F_ID, g->id), 0);
	assert_int_equal(proto_add_number(r, PROTO_F_DEVICE, g->device), 0);
	assert_int_equal(proto_add_id64(r, PROTO_F_SLAB, g->slab), 0);
	assert_int_equal(proto_add_u64(r, PROTO_F_SLAB_SIZE, g->slab_size), 0);
	assert_int_equal(proto_add_u64(r, PROTO_F_OFFSET, g->offset), 0);
	assert_int_equal(proto_add_u64(r, PROTO_F_SIZE, g->size), 0);
	if (g->handle) {
		assert_int_equal(proto_add_hex(r, PROTO_F_HANDLE, g->handle, PROTO_HANDLE_SIZE), 0);
		assert_non_null(cJSON_AddStringToObject(r, PROTO_F_DEVICE_UUID, g->device_uuid));
		if (g->fd) {
			cJSON_AddTrueToObject(r, PROTO_F_FD);
			if (g->pool) {
				cJSON_AddTrueToObject(r, PROTO_F_POOL);
				assert_int_equal(proto_add_id64(r, PROTO_F_POOL_ID, g->pool_id), 0);
			}
			if (g->vmm)
				cJSON_AddTrueToObject(r, PROTO_F_VMM);
		}
		if (g->keep)
			cJSON_AddTrueToObject(r, PROTO_F_KEEP);
	}
	if (g->label) {
		assert_non_null(cJSON_AddStringToObject(r, PROTO_F_LABEL, g->label));
		assert_int_equal(proto_add_id64(r, PROTO_F_INSTANCE, g->instance), 0);
	}
	return proto_encode_result(id, r, len);
}

static void test_grant_bytes(void **state)
{
	(void)state;
	unsigned char handle[PROTO_HANDLE_SIZE];
	for (size_t i = 0; i < sizeof(handle); i++)
		handle[i] = (unsigned char)(i * 37 + 1);
	const uint64_t values[] = {0, 1, 9, 10, 255, 1ull << 32, UINT64_MAX};
	/* Ids and labels that need escaping too: quotes, backslashes, every
	 * short escape, other control bytes, and UTF-8 (written as it is). */
	const char *ids[] = {"1",
	                     "f-12",
	                     "alloc/7 x",
	                     "0123456789012345678901234567890123456789",
	                     "a\"b\\c",
	                     "\b\f\n\r\t\x01\x1f",
	                     "caf\xc3\xa9 \x7f"};
	const char *labels[] = {NULL, "state", "x\"y\n\x02", "\xe2\x82\xac"};
	unsigned n = 0;
	for (size_t v = 0; v < sizeof(values) / sizeof(values[0]); v++) {
		for (unsigned shape = 0; shape < 6; shape++) {
			struct proto_grant g = {
			    .id = values[v] ^ 0x9a41c07be2d35f18ull,
			    .device = (int)(v % 3),
			    .slab = values[v],
			    .slab_size = values[(v + 1) % 7],
			    .offset = values[(v + 2) % 7],
			    .size = values[(v + 3) % 7],
			    .handle = shape ? handle : NULL,
			    .device_uuid = "GPU-0a1b2c3d-aaaa-bbbb-cccc-000000000001",
			    .fd = shape >= 2,
			    .pool = shape == 3,
			    .pool_id = shape == 3 ? values[(v + 4) % 7] : 0,
			    .vmm = shape == 4,
			    .keep = shape == 1 || shape == 5,
			    .label = labels[(v + shape) % 4],
			    .instance = values[(v + 5) % 7],
			};
			const char *id = ids[(v + shape) % 7];
			char buf[4096];
			size_t room = proto_grant_reply_room(id, &g);
			assert_true(room <= sizeof(buf));
			/* The room asked for is enough: the reply fits in it. */
			size_t len = proto_grant_reply(buf, room, id, &g), glen;
			char *want = general_grant(id, &g, &glen);
			assert_non_null(want);
			if (len != glen || memcmp(buf, want, len) != 0)
				fail_msg("typed %.*s\ncJSON %s", (int)len, buf, want);
			assert_int_equal(buf[len], '\0');
			/* And read back, where the fast reader takes it (no handle). */
			struct proto_grant back;
			int rc = proto_grant_parse(buf, len - 1, id, &back);
			if (!g.handle && !g.label && id == ids[0]) {
				assert_int_equal(rc, 0);
				assert_true(back.id == g.id && back.device == g.device &&
				            back.slab == g.slab && back.slab_size == g.slab_size &&
				            back.offset == g.offset && back.size == g.size);
			} else {
				assert_int_equal(rc, -EAGAIN);
			}
			assert_int_equal(proto_grant_parse(buf, len - 1, "other", &back), -EAGAIN);
			free(want);
			n++;
		}
	}
	/* Too small a buffer: 0. */
	struct proto_grant g = {.id = 1, .slab = 2, .slab_size = 3, .size = 1};
	char small[16];
	assert_int_equal(proto_grant_reply(small, sizeof(small), "1", &g), 0);
	print_message("%u grants byte-identical\n", n);
}

static void test_request_bytes(void **state)
{
	(void)state;
	const struct {
		uint64_t instance, size, align;
		uint32_t wait;
	} cases[] = {
	    {1, 1, 0, 0}, {0x0123456789abcdefull, 1048576, 4096, 0}, {7, UINT64_MAX, 0, 5000}};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		cJSON *p = cJSON_CreateObject();
		proto_add_id64(p, PROTO_F_INSTANCE, cases[i].instance);
		proto_add_u64(p, PROTO_F_SIZE, cases[i].size);
		if (cases[i].align)
			proto_add_u64(p, PROTO_F_ALIGNMENT, cases[i].align);
		if (cases[i].wait)
			cJSON_AddNumberToObject(p, PROTO_F_WAIT_MS, cases[i].wait);
		size_t glen;
		char *want = proto_encode_request("42", PROTO_M_ALLOC, p, &glen);
		char buf[256];
		size_t len = proto_fast_alloc_request(buf, sizeof(buf), "42", cases[i].instance,
		                                      cases[i].size, cases[i].align, cases[i].wait);
		if (len != glen || memcmp(buf, want, len) != 0)
			fail_msg("typed %.*s\ncJSON %s", (int)len, buf, want);
		free(want);
	}
	for (int reply = 0; reply < 2; reply++) {
		cJSON *p = cJSON_CreateObject();
		proto_add_id64(p, PROTO_F_ID, 0xfeedull);
		if (!reply)
			cJSON_AddFalseToObject(p, PROTO_F_REPLY);
		size_t glen;
		char *want = proto_encode_request("f-3", PROTO_M_FREE, p, &glen);
		char buf[256];
		size_t len = proto_fast_free_request(buf, sizeof(buf), "f-3", 0xfeedull, reply);
		if (len != glen || memcmp(buf, want, len) != 0)
			fail_msg("typed %.*s\ncJSON %s", (int)len, buf, want);
		free(want);
	}
}

static unsigned fast_taken, fast_refused;

/* One frame (no newline) through both decoders: where the fast one takes
 * it, the general one reads the same request, with valid values. */
static void compare_request(const char *frame, size_t len)
{
	struct proto_fast_req f;
	struct proto_request req;
	struct proto_error err;
	if (proto_fast_request(frame, len, &f) < 0) {
		fast_refused++;
		return;
	}
	fast_taken++;
	int rc = proto_request_parse(frame, len, &req, &err);
	if (rc < 0)
		fail_msg("fast path took what the general one refuses: %.*s", (int)len, frame);
	assert_int_equal(req.op, f.op);
	assert_string_equal(req.id, f.id);
	/* The same params structs, and the same verdict on their bounds. */
	union proto_params u;
	struct proto_error gerr = {0}, ferr = {0};
	int grc = proto_params_decode(req.op, req.params, &u, &gerr);
	if (f.op == PROTO_OP_ALLOC) {
		const struct proto_alloc_params *a = &u.alloc, *b = &f.alloc;
		int frc = proto_alloc_params_check(b, &ferr);
		assert_int_equal(frc, grc);
		assert_string_equal(ferr.message, gerr.message);
		if (grc == 0)
			assert_true(a->instance == b->instance && a->size == b->size &&
			            a->has_alignment == b->has_alignment &&
			            (!a->has_alignment || a->alignment == b->alignment) &&
			            a->has_wait_ms == b->has_wait_ms &&
			            (!a->has_wait_ms || a->wait_ms == b->wait_ms) &&
			            a->has_type == b->has_type && a->type == b->type);
	} else {
		const struct proto_free_params *a = &u.free, *b = &f.free;
		int frc = proto_free_params_check(b, &ferr);
		assert_int_equal(frc, grc);
		assert_true(a->id == b->id && a->has_reply == b->has_reply &&
		            (!a->has_reply || a->reply == b->reply));
	}
	proto_request_finish(&req);
}

static void test_request_decode(void **state)
{
	(void)state;
	const char *frames[] = {
	    "{\"id\":\"1\",\"params\":{\"instance\":\"0000000000000001\",\"size\":\"4096\"},"
	    "\"method\":\"alloc\"}",
	    "{\"id\":\"1\",\"method\":\"alloc\",\"params\":{\"size\":\"1\",\"instance\":"
	    "\"00000000000000ff\",\"alignment\":\"256\",\"wait_ms\":100,\"type\":\"device\"}}",
	    "{\"id\":\"f-9\",\"method\":\"free\",\"params\":{\"id\":\"9a41c07be2d35f18\","
	    "\"reply\":false}}",
	    "{\"id\":\"f-9\",\"method\":\"free\",\"params\":{\"id\":\"9a41c07be2d35f18\"}}",
	    /* Not canonical: the general path's (each refused by the fast one). */
	    "{\"id\":\"1\", \"method\":\"free\",\"params\":{\"id\":\"9a41c07be2d35f18\"}}",
	    "{\"id\":\"1\",\"method\":\"free\",\"params\":{\"id\":\"9A41C07BE2D35F18\"}}",
	    "{\"id\":\"1\",\"method\":\"free\",\"params\":{\"id\":\"9a41c07be2d35f18\",\"id\":"
	    "\"9a41c07be2d35f18\"}}",
	    "{\"id\":\"1\",\"method\":\"alloc\",\"params\":{\"instance\":\"0000000000000001\","
	    "\"size\":\"01\"}}",
	    "{\"id\":\"1\",\"method\":\"alloc\",\"params\":{\"instance\":\"0000000000000001\","
	    "\"size\":\"1\",\"type\":\"pinned\"}}",
	    "{\"id\":\"1\",\"method\":\"alloc\",\"params\":{\"instance\":\"0000000000000001\","
	    "\"size\":\"1\",\"wait_ms\":1.5}}",
	    "{\"id\":\"1\",\"method\":\"alloc\",\"params\":{\"instance\":\"0000000000000001\","
	    "\"size\":\"1\"},\"extra\":\"x\"}",
	    "{\"id\":\"a\\\"b\",\"method\":\"free\",\"params\":{\"id\":\"9a41c07be2d35f18\"}}",
	    "{\"id\":\"1\",\"method\":\"free\",\"params\":{\"id\":\"9a41c07be2d35f18\"}} ",
	    "{\"id\":\"1\",\"method\":\"register\",\"params\":{\"name\":\"x\"}}",
	};
	for (size_t i = 0; i < sizeof(frames) / sizeof(frames[0]); i++) {
		struct proto_fast_req f;
		int rc = proto_fast_request(frames[i], strlen(frames[i]), &f);
		assert_int_equal(rc, i < 4 ? 0 : -EAGAIN);
		compare_request(frames[i], strlen(frames[i]));
	}
}

/* Every line of every corpus file, and each with one byte dropped. */
static void test_corpus(void **state)
{
	(void)state;
	if (!corpus_dir)
		skip();
	DIR *dir = opendir(corpus_dir);
	assert_non_null(dir);
	struct dirent *de;
	unsigned files = 0;
	fast_taken = fast_refused = 0;
	while ((de = readdir(dir))) {
		if (de->d_name[0] == '.')
			continue;
		char path[512];
		snprintf(path, sizeof(path), "%s/%s", corpus_dir, de->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		files++;
		char line[8192];
		while (fgets(line, sizeof(line), f)) {
			size_t n = strcspn(line, "\n");
			compare_request(line, n);
			for (size_t cut = 0; cut < n && cut < 200; cut += 7) {
				char mut[8192];
				memcpy(mut, line, cut);
				memcpy(mut + cut, line + cut + 1, n - cut - 1);
				compare_request(mut, n - 1);
			}
		}
		fclose(f);
	}
	closedir(dir);
	assert_true(files > 0);
	assert_true(fast_taken > 0);
	print_message("%u corpus files: %u frames taken by the fast path, %u by the general one\n",
	              files, fast_taken, fast_refused);
}

int main(int argc, char **argv)
{
	corpus_dir = argc > 1 ? argv[1] : NULL;
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_grant_bytes),
	    cmocka_unit_test(test_request_bytes),
	    cmocka_unit_test(test_request_decode),
	    cmocka_unit_test(test_corpus),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
