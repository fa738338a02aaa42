"""Driver facts the broker's design depends on, asked of the driver through
cuda-bindings (cuda.bindings.driver) and printed: run by tools/gpu-check.sh
on a GPU (docs/cuda.md). It reports and never judges: every probe is
guarded, one that raises prints why and the next runs, and the exit status
is 0 whatever the driver answered (77, skipped, when there is no
cuda-bindings or no device to ask).

    python3 tests/gpu/probe.py

What it asks (issue 25 and the findings of issue 15):
- versions, the device, compute mode and MPS, the descriptor limit;
- cuGetProcAddress's answers for a missing symbol and for entry points
  whose signature changed at CUDA 13 (the fake must answer alike);
- the attributes the transports and GPUDirect RDMA depend on;
- VMM: granularity, what an exported descriptor is (its file), whether a
  mapping outlives its descriptor and handles, RDMA-capable allocations;
- pools: whether two pools' descriptors name the same file (dev, inode);
- contexts: cuCtxGetId of a destroyed context, a reset primary context.
"""
import os
import resource
import sys
import traceback

try:
    from cuda.bindings import driver as cu
except ImportError as e:  # cuda-python older than 12.6 named it cuda.cuda
    try:
        from cuda import cuda as cu  # type: ignore[no-redef]
    except ImportError:
        print("SKIP: no cuda-bindings in this python3 (%s): nothing asked" % e)
        sys.exit(77)


def say(*a):
    print(*a, flush=True)


def ok(r):
    """The value of a cuda-bindings call, raising on an error."""
    if isinstance(r, tuple):
        err, rest = r[0], r[1:]
    else:
        err, rest = r, ()
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError("CUDA error %s" % err)
    return rest[0] if len(rest) == 1 else rest


def probe(name):
    """Runs the decorated function now; an exception is printed, not raised."""
    def wrap(fn):
        say("## %s" % name)
        try:
            fn()
        except Exception:
            say("PROBE %s raised:" % name)
            traceback.print_exc(file=sys.stdout)
        sys.stdout.flush()
        return fn
    return wrap


r = cu.cuInit(0)
if r[0] != cu.CUresult.CUDA_SUCCESS:
    print("SKIP: cuInit failed: %s" % (r[0],))
    sys.exit(77)
count = ok(cu.cuDeviceGetCount())
if count == 0:
    print("SKIP: the driver has no device")
    sys.exit(77)
dev = ok(cu.cuDeviceGet(0))
ctx = ok(cu.cuDevicePrimaryCtxRetain(dev))
ok(cu.cuCtxSetCurrent(ctx))


@probe("versions and the device")
def _():
    say("driver version (CUDA API)", ok(cu.cuDriverGetVersion()))
    say("devices", count)
    name = ok(cu.cuDeviceGetName(256, dev))
    say("device 0", bytes(name).split(b"\0")[0].decode(errors="replace"))
    say("total memory", ok(cu.cuDeviceTotalMem(dev)))
    free, total = ok(cu.cuMemGetInfo())
    say("cuMemGetInfo free", free, "total", total, "(this process's context made)")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    say("RLIMIT_NOFILE soft", soft, "hard", hard)
    say("CUDA_MPS_PIPE_DIRECTORY", os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "(unset)"))


@probe("cuGetProcAddress")
def _():
    for ver in (13000, 12000):
        r = cu.cuGetProcAddress(b"cuNoSuchEntryPoint", ver, 0)
        say("cuGetProcAddress(cuNoSuchEntryPoint, %d) ->" % ver, r)
    for name in (b"cuCtxGetDevice", b"cuCtxSynchronize", b"cuCtxGetId", b"cuMemAlloc"):
        for ver in (12000, 13000):
            say("cuGetProcAddress(%s, %d) ->" % (name.decode(), ver),
                cu.cuGetProcAddress(name, ver, 0))


@probe("attributes")
def _():
    A = cu.CUdevice_attribute
    for n in ("CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED",
              "CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED",
              "CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED",
              "CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED",
              "CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED",
              "CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES",
              "CU_DEVICE_ATTRIBUTE_COMPUTE_MODE", "CU_DEVICE_ATTRIBUTE_MPS_ENABLED",
              "CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED",
              "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR",
              "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR"):
        if hasattr(A, n):
            say(n, cu.cuDeviceGetAttribute(getattr(A, n), dev))
        else:
            say(n, "(not in these bindings)")


