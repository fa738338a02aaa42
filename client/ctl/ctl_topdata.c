/*
 * ctl_topdata.c - the snapshot, bars, order and events of `gpubrokerctl
 * top` (ctl_topdata.h), from the daemon's answers; no I/O.
 */
#include "ctl_topdata.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- reading the answers -------------------------------------------------------- */

/* A figure the daemon sends as a decimal string (64-bit safe) or a number. */
static uint64_t top_u64(const cJSON *obj, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);

	if (cJSON_IsString(v) && v->valuestring)
		return strtoull(v->valuestring, NULL, 10);
	if (cJSON_IsNumber(v) && v->valuedouble > 0)
		return (uint64_t)v->valuedouble;
	return 0;
}

static long top_long(const cJSON *obj, const char *key, long dflt)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);

	return cJSON_IsNumber(v) ? (long)v->valuedouble : dflt;
}

static void top_str(const cJSON *obj, const char *key, char *out, size_t len)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);

	snprintf(out, len, "%s", cJSON_IsString(v) && v->valuestring ? v->valuestring : "-");
}

static const cJSON *top_array(const cJSON *obj, const char *key)
{
	const cJSON *v = obj ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;

	return cJSON_IsArray(v) ? v : NULL;
}

static struct top_device *top_device_of(struct top_snapshot *s, int device)
{
	for (size_t i = 0; i < s->ndevices; i++)
		if (s->devices[i].device == device)
			return &s->devices[i];
	return NULL;
}

static int top_fill_devices(struct top_snapshot *s, const cJSON *status, const cJSON *stats)
{
	const cJSON *devs = top_array(status, "devices"), *d;

	if (!devs)
		return -EINVAL;
	cJSON_ArrayForEach(d, devs)
	{
		if (s->ndevices == TOP_MAX_DEVICES)
			break;
		struct top_device *td = &s->devices[s->ndevices++];
		td->device = (int)top_long(d, "device", 0);
		top_str(d, "name", td->name, sizeof(td->name));
		td->total = top_u64(d, "total");
		td->used = top_u64(d, "used");
		td->reserved = top_u64(d, "reserved");
		td->fenced = top_u64(d, "fenced");
	}
	cJSON_ArrayForEach(d, top_array(stats, "devices"))
	{
		struct top_device *td = top_device_of(s, (int)top_long(d, "device", -1));
		if (!td)
			continue;
		td->leased = top_u64(d, "leased");
		td->in_use = top_u64(d, "in_use");
		td->ooms = top_u64(d, "ooms");
	}
	for (size_t i = 0; i < s->ndevices; i++) {
		struct top_device *td = &s->devices[i];
		uint64_t leased_free = td->leased > td->in_use ? td->leased - td->in_use : 0;
		/* used counts leases whole and fenced ranges: take both out. */
		uint64_t used = td->used;
		leased_free = leased_free < used ? leased_free : used;
		used -= leased_free;
		uint64_t fenced = td->fenced < used ? td->fenced : used;
		used -= fenced;
		uint64_t held = td->used; /* allocated, as the pools see it */
		uint64_t kept = td->reserved > held ? td->reserved - held : 0;
		uint64_t taken = held + kept;
		td->part[TOP_IN_USE] = used;
		td->part[TOP_LEASED_FREE] = leased_free;
		td->part[TOP_FENCED] = fenced;
		td->part[TOP_KEPT] = kept;
		td->part[TOP_FREE] = td->total > taken ? td->total - taken : 0;
	}
	return 0;
}

static void top_fill_instances(struct top_snapshot *s, const cJSON *policy)
{
	const cJSON *in;

	cJSON_ArrayForEach(in, top_array(policy, "instances"))
	{
		if (s->ninstances == TOP_MAX_INSTANCES)
			break;
		struct top_instance *ti = &s->instances[s->ninstances++];
		char session[24];
		top_str(in, "instance", ti->id, sizeof(ti->id));
		top_str(in, "name", ti->name, sizeof(ti->name));
		top_str(in, "session", session, sizeof(session));
		ti->pid = top_long(in, "pid", -1);
		ti->device = (int)top_long(in, "device", 0);
		const cJSON *p = cJSON_GetObjectItemCaseSensitive(in, "proportion");
		ti->proportion = cJSON_IsNumber(p) ? p->valuedouble : -1;
		ti->cap = top_u64(in, "cap");
		ti->used = top_u64(in, "used");
		ti->recalls = top_u64(in, "recalls_sent");
		/* The client row takes its first instance's pool. */
		for (size_t i = 0; i < s->nclients; i++) {
			struct top_client *c = &s->clients[i];
			if (strcmp(c->session, session) == 0 && c->proportion == -2)
				c->proportion = ti->proportion;
		}
	}
	for (size_t i = 0; i < s->nclients; i++)
		if (s->clients[i].proportion == -2) /* no instance */
			s->clients[i].proportion = -3;
}

