/*
 * main.c - gpubrokerd: command line, start-up and shutdown.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <uv.h>

#include "broker.h"
#include "config.h"
#include "log.h"
#include "server.h"
#include "util.h"

struct options {
	const char *socket_path;
	const char *backend;
	struct backend_config backend_cfg;
	struct broker_limits limits;
	mode_t socket_mode;
	int log_level;
};

static void usage(FILE *out)
{
	fprintf(out,
	        "Usage: gpubrokerd [OPTIONS]\n"
	        "GPU memory broker daemon.\n\n"
	        "  -s, --socket PATH          listen here (default $GPUBROKER_SOCKET, else %s)\n"
	        "      --socket-mode MODE     octal mode of the socket (default 0660)\n"
	        "  -b, --backend KIND         auto, sim or cuda (default auto)\n"
	        "      --sim-devices N        simulated devices (default 1)\n"
	        "      --sim-memory SIZE      memory per simulated device (default 16GiB)\n"
	        "      --slab-size SIZE       pool slab size, a multiple of 2MiB (default 64MiB)\n"
	        "      --max-clients N        connections at once (default 1024)\n"
	        "      --max-allocations N    live allocations per connection (default 65536)\n"
	        "      --max-instances N      instances per connection (default 64)\n"
	        "      --hello-timeout MS     time a client has to say hello (default 10000)\n"
	        "  -l, --log-level LEVEL      error, warn, info or debug (default info)\n"
	        "  -h, --help                 show this help\n"
	        "  -V, --version              show the version\n",
	        GPB_DEFAULT_SOCKET);
}

enum {
	OPT_SOCKET_MODE = 256,
	OPT_SIM_DEVICES,
	OPT_SIM_MEMORY,
	OPT_SLAB_SIZE,
	OPT_MAX_CLIENTS,
	OPT_MAX_ALLOCS,
	OPT_MAX_INSTANCES,
	OPT_HELLO_TIMEOUT,
};

static int bad_value(const char *opt, const char *value)
{
	fprintf(stderr, "gpubrokerd: invalid value '%s' for %s\n", value, opt);
	return 2;
}

/* Returns -1 to go on, else the exit status. */
static int parse_options(int argc, char **argv, struct options *o)
{
	static const struct option longopts[] = {
	    {"socket", required_argument, NULL, 's'},
	    {"socket-mode", required_argument, NULL, OPT_SOCKET_MODE},
	    {"backend", required_argument, NULL, 'b'},
	    {"sim-devices", required_argument, NULL, OPT_SIM_DEVICES},
	    {"sim-memory", required_argument, NULL, OPT_SIM_MEMORY},
	    {"slab-size", required_argument, NULL, OPT_SLAB_SIZE},
	    {"max-clients", required_argument, NULL, OPT_MAX_CLIENTS},
	    {"max-allocations", required_argument, NULL, OPT_MAX_ALLOCS},
	    {"max-instances", required_argument, NULL, OPT_MAX_INSTANCES},
	    {"hello-timeout", required_argument, NULL, OPT_HELLO_TIMEOUT},
	    {"log-level", required_argument, NULL, 'l'},
	    {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},
	    {0},
	};
	int c;
	unsigned long n;
	uint64_t size;
	char *end;
	while ((c = getopt_long(argc, argv, "s:b:l:hV", longopts, NULL)) != -1) {
		switch (c) {
		case 's':
			o->socket_path = optarg;
			break;
		case OPT_SOCKET_MODE:
			n = strtoul(optarg, &end, 8);
			if (!*optarg || *end || n > 0777)
				return bad_value("--socket-mode", optarg);
			o->socket_mode = (mode_t)n;
			break;
		case 'b':
			if (strcmp(optarg, "auto") && strcmp(optarg, "sim") &&
			    strcmp(optarg, "cuda"))
				return bad_value("--backend", optarg);
			o->backend = optarg;
			break;
		case OPT_SIM_DEVICES:
			if (util_parse_uint(optarg, 1, BACKEND_MAX_DEVICES, &n) < 0)
				return bad_value("--sim-devices", optarg);
			o->backend_cfg.sim_devices = (int)n;
			break;
		case OPT_SIM_MEMORY:
			if (util_parse_size(optarg, &size) < 0 || size < POOL_GRANULE)
				return bad_value("--sim-memory", optarg);
			o->backend_cfg.sim_memory = size;
			break;
		case OPT_SLAB_SIZE:
			if (util_parse_size(optarg, &size) < 0 || size == 0 ||
			    size % POOL_SLAB_ALIGN)
				return bad_value("--slab-size", optarg);
			o->limits.slab_size = size;
			break;
		case OPT_MAX_CLIENTS:
			if (util_parse_uint(optarg, 1, 1u << 20, &n) < 0)
				return bad_value("--max-clients", optarg);
			o->limits.max_clients = (unsigned)n;
			break;
		case OPT_MAX_ALLOCS:
			if (util_parse_uint(optarg, 1, 1u << 24, &n) < 0)
				return bad_value("--max-allocations", optarg);
			o->limits.max_allocations = (unsigned)n;
			break;
		case OPT_MAX_INSTANCES:
			if (util_parse_uint(optarg, 1, 4096, &n) < 0)
				return bad_value("--max-instances", optarg);
			o->limits.max_instances = (unsigned)n;
			break;
		case OPT_HELLO_TIMEOUT:
			if (util_parse_uint(optarg, 1, 3600000, &n) < 0)
				return bad_value("--hello-timeout", optarg);
			o->limits.hello_timeout_ms = (unsigned)n;
			break;
		case 'l':
			o->log_level = log_level_parse(optarg);
			if (o->log_level < 0)
				return bad_value("--log-level", optarg);
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("gpubrokerd %s\n", GPB_VERSION);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "gpubrokerd: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	return -1;
}

int main(int argc, char **argv)
{
	struct options o = {
	    .backend = "auto",
	    .backend_cfg = {.sim_devices = 1, .sim_memory = 16ull << 30},
	    .socket_mode = 0660,
	    .log_level = LOG_LEVEL_INFO,
	};
	broker_limits_default(&o.limits);
	o.socket_path = getenv("GPUBROKER_SOCKET");
	if (!o.socket_path || !*o.socket_path)
		o.socket_path = GPB_DEFAULT_SOCKET;
	int status = parse_options(argc, argv, &o);
	if (status >= 0)
		return status;
	log_init(o.log_level);
	/* A client that vanishes mid-reply must cost an EPIPE, not the daemon. */
	signal(SIGPIPE, SIG_IGN);

	struct backend *backend;
	int rc = backend_create(o.backend, &o.backend_cfg, &backend);
	if (rc < 0) {
		log_error("backend %s: %s", o.backend, strerror(-rc));
		return 1;
	}
	struct broker *broker;
	rc = broker_create(backend, &o.limits, &broker);
	if (rc < 0) {
		log_error("broker: %s", strerror(-rc));
		backend_destroy(backend);
		return 1;
	}
	uv_loop_t loop;
	struct server *srv = NULL;
	status = 1;
	if (uv_loop_init(&loop) < 0) {
		log_error("event loop: cannot initialise");
		broker_destroy(broker);
		return 1;
	}
	struct server_config scfg = {.socket_path = o.socket_path, .socket_mode = o.socket_mode};
	rc = server_create(&loop, broker, &scfg, &srv);
	if (rc == 0) {
		rc = server_start(srv);
		if (rc == -EADDRINUSE)
			log_error("%s: another daemon is listening there", o.socket_path);
		else if (rc == -ENAMETOOLONG)
			log_error("%s: socket path too long (at most 107 bytes)", o.socket_path);
		else if (rc == -ENOTSOCK)
			log_error("%s: exists and is not a socket", o.socket_path);
		else if (rc < 0)
			log_error("%s: %s", o.socket_path, strerror(-rc));
	}
	if (rc == 0)
		status = 0;
	uv_run(&loop, UV_RUN_DEFAULT);
	server_destroy(srv);
	if (uv_loop_close(&loop) < 0)
		log_warn("event loop: handles still open at exit");
	broker_destroy(broker);
	if (status == 0)
		log_info("stopped");
	return status;
}
