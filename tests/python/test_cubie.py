"""gpubroker.cubie: cubie's MemoryManager API across processes, against the
real daemon (sim backend).

Each scenario runs peers: fresh Python processes, each with its own
gpubroker.cubie.MemoryManager, driven line by line from the test (so that
the test decides who acts when), and checks what cubie documents (seed 001)
holds across them: registration, the auto pool rebalanced between
processes, manual/auto conversion, the refusals, stream groups, queued
requests chunked along the run axis, unchunkable arrays, the hooks (whose
thread, when), free by label and invalidate_all."""

import json
import subprocess
import sys
import textwrap

import pytest

from conftest import MiB, child_env, ctl_instances, wait_until

pytest.importorskip("numpy")

# A peer: reads one Python expression or statement a line (JSON-encoded),
# answers one JSON line: its value (or null), the exception's class names,
# and the messages of the warnings it raised.
PEER = textwrap.dedent("""
    import json, sys, warnings
    import numpy as np
    import gpubroker, gpubroker.cubie as gc

    class Solver:
        def __init__(self, name):
            self.name = name
            self.ready = []        # ArrayResponses, in the order the hooks ran
            self.invalidated = 0
            self.arrays = {}

        def on_ready(self, response):
            self.ready.append(response)
            self.arrays.update(response.arr)

        def on_invalidate(self):
            self.invalidated += 1
            self.arrays.clear()
            self.ready.clear()

    mm = gc.MemoryManager(socket=sys.argv[1], name=sys.argv[2])
    ns = dict(globals())
    for line in sys.stdin:
        code = json.loads(line)
        out = {"value": None, "error": None, "warnings": []}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                try:
                    compiled = compile(code, "<peer>", "eval")
                except SyntaxError:
                    exec(compile(code, "<peer>", "exec"), ns)
                else:
                    out["value"] = eval(compiled, ns)
            except BaseException as e:
                out["error"] = [c.__name__ for c in type(e).__mro__]
                out["message"] = str(e)
        out["warnings"] = [str(w.message) for w in caught if w.category is UserWarning]
        print(json.dumps(out, default=repr), flush=True)
    """)


class PeerError(Exception):
    def __init__(self, classes, message):
        super().__init__("%s: %s" % (classes[0], message))
        self.classes = classes
        self.message = message


