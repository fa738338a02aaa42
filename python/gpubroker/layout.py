"""Layout: the kernel buffer layout planner (gpb_layout_*) of libgpubroker.

Pure computation, as in C: no daemon, no connection, no device. The model
(components, buffers, the three address spaces, alignment, aliases, block
size) is in docs/layout.md; the rules are the library's, so a layout gives
the same answer here, in C and from ``gpubrokerctl layout``.

    from gpubroker import Layout

    with Layout(precision="float64") as l:
        l.add_component("rk4_step")
        l.add_component("rhs", parent="rk4_step")
        l.add_buffer("rk4_step", "state", 16, persistent=True)
        l.add_buffer("rk4_step", "writeback", 48)
        l.add_buffer("rk4_step", "k1", 16, alias="writeback")
        l.add_buffer("rhs", "terms", 8, location="local")
        l.compute()
        l.buffer("rk4_step", "k1")         # Placement(space='shared', offset=128, ...)
        l.block_size("rk4_step", requested=256)

``Layout.from_json()`` reads the files ``gpubrokerctl layout`` reads, and
``to_dict()`` gives what ``gpubrokerctl --output json layout`` prints.

Sizes are per thread, in bytes; offsets are bytes from the start of a
thread's slice of a space. Records are copies: they stay valid after the
layout is closed. A layout serialises its own calls with a lock, so it may
be shared between threads (the C object may not).
"""

import ctypes
import dataclasses
import json
import numbers
import operator
import os
import threading
import weakref
from typing import Optional

from . import _lib, dtypes, errors

DEFAULT_BUDGET = 49152  # GPB_LAYOUT_DEFAULT_BUDGET: 48 KiB of shared memory per block
WARP = 32  # GPB_LAYOUT_WARP
MAX_THREADS = 1024  # GPB_LAYOUT_MAX_THREADS
MAX_NAME = 64  # GPB_LAYOUT_MAX_NAME
MAX_COMPONENTS = 1024  # GPB_LAYOUT_MAX_COMPONENTS
MAX_BUFFERS = 4096  # GPB_LAYOUT_MAX_BUFFERS
DEFAULT_REQUESTED = 256  # gpubrokerctl layout's block size when the file sets none

LOCATIONS = ("shared", "local")  # enum gpb_layout_location, by value
SPACES = ("shared", "local", "persistent_local")  # enum gpb_layout_space, by value
_PRECISION_NAMES = {4: "float32", 8: "float64"}
_U32_MAX = (1 << 32) - 1
_U64_MAX = (1 << 64) - 1
_JSON_EXACT = 1 << 53  # the largest JSON number taken as an exact integer


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where a buffer was placed (struct gpb_layout_placement): its ``space``
    ('shared', 'local' or 'persistent_local'), its ``offset`` and ``bytes``
    in a thread's slice of that space, and ``aliased_with``, the buffer
    whose storage it shares (None when it has storage of its own)."""

    space: str
    offset: int
    bytes: int
    aliased_with: Optional[str]


@dataclasses.dataclass(frozen=True)
class LayoutBuffer:
    """A buffer as registered (struct gpb_layout_buffer) and where it went
    (struct gpb_layout_placement), as gpb_layout_buffer_at() gives them.
    ``precision`` is bytes per element (4 or 8); ``dtype`` names it."""

    component: str
    name: str
    size: int
    location: str
    persistent: bool
    alias: Optional[str]
    precision: int
    space: str
    offset: int
    bytes: int
    aliased_with: Optional[str]

    @property
    def dtype(self):
        """'float32' or 'float64'."""
        return _PRECISION_NAMES[self.precision]

    @property
    def placement(self):
        return Placement(self.space, self.offset, self.bytes, self.aliased_with)


@dataclasses.dataclass(frozen=True)
class LayoutSizes:
    """A component's region, its buffers' and its descendants', per thread
    (struct gpb_layout_sizes): bytes in each space (cubie's
    shared_buffer_size, local_buffer_size, persistent_local_buffer_size) and
    where the region starts in each."""

    shared: int
    local: int
    persistent_local: int
    shared_offset: int
    local_offset: int
    persistent_local_offset: int


@dataclasses.dataclass(frozen=True)
class LayoutComponent:
    """One component (struct gpb_layout_component_info): ``parent`` is None
    and ``depth`` 0 for a root (a kernel)."""

    name: str
    parent: Optional[str]
    depth: int
    sizes: LayoutSizes


@dataclasses.dataclass(frozen=True)
class KernelBlock:
    """A kernel's (a root's) block size, as a row of ``kernels`` in
    ``gpubrokerctl --output json layout``: ``threads`` and
    ``shared_per_block`` are None when not even one warp fits ``budget``."""

    kernel: str
    budget: int
    max_budget: int
    requested: int
    threads: Optional[int]
    shared_per_block: Optional[int]


def _sizes(s):
    return LayoutSizes(s.shared, s.local, s.persistent_local, s.shared_offset, s.local_offset,
                       s.persistent_local_offset)


def _invalid(detail, call):
    return errors.InvalidError(errors.E_INVALID, detail, call)


def _name(value, what, call):
    """A name as a C string. The library checks the rules; a NUL would cut
    the string short in C, so it is refused here with the library's error."""
    if not isinstance(value, str):
        raise TypeError("gpubroker: a %s name is a str, not %r" % (what, value))
    if "\0" in value:
        raise errors.LayoutNameError(errors.E_LAYOUT_NAME,
                                     "%s name %r holds a NUL byte" % (what, value), call)
    # Surrogates pass as bytes above 0x7e, which the library refuses.
    return value.encode("utf-8", "surrogatepass")


