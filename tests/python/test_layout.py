"""gpubroker.Layout, the layout planner from Python: each rule of
docs/layout.md, each error as its own class, the same answers as
`gpubrokerctl layout` (its golden files, malformed files and randomized
layouts) and the C object's lifetime. No daemon is involved."""

import ctypes
import gc
import glob
import json
import os
import pathlib
import random
import re
import subprocess
import threading

import pytest

import gpubroker
from conftest import daemon_env, env_path
from gpubroker import Layout, LayoutBuffer, LayoutSizes, Placement

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN = os.path.join(TOP, "tests", "golden", "layout")
EXAMPLE = os.path.join(TOP, "docs", "examples", "rk4-layout.json")
# tests/golden/meson.build: the input of each golden case.
GOLDEN_INPUTS = {"rk4": EXAMPLE}


def golden_input(name):
    return GOLDEN_INPUTS.get(name, os.path.join(GOLDEN, name + ".json"))


def built(*components, **launch):
    """A computed layout: @components are (name, parent, [buffer kwargs])."""
    lay = Layout(**launch)
    for name, parent, bufs in components:
        lay.add_component(name, parent)
        for b in bufs:
            lay.add_buffer(name, **b)
    return lay.compute()


def buf(name, size, location="shared", **kw):
    return dict(name=name, size=size, location=location, **kw)


def check_regions(lay):
    """Every buffer inside its component's region, every region inside its
    parent's, every offset a multiple of its element size, and no two
    buffers of a space overlapping unless one is placed in the other."""
    comps = {c.name: c for c in lay.components()}
    space_key = {"shared": "shared", "local": "local", "persistent_local": "persistent_local"}

    def region(c, space):
        start = getattr(c.sizes, space_key[space] + "_offset")
        return start, start + getattr(c.sizes, space_key[space])

    bufs = lay.buffers()
    for b in bufs:
        lo, hi = region(comps[b.component], b.space)
        assert lo <= b.offset and b.offset + b.bytes <= hi, b
        assert b.offset % b.precision == 0, b
        assert b.bytes == b.size * b.precision
    for c in comps.values():
        if c.parent is None:
            continue
        for space in space_key:
            lo, hi = region(comps[c.parent], space)
            clo, chi = region(c, space)
            assert lo <= clo and chi <= hi, (c, space)
    for a in bufs:
        for b in bufs:
            if a is b or a.space != b.space or a.component != b.component:
                continue
            apart = a.offset + a.bytes <= b.offset or b.offset + b.bytes <= a.offset
            nested = a.aliased_with == b.name or b.aliased_with == a.name
            same_host = a.aliased_with is not None and a.aliased_with == b.aliased_with
            assert apart or nested or (same_host and apart), (a, b)


# ---- the rules -------------------------------------------------------------


def test_alignment_and_padding():
    lay = built(("k", None, [buf("a", 3), buf("b", 1, precision=8), buf("c", 1)]),
                ("f32", None, [buf("x", 3), buf("y", 2)]))
    assert lay.buffer("k", "a") == Placement("shared", 0, 12, None)
    assert lay.buffer("k", "b").offset == 16  # a multiple of its element size
    assert lay.buffer("k", "c").offset == 24
    assert lay.component_sizes("k").shared == 32  # 28, rounded to the largest alignment
    # A float32-only kernel is not padded to 8 bytes; roots start at 0.
    assert lay.buffer("f32", "x").offset == 0
    assert lay.component_sizes("f32") == LayoutSizes(20, 0, 0, 0, 0, 0)
    check_regions(lay)


@pytest.mark.parametrize("precision, nbytes", [
    (4, 4), (8, 8), ("float32", 4), ("float64", 8), ("f8", 8), ("<f4", 4),
    (float, 8), (ctypes.c_float, 4), (ctypes.c_double, 8),
])
def test_precision_as_dtype(precision, nbytes):
    with Layout() as lay:
        lay.add_component("k")
        lay.add_buffer("k", "b", 5, precision=precision)
        lay.compute()
        (b,) = lay.buffers()
        assert b.precision == nbytes and b.bytes == 5 * nbytes
        assert b.dtype == {4: "float32", 8: "float64"}[nbytes]
    # The layout's default precision.
    with Layout(precision="float64") as lay:
        lay.add_component("k")
        lay.add_buffer("k", "b", 5)
        assert lay.compute().buffer("k", "b").bytes == 40


