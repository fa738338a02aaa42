/*
 * dispatch.c - the request handlers: JSON in, broker calls, JSON out.
 */
#include "dispatch_internal.h"

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

static int on_hello(struct dispatch_ctx *ctx)
{
	const cJSON *versions = cJSON_GetObjectItemCaseSensitive(ctx->params, PROTO_F_VERSIONS);
	const char *client = NULL;
	bool ok = false;
	if (!cJSON_IsArray(versions))
		return dispatch_param_error(ctx, versions ? -EINVAL : -ENOENT, PROTO_F_VERSIONS,
		                            "an array of integers");
	const cJSON *v;
	cJSON_ArrayForEach(v, versions)
	{
		if (!cJSON_IsNumber(v))
			return dispatch_param_error(ctx, -EINVAL, PROTO_F_VERSIONS,
			                            "an array of integers");
		if (v->valuedouble == PROTO_VERSION)
			ok = true;
	}
	int rc = proto_get_string(ctx->params, PROTO_F_CLIENT, PROTO_MAX_NAME, &client);
	if (rc < 0 && rc != -ENOENT)
		return dispatch_param_error(ctx, rc, PROTO_F_CLIENT, PROTO_NAME_EXPECTED);
	if (!ok) {
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
	bool keep = false;
	rc = proto_get_bool(ctx->params, PROTO_F_KEEP_SLABS, &keep);
	if (rc < 0 && rc != -ENOENT)
		return dispatch_param_error(ctx, rc, PROTO_F_KEEP_SLABS, "a boolean");
	rc = dispatch_hello_token(ctx);
	if (rc < 0)
		return rc;
	struct session *s = ctx->s;
	s->keep_slabs = keep;
	s->hello = true;
	snprintf(s->name, sizeof(s->name), "%s", client ? client : "");
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

int dispatch_get_device(struct dispatch_ctx *ctx, int64_t *device)
{
	const char *uuid;
	int64_t index;
	int rc = proto_get_string(ctx->params, PROTO_F_DEVICE, PROTO_MAX_NAME, &uuid);
	if (rc == 0) {
		int i = dispatch_device_by_uuid(ctx->b, uuid);
		if (i >= 0) {
			*device = i;
			return 0;
		}
	} else {
		rc = proto_get_int(ctx->params, PROTO_F_DEVICE, 0, BACKEND_MAX_DEVICES - 1, &index);
		if (rc == -ENOENT)
			return rc;
		if (rc < 0)
			return dispatch_param_error(ctx, rc, PROTO_F_DEVICE,
			                            "a device index or UUID");
		if (index < broker_device_count(ctx->b)) {
			*device = index;
			return 0;
		}
	}
	/* An unknown UUID or index, alike. */
	proto_error_set(&ctx->err, PROTO_E_PARAMS, "invalid params: no such device");
	snprintf(ctx->err.field, sizeof(ctx->err.field), PROTO_F_DEVICE);
	return -ENODEV;
}

static int on_register(struct dispatch_ctx *ctx)
{
	const char *name, *group = NULL;
	int64_t device = 0;
	double proportion = 0;
	int rc = proto_get_string(ctx->params, PROTO_F_NAME, PROTO_MAX_NAME, &name);
	if (rc < 0)
		return dispatch_param_error(ctx, rc, PROTO_F_NAME, PROTO_NAME_EXPECTED);
	rc = dispatch_get_device(ctx, &device);
	if (rc < 0 && rc != -ENOENT)
		return rc;
	rc = proto_get_double(ctx->params, PROTO_F_PROPORTION, 0, 1, &proportion);
	if (rc == 0 && proportion <= 0)
		rc = -ERANGE;
	if (rc < 0 && rc != -ENOENT)
		return dispatch_param_error(ctx, rc, PROTO_F_PROPORTION, "a number in (0, 1]");
	rc = proto_get_string(ctx->params, PROTO_F_GROUP, PROTO_MAX_NAME, &group);
	if (rc < 0 && rc != -ENOENT)
		return dispatch_param_error(ctx, rc, PROTO_F_GROUP, PROTO_NAME_EXPECTED);
	struct broker_instance *inst;
	rc = broker_register(ctx->b, ctx->s, name, (int)device, proportion, group, &inst);
	if (rc == -EINVAL || rc == -ENOSPC || rc == -EUSERS)
		return dispatch_policy_error(ctx, broker_policy_const(ctx->b, ctx->s), rc,
		                             (int)device, proportion);
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

int dispatch_get_id(struct dispatch_ctx *ctx, const char *key, uint64_t *id)
{
	int rc = proto_get_id64(ctx->params, key, id);
	return rc < 0 ? dispatch_param_error(ctx, rc, key, "16 lowercase hex digits") : 0;
}

int dispatch_get_uid(struct dispatch_ctx *ctx, const char *key, uid_t *uid)
{
	int64_t v = ctx->s->uid;
	int rc = proto_get_int(ctx->params, key, 0, UINT32_MAX - 1, &v);
	if (rc < 0 && rc != -ENOENT)
		return dispatch_param_error(ctx, rc, key, "a uid (0 to 4294967294)");
	*uid = (uid_t)v;
	return 0;
}

static int on_unregister(struct dispatch_ctx *ctx)
{
	uint64_t id;
	int rc = dispatch_get_id(ctx, PROTO_F_INSTANCE, &id);
	if (rc == 0)
		rc = broker_unregister(ctx->b, ctx->s, id);
	if (rc < 0)
		return ctx->err.code ? rc : dispatch_broker_error(ctx, rc, PROTO_F_INSTANCE);
	return dispatch_result(ctx) ? 0 : -ENOMEM;
}

void dispatch_grant_undo(struct broker *b, struct session *s, const struct broker_grant *g,
                         bool attach)
{
	if (attach)
		broker_detach(b, s, g->id);
	else
		broker_free(b, s, g->id);
	/* A slab handed over by this grant is not the client's either: a
	 * session that keeps emptied slabs would keep it. */
	if (g->handle)
		broker_release(b, s, g->slab_id);
}

int dispatch_attach_result(struct dispatch_ctx *ctx, const struct broker_grant *g)
{
	int rc = dispatch_grant_result(ctx, g);
	if (rc < 0)
		dispatch_grant_undo(ctx->b, ctx->s, g, true); /* the client cannot be told of it */
	return rc;
}

int dispatch_grant_result(struct dispatch_ctx *ctx, const struct broker_grant *g)
{
	cJSON *r = dispatch_result(ctx);
	if (!r || proto_add_id64(r, PROTO_F_ID, g->id) ||
	    proto_add_number(r, PROTO_F_DEVICE, g->device) ||
	    proto_add_id64(r, PROTO_F_SLAB, g->slab_id) ||
	    proto_add_u64(r, PROTO_F_SLAB_SIZE, g->slab_size) ||
	    proto_add_u64(r, PROTO_F_OFFSET, g->offset) || proto_add_u64(r, PROTO_F_SIZE, g->size))
		return -ENOMEM;
	if (g->handle && proto_add_hex(r, PROTO_F_HANDLE, g->handle, PROTO_HANDLE_SIZE))
		return -ENOMEM;
	/* With the handle, the device's UUID: the client finds the device by it
	 * (its CUDA ordinals need not be the daemon's). */
	if (g->handle && !cJSON_AddStringToObject(r, PROTO_F_DEVICE_UUID,
	                                          broker_device_info(ctx->b, g->device)->uuid))
		return -ENOMEM;
	if (g->handle && g->fd >= 0) {
		if (!cJSON_AddTrueToObject(r, PROTO_F_FD) ||
		    (g->pool && (!cJSON_AddTrueToObject(r, PROTO_F_POOL) ||
		                 proto_add_id64(r, PROTO_F_POOL_ID, g->pool_id))) ||
		    (g->vmm && !cJSON_AddTrueToObject(r, PROTO_F_VMM)))
			return -ENOMEM;
		ctx->fd = g->fd;
	}
	if (g->handle && g->keep && !cJSON_AddTrueToObject(r, PROTO_F_KEEP))
		return -ENOMEM;
	return 0;
}

/*
 * The error for an alloc that broker_alloc() (or a wait) refused with rc.
 * waited_ms is how long a wait lasted (0 when the request did not wait).
 * Returns rc (-ENOMEM when only host memory is short).
 */
static int alloc_error(struct dispatch_ctx *ctx, int rc, uint64_t instance, uint64_t size,
                       uint64_t waited_ms)
{
	struct broker_instance *inst = broker_instance_find(ctx->s, instance);
	switch (rc) {
	case -EINVAL:
		return dispatch_param_error(ctx, -ERANGE, PROTO_F_SIZE, "too large to round up");
	case -ENOMEM: {
		/* What this client can have: not what the device has free, of
		 * which others' slabs and partitions may hold parts it cannot
		 * use; and in one piece, when that is less. */
		uint64_t dfree = 0, largest = 0;
		if (inst)
			broker_alloc_room(ctx->b, ctx->s, inst->device, &dfree, &largest);
		char piece[64] = "";
		if (largest < dfree)
			snprintf(piece, sizeof(piece), ", at most %llu in one allocation",
			         (unsigned long long)largest);
		proto_error_set(&ctx->err, PROTO_E_NO_MEMORY,
		                "out of memory: %llu bytes requested on device %d, %llu free%s",
		                (unsigned long long)size, inst ? inst->device : -1,
		                (unsigned long long)dfree, piece);
		ctx->data = cJSON_CreateObject();
		if (ctx->data) {
			proto_add_u64(ctx->data, PROTO_F_REQUESTED, size);
			proto_add_u64(ctx->data, PROTO_F_DEVICE_FREE, dfree);
			proto_add_u64(ctx->data, PROTO_F_LARGEST_FREE, largest);
		}
		return rc;
	}
	case -EXFULL: {
		const struct broker_rule *rule = broker_rule_for(ctx->b, ctx->s);
		uint64_t cap = rule ? rule->cap : 0;
		uint64_t used = inst ? broker_uid_used(ctx->b, inst->device, ctx->s->uid) : 0;
		proto_error_set(
		    &ctx->err, PROTO_E_QUOTA,
		    "quota exceeded: user %u may hold %llu bytes per device, holds %llu, "
		    "asked for %llu",
		    (unsigned)ctx->s->uid, (unsigned long long)cap, (unsigned long long)used,
		    (unsigned long long)size);
		ctx->data = cJSON_CreateObject();
		if (ctx->data) {
			proto_add_u64(ctx->data, PROTO_F_CAP, cap);
			proto_add_u64(ctx->data, PROTO_F_USED, used);
			proto_add_u64(ctx->data, PROTO_F_REQUESTED, size);
			cJSON_AddNumberToObject(ctx->data, PROTO_F_UID, ctx->s->uid);
		}
		return rc;
	}
	case -EDQUOT: {
		/* What the cap is charged: the size rounded to the granule. */
		uint64_t charged = (size + POOL_GRANULE - 1) & ~(uint64_t)(POOL_GRANULE - 1);
		proto_error_set(&ctx->err, PROTO_E_QUOTA,
		                "quota exceeded: instance %016llx may hold %llu bytes, holds %llu, "
		                "asked for %llu",
		                (unsigned long long)instance, (unsigned long long)inst->pol.cap,
		                (unsigned long long)inst->pol.used, (unsigned long long)charged);
		ctx->data = cJSON_CreateObject();
		if (ctx->data) {
			proto_add_u64(ctx->data, PROTO_F_CAP, inst->pol.cap);
			proto_add_u64(ctx->data, PROTO_F_USED, inst->pol.used);
			proto_add_u64(ctx->data, PROTO_F_REQUESTED, charged);
		}
		return rc;
	}
	case -ETIMEDOUT:
		proto_error_set(&ctx->err, PROTO_E_TIMEOUT,
		                "timeout: no room for %llu bytes within %llu ms",
		                (unsigned long long)size, (unsigned long long)waited_ms);
		ctx->data = cJSON_CreateObject();
		if (ctx->data) {
			proto_add_u64(ctx->data, PROTO_F_REQUESTED, size);
			cJSON_AddNumberToObject(ctx->data, PROTO_F_WAITED_MS, (double)waited_ms);
		}
		return rc;
	case -EAGAIN:
		return -ENOMEM;
	default:
		return dispatch_broker_error(ctx, rc,
		                             rc == -EMFILE ? "allocation" : PROTO_F_INSTANCE);
	}
}

/* alloc of "pinned" or "mapped" host memory: its own memfd, passed. */
static int alloc_host(struct dispatch_ctx *ctx, uint64_t instance, uint64_t size, bool mapped)
{
	struct broker_host *h;
	int rc = broker_host_alloc(ctx->b, ctx->s, instance, size, mapped, &h);
	if (rc == -ENOMEM) {
		struct broker_summary sum;
		broker_summary(ctx->b, &sum);
		uint64_t max = broker_get_limits(ctx->b)->max_host_memory, used = sum.host_used;
		proto_error_set(&ctx->err, PROTO_E_NO_MEMORY,
		                "out of memory: %llu bytes of host memory requested, %llu left "
		                "under max_host_memory",
		                (unsigned long long)size,
		                (unsigned long long)(max > used ? max - used : 0));
		ctx->data = cJSON_CreateObject();
		if (ctx->data)
			proto_add_u64(ctx->data, PROTO_F_REQUESTED, size);
		return rc;
	}
	if (rc == -EAGAIN)
		return -ENOMEM;
	if (rc == -EINVAL)
		return dispatch_param_error(ctx, -ERANGE, PROTO_F_SIZE,
		                            "too large to round up to pages");
	if (rc < 0)
		return dispatch_broker_error(ctx, rc,
		                             rc == -EMFILE ? "allocation" : PROTO_F_INSTANCE);
	return dispatch_host_result(ctx, h);
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

static const char *const alloc_type_expected =
    PROTO_QUOTED(PROTO_V_MEM_DEVICE) ", " PROTO_QUOTED(PROTO_V_MEM_PINNED) ", " PROTO_QUOTED(
        PROTO_V_MEM_MAPPED) " or " PROTO_QUOTED(PROTO_V_MEM_MANAGED);

static const char alloc_alignment_expected[] =
    "a power of two from " PROTO_STR(PROTO_GRANULE) " to " PROTO_STR(PROTO_MAX_ALIGNMENT);
static const char alloc_wait_expected[] =
    "an integer from 0 to " PROTO_STR(PROTO_MAX_WAIT_MS) " (milliseconds)";

static int on_alloc(struct dispatch_ctx *ctx)
{
	uint64_t instance, size, align = POOL_GRANULE;
	const char *type = PROTO_V_MEM_DEVICE;
	int rc = dispatch_get_id(ctx, PROTO_F_INSTANCE, &instance);
	if (rc < 0)
		return rc;
	rc = proto_get_u64(ctx->params, PROTO_F_SIZE, 1, UINT64_MAX, &size);
	if (rc < 0)
		return dispatch_param_error(ctx, rc, PROTO_F_SIZE,
		                            "a decimal string of 1-20 digits, at least 1");
	rc =
	    proto_get_u64(ctx->params, PROTO_F_ALIGNMENT, POOL_GRANULE, POOL_MAX_ALIGNMENT, &align);
	if (rc == 0 && (align & (align - 1)))
		rc = -EINVAL;
	if (rc < 0 && rc != -ENOENT)
		return dispatch_param_error(ctx, rc, PROTO_F_ALIGNMENT, alloc_alignment_expected);
	rc = proto_get_string(ctx->params, PROTO_F_TYPE, 16, &type);
	if (rc < 0 && rc != -ENOENT)
		return dispatch_param_error(ctx, rc, PROTO_F_TYPE, alloc_type_expected);
	if (strcmp(type, PROTO_V_MEM_DEVICE) != 0) {
		if (strcmp(type, PROTO_V_MEM_PINNED) && strcmp(type, PROTO_V_MEM_MAPPED) &&
		    strcmp(type, PROTO_V_MEM_MANAGED))
			return dispatch_param_error(ctx, -EINVAL, PROTO_F_TYPE,
			                            alloc_type_expected);
		if (strcmp(type, PROTO_V_MEM_MANAGED) == 0) {
			/* Unified memory cannot be shared across processes. */
			proto_error_set(&ctx->err, PROTO_E_NOT_SUPPORTED,
			                "memory type 'managed' is not supported: managed memory "
			                "cannot be shared between processes");
			return -EOPNOTSUPP;
		}
		return alloc_host(ctx, instance, size, strcmp(type, PROTO_V_MEM_MAPPED) == 0);
	}
	int64_t wait_ms = 0;
	rc = proto_get_int(ctx->params, PROTO_F_WAIT_MS, 0, PROTO_MAX_WAIT_MS, &wait_ms);
	if (rc < 0 && rc != -ENOENT)
		return dispatch_param_error(ctx, rc, PROTO_F_WAIT_MS, alloc_wait_expected);
	struct broker_grant g;
	rc = dispatch_alloc_device(ctx, instance, size, align, wait_ms, &g);
	if (rc < 0 || ctx->deferred)
		return rc;
	rc = dispatch_grant_result(ctx, &g);
	if (rc < 0)
		dispatch_grant_undo(ctx->b, ctx->s, &g,
		                    false); /* the client cannot be told of it */
	return rc;
}

int dispatch_alloc_device(struct dispatch_ctx *ctx, uint64_t instance, uint64_t size,
                          uint64_t align, int64_t wait_ms, struct broker_grant *g)
{
	int rc;
	/* A request that may wait does not overtake those already waiting on
	 * its device: it joins the queue behind them. */
	struct broker_instance *target = broker_instance_find(ctx->s, instance);
	/* More than the user's cap could never be served: no wait. Looked up
	 * only for a request that may wait (the broker checks the cap anyway). */
	const struct broker_rule *rule = wait_ms > 0 ? broker_rule_for(ctx->b, ctx->s) : NULL;
	bool over_user_cap = rule && rule->cap && size > rule->cap;
	if (wait_ms > 0 && target && !over_user_cap &&
	    broker_waits_on(ctx->b, ctx->s, target->device))
		rc = -ENOMEM;
	else
		rc = broker_alloc(ctx->b, ctx->s, instance, size, align, g);
	if ((rc == -ENOMEM || rc == -EDQUOT || rc == -EXFULL) && wait_ms > 0) {
		/* A request larger than the device, or than the user's cap,
		 * could never be served: say so now rather than after the wait. */
		struct broker_instance *inst = broker_instance_find(ctx->s, instance);
		uint64_t most = ctx->s->part ? ctx->s->part->size[inst->device]
		                             : broker_device_info(ctx->b, inst->device)->total;
		if (size <= most && !over_user_cap) {
			int wrc = broker_wait_add(ctx->b, ctx->s, ctx->id, instance, size, align,
			                          (uint64_t)wait_ms);
			if (wrc == 0) {
				ctx->deferred = true;
				/* It may fit already, if only the queue held it. */
				broker_waits_run(ctx->b);
				return 0;
			}
			if (wrc == -EBUSY) {
				unsigned max = broker_get_limits(ctx->b)->max_inflight;
				proto_error_set(
				    &ctx->err, PROTO_E_LIMIT,
				    "limit reached: max_inflight is %u waiting requests", max);
				ctx->data = cJSON_CreateObject();
				if (ctx->data) {
					cJSON_AddStringToObject(ctx->data, PROTO_F_LIMIT,
					                        PROTO_F_MAX_INFLIGHT);
					cJSON_AddNumberToObject(ctx->data, PROTO_F_VALUE, max);
				}
				return -EBUSY;
			}
			rc = wrc == -ENOMEM ? -EAGAIN : wrc;
		}
	}
	if (rc < 0)
		return alloc_error(ctx, rc, instance, size, 0);
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
                        const struct broker_grant *g)
{
	struct broker *b = d->b;
	struct dispatch_ctx ctx = {.d = d, .b = b, .s = w->s, .fd = -1, .id = w->id};
	size_t len = 0;
	char *frame = NULL;
	if (rc == 0 && dispatch_grant_result(&ctx, g) == 0) {
		frame = proto_encode_result(w->id, ctx.result, &len);
		ctx.result = NULL;
		if (frame) {
			dispatch_send(d, w->s, frame, len, ctx.fd);
			return;
		}
	}
	cJSON_Delete(ctx.result);
	ctx.result = NULL;
	if (rc == 0) {
		/* The client cannot be told about this memory: give it back. */
		dispatch_grant_undo(b, w->s, g, false);
		proto_error_set(&ctx.err, PROTO_E_INTERNAL, "internal error: out of memory");
	} else {
		uint64_t now = broker_now_ms();
		if (alloc_error(&ctx, rc, w->instance, w->size, now - w->started) == -ENOMEM &&
		    !ctx.err.code)
			proto_error_set(&ctx.err, PROTO_E_INTERNAL,
			                "internal error: out of memory");
	}
	if (ctx.err.field[0])
		dispatch_error_data(&ctx, PROTO_F_FIELD, ctx.err.field);
	frame = proto_encode_error(w->id, ctx.err.code, ctx.err.message, ctx.data, &len);
	dispatch_send(d, w->s, frame, len, -1);
}

static int on_free(struct dispatch_ctx *ctx)
{
	uint64_t id;
	bool reply = true;
	int rc = dispatch_get_id(ctx, PROTO_F_ID, &id);
	if (rc == 0) {
		rc = proto_get_bool(ctx->params, PROTO_F_REPLY, &reply);
		if (rc == -ENOENT)
			rc = 0;
		else if (rc < 0)
			rc = dispatch_param_error(ctx, rc, PROTO_F_REPLY, "a boolean");
	}
	if (rc == 0)
		rc = broker_free(ctx->b, ctx->s, id);
	/* A free that does not wait for its reply gets one only when it
	 * fails: the client learns of that from the error's id. */
	ctx->quiet = rc == 0 && !reply;
	if (rc < 0)
		return ctx->err.code ? rc : dispatch_broker_error(ctx, rc, "allocation");
	return dispatch_result(ctx) ? 0 : -ENOMEM;
}

static int on_attach(struct dispatch_ctx *ctx)
{
	uint64_t id;
	struct broker_grant g;
	int rc = dispatch_get_id(ctx, PROTO_F_ID, &id);
	if (rc < 0)
		return rc;
	rc = broker_attach(ctx->b, ctx->s, id, &g);
	if (rc == -EAGAIN)
		return -ENOMEM;
	if (rc < 0)
		return dispatch_broker_error(ctx, rc, "allocation");
	return dispatch_attach_result(ctx, &g);
}

static int on_detach(struct dispatch_ctx *ctx)
{
	uint64_t id;
	int rc = dispatch_get_id(ctx, PROTO_F_ID, &id);
	if (rc == 0)
		rc = broker_detach(ctx->b, ctx->s, id);
	if (rc < 0)
		return ctx->err.code ? rc : dispatch_broker_error(ctx, rc, "attachment");
	return dispatch_result(ctx) ? 0 : -ENOMEM;
}

static const dispatch_fn dispatch_handlers[PROTO_OP_COUNT] = {
    [PROTO_OP_HELLO] = on_hello,
    [PROTO_OP_REGISTER] = on_register,
    [PROTO_OP_UNREGISTER] = on_unregister,
    [PROTO_OP_ALLOC] = on_alloc,
    [PROTO_OP_FREE] = on_free,
    [PROTO_OP_ATTACH] = on_attach,
    [PROTO_OP_DETACH] = on_detach,
    [PROTO_OP_MEM_INFO] = dispatch_mem_info,
    [PROTO_OP_STATS] = dispatch_stats,
    [PROTO_OP_STATUS] = dispatch_status,
    [PROTO_OP_CLIENTS] = dispatch_clients,
    [PROTO_OP_DEVICES] = dispatch_devices,
    [PROTO_OP_RELOAD] = dispatch_reload,
    [PROTO_OP_METRICS] = dispatch_metrics,
    [PROTO_OP_EVICT] = dispatch_evict,
    [PROTO_OP_POLICY] = dispatch_policy,
    [PROTO_OP_SET_PROPORTION] = dispatch_set_proportion,
    [PROTO_OP_SET_AUTO] = dispatch_set_auto,
    [PROTO_OP_SET_GROUP] = dispatch_set_group,
    [PROTO_OP_GROUP_INFO] = dispatch_group_info,
    [PROTO_OP_SET_MODE] = dispatch_set_mode,
    [PROTO_OP_SET_LIMIT] = dispatch_set_limit,
    [PROTO_OP_QUEUE_REQUEST] = dispatch_queue_request,
    [PROTO_OP_ALLOCATE_QUEUE] = dispatch_allocate_queue,
    [PROTO_OP_CHUNK_PARAMETERS] = dispatch_chunk_parameters,
    [PROTO_OP_CLAIM] = dispatch_claim,
    [PROTO_OP_FREE_LABEL] = dispatch_free_label,
    [PROTO_OP_INVALIDATE_ALL] = dispatch_invalidate_all,
    [PROTO_OP_SET_ALLOCATOR] = dispatch_set_allocator,
    [PROTO_OP_SELFCHECK] = dispatch_selfcheck,
    [PROTO_OP_EXPORT] = dispatch_export,
    [PROTO_OP_UNEXPORT] = dispatch_unexport,
    [PROTO_OP_OPEN] = dispatch_open,
    [PROTO_OP_INVALIDATE_DONE] = dispatch_invalidate_done,
    [PROTO_OP_GOODBYE] = dispatch_goodbye,
    [PROTO_OP_RELEASE] = dispatch_release,
    [PROTO_OP_PARTITION_CREATE] = dispatch_partition_create,
    [PROTO_OP_PARTITION_DESTROY] = dispatch_partition_destroy,
    [PROTO_OP_PARTITIONS] = dispatch_partitions,
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
	metrics_record(
	    &d->metrics, op, rc < 0 ? ctx->err.code : ctx->deferred,
	    (uint64_t)((t1.tv_sec - t0->tv_sec) * 1000000000LL + (t1.tv_nsec - t0->tv_nsec)));
}

void dispatch_frame(struct dispatch *d, struct session *s, const char *frame, size_t len,
                    struct dispatch_reply *out)
{
	struct broker *b = d->b;
	struct dispatch_ctx ctx = {.d = d, .b = b, .s = s, .fd = -1};
	struct proto_request req;
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	/* alloc and free in their canonical form: no cJSON tree either way. */
	if (s->hello && dispatch_fast(&ctx, frame, len, &t0, out))
		return;
	int rc = proto_request_parse(frame, len, &req, &ctx.err);
	if (rc == 0) {
		ctx.params = req.params;
		ctx.id = req.id;
		bool early = proto_ops[req.op].flags & PROTO_OPF_BEFORE_HELLO;
		if (!s->hello && !early) {
			proto_error_set(&ctx.err, PROTO_E_STATE, "bad state: send hello first");
			rc = -EPROTO;
		} else if (s->hello && early) {
			proto_error_set(&ctx.err, PROTO_E_STATE, "bad state: hello already done");
			rc = -EPROTO;
		} else if ((proto_ops[req.op].flags & PROTO_OPF_ADMIN) && !s->admin) {
			proto_error_set(&ctx.err, PROTO_E_PERMISSION,
			                "permission denied: '%s' is for root and the admin group",
			                req.method);
			rc = -EPERM;
		} else {
			rc = dispatch_handlers[req.op](&ctx);
		}
	}
	dispatch_reply_to(d, s, &ctx, rc, req.id, req.method, req.op, &t0, out);
	proto_request_finish(&req);
}
