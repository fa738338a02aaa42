/*
 * conn_hot.c - the hot path's exchanges of a connection: gpb_alloc's
 * request and grant through the typed codecs, gpb_free's request without
 * waiting for a reply (and the refusal kept for the next call), and the
 * answers to reclaim events (release) and recall events (lease_return and
 * recall_done, none waiting for its reply).
 */
#include "conn.h"
#include "codec.h"
#include "conn_internal.h"
#include "error.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A reclaim event: the slab is unmapped now, and its release sent once the
 * frames at hand are handled (client_conn_send_acks). */
int client_conn_reclaim(struct client_conn *c, const cJSON *data)
{
	uint64_t slab;
	int rc;

	if (proto_get_id64(data, PROTO_F_SLAB, &slab) < 0)
		return client_conn_fail(c, GPB_E_PROTOCOL,
		                        "a reclaim event without a valid 'slab'");
	rc = c->on_reclaim(c->invalidate_ctx, slab);
	if (rc < 0)
		return client_conn_fail(c, rc, "%s", error_message());
	if (c->nreclaimed == c->reclaimed_cap) {
		size_t cap = c->reclaimed_cap ? 2 * c->reclaimed_cap : 8;
		uint64_t *more = realloc(c->reclaimed, cap * sizeof(*more));
		if (!more)
			return client_conn_fail(c, GPB_E_NOMEM,
			                        "out of memory answering a reclaim event");
		c->reclaimed = more;
		c->reclaimed_cap = cap;
	}
	c->reclaimed[c->nreclaimed++] = slab;
	c->reclaims++;
	return 0;
}

/* A recall event: queued (answered once the frames at hand are handled,
 * client_conn_send_answers), as the leases it asks for may be those of a
 * reply still to come in this read. */
int client_conn_recall(struct client_conn *c, const cJSON *data)
{
	struct client_conn_recall r;

	if (proto_get_id64(data, PROTO_F_INSTANCE, &r.instance) < 0 ||
	    proto_get_u64(data, PROTO_F_BYTES, 0, UINT64_MAX, &r.bytes) < 0 ||
	    proto_get_u64(data, PROTO_F_EPOCH, 1, UINT64_MAX, &r.epoch) < 0)
		return client_conn_fail(c, GPB_E_PROTOCOL,
		                        "a recall event without a valid "
		                        "'instance', 'bytes' or 'epoch'");
	if (c->nrecalls == c->recalls_cap) {
		size_t cap = c->recalls_cap ? 2 * c->recalls_cap : 4;
		struct client_conn_recall *more = realloc(c->recalls, cap * sizeof(*more));
		if (!more)
			return client_conn_fail(c, GPB_E_NOMEM,
			                        "out of memory answering a recall event");
		c->recalls = more;
		c->recalls_cap = cap;
	}
	c->recalls[c->nrecalls++] = r;
	return 0;
}

int client_conn_take_free_error(struct client_conn *c)
{
	int rc = c->free_error;

	if (!rc)
		return 0;
	c->free_error = 0;
	return error_set(rc, "%s", c->free_message);
}

/* Writes "<prefix><n>" for a request id into @buf (24 bytes at least). */
static size_t client_conn_prefixed_id(char *buf, const char *prefix, uint64_t n)
{
	size_t len = strlen(prefix);

	memcpy(buf, prefix, len);
	client_conn_format_id(buf + len, n);
	return strlen(buf);
}

/* Sends a frame @method with the params text @params (an object) under
 * the id "<prefix><next id>", without waiting for its reply. */
static int client_conn_send_quiet(struct client_conn *c, const char *prefix, const char *method,
                                  const char *params)
{
	char frame[256], id[32];
	int n;

	if (c->dead)
		return client_conn_dead_error(c);
	client_conn_prefixed_id(id, prefix, c->next_id++);
	n = snprintf(frame, sizeof(frame),
	             "{\"" PROTO_F_ID "\":\"%s\",\"" PROTO_F_METHOD "\":\"%s\",\"" PROTO_F_PARAMS
	             "\":%s}\n",
	             id, method, params);
	if (n < 0 || (size_t)n >= sizeof(frame))
		return error_set(GPB_E_NOMEM, "cannot encode a '%s' request", method);
	return client_conn_write_frame(c, frame, (size_t)n);
}

