/*
 * api.c - the gpb_* calls: connection, instances, statistics, raw requests
 * and events. Allocation calls are in memory.c, the VRAM policy's in vram.c;
 * all of them call down into the connection core (core/client.h).
 */
#include "client.h"
#include "config.h"
#include "error.h"
#include "export.h"
#include "lease.h"
#include "memory.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* ---- connection ------------------------------------------------------------ */

static void client_read_limits(gpb_client *c, const cJSON *limits)
{
	/* Informative only: the daemon enforces its limits itself, so a
	 * missing or odd value is not worth failing the handshake over. */
	const struct {
		const char *key;
		uint64_t *out;
	} fields[] = {
	    {PROTO_F_MAX_FRAME, &c->limits.max_frame},
	    {PROTO_F_MAX_INSTANCES, &c->limits.max_instances},
	    {PROTO_F_MAX_ALLOCATIONS, &c->limits.max_allocations},
	    {PROTO_F_WRITE_HIGH_WATER, &c->limits.write_high_water},
	    {PROTO_F_SLAB_SIZE, &c->limits.slab_size},
	};

	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
		int64_t v;

		if (proto_get_int(limits, fields[i].key, 0, INT64_MAX, &v) == 0)
			*fields[i].out = (uint64_t)v;
		else
			proto_get_u64(limits, fields[i].key, 0, UINT64_MAX, fields[i].out);
	}
}

static cJSON *hello_params(const char *name)
{
	const int offered[] = {GPB_PROTOCOL_VERSION};
	cJSON *params = cJSON_CreateObject();
	cJSON *versions = cJSON_CreateIntArray(offered, 1);

	if (!params || !versions || !cJSON_AddItemToObject(params, PROTO_F_VERSIONS, versions)) {
		cJSON_Delete(versions);
		cJSON_Delete(params);
		return NULL;
	}
	/* A batch job's partition (the Slurm plugin puts the token in the
	 * task's environment): every client of the job joins it by itself. */
	const char *token = getenv("GPUBROKER_TOKEN");
	/* Slabs stay mapped past their last allocation, up to the process's
	 * bound (GPUBROKER_KEEP_SLABS): the next allocation there costs no
	 * open. */
	if ((name && !cJSON_AddStringToObject(params, PROTO_F_CLIENT, name)) ||
	    (token && *token && !cJSON_AddStringToObject(params, PROTO_F_TOKEN, token)) ||
	    (slab_keep_max() > 0 && !cJSON_AddTrueToObject(params, PROTO_F_KEEP_SLABS))) {
		cJSON_Delete(params);
		return NULL;
	}
	return params;
}

static int hello_parse(const cJSON *result, void *arg)
{
	gpb_client *c = arg;
	const char *backend;
	int64_t version;

	if (proto_get_int(result, PROTO_F_VERSION, 0, INT_MAX, &version) < 0 ||
	    version != GPB_PROTOCOL_VERSION)
		return error_set(GPB_E_VERSION, "the daemon chose a protocol version not offered");
	if (proto_get_string(result, PROTO_F_BACKEND, sizeof(c->backend) - 1, &backend) < 0 ||
	    proto_get_id64(result, PROTO_F_SESSION, &c->session) < 0)
		return error_set(GPB_E_PROTOCOL, "hello reply without a valid backend or session");
	strcpy(c->backend, backend);
	c->uid = -1;
	proto_get_int(result, PROTO_F_UID, 0, INT64_MAX, &c->uid);
	client_read_limits(c, cJSON_GetObjectItemCaseSensitive(result, PROTO_F_LIMITS));
	c->track.opener = slab_opener_find(c->backend);
	return 0;
}

