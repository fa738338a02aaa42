/*
 * slab.c - process-wide, reference-counted cache of slab mappings.
 */
#include "slab.h"
#include "config.h"
#include "error.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/*
 * A list is enough: it is searched only when the daemon hands a connection a
 * slab (once per slab and connection), never on the alloc/free fast path,
 * and slabs are large (64 MiB by default), so a process holds few of them.
 */
static pthread_mutex_t slab_lock = PTHREAD_MUTEX_INITIALIZER;
static struct slab_map *slab_list;
static pthread_once_t slab_once = PTHREAD_ONCE_INIT;
/* gpb_mapping_stats(): what the handle cache saves is visible here. */
static uint64_t slab_opens, slab_closes, slab_open_now;
/* Slabs kept mapped empty, and how many may be (-1: not read yet). */
static unsigned slab_kept;
static long slab_kept_max = -1;

/*
 * A child forked while another thread held slab_lock would inherit it locked
 * forever. Holding it across fork() makes the child's copy consistent.
 *
 * A forked child starts with an empty cache (issue 25): a CUDA mapping is
 * not valid in it (the driver's state is not inherited), and the daemon
 * hands the child's own connections the parent's slabs again, which must
 * be mapped by the child, not found in the parent's cache. The parent's
 * entries are marked forked and taken off the list; the parent's clients
 * still point at them, and the last put frees them without a driver call
 * (a sim mapping, host memory, is unmapped).
 */
static void slab_atfork_prepare(void)
{
	pthread_mutex_lock(&slab_lock);
}

static void slab_atfork_parent(void)
{
	pthread_mutex_unlock(&slab_lock);
}

static void slab_atfork_child(void)
{
	for (struct slab_map *m = slab_list, *next; m; m = next) {
		next = m->next;
		m->forked = true;
		m->prev = m->next = NULL;
	}
	slab_list = NULL;
	slab_opens = slab_closes = slab_open_now = 0;
	slab_kept = 0;
	pthread_mutex_unlock(&slab_lock);
}

static void slab_once_init(void)
{
	pthread_atfork(slab_atfork_prepare, slab_atfork_parent, slab_atfork_child);
}

void slab_fork_init(void)
{
	pthread_once(&slab_once, slab_once_init);
}

static int sim_open(const uint8_t *handle, int fd, const struct slab_target *where, uint64_t size,
                    void **base, void **priv)
{
	struct stat st;
	void *p;

	(void)handle;
	(void)where;
	*priv = NULL;
	if (fstat(fd, &st) < 0)
		return error_set_errno(GPB_E_SYSTEM, errno, "slab descriptor");
	/* Touching a page past the end of a shorter file would SIGBUS the
	 * application long after this call: refuse such a slab now. */
	if (!S_ISREG(st.st_mode) || st.st_size < 0 || (uint64_t)st.st_size < size)
		return error_set(GPB_E_PROTOCOL,
		                 "slab descriptor is not a memory file of %llu bytes",
		                 (unsigned long long)size);
	if (size > SIZE_MAX)
		return error_set(GPB_E_SYSTEM, "slab of %llu bytes does not fit the address space",
		                 (unsigned long long)size);
	p = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return error_set_errno(GPB_E_SYSTEM, errno, "mmap of a %llu-byte slab",
		                       (unsigned long long)size);
	*base = p;
	return 0;
}

static void sim_close(void *base, uint64_t size, void *priv)
{
	(void)priv;
	munmap(base, (size_t)size);
}

/* Simulated device memory is host memory: a copy is a memcpy, done by the
 * time the call returns (there are no streams to queue it on). */
static int sim_copy(void *priv, void *dst, const void *src, size_t n, bool to_device, void *stream)
{
	(void)priv;
	(void)to_device;
	(void)stream;
	memmove(dst, src, n);
	return 0;
}

static const struct slab_opener sim_opener = {
    .backend = PROTO_V_BACKEND_SIM,
    .needs_fd = 1,
    .close_first = 0,
    .open = sim_open,
    .close = sim_close,
    .copy = sim_copy,
};

static const struct slab_opener *const slab_openers[] = {
    &sim_opener,
#if GPB_HAVE_CUDA_H
    &slab_cuda_opener,
#endif
};

