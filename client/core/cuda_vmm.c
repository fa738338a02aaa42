/*
 * cuda_vmm.c - the library's side of the "vmm" transport: a slab is the
 * physical memory behind the POSIX descriptor that came with its grant.
 *
 * Mapping a slab is five driver calls (cuMemImportFromShareableHandle,
 * cuMemAddressReserve, cuMemMap, cuMemSetAccess, and cuMemRelease when it
 * is unmapped for good) and unmapping two (cuMemUnmap, cuMemAddressFree),
 * where legacy IPC takes one each; the slab cache (slab.c) makes that once
 * per slab and process, not once per allocation.
 *
 * Descriptors: none per slab. The descriptor that came with the grant is
 * imported and closed at once (slab_cache_get closes it after the open);
 * the imported allocation handle is kept instead (one per slab and
 * process, cuda_vmm_keep) while a mapping of the slab lives, dead or not: a
 * CUDA context reset may take mappings with it, and the slab is then
 * mapped anew from the handle, the daemon sending no descriptor for a slab
 * the connection holds. A handle is a driver object and costs no
 * descriptor (an H100: after the import, close(fd), cuMemMap and the
 * release of both handles the memory stays usable), where a kept copy of
 * the descriptor cost one per slab: 80 GiB in 64 MiB slabs is 1,280, over
 * the usual soft RLIMIT_NOFILE of 1,024. Whether a reset also invalidates
 * imported handles is for a GPU to say (test-gpu-ctx prints it): if mapping
 * from the kept handle fails, the allocation answers GPB_E_CONTEXT_RESET
 * as for any memory lost with its context (slab_cache_renew).
 *
 * Access: read-write for the slab's device and for every other device of
 * this process that can access it as a peer (cuDeviceCanAccessPeer), as
 * legacy IPC's CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS allows.
 */
#include "cuda_vmm.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

#define CUDA_VMM_MAX_ACCESS 64

/* A slab's imported handle kept for mapping it again (cuda_vmm_keep). */
struct cuda_vmm_kept {
	struct cuda_vmm_kept *next;
	uint8_t tag[PROTO_HANDLE_SIZE];
	CUmemGenericAllocationHandle handle;
	unsigned refs;
};

static pthread_mutex_t cuda_vmm_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cuda_vmm_kept *cuda_vmm_kepts;

/* The import of descriptor @fd. */
static CUresult cuda_vmm_import(const struct cuda_api *api, int fd,
                                CUmemGenericAllocationHandle *handle, const char **what)
{
	*what = "cuMemImportFromShareableHandle";
	return api->MemImportFromShareableHandle(handle, (void *)(uintptr_t)fd,
	                                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
}

CUresult cuda_vmm_keep(const struct cuda_api *api, const uint8_t *tag, int fd,
                       CUmemGenericAllocationHandle *handle, const char **what)
{
	CUmemGenericAllocationHandle fresh = 0;
	struct cuda_vmm_kept *k;
	CUresult rc = CUDA_SUCCESS;

	pthread_mutex_lock(&cuda_vmm_lock);
	for (k = cuda_vmm_kepts; k && memcmp(k->tag, tag, PROTO_HANDLE_SIZE) != 0; k = k->next)
		;
	if (!k && fd < 0) {
		*what = "the slab's kept handle";
		rc = CUDA_ERROR_NOT_FOUND;
		goto out;
	}
	if (fd >= 0) {
		rc = cuda_vmm_import(api, fd, &fresh, what);
		if (rc != CUDA_SUCCESS)
			goto out;
	}
	if (!k) {
		k = calloc(1, sizeof(*k));
		if (!k) {
			api->MemRelease(fresh);
			*what = "allocating a handle record";
			rc = CUDA_ERROR_OUT_OF_MEMORY;
			goto out;
		}
		memcpy(k->tag, tag, PROTO_HANDLE_SIZE);
		k->handle = fresh;
		k->next = cuda_vmm_kepts;
		cuda_vmm_kepts = k;
	} else if (fd >= 0) {
		/* Kept for mappings that died with a context (a live one is
		 * never opened again), and maybe gone with it: the
		 * descriptor the daemon sent now is the sure one. */
		api->MemRelease(k->handle);
		k->handle = fresh;
	}
	k->refs++;
	*handle = k->handle;
out:
	pthread_mutex_unlock(&cuda_vmm_lock);
	return rc;
}

void cuda_vmm_unkeep(const struct cuda_api *api, const uint8_t *tag)
{
	struct cuda_vmm_kept *gone = NULL;

	pthread_mutex_lock(&cuda_vmm_lock);
	for (struct cuda_vmm_kept **pp = &cuda_vmm_kepts; *pp; pp = &(*pp)->next) {
		struct cuda_vmm_kept *k = *pp;
		if (memcmp(k->tag, tag, PROTO_HANDLE_SIZE) != 0)
			continue;
		if (--k->refs == 0) {
			*pp = k->next;
			gone = k;
		}
		break;
	}
	pthread_mutex_unlock(&cuda_vmm_lock);
	if (!gone)
		return;
	/* The mappings are gone: the memory goes back to the driver when the
	 * daemon lets go too. Refused for a handle a reset took: nothing to
	 * undo then. */
	api->MemRelease(gone->handle);
	free(gone);
}

void cuda_vmm_forget_all(void)
{
	/* The parent's handles, not valid in a child under CUDA: forgotten
	 * without a driver call, so that a slab the daemon hands the child is
	 * mapped from the descriptor it sends. */
	while (cuda_vmm_kepts) {
		struct cuda_vmm_kept *k = cuda_vmm_kepts;
		cuda_vmm_kepts = k->next;
		free(k);
	}
	pthread_mutex_init(&cuda_vmm_lock, NULL);
}

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

CUresult cuda_vmm_map(const struct cuda_api *api, CUdevice dev, CUmemGenericAllocationHandle handle,
                      uint64_t size, CUdeviceptr *ptr, size_t *mapped, const char **what)
{
	CUmemAllocationProp prop = {
	    .type = CU_MEM_ALLOCATION_TYPE_PINNED,
	    .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
	    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = (int)dev}};
	CUmemAccessDesc access[CUDA_VMM_MAX_ACCESS];
	size_t naccess = cuda_vmm_access(api, dev, access);
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
	*what = "cuMemAddressReserve";
	rc = api->MemAddressReserve(&va, n, 0, 0, 0);
	if (rc != CUDA_SUCCESS)
		return rc;
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
	*ptr = va;
	*mapped = n;
	return CUDA_SUCCESS;
free_va:
	api->MemAddressFree(va, n);
	return rc;
}

void cuda_vmm_unmap(const struct cuda_api *api, CUdeviceptr ptr, size_t mapped)
{
	api->MemUnmap(ptr, mapped);
	api->MemAddressFree(ptr, mapped);
}
