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
	bool vmm;       /* a cuMemMap'ed range made accessible (fakecuda_vmm.c):
	                   neither cuMemFree nor the IPC calls take it */
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
extern bool fake_no_vmm;    /* FAKECUDA_NO_VMM=1: no virtual memory management */
extern bool fake_no_vmm_fd; /* FAKECUDA_NO_VMM_FD=1: VMM, but no POSIX descriptors */

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

/* Links a mapping into (or out of) this process's list, which
 * fake_mem_find searches: the VMM ranges made accessible. Lock held. */
void fake_mem_link(struct fake_mem *m);
void fake_mem_unlink(struct fake_mem *m);

/* VMM physical memory in the state file: held by every process that has a
 * handle or a mapping of it, and counted by cuMemGetInfo until the last of
 * them let go (or died). fake_vmm_record_new: the creator holds it;
 * CUDA_ERROR_OUT_OF_MEMORY when the device is full. fake_vmm_hold: this
 * process takes (hold) or drops its hold on serial; taking one on a record
 * that is gone revives it (a descriptor kept the memory alive). */
CUresult fake_vmm_record_new(int dev, uint64_t size, uint64_t *serial);
void fake_vmm_hold(uint64_t serial, int dev, uint64_t size, bool hold);

/* ---- for tests only (found with dlsym) ------------------------------------- */

FAKE_EXPORT uint64_t fakecuda_violations(void);
FAKE_EXPORT unsigned fakecuda_open_mappings(void);
FAKE_EXPORT unsigned fakecuda_host_registrations(void);
/* Calls of entry point name in this process (those that can be injected). */
FAKE_EXPORT uint64_t fakecuda_calls(const char *name);
/* VMM physical allocations live in the state file, of every process. */
FAKE_EXPORT unsigned fakecuda_vmm_live(void);

#endif
