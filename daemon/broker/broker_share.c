/*
 * broker_share.c - sharing by name: a client exports one of its
 * allocations under a name, granted to a uid (its own or another user's);
 * a client of that uid opens it by the exporter's uid and the name and gets
 * the same bytes, as an attachment.
 *
 * Names live in the namespace of the user who exported them: the key is
 * (exporter uid, name). A bare name therefore only ever finds the caller's
 * own user's exports, and no user can make a name appear among another
 * user's (a planted "weights" would otherwise hand a process expecting its
 * own bytes someone else's). The grant decides who may open: the grantee,
 * and the exporter's own uid, which could attach the allocation by id
 * anyway. Everyone else is told exactly what a name that does not exist
 * gets, so names are no more visible than the memory.
 *
 * The name lives as long as the allocation (or until unexport): the
 * exporter's free or death withdraws it for new openers. What was opened
 * stays: an attachment keeps the block alive (broker_alloc_release turns a
 * held allocation into an orphan, freed by the last broker_unpin).
 *
 * An opener maps the whole slab (the sim memfd, the CUDA IPC handle), so an
 * allocation goes to another uid only when it fills its slab: then no other
 * allocation is in it, and none can be put there while it lives. (A
 * dedicated slab is not enough: the pool fits later small requests of the
 * same user into the tail of a large one's slab.) Pool memory (cuda,
 * allocator "async") never goes to another uid: its grant carries the
 * owner's memory pool, and an import maps the pointer's driver segment,
 * which holds the owner's other slabs.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker.h"
#include "broker_internal.h"
#include "log.h"

/* The export called name in the namespace of the user owner; NULL if none. */
static struct broker_export *export_find(struct broker *b, uid_t owner, const char *name)
{
	struct list *pos;
	list_for_each(pos, &b->exports) {
		struct broker_export *e = list_entry(pos, struct broker_export, link);
		if (e->owner->uid == owner && strcmp(e->name, name) == 0)
			return e;
	}
	return NULL;
}

int broker_export(struct broker *b, struct session *s, uint64_t id, const char *name, uid_t uid)
{
	struct broker_alloc *a = broker_alloc_owned(b, s, id);
	if (!a)
		return -ENOENT;
	if (a->exported)
		return -EALREADY;
	if (export_find(b, s->uid, name))
		return -EEXIST;
	if (uid != s->uid && broker_alloc_bytes(a) != pool_slab_size(pool_block_slab(a->block)))
		return -EPERM;
	/* Pool memory (allocator "async") never goes to another uid: the
	 * opener imports the owner's whole pool, and what it maps of a pool
	 * pointer is the driver's segment, which holds the owner's other
	 * slabs (issue 25, item 1). */
	const struct backend_slab *bs = pool_slab_backend(pool_block_slab(a->block));
	if (uid != s->uid && bs->pool)
		return -EXDEV;
	/* At most one name per allocation: bounded by max_allocations. */
	struct broker_export *e = calloc(1, sizeof(*e));
	if (!e)
		return -EAGAIN;
	e->alloc = a;
	e->owner = s;
	e->uid = uid;
	snprintf(e->name, sizeof(e->name), "%s", name);
	list_insert_tail(&b->exports, &e->link);
	b->export_count++;
	a->exported = true;
	log_debug("session %llu: exports %016llx as %s for uid %u", (unsigned long long)s->id,
	          (unsigned long long)id, name, (unsigned)uid);
	return 0;
}

int broker_unexport(struct broker *b, struct session *s, const char *name)
{
	struct broker_export *e = export_find(b, s->uid, name);
	if (!e || e->owner != s)
		return -ENOENT;
	e->alloc->exported = false;
	broker_export_free(b, e);
	return 0;
}

int broker_open(struct broker *b, struct session *s, uid_t owner, const char *name,
                struct broker_grant *out)
{
	struct broker_export *e = export_find(b, owner, name);
	/* Memory does not cross a partition's border (broker_attach). */
	if (!e || (s->uid != e->uid && s->uid != owner) || e->owner->part != s->part)
		return -ENOENT;
	return broker_hold(b, s, e->alloc, out);
}
