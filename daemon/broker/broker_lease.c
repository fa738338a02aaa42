/*
 * broker_lease.c - leases: blocks of a slab that a client sub-allocates in
 * itself, so that its allocations need no request each (issue 27).
 *
 * A lease is a struct broker_alloc flagged lease: one pool block on 2 MiB
 * boundaries, charged whole to its instance like an allocation, so caps,
 * proportions, partitions and limits stay exact; one daemon object
 * (max_allocations). Its life is an allocation's (broker_alloc.c): it
 * goes with lease_return, or with its session. Here: what size a lease
 * gets, its return, and carves (ranges of a lease made allocations, for
 * export and attach).
 *
 * Sizes double with the leases an instance holds, so that a client that
 * grows asks O(log n) times, up to a slab; they shrink to what the caps
 * and the device leave, so that a lease is refused only where the bytes
 * the client needs now would be; and a request above a quarter of a slab
 * gets a lease of its own size (rounded to 2 MiB).
 */
#include <errno.h>

#include "broker.h"
#include "broker_internal.h"

/* n rounded up to a multiple of unit (a power of two); n <= slab size. */
static uint64_t round_up(uint64_t n, uint64_t unit)
{
	return (n + unit - 1) & ~(unit - 1);
}

/* The largest lease inst may take now, by its cap, its user's cap and the
 * device's room: a bound that the allocation itself still checks. */
static uint64_t lease_room(struct broker *b, const struct session *s,
                           const struct broker_instance *inst)
{
	uint64_t total, largest;
	uint64_t room = policy_headroom(broker_policy_of(b, s), &inst->pol);
	broker_alloc_room(b, s, inst->device, &total, &largest);
	if (largest < room)
		room = largest;
	const struct broker_rule *rule = broker_rule_for(b, s);
	if (rule && rule->cap) {
		uint64_t used = pool_uid_used(b->dev[inst->device].pool, s->uid);
		uint64_t left = used < rule->cap ? rule->cap - used : 0;
		if (left < room)
			room = left;
	}
	return room;
}

/* A refusal of a lease that no allocation would give: which limit, and
 * its value. */
static int lease_refuse(struct broker_refusal *why, int rc, enum broker_limit limit, uint64_t value)
{
	why->rc = rc;
	why->limit = limit;
	why->value = value;
	return rc;
}

int broker_lease(struct broker *b, struct session *s, uint64_t instance, uint64_t size,
                 const uint64_t *in_use, struct broker_grant *out, struct broker_refusal *why)
{
	struct broker_instance *inst = broker_instance_find(s, instance);
	uint64_t slab = b->limits.slab_size & ~(BROKER_LEASE_UNIT - 1);
	if (inst && in_use)
		inst->in_use = *in_use;
	*why = (struct broker_refusal){.device = inst ? inst->device : -1,
	                               .uid = s->uid,
	                               .instance = instance,
	                               .requested = size};
	if (!inst || b->stopping)
		return lease_refuse(why, b->stopping ? -ESHUTDOWN : -ENOENT, BROKER_LIMIT_NONE, 0);
	/* Direct and async allocations are backend allocations each: a
	 * lease would be one too, and none could be sub-allocated in it. */
	if (b->allocator != BROKER_ALLOCATOR_POOL)
		return lease_refuse(why, -EOPNOTSUPP, BROKER_LIMIT_ALLOCATOR, b->allocator);
	if (size > slab)
		return lease_refuse(why, -EFBIG, BROKER_LIMIT_SLAB, slab);
	if (inst->leases >= PROTO_MAX_LEASES)
		return lease_refuse(why, -EMLINK, BROKER_LIMIT_LEASES, PROTO_MAX_LEASES);
	uint64_t least = round_up(size, BROKER_LEASE_UNIT);
	uint64_t want = inst->leases < 32 ? BROKER_LEASE_UNIT << inst->leases : slab;
	/* A request above a quarter of a slab gets a lease of its own size:
	 * the rest of a doubled lease would wait for requests as large, and
	 * in a partition or under a cap it is memory the per-allocation path
	 * would have given (fifteen 33 MiB blocks fit a 512 MiB partition in
	 * 34 MiB leases, ten in 64 MiB ones). */
	if (least > slab / 4)
		want = least;
	if (want > slab)
		want = slab;
	uint64_t room = lease_room(b, s, inst) & ~(BROKER_LEASE_UNIT - 1);
	/* Shrunk to the room, in whole requests of this size: what is left
	 * over in a lease cut at the room would be lost to requests like this
	 * one (a cap's or a partition's last bytes). */
	if (want > room)
		want = room >= least ? room - room % least : room;
	if (want < least)
		want = least;
	int rc =
	    broker_alloc_in(b, s, inst, want, BROKER_LEASE_UNIT, BROKER_ALLOC_LEASE, out, NULL);
	/* The room was a bound only (a free range need not start on 2 MiB):
	 * what the client needs now is what decides. */
	if (rc < 0 && want > least)
		rc = broker_alloc_in(b, s, inst, least, BROKER_LEASE_UNIT, BROKER_ALLOC_LEASE, out,
		                     NULL);
	if (rc < 0)
		broker_refusal_explain(b, s, instance, least, rc, 0, why);
	return rc;
}

