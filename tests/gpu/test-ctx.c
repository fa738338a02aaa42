/*
 * test-ctx.c (gpu-ctx) - the client's CUDA contexts (issue 15, finding 5).
 *
 * Each case runs in a process of its own (the library's contexts and slab
 * cache are per process), against one daemon:
 *
 * - reset: the application's primary context (retained and current, as
 *   Numba has it) is reset with cuDevicePrimaryCtxReset, as Numba's
 *   Device.reset does. The allocation mapped in it is not handed out as if
 *   it lived: the copy helpers answer GPB_E_CONTEXT_RESET. Allocating again
 *   works, in the primary context made anew, in the same (held) slab as
 *   before and in a new one; everything frees without a violation. Under
 *   vmm the held slab is mapped again from the allocation handle the
 *   library kept (it keeps no descriptor); what the driver did to the old
 *   mapping and to that handle is printed (`vmm after a reset: ...`; the
 *   fake takes the mapping and keeps the handle; a GPU's answer settles
 *   it, and where the handle went too the allocation must answer
 *   GPB_E_CONTEXT_RESET). After a second reset a second connection of the
 *   process is handed the slab and maps it from the descriptor that comes
 *   with the grant (it opens the allocation by a name: with leases, the
 *   default, its id is the first connection's own, exported by name), the
 *   bytes written before both resets intact.
 * - own: a context of the application's own (cuCtxCreate) current at the
 *   first mapping is the process's context of the device from then on: a
 *   slab mapped later, with the primary context current, goes there too.
 *   When the application destroys it (cuCtxDestroy), its allocations answer
 *   GPB_E_CONTEXT_RESET and new ones go to the context current then.
 * - twoctx: two connections and two contexts current at different times:
 *   a slab is opened once per process, in one context; a second context's
 *   own cuIpcOpenMemHandle of the same handle is refused (the fake says
 *   CUDA_ERROR_ALREADY_MAPPED; on a GPU the driver's answer is printed).
 *   When the last mapping goes, the process's context is let go: the next
 *   mapping goes to the context current then.
 */
#include "gpu-common.h"

#include <string.h>

#include <cjson/cJSON.h>

#define SLAB  (8ull << 20)
#define SIZE  (1ull << 20)
#define LARGE (SLAB + SLAB / 2) /* a dedicated slab */

static CUcontext ptr_ctx(const void *ptr)
{
	CUcontext ctx = NULL;
	CHECK(cu.PointerGetAttribute != NULL);
	CU(cu.PointerGetAttribute(&ctx, CU_POINTER_ATTRIBUTE_CONTEXT, (CUdeviceptr)(uintptr_t)ptr));
	return ctx;
}

static CUcontext current(void)
{
	CUcontext ctx = NULL;
	CU(cu.CtxGetCurrent(&ctx));
	return ctx;
}

/* The pointer belongs to context @want. The driver says so of legacy IPC
 * and pool mappings; of a VMM mapping (cuMemMap) it answers NULL (an H100,
 * driver 580: such a mapping is the process's, not a context's), and there
 * the pointer must be usable with @want current. That the library records
 * the right context is what expect_reset() shows: once that context is
 * reset or destroyed, the allocation answers GPB_E_CONTEXT_RESET. */
static void expect_ctx(const void *ptr, CUcontext want, const char *why)
{
	CUcontext p = ptr_ctx(ptr), popped;
	unsigned char byte;
	if (!p && gt_vmm()) {
		CU(cu.CtxPushCurrent(want));
		CU(cu.MemcpyDtoH(&byte, (CUdeviceptr)(uintptr_t)ptr, 1));
		CU(cu.CtxPopCurrent(&popped));
		return;
	}
	if (p != want)
		GT_FAIL("%s: the context of %p is %p, not %p", why, ptr, (void *)p, (void *)want);
}

/* The pointer belongs to the current context. */
static void check_ctx(const void *ptr)
{
	expect_ctx(ptr, current(), "not the current context");
}

