/*
 * schema.h - the vocabulary of protocol v1, defined once for gpubrokerd and
 * libgpubroker: limits, error codes, methods, member names, event names and
 * the enumerated string values.
 *
 * Why a header of its own: both sides used to write every name as a string
 * literal, kept in step only by PROTOCOL.md. Here each name is written once,
 * as a string-literal macro (so it also works in static initialisers and in
 * string concatenation: a typed encoder can build "\"" PROTO_F_SIZE "\":"
 * at compile time), and listed in a table of its kind (schema.c; the op,
 * event and message tables are generated from the X-macro lists here),
 * which test-proto-schema checks against PROTOCOL.md.
 * This header includes no JSON library: the broker layer and a future
 * typed codec (one that skips the cJSON tree) can use it without cJSON.
 *
 * Adding a name: its #define below, its entry in the list of its kind
 * (PROTO_OPS, PROTO_EVENTS here; proto_fields[], proto_values[] in
 * schema.c), and its place in PROTOCOL.md. test-proto-schema fails on a
 * name that is in one and not the others.
 */
#ifndef GPB_PROTO_SCHEMA_H
#define GPB_PROTO_SCHEMA_H

#include <stdint.h> /* the bounds of the params lists */

#define PROTO_VERSION 1

/* ---- limits ---------------------------------------------------------------
 *
 * Every bound a message is held to, defined here only: the daemon, the
 * library, the CLI and their messages use these macros (PROTO_STR spells
 * one in a message), PROTOCOL.md states each once in its table of limits
 * and the Python package has them from python/gpubroker/_schema.py, which
 * tools/gen-pyschema.py writes from this header; test-proto-schema checks
 * both against PROTO_LIMITS below. Plain integer constants, so that each
 * serves in an array bound, a #if and a stringified message alike. */
#define PROTO_MAX_FRAME     65536    /* request bytes, including the terminating '\n' */
#define PROTO_MAX_REPLY     16777216 /* reply and event bytes (16 MiB): lists of clients grow */
#define PROTO_MAX_DEPTH     8        /* nesting of objects/arrays, top level = 1 */
#define PROTO_MAX_KEYS      64       /* members per object, elements per array */
#define PROTO_MAX_ID        64       /* bytes of a request id */
#define PROTO_MAX_NAME      64 /* bytes of instance, group, client, label, export, partition names */
#define PROTO_HANDLE_SIZE   64         /* bytes of an IPC handle (CUipcMemHandle shape) */
#define PROTO_TOKEN_HEX     64         /* hex digits of a partition token (256 bits) */
#define PROTO_MAX_DIMS      8          /* dimensions of an array request's shape */
#define PROTO_MAX_ELEM_SIZE 65536      /* bytes per element of an array request */
#define PROTO_MAX_REQUESTS  64         /* array requests in one queue_request or chunk_parameters */
#define PROTO_MAX_QUEUED    64         /* array requests queued on one instance */
#define PROTO_MAX_DEVICES   64         /* device indices are 0 to 63 */
#define PROTO_TOKEN_SIZE    32         /* bytes of a partition token (PROTO_TOKEN_HEX digits) */
#define PROTO_MAX_UID       4294967294 /* a uid parameter; (uid_t)-1 means none */
#define PROTO_MAX_LEASES    64         /* leases one instance holds at once */

/* alloc's bounds. Sizes are charged in granules, and an alignment is a
 * power of two from the granule to PROTO_MAX_ALIGNMENT (the slab
 * alignment: a larger one could not be promised inside a slab). */
#define PROTO_GRANULE       256
#define PROTO_MAX_ALIGNMENT 2097152  /* 2 MiB */
#define PROTO_MAX_WAIT_MS   86400000 /* a day: longer waits are surely mistakes */

/* The limits above, X(suffix, name): the macro is PROTO_<suffix>, the name
 * the one PROTOCOL.md's table of limits and _schema.py give it. */
#define PROTO_LIMITS(X)                                                                            \
	X(MAX_FRAME, "max_frame")                                                                  \
	X(MAX_REPLY, "max_reply")                                                                  \
	X(MAX_DEPTH, "max_depth")                                                                  \
	X(MAX_KEYS, "max_members")                                                                 \
	X(MAX_ID, "max_id")                                                                        \
	X(MAX_NAME, "max_name")                                                                    \
	X(HANDLE_SIZE, "handle_size")                                                              \
	X(TOKEN_HEX, "token_hex")                                                                  \
	X(MAX_DIMS, "max_dims")                                                                    \
	X(MAX_ELEM_SIZE, "max_elem_size")                                                          \
	X(MAX_REQUESTS, "max_requests")                                                            \
	X(MAX_QUEUED, "max_queued")                                                                \
	X(MAX_DEVICES, "max_devices")                                                              \
	X(TOKEN_SIZE, "token_size")                                                                \
	X(MAX_UID, "max_uid")                                                                      \
	X(MAX_LEASES, "max_leases")                                                                \
	X(GRANULE, "granule")                                                                      \
	X(MAX_ALIGNMENT, "max_alignment")                                                          \
	X(MAX_WAIT_MS, "max_wait_ms")

struct proto_limit_info {
	const char *name; /* as PROTOCOL.md's table of limits gives it */
	unsigned long value;
};

extern const struct proto_limit_info proto_limits[];
extern const unsigned proto_limit_count;

/* A limit (or any macro) as a string literal, for messages:
 * "a string of 1-" PROTO_STR(PROTO_MAX_NAME) " bytes". */
#define PROTO_STR_(x) #x
#define PROTO_STR(x)  PROTO_STR_(x)

/* What a name parameter must be, as -32602's messages say it. */
#define PROTO_NAME_EXPECTED "a string of 1-" PROTO_STR(PROTO_MAX_NAME) " bytes"

/* ---- error codes --------------------------------------------------------- */

/* Error codes carried in error.code: JSON-RPC 2.0's reserved ones plus the
 * broker's range -32000..-32099. X(suffix, code, name as PROTOCOL.md's error
 * table and the metrics' result label give it). */
#define PROTO_CODES(X)                                                                             \
	X(PARSE, -32700, "parse_error")               /* not JSON, bad UTF-8, NUL */               \
	X(INVALID_REQUEST, -32600, "invalid_request") /* not a request object, bad id, too big */  \
	X(METHOD, -32601, "method_not_found")         /* unknown method */                         \
	X(PARAMS, -32602, "invalid_params")           /* a parameter missing, wrong type/range */  \
	X(INTERNAL, -32603, "internal_error")         /* a bug or a host resource failure */       \
	X(STATE, -32000, "bad_state")                 /* call before hello, second hello */        \
	X(VERSION, -32001, "version_unsupported")     /* no common protocol version */             \
	X(NO_MEMORY, -32002, "out_of_memory")         /* the device (or the limit) is full */      \
	X(QUOTA, -32003, "quota_exceeded")            /* the instance's cap would be exceeded */   \
	X(NOT_FOUND, -32004, "not_found")             /* unknown id, or not this client's */       \
	X(PERMISSION, -32005, "permission_denied")    /* admin-only operation */                   \
	X(LIMIT, -32006, "limit_reached")             /* a per-connection or daemon limit */       \
	X(SHUTTING_DOWN, -32007, "shutting_down")     /* the daemon is stopping */                 \
	X(TIMEOUT, -32008, "timeout")                 /* a wait ran out */                         \
	X(NOT_SUPPORTED, -32009, "not_supported")     /* valid request the backend cannot serve */ \
	X(BACKEND, -32010, "backend_error")           /* the device or driver failed */            \
	X(EXISTS, -32011, "exists")                   /* the name is taken */

