/*
 * broker_partition.c - partitions: memory an administrator takes out of the
 * devices for one owner (a batch job under Slurm), guaranteed.
 *
 * Each partition has a policy of its own whose device totals are its sizes,
 * so inside it everything the VRAM policy does (proportions, the auto pool,
 * active/passive, stream groups, chunking) is relative to the partition. The
 * broker's policy keeps the memory the partitions leave: its device totals
 * are the devices' memory minus the partitions' sizes. Creating a partition
 * is refused unless every device can still guarantee it: the partitions and
 * what sessions outside them hold already must fit the device.
 *
 * The pools stay per device and shared, but a partition's sessions make
 * their slabs in a domain of their own (pool.h), which the pool guarantees
 * the partition's size: the policy bounds what a partition uses, the pool
 * what everyone's slabs take, so that others' slabs (whole, however little
 * of them is used) never eat into a partition's size. Creating one asks
 * the same of the slabs: partitions and the slabs outside them must fit.
 * Allocations do not cross a partition's border (attach and open refuse
 * it), which lets destroying one take back everything its sessions hold.
 */
#include "broker.h"
#include "broker_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "log.h"

bool broker_partition_name_valid(const char *name)
{
	size_t n = name ? strlen(name) : 0;
	if (n < 1 || n > PROTO_MAX_NAME)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-'))
			return false;
	}
	return true;
}

struct broker_partition *broker_partition_find(struct broker *b, const char *name)
{
	struct list *pos;
	list_for_each(pos, &b->partitions) {
		struct broker_partition *p = list_entry(pos, struct broker_partition, link);
		if (strcmp(p->name, name) == 0)
			return p;
	}
	return NULL;
}

uint64_t broker_partitions_size(const struct broker *b, int device)
{
	uint64_t sum = 0;
	const struct list *pos;
	list_for_each(pos, &b->partitions)
		sum += list_entry(pos, const struct broker_partition, link)->size[device];
	return sum;
}

uint64_t broker_partition_used(const struct broker_partition *p, int device)
{
	return p->policy.dev[device].used;
}

/* The broker's policy gets what the partitions leave of each device. */
static void broker_partitions_apply(struct broker *b)
{
	for (int i = 0; i < b->device_count; i++) {
		uint64_t taken = broker_partitions_size(b, i);
		uint64_t total = b->dev[i].info.total;
		policy_set_total(&b->policy, i, total > taken ? total - taken : 0);
	}
}

/* What the broker hands out on a device: its memory less its reserve (in
 * use at start, clients' contexts), never promised to a partition, nor
 * taken by slabs. */
static uint64_t broker_device_capacity(const struct broker *b, int device)
{
	uint64_t total = b->dev[device].info.total, reserve = b->policy.dev[device].reserve;
	return total > reserve ? total - reserve : 0;
}

int broker_pool_guard(struct broker *b, int device, struct pool *pool)
{
	int rc = pool_set_capacity(pool, broker_device_capacity(b, device));
	struct list *pos;
	list_for_each(pos, &b->partitions) {
		const struct broker_partition *p = list_entry(pos, struct broker_partition, link);
		if (rc == 0 && p->size[device])
			rc = pool_set_guarantee(pool, p->domain, p->size[device]);
	}
	return rc;
}

/* Ends p's guarantees on the first n devices (all: b->device_count). */
static void broker_partition_unguard(struct broker *b, const struct broker_partition *p, int n)
{
	for (int i = 0; i < n; i++)
		if (p->size[i])
			pool_set_guarantee(b->dev[i].pool, p->domain, 0);
}

/* Whether every device can guarantee size[] on top of what it already
 * gives: 0, or -ENOSPC with *why. What counts is slabs: each partition
 * takes its size or, where they are more, its slabs; outside partitions,
 * every slab (orphans', evicted and destroyed sessions' too). */
