/*
 * schema.c - the tables of schema.h. Each entry is a PROTO_* macro, never
 * a literal, so that every name stays written once; the op, event and
 * message tables are generated from schema.h's X-macro lists.
 */
#include "schema.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>

const struct proto_op_info proto_ops[PROTO_OP_COUNT] = {
#define PROTO_OP_INFO_(id, name, flags) [PROTO_OP_##id] = {PROTO_M_##id, (flags)},
    PROTO_OPS(PROTO_OP_INFO_)
#undef PROTO_OP_INFO_
};

const struct proto_limit_info proto_limits[] = {
#define PROTO_LIMIT_INFO_(id, name) {name, PROTO_##id},
    PROTO_LIMITS(PROTO_LIMIT_INFO_)
#undef PROTO_LIMIT_INFO_
};
const unsigned proto_limit_count = sizeof(proto_limits) / sizeof(proto_limits[0]);

int proto_op_lookup(const char *name)
{
	for (int i = 0; i < PROTO_OP_COUNT; i++) {
		if (strcmp(proto_ops[i].name, name) == 0)
			return i;
	}
	return -ENOENT;
}

const char *proto_code_name(int code)
{
	switch (code) {
#define PROTO_CODE_CASE_(id, value, name)                                                          \
	case PROTO_E_##id:                                                                         \
		return name;
		PROTO_CODES(PROTO_CODE_CASE_)
#undef PROTO_CODE_CASE_
	default:
		return "unknown_error";
	}
}

const char *const proto_fields[] = {
    PROTO_F_ALIGNMENT,
    PROTO_F_ALLOCATIONS,
    PROTO_F_ALLOCATOR,
    PROTO_F_ALLOCS,
    PROTO_F_APPLIED,
    PROTO_F_ARRAYS,
    PROTO_F_ATTACHMENTS,
    PROTO_F_AUTO,
    PROTO_F_AUTO_CAP,
    PROTO_F_AUTO_INSTANCES,
    PROTO_F_AVAILABLE,
    PROTO_F_ASKED,
    PROTO_F_AXIS,
    PROTO_F_AXIS_LENGTH,
    PROTO_F_BACKEND,
    PROTO_F_BACKEND_ERROR,
    PROTO_F_BLOCKS,
    PROTO_F_BYTES,
    PROTO_F_CAP,
    PROTO_F_CAPACITY,
    PROTO_F_CHUNK_BYTES,
    PROTO_F_CHUNK_LENGTH,
    PROTO_F_CHUNKS,
    PROTO_F_CLIENT,
    PROTO_F_CLIENTS,
    PROTO_F_CODE,
    PROTO_F_COMPUTE_CAPABILITY,
    PROTO_F_CONNECTED_S,
    PROTO_F_DATA,
    PROTO_F_DEDICATED,
    PROTO_F_DEVICE,
    PROTO_F_DEVICE_FREE,
    PROTO_F_DEVICE_UUID,
    PROTO_F_DEVICES,
    PROTO_F_ELEM_SIZE,
    PROTO_F_EPOCH,
    PROTO_F_ERROR,
    PROTO_F_EVENT,
    PROTO_F_EVICTIONS,
    PROTO_F_EXPORTS,
    PROTO_F_FD,
    PROTO_F_FENCED,
    PROTO_F_FIELD,
    PROTO_F_FRACTION,
    PROTO_F_FREE,
    PROTO_F_FREE_BLOCKS,
    PROTO_F_FREED,
    PROTO_F_FREES,
    PROTO_F_GHOSTS,
    PROTO_F_GID,
    PROTO_F_GROUP,
    PROTO_F_GROUPED,
    PROTO_F_HANDLE,
    PROTO_F_HEAP_BYTES,
    PROTO_F_HELLO_TIMEOUT_MS,
    PROTO_F_HOST_ALLOCATIONS,
    PROTO_F_HOST_USED,
    PROTO_F_ID,
    PROTO_F_IDLE_S,
    PROTO_F_IN_USE,
    PROTO_F_IN_USE_AT_START,
    PROTO_F_INSTANCE,
    PROTO_F_INSTANCES,
    PROTO_F_INVALIDATIONS,
    PROTO_F_KEEP,
    PROTO_F_KEEP_SLABS,
    PROTO_F_LABEL,
    PROTO_F_LARGEST_FREE,
    PROTO_F_LEASE,
    PROTO_F_LEASED,
    PROTO_F_LEASES,
    PROTO_F_LIMIT,
    PROTO_F_LIMIT_FRACTION,
    PROTO_F_LIMITS,
    PROTO_F_LIVE,
    PROTO_F_MANUAL,
    PROTO_F_MANUAL_INSTANCES,
    PROTO_F_MAX_ALLOCATIONS,
    PROTO_F_MAX_DEPTH,
    PROTO_F_MAX_FRAME,
    PROTO_F_MAX_ID,
    PROTO_F_MAX_INFLIGHT,
    PROTO_F_MAX_INSTANCES,
    PROTO_F_MAX_MEMBERS,
    PROTO_F_MAX_NAME,
    PROTO_F_MAX_REPLY,
    PROTO_F_MEMBERS,
    PROTO_F_MESSAGE,
    PROTO_F_METHOD,
    PROTO_F_MIN_AUTO_SHARE,
    PROTO_F_MODE,
    PROTO_F_NAME,
    PROTO_F_NEEDS_RESTART,
    PROTO_F_OFFSET,
    PROTO_F_OK,
    PROTO_F_OOMS,
    PROTO_F_ORPHANED,
    PROTO_F_ORPHANS,
    PROTO_F_OTHERS,
    PROTO_F_OWN,
    PROTO_F_OWNER,
    PROTO_F_PARAMS,
    PROTO_F_PARTITION,
    PROTO_F_PARTITIONS,
    PROTO_F_PARTING,
    PROTO_F_PEAK,
    PROTO_F_PID,
    PROTO_F_POOL,
    PROTO_F_POOL_ID,
    PROTO_F_PREVIOUS,
    PROTO_F_PROPORTION,
    PROTO_F_QUEUED,
    PROTO_F_REASON,
    PROTO_F_RECALLABLE,
    PROTO_F_RECALLS,
    PROTO_F_RECALLS_ANSWERED,
    PROTO_F_RECALLS_PENDING,
    PROTO_F_RECALLS_SENT,
    PROTO_F_RECALLS_TIMED_OUT,
    PROTO_F_RECLAIMED,
    PROTO_F_REPLY,
    PROTO_F_REQUEST_BYTES,
    PROTO_F_REQUESTED,
    PROTO_F_REQUESTS,
    PROTO_F_RESERVE,
    PROTO_F_RESERVED,
    PROTO_F_RESULT,
    PROTO_F_RETIRED,
    PROTO_F_SERVER,
    PROTO_F_SERVER_VERSION,
    PROTO_F_SESSION,
    PROTO_F_SESSIONS,
    PROTO_F_SHAPE,
    PROTO_F_SHARE,
    PROTO_F_SIZE,
    PROTO_F_SLAB,
    PROTO_F_SLAB_SIZE,
    PROTO_F_SLABS,
    PROTO_F_STATE,
    PROTO_F_SUPPORTED,
    PROTO_F_TEXT,
    PROTO_F_TOKEN,
    PROTO_F_TOTAL,
    PROTO_F_TOTALS,
    PROTO_F_TRANSPORT,
    PROTO_F_TYPE,
    PROTO_F_UID,
    PROTO_F_UNCHUNKABLE,
    PROTO_F_UPTIME_S,
    PROTO_F_USED,
    PROTO_F_UUID,
    PROTO_F_VALUE,
    PROTO_F_VERSION,
    PROTO_F_VERSIONS,
    PROTO_F_VIOLATION,
    PROTO_F_VMM,
    PROTO_F_WAIT_MS,
    PROTO_F_WAITED_MS,
    PROTO_F_WAITING,
    PROTO_F_WAITS,
    PROTO_F_WARNINGS,
    PROTO_F_WRITE_HIGH_WATER,
};
const unsigned proto_field_count = sizeof(proto_fields) / sizeof(proto_fields[0]);

