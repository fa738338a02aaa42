/*
 * slab.h - the process-wide cache of slab mappings.
 *
 * Several connections of one process (same uid) can be given the same slab:
 * the daemon sends each of them the slab's handle. Mapping it once per
 * process keeps the address space small and makes a pointer obtained through
 * one connection equal to the one another connection gets for the same bytes.
 *
 * Mappings are keyed by the 64 handle bytes and reference counted: each
 * connection that holds the slab owns one reference, taken with
 * slab_cache_get() when the daemon hands it the slab and dropped with
 * slab_cache_put() when the connection's last allocation or attachment in it
 * goes away. The last put unmaps. All of this is protected by one mutex.
 *
 * How a handle becomes an address is the backend's business: an opener per
 * backend ("sim": mmap of a memfd received over the socket; "cuda": the
 * descriptor received imported and mapped (transport "vmm", cuda_vmm.c),
 * cuIpcOpenMemHandle (transport "ipc"), or cuMemPoolImportPointer for
 * allocator "async", through the driver, loaded at run time, cuda.c).
 */
#ifndef GPB_CLIENT_SLAB_H
#define GPB_CLIENT_SLAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto.h"

/* Where a slab lives, for openers that need a device. */
struct slab_target {
	int device;              /* the daemon's device index */
	const char *device_uuid; /* the daemon's UUID for it ("GPU-..."), or NULL */
	/* cuda, allocator "async": the handle is a pool pointer's export data
	 * and the descriptor (when >= 0) the device's memory pool. */
	bool pool;
	/* With pool: the pool's id, by which the process tells the pools it
	 * imported apart (their descriptors all name one file). */
	uint64_t pool_id;
	/* cuda, transport "vmm": the descriptor is the slab's memory, to
	 * import and map; the handle only names the slab. */
	bool vmm;
};

struct slab_opener {
	const char *backend; /* hello's "backend" value */
	/* Whether the backend passes a descriptor with each handle. */
	int needs_fd;
	/* Whether the mapping must be closed before the daemon hears that this
	 * connection let go of the slab (its last free or detach there): the
	 * daemon may give a slab back to the driver as soon as no connection
	 * holds it, and CUDA leaves freeing memory an importer still has open
	 * undefined. A sim mapping outlives the daemon's descriptor anyway. */
	int close_first;
	/* Maps @size bytes of the slab. Does not take ownership of @fd.
	 * Returns 0 with *base (and *priv, the opener's own state) set, or a
	 * GPB_E_* code with the message set. */
	int (*open)(const uint8_t *handle, int fd, const struct slab_target *where, uint64_t size,
	            void **base, void **priv);
	/* Unmaps what open() mapped. */
	void (*close)(void *base, uint64_t size, void *priv);
	/* Frees what open() made with no driver call: a forked child's
	 * inherited mapping (NULL: close() is safe in a child, as sim's
	 * munmap is). */
	void (*forget)(void *priv);
	/* Copies @n bytes between host memory and this mapping, queued on
	 * @stream where the backend has streams. 0 or a GPB_E_* code. */
	int (*copy)(void *priv, void *dst, const void *src, size_t n, bool to_device, void *stream);
	/* Host memory (gpb_alloc_host): page-locks [@p, @p + @size) for the
	 * backend's devices and, with @mapped, maps it for them and sets
	 * *device_ptr. NULL where there is nothing to do (sim: the "device" is
	 * host memory already). 0 or a GPB_E_* code. */
	int (*host_register)(void *p, size_t size, bool mapped, void **device_ptr, void **priv);
	/* Undoes host_register() before the memory is unmapped. */
	void (*host_unregister)(void *p, void *priv);

