/*
 * fakecuda_pool.c - the fake libcuda.so.1's stream-ordered memory pools.
 *
 * A pool is an id in this process; its allocations are fakecuda.c's device
 * memory tagged with that id, its shareable handle a descriptor of the
 * control file naming it (every pool's descriptor has one inode, as every
 * one the driver exports is /dev/nvidiactl: fakecuda_internal.h), and a
 * pointer's export data is imported through fakecuda.c's IPC mapping once
 * the pool was imported. Streams are fakecuda_async.c's. Apart from fakecuda.c to keep
 * each file short; see the comment at its top.
 */
#include "fakecuda_internal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- stream-ordered memory pools ------------------------------------------- */

#define POOL_MAGIC 0x9001c0deu

struct fake_pool {
	uint32_t magic;
	int device;
	uint64_t id; /* unique across processes (the state's serials) */
	bool imported;
};

/* The ids of the pools this process imported, for fakecuda_imported_pools. */
static uint64_t fake_imported[64];

/* Test-only: the ids of every pool this process imported (up to max): a
 * test compares them between processes of different users. */
FAKE_EXPORT unsigned fakecuda_imported_pools(uint64_t *ids, unsigned max)
{
	unsigned n = 0;
	pthread_mutex_lock(&fake_lock);
	for (unsigned i = 0; i < sizeof(fake_imported) / sizeof(fake_imported[0]); i++) {
		if (fake_imported[i] && n < max)
			ids[n++] = fake_imported[i];
	}
	pthread_mutex_unlock(&fake_lock);
	return n;
}

static struct fake_pool *fake_pool_of(CUmemoryPool pool)
{
	struct fake_pool *p = (struct fake_pool *)(void *)pool;
	return p && p->magic == POOL_MAGIC ? p : NULL;
}

FAKE_EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
	NEED_INIT();
	INJECT("cuMemPoolCreate");
	if (fake_no_pools)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    props->location.type != CU_MEM_LOCATION_TYPE_DEVICE || props->location.id < 0 ||
	    props->location.id >= fake_devices ||
	    props->handleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_INVALID_VALUE;
	struct fake_pool *p = calloc(1, sizeof(*p));
	if (!p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	p->id = fake_new_serial();
	p->magic = POOL_MAGIC;
	p->device = props->location.id;
	*pool = (CUmemoryPool)(void *)p;
	return CUDA_SUCCESS;
}

/* Outstanding allocations stay valid, as in CUDA (they are released when
 * freed); only the pool object goes. */
FAKE_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
	NEED_INIT();
	struct fake_pool *p = fake_pool_of(pool);
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	p->magic = 0;
	free(p);
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t size, CUmemoryPool pool,
                                             CUstream stream)
{
	(void)stream;
	NEED_CONTEXT();
	INJECT("cuMemAllocFromPoolAsync");
	struct fake_pool *p = fake_pool_of(pool);
	if (!p || p->imported)
		return CUDA_ERROR_INVALID_VALUE;
	/* Carved from the pool's segments, as the driver's pools do. */
	return fake_sub_alloc(p->device, size, p->id, dptr);
}

FAKE_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream)
{
	(void)stream;
	return cuMemFree(dptr);
}

/* The device's default pool: served as cuMemAlloc (the fake runs streams'
 * work at once, so stream order is program order). */
FAKE_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream stream)
{
	(void)stream;
	return cuMemAlloc(dptr, size);
}

/* Rows of 512 bytes' multiples (the driver's pitch on current GPUs); an
 * element of 4, 8 or 16 bytes, as the driver requires. */
FAKE_EXPORT CUresult cuMemAllocPitch(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                                     unsigned int elem)
{
	if (!dptr || !pitch || !width || !height || (elem != 4 && elem != 8 && elem != 16))
		return CUDA_ERROR_INVALID_VALUE;
	size_t row = (width + 511) / 512 * 512;
	if (height > SIZE_MAX / row)
		return CUDA_ERROR_OUT_OF_MEMORY;
	CUresult rc = cuMemAlloc(dptr, row * height);
	if (rc == CUDA_SUCCESS)
		*pitch = row;
	return rc;
}

