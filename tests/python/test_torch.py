"""gpubroker.torch without PyTorch: the gpb_torch_* entry points PyTorch
would call, through ctypes, against the real daemon (sim backend: no CUDA
driver here, so devices are taken by index). The PyTorch test itself is in
gpu/test_torch.py (suite gpu)."""

import json
import os
import signal
import subprocess

import sys

from conftest import child_env, ctl_instances, run_python, wait_until

MiB = 1 << 20
KiB = 1 << 10

PROGRAM = """
import ctypes, json, sys
import gpubroker, gpubroker.torch as gt
lib = gpubroker._lib.lib()
out = {"path": gt.library_path()}
p = lib.gpb_torch_alloc(3 << 20, 0, None)
q = lib.gpb_torch_alloc(256 << 10, 1, None)
out["nonnull"] = bool(p) and bool(q)
# Memory of this process (sim: host memory shared with the daemon).
ctypes.memset(p, 0x5a, 3 << 20)
out["used"] = [gt.memory_info(0).used, gt.memory_info(1).used]
# Device 1's 256 KiB came from a lease (3 MiB on 2 MiB slabs, above a
# quarter of one, is an alloc).
out["leased"] = [gt.memory_info(0).leased, gt.memory_info(1).leased]
out["in_use"] = gt.memory_info(1).in_use
out["instances"] = [gt.instance(0), gt.instance(1)]
out["allocated"] = [gt.memory_allocated(0), gt.memory_allocated(1)]
out["reserved"] = [gt.memory_reserved(0), gt.memory_reserved(1)]
print(json.dumps(out), flush=True)
sys.stdin.readline()                    # the test looks at the daemon
lib.gpb_torch_free(p, 3 << 20, 0, None)
lib.gpb_torch_free3(q, 256 << 10, None)  # PyTorch 2.0-2.2
# Live bytes: what the daemon charges, less the idle leases, plus what is
# in use inside them.
live = lambda m: m.used - m.leased + m.in_use
out = {"after": [live(gt.memory_info(0)), live(gt.memory_info(1))]}
lib.gpb_torch_free(ctypes.c_void_p(0x1000), 16, 0, None)
out["unknown"] = gpubroker.errors.last_error()
out["zero"] = lib.gpb_torch_alloc(0, 0, None)
out["stats"] = [gt.memory_stats(0), gt.memory_stats(1)]
gt.reset_peak_memory_stats(0)
out["peak_reset"] = gt.max_memory_allocated(0)
out["refused"] = lib.gpb_torch_alloc(1 << 40, 0, None)
out["ooms"] = gt.memory_stats(0)["num_ooms"]
print(json.dumps(out), flush=True)
sys.stdin.readline()                    # exits holding nothing
"""


