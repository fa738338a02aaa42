/*
 * memory.c - gpb_alloc, gpb_free, gpb_attach and gpb_detach: the exchanges
 * that change which slabs a connection holds, kept in step with
 * core/track.c (share.c names memory and opens it by name through
 * memory_call); and gpb_alloc_host / gpb_host_device_pointer over
 * core/hostmem.c.
 */
#include "memory.h"
#include "client.h"
#include "codec.h"
#include "error.h"
#include "export.h"
#include "hostmem.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* What gives back an alloc or an attach. */
static const char *const memory_undo_method[TRACK_KINDS] = {
    [TRACK_ALLOC] = PROTO_M_FREE,
    [TRACK_ATTACH] = PROTO_M_DETACH,
};

/*
 * The daemon committed an allocation or attachment that this process cannot
 * use (its slab could not be mapped): give it back, so that both sides agree
 * on which slabs the connection holds. A daemon that keeps emptied slabs
 * for this connection keeps @slab (0: unknown) after that free too, though
 * this library never took it: it is released as well. Returns @err with its
 * message kept. If even that fails the two sides disagree for good: drop the
 * connection, which makes the daemon release everything it held.
 */
static int memory_undo(gpb_client *c, enum track_kind kind, uint64_t id, uint64_t slab, int err)
{
	char saved[256];

	snprintf(saved, sizeof(saved), "%s", error_message());
	if (client_call_id(c, memory_undo_method[kind], PROTO_F_ID, id) < 0)
		client_conn_fail(&c->conn, GPB_E_PROTOCOL, "could not give back %016" PRIx64 ": %s",
		                 id, error_message());
	else if (slab && !track_holds_slab(&c->track, slab))
		client_conn_send_release(&c->conn, slab); /* refused when not kept: dropped */
	return error_set(err, "%s", saved);
}

/* The slab a grant names, or 0. */
static uint64_t memory_grant_slab(const cJSON *result)
{
	uint64_t slab = 0;

	if (proto_get_id64(result, PROTO_F_SLAB, &slab) < 0)
		slab = 0;
	return slab;
}

/* Host memory: an alloc's params or reply, a claim's reply ("type" pinned
 * or mapped). */
static bool is_host_type(const cJSON *result)
{
	const char *type =
	    cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(result, PROTO_F_TYPE));

	return type &&
	       (strcmp(type, PROTO_V_MEM_PINNED) == 0 || strcmp(type, PROTO_V_MEM_MAPPED) == 0);
}

/*
 * Sends an alloc or attach (@params consumed; NULL when building them ran out
 * of memory) and records its result; fills @out and/or *result_json (the raw
 * result) when not NULL. Lock held.
 */
int memory_call(gpb_client *c, enum track_kind kind, const char *method, cJSON *params,
                struct gpb_allocation *out, char **result_json)
{
	struct track_prep prep;
	struct proto_reply rep;
	uint64_t id;
	int fd, rc;

	if (!params)
		return error_set(GPB_E_NOMEM, "out of memory");
	if (c->conn.dead) {
		cJSON_Delete(params);
		return client_conn_dead_error(&c->conn);
	}
	if (!c->track.opener) {
		cJSON_Delete(params);
		return error_set(GPB_E_NOT_SUPPORTED,
		                 "this libgpubroker cannot map memory of the '%s' backend",
		                 c->backend);
	}
	rc = track_prepare(&c->track, kind, &prep);
	if (rc < 0) {
		cJSON_Delete(params);
		return rc;
	}
	rc = client_conn_call(&c->conn, method, params, &rep, &fd);
	if (rc < 0)
		goto out;
	if (is_host_type(rep.result)) {
		/* A queued array of host memory (claim): mapped as a host alloc. */
		rc = hostmem_adopt(c, rep.result, fd, out, result_json);
		goto out_reply;
	}
	/* Printed before adopting: nothing to unwind locally if it fails. */
	rc = client_result_json(rep.result, result_json);
	if (rc < 0) {
		if (fd >= 0)
			close(fd);
		if (proto_get_id64(rep.result, PROTO_F_ID, &id) < 0)
			rc = client_conn_fail(&c->conn, GPB_E_PROTOCOL,
			                      "reply without a valid 'id'");
		else
			rc = memory_undo(c, kind, id, memory_grant_slab(rep.result), rc);
		goto out_reply;
	}
	rc = track_adopt(&c->track, kind, &prep, rep.result, fd, out, &id);
	if (rc == GPB_E_PROTOCOL)
		rc = client_conn_fail(&c->conn, rc, "%s", error_message());
	else if (rc < 0)
		rc = memory_undo(c, kind, id, memory_grant_slab(rep.result), rc);
	if (rc < 0 && result_json) {
		free(*result_json);
		*result_json = NULL;
	}
out_reply:
	proto_reply_finish(&rep);
out:
	track_prep_release(&prep);
	return rc;
}

