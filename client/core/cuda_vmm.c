/*
 * cuda_vmm.c - the library's side of the "vmm" transport: a slab is the
 * physical memory behind the POSIX descriptor that came with its grant.
 *
 * Mapping a slab is five driver calls (cuMemImportFromShareableHandle,
 * cuMemAddressReserve, cuMemMap, cuMemRelease, cuMemSetAccess) and
 * unmapping two (cuMemUnmap, cuMemAddressFree), where legacy IPC takes one
 * each; the slab cache (slab.c) makes that once per slab and process, not
 * once per allocation. The imported handle is released as soon as the
 * range is mapped: the mapping holds the memory, so nothing else needs
 * undoing at close, and the memory goes back to the driver when both the
 * daemon and every mapping let go.
 *
 * Access: read-write for the slab's device and for every other device of
 * this process that can access it as a peer (cuDeviceCanAccessPeer), as
 * legacy IPC's CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS allows.
 */
#include "cuda_vmm.h"

#define CUDA_VMM_MAX_ACCESS 64

/* The access descriptors: dev first, then its peers here. Returns how many. */
static size_t cuda_vmm_access(const struct cuda_api *api, CUdevice dev,
                              CUmemAccessDesc out[CUDA_VMM_MAX_ACCESS])
{
	int count = 0;
	size_t n = 0;
	out[n++] =
	    (CUmemAccessDesc){.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = (int)dev},
	                      .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	if (api->DeviceGetCount(&count) != CUDA_SUCCESS)
		return n;
	for (int i = 0; i < count && n < CUDA_VMM_MAX_ACCESS; i++) {
		CUdevice peer;
		int can = 0;
		if (api->DeviceGet(&peer, i) != CUDA_SUCCESS || peer == dev ||
		    api->DeviceCanAccessPeer(&can, peer, dev) != CUDA_SUCCESS || !can)
			continue;
		out[n++] = (CUmemAccessDesc){
		    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = (int)peer},
		    .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	}
	return n;
}

CUresult cuda_vmm_map(const struct cuda_api *api, CUdevice dev, int fd, uint64_t size,
                      CUdeviceptr *ptr, size_t *mapped, const char **what)
{
	CUmemAllocationProp prop = {
	    .type = CU_MEM_ALLOCATION_TYPE_PINNED,
	    .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
	    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = (int)dev}};
	CUmemAccessDesc access[CUDA_VMM_MAX_ACCESS];
	size_t naccess = cuda_vmm_access(api, dev, access);
	CUmemGenericAllocationHandle handle;
	size_t granularity = 0;
	CUdeviceptr va = 0;
	CUresult rc;

	*what = "cuMemGetAllocationGranularity";
	rc =
	    api->MemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	if (rc != CUDA_SUCCESS)
		return rc;
	/* The daemon made the memory a multiple of the same granularity. */
	if (granularity == 0 || size == 0 || size > SIZE_MAX - granularity)
		return CUDA_ERROR_INVALID_VALUE;
	size_t n = (size_t)((size + granularity - 1) / granularity * granularity);
	*what = "cuMemImportFromShareableHandle";
	rc = api->MemImportFromShareableHandle(&handle, (void *)(uintptr_t)fd,
	                                       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	if (rc != CUDA_SUCCESS)
		return rc;
	*what = "cuMemAddressReserve";
	rc = api->MemAddressReserve(&va, n, 0, 0, 0);
	if (rc != CUDA_SUCCESS)
		goto release;
	*what = "cuMemMap";
	rc = api->MemMap(va, n, 0, handle, 0);
	if (rc != CUDA_SUCCESS)
		goto free_va;
	*what = "cuMemSetAccess";
	rc = api->MemSetAccess(va, n, access, naccess);
	if (rc != CUDA_SUCCESS) {
		api->MemUnmap(va, n);
		goto free_va;
	}
	/* The mapping holds the memory from here on. */
	api->MemRelease(handle);
	*ptr = va;
	*mapped = n;
	return CUDA_SUCCESS;
free_va:
	api->MemAddressFree(va, n);
release:
	api->MemRelease(handle);
	return rc;
}

void cuda_vmm_unmap(const struct cuda_api *api, CUdeviceptr ptr, size_t mapped)
{
	api->MemUnmap(ptr, mapped);
	api->MemAddressFree(ptr, mapped);
}
