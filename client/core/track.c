/*
 * track.c - a connection's allocations, attachments and held slabs.
 */
#include "track.h"
#include "codec.h"
#include "error.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void track_init(struct track *t, const struct slab_opener *opener)
{
	t->opener = opener;
	t->released = NULL;
	t->nreleased = t->released_cap = 0;
	idmap_init(&t->slabs);
	for (int k = 0; k < TRACK_KINDS; k++)
		idmap_init(&t->entries[k]);
}

void track_finish(struct track *t)
{
	struct track_entry *e;
	struct track_slab *s = NULL;
	size_t pos;

	for (int k = 0; k < TRACK_KINDS; k++) {
		pos = 0;
		while ((e = idmap_next(&t->entries[k], &pos, NULL)))
			free(e);
		idmap_finish(&t->entries[k]);
	}
	pos = 0;
	while ((s = idmap_next(&t->slabs, &pos, NULL))) {
		if (s->idle)
			slab_keep_put();
		if (s->map)
			slab_cache_put(s->map);
		if (s->dead)
			slab_cache_put(s->dead);
		free(s);
	}
	idmap_finish(&t->slabs);
	free(t->released);
	t->released = NULL;
	t->nreleased = t->released_cap = 0;
}

const uint64_t *track_take_released(struct track *t, size_t *n)
{
	*n = t->nreleased;
	t->nreleased = 0;
	return t->released;
}

int track_prepare(struct track *t, enum track_kind kind, struct track_prep *prep)
{
	prep->entry = malloc(sizeof(*prep->entry));
	prep->slab = malloc(sizeof(*prep->slab));
	if (!prep->entry || !prep->slab || idmap_reserve(&t->entries[kind], 1) < 0 ||
	    idmap_reserve(&t->slabs, 1) < 0) {
		track_prep_release(prep);
		return error_set(GPB_E_NOMEM, "out of memory");
	}
	return 0;
}

void track_prep_release(struct track_prep *prep)
{
	free(prep->entry);
	free(prep->slab);
	prep->entry = NULL;
	prep->slab = NULL;
}

struct track_entry *track_lookup(struct track *t, enum track_kind kind, uint64_t id)
{
	return idmap_get(&t->entries[kind], id);
}

/* Room for one more id in t->released: false when out of memory. */
static bool track_released_room(struct track *t)
{
	if (t->nreleased < t->released_cap)
		return true;
	size_t cap = t->released_cap ? 2 * t->released_cap : 8;
	uint64_t *more = realloc(t->released, cap * sizeof(*more));
	if (!more)
		return false;
	t->released = more;
	t->released_cap = cap;
	return true;
}

/* Unmaps a slab this connection no longer has anything in. */
static void track_slab_forget(struct track *t, struct track_slab *s)
{
	if (s->idle)
		slab_keep_put();
	idmap_remove(&t->slabs, s->id);
	/* NULL: closed already, by track_release_early(). */
	if (s->map)
		slab_cache_put(s->map);
	if (s->dead)
		slab_cache_put(s->dead);
	free(s);
}

/* Lets go of a slab this connection no longer has anything in, or keeps it
 * mapped: where the daemon keeps it too, while the process is within its
 * bound (or no `release` could be queued for it). */
static void track_slab_drop(struct track *t, struct track_slab *s)
{
	if (s->holds)
		return;
	if (s->keep && !s->idle) {
		if (slab_keep_get()) {
			s->idle = true;
			return;
		}
		if (!track_released_room(t))
			return; /* kept past the bound: better than a disagreement */
		t->released[t->nreleased++] = s->id;
	}
	if (s->keep && s->idle)
		return;
	track_slab_forget(t, s);
}

size_t track_release_idle(struct track *t)
{
	struct track_slab *s;
	size_t pos = 0, n = 0, k = 0;
	uint64_t *ids;

	while ((s = idmap_next(&t->slabs, &pos, NULL)))
		n += s->idle;
	if (!n)
		return 0;
	/* The map cannot lose entries while it is walked: ids first. */
	ids = malloc(n * sizeof(*ids));
	if (!ids)
		return 0;
	pos = 0;
	while ((s = idmap_next(&t->slabs, &pos, NULL))) {
		if (s->idle)
			ids[k++] = s->id;
	}
	n = 0;
	for (size_t i = 0; i < k; i++) {
		if (!track_released_room(t))
			break;
		t->released[t->nreleased++] = ids[i];
		track_slab_forget(t, idmap_get(&t->slabs, ids[i]));
		n++;
	}
	free(ids);
	return n;
}

