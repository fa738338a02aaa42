/*
 * dispatch_query.c - read-only requests: mem_info, stats, status, devices,
 * clients, selfcheck.
 */
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "dispatch_internal.h"
#include "log.h"

static cJSON *result_array(struct dispatch_ctx *ctx, const char *key)
{
	cJSON *r = dispatch_result(ctx);
	return r ? cJSON_AddArrayToObject(r, key) : NULL;
}

static int instance_entry(struct broker *b, cJSON *arr, const struct broker_instance *inst)
{
	const struct policy_instance *pi = &inst->pol;
	cJSON *o = proto_array_add_object(arr);
	if (!o || proto_add_id64(o, PROTO_F_INSTANCE, inst->id) ||
	    !cJSON_AddStringToObject(o, PROTO_F_NAME, inst->name) ||
	    proto_add_number(o, PROTO_F_DEVICE, inst->device) ||
	    !cJSON_AddStringToObject(o, PROTO_F_GROUP, pi->group) ||
	    !(pi->proportion > 0 ? cJSON_AddNumberToObject(o, PROTO_F_PROPORTION, pi->proportion)
	                         : cJSON_AddNullToObject(o, PROTO_F_PROPORTION)) ||
	    proto_add_number(o, PROTO_F_SHARE, pi->share) ||
	    proto_add_u64(o, PROTO_F_CAP, pi->cap) || proto_add_u64(o, PROTO_F_USED, inst->used) ||
	    proto_add_u64(o, PROTO_F_FREE,
	                  policy_headroom(broker_policy_const(b, inst->owner), pi)) ||
	    proto_add_u64(o, PROTO_F_LEASED, inst->leased) ||
	    proto_add_number(o, PROTO_F_LEASES, inst->leases) ||
	    proto_add_u64(o, PROTO_F_IN_USE, inst->in_use) ||
	    proto_add_u64(o, PROTO_F_RECALLS_SENT, inst->recalls_sent) ||
	    proto_add_u64(o, PROTO_F_RECALLS_ANSWERED, inst->recalls_answered) ||
	    proto_add_u64(o, PROTO_F_RECALLS_PENDING, inst->recall_epoch != 0) ||
	    proto_add_u64(o, PROTO_F_RECALLS_TIMED_OUT, inst->recalls_timed_out))
		return -ENOMEM;
	return 0;
}

int dispatch_mem_info(struct dispatch_ctx *ctx, const struct proto_mem_info_params *params)
{
	uint64_t id = params->has_instance ? params->instance : 0;
	if (params->has_instance && !broker_instance_find(ctx->s, id)) {
		proto_error_set(&ctx->err, PROTO_E_NOT_FOUND, "no such instance");
		return -ENOENT;
	}
	cJSON *insts = result_array(ctx, PROTO_F_INSTANCES);
	cJSON *devs = insts ? cJSON_AddArrayToObject(ctx->result, PROTO_F_DEVICES) : NULL;
	if (!devs)
		return -ENOMEM;
	bool used_dev[BACKEND_MAX_DEVICES] = {false};
	for (const struct broker_instance *inst = broker_instance_next(ctx->s, NULL); inst;
	     inst = broker_instance_next(ctx->s, inst)) {
		if (id && inst->id != id)
			continue;
		if (instance_entry(ctx->b, insts, inst) < 0)
			return -ENOMEM;
		used_dev[inst->device] = true;
	}
	/* The total is the policy's: a partition's size inside one, else the
	 * memory the partitions leave (the device's, without any). */
	const struct policy *p = broker_policy_const(ctx->b, ctx->s);
	for (int i = 0; i < broker_device_count(ctx->b); i++) {
		if (!used_dev[i])
			continue;
		cJSON *o = proto_array_add_object(devs);
		if (!o || proto_add_number(o, PROTO_F_DEVICE, i) ||
		    proto_add_u64(o, PROTO_F_TOTAL, p->dev[i].total) ||
		    proto_add_u64(o, PROTO_F_FREE, policy_device_available(p, i)))
			return -ENOMEM;
	}
	return 0;
}

