/*
 * metrics.c - the daemon's Prometheus metrics.
 *
 * Names follow the Prometheus conventions: base units (bytes, seconds),
 * `_total` for counters, no pid or session labels (they would make series
 * churn with every connection). An instance is labelled `instance_id`, not
 * `instance`: Prometheus attaches `instance` to every series of a scrape
 * target, and a clash would rename ours to `exported_instance`.
 *
 * The per-instance and per-user series name users' instances and uids, so
 * they follow the rule of `policy` and `clients`: a caller who is not an
 * administrator gets those of its own user only, and every total (devices,
 * connections, requests) whole. A scraper that wants everyone runs as root
 * or in the admin group; the series it gets do not depend on who else asked.
 */
#include "metrics.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker.h"
#include "config.h"

static const double metrics_bounds[METRICS_BUCKETS] = {
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.01, 0.1,
};

static const int metrics_codes[METRICS_OUTCOMES] = {
    0,
    1,
    PROTO_E_PARSE,
    PROTO_E_INVALID_REQUEST,
    PROTO_E_METHOD,
    PROTO_E_PARAMS,
    PROTO_E_INTERNAL,
    PROTO_E_STATE,
    PROTO_E_VERSION,
    PROTO_E_NO_MEMORY,
    PROTO_E_QUOTA,
    PROTO_E_NOT_FOUND,
    PROTO_E_PERMISSION,
    PROTO_E_LIMIT,
    PROTO_E_SHUTTING_DOWN,
    PROTO_E_TIMEOUT,
    PROTO_E_NOT_SUPPORTED,
    PROTO_E_BACKEND,
    PROTO_E_EXISTS,
};

static int metrics_outcome(int code)
{
	for (int i = 0; i < METRICS_OUTCOMES; i++) {
		if (metrics_codes[i] == code)
			return i;
	}
	return 6; /* internal_error: a code this table does not know */
}

static const char *metrics_outcome_name(int i)
{
	return i == 0 ? "ok" : i == 1 ? "deferred" : proto_code_name(metrics_codes[i]);
}

void metrics_record(struct metrics *m, int op, int code, uint64_t ns)
{
	if (op < 0 || op >= PROTO_OP_COUNT)
		op = PROTO_OP_COUNT;
	m->requests[op][metrics_outcome(code)]++;
	double s = (double)ns / 1e9;
	for (int i = 0; i < METRICS_BUCKETS; i++) {
		if (s <= metrics_bounds[i]) {
			m->duration_buckets[i]++;
			break;
		}
	}
	m->duration_count++;
	m->duration_sum += s;
}

/* A growing text buffer; the first failure sticks. */
struct mbuf {
	char *text;
	size_t len, cap;
	int err;
};

