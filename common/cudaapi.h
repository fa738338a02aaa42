/*
 * cudaapi.h - the CUDA driver entry points gpubroker uses, loaded at run
 * time with dlopen("libcuda.so.1") so that nothing links the driver: the
 * same binaries start on machines with and without one.
 *
 * Shared by the daemon's cuda backend, the client library's cuda opener and
 * the gpu tests. Each entry point is typed with the PFN_* typedef of the ABI
 * version named by its symbol (cuMemAlloc_v2 is PFN_cuMemAlloc_v3020, and so
 * on), so a mismatch between symbol and signature is a compile error here,
 * not a crash on the GPU machine. Built only when cuda.h was found.
 */
#ifndef GPB_CUDAAPI_H
#define GPB_CUDAAPI_H

#include <stdbool.h>
#include <stddef.h>

#include <cuda.h>
#include <cudaTypedefs.h>

struct cuda_api {
	void *lib;
	int driver_version; /* cuDriverGetVersion: 12040 = 12.4 */

	PFN_cuGetErrorName_v6000 GetErrorName;
	PFN_cuGetErrorString_v6000 GetErrorString;
	PFN_cuInit_v2000 Init;
	PFN_cuDriverGetVersion_v2020 DriverGetVersion;
	PFN_cuDeviceGetCount_v2000 DeviceGetCount;
	PFN_cuDeviceGet_v2000 DeviceGet;
	PFN_cuDeviceGetName_v2000 DeviceGetName;
	PFN_cuDeviceGetUuid_v11040 DeviceGetUuid;
	PFN_cuDeviceGetAttribute_v2000 DeviceGetAttribute;
	PFN_cuDevicePrimaryCtxRetain_v7000 DevicePrimaryCtxRetain;
	PFN_cuDevicePrimaryCtxRelease_v11000 DevicePrimaryCtxRelease;
	PFN_cuCtxPushCurrent_v4000 CtxPushCurrent;
	PFN_cuCtxPopCurrent_v4000 CtxPopCurrent;
	PFN_cuCtxGetCurrent_v4000 CtxGetCurrent;
	PFN_cuCtxGetDevice_v2000 CtxGetDevice;
	PFN_cuCtxSynchronize_v2000 CtxSynchronize;
	PFN_cuMemGetInfo_v3020 MemGetInfo;
	PFN_cuMemAlloc_v3020 MemAlloc;
	PFN_cuMemFree_v3020 MemFree;
	PFN_cuMemsetD8_v3020 MemsetD8;
	PFN_cuMemGetAddressRange_v3020 MemGetAddressRange;
	PFN_cuIpcGetMemHandle_v4010 IpcGetMemHandle;
	PFN_cuIpcOpenMemHandle_v11000 IpcOpenMemHandle;
	PFN_cuIpcCloseMemHandle_v4010 IpcCloseMemHandle;
	PFN_cuMemcpyHtoD_v3020 MemcpyHtoD;
	PFN_cuMemcpyDtoH_v3020 MemcpyDtoH;
	PFN_cuMemcpyHtoDAsync_v3020 MemcpyHtoDAsync;
	PFN_cuMemcpyDtoHAsync_v3020 MemcpyDtoHAsync;
	PFN_cuStreamSynchronize_v2000 StreamSynchronize;
	PFN_cuMemHostRegister_v6050 MemHostRegister;
	PFN_cuMemHostUnregister_v4000 MemHostUnregister;
	PFN_cuMemHostGetDevicePointer_v3020 MemHostGetDevicePointer;

	/* Stream-ordered memory pools (CUDA 11.2), for allocator "async".
	 * Optional: NULL when the driver lacks them (has_pools false). */
	bool has_pools;
	PFN_cuStreamCreate_v2000 StreamCreate;
	PFN_cuStreamDestroy_v4000 StreamDestroy;
	PFN_cuMemPoolCreate_v11020 MemPoolCreate;
	PFN_cuMemPoolDestroy_v11020 MemPoolDestroy;
	PFN_cuMemAllocFromPoolAsync_v11020 MemAllocFromPoolAsync;
	PFN_cuMemFreeAsync_v11020 MemFreeAsync;
	PFN_cuMemPoolExportToShareableHandle_v11020 MemPoolExportToShareableHandle;
	PFN_cuMemPoolImportFromShareableHandle_v11020 MemPoolImportFromShareableHandle;
	PFN_cuMemPoolExportPointer_v11020 MemPoolExportPointer;
	PFN_cuMemPoolImportPointer_v11020 MemPoolImportPointer;