const struct slab_opener *slab_opener_find(const char *backend)
{
	for (size_t i = 0; i < sizeof(slab_openers) / sizeof(slab_openers[0]); i++) {
		if (strcmp(slab_openers[i]->backend, backend) == 0)
			return slab_openers[i];
	}
	return NULL;
}

/* Whether @m died with its context, asking the opener unless known. No
 * lock needed (the caller holds a reference, or slab_lock for the list):
 * dead only ever turns true, and the opener's question is thread-safe.
 * Every local allocation on the cuda path asks it (slab_cache_dead), so a
 * process-wide lock here made threads wait on each other. */
static bool slab_map_dead(struct slab_map *m)
{
	if (__atomic_load_n(&m->dead, __ATOMIC_ACQUIRE))
		return true;
	if (!m->opener->alive || m->opener->alive(m->priv))
		return false;
	__atomic_store_n(&m->dead, true, __ATOMIC_RELEASE);
	return true;
}

/* The live mapping of @handle: a dead one is never handed out. */
static struct slab_map *slab_cache_find(const struct slab_opener *opener, const uint8_t *handle)
{
	for (struct slab_map *m = slab_list; m; m = m->next) {
		if (m->opener == opener && memcmp(m->handle, handle, PROTO_HANDLE_SIZE) == 0 &&
		    !slab_map_dead(m))
			return m;
	}
	return NULL;
}

int slab_cache_get(const struct slab_opener *opener, const uint8_t *handle, int fd,
                   const struct slab_target *where, uint64_t size, struct slab_map **out)
{
	struct slab_map *map;
	int rc = 0;

	pthread_once(&slab_once, slab_once_init);
	pthread_mutex_lock(&slab_lock);
	map = slab_cache_find(opener, handle);
	if (map) {
		if (map->size != size) {
			rc = error_set(GPB_E_PROTOCOL,
			               "slab size %llu differs from the %llu already mapped",
			               (unsigned long long)size, (unsigned long long)map->size);
			goto out;
		}
		map->refs++;
		*out = map;
		goto out;
	}
	if (size == 0) {
		rc = error_set(GPB_E_PROTOCOL, "slab of size 0");
		goto out;
	}
	if (opener->needs_fd && fd < 0) {
		rc = error_set(GPB_E_PROTOCOL, "slab handle came without its descriptor");
		goto out;
	}
	map = calloc(1, sizeof(*map));
	if (!map) {
		rc = error_set(GPB_E_NOMEM, "out of memory");
		goto out;
	}
	/* Opened under the lock: two connections of this process handed the
	 * same slab at once must not both open it (CUDA refuses a second
	 * open of one handle in one context). */
	rc = opener->open(handle, fd, where, size, &map->base, &map->priv);
	if (rc < 0) {
		free(map);
		goto out;
	}
	slab_opens++;
	slab_open_now++;
	map->where = *where;
	map->where.device_uuid = NULL;
	if (where->device_uuid) {
		snprintf(map->uuid, sizeof(map->uuid), "%s", where->device_uuid);
		map->where.device_uuid = map->uuid;
	}
	memcpy(map->handle, handle, PROTO_HANDLE_SIZE);
	map->opener = opener;
	map->size = size;
	map->refs = 1;
	map->next = slab_list;
	if (slab_list)
		slab_list->prev = map;
	slab_list = map;
	*out = map;
out:
	pthread_mutex_unlock(&slab_lock);
	if (fd >= 0)
		close(fd);
	return rc;
}

void slab_cache_put(struct slab_map *map)
{
	pthread_mutex_lock(&slab_lock);
	if (--map->refs > 0) {
		pthread_mutex_unlock(&slab_lock);
		return;
	}
	if (map->forked) {
		/* The parent's (slab_atfork_child): not on the list, not
		 * counted, and no driver state of this process behind it. */
		pthread_mutex_unlock(&slab_lock);
		if (map->opener->forget)
			map->opener->forget(map->priv);
		else
			map->opener->close(map->base, map->size, map->priv);
		free(map);
		return;
	}
	if (map->prev)
		map->prev->next = map->next;
	else
		slab_list = map->next;
	if (map->next)
		map->next->prev = map->prev;
	slab_closes++;
	slab_open_now--;
	pthread_mutex_unlock(&slab_lock);
	/* Unmapping outside the lock: no other thread can find it anymore. */
	map->opener->close(map->base, map->size, map->priv);
	free(map);
}

