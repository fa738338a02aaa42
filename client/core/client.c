/*
 * client.c - the life of the gpb_client object: what it is made of (the
 * connection, its slabs and host memory) put together and taken apart, and
 * the invalidate hook that empties it. The calls on it are in call.c.
 */
#include "client.h"
#include "error.h"
#include "hostmem.h"

#include <pthread.h>
#include <stdlib.h>

/*
 * fork: a child starts afresh for the whole library (issue 25). Its
 * parent's clients are not its own: their socket is the parent's
 * connection (a request from the child would interleave with the
 * parent's), and their mappings are the parent's (a CUDA mapping is not
 * valid in a child). Each fork in this process's line counts one more
 * generation; a client made in an earlier one refuses every call
 * (GPB_E_INVALID), and gpb_disconnect frees it without a word to the daemon
 * or the driver. The slab cache and the cuda opener forget what they
 * held in their own handlers (slab.c, cuda.c, cuda_ctx.c).
 */
unsigned client_generation;
static pthread_once_t client_fork_once = PTHREAD_ONCE_INIT;

static void client_atfork_child(void)
{
	client_generation++;
}

static void client_fork_init(void)
{
	pthread_atfork(NULL, NULL, client_atfork_child);
	slab_fork_init();
}

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
	lease_forget(c);
}

/* conn's on_reclaim hook: the daemon wants back a slab this connection
 * keeps empty. Work queued in it finishes before it is unmapped. Lock held. */
static int client_reclaim(void *client, uint64_t slab)
{
	gpb_client *c = client;

	track_finish_all(&c->track);
	/* A lease returned inside an exchange may still hold it here: the
	 * daemon asks back only a slab it holds nothing of this connection's
	 * in, so no reply still to come puts an allocation there without
	 * handing it over again, and those leases can go now. */
	lease_recall_settle_slab(c, slab);
	return track_reclaim(&c->track, slab);
}

/* conn's on_recall hook: the daemon asks back @bytes of @instance's
 * leases. Lock held. */
static uint64_t client_recall(void *client, uint64_t instance, uint64_t bytes)
{
	return lease_recall(client, instance, bytes);
}

int client_create(const char *path, gpb_client **out)
{
	gpb_client *c;
	int rc;

	pthread_once(&client_fork_once, client_fork_init);
	c = calloc(1, sizeof(*c));
	if (!c)
		return error_set(GPB_E_NOMEM, "out of memory");
	c->generation = client_generation;
	rc = client_conn_init(&c->conn, path);
	if (rc < 0) {
		free(c);
		return rc;
	}
	pthread_mutex_init(&c->lock, NULL);
	/* Until hello names the backend nothing can be mapped. */
	track_init(&c->track, NULL);
	hostmem_init(c);
	lease_init(&c->lease);
	c->pending_tail = &c->pending;
	c->conn.on_invalidate = client_invalidate;
	c->conn.on_reclaim = client_reclaim;
	c->conn.on_recall = client_recall;
	c->conn.invalidate_ctx = c;
	*out = c;
	return 0;
}

/* client_destroy in a forked child, of a client of its parent: nothing is
 * said to the daemon (the connection is the parent's, and stays open
 * there), nothing asked of the driver; the child's copies of the memory
 * and descriptors go. Its lock is not taken: a thread of the parent may
 * have held it at the fork. */
static void client_forget(gpb_client *c)
{
	while (c->pending) {
		struct client_pending *p = c->pending;
		c->pending = p->next;
		/* Its fence is the parent's: the child's copy of its memory
		 * goes, nothing is asked of the driver. */
		if (c->track.opener && c->track.opener->fence_forget)
			c->track.opener->fence_forget(p->fence);
		free(p);
	}
	lease_abandon(&c->lease);
	track_finish(&c->track);
	hostmem_abandon(c);
	client_conn_finish(&c->conn);
	free(c);
}

void client_destroy(gpb_client *c)
{
	const struct slab_opener *opener = c->track.opener;
	bool held = c->track.slabs.count > 0;

	if (client_forked(c)) {
		client_forget(c);
		return;
	}

	/* No more returns from the service thread (neither lock held here);
	 * the daemon ends the leases with the connection. */
	lease_finish(c);
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
	client_conn_finish(&c->conn);
	pthread_mutex_destroy(&c->lock);
	free(c);
}
