/*
 * broker_view.h - what the layers above the broker read of it (broker_view.c,
 * broker_map.c): devices and their figures, a device's map, the daemon's
 * summary, the limits, and walks over sessions, instances and partitions.
 * Apart from broker.h, which includes it, so that each stays one concern.
 */
#ifndef GPB_BROKER_VIEW_H
#define GPB_BROKER_VIEW_H

#include "broker.h"

/* The devices the broker has (0 to BACKEND_MAX_DEVICES). */
int broker_device_count(const struct broker *b);
/* What the backend said of device (name, uuid, total, ...). */
const struct backend_device_info *broker_device_info(const struct broker *b, int device);

/* One device's figures, as `stats`, `status`, `devices` and the metrics
 * show them. */
struct broker_device_stats {
	struct pool_stats pool; /* the device's current pool */
	uint64_t fenced;        /* bytes kept allocated for a client that may still
	                           write there: part of pool.used, in no instance */
	uint64_t orphaned;      /* bytes freed by their owner, still attached
	                           (outside partitions) */
	uint64_t leased;        /* bytes of every session's leases there (part of
	                           pool.used) */
	uint64_t leases;        /* how many */
	uint64_t in_use;        /* what their clients last said they use of them */
};
void broker_device_stats(const struct broker *b, int device, struct broker_device_stats *out);
/* A device's memory block by block (broker_map.c; `device_map`). */
enum broker_map_state {
	BROKER_MAP_FREE,  /* a free range of a slab */
	BROKER_MAP_USED,  /* an allocation */
	BROKER_MAP_LEASE, /* a lease: its client sub-allocates inside it */
	BROKER_MAP_HELD,  /* fenced, or an orphan kept by attachments: in no table */
};
struct broker_map_slab {
	uint32_t uid;          /* whose slab: a slab's bytes go to one user only */
	const char *partition; /* the partition it belongs to, NULL outside */
	uint64_t size;
	bool dedicated; /* made for one large allocation */
};
struct broker_map_block {
	uint64_t offset, size;
	enum broker_map_state state;
	uint64_t instance; /* used and lease: the owning instance; else 0 */
};
/* Calls @slab_fn for each slab of @device's current pool and @block_fn
 * for each of its ranges after it, in address order, until one returns
 * non-zero, which is returned; else 0, -ENODEV or -ENOMEM. */
int broker_device_map(const struct broker *b, int device,
                      int (*slab_fn)(void *arg, const struct broker_map_slab *s),
                      int (*block_fn)(void *arg, const struct broker_map_block *blk), void *arg);
/* Bytes uid's live allocations hold on device (its operator cap's figure). */
uint64_t broker_uid_used(const struct broker *b, int device, uid_t uid);

/* The daemon's figures as a whole. */
struct broker_summary {
	time_t started;
	enum policy_mode mode;
	enum broker_allocator allocator;
	unsigned sessions;
	uint64_t instances;
	uint64_t allocations; /* live device allocations */
	unsigned exports;
	uint64_t orphans;          /* allocations freed by their owner, still attached */
	uint64_t host_allocations; /* pinned and mapped host memory */
	uint64_t host_used;        /* their bytes */
	unsigned waits;            /* allocations waiting now */
	struct broker_stats stats;
};
void broker_summary(const struct broker *b, struct broker_summary *out);

/* The limits the broker runs with. */
const struct broker_limits *broker_get_limits(const struct broker *b);
/* Replaces them (reload), except the slab size, which the pools keep for
 * their lifetime. */
void broker_set_limits(struct broker *b, const struct broker_limits *limits);
/* The backend's name (sim, cuda). */
const char *broker_backend_name(const struct broker *b);
/* The backend's last error message ("" when none). */
const char *broker_backend_error(const struct broker *b);
/* The daemon is stopping: allocations are refused with -ESHUTDOWN. */
void broker_stop(struct broker *b);

/* The policy whose devices s's instances use: its partition's, or, for s
 * outside partitions or NULL, the broker's (what the partitions leave). */
const struct policy *broker_policy_const(const struct broker *b, const struct session *s);

/* Walks: the first with prev NULL, then the one after prev; NULL at the
 * end. Nothing may be added or removed while walking. */
struct session *broker_session_next(const struct broker *b, const struct session *prev);
struct broker_instance *broker_instance_next(const struct session *s,
                                             const struct broker_instance *prev);
struct broker_partition *broker_partition_next(const struct broker *b,
                                               const struct broker_partition *prev);
/* The session with this id, or NULL. */
struct session *broker_session_get(const struct broker *b, uint64_t id);

/* The bytes of the allocation id (device or host memory), or 0 when there
 * is none. */
uint64_t broker_allocation_size(const struct broker *b, uint64_t id);
/* The label (NULL: none) and instance of s's device allocation id, made by
 * allocate_queue: -ENOENT when s has no such allocation. */
int broker_allocation_label(const struct broker *b, const struct session *s, uint64_t id,
                            const char **label, uint64_t *instance);
/* The ids of s's allocations (device and host memory) labelled label, of
 * instance (0: any), at most max of them: how many there were. */
size_t broker_labelled(const struct session *s, const char *label, uint64_t instance, uint64_t *ids,
                       size_t max);

#endif
