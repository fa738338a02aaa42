/*
 * dispatch_internal.h - shared by the handler files of the dispatcher.
 */
#ifndef GPB_DISPATCH_INTERNAL_H
#define GPB_DISPATCH_INTERNAL_H

#include "dispatch.h"

#include <time.h>

/* What a handler works with and produces: a result object or an error. */
struct dispatch_ctx {
	struct dispatch *d;
	struct broker *b; /* d->b */
	struct session *s;
	const char *id; /* the request's id (a deferred reply needs it) */
	const cJSON *params;
	cJSON *result; /* set on success */
	cJSON *data;   /* optional error data */
	int fd;        /* descriptor to pass with the result */
	bool fd_owned; /* fd is the reply's: closed once sent (host memory) */
	bool deferred; /* a handler will answer later (keeping what it needs, e.g. the id) */
	bool quiet;    /* success goes unanswered (free with "reply": false) */
	struct proto_error err;
};

/* Handlers return 0 with ctx->result set, or a negative errno with ctx->err
 * set (-ENOMEM without ctx->err means host memory ran out). */
typedef int (*dispatch_fn)(struct dispatch_ctx *ctx);

/*
 * The deferred reply to a waiting alloc (a BROKER_EVENT_WAIT_DONE): the
 * grant when rc is 0, else the error alloc would have answered (-ETIMEDOUT
 * is the timeout error). Sent through the sender; if the reply cannot be
 * encoded the allocation is freed again, so the client is never charged
 * for memory it was not told about.
 */
void dispatch_wait_done(struct dispatch *d, const struct broker_wait *w, int rc,
                        const struct broker_grant *g);

/* Sends a frame to a session through the sender (frees it when none). */
void dispatch_send(struct dispatch *d, struct session *s, char *frame, size_t len, int fd);
/* Logs that an event for s was lost to host memory running out. */
void dispatch_event_dropped(const struct session *s, const char *name);

/* Creates ctx->result. */
cJSON *dispatch_result(struct dispatch_ctx *ctx);
/* Records a parameter problem and returns -EINVAL. */
int dispatch_param_error(struct dispatch_ctx *ctx, int rc, const char *key, const char *expected);

int dispatch_mem_info(struct dispatch_ctx *ctx);
int dispatch_stats(struct dispatch_ctx *ctx);
int dispatch_status(struct dispatch_ctx *ctx);
int dispatch_clients(struct dispatch_ctx *ctx);
int dispatch_devices(struct dispatch_ctx *ctx);
/* reload (admin): the server's reload hook. */
int dispatch_reload(struct dispatch_ctx *ctx);
/* evict (admin): ends another client's connection. */
int dispatch_evict(struct dispatch_ctx *ctx);
/* metrics: the Prometheus text (metrics.c). */
int dispatch_metrics(struct dispatch_ctx *ctx);
/* Walks every pool, session, allocation, wait and policy structure
 * (broker_check) and reports the first inconsistency (admin). */
int dispatch_selfcheck(struct dispatch_ctx *ctx);

/* dispatch_vram.c */
int dispatch_policy(struct dispatch_ctx *ctx);
int dispatch_set_proportion(struct dispatch_ctx *ctx);
int dispatch_set_auto(struct dispatch_ctx *ctx);
int dispatch_set_group(struct dispatch_ctx *ctx);
int dispatch_group_info(struct dispatch_ctx *ctx);
int dispatch_set_mode(struct dispatch_ctx *ctx);
int dispatch_set_limit(struct dispatch_ctx *ctx);
int dispatch_set_allocator(struct dispatch_ctx *ctx);
/* The instance in params "instance" that this session may change: its
 * own, or any for an administrator. -EINVAL, -ENOENT (also another user's:
 * answered alike), -EPERM (another connection's of the same user), with
 * ctx->err set. */
int dispatch_target_instance(struct dispatch_ctx *ctx, struct broker_instance **out);
/* The stream group called group in the namespace of params "uid" (default:
 * the caller's user), with its figures: 0 with *space and *gi set, or
 * -EINVAL / -ENOENT (no member, or a user the caller may not see: answered
 * alike) with ctx->err set. */
int dispatch_group_find(struct dispatch_ctx *ctx, const char *group, uint64_t *space,
                        struct policy_group_info *gi);
/* Gives back what a grant the client cannot be told of committed: the
 * allocation (or the attachment), and the slab when the grant handed it
 * over (a session with keep_slabs would keep it). */
void dispatch_grant_undo(struct broker *b, struct session *s, const struct broker_grant *g,
                         bool attach);
