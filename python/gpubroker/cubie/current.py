"""What cubie 0.17 (what ``pip install cubie`` gives) calls on a
MemoryManager beyond the seed's API: a mixin of gpubroker.cubie's
MemoryManager (manager.py), so that cubie's own BatchSolverKernel and array
managers take the facade as their ``memory_manager``. docs/cubie.md has
the table of what follows cubie 0.17 and what the seed."""

import threading
import weakref

from .. import _schema as S, errors


class NoCudaDeviceError(RuntimeError):
    """cubie 0.17's error for a manager with no device to size anything by:
    here, no daemon to ask (its socket missing or refusing)."""


def weak_callable(fn):
    """@fn held weakly when it is a bound method (cubie 0.17's hooks are: a
    solver registered with its own methods is collectable), strongly
    otherwise. Calling it once its object is gone does nothing."""
    try:
        ref = weakref.WeakMethod(fn)
    except TypeError:
        return fn

    def call(*args, **kwargs):
        target = ref()
        return None if target is None else target(*args, **kwargs)

    return call


class _StreamGroups:
    """cubie 0.17's ``stream_groups`` attribute: this process's stream of
    each group (the groups themselves are the daemon's)."""

    def __init__(self, manager):
        self._manager = manager

    @property
    def streams(self):
        return dict(self._manager._streams)

    def get_group(self, instance):
        return self._manager.get_stream_group(instance)

    def get_stream(self, instance):
        return self._manager.get_stream(instance)


