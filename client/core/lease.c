/*
 * lease.c - the lease allocator (lease.h): blocks inside the instance's
 * leases, one pool (pool/pool.h) per instance whose slabs are the leases.
 *
 * The pool asks for a slab through its create callback while the
 * allocator's lock is held, so create never talks to the daemon: it hands
 * over a lease already granted and mapped ("ready"), or says -ENOMEM. The
 * slow path grants one (the round trip without the allocator's lock),
 * files it ready and asks the pool again; the pool's tail-slab rule then
 * takes it at the size the room callback names. Every lease in a pool is
 * pinned, so the pool never lets one go by itself: unpinning it (idle, or
 * to lease again) makes the pool release it through the destroy callback,
 * which files it "doomed", returned once the client's lock is held.
 */
#include "lease.h"
#include "lease_internal.h"
#include "client.h"
#include "error.h"
#include "pool.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

/* ---- the pool's slab callbacks ------------------------------------------- */

static int inst_slab_create(void *ctx, uint64_t size, uint32_t uid, void **slab)
{
	struct lease_inst *in = ctx;

	(void)uid;
	for (struct lease *l = in->leases; l; l = l->next)
		if (!l->ps && l->size == size) {
			*slab = l;
			return 0;
		}
	return -ENOMEM;
}

static void inst_slab_destroy(void *ctx, void *slab)
{
	struct lease_inst *in = ctx;
	struct lease *l = slab, **pp;

	for (pp = &in->leases; *pp != l; pp = &(*pp)->next)
		;
	*pp = l->next;
	in->count--;
	in->leased -= l->size;
	l->ps = NULL;
	if (in->ls->abandoning) {
		lease_map_put(l);
		free(l);
		return;
	}
	l->next = in->ls->doomed;
	in->ls->doomed = l;
}

void lease_let_go(struct lease_inst *in, struct lease *l)
{
	if (l->ps) {
		lease_unquarantine(in, l);
		pool_slab_unpin(in->pool, l->ps); /* the pool lets it go: doomed */
	} else {
		inst_slab_destroy(in, l); /* ready, never taken in: the same */
	}
}

/* The largest ready lease: what the pool's tail slab takes. */
static uint64_t inst_slab_room(void *ctx)
{
	struct lease_inst *in = ctx;
	uint64_t room = 0;

	for (struct lease *l = in->leases; l; l = l->next)
		if (!l->ps && l->size > room)
			room = l->size;
	return room;
}

static const struct pool_slab_ops inst_slab_ops = {
    .create = inst_slab_create,
    .destroy = inst_slab_destroy,
    .room = inst_slab_room,
};

/* ---- instances ------------------------------------------------------------ */

/* @instance's instance for @stream in arena @arena (its lock held). */
static struct lease_inst *inst_find(struct lease_state *ls, uint64_t instance, void *stream,
                                    unsigned arena)
{
	for (struct lease_inst *in = ls->insts; in; in = in->next)
		if (in->instance == instance && in->stream == stream && in->arena == arena)
			return in;
	return NULL;
}

uint64_t lease_instance_in_use(struct lease_state *ls, uint64_t instance)
{
	uint64_t n = 0;

	for (struct lease_inst *in = ls->insts; in; in = in->next)
		if (in->instance == instance)
			n += in->in_use;
	return n;
}

/* The calling thread's instance of @instance for @stream, made if need be.
 * Allocator lock held. */
static struct lease_inst *inst_get(struct lease_state *ls, uint64_t instance, void *stream)
{
	unsigned arena = lease_thread_arena(ls);
	struct lease_inst *in = inst_find(ls, instance, stream, arena);
	/* Slabs as large as a pool has: the pool's first ask always falls
	 * to the tail-slab rule, which takes the ready lease's size. */
	struct pool_config cfg = {
	    .slab_size = POOL_MAX_SLAB, .large_threshold = POOL_MAX_SLAB, .keep_empty = 0};

	if (in)
		return in;
	in = aligned_alloc(_Alignof(struct lease_inst), sizeof(*in)); /* lease_internal.h */
	if (!in)
		return NULL;
	memset(in, 0, sizeof(*in));
	in->ls = ls;
	in->instance = instance;
	in->stream = stream;
	in->arena = arena;
	in->pool = pool_create(&cfg, &inst_slab_ops, in);
	if (!in->pool) {
		free(in);
		return NULL;
	}
	in->next = ls->insts;
	ls->insts = in;
	return in;
}

