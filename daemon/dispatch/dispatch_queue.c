/*
 * dispatch_queue.c - queued requests with coordinated chunking (cubie's
 * queue_request / allocate_queue / get_chunk_parameters /
 * compute_chunked_shapes). Their claims are in dispatch_claim.c.
 *
 * queue_request stores labelled array requests on an instance. Any member
 * of a stream group then sends allocate_queue: one chunk count along the run
 * axis is computed for everything the group has queued so that one chunk of
 * every array fits at once (the group's available memory, each member's
 * headroom in active mode, each device's capacity), every array is
 * allocated at its chunked shape, charged to its own instance, and every
 * member hears `allocation_ready` with its part. Those allocations are
 * "unclaimed" until the member's client sends claim for each: the claim's
 * reply is an alloc reply (handle and descriptor the first time), which
 * keeps the slab bookkeeping of both sides in step.
 *
 * A request may be host memory ("pinned" or "mapped"): it is cut to the same
 * chunk length as the device arrays but is not device memory, so it does
 * not count in the chunk count; allocate_queue makes it a broker_host of
 * its owner (max_host_memory), unclaimed until claim passes its descriptor.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch_internal.h"
#include "log.h"

struct parsed_request {
	const char *label;
	struct policy_array arr;
	enum broker_memory type;
};

static const char *const memory_names[] = {
    [BROKER_MEM_DEVICE] = PROTO_V_MEM_DEVICE,
    [BROKER_MEM_PINNED] = PROTO_V_MEM_PINNED,
    [BROKER_MEM_MAPPED] = PROTO_V_MEM_MAPPED,
};

/* The decoded requests as the policy's arrays: host memory is pinned or
 * mapped, managed memory is refused (as alloc refuses it: unified memory
 * cannot be shared across processes), and every array's bytes must fit in
 * 64 bits. */
static int queue_requests(struct dispatch_ctx *ctx, const struct proto_queue *q,
                          struct parsed_request *out, int *n)
{
	static const enum broker_memory types[] = {
	    [PROTO_MEMORY_DEVICE] = BROKER_MEM_DEVICE,
	    [PROTO_MEMORY_PINNED] = BROKER_MEM_PINNED,
	    [PROTO_MEMORY_MAPPED] = BROKER_MEM_MAPPED,
	};
	for (unsigned i = 0; i < q->count; i++) {
		const struct proto_queue_item *it = &q->item[i];
		struct policy_array *a = &out[i].arr;
		uint64_t bytes;
		memset(&out[i], 0, sizeof(out[i]));
		int type = it->has_type ? it->type : PROTO_MEMORY_DEVICE;
		if (type == PROTO_MEMORY_MANAGED)
			return dispatch_managed_refused(ctx); /* as alloc refuses it */
		out[i].label = it->label;
		out[i].type = types[type];
		memcpy(a->shape, it->shape.dim, sizeof(a->shape));
		a->ndim = it->shape.ndim;
		a->elem_size = (uint64_t)it->elem_size;
		a->axis = it->has_axis ? (unsigned)it->axis : 0;
		a->unchunkable = it->has_unchunkable && it->unchunkable;
		if (policy_array_bytes(a, POOL_GRANULE, &bytes) < 0)
			return dispatch_param_error(ctx, -ERANGE, PROTO_F_SHAPE,
			                            "a size that fits in 64 bits");
	}
	*n = (int)q->count;
	return 0;
}

