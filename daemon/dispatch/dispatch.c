/*
 * dispatch.c - the frame's way through: the request decoded once into its
 * params struct (proto/params.h), one handler per method (the connection,
 * instance and memory ones here; the others in the dispatch_*.c files),
 * and the reply: a result object, the one grant encoder's frame, or the
 * error a broker refusal or a bad parameter words.
 */
#include "dispatch_internal.h"

#include "codec.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "log.h"

cJSON *dispatch_result(struct dispatch_ctx *ctx)
{
	ctx->result = cJSON_CreateObject();
	return ctx->result;
}

int dispatch_param_error(struct dispatch_ctx *ctx, int rc, const char *key, const char *expected)
{
	proto_error_field(&ctx->err, rc, key, expected);
	return -EINVAL;
}

/* Maps a broker errno to a protocol error with a message. */
int dispatch_broker_error(struct dispatch_ctx *ctx, int rc, const char *what)
{
	switch (rc) {
	case -ENOENT:
		proto_error_set(&ctx->err, PROTO_E_NOT_FOUND, "no such %s", what);
		break;
	case -ENODEV:
		proto_error_set(&ctx->err, PROTO_E_PARAMS, "invalid params: no such device");
		snprintf(ctx->err.field, sizeof(ctx->err.field), PROTO_F_DEVICE);
		break;
	case -EMFILE: {
		bool instances = strcmp(what, PROTO_F_INSTANCE) == 0;
		unsigned value = instances ? broker_get_limits(ctx->b)->max_instances
		                           : broker_get_limits(ctx->b)->max_allocations;
		const char *limit = instances ? PROTO_F_MAX_INSTANCES : PROTO_F_MAX_ALLOCATIONS;
		proto_error_set(&ctx->err, PROTO_E_LIMIT, "limit reached: %s is %u", limit, value);
		ctx->data = cJSON_CreateObject();
		if (ctx->data) {
			cJSON_AddStringToObject(ctx->data, PROTO_F_LIMIT, limit);
			cJSON_AddNumberToObject(ctx->data, PROTO_F_VALUE, value);
		}
		break;
	}
	case -ENFILE: {
		unsigned share = broker_files_share();
		proto_error_set(&ctx->err, PROTO_E_LIMIT,
		                "limit reached: too many open files for this user (%s %u: its "
		                "connections and slabs' descriptors, half of the daemon's "
		                "RLIMIT_NOFILE)",
		                PROTO_V_LIMIT_FILES_PER_UID, share);
		ctx->data = cJSON_CreateObject();
		if (ctx->data) {
			cJSON_AddStringToObject(ctx->data, PROTO_F_LIMIT,
			                        PROTO_V_LIMIT_FILES_PER_UID);
			cJSON_AddNumberToObject(ctx->data, PROTO_F_VALUE, share);
		}
		break;
	}
	case -ESHUTDOWN:
		proto_error_set(&ctx->err, PROTO_E_SHUTTING_DOWN, "the daemon is shutting down");
		break;
	case -EBUSY:
		proto_error_set(&ctx->err, PROTO_E_PARAMS, "invalid params: %s still in use", what);
		snprintf(ctx->err.field, sizeof(ctx->err.field), "%s", what);
		break;
	case -EEXIST:
		proto_error_set(&ctx->err, PROTO_E_PARAMS, "invalid params: %s already attached",
		                what);
		snprintf(ctx->err.field, sizeof(ctx->err.field), PROTO_F_ID);
		break;
	case -EIO: {
		/* The backend names what failed (a CUresult for cuda). */
		const char *name =
		    broker_backend_error(ctx->b)[0] ? broker_backend_error(ctx->b) : "EIO";
		proto_error_set(&ctx->err, PROTO_E_BACKEND,
		                "backend error: the %s backend could not provide memory: %s (see "
		                "the daemon's log)",
		                broker_backend_name(ctx->b), name);
		ctx->data = cJSON_CreateObject();
		if (ctx->data)
			cJSON_AddStringToObject(ctx->data, PROTO_F_BACKEND_ERROR, name);
		break;
	}
	default:
		proto_error_set(&ctx->err, PROTO_E_INTERNAL, "internal error: %s", strerror(-rc));
		break;
	}
	return rc;
}

