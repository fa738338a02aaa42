"""PyTorch's CUDA memory through gpubrokerd (libgpubroker's gpb_torch_*
entry points, loaded by PyTorch as a pluggable allocator).

    import gpubroker.torch
    gpubroker.torch.enable()          # before the first CUDA tensor
    x = torch.zeros(1 << 20, device="cuda")
    gpubroker.torch.memory_info()     # the instance's cap and use

Each process gets one connection (socket: ``$GPUBROKER_SOCKET``, else the
default) and one broker instance per CUDA device it allocates on, named
``$GPUBROKER_TORCH_NAME`` (default "torch-PID"), in the manual pool with
``$GPUBROKER_TORCH_PROPORTION`` (unset: the auto pool) and in stream group
``$GPUBROKER_TORCH_GROUP``; enable()'s arguments set those variables. Frees
are ordered on the stream PyTorch gives (gpb_free_async). An allocation
over the instance's cap (active mode) fails: PyTorch raises RuntimeError
("gpubroker: " and the daemon's reason), as it does for RMM's refusals.

PyTorch loads libgpubroker-torch (beside libgpubroker; $GPUBROKER_TORCH_LIBRARY
names another), whose entry points throw the C++ exception PyTorch turns
into that error: from a NULL it would make a tensor at address 0.

PyTorch calls the allocator for every tensor (its caching allocator is
replaced, not layered); the library serves tensors from the instance's
leases with no request to the daemon, in stream order on the stream
PyTorch passes (gpb_alloc_async): a tensor freed on its stream gives its
block to the next tensor on that stream at once, with no event and no
synchronize, as PyTorch's own allocator does (a training step measured
1.011x PyTorch's own allocator's on an H200: docs/cuda.md).

What PyTorch's pluggable allocator cannot do (torch 2.x's
CUDAPluggableAllocator refuses, "does not yet support", or does nothing),
and what to use instead:

- ``torch.cuda.memory_allocated()``, ``max_memory_allocated()``,
  ``memory_reserved()``, ``memory_stats()``, ``reset_peak_memory_stats()``
  raise: use this module's functions of the same names (the allocated,
  peak and reserved figures a training script logs, counted by
  libgpubroker as tensors come and go; reserved is what the daemon charges
  the instance, leases whole), and ``memory_info()`` for the instance's cap.
- ``torch.cuda.memory_snapshot()`` and ``_record_memory_history()`` raise:
  ``gpubrokerctl instances`` and the daemon's metrics show who holds what.
- ``torch.multiprocessing`` cannot share CUDA tensors (no IPC handles from
  a pluggable allocator), and this module offers no way around it yet:
  memory to share between processes is a gpubroker.Client's allocation
  (export by name, attach in the other process, same user) wrapped as a
  tensor with ``torch.as_tensor`` over its ``__cuda_array_interface__``.
- ``torch.cuda.empty_cache()`` does nothing: idle leases go back to the
  daemon by themselves (GPUBROKER_LEASE_IDLE_MS) or when it recalls them.

Streams: ``tensor.record_stream(s)`` does nothing here. PyTorch tells a
pluggable allocator of it only through a C++ hook
(CUDAPluggableAllocator's set_record_stream_fn) that its Python API does not
reach. A tensor used on a stream other than the one it was allocated on
must have that stream's work ordered before the tensor dies: call
``s.synchronize()`` (or make the allocating stream wait for ``s`` with an
event, ``torch.cuda.current_stream().wait_stream(s)``) before the last
reference goes, or its block may be given to the next tensor on its stream
while ``s`` still uses it. What the broker's frees guarantee across
streams: a tensor freed on its own stream is reused by the next tensor on
that stream in stream order; its memory leaves the process (another
process may get it) only after an event recorded behind the work of that
stream has completed. Graph capture: the library holds a block allocated
or freed during a capture until the graph and everything made from it are
gone (issue 29, tested on the fake driver); torch.cuda.graph itself has not
been run with this allocator (no GPU session yet).
"""

import ctypes
import os

from . import _lib, errors
from .records import MemInfo

_VARIABLES = {"name": "GPUBROKER_TORCH_NAME", "proportion": "GPUBROKER_TORCH_PROPORTION",
              "group": "GPUBROKER_TORCH_GROUP", "socket": "GPUBROKER_SOCKET"}


