/*
 * dispatch_fast.c - the hot path: alloc and free frames in their canonical
 * form (what libgpubroker sends) decoded by proto/codec.c without a cJSON
 * tree into the same params structs, checked by the same
 * proto_<name>_params_check() and served by the same handlers as the
 * general path; a grant is answered by the one grant encoder either way
 * (dispatch_reply_to). Any other form goes the general way, so a frame
 * means the same, and gets the same bytes back, on both paths.
 */
#include "codec.h"
#include "dispatch_internal.h"

bool dispatch_fast(struct dispatch_ctx *ctx, const char *frame, size_t len,
                   const struct timespec *t0, struct dispatch_reply *out)
{
	struct proto_fast_req r;
	int rc;

	if (proto_fast_request(frame, len, &r) < 0)
		return false;
	ctx->id = r.id;
	if (r.op == PROTO_OP_ALLOC) {
		rc = proto_alloc_params_check(&r.alloc, &ctx->err);
		if (rc == 0)
			rc = dispatch_alloc(ctx, &r.alloc);
	} else {
		rc = proto_free_params_check(&r.free, &ctx->err);
		if (rc == 0)
			rc = dispatch_free(ctx, &r.free);
	}
	dispatch_reply_to(ctx->d, ctx->s, ctx, rc, r.id, proto_ops[r.op].name, r.op, t0, out);
	ctx->id = NULL; /* r's: gone with this frame */
	return true;
}
