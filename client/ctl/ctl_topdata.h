/*
 * ctl_topdata.h - what `gpubrokerctl top` shows, apart from the screen
 * (ctl_top.c): one snapshot of the daemon from the answers to status,
 * stats, clients, policy and partitions; each device's bar; the client rows
 * in a chosen order; and the events told by the difference between two
 * snapshots. Pure: no I/O, no terminal.
 */
#ifndef GPB_CTL_TOPDATA_H
#define GPB_CTL_TOPDATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#define TOP_MAX_DEVICES    16
#define TOP_MAX_CLIENTS    256
#define TOP_MAX_INSTANCES  512
#define TOP_MAX_PARTITIONS 64
#define TOP_NAME           48

/* A device's memory, split as the bar shows it (the parts add up to total). */
enum top_part {
	TOP_IN_USE,      /* live blocks: daemon allocations and what leases hold in use */
	TOP_LEASED_FREE, /* leased to a client, not in use inside the lease */
	TOP_FENCED,      /* allocated, held for a process that may still write there */
	TOP_KEPT,        /* in the pools' slabs, allocated to nobody */
	TOP_FREE,        /* not reserved by the broker */
	TOP_NPARTS
};

struct top_device {
	int device;
	char name[TOP_NAME];
	uint64_t total, used, reserved, fenced, leased, in_use, ooms;
	uint64_t part[TOP_NPARTS];
};

struct top_instance {
	char id[24];
	char name[TOP_NAME];
	long pid;
	int device;
	char mode[12];
	double proportion; /* < 0: the auto pool */
	uint64_t cap, used, recalls;
};

struct top_client {
	char session[24];
	long pid, uid;
	char name[TOP_NAME];
	uint64_t instances, allocations, used, leased, in_use, recalls_pending, cap, age_s;
	uint64_t waiting, idle_s; /* allocations waiting; seconds since its last request */
	/* From the client's first instance (policy): "-" and -1 without one. */
	char mode[12];
	double proportion;
};

struct top_partition {
	char name[TOP_NAME];
	long uid;
	int device;
	uint64_t size, used;
};

struct top_snapshot {
	char mode[12];
	long pid;
	uint64_t uptime_s, recalls_sent, recalls_timed_out, invalidations, evictions;
	size_t ndevices, nclients, ninstances, npartitions;
	struct top_device devices[TOP_MAX_DEVICES];
	struct top_client clients[TOP_MAX_CLIENTS];
	struct top_instance instances[TOP_MAX_INSTANCES];
	struct top_partition partitions[TOP_MAX_PARTITIONS];
	/* What the visibility rule hides from this user: other users'. */
	uint64_t others_clients, others_used;
};

/* The order of the client rows; `s` steps through them. */
enum top_sort {
	TOP_SORT_USED,
	TOP_SORT_CAP,
	TOP_SORT_LEASED,
	TOP_SORT_PID,
	TOP_SORT_NAME,
	TOP_NSORTS
};

/* The column a sort is by, as the header names it. */
const char *top_sort_name(enum top_sort sort);

/*
 * Fills @s from the answers (each a parsed result object; stats, policy
 * and partitions may be NULL: a non-admin may not be answered every one).
 * 0, or -EINVAL naming nothing when status or clients is not what the
 * daemon sends (the caller says the daemon's reply was bad).
 */
int top_snapshot_fill(struct top_snapshot *s, const cJSON *status, const cJSON *stats,
                      const cJSON *clients, const cJSON *policy, const cJSON *partitions);

/* Sorts @s's client rows by @sort, largest first (pid and name: ascending). */
void top_snapshot_sort(struct top_snapshot *s, enum top_sort sort);

/* Calls @emit with one line for each event that happened between @old and
 * @cur: clients that came and left, cap and mode changes, recalls sent
 * and timed out, invalidations, evictions, refusals. */
void top_events(const struct top_snapshot *old, const struct top_snapshot *cur,
                void (*emit)(const char *line, void *arg), void *arg);

/* The number of cells of @width that each part of @d gets: every non-empty
 * part at least one, the total exactly @width (when @width >= TOP_NPARTS). */
void top_bar_cells(const struct top_device *d, int width, int cells[TOP_NPARTS]);

#endif
