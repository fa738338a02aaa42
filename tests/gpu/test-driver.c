/*
 * test-driver.c (gpu-driver) - the driver entry points the frameworks'
 * memory paths use (numba-cuda through cuda-bindings, CuPy; suite
 * frameworks), each resolved the way cuda-bindings resolves them, through
 * cuGetProcAddress_v2, and each asked what a driver refuses. In the gpu suite
 * it settles on hardware that the fake (tests/fakecuda/fakecuda_procaddr.c,
 * fakecuda_copy.c) answers as the driver does; in cuda-fake it holds the
 * fake to it. No daemon: these are the driver's answers alone.
 */
#include "gpu-common.h"

#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB (1u << 20)

static PFN_cuGetProcAddress_v12000 get_proc;

/* The entry point @name as a caller built against this cuda.h gets it. */
static void *proc(const char *name)
{
	void *fn = NULL;
	CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	CUresult rc = get_proc(name, &fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &st);
	if (rc != CUDA_SUCCESS || st != CU_GET_PROC_ADDRESS_SUCCESS || !fn)
		GT_FAIL("cuGetProcAddress(%s) = %d, status %d", name, (int)rc, (int)st);
	return fn;
}

#define PROC(type, name) ((type)proc(name))

/* cuGetProcAddress(@name, this cuda.h's version, @flags) in a child: its
 * CUresult (0, 1 or 500; other results read as 3), or -signal if the driver
 * crashed the child. */
static int probe_child(const char *name, cuuint64_t flags)
{
	fflush(stdout);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		void *fn = NULL;
		CUdriverProcAddressQueryResult st;
		CUresult rc = get_proc(name, &fn, CUDA_VERSION, flags, &st);
		_exit(rc == CUDA_SUCCESS               ? 0
		      : rc == CUDA_ERROR_INVALID_VALUE ? 1
		      : rc == CUDA_ERROR_NOT_FOUND     ? 2
		                                       : 3);
	}
	int status;
	CHECK(waitpid(pid, &status, 0) == pid);
	if (WIFSIGNALED(status))
		return -WTERMSIG(status);
	static const int results[] = {CUDA_SUCCESS, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_FOUND,
	                              -1000};
	return results[WEXITSTATUS(status) & 3];
}

static const char *probe_answer(int r)
{
	static char buf[48];
	if (r < 0 && r > -1000)
		snprintf(buf, sizeof(buf), "crashed (signal %d)", -r);
	else
		snprintf(buf, sizeof(buf), "%s",
		         r == CUDA_SUCCESS               ? "CUDA_SUCCESS"
		         : r == CUDA_ERROR_INVALID_VALUE ? "CUDA_ERROR_INVALID_VALUE"
		         : r == CUDA_ERROR_NOT_FOUND     ? "CUDA_ERROR_NOT_FOUND"
		                                         : "another error");
	return buf;
}

