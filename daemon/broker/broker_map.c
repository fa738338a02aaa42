/*
 * broker_map.c - a device's memory block by block (broker_device_map,
 * gpubrokerctl devices --map): each slab of the device's pool with its
 * owner, and each of its ranges as free, an allocation (with its
 * instance), a lease, or held (fenced for a process that may still write
 * there, or an orphan its attachments keep).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "broker.h"
#include "broker_internal.h"

/* The live blocks' owners: open addressing on the block's address. */
struct map_owner {
	const struct pool_block *block;
	enum broker_map_state state;
	uint64_t instance;
};

struct map_walk {
	const struct broker *b;
	struct map_owner *owners;
	size_t cap;
	int (*slab_fn)(void *arg, const struct broker_map_slab *s);
	int (*block_fn)(void *arg, const struct broker_map_block *blk);
	void *arg;
	int rc; /* the first failure of a callback: the rest is skipped */
};

static size_t map_slot(const struct map_walk *w, const struct pool_block *block)
{
	uint64_t h = (uint64_t)(uintptr_t)block * 0x9e3779b97f4a7c15ull;

	return (size_t)(h >> 17) & (w->cap - 1);
}

static void map_put(struct map_walk *w, const struct pool_block *block, enum broker_map_state state,
                    uint64_t instance)
{
	size_t i = map_slot(w, block);

	while (w->owners[i].block && w->owners[i].block != block)
		i = (i + 1) & (w->cap - 1);
	w->owners[i] = (struct map_owner){block, state, instance};
}

static const struct map_owner *map_get(const struct map_walk *w, const struct pool_block *block)
{
	size_t i = map_slot(w, block);

	while (w->owners[i].block && w->owners[i].block != block)
		i = (i + 1) & (w->cap - 1);
	return w->owners[i].block ? &w->owners[i] : NULL;
}

static void map_slab(void *arg, const struct pool_walk_slab *ws)
{
	struct map_walk *w = arg;
	struct broker_map_slab s = {.uid = ws->uid, .size = ws->size, .dedicated = ws->dedicated};

	if (w->rc)
		return;
	for (const struct broker_partition *p = broker_partition_next(w->b, NULL); p;
	     p = broker_partition_next(w->b, p))
		if (ws->domain && p->domain == ws->domain)
			s.partition = p->name;
	w->rc = w->slab_fn(w->arg, &s);
}

static void map_block(void *arg, uint64_t offset, uint64_t size, const struct pool_block *live)
{
	struct map_walk *w = arg;
	struct broker_map_block blk = {.offset = offset, .size = size, .state = BROKER_MAP_FREE};

	if (w->rc)
		return;
	if (live) {
		const struct map_owner *o = map_get(w, live);
		/* In no session's table: a fence, or an orphan kept by attachments. */
		blk.state = o ? o->state : BROKER_MAP_HELD;
		blk.instance = o ? o->instance : 0;
	}
	w->rc = w->block_fn(w->arg, &blk);
}

int broker_device_map(const struct broker *b, int device,
                      int (*slab_fn)(void *arg, const struct broker_map_slab *s),
                      int (*block_fn)(void *arg, const struct broker_map_block *blk), void *arg)
{
	struct map_walk w = {.b = b, .slab_fn = slab_fn, .block_fn = block_fn, .arg = arg};
	size_t n = 0;

	if (device < 0 || device >= b->device_count)
		return -ENODEV;
	for (const struct session *s = broker_session_next(b, NULL); s;
	     s = broker_session_next(b, s)) {
		const struct list *pos;
		list_for_each(pos, &s->allocs)
			n++;
	}
	for (w.cap = 64; w.cap < 2 * n + 2; w.cap *= 2)
		;
	w.owners = calloc(w.cap, sizeof(*w.owners));
	if (!w.owners)
		return -ENOMEM;
	for (const struct session *s = broker_session_next(b, NULL); s;
	     s = broker_session_next(b, s)) {
		const struct list *pos;
		list_for_each(pos, &s->allocs) {
			const struct broker_alloc *a = list_entry(pos, struct broker_alloc, link);
			/* A carve lies in its lease's block, which the lease tells. */
			if (broker_carve_parent(a) || !a->inst || a->inst->device != device)
				continue;
			map_put(&w, a->block, a->lease ? BROKER_MAP_LEASE : BROKER_MAP_USED,
			        a->inst->id);
		}
	}
	pool_walk(b->dev[device].pool, map_slab, map_block, &w);
	free(w.owners);
	return w.rc;
}
