"""gpubroker.torch on a real GPU (suite gpu): PyTorch's CUDA tensors come
from the broker, are charged to the process's instance, and go back when
they die; a cap refuses a tensor as PyTorch's out-of-memory error.

Each case runs in a fresh interpreter: PyTorch takes an allocator only
before its first CUDA tensor. Skipped (exit 77 through meson) without
torch, a driver or a device."""

import json

import pytest

torch = pytest.importorskip("torch")

from conftest import run_python  # noqa: E402

MiB = 1 << 20


@pytest.fixture(scope="module")
def gpu(cuda_daemon):
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no CUDA device")
    return cuda_daemon


def run(code, daemon, **env):
    r = run_python(code, env=dict(env, GPUBROKER_SOCKET=daemon.socket))
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_tensors_come_from_the_broker(gpu):
    out = run("""
import gc, json, torch, gpubroker, gpubroker.torch as gt
gt.enable(name="torch-gpu-test")
x = torch.arange(1 << 20, dtype=torch.float32, device="cuda")
used = gt.memory_info().used
s = float((x * 2).sum().item())
with gpubroker.Client() as c:
    name = c.instance_info(gt.instance()).name
del x
gc.collect()
torch.cuda.synchronize()
m = gt.memory_info()  # live bytes: leases are charged whole, in_use is inside them
after = m.used - m.leased + m.in_use
print(json.dumps({"used": used, "sum": s, "name": name, "after": after}))
""", gpu)
    assert out["used"] >= 4 * MiB
    assert out["sum"] == float(sum(range(1 << 20)) * 2)
    assert out["name"] == "torch-gpu-test"
    assert out["after"] == 0


def test_cap_is_out_of_memory(gpu):
    out = run("""
import json, torch, gpubroker, gpubroker.torch as gt
with gpubroker.Client() as admin:
    admin.set_mode("active")
try:
    gt.enable(proportion=0.05)
    cap = gt.memory_info().cap
    x = torch.empty(cap // 2, dtype=torch.uint8, device="cuda")
    try:
        y = torch.empty(cap, dtype=torch.uint8, device="cuda")
        refused = None
    except torch.cuda.OutOfMemoryError as e:
        refused = str(e)
    except RuntimeError as e:
        refused = str(e)
    reason = gpubroker.errors.last_error()
finally:
    with gpubroker.Client() as admin:
        admin.set_mode("passive")
print(json.dumps({"refused": refused, "reason": reason}))
""", gpu)
    # RuntimeError from libgpubroker-torch's exception (PyTorch ignores a
    # NULL from a pluggable allocator: the tensor would be at address 0).
    assert out["refused"] is not None and "gpubroker: " in out["refused"]
    assert "quota" in (out["reason"] + out["refused"]).lower()

