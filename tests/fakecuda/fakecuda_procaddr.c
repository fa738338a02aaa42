/*
 * fakecuda_procaddr.c - cuGetProcAddress of the fake libcuda.so.1.
 *
 * cuda-bindings (what numba-cuda and cuda-core call through) takes one
 * symbol from the library, cuGetProcAddress_v2, and asks it for every other
 * entry point by its base name and the CUDA version the caller was built
 * for: "cuMemAlloc" at 13000 is cuMemAlloc_v2, "cuCtxCreate" at 13000 is
 * cuCtxCreate_v4. The table below answers as the driver does, for the entry
 * points the fake has: the newest variant not newer than the version asked
 * ("cuCtxGetDevice" and "cuCtxSynchronize" at 13000 are the _v2 variants,
 * which take a context: cudaTypedefs.h of CUDA 13).
 * Where that variant is one the fake does not implement (cuCtxCreate_v4, a
 * per-thread default stream variant), the symbol is not found, never an
 * older ABI under the newer name: a caller would pass arguments the
 * function does not take. A version older than every variant is
 * CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT. Either way the call answers
 * CUDA_SUCCESS with *pfn NULL and the reason in the status, as the driver
 * does (measured on an H100 for an unknown symbol; the header's
 * documentation for an insufficient version).
 *
 * FAKECUDA_TRACE=1 prints every symbol asked for and not found on stderr
 * (which entry points a library would need next).
 *
 * Apart from fakecuda.c to keep each file short; see the comment at its top.
 */
#include "fakecuda_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The ABIs cuda.h of CUDA 13 no longer names but drivers still export, and
 * that the fake implements. */
CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
#undef cuGetProcAddress
FAKE_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version,
                                      cuuint64_t flags);

/* stream: has per-thread default stream variants (_ptds, _ptsz) that
 * CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM asks for. */
struct fake_proc {
	const char *name;
	int since; /* the CUDA version this variant appeared in */
	void *fn;  /* NULL: the driver's variant, which the fake lacks */
	bool stream;
};

#define P(name, since, fn)                                                                         \
	{                                                                                          \
#name, since, (void *)(fn), false                                                  \
	}
#define PS(name, since, fn)                                                                        \
	{                                                                                          \
#name, since, (void *)(fn), true                                                   \
	}