#define PROTO_CODE_ENUM_(id, code, name) PROTO_E_##id = (code),
enum proto_code { PROTO_CODES(PROTO_CODE_ENUM_) };
#undef PROTO_CODE_ENUM_

/* The name of an error code ("invalid_params"), "unknown_error" for others. */
const char *proto_code_name(int code);

/* ---- methods --------------------------------------------------------------- */

#define PROTO_M_HELLO             "hello"
#define PROTO_M_REGISTER          "register"
#define PROTO_M_UNREGISTER        "unregister"
#define PROTO_M_ALLOC             "alloc"
#define PROTO_M_FREE              "free"
#define PROTO_M_ATTACH            "attach"
#define PROTO_M_DETACH            "detach"
#define PROTO_M_MEM_INFO          "mem_info"
#define PROTO_M_STATS             "stats"
#define PROTO_M_STATUS            "status"
#define PROTO_M_CLIENTS           "clients"
#define PROTO_M_DEVICES           "devices"
#define PROTO_M_RELOAD            "reload"
#define PROTO_M_METRICS           "metrics"
#define PROTO_M_POLICY            "policy"
#define PROTO_M_SET_PROPORTION    "set_proportion"
#define PROTO_M_SET_AUTO          "set_auto"
#define PROTO_M_SET_GROUP         "set_group"
#define PROTO_M_GROUP_INFO        "group_info"
#define PROTO_M_SET_MODE          "set_mode"
#define PROTO_M_SET_LIMIT         "set_limit"
#define PROTO_M_QUEUE_REQUEST     "queue_request"
#define PROTO_M_ALLOCATE_QUEUE    "allocate_queue"
#define PROTO_M_CHUNK_PARAMETERS  "chunk_parameters"
#define PROTO_M_CLAIM             "claim"
#define PROTO_M_FREE_LABEL        "free_label"
#define PROTO_M_INVALIDATE_ALL    "invalidate_all"
#define PROTO_M_SET_ALLOCATOR     "set_allocator"
#define PROTO_M_EVICT             "evict"
#define PROTO_M_SELFCHECK         "selfcheck"
#define PROTO_M_EXPORT            "export"
#define PROTO_M_UNEXPORT          "unexport"
#define PROTO_M_OPEN              "open"
#define PROTO_M_INVALIDATE_DONE   "invalidate_done"
#define PROTO_M_PARTITION_CREATE  "partition_create"
#define PROTO_M_PARTITION_DESTROY "partition_destroy"
#define PROTO_M_PARTITIONS        "partitions"
#define PROTO_M_GOODBYE           "goodbye"
#define PROTO_M_RELEASE           "release"
#define PROTO_M_LEASE             "lease"
#define PROTO_M_LEASE_RETURN      "lease_return"
#define PROTO_M_LEASE_CARVE       "lease_carve"
#define PROTO_M_RECALL_DONE       "recall_done"
#define PROTO_M_TRIM              "trim"
#define PROTO_M_DEVICE_MAP        "device_map"

enum proto_op_flags {
	PROTO_OPF_BEFORE_HELLO = 1u << 0, /* allowed before the handshake (hello only) */
	PROTO_OPF_ADMIN = 1u << 1, /* root or gpubroker-admin only: "(admin)" in PROTOCOL.md */
};

/* The one table of operations: X(suffix, flags), the method name being
 * PROTO_M_<suffix> and the enum PROTO_OP_<suffix>. The order is the enum's
 * (metrics count per op in it); names are case-sensitive. */
#define PROTO_OPS(X)                                                                               \
	X(HELLO, hello, PROTO_OPF_BEFORE_HELLO)                                                    \
	X(REGISTER, register_instance, 0) /* "register" is a C keyword */                          \
	X(UNREGISTER, unregister, 0)                                                               \
	X(ALLOC, alloc, 0)                                                                         \
	X(FREE, free, 0)                                                                           \
	X(ATTACH, attach, 0)                                                                       \
	X(DETACH, detach, 0)                                                                       \
	X(MEM_INFO, mem_info, 0)                                                                   \
	X(STATS, stats, 0)                                                                         \
	X(STATUS, status, 0)                                                                       \
	X(CLIENTS, clients, 0)                                                                     \
	X(DEVICES, devices, 0)                                                                     \
	X(RELOAD, reload, PROTO_OPF_ADMIN)                                                         \
	X(METRICS, metrics, 0)                                                                     \
	X(POLICY, policy, 0)                                                                       \
	X(SET_PROPORTION, set_proportion, 0)                                                       \
	X(SET_AUTO, set_auto, 0)                                                                   \
	X(SET_GROUP, set_group, 0)                                                                 \
	X(GROUP_INFO, group_info, 0)                                                               \
	X(SET_MODE, set_mode, PROTO_OPF_ADMIN)                                                     \
	X(SET_LIMIT, set_limit, PROTO_OPF_ADMIN)                                                   \
	X(QUEUE_REQUEST, queue_request, 0)                                                         \
	X(ALLOCATE_QUEUE, allocate_queue, 0)                                                       \
	X(CHUNK_PARAMETERS, chunk_parameters, 0)                                                   \
	X(CLAIM, claim, 0)                                                                         \
	X(FREE_LABEL, free_label, 0)                                                               \
	X(INVALIDATE_ALL, invalidate_all, PROTO_OPF_ADMIN)                                         \
	X(SET_ALLOCATOR, set_allocator, PROTO_OPF_ADMIN)                                           \
	X(EVICT, evict, PROTO_OPF_ADMIN)                                                           \
	X(SELFCHECK, selfcheck, PROTO_OPF_ADMIN)                                                   \
	X(EXPORT, export, 0)                                                                       \
	X(UNEXPORT, unexport, 0)                                                                   \
	X(OPEN, open, 0)                                                                           \
	X(INVALIDATE_DONE, invalidate_done, 0)                                                     \
	X(PARTITION_CREATE, partition_create, PROTO_OPF_ADMIN)                                     \
	X(PARTITION_DESTROY, partition_destroy, PROTO_OPF_ADMIN)                                   \
	X(PARTITIONS, partitions, 0)                                                               \
	X(GOODBYE, goodbye, 0)                                                                     \
	X(RELEASE, release, 0)                                                                     \
	X(LEASE, lease, 0)                                                                         \
	X(LEASE_RETURN, lease_return, 0)                                                           \
	X(LEASE_CARVE, lease_carve, 0)                                                             \
	X(RECALL_DONE, recall_done, 0)                                                             \
	X(TRIM, trim, PROTO_OPF_ADMIN)                                                             \
	X(DEVICE_MAP, device_map, PROTO_OPF_ADMIN)

