"""Client: one connection to gpubrokerd (a gpb_client)."""

import collections.abc
import ctypes
import json
import os
import select
import threading
import time
import weakref

from . import _lib, _schema as S, dtypes, errors
from .allocation import ALLOC, ATTACH, CLAIM, HOST, Allocation, _stream_ptr
from .records import (MODES, ArrayRequest, Chunking, Event, GroupInfo, InstanceInfo,
                      MemInfo, PolicyInfo, PoolStats)

DEFAULT_SOCKET = "/run/gpubroker/gpubroker.sock"  # GPB_DEFAULT_SOCKET_PATH


class _Conn:
    """The gpb_client pointer and the lock that keeps it from being
    disconnected under a call. Shared by the Client and the finalizers of
    its allocations (which must not keep the Client alive)."""

    def __init__(self, lib, handle):
        self.lib = lib
        self.handle = handle
        self.lock = threading.RLock()

    def close(self):
        with self.lock:
            handle, self.handle = self.handle, None
            if handle is not None:
                self.lib.gpb_disconnect(handle)


def _timeout_ms(timeout):
    ms = int(round(timeout * 1000))
    if ms < 0 or ms > S.MAX_WAIT_MS:
        raise errors.InvalidError(errors.E_INVALID,
                                  "timeout outside 0-%d s" % (S.MAX_WAIT_MS // 1000), "alloc")
    return ms


# ArrayRequest.memory -> gpb_array_request.type (GPB_HOST_PINNED, GPB_HOST_MAPPED).
_MEMORY_TYPES = {S.V_MEM_DEVICE: 0, S.V_MEM_PINNED: 1, S.V_MEM_MAPPED: 2}


def _array_requests(requests):
    """A list of (label, ArrayRequest) as a ctypes array of gpb_array_request
    (the label strings are kept alive by the array's _keep)."""
    arr = (_lib.gpb_array_request * len(requests))()
    keep = []
    for slot, (label, req) in zip(arr, requests):
        shape = dtypes.shape_tuple(req.shape)
        if not 1 <= len(shape) <= S.MAX_DIMS:
            raise errors.InvalidError(errors.E_INVALID,
                                      "a shape has 1-%d dimensions" % S.MAX_DIMS, "array request")
        b = _lib.cstr(label)
        keep.append(b)
        slot.label = b
        for i, d in enumerate(shape):
            if d < 1:
                raise errors.InvalidError(errors.E_INVALID, "dimensions are at least 1",
                                          "array request")
            slot.shape[i] = d
        slot.ndim = len(shape)
        slot.elem_size = dtypes.itemsize(req.dtype)
        slot.axis = req.chunk_axis
        slot.unchunkable = 1 if req.unchunkable else 0
        if req.memory not in _MEMORY_TYPES:
            raise errors.InvalidError(errors.E_INVALID,
                                      "memory is %s" % " or ".join(map(repr, _MEMORY_TYPES)),
                                      "array request")
        slot.type = _MEMORY_TYPES[req.memory]
    arr._keep = keep
    return arr


def _as_requests(label_or_requests, shape, dtype, chunk_axis, unchunkable,
                 memory=S.V_MEM_DEVICE):
    """queue_request()'s two spellings as a list of (label, ArrayRequest)."""
    if isinstance(label_or_requests, collections.abc.Mapping):
        out = []
        for label, req in label_or_requests.items():
            if not isinstance(req, ArrayRequest):
                req = ArrayRequest(**req) if isinstance(req, dict) else ArrayRequest(req)
            out.append((label, req))
        return out
    if shape is None:
        raise TypeError("queue_request(instance, label, shape=...) or "
                        "queue_request(instance, {label: ArrayRequest(...)})")
    return [(label_or_requests, ArrayRequest(shape, dtype, chunk_axis, unchunkable, memory))]


def _wire_request(label, req):
    """An ArrayRequest as the protocol's array request object."""
    return {S.F_LABEL: label, S.F_SHAPE: list(req.shape), S.F_ELEM_SIZE: dtypes.itemsize(req.dtype),
            S.F_AXIS: req.chunk_axis, S.F_UNCHUNKABLE: bool(req.unchunkable),
            S.F_TYPE: req.memory}


def _event_queuer(pending):
    """The gpb_event_fn: appends each event to @pending."""

    def on_event(_client, name, data, _userdata):
        try:
            pending.append(Event(_lib.text(name), json.loads(_lib.text(data) or "{}")))
        except Exception:  # noqa: BLE001 -- nothing may escape into C
            pass

    return on_event


class Client:
    """A connection to gpubrokerd.

    ``Client(socket=None, name=None)`` connects and says hello; with
    @socket None the library uses ``$GPUBROKER_SOCKET``, else
    ``/run/gpubroker/gpubroker.sock``. Use it as a context manager, or call
    close(); everything the connection held (instances, allocations,
    attachments) is released by the daemon when it closes.

    Every call may raise a gpubroker.GpubrokerError subclass (see
    gpubroker.errors). Events arrive through dispatch(): poll fileno() for
    readability (or call wait_event()) and register handlers with on().
    """

    def __init__(self, socket=None, name=None):
        lib = _lib.lib()
        #: the socket path as the library resolves it (for other processes)
        self.socket = socket or os.environ.get("GPUBROKER_SOCKET") or DEFAULT_SOCKET
        handle = ctypes.c_void_p()
        errors.check(lib.gpb_connect(_lib.cstr(socket), _lib.cstr(name), ctypes.byref(handle)),
                     "connect")
        self._conn = _Conn(lib, handle.value)
        self._finalizer = weakref.finalize(self, self._conn.close)
        self._backend = None
        self._handlers = {}
        self._pending = []
        # The library calls this from gpb_dispatch() only; it merely queues,
        # so that handlers run (and may raise) outside the C call. It holds
        # the list, not the Client, so that dropping the Client frees it.
        self._event_fn = _lib.EVENT_FN(_event_queuer(self._pending))
        lib.gpb_set_event_callback(self._conn.handle, self._event_fn, None)
        self._allocations = weakref.WeakValueDictionary()

    # ---- connection ---------------------------------------------------------

    def close(self):
        """Disconnects (gpb_disconnect). Allocations of this client become
        freed (their pointers invalid); calling close() again does nothing."""
        self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def closed(self):
        return self._conn.handle is None

    def _call(self, name, *args):
        """Calls gpb_<name>(client, *args) under the lock; raises on error."""
        with self._conn.lock:
            if self._conn.handle is None:
                raise errors.InvalidError(errors.E_INVALID, "the client is closed", name)
            rc = getattr(self._conn.lib, "gpb_" + name)(self._conn.handle, *args)
            if rc < 0:
                raise errors.error_for(rc, name)
            return rc

    def request(self, method, params=None):
        """Any protocol request (gpb_request): @params a dict (or None), the
        result as a dict. See proto/PROTOCOL.md for the methods."""
        out = ctypes.c_void_p()
        body = None if params is None else _lib.cstr(json.dumps(params))
        self._call("request", _lib.cstr(method), body, ctypes.byref(out))
        try:
            return json.loads(ctypes.string_at(out.value).decode("utf-8"))
        finally:
            self._conn.lib.gpb_string_free(out)

    @property
    def backend(self):
        """The daemon's backend, "sim" or "cuda" (from `status`, once)."""
        if self._backend is None:
            self._backend = self.request(S.M_STATUS)[S.F_BACKEND]
        return self._backend

    # ---- instances ----------------------------------------------------------

    def register(self, name, device=0, proportion=None, group=None, device_uuid=None):
        """Registers an instance (gpb_register) and returns its id: @device by
        index or @device_uuid ("GPU-..."); @proportion in (0, 1] for the
        manual pool, None for the auto pool; @group a stream group."""
        opts = _lib.gpb_register_opts(name=_lib.cstr(name), device=device,
                                      proportion=proportion or 0.0, group=_lib.cstr(group),
                                      device_uuid=_lib.cstr(device_uuid))
        ident = ctypes.c_uint64()
        self._call("register", ctypes.byref(opts), ctypes.byref(ident))
        return ident.value

    def unregister(self, instance):
        """Ends an instance (it must hold no allocations)."""
        self._call("unregister", instance)

    # ---- memory -------------------------------------------------------------

    def _adopt(self, raw, kind, **kw):
        a = Allocation(self, raw, kind, **kw)
        self._allocations[a.id] = a
        return a

    def alloc(self, instance, size, alignment=0, timeout=None, stream=None):
        """Allocates @size bytes for @instance (gpb_alloc). With @timeout
        (seconds) the daemon holds the request up to that long when there is
        no room (gpb_alloc_wait); BrokerTimeoutError when none comes. With
        @stream (a CUstream as an int, 0 for the legacy default stream, or
        an object with ``ptr`` (CuPy) or ``handle`` (Numba)), memory used in
        stream order on it (gpb_alloc_async): freed with free_async() on the
        same stream, its block is that stream's again at once. Not both."""
        raw = _lib.gpb_allocation()
        if stream is not None and timeout is not None:
            raise errors.InvalidError(errors.E_INVALID, "alloc: a timeout or a stream, not both",
                                      "alloc")
        if stream is not None:
            self._call("alloc_async", instance, size, alignment,
                       ctypes.c_void_p(_stream_ptr(stream)), ctypes.byref(raw))
        elif timeout is None:
            self._call("alloc", instance, size, alignment, ctypes.byref(raw))
        else:
            self._call("alloc_wait", instance, size, alignment, _timeout_ms(timeout),
                       ctypes.byref(raw))
        return self._adopt(raw, ALLOC, instance=instance)

    def alloc_host(self, instance, size, mapped=False):
        """Pinned (or, with @mapped, pinned and device-mapped) host memory
        of @size bytes (gpb_alloc_host): an Allocation of kind "host", whose
        memoryview(), read() and write() work on every backend."""
        raw = _lib.gpb_allocation()
        self._call("alloc_host", instance, size, 2 if mapped else 1, ctypes.byref(raw))
        return self._adopt(raw, HOST, instance=instance)

    def host_device_pointer(self, allocation):
        """The device's address of mapped host memory (an Allocation or id)."""
        ident = allocation.id if isinstance(allocation, Allocation) else allocation
        out = ctypes.c_void_p()
        self._call("host_device_pointer", ident, ctypes.byref(out))
        return out.value

    def alloc_array(self, instance, shape, dtype="float32", **kw):
        """alloc() of the bytes of an array of @shape and @dtype."""
        a = self.alloc(instance, dtypes.nbytes(shape, dtype), **kw)
        a.shape = dtypes.shape_tuple(shape)
        return a

    def free(self, allocation):
        """Frees an Allocation (same as allocation.free()) or an id."""
        if isinstance(allocation, Allocation):
            allocation.free()
            return
        a = self._allocations.get(allocation)
        if a is not None:
            a.free()
        else:
            self._call("free", allocation)

    def free_async(self, allocation, stream=None):
        """Frees an Allocation once @stream's queued work has run
        (allocation.free_async(); gpb_free_async)."""
        if not isinstance(allocation, Allocation):
            allocation = self._allocations.get(allocation)
            if allocation is None:
                raise errors.NotFoundError(errors.E_NOT_FOUND, "no such allocation",
                                           "free_async")
        allocation.free_async(stream)

    def attach(self, ident):
        """Maps another connection's allocation of the same user, by id
        (gpb_attach). The Allocation detaches when freed or collected."""
        raw = _lib.gpb_allocation()
        self._call("attach", ident, ctypes.byref(raw))
        return self._adopt(raw, ATTACH)

    def export(self, allocation, name, uid=None):
        """Names one of this client's allocations (an Allocation or an id)
        so that a client of @uid (default: this user) can open it with
        open_shared() (gpb_export); another user names this one as the
        owner, open_shared(name, owner=this uid). Another uid needs an allocation that
        fills a slab of its own (a multiple of 2 MiB above the daemon's slab
        size, or under the "direct" allocator). The name goes when the
        allocation is freed, with unexport(), or when this client closes;
        what was opened stays until its openers let it go."""
        ident = allocation.id if isinstance(allocation, Allocation) else allocation
        self._call("export", ident, _lib.cstr(name), -1 if uid is None else uid)

    def unexport(self, name):
        """Withdraws a name given by export() (gpb_unexport)."""
        self._call("unexport", _lib.cstr(name))

    def open_shared(self, name, owner=None):
        """Maps the allocation exported under @name by the user @owner (a
        uid; default: this user) and granted to this user
        (gpb_open_shared_from): an Allocation of kind "attach", which
        detaches when freed or collected. Names are per exporting user: a
        name alone only finds this user's own exports. The memory stays
        allocated while it is open, even after its exporter freed it or
        went away."""
        raw = _lib.gpb_allocation()
        self._call("open_shared_from", -1 if owner is None else owner, _lib.cstr(name),
                   ctypes.byref(raw))
        return self._adopt(raw, ATTACH)

    def detach(self, attachment):
        """Drops an attachment (an Allocation from attach(), or an id)."""
        if isinstance(attachment, Allocation):
            attachment.free()
        else:
            self._call("detach", attachment)

    def release_kept(self):
        """Unmaps the slabs this client keeps mapped with nothing in them
        (an emptied slab stays mapped for the next allocation, up to
        GPUBROKER_KEEP_SLABS per process) and gives them back to the daemon
        (gpb_release_kept). Returns how many."""
        return self._call("release_kept")

    def mem_info(self, instance):
        """Memory as @instance sees it (gpb_mem_info): a MemInfo."""
        out = _lib.gpb_mem_info()
        self._call("mem_info", instance, ctypes.byref(out))
        return MemInfo.from_struct(out)

    def device_index(self, uuid):
        """The index of the device with UUID @uuid ("GPU-...", as the daemon
        names it; gpb_device_index)."""
        index = ctypes.c_int()
        self._call("device_index", _lib.cstr(uuid), ctypes.byref(index))
        return index.value

    def _device(self, device):
        """@device as an index: an int, or a UUID string."""
        return self.device_index(device) if isinstance(device, str) else device

    def stats(self, device=0):
        """Pool statistics of @device (an index or a UUID; gpb_stats): a
        PoolStats."""
        out = _lib.gpb_pool_stats()
        self._call("stats", self._device(device), ctypes.byref(out))
        return PoolStats.from_struct(out)

    # ---- VRAM policy --------------------------------------------------------

    def _instance_call(self, name, *args):
        out = _lib.gpb_instance_info()
        self._call(name, *args, ctypes.byref(out))
        return InstanceInfo.from_struct(out)

    def set_proportion(self, instance, proportion):
        """Moves @instance to the manual pool with @proportion in (0, 1]."""
        return self._instance_call("set_proportion", instance, float(proportion))

    def set_auto(self, instance):
        """Moves @instance to the auto pool."""
        return self._instance_call("set_auto", instance)

    def set_group(self, instance, group):
        """Moves @instance to stream group @group."""
        return self._instance_call("set_group", instance, _lib.cstr(group))

    def instance_info(self, instance):
        """Any instance as the policy sees it: an InstanceInfo."""
        return self._instance_call("instance_info", instance)

    def policy_info(self, device=0):
        """The policy of @device (an index or a UUID): a PolicyInfo."""
        out = _lib.gpb_policy_info()
        self._call("policy_info", self._device(device), ctypes.byref(out))
        return PolicyInfo.from_struct(out)

    def group_info(self, group):
        """Stream group @group: a GroupInfo."""
        out = _lib.gpb_group_info()
        self._call("group_info", _lib.cstr(group), ctypes.byref(out))
        return GroupInfo.from_struct(out)

    def set_mode(self, mode):
        """Administrators: "active" or "passive" (or 1 / 0)."""
        if isinstance(mode, str):
            if mode not in MODES:
                raise errors.InvalidError(errors.E_INVALID, "mode is active or passive",
                                          "set_mode")
            mode = MODES.index(mode)
        self._call("set_mode", mode)

    def set_limit(self, device=-1, size=None, fraction=None):
        """Administrators: bound what the broker hands out on @device (-1:
        every device; or a UUID) to @size bytes or @fraction of the memory;
        neither removes the limit."""
        self._call("set_limit", self._device(device), size or 0, fraction or 0.0)

    def set_allocator(self, allocator):
        """Administrators: "pool", "direct" or "async" (releases everything)."""
        self._call("set_allocator", _lib.cstr(allocator))

    def invalidate_all(self):
        """Administrators: release every allocation of every client."""
        self._call("invalidate_all")

    # ---- queued requests and chunking ----------------------------------------

    def queue_request(self, instance, label, shape=None, dtype="float32", chunk_axis=0,
                      unchunkable=False, memory=S.V_MEM_DEVICE):
        """Queues array requests on @instance (gpb_queue_request), either one
        ``queue_request(inst, "state", shape=(1000, 3), dtype="float32",
        chunk_axis=0)`` or several ``queue_request(inst, {"state":
        ArrayRequest((1000, 3), "f4"), ...})``. @memory: "device", or host
        memory "pinned" or "mapped" (see ArrayRequest). Returns how many are
        queued on the instance now."""
        reqs = _as_requests(label, shape, dtype, chunk_axis, unchunkable, memory)
        arr = _array_requests(reqs)
        return self._call("queue_request", instance, arr, len(reqs))

    def allocate_queue(self, instance):
        """Allocates everything queued in @instance's group (gpb_allocate_queue)
        and returns the Chunking. Each member's arrays arrive as an
        "allocation_ready" event; claim_ready() maps them."""
        out = _lib.gpb_chunking()
        self._call("allocate_queue", instance, ctypes.byref(out))
        return Chunking.from_struct(out)

    def _chunking(self, name, requests, *args):
        """gpb_<name>(client, *args, reqs, n, out, shapes): (Chunking,
        {label: chunked shape})."""
        reqs = _as_requests(requests, None, None, 0, False)
        arr = _array_requests(reqs)
        out = _lib.gpb_chunking()
        shapes = ((ctypes.c_uint64 * _lib.MAX_DIMS) * len(reqs))()
        self._call(name, *args, arr, len(reqs), ctypes.byref(out), shapes)
        chunked = {}
        for (label, _), row, src in zip(reqs, shapes, arr):
            chunked[label] = tuple(row[i] for i in range(src.ndim))
        return Chunking.from_struct(out), chunked

    def chunk_parameters(self, requests, group=None, available=0, axis_length=0):
        """The chunking of @requests ({label: ArrayRequest}) for @group's
        available memory, or @available bytes, without allocating. Returns
        (Chunking, {label: chunked shape})."""
        return self._chunking("chunk_parameters", requests, _lib.cstr(group), available,
                              axis_length)

    def compute_chunked_shapes(self, requests, chunk_length, axis_length=0):
        """cubie's compute_chunked_shapes: {label: shape} of @requests
        ({label: ArrayRequest}) at @chunk_length runs per chunk (unchunkable
        arrays keep their shape). Nothing is allocated."""
        return self._chunking("chunked_shapes", requests, chunk_length, axis_length)[1]

    def claim(self, ident, label=None, shape=None, instance=None):
        """Maps an array allocate_queue() made for this client (gpb_claim):
        device memory, or a host array as alloc_host() gives it (kind "host",
        device -1)."""
        raw = _lib.gpb_allocation()
        self._call("claim", ident, ctypes.byref(raw))
        kind = HOST if raw.device == -1 else CLAIM
        return self._adopt(raw, kind, label=label, shape=shape, instance=instance)

    def claim_ready(self, event):
        """Claims every array of an "allocation_ready" Event: {label: Allocation}
        (each with .label and .shape)."""
        instance = int(event.data[S.F_INSTANCE], 16)
        return {a[S.F_LABEL]: self.claim(int(a[S.F_ID], 16), a[S.F_LABEL], tuple(a[S.F_SHAPE]),
                                         instance)
                for a in event.data[S.F_ARRAYS]}

    def free_label(self, label, instance=0):
        """Frees this client's allocate_queue() arrays labelled @label (of
        @instance only, unless 0); returns how many."""
        n = self._call("free_label", instance, _lib.cstr(label))
        for a in list(self._allocations.values()):
            if a.kind in (CLAIM, HOST) and a.label == label and instance in (0, a.instance):
                a._forget()
        return n

    # ---- replies with the daemon's warnings ------------------------------------
    #
    # The calls above give a warning as a flag at most (the C structs); these
    # give the daemon's text, which gpubroker.cubie passes on as cubie does.

    def _warned(self, method, params):
        """request(): (the result, the daemon's warnings as a list of str)."""
        r = self.request(method, params)
        return r, list(r.get(S.F_WARNINGS, []))

    def register_warned(self, name, device=0, proportion=None, group=None):
        """register() that also returns the daemon's warnings (the auto pool
        under 5%): (instance id, [str])."""
        params = {S.F_NAME: name, S.F_DEVICE: device}
        if group is not None:
            params[S.F_GROUP] = group
        if proportion:
            params[S.F_PROPORTION] = float(proportion)
        r, warned = self._warned(S.M_REGISTER, params)
        return int(r[S.F_INSTANCE], 16), warned

    def group_available(self, group):
        """The memory stream group @group has available (group_info), and
        the daemon's warnings (more than 95% used): (bytes, [str])."""
        r, warned = self._warned(S.M_GROUP_INFO, {S.F_GROUP: group})
        return int(r[S.F_AVAILABLE]), warned

    def allocate_queue_warned(self, instance, own=False):
        """allocate_queue() that returns the daemon's warnings (the request
        exceeds the available memory more than 20 times) instead of the
        Chunking: [str]. @own: only @instance's own queue (cubie 0.17's
        rule), chunked in its group's memory. Nothing queued (in the group,
        or on the instance with @own) is InvalidError."""
        params = {S.F_INSTANCE: "%016x" % instance}
        if own:
            params[S.F_OWN] = True
        return self._warned(S.M_ALLOCATE_QUEUE, params)[1]

    def chunk_parameters_warned(self, requests, group, axis_length=0):
        """chunk_parameters() of @requests (a list of ArrayRequest) for
        @group's available memory: (chunk_length, chunks, [the daemon's
        warnings])."""
        params = {S.F_REQUESTS: [_wire_request("r%d" % i, r) for i, r in enumerate(requests)],
                  S.F_GROUP: group}
        if axis_length:
            params[S.F_AXIS_LENGTH] = int(axis_length)
        r, warned = self._warned(S.M_CHUNK_PARAMETERS, params)
        return int(r[S.F_CHUNK_LENGTH]), int(r[S.F_CHUNKS]), warned

    # ---- events -------------------------------------------------------------

    def on(self, name, handler):
        """Calls @handler(event) for each event @name ("*": every event) that
        dispatch() delivers. Returns @handler (usable as a decorator)."""
        self._handlers.setdefault(name, []).append(handler)
        return handler

    def fileno(self):
        """A descriptor that polls readable when dispatch() has work."""
        with self._conn.lock:
            if self._conn.handle is None:
                raise errors.InvalidError(errors.E_INVALID, "the client is closed", "event_fd")
            return errors.check(self._conn.lib.gpb_event_fd(self._conn.handle), "event_fd")

    def dispatch(self):
        """Reads what the daemon sent, without blocking, and runs the handlers
        for each event (in this thread). Returns the list of Events."""
        with self._conn.lock:
            if self._conn.handle is None:
                raise errors.InvalidError(errors.E_INVALID, "the client is closed", "dispatch")
            rc = self._conn.lib.gpb_dispatch(self._conn.handle)
            err = errors.error_for(rc, "dispatch") if rc < 0 else None
            events = self._pending[:]
            del self._pending[:]
        for ev in events:
            if ev.name == S.EV_INVALIDATE:
                for a in list(self._allocations.values()):
                    a._forget()
            for h in self._handlers.get(ev.name, []) + self._handlers.get("*", []):
                h(ev)
        if err is not None and not events:
            raise err
        return events

    def wait_event(self, name=None, timeout=5.0):
        """Dispatches until an event @name (any, when None) arrives and returns
        it; BrokerTimeoutError after @timeout seconds."""
        deadline = time.monotonic() + timeout
        fd = self.fileno()
        while True:
            for ev in self.dispatch():
                if name is None or ev.name == name:
                    return ev
            left = deadline - time.monotonic()
            if left <= 0:
                raise errors.BrokerTimeoutError(errors.E_TIMEOUT, "no %s event" % (name or "an"),
                                                "wait_event")
            select.select([fd], [], [], left)