/* Writes pattern @seed through the library and reads it back: queued on
 * the legacy stream of the context the memory is mapped in, which may not
 * be the current one. */
static void write_read(void *ptr, size_t n, unsigned seed)
{
	unsigned char *buf = malloc(n), *back = malloc(n);
	CUcontext popped;
	CHECK(buf && back);
	gt_fill(buf, n, seed);
	GPB(gpb_copy_to_device(ptr, buf, n, NULL));
	GPB(gpb_copy_from_device(back, ptr, n, NULL));
	/* A VMM mapping has no context to ask for (expect_ctx); the copy
	 * into pageable memory is complete on return anyway. */
	CUcontext ctx = ptr_ctx(ptr);
	if (ctx) {
		CU(cu.CtxPushCurrent(ctx));
		CU(cu.CtxSynchronize());
		CU(cu.CtxPopCurrent(&popped));
	}
	CHECK(memcmp(buf, back, n) == 0);
	free(buf);
	free(back);
}

/* A copy to @ptr must be refused as memory of a dead context. */
static void expect_reset(void *ptr)
{
	unsigned char byte = 1;
	int rc = gpb_copy_to_device(ptr, &byte, 1, NULL);
	if (rc != GPB_E_CONTEXT_RESET)
		GT_FAIL("gpb_copy_to_device into memory of a reset context = %s (%s), want "
		        "GPB_E_CONTEXT_RESET",
		        gpb_strerror(rc), gpb_last_error());
	CHECK(strstr(gpb_last_error(), "reset or destroyed") != NULL);
}

/* Once the clients let go of the slabs they keep (issue 18), nothing is
 * mapped. */
static void expect_closed(gpb_client *c, gpb_client *c2)
{
	struct gpb_mapping_stats st;
	CHECK(gpb_release_kept(c) >= 0);
	if (c2)
		CHECK(gpb_release_kept(c2) >= 0);
	GPB(gpb_mapping_stats(&st));
	CHECK(st.open_now == 0 && st.opens == st.closes);
}

/* What is left of the VMM mapping at @ptr after its context was reset:
 * whether the driver still maps it and, if so, whether it still holds the
 * @n bytes of pattern @seed written before. */
static const char *vmm_old_mapping(const void *ptr, size_t n, unsigned seed, char *out, size_t len)
{
	CUmemLocation loc = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0};
	unsigned long long fl = 0;
	char name[64];
	CUresult rc = cu.MemGetAccess(&fl, &loc, (CUdeviceptr)(uintptr_t)ptr);
	if (rc != CUDA_SUCCESS) {
		snprintf(out, len, "gone (cuMemGetAccess: %s)",
		         cuda_api_error_name(&cu, rc, name, sizeof(name)));
		return out;
	}
	if (!(fl & CU_MEM_ACCESS_FLAGS_PROT_READ)) {
		snprintf(out, len, "still mapped, access %llu", fl);
		return out;
	}
	unsigned char *buf = malloc(n), *want = malloc(n);
	CHECK(buf && want);
	gt_fill(want, n, seed);
	rc = cu.MemcpyDtoH(buf, (CUdeviceptr)(uintptr_t)ptr, n);
	snprintf(out, len, "still mapped and readable through the old pointer: %s",
	         rc != CUDA_SUCCESS          ? cuda_api_error_name(&cu, rc, name, sizeof(name))
	         : memcmp(buf, want, n) == 0 ? "bytes intact"
	                                     : "bytes changed");
	free(buf);
	free(want);
	return out;
}

/* Under vmm, after the context of @a was reset: prints what the driver
 * did to its mapping, and maps its held slab again for *b (from the handle
 * the library kept). Returns whether that worked: where the driver took
 * the handle too (a GPU may; the fake does not) the allocation must answer
 * GPB_E_CONTEXT_RESET, as any memory lost with its context. */
