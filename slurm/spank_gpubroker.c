/*
 * spank_gpubroker.c - a Slurm SPANK plugin that gives each job a gpubroker
 * partition: the GPU memory it asked for (--gpu-mem=SIZE, or its gpumem
 * GRES), guaranteed and enforced by gpubrokerd on every node it runs on.
 *
 * Where each part runs, and why there (docs/slurm.md says it for admins):
 * - slurm_spank_init registers --gpu-mem in srun (local), sbatch/salloc
 *   (allocator) and slurmstepd (remote): spank_option_register is the only
 *   way an option reaches sbatch and salloc.
 * - slurm_spank_init_post_opt, in slurmstepd (remote), as root, once per
 *   step before any task forks: creates the job's partition, or finds the
 *   one an earlier step of the same job created (a token file per job,
 *   under a lock), and puts the token in the job's environment, which every
 *   task of the step inherits.
 * - slurm_spank_task_init, in each task just before exec, with the task's
 *   stdout and stderr already the job's: when the partition could not be
 *   had, says why on the task's stderr and fails the task (exit 1), so the
 *   job's program never starts and the user reads the reason (fail closed).
 *   Failing init_post_opt instead would fail the step with only "Plugin
 *   initialization failed" for the user, and for a batch job Slurm would
 *   drain the node; a job prolog failure also drains it and requeues the job.
 * - slurm_spank_job_epilog, in `slurmstepd spank epilog` as root when the
 *   job ends on the node (completed, cancelled, killed, timed out): destroys
 *   the partition, which ends its sessions and reclaims their memory. Not
 *   slurm_spank_exit: a step's end is not its job's end when several steps
 *   share the partition.
 *
 * It runs inside slurmstepd: no exit(), no state kept across callbacks but
 * the option value, every connection and descriptor closed on every path.
 */
#include "gpbs_util.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <slurm/slurm.h>
#include <slurm/spank.h>

#include <gpubroker.h>

SPANK_PLUGIN(gpubroker, 1);

/* --gpu-mem as given on this side (srun, sbatch, or slurmstepd from the job). */
static uint64_t opt_size;
static int opt_given;
/* In slurmstepd: why this step's tasks must not start (fail closed), or a
 * notice for them (fail open); set by init_post_opt, printed by task_init in
 * each task (forked from the step after it, so they inherit it). */
static char step_failure[768];
static char step_notice[512];

__attribute__((format(printf, 1, 2))) static void step_fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(step_failure, sizeof(step_failure), fmt, ap);
	va_end(ap);
	slurm_error("%s", step_failure);
}

static int gpu_mem_cb(int val, const char *arg, int remote)
{
	uint64_t size;

	if (gpbs_size_parse(arg, &size) < 0) {
		slurm_error("gpubroker: --gpu-mem=%s: expected a size in bytes, or with a "
		            "K, M, G or T suffix (binary), greater than 0",
		            arg ? arg : "");
		return -1;
	}
	opt_size = size;
	opt_given = 1;
	return 0;
}

static struct spank_option gpu_mem_option = {
    "gpu-mem",
    "SIZE",
    "GPU memory this job may use on each of its nodes, on each device it may use, "
    "guaranteed and enforced by gpubroker (bytes, or K/M/G/T, binary)",
    1,
    0,
    gpu_mem_cb};

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	spank_context_t ctx = spank_context();

	if (ctx != S_CTX_LOCAL && ctx != S_CTX_REMOTE && ctx != S_CTX_ALLOCATOR)
		return 0;
	if (spank_option_register(sp, &gpu_mem_option) != ESPANK_SUCCESS) {
		slurm_error("gpubroker: cannot register --gpu-mem");
		return -1;
	}
	return 0;
}

static int read_conf(struct gpbs_conf *conf, int ac, char **av)
{
	char err[256];

	if (gpbs_conf_parse(conf, ac, av, err, sizeof(err)) < 0) {
		step_fail("gpubroker: plugstack.conf: %s", err);
		return -1;
	}
	return 0;
}

