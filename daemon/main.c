/*
 * main.c - gpubrokerd: command line, configuration, start-up and shutdown.
 *
 * Settings come from, in rising precedence: built-in defaults, the
 * configuration file, $GPUBROKER_SOCKET, command-line flags. Flags are
 * applied through the same conf_set() as file keys, so both are validated by
 * one piece of code.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <uv.h>

#include "broker.h"
#include "conf.h"
#include "config.h"
#include "jsonmem.h"
#include "log.h"
#include "reload.h"
#include "server.h"

#define MAX_FLAGS 64

struct flag {
	const char *key;
	const char *value;
};

/* What the command line said, kept for reloads: the file is re-read and the
 * flags applied on top again. */
struct cmdline {
	const char *config_path;
	bool config_explicit;
	struct flag flags[MAX_FLAGS];
	int nflags;
};

static void usage(FILE *out)
{
	fprintf(
	    out,
	    "Usage: gpubrokerd [OPTIONS]\n"
	    "GPU memory broker daemon.\n\n"
	    "  -c, --config PATH          configuration file (default %s)\n"
	    "  -s, --socket PATH          listen here (default $GPUBROKER_SOCKET, else %s)\n"
	    "      --socket-mode MODE     octal mode of the socket (default 0660)\n"
	    "      --socket-group GROUP   group of the socket (default gpubroker, if it exists)\n"
	    "  -b, --backend KIND         auto, sim or cuda (default auto)\n"
	    "      --cuda-transport T     auto, vmm or ipc: how clients map cuda slabs\n"
	    "                             (default auto: vmm where the device can)\n"
	    "      --sim-devices N        simulated devices (default 1)\n"
	    "      --sim-memory SIZE      memory per simulated device (default 16GiB)\n"
	    "      --slab-size SIZE       pool slab size, a multiple of 2MiB (default 64MiB)\n"
	    "      --reserve SIZE         cuda: memory per device kept for clients' own\n"
	    "                             contexts (default 1GiB, at most a quarter of it)\n"
	    "      --max-clients N        connections at once (default 1024)\n"
	    "      --max-clients-per-uid N  connections of one user (default 256)\n"
	    "      --max-allocations N    live allocations per connection (default 65536)\n"
	    "      --max-instances N      instances per connection (default 64)\n"
	    "      --hello-timeout MS     time a client has to say hello (default 10000)\n"
	    "  -l, --log-level LEVEL      error, warn, info or debug (default info)\n"
	    "  -h, --help                 show this help\n"
	    "  -V, --version              show the version\n\n"
	    "Every option also exists as a key of the configuration file; see\n"
	    "gpubroker.conf(5), which has more (the admin group and the connections\n"
	    "kept for it, the bounds on output queued for clients that do not read).\n"
	    "SIGHUP or `gpubrokerctl reload` re-reads the file.\n",
	    CONF_DEFAULT_PATH, GPB_DEFAULT_SOCKET);
}

