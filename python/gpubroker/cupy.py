"""A CuPy allocator: CuPy's device memory through gpubrokerd (cuda backend).

    import cupy
    import gpubroker.cupy

    cupy.cuda.set_allocator(gpubroker.cupy.malloc)   # every array from now on
    with gpubroker.cupy.using_allocator():           # or in this thread, in a block
        x = cupy.zeros((1000, 1000), dtype=cupy.float32)

Each allocation is a broker allocation wrapped in ``cupy.cuda.UnownedMemory``
whose owner is the gpubroker.Allocation: when CuPy drops the memory, the
allocation goes back to the broker at once (nothing is cached in this
process: the daemon's pool is the pool). The statistics CuPy's MemoryPool
offers (used_bytes, free_bytes, total_bytes, n_free_blocks) are the daemon's
pool of the current device (gpb_stats), which all of its clients share.

``c_allocator()`` is the same through C function pointers
(``cupy.cuda.memory.CFunctionAllocator`` over libgpubroker's gpb_cupy_malloc
and gpb_cupy_free): no Python runs per allocation, the process has one
client and one instance per device for it ($GPUBROKER_CUPY_NAME,
_PROPORTION, _GROUP, which its arguments set), and a refusal is raised as
MemoryError("gpubroker: <reason>"). CuPy passes it no stream: frees are
gpb_free's, ordered after CuPy's default stream and every blocking stream.

    cupy.cuda.set_allocator(gpubroker.cupy.c_allocator().malloc)

``attach()`` opens another process's broker allocation (same user) as a
CuPy array, for example one a Numba kernel wrote through gpubroker.numba.

Size 0 (``cupy.empty(0)``) is a null pointer and no broker allocation. The
device is registered by its UUID, which the driver (``cuDeviceGetUuid_v2``
through ctypes) gives whole; CuPy's own property is cut at a NUL byte.

Tested with CuPy 14 (cupy-cuda13x): the allocator contract in the suite
``frameworks`` (CuPy's runtime cannot start on the fake driver), arrays and
kernels in the suite ``gpu`` (see the README).
"""

import contextlib
import ctypes
import os
import threading

try:
    import cupy as _cupy
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("gpubroker.cupy needs CuPy: %s" % e) from e

from . import _cuda, _lib, _schema as S, dtypes, errors
from .client import Client
from .errors import E_NOT_SUPPORTED, NotSupportedError
from .records import MemInfo


def _current_device():
    return _cupy.cuda.runtime.getDevice()


def _device_uuid(device):
    """The device's UUID in nvidia-smi's form, or None where neither the
    driver nor CuPy says. The driver first: CuPy's property
    (getDeviceProperties()["uuid"]) comes back cut at the first NUL byte,
    which about one UUID in sixteen holds."""
    uuid = _cuda.driver_uuid(device)
    if uuid:
        return uuid
    try:
        raw = _cupy.cuda.runtime.getDeviceProperties(device)["uuid"]
    except (KeyError, AttributeError, TypeError):
        return None
    if isinstance(raw, str):
        raw = raw.encode("latin-1")
    if not isinstance(raw, (bytes, bytearray)) or len(raw) != 16:
        return None
    return _cuda.format_uuid(raw)


class BrokerAllocator:
    """A callable for ``cupy.cuda.set_allocator``: allocates on the current
    device through one connection, with one broker instance per device
    (registered on first use, by UUID: @name, manual @proportion or the auto
    pool, stream @group)."""

    def __init__(self, socket=None, name="cupy", proportion=None, group=None):
        self.client = Client(socket, "cupy")
        if self.client.backend != S.V_BACKEND_CUDA:
            backend = self.client.backend
            self.client.close()
            raise NotSupportedError(E_NOT_SUPPORTED, "gpubrokerd serves the %s backend, whose "
                                    "memory is not device memory" % backend, "gpubroker.cupy")
        self._name, self._proportion, self._group = name, proportion, group
        self._instances = {}
        self._lock = threading.Lock()

    def instance(self, device=None):
        """The broker instance of @device (default: the current one)."""
        device = _current_device() if device is None else device
        with self._lock:
            inst = self._instances.get(device)
            if inst is None:
                uuid = _device_uuid(device)
                inst = self.client.register("%s-%d" % (self._name, device),
                                            device=0 if uuid else device,
                                            proportion=self._proportion, group=self._group,
                                            device_uuid=uuid)
                self._instances[device] = inst
            return inst

    def __call__(self, size):
        device = _current_device()
        if size == 0:
            # What CuPy asks for an empty array: a null pointer, no memory,
            # nothing for the broker (gpb_alloc refuses 0).
            return _cupy.cuda.MemoryPointer(_cupy.cuda.UnownedMemory(0, 0, None, device), 0)
        a = self.client.alloc(self.instance(device), size)
        mem = _cupy.cuda.UnownedMemory(a.ptr, size, a, device)
        return _cupy.cuda.MemoryPointer(mem, 0)

    malloc = __call__

    def mem_info(self, device=None):
        """This allocator's instance on @device: gpubroker.MemInfo (cap, used,
        free, ...), like cupy.cuda.runtime.memGetInfo seen through the broker."""
        return self.client.mem_info(self.instance(device))

    def _stats(self, device):
        inst = self.instance(device)
        return self.client.stats(self.client.instance_info(inst).device)

    def used_bytes(self, device=None):
        """Bytes in live allocations of the device's broker pool."""
        return self._stats(device).used

    def free_bytes(self, device=None):
        """Bytes the broker's pool holds from the device but has not handed out."""
        return self._stats(device).free

    def total_bytes(self, device=None):
        """Bytes the broker's pool holds from the device (used + free)."""
        return self._stats(device).reserved

    def n_free_blocks(self, device=None):
        """Free ranges in the broker's pool of the device."""
        return self._stats(device).free_blocks

    def get_limit(self, device=None):
        """The instance's cap (MemoryPool.get_limit's counterpart)."""
        return self.mem_info(device).cap

    def close(self):
        """Disconnects: every allocation still alive becomes invalid."""
        self.client.close()


