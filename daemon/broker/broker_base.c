/*
 * broker_base.c - the bottom of the broker's files: what every other one
 * uses and that calls none of them: the receiver of events, fresh
 * allocation ids, instance lookups, who may see whom, and an instance's
 * queued requests.
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/random.h>

#include "broker.h"
#include "broker_internal.h"

void broker_set_events(struct broker *b, broker_event_fn fn, void *ctx)
{
	b->event = fn;
	b->event_ctx = ctx;
}

void broker_emit(struct broker *b, const struct broker_event *ev)
{
	if (b->event)
		b->event(b->event_ctx, ev);
}

/* Buffered: one getrandom() per 32. */
int broker_new_id(struct broker *b, uint64_t *out)
{
	for (int tries = 0; tries < 8; tries++) {
		if (b->rand_left == 0) {
			if (getrandom(b->rand, sizeof(b->rand), 0) != (ssize_t)sizeof(b->rand))
				return -EIO;
			b->rand_left = sizeof(b->rand) / sizeof(b->rand[0]);
		}
		uint64_t id = b->rand[--b->rand_left];
		if (id && !idmap_get(&b->allocs, id) && !idmap_get(&b->hosts, id)) {
			*out = id;
			return 0;
		}
	}
	return -EIO;
}

struct broker_instance *broker_instance_find(struct session *s, uint64_t instance)
{
	struct list *pos, *tmp;
	list_for_each_safe(pos, tmp, &s->instances) {
		struct broker_instance *inst = list_entry(pos, struct broker_instance, link);
		if (inst->id == instance)
			return inst;
	}
	return NULL;
}

struct broker_instance *broker_instance_get(struct broker *b, uint64_t instance)
{
	return idmap_get(&b->instances, instance);
}

bool broker_sees(const struct session *s, uid_t uid)
{
	return s->admin || s->uid == uid;
}

void broker_queue_clear(struct broker_instance *inst)
{
	struct list *pos, *tmp;
	list_for_each_safe(pos, tmp, &inst->queued) {
		list_remove(pos);
		free(list_entry(pos, struct broker_queued, link));
	}
	inst->queued_count = 0;
}

/* Takes an instance out of the policy and the instance table and frees it. */
void broker_instance_free(struct broker *b, struct session *s, struct broker_instance *inst)
{
	broker_queue_clear(inst);
	policy_remove(broker_policy_of(b, s), &inst->pol);
	idmap_remove(&b->instances, inst->id);
	list_remove(&inst->link);
	s->instance_count--;
	b->instance_count--;
	free(inst);
}