int dispatch_hello(struct dispatch_ctx *ctx, const struct proto_hello_params *p)
{
	if (!p->versions) {
		proto_error_set(&ctx->err, PROTO_E_VERSION,
		                "no common protocol version (this daemon speaks %d)",
		                PROTO_VERSION);
		ctx->data = cJSON_CreateObject();
		cJSON *sup = cJSON_CreateArray();
		if (ctx->data && sup && cJSON_AddItemToObject(ctx->data, PROTO_F_SUPPORTED, sup))
			cJSON_AddItemToArray(sup, cJSON_CreateNumber(PROTO_VERSION));
		else
			cJSON_Delete(sup);
		return -EPROTO;
	}
	bool keep = p->has_keep_slabs && p->keep_slabs;
	int rc = p->has_token ? dispatch_hello_token(ctx, &p->token) : 0;
	if (rc < 0)
		return rc;
	struct session *s = ctx->s;
	broker_session_hello(s, p->has_client ? p->client : NULL, keep);
	const struct broker_limits *l = broker_get_limits(ctx->b);
	cJSON *r = dispatch_result(ctx), *lim;
	if (!r || proto_add_number(r, PROTO_F_VERSION, PROTO_VERSION) ||
	    proto_add_string(r, PROTO_F_SERVER, PROTO_V_SERVER) ||
	    proto_add_string(r, PROTO_F_SERVER_VERSION, GPB_VERSION) ||
	    proto_add_string(r, PROTO_F_BACKEND, broker_backend_name(ctx->b)) ||
	    proto_add_id64(r, PROTO_F_SESSION, s->id) || proto_add_number(r, PROTO_F_UID, s->uid) ||
	    (s->part && proto_add_string(r, PROTO_F_PARTITION, s->part->name)) ||
	    (keep && !cJSON_AddTrueToObject(r, PROTO_F_KEEP_SLABS)) ||
	    !(lim = cJSON_AddObjectToObject(r, PROTO_F_LIMITS)) ||
	    proto_add_number(lim, PROTO_F_MAX_FRAME, PROTO_MAX_FRAME) ||
	    proto_add_number(lim, PROTO_F_MAX_REPLY, PROTO_MAX_REPLY) ||
	    proto_add_number(lim, PROTO_F_MAX_DEPTH, PROTO_MAX_DEPTH) ||
	    proto_add_number(lim, PROTO_F_MAX_MEMBERS, PROTO_MAX_KEYS) ||
	    proto_add_number(lim, PROTO_F_MAX_ID, PROTO_MAX_ID) ||
	    proto_add_number(lim, PROTO_F_MAX_NAME, PROTO_MAX_NAME) ||
	    proto_add_number(lim, PROTO_F_MAX_INSTANCES, l->max_instances) ||
	    proto_add_number(lim, PROTO_F_MAX_ALLOCATIONS, l->max_allocations) ||
	    proto_add_number(lim, PROTO_F_MAX_INFLIGHT, l->max_inflight) ||
	    proto_add_number(lim, PROTO_F_WRITE_HIGH_WATER, (double)l->write_high_water) ||
	    proto_add_u64(lim, PROTO_F_SLAB_SIZE, l->slab_size) ||
	    proto_add_number(lim, PROTO_F_HELLO_TIMEOUT_MS, l->hello_timeout_ms))
		return -ENOMEM;
	return 0;
}

/* The UUID without nvidia-smi's "GPU-" or "MIG-" (a MIG instance). */
static const char *uuid_bare(const char *s)
{
	return strncasecmp(s, "GPU-", 4) == 0 || strncasecmp(s, "MIG-", 4) == 0 ? s + 4 : s;
}

/* True when a device's UUID is text: "GPU-xxxxxxxx-..." (or "MIG-..." for a
 * MIG instance) as nvidia-smi prints it, in either case, with or without
 * the prefix. */
static bool uuid_matches(const char *uuid, const char *text)
{
	text = uuid_bare(text);
	return *text && strcasecmp(uuid_bare(uuid), text) == 0;
}

