"""A Numba External Memory Management (EMM) plugin: device memory through
gpubrokerd (cuda backend).

Use it with the environment::

    NUMBA_CUDA_MEMORY_MANAGER=gpubroker.numba python app.py

or before Numba creates its first context::

    from numba import cuda
    from gpubroker.numba import GpubrokerMemoryManager
    cuda.set_memory_manager(GpubrokerMemoryManager)

Each Numba context (one per device) connects to the daemon (socket:
``$GPUBROKER_SOCKET``, else the default) and registers one instance on its
device, found by UUID. ``configure()`` (or the variables
``GPUBROKER_NUMBA_NAME``, ``GPUBROKER_NUMBA_PROPORTION``,
``GPUBROKER_NUMBA_GROUP``) sets the instance's name, manual proportion and
stream group.

Device memory (``memalloc``) comes from the broker; host memory
(``memhostalloc``, ``mempin``) is Numba's own, as in
``numba.cuda.HostOnlyCUDAMemoryManager``. ``get_memory_info()`` is the
instance's view: ``total`` its cap (in active mode its share of the device)
and ``free`` what it may still allocate.

Deallocation: a device array's memory goes back to the broker as soon as
Numba drops it. Inside ``numba.cuda.defer_cleanup()`` these frees are held
back and performed when the outermost ``defer_cleanup`` block exits (as are
Numba's host-memory frees); memory freed meanwhile still counts against the
instance's cap.

IPC: memory the broker hands out is itself imported through CUDA IPC, so it
cannot be re-exported with ``cuIpcGetMemHandle``. ``get_ipc_handle()``
returns a ``GpubrokerIpcHandle`` instead: picklable, it names the broker
allocation (and the offset and size inside it), and ``open()`` in another
process of the same user attaches that allocation through the broker
(``gpb_attach``) and gives a ``MemoryPointer``. So ``DeviceNDArray.
get_ipc_handle()`` works as usual, for processes of the same user, while the
allocation lives in its maker's process.

Out of memory: when the broker refuses an allocation (the device is full,
or in active mode the instance's cap is reached), ``memalloc`` raises
``OutOfDeviceMemoryError``: Numba's ``CudaAPIError`` with the code
``CUDA_ERROR_OUT_OF_MEMORY``, as Numba's own manager raises, and a
``MemoryError``.

Tested with Debian's Numba 0.56 (its numba.cuda) and numba-cuda 0.30 on
cuda-bindings 13 (both settings of ``NUMBA_CUDA_USE_NVIDIA_BINDING``): the
suite ``frameworks`` (see the README).
"""

import contextlib
import ctypes
import os
import threading

try:
    from numba.cuda import HostOnlyCUDAMemoryManager, MemoryPointer
    from numba.cuda.cudadrv import driver as _driver
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("gpubroker.numba needs Numba with CUDA support (numba.cuda): %s" % e) from e

from . import _cuda, _schema as S
from .client import Client
from .errors import NotSupportedError, E_NOT_SUPPORTED, OutOfMemoryError, QuotaError

_settings = {
    "socket": None,
    "name": os.environ.get("GPUBROKER_NUMBA_NAME") or None,
    "proportion": float(os.environ["GPUBROKER_NUMBA_PROPORTION"])
    if os.environ.get("GPUBROKER_NUMBA_PROPORTION") else None,
    "group": os.environ.get("GPUBROKER_NUMBA_GROUP") or None,
}


_LOCAL_TAG = 0x10ca  # the top 16 bits of a block of a lease (gpb_allocation.id)


def configure(socket=None, name=None, proportion=None, group=None):
    """How managers created from now on connect and register: @socket (None:
    $GPUBROKER_SOCKET or the default), the instance @name (default
    "numba-<pid>"), a manual @proportion in (0, 1] (None: the auto pool) and
    a stream @group."""
    _settings.update(socket=socket, name=name, proportion=proportion, group=group)


def _use_nv_binding():
    """Whether Numba's driver speaks cuda-bindings' types (CUdeviceptr,
    CUresult) rather than ctypes'. Numba's own numba.cuda and numba-cuda
    before 0.21 choose by configuration (USE_NV_BINDING, from
    NUMBA_CUDA_USE_NVIDIA_BINDING); numba-cuda 0.21 and later always call
    through cuda-bindings, whatever the configuration says, and have no
    USE_NV_BINDING."""
    flag = getattr(_driver, "USE_NV_BINDING", None)
    if flag is not None:
        return bool(flag)
    return getattr(_driver, "binding", None) is not None


def _device_pointer(value):
    """@value (an int) as the pointer type Numba's MemoryPointer takes."""
    if _use_nv_binding():
        return _driver.binding.CUdeviceptr(value)
    return ctypes.c_uint64(value)


