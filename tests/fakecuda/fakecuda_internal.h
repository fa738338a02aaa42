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
	/* A block shared by several allocations (fakecuda_strict.c): a 2 MiB
	 * block of small cuMemAlloc allocations, or a pool's segment. */
	bool packed;
	uint64_t bump; /* packed, own: bytes handed out from the start */
	unsigned live; /* packed, own: allocations in it not freed yet */
	bool vmm;      /* a cuMemMap'ed range made accessible (fakecuda_vmm.c): neither
	                  cuMemFree nor the IPC calls take it */
};

/* What an IPC handle (and a pool pointer's export data) holds. */
struct fake_handle {
	char magic[8];
	uint64_t serial;
	uint64_t size;
	int32_t device;
	int32_t owner;
	uint64_t offset; /* of the allocation in the block the handle maps */
};

/* Guards this process's lists (memory, host registrations, injected
 * failures, primary contexts) and cuInit (fakecuda.c). */
/* Shared by fakecuda.c and fakecuda_ipc.c (legacy IPC). */
void fake_unmap(struct fake_mem *m, bool reserve);
void fake_mem_path(uint64_t serial, char *out, size_t len);
bool fake_pid_alive(int32_t pid);
CUresult fake_unimport(CUdeviceptr dptr);
void fake_unimport_record(uint64_t serial);
extern pthread_mutex_t fake_lock;

/* The settings cuInit reads from the environment (fakecuda_ctx.c). */
extern bool fake_initialized;
extern int fake_devices;
extern uint64_t fake_memory;
extern bool fake_clean;
extern bool fake_no_pools;
extern bool fake_no_vmm;    /* FAKECUDA_NO_VMM=1: no virtual memory management */
extern bool fake_no_vmm_fd; /* FAKECUDA_NO_VMM_FD=1: VMM, but no POSIX descriptors */

/* ---- fakecuda_strict.c: what makes the fake refuse what a driver refuses ---- */

#define FAKE_BLOCK (2u << 20) /* cuMemAlloc packs smaller allocations into blocks this big */

/* Reads FAKECUDA_IPC_POLICY, FAKECUDA_COMPUTE_MODE, FAKECUDA_CONTEXT_OVERHEAD,
 * FAKECUDA_MIG (cuInit, fake_lock held). */
void fake_strict_settings(void);
/* FAKECUDA_MIG=1: the devices are MIG instances. */
extern bool fake_mig;
extern bool fake_mps;
/* FAKECUDA_NO_RDMA=1: no GPUDirect RDMA with VMM; FAKECUDA_NO_VMM_EXPORT=1: VMM
 * advertised, cuMemExportToShareableHandle refused (fakecuda_strict.c). */
extern bool fake_no_rdma,
    fake_no_vmm_export; /* FAKECUDA_MPS=1: every process is an MPS client (fakecuda_strict.c) */
/* The compute mode of dev (FAKECUDA_COMPUTE_MODE). */
int fake_compute_mode(int dev);
/* The first retain of dev's primary context in this process (the context's
 * memory is charged to the device; the compute mode may refuse it), and the
 * last release. */
CUresult fake_ctx_opened(int dev);
void fake_ctx_closed(int dev);
/* An allocation carved from a shared block: cuMemAlloc under FAKE_BLOCK
 * (pool 0), or any allocation of memory pool `pool` (its segments). */
CUresult fake_sub_alloc(int dev, size_t size, uint64_t pool, CUdeviceptr *dptr);
/* Frees the carved allocation at p, the block with the last one: true when p
 * was one (*rc set), false when it is none. */
bool fake_sub_free(CUdeviceptr p, CUresult *rc);
/* The carved allocation of this process that holds p: 0 and its range, or -1.
 * Lock held. */
int fake_sub_range(uintptr_t p, uintptr_t *base, uint64_t *size, struct fake_mem **block);
/* Whether this process may open a legacy handle of the allocation whose owner
 * had uid and PID namespace pidns: CUDA_SUCCESS or the refusal. */
