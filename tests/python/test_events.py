"""Events through fileno()/dispatch() and handlers registered with on()."""

import select

import pytest

import gpubroker
from conftest import KiB, MiB, both_lease_modes, settle


def test_cap_changed_when_another_instance_registers(client, other):
    client.set_mode("active")
    seen = []
    client.on("cap_changed", seen.append)
    mine = client.register("first")
    assert client.mem_info(mine).cap == 1024 * MiB
    assert client.dispatch() == []  # its own change comes in the reply, not as an event
    other.register("second")
    # The descriptor polls readable once the event is there.
    r, _, _ = select.select([client.fileno()], [], [], 5)
    assert r, "event fd never became readable"
    ev = client.wait_event("cap_changed")
    assert ev.data["instance"] == "%016x" % mine
    assert int(ev.data["cap"]) == 512 * MiB and ev.data["mode"] == "active"
    assert seen == [ev]
    assert client.mem_info(mine).cap == 512 * MiB


def test_handler_for_every_event_and_errors_propagate(client, other):
    client.set_mode("active")
    client.register("a")
    names = []
    client.on("*", lambda ev: names.append(ev.name))

    def boom(ev):
        raise RuntimeError("handler failed")

    client.on("cap_changed", boom)
    other.register("b")
    with pytest.raises(RuntimeError, match="handler failed"):
        client.wait_event("cap_changed")
    assert names == [] or names == ["cap_changed"]


def test_wait_event_times_out(client):
    with pytest.raises(gpubroker.BrokerTimeoutError):
        client.wait_event("cap_changed", timeout=0.2)


@both_lease_modes
def test_invalidate_releases_allocations(client, other, lease):
    # A quarter of a 2 MiB slab at most: in a lease (larger: an alloc).
    mine = client.alloc(client.register("victim"), 256 * KiB)
    their_inst = other.register("other-victim")
    theirs = other.alloc(their_inst, 256 * KiB)
    # What the daemon charges for it: the allocation, or its lease whole.
    charged = other.mem_info(their_inst).used
    assert charged == (2 * MiB if lease else 256 * KiB)
    assert client.stats(0).live == 2
    client.invalidate_all()
    ev = client.wait_event("invalidate")
    assert ev.data["reason"] == "invalidate_all"
    assert mine.freed
    mine.free()  # nothing to do: the daemon released it
    # The other connection has read nothing yet: its range stays allocated
    # ("fenced") until its library answers the event, since until then it
    # may still write there. client's own range went with its answer, which
    # its library sent before this request.
    st = client.stats(0)
    assert (st.live, st.used) == (1, charged)
    assert other.wait_event("invalidate").data["reason"] == "invalidate_all"
    assert theirs.freed
    # Its library answered as it read the event, without waiting for the
    # reply: ordered before other's next request only, so settle it before
    # looking through client.
    settle(other)
    assert client.stats(0).live == 0


def test_set_allocator(client):
    a = client.alloc(client.register("alloc"), MiB)
    with pytest.raises(gpubroker.InvalidError):
        client.set_allocator("bogus")
    with pytest.raises(gpubroker.NotSupportedError):
        client.set_allocator("async")  # not on sim
    client.set_allocator("direct")
    assert client.wait_event("invalidate").data["reason"] == "set_allocator"
    assert a.freed and client.stats(0).live == 0
    client.set_allocator("pool")


def test_shutdown_event(daemon, client):
    daemon.terminate()
    ev = client.wait_event("shutdown", timeout=10)
    assert ev.data["reason"] == "SIGTERM"
