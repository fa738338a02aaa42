"""Error codes of libgpubroker as Python exceptions, each provoked for real."""

import os
import re
import textwrap
import threading
import time

import pytest

import gpubroker
from conftest import MiB, run_python_as_nobody


def test_connect_error(tmp_path):
    with pytest.raises(gpubroker.ConnectError) as e:
        gpubroker.Client(str(tmp_path / "nobody.sock"))
    assert e.value.code == gpubroker.errors.E_CONNECT
    assert isinstance(e.value, ConnectionError) and e.value.name


def test_not_found(client):
    inst = client.register("nf")
    with pytest.raises(gpubroker.NotFoundError) as e:
        client.free(0xDEADBEEF)
    assert e.value.code == -9 and "not found" in str(e.value)
    assert isinstance(e.value, LookupError)
    with pytest.raises(gpubroker.NotFoundError):
        client.mem_info(inst + 1000)
    with pytest.raises(gpubroker.NotFoundError):
        client.detach(0xDEADBEEF)


def test_invalid(client):
    with pytest.raises(gpubroker.InvalidError) as e:
        client.register("bad", proportion=1.5)
    assert isinstance(e.value, ValueError) and e.value.code == -1
    assert e.value.detail  # gpb_last_error() said why
    inst = client.register("ok")
    with pytest.raises(ValueError):
        client.alloc(inst, MiB, alignment=3)
    with pytest.raises(ValueError):
        client.set_mode("sideways")
    with pytest.raises(ValueError):
        client.stats(7)
    with pytest.raises(ValueError):
        client.alloc(inst, MiB, timeout=90000)


def test_quota_in_active_mode(client):
    client.set_mode("active")
    inst = client.register("capped", proportion=0.25)
    assert client.mem_info(inst).cap == 256 * MiB
    a = client.alloc(inst, 200 * MiB)
    with pytest.raises(gpubroker.QuotaError) as e:
        client.alloc(inst, 100 * MiB)
    assert e.value.code == gpubroker.errors.E_QUOTA and isinstance(e.value, MemoryError)
    assert "quota" in e.value.detail
    a.free()
    client.alloc(inst, 100 * MiB).free()


def test_out_of_memory_under_limit(client):
    client.set_limit(size=4 * MiB)
    assert client.policy_info(0).capacity == 4 * MiB
    inst = client.register("small")
    with pytest.raises(gpubroker.OutOfMemoryError) as e:
        client.alloc(inst, 8 * MiB)
    assert isinstance(e.value, MemoryError) and e.value.code == -7
    assert "out of memory" in str(e.value)
    client.set_limit()  # removed
    client.alloc(inst, 8 * MiB).free()


def test_alloc_wait_times_out(client):
    client.set_mode("active")
    inst = client.register("waiter", proportion=0.25)
    a = client.alloc(inst, 200 * MiB)
    t0 = time.monotonic()
    with pytest.raises(gpubroker.BrokerTimeoutError) as e:
        client.alloc(inst, 100 * MiB, timeout=0.3)
    assert time.monotonic() - t0 >= 0.25
    assert isinstance(e.value, TimeoutError) and e.value.code == -12
    a.free()


def test_alloc_wait_is_served_when_the_cap_grows(client, other):
    client.set_mode("active")
    inst = client.register("waiter", proportion=0.25)
    client.alloc(inst, 200 * MiB)

    def grow():
        time.sleep(0.3)
        other.set_proportion(inst, 0.5)  # root is an administrator

    t = threading.Thread(target=grow)
    t.start()
    b = client.alloc(inst, 100 * MiB, timeout=10)
    t.join()
    assert b.size == 100 * MiB and client.mem_info(inst).cap == 512 * MiB


def test_daemon_gone(daemon, client):
    inst = client.register("orphan")
    a = client.alloc(inst, MiB)
    daemon.kill()
    # More than the lease has room for: a request to the daemon (a block
    # that fits in the lease needs none, so the library cannot know yet).
    with pytest.raises(gpubroker.DaemonGoneError) as e:
        client.alloc(inst, 2 * MiB)
    assert e.value.code == gpubroker.errors.E_DAEMON_GONE
    assert isinstance(e.value, ConnectionError)
    # Leases end with their connection: once the library knows it lost it,
    # not even a block with room in the lease is served.
    with pytest.raises(gpubroker.DaemonGoneError):
        client.alloc(inst, 256)
    with pytest.raises(gpubroker.DaemonGoneError):
        client.stats(0)
    a.free()  # swallowed: the daemon took it with it
    del a
    client.close()


def test_dispatch_reports_daemon_gone(daemon, client):
    daemon.kill()
    with pytest.raises(gpubroker.DaemonGoneError):
        for _ in range(50):
            client.dispatch()
            time.sleep(0.02)


def test_permission_for_non_administrators(daemon):
    if os.geteuid() != 0:
        pytest.skip("needs root to run a helper as another user")
    code = textwrap.dedent("""
        import os, sys, gpubroker
        assert os.getuid() == 65534
        c = gpubroker.Client(sys.argv[1])
        try:
            c.set_mode("active")
        except gpubroker.BrokerPermissionError as e:
            assert isinstance(e, PermissionError) and e.code == -10
            print("refused")
        """)
    r = run_python_as_nobody(code, daemon.socket)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "refused"


def test_error_has_code_name_and_detail(client):
    err = gpubroker.errors.error_for(-8, "alloc")
    assert isinstance(err, gpubroker.QuotaError) and err.name == gpubroker.errors.strerror(-8)
    unknown = gpubroker.errors.error_for(-99)
    assert type(unknown) is gpubroker.GpubrokerError and unknown.code == -99