/*
 * gpb_alloc's exchange: the request and, in the steady state (a slab this
 * connection holds), the grant go without the cJSON tree (proto/codec.h);
 * a grant that hands a slab over is read the general way. Lock held.
 */
static int memory_alloc(gpb_client *c, uint64_t instance, uint64_t size, uint64_t alignment,
                        uint32_t wait_ms, struct gpb_allocation *out)
{
	struct proto_grant g;
	struct track_prep prep;
	struct proto_reply rep;
	uint64_t id = 0;
	int fd, rc;

	if (c->conn.dead)
		return client_conn_dead_error(&c->conn);
	if (!c->track.opener)
		return error_set(GPB_E_NOT_SUPPORTED,
		                 "this libgpubroker cannot map memory of the '%s' backend",
		                 c->backend);
	rc = track_prepare(&c->track, TRACK_ALLOC, &prep);
	if (rc < 0)
		return rc;
	uint64_t reclaims = c->conn.reclaims;
	rc = client_conn_call_alloc(&c->conn, instance, size, alignment, wait_ms, &g, &rep, &fd);
	/* Refused for room while the daemon asked this connection for slabs
	 * it kept (answered already): once more, which the released slabs may
	 * serve. */
	if (rc == GPB_E_OUT_OF_MEMORY && c->conn.reclaims != reclaims)
		rc = client_conn_call_alloc(&c->conn, instance, size, alignment, wait_ms, &g, &rep,
		                            &fd);
	uint64_t slab = 0;
	if (rc == 1) {
		slab = g.slab;
		rc = track_adopt_grant(&c->track, &prep, &g, out, &id);
	} else if (rc == 0) {
		slab = memory_grant_slab(rep.result);
		rc = track_adopt(&c->track, TRACK_ALLOC, &prep, rep.result, fd, out, &id);
		proto_reply_finish(&rep);
	}
	if (rc == GPB_E_PROTOCOL)
		rc = client_conn_fail(&c->conn, rc, "%s", error_message());
	else if (rc < 0 && id)
		rc = memory_undo(c, TRACK_ALLOC, id, slab, rc);
	track_prep_release(&prep);
	return rc;
}

/*
 * Sends a free or detach of @id (@params consumed) and forgets the hold when
 * the daemon accepts it (fills *result_json when not NULL). With the cuda
 * backend the work queued in the mapping's context is waited for first,
 * unless @ordered (gpb_free_async's fence has passed), since the daemon may
 * hand the range to another allocation at once; and a connection's last
 * hold on a slab is closed before the daemon hears of it
 * (track_release_early): once no connection holds a slab the daemon may
 * free it, and memory must not be freed under an open IPC mapping. A
 * refusal after that closing leaves the two sides disagreeing, so the
 * connection is dropped (the daemon then releases all it held).
 */
static int memory_release_call(gpb_client *c, enum track_kind kind, const char *method,
                               cJSON *params, uint64_t id, bool have_id, bool ordered,
                               char **result_json)
{
	struct proto_reply rep;
	bool closed;
	int rc;

	if (!params)
		return error_set(GPB_E_NOMEM, "out of memory");
	if (have_id && !ordered)
		track_finish_work(&c->track, kind, id);
	closed = have_id && track_release_early(&c->track, kind, id);
	rc = client_conn_call(&c->conn, method, params, &rep, NULL);
	if (rc < 0) {
		if (closed && !c->conn.dead)
			rc = client_conn_fail(&c->conn, rc,
			                      "%s of %016" PRIx64
			                      " failed after its slab was closed: %s",
			                      method, id, error_message());
		return rc;
	}
	if (have_id)
		track_release(&c->track, kind, id);
	rc = client_result_json(rep.result, result_json);
	proto_reply_finish(&rep);
	if (rc == 0)
		rc = client_send_released(c);
	return rc;
}