#define PROTO_OP_ENUM_(id, name, flags) PROTO_OP_##id,
enum proto_op { PROTO_OPS(PROTO_OP_ENUM_) PROTO_OP_COUNT };
#undef PROTO_OP_ENUM_

struct proto_op_info {
	const char *name; /* PROTO_M_* */
	unsigned flags;   /* enum proto_op_flags */
};

extern const struct proto_op_info proto_ops[PROTO_OP_COUNT];

/* Returns the operation for a method name, or -ENOENT. */
int proto_op_lookup(const char *name);

/* ---- member names -------------------------------------------------------- */

/*
 * Every member name of every object on the wire: the envelope (id, method,
 * params, result, error, code, message, data, event), request params, reply
 * results and their nested objects, error data and event data. One
 * namespace, because many names serve in several messages ("id" is the
 * request id, free's parameter and alloc's result); per-message lists
 * below say which message carries which.
 */
#define PROTO_F_ALIGNMENT          "alignment"
#define PROTO_F_ALLOCATIONS        "allocations"
#define PROTO_F_ALLOCATOR          "allocator"
#define PROTO_F_ALLOCS             "allocs"
#define PROTO_F_APPLIED            "applied"
#define PROTO_F_ARRAYS             "arrays"
#define PROTO_F_ATTACHMENTS        "attachments"
#define PROTO_F_AUTO               "auto"
#define PROTO_F_AUTO_CAP           "auto_cap"
#define PROTO_F_AUTO_INSTANCES     "auto_instances"
#define PROTO_F_AVAILABLE          "available"
#define PROTO_F_ASKED              "asked"
#define PROTO_F_AXIS               "axis"
#define PROTO_F_AXIS_LENGTH        "axis_length"
#define PROTO_F_BACKEND            "backend"
#define PROTO_F_BACKEND_ERROR      "backend_error"
#define PROTO_F_BLOCKS             "blocks"
#define PROTO_F_BYTES              "bytes"
#define PROTO_F_CAP                "cap"
#define PROTO_F_CAPACITY           "capacity"
#define PROTO_F_CHUNK_BYTES        "chunk_bytes"
#define PROTO_F_CHUNK_LENGTH       "chunk_length"
#define PROTO_F_CHUNKS             "chunks"
#define PROTO_F_CLIENT             "client"
#define PROTO_F_CLIENTS            "clients"
#define PROTO_F_CODE               "code"
#define PROTO_F_COMPUTE_CAPABILITY "compute_capability"
#define PROTO_F_CONNECTED_S        "connected_s"
#define PROTO_F_DATA               "data"
#define PROTO_F_DEDICATED          "dedicated"
#define PROTO_F_DEVICE             "device"
#define PROTO_F_DEVICE_FREE        "device_free"
#define PROTO_F_DEVICE_UUID        "device_uuid"
#define PROTO_F_DEVICES            "devices"
#define PROTO_F_ELEM_SIZE          "elem_size"
#define PROTO_F_EPOCH              "epoch"
#define PROTO_F_ERROR              "error"
#define PROTO_F_EVENT              "event"
#define PROTO_F_EVICTIONS          "evictions"
#define PROTO_F_EXPORTS            "exports"
#define PROTO_F_FD                 "fd"
#define PROTO_F_FENCED             "fenced"
#define PROTO_F_FIELD              "field"
#define PROTO_F_FRACTION           "fraction"
#define PROTO_F_FREE               "free"
#define PROTO_F_FREE_BLOCKS        "free_blocks"
#define PROTO_F_FREED              "freed"
#define PROTO_F_FREES              "frees"
#define PROTO_F_GHOSTS             "ghosts"
#define PROTO_F_GID                "gid"
#define PROTO_F_GROUP              "group"
#define PROTO_F_GROUPED            "grouped"
#define PROTO_F_HANDLE             "handle"
#define PROTO_F_HEAP_BYTES         "heap_bytes"
#define PROTO_F_HELLO_TIMEOUT_MS   "hello_timeout_ms"
#define PROTO_F_HOST_ALLOCATIONS   "host_allocations"
#define PROTO_F_HOST_USED          "host_used"
#define PROTO_F_ID                 "id"
#define PROTO_F_IDLE_S             "idle_s"
#define PROTO_F_IN_USE             "in_use"
#define PROTO_F_IN_USE_AT_START    "in_use_at_start"
#define PROTO_F_INSTANCE           "instance"
#define PROTO_F_INSTANCES          "instances"
#define PROTO_F_INVALIDATIONS      "invalidations"
#define PROTO_F_KEEP               "keep"
#define PROTO_F_KEEP_SLABS         "keep_slabs"
#define PROTO_F_LABEL              "label"
#define PROTO_F_LARGEST_FREE       "largest_free"
#define PROTO_F_LEASE              "lease"
#define PROTO_F_LEASED             "leased"
#define PROTO_F_LEASES             "leases"
#define PROTO_F_LIMIT              "limit"
#define PROTO_F_LIMIT_FRACTION     "limit_fraction"
#define PROTO_F_LIMITS             "limits"
#define PROTO_F_LIVE               "live"
#define PROTO_F_MANUAL             "manual"
#define PROTO_F_MANUAL_INSTANCES   "manual_instances"
#define PROTO_F_MAX_ALLOCATIONS    "max_allocations"
#define PROTO_F_MAX_DEPTH          "max_depth"
#define PROTO_F_MAX_FRAME          "max_frame"
#define PROTO_F_MAX_ID             "max_id"
#define PROTO_F_MAX_INFLIGHT       "max_inflight"
#define PROTO_F_MAX_INSTANCES      "max_instances"
#define PROTO_F_MAX_MEMBERS        "max_members"
#define PROTO_F_MAX_NAME           "max_name"
#define PROTO_F_MAX_REPLY          "max_reply"
#define PROTO_F_MEMBERS            "members"
#define PROTO_F_MESSAGE            "message"
#define PROTO_F_METHOD             "method"
#define PROTO_F_MIN_AUTO_SHARE     "min_auto_share"
#define PROTO_F_MODE               "mode"
#define PROTO_F_NAME               "name"
#define PROTO_F_NEEDS_RESTART      "needs_restart"
#define PROTO_F_OFFSET             "offset"
#define PROTO_F_OK                 "ok"
#define PROTO_F_OOMS               "ooms"
#define PROTO_F_ORPHANED           "orphaned"
#define PROTO_F_ORPHANS            "orphans"
#define PROTO_F_OTHERS             "others"
#define PROTO_F_OWN                "own"
#define PROTO_F_OWNER              "owner"
#define PROTO_F_PARAMS             "params"
#define PROTO_F_PARTITION          "partition"
#define PROTO_F_PARTITIONS         "partitions"
#define PROTO_F_PARTING            "parting"
#define PROTO_F_PEAK               "peak"
#define PROTO_F_PID                "pid"
#define PROTO_F_POOL               "pool"
#define PROTO_F_POOL_ID            "pool_id"
#define PROTO_F_PREVIOUS           "previous"
#define PROTO_F_PROPORTION         "proportion"
#define PROTO_F_QUEUED             "queued"
#define PROTO_F_REASON             "reason"
#define PROTO_F_RECALLABLE         "recallable"
#define PROTO_F_RECALLS            "recalls"
#define PROTO_F_RECALLS_ANSWERED   "recalls_answered"
#define PROTO_F_RECALLS_PENDING    "recalls_pending"
#define PROTO_F_RECALLS_SENT       "recalls_sent"
#define PROTO_F_RECALLS_TIMED_OUT  "recalls_timed_out"
#define PROTO_F_RECLAIMED          "reclaimed"
#define PROTO_F_REPLY              "reply"
#define PROTO_F_REQUEST_BYTES      "request_bytes"
#define PROTO_F_REQUESTED          "requested"
#define PROTO_F_REQUESTS           "requests"
#define PROTO_F_RESERVE            "reserve"
#define PROTO_F_RESERVED           "reserved"
#define PROTO_F_RESULT             "result"
#define PROTO_F_RETIRED            "retired"
#define PROTO_F_SERVER             "server"
#define PROTO_F_SERVER_VERSION     "server_version"
#define PROTO_F_SESSION            "session"
#define PROTO_F_SESSIONS           "sessions"
#define PROTO_F_SHAPE              "shape"
#define PROTO_F_SHARE              "share"
#define PROTO_F_SIZE               "size"
#define PROTO_F_SLAB               "slab"
#define PROTO_F_SLAB_SIZE          "slab_size"
#define PROTO_F_SLABS              "slabs"
#define PROTO_F_STATE              "state"
#define PROTO_F_SUPPORTED          "supported"
#define PROTO_F_TEXT               "text"
#define PROTO_F_TOKEN              "token"
#define PROTO_F_TOTAL              "total"
#define PROTO_F_TOTALS             "totals"
#define PROTO_F_TRANSPORT          "transport"
#define PROTO_F_TYPE               "type"
#define PROTO_F_UID                "uid"
#define PROTO_F_UNCHUNKABLE        "unchunkable"
#define PROTO_F_UPTIME_S           "uptime_s"
#define PROTO_F_USED               "used"
#define PROTO_F_UUID               "uuid"
#define PROTO_F_VALUE              "value"
#define PROTO_F_VERSION            "version"
#define PROTO_F_VERSIONS           "versions"
#define PROTO_F_VIOLATION          "violation"
#define PROTO_F_VMM                "vmm"
#define PROTO_F_WAIT_MS            "wait_ms"
#define PROTO_F_WAITED_MS          "waited_ms"
#define PROTO_F_WAITING            "waiting"
#define PROTO_F_WAITS              "waits"
#define PROTO_F_WARNINGS           "warnings"
#define PROTO_F_WRITE_HIGH_WATER   "write_high_water"

