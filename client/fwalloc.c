/*
 * fwalloc.c - a framework's allocator over the broker (fwalloc.h): the
 * client, the instances by CUDA ordinal and the pointers handed out.
 */
#include "config.h"

#include "fwalloc.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "error.h"
#include "thread.h"

#if GPB_HAVE_CUDA_H
#include "cudaapi.h"
#endif

/* ---- the pointers handed out ---------------------------------------------- */

static size_t fw_slot(const struct fwalloc_shard *sh, const void *ptr)
{
	uintptr_t h = (uintptr_t)ptr >> 8; /* allocations are 256-byte aligned */

	h *= 0x9e3779b97f4a7c15ull;
	return (size_t)(h ^ (h >> 29)) & (sh->cap - 1);
}

/* The slot of @ptr, or the empty slot where its probe ends (cap > 0). */
static size_t fw_probe(const struct fwalloc_shard *sh, const void *ptr)
{
	size_t i = fw_slot(sh, ptr);

	while (sh->ptrs[i].ptr && sh->ptrs[i].ptr != ptr)
		i = (i + 1) & (sh->cap - 1);
	return i;
}

static int fw_grow(struct fwalloc *fw, struct fwalloc_shard *sh)
{
	size_t old_cap = sh->cap, cap = old_cap ? old_cap * 2 : 256;
	struct fwalloc_ptr *old = sh->ptrs, *fresh = calloc(cap, sizeof(*fresh));

	if (!fresh)
		return error_set(GPB_E_NOMEM, "gpb_%s: out of memory", fw->kind);
	sh->ptrs = fresh;
	sh->cap = cap;
	for (size_t i = 0; i < old_cap; i++) {
		if (!old[i].ptr)
			continue;
		size_t j = fw_slot(sh, old[i].ptr);
		while (sh->ptrs[j].ptr)
			j = (j + 1) & (cap - 1);
		sh->ptrs[j] = old[i];
	}
	free(old);
	return 0;
}

/* The calling thread's table: threads are dealt out in turn. */
static struct fwalloc_shard *fw_my_shard(struct fwalloc *fw)
{
	return &fw->shards[thread_number() % FWALLOC_SHARDS];
}

/* Files @ptr in the calling thread's table. */
static int fw_remember(struct fwalloc *fw, void *ptr, uint64_t id, uint64_t size, int device)
{
	struct fwalloc_shard *sh = fw_my_shard(fw);
	int rc = 0;

	pthread_mutex_lock(&sh->lock);
	if ((sh->count + 1) * 2 > sh->cap)
		rc = fw_grow(fw, sh);
	if (rc == 0) {
		size_t i = fw_slot(sh, ptr);
		while (sh->ptrs[i].ptr)
			i = (i + 1) & (sh->cap - 1);
		sh->ptrs[i] = (struct fwalloc_ptr){ptr, id, size, device};
		sh->count++;
		struct fwalloc_figures *f = &sh->figures[device];
		f->allocated += size;
		f->live++;
		f->allocs++;
		if (f->allocated > f->peak)
			f->peak = f->allocated;
	}
	pthread_mutex_unlock(&sh->lock);
	return rc;
}

/* Removes @ptr from @sh (its lock held); its allocation id in *id. false
 * when @sh has none. */
static bool fw_forget_in(struct fwalloc_shard *sh, void *ptr, uint64_t *id)
{
	if (!sh->cap)
		return false;
	size_t i = fw_probe(sh, ptr);
	if (!sh->ptrs[i].ptr)
		return false;
	*id = sh->ptrs[i].id;
	struct fwalloc_figures *f = &sh->figures[sh->ptrs[i].device];
	f->allocated -= sh->ptrs[i].size;
	f->live--;
	f->frees++;
	sh->ptrs[i].ptr = NULL;
	sh->count--;
	/* Backward-shift deletion: re-place the rest of the cluster, so that
	 * probing never stops at the hole. */
	for (size_t j = (i + 1) & (sh->cap - 1); sh->ptrs[j].ptr; j = (j + 1) & (sh->cap - 1)) {
		struct fwalloc_ptr e = sh->ptrs[j];
		sh->ptrs[j].ptr = NULL;
		size_t k = fw_slot(sh, e.ptr);
		while (sh->ptrs[k].ptr)
			k = (k + 1) & (sh->cap - 1);
		sh->ptrs[k] = e;
	}
	return true;
}

