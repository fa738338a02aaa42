/*
 * fakecuda.c - a test-only stand-in for libcuda.so.1.
 *
 * NOT a driver and no proof of anything on a GPU: it lets the cuda
 * backend's code paths (loading, contexts, errors, slab life cycle,
 * scrubbing, IPC open/close accounting) run on machines without one, so
 * that CI exercises them. The gpu suite proper runs against the real driver.
 *
 * "Device memory" is host memory: each cuMemAlloc is a file in
 * $FAKECUDA_DIR (mapped shared), its IPC handle names the file, and
 * cuIpcOpenMemHandle in another process maps the same file, so bytes written
 * by one process are read by another. Device pointers are host addresses.
 * A state file in the same directory (locked with flock) records every live
 * allocation with its owner and importers, so that cuMemGetInfo sees all
 * processes, memory of dead processes is reclaimed (as the driver does at
 * process exit), and freeing memory that a live process still has open
 * through IPC - which CUDA leaves undefined - is counted as a violation
 * (fakecuda_violations()).
 *
 * Environment:
 *   FAKECUDA_DIR      state directory (default /tmp/fakecuda-<uid>)
 *   FAKECUDA_DEVICES  device count (default 1; 0 = cuInit succeeds, no device)
 *   FAKECUDA_MEMORY   bytes per device (default 1 GiB)
 *   FAKECUDA_CLEAN=1  new allocations are zero (default: filled with 0xa5,
 *                     since real cuMemAlloc memory is not cleared)
 *   FAKECUDA_NO_POOLS=1  devices report no memory pools (the "async"
 *                     allocator must be refused)
 *   FAKECUDA_FAIL     comma-separated NAME[@N]=CUDA_ERROR_X: entry point NAME
 *                     (e.g. cuMemAlloc, cuInit) fails with that error from
 *                     its Nth call in this process on (default 1)
 *
 * Stream-ordered pools: a pool is an id in this process; its shareable
 * handle is a memfd holding the id, its allocations are cuMemAlloc memory
 * (files, records, violations alike) tagged with the id, and a pointer's
 * export data names the file, so cuMemPoolImportPointer maps it as
 * cuIpcOpenMemHandle does, once the pool with that id was imported.
 * Streams are a token: every call completes before it returns.
 *
 * Only the entry points gpubroker uses exist, under the ABI names cuda.h
 * maps them to (cuMemAlloc_v2 and so on).
 */
#include <cuda.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define FAKE_EXPORT       __attribute__((visibility("default")))
#define FAKE_MAX_DEVICES  8
#define FAKE_MAX_RECORDS  4096
#define FAKE_MAX_IMPORTER 8
#define FAKE_MAGIC        "FAKECUDA"
#define FAKE_PTR_MAGIC    "FAKEPPTR" /* pool pointer export data: not an IPC handle */

/* ---- shared state ---------------------------------------------------------- */

struct fake_record {
	int32_t owner; /* pid; 0 = free record */
	int32_t device;
	uint64_t size;
	uint64_t serial;
	int32_t importers[FAKE_MAX_IMPORTER]; /* pids that have it open (IPC) */
};

struct fake_shared {
	uint64_t next_serial;
	uint64_t violations;
	struct fake_record rec[FAKE_MAX_RECORDS];
};

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

struct fake_fail {
	char name[40];
	unsigned from;
	CUresult rc;
	unsigned calls;
};

static pthread_mutex_t fake_lock = PTHREAD_MUTEX_INITIALIZER;
static bool fake_initialized;
static int fake_devices = 1;
static uint64_t fake_memory = 1ull << 30;
static bool fake_clean;
static bool fake_no_pools;
static char fake_dir[256];
static int fake_state_fd = -1;
static struct fake_shared *fake_shared;
static struct fake_ctx fake_primary[FAKE_MAX_DEVICES];
static struct fake_mem *fake_mems;
static struct fake_fail fake_fails[8];
static unsigned fake_fail_count;

static __thread struct fake_ctx *fake_stack[16];
static __thread int fake_depth;

#define CTX_MAGIC 0xc0de7ec5u

