/*
 * intercept.c - the driver entry points libgpubroker-intercept.so answers
 * (intercept.h): device memory from the broker, through the framework
 * allocator the PyTorch and CuPy bridges use (fwalloc.h), its settings
 * $GPUBROKER_RUN_NAME, _PROPORTION (unset: the auto pool) and _GROUP, which
 * gpubroker-run sets from its options.
 *
 * What the program sees:
 * - cuMemAlloc, cuMemAllocPitch, cuMemAllocAsync and cuMemAllocFromPoolAsync
 *   (the pool is not used: the block comes from the broker, in stream order
 *   on the stream given) allocate from the instance of the current
 *   context's device; a refusal is CUDA_ERROR_OUT_OF_MEMORY, as the driver's.
 * - cuMemFree and cuMemFreeAsync free the broker's blocks (in stream order
 *   for the async one) and pass every other pointer to the driver.
 * - cuMemGetInfo answers the instance: total its cap, free what it may
 *   still take (its leases' free space included); cuDeviceTotalMem the cap.
 *   Frameworks that size themselves from these fit their share.
 * - cuMemGetAddressRange and the pointer attributes RANGE_START_ADDR and
 *   RANGE_SIZE answer the block, not the slab it lies in.
 * - cuMemCreate and cuMemAllocManaged would make memory outside the policy:
 *   refused (CUDA_ERROR_NOT_SUPPORTED, a line on stderr) unless
 *   GPUBROKER_RUN_UNCOUNTED=allow lets them through, uncounted.
 * - cuIpcGetMemHandle of a broker block: CUDA_ERROR_NOT_SUPPORTED and a line
 *   (the broker shares memory with gpb_share; a slab is not the program's
 *   to export).
 * Failure modes (docs/intercept.md): cuInit connects; no daemon there fails
 * it with a line saying so, unless GPUBROKER_RUN_UNBROKERED=1, which runs
 * the program on the driver alone. A daemon gone later: allocations fail
 * as out of memory, with one line on stderr; a daemon back is used again.
 */
#include "config.h"

#include "intercept.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "fwalloc.h"

#define ICPT_EXPORT __attribute__((visibility("default")))

static struct fwalloc icpt_fw = FWALLOC_INIT("intercept", "GPUBROKER_RUN_", "cuMemAlloc");

/* cuMemAllocPitch's row alignment: the driver's for every current GPU. */
#define ICPT_PITCH 512

/* ---- settings and messages --------------------------------------------------- */

static bool icpt_setting_is(const char *name, const char *value)
{
	const char *v = getenv(name);
	return v && strcmp(v, value) == 0;
}

/* One line on stderr, "gpubroker-run: ...", at most once per @flag. */
__attribute__((format(printf, 2, 3))) static void icpt_say_once(bool *flag, const char *fmt, ...)
{
	char line[512];
	va_list ap;

	if (__atomic_exchange_n(flag, true, __ATOMIC_ACQ_REL))
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fprintf(stderr, "gpubroker-run: %s\n", line);
}

static bool said_gone, said_uncounted, said_ipc, said_unbrokered;

/* The program runs on the driver alone (GPUBROKER_RUN_UNBROKERED=1 and no
 * daemon at cuInit). */
static bool icpt_unbrokered;

/* The client's and the instance's name: $GPUBROKER_RUN_NAME, else the
 * program's. Set before any call can connect. */
__attribute__((constructor)) static void icpt_name(void)
{
	const char *name = getenv("GPUBROKER_RUN_NAME");

	if (!name || !*name)
		name = program_invocation_short_name;
	snprintf(icpt_fw.name, sizeof(icpt_fw.name), "%s", name && *name ? name : "program");
}

/* ---- cuInit: the daemon must be there ---------------------------------------- */

static pthread_once_t icpt_init_once = PTHREAD_ONCE_INIT;
static CUresult icpt_init_rc;

static void icpt_check_daemon(void)
{
	int rc = fwalloc_connect(&icpt_fw);

	if (rc == 0)
		return;
	const char *sock = getenv("GPUBROKER_SOCKET");
	if (icpt_setting_is("GPUBROKER_RUN_UNBROKERED", "1")) {
		icpt_unbrokered = true;
		icpt_say_once(&said_unbrokered,
		              "no gpubrokerd (%s): running unbrokered on the driver alone "
		              "(GPUBROKER_RUN_UNBROKERED=1)",
		              error_message());
		return;
	}
	fprintf(stderr,
	        "gpubroker-run: cannot reach gpubrokerd%s%s: %s; start it, or set "
	        "GPUBROKER_RUN_UNBROKERED=1 to run without the broker\n",
	        sock ? " at " : "", sock ? sock : "", error_message());
	icpt_init_rc = CUDA_ERROR_NOT_INITIALIZED;
}

ICPT_EXPORT CUresult cuInit(unsigned flags)
{
	const struct icpt_real *r = icpt_real();

	if (!r->Init)
		return CUDA_ERROR_NOT_INITIALIZED;
	CUresult rc = r->Init(flags);
	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_once(&icpt_init_once, icpt_check_daemon);
	return icpt_init_rc;
}

