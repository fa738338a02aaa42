/*
 * policy.h - the VRAM policy engine (pure: no I/O, no CUDA, no JSON, no
 * clock). cubie's MemoryManager semantics, applied across processes.
 *
 * Every registered instance consumes one device's memory. It is either in
 * the manual pool, with a proportion in (0, 1] of the device's capacity, or
 * in the auto pool, whose instances split what the manual pool leaves
 * equally. The capacity of a device is its memory, bounded by the global
 * limit when one is set (CuPy's set_limit: bytes or a fraction).
 *
 * Modes: in `active` mode each instance's cap is its share of the capacity
 * and an allocation that would take it over its cap is refused (quota); in
 * `passive` mode every cap is the whole capacity and only the capacity
 * bounds allocations. Both modes refuse what the capacity cannot hold.
 *
 * Caps are computed in integers so that they never sum above the capacity:
 * manual caps are floor(proportion * capacity), the auto pool is the
 * capacity minus the manual caps, and each auto instance gets an equal
 * integer part of it. A cap that shrinks below what an instance already
 * holds revokes nothing (the daemon cannot take memory back from a running
 * kernel): that instance can free but not allocate until it is under again.
 *
 * Rules for proportions (the refusals return distinct errnos so that the
 * daemon can say exactly why):
 *  - a proportion must be finite and in (0, 1]                    -EINVAL
 *  - the manual proportions of a device may sum to at most 1, with
 *    POLICY_SUM_TOLERANCE of slack for rounding (0.1 * 10 is not 1) -ENOSPC
 *  - while auto instances exist, the auto pool (1 - manual sum) must
 *    give each of them at least min_auto_share of the device        -EUSERS
 *    (this also refuses an auto registration for which no such share
 *    is left)
 * A change that leaves the auto pool under POLICY_AUTO_WARN (5%) succeeds
 * with POLICY_WARN_AUTO_LOW.
 *
 * Whenever caps change (registration, departure, proportion, mode or limit
 * change) every instance whose cap changed, other than the one the caller
 * is acting for, is queued; the daemon drains the queue with
 * policy_take_changed() and tells each owner (the `cap_changed` event).
 *
 * Stream groups are named sets of instances (default "default"); chunking
 * computes one chunk count along the run axis for a whole set of array
 * requests so that it fits a group's available memory. A group name lives
 * in a namespace (an instance's `space`: the broker gives each user one), so
 * two spaces' groups of the same name are different groups that never meet.
 */
#ifndef GPB_POLICY_H
#define GPB_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "list.h"
#include "schema.h"

#define POLICY_MAX_DEVICES    64             /* = BACKEND_MAX_DEVICES */
#define POLICY_MAX_NAME       PROTO_MAX_NAME /* bytes of a group name */
#define POLICY_MAX_DIMS       PROTO_MAX_DIMS /* dimensions of one array request */
#define POLICY_SUM_TOLERANCE  1e-9           /* slack on "manual proportions sum to <= 1" */
#define POLICY_MIN_AUTO_SHARE 0.001          /* default minimum share of one auto instance */
#define POLICY_AUTO_WARN      0.05           /* warn when the auto pool is below this */
#define POLICY_GROUP_WARN     0.95           /* warn when a group has used more than this */
#define POLICY_CHUNK_WARN     20 /* warn when a request exceeds available this many times */
#define POLICY_DEFAULT_GROUP  "default"

enum policy_mode {
	POLICY_PASSIVE,
	POLICY_ACTIVE,
};

/* Warnings: a successful call may set these bits in its *warn argument. */
enum policy_warning {
	POLICY_WARN_AUTO_LOW = 1u << 0,   /* the auto pool is under POLICY_AUTO_WARN */
	POLICY_WARN_GROUP_FULL = 1u << 1, /* a group has used more than POLICY_GROUP_WARN */
	POLICY_WARN_OVERSIZED = 1u << 2,  /* a request exceeds available > POLICY_CHUNK_WARN x */
};

struct policy_config {
	enum policy_mode mode;
	double min_auto_share; /* per auto instance, in (0, 1]; 0 = POLICY_MIN_AUTO_SHARE */
};

/*
 * One instance as the policy sees it. The owner embeds it (the broker in
 * struct broker_instance) and keeps it alive between policy_add() and
 * policy_remove(). Fields are read-only outside policy.c.
 */
struct policy_instance {
	uint64_t id;
	int device;
	double proportion; /* manual proportion in (0, 1]; 0 = auto pool */
	double share;      /* effective proportion: the manual one, or the auto share */
	uint64_t cap;      /* bytes it may hold (the capacity in passive mode) */
	uint64_t used;     /* bytes charged to it */
	char group[POLICY_MAX_NAME + 1];
	uint64_t space; /* the namespace of group (0 until policy_set_space) */
	/* private */
	struct list link;         /* policy->instances */
	struct list changed_link; /* policy->changed, while queued */
	uint64_t next_cap;        /* the active-mode cap during a rebalance */
	bool queued;
};

