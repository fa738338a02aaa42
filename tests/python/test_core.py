"""The gpubroker package against a real gpubrokerd (sim backend): connect,
register, alloc, free, info, statistics, lifetimes, sharing."""

import gc
import os
import textwrap
import weakref

import pytest

import gpubroker
from conftest import KiB, MiB, GiB, both_lease_modes, live_bytes, run_python, wait_until


def test_version_and_backend(client):
    assert gpubroker.library_version() == "0.1.0"
    assert client.backend == "sim"
    assert client.request("status")["backend"] == "sim"


def test_socket_from_environment(daemon, monkeypatch):
    # socket=None: the C library reads $GPUBROKER_SOCKET.
    monkeypatch.setenv("GPUBROKER_SOCKET", daemon.socket)
    with gpubroker.Client() as c:
        assert c.request("status")["clients"] == 1


def test_alloc_free_counts_daemon_side(client):
    inst = client.register("solver", device=1)
    before = client.stats(1)
    a = client.alloc(inst, 3 * MiB + 1)
    assert a.size >= 3 * MiB + 1 and a.size % 256 == 0
    assert a.device == 1 and a.ptr != 0 and a.kind == "alloc" and a.instance == inst
    st = client.stats(1)
    assert st.live == before.live + 1 and st.used == a.size and st.allocs == before.allocs + 1
    info = client.mem_info(inst)
    assert info.used == a.size and info.device_total == 1 * GiB
    assert info.free == info.cap - a.size
    a.free()
    assert a.freed
    st = client.stats(1)
    assert st.live == 0 and st.used == 0 and st.frees == before.frees + 1
    a.free()  # idempotent
    assert client.stats(1).frees == before.frees + 1


@both_lease_modes
def test_free_async(client, lease):
    """gpb_free_async: with the sim backend there are no streams, so the
    free is done on return, of a block in a lease as of a daemon
    allocation. (The stream-ordered case is cuda's: tests/gpu/test-order.c.)"""
    inst = client.register("async")
    # A quarter of a 2 MiB slab at most: in a lease (larger: an alloc).
    a = client.alloc(inst, 256 * KiB)
    b = client.alloc(inst, 256 * KiB)
    assert client.mem_info(inst).leased == (2 * MiB if lease else 0)
    a.free_async()
    assert a.freed and live_bytes(client, inst) == 256 * KiB
    a.free_async()  # idempotent
    client.free_async(b.id, stream=0)
    assert b.freed and live_bytes(client, inst) == 0
    if not lease:
        assert client.stats(0).live == 0
    with pytest.raises(gpubroker.NotFoundError):
        client.free_async(0x1234)


def test_alloc_array_shape_and_dtype(client):
    inst = client.register("arr")
    a = client.alloc_array(inst, (1000, 3), "float64")
    assert a.shape == (1000, 3) and a.size >= 24000
    info = client.mem_info(inst)
    # A block of a lease: the daemon charges the lease whole (used).
    assert info.in_use == a.size and info.used == info.leased >= a.size


def test_context_manager_frees(client):
    inst = client.register("ctx")
    with client.alloc(inst, MiB) as a:
        assert live_bytes(client, inst) == MiB
    assert a.freed and live_bytes(client, inst) == 0


def test_client_context_manager_releases_everything(daemon, other):
    with gpubroker.Client(daemon.socket) as c:
        inst = c.register("short-lived")
        c.alloc(inst, MiB)  # dropped at once, but ...
        keep = c.alloc(inst, 2 * MiB)
        assert other.stats(0).live == 1
    assert c.closed and keep.freed
    assert wait_until(lambda: other.stats(0).live == 0)
    assert other.request("status")["instances"] == 0


def test_garbage_collection_frees(client):
    inst = client.register("gc")
    a = client.alloc(inst, MiB)
    b = client.alloc(inst, MiB)
    ref = weakref.ref(a)
    assert live_bytes(client, inst) == 2 * MiB
    del a
    gc.collect()
    assert ref() is None
    assert live_bytes(client, inst) == MiB
    # A reference cycle through the allocation is collected too.
    holder = [b]
    holder.append(holder)
    del b
    del holder
    gc.collect()
    assert live_bytes(client, inst) == 0


def test_allocation_keeps_its_client_alive(daemon, other):
    c = gpubroker.Client(daemon.socket)
    a = c.alloc(c.register("keep"), MiB)
    a.write(b"still here")
    del c
    gc.collect()
    assert not a.freed and a.read(10) == b"still here"
    assert other.stats(0).live == 1
    del a
    gc.collect()
    # The last reference to the allocation was the last to the client too.
    assert wait_until(lambda: other.request("status")["clients"] == 1)
    assert other.stats(0).live == 0


def test_allocation_after_client_closed(daemon, other):
    c = gpubroker.Client(daemon.socket)
    a = c.alloc(c.register("closing"), MiB)
    c.close()
    c.close()  # idempotent
    assert a.freed and a.ptr != 0
    a.free()  # no-op, no crash
    with pytest.raises(gpubroker.InvalidError):
        a.read(4)
    with pytest.raises(gpubroker.InvalidError):
        c.alloc(1, MiB)
    del a
    gc.collect()
    assert wait_until(lambda: other.stats(0).live == 0)


