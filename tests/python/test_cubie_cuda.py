"""gpubroker.cubie with the cuda backend, on the fake driver (tests/fakecuda:
host memory behind the driver's calls; proves nothing about a GPU): a
queued request's arrays are device memory, DeviceArray objects whose
__cuda_array_interface__ is the allocation (Numba kept out, as where it is
not installed), and to_device/from_device copy through the library."""

import json
import os
import subprocess
import sys

import pytest

from conftest import Daemon, child_env

pytest.importorskip("numpy")

PROGRAM = r"""
import json, sys
sys.modules["numba"] = None           # the DeviceArray path, as without Numba
import numpy as np
import gpubroker.cubie as gc

mm = gc.MemoryManager(socket=sys.argv[1], name="cubie-cuda")
class Solver:
    pass
s, got = Solver(), []
mm.register(s, allocation_ready_hook=got.append)
mm.queue_request(s, {"x": gc.ArrayRequest(np.float32, (4, 8, 100)),
                     "p": gc.ArrayRequest(np.float64, (16,), memory="pinned")})
mm.allocate_queue(s)
x, p = got[0].arr["x"], got[0].arr["p"]
alloc = x.allocation
cai = x.__cuda_array_interface__
src = mm.create_host_array((4, 8, 100), np.float32, like=np.arange(3200, dtype=np.float32)
                           .reshape(4, 8, 100))
mm.to_device(s, [src], [x])
back = mm.create_host_array((4, 8, 100), np.float32, "host")
mm.from_device(s, [x], [back])
# CUDA completes a copy into pageable memory before returning; main's fake
# driver runs it at the next synchronisation, so synchronise (harmless on
# a GPU): the device's primary context, which the library mapped into.
import ctypes
cu = ctypes.CDLL("libcuda.so.1")
dev, ctx = ctypes.c_int(), ctypes.c_void_p()
assert cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
assert cu.cuCtxPushCurrent_v2(ctx) == 0 and cu.cuCtxSynchronize() == 0
cu.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))
cu.cuDevicePrimaryCtxRelease_v2(dev)
d = mm.allocate((10,), np.int32, "device", instance=s)
print(json.dumps({
    "type": type(x).__name__, "shape": list(cai["shape"]), "typestr": cai["typestr"],
    "ptr_is_allocation": cai["data"][0] == alloc.ptr, "kind": alloc.kind,
    "roundtrip": bool((back == src).all()), "pinned_type": type(p).__name__,
    "direct": [type(d).__name__, d.nbytes],
    "used": mm.client.instance_info(mm.instance_id(s)).used,
}))
"""


@pytest.fixture
def cuda_fake(monkeypatch, tmp_path):
    lib = os.environ.get("GPB_FAKECUDA_DIR")
    if not lib:
        pytest.skip("built without cuda.h: no fake driver")
    monkeypatch.setenv("LD_LIBRARY_PATH",
                       os.pathsep.join([lib] + [p for p in [os.environ.get("LD_LIBRARY_PATH")]
                                                if p]))
    monkeypatch.setenv("FAKECUDA_DIR", str(tmp_path))
    d = Daemon(backend="cuda").start()
    yield d
    rc = d.stop()
    d.cleanup()
    assert rc == 0


def test_device_arrays_on_the_cuda_backend(cuda_fake):
    r = subprocess.run([sys.executable, "-c", PROGRAM, cuda_fake.socket], env=child_env(),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["type"] == "DeviceArray" and out["kind"] == "claim"
    assert out["shape"] == [4, 8, 100] and out["typestr"] == "<f4"
    assert out["ptr_is_allocation"]
    assert out["roundtrip"]
    assert out["pinned_type"] == "ndarray"  # host memory: NumPy on every backend
    assert out["direct"] == ["DeviceArray", 40]
    assert out["used"] >= 4 * 8 * 100 * 4 + 40
