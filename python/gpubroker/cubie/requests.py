"""cubie's ArrayRequest and ArrayResponse, and their translation into the
broker's array requests (gpubroker.ArrayRequest)."""

import dataclasses
import operator
from typing import Optional

from .. import _schema as S, dtypes
from ..records import ArrayRequest as BrokerRequest

#: Memory types an ArrayRequest may name. cubie accepts "device" and
#: "pinned"; "mapped" is broker host memory too; "managed" is accepted here
#: and refused by queue_request() and allocate() (NotImplementedError), as
#: cubie's allocate() refuses it.
MEMORY_TYPES = (S.V_MEM_DEVICE, S.V_MEM_PINNED, S.V_MEM_MAPPED, S.V_MEM_MANAGED)


def _index(value, what):
    if isinstance(value, bool):
        raise TypeError("%s must be an int, not %r" % (what, value))
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError("%s must be an int, not %r" % (what, value)) from None


@dataclasses.dataclass
class ArrayRequest:
    """Specification of one array (cubie.memory.array_requests.ArrayRequest):
    the same fields in the same order, so that ``ArrayRequest(numpy.float64,
    (100, 4, 8))`` or the keywords mean here what they mean in cubie.

    @dtype the element type (a numpy type such as ``numpy.float64``, or
    anything gpubroker.dtypes sizes); @shape a tuple of ints; @memory
    "device", "pinned" (or "mapped"); @chunk_axis_index the run axis (None:
    no run axis); @unchunkable to keep the whole array in every chunk;
    @total_runs the number of runs (>= 1). Like cubie, an array is chunked
    only when it is not unchunkable, has a run axis inside its shape and
    that axis is longer than 1. Refusals: TypeError for a field of the
    wrong type, ValueError for a value out of range (cubie's validators
    raise the same classes)."""

    dtype: object
    shape: tuple = (1, 1, 1)
    memory: str = S.V_MEM_DEVICE
    chunk_axis_index: Optional[int] = 2
    unchunkable: bool = False
    total_runs: int = 1

    def __post_init__(self):
        if isinstance(self.shape, (str, bytes)) or not hasattr(self.shape, "__iter__"):
            raise TypeError("shape must be a tuple of ints, not %r" % (self.shape,))
        self.shape = tuple(_index(d, "shape") for d in self.shape)
        if any(d < 0 for d in self.shape):
            raise ValueError("shape %r has a negative dimension" % (self.shape,))
        dtypes.itemsize(self.dtype)  # TypeError for what cannot be sized
        if self.memory not in MEMORY_TYPES:
            raise ValueError("memory must be one of %s, not %r" % (MEMORY_TYPES, self.memory))
        if self.chunk_axis_index is not None:
            self.chunk_axis_index = _index(self.chunk_axis_index, "chunk_axis_index")
            if self.chunk_axis_index < 0:
                raise ValueError("chunk_axis_index must be >= 0")
        if not isinstance(self.unchunkable, bool):
            raise TypeError("unchunkable must be a bool, not %r" % (self.unchunkable,))
        self.total_runs = _index(self.total_runs, "total_runs")
        if self.total_runs < 1:
            raise ValueError("total_runs must be >= 1")

    @property
    def chunkable(self):
        """cubie's is_request_chunkable()."""
        axis = self.chunk_axis_index
        return (not self.unchunkable and axis is not None and axis < len(self.shape)
                and self.shape[axis] != 1)

    @property
    def itemsize(self):
        return dtypes.itemsize(self.dtype)

    @property
    def nbytes(self):
        n = self.itemsize
        for d in self.shape:
            n *= d
        return n

    def broker(self):
        """The broker's request for this array (a gpubroker.ArrayRequest)."""
        if self.memory == S.V_MEM_MANAGED:
            raise NotImplementedError("Managed memory not implemented")
        axis = self.chunk_axis_index if self.chunkable else 0
        return BrokerRequest(self.shape, self.dtype, axis, not self.chunkable, self.memory)


@dataclasses.dataclass
class ArrayResponse:
    """What an allocation_ready_hook receives
    (cubie.memory.array_requests.ArrayResponse): @arr {label: array},
    @chunks how many chunks the run axis was cut into, @chunk_length the
    runs per chunk, @chunked_shapes {label: shape of one chunk}; and
    @axis_length, the unchunked length of the run axis (the broker's)."""

    arr: dict = dataclasses.field(default_factory=dict)
    chunks: int = 1
    chunk_length: int = 1
    chunked_shapes: dict = dataclasses.field(default_factory=dict)
    axis_length: int = 0


def check_requests(requests):
    """cubie's _check_requests: TypeError unless a dict of ArrayRequests
    (this module's, or cubie's own, which are converted)."""
    if not isinstance(requests, dict):
        raise TypeError("Expected dict for requests, got %s" % type(requests))
    out = {}
    for key, request in requests.items():
        out[key] = as_request(request, key)
    return out


def as_request(request, key="request"):
    """@request as this module's ArrayRequest: one of ours as it is, one of
    cubie's (same fields) converted; anything else is a TypeError."""
    if isinstance(request, ArrayRequest):
        return request
    fields = ("dtype", "shape", "memory", "chunk_axis_index", "unchunkable", "total_runs")
    if type(request).__name__ == "ArrayRequest" and all(hasattr(request, f) for f in fields):
        return ArrayRequest(**{f: getattr(request, f) for f in fields})
    raise TypeError("Expected ArrayRequest for %s, got %s" % (key, type(request)))