static void mbuf_printf(struct mbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void mbuf_printf(struct mbuf *b, const char *fmt, ...)
{
	for (;;) {
		if (b->err)
			return;
		va_list ap;
		va_start(ap, fmt);
		int n = vsnprintf(b->text ? b->text + b->len : NULL, b->cap - b->len, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->err = -EINVAL;
			return;
		}
		if ((size_t)n < b->cap - b->len) {
			b->len += (size_t)n;
			return;
		}
		size_t cap = b->cap ? b->cap * 2 : 8192;
		while (cap - b->len <= (size_t)n)
			cap *= 2;
		char *text = realloc(b->text, cap);
		if (!text) {
			b->err = -ENOMEM;
			return;
		}
		b->text = text;
		b->cap = cap;
	}
}

static void mbuf_header(struct mbuf *b, const char *name, const char *type, const char *help)
{
	mbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value with \, " and newline escaped as the format requires. */
static void metrics_escape(const char *in, char *out, size_t size)
{
	size_t j = 0;
	for (size_t i = 0; in[i] && j + 3 < size; i++) {
		char c = in[i];
		if (c == '\\' || c == '"') {
			out[j++] = '\\';
			out[j++] = c;
		} else if (c == '\n') {
			out[j++] = '\\';
			out[j++] = 'n';
		} else {
			out[j++] = c;
		}
	}
	out[j] = '\0';
}

static void metrics_devices(struct mbuf *m, const struct broker *b)
{
	struct broker_device_stats st[BACKEND_MAX_DEVICES];
	int devices = broker_device_count(b);
	for (int i = 0; i < devices; i++)
		broker_device_stats(b, i, &st[i]);
	static const struct {
		const char *name, *type, *help;
	} series[] = {
	    {"gpubroker_device_memory_bytes", "gauge", "Memory of the device."},
	    {"gpubroker_device_reserved_bytes", "gauge",
	     "Device memory the broker holds in slabs."},
	    {"gpubroker_device_used_bytes", "gauge", "Device memory in live allocations."},
	    {"gpubroker_device_fenced_bytes", "gauge",
	     "Device memory kept allocated, holding nothing, while a process that had it may "
	     "still write there (evicted, invalidated): until it answers or exits."},
	    {"gpubroker_device_orphaned_bytes", "gauge",
	     "Device memory freed by its owner, still held by others' attachments."},
	    {"gpubroker_device_free_bytes", "gauge", "Device memory not in live allocations."},
	    {"gpubroker_device_leased_bytes", "gauge",
	     "Device memory in clients' leases (part of used): blocks their libraries "
	     "sub-allocate in themselves."},
	    {"gpubroker_device_lease_in_use_bytes", "gauge",
	     "What clients last said they use inside their leases."},
	    {"gpubroker_leases", "gauge", "Live leases."},
	    {"gpubroker_pool_free_blocks", "gauge", "Free ranges inside slabs."},
	    {"gpubroker_allocations", "gauge", "Live allocations."},
	    {"gpubroker_allocations_total", "counter", "Allocations served."},
	    {"gpubroker_out_of_memory_total", "counter", "Allocations refused for lack of memory."},
	};
	for (size_t k = 0; k < sizeof(series) / sizeof(series[0]); k++) {
		mbuf_header(m, series[k].name, series[k].type, series[k].help);
		for (int i = 0; i < devices; i++) {
			const struct backend_device_info *info = broker_device_info(b, i);
			const struct pool_stats *ps = &st[i].pool;
			uint64_t v[] = {info->total,     ps->reserved,   ps->used,
			                st[i].fenced,    st[i].orphaned, info->total - ps->used,
			                st[i].leased,    st[i].in_use,   st[i].leases,
			                ps->free_blocks, ps->live,       ps->allocs,
			                ps->ooms};
			mbuf_printf(m, "%s{device=\"%d\",uuid=\"%s\"} %llu\n", series[k].name, i,
			            info->uuid, (unsigned long long)v[k]);
		}
	}
}

static void metrics_instances(struct mbuf *m, const struct broker *b, const struct session *viewer)
{
	static const char *const names[] = {
	    "gpubroker_instance_used_bytes",      "gpubroker_instance_cap_bytes",
	    "gpubroker_instance_leased_bytes",    "gpubroker_instance_lease_in_use_bytes",
	    "gpubroker_instance_recalls_pending", "gpubroker_instance_recalls_timed_out_total"};
	static const char *const help[] = {
	    "Bytes the instance is charged: its leases and its live allocations.",
	    "Bytes the instance may hold.",
	    "Bytes of the instance's leases (part of used).",
	    "What the instance's client last said it uses inside its leases.",
	    "Recalls of the instance's leases out, not answered yet (0 or 1).",
	    "Recalls of the instance's leases its client did not answer in time."};
	for (int k = 0; k < 6; k++) {
		mbuf_header(m, names[k], k == 5 ? "counter" : "gauge", help[k]);
		for (const struct session *s = broker_session_next(b, NULL); s;
		     s = broker_session_next(b, s)) {
			if (!broker_sees(viewer, s->uid))
				continue;
			for (const struct broker_instance *inst = broker_instance_next(s, NULL);
			     inst; inst = broker_instance_next(s, inst)) {
				const uint64_t v[] = {
				    inst->used,   inst->pol.cap,           inst->leased,
				    inst->in_use, inst->recall_epoch != 0, inst->recalls_timed_out};
				/* Room for every byte escaped, with metrics_escape()'s
				 * margin: names are never cut short. */
				char name[2 * PROTO_MAX_NAME + 3];
				metrics_escape(inst->name, name, sizeof(name));
				mbuf_printf(m,
				            "%s{instance_id=\"%016llx\",name=\"%s\","
				            "uid=\"%u\",device=\"%d\"} %llu\n",
				            names[k], (unsigned long long)inst->id, name,
				            (unsigned)s->uid, inst->device,
				            (unsigned long long)v[k]);
			}
		}
	}
}

/*
 * Per partition and device: its size, what its sessions hold; and its
 * sessions. A user sees its own uid's partitions (as `partitions` shows
 * them); the memory all partitions take is a total everyone may see.
 */
static void metrics_partitions(struct mbuf *m, const struct broker *b, const struct session *viewer)
{
	static const char *const names[] = {"gpubroker_partition_size_bytes",
	                                    "gpubroker_partition_used_bytes"};
	static const char *const help[] = {
	    "Bytes the partition takes out of the device, guaranteed to its sessions.",
	    "Bytes in the live allocations of the partition's sessions."};
	const struct broker_partition *p;
	int devices = broker_device_count(b);
	for (int k = 0; k < 2; k++) {
		mbuf_header(m, names[k], "gauge", help[k]);
		for (p = broker_partition_next(b, NULL); p; p = broker_partition_next(b, p)) {
			for (int d = 0; d < devices && broker_sees(viewer, p->uid); d++) {
				if (p->size[d])
					mbuf_printf(
					    m,
					    "%s{partition=\"%s\",uid=\"%u\",device=\"%d\"} "
					    "%llu\n",
					    names[k], p->name, (unsigned)p->uid, d,
					    (unsigned long long)(k ? broker_partition_used(p, d)
					                           : p->size[d]));
			}
		}
	}
	mbuf_header(m, "gpubroker_partition_sessions", "gauge",
	            "Connections inside the partition.");
	for (p = broker_partition_next(b, NULL); p; p = broker_partition_next(b, p)) {
		if (broker_sees(viewer, p->uid))
			mbuf_printf(
			    m, "gpubroker_partition_sessions{partition=\"%s\",uid=\"%u\"} %u\n",
			    p->name, (unsigned)p->uid, p->sessions);
	}
	mbuf_header(m, "gpubroker_partitions_bytes", "gauge",
	            "Bytes every partition together takes out of the device.");
	for (int d = 0; d < devices; d++)
		mbuf_printf(m, "gpubroker_partitions_bytes{device=\"%d\"} %llu\n", d,
		            (unsigned long long)broker_partitions_size(b, d));
}

/* Per-uid totals: users are few, so a small array beats a map. */
static void metrics_uids(struct mbuf *m, const struct broker *b, const struct session *viewer)
{
	struct {
		uid_t uid;
		uint64_t connections, cap;
	} uids[256];
	size_t n = 0;
	for (const struct session *s = broker_session_next(b, NULL); s;
	     s = broker_session_next(b, s)) {
		size_t i;
		if (!broker_sees(viewer, s->uid))
			continue;
		for (i = 0; i < n && uids[i].uid != s->uid; i++)
			;
		if (i == n) {
			if (n == sizeof(uids) / sizeof(uids[0]))
				continue; /* beyond 256 users: not worth a series each */
			uids[n++] = (typeof(uids[0])){s->uid, 0, 0};
		}
		uids[i].connections++;
		/* The cap broker_alloc() holds the connection to: its uid's rule,
		 * else its primary group's. Connections of one user with different
		 * primary groups may meet different group rules: the tightest. */
		const struct broker_rule *rule = broker_rule_for(b, s);
		if (rule && rule->cap && (!uids[i].cap || rule->cap < uids[i].cap))
			uids[i].cap = rule->cap;
	}
	/* Per device, as the cap below applies on each device. */
	mbuf_header(m, "gpubroker_uid_used_bytes", "gauge",
	            "Bytes in live device allocations per user and device.");
	for (size_t i = 0; i < n; i++)
		for (int d = 0; d < broker_device_count(b); d++)
			mbuf_printf(m, "gpubroker_uid_used_bytes{uid=\"%u\",device=\"%d\"} %llu\n",
			            (unsigned)uids[i].uid, d,
			            (unsigned long long)broker_uid_used(b, d, uids[i].uid));
	mbuf_header(m, "gpubroker_uid_cap_bytes", "gauge",
	            "Bytes a user may hold on each device (its uid or group cap in "
	            "gpubroker.conf); users without a cap have no series.");
	for (size_t i = 0; i < n; i++) {
		if (uids[i].cap)
			mbuf_printf(m, "gpubroker_uid_cap_bytes{uid=\"%u\"} %llu\n",
			            (unsigned)uids[i].uid, (unsigned long long)uids[i].cap);
	}
	mbuf_header(m, "gpubroker_uid_connections", "gauge", "Connections per user.");
	for (size_t i = 0; i < n; i++)
		mbuf_printf(m, "gpubroker_uid_connections{uid=\"%u\"} %llu\n",
		            (unsigned)uids[i].uid, (unsigned long long)uids[i].connections);
}

/* Allocations that waited: the queue now and how waits ended. */
static void metrics_waits(struct mbuf *m, const struct broker_summary *sum)
{
	const struct broker_stats *mt = &sum->stats;
	const struct {
		const char *name, *help;
		uint64_t value;
	} counters[] = {
	    {"gpubroker_waits_started_total", "Allocations queued to wait for memory or quota.",
	     mt->waits_started},
	    {"gpubroker_waits_served_total", "Waiting allocations served.", mt->waits_served},
	    {"gpubroker_waits_timed_out_total", "Waiting allocations that ran out of time.",
	     mt->waits_timed_out},
	    {"gpubroker_waits_cancelled_total",
	     "Waiting allocations ended otherwise: connection closed, instance gone, daemon "
	     "stopping.",
	     mt->waits_cancelled},
	};
	mbuf_header(m, "gpubroker_waiting_allocations", "gauge",
	            "Allocations waiting for memory or quota.");
	mbuf_printf(m, "gpubroker_waiting_allocations %u\n", sum->waits);
	for (size_t k = 0; k < sizeof(counters) / sizeof(counters[0]); k++) {
		mbuf_header(m, counters[k].name, "counter", counters[k].help);
		mbuf_printf(m, "%s %llu\n", counters[k].name,
		            (unsigned long long)counters[k].value);
	}
}

/* Slabs kept mapped by clients with nothing in them (issue 18): reserved
 * on the devices, not used. */
static void metrics_kept(struct mbuf *m, const struct broker *b, const struct broker_summary *sum)
{
	struct broker_keep_counts k;
	broker_keep_counts(b, &k);
	mbuf_header(m, "gpubroker_kept_slabs", "gauge",
	            "Slabs clients keep mapped with nothing in them (reserved, not used).");
	mbuf_printf(m, "gpubroker_kept_slabs %llu\n", (unsigned long long)k.kept);
	mbuf_header(m, "gpubroker_kept_bytes", "gauge", "Bytes of those slabs.");
	mbuf_printf(m, "gpubroker_kept_bytes %llu\n", (unsigned long long)k.kept_bytes);
	mbuf_header(m, "gpubroker_reclaims_total", "counter",
	            "Kept slabs asked back because a device was short of memory.");
	mbuf_printf(m, "gpubroker_reclaims_total %llu\n", (unsigned long long)sum->stats.reclaims);
	/* Recalls of idle leases (issue 28): sent, and how they ended. */
	mbuf_header(m, "gpubroker_recalls_total", "counter",
	            "Recalls of idle leases, by how they stand: sent, answered, timed out.");
	const struct broker_stats *st = &sum->stats;
	mbuf_printf(m, "gpubroker_recalls_total{result=\"sent\"} %llu\n",
	            (unsigned long long)st->recalls_sent);
	mbuf_printf(m, "gpubroker_recalls_total{result=\"answered\"} %llu\n",
	            (unsigned long long)st->recalls_answered);
	mbuf_printf(m, "gpubroker_recalls_total{result=\"timed_out\"} %llu\n",
	            (unsigned long long)st->recalls_timed_out);
	mbuf_header(m, "gpubroker_recalls_pending", "gauge", "Recalls out, not answered yet.");
	mbuf_printf(m, "gpubroker_recalls_pending %llu\n",
	            (unsigned long long)broker_recalls_pending(b));
}

static void metrics_requests(struct mbuf *m, const struct metrics *mt)
{
	mbuf_header(m, "gpubroker_requests_total", "counter", "Requests answered, by result.");
	for (int op = 0; op <= PROTO_OP_COUNT; op++) {
		for (int o = 0; o < METRICS_OUTCOMES; o++) {
			if (!mt->requests[op][o])
				continue;
			mbuf_printf(
			    m, "gpubroker_requests_total{method=\"%s\",result=\"%s\"} %llu\n",
			    op < PROTO_OP_COUNT ? proto_ops[op].name : "unknown",
			    metrics_outcome_name(o), (unsigned long long)mt->requests[op][o]);
		}
	}
	mbuf_header(m, "gpubroker_request_duration_seconds", "histogram",
	            "Time the daemon took to answer a request.");
	uint64_t cumulative = 0;
	for (int i = 0; i < METRICS_BUCKETS; i++) {
		cumulative += mt->duration_buckets[i];
		mbuf_printf(m, "gpubroker_request_duration_seconds_bucket{le=\"%g\"} %llu\n",
		            metrics_bounds[i], (unsigned long long)cumulative);
	}
	mbuf_printf(m,
	            "gpubroker_request_duration_seconds_bucket{le=\"+Inf\"} %llu\n"
	            "gpubroker_request_duration_seconds_sum %.9f\n"
	            "gpubroker_request_duration_seconds_count %llu\n",
	            (unsigned long long)mt->duration_count, mt->duration_sum,
	            (unsigned long long)mt->duration_count);
}

/* What the server counts about connections: the output it holds for them,
 * and the ones it dropped or refused, by why (every reason always present,
 * 0 included, so that a rate over it starts from a known value). */
static void metrics_connections(struct mbuf *m, const struct metrics *mt)
{
	static const char *const drops[METRICS_DROPS] = {
	    [METRICS_DROP_PAUSED] = "paused",
	    [METRICS_DROP_CLIENT] = "max_output_per_client",
	    [METRICS_DROP_TOTAL] = "max_output_total",
	};
	static const char *const refusals[METRICS_REFUSALS] = {
	    [METRICS_REFUSED_MAX_CLIENTS] = "max_clients",
	    [METRICS_REFUSED_RESERVED] = "admin_reserved_connections",
	    [METRICS_REFUSED_PER_UID] = "max_clients_per_uid",
	    [METRICS_REFUSED_FILES] = "open_files",
	    [METRICS_REFUSED_FILES_PER_UID] = PROTO_V_LIMIT_FILES_PER_UID,
	};
	mbuf_header(m, "gpubroker_output_queued_bytes", "gauge",
	            "Bytes of replies and events queued for clients that have not read them.");
	mbuf_printf(m, "gpubroker_output_queued_bytes %llu\n",
	            (unsigned long long)mt->output_bytes);
	mbuf_header(m, "gpubroker_connections_dropped_total", "counter",
	            "Connections closed for not reading their replies and events.");
	for (int i = 0; i < METRICS_DROPS; i++)
		mbuf_printf(m, "gpubroker_connections_dropped_total{reason=\"%s\"} %llu\n",
		            drops[i], (unsigned long long)mt->dropped[i]);
	mbuf_header(m, "gpubroker_connections_refused_total", "counter",
	            "Connections refused with a limit_reached error as they came in.");
	for (int i = 0; i < METRICS_REFUSALS; i++)
		mbuf_printf(m, "gpubroker_connections_refused_total{reason=\"%s\"} %llu\n",
		            refusals[i], (unsigned long long)mt->refused[i]);
}

int metrics_render(const struct metrics *mt, const struct broker *b, const struct session *viewer,
                   char **out, size_t *len)
{
	struct mbuf m = {0};
	struct broker_summary sum;
	broker_summary(b, &sum);
	mbuf_header(&m, "gpubroker_build_info", "gauge", "Version and backend of the daemon.");
	mbuf_printf(&m, "gpubroker_build_info{version=\"%s\",backend=\"%s\"} 1\n", GPB_VERSION,
	            broker_backend_name(b));
	mbuf_header(&m, "gpubroker_start_time_seconds", "gauge",
	            "Start time of the daemon since the epoch.");
	mbuf_printf(&m, "gpubroker_start_time_seconds %lld\n", (long long)sum.started);
	metrics_devices(&m, b);
	metrics_instances(&m, b, viewer);
	metrics_uids(&m, b, viewer);
	metrics_partitions(&m, b, viewer);
	mbuf_header(&m, "gpubroker_connections", "gauge", "Connections open.");
	mbuf_printf(&m, "gpubroker_connections %u\n", sum.sessions);
	mbuf_header(&m, "gpubroker_connections_total", "counter", "Connections accepted.");
	mbuf_printf(&m, "gpubroker_connections_total %llu\n",
	            (unsigned long long)sum.stats.connections_total);
	metrics_connections(&m, mt);
	metrics_waits(&m, &sum);
	metrics_kept(&m, b, &sum);
	metrics_requests(&m, mt);
	if (m.err) {
		free(m.text);
		return m.err;
	}
	*out = m.text;
	*len = m.len;
	return 0;
}
