"""gpubroker.numba, the Numba EMM plugin, on a real GPU (suite gpu).

Skipped (exit 77 through meson) without numba, a driver or a device."""

import gc
import pickle
import textwrap

import pytest

numba = pytest.importorskip("numba")
cuda = pytest.importorskip("numba.cuda")

import gpubroker  # noqa: E402
from conftest import run_python  # noqa: E402


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
    return admin.instance_info(mm.instance).used


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
        with pytest.raises(MemoryError):  # QuotaError: over the cap
            cuda.device_array(cap + (1 << 20), dtype="uint8")
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