int dispatch_device_by_uuid(const struct broker *b, const char *text)
{
	for (int i = 0; i < broker_device_count(b); i++) {
		if (uuid_matches(broker_device_info(b, i)->uuid, text))
			return i;
	}
	return -ENODEV;
}

int dispatch_device(struct dispatch_ctx *ctx, const struct proto_device *d, int *device)
{
	int i = d->uuid ? dispatch_device_by_uuid(ctx->b, d->uuid) : d->index;
	if (i >= 0 && i < broker_device_count(ctx->b)) {
		*device = i;
		return 0;
	}
	/* An unknown UUID or index, alike. */
	proto_error_set(&ctx->err, PROTO_E_PARAMS, "invalid params: no such device");
	snprintf(ctx->err.field, sizeof(ctx->err.field), PROTO_F_DEVICE);
	return -ENODEV;
}

int dispatch_register_instance(struct dispatch_ctx *ctx,
                               const struct proto_register_instance_params *p)
{
	int device = 0;
	if (p->has_device && dispatch_device(ctx, &p->device, &device) < 0)
		return -ENODEV;
	double proportion = p->has_proportion ? p->proportion : 0;
	struct broker_instance *inst;
	int rc = broker_register(ctx->b, ctx->s, p->name, device, proportion,
	                         p->has_group ? p->group : NULL, &inst);
	if (rc == -EINVAL || rc == -ENOSPC || rc == -EUSERS)
		return dispatch_policy_error(ctx, broker_policy_const(ctx->b, ctx->s), rc, device,
		                             proportion);
	if (rc < 0)
		return dispatch_broker_error(ctx, rc, PROTO_F_INSTANCE);
	cJSON *r = dispatch_result(ctx);
	if (!r || proto_add_id64(r, PROTO_F_INSTANCE, inst->id) ||
	    proto_add_number(r, PROTO_F_DEVICE, inst->device) ||
	    proto_add_u64(r, PROTO_F_CAP, inst->pol.cap) ||
	    proto_add_number(r, PROTO_F_SHARE, inst->pol.share) ||
	    dispatch_policy_warnings(ctx, broker_policy_const(ctx->b, ctx->s), r, inst->device))
		return -ENOMEM;
	return 0;
}

int dispatch_unregister(struct dispatch_ctx *ctx, const struct proto_unregister_params *p)
{
	int rc = broker_unregister(ctx->b, ctx->s, p->instance);
	if (rc < 0)
		return dispatch_broker_error(ctx, rc, PROTO_F_INSTANCE);
	return dispatch_result(ctx) ? 0 : -ENOMEM;
}

void dispatch_grant_undo(struct broker *b, struct session *s, const struct broker_grant *g,
                         enum dispatch_grant kind)
{
	if (kind == DISPATCH_GRANT_CLAIM) {
		/* Unclaimed again, it may ask again (or free it by id or
		 * label), rather than hold what it never got. */
		broker_unclaim(b, s, g);
		return;
	}
	if (kind == DISPATCH_GRANT_ATTACH)
		broker_detach(b, s, g->id);
	else if (kind == DISPATCH_GRANT_LEASE)
		broker_lease_return(b, s, g->id, NULL);
	else
		broker_free(b, s, g->id);
	/* A slab handed over by this grant is not the client's either: a
	 * session that keeps emptied slabs would keep it. */
	if (g->handle)
		broker_release(b, s, g->slab_id);
}

void dispatch_grant_result(struct dispatch_ctx *ctx, const struct broker_grant *g,
                           enum dispatch_grant kind)
{
	ctx->grant = *g;
	ctx->grant_kind = kind;
}

/* The grant's reply frame, and the descriptor that goes with it; NULL when
 * host memory ran out (the grant is then given back: the client cannot be
 * told of it). */