def test_precision_with_numpy():
    numpy = pytest.importorskip("numpy")
    with Layout() as lay:
        lay.add_component("k")
        lay.add_buffer("k", "a", 2, precision=numpy.float64)
        lay.add_buffer("k", "b", 2, precision=numpy.dtype("float32"))
        lay.add_buffer("k", "c", numpy.int64(3), precision=numpy.int32(8))
        lay.compute()
        assert [b.bytes for b in lay.buffers()] == [16, 8, 24]


def test_three_spaces_are_independent():
    lay = built(("k", None, [
        buf("s", 2), buf("sp", 2, persistent=True), buf("l", 3, "local"),
        buf("lp", 1, "local", persistent=True), buf("l2", 1, "local"),
    ]))
    got = {b.name: (b.space, b.offset, b.persistent, b.location) for b in lay.buffers()}
    assert got == {
        "s": ("shared", 0, False, "shared"),
        "sp": ("shared", 8, True, "shared"),  # persistent shared stays shared
        "l": ("local", 0, False, "local"),
        "lp": ("persistent_local", 0, True, "local"),
        "l2": ("local", 12, False, "local"),
    }
    assert lay.component_sizes("k") == LayoutSizes(16, 16, 4, 0, 0, 0)


def test_child_regions():
    lay = Layout()
    lay.add_component("solver")
    lay.add_component("newton", "solver")
    lay.add_component("rhs", "solver")
    lay.add_component("lin", "newton")  # added last, laid out inside newton
    lay.add_component("other")  # a second kernel
    lay.add_buffer("solver", "x", 3)
    lay.add_buffer("newton", "jac", 2, precision=8)
    lay.add_buffer("rhs", "s", 1)
    lay.add_buffer("lin", "piv", 4, "local", persistent=True)
    lay.add_buffer("other", "o", 1)
    lay.add_buffer("solver", "y", 1)  # the parent's buffers come first, in order
    lay.compute()
    comps = lay.components()
    assert [(c.name, c.parent, c.depth) for c in comps] == [
        ("solver", None, 0), ("newton", "solver", 1), ("lin", "newton", 2),
        ("rhs", "solver", 1), ("other", None, 0)]
    assert [(b.component, b.name) for b in lay.buffers()] == [
        ("solver", "x"), ("solver", "y"), ("newton", "jac"), ("lin", "piv"), ("rhs", "s"),
        ("other", "o")]
    # solver: x 0-12, y 12-16; newton (aligned to 8) 16-32; lin 32-32; rhs 32-36;
    # rounded to 8: 40.
    assert lay.buffer("solver", "y").offset == 12
    assert lay.component_sizes("newton") == LayoutSizes(16, 0, 16, 16, 0, 0)
    assert lay.buffer("lin", "piv") == Placement("persistent_local", 0, 16, None)
    assert lay.component_sizes("rhs").shared_offset == 32
    assert lay.component_sizes("solver") == LayoutSizes(40, 0, 16, 0, 0, 0)
    assert lay.buffer("other", "o").offset == 0  # two roots share nothing
    assert comps[0].sizes == lay.component_sizes("solver")
    check_regions(lay)


def test_aliases_pack_inside_their_target():
    lay = built(("k", None, [
        buf("w", 4), buf("a", 2, alias="w"), buf("b", 2, alias="w"),
        buf("c", 1, alias="w"),  # w is full: storage of its own
        buf("big", 8, alias="w"),  # larger than w
    ]))
    assert lay.buffer("k", "a") == Placement("shared", 0, 8, "w")
    assert lay.buffer("k", "b") == Placement("shared", 8, 8, "w")
    assert lay.buffer("k", "c") == Placement("shared", 16, 4, None)
    assert lay.buffer("k", "big") == Placement("shared", 20, 32, None)
    assert lay.component_sizes("k").shared == 52
    check_regions(lay)


def test_alias_alignment():
    # A float64 rider raises its float32 target's alignment to 8.
    lay = built(("k", None, [buf("p", 1), buf("h", 3), buf("r", 1, precision=8, alias="h")]))
    assert lay.buffer("k", "h").offset == 8
    assert lay.buffer("k", "r") == Placement("shared", 8, 8, "h")
    # Riders take the next offset aligned to their own element size.
    lay = built(("k", None, [buf("h", 2, precision=8), buf("a", 1, alias="h"),
                             buf("b", 1, precision=8, alias="h")]))
    assert lay.buffer("k", "a").offset == 0 and lay.buffer("k", "b").offset == 8
    assert lay.buffer("k", "b").aliased_with == "h"