void slab_cache_ref(struct slab_map *map)
{
	pthread_mutex_lock(&slab_lock);
	map->refs++;
	pthread_mutex_unlock(&slab_lock);
}

bool slab_cache_dead(struct slab_map *map)
{
	return slab_map_dead(map);
}

int slab_cache_renew(struct slab_map *map, struct slab_map **out)
{
	int rc = slab_cache_get(map->opener, map->handle, -1, &map->where, map->size, out);

	if (rc < 0 && rc != GPB_E_NOMEM)
		rc = error_set(GPB_E_CONTEXT_RESET,
		               "slab of %llu bytes was mapped in a CUDA context that has been "
		               "reset or destroyed, and cannot be mapped again (%s): free the "
		               "allocations in it",
		               (unsigned long long)map->size, error_message());
	return rc;
}

void slab_cache_finish(struct slab_map *map)
{
	if (map->opener->finish)
		map->opener->finish(map->priv);
}

int slab_cache_copy(void *dst, const void *src, size_t n, bool to_device, void *stream)
{
	uintptr_t p = (uintptr_t)(to_device ? dst : src);
	const struct slab_opener *opener = NULL;
	void *priv = NULL;
	bool dead = false;

	if (n == 0)
		return 0;
	if (!dst || !src)
		return error_set(GPB_E_INVALID, "copy: NULL pointer");
	pthread_mutex_lock(&slab_lock);
	/* A live mapping first: a dead one's addresses may have been given to
	 * a new mapping since. */
	for (struct slab_map *m = slab_list; m; m = m->next) {
		uintptr_t base = (uintptr_t)m->base;
		if (p >= base && p - base < m->size && n <= m->size - (p - base)) {
			if (slab_map_dead(m)) {
				dead = true;
				continue;
			}
			opener = m->opener;
			priv = m->priv;
			break;
		}
	}
	pthread_mutex_unlock(&slab_lock);
	if (!opener && dead)
		return error_set(GPB_E_CONTEXT_RESET,
		                 "copy: %zu bytes at %p were mapped in a CUDA context that has "
		                 "been reset or destroyed (cuDevicePrimaryCtxReset, cuCtxDestroy): "
		                 "that memory is gone from this process; free the allocation",
		                 n, (void *)p);
	/* Copying outside the lock: a copy may take long, and freeing the
	 * memory while copying to it is the caller's mistake either way. */
	if (!opener)
		return error_set(GPB_E_INVALID,
		                 "copy: %zu bytes at %p are not (all) in memory from gpubroker "
		                 "mapped by this process",
		                 n, (void *)p);
	return opener->copy(priv, dst, src, n, to_device, stream);
}

void slab_cache_counts(uint64_t *opens, uint64_t *closes, uint64_t *open_now)
{
	pthread_mutex_lock(&slab_lock);
	*opens = slab_opens;
	*closes = slab_closes;
	*open_now = slab_open_now;
	pthread_mutex_unlock(&slab_lock);
}

unsigned slab_keep_max(void)
{
	pthread_mutex_lock(&slab_lock);
	if (slab_kept_max < 0) {
		const char *v = getenv("GPUBROKER_KEEP_SLABS");
		char *end = NULL;
		long n = v && *v ? strtol(v, &end, 10) : -1;
		slab_kept_max = n >= 0 && n <= 65536 && end && *end == '\0' ? n : SLAB_KEEP_DEFAULT;
	}
	unsigned max = (unsigned)slab_kept_max;
	pthread_mutex_unlock(&slab_lock);
	return max;
}

bool slab_keep_get(void)
{
	unsigned max = slab_keep_max();
	bool ok;

	pthread_mutex_lock(&slab_lock);
	ok = slab_kept < max;
	slab_kept += ok;
	pthread_mutex_unlock(&slab_lock);
	return ok;
}

void slab_keep_put(void)
{
	pthread_mutex_lock(&slab_lock);
	if (slab_kept)
		slab_kept--;
	pthread_mutex_unlock(&slab_lock);
}