static char *grant_frame(struct dispatch_ctx *ctx, const char *id, size_t *len)
{
	const struct broker_grant *g = &ctx->grant;
	struct proto_grant pg = {
	    .id = g->id,
	    .device = g->device,
	    .slab = g->slab_id,
	    .slab_size = g->slab_size,
	    .offset = g->offset,
	    .size = g->size,
	    .handle = g->handle,
	    /* With the handle, the device's UUID: the client finds the device
	     * by it (its CUDA ordinals need not be the daemon's). */
	    .device_uuid = g->handle ? broker_device_info(ctx->b, g->device)->uuid : NULL,
	    .fd = g->handle && g->fd >= 0,
	    .pool = g->pool,
	    .pool_id = g->pool_id,
	    .vmm = g->vmm,
	    .keep = g->keep,
	};
	/* A claim says which array it is: the library closes a slab before
	 * free_label lets the daemon free it, so it must know which of its
	 * allocations a label covers. */
	if (ctx->grant_kind == DISPATCH_GRANT_CLAIM)
		broker_allocation_label(ctx->b, ctx->s, g->id, &pg.label, &pg.instance);
	size_t room = proto_grant_reply_room(id, &pg);
	char *frame = malloc(room);
	if (frame && (*len = proto_grant_reply(frame, room, id, &pg)) > 0) {
		ctx->fd = pg.fd ? g->fd : -1;
		return frame;
	}
	free(frame);
	dispatch_grant_undo(ctx->b, ctx->s, g, ctx->grant_kind);
	ctx->grant_kind = DISPATCH_GRANT_NONE;
	return NULL;
}

/*
 * The error for an allocation the broker refused, from its verdict alone:
 * which limit, and the figures it gave. Returns the errno the handler
 * answers (-ENOMEM without ctx->err when only the daemon's own memory is
 * short).
 */
