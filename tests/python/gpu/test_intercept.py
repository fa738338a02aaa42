"""Unmodified programs under gpubroker-run on a real GPU (suite gpu): the C
programs of tests/intercept (linked with -lcuda, and through dlopen and
cuGetProcAddress), numba-cuda without its plugin, PyTorch and CuPy with
their own allocators: each is told its cap, refused past it as the driver
refuses, and charged to its instance; kill -9 gives everything back.

The wrapper, the interposer and the programs are found beside the daemon
($GPUBROKERD's build tree: the bundle's on a GPU machine). Skipped (exit 77
through meson) without a driver or a device; each framework's case without
that framework."""

import json
import os
import signal
import subprocess
import sys

import pytest

from conftest import child_env, env_path, wait_until

MiB = 1 << 20


def build_path(*parts):
    top = os.path.dirname(os.path.dirname(env_path("GPUBROKERD")))
    return os.path.join(top, *parts)


RUN = build_path("client", "intercept", "gpubroker-run")
LIB = build_path("client", "intercept", "libgpubroker-intercept.so")
PROGRAMS = {"direct": build_path("tests", "intercept", "intercept-direct"),
            "procaddr": build_path("tests", "intercept", "intercept-procaddr")}


def ctl(daemon, *args):
    r = subprocess.run([env_path("GPUBROKERCTL"), "--socket", daemon.socket, "--output", "json",
                        *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout) if r.stdout.strip().startswith("{") else r.stdout


def instances(daemon, name):
    return [i for i in ctl(daemon, "instances")["instances"] if i["name"] == name]


def device_used(daemon):
    return int(ctl(daemon, "devices")["devices"][0]["used"])


def capacity(daemon):
    return int(ctl(daemon, "devices")["devices"][0]["free"]) + device_used(daemon)


@pytest.fixture(scope="module")
def gpu(cuda_daemon):
    for path in [RUN, LIB] + list(PROGRAMS.values()):
        if not os.path.exists(path):
            pytest.fail("%s is not built" % path, pytrace=False)
    ctl(cuda_daemon, "set-mode", "active")
    yield cuda_daemon
    ctl(cuda_daemon, "set-mode", "passive")


def run(daemon, *args, options=(), timeout=300):
    env = child_env()
    env["GPUBROKER_RUN_LIBRARY"] = LIB
    return subprocess.run([RUN, "--socket", daemon.socket, *options, "--", *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


def near(a, b):
    return abs(a - b) <= 2 * MiB  # the daemon's cap rounds to its granule


@pytest.mark.parametrize("kind", ["direct", "procaddr"])
def test_c_program(gpu, kind):
    before = device_used(gpu)
    r = run(gpu, PROGRAMS[kind], "basic", options=("--proportion", "0.25", "--name", "c-" + kind))
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr
    total = int([ln for ln in r.stdout.splitlines() if ln.startswith("total")][0].split()[1])
    assert near(total, 0.25 * capacity(gpu)), (total, capacity(gpu))
    assert wait_until(lambda: device_used(gpu) == before, timeout=20)


def test_kill_reclaims(gpu):
    before = device_used(gpu)
    env = child_env()
    env["GPUBROKER_RUN_LIBRARY"] = LIB
    p = subprocess.Popen([RUN, "--socket", gpu.socket, "--proportion", "0.25", "--name",
                          "c-hold", "--", PROGRAMS["direct"], "hold", str(64 * MiB)],
                         env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "holding", p.stderr.read()
        (inst,) = instances(gpu, "c-hold")
        assert int(inst["used"]) >= 64 * MiB
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
    assert wait_until(lambda: device_used(gpu) == before, timeout=20)


def test_cap_is_exact(gpu):
    r = run(gpu, PROGRAMS["procaddr"], "over", options=("--proportion", "0.05"))
    assert r.returncode == 0, r.stdout + r.stderr
    words = [ln for ln in r.stdout.splitlines() if ln.startswith("refused after")][0].split()
    held, total = int(words[2]), int(words[-1])
    assert held <= total < held + MiB, (held, total)


FRAMEWORK = {
    "numba": r"""
import json
import numpy as np
from numba import cuda
ctx = cuda.current_context()
assert type(ctx.memory_manager).__name__ == "NumbaCUDAMemoryManager"
free, total = ctx.get_memory_info()
@cuda.jit
def twice(a):
    i = cuda.grid(1)
    if i < a.size:
        a[i] *= 2
a = cuda.to_device(np.arange(1 << 20, dtype=np.float32))
twice.forall(a.size)(a)
ok = bool((a.copy_to_host() == 2 * np.arange(1 << 20, dtype=np.float32)).all())
try:
    cuda.device_array(total + (64 << 20), dtype=np.uint8)
    refused = None
except Exception as e:
    refused = str(e)
print(json.dumps({"total": total, "ok": ok, "refused": refused}))
""",
    "torch": r"""
import json, torch
free, total = torch.cuda.mem_get_info()
x = torch.randn(2048, 2048, device="cuda")
y = (x @ x).sum().item()
ok = y == y
try:
    torch.empty(total + (64 << 20), dtype=torch.uint8, device="cuda")
    refused = None
except torch.OutOfMemoryError as e:
    refused = str(e)
print(json.dumps({"total": total, "ok": ok, "refused": refused}))
""",
    "cupy": r"""
import json, cupy
free, total = cupy.cuda.runtime.memGetInfo()
a = cupy.arange(1 << 20, dtype=cupy.float32)
ok = bool(((a * 2).get() == 2 * a.get()).all())
try:
    cupy.empty(total + (64 << 20), dtype=cupy.uint8)
    refused = None
except cupy.cuda.memory.OutOfMemoryError as e:
    refused = str(e)
print(json.dumps({"total": total, "ok": ok, "refused": refused}))
""",
}
MODULES = {"numba": "numba.cuda", "torch": "torch", "cupy": "cupy"}


@pytest.mark.parametrize("name", ["numba", "torch", "cupy"])
def test_framework_unmodified(gpu, name):
    """The framework with its own allocator, nothing of gpubroker imported:
    told the cap, computing in broker memory, refused past the cap."""
    pytest.importorskip(MODULES[name])
    before = device_used(gpu)
    r = run(gpu, sys.executable, "-c", FRAMEWORK[name],
            options=("--proportion", "0.25", "--name", "fw-" + name))
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert near(out["total"], 0.25 * capacity(gpu)), out
    assert out["ok"] and out["refused"], out
    assert wait_until(lambda: device_used(gpu) == before, timeout=30)