GPB_EXPORT int gpb_connect(const char *path, const char *name, gpb_client **out)
{
	gpb_client *c;
	int rc;

	error_clear();
	if (!out)
		return error_set(GPB_E_INVALID, "gpb_connect: out is NULL");
	*out = NULL;
	if (!path) {
		path = getenv("GPUBROKER_SOCKET");
		if (!path || !*path)
			path = GPB_DEFAULT_SOCKET_PATH;
	}
	rc = client_create(path, &c);
	if (rc < 0)
		return rc;
	rc = client_call(c, PROTO_M_HELLO, hello_params(name), hello_parse, c);
	if (rc < 0) {
		gpb_disconnect(c);
		return rc;
	}
	*out = c;
	return 0;
}

GPB_EXPORT void gpb_disconnect(gpb_client *c)
{
	if (c)
		client_destroy(c);
}

/* ---- instances ------------------------------------------------------------- */

static cJSON *register_params(const struct gpb_register_opts *opts)
{
	cJSON *params = cJSON_CreateObject();

	if (!params || !cJSON_AddStringToObject(params, PROTO_F_NAME, opts->name) ||
	    (opts->device_uuid ? !cJSON_AddStringToObject(params, PROTO_F_DEVICE, opts->device_uuid)
	                       : !cJSON_AddNumberToObject(params, PROTO_F_DEVICE, opts->device)) ||
	    (opts->proportion != 0 &&
	     !cJSON_AddNumberToObject(params, PROTO_F_PROPORTION, opts->proportion)) ||
	    (opts->group && !cJSON_AddStringToObject(params, PROTO_F_GROUP, opts->group))) {
		cJSON_Delete(params);
		return NULL;
	}
	return params;
}

static int register_parse(const cJSON *result, void *instance)
{
	if (proto_get_id64(result, PROTO_F_INSTANCE, instance) < 0)
		return error_set(GPB_E_PROTOCOL, "register reply without a valid 'instance'");
	return 0;
}

GPB_EXPORT int gpb_register(gpb_client *c, const struct gpb_register_opts *opts, uint64_t *instance)
{
	int rc;

	rc = client_enter(c);
	if (rc < 0)
		return rc;
	if (!opts || !opts->name || !instance) {
		rc = error_set(GPB_E_INVALID,
		               "gpb_register: opts, opts->name and instance are required");
		goto out;
	}
	/* Written so that NaN fails too. */
	if (!(opts->proportion >= 0 && opts->proportion <= 1) ||
	    (opts->device < 0 && !opts->device_uuid)) {
		rc = error_set(
		    GPB_E_INVALID,
		    "gpb_register: proportion must be in (0, 1] (0 = auto) and device >= 0");
		goto out;
	}
	rc = client_call(c, PROTO_M_REGISTER, register_params(opts), register_parse, instance);
out:
	client_leave(c);
	return rc;
}

GPB_EXPORT int gpb_unregister(gpb_client *c, uint64_t instance)
{
	int rc = client_enter(c);

	if (rc < 0)
		return rc;
	/* Its idle leases are the library's, not the caller's: they go back
	 * first, or the daemon would refuse the instance as busy. */
	lease_release_instance(c, instance);
	rc = client_call_id(c, PROTO_M_UNREGISTER, PROTO_F_INSTANCE, instance);
	client_leave(c);
	return rc;
}

/* ---- memory information ------------------------------------------------------- */

/* The element of result[@array] whose @key equals @want (an id64 when
 * @is_id, else a small integer), or NULL. */
static const cJSON *find_member(const cJSON *result, const char *array, const char *key, bool is_id,
                                uint64_t want)
{
	const cJSON *arr = cJSON_GetObjectItemCaseSensitive(result, array);
	const cJSON *it;

	if (!cJSON_IsArray(arr))
		return NULL;
	cJSON_ArrayForEach(it, arr)
	{
		uint64_t id;
		int64_t n;

		if (is_id && proto_get_id64(it, key, &id) == 0 && id == want)
			return it;
		if (!is_id && proto_get_int(it, key, 0, INT_MAX, &n) == 0 && (uint64_t)n == want)
			return it;
	}
	return NULL;
}

/* The four recall figures of @obj (recalls_sent, _answered, _pending,
 * _timed_out) into *@out[0..3], in that order; absent ones (a daemon before
 * recalls) are 0. 0, or -EINVAL for one that is not a u64. */
