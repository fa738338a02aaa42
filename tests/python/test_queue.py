"""Queued requests and coordinated chunking with numpy-style shapes and dtypes."""

import pytest

import gpubroker
from gpubroker import ArrayRequest, dtypes
from conftest import MiB


def test_itemsize_without_numpy():
    for name, size in [("float32", 4), ("f8", 8), ("<f4", 4), ("int8", 1), ("u2", 2),
                       ("complex64", 8), ("c16", 16), ("bool", 1), ("?", 1), ("d", 8),
                       (float, 8), (int, 8), (complex, 16), (bool, 1)]:
        assert dtypes.itemsize(name) == size, name
    import ctypes
    assert dtypes.itemsize(ctypes.c_int16) == 2
    with pytest.raises(TypeError):
        dtypes.itemsize("no-such-type")
    assert dtypes.shape_tuple(5) == (5,) and dtypes.shape_tuple([2, 3]) == (2, 3)
    assert dtypes.nbytes((1000, 3), "float32") == 12000
    with pytest.raises(TypeError):
        dtypes.shape_tuple("abc")


def test_numpy_dtypes_when_available():
    np = pytest.importorskip("numpy")
    assert dtypes.itemsize(np.float32) == 4 and dtypes.itemsize(np.dtype("c16")) == 16
    assert dtypes.shape_tuple(np.zeros((2, 3)).shape) == (2, 3)
    assert dtypes.shape_tuple((np.int64(4),)) == (4,)


def test_chunk_parameters_shapes(client):
    reqs = {"state": ArrayRequest((100000, 32), "float64", chunk_axis=0),
            "params": ArrayRequest((64,), "f8", unchunkable=True),
            "t": ArrayRequest((4, 100000), "int32", chunk_axis=1)}
    ch, shapes = client.chunk_parameters(reqs, available=8 * MiB)
    assert ch.axis_length == 100000 and ch.chunks > 1
    assert ch.chunk_length * ch.chunks >= 100000
    assert shapes["state"] == (ch.chunk_length, 32)
    assert shapes["params"] == (64,)  # unchunkable keeps its shape
    assert shapes["t"] == (4, ch.chunk_length)  # chunked along its own axis
    assert ch.chunk_bytes <= 8 * MiB
    assert ch.request_bytes >= 100000 * 32 * 8
    with pytest.raises(gpubroker.OutOfMemoryError):
        client.chunk_parameters({"x": ArrayRequest((10, 1 << 20), "f8")}, available=1024)


def test_compute_chunked_shapes(client):
    reqs = {"state": ArrayRequest((100000, 32), "float64", chunk_axis=0),
            "params": ArrayRequest((64,), "f8", unchunkable=True),
            "t": ArrayRequest((4, 100000), "int32", chunk_axis=1),
            "short": ArrayRequest((500,), "f4")}
    shapes = client.compute_chunked_shapes(reqs, 2500)
    assert shapes == {"state": (2500, 32), "params": (64,), "t": (4, 2500), "short": (500,)}
    # Longer than every axis: nothing is cut.
    assert client.compute_chunked_shapes(reqs, 10 ** 9)["state"] == (100000, 32)
    with pytest.raises(gpubroker.InvalidError):
        client.compute_chunked_shapes(reqs, 0)
    # An explicit axis length (the run count of the whole request).
    ch, _ = client.chunk_parameters(reqs, available=1 << 40, axis_length=200000)
    assert ch.axis_length == 200000 and ch.chunks == 1


def test_queue_allocate_claim_and_free_label(client, other):
    a = client.register("a", group="solver")
    b = other.register("b", group="solver")
    assert client.queue_request(a, "state", shape=(100000, 32), dtype="float64") == 1
    assert client.queue_request(a, {"params": ArrayRequest((64,), "f8", unchunkable=True)}) == 2
    assert other.queue_request(b, "out", shape=(100000,), dtype="f4") == 1
    client.set_limit(device=0, size=16 * MiB)
    ch = other.allocate_queue(b)  # any member allocates the whole group's queue
    assert ch.chunks > 1 and ch.axis_length == 100000
    ev = client.wait_event("allocation_ready")
    assert int(ev.data["chunks"]) == ch.chunks and int(ev.data["instance"], 16) == a
    arrays = client.claim_ready(ev)
    assert set(arrays) == {"state", "params"}
    state = arrays["state"]
    assert state.shape == (ch.chunk_length, 32) and state.label == "state"
    assert state.size >= ch.chunk_length * 32 * 8
    assert arrays["params"].shape == (64,)
    state.write(b"chunk 0")
    assert state.read(7) == b"chunk 0"
    theirs = other.claim_ready(other.wait_event("allocation_ready"))
    assert theirs["out"].shape == (ch.chunk_length,)
    live = client.stats(0).live
    assert client.free_label("state", a) == 1
    assert state.freed and client.stats(0).live == live - 1
    with pytest.raises(gpubroker.NotFoundError):
        client.free_label("state")
    del arrays, state
    assert other.group_info("solver").used > 0
    with pytest.raises(gpubroker.InvalidError):
        client.allocate_queue(a)  # nothing queued any more


