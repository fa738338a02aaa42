/*
 * call.c - calls on a gpb_client: taking its lock (settling what the
 * connection held back), one request/reply exchange with its result
 * parsed, and the helpers the gpb_* entry points build requests with.
 */
#include "client.h"
#include "error.h"

/* Validates the client and takes its lock; clears the last error. */
int client_enter(gpb_client *c)
{
	error_clear();
	if (!c)
		return error_set(GPB_E_INVALID, "client is NULL");
	pthread_mutex_lock(&c->lock);
	conn_settle(&c->conn);
	return 0;
}

void client_leave(gpb_client *c)
{
	pthread_mutex_unlock(&c->lock);
}

int client_call(gpb_client *c, const char *method, cJSON *params, client_parse_fn parse, void *arg)
{
	struct proto_reply rep;
	int rc;

	if (!params)
		return error_set(GPB_E_NOMEM, "out of memory");
	rc = conn_call(&c->conn, method, params, &rep, NULL);
	if (rc < 0)
		return rc;
	if (parse)
		rc = parse(rep.result, arg);
	proto_reply_finish(&rep);
	return rc;
}

cJSON *client_params_id(const char *key, uint64_t id)
{
	cJSON *params = cJSON_CreateObject();

	if (!params || proto_add_id64(params, key, id) < 0) {
		cJSON_Delete(params);
		return NULL;
	}
	return params;
}

int client_call_id(gpb_client *c, const char *method, const char *key, uint64_t id)
{
	return client_call(c, method, client_params_id(key, id), NULL, NULL);
}

int client_result_json(const cJSON *result, void *result_json)
{
	char **out = result_json;

	if (!out)
		return 0;
	*out = conn_json_text(result);
	return *out ? 0 : error_set(GPB_E_NOMEM, "out of memory");
}