/*
 * gpb_free of an allocation, without waiting for the daemon: this
 * connection knows what it holds (memory_owned), so the daemon has no
 * reason to refuse; if it does, conn.c keeps its error for the next call.
 * The daemon reads requests in order, so the free is done before anything
 * sent after it. Work queued on the memory is waited for first (unless
 * @ordered: gpb_free_async's fence passed), and a slab that the free lets
 * go of is closed first (cuda: the daemon may free it as soon as it hears).
 * Lock held.
 */
static int memory_free_quiet(gpb_client *c, uint64_t id, bool ordered)
{
	int rc;

	if (!ordered)
		track_finish_work(&c->track, TRACK_ALLOC, id);
	track_release_early(&c->track, TRACK_ALLOC, id);
	track_release(&c->track, TRACK_ALLOC, id);
	rc = client_conn_send_free(&c->conn, id);
	if (rc == 0)
		rc = client_send_released(c);
	return rc;
}

/*
 * Whether @id is the caller's to free or detach: this connection holds it
 * and gpb_free_async() has not taken it. Else GPB_E_NOT_FOUND's message is
 * set: the daemon would answer not_found too, and asking it is a round trip
 * that could only disagree with what this connection recorded.
 */
static bool memory_owned(gpb_client *c, enum track_kind kind, uint64_t id)
{
	const struct track_entry *e = track_lookup(&c->track, kind, id);

	if (e && !e->freeing)
		return true;
	error_set(GPB_E_NOT_FOUND, "no %s %016" PRIx64 " on this connection%s",
	          kind == TRACK_ALLOC ? "allocation" : "attachment", id,
	          e ? " (gpb_free_async has it)" : "");
	return false;
}

static int memory_free_fenced(gpb_client *c, struct track_entry *e, uint64_t id, void *stream);

/* Whether a stream of the context of allocation @id captures (the legacy
 * stream says so for blocking streams): then gpb_free must not wait for
 * the context. Lock held. */
static bool memory_capturing(gpb_client *c, uint64_t id)
{
	const struct track_entry *e = track_lookup(&c->track, TRACK_ALLOC, id);
	const struct slab_opener *opener = c->track.opener;

	return e && e->slab && e->slab->map && opener->capturing &&
	       opener->capturing(e->slab->map->priv, NULL);
}

/* gpb_free and gpb_detach: free or detach of @id, which this connection must
 * hold. */
static int memory_release(gpb_client *c, enum track_kind kind, uint64_t id)
{
	int rc = client_enter(c);

	if (rc < 0)
		return rc;
	if (c->conn.dead) {
		rc = client_conn_dead_error(&c->conn);
	} else if (kind == TRACK_ALLOC && (rc = lease_free_carved(c, id)) != 1) {
		/* A local block (lease.h) carved for export or attach. */
	} else if (kind == TRACK_ALLOC && hostmem_get(c, id)) {
		rc = hostmem_free(c, id, client_params_id(PROTO_F_ID, id), NULL);
	} else if (!memory_owned(c, kind, id)) {
		rc = GPB_E_NOT_FOUND;
	} else if (kind == TRACK_ALLOC && memory_capturing(c, id)) {
		/* A synchronize would break the capture: a fence instead. */
		rc = memory_free_fenced(c, track_lookup(&c->track, kind, id), id, NULL);
	} else if (kind == TRACK_ALLOC) {
		rc = memory_free_quiet(c, id, false);
	} else {
		rc = memory_release_call(c, kind, memory_undo_method[kind],
		                         client_params_id(PROTO_F_ID, id), id, true, false, NULL);
	}
	client_leave(c);
	return rc;
}

/* The leases' fast path: the allocator's lock alone, no exchange
 * (lease.h). 0, or 1: anything it cannot serve goes the slow way, which
 * checks the arguments and reports. Kept apart (and out of the long
 * gpb_alloc_wait) so that a served allocation costs no more than it must
 * (bench P8a). */
