/*
 * gpubrokerctl - show what gpubrokerd is doing.
 *
 * Each command is the protocol method of the same name sent through
 * gpb_request(); the result is printed as JSON (verbatim), CSV or a table.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "config.h"
#include "ctl.h"
#include "ctl_output.h"
#include "gpubroker.h"
#include "schema.h"

#define CTL_MAX_INTERVAL 86400.0 /* seconds: a day between refreshes is plenty */

static volatile sig_atomic_t ctl_stop;

static void ctl_on_sigint(int sig)
{
	(void)sig;
	ctl_stop = 1;
}

static void usage(FILE *out)
{
	fprintf(
	    out,
	    "Usage: gpubrokerctl [OPTIONS] COMMAND\n"
	    "\n"
	    "Shows the state of gpubrokerd, the GPU memory broker.\n"
	    "\n"
	    "Commands:\n"
	    "  status               daemon summary and one row per device\n"
	    "  devices [--map]      devices with their memory; --map: each slab as a row\n"
	    "                       of cells (admin; --device N: one device)\n"
	    "  clients              connected clients\n"
	    "  stats [--device N]   pool statistics (all devices, or device N) and recalls\n"
	    "  instances            every instance: proportion, share, cap, used, group, mode,\n"
	    "                       recalls of its leases\n"
	    "\n"
	    "Administration (root or the admin group; set-proportion and set-auto also\n"
	    "for the instance's own client):\n"
	    "  set-mode MODE                  active (caps enforced) or passive\n"
	    "  set-proportion INSTANCE P      put INSTANCE in the manual pool with P in (0, 1]\n"
	    "  set-auto INSTANCE              put INSTANCE in the auto pool\n"
	    "  set-limit [--device N] LIMIT   bound what the broker hands out: bytes (units\n"
	    "                                 KiB MiB GiB TiB), a percentage (\"50%%\") or none\n"
	    "  set-allocator NAME             pool, direct or async (releases everything)\n"
	    "  invalidate                     release every allocation of every client\n"
	    "  reload                         re-read gpubroker.conf (as SIGHUP does)\n"
	    "  evict SESSION                  disconnect a client; it loses what it held\n"
	    "  trim [SESSION]                 ask every client (or SESSION) to give back the\n"
	    "                                 leases it does not use (recall events)\n"
	    "  partition-create NAME --uid UID --size SIZE [--device D]...\n"
	    "                                 take SIZE (K M G T: binary) of each device (or\n"
	    "                                 of each D) for UID; prints the token alone\n"
	    "  partition-destroy NAME         end its clients and give its memory back\n"
	    "  partitions                     partitions with their size and use (a user\n"
	    "                                 sees its own)\n"
	    "\n"
	    "Monitoring:\n"
	    "  top                  status and clients, refreshed every -l SECONDS (default 1)\n"
	    "  metrics [--textfile PATH]\n"
	    "                       Prometheus text format; --textfile writes PATH atomically\n"
	    "                       (for node_exporter's textfile collector)\n"
	    "  version              versions of gpubrokerctl, libgpubroker and the daemon\n"
	    "\n"
	    "Without a daemon:\n"
	    "  layout FILE          a kernel's buffer layout and block size from FILE (JSON, or\n"
	    "                       - for standard input; see gpubrokerctl(1))\n"
	    "\n"
	    "Options:\n"
	    "  -s, --socket PATH    daemon socket (default: $GPUBROKER_SOCKET, else %s)\n"
	    "  -o, --output FORMAT  table (default), json (the result object, one line) or csv\n"
	    "  -H, --no-header      omit the header line of table and csv output\n"
	    "  -l SECONDS           repeat every SECONDS until interrupted\n"
	    "  -d, --device N|UUID  with stats and set-limit: only that device\n"
	    "  -h, --help           show this help and exit\n"
	    "  -V, --version        show the version and exit\n"
	    "\n"
	    "Exit status: 0 success, 1 the daemon answered an error (layout: FILE is wrong\n"
	    "or no block fits), 2 usage error, 3 daemon unreachable, 4 permission denied.\n",
	    GPB_DEFAULT_SOCKET_PATH);
}

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static int params_device(const struct ctl_options *o, cJSON *params)
{
	if (o->device >= 0 && !cJSON_AddNumberToObject(params, PROTO_F_DEVICE, (double)o->device))
		return ctl_oom();
	/* The daemon resolves a UUID (and refuses an unknown one). */
	if (o->device_uuid && !cJSON_AddStringToObject(params, PROTO_F_DEVICE, o->device_uuid))
		return ctl_oom();
	return EXIT_OK;
}

