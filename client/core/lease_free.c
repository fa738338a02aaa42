/*
 * lease_free.c - frees and carves of local blocks (lease.h): a free waits
 * for the work queued on the block (gpb_free's promise: behind a fence,
 * lease_defer.c), gpb_free_async frees it once its stream has run, and
 * export or attach of a block carves it into a daemon allocation first.
 */
#include "lease.h"
#include "lease_internal.h"
#include "client.h"
#include "error.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

/* Keeps a freed carved block's range from being served again here until
 * its lease goes back (lease_internal.h). Out of memory for the list, the
 * range goes back to the pool: served again, as without leases it would
 * not be, but nothing is lost. */
static void lease_quarantine(struct lease_inst *in, struct pool_block *b)
{
	if (in->nquarantine == in->quarantine_cap) {
		unsigned cap = in->quarantine_cap ? 2 * in->quarantine_cap : 8;
		struct pool_block **q = realloc(in->quarantine, cap * sizeof(*q));
		if (!q) {
			pool_free(in->pool, b);
			return;
		}
		in->quarantine = q;
		in->quarantine_cap = cap;
	}
	in->quarantine[in->nquarantine++] = b;
}

/* Frees the block of slot @sl (into its instance's cache while that has
 * room: the next alloc of its size takes it back). The allocator's lock
 * held, or the slot's arena's for a block with no hold. */
void lease_block_free(struct lease_state *ls, struct lease_slot *sl, bool carved)
{
	struct lease *l = sl->l;
	struct lease_inst *in = l->inst;
	struct lease_arena *ar = &ls->arenas[in->arena];
	struct lease_cached freed = {sl->b, l, sl->size, sl->offset};

	/* Held for a graph and freed another way (a carve's free): let go. */
	if (sl->hold)
		ls->hold_opener->fence_free(sl->hold);
	sl->hold = NULL;
	sl->b = NULL;
	sl->carved = sl->freeing = false;
	sl->next_free = ar->slot_free;
	ar->slot_free = (uint32_t)(sl - ar->slots) + 1;
	in->in_use -= freed.size;
	if (!carved) {
		if (in->ncache < LEASE_CACHE)
			in->cache[in->ncache++] = freed;
		else
			pool_free(in->pool, freed.b);
	} else {
		lease_quarantine(in, freed.b);
	}
	if (--l->live == 0) {
		l->idle_since = lease_now_ms();
		lease_service_ring(ls, l->idle_since + ls->idle_ms);
	}
}

/* The mapping whose queued work a free of @sl's block must wait for (a
 * reference the caller puts), or NULL (sim: no queues). Allocator lock
 * held. */
static struct slab_map *block_work(struct lease_slot *sl)
{
	struct slab_map *map = sl->l->map;
	if (!map || !map->opener->finish)
		return NULL;
	slab_cache_ref(map);
	return map;
}

/* lease_free_local's way when work may be queued on the block: waited
 * for outside the allocator's lock, then the block freed if still there. */
static __attribute__((noinline)) int free_after_work(struct lease_state *ls, uint64_t id,
                                                     struct slab_map *map)
{
	struct lease_slot *sl;
	int rc = 1;

	lease_map_finish(map);
	struct lease_arena *ar = lease_id_arena(ls, id);
	pthread_mutex_lock(&ar->lock);
	/* Looked up again: another thread may have freed it meanwhile (no
	 * hold: a block a graph holds never comes this way). */
	sl = lease_slot_get(ls, id);
	if (sl && !sl->carved && !sl->freeing && !sl->hold) {
		lease_block_free(ls, sl, false);
		rc = 0;
	}
	pthread_mutex_unlock(&ar->lock);
	return rc;
}

/* A free of @id, which a graph held when its arena's lock (now dropped)
 * was: behind the graph's fence (lease_held_take), which needs the
 * allocator's lock. 0, or 1 when another free took it meanwhile. */
static int free_held(struct lease_state *ls, uint64_t id)
{
	struct lease_slot *sl;
	int rc = 1;

	lease_lock(ls);
	sl = lease_slot_get(ls, id);
	if (sl && !sl->carved && !sl->freeing && sl->hold) {
		lease_held_take(ls, sl, id);
		rc = 0;
	}
	lease_unlock(ls);
	return rc;
}

