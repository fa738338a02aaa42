/*
 * share.c - gpb_export, gpb_unexport and gpb_open_shared(_from): memory
 * named for other processes, and opened by name (memory.c's memory_call
 * records what the connection then holds).
 */
#include "memory.h"
#include "client.h"
#include "codec.h"
#include "error.h"
#include "export.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cJSON *name_params(const char *name)
{
	cJSON *params = cJSON_CreateObject();

	if (params && !cJSON_AddStringToObject(params, PROTO_F_NAME, name)) {
		cJSON_Delete(params);
		return NULL;
	}
	return params;
}

static bool name_valid(const char *name)
{
	return name && *name && strlen(name) <= PROTO_MAX_NAME;
}

GPB_EXPORT int gpb_export(gpb_client *c, uint64_t id, const char *name, int64_t uid)
{
	cJSON *params;
	int rc;

	rc = client_enter(c);
	if (rc < 0)
		return rc;
	if (!name_valid(name) || uid > (int64_t)UINT32_MAX - 1) {
		rc =
		    error_set(GPB_E_INVALID, "gpb_export: name must be 1-%d bytes, uid a uid or -1",
		              PROTO_MAX_NAME);
		goto out;
	}
	/* A local block is carved first, and its carve exported (lease.h). */
	rc = lease_carve(c, id, &id);
	if (rc < 0)
		goto out;
	params = name_params(name);
	if (params && (proto_add_id64(params, PROTO_F_ID, id) < 0 ||
	               (uid >= 0 && !cJSON_AddNumberToObject(params, PROTO_F_UID, (double)uid)))) {
		cJSON_Delete(params);
		params = NULL;
	}
	rc = client_call(c, PROTO_M_EXPORT, params, NULL, NULL);
out:
	client_leave(c);
	return rc;
}

GPB_EXPORT int gpb_unexport(gpb_client *c, const char *name)
{
	int rc;

	rc = client_enter(c);
	if (rc < 0)
		return rc;
	if (!name_valid(name))
		rc = error_set(GPB_E_INVALID, "gpb_unexport: name must be 1-%d bytes",
		               PROTO_MAX_NAME);
	else
		rc = client_call(c, PROTO_M_UNEXPORT, name_params(name), NULL, NULL);
	client_leave(c);
	return rc;
}

GPB_EXPORT int gpb_open_shared_from(gpb_client *c, int64_t owner, const char *name,
                                    struct gpb_allocation *out)
{
	cJSON *params;
	int rc;

	rc = client_enter(c);
	if (rc < 0)
		return rc;
	if (!out || !name_valid(name) || owner > (int64_t)UINT32_MAX - 1) {
		rc = error_set(
		    GPB_E_INVALID,
		    "gpb_open_shared_from: needs a name of 1-%d bytes, out, and a uid or -1",
		    PROTO_MAX_NAME);
		goto out;
	}
	params = name_params(name);
	/* Without an owner the daemon looks in this user's own names only. */
	if (params && owner >= 0 &&
	    !cJSON_AddNumberToObject(params, PROTO_F_OWNER, (double)owner)) {
		cJSON_Delete(params);
		params = NULL;
	}
	rc = memory_call(c, TRACK_ATTACH, PROTO_M_OPEN, params, out, NULL);
out:
	client_leave(c);
	return rc;
}

GPB_EXPORT int gpb_open_shared(gpb_client *c, const char *name, struct gpb_allocation *out)
{
	return gpb_open_shared_from(c, -1, name, out);
}
