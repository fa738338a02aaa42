/*
 * broker_wait.c - allocations that wait for memory or quota.
 *
 * An alloc with wait_ms that the policy or the pool refuses for lack of
 * room is queued here instead of failing. Everything that frees memory or
 * moves caps calls broker_waits_run(), which retries the queue in arrival
 * order; the one timer the server keeps for the broker fires at the
 * earliest deadline and fails what ran out. The replies are deferred ones:
 * each ending is a BROKER_EVENT_WAIT_DONE event, which dispatch encodes and
 * sends.
 *
 * Fairness: a wait short of device memory holds back every later wait on
 * that device (a large request is not starved by a stream of small ones);
 * a wait short of quota holds back only later waits of the same instance,
 * since nobody else's frees can raise its cap.
 *
 * Held requests share the queue, the timer and the passes: a request
 * refused for room while recalls are out for it (broker_recall.c) keeps
 * its frame here, and each pass has dispatch run it again
 * (BROKER_EVENT_HELD), a last time once no recall it waits for is out or
 * the recall timeout has passed. The timer's deadline is the earliest of
 * the waits' and the recalls'.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "broker.h"
#include "broker_internal.h"

void broker_set_timer(struct broker *b, broker_timer_fn fn, void *ctx)
{
	b->timer = fn;
	b->timer_ctx = ctx;
	b->timer_deadline = UINT64_MAX;
}

/* Arms the timer for the earliest deadline (or disarms it), only when that
 * deadline changed. */
static void broker_timer_update(struct broker *b)
{
	/* No deadline is at or before 0: this only reads the earliest. */
	uint64_t next = broker_recalls_expire(b, 0);
	struct list *pos;
	list_for_each(pos, &b->waits) {
		struct broker_wait *w = list_entry(pos, struct broker_wait, link);
		if (w->deadline < next)
			next = w->deadline;
	}
	if (next == b->timer_deadline)
		return;
	b->timer_deadline = next;
	if (!b->timer)
		return;
	uint64_t now = broker_now_ms();
	b->timer(b->timer_ctx, next == UINT64_MAX ? UINT64_MAX : next > now ? next - now : 0);
}

/* Takes a wait off the queue; rc is how it ended (0 served, -ETIMEDOUT, or
 * anything else: cancelled), for the metrics. */
static void broker_wait_unlink(struct broker *b, struct broker_wait *w, int rc)
{
	if (w->frame)
		; /* a held request: not an allocation that waited */
	else if (rc == 0)
		b->stats.waits_served++;
	else if (rc == -ETIMEDOUT)
		b->stats.waits_timed_out++;
	else
		b->stats.waits_cancelled++;
	list_remove(&w->link);
	w->s->wait_count--;
	b->wait_count--;
}

void broker_refusal_explain(const struct broker *b, const struct session *s, uint64_t instance,
                            uint64_t size, int rc, uint64_t waited_ms, struct broker_refusal *why)
{
	const struct broker_instance *inst = broker_instance_find((struct session *)s, instance);
	const struct broker_rule *rule;
	*why = (struct broker_refusal){.rc = rc,
	                               .device = inst ? inst->device : -1,
	                               .uid = s->uid,
	                               .instance = instance,
	                               .requested = size,
	                               .waited_ms = waited_ms};
	switch (rc) {
	case -EINVAL:
		why->limit = BROKER_LIMIT_SIZE;
		break;
	case -ENOMEM:
		/* What this client can have: not what the device has free, of
		 * which others' slabs and partitions may hold parts it cannot
		 * use; and in one piece, when that is less. */
		why->limit = BROKER_LIMIT_DEVICE;
		if (inst)
			broker_alloc_room(b, s, inst->device, &why->free, &why->largest);
		break;
	case -EDQUOT:
		/* What the cap is charged: the size rounded to the granule. */
		why->limit = BROKER_LIMIT_INSTANCE;
		why->requested = (size + POOL_GRANULE - 1) & ~(uint64_t)(POOL_GRANULE - 1);
		if (inst) {
			why->cap = inst->pol.cap;
			why->used = inst->pol.used;
		}
		break;
	case -EXFULL:
		why->limit = BROKER_LIMIT_USER;
		rule = broker_rule_for(b, s);
		why->cap = rule ? rule->cap : 0;
		why->used = inst ? pool_uid_used(b->dev[inst->device].pool, s->uid) : 0;
		break;
	case -ETIMEDOUT:
		why->limit = BROKER_LIMIT_TIMEOUT;
		break;
	case -EBUSY:
		why->limit = BROKER_LIMIT_INFLIGHT;
		why->value = b->limits.max_inflight;
		break;
	case -EMFILE:
		why->limit = BROKER_LIMIT_ALLOCATIONS;
		why->value = b->limits.max_allocations;
		break;
	case -ENFILE:
		why->limit = BROKER_LIMIT_FILES;
		why->value = broker_files_share();
		break;
	default:
		why->limit = BROKER_LIMIT_NONE;
		break;
	}
}

