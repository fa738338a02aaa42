"""`gpubrokerctl top` on a terminal: the full-screen view in tmux against a
daemon with a scripted workload (two clients, a partition, a recall, an
eviction). capture-pane shows the bars and rows with the figures the other
commands report; the keys work; the terminal is restored on q and on
SIGINT; a user who is not an administrator sees only what is theirs.

tmux runs on a server of this test's own (-L), so nothing of anyone
else's is touched."""

import json
import os
import re
import shutil
import subprocess
import tempfile
import time

import pytest

from conftest import NOBODY, daemon_env, env_path, settle

MiB = 1 << 20



class Tmux:
    """One tmux server and session (150x50) running sh."""

    def __init__(self):
        self.sock = "gpb-top-%d-%d" % (os.getpid(), time.monotonic_ns())
        self.tmux("new-session", "-d", "-s", "t", "-x", "150", "-y", "50", "sh")

    def tmux(self, *args):
        # The daemon's environment (no libasan preloaded into tmux and sh,
        # which are not ours; gpubrokerctl under ASan with the daemon's
        # full checks, leaks included: a leak fails its exit status).
        return subprocess.run(["tmux", "-L", self.sock, *args], check=True, capture_output=True,
                              text=True, env=dict(daemon_env(), TERM="xterm")).stdout

    def send(self, *keys):
        self.tmux("send-keys", "-t", "t", *keys)

    def line(self, text):
        self.send("-l", text)
        self.send("Enter")

    def screen(self):
        return self.tmux("capture-pane", "-p", "-t", "t")

    def alternate(self):
        return self.tmux("display-message", "-p", "-t", "t", "#{alternate_on}").strip() == "1"

    def wait_for(self, pred, timeout=30.0, what=""):
        deadline = time.monotonic() + timeout
        while True:
            s = self.screen()
            if (pred(s) if callable(pred) else pred in s):
                return s
            if time.monotonic() > deadline:
                raise AssertionError("waited for %s; the screen:\n%s" % (what or pred, s))
            time.sleep(0.1)

    def close(self):
        subprocess.run(["tmux", "-L", self.sock, "kill-server"], capture_output=True)


@pytest.fixture
def tmux():
    if shutil.which("tmux") is None:
        why = "no tmux (tools/deps.sh installs it)"
        if os.environ.get("GPB_TEST_PACKAGES") == "installed":
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    t = Tmux()
    yield t
    t.close()


def ctl(daemon, *args, json_out=True):
    cmd = [env_path("GPUBROKERCTL"), "--socket", daemon.socket]
    cmd += ["--output", "json"] if json_out else []
    r = subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout) if json_out else r.stdout


def table_cell(text, name, column):
    """The @column of the row named @name in a table of gpubrokerctl's."""
    lines = text.splitlines()
    head = lines[0].split()
    for ln in lines[1:]:
        cells = re.split(r"\s{2,}", ln.strip())
        if name in cells:
            return cells[head.index(column)]
    raise AssertionError("no row %s in:\n%s" % (name, text))


def start_top(tmux, daemon, stamp, prefix="", alternate=True):
    """top in the tmux shell, the terminal's settings saved before and after
    (@alternate: the terminal has an alternate screen, which top takes)."""
    tmux.line("stty -g > %s.before; echo marker-$((6*7)); %s%s -s %s top; echo exit=$?; "
              "stty -g > %s.after; echo saved-$((1+1))"
              % (stamp, prefix, env_path("GPUBROKERCTL"), daemon.socket, stamp))
    tmux.wait_for("gpubroker top  q quit", what="top's screen")
    assert tmux.alternate() == alternate


def check_restored(tmux, stamp, alternate=True):
    # The settings are saved after the exit status: wait for the line that
    # says so (its command line reads saved-$((1+1))).
    s = tmux.wait_for(lambda s: "exit=0" in s and "saved-2" in s,
                      what="top's exit status 0, then the settings saved")
    assert not tmux.alternate()
    with open(stamp + ".before") as a, open(stamp + ".after") as b:
        assert a.read() == b.read()  # echo, canonical mode and the rest as before
    if not alternate:  # a vt100 has no screen to go back to: top's stays
        return
    # What the shell printed before top is back (the command line says
    # marker-$((6*7)), only its output says 42).
    assert "marker-42" in s and "gpubroker top  q quit" not in s