static void check_get_proc_address(void)
{
	void *fn = (void *)1;
	CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
	CUresult rc = get_proc("cuNoSuchEntryPoint", &fn, CUDA_VERSION, 0, &st);
	printf("cuGetProcAddress(cuNoSuchEntryPoint) = %d, status %d, fn %p\n", (int)rc, (int)st,
	       fn);
	/* Not found is a success with no function (an H100, driver 580). */
	CHECK(rc == CUDA_SUCCESS);
	CHECK(st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND && fn == NULL);
	/* Stream-ordered pools came with CUDA 11.2: likewise (cuda.h's
	 * documentation of cuGetProcAddress). */
	fn = (void *)1;
	rc = get_proc("cuMemPoolCreate", &fn, 11000, 0, &st);
	printf("cuGetProcAddress(cuMemPoolCreate, 11000) = %d, status %d, fn %p\n", (int)rc,
	       (int)st, fn);
	CHECK(rc == CUDA_SUCCESS && fn == NULL);
	CHECK(st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
	CHECK(get_proc("cuMemPoolCreate", &fn, 11020, 0, &st) == CUDA_SUCCESS && fn);
	/* The status is optional. */
	CHECK(get_proc("cuInit", &fn, CUDA_VERSION, 0, NULL) == CUDA_SUCCESS && fn);
	/* Bad arguments, each in a child: an H200 (driver 580.159.04) crashed
	 * this program on one of them (SIGSEGV, which one unseen). The fake
	 * refuses both with CUDA_ERROR_INVALID_VALUE; on hardware the answer is
	 * printed, a crash included, for docs/cuda.md. */
	int bad_flags = probe_child("cuMemAlloc", 1u << 5);
	int bad_name = probe_child(NULL, 0);
	printf("cuGetProcAddress(cuMemAlloc, flags 1<<5) = %s; cuGetProcAddress(NULL) = %s\n",
	       probe_answer(bad_flags), probe_answer(bad_name));
	if (gt_fake())
		CHECK(bad_flags == CUDA_ERROR_INVALID_VALUE &&
		      bad_name == CUDA_ERROR_INVALID_VALUE);
}

struct api {
	PFN_cuMemAlloc_v3020 alloc;
	PFN_cuMemFree_v3020 free;
	PFN_cuMemcpyHtoD_v3020 htod;
	PFN_cuMemcpyDtoH_v3020 dtoh;
	PFN_cuMemcpyDtoD_v3020 dtod;
	PFN_cuMemcpy_v4000 copy;
	PFN_cuMemcpyHtoDAsync_v3020 htod_async;
	PFN_cuMemcpyDtoHAsync_v3020 dtoh_async;
	PFN_cuMemcpyDtoDAsync_v3020 dtod_async;
	PFN_cuMemsetD16_v3020 set16;
	PFN_cuMemsetD32_v3020 set32;
	PFN_cuMemsetD32Async_v3020 set32_async;
	PFN_cuStreamCreate_v2000 stream_create;
	PFN_cuStreamSynchronize_v2000 stream_sync;
	PFN_cuStreamDestroy_v4000 stream_destroy;
	PFN_cuMemHostAlloc_v2020 host_alloc;
	PFN_cuMemFreeHost_v2000 free_host;
	PFN_cuMemHostGetFlags_v2030 host_flags;
	PFN_cuMemHostUnregister_v4000 host_unregister;
	PFN_cuPointerGetAttribute_v4000 attr;
	PFN_cuPointerGetAttributes_v7000 attrs;
};

static struct api resolve(void)
{
	return (struct api){
	    .alloc = PROC(PFN_cuMemAlloc_v3020, "cuMemAlloc"),
	    .free = PROC(PFN_cuMemFree_v3020, "cuMemFree"),
	    .htod = PROC(PFN_cuMemcpyHtoD_v3020, "cuMemcpyHtoD"),
	    .dtoh = PROC(PFN_cuMemcpyDtoH_v3020, "cuMemcpyDtoH"),
	    .dtod = PROC(PFN_cuMemcpyDtoD_v3020, "cuMemcpyDtoD"),
	    .copy = PROC(PFN_cuMemcpy_v4000, "cuMemcpy"),
	    .htod_async = PROC(PFN_cuMemcpyHtoDAsync_v3020, "cuMemcpyHtoDAsync"),
	    .dtoh_async = PROC(PFN_cuMemcpyDtoHAsync_v3020, "cuMemcpyDtoHAsync"),
	    .dtod_async = PROC(PFN_cuMemcpyDtoDAsync_v3020, "cuMemcpyDtoDAsync"),
	    .set16 = PROC(PFN_cuMemsetD16_v3020, "cuMemsetD16"),
	    .set32 = PROC(PFN_cuMemsetD32_v3020, "cuMemsetD32"),
	    .set32_async = PROC(PFN_cuMemsetD32Async_v3020, "cuMemsetD32Async"),
	    .stream_create = PROC(PFN_cuStreamCreate_v2000, "cuStreamCreate"),
	    .stream_sync = PROC(PFN_cuStreamSynchronize_v2000, "cuStreamSynchronize"),
	    .stream_destroy = PROC(PFN_cuStreamDestroy_v4000, "cuStreamDestroy"),
	    .host_alloc = PROC(PFN_cuMemHostAlloc_v2020, "cuMemHostAlloc"),
	    .free_host = PROC(PFN_cuMemFreeHost_v2000, "cuMemFreeHost"),
	    .host_flags = PROC(PFN_cuMemHostGetFlags_v2030, "cuMemHostGetFlags"),
	    .host_unregister = PROC(PFN_cuMemHostUnregister_v4000, "cuMemHostUnregister"),
	    .attr = PROC(PFN_cuPointerGetAttribute_v4000, "cuPointerGetAttribute"),
	    .attrs = PROC(PFN_cuPointerGetAttributes_v7000, "cuPointerGetAttributes"),
	};
}

static void check_copies(const struct api *a)
{
	CUdeviceptr d1, d2;
	unsigned char in[4096], out[4096];
	CU(a->alloc(&d1, 4 * MiB));
	CU(a->alloc(&d2, 4 * MiB));
	gt_fill(in, sizeof(in), 7);

	/* Host to device to device to host, synchronous. */
	CU(a->htod(d1, in, sizeof(in)));
	CU(a->dtod(d2 + 100, d1, sizeof(in)));
	memset(out, 0, sizeof(out));
	CU(a->dtoh(out, d2 + 100, sizeof(out)));
	CHECK(memcmp(in, out, sizeof(in)) == 0);
	/* Unified addressing: cuMemcpy takes host pointers as well. */
	memset(out, 0, sizeof(out));
	CU(a->copy((CUdeviceptr)(uintptr_t)out, d2 + 100, sizeof(out)));
	CHECK(memcmp(in, out, sizeof(in)) == 0);
	/* A device-to-device copy from host memory is refused. */
	CHECK(a->dtod(d2, (CUdeviceptr)(uintptr_t)in, sizeof(in)) != CUDA_SUCCESS);

	/* Queued: a pageable source is taken at the call, a pageable
	 * destination is written when the call returns (CUDA's rules). */
	CUstream s;
	CU(a->stream_create(&s, CU_STREAM_NON_BLOCKING));
	CU(a->htod_async(d1, in, sizeof(in), s));
	unsigned char first = in[0];
	memset(in, 0xee, sizeof(in));
	CU(a->dtod_async(d2, d1, sizeof(in), s));
	memset(out, 0, sizeof(out));
	CU(a->dtoh_async(out, d2, sizeof(out), s));
	CHECK(out[0] == first && out[sizeof(out) - 1] != 0xee);
	CU(a->set32_async(d2, 0x01020304u, 16, s));
	CU(a->stream_sync(s));
	uint32_t word = 0;
	CU(a->dtoh(&word, d2 + 60, sizeof(word)));
	CHECK(word == 0x01020304u);
	CU(a->stream_destroy(s));

	/* Memsets of 16 and 32 bits: aligned only. */
	CU(a->set16(d1 + 2, 0xbeef, 4));
	uint16_t half[4] = {0};
	CU(a->dtoh(half, d1 + 2, sizeof(half)));
	CHECK(half[0] == 0xbeef && half[3] == 0xbeef);
	CHECK(a->set16(d1 + 1, 0xbeef, 4) == CUDA_ERROR_INVALID_VALUE);
	CHECK(a->set32(d1 + 2, 1, 4) == CUDA_ERROR_INVALID_VALUE);

	/* Attributes of device memory. */
	unsigned int type = 0;
	CU(a->attr(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d1 + 10));
	CHECK(type == CU_MEMORYTYPE_DEVICE);
	CUdeviceptr start = 0;
	size_t size = 0;
	CU(a->attr(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, d1 + 10));
	CU(a->attr(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, d1 + 10));
	CHECK(start == d1 && size == 4 * MiB);
	CUdeviceptr dp = 0;
	CU(a->attr(&dp, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, d1 + 10));
	CHECK(dp == d1 + 10);
	int ordinal = -1;
	CU(a->attr(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, d1));
	CHECK(ordinal == 0);
	CU(a->free(d1));
	CU(a->free(d2));
}

static void check_host_memory(const struct api *a)
{
	void *p = NULL;
	CHECK(a->host_alloc(&p, MiB, 1u << 20) == CUDA_ERROR_INVALID_VALUE);
	CU(a->host_alloc(&p, MiB, CU_MEMHOSTALLOC_PORTABLE));
	unsigned flags = 0;
	CU(a->host_flags(&flags, p));
	CHECK(flags & CU_MEMHOSTALLOC_PORTABLE);
	unsigned int type = 0;
	CU(a->attr(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)p));
	CHECK(type == CU_MEMORYTYPE_HOST);
	void *hp = NULL;
	CU(a->attr(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, (CUdeviceptr)(uintptr_t)p + 8));
	CHECK(hp == (char *)p + 8);
	/* Allocated, not registered: the fake refuses cuMemHostUnregister
	 * with CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED; an H200 (driver
	 * 580.159.04) answered otherwise, which is printed here until a GPU
	 * run says what it is and the fake follows. */
	CUresult unreg = a->host_unregister(p);
	printf("cuMemHostUnregister of cuMemHostAlloc memory = %d\n", (int)unreg);
	if (gt_fake())
		CHECK(unreg == CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
	/* A copy between it and device memory. */
	CUdeviceptr d;
	CU(a->alloc(&d, MiB));
	memset(p, 0x42, MiB);
	CU(a->htod(d, p, MiB));
	memset(p, 0, MiB);
	CU(a->dtoh(p, d, MiB));
	CHECK(((unsigned char *)p)[MiB - 1] == 0x42);
	CU(a->free(d));
	CU(a->free_host(p));

	/* Pageable memory: no page-locked memory to free, no attributes, but
	 * cuPointerGetAttributes answers zeros rather than an error. */
	static char pageable[4096];
	CHECK(a->free_host(pageable) == CUDA_ERROR_INVALID_VALUE);
	CHECK(a->attr(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)pageable) ==
	      CUDA_ERROR_INVALID_VALUE);
	CUpointer_attribute which[2] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
	                                CU_POINTER_ATTRIBUTE_DEVICE_POINTER};
	unsigned int kind = 99;
	CUdeviceptr where = 99;
	void *data[2] = {&kind, &where};
	CU(a->attrs(2, which, data, (CUdeviceptr)(uintptr_t)pageable));
	CHECK(kind == 0 && where == 0);
}