/* Returns -1 to go on, else the exit status. */
static int parse_cmdline(int argc, char **argv, struct cmdline *cl)
{
	static const struct option longopts[] = {
	    {"config", required_argument, NULL, 'c'},
	    {"socket", required_argument, NULL, 's'},
	    {"socket-mode", required_argument, NULL, 0},
	    {"socket-group", required_argument, NULL, 0},
	    {"backend", required_argument, NULL, 'b'},
	    {"cuda-transport", required_argument, NULL, 0},
	    {"sim-devices", required_argument, NULL, 0},
	    {"sim-memory", required_argument, NULL, 0},
	    {"slab-size", required_argument, NULL, 0},
	    {"reserve", required_argument, NULL, 0},
	    {"max-clients", required_argument, NULL, 0},
	    {"max-clients-per-uid", required_argument, NULL, 0},
	    {"max-allocations", required_argument, NULL, 0},
	    {"max-instances", required_argument, NULL, 0},
	    {"hello-timeout", required_argument, NULL, 0},
	    {"log-level", required_argument, NULL, 'l'},
	    {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},
	    {0},
	};
	int c, index;
	cl->config_path = CONF_DEFAULT_PATH;
	while ((c = getopt_long(argc, argv, "c:s:b:l:hV", longopts, &index)) != -1) {
		const char *key = NULL;
		switch (c) {
		case 0:
			key = longopts[index].name;
			break;
		case 'c':
			cl->config_path = optarg;
			cl->config_explicit = true;
			continue;
		case 's':
			key = "socket";
			break;
		case 'b':
			key = "backend";
			break;
		case 'l':
			key = "log-level";
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
		if (cl->nflags == MAX_FLAGS) {
			fprintf(stderr, "gpubrokerd: too many options\n");
			return 2;
		}
		cl->flags[cl->nflags++] = (struct flag){key, optarg};
	}
	if (optind < argc) {
		fprintf(stderr, "gpubrokerd: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	return -1;
}

/* Flag spelling to file key: --sim-memory is sim_memory; --hello-timeout
 * is hello_timeout_ms. */
static void flag_to_key(const char *flag, char *key, size_t size)
{
	snprintf(key, size, "%s", strcmp(flag, "hello-timeout") == 0 ? "hello_timeout_ms" : flag);
	for (char *p = key; *p; p++) {
		if (*p == '-')
			*p = '_';
	}
}

/*
 * Builds the effective configuration: defaults, file, environment, flags.
 * Returns 0, or -EINVAL with what is wrong in message (usage errors in flags
 * name the flag; file errors name the file, line and key).
 */
static int conf_build(const struct cmdline *cl, struct conf *cfg, char *message, size_t size)
{
	struct conf_error err;
	conf_defaults(cfg);
	int rc = conf_load(cl->config_path, !cl->config_explicit, cfg, &err);
	if (rc < 0) {
		conf_error_format(cl->config_path, &err, message, size);
		return -EINVAL;
	}
	const char *env = getenv("GPUBROKER_SOCKET");
	if (env && *env && conf_set(cfg, "socket", env, &err) < 0) {
		snprintf(message, size, "GPUBROKER_SOCKET: %s", err.message);
		return -EINVAL;
	}
	for (int i = 0; i < cl->nflags; i++) {
		char key[64];
		flag_to_key(cl->flags[i].key, key, sizeof(key));
		if (conf_set(cfg, key, cl->flags[i].value, &err) < 0) {
			snprintf(message, size, "--%s: %s", cl->flags[i].key, err.message);
			return -EINVAL;
		}
	}
	return 0;
}

static const struct cmdline *reload_cmdline;

/* The policy settings the broker does not take at creation: the global
 * limit and the allocator strategy. */
static int apply_policy(struct broker *b, const struct conf *cfg)
{
	uint64_t bytes;
	double fraction;
	enum broker_allocator kind;
	int rc = conf_limit_parse(cfg->limit, &bytes, &fraction);
	if (rc == 0)
		rc = broker_set_limit(b, -1, bytes, fraction);
	if (rc == 0)
		rc = broker_allocator_parse(cfg->allocator, &kind);
	if (rc == 0)
		rc = broker_set_allocator(b, kind, &(uint64_t){0}, &(uint64_t){0});
	if (rc == 0)
		reload_rules_apply(b, cfg);
	return rc;
}

/* server_reload_fn: re-reads the configuration; the server applies it. */
static int reload_conf(struct conf *out, char *message, size_t size)
{
	return conf_build(reload_cmdline, out, message, size);
}

/*
 * Raises the soft RLIMIT_NOFILE to the hard one: the daemon's descriptors
 * are one per connection and per slab (docs/design.md, "Descriptors"), and
 * an 80 GiB device in 64 MiB slabs alone is 1280 of them, past the usual
 * soft limit of 1024. Nothing here uses select(), so a descriptor past
 * FD_SETSIZE is harmless.
 */
static void raise_nofile(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return;
	if (rl.rlim_cur >= rl.rlim_max) {
		log_info("descriptors: RLIMIT_NOFILE %llu (the hard limit)",
		         (unsigned long long)rl.rlim_cur);
		return;
	}
	rlim_t old = rl.rlim_cur;
	rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
		log_warn("descriptors: cannot raise RLIMIT_NOFILE from %llu to %llu: %s",
		         (unsigned long long)old, (unsigned long long)rl.rlim_max, strerror(errno));
	else
		log_info("descriptors: RLIMIT_NOFILE raised from %llu to the hard limit %llu",
		         (unsigned long long)old, (unsigned long long)rl.rlim_max);
}

int main(int argc, char **argv)
{
	/* Every JSON node is counted: a clean exit requires none left. */
	jsonmem_install();
	struct cmdline cl = {0};
	int status = parse_cmdline(argc, argv, &cl);
	if (status >= 0)
		return status;
	log_init(LOG_LEVEL_INFO);
	struct conf cfg;
	char message[256];
	if (conf_build(&cl, &cfg, message, sizeof(message)) < 0) {
		log_error("%s", message);
		return 2;
	}
	log_init(cfg.log_level);
	raise_nofile();
	reload_cmdline = &cl;
	/* A client that vanishes mid-reply must cost an EPIPE, not the daemon. */
	signal(SIGPIPE, SIG_IGN);

	struct backend_config bcfg = {.sim_devices = cfg.sim_devices,
	                              .sim_memory = cfg.sim_memory,
	                              .reserve = cfg.reserve,
	                              .reserve_explicit = cfg.set & (1ull << CONF_RESERVE),
	                              .cuda_transport = cfg.cuda_transport};
	struct backend *backend;
	int rc = backend_create(cfg.backend, &bcfg, &backend);
	if (rc < 0) {
		log_error("backend %s: %s", cfg.backend, strerror(-rc));
		return 1;
	}
	struct broker *broker;
	rc = broker_create(backend, &cfg.limits, &broker);
	if (rc < 0) {
		log_error("broker: %s", strerror(-rc));
		backend_destroy(backend);
		return 1;
	}
	rc = apply_policy(broker, &cfg);
	if (rc < 0) {
		log_error("limit %s, allocator %s: %s", cfg.limit, cfg.allocator, strerror(-rc));
		broker_destroy(broker);
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
	rc = server_create(&loop, broker, &cfg, reload_conf, &srv);
	if (rc == 0) {
		rc = server_start(srv);
		if (rc == -EADDRINUSE)
			log_error("%s: another daemon is listening there", cfg.socket);
		else if (rc == -ENAMETOOLONG)
			log_error("%s: socket path too long (at most 107 bytes)", cfg.socket);
		else if (rc == -ENOTSOCK)
			log_error("%s: exists and is not a socket", cfg.socket);
		else if (rc < 0)
			log_error("%s: %s", cfg.socket, strerror(-rc));
	}
	if (rc == 0)
		status = 0;
	uv_run(&loop, UV_RUN_DEFAULT);
	server_destroy(srv);
	if (uv_loop_close(&loop) < 0)
		log_warn("event loop: handles still open at exit");
	broker_destroy(broker);
	long leaked = jsonmem_outstanding();
	if (leaked != 0) {
		log_error("%ld JSON allocations were never freed (a leak in the daemon)", leaked);
		status = 1;
	}
	if (status == 0)
		log_info("stopped");
	return status;
}