static bool vmm_after_reset(gpb_client *c, uint64_t inst, const struct gpb_allocation *a,
                            struct gpb_allocation *b)
{
	char old[160];
	vmm_old_mapping(a->ptr, SIZE, 1, old, sizeof(old));
	int rc = gpb_alloc(c, inst, SIZE, 0, b);
	printf("vmm after a reset: the old mapping %s; the held slab mapped again from the "
	       "kept allocation handle: %s%s%s\n",
	       old, rc == GPB_OK ? "yes" : gpb_strerror(rc), rc == GPB_OK ? "" : ": ",
	       rc == GPB_OK ? "" : gpb_last_error());
	if (rc == GPB_OK)
		return true;
	if (gt_fake() || rc != GPB_E_CONTEXT_RESET)
		GT_FAIL("the held slab was not mapped again after a reset: %s (%s)",
		        gpb_strerror(rc), gpb_last_error());
	return false;
}

/* After a second reset: a second connection of this process opens @b
 * (written with pattern 2) by a name @c exports it under (a block of @c's
 * leases has an id of @c's own until then), its slab mapped anew from the
 * descriptor that comes with that first grant to the connection. */
static void attach_after_reset(gpb_client *c, const char *socket, const struct gpb_allocation *b)
{
	gpb_client *c2 = NULL;
	struct gpb_allocation at;
	unsigned char *buf = malloc(SIZE), *want = malloc(SIZE);
	CHECK(buf && want);
	GPB(gpb_connect(socket, "gpu-ctx-reset-2", &c2));
	GPB(gpb_export(c, b->id, "gpu-ctx-b", -1));
	GPB(gpb_open_shared(c2, "gpu-ctx-b", &at));
	CHECK(at.slab == b->slab);
	/* The fake keeps a dead mapping's addresses; a GPU may map the slab
	 * anew at the very address, where the old pointer is live memory
	 * again (what an H200 showed on transport ipc, as far as a copy
	 * through the old pointer working tells). */
	if (gt_fake() || at.ptr != b->ptr)
		expect_reset(b->ptr);
	else
		printf("after a second reset the slab was mapped again at the old address\n");
	check_ctx(at.ptr);
	gt_fill(want, SIZE, 2);
	GPB(gpb_copy_from_device(buf, at.ptr, SIZE, NULL));
	CHECK(memcmp(buf, want, SIZE) == 0);
	write_read(at.ptr, SIZE, 6);
	GPB(gpb_detach(c2, at.id));
	GPB(gpb_unexport(c, "gpu-ctx-b"));
	gpb_disconnect(c2);
	free(buf);
	free(want);
	if (gt_vmm())
		printf("vmm after a second reset: a second connection mapped the slab from its "
		       "descriptor, the bytes intact\n");
}

static int case_reset(const char *socket)
{
	gpb_client *c = NULL;
	struct gpb_allocation a, b, big;
	CUdevice dev;
	CUcontext gone;

	CU(cu.DeviceGet(&dev, 0));
	CHECK(cu.DevicePrimaryCtxReset != NULL);
	gt_cuda_context(0);
	GPB(gpb_connect(socket, "gpu-ctx-reset", &c));
	uint64_t inst = gt_register(c, 0);
	GPB(gpb_alloc(c, inst, SIZE, 0, &a));
	check_ctx(a.ptr);
	write_read(a.ptr, SIZE, 1);

	/* Numba's Device.reset. */
	CU(cu.DevicePrimaryCtxReset(dev));
	expect_reset(a.ptr);

	/* A new primary context: memory works again, in it. */
	CU(cu.CtxPopCurrent(&gone));
	gt_cuda_context(0);
	bool remapped = true;
	if (gt_vmm())
		remapped = vmm_after_reset(c, inst, &a, &b);
	else
		GPB(gpb_alloc(c, inst, SIZE, 0, &b));
	if (remapped) {
		CHECK(b.slab == a.slab);
		check_ctx(b.ptr);
		write_read(b.ptr, SIZE, 2);
	}
	GPB(gpb_alloc(c, inst, LARGE, 0, &big));
	check_ctx(big.ptr);
	write_read(big.ptr, LARGE, 3);
	/* The fake keeps a dead mapping's addresses; a GPU may reuse them. */
	if (gt_fake())
		expect_reset(a.ptr);

	if (remapped) {
		CU(cu.DevicePrimaryCtxReset(dev));
		CU(cu.CtxPopCurrent(&gone));
		gt_cuda_context(0);
		attach_after_reset(c, socket, &b);
	}

	GPB(gpb_free(c, a.id));
	if (remapped)
		GPB(gpb_free(c, b.id));
	GPB(gpb_free(c, big.id));
	expect_closed(c, NULL);
	gpb_disconnect(c);
	return 0;
}