/* The result's "devices" array of a request whose optional "device" param
 * picks one (*only; -1: every device). NULL with *rc set on a failure. */
static cJSON *devices_result(struct dispatch_ctx *ctx, bool has_device,
                             const struct proto_device *device, int *only, int *rc)
{
	*only = -1;
	*rc = has_device && dispatch_device(ctx, device, only) < 0 ? -ENODEV : 0;
	cJSON *devs = *rc ? NULL : result_array(ctx, PROTO_F_DEVICES);
	if (!devs && !*rc)
		*rc = -ENOMEM;
	return devs;
}

int dispatch_stats(struct dispatch_ctx *ctx, const struct proto_stats_params *p)
{
	int only, rc;
	cJSON *devs = devices_result(ctx, p->has_device, &p->device, &only, &rc);
	if (!devs)
		return rc;
	for (int i = 0; i < broker_device_count(ctx->b); i++) {
		struct broker_device_stats ds;
		const struct pool_stats *st = &ds.pool;
		if (only >= 0 && i != only)
			continue;
		broker_device_stats(ctx->b, i, &ds);
		cJSON *o = proto_array_add_object(devs);
		if (!o || proto_add_number(o, PROTO_F_DEVICE, i) ||
		    proto_add_u64(o, PROTO_F_RESERVED, st->reserved) ||
		    proto_add_u64(o, PROTO_F_USED, st->used) ||
		    proto_add_u64(o, PROTO_F_FENCED, ds.fenced) ||
		    proto_add_u64(o, PROTO_F_FREE, st->free) ||
		    proto_add_u64(o, PROTO_F_FREE_BLOCKS, st->free_blocks) ||
		    proto_add_u64(o, PROTO_F_LARGEST_FREE, st->largest_free) ||
		    proto_add_u64(o, PROTO_F_PEAK, st->peak) ||
		    proto_add_u64(o, PROTO_F_SLABS, st->slabs) ||
		    proto_add_u64(o, PROTO_F_LIVE, st->live) ||
		    proto_add_u64(o, PROTO_F_ALLOCS, st->allocs) ||
		    proto_add_u64(o, PROTO_F_FREES, st->frees) ||
		    proto_add_u64(o, PROTO_F_OOMS, st->ooms) ||
		    proto_add_u64(o, PROTO_F_LEASED, ds.leased) ||
		    proto_add_u64(o, PROTO_F_IN_USE, ds.in_use))
			return -ENOMEM;
	}
	/* The daemon's recalls (issue 28), as the metrics count them. */
	struct broker_summary sum;
	broker_summary(ctx->b, &sum);
	if (proto_add_u64(ctx->result, PROTO_F_RECALLS_SENT, sum.stats.recalls_sent) ||
	    proto_add_u64(ctx->result, PROTO_F_RECALLS_ANSWERED, sum.stats.recalls_answered) ||
	    proto_add_u64(ctx->result, PROTO_F_RECALLS_PENDING, broker_recalls_pending(ctx->b)) ||
	    proto_add_u64(ctx->result, PROTO_F_RECALLS_TIMED_OUT, sum.stats.recalls_timed_out))
		return -ENOMEM;
	return 0;
}

/* name, uuid, transport, total, what was kept out of the capacity (in use at start,
 * reserve), reserved, used, fenced of one device. */
