/*
 * broker_base.c - the bottom of the broker's files: what every other one
 * uses and that calls none of them: the receiver of events, fresh
 * allocation ids, instance lookups, who may see whom, and an instance's
 * queued requests.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

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

static struct broker_queued *queued_find(struct broker_instance *inst, const char *label)
{
	struct list *pos;
	list_for_each(pos, &inst->queued) {
		struct broker_queued *q = list_entry(pos, struct broker_queued, link);
		if (strcmp(q->label, label) == 0)
			return q;
	}
	return NULL;
}

int broker_queue_put(struct broker_instance *inst, const struct broker_queued *reqs, unsigned n)
{
	struct broker_queued *fresh[PROTO_MAX_REQUESTS] = {NULL};
	unsigned added = 0;
	if (n > PROTO_MAX_REQUESTS)
		return -EINVAL;
	for (unsigned i = 0; i < n; i++)
		added += !queued_find(inst, reqs[i].label);
	if (inst->queued_count + added > PROTO_MAX_QUEUED)
		return -EMFILE;
	/* Everything that can fail first: the queue changes all at once. */
	for (unsigned i = 0; i < n; i++) {
		if (queued_find(inst, reqs[i].label))
			continue;
		fresh[i] = calloc(1, sizeof(*fresh[i]));
		if (!fresh[i]) {
			for (unsigned j = 0; j < i; j++)
				free(fresh[j]);
			return -ENOMEM;
		}
	}
	for (unsigned i = 0; i < n; i++) {
		struct broker_queued *q = fresh[i] ? fresh[i] : queued_find(inst, reqs[i].label);
		if (fresh[i]) {
			snprintf(q->label, sizeof(q->label), "%s", reqs[i].label);
			list_insert_tail(&inst->queued, &q->link);
			inst->queued_count++;
		}
		q->arr = reqs[i].arr;
		q->type = reqs[i].type;
	}
	return 0;
}

const struct broker_queued *broker_queue_next(const struct broker_instance *inst,
                                              const struct broker_queued *q)
{
	const struct list *next = q ? q->link.next : inst->queued.next;
	return next == &inst->queued ? NULL : list_entry(next, const struct broker_queued, link);
}

void broker_session_hello(struct session *s, const char *client, bool keep_slabs)
{
	snprintf(s->name, sizeof(s->name), "%s", client ? client : "");
	s->keep_slabs = keep_slabs;
	s->hello = true;
}

void broker_session_evict(struct broker *b, struct session *s)
{
	if (!s->evicted)
		b->stats.evictions++;
	s->evicted = true;
}

/* Takes an instance out of the policy and the instance table and frees it. */
void broker_instance_free(struct broker *b, struct session *s, struct broker_instance *inst)
{
	broker_queue_clear(inst);
	/* Its recall out, if any, goes with it: no answer can come. */
	if (inst->recall_epoch)
		b->recalls_pending--;
	policy_remove(broker_policy_of(b, s), &inst->pol);
	idmap_remove(&b->instances, inst->id);
	list_remove(&inst->link);
	s->instance_count--;
	b->instance_count--;
	free(inst);
}

uint64_t broker_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void broker_timer_want(struct broker *b, uint64_t deadline)
{
	if (deadline >= b->timer_deadline)
		return;
	b->timer_deadline = deadline;
	if (b->timer) {
		uint64_t now = broker_now_ms();
		b->timer(b->timer_ctx, deadline > now ? deadline - now : 0);
	}
}
