"""gpubroker.cubie: cubie's MemoryManager API, coordinated by gpubrokerd.

A cubie program moves to the broker with one import::

    from gpubroker.cubie import MemoryManager, ArrayRequest, ArrayResponse

Each registered instance is a broker instance: processes that each use a
MemoryManager share one device under one policy (proportions, the auto
pool, stream groups, queued requests chunked together). See docs/cubie.md.
"""

import threading

from .arrays import DeviceArray
from .current import NoCudaDeviceError
from .manager import (ALLOCATORS, MODES, MemoryManager, placeholder_dataready,
                      placeholder_invalidate)
from .requests import MEMORY_TYPES, ArrayRequest, ArrayResponse

__all__ = ["ALLOCATORS", "ArrayRequest", "ArrayResponse", "DeviceArray", "MEMORY_TYPES",
           "MODES", "MemoryManager", "NoCudaDeviceError", "default_memmgr", "placeholder_dataready",
           "placeholder_invalidate"]

_default = None
_default_lock = threading.Lock()


def __getattr__(name):
    # cubie's default_memmgr, made on first use (connecting is deferred
    # further, to the first call that needs the daemon).
    global _default
    if name == "default_memmgr":
        with _default_lock:
            if _default is None:
                _default = MemoryManager()
            return _default
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
