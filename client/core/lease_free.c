/*
 * lease_free.c - frees and carves of local blocks (lease.h): a free waits
 * for the work queued on the block (gpb_free's promise), gpb_free_async
 * frees it once its stream has run, and export or attach of a block carves
 * it into a daemon allocation first.
 */
#include "lease.h"
#include "lease_internal.h"
#include "client.h"
#include "error.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

/* Allocator lock held: frees block @b of @id. */
void lease_block_free(struct lease_state *ls, uint64_t id, struct pool_block *b)
{
	struct lease *l = pool_slab_backend(pool_block_slab(b));

	idmap_remove(&ls->blocks, id);
	l->inst->in_use -= pool_block_size(b);
	pool_free(l->inst->pool, b);
	if (--l->live == 0) {
		l->idle_since = lease_now_ms();
		pthread_cond_signal(&ls->wake);
	}
}

/*
 * gpb_free's promise (gpubroker.h): the work queued on the memory has run
 * before the range can be anyone's again, here the next block served from
 * the lease. Waits (cuda: the mapping's context) outside the allocator's
 * lock, so other threads keep allocating meanwhile; nothing where the
 * backend has no queues (sim).
 */
static void block_finish_work(struct lease_state *ls, uint64_t id)
{
	struct slab_map *map = NULL;
	struct pool_block *b;

	pthread_mutex_lock(&ls->lock);
	b = idmap_get(&ls->blocks, id);
	if (b && !idmap_get(&ls->freeing, id)) { /* not gpb_free_async's */
		struct lease *l = pool_slab_backend(pool_block_slab(b));
		if (l->map && l->map->opener->finish) {
			map = l->map;
			slab_cache_ref(map);
		}
	}
	pthread_mutex_unlock(&ls->lock);
	if (map) {
		slab_cache_finish(map);
		slab_cache_put(map);
	}
}

int lease_free_local(struct gpb_client *c, uint64_t id)
{
	struct lease_state *ls = &c->lease;
	struct pool_block *b;
	int rc = 1;

	if (!lease_id_local(id))
		return 1;
	block_finish_work(ls, id);
	pthread_mutex_lock(&ls->lock);
	b = idmap_get(&ls->blocks, id);
	if (b && !idmap_get(&ls->carves, id) && !idmap_get(&ls->freeing, id)) {
		lease_block_free(ls, id, b);
		rc = 0;
	}
	pthread_mutex_unlock(&ls->lock);
	return rc;
}

int lease_free_carved(struct gpb_client *c, uint64_t id)
{
	struct lease_state *ls = &c->lease;
	struct pool_block *b;
	uintptr_t carve;
	int rc;

	if (!lease_id_local(id))
		return 1;
	pthread_mutex_lock(&ls->lock);
	b = idmap_get(&ls->blocks, id);
	if (b && idmap_get(&ls->freeing, id))
		b = NULL; /* gpb_free_async has it */
	carve = (uintptr_t)idmap_get(&ls->carves, id);
	pthread_mutex_unlock(&ls->lock);
	if (!b)
		return 1;
	if (carve) {
		/* The carve goes first: the daemon frees it in order, before
		 * any lease_return sent after it; and may hand its range to
		 * another at once: the work queued on it first. */
		block_finish_work(ls, id);
		rc = client_conn_send_free(&c->conn, (uint64_t)carve);
		if (rc < 0)
			return rc;
	}
	pthread_mutex_lock(&ls->lock);
	if (carve) {
		struct lease *l = pool_slab_backend(pool_block_slab(b));
		idmap_remove(&ls->carves, id);
		l->carves--;
	}
	lease_block_free(ls, id, b);
	pthread_mutex_unlock(&ls->lock);
	return 0;
}