/* The names above, in schema.c's table (test-proto-schema checks that it
 * lists every PROTO_F_ macro). */
extern const char *const proto_fields[];
extern const unsigned proto_field_count;

/* ---- typed messages -------------------------------------------------------- */

/*
 * What one member holds, as the proto_get_* and proto_add_* codecs read
 * and write it; and whether a message must carry it.
 */
enum proto_kind {
	PROTO_KIND_ID64,   /* 16 lowercase hex digits */
	PROTO_KIND_U64,    /* a decimal string */
	PROTO_KIND_INT,    /* a JSON number, whole */
	PROTO_KIND_NUMBER, /* a JSON number */
	PROTO_KIND_STRING,
	PROTO_KIND_BOOL,
	PROTO_KIND_TRUE, /* present and true, or absent */
	PROTO_KIND_HEX,  /* PROTO_HANDLE_SIZE bytes as hex digits */
	PROTO_KIND_ARRAY,
	/* Request parameters only (params.h has their C types): */
	PROTO_KIND_ALIGN,     /* U64, and a power of two */
	PROTO_KIND_BYTES,     /* U64, or a whole JSON number */
	PROTO_KIND_SHARE,     /* a JSON number in (0, 1] */
	PROTO_KIND_PNAME,     /* STRING of PROTO_NAME_CHARS (a partition's name) */
	PROTO_KIND_MEMORY,    /* one of PROTO_MEMORY_VALUES, as its index */
	PROTO_KIND_MODE,      /* one of PROTO_MODE_VALUES */
	PROTO_KIND_ALLOCATOR, /* one of PROTO_ALLOCATOR_VALUES */
	PROTO_KIND_TOKEN,     /* PROTO_TOKEN_SIZE bytes as hex digits */
	PROTO_KIND_DEVICE,    /* a device index (INT) or its UUID (STRING) */
	PROTO_KIND_DEVICES,   /* a non-empty ARRAY of DEVICE */
	PROTO_KIND_VERSIONS,  /* an ARRAY of whole numbers */
	PROTO_KIND_SHAPE,     /* an ARRAY of 1-PROTO_MAX_DIMS whole numbers, each at least 1 */
	PROTO_KIND_QUEUE,     /* an ARRAY of 1-PROTO_MAX_REQUESTS PROTO_QUEUE_ITEM objects */
};

enum proto_presence {
	PROTO_REQUIRED,
	PROTO_OPTIONAL, /* absent: the default PROTOCOL.md gives */
};

/*
 * The messages' member lists. A reply's and an event's are X(field suffix,
 * PROTO_KIND_ suffix, presence), in the order the daemon writes them;
 * test-dispatch checks the daemon's replies against them.
 *
 * A request's params are X(field suffix, C member, PROTO_KIND_ suffix,
 * presence, lo, hi, expected): proto/params.h makes each method's params
 * struct from its list (proto_<name>_params, a has_<member> flag beside
 * each member), and proto/params.c decodes and checks every request
 * against it, in the list's order, the hot path's included (codec.h). lo
 * and hi bound a number's value (U64, INT, BYTES, ALIGN) or a string's
 * bytes (STRING, PNAME); expected is what a refusal says the value must be.
 * test-proto-schema checks each list against its section of PROTOCOL.md.
 * Every method has a list (PROTO_<suffix>_PARAMS), empty for none.
 */
#define PROTO_NO_PARAMS(X)

/* The words of the common refusals. */
#define PROTO_EXPECT_ID64   "16 lowercase hex digits"
#define PROTO_EXPECT_BOOL   "a boolean"
#define PROTO_EXPECT_SHARE  "a number in (0, 1]"
#define PROTO_EXPECT_UID    "a uid (0 to " PROTO_STR(PROTO_MAX_UID) ")"
#define PROTO_EXPECT_DEVICE "a device index or UUID"

#define PROTO_HELLO_PARAMS(X)                                                                      \
	X(VERSIONS, versions, VERSIONS, PROTO_REQUIRED, 0, 0, "an array of integers")              \
	X(CLIENT, client, STRING, PROTO_OPTIONAL, 1, PROTO_MAX_NAME, PROTO_NAME_EXPECTED)          \
	X(KEEP_SLABS, keep_slabs, BOOL, PROTO_OPTIONAL, 0, 0, PROTO_EXPECT_BOOL)                   \
	X(TOKEN, token, TOKEN, PROTO_OPTIONAL, 0, 0,                                               \
	  PROTO_STR(PROTO_TOKEN_HEX) " lowercase hex digits")