class Peer:
    """A process with its own MemoryManager named @name."""

    def __init__(self, daemon, name):
        self.name = name
        self.proc = subprocess.Popen([sys.executable, "-c", PEER, daemon.socket, name],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env=child_env())
        self.warnings = []

    def __call__(self, code):
        """Runs @code there: its value, or PeerError."""
        self.proc.stdin.write(json.dumps(code) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError("peer %s died (exit %s)" % (self.name, self.proc.wait()))
        out = json.loads(line)
        self.warnings = out["warnings"]
        if out["error"]:
            raise PeerError(out["error"], out["message"])
        return out["value"]

    def raises(self, cls, code):
        with pytest.raises(PeerError) as e:
            self(code)
        assert cls in e.value.classes, e.value
        return e.value.message

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(30)


@pytest.fixture
def peers(daemon):
    made = []

    def make(name):
        p = Peer(daemon, name)
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


def test_registration_is_a_broker_instance(daemon, peers):
    a, b = peers("cubie-a"), peers("cubie-b")
    a("s = Solver('s'); mm.register(s)")
    b("s = Solver('s'); mm.register(s, proportion=0.25, stream_group='solver')")
    # Keyed by identity: a second registration of the same object is refused...
    assert "already registered" in a.raises("ValueError", "mm.register(s)")
    # ... another object is another instance.
    a("t = Solver('t'); mm.register(t)")
    rows = ctl_instances(daemon)
    names = sorted(r["name"] for r in rows)
    assert names == ["cubie-a:Solver", "cubie-a:Solver", "cubie-b:Solver"], rows
    row_b = [r for r in rows if r["name"] == "cubie-b:Solver"][0]
    assert row_b["group"] == "solver" and row_b["proportion"] == 0.25
    assert int(row_b["instance"], 16) == b("mm.instance_id(s)")
    # cubie's refusal of a proportion outside [0, 1].
    assert "between 0 and 1" in b.raises("ValueError", "mm.register(Solver('x'), proportion=1.5)")
    # A process that ends takes its instances with it.
    a.close()
    assert wait_until(lambda: [r["name"] for r in ctl_instances(daemon)] == ["cubie-b:Solver"])


def test_auto_pool_rebalanced_across_processes(daemon, peers):
    a, b, c = peers("cubie-a"), peers("cubie-b"), peers("cubie-c")
    a("s = Solver('s'); mm.register(s)")
    assert a("mm.proportion(s)") == 1.0
    b("s = Solver('s'); mm.register(s)")
    assert a("mm.proportion(s)") == 0.5 and b("mm.proportion(s)") == 0.5
    c("s = Solver('s'); mm.register(s, proportion=0.5)")
    assert a("mm.proportion(s)") == 0.25 and b("mm.proportion(s)") == 0.25
    assert c("mm.proportion(s)") == 0.5
    for p in (a, b, c):
        assert p("mm.manual_pool_proportion") == 0.5
        assert p("mm.auto_pool_proportion") == 0.5
    # Caps follow the shares in active mode (an administrator's switch).
    a("mm.set_limit_mode('active')")
    total = a("mm.totalmem")
    assert a("mm.cap(s)") == total // 4 and c("mm.cap(s)") == total // 2
    c.close()
    assert wait_until(lambda: a("mm.proportion(s)") == 0.5)
    assert b("mm.auto_pool_proportion") == 1.0 and b("mm.manual_pool_proportion") == 0.0


def test_manual_auto_conversion(daemon, peers):
    a, b = peers("cubie-a"), peers("cubie-b")
    a("s = Solver('s'); mm.register(s)")
    b("s = Solver('s'); mm.register(s)")
    a("mm.set_manual_limit_mode(s, 0.3)")
    assert a("mm.proportion(s)") == 0.3 and b("mm.proportion(s)") == pytest.approx(0.7)
    assert "manual" in a.raises("ValueError", "mm.set_manual_limit_mode(s, 0.2)")
    a("mm.set_manual_proportion(s, 0.6)")
    assert b("mm.proportion(s)") == pytest.approx(0.4)
    a("mm.set_auto_limit_mode(s)")
    assert a("mm.proportion(s)") == 0.5 and b("mm.proportion(s)") == 0.5
    assert "auto" in a.raises("ValueError", "mm.set_auto_limit_mode(s)")
    # set_manual_proportion moves an auto instance too (cubie does).
    b("mm.set_manual_proportion(s, 0.2)")
    assert a("mm.proportion(s)") == pytest.approx(0.8)


def test_refusals(daemon, peers):
    a, b = peers("cubie-a"), peers("cubie-b")
    a("s = Solver('s'); mm.register(s, proportion=0.6)")
    # Manual proportions over 1, across processes: the daemon's refusal.
    msg = b.raises("ValueError", "mm.register(Solver('x'), proportion=0.6)")
    assert "proportion" in msg
    b("s = Solver('s'); mm.register(s)")
    # An instance never registered: cubie's registry lookup fails the same way.
    b.raises("KeyError", "mm.set_manual_proportion(Solver('nobody'), 0.1)")
    # Leaving the auto instance (in the other process) less than its minimum.
    a.raises("ValueError", "mm.set_manual_proportion(s, 1.0)")
    a.raises("ValueError", "mm.set_manual_proportion(s, -0.1)")
    # Under 5% for the auto pool: allowed, with the daemon's UserWarning.
    a("mm.set_manual_proportion(s, 0.96)")
    assert a.warnings and "5%" in a.warnings[0], a.warnings
    assert b("mm.proportion(s)") == pytest.approx(0.04)
    a("mm.set_manual_proportion(s, 0.5)")
    a.raises("ValueError", "mm.set_limit_mode('eager')")
    a.raises("ValueError", "mm.change_stream_group(Solver('nobody'), 'g')")
    a.raises("TypeError", "mm.queue_request(s, [gc.ArrayRequest(np.float32, (4,))])")
    a.raises("TypeError", "mm.queue_request(s, {'x': (4,)})")
    a.raises("NotImplementedError",
             "mm.queue_request(s, {'x': gc.ArrayRequest(np.float32, (4,), memory='managed')})")
    a.raises("NotImplementedError", "mm.allocate((4,), np.float32, 'managed')")
    a.raises("ValueError", "mm.allocate((4,), np.float32, 'texture')")
    a.raises("ValueError", "mm.create_host_array((4,), np.float32, 'device')")
    a.raises("ValueError", "mm.set_allocator('rmm')")
    a.raises("ValueError", "gc.ArrayRequest(np.float32, (4,), memory='texture')")
    a.raises("TypeError", "gc.ArrayRequest(np.float32, 'abc')")
    a.raises("TypeError", "gc.ArrayRequest(np.float32, (4,), unchunkable='yes')")


def test_stream_groups_across_processes(daemon, peers):
    a, b = peers("cubie-a"), peers("cubie-b")
    a("s = Solver('s'); mm.register(s, stream_group='solver')")
    assert a("mm.get_stream_group(s)") == "solver"
    assert a("mm.is_grouped(s)") is False  # alone in its group
    b("s = Solver('s'); mm.register(s, stream_group='solver')")
    assert a("mm.is_grouped(s)") is True and b("mm.is_grouped(s)") is True
    b("mm.change_stream_group(s, 'viz')")
    assert b("mm.get_stream_group(s)") == "viz"
    assert a("mm.is_grouped(s)") is False and b("mm.is_grouped(s)") is False
    # "default" never groups.
    a("mm.change_stream_group(s, 'default')")
    b("mm.change_stream_group(s, 'default')")
    assert a("mm.is_grouped(s)") is False
    # The stream itself stays in the process (sim: the default stream, 0).
    assert a("mm.get_stream(s)") == 0


def queue_group(a, b, group="solver", limit=True):
    """Two solvers in one group, one a process, each with arrays queued:
    a run axis of 4096 runs (cubie's axis 2) and an unchunkable table."""
    if limit:
        a("gpubroker.Client(sys.argv[1]).set_limit(device=0, size=%d)" % (16 * MiB))
    for p in (a, b):
        p("s = Solver('s'); mm.register(s, invalidate_cache_hook=s.on_invalidate, "
          "allocation_ready_hook=s.on_ready, stream_group=%r)" % group)
    # 4 x 256 x 4096 float32 = 16 MiB each: 32 MiB against a 16 MiB limit.
    a("mm.queue_request(s, {'state': gc.ArrayRequest(np.float32, (4, 256, 4096), "
      "total_runs=4096), 'table': gc.ArrayRequest(np.float64, (1000,), unchunkable=True)})")
    b("mm.queue_request(s, {'out': gc.ArrayRequest(np.float32, (4, 256, 4096), "
      "total_runs=4096)})")


def test_queued_requests_chunked_along_the_run_axis(daemon, peers):
    a, b = peers("cubie-a"), peers("cubie-b")
    queue_group(a, b)
    assert a("mm.allocate_queue(s)") is None
    # The caller's hook ran before allocate_queue returned.
    chunks, length = a("s.ready[0].chunks"), a("s.ready[0].chunk_length")
    assert chunks >= 3 and length * chunks >= 4096 and length * (chunks - 1) < 4096
    assert a("s.ready[0].chunked_shapes") == {"state": [4, 256, length], "table": [1000]}
    assert a("s.arrays['state'].shape") == [4, 256, length]
    assert a("str(s.arrays['state'].dtype)") == "float32"
    assert a("str(s.arrays['table'].dtype)") == "float64"
    # The other process's hook runs when it next calls in: same chunking.
    assert b("len(s.ready)") == 0
    assert b("mm.poll()") >= 1
    assert b("(s.ready[0].chunks, s.ready[0].chunk_length)") == [chunks, length]
    assert b("s.arrays['out'].shape") == [4, 256, length]
    # The arrays are the broker's memory, charged to each instance.
    used_a = a("mm.client.instance_info(mm.instance_id(s)).used")
    assert used_a >= 4 * 256 * length * 4 + 8000
    # Over shared memory: what the array holds is what the allocation holds.
    a("s.arrays['table'][:] = 7.0")
    assert a("bytes(s.arrays['table'].base.allocation.read(16))") == repr(
        b"\x00\x00\x00\x00\x00\x00\x1c@" * 2)
    # cubie's get_chunk_parameters/compute_chunked_shapes agree with the daemon.
    assert a("mm.compute_chunked_shapes({'x': gc.ArrayRequest(np.float32, (4, 256, 4096)), "
             "'t': gc.ArrayRequest(np.float64, (1000,), unchunkable=True)}, %d)" % length) == {
        "x": [4, 256, length], "t": [1000]}


def test_unchunkable_arrays(daemon, peers):
    a, b = peers("cubie-a"), peers("cubie-b")
    a("gpubroker.Client(sys.argv[1]).set_limit(device=0, size=%d)" % (16 * MiB))
    a("s = Solver('s'); mm.register(s, allocation_ready_hook=s.on_ready)")
    # Unchunkable (explicitly, or with a run axis of 1 or none) and too big.
    big = "gc.ArrayRequest(np.float32, (4, 256, 8192), unchunkable=True)"
    assert "fit" in a.raises("ValueError", "mm.get_chunk_parameters({'x': %s}, 8192, "
                                           "'default')" % big)
    a("mm.queue_request(s, {'x': %s})" % big)
    a.raises("ValueError", "mm.allocate_queue(s)")
    a("mm.queue_request(s, {'x': gc.ArrayRequest(np.float32, (64, 256, 1)), "
      "'y': gc.ArrayRequest(np.float32, (64, 256), chunk_axis_index=None)})")
    a("mm.allocate_queue(s)")
    assert a("s.ready[-1].chunked_shapes") == {"x": [64, 256, 1], "y": [64, 256]}
    # Not cut: the whole run axis is the requests' total_runs (cubie's rule),
    # though no array has a run axis of that length.
    a("mm.queue_request(s, {'z': gc.ArrayRequest(np.float32, (10, 50), total_runs=100)})")
    a("mm.allocate_queue(s)")
    assert a("(s.ready[-1].chunks, s.ready[-1].chunk_length)") == [1, 100]
    # The 20x warning, with the daemon's message.
    assert a("mm.get_chunk_parameters({s: {'x': gc.ArrayRequest(np.float32, "
             "(4, 256, 1 << 22))}}, 1 << 22, 'default')")[1] > 20
    assert a.warnings and "20" in a.warnings[0], a.warnings
    del b


def test_hooks_thread_and_timing(daemon, peers):
    a, b = peers("cubie-a"), peers("cubie-b")
    queue_group(a, b, limit=False)
    b("import threading; th = []; s.on_ready = lambda r, f=s.on_ready: "
      "(th.append(threading.current_thread().name), f(r))")
    b("mm.registry[id(s)].ready_hook = s.on_ready")
    b("mm.start_event_thread(interval=0.05)")
    a("mm.allocate_queue(s)")
    assert a("len(s.ready)") == 1
    # B did not call in: its event thread ran the hook.
    assert wait_until(lambda: b("len(s.ready)") == 1)
    assert b("th") == ["gpubroker.cubie events"]
    b("mm.stop_event_thread()")
    # Without the thread, B's next call into the manager runs it.
    for p in (a, b):
        p("mm.queue_request(s, {'more': gc.ArrayRequest(np.float32, (8,), chunk_axis_index=0)})")
    a("mm.allocate_queue(s)")
    assert a("len(s.ready)") == 2
    assert b("len(s.ready)") == 1
    b("mm.proportion(s)")
    assert b("len(s.ready)") == 2 and b("th[-1]") == "MainThread"
    assert b("list(s.ready[-1].arr)") == ["more"]
    # A member that queued nothing hears nothing (the daemon's rule; cubie
    # 0.17 calls such a member's hook with an empty response).
    a("mm.queue_request(s, {'last': gc.ArrayRequest(np.float32, (8,), chunk_axis_index=0)})")
    a("mm.allocate_queue(s)")
    b("mm.poll()")
    assert b("len(s.ready)") == 2


def test_free_by_label(daemon, peers):
    a, b = peers("cubie-a"), peers("cubie-b")
    queue_group(a, b, limit=False)
    a("mm.allocate_queue(s)")
    b("mm.poll()")
    used = lambda p: p("mm.client.instance_info(mm.instance_id(s)).used")  # noqa: E731
    before = used(a)
    assert before > 16 * MiB
    # The manager lets go of 'state'; the memory goes back with the last reference.
    a("mm.free('state'); s.arrays.pop('state'); s.ready.clear()")
    assert used(a) == before - 16 * MiB
    assert a("sorted(mm.registry[id(s)].allocations)") == ["table"]
    assert used(b) >= 16 * MiB  # another process's arrays are its own
    a("mm.free_all(); s.arrays.clear()")
    assert used(a) == 0


def test_invalidate_all(daemon, peers):
    a, b = peers("cubie-a"), peers("cubie-b")
    queue_group(a, b, limit=False)
    a("mm.allocate_queue(s)")
    b("mm.poll()")
    a("mm.invalidate_all()")
    # The caller's hooks ran before it returned; the other process's on its next call.
    assert a("s.invalidated") == 1
    assert b("s.invalidated") == 0
    b("mm.poll()")
    assert b("s.invalidated") == 1
    assert all(int(r["used"]) == 0 for r in ctl_instances(daemon))
    # The instances stay registered and allocate again.
    a("mm.queue_request(s, {'x': gc.ArrayRequest(np.float32, (4, 4, 4))})")
    a("mm.allocate_queue(s)")
    assert a("s.arrays['x'].shape") == [4, 4, 4]


def test_allocate_and_copies(daemon, peers):
    a = peers("cubie-a")
    a("s = Solver('s'); mm.register(s)")
    a("x = mm.allocate((3, 4), np.float64, 'device')")
    assert a("x.shape") == [3, 4]
    a("h = mm.create_host_array((3, 4), np.float64, like=np.arange(12.0).reshape(3, 4))")
    a("mm.to_device(s, [h], [x])")
    a("y = mm.create_host_array((3, 4), np.float64, 'host')")
    a("mm.from_device(s, [x], [y])")
    assert a("float(y.sum())") == 66.0
    a("p = mm.allocate((16,), np.int32, 'pinned')")
    assert a("p.shape") == [16]
    arrs = a("sorted(mm.allocate_all({'u': gc.ArrayRequest(np.int32, (8,))}, id(s), 0))")
    assert arrs == ["u"]
    # allocate() without an instance is charged to the manager's oldest
    # registration (cubie 0.17's solvers allocate so for themselves) ...
    names = [r["name"] for r in ctl_instances(daemon)]
    assert "cubie-a:direct" not in names and "cubie-a:Solver" in names
    # ... and to the manager's own instance when it has none.
    b = peers("cubie-b")
    b("z = mm.allocate((8,), np.float32, 'device')")
    assert "cubie-b:direct" in [r["name"] for r in ctl_instances(daemon)]
    free, total = a("mm.get_memory_info()")
    assert total == 1 << 30 and 0 < free < total


def test_registrations_with_an_owner_share_its_instance(daemon, peers):
    """cubie 0.17's owner (its eviction unit): a solver's array managers
    register with the solver as owner and hold their arrays in its share;
    each gets back the arrays it queued."""
    a = peers("cubie-a")
    a("k = Solver('kernel'); mm.register(k, proportion=0.25, allocation_ready_hook=k.on_ready)")
    a("i = Solver('inputs'); mm.register(i, allocation_ready_hook=i.on_ready, owner=k)")
    a("o = Solver('outputs'); mm.register(o, allocation_ready_hook=o.on_ready, owner=k)")
    rows = ctl_instances(daemon)
    assert [r["name"] for r in rows] == ["cubie-a:Solver"], rows  # one broker instance
    assert a("mm.instance_id(i) == mm.instance_id(k) == mm.instance_id(o)")
    assert a("mm.proportion(i)") == 0.25 and a("mm.cap(o) == mm.cap(k)")
    a("mm.queue_request(i, {'inits': gc.ArrayRequest(np.float64, (2, 8))})")
    a("mm.queue_request(o, {'state': gc.ArrayRequest(np.float64, (2, 3, 8), total_runs=8)})")
    a("mm.allocate_queue(k)")
    assert a("sorted(i.arrays)") == ["inits"] and a("sorted(o.arrays)") == ["state"]
    assert a("k.arrays") == {}
    # A member that goes leaves the owner's instance registered.
    a("mm.unregister(i)")
    assert [r["name"] for r in ctl_instances(daemon)] == ["cubie-a:Solver"]
    # cubie 0.17's registration token and its release.
    assert a("mm.get_registration(o) is mm.registry[id(o)]")
    a("mm.release_instance(id(o), mm.get_registration(o))")
    assert "not registered" in a.raises("KeyError", "mm.get_registration(o)")


def test_hooks_are_weak_and_dead_instances_leave_at_once(daemon, peers):
    """A solver registered with its own bound methods as hooks is
    collectable (cubie 0.17 holds hooks weakly), and its instance leaves the
    daemon when it is collected, not at the next register()."""
    a = peers("cubie-a")
    a("import gc as pygc, weakref")
    a("s = Solver('s'); mm.register(s, invalidate_cache_hook=s.on_invalidate, "
      "allocation_ready_hook=s.on_ready); w = weakref.ref(s)")
    assert [r["name"] for r in ctl_instances(daemon)] == ["cubie-a:Solver"]
    a("del s; pygc.collect()")
    assert a("w() is None")
    assert ctl_instances(daemon) == []


def test_cubie_017_calls(daemon, peers):
    """What cubie 0.17's solver and array managers call, each once."""
    a = peers("cubie-a")
    a("s = Solver('s'); mm.register(s, proportion=0.25, stream_group='g')")
    assert a("mm.probe_device()") == 1 << 30
    assert a("mm.manual_proportion(s)") == 0.25
    assert a("sorted(mm.update(s, {'stream_group': 'g', 'mem_proportion': 0.5, 'x': 1}, "
             "silent=True))") == ["mem_proportion", "stream_group"]
    assert a("mm.proportion(s)") == 0.5
    assert "Unrecognized" in a.raises("KeyError", "mm.update(s, {'x': 1})")
    assert "cannot change memory manager" in a.raises(
        "ValueError", "mm.update(s, memory_manager=object())")
    a("mm.update(s, mem_proportion=None)")
    assert a("mm.manual_proportion(s)") is None
    a("mm.begin_work(s); mm.end_work(s, mm.get_group_stream('g'))")
    assert a("mm.get_group_stream('g') is mm.get_stream(s)")
    assert a("list(mm.stream_groups.streams)") == ["g"]
    a("h = mm.create_host_array((4,), np.float64, like=np.arange(4.0))")
    a("x = mm.allocate((4,), np.float64, 'device')")
    a("mm.to_device(s, [h], [x], stream=mm.get_stream(s)); mm.sync_stream(s, stream=0)")
    a("y = mm.create_host_array((4,), np.float64, 'memmap')")
    a("mm.from_device(s, [x], [y], stream=0)")
    assert a("y.tolist()") == [0.0, 1.0, 2.0, 3.0]
    assert a("mm.choose_host_memory_type(1024)") == "pinned"
    assert a("mm.choose_host_memory_type(1024, allow_pinned=False)") == "host"
    a("p = mm.allocate_pinned_array((256,), np.float32)")
    assert a("p.shape") == [256] and a("mm.pinned_live_bytes") == 1024
    a("del p; import gc as pygc; pygc.collect()")
    assert a("mm.pinned_live_bytes") == 0 and a("mm.pinned_idle_bytes") == 0
    a("mm.release_host_array(y); mm.release_idle_memory(keep_recent=False)")
    a("done = []; mm.defer_teardown(lambda: done.append(1))")
    assert a("done") == [1]
    assert a("mm.get_registration(s) is mm.registry[id(s)]")