/* Removes @ptr: looked for in the calling thread's table first (a thread
 * mostly frees what it allocated), then in the others. false when unknown. */
static bool fw_forget(struct fwalloc *fw, void *ptr, uint64_t *id)
{
	struct fwalloc_shard *mine = fw_my_shard(fw);
	bool found;

	pthread_mutex_lock(&mine->lock);
	found = fw_forget_in(mine, ptr, id);
	pthread_mutex_unlock(&mine->lock);
	for (unsigned k = 0; k < FWALLOC_SHARDS && !found; k++) {
		struct fwalloc_shard *sh = &fw->shards[k];
		if (sh == mine)
			continue;
		pthread_mutex_lock(&sh->lock);
		found = fw_forget_in(sh, ptr, id);
		pthread_mutex_unlock(&sh->lock);
	}
	return found;
}

/* Forgets the client and the pointers, without a word to the daemon: after
 * a fork (the connection is the parent's) or once the daemon is gone. No
 * call in progress (users' writer, or the forked child). */
static void fw_forget_all(struct fwalloc *fw)
{
	fw->client = NULL;
	memset(fw->instance, 0, sizeof(fw->instance));
	for (unsigned k = 0; k < FWALLOC_SHARDS; k++) {
		struct fwalloc_shard *sh = &fw->shards[k];
		pthread_mutex_lock(&sh->lock);
		/* The blocks went with the client; the totals stay the process's. */
		for (int d = 0; d < FWALLOC_MAX_DEVICES; d++)
			sh->figures[d].allocated = sh->figures[d].live = 0;
		free(sh->ptrs);
		sh->ptrs = NULL;
		sh->cap = sh->count = 0;
		pthread_mutex_unlock(&sh->lock);
	}
}

/* ---- fork ---------------------------------------------------------------- */

#define FW_MAX 4 /* the frameworks served: torch, cupy, the interposer */

static pthread_mutex_t fw_all_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fwalloc *fw_all[FW_MAX];
static unsigned fw_nall;

static void fw_atfork_prepare(void)
{
	pthread_mutex_lock(&fw_all_lock);
	for (unsigned i = 0; i < fw_nall; i++) {
		pthread_mutex_lock(&fw_all[i]->writer_lock);
		pthread_mutex_lock(&fw_all[i]->lock);
		for (unsigned k = 0; k < FWALLOC_SHARDS; k++)
			pthread_mutex_lock(&fw_all[i]->shards[k].lock);
	}
}

static void fw_unlock_all(struct fwalloc *fw)
{
	for (unsigned k = FWALLOC_SHARDS; k-- > 0;)
		pthread_mutex_unlock(&fw->shards[k].lock);
	pthread_mutex_unlock(&fw->lock);
	pthread_mutex_unlock(&fw->writer_lock);
}

static void fw_atfork_parent(void)
{
	for (unsigned i = fw_nall; i-- > 0;)
		fw_unlock_all(fw_all[i]);
	pthread_mutex_unlock(&fw_all_lock);
}

static void fw_atfork_child(void)
{
	/* The parent's connection and mappings are not the child's to use or
	 * close; the child connects afresh if it allocates. Threads of the
	 * parent may have been in read sections: not the child's. */
	for (unsigned i = fw_nall; i-- > 0;) {
		struct fwalloc *fw = fw_all[i];
		for (struct fwalloc_reader *r = fw->readers; r; r = r->next)
			r->depth = 0;
		fw->writer = false;
		fw_unlock_all(fw);
		fw_forget_all(fw);
	}
	pthread_mutex_unlock(&fw_all_lock);
}

/* ---- users: a reader flag per thread ------------------------------------- */

static pthread_key_t fw_thread_key;
static __thread struct fwalloc_reader *fw_readers_mine[FW_MAX];

