/*
 * broker_alloc.c - the life of an allocation, and of the memory that
 * outlives it while a client process may still write there.
 *
 * An allocation (struct broker_alloc) is one pool block, charged to its
 * instance and its policy, in the daemon's table (b->allocs) and its
 * session's list:
 *
 *   create ---> UNCLAIMED --claim--> LIVE <--attach/open (holders++)--
 *     |      (allocate_queue)  <--unclaim--  |
 *     +---------------------------------->---+
 *                                            |
 *   free by its owner (broker_alloc_release), or its session ends:
 *     holders > 0     -> ORPHAN: out of the table and of its instance,
 *                        charged to the policy as orphaned, alive until
 *                        the last holder detaches (broker_unpin), which
 *                        goes on as below
 *     fence           -> FENCED: the block stays allocated in a parting
 *                        entry of the session (dev->fenced counts it)
 *                        until its client answers the invalidate epoch
 *                        (broker_parting_release), or the session ends
 *     otherwise       -> FREE: the block goes back to the pool
 *   FENCED, session ends lingering (evicted, or VMM memory without
 *   goodbye)          -> GHOST: the session's parting entries (slabs and
 *                        fences) move to a ghost, kept until its process
 *                        has exited (broker_ghost_free)
 *   ORPHAN of an evicted owner (fence_session), last holder gone
 *                     -> fenced with the owner's ghost while it lives
 *
 * A lease (broker_lease.c makes and returns it) lives as an allocation
 * does, flagged: charged whole, one block of the pool. A carve is a range
 * of a lease made an allocation, charged nothing and sharing its lease's
 * block:
 *
 *   lease --carve--> CARVE (in lease->ext->carves) --attach/open, free,
 *     orphan--> as any allocation, except that what ends it frees no block
 *     but leaves its lease (broker_carve_drop)
 *   a lease's owner lets go of it while carves live (its session ends,
 *   an invalidate) -> ORPHAN lease: out of the table and of its instance,
 *                     charged to the policy as orphaned (b->orphan_leases),
 *                     alive until its last carve goes, which goes on with
 *                     the lease's block as the last holder of an orphan does
 *   lease_return refuses a lease with carves of its own client's; with only
 *   orphaned carves (freed by it, open elsewhere) -> ORPHAN lease as above.
 *
 * "Fence" means a release the client hears of only by an event
 * (invalidate, eviction): until it has read it, it may still write the
 * range, which must not go to another allocation before.
 *
 * A slab, in turn, is held by a session while it has allocations or
 * attachments there (broker_keep.c), kept empty with keep_slabs, and
 * "parting" once the client was told to let go (invalidate, reclaim) until
 * it answers: with cuda, memory a process still maps must not go back to
 * the driver. A retired pool (set_allocator) lives as long as one of its
 * slabs is parting.
 *
 * Session end (broker_session_strip) takes the session's allocations,
 * attachments, host memory, kept slabs and instances through the states
 * above. What frees memory does not serve waiting allocations itself:
 * the public operations in broker.c do (broker_waits_run), above this
 * file.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "broker.h"
#include "broker_internal.h"
#include "log.h"

/* pool_prefer: a slab the session holds, which its client has mapped. */
static bool session_holds_slab(void *ctx, const struct pool_slab *slab)
{
	const struct session *s = ctx;
	const struct backend_slab *bs = pool_slab_backend(slab);

	return idmap_get(&s->held, bs->id) != NULL;
}

static void broker_grant_fill(struct session *s, const struct broker_alloc *a, bool fresh,
                              struct broker_grant *out)
{
	struct backend_slab *bs = pool_slab_backend(pool_block_slab(a->block));
	const struct session_slab *ss = fresh ? idmap_get(&s->held, bs->id) : NULL;
	out->keep = ss && ss->keep;
	/* A slab handed over after goodbye is mapped again. */
	if (fresh)
		s->unmapped = false;
	out->device = bs->device;
	out->slab_id = bs->id;
	out->slab_size = bs->size;
	out->id = a->id;
	out->offset = broker_alloc_offset(a);
	out->size = broker_alloc_bytes(a);
	out->handle = fresh ? bs->handle : NULL;
	out->fd = fresh ? bs->fd : -1;
	out->pool = fresh && bs->pool;
	out->pool_id = out->pool ? bs->pool_id : 0;
	out->vmm = fresh && bs->vmm;
}

