"""Fixtures for the Python tests: the real gpubrokerd on a temporary socket.

Programs come from the environment `meson test` sets (tests/python/meson.build):
GPUBROKERD (the daemon), GPUBROKER_LIBRARY (libgpubroker, loaded by the
package) and GPUBROKERCTL (the CLI), never from paths baked in elsewhere.
"""

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

MiB = 1 << 20
KiB = 1 << 10
GiB = 1 << 30


def env_path(name):
    v = os.environ.get(name)
    if not v:
        pytest.fail("environment variable %s is not set (run through meson test)" % name,
                    pytrace=False)
    return v


def daemon_env():
    """The daemon's environment: ours, less what only the Python process
    needs under ASan (LD_PRELOAD of libasan; leak checks off), with the
    daemon's own sanitizer options when the test gives them."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if "GPB_DAEMON_ASAN_OPTIONS" in env:
        env["ASAN_OPTIONS"] = env["GPB_DAEMON_ASAN_OPTIONS"]
    return env


def daemon_uid():
    """$GPB_DAEMON_UID: the uid the daemons run as (None: this process's);
    skips the test unless this process is root."""
    v = os.environ.get("GPB_DAEMON_UID")
    if not v:
        return None
    if os.geteuid() != 0:
        pytest.skip("GPB_DAEMON_UID=%s: starting the daemon as another uid than its clients "
                    "needs root (this test runs as uid %d)" % (v, os.geteuid()))
    return int(v)


class Daemon:
    """gpubrokerd on a socket of its own (sim: 2 devices of 1 GiB, 2 MiB
    slabs, unless @args say otherwise)."""

    def __init__(self, args=(), backend="sim"):
        self.dir = tempfile.mkdtemp(prefix="gpb-py-")
        os.chmod(self.dir, 0o755)  # helpers run as another user reach the socket
        self.socket = os.path.join(self.dir, "gpubroker.sock")
        self.args = ["--socket", self.socket, "--backend", backend, "--log-level", "warn",
                     "--socket-mode", "0666"]
        if backend == "sim":
            self.args += ["--sim-devices", "2", "--sim-memory", "1GiB", "--slab-size", "2MiB"]
        self.args += list(args)
        self.proc = None
        self.killed = False
        self.terminated = False

    def start(self, timeout=20.0):
        # The uid axis (GPB_DAEMON_UID, as tests/gpu/gpu-common.h): the
        # daemon runs as that uid, the test stays root.
        uid = daemon_uid()
        kw = {}
        if uid is not None:
            os.chown(self.dir, uid, uid)
            kw = {"user": uid, "group": uid, "extra_groups": []}
        self.proc = subprocess.Popen([env_path("GPUBROKERD")] + self.args, env=daemon_env(),
                                     **kw)
        if uid is not None:
            assert os.stat("/proc/%d" % self.proc.pid).st_uid == uid
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail("gpubrokerd exited with %d at start" % self.proc.returncode)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(self.socket)
                return self
            except OSError:
                time.sleep(0.02)
            finally:
                s.close()
        self.proc.kill()
        pytest.fail("gpubrokerd did not listen on %s" % self.socket)

    def kill(self):
        """kill -9: every client's connection ends at once."""
        self.proc.kill()
        self.proc.wait()
        self.killed = True

    def terminate(self):
        """SIGTERM, once: the daemon tells its clients and stops."""
        if not self.terminated:
            self.terminated = True
            self.proc.send_signal(signal.SIGTERM)

    def stop(self):
        """SIGTERM (unless sent already); returns the exit status (0
        expected: nothing leaked)."""
        if self.proc.poll() is None:
            self.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return "timeout"
        return self.proc.returncode

    def cleanup(self):
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def daemon():
    d = Daemon().start()
    yield d
    rc = d.stop()
    d.cleanup()
    if not d.killed:
        assert rc == 0, "gpubrokerd exited with %r (see its stderr above)" % (rc,)


def have_gpu():
    """Why the gpu suite cannot run here, or None when it can."""
    if not os.path.exists("/dev/nvidiactl"):
        return "no /dev/nvidiactl (no NVIDIA driver or device)"
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        return "libcuda.so.1 does not load: %s" % e
    return None


def xuid_ipc_probe(d):
    """Transport ipc, daemon of another uid: whether the driver opens its
    legacy handles here is its share policy; where it refuses, the test is
    skipped with the driver's answer (what gpu-python-ipc-xuid-X settles)."""
    import gpubroker

    with gpubroker.Client(d.socket, "xuid-probe") as c:
        try:
            c.alloc(c.register("xuid-probe", device=0), 1 << 20).free()
        except gpubroker.BackendError as e:
            if "daemon's user" not in str(e):
                raise
            d.stop()
            d.cleanup()
            pytest.skip("transport ipc, daemon of uid %s: the driver's share policy refuses "
                        "legacy IPC handles to a client of uid %d: %s"
                        % (os.environ["GPB_DAEMON_UID"], os.geteuid(), e))


@pytest.fixture(scope="module")
def cuda_daemon():
    """gpubrokerd on the cuda backend, its socket in $GPUBROKER_SOCKET (the
    default the Numba and CuPy bridges connect to), on the transport
    $GPB_CUDA_TRANSPORT names (vmm or ipc; unset: the daemon picks); skips
    without a GPU."""
    why = have_gpu()
    if why:
        pytest.skip(why)
    transport = os.environ.get("GPB_CUDA_TRANSPORT")
    d = Daemon(["--cuda-transport", transport] if transport else [], backend="cuda").start()
    if daemon_uid() is not None and transport == "ipc":
        xuid_ipc_probe(d)
    old = os.environ.get("GPUBROKER_SOCKET")
    os.environ["GPUBROKER_SOCKET"] = d.socket
    yield d
    if old is None:
        os.environ.pop("GPUBROKER_SOCKET", None)
    else:
        os.environ["GPUBROKER_SOCKET"] = old
    rc = d.stop()
    d.cleanup()
    assert rc == 0, "gpubrokerd exited with %r" % (rc,)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "no_lease: the test is about the daemon's per-allocation semantics (ids it "
        "knows, per-allocation figures, fences or events of one allocation): its clients run "
        "with GPUBROKER_LEASE=0 (issue 27)")


