/*
 * dispatch_partition.c - partitions on the wire: partition_create and
 * partition_destroy (admin), partitions (a user sees its own), and the
 * token that hello may carry.
 *
 * The token is the only key to a partition: it is answered only to the
 * administrator who creates the partition, never listed, and a hello with
 * a wrong one (unknown, malformed, or another uid's) gets one answer.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch_internal.h"
#include "log.h"

static int bad_device(struct dispatch_ctx *ctx, const char *why)
{
	proto_error_set(&ctx->err, PROTO_E_PARAMS, "invalid params: %s", why);
	snprintf(ctx->err.field, sizeof(ctx->err.field), PROTO_F_DEVICES);
	return -EINVAL;
}

/* "devices": indices or UUIDs, each once (absent: every device); marks
 * size on each in sizes[]. */
static int get_devices(struct dispatch_ctx *ctx, const struct proto_partition_create_params *p,
                       uint64_t *sizes)
{
	const struct broker *b = ctx->b;
	int count = broker_device_count(b);
	if (!p->has_devices) {
		for (int i = 0; i < count; i++)
			sizes[i] = p->size;
		return 0;
	}
	for (unsigned k = 0; k < p->devices.count; k++) {
		const struct proto_device *d = &p->devices.dev[k];
		int i = d->uuid ? dispatch_device_by_uuid(b, d->uuid) : d->index;
		if (i < 0 || i >= count)
			return bad_device(ctx, "no such device in 'devices'");
		if (sizes[i])
			return bad_device(ctx, "a device is named twice in 'devices'");
		sizes[i] = p->size;
	}
	return 0;
}

/* What recalls could still have given on device, where leases outside
 * partitions are: recallable (not said in use) and in_use. 0 or -ENOMEM. */
static int recall_figures(struct dispatch_ctx *ctx, int device)
{
	uint64_t recallable, in_use;
	broker_recall_figures(ctx->b, device, &recallable, &in_use);
	if (!recallable && !in_use)
		return 0;
	return proto_add_u64(ctx->data, PROTO_F_RECALLABLE, recallable) ||
	               proto_add_u64(ctx->data, PROTO_F_IN_USE, in_use)
	           ? -ENOMEM
	           : 0;
}

static void refusal_error(struct dispatch_ctx *ctx, const struct broker_partition_refusal *w)
{
	char more[96] = "";
	if (w->used)
		snprintf(more, sizeof(more), "; sessions outside partitions hold %llu",
		         (unsigned long long)w->used);
	proto_error_set(&ctx->err, PROTO_E_NO_MEMORY,
	                "device %d: asked %llu, available %llu (capacity %llu, partitions %llu)%s",
	                w->device, (unsigned long long)w->asked, (unsigned long long)w->available,
	                (unsigned long long)w->capacity, (unsigned long long)w->partitions, more);
	ctx->data = cJSON_CreateObject();
	if (ctx->data &&
	    (proto_add_number(ctx->data, PROTO_F_DEVICE, w->device) ||
	     proto_add_u64(ctx->data, PROTO_F_ASKED, w->asked) ||
	     proto_add_u64(ctx->data, PROTO_F_AVAILABLE, w->available) ||
	     proto_add_u64(ctx->data, PROTO_F_CAPACITY, w->capacity) ||
	     proto_add_u64(ctx->data, PROTO_F_PARTITIONS, w->partitions) ||
	     proto_add_u64(ctx->data, PROTO_F_USED, w->used) || recall_figures(ctx, w->device))) {
		cJSON_Delete(ctx->data);
		ctx->data = NULL;
	}
}