def test_alias_chains_and_order():
    # C aliases B, which rides on A: C may not ride on B (it would overlap A).
    lay = built(("k", None, [buf("A", 4), buf("B", 4, alias="A"), buf("C", 4, alias="B")]))
    assert lay.buffer("k", "B") == Placement("shared", 0, 16, "A")
    assert lay.buffer("k", "C") == Placement("shared", 16, 16, None)
    # B does not fit A: it has storage of its own, and C rides on it.
    lay = built(("k", None, [buf("A", 1), buf("B", 4, alias="A"), buf("C", 2, alias="B")]))
    assert lay.buffer("k", "B") == Placement("shared", 4, 16, None)
    assert lay.buffer("k", "C") == Placement("shared", 4, 8, "B")
    # An alias may be added before its target; local aliases stay local.
    lay = built(("k", None, [buf("e", 4, "local", alias="s"), buf("s", 4, "local")]))
    assert lay.buffer("k", "e") == Placement("local", 0, 16, "s")
    check_regions(lay)


def test_persistent_buffers_are_never_aliased():
    with Layout() as lay:
        lay.add_component("k")
        lay.add_buffer("k", "state", 4, "local", persistent=True)
        with pytest.raises(gpubroker.LayoutAliasPersistentError) as e:
            lay.add_buffer("k", "p", 4, "local", persistent=True, alias="state")
        assert "'p'" in e.value.detail
        lay.add_buffer("k", "p", 4, "local", persistent=True)  # refused: not added
        lay.add_buffer("k", "tmp", 4, "local", alias="state")
        with pytest.raises(gpubroker.LayoutAliasPersistentError) as e:
            lay.compute()
        assert "'state', which is persistent" in e.value.detail
        assert not lay.computed
        with pytest.raises(gpubroker.InvalidError):  # a refused compute: uncomputed
            lay.buffers()


def test_block_size():
    lay = Layout.from_json(EXAMPLE)  # 672 shared bytes per thread
    assert lay.block_size("rk4_step") == 64  # the file's 256 requested, 48 KiB
    assert lay.block_size("rk4_step", requested=256) == 64
    assert lay.block_size("rk4_step", 102400, 232448, 256) == 128
    assert lay.block_size("rk4_step", requested=64) == 64
    assert lay.block_size("rk4_step", requested=32) == 32
    assert lay.block_size("rhs", requested=1024) == 1024  # 32 bytes: 32768
    with pytest.raises(gpubroker.InvalidError):
        lay.block_size("rk4_step", requested=100)  # not whole warps
    with pytest.raises(gpubroker.InvalidError):
        lay.block_size("rk4_step", requested=1056)
    with pytest.raises(gpubroker.InvalidError):
        lay.block_size("rk4_step", requested=0)
    with pytest.raises(gpubroker.InvalidError) as e:
        lay.block_size("rk4_step", budget=65536)  # above the default max_budget
    assert "limit" in e.value.detail
    with pytest.raises(gpubroker.InvalidError):
        lay.block_size("rk4_step", budget=1 << 32)  # not wrapped to 0
    with pytest.raises(gpubroker.NotFoundError):
        lay.block_size("nobody")
    # An exact fit: 48 bytes x 1024 = 49152; nothing shared fits anything.
    lay = built(("k", None, [buf("x", 12)]), ("l", None, [buf("y", 1, "local")]))
    assert lay.block_size("k", requested=1024) == 1024
    assert lay.block_size("k", budget=49151, requested=1024) == 992
    assert lay.block_size("l", budget=1, requested=1024) == 1024


def test_no_warp_fits():
    lay = Layout.from_json(os.path.join(GOLDEN, "no-fit.json"))  # 4096 bytes per thread
    with pytest.raises(gpubroker.LayoutNoFitError) as e:
        lay.block_size("big")
    assert isinstance(e.value, gpubroker.LayoutError) and e.value.code == -25
    assert "'big' needs 4096 shared bytes per thread" in e.value.detail
    assert lay.kernels()[0].threads is None and lay.kernels()[0].shared_per_block is None
    # The device's opt-in limit fits one warp (131072 bytes), not two.
    assert lay.block_size("big", 232448, 232448, 1024) == 32
    assert lay.kernels(232448, 232448, 1024)[0].shared_per_block == 131072


# ---- the errors, each its own class ------------------------------------------


def _comp(lay):
    lay.add_component("k")
    return lay