int lease_free_async(struct gpb_client *c, uint64_t id, void *stream, void **fence)
{
	struct lease_state *ls = &c->lease;
	struct slab_map *map = NULL;
	struct pool_block *b;
	int rc = 0;

	*fence = NULL;
	if (!lease_id_local(id))
		return 1;
	pthread_mutex_lock(&ls->lock);
	b = idmap_get(&ls->blocks, id);
	if (b && idmap_get(&ls->freeing, id))
		b = NULL;
	if (b) {
		struct lease *l = pool_slab_backend(pool_block_slab(b));
		if (l->map && l->map->opener->fence) {
			map = l->map;
			slab_cache_ref(map);
		}
	}
	pthread_mutex_unlock(&ls->lock);
	if (!b)
		return 1;
	if (map) {
		rc = map->opener->fence(map->priv, stream, fence);
		slab_cache_put(map);
		if (rc < 0)
			return rc;
	}
	pthread_mutex_lock(&ls->lock);
	if (*fence && idmap_put(&ls->freeing, id, b) == 0) {
		pthread_mutex_unlock(&ls->lock);
		return 0;
	}
	pthread_mutex_unlock(&ls->lock);
	if (*fence) { /* no room to remember it: waited for here */
		map->opener->fence_wait(*fence);
		map->opener->fence_free(*fence);
		*fence = NULL;
	}
	/* Nothing queued can still run: freed now. */
	rc = lease_free_local(c, id);
	return rc == 1 ? lease_free_carved(c, id) : rc;
}

void lease_release_pending(struct gpb_client *c, uint64_t id)
{
	struct lease_state *ls = &c->lease;
	struct pool_block *b;
	bool carved;

	pthread_mutex_lock(&ls->lock);
	b = idmap_remove(&ls->freeing, id);
	carved = b && idmap_get(&ls->carves, id);
	if (b && !carved)
		lease_block_free(ls, id, b);
	pthread_mutex_unlock(&ls->lock);
	if (carved)
		lease_free_carved(c, id);
}

/* ---- carves --------------------------------------------------------------- */

static int carve_parse(const cJSON *result, void *arg)
{
	if (proto_get_id64(result, PROTO_F_ID, arg) < 0)
		return error_set(GPB_E_PROTOCOL, "lease_carve reply without a valid 'id'");
	return 0;
}

int lease_carve(struct gpb_client *c, uint64_t id, uint64_t *daemon_id)
{
	struct lease_state *ls = &c->lease;
	struct pool_block *b;
	struct lease *l = NULL;
	uint64_t carve = 0, off = 0, size = 0;
	cJSON *params;
	int rc;

	if (!lease_id_local(id))
		return 1;
	pthread_mutex_lock(&ls->lock);
	b = idmap_get(&ls->blocks, id);
	if (b) {
		carve = (uintptr_t)idmap_get(&ls->carves, id);
		l = pool_slab_backend(pool_block_slab(b));
		off = pool_block_offset(b);
		size = pool_block_size(b);
	}
	pthread_mutex_unlock(&ls->lock);
	if (!b)
		return 1;
	if (carve) {
		*daemon_id = carve;
		return 0;
	}
	params = cJSON_CreateObject();
	if (params && (proto_add_id64(params, PROTO_F_LEASE, l->id) < 0 ||
	               proto_add_u64(params, PROTO_F_OFFSET, off) < 0 ||
	               proto_add_u64(params, PROTO_F_SIZE, size) < 0)) {
		cJSON_Delete(params);
		params = NULL;
	}
	rc = client_call(c, PROTO_M_LEASE_CARVE, params, carve_parse, &carve);
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&ls->lock);
	/* Looked up again: an invalidate read with the reply forgot it. */
	b = idmap_get(&ls->blocks, id);
	l = b ? pool_slab_backend(pool_block_slab(b)) : NULL;
	if (!b) {
		rc = error_set(GPB_E_NOT_FOUND, "no allocation %016" PRIx64, id);
	} else if (idmap_put(&ls->carves, id, (void *)(uintptr_t)carve) == 0) {
		l->carves++;
		rc = 0;
	} else {
		rc = error_set(GPB_E_NOMEM, "out of memory");
	}
	pthread_mutex_unlock(&ls->lock);
	if (rc < 0) {
		client_call_id(c, PROTO_M_FREE, PROTO_F_ID, carve);
		return rc;
	}
	*daemon_id = carve;
	return 0;
}
