/*
 * intercept-prog.c - an unmodified CUDA driver-API program, the subject of
 * tests/frameworks/test_intercept.py under gpubroker-run. It knows nothing
 * of the broker: it checks what the driver API tells it.
 *
 * Built twice: intercept-direct calls the driver as a program linked with
 * -lcuda does; intercept-procaddr (-DVIA_PROCADDR) dlopens libcuda.so.1,
 * takes cuGetProcAddress_v2 with dlsym and every other entry point from it,
 * as libcudart and cuda-bindings do.
 *
 *   intercept-X basic        every entry point once; prints "total T free F"
 *   intercept-X hold SIZE    allocates SIZE, prints "holding", waits on stdin
 *   intercept-X gone         allocates, prints "ready", reads a line (the
 *                            daemon is killed meanwhile), then expects out
 *                            of memory within 256 MiB (what its leases
 *                            still hold is served first) and every free
 *                            to succeed
 *   intercept-X threads N    N threads allocating and freeing at once
 *   intercept-X fork         allocates, forks; the child allocates too
 *   intercept-X create       prints cuMemCreate's answer; a block from a
 *                            pool of its own (cuMemAllocFromPoolAsync)
 *   intercept-X dl           dlsym's RTLD_NEXT and RTLD_DEFAULT as glibc
 *                            answers them, with the interposer in between
 *   intercept-X over         allocates 1 MiB blocks until refused; prints
 *                            "refused after B bytes, total T"
 *   intercept-X bench N      N pairs of cuMemAlloc+cuMemFree of 4 KiB;
 *                            prints "ns per pair X"
 * Exit status 0 when every check held, 1 otherwise (a line says which).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>

#define MiB (1024 * 1024)

/* The entry points, however they were found. */
static struct {
	CUresult (*Init)(unsigned);
	CUresult (*DeviceGet)(CUdevice *, int);
	CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
	CUresult (*CtxSetCurrent)(CUcontext);
	CUresult (*MemGetInfo)(size_t *, size_t *);
	CUresult (*DeviceTotalMem)(size_t *, CUdevice);
	CUresult (*MemAlloc)(CUdeviceptr *, size_t);
	CUresult (*MemAllocPitch)(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
	CUresult (*MemFree)(CUdeviceptr);
	CUresult (*MemAllocAsync)(CUdeviceptr *, size_t, CUstream);
	CUresult (*MemFreeAsync)(CUdeviceptr, CUstream);
	CUresult (*MemsetD8)(CUdeviceptr, unsigned char, size_t);
	CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
	CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
	CUresult (*MemGetAddressRange)(CUdeviceptr *, size_t *, CUdeviceptr);
	CUresult (*PointerGetAttribute)(void *, CUpointer_attribute, CUdeviceptr);
	CUresult (*MemCreate)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
	                      unsigned long long);
	CUresult (*IpcGetMemHandle)(CUipcMemHandle *, CUdeviceptr);
	CUresult (*MemPoolCreate)(CUmemoryPool *, const CUmemPoolProps *);
	CUresult (*MemAllocFromPoolAsync)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
	CUresult (*MemRelease)(CUmemGenericAllocationHandle);
} cu;

static int failures;

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                       \
			fprintf(stderr, __VA_ARGS__);                                              \
			fputc('\n', stderr);                                                       \
			failures++;                                                                \
		}                                                                                  \
	} while (0)

#define OK(call) CHECK((call) == CUDA_SUCCESS, "%s", #call)

#ifdef VIA_PROCADDR
static void load(void)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "FAIL dlopen: %s\n", dlerror());
		exit(1);
	}
	CUresult (*gpa)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
	*(void **)&gpa = dlsym(lib, "cuGetProcAddress_v2");
	if (!gpa) {
		fprintf(stderr, "FAIL no cuGetProcAddress_v2\n");
		exit(1);
	}
