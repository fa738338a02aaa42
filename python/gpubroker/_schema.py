"""The protocol's vocabulary, from proto/schema.h: written by
tools/gen-pyschema.py, do not edit (test-schema-copies compares it
with the header)."""

VERSION = 1

# Limits (PROTOCOL.md's table of limits; PROTO_LIMITS).
MAX_FRAME = 65536
MAX_REPLY = 16777216
MAX_DEPTH = 8
MAX_MEMBERS = 64
MAX_ID = 64
MAX_NAME = 64
HANDLE_SIZE = 64
TOKEN_HEX = 64
MAX_DIMS = 8
MAX_ELEM_SIZE = 65536
MAX_REQUESTS = 64
MAX_QUEUED = 64
MAX_DEVICES = 64
TOKEN_SIZE = 32
MAX_UID = 4294967294
MAX_LEASES = 64
GRANULE = 256
MAX_ALIGNMENT = 2097152
MAX_WAIT_MS = 86400000

LIMITS = {
    "max_frame": MAX_FRAME,
    "max_reply": MAX_REPLY,
    "max_depth": MAX_DEPTH,
    "max_members": MAX_MEMBERS,
    "max_id": MAX_ID,
    "max_name": MAX_NAME,
    "handle_size": HANDLE_SIZE,
    "token_hex": TOKEN_HEX,
    "max_dims": MAX_DIMS,
    "max_elem_size": MAX_ELEM_SIZE,
    "max_requests": MAX_REQUESTS,
    "max_queued": MAX_QUEUED,
    "max_devices": MAX_DEVICES,
    "token_size": TOKEN_SIZE,
    "max_uid": MAX_UID,
    "max_leases": MAX_LEASES,
    "granule": GRANULE,
    "max_alignment": MAX_ALIGNMENT,
    "max_wait_ms": MAX_WAIT_MS,
}

# Error codes carried in error.code (PROTO_CODES).
CODE_PARSE = -32700
CODE_INVALID_REQUEST = -32600
CODE_METHOD = -32601
CODE_PARAMS = -32602
CODE_INTERNAL = -32603
CODE_STATE = -32000
CODE_VERSION = -32001
CODE_NO_MEMORY = -32002
CODE_QUOTA = -32003
CODE_NOT_FOUND = -32004
CODE_PERMISSION = -32005
CODE_LIMIT = -32006
CODE_SHUTTING_DOWN = -32007
CODE_TIMEOUT = -32008
CODE_NOT_SUPPORTED = -32009
CODE_BACKEND = -32010
CODE_EXISTS = -32011

CODE_NAMES = {
    CODE_PARSE: "parse_error",
    CODE_INVALID_REQUEST: "invalid_request",
    CODE_METHOD: "method_not_found",
    CODE_PARAMS: "invalid_params",
    CODE_INTERNAL: "internal_error",
    CODE_STATE: "bad_state",
    CODE_VERSION: "version_unsupported",
    CODE_NO_MEMORY: "out_of_memory",
    CODE_QUOTA: "quota_exceeded",
    CODE_NOT_FOUND: "not_found",
    CODE_PERMISSION: "permission_denied",
    CODE_LIMIT: "limit_reached",
    CODE_SHUTTING_DOWN: "shutting_down",
    CODE_TIMEOUT: "timeout",
    CODE_NOT_SUPPORTED: "not_supported",
    CODE_BACKEND: "backend_error",
    CODE_EXISTS: "exists",
}

# Methods.
M_HELLO = "hello"
M_REGISTER = "register"
M_UNREGISTER = "unregister"
M_ALLOC = "alloc"
M_FREE = "free"
M_ATTACH = "attach"
M_DETACH = "detach"
M_MEM_INFO = "mem_info"
M_STATS = "stats"
M_STATUS = "status"
M_CLIENTS = "clients"
M_DEVICES = "devices"
M_RELOAD = "reload"
M_METRICS = "metrics"
M_POLICY = "policy"
M_SET_PROPORTION = "set_proportion"
M_SET_AUTO = "set_auto"
M_SET_GROUP = "set_group"
M_GROUP_INFO = "group_info"
M_SET_MODE = "set_mode"
M_SET_LIMIT = "set_limit"
M_QUEUE_REQUEST = "queue_request"
M_ALLOCATE_QUEUE = "allocate_queue"
M_CHUNK_PARAMETERS = "chunk_parameters"
M_CLAIM = "claim"
M_FREE_LABEL = "free_label"
M_INVALIDATE_ALL = "invalidate_all"
M_SET_ALLOCATOR = "set_allocator"
M_EVICT = "evict"
M_SELFCHECK = "selfcheck"
M_EXPORT = "export"
M_UNEXPORT = "unexport"
M_OPEN = "open"
M_INVALIDATE_DONE = "invalidate_done"
M_PARTITION_CREATE = "partition_create"
M_PARTITION_DESTROY = "partition_destroy"
M_PARTITIONS = "partitions"
M_GOODBYE = "goodbye"
M_RELEASE = "release"
M_LEASE = "lease"
M_LEASE_RETURN = "lease_return"
M_LEASE_CARVE = "lease_carve"
M_RECALL_DONE = "recall_done"
M_TRIM = "trim"
M_DEVICE_MAP = "device_map"