	/* cuda: the mapping's context and the work queued in it (cuda.c,
	 * cuda_ctx.c). NULL in an opener without contexts or queues (sim):
	 * its mappings never die and nothing waits. */
	/* Whether the mapping is still there: false once the context it was
	 * made in was reset or destroyed, which took the mapping with it. */
	bool (*alive)(void *priv);
	/* Waits for the work this process queued in the mapping's context
	 * (a mapping or host registration): before its memory is let go. */
	void (*finish)(void *priv);
	/* finish() of every mapping of the process. */
	void (*finish_all)(void);
	/* gpb_free_async: a fence behind the work queued on @stream so far, in
	 * the mapping's context. 0 with *fence set (NULL: nothing can still be
	 * queued there), 1 with *fence set when it is a capture's (cuda_ctx.h:
	 * it passes when the graph is gone, out of order with the others), or
	 * a GPB_E_* code. */
	int (*fence)(void *priv, void *stream, void **fence);
	/* Whether the work before the fence has finished (or never will). */
	bool (*fence_done)(void *fence);
	/* Waits until it has; a capture's fence is not waited for. */
	void (*fence_wait)(void *fence);
	void (*fence_free)(void *fence);
	/* In a forked child, a fence of its parent's: its memory freed, with
	 * no driver call (the event and context are the parent's). */
	void (*fence_forget)(void *fence);
	/* Whether @stream is capturing (a graph), or is the legacy stream
	 * (NULL) while a stream of the mapping's context captures: then a free
	 * on it takes a fence rather than serving the block again at once.
	 * @priv may be NULL for a stream other than the legacy one. NULL
	 * where there are no streams. */
	bool (*capturing)(void *priv, void *stream);
	/* What fences of @priv's mapping are recorded in (cuda: its
	 * context): frees of mappings of one domain share a fence. NULL: the
	 * mapping itself. */
	const void *(*fence_domain)(void *priv);
};

struct slab_map {
	uint8_t handle[PROTO_HANDLE_SIZE];
	const struct slab_opener *opener;
	void *base;
	void *priv;
	uint64_t size;
	unsigned long refs;
	/* Its context died (opener->alive): the mapping is gone. Never
	 * handed out again, kept (for a clear error about its pointers) until
	 * the last reference goes; slab_cache_renew() maps the slab anew. */
	bool dead;
	/* Inherited through fork: the parent's mapping, off the child's cache
	 * (slab.c). The last put frees it with no driver call. */
	bool forked;
	/* Where it was opened, to open it again (device_uuid points at uuid). */
	struct slab_target where;
	char uuid[PROTO_MAX_NAME + 1];
	struct slab_map *prev, *next;
};

/* Installs the cache's fork handlers (once per process): a forked child
 * starts with an empty cache. Called when a client is made, before any
 * slab is mapped. */
void slab_fork_init(void);

/* The opener for a backend name, or NULL when this library cannot map its
 * slabs (then allocation is GPB_E_NOT_SUPPORTED). */
const struct slab_opener *slab_opener_find(const char *backend);

/*
 * Returns a reference to the mapping of the slab with @handle, mapping it if
 * no connection of this process holds it yet. Always closes @fd (when >= 0):
 * once mapped, the descriptor is not needed. A cached slab whose size differs
 * from @size is GPB_E_PROTOCOL. Returns 0 or a GPB_E_* code (message set).
 */
int slab_cache_get(const struct slab_opener *opener, const uint8_t *handle, int fd,
                   const struct slab_target *where, uint64_t size, struct slab_map **out);
/* Drops a reference; the last one unmaps the slab. */
void slab_cache_put(struct slab_map *map);
/* One more reference to @map, which the caller holds one of already. */
void slab_cache_ref(struct slab_map *map);

/* Whether @map's context died under it (then it is marked dead for good). */
bool slab_cache_dead(struct slab_map *map);
/*
 * For a dead @map: a reference to a live mapping of the same slab, opened
 * in the process's context of the device now (the dead one is left to the
 * caller). GPB_E_CONTEXT_RESET when it cannot be opened again without what
 * the daemon sent with it (a pool slab's pool, if that went too).
 */
int slab_cache_renew(struct slab_map *map, struct slab_map **out);
/* opener->finish() of @map, where the opener has one. */
void slab_cache_finish(struct slab_map *map);

/*
 * gpb_copy_to_device / gpb_copy_from_device: copies between host memory and
 * the mapping that holds the whole device-side range (dst when @to_device,
 * else src). GPB_E_INVALID when no mapping of this process holds it,
 * GPB_E_CONTEXT_RESET when the one that held it died with its context.
 */
int slab_cache_copy(void *dst, const void *src, size_t n, bool to_device, void *stream);

/*
 * Slabs kept mapped with nothing in them (the daemon's keep_slabs): at most
 * GPUBROKER_KEEP_SLABS per process (default SLAB_KEEP_DEFAULT; 0 turns
 * keeping off), so that an idle process does not sit on device memory it
 * may never use again. slab_keep_get() takes one of those places (false
 * when they are all taken), slab_keep_put() gives it back.
 */
#define SLAB_KEEP_DEFAULT 4
unsigned slab_keep_max(void);
bool slab_keep_get(void);
void slab_keep_put(void);

/* Process-wide counts: slabs opened, closed, and open now. */
void slab_cache_counts(uint64_t *opens, uint64_t *closes, uint64_t *open_now);

/* The cuda opener (cuda.c), only in builds that found cuda.h. */
extern const struct slab_opener slab_cuda_opener;

#endif
