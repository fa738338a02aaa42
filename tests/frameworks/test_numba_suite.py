"""numba-cuda's own test modules (its wheel ships them) on the fake driver,
twice: with Numba's memory manager and through gpubroker.numba. Every test
that passes with Numba's manager passes through the plugin too, but for
Numba's own skips for external memory managers and the differences listed
in DIFFERENT, each with its reason. The rest (kernels, driver calls the fake
lacks) fail both ways and are not the plugin's to fix.

Modules: memory, arrays, contexts, deallocation, host memory, streams and
events, IPC, the array interface (numba-cuda 0.30.4: about 250 tests, 10 s
each way)."""

import json
import os
import subprocess
import sys

from conftest import harness

HERE = os.path.dirname(os.path.abspath(__file__))

MODULES = ["cudadrv." + m for m in (
    "test_cuda_memory", "test_deallocations", "test_context_stack", "test_cuda_ndarray",
    "test_array_attr", "test_emm_plugins", "test_host_alloc", "test_managed_alloc",
    "test_pinned", "test_cuda_array_slicing", "test_reset_device", "test_streams",
    "test_events", "test_cuda_devicerecord", "test_cuda_auto_context", "test_select_device",
    "test_runtime", "test_init")] + ["cudapy." + m for m in (
        "test_cuda_array_interface", "test_ipc", "test_array", "test_device_array_capture")]

#: What passes with Numba's manager and not through the plugin, by design.
DIFFERENT = {
    # device_memory_size() asks cuMemGetAddressRange, which answers the
    # driver's allocation: the broker's slab, larger than the array (as with
    # any pool of sub-allocations, RMM's included); the test memsets that
    # size from the array's address, past the slab's end unless the block
    # is the slab's first (so it passes now and then).
    "numba.cuda.tests.cudadrv.test_host_alloc.TestHostAlloc.test_host_alloc_pinned",
}

#: Numba's own skips when an external memory manager is in use.
EMM_SKIPS = ("Deallocation specific to Numba memory management",
             "Ownership not relevant with external memmgr")


def run(env):
    modules = ["numba.cuda.tests." + m for m in MODULES]
    r = subprocess.run([sys.executable, os.path.join(HERE, "numba_own.py")] + modules,
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout), r.stderr


def test_numba_cudas_own_modules_pass_through_the_plugin(fake_daemon):
    base = harness.child_env()
    base.pop("NUMBA_CUDA_MEMORY_MANAGER", None)
    theirs, _ = run(base)
    ours, why = run(dict(base, NUMBA_CUDA_MEMORY_MANAGER="gpubroker.numba",
                         GPUBROKER_SOCKET=fake_daemon.socket))
    passed = {t for t, o in theirs.items() if o == "pass"}
    assert len(passed) >= 150, "numba-cuda's modules did not run: %d passed" % len(passed)
    lost = sorted(t for t in passed - DIFFERENT
                  if ours.get(t) != "pass"
                  and not any(ours.get(t, "") == "skip: " + s for s in EMM_SKIPS))
    assert not lost, "pass with Numba's manager, not through gpubroker.numba:\n%s\n%s" % (
        "\n".join("%s: %s" % (t, ours.get(t)) for t in lost), why[-6000:])
    # The differences may pass through the plugin too: whether the slab's
    # end lies within the array's reach depends on where the block is.
    assert DIFFERENT <= passed, sorted(DIFFERENT - passed)
    print("numba-cuda's own modules: %d pass with Numba's manager, %d through the plugin"
          % (len(passed), sum(o == "pass" for o in ours.values())))