int lease_free_local(struct gpb_client *c, uint64_t id)
{
	struct lease_state *ls = &c->lease;
	struct lease_slot *sl;
	struct slab_map *map = NULL;
	void *stream = NULL;
	bool deferred = false;
	int rc = 1;

	struct lease_arena *ar = lease_id_arena(ls, id);
	if (!ar)
		return 1;
	/* Its arena's lock alone: the slot is all it looks at, but for a
	 * block a graph holds (lease_held_take: the allocator's lock). */
	pthread_mutex_lock(&ar->lock);
	sl = lease_slot_get(ls, id);
	if (sl && !sl->carved && !sl->freeing && sl->hold) {
		pthread_mutex_unlock(&ar->lock);
		return free_held(ls, id);
	} else if (sl && !sl->carved && !sl->freeing) {
		map = block_work(sl);
		if (!map) { /* nothing queued to wait for (sim): freed at once */
			lease_block_free(ls, sl, false);
			rc = 0;
		} else if (map->opener->fence &&
		           (!ls->free_sync ||
		            (map->opener->capturing && map->opener->capturing(map->priv, NULL)))) {
			/* (GPUBROKER_FREE_SYNC=1 waits, unless a capture is on:
			 * a synchronize would break it. Asked under the lock: the
			 * opted-in slow path only.) */
			sl->freeing = true; /* no other free takes it meanwhile */
			deferred = true;
			/* A block of a stream's leases: the fence on that
			 * stream, whose work it is. */
			stream = lease_stream_of(sl->l->inst->stream);
		}
	}
	pthread_mutex_unlock(&ar->lock);
	if (deferred)
		return lease_free_deferred(ls, id, map, stream);
	return map ? free_after_work(ls, id, map) : rc;
}

int lease_free_carved(struct gpb_client *c, uint64_t id)
{
	struct lease_state *ls = &c->lease;
	struct lease_slot *sl;
	struct slab_map *map = NULL;
	uintptr_t carve = 0;
	int rc;

	if (!lease_id_local(id))
		return 1;
	lease_lock(ls);
	sl = lease_slot_get(ls, id);
	if (sl && sl->freeing)
		sl = NULL; /* gpb_free_async has it */
	if (sl && sl->carved) {
		carve = (uintptr_t)idmap_get(&ls->carves, id);
		map = block_work(sl);
	}
	lease_unlock(ls);
	if (!sl)
		return 1;
	if (carve) {
		/* The carve goes first: the daemon frees it in order, before
		 * any lease_return sent after it; and may hand its range to
		 * another at once: the work queued on it first. */
		if (map)
			lease_map_finish(map);
		rc = client_conn_send_free(&c->conn, (uint64_t)carve);
		if (rc < 0)
			return rc;
	}
	lease_lock(ls);
	sl = lease_slot_get(ls, id);
	bool was_carved = sl && carve && sl->carved;
	if (was_carved) {
		idmap_remove(&ls->carves, id);
		sl->l->carves--;
	}
	if (sl)
		lease_block_free(ls, sl, was_carved);
	lease_unlock(ls);
	return 0;
}

int lease_free_stream(struct gpb_client *c, uint64_t id, void *stream)
{
	struct lease_state *ls = &c->lease;
	struct lease_slot *sl;
	int rc = 1;

	const struct slab_opener *opener = c->track.opener;
	void *key = lease_stream_key(stream);

	if (!lease_id_local(id))
		return 1;
	/* A capturing stream: its work so far is a graph that may run after
	 * the free, so the block takes a fence (lease_free_async). */
	if (key != LEASE_STREAM_LEGACY && opener && opener->capturing &&
	    opener->capturing(NULL, stream))
		return 1;
	/* Its arena's lock alone, unless a graph holds it (lease_held_take
	 * needs the allocator's). */
	struct lease_arena *ar = lease_id_arena(ls, id);
	if (!ar)
		return 1;
	pthread_mutex_lock(&ar->lock);
	sl = lease_slot_get(ls, id);
	if (sl && !sl->freeing && !sl->carved && sl->hold) {
		pthread_mutex_unlock(&ar->lock);
		return free_held(ls, id);
	} else if (sl && !sl->freeing && !sl->carved && sl->l->inst->stream &&
	           sl->l->inst->stream == key &&
	           !(key == LEASE_STREAM_LEGACY && sl->l->map && sl->l->map->opener->capturing &&
	             sl->l->map->opener->capturing(sl->l->map->priv, NULL))) {
		/* On the stream its leases serve (gpb_alloc_async): served
		 * again at once, the stream orders the old work before the new.
		 * (The legacy stream's capture check needs the context: made
		 * under the lock, on this rare path only.) */
		lease_block_free(ls, sl, false);
		rc = 0;
	}
	pthread_mutex_unlock(&ar->lock);
	return rc;
}