def test_entry_points_one_instance_per_device(daemon):
    env = dict(child_env(), GPUBROKER_SOCKET=daemon.socket, GPUBROKER_TORCH_NAME="torch-py",
               GPUBROKER_TORCH_PROPORTION="0.25", GPUBROKER_TORCH_GROUP="tg")
    proc = subprocess.Popen([sys.executable, "-c", PROGRAM], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        first = json.loads(proc.stdout.readline())
        assert first["nonnull"]
        assert os.path.exists(first["path"])
        assert first["used"][0] >= 3 * MiB and first["used"][1] >= 256 * KiB
        assert first["leased"][0] == 0 and first["leased"][1] > 0 and first["in_use"] == 256 * KiB
        inst0, inst1 = first["instances"]
        assert inst0 != inst1
        # Counted as the blocks come (memory_allocated), and what the
        # daemon charges (memory_reserved: the instance's used).
        assert first["allocated"] == [3 * MiB, 256 * KiB]
        assert first["reserved"] == first["used"]
        rows = {int(r["instance"], 16): r for r in ctl_instances(daemon)}
        for inst, dev in ((inst0, 0), (inst1, 1)):
            row = rows[inst]
            assert (row["name"], row["group"], row["device"], row["proportion"]) == (
                "torch-py", "tg", dev, 0.25), row
        proc.stdin.write("\n")
        proc.stdin.flush()
        second = json.loads(proc.stdout.readline())
        assert second["after"] == [0, 0]
        assert "not from gpb_torch_alloc" in second["unknown"]
        assert second["zero"] is None
        st0, st1 = second["stats"]
        assert st0["allocated_bytes.all.current"] == 0 == st1["allocated_bytes.all.current"]
        assert st0["allocated_bytes.all.peak"] == 3 * MiB
        assert st1["allocated_bytes.all.peak"] == 256 * KiB
        assert st0["allocation.all.allocated"] == 1 == st0["allocation.all.freed"]
        assert st0["active.all.current"] == 0 and st0["num_ooms"] == 0
        assert second["peak_reset"] == 0  # reset to what is allocated now
        assert second["refused"] is None and second["ooms"] == 1
    finally:
        proc.stdin.close()
        assert proc.wait(30) == 0
    # The process's instances went with it.
    assert wait_until(lambda: ctl_instances(daemon) == [])


def test_bad_proportion_and_free_function(daemon):
    r = run_python("import gpubroker, gpubroker.torch as gt\n"
                   "try:\n    gt.memory_info(0)\nexcept gpubroker.errors.InvalidError as e:\n"
                   "    print(e.detail)\n",
                   env={"GPUBROKER_SOCKET": daemon.socket, "GPUBROKER_TORCH_PROPORTION": "1.5"})
    assert r.returncode == 0, r.stderr
    assert "GPUBROKER_TORCH_PROPORTION=1.5" in r.stdout
    import gpubroker.torch as gt

    assert gt.free_function("2.1.2+cu121") == "gpb_torch_cxx_free3"
    assert gt.free_function("2.2.0") == "gpb_torch_cxx_free3"
    assert gt.free_function("2.3.0") == "gpb_torch_cxx_free"
    assert gt.free_function("2.10.0a0+git") == "gpb_torch_cxx_free"


# PyTorch's pluggable allocator ignores what the allocation function returns
# (a NULL became a tensor at address 0 on an H200): libgpubroker-torch's
# entry point throws instead, the C++ exception PyTorch turns into a
# RuntimeError. Called through ctypes, where nothing catches it, the
# exception ends the process: its message is the proof.
THROWER = """
import ctypes, gpubroker.torch as gt
shim = ctypes.CDLL(gt.library_path())
shim.gpb_torch_cxx_alloc.restype = ctypes.c_void_p
shim.gpb_torch_cxx_alloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
shim.gpb_torch_cxx_free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int,
                                    ctypes.c_void_p]
p = shim.gpb_torch_cxx_alloc(1 << 20, 0, None)
used = gt.memory_info(0).used
zero = shim.gpb_torch_cxx_alloc(0, 0, None)  # an empty tensor: NULL, no refusal
shim.gpb_torch_cxx_free(p, 1 << 20, 0, None)
print(bool(p), used >= 1 << 20, zero is None, flush=True)
shim.gpb_torch_cxx_alloc(gt.memory_info(0).device_total + (1 << 30), 0, None)
print("not refused", flush=True)
"""


def test_refusal_is_a_cxx_exception(daemon):
    import gpubroker.torch as gt

    assert os.path.basename(gt.library_path()).startswith("libgpubroker-torch.so")
    r = run_python(THROWER, env={"GPUBROKER_SOCKET": daemon.socket})
    assert r.stdout.split() == ["True", "True", "True"], r.stdout + r.stderr
    assert r.returncode == -signal.SIGABRT, r.stdout + r.stderr
    assert "std::runtime_error" in r.stderr and "gpubroker: " in r.stderr, r.stderr
    # The daemon's reason, not a generic one: the device has no such room.
    assert "out of memory" in r.stderr.lower() or "exceeds" in r.stderr.lower(), r.stderr


def test_reclaimed_at_exit(daemon, client):
    r = run_python("import gpubroker, gpubroker.torch as gt\n"
                   "lib = gpubroker._lib.lib()\n"
                   "assert lib.gpb_torch_alloc(8 << 20, 0, None)\n"
                   "print(gt.memory_info(0).used)\n",
                   env={"GPUBROKER_SOCKET": daemon.socket})
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) >= 8 * MiB
    assert wait_until(lambda: ctl_instances(daemon) == [])
    assert client.request("status")["totals"]["used"] == "0"
