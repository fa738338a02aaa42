/*
 * fwalloc.c - a framework's allocator over the broker (fwalloc.h): the
 * client, the instances by CUDA ordinal and the pointers handed out.
 */
#include "config.h"

#include "fwalloc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "error.h"

#if GPB_HAVE_CUDA_H
#include "cudaapi.h"
#endif

/* ---- the pointers handed out ---------------------------------------------- */

static size_t fw_slot(const struct fwalloc *fw, const void *ptr)
{
	uintptr_t h = (uintptr_t)ptr >> 8; /* allocations are 256-byte aligned */

	h *= 0x9e3779b97f4a7c15ull;
	return (size_t)(h ^ (h >> 29)) & (fw->cap - 1);
}

/* The slot of @ptr, or the empty slot where its probe ends (cap > 0). */
static size_t fw_probe(const struct fwalloc *fw, const void *ptr)
{
	size_t i = fw_slot(fw, ptr);

	while (fw->ptrs[i].ptr && fw->ptrs[i].ptr != ptr)
		i = (i + 1) & (fw->cap - 1);
	return i;
}

static int fw_grow(struct fwalloc *fw)
{
	size_t old_cap = fw->cap, cap = old_cap ? old_cap * 2 : 256;
	struct fwalloc_ptr *old = fw->ptrs, *fresh = calloc(cap, sizeof(*fresh));

	if (!fresh)
		return error_set(GPB_E_NOMEM, "gpb_%s: out of memory", fw->kind);
	fw->ptrs = fresh;
	fw->cap = cap;
	for (size_t i = 0; i < old_cap; i++) {
		if (!old[i].ptr)
			continue;
		size_t j = fw_slot(fw, old[i].ptr);
		while (fw->ptrs[j].ptr)
			j = (j + 1) & (cap - 1);
		fw->ptrs[j] = old[i];
	}
	free(old);
	return 0;
}

static int fw_remember(struct fwalloc *fw, void *ptr, uint64_t id, uint64_t size, int device)
{
	if ((fw->count + 1) * 2 > fw->cap) {
		int rc = fw_grow(fw);
		if (rc < 0)
			return rc;
	}
	size_t i = fw_slot(fw, ptr);
	while (fw->ptrs[i].ptr)
		i = (i + 1) & (fw->cap - 1);
	fw->ptrs[i] = (struct fwalloc_ptr){ptr, id, size, device};
	fw->count++;
	struct fwalloc_figures *f = &fw->figures[device];
	f->allocated += size;
	f->live++;
	f->allocs++;
	if (f->allocated > f->peak)
		f->peak = f->allocated;
	return 0;
}

/* Removes @ptr; its allocation id in *id. false when unknown. */
static bool fw_forget(struct fwalloc *fw, void *ptr, uint64_t *id)
{
	if (!fw->cap)
		return false;
	size_t i = fw_probe(fw, ptr);
	if (!fw->ptrs[i].ptr)
		return false;
	*id = fw->ptrs[i].id;
	struct fwalloc_figures *f = &fw->figures[fw->ptrs[i].device];
	f->allocated -= fw->ptrs[i].size;
	f->live--;
	f->frees++;
	fw->ptrs[i].ptr = NULL;
	fw->count--;
	/* Backward-shift deletion: re-place the rest of the cluster, so that
	 * probing never stops at the hole. */
	for (size_t j = (i + 1) & (fw->cap - 1); fw->ptrs[j].ptr; j = (j + 1) & (fw->cap - 1)) {
		struct fwalloc_ptr e = fw->ptrs[j];
		fw->ptrs[j].ptr = NULL;
		size_t k = fw_slot(fw, e.ptr);
		while (fw->ptrs[k].ptr)
			k = (k + 1) & (fw->cap - 1);
		fw->ptrs[k] = e;
	}
	return true;
}

/* Forgets the client and the pointers, without a word to the daemon: after
 * a fork (the connection is the parent's) or once the daemon is gone. */
static void fw_forget_all(struct fwalloc *fw)
{
	fw->client = NULL;
	memset(fw->instance, 0, sizeof(fw->instance));
	/* The blocks went with the client; the totals stay the process's. */
	for (int d = 0; d < FWALLOC_MAX_DEVICES; d++)
		fw->figures[d].allocated = fw->figures[d].live = 0;
	free(fw->ptrs);
	fw->ptrs = NULL;
	fw->cap = fw->count = 0;
}

