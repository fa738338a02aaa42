/*
 * broker.c - devices, sessions, instances and allocations.
 *
 * Ownership: the broker owns sessions; a session owns its instances and
 * allocations; an allocation owns its pool block. The allocation table maps
 * ids to allocations for the whole daemon so that free and attach are O(1).
 *
 * A session "holds" a slab while it has allocations or attachments in it.
 * The client library keeps the same count, so both sides know without an
 * extra message when the slab's handle (and sim descriptor) must be sent again.
 */
#include "broker.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "log.h"

struct session_slab {
	uint64_t refs;
};

void broker_limits_default(struct broker_limits *limits)
{
	limits->slab_size = POOL_DEFAULT_SLAB;
	limits->max_instances = 64;
	limits->max_allocations = 65536;
	limits->write_high_water = 4u << 20;
	limits->hello_timeout_ms = 10000;
	limits->max_clients = 1024;
}

/* The pool reaches the backend through its device's entry. */
static int broker_pool_create_slab(void *ctx, uint64_t size, uint32_t uid, void **slab)
{
	struct broker_device *dev = ctx;
	struct backend_slab *bs;
	int rc = dev->backend->ops->slab_create(dev->backend, dev->index, size, uid, &bs);
	if (rc < 0)
		return rc;
	log_debug("device %d: new slab %llu, %llu bytes, uid %u", dev->index,
	          (unsigned long long)bs->id, (unsigned long long)size, uid);
	*slab = bs;
	return 0;
}

static void broker_pool_destroy_slab(void *ctx, void *slab)
{
	struct broker_device *dev = ctx;
	dev->backend->ops->slab_destroy(dev->backend, slab);
}

static const struct pool_slab_ops broker_pool_ops = {
    .create = broker_pool_create_slab,
    .destroy = broker_pool_destroy_slab,
};

