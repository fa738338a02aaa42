"""ctypes declarations of libgpubroker (include/gpubroker.h), loaded once.

The library is looked for in this order:

1. ``$GPUBROKER_LIBRARY``: an explicit path (the test runner sets it), the
   only one tried when set (a path that does not exist is an ImportError);
2. the path ``meson install`` wrote into ``_config.py``, if any;
3. ``build/client/libgpubroker.so`` of the source tree this package sits in
   (running from a checkout);
4. the system: ``ctypes.util.find_library('gpubroker')``, then
   ``libgpubroker.so.0``.
"""

import ctypes
import ctypes.util
import os
import threading

from . import _schema

c_u64 = ctypes.c_uint64
c_int = ctypes.c_int
c_uint = ctypes.c_uint
c_double = ctypes.c_double
c_char_p = ctypes.c_char_p
c_void_p = ctypes.c_void_p


class gpb_register_opts(ctypes.Structure):
    _fields_ = [
        ("name", c_char_p),
        ("device", c_int),
        ("proportion", c_double),
        ("group", c_char_p),
        ("device_uuid", c_char_p),
    ]


class gpb_allocation(ctypes.Structure):
    _fields_ = [
        ("id", c_u64),
        ("ptr", c_void_p),
        ("size", c_u64),
        ("device", c_int),
        ("slab", c_u64),
        ("offset", c_u64),
    ]


class gpb_framework_stats(ctypes.Structure):
    _fields_ = [(name, c_u64) for name in
                ("allocated", "peak", "reserved", "live", "allocs", "frees", "refused")]


class gpb_mem_info(ctypes.Structure):
    _fields_ = [
        ("cap", c_u64),
        ("used", c_u64),
        ("free", c_u64),
        ("device_total", c_u64),
        ("device_free", c_u64),
        ("leased", c_u64),
        ("in_use", c_u64),
        ("leases", c_u64),
        ("recalls_sent", c_u64),
        ("recalls_answered", c_u64),
        ("recalls_pending", c_u64),
        ("recalls_timed_out", c_u64),
    ]


class gpb_instance_info(ctypes.Structure):
    _fields_ = [
        ("instance", c_u64),
        ("session", c_u64),
        ("device", c_int),
        ("grouped", c_int),
        ("proportion", c_double),
        ("share", c_double),
        ("cap", c_u64),
        ("used", c_u64),
        ("free", c_u64),
        ("name", ctypes.c_char * (_schema.MAX_NAME + 1)),
        ("group", ctypes.c_char * (_schema.MAX_NAME + 1)),
        ("warning", ctypes.c_char * 160),
    ]


class gpb_policy_info(ctypes.Structure):
    _fields_ = [
        ("mode", c_int),
        ("min_auto_share", c_double),
        ("total", c_u64),
        ("capacity", c_u64),
        ("limit", c_u64),
        ("limit_fraction", c_double),
        ("used", c_u64),
        ("available", c_u64),
        ("manual", c_double),
        ("auto_pool", c_double),
        ("manual_instances", c_uint),
        ("auto_instances", c_uint),
        ("auto_cap", c_u64),
    ]


class gpb_group_info(ctypes.Structure):
    _fields_ = [
        ("members", c_uint),
        ("used", c_u64),
        ("available", c_u64),
        ("nearly_full", c_int),
    ]


MAX_DIMS = _schema.MAX_DIMS  # gpb_array_request.shape


class gpb_array_request(ctypes.Structure):
    _fields_ = [
        ("label", c_char_p),
        ("shape", c_u64 * MAX_DIMS),
        ("ndim", c_uint),
        ("elem_size", c_uint),
        ("axis", c_uint),
        ("unchunkable", c_int),
        ("type", c_int),  # 0 device, 1 GPB_HOST_PINNED, 2 GPB_HOST_MAPPED
    ]


