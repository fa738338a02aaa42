/*
 * broker_types.h - what the broker is configured with: its limits and the
 * operator's per-user and per-group rules. Apart from broker.h so that the
 * configuration file parser (daemon/conf) can fill them without taking in
 * the broker's state.
 */
#ifndef GPB_BROKER_TYPES_H
#define GPB_BROKER_TYPES_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "policy.h"

/* An operator's rule for one user or the members of one group (primary or
 * supplementary), from gpubroker.conf: a default proportion for instances
 * that ask for none, and a cap on what the user's live allocations hold per
 * device. */
struct broker_rule {
	bool group; /* matches a session with gid among its groups, else uid */
	uid_t uid;
	gid_t gid;
	double proportion; /* 0: none */
	uint64_t cap;      /* bytes per device; 0: none */
};

#define BROKER_MAX_RULES 64

struct broker_limits {
	uint64_t slab_size;         /* pool slab bytes */
	unsigned max_instances;     /* per connection */
	unsigned max_allocations;   /* live allocations per connection */
	uint64_t write_high_water;  /* bytes of unsent replies before a client is paused */
	unsigned hello_timeout_ms;  /* a connection must say hello within this */
	unsigned paused_timeout_ms; /* a paused client must read within this */
	unsigned recall_timeout_ms; /* how long a request waits for the recalls it sent */
	unsigned max_clients;       /* connections at once */
	unsigned max_inflight;      /* requests of one connection waiting at once */
	enum policy_mode mode;      /* VRAM policy mode at start (set_mode changes it live) */
	double min_auto_share;      /* policy: least share of each auto instance, (0, 1] */
	uint64_t max_host_memory;   /* pinned/mapped host memory, every client together */
};

/* How device memory is handed out (cubie's set_allocator). */
enum broker_allocator {
	BROKER_ALLOCATOR_POOL,   /* slabs and sub-allocation (the default) */
	BROKER_ALLOCATOR_DIRECT, /* one backend allocation per request, none cached */
	BROKER_ALLOCATOR_ASYNC,  /* stream-ordered pools, where the backend has them */
};

const char *broker_allocator_name(enum broker_allocator kind);
/* 0 and *kind, or -EINVAL. */
int broker_allocator_parse(const char *name, enum broker_allocator *kind);

/* The defaults the daemon starts with (main may override them). */
void broker_limits_default(struct broker_limits *limits);

#endif