static int broker_partition_fits(struct broker *b, const uint64_t *size,
                                 struct broker_partition_refusal *why)
{
	for (int i = 0; i < b->device_count; i++) {
		if (!size[i])
			continue;
		struct pool *pool = b->dev[i].pool;
		/* Idle slabs go back on demand: not a reason to refuse. */
		if (pool_room(pool, 0) < size[i])
			pool_trim(pool, 0, true);
		uint64_t available = pool_room(pool, 0);
		if (size[i] <= available)
			continue;
		struct pool_stats st;
		pool_get_stats(pool, &st);
		uint64_t taken = 0, inside = 0;
		const struct list *pos;
		list_for_each(pos, &b->partitions) {
			const struct broker_partition *p =
			    list_entry(pos, const struct broker_partition, link);
			uint64_t slabs = pool_domain_reserved(pool, p->domain);
			inside += slabs;
			taken += slabs > p->size[i] ? slabs : p->size[i];
		}
		uint64_t capacity = broker_device_capacity(b, i);
		uint64_t used = st.reserved - inside;
		*why = (struct broker_partition_refusal){.device = i,
		                                         .asked = size[i],
		                                         .available = available,
		                                         .capacity = capacity,
		                                         .partitions = taken,
		                                         .used = used};
		return -ENOSPC;
	}
	return 0;
}

int broker_partition_create(struct broker *b, const char *name, uid_t uid, const uint64_t *size,
                            struct broker_partition **out, struct broker_partition_refusal *why)
{
	bool any = false;
	for (int i = 0; i < BACKEND_MAX_DEVICES; i++) {
		if (size[i] && i >= b->device_count)
			return -EINVAL;
		any |= size[i] != 0;
	}
	if (!any || !broker_partition_name_valid(name))
		return -EINVAL;
	if (broker_partition_find(b, name))
		return -EEXIST;
	if (b->partition_count >= BROKER_MAX_PARTITIONS)
		return -EMFILE;
	int rc = broker_partition_fits(b, size, why);
	if (rc < 0)
		return rc;
	struct broker_partition *p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	if (getrandom(p->token, sizeof(p->token), 0) != (ssize_t)sizeof(p->token)) {
		free(p);
		return -EIO;
	}
	/* A domain of its own: ids are not reused, so it is never one whose
	 * slabs are still in a pool (a destroyed partition's, until its
	 * processes exit). */
	p->domain = ++b->last_domain ? b->last_domain : ++b->last_domain;
	memcpy(p->size, size, sizeof(p->size));
	for (int i = 0; i < b->device_count; i++) {
		/* It fits (above): only host memory can fail here. */
		rc = p->size[i] ? pool_set_guarantee(b->dev[i].pool, p->domain, p->size[i]) : 0;
		if (rc < 0) {
			broker_partition_unguard(b, p, i);
			free(p);
			return rc == -ENOSPC ? -ENOMEM : rc;
		}
	}
	/* One mode for the daemon; the rest of the policy's settings too. */
	struct policy_config pc = b->policy.cfg;
	uint64_t totals[BACKEND_MAX_DEVICES] = {0};
	memcpy(totals, size, b->device_count * sizeof(*size));
	rc = policy_init(&p->policy, &pc, b->device_count, totals);
	if (rc < 0) {
		broker_partition_unguard(b, p, b->device_count);
		free(p);
		return rc;
	}
	snprintf(p->name, sizeof(p->name), "%s", name);
	p->uid = uid;
	p->created = time(NULL);
	list_insert_tail(&b->partitions, &p->link);
	b->partition_count++;
	broker_partitions_apply(b);
	*out = p;
	/* Sessions outside have less to share now. */
	broker_policy_changed(b);
	return 0;
}

static void broker_partition_free(struct broker *b, struct broker_partition *p)
{
	/* What its sessions' slabs still hold (until their processes exit)
	 * stays counted in the pools, as slabs of no partition. */
	broker_partition_unguard(b, p, b->device_count);
	list_remove(&p->link);
	b->partition_count--;
	policy_finish(&p->policy);
	/* The token must not outlive its partition in freed memory. */
	explicit_bzero(p->token, sizeof(p->token));
	free(p);
}

