"""gpubroker.cupy, the CuPy allocator, with the real CuPy imported, on the
fake driver (suite frameworks).

CuPy's runtime cannot start on the fake: libcudart asks the driver for
cuGetExportTable (NVIDIA's private, undocumented tables), which the fake
does not have, and cudaGetDeviceCount then fails with
cudaErrorCallRequiresNewerDriver (test_runtime_cannot_start_on_the_fake
checks that this is still so). So arrays, kernels and CuPy's own copies are
the gpu suite's (tests/python/gpu/test_cupy.py); here the allocator's
contract with CuPy's memory classes: UnownedMemory, MemoryPointer,
set_allocator, using_allocator, the pool statistics, size 0, and the device
found by its UUID. The current device, the one thing the bridge asks CuPy's
runtime, is device 0 (patched)."""

import ctypes
import gc

import pytest

import cupy

import gpubroker
import gpubroker.cupy as gcp
from conftest import MiB, harness

FAKE_UUID = "GPU-facecda0-0000-4000-8000-000000000000"  # NUL bytes 4 and 5


def test_runtime_cannot_start_on_the_fake():
    with pytest.raises(cupy.cuda.runtime.CUDARuntimeError) as e:
        cupy.cuda.runtime.getDeviceCount()
    assert "cudaErrorCallRequiresNewerDriver" in str(e.value)


@pytest.fixture(scope="module")
def broker(fake_daemon):
    mp = pytest.MonkeyPatch()
    mp.setattr(gcp, "_current_device", lambda: 0)
    alloc = gcp.BrokerAllocator(name="cupy-test")
    with gpubroker.Client(fake_daemon.socket, "observer") as admin:
        yield alloc, admin
    alloc.close()
    mp.undo()


def test_size_zero_asks_nothing_of_the_daemon(fake_daemon):
    mp = pytest.MonkeyPatch()
    mp.setattr(gcp, "_current_device", lambda: 0)
    try:
        alloc = gcp.BrokerAllocator(name="cupy-zero")
        with gpubroker.Client(fake_daemon.socket, "observer") as admin:
            before = admin.stats(0)
            alloc.client.close()  # a daemon call would fail now
            p = alloc(0)
            assert isinstance(p, cupy.cuda.MemoryPointer)
            assert isinstance(p.mem, cupy.cuda.UnownedMemory)
            assert p.ptr == 0 and p.mem.size == 0 and p.device_id == 0
            assert alloc._instances == {}  # not even registered
            assert admin.stats(0).allocs == before.allocs
    finally:
        mp.undo()


def live(alloc, inst):
    """The bytes of the allocator's live blocks of @inst: what the daemon
    charges it (leases whole), less the allocator's client's leases, plus
    what is in use inside them (a request that waits for its reply: the
    allocator's quiet frees are done)."""
    return harness.live_bytes(alloc.client, inst)


def test_uuid_comes_whole_from_the_driver(broker, monkeypatch):
    alloc, admin = broker
    # CuPy's property is cut at the first NUL: what it gives for the fake.
    monkeypatch.setattr(cupy.cuda.runtime, "getDeviceProperties",
                        lambda d: {"uuid": b"\xfa\xce\xcd\xa0"}, raising=False)
    assert gcp._device_uuid(0) == FAKE_UUID
    inst = alloc.instance(0)
    assert admin.instance_info(inst).device == admin.device_index(FAKE_UUID)
    # Without the driver's answer the cut property gives no UUID at all.
    monkeypatch.setattr(gcp._cuda, "driver_uuid", lambda d: None)
    assert gcp._device_uuid(0) is None


def test_allocations_are_broker_memory_in_cupy_classes(broker):
    alloc, admin = broker
    before = live(alloc, alloc.instance())
    p = alloc(3 * MiB + 5)
    assert isinstance(p, cupy.cuda.MemoryPointer) and isinstance(p.mem, cupy.cuda.UnownedMemory)
    assert p.device_id == 0 and p.mem.size == 3 * MiB + 5
    a = p.mem._owner  # the gpubroker.Allocation, alive while CuPy holds the memory
    assert isinstance(a, gpubroker.Allocation) and a.ptr == p.ptr
    assert live(alloc, alloc.instance()) >= before + 3 * MiB + 5
    # The bytes: written through the library, read through the driver.
    a.write(b"gpubroker", offset=100)
    cu = ctypes.CDLL("libcuda.so.1")
    buf = ctypes.create_string_buffer(9)
    view = p + 100  # MemoryPointer arithmetic keeps the memory
    assert view.ptr == p.ptr + 100 and view.mem is p.mem
    ctx = ctypes.c_void_p()
    assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0  # as CuPy's runtime would
    assert cu.cuCtxPushCurrent_v2(ctx) == 0
    try:
        assert cu.cuMemcpyDtoH_v2(buf, ctypes.c_uint64(view.ptr), ctypes.c_size_t(9)) == 0
    finally:
        cu.cuCtxPopCurrent_v2(None)
        cu.cuDevicePrimaryCtxRelease_v2(0)
    assert buf.raw == b"gpubroker"
    del p, view, a
    gc.collect()
    harness.settle(alloc.client)  # its free is quiet: done before admin looks
    assert live(alloc, alloc.instance()) == before


