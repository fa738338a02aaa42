/*
 * reload.c - what a reload changes in a running daemon.
 */
#include "reload.h"

#include <string.h>

#include "log.h"
#include "peer.h"

void reload_rules_apply(struct broker *b, const struct conf *cfg)
{
	struct broker_rule rules[BROKER_MAX_RULES];
	const char *unknown = NULL;
	unsigned n = conf_rules_resolve(cfg, peer_group_gid, rules, &unknown);
	if (unknown)
		log_warn("rules for group %s: no such group; ignored", unknown);
	broker_set_rules(b, rules, n);
}

/* Appends a key name to a JSON array (list may be NULL). */
static void reload_list_key(cJSON *list, enum conf_key key)
{
	if (list)
		cJSON_AddItemToArray(list, cJSON_CreateString(conf_key_name(key)));
}

void reload_apply(struct conf *running, const struct conf *next, struct broker *b, cJSON *result)
{
	uint64_t changed = conf_diff(running, next);
	cJSON *applied = result ? cJSON_AddArrayToObject(result, PROTO_F_APPLIED) : NULL;
	cJSON *restart = result ? cJSON_AddArrayToObject(result, PROTO_F_NEEDS_RESTART) : NULL;
	for (int k = 0; k < CONF_KEY_COUNT; k++) {
		if (!(changed & (1ull << k)))
			continue;
		if (conf_key_needs_restart(k)) {
			reload_list_key(restart, k);
			log_warn("reload: %s changed; it takes effect after a restart",
			         conf_key_name(k));
			continue;
		}
		conf_copy_key(running, next, k);
		reload_list_key(applied, k);
		log_info("reload: %s changed", conf_key_name(k));
	}
	/* The slab size is fixed for the pools' lifetime. */
	broker_set_limits(b, &running->limits);
	/* Policy keys act through the broker so running clients hear of cap
	 * changes (cap_changed events). */
	if (changed & (1ull << CONF_RULES)) {
		memcpy(running->rules, next->rules, sizeof(next->rules));
		running->nrules = next->nrules;
		reload_rules_apply(b, running);
		reload_list_key(applied, CONF_RULES);
		log_info("reload: uid/group rules changed");
	}
	if (changed & (1ull << CONF_MODE))
		broker_set_mode(b, running->limits.mode);
	if (changed & (1ull << CONF_LIMIT)) {
		uint64_t bytes;
		double fraction;
		if (conf_limit_parse(running->limit, &bytes, &fraction) == 0)
			broker_set_limit(b, -1, bytes, fraction);
	}
	log_init(running->log_level);
}
