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

uint64_t lease_recall(struct gpb_client *c, uint64_t instance, uint64_t bytes)
{
	struct lease_state *ls = &c->lease;
	struct lease *back = NULL, *l, *next;
	struct lease_inst *in;
	uint64_t returned = 0, in_use = 0;

	pthread_mutex_lock(&ls->lock);
	for (in = ls->lost ? NULL : ls->insts; in && in->instance != instance; in = in->next)
		;
	if (in) {
		/* The cache's blocks would keep a lease in the pool. */
		lease_inst_flush(in);
		for (l = in->leases; l && returned < bytes; l = next) {
			next = l->next; /* unpinning takes l off the list */
			if (!l->ps || l->live || l->carves)
				continue;
			lease_unquarantine(in, l);
			pool_slab_unpin(in->pool, l->ps);
			/* Returned here, not with the other doomed leases: those
			 * go back with a reply waited for, which cannot be read
			 * in the middle of another exchange. */
			if (!doomed_take(ls, l))
				continue;
			l->next = back;
			back = l;
			returned += l->size;
		}
		in_use = in->in_use;
	}
	pthread_mutex_unlock(&ls->lock);
	for (l = back; l; l = next) {
		next = l->next;
		lease_map_put(l);
		track_finish_work(&c->track, TRACK_ALLOC, l->id);
		track_release_early(&c->track, TRACK_ALLOC, l->id);
		track_release(&c->track, TRACK_ALLOC, l->id);
		client_conn_send_lease_return(&c->conn, l->id, in_use);
		ls->leases_returned++;
		ls->recall_returns++;
		free(l);
	}
	/* As lease_return_doomed: a slab let go of is released before the
	 * next lease could land in it. */
	if (back)
		client_send_released(c);
	return returned;
}
