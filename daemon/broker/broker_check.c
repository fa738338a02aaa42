/*
 * broker_check.c - selfcheck: walks every structure of the broker and checks
 * what it can (pools, sessions against the tables, counters, host memory,
 * orphans, exports, waits, parting slabs, leases and their carves, the
 * policy). Read-only.
 *
 * Each phase returns 0 or -EFAULT with msg naming the first inconsistency.
 */
#include <errno.h>
#include <stdio.h>

#include "broker.h"
#include "broker_internal.h"

/* What the sessions add up to, checked against the broker's own counts. */
struct check_totals {
	uint64_t allocs, instances, orphans_held, host_bytes, hosts;
	uint64_t orphan_lease_holds; /* attachments of orphan carves of orphan leases */
	unsigned sessions, waits;
};

/* The session's allocations are in the table and its, and add up to its
 * counters. */
static int check_session_allocs(const struct broker *b, const struct session *s, char *msg,
                                unsigned msg_len)
{
	const struct list *pos;
	uint64_t used = 0, n = 0;
	list_for_each(pos, &s->allocs) {
		const struct broker_alloc *a = list_entry(pos, const struct broker_alloc, link);
		if (idmap_get(&b->allocs, a->id) != a || a->inst->owner != s) {
			snprintf(msg, msg_len, "allocation %016llx misfiled",
			         (unsigned long long)a->id);
			return -EFAULT;
		}
		used += broker_alloc_charge(a);
		n++;
	}
	if (used != s->used || n != s->alloc_count) {
		snprintf(msg, msg_len, "session %llu counters: used %llu/%llu live %llu/%llu",
		         (unsigned long long)s->id, (unsigned long long)used,
		         (unsigned long long)s->used, (unsigned long long)n,
		         (unsigned long long)s->alloc_count);
		return -EFAULT;
	}
	return 0;
}

/* Each instance agrees with the table and with its policy entry. */
static int check_session_instances(const struct broker *b, const struct session *s, char *msg,
                                   unsigned msg_len)
{
	const struct list *pos;
	list_for_each(pos, &s->instances) {
		const struct broker_instance *inst =
		    list_entry(pos, const struct broker_instance, link);
		if (idmap_get(&b->instances, inst->id) != inst || inst->owner != s ||
		    inst->pol.id != inst->id || inst->pol.device != inst->device ||
		    inst->pol.used != inst->used) {
			snprintf(msg, msg_len,
			         "instance %llu disagrees with the policy or the table",
			         (unsigned long long)inst->id);
			return -EFAULT;
		}
	}
	return 0;
}

/* Attachments point at live allocations or held orphans; the slab holds
 * count one reference per claimed allocation and per attachment. */
static int check_session_holds(const struct broker *b, const struct session *s,
                               struct check_totals *t, char *msg, unsigned msg_len)
{
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
		t->orphans_held += a->orphan;
		t->orphan_lease_holds +=
		    a->orphan && broker_carve_parent(a) && broker_carve_parent(a)->orphan;
	}
	uint64_t refs = 0, want = s->attached.count;
	size_t hit = 0;
	const struct session_slab *ss;
	const struct list *pos;
	while ((ss = idmap_next(&s->held, &hit, NULL)))
		refs += ss->refs;
	list_for_each(pos, &s->allocs)
		want += !list_entry(pos, const struct broker_alloc, link)->unclaimed;
	if (refs != want) {
		snprintf(msg, msg_len, "session %llu: held refs %llu, want %llu",
		         (unsigned long long)s->id, (unsigned long long)refs,
		         (unsigned long long)want);
		return -EFAULT;
	}
	return 0;
}

/* A lease lies on 2 MiB boundaries inside its slab, and its carves inside
 * it, on granules, overlapping none of the others: live carves of its own
 * session, or orphans someone still holds. */