def test_set_allocator_and_using_allocator(broker):
    alloc, admin = broker
    previous = cupy.cuda.get_allocator()
    inst = alloc.instance()
    with gcp.using_allocator(alloc) as got:
        assert got is alloc and cupy.cuda.get_allocator() is alloc
        mem = cupy.cuda.memory.alloc(MiB)  # CuPy's entry point, our allocator
        assert isinstance(mem.mem, cupy.cuda.UnownedMemory)
        assert live(alloc, inst) >= MiB
        del mem
        gc.collect()
        harness.settle(alloc.client)
        assert live(alloc, inst) == 0
    assert cupy.cuda.get_allocator() == previous  # restored
    cupy.cuda.set_allocator(alloc)
    try:
        mem = cupy.cuda.memory.alloc(2 * MiB)
        assert live(alloc, inst) >= 2 * MiB
        del mem
        gc.collect()
    finally:
        cupy.cuda.set_allocator(previous)
    harness.settle(alloc.client)
    assert live(alloc, inst) == 0


def ctl_stats(fake_daemon, dev):
    """The device's pool as gpubrokerctl reports it (its own connection)."""
    import json
    import os
    import subprocess

    out = subprocess.run([os.environ["GPUBROKERCTL"], "--socket", fake_daemon.socket, "-o",
                          "json", "stats"], capture_output=True, text=True, check=True).stdout
    row = [d for d in json.loads(out)["devices"] if d["device"] == dev][0]
    return {k: int(v) for k, v in row.items()}


def test_pool_statistics_are_the_daemon_pool(fake_daemon, monkeypatch):
    monkeypatch.setattr(gcp, "_current_device", lambda: 0)
    # Leases off: each allocation is the daemon's, so the pool's figures
    # move by exactly what is allocated.
    monkeypatch.setenv("GPUBROKER_LEASE", "0")
    alloc = gcp.BrokerAllocator(name="cupy-stats")
    try:
        with gpubroker.Client(fake_daemon.socket, "observer") as admin:
            inst = alloc.instance()
            dev = admin.instance_info(inst).device
            before = ctl_stats(fake_daemon, dev)
            keep = [alloc(3 * MiB), alloc(5 * MiB)]
            harness.settle(alloc.client)
            ctl = ctl_stats(fake_daemon, dev)
            # The allocator's figures against the CLI's, another connection.
            assert alloc.used_bytes() == ctl["used"]
            assert alloc.free_bytes() == ctl["free"]
            assert alloc.total_bytes() == ctl["reserved"] == ctl["used"] + ctl["free"]
            assert alloc.n_free_blocks() == ctl["free_blocks"]
            # And the known allocations are what moved.
            assert ctl["used"] - before["used"] == 8 * MiB
            assert ctl["live"] - before["live"] == 2
            assert alloc.get_limit() == alloc.mem_info().cap == admin.instance_info(inst).cap
            del keep
            gc.collect()
            harness.settle(alloc.client)
            after = ctl_stats(fake_daemon, dev)
            assert after["used"] == before["used"] and after["live"] == before["live"]
            assert alloc.used_bytes() == after["used"]
    finally:
        alloc.close()


def test_using_allocator_is_this_threads(broker):
    import threading

    alloc, _ = broker
    outer = cupy.cuda.get_allocator()
    seen = {}
    inside, done = threading.Event(), threading.Event()

    def other():
        inside.wait()
        seen["other"] = cupy.cuda.get_allocator()
        done.set()

    t = threading.Thread(target=other)
    t.start()
    with gcp.using_allocator(alloc):
        inside.set()
        done.wait()
        assert cupy.cuda.get_allocator() is alloc
    t.join()
    assert seen["other"] is not alloc and seen["other"] == outer
    assert cupy.cuda.get_allocator() == outer


def test_using_allocator_nests_with_cupys(broker):
    alloc, _ = broker
    other = cupy.cuda.memory.malloc_managed  # any allocator CuPy accepts
    outer = cupy.cuda.get_allocator()
    with cupy.cuda.using_allocator(other):
        with gcp.using_allocator(alloc):
            assert cupy.cuda.get_allocator() is alloc
            with cupy.cuda.using_allocator(other):
                assert cupy.cuda.get_allocator() is other
            assert cupy.cuda.get_allocator() is alloc
        assert cupy.cuda.get_allocator() is other
    with gcp.using_allocator(alloc):
        with gcp.using_allocator(cupy.cuda.memory.malloc_managed):
            assert cupy.cuda.get_allocator() is cupy.cuda.memory.malloc_managed
        assert cupy.cuda.get_allocator() is alloc
    assert cupy.cuda.get_allocator() == outer


