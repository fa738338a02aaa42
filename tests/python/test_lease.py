"""Leases through the package (issue 27): a Client allocates from leases by
default, with no daemon request per allocation."""

import re

import gpubroker
from conftest import both_lease_modes

REQUEST = re.compile(r'^gpubroker_requests_total\{method="([a-z_]+)",result="[a-z_]+"\} (\d+)$',
                     re.M)


def requests(observer, skip=("metrics", "mem_info")):
    """The daemon's requests answered so far (its `metrics`, read through
    @observer), less the methods this test sends to look."""
    text = observer.request("metrics")["text"]
    return sum(int(n) for method, n in REQUEST.findall(text) if method not in skip)


@both_lease_modes
def test_client_allocates_from_leases_by_default(daemon, other, monkeypatch, lease):
    # No idle return in the middle of the loop, however slow the machine.
    monkeypatch.setenv("GPUBROKER_LEASE_IDLE_MS", "600000")
    with gpubroker.Client(daemon.socket, "leaser") as c:
        inst = c.register("leaser")
        keep = [c.alloc(inst, 256 << (i % 9)) for i in range(10)]  # 256 B - 64 KiB
        info = c.mem_info(inst)  # waits for its reply: c's requests are done
        live = sum(a.size for a in keep)
        if lease:
            assert info.leased > 0 and info.leases >= 1 and info.in_use == live
            assert all(a.id >> 48 == 0x10ca for a in keep)  # local ids
        else:
            assert (info.leased, info.in_use, info.leases) == (0, 0, 0) and info.used == live
        before = requests(other)
        for i in range(100):
            c.alloc(inst, 256 << (i % 9)).free()
        c.mem_info(inst)  # settles c: a quiet free is ordered before it
        sent = requests(other) - before
        if lease:
            assert sent == 0, "%d daemon requests for 100 alloc+free from leases" % sent
            assert c.mem_info(inst).in_use == live
            # The device's stats count the leases too (every client's), and
            # what their libraries reported using in them: in_use rode on
            # the first lease, sent before the blocks were allocated.
            st = other.stats(0)
            assert st.leased >= info.leased and st.leased <= st.used
            assert st.in_use <= st.leased
        else:
            assert sent >= 100  # one alloc (and a free) each
        del keep


def test_stream_order_leases(client, daemon):
    # gpb_alloc_async (issue 29): a stream's blocks come from leases of its
    # own, and a block freed on its stream is that stream's again at once
    # (sim runs no stream work: the stream is only the leases' key here).
    inst = client.register("streams")
    plain = client.alloc(inst, 4096)
    before = client.mem_info(inst).leases
    s = 0x5000  # a stream's handle, as an int (never dereferenced on sim)
    a = client.alloc(inst, 4096, stream=s)
    assert a.id >> 48 == 0x10ca
    assert client.mem_info(inst).leases == before + 1  # the stream's own lease
    ptr = a.ptr
    a.free_async(s)
    b = client.alloc(inst, 4096, stream=s)
    assert b.ptr == ptr  # served again at once, in stream order
    c = client.alloc(inst, 4096, stream=0)  # the legacy default stream: its own leases
    assert client.mem_info(inst).leases == before + 2 and c.ptr != ptr
    for x in (b, c, plain):
        x.free()
    assert client.mem_info(inst).in_use == 0
    try:
        client.alloc(inst, 4096, timeout=1, stream=s)
    except gpubroker.InvalidError as e:
        assert "not both" in e.detail
    else:
        raise AssertionError("a timeout and a stream were taken together")