def fdinfo(fd):
    st = os.fstat(fd)
    try:
        link = os.readlink("/proc/self/fd/%d" % fd)
    except OSError as e:
        link = "readlink: %s" % e
    return "fd %d -> %s (dev %d ino %d rdev %d mode %o)" % (
        fd, link, st.st_dev, st.st_ino, st.st_rdev, st.st_mode)


def vmm_prop(rdma):
    p = cu.CUmemAllocationProp()
    p.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    p.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    p.location.id = 0
    p.requestedHandleTypes = \
        cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    if rdma:
        p.allocFlags.gpuDirectRDMACapable = 1
    return p


@probe("vmm")
def _():
    POSIX = cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    gran = ok(cu.cuMemGetAllocationGranularity(
        vmm_prop(False), cu.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM))
    say("granularity", gran)
    say("fd count before", len(os.listdir("/proc/self/fd")))
    for rdma in (False, True):
        r = cu.cuMemCreate(gran, vmm_prop(rdma), 0)
        say("cuMemCreate(gpuDirectRDMACapable=%d) ->" % rdma, r[0])
        if r[0] != cu.CUresult.CUDA_SUCCESS:
            continue
        h = r[1]
        fd = ok(cu.cuMemExportToShareableHandle(h, POSIX, 0))
        say("exported", fdinfo(int(fd)))
        fd2 = ok(cu.cuMemExportToShareableHandle(h, POSIX, 0))
        say("exported again", fdinfo(int(fd2)))
        os.close(int(fd2))
        # Import then close the descriptor: does the handle keep the memory?
        h2 = ok(cu.cuMemImportFromShareableHandle(int(fd), POSIX))
        os.close(int(fd))
        ptr = ok(cu.cuMemAddressReserve(gran, 0, 0, 0))
        ok(cu.cuMemMap(ptr, gran, 0, h2, 0))
        ok(cu.cuMemRelease(h2))
        ok(cu.cuMemRelease(h))
        d = cu.CUmemAccessDesc()
        d.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        d.location.id = 0
        d.flags = cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        ok(cu.cuMemSetAccess(ptr, gran, [d], 1))
        ok(cu.cuMemsetD8(ptr, 7, gran))
        ok(cu.cuCtxSynchronize())
        say("memset after the descriptor closed and the handles released: ok")
        r = cu.cuPointerGetAttribute(cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_CONTEXT, ptr)
        say("CU_POINTER_ATTRIBUTE_CONTEXT of a VMM mapping ->", r,
            "current", ok(cu.cuCtxGetCurrent()))
        r = cu.cuPointerGetAttribute(
            cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE, ptr)
        say("IS_GPU_DIRECT_RDMA_CAPABLE ->", r)
        ok(cu.cuMemUnmap(ptr, gran))
        ok(cu.cuMemAddressFree(ptr, gran))
    say("fd count after", len(os.listdir("/proc/self/fd")))


@probe("pools")
def _():
    POSIX = cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    infos = []
    for i in range(2):
        p = cu.CUmemPoolProps()
        p.allocType = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        p.handleTypes = POSIX
        p.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        p.location.id = 0
        pool = ok(cu.cuMemPoolCreate(p))
        fd = int(ok(cu.cuMemPoolExportToShareableHandle(pool, POSIX, 0)))
        st = os.fstat(fd)
        infos.append((st.st_dev, st.st_ino))
        say("pool %d exported" % i, fdinfo(fd))
        fd2 = int(ok(cu.cuMemPoolExportToShareableHandle(pool, POSIX, 0)))
        say("pool %d exported again" % i, fdinfo(fd2))
        os.close(fd)
        os.close(fd2)
        ok(cu.cuMemPoolDestroy(pool))
    say("two pools' descriptors have the same (dev, ino):", infos[0] == infos[1])


@probe("contexts")
def _():
    c = ok(cu.cuCtxCreate(None, 0, dev))
    say("own ctx id", cu.cuCtxGetId(c))
    ok(cu.cuCtxDestroy(c))
    say("cuCtxGetId of a destroyed context ->", cu.cuCtxGetId(c))
    ok(cu.cuCtxSetCurrent(ctx))
    say("primary state", cu.cuDevicePrimaryCtxGetState(dev), "id", cu.cuCtxGetId(ctx))
    ok(cu.cuDevicePrimaryCtxReset(dev))
    say("after reset, retain outstanding: state", cu.cuDevicePrimaryCtxGetState(dev),
        "cuCtxGetId(old handle)", cu.cuCtxGetId(ctx))
    c2 = ok(cu.cuDevicePrimaryCtxRetain(dev))
    say("new retain: same handle", int(c2) == int(ctx), "id", cu.cuCtxGetId(c2))


say("probe done")
sys.exit(0)