int dispatch_queue_request(struct dispatch_ctx *ctx, const struct proto_queue_request_params *p)
{
	struct parsed_request reqs[PROTO_MAX_REQUESTS];
	struct broker_instance *inst;
	int n;
	int rc = dispatch_target_instance(ctx, p->instance, &inst);
	if (rc == 0)
		rc = queue_requests(ctx, &p->requests, reqs, &n);
	if (rc < 0)
		return rc;
	struct broker_queued put[PROTO_MAX_REQUESTS];
	for (int i = 0; i < n; i++) {
		snprintf(put[i].label, sizeof(put[i].label), "%s", reqs[i].label);
		put[i].arr = reqs[i].arr;
		put[i].type = reqs[i].type;
	}
	rc = broker_queue_put(inst, put, (unsigned)n);
	if (rc == -EMFILE) {
		proto_error_set(&ctx->err, PROTO_E_LIMIT,
		                "limit reached: at most %d requests queued on an instance",
		                PROTO_MAX_QUEUED);
		ctx->data = cJSON_CreateObject();
		if (ctx->data) {
			cJSON_AddStringToObject(ctx->data, PROTO_F_LIMIT, PROTO_V_LIMIT_MAX_QUEUED);
			cJSON_AddNumberToObject(ctx->data, PROTO_F_VALUE, PROTO_MAX_QUEUED);
		}
	}
	if (rc < 0)
		return rc;
	cJSON *r = dispatch_result(ctx);
	if (!r || proto_add_id64(r, PROTO_F_INSTANCE, inst->id) ||
	    !cJSON_AddStringToObject(r, PROTO_F_GROUP, inst->pol.group) ||
	    !cJSON_AddNumberToObject(r, PROTO_F_QUEUED, inst->queued_count))
		return -ENOMEM;
	return 0;
}

static cJSON *shape_json(const uint64_t *shape, unsigned ndim)
{
	cJSON *arr = cJSON_CreateArray();
	for (unsigned i = 0; arr && i < ndim; i++) {
		cJSON *n = cJSON_CreateNumber((double)shape[i]);
		if (!n || !cJSON_AddItemToArray(arr, n)) {
			cJSON_Delete(n);
			cJSON_Delete(arr);
			return NULL;
		}
	}
	return arr;
}

/* The result's one warning (chunking_json() is the only one to warn). */
static int add_warning(cJSON *r, const char *text)
{
	cJSON *arr = cJSON_AddArrayToObject(r, PROTO_F_WARNINGS);
	cJSON *s = cJSON_CreateString(text);
	if (!arr || !s || !cJSON_AddItemToArray(arr, s)) {
		cJSON_Delete(s);
		return -ENOMEM;
	}
	log_warn("%s", text);
	return 0;
}

/* The figures every chunking result shares. */
static int chunking_json(cJSON *r, const struct policy_chunking *c)
{
	if (proto_add_u64(r, PROTO_F_AXIS_LENGTH, c->axis_length) ||
	    proto_add_u64(r, PROTO_F_CHUNKS, c->chunks) ||
	    proto_add_u64(r, PROTO_F_CHUNK_LENGTH, c->chunk_length) ||
	    proto_add_u64(r, PROTO_F_REQUEST_BYTES, c->request_bytes) ||
	    proto_add_u64(r, PROTO_F_CHUNK_BYTES, c->chunk_bytes) ||
	    proto_add_u64(r, PROTO_F_AVAILABLE, c->available))
		return -ENOMEM;
	if (c->warn & POLICY_WARN_OVERSIZED) {
		char text[160];
		snprintf(text, sizeof(text),
		         "the request (%llu bytes) exceeds the available memory (%llu bytes) more "
		         "than %d times",
		         (unsigned long long)c->request_bytes, (unsigned long long)c->available,
		         POLICY_CHUNK_WARN);
		return add_warning(r, text);
	}
	return 0;
}

/* Not even one run per chunk fits `available`. */
static int chunk_oom(struct dispatch_ctx *ctx, const char *where, uint64_t least,
                     uint64_t available, bool quota)
{
	proto_error_set(&ctx->err, quota ? PROTO_E_QUOTA : PROTO_E_NO_MEMORY,
	                "%s: %s has %llu bytes available; one run per chunk needs %llu",
	                quota ? "quota exceeded" : "out of memory", where,
	                (unsigned long long)available, (unsigned long long)least);
	ctx->data = cJSON_CreateObject();
	if (ctx->data) {
		proto_add_u64(ctx->data, PROTO_F_REQUESTED, least);
		proto_add_u64(ctx->data, PROTO_F_AVAILABLE, available);
	}
	return -ENOSPC;
}