/*
 * The policy's verdict on charging bytes more to inst. Without a limit the
 * capacity is the device's memory, and there the pool is the better judge:
 * it fails just the same when the device is full, but first hands back
 * cached empty slabs, and counts the refusal in its statistics (ooms).
 */
static int broker_admit(struct broker *b, struct broker_instance *inst, uint64_t bytes)
{
	const struct policy *p = broker_policy_of(b, inst->owner);
	int rc = policy_admit(p, &inst->pol, bytes, NULL);
	/* Partitions make every capacity smaller than the device. */
	return rc == -ENOMEM && p->dev[inst->device].capacity == b->dev[inst->device].info.total
	           ? 0
	           : rc;
}

/*
 * An unclaimed allocation (allocate_queue) is not held by its session yet:
 * its client was not given the handle, which broker_claim() does later.
 */
int broker_alloc_in(struct broker *b, struct session *s, struct broker_instance *inst,
                    uint64_t size, uint64_t align, enum broker_alloc_kind kind,
                    struct broker_grant *out, struct broker_alloc **made)
{
	bool hold = kind != BROKER_ALLOC_UNCLAIMED;
	if (b->stopping)
		return -ESHUTDOWN;
	if (s->alloc_count + s->attached.count + s->host_count >= b->limits.max_allocations)
		return -EMFILE;
	/* The policy counts what the pool will hand out: the size rounded
	 * up to the granule. */
	if (size > UINT64_MAX - (POOL_GRANULE - 1))
		return -EINVAL;
	int rc = broker_admit(b, inst, (size + POOL_GRANULE - 1) & ~(uint64_t)(POOL_GRANULE - 1));
	if (rc < 0)
		return rc;
	/* An operator's cap on the user, in both modes: -EXFULL, so the reply
	 * can name the user's cap rather than the instance's. */
	const struct broker_rule *rule = broker_rule_for(b, s);
	if (rule && rule->cap &&
	    pool_uid_used(b->dev[inst->device].pool, s->uid) + size > rule->cap)
		return -EXFULL;
	struct broker_alloc *a = arena_alloc(&b->alloc_arena, NULL);
	if (!a)
		return -EAGAIN;
	if (kind == BROKER_ALLOC_LEASE) {
		a->ext = calloc(1, sizeof(*a->ext));
		if (!a->ext) {
			rc = -EAGAIN;
			goto fail;
		}
		a->ext->self = a;
		list_init(&a->ext->carves);
	}
	rc = broker_new_id(b, &a->id);
	if (rc < 0)
		goto fail;
	struct pool *pool = b->dev[inst->device].pool;
	/* Where the client has a slab mapped, put it there: the handle need
	 * not be sent, nor opened again. */
	const struct pool_prefer pref = {session_holds_slab, s};
	rc = pool_alloc_prefer(pool, s->uid, broker_domain_of(s), size, align,
	                       s->held.count ? &pref : NULL, &a->block);
	if (rc == -ENOMEM)
		/* Slabs kept empty by clients are asked back: a retry (a wait)
		 * finds them once their clients have answered. */
		broker_reclaim_device(b, inst->device, false, PROTO_V_REASON_MEMORY);
	if (rc < 0)
		goto fail;
	/* Should the pool ever hand out more than the rounded size, the
	 * policy must still hold. */
	rc = broker_admit(b, inst, pool_block_size(a->block));
	if (rc < 0) {
		pool_free(pool, a->block);
		goto fail;
	}
	struct backend_slab *bs = pool_slab_backend(pool_block_slab(a->block));
	int fresh = hold ? session_hold(b, s, pool_block_slab(a->block)) : 0;
	if (fresh < 0 || idmap_put(&b->allocs, a->id, a) < 0) {
		if (fresh >= 0 && hold)
			session_unhold(b, s, bs->id, fresh == 1);
		pool_free(pool, a->block);
		rc = -EAGAIN;
		goto fail;
	}
	a->inst = inst;
	a->unclaimed = !hold;
	list_insert_tail(&s->allocs, &a->link);
	uint64_t bytes = pool_block_size(a->block);
	inst->used += bytes;
	inst->live++;
	policy_charge(broker_policy_of(b, s), &inst->pol, bytes);
	s->used += bytes;
	s->alloc_count++;
	if (kind == BROKER_ALLOC_LEASE) {
		a->lease = true;
		inst->leases++;
		inst->leased += bytes;
	}
	if (out)
		broker_grant_fill(s, a, fresh == 1, out);
	if (made)
		*made = a;
	return 0;
fail:
	broker_alloc_record_free(&b->alloc_arena, a);
	return rc;
}