class CurrentCubieMixin:
    """cubie 0.17's calls (see the module's documentation)."""

    def _init_current(self, pinned_max_bytes, allocation_granule_bytes):
        if pinned_max_bytes is not None and pinned_max_bytes < 0:
            raise ValueError("pinned_max_bytes must be at least 0")
        if allocation_granule_bytes < 0:
            raise ValueError("allocation_granule_bytes must be at least 0")
        self.pinned_max_bytes = pinned_max_bytes
        self.allocation_granule_bytes = allocation_granule_bytes
        self.stream_groups = _StreamGroups(self)
        self._pending_teardowns = []
        self._pinned_live = 0
        self._pinned_lock = threading.Lock()
        self._usage_clock = 0

    # ---- the device -----------------------------------------------------------

    def probe_device(self):
        """Reads the device's size from the daemon (cubie 0.17 reads the
        driver). NoCudaDeviceError when the daemon cannot be asked."""
        try:
            _, total = self.get_memory_info()
        except (OSError, errors.GpubrokerError) as e:
            raise NoCudaDeviceError("gpubroker: no daemon to size the device by: %s" % e) from e
        if self.pinned_max_bytes is None:
            self.pinned_max_bytes = total
        return total

    # ---- registrations ----------------------------------------------------------

    def get_registration(self, instance):
        """@instance's registration (the token release_instance() takes)."""
        with self._lock:
            return self._reg(instance)

    def release_instance(self, instance_id, settings):
        """Ends the registration of id @instance_id if it is still
        @settings (a later registration reusing the id is left alone)."""
        with self._lock:
            if self.registry.get(instance_id) is settings:
                self._drop(instance_id, settings)

    def defer_teardown(self, teardown):
        """Runs @teardown at this manager's next call (cubie's finalizers
        call this from the garbage collector, which may run anywhere), or
        now when no call is in progress on another thread."""
        self._pending_teardowns.append(teardown)
        if self._lock.acquire(blocking=False):
            try:
                self._run_teardowns()
            finally:
                self._lock.release()

    def _run_teardowns(self):
        while self._pending_teardowns:
            self._pending_teardowns.pop()()

    def _collected(self, key):
        """A registered instance was collected: its registration goes at
        once (other processes' shares grow back) unless a call is in
        progress on another thread, then at the next call."""

        def teardown():
            reg = self.registry.get(key)
            if reg is not None and reg.dead():
                self._drop(key, reg)

        self.defer_teardown(teardown)

    def update(self, instance, updates_dict=None, silent=False, **kwargs):
        """cubie 0.17's settings of a registered instance: stream_group,
        mem_proportion (None: the auto pool) and memory_manager (this one
        only: ValueError otherwise). Returns the names recognised; others
        are KeyError unless @silent."""
        updates = dict(updates_dict or {}, **kwargs)
        recognised = set()
        if "memory_manager" in updates:
            manager = updates["memory_manager"]
            if manager is not None and manager is not self:
                raise ValueError("A registered instance cannot change memory manager.")
            recognised.add("memory_manager")
        if "stream_group" in updates:
            group = updates["stream_group"]
            if group is not None and group != self.get_stream_group(instance):
                self.change_stream_group(instance, group)
            recognised.add("stream_group")
        if "mem_proportion" in updates:
            proportion = updates["mem_proportion"]
            manual = self.manual_proportion(instance)
            if proportion is None:
                if manual is not None:
                    self.set_auto_limit_mode(instance)
            elif proportion != manual:
                self.set_manual_proportion(instance, proportion)
            recognised.add("mem_proportion")
        unknown = set(updates) - recognised
        if unknown and not silent:
            raise KeyError("Unrecognized parameters: %s" % sorted(unknown))
        return recognised

    def manual_proportion(self, instance):
        """@instance's manual proportion, or None in the auto pool."""
        p = self._info(instance).proportion
        return p if p > 0 else None

    # ---- work -----------------------------------------------------------------

    def begin_work(self, owner):
        """cubie 0.17 marks an owner busy, so that its eviction waits: the
        daemon evicts nobody's arrays here, so only the use is counted."""
        with self._lock:
            self._usage_clock += 1
            for reg in self.registry.values():
                if reg.owner_id == id(owner):
                    reg.last_used = self._usage_clock

    def end_work(self, owner, stream):
        """The owner's work was queued on @stream: nothing to record (a free
        of broker memory waits for the work queued on it, gpb_free)."""

    def get_group_stream(self, group=S.V_GROUP_DEFAULT):
        """This process's stream of @group."""
        with self._lock:
            if group not in self._streams:
                self._streams[group] = self._new_stream()
            return self._streams[group]

    # ---- host memory ------------------------------------------------------------

    @property
    def pinned_budget_bytes(self):
        """The pinned bytes arrays may hold at once: pinned_max_bytes (the
        device's size unless given)."""
        if self.pinned_max_bytes is None:
            self.probe_device()
        return self.pinned_max_bytes

    @property
    def pinned_live_bytes(self):
        with self._pinned_lock:
            return self._pinned_live

    @property
    def pinned_idle_bytes(self):
        """Always 0: a pinned array goes back to the broker when collected,
        none is kept for reuse."""
        return 0

    def _pinned_gone(self, nbytes):
        with self._pinned_lock:
            self._pinned_live -= nbytes

    def allocate_pinned_array(self, shape, dtype, force=False):
        """A page-locked host array from the broker (its host memory,
        charged to this manager's own instance), or None when it would pass
        the pinned budget (unless @force) or the broker refuses."""
        import numpy

        nbytes = int(numpy.prod(shape, dtype=numpy.int64)) * numpy.dtype(dtype).itemsize
        with self._pinned_lock:
            if not force and self._pinned_live + nbytes > self.pinned_budget_bytes:
                return None
            self._pinned_live += nbytes
        try:
            arr = self.allocate(shape, dtype, S.V_MEM_PINNED)
        except errors.GpubrokerError:
            self._pinned_gone(nbytes)
            return None
        weakref.finalize(arr, self._pinned_gone, nbytes)
        return arr

    def choose_host_memory_type(self, nbytes, allow_pinned=True):
        """"pinned" when allowed and within the pinned budget, else "host"
        (cubie 0.17's "memmap" spill files are not offered)."""
        if allow_pinned and nbytes <= self.pinned_budget_bytes:
            return S.V_MEM_PINNED
        return "host"

    def release_host_array(self, array):
        """Nothing to release: no host array of this manager is a spill file."""

    def release_idle_memory(self, keep_recent=True):
        """Gives back what this process keeps mapped with nothing in it
        (gpb_release_kept: emptied slabs and idle leases)."""
        with self._lock:
            if self._client is not None and not self._client.closed:
                self._client.release_kept()
