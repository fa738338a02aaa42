"""Unmodified programs under gpubroker-run (libgpubroker-intercept.so) on
the fake driver: the C programs of tests/intercept (linked with -lcuda, and
through dlopen and cuGetProcAddress) and numba-cuda without the EMM plugin.

The daemon runs in active mode (caps enforced). What a program is told
(cuMemGetInfo) is checked against what the daemon says of its instance
(gpubrokerctl), and what it holds against what the daemon charges."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import MiB, harness

CTL = os.environ.get("GPUBROKERCTL")
RUN = os.environ.get("GPUBROKER_RUN")
PROGRAMS = {"direct": os.environ.get("GPB_INTERCEPT_DIRECT"),
            "procaddr": os.environ.get("GPB_INTERCEPT_PROCADDR")}

pytestmark = pytest.mark.skipif(not RUN or not all(PROGRAMS.values()),
                                reason="run through meson test (frameworks-intercept)")


def ctl(daemon, *args):
    r = subprocess.run([CTL, "--socket", daemon.socket, "--output", "json", *args],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout) if r.stdout.strip().startswith("{") else r.stdout


def instances(daemon, name):
    return [i for i in ctl(daemon, "instances")["instances"] if i["name"] == name]


def clients(daemon, name):
    return [c for c in ctl(daemon, "clients")["clients"] if c["name"] == name]


def device_used(daemon):
    return int(ctl(daemon, "devices")["devices"][0]["used"])


@pytest.fixture(scope="module")
def daemon(fake_daemon):
    ctl(fake_daemon, "set-mode", "active")
    return fake_daemon


def wrapped(daemon, *args, options=(), env=None, **kw):
    """The argument list and environment of `gpubroker-run OPTIONS -- ARGS`."""
    e = dict(os.environ)
    e.update(env or {})
    return [RUN, "--socket", daemon.socket, *options, "--", *args], e


def run(daemon, *args, options=(), env=None, timeout=120):
    cmd, e = wrapped(daemon, *args, options=options, env=env)
    return subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=timeout)


def start(daemon, *args, options=(), env=None):
    cmd, e = wrapped(daemon, *args, options=options, env=env)
    return subprocess.Popen(cmd, env=e, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def expect_line(proc, want, timeout=60):
    """Reads @proc's stdout up to a line @want; fails with its stderr."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.strip() == want:
            return
    proc.kill()
    pytest.fail("no %r from the program; stderr: %s" % (want, proc.stderr.read()))


def figures(out):
    """'total T free F' of a program's output."""
    for line in out.splitlines():
        if line.startswith("total "):
            words = line.split()
            return int(words[1]), int(words[3])
    raise AssertionError("no figures in %r" % out)


def gone_from(daemon, name):
    return harness.wait_until(lambda: not clients(daemon, name) and not instances(daemon, name),
                              timeout=20)


@pytest.mark.parametrize("kind", ["direct", "procaddr"])
def test_c_program_under_the_broker(daemon, kind):
    """Every entry point once (intercept-prog.c's basic): allocations usable
    and freed, ranges of the block, pitch, stream order, the cap refusing,
    cuMemCreate and cuIpcGetMemHandle refused; cuMemGetInfo says the cap the
    daemon gives the instance; nothing left after exit."""
    name = "basic-" + kind
    before = device_used(daemon)
    r = run(daemon, PROGRAMS[kind], "basic", options=("--proportion", "0.25", "--name", name))
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr
    assert "cuMemCreate refused" in r.stderr and "GPUBROKER_RUN_UNCOUNTED=allow" in r.stderr
    total, free = figures(r.stdout)
    capacity = int(ctl(daemon, "devices")["devices"][0]["free"]) + before
    assert total == int(0.25 * capacity) or abs(total - 0.25 * capacity) < 4096, (total, capacity)
    assert free == total  # nothing of its own held yet
    assert gone_from(daemon, name)
    assert device_used(daemon) == before


@pytest.mark.parametrize("kind", ["direct", "procaddr"])
def test_operators_see_it_and_kill_reclaims(daemon, kind):
    """A running program is a client named after it with its instance
    (--name, else the program's name); SIGKILL gives everything back."""
    before = device_used(daemon)
    p = start(daemon, PROGRAMS[kind], "hold", str(8 * MiB), options=("--proportion", "0.25"))
    try:
        expect_line(p, "holding")
        name = os.path.basename(PROGRAMS[kind])
        (c,) = clients(daemon, name)
        assert c["pid"] == p.pid and c["instances"] == 1
        (inst,) = instances(daemon, name)
        assert float(inst["proportion"]) == 0.25 and int(inst["used"]) >= 8 * MiB
        assert device_used(daemon) >= before + 8 * MiB
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
    assert gone_from(daemon, os.path.basename(PROGRAMS[kind]))
    assert harness.wait_until(lambda: device_used(daemon) == before, timeout=20)


