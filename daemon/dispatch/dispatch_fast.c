/*
 * dispatch_fast.c - the hot path: alloc and free frames in their canonical
 * form (what libgpubroker sends) decoded by proto/codec.c, served by the
 * same broker calls as the general handlers, and a grant answered without
 * building a cJSON tree. Anything unusual (another form, a value the
 * general path would refuse, an error) goes the general way, so replies
 * are the same bytes either way.
 */
#include <errno.h>
#include <stdlib.h>

#include "codec.h"
#include "dispatch_internal.h"
#include "pool.h"

#define DISPATCH_FAST_REPLY 512 /* a grant with a handle and a UUID fits */

/* The grant as a reply frame: the typed encoder, else cJSON. NULL when
 * neither could (then the allocation is given back). */
static char *fast_grant_frame(struct dispatch_ctx *ctx, const struct broker_grant *g, size_t *len)
{
	struct proto_fast_grant fg = {
	    .id = g->id,
	    .device = g->device,
	    .slab = g->slab_id,
	    .slab_size = g->slab_size,
	    .offset = g->offset,
	    .size = g->size,
	    .handle = g->handle,
	    .device_uuid = g->handle ? broker_device_info(ctx->b, g->device)->uuid : NULL,
	    .fd = g->handle && g->fd >= 0,
	    .pool = g->pool,
	    .pool_id = g->pool_id,
	    .vmm = g->vmm,
	    .keep = g->keep,
	};
	char *frame = malloc(DISPATCH_FAST_REPLY);
	if (frame) {
		*len = proto_fast_grant_reply(frame, DISPATCH_FAST_REPLY, ctx->id, &fg);
		if (*len)
			return frame;
		free(frame);
	}
	if (dispatch_grant_result(ctx, g) < 0)
		return NULL;
	frame = proto_encode_result(ctx->id, ctx->result, len);
	ctx->result = NULL;
	return frame;
}

static bool fast_alloc(struct dispatch_ctx *ctx, const struct proto_fast_req *r,
                       const struct timespec *t0, struct dispatch_reply *out)
{
	uint64_t align = r->has_alignment ? r->alignment : POOL_GRANULE;
	struct broker_grant g;

	/* What on_alloc would refuse, it refuses in its own words. */
	if (r->size == 0 || align < POOL_GRANULE || align > POOL_MAX_ALIGNMENT ||
	    (align & (align - 1)) || r->wait_ms > PROTO_MAX_WAIT_MS)
		return false;
	int rc = dispatch_alloc_device(ctx, r->instance, r->size, align, r->wait_ms, &g);
	if (rc < 0 || ctx->deferred) {
		dispatch_reply_to(ctx->d, ctx->s, ctx, rc, r->id, PROTO_M_ALLOC, PROTO_OP_ALLOC, t0,
		                  out);
		return true;
	}
	size_t len = 0;
	char *frame = fast_grant_frame(ctx, &g, &len);
	if (!frame) {
		dispatch_grant_undo(ctx->b, ctx->s, &g,
		                    false); /* the client cannot be told of it */
		dispatch_reply_to(ctx->d, ctx->s, ctx, -ENOMEM, r->id, PROTO_M_ALLOC,
		                  PROTO_OP_ALLOC, t0, out);
		return true;
	}
	/* The frame is made: the tail only records the metrics. */
	ctx->quiet = true;
	dispatch_reply_to(ctx->d, ctx->s, ctx, 0, r->id, PROTO_M_ALLOC, PROTO_OP_ALLOC, t0, out);
	out->deferred = false;
	out->frame = frame;
	out->len = len;
	out->fd = g.handle && g.fd >= 0 ? g.fd : -1;
	return true;
}

static bool fast_free(struct dispatch_ctx *ctx, const struct proto_fast_req *r,
                      const struct timespec *t0, struct dispatch_reply *out)
{
	int rc = broker_free(ctx->b, ctx->s, r->free_id);
	if (rc < 0)
		rc = dispatch_broker_error(ctx, rc, "allocation");
	else
		ctx->quiet = !r->reply;
	dispatch_reply_to(ctx->d, ctx->s, ctx, rc, r->id, PROTO_M_FREE, PROTO_OP_FREE, t0, out);
	return true;
}

bool dispatch_fast(struct dispatch_ctx *ctx, const char *frame, size_t len,
                   const struct timespec *t0, struct dispatch_reply *out)
{
	struct proto_fast_req r;

	if (proto_fast_request(frame, len, &r) < 0)
		return false;
	ctx->id = r.id;
	bool done =
	    r.op == PROTO_OP_ALLOC ? fast_alloc(ctx, &r, t0, out) : fast_free(ctx, &r, t0, out);
	ctx->id = NULL; /* r's: gone with this frame */
	return done;
}
