/*
 * broker.h - the daemon's state: devices and their pools, sessions,
 * instances and allocations. No sockets and no JSON: the server and the
 * dispatcher are thin shells around these calls.
 *
 * struct broker and its devices are opaque here (broker_internal.h): the
 * layers above read them through the calls of "What the layers above read"
 * (broker_view.c), which copy figures into snapshot structs or walk the
 * sessions, instances and partitions for them. Sessions, instances and
 * partitions stay open structs: a handler reads its own session's
 * identity (id, uid, gid, pid, name, admin, hello, part, keep_slabs, which
 * hello and the server set) and an instance's (id, device, name, pol,
 * used) on every request, and accessors for each would be noise. Their
 * lists (link, instances, allocs, hosts, held, attached, parting) are the
 * broker's: walk them with broker_session_next(), broker_instance_next()
 * and broker_partition_next().
 */
#ifndef GPB_BROKER_H
#define GPB_BROKER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "arena.h"
#include "backend.h"
#include "broker_types.h"
#include "idmap.h"
#include "list.h"
#include "policy.h"
#include "pool.h"
#include "schema.h"

struct broker;       /* broker_internal.h */
struct broker_alloc; /* broker_internal.h */

struct broker_instance {
	uint64_t id;
	struct list link; /* session->instances */
	struct session *owner;
	int device;
	char name[PROTO_MAX_NAME + 1];
	struct policy_instance pol; /* proportion, share, cap and group: the policy's view */
	uint64_t used;              /* charged: its leases' bytes and its allocations' */
	uint64_t live;              /* its allocations and leases (carves are in their lease) */
	uint64_t leased;            /* bytes of its leases, part of used */
	unsigned leases;            /* how many (at most PROTO_MAX_LEASES) */
	uint64_t in_use;            /* what its client last said it uses inside them */
	unsigned wait_pass;         /* broker->wait_pass when a wait of it was short of quota */
	/* Its recall out (broker_recall.c), one at a time: the event's epoch
	 * (0: none), the bytes asked, when it times out; and its counts. */
	uint64_t recall_epoch, recall_bytes, recall_deadline;
	uint64_t recall_quiet_until; /* one it let time out: not asked again before */
	uint64_t recall_retry_at;    /* one it answered with less than asked: asked
	                                again from then (it may have freed more) */
	uint64_t recalls_sent, recalls_answered, recalls_timed_out;
	struct list queued; /* struct broker_queued */
	unsigned queued_count;
};

/*
 * Host memory (alloc types "pinned" and "mapped"): a sealed memfd of its
 * own, passed to the client, which maps it and registers it with CUDA
 * (cuMemHostRegister). Not device memory: no pool, no policy charge.
 */
struct broker_host {
	uint64_t id;
	struct list link; /* session->hosts */
	struct session *owner;
	uint64_t size; /* the memfd's: the request rounded up to pages */
	int fd;        /* the memfd until it is handed over (broker_host_take_fd); else -1 */
	bool mapped;
	bool unclaimed;    /* made by allocate_queue and not claimed yet: its client
	                      has not been given the descriptor */
	char *label;       /* made by allocate_queue: the request's label; else NULL */
	uint64_t instance; /* with label: the instance it was queued on */
};

/* The memory type of a queued array request. */
enum broker_memory {
	BROKER_MEM_DEVICE, /* the instance's device, charged to the policy */
	BROKER_MEM_PINNED, /* host memory (broker_host), max_host_memory */
	BROKER_MEM_MAPPED, /* host memory mapped into the devices' address space */
};

/* An array request queued for allocate_queue (queue_request). */
struct broker_queued {
	struct list link; /* broker_instance->queued, in the order queued */
	char label[PROTO_MAX_NAME + 1];
	struct policy_array arr;
	enum broker_memory type;
};

/*
 * A partition (broker_partition.c): memory an administrator took out of the
 * devices for one owner (a batch job), guaranteed: the broker's own policy
 * shares only what the partitions leave. A session that presents the token
 * in hello (and is the owner's uid) lives inside it: its instances are in
 * the partition's policy, whose devices are the partition's sizes.
 */
#define BROKER_TOKEN_BYTES 32 /* 256 bits from getrandom() */

struct broker_partition {
	struct list link; /* broker->partitions */
	char name[PROTO_MAX_NAME + 1];
	uid_t uid; /* the owner: only its sessions may join */
	unsigned char token[BROKER_TOKEN_BYTES];
	uint64_t size[BACKEND_MAX_DEVICES];       /* bytes per device; 0: not on it */
	uint32_t domain;                          /* its sessions' slabs' domain in the pools
	                                             (pool.h), guaranteed size[i] */
	struct policy policy;                     /* devices of total size[i] */
	unsigned sessions;                        /* sessions inside it */
	unsigned short_pass[BACKEND_MAX_DEVICES]; /* broker->wait_pass in which a wait
	                                             was short of its memory */
	time_t created;
};