static int check_lease(const struct broker *b, const struct session *s,
                       const struct broker_alloc *l, char *msg, unsigned msg_len)
{
	uint64_t off = pool_block_offset(l->block), size = pool_block_size(l->block);
	if (off % BROKER_LEASE_UNIT || size % BROKER_LEASE_UNIT ||
	    off + size > pool_slab_size(pool_block_slab(l->block)) || !l->lease ||
	    broker_carve_parent(l)) {
		snprintf(msg, msg_len, "lease %016llx: %llu bytes at %llu of its slab",
		         (unsigned long long)l->id, (unsigned long long)size,
		         (unsigned long long)off);
		return -EFAULT;
	}
	const struct list *pos, *q;
	list_for_each(pos, &l->ext->carves) {
		const struct broker_alloc *c = BROKER_CARVE_OF(pos);
		const struct broker_lease_ext *ce = c->ext;
		bool filed = c->orphan ? c->holders && !c->inst
		                       : idmap_get(&b->allocs, c->id) == c && c->inst == l->inst &&
		                             c->inst->owner == s;
		bool inside = ce->parent == l && c->block == l->block && !c->lease &&
		              ce->carve_offset % POOL_GRANULE == 0 && ce->carve_size &&
		              ce->carve_offset + ce->carve_size <= size;
		for (q = pos->next; inside && q != &l->ext->carves; q = q->next) {
			const struct broker_lease_ext *d =
			    list_entry(q, const struct broker_lease_ext, carve_link);
			inside = ce->carve_offset + ce->carve_size <= d->carve_offset ||
			         d->carve_offset + d->carve_size <= ce->carve_offset;
		}
		if (!filed || !inside) {
			snprintf(msg, msg_len, "carve %016llx of lease %016llx %s",
			         (unsigned long long)c->id, (unsigned long long)l->id,
			         filed ? "outside it or overlapping another" : "misfiled");
			return -EFAULT;
		}
	}
	return 0;
}

/* Each instance's leases add up to its figures; every lease and carve of
 * the session is where it says. */
static int check_session_leases(const struct broker *b, const struct session *s, char *msg,
                                unsigned msg_len)
{
	const struct list *ipos, *pos;
	list_for_each(pos, &s->allocs) {
		const struct broker_alloc *a = list_entry(pos, const struct broker_alloc, link);
		int rc = a->lease ? check_lease(b, s, a, msg, msg_len) : 0;
		if (rc < 0)
			return rc;
		const struct broker_alloc *parent = broker_carve_parent(a);
		if (parent && (!parent->lease || parent->orphan ||
		               idmap_get(&b->allocs, parent->id) != parent)) {
			snprintf(msg, msg_len, "carve %016llx of no lease",
			         (unsigned long long)a->id);
			return -EFAULT;
		}
	}
	list_for_each(ipos, &s->instances) {
		const struct broker_instance *inst =
		    list_entry(ipos, const struct broker_instance, link);
		uint64_t leased = 0, n = 0;
		list_for_each(pos, &s->allocs) {
			const struct broker_alloc *a =
			    list_entry(pos, const struct broker_alloc, link);
			if (a->lease && a->inst == inst) {
				leased += pool_block_size(a->block);
				n++;
			}
		}
		if (leased != inst->leased || n != inst->leases || n > PROTO_MAX_LEASES ||
		    leased > inst->used) {
			snprintf(msg, msg_len,
			         "instance %llu: %llu leases of %llu bytes, counted %u of %llu",
			         (unsigned long long)inst->id, (unsigned long long)n,
			         (unsigned long long)leased, inst->leases,
			         (unsigned long long)inst->leased);
			return -EFAULT;
		}
	}
	return 0;
}

static int check_session_hosts(const struct broker *b, const struct session *s,
                               struct check_totals *t, char *msg, unsigned msg_len)
{
	const struct list *pos;
	unsigned nhost = 0;
	list_for_each(pos, &s->hosts) {
		const struct broker_host *h = list_entry(pos, const struct broker_host, link);
		/* Only allocate_queue makes unclaimed ones, labelled. */
		if (h->owner != s || idmap_get(&b->hosts, h->id) != h ||
		    (h->unclaimed && !h->label)) {
			snprintf(msg, msg_len, "host allocation %016llx misfiled",
			         (unsigned long long)h->id);
			return -EFAULT;
		}
		t->host_bytes += h->size;
		nhost++;
	}
	if (nhost != s->host_count) {
		snprintf(msg, msg_len, "session %llu: %u host allocations listed, %u counted",
		         (unsigned long long)s->id, nhost, s->host_count);
		return -EFAULT;
	}
	t->hosts += nhost;
	return 0;
}

