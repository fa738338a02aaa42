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
 * until the last of them is let go. The parting slabs, fences and retired
 * pools themselves are broker_alloc.c's; this file only makes them.
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
	b->stats.invalidations++;
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