static int recalls_parse(const cJSON *obj, uint64_t *const out[4])
{
	static const char *const keys[] = {PROTO_F_RECALLS_SENT, PROTO_F_RECALLS_ANSWERED,
	                                   PROTO_F_RECALLS_PENDING, PROTO_F_RECALLS_TIMED_OUT};

	for (size_t i = 0; i < 4; i++) {
		int rc = proto_get_u64(obj, keys[i], 0, UINT64_MAX, out[i]);

		if (rc == -ENOENT)
			*out[i] = 0;
		else if (rc < 0)
			return -EINVAL;
	}
	return 0;
}

/* What gpb_mem_info asks about, and the answer. */
struct mem_info_query {
	uint64_t instance;
	struct gpb_mem_info info;
};

static int mem_info_parse(const cJSON *result, void *arg)
{
	struct mem_info_query *q = arg;
	struct gpb_mem_info *out = &q->info;
	const cJSON *inst =
	    find_member(result, PROTO_F_INSTANCES, PROTO_F_INSTANCE, true, q->instance);
	const cJSON *dev;
	int64_t device;

	if (!inst || proto_get_int(inst, PROTO_F_DEVICE, 0, INT_MAX, &device) < 0 ||
	    proto_get_u64(inst, PROTO_F_CAP, 0, UINT64_MAX, &out->cap) < 0 ||
	    proto_get_u64(inst, PROTO_F_USED, 0, UINT64_MAX, &out->used) < 0 ||
	    proto_get_u64(inst, PROTO_F_FREE, 0, UINT64_MAX, &out->free) < 0)
		return error_set(GPB_E_PROTOCOL, "mem_info reply without the instance's figures");
	if (recalls_parse(inst,
	                  (uint64_t *const[]){&out->recalls_sent, &out->recalls_answered,
	                                      &out->recalls_pending, &out->recalls_timed_out}) < 0)
		return error_set(GPB_E_PROTOCOL, "mem_info reply with bad recall figures");
	dev = find_member(result, PROTO_F_DEVICES, PROTO_F_DEVICE, false, (uint64_t)device);
	if (!dev || proto_get_u64(dev, PROTO_F_TOTAL, 0, UINT64_MAX, &out->device_total) < 0 ||
	    proto_get_u64(dev, PROTO_F_FREE, 0, UINT64_MAX, &out->device_free) < 0)
		return error_set(GPB_E_PROTOCOL, "mem_info reply without the device's figures");
	return 0;
}

GPB_EXPORT int gpb_mem_info(gpb_client *c, uint64_t instance, struct gpb_mem_info *out)
{
	struct mem_info_query q = {.instance = instance};
	int rc;

	rc = client_enter(c);
	if (rc < 0)
		return rc;
	if (!out) {
		rc = error_set(GPB_E_INVALID, "gpb_mem_info: out is NULL");
		goto out;
	}
	rc = client_call(c, PROTO_M_MEM_INFO, client_params_id(PROTO_F_INSTANCE, instance),
	                 mem_info_parse, &q);
	if (rc == 0) {
		*out = q.info;
		lease_figures(c, instance, &out->leased, &out->in_use, &out->leases);
	}
out:
	client_leave(c);
	return rc;
}

/* What gpb_stats asks about, and the answer. */
struct stats_query {
	int device;
	struct gpb_pool_stats stats;
};

static cJSON *stats_params(int device)
{
	cJSON *params = cJSON_CreateObject();

	if (!params || !cJSON_AddNumberToObject(params, PROTO_F_DEVICE, device)) {
		cJSON_Delete(params);
		return NULL;
	}
	return params;
}

