"""gpubroker.cubie.MemoryManager: cubie's MemoryManager (seed 001) whose
registry, pools, stream groups and queues are the daemon's, so that every
process using it shares one device under one policy. docs/cubie.md says
what differs from cubie; docs/design.md has the method-by-method table."""

import select
import threading
import warnings
import weakref

from .. import _schema as S, errors
from ..client import Client
from . import arrays
from .current import CurrentCubieMixin, weak_callable
from .requests import ArrayRequest, ArrayResponse, as_request, check_requests

MODES = (S.V_MODE_PASSIVE, S.V_MODE_ACTIVE)
#: cubie's allocator names -> the daemon's (set_allocator): Numba's default
#: allocates each array from the driver ("direct"), CuPy's MemoryPool pools
#: ("pool"), CuPy's MallocAsync uses the stream-ordered pool ("async").
ALLOCATORS = {"default": S.V_ALLOC_DIRECT, "cupy": S.V_ALLOC_POOL,
              "cupy_async": S.V_ALLOC_ASYNC}
#: allocate()'s memory types: the broker's device memory and its host memory.
_BROKER_MEMORY = (S.V_MEM_DEVICE, S.V_MEM_PINNED, S.V_MEM_MAPPED)


def placeholder_invalidate():
    """The default invalidate_cache_hook: does nothing."""


def placeholder_dataready(response):
    """The default allocation_ready_hook: does nothing."""


class _Registration:
    """One registered instance: its broker instance id, its hooks (held
    weakly when bound methods, as cubie 0.17 holds them), the owner it is
    evicted with (cubie 0.17), the requests it queued (for their dtypes)
    and the arrays it was given."""

    __slots__ = ("ident", "ref", "invalidate_hook", "ready_hook", "queued", "allocations",
                 "owner_id", "last_used", "primary", "labels", "__weakref__")

    def __init__(self, ident, instance, invalidate_hook, ready_hook, owner=None):
        self.ident = ident
        try:
            self.ref = weakref.ref(instance)
        except TypeError:  # ints, tuples...: kept by identity only, as cubie does
            self.ref = None
        self.invalidate_hook = weak_callable(invalidate_hook)
        self.ready_hook = weak_callable(ready_hook)
        self.queued = {}
        self.allocations = {}
        self.owner_id = id(instance if owner is None else owner)
        self.last_used = 0
        # The registration whose broker instance this one shares (its
        # owner's, cubie 0.17), or None: its own. labels: on a primary,
        # which registration queued each label (the arrays are routed back).
        self.primary = None
        self.labels = {}

    def dead(self):
        return self.ref is not None and self.ref() is None


try:
    # cubie 0.17's own classes check isinstance(manager, cubie's
    # MemoryManager) (attrs validators): where cubie is installed, the
    # facade is one of its subclasses, every method its own (cubie's
    # attributes unset, its __init__ never run).
    from cubie.memory.mem_manager import MemoryManager as _CubieManager

    _BASES = (CurrentCubieMixin, _CubieManager)
except Exception:  # noqa: BLE001 -- no cubie, or one that does not import here
    _CubieManager = None
    _BASES = (CurrentCubieMixin,)