/* ---- the VRAM policy ------------------------------------------------------- */

/* A copy of an instance row that reads well: the proportion "auto" in the
 * auto pool, shares rounded, the daemon's mode alongside. */
static cJSON *instance_row(const cJSON *inst, const char *mode)
{
	cJSON *row = cJSON_Duplicate(inst, true);
	const cJSON *prop = cJSON_GetObjectItemCaseSensitive(inst, PROTO_F_PROPORTION);
	const cJSON *share = cJSON_GetObjectItemCaseSensitive(inst, PROTO_F_SHARE);
	char buf[32];

	if (!row)
		return NULL;
	if (cJSON_IsNumber(prop))
		snprintf(buf, sizeof(buf), "%.4g", prop->valuedouble);
	else
		snprintf(buf, sizeof(buf), "auto");
	cJSON_DeleteItemFromObjectCaseSensitive(row, PROTO_F_PROPORTION);
	if (!cJSON_AddStringToObject(row, PROTO_F_PROPORTION, buf))
		goto fail;
	if (cJSON_IsNumber(share)) {
		snprintf(buf, sizeof(buf), "%.4g", share->valuedouble);
		cJSON_DeleteItemFromObjectCaseSensitive(row, PROTO_F_SHARE);
		if (!cJSON_AddStringToObject(row, PROTO_F_SHARE, buf))
			goto fail;
	}
	if (mode && !cJSON_AddStringToObject(row, PROTO_F_MODE, mode))
		goto fail;
	return row;
fail:
	cJSON_Delete(row);
	return NULL;
}

static const struct ctl_column instance_cols[] = {
    {PROTO_F_INSTANCE, "INSTANCE", CTL_TEXT},
    {PROTO_F_NAME, "NAME", CTL_TEXT},
    {PROTO_F_PID, "PID", CTL_NUM},
    {PROTO_F_DEVICE, "DEVICE", CTL_NUM},
    {PROTO_F_GROUP, "GROUP", CTL_TEXT},
    {PROTO_F_PROPORTION, "PROPORTION", CTL_TEXT},
    {PROTO_F_SHARE, "SHARE", CTL_TEXT},
    {PROTO_F_CAP, "CAP", CTL_SIZE},
    {PROTO_F_USED, "USED", CTL_SIZE},
    {PROTO_F_MODE, "MODE", CTL_TEXT},
    /* Recalls of its leases (issue 28): sent, not answered yet, timed out. */
    {PROTO_F_RECALLS_SENT, "RECALLS", CTL_NUM},
    {PROTO_F_RECALLS_PENDING, "PENDING", CTL_NUM},
    {PROTO_F_RECALLS_TIMED_OUT, "TIMED_OUT", CTL_NUM},
};

/* Prints instance rows (an array of `policy` instance objects). */
static int print_instance_rows(const cJSON *insts, const char *mode, const struct ctl_options *o,
                               bool header)
{
	return print_rows_mapped(insts, PROTO_F_INSTANCES, instance_row, mode, instance_cols,
	                         ARRAY_SIZE(instance_cols), o->format, header);
}

static const char *result_mode(const cJSON *result)
{
	const cJSON *mode = cJSON_GetObjectItemCaseSensitive(result, PROTO_F_MODE);

	return cJSON_IsString(mode) ? mode->valuestring : NULL;
}