int dispatch_refusal(struct dispatch_ctx *ctx, const struct broker_refusal *why)
{
	const char *limit = NULL;
	switch (why->limit) {
	case BROKER_LIMIT_SIZE:
		return dispatch_param_error(ctx, -ERANGE, PROTO_F_SIZE,
		                            why->device < 0 ? "too large to round up to pages"
		                                            : "too large to round up");
	case BROKER_LIMIT_DEVICE: {
		char piece[64] = "";
		if (why->largest < why->free)
			snprintf(piece, sizeof(piece), ", at most %llu in one allocation",
			         (unsigned long long)why->largest);
		proto_error_set(&ctx->err, PROTO_E_NO_MEMORY,
		                "out of memory: %llu bytes requested on device %d, %llu free%s",
		                (unsigned long long)why->requested, why->device,
		                (unsigned long long)why->free, piece);
		ctx->data = cJSON_CreateObject();
		if (ctx->data) {
			proto_add_u64(ctx->data, PROTO_F_REQUESTED, why->requested);
			proto_add_u64(ctx->data, PROTO_F_DEVICE_FREE, why->free);
			proto_add_u64(ctx->data, PROTO_F_LARGEST_FREE, why->largest);
		}
		return why->rc;
	}
	case BROKER_LIMIT_HOST:
		proto_error_set(&ctx->err, PROTO_E_NO_MEMORY,
		                "out of memory: %llu bytes of host memory requested, %llu left "
		                "under max_host_memory",
		                (unsigned long long)why->requested, (unsigned long long)why->free);
		ctx->data = cJSON_CreateObject();
		if (ctx->data)
			proto_add_u64(ctx->data, PROTO_F_REQUESTED, why->requested);
		return why->rc;
	case BROKER_LIMIT_USER:
		proto_error_set(
		    &ctx->err, PROTO_E_QUOTA,
		    "quota exceeded: user %u may hold %llu bytes per device, holds %llu, "
		    "asked for %llu",
		    (unsigned)why->uid, (unsigned long long)why->cap, (unsigned long long)why->used,
		    (unsigned long long)why->requested);
		ctx->data = cJSON_CreateObject();
		if (ctx->data) {
			proto_add_u64(ctx->data, PROTO_F_CAP, why->cap);
			proto_add_u64(ctx->data, PROTO_F_USED, why->used);
			proto_add_u64(ctx->data, PROTO_F_REQUESTED, why->requested);
			proto_add_number(ctx->data, PROTO_F_UID, why->uid);
		}
		return why->rc;
	case BROKER_LIMIT_INSTANCE:
		proto_error_set(&ctx->err, PROTO_E_QUOTA,
		                "quota exceeded: instance %016llx may hold %llu bytes, holds %llu, "
		                "asked for %llu",
		                (unsigned long long)why->instance, (unsigned long long)why->cap,
		                (unsigned long long)why->used, (unsigned long long)why->requested);
		ctx->data = cJSON_CreateObject();
		if (ctx->data) {
			proto_add_u64(ctx->data, PROTO_F_CAP, why->cap);
			proto_add_u64(ctx->data, PROTO_F_USED, why->used);
			proto_add_u64(ctx->data, PROTO_F_REQUESTED, why->requested);
		}
		return why->rc;
	case BROKER_LIMIT_TIMEOUT:
		proto_error_set(
		    &ctx->err, PROTO_E_TIMEOUT, "timeout: no room for %llu bytes within %llu ms",
		    (unsigned long long)why->requested, (unsigned long long)why->waited_ms);
		ctx->data = cJSON_CreateObject();
		if (ctx->data) {
			proto_add_u64(ctx->data, PROTO_F_REQUESTED, why->requested);
			proto_add_number(ctx->data, PROTO_F_WAITED_MS, (double)why->waited_ms);
		}
		return why->rc;
	case BROKER_LIMIT_INFLIGHT:
		proto_error_set(&ctx->err, PROTO_E_LIMIT,
		                "limit reached: max_inflight is %llu waiting requests",
		                (unsigned long long)why->value);
		limit = PROTO_F_MAX_INFLIGHT;
		break;
	case BROKER_LIMIT_ALLOCATIONS:
		proto_error_set(&ctx->err, PROTO_E_LIMIT, "limit reached: %s is %llu",
		                PROTO_F_MAX_ALLOCATIONS, (unsigned long long)why->value);
		limit = PROTO_F_MAX_ALLOCATIONS;
		break;
	case BROKER_LIMIT_LEASES:
		proto_error_set(&ctx->err, PROTO_E_LIMIT,
		                "limit reached: %s is %llu leases of one instance (return one, or "
		                "ask with alloc)",
		                PROTO_V_LIMIT_MAX_LEASES, (unsigned long long)why->value);
		limit = PROTO_V_LIMIT_MAX_LEASES;
		break;
	case BROKER_LIMIT_SLAB: {
		char expected[96];
		snprintf(expected, sizeof(expected),
		         "at most the slab size (%llu bytes): larger requests are allocations",
		         (unsigned long long)why->value);
		return dispatch_param_error(ctx, -ERANGE, PROTO_F_SIZE, expected);
	}
	case BROKER_LIMIT_ALLOCATOR:
		proto_error_set(&ctx->err, PROTO_E_NOT_SUPPORTED,
		                "not supported: leases need the %s allocator (it is %s): make one "
		                "request per allocation",
		                broker_allocator_name(BROKER_ALLOCATOR_POOL),
		                broker_allocator_name((enum broker_allocator)why->value));
		return why->rc;
	case BROKER_LIMIT_FILES:
		proto_error_set(&ctx->err, PROTO_E_LIMIT,
		                "limit reached: too many open files for this user (%s %llu: its "
		                "connections and slabs' descriptors, half of the daemon's "
		                "RLIMIT_NOFILE)",
		                PROTO_V_LIMIT_FILES_PER_UID, (unsigned long long)why->value);
		limit = PROTO_V_LIMIT_FILES_PER_UID;
		break;
	case BROKER_LIMIT_NONE:
		return why->rc == -EAGAIN ? -ENOMEM
		                          : dispatch_broker_error(ctx, why->rc, PROTO_F_INSTANCE);
	}
	ctx->data = cJSON_CreateObject();
	if (ctx->data) {
		proto_add_string(ctx->data, PROTO_F_LIMIT, limit);
		proto_add_number(ctx->data, PROTO_F_VALUE, (double)why->value);
	}
	return why->rc;
}