static cJSON *device_entry(struct broker *b, const struct session *s, cJSON *arr, int i,
                           struct broker_device_stats *ds)
{
	const struct backend_device_info *info = broker_device_info(b, i);
	const struct policy *p = broker_policy_const(b, s);
	broker_device_stats(b, i, ds);
	const struct pool_stats *st = &ds->pool;
	cJSON *o = proto_array_add_object(arr);
	/* Inside a partition the device is the partition: its size is the total. */
	if (!o || proto_add_number(o, PROTO_F_DEVICE, i) ||
	    !cJSON_AddStringToObject(o, PROTO_F_NAME, info->name) ||
	    !cJSON_AddStringToObject(o, PROTO_F_UUID, info->uuid) ||
	    !cJSON_AddStringToObject(o, PROTO_F_TRANSPORT, info->transport) ||
	    proto_add_u64(o, PROTO_F_TOTAL, s->part ? p->dev[i].total : info->total) ||
	    proto_add_u64(o, PROTO_F_IN_USE_AT_START, s->part ? 0 : info->in_use) ||
	    proto_add_u64(o, PROTO_F_RESERVE, s->part ? 0 : info->reserve) ||
	    proto_add_u64(o, PROTO_F_RESERVED, st->reserved) ||
	    proto_add_u64(o, PROTO_F_USED, s->part ? p->dev[i].used : st->used) ||
	    /* Part of the device's used, charged to no one: inside a
	     * partition, whose used is its policy's, none of it. */
	    proto_add_u64(o, PROTO_F_FENCED, s->part ? 0 : ds->fenced) ||
	    proto_add_u64(o, PROTO_F_ORPHANED, p->dev[i].orphaned))
		return NULL;
	return o;
}

int dispatch_status(struct dispatch_ctx *ctx, const struct proto_status_params *p)
{
	(void)p;
	struct broker *b = ctx->b;
	uint64_t total = 0, reserved = 0, used = 0, fenced = 0;
	cJSON *devs = result_array(ctx, PROTO_F_DEVICES);
	if (!devs)
		return -ENOMEM;
	for (int i = 0; i < broker_device_count(b); i++) {
		struct broker_device_stats st;
		cJSON *o = device_entry(b, ctx->s, devs, i, &st);
		/* The limit too: an operator looks here first. */
		if (!o || dispatch_limit_json(broker_policy_const(b, ctx->s), o, i))
			return -ENOMEM;
		total += broker_device_info(b, i)->total;
		reserved += st.pool.reserved;
		used += st.pool.used;
		fenced += ctx->s->part ? 0 : st.fenced;
	}
	struct broker_summary sum;
	broker_summary(b, &sum);
	cJSON *r = ctx->result, *totals = cJSON_AddObjectToObject(r, PROTO_F_TOTALS);
	if (!totals || proto_add_u64(totals, PROTO_F_TOTAL, total) ||
	    proto_add_u64(totals, PROTO_F_RESERVED, reserved) ||
	    proto_add_u64(totals, PROTO_F_USED, used) ||
	    proto_add_u64(totals, PROTO_F_FENCED, fenced) ||
	    !cJSON_AddStringToObject(r, PROTO_F_SERVER_VERSION, GPB_VERSION) ||
	    !cJSON_AddStringToObject(r, PROTO_F_BACKEND, broker_backend_name(b)) ||
	    !cJSON_AddStringToObject(r, PROTO_F_MODE, policy_mode_name(sum.mode)) ||
	    !cJSON_AddStringToObject(r, PROTO_F_ALLOCATOR, broker_allocator_name(sum.allocator)) ||
	    proto_add_number(r, PROTO_F_PID, getpid()) ||
	    proto_add_number(r, PROTO_F_UPTIME_S, (double)(time(NULL) - sum.started)) ||
	    proto_add_number(r, PROTO_F_CLIENTS, sum.sessions) ||
	    proto_add_number(r, PROTO_F_INSTANCES, (double)sum.instances) ||
	    proto_add_number(r, PROTO_F_ALLOCATIONS, (double)sum.allocations) ||
	    proto_add_number(r, PROTO_F_EXPORTS, sum.exports) ||
	    proto_add_number(r, PROTO_F_ORPHANS, (double)sum.orphans) ||
	    proto_add_u64(r, PROTO_F_INVALIDATIONS, sum.stats.invalidations) ||
	    proto_add_u64(r, PROTO_F_EVICTIONS, sum.stats.evictions) ||
	    proto_add_number(r, PROTO_F_HOST_ALLOCATIONS, (double)sum.host_allocations) ||
	    proto_add_u64(r, PROTO_F_HOST_USED, sum.host_used))
		return -ENOMEM;
	return 0;
}

