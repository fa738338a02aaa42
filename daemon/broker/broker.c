/*
 * broker.c - the broker, its devices, sessions and instances, and the
 * public operations that free memory (free, detach, release, a ghost's
 * end) and then serve the waits that may fit now: the top of the broker's
 * files (broker_internal.h), so that the files below need not call up.
 *
 * Ownership: the broker owns sessions; a session owns its instances and
 * allocations; an allocation owns its pool block. The allocation table maps
 * ids to allocations for the whole daemon so that free and attach are O(1).
 *
 * A session "holds" a slab while it has allocations or attachments in it,
 * and, when it asked for keep_slabs, after its last one went, until it lets
 * go (release) or is asked to (reclaim, broker_keep.c). The client library
 * keeps the same count, so both sides know without an extra message when
 * the slab's handle (and sim descriptor) must be sent again.
 */
#include "broker.h"
#include "broker_internal.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

void broker_limits_default(struct broker_limits *limits)
{
	limits->slab_size = POOL_DEFAULT_SLAB;
	limits->max_instances = 64;
	limits->max_allocations = 65536;
	limits->write_high_water = 256u << 10;
	limits->hello_timeout_ms = 10000;
	limits->paused_timeout_ms = 10000;
	/* A responsive library answers a recall in milliseconds (its service
	 * thread); this bounds what one that cannot (stopped, stuck) costs
	 * the request that waits for it. */
	limits->recall_timeout_ms = 500;
	limits->max_clients = 1024;
	limits->max_inflight = 64;
	limits->mode = POLICY_PASSIVE;
	limits->min_auto_share = POLICY_MIN_AUTO_SHARE;
	/* Host memory is the machine's RAM: a bound an operator raises. */
	limits->max_host_memory = 4ull << 30;
}

int broker_create(struct backend *backend, const struct broker_limits *limits, struct broker **out)
{
	struct broker *b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->backend = backend;
	b->limits = *limits;
	list_init(&b->sessions);
	list_init(&b->exports);
	list_init(&b->waits);
	list_init(&b->retired);
	list_init(&b->ghosts);
	list_init(&b->partitions);
	idmap_init(&b->allocs);
	idmap_init(&b->hosts);
	idmap_init(&b->uid_files);
	arena_init(&b->alloc_arena, sizeof(struct broker_alloc), 32);
	idmap_init(&b->instances);
	b->timer_deadline = UINT64_MAX;
	b->next_session_id = 1;
	b->next_instance_id = 1;
	b->started = time(NULL);
	struct pool_config pcfg;
	broker_pool_config(b, BROKER_ALLOCATOR_POOL, &pcfg);
	int rc = 0;
	for (int i = 0; i < backend->device_count; i++) {
		struct broker_device *dev = &b->dev[i];
		dev->index = i;
		dev->backend = backend;
		dev->broker = b;
		rc = backend->ops->device_info(backend, i, &dev->info);
		if (rc < 0)
			break;
		dev->pool = pool_create(&pcfg, broker_slab_ops(BROKER_ALLOCATOR_POOL), dev);
		if (!dev->pool) {
			rc = -EINVAL;
			break;
		}
		b->device_count = i + 1;
	}
	if (rc == 0) {
		uint64_t totals[BACKEND_MAX_DEVICES];
		struct policy_config pc = {.mode = limits->mode,
		                           .min_auto_share = limits->min_auto_share};
		for (int i = 0; i < b->device_count; i++)
			totals[i] = b->dev[i].info.total;
		rc = policy_init(&b->policy, &pc, b->device_count, totals);
		for (int i = 0; rc == 0 && i < b->device_count; i++) {
			/* Slabs are made of 2 MiB units: the odd rest of a
			 * device (an H200's capacity is 141593.56 MiB) is kept
			 * out too, so that the capacity can be had to the last
			 * byte. */
			uint64_t total = b->dev[i].info.total;
			uint64_t kept = b->dev[i].info.in_use + b->dev[i].info.reserve;
			if (kept < total)
				kept += (total - kept) % POOL_SLAB_ALIGN;
			rc = policy_set_reserve(&b->policy, i, kept);
		}
		for (int i = 0; rc == 0 && i < b->device_count; i++)
			rc = broker_pool_guard(b, i, b->dev[i].pool);
	}
	if (rc < 0) {
		broker_destroy(b);
		return rc;
	}
	*out = b;
	return 0;
}