# Member names.
F_ALIGNMENT = "alignment"
F_ALLOCATIONS = "allocations"
F_ALLOCATOR = "allocator"
F_ALLOCS = "allocs"
F_APPLIED = "applied"
F_ARRAYS = "arrays"
F_ATTACHMENTS = "attachments"
F_AUTO = "auto"
F_AUTO_CAP = "auto_cap"
F_AUTO_INSTANCES = "auto_instances"
F_AVAILABLE = "available"
F_ASKED = "asked"
F_AXIS = "axis"
F_AXIS_LENGTH = "axis_length"
F_BACKEND = "backend"
F_BACKEND_ERROR = "backend_error"
F_BLOCKS = "blocks"
F_BYTES = "bytes"
F_CAP = "cap"
F_CAPACITY = "capacity"
F_CHUNK_BYTES = "chunk_bytes"
F_CHUNK_LENGTH = "chunk_length"
F_CHUNKS = "chunks"
F_CLIENT = "client"
F_CLIENTS = "clients"
F_CODE = "code"
F_COMPUTE_CAPABILITY = "compute_capability"
F_CONNECTED_S = "connected_s"
F_DATA = "data"
F_DEDICATED = "dedicated"
F_DEVICE = "device"
F_DEVICE_FREE = "device_free"
F_DEVICE_UUID = "device_uuid"
F_DEVICES = "devices"
F_ELEM_SIZE = "elem_size"
F_EPOCH = "epoch"
F_ERROR = "error"
F_EVENT = "event"
F_EVICTIONS = "evictions"
F_EXPORTS = "exports"
F_FD = "fd"
F_FENCED = "fenced"
F_FIELD = "field"
F_FRACTION = "fraction"
F_FREE = "free"
F_FREE_BLOCKS = "free_blocks"
F_FREED = "freed"
F_FREES = "frees"
F_GHOSTS = "ghosts"
F_GID = "gid"
F_GROUP = "group"
F_GROUPED = "grouped"
F_HANDLE = "handle"
F_HEAP_BYTES = "heap_bytes"
F_HELLO_TIMEOUT_MS = "hello_timeout_ms"
F_HOST_ALLOCATIONS = "host_allocations"
F_HOST_USED = "host_used"
F_ID = "id"
F_IDLE_S = "idle_s"
F_IN_USE = "in_use"
F_IN_USE_AT_START = "in_use_at_start"
F_INSTANCE = "instance"
F_INSTANCES = "instances"
F_INVALIDATIONS = "invalidations"
F_KEEP = "keep"
F_KEEP_SLABS = "keep_slabs"
F_LABEL = "label"
F_LARGEST_FREE = "largest_free"
F_LEASE = "lease"
F_LEASED = "leased"
F_LEASES = "leases"
F_LIMIT = "limit"
F_LIMIT_FRACTION = "limit_fraction"
F_LIMITS = "limits"
F_LIVE = "live"
F_MANUAL = "manual"
F_MANUAL_INSTANCES = "manual_instances"
F_MAX_ALLOCATIONS = "max_allocations"
F_MAX_DEPTH = "max_depth"
F_MAX_FRAME = "max_frame"
F_MAX_ID = "max_id"
F_MAX_INFLIGHT = "max_inflight"
F_MAX_INSTANCES = "max_instances"
F_MAX_MEMBERS = "max_members"
F_MAX_NAME = "max_name"
F_MAX_REPLY = "max_reply"
F_MEMBERS = "members"
F_MESSAGE = "message"
F_METHOD = "method"
F_MIN_AUTO_SHARE = "min_auto_share"
F_MODE = "mode"
F_NAME = "name"
F_NEEDS_RESTART = "needs_restart"
F_OFFSET = "offset"
F_OK = "ok"
F_OOMS = "ooms"
F_ORPHANED = "orphaned"
F_ORPHANS = "orphans"
F_OTHERS = "others"
F_OWN = "own"
F_OWNER = "owner"
F_PARAMS = "params"
F_PARTITION = "partition"
F_PARTITIONS = "partitions"
F_PARTING = "parting"
F_PEAK = "peak"
F_PID = "pid"
F_POOL = "pool"
F_POOL_ID = "pool_id"
F_PREVIOUS = "previous"
F_PROPORTION = "proportion"
F_QUEUED = "queued"
F_REASON = "reason"
F_RECALLABLE = "recallable"
F_RECALLS = "recalls"
F_RECALLS_ANSWERED = "recalls_answered"
F_RECALLS_PENDING = "recalls_pending"
F_RECALLS_SENT = "recalls_sent"
F_RECALLS_TIMED_OUT = "recalls_timed_out"
F_RECLAIMED = "reclaimed"
F_REPLY = "reply"
F_REQUEST_BYTES = "request_bytes"
F_REQUESTED = "requested"
F_REQUESTS = "requests"
F_RESERVE = "reserve"
F_RESERVED = "reserved"
F_RESULT = "result"
F_RETIRED = "retired"
F_SERVER = "server"
F_SERVER_VERSION = "server_version"
F_SESSION = "session"
F_SESSIONS = "sessions"
F_SHAPE = "shape"
F_SHARE = "share"
F_SIZE = "size"
F_SLAB = "slab"
F_SLAB_SIZE = "slab_size"
F_SLABS = "slabs"
F_STATE = "state"
F_SUPPORTED = "supported"
F_TEXT = "text"
F_TOKEN = "token"
F_TOTAL = "total"
F_TOTALS = "totals"
F_TRANSPORT = "transport"
F_TYPE = "type"
F_UID = "uid"
F_UNCHUNKABLE = "unchunkable"
F_UPTIME_S = "uptime_s"
F_USED = "used"
F_UUID = "uuid"
F_VALUE = "value"
F_VERSION = "version"
F_VERSIONS = "versions"
F_VIOLATION = "violation"
F_VMM = "vmm"
F_WAIT_MS = "wait_ms"
F_WAITED_MS = "waited_ms"
F_WAITING = "waiting"
F_WAITS = "waits"
F_WARNINGS = "warnings"
F_WRITE_HIGH_WATER = "write_high_water"

