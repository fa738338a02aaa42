"""P8b-cupy (issue 29): CuPy's allocation through gpubroker.cupy.c_allocator()
(CuPy's CFunctionAllocatorMemory calling gpb_cupy_malloc and, at its
release, gpb_cupy_free, by address: no Python of ours per allocation),
against the in-run floor, what any allocator costs CuPy: building its
UnownedMemory and MemoryPointer around a fixed pointer and letting them go.
The Python bridge (gpubroker.cupy.malloc: UnownedMemory around a
gpubroker.Allocation) is measured too, and CuPy's C allocator path around C
functions that do nothing (bench/cupy_noop.c, built as
build/bench/libgpb-bench-noop.so): what that path costs CuPy with no
allocator behind it. Target: C bridge / floor <= 1.5.

    build/tests/frameworks/venv/bin/python bench/cupy_bridge.py [RESULTS.md]

Runs on the fake driver (CuPy's runtime cannot start there, its classes
can: CFunctionAllocator.malloc's one runtime call, the current device, is
left out of both sides) against a cuda-backend gpubrokerd of its own:
$GPUBROKERD (else build/daemon/gpubrokerd), $GPUBROKER_LIBRARY (else
build/client's), the fake in build/tests/fakecuda. Rounds alternate the
kinds; each round times 20000 alloc+free of 64 KiB; the medians are
compared. Prints a table, and writes it to RESULTS.md when given.
"""

import ctypes
import datetime
import importlib.util
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(TOP, "build")
ROUNDS, N, SIZE = 11, 20000, 64 << 10


def reexec():
    """Once more with the fake driver first on the library path."""
    env = dict(os.environ, GPB_BENCH_CHILD="1")
    fake = os.path.join(BUILD, "tests", "fakecuda")
    env["LD_LIBRARY_PATH"] = fake + (":" + env["LD_LIBRARY_PATH"]
                                     if env.get("LD_LIBRARY_PATH") else "")
    env.setdefault("FAKECUDA_DIR", tempfile.mkdtemp(prefix="gpb-bench-fake-"))
    env.setdefault("GPUBROKERD", os.path.join(BUILD, "daemon", "gpubrokerd"))
    env.setdefault("GPUBROKER_LIBRARY", os.path.join(BUILD, "client", "libgpubroker.so"))
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


def per_op_ns(fn):
    t0 = time.perf_counter_ns()
    fn()
    return (time.perf_counter_ns() - t0) / N


def main():
    if "GPB_BENCH_CHILD" not in os.environ:
        reexec()
    sys.path.insert(0, os.path.join(TOP, "python"))
    spec = importlib.util.spec_from_file_location(
        "gpb_harness", os.path.join(TOP, "tests", "python", "conftest.py"))
    harness = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(harness)
    import cupy
    import gpubroker.cupy as gcp

    d = harness.Daemon(backend="cuda").start()
    os.environ["GPUBROKER_SOCKET"] = d.socket
    try:
        mem = cupy.cuda.memory
        gcp.c_allocator(name="bench-cupy")
        malloc_fn, free_fn = gcp.c_functions()
        gcp._current_device = lambda: 0  # the one runtime call, left out
        py = gcp.BrokerAllocator(name="bench-cupy-py")
        keep = mem.CFunctionAllocatorMemory(SIZE, 0, malloc_fn, free_fn, 0)
        ptr = keep.ptr
        noop = ctypes.CDLL(os.path.join(BUILD, "bench", "libgpb-bench-noop.so"))
        noop_malloc = ctypes.cast(noop.gpb_bench_noop_malloc, ctypes.c_void_p).value
        noop_free = ctypes.cast(noop.gpb_bench_noop_free, ctypes.c_void_p).value

        def floor():
            for _ in range(N):
                m = mem.UnownedMemory(ptr, SIZE, None, 0)
                p = mem.MemoryPointer(m, 0)
                del p, m

        def c_bridge():
            for _ in range(N):
                m = mem.CFunctionAllocatorMemory(SIZE, 0, malloc_fn, free_fn, 0)
                p = mem.MemoryPointer(m, 0)
                del p, m

        def c_noop():
            for _ in range(N):
                m = mem.CFunctionAllocatorMemory(SIZE, 0, noop_malloc, noop_free, 0)
                p = mem.MemoryPointer(m, 0)
                del p, m

        def py_bridge():
            for _ in range(N):
                p = py(SIZE)
                del p

        kinds = {"floor": floor, "c": c_bridge, "noop": c_noop, "python": py_bridge}
        for fn in kinds.values():  # warm: leases, caches
            fn()
        times = {k: [] for k in kinds}
        for _ in range(ROUNDS):
            for k, fn in kinds.items():
                times[k].append(per_op_ns(fn))
        med = {k: statistics.median(v) for k, v in times.items()}
        del keep
        py.close()
    finally:
        d.stop()
        d.cleanup()

    ratio = med["c"] / med["floor"]
    verdict = "**met**" if ratio <= 1.5 else "**missed**"
    rows = [
        "| # | measure | gpubroker | same-run baseline | ratio | target | verdict |",
        "|---|---|---|---|---|---|---|",
        "| P8b-cupy | CuPy alloc+free of 64 KiB through c_allocator() (CFunctionAllocatorMemory "
        "+ MemoryPointer, gpb_cupy_malloc/free) | %.0f ns | floor: UnownedMemory + "
        "MemoryPointer around a fixed pointer %.0f ns | %.2f× | ≤ 1.5× | %s |"
        % (med["c"], med["floor"], ratio, verdict),
        "| | CuPy's C allocator path around functions that do nothing (bench/cupy_noop.c): "
        "CuPy's own cost of that path | %.0f ns | floor %.0f ns | %.2f× | — | |"
        % (med["noop"], med["floor"], med["noop"] / med["floor"]),
        "| | the same through the Python bridge (gpubroker.cupy.malloc) | %.0f ns | floor %.0f ns "
        "| %.2f× | — | |" % (med["python"], med["floor"], med["python"] / med["floor"]),
    ]
    table = "\n".join(rows)
    print(table)
    if len(sys.argv) > 1:
        commit = subprocess.run(["git", "-C", TOP, "rev-parse", "--short=12", "HEAD"],
                                capture_output=True, text=True).stdout.strip()
        with open(sys.argv[1], "w") as f:
            f.write("# P8b-cupy: CuPy through gpubroker's C allocator, fake driver, %s\n\n"
                    % datetime.date.today().isoformat())
            f.write("- Machine: %s, %d CPUs, %s\n" % (platform.processor() or platform.machine(),
                                                      os.cpu_count(), platform.platform()))
            f.write("- Commit: %s\n" % commit)
            f.write("- CuPy %s, Python %s\n" % (cupy.__version__, platform.python_version()))
            f.write("- Command: `build/tests/frameworks/venv/bin/python bench/cupy_bridge.py %s`\n"
                    % sys.argv[1])
            f.write("- Date: %s UTC\n" % datetime.datetime.now(datetime.timezone.utc)
                    .strftime("%Y-%m-%d %H:%M"))
            f.write("- %d rounds of %d alloc+free each, kinds alternated, medians compared; "
                    "no GPU (the fake driver: the library's cuda path, its leases and fences)\n\n"
                    % (ROUNDS, N))
            f.write(table + "\n")


if __name__ == "__main__":
    main()