static inline int alloc_local(gpb_client *c, uint64_t instance, uint64_t size, uint64_t alignment,
                              void *stream, struct gpb_allocation *out)
{
	if (!c || !out || !size || alignment > PROTO_MAX_ALIGNMENT ||
	    (alignment & (alignment - 1)) || client_forked(c))
		return 1;
	error_clear();
	return lease_alloc_local(
	    c, instance, size, alignment < PROTO_GRANULE ? PROTO_GRANULE : alignment, stream, out);
}

static int alloc_slow(gpb_client *c, uint64_t instance, uint64_t size, uint64_t alignment,
                      uint32_t wait_ms, void *stream, struct gpb_allocation *out);

GPB_EXPORT int gpb_alloc(gpb_client *c, uint64_t instance, uint64_t size, uint64_t alignment,
                         struct gpb_allocation *out)
{
	if (alloc_local(c, instance, size, alignment, NULL, out) == 0)
		return 0;
	return alloc_slow(c, instance, size, alignment, 0, NULL, out);
}

GPB_EXPORT int gpb_alloc_wait(gpb_client *c, uint64_t instance, uint64_t size, uint64_t alignment,
                              uint32_t wait_ms, struct gpb_allocation *out)
{
	if (alloc_local(c, instance, size, alignment, NULL, out) == 0)
		return 0;
	return alloc_slow(c, instance, size, alignment, wait_ms, NULL, out);
}

GPB_EXPORT int gpb_alloc_async(gpb_client *c, uint64_t instance, uint64_t size, uint64_t alignment,
                               void *stream, struct gpb_allocation *out)
{
	void *key = lease_stream_key(stream);
	int rc = alloc_local(c, instance, size, alignment, key, out);

	if (rc != 0)
		rc = alloc_slow(c, instance, size, alignment, 0, key, out);
	/* Allocated in a capture: kept while the graph lives (lease.h). */
	if (rc == 0)
		lease_capture_hold(c, out->id, stream);
	return rc;
}

/* @stream: the leases' key (lease_stream_key; NULL for gpb_alloc's). */
static int alloc_slow(gpb_client *c, uint64_t instance, uint64_t size, uint64_t alignment,
                      uint32_t wait_ms, void *stream, struct gpb_allocation *out)
{
	int rc;

	rc = client_enter(c);
	if (rc < 0)
		return rc;
	if (!out || size == 0) {
		rc = error_set(GPB_E_INVALID, "gpb_alloc: size must be at least 1 and out set");
		goto out;
	}
	if (wait_ms > PROTO_MAX_WAIT_MS) {
		rc = error_set(GPB_E_INVALID, "gpb_alloc_wait: wait_ms is at most %u",
		               PROTO_MAX_WAIT_MS);
		goto out;
	}
	if (alignment && ((alignment & (alignment - 1)) || alignment > PROTO_MAX_ALIGNMENT)) {
		rc =
		    error_set(GPB_E_INVALID, "gpb_alloc: alignment must be a power of two up to %u",
		              PROTO_MAX_ALIGNMENT);
		goto out;
	}
	/* Every allocation is granule-aligned, which satisfies any smaller
	 * power of two; the daemon only accepts the granule and up. */
	if (alignment && alignment < PROTO_GRANULE)
		alignment = PROTO_GRANULE;
	rc = lease_alloc(c, instance, size, alignment, wait_ms > 0, stream, out);
	if (rc == 1)
		rc = memory_alloc(c, instance, size, alignment, wait_ms, out);
out:
	client_leave(c);
	return rc;
}

/* Forgets the allocations a free_label reply lists (host memory too). */
static void memory_release_freed(gpb_client *c, const cJSON *result)
{
	const cJSON *it;
	uint64_t id;

	cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(result, PROTO_F_FREED))
	{
		char *end;

		if (!cJSON_IsString(it) || strlen(it->valuestring) != 16)
			continue;
		id = strtoull(it->valuestring, &end, 16);
		if (*end == '\0' && !hostmem_forget(c, id))
			track_release(&c->track, TRACK_ALLOC, id);
	}
}

GPB_EXPORT int gpb_claim(gpb_client *c, uint64_t id, struct gpb_allocation *out)
{
	int rc;

	rc = client_enter(c);
	if (rc < 0)
		return rc;
	if (!out) {
		rc = error_set(GPB_E_INVALID, "gpb_claim: out is NULL");
		goto out;
	}
	rc =
	    memory_call(c, TRACK_ALLOC, PROTO_M_CLAIM, client_params_id(PROTO_F_ID, id), out, NULL);
out:
	client_leave(c);
	return rc;
}