static const struct fake_proc fake_procs[] = {
    P(cuInit, 2000, cuInit),
    P(cuDriverGetVersion, 2020, cuDriverGetVersion),
    P(cuGetErrorName, 6000, cuGetErrorName),
    P(cuGetErrorString, 6000, cuGetErrorString),
    P(cuGetProcAddress, 11030, cuGetProcAddress),
    P(cuGetProcAddress, 12000, cuGetProcAddress_v2),
    P(cuDeviceGet, 2000, cuDeviceGet),
    P(cuDeviceGetCount, 2000, cuDeviceGetCount),
    P(cuDeviceGetName, 2000, cuDeviceGetName),
    P(cuDeviceGetUuid, 9020, cuDeviceGetUuid),
    P(cuDeviceGetUuid, 11040, cuDeviceGetUuid_v2),
    P(cuDeviceGetAttribute, 2000, cuDeviceGetAttribute),
    P(cuDeviceTotalMem, 3020, cuDeviceTotalMem_v2),
    P(cuDeviceGetPCIBusId, 4010, cuDeviceGetPCIBusId),
    P(cuDeviceGetByPCIBusId, 4010, cuDeviceGetByPCIBusId),
    P(cuDeviceCanAccessPeer, 4000, cuDeviceCanAccessPeer),
    P(cuDevicePrimaryCtxRetain, 7000, cuDevicePrimaryCtxRetain),
    P(cuDevicePrimaryCtxRelease, 7000, NULL),
    P(cuDevicePrimaryCtxRelease, 11000, cuDevicePrimaryCtxRelease_v2),
    P(cuDevicePrimaryCtxReset, 7000, NULL),
    P(cuDevicePrimaryCtxReset, 11000, cuDevicePrimaryCtxReset_v2),
    P(cuDevicePrimaryCtxGetState, 7000, cuDevicePrimaryCtxGetState),
    P(cuCtxCreate, 3020, cuCtxCreate_v2),
    P(cuCtxCreate, 11040, NULL), /* _v3 */
    P(cuCtxCreate, 12050, NULL), /* _v4 */
    P(cuCtxDestroy, 4000, cuCtxDestroy_v2),
    P(cuCtxGetId, 12000, cuCtxGetId),
    P(cuCtxPushCurrent, 4000, cuCtxPushCurrent_v2),
    P(cuCtxPopCurrent, 4000, cuCtxPopCurrent_v2),
    P(cuCtxGetCurrent, 4000, cuCtxGetCurrent),
    P(cuCtxSetCurrent, 4000, cuCtxSetCurrent),
    P(cuCtxGetDevice, 2000, cuCtxGetDevice),
    P(cuCtxGetDevice, 13000, cuCtxGetDevice_v2),
    P(cuCtxGetApiVersion, 3020, cuCtxGetApiVersion),
    P(cuCtxSynchronize, 2000, cuCtxSynchronize),
    P(cuCtxSynchronize, 13000, cuCtxSynchronize_v2),
    P(cuMemGetInfo, 3020, cuMemGetInfo_v2),
    P(cuMemAlloc, 3020, cuMemAlloc_v2),
    P(cuMemFree, 3020, cuMemFree_v2),
    P(cuMemAllocPitch, 3020, cuMemAllocPitch_v2),
    PS(cuMemAllocAsync, 11020, cuMemAllocAsync),
    P(cuMemGetAddressRange, 3020, cuMemGetAddressRange_v2),
    P(cuMemAllocHost, 3020, cuMemAllocHost_v2),
    P(cuMemHostAlloc, 2020, cuMemHostAlloc),
    P(cuMemFreeHost, 2000, cuMemFreeHost),
    P(cuMemHostGetDevicePointer, 3020, cuMemHostGetDevicePointer_v2),
    P(cuMemHostGetFlags, 2030, cuMemHostGetFlags),
    P(cuMemHostRegister, 4000, NULL),
    P(cuMemHostRegister, 6050, cuMemHostRegister_v2),
    P(cuMemHostUnregister, 4000, cuMemHostUnregister),
    PS(cuMemcpy, 4000, cuMemcpy),
    PS(cuMemcpyAsync, 4000, cuMemcpyAsync),
    PS(cuMemcpyHtoD, 3020, cuMemcpyHtoD_v2),
    PS(cuMemcpyDtoH, 3020, cuMemcpyDtoH_v2),
    PS(cuMemcpyDtoD, 3020, cuMemcpyDtoD_v2),
    PS(cuMemcpyHtoDAsync, 3020, cuMemcpyHtoDAsync_v2),
    PS(cuMemcpyDtoHAsync, 3020, cuMemcpyDtoHAsync_v2),
    PS(cuMemcpyDtoDAsync, 3020, cuMemcpyDtoDAsync_v2),
    PS(cuMemsetD8, 3020, cuMemsetD8_v2),
    PS(cuMemsetD16, 3020, cuMemsetD16_v2),
    PS(cuMemsetD32, 3020, cuMemsetD32_v2),
    PS(cuMemsetD8Async, 3020, cuMemsetD8Async),
    PS(cuMemsetD16Async, 3020, cuMemsetD16Async),
    PS(cuMemsetD32Async, 3020, cuMemsetD32Async),
    P(cuPointerGetAttribute, 4000, cuPointerGetAttribute),
    P(cuPointerGetAttributes, 7000, cuPointerGetAttributes),
    P(cuIpcGetMemHandle, 4010, cuIpcGetMemHandle),
    P(cuIpcOpenMemHandle, 4010, NULL),
    P(cuIpcOpenMemHandle, 11000, cuIpcOpenMemHandle_v2),
    P(cuIpcCloseMemHandle, 4010, cuIpcCloseMemHandle),
    P(cuStreamCreate, 2000, cuStreamCreate),
    P(cuStreamCreateWithPriority, 5050, cuStreamCreateWithPriority),
    PS(cuStreamGetFlags, 5050, cuStreamGetFlags),
    PS(cuStreamGetPriority, 5050, cuStreamGetPriority),
    P(cuStreamDestroy, 4000, cuStreamDestroy_v2),
    PS(cuStreamSynchronize, 2000, cuStreamSynchronize),
    PS(cuStreamQuery, 2000, cuStreamQuery),
    PS(cuStreamWaitEvent, 3020, cuStreamWaitEvent),
    PS(cuLaunchHostFunc, 10000, cuLaunchHostFunc),
    P(cuCtxGetStreamPriorityRange, 5050, cuCtxGetStreamPriorityRange),
    P(cuEventCreate, 2000, cuEventCreate),
    P(cuEventDestroy, 4000, cuEventDestroy_v2),
    PS(cuEventRecord, 2000, cuEventRecord),
    P(cuEventQuery, 2000, cuEventQuery),
    P(cuEventSynchronize, 2000, cuEventSynchronize),
    PS(cuStreamBeginCapture, 10000, NULL), /* without a mode */
    PS(cuStreamBeginCapture, 10010, cuStreamBeginCapture),
    PS(cuStreamEndCapture, 10000, cuStreamEndCapture),
    PS(cuStreamIsCapturing, 10000, cuStreamIsCapturing),
    PS(cuStreamGetCaptureInfo, 10010, NULL),
    PS(cuStreamGetCaptureInfo, 11030, NULL),
    PS(cuStreamGetCaptureInfo, 12030, cuStreamGetCaptureInfo),
    P(cuGraphInstantiateWithFlags, 11040, cuGraphInstantiateWithFlags),
    PS(cuGraphLaunch, 10000, cuGraphLaunch),
    P(cuGraphExecDestroy, 10000, cuGraphExecDestroy),
    P(cuGraphDestroy, 10000, cuGraphDestroy),
    P(cuUserObjectCreate, 11030, cuUserObjectCreate),
    P(cuUserObjectRelease, 11030, cuUserObjectRelease),
    P(cuGraphRetainUserObject, 11030, cuGraphRetainUserObject),
    P(cuMemPoolCreate, 11020, cuMemPoolCreate),
    P(cuMemPoolDestroy, 11020, cuMemPoolDestroy),
    PS(cuMemAllocFromPoolAsync, 11020, cuMemAllocFromPoolAsync),
    PS(cuMemFreeAsync, 11020, cuMemFreeAsync),
    P(cuMemPoolExportToShareableHandle, 11020, cuMemPoolExportToShareableHandle),
    P(cuMemPoolImportFromShareableHandle, 11020, cuMemPoolImportFromShareableHandle),
    P(cuMemPoolExportPointer, 11020, cuMemPoolExportPointer),
    P(cuMemPoolImportPointer, 11020, cuMemPoolImportPointer),
    P(cuMemGetAllocationGranularity, 10020, cuMemGetAllocationGranularity),
    P(cuMemCreate, 10020, cuMemCreate),
    P(cuMemRelease, 10020, cuMemRelease),
    P(cuMemExportToShareableHandle, 10020, cuMemExportToShareableHandle),
    P(cuMemImportFromShareableHandle, 10020, cuMemImportFromShareableHandle),
    P(cuMemAddressReserve, 10020, cuMemAddressReserve),
    P(cuMemAddressFree, 10020, cuMemAddressFree),
    P(cuMemMap, 10020, cuMemMap),
    P(cuMemUnmap, 10020, cuMemUnmap),
    P(cuMemSetAccess, 10020, cuMemSetAccess),
    P(cuMemGetAccess, 10020, cuMemGetAccess),
};