/* The longest run axis among the chunkable arrays (host ones included:
 * they are cut to the same chunk length), at least 1. */
static uint64_t longest_axis(const struct policy_array *arrays, size_t n)
{
	uint64_t axis = 1;
	for (size_t i = 0; i < n; i++) {
		if (!arrays[i].unchunkable && arrays[i].shape[arrays[i].axis] > axis)
			axis = arrays[i].shape[arrays[i].axis];
	}
	return axis;
}

/*
 * The chunking of the n device arrays dev along axis_length: the fewest
 * chunks for one chunk to fit available, or with fixed > 0 that many runs
 * per chunk. Without device arrays (a request of host memory only) one
 * chunk of the whole axis, or of fixed runs. As policy_chunk_parameters and
 * policy_chunk_fixed.
 */
static int chunk_fit(const struct policy_array *dev, size_t n, uint64_t axis_length,
                     uint64_t available, uint64_t fixed, struct policy_chunking *out)
{
	if (n && fixed)
		return policy_chunk_fixed(dev, n, axis_length, fixed, POOL_GRANULE, out);
	if (n)
		return policy_chunk_parameters(dev, n, axis_length, available, POOL_GRANULE, out);
	memset(out, 0, sizeof(*out));
	out->axis_length = axis_length;
	out->chunk_length = fixed && fixed < axis_length ? fixed : axis_length;
	out->chunks = axis_length / out->chunk_length + (axis_length % out->chunk_length != 0);
	out->available = fixed ? 0 : available;
	return 0;
}

int dispatch_chunk_parameters(struct dispatch_ctx *ctx,
                              const struct proto_chunk_parameters_params *p)
{
	struct parsed_request reqs[PROTO_MAX_REQUESTS];
	struct policy_array arrays[PROTO_MAX_REQUESTS], device_arrays[PROTO_MAX_REQUESTS];
	struct policy_chunking c;
	struct policy_group_info gi;
	const char *group = p->has_group ? p->group : NULL;
	uint64_t available = p->has_available ? p->available : 0, space;
	int64_t axis = p->has_axis_length ? p->axis_length : 0;
	int64_t length = p->has_chunk_length ? p->chunk_length : 0;
	int n;
	int rc = queue_requests(ctx, &p->requests, reqs, &n);
	if (rc < 0)
		return rc;
	if (p->has_group + p->has_available + p->has_chunk_length != 1)
		return dispatch_param_error(ctx, -EINVAL, PROTO_F_GROUP,
		                            "given alone: one of '" PROTO_F_GROUP
		                            "', '" PROTO_F_AVAILABLE "' or '" PROTO_F_CHUNK_LENGTH
		                            "'");
	if (p->has_group) {
		rc = dispatch_group_find(ctx, group, DISPATCH_UID(ctx, p, uid), &space, &gi);
		if (rc < 0)
			return rc;
		available = gi.available;
	}
	/* Host arrays are cut like the others but fit no device memory. */
	size_t ndev = 0;
	for (int i = 0; i < n; i++) {
		arrays[i] = reqs[i].arr;
		if (reqs[i].type == BROKER_MEM_DEVICE)
			device_arrays[ndev++] = reqs[i].arr;
	}
	if (!axis)
		axis = (int64_t)longest_axis(arrays, (size_t)n);
	rc = chunk_fit(device_arrays, ndev, (uint64_t)axis, available,
	               p->has_chunk_length ? (uint64_t)length : 0, &c);
	if (rc == -ENOMEM)
		return chunk_oom(ctx, group ? group : "the request", c.chunk_bytes, available,
		                 false);
	if (rc < 0)
		return dispatch_param_error(ctx, -ERANGE, PROTO_F_REQUESTS,
		                            "sizes that fit in 64 bits");
	cJSON *r = dispatch_result(ctx), *out;
	if (!r || chunking_json(r, &c) || !(out = cJSON_AddArrayToObject(r, PROTO_F_ARRAYS)))
		return -ENOMEM;
	for (int i = 0; i < n; i++) {
		uint64_t shape[POLICY_MAX_DIMS];
		cJSON *o = cJSON_CreateObject();
		policy_chunked_shape(&arrays[i], c.chunk_length, shape);
		if (!o || !cJSON_AddItemToArray(out, o)) {
			cJSON_Delete(o);
			return -ENOMEM;
		}
		cJSON *sj = shape_json(shape, arrays[i].ndim);
		if (!cJSON_AddStringToObject(o, PROTO_F_LABEL, reqs[i].label) || !sj ||
		    !cJSON_AddItemToObject(o, PROTO_F_SHAPE, sj)) {
			cJSON_Delete(sj);
			return -ENOMEM;
		}
	}
	return 0;
}

