/*
 * proto-helpers.h - helpers shared by the proto unit tests (test-proto-*.c):
 * a string builder, frame generators and the checks several suites make.
 */
#ifndef GPB_TEST_PROTO_HELPERS_H
#define GPB_TEST_PROTO_HELPERS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "proto.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* A growable NUL-terminated string. */
struct sb {
	char *p;
	size_t len;
	size_t cap;
};

void sb_add(struct sb *b, const char *s, size_t n);
void sb_puts(struct sb *b, const char *s);
void sb_rep(struct sb *b, const char *s, size_t times);
__attribute__((format(printf, 2, 3))) void sb_printf(struct sb *b, const char *fmt, ...);
/* Returns the built string (never NULL) and resets the builder. */
char *sb_take(struct sb *b);

/* n copies of c, NUL-terminated. */
char *repeat(char c, size_t n);

/* proto_json_parse's return code for a NUL-terminated frame; frees the tree. */
int json_rc(const char *frame);
int json_rc_len(const char *frame, size_t len);
/* Parses a known-good object for the field getter tests. */
cJSON *parse_obj(const char *text);
/* A JSON array (array true) or object of n members. */
char *members(size_t n, bool array);

/*
 * A message is usable in a reply when it is set, terminated, non-empty and,
 * once escaped as a JSON string, passes the frame check (valid UTF-8: control
 * characters are escaped by the encoder, invalid bytes are not).
 */
bool valid_message(const char *m, size_t size);

/*
 * Decodes a request that must fail with `code`. want_id NULL: req.id must be
 * NULL; otherwise it must equal want_id. The message must be set, non-empty and
 * valid UTF-8 (it goes into a frame), the field empty (not a params error).
 */
void expect_request_error_len(const char *frame, size_t len, int code, const char *want_id);
void expect_request_error(const char *frame, int code, const char *want_id);

#endif