int dispatch_devices(struct dispatch_ctx *ctx, const struct proto_devices_params *params)
{
	(void)params;
	struct broker *b = ctx->b;
	cJSON *devs = result_array(ctx, PROTO_F_DEVICES);
	if (!devs)
		return -ENOMEM;
	const struct policy *p = broker_policy_const(b, ctx->s);
	for (int i = 0; i < broker_device_count(b); i++) {
		struct broker_device_stats st;
		const struct backend_device_info *info = broker_device_info(b, i);
		char cc[16];
		/* A partition's session sees only the partition's devices. */
		if (ctx->s->part && !ctx->s->part->size[i])
			continue;
		cJSON *o = device_entry(b, ctx->s, devs, i, &st);
		snprintf(cc, sizeof(cc), "%d.%d", info->cc_major, info->cc_minor);
		if (!o || proto_add_u64(o, PROTO_F_FREE, policy_device_available(p, i)) ||
		    !cJSON_AddStringToObject(o, PROTO_F_COMPUTE_CAPABILITY, cc))
			return -ENOMEM;
	}
	return 0;
}

int dispatch_clients(struct dispatch_ctx *ctx, const struct proto_clients_params *p)
{
	(void)p;
	cJSON *arr = result_array(ctx, PROTO_F_CLIENTS);
	if (!arr)
		return -ENOMEM;
	time_t now = time(NULL);
	struct timespec mono;
	clock_gettime(CLOCK_MONOTONIC, &mono);
	unsigned hidden = 0, hidden_instances = 0;
	uint64_t hidden_allocs = 0, hidden_used = 0;
	for (const struct session *s = broker_session_next(ctx->b, NULL); s;
	     s = broker_session_next(ctx->b, s)) {
		uint64_t cap = 0, leased = 0, in_use = 0, recalls = 0;
		if (!broker_sees(ctx->s, s->uid)) {
			hidden++;
			hidden_instances += s->instance_count;
			hidden_allocs += s->alloc_count;
			hidden_used += s->used;
			continue;
		}
		for (const struct broker_instance *inst = broker_instance_next(s, NULL); inst;
		     inst = broker_instance_next(s, inst)) {
			cap += inst->pol.cap;
			leased += inst->leased;
			in_use += inst->in_use;
			recalls += inst->recall_epoch != 0;
		}
		cJSON *o = proto_array_add_object(arr);
		if (!o || proto_add_id64(o, PROTO_F_SESSION, s->id) ||
		    proto_add_number(o, PROTO_F_PID, s->pid) ||
		    proto_add_number(o, PROTO_F_UID, s->uid) ||
		    proto_add_number(o, PROTO_F_GID, s->gid) ||
		    !cJSON_AddStringToObject(o, PROTO_F_NAME, s->name) ||
		    proto_add_number(o, PROTO_F_INSTANCES, s->instance_count) ||
		    proto_add_number(o, PROTO_F_ALLOCATIONS, (double)s->alloc_count) ||
		    proto_add_u64(o, PROTO_F_USED, s->used) ||
		    proto_add_u64(o, PROTO_F_LEASED, leased) ||
		    proto_add_u64(o, PROTO_F_IN_USE, in_use) ||
		    proto_add_u64(o, PROTO_F_RECALLS_PENDING, recalls) ||
		    proto_add_u64(o, PROTO_F_CAP, cap) ||
		    proto_add_number(o, PROTO_F_CONNECTED_S, (double)(now - s->connected)) ||
		    proto_add_number(o, PROTO_F_IDLE_S, (double)(mono.tv_sec - s->last_request)) ||
		    proto_add_number(o, PROTO_F_WAITING, s->wait_count) ||
		    (s->part && !cJSON_AddStringToObject(o, PROTO_F_PARTITION, s->part->name)))
			return -ENOMEM;
	}
	/* Other users' connections as totals only: no pid, uid, name or id. */
	cJSON *others = cJSON_AddObjectToObject(ctx->result, PROTO_F_OTHERS);
	if (!others || proto_add_number(others, PROTO_F_CLIENTS, hidden) ||
	    proto_add_number(others, PROTO_F_INSTANCES, hidden_instances) ||
	    proto_add_number(others, PROTO_F_ALLOCATIONS, (double)hidden_allocs) ||
	    proto_add_u64(others, PROTO_F_USED, hidden_used))
		return -ENOMEM;
	return 0;
}