def _precision(value, call):
    """Bytes per element: 4 or 8, or a dtype of that size ('float32',
    'float64', 'f8', numpy.float64...)."""
    if isinstance(value, bool):
        raise TypeError("gpubroker: a precision is 4, 8 or a dtype, not %r" % (value,))
    n = int(value) if isinstance(value, numbers.Integral) else dtypes.itemsize(value)
    if n not in _PRECISION_NAMES:
        raise _invalid("precision %r is %d bytes per element, neither 4 (float32) nor 8 "
                       "(float64)" % (value, n), call)
    return n


def _unsigned(value, maximum, what, call):
    try:
        n = operator.index(value)
    except TypeError:
        raise TypeError("gpubroker: %s is an int, not %r" % (what, value)) from None
    if not 0 <= n <= maximum:
        raise _invalid("%s %d is outside 0-%d" % (what, n, maximum), call)
    return n


def _destroy(lib, handle):
    lib.gpb_layout_destroy(handle)


class Layout:
    """A kernel buffer layout (a gpb_layout).

    @precision: the default bytes per element of add_buffer() (4, 8 or a
    dtype). @budget, @max_budget and @requested: the launch settings that
    block_size(), kernels() and to_dict() use when given none (0 means
    DEFAULT_BUDGET, as in C; a file's "block_size" is @requested).

    Freed by close() (or leaving a ``with`` block, or garbage collection);
    after that every call raises InvalidError and close() does nothing.
    """

    def __init__(self, precision=4, budget=0, max_budget=0, requested=DEFAULT_REQUESTED):
        self.precision = _precision(precision, "Layout")
        self.budget = _unsigned(budget, _U32_MAX, "budget", "Layout")
        self.max_budget = _unsigned(max_budget, _U32_MAX, "max_budget", "Layout")
        self.requested = _unsigned(requested, _U32_MAX, "requested", "Layout")
        self._lock = threading.RLock()
        self._computed = False
        lib = _lib.lib()
        handle = ctypes.c_void_p()
        errors.check(lib.gpb_layout_create(ctypes.byref(handle)), "Layout")
        self._lib = lib
        self._handle = handle
        self._finalizer = weakref.finalize(self, _destroy, lib, handle)

    # ---- lifetime ----------------------------------------------------------

    def close(self):
        """Frees the C layout. Idempotent."""
        with self._lock:
            self._handle = None
            self._computed = False
            self._finalizer()

    @property
    def closed(self):
        return self._handle is None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        state = "closed" if self.closed else ("computed" if self._computed else "not computed")
        return "<gpubroker.Layout %s>" % state

    def _open_handle(self, call):
        """The C layout (call with the lock held); InvalidError once closed."""
        if self._handle is None:
            raise _invalid("the layout is closed", call)
        return self._handle

    def _call(self, call, fn, *args):
        """fn(handle, *args) under the lock; raises the code's exception
        (read on this thread, right after the call)."""
        with self._lock:
            return errors.check(fn(self._open_handle(call), *args), call)

    # ---- building ----------------------------------------------------------

    @property
    def computed(self):
        """True when compute() succeeded since the last change."""
        return self._computed

    def add_component(self, name, parent=None):
        """Adds component @name under @parent (added before), or as a root
        (a kernel) when @parent is None."""
        call = "add_component"
        cname = _name(name, "component", call)
        cparent = None if parent is None else _name(parent, "parent", call)
        with self._lock:
            self._call(call, self._lib.gpb_layout_add_component, cname, cparent)
            self._computed = False

    def add_buffer(self, component, name, size, location="shared", persistent=False,
                   alias=None, precision=None):
        """Registers buffer @name of @component: @size elements, @location
        'shared' or 'local', @persistent (never aliased), @alias (a buffer
        of the same component whose lifetime never overlaps this one's; it
        may be added later), @precision (4, 8 or a dtype; default: the
        layout's)."""
        call = "add_buffer"
        d = _lib.gpb_layout_buffer()
        d.component = _name(component, "component", call)
        d.name = _name(name, "buffer", call)
        d.size = _unsigned(size, _U64_MAX, "size", call)
        if location not in LOCATIONS:
            raise _invalid("location %r is neither 'shared' nor 'local'" % (location,), call)
        d.location = LOCATIONS.index(location)
        d.persistent = 1 if persistent else 0
        d.alias = None if alias is None else _name(alias, "alias", call)
        d.precision = _precision(self.precision if precision is None else precision, call)
        with self._lock:
            self._call(call, self._lib.gpb_layout_add_buffer, ctypes.byref(d))
            self._computed = False

    def compute(self):
        """Places every buffer; the queries need it after every change. A
        refused layout stays uncomputed. Returns self."""
        with self._lock:
            self._computed = False
            self._call("compute", self._lib.gpb_layout_compute)
            self._computed = True
        return self

    # ---- queries (after compute()) -----------------------------------------

    def buffer(self, component, name):
        """Where buffer @name of @component was placed: a Placement."""
        call = "buffer"
        p = _lib.gpb_layout_placement()
        with self._lock:
            self._call(call, self._lib.gpb_layout_buffer_info, _name(component, "component", call),
                       _name(name, "buffer", call), ctypes.byref(p))
            return Placement(SPACES[p.space], p.offset, p.bytes,
                             _lib.text(p.aliased_with) or None)

    def component_sizes(self, component):
        """@component's region (its buffers' and its descendants'): LayoutSizes."""
        call = "component_sizes"
        s = _lib.gpb_layout_sizes()
        self._call(call, self._lib.gpb_layout_component_sizes,
                   _name(component, "component", call), ctypes.byref(s))
        return _sizes(s)

    def block_size(self, component, budget=None, max_budget=None, requested=None):
        """Threads per block for @component (a kernel): @requested when its
        shared bytes per thread x @requested fit @budget, else the largest
        whole number of warps below that fits. Raises LayoutNoFitError when
        not even one warp fits. None takes the layout's setting; a budget
        of 0 means DEFAULT_BUDGET, and so does a max_budget of 0 (the
        device's opt-in limit: 232448 on an H100)."""
        call = "block_size"
        budget, max_budget, requested = self._launch(budget, max_budget, requested, call)
        threads = ctypes.c_uint32()
        self._call(call, self._lib.gpb_layout_block_size, _name(component, "component", call),
                   budget, max_budget, requested, ctypes.byref(threads))
        return threads.value

    def _launch(self, budget, max_budget, requested, call):
        return (_unsigned(self.budget if budget is None else budget, _U32_MAX, "budget", call),
                _unsigned(self.max_budget if max_budget is None else max_budget, _U32_MAX,
                          "max_budget", call),
                _unsigned(self.requested if requested is None else requested, _U32_MAX,
                          "requested", call))

    def _listing(self, call, fn, *out):
        """fn(handle, index, *out) for index 0, 1, ... until past the end;
        yields after each (the lock held: the strings in @out are the
        layout's until it is freed)."""
        with self._lock:
            handle = self._open_handle(call)
            index = 0
            while True:
                rc = fn(handle, index, *[ctypes.byref(o) for o in out])
                if rc == errors.E_NOT_FOUND:
                    return
                errors.check(rc, call)  # not computed
                yield
                index += 1

    def buffers(self):
        """Every buffer in layout order (each root's components depth first,
        each component's buffers in the order added): LayoutBuffer records."""
        d = _lib.gpb_layout_buffer()
        p = _lib.gpb_layout_placement()
        return [LayoutBuffer(
            _lib.text(d.component), _lib.text(d.name), d.size, LOCATIONS[d.location],
            bool(d.persistent), _lib.text(d.alias) or None, d.precision,
            SPACES[p.space], p.offset, p.bytes, _lib.text(p.aliased_with) or None)
            for _ in self._listing("buffers", self._lib.gpb_layout_buffer_at, d, p)]

    def components(self):
        """Every component in layout order (depth first): LayoutComponent records."""
        c = _lib.gpb_layout_component_info()
        return [LayoutComponent(_lib.text(c.name), _lib.text(c.parent) or None, c.depth,
                                _sizes(c.sizes))
                for _ in self._listing("components", self._lib.gpb_layout_component_at, c)]

    def kernels(self, budget=None, max_budget=None, requested=None):
        """Each root's block size (see block_size()), as KernelBlock rows:
        threads None where not even one warp fits. Other refusals (a budget
        above max_budget, a block that is not whole warps) raise."""
        budget, max_budget, requested = self._launch(budget, max_budget, requested, "kernels")
        rows = []
        for c in self.components():
            if c.parent is not None:
                continue
            try:
                threads = self.block_size(c.name, budget, max_budget, requested)
            except errors.LayoutNoFitError:
                threads = None
            rows.append(KernelBlock(
                c.name, budget or DEFAULT_BUDGET, max_budget or DEFAULT_BUDGET, requested,
                threads, None if threads is None else c.sizes.shared * threads))
        return rows

    def to_dict(self):
        """What ``gpubrokerctl --output json layout`` prints for this layout
        and its launch settings: {"buffers", "components", "kernels"}, the
        same members in the same order, 64-bit quantities as decimal strings
        as the protocol writes them (so ``json.dumps(d, separators=(",",
        ":"))`` is the CLI's line)."""
        bufs = [{
            "component": b.component, "name": b.name, "location": b.location,
            "persistent": b.persistent, "precision": b.dtype, "size": str(b.size),
            "space": b.space, "offset": str(b.offset), "bytes": str(b.bytes),
            "alias": b.alias, "aliased_with": b.aliased_with,
        } for b in self.buffers()]
        comps = [{
            "name": c.name, "parent": c.parent, "shared": str(c.sizes.shared),
            "local": str(c.sizes.local), "persistent_local": str(c.sizes.persistent_local),
            "shared_offset": str(c.sizes.shared_offset),
            "local_offset": str(c.sizes.local_offset),
            "persistent_local_offset": str(c.sizes.persistent_local_offset),
        } for c in self.components()]
        kernels = [{
            "kernel": k.kernel, "budget": k.budget, "max_budget": k.max_budget,
            "requested": k.requested, "threads": k.threads,
            "shared_per_block": None if k.shared_per_block is None else str(k.shared_per_block),
        } for k in self.kernels()]
        return {"buffers": bufs, "components": comps, "kernels": kernels}

    # ---- the file format of gpubrokerctl layout ----------------------------

    @classmethod
    def from_json(cls, source):
        """A computed layout from the JSON that ``gpubrokerctl layout`` reads
        (docs/layout.md): @source is a path, an open file or the parsed
        object. The file's "precision", "budget", "max_budget" and
        "block_size" become the layout's precision, budget, max_budget and
        requested. What the CLI refuses is refused: a malformed file raises
        InvalidError (a ValueError; json.JSONDecodeError for bad JSON)
        naming the member, a layout error its own class."""
        label = "from_json"
        if isinstance(source, (str, bytes, os.PathLike)):
            label = "from_json(%s)" % os.fsdecode(source)
            with open(source, "rb") as f:
                source = json.load(f)
        elif hasattr(source, "read"):
            source = json.load(source)
        return _Loader(label).load(cls, source)


