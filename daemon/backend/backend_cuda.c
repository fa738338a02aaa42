/*
 * backend_cuda.c - real devices through the CUDA driver API.
 *
 * The driver is loaded at run time (common/cudaapi.c: dlopen of
 * libcuda.so.1), so one gpubrokerd binary runs with or without a GPU; this
 * file is built whenever cuda.h was found, and only needs a driver when the
 * backend is chosen.
 *
 * Devices: every device the driver reports, each through its primary
 * context (cuDevicePrimaryCtxRetain), which the daemon keeps for its whole
 * life. The daemon is single-threaded (one libuv loop): each call pushes the
 * device's context and pops it again, so no state leaks between devices. A
 * device in compute mode exclusive-process or prohibited, or whose primary
 * context cannot be had, is left out with the reason (backend_cuda_dev.c);
 * the daemon's device index is then not the CUDA ordinal, which is why
 * devices are also addressed by UUID ("MIG-..." for a MIG instance).
 *
 * Transports (key cuda_transport, per device): "vmm" where the driver and
 * the device can (backend_cuda_vmm.c: one cuMemCreate per slab, exported
 * as a POSIX descriptor that travels with the grant), else legacy "ipc":
 * one cuMemAlloc per slab, so that the slab's legacy IPC handle
 * (cuIpcGetMemHandle: 64 bytes naming the whole base allocation) is exactly
 * what a client opens; the broker sends (handle, offset) pairs. Never under
 * 2 MiB (slab_granularity): the driver packs smaller allocations into shared
 * 2 MiB blocks, and a handle opens the whole block, neighbours included.
 * "auto" picks vmm and logs why a device gets ipc instead; "vmm" leaves
 * out a device that cannot, with the reason; "ipc" never uses vmm. A
 * device "can" when its attributes say so and a trial slab is made,
 * exported and imported at start (cuda_device_trial).
 *
 * Scrubbing: the pool keeps slabs per uid and never moves a slab from one
 * uid to another, so the only moment device memory can change hands between
 * users is when the driver hands the daemon memory that a freed slab (of any
 * uid) or another process used before. cuMemAlloc does not promise zeroed
 * memory, so every slab is cleared with cuMemsetD8 when it is created, and
 * the context synchronised before its handle leaves the daemon (a client
 * writing through its own context must not race the clear). Ranges reused
 * inside a slab stay with the same uid and are not scrubbed again.
 *
 * Allocator "async" (BACKEND_SLAB_ASYNC): slabs come from a stream-ordered
 * memory pool per device and uid (cuMemPoolCreate, shareable as a POSIX
 * file descriptor), made the first time that uid asks for one: a pool's
 * descriptor lets its holder import any pointer of the pool (the export
 * data is no secret), and an import maps the pointer's whole segment, so a
 * pool never holds two users' memory. Each slab is one
 * cuMemAllocFromPoolAsync on a stream of the daemon's, synchronised before
 * the slab is scrubbed like any other; its handle is the 64-byte
 * CUmemPoolPtrExportData, and the pool's descriptor travels with it
 * (backend_slab.fd, pool true) so a client can import the pool before the
 * pointer, named by a random id (backend_slab.pool_id): the driver's pool
 * descriptors are all descriptors of /dev/nvidiactl (measured on an H100),
 * so a client cannot tell two pools apart by the file. Freed with cuMemFreeAsync, synchronised so
 * that the memory is back in the pool, and the pool's release threshold (0) hands it back to the
 * driver. A device supports it when the driver has the pool entry points and the device reports
 * pools with POSIX descriptor sharing.
 *
 * Errors: every failing driver call is logged with its CUresult name and
 * description, the name is kept in backend->last_error for the error reply
 * (data.backend_error), and the broker gets -EIO; cuMemAlloc's
 * CUDA_ERROR_OUT_OF_MEMORY is -ENOMEM (the device is full: the pool gives
 * back cached slabs and retries, then tries a smaller slab of what is left,
 * starting from cuMemGetInfo's free bytes (slab_room), then answers
 * out_of_memory).
 */
