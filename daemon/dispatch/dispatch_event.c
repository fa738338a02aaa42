/*
 * dispatch_event.c - what goes to a client outside the reply to its current
 * request: the broker's typed events turned into event frames and deferred
 * replies, and the sender the server installs.
 */
#include <stdlib.h>

#include "dispatch_internal.h"
#include "log.h"

void dispatch_send(struct dispatch *d, struct session *s, char *frame, size_t len, int fd)
{
	if (d->send && frame)
		d->send(d->send_ctx, s, frame, len, fd);
	else
		free(frame);
}

void dispatch_send_event(struct dispatch *d, struct session *s, const char *name, cJSON *data)
{
	size_t len;
	char *frame = proto_encode_event(name, data, &len);
	if (!frame)
		dispatch_event_dropped(s, name);
	dispatch_send(d, s, frame, len, -1);
}

void dispatch_event_dropped(const struct session *s, const char *name)
{
	log_warn("session %llu: event %s dropped: out of memory", (unsigned long long)s->id, name);
}

static void dispatch_cap_changed(struct dispatch *d, const struct broker_event *ev)
{
	cJSON *data = cJSON_CreateObject();
	if (!data || proto_add_id64(data, PROTO_F_INSTANCE, ev->cap_changed.instance) ||
	    proto_add_u64(data, PROTO_F_CAP, ev->cap_changed.cap) ||
	    !cJSON_AddNumberToObject(data, PROTO_F_SHARE, ev->cap_changed.share) ||
	    !cJSON_AddStringToObject(data, PROTO_F_MODE, policy_mode_name(ev->cap_changed.mode))) {
		dispatch_event_dropped(ev->s, PROTO_EV_CAP_CHANGED);
		cJSON_Delete(data);
		return;
	}
	dispatch_send_event(d, ev->s, PROTO_EV_CAP_CHANGED, data);
}

static void dispatch_invalidate(struct dispatch *d, const struct broker_event *ev)
{
	cJSON *data = cJSON_CreateObject();
	if (!data || !cJSON_AddStringToObject(data, PROTO_F_REASON, ev->invalidate.reason) ||
	    proto_add_u64(data, PROTO_F_EPOCH, ev->invalidate.epoch)) {
		dispatch_event_dropped(ev->s, PROTO_EV_INVALIDATE);
		cJSON_Delete(data);
		return;
	}
	dispatch_send_event(d, ev->s, PROTO_EV_INVALIDATE, data);
}

static void dispatch_reclaim(struct dispatch *d, const struct broker_event *ev)
{
	cJSON *data = cJSON_CreateObject();
	if (!data || proto_add_id64(data, PROTO_F_SLAB, ev->reclaim.slab) ||
	    !cJSON_AddStringToObject(data, PROTO_F_REASON, ev->reclaim.reason)) {
		dispatch_event_dropped(ev->s, PROTO_EV_RECLAIM);
		cJSON_Delete(data);
		return;
	}
	dispatch_send_event(d, ev->s, PROTO_EV_RECLAIM, data);
}

static void dispatch_recall(struct dispatch *d, const struct broker_event *ev)
{
	cJSON *data = cJSON_CreateObject();
	if (!data || proto_add_id64(data, PROTO_F_INSTANCE, ev->recall.instance) ||
	    proto_add_u64(data, PROTO_F_BYTES, ev->recall.bytes) ||
	    !cJSON_AddStringToObject(data, PROTO_F_REASON, ev->recall.reason) ||
	    proto_add_u64(data, PROTO_F_EPOCH, ev->recall.epoch)) {
		dispatch_event_dropped(ev->s, PROTO_EV_RECALL);
		cJSON_Delete(data);
		return;
	}
	dispatch_send_event(d, ev->s, PROTO_EV_RECALL, data);
}

/* broker_event_fn */
static void dispatch_on_event(void *ctx, const struct broker_event *ev)
{
	struct dispatch *d = ctx;
	switch (ev->type) {
	case BROKER_EVENT_CAP_CHANGED:
		dispatch_cap_changed(d, ev);
		break;
	case BROKER_EVENT_INVALIDATE:
		dispatch_invalidate(d, ev);
		break;
	case BROKER_EVENT_WAIT_DONE:
		dispatch_wait_done(d, ev->wait_done.w, ev->wait_done.rc, ev->wait_done.grant,
		                   ev->wait_done.refusal);
		break;
	case BROKER_EVENT_RECLAIM:
		dispatch_reclaim(d, ev);
		break;
	case BROKER_EVENT_RECALL:
		dispatch_recall(d, ev);
		break;
	case BROKER_EVENT_HELD:
		/* The one event that changes the broker: the request runs
		 * again as if it had just come (broker_waits_run allows it). */
		dispatch_held_run(d, ev->held.w, ev->held.final);
		break;
	}
}

void dispatch_init(struct dispatch *d, struct broker *b)
{
	*d = (struct dispatch){.b = b};
	broker_set_events(b, dispatch_on_event, d);
}

void dispatch_finish(struct dispatch *d)
{
	if (d->b)
		broker_set_events(d->b, NULL, NULL);
	d->b = NULL;
}

void dispatch_set_sender(struct dispatch *d, dispatch_send_fn send, dispatch_close_fn close,
                         void *ctx)
{
	d->send = send;
	d->close = close;
	d->send_ctx = ctx;
}

void dispatch_set_reload(struct dispatch *d, dispatch_reload_fn fn, void *ctx)
{
	d->reload = fn;
	d->reload_ctx = ctx;
}
