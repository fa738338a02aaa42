/*
 * intercept.h - libgpubroker-intercept.so (gpubroker-run, man
 * gpubroker-run(1)): a program's device memory through the broker, the
 * program unmodified, the library loaded with LD_PRELOAD.
 *
 * intercept.c has the driver entry points it answers (the cu* below);
 * intercept_sym.c how a program reaches them: by linking (the preloaded
 * library's symbols come first), dlsym on a libcuda.so.1 handle, and
 * cuGetProcAddress, which libcudart, cuda-bindings and so numba-cuda, CuPy,
 * PyTorch and JAX use. Everything else goes to the driver untouched.
 */
#ifndef GPB_CLIENT_INTERCEPT_H
#define GPB_CLIENT_INTERCEPT_H

#include <stdbool.h>

#include <cuda.h>

/* The driver's own entry points, resolved from libcuda.so.1 by the real
 * dlsym; NULL where the driver has none. */
struct icpt_real {
	void *lib;
	CUresult (*Init)(unsigned);
	CUresult (*CtxGetDevice)(CUdevice *);
	CUresult (*MemAlloc)(CUdeviceptr *, size_t);
	CUresult (*MemAllocPitch)(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
	CUresult (*MemFree)(CUdeviceptr);
	CUresult (*MemAllocAsync)(CUdeviceptr *, size_t, CUstream);
	CUresult (*MemAllocFromPoolAsync)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
	CUresult (*MemFreeAsync)(CUdeviceptr, CUstream);
	CUresult (*MemGetInfo)(size_t *, size_t *);
	CUresult (*DeviceTotalMem)(size_t *, CUdevice);
	CUresult (*MemGetAddressRange)(CUdeviceptr *, size_t *, CUdeviceptr);
	CUresult (*PointerGetAttribute)(void *, CUpointer_attribute, CUdeviceptr);
	CUresult (*PointerGetAttributes)(unsigned, CUpointer_attribute *, void **, CUdeviceptr);
	CUresult (*MemCreate)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
	                      unsigned long long);
	CUresult (*MemAllocManaged)(CUdeviceptr *, size_t, unsigned);
	CUresult (*IpcGetMemHandle)(CUipcMemHandle *, CUdeviceptr);
	CUresult (*GetProcAddress)(const char *, void **, int, cuuint64_t);
	CUresult (*GetProcAddress_v2)(const char *, void **, int, cuuint64_t,
	                              CUdriverProcAddressQueryResult *);
};

/* The driver's entry points, resolved at the first call (thread-safe). */
const struct icpt_real *icpt_real(void);

/* The real dlsym (glibc's, found with dlvsym). */
void *icpt_real_dlsym(void *handle, const char *name);

/* Our entry point for the driver's exported @name ("cuMemAlloc_v2"), or
 * NULL when it is not one of ours. */
void *icpt_ours_by_export(const char *name);

#endif
