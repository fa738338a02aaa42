/*
 * dispatch_recall.c - recall (issue 28) at the protocol's edge: requests
 * held while the recalls they caused are out, recall_done and trim.
 *
 * A request refused for room (alloc without wait_ms, lease,
 * partition_create, allocate_queue) while recalls could make that room is
 * held: the broker keeps its frame (broker_held_add) and has it run again
 * here whenever room may have come, then a last time, answered whatever
 * comes of it, once no recall it waits for is out or the recall timeout
 * has passed. Running the frame again, rather than keeping a decoded
 * request, keeps one way through for every method (dispatch_run), and its
 * handler decides again from the broker as it is then.
 */
#include "dispatch_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

bool dispatch_hold(struct dispatch_ctx *ctx, unsigned recalls)
{
	if (!recalls || ctx->final)
		return false;
	ctx->hold = true;
	ctx->deferred = true;
	return true;
}

bool dispatch_hold_for_room(struct dispatch_ctx *ctx, int device, uint64_t instance, uint64_t size)
{
	if (ctx->final || device < 0)
		return false;
	/* A run again asks again too: holders that gave back what they were
	 * asked may have more (several requests may have waited on the same
	 * recalls); one that gave back less than asked had nothing more
	 * wholly free, and is not asked again for a moment (broker_recall.c). */
	unsigned n =
	    broker_recall_room(ctx->b, ctx->s->part, device, size,
	                       broker_instance_find(ctx->s, instance), PROTO_V_REASON_MEMORY, true);
	return dispatch_hold(ctx, n);
}

void dispatch_held_keep(struct dispatch_ctx *ctx, const char *frame, size_t len,
                        struct dispatch_reply *out)
{
	if (broker_held_add(ctx->b, ctx->s, frame, len) == 0)
		return;
	/* Past max_inflight, or out of memory: answered now, as it would
	 * have been without recalls. */
	struct dispatch_ctx last = {
	    .d = ctx->d, .b = ctx->b, .s = ctx->s, .fd = -1, .retry = true, .final = true};
	dispatch_run(&last, frame, len, out);
}

void dispatch_held_run(struct dispatch *d, struct broker_wait *w, bool final)
{
	struct dispatch_ctx ctx = {
	    .d = d, .b = d->b, .s = w->s, .fd = -1, .retry = true, .final = final};
	struct dispatch_reply out;
	dispatch_run(&ctx, w->frame, w->frame_len, &out);
	if (ctx.hold)
		return; /* still short, and recalls are still out for it */
	w->answered = true;
	if (out.deferred)
		return;
	int fd = out.fd;
	dispatch_send(d, w->s, out.frame, out.len, fd);
	if (out.fd_owned && fd >= 0)
		close(fd);
}

int dispatch_recall_done(struct dispatch_ctx *ctx, const struct proto_recall_done_params *p)
{
	int rc = broker_recall_done(ctx->b, ctx->s, p->epoch, p->bytes);
	if (rc == -ERANGE)
		return dispatch_param_error(ctx, rc, PROTO_F_BYTES,
		                            "at most the bytes the recall asked for");
	if (rc == -ENOENT) {
		/* Never sent, another connection's, answered or timed out:
		 * answered alike, so a client learns nothing of others. */
		proto_error_set(&ctx->err, PROTO_E_NOT_FOUND, "no such recall");
		return rc;
	}
	if (rc < 0)
		return dispatch_broker_error(ctx, rc, PROTO_F_EPOCH);
	return dispatch_result(ctx) ? 0 : -ENOMEM;
}

int dispatch_trim(struct dispatch_ctx *ctx, const struct proto_trim_params *p)
{
	uint64_t recalls, bytes;
	int rc = broker_trim(ctx->b, p->has_session ? p->session : 0, &recalls, &bytes);
	if (rc == -ENOENT) {
		proto_error_set(&ctx->err, PROTO_E_NOT_FOUND, "no such session");
		return rc;
	}
	cJSON *r = dispatch_result(ctx);
	if (!r || proto_add_u64(r, PROTO_F_RECALLS, recalls) ||
	    proto_add_u64(r, PROTO_F_BYTES, bytes))
		return -ENOMEM;
	return 0;
}