class gpb_chunking(ctypes.Structure):
    _fields_ = [
        ("axis_length", c_u64),
        ("chunk_length", c_u64),
        ("chunks", c_u64),
        ("request_bytes", c_u64),
        ("chunk_bytes", c_u64),
        ("available", c_u64),
        ("oversized", c_int),
    ]


class gpb_pool_stats(ctypes.Structure):
    _fields_ = [
        ("reserved", c_u64),
        ("used", c_u64),
        ("free", c_u64),
        ("free_blocks", c_u64),
        ("largest_free", c_u64),
        ("peak", c_u64),
        ("slabs", c_u64),
        ("live", c_u64),
        ("allocs", c_u64),
        ("frees", c_u64),
        ("ooms", c_u64),
        ("fenced", c_u64),
        ("leased", c_u64),
        ("in_use", c_u64),
        ("recalls_sent", c_u64),
        ("recalls_answered", c_u64),
        ("recalls_pending", c_u64),
        ("recalls_timed_out", c_u64),
    ]


class gpb_mapping_stats(ctypes.Structure):
    _fields_ = [("opens", c_u64), ("closes", c_u64), ("open_now", c_u64)]


class gpb_layout_buffer(ctypes.Structure):
    _fields_ = [
        ("component", c_char_p),
        ("name", c_char_p),
        ("size", c_u64),
        ("location", c_int),  # enum gpb_layout_location
        ("persistent", c_int),
        ("alias", c_char_p),
        ("precision", c_uint),
    ]


class gpb_layout_placement(ctypes.Structure):
    _fields_ = [
        ("space", c_int),  # enum gpb_layout_space
        ("offset", c_u64),
        ("bytes", c_u64),
        ("aliased_with", c_char_p),
    ]


class gpb_layout_sizes(ctypes.Structure):
    _fields_ = [
        ("shared", c_u64),
        ("local", c_u64),
        ("persistent_local", c_u64),
        ("shared_offset", c_u64),
        ("local_offset", c_u64),
        ("persistent_local_offset", c_u64),
    ]


class gpb_layout_component_info(ctypes.Structure):
    _fields_ = [
        ("name", c_char_p),
        ("parent", c_char_p),
        ("depth", c_uint),
        ("sizes", gpb_layout_sizes),
    ]


# void (*)(gpb_client *, const char *name, const char *data_json, void *userdata)
EVENT_FN = ctypes.CFUNCTYPE(None, c_void_p, c_char_p, c_char_p, c_void_p)

