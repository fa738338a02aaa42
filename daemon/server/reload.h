/*
 * reload.h - applying a re-read configuration to a running daemon.
 *
 * The server re-reads the files (SIGHUP, the `reload` request); this module
 * decides what of the new configuration takes effect now and hands the
 * policy keys to the broker, so that running clients hear of cap changes.
 */
#ifndef GPB_RELOAD_H
#define GPB_RELOAD_H

#include <cJSON.h>

#include "broker.h"
#include "conf.h"

/* Gives the broker the uid/group rules of cfg, group names resolved now
 * (a group that does not exist is logged and its rules ignored). */
void reload_rules_apply(struct broker *b, const struct conf *cfg);

/*
 * Moves every key of next that differs from running and can change live
 * into running and into the broker; keys that need a restart keep their
 * running value. With result non-NULL, adds to it the arrays "applied" and
 * "needs_restart" (key names). Logs each change.
 */
void reload_apply(struct conf *running, const struct conf *next, struct broker *b, cJSON *result);

#endif