static int print_instances(const cJSON *result, const struct ctl_options *o, bool header)
{
	const char *mode = result_mode(result);

	if (!mode)
		return ctl_bad_reply(PROTO_F_MODE);
	int rc = print_instance_rows(cJSON_GetObjectItemCaseSensitive(result, PROTO_F_INSTANCES),
	                             mode, o, header);
	if (rc == EXIT_OK)
		print_others(result, PROTO_F_INSTANCES, o->format);
	return rc;
}

/* The daemon's warnings (auto pool under 5%...) go to stderr. */
static void print_warnings(const cJSON *result)
{
	const cJSON *w;

	cJSON_ArrayForEach(w, cJSON_GetObjectItemCaseSensitive(result, PROTO_F_WARNINGS))
	{
		if (cJSON_IsString(w))
			fprintf(stderr, "gpubrokerctl: warning: %s\n", w->valuestring);
	}
}

/* set-proportion, set-auto: the instance as it is now. */
static int print_instance(const cJSON *result, const struct ctl_options *o, bool header)
{
	cJSON *one = cJSON_CreateArray();
	cJSON *dup = cJSON_Duplicate(result, true);
	int rc;

	if (!one || !dup || !cJSON_AddItemToArray(one, dup)) {
		cJSON_Delete(dup);
		cJSON_Delete(one);
		return ctl_oom();
	}
	print_warnings(result);
	rc = print_instance_rows(one, NULL, o, header);
	cJSON_Delete(one);
	return rc;
}

static int print_mode(const cJSON *result, const struct ctl_options *o, bool header)
{
	const char *mode = result_mode(result);
	const cJSON *prev = cJSON_GetObjectItemCaseSensitive(result, PROTO_F_PREVIOUS);

	if (!mode || !cJSON_IsString(prev))
		return ctl_bad_reply(PROTO_F_MODE);
	if (o->format == CTL_CSV) {
		if (header)
			printf("mode,previous\n");
		printf("%s,%s\n", mode, prev->valuestring);
	} else {
		printf("mode %s (was %s)\n", mode, prev->valuestring);
	}
	return EXIT_OK;
}

static int print_limit(const cJSON *result, const struct ctl_options *o, bool header)
{
	static const struct ctl_column cols[] = {
	    {PROTO_F_DEVICE, "DEVICE", CTL_NUM},
	    {PROTO_F_TOTAL, "TOTAL", CTL_SIZE},
	    {PROTO_F_CAPACITY, "CAPACITY", CTL_SIZE},
	    {PROTO_F_LIMIT, "LIMIT", CTL_SIZE},
	    {PROTO_F_LIMIT_FRACTION, "FRACTION", CTL_TEXT},
	    {PROTO_F_USED, "USED", CTL_SIZE},
	    {PROTO_F_AVAILABLE, "AVAILABLE", CTL_SIZE},
	};

	return print_rows(result, PROTO_F_DEVICES, cols, ARRAY_SIZE(cols), o->format, header);
}

/* An instance id as typed: 16 hex digits (leading zeros may be left out). */
static int params_instance(const struct ctl_options *o, cJSON *params)
{
	const char *arg = o->args[0];
	char *end, id[17];
	unsigned long long v;

	errno = 0;
	v = strtoull(arg, &end, 16);
	if (errno || end == arg || *end || strlen(arg) > 16 || *arg == '-' || *arg == '+' ||
	    *arg == ' ')
		return usage_error("'%s' is not an instance id (hex, as 'instances' shows)", arg);
	snprintf(id, sizeof(id), "%016llx", v);
	return cJSON_AddStringToObject(params, PROTO_F_INSTANCE, id) ? EXIT_OK : ctl_oom();
}

static int params_proportion(const struct ctl_options *o, cJSON *params)
{
	const char *arg = o->args[1];
	char *end;
	double p;
	int rc = params_instance(o, params);

	if (rc != EXIT_OK)
		return rc;
	errno = 0;
	p = strtod(arg, &end);
	if (errno || end == arg || *end || !(p > 0 && p <= 1))
		return usage_error("the proportion must be a number in (0, 1], not '%s'", arg);
	return cJSON_AddNumberToObject(params, PROTO_F_PROPORTION, p) ? EXIT_OK : ctl_oom();
}