@pytest.mark.no_lease  # max_allocations counts daemon objects: one per allocation without leases
def test_limit_error():
    from conftest import Daemon

    d = Daemon(["--max-allocations", "2"]).start()
    try:
        with gpubroker.Client(d.socket) as c:
            inst = c.register("many")
            keep = [c.alloc(inst, 256) for _ in range(2)]
            with pytest.raises(gpubroker.LimitError) as e:
                c.alloc(inst, 256)
            assert e.value.code == gpubroker.errors.E_LIMIT and "max_allocations" in str(e.value)
            keep.pop().free()
            keep.append(c.alloc(inst, 256))  # room again
    finally:
        rc = d.stop()
        d.cleanup()
    assert rc == 0


# Every GPB_E_* code of gpubroker.h with its class: a code added to the C
# header without its class here (or in errors.py) fails this test.
CODE_CLASSES = [
    (-1, "E_INVALID", gpubroker.InvalidError, ValueError),
    (-2, "E_NOMEM", gpubroker.HostMemoryError, MemoryError),
    (-3, "E_CONNECT", gpubroker.ConnectError, ConnectionError),
    (-4, "E_DAEMON_GONE", gpubroker.DaemonGoneError, ConnectionError),
    (-5, "E_PROTOCOL", gpubroker.ProtocolError, gpubroker.GpubrokerError),
    (-6, "E_VERSION", gpubroker.VersionError, gpubroker.GpubrokerError),
    (-7, "E_OUT_OF_MEMORY", gpubroker.OutOfMemoryError, MemoryError),
    (-8, "E_QUOTA", gpubroker.QuotaError, MemoryError),
    (-9, "E_NOT_FOUND", gpubroker.NotFoundError, LookupError),
    (-10, "E_PERMISSION", gpubroker.BrokerPermissionError, PermissionError),
    (-11, "E_LIMIT", gpubroker.LimitError, gpubroker.GpubrokerError),
    (-12, "E_TIMEOUT", gpubroker.BrokerTimeoutError, TimeoutError),
    (-13, "E_NOT_SUPPORTED", gpubroker.NotSupportedError, NotImplementedError),
    (-14, "E_BACKEND", gpubroker.BackendError, gpubroker.GpubrokerError),
    (-15, "E_SHUTTING_DOWN", gpubroker.ShuttingDownError, ConnectionError),
    (-16, "E_SYSTEM", gpubroker.SystemCallError, OSError),
    (-17, "E_LAYOUT_NAME", gpubroker.LayoutNameError, gpubroker.LayoutError),
    (-18, "E_LAYOUT_DUPLICATE", gpubroker.LayoutDuplicateError, gpubroker.LayoutError),
    (-19, "E_LAYOUT_ZERO_SIZE", gpubroker.LayoutZeroSizeError, gpubroker.LayoutError),
    (-20, "E_LAYOUT_OVERFLOW", gpubroker.LayoutOverflowError, OverflowError),
    (-21, "E_LAYOUT_ALIAS_UNKNOWN", gpubroker.LayoutAliasUnknownError, gpubroker.LayoutError),
    (-22, "E_LAYOUT_ALIAS_PERSISTENT", gpubroker.LayoutAliasPersistentError,
     gpubroker.LayoutError),
    (-23, "E_LAYOUT_ALIAS_CYCLE", gpubroker.LayoutAliasCycleError, gpubroker.LayoutError),
    (-24, "E_LAYOUT_ALIAS_LOCATION", gpubroker.LayoutAliasLocationError, gpubroker.LayoutError),
    (-25, "E_LAYOUT_NO_FIT", gpubroker.LayoutNoFitError, gpubroker.LayoutError),
    (-26, "E_CONTEXT_RESET", gpubroker.ContextResetError, gpubroker.GpubrokerError),
    (-27, "E_EXISTS", gpubroker.ExistsError, FileExistsError),
]


def test_every_code_has_its_class():
    """No daemon needed: error_for() of each code, the constant's value and
    the library's name for it; the codes are those of gpubroker.h."""
    header = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "include", "gpubroker.h")
    with open(header) as f:
        declared = {("E_" + m.group(1), int(m.group(2)))
                    for m in re.finditer(r"\bGPB_E_(\w+) = (-\d+)", f.read())}
    assert declared == {(const, code) for code, const, _, _ in CODE_CLASSES}
    names = set()
    for code, const, cls, base in CODE_CLASSES:
        assert getattr(gpubroker.errors, const) == code
        err = gpubroker.errors.error_for(code, "call")
        assert type(err) is cls and isinstance(err, base), (code, type(err))
        assert isinstance(err, gpubroker.GpubrokerError) and err.code == code
        assert err.name != "unknown error" and str(err).startswith("call: " + err.name)
        names.add(err.name)
    assert len(names) == len(CODE_CLASSES)  # one text a code
    classes = [c for _, _, c, _ in CODE_CLASSES]
    assert len(set(classes)) == len(classes)  # one class a code
    # The layout codes: one base, which is a ValueError (a refused input).
    for code in range(-25, -16):
        err = gpubroker.errors.error_for(code)
        assert isinstance(err, gpubroker.LayoutError) and isinstance(err, ValueError)
    assert not isinstance(gpubroker.errors.error_for(-1), gpubroker.LayoutError)
    # The first code past the last is nobody's.
    assert gpubroker.errors.strerror(-28) == "unknown error"
    assert type(gpubroker.errors.error_for(-28)) is gpubroker.GpubrokerError