_default = None
_default_lock = threading.Lock()


def default_allocator():
    """The process-wide BrokerAllocator that malloc() uses (created on first
    use: socket from $GPUBROKER_SOCKET or the default)."""
    global _default
    with _default_lock:
        if _default is None or _default.client.closed:
            _default = BrokerAllocator()
        return _default


def malloc(size):
    """The allocator function for ``cupy.cuda.set_allocator(gpubroker.cupy.malloc)``."""
    return default_allocator()(size)


@contextlib.contextmanager
def using_allocator(allocator=None):
    """Within the block this thread's CuPy allocations go through @allocator
    (default: the process-wide one); other threads keep theirs. CuPy's own
    cupy.cuda.using_allocator, so the two nest either way; the allocator
    before the block is this thread's again after it."""
    allocator = allocator or default_allocator()
    with _cupy.cuda.using_allocator(allocator):
        yield allocator


_C_VARIABLES = {"name": "GPUBROKER_CUPY_NAME", "proportion": "GPUBROKER_CUPY_PROPORTION",
                "group": "GPUBROKER_CUPY_GROUP", "socket": "GPUBROKER_SOCKET"}
_c_allocator = None


def c_functions():
    """The addresses of gpb_cupy_malloc and gpb_cupy_free in libgpubroker."""
    lib = _lib.lib()
    return (ctypes.cast(lib.gpb_cupy_malloc, ctypes.c_void_p).value,
            ctypes.cast(lib.gpb_cupy_free, ctypes.c_void_p).value)


def _c_refusal_raises(malloc_fn, free_fn):
    """Whether this CuPy raises what gpb_cupy_malloc raises: a refusal (a
    non-NULL param is one) must come back as MemoryError, not as an array
    at a bad address (a CuPy built without Cython 3's exception check)."""
    try:
        mem = _cupy.cuda.memory.CFunctionAllocatorMemory(1, 1, malloc_fn, free_fn, 0)
    except MemoryError:
        return True
    mem.ptr = 0  # never freed: it is no allocation
    return False


def c_allocator(name=None, proportion=None, group=None, socket=None):
    """A ``cupy.cuda.memory.CFunctionAllocator`` over the broker (see the
    module's documentation); the settings apply to the devices registered
    after the call (each at its first allocation). The same object each
    time. Raises NotSupportedError when this CuPy would not raise a refusal."""
    global _c_allocator
    for key, value in (("name", name), ("proportion", proportion), ("group", group),
                       ("socket", socket)):
        if value is not None:
            os.environ[_C_VARIABLES[key]] = str(value)
    with _default_lock:
        if _c_allocator is None:
            malloc_fn, free_fn = c_functions()
            if not _c_refusal_raises(malloc_fn, free_fn):
                raise NotSupportedError(E_NOT_SUPPORTED, "this CuPy (%s) does not raise an "
                                        "exception a C allocator sets: use gpubroker.cupy."
                                        "malloc" % _cupy.__version__, "gpubroker.cupy")
            # The library is loaded for the life of the process: no owner.
            _c_allocator = _cupy.cuda.memory.CFunctionAllocator(0, malloc_fn, free_fn, None)
        return _c_allocator


def c_mem_info(device=None):
    """The instance of @device (default: the current one) that c_allocator()
    allocates from, as the daemon sees it (a MemInfo); registers it if need be."""
    out = _lib.gpb_mem_info()
    ident = ctypes.c_uint64()
    device = _current_device() if device is None else device
    errors.check(_lib.lib().gpb_cupy_mem_info(device, ctypes.byref(ident), ctypes.byref(out)),
                 "cupy_mem_info")
    return ident.value, MemInfo.from_struct(out)


def attach(handle, shape=None, dtype="uint8", client=None):
    """A cupy.ndarray over a broker allocation another connection of the same
    user made: @handle a gpubroker.numba.GpubrokerIpcHandle or an allocation
    id; @shape and @dtype (default: all its bytes as uint8). The attachment is
    dropped when the array (and its views) are."""
    client = client or default_allocator().client
    ident = getattr(handle, "allocation_id", handle)
    offset = getattr(handle, "offset", 0)
    a = client.attach(ident)
    size = getattr(handle, "size", a.size - offset)
    if shape is None:
        shape = (size // dtypes.itemsize(dtype),)
    if dtypes.nbytes(shape, dtype) > size:
        a.free()
        raise ValueError("gpubroker.cupy.attach: shape larger than the allocation")
    # The device from the pointer: the daemon's index need not be CuPy's.
    mem = _cupy.cuda.UnownedMemory(a.ptr + offset, size, a)
    return _cupy.ndarray(dtypes.shape_tuple(shape), dtype, _cupy.cuda.MemoryPointer(mem, 0))
