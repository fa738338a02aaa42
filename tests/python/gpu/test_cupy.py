"""gpubroker.cupy, the CuPy allocator, on a real GPU (suite gpu), and CuPy
reading what a Numba kernel wrote, through the broker's sharing.

Skipped (exit 77 through meson) without cupy, a driver or a device."""

import gc
import importlib.util
import subprocess
import sys
import textwrap

import pytest

cupy = pytest.importorskip("cupy")

import gpubroker  # noqa: E402
import gpubroker.cupy  # noqa: E402
from conftest import child_env, live_bytes, run_python, settle, wait_until  # noqa: E402

MiB = 1 << 20


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
        # Nothing live: its leases (charged whole) may stay, nothing in them.
        assert live_bytes(alloc.client, inst) == 0
    assert cupy.cuda.get_allocator() == previous  # restored


def test_empty_array_asks_nothing_of_the_broker(broker):
    # CuPy asks the allocator for 0 bytes: a null pointer, no daemon call.
    gcp, alloc, admin = broker
    dev = admin.instance_info(alloc.instance()).device
    before = admin.stats(dev).allocs
    with gcp.using_allocator(alloc):
        x = cupy.empty(0, dtype=cupy.float32)
        assert x.size == 0 and x.data.ptr == 0
        assert cupy.asnumpy(x).size == 0
    assert admin.stats(dev).allocs == before


def test_device_found_by_its_whole_uuid(broker):
    # The driver's UUID (all 16 bytes, NULs included), not CuPy's property.
    gcp, alloc, admin = broker
    uuid = gcp._device_uuid(cupy.cuda.runtime.getDevice())
    assert uuid and len(uuid) == len("GPU-") + 36
    assert admin.device_index(uuid) == admin.instance_info(alloc.instance()).device


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
    del y, arr
    gc.collect()
    # Numba's free is quiet: done before a later test's baseline (admin's view).
    settle(cuda.current_context().memory_manager.client)


def test_set_allocator_malloc_and_using_allocator(broker):
    # The README's two forms, with the process-wide allocator: the function
    # for set_allocator, and the bare context manager.
    gcp, alloc, admin = broker
    previous = cupy.cuda.get_allocator()
    default = gpubroker.cupy.default_allocator()
    inst = default.instance()
    dev = admin.instance_info(inst).device

    def used():
        """The default allocator's live bytes, and what the daemon charges
        its instance (leases whole: at least the live bytes)."""
        live = live_bytes(default.client, inst)
        charged = admin.instance_info(inst).used
        assert charged >= live
        return live

    gc.collect()  # what earlier tests dropped is gone before the baseline
    base = used()
    try:
        cupy.cuda.set_allocator(gpubroker.cupy.malloc)
        x = cupy.ones(1 << 20, dtype=cupy.float32)
        assert used() >= base + 4 * MiB
        assert float(x.sum()) == float(1 << 20)
        del x
        gc.collect()
        assert used() == base
    finally:
        cupy.cuda.set_allocator(previous)
    with gpubroker.cupy.using_allocator():
        assert cupy.cuda.get_allocator() == default
        y = cupy.zeros((512, 1024), dtype=cupy.float64)
        assert used() >= base + 4 * MiB
        del y
        gc.collect()
        assert used() == base
    assert cupy.cuda.get_allocator() == previous
    z = cupy.zeros(1 << 20, dtype=cupy.uint8)  # CuPy's own pool again
    assert used() == base
    del z
    default.close()


# A Numba process fills broker memory and exports it by name; it waits on
# its stdin, so that the allocation lives while the reader opens it.
EXPORTER = textwrap.dedent("""
    import sys
    from numba import cuda
    mm = cuda.current_context().memory_manager  # NUMBA_CUDA_MEMORY_MANAGER

    @cuda.jit
    def fill(out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = 3 * i + 1

    arr = cuda.device_array(1000, dtype="int32")
    fill.forall(arr.size)(arr)
    cuda.synchronize()
    h = arr.get_ipc_handle()._ipc_handle  # gpubroker.numba's: allocation id, offset
    mm.client.export(h.allocation_id, sys.argv[1])
    print("exported", h.offset, flush=True)
    sys.stdin.readline()
    print(int(arr.copy_to_host()[999]), flush=True)
    """)

# A CuPy process (no Numba) opens the name and reads the values in place.
READER = textwrap.dedent("""
    import gc, sys
    import cupy
    import gpubroker
    offset = int(sys.argv[2])
    with gpubroker.Client(None, "cupy-reader") as c:
        a = c.open_shared(sys.argv[1])
        y = cupy.asarray(a)[offset:offset + 4000].view(cupy.int32)
        print(int(y[0]), int(y[999]), int(y.sum()))
        del y
        gc.collect()
        a.free()
    """)


def test_cupy_process_reads_what_a_numba_process_wrote(broker):
    if importlib.util.find_spec("numba") is None:
        pytest.skip("numba is not installed (the exporting process needs it)")
    gcp, alloc, admin = broker
    gc.collect()
    # This process's own leases may go back while it waits (idle): the
    # children are counted by their connections, not by bytes.
    clients = admin.request("status")["clients"]
    exporter = subprocess.Popen(
        [sys.executable, "-c", EXPORTER, "numba-filled"],
        env=dict(child_env(), NUMBA_CUDA_MEMORY_MANAGER="gpubroker.numba"),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = exporter.stdout.readline().split()
        assert line[:1] == ["exported"], exporter.communicate(timeout=60)[1]
        assert admin.request("status")["clients"] == clients + 1
        r = run_python(READER, "numba-filled", line[1])
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == ["1", "2998", str(3 * 999 * 1000 // 2 + 1000)]
        out, err = exporter.communicate("done\n", timeout=60)
        assert exporter.returncode == 0, err
        assert out.split() == ["2998"]  # still the exporter's, unchanged
    finally:
        if exporter.poll() is None:
            exporter.kill()
            exporter.wait()
    # Both processes gone: their connections, and the exported name with them.
    assert wait_until(lambda: admin.request("status")["clients"] == clients)
    with pytest.raises(gpubroker.GpubrokerError):
        admin.open_shared("numba-filled")