void broker_partition_destroy(struct broker *b, struct broker_partition *p, unsigned *sessions,
                              uint64_t *reclaimed)
{
	struct list *pos;
	*sessions = 0;
	*reclaimed = 0;
	list_for_each(pos, &b->sessions) {
		struct session *s = list_entry(pos, struct session, link);
		if (s->part != p)
			continue;
		(*sessions)++;
		*reclaimed += s->used;
		/* Its process may still have its slabs mapped: they are kept
		 * from the backend until it has exited, as for an eviction. */
		s->evicted = true;
		broker_waits_drop(b, s);
		broker_session_strip(b, s);
		s->ended = true;
	}
	/* Only now: an attachment's orphan is released with its last holder,
	 * through the holder's policy, which is still the partition's. */
	list_for_each(pos, &b->sessions) {
		struct session *s = list_entry(pos, struct session, link);
		if (s->part == p) {
			s->part = NULL;
			p->sessions--;
		}
	}
	log_info("partition %s destroyed: %u sessions ended, %llu bytes reclaimed", p->name,
	         *sessions, (unsigned long long)*reclaimed);
	broker_partition_free(b, p);
	broker_partitions_apply(b);
	broker_policy_changed(b);
}

void broker_partitions_drop(struct broker *b)
{
	struct list *pos, *tmp;
	list_for_each_safe(pos, tmp, &b->partitions)
		broker_partition_free(b, list_entry(pos, struct broker_partition, link));
}

int broker_partition_join(struct broker *b, struct session *s,
                          const unsigned char token[BROKER_TOKEN_BYTES])
{
	struct broker_partition *found = NULL;
	struct list *pos;
	list_for_each(pos, &b->partitions) {
		struct broker_partition *p = list_entry(pos, struct broker_partition, link);
		/* Compared in constant time: how far a guess matches is not
		 * measurable. */
		unsigned char diff = 0;
		for (int i = 0; i < BROKER_TOKEN_BYTES; i++)
			diff |= p->token[i] ^ token[i];
		if (!diff)
			found = p;
	}
	if (!found || found->uid != s->uid || s->part || s->instance_count)
		return -EPERM;
	s->part = found;
	found->sessions++;
	return 0;
}

int broker_partitions_check(const struct broker *b, char *msg, unsigned msg_len)
{
	const struct list *pos, *spos;
	unsigned count = 0;
	list_for_each(pos, &b->partitions) {
		const struct broker_partition *p =
		    list_entry(pos, const struct broker_partition, link);
		unsigned sessions = 0;
		count++;
		/* Its slabs are its own: a domain no other partition has. */
		const struct list *qpos;
		list_for_each(qpos, &b->partitions) {
			const struct broker_partition *q =
			    list_entry(qpos, const struct broker_partition, link);
			if (!p->domain || (q != p && q->domain == p->domain)) {
				snprintf(msg, msg_len, "partition %s: domain %u shared or unknown",
				         p->name, p->domain);
				return -EFAULT;
			}
		}
		list_for_each(spos, &b->sessions)
			sessions += list_entry(spos, const struct session, link)->part == p;
		if (sessions != p->sessions) {
			snprintf(msg, msg_len, "partition %s: %u sessions, counts %u", p->name,
			         sessions, p->sessions);
			return -EFAULT;
		}
		int rc = policy_check(&p->policy, msg, msg_len);
		if (rc < 0)
			return rc;
	}
	if (count != b->partition_count) {
		snprintf(msg, msg_len, "%u partitions listed, broker counts %u", count,
		         b->partition_count);
		return -EFAULT;
	}
	for (int i = 0; i < b->device_count; i++) {
		uint64_t taken = broker_partitions_size(b, i), total = b->dev[i].info.total;
		if (taken > total || b->policy.dev[i].total != total - taken) {
			snprintf(msg, msg_len,
			         "device %d: partitions take %llu of %llu, policy has %llu", i,
			         (unsigned long long)taken, (unsigned long long)total,
			         (unsigned long long)b->policy.dev[i].total);
			return -EFAULT;
		}
	}
	return 0;
}
