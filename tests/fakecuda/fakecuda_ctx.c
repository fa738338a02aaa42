/*
 * fakecuda_ctx.c - the fake libcuda.so.1's driver, devices and contexts.
 *
 * cuInit (which reads the FAKECUDA_* settings), the error names, the
 * failures FAKECUDA_FAIL injects, the devices' queries, the primary contexts
 * (retained, released, reset), the application's own (cuCtxCreate,
 * cuCtxDestroy) and each thread's stack of current contexts: the entry
 * points with no memory behind them. Apart from fakecuda.c, which holds the memory, to keep
 * each file short; see the comment at its top.
 */
#include "fakecuda_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAKE_MAX_DEVICES 8
#define CTX_MAGIC        0xc0de7ec5u

struct fake_fail {
	char name[40];
	unsigned from;
	CUresult rc;
	unsigned calls;
};

bool fake_initialized;
int fake_devices = 1;
uint64_t fake_memory = 1ull << 30;
bool fake_clean;
bool fake_no_pools;
bool fake_no_vmm;
bool fake_no_vmm_fd;

/* Calls per entry point name (those that INJECT), for fakecuda_calls(). */
static struct {
	const char *name;
	uint64_t calls;
} fake_counts[64];

static struct fake_ctx fake_primary[FAKE_MAX_DEVICES];
/* Every context cuCtxCreate made, destroyed ones too: kept (never freed) so
 * that a stale handle is refused, and listed so that they are not leaks. */
static struct fake_ctx *fake_made;
static struct fake_fail fake_fails[8];
static unsigned fake_fail_count;

static __thread struct fake_ctx *fake_stack[16];
static __thread int fake_depth;

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
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS",
     "an illegal memory access was encountered"},
    {CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA_ERROR_DEVICE_UNAVAILABLE",
     "CUDA-capable device(s) is/are busy or unavailable"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_OPERATING_SYSTEM, "CUDA_ERROR_OPERATING_SYSTEM",
     "OS call failed or operation not supported on this OS"},
    {CUDA_ERROR_ALREADY_MAPPED, "CUDA_ERROR_ALREADY_MAPPED", "resource already mapped"},
    {CUDA_ERROR_CONTEXT_IS_DESTROYED, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
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
CUresult fake_injected(const char *name)
{
	CUresult rc = CUDA_SUCCESS;
	pthread_mutex_lock(&fake_lock);
	/* The names are string literals: kept by pointer. */
	for (size_t i = 0; i < sizeof(fake_counts) / sizeof(fake_counts[0]); i++) {
		if (!fake_counts[i].name || strcmp(fake_counts[i].name, name) == 0) {
			fake_counts[i].name = name;
			fake_counts[i].calls++;
			break;
		}
	}
	for (unsigned i = 0; i < fake_fail_count; i++) {
		struct fake_fail *f = &fake_fails[i];
		if (strcmp(f->name, name) == 0 && ++f->calls >= f->from)
			rc = f->rc;
	}
	pthread_mutex_unlock(&fake_lock);
	return rc;
}

FAKE_EXPORT uint64_t fakecuda_calls(const char *name)
{
	uint64_t n = 0;
	pthread_mutex_lock(&fake_lock);
	for (size_t i = 0; i < sizeof(fake_counts) / sizeof(fake_counts[0]) && fake_counts[i].name;
	     i++) {
		if (strcmp(fake_counts[i].name, name) == 0)
			n = fake_counts[i].calls;
	}
	pthread_mutex_unlock(&fake_lock);
	return n;
}

/* ---- contexts ------------------------------------------------------------------ */

struct fake_ctx *fake_current(void)
{
	return fake_depth ? fake_stack[fake_depth - 1] : NULL;
}

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
	/* The driver's answer in a new PID namespace whose /proc is the
	 * parent's (fakecuda_strict.c). */
	if (fake_proc_foreign())
		return CUDA_ERROR_OPERATING_SYSTEM;
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
		fake_no_vmm = (v = getenv("FAKECUDA_NO_VMM")) && strcmp(v, "1") == 0;
		fake_no_vmm_fd = (v = getenv("FAKECUDA_NO_VMM_FD")) && strcmp(v, "1") == 0;
		fake_strict_settings();
		for (int i = 0; i < FAKE_MAX_DEVICES; i++)
			fake_primary[i] =
			    (struct fake_ctx){.magic = CTX_MAGIC, .device = i, .primary = true};
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
	snprintf(name, (size_t)len, "gpubroker fake CUDA device %d%s", dev,
	         fake_mig ? " MIG 1g.10gb" : "");
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
	if (fake_mig) /* the instance's own UUID (cuDeviceGetUuid: the GPU's) */
		uuid->bytes[0] = (char)0x3d;
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
		*value = fake_compute_mode(dev);
		break;
	case CU_DEVICE_ATTRIBUTE_MPS_ENABLED:
		*value = fake_mps;
		break;
	case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED:
		*value = !fake_no_vmm && !fake_no_rdma;
		break;
	case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
		*value = !fake_no_pools;
		break;
	case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES:
		*value = fake_no_pools ? 0 : CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
		break;
	case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
		*value = !fake_no_vmm;
		break;
	case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
		*value = !fake_no_vmm && !fake_no_vmm_fd;
		break;
	default:
		*value = 0;
		break;
	}
	return CUDA_SUCCESS;
}