/* The result of an alloc: the grant (and the descriptor to pass). */
int dispatch_grant_result(struct dispatch_ctx *ctx, const struct broker_grant *g);
/* The same for an attachment (attach, open); when the reply cannot be
 * built the attachment is let go again, so the client never holds what it
 * was not told of. */
int dispatch_attach_result(struct dispatch_ctx *ctx, const struct broker_grant *g);
/* The reply to a host alloc or claim of h: id, type, size and its descriptor. */
int dispatch_host_result(struct dispatch_ctx *ctx, struct broker_host *h);

/* The "device" parameter, an index or a UUID string: 0 with *device set,
 * -ENOENT when absent (*device kept), or -EINVAL / -ENODEV (no such device)
 * with ctx->err set. */
int dispatch_get_device(struct dispatch_ctx *ctx, int64_t *device);
/* The device whose UUID is text (as dispatch_get_device reads it), or
 * -ENODEV. */
int dispatch_device_by_uuid(const struct broker *b, const char *text);
/* An id64 parameter, or -EINVAL with ctx->err set. */
int dispatch_get_id(struct dispatch_ctx *ctx, const char *key, uint64_t *id);
/* A uid parameter, the caller's own uid when absent; or -EINVAL with
 * ctx->err set. */
int dispatch_get_uid(struct dispatch_ctx *ctx, const char *key, uid_t *uid);
/* Sets ctx->err for a broker error about what ("allocation", ...); returns rc. */
int dispatch_broker_error(struct dispatch_ctx *ctx, int rc, const char *what);

/*
 * alloc of device memory, its parameters read: the broker's allocation,
 * a wait (ctx->deferred), or an error (ctx->err). 0 with *g filled unless
 * deferred.
 */
int dispatch_alloc_device(struct dispatch_ctx *ctx, uint64_t instance, uint64_t size,
                          uint64_t align, int64_t wait_ms, struct broker_grant *g);
/* The reply (or none) to a request a handler answered with rc, and its
 * metrics: the tail of dispatch_frame(). */
void dispatch_reply_to(struct dispatch *d, struct session *s, struct dispatch_ctx *ctx, int rc,
                       const char *id, const char *method, int op, const struct timespec *t0,
                       struct dispatch_reply *out);
/* dispatch_fast.c: alloc and free in their canonical form, decoded and
 * answered without the cJSON tree (proto/codec.h). False when the frame is
 * not one (nothing done: the general path takes it). */
bool dispatch_fast(struct dispatch_ctx *ctx, const char *frame, size_t len,
                   const struct timespec *t0, struct dispatch_reply *out);

/* dispatch_partition.c */
int dispatch_partition_create(struct dispatch_ctx *ctx);
int dispatch_partition_destroy(struct dispatch_ctx *ctx);
int dispatch_partitions(struct dispatch_ctx *ctx);
/* hello's optional "token": puts the session in its partition, or -EPERM
 * with ctx->err set (-32005, the same for every refusal). */
int dispatch_hello_token(struct dispatch_ctx *ctx);
/* dispatch_share.c */
int dispatch_export(struct dispatch_ctx *ctx);
int dispatch_unexport(struct dispatch_ctx *ctx);
int dispatch_open(struct dispatch_ctx *ctx);

/* dispatch_queue.c, dispatch_claim.c */
int dispatch_queue_request(struct dispatch_ctx *ctx);
int dispatch_allocate_queue(struct dispatch_ctx *ctx);
int dispatch_chunk_parameters(struct dispatch_ctx *ctx);
int dispatch_claim(struct dispatch_ctx *ctx);
int dispatch_free_label(struct dispatch_ctx *ctx);
int dispatch_invalidate_all(struct dispatch_ctx *ctx);
int dispatch_invalidate_done(struct dispatch_ctx *ctx);
int dispatch_goodbye(struct dispatch_ctx *ctx);
/* release: the client let go of a slab it kept empty (dispatch_claim.c). */
int dispatch_release(struct dispatch_ctx *ctx);

/* A register/set_proportion/set_auto refusal by the policy, explained with
 * the device's figures: -32602 on "proportion". */
int dispatch_policy_error(struct dispatch_ctx *ctx, const struct policy *p, int rc, int device,
                          double proportion);
/* Adds device i's capacity, limit (u64, null when none) and limit_fraction
 * (number, null when none) to o, as `policy` and `status` show them.
 * 0 or -ENOMEM. */
int dispatch_limit_json(const struct policy *p, cJSON *o, int i);
/* Adds "warnings" (an array of strings, only when there is one) for the
 * auto pool of device, and logs them. 0 or -ENOMEM. */
int dispatch_policy_warnings(struct dispatch_ctx *ctx, const struct policy *p, cJSON *result,
                             int device);

#endif