struct broker_parting; /* broker_internal.h */
struct broker_ghost;   /* broker_internal.h */

struct session {
	uint64_t id;
	void *conn;       /* the server's connection (opaque here) */
	struct list link; /* broker->sessions */
	uid_t uid;
	gid_t gid;     /* primary */
	gid_t *groups; /* supplementary, as the server read them at connect */
	unsigned ngroups;
	pid_t pid; /* 0: unknown (the client is in a PID namespace the daemon cannot see) */
	int pidfd; /* where pid is unknown, a pidfd of the peer (SO_PEERPIDFD) that the
	              server handed over, closed with the session; else -1 */
	char name[PROTO_MAX_NAME + 1];
	bool admin; /* root or a member of the admin group (set by the server from
	               SO_PEERCRED and SO_PEERGROUPS): may use admin operations */
	bool hello;
	time_t connected;
	time_t last_request; /* CLOCK_MONOTONIC seconds of its last request answered (dispatch) */
	struct list instances;
	unsigned instance_count;
	struct list allocs;
	uint64_t alloc_count;
	uint64_t used;
	struct idmap held;     /* slab id -> struct session_slab: slabs this session holds */
	struct idmap attached; /* allocation id -> struct broker_alloc it holds */
	struct list hosts;     /* struct broker_host */
	unsigned host_count;
	unsigned wait_count;            /* its allocations waiting in broker->waits */
	struct broker_parting *parting; /* slabs its client may still have mapped */
	unsigned parting_count;
	bool evicted;                  /* by an administrator: its process may still have its slabs
	                                  mapped when the connection goes (broker_ghost) */
	struct broker_partition *part; /* the partition it joined in hello, or NULL */
	bool ended;                    /* its partition was destroyed: it holds nothing, and its
	                                  connection is ending */
	bool unmapped;                 /* said goodbye: its client unmapped every slab it was
	                                  given (until it is handed one again) */
	bool keep_slabs;               /* hello's keep_slabs: holds its slabs past their last
	                                  allocation, until asked for them (reclaim) or
	                                  told (release) */
};

/*
 * How the broker asks for a wake-up when a waiting allocation's deadline
 * comes: (re)arm one timer to fire after delay_ms, or disarm it when
 * delay_ms is UINT64_MAX. When it fires the server calls
 * broker_waits_expire(). Without one (unit tests) expiry happens only when
 * the caller calls broker_waits_expire() itself.
 */
typedef void (*broker_timer_fn)(void *ctx, uint64_t delay_ms);

/*
 * How the broker learns that a process has exited (the server's
 * exitwatch.c): watch the process (pidfd, borrowed: the watch keeps a copy,
 * when it is not -1; else pid) and call broker_ghost_release(b, ghost) once
 * it has exited. 0, or a negative errno when it cannot (the ghost is
 * released then). Never called for a process with neither (pid 0, pidfd
 * -1): the broker keeps that ghost (broker_ghost_make).
 */
typedef int (*broker_exit_fn)(void *ctx, pid_t pid, int pidfd, struct broker_ghost *ghost);

/*
 * An allocation waiting for memory or quota (alloc with wait_ms), or a
 * request held while the recalls it caused are out (frame set: see
 * broker_held_add).
 */
struct broker_wait {
	struct list link; /* broker->waits */
	struct session *s;
	uint64_t instance;
	uint64_t size, align;
	uint64_t deadline; /* CLOCK_MONOTONIC milliseconds */
	uint64_t started;
	char id[PROTO_MAX_ID + 1]; /* the request's id, for the deferred reply */
	/* A held request: its frame, run again by the receiver of
	 * BROKER_EVENT_HELD, which sets answered once it replied. */
	char *frame;
	size_t frame_len;
	bool answered;
};

struct broker_grant;

/*
 * Which limit refused memory, with its figures: the broker's verdict, which
 * dispatch words and encodes without asking the broker anything more.
 */
