/*
 * broker_rules.c - the operator's per-user and per-group rules
 * (gpubroker.conf): which one applies to a session, from its uid and the
 * groups the server read at connect.
 */
#include "broker.h"
#include "broker_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void broker_set_rules(struct broker *b, const struct broker_rule *rules, unsigned n)
{
	b->nrules = n < BROKER_MAX_RULES ? n : BROKER_MAX_RULES;
	memcpy(b->rules, rules, b->nrules * sizeof(*rules));
}

int broker_session_set_groups(struct session *s, const gid_t *groups, unsigned n)
{
	gid_t *copy = NULL;
	if (n && !(copy = malloc(n * sizeof(*copy))))
		return -ENOMEM;
	if (n)
		memcpy(copy, groups, n * sizeof(*copy));
	free(s->groups);
	s->groups = copy;
	s->ngroups = n;
	return 0;
}

static bool broker_session_in_group(const struct session *s, gid_t gid)
{
	if (s->gid == gid)
		return true;
	for (unsigned i = 0; i < s->ngroups; i++) {
		if (s->groups[i] == gid)
			return true;
	}
	return false;
}

const struct broker_rule *broker_rule_for(const struct broker *b, const struct session *s)
{
	const struct broker_rule *group = NULL;
	for (unsigned i = 0; i < b->nrules; i++) {
		const struct broker_rule *r = &b->rules[i];
		if (!r->group && r->uid == s->uid)
			return r;
		if (r->group && !group && broker_session_in_group(s, r->gid))
			group = r;
	}
	return group;
}