static const char *conf_socket(const struct gpbs_conf *conf)
{
	return conf->socket[0] ? conf->socket : GPB_DEFAULT_SOCKET_PATH;
}

/*
 * What slurmctld records of the job on this node: its GRES detail there
 * ("gpu:1(IDX:1),gpumem(CNT:1073741824)", as `scontrol show job -d`
 * prints it). spank.h has no item for a job's GRES, and a GRES without a
 * plugin, such as gpumem, puts nothing in the job's environment.
 * slurm_load_job is the host process's own (libslurmfull), looked up rather
 * than linked so that the plugin loads in every Slurm program.
 */
struct job_record {
	int loaded;     /* slurmctld answered: detail is the job's on this node */
	int node_known; /* this step's node id is the job's node index */
	char *detail;   /* the job's GRES on this node (malloc'd), or NULL: none */
};

/*
 * Returns 0 (loaded, or slurm_load_job is not there: rec->loaded 0), or -1
 * (slurmctld did not answer, or no memory). job_record_finish frees it.
 */
static int job_record_load(spank_t sp, uint32_t job_id, struct job_record *rec)
{
	int (*load)(job_info_msg_t **, uint32_t, uint16_t);
	void (*release)(job_info_msg_t *);
	job_info_msg_t *msg = NULL;
	uint32_t node_id = 0, step_nodes = 0, step_id = 0;
	int rc = 0;

	memset(rec, 0, sizeof(*rec));
	*(void **)&load = dlsym(RTLD_DEFAULT, "slurm_load_job");
	*(void **)&release = dlsym(RTLD_DEFAULT, "slurm_free_job_info_msg");
	if (!load || !release) {
		slurm_debug("gpubroker: slurm_load_job not found: the job's GRES is not read");
		return 0;
	}
	if (load(&msg, job_id, SHOW_DETAIL) != 0 || !msg) {
		slurm_error("gpubroker: cannot read job %" PRIu32 " from slurmctld: %s", job_id,
		            slurm_strerror(slurm_get_errno()));
		return -1;
	}
	if (spank_get_item(sp, S_JOB_NODEID, &node_id) != ESPANK_SUCCESS)
		node_id = 0;
	if (spank_get_item(sp, S_JOB_NNODES, &step_nodes) != ESPANK_SUCCESS)
		step_nodes = 0;
	if (spank_get_item(sp, S_JOB_STEPID, &step_id) != ESPANK_SUCCESS)
		step_id = 0;
	for (uint32_t i = 0; i < msg->record_count; i++) {
		slurm_job_info_t *job = &msg->job_array[i];

		if (job->job_id != job_id)
			continue;
		rec->loaded = 1;
		/* S_JOB_NODEID is the node's place in the step: the job's own
		 * index only when the step runs on every node of the job (the
		 * batch step runs on its first). */
		rec->node_known = step_id == SLURM_BATCH_SCRIPT || step_nodes == job->num_nodes;
		if (node_id < job->gres_detail_cnt && job->gres_detail_str[node_id]) {
			rec->detail = strdup(job->gres_detail_str[node_id]);
			if (!rec->detail) {
				slurm_error("gpubroker: job %" PRIu32 ": out of memory", job_id);
				rec->loaded = 0;
				rc = -1;
			}
		}
		break;
	}
	release(msg);
	return rc;
}

static void job_record_finish(struct job_record *rec)
{
	free(rec->detail);
	rec->detail = NULL;
}

/*
 * The size the job asked for, or 0: --gpu-mem, else its GRES. When it has
 * both, --gpu-mem may not be more than the GRES the scheduler counted.
 */