def test_top_live_view(daemon, tmux, tmp_path):
    import gpubroker

    ctl(daemon, "partition-create", "p1", "--uid", "1000", "--size", "64M", json_out=False)
    with gpubroker.Client(daemon.socket, "c-one") as one, \
            gpubroker.Client(daemon.socket, "c-two") as two:
        big = one.alloc(one.register("i-one", proportion=0.5), 48 * MiB)
        # Small blocks: from a lease (c-two's recall below is of it).
        i_two = two.register("i-two")
        small = [two.alloc(i_two, 64 * 1024) for _ in range(8)]
        settle(one)
        settle(two)
        stamp = str(tmp_path / "stty")
        start_top(tmux, daemon, stamp)

        # Rows with the figures `clients` reports, the larger user first.
        s = tmux.wait_for(lambda s: "c-one" in s and "c-two" in s, what="both clients")
        table = ctl(daemon, "clients", json_out=False)
        for name in ("c-one", "c-two"):
            row = [ln for ln in s.splitlines() if name in ln][0]
            assert table_cell(table, name, "USED") in row, (row, table)
        assert s.index("c-one") < s.index("c-two")
        assert re.search(r"RECALLS +WAIT +IDLE +AGE", s), s
        # A bar per device, as wide as the terminal, with its legend, and
        # the partition with its guarantee.
        bars = [ln for ln in s.splitlines() if ln.startswith("[") and ln.endswith("]")]
        assert len(bars) == 2 and all(len(b) == 150 for b in bars), s
        assert "#" in bars[0] and "." in bars[0]
        assert "partition p1 (uid 1000): guaranteed 64.0 MiB" in s
        assert "in use" in s and "leased free" in s and "kept" in s
        assert "= leased free 0 B" not in s.split("GPU 1")[0]  # c-two's lease

        # Events: a recall (trim asks every holder for its idle leases),
        # an eviction.
        ctl(daemon, "trim", json_out=False)
        tmux.wait_for("lease recall(s) sent", what="the recall event")
        session = [c["session"] for c in ctl(daemon, "clients")["clients"]
                   if c["name"] == "c-two"][0]
        ctl(daemon, "evict", session, json_out=False)
        tmux.wait_for(lambda s: "client c-two" in s and "left" in s, what="the eviction")
        tmux.wait_for("1 client(s) evicted by an operator")
        ctl(daemon, "invalidate", json_out=False)
        tmux.wait_for("invalidate: every allocation released", what="the invalidate event")

        # Keys: sort, pause, one device after the other, quit.
        tmux.send("s")
        tmux.wait_for("sort CAP")
        tmux.send("p")
        tmux.wait_for("PAUSED")
        tmux.send("p")
        tmux.wait_for(lambda s: "PAUSED" not in s, what="unpaused")
        tmux.send("d")
        s = tmux.wait_for("one device")
        assert "GPU 0" in s and "GPU 1" not in s
        tmux.send("d")
        tmux.wait_for(lambda s: "GPU 1" in s and "GPU 0" not in s, what="device 1 alone")
        tmux.send("d")
        tmux.wait_for(lambda s: "GPU 0" in s and "GPU 1" in s and "one device" not in s,
                      what="both devices again")
        tmux.send("q")
        check_restored(tmux, stamp)
        one.free(big)
        del small  # its client was evicted: the daemon has it back


def test_top_ends_on_sigint(daemon, tmux, tmp_path):
    """On a plain vt100 (no colour) too: the bars are characters."""
    stamp = str(tmp_path / "stty")
    start_top(tmux, daemon, stamp, prefix="TERM=vt100 ", alternate=False)
    s = tmux.wait_for(lambda s: any(ln.startswith("[.") for ln in s.splitlines()), what="a bar")
    assert "GPU 0" in s and "GPU 1" in s
    tmux.send("C-c")
    check_restored(tmux, stamp, alternate=False)


def test_top_as_another_user(daemon, client, tmux, tmp_path):
    """nobody sees the others' clients only as a count and a total."""
    inst = client.register("i-secret")
    a = client.alloc(inst, 8 * MiB)
    settle(client)
    # The program and the library copied where nobody may read them (the
    # tree may sit under /root).
    top = tempfile.mkdtemp(prefix="gpb-top-nobody-")
    try:
        shutil.copy(env_path("GPUBROKERCTL"), top)
        shutil.copy(env_path("GPUBROKER_LIBRARY"), os.path.join(top, "libgpubroker.so.0"))
        os.chmod(top, 0o755)
        stamp = str(tmp_path / "stty")  # written by the shell, root
        tmux.line("stty -g > %s.before; echo marker-$((6*7)); setpriv --reuid=%d --regid=%d "
                  "--clear-groups env LD_LIBRARY_PATH=%s %s/gpubrokerctl -s %s top; "
                  "echo exit=$?; stty -g > %s.after; echo saved-$((1+1))"
                  % (stamp, NOBODY, NOBODY, top, top, daemon.socket, stamp))
        s = tmux.wait_for("clients of other users", what="the others' line")
        assert "pytest" not in s and "(and 1 clients of other users, 8.0 MiB used)" in s
        tmux.send("q")
        check_restored(tmux, stamp)
    finally:
        shutil.rmtree(top, ignore_errors=True)
        client.free(a)


def test_clients_idle_and_waiting(daemon, monkeypatch):
    """The two figures top shows beside the others: idle_s (since the
    client's last request) and waiting (its allocations waiting for room),
    as `clients` reports them."""
    import threading

    import gpubroker

    def row():
        return [c for c in ctl(daemon, "clients")["clients"] if c["name"] == "waiter"][0]

    monkeypatch.setenv("GPUBROKER_LEASE", "0")
    ctl(daemon, "set-mode", "active", json_out=False)
    try:
        with gpubroker.Client(daemon.socket, "waiter") as c:
            inst = c.register("w", proportion=0.01)  # a cap of about 10 MiB
            held = c.alloc(inst, 8 * MiB)
            settle(c)
            time.sleep(1.2)
            assert row()["idle_s"] >= 1 and row()["waiting"] == 0
            done = []

            def wait():
                try:
                    c.alloc(inst, 8 * MiB, timeout=3)
                except gpubroker.BrokerTimeoutError:
                    done.append("timed out")

            t = threading.Thread(target=wait)
            t.start()
            deadline = time.monotonic() + 10
            while row()["waiting"] != 1:
                assert time.monotonic() < deadline, row()
                time.sleep(0.05)
            assert row()["idle_s"] <= 1
            t.join()
            assert done == ["timed out"] and row()["waiting"] == 0
            c.free(held)
    finally:
        ctl(daemon, "set-mode", "passive", json_out=False)
