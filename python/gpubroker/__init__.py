"""gpubroker: Python bindings of libgpubroker, the client library of
gpubrokerd (the GPU memory broker), through ctypes.

    import gpubroker

    with gpubroker.Client() as c:             # $GPUBROKER_SOCKET or the default
        inst = c.register("solver", device=0)
        with c.alloc(inst, 1 << 20) as a:     # freed on leaving the block
            a.write(b"hello")

``gpubroker.Layout`` plans a kernel's scratch buffers (the library's
gpb_layout_* planner; no daemon needed): see gpubroker.layout.

Bridges: ``gpubroker.numba`` (a Numba EMM plugin) and ``gpubroker.cupy`` (a
CuPy allocator); each imports its framework only when used.
"""

from . import dtypes, errors, layout
from .allocation import Allocation
from .client import Client
from .errors import (BackendError, BrokerPermissionError, BrokerTimeoutError, ConnectError,
                     ContextResetError, ExistsError,
                     DaemonGoneError, GpubrokerError, HostMemoryError, InvalidError,
                     LayoutAliasCycleError, LayoutAliasLocationError,
                     LayoutAliasPersistentError, LayoutAliasUnknownError,
                     LayoutDuplicateError, LayoutError, LayoutNameError, LayoutNoFitError,
                     LayoutOverflowError, LayoutZeroSizeError, LimitError, NotFoundError,
                     NotSupportedError, OutOfMemoryError, ProtocolError, QuotaError,
                     ShuttingDownError, SystemCallError, VersionError)
from .layout import (KernelBlock, Layout, LayoutBuffer, LayoutComponent, LayoutSizes,
                     Placement)
from .records import (ArrayRequest, Chunking, Event, GroupInfo, InstanceInfo, MappingStats,
                      MemInfo, PolicyInfo, PoolStats)

__all__ = [
    "Allocation", "ArrayRequest", "BackendError", "BrokerPermissionError",
    "BrokerTimeoutError", "Chunking", "Client", "ConnectError", "ContextResetError",
    "DaemonGoneError", "Event", "ExistsError",
    "GpubrokerError", "GroupInfo", "HostMemoryError", "InstanceInfo", "InvalidError",
    "KernelBlock", "Layout", "LayoutAliasCycleError", "LayoutAliasLocationError",
    "LayoutAliasPersistentError", "LayoutAliasUnknownError", "LayoutBuffer",
    "LayoutComponent", "LayoutDuplicateError", "LayoutError", "LayoutNameError",
    "LayoutNoFitError", "LayoutOverflowError", "LayoutSizes", "LayoutZeroSizeError",
    "LimitError", "MappingStats", "MemInfo", "NotFoundError", "NotSupportedError",
    "OutOfMemoryError", "PolicyInfo", "PoolStats", "Placement", "ProtocolError",
    "QuotaError", "ShuttingDownError", "SystemCallError", "VersionError", "dtypes",
    "errors", "layout", "library_version", "mapping_stats",
]


def library_version():
    """libgpubroker's version string (gpb_version)."""
    from . import _lib

    return _lib.text(_lib.lib().gpb_version())


def mapping_stats():
    """This process's slab mappings, all clients together (gpb_mapping_stats)."""
    import ctypes

    from . import _lib

    out = _lib.gpb_mapping_stats()
    errors.check(_lib.lib().gpb_mapping_stats(ctypes.byref(out)), "mapping_stats")
    return MappingStats.from_struct(out)