#define PROTO_REGISTER_PARAMS(X)                                                                   \
	X(NAME, name, STRING, PROTO_REQUIRED, 1, PROTO_MAX_NAME, PROTO_NAME_EXPECTED)              \
	X(DEVICE, device, DEVICE, PROTO_OPTIONAL, 0, 0, PROTO_EXPECT_DEVICE)                       \
	X(PROPORTION, proportion, SHARE, PROTO_OPTIONAL, 0, 0, PROTO_EXPECT_SHARE)                 \
	X(GROUP, group, STRING, PROTO_OPTIONAL, 1, PROTO_MAX_NAME, PROTO_NAME_EXPECTED)
#define PROTO_INSTANCE_PARAMS(X)                                                                   \
	X(INSTANCE, instance, ID64, PROTO_REQUIRED, 0, 0, PROTO_EXPECT_ID64)
#define PROTO_UNREGISTER_PARAMS PROTO_INSTANCE_PARAMS
#define PROTO_ALLOC_PARAMS(X)                                                                      \
	X(INSTANCE, instance, ID64, PROTO_REQUIRED, 0, 0, PROTO_EXPECT_ID64)                       \
	X(SIZE, size, U64, PROTO_REQUIRED, 1, UINT64_MAX,                                          \
	  "a decimal string of 1-20 digits, at least 1")                                           \
	X(ALIGNMENT, alignment, ALIGN, PROTO_OPTIONAL, PROTO_GRANULE, PROTO_MAX_ALIGNMENT,         \
	  "a power of two from " PROTO_STR(PROTO_GRANULE) " to " PROTO_STR(PROTO_MAX_ALIGNMENT))   \
	X(TYPE, type, MEMORY, PROTO_OPTIONAL, 0, 0, PROTO_MEMORY_EXPECTED)                         \
	X(WAIT_MS, wait_ms, INT, PROTO_OPTIONAL, 0, PROTO_MAX_WAIT_MS,                             \
	  "an integer from 0 to " PROTO_STR(PROTO_MAX_WAIT_MS) " (milliseconds)")
/* free (and detach); the result is {}, none at all for a free with
 * "reply": false that succeeds. */
#define PROTO_FREE_PARAMS(X)                                                                       \
	X(ID, id, ID64, PROTO_REQUIRED, 0, 0, PROTO_EXPECT_ID64)                                   \
	X(REPLY, reply, BOOL, PROTO_OPTIONAL, 0, 0, PROTO_EXPECT_BOOL)
#define PROTO_ID_PARAMS(X)  X(ID, id, ID64, PROTO_REQUIRED, 0, 0, PROTO_EXPECT_ID64)
#define PROTO_ATTACH_PARAMS PROTO_ID_PARAMS
#define PROTO_DETACH_PARAMS PROTO_ID_PARAMS
#define PROTO_CLAIM_PARAMS  PROTO_ID_PARAMS
#define PROTO_MEM_INFO_PARAMS(X)                                                                   \
	X(INSTANCE, instance, ID64, PROTO_OPTIONAL, 0, 0, PROTO_EXPECT_ID64)
#define PROTO_STATS_PARAMS(X)       X(DEVICE, device, DEVICE, PROTO_OPTIONAL, 0, 0, PROTO_EXPECT_DEVICE)
#define PROTO_DEVICE_MAP_PARAMS     PROTO_STATS_PARAMS
#define PROTO_STATUS_PARAMS         PROTO_NO_PARAMS
#define PROTO_CLIENTS_PARAMS        PROTO_NO_PARAMS
#define PROTO_DEVICES_PARAMS        PROTO_NO_PARAMS
#define PROTO_RELOAD_PARAMS         PROTO_NO_PARAMS
#define PROTO_METRICS_PARAMS        PROTO_NO_PARAMS
#define PROTO_POLICY_PARAMS         PROTO_NO_PARAMS
#define PROTO_INVALIDATE_ALL_PARAMS PROTO_NO_PARAMS
#define PROTO_SELFCHECK_PARAMS      PROTO_NO_PARAMS
#define PROTO_PARTITIONS_PARAMS     PROTO_NO_PARAMS
#define PROTO_GOODBYE_PARAMS        PROTO_NO_PARAMS
#define PROTO_SET_PROPORTION_PARAMS(X)                                                             \
	X(INSTANCE, instance, ID64, PROTO_REQUIRED, 0, 0, PROTO_EXPECT_ID64)                       \
	X(PROPORTION, proportion, SHARE, PROTO_REQUIRED, 0, 0, PROTO_EXPECT_SHARE)
#define PROTO_SET_AUTO_PARAMS PROTO_INSTANCE_PARAMS
#define PROTO_SET_GROUP_PARAMS(X)                                                                  \
	X(INSTANCE, instance, ID64, PROTO_REQUIRED, 0, 0, PROTO_EXPECT_ID64)                       \
	X(GROUP, group, STRING, PROTO_REQUIRED, 1, PROTO_MAX_NAME, PROTO_NAME_EXPECTED)
#define PROTO_GROUP_INFO_PARAMS(X)                                                                 \
	X(GROUP, group, STRING, PROTO_REQUIRED, 1, PROTO_MAX_NAME, PROTO_NAME_EXPECTED)            \
	X(UID, uid, INT, PROTO_OPTIONAL, 0, PROTO_MAX_UID, PROTO_EXPECT_UID)
#define PROTO_SET_MODE_PARAMS(X)                                                                   \
	X(MODE, mode, MODE, PROTO_REQUIRED, 0, 0,                                                  \
	  PROTO_QUOTED(PROTO_V_MODE_ACTIVE) " or " PROTO_QUOTED(PROTO_V_MODE_PASSIVE))
#define PROTO_SET_LIMIT_PARAMS(X)                                                                  \
	X(DEVICE, device, DEVICE, PROTO_OPTIONAL, 0, 0, PROTO_EXPECT_DEVICE)                       \
	X(SIZE, size, U64, PROTO_OPTIONAL, 0, UINT64_MAX, "a decimal string of 1-20 digits")       \
	X(FRACTION, fraction, SHARE, PROTO_OPTIONAL, 0, 0, PROTO_EXPECT_SHARE)
#define PROTO_QUEUE_REQUEST_PARAMS(X)                                                              \
	X(INSTANCE, instance, ID64, PROTO_REQUIRED, 0, 0, PROTO_EXPECT_ID64)                       \
	X(REQUESTS, requests, QUEUE, PROTO_REQUIRED, 1, PROTO_MAX_REQUESTS,                        \
	  "an array of 1-" PROTO_STR(PROTO_MAX_REQUESTS) " request objects")