FAKE_EXPORT CUresult cuMemPoolExportToShareableHandle(void *handle, CUmemoryPool pool,
                                                      CUmemAllocationHandleType type,
                                                      unsigned long long flags)
{
	NEED_INIT();
	INJECT("cuMemPoolExportToShareableHandle");
	struct fake_pool *p = fake_pool_of(pool);
	if (!p || p->imported || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || flags)
		return CUDA_ERROR_INVALID_VALUE;
	int fd = fake_ctl_export(FAKE_CTL_CODE(p->id, p->device, FAKE_CTL_POOL));
	if (fd < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*(int *)handle = fd;
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemPoolImportFromShareableHandle(CUmemoryPool *pool, void *handle,
                                                        CUmemAllocationHandleType type,
                                                        unsigned long long flags)
{
	NEED_INIT();
	INJECT("cuMemPoolImportFromShareableHandle");
	uint64_t code;
	int fd = (int)(intptr_t)handle;
	if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || flags ||
	    fake_ctl_code(fd, &code) < 0 || FAKE_CTL_KIND(code) != FAKE_CTL_POOL ||
	    FAKE_CTL_DEVICE(code) >= fake_devices)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t id = FAKE_CTL_SERIAL(code);
	struct fake_pool *p = calloc(1, sizeof(*p));
	if (!p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*p = (struct fake_pool){
	    .magic = POOL_MAGIC, .device = FAKE_CTL_DEVICE(code), .id = id, .imported = true};
	pthread_mutex_lock(&fake_lock);
	for (unsigned i = 0; i < sizeof(fake_imported) / sizeof(fake_imported[0]); i++) {
		if (!fake_imported[i]) {
			fake_imported[i] = id;
			break;
		}
	}
	pthread_mutex_unlock(&fake_lock);
	*pool = (CUmemoryPool)(void *)p;
	return CUDA_SUCCESS;
}

/* The export data: a fake_handle naming the allocation (another magic, so
 * cuIpcOpenMemHandle refuses it), then the pool id. */
FAKE_EXPORT CUresult cuMemPoolExportPointer(CUmemPoolPtrExportData *out, CUdeviceptr dptr)
{
	NEED_CONTEXT();
	INJECT("cuMemPoolExportPointer");
	_Static_assert(sizeof(struct fake_handle) + 8 <= sizeof(out->reserved), "room");
	pthread_mutex_lock(&fake_lock);
	uintptr_t base = 0;
	uint64_t size = 0;
	struct fake_mem *m = NULL;
	bool ok = fake_sub_range((uintptr_t)dptr, &base, &size, &m) == 0 && m->pool &&
	          base == (uintptr_t)dptr;
	struct fake_handle h = {.magic = FAKE_PTR_MAGIC};
	uint64_t pool = 0;
	if (ok) {
		/* The import maps the whole segment. */
		h = (struct fake_handle){.magic = FAKE_PTR_MAGIC,
		                         .serial = m->serial,
		                         .size = m->size,
		                         .device = m->device,
		                         .owner = getpid(),
		                         .offset = base - m->base};
		pool = m->pool;
	}
	pthread_mutex_unlock(&fake_lock);
	if (!ok)
		return CUDA_ERROR_INVALID_VALUE;
	memset(out, 0, sizeof(*out));
	memcpy(out->reserved, &h, sizeof(h));
	memcpy(out->reserved + sizeof(h), &pool, sizeof(pool));
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemPoolImportPointer(CUdeviceptr *dptr, CUmemoryPool pool,
                                            CUmemPoolPtrExportData *data)
{
	NEED_CONTEXT();
	INJECT("cuMemPoolImportPointer");
	struct fake_pool *p = fake_pool_of(pool);
	struct fake_handle h;
	uint64_t id;
	memcpy(&h, data->reserved, sizeof(h));
	memcpy(&id, data->reserved + sizeof(h), sizeof(id));
	/* Only through the pool it came from, imported from its owner. */
	if (!p || !p->imported || memcmp(h.magic, FAKE_PTR_MAGIC, 8) != 0 || id != p->id)
		return CUDA_ERROR_INVALID_VALUE;
	return fake_import(&h, id, dptr);
}