def test_cap_is_exact(daemon):
    """1 MiB blocks until refused: the refusal comes at the cap the program
    is told, to the MiB, as CUDA_ERROR_OUT_OF_MEMORY."""
    r = run(daemon, PROGRAMS["procaddr"], "over", options=("--proportion", "0.25"))
    assert r.returncode == 0, r.stdout + r.stderr
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("refused after")][0]
    held, total = int(line.split()[2]), int(line.split()[-1])
    assert held <= total < held + MiB, (held, total)


def test_two_programs_share_by_proportion(daemon):
    """0.75 and 0.25 side by side: each is told its own cap, in that ratio."""
    big = start(daemon, PROGRAMS["direct"], "hold", str(MiB),
                options=("--proportion", "0.75", "--name", "share-big"))
    try:
        expect_line(big, "holding")
        r = run(daemon, PROGRAMS["procaddr"], "basic",
                options=("--proportion", "0.25", "--name", "share-small"))
        assert r.returncode == 0, r.stdout + r.stderr
        small_total, _ = figures(r.stdout)
        (inst,) = instances(daemon, "share-big")
        assert abs(int(inst["cap"]) - 3 * small_total) <= 4096, (inst["cap"], small_total)
    finally:
        big.stdin.write("\n")
        big.stdin.flush()
        assert big.wait(timeout=30) == 0, big.stderr.read()


@pytest.mark.parametrize("mode", [["threads", "4"], ["fork"]], ids=["threads", "fork"])
def test_threads_and_fork(daemon, mode):
    """Four threads allocating at once; a forked child allocating its own
    (it connects afresh: the parent's connection is not its own)."""
    before = device_used(daemon)
    r = run(daemon, PROGRAMS["direct"], *mode, options=("--proportion", "0.25"))
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr
    assert harness.wait_until(lambda: device_used(daemon) == before, timeout=20)


@pytest.mark.parametrize("kind", ["direct", "procaddr"])
def test_memory_outside_the_policy(daemon, kind):
    """cuMemCreate is refused (CUDA_ERROR_NOT_SUPPORTED, 801) with a line
    naming the setting, and let through with it; a pool of the program's
    own (cuMemAllocFromPoolAsync) is served by the broker."""
    name = "create-" + kind
    r = run(daemon, PROGRAMS[kind], "create", options=("--name", name))
    assert r.returncode == 0 and "cuMemCreate 801" in r.stdout, r.stdout + r.stderr
    assert r.stderr.count("cuMemCreate refused") == 1
    r = run(daemon, PROGRAMS[kind], "create", options=("--name", name),
            env={"GPUBROKER_RUN_UNCOUNTED": "allow"})
    assert r.returncode == 0 and "cuMemCreate 0" in r.stdout, r.stdout + r.stderr
    assert "refused" not in r.stderr


@pytest.mark.parametrize("kind", ["direct", "procaddr"])
def test_dlsym_special_handles(daemon, kind):
    """dlsym(RTLD_NEXT) and dlsym(RTLD_DEFAULT) from the program answer as
    glibc does without the interposer (both are relative to their caller,
    which the interposer stands between)."""
    r = run(daemon, PROGRAMS[kind], "dl", options=("--proportion", "0.25"))
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr


