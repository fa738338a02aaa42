/*
 * cuda.c - the library's side of the cuda backend: opening slabs from the
 * descriptor of their memory (transport "vmm", cuda_vmm.c), from their
 * legacy IPC handles (transport "ipc") or, with allocator "async", as
 * pointers of a memory pool the daemon shares, and the host copy helpers.
 *
 * The driver is loaded at run time (common/cudaapi.c), once per process and
 * only when a daemon with the cuda backend hands this process a slab: the
 * library never links libcuda, and a process that never touches device
 * memory never loads it.
 *
 * Which device: the daemon sends its UUID with every handle, and the slab is
 * opened on the local device with that UUID (CUDA_VISIBLE_DEVICES may
 * renumber devices in this process); without one, the daemon's index is
 * taken as the CUDA ordinal.
 *
 * Which context: the process's one context of the device (cuda_ctx.c): the
 * one current on the calling thread when the process mapped its first slab
 * there (the application's own context), else the device's primary context,
 * retained until the last mapping in it is closed. Every driver call runs
 * with that context pushed and popped again (cuda_in_context), so the
 * caller's current context is left as it was. One handle is opened once per
 * process (the slab cache in slab.c) and in that one context, as CUDA
 * requires: a second context's open fails. A mapping whose context was reset
 * or destroyed is dead (cuda_alive): it is never closed (the driver took it)
 * and its pointers get GPB_E_CONTEXT_RESET.
 *
 * Ordered frees: before memory is let go (a mapping closed, or the daemon
 * told a range is free) the library waits for the work queued in the
 * mapping's context (cuda_finish: cuCtxSynchronize), or, for
 * gpb_free_async, for an event recorded on the caller's stream
 * (cuda_fence).
 *
 * Pool slabs (allocator "async", "pool": true in the reply): the memory pool
 * of the slab's user on the device comes as a descriptor with each slab
 * handle; the process imports each pool once (cuMemPoolImportFromShareableHandle;
 * pools told apart by the id the daemon names each with: the driver's pool
 * descriptors are all descriptors of /dev/nvidiactl, one inode for every
 * pool, so the file tells nothing) and keeps it while any
 * mapping from it lives, the descriptors of later slabs being closed unused. Each slab is
 * cuMemPoolImportPointer of the pool and its export data, released with cuMemFree, which is how an
 * importer lets go of a pool pointer.
 */
#include "error.h"
#include "slab.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_ctx.h"
#include "cuda_vmm.h"
#include "cudaapi.h"

static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;
static struct cuda_api cuda;
static bool cuda_ok;
static char cuda_why[256];

static void cuda_atfork_child(void);

static void cuda_load(void)
{
	cuda_ok = cuda_api_load(&cuda, cuda_why, sizeof(cuda_why), NULL) == 0;
	pthread_atfork(NULL, NULL, cuda_atfork_child);
}

/* GPB_E_BACKEND with "what failed: CUDA_ERROR_X (description)". */
static int cuda_error(CUresult rc, const char *what)
{
	char name[64];
	const char *desc = cuda_api_error_string(&cuda, rc);
	return error_set(GPB_E_BACKEND, "%s failed: %s%s%s%s", what,
	                 cuda_api_error_name(&cuda, rc, name, sizeof(name)), *desc ? " (" : "",
	                 desc, *desc ? ")" : "");
}

/* A legacy handle that does not open: the driver's word, and the two
 * limits of legacy IPC that a broker's clients run into (docs/cuda.md). */
static int cuda_ipc_error(CUresult rc)
{
	char name[64];
	const char *desc = cuda_api_error_string(&cuda, rc);
	return error_set(GPB_E_BACKEND,
	                 "cuIpcOpenMemHandle failed: %s%s%s%s; legacy CUDA IPC opens only in "
	                 "processes of the daemon's user and PID namespace (docs/cuda.md)",
	                 cuda_api_error_name(&cuda, rc, name, sizeof(name)), *desc ? " (" : "",
	                 desc, *desc ? ")" : "");
}

