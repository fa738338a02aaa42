/*
 * lease_defer.c - gpb_free of a local block without stopping the GPU
 * (issue 29): the block stays in use until a fence recorded after the
 * free, on the legacy default stream of its context (which comes after
 * the work queued so far on every blocking stream of it) or on its
 * leases' stream, has passed.
 *
 * Three places a freed block waits, all under the allocator's lock:
 *  - the batch (lease.h, lease_batch): frees not fenced yet. A fence
 *    recorded later covers more work than one recorded at the free, never
 *    less, so up to LEASE_BATCH frees on the legacy stream of one context
 *    share one fence, recorded when the batch is full, when another
 *    context frees, and when the frees are polled. A free then costs no
 *    driver call as a rule. A free whose fence goes on a stream of the
 *    application's (a block of gpb_alloc_async's leases) is fenced at
 *    once: that stream may be destroyed right after.
 *  - the ring (lease_state.deferred): fenced frees, oldest first; each
 *    entry a fence and the ids behind it. Polled up to the first fence
 *    that has not passed (recorded in order, the later ones have not
 *    either).
 *  - the held list (lease_state.held): frees behind a capture's fence
 *    (cuda_ctx.h), which passes when a graph is gone, in no order with the
 *    rest: looked at whole.
 * lease_deferred_poll looks at all three: when the pool cannot serve an
 * allocation, when leases are judged free (idle scan, recall,
 * gpb_release_kept), when figures are read, and once more than
 * LEASE_DEFERRED_POLL_AT fences are out. The service thread looks every
 * LEASE_DEFERRED_POLL_MS while any free waits.
 */
#include "lease.h"
#include "lease_internal.h"
#include "error.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The block of a fence that passed: freed, unless gone meanwhile
 * (forgotten at an invalidate) or carved after the free (an export of a
 * freed id: left to gpb_free's carved path, as gpb_free_async's). */
static void deferred_release(struct lease_state *ls, uint64_t id)
{
	struct lease_slot *sl = lease_slot_get(ls, id);

	if (sl && sl->freeing) {
		sl->freeing = false;
		if (!sl->carved)
			lease_block_free(ls, sl, false);
	}
}

/* Frees the blocks of entry @d (its fence passed, or none is to be had). */
static void entry_release(struct lease_state *ls, struct lease_deferred *d)
{
	deferred_release(ls, d->id);
	for (uint32_t k = 0; k < d->nmore; k++)
		deferred_release(ls, d->more[k]);
	free(d->more);
	d->more = NULL;
	d->nmore = 0;
}

/* Lets go of entry @d's fence and ids without freeing the blocks (they go
 * with the leases); @driver: not in a forked child. */
static void entry_drop(struct lease_deferred *d, bool driver)
{
	if (driver)
		d->opener->fence_free(d->fence);
	else if (d->opener->fence_forget)
		d->opener->fence_forget(d->fence);
	free(d->more);
}

/* ---- the ring ------------------------------------------------------------- */

/* Allocator lock held: queues entry @e. 0 or -ENOMEM. */
static int ring_push(struct lease_state *ls, const struct lease_deferred *e)
{
	if (ls->deferred_len == ls->deferred_cap) {
		uint32_t cap = ls->deferred_cap ? 2 * ls->deferred_cap : 64;
		struct lease_deferred *d = malloc(cap * sizeof(*d));
		if (!d)
			return -ENOMEM;
		/* Unrolled oldest first into the new ring. */
		for (uint32_t k = 0; k < ls->deferred_len; k++)
			d[k] = ls->deferred[(ls->deferred_head + k) % ls->deferred_cap];
		free(ls->deferred);
		ls->deferred = d;
		ls->deferred_cap = cap;
		ls->deferred_head = 0;
	}
	ls->deferred[(ls->deferred_head + ls->deferred_len++) % ls->deferred_cap] = *e;
	return 0;
}