/*
 * Sends a free_label (@params consumed; NULL when building them ran out of
 * memory) and forgets what the daemon freed; returns how many, or an error,
 * and fills *result_json when not NULL. As gpb_free does for one slab
 * (memory_release_call), every slab the label empties is closed before the
 * daemon may free it; @label NULL (parameters the daemon will refuse)
 * closes nothing. Lock held.
 */
static int free_label_call(gpb_client *c, cJSON *params, const char *label, uint64_t instance,
                           char **result_json)
{
	struct proto_reply rep;
	uint64_t *closed = NULL;
	size_t closing = 0;
	int rc;

	if (c->conn.dead) {
		cJSON_Delete(params);
		return client_conn_dead_error(&c->conn);
	}
	/* Counted first, to have room for their ids. */
	if (label)
		closing = track_release_label_early(&c->track, label, instance, NULL, 0);
	if (closing)
		closed = calloc(closing, sizeof(*closed));
	if (!params || (closing && !closed)) {
		cJSON_Delete(params);
		free(closed);
		return error_set(GPB_E_NOMEM, "out of memory");
	}
	/* The label's ranges may go to others at once: their work first. */
	track_finish_all(&c->track);
	if (closing)
		closing = track_release_label_early(&c->track, label, instance, closed, closing);
	rc = client_conn_call(&c->conn, PROTO_M_FREE_LABEL, params, &rep, NULL);
	if (rc < 0) {
		if (closing && !c->conn.dead)
			rc = client_conn_fail(&c->conn, rc,
			                      "free_label failed after closing slabs: %s",
			                      error_message());
		free(closed);
		return rc;
	}
	memory_release_freed(c, rep.result);
	client_send_released(c);
	rc = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(rep.result, PROTO_F_FREED));
	if (result_json && client_result_json(rep.result, result_json) < 0)
		rc = GPB_E_NOMEM;
	proto_reply_finish(&rep);
	for (size_t i = 0; i < closing; i++) {
		/* Closed, yet the daemon did not free all of it: the two sides
		 * disagree for good. */
		if (track_holds_slab(&c->track, closed[i])) {
			rc = client_conn_fail(
			    &c->conn, GPB_E_PROTOCOL,
			    "free_label left slab %016" PRIx64 " held after closing it", closed[i]);
			break;
		}
	}
	free(closed);
	return rc;
}

GPB_EXPORT int gpb_free_label(gpb_client *c, uint64_t instance, const char *label)
{
	cJSON *params;
	int rc;

	rc = client_enter(c);
	if (rc < 0)
		return rc;
	if (!label || !*label || strlen(label) > PROTO_MAX_NAME) {
		rc = error_set(GPB_E_INVALID, "gpb_free_label: label must be 1-%d bytes",
		               PROTO_MAX_NAME);
	} else {
		params = cJSON_CreateObject();
		if (params &&
		    (!cJSON_AddStringToObject(params, PROTO_F_LABEL, label) ||
		     (instance && proto_add_id64(params, PROTO_F_INSTANCE, instance) < 0))) {
			cJSON_Delete(params);
			params = NULL;
		}
		rc = free_label_call(c, params, label, instance, NULL);
	}
	client_leave(c);
	return rc;
}

GPB_EXPORT int gpb_release_kept(gpb_client *c)
{
	int rc = client_enter(c);
	size_t n;

	if (rc < 0)
		return rc;
	if (c->conn.dead) {
		rc = client_conn_dead_error(&c->conn);
	} else {
		/* Wholly free leases first: their slabs may then be kept
		 * idle, and go with the rest. */
		lease_release_free(c);
		n = track_release_idle(&c->track);
		rc = client_send_released(c);
		if (rc == 0)
			rc = n > INT32_MAX ? INT32_MAX : (int)n;
	}
	client_leave(c);
	return rc;
}