static void top_fill_partitions(struct top_snapshot *s, const cJSON *partitions)
{
	const cJSON *p, *d;

	cJSON_ArrayForEach(p, top_array(partitions, "partitions"))
	{
		cJSON_ArrayForEach(d, top_array(p, "devices"))
		{
			if (s->npartitions == TOP_MAX_PARTITIONS)
				return;
			struct top_partition *tp = &s->partitions[s->npartitions++];
			top_str(p, "name", tp->name, sizeof(tp->name));
			tp->uid = top_long(p, "uid", -1);
			tp->device = (int)top_long(d, "device", 0);
			tp->size = top_u64(d, "size");
			tp->used = top_u64(d, "used");
		}
	}
}

int top_snapshot_fill(struct top_snapshot *s, const cJSON *status, const cJSON *stats,
                      const cJSON *clients, const cJSON *policy, const cJSON *partitions)
{
	const cJSON *c, *rows = top_array(clients, "clients");

	memset(s, 0, sizeof(*s));
	if (!status || !rows)
		return -EINVAL;
	top_str(status, "mode", s->mode, sizeof(s->mode));
	s->pid = top_long(status, "pid", 0);
	s->uptime_s = (uint64_t)top_long(status, "uptime_s", 0);
	s->recalls_sent = top_u64(stats, "recalls_sent");
	s->recalls_timed_out = top_u64(stats, "recalls_timed_out");
	s->invalidations = top_u64(status, "invalidations");
	s->evictions = top_u64(status, "evictions");
	if (top_fill_devices(s, status, stats) < 0)
		return -EINVAL;
	cJSON_ArrayForEach(c, rows)
	{
		if (s->nclients == TOP_MAX_CLIENTS)
			break;
		struct top_client *tc = &s->clients[s->nclients++];
		top_str(c, "session", tc->session, sizeof(tc->session));
		top_str(c, "name", tc->name, sizeof(tc->name));
		tc->pid = top_long(c, "pid", -1);
		tc->uid = top_long(c, "uid", -1);
		tc->instances = top_u64(c, "instances");
		tc->allocations = top_u64(c, "allocations");
		tc->used = top_u64(c, "used");
		tc->leased = top_u64(c, "leased");
		tc->in_use = top_u64(c, "in_use");
		tc->recalls_pending = top_u64(c, "recalls_pending");
		tc->cap = top_u64(c, "cap");
		tc->age_s = (uint64_t)top_long(c, "connected_s", 0);
		tc->idle_s = (uint64_t)top_long(c, "idle_s", 0);
		tc->waiting = (uint64_t)top_long(c, "waiting", 0);
		tc->proportion = -2; /* until an instance says */
	}
	const cJSON *others = clients ? cJSON_GetObjectItemCaseSensitive(clients, "others") : NULL;
	s->others_clients = (uint64_t)top_long(others, "clients", 0);
	s->others_used = top_u64(others, "used");
	top_fill_instances(s, policy);
	top_fill_partitions(s, partitions);
	return 0;
}

/* ---- order ----------------------------------------------------------------------- */

static const char *const top_sort_names[TOP_NSORTS] = {"USED", "CAP", "LEASED", "PID", "NAME"};

const char *top_sort_name(enum top_sort sort)
{
	return sort < TOP_NSORTS ? top_sort_names[sort] : "?";
}

static enum top_sort top_sort_by;

static int top_cmp_u64(uint64_t a, uint64_t b)
{
	return a < b ? 1 : a > b ? -1 : 0; /* largest first */
}

static int top_cmp(const void *pa, const void *pb)
{
	const struct top_client *a = pa, *b = pb;
	int r = 0;

	switch (top_sort_by) {
	case TOP_SORT_USED:
		r = top_cmp_u64(a->used, b->used);
		break;
	case TOP_SORT_CAP:
		r = top_cmp_u64(a->cap, b->cap);
		break;
	case TOP_SORT_LEASED:
		r = top_cmp_u64(a->leased, b->leased);
		break;
	case TOP_SORT_PID:
		r = a->pid < b->pid ? -1 : a->pid > b->pid;
		break;
	case TOP_SORT_NAME:
		r = strcmp(a->name, b->name);
		break;
	case TOP_NSORTS:
		break;
	}
	/* Ties in a stable order: the rows do not jump between refreshes. */
	return r ? r : strcmp(a->session, b->session);
}

void top_snapshot_sort(struct top_snapshot *s, enum top_sort sort)
{
	top_sort_by = sort;
	qsort(s->clients, s->nclients, sizeof(s->clients[0]), top_cmp);
}

/* ---- events ---------------------------------------------------------------------- */

static const struct top_client *top_client_find(const struct top_snapshot *s, const char *session)
{
	for (size_t i = 0; i < s->nclients; i++)
		if (strcmp(s->clients[i].session, session) == 0)
			return &s->clients[i];
	return NULL;
}

