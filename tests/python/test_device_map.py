"""`gpubrokerctl devices --map` and the device_map request: a known pattern
of allocations gives the known picture. A daemon of 8 MiB slabs, so that
one slab holds the pattern; a cell is 1/64 of a slab, 128 KiB."""

import json
import subprocess

import pytest

import gpubroker
from conftest import Daemon, env_path, run_python_as_nobody, settle

MiB = 1 << 20


@pytest.fixture
def daemon8():
    d = Daemon(["--slab-size", "8MiB"]).start()
    yield d
    d.stop()
    d.cleanup()


def ctl(daemon, *args):
    return subprocess.run([env_path("GPUBROKERCTL"), "--socket", daemon.socket, *args],
                          capture_output=True, text=True, timeout=60)


def rows(out):
    """{device: [row cells]} of the map's text."""
    found, dev = {}, None
    for ln in out.splitlines():
        if ln.startswith("device "):
            dev = int(ln.split()[1].rstrip(":"))
            found[dev] = []
        elif "[" in ln and dev is not None:
            found[dev].append(ln[ln.index("[") + 1:ln.rindex("]")])
    return found


def test_known_pattern_known_picture(daemon8, monkeypatch):
    # Device 0: three 2 MiB allocations, the middle one freed.
    monkeypatch.setenv("GPUBROKER_LEASE", "0")
    with gpubroker.Client(daemon8.socket, "pattern") as c, \
            gpubroker.Client(daemon8.socket, "evictee") as e:
        inst = c.register("p")
        blocks = [c.alloc(inst, 2 * MiB) for _ in range(3)]
        c.free(blocks[1])
        # Device 1: a lease (a client with leases, one small block), then
        # an evicted client's allocation, fenced while its process lives.
        monkeypatch.setenv("GPUBROKER_LEASE", "1")
        with gpubroker.Client(daemon8.socket, "leaser") as lc:
            # (An Allocation frees itself when collected: keep them.)
            small = lc.alloc(lc.register("l", device=1), 64 * 1024)
            fenced = e.alloc(e.register("e", device=1), 2 * MiB)
            settle(c)
            settle(lc)
            settle(e)
            clients = json.loads(ctl(daemon8, "-o", "json", "clients").stdout)["clients"]
            session = [x["session"] for x in clients if x["name"] == "evictee"][0]
            assert ctl(daemon8, "evict", session).returncode == 0

            r = ctl(daemon8, "devices", "--map")
            assert r.returncode == 0, r.stderr
            pic = rows(r.stdout)
            assert pic[0] == ["#" * 16 + "." * 16 + "#" * 16 + "." * 16], r.stdout
            assert pic[1] == ["=" * 16 + "!" * 16 + "." * 32], r.stdout
            assert "uid 0" in r.stdout and "8.0 MiB" in r.stdout

            # One device; the same data as JSON for tools.
            r = ctl(daemon8, "devices", "--map", "--device", "1")
            assert list(rows(r.stdout)) == [1]
            doc = json.loads(ctl(daemon8, "-o", "json", "devices", "--map").stdout)
            (slab,) = doc["devices"][0]["slabs"]
            assert slab["uid"] == 0 and slab["partition"] is None and slab["size"] == str(8 * MiB)
            states = [(b["offset"], b["size"], b["state"]) for b in slab["blocks"]]
            assert states == [("0", str(2 * MiB), "used"), (str(2 * MiB), str(2 * MiB), "free"),
                              (str(4 * MiB), str(2 * MiB), "used"),
                              (str(6 * MiB), str(2 * MiB), "free")]
            assert slab["blocks"][0]["instance"] == "%016x" % inst
            del small, fenced


def test_partition_slabs_are_named(daemon8, monkeypatch):
    monkeypatch.setenv("GPUBROKER_LEASE", "0")
    token = ctl(daemon8, "partition-create", "pmap", "--uid", "0", "--size", "16M").stdout.strip()
    monkeypatch.setenv("GPUBROKER_TOKEN", token)
    with gpubroker.Client(daemon8.socket, "inside") as c:
        kept = c.alloc(c.register("x"), 4 * MiB)
        settle(c)
        r = ctl(daemon8, "devices", "--map", "--device", "0")
        assert "uid 0 pmap" in r.stdout and "#" * 32 + "." * 32 in r.stdout, r.stdout
        del kept


def test_map_is_for_administrators(daemon8):
    r = run_python_as_nobody(
        "import gpubroker, sys\n"
        "c = gpubroker.Client(sys.argv[1], 'nobody')\n"
        "try:\n"
        "    c.request('device_map')\n"
        "    print('answered')\n"
        "except gpubroker.BrokerPermissionError as e:\n"
        "    print('refused', e)\n", daemon8.socket)
    assert r.returncode == 0 and r.stdout.startswith("refused"), r.stdout + r.stderr


def test_map_usage(daemon8):
    r = ctl(daemon8, "status", "--map")
    assert r.returncode == 2 and "--map only applies to devices" in r.stderr
    r = ctl(daemon8, "devices", "--map", "--device", "7")
    assert r.returncode == 1 and "no such device" in r.stderr