/* Forgets every instance, lease and carve (the slots are the caller's:
 * lease_forget keeps them). */
static void inst_destroy_all(struct lease_state *ls)
{
	struct lease_inst *in;

	ls->abandoning = true;
	while ((in = ls->insts)) {
		ls->insts = in->next;
		pool_destroy(in->pool); /* frees the pooled leases */
		while (in->leases) {    /* the ready ones */
			struct lease *l = in->leases;
			in->leases = l->next;
			lease_map_put(l);
			free(l);
		}
		free(in->quarantine);
		free(in);
	}
	while (ls->doomed) {
		struct lease *l = ls->doomed;
		ls->doomed = l->next;
		lease_map_put(l);
		free(l);
	}
	while (ls->recalled) { /* returned already; their holds went with the track */
		struct lease *l = ls->recalled;
		ls->recalled = l->next;
		lease_map_put(l);
		free(l);
	}
	ls->abandoning = false;
	idmap_finish(&ls->carves);
	idmap_init(&ls->carves);
}

/* Lets go of the capture fences that live blocks were held with (their
 * blocks are being forgotten); @driver: not in a forked child. */
static void slots_drop_holds(struct lease_state *ls, bool driver)
{
	for (unsigned a = 0; ls->hold_opener && a < ls->narenas; a++) {
		struct lease_arena *ar = &ls->arenas[a];
		for (uint32_t i = 0; i < ar->slot_count; i++) {
			if (!ar->slots[i].hold)
				continue;
			if (driver)
				ls->hold_opener->fence_free(ar->slots[i].hold);
			else if (ls->hold_opener->fence_forget)
				ls->hold_opener->fence_forget(ar->slots[i].hold);
			ar->slots[i].hold = NULL;
		}
	}
}

static void slots_free(struct lease_state *ls, bool driver)
{
	slots_drop_holds(ls, driver);
	for (unsigned a = 0; a < ls->narenas; a++) {
		struct lease_arena *ar = &ls->arenas[a];
		free(ar->slots);
		ar->slots = NULL;
		ar->slot_count = ar->slot_cap = ar->slot_free = 0;
	}
}

/* ---- life ----------------------------------------------------------------- */

void lease_init(struct lease_state *ls)
{
	const char *on = getenv("GPUBROKER_LEASE"), *idle = getenv("GPUBROKER_LEASE_IDLE_MS");
	const char *sync = getenv("GPUBROKER_FREE_SYNC");

	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	memset(ls, 0, sizeof(*ls));
	pthread_mutex_init(&ls->lock, NULL);
	pthread_mutex_init(&ls->ring_lock, NULL);
	/* An arena per CPU: more threads than CPUs do not run at once. */
	ls->narenas = cpus < 1 ? 1 : cpus > LEASE_ARENAS_MAX ? LEASE_ARENAS_MAX : (unsigned)cpus;
	for (unsigned a = 0; a < LEASE_ARENAS_MAX; a++)
		pthread_mutex_init(&ls->arenas[a].lock, NULL);
	pthread_cond_init(&ls->pause_cond, NULL);
	ls->wakefd = -1;
	ls->wake_request = UINT64_MAX;
	ls->wanted = ls->enabled = !(on && strcmp(on, "0") == 0);
	ls->idle_ms = LEASE_IDLE_DEFAULT;
	ls->free_sync = sync && strcmp(sync, "1") == 0;
	if (idle && *idle) {
		char *end;
		unsigned long v = strtoul(idle, &end, 10);
		if (!*end && v <= 24ul * 3600 * 1000)
			ls->idle_ms = (unsigned)v;
	}
	/* Ids of this client's own: another process's ids name nothing here. */
	if (getrandom(&ls->salt, sizeof(ls->salt), GRND_NONBLOCK) != sizeof(ls->salt))
		ls->salt = (uint64_t)getpid() << 24 ^ (uint64_t)(uintptr_t)ls;
	idmap_init(&ls->carves);
}

void lease_finish(struct gpb_client *c)
{
	struct lease_state *ls = &c->lease;

	lease_service_stop(c);
	lease_deferred_drop(ls, true);
	inst_destroy_all(ls);
	slots_free(ls, true);
	idmap_finish(&ls->carves);
	pthread_cond_destroy(&ls->pause_cond);
	for (unsigned a = 0; a < LEASE_ARENAS_MAX; a++)
		pthread_mutex_destroy(&ls->arenas[a].lock);
	pthread_mutex_destroy(&ls->ring_lock);
	pthread_mutex_destroy(&ls->lock);
}