def _oom_code():
    """CUDA_ERROR_OUT_OF_MEMORY as Numba's CudaAPIError carries it."""
    if _use_nv_binding():
        return _driver.binding.CUresult.CUDA_ERROR_OUT_OF_MEMORY
    from numba.cuda.cudadrv import enums
    return enums.CUDA_ERROR_OUT_OF_MEMORY


class OutOfDeviceMemoryError(_driver.CudaAPIError, MemoryError):
    """Numba's out-of-memory error (a CudaAPIError whose code is
    CUDA_ERROR_OUT_OF_MEMORY, what Numba's own manager raises and what
    code catching it tests), raised when the broker refuses an allocation
    for want of memory or over the instance's cap. A MemoryError too; the
    broker's error (gpubroker.QuotaError or OutOfMemoryError) is
    ``broker_error`` and the exception's cause."""

    def __init__(self, broker_error):
        super().__init__(_oom_code(), "gpubroker: %s" % broker_error)
        self.broker_error = broker_error


def _takes_context():
    """Whether this Numba's MemoryPointer takes the context first: Numba's
    own and numba-cuda 0.30 do, numba-cuda 0.21 to 0.29 do not."""
    import inspect

    try:
        params = list(inspect.signature(MemoryPointer.__init__).parameters)
    except (TypeError, ValueError):
        return True
    return len(params) > 1 and params[1] == "context"


_WITH_CONTEXT = _takes_context()


def _memory_pointer(context, pointer, size, **kwargs):
    """A MemoryPointer of @context, as this Numba's constructor takes it."""
    if _WITH_CONTEXT:
        return MemoryPointer(context, pointer, size, **kwargs)
    return MemoryPointer(pointer, size, **kwargs)


def _pointer_value(memory):
    """The address a Numba MemoryPointer points at, as an int."""
    v = getattr(memory, "device_pointer_value", None)
    if v is not None:
        return int(v)
    h = memory.handle
    return int(h) if _use_nv_binding() else (h.value or 0)


def _device_ordinal(context):
    """The CUDA ordinal of @context's device: a Numba Device's id, or a
    context another library made (driver.Context over a cuda-bindings
    CUdevice, which is the ordinal itself)."""
    dev = context.device
    ident = getattr(dev, "id", None)
    return int(ident) if ident is not None else int(dev)


def _device_uuid(context):
    """Numba's UUID of the device, else the driver's (a context another
    library made has no Numba Device to ask)."""
    uuid = getattr(context.device, "uuid", None)
    if isinstance(uuid, str) and uuid:
        return uuid
    return _cuda.driver_uuid(_device_ordinal(context))