enum broker_limit {
	BROKER_LIMIT_NONE,        /* rc alone says it: -ENOENT, -ESHUTDOWN, -EIO, -EAGAIN */
	BROKER_LIMIT_SIZE,        /* -EINVAL: too large to round up (to the granule, to pages) */
	BROKER_LIMIT_DEVICE,      /* -ENOMEM: no room for s on device: free, largest */
	BROKER_LIMIT_INSTANCE,    /* -EDQUOT: the instance's cap, used, requested (charged) */
	BROKER_LIMIT_USER,        /* -EXFULL: the user's cap (a rule), used on device, requested */
	BROKER_LIMIT_TIMEOUT,     /* -ETIMEDOUT: a wait ran out after waited_ms */
	BROKER_LIMIT_INFLIGHT,    /* -EBUSY: value = max_inflight waiting requests */
	BROKER_LIMIT_ALLOCATIONS, /* -EMFILE: value = max_allocations */
	BROKER_LIMIT_FILES,       /* -ENFILE: value = the user's share of descriptors */
	BROKER_LIMIT_HOST,        /* -ENOMEM: free = what max_host_memory leaves */
	BROKER_LIMIT_LEASES,      /* -EMLINK: value = PROTO_MAX_LEASES leases of the instance */
	BROKER_LIMIT_SLAB,        /* -EFBIG: a lease larger than a slab: value = the slab size */
	BROKER_LIMIT_ALLOCATOR,   /* -EOPNOTSUPP: leases need allocator pool: value = the
	                             allocator (enum broker_allocator) */
};

struct broker_refusal {
	int rc; /* the negative errno the limit answers with */
	enum broker_limit limit;
	int device; /* -1 where none applies */
	uid_t uid;
	uint64_t instance, requested, cap, used, free, largest, waited_ms, value;
};

/*
 * What the broker has to tell a client outside the reply to its current
 * request. The broker only says what happened; the layer above it (dispatch)
 * turns each event into a frame, so no JSON and no socket is known here.
 */
enum broker_event_type {
	/* The cap of one of the session's instances moved (cubie's rebalance). */
	BROKER_EVENT_CAP_CHANGED,
	/* Everything the session held was released (invalidate_all,
	 * set_allocator): it must close its mappings and answer the epoch. */
	BROKER_EVENT_INVALIDATE,
	/* A waiting allocation ended: served (rc 0, grant set), timed out
	 * (-ETIMEDOUT) or failed; its deferred reply is due. */
	BROKER_EVENT_WAIT_DONE,
	/* The broker needs back a slab the session keeps empty: its client
	 * must unmap it and answer with release. */
	BROKER_EVENT_RECLAIM,
	/* The broker asks back bytes of one of the session's instance's
	 * leases: its client returns wholly free ones and answers
	 * recall_done with the epoch. */
	BROKER_EVENT_RECALL,
	/* A held request may be served now (room came, or the recalls it
	 * waited for ended): run its frame again; with final, answer it
	 * whatever the outcome (no more holding). Set w->answered when a reply
	 * went out. */
	BROKER_EVENT_HELD,
};

struct broker_event {
	enum broker_event_type type;
	struct session *s; /* whom it is for */
	union {
		struct {
			uint64_t instance, cap;
			double share;
			enum policy_mode mode;
		} cap_changed;
		struct {
			const char *reason;
			uint64_t epoch;
		} invalidate;
		struct {
			const struct broker_wait *w;
			int rc;
			const struct broker_grant *grant;     /* rc 0 */
			const struct broker_refusal *refusal; /* rc < 0 */
		} wait_done;
		struct {
			uint64_t slab;
			const char *reason;
		} reclaim;
		struct {
			uint64_t instance, bytes, epoch;
			const char *reason;
		} recall;
		struct {
			struct broker_wait *w;
			bool final;
		} held;
	};
};

/*
 * Receives every event (dispatch installs it). Called from inside broker
 * operations, so it must not call back into an operation that changes the
 * broker, except that a WAIT_DONE whose reply cannot be sent may free the
 * grant it was given (broker_free), and that a HELD event runs its request
 * again (from broker_waits_run, which allows it: a wait pass nested in it
 * is repeated after rather than run inside). Without one (the broker's own unit
 * tests) events are dropped.
 */
typedef void (*broker_event_fn)(void *ctx, const struct broker_event *ev);

/* Counters the broker keeps about itself (rendered by the metrics). */
struct broker_stats {
	uint64_t connections_total;
	/* Allocations that waited for memory or quota: every wait started ends
	 * served, timed out or cancelled (its connection closed, its instance
	 * went away, the daemon stopped) once it leaves the queue. */
	uint64_t waits_started, waits_served, waits_timed_out, waits_cancelled;
	/* Kept slabs asked back (reclaim events sent). */
	uint64_t reclaims;
	/* Recall events sent; answered (recall_done) or timed out since. */
	uint64_t recalls_sent, recalls_answered, recalls_timed_out;
	/* invalidate_all requests carried out; sessions evicted. */
	uint64_t invalidations, evictions;
};

