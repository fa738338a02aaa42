/*
 * torch.c - PyTorch's pluggable allocator over the broker (gpb_torch_*,
 * include/gpubroker.h): one client per process, connected at the first
 * call, one instance per CUDA ordinal, and the pointers handed out (PyTorch
 * frees by pointer, the daemon by id).
 *
 * A mutex (torch_lock) guards all of it, held across connecting and
 * registering (two threads must not register one device twice) but not
 * across the allocations and frees, which the library serves from many
 * threads at once (PyTorch calls from any thread). Those hold a read lock
 * on torch_users for the client they use; replacing a client the daemon
 * dropped takes it for writing, so that no call is using the old one.
 * Order: torch_users, then torch_lock.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "error.h"
#include "export.h"

#if GPB_HAVE_CUDA_H
#include "cudaapi.h"
#endif

#define TORCH_MAX_DEVICES 64 /* CUDA ordinals served (more than any node has) */

struct torch_ptr {
	void *ptr; /* NULL: an empty slot */
	uint64_t id;
};

static pthread_mutex_t torch_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_rwlock_t torch_users = PTHREAD_RWLOCK_INITIALIZER;
static gpb_client *torch_client;
static uint64_t torch_instance[TORCH_MAX_DEVICES]; /* 0: not registered yet */
/* Open addressing, linear probing, power-of-two size, at most half full. */
static struct torch_ptr *torch_ptrs;
static size_t torch_cap, torch_count;
static pthread_once_t torch_fork_once = PTHREAD_ONCE_INIT;

static size_t torch_slot(const void *ptr)
{
	uintptr_t h = (uintptr_t)ptr >> 8; /* allocations are 256-byte aligned */

	h *= 0x9e3779b97f4a7c15ull;
	return (size_t)(h ^ (h >> 29)) & (torch_cap - 1);
}

static int torch_grow(void)
{
	size_t old_cap = torch_cap, cap = old_cap ? old_cap * 2 : 256;
	struct torch_ptr *old = torch_ptrs, *fresh = calloc(cap, sizeof(*fresh));

	if (!fresh)
		return error_set(GPB_E_NOMEM, "gpb_torch_alloc: out of memory");
	torch_ptrs = fresh;
	torch_cap = cap;
	for (size_t i = 0; i < old_cap; i++) {
		if (!old[i].ptr)
			continue;
		size_t j = torch_slot(old[i].ptr);
		while (torch_ptrs[j].ptr)
			j = (j + 1) & (cap - 1);
		torch_ptrs[j] = old[i];
	}
	free(old);
	return 0;
}

static int torch_remember(void *ptr, uint64_t id)
{
	if ((torch_count + 1) * 2 > torch_cap) {
		int rc = torch_grow();
		if (rc < 0)
			return rc;
	}
	size_t i = torch_slot(ptr);
	while (torch_ptrs[i].ptr)
		i = (i + 1) & (torch_cap - 1);
	torch_ptrs[i].ptr = ptr;
	torch_ptrs[i].id = id;
	torch_count++;
	return 0;
}

/* Removes @ptr; its allocation id in *id. false when unknown. */
static bool torch_forget(void *ptr, uint64_t *id)
{
	if (!torch_cap)
		return false;
	size_t i = torch_slot(ptr);
	while (torch_ptrs[i].ptr && torch_ptrs[i].ptr != ptr)
		i = (i + 1) & (torch_cap - 1);
	if (!torch_ptrs[i].ptr)
		return false;
	*id = torch_ptrs[i].id;
	torch_ptrs[i].ptr = NULL;
	torch_count--;
	/* Backward-shift deletion: re-place the rest of the cluster, so that
	 * probing never stops at the hole. */
	for (size_t j = (i + 1) & (torch_cap - 1); torch_ptrs[j].ptr;
	     j = (j + 1) & (torch_cap - 1)) {
		struct torch_ptr e = torch_ptrs[j];
		torch_ptrs[j].ptr = NULL;
		size_t k = torch_slot(e.ptr);
		while (torch_ptrs[k].ptr)
			k = (k + 1) & (torch_cap - 1);
		torch_ptrs[k] = e;
	}
	return true;
}