/* A thread's end: its readers are free for the next thread. */
static void fw_thread_exit(void *unused)
{
	(void)unused;
	for (unsigned i = 0; i < FW_MAX; i++)
		if (fw_readers_mine[i])
			__atomic_store_n(&fw_readers_mine[i]->taken, false, __ATOMIC_RELEASE);
}

static pthread_once_t fw_fork_once = PTHREAD_ONCE_INIT;

static void fw_install_atfork(void)
{
	pthread_atfork(fw_atfork_prepare, fw_atfork_parent, fw_atfork_child);
	pthread_key_create(&fw_thread_key, fw_thread_exit);
}

/* Lists @fw for the fork handlers, once; none of its locks held (the
 * handlers take fw_all_lock first). */
static void fw_watch_fork(struct fwalloc *fw)
{
	if (__atomic_load_n(&fw->forked_handler, __ATOMIC_ACQUIRE))
		return;
	pthread_once(&fw_fork_once, fw_install_atfork);
	pthread_mutex_lock(&fw_all_lock);
	if (!fw->forked_handler && fw_nall < FW_MAX) {
		fw->index = fw_nall;
		fw_all[fw_nall++] = fw;
		__atomic_store_n(&fw->forked_handler, true, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&fw_all_lock);
}

/* The calling thread's reader of @fw (one a gone thread left, or a new
 * one), or NULL out of memory. */
static struct fwalloc_reader *fw_reader(struct fwalloc *fw)
{
	struct fwalloc_reader *r;

	fw_watch_fork(fw);
	if (fw->index < FW_MAX && (r = fw_readers_mine[fw->index]))
		return r;
	pthread_mutex_lock(&fw->lock);
	for (r = fw->readers; r; r = r->next)
		if (!__atomic_load_n(&r->taken, __ATOMIC_ACQUIRE))
			break;
	if (!r && (r = aligned_alloc(_Alignof(struct fwalloc_reader), sizeof(*r)))) {
		*r = (struct fwalloc_reader){.next = fw->readers};
		__atomic_store_n(&fw->readers, r, __ATOMIC_RELEASE);
	}
	if (r)
		r->taken = true;
	pthread_mutex_unlock(&fw->lock);
	if (r && fw->index < FW_MAX) {
		fw_readers_mine[fw->index] = r;
		pthread_setspecific(fw_thread_key, fw); /* non-NULL: fw_thread_exit runs */
	}
	return r;
}

/* Enters a read section of users (nests): the client is not replaced
 * until it leaves. The flag is set before the writer's is looked at, and
 * the writer sets its own before it looks at the flags (both sequentially
 * consistent), so that one of the two always sees the other. */
static int fw_read_lock(struct fwalloc *fw, struct fwalloc_reader **out)
{
	struct fwalloc_reader *r = fw_reader(fw);

	*out = r;
	if (!r)
		return error_set(GPB_E_NOMEM, "gpb_%s: out of memory", fw->kind);
	if (r->depth) {
		__atomic_store_n(&r->depth, r->depth + 1, __ATOMIC_RELAXED);
		return 0;
	}
	for (;;) {
		__atomic_store_n(&r->depth, 1, __ATOMIC_SEQ_CST);
		if (!__atomic_load_n(&fw->writer, __ATOMIC_SEQ_CST))
			return 0;
		__atomic_store_n(&r->depth, 0, __ATOMIC_SEQ_CST);
		pthread_mutex_lock(&fw->writer_lock); /* until the writer is done */
		pthread_mutex_unlock(&fw->writer_lock);
	}
}

static void fw_read_unlock(struct fwalloc_reader *r)
{
	if (r)
		__atomic_store_n(&r->depth, r->depth - 1, __ATOMIC_RELEASE);
}

/* users' writer: waits until no thread is in a read section. */
static void fw_write_lock(struct fwalloc *fw)
{
	pthread_mutex_lock(&fw->writer_lock);
	__atomic_store_n(&fw->writer, true, __ATOMIC_SEQ_CST);
	for (struct fwalloc_reader *r = __atomic_load_n(&fw->readers, __ATOMIC_ACQUIRE); r;
	     r = r->next)
		while (__atomic_load_n(&r->depth, __ATOMIC_SEQ_CST))
			sched_yield();
}

static void fw_write_unlock(struct fwalloc *fw)
{
	__atomic_store_n(&fw->writer, false, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&fw->writer_lock);
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
	gpb_client *client;
	int rc = gpb_connect(NULL, fw->name[0] ? fw->name : fw->kind, &client);
	if (rc == 0) /* read with no lock by the calls (fw_enter) */
		__atomic_store_n(&fw->client, client, __ATOMIC_RELEASE);
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
	uint64_t inst;
	rc = gpb_register(fw->client, &opts, &inst);
	if (rc < 0)
		return rc;
	/* Read with no lock by the calls (fw_enter). */
	__atomic_store_n(&fw->instance[device], inst, __ATOMIC_RELEASE);
	*out = inst;
	return 0;
}

/* After a call on @client (in a read section of users, lock not held): a
 * client the daemon dropped is replaced next time (its memory went with
 * it). Leaves the read section. */
static void fw_leave(struct fwalloc *fw, struct fwalloc_reader *r, gpb_client *client, int rc)
{
	fw_read_unlock(r);
	if (rc != GPB_E_DAEMON_GONE || !client)
		return;
	char msg[256];
	snprintf(msg, sizeof(msg), "%s", error_message());
	fw_write_lock(fw);
	pthread_mutex_lock(&fw->lock);
	if (fw->client == client) { /* not replaced by another thread meanwhile */
		gpb_disconnect(fw->client);
		fw_forget_all(fw);
	}
	pthread_mutex_unlock(&fw->lock);
	fw_write_unlock(fw);
	error_set(rc, "%s", msg); /* gpb_disconnect may have cleared it */
}

/* In a read section of users: the client and @device's instance. Once
 * both are set, no lock (they change only under users' writer); else
 * connected and registered under lock. */
static int fw_enter(struct fwalloc *fw, int device, gpb_client **client, uint64_t *inst)
{
	if (device >= 0 && device < FWALLOC_MAX_DEVICES) {
		*client = __atomic_load_n(&fw->client, __ATOMIC_ACQUIRE);
		*inst = __atomic_load_n(&fw->instance[device], __ATOMIC_ACQUIRE);
		if (*client && *inst)
			return 0;
	}
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
	struct fwalloc_reader *r;
	struct gpb_allocation a;
	gpb_client *client = NULL;
	uint64_t inst;
	int rc;

	*out = NULL;
	rc = fw_read_lock(fw, &r);
	if (rc < 0)
		return rc;
	rc = fw_enter(fw, device, &client, &inst);
	if (rc == 0)
		rc = ordered ? gpb_alloc_async(client, inst, size, 0, stream, &a)
		             : gpb_alloc(client, inst, size, 0, &a);
	if (rc == 0) {
		rc = fw_remember(fw, a.ptr, a.id, size, device);
		if (rc < 0) {
			char msg[256];
			snprintf(msg, sizeof(msg), "%s", error_message());
			gpb_free(client, a.id);
			rc = error_set(GPB_E_NOMEM, "%s", msg);
		}
	}
	if (rc < 0 && device >= 0 && device < FWALLOC_MAX_DEVICES) {
		struct fwalloc_shard *sh = fw_my_shard(fw);
		pthread_mutex_lock(&sh->lock);
		sh->figures[device].refused++;
		pthread_mutex_unlock(&sh->lock);
	}
	fw_leave(fw, r, client, rc);
	if (rc == 0)
		*out = a.ptr;
	return rc;
}

int fwalloc_free(struct fwalloc *fw, void *ptr, void *stream, bool ordered)
{
	struct fwalloc_reader *r;
	gpb_client *client;
	uint64_t id;
	bool known;
	int rc = fw_read_lock(fw, &r);

	if (rc < 0)
		return rc;
	client = __atomic_load_n(&fw->client, __ATOMIC_ACQUIRE);
	known = client && fw_forget(fw, ptr, &id);
	if (!known)
		rc = error_set(GPB_E_NOT_FOUND, "gpb_%s free: %p is not from %s", fw->kind, ptr,
		               fw->alloc_fn);
	else if (ordered)
		rc = gpb_free_async(client, id, stream);
	else
		rc = gpb_free(client, id);
	if (known && ordered && rc == GPB_E_BACKEND) /* no event on @stream */
		rc = gpb_free(client, id);
	fw_leave(fw, r, client, rc);
	return rc;
}

int fwalloc_mem_info(struct fwalloc *fw, int device, uint64_t *instance, struct gpb_mem_info *out)
{
	struct fwalloc_reader *r;
	gpb_client *client = NULL;
	uint64_t inst;
	int rc = fw_read_lock(fw, &r);

	if (rc < 0)
		return rc;
	rc = fw_enter(fw, device, &client, &inst);
	if (rc == 0 && out)
		rc = gpb_mem_info(client, inst, out);
	if (rc == 0 && instance)
		*instance = inst;
	fw_leave(fw, r, client, rc);
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

	/* A block's start, the common query, is found where it was put. */
	for (unsigned k = 0; k < FWALLOC_SHARDS && !found; k++) {
		struct fwalloc_shard *sh = &fw->shards[k];
		pthread_mutex_lock(&sh->lock);
		if (sh->cap) {
			size_t i = fw_probe(sh, ptr);
			if (sh->ptrs[i].ptr) {
				*base = sh->ptrs[i].ptr;
				*size = sh->ptrs[i].size;
				found = true;
			}
		}
		pthread_mutex_unlock(&sh->lock);
	}
	for (unsigned k = 0; k < FWALLOC_SHARDS && !found; k++) {
		struct fwalloc_shard *sh = &fw->shards[k];
		pthread_mutex_lock(&sh->lock);
		for (size_t i = 0; i < sh->cap && !found; i++) {
			uintptr_t b = (uintptr_t)sh->ptrs[i].ptr;
			/* A block of size 0 still answers for its own address. */
			if (b && p >= b && (p == b || p - b < sh->ptrs[i].size)) {
				*base = sh->ptrs[i].ptr;
				*size = sh->ptrs[i].size;
				found = true;
			}
		}
		pthread_mutex_unlock(&sh->lock);
	}
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
	struct fwalloc_reader *r;
	struct gpb_mem_info mi;
	gpb_client *client;
	uint64_t inst;
	int rc = fw_device_check(fw, device);

	if (rc < 0)
		return rc;
	if (!out)
		return error_set(GPB_E_INVALID, "gpb_%s_stats: out is NULL", fw->kind);
	rc = fw_read_lock(fw, &r);
	if (rc < 0)
		return rc;
	*out = (struct gpb_framework_stats){0};
	for (unsigned k = 0; k < FWALLOC_SHARDS; k++) {
		struct fwalloc_shard *sh = &fw->shards[k];
		pthread_mutex_lock(&sh->lock);
		const struct fwalloc_figures *f = &sh->figures[device];
		out->allocated += f->allocated;
		out->peak += f->peak;
		out->live += f->live;
		out->allocs += f->allocs;
		out->frees += f->frees;
		out->refused += f->refused;
		pthread_mutex_unlock(&sh->lock);
	}
	client = __atomic_load_n(&fw->client, __ATOMIC_ACQUIRE);
	inst = __atomic_load_n(&fw->instance[device], __ATOMIC_ACQUIRE);
	if (client && inst) {
		rc = gpb_mem_info(client, inst, &mi);
		if (rc == 0)
			out->reserved = mi.used;
	}
	fw_leave(fw, r, client, rc);
	return rc;
}

int fwalloc_reset_peak(struct fwalloc *fw, int device)
{
	int rc = fw_device_check(fw, device);

	if (rc < 0)
		return rc;
	for (unsigned k = 0; k < FWALLOC_SHARDS; k++) {
		struct fwalloc_shard *sh = &fw->shards[k];
		pthread_mutex_lock(&sh->lock);
		sh->figures[device].peak = sh->figures[device].allocated;
		pthread_mutex_unlock(&sh->lock);
	}
	return 0;
}