void broker_destroy(struct broker *b)
{
	if (!b)
		return;
	/* The layers above are gone by now: nothing may be emitted or armed, and
	 * nothing waiting is served while the sessions are taken apart. */
	b->event = NULL;
	b->timer = NULL;
	b->exit_watch = NULL;
	b->stopping = true;
	struct list *pos, *tmp;
	list_for_each_safe(pos, tmp, &b->sessions) {
		struct session *s = list_entry(pos, struct session, link);
		broker_waits_drop(b, s);
	}
	list_for_each_safe(pos, tmp, &b->sessions) {
		broker_session_close(b, list_entry(pos, struct session, link));
	}
	/* The process of an evicted session may outlive the daemon: nothing
	 * is watched any more, and the backend goes anyway. */
	broker_ghosts_drop(b);
	broker_partitions_drop(b);
	for (int i = 0; i < b->device_count; i++)
		pool_destroy(b->dev[i].pool);
	/* Closing the sessions let go of every parting slab, which destroyed
	 * every retired pool. */
	assert(list_empty(&b->retired));
	if (b->policy.device_count) /* policy_init succeeded */
		policy_finish(&b->policy);
	idmap_finish(&b->allocs);
	idmap_finish(&b->hosts);
	idmap_finish(&b->uid_files);
	arena_finish(&b->alloc_arena);
	idmap_finish(&b->instances);
	backend_destroy(b->backend);
	free(b);
}

struct session *broker_session_open(struct broker *b, uid_t uid, gid_t gid, pid_t pid)
{
	struct session *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->id = b->next_session_id++;
	s->uid = uid;
	s->gid = gid;
	s->pid = pid;
	s->pidfd = -1;
	/* The server refines this with the peer's groups. */
	s->admin = uid == 0;
	s->connected = time(NULL);
	b->stats.connections_total++;
	list_init(&s->instances);
	list_init(&s->allocs);
	list_init(&s->hosts);
	idmap_init(&s->held);
	idmap_init(&s->attached);
	list_insert_tail(&b->sessions, &s->link);
	b->session_count++;
	return s;
}

static bool broker_uid_connected(const struct broker *b, uid_t uid)
{
	const struct list *pos;
	list_for_each(pos, &b->sessions) {
		if (list_entry(pos, const struct session, link)->uid == uid)
			return true;
	}
	return false;
}

void broker_session_close(struct broker *b, struct session *s)
{
	broker_waits_drop(b, s);
	broker_session_strip(b, s);
	if (s->part)
		s->part->sessions--;
	list_remove(&s->link);
	b->session_count--;
	/* A user with no connection left gets its cached slabs returned. */
	if (!broker_uid_connected(b, s->uid)) {
		for (int i = 0; i < b->device_count; i++)
			pool_trim(b->dev[i].pool, s->uid, false);
	}
	idmap_finish(&s->held);
	idmap_finish(&s->attached);
	if (s->pidfd >= 0)
		close(s->pidfd);
	free(s->groups);
	free(s);
	/* A dead client's share goes to the others, and its memory to
	 * whoever waits for it. */
	broker_policy_changed(b);
}

int broker_register(struct broker *b, struct session *s, const char *name, int device,
                    double proportion, const char *group, struct broker_instance **out)
{
	if (device < 0 || device >= b->device_count || (s->part && !s->part->size[device]))
		return -ENODEV;
	if (s->ended)
		return -ESHUTDOWN;
	if (s->instance_count >= b->limits.max_instances)
		return -EMFILE;
	struct broker_instance *inst = calloc(1, sizeof(*inst));
	if (!inst || idmap_reserve(&b->instances, 1) < 0) {
		free(inst);
		return -ENOMEM;
	}
	/* An operator's default proportion for this user or group. */
	const struct broker_rule *rule = broker_rule_for(b, s);
	if (proportion == 0 && rule && rule->proportion > 0)
		proportion = rule->proportion;
	/* The policy judges first: a refused registration uses no id. */
	int rc = policy_add(broker_policy_of(b, s), &inst->pol, b->next_instance_id, device,
	                    proportion, group, NULL);
	if (rc < 0) {
		free(inst);
		return rc;
	}
	/* Stream groups are per user, like export names: another user's
	 * instance can neither join this user's group nor learn its name. */
	policy_set_space(&inst->pol, s->uid);
	inst->id = b->next_instance_id++;
	inst->owner = s;
	inst->device = device;
	list_init(&inst->queued);
	snprintf(inst->name, sizeof(inst->name), "%s", name);
	idmap_put(&b->instances, inst->id, inst); /* reserved above: cannot fail */
	list_insert_tail(&s->instances, &inst->link);
	s->instance_count++;
	b->instance_count++;
	*out = inst;
	broker_policy_changed(b);
	return 0;
}