/* Bytes of host memory the daemon's allocator has handed out and not had
 * back (glibc: mallinfo2), or -1 where that cannot be known. Exact where
 * RSS is not: freed memory stays resident, so a small leak hides in it. */
static double heap_bytes(void)
{
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 33)
	struct mallinfo2 mi = mallinfo2();
	return (double)(mi.uordblks + mi.hblkhd);
#else
	return -1;
#endif
}

/* Walks every pool, session, allocation, wait and policy structure
 * (broker_check) and reports the first inconsistency. */
int dispatch_selfcheck(struct dispatch_ctx *ctx, const struct proto_selfcheck_params *p)
{
	(void)p;
	char msg[128] = "";
	if (broker_check(ctx->b, msg, sizeof(msg)) < 0) {
		log_error("selfcheck: %s", msg);
		proto_error_set(&ctx->err, PROTO_E_INTERNAL, "internal error: selfcheck: %s", msg);
		ctx->data = cJSON_CreateObject();
		if (ctx->data)
			cJSON_AddStringToObject(ctx->data, PROTO_F_VIOLATION, msg);
		return -EFAULT;
	}
	const struct broker *b = ctx->b;
	struct broker_parting_counts pc;
	struct broker_summary sum;
	broker_parting_counts(b, &pc);
	broker_summary(b, &sum);
	cJSON *r = dispatch_result(ctx);
	if (!r || !cJSON_AddTrueToObject(r, PROTO_F_OK) ||
	    proto_add_number(r, PROTO_F_SESSIONS, sum.sessions) ||
	    proto_add_number(r, PROTO_F_INSTANCES, (double)sum.instances) ||
	    proto_add_number(r, PROTO_F_ALLOCATIONS, (double)sum.allocations) ||
	    proto_add_number(r, PROTO_F_WAITS, sum.waits) ||
	    proto_add_number(r, PROTO_F_PARTING, (double)pc.parting) ||
	    proto_add_number(r, PROTO_F_GHOSTS, pc.ghosts) ||
	    proto_add_number(r, PROTO_F_RETIRED, pc.retired) ||
	    proto_add_number(r, PROTO_F_HEAP_BYTES, heap_bytes()))
		return -ENOMEM;
	return 0;
}

int dispatch_reload(struct dispatch_ctx *ctx, const struct proto_reload_params *p)
{
	(void)p;
	char message[sizeof(ctx->err.message)];
	if (!ctx->d->reload) {
		proto_error_set(&ctx->err, PROTO_E_NOT_SUPPORTED, "reload is not available here");
		return -EOPNOTSUPP;
	}
	cJSON *r = dispatch_result(ctx);
	if (!r)
		return -ENOMEM;
	if (ctx->d->reload(ctx->d->reload_ctx, r, message, sizeof(message)) < 0) {
		proto_error_set(&ctx->err, PROTO_E_PARAMS, "%s", message);
		return -EINVAL;
	}
	return 0;
}

/* Ends another client's connection: it hears an `evicted` event, gets what
 * was queued for it, and everything it held is reclaimed as on any close. */