/* ---- allocation and free ------------------------------------------------------ */

/* A refusal as the driver would say it. */
static CUresult icpt_refused(int rc)
{
	switch (rc) {
	case GPB_E_INVALID:
		return CUDA_ERROR_INVALID_VALUE;
	case GPB_E_DAEMON_GONE:
	case GPB_E_CONNECT:
	case GPB_E_SHUTTING_DOWN:
		icpt_say_once(&said_gone,
		              "gpubrokerd is gone (%s): allocations fail as out of memory until it "
		              "is back",
		              error_message());
		return CUDA_ERROR_OUT_OF_MEMORY;
	default: /* over the cap, no room, a limit, the device */
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
}

/* The current context's device, as the driver answers without one. */
static CUresult icpt_device(CUdevice *dev)
{
	const struct icpt_real *r = icpt_real();

	return r->CtxGetDevice ? r->CtxGetDevice(dev) : CUDA_ERROR_NOT_INITIALIZED;
}

static CUresult icpt_alloc(CUdeviceptr *dptr, size_t size, CUstream stream, bool ordered)
{
	CUdevice dev;
	void *ptr;

	if (!dptr || size == 0)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult cr = icpt_device(&dev);
	if (cr != CUDA_SUCCESS)
		return cr;
	int rc = fwalloc_alloc(&icpt_fw, size, (int)dev, stream, ordered, &ptr);
	if (rc < 0)
		return icpt_refused(rc);
	*dptr = (CUdeviceptr)(uintptr_t)ptr;
	return CUDA_SUCCESS;
}

/* A real entry point, or CUDA_ERROR_NOT_SUPPORTED where the driver has none. */
#define ICPT_REAL(fn, ...)                                                                         \
	(icpt_real()->fn ? icpt_real()->fn(__VA_ARGS__) : CUDA_ERROR_NOT_SUPPORTED)

ICPT_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t size)
{
	if (icpt_unbrokered)
		return ICPT_REAL(MemAlloc, dptr, size);
	return icpt_alloc(dptr, size, NULL, false);
}

ICPT_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width,
                                        size_t height, unsigned elem)
{
	if (icpt_unbrokered)
		return ICPT_REAL(MemAllocPitch, dptr, pitch, width, height, elem);
	/* The driver's checks: an element of 4, 8 or 16 bytes, a non-empty
	 * rectangle. */
	if (!dptr || !pitch || width == 0 || height == 0 || (elem != 4 && elem != 8 && elem != 16))
		return CUDA_ERROR_INVALID_VALUE;
	size_t row = (width + ICPT_PITCH - 1) / ICPT_PITCH * ICPT_PITCH;
	if (row < width || height > SIZE_MAX / row)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = icpt_alloc(dptr, row * height, NULL, false);
	if (rc == CUDA_SUCCESS)
		*pitch = row;
	return rc;
}

ICPT_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream stream)
{
	if (icpt_unbrokered)
		return ICPT_REAL(MemAllocAsync, dptr, size, stream);
	return icpt_alloc(dptr, size, stream, true);
}

ICPT_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t size, CUmemoryPool pool,
                                             CUstream stream)
{
	if (icpt_unbrokered)
		return ICPT_REAL(MemAllocFromPoolAsync, dptr, size, pool, stream);
	if (!pool)
		return CUDA_ERROR_INVALID_VALUE;
	return icpt_alloc(dptr, size, stream, true);
}

/* 0: freed; 1: not the broker's (the caller hands it to the driver). */
static int icpt_free(CUdeviceptr dptr, CUstream stream, bool ordered, CUresult *out)
{
	if (icpt_unbrokered || !dptr)
		return 1;
	int rc = fwalloc_free(&icpt_fw, (void *)(uintptr_t)dptr, stream, ordered);
	if (rc == GPB_E_NOT_FOUND)
		return 1;
	if (rc == GPB_E_DAEMON_GONE) { /* the block went with the daemon */
		icpt_refused(rc);
		rc = 0;
	}
	*out = rc < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
	return 0;
}

/* The driver's answer to a free of a pointer that is not a broker block
 * now. Once the daemon was lost the library forgot the blocks it had
 * served (they went with the daemon): a pointer the driver does not know
 * then was one of them, and its free succeeds. */
static CUresult icpt_driver_free(CUresult rc)
{
	if (rc == CUDA_ERROR_INVALID_VALUE && __atomic_load_n(&said_gone, __ATOMIC_ACQUIRE))
		return CUDA_SUCCESS;
	return rc;
}

ICPT_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	CUresult rc;

	if (icpt_free(dptr, NULL, false, &rc) == 0)
		return rc;
	return icpt_driver_free(ICPT_REAL(MemFree, dptr));
}

ICPT_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream)
{
	CUresult rc;

	if (icpt_free(dptr, stream, true, &rc) == 0)
		return rc;
	return icpt_driver_free(ICPT_REAL(MemFreeAsync, dptr, stream));
}

/* ---- what the program is told ------------------------------------------------ */

