/*
 * broker_host.c - host memory for the alloc types "pinned" and "mapped".
 *
 * Each allocation is a sealed memfd of its own (zero-filled by the kernel,
 * so nothing of another user can be in it), handed to the client with
 * SCM_RIGHTS; the client maps it and, with the cuda backend, registers it
 * with cuMemHostRegister (page-locked; "mapped" also gets a device
 * pointer). The daemon never maps it, and keeps no descriptor of it: the
 * memfd is made when the client is to be given it and handed over with the
 * reply (broker_host_take_fd), which closes it once sent, so the daemon's
 * descriptors do not grow with host allocations (docs/design.md,
 * "Descriptors"). Its pages stay alive while the client maps them,
 * whatever the daemon does, so freeing here needs no ordering with the
 * client. allocate_queue makes them too, for queued arrays of type pinned
 * or mapped: unclaimed, like its device arrays, and without a memfd until
 * the client claims it. The bytes are counted against
 * max_host_memory, every client together, and against each connection's
 * max_allocations; they are not device memory and the VRAM policy does not
 * see them.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "broker.h"
#include "broker_internal.h"
#include "log.h"
#include "memfile.h"

/* Fills *why (when asked for) with the limit that answered rc. */
static int host_refused(const struct broker *b, int rc, enum broker_limit limit, uint64_t size,
                        struct broker_refusal *why)
{
	if (why) {
		const uint64_t max = b->limits.max_host_memory;
		*why = (struct broker_refusal){
		    .rc = rc,
		    .limit = limit,
		    .device = -1,
		    .requested = size,
		    .free = max > b->host_used ? max - b->host_used : 0,
		    .value = limit == BROKER_LIMIT_ALLOCATIONS ? b->limits.max_allocations : 0,
		};
	}
	return rc;
}

/* A host allocation of s (the instance checks are the caller's). */
static int host_make(struct broker *b, struct session *s, uint64_t size, bool mapped,
                     struct broker_host **out, struct broker_refusal *why)
{
	uint64_t page = memfile_page();
	if (size == 0 || size > UINT64_MAX - (page - 1))
		return host_refused(b, -EINVAL, BROKER_LIMIT_SIZE, size, why);
	uint64_t asked = size;
	size = (size + page - 1) & ~(page - 1);
	if (s->alloc_count + s->attached.count + s->host_count >= b->limits.max_allocations)
		return host_refused(b, -EMFILE, BROKER_LIMIT_ALLOCATIONS, asked, why);
	if (size > b->limits.max_host_memory || b->host_used > b->limits.max_host_memory - size)
		return host_refused(b, -ENOMEM, BROKER_LIMIT_HOST, asked, why);
	struct broker_host *h = calloc(1, sizeof(*h));
	if (!h || idmap_reserve(&b->hosts, 1) < 0) {
		free(h);
		return -EAGAIN;
	}
	int rc = broker_new_id(b, &h->id);
	if (rc < 0) {
		free(h);
		return rc;
	}
	h->fd = -1;
	h->owner = s;
	h->size = size;
	h->mapped = mapped;
	idmap_put(&b->hosts, h->id, h); /* reserved above: cannot fail */
	list_insert_tail(&s->hosts, &h->link);
	s->host_count++;
	b->host_used += size;
	*out = h;
	return 0;
}

/* The memfd of h, made now for its client (h->fd): 0, or -EIO with the
 * backend's last error naming what the host ran out of. */
static int host_file(struct broker *b, struct broker_host *h)
{
	int fd = memfile_create("gpubroker-host", h->size);
	if (fd < 0) {
		log_warn("session %llu: host memory of %llu bytes: memfd: %s",
		         (unsigned long long)h->owner->id, (unsigned long long)h->size,
		         strerror(-fd));
		/* What the host ran out of (descriptors, memory) reaches the
		 * client as a backend error naming it, as for a slab. */
		snprintf(b->backend->last_error, sizeof(b->backend->last_error), "%s",
		         strerrorname_np(-fd));
		return -EIO;
	}
	h->fd = fd;
	return 0;
}

static void host_release(struct broker *b, struct session *s, struct broker_host *h);

int broker_host_alloc(struct broker *b, struct session *s, uint64_t instance, uint64_t size,
                      bool mapped, struct broker_host **out, struct broker_refusal *why)
{
	if (b->stopping)
		return host_refused(b, -ESHUTDOWN, BROKER_LIMIT_NONE, size, why);
	if (!broker_instance_find(s, instance))
		return host_refused(b, -ENOENT, BROKER_LIMIT_NONE, size, why);
	int rc = host_make(b, s, size, mapped, out, why);
	if (rc == 0 && (rc = host_file(b, *out)) < 0) {
		host_release(b, s, *out);
		host_refused(b, rc, BROKER_LIMIT_NONE, size, why);
	}
	return rc;
}

int broker_host_alloc_queued(struct broker *b, struct broker_instance *inst, uint64_t size,
                             bool mapped, const char *label, uint64_t *id,
                             struct broker_refusal *why)
{
	struct broker_host *h;
	if (b->stopping)
		return host_refused(b, -ESHUTDOWN, BROKER_LIMIT_NONE, size, why);
	char *copy = strdup(label);
	if (!copy)
		return host_refused(b, -EAGAIN, BROKER_LIMIT_NONE, size, why);
	int rc = host_make(b, inst->owner, size, mapped, &h, why);
	if (rc < 0) {
		free(copy);
		return rc;
	}
	h->label = copy;
	h->instance = inst->id;
	h->unclaimed = true;
	*id = h->id;
	return 0;
}

int broker_host_claim(struct broker *b, struct session *s, uint64_t id, struct broker_host **out)
{
	struct broker_host *h = idmap_get(&b->hosts, id);
	if (!h || h->owner != s)
		return -ENOENT;
	if (!h->unclaimed)
		return -EEXIST;
	int rc = h->fd < 0 ? host_file(b, h) : 0;
	if (rc < 0)
		return rc;
	h->unclaimed = false;
	*out = h;
	return 0;
}

void broker_host_unclaim(struct broker_host *h)
{
	h->unclaimed = true;
}

int broker_host_take_fd(struct broker_host *h)
{
	int fd = h->fd;
	h->fd = -1;
	return fd;
}

static void host_release(struct broker *b, struct session *s, struct broker_host *h)
{
	idmap_remove(&b->hosts, h->id);
	list_remove(&h->link);
	s->host_count--;
	b->host_used -= h->size;
	if (h->fd >= 0)
		close(h->fd);
	free(h->label);
	free(h);
}

int broker_host_free(struct broker *b, struct session *s, uint64_t id)
{
	struct broker_host *h = idmap_get(&b->hosts, id);
	/* Another session's id is unknown here, as one that never existed. */
	if (!h || h->owner != s)
		return -ENOENT;
	host_release(b, s, h);
	return 0;
}

uint64_t broker_hosts_release(struct broker *b, struct session *s)
{
	struct list *pos, *tmp;
	uint64_t n = 0;
	list_for_each_safe(pos, tmp, &s->hosts) {
		host_release(b, s, list_entry(pos, struct broker_host, link));
		n++;
	}
	return n;
}