int dispatch_evict(struct dispatch_ctx *ctx, const struct proto_evict_params *p)
{
	uint64_t id = p->session;
	if (id == ctx->s->id) {
		proto_error_set(&ctx->err, PROTO_E_PARAMS,
		                "invalid params: a client cannot evict itself");
		snprintf(ctx->err.field, sizeof(ctx->err.field), PROTO_F_SESSION);
		return -EINVAL;
	}
	struct session *s = broker_session_get(ctx->b, id);
	if (s) {
		cJSON *data = cJSON_CreateObject();
		if (data)
			cJSON_AddStringToObject(data, PROTO_F_REASON,
			                        "evicted by an administrator");
		dispatch_send_event(ctx->d, s, PROTO_EV_EVICTED, data);
		/* Its process may still have its slabs mapped after the close. */
		broker_session_evict(ctx->b, s);
		if (ctx->d->close)
			ctx->d->close(ctx->d->send_ctx, s, "evicted by an administrator");
		return dispatch_result(ctx) ? 0 : -ENOMEM;
	}
	proto_error_set(&ctx->err, PROTO_E_NOT_FOUND, "no such client");
	return -ENOENT;
}

int dispatch_metrics(struct dispatch_ctx *ctx, const struct proto_metrics_params *p)
{
	(void)p;
	char *text;
	size_t len;
	int rc = metrics_render(&ctx->d->metrics, ctx->b, ctx->s, &text, &len);
	if (rc < 0)
		return rc;
	cJSON *r = dispatch_result(ctx);
	rc = r && cJSON_AddStringToObject(r, PROTO_F_TEXT, text) ? 0 : -ENOMEM;
	free(text);
	return rc;
}

/* device_map: a device's slabs and their ranges, as broker_device_map()
 * walks them. */
struct map_out {
	cJSON *slabs;  /* of the device */
	cJSON *blocks; /* of the slab told last */
};

static int map_out_slab(void *arg, const struct broker_map_slab *s)
{
	struct map_out *m = arg;
	cJSON *o = proto_array_add_object(m->slabs);

	if (!o || proto_add_number(o, PROTO_F_UID, s->uid) ||
	    !(s->partition ? cJSON_AddStringToObject(o, PROTO_F_PARTITION, s->partition)
	                   : cJSON_AddNullToObject(o, PROTO_F_PARTITION)) ||
	    proto_add_u64(o, PROTO_F_SIZE, s->size) ||
	    !cJSON_AddBoolToObject(o, PROTO_F_DEDICATED, s->dedicated) ||
	    !(m->blocks = cJSON_AddArrayToObject(o, PROTO_F_BLOCKS)))
		return -ENOMEM;
	return 0;
}

static int map_out_block(void *arg, const struct broker_map_block *blk)
{
	static const char *const states[] = {
	    [BROKER_MAP_FREE] = PROTO_V_MAP_FREE,
	    [BROKER_MAP_USED] = PROTO_V_MAP_USED,
	    [BROKER_MAP_LEASE] = PROTO_V_MAP_LEASE,
	    [BROKER_MAP_HELD] = PROTO_V_MAP_HELD,
	};
	struct map_out *m = arg;
	cJSON *o = proto_array_add_object(m->blocks);

	if (!o || proto_add_u64(o, PROTO_F_OFFSET, blk->offset) ||
	    proto_add_u64(o, PROTO_F_SIZE, blk->size) ||
	    !cJSON_AddStringToObject(o, PROTO_F_STATE, states[blk->state]) ||
	    (blk->instance && proto_add_id64(o, PROTO_F_INSTANCE, blk->instance)))
		return -ENOMEM;
	return 0;
}

int dispatch_device_map(struct dispatch_ctx *ctx, const struct proto_device_map_params *p)
{
	int only, rc;
	cJSON *devs = devices_result(ctx, p->has_device, &p->device, &only, &rc);
	if (!devs)
		return rc;
	for (int i = 0; i < broker_device_count(ctx->b); i++) {
		if (only >= 0 && i != only)
			continue;
		cJSON *o = proto_array_add_object(devs);
		struct map_out m = {.slabs = o ? cJSON_AddArrayToObject(o, PROTO_F_SLABS) : NULL};
		if (!m.slabs || proto_add_number(o, PROTO_F_DEVICE, i))
			return -ENOMEM;
		rc = broker_device_map(ctx->b, i, map_out_slab, map_out_block, &m);
		if (rc < 0)
			return rc;
	}
	return 0;
}