static int job_size(const struct gpbs_conf *conf, uint32_t job_id, const struct job_record *rec,
                    int rec_failed, uint64_t *size)
{
	uint64_t gres = 0;
	int has_gres = 0;

	*size = opt_given ? opt_size : 0;
	if (!conf->gres[0])
		return 0;
	if (!rec_failed) {
		has_gres = gpbs_gres_count(rec->detail, conf->gres, &gres);
		if (has_gres < 0)
			slurm_error("gpubroker: job %" PRIu32 ": cannot read the %s count in '%s'",
			            job_id, conf->gres, rec->detail);
	}
	if (rec_failed || has_gres < 0) {
		/* Not knowing whether the job asked for gpumem must not fail
		 * the jobs that did not: --gpu-mem still counts, the GRES is
		 * not enforced, and the job is told. */
		snprintf(step_notice, sizeof(step_notice),
		         "gpubroker: job %" PRIu32 ": cannot read its %s GRES from slurmctld: %s",
		         job_id, conf->gres,
		         opt_given ? "--gpu-mem alone is enforced"
		                   : "no GPU memory partition (see slurmd's log)");
		return 0;
	}
	if (has_gres > 0 && opt_given && opt_size > gres) {
		step_fail("gpubroker: --gpu-mem=%" PRIu64 " is more than the job's %s GRES "
		          "(%" PRIu64 " bytes on this node)",
		          opt_size, conf->gres, gres);
		return -1;
	}
	if (has_gres > 0 && !opt_given)
		*size = gres;
	return 0;
}

/* "0,2" for the message of a refusal. */
static void devices_format(const int *devices, int n, char *buf, size_t len)
{
	size_t off = 0;

	buf[0] = '\0';
	for (int i = 0; i < n && off < len; i++)
		off += (size_t)snprintf(buf + off, len - off, "%s%d", i ? "," : "", devices[i]);
	if (n == 0)
		snprintf(buf, len, "none");
}

/*
 * The devices of the job's partition on this node, as Slurm numbers its
 * GPUs; 0 (none listed) means every device. Returns the count, or -1 with
 * step_failure set.
 *
 * Only what Slurm sets and the user cannot: srun hands the step the user's
 * whole environment, so a variable slurmstepd does not write is the user's.
 * slurmstepd writes (overwrites, or unsets when the step has no GPU) one
 * variable per step before the plugin runs: SLURM_JOB_GPUS in the batch
 * (and interactive) step, SLURM_STEP_GPUS in every other step; the other one
 * is whatever the user's environment had (Slurm 22.05, measured by the
 * suite's planted step). Where slurmctld's record of the job was read, its
 * GPUs on this node are the partition's (the partition is the job's, shared
 * by all its steps), and the step's variable must name only those.
 */
static int job_devices(spank_t sp, uint32_t job_id, const struct job_record *rec, int *devices)
{
	int step_dev[GPBS_MAX_DEVICES], n_step = 0, n_job;
	uint32_t step_id = 0;
	const char *var;
	char buf[512], have[256];

	if (spank_get_item(sp, S_JOB_STEPID, &step_id) != ESPANK_SUCCESS) {
		step_fail("gpubroker: job %" PRIu32 ": cannot read the step id", job_id);
		return -1;
	}
	var = step_id == SLURM_BATCH_SCRIPT || step_id == SLURM_INTERACTIVE_STEP
	          ? "SLURM_JOB_GPUS"
	          : "SLURM_STEP_GPUS";
	if (spank_getenv(sp, var, buf, sizeof(buf)) == ESPANK_SUCCESS) {
		n_step = gpbs_devices_parse(buf, step_dev, GPBS_MAX_DEVICES);
		if (n_step < 0) {
			step_fail("gpubroker: job %" PRIu32 ": %s=%s: not a list of device indices",
			          job_id, var, buf);
			return -1;
		}
	}
	if (!rec->loaded || !rec->node_known) {
		memcpy(devices, step_dev, (size_t)n_step * sizeof(*devices));
		return n_step;
	}
	n_job = gpbs_gres_devices(rec->detail, "gpu", devices, GPBS_MAX_DEVICES);
	if (n_job < 0) {
		step_fail("gpubroker: job %" PRIu32 ": cannot read its GPUs in slurmctld's '%s'",
		          job_id, rec->detail);
		return -1;
	}
	for (int i = 0; i < n_step; i++) {
		if (gpbs_devices_index(devices, n_job, step_dev[i]) >= 0)
			continue;
		devices_format(devices, n_job, have, sizeof(have));
		step_fail("gpubroker: job %" PRIu32 ": %s=%s names GPU %d, which is not the "
		          "job's on this node (slurmctld allocated it GPUs %s): inconsistent, "
		          "refused",
		          job_id, var, buf, step_dev[i], have);
		return -1;
	}
	return n_job;
}

