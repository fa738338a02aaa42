/*
 * broker_slabs.c - the pools' slabs, from the backend through each device's
 * entry (struct pool_slab_ops), and each user's share of the daemon's
 * descriptors that those slabs take (issue 24: O(users + slabs +
 * connections), no user taking them all). Apart from broker.c to keep each
 * file short.
 */
#include "broker.h"
#include "broker_internal.h"

#include <errno.h>
#include <limits.h>
#include <sys/resource.h>

#include "log.h"

unsigned broker_files_share(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY ||
	    rl.rlim_cur / 2 > UINT_MAX)
		return UINT_MAX;
	return rl.rlim_cur / 2 > BROKER_FILES_SHARE_MIN ? (unsigned)(rl.rlim_cur / 2)
	                                                : BROKER_FILES_SHARE_MIN;
}

/* Whether a slab's descriptor is its own (counted in its uid's share); an
 * async slab's is its uid's pool on the device, one per user. */
static bool broker_slab_has_file(const struct backend_slab *bs)
{
	return bs->fd >= 0 && !bs->pool;
}

unsigned broker_files_of(const struct broker *b, uid_t uid)
{
	uintptr_t n = (uintptr_t)idmap_get(&b->uid_files, (uint64_t)uid + 1);
	const struct list *pos;
	list_for_each(pos, &b->sessions) {
		if (list_entry(pos, struct session, link)->uid == uid)
			n++;
	}
	return n > UINT_MAX ? UINT_MAX : (unsigned)n;
}

/* Adds delta to uid's slab descriptors (room reserved when delta > 0). */
static void broker_files_add(struct broker *b, uid_t uid, int delta)
{
	uint64_t key = (uint64_t)uid + 1;
	uintptr_t n = (uintptr_t)idmap_remove(&b->uid_files, key);
	if (delta > 0 || n > 0)
		n += (uintptr_t)(intptr_t)delta;
	/* Only a count lost to host memory running out can be 0 here. */
	if (n && idmap_put(&b->uid_files, key, (void *)n) < 0)
		log_warn("uid %u: host memory short: its slabs' descriptors are no longer counted",
		         (unsigned)uid);
}

/* The pool reaches the backend through its device's entry. */
static int broker_pool_create_slab_flags(void *ctx, uint64_t size, uint32_t uid, unsigned flags,
                                         void **slab)
{
	struct broker_device *dev = ctx;
	struct backend_slab *bs;
	/* No user takes the daemon's descriptors from the others, nor from
	 * the administrator who has to deal with it. */
	if (broker_files_of(dev->broker, uid) >= broker_files_share())
		return -ENFILE;
	if (idmap_reserve(&dev->broker->uid_files, 1) < 0)
		return -EAGAIN;
	int rc = dev->backend->ops->slab_create(dev->backend, dev->index, size, uid, flags, &bs);
	if (rc < 0)
		return rc;
	if (broker_slab_has_file(bs))
		broker_files_add(dev->broker, uid, 1);
	log_debug("device %d: new %sslab %llu, %llu bytes, uid %u", dev->index,
	          flags & BACKEND_SLAB_ASYNC ? "async " : "", (unsigned long long)bs->id,
	          (unsigned long long)size, uid);
	*slab = bs;
	return 0;
}

static int broker_pool_create_slab(void *ctx, uint64_t size, uint32_t uid, void **slab)
{
	return broker_pool_create_slab_flags(ctx, size, uid, 0, slab);
}

static int broker_pool_create_async_slab(void *ctx, uint64_t size, uint32_t uid, void **slab)
{
	return broker_pool_create_slab_flags(ctx, size, uid, BACKEND_SLAB_ASYNC, slab);
}

static void broker_pool_destroy_slab(void *ctx, void *slab)
{
	struct broker_device *dev = ctx;
	const struct backend_slab *bs = slab;
	if (broker_slab_has_file(bs))
		broker_files_add(dev->broker, bs->uid, -1);
	dev->backend->ops->slab_destroy(dev->backend, slab);
}

/* The pool's hint for a tail slab; not known (UINT64_MAX) when the backend
 * cannot say, and the pool then tries sizes from the top. */
static uint64_t broker_pool_slab_room(void *ctx)
{
	struct broker_device *dev = ctx;
	uint64_t bytes;
	if (!dev->backend->ops->slab_room ||
	    dev->backend->ops->slab_room(dev->backend, dev->index, &bytes) < 0)
		return UINT64_MAX;
	return bytes;
}

static const struct pool_slab_ops broker_pool_ops = {
    .create = broker_pool_create_slab,
    .destroy = broker_pool_destroy_slab,
    .room = broker_pool_slab_room,
};

/* Allocator "async": the same pools, their slabs from the backend's
 * stream-ordered memory pool. */
static const struct pool_slab_ops broker_async_pool_ops = {
    .create = broker_pool_create_async_slab,
    .destroy = broker_pool_destroy_slab,
    .room = broker_pool_slab_room,
};

const struct pool_slab_ops *broker_slab_ops(enum broker_allocator kind)
{
	return kind == BROKER_ALLOCATOR_ASYNC ? &broker_async_pool_ops : &broker_pool_ops;
}