int track_reclaim(struct track *t, uint64_t id)
{
	struct track_slab *s = idmap_get(&t->slabs, id);

	if (!s)
		return 0;
	if (s->holds)
		return error_set(GPB_E_PROTOCOL,
		                 "the daemon asked back slab %016" PRIx64 " while it holds memory",
		                 id);
	track_slab_forget(t, s);
	return 0;
}

/*
 * A held slab whose mapping died with its CUDA context is mapped anew for
 * what comes in it now (the daemon sends no handle for a slab the
 * connection holds); the dead mapping stays for the old pointers.
 */
static int track_slab_live(struct track_slab *s)
{
	struct slab_map *fresh;
	int rc;

	if (!slab_cache_dead(s->map))
		return 0;
	rc = slab_cache_renew(s->map, &fresh);
	if (rc < 0)
		return rc;
	if (s->dead)
		slab_cache_put(s->dead);
	s->dead = s->map;
	s->map = fresh;
	return 0;
}

int track_alloc_live(struct track *t, uint64_t id, struct slab_map **map)
{
	struct track_entry *e = idmap_get(&t->entries[TRACK_ALLOC], id);
	int rc;

	if (!e || !e->slab || !e->slab->map)
		return error_set(GPB_E_NOT_FOUND, "no mapped allocation %016" PRIx64, id);
	rc = track_slab_live(e->slab);
	if (rc == 0)
		*map = e->slab->map;
	return rc;
}

/* The fields of an alloc/attach result, checked against each other. */
struct track_result {
	uint64_t id, slab, slab_size, offset, size;
	int64_t device;
	const char *handle;
	const char *device_uuid; /* with the handle, when the daemon sends it */
	bool pool;               /* the descriptor is a memory pool (cuda async) */
	uint64_t pool_id;        /* with pool: the pool's id */
	bool vmm;                /* the descriptor is the slab's memory (cuda vmm) */
	bool keep;               /* the daemon keeps the slab past its last hold */
	uint64_t label_hash;     /* a claim's label (0: none) and instance */
	uint64_t instance;
};

static int track_parse(const cJSON *result, struct track_result *r)
{
	int rc;

	r->handle = NULL;
	if (proto_get_id64(result, PROTO_F_ID, &r->id) < 0)
		return error_set(GPB_E_PROTOCOL, "reply without a valid 'id'");
	if (proto_get_int(result, PROTO_F_DEVICE, 0, INT_MAX, &r->device) < 0 ||
	    proto_get_id64(result, PROTO_F_SLAB, &r->slab) < 0 ||
	    proto_get_u64(result, PROTO_F_SLAB_SIZE, 1, UINT64_MAX, &r->slab_size) < 0 ||
	    proto_get_u64(result, PROTO_F_OFFSET, 0, UINT64_MAX, &r->offset) < 0 ||
	    proto_get_u64(result, PROTO_F_SIZE, 1, UINT64_MAX, &r->size) < 0)
		return error_set(GPB_E_PROTOCOL,
		                 "reply lacks a valid 'device', 'slab', 'slab_size', 'offset' "
		                 "or 'size'");
	if (r->offset > r->slab_size || r->size > r->slab_size - r->offset)
		return error_set(GPB_E_PROTOCOL, "allocation does not fit its slab");
	rc = proto_get_string(result, PROTO_F_HANDLE, 2 * PROTO_HANDLE_SIZE, &r->handle);
	if (rc < 0 && rc != -ENOENT)
		return error_set(GPB_E_PROTOCOL, "reply with an invalid 'handle'");
	r->device_uuid = NULL;
	rc = proto_get_string(result, PROTO_F_DEVICE_UUID, PROTO_MAX_NAME, &r->device_uuid);
	if (rc < 0 && rc != -ENOENT)
		return error_set(GPB_E_PROTOCOL, "reply with an invalid 'device_uuid'");
	r->pool = false;
	rc = proto_get_bool(result, PROTO_F_POOL, &r->pool);
	if (rc < 0 && rc != -ENOENT)
		return error_set(GPB_E_PROTOCOL, "reply with an invalid 'pool'");
	r->pool_id = 0;
	if (r->pool && r->handle && proto_get_id64(result, PROTO_F_POOL_ID, &r->pool_id) < 0)
		return error_set(GPB_E_PROTOCOL, "a pool slab without a valid 'pool_id'");
	r->keep = false;
	rc = proto_get_bool(result, PROTO_F_KEEP, &r->keep);
	if (rc < 0 && rc != -ENOENT)
		return error_set(GPB_E_PROTOCOL, "reply with an invalid 'keep'");
	r->vmm = false;
	rc = proto_get_bool(result, PROTO_F_VMM, &r->vmm);
	if ((rc < 0 && rc != -ENOENT) || (r->vmm && r->pool))
		return error_set(GPB_E_PROTOCOL, "reply with an invalid 'vmm'");
	const char *label;
	r->label_hash = r->instance = 0;
	rc = proto_get_string(result, PROTO_F_LABEL, PROTO_MAX_NAME, &label);
	if (rc == 0)
		r->label_hash = track_label_hash(label);
	if ((rc < 0 && rc != -ENOENT) ||
	    (rc == 0 && proto_get_id64(result, PROTO_F_INSTANCE, &r->instance) < 0))
		return error_set(GPB_E_PROTOCOL, "reply with an invalid 'label' or 'instance'");
	return 0;
}

