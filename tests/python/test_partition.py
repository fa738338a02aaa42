"""Partitions from Python: the package connects through libgpubroker's
gpb_connect, so $GPUBROKER_TOKEN (what the Slurm plugin puts in a job's
environment) puts a gpubroker.Client in its partition by itself."""

import os
import subprocess
import sys

import pytest

import gpubroker
from conftest import MiB, GiB, child_env, run_python, wait_until


def make_partition(client, name, size, devices=None):
    params = {"name": name, "uid": os.getuid(), "size": str(size)}
    if devices is not None:
        params["devices"] = devices
    return client.request("partition_create", params)["token"]


def test_token_from_environment_joins(client, daemon, monkeypatch):
    token = make_partition(client, "py-job", 256 * MiB, [1])
    monkeypatch.setenv("GPUBROKER_TOKEN", token)
    with gpubroker.Client(daemon.socket, "in-job") as c:
        inst = c.register("solver", device=1)
        info = c.mem_info(inst)
        # The partition is the device: what Numba's get_memory_info reports.
        assert info.device_total == 256 * MiB and info.cap == 256 * MiB
        a = c.alloc(inst, 256 * MiB)
        with pytest.raises(gpubroker.OutOfMemoryError):
            c.alloc(inst, 1)
        a.free()
        # The policy within: two auto instances get half each (active mode).
        client.request("set_mode", {"mode": "active"})
        try:
            other = c.register("second", device=1)
            assert c.mem_info(inst).cap == 128 * MiB
            assert c.mem_info(other).cap == 128 * MiB
        finally:
            client.request("set_mode", {"mode": "passive"})
        listed = client.request("partitions")["partitions"]
        assert [p["sessions"] for p in listed if p["name"] == "py-job"] == [1]
    monkeypatch.delenv("GPUBROKER_TOKEN")
    # Without the token: the device less the partition.
    inst = client.register("outside", device=1)
    assert client.mem_info(inst).device_total == GiB - 256 * MiB
    client.request("partition_destroy", {"name": "py-job"})
    assert client.mem_info(inst).device_total == GiB


def test_token_in_a_fresh_process(client, daemon):
    # As a Slurm task starts: the token is in the environment from the start.
    token = make_partition(client, "py-env", 64 * MiB)
    code = ("import gpubroker, sys\n"
            "c = gpubroker.Client(sys.argv[1])\n"
            "i = c.register('x')\n"
            "print(c.mem_info(i).device_total)\n")
    r = run_python(code, daemon.socket, env={"GPUBROKER_TOKEN": token})
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) == 64 * MiB
    client.request("partition_destroy", {"name": "py-env"})


def test_bad_token_refused(client, daemon, monkeypatch):
    make_partition(client, "py-bad", 64 * MiB)
    monkeypatch.setenv("GPUBROKER_TOKEN", "0" * 64)
    with pytest.raises(gpubroker.BrokerPermissionError, match="invalid partition token"):
        gpubroker.Client(daemon.socket)
    # An empty variable is no token.
    monkeypatch.setenv("GPUBROKER_TOKEN", "")
    with gpubroker.Client(daemon.socket) as c:
        assert c.request("partitions")["partitions"][0]["sessions"] == 0
    client.request("partition_destroy", {"name": "py-bad"})


def test_groups_and_chunking_inside(client, daemon, monkeypatch):
    # Stream groups and chunking fit the partition, not the device: 400 MB
    # of arrays take two chunks in a 256 MiB partition, one outside (768 MiB).
    from gpubroker import ArrayRequest
    token = make_partition(client, "py-chunk", 256 * MiB, [0])
    reqs = {"state": ArrayRequest((100000, 1000), "float32", chunk_axis=0)}
    monkeypatch.setenv("GPUBROKER_TOKEN", token)
    with gpubroker.Client(daemon.socket, "in-job") as c:
        inst = c.register("solver", device=0, group="g")
        assert c.group_info("g").available == 256 * MiB
        ch, shapes = c.chunk_parameters(reqs, group="g")
        assert ch.chunks == 2 and ch.chunk_bytes <= 256 * MiB
        c.queue_request(inst, reqs)
        got = c.allocate_queue(inst)
        assert got.chunks == 2 and c.mem_info(inst).used == got.chunk_bytes
    monkeypatch.delenv("GPUBROKER_TOKEN")
    client.register("solver", device=0, group="g")
    assert client.group_info("g").available == GiB - 256 * MiB
    assert client.chunk_parameters(reqs, group="g")[0].chunks == 1
    client.request("partition_destroy", {"name": "py-chunk"})


def test_destroy_fences_what_a_live_process_maps(client, daemon):
    """A process in a destroyed partition keeps its allocation mapped: the
    range stays allocated, "fenced", in the stats until it exits (issue 24)."""
    token = make_partition(client, "py-fence", 64 * MiB, [0])
    code = ("import gpubroker, sys\n"
            "c = gpubroker.Client(sys.argv[1])\n"
            "a = c.alloc(c.register('x', device=0), 1 * 1024 * 1024)\n"
            "print(a.size, c.mem_info(a.instance).used, flush=True)\n"
            "sys.stdin.read()\n")
    p = subprocess.Popen([sys.executable, "-c", code, daemon.socket], text=True,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         env=dict(child_env(), GPUBROKER_TOKEN=token))
    try:
        # charged: what the daemon counts for it, its lease whole (the
        # allocation itself under GPUBROKER_LEASE=0).
        size, charged = map(int, p.stdout.readline().split())
        assert charged >= size
        assert client.stats(0).fenced == 0
        client.request("partition_destroy", {"name": "py-fence"})
        # partition_destroy strips its sessions before it answers.
        stats = client.stats(0)
        assert stats.fenced == charged and stats.used >= charged
        totals = client.request("status")["totals"]
        assert int(totals["fenced"]) == charged
    finally:
        p.stdin.close()
        assert p.wait(timeout=60) == 0
    # The daemon's exit watch sees the process go.
    assert wait_until(lambda: client.stats(0).fenced == 0)
