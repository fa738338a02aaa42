"""gpubroker.cubie against cubie itself (PyPI, pinned in
requirements-cubie.txt, in a virtual environment of its own: cubie needs
numpy 2, Debian's python3 has 1.24): the facade's ArrayRequest takes every
set of arguments cubie's takes, with the same fields, and ArrayResponse
likewise; and cubie's MemoryManager has every name the facade offers.

The environment is made on first use (pip; a minute) and remade only when
requirements-cubie.txt changes. Without it, and when pip cannot install it
(no network), the test skips saying why; under tools/test.sh
(GPB_TEST_PACKAGES=installed) it fails instead."""

import fcntl
import filecmp
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import HERE, child_env, daemon_env

REQUIREMENTS = os.path.join(HERE, "requirements-cubie.txt")

# (positional arguments, keyword arguments) as source, evaluated with
# numpy as np on both sides.
CASES = [
    ("np.float64, (100, 4, 1)", ""),
    ("np.float32", ""),
    ("np.int32, (7,)", ""),
    ("", "dtype=np.float32, shape=(10, 3, 5), memory='pinned', chunk_axis_index=0, "
         "unchunkable=True, total_runs=5"),
    ("np.float64, (4, 4, 4096), 'device', 2, False, 4096", ""),
    ("np.float64", "chunk_axis_index=None"),
    ("np.float64", "shape=(1, 1, 1), total_runs=1"),
    ("np.float64", "shape=(), unchunkable=False"),
    ("np.float64, (2, 3)", "chunk_axis_index=5"),
    # What cubie refuses (the facade refuses some of it too, see below).
    ("np.float64", "total_runs=0"),
    ("np.float64", "chunk_axis_index=-1"),
    ("np.float64", "unchunkable='yes'"),
    ("np.float64", "memory='texture'"),
    ("np.float64", "shape=(2, 'a')"),
    ("np.float16", ""),
    ("np.float64", "memory='managed'"),
    ("np.float64", "shape=[2, 3]"),
]

PROBE = r"""
import json, sys
import numpy as np
from %s import ArrayRequest, ArrayResponse
out = []
for args, kw in json.loads(sys.argv[1]):
    try:
        r = eval("ArrayRequest(%%s%%s%%s)" %% (args, ", " if args and kw else "", kw))
    except Exception as e:
        out.append({"error": type(e).__name__})
        continue
    out.append({"dtype": np.dtype(r.dtype).name, "shape": list(r.shape), "memory": r.memory,
                "chunk_axis_index": r.chunk_axis_index, "unchunkable": r.unchunkable,
                "total_runs": r.total_runs})
resp = ArrayResponse(arr={}, chunks=2, chunk_length=50, chunked_shapes={"x": (50, 3)})
default = ArrayResponse()
print(json.dumps({"requests": out,
                  "response": [resp.chunks, resp.chunk_length, list(resp.chunked_shapes["x"]),
                               resp.arr, default.chunks, default.chunk_length, default.arr,
                               default.chunked_shapes]}))
"""


def missing(why):
    if os.environ.get("GPB_TEST_PACKAGES") == "installed":
        pytest.fail("cubie: %s, although tools/test.sh says every package is installed" % why)
    pytest.skip("cubie: %s" % why)


