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
 * Maps the memory whose POSIX descriptor is @fd (exported by the daemon
 * with cuMemExportToShareableHandle; not closed here) on device @dev:
 * imports it, reserves an address range, maps @size bytes rounded up to
 * the allocation granularity, lets go of the imported handle (the mapping
 * holds the memory) and makes the range readable and writable from @dev.
 * CUDA_SUCCESS with *ptr and *mapped (the bytes mapped, for cuda_vmm_unmap),
 * else the failing call's result, its name in *what, nothing left behind.
 */
CUresult cuda_vmm_map(const struct cuda_api *api, CUdevice dev, int fd, uint64_t size,
                      CUdeviceptr *ptr, size_t *mapped, const char **what);
/* Unmaps and frees the address range; the driver frees the memory when the
 * daemon has let go too. */
void cuda_vmm_unmap(const struct cuda_api *api, CUdeviceptr ptr, size_t mapped);

/*
 * The process keeps a copy of a slab's descriptor while a mapping of it
 * lives, keyed by the slab's handle @tag: a mapping that died with its CUDA
 * context is mapped anew from it (the daemon sends no descriptor for a
 * slab the connection holds). With @fd >= 0 (not taken) a copy is kept,
 * or the one kept already referenced again; with @fd < 0 the kept one is.
 * 0 with *kept (owned by the table), else -1 (none kept, or no memory).
 */
int cuda_vmm_keep(const uint8_t *tag, int fd, int *kept);
/* Drops a reference taken by cuda_vmm_keep(); the last closes the copy. */
void cuda_vmm_unkeep(const uint8_t *tag);
/* In a forked child (cuda.c's fork handler): closes and forgets every kept
 * descriptor, the parent's. */
void cuda_vmm_forget_all(void);

#endif