/*
 * Finds the slab a result refers to, or takes it when the reply hands it
 * over (then with no holds yet: track_slab_drop() undoes it). Consumes @fd.
 */
static int track_slab_get(struct track *t, struct track_prep *prep, const struct track_result *r,
                          int fd, struct track_slab **out)
{
	struct track_slab *s = idmap_get(&t->slabs, r->slab);
	uint8_t handle[PROTO_HANDLE_SIZE];
	struct slab_map *map;
	int rc;

	if (!r->handle) {
		if (fd >= 0) {
			close(fd);
			return error_set(GPB_E_PROTOCOL, "a descriptor came without a slab handle");
		}
		if (!s || !s->map)
			return error_set(GPB_E_PROTOCOL,
			                 "reply puts the allocation in slab %016" PRIx64
			                 " without handing that slab over",
			                 r->slab);
		if (s->map->size != r->slab_size)
			return error_set(GPB_E_PROTOCOL, "slab %016" PRIx64 " changed size",
			                 r->slab);
		*out = s;
		return track_slab_live(s);
	}
	if (proto_hex_decode(r->handle, handle, sizeof(handle)) < 0) {
		if (fd >= 0)
			close(fd);
		return error_set(GPB_E_PROTOCOL, "reply with an invalid 'handle'");
	}
	if (s && !s->map) {
		if (fd >= 0)
			close(fd);
		return error_set(GPB_E_PROTOCOL,
		                 "slab %016" PRIx64 " handed over while it is being let go",
		                 r->slab);
	}
	if (s) {
		/* Handed again while held: harmless if it is the same slab. */
		if (fd >= 0)
			close(fd);
		if (memcmp(s->map->handle, handle, sizeof(handle)) != 0 ||
		    s->map->size != r->slab_size)
			return error_set(
			    GPB_E_PROTOCOL,
			    "slab %016" PRIx64 " handed over again with another handle", r->slab);
		*out = s;
		return track_slab_live(s);
	}
	struct slab_target where = {.device = (int)r->device,
	                            .device_uuid = r->device_uuid,
	                            .pool = r->pool,
	                            .pool_id = r->pool_id,
	                            .vmm = r->vmm};
	rc = slab_cache_get(t->opener, handle, fd, &where, r->slab_size, &map);
	if (rc < 0)
		return rc;
	s = prep->slab;
	prep->slab = NULL;
	s->id = r->slab;
	s->holds = 0;
	s->mark = 0;
	s->map = map;
	s->dead = NULL;
	s->keep = r->keep;
	s->idle = false;
	/* Reserved by track_prepare(): cannot fail. */
	idmap_put(&t->slabs, s->id, s);
	*out = s;
	return 0;
}

/* track_adopt() of a result read (@r). */
static int track_adopt_result(struct track *t, enum track_kind kind, struct track_prep *prep,
                              const struct track_result *rr, int fd, struct gpb_allocation *out)
{
	const struct track_result r = *rr;
	struct track_entry *e;
	struct track_slab *s = NULL;
	int rc;

	rc = track_slab_get(t, prep, &r, fd, &s);
	if (rc < 0)
		return rc;

	e = idmap_get(&t->entries[kind], r.id);
	if (e) {
		/* Attaching twice is two holds on one mapping; an allocation
		 * id given out twice is a daemon bug. */
		if (kind == TRACK_ALLOC || e->slab != s || e->offset != r.offset ||
		    e->size != r.size) {
			track_slab_drop(t, s);
			return error_set(GPB_E_PROTOCOL, "allocation %016" PRIx64 " reported twice",
			                 r.id);
		}
		e->refs++;
	} else {
		e = prep->entry;
		prep->entry = NULL;
		e->id = r.id;
		e->slab = s;
		e->ptr = (char *)s->map->base + r.offset;
		e->size = r.size;
		e->offset = r.offset;
		e->device = (int)r.device;
		e->freeing = false;
		e->refs = 1;
		e->label_hash = r.label_hash;
		e->instance = r.instance;
		idmap_put(&t->entries[kind], e->id, e);
	}
	if (s->holds++ == 0 && s->idle) {
		s->idle = false;
		slab_keep_put();
	}

	if (out) {
		out->id = e->id;
		out->ptr = e->ptr;
		out->size = e->size;
		out->device = e->device;
		out->slab = s->id;
		out->offset = e->offset;
	}
	return 0;
}