ERRORS = [
    # (class, what to do to a layout with component "k")
    (gpubroker.LayoutNameError, lambda l: l.add_component("")),
    (gpubroker.LayoutNameError, lambda l: l.add_component("two words")),
    (gpubroker.LayoutNameError, lambda l: l.add_component("x" * 65)),
    (gpubroker.LayoutNameError, lambda l: l.add_component("caf\u00e9")),
    (gpubroker.LayoutNameError, lambda l: l.add_component("a\0b")),  # not cut short
    (gpubroker.LayoutNameError, lambda l: l.add_component("\ud800")),
    (gpubroker.LayoutNameError, lambda l: l.add_buffer("k", "tab\t", 1)),
    (gpubroker.LayoutNameError, lambda l: l.add_buffer("k", "b", 1, alias="")),
    (gpubroker.LayoutDuplicateError, lambda l: l.add_component("k")),
    (gpubroker.LayoutDuplicateError,
     lambda l: (l.add_buffer("k", "b", 1), l.add_buffer("k", "b", 2, "local"))),
    (gpubroker.LayoutZeroSizeError, lambda l: l.add_buffer("k", "b", 0)),
    (gpubroker.LayoutOverflowError, lambda l: l.add_buffer("k", "b", 1 << 62, precision=8)),
    (gpubroker.LayoutOverflowError,
     lambda l: (l.add_buffer("k", "a", 1 << 60, precision=8),
                l.add_buffer("k", "b", 1 << 60, precision=8), l.compute())),
    (gpubroker.LayoutAliasUnknownError,
     lambda l: (l.add_buffer("k", "b", 1, alias="nobody"), l.compute())),
    (gpubroker.LayoutAliasUnknownError,  # aliases stay within a component
     lambda l: (l.add_buffer("k", "p", 4), l.add_component("c", "k"),
                l.add_buffer("c", "b", 1, alias="p"), l.compute())),
    (gpubroker.LayoutAliasPersistentError,
     lambda l: l.add_buffer("k", "b", 1, persistent=True, alias="x")),
    (gpubroker.LayoutAliasPersistentError,
     lambda l: (l.add_buffer("k", "p", 1, persistent=True), l.add_buffer("k", "b", 1, alias="p"),
                l.compute())),
    (gpubroker.LayoutAliasCycleError, lambda l: l.add_buffer("k", "b", 1, alias="b")),
    (gpubroker.LayoutAliasCycleError,
     lambda l: (l.add_buffer("k", "a", 1, alias="b"), l.add_buffer("k", "b", 1, alias="a"),
                l.compute())),
    (gpubroker.LayoutAliasCycleError,
     lambda l: (l.add_buffer("k", "a", 1, alias="c"), l.add_buffer("k", "b", 1, alias="a"),
                l.add_buffer("k", "c", 1, alias="b"), l.add_buffer("k", "d", 1, alias="a"),
                l.compute())),
    (gpubroker.LayoutAliasLocationError,
     lambda l: (l.add_buffer("k", "l", 4, "local"), l.add_buffer("k", "s", 1, alias="l"),
                l.compute())),
    (gpubroker.LayoutNoFitError,
     lambda l: (l.add_buffer("k", "b", 1537), l.compute(), l.block_size("k", requested=32))),
    # Not layout rules: the library's general codes.
    (gpubroker.NotFoundError, lambda l: l.add_component("c", "nobody")),
    (gpubroker.NotFoundError, lambda l: l.add_buffer("nobody", "b", 1)),
    (gpubroker.NotFoundError, lambda l: (l.compute(), l.buffer("k", "nobody"))),
    (gpubroker.NotFoundError, lambda l: (l.compute(), l.component_sizes("nobody"))),
    (gpubroker.InvalidError, lambda l: l.buffers()),  # never computed
    (gpubroker.InvalidError, lambda l: (l.compute(), l.add_component("c"), l.buffer("k", "b"))),
    (gpubroker.InvalidError, lambda l: l.add_buffer("k", "b", 1, "global")),
    (gpubroker.InvalidError, lambda l: l.add_buffer("k", "b", 1, precision="float16")),
    (gpubroker.InvalidError, lambda l: l.add_buffer("k", "b", -1)),
    (gpubroker.InvalidError, lambda l: l.add_buffer("k", "b", 1 << 64)),
    (TypeError, lambda l: l.add_component(None)),
    (TypeError, lambda l: l.add_buffer("k", b"b", 1)),
    (TypeError, lambda l: l.add_buffer("k", "b", 1.0)),
    (TypeError, lambda l: l.add_buffer("k", "b", 1, precision=True)),
    (TypeError, lambda l: l.add_buffer("k", "b", 1, precision="quaternion")),
]