/* Everything a group has queued (own: the member's own queue alone),
 * flattened, with the instance of each. */
struct batch {
	struct broker_instance **owner;
	const struct broker_queued **req;
	struct policy_array *arr;
	uint64_t *ids;
	size_t n;
};

static void batch_free(struct batch *bt)
{
	free(bt->owner);
	free(bt->req);
	free(bt->arr);
	free(bt->ids);
}

static int batch_collect(struct broker *b, const struct policy_instance *member, bool own,
                         struct batch *bt)
{
	const struct list *pos;
	size_t n = 0;
	/* The group lives in the member's policy: its partition's, or the broker's. */
	const struct policy *p =
	    broker_policy_const(b, list_entry(member, const struct broker_instance, pol)->owner);
	memset(bt, 0, sizeof(*bt));
	list_for_each(pos, &p->instances) {
		const struct policy_instance *pi =
		    list_entry(pos, const struct policy_instance, link);
		if (policy_in_group(pi, member->space, member->group) && (!own || pi == member))
			n += list_entry(pi, const struct broker_instance, pol)->queued_count;
	}
	if (!n)
		return 0;
	bt->owner = calloc(n, sizeof(*bt->owner));
	bt->req = calloc(n, sizeof(*bt->req));
	bt->arr = calloc(n, sizeof(*bt->arr));
	bt->ids = calloc(n, sizeof(*bt->ids));
	if (!bt->owner || !bt->req || !bt->arr || !bt->ids) {
		batch_free(bt);
		return -ENOMEM;
	}
	list_for_each(pos, &p->instances) {
		struct policy_instance *pi = list_entry(pos, struct policy_instance, link);
		struct broker_instance *inst = list_entry(pi, struct broker_instance, pol);
		if (!policy_in_group(pi, member->space, member->group) || (own && pi != member))
			continue;
		for (const struct broker_queued *q = broker_queue_next(inst, NULL); q;
		     q = broker_queue_next(inst, q)) {
			bt->owner[bt->n] = inst;
			bt->req[bt->n] = q;
			bt->arr[bt->n] = q->arr;
			bt->n++;
		}
	}
	return 0;
}

/*
 * The fewest chunks for the device arrays of bt selected by inst and device
 * (all when both are unset) to fit `limit`; host arrays are not device
 * memory. 0 with *out, or -ENOSPC with ctx->err set.
 */