struct policy_device {
	uint64_t total;        /* device memory */
	uint64_t limit;        /* byte limit, 0 = none */
	double limit_fraction; /* fraction limit in (0, 1], 0 = none */
	uint64_t reserve;      /* kept back (in use before the daemon, contexts' room) */
	uint64_t capacity;     /* what the broker may hand out: total minus the reserve,
	                          bounded by the limit */
	uint64_t used;         /* bytes charged: its instances' and orphaned */
	uint64_t orphaned;     /* freed by their instance, still held (policy_orphan) */
	double manual;         /* sum of the manual proportions */
	double auto_share;     /* share of each auto instance */
	uint64_t auto_cap;     /* cap of each auto instance in active mode */
	unsigned n_manual, n_auto;
};

struct policy {
	struct policy_config cfg;
	int device_count;
	struct policy_device dev[POLICY_MAX_DEVICES];
	struct list instances; /* every instance, in registration order */
	struct list changed;   /* instances whose cap changed, not yet taken */
	uint64_t count;
};

/* Why an allocation was refused (policy_admit). */
struct policy_verdict {
	uint64_t cap;       /* -EDQUOT: the instance's cap */
	uint64_t used;      /* -EDQUOT: what it holds */
	uint64_t requested; /* the bytes asked for */
	uint64_t available; /* -ENOMEM: what the device's capacity has left */
};

/*
 * totals[i] is the memory of device i. -EINVAL (device_count outside
 * 1..POLICY_MAX_DEVICES, a bad mode or min_auto_share). cfg may be NULL.
 */
int policy_init(struct policy *p, const struct policy_config *cfg, int device_count,
                const uint64_t *totals);
/* Forgets every instance (their memory is the owner's). */
void policy_finish(struct policy *p);

/*
 * Registers pi for instance id on device with a manual proportion (0 =
 * auto pool) in group (NULL = "default"). Rebalances the device.
 * 0, -EINVAL (device, proportion, group name), -ENOSPC, -EUSERS (see the
 * rules above). warn may be NULL.
 */
int policy_add(struct policy *p, struct policy_instance *pi, uint64_t id, int device,
               double proportion, const char *group, unsigned *warn);
/* Unregisters pi (it must hold nothing charged, or the charge is dropped
 * with it) and rebalances the others. */
void policy_remove(struct policy *p, struct policy_instance *pi);

/* Moves pi to the manual pool with this proportion, or changes its manual
 * proportion. Same errors as policy_add. */
int policy_set_proportion(struct policy *p, struct policy_instance *pi, double proportion,
                          unsigned *warn);
/* Moves pi to the auto pool (a no-op when it is there). 0 or -EUSERS. */
int policy_set_auto(struct policy *p, struct policy_instance *pi, unsigned *warn);
/* Moves pi to another stream group. 0 or -EINVAL (name empty or too long). */
int policy_set_group(struct policy *p, struct policy_instance *pi, const char *group);
/* Puts pi's group name in namespace space (after policy_add, which starts
 * every instance in space 0). */
void policy_set_space(struct policy_instance *pi, uint64_t space);
/* 0 or -EINVAL. Every cap follows at once. */
int policy_set_mode(struct policy *p, enum policy_mode mode);
/*
 * Bounds what the broker hands out on one device (or on every device when
 * device < 0): bytes > 0, or fraction in (0, 1]; both 0 removes the limit.
 * 0 or -EINVAL (both given, fraction out of range, device).
 */
int policy_set_limit(struct policy *p, int device, uint64_t bytes, double fraction);
/*
 * Keeps @bytes of the device out of its capacity: memory the driver gives to
 * nobody through the broker (what other processes used before the daemon
 * started, and room for the clients' own CUDA contexts). The limit and the
 * limit fraction (of the total) bound what is left. -EINVAL for a bad device.
 */
int policy_set_reserve(struct policy *p, int device, uint64_t bytes);

/*
 * Changes the memory of one device (partitions take theirs out of the
 * broker's, and their own policy's devices are their sizes). The limit,
 * a fraction of it, follows; caps follow at once. A total under what the
 * device's instances hold revokes nothing (as a shrinking cap). 0 or -EINVAL.
 */
int policy_set_total(struct policy *p, int device, uint64_t total);

const char *policy_mode_name(enum policy_mode mode);
/* 0 and *mode, or -EINVAL. */
int policy_mode_parse(const char *name, enum policy_mode *mode);

/*
 * May pi be charged bytes more? 0, -EDQUOT (active mode: over its cap), or
 * -ENOMEM (over the device's capacity). v (may be NULL) says by how much.
 */
int policy_admit(const struct policy *p, const struct policy_instance *pi, uint64_t bytes,
                 struct policy_verdict *v);
