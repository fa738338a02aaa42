/*
 * partition.c - the partition calls: create, destroy and list (the
 * administrator's side of Slurm's per-job partitions; a client joins one
 * through $GPUBROKER_TOKEN in gpb_connect).
 */
#include "client.h"
#include "error.h"
#include "export.h"

#include <string.h>

static int token_parse(const cJSON *result, void *arg)
{
	const char *token;
	if (proto_get_string(result, PROTO_F_TOKEN, PROTO_TOKEN_HEX, &token) < 0 ||
	    strlen(token) != PROTO_TOKEN_HEX)
		return error_set(GPB_E_PROTOCOL, "partition_create reply without a token");
	memcpy(arg, token, PROTO_TOKEN_HEX + 1);
	return 0;
}

GPB_EXPORT int gpb_partition_create(gpb_client *c, const char *name, uint32_t uid, uint64_t size,
                                    const int *devices, int n_devices, char token[65])
{
	cJSON *params = NULL, *devs;
	int rc = client_enter(c);

	if (rc < 0)
		return rc;
	if (!name || !token || size == 0 || n_devices < 0 || (n_devices > 0 && !devices)) {
		rc = error_set(GPB_E_INVALID, "gpb_partition_create: a name, a size of at least 1 "
		                              "byte and a token buffer");
		goto out;
	}
	params = cJSON_CreateObject();
	devs = n_devices > 0 ? cJSON_CreateIntArray(devices, n_devices) : NULL;
	if (params && (!cJSON_AddStringToObject(params, PROTO_F_NAME, name) ||
	               !cJSON_AddNumberToObject(params, PROTO_F_UID, uid) ||
	               proto_add_u64(params, PROTO_F_SIZE, size) < 0 ||
	               (n_devices > 0 && !cJSON_AddItemToObject(params, PROTO_F_DEVICES, devs)))) {
		cJSON_Delete(params);
		params = NULL;
	} else if (!params) {
		cJSON_Delete(devs);
	}
	rc = client_call(c, PROTO_M_PARTITION_CREATE, params, token_parse, token);
out:
	client_leave(c);
	return rc;
}

GPB_EXPORT int gpb_partition_destroy(gpb_client *c, const char *name)
{
	cJSON *params;
	int rc = client_enter(c);

	if (rc < 0)
		return rc;
	if (!name) {
		rc = error_set(GPB_E_INVALID, "gpb_partition_destroy: name is NULL");
		goto out;
	}
	params = cJSON_CreateObject();
	if (params && !cJSON_AddStringToObject(params, PROTO_F_NAME, name)) {
		cJSON_Delete(params);
		params = NULL;
	}
	rc = client_call(c, PROTO_M_PARTITION_DESTROY, params, NULL, NULL);
out:
	client_leave(c);
	return rc;
}

GPB_EXPORT int gpb_partitions(gpb_client *c, char **json_out)
{
	int rc = client_enter(c);

	if (rc < 0)
		return rc;
	if (!json_out)
		rc = error_set(GPB_E_INVALID, "gpb_partitions: json_out is NULL");
	else
		rc = client_call(c, PROTO_M_PARTITIONS, cJSON_CreateObject(), client_result_json,
		                 json_out);
	client_leave(c);
	return rc;
}