int track_adopt(struct track *t, enum track_kind kind, struct track_prep *prep, const cJSON *result,
                int fd, struct gpb_allocation *out, uint64_t *id)
{
	struct track_result r;
	int rc;

	*id = 0;
	rc = track_parse(result, &r);
	if (rc < 0) {
		if (fd >= 0)
			close(fd);
		return rc;
	}
	*id = r.id;
	return track_adopt_result(t, kind, prep, &r, fd, out);
}

int track_adopt_grant(struct track *t, struct track_prep *prep, const struct proto_grant *g,
                      struct gpb_allocation *out, uint64_t *id)
{
	struct track_result r = {
	    .id = g->id,
	    .slab = g->slab,
	    .slab_size = g->slab_size,
	    .offset = g->offset,
	    .size = g->size,
	    .device = g->device,
	};

	*id = g->id;
	if (r.offset > r.slab_size || r.size > r.slab_size - r.offset || r.size == 0)
		return error_set(GPB_E_PROTOCOL, "allocation does not fit its slab");
	return track_adopt_result(t, TRACK_ALLOC, prep, &r, -1, out);
}

bool track_release_early(struct track *t, enum track_kind kind, uint64_t id)
{
	struct track_entry *e = idmap_get(&t->entries[kind], id);

	/* A slab the daemon keeps outlives this release: nothing to close
	 * (past the process's bound it is closed before its `release`). */
	if (!e || !t->opener || !t->opener->close_first || !e->slab->map || e->slab->holds != 1 ||
	    e->slab->keep)
		return false;
	/* This release is the connection's last hold on the slab. */
	slab_cache_put(e->slab->map);
	e->slab->map = NULL;
	return true;
}

uint64_t track_label_hash(const char *label)
{
	uint64_t h = 14695981039346656037ull;

	for (const unsigned char *p = (const unsigned char *)label; *p; p++) {
		h ^= *p;
		h *= 1099511628211ull;
	}
	return h ? h : 1;
}

size_t track_release_label_early(struct track *t, const char *label, uint64_t instance,
                                 uint64_t *closed, size_t cap)
{
	uint64_t hash = track_label_hash(label);
	struct track_entry *e;
	struct track_slab *s;
	size_t pos, n = 0;

	if (!t->opener || !t->opener->close_first)
		return 0;
	/* Marks count each slab's holds the label covers (attachments are
	 * never freed by label); a slab goes early when they are all of them. */
	pos = 0;
	while ((e = idmap_next(&t->entries[TRACK_ALLOC], &pos, NULL))) {
		if (e->label_hash == hash && (!instance || e->instance == instance))
			e->slab->mark++;
	}
	pos = 0;
	while ((s = idmap_next(&t->slabs, &pos, NULL)))
		n += s->mark && s->map && s->mark == s->holds && !s->keep;
	pos = 0;
	while ((s = idmap_next(&t->slabs, &pos, NULL))) {
		if (n <= cap && s->mark && s->map && s->mark == s->holds && !s->keep) {
			*closed++ = s->id;
			slab_cache_put(s->map);
			s->map = NULL;
		}
		s->mark = 0;
	}
	return n;
}

bool track_holds_slab(struct track *t, uint64_t id)
{
	return idmap_get(&t->slabs, id) != NULL;
}

void track_finish_work(struct track *t, enum track_kind kind, uint64_t id)
{
	struct track_entry *e = idmap_get(&t->entries[kind], id);

	if (e && e->slab->map)
		slab_cache_finish(e->slab->map);
}

void track_finish_all(struct track *t)
{
	if (t->opener && t->opener->finish_all && t->slabs.count)
		t->opener->finish_all();
}

void track_release(struct track *t, enum track_kind kind, uint64_t id)
{
	struct track_entry *e = idmap_get(&t->entries[kind], id);
	struct track_slab *s = NULL;

	if (!e)
		return;
	s = e->slab;
	if (--e->refs == 0) {
		idmap_remove(&t->entries[kind], id);
		free(e);
	}
	s->holds--;
	track_slab_drop(t, s);
}
