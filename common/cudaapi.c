/*
 * cudaapi.c - loading the CUDA driver at run time.
 */
#include "cudaapi.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

/*
 * Symbol names are those of the ABI the typedefs describe: cuda.h maps
 * cuMemAlloc to cuMemAlloc_v2 and so on. Where a _v2 appeared in a later
 * driver than the one gpubroker supports at least (CUDA 11.0), the older
 * name with the same signature is the fallback.
 */
struct cuda_api_sym {
	const char *name;
	const char *fallback;
	size_t offset;
};

#define SYM(field, name, fallback)                                                                 \
	{                                                                                          \
		name, fallback, offsetof(struct cuda_api, field)                                   \
	}

static const struct cuda_api_sym cuda_api_syms[] = {
    SYM(GetErrorName, "cuGetErrorName", NULL),
    SYM(GetErrorString, "cuGetErrorString", NULL),
    SYM(Init, "cuInit", NULL),
    SYM(DriverGetVersion, "cuDriverGetVersion", NULL),
    SYM(DeviceGetCount, "cuDeviceGetCount", NULL),
    SYM(DeviceGet, "cuDeviceGet", NULL),
    SYM(DeviceGetName, "cuDeviceGetName", NULL),
    SYM(DeviceGetUuid, "cuDeviceGetUuid_v2", "cuDeviceGetUuid"),
    SYM(DeviceGetAttribute, "cuDeviceGetAttribute", NULL),
    SYM(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", NULL),
    SYM(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"),
    SYM(CtxPushCurrent, "cuCtxPushCurrent_v2", NULL),
    SYM(CtxPopCurrent, "cuCtxPopCurrent_v2", NULL),
    SYM(CtxGetCurrent, "cuCtxGetCurrent", NULL),
    SYM(CtxGetDevice, "cuCtxGetDevice", NULL),
    SYM(CtxSynchronize, "cuCtxSynchronize", NULL),
    SYM(MemGetInfo, "cuMemGetInfo_v2", NULL),
    SYM(MemAlloc, "cuMemAlloc_v2", NULL),
    SYM(MemFree, "cuMemFree_v2", NULL),
    SYM(MemsetD8, "cuMemsetD8_v2", NULL),
    SYM(MemGetAddressRange, "cuMemGetAddressRange_v2", NULL),
    SYM(IpcGetMemHandle, "cuIpcGetMemHandle", NULL),
    SYM(IpcOpenMemHandle, "cuIpcOpenMemHandle_v2", "cuIpcOpenMemHandle"),
    SYM(IpcCloseMemHandle, "cuIpcCloseMemHandle", NULL),
    SYM(MemcpyHtoD, "cuMemcpyHtoD_v2", NULL),
    SYM(MemcpyDtoH, "cuMemcpyDtoH_v2", NULL),
    SYM(MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", NULL),
    SYM(MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", NULL),
    SYM(StreamSynchronize, "cuStreamSynchronize", NULL),
    SYM(MemHostRegister, "cuMemHostRegister_v2", NULL),
    SYM(MemHostUnregister, "cuMemHostUnregister", NULL),
    SYM(MemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2", NULL),
};

/* The legacy-default-stream names: cuda.h maps the async ones to _ptsz
 * variants only under CUDA_API_PER_THREAD_DEFAULT_STREAM. */
static const struct cuda_api_sym cuda_api_pool_syms[] = {
    SYM(StreamCreate, "cuStreamCreate", NULL),
    SYM(StreamDestroy, "cuStreamDestroy_v2", NULL),
    SYM(MemPoolCreate, "cuMemPoolCreate", NULL),
    SYM(MemPoolDestroy, "cuMemPoolDestroy", NULL),
    SYM(MemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", NULL),
    SYM(MemFreeAsync, "cuMemFreeAsync", NULL),
    SYM(MemPoolExportToShareableHandle, "cuMemPoolExportToShareableHandle", NULL),
    SYM(MemPoolImportFromShareableHandle, "cuMemPoolImportFromShareableHandle", NULL),
    SYM(MemPoolExportPointer, "cuMemPoolExportPointer", NULL),
    SYM(MemPoolImportPointer, "cuMemPoolImportPointer", NULL),
};

static const struct cuda_api_sym cuda_api_vmm_syms[] = {
    SYM(MemGetAllocationGranularity, "cuMemGetAllocationGranularity", NULL),
    SYM(MemCreate, "cuMemCreate", NULL),
    SYM(MemRelease, "cuMemRelease", NULL),
    SYM(MemExportToShareableHandle, "cuMemExportToShareableHandle", NULL),
    SYM(MemImportFromShareableHandle, "cuMemImportFromShareableHandle", NULL),
    SYM(MemAddressReserve, "cuMemAddressReserve", NULL),
    SYM(MemAddressFree, "cuMemAddressFree", NULL),
    SYM(MemMap, "cuMemMap", NULL),
    SYM(MemUnmap, "cuMemUnmap", NULL),
    SYM(MemSetAccess, "cuMemSetAccess", NULL),
    SYM(MemGetAccess, "cuMemGetAccess", NULL),
    SYM(DeviceCanAccessPeer, "cuDeviceCanAccessPeer", NULL),
};

/* Each optional on its own (legacy-default-stream names, as above). */
static const struct cuda_api_sym cuda_api_optional_syms[] = {
    SYM(DevicePrimaryCtxGetState, "cuDevicePrimaryCtxGetState", NULL),
    SYM(CtxGetId, "cuCtxGetId", NULL),
    SYM(EventCreate, "cuEventCreate", NULL),
    SYM(EventRecord, "cuEventRecord", NULL),
    SYM(EventQuery, "cuEventQuery", NULL),
    SYM(EventSynchronize, "cuEventSynchronize", NULL),
    SYM(EventDestroy, "cuEventDestroy_v2", NULL),
    SYM(DevicePrimaryCtxReset, "cuDevicePrimaryCtxReset_v2", "cuDevicePrimaryCtxReset"),
    SYM(CtxCreate, "cuCtxCreate_v2", NULL),
    SYM(CtxDestroy, "cuCtxDestroy_v2", NULL),
    SYM(StreamQuery, "cuStreamQuery", NULL),
    SYM(MemsetD8Async, "cuMemsetD8Async", NULL),
    SYM(LaunchHostFunc, "cuLaunchHostFunc", NULL),
    SYM(PointerGetAttribute, "cuPointerGetAttribute", NULL),
    SYM(StreamIsCapturing, "cuStreamIsCapturing", NULL),
    SYM(StreamGetCaptureInfo, "cuStreamGetCaptureInfo_v3", NULL),
    SYM(UserObjectCreate, "cuUserObjectCreate", NULL),
    SYM(UserObjectRelease, "cuUserObjectRelease", NULL),
    SYM(GraphRetainUserObject, "cuGraphRetainUserObject", NULL),
    SYM(StreamBeginCapture, "cuStreamBeginCapture_v2", NULL),
    SYM(StreamEndCapture, "cuStreamEndCapture", NULL),
    SYM(GraphInstantiate, "cuGraphInstantiateWithFlags", NULL),
    SYM(GraphLaunch, "cuGraphLaunch", NULL),
    SYM(GraphExecDestroy, "cuGraphExecDestroy", NULL),
    SYM(GraphDestroy, "cuGraphDestroy", NULL),
    /* cuDeviceGetUuid before CUDA 11.4 answers a MIG instance's parent GPU:
     * only the MIG test uses it. */
    SYM(DeviceGetUuidV1, "cuDeviceGetUuid", NULL),
};
#undef SYM

/* Resolves syms[0..n) into api; the name of the first missing one, or NULL. */
static const char *cuda_api_resolve(void *lib, const struct cuda_api_sym *syms, size_t n,
                                    struct cuda_api *api)
{
	for (size_t i = 0; i < n; i++) {
		void *fn = dlsym(lib, syms[i].name);
		if (!fn && syms[i].fallback)
			fn = dlsym(lib, syms[i].fallback);
		if (!fn)
			return syms[i].name;
		/* A data pointer becomes a function pointer without a cast
		 * ISO C leaves undefined. */
		memcpy((char *)api + syms[i].offset, &fn, sizeof(fn));
	}
	return NULL;
}

/* Resolves an optional group: all of it (true), or none (false). */
static bool cuda_api_resolve_all(void *lib, const struct cuda_api_sym *syms, size_t n,
                                 struct cuda_api *api)
{
	if (!cuda_api_resolve(lib, syms, n, api))
		return true;
	for (size_t i = 0; i < n; i++)
		memset((char *)api + syms[i].offset, 0, sizeof(void (*)(void)));
	return false;
}

int cuda_api_load(struct cuda_api *api, char *why, size_t why_len, CUresult *init_rc)
{
	memset(api, 0, sizeof(*api));
	if (init_rc)
		*init_rc = CUDA_SUCCESS;
	dlerror();
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		const char *err = dlerror();
		snprintf(why, why_len, "cannot load libcuda.so.1: %s", err ? err : "unknown error");
		return -1;
	}
	const char *missing = cuda_api_resolve(
	    lib, cuda_api_syms, sizeof(cuda_api_syms) / sizeof(cuda_api_syms[0]), api);
	if (missing) {
		snprintf(why, why_len, "libcuda.so.1 lacks %s (a driver older than CUDA 11.0?)",
		         missing);
		memset(api, 0, sizeof(*api));
		return -1;
	}
	/* Without every pool entry point, none: allocator "async" is then
	 * refused rather than half there. Likewise VMM: transport ipc. */
	api->has_pools =
	    cuda_api_resolve_all(lib, cuda_api_pool_syms,
	                         sizeof(cuda_api_pool_syms) / sizeof(cuda_api_pool_syms[0]), api);
	api->has_vmm = cuda_api_resolve_all(
	    lib, cuda_api_vmm_syms, sizeof(cuda_api_vmm_syms) / sizeof(cuda_api_vmm_syms[0]), api);
	const size_t nopt = sizeof(cuda_api_optional_syms) / sizeof(cuda_api_optional_syms[0]);
	for (size_t i = 0; i < nopt; i++)
		cuda_api_resolve(lib, &cuda_api_optional_syms[i], 1, api);
	api->lib = lib;
	CUresult rc = api->Init(0);
	if (init_rc)
		*init_rc = rc;
	if (rc != CUDA_SUCCESS) {
		char name[64];
		snprintf(why, why_len, "cuInit failed: %s%s%s",
		         cuda_api_error_name(api, rc, name, sizeof(name)),
		         *cuda_api_error_string(api, rc) ? ": " : "",
		         cuda_api_error_string(api, rc));
		memset(api, 0, sizeof(*api));
		return -1;
	}
	if (api->DriverGetVersion(&api->driver_version) != CUDA_SUCCESS)
		api->driver_version = 0;
	return 0;
}

void cuda_api_unload(struct cuda_api *api)
{
	memset(api, 0, sizeof(*api));
}

const char *cuda_api_error_name(const struct cuda_api *api, CUresult rc, char *buf, size_t len)
{
	const char *name = NULL;
	if (api->GetErrorName && api->GetErrorName(rc, &name) == CUDA_SUCCESS && name)
		snprintf(buf, len, "%s", name);
	else
		snprintf(buf, len, "CUresult %d", (int)rc);
	return buf;
}

const char *cuda_api_error_string(const struct cuda_api *api, CUresult rc)
{
	const char *s = NULL;
	if (api->GetErrorString && api->GetErrorString(rc, &s) == CUDA_SUCCESS && s)
		return s;
	return "";
}

void cuda_uuid_format(const CUuuid *uuid, char out[CUDA_UUID_LEN])
{
	const unsigned char *b = (const unsigned char *)uuid->bytes;
	snprintf(out, CUDA_UUID_LEN,
	         "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
	         b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
	         b[14], b[15]);
}

CUresult cuda_api_device_uuid(const struct cuda_api *api, CUdevice dev, char out[CUDA_UUID_LEN])
{
	CUuuid uuid, parent;
	char name[256];
	CUresult rc = api->DeviceGetUuid(&uuid, dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	cuda_uuid_format(&uuid, out);
	bool mig = api->DeviceGetUuidV1 && api->DeviceGetUuidV1(&parent, dev) == CUDA_SUCCESS &&
	           memcmp(parent.bytes, uuid.bytes, sizeof(uuid.bytes)) != 0;
	/* "NVIDIA A100-SXM4-40GB MIG 1g.5gb" */
	if (!mig && api->DeviceGetName(name, (int)sizeof(name), dev) == CUDA_SUCCESS)
		mig = strstr(name, " MIG ") != NULL;
	if (mig)
		memcpy(out, "MIG-", 4);
	return CUDA_SUCCESS;
}