/* CUDA 13 changed cuCtxGetDevice and cuCtxSynchronize: at 13000 they take
 * a context (cudaTypedefs.h), another function than at 12000. */
static void check_ctx_v13(void)
{
	void *fn12 = NULL, *fn13 = NULL;
	CUdriverProcAddressQueryResult st;
	CU(get_proc("cuCtxGetDevice", &fn12, 12000, 0, &st));
	CU(get_proc("cuCtxGetDevice", &fn13, 13000, 0, &st));
	CHECK(fn12 && fn13 && fn12 != fn13);
	PFN_cuCtxGetDevice_v13000 get_device;
	memcpy(&get_device, &fn13, sizeof(fn13));
	CUcontext ctx = NULL;
	CU(cu.CtxGetCurrent(&ctx));
	CUdevice dev = -1;
	CU(get_device(&dev, ctx));
	CHECK(dev == 0);
	dev = -1;
	CU(get_device(&dev, NULL)); /* NULL: the current context */
	CHECK(dev == 0);
	CU(get_proc("cuCtxSynchronize", &fn12, 12000, 0, &st));
	CU(get_proc("cuCtxSynchronize", &fn13, 13000, 0, &st));
	CHECK(fn12 && fn13 && fn12 != fn13);
	PFN_cuCtxSynchronize_v13000 sync;
	memcpy(&sync, &fn13, sizeof(fn13));
	CU(sync(ctx));
}