@pytest.fixture(autouse=True)
def lease_mode(request, monkeypatch):
    """GPUBROKER_LEASE=0 for a test marked no_lease, set before its clients
    connect (an autouse fixture comes before the test's others): the library
    reads it when a client is made, and helper processes inherit it. The
    others run as users do, with leases (the default)."""
    if request.node.get_closest_marker("no_lease"):
        monkeypatch.setenv("GPUBROKER_LEASE", "0")
        return False
    monkeypatch.delenv("GPUBROKER_LEASE", raising=False)
    return True


# A test that proves something both with and without leases: its "lease"
# argument is True or False.
both_lease_modes = pytest.mark.parametrize(
    "lease", [pytest.param(True, id="lease"),
              pytest.param(False, id="nolease", marks=pytest.mark.no_lease)])


def live_bytes(client, instance):
    """The bytes of @client's live blocks of @instance, with leases or
    without: what the daemon charges (`used`: leases whole and daemon
    allocations), less this client's leases, plus what is in use inside them
    (gpb_mem_info; exact when @instance is this client's alone)."""
    mi = client.mem_info(instance)
    return mi.used - mi.leased + mi.in_use


@pytest.fixture
def client(daemon):
    import gpubroker

    with gpubroker.Client(daemon.socket, "pytest") as c:
        yield c


@pytest.fixture
def other(daemon):
    """A second connection to the same daemon."""
    import gpubroker

    with gpubroker.Client(daemon.socket, "pytest-other") as c:
        yield c


def wait_until(pred, timeout=10.0):
    """Polls @pred until true; false after @timeout seconds. For what another
    connection sees of a close: the daemon learns of it asynchronously."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def settle(client):
    """One round trip on @client (a `status` request, which waits for its
    reply), so that what @client freed or answered before is done in the
    daemon. A free (Allocation.free(), a collected Allocation, the Numba and
    CuPy bridges' frees, gpb_free_async once its fence passed), a kept
    slab's release and the answer to an `invalidate` event (invalidate_done,
    sent as the library reads the event: until the daemon has it, the
    ranges the event released stay fenced, counted in `used` and `live`)
    are quiet: sent without waiting for a reply, and ordered only before
    the same connection's later requests. Another connection (an observer
    Client, gpubrokerctl, another process) may be served first, so call this
    on the freeing connection before looking through another one. A close
    is no such free: wait for it with wait_until()."""
    client.request("status")


def ctl_instances(daemon):
    """`gpubrokerctl --output json instances` against @daemon: the rows."""
    import json

    r = subprocess.run([env_path("GPUBROKERCTL"), "--socket", daemon.socket, "--output", "json",
                        "instances"], env=daemon_env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    return doc["instances"] if isinstance(doc, dict) else doc


def child_env():
    """The environment a helper Python process needs to import gpubroker."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(os.path.dirname(os.path.dirname(HERE)), "python")]
        + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def run_python(code, *args, env=None, **kw):
    """Runs @code in a fresh interpreter (this one's) with gpubroker
    importable and the variables of @env added; returns the CompletedProcess
    (output captured, text)."""
    return subprocess.run([sys.executable, "-c", code] + [str(a) for a in args],
                          env=dict(child_env(), **(env or {})), capture_output=True,
                          text=True, timeout=60, **kw)


