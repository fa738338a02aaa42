/*
 * dispatch_vram.c - the VRAM policy requests: policy (the query),
 * set_proportion, set_auto, set_group, group_info, and the admin ones
 * set_mode and set_limit.
 *
 * An instance may be changed by the client that registered it, or by an
 * administrator (root or the admin group: session->admin) for any
 * instance. A user sees its own instances and stream groups (groups are per
 * user) and other users' only as totals (broker_sees): another user's
 * instance or group is answered exactly as an unknown one, so that ids and
 * names reveal nothing. Another connection of the same user is visible in
 * `policy`, so changing its instance is permission_denied.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "dispatch_internal.h"
#include "log.h"

int dispatch_policy_error(struct dispatch_ctx *ctx, const struct policy *p, int rc, int device,
                          double proportion)
{
	const struct policy_device *dev = &p->dev[device];
	switch (rc) {
	case -ENOSPC:
		proto_error_set(&ctx->err, PROTO_E_PARAMS,
		                "invalid params: proportion %.6g would take the manual pool of "
		                "device %d over 1 (its instances hold %.6g)",
		                proportion, device, dev->manual);
		break;
	case -EUSERS:
		if (proportion > 0)
			proto_error_set(
			    &ctx->err, PROTO_E_PARAMS,
			    "invalid params: proportion %.6g would leave the auto pool of "
			    "device %d under its minimum of %.6g for each of its %u "
			    "auto " PROTO_F_INSTANCES,
			    proportion, device, p->cfg.min_auto_share, dev->n_auto);
		else
			proto_error_set(
			    &ctx->err, PROTO_E_PARAMS,
			    "invalid params: the auto pool of device %d (%.6g) has no room "
			    "for another auto instance at the minimum share of %.6g",
			    device, dev->manual < 1 ? 1 - dev->manual : 0, p->cfg.min_auto_share);
		break;
	default:
		proto_error_set(&ctx->err, PROTO_E_PARAMS,
		                "invalid params: 'proportion' must be a number in (0, 1]");
		break;
	}
	snprintf(ctx->err.field, sizeof(ctx->err.field), PROTO_F_PROPORTION);
	return rc;
}

int dispatch_policy_warnings(struct dispatch_ctx *ctx, const struct policy *p, cJSON *result,
                             int device)
{
	const struct policy_device *dev = &p->dev[device];
	double pool = dev->manual < 1 ? 1 - dev->manual : 0;
	char text[128];
	if (pool >= POLICY_AUTO_WARN)
		return 0;
	snprintf(text, sizeof(text),
	         "the auto pool of device %d is %.1f%% of its capacity (under %.0f%%)", device,
	         pool * 100, POLICY_AUTO_WARN * 100);
	log_warn("session %llu: %s", (unsigned long long)ctx->s->id, text);
	cJSON *arr = cJSON_AddArrayToObject(result, PROTO_F_WARNINGS);
	cJSON *str = cJSON_CreateString(text);
	if (!arr || !str || !cJSON_AddItemToArray(arr, str)) {
		cJSON_Delete(str);
		return -ENOMEM;
	}
	return 0;
}

/* One instance as `policy` and the setters describe it. */
static int instance_json(struct broker *b, cJSON *o, const struct broker_instance *inst)
{
	const struct policy_instance *pi = &inst->pol;
	const struct session *s = inst->owner;
	const struct policy *p = broker_policy_const(b, s);
	if (proto_add_id64(o, PROTO_F_INSTANCE, inst->id) ||
	    !cJSON_AddStringToObject(o, PROTO_F_NAME, inst->name) ||
	    proto_add_id64(o, PROTO_F_SESSION, s->id) || proto_add_number(o, PROTO_F_PID, s->pid) ||
	    proto_add_number(o, PROTO_F_UID, s->uid) ||
	    proto_add_number(o, PROTO_F_DEVICE, inst->device) ||
	    !cJSON_AddStringToObject(o, PROTO_F_GROUP, pi->group) ||
	    !cJSON_AddBoolToObject(o, PROTO_F_GROUPED, policy_is_grouped(p, pi)) ||
	    !(pi->proportion > 0 ? cJSON_AddNumberToObject(o, PROTO_F_PROPORTION, pi->proportion)
	                         : cJSON_AddNullToObject(o, PROTO_F_PROPORTION)) ||
	    proto_add_number(o, PROTO_F_SHARE, pi->share) ||
	    proto_add_u64(o, PROTO_F_CAP, pi->cap) || proto_add_u64(o, PROTO_F_USED, pi->used) ||
	    proto_add_u64(o, PROTO_F_FREE, policy_headroom(p, pi)) ||
	    proto_add_u64(o, PROTO_F_LEASED, inst->leased) ||
	    proto_add_u64(o, PROTO_F_RECALLS_SENT, inst->recalls_sent) ||
	    proto_add_u64(o, PROTO_F_RECALLS_ANSWERED, inst->recalls_answered) ||
	    proto_add_u64(o, PROTO_F_RECALLS_PENDING, inst->recall_epoch != 0) ||
	    proto_add_u64(o, PROTO_F_RECALLS_TIMED_OUT, inst->recalls_timed_out))
		return -ENOMEM;
	return 0;
}