static int check_sessions(const struct broker *b, struct check_totals *t, char *msg,
                          unsigned msg_len)
{
	const struct list *pos;
	list_for_each(pos, &b->sessions) {
		const struct session *s = list_entry(pos, const struct session, link);
		int rc = check_session_allocs(b, s, msg, msg_len);
		if (rc == 0)
			rc = check_session_instances(b, s, msg, msg_len);
		if (rc == 0)
			rc = check_session_holds(b, s, t, msg, msg_len);
		if (rc == 0)
			rc = check_session_hosts(b, s, t, msg, msg_len);
		if (rc == 0)
			rc = check_session_leases(b, s, msg, msg_len);
		if (rc < 0)
			return rc;
		t->sessions++;
		t->instances += s->instance_count;
		t->allocs += s->alloc_count;
		t->waits += s->wait_count;
	}
	return 0;
}

/* The broker's counters against what the sessions add up to. */
static int check_totals(const struct broker *b, const struct check_totals *t, char *msg,
                        unsigned msg_len)
{
	uint64_t in_policies = b->policy.count;
	const struct list *pos;
	list_for_each(pos, &b->partitions)
		in_policies += list_entry(pos, const struct broker_partition, link)->policy.count;
	if (t->allocs != b->allocs.count || t->sessions != b->session_count ||
	    t->instances != b->instance_count || t->instances != b->instances.count ||
	    t->instances != in_policies) {
		snprintf(msg, msg_len, "broker counters disagree with the sessions");
		return -EFAULT;
	}
	if (t->hosts != b->hosts.count || t->host_bytes != b->host_used) {
		snprintf(msg, msg_len,
		         "host memory: %llu allocations of %llu bytes, broker says %llu of %llu",
		         (unsigned long long)t->hosts, (unsigned long long)t->host_bytes,
		         (unsigned long long)b->hosts.count, (unsigned long long)b->host_used);
		return -EFAULT;
	}
	/* Every orphan has a holder; none without one (a leak). */
	if ((b->orphan_count == 0) != (t->orphans_held == 0) || b->orphan_count > t->orphans_held) {
		snprintf(msg, msg_len, "%llu orphans, %llu attachments to orphans",
		         (unsigned long long)b->orphan_count, (unsigned long long)t->orphans_held);
		return -EFAULT;
	}
	/* A lease outlives its session only for a carve someone holds. */
	if (b->orphan_leases > t->orphan_lease_holds) {
		snprintf(msg, msg_len, "%llu orphan leases, %llu attachments to their carves",
		         (unsigned long long)b->orphan_leases,
		         (unsigned long long)t->orphan_lease_holds);
		return -EFAULT;
	}
	return 0;
}