NOBODY = 65534


def run_python_as_nobody(code, *args):
    """Runs @code as user nobody (its uid and gid, no other group), like
    run_python, from copies of the package and of libgpubroker in a folder
    under /tmp that nobody may read: the tree itself may sit where only root
    can reach it (a clone under /root, mode 0700). The copies go afterwards."""
    top = tempfile.mkdtemp(prefix="gpb-py-nobody-")
    try:
        shutil.copytree(os.path.join(os.path.dirname(os.path.dirname(HERE)), "python", "gpubroker"),
                        os.path.join(top, "gpubroker"),
                        ignore=shutil.ignore_patterns("__pycache__", "*.in"))
        lib = os.path.join(top, "libgpubroker.so.0")
        shutil.copyfile(env_path("GPUBROKER_LIBRARY"), lib)
        # Modes set, not copied: mkdtemp makes 0700, and a clone made under
        # umask 077 has 0600 files.
        for d, _, files in os.walk(top):
            os.chmod(d, 0o755)
            for f in files:
                os.chmod(os.path.join(d, f), 0o644)
        env = dict(os.environ, PYTHONPATH=top, GPUBROKER_LIBRARY=lib)
        return subprocess.run([sys.executable, "-c", code] + [str(a) for a in args], env=env,
                              user=NOBODY, group=NOBODY, extra_groups=[], cwd=top,
                              capture_output=True, text=True, timeout=60)
    finally:
        shutil.rmtree(top, ignore_errors=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under tools/test.sh, which installs every package the tests use
    (tools/deps.sh) and says so with GPB_TEST_PACKAGES=installed, a test that
    pytest.importorskip skips fails instead: the package it wants is missing
    from tools/deps.sh. The gpu suite keeps its skips (numba and cupy are
    for a GPU, which test.sh cannot install)."""
    outcome = yield
    rep = outcome.get_result()
    if (rep.skipped and call.excinfo is not None
            and os.environ.get("GPB_TEST_PACKAGES") == "installed"
            and call.excinfo.errisinstance(pytest.skip.Exception)
            and str(call.excinfo.value).startswith("could not import")
            and os.path.basename(os.path.dirname(str(item.fspath))) != "gpu"):
        rep.outcome = "failed"
        rep.longrepr = ("%s, although GPB_TEST_PACKAGES=installed says tools/deps.sh installed "
                        "every package the tests use" % call.excinfo.value)


def pytest_sessionstart(session):
    """The gpu suite (GPB_PYTEST_SKIP_EXIT) without a GPU: skipped (77) at
    once, before its modules import Numba, CuPy or PyTorch (half a minute
    each under valgrind, for a skip)."""
    if os.environ.get("GPB_PYTEST_SKIP_EXIT"):
        why = have_gpu()
        if why:
            pytest.exit("SKIP: " + why, returncode=77)


def pytest_sessionfinish(session, exitstatus):
    """With GPB_PYTEST_SKIP_EXIT set (the gpu suite), a run in which nothing
    passed and something was skipped exits 77, which meson counts as skipped."""
    if not os.environ.get("GPB_PYTEST_SKIP_EXIT"):
        return
    rep = session.config.pluginmanager.get_plugin("terminalreporter")
    if rep is None:
        return
    passed = len(rep.stats.get("passed", []))
    failed = len(rep.stats.get("failed", [])) + len(rep.stats.get("error", []))
    skipped = len(rep.stats.get("skipped", []))
    if not passed and not failed and skipped:
        session.exitstatus = 77