CUresult fake_ipc_allowed(uint32_t uid, uint64_t pidns);
/* This process's PID namespace (the inode of /proc/self/ns/pid). */
uint64_t fake_pidns(void);
/* This process's PID namespace, FAKECUDA_PIDNS left aside. */
uint64_t fake_real_pidns(void);
/* Whether /proc is another PID namespace's than this process's. */
bool fake_proc_foreign(void);

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

/* Walks this process's mappings: the first (m NULL) or the one after m. Lock
 * held. */
struct fake_mem *fake_mem_next(struct fake_mem *m);

/* Frees this process's own allocation m (still linked). */
void fake_mem_drop(struct fake_mem *m);

/* The owner's uid and PID namespace of allocation serial; false when gone. */
bool fake_mem_owner(uint64_t serial, uint32_t *uid, uint64_t *pidns);

/* Charges (open) or uncharges this process's context on dev: bytes of its
 * memory; an exclusive-process mode refuses a second process. */
CUresult fake_ctx_charge(int dev, bool open, uint64_t bytes, int mode);

/* Maps another process's allocation h (of pool `pool`, or 0): the core of
 * cuIpcOpenMemHandle and cuMemPoolImportPointer. */
CUresult fake_import(const struct fake_handle *hp, uint64_t pool, CUdeviceptr *pdptr);

/* Links a mapping into (or out of) this process's list, which
 * fake_mem_find searches: the VMM ranges made accessible. Lock held. */
void fake_mem_link(struct fake_mem *m);
void fake_mem_unlink(struct fake_mem *m);

/* ---- the control file (fakecuda.c): the fake's /dev/nvidiactl ---------------- */

/* Every exported descriptor (a pool's, VMM memory's) is a descriptor of one
 * file of the state directory, as every one the driver exports is one of
 * /dev/nvidiactl: each export opens a new open file description of it, and
 * what it names is its file offset (FAKE_CTL_CODE), which travels with the
 * description over SCM_RIGHTS. Offset 0, what each process's own
 * descriptor of the file has since cuInit, names nothing. */
#define FAKE_CTL_VMM  1u
#define FAKE_CTL_POOL 2u
#define FAKE_CTL_CODE(serial, dev, kind)                                                           \
	(((uint64_t)(serial) << 8) | ((uint64_t)(dev) << 4) | (kind))
#define FAKE_CTL_SERIAL(code) ((code) >> 8)
#define FAKE_CTL_DEVICE(code) ((int)(((code) >> 4) & 15))
#define FAKE_CTL_KIND(code)   ((unsigned)((code)&15))
/* A new descriptor of the control file naming code, or -1. */
int fake_ctl_export(uint64_t code);
/* What descriptor fd names: 0 and *code, or -1 when it is no descriptor of
 * the control file. */
int fake_ctl_code(int fd, uint64_t *code);
/* The file of VMM physical memory serial in the state directory. */
void fake_vmm_path(uint64_t serial, char *out, size_t len);
/* Frees the record of VMM memory nobody holds, and its file. State locked. */
struct fake_record;
void fake_vmm_record_drop(struct fake_record *r);

/* ---- the state file (fakecuda.c), shared by every process ------------------ */

#define FAKE_MAX_RECORDS  4096
#define FAKE_MAX_IMPORTER 8

/* One live allocation of any process. */
struct fake_record {
	int32_t owner; /* pid; 0 = free record (VMM: the creator, not the owner) */
	int32_t vmm;   /* VMM physical memory: importers are its holders */
	int32_t device;
	uint64_t size;
	uint64_t serial;
	int32_t importers[FAKE_MAX_IMPORTER]; /* pids that have it open (IPC) */
	int32_t context; /* 1: the memory of owner's context on device (no file) */
	uint32_t uid;    /* owner's effective uid */
	uint64_t pidns;  /* owner's PID namespace */
};

/* The state file's lock (flock: across processes), held around any use of
 * the records. */
