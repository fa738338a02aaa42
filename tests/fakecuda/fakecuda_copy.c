/*
 * fakecuda_copy.c - the fake libcuda.so.1's memory entry points that the
 * frameworks' memory paths use (Numba, numba-cuda through cuda-bindings,
 * CuPy; suite frameworks) beyond what gpubroker itself calls: copies in
 * every direction, synchronous and queued, memsets of 8, 16 and 32 bits,
 * page-locked host allocations, pointer attributes, and the device facts
 * they ask for (total memory, PCI bus id, peer access).
 *
 * What a driver refuses, this refuses: a device-side pointer that is not
 * device memory (or mapped host memory) of this process, a misaligned
 * 16/32-bit memset, unknown flags, freeing host memory cuMemHostAlloc did
 * not make, unregistering it as if cuMemHostRegister had. Copies through
 * unified addressing (cuMemcpy, cuMemcpyAsync) take any host pointer, as
 * the driver treats memory it does not know as pageable host memory. A
 * synchronous copy or memset waits for the context's blocking streams (the
 * legacy default stream), a queued one waits for a synchronisation
 * (fakecuda_async.c).
 *
 * Apart from fakecuda.c to keep each file short; see the comment at its top.
 */
#include "fakecuda_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* ---- device facts ------------------------------------------------------------- */

FAKE_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	NEED_INIT();
	if (dev < 0 || dev >= fake_devices)
		return CUDA_ERROR_INVALID_DEVICE;
	if (!bytes)
		return CUDA_ERROR_INVALID_VALUE;
	*bytes = (size_t)fake_memory;
	return CUDA_SUCCESS;
}