class _Loader:
    """gpubrokerctl layout's reading of the file (client/ctl/ctl_layout.c), with
    its checks and its messages: where, then what."""

    def __init__(self, call):
        self.call = call

    def fail(self, where, what):
        return _invalid("%s: %s" % (where, what) if where else what, self.call)

    def keys(self, where, obj, keys):
        if not isinstance(obj, dict):
            raise self.fail(where, "not an object")
        for k in obj:
            if k not in keys:
                raise self.fail(where, "unknown member '%s'" % k)

    @staticmethod
    def u64(v, maximum):
        """A JSON number up to 2^53 or a decimal string, at most @maximum;
        None when it is neither."""
        if isinstance(v, bool):
            return None
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if isinstance(v, int):
            n = v if 0 <= v <= _JSON_EXACT else None
        elif (isinstance(v, str) and 0 < len(v) <= 20 and v.isascii() and v.isdigit()
              and (v == "0" or v[0] != "0")):
            n = int(v)
        else:
            return None
        return n if n is not None and n <= min(maximum, _U64_MAX) else None

    def precision(self, v):
        if v in ("float32", "float64"):
            return 4 if v == "float32" else 8
        n = self.u64(v, 8) if isinstance(v, (int, float)) else None
        return n if n in (4, 8) else None

    def wrap(self, where, fn, *args):
        """A library refusal, with @where prepended to its call."""
        try:
            fn(*args)
        except errors.GpubrokerError as e:
            call = "%s: %s" % (self.call, where) if where else self.call
            raise type(e)(e.code, e.detail, call) from None

    def load(self, cls, root):
        self.keys("the top level", root, ("precision", "budget", "max_budget", "block_size",
                                          "components", "description"))
        precision = 4
        if "precision" in root:
            precision = self.precision(root["precision"])
            if precision is None:
                raise self.fail("precision", 'must be "float32" or "float64"')
        launch = {"budget": 0, "max_budget": 0, "block_size": DEFAULT_REQUESTED}
        for key in launch:
            if key in root:
                launch[key] = self.u64(root[key], _U32_MAX)
                if launch[key] is None:
                    raise self.fail(key, "not a whole number up to %d" % _U32_MAX)
        comps = root.get("components")
        if not isinstance(comps, list) or not comps:
            raise self.fail("components", "must be a non-empty array")
        layout = cls(precision, launch["budget"], launch["max_budget"], launch["block_size"])
        try:
            for ci, c in enumerate(comps):
                self.component(layout, ci, c)
            self.wrap(None, layout.compute)
        except BaseException:
            layout.close()
            raise
        return layout

    def component(self, layout, ci, c):
        where = "components[%d]" % ci
        self.keys(where, c, ("name", "parent", "buffers"))
        name = c.get("name")
        if not isinstance(name, str):
            raise self.fail(where, "'name' must be a string")
        where = "components[%d] ('%.64s')" % (ci, name)
        parent = c.get("parent")
        if parent is not None and not isinstance(parent, str):
            raise self.fail(where, "'parent' must be a component name or null")
        self.wrap(where, layout.add_component, name, parent)
        bufs = c.get("buffers", [])
        if not isinstance(bufs, list):
            raise self.fail(where, "'buffers' must be an array")
        for bi, b in enumerate(bufs):
            bname = b.get("name") if isinstance(b, dict) else None
            where = "components[%d].buffers[%d] ('%.64s')" % (
                ci, bi, bname if isinstance(bname, str) else "?")
            self.buffer(layout, where, name, b)

    def buffer(self, layout, where, comp, b):
        self.keys(where, b, ("name", "size", "location", "persistent", "precision", "alias"))
        name = b.get("name")
        if not isinstance(name, str):
            raise self.fail(where, "'name' must be a string")
        size = self.u64(b.get("size"), _U64_MAX)
        if size is None:
            raise self.fail(where, "'size' must be a number of elements (or a decimal string)")
        location = b.get("location")
        if location not in LOCATIONS:
            raise self.fail(where, "'location' must be \"shared\" or \"local\"")
        persistent = b.get("persistent", False)
        if not isinstance(persistent, bool):
            raise self.fail(where, "'persistent' must be true or false")
        precision = None
        if "precision" in b:
            precision = self.precision(b["precision"])
            if precision is None:
                raise self.fail(where, "'precision' must be \"float32\" or \"float64\"")
        alias = b.get("alias")
        if alias is not None and not isinstance(alias, str):
            raise self.fail(where, "'alias' must be a buffer name or null")
        self.wrap(where, layout.add_buffer, comp, name, size, location, persistent, alias,
                  precision)