/* s's lease id, or NULL (unknown, returned, another session's). */
static struct broker_alloc *lease_owned(struct broker *b, const struct session *s, uint64_t id)
{
	struct broker_alloc *l = idmap_get(&b->allocs, id);
	return l && l->lease && l->inst->owner == s ? l : NULL;
}

int broker_lease_return(struct broker *b, struct session *s, uint64_t lease, const uint64_t *in_use)
{
	struct broker_alloc *l = lease_owned(b, s, lease);
	if (!l)
		return -ENOENT;
	if (in_use)
		l->inst->in_use = *in_use;
	/* Whole or not at all: a carve of the client's own still uses its
	 * range. A carve the client freed that another connection still has
	 * open (an orphan) does not hold the return back: the lease goes out
	 * of the instance as an orphan lease, charged to the device, until
	 * that holder lets go (broker_alloc_release), as when the session
	 * ends; the client, which returned it, reuses none of it. */
	const struct list *pos;
	list_for_each(pos, &l->ext->carves) {
		if (!BROKER_CARVE_OF(pos)->orphan)
			return -EBUSY;
	}
	broker_alloc_release(b, s, l, false);
	broker_waits_run(b);
	return 0;
}

int broker_lease_carve(struct broker *b, struct session *s, uint64_t lease, uint64_t offset,
                       uint64_t size, uint64_t *id, uint64_t *carved)
{
	if (b->stopping)
		return -ESHUTDOWN;
	struct broker_alloc *l = lease_owned(b, s, lease);
	if (!l)
		return -ENOENT;
	uint64_t lsize = pool_block_size(l->block);
	if (offset % POOL_GRANULE || offset >= lsize)
		return -EINVAL;
	if (size > lsize - offset)
		return -ERANGE;
	/* Inside the lease still: it and offset are granule multiples. */
	uint64_t bytes = round_up(size, POOL_GRANULE);
	struct list *pos;
	list_for_each(pos, &l->ext->carves) {
		const struct broker_lease_ext *c =
		    list_entry(pos, struct broker_lease_ext, carve_link);
		if (offset < c->carve_offset + c->carve_size && c->carve_offset < offset + bytes)
			return -EADDRINUSE;
	}
	if (s->alloc_count + s->attached.count + s->host_count >= b->limits.max_allocations)
		return -EMFILE;
	struct broker_alloc *c = arena_alloc(&b->alloc_arena, NULL);
	if (!c)
		return -EAGAIN;
	c->ext = calloc(1, sizeof(*c->ext));
	if (!c->ext) {
		broker_alloc_record_free(&b->alloc_arena, c);
		return -EAGAIN;
	}
	c->ext->self = c;
	int rc = broker_new_id(b, &c->id);
	if (rc < 0) {
		broker_alloc_record_free(&b->alloc_arena, c);
		return rc;
	}
	/* One hold more on the slab (never a fresh one: the lease holds it),
	 * as for any allocation of the session. */
	struct pool_slab *slab = pool_block_slab(l->block);
	int fresh = session_hold(b, s, slab);
	if (fresh < 0 || idmap_put(&b->allocs, c->id, c) < 0) {
		if (fresh >= 0)
			session_unhold(b, s,
			               ((const struct backend_slab *)pool_slab_backend(slab))->id,
			               fresh == 1);
		broker_alloc_record_free(&b->alloc_arena, c);
		return -EAGAIN;
	}
	c->inst = l->inst;
	c->block = l->block;
	c->ext->parent = l;
	c->ext->carve_offset = offset;
	c->ext->carve_size = bytes;
	list_insert_tail(&l->ext->carves, &c->ext->carve_link);
	list_insert_tail(&s->allocs, &c->link);
	s->alloc_count++;
	*id = c->id;
	*carved = bytes;
	return 0;
}