int broker_alloc(struct broker *b, struct session *s, uint64_t instance, uint64_t size,
                 uint64_t align, struct broker_grant *out)
{
	struct broker_instance *inst = broker_instance_find(s, instance);
	if (!inst)
		return b->stopping ? -ESHUTDOWN : -ENOENT;
	return broker_alloc_in(b, s, inst, size, align, BROKER_ALLOC_LIVE, out, NULL);
}

int broker_alloc_queued(struct broker *b, struct broker_instance *inst, uint64_t size,
                        const char *label, uint64_t *id)
{
	struct broker_alloc *a;
	char *copy = strdup(label);
	if (!copy)
		return -EAGAIN;
	int rc = broker_alloc_in(b, inst->owner, inst, size, 0, BROKER_ALLOC_UNCLAIMED, NULL, &a);
	if (rc < 0) {
		free(copy);
		return rc;
	}
	a->label = copy;
	*id = a->id;
	return 0;
}

int broker_claim(struct broker *b, struct session *s, uint64_t id, struct broker_grant *out)
{
	struct broker_alloc *a = broker_alloc_owned(b, s, id);
	if (!a)
		return -ENOENT;
	if (!a->unclaimed)
		return -EEXIST;
	int fresh = session_hold(b, s, pool_block_slab(a->block));
	if (fresh < 0)
		return -EAGAIN;
	a->unclaimed = false;
	broker_grant_fill(s, a, fresh == 1, out);
	return 0;
}

void broker_unclaim(struct broker *b, struct session *s, const struct broker_grant *g)
{
	struct broker_alloc *a = broker_alloc_owned(b, s, g->id);
	if (!a || a->unclaimed)
		return;
	/* A handle in the grant: the claim made the session hold the slab. */
	session_unhold(b, s, g->slab_id, g->handle != NULL);
	a->unclaimed = true;
}

/* An allocation this session owns; NULL for unknown and foreign ids alike,
 * and for a lease (lease_return ends it, nothing else). */
struct broker_alloc *broker_alloc_owned(struct broker *b, struct session *s, uint64_t id)
{
	struct broker_alloc *a = idmap_get(&b->allocs, id);
	return a && a->inst->owner == s && !a->lease ? a : NULL;
}

int broker_hold(struct broker *b, struct session *s, struct broker_alloc *a,
                struct broker_grant *out)
{
	if (idmap_get(&s->attached, a->id))
		return -EEXIST;
	/* Attachments pin slabs: they count against the same limit. */
	if (s->alloc_count + s->attached.count + s->host_count >= b->limits.max_allocations)
		return -EMFILE;
	struct pool_slab *slab = pool_block_slab(a->block);
	struct backend_slab *bs = pool_slab_backend(slab);
	int fresh = session_hold(b, s, slab);
	if (fresh < 0)
		return -EAGAIN;
	if (idmap_put(&s->attached, a->id, a) < 0) {
		session_unhold(b, s, bs->id, fresh == 1);
		return -EAGAIN;
	}
	pool_slab_pin(slab);
	a->holders++;
	broker_grant_fill(s, a, fresh == 1, out);
	return 0;
}

/* Frees a block of device's pool, or fences it for s (see
 * broker_parting_add_block; out of memory, it is freed). */
static void broker_block_free(struct broker *b, struct session *s, int device,
                              struct pool_block *block, bool fence)
{
	if (fence && broker_parting_add_block(b, s, device, block) == 0)
		return;
	/* Last: this may hand the slab back to the backend. */
	pool_free(b->dev[device].pool, block);
}

