/*
 * broker_recall.c - asking clients for their idle leases back (issue 28).
 *
 * With leases, memory a process holds but does not use is charged to it
 * and free to nobody else: caps, proportions, partitions, chunking and
 * waits all assume that what is free can be had. A recall (the event)
 * asks an instance's client to return its wholly free leases; it answers
 * with lease_return and recall_done, from its service thread if need be,
 * so a process asleep or inside a long kernel answers too.
 *
 * One recall per instance is out at a time (and none for a recall timeout
 * after one timed out): a second reason while one is out waits for its
 * answer (the client returns every wholly free lease it
 * can up to the bytes asked; asking again before it answered would only
 * repeat the question). A recall out longer than the recall timeout ends
 * as timed out: its holder keeps what it did not give, charged as before,
 * and whoever waited for it is answered as if it had not been sent.
 *
 * Kept slabs (keep_slabs) asked back with reclaim are recalls of the same
 * kind: a request short of room waits for their release as for returns.
 *
 * Requests do not wait here: the callers hold them (broker_held_add,
 * broker_wait.c) while broker_recall_room() says recalls are out for them.
 */
#include <errno.h>
#include <string.h>

#include "broker.h"
#include "broker_internal.h"

/* How long an instance that answered a recall with less than it was asked
 * is not asked again (it had nothing more wholly free then). */
#define BROKER_RECALL_RETRY_MS 20

/* Sends inst's client a recall of bytes (at most its leases) unless one
 * is out already; true when one is out for inst now. */
static bool recall_send(struct broker *b, struct broker_instance *inst, uint64_t bytes,
                        const char *reason)
{
	if (inst->recall_epoch)
		return true;
	if (!inst->leased || !bytes)
		return false;
	/* A client that let its last recall time out (stopped, stuck) is not
	 * asked again for a recall timeout: every request would otherwise
	 * wait the whole timeout for it (a lease refused, then the same bytes
	 * as an allocation of their own). */
	uint64_t now = broker_now_ms();
	if (now < inst->recall_quiet_until || now < inst->recall_retry_at)
		return false;
	if (bytes > inst->leased)
		bytes = inst->leased;
	inst->recall_epoch = ++b->recall_epoch;
	inst->recall_bytes = bytes;
	inst->recall_deadline = now + b->limits.recall_timeout_ms;
	inst->recalls_sent++;
	b->stats.recalls_sent++;
	b->recalls_pending++;
	broker_timer_want(b, inst->recall_deadline);
	struct broker_event ev = {.type = BROKER_EVENT_RECALL, .s = inst->owner};
	ev.recall.instance = inst->id;
	ev.recall.bytes = bytes;
	ev.recall.epoch = inst->recall_epoch;
	ev.recall.reason = reason;
	broker_emit(b, &ev);
	return true;
}

/* Ends inst's recall out: answered with returned bytes, or timed out. */
static void recall_end(struct broker *b, struct broker_instance *inst, bool answered,
                       uint64_t returned)
{
	uint64_t asked = inst->recall_bytes;
	inst->recall_epoch = 0;
	inst->recall_bytes = 0;
	b->recalls_pending--;
	if (answered) {
		inst->recalls_answered++;
		b->stats.recalls_answered++;
		/* Less than asked: nothing else of it was wholly free. Asking
		 * again at once would only hear the same (a held request runs
		 * again at every free); a little later it may have freed, and
		 * the requests held for it wait until then (the timer runs
		 * them again). */
		if (returned < asked) {
			inst->recall_retry_at = broker_now_ms() + BROKER_RECALL_RETRY_MS;
			broker_timer_want(b, inst->recall_retry_at);
		}
	} else {
		inst->recalls_timed_out++;
		b->stats.recalls_timed_out++;
		inst->recall_quiet_until = broker_now_ms() + b->limits.recall_timeout_ms;
	}
}

/* Slabs s was asked back (reclaim) on device (< 0: any) that its client
 * has not released yet: recalls of kept slabs, answered by release. */
static unsigned reclaims_out(const struct session *s, int device)
{
	unsigned n = 0;
	for (const struct broker_parting *p = s->parting; p; p = p->next) {
		const struct backend_slab *bs = pool_slab_backend(p->slab);
		n += p->reclaim && !p->block && (device < 0 || bs->device == device);
	}
	return n;
}

unsigned broker_recall_room(struct broker *b, const struct broker_partition *part, int device,
                            uint64_t bytes, const struct broker_instance *except,
                            const char *reason, bool send)
{
	uint64_t now = broker_now_ms();
	unsigned out = 0;
	struct list *pos, *ipos;
	/* A partition counts slabs, not bytes: the slabs that libraries keep
	 * emptied outside partitions (their leases returned) are asked back
	 * too. (Short of memory, the pool's ENOMEM has asked already.) */
	if (send && !part && strcmp(reason, PROTO_V_REASON_PARTITION) == 0)
		for (int d = 0; d < b->device_count; d++)
			if (device < 0 || d == device)
				broker_reclaim_device(b, d, true, reason);
	list_for_each(pos, &b->sessions) {
		struct session *s = list_entry(pos, struct session, link);
		if (s->part != part)
			continue;
		/* Kept slabs asked back (the pool's ENOMEM sent the reclaims)
		 * are recalls too: their release makes room as a return does. */
		out += reclaims_out(s, device);
		list_for_each(ipos, &s->instances) {
			struct broker_instance *inst =
			    list_entry(ipos, struct broker_instance, link);
			if (inst == except || (device >= 0 && inst->device != device))
				continue;
			/* Its library judges which leases are wholly free; in_use
			 * is only what it last said. One to be asked again soon
			 * counts as out: its next answer may make the room. */
			if (send ? recall_send(b, inst, bytes, reason) : inst->recall_epoch != 0)
				out++;
			else if (inst->leased && now < inst->recall_retry_at)
				out++;
		}
	}
	return out;
}

