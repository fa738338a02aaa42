/*
 * session-helpers.h - helpers shared by the broker and dispatch unit tests
 * (test-broker*.c, test-dispatch*.c): brokers over the sim backend, sessions,
 * allocations, and requests run frame by frame through the dispatcher.
 */
#ifndef GPB_TEST_SESSION_HELPERS_H
#define GPB_TEST_SESSION_HELPERS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <cmocka.h>

#include "broker.h"
#include "dispatch.h"
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
extern cJSON *live_roots[MAX_LIVE];

void live_add(void **slots, void *p);
void live_remove(void **slots, void *p);
/* The teardown of every test: releases what live_* still holds. */
int teardown(void **state);

/* ---- broker helpers ------------------------------------------------------ */

/* A broker over two simulated devices of sim_memory bytes each (2 MiB slabs);
 * max_instances / max_allocations 0: the default limits. */
struct broker *broker_new(uint64_t sim_memory, unsigned max_instances, unsigned max_allocations);
/* The same with slabs of slab_size bytes (a multiple of 2 MiB). */
struct broker *broker_new_slab(uint64_t sim_memory, uint64_t slab_size, unsigned max_instances,
                               unsigned max_allocations);
void broker_done(struct broker *b);
/* The dispatcher bound to b (every broker_new broker has one, which
 * receives its events). */
struct dispatch *broker_dispatch(struct broker *b);

#define check(b) check_at((b), __FILE__, __LINE__)

void check_at(const struct broker *b, const char *file, int line);
struct pool_stats dev_stats(const struct broker *b, int device);
struct session *open_session(struct broker *b, uid_t uid, pid_t pid);
struct broker_instance *reg(struct broker *b, struct session *s, int device);
/* A grant pre-filled with garbage, so a field the broker forgets to set shows. */
void grant_poison(struct broker_grant *g);
struct broker_grant alloc_ok(struct broker *b, struct session *s,
                             const struct broker_instance *inst, uint64_t size, uint64_t align);
uint64_t slab_count(const struct broker *b, int device);

/* ---- dispatch helpers ---------------------------------------------------- */

struct reply {
	struct proto_reply r;
	int fd;
	bool fd_owned; /* the reply's own descriptor (host memory): reply_done closes it */
};

/* Runs one frame through dispatch_frame and parses the reply, which must be
 * exactly one newline-terminated frame. */
void send_frame(struct broker *b, struct session *s, const char *frame, size_t len,
                struct reply *out);
void reply_done(struct reply *r);

void vrequest(struct broker *b, struct session *s, struct reply *out, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));
void request(struct broker *b, struct session *s, struct reply *out, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* A success reply to request id `id`; returns its result object. */
const cJSON *result_of(struct reply *r, const char *id);

/* Members of a reply object that must be there, with their type. */
const cJSON *jget(const cJSON *obj, const char *key);
const char *jstr(const cJSON *obj, const char *key);
uint64_t ju64(const cJSON *obj, const char *key);
uint64_t jid(const cJSON *obj, const char *key);
double jnum(const cJSON *obj, const char *key);
const cJSON *jarr(const cJSON *obj, const char *key, int len);

/*
 * Checks obj's members against a message list of proto/schema.h
 * (PROTO_MEMBER_TABLE(PROTO_GRANT_RESULT)): each member is in the list, in the
 * list's order, and every required one is there. A typed encoder written
 * from the list then produces the same frames as the cJSON one.
 */
void check_members(const cJSON *obj, const struct proto_member *list);

/*
 * Sends frame and expects an error reply with `code`, the id `id` (NULL: a
 * JSON null id), no descriptor, and, when field is set, data.field == field.
 */
void expect_error(struct broker *b, struct session *s, const char *frame, const char *id, int code,
                  const char *field);
/* expect_error for a formatted frame with the id "e". */
void expect_error_fmt(struct broker *b, struct session *s, int code, const char *field,
                      const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* True when an error reply's data is {"limit": name, "value": value}. */
bool limit_data_is(const struct reply *r, const char *name, double value);

/* Says hello (protocol version 1) as `client`. */
void hello(struct broker *b, struct session *s, const char *client);

#endif