def test_read_write_and_memoryview(client):
    a = client.alloc(client.register("rw"), 4096)
    a.write(b"abcdef", offset=100)
    assert a.read(6, offset=100) == b"abcdef"
    view = a.memoryview()
    assert len(view) == a.size and view.readonly is False
    assert bytes(view[100:106]) == b"abcdef"
    view[0:3] = b"xyz"
    assert a.read(3) == b"xyz"
    del view
    with pytest.raises(gpubroker.InvalidError):
        a.read(8, offset=a.size - 4)
    with pytest.raises(gpubroker.InvalidError):
        a.write(b"12345678", offset=a.size - 4)


@pytest.mark.no_lease  # attaches by the maker's id: a daemon allocation's (the lease variant follows)
def test_attach_detach(client, other):
    a = client.alloc(client.register("maker"), 8192)
    a.write(b"shared bytes")
    b = other.attach(a.id)
    assert b.kind == "attach" and b.size == a.size and b.read(12) == b"shared bytes"
    with pytest.raises(gpubroker.InvalidError):
        other.attach(a.id)  # attached already through this client
    b.write(b"SHARED")
    assert a.read(6) == b"SHARED"
    b.free()  # detaches: the maker's allocation lives on
    assert client.stats(0).live == 1 and a.read(6) == b"SHARED"
    c = other.attach(a.id)
    del c
    gc.collect()
    other.attach(a.id).free()  # detached by the collection, so attachable again
    with pytest.raises(gpubroker.NotFoundError):
        other.attach(0x1234)


def test_attach_block_of_a_lease(client, other):
    """A block served from a lease has a local id the daemon does not know:
    another client's attach of it is refused like an unknown id. Attached
    through its own client it becomes a daemon allocation at the same bytes
    (lease_carve), whose id other clients attach; freeing the block ends
    both (include/gpubroker.h, gpb_allocation.id)."""
    inst = client.register("maker")
    a = client.alloc(inst, 8192)
    assert a.id >> 48 == 0x10ca and client.mem_info(inst).leases == 1
    a.write(b"shared bytes")
    with pytest.raises(gpubroker.NotFoundError):
        other.attach(a.id)
    mine = client.attach(a.id)
    assert mine.id >> 48 != 0x10ca and mine.kind == "attach" and mine.size == a.size
    b = other.attach(mine.id)
    assert b.size == a.size and b.read(12) == b"shared bytes"
    b.write(b"SHARED")
    assert a.read(6) == b"SHARED" and mine.read(6) == b"SHARED"
    with pytest.raises(gpubroker.InvalidError):
        other.attach(mine.id)  # attached already through this client
    b.free()  # detaches: the block lives on
    assert a.read(6) == b"SHARED" and client.mem_info(inst).in_use == a.size


@both_lease_modes
def test_data_crosses_processes(client, lease):
    """Bytes written through this process's Allocation are read by another
    process that attaches it, and its answer is read back here: the sim
    backend's memory is shared, not copied. A block of a lease is shared
    by the id of its carve (its own client's attachment of it)."""
    a = client.alloc(client.register("xproc"), MiB)
    shared = client.attach(a.id) if lease else a
    view = a.memoryview()
    pattern = bytes(range(256)) * 16
    view[:len(pattern)] = pattern
    code = textwrap.dedent("""
        import sys, gpubroker
        sock, ident = sys.argv[1], int(sys.argv[2], 16)
        with gpubroker.Client(sock, "child") as c:
            b = c.attach(ident)
            got = bytes(b.memoryview()[:4096])
            assert got == bytes(range(256)) * 16, got[:16]
            b.write(b"answer from %d" % 7, offset=8192)
            print(b.size)
        """)
    r = run_python(code, client.socket, "%016x" % shared.id)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) == a.size
    assert bytes(view[8192:8205]) == b"answer from 7"


def test_info_records(client, other):
    i1 = client.register("one", proportion=0.25, group="g")
    i2 = other.register("two", group="g")
    info = client.instance_info(i1)
    assert (info.name, info.group, info.proportion, info.device) == ("one", "g", 0.25, 0)
    assert other.instance_info(i1).instance == i1  # any connection may look
    pol = client.policy_info(0)
    assert pol.mode == "passive" and pol.manual == 0.25 and pol.manual_instances == 1
    assert pol.auto_instances == 1 and pol.total == GiB
    g = client.group_info("g")
    assert g.members == 2 and g.used == 0
    info = client.set_group(i1, "h")
    assert info.group == "h" and client.group_info("g").members == 1
    info = client.set_auto(i1)
    assert info.proportion == 0 and info.share == 0.5
    info = other.set_proportion(i2, 0.5)
    assert info.proportion == 0.5
    client.unregister(i1)
    with pytest.raises(gpubroker.NotFoundError):
        client.instance_info(i1)


