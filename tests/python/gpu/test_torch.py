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



def test_training_step_figures(gpu):
    """A small training step with the broker's allocator: the figures a
    script logs (gpubroker.torch's memory_allocated and kin, which PyTorch's
    own raise under a pluggable allocator) against the tensors' sizes."""
    out = run("""
import json, torch, gpubroker.torch as gt
gt.enable(name="torch-step-test")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                            torch.nn.Linear(512, 10)).cuda()
params = sum(p.numel() * p.element_size() for p in model.parameters())
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(64, 256, device="cuda")
y = torch.randint(0, 10, (64,), device="cuda")
before = gt.memory_allocated()
for _ in range(3):
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
torch.cuda.synchronize()
st = gt.memory_stats()
print(json.dumps({"params": params, "before": before, "after": gt.memory_allocated(),
                  "peak": gt.max_memory_allocated(), "reserved": gt.memory_reserved(),
                  "allocs": st["allocation.all.allocated"], "loss": float(loss.item())}))
""", gpu)
    # The parameters and the inputs live through the step ...
    assert out["before"] >= out["params"] + 64 * 256 * 4
    # ... the gradients stay (set_to_none is at the next step's start) ...
    assert out["after"] >= out["before"] + out["params"]
    # ... and the activations came and went under the peak.
    assert out["peak"] > out["after"] and out["reserved"] >= out["after"]
    assert out["allocs"] > 10 and out["loss"] == out["loss"]  # not NaN
