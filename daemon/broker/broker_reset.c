/*
 * broker_reset.c - releasing everything at once: invalidate_all, and the
 * allocator switch that needs it (cubie's invalidate_all and
 * set_allocator).
 *
 * Every allocation and attachment of every session goes, with every queued
 * request; every session that said hello is sent `invalidate` so that its
 * library drops its mappings (it does so as it reads the event, before any
 * reply behind it, so both sides agree that the session holds no slab).
 * Instances, their caps and waiting allocations stay.
 *
 * The client learns of the release only when it reads the event, and with
 * cuda it must close its mappings before the memory goes back to the
 * driver. So every slab a session held is pinned, "parting", until the
 * client answers the event's epoch with invalidate_done (libgpubroker does
 * as it reads the event) or the session ends. A pool replaced by
 * set_allocator is "retired": it lives on, holding only parting slabs,
 * until the last of them is let go.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker.h"
#include "broker_internal.h"
#include "log.h"

static const char *const broker_allocator_names[] = {
    [BROKER_ALLOCATOR_POOL] = PROTO_V_ALLOC_POOL,
    [BROKER_ALLOCATOR_DIRECT] = PROTO_V_ALLOC_DIRECT,
    [BROKER_ALLOCATOR_ASYNC] = PROTO_V_ALLOC_ASYNC,
};

const char *broker_allocator_name(enum broker_allocator kind)
{
	return (unsigned)kind <= BROKER_ALLOCATOR_ASYNC ? broker_allocator_names[kind] : "?";
}

int broker_allocator_parse(const char *name, enum broker_allocator *kind)
{
	for (unsigned i = 0; name && i <= BROKER_ALLOCATOR_ASYNC; i++) {
		if (strcmp(name, broker_allocator_names[i]) == 0) {
			*kind = (enum broker_allocator)i;
			return 0;
		}
	}
	return -EINVAL;
}

void broker_pool_config(const struct broker *b, enum broker_allocator kind, struct pool_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->slab_size = b->limits.slab_size;
	if (kind == BROKER_ALLOCATOR_DIRECT || kind == BROKER_ALLOCATOR_ASYNC) {
		/* Every request is above the threshold: its own backend
		 * allocation, returned as soon as it is freed (async: from
		 * the device's stream-ordered pool, broker_slab_ops). */
		cfg->large_threshold = 1;
		cfg->keep_empty = 0;
		/* Exact, except where the device hands out whole blocks
		 * (cuda): a slab under 2 MiB would share one with other
		 * slabs, of other users too. Rounded up, the policy still
		 * charges the request, and `reserved` shows the rest. */
		cfg->exact = b->backend->slab_granularity <= POOL_GRANULE;
	} else {
		cfg->keep_empty = 1;
	}
}

/* A slab a session's client may still have mapped after an invalidate. */
struct broker_parting {
	struct broker_parting *next;
	struct pool *pool; /* the slab's: current or retired */
	struct pool_slab *slab;
	uint64_t epoch; /* of the invalidate event that released it */
	bool reclaim;   /* a reclaim event's: let go by release, not by an epoch */
	/* A fence, not counted as a parting slab: a block the release freed,
	 * kept allocated until the client has answered (or its process is
	 * gone), since until it reads the event it may still write there. */
	struct pool_block *block;
};

/* What an evicted session kept from the backend until its process exits. */
struct broker_ghost {
	struct list link; /* broker->ghosts */
	struct broker_parting *parting;
	unsigned count;
	uint64_t session;
	pid_t pid;
};

/* A pool set_allocator replaced while some of its slabs were parting. */
struct broker_retired {
	struct list link; /* broker->retired */
	struct pool *pool;
	uint64_t parting; /* its slabs still parting */
};

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