@pytest.mark.parametrize("cls, action", ERRORS)
def test_each_error_raises_its_class(cls, action):
    with _comp(Layout()) as lay:
        with pytest.raises(cls) as e:
            action(lay)
        if issubclass(cls, gpubroker.GpubrokerError):
            assert type(e.value) is cls
            assert type(gpubroker.errors.error_for(e.value.code)) is cls
            assert e.value.detail  # the library (or the binding) says why
        if issubclass(cls, gpubroker.LayoutError):
            assert isinstance(e.value, ValueError)
            assert -25 <= e.value.code <= -17
        # Whatever was refused, the layout takes more.
        lay.add_component("after")
        lay.add_buffer("after", "ok", 1)


def test_names_at_the_limit():
    with Layout() as lay:
        lay.add_component("c" * 64)
        lay.add_buffer("c" * 64, "~!{}" + "b" * 60, 1)
        lay.compute()
        assert lay.buffers()[0].name == "~!{}" + "b" * 60


def test_limits():
    with Layout() as lay:
        for i in range(gpubroker.layout.MAX_COMPONENTS):
            lay.add_component("c%d" % i)
        with pytest.raises(gpubroker.LimitError):
            lay.add_component("one-more")
        per = gpubroker.layout.MAX_BUFFERS // 8
        for i in range(gpubroker.layout.MAX_BUFFERS):
            lay.add_buffer("c%d" % (i // per), "b%d" % i, 1)
        with pytest.raises(gpubroker.LimitError):
            lay.add_buffer("c9", "one-more", 1)
        assert len(lay.compute().buffers()) == gpubroker.layout.MAX_BUFFERS


def test_a_refused_call_leaves_the_layout_as_it_was():
    lay = built(("k", None, [buf("a", 2)]))
    with pytest.raises(gpubroker.LayoutDuplicateError):
        lay.add_buffer("k", "a", 3)
    assert lay.computed and lay.buffer("k", "a").bytes == 8  # still computed
    lay.add_buffer("k", "b", 1)
    assert not lay.computed
    with pytest.raises(gpubroker.InvalidError) as e:
        lay.buffer("k", "a")
    assert "compute" in e.value.detail
    assert lay.compute().buffer("k", "b").offset == 8


# ---- the same answers as gpubrokerctl ------------------------------------------


def _table_rows(text):
    """gpubrokerctl layout's three tables as lists of rows (lists of cells)."""
    tables, rows = [], None
    for line in text.splitlines():
        if not line.strip() or line.endswith(":"):
            continue
        cells = line.split()
        if cells[0] in ("COMPONENT", "KERNEL"):
            rows = []
            tables.append(rows)
        else:
            rows.append(cells)
    return tables


@pytest.mark.parametrize("name", sorted(
    os.path.basename(p)[:-4] for p in glob.glob(os.path.join(GOLDEN, "*.out"))
    if os.path.getsize(p)))
def test_golden_files(name):
    """Each golden case the CLI prints: the JSON byte for byte, and the table
    cell for cell."""
    lay = Layout.from_json(golden_input(name))
    d = lay.to_dict()
    if os.path.exists(os.path.join(GOLDEN, name + ".out.json")):
        with open(os.path.join(GOLDEN, name + ".out.json")) as f:
            text = f.read()
        assert d == json.loads(text)
        assert json.dumps(d, separators=(",", ":")) + "\n" == text
    with open(os.path.join(GOLDEN, name + ".out")) as f:
        bufs, comps, kernels = _table_rows(f.read())

    def cell(v):
        return "-" if v is None else str(v).lower() if isinstance(v, bool) else str(v)

    assert bufs == [[cell(b[k]) for k in ("component", "name", "location", "persistent",
                                          "precision", "size", "offset", "bytes",
                                          "aliased_with")] for b in d["buffers"]]
    assert comps == [[cell(c[k]) for k in ("name", "parent", "shared", "local",
                                           "persistent_local")] for c in d["components"]]
    assert kernels == [[cell(k[x]) for x in ("kernel", "budget", "requested", "threads",
                                             "shared_per_block")] for k in d["kernels"]]


def test_rk4_example():
    """The worked example of docs/layout.md, against its golden JSON."""
    with open(os.path.join(GOLDEN, "rk4.out.json")) as f:
        golden = json.load(f)
    with Layout.from_json(EXAMPLE) as lay:
        assert (lay.budget, lay.max_budget, lay.requested, lay.precision) == (49152, 0, 256, 8)
        for row in golden["buffers"]:
            p = lay.buffer(row["component"], row["name"])
            assert p == Placement(row["space"], int(row["offset"]), int(row["bytes"]),
                                  row["aliased_with"])
        for row in golden["components"]:
            s = lay.component_sizes(row["name"])
            assert s == LayoutSizes(*(int(row[k]) for k in (
                "shared", "local", "persistent_local", "shared_offset", "local_offset",
                "persistent_local_offset")))
        (k,) = golden["kernels"]
        assert lay.block_size(k["kernel"], k["budget"], k["max_budget"],
                              k["requested"]) == k["threads"] == 64
        k1 = lay.buffers()[3]
        assert isinstance(k1, LayoutBuffer) and k1.placement == lay.buffer("rk4_step", "k1")
        assert (k1.alias, k1.aliased_with, k1.dtype) == ("writeback", "writeback", "float64")
    # The same file as a path object, an open file and a parsed object.
    with open(EXAMPLE) as f:
        doc = json.load(f)
    with open(EXAMPLE, "rb") as f:
        for source in (pathlib.Path(EXAMPLE), f, doc):
            with Layout.from_json(source) as lay:
                assert lay.to_dict() == golden
    # Built by hand, it is the same layout.
    with Layout(precision="float64") as lay:
        for c in doc["components"]:
            lay.add_component(c["name"], c.get("parent"))
            for b in c["buffers"]:
                lay.add_buffer(c["name"], **b)
        lay.compute()
        assert lay.to_dict() == golden


def run_ctl(doc, tmp_path, name="layout.json"):
    """gpubrokerctl --output json layout on @doc (written to a file in
    @tmp_path, read from there so that messages name the file alone)."""
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return subprocess.run([env_path("GPUBROKERCTL"), "--output", "json", "layout", name],
                          cwd=str(tmp_path), env=daemon_env(), capture_output=True, text=True,
                          timeout=60)


def cli_message(e, file):
    """The line gpubrokerctl prints for the refusal @e raised by from_json."""
    where = e.call.partition(": ")[2]
    return "gpubrokerctl: %s: %s%s\n" % (file, where + ": " if where else "", e.detail)


BAD_GOLDEN = {
    "bad-cycle": gpubroker.LayoutAliasCycleError,
    "bad-key": gpubroker.InvalidError,
    "bad-overflow": gpubroker.LayoutOverflowError,
    "bad-persistent-alias": gpubroker.LayoutAliasPersistentError,
}


@pytest.mark.parametrize("name", sorted(BAD_GOLDEN))
def test_bad_golden_files(name):
    with pytest.raises(BAD_GOLDEN[name]) as e:
        Layout.from_json(golden_input(name))
    assert type(e.value) is BAD_GOLDEN[name]
    with open(os.path.join(GOLDEN, name + ".err")) as f:
        assert f.read() == cli_message(e.value, name + ".json")


def test_bad_syntax_golden_file():
    with pytest.raises(json.JSONDecodeError) as e:
        Layout.from_json(os.path.join(GOLDEN, "bad-syntax.json"))
    assert isinstance(e.value, ValueError)
    # The same line (the parsers point at neighbouring columns: Python at the
    # stray comma, cJSON past it).
    with open(os.path.join(GOLDEN, "bad-syntax.err")) as f:
        assert "line %d, column " % e.value.lineno in f.read()


def _doc(*buffers, **top):
    doc = {"components": [{"name": "k", "buffers": list(buffers)}]}
    doc.update(top)
    return doc


MALFORMED = [
    [],
    {"components": [], "precision": "float32"},
    {"components": "k"},
    {"comps": []},
    _doc(precision="float16"),
    _doc(precision=True),
    _doc(budget=-1),
    _doc(budget="x"),
    _doc(budget=1 << 32),
    _doc(max_budget=1.5),
    _doc(block_size=None),
    {"components": [[]]},
    {"components": [{"buffers": []}]},
    {"components": [{"name": 3}]},
    {"components": [{"name": "k", "parent": 3}]},
    {"components": [{"name": "k", "parent": "nobody"}]},
    {"components": [{"name": "k", "buffers": {}}]},
    {"components": [{"name": "k", "buffers": None}]},
    {"components": [{"name": "k", "extra": 1}]},
    {"components": [{"name": "k"}, {"name": "k"}]},
    {"components": [{"name": "y" * 80, "parent": "nobody"}]},
    _doc(3),
    _doc({"size": 1, "location": "shared"}),
    _doc({"name": 7, "size": 1, "location": "shared"}),
    _doc(dict(name="b", location="shared")),
    _doc(dict(name="b", size=-1, location="shared")),
    _doc(dict(name="b", size="012", location="shared")),
    _doc(dict(name="b", size="18446744073709551616", location="shared")),
    _doc(dict(name="b", size=1.5, location="shared")),
    _doc(dict(name="b", size=2.0 ** 54, location="shared")),
    _doc(dict(name="b", size=True, location="shared")),
    _doc(dict(name="b", size=1, location="global")),
    _doc(dict(name="b", size=1)),
    _doc(dict(name="b", size=1, location="shared", persistent="yes")),
    _doc(dict(name="b", size=1, location="shared", persistent=None)),
    _doc(dict(name="b", size=1, location="shared", precision=2)),
    _doc(dict(name="b", size=1, location="shared", precision=None)),
    _doc(dict(name="b", size=1, location="shared", alias=5)),
    _doc(dict(name="b", size=1, location="shared", persistant=True)),
    _doc(dict(name="b", size=0, location="shared")),
    _doc(dict(name="a b", size=1, location="shared")),
    _doc(dict(name="b", size=1, location="shared", alias="zz")),
    _doc(dict(name="b", size="18446744073709551615", location="shared")),
]


@pytest.mark.parametrize("doc", MALFORMED, ids=range(len(MALFORMED)))
def test_malformed_files_as_the_cli_refuses_them(doc, tmp_path):
    """What the CLI refuses, from_json refuses, with the same message."""
    r = run_ctl(doc, tmp_path)
    assert r.returncode == 1 and r.stdout == "", r
    with pytest.raises(gpubroker.GpubrokerError) as e:
        Layout.from_json(doc)
    assert isinstance(e.value, (ValueError, LookupError))  # Invalid, Layout*, NotFound
    assert cli_message(e.value, "layout.json") == r.stderr


def random_layout(rng):
    """A layout description with a few components in a tree and buffers of
    every kind; some aliases break a rule."""
    ncomps = rng.randint(1, 5)
    comps = []
    for i in range(ncomps):
        c = {"name": "c%d" % i, "buffers": []}
        if i and rng.random() < 0.7:
            c["parent"] = "c%d" % rng.randrange(i)
        for j in range(rng.randint(0, 7)):
            b = {"name": "b%d" % j, "size": rng.choice([1, 2, 3, 5, 8, 16, 33, 100]),
                 "location": rng.choice(["shared", "shared", "local"])}
            if rng.random() < 0.25:
                b["persistent"] = True
            if rng.random() < 0.4:
                b["precision"] = rng.choice(["float32", "float64", 4, 8])
            if rng.random() < 0.45 and not b.get("persistent"):
                targets = [t for t in c["buffers"] if t["location"] == b["location"]
                           and not t.get("persistent")]
                if targets and rng.random() < 0.97:
                    b["alias"] = rng.choice(targets)["name"]
                else:  # a rule broken, now and then
                    b["alias"] = rng.choice(["b%d" % (j + 1), "nobody", "b0"])
            c["buffers"].append(b)
        comps.append(c)
    doc = {"components": comps}
    if rng.random() < 0.5:
        doc["precision"] = rng.choice(["float32", "float64"])
    if rng.random() < 0.5:
        doc["budget"] = rng.choice([1024, 4096, 49152, 102400])
        doc["max_budget"] = 232448
    if rng.random() < 0.5:
        doc["block_size"] = 32 * rng.randint(1, 32)
    return doc


@pytest.mark.parametrize("seed", range(16))
def test_random_layouts_against_the_cli(seed, tmp_path):
    doc = random_layout(random.Random(seed))
    r = run_ctl(doc, tmp_path)
    try:
        lay = Layout.from_json(doc)
    except gpubroker.LayoutError as e:
        assert r.returncode == 1 and r.stdout == ""
        assert cli_message(e, "layout.json") == r.stderr
        return
    with lay:
        d = lay.to_dict()
        assert d == json.loads(r.stdout)
        assert json.dumps(d, separators=(",", ":")) + "\n" == r.stdout
        no_fit = [k["kernel"] for k in d["kernels"] if k["threads"] is None]
        assert r.returncode == (1 if no_fit else 0), r.stderr
        if no_fit:  # the CLI names the first; block_size() raises for it
            with pytest.raises(gpubroker.LayoutNoFitError) as e:
                lay.block_size(no_fit[0])
            assert r.stderr == "gpubrokerctl: layout.json: %s\n" % e.value.detail
        check_regions(lay)


def test_random_layouts_cover_the_cases():
    """The seeds above meet aliases that ride, kernels that fit no warp and
    refused layouts (so the cross-check checks something)."""
    seen = set()
    for seed in range(16):
        try:
            with Layout.from_json(random_layout(random.Random(seed))) as lay:
                d = lay.to_dict()
        except gpubroker.LayoutError as e:
            seen.add(type(e).__name__)
            continue
        seen.add("ok")
        if any(b["aliased_with"] for b in d["buffers"]):
            seen.add("rides")
        if any(b["alias"] and not b["aliased_with"] for b in d["buffers"]):
            seen.add("own storage")
        if any(k["threads"] is None for k in d["kernels"]):
            seen.add("no fit")
        if any(c["parent"] for c in d["components"]):
            seen.add("children")
    assert {"ok", "rides", "own storage", "no fit", "children"} <= seen, seen
    assert seen & {"LayoutAliasUnknownError", "LayoutAliasCycleError"}, seen


# ---- lifetime ------------------------------------------------------------------


def test_close_twice_and_use_after_close():
    lay = built(("k", None, [buf("a", 2)]))
    kept = lay.buffers()
    sizes = lay.component_sizes("k")
    assert not lay.closed and "computed" in repr(lay)
    lay.close()
    lay.close()  # a no-op
    assert lay.closed and not lay.computed and "closed" in repr(lay)
    for call in (lambda: lay.add_component("c"), lambda: lay.add_buffer("k", "b", 1),
                 lay.compute, lambda: lay.buffer("k", "a"), lambda: lay.component_sizes("k"),
                 lambda: lay.block_size("k"), lay.buffers, lay.components, lay.kernels,
                 lay.to_dict):
        with pytest.raises(gpubroker.InvalidError) as e:
            call()
        assert "closed" in str(e.value)
    # Records are copies: still whole after the layout is freed.
    assert kept[0].name == "a" and kept[0].component == "k" and sizes.shared == 8
    with lay:  # entering a closed layout and leaving it again is harmless
        pass


def test_with_block_and_garbage_collection():
    with Layout() as lay:
        fin = lay._finalizer
        assert fin.alive
    assert lay.closed and not fin.alive
    with pytest.raises(RuntimeError):
        with Layout() as lay:
            raise RuntimeError("boom")
    assert lay.closed
    lay = built(("k", None, [buf("a", 2)]))
    fin = lay._finalizer
    del lay
    gc.collect()
    assert not fin.alive  # freed with its last reference


def test_many_layouts_and_failed_loads_free_everything():
    """Under ASan (python suite of the sanitizer build) a double free or a
    use after free here aborts; leaks are the C unit tests' business."""
    for i in range(200):
        lay = Layout.from_json(EXAMPLE)
        if i % 2:
            lay.close()
        with pytest.raises(gpubroker.LayoutAliasCycleError):
            Layout.from_json(os.path.join(GOLDEN, "bad-cycle.json"))
    gc.collect()


def test_threads_share_a_layout_and_one_closes_it():
    lay = Layout.from_json(EXAMPLE)
    golden = lay.to_dict()
    failures = []

    def reader():
        try:
            for _ in range(200):
                try:
                    assert lay.to_dict() == golden
                    assert lay.buffer("rk4_step", "k2").offset == 256
                except gpubroker.InvalidError as e:
                    assert "closed" in e.detail
                    return
        except Exception as e:  # noqa: BLE001 - reported below
            failures.append(e)

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for t in threads:
        t.start()
    lay.close()
    for t in threads:
        t.join()
    assert not failures, failures


def test_docs_python_example(capsys):
    """The example of docs/layout.md ("From Python") runs and prints what its
    comments say."""
    with open(os.path.join(TOP, "docs", "layout.md")) as f:
        text = f.read()
    section = text[text.index("## From Python"):]
    code = section[section.index("```python\n") + 10:section.index("```\n", 10)]
    namespace = {}
    exec(compile(code, "docs/layout.md", "exec"), namespace)  # noqa: S102 - our own docs
    lay = namespace["l"]
    assert lay.closed
    lines = capsys.readouterr().out.splitlines()
    assert lines[2] == "rk4_step k1 shared 128 128 writeback"
    assert len(lines) == 5
    for comment in ("offset=128, bytes=128", "aliased_with='writeback'",
                    "LayoutSizes(shared=512, local=160, persistent_local=0", "# 96"):
        assert comment in code


def test_meson_installs_every_module():
    """python/meson.build lists each module of the package (layout.py
    included), so that `meson install` installs what the tests test."""
    pkg = os.path.join(TOP, "python", "gpubroker")
    with open(os.path.join(TOP, "python", "meson.build")) as f:
        listed = set(re.findall(r"'gpubroker/(\w+\.py)'", f.read()))
    assert listed == {n for n in os.listdir(pkg) if n.endswith(".py")}
