/*
 * fakecuda_ipc.c - the fake libcuda.so.1's legacy IPC handles
 * (cuIpcGetMemHandle, cuIpcOpenMemHandle, cuIpcCloseMemHandle) and the
 * import of another process's allocation that pools share with them. Apart
 * from fakecuda.c to keep each file short; see the comment at its top.
 */
#include "fakecuda_internal.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

FAKE_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *handle, CUdeviceptr dptr)
{
	NEED_CONTEXT();
	INJECT("cuIpcGetMemHandle");
	pthread_mutex_lock(&fake_lock);
	/* A small allocation's handle maps its whole block: "the entire
	 * underlying memory block" of the programming guide. */
	uintptr_t base = 0;
	uint64_t size = 0;
	struct fake_mem *m = NULL;
	bool sub = fake_sub_range((uintptr_t)dptr, &base, &size, &m) == 0;
	if (!sub)
		m = fake_mem_find((uintptr_t)dptr, 1);
	struct fake_handle h = {.magic = FAKE_MAGIC};
	bool ok = m && !m->imported && !m->pool && !m->vmm &&
	          (sub ? base == (uintptr_t)dptr : m->base == (uintptr_t)dptr && !m->packed);
	if (ok) {
		h.serial = m->serial;
		h.size = m->size;
		h.device = m->device;
		h.owner = getpid();
		h.offset = (uintptr_t)dptr - m->base;
	}
	pthread_mutex_unlock(&fake_lock);
	if (!ok)
		return CUDA_ERROR_INVALID_VALUE;
	memset(handle, 0, sizeof(*handle));
	memcpy(handle->reserved, &h, sizeof(h));
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle,
                                        unsigned int flags)
{
	NEED_CONTEXT();
	INJECT("cuIpcOpenMemHandle");
	struct fake_handle h;
	memcpy(&h, handle.reserved, sizeof(h));
	if (flags != CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS || memcmp(h.magic, FAKE_MAGIC, 8) != 0)
		return CUDA_ERROR_INVALID_VALUE;
	/* As CUDA: a process cannot open its own allocation's handle. */
	if (h.owner == getpid())
		return CUDA_ERROR_INVALID_CONTEXT;
	uint32_t uid;
	uint64_t pidns;
	if (!fake_mem_owner(h.serial, &uid, &pidns))
		return CUDA_ERROR_INVALID_HANDLE;
	CUresult rc = fake_ipc_allowed(uid, pidns);
	if (rc != CUDA_SUCCESS)
		return rc;
	return fake_import(&h, 0, pdptr);
}

/* Maps another process's allocation h (of pool `pool`, or 0): the core of
 * cuIpcOpenMemHandle and cuMemPoolImportPointer. */
CUresult fake_import(const struct fake_handle *hp, uint64_t pool, CUdeviceptr *pdptr)
{
	struct fake_handle h = *hp;
	pthread_mutex_lock(&fake_lock);
	for (struct fake_mem *m = fake_mem_next(NULL); m; m = fake_mem_next(m)) {
		if (m->imported && m->serial == h.serial) {
			/* A legacy handle is opened by one context per device
			 * per process (the CUDA documentation of
			 * cuIpcOpenMemHandle); the real driver's answer to a
			 * second context is "resource already mapped". */
			if (!pool && m->ctx != fake_current()) {
				pthread_mutex_unlock(&fake_lock);
				return CUDA_ERROR_ALREADY_MAPPED;
			}
			/* Opened already: the driver counts references. */
			m->opens++;
			*pdptr = (CUdeviceptr)(m->base + h.offset);
			pthread_mutex_unlock(&fake_lock);
			return CUDA_SUCCESS;
		}
	}
	pthread_mutex_unlock(&fake_lock);
	struct fake_mem *m = calloc(1, sizeof(*m));
	if (!m)
		return CUDA_ERROR_OUT_OF_MEMORY;
	fake_lock_state();
	struct fake_record *r = fake_record_find(h.serial);
	int slot = -1;
	for (int j = 0; r && j < FAKE_MAX_IMPORTER && slot < 0; j++) {
		if (!r->importers[j] || !fake_pid_alive(r->importers[j]))
			slot = j;
	}
	char path[300];
	fake_mem_path(h.serial, path, sizeof(path));
	int fd = r && slot >= 0 && h.offset < h.size ? open(path, O_RDWR | O_CLOEXEC) : -1;
	void *p = MAP_FAILED;
	if (fd >= 0) {
		p = mmap(NULL, h.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		close(fd);
	}
	if (p != MAP_FAILED)
		r->importers[slot] = getpid();
	fake_unlock_state();
	if (p == MAP_FAILED) {
		free(m);
		return r ? CUDA_ERROR_MAP_FAILED : CUDA_ERROR_INVALID_HANDLE;
	}
	m->base = (uintptr_t)p;
	m->size = h.size;
	m->serial = h.serial;
	m->device = h.device;
	m->imported = true;
	m->opens = 1;
	m->pool = pool;
	m->ctx = fake_current();
	pthread_mutex_lock(&fake_lock);
	fake_mem_link(m);
	pthread_mutex_unlock(&fake_lock);
	*pdptr = (CUdeviceptr)(m->base + h.offset);
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
	NEED_CONTEXT();
	INJECT("cuIpcCloseMemHandle");
	return fake_unimport(dptr);
}

/* Drops one open of an imported mapping; the last unmaps it. */
CUresult fake_unimport(CUdeviceptr dptr)
{
	pthread_mutex_lock(&fake_lock);
	struct fake_mem *m = fake_mem_find((uintptr_t)dptr, 1);
	if (!m || !m->imported || m->vmm) {
		pthread_mutex_unlock(&fake_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (m->ctx != fake_current()) {
		pthread_mutex_unlock(&fake_lock);
		return CUDA_ERROR_INVALID_CONTEXT;
	}
	if (--m->opens > 0) {
		pthread_mutex_unlock(&fake_lock);
		return CUDA_SUCCESS;
	}
	fake_mem_unlink(m);
	pthread_mutex_unlock(&fake_lock);
	fake_async_closing(m->base, m->size, m->pool ? "cuMemFree" : "cuIpcCloseMemHandle");
	fake_unimport_record(m->serial);
	fake_unmap(m, false);
	return CUDA_SUCCESS;
}

/* This process no longer maps allocation serial. */
void fake_unimport_record(uint64_t serial)
{
	struct fake_record *r = fake_record_find(serial);
	for (int j = 0; r && j < FAKE_MAX_IMPORTER; j++) {
		if (r->importers[j] == getpid())
			r->importers[j] = 0;
	}
	fake_unlock_state();
}
