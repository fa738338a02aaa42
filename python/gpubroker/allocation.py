"""Allocation: one piece of broker memory mapped into this process."""

import ctypes
import weakref

from . import _schema as S, errors

ALLOC = "alloc"    # made by Client.alloc(): given back with gpb_free()
ATTACH = "attach"  # mapped by Client.attach(): given back with gpb_detach()
CLAIM = "claim"    # an array of allocate_queue() mapped by Client.claim(): gpb_free()
HOST = "host"      # pinned or mapped host memory from Client.alloc_host(): gpb_free()


def _release(conn, ident, kind):
    """Gives an allocation back, from free() or from its finalizer (garbage
    collection, interpreter exit). Does nothing once the connection is
    closed: the daemon released everything the connection held then. Errors
    are swallowed: a daemon that died or an "invalidate" already took it."""
    with conn.lock:
        if conn.handle is None:
            return
        fn = conn.lib.gpb_detach if kind == ATTACH else conn.lib.gpb_free
        fn(conn.handle, ident)


def _stream_ptr(stream):
    """A CUstream's value from what Python libraries call a stream."""
    if stream is None:
        return None
    for attr in ("ptr", "handle"):
        if hasattr(stream, attr):
            stream = getattr(stream, attr)
            break
    return getattr(stream, "value", stream) or None


class Allocation:
    """Broker memory mapped into this process, given back when freed
    explicitly (free(), or leaving a ``with`` block) or when the last
    reference to it goes.

    ``ptr`` is the address in this process: host memory with the sim
    backend, a device pointer (CUdeviceptr) with the cuda backend. It stays
    valid until the allocation is freed or its client is closed. An
    Allocation keeps its Client (and so the connection) alive.
    """

    __slots__ = ("client", "id", "ptr", "size", "device", "slab", "offset", "kind",
                 "instance", "label", "shape", "_finalizer", "__weakref__")

    def __init__(self, client, raw, kind, instance=None, label=None, shape=None):
        self.client = client
        self.id = raw.id
        self.ptr = raw.ptr or 0
        self.size = raw.size
        self.device = raw.device
        self.slab = raw.slab
        self.offset = raw.offset
        self.kind = kind
        self.instance = instance
        self.label = label
        self.shape = shape
        self._finalizer = weakref.finalize(self, _release, client._conn, self.id, kind)

    def __repr__(self):
        state = "freed" if self.freed else "live"
        return "<gpubroker.Allocation %016x %s size=%d device=%d %s>" % (
            self.id, self.kind, self.size, self.device, state)

    @property
    def freed(self):
        """True once freed, detached, or released with its client."""
        return not self._finalizer.alive or self.client.closed

    def free(self):
        """Gives the memory back (gpb_free, or gpb_detach for an attachment).
        Idempotent; a no-op once the client is closed, and quiet when the
        allocation is gone already (an "invalidate" event, or the daemon died
        and took everything with it); other errors raise. Device memory is
        freed without waiting for the daemon's reply: the client's next call
        sees the room, but another connection (another process,
        gpubrokerctl) may be served first; one call on this client that
        waits for a reply (mem_info, for one) orders the free before it."""
        if not self._finalizer.alive:
            return
        self._finalizer.detach()
        conn = self.client._conn
        with conn.lock:
            if conn.handle is None:
                return
            if self.kind == ATTACH:
                rc = conn.lib.gpb_detach(conn.handle, self.id)
            else:
                rc = conn.lib.gpb_free(conn.handle, self.id)
            # Gone already (an invalidate) or with the daemon: nothing to give back.
            if rc < 0 and rc not in (errors.E_NOT_FOUND, errors.E_DAEMON_GONE):
                raise errors.error_for(rc, "free")

    def free_async(self, stream=None):
        """Frees device memory once the work queued on @stream so far has
        run, without waiting for it (gpb_free_async): the library frees it
        at a later call on the client that finds the stream's event
        complete. @stream: a CUstream as an int, an object with ``ptr``
        (CuPy) or ``handle`` (Numba), or None for the legacy default
        stream. Attachments and host memory are freed as free() does. Same
        quiet cases as free()."""
        if self.kind in (ATTACH, HOST):
            self.free()
            return
        if not self._finalizer.alive:
            return
        self._finalizer.detach()
        conn = self.client._conn
        with conn.lock:
            if conn.handle is None:
                return
            rc = conn.lib.gpb_free_async(conn.handle, self.id, _stream_ptr(stream))
            if rc < 0 and rc not in (errors.E_NOT_FOUND, errors.E_DAEMON_GONE):
                raise errors.error_for(rc, "free_async")

    close = free

    def _forget(self):
        """The daemon released it already (an "invalidate" event)."""
        self._finalizer.detach()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()

    def _check_range(self, offset, n):
        if self.freed:
            raise errors.InvalidError(errors.E_INVALID, "allocation freed", "gpubroker")
        if offset < 0 or n < 0 or offset + n > self.size:
            raise errors.InvalidError(errors.E_INVALID, "range outside the allocation",
                                      "gpubroker")

    def write(self, data, offset=0):
        """Copies bytes-like @data to the allocation at @offset
        (gpb_copy_to_device: a memcpy on sim; on cuda, complete as far as
        @data is concerned on return)."""
        view = memoryview(data)
        n = view.nbytes
        src = (ctypes.c_char * n).from_buffer_copy(view)
        self._check_range(offset, n)
        if self.kind == HOST:  # host memory on every backend
            ctypes.memmove(self.ptr + offset, src, n)
            return
        rc = self.client._conn.lib.gpb_copy_to_device(self.ptr + offset, src, n, None)
        errors.check(rc, "copy_to_device")

    def read(self, n=None, offset=0):
        """@n bytes (default: to the end) from @offset, as bytes
        (gpb_copy_from_device)."""
        if n is None:
            n = self.size - offset
        self._check_range(offset, n)
        dst = ctypes.create_string_buffer(n)
        if self.kind == HOST:
            ctypes.memmove(dst, self.ptr + offset, n)
            return dst.raw
        rc = self.client._conn.lib.gpb_copy_from_device(dst, self.ptr + offset, n, None)
        errors.check(rc, "copy_from_device")
        return dst.raw

    def memoryview(self):
        """The memory itself as a writable memoryview of unsigned bytes: sim
        backend only (where ``ptr`` is host memory, shared with every process
        that maps the allocation). The view must not be used after the
        allocation is freed or its client closed."""
        if self.client.backend != S.V_BACKEND_SIM and self.kind != HOST:
            raise errors.NotSupportedError(
                errors.E_NOT_SUPPORTED, "host access needs the sim backend (use read/write)",
                "memoryview")
        self._check_range(0, 0)
        return memoryview((ctypes.c_char * self.size).from_address(self.ptr)).cast("B")

    @property
    def __cuda_array_interface__(self):
        """The allocation as a 1-D uint8 CUDA array (cuda backend only), so
        that ``cupy.asarray(a)`` or ``numba.cuda.as_cuda_array(a)`` see it."""
        if self.client.backend != S.V_BACKEND_CUDA:
            raise AttributeError("__cuda_array_interface__ needs the cuda backend")
        return {"shape": (self.size,), "typestr": "|u1", "data": (self.ptr, False),
                "version": 3, "strides": None}