int broker_create(struct backend *backend, const struct broker_limits *limits, struct broker **out)
{
	struct broker *b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->backend = backend;
	b->limits = *limits;
	list_init(&b->sessions);
	idmap_init(&b->allocs);
	b->next_session_id = 1;
	b->next_instance_id = 1;
	b->started = time(NULL);
	struct pool_config pcfg = {.slab_size = limits->slab_size, .keep_empty = 1};
	int rc = 0;
	for (int i = 0; i < backend->device_count; i++) {
		struct broker_device *dev = &b->dev[i];
		dev->index = i;
		dev->backend = backend;
		rc = backend->ops->device_info(backend, i, &dev->info);
		if (rc < 0)
			break;
		dev->pool = pool_create(&pcfg, &broker_pool_ops, dev);
		if (!dev->pool) {
			rc = -EINVAL;
			break;
		}
		b->device_count = i + 1;
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
	struct list *pos, *tmp;
	list_for_each_safe(pos, tmp, &b->sessions)
	{
		broker_session_close(b, list_entry(pos, struct session, link));
	}
	for (int i = 0; i < b->device_count; i++)
		pool_destroy(b->dev[i].pool);
	idmap_finish(&b->allocs);
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
	/* The server refines this with the peer's groups. */
	s->admin = uid == 0;
	s->connected = time(NULL);
	list_init(&s->instances);
	list_init(&s->allocs);
	idmap_init(&s->held);
	idmap_init(&s->attached);
	list_insert_tail(&b->sessions, &s->link);
	b->session_count++;
	return s;
}

/* Counts one more allocation or attachment of s in slab. Returns 1 when the
 * session did not hold the slab before (the client must be given it), 0, or
 * -ENOMEM. */
static int session_hold(struct session *s, uint64_t slab_id)
{
	struct session_slab *ss = idmap_get(&s->held, slab_id);
	if (ss) {
		ss->refs++;
		return 0;
	}
	ss = malloc(sizeof(*ss));
	if (!ss)
		return -ENOMEM;
	ss->refs = 1;
	if (idmap_put(&s->held, slab_id, ss) < 0) {
		free(ss);
		return -ENOMEM;
	}
	return 1;
}

static void session_release(struct session *s, uint64_t slab_id)
{
	struct session_slab *ss = idmap_get(&s->held, slab_id);
	if (ss && --ss->refs == 0)
		free(idmap_remove(&s->held, slab_id));
}

static bool broker_uid_connected(const struct broker *b, uid_t uid)
{
	const struct list *pos;
	for (pos = b->sessions.next; pos != &b->sessions; pos = pos->next) {
		if (list_entry(pos, const struct session, link)->uid == uid)
			return true;
	}
	return false;
}

static void broker_alloc_release(struct broker *b, struct session *s, struct broker_alloc *a)
{
	struct pool_slab *slab = pool_block_slab(a->block);
	struct backend_slab *bs = pool_slab_backend(slab);
	uint64_t size = pool_block_size(a->block);
	int device = a->inst->device;
	idmap_remove(&b->allocs, a->id);
	list_remove(&a->link);
	session_release(s, bs->id);
	a->inst->used -= size;
	a->inst->live--;
	s->used -= size;
	s->alloc_count--;
	/* Last: this may hand the slab back to the backend. */
	pool_free(b->dev[device].pool, a->block);
	free(a);
}

/* Drops what one attachment holds: the session's hold on the slab and the
 * pin. The attachment map entry is the caller's to remove. */
static void broker_unpin(struct broker *b, struct session *s, struct pool_slab *slab)
{
	struct backend_slab *bs = pool_slab_backend(slab);
	int device = bs->device;
	session_release(s, bs->id);
	/* Last: this may hand the slab back to the backend. */
	pool_slab_unpin(b->dev[device].pool, slab);
}

void broker_session_close(struct broker *b, struct session *s)
{
	struct list *pos, *tmp;
	list_for_each_safe(pos, tmp, &s->allocs)
	{
		broker_alloc_release(b, s, list_entry(pos, struct broker_alloc, link));
	}
	size_t it = 0;
	struct pool_slab *slab;
	while ((slab = idmap_next(&s->attached, &it, NULL)))
		broker_unpin(b, s, slab);
	list_for_each_safe(pos, tmp, &s->instances)
	{
		struct broker_instance *inst = list_entry(pos, struct broker_instance, link);
		list_remove(&inst->link);
		free(inst);
		b->instance_count--;
	}
	list_remove(&s->link);
	b->session_count--;
	/* A user with no connection left gets its cached slabs returned. */
	if (!broker_uid_connected(b, s->uid)) {
		for (int i = 0; i < b->device_count; i++)
			pool_trim(b->dev[i].pool, s->uid, false);
	}
	idmap_finish(&s->held);
	idmap_finish(&s->attached);
	free(s);
}

int broker_register(struct broker *b, struct session *s, const char *name, int device,
                    double proportion, const char *group, struct broker_instance **out)
{
	if (device < 0 || device >= b->device_count)
		return -ENODEV;
	if (s->instance_count >= b->limits.max_instances)
		return -EMFILE;
	struct broker_instance *inst = calloc(1, sizeof(*inst));
	if (!inst)
		return -ENOMEM;
	inst->id = b->next_instance_id++;
	inst->owner = s;
	inst->device = device;
	inst->proportion = proportion;
	snprintf(inst->name, sizeof(inst->name), "%s", name);
	snprintf(inst->group, sizeof(inst->group), "%s", group ? group : "default");
	list_insert_tail(&s->instances, &inst->link);
	s->instance_count++;
	b->instance_count++;
	*out = inst;
	return 0;
}

struct broker_instance *broker_instance_find(struct session *s, uint64_t instance)
{
	struct list *pos, *tmp;
	list_for_each_safe(pos, tmp, &s->instances)
	{
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
	list_remove(&inst->link);
	s->instance_count--;
	b->instance_count--;
	free(inst);
	return 0;
}

/* A fresh, unused, non-zero random id. Buffered: one getrandom() per 32. */
static int broker_new_id(struct broker *b, uint64_t *out)
{
	for (int tries = 0; tries < 8; tries++) {
		if (b->rand_left == 0) {
			if (getrandom(b->rand, sizeof(b->rand), 0) != (ssize_t)sizeof(b->rand))
				return -EIO;
			b->rand_left = sizeof(b->rand) / sizeof(b->rand[0]);
		}
		uint64_t id = b->rand[--b->rand_left];
		if (id && !idmap_get(&b->allocs, id)) {
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
	(void)s;
	out->device = bs->device;
	out->slab_id = bs->id;
	out->slab_size = bs->size;
	out->offset = pool_block_offset(block);
	out->size = pool_block_size(block);
	out->handle = fresh ? bs->handle : NULL;
	out->fd = fresh ? bs->fd : -1;
}

int broker_alloc(struct broker *b, struct session *s, uint64_t instance, uint64_t size,
                 uint64_t align, struct broker_grant *out)
{
	if (b->stopping)
		return -ESHUTDOWN;
	struct broker_instance *inst = broker_instance_find(s, instance);
	if (!inst)
		return -ENOENT;
	if (s->alloc_count + s->attached.count >= b->limits.max_allocations)
		return -EMFILE;
	struct broker_alloc *a = calloc(1, sizeof(*a));
	if (!a)
		return -EAGAIN;
	int rc = broker_new_id(b, &a->id);
	if (rc < 0)
		goto fail;
	struct pool *pool = b->dev[inst->device].pool;
	rc = pool_alloc(pool, s->uid, size, align, &a->block);
	if (rc < 0)
		goto fail;
	struct backend_slab *bs = pool_slab_backend(pool_block_slab(a->block));
	int fresh = session_hold(s, bs->id);
	if (fresh < 0 || idmap_put(&b->allocs, a->id, a) < 0) {
		if (fresh >= 0)
			session_release(s, bs->id);
		pool_free(pool, a->block);
		rc = -EAGAIN;
		goto fail;
	}
	a->inst = inst;
	list_insert_tail(&s->allocs, &a->link);
	uint64_t bytes = pool_block_size(a->block);
	inst->used += bytes;
	inst->live++;
	s->used += bytes;
	s->alloc_count++;
	out->id = a->id;
	broker_grant_fill(s, a->block, fresh == 1, out);
	return 0;
fail:
	free(a);
	return rc;
}

/* An allocation this session owns; NULL for unknown and foreign ids alike. */
static struct broker_alloc *broker_alloc_owned(struct broker *b, struct session *s, uint64_t id)
{
	struct broker_alloc *a = idmap_get(&b->allocs, id);
	return a && a->inst->owner == s ? a : NULL;
}

int broker_free(struct broker *b, struct session *s, uint64_t id)
{
	struct broker_alloc *a = broker_alloc_owned(b, s, id);
	if (!a)
		return -ENOENT;
	broker_alloc_release(b, s, a);
	return 0;
}

int broker_attach(struct broker *b, struct session *s, uint64_t id, struct broker_grant *out)
{
	struct broker_alloc *a = idmap_get(&b->allocs, id);
	if (!a || a->inst->owner->uid != s->uid)
		return -ENOENT;
	if (idmap_get(&s->attached, id))
		return -EEXIST;
	/* Attachments pin slabs: they count against the same limit. */
	if (s->alloc_count + s->attached.count >= b->limits.max_allocations)
		return -EMFILE;
	struct pool_slab *slab = pool_block_slab(a->block);
	struct backend_slab *bs = pool_slab_backend(slab);
	int fresh = session_hold(s, bs->id);
	if (fresh < 0)
		return -EAGAIN;
	if (idmap_put(&s->attached, id, slab) < 0) {
		session_release(s, bs->id);
		return -EAGAIN;
	}
	pool_slab_pin(slab);
	out->id = id;
	broker_grant_fill(s, a->block, fresh == 1, out);
	return 0;
}

int broker_detach(struct broker *b, struct session *s, uint64_t id)
{
	struct pool_slab *slab = idmap_remove(&s->attached, id);
	if (!slab)
		return -ENOENT;
	broker_unpin(b, s, slab);
	return 0;
}

void broker_set_sender(struct broker *b, broker_send_fn fn, void *ctx)
{
	b->send = fn;
	b->send_ctx = ctx;
}

void broker_send(struct broker *b, struct session *s, char *frame, size_t len, int fd)
{
	if (b->send && frame)
		b->send(b->send_ctx, s, frame, len, fd);
	else
		free(frame);
}

void broker_send_event(struct broker *b, struct session *s, const char *name, cJSON *data)
{
	size_t len;
	char *frame = proto_encode_event(name, data, &len);
	if (!frame)
		log_warn("session %llu: event %s dropped: out of memory", (unsigned long long)s->id,
		         name);
	broker_send(b, s, frame, len, -1);
}

uint64_t broker_device_free(const struct broker *b, int device)
{
	struct pool_stats st;
	pool_get_stats(b->dev[device].pool, &st);
	uint64_t total = b->dev[device].info.total;
	return st.used < total ? total - st.used : 0;
}

int broker_check(const struct broker *b, char *msg, unsigned msg_len)
{
	uint64_t allocs = 0, instances = 0;
	unsigned sessions = 0;
	for (int i = 0; i < b->device_count; i++) {
		int rc = pool_check(b->dev[i].pool, msg, msg_len);
		if (rc < 0)
			return rc;
	}
	const struct list *pos, *ipos;
	for (pos = b->sessions.next; pos != &b->sessions; pos = pos->next) {
		const struct session *s = list_entry(pos, const struct session, link);
		uint64_t used = 0, n = 0;
		sessions++;
		instances += s->instance_count;
		for (ipos = s->allocs.next; ipos != &s->allocs; ipos = ipos->next) {
			const struct broker_alloc *a =
			    list_entry(ipos, const struct broker_alloc, link);
			if (idmap_get(&b->allocs, a->id) != a || a->inst->owner != s) {
				snprintf(msg, msg_len, "allocation %016llx misfiled",
				         (unsigned long long)a->id);
				return -EFAULT;
			}
			used += pool_block_size(a->block);
			n++;
		}
		if (used != s->used || n != s->alloc_count) {
			snprintf(msg, msg_len,
			         "session %llu counters: used %llu/%llu live %llu/%llu",
			         (unsigned long long)s->id, (unsigned long long)used,
			         (unsigned long long)s->used, (unsigned long long)n,
			         (unsigned long long)s->alloc_count);
			return -EFAULT;
		}
		allocs += n;
	}
	if (allocs != b->allocs.count || sessions != b->session_count ||
	    instances != b->instance_count) {
		snprintf(msg, msg_len, "broker counters disagree with the sessions");
		return -EFAULT;
	}
	return 0;
}
