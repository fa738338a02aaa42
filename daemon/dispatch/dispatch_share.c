/*
 * dispatch_share.c - the sharing requests: export, unexport, open
 * (broker_share.c has the rules: names are per exporting user).
 */
#include <errno.h>
#include <stdio.h>

#include "broker.h"
#include "dispatch_internal.h"

static int get_name(struct dispatch_ctx *ctx, const char **name)
{
	int rc = proto_get_string(ctx->params, PROTO_F_NAME, PROTO_MAX_NAME, name);
	return rc < 0 ? dispatch_param_error(ctx, rc, PROTO_F_NAME, PROTO_NAME_EXPECTED) : 0;
}

int dispatch_export(struct dispatch_ctx *ctx)
{
	uint64_t id;
	const char *name;
	uid_t uid;
	int rc = dispatch_get_id(ctx, PROTO_F_ID, &id);
	if (rc == 0)
		rc = get_name(ctx, &name);
	if (rc == 0)
		rc = dispatch_get_uid(ctx, PROTO_F_UID, &uid);
	if (rc < 0)
		return rc;
	rc = broker_export(ctx->b, ctx->s, id, name, uid);
	switch (rc) {
	case 0:
		break;
	case -EALREADY:
		proto_error_set(&ctx->err, PROTO_E_PARAMS,
		                "invalid params: the allocation is already exported");
		snprintf(ctx->err.field, sizeof(ctx->err.field), PROTO_F_ID);
		return rc;
	case -EEXIST:
		proto_error_set(&ctx->err, PROTO_E_EXISTS, "this user already exports that name");
		snprintf(ctx->err.field, sizeof(ctx->err.field), PROTO_F_NAME);
		return rc;
	case -EPERM:
		/* The opener would map the whole slab, other allocations included. */
		proto_error_set(&ctx->err, PROTO_E_PARAMS,
		                "invalid params: only an allocation that fills a slab of its own "
		                "can go to another uid (a multiple of 2 MiB, larger than the slab "
		                "size or under allocator \"direct\")");
		snprintf(ctx->err.field, sizeof(ctx->err.field), PROTO_F_UID);
		return rc;
	case -EXDEV:
		proto_error_set(&ctx->err, PROTO_E_PARAMS,
		                "invalid params: allocator \"async\" memory cannot go to another "
		                "uid (its grant would carry this user's memory pool); allocate it "
		                "under allocator \"pool\" or \"direct\"");
		snprintf(ctx->err.field, sizeof(ctx->err.field), PROTO_F_UID);
		return rc;
	case -EAGAIN:
		return -ENOMEM;
	default:
		return dispatch_broker_error(ctx, rc, "allocation");
	}
	cJSON *r = dispatch_result(ctx);
	if (!r || !cJSON_AddStringToObject(r, PROTO_F_NAME, name) ||
	    proto_add_id64(r, PROTO_F_ID, id) ||
	    !cJSON_AddNumberToObject(r, PROTO_F_UID, (double)uid))
		return -ENOMEM;
	return 0;
}

int dispatch_unexport(struct dispatch_ctx *ctx)
{
	const char *name;
	int rc = get_name(ctx, &name);
	if (rc == 0)
		rc = broker_unexport(ctx->b, ctx->s, name);
	if (rc < 0)
		return ctx->err.code ? rc : dispatch_broker_error(ctx, rc, "export");
	return dispatch_result(ctx) ? 0 : -ENOMEM;
}

int dispatch_open(struct dispatch_ctx *ctx)
{
	const char *name;
	struct broker_grant g;
	uid_t owner;
	int rc = get_name(ctx, &name);
	/* Whose namespace: without "owner" the caller's own, never another's. */
	if (rc == 0)
		rc = dispatch_get_uid(ctx, PROTO_F_OWNER, &owner);
	if (rc < 0)
		return rc;
	rc = broker_open(ctx->b, ctx->s, owner, name, &g);
	if (rc == -EAGAIN)
		return -ENOMEM;
	if (rc < 0)
		return dispatch_broker_error(ctx, rc, "export");
	return dispatch_attach_result(ctx, &g);
}