static int case_own(const char *socket)
{
	gpb_client *c = NULL;
	struct gpb_allocation a, big, d;
	CUcontext own, popped;
	CUdevice dev;

	CU(cu.DeviceGet(&dev, 0));
	CHECK(cu.CtxCreate != NULL && cu.CtxDestroy != NULL);
	CU(cu.CtxCreate(&own, 0, dev));
	GPB(gpb_connect(socket, "gpu-ctx-own", &c));
	uint64_t inst = gt_register(c, 0);
	GPB(gpb_alloc(c, inst, SIZE, 0, &a));
	expect_ctx(a.ptr, own, "not the application's own context");

	/* The primary context current now: the next slab still goes to the
	 * process's context of the device. */
	CU(cu.CtxPopCurrent(&popped));
	CHECK(popped == own);
	gt_cuda_context(0);
	CHECK(current() != own);
	GPB(gpb_alloc(c, inst, LARGE, 0, &big));
	CHECK(big.slab != a.slab);
	expect_ctx(big.ptr, own,
	           "a slab mapped with the primary context current went there, not to the "
	           "process's context of the device (the one current at its first mapping)");
	write_read(big.ptr, LARGE, 4);

	/* The application destroys its context. */
	CU(cu.CtxDestroy(own));
	expect_reset(a.ptr);
	expect_reset(big.ptr);
	GPB(gpb_alloc(c, inst, SIZE, 0, &d));
	check_ctx(d.ptr);
	write_read(d.ptr, SIZE, 5);
	GPB(gpb_free(c, a.id));
	GPB(gpb_free(c, big.id));
	GPB(gpb_free(c, d.id));
	expect_closed(c, NULL);
	gpb_disconnect(c);
	return 0;
}

/* The handle the daemon sends with the slab of what is exported as @name
 * to a connection new to it (an open by name: with leases, the default,
 * the exporter's id is its own until exported). Returns the id opened. */
static uint64_t open_raw(gpb_client *c, const char *name, CUipcMemHandle *h)
{
	char params[96], *json = NULL;
	snprintf(params, sizeof(params), "{\"name\":\"%s\"}", name);
	GPB(gpb_request(c, "open", params, &json));
	cJSON *r = cJSON_Parse(json);
	gpb_string_free(json);
	CHECK(r != NULL);
	const cJSON *idj = cJSON_GetObjectItem(r, "id");
	CHECK(cJSON_IsString(idj));
	uint64_t id = strtoull(idj->valuestring, NULL, 16);
	const cJSON *hex = cJSON_GetObjectItem(r, "handle");
	CHECK(cJSON_IsString(hex) && strlen(hex->valuestring) == 2 * sizeof(h->reserved));
	for (size_t i = 0; i < sizeof(h->reserved); i++) {
		unsigned v;
		CHECK(sscanf(hex->valuestring + 2 * i, "%2x", &v) == 1);
		h->reserved[i] = (char)v;
	}
	cJSON_Delete(r);
	return id;
}