/* What a client needs to use an allocation (or an attachment). */
struct broker_grant {
	uint64_t id;
	int device;
	uint64_t slab_id;
	uint64_t slab_size;
	uint64_t offset;
	uint64_t size;
	const unsigned char *handle; /* set when this session did not hold the slab */
	int fd;                      /* with handle, the descriptor to pass; else -1 */
	bool pool;                   /* fd is the device's memory pool (cuda async) */
	uint64_t pool_id;            /* with pool: the pool's id (backend_slab.pool_id) */
	bool vmm;                    /* fd is the slab's VMM memory (cuda transport vmm) */
	bool keep;                   /* with handle: the session keeps the slab past its
	                                last allocation (keep_slabs, allocator pool) */
};

/* What the layers above read: broker_view.h (included at the end). */

/* Takes ownership of backend. 0, -ENOMEM, -EINVAL (slab size). */
int broker_create(struct backend *backend, const struct broker_limits *limits, struct broker **out);
void broker_destroy(struct broker *b);

/* NULL when out of memory. */
struct session *broker_session_open(struct broker *b, uid_t uid, gid_t gid, pid_t pid);
/* Frees every allocation, attachment and instance the session holds. */
void broker_session_close(struct broker *b, struct session *s);
/* Gives the session its supplementary groups (copied; the caller bounds n).
 * 0 or -ENOMEM. */
int broker_session_set_groups(struct session *s, const gid_t *groups, unsigned n);

/*
 * -ENODEV (device), -EMFILE (max_instances), -ENOMEM, and the policy's
 * refusals: -EINVAL (proportion or group), -ENOSPC (manual proportions over
 * 1), -EUSERS (the auto pool would fall below its minimum). The instances
 * whose cap moved hear it (cap_changed).
 */
int broker_register(struct broker *b, struct session *s, const char *name, int device,
                    double proportion, const char *group, struct broker_instance **out);
/* -ENOENT, -EBUSY (holds allocations). */
int broker_unregister(struct broker *b, struct session *s, uint64_t instance);
struct broker_instance *broker_instance_find(struct session *s, uint64_t instance);

/*
 * -ENOENT (instance), -EINVAL (size/alignment), -ENOMEM (device full, or
 * its capacity under the limit), -EDQUOT (active mode: over the instance's
 * cap), -EMFILE (max_allocations), -ESHUTDOWN (stopping), -EIO (backend
 * failure), -EAGAIN (host memory).
 */
int broker_alloc(struct broker *b, struct session *s, uint64_t instance, uint64_t size,
                 uint64_t align, struct broker_grant *out);
/*
 * alloc's admission of device memory (broker_wait.c): granted now (0, *out
 * filled), queued to wait (BROKER_WAITING: wait_ms > 0 and it may fit once
 * memory is freed or caps move; its answer is a BROKER_EVENT_WAIT_DONE for
 * req_id), or refused (a negative errno, *why saying which limit, with its
 * figures). A request that may wait does not overtake those already waiting
 * on its device; one that could never fit (more than the device or the
 * partition, more than the user's cap) is refused at once.
 */
#define BROKER_WAITING 1
int broker_alloc_admit(struct broker *b, struct session *s, const char *req_id, uint64_t instance,
                       uint64_t size, uint64_t align, uint64_t wait_ms, struct broker_grant *out,
                       struct broker_refusal *why);
/* -ENOENT: unknown, freed, or another session's (indistinguishable); a
 * lease too (lease_return gives it back). */
int broker_free(struct broker *b, struct session *s, uint64_t id);

/* ---- leases (broker_lease.c) ----
 * A lease is a block of a slab on 2 MiB boundaries that a client
 * sub-allocates in itself, charged whole to its instance (used = leased +
 * allocations) and counted as one daemon object (max_allocations). It ends
 * with broker_lease_return() or with its session. */

/* The granule of leases: their sizes and offsets in their slab. */
#define BROKER_LEASE_UNIT (2ull << 20)
/*
 * Leases size bytes or more for s's instance: max(size rounded up to
 * BROKER_LEASE_UNIT, BROKER_LEASE_UNIT << the leases it holds), at most the
 * slab size, shrunk (never below size rounded up) to what its cap, its
 * user's cap and the device's room allow. 0 with *out its grant, or a
 * negative errno with *why saying which limit: as broker_alloc_admit()'s
 * refusals without a wait, and BROKER_LIMIT_SLAB (size rounded up is more
 * than a slab), BROKER_LIMIT_LEASES, BROKER_LIMIT_ALLOCATOR (allocator
 * direct or async). in_use (NULL: not said) is what the client uses of
 * the instance's leases, recorded even when the lease is refused.
 */
int broker_lease(struct broker *b, struct session *s, uint64_t instance, uint64_t size,
                 const uint64_t *in_use, struct broker_grant *out, struct broker_refusal *why);
/* Gives back s's lease whole, recording in_use (NULL: not said) for its
 * instance, and serves waits: -ENOENT (unknown, another session's, returned
 * already), -EBUSY (a carve of it lives). */