void lease_abandon(struct lease_state *ls)
{
	lease_deferred_drop(ls, false);
	inst_destroy_all(ls);
	slots_free(ls, false);
	idmap_finish(&ls->carves);
	/* The parent's thread's doorbell: the child's copy only. */
	if (ls->wakefd >= 0)
		close(ls->wakefd);
	ls->wakefd = -1;
}

void lease_conn_lost(struct gpb_client *c)
{
	if (c->lease.lost)
		return;
	lease_lock(&c->lease);
	c->lease.lost = true;
	lease_unlock(&c->lease);
}

void lease_forget(struct gpb_client *c)
{
	struct lease_state *ls = &c->lease;

	lease_lock(ls);
	lease_deferred_drop(ls, true);
	inst_destroy_all(ls);
	/* Every slot goes free with the generation it had, so that the ids
	 * of the blocks just dropped stay unknown (GPB_E_NOT_FOUND, as the
	 * daemon's ids of released allocations are): a slot table started
	 * afresh would give the next block the id of an old one, and a free
	 * of that id would free the new block. */
	slots_drop_holds(ls, true);
	for (unsigned a = 0; a < ls->narenas; a++) {
		struct lease_arena *ar = &ls->arenas[a];
		ar->slot_free = 0;
		for (uint32_t i = ar->slot_count; i-- > 0;) {
			ar->slots[i].b = NULL;
			ar->slots[i].next_free = ar->slot_free;
			ar->slot_free = i + 1;
		}
	}
	/* A refusal of `lease` (allocator direct or async) held until now;
	 * this event may be the allocator's change back to the pool: the
	 * next gpb_alloc asks again (one refusal more at most). */
	ls->enabled = ls->wanted;
	lease_unlock(ls);
}

/* ---- blocks --------------------------------------------------------------- */

/* Allocator lock held: a block from the pool of @in (a ready lease may be
 * taken into it). 0 or -ENOMEM/-EINVAL. */
/* Room for one more slot (before the pool is asked, so that a block is
 * never made without an id to give it): 0 or -ENOMEM. */
static int slot_reserve(struct lease_arena *ar)
{
	if (ar->slot_free || ar->slot_count < ar->slot_cap)
		return 0;
	uint32_t cap = ar->slot_cap ? ar->slot_cap * 2 : 64;
	if (cap > LEASE_INDEX_MASK + 1u)
		return -ENOMEM; /* 2 M live local blocks an arena: the rest go per request */
	struct lease_slot *n = realloc(ar->slots, cap * sizeof(*n));
	if (!n)
		return -ENOMEM;
	ar->slots = n;
	ar->slot_cap = cap;
	return 0;
}

/* The id of a new live block (slot_reserve() first). */
static uint64_t slot_put(struct lease_state *ls, unsigned arena, const struct lease_cached *got)
{
	struct lease_arena *ar = &ls->arenas[arena];
	uint32_t i;
	if (ar->slot_free) {
		i = ar->slot_free - 1;
		ar->slot_free = ar->slots[i].next_free;
	} else {
		i = ar->slot_count++;
		ar->slots[i].gen = 0;
	}
	struct lease_slot *sl = &ar->slots[i];
	sl->gen = (sl->gen + 1) & LEASE_SLOT_MASK;
	sl->b = got->b;
	sl->l = got->l;
	sl->size = got->size;
	sl->offset = got->offset;
	sl->carved = sl->freeing = false;
	sl->hold = NULL;
	uint64_t x = (uint64_t)sl->gen << LEASE_SLOT_BITS | (uint64_t)arena << LEASE_INDEX_BITS | i;
	return LEASE_ID_TAG << 48 | ((x ^ ls->salt) & ((1ull << 48) - 1));
}

/* A block of @size for @in, with its figures: a cached one of the same
 * rounded size and a fitting alignment, else the pool's (once more after
 * the cache went back to it, should it fragment the leases). @all: the
 * allocator's lock held (then the frees whose fences passed are room
 * too), else @in's arena's alone. */