def test_allocate_queue_own(client, other):
    """"own": true allocates the instance's own queue alone (cubie 0.17's
    rule), chunked in the group's memory; another member's requests, here
    another process's, stay queued until it allocates them itself."""
    a = client.register("a", group="owners")
    b = other.register("b", group="owners")
    assert other.queue_request(b, "half", shape=(1000,), dtype="f8") == 1
    with pytest.raises(gpubroker.InvalidError) as e:
        client.allocate_queue_warned(a, own=True)  # nothing of a's queued
    assert "nothing is queued on the instance" in str(e.value)
    assert client.queue_request(a, "mine", shape=(1000,), dtype="f8") == 1
    assert client.allocate_queue_warned(a, own=True) == []
    ev = client.wait_event("allocation_ready")
    assert int(ev.data["instance"], 16) == a
    assert set(client.claim_ready(ev)) == {"mine"}
    # b's request is still queued: b's own call allocates it, and only it.
    assert other.queue_request(b, "rest", shape=(1000,), dtype="f8") == 2
    ch = other.allocate_queue(b)
    assert ch.chunks == 1
    theirs = other.claim_ready(other.wait_event("allocation_ready"))
    assert set(theirs) == {"half", "rest"}
    with pytest.raises(gpubroker.InvalidError):
        client.allocate_queue(a)  # nothing left in the group
    with pytest.raises(gpubroker.InvalidError):  # own must be a boolean
        client.request("allocate_queue", {"instance": "%016x" % a, "own": "yes"})


def test_queue_request_rejects_bad_shapes(client):
    inst = client.register("q")
    with pytest.raises(gpubroker.InvalidError):
        client.queue_request(inst, "x", shape=(0, 3))
    with pytest.raises(gpubroker.InvalidError):
        client.queue_request(inst, "x", shape=(1,) * 9)
    with pytest.raises(gpubroker.InvalidError):
        client.queue_request(inst, "x", shape=(10, 3), chunk_axis=2)
    with pytest.raises(TypeError):
        client.queue_request(inst, "x")


def test_quota_for_a_group_in_active_mode(client, other):
    """The group as a whole has room, but one member's headroom is short."""
    client.set_mode("active")
    tight = client.register("tight", proportion=0.01, group="g")
    other.register("roomy", proportion=0.5, group="g")
    client.queue_request(tight, "big", shape=(4, 1 << 20), dtype="f8", unchunkable=True)
    with pytest.raises(gpubroker.QuotaError) as e:
        client.allocate_queue(tight)
    assert e.value.code == gpubroker.errors.E_QUOTA
    assert client.mem_info(tight).used == 0  # nothing allocated


def test_queue_host_memory(client):
    a = client.register("h", group="staging")
    reqs = {"state": ArrayRequest((4096, 256), "f4"),
            "staging": ArrayRequest((4096, 64), "f4", memory="pinned"),
            "table": ArrayRequest((16,), "f8", unchunkable=True, memory="mapped")}
    # The pinned array is cut like the others but does not count in the fit:
    # 4 MiB of state runs in 512 KiB is 8 chunks (10 if the 1 MiB of
    # staging counted).
    ch, shapes = client.chunk_parameters(reqs, available=512 * 1024)
    assert ch.chunks == 8 and shapes["staging"] == (512, 64) and shapes["table"] == (16,)
    with pytest.raises(gpubroker.InvalidError):
        client.queue_request(a, "x", shape=(4,), memory="managed-ish")
    assert client.queue_request(a, reqs) == 3
    client.allocate_queue(a)
    ev = client.wait_event("allocation_ready")
    assert {x["label"]: x["type"] for x in ev.data["arrays"]} == {
        "state": "device", "staging": "pinned", "table": "mapped"}
    arrays = client.claim_ready(ev)
    staging, table = arrays["staging"], arrays["table"]
    assert staging.kind == "host" and staging.device == -1 and staging.label == "staging"
    assert staging.size == 4096 * 64 * 4 and arrays["state"].device == 0
    staging.write(b"pinned bytes", 100)
    assert staging.read(12, 100) == b"pinned bytes"
    assert client.host_device_pointer(table) == table.ptr  # sim: the host address
    assert client.free_label("staging", a) == 1
    assert staging.freed
    assert client.free_label("table") == 1 and table.freed
    assert client.request("status")["host_used"] == "0"
    arrays["state"].free()