/* ---- fork ---------------------------------------------------------------- */

#define FW_MAX 4 /* the frameworks served: torch, cupy */

static pthread_mutex_t fw_all_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fwalloc *fw_all[FW_MAX];
static unsigned fw_nall;

static void fw_atfork_prepare(void)
{
	pthread_mutex_lock(&fw_all_lock);
	for (unsigned i = 0; i < fw_nall; i++)
		pthread_mutex_lock(&fw_all[i]->lock);
}

static void fw_atfork_parent(void)
{
	for (unsigned i = fw_nall; i-- > 0;)
		pthread_mutex_unlock(&fw_all[i]->lock);
	pthread_mutex_unlock(&fw_all_lock);
}

static void fw_atfork_child(void)
{
	/* The parent's connection and mappings are not the child's to use or
	 * close; the child connects afresh if it allocates. Threads of the
	 * parent may have held users: not the child's. */
	for (unsigned i = fw_nall; i-- > 0;) {
		fw_forget_all(fw_all[i]);
		pthread_rwlock_init(&fw_all[i]->users, NULL);
		pthread_mutex_unlock(&fw_all[i]->lock);
	}
	pthread_mutex_unlock(&fw_all_lock);
}

static pthread_once_t fw_fork_once = PTHREAD_ONCE_INIT;

static void fw_install_atfork(void)
{
	pthread_atfork(fw_atfork_prepare, fw_atfork_parent, fw_atfork_child);
}

/* Lists @fw for the fork handlers, once; neither of its locks held (the
 * handlers take fw_all_lock first). */
