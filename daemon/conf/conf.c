/*
 * conf.c - parsing gpubroker.conf.
 */
#include "conf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "log.h"
#include "util.h"

enum conf_type {
	TYPE_STRING,
	TYPE_MODE,
	TYPE_UINT,
	TYPE_SIZE,
	TYPE_LEVEL,
	TYPE_BACKEND,
	TYPE_TRANSPORT,
	TYPE_POLICY_MODE,
	TYPE_LIMIT,
	TYPE_ALLOCATOR,
	TYPE_FRACTION,
};

struct conf_keydef {
	const char *name;
	enum conf_type type;
	bool restart;      /* a running daemon cannot change it */
	unsigned long min; /* TYPE_UINT, TYPE_SIZE */
	unsigned long long max;
	size_t offset; /* into struct conf */
	size_t size;   /* of the field */
};

#define FIELD(f) offsetof(struct conf, f), sizeof(((struct conf *)0)->f)

static const struct conf_keydef conf_keys[CONF_KEY_COUNT] = {
    [CONF_BACKEND] = {"backend", TYPE_BACKEND, true, 0, 0, FIELD(backend)},
    [CONF_CUDA_TRANSPORT] = {"cuda_transport", TYPE_TRANSPORT, true, 0, 0, FIELD(cuda_transport)},
    [CONF_SOCKET] = {"socket", TYPE_STRING, true, 1, 0, FIELD(socket)},
    [CONF_SOCKET_MODE] = {"socket_mode", TYPE_MODE, true, 0, 0777, FIELD(socket_mode)},
    [CONF_SOCKET_GROUP] = {"socket_group", TYPE_STRING, true, 0, 0, FIELD(socket_group)},
    [CONF_ADMIN_GROUP] = {"admin_group", TYPE_STRING, false, 0, 0, FIELD(admin_group)},
    [CONF_SIM_DEVICES] = {"sim_devices", TYPE_UINT, true, 1, BACKEND_MAX_DEVICES,
                          FIELD(sim_devices)},
    [CONF_SIM_MEMORY] = {"sim_memory", TYPE_SIZE, true, POOL_GRANULE, 1ull << 50,
                         FIELD(sim_memory)},
    [CONF_SLAB_SIZE] = {"slab_size", TYPE_SIZE, true, POOL_SLAB_ALIGN, 1ull << 40,
                        FIELD(limits.slab_size)},
    [CONF_LOG_LEVEL] = {"log_level", TYPE_LEVEL, false, 0, 0, FIELD(log_level)},
    [CONF_MAX_CLIENTS] = {"max_clients", TYPE_UINT, false, 1, 1u << 20, FIELD(limits.max_clients)},
    [CONF_MAX_CLIENTS_PER_UID] = {"max_clients_per_uid", TYPE_UINT, false, 1, 1u << 20,
                                  FIELD(max_clients_per_uid)},
    [CONF_MAX_INSTANCES] = {"max_instances", TYPE_UINT, false, 1, 4096,
                            FIELD(limits.max_instances)},
    [CONF_MAX_ALLOCATIONS] = {"max_allocations", TYPE_UINT, false, 1, 1u << 24,
                              FIELD(limits.max_allocations)},
    [CONF_HELLO_TIMEOUT_MS] = {"hello_timeout_ms", TYPE_UINT, false, 1, 3600000,
                               FIELD(limits.hello_timeout_ms)},
    [CONF_PAUSED_TIMEOUT_MS] = {"paused_timeout_ms", TYPE_UINT, false, 1, 3600000,
                                FIELD(limits.paused_timeout_ms)},
    [CONF_RECALL_TIMEOUT_MS] = {"recall_timeout_ms", TYPE_UINT, false, 1, 60000,
                                FIELD(limits.recall_timeout_ms)},
    [CONF_MAX_INFLIGHT] = {"max_inflight", TYPE_UINT, false, 1, 1u << 20,
                           FIELD(limits.max_inflight)},
    [CONF_MODE] = {"mode", TYPE_POLICY_MODE, false, 0, 0, FIELD(limits.mode)},
    [CONF_LIMIT] = {"limit", TYPE_LIMIT, false, 0, 0, FIELD(limit)},
    [CONF_ALLOCATOR] = {"allocator", TYPE_ALLOCATOR, true, 0, 0, FIELD(allocator)},
    [CONF_MIN_AUTO_SHARE] = {"min_auto_share", TYPE_FRACTION, true, 0, 0,
                             FIELD(limits.min_auto_share)},
    [CONF_WRITE_HIGH_WATER] = {"write_high_water", TYPE_SIZE, false, 4096, 1ull << 32,
                               FIELD(limits.write_high_water)},
    [CONF_MAX_HOST_MEMORY] = {"max_host_memory", TYPE_SIZE, false, 4096, 1ull << 50,
                              FIELD(limits.max_host_memory)},
    [CONF_ADMIN_RESERVED_CONNECTIONS] = {"admin_reserved_connections", TYPE_UINT, false, 0,
                                         1u << 20, FIELD(admin_reserved_connections)},
    [CONF_MAX_OUTPUT_PER_CLIENT] = {"max_output_per_client", TYPE_SIZE, false, 4096, 1ull << 32,
                                    FIELD(max_output_per_client)},
    [CONF_MAX_OUTPUT_TOTAL] = {"max_output_total", TYPE_SIZE, false, 4096, 1ull << 40,
                               FIELD(max_output_total)},
    [CONF_RESERVE] = {"reserve", TYPE_SIZE, true, 0, 1ull << 50, FIELD(reserve)},
};