int broker_lease_return(struct broker *b, struct session *s, uint64_t lease,
                        const uint64_t *in_use);
/*
 * Makes size bytes (rounded up to the granule) at offset in s's lease an
 * allocation of s (*id, *carved its size): charged nothing more, counted
 * against max_allocations, ended by broker_free(), attached and exported as
 * any. -ENOENT (no such lease of s), -EINVAL (offset not a multiple of the
 * granule, or past the lease's end), -ERANGE (size past the lease's end),
 * -EADDRINUSE (another carve of the lease covers part of the range),
 * -EMFILE (max_allocations), -ESHUTDOWN, -EAGAIN (host memory).
 */
int broker_lease_carve(struct broker *b, struct session *s, uint64_t lease, uint64_t offset,
                       uint64_t size, uint64_t *id, uint64_t *carved);
/*
 * Same-uid allocations only; -ENOENT otherwise; -EEXIST if already attached;
 * -EMFILE (max_allocations counts attachments too). An attachment keeps the
 * allocation's memory alive: freed by its owner meanwhile, it becomes an
 * orphan, gone from the table, until its last holder detaches.
 */
int broker_attach(struct broker *b, struct session *s, uint64_t id, struct broker_grant *out);
int broker_detach(struct broker *b, struct session *s, uint64_t id);

/*
 * Sharing by name (broker_share.c). broker_export names one of s's
 * allocations, in s's uid's namespace, for uid to open: -ENOENT (not s's
 * allocation), -EALREADY (already exported), -EEXIST (s's uid already
 * exports that name), -EPERM (uid is another user and the allocation does
 * not fill its slab, which the opener would map whole), -EXDEV (uid is
 * another user and the allocation is pool memory, cuda allocator "async":
 * its grant carries the owner's pool), -EMFILE
 * (max_allocations exports), -EAGAIN (host memory). The name goes when the allocation is freed
 * (orphaned or not) or its session ends.
 */
int broker_export(struct broker *b, struct session *s, uint64_t id, const char *name, uid_t uid);
/*
 * The daemon's descriptors one user may hold (docs/design.md,
 * "Descriptors"): half of RLIMIT_NOFILE, at least BROKER_FILES_SHARE_MIN
 * (under a limit that small the admin spare is what keeps the daemon
 * usable), read each time, so that a limit
 * lowered from outside (prlimit) counts at once. A slab that would take a
 * user past it is refused with -ENFILE (-32006, limit "open_files_per_uid"),
 * and the server refuses a connection past it.
 */
#define BROKER_FILES_SHARE_MIN 64
unsigned broker_files_share(void);
/* What uid holds of the daemon's descriptors: its connections (one per
 * session) and its slabs' own descriptors (sim memfds, cuda vmm exports). */
unsigned broker_files_of(const struct broker *b, uid_t uid);
/*
 * Host memory (broker_host.c) for one of s's instances: -ENOENT (instance),
 * -EINVAL (size), -EMFILE (max_allocations, counting host allocations),
 * -ENOMEM (max_host_memory), -EIO (no memfd), -ESHUTDOWN, with *why (when
 * not NULL) saying which limit. Freed by broker_free() like an allocation,
 * and with the session.
 */
int broker_host_alloc(struct broker *b, struct session *s, uint64_t instance, uint64_t size,
                      bool mapped, struct broker_host **out, struct broker_refusal *why);

/* Withdraws a name s exported: -ENOENT (also for another connection's, even
 * of the same user). Openers keep what they opened. */
int broker_unexport(struct broker *b, struct session *s, const char *name);
/* Attaches the allocation that the user owner exported under name, if it
 * was granted to s's uid or owner is s's uid: -ENOENT (no such name, or not
 * for s: answered alike), then as broker_attach(). */
int broker_open(struct broker *b, struct session *s, uid_t owner, const char *name,
                struct broker_grant *out);

/*
 * release: s's client has unmapped slab_id, which it kept empty (on its own,
 * or answering a reclaim event): the slab is let go (back to the pool,
 * which may return it to the backend) and waits are retried. -ENOENT when
 * s neither keeps it empty nor was asked for it, -EBUSY when s still has
 * allocations or attachments in it.
 */
int broker_release(struct broker *b, struct session *s, uint64_t slab_id);
/* Slabs kept empty now by the sessions, and their bytes (metrics). */
struct broker_keep_counts {
	uint64_t kept, kept_bytes;
};
void broker_keep_counts(const struct broker *b, struct broker_keep_counts *out);

/* Installs the receiver of events (replacing any). */
void broker_set_events(struct broker *b, broker_event_fn fn, void *ctx);

/*
 * What s can still get on a device, for an out-of-memory answer that
 * promises nothing it cannot keep: *total, what its policy has left and its
 * slabs and new slabs can hold (new slabs stop where another partition's
 * guarantee begins); *largest, the most one allocation can get.
 */
