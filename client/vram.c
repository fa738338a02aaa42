/*
 * vram.c - the calls that share VRAM out between instances: proportions,
 * pools, groups, mode and limit, and the queries behind them (the `policy`
 * and `group_info` requests); queued requests and chunking; and the
 * administrator's resets (invalidate_all, set_allocator). The daemon's
 * policy arithmetic is daemon/policy.c: this file only asks for it.
 */
#include "client.h"
#include "error.h"
#include "export.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

/* The public header's arrays, sized by the protocol's limits (it cannot
 * include schema.h: it is installed alone). */
_Static_assert(sizeof(((struct gpb_array_request *)0)->shape) / sizeof(uint64_t) == PROTO_MAX_DIMS,
               "gpb_array_request.shape holds PROTO_MAX_DIMS dimensions");
_Static_assert(sizeof(((struct gpb_instance_info *)0)->name) == PROTO_MAX_NAME + 1 &&
                   sizeof(((struct gpb_instance_info *)0)->group) == PROTO_MAX_NAME + 1,
               "gpb_instance_info's names hold PROTO_MAX_NAME bytes");

/* Copies a string member into a fixed buffer; a missing or long one is a
 * protocol error. */
static int copy_string(const cJSON *obj, const char *key, char *buf, size_t size)
{
	const char *v;

	if (proto_get_string(obj, key, size - 1, &v) < 0)
		return error_set(GPB_E_PROTOCOL, "reply without a valid '%s'", key);
	snprintf(buf, size, "%s", v);
	return 0;
}

/* Reads an instance object as `policy` and the setters describe it. */
static int instance_parse(const cJSON *o, struct gpb_instance_info *out)
{
	struct gpb_instance_info info = {0};
	const cJSON *prop = cJSON_GetObjectItemCaseSensitive(o, PROTO_F_PROPORTION);
	const cJSON *grouped = cJSON_GetObjectItemCaseSensitive(o, PROTO_F_GROUPED);
	const cJSON *warnings = cJSON_GetObjectItemCaseSensitive(o, PROTO_F_WARNINGS);
	int64_t device;

	if (proto_get_id64(o, PROTO_F_INSTANCE, &info.instance) < 0 ||
	    proto_get_id64(o, PROTO_F_SESSION, &info.session) < 0 ||
	    proto_get_int(o, PROTO_F_DEVICE, 0, INT_MAX, &device) < 0 ||
	    proto_get_double(o, PROTO_F_SHARE, 0, 1, &info.share) < 0 ||
	    proto_get_u64(o, PROTO_F_CAP, 0, UINT64_MAX, &info.cap) < 0 ||
	    proto_get_u64(o, PROTO_F_USED, 0, UINT64_MAX, &info.used) < 0 ||
	    proto_get_u64(o, PROTO_F_FREE, 0, UINT64_MAX, &info.free) < 0 ||
	    !cJSON_IsBool(grouped) ||
	    !(cJSON_IsNull(prop) ||
	      proto_get_double(o, PROTO_F_PROPORTION, 0, 1, &info.proportion) == 0))
		return error_set(GPB_E_PROTOCOL, "reply without the instance's figures");
	info.device = (int)device;
	info.grouped = cJSON_IsTrue(grouped);
	if (copy_string(o, PROTO_F_NAME, info.name, sizeof(info.name)) < 0 ||
	    copy_string(o, PROTO_F_GROUP, info.group, sizeof(info.group)) < 0)
		return GPB_E_PROTOCOL;
	if (cJSON_IsArray(warnings) && cJSON_IsString(cJSON_GetArrayItem(warnings, 0)))
		snprintf(info.warning, sizeof(info.warning), "%s",
		         cJSON_GetArrayItem(warnings, 0)->valuestring);
	*out = info;
	return 0;
}

/* client_parse_fn for the setters: the result is the instance. */
static int instance_result(const cJSON *result, void *out)
{
	struct gpb_instance_info info;
	int rc = instance_parse(result, &info);

	if (rc == 0 && out)
		*(struct gpb_instance_info *)out = info;
	return rc;
}

/* {"instance": id} plus one more member added by the caller. */
static cJSON *instance_params(uint64_t instance)
{
	return client_params_id(PROTO_F_INSTANCE, instance);
}

GPB_EXPORT int gpb_set_proportion(gpb_client *c, uint64_t instance, double proportion,
                                  struct gpb_instance_info *out)
{
	cJSON *params;
	int rc = client_enter(c);