static int params_mode(const struct ctl_options *o, cJSON *params)
{
	const char *mode = o->args[0];

	if (strcmp(mode, PROTO_V_MODE_ACTIVE) != 0 && strcmp(mode, PROTO_V_MODE_PASSIVE) != 0)
		return usage_error("the mode is 'active' or 'passive', not '%s'", mode);
	return cJSON_AddStringToObject(params, PROTO_F_MODE, mode) ? EXIT_OK : ctl_oom();
}

/* LIMIT: "none", bytes with an optional binary unit, or a percentage. */
static int params_limit(const struct ctl_options *o, cJSON *params)
{
	const char *arg = o->args[0];
	char *end, buf[24];
	uint64_t bytes;
	int rc = params_device(o, params);

	if (rc != EXIT_OK)
		return rc;
	if (strcmp(arg, "none") == 0)
		return cJSON_AddStringToObject(params, PROTO_F_SIZE, "0") ? EXIT_OK : ctl_oom();
	if (*arg < '0' || *arg > '9')
		return usage_error("'%s' is not a limit (bytes, a percentage or none)", arg);
	errno = 0;
	if (arg[strlen(arg) - 1] == '%') {
		double pct = strtod(arg, &end);

		if (errno || *end != '%' || end[1] || !(pct > 0 && pct <= 100))
			return usage_error("a percentage limit is in (0%%, 100%%], not '%s'", arg);
		return cJSON_AddNumberToObject(params, PROTO_F_FRACTION, pct / 100) ? EXIT_OK
		                                                                    : ctl_oom();
	}
	if (ctl_parse_bytes(arg, &bytes) < 0)
		return usage_error("'%s' is not a limit (bytes, a percentage or none)", arg);
	snprintf(buf, sizeof(buf), "%llu", (unsigned long long)bytes);
	return cJSON_AddStringToObject(params, PROTO_F_SIZE, buf) ? EXIT_OK : ctl_oom();
}

static int params_allocator(const struct ctl_options *o, cJSON *params)
{
	const char *name = o->args[0];

	if (strcmp(name, PROTO_V_ALLOC_POOL) != 0 && strcmp(name, PROTO_V_ALLOC_DIRECT) != 0 &&
	    strcmp(name, PROTO_V_ALLOC_ASYNC) != 0)
		return usage_error("the allocator is pool, direct or async, not '%s'", name);
	return cJSON_AddStringToObject(params, PROTO_F_ALLOCATOR, name) ? EXIT_OK : ctl_oom();
}

/* "released N allocations, M attachments" of set-allocator and invalidate. */
static int print_released(const cJSON *result, const struct ctl_options *o, bool header)
{
	const cJSON *allocs = cJSON_GetObjectItemCaseSensitive(result, PROTO_F_ALLOCATIONS);
	const cJSON *atts = cJSON_GetObjectItemCaseSensitive(result, PROTO_F_ATTACHMENTS);
	const cJSON *now = cJSON_GetObjectItemCaseSensitive(result, PROTO_F_ALLOCATOR);
	const cJSON *prev = cJSON_GetObjectItemCaseSensitive(result, PROTO_F_PREVIOUS);

	if (!cJSON_IsString(allocs) || !cJSON_IsString(atts))
		return ctl_bad_reply(PROTO_F_ALLOCATIONS);
	if (o->format == CTL_CSV) {
		if (header)
			printf("%sallocations,attachments\n",
			       cJSON_IsString(now) ? "allocator," : "");
		if (cJSON_IsString(now))
			printf("%s,", now->valuestring);
		printf("%s,%s\n", allocs->valuestring, atts->valuestring);
		return EXIT_OK;
	}
	if (cJSON_IsString(now) && cJSON_IsString(prev))
		printf("allocator %s (was %s)\n", now->valuestring, prev->valuestring);
	printf("released %s allocations and %s attachments\n", allocs->valuestring,
	       atts->valuestring);
	return EXIT_OK;
}