/*
 * Creates the job's partition, or finds the one an earlier step of the job
 * made. Under the job's lock: the first step creates, the others read its
 * token. A partition whose token file is gone (a leftover of an earlier
 * Slurm job with the same id) is destroyed and made again. Returns 0 with
 * @token, else a negative GPB_E code with a message logged.
 */
static int partition_get(gpb_client *c, const struct gpbs_conf *conf, uint32_t job_id, uint32_t uid,
                         uint64_t size, const int *devices, int n_devices, char token[65])
{
	char name[32];
	int rc;

	gpbs_partition_name(job_id, name, sizeof(name));
	for (int attempt = 0; attempt < 2; attempt++) {
		rc = gpb_partition_create(c, name, uid, size, devices, n_devices, token);
		if (rc == 0) {
			if (gpbs_token_write(conf->statedir, job_id, token) < 0) {
				step_fail("gpubroker: job %" PRIu32 ": cannot write its token "
				          "under %s: %s",
				          job_id, conf->statedir, strerror(errno));
				gpb_partition_destroy(c, name);
				return GPB_E_SYSTEM;
			}
			slurm_info("gpubroker: job %" PRIu32 ": partition %s, %" PRIu64
			           " bytes per device, owner uid %" PRIu32,
			           job_id, name, size, uid);
			return 0;
		}
		if (rc != GPB_E_EXISTS)
			break;
		if (gpbs_token_read(conf->statedir, job_id, token) == 0)
			return 0;
		slurm_info("gpubroker: job %" PRIu32 ": partition %s exists without a token "
		           "file: destroying it and making it again",
		           job_id, name);
		gpb_partition_destroy(c, name);
	}
	step_fail("gpubroker: job %" PRIu32 ": cannot create GPU memory partition %s of %" PRIu64
	          " bytes: %s",
	          job_id, name, size, gpb_last_error()[0] ? gpb_last_error() : gpb_strerror(rc));
	return rc;
}

/*
 * The step's part: the job's partition and its token in the job's
 * environment. Returns 0, or -1 with step_failure set.
 */