class MemoryManager(*_BASES):
    """cubie's MemoryManager, coordinated by gpubrokerd.

    ``MemoryManager(totalmem=None, mode=None, socket=None, device=0,
    name="cubie")``: connects (on first use) to the daemon at @socket (None:
    $GPUBROKER_SOCKET, else the default) as @name and registers instances
    on @device. @mode, when given, is set on the daemon (an administrator's
    call: it applies to every process); @totalmem is accepted for cubie's
    signature and ignored (the daemon knows the device).

    Hooks run on the calling thread: an instance's allocation_ready_hook
    when this process next calls into the manager (allocate_queue() runs
    those its own call produced before it returns), or poll(), or on the
    thread start_event_thread() starts; invalidate_cache_hook when the
    daemon's "invalidate" arrives the same way.
    """

    # By identity, as an object (cubie's attrs class compares its fields,
    # which are not the facade's, and is unhashable).
    __eq__ = object.__eq__
    __hash__ = object.__hash__

    def __repr__(self):
        return "<gpubroker.cubie.MemoryManager %s on device %d>" % (self._name, self.device)

    def __init__(self, totalmem=None, mode=None, socket=None, device=0, name="cubie",
                 pinned_max_bytes=None, allocation_granule_bytes=32 << 20):
        self.totalmem_hint = totalmem
        self.device = device
        self._socket = socket
        self._name = name
        self._client = None
        self._lock = threading.RLock()
        self.registry = {}  # id(instance) -> _Registration
        self._by_ident = {}  # broker instance id -> _Registration
        self._streams = {}  # group -> stream
        self._direct = None  # broker instance of allocate() without an instance
        self._thread = None
        self._stop = threading.Event()
        self._init_current(pinned_max_bytes, allocation_granule_bytes)
        if mode is not None:
            self.set_limit_mode(mode)

    # ---- connection and events ---------------------------------------------

    @property
    def client(self):
        """The gpubroker.Client of this manager (connected on first use)."""
        with self._lock:
            if self._client is None or self._client.closed:
                self._client = Client(self._socket, self._name)
            return self._client

    def close(self):
        """Stops the event thread and disconnects: the daemon releases every
        instance and allocation of this manager."""
        self.stop_event_thread()
        with self._lock:
            if self._client is not None:
                self._client.close()
            self.registry.clear()
            self._by_ident.clear()
            self._direct = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def poll(self):
        """Reads what the daemon sent and runs the hooks it calls for, on
        this thread. Returns how many events there were."""
        with self._lock:
            if self._client is None or self._client.closed:
                return 0
            events = self._client.dispatch()
            first = None
            for ev in events:
                try:
                    if ev.name == S.EV_ALLOCATION_READY:
                        self._ready(ev)
                    elif ev.name == S.EV_INVALIDATE:
                        self._invalidated()
                except Exception as e:  # noqa: BLE001 -- the other hooks still run
                    first = first or e
            if first is not None:
                raise first
            return len(events)

    def start_event_thread(self, interval=0.5):
        """Runs the hooks promptly, on a daemon thread of their own, as the
        events arrive (a hook's exception is printed and dropped there)."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return self._thread
            fd = self.client.fileno()
            self._stop.clear()
            self._thread = threading.Thread(target=self._pump, args=(fd, interval),
                                            name="gpubroker.cubie events", daemon=True)
            self._thread.start()
            return self._thread

    def stop_event_thread(self):
        """Stops the thread of start_event_thread() (if any) and waits for it."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            thread.join()

    def _pump(self, fd, interval):
        import traceback

        while not self._stop.is_set():
            try:
                select.select([fd], [], [], interval)
                self.poll()
            except errors.DaemonGoneError:
                return
            except Exception:  # noqa: BLE001 -- a hook's failure must not end the thread
                traceback.print_exc()

    def _ready(self, ev):
        """An allocation_ready event: claim the arrays, run the hook."""
        data = ev.data
        primary = self._by_ident.get(int(data[S.F_INSTANCE], 16))
        allocs = self.client.claim_ready(ev)
        if primary is None:  # unregistered meanwhile: give them back
            for a in allocs.values():
                a.free()
            return
        # Each registration sharing the broker instance gets the arrays of
        # the labels it queued, in a response of its own.
        parts = {}
        for label, a in allocs.items():
            reg = primary.labels.pop(label, primary)
            if reg.dead():
                reg = primary
            parts.setdefault(id(reg), (reg, {}))[1][label] = a
        chunks, length0 = int(data[S.F_CHUNKS]), int(data[S.F_CHUNK_LENGTH])
        axis0 = int(data[S.F_AXIS_LENGTH])
        for reg, mine in parts.values():
            arrs, shapes, runs = {}, {}, 1
            for label, a in mine.items():
                req = reg.queued.pop(label, None)
                shapes[label] = tuple(a.shape)
                arrs[label] = arrays.wrap(a, a.shape, req.dtype if req is not None else "u1")
                runs = max(runs, req.total_runs if req is not None else 1)
            reg.allocations.update(arrs)
            length, axis = length0, axis0
            if chunks == 1:
                # Not cut: cubie reports the whole run axis, its requests'
                # total_runs, even where no array has that axis.
                length = axis = max(length, runs)
            reg.ready_hook(ArrayResponse(arr=arrs, chunks=chunks, chunk_length=length,
                                         chunked_shapes=shapes, axis_length=axis))
        # cubie 0.17: the owner's registrations with nothing in this batch
        # (a solver, whose array managers queued the arrays) hear the
        # chunking too, in an empty response: they run the kernel by it.
        for reg in list(self.registry.values()):
            if (reg is primary or reg.primary is primary) and id(reg) not in parts \
                    and not reg.dead():
                reg.ready_hook(ArrayResponse(arr={}, chunks=chunks, chunk_length=length0,
                                             chunked_shapes={}, axis_length=axis0))

    def _invalidated(self):
        """The daemon released everything (invalidate_all, set_allocator):
        the arrays are invalid now; each instance hears its hook."""
        for reg in list(self.registry.values()):
            reg.allocations.clear()
            reg.queued.clear()
        first = None
        for reg in list(self.registry.values()):
            try:
                reg.invalidate_hook()
            except Exception as e:  # noqa: BLE001
                first = first or e
        if first is not None:
            raise first

    def _enter(self):
        """Every call: teardowns the garbage collector left (cubie 0.17's
        finalizers, instances collected), then pending hooks (see the class)."""
        self._run_teardowns()
        self.poll()

    # ---- the registry ---------------------------------------------------------

    def _reg(self, instance, exc=KeyError):
        """@instance's registration: by identity, or an id() cubie passes."""
        reg = self.registry.get(id(instance))
        if reg is None and isinstance(instance, int):
            reg = self.registry.get(instance)
        if reg is None or reg.dead():
            raise exc("Instance %r is not registered" % (instance,))
        return reg

    def _purge(self):
        """Unregisters instances that were garbage collected (cubie keys by
        id(), which a new object may reuse)."""
        for key, reg in list(self.registry.items()):
            if reg.dead():
                self._drop(key, reg)

    def _drop(self, key, reg):
        del self.registry[key]
        reg.allocations.clear()
        if reg.primary is not None:
            # It shared its owner's broker instance: that stays the owner's.
            for label in [k for k, r in reg.primary.labels.items() if r is reg]:
                del reg.primary.labels[label]
            return
        self._by_ident.pop(reg.ident, None)
        try:
            self.client.unregister(reg.ident)
        except errors.GpubrokerError:
            pass  # still holds arrays: the daemon drops it with the connection

    def _name_for(self, instance):
        return ("%s:%s" % (self._name, type(instance).__name__))[:S.MAX_NAME]

    def register(self, instance, proportion=None, invalidate_cache_hook=placeholder_invalidate,
                 allocation_ready_hook=placeholder_dataready, stream_group=S.V_GROUP_DEFAULT,
                 owner=None):
        """Registers @instance (any object, by identity) as a broker
        instance: manual @proportion in (0, 1], or the auto pool when it is
        None (or 0, as in cubie). ValueError for an instance registered
        already, a proportion outside [0, 1] and what the daemon refuses
        (proportions over 1, an auto pool under its minimum);
        UserWarning with the daemon's message when the auto pool falls
        under 5%. @owner (cubie 0.17, its eviction unit: a solver passes
        itself for its array managers): an instance registered with a
        registered owner shares the owner's broker instance, its share and
        its cap (@proportion and @stream_group are the owner's), so that a
        solver given half the device holds its arrays in that half; the
        arrays of the labels it queues come back to its own hook. Hooks that
        are bound methods are held weakly, and the registration ends as soon
        as @instance is collected."""
        with self._lock:
            self._enter()
            self._purge()
            if id(instance) in self.registry:
                raise ValueError("Instance already registered")
            if proportion and not 0 <= proportion <= 1:
                raise ValueError("Proportion must be between 0 and 1")
            owner_reg = None
            if owner is not None and owner is not instance:
                owner_reg = self.registry.get(id(owner))
                if owner_reg is not None and (owner_reg.dead() or owner_reg.primary is not None):
                    owner_reg = None
            if owner_reg is not None:
                ident, warned = owner_reg.ident, []
            else:
                ident, warned = self.client.register_warned(self._name_for(instance),
                                                            self.device, proportion, stream_group)
            reg = _Registration(ident, instance, invalidate_cache_hook, allocation_ready_hook,
                                owner)
            reg.primary = owner_reg
            self.registry[id(instance)] = reg
            if reg.ref is not None:
                weakref.finalize(instance, self._collected, id(instance))
            if owner_reg is None:
                self._by_ident[reg.ident] = reg
            for w in warned:
                warnings.warn(w, UserWarning, stacklevel=2)

    def unregister(self, instance):
        """Ends @instance's registration (its arrays go back when dropped)."""
        with self._lock:
            self._enter()
            reg = self._reg(instance)
            self._drop(id(instance) if id(instance) in self.registry else instance, reg)

    def instance_id(self, instance):
        """The broker instance id of @instance (as `gpubrokerctl instances`
        lists it, in hex)."""
        return self._reg(instance).ident

    def _info(self, instance, exc=KeyError):
        with self._lock:
            self._enter()
            return self.client.instance_info(self._reg(instance, exc).ident)

    def proportion(self, instance):
        """@instance's share of the device: its manual proportion, or its
        part of the auto pool."""
        return self._info(instance).share

    def cap(self, instance):
        """Bytes @instance may hold (the daemon's cap: its share of the
        capacity in active mode, the capacity in passive mode)."""
        return self._info(instance).cap

    def _policy(self):
        with self._lock:
            self._enter()
            return self.client.policy_info(self.device)

    @property
    def manual_pool_proportion(self):
        """Sum of the manual proportions on the device, every process's."""
        return self._policy().manual

    @property
    def auto_pool_proportion(self):
        """What the auto instances share (0 when there are none)."""
        p = self._policy()
        return p.auto_pool if p.auto_instances else 0.0

    @property
    def totalmem(self):
        """The device's memory as the daemon counts it."""
        return self._policy().total

    def set_limit_mode(self, mode):
        """"passive" or "active" (ValueError otherwise), for the whole
        daemon: an administrator's call (BrokerPermissionError otherwise)."""
        if mode not in MODES:
            raise ValueError("Unknown mode: %s" % (mode,))
        with self._lock:
            self._enter()
            self.client.set_mode(mode)

    def _warned(self, info):
        if info.warning:
            warnings.warn(info.warning, UserWarning, stacklevel=3)
        return info

    def set_manual_proportion(self, instance, proportion):
        """Gives @instance the manual @proportion (moving it from the auto
        pool if it is there)."""
        if proportion < 0 or proportion > 1:
            raise ValueError("Proportion must be between 0 and 1")
        with self._lock:
            self._enter()
            self._warned(self.client.set_proportion(self._reg(instance).ident, proportion))

    def set_manual_limit_mode(self, instance, proportion):
        """Moves an auto instance to the manual pool (ValueError if it is
        manual already)."""
        with self._lock:
            if self._info(instance).proportion > 0:
                raise ValueError("Instance is already in manual allocation pool")
            self.set_manual_proportion(instance, proportion)

    def set_auto_limit_mode(self, instance):
        """Moves a manual instance to the auto pool (ValueError if it is
        there already)."""
        with self._lock:
            if self._info(instance).proportion == 0:
                raise ValueError("Instance is already in auto allocation pool")
            self._warned(self.client.set_auto(self._reg(instance).ident))

    # ---- stream groups ----------------------------------------------------------

    def get_stream_group(self, instance):
        return self._info(instance).group

    def change_stream_group(self, instance, new_group):
        """Moves @instance to @new_group (ValueError if not registered)."""
        with self._lock:
            self._enter()
            self.client.set_group(self._reg(instance, ValueError).ident, new_group)

    def is_grouped(self, instance):
        """True when @instance shares a group other than "default" with
        another instance, of any process of this user."""
        return bool(self._info(instance).grouped)

    def get_stream(self, instance):
        """The stream of @instance's group in this process: a Numba stream
        with the cuda backend and Numba, else 0 (the default stream)."""
        group = self.get_stream_group(instance)
        with self._lock:
            if group not in self._streams:
                self._streams[group] = self._new_stream()
            return self._streams[group]

    def _new_stream(self):
        if self.client.backend == S.V_BACKEND_CUDA:
            try:
                from numba import cuda

                return cuda.stream()
            except ImportError:
                pass
        return 0

    def sync_stream(self, instance, stream=None):
        """Waits for @stream (cubie 0.17), else @instance's group's stream."""
        stream = self.get_stream(instance) if stream is None else stream
        if hasattr(stream, "synchronize"):
            stream.synchronize()

    def reinit_streams(self):
        """Forgets this process's streams (after a context reset)."""
        with self._lock:
            self._streams.clear()

    def get_available_memory(self, group):
        """The group's available memory (the daemon's group_info); UserWarning
        past 95% used."""
        with self._lock:
            self._enter()
            available, warned = self.client.group_available(group)
        for w in warned:
            warnings.warn(w, UserWarning, stacklevel=2)
        return available

    def get_memory_info(self):
        """(free, total) of the device as the daemon counts them."""
        p = self._policy()
        return p.available, p.total

    # ---- queued requests and chunking ---------------------------------------

    def queue_request(self, instance, requests):
        """Queues @requests ({label: ArrayRequest}) on @instance, in its
        group, for allocate_queue() from any member's process. TypeError
        for malformed requests, NotImplementedError for "managed"."""
        reqs = check_requests(requests)
        broker = {label: r.broker() for label, r in reqs.items()}
        with self._lock:
            self._enter()
            reg = self._reg(instance)
            if broker:
                self.client.queue_request(reg.ident, broker)
            reg.queued.update(reqs)
            if reg.primary is not None:
                reg.primary.labels.update({label: reg for label in reqs})

    def allocate_queue(self, triggering_instance, stream=None):
        """Allocates everything queued in @triggering_instance's group, in
        every process, chunked along the run axis; runs this process's
        allocation_ready_hooks before it returns (the other processes' run
        there). Nothing queued: returns at once, as in cubie. @stream (cubie
        0.17) is accepted: the daemon's group orders the allocations."""
        with self._lock:
            self._enter()
            reg = self._reg(triggering_instance)
            # An owner's registrations (cubie 0.17; they share its broker
            # instance): its requests alone, as cubie 0.17 does; another
            # owner's, perhaps half queued by another process, would be
            # cut off from the rest of its batch and chunked apart. Without
            # owners, the seed's rule: the whole group.
            own = reg.primary is not None or any(
                r.primary is reg for r in self.registry.values())
            try:
                warned = self.client.allocate_queue_warned(reg.ident, own=own)
            except errors.InvalidError:
                # Its code for nothing queued in the group (invalid_params;
                # gpb_allocate_queue's GPB_E_INVALID): the instance is one
                # the daemon gave us, so nothing else about it is invalid.
                return None
            except (errors.OutOfMemoryError, errors.QuotaError) as e:
                raise ValueError("Can't fit a single run in GPU VRAM (%s)" % e.detail) from e
            for w in warned:
                warnings.warn(w, UserWarning, stacklevel=2)
            self.poll()
        return None

    def _flatten(self, requests):
        """{instance: {label: req}} or {label: req} as a list of the
        broker's ArrayRequests."""
        out = []
        for key, value in requests.items():
            if isinstance(value, dict):
                out.extend(req.broker() for req in check_requests(value).values())
            else:
                out.append(as_request(value, key).broker())
        return out

    def get_chunk_parameters(self, requests, axis_length, stream_group):
        """(chunk_length, chunks) for @requests ({instance: {label:
        ArrayRequest}}, or one {label: ArrayRequest}) in @stream_group's
        available memory, cut along the run axis of @axis_length runs.
        UserWarning when the request exceeds it more than 20 times;
        ValueError when not even one run fits."""
        flat = self._flatten(requests)
        with self._lock:
            self._enter()
            try:
                length, chunks, warned = self.client.chunk_parameters_warned(
                    flat, stream_group, axis_length)
            except (errors.OutOfMemoryError, errors.QuotaError) as e:
                raise ValueError("Can't fit a single run in GPU VRAM (%s)" % e.detail) from e
        for w in warned:
            warnings.warn(w, UserWarning, stacklevel=2)
        return length, chunks

    def compute_chunked_shapes(self, requests, chunk_size):
        """{label: shape} of @requests at @chunk_size runs per chunk;
        unchunkable arrays keep their shape."""
        reqs = check_requests(requests)
        with self._lock:
            self._enter()
            shapes = self.client.compute_chunked_shapes(
                {label: r.broker() for label, r in reqs.items()}, chunk_size)
        return {label: tuple(shape) for label, shape in shapes.items()}

    # ---- direct allocation ------------------------------------------------------

    def _ident(self, instance):
        if isinstance(instance, _Registration):  # allocate_all(settings=)
            return instance.ident
        if instance is not None:
            return self._reg(instance).ident
        # cubie 0.17 allocates small arrays for its registered solvers with
        # no instance named (a kernel's specialization arguments): charged
        # to this manager's oldest live registration, whose share they
        # serve; the manager's own auto-pool instance only when it has none
        # (the auto pool may have no room left beside manual proportions).
        for reg in self.registry.values():
            if not reg.dead():
                return reg.ident
        if self._direct is None:
            # An instance of its own, in the auto pool, like any other user
            # of the device: allocate() names no instance in cubie.
            self._direct = self.client.register(("%s:direct" % self._name)[:S.MAX_NAME],
                                                device=self.device)
        return self._direct

    def allocate(self, shape, dtype, memory_type, stream=0, instance=None):
        """One C-contiguous array of @shape and @dtype: "device" memory of
        the broker, or "pinned"/"mapped" host memory; "managed" is
        NotImplementedError, another type ValueError. Charged to @instance
        (a registered instance); when None, to this manager's oldest live
        registration, else to its own "direct" instance (auto pool)."""
        if memory_type == S.V_MEM_MANAGED:
            raise NotImplementedError("Managed memory not implemented")
        if memory_type not in _BROKER_MEMORY:
            raise ValueError("Invalid memory type: %s" % (memory_type,))
        req = ArrayRequest(dtype, tuple(shape), memory_type)
        with self._lock:
            self._enter()
            ident = self._ident(instance)
            n = max(req.nbytes, 1)
            if memory_type == S.V_MEM_DEVICE:
                a = self.client.alloc(ident, n)
            else:
                a = self.client.alloc_host(ident, n, mapped=memory_type == S.V_MEM_MAPPED)
        return arrays.wrap(a, req.shape, dtype)

    def allocate_all(self, requests, instance_id, stream=0, settings=None):
        """allocate() of each of @requests ({label: ArrayRequest}) for the
        registered instance @instance_id (the instance or its id()), or for
        the registration @settings (cubie 0.17: get_registration()'s token),
        kept under their labels for free(). Returns {label: array}."""
        reqs = check_requests(requests)
        with self._lock:
            reg = settings if settings is not None else self._reg(instance_id)
            out = {}
            for label, r in reqs.items():
                out[label] = self.allocate(r.shape, r.dtype, r.memory, stream,
                                           instance=instance_id if settings is None else reg)
            reg.allocations.update(out)
            return out

    def create_host_array(self, shape, dtype, memory_type=S.V_MEM_PINNED, like=None):
        """A C-contiguous numpy array of this process ("pinned": page-locked
        by Numba with the cuda backend, else plain), zeros or a copy of
        @like. ValueError unless @memory_type is "pinned" or "host"."""
        import numpy

        if memory_type == "memmap":  # cubie 0.17's spill file: a plain array here
            memory_type = "host"
        if memory_type not in (S.V_MEM_PINNED, "host"):
            raise ValueError("memory_type must be 'pinned', 'host' or 'memmap', got '%s'"
                             % memory_type)
        arr = None
        if memory_type == S.V_MEM_PINNED and self.client.backend == S.V_BACKEND_CUDA:
            try:
                from numba import cuda

                arr = cuda.pinned_array(shape, dtype=dtype)
                arr.fill(0)
            except ImportError:
                arr = None
        if arr is None:
            arr = numpy.zeros(shape, dtype=dtype)
        if like is not None:
            arr[...] = like
        return arr

    def free(self, array_label):
        """Drops the arrays labelled @array_label of every instance of this
        manager; each goes back to the broker when no other reference to it
        is left (as Numba's device arrays do)."""
        with self._lock:
            self._enter()
            for reg in self.registry.values():
                reg.allocations.pop(array_label, None)

    def free_all(self):
        """free() of every label."""
        with self._lock:
            self._enter()
            for reg in self.registry.values():
                reg.allocations.clear()

    def invalidate_all(self):
        """Releases every allocation and runs every invalidate hook: for an
        administrator the daemon's invalidate_all, which every process of
        every user hears (their hooks run there); for anyone else this
        manager's own, as cubie's does in its process."""
        with self._lock:
            self._enter()
            try:
                self.client.invalidate_all()
            except errors.BrokerPermissionError:
                self.free_all()
                self._invalidated()
                return
            self.poll()

    def to_device(self, instance, from_arrays, to_arrays, stream=None):
        """Copies each host array of @from_arrays into @to_arrays on @stream
        (cubie 0.17), else @instance's stream."""
        stream = self.get_stream(instance) if stream is None else stream
        for src, dst in zip(from_arrays, to_arrays):
            arrays.copy(dst, src, stream)

    def from_device(self, instance, from_arrays, to_arrays, stream=None):
        """Copies each array of @from_arrays into the host arrays @to_arrays
        on @stream (cubie 0.17), else @instance's stream."""
        stream = self.get_stream(instance) if stream is None else stream
        for src, dst in zip(from_arrays, to_arrays):
            arrays.copy(dst, src, stream)

    def set_allocator(self, name):
        """cubie's allocator names as the daemon's allocators ("default":
        direct, "cupy": pool, "cupy_async": async; ValueError otherwise),
        with cubie's UserWarning: everything allocated is released (the
        daemon's set_allocator, an administrator's call)."""
        if name not in ALLOCATORS:
            raise ValueError("Unknown allocator: %s" % (name,))
        warnings.warn("A change to the memory manager requires the CUDA context to be closed "
                      "and reopened. This invalidates all previously compiled kernels and "
                      "allocated arrays, requiring a full rebuild.", UserWarning, stacklevel=2)
        with self._lock:
            self._enter()
            self.client.set_allocator(ALLOCATORS[name])
            self.poll()