static const struct top_instance *top_instance_find(const struct top_snapshot *s, const char *id)
{
	for (size_t i = 0; i < s->ninstances; i++)
		if (strcmp(s->instances[i].id, id) == 0)
			return &s->instances[i];
	return NULL;
}

/* Whole MiB, for the event lines. */
static unsigned long long top_mib(uint64_t bytes)
{
	return (unsigned long long)(bytes >> 20);
}

void top_events(const struct top_snapshot *old, const struct top_snapshot *cur,
                void (*emit)(const char *line, void *arg), void *arg)
{
	char line[160];

	if (strcmp(old->mode, cur->mode) != 0) {
		snprintf(line, sizeof(line), "mode %s (was %s)", cur->mode, old->mode);
		emit(line, arg);
	}
	for (size_t i = 0; i < cur->nclients; i++) {
		const struct top_client *c = &cur->clients[i];
		if (!top_client_find(old, c->session)) {
			snprintf(line, sizeof(line), "client %s (pid %ld, uid %ld) connected",
			         c->name, c->pid, c->uid);
			emit(line, arg);
		}
	}
	for (size_t i = 0; i < old->nclients; i++) {
		const struct top_client *c = &old->clients[i];
		if (!top_client_find(cur, c->session)) {
			snprintf(line, sizeof(line),
			         "client %s (pid %ld) left: ended or evicted, %llu MiB back",
			         c->name, c->pid, top_mib(c->used));
			emit(line, arg);
		}
	}
	for (size_t i = 0; i < cur->ninstances; i++) {
		const struct top_instance *in = &cur->instances[i];
		const struct top_instance *was = top_instance_find(old, in->id);
		if (was && was->cap != in->cap) {
			snprintf(line, sizeof(line),
			         "instance %s (pid %ld) cap %llu MiB (was %llu MiB)", in->name,
			         in->pid, top_mib(in->cap), top_mib(was->cap));
			emit(line, arg);
		}
	}
	if (cur->recalls_sent > old->recalls_sent) {
		snprintf(line, sizeof(line), "%llu lease recall(s) sent",
		         (unsigned long long)(cur->recalls_sent - old->recalls_sent));
		emit(line, arg);
	}
	if (cur->invalidations > old->invalidations) {
		snprintf(line, sizeof(line), "invalidate: every allocation released (%llu time(s))",
		         (unsigned long long)(cur->invalidations - old->invalidations));
		emit(line, arg);
	}
	if (cur->evictions > old->evictions) {
		snprintf(line, sizeof(line), "%llu client(s) evicted by an operator",
		         (unsigned long long)(cur->evictions - old->evictions));
		emit(line, arg);
	}
	if (cur->recalls_timed_out > old->recalls_timed_out) {
		snprintf(line, sizeof(line), "%llu recall(s) timed out",
		         (unsigned long long)(cur->recalls_timed_out - old->recalls_timed_out));
		emit(line, arg);
	}
	for (size_t i = 0; i < cur->ndevices; i++) {
		const struct top_device *d = &cur->devices[i];
		for (size_t j = 0; j < old->ndevices; j++) {
			const struct top_device *w = &old->devices[j];
			if (w->device == d->device && d->ooms > w->ooms) {
				snprintf(line, sizeof(line),
				         "device %d: %llu allocation(s) refused", d->device,
				         (unsigned long long)(d->ooms - w->ooms));
				emit(line, arg);
			}
		}
	}
}

/* ---- bars ------------------------------------------------------------------------ */

void top_bar_cells(const struct top_device *d, int width, int cells[TOP_NPARTS])
{
	uint64_t total = 0;
	int given = 0, nonzero = 0;

	for (int p = 0; p < TOP_NPARTS; p++) {
		total += d->part[p];
		cells[p] = 0;
		nonzero += d->part[p] > 0;
	}
	if (width <= 0 || total == 0)
		return;
	/* Each part its floor share, at least one cell when non-empty (a
	 * sliver must show), then the remainder to the largest parts. */
	for (int p = 0; p < TOP_NPARTS; p++) {
		if (!d->part[p])
			continue;
		cells[p] = (int)((double)d->part[p] * width / (double)total);
		if (cells[p] == 0 && width >= nonzero)
			cells[p] = 1;
		given += cells[p];
	}
	while (given > width) { /* the minimums overshot: take from the largest */
		int big = 0;
		for (int p = 1; p < TOP_NPARTS; p++)
			if (cells[p] > cells[big])
				big = p;
		cells[big]--;
		given--;
	}
	while (given < width) {
		int best = -1;
		double gap = -1;
		for (int p = 0; p < TOP_NPARTS; p++) {
			if (!d->part[p])
				continue;
			double want = (double)d->part[p] * width / (double)total - cells[p];
			if (want > gap) {
				gap = want;
				best = p;
			}
		}
		cells[best]++;
		given++;
	}
}