	if (rc < 0)
		return rc;
	/* Written so that NaN fails too. */
	if (!(proportion > 0 && proportion <= 1)) {
		rc = error_set(GPB_E_INVALID, "gpb_set_proportion: proportion must be in (0, 1]");
		goto out;
	}
	params = instance_params(instance);
	if (params && !cJSON_AddNumberToObject(params, PROTO_F_PROPORTION, proportion)) {
		cJSON_Delete(params);
		params = NULL;
	}
	rc = client_call(c, PROTO_M_SET_PROPORTION, params, instance_result, out);
out:
	client_leave(c);
	return rc;
}

GPB_EXPORT int gpb_set_auto(gpb_client *c, uint64_t instance, struct gpb_instance_info *out)
{
	int rc = client_enter(c);

	if (rc < 0)
		return rc;
	rc = client_call(c, PROTO_M_SET_AUTO, instance_params(instance), instance_result, out);
	client_leave(c);
	return rc;
}

GPB_EXPORT int gpb_set_group(gpb_client *c, uint64_t instance, const char *group,
                             struct gpb_instance_info *out)
{
	cJSON *params;
	int rc = client_enter(c);

	if (rc < 0)
		return rc;
	if (!group || !*group || strlen(group) > PROTO_MAX_NAME) {
		rc = error_set(GPB_E_INVALID, "gpb_set_group: group must be 1-%d bytes",
		               PROTO_MAX_NAME);
		goto out;
	}
	params = instance_params(instance);
	if (params && !cJSON_AddStringToObject(params, PROTO_F_GROUP, group)) {
		cJSON_Delete(params);
		params = NULL;
	}
	rc = client_call(c, PROTO_M_SET_GROUP, params, instance_result, out);
out:
	client_leave(c);
	return rc;
}

/* What gpb_instance_info asks `policy` about, and the answer. */
struct instance_query {
	uint64_t instance;
	struct gpb_instance_info info;
};

static int instance_query_parse(const cJSON *result, void *arg)
{
	struct instance_query *q = arg;
	const cJSON *insts = cJSON_GetObjectItemCaseSensitive(result, PROTO_F_INSTANCES);
	const cJSON *it;

	if (!cJSON_IsArray(insts))
		return error_set(GPB_E_PROTOCOL, "policy reply without 'instances'");
	cJSON_ArrayForEach(it, insts)
	{
		uint64_t id;

		if (proto_get_id64(it, PROTO_F_INSTANCE, &id) == 0 && id == q->instance)
			return instance_parse(it, &q->info);
	}
	return error_set(GPB_E_NOT_FOUND, "no such instance");
}

GPB_EXPORT int gpb_instance_info(gpb_client *c, uint64_t instance, struct gpb_instance_info *out)
{
	struct instance_query q = {.instance = instance};
	int rc = client_enter(c);

	if (rc < 0)
		return rc;
	if (!out) {
		rc = error_set(GPB_E_INVALID, "gpb_instance_info: out is NULL");
		goto out;
	}
	rc = client_call(c, PROTO_M_POLICY, cJSON_CreateObject(), instance_query_parse, &q);
	if (rc == 0)
		*out = q.info;
out:
	client_leave(c);
	return rc;
}

/* What gpb_policy_info asks about, and the answer. */
struct policy_query {
	int device;
	struct gpb_policy_info info;
};

/* A number that may be null (read as 0). */
static int get_optional_double(const cJSON *obj, const char *key, double *out)
{
	if (cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(obj, key))) {
		*out = 0;
		return 0;
	}
	return proto_get_double(obj, key, 0, 1, out);
}

