/*
 * call.c - calls on a gpb_client: taking its lock (settling what the
 * connection held back), one request/reply exchange with its result
 * parsed, and the helpers the gpb_* entry points build requests with.
 */
#include "client.h"
#include "error.h"

#include <stdlib.h>

/*
 * gpb_free_async: frees what waited for a fence that has passed, oldest
 * first. Polled here, at the start of every call on the client, rather than
 * from a host function on the stream (cuLaunchHostFunc): that runs on a
 * driver thread that may make no CUDA call, would need this client's lock
 * (held by a thread that may be waiting on that very stream) and could
 * outlive the client. A failure is not the caller's: its message is dropped.
 */
static void client_pending_poll(gpb_client *c)
{
	const struct slab_opener *opener = c->track.opener;
	struct client_pending **pp = &c->pending, *p, *done = NULL, **done_tail = &done;

	/* Taken off the queue first: a release reads replies, and an
	 * invalidate event among them empties the queue. */
	while ((p = *pp)) {
		if (!opener->fence_done(p->fence)) {
			pp = &p->next;
			continue;
		}
		*pp = p->next;
		p->next = NULL;
		*done_tail = p;
		done_tail = &p->next;
	}
	c->pending_tail = pp;
	while ((p = done)) {
		done = p->next;
		opener->fence_free(p->fence);
		c->release_pending(c, p->id);
		free(p);
	}
	error_clear();
}

/* Validates the client and takes its lock; clears the last error. */
int client_enter_events(gpb_client *c)
{
	error_clear();
	if (!c)
		return error_set(GPB_E_INVALID, "client is NULL");
	/* Before its lock, which a thread of the parent may have held. */
	if (client_forked(c))
		return error_set(GPB_E_INVALID,
		                 "this client was connected by the parent of this forked process: "
		                 "a child connects anew (gpb_connect)");
	pthread_mutex_lock(&c->lock);
	client_conn_settle(&c->conn);
	lease_recall_settle(c);
	if (c->pending)
		client_pending_poll(c);
	return 0;
}

int client_enter(gpb_client *c)
{
	int rc = client_enter_events(c);

	if (rc < 0)
		return rc;
	/* A free that did not wait for its reply was refused: this call
	 * reports it, before it changes anything. */
	rc = client_conn_take_free_error(&c->conn);
	if (rc < 0)
		pthread_mutex_unlock(&c->lock);
	return rc;
}

void client_pending_add(gpb_client *c, struct client_pending *p)
{
	p->next = NULL;
	*c->pending_tail = p;
	c->pending_tail = &p->next;
}

void client_pending_drop(gpb_client *c)
{
	while (c->pending) {
		struct client_pending *p = c->pending;
		c->pending = p->next;
		c->track.opener->fence_wait(p->fence);
		c->track.opener->fence_free(p->fence);
		free(p);
	}
	c->pending_tail = &c->pending;
}

void client_leave(gpb_client *c)
{
	/* Whatever call found the connection dead, the fast path (which
	 * takes no client lock) learns it before this lock goes. */
	if (c->conn.dead)
		lease_conn_lost(c);
	pthread_mutex_unlock(&c->lock);
}

int client_call(gpb_client *c, const char *method, cJSON *params, client_parse_fn parse, void *arg)
{
	struct proto_reply rep;
	int rc;

	if (!params)
		return error_set(GPB_E_NOMEM, "out of memory");
	rc = client_conn_call(&c->conn, method, params, &rep, NULL);
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

int client_send_released(gpb_client *c)
{
	size_t n;
	const uint64_t *ids = track_take_released(&c->track, &n);
	int rc = 0;

	for (size_t i = 0; i < n && rc == 0; i++)
		rc = client_conn_send_release(&c->conn, ids[i]);
	return rc;
}

int client_result_json(const cJSON *result, void *result_json)
{
	char **out = result_json;

	if (!out)
		return 0;
	*out = client_conn_json_text(result);
	return *out ? 0 : error_set(GPB_E_NOMEM, "out of memory");
}
