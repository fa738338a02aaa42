/*
 * broker.h - the daemon's state: devices and their pools, sessions,
 * instances and allocations. No sockets and no JSON: the server and the
 * dispatcher are thin shells around these calls.
 */
#ifndef GPB_BROKER_H
#define GPB_BROKER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "backend.h"
#include "idmap.h"
#include "list.h"
#include "pool.h"
#include "proto.h"

struct broker_limits {
	uint64_t slab_size;        /* pool slab bytes */
	unsigned max_instances;    /* per connection */
	unsigned max_allocations;  /* live allocations per connection */
	uint64_t write_high_water; /* bytes of unsent replies before a client is paused */
	unsigned hello_timeout_ms; /* a connection must say hello within this */
	unsigned max_clients;      /* connections at once */
};

struct broker_device {
	struct backend_device_info info;
	struct pool *pool;
	struct backend *backend; /* the pool's callback context needs both */
	int index;
};

struct broker_instance {
	uint64_t id;
	struct list link; /* session->instances */
	struct session *owner;
	int device;
	char name[PROTO_MAX_NAME + 1];
	char group[PROTO_MAX_NAME + 1];
	double proportion; /* 0 = auto pool */
	uint64_t used;
	uint64_t live;
};

struct broker_alloc {
	uint64_t id;
	struct list link; /* session->allocs */
	struct broker_instance *inst;
	struct pool_block *block;
};

struct session {
	uint64_t id;
	void *conn;       /* the server's connection (opaque here) */
	struct list link; /* broker->sessions */
	uid_t uid;
	gid_t gid;
	pid_t pid;
	char name[PROTO_MAX_NAME + 1];
	bool admin; /* root or a member of the admin group (set by the server from
	               SO_PEERCRED and SO_PEERGROUPS): may use admin operations */
	bool hello;
	time_t connected;
	struct list instances;
	unsigned instance_count;
	struct list allocs;
	uint64_t alloc_count;
	uint64_t used;
	struct idmap held;     /* slab id -> struct session_slab: slabs this session holds */
	struct idmap attached; /* allocation id -> struct pool_slab (pinned) */
};

/*
 * How the broker reaches a client outside the reply to its current request:
 * pushed events and deferred replies. Takes ownership of frame (a complete,
 * newline-terminated frame); fd (not owned) rides along when >= 0. The server
 * installs it; without one (unit tests) frames are dropped.
 */
typedef void (*broker_send_fn)(void *ctx, struct session *s, char *frame, size_t len, int fd);

/*
 * Re-reads the daemon's configuration and applies what can change live
 * (the server installs it). Fills result with {"applied": [keys],
 * "needs_restart": [keys]}; returns 0 or -EINVAL with message set (the old
 * configuration stays in force).
 */
typedef int (*broker_reload_fn)(void *ctx, cJSON *result, char *message, size_t size);

struct broker {
	struct backend *backend;
	broker_send_fn send;
	void *send_ctx;
	broker_reload_fn reload;
	void *reload_ctx;
	struct broker_limits limits;
	struct broker_device dev[BACKEND_MAX_DEVICES];
	int device_count;
	struct idmap allocs; /* allocation id -> struct broker_alloc */
	struct list sessions;
	unsigned session_count;
	uint64_t instance_count;
	uint64_t next_session_id;
	uint64_t next_instance_id;
	time_t started;
	bool stopping;
	uint64_t rand[32]; /* buffered getrandom() output for allocation ids */
	unsigned rand_left;
};

/* What a client needs to use an allocation (or an attachment). */
struct broker_grant {
	uint64_t id;
	int device;
	uint64_t slab_id;
	uint64_t slab_size;
	uint64_t offset;
	uint64_t size;
	const unsigned char *handle; /* set when this session did not hold the slab */
	int fd;                      /* with handle, the sim memfd to pass; else -1 */
};

/* The defaults the daemon starts with (main may override them). */
void broker_limits_default(struct broker_limits *limits);

/* Takes ownership of backend. 0, -ENOMEM, -EINVAL (slab size). */
int broker_create(struct backend *backend, const struct broker_limits *limits, struct broker **out);
void broker_destroy(struct broker *b);

/* NULL when out of memory. */
struct session *broker_session_open(struct broker *b, uid_t uid, gid_t gid, pid_t pid);
/* Frees every allocation, attachment and instance the session holds. */
void broker_session_close(struct broker *b, struct session *s);

/* -ENODEV (device), -EMFILE (max_instances), -ENOMEM. */
int broker_register(struct broker *b, struct session *s, const char *name, int device,
                    double proportion, const char *group, struct broker_instance **out);
/* -ENOENT, -EBUSY (holds allocations). */
int broker_unregister(struct broker *b, struct session *s, uint64_t instance);
struct broker_instance *broker_instance_find(struct session *s, uint64_t instance);

/*
 * -ENOENT (instance), -EINVAL (size/alignment), -ENOMEM (device full),
 * -EMFILE (max_allocations), -ESHUTDOWN (stopping), -EIO (backend failure),
 * -EAGAIN (host memory).
 */
int broker_alloc(struct broker *b, struct session *s, uint64_t instance, uint64_t size,
                 uint64_t align, struct broker_grant *out);
/* -ENOENT: unknown, freed, or another session's (indistinguishable). */
int broker_free(struct broker *b, struct session *s, uint64_t id);
/* Same-uid allocations only; -ENOENT otherwise; -EEXIST if already attached. */
int broker_attach(struct broker *b, struct session *s, uint64_t id, struct broker_grant *out);
int broker_detach(struct broker *b, struct session *s, uint64_t id);

void broker_set_sender(struct broker *b, broker_send_fn fn, void *ctx);
/* Sends a frame to a session through the sender (frees it when none). */
void broker_send(struct broker *b, struct session *s, char *frame, size_t len, int fd);
/* Encodes and sends an event; data is consumed. */
void broker_send_event(struct broker *b, struct session *s, const char *name, cJSON *data);

/* Bytes of device memory not in live allocations. */
uint64_t broker_device_free(const struct broker *b, int device);

/* Walks every structure and checks what it can: pools, counters, the
 * allocation table against the sessions. 0 or -EFAULT with msg. */
int broker_check(const struct broker *b, char *msg, unsigned msg_len);

#endif
