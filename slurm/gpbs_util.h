/*
 * gpbs_util.h - the pure parts of the gpubroker SPANK plugin: its plugstack
 * arguments, the --gpu-mem size, Slurm's device and GRES strings, and the
 * per-job token file. No Slurm calls here, so cmocka can test them.
 */
#ifndef GPBS_UTIL_H
#define GPBS_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* Where the plugin keeps one token file per running job (root only). */
#define GPBS_DEFAULT_STATEDIR "/run/gpubroker-slurm"
/* The GRES whose per-node count is read as the job's size. */
#define GPBS_DEFAULT_GRES "gpumem"
/* Most devices a partition names (more are refused, not truncated). */
#define GPBS_MAX_DEVICES 64

/* The plugin's configuration: the arguments of its plugstack.conf line. */
struct gpbs_conf {
	char socket[108];   /* the broker's socket; "" = libgpubroker's default */
	char statedir[256]; /* token files */
	char gres[64];      /* GRES read as the size; "" = do not read GRES */
	int fail_open;      /* broker unreachable: start the job without a partition */
};

/*
 * Parses the plugstack arguments (socket=PATH, statedir=PATH, gres=NAME,
 * fail_open, fail_closed) into @conf, defaults first. Returns 0, or -1 with
 * a message naming the bad argument in @err.
 */
int gpbs_conf_parse(struct gpbs_conf *conf, int argc, char *const argv[], char *err, size_t errlen);

/*
 * A size as gpubrokerd's options take it: bytes, optionally followed by K,
 * M, G or T (binary, as Slurm counts GRES) and an optional "B" or "iB"
 * ("1G", "512MiB", "1.5G" when that is whole bytes). 0 and overflow are
 * refused. Returns 0, or -1.
 */
int gpbs_size_parse(const char *text, uint64_t *out);

/*
 * A Slurm device list ("0,1", "0-3", "1,3-4"; SLURM_JOB_GPUS,
 * SLURM_STEP_GPUS) into @devices (at most @max). Returns the count, 0 for an
 * empty string, or -1 (malformed, too many, or a repeat).
 */
int gpbs_devices_parse(const char *text, int *devices, int max);

/*
 * The count of GRES @name in one node's allocation as `scontrol show job -d`
 * prints it (gres_detail_str: "gpu:2(IDX:0-1),gpumem(CNT:1073741824)";
 * a typed GRES reads "gpumem:big(CNT:...)"). Returns 1 and sets @out when
 * @name is there, 0 when not, -1 when its count cannot be read.
 */
int gpbs_gres_count(const char *detail, const char *name, uint64_t *out);

/*
 * The devices of GRES @name in one node's gres_detail_str, as Slurm indexes
 * them ("gpu:2(IDX:0-1),gpumem(CNT:...)" gives 0 and 1; every typed entry
 * "gpu:a100:1(IDX:0),gpu:v100:1(IDX:2)" adds its own) into @devices (at most
 * @max). An entry without an IDX list ("gpu(CNT:2)": no device files) adds
 * none. Returns the count, 0 when @name is not there, -1 when an IDX list is
 * malformed or there are too many.
 */
int gpbs_gres_devices(const char *detail, const char *name, int *devices, int max);

/* Where @device is among the @n @devices, or -1. */
int gpbs_devices_index(const int *devices, int n, int device);

/* The partition of job @job_id: "slurm-<id>" into @buf. */
void gpbs_partition_name(uint32_t job_id, char *buf, size_t len);

/*
 * The job's token file, @statedir/<job>.token. gpbs_token_write creates the
 * folder (0700) when missing and writes the file (0600) whole or not at all
 * (a temporary file renamed over it). gpbs_token_read: 0, or -1 with errno
 * (ENOENT when there is none, EINVAL when it is not 64 hex characters).
 * gpbs_token_remove: 0 or -1 with errno (ENOENT is 0).
 */
int gpbs_token_write(const char *statedir, uint32_t job_id, const char *token);
int gpbs_token_read(const char *statedir, uint32_t job_id, char token[65]);
int gpbs_token_remove(const char *statedir, uint32_t job_id);

/*
 * Takes the job's lock file (@statedir/<job>.lock, flock exclusive), so that
 * the steps of one job that start at once create its partition once.
 * Returns the descriptor (gpbs_unlock releases and closes it) or -1 with
 * errno.
 */
int gpbs_lock(const char *statedir, uint32_t job_id);
void gpbs_unlock(int fd);

#endif