/* Answers a wait (rc 0 with the grant, or the refusal) and frees it. */
static void broker_wait_finish(struct broker *b, struct broker_wait *w, int rc,
                               const struct broker_grant *g)
{
	struct broker_event ev = {.type = BROKER_EVENT_WAIT_DONE, .s = w->s};
	struct broker_refusal why;
	broker_wait_unlink(b, w, rc);
	if (rc < 0)
		broker_refusal_explain(b, w->s, w->instance, w->size, rc,
		                       broker_now_ms() - w->started, &why);
	ev.wait_done.w = w;
	ev.wait_done.rc = rc;
	ev.wait_done.grant = g;
	ev.wait_done.refusal = rc < 0 ? &why : NULL;
	broker_emit(b, &ev);
	free(w);
}

/* Has dispatch run a held request again; final: answered whatever comes
 * of it. Takes it off the queue once answered. */
static void broker_held_run(struct broker *b, struct broker_wait *w, bool final)
{
	struct broker_event ev = {.type = BROKER_EVENT_HELD, .s = w->s};
	ev.held.w = w;
	ev.held.final = final;
	w->answered = false;
	broker_emit(b, &ev);
	if (!w->answered && !final)
		return;
	broker_wait_unlink(b, w, 0);
	free(w->frame);
	free(w);
}

/* Whether a held request is answered now whatever comes of it: its time
 * is up. (Before, its handler answers it as soon as no recall is out for
 * it: it asks again first, so that holders that gave back what they were
 * asked are asked again rather than the request refused.) */
static bool broker_held_final(const struct broker_wait *w, uint64_t now)
{
	return now >= w->deadline;
}

int broker_held_add(struct broker *b, struct session *s, const char *frame, size_t len)
{
	if (s->wait_count >= b->limits.max_inflight)
		return -EBUSY;
	struct broker_wait *w = calloc(1, sizeof(*w));
	char *copy = malloc(len ? len : 1);
	if (!w || !copy) {
		free(w);
		free(copy);
		return -ENOMEM;
	}
	memcpy(copy, frame, len);
	w->s = s;
	w->frame = copy;
	w->frame_len = len;
	w->started = broker_now_ms();
	w->deadline = w->started + b->limits.recall_timeout_ms;
	list_insert_tail(&b->waits, &w->link);
	s->wait_count++;
	b->wait_count++;
	broker_timer_update(b);
	return 0;
}

int broker_recall_done(struct broker *b, struct session *s, uint64_t epoch, uint64_t bytes)
{
	int rc = broker_recall_answer(b, s, epoch, bytes);
	if (rc == 0)
		/* The held requests that waited for it alone are answered. */
		broker_waits_run(b);
	return rc;
}

int broker_wait_add(struct broker *b, struct session *s, const char *req_id, uint64_t instance,
                    uint64_t size, uint64_t align, uint64_t wait_ms)
{
	if (b->stopping)
		return -ESHUTDOWN;
	/* A wait will become an allocation: it counts against the same limit,
	 * so a client cannot park an unbounded queue here. */
	if (s->alloc_count + s->attached.count + s->host_count + s->wait_count >=
	    b->limits.max_allocations)
		return -EMFILE;
	/* Requests a connection has in flight: those waiting for memory. */
	if (s->wait_count >= b->limits.max_inflight)
		return -EBUSY;
	struct broker_wait *w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->s = s;
	w->instance = instance;
	w->size = size;
	w->align = align;
	w->started = broker_now_ms();
	w->deadline = w->started + wait_ms < w->started ? UINT64_MAX - 1 : w->started + wait_ms;
	snprintf(w->id, sizeof(w->id), "%s", req_id);
	list_insert_tail(&b->waits, &w->link);
	s->wait_count++;
	b->wait_count++;
	b->stats.waits_started++;
	broker_timer_update(b);
	return 0;
}