static int policy_query_parse(const cJSON *result, void *arg)
{
	struct policy_query *q = arg;
	struct gpb_policy_info *out = &q->info;
	const cJSON *devs = cJSON_GetObjectItemCaseSensitive(result, PROTO_F_DEVICES);
	const cJSON *mode = cJSON_GetObjectItemCaseSensitive(result, PROTO_F_MODE);
	const cJSON *dev = NULL, *it;
	int64_t n, manual_n, auto_n;

	if (!cJSON_IsString(mode) || !cJSON_IsArray(devs) ||
	    proto_get_double(result, PROTO_F_MIN_AUTO_SHARE, 0, 1, &out->min_auto_share) < 0)
		return error_set(GPB_E_PROTOCOL, "policy reply without mode or devices");
	out->mode = strcmp(mode->valuestring, PROTO_V_MODE_ACTIVE) == 0 ? GPB_MODE_ACTIVE
	                                                                : GPB_MODE_PASSIVE;
	cJSON_ArrayForEach(it, devs)
	{
		if (proto_get_int(it, PROTO_F_DEVICE, 0, INT_MAX, &n) == 0 && n == q->device)
			dev = it;
	}
	if (!dev)
		return error_set(GPB_E_INVALID, "no such device: %d", q->device);
	if (proto_get_u64(dev, PROTO_F_TOTAL, 0, UINT64_MAX, &out->total) < 0 ||
	    proto_get_u64(dev, PROTO_F_CAPACITY, 0, UINT64_MAX, &out->capacity) < 0 ||
	    proto_get_u64(dev, PROTO_F_USED, 0, UINT64_MAX, &out->used) < 0 ||
	    proto_get_u64(dev, PROTO_F_AVAILABLE, 0, UINT64_MAX, &out->available) < 0 ||
	    proto_get_u64(dev, PROTO_F_AUTO_CAP, 0, UINT64_MAX, &out->auto_cap) < 0 ||
	    proto_get_double(dev, PROTO_F_MANUAL, 0, 2, &out->manual) < 0 ||
	    proto_get_double(dev, PROTO_F_AUTO, 0, 1, &out->auto_pool) < 0 ||
	    get_optional_double(dev, PROTO_F_LIMIT_FRACTION, &out->limit_fraction) < 0 ||
	    proto_get_int(dev, PROTO_F_MANUAL_INSTANCES, 0, UINT_MAX, &manual_n) < 0 ||
	    proto_get_int(dev, PROTO_F_AUTO_INSTANCES, 0, UINT_MAX, &auto_n) < 0)
		return error_set(GPB_E_PROTOCOL, "policy reply without the device's figures");
	out->limit = 0;
	if (!cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(dev, PROTO_F_LIMIT)) &&
	    proto_get_u64(dev, PROTO_F_LIMIT, 0, UINT64_MAX, &out->limit) < 0)
		return error_set(GPB_E_PROTOCOL, "policy reply with a bad 'limit'");
	out->manual_instances = (unsigned)manual_n;
	out->auto_instances = (unsigned)auto_n;
	return 0;
}

GPB_EXPORT int gpb_policy_info(gpb_client *c, int device, struct gpb_policy_info *out)
{
	struct policy_query q = {.device = device};
	int rc = client_enter(c);

	if (rc < 0)
		return rc;
	if (!out || device < 0) {
		rc = error_set(GPB_E_INVALID, "gpb_policy_info: out is NULL or device negative");
		goto out;
	}
	rc = client_call(c, PROTO_M_POLICY, cJSON_CreateObject(), policy_query_parse, &q);
	if (rc == 0)
		*out = q.info;
out:
	client_leave(c);
	return rc;
}

static int group_parse(const cJSON *result, void *arg)
{
	struct gpb_group_info *out = arg;
	const cJSON *members = cJSON_GetObjectItemCaseSensitive(result, PROTO_F_MEMBERS);

	if (!cJSON_IsArray(members) ||
	    proto_get_u64(result, PROTO_F_USED, 0, UINT64_MAX, &out->used) < 0 ||
	    proto_get_u64(result, PROTO_F_AVAILABLE, 0, UINT64_MAX, &out->available) < 0)
		return error_set(GPB_E_PROTOCOL, "group_info reply without its figures");
	out->members = (unsigned)cJSON_GetArraySize(members);
	out->nearly_full =
	    cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(result, PROTO_F_WARNINGS));
	return 0;
}

GPB_EXPORT int gpb_group_info(gpb_client *c, const char *group, struct gpb_group_info *out)
{
	struct gpb_group_info info = {0};
	cJSON *params;
	int rc = client_enter(c);

	if (rc < 0)
		return rc;
	if (!out || !group || !*group || strlen(group) > PROTO_MAX_NAME) {
		rc = error_set(GPB_E_INVALID, "gpb_group_info: out and a group of 1-%d bytes",
		               PROTO_MAX_NAME);
		goto out;
	}
	params = cJSON_CreateObject();
	if (params && !cJSON_AddStringToObject(params, PROTO_F_GROUP, group)) {
		cJSON_Delete(params);
		params = NULL;
	}
	rc = client_call(c, PROTO_M_GROUP_INFO, params, group_parse, &info);
	if (rc == 0)
		*out = info;
out:
	client_leave(c);
	return rc;
}

