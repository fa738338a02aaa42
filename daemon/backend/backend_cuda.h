/*
 * backend_cuda.h - what the cuda backend's files share: the VMM transport
 * (backend_cuda_vmm.c) used by backend_cuda.c. Not an interface of the
 * backend layer: only these two files include it.
 */
#ifndef GPB_BACKEND_CUDA_H
#define GPB_BACKEND_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cudaapi.h"

/*
 * Whether CUDA device @dev (ordinal @ordinal) can serve VMM slabs shared by
 * POSIX file descriptor: the driver has the VMM entry points and the device
 * reports CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED and
 * CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED. True
 * with *granularity (the minimum allocation granularity), else false with
 * the reason in @why.
 */
bool backend_vmm_probe(const struct cuda_api *api, CUdevice dev, int ordinal, size_t *granularity,
                       char *why, size_t why_len);

/*
 * Makes a VMM slab of @size bytes rounded up to @granularity on device
 * @ordinal (its context pushed, for the scrub): cuMemCreate of pinned
 * device memory exportable as a POSIX descriptor, cleared through a
 * temporary mapping of the daemon's (then unmapped), and exported.
 * With @rdma the memory is asked for GPUDirect RDMA capable
 * (allocFlags.gpuDirectRDMACapable). CUDA_SUCCESS with *handle and *fd,
 * else the failing call's result with its name in *what and nothing left
 * behind.
 */
CUresult backend_vmm_create(const struct cuda_api *api, int ordinal, size_t granularity,
                            uint64_t size, bool rdma, CUmemGenericAllocationHandle *handle, int *fd,
                            const char **what);
/* Lets go of the daemon's descriptor and handle: the memory is the
 * driver's again once no client maps it either. */
CUresult backend_vmm_release(const struct cuda_api *api, CUmemGenericAllocationHandle handle,
                             int fd);

/* Whether device @dev takes allocFlags.gpuDirectRDMACapable in cuMemCreate
 * (CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED). */
bool backend_vmm_rdma(const struct cuda_api *api, CUdevice dev);

/*
 * The trial at start (context pushed): one granule made as a slab is
 * (backend_vmm_create, with @rdma), its descriptor imported as a client
 * would, and all of it released. CUDA_SUCCESS, or the failing call's
 * result with its name in *what and nothing left behind.
 */
CUresult backend_vmm_trial(const struct cuda_api *api, int ordinal, size_t granularity, bool rdma,
                           const char **what);

/* The 64 handle bytes of VMM slab @id: a tag that only names the slab for
 * the client's cache (the descriptor is the capability). 0 or -EIO. */
int backend_vmm_tag(uint64_t id, uint64_t size, unsigned char *tag, size_t len);

#endif