static int case_twoctx(const char *socket)
{
	gpb_client *c1 = NULL, *c2 = NULL;
	struct gpb_allocation x, y, z;
	struct gpb_mapping_stats st;
	CUcontext own, popped;
	CUdevice dev;
	CUipcMemHandle h;

	CU(cu.DeviceGet(&dev, 0));
	CHECK(cu.CtxCreate != NULL && cu.CtxDestroy != NULL);
	GPB(gpb_connect(socket, "gpu-ctx-two-1", &c1));
	GPB(gpb_connect(socket, "gpu-ctx-two-2", &c2));
	uint64_t inst1 = gt_register(c1, 0), inst2 = gt_register(c2, 0);

	CU(cu.CtxCreate(&own, 0, dev));
	GPB(gpb_alloc(c1, inst1, SIZE, 0, &x));
	expect_ctx(x.ptr, own, "not the application's own context");

	/* Another context current: the second connection gets the same slab
	 * (mapped once) and a new one, both in the first context. */
	CU(cu.CtxPopCurrent(&popped));
	gt_cuda_context(0);
	CUcontext primary = current();
	/* Mapped by the library as gpb_open_shared() would (tracked alike). */
	GPB(gpb_export(c1, x.id, "gpu-ctx-x", -1));
	uint64_t xo = open_raw(c2, "gpu-ctx-x", &h);
	GPB(gpb_mapping_stats(&st));
	CHECK(st.opens == 1 && st.open_now == 1);
	GPB(gpb_alloc(c2, inst2, LARGE, 0, &y));
	expect_ctx(y.ptr, own,
	           "with another context current a new slab was mapped there: the process "
	           "then maps in two contexts of one device");

	/* What the driver says to a second context opening the same handle. */
	CUdeviceptr p2 = 0;
	CUresult rc = cu.IpcOpenMemHandle(&p2, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
	char name[64];
	printf("cuIpcOpenMemHandle of a handle open in another context of this process: %s\n",
	       cuda_api_error_name(&cu, rc, name, sizeof(name)));
	if (gt_vmm())
		CHECK(rc != CUDA_SUCCESS); /* vmm: the handle is a tag, and opens nothing */
	else if (gt_fake())
		CHECK(rc == CUDA_ERROR_ALREADY_MAPPED);
	else if (rc == CUDA_SUCCESS)
		CU(cu.IpcCloseMemHandle(p2));

	GPB(gpb_detach(c2, xo));
	GPB(gpb_unexport(c1, "gpu-ctx-x"));
	GPB(gpb_free(c2, y.id));
	GPB(gpb_mapping_stats(&st));
	CHECK(st.open_now == 1);
	GPB(gpb_free(c1, x.id));
	expect_closed(c1, c2);

	/* The last mapping let go of the process's context: the next goes to
	 * the one current now. */
	GPB(gpb_alloc(c1, inst1, SIZE, 0, &z));
	expect_ctx(z.ptr, primary, "not the context current at the mapping");
	GPB(gpb_free(c1, z.id));
	CU(cu.CtxDestroy(own));
	gpb_disconnect(c2);
	gpb_disconnect(c1);
	return 0;
}

int main(int argc, char **argv)
{
	gt_require_gpu(argc, argv);
	if (argc == 3 && strcmp(argv[1], "reset") == 0)
		return case_reset(argv[2]);
	if (argc == 3 && strcmp(argv[1], "own") == 0)
		return case_own(argv[2]);
	if (argc == 3 && strcmp(argv[1], "twoctx") == 0)
		return case_twoctx(argv[2]);

	struct gt_daemon d;
	const char *extra[] = {"--slab-size", "8MiB", NULL};
	gt_daemon_start(&d, "cuda", extra, NULL);
	const char *cases[] = {"reset", "own", "twoctx"};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *args[] = {(char *)cases[i], d.socket, NULL};
		int st = gt_wait(gt_spawn_self(args, NULL));
		if (st != 0)
			GT_FAIL("case %s exited %d", cases[i], st);
	}
	gpb_client *c = gt_connect(&d, "gpu-ctx");
	CHECK(gt_status_used(c) == 0);
	gpb_disconnect(c);
	CHECK(gt_fake_violations() == 0);
	gt_daemon_stop(&d);
	printf("ok: a reset or destroyed context is detected and memory works again in a new "
	       "one; one context per device per process\n");
	return 0;
}