static int create_error(struct dispatch_ctx *ctx, int rc, const char *name,
                        const struct broker_partition_refusal *why)
{
	switch (rc) {
	case -EEXIST:
		proto_error_set(&ctx->err, PROTO_E_EXISTS, "a partition named %s exists", name);
		snprintf(ctx->err.field, sizeof(ctx->err.field), PROTO_F_NAME);
		return rc;
	case -ENOSPC:
		refusal_error(ctx, why);
		return rc;
	case -EMFILE:
		proto_error_set(&ctx->err, PROTO_E_LIMIT, "limit reached: at most %d partitions",
		                BROKER_MAX_PARTITIONS);
		return rc;
	case -EIO:
		proto_error_set(&ctx->err, PROTO_E_INTERNAL, "internal error: no random token");
		return rc;
	default:
		return rc == -ENOMEM
		           ? rc
		           : dispatch_param_error(ctx, rc, PROTO_F_NAME, PROTO_PARTITION_EXPECTED);
	}
}

/* name, uid, sessions and devices [{device, size, used, free}] of p. */
static int partition_json(const struct broker *b, cJSON *o, const struct broker_partition *p,
                          bool figures)
{
	cJSON *devs;
	if (!cJSON_AddStringToObject(o, PROTO_F_NAME, p->name) ||
	    proto_add_number(o, PROTO_F_UID, p->uid) ||
	    (figures && proto_add_number(o, PROTO_F_SESSIONS, p->sessions)) ||
	    !(devs = cJSON_AddArrayToObject(o, PROTO_F_DEVICES)))
		return -ENOMEM;
	for (int i = 0; i < broker_device_count(b); i++) {
		if (!p->size[i])
			continue;
		cJSON *d = proto_array_add_object(devs);
		if (!d || proto_add_number(d, PROTO_F_DEVICE, i) ||
		    proto_add_u64(d, PROTO_F_SIZE, p->size[i]) ||
		    (figures &&
		     (proto_add_u64(d, PROTO_F_USED, broker_partition_used(p, i)) ||
		      proto_add_u64(d, PROTO_F_FREE, policy_device_available(&p->policy, i)))))
			return -ENOMEM;
	}
	return 0;
}

int dispatch_partition_create(struct dispatch_ctx *ctx,
                              const struct proto_partition_create_params *params)
{
	uint64_t sizes[BACKEND_MAX_DEVICES] = {0};
	int rc = get_devices(ctx, params, sizes);
	if (rc < 0)
		return rc;
	struct broker_partition *p;
	struct broker_partition_refusal why;
	rc = broker_partition_create(ctx->b, params->name, (uid_t)params->uid, sizes, &p, &why);
	if (rc == -ENOSPC && !ctx->final) {
		/* Idle leases outside partitions may stand in the way: they are
		 * recalled on every device of the partition, and the slabs they
		 * leave kept empty asked back (at every run: a lease returned
		 * empties its slab after the first), the request held for the
		 * answers up to the recall timeout (a Slurm prolog must not
		 * hang). */
		unsigned out = 0;
		for (int i = 0; i < BACKEND_MAX_DEVICES; i++)
			if (sizes[i])
				out += broker_recall_room(ctx->b, NULL, i, sizes[i], NULL,
				                          PROTO_V_REASON_PARTITION, true);
		if (dispatch_hold(ctx, out))
			return 0;
	}
	if (rc < 0)
		return create_error(ctx, rc, params->name, &why);
	log_info("session %llu (uid %u): partition %s for uid %u", (unsigned long long)ctx->s->id,
	         (unsigned)ctx->s->uid, p->name, (unsigned)p->uid);
	cJSON *r = dispatch_result(ctx);
	rc = r && !partition_json(ctx->b, r, p, false) &&
	             !proto_add_hex(r, PROTO_F_TOKEN, p->token, sizeof(p->token))
	         ? 0
	         : -ENOMEM;
	if (rc < 0) {
		/* Nobody could learn its token: it must not stay. */
		unsigned n;
		uint64_t bytes;
		broker_partition_destroy(ctx->b, p, &n, &bytes);
	}
	return rc;
}