#include "backend.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "backend_cuda.h"
#include "backend_cuda_dev.h"
#include "cudaapi.h"
#include "log.h"

_Static_assert(sizeof(CUipcMemHandle) == PROTO_HANDLE_SIZE, "a slab handle is a CUipcMemHandle");
_Static_assert(sizeof(CUmemPoolPtrExportData) == PROTO_HANDLE_SIZE,
               "an async slab handle is a CUmemPoolPtrExportData");

/* A user's stream-ordered pool on a device (allocator "async"). */
struct cuda_upool {
	uint32_t uid;
	CUmemoryPool pool;
	int fd; /* the pool exported, sent with each of its slabs; -1 */
	/* Names the pool in grants (backend_slab.pool_id): random, so that
	 * two daemons' pools differ too. */
	uint64_t id;
};

struct cuda_device {
	CUdevice dev;
	int ordinal;   /* the CUDA ordinal, which may differ from the index */
	CUcontext ctx; /* the primary context, retained */
	struct backend_device_info info;
	/* Allocator "async", made on first use and kept until exit: */
	CUstream stream;
	struct cuda_upool *upools; /* one per uid that asked */
	unsigned nupools;
	int pool_fd;            /* the pool exported, sent with each async slab; -1 */
	size_t vmm_granularity; /* transport vmm: cuMemCreate's; 0 = ipc */
	bool vmm_rdma;          /* transport vmm: slabs made GPUDirect RDMA capable */
};

struct cuda_slab {
	struct backend_slab base; /* first: the broker only sees this */
	CUdeviceptr ptr;
	CUmemGenericAllocationHandle vmm; /* base.vmm: the physical memory */
};

struct cuda {
	struct cuda_api api;
	char transport[8]; /* BACKEND_TRANSPORT_AUTO, _VMM or _IPC */
	int count;
	struct cuda_device dev[BACKEND_MAX_DEVICES];
};

/* Logs a failed driver call with the CUresult's name and description. */
static void cuda_log(struct backend *b, CUresult rc, int device, const char *what)
{
	struct cuda *cu = b->priv;
	char name[64];
	const char *desc = cuda_api_error_string(&cu->api, rc);
	log_error("cuda: device %d: %s failed: %s%s%s%s", device, what,
	          cuda_api_error_name(&cu->api, rc, name, sizeof(name)), *desc ? " (" : "", desc,
	          *desc ? ")" : "");
}

/* Logs and records a failed driver call; returns -EIO for the broker. */
static int cuda_fail(struct backend *b, CUresult rc, int device, const char *what)
{
	struct cuda *cu = b->priv;
	cuda_log(b, rc, device, what);
	cuda_api_error_name(&cu->api, rc, b->last_error, sizeof(b->last_error));
	return -EIO;
}

static int cuda_enter(struct backend *b, int device)
{
	struct cuda *cu = b->priv;
	CUresult rc = cu->api.CtxPushCurrent(cu->dev[device].ctx);
	return rc == CUDA_SUCCESS ? 0 : cuda_fail(b, rc, device, "cuCtxPushCurrent");
}

static void cuda_leave(struct backend *b, int device)
{
	struct cuda *cu = b->priv;
	CUcontext ctx;
	CUresult rc = cu->api.CtxPopCurrent(&ctx);
	if (rc != CUDA_SUCCESS)
		cuda_log(b, rc, device, "cuCtxPopCurrent");
}

/* Whether the device has stream-ordered pools that other processes can
 * import through a POSIX file descriptor (allocator "async"). */
