"""Arrays over broker memory, and the copies of to_device()/from_device().

With the sim backend (and for host memory on every backend) an array is a
numpy.ndarray over the memory the library mapped, shared with every process
that maps the same allocation. With the cuda backend it is a Numba device
array when Numba is importable, else a DeviceArray: an object with
``__cuda_array_interface__`` that CuPy (``cupy.asarray``) and Numba
(``numba.cuda.as_cuda_array``) accept. Either way the array holds its
gpubroker Allocation: the memory goes back to the broker when the last
reference to the array (or a view of it) goes.
"""

import ctypes

from .. import _schema as S, errors
from ..allocation import HOST, _stream_ptr


def _numpy():
    import numpy

    return numpy


class _HostBuffer:
    """numpy's view of a mapped allocation (__array_interface__); numpy keeps
    it as the array's base, and it keeps the Allocation."""

    def __init__(self, allocation, shape, dtype):
        self.allocation = allocation
        self.__array_interface__ = {
            "shape": tuple(shape), "typestr": dtype.str, "version": 3,
            "data": (allocation.ptr or 0, False), "strides": None,
        }


class DeviceArray:
    """Device memory of the cuda backend as a C-contiguous array: ``shape``,
    ``dtype``, ``size``, ``nbytes``, ``__cuda_array_interface__``,
    ``copy_to_device(host)`` and ``copy_to_host(host=None)``."""

    def __init__(self, allocation, shape, dtype):
        self.allocation = allocation
        self.shape = tuple(shape)
        self.dtype = dtype
        self.size = 1
        for d in self.shape:
            self.size *= d
        self.nbytes = self.size * dtype.itemsize

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.dtype.str, "version": 3,
                "data": (self.allocation.ptr, False), "strides": None}

    def copy_to_device(self, ary, stream=0):
        src = _numpy().ascontiguousarray(ary, dtype=self.dtype)
        _copy(self.allocation.client, "copy_to_device", self.allocation.ptr,
              src.ctypes.data, min(src.nbytes, self.nbytes), stream)

    def copy_to_host(self, ary=None, stream=0):
        np = _numpy()
        out = np.empty(self.shape, self.dtype) if ary is None else ary
        _copy(self.allocation.client, "copy_from_device", out.ctypes.data,
              self.allocation.ptr, min(out.nbytes, self.nbytes), stream)
        return out


def _copy(client, name, dst, src, n, stream):
    lib = client._conn.lib
    errors.check(getattr(lib, "gpb_" + name)(ctypes.c_void_p(dst), ctypes.c_void_p(src), n,
                                             _stream_ptr(stream) if stream else None), name)


def wrap(allocation, shape, dtype):
    """An array of @shape and @dtype over @allocation (see the module)."""
    np = _numpy()
    dtype = np.dtype(dtype)
    if allocation.kind == HOST or allocation.client.backend != S.V_BACKEND_CUDA:
        return np.asarray(_HostBuffer(allocation, shape, dtype))
    arr = DeviceArray(allocation, shape, dtype)
    try:
        from numba import cuda
    except ImportError:
        return arr
    return cuda.as_cuda_array(arr)


def copy(dst, src, stream=0):
    """Copies @src into @dst (same number of bytes): numpy arrays with
    numpy, device arrays with their copy_to_device/copy_to_host (Numba's or
    DeviceArray's) on @stream."""
    np = _numpy()
    if isinstance(dst, np.ndarray) and isinstance(src, np.ndarray):
        np.copyto(dst, src.reshape(dst.shape) if src.shape != dst.shape else src)
    elif not isinstance(dst, np.ndarray):
        dst.copy_to_device(src, stream=stream)
    else:
        src.copy_to_host(dst, stream=stream)