#define G(field, name)                                                                             \
	do {                                                                                       \
		CUdriverProcAddressQueryResult st;                                                 \
		if (gpa(name, (void **)&cu.field, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &st) !=      \
		        CUDA_SUCCESS ||                                                            \
		    st != CU_GET_PROC_ADDRESS_SUCCESS || !cu.field) {                              \
			fprintf(stderr, "FAIL cuGetProcAddress(%s)\n", name);                      \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)
	G(Init, "cuInit");
	G(DeviceGet, "cuDeviceGet");
	G(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
	G(CtxSetCurrent, "cuCtxSetCurrent");
	G(MemGetInfo, "cuMemGetInfo");
	G(DeviceTotalMem, "cuDeviceTotalMem");
	G(MemAlloc, "cuMemAlloc");
	G(MemAllocPitch, "cuMemAllocPitch");
	G(MemFree, "cuMemFree");
	G(MemAllocAsync, "cuMemAllocAsync");
	G(MemFreeAsync, "cuMemFreeAsync");
	G(MemsetD8, "cuMemsetD8");
	G(MemcpyDtoH, "cuMemcpyDtoH");
	G(MemcpyHtoD, "cuMemcpyHtoD");
	G(MemGetAddressRange, "cuMemGetAddressRange");
	G(PointerGetAttribute, "cuPointerGetAttribute");
	G(MemCreate, "cuMemCreate");
	G(IpcGetMemHandle, "cuIpcGetMemHandle");
	G(MemPoolCreate, "cuMemPoolCreate");
	G(MemAllocFromPoolAsync, "cuMemAllocFromPoolAsync");
	G(MemRelease, "cuMemRelease");
#undef G
}
#else
static void load(void)
{
	cu.Init = cuInit;
	cu.DeviceGet = cuDeviceGet;
	cu.DevicePrimaryCtxRetain = cuDevicePrimaryCtxRetain;
	cu.CtxSetCurrent = cuCtxSetCurrent;
	cu.MemGetInfo = cuMemGetInfo;
	cu.DeviceTotalMem = cuDeviceTotalMem;
	cu.MemAlloc = cuMemAlloc;
	cu.MemAllocPitch = cuMemAllocPitch;
	cu.MemFree = cuMemFree;
	cu.MemAllocAsync = cuMemAllocAsync;
	cu.MemFreeAsync = cuMemFreeAsync;
	cu.MemsetD8 = cuMemsetD8;
	cu.MemcpyDtoH = cuMemcpyDtoH;
	cu.MemcpyHtoD = cuMemcpyHtoD;
	cu.MemGetAddressRange = cuMemGetAddressRange;
	cu.PointerGetAttribute = cuPointerGetAttribute;
	cu.MemCreate = cuMemCreate;
	cu.IpcGetMemHandle = cuIpcGetMemHandle;
	cu.MemPoolCreate = cuMemPoolCreate;
	cu.MemAllocFromPoolAsync = cuMemAllocFromPoolAsync;
	cu.MemRelease = cuMemRelease;
}
#endif

static CUdevice dev;

static int start(void)
{
	CUcontext ctx;
	CUresult rc = cu.Init(0);

	if (rc != CUDA_SUCCESS) {
		printf("cuInit %d\n", (int)rc);
		return 1;
	}
	OK(cu.DeviceGet(&dev, 0));
	OK(cu.DevicePrimaryCtxRetain(&ctx, dev));
	OK(cu.CtxSetCurrent(ctx));
	return failures;
}

/* Writes and reads back a block: usable device memory. */
static void roundtrip(CUdeviceptr p, size_t size)
{
	unsigned char buf[256];

	OK(cu.MemsetD8(p, 0x5a, size));
	OK(cu.MemcpyDtoH(buf, p + size - sizeof(buf), sizeof(buf)));
	CHECK(buf[0] == 0x5a && buf[sizeof(buf) - 1] == 0x5a, "memset did not land");
	memset(buf, 0xc3, sizeof(buf));
	OK(cu.MemcpyHtoD(p, buf, sizeof(buf)));
	memset(buf, 0, sizeof(buf));
	OK(cu.MemcpyDtoH(buf, p, sizeof(buf)));
	CHECK(buf[17] == 0xc3, "copy did not land");
}

static int basic(void)
{
	size_t free_b, total, total2, pitch, rsize;
	CUdeviceptr p, q, a, base;

	OK(cu.MemGetInfo(&free_b, &total));
	OK(cu.DeviceTotalMem(&total2, dev));
	CHECK(total == total2, "cuMemGetInfo total %zu, cuDeviceTotalMem %zu", total, total2);
	CHECK(free_b <= total, "free %zu over total %zu", free_b, total);
	printf("total %zu free %zu\n", total, free_b);

	OK(cu.MemAlloc(&p, MiB));
	roundtrip(p, MiB);
	OK(cu.MemGetAddressRange(&base, &rsize, p + 1000));
	CHECK(base == p && rsize == MiB, "range %#llx+%zu for %#llx+1MiB", (unsigned long long)base,
	      rsize, (unsigned long long)p);
	CUdeviceptr start_addr = 0;
	size_t range = 0;
	OK(cu.PointerGetAttribute(&start_addr, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p + 5));
	OK(cu.PointerGetAttribute(&range, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p + 5));
	CHECK(start_addr == p && range == MiB, "pointer range %#llx+%zu",
	      (unsigned long long)start_addr, range);
	size_t free_after;
	OK(cu.MemGetInfo(&free_after, &total2));
	CHECK(free_after + MiB <= free_b, "free %zu after 1 MiB, %zu before", free_after, free_b);

	OK(cu.MemAllocPitch(&q, &pitch, 1000, 10, 4));
	CHECK(pitch == 1024, "pitch %zu", pitch);
	roundtrip(q, pitch * 10);
	CHECK(cu.MemAllocPitch(&q, &pitch, 1000, 10, 3) == CUDA_ERROR_INVALID_VALUE,
	      "element of 3 bytes accepted");

	OK(cu.MemAllocAsync(&a, 64 * 1024, NULL));
	roundtrip(a, 64 * 1024);
	OK(cu.MemFreeAsync(a, NULL));

	CUdeviceptr big;
	CUresult rc = cu.MemAlloc(&big, total + MiB);
	CHECK(rc == CUDA_ERROR_OUT_OF_MEMORY, "over the cap: %d", (int)rc);
	CHECK(cu.MemAlloc(&big, 0) == CUDA_ERROR_INVALID_VALUE, "size 0 accepted");

	CUmemGenericAllocationHandle h;
	CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
	                            .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
	rc = cu.MemCreate(&h, 2 * MiB, &prop, 0);
	CHECK(rc == CUDA_ERROR_NOT_SUPPORTED, "cuMemCreate: %d", (int)rc);
	CUipcMemHandle ih;
	rc = cu.IpcGetMemHandle(&ih, p);
	CHECK(rc == CUDA_ERROR_NOT_SUPPORTED, "cuIpcGetMemHandle: %d", (int)rc);

	OK(cu.MemFree(q));
	OK(cu.MemFree(p));
	OK(cu.MemGetInfo(&free_after, &total2));
	CHECK(free_after == free_b, "free %zu after the frees, %zu before", free_after, free_b);
	return failures;
}

/* cuMemCreate (prints its answer: refused unless allowed) and a block from
 * a pool of the program's own (the broker's: its range is the block). */
static int create(void)
{
	CUmemGenericAllocationHandle h;
	CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
	                            .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
	CUresult rc = cu.MemCreate(&h, 2 * MiB, &prop, 0);

	printf("cuMemCreate %d\n", (int)rc);
	if (rc == CUDA_SUCCESS)
		OK(cu.MemRelease(h));

	CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
	                        .handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
	                        .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
	CUmemoryPool pool;
	CUdeviceptr p, base;
	size_t size;
	OK(cu.MemPoolCreate(&pool, &props));
	OK(cu.MemAllocFromPoolAsync(&p, 3000, pool, NULL));
	roundtrip(p, 3000);
	OK(cu.MemGetAddressRange(&base, &size, p));
	CHECK(base == p && size == 3000, "pool block range %zu", size);
	OK(cu.MemFreeAsync(p, NULL));
	return failures;
}

/* dlsym with the special handles answers as without the interposer:
 * RTLD_NEXT from here is libc's malloc, a missing name is NULL with a
 * reason; RTLD_DEFAULT finds the program's own symbols. */
int intercept_prog_marker(void);
int intercept_prog_marker(void)
{
	return 42;
}

static int dl(void)
{
	void *next = dlsym(RTLD_NEXT, "malloc"), *dflt = dlsym(RTLD_DEFAULT, "malloc");
	CHECK(next && next == dflt, "RTLD_NEXT malloc %p, RTLD_DEFAULT %p", next, dflt);
	dlerror();
	CHECK(!dlsym(RTLD_NEXT, "gpb_no_such_symbol") && dlerror(), "a missing name: no reason");
	int (*own)(void);
	*(void **)&own = dlsym(RTLD_DEFAULT, "intercept_prog_marker");
	CHECK(own && own() == 42, "the program's own symbol");
	/* A driver entry point through RTLD_DEFAULT is the interposer's: it
	 * answers the cap, not the device. */
	CUresult (*info)(size_t *, size_t *);
	size_t free_b, total, total2;
	*(void **)&info = dlsym(RTLD_DEFAULT, "cuMemGetInfo_v2");
	CHECK(info && info(&free_b, &total) == CUDA_SUCCESS, "cuMemGetInfo_v2 by RTLD_DEFAULT");
	OK(cu.MemGetInfo(&free_b, &total2));
	CHECK(total == total2, "RTLD_DEFAULT's cuMemGetInfo %zu, the program's %zu", total, total2);
	return failures;
}

static int hold(size_t size)
{
	CUdeviceptr p;
	char line[16];

	OK(cu.MemAlloc(&p, size));
	roundtrip(p, size);
	printf("holding\n");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		return failures;
	OK(cu.MemFree(p));
	return failures;
}

static int gone(void)
{
	CUdeviceptr p, q;
	char line[16];

	OK(cu.MemAlloc(&p, MiB));
	printf("ready\n");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	/* Blocks from a lease already held need no word with the daemon: the
	 * library learns of the loss at its next exchange, within a lease's
	 * worth of allocations. From then on every allocation is refused. */
	static CUdeviceptr got[256];
	int n = 0;
	CUresult rc = CUDA_SUCCESS;
	while (n < 256 && (rc = cu.MemAlloc(&got[n], MiB)) == CUDA_SUCCESS)
		n++;
	CHECK(rc == CUDA_ERROR_OUT_OF_MEMORY, "allocation with the daemon gone: %d after %d",
	      (int)rc, n);
	rc = cu.MemAlloc(&q, MiB);
	CHECK(rc == CUDA_ERROR_OUT_OF_MEMORY, "next allocation with the daemon gone: %d", (int)rc);
	printf("served %d after the loss\n", n);
	while (n > 0)
		OK(cu.MemFree(got[--n]));
	OK(cu.MemFree(p));
	return failures;
}

static CUcontext thread_ctx;

static void *worker(void *arg)
{
	CUdeviceptr p[8];
	unsigned seed = (unsigned)(uintptr_t)arg;

	OK(cu.CtxSetCurrent(thread_ctx));
	for (int round = 0; round < 200; round++) {
		int n = 1 + (int)(rand_r(&seed) % 8);
		for (int i = 0; i < n; i++)
			OK(cu.MemAlloc(&p[i], 4096u << (rand_r(&seed) % 6)));
		for (int i = 0; i < n; i++)
			OK(cu.MemFree(p[i]));
	}
	return NULL;
}

static int threads(int n)
{
	pthread_t t[16];

	if (n < 1 || n > 16)
		return 1;
	OK(cu.DevicePrimaryCtxRetain(&thread_ctx, dev));
	for (int i = 0; i < n; i++)
		pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1));
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	size_t free_b, total;
	OK(cu.MemGetInfo(&free_b, &total));
	printf("total %zu free %zu\n", total, free_b);
	return failures;
}

