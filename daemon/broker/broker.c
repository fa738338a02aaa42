/*
 * broker.c - devices, sessions, instances and allocations.
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
#include <sys/random.h>
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

/* pool_prefer: a slab the session holds, which its client has mapped. */
static bool session_holds_slab(void *ctx, const struct pool_slab *slab)
{
	const struct session *s = ctx;
	const struct backend_slab *bs = pool_slab_backend(slab);

	return idmap_get(&s->held, bs->id) != NULL;
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

/* Frees a block of device's pool, or fences it for s (see
 * broker_parting_add_block; out of memory, it is freed). */
static void broker_block_free(struct broker *b, struct session *s, int device,
                              struct pool_block *block, bool fence)
{
	if (fence && broker_parting_add_block(b, s, device, block) == 0)
		return;
	/* Last: this may hand the slab back to the backend. */
	pool_free(b->dev[device].pool, block);
}

void broker_alloc_release(struct broker *b, struct session *s, struct broker_alloc *a, bool fence)
{
	struct pool_slab *slab = pool_block_slab(a->block);
	struct backend_slab *bs = pool_slab_backend(slab);
	uint64_t size = pool_block_size(a->block);
	int device = a->inst->device;
	idmap_remove(&b->allocs, a->id);
	list_remove(&a->link);
	if (a->exported)
		broker_exports_drop_alloc(b, a);
	/* An unclaimed allocation was never counted as a hold on its slab. */
	if (!a->unclaimed)
		session_release(b, s, bs->id);
	a->inst->used -= size;
	a->inst->live--;
	s->used -= size;
	s->alloc_count--;
	free(a->label);
	a->label = NULL;
	if (a->holders) {
		/* Others have it open: the memory stays theirs (and the
		 * device's, not the instance's) until the last detaches. */
		policy_orphan(broker_policy_of(b, s), &a->inst->pol, size);
		a->inst = NULL;
		a->orphan = true;
		/* Its owner's process may still write it: the block is fenced
		 * for that process (its ghost, if it has one by then) when the
		 * last holder lets go. */
		if (fence)
			a->fence_session = s->id;
		b->orphan_count++;
		return;
	}
	policy_uncharge(broker_policy_of(b, s), &a->inst->pol, size);
	broker_block_free(b, s, device, a->block, fence);
	arena_free(&b->alloc_arena, a);
}

void broker_unpin(struct broker *b, struct session *s, struct broker_alloc *a, bool fence)
{
	struct pool_slab *slab = pool_block_slab(a->block);
	struct backend_slab *bs = pool_slab_backend(slab);
	int device = bs->device;
	session_release(b, s, bs->id);
	pool_slab_unpin(b->dev[device].pool, slab);
	if (--a->holders || !a->orphan)
		return;
	/* Attachments stay inside a partition (broker_attach, broker_open):
	 * the holder's policy is the owner's. */
	policy_orphan_release(broker_policy_of(b, s), device, pool_block_size(a->block));
	b->orphan_count--;
	/* Fenced for this holder's client if it may still write it, else for
	 * the evicted owner's process while it lives. */
	if (fence || !a->fence_session ||
	    broker_ghost_fence(b, a->fence_session, device, a->block) < 0)
		broker_block_free(b, s, device, a->block, fence);
	arena_free(&b->alloc_arena, a);
}

/* Tells the owner of every instance whose cap moved, then serves the waits
 * that fit now: the tail of everything that changes the policy or frees
 * memory. */
static void broker_policy_drain(struct broker *b, struct policy *p)
{
	struct policy_instance *pi;
	while ((pi = policy_take_changed(p))) {
		struct broker_instance *inst = list_entry(pi, struct broker_instance, pol);
		struct broker_event ev = {.type = BROKER_EVENT_CAP_CHANGED, .s = inst->owner};
		ev.cap_changed.instance = inst->id;
		ev.cap_changed.cap = pi->cap;
		ev.cap_changed.share = pi->share;
		ev.cap_changed.mode = p->cfg.mode;
		broker_emit(b, &ev);
	}
}

void broker_policy_changed(struct broker *b)
{
	struct list *pos;
	broker_policy_drain(b, &b->policy);
	list_for_each(pos, &b->partitions)
		broker_policy_drain(b, &list_entry(pos, struct broker_partition, link)->policy);
	broker_waits_run(b);
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
static void broker_instance_free(struct broker *b, struct session *s, struct broker_instance *inst)
{
	broker_queue_clear(inst);
	policy_remove(broker_policy_of(b, s), &inst->pol);
	idmap_remove(&b->instances, inst->id);
	list_remove(&inst->link);
	s->instance_count--;
	b->instance_count--;
	free(inst);
}

void broker_session_strip(struct broker *b, struct session *s)
{
	struct list *pos, *tmp;
	broker_waits_drop(b, s);
	/* Evicted, its process lives on with its mappings: what it held is
	 * kept from the backend with what was parting (broker_ghost_make).
	 * Likewise a client that went without saying it unmapped its VMM
	 * slabs (killed, or a process that closed the socket and kept the
	 * mappings): that memory lives as long as its process maps it. */
	bool linger = broker_session_lingers(s);
	if (linger)
		broker_parting_add(b, s, b->invalidate_epoch);
	/* And the ranges of its allocations and attachments stay allocated
	 * (fenced, with the ghost) while that process may write there: handed
	 * to another allocation of its uid in the same slab, they would be
	 * shared with it. */
	list_for_each_safe(pos, tmp, &s->allocs) {
		broker_alloc_release(b, s, list_entry(pos, struct broker_alloc, link), linger);
	}
	broker_hosts_release(b, s);
	size_t it = 0;
	struct broker_alloc *a;
	while ((a = idmap_next(&s->attached, &it, NULL)))
		broker_unpin(b, s, a, linger);
	/* Empty, for a session that lives on (its partition was destroyed). */
	idmap_finish(&s->attached);
	idmap_init(&s->attached);
	session_unkeep_all(b, s);
	if (linger)
		broker_ghost_make(b, s);
	else
		broker_parting_drop(b, s);
	list_for_each_safe(pos, tmp, &s->instances) {
		broker_instance_free(b, s, list_entry(pos, struct broker_instance, link));
	}
}

void broker_session_close(struct broker *b, struct session *s)
{
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

struct broker_instance *broker_instance_get(struct broker *b, uint64_t instance)
{
	return idmap_get(&b->instances, instance);
}

bool broker_sees(const struct session *s, uid_t uid)
{
	return s->admin || s->uid == uid;
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

static void broker_grant_fill(struct session *s, struct pool_block *block, bool fresh,
                              struct broker_grant *out)
{
	struct backend_slab *bs = pool_slab_backend(pool_block_slab(block));
	const struct session_slab *ss = fresh ? idmap_get(&s->held, bs->id) : NULL;
	out->keep = ss && ss->keep;
	/* A slab handed over after goodbye is mapped again. */
	if (fresh)
		s->unmapped = false;
	out->device = bs->device;
	out->slab_id = bs->id;
	out->slab_size = bs->size;
	out->offset = pool_block_offset(block);
	out->size = pool_block_size(block);
	out->handle = fresh ? bs->handle : NULL;
	out->fd = fresh ? bs->fd : -1;
	out->pool = fresh && bs->pool;
	out->pool_id = out->pool ? bs->pool_id : 0;
	out->vmm = fresh && bs->vmm;
}

/*
 * The policy's verdict on charging bytes more to inst. Without a limit the
 * capacity is the device's memory, and there the pool is the better judge:
 * it fails just the same when the device is full, but first hands back
 * cached empty slabs, and counts the refusal in its statistics (ooms).
 */
static int broker_admit(struct broker *b, struct broker_instance *inst, uint64_t bytes)
{
	const struct policy *p = broker_policy_of(b, inst->owner);
	int rc = policy_admit(p, &inst->pol, bytes, NULL);
	/* Partitions make every capacity smaller than the device. */
	return rc == -ENOMEM && p->dev[inst->device].capacity == b->dev[inst->device].info.total
	           ? 0
	           : rc;
}

/*
 * The allocation path of alloc and of allocate_queue. With hold false the
 * allocation is made "unclaimed": the session does not hold its slab yet
 * (its client was not given the handle), which broker_claim() does later.
 */
static int broker_alloc_in(struct broker *b, struct session *s, struct broker_instance *inst,
                           uint64_t size, uint64_t align, bool hold, struct broker_grant *out,
                           struct broker_alloc **made)
{
	if (b->stopping)
		return -ESHUTDOWN;
	if (s->alloc_count + s->attached.count + s->host_count >= b->limits.max_allocations)
		return -EMFILE;
	/* The policy counts what the pool will hand out: the size rounded
	 * up to the granule. */
	if (size > UINT64_MAX - (POOL_GRANULE - 1))
		return -EINVAL;
	int rc = broker_admit(b, inst, (size + POOL_GRANULE - 1) & ~(uint64_t)(POOL_GRANULE - 1));
	if (rc < 0)
		return rc;
	/* An operator's cap on the user, in both modes: -EXFULL, so the reply
	 * can name the user's cap rather than the instance's. */
	const struct broker_rule *rule = broker_rule_for(b, s);
	if (rule && rule->cap &&
	    pool_uid_used(b->dev[inst->device].pool, s->uid) + size > rule->cap)
		return -EXFULL;
	struct broker_alloc *a = arena_alloc(&b->alloc_arena, NULL);
	if (!a)
		return -EAGAIN;
	rc = broker_new_id(b, &a->id);
	if (rc < 0)
		goto fail;
	struct pool *pool = b->dev[inst->device].pool;
	/* Where the client has a slab mapped, put it there: the handle need
	 * not be sent, nor opened again. */
	const struct pool_prefer pref = {session_holds_slab, s};
	rc = pool_alloc_prefer(pool, s->uid, broker_domain_of(s), size, align,
	                       s->held.count ? &pref : NULL, &a->block);
	if (rc == -ENOMEM)
		/* Slabs kept empty by clients are asked back: a retry (a wait)
		 * finds them once their clients have answered. */
		broker_reclaim_device(b, inst->device);
	if (rc < 0)
		goto fail;
	/* Should the pool ever hand out more than the rounded size, the
	 * policy must still hold. */
	rc = broker_admit(b, inst, pool_block_size(a->block));
	if (rc < 0) {
		pool_free(pool, a->block);
		goto fail;
	}
	struct backend_slab *bs = pool_slab_backend(pool_block_slab(a->block));
	int fresh = hold ? session_hold(b, s, pool_block_slab(a->block)) : 0;
	if (fresh < 0 || idmap_put(&b->allocs, a->id, a) < 0) {
		if (fresh >= 0 && hold)
			session_unhold(b, s, bs->id, fresh == 1);
		pool_free(pool, a->block);
		rc = -EAGAIN;
		goto fail;
	}
	a->inst = inst;
	a->unclaimed = !hold;
	list_insert_tail(&s->allocs, &a->link);
	uint64_t bytes = pool_block_size(a->block);
	inst->used += bytes;
	inst->live++;
	policy_charge(broker_policy_of(b, s), &inst->pol, bytes);
	s->used += bytes;
	s->alloc_count++;
	if (out) {
		out->id = a->id;
		broker_grant_fill(s, a->block, fresh == 1, out);
	}
	if (made)
		*made = a;
	return 0;
fail:
	arena_free(&b->alloc_arena, a);
	return rc;
}

int broker_alloc(struct broker *b, struct session *s, uint64_t instance, uint64_t size,
                 uint64_t align, struct broker_grant *out)
{
	struct broker_instance *inst = broker_instance_find(s, instance);
	if (!inst)
		return b->stopping ? -ESHUTDOWN : -ENOENT;
	return broker_alloc_in(b, s, inst, size, align, true, out, NULL);
}

int broker_alloc_queued(struct broker *b, struct broker_instance *inst, uint64_t size,
                        const char *label, uint64_t *id)
{
	struct broker_alloc *a;
	char *copy = strdup(label);
	if (!copy)
		return -EAGAIN;
	int rc = broker_alloc_in(b, inst->owner, inst, size, 0, false, NULL, &a);
	if (rc < 0) {
		free(copy);
		return rc;
	}
	a->label = copy;
	*id = a->id;
	return 0;
}

int broker_claim(struct broker *b, struct session *s, uint64_t id, struct broker_grant *out)
{
	struct broker_alloc *a = idmap_get(&b->allocs, id);
	if (!a || a->inst->owner != s)
		return -ENOENT;
	if (!a->unclaimed)
		return -EEXIST;
	int fresh = session_hold(b, s, pool_block_slab(a->block));
	if (fresh < 0)
		return -EAGAIN;
	a->unclaimed = false;
	out->id = a->id;
	broker_grant_fill(s, a->block, fresh == 1, out);
	return 0;
}

void broker_unclaim(struct broker *b, struct session *s, const struct broker_grant *g)
{
	struct broker_alloc *a = broker_alloc_owned(b, s, g->id);
	if (!a || a->unclaimed)
		return;
	/* A handle in the grant: the claim made the session hold the slab. */
	session_unhold(b, s, g->slab_id, g->handle != NULL);
	a->unclaimed = true;
}

/* An allocation this session owns; NULL for unknown and foreign ids alike. */
struct broker_alloc *broker_alloc_owned(struct broker *b, struct session *s, uint64_t id)
{
	struct broker_alloc *a = idmap_get(&b->allocs, id);
	return a && a->inst->owner == s ? a : NULL;
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
	 * able to take back everything its sessions hold. */
	if (!a || a->inst->owner->uid != s->uid || a->inst->owner->part != s->part)
		return -ENOENT;
	return broker_hold(b, s, a, out);
}

int broker_hold(struct broker *b, struct session *s, struct broker_alloc *a,
                struct broker_grant *out)
{
	if (idmap_get(&s->attached, a->id))
		return -EEXIST;
	/* Attachments pin slabs: they count against the same limit. */
	if (s->alloc_count + s->attached.count + s->host_count >= b->limits.max_allocations)
		return -EMFILE;
	struct pool_slab *slab = pool_block_slab(a->block);
	struct backend_slab *bs = pool_slab_backend(slab);
	int fresh = session_hold(b, s, slab);
	if (fresh < 0)
		return -EAGAIN;
	if (idmap_put(&s->attached, a->id, a) < 0) {
		session_unhold(b, s, bs->id, fresh == 1);
		return -EAGAIN;
	}
	pool_slab_pin(slab);
	a->holders++;
	out->id = a->id;
	broker_grant_fill(s, a->block, fresh == 1, out);
	return 0;
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

uint64_t broker_device_free(const struct broker *b, int device)
{
	/* Live allocations are exactly what the policy has charged. */
	return policy_device_available(&b->policy, device);
}

void broker_alloc_room(const struct broker *b, const struct session *s, int device, uint64_t *total,
                       uint64_t *largest)
{
	uint64_t policy = policy_device_available(broker_policy_const(b, s), device);
	pool_available(b->dev[device].pool, s->uid, broker_domain_of(s), total, largest);
	if (*total > policy)
		*total = policy;
	if (*largest > *total)
		*largest = *total;
}