GPB_EXPORT int gpb_free(gpb_client *c, uint64_t id)
{
	/* A local block: the allocator's lock alone (lease.h). */
	if (c && lease_id_local(id) && !client_forked(c)) {
		error_clear();
		if (lease_free_local(c, id) == 0)
			return 0;
	}
	return memory_release(c, TRACK_ALLOC, id);
}

/* client.release_pending: gpb_free_async's free, once its fence passed.
 * Gone already (free_label, invalidate): nothing to do. Lock held. */
static void memory_release_pending(gpb_client *c, uint64_t id)
{
	if (lease_id_local(id))
		lease_release_pending(c, id);
	else if (track_lookup(&c->track, TRACK_ALLOC, id))
		memory_free_quiet(c, id, true);
}

/* A daemon allocation's free once the work queued on @stream so far has
 * run: behind a fence on the client's pending queue. Lock held. */
static int memory_free_fenced(gpb_client *c, struct track_entry *e, uint64_t id, void *stream)
{
	const struct slab_opener *opener = c->track.opener;
	struct client_pending *p;
	void *fence = NULL;
	int rc;

	/* No streams (sim): nothing can be queued on the memory. */
	if (!opener->fence || !e->slab->map)
		return memory_free_quiet(c, id, true);
	rc = opener->fence(e->slab->map->priv, stream, &fence);
	if (rc < 0)
		return rc;
	/* A capture's fence too: the pending queue is polled whole. */
	p = fence ? malloc(sizeof(*p)) : NULL;
	if (fence && !p) {
		/* No room to remember it: wait for it here instead. */
		opener->fence_wait(fence);
		opener->fence_free(fence);
	}
	/* Nothing left to wait for (or a dead context: nothing queued there
	 * can run). */
	if (!p)
		return memory_free_quiet(c, id, true);
	p->id = id;
	p->fence = fence;
	e->freeing = true;
	c->release_pending = memory_release_pending;
	client_pending_add(c, p);
	return 0;
}

GPB_EXPORT int gpb_free_async(gpb_client *c, uint64_t id, void *stream)
{
	const struct slab_opener *opener;
	struct client_pending *p = NULL;
	struct track_entry *e;
	void *fence = NULL;
	int rc;

	/* A block of @stream's own leases: the allocator's lock alone. */
	if (c && lease_id_local(id) && !client_forked(c)) {
		error_clear();
		if (lease_free_stream(c, id, stream) == 0)
			return 0;
	}
	rc = client_enter(c);
	if (rc < 0)
		return rc;
	opener = c->track.opener;
	e = track_lookup(&c->track, TRACK_ALLOC, id);
	if (c->conn.dead) {
		rc = client_conn_dead_error(&c->conn);
	} else if ((rc = lease_free_async(c, id, stream, &fence)) != 1) {
		/* A local block: it goes back to this process's own leases
		 * once the stream has run, as any gpb_free_async. */
		if (rc == 0 && fence) {
			p = malloc(sizeof(*p));
			if (!p) {
				opener->fence_wait(fence);
				opener->fence_free(fence);
				lease_release_pending(c, id);
			} else {
				p->id = id;
				p->fence = fence;
				c->release_pending = memory_release_pending;
				client_pending_add(c, p);
			}
		}
	} else if (hostmem_get(c, id)) {
		rc = error_set(GPB_E_INVALID,
		               "gpb_free_async: %016" PRIx64 " is host memory: use gpb_free", id);
	} else if (!memory_owned(c, TRACK_ALLOC, id)) {
		rc = GPB_E_NOT_FOUND;
	} else {
		rc = memory_free_fenced(c, e, id, stream);
	}
	client_leave(c);
	return rc;
}

GPB_EXPORT int gpb_attach(gpb_client *c, uint64_t id, struct gpb_allocation *out)
{
	int rc;

	rc = client_enter(c);
	if (rc < 0)
		return rc;
	if (!out) {
		rc = error_set(GPB_E_INVALID, "gpb_attach: out is NULL");
		goto out;
	}
	/* A local block of this client is carved first: the attachment is
	 * of the carve, whose daemon id it carries (lease.h). */
	rc = lease_carve(c, id, &id);
	if (rc < 0)
		goto out;
	rc = memory_call(c, TRACK_ATTACH, PROTO_M_ATTACH, client_params_id(PROTO_F_ID, id), out,
	                 NULL);
out:
	client_leave(c);
	return rc;
}