static int forked(void)
{
	CUdeviceptr p;
	int status;

	OK(cu.MemAlloc(&p, MiB));
	pid_t pid = fork();
	if (pid == 0) {
		/* CUDA in a forked child: a context of its own first. */
		CUcontext ctx;
		CUdeviceptr c;
		if (cu.Init(0) != CUDA_SUCCESS ||
		    cu.DevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
		    cu.CtxSetCurrent(ctx) != CUDA_SUCCESS)
			_exit(3);
		if (cu.MemAlloc(&c, MiB) != CUDA_SUCCESS)
			_exit(4);
		roundtrip(c, MiB);
		_exit(cu.MemFree(c) == CUDA_SUCCESS && !failures ? 0 : 5);
	}
	CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
	      "child: status %#x", status);
	roundtrip(p, MiB);
	OK(cu.MemFree(p));
	return failures;
}

static int over(void)
{
	size_t free_b, total, held = 0, n = 0;
	static CUdeviceptr blocks[1 << 16];
	CUresult rc = CUDA_SUCCESS;

	OK(cu.MemGetInfo(&free_b, &total));
	while (n < sizeof(blocks) / sizeof(blocks[0])) {
		rc = cu.MemAlloc(&blocks[n], MiB);
		if (rc != CUDA_SUCCESS)
			break;
		held += MiB;
		n++;
	}
	CHECK(rc == CUDA_ERROR_OUT_OF_MEMORY, "the refusal: %d", (int)rc);
	printf("refused after %zu bytes, total %zu\n", held, total);
	while (n > 0)
		OK(cu.MemFree(blocks[--n]));
	return failures;
}

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int bench(long n)
{
	CUdeviceptr p;

	for (int i = 0; i < 1000; i++) { /* warm: the lease is taken */
		OK(cu.MemAlloc(&p, 4096));
		OK(cu.MemFree(p));
	}
	double t0 = now_ns();
	for (long i = 0; i < n; i++) {
		cu.MemAlloc(&p, 4096);
		cu.MemFree(p);
	}
	printf("ns per pair %.1f\n", (now_ns() - t0) / (double)n);
	return failures;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "basic";

	setvbuf(stdout, NULL, _IOLBF, 0);
	load();
	if (start())
		return 1;
	int rc;
	if (strcmp(mode, "basic") == 0)
		rc = basic();
	else if (strcmp(mode, "hold") == 0 && argc > 2)
		rc = hold((size_t)strtoull(argv[2], NULL, 0));
	else if (strcmp(mode, "gone") == 0)
		rc = gone();
	else if (strcmp(mode, "threads") == 0 && argc > 2)
		rc = threads(atoi(argv[2]));
	else if (strcmp(mode, "create") == 0)
		rc = create();
	else if (strcmp(mode, "dl") == 0)
		rc = dl();
	else if (strcmp(mode, "fork") == 0)
		rc = forked();
	else if (strcmp(mode, "over") == 0)
		rc = over();
	else if (strcmp(mode, "bench") == 0 && argc > 2)
		rc = bench(atol(argv[2]));
	else {
		fprintf(stderr,
		        "usage: %s basic|hold SIZE|gone|threads N|fork|create|dl|over|bench N\n",
		        argv[0]);
		return 2;
	}
	if (rc == 0)
		printf("ok\n");
	return rc ? 1 : 0;
}