/* Forgets the client and the pointers, without a word to the daemon: after
 * a fork (the connection is the parent's) or once the daemon is gone. */
static void torch_forget_all(void)
{
	torch_client = NULL;
	memset(torch_instance, 0, sizeof(torch_instance));
	free(torch_ptrs);
	torch_ptrs = NULL;
	torch_cap = torch_count = 0;
}

static void torch_atfork_prepare(void)
{
	pthread_mutex_lock(&torch_lock);
}

static void torch_atfork_parent(void)
{
	pthread_mutex_unlock(&torch_lock);
}

static void torch_atfork_child(void)
{
	/* The parent's connection and mappings are not the child's to use or
	 * close; the child connects afresh if it allocates. Threads of the
	 * parent may have held torch_users: not the child's. */
	torch_forget_all();
	pthread_rwlock_init(&torch_users, NULL);
	pthread_mutex_unlock(&torch_lock);
}

static void torch_install_atfork(void)
{
	pthread_atfork(torch_atfork_prepare, torch_atfork_parent, torch_atfork_child);
}

/* $GPUBROKER_TORCH_PROPORTION: 0 (auto pool) when unset or empty. */
static int torch_proportion(double *out)
{
	const char *text = getenv("GPUBROKER_TORCH_PROPORTION");
	char *end;

	*out = 0;
	if (!text || !*text)
		return 0;
	errno = 0;
	*out = strtod(text, &end);
	if (errno || *end || end == text || !(*out > 0 && *out <= 1))
		return error_set(
		    GPB_E_INVALID,
		    "GPUBROKER_TORCH_PROPORTION=%s: a proportion in (0, 1] is expected", text);
	return 0;
}

/* The daemon names devices by UUID: the one of CUDA ordinal @device here
 * (CUDA_VISIBLE_DEVICES renumbers them), or "" to register by index. */
static void torch_device_uuid(int device, char *uuid, size_t len)
{
	uuid[0] = '\0';
#if GPB_HAVE_CUDA_H
	static struct cuda_api api;
	static bool tried, loaded;
	char why[128], text[CUDA_UUID_LEN];
	CUdevice dev;

	if (!tried) {
		tried = true;
		loaded = cuda_api_load(&api, why, sizeof(why), NULL) == 0;
	}
	if (loaded && api.DeviceGet(&dev, device) == CUDA_SUCCESS &&
	    cuda_api_device_uuid(&api, dev, text) == CUDA_SUCCESS)
		snprintf(uuid, len, "%s", text);
#else
	(void)device;
	(void)len;
#endif
}

/* The client (connected if need be) and @device's instance (registered if
 * need be), under torch_lock. */
static int torch_instance_of(int device, uint64_t *out)
{
	struct gpb_register_opts opts = {0};
	char name[64], uuid[48];
	int rc;

	if (device < 0 || device >= TORCH_MAX_DEVICES)
		return error_set(GPB_E_INVALID, "gpb_torch: CUDA device %d outside 0-%d", device,
		                 TORCH_MAX_DEVICES - 1);
	pthread_once(&torch_fork_once, torch_install_atfork);
	if (torch_instance[device]) {
		*out = torch_instance[device];
		return 0;
	}
	rc = torch_proportion(&opts.proportion);
	if (rc < 0)
		return rc;
	if (!torch_client) {
		rc = gpb_connect(NULL, "torch", &torch_client);
		if (rc < 0) {
			torch_client = NULL;
			return rc;
		}
	}
	snprintf(name, sizeof(name), "torch-%ld", (long)getpid());
	opts.name = getenv("GPUBROKER_TORCH_NAME") && *getenv("GPUBROKER_TORCH_NAME")
	                ? getenv("GPUBROKER_TORCH_NAME")
	                : name;
	opts.group = getenv("GPUBROKER_TORCH_GROUP") && *getenv("GPUBROKER_TORCH_GROUP")
	                 ? getenv("GPUBROKER_TORCH_GROUP")
	                 : NULL;
	opts.device = device;
	torch_device_uuid(device, uuid, sizeof(uuid));
	if (uuid[0]) {
		opts.device = 0;
		opts.device_uuid = uuid;
	}
	rc = gpb_register(torch_client, &opts, &torch_instance[device]);
	if (rc < 0)
		return rc;
	*out = torch_instance[device];
	return 0;
}

