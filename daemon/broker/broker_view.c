/*
 * broker_view.c - what the layers above read of the broker's state
 * (status, devices, stats, clients, metrics, the server's log lines):
 * figures copied into snapshot structs, and walks over the sessions,
 * instances and partitions, so that no one outside the broker reaches into
 * struct broker or follows its lists.
 */
#include <errno.h>
#include <string.h>

#include "broker.h"
#include "broker_internal.h"

int broker_device_count(const struct broker *b)
{
	return b->device_count;
}

const struct backend_device_info *broker_device_info(const struct broker *b, int device)
{
	return &b->dev[device].info;
}

void broker_device_stats(const struct broker *b, int device, struct broker_device_stats *out)
{
	pool_get_stats(b->dev[device].pool, &out->pool);
	out->fenced = b->dev[device].fenced;
	out->orphaned = b->policy.dev[device].orphaned;
	out->leased = out->leases = out->in_use = 0;
	for (const struct session *s = broker_session_next(b, NULL); s;
	     s = broker_session_next(b, s)) {
		for (const struct broker_instance *inst = broker_instance_next(s, NULL); inst;
		     inst = broker_instance_next(s, inst)) {
			if (inst->device != device)
				continue;
			out->leased += inst->leased;
			out->leases += inst->leases;
			out->in_use += inst->in_use;
		}
	}
}

uint64_t broker_uid_used(const struct broker *b, int device, uid_t uid)
{
	return pool_uid_used(b->dev[device].pool, uid);
}

void broker_summary(const struct broker *b, struct broker_summary *out)
{
	*out = (struct broker_summary){
	    .started = b->started,
	    .mode = b->policy.cfg.mode,
	    .allocator = b->allocator,
	    .sessions = b->session_count,
	    .instances = b->instance_count,
	    .allocations = b->allocs.count,
	    .exports = b->export_count,
	    .orphans = b->orphan_count,
	    .host_allocations = b->hosts.count,
	    .host_used = b->host_used,
	    .waits = b->wait_count,
	    .stats = b->stats,
	};
}

const struct broker_limits *broker_get_limits(const struct broker *b)
{
	return &b->limits;
}

void broker_set_limits(struct broker *b, const struct broker_limits *limits)
{
	uint64_t slab_size = b->limits.slab_size;
	b->limits = *limits;
	b->limits.slab_size = slab_size;
}

const char *broker_backend_name(const struct broker *b)
{
	return b->backend->ops->name;
}

const char *broker_backend_error(const struct broker *b)
{
	return b->backend->last_error;
}

void broker_stop(struct broker *b)
{
	b->stopping = true;
}

const struct policy *broker_policy_const(const struct broker *b, const struct session *s)
{
	return s && s->part ? &s->part->policy : &b->policy;
}

struct session *broker_session_next(const struct broker *b, const struct session *prev)
{
	const struct list *next = prev ? prev->link.next : b->sessions.next;
	return next == &b->sessions ? NULL : list_entry(next, struct session, link);
}

struct broker_instance *broker_instance_next(const struct session *s,
                                             const struct broker_instance *prev)
{
	const struct list *next = prev ? prev->link.next : s->instances.next;
	return next == &s->instances ? NULL : list_entry(next, struct broker_instance, link);
}

struct broker_partition *broker_partition_next(const struct broker *b,
                                               const struct broker_partition *prev)
{
	const struct list *next = prev ? prev->link.next : b->partitions.next;
	return next == &b->partitions ? NULL : list_entry(next, struct broker_partition, link);
}

struct session *broker_session_get(const struct broker *b, uint64_t id)
{
	for (struct session *s = broker_session_next(b, NULL); s; s = broker_session_next(b, s)) {
		if (s->id == id)
			return s;
	}
	return NULL;
}

uint64_t broker_allocation_size(const struct broker *b, uint64_t id)
{
	const struct broker_alloc *a = idmap_get(&b->allocs, id);
	if (a)
		return broker_alloc_bytes(a);
	const struct broker_host *h = idmap_get(&b->hosts, id);
	return h ? h->size : 0;
}

int broker_allocation_label(const struct broker *b, const struct session *s, uint64_t id,
                            const char **label, uint64_t *instance)
{
	const struct broker_alloc *a = idmap_get(&b->allocs, id);
	if (!a || a->inst->owner != s)
		return -ENOENT;
	*label = a->label;
	*instance = a->inst->id;
	return 0;
}

size_t broker_labelled(const struct session *s, const char *label, uint64_t instance, uint64_t *ids,
                       size_t max)
{
	size_t n = 0;
	const struct list *pos;
	list_for_each(pos, &s->allocs) {
		const struct broker_alloc *a = list_entry(pos, const struct broker_alloc, link);
		if (n < max && a->label && strcmp(a->label, label) == 0 &&
		    (!instance || a->inst->id == instance))
			ids[n++] = a->id;
	}
	list_for_each(pos, &s->hosts) {
		const struct broker_host *h = list_entry(pos, const struct broker_host, link);
		if (n < max && h->label && strcmp(h->label, label) == 0 &&
		    (!instance || h->instance == instance))
			ids[n++] = h->id;
	}
	return n;
}