unsigned broker_recall_group(struct broker *b, const struct broker_instance *inst, bool send)
{
	const struct policy *p = broker_policy_of(b, inst->owner);
	unsigned out = 0;
	const struct list *pos;
	list_for_each(pos, &p->instances) {
		const struct policy_instance *pi =
		    list_entry(pos, const struct policy_instance, link);
		struct broker_instance *m = list_entry(pi, struct broker_instance, pol);
		if (!policy_in_group(pi, inst->pol.space, inst->pol.group))
			continue;
		if (send ? recall_send(b, m, m->leased, PROTO_V_REASON_CHUNKING)
		         : m->recall_epoch != 0)
			out++;
	}
	return out;
}

void broker_recall_figures(const struct broker *b, int device, uint64_t *recallable,
                           uint64_t *in_use)
{
	const struct list *pos, *ipos;
	*recallable = *in_use = 0;
	list_for_each(pos, &b->sessions) {
		const struct session *s = list_entry(pos, const struct session, link);
		if (s->part)
			continue;
		list_for_each(ipos, &s->instances) {
			const struct broker_instance *inst =
			    list_entry(ipos, const struct broker_instance, link);
			if (inst->device != device)
				continue;
			uint64_t used = inst->in_use < inst->leased ? inst->in_use : inst->leased;
			*in_use += used;
			*recallable += inst->leased - used;
		}
	}
}

/* s's instance whose recall epoch is out, or NULL. */
static struct broker_instance *recall_find(struct session *s, uint64_t epoch)
{
	struct list *pos;
	list_for_each(pos, &s->instances) {
		struct broker_instance *inst = list_entry(pos, struct broker_instance, link);
		if (inst->recall_epoch == epoch)
			return inst;
	}
	return NULL;
}

int broker_recall_answer(struct broker *b, struct session *s, uint64_t epoch, uint64_t bytes)
{
	struct broker_instance *inst = epoch ? recall_find(s, epoch) : NULL;
	if (!inst)
		return -ENOENT;
	if (bytes > inst->recall_bytes)
		return -ERANGE;
	recall_end(b, inst, true, bytes);
	return 0;
}

int broker_trim(struct broker *b, uint64_t session, uint64_t *recalls, uint64_t *bytes)
{
	struct list *pos, *ipos;
	bool found = session == 0;
	*recalls = *bytes = 0;
	list_for_each(pos, &b->sessions) {
		struct session *s = list_entry(pos, struct session, link);
		if (session && s->id != session)
			continue;
		found = true;
		list_for_each(ipos, &s->instances) {
			struct broker_instance *inst =
			    list_entry(ipos, struct broker_instance, link);
			if (inst->recall_epoch || !inst->leased ||
			    !recall_send(b, inst, inst->leased, PROTO_V_REASON_OPERATOR))
				continue;
			(*recalls)++;
			*bytes += inst->recall_bytes;
		}
	}
	return found ? 0 : -ENOENT;
}

uint64_t broker_recalls_pending(const struct broker *b)
{
	return b->recalls_pending;
}

uint64_t broker_recalls_expire(struct broker *b, uint64_t now)
{
	uint64_t next = UINT64_MAX;
	/* now 0 only reads the earliest deadline; a retry time is to come
	 * only against the clock. */
	uint64_t clock = now ? now : broker_now_ms();
	struct list *pos, *ipos;
	list_for_each(pos, &b->sessions) {
		struct session *s = list_entry(pos, struct session, link);
		list_for_each(ipos, &s->instances) {
			struct broker_instance *inst =
			    list_entry(ipos, struct broker_instance, link);
			/* When it may be asked again: the timer runs the held
			 * requests then. */
			if (inst->recall_retry_at > clock && inst->recall_retry_at < next)
				next = inst->recall_retry_at;
			if (!inst->recall_epoch)
				continue;
			if (inst->recall_deadline <= now)
				recall_end(b, inst, false, 0);
			else if (inst->recall_deadline < next)
				next = inst->recall_deadline;
		}
	}
	return next;
}

void broker_recall_cap(struct broker *b, struct broker_instance *inst)
{
	/* A cap of 0 is no cap (passive mode). */
	if (inst->pol.cap && inst->used > inst->pol.cap)
		recall_send(b, inst, inst->used - inst->pol.cap, PROTO_V_REASON_CAP);
}