int lease_free_async(struct gpb_client *c, uint64_t id, void *stream, void **fence)
{
	struct lease_state *ls = &c->lease;
	struct slab_map *map = NULL;
	struct lease_slot *sl;
	int rc = 0;

	*fence = NULL;
	if (!lease_id_local(id))
		return 1;
	/* A block of @stream's own leases went by lease_free_stream already
	 * (gpb_free_async, before the client's lock). */
	lease_lock(ls);
	sl = lease_slot_get(ls, id);
	if (sl && sl->freeing)
		sl = NULL;
	if (sl && sl->hold && !sl->carved) {
		lease_held_take(ls, sl, id); /* a graph's: behind its fence */
		lease_unlock(ls);
		return 0;
	}
	if (sl && sl->l->map && sl->l->map->opener->fence) {
		map = sl->l->map;
		slab_cache_ref(map);
	}
	lease_unlock(ls);
	if (!sl)
		return 1;
	if (map) {
		rc = map->opener->fence(map->priv, stream, fence);
		slab_cache_put(map);
		if (rc < 0)
			return rc;
		rc = 0; /* a capture's fence too: the pending queue is polled whole */
	}
	if (*fence) {
		lease_lock(ls);
		sl = lease_slot_get(ls, id);
		if (sl && !sl->freeing)
			sl->freeing = true; /* freed by lease_release_pending */
		lease_unlock(ls);
		if (sl)
			return 0;
		map->opener->fence_wait(*fence); /* freed meanwhile: nothing to wait for */
		map->opener->fence_free(*fence);
		*fence = NULL;
		return 1;
	}
	/* Nothing queued can still run: freed now. */
	rc = lease_free_local(c, id);
	return rc == 1 ? lease_free_carved(c, id) : rc;
}

void lease_release_pending(struct gpb_client *c, uint64_t id)
{
	struct lease_state *ls = &c->lease;
	struct lease_slot *sl;
	bool carved = false;

	lease_lock(ls);
	sl = lease_slot_get(ls, id);
	if (sl && sl->freeing) {
		sl->freeing = false;
		carved = sl->carved;
		if (!carved)
			lease_block_free(ls, sl, false);
	}
	lease_unlock(ls);
	if (carved)
		lease_free_carved(c, id);
}

void lease_capture_hold(struct gpb_client *c, uint64_t id, void *stream)
{
	const struct slab_opener *opener = c->track.opener;
	struct lease_state *ls = &c->lease;
	struct slab_map *map = NULL;
	struct lease_slot *sl;
	void *hold = NULL;

	/* The legacy stream (gpb_alloc's, or NULL given): not looked at, as
	 * gpb_alloc's blocks are not (a query per allocation). */
	if (!lease_id_local(id) || lease_stream_key(stream) == LEASE_STREAM_LEGACY || !opener ||
	    !opener->capturing || !opener->capturing(NULL, stream))
		return;
	lease_lock(ls);
	sl = lease_slot_get(ls, id);
	if (sl && !sl->hold && sl->l->map) {
		map = sl->l->map;
		slab_cache_ref(map);
	}
	lease_unlock(ls);
	if (!map)
		return;
	/* Not a capture's fence (the capture ended meanwhile): nothing held. */
	if (map->opener->fence(map->priv, stream, &hold) != 1) {
		error_clear();
		if (hold)
			map->opener->fence_free(hold);
		hold = NULL;
	}
	opener = map->opener;
	slab_cache_put(map);
	if (!hold)
		return;
	lease_lock(ls);
	sl = lease_slot_get(ls, id);
	if (sl && !sl->hold && !sl->freeing) {
		sl->hold = hold;
		ls->hold_opener = opener;
		hold = NULL;
	}
	lease_unlock(ls);
	if (hold)
		opener->fence_free(hold);
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
	struct lease *l = NULL;
	uint64_t carve = 0, off = 0, size = 0;
	cJSON *params;
	int rc;

	if (!lease_id_local(id))
		return 1;
	lease_lock(ls);
	struct lease_slot *sl = lease_slot_get(ls, id);
	if (sl) {
		carve = sl->carved ? (uintptr_t)idmap_get(&ls->carves, id) : 0;
		l = sl->l;
		off = sl->offset;
		size = sl->size;
	}
	lease_unlock(ls);
	if (!sl)
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
	lease_lock(ls);
	/* Looked up again: an invalidate read with the reply forgot it. */
	sl = lease_slot_get(ls, id);
	if (!sl) {
		rc = error_set(GPB_E_NOT_FOUND, "no allocation %016" PRIx64, id);
	} else if (idmap_put(&ls->carves, id, (void *)(uintptr_t)carve) == 0) {
		sl->l->carves++;
		sl->carved = true;
		rc = 0;
	} else {
		rc = error_set(GPB_E_NOMEM, "out of memory");
	}
	lease_unlock(ls);
	if (rc < 0) {
		client_call_id(c, PROTO_M_FREE, PROTO_F_ID, carve);
		return rc;
	}
	*daemon_id = carve;
	return 0;
}
