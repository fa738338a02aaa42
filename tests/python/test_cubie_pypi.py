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
    assert (set(seed) & theirs) <= ours
    # set_allocator is seed 001's; cubie 0.17 dropped it.
    assert "set_allocator" not in theirs
