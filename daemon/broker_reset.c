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
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "broker.h"
#include "broker_internal.h"
#include "log.h"

static const char *const broker_allocator_names[] = {
    [BROKER_ALLOCATOR_POOL] = "pool",
    [BROKER_ALLOCATOR_DIRECT] = "direct",
    [BROKER_ALLOCATOR_ASYNC] = "async",
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
	if (kind == BROKER_ALLOCATOR_DIRECT) {
		/* Every request is above the threshold: its own backend
		 * allocation, returned as soon as it is freed. */
		cfg->large_threshold = 1;
		cfg->keep_empty = 0;
	} else {
		cfg->keep_empty = 1;
	}
}

/* Frees everything every session holds, without telling anyone yet. */
static void broker_release_all(struct broker *b, uint64_t *allocs, uint64_t *attachments)
{
	struct list *pos, *tmp, *ipos;
	*allocs = *attachments = 0;
	for (pos = b->sessions.next; pos != &b->sessions; pos = pos->next) {
		struct session *s = list_entry(pos, struct session, link);
		list_for_each_safe(ipos, tmp, &s->allocs)
		{
			broker_alloc_release(b, s, list_entry(ipos, struct broker_alloc, link));
			(*allocs)++;
		}
		*allocs += broker_hosts_release(b, s);
		size_t it = 0;
		struct broker_alloc *a;
		while ((a = idmap_next(&s->attached, &it, NULL))) {
			broker_unpin(b, s, a);
			(*attachments)++;
		}
		/* Emptied: removing entries while iterating would be undefined
		 * for this map, and nothing is left to keep. */
		idmap_finish(&s->attached);
		idmap_init(&s->attached);
		for (ipos = s->instances.next; ipos != &s->instances; ipos = ipos->next)
			broker_queue_clear(list_entry(ipos, struct broker_instance, link));
	}
}

/* Tells every session that it holds nothing any more. */
static void broker_send_invalidate(struct broker *b, const char *reason)
{
	struct list *pos;
	for (pos = b->sessions.next; pos != &b->sessions; pos = pos->next) {
		struct session *s = list_entry(pos, struct session, link);
		if (!s->hello)
			continue;
		cJSON *data = cJSON_CreateObject();
		if (!data || !cJSON_AddStringToObject(data, "reason", reason)) {
			cJSON_Delete(data);
			log_warn("session %llu: invalidate event dropped: out of memory",
			         (unsigned long long)s->id);
			continue;
		}
		broker_send_event(b, s, "invalidate", data);
	}
}

void broker_invalidate_all(struct broker *b, uint64_t *allocs, uint64_t *attachments)
{
	broker_release_all(b, allocs, attachments);
	broker_send_invalidate(b, "invalidate_all");
	/* The memory is free: waiting allocations may fit now. */
	broker_policy_changed(b);
}

int broker_set_allocator(struct broker *b, enum broker_allocator kind, uint64_t *allocs,
                         uint64_t *attachments)
{
	struct pool *fresh[BACKEND_MAX_DEVICES] = {NULL};
	struct pool_config cfg;
	*allocs = *attachments = 0;
	if ((unsigned)kind > BROKER_ALLOCATOR_ASYNC)
		return -EINVAL;
	/* Stream-ordered pools (cuMemAllocAsync) need a backend that has
	 * them; neither sim nor this version's cuda path does. */
	if (kind == BROKER_ALLOCATOR_ASYNC)
		return -EOPNOTSUPP;
	if (kind == b->allocator)
		return 0;
	/* Everything that can fail first, so that a refusal changes nothing. */
	broker_pool_config(b, kind, &cfg);
	for (int i = 0; i < b->device_count; i++) {
		fresh[i] = pool_create(&cfg, b->dev[i].pool_ops, &b->dev[i]);
		if (!fresh[i]) {
			while (i--)
				pool_destroy(fresh[i]);
			return -ENOMEM;
		}
	}
	broker_release_all(b, allocs, attachments);
	/* The old pools hold nothing live now: only cached empty slabs,
	 * which go back to the backend with them. */
	for (int i = 0; i < b->device_count; i++) {
		pool_destroy(b->dev[i].pool);
		b->dev[i].pool = fresh[i];
	}
	b->allocator = kind;
	broker_send_invalidate(b, "set_allocator");
	broker_policy_changed(b);
	return 0;
}
