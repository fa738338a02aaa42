/*
 * client.c - the life of the gpb_client object: what it is made of (the
 * connection, its slabs and host memory) put together and taken apart, and
 * the invalidate hook that empties it. The calls on it are in call.c.
 */
#include "client.h"
#include "error.h"
#include "hostmem.h"

#include <stdlib.h>

/*
 * conn's on_invalidate hook: the daemon released everything the
 * connection held; forget it all and unmap, and every pointer this client
 * handed out is invalid from here on. Lock held.
 */
static void client_invalidate(void *client)
{
	gpb_client *c = client;
	const struct slab_opener *opener = c->track.opener;

	/* What was queued on the memory finishes before it is unmapped and
	 * the daemon hears so (the event's answer). */
	client_pending_drop(c);
	track_finish_all(&c->track);
	track_finish(&c->track);
	track_init(&c->track, opener);
	hostmem_finish(c);
}

/* conn's on_reclaim hook: the daemon wants back a slab this connection
 * keeps empty. Work queued in it finishes before it is unmapped. Lock held. */
static int client_reclaim(void *client, uint64_t slab)
{
	gpb_client *c = client;

	track_finish_all(&c->track);
	return track_reclaim(&c->track, slab);
}

int client_create(const char *path, gpb_client **out)
{
	gpb_client *c = calloc(1, sizeof(*c));
	int rc;

	if (!c)
		return error_set(GPB_E_NOMEM, "out of memory");
	rc = conn_init(&c->conn, path);
	if (rc < 0) {
		free(c);
		return rc;
	}
	pthread_mutex_init(&c->lock, NULL);
	/* Until hello names the backend nothing can be mapped. */
	track_init(&c->track, NULL);
	hostmem_init(c);
	c->pending_tail = &c->pending;
	c->conn.on_invalidate = client_invalidate;
	c->conn.on_reclaim = client_reclaim;
	c->conn.invalidate_ctx = c;
	*out = c;
	return 0;
}

void client_destroy(gpb_client *c)
{
	const struct slab_opener *opener = c->track.opener;
	bool held = c->track.slabs.count > 0;

	/* Unmapping first: once the socket closes the daemon releases what
	 * the connection held and may free its slabs, and CUDA memory must
	 * not be freed under an open IPC mapping, nor while work queued on it
	 * may still run. */
	client_pending_drop(c);
	track_finish_all(&c->track);
	track_finish(&c->track);
	/* Then saying so: without goodbye the daemon keeps device memory
	 * that a process can keep mapped (cuda VMM slabs) counted until this
	 * process exits. The track is empty again for events read meanwhile;
	 * a daemon that does not know goodbye, or is gone, changes nothing. */
	track_init(&c->track, opener);
	if (held && opener && opener->close_first)
		client_call(c, PROTO_M_GOODBYE, cJSON_CreateObject(), NULL, NULL);
	track_finish(&c->track);
	hostmem_finish(c);
	idmap_finish(&c->hosts);
	conn_finish(&c->conn);
	pthread_mutex_destroy(&c->lock);
	free(c);
}
