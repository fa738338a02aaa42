/*
 * fakecuda_internal.h - what the files of the fake libcuda.so.1 share.
 *
 * The fake is one library in four files (see the comment at the top of
 * fakecuda.c); this header declares the structures, the per-process settings
 * and the internal functions that more than one of them uses. It is no API:
 * everything here is hidden (the library is built with hidden visibility;
 * only FAKE_EXPORT functions are exported), and nothing outside
 * tests/fakecuda includes it.
 */
#ifndef GPUBROKER_FAKECUDA_INTERNAL_H
#define GPUBROKER_FAKECUDA_INTERNAL_H

#include <cuda.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#define FAKE_EXPORT    __attribute__((visibility("default")))
#define FAKE_MAGIC     "FAKECUDA"
#define FAKE_PTR_MAGIC "FAKEPPTR" /* pool pointer export data: not an IPC handle */

/* ---- this process ---------------------------------------------------------- */

struct fake_ctx {
	uint32_t magic;
	int device;
	int retains;  /* a primary context's retain count */
	bool primary; /* else made by cuCtxCreate */
	/* Created and not destroyed since: a primary context is created by
	 * the retain that finds it inactive and destroyed by its reset or its
	 * release to zero, which destroy everything made in it. */
	bool active;
	uint64_t id;                /* cuCtxGetId: new each time the context is created */
	struct fake_ctx *next_made; /* cuCtxCreate's, all of them (fakecuda_ctx.c) */
};

struct fake_mem {
	struct fake_mem *next;
	uintptr_t base;
	uint64_t size;
	uint64_t serial;
	int device;
	bool imported;
	unsigned opens;       /* imported: cuIpcOpenMemHandle calls not closed yet */
	uint64_t pool;        /* the memory pool's id it came from; 0 = none */
	struct fake_ctx *ctx; /* made in: destroyed with it */
};

/* What an IPC handle (and a pool pointer's export data) holds. */
struct fake_handle {
	char magic[8];
	uint64_t serial;
	uint64_t size;
	int32_t device;
	int32_t owner;
};

/* Guards this process's lists (memory, host registrations, injected
 * failures, primary contexts) and cuInit (fakecuda.c). */
extern pthread_mutex_t fake_lock;

/* The settings cuInit reads from the environment (fakecuda_ctx.c). */
extern bool fake_initialized;
extern int fake_devices;
extern uint64_t fake_memory;
extern bool fake_clean;
extern bool fake_no_pools;

/* ---- fakecuda_ctx.c -------------------------------------------------------- */

/* The injected failure of this call of name, or CUDA_SUCCESS. */
CUresult fake_injected(const char *name);

/* This thread's current context, or NULL. */
struct fake_ctx *fake_current(void);

#define NEED_INIT()                                                                                \
	do {                                                                                       \
		if (!fake_initialized)                                                             \
			return CUDA_ERROR_NOT_INITIALIZED;                                         \
	} while (0)

#define NEED_CONTEXT()                                                                             \
	do {                                                                                       \
		NEED_INIT();                                                                       \
		if (!fake_current())                                                               \
			return CUDA_ERROR_INVALID_CONTEXT;                                         \
		if (!fake_current()->active)                                                       \
			return CUDA_ERROR_CONTEXT_IS_DESTROYED;                                    \
	} while (0)

#define INJECT(name)                                                                               \
	do {                                                                                       \
		CUresult injected_ = fake_injected(name);                                          \
		if (injected_ != CUDA_SUCCESS)                                                     \
			return injected_;                                                          \
	} while (0)

/* ---- fakecuda.c ------------------------------------------------------------ */

/* Opens (creating) the state directory and maps its state file. */
int fake_open_state(void);

/* A new serial from the state file, unique across processes. */
uint64_t fake_new_serial(void);

/* The mapping of this process that holds [p, p + n), or NULL. Lock held. */
struct fake_mem *fake_mem_find(uintptr_t p, uint64_t n);

/* Device memory on dev (of memory pool `pool`, or 0): cuMemAlloc's core. */
CUresult fake_mem_alloc(int dev, size_t size, uint64_t pool, CUdeviceptr *dptr);

/* Maps another process's allocation h (of pool `pool`, or 0): the core of
 * cuIpcOpenMemHandle and cuMemPoolImportPointer. */
CUresult fake_import(const struct fake_handle *hp, uint64_t pool, CUdeviceptr *pdptr);

/* Counts a violation in the shared state (what fakecuda_violations() says)
 * and prints why on stderr. */
void fake_violation(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Destroys every allocation and mapping this process made in ctx (a reset
 * or destroyed context): their addresses stay reserved, inaccessible. */
void fake_mem_destroy_ctx(struct fake_ctx *ctx);

/* ---- fakecuda_host.c ------------------------------------------------------- */

/* Whether [device_side, + n) is device memory or registered, mapped host
 * memory of this process: CUDA_SUCCESS or CUDA_ERROR_INVALID_VALUE. */
CUresult fake_copy_valid(uintptr_t device_side, size_t n);

/* ---- fakecuda_async.c ------------------------------------------------------ */

/* Runs the work queued in ctx: all of it, or (legacy default stream
 * semantics, for the synchronous calls) that of its blocking streams. */
void fake_async_drain(struct fake_ctx *ctx, bool blocking_only);
/* Drops the work queued in ctx (it is being destroyed). */
void fake_async_forget_ctx(struct fake_ctx *ctx);
/* Memory [base, + size) is closed or freed by `what`: work still queued on
 * it is a violation each, and dropped. */
void fake_async_closing(uintptr_t base, uint64_t size, const char *what);

/* ---- for tests only (found with dlsym) ------------------------------------- */

FAKE_EXPORT uint64_t fakecuda_violations(void);
FAKE_EXPORT unsigned fakecuda_open_mappings(void);
FAKE_EXPORT unsigned fakecuda_host_registrations(void);
FAKE_EXPORT unsigned fakecuda_pending_work(void);

#endif
