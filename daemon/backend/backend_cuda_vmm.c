/*
 * backend_cuda_vmm.c - the cuda backend's VMM transport: slabs from
 * cuMemCreate, shared by file descriptor.
 *
 * Each slab is one physical allocation (pinned device memory whose
 * requested handle type is CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, its
 * size a multiple of the device's allocation granularity), exported once
 * with cuMemExportToShareableHandle. The descriptor rides on every grant
 * that hands the slab over (SCM_RIGHTS, as the sim backend's memfds), and
 * the client imports, reserves, maps and sets access. Nothing on the wire
 * names memory: a process reaches exactly the slabs whose descriptors it
 * was sent, whatever its uid or PID namespace. The driver counts
 * references, so the daemon's cuMemRelease never pulls memory from under a
 * client's mapping: it goes back to the driver when the last holder let
 * go (the broker keeps counting it until then: parting and ghost slabs).
 *
 * Scrubbing: cuMemCreate does not promise cleared memory. The daemon maps
 * each new slab into its own address space for a moment, clears it with
 * cuMemsetD8, synchronises, and unmaps, all before the descriptor exists.
 *
 * GPUDirect RDMA (issue 25): where the device reports
 * CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, slabs are
 * made with allocFlags.gpuDirectRDMACapable, so that NCCL, UCX and MPI can
 * register broker memory with a NIC as they could cuMemAlloc memory; the
 * driver refuses the flag where the attribute is 0.
 *
 * A trial at start (backend_vmm_trial): the attributes can promise what the
 * driver then refuses (Confidential Computing, some virtualised GPUs
 * advertise VMM but refuse export), which would fail every allocation; one
 * granule is made, exported, imported and released before the device is
 * given transport vmm.
 */
#include "backend_cuda.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#define VMM_TAG_MAGIC "GPBVMM\0\0"

static void backend_vmm_prop(CUmemAllocationProp *prop, int ordinal)
{
	memset(prop, 0, sizeof(*prop));
	prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop->requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop->location.id = ordinal;
}

bool backend_vmm_probe(const struct cuda_api *api, CUdevice dev, int ordinal, size_t *granularity,
                       char *why, size_t why_len)
{
	int vmm = 0, fd = 0;
	CUmemAllocationProp prop;
	CUresult rc;

	if (!api->has_vmm) {
		snprintf(why, why_len, "the driver has no virtual memory management entry points");
		return false;
	}
	if (api->DeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
	                            dev) != CUDA_SUCCESS ||
	    vmm != 1) {
		snprintf(why, why_len, "the device reports no virtual memory management");
		return false;
	}
	if (api->DeviceGetAttribute(&fd,
	                            CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
	                            dev) != CUDA_SUCCESS ||
	    fd != 1) {
		snprintf(why, why_len,
		         "the device cannot export memory as a POSIX file descriptor");
		return false;
	}
	backend_vmm_prop(&prop, ordinal);
	rc = api->MemGetAllocationGranularity(granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	if (rc != CUDA_SUCCESS || *granularity == 0) {
		snprintf(why, why_len, "cuMemGetAllocationGranularity failed (CUresult %d)",
		         (int)rc);
		return false;
	}
	return true;
}

/* Clears the memory of @handle through a temporary mapping (context
 * pushed); the mapping is gone again on return. */
static CUresult backend_vmm_scrub(const struct cuda_api *api, int ordinal,
                                  CUmemGenericAllocationHandle handle, size_t size,
                                  const char **what)
{
	CUdeviceptr va = 0;
	CUmemAccessDesc access = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = ordinal},
	                          .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	CUresult rc, rc2;

	*what = "cuMemAddressReserve (scrub)";
	if ((rc = api->MemAddressReserve(&va, size, 0, 0, 0)) != CUDA_SUCCESS)
		return rc;
	*what = "cuMemMap (scrub)";
	if ((rc = api->MemMap(va, size, 0, handle, 0)) != CUDA_SUCCESS)
		goto free_va;
	*what = "cuMemSetAccess (scrub)";
	if ((rc = api->MemSetAccess(va, size, &access, 1)) != CUDA_SUCCESS)
		goto unmap;
	*what = "cuMemsetD8 (scrub)";
	if ((rc = api->MemsetD8(va, 0, size)) != CUDA_SUCCESS)
		goto unmap;
	*what = "cuCtxSynchronize (scrub)";
	rc = api->CtxSynchronize();