static struct broker_retired *broker_retired_find(const struct broker *b, const struct pool *pool)
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
static unsigned broker_parting_release(struct broker *b, struct session *s, uint64_t epoch,
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

static void broker_ghost_free(struct broker *b, struct broker_ghost *g)
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

void broker_ghost_release(struct broker *b, struct broker_ghost *g)
{
	broker_ghost_free(b, g);
	/* Slabs back to the device: room for a wait. */
	broker_waits_run(b);
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

void broker_parting_counts(const struct broker *b, struct broker_parting_counts *out)
{
	const struct list *pos;
	memset(out, 0, sizeof(*out));
	list_for_each(pos, &b->sessions)
		out->parting += list_entry(pos, const struct session, link)->parting_count;
	list_for_each(pos, &b->ghosts) {
		out->parting += list_entry(pos, const struct broker_ghost, link)->count;
		out->ghosts++;
	}
	list_for_each(pos, &b->retired)
		out->retired++;
}

/* Adds the bytes of the fences of list to fenced[device]. */
static void broker_fences_sum(const struct broker_parting *list, uint64_t *fenced)
{
	for (const struct broker_parting *p = list; p; p = p->next) {
		const struct backend_slab *bs = pool_slab_backend(p->slab);
		if (p->block)
			fenced[bs->device] += pool_block_size(p->block);
	}
}

int broker_parting_check(const struct broker *b, char *msg, unsigned msg_len)
{
	const struct list *pos, *rpos;
	uint64_t retired_total = 0, parting_retired = 0;
	uint64_t fenced[BACKEND_MAX_DEVICES] = {0};
	list_for_each(rpos, &b->retired)
		retired_total += list_entry(rpos, const struct broker_retired, link)->parting;
	list_for_each(pos, &b->sessions) {
		const struct session *s = list_entry(pos, const struct session, link);
		unsigned n = 0;
		for (const struct broker_parting *p = s->parting; p; n += !p->block, p = p->next) {
			bool current = false;
			for (int i = 0; i < b->device_count; i++)
				current |= p->pool == b->dev[i].pool;
			if (!current && !broker_retired_find(b, p->pool)) {
				snprintf(msg, msg_len, "session %llu: a parting slab of no pool",
				         (unsigned long long)s->id);
				return -EFAULT;
			}
			parting_retired += !current;
			if (p->epoch > b->invalidate_epoch) {
				snprintf(msg, msg_len,
				         "session %llu: a parting slab of a future epoch",
				         (unsigned long long)s->id);
				return -EFAULT;
			}
		}
		if (n != s->parting_count) {
			snprintf(msg, msg_len, "session %llu: %u parting slabs, counted %u",
			         (unsigned long long)s->id, n, s->parting_count);
			return -EFAULT;
		}
		broker_fences_sum(s->parting, fenced);
	}
	list_for_each(pos, &b->ghosts) {
		const struct broker_ghost *g = list_entry(pos, const struct broker_ghost, link);
		unsigned n = 0;
		for (const struct broker_parting *p = g->parting; p; n += !p->block, p = p->next)
			parting_retired += broker_retired_find(b, p->pool) != NULL;
		if (n != g->count || !g->parting) {
			snprintf(msg, msg_len, "session %llu's ghost: %u slabs, counted %u",
			         (unsigned long long)g->session, n, g->count);
			return -EFAULT;
		}
		broker_fences_sum(g->parting, fenced);
	}
	for (int i = 0; i < b->device_count; i++) {
		if (fenced[i] != b->dev[i].fenced) {
			snprintf(msg, msg_len, "device %d: %llu bytes fenced, counted %llu", i,
			         (unsigned long long)fenced[i],
			         (unsigned long long)b->dev[i].fenced);
			return -EFAULT;
		}
	}
	if (parting_retired != retired_total) {
		snprintf(msg, msg_len, "%llu slabs parting from retired pools, which count %llu",
		         (unsigned long long)parting_retired, (unsigned long long)retired_total);
		return -EFAULT;
	}
	return 0;
}

int broker_invalidate_done(struct broker *b, struct session *s, uint64_t epoch, unsigned *released)
{
	if (epoch > b->invalidate_epoch)
		return -EINVAL;
	unsigned fences;
	*released = broker_parting_release(b, s, epoch, &fences);
	/* The slabs may have gone back, the fenced ranges are free: room for a
	 * wait (a fence comes with its slab's entry, unless that one could not
	 * be made). */
	if (*released || fences)
		broker_waits_run(b);
	return 0;
}

/* Frees everything every session holds, without telling anyone yet; what
 * the clients may have mapped is kept parting under the next epoch. */
static void broker_release_all(struct broker *b, uint64_t *allocs, uint64_t *attachments)
{
	struct list *pos, *tmp, *ipos;
	*allocs = *attachments = 0;
	b->invalidate_epoch++;
	list_for_each(pos, &b->sessions) {
		struct session *s = list_entry(pos, struct session, link);
		broker_parting_add(b, s, b->invalidate_epoch);
		list_for_each_safe(ipos, tmp, &s->allocs) {
			broker_alloc_release(b, s, list_entry(ipos, struct broker_alloc, link),
			                     true);
			(*allocs)++;
		}
		*allocs += broker_hosts_release(b, s);
		size_t it = 0;
		struct broker_alloc *a;
		while ((a = idmap_next(&s->attached, &it, NULL))) {
			broker_unpin(b, s, a, true);
			(*attachments)++;
		}
		/* Emptied: removing entries while iterating would be undefined
		 * for this map, and nothing is left to keep. */
		idmap_finish(&s->attached);
		idmap_init(&s->attached);
		session_unkeep_all(b, s);
		list_for_each(ipos, &s->instances)
			broker_queue_clear(list_entry(ipos, struct broker_instance, link));
	}
}

/* Tells every session that it holds nothing any more. */
static void broker_emit_invalidate(struct broker *b, const char *reason)
{
	struct list *pos;
	list_for_each(pos, &b->sessions) {
		struct session *s = list_entry(pos, struct session, link);
		if (!s->hello)
			continue;
		struct broker_event ev = {.type = BROKER_EVENT_INVALIDATE, .s = s};
		ev.invalidate.reason = reason;
		ev.invalidate.epoch = b->invalidate_epoch;
		broker_emit(b, &ev);
	}
}

void broker_invalidate_all(struct broker *b, uint64_t *allocs, uint64_t *attachments)
{
	broker_release_all(b, allocs, attachments);
	broker_emit_invalidate(b, PROTO_V_REASON_INVALIDATE_ALL);
	/* The memory is free: waiting allocations may fit now. */
	broker_policy_changed(b);
}

int broker_set_allocator(struct broker *b, enum broker_allocator kind, uint64_t *allocs,
                         uint64_t *attachments)
{
	struct pool *fresh[BACKEND_MAX_DEVICES] = {NULL};
	struct broker_retired *retired[BACKEND_MAX_DEVICES] = {NULL};
	struct pool_config cfg;
	struct list *pos;
	*allocs = *attachments = 0;
	if ((unsigned)kind > BROKER_ALLOCATOR_ASYNC)
		return -EINVAL;
	/* Stream-ordered pools need every device to have them (sim has
	 * none; cuda where the device shares pools by descriptor). */
	for (int i = 0; kind == BROKER_ALLOCATOR_ASYNC && i < b->device_count; i++) {
		if (!b->dev[i].info.async)
			return -EOPNOTSUPP;
	}
	if (kind == b->allocator)
		return 0;
	/* Everything that can fail first, so that a refusal changes nothing. */
	broker_pool_config(b, kind, &cfg);
	for (int i = 0; i < b->device_count; i++) {
		fresh[i] = pool_create(&cfg, broker_slab_ops(kind), &b->dev[i]);
		retired[i] = malloc(sizeof(*retired[i]));
		if (!fresh[i] || !retired[i] || broker_pool_guard(b, i, fresh[i]) < 0) {
			for (; i >= 0; i--) {
				pool_destroy(fresh[i]);
				free(retired[i]);
			}
			return -ENOMEM;
		}
	}
	broker_release_all(b, allocs, attachments);
	/* The old pools hold nothing live now: cached empty slabs, which go
	 * back to the backend with them, and parting slabs, which keep their
	 * pool (retired) until the clients have closed them. */
	for (int i = 0; i < b->device_count; i++) {
		struct pool *old = b->dev[i].pool;
		uint64_t parting = 0;
		list_for_each(pos, &b->sessions) {
			const struct session *s = list_entry(pos, struct session, link);
			for (const struct broker_parting *p = s->parting; p; p = p->next)
				parting += p->pool == old;
		}
		list_for_each(pos, &b->ghosts) {
			const struct broker_ghost *g = list_entry(pos, struct broker_ghost, link);
			for (const struct broker_parting *p = g->parting; p; p = p->next)
				parting += p->pool == old;
		}
		b->dev[i].pool = fresh[i];
		if (!parting) {
			pool_destroy(old);
			continue;
		}
		pool_trim(old, 0, true);
		retired[i]->pool = old;
		retired[i]->parting = parting;
		list_insert_tail(&b->retired, &retired[i]->link);
		retired[i] = NULL;
	}
	for (int i = 0; i < b->device_count; i++)
		free(retired[i]);
	b->allocator = kind;
	broker_emit_invalidate(b, PROTO_V_REASON_SET_ALLOCATOR);
	broker_policy_changed(b);
	return 0;
}
