/*
 * conf.h - gpubroker.conf: the daemon's configuration file.
 *
 * The format is for people editing by hand: one `key = value` per line, `#`
 * starts a comment, blank lines are ignored, keys are lowercase with
 * underscores, sizes take binary units ("64MiB"). Every key is optional; an
 * unknown key is an error, because a misspelt limit that silently does
 * nothing is worse than a daemon that refuses to start. The parser is pure
 * (text in, struct out); conf_load does the file I/O.
 */
#ifndef GPB_CONF_H
#define GPB_CONF_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "backend.h"
#include "broker_types.h"
#include "pool.h"

#define CONF_DEFAULT_PATH "/etc/gpubroker/gpubroker.conf"
/* conf_load refuses a longer file: a configuration is a page or two. */
#define CONF_MAX_FILE (1u << 20)

/* uid.<N>.proportion / .cap and group.<name>.proportion / .cap. */
struct conf_rule {
	bool group;
	uid_t uid;
	char name[64]; /* group name */
	double proportion;
	uint64_t cap;
};

struct conf {
	char backend[8];        /* auto, sim, cuda */
	char cuda_transport[8]; /* auto, vmm, ipc (BACKEND_TRANSPORT_*) */
	char socket[1024];
	mode_t socket_mode;
	char socket_group[64]; /* group the socket is given when the daemon binds it */
	char admin_group[64];  /* members may use admin operations */
	int sim_devices;
	uint64_t sim_memory;
	uint64_t reserve; /* cuda: per device, for clients' contexts */
	int log_level;    /* enum log_level */
	unsigned max_clients_per_uid;
	/* Of max_clients, connections only root and the admin group may take. */
	unsigned admin_reserved_connections;
	/* Bytes of replies and events the daemon queues for clients that do not
	 * read them: for one connection (past it, it is dropped) and for all
	 * together (past it, the connection with the most is dropped first). */
	uint64_t max_output_per_client;
	uint64_t max_output_total;
	char limit[32];    /* none, bytes ("12GiB") or a percentage ("90%") */
	char allocator[8]; /* pool, direct or async */
	struct broker_limits limits;
	struct conf_rule rules[BROKER_MAX_RULES];
	unsigned nrules;
	uint64_t set; /* bit per key (enum conf_key) given explicitly */
};

enum conf_key {
	CONF_BACKEND,
	CONF_SOCKET,
	CONF_SOCKET_MODE,
	CONF_SOCKET_GROUP,
	CONF_ADMIN_GROUP,
	CONF_SIM_DEVICES,
	CONF_SIM_MEMORY,
	CONF_SLAB_SIZE,
	CONF_LOG_LEVEL,
	CONF_MAX_CLIENTS,
	CONF_MAX_CLIENTS_PER_UID,
	CONF_MAX_INSTANCES,
	CONF_MAX_ALLOCATIONS,
	CONF_HELLO_TIMEOUT_MS,
	CONF_WRITE_HIGH_WATER,
	CONF_MODE,
	CONF_LIMIT,
	CONF_ALLOCATOR,
	CONF_MIN_AUTO_SHARE,
	CONF_MAX_INFLIGHT,
	CONF_MAX_HOST_MEMORY,
	CONF_ADMIN_RESERVED_CONNECTIONS,
	CONF_MAX_OUTPUT_PER_CLIENT,
	CONF_MAX_OUTPUT_TOTAL,
	CONF_RESERVE,
	CONF_CUDA_TRANSPORT,
	CONF_PAUSED_TIMEOUT_MS,
	CONF_RECALL_TIMEOUT_MS,
	CONF_KEY_COUNT
};

/* conf_diff's bit for the uid./group. rules taken together. */
#define CONF_RULES CONF_KEY_COUNT

struct conf_error {
	unsigned line; /* 0 when not about one line */
	char key[96];  /* room for the longest rule key, group.<63 bytes>.proportion */
	char message[160];
};

/* The built-in defaults (what an absent file means). */
void conf_defaults(struct conf *cfg);
/* Name of a key as written in the file. */
const char *conf_key_name(enum conf_key key);
/* True when changing this key needs a restart (reload reports it). */
bool conf_key_needs_restart(enum conf_key key);

/*
 * Parses text into cfg (which should hold the defaults). Returns 0, or
 * -EINVAL with err describing the first bad line (cfg is then unchanged).
 * A key given twice, a rule key included, is such an error.
 */
int conf_parse(const char *text, size_t len, struct conf *cfg, struct conf_error *err);
/*
 * Sets one key from its textual value, as the parser and the command line do.
 * 0, -ENOENT (unknown key) or -EINVAL (bad value; err->message says why).
 */
int conf_set(struct conf *cfg, const char *key, const char *value, struct conf_error *err);

/*
 * The global limit as bytes or a fraction of each device (both 0: none),
 * parsed from the `limit` text. 0 or -EINVAL.
 */
int conf_limit_parse(const char *text, uint64_t *bytes, double *fraction);

/*
 * The rules as the broker takes them; group names are resolved with
 * group_gid, which returns (gid_t)-1 for an unknown group (such a rule is
 * left out and named in *unknown, when not NULL). Returns the count.
 */
unsigned conf_rules_resolve(const struct conf *cfg, gid_t (*group_gid)(const char *name),
                            struct broker_rule *out, const char **unknown);

/* Bit per key (1 << enum conf_key) whose value differs between a and b. */
uint64_t conf_diff(const struct conf *a, const struct conf *b);
/* Copies the value of one key from src to dst. */
void conf_copy_key(struct conf *dst, const struct conf *src, enum conf_key key);

/* "PATH:LINE: MESSAGE" (or "PATH: MESSAGE" when no line is concerned): how
 * the daemon reports a bad file at start and in a reload's error reply. */
void conf_error_format(const char *path, const struct conf_error *err, char *buf, size_t size);

/*
 * Reads and parses a file. A missing file is not an error when optional is
 * true (cfg keeps what it had). -errno for I/O errors, -EINVAL for content.
 */
int conf_load(const char *path, bool optional, struct conf *cfg, struct conf_error *err);

#endif