/* A context id, unique in this process (cuCtxGetId's are unique in it). */
static uint64_t fake_ctx_ids;

/* Destroys what was made in c; c->active already false. Lock not held. */
static void fake_ctx_destroy(struct fake_ctx *c)
{
	fake_async_forget_ctx(c);
	fake_mem_destroy_ctx(c);
}

/* The primary context is created by the retain that finds it inactive. */
FAKE_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	NEED_INIT();
	INJECT("cuDevicePrimaryCtxRetain");
	if (dev < 0 || dev >= fake_devices)
		return CUDA_ERROR_INVALID_DEVICE;
	CUresult rc = CUDA_SUCCESS;
	pthread_mutex_lock(&fake_lock);
	struct fake_ctx *c = &fake_primary[dev];
	/* Becoming active is a context's creation: it costs memory
	 * (fake_ctx_opened) and is refused on an exclusive-process device. */
	if (!c->active)
		rc = fake_ctx_opened(dev);
	if (rc == CUDA_SUCCESS) {
		c->retains++;
		if (!c->active) {
			c->active = true;
			c->id = ++fake_ctx_ids;
		}
	}
	pthread_mutex_unlock(&fake_lock);
	if (rc != CUDA_SUCCESS)
		return rc;
	*pctx = (CUcontext)(void *)c;
	return CUDA_SUCCESS;
}

/* The release to zero destroys the primary context and all made in it. */
FAKE_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
	NEED_INIT();
	if (dev < 0 || dev >= fake_devices)
		return CUDA_ERROR_INVALID_DEVICE;
	CUresult rc = CUDA_SUCCESS;
	bool destroy = false;
	pthread_mutex_lock(&fake_lock);
	struct fake_ctx *c = &fake_primary[dev];
	if (c->retains == 0) {
		rc = CUDA_ERROR_INVALID_CONTEXT;
	} else if (--c->retains == 0 && c->active) {
		c->active = false;
		fake_ctx_closed(dev);
		destroy = true;
	}
	pthread_mutex_unlock(&fake_lock);
	if (destroy)
		fake_ctx_destroy(c);
	return rc;
}

/* As CUDA: destroys the primary context and everything made in it without
 * releasing anyone's retain; the next retain creates it anew (another id). */
FAKE_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
	NEED_INIT();
	if (dev < 0 || dev >= fake_devices)
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&fake_lock);
	struct fake_ctx *c = &fake_primary[dev];
	bool destroy = c->active;
	c->active = false;
	if (destroy)
		fake_ctx_closed(dev);
	pthread_mutex_unlock(&fake_lock);
	if (destroy)
		fake_ctx_destroy(c);
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
	NEED_INIT();
	if (dev < 0 || dev >= fake_devices)
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&fake_lock);
	*flags = 0;
	*active = fake_primary[dev].active;
	pthread_mutex_unlock(&fake_lock);
	return CUDA_SUCCESS;
}

/* cuda.h of CUDA 13 names cuCtxCreate_v4 only; drivers keep exporting the
 * older ABI, which the tests use (common/cudaapi.c). */
FAKE_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);

/* A context of the application's own, made current. Its object is never
 * freed, so that a destroyed one's handle is refused, not a crash. */
