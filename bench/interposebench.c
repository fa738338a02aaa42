/*
 * interposebench.c - P10, the interposer's cost (issue 31): cuMemAlloc +
 * cuMemFree of 4 KiB through libgpubroker-intercept.so against the lease
 * path's gpb_alloc + gpb_free in the same run (bench/run.sh, on the fake
 * driver or a GPU).
 *
 *   gpb-interposebench lease N    gpb_alloc + gpb_free through libgpubroker
 *   gpb-interposebench driver N   cuMemAlloc + cuMemFree, as an unmodified
 *                                 program calls them (run under gpubroker-run)
 * Prints "ns per pair X". The driver is found with dlopen and dlsym (which
 * the interposer answers), so the program links no libcuda.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda.h>

#include "gpubroker.h"

#define WARM 2000
#define SIZE 4096

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static CUresult (*Init)(unsigned);
static CUresult (*DeviceGet)(CUdevice *, int);
static CUresult (*PrimaryCtxRetain)(CUcontext *, CUdevice);
static CUresult (*CtxSetCurrent)(CUcontext);
static CUresult (*MemAlloc)(CUdeviceptr *, size_t);
static CUresult (*MemFree)(CUdeviceptr);

static int load_driver(void)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	CUdevice dev;
	CUcontext ctx;

	if (!lib) {
		fprintf(stderr, "interposebench: %s\n", dlerror());
		return -1;
	}
	*(void **)&Init = dlsym(lib, "cuInit");
	*(void **)&DeviceGet = dlsym(lib, "cuDeviceGet");
	*(void **)&PrimaryCtxRetain = dlsym(lib, "cuDevicePrimaryCtxRetain");
	*(void **)&CtxSetCurrent = dlsym(lib, "cuCtxSetCurrent");
	*(void **)&MemAlloc = dlsym(lib, "cuMemAlloc_v2");
	*(void **)&MemFree = dlsym(lib, "cuMemFree_v2");
	if (!Init || !DeviceGet || !PrimaryCtxRetain || !CtxSetCurrent || !MemAlloc || !MemFree ||
	    Init(0) != CUDA_SUCCESS || DeviceGet(&dev, 0) != CUDA_SUCCESS ||
	    PrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || CtxSetCurrent(ctx) != CUDA_SUCCESS) {
		fprintf(stderr, "interposebench: the driver did not start\n");
		return -1;
	}
	return 0;
}

static int run_driver(long n)
{
	CUdeviceptr p;

	if (load_driver() < 0)
		return 1;
	for (int i = 0; i < WARM; i++) {
		if (MemAlloc(&p, SIZE) != CUDA_SUCCESS || MemFree(p) != CUDA_SUCCESS) {
			fprintf(stderr, "interposebench: cuMemAlloc/cuMemFree failed\n");
			return 1;
		}
	}
	double t0 = now_ns();
	for (long i = 0; i < n; i++) {
		MemAlloc(&p, SIZE);
		MemFree(p);
	}
	printf("ns per pair %.1f\n", (now_ns() - t0) / (double)n);
	return 0;
}

static int run_lease(long n)
{
	struct gpb_register_opts opts = {.name = "interposebench"};
	struct gpb_allocation a;
	gpb_client *c;
	uint64_t inst;

	/* The same context as the driver mode's: the primary one, current. */
	if (load_driver() < 0)
		return 1;
	if (gpb_connect(NULL, "interposebench", &c) < 0 || gpb_register(c, &opts, &inst) < 0) {
		fprintf(stderr, "interposebench: %s\n", gpb_last_error());
		return 1;
	}
	for (int i = 0; i < WARM; i++) {
		if (gpb_alloc(c, inst, SIZE, 0, &a) < 0 || gpb_free(c, a.id) < 0) {
			fprintf(stderr, "interposebench: %s\n", gpb_last_error());
			return 1;
		}
	}
	double t0 = now_ns();
	for (long i = 0; i < n; i++) {
		gpb_alloc(c, inst, SIZE, 0, &a);
		gpb_free(c, a.id);
	}
	printf("ns per pair %.1f\n", (now_ns() - t0) / (double)n);
	gpb_disconnect(c);
	return 0;
}

int main(int argc, char **argv)
{
	long n = argc > 2 ? atol(argv[2]) : 0;

	if (argc > 2 && n > 0 && strcmp(argv[1], "lease") == 0)
		return run_lease(n);
	if (argc > 2 && n > 0 && strcmp(argv[1], "driver") == 0)
		return run_driver(n);
	fprintf(stderr, "usage: %s lease|driver PAIRS\n", argv[0]);
	return 2;
}