static void ring_poll(struct lease_state *ls)
{
	while (ls->deferred_len) {
		struct lease_deferred *d = &ls->deferred[ls->deferred_head];
		if (!d->opener->fence_done(d->fence))
			break; /* recorded in order on one stream: the rest are later */
		entry_release(ls, d);
		d->opener->fence_free(d->fence);
		ls->deferred_head = (ls->deferred_head + 1) % ls->deferred_cap;
		ls->deferred_len--;
	}
}

/* ---- the held list ---------------------------------------------------------- */

/* Allocator lock held: queues entry @e behind a capture's fence. Out of
 * memory for it, its blocks are never served again (they stay `freeing`:
 * kept, as the graph may still use them), and the fence goes. */
static void held_push(struct lease_state *ls, const struct lease_deferred *e)
{
	struct lease_deferred *d = malloc(sizeof(*d));

	if (!d) {
		e->opener->fence_free(e->fence);
		free(e->more);
		return;
	}
	*d = *e;
	d->next = ls->held;
	ls->held = d;
	ls->held_frees += 1 + e->nmore;
	lease_service_ring(ls, lease_now_ms() + LEASE_DEFERRED_POLL_MS);
}

void lease_held_take(struct lease_state *ls, struct lease_slot *sl, uint64_t id)
{
	struct lease_deferred e = {.id = id, .fence = sl->hold, .opener = ls->hold_opener};

	sl->hold = NULL;
	sl->freeing = true;
	held_push(ls, &e);
}

static void held_poll(struct lease_state *ls)
{
	for (struct lease_deferred **pp = &ls->held, *d; (d = *pp);) {
		if (!d->opener->fence_done(d->fence)) {
			pp = &d->next;
			continue;
		}
		*pp = d->next;
		entry_release(ls, d);
		d->opener->fence_free(d->fence);
		free(d);
	}
}

/* ---- fencing ---------------------------------------------------------------- */

/*
 * Allocator lock held: puts the frees of @e behind @fence (the result
 * @rc of the opener's fence: 1 a capture's), or frees them now when there
 * is none (a dead context runs nothing more). Without room to queue them,
 * waits for the fence here (lock dropped meanwhile).
 */
static void fenced(struct lease_state *ls, struct lease_deferred *e, int rc)
{
	if (e->fence && rc == 1) {
		held_push(ls, e);
		return;
	}
	if (e->fence && ring_push(ls, e) == 0) {
		/* A bound on the fences out (their events come back to the
		 * context's kept ones: none made in steady state), and on the
		 * blocks held, when nothing else asks for room. */
		if (ls->deferred_len > LEASE_DEFERRED_POLL_AT)
			ring_poll(ls);
		lease_service_ring(ls, lease_now_ms() + LEASE_DEFERRED_POLL_MS);
		return;
	}
	if (e->fence) { /* no room to queue it: waited for here */
		lease_unlock(ls);
		e->opener->fence_wait(e->fence);
		e->opener->fence_free(e->fence);
		lease_lock(ls);
	}
	entry_release(ls, e);
}

/*
 * The fence of batch @b (taken out of lease_state: its own copy), its
 * map's reference put. Where none can be had (a driver error), the work
 * is waited for (the context synchronized) and *rc is 0 with no fence: the
 * frees go at once. @locked: the allocator's lock is held (a poll), which
 * a wait drops meanwhile.
 */
static void batch_fence(struct lease_state *ls, struct lease_batch *b, struct lease_deferred *e,
                        int *rc, bool locked)
{
	const struct slab_opener *opener = b->map->opener;

	*e = (struct lease_deferred){.id = b->ids[0], .opener = opener};
	*rc = opener->fence(b->map->priv, b->stream, &e->fence);
	if (*rc < 0) {
		error_clear(); /* the frees succeed: they wait instead */
		if (locked)
			lease_unlock(ls);
		lease_map_finish(b->map);
		if (locked)
			lease_lock(ls);
		e->fence = NULL;
		*rc = 0;
	} else {
		slab_cache_put(b->map);
	}
	b->map = NULL;
	/* No memory for the other ids: their blocks are never served again
	 * (they stay `freeing`, kept until their leases go), which is safe. */
	if (b->n > 1 && (e->more = malloc((b->n - 1) * sizeof(*e->more)))) {
		memcpy(e->more, b->ids + 1, (b->n - 1) * sizeof(*e->more));
		e->nmore = b->n - 1;
	}
}