	/* Virtual memory management (CUDA 10.2), for the "vmm" transport.
	 * Optional: NULL when the driver lacks them (has_vmm false). */
	bool has_vmm;
	PFN_cuMemGetAllocationGranularity_v10020 MemGetAllocationGranularity;
	PFN_cuMemCreate_v10020 MemCreate;
	PFN_cuMemRelease_v10020 MemRelease;
	PFN_cuMemExportToShareableHandle_v10020 MemExportToShareableHandle;
	PFN_cuMemImportFromShareableHandle_v10020 MemImportFromShareableHandle;
	PFN_cuMemAddressReserve_v10020 MemAddressReserve;
	PFN_cuMemAddressFree_v10020 MemAddressFree;
	PFN_cuMemMap_v10020 MemMap;
	PFN_cuMemUnmap_v10020 MemUnmap;
	PFN_cuMemSetAccess_v10020 MemSetAccess;
	PFN_cuMemGetAccess_v10020 MemGetAccess;
	PFN_cuDeviceCanAccessPeer_v4000 DeviceCanAccessPeer;
	/* cuDeviceGetUuid before CUDA 11.4, which answers a MIG instance's
	 * parent GPU (the _v2 above answers the instance): how a MIG instance
	 * is told apart. Optional: NULL when the driver lacks it. */
	PFN_cuDeviceGetUuid_v9020 DeviceGetUuidV1;
	/* Context life, events and stream work: each looked up on its own and
	 * NULL when the driver lacks it (cuCtxGetId is CUDA 12.0). The
	 * library's context checks and ordered frees use the first group; the
	 * rest serve the gpu tests. */
	PFN_cuDevicePrimaryCtxGetState_v7000 DevicePrimaryCtxGetState;
	PFN_cuCtxGetId_v12000 CtxGetId;
	PFN_cuEventCreate_v2000 EventCreate;
	PFN_cuEventRecord_v2000 EventRecord;
	PFN_cuEventQuery_v2000 EventQuery;
	PFN_cuEventSynchronize_v2000 EventSynchronize;
	PFN_cuEventDestroy_v4000 EventDestroy;
	PFN_cuDevicePrimaryCtxReset_v11000 DevicePrimaryCtxReset;
	PFN_cuCtxCreate_v3020 CtxCreate;
	PFN_cuCtxDestroy_v4000 CtxDestroy;
	PFN_cuStreamQuery_v2000 StreamQuery;
	PFN_cuMemsetD8Async_v3020 MemsetD8Async;
	PFN_cuLaunchHostFunc_v10000 LaunchHostFunc;
	PFN_cuPointerGetAttribute_v4000 PointerGetAttribute;
	/* Stream capture (CUDA 10.0, 11.3 for user objects, 12.3 for the
	 * capture info with edges): the library's frees hold memory a graph
	 * may use (cuda_ctx.h); the rest serve the gpu tests. */
	PFN_cuStreamIsCapturing_v10000 StreamIsCapturing;
	PFN_cuStreamGetCaptureInfo_v12030 StreamGetCaptureInfo;
	PFN_cuUserObjectCreate_v11030 UserObjectCreate;
	PFN_cuUserObjectRelease_v11030 UserObjectRelease;
	PFN_cuGraphRetainUserObject_v11030 GraphRetainUserObject;
	PFN_cuStreamBeginCapture_v10010 StreamBeginCapture;
	PFN_cuStreamEndCapture_v10000 StreamEndCapture;
	PFN_cuGraphInstantiateWithFlags_v11040 GraphInstantiate;
	PFN_cuGraphLaunch_v10000 GraphLaunch;
	PFN_cuGraphExecDestroy_v10000 GraphExecDestroy;
	PFN_cuGraphDestroy_v10000 GraphDestroy;
};

/*
 * Loads libcuda.so.1 and every entry point above (the pool ones only where
 * the driver has all of them: has_pools; the VMM ones likewise: has_vmm;
 * the optional ones where the driver has them), then calls cuInit(0) and
 * cuDriverGetVersion. Returns 0, or -1 with the reason in why (the dlerror
 * text, the missing symbol, or the CUresult name of cuInit's failure) and
 * the api left unloaded. *init_rc (may be NULL) receives cuInit's result
 * (CUDA_SUCCESS when it was not reached).
 */
int cuda_api_load(struct cuda_api *api, char *why, size_t why_len, CUresult *init_rc);
/* Forgets the entry points. The library stays loaded: the driver keeps
 * threads of its own, and unloading it under them is not safe. */
void cuda_api_unload(struct cuda_api *api);

/* "CUDA_ERROR_OUT_OF_MEMORY", or "CUresult 999" for a code the driver does
 * not name; always returns buf. */
const char *cuda_api_error_name(const struct cuda_api *api, CUresult rc, char *buf, size_t len);
/* The driver's description of rc, or "" when it has none. */
const char *cuda_api_error_string(const struct cuda_api *api, CUresult rc);

#define CUDA_UUID_LEN 41 /* "GPU-" + 36 + NUL */
/* nvidia-smi's form: "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (lowercase). */
void cuda_uuid_format(const CUuuid *uuid, char out[CUDA_UUID_LEN]);
/*
 * The UUID of dev as nvidia-smi and CUDA_VISIBLE_DEVICES spell it: "MIG-..."
 * for a MIG instance (its UUID differs from its parent GPU's, or its name
 * says "MIG"), else "GPU-...". The daemon and the library both name devices
 * by it, so they agree. CUDA_SUCCESS or the failing call's result.
 */
CUresult cuda_api_device_uuid(const struct cuda_api *api, CUdevice dev, char out[CUDA_UUID_LEN]);

#endif