/* One element of queue_request's and chunk_parameters' "requests". */
#define PROTO_QUEUE_ITEM(X)                                                                        \
	X(LABEL, label, STRING, PROTO_REQUIRED, 1, PROTO_MAX_NAME, PROTO_NAME_EXPECTED)            \
	X(SHAPE, shape, SHAPE, PROTO_REQUIRED, 1, PROTO_MAX_DIMS,                                  \
	  "an array of 1-" PROTO_STR(PROTO_MAX_DIMS) " positive integers")                         \
	X(ELEM_SIZE, elem_size, INT, PROTO_REQUIRED, 1, PROTO_MAX_ELEM_SIZE,                       \
	  "an integer from 1 to " PROTO_STR(PROTO_MAX_ELEM_SIZE))                                  \
	X(AXIS, axis, INT, PROTO_OPTIONAL, 0, PROTO_MAX_DIMS - 1, "a dimension of the shape")      \
	X(UNCHUNKABLE, unchunkable, BOOL, PROTO_OPTIONAL, 0, 0, PROTO_EXPECT_BOOL)                 \
	X(TYPE, type, MEMORY, PROTO_OPTIONAL, 0, 0, PROTO_MEMORY_EXPECTED)
/* own: only @instance's own queue (cubie 0.17's rule: the triggering
 * owner's requests; the others' stay queued until their owner triggers). */
#define PROTO_ALLOCATE_QUEUE_PARAMS(X)                                                             \
	X(INSTANCE, instance, ID64, PROTO_REQUIRED, 0, 0, PROTO_EXPECT_ID64)                       \
	X(OWN, own, BOOL, PROTO_OPTIONAL, 0, 0, PROTO_EXPECT_BOOL)
#define PROTO_CHUNK_PARAMETERS_PARAMS(X)                                                           \
	X(REQUESTS, requests, QUEUE, PROTO_REQUIRED, 1, PROTO_MAX_REQUESTS,                        \
	  "an array of 1-" PROTO_STR(PROTO_MAX_REQUESTS) " request objects")                       \
	X(GROUP, group, STRING, PROTO_OPTIONAL, 1, PROTO_MAX_NAME, PROTO_NAME_EXPECTED)            \
	X(AVAILABLE, available, U64, PROTO_OPTIONAL, 0, UINT64_MAX,                                \
	  "a decimal string of 1-20 digits")                                                       \
	X(CHUNK_LENGTH, chunk_length, INT, PROTO_OPTIONAL, 1, INT64_MAX, "a positive integer")     \
	X(AXIS_LENGTH, axis_length, INT, PROTO_OPTIONAL, 1, INT64_MAX, "a positive integer")       \
	X(UID, uid, INT, PROTO_OPTIONAL, 0, PROTO_MAX_UID, PROTO_EXPECT_UID)
#define PROTO_FREE_LABEL_PARAMS(X)                                                                 \
	X(LABEL, label, STRING, PROTO_REQUIRED, 1, PROTO_MAX_NAME, PROTO_NAME_EXPECTED)            \
	X(INSTANCE, instance, ID64, PROTO_OPTIONAL, 0, 0, PROTO_EXPECT_ID64)
#define PROTO_SET_ALLOCATOR_PARAMS(X)                                                              \
	X(ALLOCATOR, allocator, ALLOCATOR, PROTO_REQUIRED, 0, 0,                                   \
	  PROTO_QUOTED(PROTO_V_ALLOC_POOL) ", " PROTO_QUOTED(                                      \
	      PROTO_V_ALLOC_DIRECT) " or " PROTO_QUOTED(PROTO_V_ALLOC_ASYNC))
#define PROTO_EVICT_PARAMS(X) X(SESSION, session, ID64, PROTO_REQUIRED, 0, 0, PROTO_EXPECT_ID64)
#define PROTO_EXPORT_PARAMS(X)                                                                     \
	X(ID, id, ID64, PROTO_REQUIRED, 0, 0, PROTO_EXPECT_ID64)                                   \
	X(NAME, name, STRING, PROTO_REQUIRED, 1, PROTO_MAX_NAME, PROTO_NAME_EXPECTED)              \
	X(UID, uid, INT, PROTO_OPTIONAL, 0, PROTO_MAX_UID, PROTO_EXPECT_UID)
#define PROTO_UNEXPORT_PARAMS(X)                                                                   \
	X(NAME, name, STRING, PROTO_REQUIRED, 1, PROTO_MAX_NAME, PROTO_NAME_EXPECTED)
#define PROTO_OPEN_PARAMS(X)                                                                       \
	X(NAME, name, STRING, PROTO_REQUIRED, 1, PROTO_MAX_NAME, PROTO_NAME_EXPECTED)              \
	X(OWNER, owner, INT, PROTO_OPTIONAL, 0, PROTO_MAX_UID, PROTO_EXPECT_UID)
#define PROTO_INVALIDATE_DONE_PARAMS(X)                                                            \
	X(EPOCH, epoch, U64, PROTO_REQUIRED, 1, UINT64_MAX,                                        \
	  "the u64 epoch of an invalidate event sent")
#define PROTO_PARTITION_EXPECTED                                                                   \
	"a string of 1-" PROTO_STR(PROTO_MAX_NAME) " bytes of A-Z, a-z, 0-9, '.', '_' and '-'"
#define PROTO_PARTITION_CREATE_PARAMS(X)                                                           \
	X(NAME, name, PNAME, PROTO_REQUIRED, 1, PROTO_MAX_NAME, PROTO_PARTITION_EXPECTED)          \
	X(UID, uid, INT, PROTO_REQUIRED, 0, PROTO_MAX_UID, PROTO_EXPECT_UID)                       \
	X(SIZE, size, BYTES, PROTO_REQUIRED, 1, UINT64_MAX,                                        \
	  "bytes per device, at least 1 (a decimal string)")                                       \
	X(DEVICES, devices, DEVICES, PROTO_OPTIONAL, 1, PROTO_MAX_DEVICES,                         \
	  "a non-empty array of device indices or UUIDs")
#define PROTO_PARTITION_DESTROY_PARAMS(X)                                                          \
	X(NAME, name, PNAME, PROTO_REQUIRED, 1, PROTO_MAX_NAME, PROTO_PARTITION_EXPECTED)
#define PROTO_RELEASE_PARAMS(X) X(SLAB, slab, ID64, PROTO_REQUIRED, 0, 0, PROTO_EXPECT_ID64)
/* Leases: whole ranges of a slab a library sub-allocates in itself. in_use
 * is what it says it uses of its leases of the instance, for the figures. */
#define PROTO_EXPECT_BYTES "a decimal string of 1-20 digits (bytes)"
#define PROTO_LEASE_PARAMS(X)                                                                      \
	X(INSTANCE, instance, ID64, PROTO_REQUIRED, 0, 0, PROTO_EXPECT_ID64)                       \
	X(SIZE, size, U64, PROTO_REQUIRED, 1, UINT64_MAX,                                          \
	  "a decimal string of 1-20 digits, at least 1")                                           \
	X(IN_USE, in_use, U64, PROTO_OPTIONAL, 0, UINT64_MAX, PROTO_EXPECT_BYTES)
#define PROTO_LEASE_RETURN_PARAMS(X)                                                               \
	X(LEASE, lease, ID64, PROTO_REQUIRED, 0, 0, PROTO_EXPECT_ID64)                             \
	X(IN_USE, in_use, U64, PROTO_OPTIONAL, 0, UINT64_MAX, PROTO_EXPECT_BYTES)                  \
	X(REPLY, reply, BOOL, PROTO_OPTIONAL, 0, 0, PROTO_EXPECT_BOOL)