def test_unregister_busy_instance(client):
    inst = client.register("busy")
    a = client.alloc(inst, 256)
    with pytest.raises(gpubroker.InvalidError):
        client.unregister(inst)
    a.free()
    client.unregister(inst)


@both_lease_modes
def test_mapping_stats(client, lease):
    before = gpubroker.mapping_stats()
    inst = client.register("map", device=1)
    a = client.alloc(inst, MiB)
    after = gpubroker.mapping_stats()
    assert after.opens == before.opens + 1 and after.open_now == before.open_now + 1
    a.free()
    # The instance's lease goes back with it (gpb_unregister returns its
    # idle leases; another instance's blocks come from leases of its own).
    client.unregister(inst)
    # The emptied slab stays mapped (kept, issue 18): the next allocation
    # there opens nothing.
    kept = gpubroker.mapping_stats()
    assert kept.closes == before.closes and kept.open_now == after.open_now
    b = client.alloc(a_inst := client.register("map2", device=1), MiB)
    assert gpubroker.mapping_stats().opens == after.opens
    b.free()
    client.unregister(a_inst)
    # Let go: unmapped now, and given back to the daemon.
    assert client.release_kept() >= 1
    assert gpubroker.mapping_stats().closes == before.closes + 1
    assert client.release_kept() == 0


def test_device_uuid_registration(client):
    uuid = client.request("devices")["devices"][1]["uuid"]
    inst = client.register("by-uuid", device_uuid=uuid)
    assert client.instance_info(inst).device == 1
    # Everywhere a device is named, a UUID does too.
    assert client.device_index(uuid) == 1
    a = client.alloc(inst, 4096)  # kept: an Allocation frees itself when dropped
    assert client.stats(uuid).live == 1 and client.stats(0).live == 0
    # used: what the instance is charged, its lease whole.
    assert client.mem_info(inst).in_use == a.size
    assert client.policy_info(uuid).used == client.mem_info(inst).used >= a.size
    assert client.policy_info(0).used == 0
    with pytest.raises(gpubroker.InvalidError):
        client.device_index("GPU-no-such-device")


def test_interpreter_exit_with_live_allocations(daemon, other):
    """Allocations still referenced at exit (some in cycles, some of a closed
    client) are released by the finalizers without errors or crashes."""
    code = textwrap.dedent("""
        import sys, gpubroker
        c = gpubroker.Client(sys.argv[1])
        inst = c.register("exit")
        keep = [c.alloc(inst, 4096) for _ in range(10)]
        cycle = [c.alloc(inst, 4096)]
        cycle.append(cycle)
        closed = gpubroker.Client(sys.argv[1])
        orphan = closed.alloc(closed.register("orphan"), 4096)
        closed.close()
        print("ok")
        """)
    r = run_python(code, daemon.socket)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
    assert r.stderr == ""
    assert wait_until(lambda: other.request("status")["clients"] == 1)
    assert other.stats(0).live == 0


@both_lease_modes
def test_threads_share_a_client(client, lease):
    """Allocations made, freed and collected from several threads at once:
    from the client's leases, or one daemon request each."""
    import threading

    inst = client.register("threads")
    failures = []

    def work():
        try:
            for i in range(100):
                a = client.alloc(inst, 256 * (1 + i % 7))
                a.write(b"x")
                if i % 2:
                    a.free()
                del a  # the rest go by reference counting
        except Exception as e:  # noqa: BLE001
            failures.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    gc.collect()
    assert live_bytes(client, inst) == 0
    st = client.stats(0)
    if lease:
        # The leases served them all: no daemon allocation came or went
        # but a lease for each arena the threads were dealt (one per CPU,
        # at most 8: lease.h).
        arenas = min(8, os.cpu_count() or 1)
        assert client.mem_info(inst).leased > 0 and st.allocs == st.live
        assert 1 <= st.allocs <= min(4, arenas)
    else:
        assert st.live == 0 and st.allocs >= 400 and st.frees >= 400


def test_host_memory(client):
    inst = client.register("host")
    p = client.alloc_host(inst, 10000)
    m = client.alloc_host(inst, 4096, mapped=True)
    assert p.kind == "host" and p.size >= 10000 and p.device == -1
    assert p.read(16) == bytes(16)  # zero-filled
    p.write(b"pinned bytes")
    assert bytes(p.memoryview()[:12]) == b"pinned bytes"
    assert client.host_device_pointer(m) == m.ptr  # sim: the host address
    with pytest.raises(gpubroker.InvalidError):
        client.host_device_pointer(p)  # pinned, not mapped
    status = client.request("status")
    assert status["host_allocations"] == 2 and int(status["host_used"]) == p.size + m.size
    assert client.stats(0).used == 0  # not device memory
    del p
    gc.collect()  # freed with its last reference, like device memory
    assert client.request("status")["host_allocations"] == 1
    m.free()
    assert int(client.request("status")["host_used"]) == 0