/* alloc of "pinned" or "mapped" host memory: its own memfd, passed. */
static int alloc_host(struct dispatch_ctx *ctx, uint64_t instance, uint64_t size, bool mapped)
{
	struct broker_host *h;
	struct broker_refusal why;
	int rc = broker_host_alloc(ctx->b, ctx->s, instance, size, mapped, &h, &why);
	return rc < 0 ? dispatch_refusal(ctx, &why) : dispatch_host_result(ctx, h);
}

int dispatch_host_result(struct dispatch_ctx *ctx, struct broker_host *h)
{
	cJSON *r = dispatch_result(ctx);
	if (!r || proto_add_id64(r, PROTO_F_ID, h->id) ||
	    !cJSON_AddStringToObject(r, PROTO_F_TYPE,
	                             h->mapped ? PROTO_V_MEM_MAPPED : PROTO_V_MEM_PINNED) ||
	    proto_add_u64(r, PROTO_F_SIZE, h->size) || !cJSON_AddTrueToObject(r, PROTO_F_FD))
		return -ENOMEM;
	/* The reply's own: the daemon keeps no descriptor of host memory. */
	ctx->fd = broker_host_take_fd(h);
	ctx->fd_owned = true;
	return 0;
}

int dispatch_managed_refused(struct dispatch_ctx *ctx)
{
	/* Unified memory cannot be shared across processes. */
	proto_error_set(&ctx->err, PROTO_E_NOT_SUPPORTED,
	                "memory type 'managed' is not supported: managed memory cannot be shared "
	                "between processes");
	return -EOPNOTSUPP;
}

int dispatch_alloc(struct dispatch_ctx *ctx, const struct proto_alloc_params *p)
{
	struct broker_grant g;
	struct broker_refusal why;
	int type = p->has_type ? p->type : PROTO_MEMORY_DEVICE;
	if (type == PROTO_MEMORY_MANAGED)
		return dispatch_managed_refused(ctx);
	if (type != PROTO_MEMORY_DEVICE)
		return alloc_host(ctx, p->instance, p->size, type == PROTO_MEMORY_MAPPED);
	int rc = broker_alloc_admit(ctx->b, ctx->s, ctx->id, p->instance, p->size,
	                            p->has_alignment ? p->alignment : PROTO_GRANULE,
	                            p->has_wait_ms ? (uint64_t)p->wait_ms : 0, &g, &why);
	if (rc == BROKER_WAITING) {
		ctx->deferred = true; /* its reply is dispatch_wait_done()'s */
		return 0;
	}
	/* Short of room while others' idle leases could make it: held for
	 * their recalls (with wait_ms the wait sent them). */
	if (rc == -ENOMEM && why.limit == BROKER_LIMIT_DEVICE && !(p->has_wait_ms && p->wait_ms) &&
	    dispatch_hold_for_room(ctx, why.device, p->instance, p->size))
		return 0;
	if (rc < 0)
		return dispatch_refusal(ctx, &why);
	dispatch_grant_result(ctx, &g, DISPATCH_GRANT_ALLOC);
	return 0;
}

/* The error's data becomes {key: value} alone (what a handler put there
 * goes): which field was wrong, or which method is unknown. Out of memory
 * the error goes without data. */
static void dispatch_error_data(struct dispatch_ctx *ctx, const char *key, const char *value)
{
	cJSON_Delete(ctx->data);
	ctx->data = cJSON_CreateObject();
	if (ctx->data && !cJSON_AddStringToObject(ctx->data, key, value)) {
		cJSON_Delete(ctx->data);
		ctx->data = NULL;
	}
}

void dispatch_wait_done(struct dispatch *d, const struct broker_wait *w, int rc,
                        const struct broker_grant *g, const struct broker_refusal *why)
{
	struct broker *b = d->b;
	struct dispatch_ctx ctx = {.d = d, .b = b, .s = w->s, .fd = -1, .id = w->id};
	size_t len = 0;
	char *frame = NULL;
	if (rc == 0) {
		dispatch_grant_result(&ctx, g, DISPATCH_GRANT_ALLOC);
		frame = grant_frame(&ctx, w->id, &len);
		if (frame) {
			dispatch_send(d, w->s, frame, len, ctx.fd);
			return;
		}
	} else {
		dispatch_refusal(&ctx, why);
	}
	if (!ctx.err.code)
		proto_error_set(&ctx.err, PROTO_E_INTERNAL, "internal error: out of memory");
	if (ctx.err.field[0])
		dispatch_error_data(&ctx, PROTO_F_FIELD, ctx.err.field);
	frame = proto_encode_error(w->id, ctx.err.code, ctx.err.message, ctx.data, &len);
	dispatch_send(d, w->s, frame, len, -1);
}