int dispatch_limit_json(const struct policy *p, cJSON *o, int i)
{
	const struct policy_device *dev = &p->dev[i];
	if (proto_add_u64(o, PROTO_F_CAPACITY, dev->capacity))
		return -ENOMEM;
	if (dev->limit ? proto_add_u64(o, PROTO_F_LIMIT, dev->limit) != 0
	               : !cJSON_AddNullToObject(o, PROTO_F_LIMIT))
		return -ENOMEM;
	if (!(dev->limit_fraction > 0
	          ? cJSON_AddNumberToObject(o, PROTO_F_LIMIT_FRACTION, dev->limit_fraction)
	          : cJSON_AddNullToObject(o, PROTO_F_LIMIT_FRACTION)))
		return -ENOMEM;
	return 0;
}

static int device_json(const struct policy *p, cJSON *o, int i)
{
	const struct policy_device *dev = &p->dev[i];
	if (proto_add_number(o, PROTO_F_DEVICE, i) || proto_add_u64(o, PROTO_F_TOTAL, dev->total) ||
	    dispatch_limit_json(p, o, i) || proto_add_u64(o, PROTO_F_USED, dev->used) ||
	    proto_add_u64(o, PROTO_F_AVAILABLE, policy_device_available(p, i)) ||
	    proto_add_number(o, PROTO_F_MANUAL, dev->manual) ||
	    proto_add_number(o, PROTO_F_AUTO, dev->manual < 1 ? 1 - dev->manual : 0) ||
	    proto_add_number(o, PROTO_F_MANUAL_INSTANCES, dev->n_manual) ||
	    proto_add_number(o, PROTO_F_AUTO_INSTANCES, dev->n_auto) ||
	    proto_add_u64(o, PROTO_F_AUTO_CAP,
	                  p->cfg.mode == POLICY_ACTIVE ? dev->auto_cap : dev->capacity))
		return -ENOMEM;
	return 0;
}

/* The devices of policy p: a partition's are those it has a size on. */
static int devices_json(const struct policy *p, bool part, cJSON *r)
{
	cJSON *devs = cJSON_AddArrayToObject(r, PROTO_F_DEVICES);
	if (!devs)
		return -ENOMEM;
	for (int i = 0; i < p->device_count; i++) {
		if (part && !p->dev[i].total)
			continue;
		cJSON *o = proto_array_add_object(devs);
		if (!o || device_json(p, o, i))
			return -ENOMEM;
	}
	return 0;
}