static int batch_chunks(struct dispatch_ctx *ctx, const struct batch *bt, uint64_t axis,
                        const struct broker_instance *inst, int device, uint64_t limit,
                        const char *where, bool quota, struct policy_chunking *out)
{
	struct policy_array *sel = calloc(bt->n, sizeof(*sel));
	size_t n = 0;
	if (!sel)
		return -ENOMEM;
	for (size_t i = 0; i < bt->n; i++) {
		if ((inst && bt->owner[i] != inst) ||
		    (device >= 0 && bt->owner[i]->device != device) ||
		    bt->req[i]->type != BROKER_MEM_DEVICE)
			continue;
		sel[n++] = bt->arr[i];
	}
	int rc = chunk_fit(sel, n, axis, limit, 0, out);
	free(sel);
	if (rc == -ENOMEM)
		return chunk_oom(ctx, where, out->chunk_bytes, limit, quota);
	if (rc < 0)
		return dispatch_param_error(ctx, -ERANGE, PROTO_F_REQUESTS,
		                            "sizes that fit in 64 bits");
	return 0;
}

/* allocation_ready for one member: its arrays, their ids and shapes. */
static void send_ready(struct dispatch *d, const struct batch *bt, struct broker_instance *inst,
                       const struct policy_chunking *c)
{
	struct broker *b = d->b;
	cJSON *data = cJSON_CreateObject(), *arrs;
	if (!data || !cJSON_AddStringToObject(data, PROTO_F_GROUP, inst->pol.group) ||
	    proto_add_id64(data, PROTO_F_INSTANCE, inst->id) ||
	    proto_add_u64(data, PROTO_F_CHUNKS, c->chunks) ||
	    proto_add_u64(data, PROTO_F_CHUNK_LENGTH, c->chunk_length) ||
	    proto_add_u64(data, PROTO_F_AXIS_LENGTH, c->axis_length) ||
	    !(arrs = cJSON_AddArrayToObject(data, PROTO_F_ARRAYS)))
		goto oom;
	for (size_t i = 0; i < bt->n; i++) {
		uint64_t shape[POLICY_MAX_DIMS], size;
		enum broker_memory type = bt->req[i]->type;
		cJSON *o, *sj;
		if (bt->owner[i] != inst)
			continue;
		/* Device and host memory share one space of ids. */
		size = broker_allocation_size(b, bt->ids[i]);
		if (!size)
			continue;
		policy_chunked_shape(&bt->arr[i], c->chunk_length, shape);
		o = cJSON_CreateObject();
		if (!o || !cJSON_AddItemToArray(arrs, o))
			goto oom_item;
		sj = shape_json(shape, bt->arr[i].ndim);
		if (!cJSON_AddStringToObject(o, PROTO_F_LABEL, bt->req[i]->label) ||
		    proto_add_id64(o, PROTO_F_ID, bt->ids[i]) || !sj ||
		    !cJSON_AddItemToObject(o, PROTO_F_SHAPE, sj) ||
		    proto_add_u64(o, PROTO_F_SIZE, size) ||
		    !cJSON_AddStringToObject(o, PROTO_F_TYPE, memory_names[type])) {
			cJSON_Delete(sj);
			goto oom;
		}
		continue;
	oom_item:
		cJSON_Delete(o);
		goto oom;
	}
	dispatch_send_event(d, inst->owner, PROTO_EV_ALLOCATION_READY, data);
	return;
oom:
	/* The allocations stay (charged, unclaimed) until freed by label or
	 * the client leaves; the caller's reply still reports the batch. */
	dispatch_event_dropped(inst->owner, PROTO_EV_ALLOCATION_READY);
	cJSON_Delete(data);
}

