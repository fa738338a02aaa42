"""gpubroker.cupy, the CuPy allocator, on a real GPU (suite gpu), and CuPy
reading what a Numba kernel wrote, through the broker's sharing.

Skipped (exit 77 through meson) without cupy, a driver or a device."""

import gc

import pytest

cupy = pytest.importorskip("cupy")

import gpubroker  # noqa: E402


@pytest.fixture(scope="module")
def broker(cuda_daemon):
    try:
        cupy.cuda.runtime.getDeviceCount()
    except cupy.cuda.runtime.CUDARuntimeError as e:
        pytest.skip("CuPy sees no device: %s" % e)
    import gpubroker.cupy as gcp

    alloc = gcp.BrokerAllocator(name="cupy-test")
    with gpubroker.Client(cuda_daemon.socket, "observer") as admin:
        yield gcp, alloc, admin
    alloc.close()


def test_arrays_come_from_the_broker_and_go_back(broker):
    gcp, alloc, admin = broker
    previous = cupy.cuda.get_allocator()
    with gcp.using_allocator(alloc):
        x = cupy.arange(1 << 20, dtype=cupy.float32)
        inst = alloc.instance()
        assert admin.instance_info(inst).used >= (1 << 20) * 4
        assert float((x * 2).sum()) == float(cupy.arange(1 << 20, dtype=cupy.float64).sum() * 2)
        del x
        gc.collect()
        assert admin.instance_info(inst).used == 0
    assert cupy.cuda.get_allocator() == previous  # restored


def test_pool_statistics(broker):
    gcp, alloc, admin = broker
    with gcp.using_allocator(alloc):
        x = cupy.zeros(1 << 20, dtype=cupy.uint8)
        st = admin.stats(admin.instance_info(alloc.instance()).device)
        assert alloc.used_bytes() == st.used >= 1 << 20
        assert alloc.total_bytes() == alloc.used_bytes() + alloc.free_bytes()
        assert alloc.n_free_blocks() == st.free_blocks
        assert alloc.get_limit() == alloc.mem_info().cap
        del x


def test_cupy_reads_what_numba_wrote(broker):
    pytest.importorskip("numba")
    from numba import cuda

    from gpubroker.numba import GpubrokerMemoryManager

    gcp, alloc, admin = broker
    cuda.set_memory_manager(GpubrokerMemoryManager)

    @cuda.jit
    def fill(out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = 3 * i

    arr = cuda.device_array(1000, dtype="int32")
    fill.forall(arr.size)(arr)
    cuda.synchronize()
    h = arr.get_ipc_handle()._ipc_handle  # the broker's handle (allocation id, offset, size)
    y = gcp.attach(h, shape=(1000,), dtype="int32", client=alloc.client)
    assert int(y[999]) == 2997 and int(y.sum()) == 3 * 999 * 1000 // 2
    del y
    gc.collect()