P = ctypes.POINTER
# name: (restype, argtypes)
_PROTOTYPES = {
    "gpb_strerror": (c_char_p, [c_int]),
    "gpb_last_error": (c_char_p, []),
    "gpb_connect": (c_int, [c_char_p, c_char_p, P(c_void_p)]),
    "gpb_disconnect": (None, [c_void_p]),
    "gpb_register": (c_int, [c_void_p, P(gpb_register_opts), P(c_u64)]),
    "gpb_unregister": (c_int, [c_void_p, c_u64]),
    "gpb_alloc": (c_int, [c_void_p, c_u64, c_u64, c_u64, P(gpb_allocation)]),
    "gpb_alloc_wait": (c_int, [c_void_p, c_u64, c_u64, c_u64, ctypes.c_uint32, P(gpb_allocation)]),
    "gpb_alloc_async": (c_int, [c_void_p, c_u64, c_u64, c_u64, c_void_p, P(gpb_allocation)]),
    "gpb_free": (c_int, [c_void_p, c_u64]),
    "gpb_free_async": (c_int, [c_void_p, c_u64, c_void_p]),
    "gpb_release_kept": (c_int, [c_void_p]),
    "gpb_attach": (c_int, [c_void_p, c_u64, P(gpb_allocation)]),
    "gpb_detach": (c_int, [c_void_p, c_u64]),
    "gpb_export": (c_int, [c_void_p, c_u64, c_char_p, ctypes.c_int64]),
    "gpb_unexport": (c_int, [c_void_p, c_char_p]),
    "gpb_open_shared": (c_int, [c_void_p, c_char_p, P(gpb_allocation)]),
    "gpb_open_shared_from": (c_int, [c_void_p, ctypes.c_int64, c_char_p, P(gpb_allocation)]),
    "gpb_mem_info": (c_int, [c_void_p, c_u64, P(gpb_mem_info)]),
    "gpb_device_index": (c_int, [c_void_p, c_char_p, P(c_int)]),
    "gpb_alloc_host": (c_int, [c_void_p, c_u64, c_u64, c_int, P(gpb_allocation)]),
    "gpb_host_device_pointer": (c_int, [c_void_p, c_u64, P(c_void_p)]),
    "gpb_set_proportion": (c_int, [c_void_p, c_u64, c_double, P(gpb_instance_info)]),
    "gpb_set_auto": (c_int, [c_void_p, c_u64, P(gpb_instance_info)]),
    "gpb_set_group": (c_int, [c_void_p, c_u64, c_char_p, P(gpb_instance_info)]),
    "gpb_instance_info": (c_int, [c_void_p, c_u64, P(gpb_instance_info)]),
    "gpb_policy_info": (c_int, [c_void_p, c_int, P(gpb_policy_info)]),
    "gpb_group_info": (c_int, [c_void_p, c_char_p, P(gpb_group_info)]),
    "gpb_queue_request": (c_int, [c_void_p, c_u64, P(gpb_array_request), ctypes.c_size_t]),
    "gpb_allocate_queue": (c_int, [c_void_p, c_u64, P(gpb_chunking)]),
    "gpb_chunk_parameters": (
        c_int,
        [c_void_p, c_char_p, c_u64, c_u64, P(gpb_array_request), ctypes.c_size_t,
         P(gpb_chunking), P(c_u64 * MAX_DIMS)],
    ),
    "gpb_chunked_shapes": (
        c_int,
        [c_void_p, c_u64, c_u64, P(gpb_array_request), ctypes.c_size_t,
         P(gpb_chunking), P(c_u64 * MAX_DIMS)],
    ),
    "gpb_claim": (c_int, [c_void_p, c_u64, P(gpb_allocation)]),
    "gpb_free_label": (c_int, [c_void_p, c_u64, c_char_p]),
    "gpb_invalidate_all": (c_int, [c_void_p]),
    "gpb_set_allocator": (c_int, [c_void_p, c_char_p]),
    "gpb_set_mode": (c_int, [c_void_p, c_int]),
    "gpb_set_limit": (c_int, [c_void_p, c_int, c_u64, c_double]),
    "gpb_stats": (c_int, [c_void_p, c_int, P(gpb_pool_stats)]),
    # result_json is returned through char ** and released with gpb_string_free:
    # declared as void * so that ctypes does not copy and lose the pointer.
    "gpb_request": (c_int, [c_void_p, c_char_p, c_char_p, P(c_void_p)]),
    "gpb_string_free": (None, [c_void_p]),
    "gpb_set_event_callback": (None, [c_void_p, EVENT_FN, c_void_p]),
    "gpb_event_fd": (c_int, [c_void_p]),
    "gpb_dispatch": (c_int, [c_void_p]),
    "gpb_version": (c_char_p, []),
    "gpb_copy_to_device": (c_int, [c_void_p, c_void_p, ctypes.c_size_t, c_void_p]),
    "gpb_copy_from_device": (c_int, [c_void_p, c_void_p, ctypes.c_size_t, c_void_p]),
    "gpb_mapping_stats": (c_int, [P(gpb_mapping_stats)]),
    # PyTorch's allocator (gpubroker.torch); called through ctypes by the tests.
    "gpb_torch_alloc": (c_void_p, [ctypes.c_ssize_t, c_int, c_void_p]),
    "gpb_torch_free": (None, [c_void_p, ctypes.c_ssize_t, c_int, c_void_p]),
    "gpb_torch_free3": (None, [c_void_p, ctypes.c_ssize_t, c_void_p]),
    "gpb_torch_mem_info": (c_int, [c_int, P(c_u64), P(gpb_mem_info)]),
    "gpb_torch_stats": (c_int, [c_int, P(gpb_framework_stats)]),
    "gpb_torch_reset_peak": (c_int, [c_int]),
    # CuPy's CFunctionAllocator (gpubroker.cupy.c_allocator): CuPy calls the
    # first two by address; ctypes only for the tests.
    "gpb_cupy_malloc": (c_void_p, [c_void_p, ctypes.c_size_t, c_int]),
    "gpb_cupy_free": (None, [c_void_p, c_void_p, c_int]),
    "gpb_cupy_mem_info": (c_int, [c_int, P(c_u64), P(gpb_mem_info)]),
    # The layout planner: a gpb_layout * is a void * here.
    "gpb_layout_create": (c_int, [P(c_void_p)]),
    "gpb_layout_destroy": (None, [c_void_p]),
    "gpb_layout_add_component": (c_int, [c_void_p, c_char_p, c_char_p]),
    "gpb_layout_add_buffer": (c_int, [c_void_p, P(gpb_layout_buffer)]),
    "gpb_layout_compute": (c_int, [c_void_p]),
    "gpb_layout_buffer_info": (c_int, [c_void_p, c_char_p, c_char_p, P(gpb_layout_placement)]),
    "gpb_layout_component_sizes": (c_int, [c_void_p, c_char_p, P(gpb_layout_sizes)]),
    "gpb_layout_block_size": (
        c_int,
        [c_void_p, c_char_p, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint32,
         P(ctypes.c_uint32)],
    ),
    "gpb_layout_buffer_at": (
        c_int, [c_void_p, ctypes.c_size_t, P(gpb_layout_buffer), P(gpb_layout_placement)]),
    "gpb_layout_component_at": (
        c_int, [c_void_p, ctypes.c_size_t, P(gpb_layout_component_info)]),
}


