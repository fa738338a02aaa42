/*
 * broker_keep.c - the slabs a session holds, and those it keeps empty.
 *
 * A session holds a slab from the grant that hands its client the slab's
 * handle until it lets go. Without keep_slabs it lets go with its last
 * allocation or attachment there, as its library unmaps the slab then. With
 * keep_slabs (libgpubroker asks for it) the client keeps the slab mapped
 * after its last allocation there, so that the next allocation that fits
 * costs no handle, descriptor or open; the slab is then pinned in the pool
 * (reserved, not used: no policy figure counts it) until the client says it
 * let go (release) or the broker needs it back (reclaim: the device is short
 * of memory; broker_reclaim_device, in broker_alloc.c). A reclaimed slab
 * is "parting" until the client answers, as after an invalidate: with
 * cuda, memory a process still maps must not go back to the driver. A
 * client that never answers keeps it, charged to its uid, never handed to
 * another.
 */
#include <errno.h>
#include <stdlib.h>

#include "broker.h"
#include "broker_internal.h"
#include "log.h"

int session_hold(struct broker *b, struct session *s, struct pool_slab *slab)
{
	const struct backend_slab *bs = pool_slab_backend(slab);
	struct session_slab *ss = idmap_get(&s->held, bs->id);
	if (ss) {
		/* Kept empty until now: the allocation being made there is
		 * what keeps it from now on (it is live: no idle slab). */
		if (ss->refs++ == 0 && ss->keep)
			pool_slab_unpin(b->dev[bs->device].pool, slab);
		return 0;
	}
	ss = malloc(sizeof(*ss));
	if (!ss)
		return -ENOMEM;
	ss->refs = 1;
	ss->slab = slab;
	/* Under the direct and async allocators a slab is one allocation,
	 * returned when freed: nothing to keep; nor is a dedicated slab (one
	 * large request), which would hold the room for more than the next
	 * allocation needs. */
	ss->keep =
	    s->keep_slabs && b->allocator == BROKER_ALLOCATOR_POOL && !pool_slab_dedicated(slab);
	if (idmap_put(&s->held, bs->id, ss) < 0) {
		free(ss);
		return -ENOMEM;
	}
	return 1;
}

void session_release(struct broker *b, struct session *s, uint64_t slab_id)
{
	(void)b;
	struct session_slab *ss = idmap_get(&s->held, slab_id);
	if (!ss || --ss->refs > 0)
		return;
	if (ss->keep) {
		/* Pinned before the caller frees the block: an emptied slab
		 * stays where the client has it mapped. */
		pool_slab_pin(ss->slab);
		return;
	}
	free(idmap_remove(&s->held, slab_id));
}

/* Lets go of a slab s keeps empty. */
void session_unkeep(struct broker *b, struct session *s, uint64_t slab_id)
{
	struct session_slab *ss = idmap_remove(&s->held, slab_id);
	const struct backend_slab *bs = pool_slab_backend(ss->slab);
	pool_slab_unpin(b->dev[bs->device].pool, ss->slab);
	free(ss);
}

void session_unhold(struct broker *b, struct session *s, uint64_t slab_id, bool fresh)
{
	if (fresh)
		free(idmap_remove(&s->held, slab_id));
	else
		session_release(b, s, slab_id);
}

/* The ids of the slabs s keeps empty (on device, or any when < 0), in a
 * malloc'd array (*n of them; NULL when none or out of memory). */
uint64_t *session_kept(struct session *s, int device, size_t *n)
{
	uint64_t *ids = NULL, id;
	size_t it = 0, cap = 0;
	struct session_slab *ss;
	*n = 0;
	while ((ss = idmap_next(&s->held, &it, &id))) {
		const struct backend_slab *bs = pool_slab_backend(ss->slab);
		if (ss->refs || !ss->keep || (device >= 0 && bs->device != device))
			continue;
		if (*n == cap) {
			uint64_t *more = realloc(ids, (cap ? 2 * cap : 8) * sizeof(*ids));
			if (!more)
				break;
			ids = more;
			cap = cap ? 2 * cap : 8;
		}
		ids[(*n)++] = id;
	}
	return ids;
}

void session_unkeep_all(struct broker *b, struct session *s)
{
	size_t n;
	/* The map cannot lose entries while it is walked: ids first. */
	uint64_t *ids = session_kept(s, -1, &n);
	for (size_t i = 0; i < n; i++)
		session_unkeep(b, s, ids[i]);
	free(ids);
}

void broker_keep_counts(const struct broker *b, struct broker_keep_counts *out)
{
	const struct list *pos;
	*out = (struct broker_keep_counts){0};
	list_for_each(pos, &b->sessions) {
		struct session *s = list_entry(pos, struct session, link);
		size_t it = 0;
		struct session_slab *ss;
		while ((ss = idmap_next(&s->held, &it, NULL))) {
			if (ss->refs || !ss->keep)
				continue;
			out->kept++;
			out->kept_bytes += pool_slab_size(ss->slab);
		}
	}
}