static const struct {
	CUresult rc;
	const char *name, *text;
} fake_errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_MAP_FAILED, "CUDA_ERROR_MAP_FAILED", "mapping of buffer object failed"},
    {CUDA_ERROR_ECC_UNCORRECTABLE, "CUDA_ERROR_ECC_UNCORRECTABLE",
     "uncorrectable ECC error encountered"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS",
     "an illegal memory access was encountered"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static CUresult fake_error_by_name(const char *name)
{
	for (size_t i = 0; i < sizeof(fake_errors) / sizeof(fake_errors[0]); i++) {
		if (strcmp(fake_errors[i].name, name) == 0)
			return fake_errors[i].rc;
	}
	return CUDA_ERROR_UNKNOWN;
}

/* Parses FAKECUDA_FAIL: "cuMemAlloc@2=CUDA_ERROR_ECC_UNCORRECTABLE,...". */
static void fake_parse_fail(const char *spec)
{
	char buf[512];
	char *save = NULL;
	snprintf(buf, sizeof(buf), "%s", spec);
	for (char *tok = strtok_r(buf, ",", &save); tok && fake_fail_count < 8;
	     tok = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(tok, '=');
		if (!eq)
			continue;
		*eq = '\0';
		struct fake_fail *f = &fake_fails[fake_fail_count++];
		char *at = strchr(tok, '@');
		f->from = 1;
		if (at) {
			*at = '\0';
			f->from = (unsigned)strtoul(at + 1, NULL, 10);
		}
		snprintf(f->name, sizeof(f->name), "%s", tok);
		f->rc = fake_error_by_name(eq + 1);
	}
}

/* The injected failure of this call of name, or CUDA_SUCCESS. */
static CUresult fake_injected(const char *name)
{
	CUresult rc = CUDA_SUCCESS;
	pthread_mutex_lock(&fake_lock);
	for (unsigned i = 0; i < fake_fail_count; i++) {
		struct fake_fail *f = &fake_fails[i];
		if (strcmp(f->name, name) == 0 && ++f->calls >= f->from)
			rc = f->rc;
	}
	pthread_mutex_unlock(&fake_lock);
	return rc;
}

static void fake_lock_state(void)
{
	while (flock(fake_state_fd, LOCK_EX) < 0 && errno == EINTR)
		;
}

static void fake_unlock_state(void)
{
	flock(fake_state_fd, LOCK_UN);
}

/* A zombie is dead here: its descriptors and mappings are gone (the daemon
 * sees its socket close before anyone reaps it). */
static bool fake_pid_alive(int32_t pid)
{
	char path[64], buf[512];
	if (pid <= 0 || (kill(pid, 0) < 0 && errno != EPERM))
		return false;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return true;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return true;
	buf[n] = '\0';
	const char *paren = strrchr(buf, ')');
	return !(paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X'));
}

static void fake_mem_path(uint64_t serial, char *out, size_t len)
{
	snprintf(out, len, "%s/mem-%" PRIu64, fake_dir, serial);
}

/* Whether pid still maps the file at path: a process being killed drops its
 * mappings before its descriptors, so this is exact where "alive" is not. */
static bool fake_pid_maps(int32_t pid, const char *path)
{
	char name[64], line[1024];
	snprintf(name, sizeof(name), "/proc/%d/maps", (int)pid);
	FILE *f = fopen(name, "re");
	bool found = false;
	if (!f)
		return false;
	size_t n = strlen(path);
	while (!found && fgets(line, sizeof(line), f)) {
		const char *p = strstr(line, path);
		found = p && (p[n] == '\n' || p[n] == '\0' || p[n] == ' ');
	}
	fclose(f);
	return found;
}

/* Drops the records of dead owners (the driver frees a process's memory
 * when it exits) and dead importers. State locked. */
static void fake_reap(void)
{
	for (int i = 0; i < FAKE_MAX_RECORDS; i++) {
		struct fake_record *r = &fake_shared->rec[i];
		if (!r->owner)
			continue;
		for (int j = 0; j < FAKE_MAX_IMPORTER; j++) {
			if (r->importers[j] && !fake_pid_alive(r->importers[j]))
				r->importers[j] = 0;
		}
		if (!fake_pid_alive(r->owner)) {
			char path[300];
			fake_mem_path(r->serial, path, sizeof(path));
			unlink(path);
			memset(r, 0, sizeof(*r));
		}
	}
}

static struct fake_record *fake_record_find(uint64_t serial)
{
	for (int i = 0; i < FAKE_MAX_RECORDS; i++) {
		if (fake_shared->rec[i].owner && fake_shared->rec[i].serial == serial)
			return &fake_shared->rec[i];
	}
	return NULL;
}

static uint64_t fake_used(int device)
{
	uint64_t used = 0;
	for (int i = 0; i < FAKE_MAX_RECORDS; i++) {
		if (fake_shared->rec[i].owner && fake_shared->rec[i].device == device)
			used += fake_shared->rec[i].size;
	}
	return used;
}

static int fake_open_state(void)
{
	const char *dir = getenv("FAKECUDA_DIR");
	if (dir && *dir)
		snprintf(fake_dir, sizeof(fake_dir), "%s", dir);
	else
		snprintf(fake_dir, sizeof(fake_dir), "/tmp/fakecuda-%u", (unsigned)getuid());
	mkdir(fake_dir, 0700);
	char path[300];
	snprintf(path, sizeof(path), "%s/state", fake_dir);
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	/* Growing a file of zeros is idempotent: any process may do it. */
	if (ftruncate(fd, sizeof(struct fake_shared)) < 0) {
		close(fd);
		return -1;
	}
	void *p = mmap(NULL, sizeof(struct fake_shared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		close(fd);
		return -1;
	}
	fake_state_fd = fd;
	fake_shared = p;
	return 0;
}

/* ---- contexts ------------------------------------------------------------------ */

static struct fake_ctx *fake_current(void)
{
	return fake_depth ? fake_stack[fake_depth - 1] : NULL;
}

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

FAKE_EXPORT CUresult cuGetErrorName(CUresult error, const char **str)
{
	for (size_t i = 0; i < sizeof(fake_errors) / sizeof(fake_errors[0]); i++) {
		if (fake_errors[i].rc == error) {
			*str = fake_errors[i].name;
			return CUDA_SUCCESS;
		}
	}
	*str = NULL;
	return CUDA_ERROR_INVALID_VALUE;
}

FAKE_EXPORT CUresult cuGetErrorString(CUresult error, const char **str)
{
	for (size_t i = 0; i < sizeof(fake_errors) / sizeof(fake_errors[0]); i++) {
		if (fake_errors[i].rc == error) {
			*str = fake_errors[i].text;
			return CUDA_SUCCESS;
		}
	}
	*str = NULL;
	return CUDA_ERROR_INVALID_VALUE;
}

FAKE_EXPORT CUresult cuInit(unsigned int flags)
{
	const char *v;
	pthread_mutex_lock(&fake_lock);
	if (!fake_initialized && (v = getenv("FAKECUDA_FAIL")))
		fake_parse_fail(v);
	pthread_mutex_unlock(&fake_lock);
	INJECT("cuInit");
	if (flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&fake_lock);
	if (!fake_initialized) {
		if ((v = getenv("FAKECUDA_DEVICES")))
			fake_devices = atoi(v);
		if (fake_devices < 0 || fake_devices > FAKE_MAX_DEVICES)
			fake_devices = 1;
		if ((v = getenv("FAKECUDA_MEMORY")))
			fake_memory = strtoull(v, NULL, 10);
		fake_clean = (v = getenv("FAKECUDA_CLEAN")) && strcmp(v, "1") == 0;
		fake_no_pools = (v = getenv("FAKECUDA_NO_POOLS")) && strcmp(v, "1") == 0;
		for (int i = 0; i < FAKE_MAX_DEVICES; i++)
			fake_primary[i] = (struct fake_ctx){.magic = CTX_MAGIC, .device = i};
		if (fake_open_state() < 0) {
			pthread_mutex_unlock(&fake_lock);
			return CUDA_ERROR_UNKNOWN;
		}
		fake_initialized = true;
	}
	pthread_mutex_unlock(&fake_lock);
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDriverGetVersion(int *version)
{
	*version = CUDA_VERSION;
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGetCount(int *count)
{
	NEED_INIT();
	*count = fake_devices;
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
	NEED_INIT();
	if (ordinal < 0 || ordinal >= fake_devices)
		return CUDA_ERROR_INVALID_DEVICE;
	*device = ordinal;
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
	NEED_INIT();
	if (dev < 0 || dev >= fake_devices)
		return CUDA_ERROR_INVALID_DEVICE;
	if (len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	snprintf(name, (size_t)len, "gpubroker fake CUDA device %d", dev);
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
	NEED_INIT();
	if (dev < 0 || dev >= fake_devices)
		return CUDA_ERROR_INVALID_DEVICE;
	static const unsigned char base[16] = {0xfa, 0xce, 0xcd, 0xa0, 0x00, 0x00, 0x40, 0x00,
	                                       0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
	memcpy(uuid->bytes, base, 16);
	uuid->bytes[15] = (char)dev;
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGetAttribute(int *value, CUdevice_attribute attr, CUdevice dev)
{
	NEED_INIT();
	if (dev < 0 || dev >= fake_devices)
		return CUDA_ERROR_INVALID_DEVICE;
	switch (attr) {
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
		*value = 9;
		break;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
		*value = 0;
		break;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE:
		*value = CU_COMPUTEMODE_DEFAULT;
		break;
	case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
		*value = !fake_no_pools;
		break;
	case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES:
		*value = fake_no_pools ? 0 : CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
		break;
	default:
		*value = 0;
		break;
	}
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	NEED_INIT();
	INJECT("cuDevicePrimaryCtxRetain");
	if (dev < 0 || dev >= fake_devices)
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&fake_lock);
	fake_primary[dev].retains++;
	pthread_mutex_unlock(&fake_lock);
	*pctx = (CUcontext)(void *)&fake_primary[dev];
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
	NEED_INIT();
	if (dev < 0 || dev >= fake_devices)
		return CUDA_ERROR_INVALID_DEVICE;
	CUresult rc = CUDA_SUCCESS;
	pthread_mutex_lock(&fake_lock);
	if (fake_primary[dev].retains == 0)
		rc = CUDA_ERROR_INVALID_CONTEXT;
	else
		fake_primary[dev].retains--;
	pthread_mutex_unlock(&fake_lock);
	return rc;
}

FAKE_EXPORT CUresult cuCtxPushCurrent(CUcontext ctx)
{
	NEED_INIT();
	struct fake_ctx *c = (struct fake_ctx *)(void *)ctx;
	if (!c || c->magic != CTX_MAGIC || c->retains == 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (fake_depth == (int)(sizeof(fake_stack) / sizeof(fake_stack[0])))
		return CUDA_ERROR_UNKNOWN;
	fake_stack[fake_depth++] = c;
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxPopCurrent(CUcontext *pctx)
{
	NEED_INIT();
	if (fake_depth == 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	struct fake_ctx *c = fake_stack[--fake_depth];
	if (pctx)
		*pctx = (CUcontext)(void *)c;
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx)
{
	NEED_INIT();
	*pctx = (CUcontext)(void *)fake_current();
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxGetDevice(CUdevice *device)
{
	NEED_CONTEXT();
	*device = fake_current()->device;
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxSynchronize(void)
{
	NEED_CONTEXT();
	INJECT("cuCtxSynchronize");
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuStreamSynchronize(CUstream stream)
{
	(void)stream;
	NEED_CONTEXT();
	return CUDA_SUCCESS;
}

/* ---- memory ---------------------------------------------------------------------- */

/* The mapping of this process that holds [p, p + n), or NULL. Lock held. */
static struct fake_mem *fake_mem_find(uintptr_t p, uint64_t n)
{
	for (struct fake_mem *m = fake_mems; m; m = m->next) {
		if (p >= m->base && p - m->base < m->size && n <= m->size - (p - m->base))
			return m;
	}
	return NULL;
}

static void fake_mem_unlink(struct fake_mem *m)
{
	for (struct fake_mem **pp = &fake_mems; *pp; pp = &(*pp)->next) {
		if (*pp == m) {
			*pp = m->next;
			return;
		}
	}
}

FAKE_EXPORT CUresult cuMemGetInfo(size_t *free_bytes, size_t *total)
{
	NEED_CONTEXT();
	int dev = fake_current()->device;
	fake_lock_state();
	fake_reap();
	uint64_t used = fake_used(dev);
	fake_unlock_state();
	*total = (size_t)fake_memory;
	*free_bytes = (size_t)(used < fake_memory ? fake_memory - used : 0);
	return CUDA_SUCCESS;
}

/* Device memory on dev (of memory pool `pool`, or 0): cuMemAlloc's core. */
static CUresult fake_mem_alloc(int dev, size_t size, uint64_t pool, CUdeviceptr *dptr)
{
	if (size == 0)
		return CUDA_ERROR_INVALID_VALUE;
	struct fake_mem *m = calloc(1, sizeof(*m));
	if (!m)
		return CUDA_ERROR_OUT_OF_MEMORY;
	fake_lock_state();
	fake_reap();
	struct fake_record *r = NULL;
	for (int i = 0; i < FAKE_MAX_RECORDS && !r; i++) {
		if (!fake_shared->rec[i].owner)
			r = &fake_shared->rec[i];
	}
	if (!r || fake_used(dev) + size > fake_memory) {
		fake_unlock_state();
		free(m);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	uint64_t serial = ++fake_shared->next_serial;
	char path[300];
	fake_mem_path(serial, path, sizeof(path));
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	void *p = MAP_FAILED;
	if (fd >= 0 && ftruncate(fd, (off_t)size) == 0)
		p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (fd >= 0)
		close(fd);
	if (p == MAP_FAILED) {
		unlink(path);
		fake_unlock_state();
		free(m);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*r = (struct fake_record){.owner = getpid(), .device = dev, .size = size, .serial = serial};
	fake_unlock_state();
	/* Real device memory comes with whatever was there before. */
	if (!fake_clean)
		memset(p, 0xa5, size);
	m->base = (uintptr_t)p;
	m->size = size;
	m->serial = serial;
	m->device = dev;
	m->pool = pool;
	pthread_mutex_lock(&fake_lock);
	m->next = fake_mems;
	fake_mems = m;
	pthread_mutex_unlock(&fake_lock);
	*dptr = (CUdeviceptr)m->base;
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemAlloc(CUdeviceptr *dptr, size_t size)
{
	NEED_CONTEXT();
	INJECT("cuMemAlloc");
	return fake_mem_alloc(fake_current()->device, size, 0, dptr);
}

static CUresult fake_unimport(CUdeviceptr dptr);

/* Frees this process's own allocation m (unlinked), counting a violation
 * per live importer that still maps it. */
static void fake_mem_release(struct fake_mem *m)
{
	char path[300];
	fake_mem_path(m->serial, path, sizeof(path));
	fake_lock_state();
	fake_reap();
	struct fake_record *r = fake_record_find(m->serial);
	if (r) {
		for (int j = 0; j < FAKE_MAX_IMPORTER; j++) {
			if (r->importers[j] && r->importers[j] != getpid() &&
			    fake_pid_maps(r->importers[j], path)) {
				fake_shared->violations++;
				fprintf(stderr,
				        "fakecuda: pid %d freed memory %" PRIu64
				        " that pid %d still has open through IPC\n",
				        (int)getpid(), m->serial, (int)r->importers[j]);
			}
		}
		memset(r, 0, sizeof(*r));
	}
	unlink(path);
	fake_unlock_state();
	munmap((void *)m->base, m->size);
	free(m);
}

/* Own memory (cuMemAlloc or a pool's), or an imported pool pointer, which
 * an importer releases with cuMemFree. */
FAKE_EXPORT CUresult cuMemFree(CUdeviceptr dptr)
{
	NEED_CONTEXT();
	pthread_mutex_lock(&fake_lock);
	struct fake_mem *m = fake_mem_find((uintptr_t)dptr, 1);
	if (!m || m->base != (uintptr_t)dptr || (m->imported && !m->pool)) {
		pthread_mutex_unlock(&fake_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (m->imported) {
		pthread_mutex_unlock(&fake_lock);
		return fake_unimport(dptr);
	}
	fake_mem_unlink(m);
	pthread_mutex_unlock(&fake_lock);
	fake_mem_release(m);
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemsetD8(CUdeviceptr dptr, unsigned char value, size_t n)
{
	NEED_CONTEXT();
	INJECT("cuMemsetD8");
	pthread_mutex_lock(&fake_lock);
	struct fake_mem *m = fake_mem_find((uintptr_t)dptr, n);
	pthread_mutex_unlock(&fake_lock);
	if (!m)
		return CUDA_ERROR_INVALID_VALUE;
	memset((void *)(uintptr_t)dptr, value, n);
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemGetAddressRange(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
	NEED_CONTEXT();
	pthread_mutex_lock(&fake_lock);
	struct fake_mem *m = fake_mem_find((uintptr_t)dptr, 1);
	if (m) {
		if (pbase)
			*pbase = (CUdeviceptr)m->base;
		if (psize)
			*psize = (size_t)m->size;
	}
	pthread_mutex_unlock(&fake_lock);
	return m ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

struct fake_handle {
	char magic[8];
	uint64_t serial;
	uint64_t size;
	int32_t device;
	int32_t owner;
};

static CUresult fake_import(const struct fake_handle *hp, uint64_t pool, CUdeviceptr *pdptr);

FAKE_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *handle, CUdeviceptr dptr)
{
	NEED_CONTEXT();
	INJECT("cuIpcGetMemHandle");
	pthread_mutex_lock(&fake_lock);
	struct fake_mem *m = fake_mem_find((uintptr_t)dptr, 1);
	struct fake_handle h = {.magic = FAKE_MAGIC};
	bool ok = m && !m->imported && m->base == (uintptr_t)dptr;
	if (ok) {
		h.serial = m->serial;
		h.size = m->size;
		h.device = m->device;
		h.owner = getpid();
	}
	pthread_mutex_unlock(&fake_lock);
	if (!ok)
		return CUDA_ERROR_INVALID_VALUE;
	memset(handle, 0, sizeof(*handle));
	memcpy(handle->reserved, &h, sizeof(h));
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle,
                                        unsigned int flags)
{
	NEED_CONTEXT();
	INJECT("cuIpcOpenMemHandle");
	struct fake_handle h;
	memcpy(&h, handle.reserved, sizeof(h));
	if (flags != CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS || memcmp(h.magic, FAKE_MAGIC, 8) != 0)
		return CUDA_ERROR_INVALID_VALUE;
	/* As CUDA: a process cannot open its own allocation's handle. */
	if (h.owner == getpid())
		return CUDA_ERROR_INVALID_CONTEXT;
	return fake_import(&h, 0, pdptr);
}

/* Maps another process's allocation h (of pool `pool`, or 0): the core of
 * cuIpcOpenMemHandle and cuMemPoolImportPointer. */
static CUresult fake_import(const struct fake_handle *hp, uint64_t pool, CUdeviceptr *pdptr)
{
	struct fake_handle h = *hp;
	pthread_mutex_lock(&fake_lock);
	for (struct fake_mem *m = fake_mems; m; m = m->next) {
		if (m->imported && m->serial == h.serial) {
			/* Opened already: the driver counts references. */
			m->opens++;
			*pdptr = (CUdeviceptr)m->base;
			pthread_mutex_unlock(&fake_lock);
			return CUDA_SUCCESS;
		}
	}
	pthread_mutex_unlock(&fake_lock);
	struct fake_mem *m = calloc(1, sizeof(*m));
	if (!m)
		return CUDA_ERROR_OUT_OF_MEMORY;
	fake_lock_state();
	struct fake_record *r = fake_record_find(h.serial);
	int slot = -1;
	for (int j = 0; r && j < FAKE_MAX_IMPORTER && slot < 0; j++) {
		if (!r->importers[j] || !fake_pid_alive(r->importers[j]))
			slot = j;
	}
	char path[300];
	fake_mem_path(h.serial, path, sizeof(path));
	int fd = r && slot >= 0 ? open(path, O_RDWR | O_CLOEXEC) : -1;
	void *p = MAP_FAILED;
	if (fd >= 0) {
		p = mmap(NULL, h.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		close(fd);
	}
	if (p != MAP_FAILED)
		r->importers[slot] = getpid();
	fake_unlock_state();
	if (p == MAP_FAILED) {
		free(m);
		return r ? CUDA_ERROR_MAP_FAILED : CUDA_ERROR_INVALID_HANDLE;
	}
	m->base = (uintptr_t)p;
	m->size = h.size;
	m->serial = h.serial;
	m->device = h.device;
	m->imported = true;
	m->opens = 1;
	m->pool = pool;
	pthread_mutex_lock(&fake_lock);
	m->next = fake_mems;
	fake_mems = m;
	pthread_mutex_unlock(&fake_lock);
	*pdptr = (CUdeviceptr)m->base;
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
	NEED_CONTEXT();
	return fake_unimport(dptr);
}

/* Drops one open of an imported mapping; the last unmaps it. */
static CUresult fake_unimport(CUdeviceptr dptr)
{
	pthread_mutex_lock(&fake_lock);
	struct fake_mem *m = fake_mem_find((uintptr_t)dptr, 1);
	if (!m || !m->imported || m->base != (uintptr_t)dptr) {
		pthread_mutex_unlock(&fake_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (--m->opens > 0) {
		pthread_mutex_unlock(&fake_lock);
		return CUDA_SUCCESS;
	}
	fake_mem_unlink(m);
	pthread_mutex_unlock(&fake_lock);
	fake_lock_state();
	struct fake_record *r = fake_record_find(m->serial);
	for (int j = 0; r && j < FAKE_MAX_IMPORTER; j++) {
		if (r->importers[j] == getpid())
			r->importers[j] = 0;
	}
	fake_unlock_state();
	munmap((void *)m->base, m->size);
	free(m);
	return CUDA_SUCCESS;
}

/* ---- registered host memory (this process's) --------------------------------- */

struct fake_host {
	uintptr_t base;
	size_t size;
	unsigned flags;
	struct fake_host *next;
};

static struct fake_host *fake_hosts; /* under fake_lock */

/* The registration whose range holds [p, p + n) (n 0: p itself), or NULL. */
static struct fake_host *fake_host_find(uintptr_t p, size_t n)
{
	for (struct fake_host *h = fake_hosts; h; h = h->next) {
		if (p >= h->base && p - h->base < h->size && n <= h->size - (p - h->base))
			return h;
	}
	return NULL;
}

FAKE_EXPORT CUresult cuMemHostRegister_v2(void *p, size_t size, unsigned int flags)
{
	NEED_CONTEXT();
	INJECT("cuMemHostRegister");
	if (!p || !size)
		return CUDA_ERROR_INVALID_VALUE;
	struct fake_host *h = calloc(1, sizeof(*h));
	if (!h)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&fake_lock);
	for (struct fake_host *o = fake_hosts; o; o = o->next) {
		if ((uintptr_t)p < o->base + o->size && o->base < (uintptr_t)p + size) {
			pthread_mutex_unlock(&fake_lock);
			free(h);
			return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
		}
	}
	*h = (struct fake_host){(uintptr_t)p, size, flags, fake_hosts};
	fake_hosts = h;
	pthread_mutex_unlock(&fake_lock);
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemHostUnregister(void *p)
{
	NEED_CONTEXT();
	pthread_mutex_lock(&fake_lock);
	for (struct fake_host **pp = &fake_hosts; *pp; pp = &(*pp)->next) {
		if ((*pp)->base == (uintptr_t)p) {
			struct fake_host *h = *pp;
			*pp = h->next;
			pthread_mutex_unlock(&fake_lock);
			free(h);
			return CUDA_SUCCESS;
		}
	}
	pthread_mutex_unlock(&fake_lock);
	return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
}

FAKE_EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int flags)
{
	NEED_CONTEXT();
	if (flags)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&fake_lock);
	struct fake_host *h = fake_host_find((uintptr_t)p, 0);
	bool mapped = h && (h->flags & CU_MEMHOSTREGISTER_DEVICEMAP);
	pthread_mutex_unlock(&fake_lock);
	if (!mapped)
		return CUDA_ERROR_INVALID_VALUE;
	/* Unified addressing: the device sees it at the same address. */
	*pdptr = (CUdeviceptr)(uintptr_t)p;
	return CUDA_SUCCESS;
}

static CUresult fake_copy(void *dst, const void *src, size_t n, uintptr_t device_side)
{
	NEED_CONTEXT();
	pthread_mutex_lock(&fake_lock);
	struct fake_mem *m = fake_mem_find(device_side, n);
	struct fake_host *h = m ? NULL : fake_host_find(device_side, n);
	bool mapped = h && (h->flags & CU_MEMHOSTREGISTER_DEVICEMAP);
	pthread_mutex_unlock(&fake_lock);
	if (!m && !mapped)
		return CUDA_ERROR_INVALID_VALUE;
	memmove(dst, src, n);
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t n)
{
	return fake_copy((void *)(uintptr_t)dst, src, n, (uintptr_t)dst);
}

FAKE_EXPORT CUresult cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t n)
{
	return fake_copy(dst, (const void *)(uintptr_t)src, n, (uintptr_t)src);
}

FAKE_EXPORT CUresult cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
	(void)s;
	return fake_copy((void *)(uintptr_t)dst, src, n, (uintptr_t)dst);
}

FAKE_EXPORT CUresult cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
	(void)s;
	return fake_copy(dst, (const void *)(uintptr_t)src, n, (uintptr_t)src);
}

/* ---- stream-ordered memory pools ------------------------------------------- */

#define POOL_MAGIC 0x9001c0deu

struct fake_pool {
	uint32_t magic;
	int device;
	uint64_t id; /* unique across processes (the state's serials) */
	bool imported;
};

/* What the pool's shareable descriptor holds. */
struct fake_pool_file {
	char magic[8];
	uint64_t id;
	int32_t device;
	int32_t owner;
};

static struct fake_pool *fake_pool_of(CUmemoryPool pool)
{
	struct fake_pool *p = (struct fake_pool *)(void *)pool;
	return p && p->magic == POOL_MAGIC ? p : NULL;
}

/* A token: the fake runs every call to completion at once. */
FAKE_EXPORT CUresult cuStreamCreate(CUstream *stream, unsigned int flags)
{
	(void)flags;
	NEED_CONTEXT();
	static char token;
	*stream = (CUstream)(void *)&token;
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuStreamDestroy(CUstream stream)
{
	(void)stream;
	NEED_CONTEXT();
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
	NEED_INIT();
	INJECT("cuMemPoolCreate");
	if (fake_no_pools)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    props->location.type != CU_MEM_LOCATION_TYPE_DEVICE || props->location.id < 0 ||
	    props->location.id >= fake_devices ||
	    props->handleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_INVALID_VALUE;
	struct fake_pool *p = calloc(1, sizeof(*p));
	if (!p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	fake_lock_state();
	p->id = ++fake_shared->next_serial;
	fake_unlock_state();
	p->magic = POOL_MAGIC;
	p->device = props->location.id;
	*pool = (CUmemoryPool)(void *)p;
	return CUDA_SUCCESS;
}

/* Outstanding allocations stay valid, as in CUDA (they are released when
 * freed); only the pool object goes. */
FAKE_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
	NEED_INIT();
	struct fake_pool *p = fake_pool_of(pool);
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	p->magic = 0;
	free(p);
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t size, CUmemoryPool pool,
                                             CUstream stream)
{
	(void)stream;
	NEED_CONTEXT();
	INJECT("cuMemAllocFromPoolAsync");
	struct fake_pool *p = fake_pool_of(pool);
	if (!p || p->imported)
		return CUDA_ERROR_INVALID_VALUE;
	return fake_mem_alloc(p->device, size, p->id, dptr);
}

FAKE_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream)
{
	(void)stream;
	return cuMemFree(dptr);
}

FAKE_EXPORT CUresult cuMemPoolExportToShareableHandle(void *handle, CUmemoryPool pool,
                                                      CUmemAllocationHandleType type,
                                                      unsigned long long flags)
{
	NEED_INIT();
	INJECT("cuMemPoolExportToShareableHandle");
	struct fake_pool *p = fake_pool_of(pool);
	if (!p || p->imported || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || flags)
		return CUDA_ERROR_INVALID_VALUE;
	struct fake_pool_file f = {
	    .magic = FAKE_MAGIC, .id = p->id, .device = p->device, .owner = getpid()};
	int fd = memfd_create("fakecuda-pool", MFD_CLOEXEC);
	if (fd < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (write(fd, &f, sizeof(f)) != (ssize_t)sizeof(f)) {
		close(fd);
		return CUDA_ERROR_UNKNOWN;
	}
	*(int *)handle = fd;
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemPoolImportFromShareableHandle(CUmemoryPool *pool, void *handle,
                                                        CUmemAllocationHandleType type,
                                                        unsigned long long flags)
{
	NEED_INIT();
	INJECT("cuMemPoolImportFromShareableHandle");
	struct fake_pool_file f;
	int fd = (int)(intptr_t)handle;
	if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || flags ||
	    pread(fd, &f, sizeof(f), 0) != (ssize_t)sizeof(f) ||
	    memcmp(f.magic, FAKE_MAGIC, 8) != 0 || f.device < 0 || f.device >= fake_devices)
		return CUDA_ERROR_INVALID_VALUE;
	struct fake_pool *p = calloc(1, sizeof(*p));
	if (!p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*p = (struct fake_pool){
	    .magic = POOL_MAGIC, .device = f.device, .id = f.id, .imported = true};
	*pool = (CUmemoryPool)(void *)p;
	return CUDA_SUCCESS;
}

/* The export data: a fake_handle naming the allocation (another magic, so
 * cuIpcOpenMemHandle refuses it), then the pool id. */
FAKE_EXPORT CUresult cuMemPoolExportPointer(CUmemPoolPtrExportData *out, CUdeviceptr dptr)
{
	NEED_CONTEXT();
	INJECT("cuMemPoolExportPointer");
	_Static_assert(sizeof(struct fake_handle) + 8 <= sizeof(out->reserved), "room");
	pthread_mutex_lock(&fake_lock);
	struct fake_mem *m = fake_mem_find((uintptr_t)dptr, 1);
	bool ok = m && !m->imported && m->pool && m->base == (uintptr_t)dptr;
	struct fake_handle h = {.magic = FAKE_PTR_MAGIC};
	uint64_t pool = 0;
	if (ok) {
		h = (struct fake_handle){.magic = FAKE_PTR_MAGIC,
		                         .serial = m->serial,
		                         .size = m->size,
		                         .device = m->device,
		                         .owner = getpid()};
		pool = m->pool;
	}
	pthread_mutex_unlock(&fake_lock);
	if (!ok)
		return CUDA_ERROR_INVALID_VALUE;
	memset(out, 0, sizeof(*out));
	memcpy(out->reserved, &h, sizeof(h));
	memcpy(out->reserved + sizeof(h), &pool, sizeof(pool));
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemPoolImportPointer(CUdeviceptr *dptr, CUmemoryPool pool,
                                            CUmemPoolPtrExportData *data)
{
	NEED_CONTEXT();
	INJECT("cuMemPoolImportPointer");
	struct fake_pool *p = fake_pool_of(pool);
	struct fake_handle h;
	uint64_t id;
	memcpy(&h, data->reserved, sizeof(h));
	memcpy(&id, data->reserved + sizeof(h), sizeof(id));
	/* Only through the pool it came from, imported from its owner. */
	if (!p || !p->imported || memcmp(h.magic, FAKE_PTR_MAGIC, 8) != 0 || id != p->id)
		return CUDA_ERROR_INVALID_VALUE;
	return fake_import(&h, id, dptr);
}

/* ---- for tests only ---------------------------------------------------------- */

FAKE_EXPORT uint64_t fakecuda_violations(void);
FAKE_EXPORT unsigned fakecuda_open_mappings(void);
FAKE_EXPORT unsigned fakecuda_host_registrations(void);

/* Host ranges this process has registered and not unregistered. */
FAKE_EXPORT unsigned fakecuda_host_registrations(void)
{
	unsigned n = 0;
	pthread_mutex_lock(&fake_lock);
	for (struct fake_host *h = fake_hosts; h; h = h->next)
		n++;
	pthread_mutex_unlock(&fake_lock);
	return n;
}

/* How many times memory was freed while another live process had it open. */
FAKE_EXPORT uint64_t fakecuda_violations(void)
{
	if (!fake_shared)
		return 0;
	fake_lock_state();
	uint64_t v = fake_shared->violations;
	fake_unlock_state();
	return v;
}

/* Open IPC mappings in this process (cuIpcOpenMemHandle minus close). */
FAKE_EXPORT unsigned fakecuda_open_mappings(void)
{
	unsigned n = 0;
	pthread_mutex_lock(&fake_lock);
	for (struct fake_mem *m = fake_mems; m; m = m->next)
		n += m->imported;
	pthread_mutex_unlock(&fake_lock);
	return n;
}