int dispatch_policy(struct dispatch_ctx *ctx, const struct proto_policy_params *params)
{
	(void)params;
	struct broker *b = ctx->b;
	/* A session inside a partition sees the partition as its devices. */
	const struct policy *p = broker_policy_const(b, ctx->s);
	struct broker_summary sum;
	broker_summary(b, &sum);
	cJSON *r = dispatch_result(ctx), *insts;
	if (!r || !cJSON_AddStringToObject(r, PROTO_F_MODE, policy_mode_name(p->cfg.mode)) ||
	    !cJSON_AddStringToObject(r, PROTO_F_ALLOCATOR, broker_allocator_name(sum.allocator)) ||
	    proto_add_number(r, PROTO_F_MIN_AUTO_SHARE, p->cfg.min_auto_share) ||
	    devices_json(p, ctx->s->part != NULL, r) ||
	    (ctx->s->part && !cJSON_AddStringToObject(r, PROTO_F_PARTITION, ctx->s->part->name)) ||
	    !(insts = cJSON_AddArrayToObject(r, PROTO_F_INSTANCES)))
		return -ENOMEM;
	unsigned hidden = 0;
	uint64_t hidden_used = 0;
	const struct list *pos;
	list_for_each(pos, &p->instances) {
		const struct policy_instance *pi =
		    list_entry(pos, const struct policy_instance, link);
		const struct broker_instance *inst =
		    list_entry(pi, const struct broker_instance, pol);
		if (!broker_sees(ctx->s, inst->owner->uid)) {
			hidden++;
			hidden_used += pi->used;
			continue;
		}
		cJSON *o = proto_array_add_object(insts);
		if (!o || instance_json(b, o, inst))
			return -ENOMEM;
	}
	/* Other users' instances as totals only: how many, and what they hold. */
	cJSON *others = cJSON_AddObjectToObject(r, PROTO_F_OTHERS);
	if (!others || proto_add_number(others, PROTO_F_INSTANCES, hidden) ||
	    proto_add_u64(others, PROTO_F_USED, hidden_used))
		return -ENOMEM;
	return 0;
}

int dispatch_target_instance(struct dispatch_ctx *ctx, uint64_t id, struct broker_instance **out)
{
	struct broker_instance *inst = broker_instance_get(ctx->b, id);
	/* Another user's instance: the same answer as one that does not exist. */
	if (!inst || !broker_sees(ctx->s, inst->owner->uid)) {
		proto_error_set(&ctx->err, PROTO_E_NOT_FOUND, "no such instance");
		return -ENOENT;
	}
	if (inst->owner != ctx->s && !ctx->s->admin) {
		proto_error_set(
		    &ctx->err, PROTO_E_PERMISSION,
		    "permission denied: instance %016llx belongs to another connection; "
		    "changing it is for root and the admin group",
		    (unsigned long long)id);
		return -EPERM;
	}
	*out = inst;
	return 0;
}

/* The result of a setter: the instance as it is now, with warnings. */
static int instance_result(struct dispatch_ctx *ctx, const struct broker_instance *inst, bool warn)
{
	cJSON *r = dispatch_result(ctx);
	if (!r || instance_json(ctx->b, r, inst) ||
	    (warn && dispatch_policy_warnings(ctx, broker_policy_const(ctx->b, inst->owner), r,
	                                      inst->device)))
		return -ENOMEM;
	return 0;
}

int dispatch_set_proportion(struct dispatch_ctx *ctx, const struct proto_set_proportion_params *p)
{
	struct broker_instance *inst;
	double proportion = p->proportion;
	int rc = dispatch_target_instance(ctx, p->instance, &inst);
	if (rc < 0)
		return rc;
	rc = broker_set_proportion(ctx->b, inst, proportion);
	if (rc < 0)
		return dispatch_policy_error(ctx, broker_policy_const(ctx->b, inst->owner), rc,
		                             inst->device, proportion);
	log_info("session %llu: instance %016llx: proportion %.6g, cap %llu",
	         (unsigned long long)ctx->s->id, (unsigned long long)inst->id, proportion,
	         (unsigned long long)inst->pol.cap);
	return instance_result(ctx, inst, true);
}

int dispatch_set_auto(struct dispatch_ctx *ctx, const struct proto_set_auto_params *p)
{
	struct broker_instance *inst;
	int rc = dispatch_target_instance(ctx, p->instance, &inst);
	if (rc < 0)
		return rc;
	rc = broker_set_auto(ctx->b, inst);
	if (rc < 0)
		return dispatch_policy_error(ctx, broker_policy_const(ctx->b, inst->owner), rc,
		                             inst->device, 0);
	log_info("session %llu: instance %016llx: auto pool, cap %llu",
	         (unsigned long long)ctx->s->id, (unsigned long long)inst->id,
	         (unsigned long long)inst->pol.cap);
	return instance_result(ctx, inst, true);
}

