/*
 * metrics.h - counters the daemon keeps about itself, and their rendering
 * in the Prometheus text exposition format (version 0.0.4) for the
 * `metrics` request. Recording is a few additions per request; rendering
 * walks the broker when asked.
 */
#ifndef GPB_METRICS_H
#define GPB_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "proto.h"

/* Request outcomes: ok, deferred (waiting), and one per error code. */
#define METRICS_OUTCOMES 19
/* Request duration histogram upper bounds, in seconds. */
#define METRICS_BUCKETS 10

/* Why the server dropped a connection that was not reading its output. */
enum metrics_drop {
	METRICS_DROP_PAUSED, /* paused (write_high_water) and still not reading after 10 s */
	METRICS_DROP_CLIENT, /* its unread output passed max_output_per_client */
	METRICS_DROP_TOTAL,  /* the most unread output when all clients' passed max_output_total */
	METRICS_DROPS
};

/* Why the server refused a connection as it came in. */
enum metrics_refusal {
	METRICS_REFUSED_MAX_CLIENTS,
	METRICS_REFUSED_RESERVED,      /* within admin_reserved_connections, not an admin */
	METRICS_REFUSED_PER_UID,       /* max_clients_per_uid */
	METRICS_REFUSED_FILES,         /* no descriptor left to accept it with */
	METRICS_REFUSED_FILES_PER_UID, /* its user's share of descriptors is taken */
	METRICS_REFUSALS
};

struct metrics {
	/* [op][outcome]; op PROTO_OP_COUNT counts frames that named no
	 * known operation. */
	uint64_t requests[PROTO_OP_COUNT + 1][METRICS_OUTCOMES];
	uint64_t duration_buckets[METRICS_BUCKETS]; /* cumulative only when rendered */
	uint64_t duration_count;
	double duration_sum;
	/* Kept by the server, which owns the connections: */
	uint64_t output_bytes; /* replies and events queued for clients now */
	uint64_t dropped[METRICS_DROPS];
	uint64_t refused[METRICS_REFUSALS];
};

struct broker;
struct session;

/* Counts one answered request: op (-1 when unknown), code 0 for success,
 * 1 for deferred, else the protocol error code; ns its handling time. */
void metrics_record(struct metrics *m, int op, int code, uint64_t ns);

/* Renders every metric: the request metrics m and what b counts and holds,
 * as viewer may see it (the per-instance and per-user series of its own user
 * only, unless it is an administrator; every total); *out is malloc'd text
 * the caller frees. 0 or -ENOMEM. */
int metrics_render(const struct metrics *mt, const struct broker *b, const struct session *viewer,
                   char **out, size_t *len);

#endif