def library_path():
    """libgpubroker-torch, the library PyTorch loads: $GPUBROKER_TORCH_LIBRARY,
    else the one beside the libgpubroker this package loaded (it links that
    same copy, so memory_info() sees the instances the allocator made).
    ImportError where there is none (libgpubroker built without a C++
    compiler)."""
    explicit = os.environ.get("GPUBROKER_TORCH_LIBRARY")
    if explicit:
        if not os.path.exists(explicit):
            raise ImportError("gpubroker: GPUBROKER_TORCH_LIBRARY names %s, which does not exist"
                              % explicit)
        return explicit
    base = os.path.dirname(os.path.realpath(_lib.lib()._name))
    for name in ("libgpubroker-torch.so.0", "libgpubroker-torch.so"):
        path = os.path.join(base, name)
        if os.path.exists(path):
            return path
    raise ImportError("gpubroker: no libgpubroker-torch beside %s (libgpubroker was built "
                      "without a C++ compiler): PyTorch cannot be told of a refused "
                      "allocation without it" % base)


def free_function(version):
    """The free entry point for PyTorch @version ("2.1.0+cu121"...): the
    three-argument one before 2.3."""
    parts = []
    for p in version.split("+")[0].split(".")[:2]:
        digits = "".join(ch for ch in p if ch.isdigit())
        parts.append(int(digits or 0))
    return "gpb_torch_cxx_free3" if tuple(parts) < (2, 3) else "gpb_torch_cxx_free"


def configure(name=None, proportion=None, group=None, socket=None):
    """Sets the variables the allocator reads when it registers a device's
    instance (at that device's first allocation)."""
    for key, value in (("name", name), ("proportion", proportion), ("group", group),
                       ("socket", socket)):
        if value is not None:
            os.environ[_VARIABLES[key]] = str(value)


def enable(name=None, proportion=None, group=None, socket=None):
    """Routes PyTorch's CUDA allocations through the broker; call before the
    first CUDA tensor (PyTorch refuses to swap allocators after). Returns
    the torch.cuda.memory.CUDAPluggableAllocator."""
    import torch

    configure(name, proportion, group, socket)
    alloc = torch.cuda.memory.CUDAPluggableAllocator(library_path(), "gpb_torch_cxx_alloc",
                                                     free_function(torch.__version__))
    torch.cuda.memory.change_current_allocator(alloc)
    return alloc


def _current_device():
    try:
        import torch

        return torch.cuda.current_device()
    except Exception:  # noqa: BLE001 -- no torch, or no CUDA: device 0
        return 0


def instance(device=None):
    """The broker instance id of @device (default: the current one)."""
    ident = ctypes.c_uint64()
    device = _current_device() if device is None else device
    errors.check(_lib.lib().gpb_torch_mem_info(device, ctypes.byref(ident), None),
                 "torch_mem_info")
    return ident.value


def memory_info(device=None):
    """The instance of @device (default: the current one) as the daemon sees
    it: a MemInfo (cap, used, free, device_total, device_free). Connects and
    registers if no tensor did yet."""
    out = _lib.gpb_mem_info()
    device = _current_device() if device is None else device
    errors.check(_lib.lib().gpb_torch_mem_info(device, None, ctypes.byref(out)),
                 "torch_mem_info")
    return MemInfo.from_struct(out)


def _stats(device):
    out = _lib.gpb_framework_stats()
    device = _current_device() if device is None else device
    errors.check(_lib.lib().gpb_torch_stats(device, ctypes.byref(out)), "torch_stats")
    return out


def memory_allocated(device=None):
    """Bytes in live tensors the broker serves on @device (default: the
    current one): torch.cuda.memory_allocated()'s counterpart."""
    return _stats(device).allocated


def max_memory_allocated(device=None):
    """The most bytes allocated on @device since the start or the last
    reset_peak_memory_stats(): exact while one thread allocates; with
    several, the sum of each thread's share's peak (never below the true
    peak: gpb_torch_stats(3))."""
    return _stats(device).peak


def memory_reserved(device=None):
    """Bytes the daemon charges this process's instance on @device (its
    leases whole, and its larger allocations): what the process holds."""
    return _stats(device).reserved


def reset_peak_memory_stats(device=None):
    """Sets the peak of @device to what is allocated now."""
    device = _current_device() if device is None else device
    errors.check(_lib.lib().gpb_torch_reset_peak(device), "torch_reset_peak")


def memory_stats(device=None):
    """The figures above in torch.cuda.memory_stats()'s key names (the ones
    this allocator can give), plus the broker's counts."""
    st = _stats(device)
    return {
        "allocated_bytes.all.current": st.allocated,
        "allocated_bytes.all.peak": st.peak,
        "reserved_bytes.all.current": st.reserved,
        "active.all.current": st.live,
        "allocation.all.allocated": st.allocs,
        "allocation.all.freed": st.frees,
        "num_ooms": st.refused,
    }
