/*
 * slab.c - process-wide, reference-counted cache of slab mappings.
 */
#include "slab.h"
#include "internal.h"

#include <errno.h>
#include <pthread.h>
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

/*
 * A child forked while another thread held slab_lock would inherit it locked
 * forever. Holding it across fork() makes the child's copy consistent (the
 * mappings themselves are MAP_SHARED and stay valid in the child).
 */
static void slab_atfork_prepare(void)
{
	pthread_mutex_lock(&slab_lock);
}

static void slab_atfork_release(void)
{
	pthread_mutex_unlock(&slab_lock);
}

static void slab_once_init(void)
{
	pthread_atfork(slab_atfork_prepare, slab_atfork_release, slab_atfork_release);
}

static int sim_open(const uint8_t *handle, int fd, uint64_t size, void **base)
{
	struct stat st;
	void *p;

	(void)handle;
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

static void sim_close(void *base, uint64_t size)
{
	munmap(base, (size_t)size);
}

static const struct slab_opener sim_opener = {
    .backend = "sim",
    .needs_fd = 1,
    .open = sim_open,
    .close = sim_close,
};

/* The CUDA opener (cuIpcOpenMemHandle through the dlopen'ed driver) is added
 * here when the CUDA backend lands. */
static const struct slab_opener *const slab_openers[] = {
    &sim_opener,
};

const struct slab_opener *slab_opener_find(const char *backend)
{
	for (size_t i = 0; i < sizeof(slab_openers) / sizeof(slab_openers[0]); i++) {
		if (strcmp(slab_openers[i]->backend, backend) == 0)
			return slab_openers[i];
	}
	return NULL;
}

static struct slab_map *slab_cache_find(const struct slab_opener *opener, const uint8_t *handle)
{
	for (struct slab_map *m = slab_list; m; m = m->next) {
		if (m->opener == opener && memcmp(m->handle, handle, PROTO_HANDLE_SIZE) == 0)
			return m;
	}
	return NULL;
}

int slab_cache_get(const struct slab_opener *opener, const uint8_t *handle, int fd, uint64_t size,
                   struct slab_map **out)
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
	rc = opener->open(handle, fd, size, &map->base);
	if (rc < 0) {
		free(map);
		goto out;
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
	if (map->prev)
		map->prev->next = map->next;
	else
		slab_list = map->next;
	if (map->next)
		map->next->prev = map->prev;
	pthread_mutex_unlock(&slab_lock);
	/* Unmapping outside the lock: no other thread can find it anymore. */
	map->opener->close(map->base, map->size);
	free(map);
}
