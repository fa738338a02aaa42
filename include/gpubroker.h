/*
 * gpubroker.h - client library for gpubrokerd, the GPU memory broker.
 *
 * A process connects to the daemon over its Unix socket, registers one or
 * more instances (a named consumer of one device's memory), and allocates
 * memory for them. Each allocation comes back as a pointer usable in this
 * process: with the simulated backend, shared memory mapped into the process;
 * with the CUDA backend, a device pointer from an IPC handle.
 *
 * Errors: every call that can fail returns 0 (or a non-negative count) on
 * success and a negative GPB_E_* code on failure. gpb_strerror() names a
 * code; gpb_last_error() gives the daemon's message for the last failed call
 * made by this thread.
 *
 * Threads: a gpb_client may be used from several threads at once; calls are
 * serialised on the connection. Event callbacks run on the thread that calls
 * gpb_dispatch().
 *
 * Ownership: the library owns every gpb_client and the mapping behind every
 * pointer it returns. A pointer stays valid until its allocation is freed or
 * the client is disconnected, whichever comes first. Strings returned through
 * char ** are the caller's, released with gpb_string_free().
 */
#ifndef GPUBROKER_H
#define GPUBROKER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h> /* ssize_t: PyTorch's allocator entry points */

#ifdef __cplusplus
extern "C" {
#endif

/** Protocol version this library speaks. */
#define GPB_PROTOCOL_VERSION 1
/** Socket used when neither an explicit path nor GPUBROKER_SOCKET is given. */
#define GPB_DEFAULT_SOCKET_PATH "/run/gpubroker/gpubroker.sock"

/** Error codes (negative). */
enum gpb_error {
	GPB_OK = 0,
	GPB_E_INVALID = -1,        /**< a bad argument, or a request the daemon called invalid */
	GPB_E_NOMEM = -2,          /**< this process ran out of host memory */
	GPB_E_CONNECT = -3,        /**< no daemon listening at the socket path */
	GPB_E_DAEMON_GONE = -4,    /**< the daemon closed the connection or died; reconnect */
	GPB_E_PROTOCOL = -5,       /**< the daemon sent something this library cannot read */
	GPB_E_VERSION = -6,        /**< no common protocol version */
	GPB_E_OUT_OF_MEMORY = -7,  /**< the device (or the broker's limit) has no room */
	GPB_E_QUOTA = -8,          /**< the instance's cap would be exceeded */
	GPB_E_NOT_FOUND = -9,      /**< unknown id (or one this process may not see) */
	GPB_E_PERMISSION = -10,    /**< operation needs an administrator, or socket access denied */
	GPB_E_LIMIT = -11,         /**< a connection or daemon limit is reached */
	GPB_E_TIMEOUT = -12,       /**< a wait ran out */
	GPB_E_NOT_SUPPORTED = -13, /**< the backend cannot serve this request */
	GPB_E_BACKEND = -14,       /**< the device or its driver failed */
	GPB_E_SHUTTING_DOWN = -15, /**< the daemon is stopping */
	GPB_E_SYSTEM = -16,        /**< a system call failed; see errno via gpb_last_error() */
	/* The kernel buffer layout planner (gpb_layout_*, below): one code per
	 * rule, so that callers can tell the rules apart. */
	GPB_E_LAYOUT_NAME = -17,             /**< a name is empty, too long or not printable */
	GPB_E_LAYOUT_DUPLICATE = -18,        /**< the component or buffer name is taken */
	GPB_E_LAYOUT_ZERO_SIZE = -19,        /**< a buffer of 0 elements */
	GPB_E_LAYOUT_OVERFLOW = -20,         /**< a byte size, offset or total overflows 64 bits */
	GPB_E_LAYOUT_ALIAS_UNKNOWN = -21,    /**< an alias names no buffer of the same component */
	GPB_E_LAYOUT_ALIAS_PERSISTENT = -22, /**< an alias from or to a persistent buffer */
	GPB_E_LAYOUT_ALIAS_CYCLE = -23,      /**< aliases that lead back to where they started */
	GPB_E_LAYOUT_ALIAS_LOCATION = -24,   /**< an alias between shared and local memory */
	GPB_E_LAYOUT_NO_FIT = -25, /**< one warp needs more shared memory than the budget */
	/** The CUDA context device memory was mapped in has been reset or
	 * destroyed (cuDevicePrimaryCtxReset, e.g. Numba's Device.reset, or
	 * cuCtxDestroy): the mapping went with it; free the allocation. */
	GPB_E_CONTEXT_RESET = -26,
	/** The name is taken: an export name this user already exports, a
	 * partition name that exists (the daemon's -32011 "exists"). */
	GPB_E_EXISTS = -27,
};

/** Returns a static, human-readable name for an error code. Never NULL. */
const char *gpb_strerror(int err);

/**
 * The message that came with the last error returned to the calling thread
 * (when the daemon answered with an error: "<code> <name>: <daemon's message>",
 * e.g. "-32004 not_found: no such allocation"). Thread-local; valid
 * until this thread's next gpb_* call. Never NULL (empty when none).
 */
const char *gpb_last_error(void);

typedef struct gpb_client gpb_client;

/**
 * Connects and performs the hello handshake.
 * @path: socket path; NULL means $GPUBROKER_SOCKET, else GPB_DEFAULT_SOCKET_PATH.
 * @name: a label the daemon shows in `gpubrokerctl clients` (may be NULL).
 * @out: receives the client; free with gpb_disconnect().
 * When $GPUBROKER_TOKEN is set and not empty, hello presents it: the
 * connection joins that partition (see gpb_partition_create()) and sees the
 * partition's size as each device's memory.
 * Errors: GPB_E_CONNECT (nothing listening, path too long), GPB_E_PERMISSION
 * (socket not accessible, or $GPUBROKER_TOKEN is not a partition of this
 * uid: "invalid partition token"), GPB_E_VERSION, GPB_E_DAEMON_GONE,
 * GPB_E_PROTOCOL, GPB_E_NOMEM, GPB_E_INVALID (@out NULL).
 * fork: a client belongs to the process that connected it. A forked child
 * starts afresh: nothing its parent mapped is handed to it (its own
 * connections map what they are given; gpb_mapping_stats() counts from
 * zero), and every call on a client of its parent fails with GPB_E_INVALID
 * (that connection is the parent's), except gpb_disconnect(), which frees
 * it there without a word to the daemon and without unmapping anything of
 * the parent's. (A real CUDA driver may refuse a child of a process that
 * used it anyway: fork before the first CUDA call, or use spawn.)
 */
int gpb_connect(const char *path, const char *name, gpb_client **out);

/**
 * Closes the connection, unmaps every slab this client mapped and frees the
 * client. The daemon releases every allocation and instance the connection
 * held. Pointers obtained through this client become invalid. NULL is a no-op.
 * With cuda slabs it tells the daemon, after unmapping, that they are
 * unmapped (the "goodbye" request, one round trip): a connection that ends
 * without it (a killed process) keeps VMM slabs counted against their device
 * until its process exits. May overwrite gpb_last_error().
 */
void gpb_disconnect(gpb_client *client);

/** Options for gpb_register(). Zero-initialise, then set what you need. */
struct gpb_register_opts {
	const char *name;  /**< instance name, 1-64 bytes (required) */
	int device;        /**< device index */
	double proportion; /**< share of device memory in (0, 1], or 0 for the auto pool */
	const char *group; /**< stream group name, NULL for "default" */
	/** The device by UUID ("GPU-xxxxxxxx-...", as `devices` and nvidia-smi
	 * show it) instead of by index; NULL to use @device. */
	const char *device_uuid;
};

/**
 * Registers an instance: a named consumer of one device's memory. Instances
 * end with the connection.
 * @instance: receives the instance id to pass to gpb_alloc().
 * Errors: GPB_E_INVALID (bad name, proportion or device), GPB_E_LIMIT,
 * GPB_E_DAEMON_GONE, GPB_E_PROTOCOL.
 */
int gpb_register(gpb_client *client, const struct gpb_register_opts *opts, uint64_t *instance);

/** Ends an instance; it must hold no allocations. GPB_E_NOT_FOUND, GPB_E_INVALID (busy). */
int gpb_unregister(gpb_client *client, uint64_t instance);

/** One allocation as this process sees it. */
struct gpb_allocation {
	/** The allocation's id. A daemon allocation's is daemon-wide (random,
	 * unguessable). A block served from this client's leases (gpb_alloc
	 * up to a quarter of the daemon's slab size, unless GPUBROKER_LEASE=0
	 * or the allocator is "direct" or "async") has a local id instead: its top
	 * 16 bits are 0x10ca, the rest counted by this client; the daemon
	 * does not know it, so gpb_attach() of it by another client is
	 * GPB_E_NOT_FOUND. gpb_export() of a local block, or gpb_attach()
	 * of it through its own client, first makes it a daemon allocation
	 * at the same bytes (lease_carve): the export names that, and the
	 * attachment's id is its daemon id, which other clients may attach.
	 * gpb_free() of the local id frees both. */
	uint64_t id;
	void *ptr;       /**< usable address in this process */
	uint64_t size;   /**< bytes usable at ptr (the request rounded up) */
	int device;      /**< device index */
	uint64_t slab;   /**< slab id the allocation lives in */
	uint64_t offset; /**< offset of ptr inside its slab */
};

/**
 * Allocates @size bytes on @instance's device.
 * @alignment: 0 for the default (256), else a power of two up to 2 MiB;
 * values below 256 are raised to 256.
 * Errors: GPB_E_INVALID (size 0, bad alignment), GPB_E_NOT_FOUND (instance),
 * GPB_E_OUT_OF_MEMORY, GPB_E_QUOTA, GPB_E_LIMIT, GPB_E_BACKEND,
 * GPB_E_SYSTEM (mapping the slab failed), GPB_E_DAEMON_GONE.
 */
int gpb_alloc(gpb_client *client, uint64_t instance, uint64_t size, uint64_t alignment,
              struct gpb_allocation *out);

/**
 * Frees an allocation made through this client (device or host memory). Its
 * pointer becomes invalid.
 * Device memory (cuda backend), a block inside a lease (the default): the
 * GPU is not stopped. The library records an event on the legacy default
 * stream of the CUDA context the block is mapped in (from a pool of
 * events: none made per free) and serves the block again, or lets its
 * lease go back to the daemon, only once that event has completed
 * (cuEventQuery, polled when room or figures are wanted, and by the
 * service thread; never waited for). The legacy default stream comes
 * after the work queued so far on every blocking stream of the context,
 * and on no stream made with CU_STREAM_NON_BLOCKING: a program that
 * queues work on the memory on such a stream frees it with
 * gpb_free_async() on that stream, synchronizes first, or sets
 * GPUBROKER_FREE_SYNC=1 (read when the client connects), which makes
 * every such free wait for the context's work (cuCtxSynchronize) as
 * before. Other device memory (a daemon allocation: GPUBROKER_LEASE=0,
 * one larger than a quarter of a slab, a carved block): waits for the
 * work queued in its context (cuCtxSynchronize) before the daemon hears
 * of the free; see gpb_free_async() for a free that does not wait.
 * Device memory is freed without waiting for the daemon's reply: the
 * library checks that the allocation is this client's itself, and the
 * daemon, which reads a connection's requests in order, has freed it before
 * it reads the client's next request (an allocation right behind sees the
 * room). Should the daemon still refuse the free, the first call on this
 * client (other than gpb_dispatch(), which delivers events regardless)
 * that starts after the library read the refusal (it comes in with the
 * next reply) fails with its error instead of doing anything.
 * That order holds on this connection only: the daemon may serve a request
 * of another connection (another process, gpubrokerctl) before it reads the
 * free. A program that needs the room seen there (one that frees, then
 * tells another process to allocate) first makes any call on this client
 * that waits for a reply, gpb_mem_info() for one.
 * The slab the allocation was in stays mapped (kept) when it empties, up
 * to GPUBROKER_KEEP_SLABS slabs per process (default 4; 0: none kept), so
 * that the next allocation there costs no open; see gpb_release_kept().
 * Errors: GPB_E_NOT_FOUND (unknown, already freed, queued by
 * gpb_free_async(), or not this client's), GPB_E_DAEMON_GONE, and the
 * error of an earlier free the daemon refused (above).
 */
int gpb_free(gpb_client *client, uint64_t id);

/**
 * Unmaps the slabs this client keeps mapped with nothing in them (see
 * gpb_free()) and gives them back to the daemon, which may return them to
 * the device. The daemon also asks for them by itself when a device is
 * short of memory (a `reclaim` event, answered as the library reads it, in
 * any call on this client or gpb_dispatch(), or by the library's service
 * thread of a client with leases, see gpb_mem_info()). Leases (gpb_alloc) with
 * nothing in them go back first, as the idle rule (GPUBROKER_LEASE_IDLE_MS)
 * would return them later: their slabs are then let go of with the rest.
 * Returns how many slabs it let go of (0 or more), or GPB_E_DAEMON_GONE.
 */
int gpb_release_kept(gpb_client *client);

/**
 * Frees an allocation (device memory) once the work queued on @stream
 * before this call has finished, without waiting for it.
 *
 * gpb_free() of a daemon allocation and gpb_detach() (and
 * gpb_free_label(), gpb_disconnect()) wait for the work queued in the
 * allocation's CUDA context first (cuCtxSynchronize in it; a block inside
 * a lease waits for an event instead, see gpb_free()), because the daemon
 * may hand the range to
 * another allocation, of this process or another, as soon as it hears of
 * the free, and queued kernels or copies would then write into someone
 * else's memory. gpb_free_async() waits for @stream only, and not here:
 * it records an event on @stream (a CUstream as void *, in the context the
 * allocation is mapped in; NULL is that context's legacy default stream)
 * and returns; the library frees the allocation at the first call on
 * @client (any gpb_* call taking it, gpb_dispatch() included) that finds
 * the event complete (cuEventQuery), closing the slab's mapping then if it
 * was the last allocation there. Until then the allocation still counts
 * against its instance. gpb_disconnect() waits for the events of those
 * still queued. The caller promises that no work on another stream uses
 * the memory after the work queued on @stream.
 *
 * Polled rather than freed from a host function on the stream
 * (cuLaunchHostFunc): that would run on a driver thread that may make no
 * CUDA call, would need @client's lock, held by threads that may be waiting
 * on that very stream, and could outlive @client.
 *
 * The id is no longer the caller's from this call on: gpb_free() and
 * gpb_free_async() of it are GPB_E_NOT_FOUND. sim backend (no streams):
 * freed at once, @stream ignored.
 * Graph capture: while @stream is being captured, its work is a graph
 * that may be launched later, any number of times: the allocation is
 * freed only once that graph and everything made from it are gone (a CUDA
 * user object the graph holds), never by an event recorded in the
 * capture. gpb_free() while a blocking stream of the context captures
 * likewise neither records on the legacy stream nor synchronizes (either
 * would invalidate the capture): its event is recorded once the capture
 * has ended. Memory a graph uses must not be freed otherwise while the
 * graph lives, as with cuMemFree.
 * Errors: GPB_E_NOT_FOUND (unknown, not this client's, already freed or
 * queued), GPB_E_INVALID (host memory from gpb_alloc_host: use gpb_free),
 * GPB_E_BACKEND (the event could not be recorded: nothing was queued),
 * GPB_E_DAEMON_GONE.
 */
int gpb_free_async(gpb_client *client, uint64_t id, void *stream);

/** Host memory types for gpb_alloc_host() (and gpb_array_request.type). */
enum gpb_host_type {
	GPB_HOST_PINNED = 1, /**< page-locked host memory: fast copies to and from devices */
	GPB_HOST_MAPPED = 2, /**< pinned and mapped into the devices' address space */
};

/**
 * Allocates @size bytes (rounded up to pages) of host memory for @instance's
 * user: shared memory of its own from the daemon, mapped here at @out->ptr
 * and, with the cuda backend, registered with cuMemHostRegister (portable to
 * every context; in the current context, else device 0's primary one).
 * @out->device is -1, @out->slab and @out->offset 0. Free it with
 * gpb_free(); it cannot be attached or exported. It is not device memory:
 * the VRAM policy does not count it, the daemon's max_host_memory (every
 * client together) does. CUDA managed memory is not offered: it cannot be
 * shared between processes.
 * Errors: GPB_E_INVALID (size 0, type, @out NULL), GPB_E_NOT_FOUND
 * (instance), GPB_E_OUT_OF_MEMORY (max_host_memory), GPB_E_LIMIT
 * (max_allocations), GPB_E_BACKEND (cuMemHostRegister failed),
 * GPB_E_SYSTEM (mapping), GPB_E_DAEMON_GONE.
 */
int gpb_alloc_host(gpb_client *client, uint64_t instance, uint64_t size, enum gpb_host_type type,
                   struct gpb_allocation *out);

/**
 * The device's address of a GPB_HOST_MAPPED allocation @id of this client
 * (cuMemHostGetDevicePointer; with the sim backend the host address).
 * Errors: GPB_E_NOT_FOUND (no such host allocation here), GPB_E_INVALID
 * (a pinned one, or @device_ptr NULL).
 */
int gpb_host_device_pointer(gpb_client *client, uint64_t id, void **device_ptr);

/**
 * Maps an allocation made by another connection of the same user (for
 * example in another process). The allocation stays owned by its maker; the
 * mapping lasts until gpb_detach() or disconnect. If the maker frees it
 * meanwhile, the memory stays allocated (and its bytes as they were) until
 * the last connection that attached it detaches.
 * Errors: GPB_E_NOT_FOUND (unknown or another user's), GPB_E_INVALID
 * (already attached through this client), GPB_E_LIMIT, GPB_E_DAEMON_GONE.
 */
int gpb_attach(gpb_client *client, uint64_t id, struct gpb_allocation *out);

/** Drops a mapping made by gpb_attach() or gpb_open_shared(). GPB_E_NOT_FOUND. */
int gpb_detach(gpb_client *client, uint64_t id);

/**
 * Names one of this connection's allocations so that a client of @uid
 * (this user's own uid when @uid is negative) can map it with
 * gpb_open_shared_from() (or, for this user itself, gpb_open_shared()).
 * Names live in the namespace of the user who exports them: one name per
 * allocation, unique among this user's exports (all its connections), and
 * never visible to, nor colliding with, another user's names. The name is
 * withdrawn by gpb_unexport(), by freeing the allocation, or when this
 * connection ends; what was opened stays mapped (and allocated) until its
 * openers detach. Another user maps the whole slab, so only an allocation
 * that fills a slab of its own may go to another uid: a multiple of 2 MiB,
 * larger than the daemon's slab size or under the "direct" allocator; and
 * never memory of the "async" allocator (cuda), whose grant would carry
 * this user's whole memory pool.
 * @name is copied.
 * Errors: GPB_E_INVALID (name not 1-64 bytes, uid out of range, allocation
 * already exported, or another uid for a pooled or "async" allocation:
 * gpb_last_error() says which), GPB_E_EXISTS (this user already exports
 * @name), GPB_E_NOT_FOUND (not this connection's allocation),
 * GPB_E_DAEMON_GONE.
 */
int gpb_export(gpb_client *client, uint64_t id, const char *name, int64_t uid);

/** Withdraws a name given by gpb_export(). GPB_E_NOT_FOUND, GPB_E_INVALID. */
int gpb_unexport(gpb_client *client, const char *name);

/**
 * Maps the allocation this user exported under @name, as gpb_attach() does
 * (@out->id is the allocation's id; gpb_detach() it when done): a name
 * alone only ever finds this user's own exports, never another user's.
 * Same as gpb_open_shared_from() with @owner -1.
 * Errors: GPB_E_NOT_FOUND (no such name among this user's exports:
 * withdrawn or never given), GPB_E_INVALID (bad name, @out NULL, or already
 * mapped through this client), GPB_E_LIMIT, GPB_E_DAEMON_GONE.
 */
int gpb_open_shared(gpb_client *client, const char *name, struct gpb_allocation *out);

/**
 * Maps the allocation that the user @owner (a uid; negative: this user)
 * exported under @name and granted to this user, as gpb_attach() does.
 * Errors: GPB_E_NOT_FOUND (no such name of @owner's, or not granted to this
 * user: answered alike), GPB_E_INVALID (bad name or @owner, @out NULL, or
 * already mapped through this client), GPB_E_LIMIT, GPB_E_DAEMON_GONE.
 */
int gpb_open_shared_from(gpb_client *client, int64_t owner, const char *name,
                         struct gpb_allocation *out);

/**
 * The index of the device with UUID @uuid ("GPU-..." as `gpubrokerctl devices`
 * shows it), for the calls that take an index (gpb_stats, gpb_set_limit,
 * gpb_policy_info); gpb_register takes the UUID itself. The daemon resolves
 * it, so it names the same device for every client.
 * Errors: GPB_E_INVALID (no such device, or a bad argument), GPB_E_DAEMON_GONE.
 */
int gpb_device_index(gpb_client *client, const char *uuid, int *index);

/** Memory as one instance sees it. */
struct gpb_mem_info {
	uint64_t cap;          /**< bytes the instance may hold (in passive mode the device's
	                            capacity: its memory, or less under a limit) */
	uint64_t used;         /**< bytes its allocations hold */
	uint64_t free;         /**< bytes it may still allocate: min(cap - used, device free) */
	uint64_t device_total; /**< device memory */
	uint64_t device_free;  /**< device memory the broker has not handed out */
	/** bytes this process holds leased for the instance (part of @used:
	 * the daemon charges a lease whole); 0 with GPUBROKER_LEASE=0 */
	uint64_t leased;
	uint64_t in_use; /**< bytes of this process's live blocks in those leases, now */
	uint64_t leases; /**< how many leases */
	/** The daemon's recalls of the instance's leases (below): sent, answered
	 * by the library, pending (sent, not answered yet: 0 or 1) and timed
	 * out (not answered within recall_timeout_ms); 0 from a daemon
	 * before recalls. */
	uint64_t recalls_sent;
	uint64_t recalls_answered;
	uint64_t recalls_pending;
	uint64_t recalls_timed_out;
};

/**
 * @used is what the daemon charges the instance: its leases whole and its
 * own allocations (larger than a quarter of a slab, or made without leases). @leased,
 * @in_use and @leases are this process's own figures, exact when the call
 * returns (the daemon's copy of in_use is as of this process's last lease
 * message).
 * Leases go back by themselves: once wholly free for GPUBROKER_LEASE_IDLE_MS
 * (default 2000), and when the daemon asks (a "recall" event: another
 * instance needs the room, this instance's cap shrank, a partition is being
 * made, an operator ran `gpubrokerctl trim`), at once: the leases of the
 * instance with no live block in them, whole, until the bytes asked went
 * back. A lease in use, even in
 * part, stays. A recall is answered by whichever thread reads it: any call
 * on this client (in the middle of its own request too), gpb_dispatch(),
 * or a thread of the library's own that a client starts with its first
 * lease (the service thread), which watches the connection whenever no
 * call holds it, so a process that makes no call (asleep, in a long
 * kernel) answers within a few milliseconds.
 * Errors: GPB_E_NOT_FOUND (instance), GPB_E_DAEMON_GONE.
 */
int gpb_mem_info(gpb_client *client, uint64_t instance, struct gpb_mem_info *out);

/**
 * Like gpb_alloc(), but when the device (or the broker's limit) has no room,
 * or the instance's cap would be exceeded (active mode), the daemon keeps the
 * request for up to @wait_ms milliseconds (at most 86400000) and serves it,
 * in arrival order, as soon as frees, departures or cap changes make room.
 * The call blocks meanwhile (other threads' calls on this client wait for
 * it); events that arrive are queued for gpb_dispatch(). @wait_ms 0 is
 * gpb_alloc().
 * Errors: those of gpb_alloc(), GPB_E_TIMEOUT (no room within @wait_ms),
 * GPB_E_SHUTTING_DOWN (the daemon stopped meanwhile), GPB_E_INVALID
 * (@wait_ms too large).
 */
int gpb_alloc_wait(gpb_client *client, uint64_t instance, uint64_t size, uint64_t alignment,
                   uint32_t wait_ms, struct gpb_allocation *out);

/**
 * Like gpb_alloc(), for memory used in stream order on @stream (a CUstream
 * as void *; NULL is the legacy default stream), as cuMemAllocAsync's is.
 * The block comes from leases of the instance that serve @stream only,
 * and freed with gpb_free_async() on the same @stream it is served again
 * at once to the next gpb_alloc_async() on @stream: the stream itself
 * orders the old work on it before the new, so no event is recorded and
 * nothing is synchronized. Freed on another stream, or with gpb_free(), it
 * waits for an event as any block does. The caller promises what
 * cuMemFreeAsync's callers promise: work on another stream that uses the
 * block is ordered with @stream (an event) before the free is queued; and
 * @stream outlives the blocks allocated on it. Requests the leases do not
 * serve (above a quarter of a slab, GPUBROKER_LEASE=0, the allocators
 * "direct" and "async") are gpb_alloc()'s. sim backend: gpb_alloc(),
 * @stream ignored.
 * Graph capture: a block allocated while @stream is being captured
 * (cuStreamBeginCapture; other than the legacy stream) may be used by
 * every launch of the graph, so whenever it is freed, and however, it is
 * served again only once the graph, the executable graphs made from it
 * and their launches are gone (a CUDA user object the graph holds) and an
 * event after them has completed; until then it counts as in use.
 * Errors: those of gpb_alloc().
 */
int gpb_alloc_async(gpb_client *client, uint64_t instance, uint64_t size, uint64_t alignment,
                    void *stream, struct gpb_allocation *out);

/* ---- VRAM policy ---------------------------------------------------------
 *
 * Every instance is in the manual pool (a proportion of its device) or the
 * auto pool (an equal part of what the manual pool leaves). In active mode
 * an instance's cap is its share of the device's capacity (the memory, or
 * less under an administrator's limit) and allocations over it fail with
 * GPB_E_QUOTA; in passive mode (the default) every cap is the capacity.
 * When another instance's change moves this instance's cap, the client gets
 * a "cap_changed" event ({"instance", "cap", "share", "mode"}). An instance's
 * own connection may change its proportion, pool and group; an
 * administrator (root or the admin group) may change any instance's, and
 * alone may change the mode and the limit. See PROTOCOL.md, "VRAM policy".
 */

/** Limiting modes. */
enum gpb_mode {
	GPB_MODE_PASSIVE = 0, /**< no caps: only memory limits allocations */
	GPB_MODE_ACTIVE = 1,  /**< each instance is held to its cap */
};

/** One instance as the policy sees it. */
struct gpb_instance_info {
	uint64_t instance; /**< instance id */
	uint64_t session;  /**< id of the connection that registered it */
	int device;        /**< device index */
	int grouped;       /**< 1 when it shares a group other than "default" with another */
	double proportion; /**< manual proportion in (0, 1], or 0 in the auto pool */
	double share;      /**< effective proportion: the manual one or its auto share */
	uint64_t cap;      /**< bytes it may hold */
	uint64_t used;     /**< bytes it holds */
	uint64_t free;     /**< bytes it may still take: min(cap - used, device available) */
	char name[65];     /**< instance name */
	char group[65];    /**< stream group */
	char warning[160]; /**< after a change: a warning from the daemon (the auto pool
	                        is under 5%), else empty */
};

/**
 * Moves @instance to the manual pool with @proportion in (0, 1], or changes
 * its manual proportion. Other instances whose cap moves are told
 * (cap_changed). @out (may be NULL) receives the instance as it is now.
 * Errors: GPB_E_INVALID (proportion outside (0, 1], manual proportions of
 * the device would sum over 1, or the auto pool would fall under its
 * minimum: gpb_last_error() says which), GPB_E_NOT_FOUND, GPB_E_PERMISSION
 * (another connection's instance, not an administrator), GPB_E_DAEMON_GONE.
 */
int gpb_set_proportion(gpb_client *client, uint64_t instance, double proportion,
                       struct gpb_instance_info *out);

/**
 * Moves @instance to the auto pool (nothing to do when it is there).
 * Errors: as gpb_set_proportion() (GPB_E_INVALID: the auto pool's minimum).
 */
int gpb_set_auto(gpb_client *client, uint64_t instance, struct gpb_instance_info *out);

/**
 * Moves @instance to stream group @group (1-64 bytes).
 * Errors: GPB_E_INVALID (name), GPB_E_NOT_FOUND, GPB_E_PERMISSION,
 * GPB_E_DAEMON_GONE.
 */
int gpb_set_group(gpb_client *client, uint64_t instance, const char *group,
                  struct gpb_instance_info *out);

/**
 * Any instance of any connection, as the policy sees it.
 * Errors: GPB_E_NOT_FOUND, GPB_E_DAEMON_GONE, GPB_E_PROTOCOL.
 */
int gpb_instance_info(gpb_client *client, uint64_t instance, struct gpb_instance_info *out);

/** The policy of one device. */
struct gpb_policy_info {
	enum gpb_mode mode;        /**< the daemon's mode (the same for every device) */
	double min_auto_share;     /**< least share an auto instance may be left */
	uint64_t total;            /**< device memory */
	uint64_t capacity;         /**< what the broker hands out: total under the limit */
	uint64_t limit;            /**< byte limit, 0 when none */
	double limit_fraction;     /**< fraction limit, 0 when none */
	uint64_t used;             /**< bytes in live allocations */
	uint64_t available;        /**< capacity - used */
	double manual;             /**< sum of the manual proportions */
	double auto_pool;          /**< 1 - manual, at least 0 */
	unsigned manual_instances; /**< instances in the manual pool */
	unsigned auto_instances;   /**< instances in the auto pool */
	uint64_t auto_cap;         /**< the cap of each auto instance */
};

/** Errors: GPB_E_INVALID (no such device), GPB_E_DAEMON_GONE, GPB_E_PROTOCOL. */
int gpb_policy_info(gpb_client *client, int device, struct gpb_policy_info *out);

/** A stream group. */
struct gpb_group_info {
	unsigned members;   /**< instances in it */
	uint64_t used;      /**< bytes they hold */
	uint64_t available; /**< active: their headroom bounded by each device; passive:
	                         the available capacity of their devices */
	int nearly_full;    /**< 1 when more than 95% of used + available is used */
};

/** Errors: GPB_E_NOT_FOUND (no instance in @group), GPB_E_INVALID, GPB_E_DAEMON_GONE. */
int gpb_group_info(gpb_client *client, const char *group, struct gpb_group_info *out);

/* ---- queued requests and coordinated chunking ------------------------------
 *
 * cubie's queue_request / allocate_queue across processes. Each member of a
 * stream group queues labelled array requests on its instance; any member
 * then calls gpb_allocate_queue(). The daemon picks one chunk count along
 * the run axis for everything the group queued, so that one chunk of every
 * array fits at once (the group's available memory; in active mode each
 * member's headroom), allocates each array at its chunked shape (charged to
 * its own instance; unchunkable arrays whole) and sends every member an
 * "allocation_ready" event:
 *   {"group", "instance", "chunks", "chunk_length", "axis_length",
 *    "arrays": [{"label", "id", "shape": [...], "size", "type"}]}
 * The member maps each array with gpb_claim(id) and frees it with gpb_free()
 * or gpb_free_label(). Unclaimed arrays are charged all the same.
 *
 * An array of host memory (type GPB_HOST_PINNED or GPB_HOST_MAPPED, "type"
 * "pinned" or "mapped" in the event) is cut to the same chunk length as the
 * device arrays but does not count when the chunk count is fitted (a batch
 * of host arrays only is one chunk); it becomes host memory of its owner as
 * from gpb_alloc_host() (max_host_memory), mapped by gpb_claim().
 */

/** One array request (cubie's ArrayRequest, as far as sizing goes). */
struct gpb_array_request {
	const char *label;  /**< 1-64 bytes, distinct within one call */
	uint64_t shape[8];  /**< dimensions, each at least 1 (at most 2^53) */
	unsigned ndim;      /**< 1-8 */
	unsigned elem_size; /**< bytes per element (the dtype's itemsize), 1-65536 */
	unsigned axis;      /**< the run axis: the one chunking divides */
	int unchunkable;    /**< 1: keeps its full shape in every chunk */
	int type;           /**< memory type: 0 = device; GPB_HOST_PINNED or GPB_HOST_MAPPED: host
	                         memory, as gpb_alloc_host() (cut to the chunk length, but not
	                         counted in the chunk count; appended last, so 0 keeps old callers) */
};

/** How a request was (or would be) chunked. */
struct gpb_chunking {
	uint64_t axis_length;   /**< runs in the unchunked request */
	uint64_t chunk_length;  /**< runs per chunk */
	uint64_t chunks;        /**< chunk count */
	uint64_t request_bytes; /**< the whole request, unchunked */
	uint64_t chunk_bytes;   /**< one chunk of every array */
	uint64_t available;     /**< the memory it had to fit (the group's) */
	int oversized;          /**< 1 when the request exceeds it more than 20 times */
};

/**
 * Queues @n (1-64) array requests on @instance, replacing queued ones with
 * the same label; at most 64 stay queued per instance. Returns the number
 * now queued on the instance.
 * Errors: GPB_E_INVALID (a request, its type, or labels repeated), GPB_E_LIMIT (64 queued),
 * GPB_E_NOT_FOUND, GPB_E_PERMISSION, GPB_E_DAEMON_GONE.
 */
int gpb_queue_request(gpb_client *client, uint64_t instance, const struct gpb_array_request *reqs,
                      size_t n);

/**
 * Allocates everything queued in @instance's stream group (see above); @out
 * (may be NULL) receives the chunking. This client's own part arrives, like
 * every member's, as an allocation_ready event (gpb_dispatch()).
 * Errors: GPB_E_INVALID (nothing queued), GPB_E_OUT_OF_MEMORY (not even one
 * run per chunk fits the group or a device), GPB_E_QUOTA (nor a member's
 * headroom, active mode), GPB_E_LIMIT, GPB_E_NOT_FOUND, GPB_E_PERMISSION,
 * GPB_E_DAEMON_GONE; GPB_E_OUT_OF_MEMORY also for host arrays over
 * max_host_memory. On failure nothing is allocated and the queues stay.
 */
int gpb_allocate_queue(gpb_client *client, uint64_t instance, struct gpb_chunking *out);

/**
 * cubie's get_chunk_parameters and compute_chunked_shapes, without
 * allocating: the chunking of @reqs to fit @group's available memory (or,
 * with @group NULL, @available bytes). @axis_length 0 means the longest run
 * axis among the chunkable arrays. @shapes (may be NULL) receives each
 * request's chunked shape, in order.
 * Errors: GPB_E_INVALID, GPB_E_NOT_FOUND (no such group),
 * GPB_E_OUT_OF_MEMORY (not even one run per chunk fits), GPB_E_DAEMON_GONE.
 */
int gpb_chunk_parameters(gpb_client *client, const char *group, uint64_t available,
                         uint64_t axis_length, const struct gpb_array_request *reqs, size_t n,
                         struct gpb_chunking *out, uint64_t (*shapes)[8]);

/**
 * cubie's compute_chunked_shapes(requests, chunk_size): the chunking of
 * @reqs at @chunk_length runs per chunk (cut to the axis length), nothing
 * fitted or allocated; @out's available is 0. @axis_length and @shapes as
 * for gpb_chunk_parameters(); unchunkable arrays keep their shape.
 * Errors: GPB_E_INVALID (chunk_length 0, malformed requests),
 * GPB_E_DAEMON_GONE.
 */
int gpb_chunked_shapes(gpb_client *client, uint64_t chunk_length, uint64_t axis_length,
                       const struct gpb_array_request *reqs, size_t n, struct gpb_chunking *out,
                       uint64_t (*shapes)[8]);

/**
 * Maps an array that gpb_allocate_queue() made for this client (an id from
 * its allocation_ready event), as gpb_alloc() would have returned it; a host
 * array as gpb_alloc_host() would have (@out->device -1; for a mapped one
 * gpb_host_device_pointer() gives the device's address).
 * Errors: GPB_E_NOT_FOUND (unknown, or not this client's), GPB_E_INVALID
 * (claimed already), GPB_E_SYSTEM (mapping), GPB_E_BACKEND (registering host
 * memory), GPB_E_DAEMON_GONE.
 */
int gpb_claim(gpb_client *client, uint64_t id, struct gpb_allocation *out);

/**
 * Frees this client's allocations labelled @label by gpb_allocate_queue()
 * (those of @instance only, unless @instance is 0), claimed or not, device
 * and host memory alike. Returns
 * how many were freed. Errors: GPB_E_NOT_FOUND (none), GPB_E_INVALID.
 */
int gpb_free_label(gpb_client *client, uint64_t instance, const char *label);

/**
 * Administrators only: releases every allocation and attachment of every
 * client and every queued request (cubie's invalidate_all). Every client
 * gets an "invalidate" event; this library then forgets and unmaps all it
 * held, so every pointer from this client becomes invalid, and tells the
 * daemon (invalidate_done), which keeps the client's slabs from the driver
 * until then. The event is read by any call on the client that reaches
 * the daemon or by gpb_dispatch(): a client that never calls either keeps
 * its slabs allocated until it disconnects. A gpb_alloc() or gpb_free()
 * served from the client's leases reaches no daemon: a block it served
 * before the event was read is dropped with the rest, and its id, as
 * every dropped id, is GPB_E_NOT_FOUND from then on.
 * Errors: GPB_E_PERMISSION, GPB_E_DAEMON_GONE.
 */
int gpb_invalidate_all(gpb_client *client);

/**
 * Administrators only: how the daemon hands out device memory (cubie's
 * set_allocator): "pool" (slabs and sub-allocation, the default), "direct"
 * (one backend allocation per request, nothing cached) or "async" (as
 * "direct", each from the device's stream-ordered memory pool: cuda devices
 * that share pools by file descriptor). A change releases everything like
 * gpb_invalidate_all(); the same strategy again does nothing.
 * Errors: GPB_E_PERMISSION, GPB_E_INVALID (name), GPB_E_NOT_SUPPORTED (async
 * on sim, or with a device without shareable stream-ordered pools; the
 * message names it), GPB_E_DAEMON_GONE.
 */
int gpb_set_allocator(gpb_client *client, const char *allocator);

/**
 * Sets the daemon's mode; every running client's caps follow at once.
 * Errors: GPB_E_PERMISSION (not an administrator), GPB_E_INVALID,
 * GPB_E_DAEMON_GONE.
 */
int gpb_set_mode(gpb_client *client, enum gpb_mode mode);

/**
 * Bounds what the broker hands out on @device (or on every device when
 * @device is -1), in both modes, like CuPy's set_limit: @bytes > 0, or
 * @fraction in (0, 1] of the device's memory; both 0 removes the limit.
 * Memory already allocated is not taken back.
 * Errors: GPB_E_PERMISSION, GPB_E_INVALID (both given, range, device),
 * GPB_E_DAEMON_GONE.
 */
int gpb_set_limit(gpb_client *client, int device, uint64_t bytes, double fraction);

/** Pool statistics of one device (CuPy/RMM terms). */
struct gpb_pool_stats {
	uint64_t reserved;     /**< bytes held from the device in slabs (CuPy total_bytes) */
	uint64_t used;         /**< bytes in live allocations (used_bytes) */
	uint64_t free;         /**< reserved - used (free_bytes) */
	uint64_t free_blocks;  /**< free ranges inside slabs (n_free_blocks) */
	uint64_t largest_free; /**< largest free range */
	uint64_t peak;         /**< highest used seen */
	uint64_t slabs;        /**< slabs held */
	uint64_t live;         /**< live allocations */
	uint64_t allocs;       /**< allocations served since start */
	uint64_t frees;        /**< frees since start */
	uint64_t ooms;         /**< allocations refused for lack of memory */
	/** bytes of the device kept allocated, holding nothing, for a process
	 * that may still write there: an evicted client's, or one of a
	 * partition that was destroyed, until its process exits; an
	 * invalidated client's, until it answers the event. Part of @used
	 * (except ranges of a pool that gpb_set_allocator replaced), of no
	 * client's. */
	uint64_t fenced;
	/** bytes of every client's leases on the device (part of @used: a
	 * lease is one block of the pool, counted in @live) */
	uint64_t leased;
	/** what the leases' libraries last reported using inside them (each
	 * as of its last lease message) */
	uint64_t in_use;
	/** The daemon's recalls of leases since it started, every device's
	 * (the same on each: see gpb_mem_info()): sent, answered, pending
	 * now and timed out; 0 from a daemon before recalls. */
	uint64_t recalls_sent;
	uint64_t recalls_answered;
	uint64_t recalls_pending;
	uint64_t recalls_timed_out;
};

/** Errors: GPB_E_INVALID (no such device), GPB_E_DAEMON_GONE. */
int gpb_stats(gpb_client *client, int device, struct gpb_pool_stats *out);

/**
 * Sends any request and returns the raw JSON text of its result object.
 * @params_json: a JSON object as text, or NULL for {}.
 * @result_json: receives a string the caller frees with gpb_string_free().
 * This is what gpubrokerctl uses; see PROTOCOL.md for the methods.
 * Errors: GPB_E_INVALID (params not an object), any error the daemon answers.
 */
int gpb_request(gpb_client *client, const char *method, const char *params_json,
                char **result_json);

/* ---- partitions (administrators) --------------------------------------------
 *
 * A partition takes @size bytes out of each of its devices for one uid,
 * guaranteed: connections that present its token (gpb_connect() sends
 * $GPUBROKER_TOKEN) use only it, with the partition as their device; the
 * others share what the partitions leave. */

/**
 * Creates partition @name (1-64 bytes of A-Z a-z 0-9 . _ -) owned by @uid,
 * @size bytes on each of @devices (@n_devices indices; NULL or 0 = every
 * device), and writes its token (64 lowercase hex digits and a NUL) into
 * @token, which only this call ever returns.
 * Errors: GPB_E_PERMISSION (not an administrator), GPB_E_INVALID (name,
 * size 0, a device unknown or named twice), GPB_E_EXISTS (a partition of
 * that name exists), GPB_E_OUT_OF_MEMORY (a device cannot guarantee @size: the message gives
 * the figures), GPB_E_LIMIT, GPB_E_DAEMON_GONE.
 */
int gpb_partition_create(gpb_client *client, const char *name, uint32_t uid, uint64_t size,
                         const int *devices, int n_devices, char token[65]);

/**
 * Destroys partition @name: its connections get the event
 * "partition_destroyed" and are closed, and everything they held goes back.
 * Errors: GPB_E_PERMISSION, GPB_E_NOT_FOUND, GPB_E_INVALID (a bad name, or
 * the partition this connection is in), GPB_E_DAEMON_GONE.
 */
int gpb_partition_destroy(gpb_client *client, const char *name);

/**
 * The partitions this connection may see (all for an administrator, its
 * uid's for a user) as the JSON text of the `partitions` result, into
 * @json_out, which the caller frees with gpb_string_free().
 * Errors: GPB_E_INVALID (@json_out NULL), GPB_E_DAEMON_GONE.
 */
int gpb_partitions(gpb_client *client, char **json_out);

/** Frees a string returned by the library. NULL is a no-op. */
void gpb_string_free(char *s);

/**
 * Event callback: @name is the event ("shutdown", "cap_changed", ...) and
 * @data_json its data object as JSON text; both valid during the call only.
 * It runs without the client's lock held, so it may call gpb_* on the same
 * client, except gpb_disconnect().
 */
typedef void (*gpb_event_fn)(gpb_client *client, const char *name, const char *data_json,
                             void *userdata);

/** Sets (or with NULL clears) the event callback. */
void gpb_set_event_callback(gpb_client *client, gpb_event_fn fn, void *userdata);

/**
 * A file descriptor that polls readable (POLLIN) when gpb_dispatch() has work:
 * bytes from the daemon or events already queued. Owned by the client; do not
 * close or read it. A client with leases has a service thread (see
 * gpb_mem_info()) that reads the daemon's bytes too, when no call does: the
 * events it reads are queued for gpb_dispatch() (the descriptor then polls
 * readable for them), so a wake-up may find the bytes read already and
 * gpb_dispatch() deliver nothing until the next.
 */
int gpb_event_fd(gpb_client *client);

/**
 * Reads what the daemon has sent without blocking and runs the callback for
 * each queued event. Returns the number of events delivered, or
 * GPB_E_DAEMON_GONE / GPB_E_PROTOCOL.
 */
int gpb_dispatch(gpb_client *client);

/** The library's version string, e.g. "0.1.0". */
const char *gpb_version(void);

/* ---- device memory: host copies and slab mappings (cuda backend) ----------
 *
 * With the cuda backend gpb_allocation.ptr is a device pointer (a CUdeviceptr
 * cast to void *) in this process: the library opens each slab's IPC handle
 * once per process (cuIpcOpenMemHandle) and closes it when the process's last
 * allocation or attachment in the slab is freed, on gpb_disconnect(), or on
 * an "invalidate" event. Every mapping of a device is made in the process's
 * one context of that device: the context current on the calling thread at
 * the process's first mapping there (an application's own context is
 * honoured), else the device's primary context, which the library retains
 * until its last mapping there is closed. Kernels must use that context.
 * When that context is reset (cuDevicePrimaryCtxReset, as Numba's
 * Device.reset or cudaDeviceReset do) or destroyed (cuCtxDestroy), its
 * mappings go with it: the library notices at its next use of them, its
 * copy helpers answer GPB_E_CONTEXT_RESET for their pointers, gpb_free()
 * of them works (there is nothing left to close), and new allocations,
 * in the same slabs too, are mapped in the context current then. The library loads libcuda.so.1 at
 * run time; it never links it. With the simulated backend ptr is host memory.
 */

/**
 * Copies @size bytes from host memory @src to @dst, which must lie wholly in
 * memory this process got from gpubroker (gpb_alloc, gpb_attach, gpb_claim).
 * cuda backend: queued on @stream (a CUstream as void *; NULL is the
 * context's legacy default stream) with cuMemcpyHtoDAsync, in the context
 * the allocation was opened in; synchronise @stream before reusing @src or
 * relying on @dst. sim backend: a memcpy, complete on return.
 * Errors: GPB_E_INVALID (NULL pointer, or a range not in gpubroker memory
 * mapped by this process), GPB_E_CONTEXT_RESET (mapped in a CUDA context
 * that has been reset or destroyed since: the memory is gone from this
 * process; free the allocation), GPB_E_BACKEND (the driver failed:
 * gpb_last_error() names the CUresult).
 */
int gpb_copy_to_device(void *dst, const void *src, size_t size, void *stream);

/**
 * Copies @size bytes from gpubroker memory @src (wholly inside one
 * allocation's slab) to host memory @dst; cuMemcpyDtoHAsync on @stream with
 * the cuda backend (synchronise @stream before reading @dst). Errors as
 * gpb_copy_to_device().
 */
int gpb_copy_from_device(void *dst, const void *src, size_t size, void *stream);

/** This process's slab mappings, all connections together. */
struct gpb_mapping_stats {
	uint64_t opens;    /**< slabs mapped (IPC handles opened) since the process started */
	uint64_t closes;   /**< slabs unmapped (IPC handles closed) */
	uint64_t open_now; /**< slabs mapped now */
};

/** Fills @out. Errors: GPB_E_INVALID (@out NULL). */
int gpb_mapping_stats(struct gpb_mapping_stats *out);

/* ---- PyTorch's pluggable allocator ------------------------------------------
 *
 * What torch.cuda.memory.CUDAPluggableAllocator calls, through
 * libgpubroker-torch (built beside this library where there is a C++
 * compiler): its gpb_torch_cxx_alloc, gpb_torch_cxx_free (PyTorch 2.3 and
 * later) and gpb_torch_cxx_free3 (2.0-2.2) take the arguments below and call
 * these, except that a refusal is thrown as std::runtime_error("gpubroker: "
 * and gpb_last_error()): PyTorch does not look at what its allocation
 * function returns (a NULL becomes a tensor at address 0), only at what it
 * throws, which it raises as RuntimeError. gpubroker.torch.enable() passes
 * PyTorch that library. @stream is a
 * cudaStream_t (a CUstream) as void *; @device is PyTorch's CUDA ordinal.
 * The process has one client, connected at the first call (socket:
 * $GPUBROKER_SOCKET, else the default), and one instance per device,
 * registered at the device's first allocation on the daemon's device with
 * that ordinal's UUID, named $GPUBROKER_TORCH_NAME (default "torch-PID"),
 * in the manual pool with $GPUBROKER_TORCH_PROPORTION (in (0, 1]; unset:
 * the auto pool) and in stream group $GPUBROKER_TORCH_GROUP (default
 * "default"). Thread-safe (one lock). Everything goes back to the daemon
 * when the process exits; after a fork the child starts afresh (the
 * parent's pointers are not its own). A client the daemon dropped
 * (GPB_E_DAEMON_GONE) is replaced at the next call.
 */

/**
 * Allocates @size bytes for PyTorch on CUDA ordinal @device (gpb_alloc on
 * the device's instance). Returns the device pointer, or NULL with the
 * reason in gpb_last_error() (a cap or the device full: GPB_E_QUOTA /
 * GPB_E_OUT_OF_MEMORY's message; a bad $GPUBROKER_TORCH_PROPORTION; no
 * daemon); libgpubroker-torch throws it to PyTorch. @size 0 returns NULL,
 * as cudaMalloc(0) does. The block is gpb_alloc_async()'s on @stream: freed
 * by PyTorch on that stream, it is served again at once to the next tensor
 * on it, as PyTorch's own allocator does (a tensor used on another stream
 * is for PyTorch's record_stream, which this allocator is not told of:
 * synchronize that stream before the tensor dies).
 */
void *gpb_torch_alloc(ssize_t size, int device, void *stream);

/**
 * Frees @ptr from gpb_torch_alloc() once the work queued on @stream before
 * this call has run (gpb_free_async). @size and @device are not needed (the
 * library knows the pointer); NULL and unknown pointers are ignored (an
 * unknown one sets gpb_last_error()).
 */
void gpb_torch_free(void *ptr, ssize_t size, int device, void *stream);

/** gpb_torch_free() with PyTorch 2.0-2.2's arguments (no device). */
void gpb_torch_free3(void *ptr, ssize_t size, void *stream);

/**
 * The instance of CUDA ordinal @device as gpb_torch_alloc() uses it: its id
 * in *@instance (may be NULL) and gpb_mem_info() in *@out (may be NULL);
 * connects and registers as the first allocation would. Errors: as
 * gpb_connect(), gpb_register() and gpb_mem_info() (GPB_E_INVALID for a
 * negative @device or a bad $GPUBROKER_TORCH_PROPORTION).
 */
int gpb_torch_mem_info(int device, uint64_t *instance, struct gpb_mem_info *out);

/**
 * What a framework allocator (gpb_torch_*) handed out on one CUDA ordinal,
 * in the terms of PyTorch's memory_stats() (which a pluggable allocator
 * cannot give: torch.cuda.memory_allocated() and its kin raise).
 *
 * @peak is exact while one thread allocates; with several, it is the sum
 * of each thread's share's peak (threads keep their figures apart so as not
 * to wait on each other), which is never below the true peak.
 */
struct gpb_framework_stats {
	uint64_t allocated; /**< bytes in live blocks (memory_allocated) */
	uint64_t peak;      /**< most bytes allocated since the start or gpb_torch_reset_peak() */
	uint64_t reserved;  /**< bytes the daemon charges the instance (memory_reserved) */
	uint64_t live;      /**< live blocks */
	uint64_t allocs;    /**< allocations since the process started */
	uint64_t frees;     /**< frees since the process started */
	uint64_t refused;   /**< allocations refused (a cap, the device full, no daemon) */
};

/**
 * Fills @out with gpb_torch_alloc()'s figures on CUDA ordinal @device,
 * counted as the blocks come and go (no request) but @reserved, which asks
 * the daemon (0 before the device's first allocation: nothing registered
 * yet). Blocks of a client the daemon dropped count no more.
 * Errors: GPB_E_INVALID (@device outside 0-63, @out NULL), those of
 * gpb_mem_info().
 */
int gpb_torch_stats(int device, struct gpb_framework_stats *out);

/** Sets @device's peak to what is allocated now (reset_peak_memory_stats).
 * Errors: GPB_E_INVALID (@device outside 0-63). */
int gpb_torch_reset_peak(int device);

/* ---- CuPy's CFunctionAllocator -----------------------------------------------
 *
 * What cupy.cuda.memory.CFunctionAllocator calls (gpubroker.cupy.
 * c_allocator() makes one): allocation and free as C function pointers, no
 * Python per allocation. The process has one client for them, connected
 * at the first call (socket: $GPUBROKER_SOCKET, else the default), and one
 * instance per CUDA ordinal, registered at the device's first allocation
 * by its UUID, named $GPUBROKER_CUPY_NAME (default "cupy-PID"), in the
 * manual pool with $GPUBROKER_CUPY_PROPORTION (in (0, 1]; unset: the auto
 * pool) and stream group $GPUBROKER_CUPY_GROUP. Thread-safe; after a fork
 * the child starts afresh; a client the daemon dropped is replaced at the
 * next call. CuPy passes no stream: blocks are gpb_alloc()'s and frees
 * gpb_free()'s (a fence on the legacy default stream, which follows CuPy's
 * default stream and every blocking stream; see gpb_free() for streams
 * made non-blocking).
 */

/**
 * Allocates @size bytes on CUDA ordinal @device. @param must be NULL (the
 * CFunctionAllocator's param). Returns the device pointer; NULL for @size
 * 0. A refusal (a cap, the device full, no daemon, a non-NULL @param):
 * inside a Python process, MemoryError("gpubroker: <reason>") is raised in
 * the calling thread and (void *)-1 returned, which CuPy (built with
 * Cython 3) turns into that exception; elsewhere NULL, the reason in
 * gpb_last_error().
 */
void *gpb_cupy_malloc(void *param, size_t size, int device);

/** Frees @ptr from gpb_cupy_malloc() (gpb_free()); NULL and unknown
 * pointers are ignored (gpb_last_error() says so). */
void gpb_cupy_free(void *param, void *ptr, int device);

/**
 * The instance of CUDA ordinal @device as gpb_cupy_malloc() uses it: its id
 * in *@instance and its figures in *@out (either may be NULL), registering
 * it if need be. Errors: those of gpb_connect(), gpb_register() and
 * gpb_mem_info(); GPB_E_INVALID (@device outside 0-63, a bad
 * $GPUBROKER_CUPY_PROPORTION).
 */
int gpb_cupy_mem_info(int device, uint64_t *instance, struct gpb_mem_info *out);

/* ---- kernel buffer layout planner ------------------------------------------
 *
 * cubie's buffer registry, as pure computation: no daemon, no connection.
 * Every component that generates device code (a step function, its
 * right-hand side, a Newton solver...) registers the scratch buffers it
 * needs; one layout is computed and the kernel allocates it once at launch.
 *
 * The model:
 * - Components form trees. A root is one kernel: its layout starts at
 *   offset 0. A child's region is delegated from its parent's: the parent's
 *   own buffers come first, then each child's region in the order the
 *   children were added, recursively. A component's region holds its
 *   buffers and its descendants' regions, nothing else.
 * - Three separate address spaces: shared memory, local memory (buffers
 *   that are not persistent) and persistent local memory (state that
 *   survives from one step to the next). A persistent shared buffer lives in
 *   the shared space. Each space is laid out independently.
 * - Sizes are per thread: each thread owns a slice of every space, so a
 *   block needs (shared bytes of the root) x (threads per block) of shared
 *   memory. Offsets are bytes from the start of a thread's slice.
 * - A buffer's offset is a multiple of its element size (its precision, 4
 *   or 8 bytes). A region's start and size are multiples of the largest
 *   alignment inside it, so that consecutive threads' slices stay aligned.
 * - Aliasing: a buffer B that names an alias X (a buffer of the same
 *   component, same location) asserts that the lifetimes of B and X never
 *   overlap; it asserts nothing about other buffers. B is then placed inside
 *   X's storage when it fits there, else it gets storage of its own ("where
 *   sizes allow"). Several buffers may alias X: they are packed into X's
 *   bytes one after another in the order they were added, never on top of
 *   each other, since they did not assert anything about one another. A
 *   buffer that was itself placed inside another's storage hosts nobody:
 *   whoever aliases it gets storage of its own. Persistent buffers are never
 *   aliased, in either direction.
 *
 * Names (components, buffers, aliases) are 1-GPB_LAYOUT_MAX_NAME bytes of
 * printable ASCII without blanks. Component names are unique in a layout;
 * buffer names are unique within their component.
 *
 * Ownership: every string passed in is copied. Strings returned (through
 * struct gpb_layout_buffer, gpb_layout_placement and gpb_layout_component_info)
 * belong to the layout and stay valid until gpb_layout_destroy().
 *
 * Threads: a layout is not locked; use one from one thread at a time.
 * Failed calls leave the layout as it was and explain themselves through
 * gpb_last_error() (which buffer, which rule).
 */

/** At most this many bytes in a component, buffer or alias name. */
#define GPB_LAYOUT_MAX_NAME 64
/** At most this many components in one layout (GPB_E_LIMIT beyond). */
#define GPB_LAYOUT_MAX_COMPONENTS 1024
/** At most this many buffers in one layout (GPB_E_LIMIT beyond). */
#define GPB_LAYOUT_MAX_BUFFERS 4096
/** The shared-memory budget per block when none is given: 48 KiB. */
#define GPB_LAYOUT_DEFAULT_BUDGET 49152u
/** Threads in a warp: block sizes are whole warps. */
#define GPB_LAYOUT_WARP 32u
/** The largest block CUDA launches. */
#define GPB_LAYOUT_MAX_THREADS 1024u

typedef struct gpb_layout gpb_layout;

/** Where a buffer lives. */
enum gpb_layout_location {
	GPB_LAYOUT_SHARED = 0, /**< on-chip shared memory of the block */
	GPB_LAYOUT_LOCAL = 1,  /**< per-thread local memory (registers, L1) */
};

/** The address space a buffer is laid out in. */
enum gpb_layout_space {
	GPB_LAYOUT_SPACE_SHARED = 0,           /**< shared, persistent or not */
	GPB_LAYOUT_SPACE_LOCAL = 1,            /**< local, not persistent */
	GPB_LAYOUT_SPACE_PERSISTENT_LOCAL = 2, /**< local and persistent */
};

/** A buffer to register (cubie's CUDABuffer). Zero-initialise, then fill. */
struct gpb_layout_buffer {
	const char *component;             /**< the component that registers it (required) */
	const char *name;                  /**< unique within @component */
	uint64_t size;                     /**< elements, at least 1 */
	enum gpb_layout_location location; /**< shared or local */
	int persistent;                    /**< 1: survives across steps; never aliased */
	const char *alias;  /**< a buffer of @component it may share storage with, or NULL */
	unsigned precision; /**< bytes per element: 4 (float32) or 8 (float64) */
};

/** Where a buffer was placed. */
struct gpb_layout_placement {
	enum gpb_layout_space space; /**< shared, local or persistent local */
	uint64_t offset;             /**< bytes from the start of a thread's slice of @space */
	uint64_t bytes;              /**< size x precision */
	const char *aliased_with;    /**< the buffer whose storage it shares, or NULL */
};

/** A component's region: its buffers and its descendants', per thread. */
struct gpb_layout_sizes {
	uint64_t shared;                  /**< shared bytes (cubie's shared_buffer_size) */
	uint64_t local;                   /**< local bytes, not persistent (local_buffer_size) */
	uint64_t persistent_local;        /**< persistent local bytes */
	uint64_t shared_offset;           /**< where the region starts in the shared space */
	uint64_t local_offset;            /**< ... in the local space */
	uint64_t persistent_local_offset; /**< ... in the persistent local space */
};

/** One component, as gpb_layout_component_at() lists it. */
struct gpb_layout_component_info {
	const char *name;   /**< the component's */
	const char *parent; /**< NULL for a root */
	unsigned depth;     /**< 0 for a root */
	struct gpb_layout_sizes sizes;
};

/**
 * Creates an empty layout. @out receives it; free it with
 * gpb_layout_destroy(). Errors: GPB_E_INVALID (@out NULL), GPB_E_NOMEM.
 */
int gpb_layout_create(gpb_layout **out);

/** Frees a layout and every string it returned. NULL is a no-op. */
void gpb_layout_destroy(gpb_layout *layout);

/**
 * Adds component @name under @parent (a component added before), or as a
 * root when @parent is NULL. Its region follows its parent's buffers and
 * the regions of the children added before it.
 * Errors: GPB_E_INVALID (@layout NULL), GPB_E_LAYOUT_NAME,
 * GPB_E_LAYOUT_DUPLICATE (a component of that name exists),
 * GPB_E_NOT_FOUND (no component @parent), GPB_E_LIMIT, GPB_E_NOMEM.
 */
int gpb_layout_add_component(gpb_layout *layout, const char *name, const char *parent);

/**
 * Registers a buffer. The alias may name a buffer added later; it is
 * checked by gpb_layout_compute().
 * Errors: GPB_E_INVALID (@layout or @desc NULL, location, precision other
 * than 4 or 8), GPB_E_NOT_FOUND (no such component), GPB_E_LAYOUT_NAME (name
 * or alias), GPB_E_LAYOUT_DUPLICATE (a buffer of that name in the
 * component), GPB_E_LAYOUT_ZERO_SIZE, GPB_E_LAYOUT_OVERFLOW (size x
 * precision), GPB_E_LAYOUT_ALIAS_PERSISTENT (a persistent buffer with an
 * alias), GPB_E_LAYOUT_ALIAS_CYCLE (an alias to itself), GPB_E_LIMIT,
 * GPB_E_NOMEM.
 */
int gpb_layout_add_buffer(gpb_layout *layout, const struct gpb_layout_buffer *desc);

/**
 * Places every buffer (see the model above). Queries need a layout
 * computed since its last change.
 * Errors: GPB_E_INVALID (@layout NULL), GPB_E_LAYOUT_ALIAS_UNKNOWN,
 * GPB_E_LAYOUT_ALIAS_PERSISTENT (the alias is persistent),
 * GPB_E_LAYOUT_ALIAS_LOCATION, GPB_E_LAYOUT_ALIAS_CYCLE,
 * GPB_E_LAYOUT_OVERFLOW (an offset or total), GPB_E_NOMEM. On failure the
 * layout stays uncomputed.
 */
int gpb_layout_compute(gpb_layout *layout);

/**
 * Where buffer @name of @component was placed.
 * Errors: GPB_E_INVALID (NULL argument, layout not computed),
 * GPB_E_NOT_FOUND (no such component or buffer).
 */
int gpb_layout_buffer_info(const gpb_layout *layout, const char *component, const char *name,
                           struct gpb_layout_placement *out);

/**
 * The per-thread bytes of @component and its descendants in each space,
 * and where its region starts.
 * Errors: GPB_E_INVALID (NULL argument, layout not computed),
 * GPB_E_NOT_FOUND (no such component).
 */
int gpb_layout_component_sizes(const gpb_layout *layout, const char *component,
                               struct gpb_layout_sizes *out);

/**
 * The largest block size that fits @component's shared memory (its and its
 * descendants', usually a root's) into @budget bytes per block: @requested,
 * else the largest whole number of warps below it, such that shared bytes
 * per thread x threads <= @budget.
 * @budget: shared bytes per block; 0 means GPB_LAYOUT_DEFAULT_BUDGET.
 * @max_budget: the device's opt-in limit (cudaDevAttrMaxSharedMemoryPerBlockOptin,
 * 227 KiB on an H100); 0 means GPB_LAYOUT_DEFAULT_BUDGET. A budget above
 * 48 KiB needs the kernel's opt-in (cudaFuncAttributeMaxDynamicSharedMemorySize).
 * @requested: threads per block, a multiple of GPB_LAYOUT_WARP up to
 * GPB_LAYOUT_MAX_THREADS.
 * Errors: GPB_E_INVALID (NULL argument, layout not computed, @requested,
 * @budget above @max_budget), GPB_E_NOT_FOUND, GPB_E_LAYOUT_NO_FIT (one warp
 * needs more than @budget).
 */
int gpb_layout_block_size(const gpb_layout *layout, const char *component, uint32_t budget,
                          uint32_t max_budget, uint32_t requested, uint32_t *threads);

/**
 * The buffer at @index (from 0) in layout order: each root's components
 * depth first (a component, then its children in the order added), each
 * component's buffers in the order added. @desc and @out may be NULL.
 * Errors: GPB_E_INVALID (layout not computed), GPB_E_NOT_FOUND (@index past
 * the last buffer).
 */
int gpb_layout_buffer_at(const gpb_layout *layout, size_t index, struct gpb_layout_buffer *desc,
                         struct gpb_layout_placement *out);

/**
 * The component at @index (from 0), in the order of gpb_layout_buffer_at().
 * Errors: GPB_E_INVALID (NULL argument, layout not computed),
 * GPB_E_NOT_FOUND (@index past the last component).
 */
int gpb_layout_component_at(const gpb_layout *layout, size_t index,
                            struct gpb_layout_component_info *out);

#ifdef __cplusplus
}
#endif

#endif
