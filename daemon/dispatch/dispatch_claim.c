/*
 * dispatch_claim.c - what a client takes up or lets go of outside alloc and
 * free: claim (the arrays allocate_queue made for it), free_label (cubie's
 * free), invalidate_all and the client's invalidate_done.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch_internal.h"
#include "log.h"

int dispatch_claim(struct dispatch_ctx *ctx, const struct proto_claim_params *p)
{
	struct broker_grant g;
	uint64_t id = p->id;
	int rc = broker_claim(ctx->b, ctx->s, id, &g);
	if (rc == -ENOENT) {
		struct broker_host *h;
		rc = broker_host_claim(ctx->b, ctx->s, id, &h);
		if (rc == 0) {
			/* As a host alloc's reply, so the library maps it alike. */
			rc = dispatch_host_result(ctx, h);
			if (rc == 0 &&
			    (!cJSON_AddStringToObject(ctx->result, PROTO_F_LABEL, h->label) ||
			     proto_add_id64(ctx->result, PROTO_F_INSTANCE, h->instance) < 0))
				rc = -ENOMEM;
			/* Not told of it, the client may ask again. */
			if (rc < 0)
				broker_host_unclaim(h);
			return rc;
		}
		if (rc == -EIO)
			return dispatch_broker_error(ctx, rc, PROTO_F_ID);
	}
	if (rc == -ENOENT) {
		proto_error_set(&ctx->err, PROTO_E_NOT_FOUND, "no such allocation");
		return rc;
	}
	if (rc == -EEXIST)
		return dispatch_param_error(ctx, -EINVAL, PROTO_F_ID,
		                            "an allocation not claimed yet");
	if (rc < 0)
		return -ENOMEM;
	/* The reply names its label and instance (dispatch.c's grant_frame). */
	dispatch_grant_result(ctx, &g, DISPATCH_GRANT_CLAIM);
	return 0;
}

int dispatch_free_label(struct dispatch_ctx *ctx, const struct proto_free_label_params *p)
{
	const char *label = p->label;
	uint64_t instance = p->has_instance ? p->instance : 0, *ids;
	size_t n = 0;
	ids = calloc(ctx->s->alloc_count + ctx->s->host_count + 1, sizeof(*ids));
	if (!ids)
		return -ENOMEM;
	/* Collected first: freeing serves waits, which adds allocations. */
	n = broker_labelled(ctx->s, label, instance, ids, ctx->s->alloc_count + ctx->s->host_count);
	if (!n) {
		free(ids);
		proto_error_set(&ctx->err, PROTO_E_NOT_FOUND, "no allocation with that label");
		return -ENOENT;
	}
	cJSON *r = dispatch_result(ctx), *arr = r ? cJSON_AddArrayToObject(r, PROTO_F_FREED) : NULL;
	for (size_t i = 0; i < n; i++) {
		char hex[17];
		broker_free(ctx->b, ctx->s, ids[i]);
		snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)ids[i]);
		if (arr && !cJSON_AddItemToArray(arr, cJSON_CreateString(hex)))
			arr = NULL;
	}
	free(ids);
	/* Freed either way. Without the list the client hears an internal
	 * error; its library still tracks the ids until it frees them one by
	 * one (not_found) or disconnects. */
	return arr ? 0 : -ENOMEM;
}

int dispatch_invalidate_all(struct dispatch_ctx *ctx, const struct proto_invalidate_all_params *p)
{
	uint64_t allocs, attachments;
	(void)p;
	broker_invalidate_all(ctx->b, &allocs, &attachments);
	log_info("session %llu (uid %u): invalidate_all: %llu allocations, %llu attachments "
	         "released",
	         (unsigned long long)ctx->s->id, (unsigned)ctx->s->uid, (unsigned long long)allocs,
	         (unsigned long long)attachments);
	cJSON *r = dispatch_result(ctx);
	if (!r || proto_add_u64(r, PROTO_F_ALLOCATIONS, allocs) ||
	    proto_add_u64(r, PROTO_F_ATTACHMENTS, attachments))
		return -ENOMEM;
	return 0;
}

/* The client has unmapped every slab of the connection, which is about to
 * close: its VMM slabs need not outlive the session (broker_session_close). */
int dispatch_goodbye(struct dispatch_ctx *ctx, const struct proto_goodbye_params *p)
{
	(void)p;
	unsigned slabs = broker_session_goodbye(ctx->s);
	cJSON *r = dispatch_result(ctx);
	if (!r || proto_add_u64(r, PROTO_F_SLABS, slabs))
		return -ENOMEM;
	return 0;
}

/* The client has closed what the invalidate events up to "epoch" released. */
int dispatch_invalidate_done(struct dispatch_ctx *ctx, const struct proto_invalidate_done_params *p)
{
	unsigned released;
	int rc = broker_invalidate_done(ctx->b, ctx->s, p->epoch, &released);
	if (rc < 0)
		return dispatch_param_error(ctx, rc, PROTO_F_EPOCH,
		                            "the u64 epoch of an invalidate event sent");
	cJSON *r = dispatch_result(ctx);
	if (!r || proto_add_u64(r, PROTO_F_SLABS, released))
		return -ENOMEM;
	return 0;
}

int dispatch_release(struct dispatch_ctx *ctx, const struct proto_release_params *p)
{
	uint64_t slab = p->slab;
	int rc = broker_release(ctx->b, ctx->s, slab);
	if (rc == -EBUSY) {
		proto_error_set(&ctx->err, PROTO_E_PARAMS,
		                "invalid params: this connection still has memory in slab %016llx",
		                (unsigned long long)slab);
		snprintf(ctx->err.field, sizeof(ctx->err.field), PROTO_F_SLAB);
		return rc;
	}
	if (rc < 0)
		return dispatch_broker_error(ctx, rc, "kept slab");
	return dispatch_result(ctx) ? 0 : -ENOMEM;
}