/* The end of an orphan's block (an allocation's or a lease's): freed, or fenced (for s's client, or
 * for the ghost of the evicted owner while its process lives). */
static void broker_orphan_end(struct broker *b, struct session *s, struct broker_alloc *l,
                              bool fence)
{
	const struct backend_slab *bs = pool_slab_backend(pool_block_slab(l->block));
	int device = bs->device;
	if (fence || !l->fence_session ||
	    broker_ghost_fence(b, l->fence_session, device, l->block) < 0)
		broker_block_free(b, s, device, l->block, fence);
	broker_alloc_record_free(&b->alloc_arena, l);
}

/* A carve is gone (freed, or its last holder let go of an orphan): its
 * lease loses it, and an orphaned lease goes with its last carve. s is the
 * session that let go of it (its owner, or the last holder). */
static void broker_carve_drop(struct broker *b, struct session *s, struct broker_alloc *c,
                              bool fence)
{
	struct broker_alloc *l = c->ext->parent;
	list_remove(&c->ext->carve_link);
	broker_alloc_record_free(&b->alloc_arena, c);
	if (!l->orphan || !list_empty(&l->ext->carves))
		return;
	/* Carves stay inside a partition as attachments do: s's policy is
	 * the lease owner's. */
	const struct backend_slab *bs = pool_slab_backend(pool_block_slab(l->block));
	policy_orphan_release(broker_policy_of(b, s), bs->device, pool_block_size(l->block));
	b->orphan_leases--;
	broker_orphan_end(b, s, l, fence);
}

void broker_alloc_release(struct broker *b, struct session *s, struct broker_alloc *a, bool fence)
{
	struct pool_slab *slab = pool_block_slab(a->block);
	struct backend_slab *bs = pool_slab_backend(slab);
	uint64_t size = broker_alloc_charge(a);
	int device = a->inst->device;
	idmap_remove(&b->allocs, a->id);
	list_remove(&a->link);
	if (a->exported)
		broker_exports_drop_alloc(b, a);
	/* An unclaimed allocation was never counted as a hold on its slab. */
	if (!a->unclaimed)
		session_release(b, s, bs->id);
	a->inst->used -= size;
	a->inst->live -= !broker_carve_parent(a);
	if (a->lease) {
		a->inst->leases--;
		a->inst->leased -= size;
	}
	s->used -= size;
	s->alloc_count--;
	free(a->label);
	a->label = NULL;
	if (a->holders || (a->lease && !list_empty(&a->ext->carves))) {
		/* Others have it open (or carves of it): the memory stays
		 * theirs (and the device's, not the instance's) until the last
		 * lets go; a carve's stays its lease's. */
		if (size)
			policy_orphan(broker_policy_of(b, s), &a->inst->pol, size);
		a->inst = NULL;
		a->orphan = true;
		/* Its owner's process may still write it: the block is fenced
		 * for that process (its ghost, if it has one by then) when the
		 * last holder lets go. */
		if (fence)
			a->fence_session = s->id;
		if (a->lease)
			b->orphan_leases++;
		else
			b->orphan_count++;
		return;
	}
	if (broker_carve_parent(a)) {
		/* Its range is its lease's, which stays allocated (and is
		 * fenced with it, when it goes so). */
		broker_carve_drop(b, s, a, fence);
		return;
	}
	policy_uncharge(broker_policy_of(b, s), &a->inst->pol, size);
	broker_block_free(b, s, device, a->block, fence);
	broker_alloc_record_free(&b->alloc_arena, a);
}

void broker_unpin(struct broker *b, struct session *s, struct broker_alloc *a, bool fence)
{
	struct pool_slab *slab = pool_block_slab(a->block);
	struct backend_slab *bs = pool_slab_backend(slab);
	int device = bs->device;
	session_release(b, s, bs->id);
	pool_slab_unpin(b->dev[device].pool, slab);
	if (--a->holders || !a->orphan)
		return;
	b->orphan_count--;
	if (broker_carve_parent(a)) {
		broker_carve_drop(b, s, a, fence);
		return;
	}
	/* Attachments stay inside a partition (broker_attach, broker_open):
	 * the holder's policy is the owner's. */
	policy_orphan_release(broker_policy_of(b, s), device, pool_block_size(a->block));
	/* Fenced for this holder's client if it may still write it, else for
	 * the evicted owner's process while it lives. */
	broker_orphan_end(b, s, a, fence);
}

