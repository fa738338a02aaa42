/*
 * cupy.c - CuPy's CFunctionAllocator over the broker (gpb_cupy_*,
 * include/gpubroker.h): fwalloc.h's allocator for CuPy, its settings
 * $GPUBROKER_CUPY_*, no Python per allocation.
 *
 * CuPy passes no stream to these functions: a free records its fence on
 * the legacy default stream (gpb_free), which follows CuPy's default
 * stream and every blocking stream (cupy.cuda.Stream's default).
 *
 * A refusal. CuPy takes whatever the function returns as the pointer (a
 * NULL would become an array at address 0); CuPy's Cython (3.x) checks for
 * a Python exception when the function returns -1. So inside a Python
 * process the refusal is raised as MemoryError("gpubroker: <reason>") and
 * -1 returned; the Python C API is looked up in the process (dlsym), so
 * that this library does not depend on Python.
 */
#include "config.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>

#include "error.h"
#include "export.h"
#include "fwalloc.h"

static struct fwalloc cupy_fw = FWALLOC_INIT("cupy", "GPUBROKER_CUPY_", "gpb_cupy_malloc");

/* Raises MemoryError in the calling Python thread: true, or false when
 * this is no Python process. */
static bool cupy_raise(const char *reason)
{
	int (*ensure)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "PyGILState_Ensure");
	void (*release)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "PyGILState_Release");
	void (*set)(void *, const char *) =
	    (void (*)(void *, const char *))dlsym(RTLD_DEFAULT, "PyErr_SetString");
	void **type = (void **)dlsym(RTLD_DEFAULT, "PyExc_MemoryError");
	char msg[512];

	if (!ensure || !release || !set || !type || !*type)
		return false;
	snprintf(msg, sizeof(msg), "gpubroker: %s", reason);
	int state = ensure();
	set(*type, msg);
	release(state);
	return true;
}

GPB_EXPORT void *gpb_cupy_malloc(void *param, size_t size, int device)
{
	void *ptr = NULL;
	int rc;

	error_clear();
	if (param)
		rc = error_set(GPB_E_INVALID, "gpb_cupy_malloc: param must be NULL");
	else if (size == 0)
		return NULL; /* CuPy asks none; cudaMalloc(0) is NULL */
	else
		rc = fwalloc_alloc(&cupy_fw, size, device, NULL, false, &ptr);
	if (rc == 0)
		return ptr;
	return cupy_raise(error_message()) ? (void *)(intptr_t)-1 : NULL;
}

GPB_EXPORT void gpb_cupy_free(void *param, void *ptr, int device)
{
	(void)param;
	(void)device;
	error_clear();
	if (ptr)
		fwalloc_free(&cupy_fw, ptr, NULL, false);
}

GPB_EXPORT int gpb_cupy_mem_info(int device, uint64_t *instance, struct gpb_mem_info *out)
{
	error_clear();
	return fwalloc_mem_info(&cupy_fw, device, instance, out);
}
