/*
 * test-vmm-start.c (gpu-vmm-start) - what the daemon settles about a VMM
 * device at start (issue 25, items 5 and 6).
 *
 * - GPUDirect RDMA: slabs are made with allocFlags.gpuDirectRDMACapable
 *   exactly where the device reports
 *   CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, so NCCL,
 *   UCX and MPI can register them with a NIC. A client asks the driver what
 *   its mapping was made with (cuMemRetainAllocationHandle,
 *   cuMemGetAllocationPropertiesFromHandle); the log says it. With the fake
 *   both ways: the flag set where the attribute is 1 (before the fix: never
 *   set), and where it is 0 the fake refuses the flag as the driver would
 *   and the daemon still serves (a daemon that set it always failed every
 *   allocation there). On a GPU the attribute and the properties' answer
 *   are printed and checked against each other (an H100 read 1 and took
 *   the flag; CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE read 0 for a
 *   VMM mapping even so, which is why it is not asked).
 * - The trial at start: a device that advertises VMM with POSIX
 *   descriptors but refuses export (FAKECUDA_NO_VMM_EXPORT=1, as
 *   Confidential Computing or a virtualised GPU may) gets transport ipc
 *   under auto, with the failing call logged, and serves; under
 *   --cuda-transport vmm it is left out. Before the fix it got vmm and
 *   every allocation failed (-EIO).
 *
 * Transport ipc (gpu-ipc-X): nothing to check; skips.
 */
#include "gpu-common.h"

#include <dlfcn.h>
#include <string.h>
#include <unistd.h>

typedef CUresult (*retain_fn)(CUmemGenericAllocationHandle *, void *);
typedef CUresult (*props_fn)(CUmemAllocationProp *, CUmemGenericAllocationHandle);

/* An entry point the library does not use, from the loaded driver. */
static void *driver_sym(const char *name)
{
	void *sym = cu.lib ? dlsym(cu.lib, name) : NULL;
	if (!sym)
		GT_FAIL("libcuda.so.1 lacks %s", name);
	return sym;
}

/* Whether the memory mapped at ptr was made GPUDirect RDMA capable. The
 * driver does not tell an importer (an H200, driver 580.159.04: the
 * imported mapping's properties read 0 for a slab the daemon made with the
 * flag, as its log said): the fake's record is asked; on a GPU what the
 * driver says is printed, and the daemon's log line is the check. */
static bool mapping_rdma(void *ptr)
{
	if (gt_fake()) {
		int (*rdma_of)(uintptr_t);
		void *f = driver_sym("fakecuda_vmm_rdma");
		memcpy(&rdma_of, &f, sizeof(rdma_of));
		int r = rdma_of((uintptr_t)ptr);
		CHECK(r >= 0);
		return r == 1;
	}
	retain_fn retain;
	props_fn props;
	void *s = driver_sym("cuMemRetainAllocationHandle");
	memcpy(&retain, &s, sizeof(retain));
	s = driver_sym("cuMemGetAllocationPropertiesFromHandle");
	memcpy(&props, &s, sizeof(props));
	CUmemGenericAllocationHandle h;
	CUmemAllocationProp prop;
	memset(&prop, 0, sizeof(prop));
	CU(retain(&h, ptr));
	CU(props(&prop, h));
	CU(cu.MemRelease(h));
	return prop.allocFlags.gpuDirectRDMACapable != 0;
}

static int device_rdma(void)
{
	CUdevice dev;
	int v = -1;
	CU(cu.DeviceGet(&dev, 0));
	CU(cu.DeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED,
	                         dev));
	return v;
}

/* A client of a daemon started with env: allocates, writes, reads back;
 * returns whether its mapping is GPUDirect RDMA capable (VMM only). */