/* After a failed call on @client (torch_users read-held, torch_lock not):
 * a client the daemon dropped is replaced next time (its memory went with
 * it). Leaves torch_users unlocked. */
static void torch_leave(gpb_client *client, int rc)
{
	pthread_rwlock_unlock(&torch_users);
	if (rc != GPB_E_DAEMON_GONE || !client)
		return;
	char msg[256];
	snprintf(msg, sizeof(msg), "%s", error_message());
	pthread_rwlock_wrlock(&torch_users);
	pthread_mutex_lock(&torch_lock);
	if (torch_client == client) { /* not replaced by another thread meanwhile */
		gpb_disconnect(torch_client);
		torch_forget_all();
	}
	pthread_mutex_unlock(&torch_lock);
	pthread_rwlock_unlock(&torch_users);
	error_set(rc, "%s", msg); /* gpb_disconnect may have cleared it */
}

/* torch_users read-held: the client and @device's instance (connected and
 * registered if need be, under torch_lock). */
static int torch_enter(int device, gpb_client **client, uint64_t *inst)
{
	pthread_mutex_lock(&torch_lock);
	int rc = torch_instance_of(device, inst);
	*client = torch_client;
	pthread_mutex_unlock(&torch_lock);
	return rc;
}

GPB_EXPORT void *gpb_torch_alloc(ssize_t size, int device, void *stream)
{
	struct gpb_allocation a;
	gpb_client *client;
	uint64_t inst;
	int rc;

	error_clear();
	if (size <= 0) {
		if (size < 0)
			error_set(GPB_E_INVALID, "gpb_torch_alloc: size %zd", size);
		return NULL;
	}
	pthread_rwlock_rdlock(&torch_users);
	rc = torch_enter(device, &client, &inst);
	/* In stream order on PyTorch's stream, as its own caching allocator
	 * serves blocks (a tensor used on another stream is PyTorch's
	 * record_stream's business): freed on the same stream, the block is
	 * served again at once (gpb_alloc_async). */
	if (rc == 0)
		rc = gpb_alloc_async(client, inst, (uint64_t)size, 0, stream, &a);
	if (rc == 0) {
		pthread_mutex_lock(&torch_lock);
		rc = torch_remember(a.ptr, a.id);
		pthread_mutex_unlock(&torch_lock);
		if (rc < 0) {
			char msg[256];
			snprintf(msg, sizeof(msg), "%s", error_message());
			gpb_free(client, a.id);
			rc = error_set(GPB_E_NOMEM, "%s", msg);
		}
	}
	torch_leave(client, rc);
	return rc < 0 ? NULL : a.ptr;
}

GPB_EXPORT void gpb_torch_free3(void *ptr, ssize_t size, void *stream)
{
	gpb_client *client;
	uint64_t id;
	bool known;
	int rc = 0;

	(void)size;
	error_clear();
	if (!ptr)
		return;
	pthread_rwlock_rdlock(&torch_users);
	pthread_mutex_lock(&torch_lock);
	client = torch_client;
	known = client && torch_forget(ptr, &id);
	pthread_mutex_unlock(&torch_lock);
	if (!known)
		error_set(GPB_E_NOT_FOUND, "gpb_torch_free: %p is not from gpb_torch_alloc", ptr);
	else
		rc = gpb_free_async(client, id, stream);
	if (rc == GPB_E_BACKEND) /* no event on @stream: free after the whole context */
		rc = gpb_free(client, id);
	torch_leave(client, rc);
}

GPB_EXPORT void gpb_torch_free(void *ptr, ssize_t size, int device, void *stream)
{
	(void)device;
	gpb_torch_free3(ptr, size, stream);
}

GPB_EXPORT int gpb_torch_mem_info(int device, uint64_t *instance, struct gpb_mem_info *out)
{
	gpb_client *client;
	uint64_t inst;
	int rc;

	error_clear();
	pthread_rwlock_rdlock(&torch_users);
	rc = torch_enter(device, &client, &inst);
	if (rc == 0 && out)
		rc = gpb_mem_info(client, inst, out);
	if (rc == 0 && instance)
		*instance = inst;
	torch_leave(client, rc);
	return rc;
}
