/*
 * core-helpers.h - what the unit tests of the library's connection core
 * (client/core) share: the far end of a connection, played by the test.
 *
 * No daemon: the test listens on a socket in a temporary folder, the
 * core's client_conn_init() connects to it, and the test holds the
 * accepted end. Replies and events are written there before the call that
 * reads them (the socket keeps them), and the requests the core wrote are
 * read back from it afterwards: one thread, no waiting on timing.
 */
#ifndef GPB_TEST_CORE_HELPERS_H
#define GPB_TEST_CORE_HELPERS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "conn.h"

struct far_end {
	char dir[64];
	char path[108];
	int listener;
	int fd; /* the daemon's end of the connection */
	struct client_conn conn;
};

/* Listens, connects c->conn and accepts: every test's setup. */
void far_open(struct far_end *f);
/* Closes both ends and removes the socket and its folder. */
void far_close(struct far_end *f);

/* Writes @len bytes (all) to the core, with descriptor @pass when >= 0. */
void far_write(struct far_end *f, const void *buf, size_t len, int pass);
void far_write_text(struct far_end *f, const char *text);

/* Frames, encoded by proto/ as the daemon encodes them (newline included);
 * the caller frees them. @json: a JSON object's text (NULL: {}). */
char *far_result(const char *id, const char *json, size_t *len);
char *far_error(const char *id, int code, const char *message, size_t *len);
char *far_event(const char *name, const char *json, size_t *len);
/* Encodes and writes one of them. */
void far_send_result(struct far_end *f, const char *id, const char *json);
void far_send_event(struct far_end *f, const char *name, const char *json);

/* Reads the next request the core wrote (blocking: call it only once the
 * core has written one). Returns its parsed root (cJSON_Delete it); fails
 * the test on a frame that is not a request. */
cJSON *far_read_request(struct far_end *f);
/* far_read_request() checking the method; returns the id (a static copy). */
const char *far_expect(struct far_end *f, const char *method);
/* Whether the core wrote anything not read yet. */
bool far_has_input(struct far_end *f);

/* Whether @fd is readable now (poll, no wait). */
bool fd_readable(int fd);

#endif