int dispatch_free(struct dispatch_ctx *ctx, const struct proto_free_params *p)
{
	int rc = broker_free(ctx->b, ctx->s, p->id);
	if (rc < 0)
		return dispatch_broker_error(ctx, rc, "allocation");
	/* A free that does not wait for its reply gets one only when it
	 * fails: the client learns of that from the error's id. */
	ctx->quiet = p->has_reply && !p->reply;
	return ctx->quiet || dispatch_result(ctx) ? 0 : -ENOMEM;
}

int dispatch_attach(struct dispatch_ctx *ctx, const struct proto_attach_params *p)
{
	struct broker_grant g;
	int rc = broker_attach(ctx->b, ctx->s, p->id, &g);
	if (rc == -EAGAIN)
		return -ENOMEM;
	if (rc < 0)
		return dispatch_broker_error(ctx, rc, "allocation");
	dispatch_grant_result(ctx, &g, DISPATCH_GRANT_ATTACH);
	return 0;
}

int dispatch_detach(struct dispatch_ctx *ctx, const struct proto_detach_params *p)
{
	int rc = broker_detach(ctx->b, ctx->s, p->id);
	if (rc < 0)
		return dispatch_broker_error(ctx, rc, "attachment");
	return dispatch_result(ctx) ? 0 : -ENOMEM;
}

/* One handler per method, each taking its own params struct. */
typedef int (*dispatch_fn)(struct dispatch_ctx *ctx, const union proto_params *p);
#define DISPATCH_CALL_(id, name, flags)                                                            \
	static int call_##name(struct dispatch_ctx *ctx, const union proto_params *p)              \
	{                                                                                          \
		return dispatch_##name(ctx, &p->name);                                             \
	}
PROTO_OPS(DISPATCH_CALL_)
#undef DISPATCH_CALL_

static const dispatch_fn dispatch_handlers[PROTO_OP_COUNT] = {
#define DISPATCH_HANDLER_(id, name, flags) [PROTO_OP_##id] = call_##name,
    PROTO_OPS(DISPATCH_HANDLER_)
#undef DISPATCH_HANDLER_
};

void dispatch_error(int code, const char *message, struct dispatch_reply *out)
{
	out->fd = -1;
	out->fd_owned = false;
	out->deferred = false;
	out->frame = proto_encode_error(NULL, code, message, NULL, &out->len);
}

/*
 * The reply to a request a handler answered with rc (ctx filled), or none
 * (deferred, or a quiet free), and its metrics. @id and @method as the
 * request gave them (NULL when unreadable), @op its operation or -1.
 */