/* The error of a failed allocation in a batch. */
static int batch_alloc_error(struct dispatch_ctx *ctx, int rc, const struct broker_instance *inst,
                             const struct broker_refusal *host)
{
	if (host->limit == BROKER_LIMIT_HOST) {
		proto_error_set(&ctx->err, PROTO_E_NO_MEMORY,
		                "out of memory: the batch's host memory is over max_host_memory "
		                "(%llu bytes left)",
		                (unsigned long long)host->free);
		return rc;
	}
	switch (rc) {
	case -EDQUOT:
		proto_error_set(
		    &ctx->err, PROTO_E_QUOTA,
		    "quota exceeded: instance %016llx cannot hold its part of the batch",
		    (unsigned long long)inst->id);
		return rc;
	case -ENOMEM:
		proto_error_set(&ctx->err, PROTO_E_NO_MEMORY,
		                "out of memory: device %d could not hold the batch", inst->device);
		return rc;
	case -EMFILE:
		proto_error_set(&ctx->err, PROTO_E_LIMIT,
		                "limit reached: max_allocations of instance %016llx's client",
		                (unsigned long long)inst->id);
		return rc;
	case -ENFILE: /* the user's share of descriptors: as alloc says it */
		return dispatch_broker_error(ctx, rc, PROTO_F_INSTANCE);
	case -ESHUTDOWN:
		proto_error_set(&ctx->err, PROTO_E_SHUTTING_DOWN, "the daemon is shutting down");
		return rc;
	case -EIO:
		proto_error_set(&ctx->err, PROTO_E_BACKEND,
		                "backend error: the %s backend could not provide memory",
		                broker_backend_name(ctx->b));
		return rc;
	default:
		return -ENOMEM;
	}
}

/* The chunk count of the group's batch: the most that any constraint needs
 * (the group's available memory, each member's headroom or device, each
 * device). The chunk length only shrinks as the count grows, so the largest
 * minimal count satisfies them all. Fills gc (chunk_bytes left 0). */
static int batch_chunk_count(struct dispatch_ctx *ctx, const struct batch *bt,
                             const struct policy_instance *member, uint64_t axis,
                             struct policy_chunking *gc)
{
	struct broker *b = ctx->b;
	struct policy_group_info gi;
	struct policy_chunking c;
	char where[160];
	const struct policy *p =
	    broker_policy_const(b, list_entry(member, const struct broker_instance, pol)->owner);
	policy_group_info(p, member->space, member->group, &gi);
	snprintf(where, sizeof(where), "group %s", member->group);
	int rc = batch_chunks(ctx, bt, axis, NULL, -1, gi.available, where, false, gc);
	uint64_t chunks = gc->chunks;
	const struct list *pos;
	for (pos = p->instances.next; rc == 0 && pos != &p->instances; pos = pos->next) {
		const struct policy_instance *pi =
		    list_entry(pos, const struct policy_instance, link);
		const struct broker_instance *m = list_entry(pi, const struct broker_instance, pol);
		if (!policy_in_group(pi, member->space, member->group) || !m->queued_count)
			continue;
		bool active = p->cfg.mode == POLICY_ACTIVE;
		snprintf(where, sizeof(where), "instance %016llx", (unsigned long long)m->id);
		rc = batch_chunks(ctx, bt, axis, m, -1,
		                  active ? policy_headroom(p, pi)
		                         : policy_device_available(p, m->device),
		                  where, active, &c);
		if (rc == 0 && c.chunks > chunks)
			chunks = c.chunks;
	}
	for (int d = 0; rc == 0 && d < broker_device_count(b); d++) {
		snprintf(where, sizeof(where), "device %d", d);
		rc = batch_chunks(ctx, bt, axis, NULL, d, policy_device_available(p, d), where,
		                  false, &c);
		if (rc == 0 && c.chunks > chunks)
			chunks = c.chunks;
	}
	if (rc < 0)
		return rc == -ENOSPC ? -EINVAL : rc;
	gc->chunk_length = axis / chunks + (axis % chunks != 0);
	gc->chunks = axis / gc->chunk_length + (axis % gc->chunk_length != 0);
	gc->chunk_bytes = 0;
	return 0;
}

/* Allocates every array at its chunked shape, all or nothing (on failure
 * what was made is freed and ctx->err says why); adds the device bytes to
 * gc->chunk_bytes. */