static bool serve_once(struct gt_daemon *d, bool vmm)
{
	gpb_client *c = gt_connect(d, "gpu-vmm-start");
	struct gpb_allocation a;
	GPB(gpb_alloc(c, gt_register(c, 0), 1u << 20, 0, &a));
	static unsigned char buf[1u << 20], back[1u << 20];
	gt_fill(buf, sizeof(buf), 11);
	CU(cu.MemcpyHtoD((CUdeviceptr)(uintptr_t)a.ptr, buf, sizeof(buf)));
	CU(cu.MemcpyDtoH(back, (CUdeviceptr)(uintptr_t)a.ptr, sizeof(back)));
	CHECK(memcmp(buf, back, sizeof(buf)) == 0);
	bool rdma = vmm && mapping_rdma(a.ptr);
	GPB(gpb_free(c, a.id));
	gpb_disconnect(c);
	return rdma;
}

static void test_rdma(void)
{
	struct gt_daemon d;
	int attr = device_rdma();
	gt_daemon_start(&d, "cuda", NULL, NULL);
	bool rdma = serve_once(&d, true);
	printf("GPUDirect RDMA with VMM: the device says %d; a slab's mapping, %s, is %s\n", attr,
	       gt_fake() ? "as the fake recorded it" : "as the driver tells the importer",
	       rdma ? "capable" : "not capable");
	if (gt_fake())
		CHECK(rdma == (attr == 1));
	CHECK(gt_log_contains(&d, attr == 1 ? "VMM slabs GPUDirect RDMA capable"
	                                    : "VMM slabs not GPUDirect RDMA capable"));
	gt_daemon_stop(&d);
	if (!gt_fake())
		return;

	/* A device without it: the flag is not asked for (the fake refuses
	 * it), and the daemon serves. */
	const char *no_rdma[] = {"FAKECUDA_NO_RDMA=1", NULL};
	gt_daemon_start(&d, "cuda", NULL, no_rdma);
	CHECK(!serve_once(&d, true));
	CHECK(gt_log_contains(&d, "VMM slabs not GPUDirect RDMA capable: the device reports no "
	                          "GPUDirect RDMA with VMM"));
	gt_daemon_stop(&d);
}

static void test_trial(void)
{
	struct gt_daemon d;
	char t[16];
	const char *no_export[] = {"FAKECUDA_NO_VMM_EXPORT=1", NULL};
	const char *autot[] = {"--cuda-transport", "auto", NULL};
	gt_daemon_start(&d, "cuda", autot, no_export);
	CHECK(gt_log_contains(&d, "transport ipc, not vmm: a trial slab failed, though the device "
	                          "reports virtual memory management with POSIX descriptors: "
	                          "cuMemExportToShareableHandle: CUDA_ERROR_NOT_SUPPORTED"));
	gpb_client *c = gt_connect(&d, "gpu-vmm-trial");
	gt_device_transport(c, 0, t, sizeof(t));
	CHECK(strcmp(t, "ipc") == 0);
	gpb_disconnect(c);
	/* It serves, by legacy IPC (on the uid axis the fake's same-uid
	 * policy refuses legacy handles to this root test: test-legacy-ipc). */
	if (!gt_xuid())
		serve_once(&d, false);
	gt_daemon_stop(&d);

	const char *vmm[] = {"--cuda-transport", "vmm", NULL};
	CHECK(gt_daemon_run_to_exit(&d, "cuda", vmm, no_export) != 0);
	CHECK(gt_log_contains(&d, "left out: cuda_transport is vmm, but a trial slab failed"));
	unlink(d.log);
	rmdir(d.dir);
}

int main(int argc, char **argv)
{
	gt_require_gpu(argc, argv);
	if (!gt_vmm()) {
		printf("SKIP: transport %s: no VMM slabs to check\n", gt_transport());
		return GT_SKIP;
	}
	gt_cuda_context(0);
	test_rdma();
	if (gt_fake())
		test_trial();
	printf("ok: GPUDirect RDMA flag exactly where supported; a device that refuses the "
	       "trial gets legacy IPC\n");
	return 0;
}
