/*
 * hostmem.c - host memory ("pinned" and "mapped") under gpb_alloc_host:
 * a memfd of its own per allocation from the daemon, mapped here
 * and, with the cuda backend, registered with cuMemHostRegister. Queued
 * arrays of host memory arrive the same way, with their claim's reply.
 *
 * Unlike a slab, the daemon never frees memory a client still maps: the
 * mapping keeps the memfd's pages alive whatever the daemon does with its
 * descriptor. So there is no close-before-free ordering here; a mapping is
 * unregistered and unmapped when its allocation is freed, when the daemon
 * invalidates everything, or at disconnect.
 */
#include "hostmem.h"
#include "error.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

void hostmem_init(gpb_client *c)
{
	idmap_init(&c->hosts);
}

static void host_entry_drop(gpb_client *c, struct host_entry *h)
{
	const struct slab_opener *opener = c->track.opener;

	/* Copies queued to or from it finish before it is unmapped. */
	if (h->registered && opener->finish)
		opener->finish(h->priv);
	if (h->registered)
		opener->host_unregister(h->ptr, h->priv);
	munmap(h->ptr, h->size);
	free(h);
}

void hostmem_abandon(gpb_client *c)
{
	struct host_entry *h;
	size_t pos = 0;

	/* The registrations are the parent's (a forked child): the driver's
	 * state of this process is not the parent's, so no call undoes them. */
	while ((h = idmap_next(&c->hosts, &pos, NULL))) {
		h->registered = false;
		host_entry_drop(c, h);
	}
	idmap_finish(&c->hosts);
}

void hostmem_finish(gpb_client *c)
{
	struct host_entry *h;
	size_t pos = 0;

	while ((h = idmap_next(&c->hosts, &pos, NULL)))
		host_entry_drop(c, h);
	idmap_finish(&c->hosts);
	idmap_init(&c->hosts);
}

/* Maps and registers what an alloc reply handed over (@fd consumed).
 * 0 with *out set, or a GPB_E_* code (nothing kept). */
static int host_adopt(gpb_client *c, const cJSON *result, int fd, bool mapped, struct host_entry *h,
                      uint64_t *id)
{
	int rc;

	if (proto_get_id64(result, PROTO_F_ID, id) < 0 ||
	    proto_get_u64(result, PROTO_F_SIZE, 1, SIZE_MAX, &h->size) < 0 || fd < 0) {
		if (fd >= 0)
			close(fd);
		return error_set(GPB_E_PROTOCOL,
		                 "host memory reply without id, size or descriptor");
	}
	h->ptr = mmap(NULL, h->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (h->ptr == MAP_FAILED)
		return error_set(GPB_E_SYSTEM, "mapping %" PRIu64 " bytes of host memory: %s",
		                 h->size, strerror(errno));
	h->device_ptr = mapped ? h->ptr : NULL;
	if (c->track.opener && c->track.opener->host_register) {
		rc = c->track.opener->host_register(h->ptr, h->size, mapped, &h->device_ptr,
		                                    &h->priv);
		if (rc < 0) {
			munmap(h->ptr, h->size);
			return rc;
		}
		h->registered = true;
	}
	return 0;
}

int hostmem_adopt(gpb_client *c, const cJSON *result, int fd, struct gpb_allocation *out,
                  char **result_json)
{
	const char *type =
	    cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(result, PROTO_F_TYPE));
	struct host_entry *h = calloc(1, sizeof(*h));
	uint64_t id = 0;
	int rc;

	if (!h || idmap_reserve(&c->hosts, 1) < 0) {
		if (fd >= 0)
			close(fd);
		proto_get_id64(result, PROTO_F_ID, &id);
		rc = error_set(GPB_E_NOMEM, "out of memory");
	} else {
		rc = host_adopt(c, result, fd, type && strcmp(type, PROTO_V_MEM_MAPPED) == 0, h,
		                &id);
		if (rc == 0 && result_json)
			rc = client_result_json(result, result_json);
	}
	if (rc < 0) {
		/* The daemon holds memory this process cannot use: give it back. */
		char saved[256];
		snprintf(saved, sizeof(saved), "%s", error_message());
		if (h && h->registered) /* adopted, then result_json failed */
			host_entry_drop(c, h);
		else
			free(h);
		if (id && client_call_id(c, PROTO_M_FREE, PROTO_F_ID, id) < 0)
			client_conn_fail(&c->conn, GPB_E_PROTOCOL,
			                 "could not give back %016" PRIx64, id);
		return error_set(rc, "%s", saved);
	}
	idmap_put(&c->hosts, id, h); /* reserved above */
	if (out) {
		out->id = id;
		out->ptr = h->ptr;
		out->size = h->size;
		out->device = -1;
		out->slab = 0;
		out->offset = 0;
	}
	return 0;
}

int hostmem_call(gpb_client *c, cJSON *params, struct gpb_allocation *out, char **result_json)
{
	struct proto_reply rep;
	int fd = -1, rc;

	if (!params)
		return error_set(GPB_E_NOMEM, "out of memory");
	if (c->conn.dead) {
		cJSON_Delete(params);
		return client_conn_dead_error(&c->conn);
	}
	rc = client_conn_call(&c->conn, PROTO_M_ALLOC, params, &rep, &fd);
	if (rc < 0)
		return rc;
	rc = hostmem_adopt(c, rep.result, fd, out, result_json);
	proto_reply_finish(&rep);
	return rc;
}

struct host_entry *hostmem_get(gpb_client *c, uint64_t id)
{
	return idmap_get(&c->hosts, id);
}

bool hostmem_forget(gpb_client *c, uint64_t id)
{
	struct host_entry *h = idmap_get(&c->hosts, id);

	if (!h)
		return false;
	idmap_remove(&c->hosts, id);
	host_entry_drop(c, h);
	return true;
}

int hostmem_free(gpb_client *c, uint64_t id, cJSON *params, char **result_json)
{
	struct host_entry *h = idmap_get(&c->hosts, id);
	struct proto_reply rep;
	int rc;

	if (!h) {
		cJSON_Delete(params);
		return 1;
	}
	if (!params)
		return error_set(GPB_E_NOMEM, "out of memory");
	rc = client_conn_call(&c->conn, PROTO_M_FREE, params, &rep, NULL);
	if (rc < 0)
		return rc;
	if (result_json)
		rc = client_result_json(rep.result, result_json);
	proto_reply_finish(&rep);
	idmap_remove(&c->hosts, id);
	host_entry_drop(c, h);
	return rc;
}