/* Recall (issue 28): the library's answer to a recall event, and the
 * operator's trim of idle leases. */
#define PROTO_RECALL_DONE_PARAMS(X)                                                                \
	X(EPOCH, epoch, U64, PROTO_REQUIRED, 1, UINT64_MAX,                                        \
	  "the u64 epoch of a recall event sent")                                                  \
	X(BYTES, bytes, U64, PROTO_REQUIRED, 0, UINT64_MAX, PROTO_EXPECT_BYTES)
#define PROTO_TRIM_PARAMS(X) X(SESSION, session, ID64, PROTO_OPTIONAL, 0, 0, PROTO_EXPECT_ID64)
#define PROTO_LEASE_CARVE_PARAMS(X)                                                                \
	X(LEASE, lease, ID64, PROTO_REQUIRED, 0, 0, PROTO_EXPECT_ID64)                             \
	X(OFFSET, offset, U64, PROTO_REQUIRED, 0, UINT64_MAX,                                      \
	  "a decimal string of 1-20 digits, a multiple of " PROTO_STR(PROTO_GRANULE))              \
	X(SIZE, size, U64, PROTO_REQUIRED, 1, UINT64_MAX,                                          \
	  "a decimal string of 1-20 digits, at least 1")

/* alloc of device memory, attach, open, claim and lease: the grant. handle and
 * device_uuid come the first time a connection is given the slab, fd with
 * a descriptor (sim, or async), pool with the device's memory pool and
 * pool_id with pool: the pool's name (the driver's pool descriptors all
 * name one file, so the client tells pools apart by it). */
#define PROTO_GRANT_RESULT(X)                                                                      \
	X(ID, ID64, PROTO_REQUIRED)                                                                \
	X(DEVICE, INT, PROTO_REQUIRED)                                                             \
	X(SLAB, ID64, PROTO_REQUIRED)                                                              \
	X(SLAB_SIZE, U64, PROTO_REQUIRED)                                                          \
	X(OFFSET, U64, PROTO_REQUIRED)                                                             \
	X(SIZE, U64, PROTO_REQUIRED)                                                               \
	X(HANDLE, HEX, PROTO_OPTIONAL)                                                             \
	X(DEVICE_UUID, STRING, PROTO_OPTIONAL)                                                     \
	X(FD, TRUE, PROTO_OPTIONAL)                                                                \
	X(POOL, TRUE, PROTO_OPTIONAL)                                                              \
	X(POOL_ID, ID64, PROTO_OPTIONAL)                                                           \
	X(KEEP, TRUE, PROTO_OPTIONAL)

/* lease_carve: the daemon allocation made inside the lease, and its size
 * (rounded up to the granule). */
#define PROTO_CARVE_RESULT(X)                                                                      \
	X(ID, ID64, PROTO_REQUIRED)                                                                \
	X(SIZE, U64, PROTO_REQUIRED)

/* alloc of host memory ("pinned", "mapped"), and the claim of a host array. */
#define PROTO_HOST_RESULT(X)                                                                       \
	X(ID, ID64, PROTO_REQUIRED)                                                                \
	X(TYPE, STRING, PROTO_REQUIRED)                                                            \
	X(SIZE, U64, PROTO_REQUIRED)                                                               \
	X(FD, TRUE, PROTO_REQUIRED)

/* A member of a message list, for tables and tests. */
struct proto_member {
	const char *name; /* PROTO_F_* */
	enum proto_kind kind;
	enum proto_presence presence;
};

/* A message list as a table of struct proto_member ending with a NULL
 * name: PROTO_MEMBER_TABLE(PROTO_GRANT_RESULT). */