int dispatch_partition_destroy(struct dispatch_ctx *ctx,
                               const struct proto_partition_destroy_params *params)
{
	struct broker *b = ctx->b;
	struct broker_partition *p = broker_partition_find(b, params->name);
	if (!p) {
		proto_error_set(&ctx->err, PROTO_E_NOT_FOUND, "no such partition");
		return -ENOENT;
	}
	if (ctx->s->part == p) {
		proto_error_set(&ctx->err, PROTO_E_PARAMS,
		                "invalid params: a client cannot destroy the partition it is in");
		snprintf(ctx->err.field, sizeof(ctx->err.field), PROTO_F_NAME);
		return -EINVAL;
	}
	/* Its sessions hear why before their connections end. */
	struct session **ending = calloc(p->sessions ? p->sessions : 1, sizeof(*ending));
	if (!ending)
		return -ENOMEM;
	unsigned n = 0, sessions;
	uint64_t reclaimed;
	for (struct session *s = broker_session_next(b, NULL); s; s = broker_session_next(b, s)) {
		if (s->part != p || n >= p->sessions)
			continue;
		cJSON *data = cJSON_CreateObject();
		if (data && !cJSON_AddStringToObject(data, PROTO_F_NAME, p->name)) {
			cJSON_Delete(data);
			data = NULL;
		}
		dispatch_send_event(ctx->d, s, PROTO_EV_PARTITION_DESTROYED, data);
		ending[n++] = s;
	}
	cJSON *r = dispatch_result(ctx);
	if (!r || !cJSON_AddStringToObject(r, PROTO_F_NAME, p->name)) {
		free(ending);
		return -ENOMEM;
	}
	log_info("session %llu (uid %u): destroys partition %s", (unsigned long long)ctx->s->id,
	         (unsigned)ctx->s->uid, p->name);
	broker_partition_destroy(b, p, &sessions, &reclaimed);
	for (unsigned i = 0; i < n; i++) {
		if (ctx->d->close)
			ctx->d->close(ctx->d->send_ctx, ending[i], "its partition was destroyed");
	}
	free(ending);
	if (proto_add_number(r, PROTO_F_SESSIONS, sessions) ||
	    proto_add_u64(r, PROTO_F_RECLAIMED, reclaimed))
		return -ENOMEM;
	return 0;
}

int dispatch_partitions(struct dispatch_ctx *ctx, const struct proto_partitions_params *params)
{
	(void)params;
	const struct broker *b = ctx->b;
	cJSON *r = dispatch_result(ctx), *arr;
	if (!r || !(arr = cJSON_AddArrayToObject(r, PROTO_F_PARTITIONS)))
		return -ENOMEM;
	unsigned hidden = 0;
	uint64_t hidden_size = 0;
	for (const struct broker_partition *p = broker_partition_next(b, NULL); p;
	     p = broker_partition_next(b, p)) {
		/* Another user's partition: only counted. */
		if (!broker_sees(ctx->s, p->uid)) {
			hidden++;
			for (int i = 0; i < broker_device_count(b); i++)
				hidden_size += p->size[i];
			continue;
		}
		cJSON *o = proto_array_add_object(arr);
		if (!o || partition_json(b, o, p, true))
			return -ENOMEM;
	}
	cJSON *others = cJSON_AddObjectToObject(r, PROTO_F_OTHERS);
	if (!others || proto_add_number(others, PROTO_F_PARTITIONS, hidden) ||
	    proto_add_u64(others, PROTO_F_SIZE, hidden_size))
		return -ENOMEM;
	return 0;
}

_Static_assert(BROKER_TOKEN_BYTES == PROTO_TOKEN_SIZE, "a token is the protocol's size");

int dispatch_hello_token(struct dispatch_ctx *ctx, const struct proto_token *token)
{
	int rc = token->valid ? broker_partition_join(ctx->b, ctx->s, token->bytes) : -EPERM;
	if (rc < 0) {
		log_info("session %llu (pid %d uid %u): invalid partition token",
		         (unsigned long long)ctx->s->id, (int)ctx->s->pid, (unsigned)ctx->s->uid);
		proto_error_set(&ctx->err, PROTO_E_PERMISSION, "invalid partition token");
		return -EPERM;
	}
	log_info("session %llu (pid %d uid %u): in partition %s", (unsigned long long)ctx->s->id,
	         (int)ctx->s->pid, (unsigned)ctx->s->uid, ctx->s->part->name);
	return 0;
}
