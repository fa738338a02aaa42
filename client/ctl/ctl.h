/*
 * ctl.h - what gpubrokerctl.c, the top of the CLI, takes from the files
 * below it: the options, the command table entry, and the commands that
 * ctl_ops.c and ctl_layout.c implement. Those files call down into
 * ctl_output.c and ctl_error.c only, never back into gpubrokerctl.c.
 */
#ifndef GPB_CTL_H
#define GPB_CTL_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "gpubroker.h"

#include "ctl_error.h"
#include "ctl_output.h"

struct ctl_options {
	const char *socket;
	enum ctl_format format;
	bool header;
	double interval;         /* 0: run once */
	long device;             /* stats and set-limit --device; -1 = all */
	const char *device_uuid; /* --device given as a UUID (device is then -1) */
	const char *textfile;    /* metrics --textfile: write here atomically */
	const char *uid;         /* partition-create --uid */
	const char *size;        /* partition-create --size */
	bool map;                /* devices --map */
	const char *devices[64]; /* partition-create --device, each given */
	int ndevices;
	const char *command;
	char **args; /* the command's arguments */
	int nargs;
};

struct ctl_command {
	const char *name;   /* as typed */
	const char *method; /* the protocol request it sends */
	int nargs;          /* arguments it takes */
	int optional;       /* more it may take */
	bool changes;       /* changes the daemon's state: not repeatable with -l */
	/* Adds the request's parameters from the options. Returns an exit code
	 * (EXIT_USAGE after printing why). NULL: none. */
	int (*params)(const struct ctl_options *o, cJSON *params);
	/* Prints @result (parsed) as a table or CSV. Returns an exit code. */
	int (*print)(const cJSON *result, const struct ctl_options *o, bool header);
};

/* ctl_ops.c: operator commands. */
int params_session(const struct ctl_options *o, cJSON *params);
/* ctl_status.c: status (and top), devices, clients, stats. */
int print_status(const cJSON *result, const struct ctl_options *o, bool header);
int print_devices(const cJSON *result, const struct ctl_options *o, bool header);
int print_clients(const cJSON *result, const struct ctl_options *o, bool header);
int print_stats(const cJSON *result, const struct ctl_options *o, bool header);
int print_reload(const cJSON *result, const struct ctl_options *o, bool header);
int print_metrics(const cJSON *result, const struct ctl_options *o, bool header);
int print_version(const cJSON *result, const struct ctl_options *o, bool header);
int print_done(const cJSON *result, const struct ctl_options *o, bool header);
int params_trim(const struct ctl_options *o, cJSON *params);
int print_trim(const cJSON *result, const struct ctl_options *o, bool header);

/* ctl_partition.c: partition-create, partition-destroy, partitions. */
/* Bytes with an optional binary unit (K KiB M MiB G GiB T TiB, B):
 * 0 or -EINVAL. */
int ctl_parse_bytes(const char *arg, uint64_t *out);
int params_partition_create(const struct ctl_options *o, cJSON *params);
int params_partition_name(const struct ctl_options *o, cJSON *params);
int print_partition_token(const cJSON *result, const struct ctl_options *o, bool header);
int print_partition_destroyed(const cJSON *result, const struct ctl_options *o, bool header);
int print_partitions(const cJSON *result, const struct ctl_options *o, bool header);

/* ctl_top.c: `top` on a terminal, until q or *stop (SIGINT). Returns an
 * exit code. */
int ctl_top(gpb_client *client, const struct ctl_options *o, volatile sig_atomic_t *stop);

/* ctl_map.c: devices --map. */
#define CTL_MAP_CELLS 64 /* cells a slab's row has */
/* @ncells cells of a slab of @slab_size bytes whose ranges are @blocks (the
 * daemon's device_map), into @cells (ncells + 1 bytes, terminated). */
void ctl_map_cells(const cJSON *blocks, uint64_t slab_size, char *cells, int ncells);
int print_device_map(const cJSON *result, const struct ctl_options *o, bool header);

/* ctl_layout.c: `layout FILE`, which needs no daemon. Returns an exit code. */
int ctl_layout(const struct ctl_options *o);

#endif