#define PROTO_MEMBER_(id, kind, presence) {PROTO_F_##id, PROTO_KIND_##kind, (presence)},
#define PROTO_MEMBER_TABLE(list)          ((const struct proto_member[]){list(PROTO_MEMBER_){NULL, 0, 0}})
/* The same of a params list (its C member and bounds left out). */
#define PROTO_PARAM_MEMBER_(id, cname, kind, presence, lo, hi, expected)                           \
	{PROTO_F_##id, PROTO_KIND_##kind, (presence)},
#define PROTO_PARAM_TABLE(list)                                                                    \
	((const struct proto_member[]){list(PROTO_PARAM_MEMBER_){NULL, 0, 0}})

/* The lists above as tables; part is
 * "params" or "result", method the PROTO_M_* whose section of PROTOCOL.md
 * documents it. */
struct proto_message_info {
	const char *method;
	const char *part;
	const struct proto_member *members;
};

extern const struct proto_message_info proto_messages[];
extern const unsigned proto_message_count;

/* ---- events ---------------------------------------------------------------- */

#define PROTO_EV_SHUTDOWN            "shutdown"
#define PROTO_EV_EVICTED             "evicted"
#define PROTO_EV_CAP_CHANGED         "cap_changed"
#define PROTO_EV_ALLOCATION_READY    "allocation_ready"
#define PROTO_EV_INVALIDATE          "invalidate"
#define PROTO_EV_PARTITION_DESTROYED "partition_destroyed"
#define PROTO_EV_RECLAIM             "reclaim"
#define PROTO_EV_RECALL              "recall"

/* Each event's data, as the message lists above. */
#define PROTO_SHUTDOWN_DATA(X) X(REASON, STRING, PROTO_REQUIRED)
#define PROTO_EVICTED_DATA(X)  X(REASON, STRING, PROTO_REQUIRED)
#define PROTO_CAP_CHANGED_DATA(X)                                                                  \
	X(INSTANCE, ID64, PROTO_REQUIRED)                                                          \
	X(CAP, U64, PROTO_REQUIRED)                                                                \
	X(SHARE, NUMBER, PROTO_REQUIRED)                                                           \
	X(MODE, STRING, PROTO_REQUIRED)
#define PROTO_ALLOCATION_READY_DATA(X)                                                             \
	X(GROUP, STRING, PROTO_REQUIRED)                                                           \
	X(INSTANCE, ID64, PROTO_REQUIRED)                                                          \
	X(CHUNKS, U64, PROTO_REQUIRED)                                                             \
	X(CHUNK_LENGTH, U64, PROTO_REQUIRED)                                                       \
	X(AXIS_LENGTH, U64, PROTO_REQUIRED)                                                        \
	X(ARRAYS, ARRAY, PROTO_REQUIRED)
/* One element of allocation_ready's arrays. */
#define PROTO_READY_ARRAY(X)                                                                       \
	X(LABEL, STRING, PROTO_REQUIRED)                                                           \
	X(ID, ID64, PROTO_REQUIRED)                                                                \
	X(SHAPE, ARRAY, PROTO_REQUIRED)                                                            \
	X(SIZE, U64, PROTO_REQUIRED)                                                               \
	X(TYPE, STRING, PROTO_REQUIRED)
#define PROTO_INVALIDATE_DATA(X)                                                                   \
	X(REASON, STRING, PROTO_REQUIRED)                                                          \
	X(EPOCH, U64, PROTO_REQUIRED)
#define PROTO_PARTITION_DESTROYED_DATA(X) X(NAME, STRING, PROTO_REQUIRED)
#define PROTO_RECLAIM_DATA(X)                                                                      \
	X(SLAB, ID64, PROTO_REQUIRED)                                                              \
	X(REASON, STRING, PROTO_REQUIRED)
#define PROTO_RECALL_DATA(X)                                                                       \
	X(INSTANCE, ID64, PROTO_REQUIRED)                                                          \
	X(BYTES, U64, PROTO_REQUIRED)                                                              \
	X(REASON, STRING, PROTO_REQUIRED)                                                          \
	X(EPOCH, U64, PROTO_REQUIRED)

/* No members (an event whose data holds no array of objects). */
#define PROTO_NO_MEMBERS(X)

/* X(suffix, data list, list of the members of the elements of data's
 * array): the name is PROTO_EV_<suffix>. */
#define PROTO_EVENTS(X)                                                                            \
	X(SHUTDOWN, PROTO_SHUTDOWN_DATA, PROTO_NO_MEMBERS)                                         \
	X(EVICTED, PROTO_EVICTED_DATA, PROTO_NO_MEMBERS)                                           \
	X(CAP_CHANGED, PROTO_CAP_CHANGED_DATA, PROTO_NO_MEMBERS)                                   \
	X(ALLOCATION_READY, PROTO_ALLOCATION_READY_DATA, PROTO_READY_ARRAY)                        \
	X(INVALIDATE, PROTO_INVALIDATE_DATA, PROTO_NO_MEMBERS)                                     \
	X(PARTITION_DESTROYED, PROTO_PARTITION_DESTROYED_DATA, PROTO_NO_MEMBERS)                   \
	X(RECLAIM, PROTO_RECLAIM_DATA, PROTO_NO_MEMBERS)                                           \
	X(RECALL, PROTO_RECALL_DATA, PROTO_NO_MEMBERS)

struct proto_event_info {
	const char *name;                 /* PROTO_EV_* */
	const struct proto_member *data;  /* ends with a NULL name */
	const struct proto_member *items; /* of the array in data (may be empty) */
};

extern const struct proto_event_info proto_events[];
extern const unsigned proto_event_count;

/* ---- values ---------------------------------------------------------------- */

/* The enumerated string values the protocol carries. */
#define PROTO_V_MEM_DEVICE       "device" /* alloc and queue_request "type" */
#define PROTO_V_MEM_PINNED       "pinned"
#define PROTO_V_MEM_MAPPED       "mapped"
#define PROTO_V_MEM_MANAGED      "managed" /* refused: not shareable between processes */
#define PROTO_V_MODE_ACTIVE      "active"  /* policy and set_mode "mode" */
#define PROTO_V_MODE_PASSIVE     "passive"
#define PROTO_V_ALLOC_POOL       "pool" /* "allocator" */
#define PROTO_V_ALLOC_DIRECT     "direct"
#define PROTO_V_ALLOC_ASYNC      "async"
#define PROTO_V_BACKEND_SIM      "sim" /* hello and status "backend" */
#define PROTO_V_BACKEND_CUDA     "cuda"
#define PROTO_V_TRANSPORT_VMM    "vmm" /* status and devices "transport" */
#define PROTO_V_TRANSPORT_IPC    "ipc"
#define PROTO_V_TRANSPORT_MEMFD  "memfd"
#define PROTO_V_SERVER           "gpubrokerd" /* hello "server" */
#define PROTO_V_MAP_FREE         "free"       /* device_map's block "state" */
#define PROTO_V_MAP_USED         "used"
#define PROTO_V_MAP_LEASE        "lease"
#define PROTO_V_MAP_HELD         "held"
#define PROTO_V_GROUP_DEFAULT    "default"    /* the group of an instance that names none */
#define PROTO_V_LIMIT_MAX_QUEUED "max_queued" /* -32006 "limit", as are hello's limits and: */
#define PROTO_V_LIMIT_MAX_LEASES "max_leases"
#define PROTO_V_LIMIT_CLIENTS    "max_clients"
#define PROTO_V_LIMIT_PER_UID    "max_clients_per_uid"
#define PROTO_V_LIMIT_FILES      "open_files" /* the daemon's RLIMIT_NOFILE (connections refused) */
/* One user's share of the daemon's descriptors (half of RLIMIT_NOFILE): its
 * connections and its slabs' descriptors; a slab or a connection past it is
 * refused. */
#define PROTO_V_LIMIT_FILES_PER_UID "open_files_per_uid"

/* The values of alloc's and a queued request's "type", set_mode's "mode"
 * and set_allocator's "allocator", in the order of the indices that the
 * decoded params carry (params.h). */
enum proto_memory {
	PROTO_MEMORY_DEVICE,
	PROTO_MEMORY_PINNED,
	PROTO_MEMORY_MAPPED,
	PROTO_MEMORY_MANAGED
};
enum proto_mode { PROTO_MODE_ACTIVE, PROTO_MODE_PASSIVE };
enum proto_allocator { PROTO_ALLOCATOR_POOL, PROTO_ALLOCATOR_DIRECT, PROTO_ALLOCATOR_ASYNC };
#define PROTO_MEMORY_VALUES                                                                        \
	{                                                                                          \
		PROTO_V_MEM_DEVICE, PROTO_V_MEM_PINNED, PROTO_V_MEM_MAPPED, PROTO_V_MEM_MANAGED    \
	}
#define PROTO_MODE_VALUES                                                                          \
	{                                                                                          \
		PROTO_V_MODE_ACTIVE, PROTO_V_MODE_PASSIVE                                          \
	}
#define PROTO_ALLOCATOR_VALUES                                                                     \
	{                                                                                          \
		PROTO_V_ALLOC_POOL, PROTO_V_ALLOC_DIRECT, PROTO_V_ALLOC_ASYNC                      \
	}
#define PROTO_MEMORY_EXPECTED                                                                      \
	PROTO_QUOTED(PROTO_V_MEM_DEVICE)                                                           \
	", " PROTO_QUOTED(PROTO_V_MEM_PINNED) ", " PROTO_QUOTED(                                   \
	    PROTO_V_MEM_MAPPED) " or " PROTO_QUOTED(PROTO_V_MEM_MANAGED)

/* A value (or name) in JSON quotes, for messages that list the accepted
 * values and for encoders that write JSON text: "\"" v "\"". */
#define PROTO_QUOTED(v) "\"" v "\""

/* invalidate's "reason": the method that released everything. */
#define PROTO_V_REASON_INVALIDATE_ALL PROTO_M_INVALIDATE_ALL
#define PROTO_V_REASON_SET_ALLOCATOR  PROTO_M_SET_ALLOCATOR
/* reclaim's "reason": the device is short of memory. */
#define PROTO_V_REASON_MEMORY "memory"
/* recall's other reasons: a cap shrank, a partition is being made, a stream
 * group is about to be chunked, an operator trims (gpubrokerctl trim). */
#define PROTO_V_REASON_CAP       "cap"
#define PROTO_V_REASON_PARTITION "partition"
#define PROTO_V_REASON_CHUNKING  "chunking"
#define PROTO_V_REASON_OPERATOR  "operator"

/* The values above but the aliases, in schema.c's table. */
extern const char *const proto_values[];
extern const unsigned proto_value_count;

#endif