static void fw_watch_fork(struct fwalloc *fw)
{
	if (__atomic_load_n(&fw->forked_handler, __ATOMIC_ACQUIRE))
		return;
	pthread_once(&fw_fork_once, fw_install_atfork);
	pthread_mutex_lock(&fw_all_lock);
	if (!fw->forked_handler && fw_nall < FW_MAX) {
		fw_all[fw_nall++] = fw;
		__atomic_store_n(&fw->forked_handler, true, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&fw_all_lock);
}

/* ---- instances ------------------------------------------------------------ */

/* The setting $<prefix><what>, or NULL when unset or empty. */
static const char *fw_setting(const struct fwalloc *fw, const char *what)
{
	char name[64];

	snprintf(name, sizeof(name), "%s%s", fw->prefix, what);
	const char *v = getenv(name);
	return v && *v ? v : NULL;
}

/* $<prefix>PROPORTION: 0 (auto pool) when unset or empty. */
static int fw_proportion(const struct fwalloc *fw, double *out)
{
	const char *text = fw_setting(fw, "PROPORTION");
	char *end;

	*out = 0;
	if (!text)
		return 0;
	errno = 0;
	*out = strtod(text, &end);
	if (errno || *end || end == text || !(*out > 0 && *out <= 1))
		return error_set(GPB_E_INVALID,
		                 "%sPROPORTION=%s: a proportion in (0, 1] is expected", fw->prefix,
		                 text);
	return 0;
}

/* The daemon names devices by UUID: the one of CUDA ordinal @device here
 * (CUDA_VISIBLE_DEVICES renumbers them), or "" to register by index. */
static void fw_device_uuid(int device, char *uuid, size_t len)
{
	uuid[0] = '\0';
#if GPB_HAVE_CUDA_H
	static pthread_mutex_t api_lock = PTHREAD_MUTEX_INITIALIZER;
	static struct cuda_api api;
	static bool tried, loaded;
	char why[128], text[CUDA_UUID_LEN];
	CUdevice dev;

	pthread_mutex_lock(&api_lock);
	if (!tried) {
		tried = true;
		loaded = cuda_api_load(&api, why, sizeof(why), NULL) == 0;
	}
	pthread_mutex_unlock(&api_lock);
	if (loaded && api.DeviceGet(&dev, device) == CUDA_SUCCESS &&
	    cuda_api_device_uuid(&api, dev, text) == CUDA_SUCCESS)
		snprintf(uuid, len, "%s", text);
#else
	(void)device;
	(void)len;
#endif
}

/* The client, connected if need be, under fw->lock. */
static int fw_connect(struct fwalloc *fw)
{
	if (fw->client)
		return 0;
	int rc = gpb_connect(NULL, fw->name[0] ? fw->name : fw->kind, &fw->client);
	if (rc < 0)
		fw->client = NULL;
	return rc;
}

/* The client (connected if need be) and @device's instance (registered if
 * need be), under fw->lock. */
static int fw_instance_of(struct fwalloc *fw, int device, uint64_t *out)
{
	struct gpb_register_opts opts = {0};
	char name[64], uuid[48];
	int rc;

	if (device < 0 || device >= FWALLOC_MAX_DEVICES)
		return error_set(GPB_E_INVALID, "gpb_%s: CUDA device %d outside 0-%d", fw->kind,
		                 device, FWALLOC_MAX_DEVICES - 1);
	if (fw->instance[device]) {
		*out = fw->instance[device];
		return 0;
	}
	rc = fw_proportion(fw, &opts.proportion);
	if (rc < 0)
		return rc;
	rc = fw_connect(fw);
	if (rc < 0)
		return rc;
	if (fw->name[0])
		snprintf(name, sizeof(name), "%s", fw->name);
	else
		snprintf(name, sizeof(name), "%s-%ld", fw->kind, (long)getpid());
	opts.name = fw_setting(fw, "NAME") ? fw_setting(fw, "NAME") : name;
	opts.group = fw_setting(fw, "GROUP");
	opts.device = device;
	fw_device_uuid(device, uuid, sizeof(uuid));
	if (uuid[0]) {
		opts.device = 0;
		opts.device_uuid = uuid;
	}
	rc = gpb_register(fw->client, &opts, &fw->instance[device]);
	if (rc < 0)
		return rc;
	*out = fw->instance[device];
	return 0;
}

/* After a call on @client (users read-held, lock not): a client the daemon
 * dropped is replaced next time (its memory went with it). Leaves users
 * unlocked. */
static void fw_leave(struct fwalloc *fw, gpb_client *client, int rc)
{
	pthread_rwlock_unlock(&fw->users);
	if (rc != GPB_E_DAEMON_GONE || !client)
		return;
	char msg[256];
	snprintf(msg, sizeof(msg), "%s", error_message());
	pthread_rwlock_wrlock(&fw->users);
	pthread_mutex_lock(&fw->lock);
	if (fw->client == client) { /* not replaced by another thread meanwhile */
		gpb_disconnect(fw->client);
		fw_forget_all(fw);
	}
	pthread_mutex_unlock(&fw->lock);
	pthread_rwlock_unlock(&fw->users);
	error_set(rc, "%s", msg); /* gpb_disconnect may have cleared it */
}

/* users read-held: the client and @device's instance (connected and
 * registered if need be, under lock). */
static int fw_enter(struct fwalloc *fw, int device, gpb_client **client, uint64_t *inst)
{
	fw_watch_fork(fw);
	pthread_mutex_lock(&fw->lock);
	int rc = fw_instance_of(fw, device, inst);
	*client = fw->client;
	pthread_mutex_unlock(&fw->lock);
	return rc;
}

/* ---- the calls ------------------------------------------------------------ */

int fwalloc_alloc(struct fwalloc *fw, size_t size, int device, void *stream, bool ordered,
                  void **out)
{
	struct gpb_allocation a;
	gpb_client *client;
	uint64_t inst;
	int rc;

	pthread_rwlock_rdlock(&fw->users);
	rc = fw_enter(fw, device, &client, &inst);
	if (rc == 0)
		rc = ordered ? gpb_alloc_async(client, inst, size, 0, stream, &a)
		             : gpb_alloc(client, inst, size, 0, &a);
	if (rc == 0) {
		pthread_mutex_lock(&fw->lock);
		rc = fw_remember(fw, a.ptr, a.id, size, device);
		pthread_mutex_unlock(&fw->lock);
		if (rc < 0) {
			char msg[256];
			snprintf(msg, sizeof(msg), "%s", error_message());
			gpb_free(client, a.id);
			rc = error_set(GPB_E_NOMEM, "%s", msg);
		}
	}
	if (rc < 0 && device >= 0 && device < FWALLOC_MAX_DEVICES) {
		pthread_mutex_lock(&fw->lock);
		fw->figures[device].refused++;
		pthread_mutex_unlock(&fw->lock);
	}
	fw_leave(fw, client, rc);
	*out = rc < 0 ? NULL : a.ptr;
	return rc;
}

int fwalloc_free(struct fwalloc *fw, void *ptr, void *stream, bool ordered)
{
	gpb_client *client;
	uint64_t id;
	bool known;
	int rc = 0;

	pthread_rwlock_rdlock(&fw->users);
	pthread_mutex_lock(&fw->lock);
	client = fw->client;
	known = client && fw_forget(fw, ptr, &id);
	pthread_mutex_unlock(&fw->lock);
	if (!known)
		rc = error_set(GPB_E_NOT_FOUND, "gpb_%s free: %p is not from %s", fw->kind, ptr,
		               fw->alloc_fn);
	else if (ordered)
		rc = gpb_free_async(client, id, stream);
	else
		rc = gpb_free(client, id);
	if (known && ordered && rc == GPB_E_BACKEND) /* no event on @stream */
		rc = gpb_free(client, id);
	fw_leave(fw, client, rc);
	return rc;
}

int fwalloc_mem_info(struct fwalloc *fw, int device, uint64_t *instance, struct gpb_mem_info *out)
{
	gpb_client *client;
	uint64_t inst;
	int rc;

	pthread_rwlock_rdlock(&fw->users);
	rc = fw_enter(fw, device, &client, &inst);
	if (rc == 0 && out)
		rc = gpb_mem_info(client, inst, out);
	if (rc == 0 && instance)
		*instance = inst;
	fw_leave(fw, client, rc);
	return rc;
}

int fwalloc_connect(struct fwalloc *fw)
{
	fw_watch_fork(fw);
	pthread_mutex_lock(&fw->lock);
	int rc = fw_connect(fw);
	pthread_mutex_unlock(&fw->lock);
	return rc;
}

bool fwalloc_find(struct fwalloc *fw, const void *ptr, void **base, uint64_t *size)
{
	uintptr_t p = (uintptr_t)ptr;
	bool found = false;

	pthread_mutex_lock(&fw->lock);
	/* A block's start, the common query, is found where it was put. */
	if (fw->cap) {
		size_t i = fw_probe(fw, ptr);
		if (fw->ptrs[i].ptr) {
			*base = fw->ptrs[i].ptr;
			*size = fw->ptrs[i].size;
			found = true;
		}
	}
	for (size_t i = 0; i < fw->cap && !found; i++) {
		uintptr_t b = (uintptr_t)fw->ptrs[i].ptr;
		/* A block of size 0 still answers for its own address. */
		if (b && p >= b && (p == b || p - b < fw->ptrs[i].size)) {
			*base = fw->ptrs[i].ptr;
			*size = fw->ptrs[i].size;
			found = true;
		}
	}
	pthread_mutex_unlock(&fw->lock);
	return found;
}

static int fw_device_check(const struct fwalloc *fw, int device)
{
	if (device < 0 || device >= FWALLOC_MAX_DEVICES)
		return error_set(GPB_E_INVALID, "gpb_%s: CUDA device %d outside 0-%d", fw->kind,
		                 device, FWALLOC_MAX_DEVICES - 1);
	return 0;
}

int fwalloc_stats(struct fwalloc *fw, int device, struct gpb_framework_stats *out)
{
	struct gpb_mem_info mi;
	gpb_client *client;
	uint64_t inst;
	int rc = fw_device_check(fw, device);

	if (rc < 0)
		return rc;
	if (!out)
		return error_set(GPB_E_INVALID, "gpb_%s_stats: out is NULL", fw->kind);
	pthread_rwlock_rdlock(&fw->users);
	pthread_mutex_lock(&fw->lock);
	const struct fwalloc_figures *f = &fw->figures[device];
	*out = (struct gpb_framework_stats){.allocated = f->allocated,
	                                    .peak = f->peak,
	                                    .live = f->live,
	                                    .allocs = f->allocs,
	                                    .frees = f->frees,
	                                    .refused = f->refused};
	client = fw->client;
	inst = fw->instance[device];
	pthread_mutex_unlock(&fw->lock);
	if (client && inst) {
		rc = gpb_mem_info(client, inst, &mi);
		if (rc == 0)
			out->reserved = mi.used;
	}
	fw_leave(fw, client, rc);
	return rc;
}

int fwalloc_reset_peak(struct fwalloc *fw, int device)
{
	int rc = fw_device_check(fw, device);

	if (rc < 0)
		return rc;
	pthread_mutex_lock(&fw->lock);
	fw->figures[device].peak = fw->figures[device].allocated;
	pthread_mutex_unlock(&fw->lock);
	return 0;
}