GPB_EXPORT int gpb_set_mode(gpb_client *c, enum gpb_mode mode)
{
	cJSON *params;
	int rc = client_enter(c);

	if (rc < 0)
		return rc;
	if (mode != GPB_MODE_ACTIVE && mode != GPB_MODE_PASSIVE) {
		rc = error_set(GPB_E_INVALID, "gpb_set_mode: unknown mode %d", (int)mode);
		goto out;
	}
	params = cJSON_CreateObject();
	if (params && !cJSON_AddStringToObject(params, PROTO_F_MODE,
	                                       mode == GPB_MODE_ACTIVE ? PROTO_V_MODE_ACTIVE
	                                                               : PROTO_V_MODE_PASSIVE)) {
		cJSON_Delete(params);
		params = NULL;
	}
	rc = client_call(c, PROTO_M_SET_MODE, params, NULL, NULL);
out:
	client_leave(c);
	return rc;
}

GPB_EXPORT int gpb_set_limit(gpb_client *c, int device, uint64_t bytes, double fraction)
{
	cJSON *params;
	int rc = client_enter(c);

	if (rc < 0)
		return rc;
	if (device < -1 || (bytes && fraction != 0) ||
	    (fraction != 0 && !(fraction > 0 && fraction <= 1))) {
		rc = error_set(GPB_E_INVALID, "gpb_set_limit: bytes or a fraction in (0, 1], not "
		                              "both, on a device >= 0 or -1 for all");
		goto out;
	}
	params = cJSON_CreateObject();
	if (params && ((device >= 0 && !cJSON_AddNumberToObject(params, PROTO_F_DEVICE, device)) ||
	               (fraction != 0 ? !cJSON_AddNumberToObject(params, PROTO_F_FRACTION, fraction)
	                              : proto_add_u64(params, PROTO_F_SIZE, bytes) < 0))) {
		cJSON_Delete(params);
		params = NULL;
	}
	rc = client_call(c, PROTO_M_SET_LIMIT, params, NULL, NULL);
out:
	client_leave(c);
	return rc;
}

/* ---- queued requests and chunking ------------------------------------------ */

/* params.requests from @reqs; NULL when out of memory (or @reqs invalid,
 * with the error recorded in *rc). */
static cJSON *requests_json(const struct gpb_array_request *reqs, size_t n, int *rc)
{
	cJSON *arr = cJSON_CreateArray();

	*rc = GPB_E_NOMEM;
	if (!reqs || n < 1 || n > PROTO_MAX_REQUESTS) {
		*rc = error_set(GPB_E_INVALID,
		                "between 1 and " PROTO_STR(PROTO_MAX_REQUESTS) " array requests");
		cJSON_Delete(arr);
		return NULL;
	}
	for (size_t i = 0; arr && i < n; i++) {
		const struct gpb_array_request *r = &reqs[i];
		cJSON *o = cJSON_CreateObject(), *shape;

		if (!r->label || r->ndim < 1 || r->ndim > PROTO_MAX_DIMS || r->axis >= r->ndim ||
		    (r->type && r->type != GPB_HOST_PINNED && r->type != GPB_HOST_MAPPED)) {
			*rc = error_set(GPB_E_INVALID,
			                "array request %zu: label, ndim, axis or type", i);
			cJSON_Delete(o);
			cJSON_Delete(arr);
			return NULL;
		}
		if (!o || !cJSON_AddItemToArray(arr, o)) {
			cJSON_Delete(o);
			break;
		}
		if (!cJSON_AddStringToObject(o, PROTO_F_LABEL, r->label) ||
		    !(shape = cJSON_AddArrayToObject(o, PROTO_F_SHAPE)) ||
		    !cJSON_AddNumberToObject(o, PROTO_F_ELEM_SIZE, r->elem_size) ||
		    !cJSON_AddNumberToObject(o, PROTO_F_AXIS, r->axis) ||
		    (r->unchunkable && !cJSON_AddTrueToObject(o, PROTO_F_UNCHUNKABLE)) ||
		    (r->type &&
		     !cJSON_AddStringToObject(o, PROTO_F_TYPE,
		                              r->type == GPB_HOST_MAPPED ? PROTO_V_MEM_MAPPED
		                                                         : PROTO_V_MEM_PINNED)))
			break;
		for (unsigned d = 0; d < r->ndim; d++) {
			cJSON *dim = cJSON_CreateNumber((double)r->shape[d]);

			if (!dim || !cJSON_AddItemToArray(shape, dim)) {
				cJSON_Delete(dim);
				cJSON_Delete(arr);
				error_set(GPB_E_NOMEM, "out of memory");
				return NULL;
			}
		}
		if (i + 1 == n) {
			*rc = 0;
			return arr;
		}
	}
	cJSON_Delete(arr);
	error_set(GPB_E_NOMEM, "out of memory");
	return NULL;
}

