/*
 * dispatch_lease.c - lease, lease_return and lease_carve: params in, the
 * broker's call (broker_lease.c), the grant, result or refusal out.
 */
#include "dispatch_internal.h"

#include <errno.h>

int dispatch_lease(struct dispatch_ctx *ctx, const struct proto_lease_params *p)
{
	struct broker_grant g;
	struct broker_refusal why;
	int rc = broker_lease(ctx->b, ctx->s, p->instance, p->size,
	                      p->has_in_use ? &p->in_use : NULL, &g, &why);
	if (rc == -ENOMEM && why.limit == BROKER_LIMIT_DEVICE &&
	    dispatch_hold_for_room(ctx, why.device, p->instance, p->size))
		return 0;
	if (rc < 0)
		return dispatch_refusal(ctx, &why);
	/* Mapped by the client as an alloc's grant; returned should the
	 * reply fail. */
	dispatch_grant_result(ctx, &g, DISPATCH_GRANT_LEASE);
	return 0;
}

int dispatch_lease_return(struct dispatch_ctx *ctx, const struct proto_lease_return_params *p)
{
	int rc = broker_lease_return(ctx->b, ctx->s, p->lease, p->has_in_use ? &p->in_use : NULL);
	if (rc < 0)
		return dispatch_broker_error(ctx, rc, PROTO_F_LEASE);
	/* As free's: a return that does not wait for its reply (a recall's
	 * answer, sent in the middle of another exchange) hears only of a
	 * failure. */
	ctx->quiet = p->has_reply && !p->reply;
	return ctx->quiet || dispatch_result(ctx) ? 0 : -ENOMEM;
}

int dispatch_lease_carve(struct dispatch_ctx *ctx, const struct proto_lease_carve_params *p)
{
	uint64_t id, size;
	int rc = broker_lease_carve(ctx->b, ctx->s, p->lease, p->offset, p->size, &id, &size);
	switch (rc) {
	case 0:
		break;
	case -EINVAL:
		return dispatch_param_error(
		    ctx, -ERANGE, PROTO_F_OFFSET,
		    "a multiple of " PROTO_STR(PROTO_GRANULE) " inside the lease");
	case -ERANGE:
		return dispatch_param_error(ctx, -ERANGE, PROTO_F_SIZE,
		                            "at most the bytes from offset to the lease's end");
	case -EADDRINUSE:
		return dispatch_param_error(ctx, -ERANGE, PROTO_F_OFFSET,
		                            "a range no other carve of the lease covers");
	case -EAGAIN:
		return -ENOMEM;
	default:
		return dispatch_broker_error(ctx, rc, PROTO_F_LEASE);
	}
	cJSON *r = dispatch_result(ctx);
	if (!r || proto_add_id64(r, PROTO_F_ID, id) || proto_add_u64(r, PROTO_F_SIZE, size)) {
		/* The client is not told of it: it is not its. */
		broker_free(ctx->b, ctx->s, id);
		return -ENOMEM;
	}
	return 0;
}