def _candidates():
    explicit = os.environ.get("GPUBROKER_LIBRARY")
    if explicit:
        # An explicit choice is the only one: a wrong path should fail, not
        # silently load another copy.
        return [explicit]
    found = []
    try:
        from . import _config  # written by `meson install`

        if getattr(_config, "LIBRARY", None):
            found.append(_config.LIBRARY)
    except ImportError:
        pass
    here = os.path.dirname(os.path.abspath(__file__))
    top = os.path.dirname(os.path.dirname(here))
    in_tree = os.path.join(top, "build", "client", "libgpubroker.so")
    if os.path.exists(in_tree):
        found.append(in_tree)
    name = ctypes.util.find_library("gpubroker")
    if name:
        found.append(name)
    found.append("libgpubroker.so.0")
    return found


def _load():
    explicit = os.environ.get("GPUBROKER_LIBRARY")
    if explicit and os.sep in explicit and not os.path.exists(explicit):
        # dlopen's message would blame a dependency as readily as the file.
        raise ImportError("gpubroker: GPUBROKER_LIBRARY names %s, which does not exist"
                          % explicit)
    errors = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            errors.append("%s: %s" % (path, e))
            continue
        for name, (restype, argtypes) in _PROTOTYPES.items():
            fn = getattr(lib, name)
            fn.restype = restype
            fn.argtypes = argtypes
        return lib
    raise ImportError(
        "gpubroker: cannot load libgpubroker (set GPUBROKER_LIBRARY to its path): "
        + "; ".join(errors)
    )


_lib = None
_lib_lock = threading.Lock()


def lib():
    """The loaded library (loaded on first use, so that importing the
    package never fails for want of it)."""
    global _lib
    if _lib is None:
        with _lib_lock:
            if _lib is None:
                _lib = _load()
    return _lib


def text(b):
    """A C string (bytes or None) as str."""
    return b.decode("utf-8", "replace") if b else ""


def cstr(s):
    """A str (or None) as a C string argument."""
    return None if s is None else s.encode("utf-8")
