/*
 * fakecuda_host.c - the fake libcuda.so.1's registered host memory and copies.
 *
 * cuMemHostRegister and its kin keep this process's list of registered
 * ranges (nothing is pinned: it is host memory already), and the cuMemcpy
 * entry points copy between host memory and fake device memory, which is
 * host memory too, after checking that the device side is an allocation
 * (fakecuda.c) or a range registered for the device; the *Async ones are
 * queued (fakecuda_async.c). Apart from fakecuda.c
 * to keep each file short; see the comment at its top.
 */
#include "fakecuda_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- registered host memory (this process's) --------------------------------- */

struct fake_host {
	uintptr_t base;
	size_t size;
	unsigned flags;
	bool allocated; /* by cuMemHostAlloc (fakecuda_copy.c), not registered */
	struct fake_host *next;
};

static struct fake_host *fake_hosts; /* under fake_lock */

/* The registration whose range holds [p, p + n) (n 0: p itself), or NULL. */
static struct fake_host *fake_host_find(uintptr_t p, size_t n)
{
	for (struct fake_host *h = fake_hosts; h; h = h->next) {
		if (p >= h->base && p - h->base < h->size && n <= h->size - (p - h->base))
			return h;
	}
	return NULL;
}

CUresult fake_host_insert(void *p, size_t size, unsigned flags, bool allocated)
{
	struct fake_host *h = calloc(1, sizeof(*h));
	if (!h)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&fake_lock);
	for (struct fake_host *o = fake_hosts; o; o = o->next) {
		if ((uintptr_t)p < o->base + o->size && o->base < (uintptr_t)p + size) {
			pthread_mutex_unlock(&fake_lock);
			free(h);
			return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
		}
	}
	*h = (struct fake_host){(uintptr_t)p, size, flags, allocated, fake_hosts};
	fake_hosts = h;
	pthread_mutex_unlock(&fake_lock);
	return CUDA_SUCCESS;
}

CUresult fake_host_remove(void *p, bool allocated, size_t *size)
{
	pthread_mutex_lock(&fake_lock);
	for (struct fake_host **pp = &fake_hosts; *pp; pp = &(*pp)->next) {
		if ((*pp)->base == (uintptr_t)p && (*pp)->allocated == allocated) {
			struct fake_host *h = *pp;
			*pp = h->next;
			pthread_mutex_unlock(&fake_lock);
			if (size)
				*size = h->size;
			free(h);
			return CUDA_SUCCESS;
		}
	}
	pthread_mutex_unlock(&fake_lock);
	return allocated ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
}

bool fake_host_lookup(uintptr_t p, uintptr_t *base, size_t *size, unsigned *flags, bool *allocated)
{
	pthread_mutex_lock(&fake_lock);
	struct fake_host *h = fake_host_find(p, 0);
	if (h) {
		*base = h->base;
		*size = h->size;
		*flags = h->flags;
		*allocated = h->allocated;
	}
	pthread_mutex_unlock(&fake_lock);
	return h != NULL;
}

FAKE_EXPORT CUresult cuMemHostRegister_v2(void *p, size_t size, unsigned int flags)
{
	NEED_CONTEXT();
	INJECT("cuMemHostRegister");
	if (!p || !size)
		return CUDA_ERROR_INVALID_VALUE;
	return fake_host_insert(p, size, flags, false);
}

FAKE_EXPORT CUresult cuMemHostUnregister(void *p)
{
	NEED_CONTEXT();
	return fake_host_remove(p, false, NULL);
}

FAKE_EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int flags)
{
	NEED_CONTEXT();
	if (flags)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&fake_lock);
	struct fake_host *h = fake_host_find((uintptr_t)p, 0);
	bool mapped = h && (h->allocated || (h->flags & CU_MEMHOSTREGISTER_DEVICEMAP));
	pthread_mutex_unlock(&fake_lock);
	if (!mapped)
		return CUDA_ERROR_INVALID_VALUE;
	/* Unified addressing: the device sees it at the same address. */
	*pdptr = (CUdeviceptr)(uintptr_t)p;
	return CUDA_SUCCESS;
}

CUresult fake_copy_valid(uintptr_t device_side, size_t n)
{
	struct fake_mem *m = fake_mem_find(device_side, n);
	struct fake_host *h = m ? NULL : fake_host_find(device_side, n);
	bool mapped = h && (h->allocated || (h->flags & CU_MEMHOSTREGISTER_DEVICEMAP));
	return m || mapped ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* A synchronous copy: on the legacy default stream, it waits for the work
 * queued on the context's blocking streams first. */
static CUresult fake_copy(void *dst, const void *src, size_t n, uintptr_t device_side)
{
	NEED_CONTEXT();
	fake_async_drain(fake_current(), true);
	pthread_mutex_lock(&fake_lock);
	CUresult rc = fake_copy_valid(device_side, n);
	pthread_mutex_unlock(&fake_lock);
	if (rc != CUDA_SUCCESS)
		return rc;
	memmove(dst, src, n);
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t n)
{
	return fake_copy((void *)(uintptr_t)dst, src, n, (uintptr_t)dst);
}

FAKE_EXPORT CUresult cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t n)
{
	return fake_copy(dst, (const void *)(uintptr_t)src, n, (uintptr_t)src);
}

/* ---- for tests only ---------------------------------------------------------- */

/* Host ranges this process has registered and not unregistered. */
FAKE_EXPORT unsigned fakecuda_host_registrations(void)
{
	unsigned n = 0;
	pthread_mutex_lock(&fake_lock);
	for (struct fake_host *h = fake_hosts; h; h = h->next)
		n += !h->allocated;
	pthread_mutex_unlock(&fake_lock);
	return n;
}