/*
 * Whether a wait of inst is held back in this pass: a wait before it on
 * the same device was short of memory. A partition is a device of its own
 * (its size is guaranteed): its sessions' waits neither hold back nor are
 * held back by those outside it or in another partition.
 */
static bool wait_short(const struct broker *b, const struct broker_instance *inst,
                       const bool *short_device)
{
	const struct broker_partition *p = inst->owner->part;
	return p ? p->short_pass[inst->device] == b->wait_pass : short_device[inst->device];
}

static void wait_mark_short(struct broker *b, const struct broker_instance *inst,
                            bool *short_device)
{
	struct broker_partition *p = inst->owner->part;
	if (p)
		p->short_pass[inst->device] = b->wait_pass;
	else
		short_device[inst->device] = true;
}

void broker_waits_run(struct broker *b)
{
	/* Answering a wait sends a frame; should anything in that path free
	 * memory again, the pass is simply repeated rather than nested. */
	if (b->waits_running) {
		b->waits_again = true;
		return;
	}
	if (list_empty(&b->waits))
		return;
	b->waits_running = true;
	do {
		bool short_device[BACKEND_MAX_DEVICES] = {false};
		struct list *pos, *tmp;
		b->waits_again = false;
		b->wait_pass++;
		list_for_each_safe(pos, tmp, &b->waits) {
			struct broker_wait *w = list_entry(pos, struct broker_wait, link);
			if (w->frame) {
				broker_held_run(b, w, broker_held_final(w, broker_now_ms()));
				continue;
			}
			struct broker_instance *inst = broker_instance_find(w->s, w->instance);
			if (inst &&
			    (wait_short(b, inst, short_device) || inst->wait_pass == b->wait_pass))
				continue;
			struct broker_grant g;
			int rc = broker_alloc(b, w->s, w->instance, w->size, w->align, &g);
			if (rc == -ENOMEM) {
				wait_mark_short(b, inst, short_device);
				continue;
			}
			/* Short of the instance's cap or of its user's: later
			 * waits of that instance stay behind it. */
			if (rc == -EDQUOT || rc == -EXFULL) {
				inst->wait_pass = b->wait_pass;
				continue;
			}
			/* Served, or failed for a reason waiting cannot cure (the
			 * instance went away, the daemon is stopping...). */
			broker_wait_finish(b, w, rc, rc == 0 ? &g : NULL);
		}
	} while (b->waits_again);
	b->waits_running = false;
	broker_timer_update(b);
}

int broker_alloc_admit(struct broker *b, struct session *s, const char *req_id, uint64_t instance,
                       uint64_t size, uint64_t align, uint64_t wait_ms, struct broker_grant *out,
                       struct broker_refusal *why)
{
	int rc;
	struct broker_instance *inst = broker_instance_find(s, instance);
	/* More than the user's cap could never be served: no wait. */
	const struct broker_rule *rule = wait_ms > 0 ? broker_rule_for(b, s) : NULL;
	bool over_user_cap = rule && rule->cap && size > rule->cap;
	/* A request that may wait does not overtake those already waiting on
	 * its device: it joins the queue behind them. */
	if (wait_ms > 0 && inst && !over_user_cap && broker_waits_on(b, s, inst->device))
		rc = -ENOMEM;
	else
		rc = broker_alloc(b, s, instance, size, align, out);
	if (rc == 0)
		return 0;
	/* Idle leases of others come back while it waits (without wait_ms,
	 * dispatch holds it for them: broker_recall_room). */
	if (rc == -ENOMEM && wait_ms > 0 && inst)
		broker_recall_room(b, s->part, inst->device, size, inst, PROTO_V_REASON_MEMORY,
		                   true);
	if ((rc == -ENOMEM || rc == -EDQUOT || rc == -EXFULL) && wait_ms > 0 && inst) {
		/* A request larger than the device (or the partition), or
		 * than the user's cap, could never be served: say so now
		 * rather than after the wait. */
		uint64_t most =
		    s->part ? s->part->size[inst->device] : b->dev[inst->device].info.total;
		if (size <= most && !over_user_cap) {
			int wrc = broker_wait_add(b, s, req_id, instance, size, align, wait_ms);
			if (wrc == 0) {
				/* It may fit already, if only the queue held it. */
				broker_waits_run(b);
				return BROKER_WAITING;
			}
			rc = wrc == -ENOMEM ? -EAGAIN : wrc;
		}
	}
	broker_refusal_explain(b, s, instance, size, rc, 0, why);
	return rc;
}