static int stats_parse(const cJSON *result, void *arg)
{
	struct stats_query *q = arg;
	struct gpb_pool_stats *out = &q->stats;
	int device = q->device;
	const cJSON *dev =
	    find_member(result, PROTO_F_DEVICES, PROTO_F_DEVICE, false, (uint64_t)device);
	const struct {
		const char *key;
		uint64_t *out;
	} fields[] = {
	    {PROTO_F_RESERVED, &out->reserved},
	    {PROTO_F_USED, &out->used},
	    {PROTO_F_FREE, &out->free},
	    {PROTO_F_FREE_BLOCKS, &out->free_blocks},
	    {PROTO_F_LARGEST_FREE, &out->largest_free},
	    {PROTO_F_PEAK, &out->peak},
	    {PROTO_F_SLABS, &out->slabs},
	    {PROTO_F_LIVE, &out->live},
	    {PROTO_F_ALLOCS, &out->allocs},
	    {PROTO_F_FREES, &out->frees},
	    {PROTO_F_OOMS, &out->ooms},
	    {PROTO_F_FENCED, &out->fenced},
	    {PROTO_F_LEASED, &out->leased},
	    {PROTO_F_IN_USE, &out->in_use},
	};

	if (!dev)
		return error_set(GPB_E_PROTOCOL, "stats reply without device %d", device);
	if (recalls_parse(result,
	                  (uint64_t *const[]){&out->recalls_sent, &out->recalls_answered,
	                                      &out->recalls_pending, &out->recalls_timed_out}) < 0)
		return error_set(GPB_E_PROTOCOL, "stats reply with bad recall figures");
	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
		if (proto_get_u64(dev, fields[i].key, 0, UINT64_MAX, fields[i].out) < 0)
			return error_set(GPB_E_PROTOCOL, "stats reply without a valid '%s'",
			                 fields[i].key);
	}
	return 0;
}

GPB_EXPORT int gpb_stats(gpb_client *c, int device, struct gpb_pool_stats *out)
{
	struct stats_query q = {.device = device};
	int rc;

	rc = client_enter(c);
	if (rc < 0)
		return rc;
	if (!out || device < 0) {
		rc = error_set(GPB_E_INVALID, "gpb_stats: out is NULL or device negative");
		goto out;
	}
	rc = client_call(c, PROTO_M_STATS, stats_params(device), stats_parse, &q);
	if (rc == 0)
		*out = q.stats;
out:
	client_leave(c);
	return rc;
}

static int device_index_parse(const cJSON *result, void *arg)
{
	const cJSON *devs = cJSON_GetObjectItemCaseSensitive(result, PROTO_F_DEVICES);
	int64_t index;

	if (cJSON_GetArraySize(devs) != 1 ||
	    proto_get_int(cJSON_GetArrayItem(devs, 0), PROTO_F_DEVICE, 0, INT_MAX, &index) < 0)
		return error_set(GPB_E_PROTOCOL, "stats of one device without that device");
	*(int *)arg = (int)index;
	return 0;
}

GPB_EXPORT int gpb_device_index(gpb_client *c, const char *uuid, int *index)
{
	cJSON *params;
	int rc;

	rc = client_enter(c);
	if (rc < 0)
		return rc;
	if (!uuid || !*uuid || strlen(uuid) > PROTO_MAX_NAME || !index) {
		rc = error_set(GPB_E_INVALID,
		               "gpb_device_index: needs a UUID of 1-%d bytes and index",
		               PROTO_MAX_NAME);
	} else {
		/* The daemon resolves it, as it does for every "device". */
		params = cJSON_CreateObject();
		if (params && !cJSON_AddStringToObject(params, PROTO_F_DEVICE, uuid)) {
			cJSON_Delete(params);
			params = NULL;
		}
		rc = client_call(c, PROTO_M_STATS, params, device_index_parse, index);
	}
	client_leave(c);
	return rc;
}

/* ---- raw requests -------------------------------------------------------------- */

