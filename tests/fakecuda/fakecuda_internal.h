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
	int retains;
};

struct fake_mem {
	struct fake_mem *next;
	uintptr_t base;
	uint64_t size;
	uint64_t serial;
	int device;
	bool imported;
	unsigned opens; /* imported: cuIpcOpenMemHandle calls not closed yet */
	uint64_t pool;  /* the memory pool's id it came from; 0 = none */
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

/* ---- for tests only (found with dlsym) ------------------------------------- */

FAKE_EXPORT uint64_t fakecuda_violations(void);
FAKE_EXPORT unsigned fakecuda_open_mappings(void);
FAKE_EXPORT unsigned fakecuda_host_registrations(void);

#endif