void dispatch_reply_to(struct dispatch *d, struct session *s, struct dispatch_ctx *ctx, int rc,
                       const char *id, const char *method, int op, const struct timespec *t0,
                       struct dispatch_reply *out)
{
	struct timespec t1;
	if (rc == -ENOMEM && !ctx->err.code)
		proto_error_set(&ctx->err, PROTO_E_INTERNAL, "internal error: out of memory");
	out->fd = -1;
	out->fd_owned = false;
	out->deferred = false;
	if (rc == 0 && (ctx->deferred || ctx->quiet)) {
		out->frame = NULL;
		out->deferred = true;
		cJSON_Delete(ctx->result);
		cJSON_Delete(ctx->data);
	} else if (rc == 0 && ctx->grant_kind != DISPATCH_GRANT_NONE) {
		out->frame = grant_frame(ctx, id, &out->len);
		if (!out->frame) {
			rc = -ENOMEM;
			proto_error_set(&ctx->err, PROTO_E_INTERNAL,
			                "internal error: out of memory");
			out->frame = proto_encode_error(id, ctx->err.code, ctx->err.message, NULL,
			                                &out->len);
		}
		out->fd = out->frame ? ctx->fd : -1;
		cJSON_Delete(ctx->result);
		cJSON_Delete(ctx->data);
	} else if (rc == 0) {
		out->frame = proto_encode_result(id, ctx->result, &out->len);
		out->fd = out->frame ? ctx->fd : -1;
		out->fd_owned = out->frame && ctx->fd_owned;
		cJSON_Delete(ctx->data);
	} else {
		cJSON_Delete(ctx->result);
		if (ctx->err.field[0])
			dispatch_error_data(ctx, PROTO_F_FIELD, ctx->err.field);
		else if (ctx->err.code == PROTO_E_METHOD && method &&
		         strlen(method) <= PROTO_MAX_NAME)
			dispatch_error_data(ctx, PROTO_F_METHOD, method);
		log_debug("session %llu: %s: %s", (unsigned long long)s->id, method ? method : "?",
		          ctx->err.message);
		out->frame =
		    proto_encode_error(id, ctx->err.code, ctx->err.message, ctx->data, &out->len);
	}
	/* A descriptor of the reply's own that does not go out is closed here
	 * (the client was not told of it). */
	if (ctx->fd_owned && ctx->fd >= 0 && !out->fd_owned)
		close(ctx->fd);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (s) /* clients' idle_s */
		s->last_request = t1.tv_sec;
	/* A held request was counted when it came (deferred), as a wait is. */
	if (ctx->retry)
		return;
	metrics_record(
	    &d->metrics, op, rc < 0 ? ctx->err.code : ctx->deferred,
	    (uint64_t)((t1.tv_sec - t0->tv_sec) * 1000000000LL + (t1.tv_nsec - t0->tv_nsec)));
}

void dispatch_run(struct dispatch_ctx *ctx, const char *frame, size_t len,
                  struct dispatch_reply *out)
{
	struct session *s = ctx->s;
	struct proto_request req;
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	/* alloc and free in their canonical form: no cJSON tree either way
	 * (a held request run again takes the general way: it is rare). */
	if (s->hello && !ctx->retry && dispatch_fast(ctx, frame, len, &t0, out))
		return;
	int rc = proto_request_parse(frame, len, &req, &ctx->err);
	if (rc == 0) {
		ctx->id = req.id;
		bool early = proto_ops[req.op].flags & PROTO_OPF_BEFORE_HELLO;
		if (!s->hello && !early) {
			proto_error_set(&ctx->err, PROTO_E_STATE, "bad state: send hello first");
			rc = -EPROTO;
		} else if (s->hello && early) {
			proto_error_set(&ctx->err, PROTO_E_STATE, "bad state: hello already done");
			rc = -EPROTO;
		} else if ((proto_ops[req.op].flags & PROTO_OPF_ADMIN) && !s->admin) {
			proto_error_set(&ctx->err, PROTO_E_PERMISSION,
			                "permission denied: '%s' is for root and the admin group",
			                req.method);
			rc = -EPERM;
		} else {
			/* Large (a queue of requests): only the method's member is
			 * written. */
			union proto_params params;
			rc = proto_params_decode(req.op, req.params, &params, &ctx->err);
			if (rc == 0)
				rc = dispatch_handlers[req.op](ctx, &params);
			/* A partition's token is a secret: not left on the stack. */
			if (req.op == PROTO_OP_HELLO)
				explicit_bzero(&params.hello.token, sizeof(params.hello.token));
		}
	}
	dispatch_reply_to(ctx->d, s, ctx, rc, req.id, req.method, req.op, &t0, out);
	ctx->id = NULL; /* req's: gone with it */
	proto_request_finish(&req);
}

void dispatch_frame(struct dispatch *d, struct session *s, const char *frame, size_t len,
                    struct dispatch_reply *out)
{
	struct dispatch_ctx ctx = {.d = d, .b = d->b, .s = s, .fd = -1};
	dispatch_run(&ctx, frame, len, out);
	if (ctx.hold)
		dispatch_held_keep(&ctx, frame, len, out);
}