int dispatch_set_group(struct dispatch_ctx *ctx, const struct proto_set_group_params *p)
{
	struct broker_instance *inst;
	int rc = dispatch_target_instance(ctx, p->instance, &inst);
	if (rc < 0)
		return rc;
	rc = broker_set_group(ctx->b, inst, p->group);
	if (rc < 0)
		return dispatch_param_error(ctx, rc, PROTO_F_GROUP, PROTO_NAME_EXPECTED);
	return instance_result(ctx, inst, false);
}

int dispatch_group_find(struct dispatch_ctx *ctx, const char *group, uid_t uid, uint64_t *space,
                        struct policy_group_info *gi)
{
	/* Another user's group, for a caller who may not see it, is not there. */
	if (!broker_sees(ctx->s, uid) ||
	    policy_group_info(broker_policy_const(ctx->b, ctx->s), (uint64_t)uid, group, gi) < 0) {
		proto_error_set(&ctx->err, PROTO_E_NOT_FOUND, "no such group");
		return -ENOENT;
	}
	*space = (uint64_t)uid;
	return 0;
}

int dispatch_group_info(struct dispatch_ctx *ctx, const struct proto_group_info_params *params)
{
	const char *group = params->group;
	struct policy_group_info gi;
	uint64_t space;
	int rc = dispatch_group_find(ctx, group, DISPATCH_UID(ctx, params, uid), &space, &gi);
	if (rc < 0)
		return rc;
	cJSON *r = dispatch_result(ctx), *members;
	if (!r || !cJSON_AddStringToObject(r, PROTO_F_GROUP, group) ||
	    proto_add_number(r, PROTO_F_UID, (double)space) ||
	    !(members = cJSON_AddArrayToObject(r, PROTO_F_MEMBERS)) ||
	    proto_add_u64(r, PROTO_F_USED, gi.used) ||
	    proto_add_u64(r, PROTO_F_AVAILABLE, gi.available))
		return -ENOMEM;
	const struct list *pos;
	const struct policy *p = broker_policy_const(ctx->b, ctx->s);
	for (pos = p->instances.next; pos != &p->instances; pos = pos->next) {
		const struct policy_instance *pi =
		    list_entry(pos, const struct policy_instance, link);
		char id[17];
		if (!policy_in_group(pi, space, group))
			continue;
		snprintf(id, sizeof(id), "%016llx", (unsigned long long)pi->id);
		cJSON *str = cJSON_CreateString(id);
		if (!str || !cJSON_AddItemToArray(members, str)) {
			cJSON_Delete(str);
			return -ENOMEM;
		}
	}
	if (gi.warn & POLICY_WARN_GROUP_FULL) {
		char text[160];
		long double all = (long double)gi.used + (long double)gi.available;
		snprintf(text, sizeof(text), "group %s has used %.1f%% of its memory (over %.0f%%)",
		         group, (double)(gi.used / all * 100), POLICY_GROUP_WARN * 100);
		log_warn("%s", text);
		cJSON *arr = cJSON_AddArrayToObject(r, PROTO_F_WARNINGS);
		cJSON *str = cJSON_CreateString(text);
		if (!arr || !str || !cJSON_AddItemToArray(arr, str)) {
			cJSON_Delete(str);
			return -ENOMEM;
		}
	}
	return 0;
}

int dispatch_set_mode(struct dispatch_ctx *ctx, const struct proto_set_mode_params *p)
{
	enum policy_mode mode = p->mode == PROTO_MODE_ACTIVE ? POLICY_ACTIVE : POLICY_PASSIVE,
	                 previous = broker_policy_const(ctx->b, NULL)->cfg.mode;
	/* Every running client's cap follows now (cap_changed events). */
	broker_set_mode(ctx->b, mode);
	if (mode != previous)
		log_info("session %llu (uid %u): mode %s", (unsigned long long)ctx->s->id,
		         (unsigned)ctx->s->uid, policy_mode_name(mode));
	cJSON *r = dispatch_result(ctx);
	if (!r || !cJSON_AddStringToObject(r, PROTO_F_MODE, policy_mode_name(mode)) ||
	    !cJSON_AddStringToObject(r, PROTO_F_PREVIOUS, policy_mode_name(previous)))
		return -ENOMEM;
	return 0;
}