/* Accounts bytes to pi once the allocation has happened (and back). */
void policy_charge(struct policy *p, struct policy_instance *pi, uint64_t bytes);
void policy_uncharge(struct policy *p, struct policy_instance *pi, uint64_t bytes);
/*
 * Moves bytes from pi to the device's orphaned bytes: memory its instance
 * freed that others still hold open (a shared allocation). The device stays
 * charged, the instance no longer is, until policy_orphan_release().
 */
void policy_orphan(struct policy *p, struct policy_instance *pi, uint64_t bytes);
void policy_orphan_release(struct policy *p, int device, uint64_t bytes);

/* Capacity left on a device: capacity - used, 0 when over. */
uint64_t policy_device_available(const struct policy *p, int device);
/* What pi may still take: min(cap - used, device available). */
uint64_t policy_headroom(const struct policy *p, const struct policy_instance *pi);

/* The next instance whose cap changed since it was last taken, or NULL. */
struct policy_instance *policy_take_changed(struct policy *p);

/* ---- stream groups ---------------------------------------------------- */

struct policy_group_info {
	unsigned members;
	uint64_t used;      /* bytes its members hold */
	uint64_t available; /* active: the members' headroom, bounded by each device's
	                       available capacity; passive: the available capacity of
	                       the devices its members use */
	unsigned warn;      /* POLICY_WARN_GROUP_FULL when used > 95% of used + available */
};

/* The group called group in space: 0, or -ENOENT when it has no member. */
int policy_group_info(const struct policy *p, uint64_t space, const char *group,
                      struct policy_group_info *out);
/* True when pi is a member of the group called group in space. */
bool policy_in_group(const struct policy_instance *pi, uint64_t space, const char *group);
/* True when pi shares a named group (not "default") with another instance
 * of its space: cubie's is_grouped. */
bool policy_is_grouped(const struct policy *p, const struct policy_instance *pi);

/* ---- chunking along the run axis ----------------------------------------- */

/* One array request (cubie's ArrayRequest, as far as sizing goes). */
struct policy_array {
	uint64_t shape[POLICY_MAX_DIMS];
	unsigned ndim;      /* 1..POLICY_MAX_DIMS */
	uint64_t elem_size; /* bytes per element (the dtype's itemsize) */
	unsigned axis;      /* the run axis: the one chunking divides */
	bool unchunkable;   /* keeps its full shape in every chunk */
};

struct policy_chunking {
	uint64_t axis_length;   /* runs in the unchunked request */
	uint64_t chunk_length;  /* runs per chunk */
	uint64_t chunks;        /* chunk count: ceil(axis_length / chunk_length) */
	uint64_t request_bytes; /* the whole request, unchunked */
	uint64_t chunk_bytes;   /* one chunk, every array at its chunked shape */
	uint64_t available;     /* the memory it had to fit */
	unsigned warn;          /* POLICY_WARN_OVERSIZED */
};

/*
 * get_chunk_parameters: the fewest chunks such that one chunk of every
 * array (each rounded up to granule bytes) fits available. axis_length 0
 * means the longest run axis among the chunkable arrays. Unchunkable arrays
 * count whole in every chunk. 0, -EINVAL (a malformed array), -EOVERFLOW
 * (sizes beyond 64 bits), -ENOMEM (even one run per chunk does not fit).
 */
int policy_chunk_parameters(const struct policy_array *arrays, size_t n, uint64_t axis_length,
                            uint64_t available, uint64_t granule, struct policy_chunking *out);
/*
 * compute_chunked_shapes with a chunk length given: the figures of
 * policy_chunk_parameters for chunk_length runs per chunk (cut to the axis
 * length), without fitting anything (out->available 0, no warning). 0,
 * -EINVAL (a malformed array, chunk_length 0), -EOVERFLOW.
 */
int policy_chunk_fixed(const struct policy_array *arrays, size_t n, uint64_t axis_length,
                       uint64_t chunk_length, uint64_t granule, struct policy_chunking *out);
/* compute_chunked_shapes for one array: its shape with the run axis cut to
 * chunk_length (unchunkable arrays, and shorter axes, unchanged). */
void policy_chunked_shape(const struct policy_array *a, uint64_t chunk_length,
                          uint64_t shape[POLICY_MAX_DIMS]);
/* Bytes of one array at its full shape (rounded up to granule). 0 or
 * -EOVERFLOW. */
int policy_array_bytes(const struct policy_array *a, uint64_t granule, uint64_t *out);

/*
 * Walks everything and checks the invariants: counters and sums match the
 * instances, manual sum <= 1 + tolerance, caps as the rules compute them
 * and summing to at most the capacity, the change queue well formed.
 * 0 or -EFAULT with msg describing the first violation.
 */
int policy_check(const struct policy *p, char *msg, unsigned msg_len);

#endif