def test_quota_is_a_memory_error(broker):
    alloc, admin = broker
    admin.set_mode("active")
    try:
        admin.set_proportion(alloc.instance(), 0.1)
        cap = admin.instance_info(alloc.instance()).cap
        with pytest.raises(MemoryError):
            alloc(cap + MiB)
        assert live(alloc, alloc.instance()) == 0
    finally:
        admin.set_auto(alloc.instance())
        admin.set_mode("passive")


# ---- c_allocator(): CuPy's CFunctionAllocator over gpb_cupy_* --------------------
#
# CFunctionAllocator.malloc asks CuPy's runtime for the current device, which
# cannot start here; CFunctionAllocatorMemory is what it builds with that
# device (0), so the tests build it themselves: CuPy's own class calls the
# library's functions by address, as on a GPU.


def c_memory(size):
    malloc_fn, free_fn = gcp.c_functions()
    return cupy.cuda.memory.CFunctionAllocatorMemory(size, 0, malloc_fn, free_fn, 0)


def c_live(device=0):
    """The C allocator's live bytes on @device: its own client's figures
    (what it charges, less its leases, plus what is in use inside them)."""
    _, mi = gcp.c_mem_info(device)
    return mi.used - mi.leased + mi.in_use


@pytest.fixture(scope="module")
def c_alloc(fake_daemon):
    a = gcp.c_allocator(name="cupy-c-test", group="cupy-c")
    with gpubroker.Client(fake_daemon.socket, "observer") as admin:
        yield a, admin


def test_c_allocator_is_cupys(c_alloc):
    a, admin = c_alloc
    assert isinstance(a, cupy.cuda.memory.CFunctionAllocator)
    assert gcp.c_allocator() is a  # one per process
    inst, _ = gcp.c_mem_info(0)
    info = admin.instance_info(inst)
    assert info.name == "cupy-c-test" and info.device == admin.device_index(FAKE_UUID)


def test_c_memory_is_broker_memory(c_alloc):
    a, admin = c_alloc
    inst, _ = gcp.c_mem_info(0)
    base = c_live()
    used0 = admin.instance_info(inst).used
    mems = [c_memory(MiB) for _ in range(4)]
    assert all(m.ptr > 0 and m.size == MiB and m.device_id == 0 for m in mems)
    assert len({m.ptr for m in mems}) == 4
    assert c_live() == base + 4 * MiB
    # The daemon charges the instance at least that (its leases whole), as
    # another connection reads it.
    assert admin.instance_info(inst).used >= max(used0, 4 * MiB)
    ptr = cupy.cuda.MemoryPointer(mems[0], 0)
    assert ptr.ptr == mems[0].ptr and ptr.mem is mems[0]
    del ptr, mems
    gc.collect()
    assert c_live() == base  # CuPy's __dealloc__ called gpb_cupy_free


def test_c_refusal_is_a_memory_error(c_alloc):
    a, admin = c_alloc
    inst, mi = gcp.c_mem_info(0)
    base = c_live()
    with pytest.raises(MemoryError) as e:
        c_memory(mi.cap + MiB)
    assert str(e.value).startswith("gpubroker: ")
    assert c_live() == base
    # The probe c_allocator() makes: a non-NULL param is refused, raised.
    malloc_fn, free_fn = gcp.c_functions()
    with pytest.raises(MemoryError, match="param must be NULL"):
        cupy.cuda.memory.CFunctionAllocatorMemory(1, 1, malloc_fn, free_fn, 0)
    m = c_memory(MiB)  # and the allocator still serves
    assert c_live() == base + MiB
    del m
    gc.collect()
    assert c_live() == base


def test_c_size_zero_is_no_allocation(c_alloc):
    base = c_live()
    m = c_memory(0)
    assert m.ptr == 0 and c_live() == base


def test_c_threads(c_alloc):
    import random
    import threading

    seed = random.randrange(1 << 30)
    print("seed", seed)
    base = c_live()
    failures = []

    def worker(k):
        rng = random.Random(seed + k)
        held = []
        try:
            for _ in range(300):
                if held and rng.random() < 0.5:
                    held.pop(rng.randrange(len(held)))
                else:
                    held.append(c_memory(rng.choice((256, 4096, 65536, MiB))))
        except Exception as e:  # noqa: BLE001 -- reported below
            failures.append(repr(e))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    gc.collect()
    assert not failures, (seed, failures)
    assert c_live() == base, seed