static int step_setup(spank_t sp, int ac, char **av)
{
	int devices[GPBS_MAX_DEVICES];
	struct job_record rec = {0};
	struct gpbs_conf conf;
	uint32_t job_id = 0;
	uid_t uid = 0;
	uint64_t size = 0;
	gpb_client *c = NULL;
	char token[65];
	int n_devices, lock, rc, rec_failed;

	if (read_conf(&conf, ac, av) < 0)
		return -1;
	if (spank_get_item(sp, S_JOB_ID, &job_id) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS) {
		step_fail("gpubroker: cannot read the job's id and uid");
		return -1;
	}
	/* One question to slurmctld per step, only when the GRES is read. */
	rec_failed = conf.gres[0] && job_record_load(sp, job_id, &rec) < 0;
	rc = job_size(&conf, job_id, &rec, rec_failed, &size);
	n_devices = rc == 0 && size ? job_devices(sp, job_id, &rec, devices) : 0;
	job_record_finish(&rec);
	if (rc < 0 || n_devices < 0)
		return -1;
	if (size == 0)
		return 0; /* the job asked for no GPU memory: nothing to do */

	lock = gpbs_lock(conf.statedir, job_id);
	if (lock < 0) {
		step_fail("gpubroker: job %" PRIu32 ": cannot lock under %s: %s", job_id,
		          conf.statedir, strerror(errno));
		return -1;
	}
	/* The plugin speaks for root, never from inside a partition. */
	unsetenv("GPUBROKER_TOKEN");
	rc = gpb_connect(conf_socket(&conf), "slurm", &c);
	if (rc < 0) {
		gpbs_unlock(lock);
		if (conf.fail_open) {
			snprintf(step_notice, sizeof(step_notice),
			         "gpubroker: the GPU memory broker at %s is unreachable (%s): "
			         "job %" PRIu32 " runs without a GPU memory partition "
			         "(fail_open)",
			         conf_socket(&conf), gpb_strerror(rc), job_id);
			slurm_info("%s", step_notice);
			return 0;
		}
		step_fail("gpubroker: the GPU memory broker at %s is unreachable (%s): job "
		          "%" PRIu32 " asked for %" PRIu64 " bytes of GPU memory and does not "
		          "start",
		          conf_socket(&conf), gpb_strerror(rc), job_id, size);
		return -1;
	}
	rc = partition_get(c, &conf, job_id, (uint32_t)uid, size, devices, n_devices, token);
	gpb_disconnect(c);
	gpbs_unlock(lock);
	if (rc < 0)
		return -1;
	rc = spank_setenv(sp, "GPUBROKER_TOKEN", token, 1) != ESPANK_SUCCESS ||
	     (conf.socket[0] &&
	      spank_setenv(sp, "GPUBROKER_SOCKET", conf.socket, 1) != ESPANK_SUCCESS);
	explicit_bzero(token, sizeof(token)); /* the job's environment has its copy */
	if (rc) {
		step_fail("gpubroker: job %" PRIu32 ": cannot set GPUBROKER_TOKEN", job_id);
		return -1;
	}
	return 0;
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	if (spank_context() == S_CTX_REMOTE)
		step_setup(sp, ac, av); /* a failure is the tasks' to report */
	return 0;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	uint32_t task = 0;

	if (spank_context() != S_CTX_REMOTE)
		return 0;
	/* Once per step on the user's terminal (global task 0, or the batch
	 * script), but every task of a failed step fails. */
	if (spank_get_item(sp, S_TASK_GLOBAL_ID, &task) != ESPANK_SUCCESS)
		task = 0;
	if (task == 0 && (step_failure[0] || step_notice[0])) {
		fprintf(stderr, "%s\n", step_failure[0] ? step_failure : step_notice);
		fflush(stderr);
	}
	return step_failure[0] ? -1 : 0;
}

int slurm_spank_job_epilog(spank_t sp, int ac, char **av)
{
	struct gpbs_conf conf;
	uint32_t job_id = 0;
	gpb_client *c = NULL;
	char name[32], token[65];
	int had_token, rc;

	if (read_conf(&conf, ac, av) < 0)
		return 0; /* an epilog that fails drains the node: log, go on */
	if (spank_get_item(sp, S_JOB_ID, &job_id) != ESPANK_SUCCESS) {
		slurm_error("gpubroker: epilog: cannot read the job id");
		return 0;
	}
	gpbs_partition_name(job_id, name, sizeof(name));
	had_token = gpbs_token_read(conf.statedir, job_id, token) == 0;
	explicit_bzero(token, sizeof(token));
	unsetenv("GPUBROKER_TOKEN");
	rc = gpb_connect(conf_socket(&conf), "slurm-epilog", &c);
	if (rc == 0) {
		rc = gpb_partition_destroy(c, name);
		gpb_disconnect(c);
		if (rc == GPB_E_NOT_FOUND)
			rc = 0;
	}
	/* Every job ends here, most without a partition: only a job that had
	 * one (its token file says so) is worth an error when this fails. */
	if (rc < 0 && had_token)
		slurm_error("gpubroker: job %" PRIu32 ": cannot destroy partition %s at %s: %s",
		            job_id, name, conf_socket(&conf),
		            gpb_last_error()[0] ? gpb_last_error() : gpb_strerror(rc));
	else if (rc < 0)
		slurm_debug("gpubroker: job %" PRIu32 ": epilog: %s", job_id, gpb_strerror(rc));
	if (gpbs_token_remove(conf.statedir, job_id) < 0)
		slurm_error("gpubroker: job %" PRIu32 ": cannot remove its token file under %s: %s",
		            job_id, conf.statedir, strerror(errno));
	return 0;
}