/* Allocator lock held: fences the batch of @ls now (a driver call under
 * the lock: a poll, which makes queries under it anyway). */
static void batch_flush(struct lease_state *ls)
{
	struct lease_batch b = ls->batch;
	struct lease_deferred e;
	int rc;

	ls->batch.n = 0;
	ls->batch.map = NULL;
	batch_fence(ls, &b, &e, &rc, true);
	fenced(ls, &e, rc);
}

int lease_free_deferred(struct lease_state *ls, uint64_t id, struct slab_map *map, void *stream)
{
	const void *domain = map->opener->fence_domain ? map->opener->fence_domain(map->priv) : map;
	struct lease_batch full = {.n = 0};
	struct lease_batch *b = &ls->batch;

	/* A stream of the application's may be destroyed right after the
	 * free (its blocks all freed, as gpb_alloc_async asks): its fence is
	 * recorded now, not later. The legacy stream lives with the context,
	 * whose life each fence checks. */
	if (stream) {
		struct lease_batch one = {.stream = stream, .map = map, .n = 1, .ids = {id}};
		struct lease_deferred e;
		int rc;

		batch_fence(ls, &one, &e, &rc, false);
		lease_lock(ls);
		ls->deferred_frees++;
		fenced(ls, &e, rc);
		lease_unlock(ls);
		return 0;
	}
	/* The batch is the state's: its lock alone (lease_internal.h). */
	pthread_mutex_lock(&ls->lock);
	if (b->n && b->domain != domain) {
		full = *b; /* another context: fenced apart */
		b->n = 0;
		b->map = NULL;
	}
	if (!b->n) {
		b->domain = domain;
		b->map = map; /* the caller's reference */
		map = NULL;
	}
	b->ids[b->n++] = id;
	if (b->n == LEASE_BATCH) {
		full = *b;
		b->n = 0;
		b->map = NULL;
	}
	ls->deferred_frees++;
	pthread_mutex_unlock(&ls->lock);
	lease_service_ring(ls, lease_now_ms() + LEASE_DEFERRED_POLL_MS);
	if (map)
		slab_cache_put(map);
	if (!full.n)
		return 0;
	/* The fence of the batch that is full, outside the lock. */
	struct lease_deferred e;
	int rc;
	batch_fence(ls, &full, &e, &rc, false);
	lease_lock(ls);
	fenced(ls, &e, rc);
	lease_unlock(ls);
	return 0;
}

/* ---- polls ------------------------------------------------------------------ */

void lease_deferred_poll(struct lease_state *ls)
{
	if (ls->batch.n)
		batch_flush(ls);
	if (ls->held)
		held_poll(ls);
	ring_poll(ls);
}

void lease_deferred_drop(struct lease_state *ls, bool driver)
{
	while (ls->held) {
		struct lease_deferred *d = ls->held;
		ls->held = d->next;
		entry_drop(d, driver);
		free(d);
	}
	if (ls->batch.map)
		slab_cache_put(ls->batch.map);
	ls->batch.map = NULL;
	ls->batch.n = 0;
	for (; ls->deferred_len; ls->deferred_len--) {
		entry_drop(&ls->deferred[ls->deferred_head], driver);
		ls->deferred_head = (ls->deferred_head + 1) % ls->deferred_cap;
	}
	free(ls->deferred);
	ls->deferred = NULL;
	ls->deferred_cap = ls->deferred_head = 0;
}