FAKE_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	NEED_INIT();
	if (dev < 0 || dev >= fake_devices)
		return CUDA_ERROR_INVALID_DEVICE;
	if (fake_depth == (int)(sizeof(fake_stack) / sizeof(fake_stack[0])))
		return CUDA_ERROR_UNKNOWN;
	(void)flags;
	struct fake_ctx *c = calloc(1, sizeof(*c));
	if (!c)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&fake_lock);
	*c = (struct fake_ctx){.magic = CTX_MAGIC,
	                       .device = dev,
	                       .active = true,
	                       .id = ++fake_ctx_ids,
	                       .next_made = fake_made};
	fake_made = c;
	pthread_mutex_unlock(&fake_lock);
	fake_stack[fake_depth++] = c;
	*pctx = (CUcontext)(void *)c;
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
	NEED_INIT();
	struct fake_ctx *c = (struct fake_ctx *)(void *)ctx;
	if (!c || c->magic != CTX_MAGIC || c->primary || !c->active)
		return CUDA_ERROR_INVALID_CONTEXT;
	pthread_mutex_lock(&fake_lock);
	c->active = false;
	pthread_mutex_unlock(&fake_lock);
	/* Current on this thread: popped, as CUDA does. */
	if (fake_depth && fake_stack[fake_depth - 1] == c)
		fake_depth--;
	fake_ctx_destroy(c);
	return CUDA_SUCCESS;
}

/* The context an entry point is given: ctx, or the current one when NULL. CUDA_SUCCESS and *out, or
 * the refusal. */
static CUresult fake_ctx_arg(CUcontext ctx, struct fake_ctx **out)
{
	struct fake_ctx *c = ctx ? (struct fake_ctx *)(void *)ctx : fake_current();
	if (!c || c->magic != CTX_MAGIC)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!c->active)
		return CUDA_ERROR_CONTEXT_IS_DESTROYED;
	*out = c;
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxGetId(CUcontext ctx, unsigned long long *id)
{
	NEED_INIT();
	struct fake_ctx *c;
	CUresult rc = fake_ctx_arg(ctx, &c);
	if (rc != CUDA_SUCCESS)
		return rc;
	*id = c->id;
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxPushCurrent(CUcontext ctx)
{
	NEED_INIT();
	struct fake_ctx *c = (struct fake_ctx *)(void *)ctx;
	if (!c || c->magic != CTX_MAGIC || !c->active)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (fake_depth == (int)(sizeof(fake_stack) / sizeof(fake_stack[0])))
		return CUDA_ERROR_UNKNOWN;
	fake_stack[fake_depth++] = c;
	return CUDA_SUCCESS;
}

/* A destroyed context may still be popped (CUDA lets a thread get rid of
 * it so). */
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

/* Replaces the current context (the top of the stack); NULL pops it. */
FAKE_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
	NEED_INIT();
	struct fake_ctx *c = (struct fake_ctx *)(void *)ctx;
	if (c && (c->magic != CTX_MAGIC || !c->active))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!c) {
		if (fake_depth)
			fake_depth--;
		return CUDA_SUCCESS;
	}
	if (fake_depth)
		fake_stack[fake_depth - 1] = c;
	else
		fake_stack[fake_depth++] = c;
	return CUDA_SUCCESS;
}

/* Every context speaks the API of cuCtxCreate_v2 (3.2), as a driver says of
 * contexts made through it. */
FAKE_EXPORT CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
	NEED_INIT();
	struct fake_ctx *c;
	CUresult rc = fake_ctx_arg(ctx, &c);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!version)
		return CUDA_ERROR_INVALID_VALUE;
	*version = 3020;
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

/* CUDA 13's cuCtxGetDevice, of a context given (cuGetProcAddress's answer
 * for "cuCtxGetDevice" at 13000). Like cuCtxSynchronize_v2, reachable
 * through cuGetProcAddress only, not exported by name: Debian's numba
 * (tests/frameworks) looks names up with dlsym trying "_v2" first and would
 * call it with CUDA 12's arguments. Whether a CUDA 13 driver exports the
 * name (and so breaks that numba) is for a GPU to say. */
CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
	NEED_INIT();
	struct fake_ctx *c;
	CUresult rc = fake_ctx_arg(ctx, &c);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	*device = c->device;
	return CUDA_SUCCESS;
}

/* CUDA 13's cuCtxSynchronize, of a context given. */
CUresult cuCtxSynchronize_v2(CUcontext ctx)
{
	NEED_INIT();
	INJECT("cuCtxSynchronize");
	struct fake_ctx *c;
	CUresult rc = fake_ctx_arg(ctx, &c);
	if (rc != CUDA_SUCCESS)
		return rc;
	fake_async_drain(c, false);
	return CUDA_SUCCESS;
}
