/*
 * dispatch_recall.c - recall_done and trim: params in, the broker's call
 * (broker_recall.c), the result or the error out.
 */
#include "dispatch_internal.h"

#include <errno.h>

int dispatch_recall_done(struct dispatch_ctx *ctx, const struct proto_recall_done_params *p)
{
	(void)p;
	proto_error_set(&ctx->err, PROTO_E_NOT_FOUND, "not found: no such recall");
	return -ENOENT;
}

int dispatch_trim(struct dispatch_ctx *ctx, const struct proto_trim_params *p)
{
	(void)p;
	proto_error_set(&ctx->err, PROTO_E_NOT_SUPPORTED, "not supported yet");
	return -EOPNOTSUPP;
}
