"""Fixtures for the frameworks suite: a cuda-backend gpubrokerd on the fake
driver (tests/fakecuda), run by run.sh with the fake's folder first on
LD_LIBRARY_PATH and a state folder of its own in $FAKECUDA_DIR.

The daemon harness is tests/python's (conftest.py there, loaded as a
module): the same Daemon, the same way to start helper processes."""

import importlib.util
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(TOP, "python"))

_spec = importlib.util.spec_from_file_location(
    "gpb_python_harness", os.path.join(TOP, "tests", "python", "conftest.py"))
harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(harness)

MiB = 1 << 20


@pytest.fixture(scope="module")
def fake_daemon():
    """gpubrokerd --backend cuda on the fake driver, its socket in
    $GPUBROKER_SOCKET (where the bridges connect by default)."""
    if not os.environ.get("FAKECUDA_DIR"):
        pytest.fail("FAKECUDA_DIR is not set (run through meson test: tests/frameworks/run.sh)",
                    pytrace=False)
    d = harness.Daemon(backend="cuda").start()
    old = os.environ.get("GPUBROKER_SOCKET")
    os.environ["GPUBROKER_SOCKET"] = d.socket
    yield d
    if old is None:
        os.environ.pop("GPUBROKER_SOCKET", None)
    else:
        os.environ["GPUBROKER_SOCKET"] = old
    rc = d.stop()
    d.cleanup()
    assert rc == 0, "gpubrokerd exited with %r (see its stderr above)" % (rc,)