int broker_set_proportion(struct broker *b, struct broker_instance *inst, double proportion)
{
	int rc =
	    policy_set_proportion(broker_policy_of(b, inst->owner), &inst->pol, proportion, NULL);
	if (rc == 0)
		broker_policy_changed(b);
	return rc;
}

int broker_set_auto(struct broker *b, struct broker_instance *inst)
{
	int rc = policy_set_auto(broker_policy_of(b, inst->owner), &inst->pol, NULL);
	if (rc == 0)
		broker_policy_changed(b);
	return rc;
}

int broker_set_group(struct broker *b, struct broker_instance *inst, const char *group)
{
	return policy_set_group(broker_policy_of(b, inst->owner), &inst->pol, group);
}

int broker_set_mode(struct broker *b, enum policy_mode mode)
{
	/* One mode for the daemon: partitions follow. */
	int rc = policy_set_mode(&b->policy, mode);
	struct list *pos;
	list_for_each(pos, &b->partitions) {
		if (rc == 0)
			rc = policy_set_mode(
			    &list_entry(pos, struct broker_partition, link)->policy, mode);
	}
	if (rc == 0)
		broker_policy_changed(b);
	return rc;
}

int broker_set_limit(struct broker *b, int device, uint64_t bytes, double fraction)
{
	int rc = policy_set_limit(&b->policy, device, bytes, fraction);
	if (rc == 0)
		broker_policy_changed(b);
	return rc;
}

int broker_unregister(struct broker *b, struct session *s, uint64_t instance)
{
	struct broker_instance *inst = broker_instance_find(s, instance);
	if (!inst)
		return -ENOENT;
	if (inst->live > 0)
		return -EBUSY;
	broker_instance_free(b, s, inst);
	broker_policy_changed(b);
	return 0;
}

int broker_free(struct broker *b, struct session *s, uint64_t id)
{
	struct broker_alloc *a = broker_alloc_owned(b, s, id);
	if (!a)
		return broker_host_free(b, s, id);
	broker_alloc_release(b, s, a, false);
	broker_waits_run(b);
	return 0;
}

int broker_attach(struct broker *b, struct session *s, uint64_t id, struct broker_grant *out)
{
	struct broker_alloc *a = idmap_get(&b->allocs, id);
	/* Memory does not cross a partition's border: destroying it must be
	 * able to take back everything its sessions hold. A lease is its
	 * client's to sub-allocate: what others attach is a carve of it. */
	if (!a || a->lease || a->inst->owner->uid != s->uid || a->inst->owner->part != s->part)
		return -ENOENT;
	return broker_hold(b, s, a, out);
}

int broker_detach(struct broker *b, struct session *s, uint64_t id)
{
	struct broker_alloc *a = idmap_remove(&s->attached, id);
	if (!a)
		return -ENOENT;
	/* An unpinned slab, a released orphan: real room for a wait. */
	broker_unpin(b, s, a, false);
	broker_waits_run(b);
	return 0;
}

uint64_t broker_device_free(const struct broker *b, int device)
{
	/* Live allocations are exactly what the policy has charged. */
	return policy_device_available(&b->policy, device);
}

void broker_ghost_release(struct broker *b, struct broker_ghost *g)
{
	broker_ghost_free(b, g);
	/* Slabs back to the device: room for a wait. */
	broker_waits_run(b);
}

int broker_release(struct broker *b, struct session *s, uint64_t slab_id)
{
	if (!broker_parting_release_slab(b, s, slab_id)) {
		struct session_slab *ss = idmap_get(&s->held, slab_id);
		if (!ss)
			return -ENOENT;
		if (ss->refs)
			return -EBUSY;
		session_unkeep(b, s, slab_id);
	}
	/* The slab may have gone back: room for a wait. */
	broker_waits_run(b);
	return 0;
}
