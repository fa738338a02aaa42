/*
 * dispatch_internal.h - shared by the handler files of the dispatcher.
 */
#ifndef GPB_DISPATCH_INTERNAL_H
#define GPB_DISPATCH_INTERNAL_H

#include "dispatch.h"
#include "params.h"

#include <time.h>

/* What a grant in a reply is to the broker: how to give it back when the
 * reply cannot be made. */
enum dispatch_grant {
	DISPATCH_GRANT_NONE,
	DISPATCH_GRANT_ALLOC,  /* freed */
	DISPATCH_GRANT_ATTACH, /* detached */
	DISPATCH_GRANT_CLAIM,  /* unclaimed */
	DISPATCH_GRANT_LEASE,  /* returned */
};

/* What a handler works with and produces: a result (a grant, or an
 * object) or an error. */
struct dispatch_ctx {
	struct dispatch *d;
	struct broker *b; /* d->b */
	struct session *s;
	const char *id;                 /* the request's id (a deferred reply needs it) */
	struct broker_grant grant;      /* the result, with grant_kind */
	enum dispatch_grant grant_kind; /* NONE: the result is in result */
	cJSON *result;                  /* set on success */
	cJSON *data;                    /* optional error data */
	int fd;                         /* descriptor to pass with the result */
	bool fd_owned;                  /* fd is the reply's: closed once sent (host memory) */
	bool deferred; /* a handler will answer later (keeping what it needs, e.g. the id) */
	bool quiet;    /* success goes unanswered (free with "reply": false) */
	/* Held for recalls (dispatch_hold): a run of a held request again
	 * (retry), its last (final: answered whatever comes of it), and the
	 * handler's wish to be held for the recalls out. */
	bool retry, final, hold;
	struct proto_error err;
};

/*
 * A request refused for room while recalls (broker_recall_*) are out for
 * it: held when recalls > 0 and this is not its last run (its reply comes
 * later, when it is run again: BROKER_EVENT_HELD). Returns whether it was;
 * the handler then returns 0 having kept nothing.
 */
bool dispatch_hold(struct dispatch_ctx *ctx, unsigned recalls);
/* The same for memory refused on device to s's instance: recalls of
 * others' idle leases (size bytes) sent on the first run. */
bool dispatch_hold_for_room(struct dispatch_ctx *ctx, int device, uint64_t instance, uint64_t size);
/* Decodes and answers one frame through ctx (set up by the caller: d, b,
 * s, fd -1, and retry/final for a held request run again). */
void dispatch_run(struct dispatch_ctx *ctx, const char *frame, size_t len,
                  struct dispatch_reply *out);
/* A handler asked to hold the request of frame: the broker keeps it
 * (broker_held_add), or, when it cannot, it is answered now as on its
 * last run (out replaced). */
void dispatch_held_keep(struct dispatch_ctx *ctx, const char *frame, size_t len,
                        struct dispatch_reply *out);
/* Runs a held request again (the receiver of BROKER_EVENT_HELD). */
void dispatch_held_run(struct dispatch *d, struct broker_wait *w, bool final);

/*
 * The handlers: one per method, dispatch_<name>(ctx, params) with the
 * method's params struct (params.h), decoded and checked already. They
 * return 0 with a result set (ctx->result, or a grant), or a negative errno
 * with ctx->err set (-ENOMEM without ctx->err means host memory ran out).
 */
#define DISPATCH_HANDLER_DECL_(id, name, flags)                                                    \
	int dispatch_##name(struct dispatch_ctx *ctx, const struct proto_##name##_params *p);
PROTO_OPS(DISPATCH_HANDLER_DECL_)
#undef DISPATCH_HANDLER_DECL_

/*
 * The deferred reply to a waiting alloc (a BROKER_EVENT_WAIT_DONE): the
 * grant when rc is 0, else the error the refusal says. Sent through the
 * sender; if the reply cannot be encoded the allocation is freed again, so
 * the client is never charged for memory it was not told about.
 */
void dispatch_wait_done(struct dispatch *d, const struct broker_wait *w, int rc,
                        const struct broker_grant *g, const struct broker_refusal *why);
/* The error for memory the broker refused, worded from its verdict alone
 * (which limit, its figures): returns the errno to answer with. */
int dispatch_refusal(struct dispatch_ctx *ctx, const struct broker_refusal *why);

/* Sends a frame to a session through the sender (frees it when none). */
void dispatch_send(struct dispatch *d, struct session *s, char *frame, size_t len, int fd);
/* Logs that an event for s was lost to host memory running out. */
void dispatch_event_dropped(const struct session *s, const char *name);

/* Creates ctx->result. */
cJSON *dispatch_result(struct dispatch_ctx *ctx);
/* Records a parameter problem and returns -EINVAL. */
int dispatch_param_error(struct dispatch_ctx *ctx, int rc, const char *key, const char *expected);

/* The instance @id that this session may change: its own, or any for an
 * administrator. -ENOENT (also another user's: answered alike), -EPERM
 * (another connection's of the same user), with ctx->err set. */
int dispatch_target_instance(struct dispatch_ctx *ctx, uint64_t id, struct broker_instance **out);
/* The stream group called group in the namespace of user uid, with its
 * figures: 0 with *space and *gi set, or -ENOENT (no member, or a user the
 * caller may not see: answered alike) with ctx->err set. */
int dispatch_group_find(struct dispatch_ctx *ctx, const char *group, uid_t uid, uint64_t *space,
                        struct policy_group_info *gi);
/* A uid parameter, the caller's own when absent. */
#define DISPATCH_UID(ctx, p, member) ((p)->has_##member ? (uid_t)(p)->member : (ctx)->s->uid)
/* Gives back what a grant the client cannot be told of committed: the
 * allocation (the attachment, the lease: as kind says) and the slab when
 * the grant handed it over (a session with keep_slabs would keep it); a
 * claim is unclaimed again, for the client to ask again. */
void dispatch_grant_undo(struct broker *b, struct session *s, const struct broker_grant *g,
                         enum dispatch_grant kind);
/* A grant as the result: encoded when the reply is made (proto_grant_reply,
 * with its descriptor); when that fails it is given back as @kind says, so
 * the client never holds what it was not told of. */
void dispatch_grant_result(struct dispatch_ctx *ctx, const struct broker_grant *g,
                           enum dispatch_grant kind);
/* The refusal of memory type "managed" (alloc's, a queued request's):
 * unified memory cannot be shared between processes. -EOPNOTSUPP. */
int dispatch_managed_refused(struct dispatch_ctx *ctx);
/* The reply to a host alloc or claim of h: id, type, size and its descriptor. */
int dispatch_host_result(struct dispatch_ctx *ctx, struct broker_host *h);

/* The device a request names (by index or UUID): 0 with *device set, or
 * -ENODEV (no such device) with ctx->err set. */
int dispatch_device(struct dispatch_ctx *ctx, const struct proto_device *d, int *device);
/* The device whose UUID is text ("GPU-..." or "MIG-..." as nvidia-smi
 * prints it, either case, with or without the prefix), or -ENODEV. */
int dispatch_device_by_uuid(const struct broker *b, const char *text);
/* Sets ctx->err for a broker error about what ("allocation", ...); returns rc. */
int dispatch_broker_error(struct dispatch_ctx *ctx, int rc, const char *what);

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

/* hello's "token": puts the session in its partition, or -EPERM with
 * ctx->err set (-32005, the same for every refusal). */
int dispatch_hello_token(struct dispatch_ctx *ctx, const struct proto_token *token);

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