static int inst_block(struct lease_inst *in, uint64_t size, uint64_t alignment, bool all,
                      struct lease_cached *out)
{
	uint64_t rounded = (size + PROTO_GRANULE - 1) & ~(uint64_t)(PROTO_GRANULE - 1);
	for (unsigned k = in->ncache; k-- > 0;) {
		if (in->cache[k].size == rounded && !(in->cache[k].offset & (alignment - 1))) {
			*out = in->cache[k];
			in->cache[k] = in->cache[--in->ncache];
			return 0;
		}
	}
	int err = pool_alloc(in->pool, 0, size, alignment, &out->b);
	if (err == -ENOMEM && (in->ncache || (all && lease_deferred_any(in->ls)))) {
		/* Blocks whose frees' fences passed since are room too. */
		if (all)
			lease_deferred_poll(in->ls);
		lease_inst_flush(in);
		err = pool_alloc(in->pool, 0, size, alignment, &out->b);
	}
	if (err)
		return err;
	out->l = pool_slab_backend(pool_block_slab(out->b));
	out->size = pool_block_size(out->b);
	out->offset = pool_block_offset(out->b);
	if (!out->l->ps) { /* a ready lease the pool just took in: pinned for good */
		out->l->ps = pool_block_slab(out->b);
		pool_slab_pin(out->l->ps);
	}
	return 0;
}

/* A block for @in: its arena's lock held, or (@all) the allocator's. */
static int inst_take(struct lease_state *ls, struct lease_inst *in, uint64_t size,
                     uint64_t alignment, bool all, struct gpb_allocation *out)
{
	struct lease_cached got;

	if (slot_reserve(&ls->arenas[in->arena]) < 0)
		return -ENOMEM;
	int err = inst_block(in, size, alignment, all, &got);
	if (err)
		return err;
	struct lease *l = got.l;
	/* Its context died (cuDevicePrimaryCtxReset, cuCtxDestroy): no block
	 * of a mapping that is gone; the slow path maps it anew. Asked of
	 * backends with contexts only (sim's mappings never die). */
	if (l->map && l->map->opener->alive && slab_cache_dead(l->map)) {
		pool_free(in->pool, got.b);
		return -ESTALE;
	}
	l->live++;
	in->in_use += got.size;
	out->id = slot_put(ls, in->arena, &got);
	out->ptr = l->base + got.offset;
	out->size = got.size;
	out->device = l->device;
	out->slab = l->slab;
	out->offset = l->offset + got.offset;
	return 0;
}

int lease_alloc_local(struct gpb_client *c, uint64_t instance, uint64_t size, uint64_t alignment,
                      void *stream, struct gpb_allocation *out)
{
	struct lease_state *ls = &c->lease;
	struct lease_inst *in;
	int rc = 1;

	if (!ls->enabled)
		return 1;
	unsigned arena = lease_thread_arena(ls);
	/* The thread's arena's lock alone: lost, local_max and the list of
	 * instances change under the allocator's lock, every arena's. */
	pthread_mutex_lock(&ls->arenas[arena].lock);
	in = ls->lost ? NULL : inst_find(ls, instance, stream, arena);
	if (in && in->count && size <= ls->local_max &&
	    inst_take(ls, in, size, alignment, false, out) == 0)
		rc = 0;
	pthread_mutex_unlock(&ls->arenas[arena].lock);
	return rc;
}

/* ---- leases: the round trips (client lock held, allocator lock not) ------- */

/* Asks for a lease of at least @need bytes for @instance's blocks on
 * @stream and files it ready. 0 or a GPB_E_* error. */