/* A memory pool imported from a daemon, shared by the mappings from it.
 * A daemon keeps one pool per user and device and sends a descriptor of it
 * with each slab, and the pool's id (random: a process connected to two
 * daemons holds two pools of one device, which the id tells apart). */
struct cuda_pool {
	struct cuda_pool *next;
	CUdevice dev;
	uint64_t id;
	CUmemoryPool pool;
	unsigned long maps;
};

static pthread_mutex_t cuda_pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cuda_pool *cuda_pools;

/* A forked child maps afresh (issue 25; slab.c): the parent's pool
 * imports, contexts and kept descriptors are no state of its driver. The
 * records stay with the parent's mappings, never closed in the child (the
 * slab cache frees them unclosed); the locks, which a thread of the parent
 * may have held, are made anew. */
static void cuda_atfork_child(void)
{
	cuda_pools = NULL;
	pthread_mutex_init(&cuda_pool_lock, NULL);
	cuda_ctx_forget_all();
	cuda_vmm_forget_all();
}

struct cuda_mapping {
	CUdevice dev;
	struct cuda_ctx *cctx; /* the process's context of dev (cuda_ctx.c) */
	CUdeviceptr ptr;
	struct cuda_pool *pool;             /* a pool pointer's: its pool; else NULL */
	size_t vmm_mapped;                  /* transport vmm: the bytes mapped; else 0 */
	uint8_t vmm_tag[PROTO_HANDLE_SIZE]; /* vmm: the slab's handle (cuda_vmm_keep) */
};

/* A reference to pool id on the device, imported from fd when the process
 * has not imported it (a context of the device current): 0 or GPB_E_*. */