@pytest.fixture(scope="module")
def cubie_python():
    venv = os.environ.get("GPB_CUBIE_VENV")
    if not venv:
        pytest.fail("GPB_CUBIE_VENV is not set (run through meson test)", pytrace=False)
    python = os.path.join(venv, "bin", "python")
    stamp = os.path.join(venv, "requirements-cubie.txt")
    os.makedirs(os.path.dirname(venv), exist_ok=True)
    env = daemon_env()  # without LD_PRELOAD of libasan
    env.pop("PYTHONPATH", None)
    with open(venv + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one maker at a time
        if not (os.path.exists(python) and os.path.exists(stamp)
                and filecmp.cmp(REQUIREMENTS, stamp, shallow=False)):
            shutil.rmtree(venv, ignore_errors=True)
            r = subprocess.run(["/usr/bin/python3", "-m", "venv", venv], env=env,
                               capture_output=True, text=True, timeout=120)
            if r.returncode != 0:
                missing("python3 -m venv failed (python3-venv?): %s" % r.stderr.strip())
            r = subprocess.run([python, "-m", "pip", "install", "--quiet",
                                "--disable-pip-version-check", "--no-input", "-r", REQUIREMENTS],
                               env=env, capture_output=True, text=True, timeout=600)
            if r.returncode != 0:
                missing("pip could not install %s: %s" % (
                    REQUIREMENTS, (r.stderr.strip().splitlines() or ["?"])[-1]))
            shutil.copyfile(REQUIREMENTS, stamp)  # last: a venv without it is remade
    return python, env


def probe(python, env, module):
    r = subprocess.run([python, "-c", PROBE % module, json.dumps(CASES)], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_array_request_accepts_what_cubie_accepts(cubie_python):
    python, env = cubie_python
    theirs = probe(python, env, "cubie.memory.array_requests")
    ours = probe(sys.executable, child_env(), "gpubroker.cubie")
    accepted = 0
    for case, t, o in zip(CASES, theirs["requests"], ours["requests"]):
        if "error" not in t:
            accepted += 1
            assert o == t, "ArrayRequest(%s; %s): cubie %r, gpubroker.cubie %r" % (case + (t, o))
        elif "error" in o:
            # Refused by both: the same class of exception.
            assert o["error"] == t["error"] or {o["error"], t["error"]} <= {
                "TypeError", "ValueError"}, (case, t, o)
    assert accepted == 9
    # What cubie refuses and the facade takes (documented in docs/cubie.md):
    # float16, "managed" (refused later, by queue_request/allocate), a list
    # as a shape.
    wider = [c for c, t, o in zip(CASES, theirs["requests"], ours["requests"])
             if "error" in t and "error" not in o]
    assert [c[1] for c in wider] == ["", "memory='managed'", "shape=[2, 3]"], wider
    assert theirs["response"] == ours["response"]


def test_the_manager_has_cubies_names(cubie_python):
    """Every public name of seed 001's MemoryManager that cubie 0.17 still
    has, the facade has too."""
    python, env = cubie_python
    seed = ["register", "proportion", "cap", "manual_pool_proportion", "auto_pool_proportion",
            "set_limit_mode", "set_manual_proportion", "set_manual_limit_mode",
            "set_auto_limit_mode", "get_stream_group", "change_stream_group", "is_grouped",
            "get_available_memory", "queue_request", "allocate_queue", "get_chunk_parameters",
            "compute_chunked_shapes", "allocate", "allocate_all", "create_host_array", "free",
            "free_all", "invalidate_all", "to_device", "from_device", "get_memory_info",
            "set_allocator", "get_stream", "sync_stream", "reinit_streams"]
    r = subprocess.run([python, "-c", "import json, cubie.memory.mem_manager as m; "
                        "print(json.dumps(sorted(n for n in dir(m.MemoryManager) "
                        "if not n.startswith('_'))))"], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    theirs = set(json.loads(r.stdout))
    import gpubroker.cubie as gc

    ours = {n for n in dir(gc.MemoryManager) if not n.startswith("_")}
    assert set(seed) <= ours
    # set_allocator is seed 001's; cubie 0.17 dropped it.
    assert "set_allocator" not in theirs


def test_the_manager_takes_cubies_calls(cubie_python, daemon):
    """Every public name of cubie 0.17's MemoryManager (what pip install
    cubie gives) is the facade's (a method, a property or an attribute of
    an instance), and each method takes every parameter cubie's takes, by
    name; this python has no cubie, so none is inherited from it."""
    python, env = cubie_python
    r = subprocess.run([python, "-c", "import inspect, json, cubie.memory.mem_manager as m\n"
                        "out = {}\n"
                        "for n in dir(m.MemoryManager):\n"
                        "    a = getattr(m.MemoryManager, n)\n"
                        "    if not n.startswith('_'):\n"
                        "        out[n] = [p for p in inspect.signature(a).parameters "
                        "if p != 'self'] if callable(a) else None\n"
                        "print(json.dumps(out))"], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    theirs = json.loads(r.stdout)
    import inspect

    import gpubroker.cubie as gc

    with gc.MemoryManager(socket=daemon.socket, pinned_max_bytes=1 << 20,
                          allocation_granule_bytes=1 << 21) as mm:
        assert mm.pinned_max_bytes == 1 << 20 and mm.allocation_granule_bytes == 1 << 21
        missing = [n for n in theirs if not hasattr(mm, n)]
        assert not missing, missing
        for name, params in theirs.items():
            if params is None:
                continue
            ours = inspect.signature(getattr(mm, name)).parameters
            assert set(params) <= set(ours), (name, params, list(ours))
    assert issubclass(gc.NoCudaDeviceError, RuntimeError)


# cubie 0.17's own solver, under Numba's CUDA simulator (device arrays are
# NumPy arrays there, which the sim backend's shared memory is), with the
# facade as its memory_manager or with cubie's own.
SOLVE = r"""
import json, os, sys
os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
import numpy as np
from cubie import create_ODE_system, solve_ivp
n = 4
system = create_ODE_system("dx = -k*x\ndy = k*x - 0.1*y", states={"x": 1.0, "y": 0.0},
                           parameters={"k": 0.5})
kw, events, registered = {}, [], []
if sys.argv[1] != "cubie":
    import gpubroker.cubie as gc
    mm = gc.MemoryManager(socket=sys.argv[1], name="cubie-solve")
    ready, register = mm._ready, mm.register
    def spy_ready(ev):
        events.append(int(ev.data["chunks"]))
        return ready(ev)
    def spy_register(instance, *a, **k):
        registered.append(type(instance).__name__)
        return register(instance, *a, **k)
    mm._ready, mm.register = spy_ready, spy_register
    kw = {"memory_manager": mm, "mem_proportion": float(sys.argv[2])}
# Every step saved (sys.argv[3]): arrays large enough to chunk on a tiny cap.
if len(sys.argv) > 3:
    kw["save_every"] = 0.01
res = solve_ivp(system, y0={"x": np.linspace(0.5, 2.0, n), "y": np.zeros(n)},
                parameters={"k": np.linspace(0.1, 1.0, n)}, method="euler", duration=1.0,
                dt=0.01, **kw)
state = np.asarray(res.state, dtype=np.float64)
print(json.dumps({"shape": list(state.shape), "state": state.ravel().tolist(),
                  "events": events, "registered": registered}))
"""


def test_cubies_own_solver_through_the_facade(cubie_python, daemon, client, tmp_path):
    """cubie 0.17's solve_ivp with gpubroker.cubie's MemoryManager, in two
    processes at once, each held to half the device by the daemon (active
    mode): the same results, value for value, as the same solve with
    cubie's own manager; cubie's solver and array managers registered
    through the facade and took their arrays from the daemon's events."""
    python, _ = cubie_python
    if "libasan" in os.environ.get("LD_PRELOAD", ""):
        # The ASan build's libgpubroker needs libasan loaded first, and
        # with it loaded cubie's MLIR library refuses to load (it is
        # dlopened with RTLD_DEEPBIND): the normal build runs this.
        pytest.skip("cubie's numba_cuda_mlir cannot load beside the ASan runtime")
    env = child_env()  # gpubroker importable, the library
    # cubie writes the code it generates under the working folder.
    ref = subprocess.run([python, "-c", SOLVE, "cubie"], env=env, capture_output=True,
                         text=True, timeout=300, cwd=tmp_path)
    assert ref.returncode == 0, ref.stderr
    want = json.loads(ref.stdout)
    client.set_mode("active")
    try:
        procs = [subprocess.Popen([python, "-c", SOLVE, daemon.socket, "0.5"], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  cwd=tmp_path)
                 for _ in range(2)]
        outs = [p.communicate(timeout=300) for p in procs]
    finally:
        client.set_mode("passive")
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        got = json.loads(out)
        assert got["shape"] == want["shape"]
        assert got["state"] == want["state"]  # value for value
        # The solver and its array managers went through the facade ...
        assert "BatchSolverKernel" in got["registered"] and len(got["registered"]) >= 3
        # ... and their arrays came with the daemon's allocation_ready events.
        assert got["events"] and all(c >= 1 for c in got["events"]), got["events"]
    assert not want["events"] and not want["registered"]  # cubie's own manager


def test_cubies_own_solver_chunks_through_the_facade(cubie_python, tmp_path):
    """A batch too large for its proportion: the daemon cuts it in chunks
    along the run axis, cubie's solver runs them one by one (the solver's
    own registration hears the chunking in an empty response, as cubie's
    manager tells it) and the results are cubie's own, value for value."""
    python, _ = cubie_python
    if "libasan" in os.environ.get("LD_PRELOAD", ""):
        pytest.skip("cubie's numba_cuda_mlir cannot load beside the ASan runtime")
    import gpubroker
    from conftest import Daemon

    env = child_env()
    ref = subprocess.run([python, "-c", SOLVE, "cubie", "0", "saved"], env=env,
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert ref.returncode == 0, ref.stderr
    want = json.loads(ref.stdout)
    # 4 MiB devices: 0.3% of one is 12 KiB, the saved states 26 KiB.
    d = Daemon(args=["--sim-memory", "4MiB"]).start()
    try:
        with gpubroker.Client(d.socket, "admin") as admin:
            admin.set_mode("active")
        r = subprocess.run([python, "-c", SOLVE, d.socket, "0.003", "saved"], env=env,
                           capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        got = json.loads(r.stdout)
    finally:
        d.stop()
        d.cleanup()
    assert got["shape"] == want["shape"] and got["shape"][0] == 101  # every step saved
    assert got["events"] and max(got["events"]) >= 2, got["events"]  # chunked
    assert got["state"] == want["state"]