static bool cuda_device_has_pools(const struct cuda_api *api, CUdevice dev)
{
	int pools = 0, types = 0;
	return api->has_pools &&
	       api->DeviceGetAttribute(&pools, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, dev) ==
	           CUDA_SUCCESS &&
	       pools == 1 &&
	       api->DeviceGetAttribute(&types, CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES,
	                               dev) == CUDA_SUCCESS &&
	       (types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
}

/* The trial at start of a device the attributes give VMM (its primary
 * context retained): one granule made, exported, imported and released,
 * GPUDirect RDMA capable where the device says it can be. Sets
 * d->vmm_rdma; false with the reason in why when the driver refuses. */
static bool cuda_device_trial(struct backend *b, int ordinal, struct cuda_device *d, char *why,
                              size_t why_len)
{
	struct cuda *cu = b->priv;
	const struct cuda_api *api = &cu->api;
	const char *what = "cuCtxPushCurrent";
	char name[64];
	CUcontext popped;
	d->vmm_rdma = backend_vmm_rdma(api, d->dev);
	CUresult rc = api->CtxPushCurrent(d->ctx);
	if (rc == CUDA_SUCCESS) {
		rc = backend_vmm_trial(api, d->ordinal, d->vmm_granularity, d->vmm_rdma, &what);
		if (rc != CUDA_SUCCESS && d->vmm_rdma && strcmp(what, "cuMemCreate") == 0) {
			/* The attribute promised the flag, the driver refused
			 * it: slabs without it still serve. */
			log_warn("cuda: CUDA device %d: cuMemCreate refused gpuDirectRDMACapable "
			         "(%s), though the device reports GPUDirect RDMA with VMM: slabs "
			         "are made without it",
			         ordinal, cuda_api_error_name(api, rc, name, sizeof(name)));
			d->vmm_rdma = false;
			rc = backend_vmm_trial(api, d->ordinal, d->vmm_granularity, false, &what);
		}
		api->CtxPopCurrent(&popped);
	}
	if (rc != CUDA_SUCCESS) {
		snprintf(why, why_len,
		         "a trial slab failed, though the device reports virtual memory "
		         "management with POSIX descriptors: %s: %s",
		         what, cuda_api_error_name(api, rc, name, sizeof(name)));
		return false;
	}
	log_info("cuda: CUDA device %d: VMM slabs %s", ordinal,
	         d->vmm_rdma ? "GPUDirect RDMA capable (gpuDirectRDMACapable)"
	                     : "not GPUDirect RDMA capable: the device reports no GPUDirect "
	                       "RDMA with VMM");
	return true;
}

/* Picks the device's transport (cu->transport asks); false, with the
 * reason logged, when "vmm" was asked for and the device cannot. */
static bool cuda_device_transport(struct backend *b, int ordinal, struct cuda_device *d)
{
	struct cuda *cu = b->priv;
	char why[256];
	bool want_ipc = strcmp(cu->transport, BACKEND_TRANSPORT_IPC) == 0;

	if (!want_ipc &&
	    backend_vmm_probe(&cu->api, d->dev, ordinal, &d->vmm_granularity, why, sizeof(why)) &&
	    cuda_device_trial(b, ordinal, d, why, sizeof(why))) {
		snprintf(d->info.transport, sizeof(d->info.transport), BACKEND_TRANSPORT_VMM);
		return true;
	}
	d->vmm_granularity = 0;
	d->vmm_rdma = false;
	snprintf(d->info.transport, sizeof(d->info.transport), BACKEND_TRANSPORT_IPC);
	if (want_ipc) {
		log_info("cuda: CUDA device %d: transport ipc (cuda_transport ipc): legacy IPC "
		         "handles",
		         ordinal);
		return true;
	}
	if (strcmp(cu->transport, BACKEND_TRANSPORT_VMM) == 0) {
		log_warn("cuda: CUDA device %d left out: cuda_transport is vmm, but %s", ordinal,
		         why);
		return false;
	}
	log_warn("cuda: CUDA device %d: transport ipc, not vmm: %s (legacy IPC handles: see "
	         "docs/cuda.md for who can open them)",
	         ordinal, why);
	return true;
}

/* Describes one device into d; false (with a warning) when it is unusable. */
static bool cuda_device_open(struct backend *b, int ordinal, struct cuda_device *d,
                             const struct backend_config *cfg)
{
	struct cuda *cu = b->priv;
	const struct cuda_api *api = &cu->api;
	char name[64];
	int mode = CU_COMPUTEMODE_DEFAULT;
	size_t free_bytes = 0, total = 0;
	const char *what;
	CUresult rc;

	memset(d, 0, sizeof(*d));
	d->ordinal = ordinal;
	if ((rc = api->DeviceGet(&d->dev, ordinal)) != CUDA_SUCCESS) {
		what = "cuDeviceGet";
		goto fail;
	}
	if ((rc = api->DeviceGetName(d->info.name, (int)sizeof(d->info.name) - 1, d->dev)) !=
	    CUDA_SUCCESS) {
		what = "cuDeviceGetName";
		goto fail;
	}
	_Static_assert(sizeof(d->info.uuid) >= CUDA_UUID_LEN, "room for a UUID");
	if ((rc = cuda_api_device_uuid(api, d->dev, d->info.uuid)) != CUDA_SUCCESS) {
		what = "cuDeviceGetUuid";
		goto fail;
	}
	if ((rc = api->DeviceGetAttribute(&d->info.cc_major,
	                                  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d->dev)) ||
	    (rc = api->DeviceGetAttribute(&d->info.cc_minor,
	                                  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d->dev)) ||
	    (rc = api->DeviceGetAttribute(&mode, CU_DEVICE_ATTRIBUTE_COMPUTE_MODE, d->dev))) {
		what = "cuDeviceGetAttribute";
		goto fail;
	}
	/* An attribute of CUDA 11.8's: an older driver answers an error, which
	 * is "no MPS". */
	int mps = 0;
	if (api->DeviceGetAttribute(&mps, CU_DEVICE_ATTRIBUTE_MPS_ENABLED, d->dev) != CUDA_SUCCESS)
		mps = 0;
	char why[384];
	if (!cuda_dev_mode_ok(mode, mps == 1, why, sizeof(why))) {
		log_error("cuda: CUDA device %d (%s) left out: %s", ordinal, d->info.uuid, why);
		return false;
	}
	if (mps == 1)
		log_info(
		    "cuda: CUDA device %d (%s): this daemon is an MPS client (compute mode %s): "
		    "its clients must be clients of the same MPS control daemon "
		    "(CUDA_MPS_PIPE_DIRECTORY)",
		    ordinal, d->info.uuid,
		    mode == CU_COMPUTEMODE_EXCLUSIVE_PROCESS ? "exclusive-process" : "default");
	if ((rc = api->DevicePrimaryCtxRetain(&d->ctx, d->dev)) != CUDA_SUCCESS) {
		what = "cuDevicePrimaryCtxRetain";
		goto fail;
	}
	if ((rc = api->CtxPushCurrent(d->ctx)) != CUDA_SUCCESS) {
		api->DevicePrimaryCtxRelease(d->dev);
		what = "cuCtxPushCurrent";
		goto fail;
	}
	rc = api->MemGetInfo(&free_bytes, &total);
	CUcontext popped;
	api->CtxPopCurrent(&popped);
	if (rc != CUDA_SUCCESS) {
		api->DevicePrimaryCtxRelease(d->dev);
		what = "cuMemGetInfo";
		goto fail;
	}
	d->info.total = total;
	d->info.async = cuda_device_has_pools(api, d->dev);
	if (!cuda_device_transport(b, ordinal, d)) {
		api->DevicePrimaryCtxRelease(d->dev);
		return false;
	}
	log_info("cuda: CUDA device %d (%s): %s, compute capability %d.%d, %llu MiB, %llu MiB "
	         "free, transport %s%s",
	         ordinal, d->info.uuid, d->info.name, d->info.cc_major, d->info.cc_minor,
	         (unsigned long long)(total >> 20), (unsigned long long)(free_bytes >> 20),
	         d->info.transport, d->info.async ? ", shareable memory pools" : "");
	cuda_dev_budget(ordinal, free_bytes, total, cfg, &d->info);
	return true;
fail:
	log_warn("cuda: CUDA device %d left out: %s failed: %s %s", ordinal, what,
	         cuda_api_error_name(api, rc, name, sizeof(name)), cuda_api_error_string(api, rc));
	return false;
}

static int cuda_init(struct backend *b, const struct backend_config *cfg)
{
	struct cuda *cu = calloc(1, sizeof(*cu));
	char name[64];
	int n = 0;
	if (!cu)
		return -ENOMEM;
	snprintf(cu->transport, sizeof(cu->transport), "%s",
	         cfg && cfg->cuda_transport ? cfg->cuda_transport : BACKEND_TRANSPORT_AUTO);
	if (cuda_api_load(&cu->api, b->init_error, sizeof(b->init_error), NULL) < 0) {
		free(cu);
		return -ENODEV;
	}
	b->priv = cu;
	CUresult rc = cu->api.DeviceGetCount(&n);
	if (rc != CUDA_SUCCESS) {
		snprintf(b->init_error, sizeof(b->init_error), "cuDeviceGetCount failed: %s",
		         cuda_api_error_name(&cu->api, rc, name, sizeof(name)));
		goto fail;
	}
	if (n > BACKEND_MAX_DEVICES) {
		log_warn("cuda: %d devices; serving the first %d", n, BACKEND_MAX_DEVICES);
		n = BACKEND_MAX_DEVICES;
	}
	for (int i = 0; i < n; i++) {
		if (cuda_device_open(b, i, &cu->dev[cu->count], cfg))
			cu->count++;
	}
	if (cu->count == 0) {
		snprintf(b->init_error, sizeof(b->init_error),
		         n ? "none of the %d CUDA devices is usable (see the warnings above)"
		           : "the driver reports no CUDA device",
		         n);
		goto fail;
	}
	b->device_count = cu->count;
	b->slab_granularity = 2u << 20;
	log_info("cuda: driver API %d.%d, serving %d of %d devices", cu->api.driver_version / 1000,
	         cu->api.driver_version % 1000 / 10, cu->count, n);
	/* Only where legacy handles are made: a vmm device sends none. */
	for (int i = 0; i < cu->count; i++) {
		if (!cu->dev[i].vmm_granularity) {
			cuda_dev_log_ipc_users();
			break;
		}
	}
	return 0;
fail:
	cuda_api_unload(&cu->api);
	free(cu);
	b->priv = NULL;
	return -ENODEV;
}

/* The device's memory pools, their descriptors and the stream go (at exit:
 * every slab is gone by then). */
static void cuda_pool_close(struct backend *b, int device)
{
	struct cuda *cu = b->priv;
	struct cuda_device *d = &cu->dev[device];
	if (!d->upools && !d->stream)
		return;
	for (unsigned i = 0; i < d->nupools; i++) {
		if (d->upools[i].fd >= 0)
			close(d->upools[i].fd);
		d->upools[i].fd = -1;
	}
	if (cuda_enter(b, device) == 0) {
		CUresult rc;
		if (d->stream && (rc = cu->api.StreamDestroy(d->stream)) != CUDA_SUCCESS)
			cuda_log(b, rc, device, "cuStreamDestroy");
		for (unsigned i = 0; i < d->nupools; i++) {
			if (d->upools[i].pool &&
			    (rc = cu->api.MemPoolDestroy(d->upools[i].pool)) != CUDA_SUCCESS)
				cuda_log(b, rc, device, "cuMemPoolDestroy");
		}
		cuda_leave(b, device);
	}
	free(d->upools);
	d->upools = NULL;
	d->nupools = 0;
	d->stream = NULL;
}

/* The entry of uid's pool on the device, added (empty) when it has none:
 * NULL when out of memory. */
static struct cuda_upool *cuda_upool_get(struct cuda_device *d, uint32_t uid)
{
	for (unsigned i = 0; i < d->nupools; i++) {
		if (d->upools[i].uid == uid)
			return &d->upools[i];
	}
	struct cuda_upool *n = realloc(d->upools, (d->nupools + 1) * sizeof(*n));
	if (!n)
		return NULL;
	d->upools = n;
	n[d->nupools] = (struct cuda_upool){.uid = uid, .fd = -1};
	return &n[d->nupools++];
}

/* Makes the device's stream and uid's pool and pool descriptor (context
 * pushed): 0 and *out, -ENOMEM or -EIO. A failure leaves what was made for
 * the next try. */
static int cuda_pool_open(struct backend *b, int device, uint32_t uid, struct cuda_upool **out)
{
	struct cuda *cu = b->priv;
	struct cuda_device *d = &cu->dev[device];
	const struct cuda_api *api = &cu->api;
	CUresult rc;
	struct cuda_upool *up = cuda_upool_get(d, uid);
	if (!up)
		return -ENOMEM;
	if (!up->pool) {
		CUmemPoolProps props;
		memset(&props, 0, sizeof(props));
		props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
		props.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
		props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		props.location.id = d->ordinal;
		if ((rc = api->MemPoolCreate(&up->pool, &props)) != CUDA_SUCCESS) {
			up->pool = NULL;
			return cuda_fail(b, rc, device, "cuMemPoolCreate");
		}
		log_info("cuda: device %d: a stream-ordered pool for uid %u", device,
		         (unsigned)uid);
	}
	while (!up->id) {
		if (getrandom(&up->id, sizeof(up->id), 0) != (ssize_t)sizeof(up->id))
			return -EIO;
	}
	if (!d->stream &&
	    (rc = api->StreamCreate(&d->stream, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS) {
		d->stream = NULL;
		return cuda_fail(b, rc, device, "cuStreamCreate");
	}
	if (up->fd < 0) {
		int fd = -1;
		rc = api->MemPoolExportToShareableHandle(
		    &fd, up->pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
		if (rc != CUDA_SUCCESS)
			return cuda_fail(b, rc, device, "cuMemPoolExportToShareableHandle");
		up->fd = fd;
	}
	*out = up;
	return 0;
}

static void cuda_finish(struct backend *b)
{
	struct cuda *cu = b->priv;
	if (!cu)
		return;
	for (int i = 0; i < cu->count; i++) {
		cuda_pool_close(b, i);
		CUresult rc = cu->api.DevicePrimaryCtxRelease(cu->dev[i].dev);
		if (rc != CUDA_SUCCESS)
			cuda_log(b, rc, i, "cuDevicePrimaryCtxRelease");
	}
	cuda_api_unload(&cu->api);
	free(cu);
	b->priv = NULL;
}

static int cuda_device_info(struct backend *b, int device, struct backend_device_info *out)
{
	struct cuda *cu = b->priv;
	if (device < 0 || device >= cu->count)
		return -ENODEV;
	*out = cu->dev[device].info;
	return 0;
}

/* Gives cs->ptr back (context pushed); failures are only logged. An async
 * slab's memory is back in the pool, and so with the driver, once the
 * stream has run the free. */
static void cuda_slab_free(struct backend *b, int device, struct cuda_slab *cs)
{
	struct cuda *cu = b->priv;
	CUresult rc;
	if (cs->base.vmm) {
		/* Mapped by a client still (a killed one being torn down): the
		 * driver keeps the memory until it lets go too. */
		if ((rc = backend_vmm_release(&cu->api, cs->vmm, cs->base.fd)) != CUDA_SUCCESS)
			cuda_log(b, rc, device, "cuMemRelease");
		cs->base.fd = -1;
		return;
	}
	if (!cs->base.pool) {
		if ((rc = cu->api.MemFree(cs->ptr)) != CUDA_SUCCESS)
			cuda_log(b, rc, device, "cuMemFree");
		return;
	}
	CUstream stream = cu->dev[device].stream;
	if ((rc = cu->api.MemFreeAsync(cs->ptr, stream)) != CUDA_SUCCESS)
		cuda_log(b, rc, device, "cuMemFreeAsync");
	else if ((rc = cu->api.StreamSynchronize(stream)) != CUDA_SUCCESS)
		cuda_log(b, rc, device, "cuStreamSynchronize (free)");
}

/* Allocates cs->ptr (context pushed): cuMemAlloc, or with up one
 * allocation from that pool, complete on return. */
static CUresult cuda_slab_alloc(struct backend *b, int device, struct cuda_slab *cs,
                                const struct cuda_upool *up, const char **what)
{
	struct cuda *cu = b->priv;
	struct cuda_device *d = &cu->dev[device];
	CUresult rc;
	if (!up) {
		*what = "cuMemAlloc";
		return cu->api.MemAlloc(&cs->ptr, (size_t)cs->base.size);
	}
	*what = "cuMemAllocFromPoolAsync";
	rc = cu->api.MemAllocFromPoolAsync(&cs->ptr, (size_t)cs->base.size, up->pool, d->stream);
	if (rc != CUDA_SUCCESS)
		return rc;
	*what = "cuStreamSynchronize (allocation)";
	rc = cu->api.StreamSynchronize(d->stream);
	if (rc != CUDA_SUCCESS)
		cuda_slab_free(b, device, cs);
	return rc;
}

/* A VMM slab (transport vmm, not async) of size bytes: 0, -ENOMEM or -EIO. */
static int cuda_slab_create_vmm(struct backend *b, int device, struct cuda_slab *cs)
{
	struct cuda *cu = b->priv;
	struct cuda_device *d = &cu->dev[device];
	const char *what;
	int fd = -1;
	int err = cuda_enter(b, device);
	if (err < 0)
		return err;
	CUresult rc = backend_vmm_create(&cu->api, d->ordinal, d->vmm_granularity, cs->base.size,
	                                 d->vmm_rdma, &cs->vmm, &fd, &what);
	cuda_leave(b, device);
	if (rc == CUDA_ERROR_OUT_OF_MEMORY && strcmp(what, "cuMemCreate") == 0) {
		log_debug("cuda: device %d: cuMemCreate of %llu bytes: out of memory", device,
		          (unsigned long long)cs->base.size);
		return -ENOMEM;
	}
	if (rc != CUDA_SUCCESS)
		return cuda_fail(b, rc, device, what);
	cs->base.vmm = true;
	cs->base.fd = fd;
	cs->base.id = b->next_slab_id++;
	if (backend_vmm_tag(cs->base.id, cs->base.size, cs->base.handle, PROTO_HANDLE_SIZE) < 0) {
		cuda_slab_free(b, device, cs);
		return -EIO;
	}
	return 0;
}

static int cuda_slab_create(struct backend *b, int device, uint64_t size, uint32_t uid,
                            unsigned flags, struct backend_slab **out)
{
	struct cuda *cu = b->priv;
	const struct cuda_api *api = &cu->api;
	bool async = flags & BACKEND_SLAB_ASYNC;
	CUipcMemHandle handle;
	CUmemPoolPtrExportData export_data;
	const char *what;
	CUresult rc;

	if (device < 0 || device >= cu->count)
		return -ENODEV;
	if (size == 0 || size > SIZE_MAX)
		return -EINVAL;
	if (async && !cu->dev[device].info.async)
		return -EOPNOTSUPP;
	b->last_error[0] = '\0';
	struct cuda_slab *cs = calloc(1, sizeof(*cs));
	if (!cs)
		return -ENOMEM;
	cs->base.size = size;
	cs->base.pool = async;
	cs->base.fd = -1;
	if (!async && cu->dev[device].vmm_granularity) {
		int err = cuda_slab_create_vmm(b, device, cs);
		if (err < 0) {
			free(cs);
			return err;
		}
		cs->base.device = device;
		cs->base.uid = uid;
		*out = &cs->base;
		return 0;
	}
	int err = cuda_enter(b, device);
	if (err < 0) {
		free(cs);
		return err;
	}
	struct cuda_upool *up = NULL;
	if (async && (err = cuda_pool_open(b, device, uid, &up)) < 0) {
		cuda_leave(b, device);
		free(cs);
		return err;
	}
	rc = cuda_slab_alloc(b, device, cs, up, &what);
	if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
		cuda_leave(b, device);
		free(cs);
		log_debug("cuda: device %d: %s of %llu bytes: out of memory", device, what,
		          (unsigned long long)size);
		return -ENOMEM;
	}
	if (rc != CUDA_SUCCESS)
		goto fail;
	/* New memory may hold another user's bytes: clear it, and finish
	 * clearing before anyone can open the handle. */
	if ((rc = api->MemsetD8(cs->ptr, 0, (size_t)size)) != CUDA_SUCCESS) {
		what = "cuMemsetD8 (scrub)";
		goto fail_free;
	}
	if ((rc = api->CtxSynchronize()) != CUDA_SUCCESS) {
		what = "cuCtxSynchronize (scrub)";
		goto fail_free;
	}
	if (async) {
		rc = api->MemPoolExportPointer(&export_data, cs->ptr);
		what = "cuMemPoolExportPointer";
		memcpy(cs->base.handle, &export_data, PROTO_HANDLE_SIZE);
	} else {
		rc = api->IpcGetMemHandle(&handle, cs->ptr);
		what = "cuIpcGetMemHandle";
		memcpy(cs->base.handle, &handle, PROTO_HANDLE_SIZE);
	}
	if (rc != CUDA_SUCCESS)
		goto fail_free;
	cuda_leave(b, device);
	cs->base.id = b->next_slab_id++;
	cs->base.device = device;
	cs->base.uid = uid;
	cs->base.fd = up ? up->fd : -1;
	cs->base.pool_id = up ? up->id : 0;
	*out = &cs->base;
	return 0;
fail_free:
	err = cuda_fail(b, rc, device, what);
	/* The first failure is what the client hears about. */
	cuda_slab_free(b, device, cs);
	goto out;
fail:
	err = cuda_fail(b, rc, device, what);
out:
	cuda_leave(b, device);
	free(cs);
	return err;
}

static void cuda_slab_destroy(struct backend *b, struct backend_slab *slab)
{
	struct cuda_slab *cs = (struct cuda_slab *)slab;
	int device = slab->device;
	/* Nothing to tell the broker: a slab that cannot be freed is lost
	 * device memory, and the log says which. */
	if (cuda_enter(b, device) == 0) {
		cuda_slab_free(b, device, cs);
		cuda_leave(b, device);
	}
	free(cs);
}

/* cuMemGetInfo's free bytes, of every process on the device: what the
 * driver still has. Its word on a cuMemAlloc may differ (what it keeps for
 * itself, another process allocating meanwhile): the pool only starts there. */
static int cuda_slab_room(struct backend *b, int device, uint64_t *bytes)
{
	struct cuda *cu = b->priv;
	size_t free_bytes = 0, total = 0;
	CUresult rc;
	if (device < 0 || device >= cu->count)
		return -ENODEV;
	int err = cuda_enter(b, device);
	if (err < 0)
		return err;
	rc = cu->api.MemGetInfo(&free_bytes, &total);
	cuda_leave(b, device);
	if (rc != CUDA_SUCCESS) {
		cuda_log(b, rc, device, "cuMemGetInfo");
		return -EIO;
	}
	*bytes = free_bytes;
	return 0;
}

const struct backend_ops backend_cuda_ops = {
    .name = "cuda",
    .init = cuda_init,
    .finish = cuda_finish,
    .device_info = cuda_device_info,
    .slab_create = cuda_slab_create,
    .slab_destroy = cuda_slab_destroy,
    .slab_room = cuda_slab_room,
};
