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
 * The descriptor that came with the grant is kept (one per slab and
 * process, cuda_vmm_keep) while a mapping of the slab lives: a CUDA
 * context reset takes mappings with it, and the slab is then mapped anew
 * from the copy, the daemon sending no descriptor for a slab the
 * connection holds.
 *
 * Access: read-write for the slab's device and for every other device of
 * this process that can access it as a peer (cuDeviceCanAccessPeer), as
 * legacy IPC's CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS allows.
 */
#include "cuda_vmm.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proto.h"

#define CUDA_VMM_MAX_ACCESS 64

/* A slab's descriptor kept for mapping it again (cuda_vmm_keep). */
struct cuda_vmm_kept {
	struct cuda_vmm_kept *next;
	uint8_t tag[PROTO_HANDLE_SIZE];
	int fd;
	unsigned refs;
};

static pthread_mutex_t cuda_vmm_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cuda_vmm_kept *cuda_vmm_kepts;

int cuda_vmm_keep(const uint8_t *tag, int fd, int *kept)
{
	struct cuda_vmm_kept *k;
	int rc = -1;

	pthread_mutex_lock(&cuda_vmm_lock);
	for (k = cuda_vmm_kepts; k && memcmp(k->tag, tag, PROTO_HANDLE_SIZE) != 0; k = k->next)
		;
	if (!k && fd >= 0 && (k = calloc(1, sizeof(*k)))) {
		k->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
		if (k->fd < 0) {
			free(k);
			k = NULL;
		} else {
			memcpy(k->tag, tag, PROTO_HANDLE_SIZE);
			k->next = cuda_vmm_kepts;
			cuda_vmm_kepts = k;
		}
	}
	if (k) {
		k->refs++;
		*kept = k->fd;
		rc = 0;
	}
	pthread_mutex_unlock(&cuda_vmm_lock);
	return rc;
}

void cuda_vmm_unkeep(const uint8_t *tag)
{
	pthread_mutex_lock(&cuda_vmm_lock);
	for (struct cuda_vmm_kept **pp = &cuda_vmm_kepts; *pp; pp = &(*pp)->next) {
		struct cuda_vmm_kept *k = *pp;
		if (memcmp(k->tag, tag, PROTO_HANDLE_SIZE) != 0)
			continue;
		if (--k->refs == 0) {
			*pp = k->next;
			close(k->fd);
			free(k);
		}
		break;
	}
	pthread_mutex_unlock(&cuda_vmm_lock);
}

void cuda_vmm_forget_all(void)
{
	/* The child's copies of the parent's descriptors: closed, so that a
	 * slab the daemon hands the child is mapped from what it sends. */
	while (cuda_vmm_kepts) {
		struct cuda_vmm_kept *k = cuda_vmm_kepts;
		cuda_vmm_kepts = k->next;
		close(k->fd);
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
