"""gpubroker.numba, the Numba EMM plugin, on a real GPU (suite gpu).

Skipped (exit 77 through meson) without numba, a driver or a device."""

import ctypes
import gc
import pickle
import textwrap

import pytest

numba = pytest.importorskip("numba")
cuda = pytest.importorskip("numba.cuda")
np = pytest.importorskip("numpy")  # Numba needs it: there whenever Numba is

import gpubroker  # noqa: E402
from conftest import live_bytes, run_python, settle  # noqa: E402


@pytest.fixture(scope="module")
def emm(cuda_daemon):
    if not cuda.is_available():
        pytest.skip("numba.cuda sees no device")
    from gpubroker.numba import GpubrokerMemoryManager

    cuda.set_memory_manager(GpubrokerMemoryManager)
    mm = cuda.current_context().memory_manager
    assert isinstance(mm, GpubrokerMemoryManager) and mm.interface_version == 1
    with gpubroker.Client(cuda_daemon.socket, "observer") as admin:
        yield mm, admin


@cuda.jit
def fill(out, value):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = value + i


def live(admin, mm):
    """The bytes of the plugin's live arrays: what the daemon charges its
    instance, less its leases (charged whole), plus what is in use inside
    them (the library's own figure), once the plugin's connection has done
    what it freed (its frees are quiet: settle). Numba queues the frees of
    dropped arrays and flushes the queue when it likes (an earlier test's
    array was still queued at one `before` and freed by the next `after`, on
    an H200): collect and flush first, except under defer_cleanup, where
    clear() keeps the queue."""
    gc.collect()
    cuda.current_context().deallocations.clear()
    settle(mm.client)
    return live_bytes(mm.client, mm.instance)


def test_kernel_writes_broker_memory(emm):
    mm, admin = emm
    before = live(admin, mm)
    arr = cuda.device_array(4096, dtype="float32")
    assert live(admin, mm) >= before + 4096 * 4  # the broker made it
    fill.forall(arr.size)(arr, 1.5)
    cuda.synchronize()
    host = arr.copy_to_host()
    assert host[0] == 1.5 and host[4095] == 1.5 + 4095
    # The same bytes, read through the library (gpb_copy_from_device).
    a = mm._live[arr.__cuda_array_interface__["data"][0]]
    import struct
    assert struct.unpack("<f", a.read(4, offset=4 * 10))[0] == 11.5


def test_memory_freed_when_array_dropped(emm):
    mm, admin = emm
    before = live(admin, mm)
    arr = cuda.device_array((256, 1024), dtype="float64")
    assert live(admin, mm) >= before + 256 * 1024 * 8
    del arr
    gc.collect()
    assert live(admin, mm) == before


def test_defer_cleanup_holds_frees(emm):
    mm, admin = emm
    before = live(admin, mm)
    with cuda.defer_cleanup():
        arr = cuda.device_array(1 << 20, dtype="uint8")
        del arr
        gc.collect()
        assert live(admin, mm) >= before + (1 << 20)  # held back
    assert live(admin, mm) == before


def test_memory_info_reflects_the_cap_in_active_mode(emm):
    mm, admin = emm
    admin.set_mode("active")
    try:
        admin.set_proportion(mm.instance, 0.25)
        info = cuda.current_context().get_memory_info()
        cap = admin.instance_info(mm.instance).cap
        assert info.total == cap
        assert cap <= admin.policy_info(admin.instance_info(mm.instance).device).capacity // 4 + 1
        assert info.free <= info.total
        with pytest.raises(MemoryError) as e:  # over the cap
            cuda.device_array(cap + (1 << 20), dtype="uint8")
        # Numba's own out-of-memory error, the broker's as its cause.
        from numba.cuda.cudadrv.driver import CudaAPIError
        assert isinstance(e.value, CudaAPIError)
        assert isinstance(e.value.broker_error, gpubroker.QuotaError)
    finally:
        admin.set_auto(mm.instance)
        admin.set_mode("passive")


def test_ipc_handle_opens_in_another_process(emm, cuda_daemon):
    arr = cuda.device_array(1000, dtype="float32")
    fill.forall(arr.size)(arr, 7.0)
    cuda.synchronize()
    handle = arr.get_ipc_handle()
    code = textwrap.dedent("""
        import pickle, sys
        from numba import cuda
        h = pickle.loads(bytes.fromhex(sys.argv[1]))
        with h as child:
            host = child.copy_to_host()
        print(float(host[0]), float(host[999]))
        """)
    r = run_python(code, pickle.dumps(handle).hex())
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["7.0", "1006.0"]


