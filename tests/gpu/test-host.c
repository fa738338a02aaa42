/*
 * test-host.c (gpu-host) - host memory on the cuda backend: a pinned
 * allocation is registered with the driver (cuMemHostRegister) and serves
 * as the host side of copies to and from device memory; a mapped one also
 * has a device pointer the driver copies through; both are unregistered
 * when freed and at disconnect.
 */
#include "gpu-common.h"

#include <dlfcn.h>
#include <string.h>

#define SIZE (1u << 20)

/* Host ranges the fake driver has registered for this process; -1 with a
 * real driver (which does not say). */
static long registrations(void)
{
	unsigned (*fn)(void);
	void *sym = cu.lib ? dlsym(cu.lib, "fakecuda_host_registrations") : NULL;
	if (!sym)
		return -1;
	memcpy(&fn, &sym, sizeof(fn));
	return (long)fn();
}

int main(int argc, char **argv)
{
	gt_require_gpu(argc, argv);
	gt_cuda_context(0);
	struct gt_daemon d;
	gt_daemon_start(&d, "cuda", NULL, NULL);
	gpb_client *c = gt_connect(&d, "gpu-host");
	uint64_t inst = gt_register(c, 0);
	long base = registrations();
	CHECK(!gt_fake() || base == 0);

	struct gpb_allocation pinned, mapped, dev;
	GPB(gpb_alloc_host(c, inst, SIZE, GPB_HOST_PINNED, &pinned));
	GPB(gpb_alloc_host(c, inst, SIZE, GPB_HOST_MAPPED, &mapped));
	CHECK(base < 0 || registrations() == base + 2);
	GPB(gpb_alloc(c, inst, SIZE, 0, &dev));

	/* Pinned memory as the host side of copies. */
	memset(pinned.ptr, 0x5e, SIZE);
	CU(cu.MemcpyHtoD((CUdeviceptr)(uintptr_t)dev.ptr, pinned.ptr, SIZE));
	memset(pinned.ptr, 0, SIZE);
	CU(cu.MemcpyDtoH(pinned.ptr, (CUdeviceptr)(uintptr_t)dev.ptr, SIZE));
	CHECK(((unsigned char *)pinned.ptr)[SIZE - 1] == 0x5e);

	/* Mapped memory: the driver reaches it through its device pointer. */
	void *dptr = NULL;
	GPB(gpb_host_device_pointer(c, mapped.id, &dptr));
	CHECK(dptr != NULL);
	CHECK(gpb_host_device_pointer(c, pinned.id, &dptr) == GPB_E_INVALID);
	GPB(gpb_host_device_pointer(c, mapped.id, &dptr));
	memset(mapped.ptr, 0x17, SIZE);
	unsigned char byte = 0;
	CU(cu.MemcpyDtoH(&byte, (CUdeviceptr)(uintptr_t)dptr + SIZE - 1, 1));
	CHECK(byte == 0x17);

	GPB(gpb_free(c, pinned.id));
	CHECK(base < 0 || registrations() == base + 1);
	GPB(gpb_free(c, dev.id));
	/* The last one goes with the connection. */
	gpb_disconnect(c);
	CHECK(base < 0 || registrations() == base);
	CHECK(gt_fake_violations() == 0);
	gt_daemon_stop(&d);
	printf("ok: pinned and mapped host memory registered, used for copies, unregistered\n");
	return 0;
}