class GpubrokerMemoryManager(HostOnlyCUDAMemoryManager):
    """The EMM plugin (see the module's documentation)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._client = None
        self._instance = None
        self._live = {}  # device address -> Allocation
        self._lock = threading.RLock()
        self._defer_depth = 0
        self._held = []  # Allocations whose free waits for defer_cleanup to end
        # Allocation id -> this client's attachment of it, for a block of a
        # lease shared by an IPC handle: the carve's daemon id (gpb_attach
        # of a local block), which other processes attach. Detached before
        # the block is freed, or the carve would outlive it.
        self._shared = {}

    @property
    def interface_version(self):
        return 1

    @property
    def client(self):
        """The gpubroker.Client of this context (after initialize())."""
        return self._client

    @property
    def instance(self):
        """The broker instance id of this context (after initialize())."""
        return self._instance

    def initialize(self):
        # Idempotent: Numba may call it again for the same context.
        with self._lock:
            if self._client is not None:
                return
            client = Client(_settings["socket"], "numba")
            if client.backend != S.V_BACKEND_CUDA:
                client.close()
                raise NotSupportedError(
                    E_NOT_SUPPORTED,
                    "gpubrokerd serves the %s backend, whose memory is not device memory"
                    % client.backend, "gpubroker.numba")
            uuid = _device_uuid(self.context)
            name = _settings["name"] or "numba-%d" % os.getpid()
            self._instance = client.register(
                name, device=0 if uuid else _device_ordinal(self.context),
                proportion=_settings["proportion"], group=_settings["group"], device_uuid=uuid)
            self._client = client

    def memalloc(self, size):
        if size == 0:
            return _memory_pointer(self.context, _device_pointer(0), 0)
        try:
            a = self._client.alloc(self._instance, size)
        except (QuotaError, OutOfMemoryError) as e:
            raise OutOfDeviceMemoryError(e) from e
        with self._lock:
            self._live[a.ptr] = a
        return _memory_pointer(self.context, _device_pointer(a.ptr), size,
                             finalizer=self._finalizer(a.ptr))

    def _finalizer(self, ptr):
        # Holds the manager weakly enough: the dict and the lock, not the
        # MemoryPointer (which would never be collected then).
        def finalize():
            self._release(ptr)

        return finalize

    def _release(self, ptr):
        with self._lock:
            a = self._live.pop(ptr, None)
            if a is None:  # reset() took it already
                return
            if self._defer_depth:
                self._held.append(a)
                return
        self._free(a)

    def _free(self, a):
        with self._lock:
            shared = self._shared.pop(a.id, None)
        if shared is not None:
            shared.free()
        a.free()

    def memallocmanaged(self, size, attach_global):
        """Refused: managed memory (cuda.managed_array) would be the
        driver's, outside the instance's cap and the daemon's accounting,
        as libgpubroker offers none either."""
        raise NotSupportedError(
            E_NOT_SUPPORTED, "managed memory (cuda.managed_array, %d bytes) is not served "
            "through the broker: it would be outside this instance's cap; use device arrays, "
            "or Numba's own memory manager for managed memory" % size, "gpubroker.numba")

    def get_memory_info(self):
        info = self._client.mem_info(self._instance)
        # What this process may still allocate: the instance's free and the
        # room left in its own leases (charged to it already, as used).
        return _driver.MemoryInfo(free=min(info.cap, info.free + info.leased - info.in_use),
                                  total=info.cap)

    def _allocation_at(self, addr):
        """The live allocation of this manager that holds address @addr."""
        with self._lock:
            a = self._live.get(addr)
            if a is None:
                # Memory that came back in through __cuda_array_interface__
                # (its owner is the foreign object, not our pointer), or a
                # view into an allocation: the one whose range holds it.
                a = next((x for base, x in self._live.items() if base <= addr < base + x.size),
                         None)
        return a

    def get_ipc_handle(self, memory):
        addr = _pointer_value(memory)
        a = self._allocation_at(addr)
        if a is None:
            raise ValueError("gpubroker.numba: memory at %#x was not allocated through "
                             "gpubroker (no broker allocation holds it): only broker "
                             "memory can be shared by its handle" % addr)
        base_ptr = a.ptr
        ident = a.id
        if ident >> 48 == _LOCAL_TAG:
            with self._lock:
                shared = self._shared.get(a.id)
            if shared is None:
                shared = self._client.attach(a.id)
                with self._lock:
                    self._shared[a.id] = shared
            ident = shared.id
        return GpubrokerIpcHandle(self._client.socket, ident, addr - base_ptr, memory.size)

    def reset(self):
        """Frees everything this manager allocated (Numba's memory pointers to
        it become invalid), then Numba's host memory."""
        with self._lock:
            held = list(self._live.values()) + self._held
            self._live.clear()
            self._held = []
        for a in held:
            self._free(a)
        super().reset()

    @contextlib.contextmanager
    def defer_cleanup(self):
        with self._lock:
            self._defer_depth += 1
        try:
            with super().defer_cleanup():
                yield
        finally:
            with self._lock:
                self._defer_depth -= 1
                held = self._held if self._defer_depth == 0 else []
                if held:
                    self._held = []
            for a in held:
                self._free(a)


_attached = {}  # (socket, allocation id) -> [Allocation, opens]
_readers = {}  # socket -> Client used for attachments
_attach_lock = threading.Lock()


class GpubrokerIpcHandle:
    """A broker allocation (or part of one) to open in another process of
    the same user: picklable; open() attaches it through the broker, close()
    detaches it. See the module's documentation."""

    def __init__(self, socket, allocation_id, offset, size):
        self.socket = socket
        self.allocation_id = allocation_id
        self.offset = offset
        self.size = size
        self._opened = False

    def __getstate__(self):
        return {"socket": self.socket, "allocation_id": self.allocation_id,
                "offset": self.offset, "size": self.size, "_opened": False}

    def open(self, context):
        """A MemoryPointer to the memory in @context's process."""
        if self._opened:
            raise ValueError("IpcHandle is already opened")  # numba's words
        key = (self.socket, self.allocation_id)
        with _attach_lock:
            entry = _attached.get(key)
            if entry is None:
                reader = _readers.get(self.socket)
                if reader is None or reader.closed:
                    reader = _readers[self.socket] = Client(self.socket, "numba-ipc")
                entry = _attached[key] = [reader.attach(self.allocation_id), 0]
            entry[1] += 1
        self._opened = True
        return _memory_pointer(context, _device_pointer(entry[0].ptr + self.offset), self.size)

    def close(self):
        """Detaches (when this process has no other handle to it open)."""
        if not self._opened:
            return
        self._opened = False
        key = (self.socket, self.allocation_id)
        with _attach_lock:
            entry = _attached.get(key)
            if entry is None:
                return
            entry[1] -= 1
            if entry[1] == 0:
                del _attached[key]
                entry[0].free()


# NUMBA_CUDA_MEMORY_MANAGER=gpubroker.numba
_numba_memory_manager = GpubrokerMemoryManager
