/*
 * broker_check.c - selfcheck: walks every structure of the broker and checks
 * what it can (pools, sessions against the tables, counters, host memory,
 * orphans, exports, waits, parting slabs, the policy). Read-only.
 */
#include <errno.h>
#include <stdio.h>

#include "broker.h"
#include "broker_internal.h"

int broker_check(const struct broker *b, char *msg, unsigned msg_len)
{
	uint64_t allocs = 0, instances = 0, orphans_held = 0, host_bytes = 0, hosts = 0;
	unsigned sessions = 0, waits = 0, listed = 0, exports = 0;
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
		for (ipos = s->instances.next; ipos != &s->instances; ipos = ipos->next) {
			const struct broker_instance *inst =
			    list_entry(ipos, const struct broker_instance, link);
			if (idmap_get(&b->instances, inst->id) != inst || inst->owner != s ||
			    inst->pol.id != inst->id || inst->pol.device != inst->device ||
			    inst->pol.used != inst->used) {
				snprintf(msg, msg_len,
				         "instance %llu disagrees with the policy or the table",
				         (unsigned long long)inst->id);
				return -EFAULT;
			}
		}
		size_t it = 0;
		const struct broker_alloc *a;
		uint64_t id;
		while ((a = idmap_next(&s->attached, &it, &id))) {
			if (a->id != id || !a->holders ||
			    (a->orphan ? a->inst != NULL : idmap_get(&b->allocs, id) != a)) {
				snprintf(msg, msg_len, "attachment %016llx misfiled",
				         (unsigned long long)id);
				return -EFAULT;
			}
			orphans_held += a->orphan;
		}
		{
			uint64_t refs = 0, want = s->attached.count;
			size_t hit = 0;
			const struct session_slab *ss;
			while ((ss = idmap_next(&s->held, &hit, NULL)))
				refs += ss->refs;
			for (ipos = s->allocs.next; ipos != &s->allocs; ipos = ipos->next)
				want +=
				    !list_entry(ipos, const struct broker_alloc, link)->unclaimed;
			if (refs != want) {
				snprintf(msg, msg_len, "session %llu: held refs %llu, want %llu",
				         (unsigned long long)s->id, (unsigned long long)refs,
				         (unsigned long long)want);
				return -EFAULT;
			}
		}
		unsigned nhost = 0;
		for (ipos = s->hosts.next; ipos != &s->hosts; ipos = ipos->next) {
			const struct broker_host *h =
			    list_entry(ipos, const struct broker_host, link);
			/* Only allocate_queue makes unclaimed ones, labelled. */
			if (h->owner != s || idmap_get(&b->hosts, h->id) != h ||
			    (h->unclaimed && !h->label)) {
				snprintf(msg, msg_len, "host allocation %016llx misfiled",
				         (unsigned long long)h->id);
				return -EFAULT;
			}
			host_bytes += h->size;
			nhost++;
		}
		if (nhost != s->host_count) {
			snprintf(msg, msg_len,
			         "session %llu: %u host allocations listed, %u counted",
			         (unsigned long long)s->id, nhost, s->host_count);
			return -EFAULT;
		}
		hosts += nhost;
		waits += s->wait_count;
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
	    instances != b->instance_count || instances != b->instances.count ||
	    instances != b->policy.count) {
		snprintf(msg, msg_len, "broker counters disagree with the sessions");
		return -EFAULT;
	}
	if (hosts != b->hosts.count || host_bytes != b->host_used) {
		snprintf(msg, msg_len,
		         "host memory: %llu allocations of %llu bytes, broker says %llu of %llu",
		         (unsigned long long)hosts, (unsigned long long)host_bytes,
		         (unsigned long long)b->hosts.count, (unsigned long long)b->host_used);
		return -EFAULT;
	}
	/* Every orphan has a holder; none without one (a leak). */
	if ((b->orphan_count == 0) != (orphans_held == 0) || b->orphan_count > orphans_held) {
		snprintf(msg, msg_len, "%llu orphans, %llu attachments to orphans",
		         (unsigned long long)b->orphan_count, (unsigned long long)orphans_held);
		return -EFAULT;
	}
	for (pos = b->exports.next; pos != &b->exports; pos = pos->next) {
		const struct broker_export *e = list_entry(pos, const struct broker_export, link);
		if (idmap_get(&b->allocs, e->alloc->id) != e->alloc || !e->alloc->exported ||
		    e->alloc->inst->owner != e->owner) {
			snprintf(msg, msg_len, "export %s misfiled", e->name);
			return -EFAULT;
		}
		exports++;
	}
	if (exports != b->export_count) {
		snprintf(msg, msg_len, "%u exports listed, broker counts %u", exports,
		         b->export_count);
		return -EFAULT;
	}
	for (pos = b->waits.next; pos != &b->waits; pos = pos->next)
		listed++;
	if (listed != waits || waits != b->wait_count) {
		snprintf(msg, msg_len, "%u waits listed, sessions count %u, broker %u", listed,
		         waits, b->wait_count);
		return -EFAULT;
	}
	int rc = broker_parting_check(b, msg, msg_len);
	if (rc < 0)
		return rc;
	return b->policy.device_count ? policy_check(&b->policy, msg, msg_len) : 0;
}
