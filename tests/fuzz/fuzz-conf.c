/*
 * fuzz-conf.c - the configuration parser (daemon/conf/conf.c conf_parse).
 *
 * The input is the file's text (not NUL-terminated: conf_parse takes a
 * length). Checked: a refused file leaves the configuration exactly as it
 * was and names a line and a reason; an accepted one holds only values in
 * their documented ranges, marks exactly the keys it changed as set, and
 * conf_diff/conf_copy_key carry every change over.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "conf.h"
#include "fuzz-input.h"
#include "jsonmem.h"
#include "log.h"
#include "pool.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	jsonmem_install();
	log_init(0);
	return 0;
}

static void check_string(const char *s, size_t size, const char *what)
{
	FUZZ_ASSERT(memchr(s, '\0', size) != NULL, "%s is not terminated", what);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct conf defaults, cfg;
	struct conf_error err;
	conf_defaults(&defaults);
	cfg = defaults;
	int rc = conf_parse((const char *)data, size, &cfg, &err);
	check_string(err.message, sizeof(err.message), "err.message");
	check_string(err.key, sizeof(err.key), "err.key");
	if (rc < 0) {
		FUZZ_ASSERT(rc == -EINVAL, "rc %d", rc);
		FUZZ_ASSERT(memcmp(&cfg, &defaults, sizeof(cfg)) == 0,
		            "a refused file changed cfg");
		FUZZ_ASSERT(err.line >= 1, "no line in the error");
		FUZZ_ASSERT(err.message[0] != '\0', "no message in the error");
		return 0;
	}
	FUZZ_ASSERT(rc == 0, "rc %d", rc);
	FUZZ_ASSERT(err.line == 0, "line %u on success", err.line);
	check_string(cfg.backend, sizeof(cfg.backend), "backend");
	check_string(cfg.socket, sizeof(cfg.socket), "socket");
	check_string(cfg.socket_group, sizeof(cfg.socket_group), "socket_group");
	check_string(cfg.admin_group, sizeof(cfg.admin_group), "admin_group");
	FUZZ_ASSERT(!strcmp(cfg.backend, "auto") || !strcmp(cfg.backend, "sim") ||
	                !strcmp(cfg.backend, "cuda"),
	            "backend '%s'", cfg.backend);
	FUZZ_ASSERT(cfg.socket[0] != '\0', "empty socket path");
	FUZZ_ASSERT(cfg.socket_mode <= 0777, "mode %o", (unsigned)cfg.socket_mode);
	FUZZ_ASSERT(cfg.sim_devices >= 1 && cfg.sim_devices <= BACKEND_MAX_DEVICES,
	            "sim_devices %d", cfg.sim_devices);
	FUZZ_ASSERT(cfg.sim_memory >= POOL_GRANULE && cfg.sim_memory <= (1ull << 50), "sim_memory");
	FUZZ_ASSERT(cfg.limits.slab_size >= POOL_SLAB_ALIGN &&
	                cfg.limits.slab_size % POOL_SLAB_ALIGN == 0 &&
	                cfg.limits.slab_size <= (1ull << 40),
	            "slab_size %llu", (unsigned long long)cfg.limits.slab_size);
	FUZZ_ASSERT(cfg.log_level == LOG_LEVEL_ERROR || cfg.log_level == LOG_LEVEL_WARN ||
	                cfg.log_level == LOG_LEVEL_INFO || cfg.log_level == LOG_LEVEL_DEBUG,
	            "log_level %d", cfg.log_level);
	FUZZ_ASSERT(cfg.limits.max_clients >= 1 && cfg.limits.max_clients <= (1u << 20),
	            "max_clients");
	FUZZ_ASSERT(cfg.max_clients_per_uid >= 1 && cfg.max_clients_per_uid <= (1u << 20),
	            "max_clients_per_uid");
	FUZZ_ASSERT(cfg.limits.max_instances >= 1 && cfg.limits.max_instances <= 4096,
	            "max_instances");
	FUZZ_ASSERT(cfg.limits.max_allocations >= 1 && cfg.limits.max_allocations <= (1u << 24),
	            "max_allocations");
	FUZZ_ASSERT(cfg.limits.hello_timeout_ms >= 1 && cfg.limits.hello_timeout_ms <= 3600000,
	            "hello_timeout_ms");
	FUZZ_ASSERT(cfg.limits.write_high_water >= 4096 &&
	                cfg.limits.write_high_water <= (1ull << 32),
	            "write_high_water");
	FUZZ_ASSERT((cfg.set >> CONF_KEY_COUNT) == 0, "set has bits past the keys");

	/* A key that differs from its default was set; copying the changed
	 * keys over the defaults gives the same configuration. */
	uint64_t changed = conf_diff(&defaults, &cfg);
	uint64_t rules = 1ull << CONF_RULES;
	/* The uid/group rules are one pseudo-key of conf_diff's, past the
	 * keys: no flag overrides them, so `set` does not track them. */
	FUZZ_ASSERT((changed & ~rules & ~cfg.set) == 0, "changed %llx, set %llx",
	            (unsigned long long)changed, (unsigned long long)cfg.set);
	FUZZ_ASSERT(!(changed & rules) == (cfg.nrules == 0), "rules changed %d, %u rules",
	            !!(changed & rules), cfg.nrules);
	struct conf copy = defaults;
	for (int k = 0; k < CONF_KEY_COUNT; k++) {
		if (changed & (1ull << k))
			conf_copy_key(&copy, &cfg, k);
	}
	if (changed & rules) {
		memcpy(copy.rules, cfg.rules, sizeof(cfg.rules));
		copy.nrules = cfg.nrules;
	}
	FUZZ_ASSERT(conf_diff(&copy, &cfg) == 0, "conf_copy_key lost a change");

	/* Parsing is a function of the text. */
	struct conf again = defaults;
	FUZZ_ASSERT(conf_parse((const char *)data, size, &again, &err) == 0, "second parse failed");
	FUZZ_ASSERT(conf_diff(&again, &cfg) == 0 && again.set == cfg.set, "second parse differs");
	return 0;
}