bool broker_waits_on(const struct broker *b, const struct session *s, int device)
{
	const struct list *pos;
	list_for_each(pos, &b->waits) {
		const struct broker_wait *w = list_entry(pos, const struct broker_wait, link);
		const struct broker_instance *inst = broker_instance_find(w->s, w->instance);
		if (inst && inst->device == device && w->s->part == s->part)
			return true;
	}
	return false;
}

void broker_waits_expire(struct broker *b)
{
	/* The timer has fired: it is armed for nothing now. libuv may fire a
	 * millisecond before this clock says the deadline is due; the update
	 * below then re-arms it rather than leaving the wait stranded. */
	b->timer_deadline = UINT64_MAX;
	uint64_t now = broker_now_ms();
	broker_recalls_expire(b, now);
	struct list *pos, *tmp;
	list_for_each_safe(pos, tmp, &b->waits) {
		struct broker_wait *w = list_entry(pos, struct broker_wait, link);
		if (w->frame && w->deadline <= now)
			broker_held_run(b, w, true);
		else if (w->deadline <= now)
			broker_wait_finish(b, w, -ETIMEDOUT, NULL);
	}
	/* Recalls that timed out, or holders that may be asked again: the
	 * held requests run again (answered when nothing is left to wait for). */
	broker_waits_run(b);
	broker_timer_update(b);
}

void broker_waits_cancel(struct broker *b, int rc)
{
	struct list *pos, *tmp;
	list_for_each_safe(pos, tmp, &b->waits) {
		struct broker_wait *w = list_entry(pos, struct broker_wait, link);
		if (w->frame)
			broker_held_run(b, w, true); /* answered as it is now */
		else
			broker_wait_finish(b, w, rc, NULL);
	}
	broker_timer_update(b);
}

void broker_waits_drop(struct broker *b, struct session *s)
{
	struct list *pos, *tmp;
	if (!s->wait_count)
		return;
	list_for_each_safe(pos, tmp, &b->waits) {
		struct broker_wait *w = list_entry(pos, struct broker_wait, link);
		if (w->s != s)
			continue;
		broker_wait_unlink(b, w, -ECANCELED);
		free(w->frame);
		free(w);
	}
	broker_timer_update(b);
}

/* Tells the owner of every instance whose cap moved, then serves the waits
 * that fit now: the tail of everything that changes the policy or frees
 * memory. */
static void broker_policy_drain(struct broker *b, struct policy *p)
{
	struct policy_instance *pi;
	while ((pi = policy_take_changed(p))) {
		struct broker_instance *inst = list_entry(pi, struct broker_instance, pol);
		struct broker_event ev = {.type = BROKER_EVENT_CAP_CHANGED, .s = inst->owner};
		ev.cap_changed.instance = inst->id;
		ev.cap_changed.cap = pi->cap;
		ev.cap_changed.share = pi->share;
		ev.cap_changed.mode = p->cfg.mode;
		broker_emit(b, &ev);
		/* Shrunk below what it is charged: its idle leases come back. */
		broker_recall_cap(b, inst);
	}
}

void broker_policy_changed(struct broker *b)
{
	struct list *pos;
	broker_policy_drain(b, &b->policy);
	list_for_each(pos, &b->partitions)
		broker_policy_drain(b, &list_entry(pos, struct broker_partition, link)->policy);
	broker_waits_run(b);
}