unmap:
	rc2 = api->MemUnmap(va, size);
	if (rc == CUDA_SUCCESS && rc2 != CUDA_SUCCESS) {
		*what = "cuMemUnmap (scrub)";
		rc = rc2;
	}
free_va:
	rc2 = api->MemAddressFree(va, size);
	if (rc == CUDA_SUCCESS && rc2 != CUDA_SUCCESS) {
		*what = "cuMemAddressFree (scrub)";
		rc = rc2;
	}
	return rc;
}

CUresult backend_vmm_create(const struct cuda_api *api, int ordinal, size_t granularity,
                            uint64_t size, bool rdma, CUmemGenericAllocationHandle *handle, int *fd,
                            const char **what)
{
	CUmemAllocationProp prop;
	CUresult rc;

	if (size > SIZE_MAX - granularity) {
		*what = "cuMemCreate";
		return CUDA_ERROR_INVALID_VALUE;
	}
	size_t phys = (size_t)((size + granularity - 1) / granularity * granularity);
	backend_vmm_prop(&prop, ordinal);
	prop.allocFlags.gpuDirectRDMACapable = rdma ? 1 : 0;
	*what = "cuMemCreate";
	if ((rc = api->MemCreate(handle, phys, &prop, 0)) != CUDA_SUCCESS)
		return rc;
	rc = backend_vmm_scrub(api, ordinal, *handle, phys, what);
	if (rc == CUDA_SUCCESS) {
		*what = "cuMemExportToShareableHandle";
		*fd = -1;
		rc = api->MemExportToShareableHandle(fd, *handle,
		                                     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
	}
	if (rc != CUDA_SUCCESS)
		api->MemRelease(*handle);
	return rc;
}

CUresult backend_vmm_release(const struct cuda_api *api, CUmemGenericAllocationHandle handle,
                             int fd)
{
	if (fd >= 0)
		close(fd);
	return api->MemRelease(handle);
}

int backend_vmm_tag(uint64_t id, uint64_t size, unsigned char *tag, size_t len)
{
	if (len < 24)
		return -EINVAL;
	memcpy(tag, VMM_TAG_MAGIC, 8);
	memcpy(tag + 8, &id, 8);
	memcpy(tag + 16, &size, 8);
	/* Unique across daemons too: the client's cache is per process. */
	return getrandom(tag + 24, len - 24, 0) == (ssize_t)(len - 24) ? 0 : -EIO;
}

bool backend_vmm_rdma(const struct cuda_api *api, CUdevice dev)
{
	int v = 0;
	return api->DeviceGetAttribute(&v,
	                               CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED,
	                               dev) == CUDA_SUCCESS &&
	       v == 1;
}

CUresult backend_vmm_trial(const struct cuda_api *api, int ordinal, size_t granularity, bool rdma,
                           const char **what)
{
	CUmemGenericAllocationHandle handle, imported;
	int fd = -1;
	CUresult rc =
	    backend_vmm_create(api, ordinal, granularity, granularity, rdma, &handle, &fd, what);
	if (rc != CUDA_SUCCESS)
		return rc;
	*what = "cuMemImportFromShareableHandle";
	rc = api->MemImportFromShareableHandle(&imported, (void *)(intptr_t)fd,
	                                       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	if (rc == CUDA_SUCCESS) {
		*what = "cuMemRelease (imported)";
		rc = api->MemRelease(imported);
	}
	CUresult rc2 = backend_vmm_release(api, handle, fd);
	if (rc == CUDA_SUCCESS && rc2 != CUDA_SUCCESS) {
		*what = "cuMemRelease";
		rc = rc2;
	}
	return rc;
}