static int queued_parse(const cJSON *result, void *count)
{
	int64_t n;

	if (proto_get_int(result, PROTO_F_QUEUED, 0, INT_MAX, &n) < 0)
		return error_set(GPB_E_PROTOCOL, "queue_request reply without 'queued'");
	*(int *)count = (int)n;
	return 0;
}

GPB_EXPORT int gpb_queue_request(gpb_client *c, uint64_t instance,
                                 const struct gpb_array_request *reqs, size_t n)
{
	cJSON *params = NULL, *arr;
	int rc = client_enter(c), count = 0;

	if (rc < 0)
		return rc;
	arr = requests_json(reqs, n, &rc);
	if (arr) {
		params = instance_params(instance);
		if (!params || !cJSON_AddItemToObject(params, PROTO_F_REQUESTS, arr)) {
			cJSON_Delete(arr);
			cJSON_Delete(params);
			params = NULL;
		}
	} else if (rc != GPB_E_NOMEM) {
		goto out;
	}
	rc = client_call(c, PROTO_M_QUEUE_REQUEST, params, queued_parse, &count);
	if (rc == 0)
		rc = count;
out:
	client_leave(c);
	return rc;
}

static int chunking_parse(const cJSON *result, struct gpb_chunking *out)
{
	struct gpb_chunking ch = {0};

	if (proto_get_u64(result, PROTO_F_AXIS_LENGTH, 0, UINT64_MAX, &ch.axis_length) < 0 ||
	    proto_get_u64(result, PROTO_F_CHUNK_LENGTH, 0, UINT64_MAX, &ch.chunk_length) < 0 ||
	    proto_get_u64(result, PROTO_F_CHUNKS, 0, UINT64_MAX, &ch.chunks) < 0 ||
	    proto_get_u64(result, PROTO_F_REQUEST_BYTES, 0, UINT64_MAX, &ch.request_bytes) < 0 ||
	    proto_get_u64(result, PROTO_F_CHUNK_BYTES, 0, UINT64_MAX, &ch.chunk_bytes) < 0 ||
	    proto_get_u64(result, PROTO_F_AVAILABLE, 0, UINT64_MAX, &ch.available) < 0)
		return error_set(GPB_E_PROTOCOL, "reply without the chunking figures");
	ch.oversized = cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(result, PROTO_F_WARNINGS));
	if (out)
		*out = ch;
	return 0;
}

static int allocate_parse(const cJSON *result, void *out)
{
	return chunking_parse(result, out);
}

GPB_EXPORT int gpb_allocate_queue(gpb_client *c, uint64_t instance, struct gpb_chunking *out)
{
	int rc = client_enter(c);

	if (rc < 0)
		return rc;
	rc = client_call(c, PROTO_M_ALLOCATE_QUEUE, instance_params(instance), allocate_parse, out);
	client_leave(c);
	return rc;
}

/* What gpb_chunk_parameters asks, and where the answer goes. */
struct chunk_query {
	size_t n;
	struct gpb_chunking *out;
	uint64_t (*shapes)[8];
};

static int chunk_query_parse(const cJSON *result, void *arg)
{
	struct chunk_query *q = arg;
	const cJSON *arrs = cJSON_GetObjectItemCaseSensitive(result, PROTO_F_ARRAYS), *it;
	size_t i = 0;
	int rc = chunking_parse(result, q->out);

	if (rc < 0 || !q->shapes)
		return rc;
	if (!cJSON_IsArray(arrs) || (size_t)cJSON_GetArraySize(arrs) != q->n)
		return error_set(GPB_E_PROTOCOL, "chunk_parameters reply without the shapes");
	cJSON_ArrayForEach(it, arrs)
	{
		const cJSON *shape = cJSON_GetObjectItemCaseSensitive(it, PROTO_F_SHAPE), *dim;
		unsigned d = 0;

		memset(q->shapes[i], 0, sizeof(q->shapes[i]));
		cJSON_ArrayForEach(dim, shape)
		{
			if (!cJSON_IsNumber(dim) || d >= PROTO_MAX_DIMS)
				return error_set(GPB_E_PROTOCOL, "a chunked shape is not numbers");
			q->shapes[i][d++] = (uint64_t)dim->valuedouble;
		}
		i++;
	}
	return 0;
}