const char *const proto_values[] = {
    PROTO_V_MEM_DEVICE,       PROTO_V_MEM_PINNED,
    PROTO_V_MEM_MAPPED,       PROTO_V_MEM_MANAGED,
    PROTO_V_MODE_ACTIVE,      PROTO_V_MODE_PASSIVE,
    PROTO_V_ALLOC_POOL,       PROTO_V_ALLOC_DIRECT,
    PROTO_V_ALLOC_ASYNC,      PROTO_V_BACKEND_SIM,
    PROTO_V_BACKEND_CUDA,     PROTO_V_SERVER,
    PROTO_V_MAP_FREE,         PROTO_V_MAP_USED,
    PROTO_V_MAP_LEASE,        PROTO_V_MAP_HELD,
    PROTO_V_GROUP_DEFAULT,    PROTO_V_LIMIT_MAX_QUEUED,
    PROTO_V_LIMIT_CLIENTS,    PROTO_V_LIMIT_PER_UID,
    PROTO_V_LIMIT_FILES,      PROTO_V_LIMIT_FILES_PER_UID,
    PROTO_V_TRANSPORT_VMM,    PROTO_V_TRANSPORT_IPC,
    PROTO_V_TRANSPORT_MEMFD,  PROTO_V_REASON_MEMORY,
    PROTO_V_LIMIT_MAX_LEASES, PROTO_V_REASON_CAP,
    PROTO_V_REASON_PARTITION, PROTO_V_REASON_CHUNKING,
    PROTO_V_REASON_OPERATOR,
};
const unsigned proto_value_count = sizeof(proto_values) / sizeof(proto_values[0]);

/* Every method's params (empty lists included: PROTOCOL.md need name
 * nothing for them), then the replies that have lists. */
#define PROTO_PARAMS_INFO_(id, name, flags)                                                        \
	{PROTO_M_##id, PROTO_F_PARAMS, PROTO_PARAM_TABLE(PROTO_##id##_PARAMS)},
const struct proto_message_info proto_messages[] = {
    PROTO_OPS(PROTO_PARAMS_INFO_){PROTO_M_QUEUE_REQUEST, PROTO_F_PARAMS,
                                  PROTO_PARAM_TABLE(PROTO_QUEUE_ITEM)},
    {PROTO_M_ALLOC, PROTO_F_RESULT, PROTO_MEMBER_TABLE(PROTO_GRANT_RESULT)},
    {PROTO_M_ALLOC, PROTO_F_RESULT, PROTO_MEMBER_TABLE(PROTO_HOST_RESULT)},
    {PROTO_M_LEASE, PROTO_F_RESULT, PROTO_MEMBER_TABLE(PROTO_GRANT_RESULT)},
    {PROTO_M_LEASE_CARVE, PROTO_F_RESULT, PROTO_MEMBER_TABLE(PROTO_CARVE_RESULT)},
};
const unsigned proto_message_count = sizeof(proto_messages) / sizeof(proto_messages[0]);

#define PROTO_EVENT_INFO_(id, data, items)                                                         \
	{PROTO_EV_##id, PROTO_MEMBER_TABLE(data), PROTO_MEMBER_TABLE(items)},
const struct proto_event_info proto_events[] = {PROTO_EVENTS(PROTO_EVENT_INFO_)};
const unsigned proto_event_count = sizeof(proto_events) / sizeof(proto_events[0]);