void conf_defaults(struct conf *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	snprintf(cfg->backend, sizeof(cfg->backend), "auto");
	snprintf(cfg->cuda_transport, sizeof(cfg->cuda_transport), "%s", BACKEND_TRANSPORT_AUTO);
	snprintf(cfg->socket, sizeof(cfg->socket), "%s", GPB_DEFAULT_SOCKET);
	cfg->socket_mode = 0660;
	snprintf(cfg->socket_group, sizeof(cfg->socket_group), "gpubroker");
	snprintf(cfg->admin_group, sizeof(cfg->admin_group), "gpubroker-admin");
	cfg->sim_devices = 1;
	cfg->sim_memory = 16ull << 30;
	cfg->reserve = BACKEND_DEFAULT_RESERVE;
	cfg->log_level = LOG_LEVEL_INFO;
	cfg->max_clients_per_uid = 256;
	/* Enough for an operator's gpubrokerctl and a monitoring scrape when
	 * users have taken every other connection. */
	cfg->admin_reserved_connections = 3;
	/* A client is paused at write_high_water (256 KiB) and never sends
	 * more than one request's reply past it; what else queues up for it
	 * is events. 256 stalled clients of one user cost 256 MiB at most,
	 * and every client together 64 MiB (docs/reliability.md). */
	cfg->max_output_per_client = 1u << 20;
	cfg->max_output_total = 64u << 20;
	snprintf(cfg->limit, sizeof(cfg->limit), "none");
	snprintf(cfg->allocator, sizeof(cfg->allocator), "pool");
	broker_limits_default(&cfg->limits);
}

const char *conf_key_name(enum conf_key key)
{
	return key < CONF_KEY_COUNT ? conf_keys[key].name : key == CONF_RULES ? "rules" : "?";
}

bool conf_key_needs_restart(enum conf_key key)
{
	return key < CONF_KEY_COUNT && conf_keys[key].restart;
}

int conf_limit_parse(const char *text, uint64_t *bytes, double *fraction)
{
	size_t n = strlen(text);
	char *end;
	*bytes = 0;
	*fraction = 0;
	if (strcmp(text, "none") == 0)
		return 0;
	if (n > 1 && text[n - 1] == '%') {
		double pct = strtod(text, &end);
		if (end != text + n - 1 || !(pct > 0 && pct <= 100))
			return -EINVAL;
		*fraction = pct / 100;
		return 0;
	}
	return util_parse_size(text, bytes) == 0 && *bytes > 0 ? 0 : -EINVAL;
}

/* Field by field: struct padding makes memcmp unreliable. */
static bool conf_rules_equal(const struct conf *a, const struct conf *b)
{
	if (a->nrules != b->nrules)
		return false;
	for (unsigned i = 0; i < a->nrules; i++) {
		const struct conf_rule *x = &a->rules[i], *y = &b->rules[i];
		if (x->group != y->group || x->uid != y->uid || strcmp(x->name, y->name) != 0 ||
		    x->proportion != y->proportion || x->cap != y->cap)
			return false;
	}
	return true;
}

uint64_t conf_diff(const struct conf *a, const struct conf *b)
{
	uint64_t changed = 0;
	if (!conf_rules_equal(a, b))
		changed |= 1ull << CONF_RULES;
	for (int k = 0; k < CONF_KEY_COUNT; k++) {
		const struct conf_keydef *d = &conf_keys[k];
		const char *fa = (const char *)a + d->offset, *fb = (const char *)b + d->offset;
		bool text = d->type == TYPE_STRING || d->type == TYPE_BACKEND ||
		            d->type == TYPE_TRANSPORT || d->type == TYPE_LIMIT ||
		            d->type == TYPE_ALLOCATOR;
		bool differs = text ? strcmp(fa, fb) != 0 : memcmp(fa, fb, d->size) != 0;
		if (differs)
			changed |= 1ull << k;
	}
	return changed;
}