#define CHUNK_MAX_RUNS (1ull << 53)

/* chunk_parameters with the one of group, available or chunk_length that is
 * set (chunk_length > 0, else group when not NULL, else available). */
static int chunk_query(gpb_client *c, const char *group, uint64_t available, uint64_t chunk_length,
                       uint64_t axis_length, const struct gpb_array_request *reqs, size_t n,
                       struct gpb_chunking *out, uint64_t (*shapes)[8])
{
	struct chunk_query q = {.n = n, .out = out, .shapes = shapes};
	cJSON *params = NULL, *arr;
	int rc = client_enter(c);

	if (rc < 0)
		return rc;
	if (group && (!*group || strlen(group) > PROTO_MAX_NAME)) {
		rc = error_set(GPB_E_INVALID, "gpb_chunk_parameters: group must be 1-%d bytes",
		               PROTO_MAX_NAME);
		goto out;
	}
	arr = requests_json(reqs, n, &rc);
	if (!arr && rc != GPB_E_NOMEM)
		goto out;
	/* Run counts are JSON integers, exact as doubles up to 2^53. */
	if (chunk_length > CHUNK_MAX_RUNS || axis_length > CHUNK_MAX_RUNS) {
		cJSON_Delete(arr);
		rc = error_set(GPB_E_INVALID, "chunking: more than 2^53 runs");
		goto out;
	}
	params = arr ? cJSON_CreateObject() : NULL;
	if (params && (!cJSON_AddItemToObject(params, PROTO_F_REQUESTS, arr) ||
	               (chunk_length ? !cJSON_AddNumberToObject(params, PROTO_F_CHUNK_LENGTH,
	                                                        (double)chunk_length)
	                : group      ? !cJSON_AddStringToObject(params, PROTO_F_GROUP, group)
	                             : proto_add_u64(params, PROTO_F_AVAILABLE, available) < 0) ||
	               (axis_length && !cJSON_AddNumberToObject(params, PROTO_F_AXIS_LENGTH,
	                                                        (double)axis_length)))) {
		cJSON_Delete(params);
		params = NULL;
	} else if (!params) {
		cJSON_Delete(arr);
	}
	rc = client_call(c, PROTO_M_CHUNK_PARAMETERS, params, chunk_query_parse, &q);
out:
	client_leave(c);
	return rc;
}

GPB_EXPORT int gpb_chunk_parameters(gpb_client *c, const char *group, uint64_t available,
                                    uint64_t axis_length, const struct gpb_array_request *reqs,
                                    size_t n, struct gpb_chunking *out, uint64_t (*shapes)[8])
{
	return chunk_query(c, group, available, 0, axis_length, reqs, n, out, shapes);
}

GPB_EXPORT int gpb_chunked_shapes(gpb_client *c, uint64_t chunk_length, uint64_t axis_length,
                                  const struct gpb_array_request *reqs, size_t n,
                                  struct gpb_chunking *out, uint64_t (*shapes)[8])
{
	if (!chunk_length)
		return error_set(GPB_E_INVALID, "gpb_chunked_shapes: chunk_length must be >= 1");
	return chunk_query(c, NULL, 0, chunk_length, axis_length, reqs, n, out, shapes);
}

GPB_EXPORT int gpb_invalidate_all(gpb_client *c)
{
	int rc = client_enter(c);

	if (rc < 0)
		return rc;
	/* The invalidate event that precedes the reply has already emptied
	 * this client's bookkeeping (core/conn.c calls client_invalidate). */
	rc = client_call(c, PROTO_M_INVALIDATE_ALL, cJSON_CreateObject(), NULL, NULL);
	client_leave(c);
	return rc;
}

GPB_EXPORT int gpb_set_allocator(gpb_client *c, const char *allocator)
{
	cJSON *params;
	int rc = client_enter(c);

	if (rc < 0)
		return rc;
	if (!allocator || !*allocator || strlen(allocator) > 16) {
		rc = error_set(GPB_E_INVALID, "gpb_set_allocator: pool, direct or async");
		goto out;
	}
	params = cJSON_CreateObject();
	if (params && !cJSON_AddStringToObject(params, PROTO_F_ALLOCATOR, allocator)) {
		cJSON_Delete(params);
		params = NULL;
	}
	/* A change is preceded by an invalidate event, which has emptied this
	 * client's bookkeeping by the time the reply is read. */
	rc = client_call(c, PROTO_M_SET_ALLOCATOR, params, NULL, NULL);
out:
	client_leave(c);
	return rc;
}