static bool fake_trace(void)
{
	const char *v = getenv("FAKECUDA_TRACE");
	return v && strcmp(v, "1") == 0;
}

/* cuGetProcAddress does not need cuInit: it is how cuInit is found. */
FAKE_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                                         cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
	const cuuint64_t known =
	    CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
	if (!symbol || !pfn || version <= 0 || (flags & ~known) || flags == known)
		return CUDA_ERROR_INVALID_VALUE;
	*pfn = NULL;
	const struct fake_proc *best = NULL;
	bool named = false;
	for (size_t i = 0; i < sizeof(fake_procs) / sizeof(fake_procs[0]); i++) {
		const struct fake_proc *p = &fake_procs[i];
		if (strcmp(p->name, symbol) != 0)
			continue;
		named = true;
		if (p->since <= version && (!best || p->since > best->since))
			best = p;
	}
	CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
	if (!named || (best && !best->fn) ||
	    (best && best->stream && (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)))
		st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	else if (!best)
		st = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
	if (status)
		*status = st;
	if (st != CU_GET_PROC_ADDRESS_SUCCESS) {
		if (fake_trace())
			fprintf(stderr, "fakecuda: cuGetProcAddress(%s, %d, %#llx): %s\n", symbol,
			        version, (unsigned long long)flags,
			        st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND
			            ? "not found"
			            : "version not sufficient");
		return CUDA_SUCCESS;
	}
	*pfn = best->fn;
	return CUDA_SUCCESS;
}

/* CUDA 11.3's form, without the status. */
FAKE_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
	return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}