def test_no_daemon_fails_clearly_unless_allowed(daemon, tmp_path):
    missing = str(tmp_path / "no.sock")
    cmd = [RUN, "--socket", missing, "--", PROGRAMS["direct"], "hold", str(MiB)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 1 and "cuInit 3" in r.stdout  # CUDA_ERROR_NOT_INITIALIZED
    assert "cannot reach gpubrokerd at " + missing in r.stderr
    assert "GPUBROKER_RUN_UNBROKERED=1" in r.stderr
    cmd.insert(3, "--unbrokered-ok")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 0 and "holding" in r.stdout, r.stdout + r.stderr
    assert "running unbrokered" in r.stderr


def test_daemon_gone_mid_run(tmp_path):
    """The daemon killed under a running program: once the library learns of
    it (what its leases hold needs no word with the daemon), allocations
    fail as out of memory, with one line on stderr; its frees succeed."""
    d = harness.Daemon(backend="cuda").start()
    try:
        cmd = [RUN, "--socket", d.socket, "--", PROGRAMS["procaddr"], "gone"]
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        expect_line(p, "ready")
        d.kill()
        p.stdin.write("\n")
        p.stdin.flush()
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0 and out.strip().endswith("ok"), out + err
        assert err.count("gpubrokerd is gone") == 1, err
        served = int([ln for ln in out.splitlines() if ln.startswith("served")][0].split()[1])
        assert served < 64, out  # no more than the leases it held
    finally:
        d.cleanup()


def test_wrapper_usage(daemon):
    r = subprocess.run([RUN, "--proportion", "1.5", "--", "true"], capture_output=True, text=True)
    assert r.returncode == 2 and "a proportion in (0, 1]" in r.stderr
    r = subprocess.run([RUN], capture_output=True, text=True)
    assert r.returncode == 2 and "no program" in r.stderr
    r = subprocess.run([RUN, "--frobnicate", "--", "true"], capture_output=True, text=True)
    assert r.returncode == 2 and "unknown option" in r.stderr
    r = subprocess.run([RUN, "--socket", daemon.socket, "--", "sh", "-c", "echo $LD_PRELOAD"],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "libgpubroker-intercept.so" in r.stdout


NUMBA = r"""
import json, sys
import numpy as np
from numba import cuda
ctx = cuda.current_context()
assert type(ctx.memory_manager).__name__ == "NumbaCUDAMemoryManager"  # not the plugin
free, total = ctx.get_memory_info()
a = cuda.to_device(np.arange(100000, dtype=np.float32))
b = cuda.device_array(100000, dtype=np.float32)
b.copy_to_device(a)
assert (b.copy_to_host() == np.arange(100000, dtype=np.float32)).all()
free2, _ = ctx.get_memory_info()
try:
    cuda.device_array(total + (1 << 20), dtype=np.uint8)
    refused = None
except Exception as e:
    refused = "%s: %s" % (type(e).__name__, e)
print(json.dumps({"free": free, "total": total, "free2": free2, "refused": refused}))
sys.stdout.flush()
if sys.argv[1:] == ["wait"]:
    sys.stdin.readline()
"""


def numba_figures(out):
    return json.loads([ln for ln in out.splitlines() if ln.startswith("{")][-1])


def test_numba_cuda_without_the_plugin(daemon, tmp_path):
    """numba-cuda 0.30 reaches the driver through cuda-bindings and
    cuGetProcAddress: under the wrapper its arrays are the broker's,
    get_memory_info says the cap, past it is out of memory, and nothing is
    left after exit."""
    before = device_used(daemon)
    r = run(daemon, sys.executable, "-c", NUMBA,
            options=("--proportion", "0.25", "--name", "numba-plain"), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    f = numba_figures(r.stdout)
    capacity = int(ctl(daemon, "devices")["devices"][0]["free"]) + before
    assert abs(f["total"] - 0.25 * capacity) < 4096, (f, capacity)
    assert f["free"] <= f["total"] and f["free2"] <= f["free"] - 2 * 400000
    assert f["refused"] and "CUDA_ERROR_OUT_OF_MEMORY" in f["refused"], f
    assert gone_from(daemon, "numba-plain")
    assert device_used(daemon) == before


def test_two_numba_processes_quarter_and_three_quarters(daemon):
    """Two numba-cuda processes at 0.25 and 0.75, alive together: each is
    told its share, and the daemon charges each its arrays."""
    procs = {}
    try:
        for prop in ("0.25", "0.75"):
            cmd, e = wrapped(daemon, sys.executable, "-c", NUMBA, "wait",
                             options=("--proportion", prop, "--name", "numba-" + prop))
            procs[prop] = subprocess.Popen(cmd, env=e, stdin=subprocess.PIPE,
                                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                           text=True)
        totals = {}
        for prop, p in procs.items():
            line = p.stdout.readline()
            assert line.startswith("{"), line + p.stderr.read()
            totals[prop] = json.loads(line)["total"]
            (inst,) = instances(daemon, "numba-" + prop)
            assert int(inst["cap"]) == totals[prop]
            assert int(inst["used"]) >= 2 * 400000
        assert abs(totals["0.75"] - 3 * totals["0.25"]) <= 4096, totals
    finally:
        for p in procs.values():
            p.stdin.write("\n")
            p.stdin.flush()
        for p in procs.values():
            assert p.wait(timeout=60) == 0, p.stderr.read()
