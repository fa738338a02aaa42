/*
 * broker-policy-helpers.c - helpers shared by the unit tests of the VRAM
 * policy wired into the broker (test-broker-policy.c, test-broker-waits.c,
 * test-broker-queue.c): the fake sender and timer, and their set-up.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker-policy-helpers.h"

/* ---- what the broker pushes ------------------------------------------------ */

struct sent sent[MAX_SENT];
int sent_count;

static void fake_send(void *ctx, struct session *s, char *frame, size_t len, int fd)
{
	(void)ctx;
	assert_true(len >= 2 && frame[len - 1] == '\n');
	assert_true(sent_count < MAX_SENT);
	sent[sent_count].s = s;
	sent[sent_count].root = cJSON_ParseWithLength(frame, len - 1);
	sent[sent_count].fd = fd;
	assert_non_null(sent[sent_count].root);
	sent_count++;
	free(frame);
}

void sent_clear(void)
{
	for (int i = 0; i < sent_count; i++)
		cJSON_Delete(sent[i].root);
	sent_count = 0;
}

int sent_teardown(void **state)
{
	sent_clear();
	return teardown(state);
}

int sent_to(const struct session *s, const char *event)
{
	int n = 0;
	for (int i = 0; i < sent_count; i++) {
		const cJSON *ev = cJSON_GetObjectItemCaseSensitive(sent[i].root, "event");
		if (sent[i].s != s)
			continue;
		if (event ? (cJSON_IsString(ev) && strcmp(ev->valuestring, event) == 0) : !ev)
			n++;
	}
	return n;
}

const cJSON *sent_nth(const struct session *s, int n)
{
	for (int i = 0; i < sent_count; i++) {
		if (sent[i].s == s && n-- == 0)
			return sent[i].root;
	}
	fail_msg("fewer frames than expected were sent to session %llu", (unsigned long long)s->id);
	return NULL;
}

int64_t announced_cap(const struct session *s, uint64_t instance)
{
	int64_t cap = -1;
	for (int i = 0; i < sent_count; i++) {
		const cJSON *ev = cJSON_GetObjectItemCaseSensitive(sent[i].root, "event");
		const cJSON *data = cJSON_GetObjectItemCaseSensitive(sent[i].root, "data");
		uint64_t id, c;
		if (sent[i].s != s || !cJSON_IsString(ev) || strcmp(ev->valuestring, "cap_changed"))
			continue;
		assert_int_equal(proto_get_id64(data, "instance", &id), 0);
		assert_int_equal(proto_get_u64(data, "cap", 0, UINT64_MAX, &c), 0);
		if (id == instance)
			cap = (int64_t)c;
	}
	return cap;
}

/* ---- the timer ----------------------------------------------------------- */

uint64_t timer_delay = 7;
int timer_calls;

static void fake_timer(void *ctx, uint64_t delay_ms)
{
	(void)ctx;
	timer_delay = delay_ms;
	timer_calls++;
}

/* ---- set-up -------------------------------------------------------------- */

struct broker *policy_broker(uint64_t mem, enum policy_mode mode, unsigned max_allocs)
{
	return policy_broker_slab(mem, SLAB, mode, max_allocs);
}

struct broker *policy_broker_slab(uint64_t mem, uint64_t slab, enum policy_mode mode,
                                  unsigned max_allocs)
{
	struct broker *b = broker_new_slab(mem, slab, 0, max_allocs);
	dispatch_set_sender(broker_dispatch(b), fake_send, NULL, NULL);
	broker_set_timer(b, fake_timer, NULL);
	timer_calls = 0;
	timer_delay = 7;
	assert_int_equal(broker_set_mode(b, mode), 0);
	sent_clear();
	return b;
}

struct session *client(struct broker *b, uid_t uid, const char *name)
{
	struct session *s = open_session(b, uid, 4000 + (pid_t)uid);
	hello(b, s, name);
	return s;
}

struct broker_instance *reg_p(struct broker *b, struct session *s, int device, double proportion,
                              const char *group)
{
	struct broker_instance *inst = NULL;
	assert_int_equal(broker_register(b, s, "p", device, proportion, group, &inst), 0);
	check(b);
	return inst;
}

/* Sends a request that must be deferred (no reply now). */
void request_deferred(struct broker *b, struct session *s, const char *fmt, ...)
{
	char frame[1024];
	struct dispatch_reply dr = {.fd = -7};
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(frame, sizeof(frame), fmt, ap);
	va_end(ap);
	dispatch_frame(broker_dispatch(b), s, frame, strlen(frame), &dr);
	if (dr.frame) {
		print_error("reply: %s", dr.frame);
		free(dr.frame);
		fail_msg("expected a deferred reply");
	}
	assert_true(dr.deferred);
}
