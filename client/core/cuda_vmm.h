/*
 * cuda_vmm.h - mapping a slab of the "vmm" transport (cuda_vmm.c), for the
 * cuda opener (cuda.c). Internal to the library.
 */
#ifndef GPB_CLIENT_CUDA_VMM_H
#define GPB_CLIENT_CUDA_VMM_H

#include <stddef.h>
#include <stdint.h>

#include "cudaapi.h"

/*
 * The process's imported handle of a slab's memory, keyed by the slab's
 * handle @tag, kept while a mapping of the slab lives (a live one, or one
 * that died with its CUDA context and is mapped anew from it): the
 * descriptor the daemon sent is not kept (the caller closes it). With
 * @fd >= 0 (not taken) the descriptor is imported (and replaces a handle
 * kept for dead mappings); with @fd < 0 the kept handle is taken. Each
 * success takes a reference, dropped with cuda_vmm_unkeep(). Returns
 * CUDA_SUCCESS with *handle (owned by the table), CUDA_ERROR_NOT_FOUND with
 * @fd < 0 and none kept, else the failing call's result, its name in *what.
 */
CUresult cuda_vmm_keep(const struct cuda_api *api, const uint8_t *tag, int fd,
                       CUmemGenericAllocationHandle *handle, const char **what);
/* Drops a reference taken by cuda_vmm_keep(); the last releases the handle
 * (cuMemRelease), whatever mappings of it are left holding the memory. */
void cuda_vmm_unkeep(const struct cuda_api *api, const uint8_t *tag);

/*
 * Maps the memory of @handle (from cuda_vmm_keep) on device @dev: reserves
 * an address range, maps @size bytes rounded up to the allocation
 * granularity and makes the range readable and writable from @dev and its
 * peers. CUDA_SUCCESS with *ptr and *mapped (the bytes mapped, for
 * cuda_vmm_unmap), else the failing call's result, its name in *what,
 * nothing left behind.
 */
CUresult cuda_vmm_map(const struct cuda_api *api, CUdevice dev, CUmemGenericAllocationHandle handle,
                      uint64_t size, CUdeviceptr *ptr, size_t *mapped, const char **what);
/* Unmaps and frees the address range; the driver frees the memory when the
 * handle is released and the daemon has let go too. */
void cuda_vmm_unmap(const struct cuda_api *api, CUdeviceptr ptr, size_t mapped);
/* In a forked child (cuda.c's fork handler): forgets every kept handle,
 * the parent's, without a driver call. */
void cuda_vmm_forget_all(void);

#endif