static CUresult icpt_info(CUdevice dev, size_t *free_out, size_t *total_out)
{
	struct gpb_mem_info mi;
	int rc = fwalloc_mem_info(&icpt_fw, (int)dev, NULL, &mi);

	if (rc < 0) {
		if (rc == GPB_E_INVALID)
			return CUDA_ERROR_INVALID_DEVICE;
		icpt_refused(rc);
		return CUDA_ERROR_OPERATING_SYSTEM;
	}
	/* The daemon charges leases whole; their free space is the
	 * program's to allocate. */
	uint64_t free_bytes = mi.free + (mi.leased > mi.in_use ? mi.leased - mi.in_use : 0);
	if (free_bytes > mi.cap)
		free_bytes = mi.cap;
	if (free_out)
		*free_out = (size_t)free_bytes;
	if (total_out)
		*total_out = (size_t)mi.cap;
	return CUDA_SUCCESS;
}

ICPT_EXPORT CUresult cuMemGetInfo_v2(size_t *free_out, size_t *total_out)
{
	CUdevice dev;

	if (icpt_unbrokered)
		return ICPT_REAL(MemGetInfo, free_out, total_out);
	CUresult rc = icpt_device(&dev);
	return rc == CUDA_SUCCESS ? icpt_info(dev, free_out, total_out) : rc;
}

ICPT_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	if (icpt_unbrokered)
		return ICPT_REAL(DeviceTotalMem, bytes, dev);
	if (!bytes)
		return CUDA_ERROR_INVALID_VALUE;
	return icpt_info(dev, NULL, bytes);
}

/* The broker's block holding @dptr: true with its start and size. */
static bool icpt_block(CUdeviceptr dptr, CUdeviceptr *base, size_t *size)
{
	void *b;
	uint64_t s;

	if (icpt_unbrokered || !dptr || !fwalloc_find(&icpt_fw, (void *)(uintptr_t)dptr, &b, &s))
		return false;
	*base = (CUdeviceptr)(uintptr_t)b;
	*size = (size_t)s;
	return true;
}

ICPT_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
	CUdeviceptr base;
	size_t size;

	if (!icpt_block(dptr, &base, &size))
		return ICPT_REAL(MemGetAddressRange, pbase, psize, dptr);
	if (pbase)
		*pbase = base;
	if (psize)
		*psize = size;
	return CUDA_SUCCESS;
}

/* Answers a range attribute of a broker block into @data; false for any
 * other attribute or pointer. */
static bool icpt_range_attribute(CUpointer_attribute attr, void *data, CUdeviceptr dptr)
{
	CUdeviceptr base;
	size_t size;

	if ((attr != CU_POINTER_ATTRIBUTE_RANGE_START_ADDR &&
	     attr != CU_POINTER_ATTRIBUTE_RANGE_SIZE) ||
	    !data || !icpt_block(dptr, &base, &size))
		return false;
	if (attr == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR)
		*(CUdeviceptr *)data = base;
	else
		*(size_t *)data = size;
	return true;
}

ICPT_EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attr, CUdeviceptr dptr)
{
	if (icpt_range_attribute(attr, data, dptr))
		return CUDA_SUCCESS;
	return ICPT_REAL(PointerGetAttribute, data, attr, dptr);
}

ICPT_EXPORT CUresult cuPointerGetAttributes(unsigned n, CUpointer_attribute *attrs, void **data,
                                            CUdeviceptr dptr)
{
	CUresult rc = ICPT_REAL(PointerGetAttributes, n, attrs, data, dptr);

	if (rc != CUDA_SUCCESS || !attrs || !data)
		return rc;
	for (unsigned i = 0; i < n; i++)
		icpt_range_attribute(attrs[i], data[i], dptr);
	return rc;
}

/* ---- memory outside the policy ------------------------------------------------ */

static bool icpt_uncounted_allowed(const char *what)
{
	if (icpt_unbrokered || icpt_setting_is("GPUBROKER_RUN_UNCOUNTED", "allow"))
		return true;
	icpt_say_once(&said_uncounted,
	              "%s refused: memory the program makes itself is outside the broker's "
	              "policy (GPUBROKER_RUN_UNCOUNTED=allow lets it through, uncounted)",
	              what);
	return false;
}

ICPT_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                                 const CUmemAllocationProp *prop, unsigned long long flags)
{
	if (!icpt_uncounted_allowed("cuMemCreate"))
		return CUDA_ERROR_NOT_SUPPORTED;
	return ICPT_REAL(MemCreate, handle, size, prop, flags);
}

ICPT_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t size, unsigned flags)
{
	if (!icpt_uncounted_allowed("cuMemAllocManaged"))
		return CUDA_ERROR_NOT_SUPPORTED;
	return ICPT_REAL(MemAllocManaged, dptr, size, flags);
}

ICPT_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *handle, CUdeviceptr dptr)
{
	CUdeviceptr base;
	size_t size;

	if (icpt_block(dptr, &base, &size)) {
		icpt_say_once(&said_ipc, "cuIpcGetMemHandle of broker memory is not supported (the "
		                         "broker shares memory with gpb_share)");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	return ICPT_REAL(IpcGetMemHandle, handle, dptr);
}