static int lease_request(struct gpb_client *c, uint64_t instance, void *stream, uint64_t need)
{
	struct lease_inst *in;
	struct lease_state *ls = &c->lease;
	struct gpb_allocation g;
	struct track_prep prep;
	struct proto_reply rep;
	struct lease *l;
	uint64_t id = 0, in_use, slab_size = 0, slab = 0;
	cJSON *params;
	int fd, rc;

	if (c->conn.dead)
		return client_conn_dead_error(&c->conn);
	if (!c->track.opener)
		return 1;
	l = calloc(1, sizeof(*l));
	if (!l)
		return error_set(GPB_E_NOMEM, "out of memory");
	rc = track_prepare(&c->track, TRACK_ALLOC, &prep);
	if (rc < 0) {
		free(l);
		return rc;
	}
	lease_lock(ls);
	in_use = lease_instance_in_use(ls, instance);
	lease_unlock(ls);
	params = cJSON_CreateObject();
	if (params && (proto_add_id64(params, PROTO_F_INSTANCE, instance) < 0 ||
	               proto_add_u64(params, PROTO_F_SIZE, need) < 0 ||
	               proto_add_u64(params, PROTO_F_IN_USE, in_use) < 0)) {
		cJSON_Delete(params);
		params = NULL;
	}
	rc = params ? client_conn_call(&c->conn, PROTO_M_LEASE, params, &rep, &fd)
	            : error_set(GPB_E_NOMEM, "out of memory");
	if (rc < 0)
		goto out;
	(void)proto_get_u64(rep.result, PROTO_F_SLAB_SIZE, 1, UINT64_MAX, &slab_size);
	if (proto_get_id64(rep.result, PROTO_F_SLAB, &slab) < 0)
		slab = 0;
	rc = track_adopt(&c->track, TRACK_ALLOC, &prep, rep.result, fd, &g, &id);
	proto_reply_finish(&rep);
	if (rc == GPB_E_PROTOCOL) {
		rc = client_conn_fail(&c->conn, rc, "%s", error_message());
		goto out;
	}
	if (rc < 0) {
		/* Not mappable here: given back, and the slab too, which a
		 * daemon that keeps emptied slabs would keep for this
		 * connection though this library never took it (as
		 * memory_undo does for an alloc). */
		if (id && client_call_id(c, PROTO_M_LEASE_RETURN, PROTO_F_LEASE, id) == 0 && slab &&
		    !track_holds_slab(&c->track, slab))
			client_conn_send_release(&c->conn, slab);
		goto out;
	}
	l->id = id;
	l->base = g.ptr;
	l->size = g.size;
	l->offset = g.offset;
	l->slab = g.slab;
	l->device = g.device;
	{
		struct track_entry *e = track_lookup(&c->track, TRACK_ALLOC, id);
		l->map = e && e->slab ? e->slab->map : NULL;
		if (l->map)
			slab_cache_ref(l->map);
	}
	lease_lock(ls);
	/* Looked up again: an invalidate read with the reply forgot it. */
	in = inst_get(ls, instance, stream);
	if (!in) {
		lease_unlock(ls);
		lease_map_put(l);
		client_call_id(c, PROTO_M_LEASE_RETURN, PROTO_F_LEASE, id);
		track_release(&c->track, TRACK_ALLOC, id);
		rc = error_set(GPB_E_NOMEM, "out of memory");
		goto out;
	}
	l->inst = in;
	l->next = in->leases;
	in->leases = l;
	in->count++;
	in->leased += l->size;
	/* Ready, not in the pool yet: if another thread's blocks fit in the
	 * leases meanwhile, the pool may never take it; it goes back as an
	 * idle one would (lease_let_go). */
	l->idle_since = lease_now_ms();
	lease_service_ring(ls, l->idle_since + ls->idle_ms);
	if (slab_size / 4 > ls->local_max)
		ls->local_max = slab_size / 4;
	ls->leases_taken++;
	lease_unlock(ls);
	l = NULL;
out:
	free(l);
	track_prep_release(&prep);
	return rc;
}

/*
 * The leases of @instance whose mapping died with its CUDA context are
 * mapped anew (the track maps the held slab again, as for a grant in it)
 * and serve from the new mapping; the blocks served before keep their
 * dead pointers, which the copy helpers answer with GPB_E_CONTEXT_RESET.
 * 0, or the error of a slab that cannot be mapped again. Client lock held.
 */
static int inst_renew(struct gpb_client *c, uint64_t instance)
{
	struct lease_state *ls = &c->lease;
	struct lease_inst *in;
	int rc = 0;

	lease_lock(ls);
	for (in = ls->insts; in && rc == 0; in = in->next) {
		if (in->instance != instance)
			continue;
		for (struct lease *l = in->leases; l && rc == 0; l = l->next) {
			struct slab_map *fresh;

			if (!l->map || !l->map->opener->alive || !slab_cache_dead(l->map))
				continue;
			rc = track_alloc_live(&c->track, l->id, &fresh);
			if (rc < 0)
				break;
			l->base = (char *)fresh->base + ((char *)l->base - (char *)l->map->base);
			slab_cache_ref(fresh);
			slab_cache_put(l->map);
			l->map = fresh;
		}
	}
	lease_unlock(ls);
	return rc;
}

