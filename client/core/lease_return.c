/*
 * lease_return.c - leases going back (lease.h): the doomed ones returned
 * to the daemon, the idle scan of the service thread, and the wholly free
 * leases let go at gpb_release_kept, unregister and a refused lease.
 */
#include "lease.h"
#include "lease_internal.h"
#include "client.h"
#include "error.h"
#include "pool.h"

#include <inttypes.h>
#include <stdlib.h>

/* ---- returns (client lock held, allocator lock not) ------------------------ */

/* Returns one lease the pool let go of: unmapped first where the backend
 * needs it (cuda), then lease_return, then the track forgets it. */
static void lease_send_return(struct gpb_client *c, struct lease *l, uint64_t in_use)
{
	cJSON *params = cJSON_CreateObject();
	struct proto_reply rep;
	bool closed;
	int rc;

	/* Its own reference first: the track's last one closes the mapping
	 * before the daemon hears (cuda). */
	lease_map_put(l);
	track_finish_work(&c->track, TRACK_ALLOC, l->id);
	closed = track_release_early(&c->track, TRACK_ALLOC, l->id);
	if (!params || proto_add_id64(params, PROTO_F_LEASE, l->id) < 0 ||
	    proto_add_u64(params, PROTO_F_IN_USE, in_use) < 0) {
		cJSON_Delete(params);
		params = NULL;
	}
	rc = params ? client_conn_call(&c->conn, PROTO_M_LEASE_RETURN, params, &rep, NULL)
	            : error_set(GPB_E_NOMEM, "out of memory");
	if (rc == 0) {
		proto_reply_finish(&rep);
		track_release(&c->track, TRACK_ALLOC, l->id);
	} else if (closed && !c->conn.dead) {
		client_conn_fail(&c->conn, rc, "lease_return of %016" PRIx64 " failed: %s", l->id,
		                 error_message());
	}
	free(l);
}

void lease_return_doomed(struct gpb_client *c)
{
	struct lease_state *ls = &c->lease;
	struct lease *l;
	uint64_t in_use = 0;

	for (;;) {
		lease_lock(ls);
		/* The first that may go now: a lease's return waits for its
		 * context (cuCtxSynchronize), which would break a capture in
		 * progress there; such a lease waits on the list, looked at
		 * again in LEASE_DEFERRED_POLL_MS (the service thread). */
		struct lease **pp = &ls->doomed;
		while (*pp && !lease_may_go(*pp))
			pp = &(*pp)->next;
		l = *pp;
		if (l) {
			*pp = l->next;
			in_use = lease_instance_in_use(ls, l->inst->instance);
		} else if (ls->doomed) {
			ls->doomed_retry_at = lease_now_ms() + LEASE_DEFERRED_POLL_MS;
		}
		lease_unlock(ls);
		if (!l)
			break;
		lease_send_return(c, l, in_use);
		ls->leases_returned++;
	}
	/* A returned lease may have been the last hold on a slab the daemon
	 * keeps for this connection: the track let go of its mapping, and the
	 * daemon must hear so before the next lease, or it would grant one in
	 * that slab without handing it over again. Sent as the per-allocation
	 * path sends them after a free. */
	client_send_released(c);
}

/* ---- wholly free leases let go ------------------------------------------- */

uint64_t lease_idle_scan(struct lease_state *ls, uint64_t now_ms)
{
	uint64_t next = UINT64_MAX;

	lease_deferred_poll(ls);
	/* Frees still behind queued work: looked at again soon, so that
	 * their leases can fall idle without a call of the application's. */
	if (lease_deferred_any(ls))
		next = LEASE_DEFERRED_POLL_MS;
	for (struct lease_inst *in = ls->insts; in; in = in->next) {
		struct lease *l, *nl;

		lease_inst_flush(in); /* the cache's blocks would keep a lease in the pool */
		for (l = in->leases; l; l = nl) {
			nl = l->next; /* unpinning takes l off the list */
			if (l->live || l->carves)
				continue;
			if (now_ms - l->idle_since >= ls->idle_ms && !lease_may_go(l)) {
				if (LEASE_DEFERRED_POLL_MS < next) /* looked at again soon */
					next = LEASE_DEFERRED_POLL_MS;
			} else if (now_ms - l->idle_since >= ls->idle_ms) {
				lease_let_go(in, l);
				ls->idle_returns++;
			} else if (l->idle_since + ls->idle_ms - now_ms < next) {
				next = l->idle_since + ls->idle_ms - now_ms;
			}
		}
	}
	return next;
}

unsigned lease_inst_drop_free(struct lease_inst *in)
{
	struct lease *l, *next;
	unsigned n = 0;

	lease_inst_flush(in);
	for (l = in->leases; l; l = next) {
		next = l->next;
		if (l->live || l->carves || !lease_may_go(l))
			continue;
		lease_let_go(in, l);
		n++;
	}
	return n;
}

unsigned lease_release_free(struct gpb_client *c)
{
	struct lease_state *ls = &c->lease;
	unsigned n = 0;

	lease_lock(ls);
	lease_deferred_poll(ls);
	for (struct lease_inst *in = ls->insts; in; in = in->next)
		n += lease_inst_drop_free(in);
	lease_unlock(ls);
	lease_return_doomed(c);
	return n;
}

void lease_release_instance(struct gpb_client *c, uint64_t instance)
{
	struct lease_state *ls = &c->lease;
	struct lease_inst *in, **pp;
	bool any = false;

	lease_lock(ls);
	lease_deferred_poll(ls);
	for (in = ls->insts; in; in = in->next)
		if (in->instance == instance) {
			lease_inst_drop_free(in);
			any = true;
		}
	lease_unlock(ls);
	if (!any)
		return;
	/* Sent before the caller's unregister, on the same connection: the
	 * daemon has them back when it looks at the instance. */
	lease_return_doomed(c);
	lease_lock(ls);
	/* Those with nothing left (no live block, no lease): forgotten, so
	 * that an instance id the daemon gives again starts afresh. */
	for (pp = &ls->insts; (in = *pp);) {
		if (in->instance == instance && !in->leases && !in->in_use) {
			*pp = in->next;
			pool_destroy(in->pool);
			free(in->quarantine);
			free(in);
		} else {
			pp = &in->next;
		}
	}
	lease_unlock(ls);
}