void broker_alloc_room(const struct broker *b, const struct session *s, int device, uint64_t *total,
                       uint64_t *largest);

/* ---- partitions (broker_partition.c) ---- */

/* Why a partition could not be created on a device (-ENOSPC). */
struct broker_partition_refusal {
	int device;
	uint64_t asked;      /* the size asked for */
	uint64_t available;  /* what the device could still guarantee */
	uint64_t capacity;   /* the device's memory less its reserve */
	uint64_t partitions; /* what the partitions there already take: each its
	                        size, or its slabs where they are more */
	uint64_t used;       /* the slabs of sessions outside partitions there */
};

/* A valid partition name: 1-PROTO_MAX_NAME bytes of [A-Za-z0-9._-]. */
bool broker_partition_name_valid(const char *name);
/*
 * Creates partition name for uid, size[i] bytes on device i (0: not on it),
 * with a fresh token. -EINVAL (name, no device with a size, a size on a
 * device that does not exist), -EEXIST (name taken), -ENOSPC (a device
 * cannot guarantee its size: *why says which and by how much), -EMFILE
 * (BROKER_MAX_PARTITIONS), -EIO (getrandom), -ENOMEM. The sessions outside
 * partitions hear of their smaller caps (cap_changed).
 */
#define BROKER_MAX_PARTITIONS 1024
int broker_partition_create(struct broker *b, const char *name, uid_t uid, const uint64_t *size,
                            struct broker_partition **out, struct broker_partition_refusal *why);
/* The partition called name, or NULL. */
struct broker_partition *broker_partition_find(struct broker *b, const char *name);
/*
 * Destroys p: every session inside it is reclaimed as an evicted one's
 * (its slabs stay pinned until its process has exited), marked ended and
 * left outside every partition, and its size goes back to the broker's
 * policy. *sessions and *reclaimed (device bytes they held) say how much.
 * The caller ends the ended sessions' connections.
 */
void broker_partition_destroy(struct broker *b, struct broker_partition *p, unsigned *sessions,
                              uint64_t *reclaimed);
/*
 * Puts s (before it has instances) in the partition whose token this is,
 * if s's uid owns it: 0, or -EPERM for anything else (an unknown token or
 * another uid's: alike, so tokens cannot be probed).
 */
int broker_partition_join(struct broker *b, struct session *s,
                          const unsigned char token[BROKER_TOKEN_BYTES]);
/* Bytes p's sessions hold on device (its policy's charge). */
uint64_t broker_partition_used(const struct broker_partition *p, int device);
/* What all partitions take on device. */
uint64_t broker_partitions_size(const struct broker *b, int device);

/* ---- VRAM policy: policy.h does the arithmetic; these apply it, tell the
 * owners of every other instance whose cap moved (cap_changed) and serve
 * the waiting allocations that now fit. ---- */

/* ---- queued requests (allocate_queue) ---- */

/*
 * Allocates size bytes for inst, charged to it, unclaimed: its owner's
 * client learns of it from an allocation_ready event and maps it with
 * claim. Errors as broker_alloc.
 */
int broker_alloc_queued(struct broker *b, struct broker_instance *inst, uint64_t size,
                        const char *label, uint64_t *id);
/* Hands the session one of its unclaimed allocations (handle and
 * descriptor when the session did not hold the slab). -ENOENT (unknown or
 * another session's), -EEXIST (claimed already), -EAGAIN (host memory). */
int broker_claim(struct broker *b, struct session *s, uint64_t id, struct broker_grant *out);
/* Undoes the broker_claim() that made g when its client could not be told
 * (the reply could not be built): the allocation is unclaimed again and the
 * slab held only as before, so the claim can be asked again. */
void broker_unclaim(struct broker *b, struct session *s, const struct broker_grant *g);
/*
 * Host memory for a queued array of inst (broker_host.c): as
 * broker_host_alloc() for its owner's session, made unclaimed and labelled;
 * the descriptor goes to the client with broker_host_claim().
 */
int broker_host_alloc_queued(struct broker *b, struct broker_instance *inst, uint64_t size,
                             bool mapped, const char *label, uint64_t *id,
                             struct broker_refusal *why);
/* s's unclaimed host allocation id, now claimed, its memfd made: -ENOENT
 * (unknown or another session's), -EEXIST (claimed already, or not made by
 * allocate_queue), -EIO (no memfd: the backend's last error says why). */
int broker_host_claim(struct broker *b, struct session *s, uint64_t id, struct broker_host **out);
/* Undoes broker_host_claim(), as broker_unclaim(). */
void broker_host_unclaim(struct broker_host *h);
/* The memfd of h, handed to the caller, who sends and closes it: the
 * daemon keeps no descriptor of host memory. A claim made again after an
 * unclaim makes a new one (of the same zero-filled kind: the client was
 * never given the first). */