# Events.
EV_SHUTDOWN = "shutdown"
EV_EVICTED = "evicted"
EV_CAP_CHANGED = "cap_changed"
EV_ALLOCATION_READY = "allocation_ready"
EV_INVALIDATE = "invalidate"
EV_PARTITION_DESTROYED = "partition_destroyed"
EV_RECLAIM = "reclaim"
EV_RECALL = "recall"

# Values.
V_MEM_DEVICE = "device"
V_MEM_PINNED = "pinned"
V_MEM_MAPPED = "mapped"
V_MEM_MANAGED = "managed"
V_MODE_ACTIVE = "active"
V_MODE_PASSIVE = "passive"
V_ALLOC_POOL = "pool"
V_ALLOC_DIRECT = "direct"
V_ALLOC_ASYNC = "async"
V_BACKEND_SIM = "sim"
V_BACKEND_CUDA = "cuda"
V_TRANSPORT_VMM = "vmm"
V_TRANSPORT_IPC = "ipc"
V_TRANSPORT_MEMFD = "memfd"
V_SERVER = "gpubrokerd"
V_MAP_FREE = "free"
V_MAP_USED = "used"
V_MAP_LEASE = "lease"
V_MAP_HELD = "held"
V_GROUP_DEFAULT = "default"
V_LIMIT_MAX_QUEUED = "max_queued"
V_LIMIT_MAX_LEASES = "max_leases"
V_LIMIT_CLIENTS = "max_clients"
V_LIMIT_PER_UID = "max_clients_per_uid"
V_LIMIT_FILES = "open_files"
V_LIMIT_FILES_PER_UID = "open_files_per_uid"
V_REASON_INVALIDATE_ALL = "invalidate_all"
V_REASON_SET_ALLOCATOR = "set_allocator"
V_REASON_MEMORY = "memory"
V_REASON_CAP = "cap"
V_REASON_PARTITION = "partition"
V_REASON_CHUNKING = "chunking"
V_REASON_OPERATOR = "operator"