static const struct ctl_command ctl_commands[] = {
    {.name = "status", .method = PROTO_M_STATUS, .print = print_status},
    {.name = "devices", .method = PROTO_M_DEVICES, .print = print_devices},
    {.name = "clients", .method = PROTO_M_CLIENTS, .print = print_clients},
    {.name = "stats", .method = PROTO_M_STATS, .params = params_device, .print = print_stats},
    {.name = "instances", .method = PROTO_M_POLICY, .print = print_instances},
    {.name = "set-mode",
     .method = PROTO_M_SET_MODE,
     .nargs = 1,
     .changes = true,
     .params = params_mode,
     .print = print_mode},
    {.name = "set-proportion",
     .method = PROTO_M_SET_PROPORTION,
     .nargs = 2,
     .changes = true,
     .params = params_proportion,
     .print = print_instance},
    {.name = "set-auto",
     .method = PROTO_M_SET_AUTO,
     .nargs = 1,
     .changes = true,
     .params = params_instance,
     .print = print_instance},
    {.name = "set-limit",
     .method = PROTO_M_SET_LIMIT,
     .nargs = 1,
     .changes = true,
     .params = params_limit,
     .print = print_limit},
    {.name = "set-allocator",
     .method = PROTO_M_SET_ALLOCATOR,
     .nargs = 1,
     .changes = true,
     .params = params_allocator,
     .print = print_released},
    {.name = "invalidate",
     .method = PROTO_M_INVALIDATE_ALL,
     .changes = true,
     .print = print_released},
    {.name = "reload", .method = PROTO_M_RELOAD, .changes = true, .print = print_reload},
    {.name = "evict",
     .method = PROTO_M_EVICT,
     .nargs = 1,
     .changes = true,
     .params = params_session,
     .print = print_done},
    {.name = "trim",
     .method = PROTO_M_TRIM,
     .optional = 1,
     .changes = true,
     .params = params_trim,
     .print = print_trim},
    {.name = "partition-create",
     .method = PROTO_M_PARTITION_CREATE,
     .nargs = 1,
     .changes = true,
     .params = params_partition_create,
     .print = print_partition_token},
    {.name = "partition-destroy",
     .method = PROTO_M_PARTITION_DESTROY,
     .nargs = 1,
     .changes = true,
     .params = params_partition_name,
     .print = print_partition_destroyed},
    {.name = "partitions", .method = PROTO_M_PARTITIONS, .print = print_partitions},
    {.name = "metrics", .method = PROTO_M_METRICS, .print = print_metrics},
    {.name = "version", .method = PROTO_M_STATUS, .print = print_version},
    /* A live view: status and clients, screen cleared, every -l seconds
     * (1 by default). */
    {.name = "top", .method = PROTO_M_STATUS, .print = print_status},
};

/* Runs @cmd once. @first tells whether to print the CSV header when
 * repeating (once is enough for a stream of rows). */
static int run_once(gpb_client *client, const struct ctl_command *cmd, const struct ctl_options *o,
                    bool first)
{
	cJSON *params = cJSON_CreateObject();
	char *text = NULL, *params_text;
	cJSON *result;
	int rc;

	if (!params)
		return ctl_oom();
	rc = cmd->params ? cmd->params(o, params) : EXIT_OK;
	params_text = rc == EXIT_OK ? cJSON_PrintUnformatted(params) : NULL;
	cJSON_Delete(params);
	if (rc != EXIT_OK)
		return rc;
	if (!params_text)
		return ctl_oom();
	rc = gpb_request(client, cmd->method, params_text, &text);
	cJSON_free(params_text);
	if (rc < 0)
		return ctl_fail(rc);
	if (o->format == CTL_JSON) {
		printf("%s\n", text);
		gpb_string_free(text);
		return EXIT_OK;
	}
	result = cJSON_Parse(text);
	gpb_string_free(text);
	if (!result)
		return ctl_bad_reply("not JSON");
	if (o->interval > 0 && o->format == CTL_TABLE && !first)
		putchar('\n');
	rc = cmd->print(result, o, o->header && (first || o->format == CTL_TABLE));
	cJSON_Delete(result);
	return rc;
}