static int cuda_pool_get(CUdevice dev, uint64_t id, int fd, struct cuda_pool **out)
{
	struct cuda_pool *p;
	int err = 0;

	pthread_mutex_lock(&cuda_pool_lock);
	for (p = cuda_pools; p; p = p->next) {
		if (p->dev == dev && p->id == id)
			break;
	}
	if (p) {
		p->maps++;
		*out = p;
		goto out;
	}
	if (fd < 0) {
		err = error_set(GPB_E_PROTOCOL, "a pool slab came without the pool's descriptor");
		goto out;
	}
	p = calloc(1, sizeof(*p));
	if (!p) {
		err = error_set(GPB_E_NOMEM, "out of memory");
		goto out;
	}
	CUresult rc = cuda.MemPoolImportFromShareableHandle(
	    &p->pool, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
	if (rc != CUDA_SUCCESS) {
		free(p);
		err = cuda_error(rc, "cuMemPoolImportFromShareableHandle");
		goto out;
	}
	p->dev = dev;
	p->id = id;
	p->maps = 1;
	p->next = cuda_pools;
	cuda_pools = p;
	*out = p;
out:
	pthread_mutex_unlock(&cuda_pool_lock);
	return err;
}

/* Drops a reference (context current); the last one destroys the import. */
static void cuda_pool_put(struct cuda_pool *p)
{
	pthread_mutex_lock(&cuda_pool_lock);
	if (--p->maps > 0) {
		pthread_mutex_unlock(&cuda_pool_lock);
		return;
	}
	for (struct cuda_pool **pp = &cuda_pools; *pp; pp = &(*pp)->next) {
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	}
	pthread_mutex_unlock(&cuda_pool_lock);
	cuda.MemPoolDestroy(p->pool);
	free(p);
}

/* Maps the slab's memory into m->ptr (m's context current). */
static int cuda_import(struct cuda_mapping *m, const uint8_t *handle, int fd,
                       const struct slab_target *where, uint64_t size)
{
	CUresult rc;
	if (where->vmm) {
		const char *what;
		if (!cuda.has_vmm)
			return error_set(GPB_E_BACKEND,
			                 "the daemon serves VMM memory (transport vmm), but this "
			                 "process's CUDA driver has no virtual memory management");
		CUmemGenericAllocationHandle h;
		rc = cuda_vmm_keep(&cuda, handle, fd, &h, &what);
		if (rc == CUDA_ERROR_NOT_FOUND && fd < 0)
			return error_set(GPB_E_PROTOCOL, "a vmm slab came without its descriptor");
		if (rc != CUDA_SUCCESS)
			return cuda_error(rc, what);
		rc = cuda_vmm_map(&cuda, m->dev, h, size, &m->ptr, &m->vmm_mapped, &what);
		if (rc != CUDA_SUCCESS) {
			cuda_vmm_unkeep(&cuda, handle);
			return cuda_error(rc, what);
		}
		memcpy(m->vmm_tag, handle, PROTO_HANDLE_SIZE);
		return 0;
	}
	bool pool = where->pool;
	if (!pool) {
		CUipcMemHandle h;
		memcpy(&h, handle, sizeof(h));
		rc = cuda.IpcOpenMemHandle(&m->ptr, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
		return rc == CUDA_SUCCESS ? 0 : cuda_ipc_error(rc);
	}
	if (!cuda.has_pools)
		return error_set(GPB_E_BACKEND,
		                 "the daemon serves pool memory (allocator \"async\"), but this "
		                 "process's CUDA driver has no memory pools");
	int err = cuda_pool_get(m->dev, where->pool_id, fd, &m->pool);
	if (err < 0)
		return err;
	CUmemPoolPtrExportData data;
	memcpy(&data, handle, sizeof(data));
	rc = cuda.MemPoolImportPointer(&m->ptr, m->pool->pool, &data);
	if (rc == CUDA_SUCCESS)
		return 0;
	cuda_pool_put(m->pool);
	m->pool = NULL;
	return cuda_error(rc, "cuMemPoolImportPointer");
}

/* Undoes cuda_import() (m's context current; a cuda_context_fn). */
static int cuda_unimport(struct cuda_mapping *m, void *unused)
{
	(void)unused;
	if (m->vmm_mapped) {
		cuda_vmm_unmap(&cuda, m->ptr, m->vmm_mapped);
		cuda_vmm_unkeep(&cuda, m->vmm_tag);
		m->vmm_mapped = 0;
		return 0;
	}
	if (!m->pool) {
		cuda.IpcCloseMemHandle(m->ptr);
		return 0;
	}
	cuda.MemFree(m->ptr);
	cuda_pool_put(m->pool);
	m->pool = NULL;
	return 0;
}

/* The local device the daemon means. */
static int cuda_find_device(const struct slab_target *where, CUdevice *out)
{
	int n = 0;
	CUresult rc;

	if (!where->device_uuid) {
		rc = cuda.DeviceGet(out, where->device);
		return rc == CUDA_SUCCESS ? 0 : cuda_error(rc, "cuDeviceGet");
	}
	rc = cuda.DeviceGetCount(&n);
	if (rc != CUDA_SUCCESS)
		return cuda_error(rc, "cuDeviceGetCount");
	for (int i = 0; i < n; i++) {
		char text[CUDA_UUID_LEN];
		CUdevice dev;

		if (cuda.DeviceGet(&dev, i) != CUDA_SUCCESS ||
		    cuda_api_device_uuid(&cuda, dev, text) != CUDA_SUCCESS)
			continue;
		if (strcmp(text, where->device_uuid) == 0) {
			*out = dev;
			return 0;
		}
	}
	return error_set(GPB_E_BACKEND,
	                 "the daemon's device %d (%s) is not visible to this process "
	                 "(CUDA_VISIBLE_DEVICES?)",
	                 where->device, where->device_uuid);
}

/* A reference to the process's context of m->dev (cuda_ctx.h). */
static int cuda_pick_context(struct cuda_mapping *m)
{
	const char *what = "";
	CUresult rc = cuda_ctx_get(&cuda, m->dev, &m->cctx, &what);

	return rc == CUDA_SUCCESS ? 0 : cuda_error(rc, what);
}

/* Frees a mapping record, letting go of its context. */
static void cuda_mapping_free(struct cuda_mapping *m)
{
	if (m->cctx)
		cuda_ctx_put(&cuda, m->cctx);
	free(m);
}

/* Driver calls to make in a mapping's context: 0 or a GPB_E_* code. */
typedef int (*cuda_context_fn)(struct cuda_mapping *m, void *arg);

/*
 * Runs @fn with m's context pushed on the calling thread, then pops it, so
 * that the caller's current context is left as it was: every driver call
 * of this file that needs a context goes through here. When the push
 * fails @fn does not run, and the result is GPB_E_BACKEND, with its
 * message recorded only when @report (closing has nobody to tell).
 */
static int cuda_in_context(struct cuda_mapping *m, bool report, cuda_context_fn fn, void *arg)
{
	CUcontext popped;
	CUresult rc = cuda.CtxPushCurrent(m->cctx->ctx);
	int err;

	if (rc != CUDA_SUCCESS)
		return report ? cuda_error(rc, "cuCtxPushCurrent") : GPB_E_BACKEND;
	err = fn(m, arg);
	cuda.CtxPopCurrent(&popped);
	return err;
}

/* Loads the driver (once) and a mapping record: 0 or a GPB_E_* code. */
static int cuda_mapping_new(struct cuda_mapping **out)
{
	pthread_once(&cuda_once, cuda_load);
	if (!cuda_ok)
		return error_set(GPB_E_BACKEND, "the daemon serves CUDA memory, but %s", cuda_why);
	*out = calloc(1, sizeof(**out));
	return *out ? 0 : error_set(GPB_E_NOMEM, "out of memory");
}

/* What cuda_open() maps. */
struct cuda_open_args {
	const uint8_t *handle;
	int fd;
	const struct slab_target *where;
	uint64_t size;
};

/* Imports the slab and checks its extent (a cuda_context_fn). */
static int cuda_open_here(struct cuda_mapping *m, void *arg)
{
	const struct cuda_open_args *a = arg;
	CUdeviceptr range_base = 0;
	size_t range_size = 0;
	CUresult rc;
	int err;

	err = cuda_import(m, a->handle, a->fd, a->where, a->size);
	if (err < 0 || m->vmm_mapped)
		return err; /* vmm: the range is the one this process reserved */
	/* The handle maps a whole driver allocation: a block the driver
	 * packed small allocations into, or a pool's segment, which may start
	 * before the slab and hold more. It must contain the slab the daemon
	 * describes, or offsets would run past what is mapped. */
	rc = cuda.MemGetAddressRange(&range_base, &range_size, m->ptr);
	if (rc == CUDA_SUCCESS && range_base <= m->ptr && m->ptr - range_base <= range_size &&
	    a->size <= range_size - (m->ptr - range_base))
		return 0;
	cuda_unimport(m, NULL);
	return rc != CUDA_SUCCESS
	           ? cuda_error(rc, "cuMemGetAddressRange")
	           : error_set(GPB_E_BACKEND,
	                       "the driver mapped %zu bytes at 0x%llx for a slab of %llu bytes "
	                       "at 0x%llx: it does not hold the slab",
	                       range_size, (unsigned long long)range_base,
	                       (unsigned long long)a->size, (unsigned long long)m->ptr);
}

static int cuda_open(const uint8_t *handle, int fd, const struct slab_target *where, uint64_t size,
                     void **base, void **priv)
{
	struct cuda_open_args args = {.handle = handle, .fd = fd, .where = where, .size = size};
	struct cuda_mapping *m;
	int err;

	err = cuda_mapping_new(&m);
	if (err < 0)
		return err;
	err = cuda_find_device(where, &m->dev);
	if (err == 0)
		err = cuda_pick_context(m);
	if (err == 0)
		err = cuda_in_context(m, true, cuda_open_here, &args);
	if (err < 0) {
		cuda_mapping_free(m);
		return err;
	}
	*base = (void *)(uintptr_t)m->ptr;
	*priv = m;
	return 0;
}

/* A forked child's inherited mapping (slab.c): its records freed, no
 * driver call (the pool import and the context are the parent's). */
static void cuda_forget(void *priv)
{
	struct cuda_mapping *m = priv;
	if (m->pool) {
		pthread_mutex_lock(&cuda_pool_lock);
		bool last = --m->pool->maps == 0;
		pthread_mutex_unlock(&cuda_pool_lock);
		if (last)
			free(m->pool);
	}
	if (m->cctx)
		cuda_ctx_forget(m->cctx);
	free(m);
}

static void cuda_close(void *base, uint64_t size, void *priv)
{
	(void)base;
	(void)size;
	struct cuda_mapping *m = priv;

	/* Nothing to report to: a failed close leaves the mapping to the
	 * process's exit, which the driver cleans up. A dead context took
	 * the mapping with it: only a pool import's reference is left. */
	if (cuda_ctx_alive(&cuda, m->cctx))
		cuda_in_context(m, false, cuda_unimport, NULL);
	else if (m->pool)
		cuda_pool_put(m->pool);
	else if (m->vmm_mapped)
		/* The mapping may outlive the context (VMM ranges are the
		 * process's): undone without one, harmless if it is gone. */
		cuda_unimport(m, NULL);
	cuda_mapping_free(m);
}

/* What cuda_copy() copies. */
struct cuda_copy_args {
	void *dst;
	const void *src;
	size_t n;
	bool to_device;
	void *stream;
};

/* Queues the copy on its stream (a cuda_context_fn). */
static int cuda_copy_here(struct cuda_mapping *m, void *arg)
{
	const struct cuda_copy_args *a = arg;
	CUresult rc;

	(void)m;
	if (a->to_device)
		rc = cuda.MemcpyHtoDAsync((CUdeviceptr)(uintptr_t)a->dst, a->src, a->n,
		                          (CUstream)a->stream);
	else
		rc = cuda.MemcpyDtoHAsync(a->dst, (CUdeviceptr)(uintptr_t)a->src, a->n,
		                          (CUstream)a->stream);
	if (rc != CUDA_SUCCESS)
		return cuda_error(rc, a->to_device ? "cuMemcpyHtoDAsync" : "cuMemcpyDtoHAsync");
	return 0;
}

static int cuda_copy(void *priv, void *dst, const void *src, size_t n, bool to_device, void *stream)
{
	struct cuda_copy_args args = {
	    .dst = dst, .src = src, .n = n, .to_device = to_device, .stream = stream};

	return cuda_in_context(priv, true, cuda_copy_here, &args);
}

/*
 * Host memory is registered in the calling thread's current context, or in
 * device 0's primary context (retained until unregistered), and PORTABLE:
 * page-locked for every context, whichever device they are on.
 */
/* What cuda_host_register() registers. */
struct cuda_register_args {
	void *p;
	size_t size;
	bool mapped;
};

/* Page-locks (and maps) the memory (a cuda_context_fn). */
static int cuda_host_register_here(struct cuda_mapping *m, void *arg)
{
	const struct cuda_register_args *a = arg;
	CUresult rc;
	int err;

	rc = cuda.MemHostRegister(a->p, a->size,
	                          CU_MEMHOSTREGISTER_PORTABLE |
	                              (a->mapped ? CU_MEMHOSTREGISTER_DEVICEMAP : 0));
	if (rc != CUDA_SUCCESS)
		return cuda_error(rc, "cuMemHostRegister");
	if (!a->mapped)
		return 0;
	rc = cuda.MemHostGetDevicePointer(&m->ptr, a->p, 0);
	if (rc == CUDA_SUCCESS)
		return 0;
	err = cuda_error(rc, "cuMemHostGetDevicePointer");
	cuda.MemHostUnregister(a->p);
	return err;
}

static int cuda_host_register(void *p, size_t size, bool mapped, void **device_ptr, void **priv)
{
	struct cuda_register_args args = {.p = p, .size = size, .mapped = mapped};
	struct cuda_mapping *m;
	CUresult rc;
	int err;

	err = cuda_mapping_new(&m);
	if (err < 0)
		return err;
	/* The process's context of the current context's device, or of
	 * device 0. */
	CUcontext cur = NULL;
	if (cuda.CtxGetCurrent(&cur) != CUDA_SUCCESS || !cur ||
	    cuda.CtxGetDevice(&m->dev) != CUDA_SUCCESS) {
		rc = cuda.DeviceGet(&m->dev, 0);
		if (rc != CUDA_SUCCESS) {
			free(m);
			return cuda_error(rc, "cuDeviceGet");
		}
	}
	err = cuda_pick_context(m);
	if (err == 0)
		err = cuda_in_context(m, true, cuda_host_register_here, &args);
	if (err < 0) {
		cuda_mapping_free(m);
		return err;
	}
	*device_ptr = mapped ? (void *)(uintptr_t)m->ptr : NULL;
	*priv = m;
	return 0;
}

/* Lets go of the page-locking (a cuda_context_fn). */
static int cuda_host_unregister_here(struct cuda_mapping *m, void *p)
{
	(void)m;
	cuda.MemHostUnregister(p);
	return 0;
}

static void cuda_host_unregister(void *p, void *priv)
{
	struct cuda_mapping *m = priv;

	if (cuda_ctx_alive(&cuda, m->cctx))
		cuda_in_context(m, false, cuda_host_unregister_here, p);
	cuda_mapping_free(m);
}

/* ---- the mapping's context and its queued work -------------------------------- */

static bool cuda_alive(void *priv)
{
	return cuda_ctx_alive(&cuda, ((struct cuda_mapping *)priv)->cctx);
}

/* A failure (a sticky error of the context, say) leaves nothing queued
 * either: the work is over, run or not. */
static void cuda_finish(void *priv)
{
	cuda_ctx_sync(&cuda, ((struct cuda_mapping *)priv)->cctx);
}

static void cuda_finish_all(void)
{
	/* Nothing mapped yet: nothing to wait for, and no driver to load. */
	if (cuda_ok)
		cuda_ctx_sync_all(&cuda);
}

static int cuda_fence(void *priv, void *stream, void **fence)
{
	struct cuda_mapping *m = priv;
	const char *what = "";
	struct cuda_fence *f;
	CUresult rc = cuda_fence_record(&cuda, m->cctx, (CUstream)stream, &f, &what);

	if (rc != CUDA_SUCCESS)
		return cuda_error(rc, what);
	*fence = f;
	return f && !cuda_fence_ordered(f) ? 1 : 0;
}

static const void *cuda_fence_domain(void *priv)
{
	return ((struct cuda_mapping *)priv)->cctx;
}

static bool cuda_capturing(void *priv, void *stream)
{
	struct cuda_mapping *m = priv;

	return cuda_ok && cuda_stream_capturing(&cuda, m ? m->cctx : NULL, (CUstream)stream);
}

static bool cuda_fence_done_fn(void *fence)
{
	return cuda_fence_done(&cuda, fence);
}

static void cuda_fence_wait_fn(void *fence)
{
	cuda_fence_wait(&cuda, fence);
}

static void cuda_fence_free_fn(void *fence)
{
	cuda_fence_free(&cuda, fence);
}

static void cuda_fence_forget_fn(void *fence)
{
	cuda_fence_forget(fence);
}

const struct slab_opener slab_cuda_opener = {
    .backend = PROTO_V_BACKEND_CUDA,
    .needs_fd = 0,
    .close_first = 1,
    .open = cuda_open,
    .close = cuda_close,
    .forget = cuda_forget,
    .copy = cuda_copy,
    .host_register = cuda_host_register,
    .host_unregister = cuda_host_unregister,
    .alive = cuda_alive,
    .finish = cuda_finish,
    .finish_all = cuda_finish_all,
    .fence = cuda_fence,
    .fence_done = cuda_fence_done_fn,
    .fence_wait = cuda_fence_wait_fn,
    .fence_free = cuda_fence_free_fn,
    .fence_forget = cuda_fence_forget_fn,
    .capturing = cuda_capturing,
    .fence_domain = cuda_fence_domain,
};