int broker_host_take_fd(struct broker_host *h);
/* Drops an instance's queued requests. */
void broker_queue_clear(struct broker_instance *inst);
/* Queues n requests (label, arr, type of each) on inst, each replacing a
 * queued one of the same label, all or none: 0, -EMFILE (more than
 * PROTO_MAX_QUEUED would be queued), -ENOMEM. */
int broker_queue_put(struct broker_instance *inst, const struct broker_queued *reqs, unsigned n);
/* The request queued after q on inst (the first for q NULL), or NULL. */
const struct broker_queued *broker_queue_next(const struct broker_instance *inst,
                                              const struct broker_queued *q);
/* The handshake done: the client's name (NULL: none) and whether it keeps
 * emptied slabs mapped. */
void broker_session_hello(struct session *s, const char *client, bool keep_slabs);
/* Marks s evicted by an administrator: when it closes, its slabs outlive it
 * as ghosts until its process exits (it may still have them mapped). */
void broker_session_evict(struct broker *b, struct session *s);
/*
 * Releases every allocation and attachment of every session and every
 * queued request, and emits BROKER_EVENT_INVALIDATE for each session that
 * said hello (its library drops its mappings). *allocs and *attachments count
 * what was released.
 *
 * The slabs a session held stay pinned, "parting", until its client says
 * it has closed them (broker_invalidate_done with the event's epoch) or the
 * session ends: with cuda, freeing memory another process still has open
 * is undefined, and the client learns of the release only from the event.
 */
void broker_invalidate_all(struct broker *b, uint64_t *allocs, uint64_t *attachments);
/*
 * Switches the allocator strategy. Any change releases everything exactly
 * like broker_invalidate_all (the reason in the event is "set_allocator")
 * and starts every device with a fresh, empty pool (its statistics too).
 * The same strategy again is a no-op. -EOPNOTSUPP (async: a device without
 * shareable stream-ordered pools, info.async), -EINVAL, -ENOMEM (nothing
 * changed).
 */
int broker_set_allocator(struct broker *b, enum broker_allocator kind, uint64_t *allocs,
                         uint64_t *attachments);
/*
 * The client of s has closed every slab of the invalidate events up to
 * epoch: their pins go (and with them, slabs nobody holds, possibly a
 * retired pool). *released counts the slabs let go. -EINVAL: an epoch not
 * sent yet.
 */
int broker_invalidate_done(struct broker *b, struct session *s, uint64_t epoch, unsigned *released);
/*
 * goodbye: the session's client says it has unmapped every slab it was
 * given (and will close). Until it is handed a slab again, its close lets
 * go of them at once; otherwise a session that ends holding slabs whose
 * memory outlives the daemon's release while a process maps it (VMM:
 * backend_slab.vmm) keeps them, as a ghost, until its process has exited,
 * so they count against the device until every holder let go. Returns the
 * number of slabs it holds.
 */
unsigned broker_session_goodbye(struct session *s);
/* The ghost's process has exited: its slabs go, and waits are retried. */
void broker_ghost_release(struct broker *b, struct broker_ghost *ghost);
void broker_set_exit_watch(struct broker *b, broker_exit_fn fn, void *ctx);
/* What is kept from the backend for clients that may still have it mapped:
 * slabs parting (of sessions and of ghosts), ghosts, retired pools
 * (selfcheck reports them; all 0 once every client is gone). */
struct broker_parting_counts {
	uint64_t parting;
	unsigned ghosts, retired;
};
void broker_parting_counts(const struct broker *b, struct broker_parting_counts *out);

/* Any session's instance, or NULL. */
struct broker_instance *broker_instance_get(struct broker *b, uint64_t instance);
/*
 * Whether s may see what the user uid has (sessions, instances, stream
 * groups, export names): a user sees its own, an administrator everything.
 * What s may not see is answered as if it did not exist.
 */
bool broker_sees(const struct session *s, uid_t uid);
/* Manual pool with this proportion. -EINVAL, -ENOSPC, -EUSERS. */
int broker_set_proportion(struct broker *b, struct broker_instance *inst, double proportion);
/* Auto pool (no-op when there). -EUSERS. */
int broker_set_auto(struct broker *b, struct broker_instance *inst);
/* -EINVAL (name). */
int broker_set_group(struct broker *b, struct broker_instance *inst, const char *group);
/* -EINVAL. */
int broker_set_mode(struct broker *b, enum policy_mode mode);
/* device < 0: every device. bytes or fraction, both 0 = no limit. -EINVAL. */
int broker_set_limit(struct broker *b, int device, uint64_t bytes, double fraction);

