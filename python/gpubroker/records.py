"""Plain records for the library's result structs, named as in gpubroker.h."""

import dataclasses

from . import _lib, _schema as S

MODES = (S.V_MODE_PASSIVE, S.V_MODE_ACTIVE)  # enum gpb_mode, by value


def _record(name, struct, doc, overrides=None):
    """A frozen dataclass with @struct's fields; char arrays become str."""
    overrides = overrides or {}
    fields = [(f, overrides.get(f, t)) for f, t in
              ((f[0], object) for f in struct._fields_)]
    cls = dataclasses.make_dataclass(name, fields, frozen=True)
    cls.__doc__ = doc
    cls.__module__ = __name__

    def from_struct(s):
        values = {}
        for f, _ in fields:
            v = getattr(s, f)
            if isinstance(v, bytes):
                v = _lib.text(v)
            values[f] = v
        if "mode" in values and isinstance(values["mode"], int):
            values["mode"] = MODES[values["mode"]] if 0 <= values["mode"] < 2 else values["mode"]
        return cls(**values)

    cls.from_struct = staticmethod(from_struct)
    return cls


MemInfo = _record("MemInfo", _lib.gpb_mem_info,
                  "Memory as one instance sees it (struct gpb_mem_info).")
PoolStats = _record("PoolStats", _lib.gpb_pool_stats,
                    "Pool statistics of one device in CuPy/RMM terms (struct gpb_pool_stats).")
InstanceInfo = _record("InstanceInfo", _lib.gpb_instance_info,
                       "One instance as the policy sees it (struct gpb_instance_info).")
PolicyInfo = _record("PolicyInfo", _lib.gpb_policy_info,
                     "The policy of one device (struct gpb_policy_info); mode is "
                     "'active' or 'passive'.")
GroupInfo = _record("GroupInfo", _lib.gpb_group_info, "A stream group (struct gpb_group_info).")
Chunking = _record("Chunking", _lib.gpb_chunking,
                   "How a request was (or would be) chunked (struct gpb_chunking).")
MappingStats = _record("MappingStats", _lib.gpb_mapping_stats,
                       "This process's slab mappings (struct gpb_mapping_stats).")


@dataclasses.dataclass(frozen=True)
class Event:
    """An event from the daemon: ``name`` ("cap_changed", "allocation_ready",
    "invalidate", "shutdown", "evicted") and ``data``, its data object as
    the protocol gives it (64-bit quantities and ids are strings there)."""

    name: str
    data: dict


@dataclasses.dataclass(frozen=True)
class ArrayRequest:
    """One array request for queue_request() and chunk_parameters()
    (cubie's ArrayRequest as far as sizing goes): @shape a numpy-style
    shape, @dtype any dtype gpubroker.dtypes understands, @chunk_axis the run
    axis chunking divides, @unchunkable to keep the full shape in every
    chunk, @memory the memory type (cubie's memory_type): "device", or host
    memory "pinned" or "mapped" (cut to the chunk length like the others, but
    not counted when the chunk count is fitted; claimed as host memory)."""

    shape: tuple
    dtype: object = "float32"
    chunk_axis: int = 0
    unchunkable: bool = False
    memory: str = S.V_MEM_DEVICE