void broker_session_strip(struct broker *b, struct session *s)
{
	struct list *pos, *tmp;
	/* Evicted, its process lives on with its mappings: what it held is
	 * kept from the backend with what was parting (broker_ghost_make).
	 * Likewise a client that went without saying it unmapped its VMM
	 * slabs (killed, or a process that closed the socket and kept the
	 * mappings): that memory lives as long as its process maps it. */
	bool linger = broker_session_lingers(s);
	if (linger)
		broker_parting_add(b, s, b->invalidate_epoch);
	/* And the ranges of its allocations and attachments stay allocated
	 * (fenced, with the ghost) while that process may write there: handed
	 * to another allocation of its uid in the same slab, they would be
	 * shared with it. */
	list_for_each_safe(pos, tmp, &s->allocs) {
		broker_alloc_release(b, s, list_entry(pos, struct broker_alloc, link), linger);
	}
	broker_hosts_release(b, s);
	size_t it = 0;
	struct broker_alloc *a;
	while ((a = idmap_next(&s->attached, &it, NULL)))
		broker_unpin(b, s, a, linger);
	/* Empty, for a session that lives on (its partition was destroyed). */
	idmap_finish(&s->attached);
	idmap_init(&s->attached);
	session_unkeep_all(b, s);
	if (linger)
		broker_ghost_make(b, s);
	else
		broker_parting_drop(b, s);
	list_for_each_safe(pos, tmp, &s->instances) {
		broker_instance_free(b, s, list_entry(pos, struct broker_instance, link));
	}
}

/* Pins every slab s holds until its client has closed it. Out of memory,
 * a slab is not pinned: the daemon goes on and logs it. */
void broker_parting_add(struct broker *b, struct session *s, uint64_t epoch)
{
	size_t it = 0;
	struct session_slab *ss;
	while ((ss = idmap_next(&s->held, &it, NULL))) {
		const struct backend_slab *bs = pool_slab_backend(ss->slab);
		struct broker_parting *p = malloc(sizeof(*p));
		if (!p) {
			log_warn("session %llu: slab %llu not kept for its client: out of memory",
			         (unsigned long long)s->id, (unsigned long long)bs->id);
			continue;
		}
		p->pool = b->dev[bs->device].pool;
		p->slab = ss->slab;
		p->epoch = epoch;
		p->reclaim = false;
		p->block = NULL;
		p->next = s->parting;
		s->parting = p;
		s->parting_count++;
		pool_slab_pin(ss->slab);
	}
}

unsigned broker_session_goodbye(struct session *s)
{
	s->unmapped = true;
	return (unsigned)s->held.count;
}

bool broker_session_lingers(const struct session *s)
{
	if (s->evicted)
		return true;
	if (s->unmapped)
		return false;
	for (const struct broker_parting *p = s->parting; p; p = p->next) {
		const struct backend_slab *bs = pool_slab_backend(p->slab);
		if (bs->vmm)
			return true;
	}
	size_t it = 0;
	struct session_slab *ss;
	while ((ss = idmap_next(&s->held, &it, NULL))) {
		const struct backend_slab *bs = pool_slab_backend(ss->slab);
		if (bs->vmm)
			return true;
	}
	return false;
}

struct broker_retired *broker_retired_find(const struct broker *b, const struct pool *pool)
{
	struct list *pos;
	list_for_each(pos, &b->retired) {
		struct broker_retired *r = list_entry(pos, struct broker_retired, link);
		if (r->pool == pool)
			return r;
	}
	return NULL;
}

/* Unpins one parting slab and frees the entry; a retired pool goes with
 * its last parting slab. */
static void broker_parting_free(struct broker *b, struct broker_parting *p)
{
	struct broker_retired *r = broker_retired_find(b, p->pool);
	uint32_t uid = pool_slab_uid(p->slab);
	if (p->block) {
		const struct backend_slab *bs = pool_slab_backend(p->slab);
		b->dev[bs->device].fenced -= pool_block_size(p->block);
		pool_free(p->pool, p->block); /* pinned: the slab stays for the unpin */
	}
	pool_slab_unpin(p->pool, p->slab);
	/* A retired pool serves no one: an empty slab it would cache for the
	 * uid goes back now, not with the pool's last parting slab. */
	if (r)
		pool_trim(r->pool, uid, false);
	if (r && --r->parting == 0) {
		list_remove(&r->link);
		pool_destroy(r->pool);
		free(r);
	}
	free(p);
}