int dispatch_set_limit(struct dispatch_ctx *ctx, const struct proto_set_limit_params *p)
{
	int device = -1; /* every device */
	uint64_t size = p->has_size ? p->size : 0;
	double fraction = p->has_fraction ? p->fraction : 0;
	if (p->has_device && dispatch_device(ctx, &p->device, &device) < 0)
		return -ENODEV;
	int rs = p->has_size ? 0 : -ENOENT, rf = p->has_fraction ? 0 : -ENOENT;
	/* Exactly one of the two: "size": "0" is how a limit is removed. */
	if ((rs == 0) == (rf == 0))
		return dispatch_param_error(ctx, rs == 0 ? -EINVAL : -ENOENT, PROTO_F_SIZE,
		                            "either '" PROTO_F_SIZE
		                            "' (bytes, \"0\" = no limit) or '" PROTO_F_FRACTION
		                            "'");
	int rc = broker_set_limit(ctx->b, device, size, rf == 0 ? fraction : 0);
	if (rc < 0)
		return dispatch_param_error(ctx, rc, PROTO_F_SIZE, "a valid limit");
	if (rf == 0)
		log_info("session %llu (uid %u): limit %.6g of device memory on %s",
		         (unsigned long long)ctx->s->id, (unsigned)ctx->s->uid, fraction,
		         device < 0 ? "every device" : "one device");
	else
		log_info("session %llu (uid %u): limit %llu bytes on %s",
		         (unsigned long long)ctx->s->id, (unsigned)ctx->s->uid,
		         (unsigned long long)size, device < 0 ? "every device" : "one device");
	cJSON *r = dispatch_result(ctx);
	if (!r || devices_json(broker_policy_const(ctx->b, NULL), false, r))
		return -ENOMEM;
	return 0;
}

int dispatch_set_allocator(struct dispatch_ctx *ctx, const struct proto_set_allocator_params *p)
{
	static const enum broker_allocator kinds[] = {
	    [PROTO_ALLOCATOR_POOL] = BROKER_ALLOCATOR_POOL,
	    [PROTO_ALLOCATOR_DIRECT] = BROKER_ALLOCATOR_DIRECT,
	    [PROTO_ALLOCATOR_ASYNC] = BROKER_ALLOCATOR_ASYNC,
	};
	struct broker_summary sum;
	broker_summary(ctx->b, &sum);
	enum broker_allocator kind = kinds[p->allocator], previous = sum.allocator;
	const char *name = broker_allocator_name(kind);
	uint64_t allocs, attachments;
	int rc = broker_set_allocator(ctx->b, kind, &allocs, &attachments);
	if (rc == -EOPNOTSUPP) {
		int dev = 0;
		while (dev < broker_device_count(ctx->b) - 1 &&
		       broker_device_info(ctx->b, dev)->async)
			dev++;
		proto_error_set(&ctx->err, PROTO_E_NOT_SUPPORTED,
		                "allocator '%s' is not available: device %d (%s) of the %s backend "
		                "has no stream-ordered memory pool that other processes can import",
		                name, dev, broker_device_info(ctx->b, dev)->name,
		                broker_backend_name(ctx->b));
		return rc;
	}
	if (rc < 0)
		return -ENOMEM;
	if (kind != previous)
		log_info("session %llu (uid %u): allocator %s; %llu allocations and %llu "
		         "attachments released",
		         (unsigned long long)ctx->s->id, (unsigned)ctx->s->uid, name,
		         (unsigned long long)allocs, (unsigned long long)attachments);
	cJSON *r = dispatch_result(ctx);
	if (!r || !cJSON_AddStringToObject(r, PROTO_F_ALLOCATOR, broker_allocator_name(kind)) ||
	    !cJSON_AddStringToObject(r, PROTO_F_PREVIOUS, broker_allocator_name(previous)) ||
	    proto_add_u64(r, PROTO_F_ALLOCATIONS, allocs) ||
	    proto_add_u64(r, PROTO_F_ATTACHMENTS, attachments))
		return -ENOMEM;
	return 0;
}