int client_conn_send_free(struct client_conn *c, uint64_t id)
{
	char rid[32], frame[128];
	size_t len;
	int rc;

	if (c->dead)
		return client_conn_dead_error(c);
	client_conn_prefixed_id(rid, CLIENT_CONN_FREE_ID, c->next_id++);
	len = proto_fast_free_request(frame, sizeof(frame), rid, id, false);
	rc = len ? client_conn_write_frame(c, frame, len)
	         : error_set(GPB_E_NOMEM, "cannot encode a 'free'");
	if (rc == 0 && ++c->quiet_sends >= CLIENT_CONN_QUIET_PUMP)
		rc = client_conn_pump(c);
	return rc;
}

int client_conn_send_release(struct client_conn *c, uint64_t slab)
{
	char params[48];

	snprintf(params, sizeof(params), "{\"" PROTO_F_SLAB "\":\"%016" PRIx64 "\"}", slab);
	return client_conn_send_quiet(c, CLIENT_CONN_RELEASE_ID, PROTO_M_RELEASE, params);
}

int client_conn_send_lease_return(struct client_conn *c, uint64_t lease, uint64_t in_use)
{
	char params[96];

	snprintf(params, sizeof(params),
	         "{\"" PROTO_F_LEASE "\":\"%016" PRIx64 "\",\"" PROTO_F_IN_USE "\":\"%" PRIu64
	         "\",\"" PROTO_F_REPLY "\":false}",
	         lease, in_use);
	return client_conn_send_quiet(c, CLIENT_CONN_RETURN_ID, PROTO_M_LEASE_RETURN, params);
}

static int client_conn_send_recall_done(struct client_conn *c, uint64_t epoch, uint64_t bytes)
{
	char params[80];

	snprintf(params, sizeof(params),
	         "{\"" PROTO_F_EPOCH "\":\"%" PRIu64 "\",\"" PROTO_F_BYTES "\":\"%" PRIu64 "\"}",
	         epoch, bytes);
	return client_conn_send_quiet(c, CLIENT_CONN_RECALL_DONE_ID, PROTO_M_RECALL_DONE, params);
}

/* Answers the reclaim events read so far (their slabs are unmapped) and
 * the recalls, oldest first. Each is taken off its queue before it is
 * answered: an answer writes, and a write that finds the daemon gone
 * reads what it said last, which comes back here. */
void client_conn_send_answers(struct client_conn *c)
{
	while (!c->dead && c->nreclaimed) {
		uint64_t slab = c->reclaimed[--c->nreclaimed];
		client_conn_send_release(c, slab);
	}
	while (!c->dead && c->nrecalls) {
		struct client_conn_recall r = c->recalls[0];
		uint64_t back = 0;

		memmove(c->recalls, c->recalls + 1, --c->nrecalls * sizeof(*c->recalls));
		if (c->on_recall)
			back = c->on_recall(c->invalidate_ctx, r.instance, r.bytes);
		/* The daemon's figure is what went back for this recall: more
		 * than it asked (a lease is returned whole) is not that. */
		if (client_conn_send_recall_done(c, r.epoch, back < r.bytes ? back : r.bytes) ==
		    0) {
			c->recalls_answered++;
			c->recalled_bytes += back;
		}
	}
}

int client_conn_call_alloc(struct client_conn *c, uint64_t instance, uint64_t size,
                           uint64_t alignment, uint32_t wait_ms, struct proto_grant *fast,
                           struct proto_reply *rep, int *fd)
{
	char id[24], frame[256];
	size_t len;
	int rc = client_conn_exchange_start(c, rep, fd);

	if (rc < 0)
		return rc;
	client_conn_format_id(id, c->next_id++);
	len =
	    proto_fast_alloc_request(frame, sizeof(frame), id, instance, size, alignment, wait_ms);
	if (!len)
		return error_set(GPB_E_NOMEM, "cannot encode an 'alloc' request");
	rc = client_conn_exchange_frame(c, frame, len, id, rep, fd, fast);
	c->in_exchange = true; /* the caller has yet to apply the reply (client_conn_call) */
	client_conn_send_acks(c);
	c->in_exchange = false;
	return rc;
}