int lease_alloc(struct gpb_client *c, uint64_t instance, uint64_t size, uint64_t alignment,
                bool may_wait, void *stream, struct gpb_allocation *out)
{
	struct lease_state *ls = &c->lease;
	struct lease_inst *in;
	bool dropped = false;
	uint64_t need;
	int rc;

	(void)may_wait; /* a refusal goes per request, where it waits */
	if (!ls->enabled || !c->track.opener)
		return 1;
	/* Leases end with their connection: none to serve from once it is
	 * gone (the per-request path says so, as it always has). */
	if (c->conn.dead)
		return 1;
	if (size > POOL_MAX_SLAB / 2)
		return 1;
	need = (size + PROTO_GRANULE - 1) / PROTO_GRANULE * PROTO_GRANULE;
	for (int tries = 0; tries < 4; tries++) {
		lease_lock(ls);
		in = inst_get(ls, instance, stream);
		if (!in) {
			lease_unlock(ls);
			return error_set(GPB_E_NOMEM, "out of memory");
		}
		/* Above a quarter of a slab: a daemon allocation (local_max).
		 * Before any lease, the slab size is hello's. */
		if (!ls->local_max)
			ls->local_max = c->limits.slab_size / 4;
		if (ls->local_max && size > ls->local_max) {
			lease_unlock(ls);
			return 1;
		}
		rc = inst_take(ls, in, size, alignment, true, out);
		lease_unlock(ls);
		lease_return_doomed(c);
		if (rc == 0)
			return 0;
		if (rc == -ESTALE) {
			rc = inst_renew(c, instance);
			if (rc < 0)
				return rc;
			continue;
		}
		if (rc == -EINVAL)
			return error_set(GPB_E_INVALID, "gpb_alloc: bad size or alignment");
		rc = lease_request(c, instance, stream, need);
		if (rc == 0) {
			lease_service_start(c);
			continue;
		}
		if (rc == 1)
			return 1;
		if (rc == GPB_E_NOT_SUPPORTED ||
		    (rc == GPB_E_INVALID && strstr(error_message(), "method_not_found"))) {
			/* direct/async (or a daemon before leases): one
			 * request per allocation from now on. */
			ls->enabled = false;
			error_clear();
			return 1;
		}
		if (rc == GPB_E_INVALID || rc == GPB_E_LIMIT || rc == GPB_E_NOT_FOUND) {
			/* Above the slab size, or the daemon's lease limit: an
			 * allocation of its own. */
			error_clear();
			return 1;
		}
		if ((rc == GPB_E_OUT_OF_MEMORY || rc == GPB_E_QUOTA) && !dropped) {
			/* Fragmentation inside the leases must not become a
			 * refusal the per-allocation path would not give: the
			 * wholly free leases go back, and the lease is asked
			 * again. Every instance's, not this one's alone: the
			 * free leases of another instance of this client hold
			 * the device's room (and the user's cap) that the
			 * per-allocation path would have freed already. */
			unsigned n = 0;
			dropped = true;
			lease_lock(ls);
			lease_deferred_poll(ls);
			for (struct lease_inst *i = ls->insts; i; i = i->next)
				n += lease_inst_drop_free(i);
			lease_unlock(ls);
			if (n) {
				lease_return_doomed(c);
				error_clear();
				continue;
			}
		}
		if (rc == GPB_E_OUT_OF_MEMORY || rc == GPB_E_QUOTA) {
			/* No lease fits, but the exact size may (a lease is whole
			 * granules, a cap or the device may have less left): the
			 * allocation goes as its own request, whose answer is the
			 * per-allocation path's, a refusal included. */
			error_clear();
			return 1;
		}
		return rc;
	}
	return 1;
}

void lease_figures(struct gpb_client *c, uint64_t instance, uint64_t *leased, uint64_t *in_use,
                   uint64_t *leases)
{
	struct lease_state *ls = &c->lease;

	*leased = *in_use = *leases = 0;
	lease_lock(ls);
	lease_deferred_poll(ls); /* what the GPU is done with is not in use */
	for (struct lease_inst *in = ls->insts; in; in = in->next)
		if (!instance || in->instance == instance) {
			*leased += in->leased;
			*in_use += in->in_use;
			*leases += in->count;
		}
	lease_unlock(ls);
}