/* What the driver answers about destroyed contexts (measured on an H100):
 * cuCtxGetId of a destroyed one is CUDA_ERROR_CONTEXT_IS_DESTROYED; after
 * cuDevicePrimaryCtxReset with a retain outstanding the primary context
 * reads inactive and its old handle is destroyed, and the next retain
 * gives the same handle with a new id. Last: it resets the primary
 * context. */
static void check_destroyed_contexts(void)
{
	CUcontext own = NULL, primary = NULL, again = NULL;
	unsigned long long id = 0, id2 = 0;
	CHECK(cu.CtxCreate && cu.CtxDestroy && cu.CtxGetId && cu.DevicePrimaryCtxGetState &&
	      cu.DevicePrimaryCtxReset);
	CU(cu.CtxCreate(&own, 0, 0));
	CU(cu.CtxGetId(own, &id));
	CU(cu.CtxDestroy(own));
	CHECK(cu.CtxGetId(own, &id) == CUDA_ERROR_CONTEXT_IS_DESTROYED);

	unsigned flags = 0;
	int active = 0;
	CU(cu.DevicePrimaryCtxRetain(&primary, 0));
	CU(cu.DevicePrimaryCtxGetState(0, &flags, &active));
	CHECK(active == 1);
	CU(cu.CtxGetId(primary, &id));
	CU(cu.DevicePrimaryCtxReset(0));
	CU(cu.DevicePrimaryCtxGetState(0, &flags, &active));
	CHECK(active == 0);
	CHECK(cu.CtxGetId(primary, &id2) == CUDA_ERROR_CONTEXT_IS_DESTROYED);
	CU(cu.DevicePrimaryCtxRetain(&again, 0));
	CU(cu.CtxGetId(again, &id2));
	printf("primary context: id %llu, after a reset the same handle %s, id %llu\n", id,
	       again == primary ? "again" : "NOT again", id2);
	CHECK(again == primary && id2 != id);
	CU(cu.DevicePrimaryCtxRelease(0));
	CU(cu.DevicePrimaryCtxRelease(0));
}