/* Lets go of s's parting slabs and fences released at or before epoch;
 * returns the slabs, and in *fences (may be NULL) the fences. */
unsigned broker_parting_release(struct broker *b, struct session *s, uint64_t epoch,
                                unsigned *fences)
{
	struct broker_parting **pp = &s->parting;
	unsigned n = 0, f = 0;
	while (*pp) {
		struct broker_parting *p = *pp;
		if (p->epoch > epoch || (p->reclaim && epoch != UINT64_MAX)) {
			pp = &p->next;
			continue;
		}
		*pp = p->next;
		n += !p->block;
		f += p->block != NULL;
		broker_parting_free(b, p);
	}
	s->parting_count -= n;
	if (fences)
		*fences = f;
	return n;
}

/* A fence on block of device's pool, put at the head of *list: 0 or
 * -ENOMEM. */
static int broker_fence_push(struct broker *b, struct broker_parting **list, int device,
                             struct pool_block *block)
{
	struct broker_parting *p = malloc(sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->pool = b->dev[device].pool;
	p->slab = pool_block_slab(block);
	p->epoch = b->invalidate_epoch;
	p->reclaim = false;
	p->block = block;
	p->next = *list;
	*list = p;
	pool_slab_pin(p->slab);
	b->dev[device].fenced += pool_block_size(block);
	return 0;
}

int broker_parting_add_block(struct broker *b, struct session *s, int device,
                             struct pool_block *block)
{
	return broker_fence_push(b, &s->parting, device, block);
}

int broker_ghost_fence(struct broker *b, uint64_t session_id, int device, struct pool_block *block)
{
	struct list *pos;
	list_for_each(pos, &b->ghosts) {
		struct broker_ghost *g = list_entry(pos, struct broker_ghost, link);
		if (g->session == session_id)
			return broker_fence_push(b, &g->parting, device, block);
	}
	return -ENOENT;
}

int broker_parting_add_slab(struct broker *b, struct session *s, struct pool_slab *slab)
{
	const struct backend_slab *bs = pool_slab_backend(slab);
	struct broker_parting *p = malloc(sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->pool = b->dev[bs->device].pool;
	p->slab = slab;
	p->epoch = b->invalidate_epoch;
	p->reclaim = true;
	p->block = NULL;
	p->next = s->parting;
	s->parting = p;
	s->parting_count++;
	pool_slab_pin(slab);
	return 0;
}

bool broker_parting_release_slab(struct broker *b, struct session *s, uint64_t slab_id)
{
	for (struct broker_parting **pp = &s->parting; *pp; pp = &(*pp)->next) {
		struct broker_parting *p = *pp;
		const struct backend_slab *bs = pool_slab_backend(p->slab);
		if (!p->reclaim || bs->id != slab_id)
			continue;
		*pp = p->next;
		s->parting_count--;
		broker_parting_free(b, p);
		return true;
	}
	return false;
}

void broker_parting_drop(struct broker *b, struct session *s)
{
	broker_parting_release(b, s, UINT64_MAX, NULL);
}

void broker_set_exit_watch(struct broker *b, broker_exit_fn fn, void *ctx)
{
	b->exit_watch = fn;
	b->exit_ctx = ctx;
}

void broker_ghost_free(struct broker *b, struct broker_ghost *g)
{
	log_debug("session %llu (pid %d): its process is gone: %u slabs let go",
	          (unsigned long long)g->session, (int)g->pid, g->count);
	list_remove(&g->link);
	while (g->parting) {
		struct broker_parting *p = g->parting;
		g->parting = p->next;
		broker_parting_free(b, p);
	}
	free(g);
}

void broker_ghosts_drop(struct broker *b)
{
	while (!list_empty(&b->ghosts))
		broker_ghost_free(b, list_entry(b->ghosts.next, struct broker_ghost, link));
}

void broker_ghost_make(struct broker *b, struct session *s)
{
	/* Its fences go with its slabs: those of its allocations and
	 * attachments (broker_session_strip) and those an earlier invalidate
	 * left, all ranges its process may still write while it lives. */
	struct broker_ghost *g = s->parting ? malloc(sizeof(*g)) : NULL;
	if (!g) {
		if (s->parting)
			log_warn("session %llu: slabs not kept for its process: out of "
			         "memory",
			         (unsigned long long)s->id);
		broker_parting_drop(b, s);
		return;
	}
	g->parting = s->parting;
	g->count = s->parting_count;
	g->session = s->id;
	g->pid = s->pid;
	s->parting = NULL;
	s->parting_count = 0;
	list_insert_tail(&b->ghosts, &g->link);
	if (s->pid <= 0 && s->pidfd < 0) {
		/* A client in a PID namespace this daemon cannot see, on a kernel
		 * without SO_PEERPIDFD: its process cannot be watched, and pid 0
		 * is no sign that it exited. Its connection is gone without a
		 * goodbye, so it may map these slabs still: they stay counted
		 * until the daemon stops, rather than go to another client while
		 * it writes there. */
		log_warn("session %llu: its pid is unknown (another PID namespace) and it went "
		         "without saying it unmapped: %u slabs kept until the daemon stops",
		         (unsigned long long)s->id, g->count);
		return;
	}
	int rc = b->exit_watch ? b->exit_watch(b->exit_ctx, s->pid, s->pidfd, g) : -ENOSYS;
	if (rc < 0) {
		/* Gone already (ESRCH), or nothing to watch it with. */
		log_debug("session %llu (pid %d): no exit watch (%s): slabs let go",
		          (unsigned long long)s->id, (int)s->pid, strerror(-rc));
		broker_ghost_free(b, g);
	}
}

unsigned broker_reclaim_device(struct broker *b, int device, bool outside, const char *reason)
{
	struct list *pos;
	unsigned asked = 0;
	list_for_each(pos, &b->sessions) {
		struct session *s = list_entry(pos, struct session, link);
		size_t n;
		if (outside && s->part)
			continue;
		uint64_t *ids = s->keep_slabs ? session_kept(s, device, &n) : NULL;
		for (size_t i = 0; ids && i < n; i++) {
			struct session_slab *ss = idmap_get(&s->held, ids[i]);
			/* Parting first (its own pin), then no longer held: the
			 * next grant there hands the slab over again. */
			if (broker_parting_add_slab(b, s, ss->slab) < 0) {
				log_warn("session %llu: slab %llu not reclaimed: out of memory",
				         (unsigned long long)s->id, (unsigned long long)ids[i]);
				continue;
			}
			session_unkeep(b, s, ids[i]);
			b->stats.reclaims++;
			asked++;
			struct broker_event ev = {.type = BROKER_EVENT_RECLAIM, .s = s};
			ev.reclaim.slab = ids[i];
			ev.reclaim.reason = reason;
			broker_emit(b, &ev);
		}
		free(ids);
	}
	if (asked)
		log_debug("device %d short of memory: %u kept slabs asked back", device, asked);
	return asked;
}

void broker_export_free(struct broker *b, struct broker_export *e)
{
	log_debug("session %llu: export %s withdrawn", (unsigned long long)e->owner->id, e->name);
	list_remove(&e->link);
	b->export_count--;
	free(e);
}

void broker_exports_drop_alloc(struct broker *b, struct broker_alloc *a)
{
	struct list *pos, *tmp;
	list_for_each_safe(pos, tmp, &b->exports) {
		struct broker_export *e = list_entry(pos, struct broker_export, link);
		if (e->alloc == a)
			broker_export_free(b, e);
	}
	a->exported = false;
}

void broker_alloc_room(const struct broker *b, const struct session *s, int device, uint64_t *total,
                       uint64_t *largest)
{
	const struct policy *p = s->part ? &s->part->policy : &b->policy;
	uint64_t policy = policy_device_available(p, device);
	pool_available(b->dev[device].pool, s->uid, broker_domain_of(s), total, largest);
	if (*total > policy)
		*total = policy;
	if (*largest > *total)
		*largest = *total;
}