/* Device N sits on bus N + 1 of domain 0. */
FAKE_EXPORT CUresult cuDeviceGetPCIBusId(char *id, int len, CUdevice dev)
{
	NEED_INIT();
	if (dev < 0 || dev >= fake_devices)
		return CUDA_ERROR_INVALID_DEVICE;
	if (!id || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	snprintf(id, (size_t)len, "0000:%02x:00.0", dev + 1);
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGetByPCIBusId(CUdevice *dev, const char *id)
{
	NEED_INIT();
	unsigned domain, bus, device, function;
	if (!dev || !id || sscanf(id, "%x:%x:%x.%x", &domain, &bus, &device, &function) != 4)
		return CUDA_ERROR_INVALID_VALUE;
	if (domain != 0 || device != 0 || function != 0 || bus == 0 || (int)bus > fake_devices)
		return CUDA_ERROR_INVALID_DEVICE;
	*dev = (CUdevice)bus - 1;
	return CUDA_SUCCESS;
}

/* No peer access between fake devices: nothing would enforce it, except
 * VMM's per-device access (cuMemSetAccess / cuMemGetAccess record it):
 * FAKECUDA_PEER=1 makes distinct devices peers, for that. */
FAKE_EXPORT CUresult cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer)
{
	NEED_INIT();
	if (dev < 0 || dev >= fake_devices || peer < 0 || peer >= fake_devices)
		return CUDA_ERROR_INVALID_DEVICE;
	const char *v = getenv("FAKECUDA_PEER");
	*can = dev != peer && v && strcmp(v, "1") == 0;
	return CUDA_SUCCESS;
}

/* ---- page-locked host memory -------------------------------------------------- */

#define HOSTALLOC_FLAGS                                                                            \
	(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED)

FAKE_EXPORT CUresult cuMemHostAlloc(void **pp, size_t size, unsigned int flags)
{
	NEED_CONTEXT();
	INJECT("cuMemHostAlloc");
	if (!pp || !size || (flags & ~(unsigned)HOSTALLOC_FLAGS))
		return CUDA_ERROR_INVALID_VALUE;
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return CUDA_ERROR_OUT_OF_MEMORY;
	CUresult rc = fake_host_insert(p, size, flags, true);
	if (rc != CUDA_SUCCESS) {
		munmap(p, size);
		return rc;
	}
	*pp = p;
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemAllocHost_v2(void **pp, size_t size)
{
	return cuMemHostAlloc(pp, size, 0);
}

/* Only what cuMemHostAlloc made: anything else is CUDA_ERROR_INVALID_VALUE. */
FAKE_EXPORT CUresult cuMemFreeHost(void *p)
{
	NEED_CONTEXT();
	size_t size = 0;
	CUresult rc = fake_host_remove(p, true, &size);
	if (rc != CUDA_SUCCESS)
		return rc;
	/* Queued copies from or to it run first (the driver synchronises). */
	fake_async_drain(fake_current(), false);
	munmap(p, size);
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemHostGetFlags(unsigned int *flags, void *p)
{
	NEED_CONTEXT();
	uintptr_t base;
	size_t size;
	unsigned f;
	bool allocated;
	if (!flags || !fake_host_lookup((uintptr_t)p, &base, &size, &f, &allocated) || !allocated)
		return CUDA_ERROR_INVALID_VALUE;
	*flags = f;
	return CUDA_SUCCESS;
}

/* ---- copies and memsets ------------------------------------------------------- */

/* Device memory of this process, or mapped host memory: the device side of
 * a copy. */
static bool fake_is_device(uintptr_t p, size_t n)
{
	pthread_mutex_lock(&fake_lock);
	CUresult rc = fake_copy_valid(p, n ? n : 1);
	pthread_mutex_unlock(&fake_lock);
	return rc == CUDA_SUCCESS;
}

/* Unified addressing: a pointer is device memory when the driver knows it
 * as such; anything else is host memory. */
static uintptr_t fake_device_side(CUdeviceptr p, size_t n)
{
	return fake_is_device((uintptr_t)p, n) ? (uintptr_t)p : 0;
}

static CUresult fake_copy_sync(CUdeviceptr dst, CUdeviceptr src, size_t n, bool dst_device,
                               bool src_device)
{
	NEED_CONTEXT();
	fake_async_drain(fake_current(), true);
	if ((dst_device && !fake_is_device((uintptr_t)dst, n)) ||
	    (src_device && !fake_is_device((uintptr_t)src, n)) || (n && (!dst || !src)))
		return CUDA_ERROR_INVALID_VALUE;
	if (n)
		memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	return fake_copy_sync(dst, src, n, true, true);
}

FAKE_EXPORT CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	return fake_copy_sync(dst, src, n, false, false);
}

FAKE_EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	NEED_CONTEXT();
	return fake_async_copy(s, (void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n,
	                       (uintptr_t)dst, (uintptr_t)src);
}

/* Between two host ranges there is nothing to keep alive: the copy runs
 * after the stream's work, now. */
FAKE_EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	NEED_CONTEXT();
	uintptr_t d = fake_device_side(dst, n), h = fake_device_side(src, n);
	if (!d && !h) {
		CUresult rc = cuStreamSynchronize(s);
		if (rc != CUDA_SUCCESS)
			return rc;
		return fake_copy_sync(dst, src, n, false, false);
	}
	return fake_async_copy(s, (void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n,
	                       d ? d : h, d && h ? h : 0);
}

void fake_fill(void *dst, uint32_t value, unsigned width, size_t count)
{
	unsigned char *p = dst;
	for (size_t i = 0; i < count; i++, p += width)
		memcpy(p, &value, width); /* little-endian: the low bytes */
}

static CUresult fake_memset_sync(CUdeviceptr dst, uint32_t value, unsigned width, size_t count)
{
	NEED_CONTEXT();
	if (dst % width)
		return CUDA_ERROR_INVALID_VALUE;
	fake_async_drain(fake_current(), true);
	if (!fake_is_device((uintptr_t)dst, count * width))
		return CUDA_ERROR_INVALID_VALUE;
	fake_fill((void *)(uintptr_t)dst, value, width, count);
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemsetD16_v2(CUdeviceptr dst, unsigned short value, size_t count)
{
	return fake_memset_sync(dst, value, 2, count);
}

FAKE_EXPORT CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned int value, size_t count)
{
	return fake_memset_sync(dst, value, 4, count);
}

static CUresult fake_memset_async(CUdeviceptr dst, uint32_t value, unsigned width, size_t count,
                                  CUstream s)
{
	NEED_CONTEXT();
	if (dst % width)
		return CUDA_ERROR_INVALID_VALUE;
	return fake_async_memset(s, (uintptr_t)dst, value, width, count);
}

FAKE_EXPORT CUresult cuMemsetD16Async(CUdeviceptr dst, unsigned short value, size_t count,
                                      CUstream s)
{
	return fake_memset_async(dst, value, 2, count, s);
}

FAKE_EXPORT CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int value, size_t count, CUstream s)
{
	return fake_memset_async(dst, value, 4, count, s);
}

/* ---- pointer attributes ------------------------------------------------------- */

static CUresult fake_put(void *data, CUpointer_attribute attr, uint64_t v)
{
	switch (attr) {
	case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
	case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
	case CU_POINTER_ATTRIBUTE_IS_MANAGED:
	case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
	case CU_POINTER_ATTRIBUTE_MAPPED:
	case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
	case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
	case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
		*(unsigned int *)data = (unsigned int)v;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
		*(int *)data = (int)v;
		return CUDA_SUCCESS;
	default:
		*(uint64_t *)data = v;
		return CUDA_SUCCESS;
	}
}

CUresult fake_pointer_attribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr,
                                const struct fake_mem *m)
{
	uintptr_t hbase = 0;
	size_t hsize = 0;
	unsigned hflags = 0;
	bool allocated = false;
	if (!data)
		return CUDA_ERROR_INVALID_VALUE;
	if (!m && !fake_host_lookup((uintptr_t)ptr, &hbase, &hsize, &hflags, &allocated))
		return CUDA_ERROR_INVALID_VALUE; /* pageable or unknown memory */
	bool mapped = m || allocated || (hflags & CU_MEMHOSTREGISTER_DEVICEMAP);
	switch (attr) {
	case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
		return fake_put(data, attr, m ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST);
	case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
		return mapped ? fake_put(data, attr, ptr) : CUDA_ERROR_INVALID_VALUE;
	case CU_POINTER_ATTRIBUTE_HOST_POINTER:
		return m ? CUDA_ERROR_INVALID_VALUE : fake_put(data, attr, ptr);
	case CU_POINTER_ATTRIBUTE_IS_MANAGED:
	case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
		return fake_put(data, attr, 0);
	case CU_POINTER_ATTRIBUTE_MAPPED:
		return fake_put(data, attr, 1);
	case CU_POINTER_ATTRIBUTE_BUFFER_ID:
		return fake_put(data, attr, m ? m->serial : (uint64_t)hbase);
	case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
		return fake_put(data, attr, m ? m->base : hbase);
	case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
		return fake_put(data, attr, m ? m->size : hsize);
	case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
		return fake_put(data, attr, m && !m->imported && !m->pool);
	case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
		/* Host memory: the current context's device (portable memory). */
		if (!fake_current())
			return CUDA_ERROR_INVALID_CONTEXT;
		return fake_put(data, attr, (uint64_t)fake_current()->device);
	case CU_POINTER_ATTRIBUTE_CONTEXT:
		*(CUcontext *)data = (CUcontext)(void *)fake_current();
		return CUDA_SUCCESS;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

/* Unlike cuPointerGetAttribute, memory CUDA does not know is no error:
 * its attributes read as zero (CUDA's documentation of this call). */
FAKE_EXPORT CUresult cuPointerGetAttributes(unsigned int n, CUpointer_attribute *attrs, void **data,
                                            CUdeviceptr ptr)
{
	NEED_INIT();
	if (!attrs || !data)
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned i = 0; i < n; i++) {
		if (!data[i])
			return CUDA_ERROR_INVALID_VALUE;
		CUresult rc = cuPointerGetAttribute(data[i], attrs[i], ptr);
		if (rc == CUDA_ERROR_INVALID_VALUE || rc == CUDA_ERROR_INVALID_CONTEXT) {
			if (attrs[i] == CU_POINTER_ATTRIBUTE_CONTEXT)
				*(CUcontext *)data[i] = NULL;
			else
				fake_put(data[i], attrs[i], 0);
		} else if (rc != CUDA_SUCCESS) {
			return rc;
		}
	}
	return CUDA_SUCCESS;
}
