/*
 * lease_recall.c - the answer to a `recall` event (lease.h): the wholly
 * free leases of the instance go back until the bytes asked did.
 *
 * Whichever thread reads the event answers it, the client's lock held: an
 * application thread inside any call (in the middle of its own exchange,
 * whose reply the daemon may be holding until this answer), gpb_dispatch
 * or the service thread. So nothing here reads from the socket: the
 * returns go with "reply": false (conn_hot.c), and the bookkeeping lets go
 * of each lease before it is sent, as a free that does not wait does
 * (memory.c), rather than after a reply as lease_return_doomed does.
 */
#include "lease.h"
#include "lease_internal.h"
#include "client.h"

#include <stdlib.h>

/* Allocator lock held: takes @l off the doomed list, where the pool's
 * destroy callback has just put it. Whether it was there. */
static bool doomed_take(struct lease_state *ls, struct lease *l)
{
	for (struct lease **pp = &ls->doomed; *pp; pp = &(*pp)->next)
		if (*pp == l) {
			*pp = l->next;
			return true;
		}
	return false;
}

/* Lets go of returned lease @l here: its mapping and its slab hold. */
static void recall_let_go(struct gpb_client *c, struct lease *l)
{
	lease_map_put(l);
	track_finish_work(&c->track, TRACK_ALLOC, l->id);
	track_release_early(&c->track, TRACK_ALLOC, l->id);
	track_release(&c->track, TRACK_ALLOC, l->id);
}

uint64_t lease_recall(struct gpb_client *c, uint64_t instance, uint64_t bytes)
{
	struct lease_state *ls = &c->lease;
	struct lease *back = NULL, *l, *next;
	struct lease_inst *in;
	uint64_t returned = 0, in_use = 0;

	lease_lock(ls);
	/* Frees whose fences passed would keep a lease in the pool. */
	if (!ls->lost)
		lease_deferred_poll(ls);
	/* The instance's leases of every stream it allocates on. */
	for (in = ls->lost ? NULL : ls->insts; in && returned < bytes; in = in->next) {
		if (in->instance != instance)
			continue;
		/* The cache's blocks would keep a lease in the pool. */
		lease_inst_flush(in);
		for (l = in->leases; l && returned < bytes; l = next) {
			next = l->next; /* unpinning takes l off the list */
			if (l->live || l->carves || !lease_may_go(l))
				continue;
			lease_let_go(in, l);
			/* Returned here, not with the other doomed leases: those
			 * go back with a reply waited for, which cannot be read
			 * in the middle of another exchange. */
			if (!doomed_take(ls, l))
				continue;
			l->next = back;
			back = l;
			returned += l->size;
		}
	}
	in_use = ls->lost ? 0 : lease_instance_in_use(ls, instance);
	lease_unlock(ls);
	/* Inside another exchange the reply still to come may put an
	 * allocation in the slab of a lease returned now (the daemon sent it
	 * before it read the return): the slab must still be mapped then, so
	 * the lease is let go of locally only once that reply is applied
	 * (lease_recall_settle). The daemon keeps the slab for this
	 * connection meanwhile (keep_slabs); without keep_slabs it would let
	 * go of it at the return, so then nothing is returned here (the
	 * recall is answered with what went back: nothing). */
	bool defer = c->conn.in_exchange;
	if (defer && !slab_keep_max()) {
		lease_lock(ls);
		for (l = back; l; l = next) {
			next = l->next;
			l->next = ls->doomed; /* returned with the next doomed ones */
			ls->doomed = l;
		}
		lease_unlock(ls);
		return 0;
	}
	for (l = back; l; l = next) {
		next = l->next;
		if (!defer)
			recall_let_go(c, l);
		client_conn_send_lease_return(&c->conn, l->id, in_use);
		ls->leases_returned++;
		ls->recall_returns++;
		if (defer) {
			l->next = ls->recalled;
			ls->recalled = l;
		} else {
			free(l);
		}
	}
	/* As lease_return_doomed: a slab let go of is released before the
	 * next lease could land in it. */
	if (back && !defer)
		client_send_released(c);
	return returned;
}

/* Lets go of the recalled leases in @slab (any when UINT64_MAX). */
static void recall_settle(struct gpb_client *c, uint64_t slab)
{
	struct lease **pp = &c->lease.recalled;
	bool any = false;

	while (*pp) {
		struct lease *l = *pp;
		if (slab != UINT64_MAX && l->slab != slab) {
			pp = &l->next;
			continue;
		}
		*pp = l->next;
		recall_let_go(c, l);
		free(l);
		any = true;
	}
	if (any && slab == UINT64_MAX)
		client_send_released(c);
}

void lease_recall_settle(struct gpb_client *c)
{
	recall_settle(c, UINT64_MAX);
}

void lease_recall_settle_slab(struct gpb_client *c, uint64_t slab)
{
	/* The reclaim's answer is the release: nothing more to send. */
	recall_settle(c, slab);
}