static int check_exports(const struct broker *b, char *msg, unsigned msg_len)
{
	const struct list *pos;
	unsigned exports = 0;
	list_for_each(pos, &b->exports) {
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
	return 0;
}

static int check_waits(const struct broker *b, unsigned waits, char *msg, unsigned msg_len)
{
	const struct list *pos;
	unsigned listed = 0;
	list_for_each(pos, &b->waits)
		listed++;
	if (listed != waits || waits != b->wait_count) {
		snprintf(msg, msg_len, "%u waits listed, sessions count %u, broker %u", listed,
		         waits, b->wait_count);
		return -EFAULT;
	}
	/* Recalls out: one per instance at most, each asking no more than it
	 * had leased when sent, and counted. */
	uint64_t out = 0;
	const struct list *ipos;
	list_for_each(pos, &b->sessions) {
		const struct session *s = list_entry(pos, const struct session, link);
		list_for_each(ipos, &s->instances) {
			const struct broker_instance *inst =
			    list_entry(ipos, const struct broker_instance, link);
			out += inst->recall_epoch != 0;
			if (inst->recall_epoch > b->recall_epoch ||
			    (!inst->recall_epoch && inst->recall_bytes)) {
				snprintf(msg, msg_len, "instance %llu: recall %llu of %llu sent",
				         (unsigned long long)inst->id,
				         (unsigned long long)inst->recall_epoch,
				         (unsigned long long)b->recall_epoch);
				return -EFAULT;
			}
		}
	}
	if (out != b->recalls_pending) {
		snprintf(msg, msg_len, "%llu recalls out, counted %llu", (unsigned long long)out,
		         (unsigned long long)b->recalls_pending);
		return -EFAULT;
	}
	return 0;
}

/* Adds the bytes of the fences of list to fenced[device]. */
static void broker_fences_sum(const struct broker_parting *list, uint64_t *fenced)
{
	for (const struct broker_parting *p = list; p; p = p->next) {
		const struct backend_slab *bs = pool_slab_backend(p->slab);
		if (p->block)
			fenced[bs->device] += pool_block_size(p->block);
	}
}

/* The parting slabs and fences of the sessions and ghosts, and the
 * retired pools: 0 or -EFAULT with msg. */
static int broker_parting_check(const struct broker *b, char *msg, unsigned msg_len)
{
	const struct list *pos, *rpos;
	uint64_t retired_total = 0, parting_retired = 0;
	uint64_t fenced[BACKEND_MAX_DEVICES] = {0};
	list_for_each(rpos, &b->retired)
		retired_total += list_entry(rpos, const struct broker_retired, link)->parting;
	list_for_each(pos, &b->sessions) {
		const struct session *s = list_entry(pos, const struct session, link);
		unsigned n = 0;
		for (const struct broker_parting *p = s->parting; p; n += !p->block, p = p->next) {
			bool current = false;
			for (int i = 0; i < b->device_count; i++)
				current |= p->pool == b->dev[i].pool;
			if (!current && !broker_retired_find(b, p->pool)) {
				snprintf(msg, msg_len, "session %llu: a parting slab of no pool",
				         (unsigned long long)s->id);
				return -EFAULT;
			}
			parting_retired += !current;
			if (p->epoch > b->invalidate_epoch) {
				snprintf(msg, msg_len,
				         "session %llu: a parting slab of a future epoch",
				         (unsigned long long)s->id);
				return -EFAULT;
			}
		}
		if (n != s->parting_count) {
			snprintf(msg, msg_len, "session %llu: %u parting slabs, counted %u",
			         (unsigned long long)s->id, n, s->parting_count);
			return -EFAULT;
		}
		broker_fences_sum(s->parting, fenced);
	}
	list_for_each(pos, &b->ghosts) {
		const struct broker_ghost *g = list_entry(pos, const struct broker_ghost, link);
		unsigned n = 0;
		for (const struct broker_parting *p = g->parting; p; n += !p->block, p = p->next)
			parting_retired += broker_retired_find(b, p->pool) != NULL;
		if (n != g->count || !g->parting) {
			snprintf(msg, msg_len, "session %llu's ghost: %u slabs, counted %u",
			         (unsigned long long)g->session, n, g->count);
			return -EFAULT;
		}
		broker_fences_sum(g->parting, fenced);
	}
	for (int i = 0; i < b->device_count; i++) {
		if (fenced[i] != b->dev[i].fenced) {
			snprintf(msg, msg_len, "device %d: %llu bytes fenced, counted %llu", i,
			         (unsigned long long)fenced[i],
			         (unsigned long long)b->dev[i].fenced);
			return -EFAULT;
		}
	}
	if (parting_retired != retired_total) {
		snprintf(msg, msg_len, "%llu slabs parting from retired pools, which count %llu",
		         (unsigned long long)parting_retired, (unsigned long long)retired_total);
		return -EFAULT;
	}
	return 0;
}

int broker_check(const struct broker *b, char *msg, unsigned msg_len)
{
	struct check_totals t = {0};
	int rc = 0;
	for (int i = 0; i < b->device_count && rc == 0; i++)
		rc = pool_check(b->dev[i].pool, msg, msg_len);
	if (rc == 0)
		rc = check_sessions(b, &t, msg, msg_len);
	if (rc == 0)
		rc = check_totals(b, &t, msg, msg_len);
	if (rc == 0)
		rc = check_exports(b, msg, msg_len);
	if (rc == 0)
		rc = check_waits(b, t.waits, msg, msg_len);
	if (rc == 0)
		rc = broker_parting_check(b, msg, msg_len);
	if (rc == 0 && b->policy.device_count)
		rc = policy_check(&b->policy, msg, msg_len);
	if (rc == 0)
		rc = broker_partitions_check(b, msg, msg_len);
	return rc;
}
