"""Packaging and loading: the package installed offline as the README says
(pip), and where it finds libgpubroker when $GPUBROKER_LIBRARY is unset.

Each case runs a fresh interpreter with a controlled environment and checks
which file the process really mapped (/proc/self/maps), not only what the
package says it tried."""

import glob
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import HERE, env_path

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(HERE)), "python")

# Prints the module's file, the path ctypes was given and the libgpubroker
# files mapped into the process.
PROBE = textwrap.dedent("""
    import ctypes.util, sys
    if sys.argv[1:] == ["no-find-library"]:
        ctypes.util.find_library = lambda name: None
    elif sys.argv[1:2] == ["find-library"]:
        ctypes.util.find_library = lambda name, _p=sys.argv[2]: _p
    import gpubroker, gpubroker._lib as L
    lib = L.lib()
    maps = sorted({line.split(None, 5)[5].strip() for line in open("/proc/self/maps")
                   if "libgpubroker" in line})
    print(gpubroker.__file__)
    print(lib._name)
    print("|".join(maps))
    """)


def run_probe(env, *args, cwd):
    r = subprocess.run([sys.executable, "-c", PROBE] + list(args), env=env, cwd=cwd,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    module, name, maps = r.stdout.splitlines()
    return module, name, maps.split("|")


def clean_env(**extra):
    """Our environment less anything that would choose the library or the
    package for the child (LD_PRELOAD, the ASan runtime, stays)."""
    env = dict(os.environ)
    for k in ("GPUBROKER_LIBRARY", "PYTHONPATH", "LD_LIBRARY_PATH", "PYTHONHOME"):
        env.pop(k, None)
    env.update(extra)
    return env


def copy_library(dest):
    """A copy of the build's libgpubroker at @dest (a distinct file, so that
    /proc/self/maps tells which one was loaded)."""
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    shutil.copy(os.path.realpath(env_path("GPUBROKER_LIBRARY")), dest)
    return dest


def copy_package(top):
    """python/gpubroker copied under @top/python (a source tree without a
    build), __pycache__ left out; returns the package directory."""
    dest = os.path.join(top, "python", "gpubroker")
    shutil.copytree(os.path.join(PACKAGE, "gpubroker"), dest,
                    ignore=shutil.ignore_patterns("__pycache__", "*.in"))
    return dest


def test_pip_install_offline_then_use_a_daemon(daemon, tmp_path):
    """`python3 -m pip install --no-build-isolation --no-index --target DIR
    ./python`, then the installed copy (not the source tree) talks to a
    daemon with $GPUBROKER_LIBRARY naming the build's library."""
    pytest.importorskip("pip")  # Debian: python3-pip
    # pip builds in the tree it is given (setuptools writes build/ and
    # *.egg-info there): give it a copy, so the checkout stays clean.
    src = tmp_path / "src"
    shutil.copytree(PACKAGE, src, ignore=shutil.ignore_patterns("__pycache__", "build",
                                                                 "*.egg-info"))
    target = tmp_path / "site"
    env = clean_env(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1",
                    PIP_ROOT_USER_ACTION="ignore", PIP_NO_CACHE_DIR="1")
    env.pop("LD_PRELOAD", None)  # pip loads nothing of ours
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation",
                        "--no-index", "--target", str(target), str(src)],
                       env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr

    # Every module of the package was installed, with its metadata.
    want = sorted(os.path.basename(p) for p in glob.glob(os.path.join(PACKAGE, "gpubroker", "*.py")))
    got = sorted(os.path.basename(p) for p in glob.glob(str(target / "gpubroker" / "*.py")))
    assert got == want
    assert glob.glob(str(target / "gpubroker-0.1.0.dist-info" / "METADATA"))

    code = textwrap.dedent("""
        import sys
        import gpubroker
        print(gpubroker.__file__)
        with gpubroker.Client(sys.argv[1], "installed") as c:
            inst = c.register("pip", device=0)
            a = c.alloc(inst, 3 << 20)
            print(c.backend, a.size, c.stats(0).used, c.mem_info(inst).used)
            a.free()
            print(c.stats(0).used)
        """)
    env = clean_env(PYTHONPATH=str(target),
                    GPUBROKER_LIBRARY=os.path.realpath(env_path("GPUBROKER_LIBRARY")))
    r = subprocess.run([sys.executable, "-c", code, daemon.socket], env=env,
                       cwd=str(tmp_path), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    module, alloc, after = r.stdout.splitlines()
    assert module == str(target / "gpubroker" / "__init__.py")
    backend, size, used, inst_used = alloc.split()
    assert backend == "sim" and int(size) >= 3 << 20
    assert int(used) == int(size) == int(inst_used)  # the daemon counts it
    assert int(after) == 0


def fake_install(tmp_path, config_library):
    """A source tree whose package has a _config.py (as `meson install`
    writes it) naming @config_library, and a build/client/libgpubroker.so;
    returns (tree top, in-tree library)."""
    top = str(tmp_path / "tree")
    pkg = copy_package(top)
    with open(os.path.join(pkg, "_config.py"), "w") as f:
        f.write("LIBRARY = %r\n" % config_library)
    in_tree = copy_library(os.path.join(top, "build", "client", "libgpubroker.so"))
    return top, in_tree


def test_lookup_prefers_the_installed_path(tmp_path):
    installed = copy_library(str(tmp_path / "prefix" / "lib" / "libgpubroker.so.0"))
    top, _ = fake_install(tmp_path, installed)
    env = clean_env(PYTHONPATH=os.path.join(top, "python"))
    module, name, maps = run_probe(env, cwd=str(tmp_path))
    assert module.startswith(top)
    assert name == installed and maps == [installed]


def test_lookup_falls_back_to_the_build_tree(tmp_path):
    # _config names a library that is not there (installed, then removed).
    top, in_tree = fake_install(tmp_path, str(tmp_path / "gone" / "libgpubroker.so.0"))
    env = clean_env(PYTHONPATH=os.path.join(top, "python"))
    _, name, maps = run_probe(env, cwd=str(tmp_path))
    assert name == in_tree and maps == [in_tree]


def test_lookup_falls_back_to_the_system(tmp_path):
    # No _config, no build tree: find_library's answer, then the soname
    # through the dynamic linker's search path.
    top = str(tmp_path / "tree")
    copy_package(top)
    system = copy_library(str(tmp_path / "sys" / "libgpubroker.so.0"))
    found = copy_library(str(tmp_path / "found" / "libgpubroker.so.0"))
    env = clean_env(PYTHONPATH=os.path.join(top, "python"),
                    LD_LIBRARY_PATH=os.path.dirname(system))
    _, name, maps = run_probe(env, "find-library", found, cwd=str(tmp_path))
    assert name == found and maps == [found]
    _, name, maps = run_probe(env, "no-find-library", cwd=str(tmp_path))
    assert name == "libgpubroker.so.0" and maps == [system]


def test_explicit_library_that_is_missing_is_a_clear_error(tmp_path):
    # A build tree is there, but an explicit choice never falls back.
    top, _ = fake_install(tmp_path, str(tmp_path / "gone" / "libgpubroker.so.0"))
    missing = str(tmp_path / "nowhere" / "libgpubroker.so.0")
    code = textwrap.dedent("""
        import gpubroker  # importing never needs the library
        try:
            gpubroker.Client("/nonexistent.sock")
        except ImportError as e:
            print(e)
        else:
            print("loaded")
        """)
    env = clean_env(PYTHONPATH=os.path.join(top, "python"), GPUBROKER_LIBRARY=missing)
    r = subprocess.run([sys.executable, "-c", code], env=env, cwd=str(tmp_path),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == (
        "gpubroker: GPUBROKER_LIBRARY names %s, which does not exist" % missing)


def test_extras_name_wheels():
    """pip install gpubroker[...] installs wheels: a CuPy extra per CUDA
    major version (cupy-cudaNNx), never CuPy's source package "cupy"; the
    README lists each one."""
    import re
    import tomllib

    top = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(top, "python", "pyproject.toml"), "rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    with open(os.path.join(top, "python", "README.md")) as f:
        readme = f.read()
    names = lambda reqs: [re.split(r"[<>=!~ ;\[]", r, maxsplit=1)[0] for r in reqs]
    cupy = {k: v for k, v in extras.items() if any(n.startswith("cupy") for n in names(v))}
    assert set(cupy) >= {"cupy-cuda13x", "cupy-cuda12x"}
    for extra, reqs in extras.items():
        assert "cupy" not in names(reqs), (extra, reqs)  # the source distribution
        for n in names(reqs):
            if n.startswith("cupy"):
                assert re.fullmatch(r"cupy-cuda\d+x", n) and n == extra, (extra, reqs)
        assert "`gpubroker[%s]`" % extra in readme, extra
