"""Sharing by name through the package: export, open_shared, unexport, and
what was opened outliving its exporter."""

import textwrap

import pytest

import gpubroker
from conftest import MiB, both_lease_modes, run_python_as_nobody, wait_until


@both_lease_modes
def test_export_open_free(client, other, lease):
    a = client.alloc(client.register("exporter"), 64 * 1024)
    a.write(b"named bytes")
    client.export(a, "frame")
    with pytest.raises(gpubroker.InvalidError):
        client.export(a, "again")  # one name per allocation
    second = client.alloc(a.instance, 4096)
    with pytest.raises(gpubroker.ExistsError):
        client.export(second, "frame")  # one allocation per name of this user
    client.free(second)
    b = other.open_shared("frame")
    assert b.kind == "attach" and b.read(11) == b"named bytes"
    if lease:
        # A block of a lease is exported as its carve: a daemon allocation
        # at the same bytes, with an id of the daemon's.
        assert a.id >> 48 == 0x10ca and b.id >> 48 != 0x10ca
    else:
        assert b.id == a.id
    b.write(b"NAMED")
    assert a.read(5) == b"NAMED"
    with pytest.raises(gpubroker.NotFoundError):
        other.open_shared("no-such-name")
    # Freed by its exporter while open: the bytes stay for the opener,
    # the name is gone for anyone else.
    live = client.stats(0).live
    a.free()
    assert client.stats(0).live == live  # still allocated: an orphan
    assert b.read(5) == b"NAMED"
    with pytest.raises(gpubroker.NotFoundError):
        client.open_shared("frame")
    b.free()
    if not lease:  # a carve is no daemon object of its own in `live`
        assert client.stats(0).live == live - 1


def test_lease_of_an_orphaned_carve_goes_back(client, other):
    """A block freed by its exporter while another process has it open: its
    lease goes back all the same (an orphan lease, charged to the device
    until that process lets go), the instance can be unregistered, and the
    opener keeps its bytes."""
    inst = client.register("exporter")
    a = client.alloc(inst, 64 * 1024)
    a.write(b"ORPHAN")
    client.export(a, "frame")
    b = other.open_shared("frame")
    a.free()
    # Its range is the opener's: what this process allocates next goes
    # elsewhere, and the opener's bytes stay as they were.
    c = client.alloc(inst, 64 * 1024)
    c.write(b"REUSED")
    assert b.read(6) == b"ORPHAN"
    c.free()
    client.unregister(inst)  # its idle lease goes back first, orphaned
    assert b.read(6) == b"ORPHAN"
    assert client.stats(0).used >= 64 * 1024  # the device still holds it
    b.free()
    other.request("status")  # settles the quiet detach
    assert wait_until(lambda: client.stats(0).used == 0)


def test_unexport_and_close(daemon, client, other):
    a = client.alloc(client.register("x"), 4096)
    client.export(a.id, "gone-soon")
    client.unexport("gone-soon")
    with pytest.raises(gpubroker.NotFoundError):
        client.unexport("gone-soon")
    with pytest.raises(gpubroker.NotFoundError):
        other.open_shared("gone-soon")
    client.export(a, "until-close")
    held = other.open_shared("until-close")
    client.close()
    # The daemon learns of the close asynchronously; then the name is gone
    # and what was opened is still readable.
    def withdrawn():
        try:
            other.open_shared("until-close")
        except gpubroker.InvalidError:
            return False  # still there (already mapped through this client)
        except gpubroker.NotFoundError:
            return True
        return False
    assert wait_until(withdrawn)
    assert held.read(4) == bytes(4)
    held.free()
    assert other.stats(0).live == 0


def test_other_user_opens(daemon, client):
    import os
    if os.geteuid() != 0:
        pytest.skip("needs root to run a helper as another user")
    inst = client.register("root")
    small = client.alloc(inst, 4096)
    with pytest.raises(gpubroker.InvalidError) as e:
        client.export(small, "to-nobody", uid=65534)  # shares its slab
    assert "slab" in e.value.detail
    big = client.alloc(inst, 4 * MiB)
    big.write(b"for nobody")
    client.export(big, "to-nobody", uid=65534)
    code = textwrap.dedent("""
        import os, sys, gpubroker
        assert os.getuid() == 65534
        with gpubroker.Client(sys.argv[1]) as c:
            try:
                c.open_shared("to-nobody")  # a bare name: nobody's own names only
                print("found another user's export by its bare name")
            except gpubroker.NotFoundError:
                pass
            print(c.open_shared("to-nobody", owner=0).read(10).decode())
        """)
    r = run_python_as_nobody(code, daemon.socket)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "for nobody"