/* Sleeps @seconds; false when interrupted by SIGINT. */
static bool ctl_sleep(double seconds)
{
	struct timespec ts = {
	    .tv_sec = (time_t)seconds,
	    .tv_nsec = (long)((seconds - (double)(time_t)seconds) * 1e9),
	};

	while (!ctl_stop && nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
	return !ctl_stop;
}

static int parse_options(int argc, char **argv, struct ctl_options *o)
{
	static const struct option longopts[] = {
	    {"socket", required_argument, NULL, 's'},
	    {"output", required_argument, NULL, 'o'},
	    {"no-header", no_argument, NULL, 'H'},
	    {"device", required_argument, NULL, 'd'},
	    {"textfile", required_argument, NULL, 't'},
	    {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},
	    {"uid", required_argument, NULL, 'u'},
	    {"size", required_argument, NULL, 'S'},
	    {"map", no_argument, NULL, 'M'},
	    {NULL, 0, NULL, 0},
	};
	char *end;
	int c;

	*o = (struct ctl_options){.format = CTL_TABLE, .header = true, .device = -1};
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":s:o:Hl:d:hV", longopts, NULL)) != -1) {
		switch (c) {
		case 's':
			o->socket = optarg;
			break;
		case 'M':
			o->map = true;
			break;
		case 'o':
			if (strcmp(optarg, "table") == 0)
				o->format = CTL_TABLE;
			else if (strcmp(optarg, "json") == 0)
				o->format = CTL_JSON;
			else if (strcmp(optarg, "csv") == 0)
				o->format = CTL_CSV;
			else
				return usage_error("unknown output format '%s' (table, json, csv)",
				                   optarg);
			break;
		case 'H':
			o->header = false;
			break;
		case 't':
			o->textfile = optarg;
			break;
		case 'u':
			o->uid = optarg;
			break;
		case 'S':
			o->size = optarg;
			break;
		case 'l':
			errno = 0;
			o->interval = strtod(optarg, &end);
			if (errno || end == optarg || *end || !(o->interval > 0) ||
			    o->interval > CTL_MAX_INTERVAL)
				return usage_error("-l needs a number of seconds, not '%s'",
				                   optarg);
			break;
		case 'd':
			if (o->ndevices == (int)ARRAY_SIZE(o->devices))
				return usage_error("--device at most %zu times",
				                   ARRAY_SIZE(o->devices));
			o->devices[o->ndevices++] = optarg;
			errno = 0;
			o->device = strtol(optarg, &end, 10);
			if (optarg[0] >= '0' && optarg[0] <= '9') {
				if (errno || *end || o->device > INT32_MAX)
					return usage_error("--device needs a device index or UUID, "
					                   "not '%s'",
					                   optarg);
			} else if (*optarg && strlen(optarg) <= PROTO_MAX_NAME) {
				o->device = -1;
				o->device_uuid = optarg;
			} else {
				return usage_error(
				    "--device needs a device index or UUID, not '%s'", optarg);
			}
			break;
		case 'h':
			usage(stdout);
			exit(EXIT_OK);
		case 'V':
			printf("gpubrokerctl %s (libgpubroker %s)\n", GPB_VERSION, gpb_version());
			exit(EXIT_OK);
		case ':':
			if (optopt)
				return usage_error("option '-%c' needs an argument", optopt);
			return usage_error("option '%s' needs an argument", argv[optind - 1]);
		default:
			if (optopt)
				return usage_error("unknown option '-%c'", optopt);
			return usage_error("unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind >= argc)
		return usage_error("no command given");
	o->command = argv[optind];
	o->args = argv + optind + 1;
	o->nargs = argc - optind - 1;
	return EXIT_OK;
}

static const struct ctl_command *ctl_command_find(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(ctl_commands); i++) {
		if (strcmp(ctl_commands[i].name, name) == 0)
			return &ctl_commands[i];
	}
	return NULL;
}

int main(int argc, char **argv)
{
	const struct ctl_command *cmd = NULL;
	struct ctl_options o;
	gpb_client *client;
	int rc;

	rc = parse_options(argc, argv, &o);
	if (rc != EXIT_OK)
		return rc;
	/* The one command that needs no daemon. */
	if (strcmp(o.command, "layout") == 0)
		return ctl_layout(&o);
	cmd = ctl_command_find(o.command);
	if (!cmd)
		return usage_error("unknown command '%s'", o.command);
	/* devices --map: the device_map request (admin), drawn as rows of cells. */
	static const struct ctl_command map_cmd = {.name = "devices",
	                                           .method = PROTO_M_DEVICE_MAP,
	                                           .params = params_device,
	                                           .print = print_device_map};
	if (o.map && strcmp(cmd->name, "devices") != 0)
		return usage_error("--map only applies to devices, not %s", o.command);
	if (o.map)
		cmd = &map_cmd;
	if (o.nargs > cmd->nargs + cmd->optional)
		return usage_error("unexpected argument '%s'", o.args[cmd->nargs + cmd->optional]);
	if (o.nargs < cmd->nargs)
		return usage_error("%s needs %d argument%s (see --help)", cmd->name, cmd->nargs,
		                   cmd->nargs > 1 ? "s" : "");
	bool create = strcmp(cmd->name, "partition-create") == 0;
	if (o.ndevices && strcmp(cmd->name, "stats") != 0 && strcmp(cmd->name, "set-limit") != 0 &&
	    !create && !o.map)
		return usage_error(
		    "--device only applies to stats, set-limit, partition-create and "
		    "devices --map, not %s",
		    o.command);
	if (o.ndevices > 1 && !create)
		return usage_error("--device once with %s", o.command);
	if ((o.uid || o.size) && !create)
		return usage_error("--uid and --size only apply to partition-create, not %s",
		                   o.command);
	if (o.textfile && strcmp(cmd->name, "metrics") != 0)
		return usage_error("--textfile only applies to metrics, not %s", o.command);
	bool top = strcmp(cmd->name, "top") == 0;
	if (top && o.interval <= 0)
		o.interval = 1;
	if (top && o.format != CTL_TABLE)
		return usage_error(
		    "top is a table view; use status or clients with -o json or csv");
	if (o.interval > 0 && cmd->changes)
		return usage_error("-l does not repeat %s: it changes the daemon", o.command);

	if (o.interval > 0) {
		struct sigaction sa = {.sa_handler = ctl_on_sigint};

		/* No SA_RESTART: the sleep between rounds must end at once. */
		sigemptyset(&sa.sa_mask);
		sigaction(SIGINT, &sa, NULL);
	}
	/* NULL lets the library apply $GPUBROKER_SOCKET, then the default. */
	rc = gpb_connect(o.socket, "gpubrokerctl", &client);
	if (rc < 0)
		return ctl_fail(rc);
	/* On a terminal, the full-screen view; on a pipe or a file, the
	 * summary and the clients redrawn as before (a log of screens). */
	if (top && isatty(STDOUT_FILENO) && isatty(STDIN_FILENO)) {
		rc = ctl_top(client, &o, &ctl_stop);
		gpb_disconnect(client);
		return rc;
	}
	for (bool first = true;; first = false) {
		if (top) {
			/* Home and clear: redraw in place like top(1). */
			fputs("\033[H\033[2J", stdout);
			rc = run_once(client, cmd, &o, true);
			if (rc == EXIT_OK) {
				putchar('\n');
				rc = run_once(client, ctl_command_find("clients"), &o, true);
			}
		} else {
			rc = run_once(client, cmd, &o, first);
		}
		fflush(stdout);
		if (rc != EXIT_OK || o.interval <= 0 || !ctl_sleep(o.interval))
			break;
	}
	gpb_disconnect(client);
	/* Interrupting a repeating command is how it is meant to end. */
	return ctl_stop ? EXIT_OK : rc;
}