void fake_lock_state(void);
void fake_unlock_state(void);
/* Drops the records of dead owners and importers. State locked. */
void fake_reap(void);
/* The records (FAKE_MAX_RECORDS; owner 0 = free), or NULL before cuInit. */
struct fake_record *fake_records(void);
/* The live allocation serial, or NULL. State locked. */
struct fake_record *fake_record_find(uint64_t serial);
/* Bytes of device in use, of every process. State locked. */
uint64_t fake_used(int device);
/* A new serial, the state locked. */
uint64_t fake_new_serial_locked(void);

/* VMM physical memory in the state file: held by every process that has a
 * handle or a mapping of it, and counted by cuMemGetInfo until the last of
 * them let go (or died). fake_vmm_record_new: the creator holds it;
 * CUDA_ERROR_OUT_OF_MEMORY when the device is full. fake_vmm_hold: this
 * process takes (hold) or drops its hold on serial; false when the record
 * is gone (its last holder let go: the file is unlinked, and no handle or
 * descriptor of the fake keeps it, so there is nothing to take). */
CUresult fake_vmm_record_new(int dev, uint64_t size, uint64_t *serial);
bool fake_vmm_hold(uint64_t serial, bool hold);

/* ---- fakecuda_vmm.c -------------------------------------------------------- */

/* A reset or destroyed context takes the VMM mappings made accessible in it
 * (their ranges stay reserved, inaccessible). Lock not held. */
void fake_vmm_destroy_ctx(struct fake_ctx *ctx);

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

/* ---- fakecuda_copy.c and what it uses of the others ------------------------- */

/* Adds [p, + size) to this process's host memory known to CUDA: registered
 * (cuMemHostRegister) or allocated (cuMemHostAlloc, mapped whatever its
 * flags under unified addressing). CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED
 * when it overlaps one (fakecuda_host.c). */
CUresult fake_host_insert(void *p, size_t size, unsigned flags, bool allocated);
/* Removes the registration (allocated false) or allocation starting at p,
 * its size in *size (may be NULL): the refusal CUDA gives when there is none. */
CUresult fake_host_remove(void *p, bool allocated, size_t *size);
/* The host range that holds p: true and its base, size, flags, kind. */
bool fake_host_lookup(uintptr_t p, uintptr_t *base, size_t *size, unsigned *flags, bool *allocated);
/* Queues a copy whose sides dev1 and dev2 (0: host memory) must stay
 * device memory until it runs; a memset of count elements of width bytes
 * (fakecuda_async.c). */
CUresult fake_async_copy(CUstream s, void *dst, const void *src, size_t n, uintptr_t dev1,
                         uintptr_t dev2);
CUresult fake_async_memset(CUstream s, uintptr_t dst, uint32_t value, unsigned width, size_t count);
/* Writes count elements of width (1, 2, 4) bytes of value. */
void fake_fill(void *dst, uint32_t value, unsigned width, size_t count);
/* cuPointerGetAttribute past what fakecuda.c answers: m the device memory
 * that holds ptr (a copy), or NULL when it is none. */
CUresult fake_pointer_attribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr,
                                const struct fake_mem *m);

/* ---- for tests only (found with dlsym) ------------------------------------- */

FAKE_EXPORT uint64_t fakecuda_violations(void);
FAKE_EXPORT unsigned fakecuda_open_mappings(void);
FAKE_EXPORT unsigned fakecuda_host_registrations(void);
/* Calls of entry point name in this process (those that can be injected). */
FAKE_EXPORT uint64_t fakecuda_calls(const char *name);
/* VMM physical allocations live in the state file, of every process. */
FAKE_EXPORT unsigned fakecuda_vmm_live(void);
/* Whether the memory mapped at addr was made GPUDirect RDMA capable (-1: none). */
FAKE_EXPORT int fakecuda_vmm_rdma(uintptr_t addr);
FAKE_EXPORT unsigned fakecuda_imported_pools(uint64_t *ids, unsigned max);
FAKE_EXPORT unsigned fakecuda_pending_work(void);

#endif