/* ---- recall (broker_recall.c) ----
 * The broker asks a client for leases back (BROKER_EVENT_RECALL) when
 * another instance's request is short of room, an instance's cap shrinks
 * below its charge, a partition or a chunked batch needs the room, or an
 * operator trims. One recall per instance is out at a time; it ends with
 * the client's answer (broker_recall_done) or after the recall timeout
 * (limits.recall_timeout_ms), and the holder keeps what it did not give. */

/*
 * Asks back up to bytes from the leases of every instance on device (< 0:
 * any) in part's domain (NULL: outside partitions) but except (may be
 * NULL), with reason (a PROTO_V_REASON_*): recalls are sent where none is
 * out (send false: none is sent). Returns how many recalls are out for
 * those instances now: when 0 no answer can make room.
 */
unsigned broker_recall_room(struct broker *b, const struct broker_partition *part, int device,
                            uint64_t bytes, const struct broker_instance *except,
                            const char *reason, bool send);
/* The same for every member of inst's stream group (itself included) that
 * has queued requests or leases: all of their leases (reason "chunking"). */
unsigned broker_recall_group(struct broker *b, const struct broker_instance *inst, bool send);
/* What the leases outside partitions on device are, as their libraries
 * last said (a partition refusal's figures): *recallable (leased bytes not
 * said in use) and *in_use (said in use). */
void broker_recall_figures(const struct broker *b, int device, uint64_t *recallable,
                           uint64_t *in_use);
/* s's client answers the recall epoch, having returned bytes: 0,
 * -ENOENT (no recall epoch of s is out: never sent, another session's,
 * answered, timed out), -ERANGE (more bytes than were asked). Serves
 * waits. */
int broker_recall_done(struct broker *b, struct session *s, uint64_t epoch, uint64_t bytes);
/* Recalls every lease of every instance (of session id only, unless 0):
 * *recalls events sent, *bytes asked. -ENOENT: no such session. */
int broker_trim(struct broker *b, uint64_t session, uint64_t *recalls, uint64_t *bytes);
/* Recalls out now, every instance's. */
uint64_t broker_recalls_pending(const struct broker *b);
/*
 * Holds a request refused for room while recalls are out for it: frame
 * (copied; len bytes) is run again by the receiver of BROKER_EVENT_HELD
 * when room may have come (its handler answers it when no recall is out
 * for it any more), and a last time (final) once the recall timeout has
 * passed. It counts as one of s's waits (max_inflight). 0, -EBUSY (max_inflight),
 * -ENOMEM.
 */
int broker_held_add(struct broker *b, struct session *s, const char *frame, size_t len);

/* ---- waiting allocations (broker_wait.c) ----
 * An alloc that asked to wait and was refused for memory or quota is
 * queued. Waits are served in arrival order: one short of device memory
 * holds back later ones on that device, one short of quota later ones of
 * that instance. Served or failed, a wait ends with a
 * BROKER_EVENT_WAIT_DONE event; a session that closes takes its waits with it
 * unanswered. */

void broker_set_timer(struct broker *b, broker_timer_fn fn, void *ctx);
/* 0, -EMFILE (max_allocations, waits included), -ESHUTDOWN, -ENOMEM. */
int broker_wait_add(struct broker *b, struct session *s, const char *req_id, uint64_t instance,
                    uint64_t size, uint64_t align, uint64_t wait_ms);
/* Serves the waits that fit now. Called after anything that frees memory
 * or moves caps; safe to call from inside itself (it loops instead). */
void broker_waits_run(struct broker *b);
/* Fails the waits whose deadline has passed with -ETIMEDOUT. */
void broker_waits_expire(struct broker *b);
/* Answers every wait with rc (-ESHUTDOWN when the daemon stops). */
void broker_waits_cancel(struct broker *b, int rc);
/* True when allocations wait on this device in s's partition (or, for s
 * outside partitions, outside them). */
bool broker_waits_on(const struct broker *b, const struct session *s, int device);
/* CLOCK_MONOTONIC in milliseconds. */
uint64_t broker_now_ms(void);

/* Walks every structure and checks what it can: pools, counters, the
 * allocation table against the sessions. 0 or -EFAULT with msg. */
int broker_check(const struct broker *b, char *msg, unsigned msg_len);

/* Replaces the rules (at most BROKER_MAX_RULES are kept). */
void broker_set_rules(struct broker *b, const struct broker_rule *rules, unsigned n);
/* The rule that applies to a session: its uid's, else the first group rule
 * (in the order given) for one of its groups, else NULL. */
const struct broker_rule *broker_rule_for(const struct broker *b, const struct session *s);

/* Last: it declares over the types above. */
#include "broker_view.h"

#endif