void conf_copy_key(struct conf *dst, const struct conf *src, enum conf_key key)
{
	const struct conf_keydef *d = &conf_keys[key];
	memcpy((char *)dst + d->offset, (const char *)src + d->offset, d->size);
}

static int conf_fail(struct conf_error *err, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int conf_fail(struct conf_error *err, const char *key, const char *fmt, ...)
{
	va_list ap;
	snprintf(err->key, sizeof(err->key), "%s", key);
	va_start(ap, fmt);
	vsnprintf(err->message, sizeof(err->message), fmt, ap);
	va_end(ap);
	return -EINVAL;
}

/* Stores an integer into a field of the size the table gives: every
 * numeric field is 4 (unsigned, int, mode_t) or 8 bytes (uint64_t). */
static void conf_store(void *field, size_t size, unsigned long long v)
{
	if (size == sizeof(uint64_t)) {
		uint64_t x = v;
		memcpy(field, &x, sizeof(x));
	} else {
		uint32_t x = (uint32_t)v;
		memcpy(field, &x, sizeof(x));
	}
}

/*
 * What conf_parse's "given twice" check tracks: one slot per plain key
 * (enum conf_key), then two per rule (its proportion, its cap).
 */
#define CONF_SLOTS (CONF_KEY_COUNT + 2 * BROKER_MAX_RULES)

/*
 * uid.<N>.proportion, uid.<N>.cap, group.<name>.proportion, group.<name>.cap:
 * a rule per user or group, created by its first key (so rules keep the
 * order of their first keys in the file: the order group rules are tried in).
 * *slot says which rule field was set.
 */
static int conf_set_rule(struct conf *cfg, const char *key, const char *value,
                         struct conf_error *err, unsigned *slot)
{
	bool group = strncmp(key, "group.", 6) == 0;
	const char *who = key + (group ? 6 : 4);
	const char *dot = strrchr(who, '.');
	char name[64];
	unsigned long uid = 0;
	if (!dot || dot == who)
		return conf_fail(err, key, "'%s': expected uid.<N>.<field> or group.<name>.<field>",
		                 key);
	if ((size_t)(dot - who) >= sizeof(name))
		return conf_fail(err, key, "'%s': a %s name is at most %zu bytes", key,
		                 group ? "group" : "uid", sizeof(name) - 1);
	memcpy(name, who, (size_t)(dot - who));
	name[dot - who] = '\0';
	if (!group && util_parse_uint(name, 0, UINT32_MAX - 1, &uid) < 0)
		return conf_fail(err, key, "'%s': '%s' is not a uid", key, name);
	bool is_cap = strcmp(dot + 1, "cap") == 0;
	if (!is_cap && strcmp(dot + 1, "proportion") != 0)
		return conf_fail(err, key, "'%s': a rule sets proportion or cap", key);
	unsigned i;
	for (i = 0; i < cfg->nrules; i++) {
		struct conf_rule *r = &cfg->rules[i];
		if (r->group == group && (group ? strcmp(r->name, name) == 0 : r->uid == uid))
			break;
	}
	if (i == cfg->nrules && i == BROKER_MAX_RULES)
		return conf_fail(err, key, "'%s': more than %d uid/group rules", key,
		                 BROKER_MAX_RULES);
	struct conf_rule r =
	    i < cfg->nrules ? cfg->rules[i] : (struct conf_rule){.group = group, .uid = (uid_t)uid};
	snprintf(r.name, sizeof(r.name), "%s", name);
	if (is_cap) {
		if (util_parse_size(value, &r.cap) < 0 || r.cap == 0)
			return conf_fail(err, key, "'%s' must be a size (e.g. 8GiB)", key);
	} else {
		char *end;
		r.proportion = strtod(value, &end);
		if (!*value || *end || !(r.proportion > 0 && r.proportion <= 1))
			return conf_fail(err, key, "'%s' must be a number in (0, 1]", key);
	}
	/* Only a valid value creates the rule: a bad line leaves cfg as it was. */
	cfg->rules[i] = r;
	if (i == cfg->nrules)
		cfg->nrules++;
	*slot = CONF_KEY_COUNT + 2 * i + is_cap;
	return 0;
}

unsigned conf_rules_resolve(const struct conf *cfg, gid_t (*group_gid)(const char *name),
                            struct broker_rule *out, const char **unknown)
{
	unsigned n = 0;
	for (unsigned i = 0; i < cfg->nrules; i++) {
		const struct conf_rule *r = &cfg->rules[i];
		gid_t gid = r->group ? group_gid(r->name) : 0;
		if (r->group && gid == (gid_t)-1) {
			if (unknown)
				*unknown = r->name;
			continue;
		}
		out[n++] = (struct broker_rule){.group = r->group,
		                                .uid = r->uid,
		                                .gid = gid,
		                                .proportion = r->proportion,
		                                .cap = r->cap};
	}
	return n;
}

/* conf_set, also saying which slot (CONF_SLOTS) the key set. */
static int conf_set_slot(struct conf *cfg, const char *key, const char *value,
                         struct conf_error *err, unsigned *slot)
{
	int k;
	if (strncmp(key, "uid.", 4) == 0 || strncmp(key, "group.", 6) == 0)
		return conf_set_rule(cfg, key, value, err, slot);
	for (k = 0; k < CONF_KEY_COUNT; k++) {
		if (strcmp(conf_keys[k].name, key) == 0)
			break;
	}
	if (k == CONF_KEY_COUNT) {
		conf_fail(err, key, "unknown key '%s'", key);
		return -ENOENT;
	}
	const struct conf_keydef *d = &conf_keys[k];
	char *field = (char *)cfg + d->offset;
	uint64_t size;
	unsigned long n;
	char *end;
	switch (d->type) {
	case TYPE_STRING:
		if (strlen(value) < d->min || strlen(value) >= d->size)
			return conf_fail(err, key, "'%s' must be %lu to %zu bytes long", key,
			                 d->min, d->size - 1);
		memcpy(field, value, strlen(value) + 1);
		break;
	case TYPE_BACKEND:
		if (strcmp(value, "auto") && strcmp(value, "sim") && strcmp(value, "cuda"))
			return conf_fail(err, key, "'%s' must be auto, sim or cuda", key);
		memcpy(field, value, strlen(value) + 1);
		break;
	case TYPE_TRANSPORT:
		if (strcmp(value, BACKEND_TRANSPORT_AUTO) && strcmp(value, BACKEND_TRANSPORT_VMM) &&
		    strcmp(value, BACKEND_TRANSPORT_IPC))
			return conf_fail(err, key, "'%s' must be auto, vmm or ipc", key);
		memcpy(field, value, strlen(value) + 1);
		break;
	case TYPE_LEVEL: {
		int level = log_level_parse(value);
		if (level < 0)
			return conf_fail(err, key, "'%s' must be error, warn, info or debug", key);
		memcpy(field, &level, sizeof(level));
		break;
	}
	case TYPE_POLICY_MODE: {
		enum policy_mode mode;
		if (policy_mode_parse(value, &mode) < 0)
			return conf_fail(err, key, "'%s' must be active or passive", key);
		memcpy(field, &mode, sizeof(mode));
		break;
	}
	case TYPE_LIMIT: {
		uint64_t bytes;
		double fraction;
		if (strlen(value) >= d->size || conf_limit_parse(value, &bytes, &fraction) < 0)
			return conf_fail(err, key,
			                 "'%s' must be none, a size (e.g. 12GiB) or a percentage "
			                 "(e.g. 90%%)",
			                 key);
		memcpy(field, value, strlen(value) + 1);
		break;
	}
	case TYPE_ALLOCATOR: {
		enum broker_allocator kind;
		if (broker_allocator_parse(value, &kind) < 0 || strlen(value) >= d->size)
			return conf_fail(err, key, "'%s' must be pool, direct or async", key);
		memcpy(field, value, strlen(value) + 1);
		break;
	}
	case TYPE_FRACTION: {
		double x = strtod(value, &end);
		if (!*value || *end || !(x > 0 && x <= 1))
			return conf_fail(err, key, "'%s' must be a number in (0, 1]", key);
		memcpy(field, &x, sizeof(x));
		break;
	}
	case TYPE_MODE:
		n = strtoul(value, &end, 8);
		if (!*value || *end || n > d->max)
			return conf_fail(err, key, "'%s' must be an octal mode such as 0660", key);
		conf_store(field, d->size, n);
		break;
	case TYPE_UINT:
		if (util_parse_uint(value, d->min, (unsigned long)d->max, &n) < 0)
			return conf_fail(err, key, "'%s' must be an integer from %lu to %llu", key,
			                 d->min, d->max);
		conf_store(field, d->size, n);
		break;
	case TYPE_SIZE:
		if (util_parse_size(value, &size) < 0 || size < d->min || size > d->max)
			return conf_fail(err, key,
			                 "'%s' must be a size from %lu to %llu bytes (e.g. 64MiB)",
			                 key, d->min, d->max);
		if (k == CONF_SLAB_SIZE && size % POOL_SLAB_ALIGN)
			return conf_fail(err, key, "'%s' must be a multiple of 2MiB", key);
		conf_store(field, d->size, size);
		break;
	}
	cfg->set |= 1ull << k;
	*slot = (unsigned)k;
	return 0;
}

int conf_set(struct conf *cfg, const char *key, const char *value, struct conf_error *err)
{
	unsigned slot;
	return conf_set_slot(cfg, key, value, err, &slot);
}

/* Trims blanks at both ends, in place. */
static char *conf_trim(char *s)
{
	while (*s == ' ' || *s == '\t')
		s++;
	size_t n = strlen(s);
	while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
		s[--n] = '\0';
	return s;
}

int conf_parse(const char *text, size_t len, struct conf *cfg, struct conf_error *err)
{
	struct conf next = *cfg;
	uint64_t seen[(CONF_SLOTS + 63) / 64] = {0};
	unsigned line = 0;
	size_t pos = 0;
	memset(err, 0, sizeof(*err));
	while (pos < len) {
		const char *nl = memchr(text + pos, '\n', len - pos);
		size_t n = nl ? (size_t)(nl - (text + pos)) : len - pos;
		char buf[512];
		line++;
		err->line = line;
		if (n >= sizeof(buf))
			return conf_fail(err, "", "line longer than %zu bytes", sizeof(buf) - 1);
		memcpy(buf, text + pos, n);
		buf[n] = '\0';
		pos += n + 1;
		if (memchr(buf, '\0', n))
			return conf_fail(err, "", "NUL byte in line");
		char *hash = strchr(buf, '#');
		if (hash)
			*hash = '\0';
		char *s = conf_trim(buf);
		if (!*s)
			continue;
		char *eq = strchr(s, '=');
		if (!eq)
			return conf_fail(err, "", "expected 'key = value'");
		*eq = '\0';
		char *key = conf_trim(s), *value = conf_trim(eq + 1);
		if (!*key)
			return conf_fail(err, "", "missing key before '='");
		unsigned slot;
		if (conf_set_slot(&next, key, value, err, &slot) < 0)
			return -EINVAL;
		/* A key given twice is almost always an editing slip. */
		if (seen[slot / 64] & (1ull << (slot % 64)))
			return conf_fail(err, key, "'%s' is given twice", key);
		seen[slot / 64] |= 1ull << (slot % 64);
	}
	err->line = 0;
	*cfg = next;
	return 0;
}

void conf_error_format(const char *path, const struct conf_error *err, char *buf, size_t size)
{
	if (err->line)
		snprintf(buf, size, "%s:%u: %s", path, err->line, err->message);
	else
		snprintf(buf, size, "%s: %s", path, err->message);
}

int conf_load(const char *path, bool optional, struct conf *cfg, struct conf_error *err)
{
	memset(err, 0, sizeof(*err));
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		if (e == ENOENT && optional)
			return 0;
		conf_fail(err, "", "%s", strerror(e));
		return -e;
	}
	char *text = NULL;
	size_t len = 0, cap = 0;
	int rc = 0;
	for (;;) {
		if (len == cap) {
			if (len > CONF_MAX_FILE) {
				rc = conf_fail(err, "", "file larger than %u bytes", CONF_MAX_FILE);
				break;
			}
			/* One byte over the limit tells a file of exactly the
			 * limit from a longer one. */
			cap = cap ? cap * 2 : 4096;
			if (cap > CONF_MAX_FILE)
				cap = CONF_MAX_FILE + 1;
			char *grown = realloc(text, cap);
			if (!grown) {
				rc = -ENOMEM;
				conf_fail(err, "", "out of memory");
				break;
			}
			text = grown;
		}
		ssize_t got = read(fd, text + len, cap - len);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			rc = -errno;
			conf_fail(err, "", "%s", strerror(errno));
			break;
		}
		if (got == 0)
			break;
		len += (size_t)got;
	}
	close(fd);
	if (rc == 0)
		rc = conf_parse(text ? text : "", len, cfg, err);
	free(text);
	return rc;
}