GPB_EXPORT int gpb_detach(gpb_client *c, uint64_t id)
{
	return memory_release(c, TRACK_ATTACH, id);
}

int memory_request(gpb_client *c, const char *method, cJSON *params, char **result_json)
{
	int op = proto_op_lookup(method);
	enum track_kind kind = (op == PROTO_OP_ALLOC || op == PROTO_OP_FREE ||
	                        op == PROTO_OP_CLAIM || op == PROTO_OP_FREE_LABEL)
	                           ? TRACK_ALLOC
	                           : TRACK_ATTACH;
	bool have_id;
	uint64_t id;
	int rc;

	if (op == PROTO_OP_ALLOC) {
		/* Host memory is mapped its own way (hostmem.c). */
		if (is_host_type(params))
			return hostmem_call(c, params, NULL, result_json);
	}
	if (op == PROTO_OP_ALLOC || op == PROTO_OP_ATTACH || op == PROTO_OP_OPEN ||
	    op == PROTO_OP_CLAIM)
		return memory_call(c, kind, method, params, NULL, result_json);
	if (op == PROTO_OP_FREE_LABEL) {
		/* The daemon judges the parameters; the slabs close early only
		 * for ones it can accept. */
		const char *label = NULL;
		uint64_t instance = 0;
		if (proto_get_string(params, PROTO_F_LABEL, PROTO_MAX_NAME, &label) < 0 ||
		    (cJSON_GetObjectItemCaseSensitive(params, PROTO_F_INSTANCE) &&
		     proto_get_id64(params, PROTO_F_INSTANCE, &instance) < 0))
			label = NULL;
		rc = free_label_call(c, params, label, instance, result_json);
		return rc < 0 ? rc : 0;
	}

	/* free / detach: passed to the daemon as they are (it judges the
	 * parameters); on success, forget what it released. */
	have_id = proto_get_id64(params, PROTO_F_ID, &id) == 0;
	if (op == PROTO_OP_FREE && have_id && hostmem_get(c, id))
		return hostmem_free(c, id, params, result_json);
	return memory_release_call(c, kind, method, params, id, have_id, false, result_json);
}

/* ---- host memory (core/hostmem.c) ------------------------------------------ */

GPB_EXPORT int gpb_alloc_host(gpb_client *c, uint64_t instance, uint64_t size,
                              enum gpb_host_type type, struct gpb_allocation *out)
{
	cJSON *params;
	int rc;

	rc = client_enter(c);
	if (rc < 0)
		return rc;
	if (!out || !size || (type != GPB_HOST_PINNED && type != GPB_HOST_MAPPED)) {
		rc = error_set(GPB_E_INVALID,
		               "gpb_alloc_host: needs out, a size and GPB_HOST_PINNED or "
		               "GPB_HOST_MAPPED");
	} else {
		params = cJSON_CreateObject();
		if (params &&
		    (proto_add_id64(params, PROTO_F_INSTANCE, instance) < 0 ||
		     proto_add_u64(params, PROTO_F_SIZE, size) < 0 ||
		     !cJSON_AddStringToObject(params, PROTO_F_TYPE,
		                              type == GPB_HOST_MAPPED ? PROTO_V_MEM_MAPPED
		                                                      : PROTO_V_MEM_PINNED))) {
			cJSON_Delete(params);
			params = NULL;
		}
		rc = hostmem_call(c, params, out, NULL);
	}
	client_leave(c);
	return rc;
}

GPB_EXPORT int gpb_host_device_pointer(gpb_client *c, uint64_t id, void **device_ptr)
{
	struct host_entry *h;
	int rc;

	rc = client_enter(c);
	if (rc < 0)
		return rc;
	h = hostmem_get(c, id);
	if (!device_ptr)
		rc = error_set(GPB_E_INVALID, "gpb_host_device_pointer: device_ptr is NULL");
	else if (!h)
		rc = error_set(GPB_E_NOT_FOUND,
		               "no host allocation %016" PRIx64 " on this connection", id);
	else if (!h->device_ptr)
		rc = error_set(GPB_E_INVALID,
		               "host allocation %016" PRIx64 " is pinned, not mapped", id);
	else
		*device_ptr = h->device_ptr;
	client_leave(c);
	return rc;
}