static int batch_allocate(struct dispatch_ctx *ctx, struct batch *bt, struct policy_chunking *gc)
{
	struct broker *b = ctx->b;
	struct broker_refusal why = {0};
	size_t done = 0;
	int rc = 0;
	for (; done < bt->n; done++) {
		struct policy_array chunked = bt->arr[done];
		enum broker_memory type = bt->req[done]->type;
		uint64_t bytes;
		policy_chunked_shape(&bt->arr[done], gc->chunk_length, chunked.shape);
		policy_array_bytes(&chunked, POOL_GRANULE, &bytes);
		if (type != BROKER_MEM_DEVICE) {
			rc = broker_host_alloc_queued(b, bt->owner[done], bytes,
			                              type == BROKER_MEM_MAPPED,
			                              bt->req[done]->label, &bt->ids[done], &why);
			if (rc < 0)
				break;
			continue;
		}
		gc->chunk_bytes += bytes; /* device memory: what the chunk count fitted */
		rc = broker_alloc_queued(b, bt->owner[done], bytes, bt->req[done]->label,
		                         &bt->ids[done]);
		if (rc < 0)
			break;
	}
	if (rc < 0) {
		rc = batch_alloc_error(ctx, rc, bt->owner[done], &why);
		while (done--)
			broker_free(b, bt->owner[done]->owner, bt->ids[done]);
	}
	return rc;
}

/* Every member hears its part; the queues are spent. Returns the number of
 * members. */
static unsigned batch_announce(struct dispatch_ctx *ctx, const struct batch *bt,
                               const struct policy_chunking *gc)
{
	unsigned members = 0;
	for (size_t i = 0; i < bt->n; i++) {
		if (i > 0 && bt->owner[i] == bt->owner[i - 1])
			continue;
		members++;
		send_ready(ctx->d, bt, bt->owner[i], gc);
	}
	for (size_t i = 0; i < bt->n; i++)
		broker_queue_clear(bt->owner[i]);
	return members;
}

int dispatch_allocate_queue(struct dispatch_ctx *ctx, const struct proto_allocate_queue_params *p)
{
	struct broker_instance *inst;
	struct batch bt;
	struct policy_chunking gc;
	int rc = dispatch_target_instance(ctx, p->instance, &inst);
	if (rc < 0)
		return rc;
	/* The group's free leases come back first (on the first run), so
	 * that a chunk count never depends on what its members leased
	 * before: held while those recalls are out. */
	if (dispatch_hold(ctx, broker_recall_group(ctx->b, inst, !ctx->retry)))
		return 0;
	/* The group of the instance's user: stream groups are per user. */
	const char *group = inst->pol.group;
	/* own: the instance's queue alone, chunked in the group's memory
	 * all the same (cubie 0.17: another owner's requests, maybe half
	 * queued, wait for their owner). */
	bool own = p->has_own && p->own;
	rc = batch_collect(ctx->b, &inst->pol, own, &bt);
	if (rc < 0)
		return rc;
	if (!bt.n) {
		proto_error_set(
		    &ctx->err, PROTO_E_PARAMS,
		    own ? "invalid params: nothing is queued on the instance in group %s"
		        : "invalid params: nothing is queued in group %s",
		    group);
		snprintf(ctx->err.field, sizeof(ctx->err.field), PROTO_F_INSTANCE);
		return -EINVAL;
	}
	rc = batch_chunk_count(ctx, &bt, &inst->pol, longest_axis(bt.arr, bt.n), &gc);
	if (rc == 0)
		rc = batch_allocate(ctx, &bt, &gc);
	if (rc < 0) {
		batch_free(&bt);
		return rc;
	}
	unsigned members = batch_announce(ctx, &bt, &gc);
	log_info("group %s: %zu arrays of %u instances allocated in %llu chunks of %llu runs",
	         group, bt.n, members, (unsigned long long)gc.chunks,
	         (unsigned long long)gc.chunk_length);
	batch_free(&bt);
	cJSON *r = dispatch_result(ctx);
	if (!r || !cJSON_AddStringToObject(r, PROTO_F_GROUP, group) ||
	    !cJSON_AddNumberToObject(r, PROTO_F_MEMBERS, members) || chunking_json(r, &gc))
		return -ENOMEM;
	return 0;
}