static void check_device_facts(void)
{
	PFN_cuDeviceGetPCIBusId_v4010 bus_id =
	    PROC(PFN_cuDeviceGetPCIBusId_v4010, "cuDeviceGetPCIBusId");
	PFN_cuDeviceGetByPCIBusId_v4010 by_bus =
	    PROC(PFN_cuDeviceGetByPCIBusId_v4010, "cuDeviceGetByPCIBusId");
	PFN_cuDeviceTotalMem_v3020 total_mem = PROC(PFN_cuDeviceTotalMem_v3020, "cuDeviceTotalMem");
	PFN_cuCtxGetStreamPriorityRange_v5050 range =
	    PROC(PFN_cuCtxGetStreamPriorityRange_v5050, "cuCtxGetStreamPriorityRange");
	PFN_cuStreamCreateWithPriority_v5050 create =
	    PROC(PFN_cuStreamCreateWithPriority_v5050, "cuStreamCreateWithPriority");
	PFN_cuStreamGetPriority_v5050 get_priority =
	    PROC(PFN_cuStreamGetPriority_v5050, "cuStreamGetPriority");
	PFN_cuStreamDestroy_v4000 destroy = PROC(PFN_cuStreamDestroy_v4000, "cuStreamDestroy");

	char id[32];
	CUdevice dev = -1;
	CU(bus_id(id, sizeof(id), 0));
	CU(by_bus(&dev, id));
	CHECK(dev == 0);
	CHECK(by_bus(&dev, "not a bus id") == CUDA_ERROR_INVALID_VALUE);
	size_t total = 0, mfree = 0, mtotal = 0;
	CU(total_mem(&total, 0));
	gt_mem_info(&mfree, &mtotal);
	CHECK(total == mtotal);

	int least = 0, greatest = 0, got = 1;
	CU(range(&least, &greatest));
	CHECK(greatest <= least);
	CUstream s;
	CU(create(&s, 0, greatest - 100)); /* clamped */
	CU(get_priority(s, &got));
	CHECK(got == greatest);
	CU(destroy(s));
}

int main(int argc, char **argv)
{
	gt_require_gpu(argc, argv);
	void *sym = dlsym(cu.lib, "cuGetProcAddress_v2");
	if (!sym)
		GT_FAIL("the driver has no cuGetProcAddress_v2 (CUDA 12 or later)");
	memcpy(&get_proc, &sym, sizeof(get_proc));
	check_get_proc_address();
	gt_cuda_context(0);
	struct api a = resolve();
	check_copies(&a);
	check_host_memory(&a);
	check_device_facts();
	check_ctx_v13();
	CHECK(gt_fake_violations() == 0);
	check_destroyed_contexts();
	printf("gpu-driver: ok\n");
	return 0;
}
