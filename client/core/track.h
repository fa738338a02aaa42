/*
 * track.h - what one connection holds: its allocations, its attachments and
 * the slabs they live in, mirroring the daemon's bookkeeping.
 *
 * The daemon and the library agree on when a connection "holds" a slab: from
 * the reply that hands it the slab's handle until its last allocation or
 * attachment there is freed or detached (PROTOCOL.md, alloc). The library
 * keeps one slab_map reference per held slab, so a slab is unmapped exactly
 * when both sides consider it let go, and the next reply putting this
 * connection there carries the handle again.
 *
 * Entries are found by id in O(1) (idmap): a connection may hold 100k+
 * allocations. Not thread-safe: the owning client's mutex protects it.
 */
#ifndef GPB_CLIENT_TRACK_H
#define GPB_CLIENT_TRACK_H

#include <stdbool.h>
#include <stdint.h>

#include "gpubroker.h"
#include "idmap.h"
#include "slab.h"

enum track_kind { TRACK_ALLOC, TRACK_ATTACH, TRACK_KINDS };

struct track_slab {
	uint64_t id;
	uint64_t holds;       /* this connection's allocations + attachments in it */
	struct slab_map *map; /* NULL once track_release_early() closed it */
	/* The mapping that died with its CUDA context, replaced by a new one
	 * (map) when something new came in the slab: kept until the slab is
	 * let go, so that the old pointers get a clear error. Else NULL. */
	struct slab_map *dead;
	uint64_t mark; /* scratch of track_release_label_early(), 0 at rest */
	/* The daemon keeps the slab for this connection past its last hold
	 * (the grant said "keep"): it stays mapped, "idle" while empty (one
	 * of the process's slab_keep_get() places), until the daemon asks for
	 * it (reclaim) or the process is past its bound (then released). */
	bool keep, idle;
};

struct track_entry {
	uint64_t id;
	struct track_slab *slab;
	void *ptr;
	uint64_t size;
	uint64_t offset;
	int device;
	bool freeing; /* gpb_free_async() queued it: no longer the caller's */
	/* Attachments: how many gpb_attach() calls the id has outstanding
	 * (each is one hold, released by one gpb_detach()). Allocations: 1. */
	unsigned long refs;
	/* Claimed arrays: a hash of their label (0: none) and their instance,
	 * what gpb_free_label() matches. A hash, not the label: 16 bytes per
	 * entry, and nothing to allocate once the daemon has committed. */
	uint64_t label_hash;
	uint64_t instance;
};

struct track {
	/* NULL when this library cannot map the backend's slabs. */
	const struct slab_opener *opener;
	/* Kept slabs this connection let go of, whose `release` is still to
	 * be sent (track_take_released), and their number. */
	uint64_t *released;
	size_t nreleased, released_cap;
	struct idmap slabs;
	struct idmap entries[TRACK_KINDS];
};

/*
 * Memory an adoption may need, taken before the request is sent: once the
 * daemon has committed an allocation the bookkeeping must not fail for lack
 * of host memory (only mapping the slab can still fail).
 */
struct track_prep {
	struct track_entry *entry;
	struct track_slab *slab;
};

void track_init(struct track *t, const struct slab_opener *opener);
/* Forgets everything and drops every slab reference (unmapping). */
void track_finish(struct track *t);

/* 0 or GPB_E_NOMEM. Release with track_prep_release() (always). */
int track_prepare(struct track *t, enum track_kind kind, struct track_prep *prep);
void track_prep_release(struct track_prep *prep);

/*
 * Records the result of a successful alloc or attach (@result, with @fd
 * the descriptor the reply carried or -1; always consumed) and fills @out.
 * *id receives the allocation id as soon as it is read (0 before).
 * Returns 0; GPB_E_PROTOCOL when the reply contradicts the protocol or what
 * this connection holds (the caller must drop the connection); or
 * GPB_E_SYSTEM / GPB_E_NOMEM when the slab could not be mapped (the daemon
 * committed: the caller undoes it with free/detach). On failure nothing was
 * recorded.
 */
int track_adopt(struct track *t, enum track_kind kind, struct track_prep *prep, const cJSON *result,
                int fd, struct gpb_allocation *out, uint64_t *id);

/* track_adopt() of an alloc's grant read by the typed codec (no handle:
 * the connection holds its slab). */
struct proto_grant;
int track_adopt_grant(struct track *t, struct track_prep *prep, const struct proto_grant *g,
                      struct gpb_allocation *out, uint64_t *id);

/* The mapping allocation @id lives in, mapped anew first when its CUDA
 * context died (as for a grant in a held slab): 0 with *map (the track's
 * reference), GPB_E_NOT_FOUND, or slab_cache_renew()'s error. */
int track_alloc_live(struct track *t, uint64_t id, struct slab_map **map);

/* The entry for @id, or NULL. */
struct track_entry *track_lookup(struct track *t, enum track_kind kind, uint64_t id);

/* Forgets one hold on @id after the daemon accepted its free/detach; the
 * slab's last hold unmaps it. Unknown ids are ignored. */
void track_release(struct track *t, enum track_kind kind, uint64_t id);

/*
 * Before the free/detach of @id is sent: when it will be the connection's
 * last hold on its slab and the backend's mappings must be closed first
 * (slab_opener.close_first: cuda), drops the connection's reference to the
 * mapping now, which closes it unless another connection of this process
 * holds the slab (then the daemon keeps the slab alive for that one).
 * Returns true when it did; the slab is then half let go (no mapping, the
 * hold still counted): the caller must complete it with track_release(), or
 * drop the connection if the daemon refuses the release.
 */
bool track_release_early(struct track *t, enum track_kind kind, uint64_t id);

/* The slabs let go of since the last call ((*n of them; the array is the
 * track's, valid until its next change): the caller sends a `release` for
 * each, after their mappings were closed. */
const uint64_t *track_take_released(struct track *t, size_t *n);
/*
 * The daemon asks for slab @id back (reclaim event): unmaps it. 0, also
 * when this connection does not hold it (answered all the same), or
 * GPB_E_PROTOCOL when it still has memory in it.
 */
int track_reclaim(struct track *t, uint64_t id);

/* Lets go of every slab kept idle (their mappings closed; their ids for
 * track_take_released()). Returns how many. */
size_t track_release_idle(struct track *t);

/* FNV-1a of a label, never 0: what track entries keep of their label. */
uint64_t track_label_hash(const char *label);
/*
 * track_release_early() for a free_label of @label (@instance 0: any): closes
 * each slab whose every hold is an allocation with that label. Fills @closed
 * (capacity @cap) with their ids and returns how many; returns more than
 * @cap when there were more (the caller asks again with enough room, before
 * anything was closed: nothing is closed then).
 */
size_t track_release_label_early(struct track *t, const char *label, uint64_t instance,
                                 uint64_t *closed, size_t cap);
/* True while this connection still holds slab @id. */
bool track_holds_slab(struct track *t, uint64_t id);

/*
 * Ordered frees: waits for the work this process queued in the context of
 * @id's mapping (the opener's finish), before its free or detach lets the
 * daemon reuse the range. track_finish_all() waits for every context's,
 * where this connection holds anything (free_label, invalidate, disconnect).
 */
void track_finish_work(struct track *t, enum track_kind kind, uint64_t id);
void track_finish_all(struct track *t);

#endif