/* Parses @params_json (NULL = {}) into an object that fits in one frame. */
static int request_params(const char *method, const char *params_json, cJSON **out)
{
	cJSON *params;
	char *text;
	size_t len;

	*out = NULL;
	if (!params_json) {
		*out = cJSON_CreateObject();
		return *out ? 0 : error_set(GPB_E_NOMEM, "out of memory");
	}
	params = cJSON_ParseWithOpts(params_json, NULL, 1);
	if (!cJSON_IsObject(params)) {
		cJSON_Delete(params);
		return error_set(GPB_E_INVALID, "gpb_request: params must be a JSON object");
	}
	/* The encoder refuses an oversized frame without saying why; the
	 * caller deserves GPB_E_INVALID rather than GPB_E_NOMEM. */
	text = cJSON_PrintUnformatted(params);
	if (!text) {
		cJSON_Delete(params);
		return error_set(GPB_E_NOMEM, "out of memory");
	}
	len = strlen(text) + strlen(method);
	cJSON_free(text);
	if (len + 64 > PROTO_MAX_FRAME) {
		cJSON_Delete(params);
		return error_set(GPB_E_INVALID, "gpb_request: request exceeds %d bytes",
		                 PROTO_MAX_FRAME);
	}
	*out = params;
	return 0;
}

GPB_EXPORT int gpb_request(gpb_client *c, const char *method, const char *params_json,
                           char **result_json)
{
	cJSON *params;
	int rc;

	if (result_json)
		*result_json = NULL;
	rc = client_enter(c);
	if (rc < 0)
		return rc;
	if (!method || !*method || strlen(method) > PROTO_MAX_NAME) {
		rc = error_set(GPB_E_INVALID, "gpb_request: invalid method");
		goto out;
	}
	rc = request_params(method, params_json, &params);
	if (rc < 0)
		goto out;
	switch (proto_op_lookup(method)) {
	case PROTO_OP_ALLOC:
	case PROTO_OP_ATTACH:
	case PROTO_OP_OPEN:
	case PROTO_OP_FREE:
	case PROTO_OP_DETACH:
	case PROTO_OP_CLAIM:
	case PROTO_OP_FREE_LABEL:
		/* These change what the connection holds: keep the library's
		 * bookkeeping (and mappings) in step with the daemon's. */
		rc = memory_request(c, method, params, result_json);
		goto out;
	default:
		break;
	}
	rc = client_call(c, method, params, client_result_json, result_json);
out:
	client_leave(c);
	return rc;
}

GPB_EXPORT void gpb_string_free(char *s)
{
	free(s);
}

/* ---- events ------------------------------------------------------------------ */

GPB_EXPORT void gpb_set_event_callback(gpb_client *c, gpb_event_fn fn, void *userdata)
{
	if (!c || client_forked(c))
		return;
	pthread_mutex_lock(&c->lock);
	c->event_fn = fn;
	c->event_data = fn ? userdata : NULL;
	pthread_mutex_unlock(&c->lock);
}

GPB_EXPORT int gpb_event_fd(gpb_client *c)
{
	error_clear();
	if (!c)
		return error_set(GPB_E_INVALID, "client is NULL");
	/* Set at connect and constant until disconnect: no lock needed. */
	return c->conn.epfd;
}

GPB_EXPORT int gpb_dispatch(gpb_client *c)
{
	struct client_conn_event *events, *ev;
	gpb_event_fn fn;
	void *data;
	int rc, n = 0;

	rc = client_enter_events(c);
	if (rc < 0)
		return rc;
	rc = client_conn_pump(&c->conn);
	events = client_conn_take_events(&c->conn);
	fn = c->event_fn;
	data = c->event_data;
	client_leave(c);

	/* Callbacks run unlocked so that they may issue requests on the same
	 * client; the events were detached from the queue above. */
	while ((ev = events)) {
		events = ev->next;
		if (fn)
			fn(c, ev->name, ev->data, data);
		client_conn_event_free(ev);
		n++;
	}
	/* Events that arrived before the connection died are still worth
	 * delivering; the next call reports the death. */
	return n > 0 ? n : rc;
}

GPB_EXPORT const char *gpb_version(void)
{
	return GPB_VERSION;
}