def test_reset_frees_everything(emm):
    mm, admin = emm
    keep = cuda.device_array(1 << 16, dtype="uint8")
    assert live(admin, mm) >= keep.nbytes
    mm.reset()
    assert live(admin, mm) == 0
    del keep  # its finalizer finds nothing left to free


def test_memory_manager_from_the_environment(cuda_daemon):
    # A fresh process, nothing but NUMBA_CUDA_MEMORY_MANAGER: Numba imports
    # gpubroker.numba itself, and a device array is a broker allocation.
    if not cuda.is_available():
        pytest.skip("numba.cuda sees no device")
    code = textwrap.dedent("""
        import gc, sys
        from numba import cuda
        import gpubroker
        mm = cuda.current_context().memory_manager
        print(type(mm).__module__ + "." + type(mm).__name__, mm.interface_version)
        def live():  # leases are charged whole: what is in use inside them
            m = mm.client.mem_info(mm.instance)  # the quiet free is done before admin looks
            return m.used - m.leased + m.in_use
        with gpubroker.Client(sys.argv[1], "observer") as admin:
            before = live()
            arr = cuda.device_array(1 << 20, dtype="float32")
            print(live() - before, admin.instance_info(mm.instance).used)
            del arr
            gc.collect()
            print(live() - before)
        """)
    r = run_python(code, cuda_daemon.socket, env={"NUMBA_CUDA_MEMORY_MANAGER": "gpubroker.numba"})
    assert r.returncode == 0, r.stderr
    manager, grown, freed = r.stdout.splitlines()
    assert manager == "gpubroker.numba.GpubrokerMemoryManager 1"
    grew, inst_used = (int(v) for v in grown.split())
    assert grew >= 4 << 20 and inst_used >= 4 << 20  # the daemon counts it
    assert int(freed) == 0


# Whether CUDA knows host memory as page-locked: cuPointerGetAttribute
# (CU_POINTER_ATTRIBUTE_MEMORY_TYPE) is CU_MEMORYTYPE_HOST for memory from
# cuMemHostAlloc or cuMemHostRegister, an error for pageable memory.
CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2
CU_MEMORYTYPE_HOST = 1


def page_locked(array):
    cu = ctypes.CDLL("libcuda.so.1")
    fn = cu.cuPointerGetAttribute
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64]
    kind = ctypes.c_uint(0)
    rc = fn(ctypes.byref(kind), CU_POINTER_ATTRIBUTE_MEMORY_TYPE, array.ctypes.data)
    return rc == 0 and kind.value == CU_MEMORYTYPE_HOST


def test_pinned_array_is_host_memory_beside_broker_memory(emm):
    # memhostalloc: page-locked host memory as Numba's own manager makes it,
    # not broker memory; copies between it and broker memory work.
    mm, admin = emm
    before = live(admin, mm)
    h = cuda.pinned_array(1 << 16, dtype="float32")
    assert page_locked(h)
    assert live(admin, mm) == before  # host memory is not the broker's
    h[:] = np.arange(h.size, dtype="float32")
    d = cuda.to_device(h)
    assert live(admin, mm) >= before + h.nbytes
    back = cuda.pinned_array(h.size, dtype="float32")
    d.copy_to_host(back)
    assert (back == h).all()
    del d
    gc.collect()
    assert live(admin, mm) == before


def test_mapped_array_is_written_by_a_kernel(emm):
    # memhostalloc(mapped=True): the kernel writes host memory directly.
    mm, admin = emm
    before = live(admin, mm)
    m = cuda.mapped_array(1000, dtype="float32")
    assert page_locked(m)
    fill.forall(m.size)(m, 2.0)
    cuda.synchronize()
    assert m[0] == 2.0 and m[999] == 2.0 + 999
    assert live(admin, mm) == before


def test_pinned_and_mapped_blocks_register_and_unregister(emm):
    # mempin: cuda.pinned() and cuda.mapped() page-lock an ordinary array for
    # the block only.
    mm, admin = emm
    a = np.zeros(1 << 16, dtype="float32")
    assert not page_locked(a)
    with cuda.pinned(a):
        assert page_locked(a)
        d = cuda.to_device(np.full(a.size, 4.0, dtype="float32"))
        d.copy_to_host(a)
    gc.collect()
    assert not page_locked(a) and a[0] == 4.0 and a[-1] == 4.0
    del d
    b = np.zeros(1000, dtype="float32")
    with cuda.mapped(b) as view:
        assert page_locked(b)
        fill.forall(view.size)(view, 5.0)
        cuda.synchronize()
    gc.collect()
    assert not page_locked(b)
    assert b[0] == 5.0 and b[999] == 5.0 + 999
